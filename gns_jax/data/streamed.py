"""Synthetic graphs of any size written straight to a gns-jax folder, in bounded memory.

:func:`write_synthetic` writes, for the same options and random generator, exactly what
:func:`~gns_jax.data.synthetic.synthetic` followed by :func:`~gns_jax.data.ondisk.save_dataset`
writes (``tests/test_streamed.py`` compares the two folders array by array), but it never holds
the edge list or the feature matrix in memory:

* per-node arrays (class, the cumulative degree weights, the class order, the split's
  permutation, the CSR offsets) stay in memory: about 40 bytes per node;
* the undirected edges are drawn in chunks. The in-memory generator draws all sources'
  uniforms, then all homophily coins, then all targets' uniforms from one PCG64 stream; here three
  copies of that stream, advanced (``PCG64.advance``) to where each of the three runs starts,
  are read in step, one chunk at a time, so every edge gets the numbers it gets in memory;
* each chunk's two directed keys ``receiver * N + sender`` (self-loops dropped) are appended to
  one of B bucket files on disk by receiver range (16 bytes per undirected edge in all); each
  bucket is then sorted and deduplicated in memory (``np.unique``, the in-memory path's one
  sort, on 1/B of the keys) and appended to ``indices.npy``, its counts giving ``indptr``;
* the feature rows are drawn and written a chunk of rows at a time (the normal draws are
  consumed in row order, so chunks read the in-memory stream).

Peak memory is the per-node arrays plus one bucket (``bucket_bytes``, 128 MiB by default, about
five times that while it is sorted) plus one chunk of edges or feature rows, whatever the number
of edges or features. Measured at products scale (2.4M nodes, 116.6M directed edges, 100
features; 256 MiB buckets): peak RSS 2.2 GiB against 11.7 GiB for the in-memory build, the same
CPU time (440 s), the same bytes on disk. ``gns-jax save --dataset synthetic:...`` takes this
path whenever the in-memory one would need more than :data:`STREAM_ABOVE` bytes.
"""

from __future__ import annotations

import io
import math
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from gns_jax.data.dataset import check_alloc
from gns_jax.data.synthetic import (
    _EDGE_BYTES,  # the in-memory path's working memory per directed edge
    check_sizes,
    draw_nodes,
    random_split,
    split_sizes,
)
from gns_jax.errors import DatasetError

__all__ = ["STREAM_ABOVE", "in_memory_bytes", "write_synthetic"]

STREAM_ABOVE = 2 << 30  # gns-jax save streams a synthetic graph whose in-memory build needs more
_NODE_BYTES = 48  # labels, weight, order, cum, perm, indptr: what stays in memory per node


def in_memory_bytes(nodes: int, degree: float, features: int) -> int:
    """An estimate of the in-memory path's peak: the feature matrix and the edge arrays."""
    return int(nodes) * int(features) * 4 + int(nodes * degree) * _EDGE_BYTES


