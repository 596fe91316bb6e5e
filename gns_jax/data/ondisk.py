"""Datasets on disk: the project's memory-mapped directory format, and OGB's node-property layout.

**The gns-jax directory** (:func:`save_dataset` writes it, :func:`read_saved` maps it back)::

    meta.json                  {"format": "gns-jax-dataset", "version": 1, name, num_nodes, ...}
    indptr.npy   int64 [N+1]   the CSR graph (in-neighbours of every node, both directions)
    indices.npy  int32 [E]
    features.npy float32 or float16 [N, F]
    labels.npy   int32 [N]     -1 for unlabelled nodes (multi-label: int8 [N, L], 0/1, a row
                               of -1 unlabelled; meta.json says "multilabel": true)
    train_idx.npy, val_idx.npy, test_idx.npy   int32

Every array is a plain ``.npy`` (``np.load(..., allow_pickle=False)``) opened with
``mmap_mode="r"``: loading a 2.4M-node, 120M-edge graph takes seconds, and the feature matrix
is read row by row as batches need it, so it need not fit in memory (float16 on disk halves it
and the rows moved to the device; they are widened to float32 there).

``meta.json`` is written last, atomically (a temporary file renamed into place), so it marks a
complete save: a folder holding the arrays but no ``meta.json`` is reported as an incomplete
(interrupted) save. :func:`read_saved` checks ``meta.json`` (an object with every key above, of
the right type) and every array against it (dtype, shape, C order) and validates the whole
dataset, including that the stored CSR graph is undirected: unlike the other formats, whose
graphs are symmetrised on reading, a saved graph is used as stored, so a directed one is refused
(:meth:`~gns_jax.graph.CSRGraph.check_undirected`, one O(E) transpose). Errors name the folder
or the file, never the spec the dataset was generated from.

**OGB's node-property layout** (:func:`read_ogb`), as ``ogb`` unpacks ``ogbn-*`` datasets::

    DIR/raw/edge.*             [E, 2] source, target (each undirected edge once, or both ways)
    DIR/raw/node-feat.*        [N, F]
    DIR/raw/node-label.*       [N] or [N, 1]; NaN or negative for unlabelled nodes
    DIR/raw/num-node-list.*    (optional) [1] the node count
    DIR/split/<name>/train.*, valid.*, test.*   node ids

each file as ``.npy``, plain ``.csv`` or gzipped ``.csv.gz`` (comma-separated, no header, every
line with the same number of fields), or OGB's binary layout (``ogbn-papers100M``)::

    DIR/raw/data.npz           edge_index [2, E], node_feat [N, F], num_nodes_list [1]
    DIR/raw/node-label.npz     node_label [N] or [N, 1]; NaN for unlabelled nodes

read through :func:`~gns_jax.data.formats.open_npz` (every member's header checked before
anything is allocated; the arrays are read into memory). The graph is symmetrised on reading
(OGB's ``to_undirected``), self-loops and duplicate edges are dropped. Class ids must be
contiguous.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import warnings
import zlib
from pathlib import Path

import numpy as np

from gns_jax.data.dataset import (
    MAX_NODES,
    Dataset,
    advise_random,
    beyond_memory,
    check_kind,
    check_split_labels,
    class_count,
    memory_budget,
    require_file,
)
from gns_jax.data.formats import npy_header, open_npz
from gns_jax.errors import DatasetError
from gns_jax.graph import CSRGraph, from_edges

__all__ = ["FORMAT", "is_ogb_dir", "is_saved_dir", "read_ogb", "read_saved", "save_dataset"]

FORMAT = "gns-jax-dataset"
VERSION = 1
_ARRAYS = ("indptr", "indices", "features", "labels", "train_idx", "val_idx", "test_idx")
_CHUNK_BYTES = 1 << 28  # rows written / checked at a time: 256 MiB


def is_saved_dir(path: Path) -> bool:
    """A gns-jax folder, or what an interrupted ``gns-jax save`` left (any of its arrays)."""
    return (path / "meta.json").exists() or any((path / f"{a}.npy").exists() for a in _ARRAYS)


def save_dataset(dataset: Dataset, folder: str | os.PathLike, feature_dtype: str = "float32"):
    """Writes ``dataset`` to ``folder`` (created; must be empty) in the gns-jax directory format.

    Features are written in row chunks, so a memory-mapped source is never loaded whole.
    ``meta.json`` comes last, through a temporary file and ``os.replace``. Raises DatasetError
    naming ``folder`` when it is a file, is not empty or cannot be written.
    """
    if feature_dtype not in ("float32", "float16"):
        raise DatasetError(f"--feature-dtype: float32 or float16, got '{feature_dtype}'")
    created = not Path(folder).exists()
    folder = check_new_folder(folder)
    try:
        _write(dataset, folder, feature_dtype)
    except OSError as e:  # no partial dataset left: the folder was new or empty
        if created:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            for entry in folder.iterdir():
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
        raise DatasetError(f"{folder}: cannot write the dataset ({e.strerror or e})") from None


def check_new_folder(folder: str | os.PathLike) -> Path:
    """Creates ``folder`` unless it exists; DatasetError if it is a file or is not empty."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise DatasetError(f"{folder}: exists and is not a folder; choose a new folder")
    try:
        if folder.exists() and any(folder.iterdir()):
            raise DatasetError(f"{folder}: exists and is not empty; choose a new folder")
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DatasetError(f"{folder}: cannot write the dataset ({e.strerror or e})") from None
    return folder


