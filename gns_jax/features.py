"""The host feature store and the host -> device feature path. Boundary module.

Per batch, the ids of the input nodes come back from the sampling device. Rows of nodes in the
device cache (GNS) are gathered on the accelerator; only the other rows are gathered from the host
store (NumPy; a memory-mapped array works too), in node-id order (file order; the ids sorted
with a bitmap, :func:`gns_jax.gather.sorted_order`), with one copy (split over up to four
threads, :func:`gns_jax.gather.take_rows`) into the loader's host buffer, kept from batch to
batch, of which a batch uses the number of missing rows rounded up to a bucket (at most 12.5 %
more). Only that buffer (float16 when the store is,
float32 otherwise) and an int32 rank per row cross to the accelerator (counted under the tag
``"features"``); on JAX's CPU backend the buffer, allocated 64-byte aligned, is used in place. A
small jitted ``assemble`` then builds the fixed ``[max_src, F]`` float32 input of the train step,
so the step's shapes never depend on the data: it compiles once, and the assembler once per row
bucket (a handful per run, reported). Node-wise
sampling passes no cache: every input row comes from the host.

On JAX's CPU backend, where the device is the host, that assembly would be a second copy of every
row: there (from a float32 store) each row is written once, on the host, straight into its slot
of a fresh aligned buffer that becomes the device array without a copy
(:meth:`FeatureLoader._load_in_place`); the same array, the same bytes counted.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import threading
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gns_jax.cache import DeviceCache
from gns_jax.gather import SortScratch, sorted_order, take_rows
from gns_jax.meters import CompileCounter, TransferMeter
from gns_jax.sampling.budget import bucket
from gns_jax.timing import Stopwatch

__all__ = [
    "FeatureLoader",
    "HostFeatures",
    "SparseFeatures",
    "neighbour_means",
    "normalize_rows",
    "pad_to_chunks",
]


def pad_to_chunks(chunk: int, *arrays: tuple[np.ndarray, type]) -> list[np.ndarray]:
    """Zero-pads equal-length arrays to whole chunks, each reshaped to ``[num_chunks, chunk]``."""
    length = arrays[0][0].shape[0]
    total = max(1, -(-length // chunk)) * chunk
    out = []
    for a, dtype in arrays:
        padded = np.zeros(total, dtype=dtype)
        padded[:length] = a
        out.append(padded.reshape(-1, chunk))
    return out


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["rows", "cols", "values"],
    meta_fields=["num_rows", "num_cols"],
)
@dataclasses.dataclass(frozen=True)
class SparseFeatures:
    """A ``[num_rows, num_cols]`` feature matrix in coordinate form, padded to whole chunks
    (padding values are 0). A pytree; the two sizes are static.

    Evaluation multiplies the features of all nodes by the first layer's weights; for bag-of-words
    features (under 1 % non-zero on Cora, CiteSeer, Coauthor, Facebook) the product over the
    non-zeros is far cheaper than a dense matmul and gives the same numbers up to rounding.
    """

    rows: jax.Array  # int32 [num_chunks, chunk]
    cols: jax.Array  # int32 [num_chunks, chunk]
    values: jax.Array  # float32 [num_chunks, chunk]
    num_rows: int
    num_cols: int

    @classmethod
    def from_dense(cls, x: np.ndarray, chunk: int = 1 << 16) -> SparseFeatures:
        rows, cols = np.nonzero(x)
        values = x[rows, cols]
        parts = pad_to_chunks(chunk, (rows, np.int32), (cols, np.int32), (values, np.float32))
        return cls(*parts, num_rows=int(x.shape[0]), num_cols=int(x.shape[1]))

    def matmul(self, kernel: jax.Array) -> jax.Array:
        """``X @ kernel`` (``[num_rows, out]``), one chunk of non-zeros at a time. Jittable."""

        def body(acc, chunk):
            r, c, v = chunk
            out = jax.ops.segment_sum(kernel[c] * v[:, None], r, num_segments=self.num_rows)
            return acc + out, None

        init = jnp.zeros((self.num_rows, kernel.shape[1]), kernel.dtype)
        out, _ = jax.lax.scan(body, init, (self.rows, self.cols, self.values))
        return out

    def dense(self) -> jax.Array:
        """The dense ``[num_rows, num_cols]`` float32 matrix. Jittable."""
        out = jnp.zeros((self.num_rows, self.num_cols), jnp.float32)
        return out.at[self.rows.reshape(-1), self.cols.reshape(-1)].add(self.values.reshape(-1))


class HostFeatures(NamedTuple):
    """A host (possibly memory-mapped) feature matrix that evaluation streams in row chunks.

    The first layer's row-wise projections are computed ``chunk`` rows at a time (each chunk moved
    to the device, float32, and dropped), so neither the host RAM nor the device ever holds the
    whole matrix; the layers above work on ``hidden``-wide rows.
    """

    array: np.ndarray
    chunk: int = 1 << 16


def neighbour_means(graph, features: np.ndarray) -> np.ndarray:
    """``x̄_v = (1/d_v) sum_{u in N(v)} x_u`` for every node (0 for isolated ones): float32
    ``[N, F]``, one sparse product (the exact input layer reads these rows)."""
    import scipy.sparse as sp

    degree = np.diff(graph.indptr)
    weight = np.repeat(1.0 / np.maximum(degree, 1), degree).astype(np.float32)
    adjacency = sp.csr_matrix(
        (weight, graph.indices, graph.indptr), shape=(graph.num_nodes, graph.num_nodes)
    )
    return np.ascontiguousarray(adjacency @ np.asarray(features, dtype=np.float32), np.float32)


def normalize_rows(features: np.ndarray) -> np.ndarray:
    """Divides each row by the sum of its absolute values (rows of zeros stay zero). Host-side."""
    norm = np.abs(features).sum(axis=1, keepdims=True)
    return (features / np.where(norm > 0, norm, 1.0)).astype(np.float32)


@jax.jit
def _slots(slot_of: jax.Array, src_nodes: jax.Array) -> jax.Array:
    return slot_of[jnp.where(src_nodes >= 0, src_nodes, slot_of.shape[0] - 1)]


def _assemble(rows, rank, src_nodes, slots, cache_rows):
    """Builds the float32 input: cached slots read ``cache_rows``, padding reads 0, and the k-th
    other real slot (in slot order) reads ``rows[rank[k]]`` (``rows`` are in node-id order)."""
    cached = slots < cache_rows.shape[0] - 1
    missing = (src_nodes >= 0) & ~cached
    index = rank[jnp.clip(jnp.cumsum(missing) - 1, 0, rows.shape[0] - 1)]
    from_host = jnp.where(missing[:, None], rows[index].astype(jnp.float32), 0.0)
    return jnp.where(cached[:, None], cache_rows[slots], from_host)


def _zero_rows(out: np.ndarray, mask: np.ndarray) -> None:
    """``out[mask] = 0``, by runs of rows (padding slots come in a few runs)."""
    edges = np.flatnonzero(np.diff(mask.astype(np.int8), prepend=0, append=0))
    if edges.shape[0] > 128:
        out[mask] = 0
        return
    for a, b in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
        out[a:b] = 0


class BufferPool:
    """Aligned float32 host buffers for inputs built in place, reused once free.

    A device array that uses a host buffer in place (JAX's CPU backend) keeps a reference to
    it until the array and every computation reading it are gone; so a buffer whose only
    references are the pool's is free to be written again. Reusing them keeps a batch's pages
    faulted in (a fresh 150 MB buffer a batch costs tens of milliseconds of page faults unless
    :func:`gns_jax.hostmem.keep_freed_memory` is on); at most ``size`` are kept, more are
    allocated and dropped."""

    def __init__(self, size: int = 16):
        self.size = size
        self._raw: list[np.ndarray] = []  # the owners (uint8), each with its aligned offset

    def take(self, shape: tuple[int, int]) -> np.ndarray:
        """A ``float32`` array of ``shape``, 64-byte aligned, no other array using it."""
        nbytes = int(np.prod(shape)) * 4
        for raw in self._raw:
            # references: the list, `raw` here and getrefcount's argument; a live view adds one
            if raw.nbytes >= nbytes + 64 and sys.getrefcount(raw) <= 3:
                return _aligned_view(raw, shape, np.float32)
        raw = np.empty(nbytes + 64, np.uint8)
        if len(self._raw) < self.size:
            self._raw.append(raw)
        return _aligned_view(raw, shape, np.float32)


def _aligned_view(raw: np.ndarray, shape, dtype, align: int = 64) -> np.ndarray:
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    start = -raw.ctypes.data % align
    return raw[start : start + size].view(dtype).reshape(shape)


def _aligned_empty(shape: tuple[int, int], dtype: np.dtype, align: int = 64) -> np.ndarray:
    """An uninitialised array whose data starts on an ``align``-byte boundary, which lets JAX's
    CPU backend use it in place (``device_put`` without a copy)."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return _aligned_view(np.empty(size + align, dtype=np.uint8), shape, dtype, align)


class FeatureLoader:
    """Moves the input-layer features of a batch to the device: cache hits stay there.

    Args:
      features: float ``[num_nodes, F]`` host array (may be a ``np.memmap``).
      meter: counts the bytes put, under the tag ``"features"``.
      means: the neighbour means (:func:`neighbour_means`), for input slots that hold
        ``num_nodes + v`` (the exact input layer); None otherwise.
      in_place: on JAX's CPU backend, build every batch's input in place on the host (one
        write of every row; see :meth:`_load_in_place`); False: the accelerator's path
        everywhere (the same numbers).
    """

    def __init__(
        self,
        features: np.ndarray,
        meter: TransferMeter,
        means: np.ndarray | None = None,
        in_place: bool = True,
    ):
        self.features = features
        self.in_place = in_place
        self.means = means
        # Rows cross as stored when float16 (half the bytes), as float32 otherwise.
        self._dtype = np.dtype(np.float16 if features.dtype == np.float16 else np.float32)
        self.meter = meter
        # Its own jitted assembler and counter: the compilations are this loader's (another
        # loader of the same shapes loads them from JAX's persistent compilation cache).
        self._traces = CompileCounter()
        self._assemble = jax.jit(self._traces.wrap(_assemble))
        self._no_cache = {}
        # Kept between batches, used by one load at a time (the lock): the host buffer the
        # rows are gathered into and the bitmap their ids are sorted in.
        self._host: np.ndarray | None = None
        self._pool = BufferPool()  # the in-place path's buffers, reused once no array holds one
        self._scratch = SortScratch()
        self._lock = threading.Lock()

    @property
    def compilations(self) -> int:
        """Assembler compilations (new row buckets) of this loader."""
        return self._traces.count

    def _empty_cache(self, src_nodes: jax.Array, device) -> tuple[jax.Array, jax.Array]:
        """Slots and rows of an empty cache (every slot is the dummy), made once per shape."""
        size = src_nodes.shape[0]
        if (size, device) not in self._no_cache:
            zero_row = np.zeros((1, self.features.shape[1]), np.float32)
            none = np.zeros(size, np.int32)  # slot 0 == the dummy row: nothing cached
            self._no_cache[size, device] = self.meter.put(
                (none, zero_row), tag="setup", device=device
            )
        return self._no_cache[size, device]

    def load(
        self,
        src_nodes: jax.Array,
        cache: DeviceCache | None = None,
        watch: Stopwatch | None = None,
        device: jax.Device | None = None,
    ) -> tuple[jax.Array, int, int]:
        """Returns the ``[max_src, F]`` device input, real input rows, and rows moved.

        ``device``: where ``src_nodes`` and ``cache`` live and the rows go (default: the meter's).

        ``watch`` times the phases ``gather`` (ids to the host, rows from the host store) and
        ``h2d`` (the buffer to the device and the on-device assembly, waited for).
        """
        watch = watch or Stopwatch()
        with self._lock:
            return self._load(src_nodes, cache, watch, device)

    def _load(self, src_nodes, cache, watch, device) -> tuple[jax.Array, int, int]:
        if self._in_place(device):
            return self._load_in_place(src_nodes, cache, watch, device)
        with watch("gather"):
            if cache is None:
                slots, cache_rows = self._empty_cache(src_nodes, device)
                ids = np.asarray(jax.device_get(src_nodes))
                missing = ids >= 0
            else:
                slots = _slots(cache.slot_of, src_nodes)
                cache_rows = cache.features
                ids, slot_host = (np.asarray(a) for a in jax.device_get((src_nodes, slots)))
                missing = (ids >= 0) & (slot_host == cache.features.shape[0] - 1)
            wanted = ids[missing]  # in slot order; distinct (a block's sources are)
            n = wanted.shape[0]
            size = bucket(n)
            # Rows are read in node-id order (file order for a memory-mapped store, and faster
            # in memory too); rank[k] is where the k-th wanted row (slot order) landed.
            ordered, wanted_rank = sorted_order(wanted, self._scratch)
            rank = np.zeros(size, dtype=np.int32)
            rank[:n] = wanted_rank
            buffer = self._buffer(size)  # rows n: are never read (assemble masks them)
            self._take(ordered, buffer[:n], None)
        with watch("h2d"):
            rows, rank = self.meter.put((buffer, rank), tag="features", device=device)
            x = self._assemble(rows, rank, src_nodes, slots, cache_rows)
            x = jax.block_until_ready(x)
            del rows  # the buffer is free again (on a CPU device, `rows` is the buffer itself)
        return x, int(np.count_nonzero(ids >= 0)), int(wanted.shape[0])

    def _in_place(self, device) -> bool:
        """Whether a batch for ``device`` is built in place: on JAX's CPU backend, from a float32
        store (no conversion), unless turned off (``in_place``)."""
        device = device or self.meter.device or jax.devices()[0]
        return (
            self.in_place
            and device.platform == "cpu"
            and self.features.dtype == np.float32
            and (self.means is None or self.means.dtype == np.float32)
        )

    def _load_in_place(self, src_nodes, cache, watch, device) -> tuple[jax.Array, int, int]:
        """The CPU backend's load: every row of the ``[max_src, F]`` input written once, on the
        host, straight into a fresh 64-byte aligned buffer that the device array then uses in
        place (``device_put`` without a copy; the array keeps the buffer alive). Host rows are
        read in node-id order and written to their slots, cached rows read from the cache's
        own memory (the device's is the host's), padding rows zeroed: the same array, bit for
        bit, as :meth:`_load`'s assembly on the device, which is a second pass over every row.
        The bytes counted are those :meth:`_load` puts."""
        with watch("gather"):
            ids = np.asarray(jax.device_get(src_nodes))
            out = self._pool.take((ids.shape[0], self.features.shape[1]))
            missing = ids >= 0
            if cache is not None:  # the cache's arrays are the CPU device's memory: no copy
                slot_of, rows = np.asarray(cache.slot_of), np.asarray(cache.features)
                real = np.flatnonzero(missing)
                slots = slot_of[ids[real]]
                hit = slots < rows.shape[0] - 1
                at = real[hit].astype(np.int32)
                missing[at] = False
                take_rows(rows, slots[hit], out, positions=at)
            where = np.flatnonzero(missing).astype(np.int32)
            ordered, wanted_rank = sorted_order(ids[where], self._scratch)
            positions = np.empty(where.shape[0], np.int32)
            positions[wanted_rank] = where  # ordered[j] goes to input slot positions[j]
            self._take(ordered, out, positions)
            _zero_rows(out, ids < 0)
        with watch("h2d"):
            size = bucket(where.shape[0])
            nbytes = size * (self.features.shape[1] * self._dtype.itemsize + 4)
            x = self.meter.put(out, tag="features", device=device, nbytes=nbytes)
            x = jax.block_until_ready(x)
        return x, int(np.count_nonzero(ids >= 0)), int(where.shape[0])

    def _take(self, ordered: np.ndarray, out: np.ndarray, positions: np.ndarray | None) -> None:
        """Rows ``ordered`` (ascending; ids from ``num_nodes`` on are neighbour-mean rows) into
        ``out`` (at ``positions``, or in order)."""
        own = int(np.searchsorted(ordered, self.features.shape[0]))  # then mean rows
        counter = self.meter.page_cache
        at = (lambda a, b: None) if positions is None else (lambda a, b: positions[a:b])
        head = out if positions is not None else out[:own]
        take_rows(self.features, ordered[:own], head, counter, at(0, own))
        if own < ordered.shape[0]:
            means = ordered[own:] - self.features.shape[0]
            tail = out if positions is not None else out[own:]
            take_rows(self.means, means, tail, counter, at(own, ordered.shape[0]))

    def _buffer(self, size: int) -> np.ndarray:
        """The first ``size`` rows of this loader's host buffer, 64-byte aligned, reused from
        batch to batch (grown when a batch needs more rows): no allocation of a batch's bytes,
        whose fresh pages would each fault in (glibc maps so large a block anew unless
        :func:`gns_jax.hostmem.keep_freed_memory` is set)."""
        if self._host is None or self._host.shape[0] < size:
            self._host = None  # freed before the larger one is made
            self._host = _aligned_empty((size, self.features.shape[1]), self._dtype)
            self._host[:] = 0  # no uninitialised bytes ever cross to the device
        return self._host[:size]