def write_synthetic(
    rng: np.random.Generator,
    folder: str | os.PathLike,
    *,
    nodes: int,
    degree: float,
    features: int,
    classes: int,
    homophily: float = 0.8,
    signal: float = 0.5,
    exponent: float = 2.5,
    name: str = "synthetic",
    train: float = 0.08,
    val: float = 0.02,
    test: float | None = None,
    feature_dtype: str = "float32",
    chunk_edges: int = 1 << 22,
    bucket_bytes: int = 128 << 20,
    log: Callable[[str], None] | None = None,
    multilabel: float = 0.0,
) -> dict:
    """Writes :func:`~gns_jax.data.synthetic.synthetic`'s graph to ``folder``, streamed.

    Args:
      rng: a ``np.random.Generator`` on PCG64 (``np.random.default_rng``), in the state
        :func:`~gns_jax.data.synthetic.synthetic` would receive: same state, same dataset.
      folder: a new or empty folder; written in the gns-jax directory format, ``meta.json`` last.
      nodes, degree, features, classes, homophily, signal, exponent, name, train, val, test:
        as for :func:`~gns_jax.data.synthetic.synthetic`.
      feature_dtype: ``float32`` or ``float16`` on disk.
      chunk_edges: undirected edges drawn per chunk (the feature rows per chunk take about as
        many bytes).
      bucket_bytes: the size of one bucket of keys on disk; sorted in memory one at a time.
      log: called with one line of progress per phase and chunk group (None: silent).
      multilabel: must be 0: the streamed writer makes single-label graphs only.

    Returns:
      The folder's ``meta.json`` as a dict.

    Raises:
      DatasetError: impossible sizes, a generator that is not PCG64, a folder that is not new
        and empty or cannot be written, features beyond float16's range with ``float16``.
    """
    from gns_jax.data.ondisk import check_new_folder, write_meta

    check_sizes(name, nodes, degree, features, classes)
    if multilabel:
        raise DatasetError(
            f"{name}: a multi-label synthetic graph is generated in memory only; this one is "
            "large enough to be streamed, which makes single-label graphs"
        )
    if feature_dtype not in ("float32", "float16"):
        raise DatasetError(f"--feature-dtype: float32 or float16, got '{feature_dtype}'")
    if not isinstance(rng.bit_generator, np.random.PCG64):
        raise DatasetError(f"{name}: the streamed generator needs a PCG64 random generator")
    check_alloc((nodes, _NODE_BYTES), 1, name, "the per-node arrays (nodes x bytes)")
    split_sizes(nodes, train, val, test, name)
    folder = check_new_folder(folder)
    say = log or (lambda _line: None)
    try:
        # 1. Nodes: the in-memory generator's first draws, in its order.
        labels, order, cum, class_lo, class_hi = draw_nodes(rng, nodes, classes, exponent)
        num_edges = int(round(nodes * degree / 2))
        labels = labels.astype(np.int32)
        order = order.astype(np.int32)

        # 2. Edges: three copies of the stream at the starts of its three runs of E uniforms.
        base = rng.bit_generator.state
        streams = [_advanced(base, k * num_edges) for k in range(3)]
        width = _bucket_width(nodes, num_edges, bucket_bytes)
        buckets = -(-nodes // width)
        work = Path(tempfile.mkdtemp(prefix=".edges-", dir=folder))
        files = [open(work / f"{b}.bin", "wb") for b in range(buckets)]  # noqa: SIM115
        try:
            chunks = -(-num_edges // chunk_edges)
            for i, lo in enumerate(range(0, num_edges, chunk_edges)):
                n = min(chunk_edges, num_edges - lo)
                src, dst = _edge_chunk(
                    streams, n, cum, order, labels, class_lo, class_hi, homophily
                )
                _append_keys(files, src, dst, nodes, width)
                if (i + 1) % max(1, chunks // 10) == 0 or i + 1 == chunks:
                    say(f"edges: {lo + n:,} of {num_edges:,} drawn")
        finally:
            for f in files:
                f.close()
        del streams
        # The main stream continues after the 3E uniforms, with its 32-bit buffer kept.
        rng.bit_generator.state = _advanced(base, 3 * num_edges).bit_generator.state | {
            "has_uint32": base["has_uint32"],
            "uinteger": base["uinteger"],
        }
        indptr, total = _write_csr(work, buckets, width, nodes, folder, say)
        shutil.rmtree(work)

        # 3. Features, a chunk of rows at a time; then the split.
        means = rng.standard_normal((classes, features)).astype(np.float32)
        rows = max(1, (chunk_edges * 16) // (4 * features))
        dtype = np.dtype(feature_dtype)
        with _npy_file(folder / "features.npy", dtype, (nodes, features)) as out:
            for i, lo in enumerate(range(0, nodes, rows)):
                x = rng.standard_normal((min(rows, nodes - lo), features), dtype=np.float32)
                x += np.float32(signal) * means[labels[lo : lo + rows]]
                if dtype == np.float16 and np.abs(x).max(initial=0) > np.finfo(np.float16).max:
                    raise DatasetError(
                        f"--feature-dtype float16: features beyond ±65504 in rows {lo}.. would "
                        "become infinite; keep float32"
                    )
                out.write(x.astype(dtype, copy=False).tobytes())
                if (i + 1) % max(1, -(-nodes // rows) // 10) == 0 or lo + rows >= nodes:
                    say(f"features: {min(lo + rows, nodes):,} of {nodes:,} rows written")
        splits, described = random_split(rng.permutation(nodes), train, val, test, name)
        np.save(folder / "indptr.npy", indptr)
        np.save(folder / "labels.npy", labels)
        for key, value in zip(("train_idx", "val_idx", "test_idx"), splits):
            np.save(folder / f"{key}.npy", value.astype(np.int32))
        meta = dict(
            name=name,
            num_nodes=int(nodes),
            num_edges=int(total),
            num_features=int(features),
            num_classes=int(classes),
            multilabel=False,
            feature_dtype=feature_dtype,
            split=described,
        )
        meta = write_meta(folder, meta)
    except OSError as e:
        raise DatasetError(f"{folder}: cannot write the dataset ({e.strerror or e})") from None
    return meta


def _advanced(state: dict, delta: int) -> np.random.Generator:
    """A generator on a copy of the PCG64 ``state`` advanced by ``delta`` 64-bit draws."""
    bits = np.random.PCG64()
    bits.state = state
    if delta:
        bits.advance(delta)
    return np.random.Generator(bits)


def _bucket_width(nodes: int, num_edges: int, bucket_bytes: int) -> int:
    """Nodes per bucket, so that a bucket holds about ``bucket_bytes`` of 8-byte keys."""
    buckets = max(1, math.ceil(2 * num_edges * 8 / max(1, bucket_bytes)))
    return max(1, -(-nodes // buckets))


def _edge_chunk(streams, n, cum, order, labels, class_lo, class_hi, homophily):
    """``n`` undirected edges, each from the same uniforms as in the in-memory generator."""
    a, b, c = streams
    nodes = cum.shape[0]
    total = np.full(n, cum[-1])

    def draw(stream, lo, hi):
        pos = np.searchsorted(cum, lo + stream.random(n) * (hi - lo), side="right")
        return order[np.minimum(pos, nodes - 1)]

    src = draw(a, np.zeros(n), total)
    same = b.random(n) < homophily
    k = labels[src]
    dst = draw(c, np.where(same, class_lo[k], 0.0), np.where(same, class_hi[k], total))
    return src, dst


def _append_keys(files, src, dst, nodes, width):
    """Appends both directions' keys ``receiver * N + sender`` to their receivers' buckets."""
    keep = src != dst
    src, dst = src[keep].astype(np.int64), dst[keep].astype(np.int64)
    receiver = np.concatenate([dst, src])
    key = receiver * np.int64(nodes) + np.concatenate([src, dst])
    bucket = receiver // width
    by = np.argsort(bucket, kind="stable")
    bounds = np.searchsorted(bucket[by], np.arange(len(files) + 1))
    key = key[by]
    for b, f in enumerate(files):
        if bounds[b + 1] > bounds[b]:
            f.write(key[bounds[b] : bounds[b + 1]].tobytes())


def _write_csr(work, buckets, width, nodes, folder, say):
    """Sorts and deduplicates each bucket into ``indices.npy``; returns (indptr, edge count)."""
    counts = np.zeros(nodes, dtype=np.int64)
    with _npy_file(folder / "indices.npy", np.dtype(np.int32), None) as out:
        total = 0
        for b in range(buckets):
            key = np.unique(np.fromfile(work / f"{b}.bin", dtype=np.int64))
            (work / f"{b}.bin").unlink()
            receiver = key // nodes
            out.write((key - receiver * nodes).astype(np.int32).tobytes())
            lo = b * width
            counts[lo : lo + width] = np.bincount(receiver - lo, minlength=min(width, nodes - lo))
            total += key.size
            del key, receiver
            if (b + 1) % max(1, buckets // 10) == 0 or b + 1 == buckets:
                say(f"graph: {b + 1} of {buckets} buckets sorted, {total:,} directed edges")
        out.shape = (total,)
    indptr = np.zeros(nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, total


class _npy_file:
    """A ``.npy`` file written as raw C-order bytes after its header (no memory map).

    ``shape=None``: a 1-D array of a length known only at the end; set ``.shape`` before the
    file closes, and the header (written with room for any length) is rewritten in place.
    """

    def __init__(self, path: Path, dtype: np.dtype, shape: tuple | None):
        self.path, self.dtype, self.shape = path, dtype, shape
        self.header = _header(dtype, shape if shape is not None else (2**62,))

    def __enter__(self):
        self.file = open(self.path, "wb")  # noqa: SIM115
        self.file.write(self.header)
        return self

    def write(self, data: bytes) -> None:
        self.file.write(data)

    def __exit__(self, kind, *_):
        try:
            if kind is None:
                expected = len(self.header) + math.prod(self.shape) * self.dtype.itemsize
                if self.file.tell() != expected:
                    raise DatasetError(
                        f"{self.path}: wrote {self.file.tell():,} bytes, expected {expected:,}"
                    )
                header = _header(self.dtype, self.shape)
                if len(header) != len(self.header):  # cannot happen: both pad to 128 bytes
                    raise DatasetError(f"{self.path}: the .npy header changed length")
                self.file.seek(0)
                self.file.write(header)
        finally:
            self.file.close()


def _header(dtype: np.dtype, shape: tuple) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer,
        {
            "descr": np.lib.format.dtype_to_descr(dtype),
            "fortran_order": False,
            "shape": tuple(int(s) for s in shape),
        },
    )
    return buffer.getvalue()