def write_meta(folder: Path, meta: dict) -> dict:
    """Writes ``meta.json`` (format and version added) last and atomically; returns it."""
    meta = dict(format=FORMAT, version=VERSION, **meta)
    partial = folder / "meta.json.tmp"
    partial.write_text(json.dumps(meta, indent=1) + "\n")
    os.replace(partial, folder / "meta.json")  # last: marks the save complete
    return meta


def _write(ds: Dataset, folder: Path, feature_dtype: str) -> None:
    np.save(folder / "indptr.npy", np.asarray(ds.graph.indptr, np.int64))
    np.save(folder / "indices.npy", np.asarray(ds.graph.indices, np.int32))
    n, f = ds.features.shape
    out = np.lib.format.open_memmap(
        folder / "features.npy", mode="w+", dtype=np.dtype(feature_dtype), shape=(n, f)
    )
    step = max(1, _CHUNK_BYTES // max(1, 4 * f))
    for start in range(0, n, step):
        block = np.asarray(ds.features[start : start + step], dtype=np.float32)
        if feature_dtype == "float16" and np.abs(block).max(initial=0) > np.finfo(np.float16).max:
            raise DatasetError(
                f"--feature-dtype float16: features beyond ±65504 in rows {start}.. would "
                "become infinite; keep float32"
            )
        out[start : start + step] = block
    out.flush()
    del out
    np.save(folder / "labels.npy", np.asarray(ds.labels, np.int8 if ds.multilabel else np.int32))
    for name in ("train_idx", "val_idx", "test_idx"):
        np.save(folder / f"{name}.npy", np.asarray(getattr(ds, name), np.int32))
    write_meta(
        folder,
        dict(
            name=ds.name,
            num_nodes=ds.num_nodes,
            num_edges=ds.graph.num_edges,
            num_features=int(f),
            num_classes=int(ds.num_classes),
            multilabel=ds.multilabel,
            feature_dtype=feature_dtype,
            split=ds.split,
        ),
    )


def _load_npy(path: Path, mmap: bool = True) -> np.ndarray:
    """A ``.npy`` file, memory-mapped (or, with ``mmap=False``, copied into memory).

    Its header is checked first (no object dtypes), and it is always mapped before any copy, so
    a header that declares more data than the file holds is an error, never a huge allocation.
    """
    if not path.exists() and not path.is_symlink():
        raise DatasetError(f"{path}: missing")
    require_file(path)
    try:
        with open(path, "rb") as f:
            npy_header(f, str(path))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the header parses again (checked above)
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        return array if mmap else np.array(array)
    except DatasetError:
        raise
    except (ValueError, OSError, EOFError, OverflowError) as e:
        raise DatasetError(f"{path}: not a readable .npy array ({e})") from None


_META_SIZES = ("num_nodes", "num_edges", "num_features", "num_classes")


def _read_meta(folder: Path) -> dict:
    meta_path = folder / "meta.json"
    if meta_path.exists():
        require_file(meta_path)
    else:
        present = [f"{name}.npy" for name in _ARRAYS if (folder / f"{name}.npy").exists()]
        if present:
            raise DatasetError(
                f"{folder}: incomplete save (interrupted?): {', '.join(present)} but no "
                "meta.json, which gns-jax save writes last; save again into a new folder"
            )
        raise DatasetError(f"{meta_path}: missing (not a gns-jax dataset folder)")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError, RecursionError) as e:
        raise DatasetError(f"{meta_path}: not readable JSON ({e})") from None
    if not isinstance(meta, dict):
        raise DatasetError(f"{meta_path}: must be a JSON object, got {type(meta).__name__}")
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise DatasetError(
            f"{meta_path}: not a {FORMAT} version {VERSION} directory "
            f"(format={meta.get('format')!r}, version={meta.get('version')!r})"
        )
    for key in _META_SIZES:
        value = meta.get(key)
        if type(value) is not int or value < 0:
            raise DatasetError(
                f"{meta_path}: '{key}' must be a non-negative integer, got "
                + ("nothing (missing)" if key not in meta else repr(value)[:40])
            )
    if meta["num_nodes"] > MAX_NODES:
        raise DatasetError(f"{meta_path}: num_nodes={meta['num_nodes']} exceeds {MAX_NODES:,}")
    if meta.get("feature_dtype") not in ("float32", "float16"):
        raise DatasetError(
            f"{meta_path}: 'feature_dtype' must be float32 or float16, got "
            f"{repr(meta.get('feature_dtype'))[:40]}"
        )
    for key in ("name", "split"):
        if key in meta and not isinstance(meta[key], str):
            raise DatasetError(f"{meta_path}: '{key}' must be a string")
    return meta


def _expect(array: np.ndarray, path: Path, dtype: str, shape: tuple) -> None:
    """Raises DatasetError unless ``array`` has ``dtype`` and ``shape`` (None: any length)."""
    ok_shape = array.ndim == len(shape) and all(
        want is None or have == want for have, want in zip(array.shape, shape)
    )
    if array.dtype != np.dtype(dtype) or not ok_shape:
        want = "[" + ", ".join("any" if w is None else str(w) for w in shape) + "]"
        raise DatasetError(
            f"{path}: expected {dtype} of shape {want} (from meta.json), got {array.dtype} of "
            f"shape {list(array.shape)} (truncated or mismatched file)"
        )


def read_saved(folder: str | os.PathLike) -> Dataset:
    """Maps a gns-jax dataset directory; checks it against ``meta.json`` and validates it (the
    features in chunks). Errors name the folder or the file."""
    folder = Path(folder).absolute()
    meta = _read_meta(folder)
    n, e, f = meta["num_nodes"], meta["num_edges"], meta["num_features"]
    expected = {
        "indptr": ("int64", (n + 1,)),
        "indices": ("int32", (e,)),
        "features": (meta["feature_dtype"], (n, f)),
        # a multi-label task's 0/1 matrix [N, L]
        "labels": ("int8", (n, meta["num_classes"])) if meta.get("multilabel") else ("int32", (n,)),
        "train_idx": ("int32", (None,)),
        "val_idx": ("int32", (None,)),
        "test_idx": ("int32", (None,)),
    }
    arrays = {}
    for name, (dtype, shape) in expected.items():
        path = folder / f"{name}.npy"
        # The small arrays are read into memory; the graph and features stay mapped.
        arrays[name] = _load_npy(path, mmap=name in ("indices", "features"))
        _expect(arrays[name], path, dtype, shape)
    if not arrays["features"].flags.c_contiguous:
        raise DatasetError(f"{folder / 'features.npy'}: stored in Fortran order; expected C order")
    if beyond_memory(arrays["features"]):  # read from disk at random rows: no read-ahead
        advise_random(arrays["features"])
    graph = CSRGraph(arrays["indptr"], arrays["indices"])
    labels = arrays["labels"]
    labelled = labels[:, 0] >= 0 if labels.ndim == 2 else labels >= 0
    for name, split_name in (
        ("train_idx", "train"),
        ("val_idx", "validation"),
        ("test_idx", "test"),
    ):
        check_split_labels(
            labelled, arrays[name], split_name, str(folder / f"{name}.npy"), "labels.npy"
        )
    return Dataset(
        name=str(meta.get("name", folder.name)),
        graph=graph,
        features=arrays["features"],
        labels=arrays["labels"],
        num_classes=meta["num_classes"],
        train_idx=arrays["train_idx"],
        val_idx=arrays["val_idx"],
        test_idx=arrays["test_idx"],
        split=str(meta.get("split", "stored")),
    ).validate(
        str(folder),
        files=dict(
            graph="indptr.npy, indices.npy",
            features="features.npy",
            labels="labels.npy",
            train="train_idx.npy",
            validation="val_idx.npy",
            test="test_idx.npy",
        ),
    )


# ----------------------------------------------------------------------------------------------
# OGB


def _find(folder: Path, stem: str) -> Path | None:
    """The table ``stem`` in ``folder`` (``.npy``, ``.csv.gz`` or ``.csv``), even if it is a
    directory, which reading it then reports."""
    for suffix in (".npy", ".csv.gz", ".csv"):
        if (folder / f"{stem}{suffix}").exists():
            return folder / f"{stem}{suffix}"
    return None


def is_ogb_dir(path: Path) -> bool:
    raw = path / "raw"
    layout = _find(raw, "edge") is not None or (raw / "data.npz").exists()
    return layout and (path / "split").is_dir()


def _binary_arrays(raw: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, str, str]:
    """``(edges [E, 2], features, labels, where_graph, where_labels)`` of the binary layout."""
    graph, where = open_npz(raw / "data.npz")
    for key in ("edge_index", "node_feat"):
        if key not in graph:
            raise DatasetError(f"{where}: no '{key}' array (have: {sorted(graph)})")
    edges = check_kind(graph["edge_index"], where, "array 'edge_index' (node ids)")
    if edges.ndim != 2 or edges.shape[0] != 2:
        raise DatasetError(f"{where}: 'edge_index' must have shape [2, E], got {edges.shape}")
    features = check_kind(graph["node_feat"], where, "array 'node_feat'", "biuf")
    if "num_nodes_list" in graph:
        count = check_kind(graph["num_nodes_list"], where, "array 'num_nodes_list'").reshape(-1)
        if count.size != 1 or features.ndim < 1 or int(count[0]) != features.shape[0]:
            raise DatasetError(
                f"{where}: 'num_nodes_list' says {count.tolist()[:3]} nodes, 'node_feat' has "
                f"shape {features.shape}"
            )
    label_path = raw / "node-label.npz"
    labels, label_where = open_npz(label_path)
    if "node_label" not in labels:
        raise DatasetError(f"{label_where}: no 'node_label' array (have: {sorted(labels)})")
    node_label = check_kind(labels["node_label"], label_where, "array 'node_label'", "iuf")
    return edges.T, features, node_label, where, label_where


def read_table(
    path: Path, dtype, columns: int | None = None, what: str = "the table", kinds: str = "iuf"
) -> np.ndarray:
    """A ``.npy``, ``.csv`` or ``.csv.gz`` numeric table (no header); ``columns``: the width a
    2-D table must have, if given; ``what`` names it in messages and ``kinds`` are the dtype
    kinds a ``.npy`` may have (:func:`~gns_jax.data.dataset.check_kind`: booleans only where
    given, for features).

    For an integer ``dtype`` (edges, node ids, counts) the result is int64, and NaN, infinities,
    fractions and values beyond 2^62 are errors; for a float ``dtype`` it is ``dtype``, NaN kept
    (OGB's unlabelled nodes; features are checked for finiteness later). A csv may start with a
    UTF-8 byte-order mark.

    CSV is parsed by NumPy's C tokenizer over the whole text (``np.fromstring`` with ``,``), which
    is about as fast as ``pandas.read_csv`` for numbers; ``nan`` is accepted. Every line must have
    the same number of fields (rows of unequal length are an error, never re-flowed), and the
    text, decompressed, must fit :func:`~gns_jax.data.dataset.memory_budget`.
    """
    if path.suffix == ".npy":
        table = _load_npy(path, mmap=False)
        if table.dtype.kind not in "biuf":
            why = {"c": " (complex values: the imaginary part would be lost)", "U": " (text)"}
            raise DatasetError(
                f"{path}: expected a numeric array, got {table.dtype}"
                f"{why.get(table.dtype.kind, '')} for {what}"
            )
        table = check_kind(table, str(path), what, kinds)
    else:
        table = _read_csv(require_file(path))
    if columns is not None and table.ndim == 2 and table.shape[1] not in (columns, 0):
        raise DatasetError(f"{path}: expected {columns} columns, found {table.shape[1]}")
    if not np.issubdtype(np.dtype(dtype), np.integer):
        with np.errstate(over="ignore", invalid="ignore"):  # non-finite values are checked later
            return table.astype(dtype, copy=False)
    if table.dtype.kind == "f" and not np.isfinite(table).all():
        raise DatasetError(f"{path}: expected integers, found NaN or infinite values")
    if table.dtype.kind == "f" and np.any(table != np.round(table)):
        raise DatasetError(f"{path}: expected integers, found fractional values")
    if table.size and table.dtype.kind in "uf" and float(table.max()) > 2**62:  # no float16 cast
        raise DatasetError(f"{path}: integer {float(table.max()):.0f} out of range")
    return table.astype(np.int64, copy=False)


def _read_csv(path: Path) -> np.ndarray:
    budget = memory_budget()
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rb") as f:
            text = f.read(budget + 1)
    except (OSError, EOFError, zlib.error) as e:
        raise DatasetError(f"{path}: cannot read ({e})") from None
    text = text.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark (Excel writes one)
    if len(text) > budget:
        raise DatasetError(
            f"{path}: more than {budget / 2**30:,.1f} GiB of text (half this machine's memory)"
        )
    if not text.strip():
        return np.zeros((0, 0))
    # Fields per line, from the positions of the commas and line ends (vectorised).
    raw = np.frombuffer(text, dtype=np.uint8)
    ends = np.flatnonzero(raw == ord("\n"))
    if not text.endswith(b"\n"):
        ends = np.append(ends, len(text))
    commas_before = np.searchsorted(np.flatnonzero(raw == ord(",")), ends)
    fields = np.diff(commas_before, prepend=0) + 1
    del raw
    uneven = np.flatnonzero(fields != fields[0])
    if uneven.size:
        line = int(uneven[0]) + 1
        raise DatasetError(
            f"{path}: line {line} has {int(fields[line - 1])} fields, line 1 has {int(fields[0])} "
            "(rows of unequal length)"
        )
    lines, width = ends.size, int(fields[0])
    body = text.replace(b"\n", b",").rstrip(b",").decode("ascii", errors="replace")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        try:
            values = np.fromstring(body, dtype=np.float64, sep=",")
        except (ValueError, DeprecationWarning):
            raise DatasetError(f"{path}: not a comma-separated numeric table") from None
    if values.size != lines * width:
        raise DatasetError(
            f"{path}: {values.size} numbers on {lines} lines of {width} fields: empty or "
            "non-numeric fields"
        )
    return values.reshape(lines, width) if width != 1 else values


def read_ogb(folder: str | os.PathLike, split: str | None = None) -> Dataset:
    """Reads an OGB node-property directory (module docs); ``split``: the ``split/`` sub-folder
    (default: the only one, or the first in name order). Labels must be contiguous class ids
    (non-negative or NaN for unlabelled). Errors name the file."""
    folder = Path(folder).absolute()
    raw = folder / "raw"
    binary = (raw / "data.npz").exists()
    if binary:
        edges, features, raw_labels, where, label_where = _binary_arrays(raw)
        edge_path = feat_path = Path(where)
        label_path = Path(label_where)
    else:
        edge_path = _find(raw, "edge")
        feat_path = _find(raw, "node-feat")
        label_path = _find(raw, "node-label")
        for what, p in (("edge", edge_path), ("node-feat", feat_path), ("node-label", label_path)):
            if p is None:
                raise DatasetError(f"{raw}: no {what}.npy, {what}.csv or {what}.csv.gz")
    try:
        splits = sorted(p for p in (folder / "split").iterdir() if p.is_dir())
    except OSError as e:
        raise DatasetError(f"{folder / 'split'}: cannot read ({e.strerror or e})") from None
    if not splits:
        raise DatasetError(f"{folder / 'split'}: no split folder (e.g. split/sales_ranking/)")
    chosen = folder / "split" / split if split else splits[0]
    if not chosen.is_dir():
        raise DatasetError(f"{chosen}: no such split (have: {', '.join(p.name for p in splits)})")

    if not binary:
        features = read_table(feat_path, np.float32, what="the node features", kinds="biuf")
    features = np.asarray(features, dtype=np.float32)
    if features.ndim == 1:
        features = features[:, None]
    if features.ndim != 2 or not 1 <= features.shape[0] <= MAX_NODES:
        raise DatasetError(
            f"{feat_path}: expected an [N, F] table with 1 <= N <= {MAX_NODES:,}, got shape "
            f"{features.shape}"
        )
    n = features.shape[0]
    count_path = None if binary else _find(raw, "num-node-list")
    if count_path is not None:
        count = read_table(count_path, np.int64, what="the node count", kinds="iuf").reshape(-1)
        if count.size != 1 or int(count[0]) != n:
            raise DatasetError(
                f"{count_path}: says {count.tolist()[:3]} nodes, {feat_path} has {n} rows"
            )
    if not binary:
        edges = read_table(edge_path, np.int64, what="the edges", kinds="iuf")
    if edges.size == 0:  # no edges: an empty file, or an empty [0, 2] or [2, 0] array
        edges = np.zeros((0, 2), np.int64)
    if edges.ndim != 2 or 2 not in edges.shape:
        raise DatasetError(f"{edge_path}: expected an [E, 2] table, got shape {edges.shape}")
    if edges.shape[1] != 2:
        edges = edges.T
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        raise DatasetError(
            f"{edge_path}: node ids must lie in [0, {n}) ({feat_path} has {n} rows), found "
            f"{int(edges.min())}..{int(edges.max())}"
        )
    graph = from_edges(edges[:, 0], edges[:, 1], n, name=str(edge_path))
    if not binary:
        raw_labels = read_table(label_path, np.float64, what="the class ids", kinds="iuf")
    with np.errstate(over="ignore", invalid="ignore"):  # uint64 beyond float64: refused below
        raw_labels = np.asarray(raw_labels, dtype=np.float64)
    if raw_labels.ndim == 2 and raw_labels.shape[1] == 1:
        raw_labels = raw_labels[:, 0]
    if raw_labels.shape != (n,):
        raise DatasetError(
            f"{label_path}: expected {n} labels (one per row of {feat_path.name}), got shape "
            f"{raw_labels.shape}"
        )
    labelled = np.isfinite(raw_labels) & (raw_labels >= 0)
    fractional = labelled & (raw_labels != np.round(raw_labels))
    if fractional.any():
        node = int(np.flatnonzero(fractional)[0])
        raise DatasetError(
            f"{label_path}: class ids must be integers, found {float(raw_labels[node])} at "
            f"node {node}"
        )
    if labelled.any() and raw_labels[labelled].max() >= n:
        top = int(np.flatnonzero(labelled & (raw_labels >= n))[0])
        raise DatasetError(
            f"{label_path}: class id {raw_labels[top]:.0f} at node {top} with only {n} nodes; "
            "class ids must be contiguous 0..C-1 with every class present"
        )
    labels = np.where(labelled, raw_labels, -1).astype(np.int32)
    num_classes = class_count(labels, str(label_path))
    idx = []
    files = dict(
        graph=str(edge_path.relative_to(folder)),
        features=str(feat_path.relative_to(folder)),
        labels=str(label_path.relative_to(folder)),
    )
    for part in ("train", "valid", "test"):
        p = _find(chosen, part)
        if p is None:
            raise DatasetError(f"{chosen}: no {part}.npy, {part}.csv or {part}.csv.gz")
        ids = read_table(p, np.int64, what="the node ids", kinds="iuf").reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            bad = ids[(ids < 0) | (ids >= n)][0]
            raise DatasetError(f"{p}: node ids must lie in [0, {n}), found {int(bad)}")
        if not ids.size:
            raise DatasetError(f"{p}: no node ids (the {part} split is empty)")
        ids = np.sort(ids)
        repeats = np.flatnonzero(ids[1:] == ids[:-1])
        if repeats.size:
            raise DatasetError(f"{p}: node {int(ids[repeats[0]])} is listed more than once")
        check_split_labels(
            labelled, ids, part.replace("valid", "validation"), str(p), label_path.name
        )
        idx.append(ids.astype(np.int32))
        files[part.replace("valid", "validation")] = str(p.relative_to(folder))
    return Dataset(
        name=folder.name,
        graph=graph,
        features=np.ascontiguousarray(features, dtype=np.float32),
        labels=labels,
        num_classes=num_classes,
        train_idx=idx[0],
        val_idx=idx[1],
        test_idx=idx[2],
        split=f"ogb:{chosen.name}",
    ).validate(str(folder), files=files)
