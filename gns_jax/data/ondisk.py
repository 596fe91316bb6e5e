"""Datasets on disk: the project's memory-mapped directory format, and OGB's node-property layout.

**The gns-jax directory** (:func:`save_dataset` writes it, :func:`read_saved` maps it back)::

    meta.json                  {"format": "gns-jax-dataset", "version": 1, name, num_nodes, ...}
    indptr.npy   int64 [N+1]   the CSR graph (in-neighbours of every node, both directions)
    indices.npy  int32 [E]
    features.npy float32 or float16 [N, F]
    labels.npy   int32 [N]     -1 for unlabelled nodes
    train_idx.npy, val_idx.npy, test_idx.npy   int32

Every array is a plain ``.npy`` (``np.load(..., allow_pickle=False)``) opened with
``mmap_mode="r"``: loading a 2.4M-node, 120M-edge graph takes a second, and the feature matrix
is read row by row as batches need it, so it need not fit in memory (float16 on disk halves it
and the rows moved to the device; they are widened to float32 there).

**OGB's node-property layout** (:func:`read_ogb`), as ``ogb`` unpacks ``ogbn-*`` datasets::

    DIR/raw/edge.*             [E, 2] source, target (each undirected edge once, or both ways)
    DIR/raw/node-feat.*        [N, F]
    DIR/raw/node-label.*       [N] or [N, 1]; NaN or negative for unlabelled nodes
    DIR/raw/num-node-list.*    (optional) [1] the node count
    DIR/split/<name>/train.*, valid.*, test.*   node ids

each file as ``.npy``, plain ``.csv`` or gzipped ``.csv.gz`` (comma-separated, no header). The
graph is symmetrised (OGB's ``to_undirected``), self-loops and duplicate edges are dropped.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np

from gns_jax.data.dataset import Dataset
from gns_jax.errors import DatasetError
from gns_jax.graph import CSRGraph, from_edges

__all__ = ["FORMAT", "is_ogb_dir", "is_saved_dir", "read_ogb", "read_saved", "save_dataset"]

FORMAT = "gns-jax-dataset"
VERSION = 1
_ARRAYS = ("indptr", "indices", "features", "labels", "train_idx", "val_idx", "test_idx")
_CHUNK_BYTES = 1 << 28  # rows written / checked at a time: 256 MiB


def is_saved_dir(path: Path) -> bool:
    return (path / "meta.json").is_file() and (path / "indptr.npy").exists()


def save_dataset(dataset: Dataset, folder: str | os.PathLike, feature_dtype: str = "float32"):
    """Writes ``dataset`` to ``folder`` (created; must be empty) in the gns-jax directory format.

    Features are written in row chunks, so a memory-mapped source is never loaded whole.
    """
    if feature_dtype not in ("float32", "float16"):
        raise DatasetError(f"--feature-dtype: float32 or float16, got '{feature_dtype}'")
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()):
        raise DatasetError(f"{folder}: exists and is not empty; choose a new folder")
    folder.mkdir(parents=True, exist_ok=True)
    ds = dataset
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
    for name in ("labels", "train_idx", "val_idx", "test_idx"):
        np.save(folder / f"{name}.npy", np.asarray(getattr(ds, name), np.int32))
    meta = dict(
        format=FORMAT,
        version=VERSION,
        name=ds.name,
        num_nodes=ds.num_nodes,
        num_edges=ds.graph.num_edges,
        num_features=int(f),
        num_classes=int(ds.num_classes),
        feature_dtype=feature_dtype,
        split=ds.split,
    )
    (folder / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


def _load_npy(path: Path, mmap: bool = True) -> np.ndarray:
    if not path.exists():
        raise DatasetError(f"{path}: missing")
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise DatasetError(f"{path}: not a readable .npy array ({e})") from None


def read_saved(folder: str | os.PathLike) -> Dataset:
    """Maps a gns-jax dataset directory; validates it (the features in chunks)."""
    folder = Path(folder)
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError) as e:
        raise DatasetError(f"{folder / 'meta.json'}: not readable JSON ({e})") from None
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise DatasetError(
            f"{folder / 'meta.json'}: not a {FORMAT} version {VERSION} directory "
            f"(format={meta.get('format')!r}, version={meta.get('version')!r})"
        )
    arrays = {}
    for name in _ARRAYS:
        # The small arrays are read into memory; the graph and features stay mapped.
        arrays[name] = _load_npy(folder / f"{name}.npy", mmap=name in ("indices", "features"))
    for name, size in (("features", meta["num_nodes"]), ("labels", meta["num_nodes"])):
        if arrays[name].shape[0] != size:
            raise DatasetError(
                f"{folder / (name + '.npy')}: {arrays[name].shape[0]} rows, meta.json says "
                f"num_nodes={size} (truncated or mismatched file)"
            )
    if arrays["indices"].shape[0] != meta["num_edges"]:
        raise DatasetError(
            f"{folder / 'indices.npy'}: {arrays['indices'].shape[0]} edges, meta.json says "
            f"{meta['num_edges']}"
        )
    for name in ("labels", "train_idx", "val_idx", "test_idx"):
        if arrays[name].dtype != np.int32:
            raise DatasetError(
                f"{folder / (name + '.npy')}: must be int32, got {arrays[name].dtype}"
            )
    graph = CSRGraph(np.asarray(arrays["indptr"]), arrays["indices"])
    graph.validate(str(folder))
    return Dataset(
        name=str(meta.get("name", folder.name)),
        graph=graph,
        features=arrays["features"],
        labels=arrays["labels"],
        num_classes=int(meta["num_classes"]),
        train_idx=arrays["train_idx"],
        val_idx=arrays["val_idx"],
        test_idx=arrays["test_idx"],
        split=str(meta.get("split", "stored")),
    ).validate()


# ----------------------------------------------------------------------------------------------
# OGB


def _find(folder: Path, stem: str) -> Path | None:
    for suffix in (".npy", ".csv.gz", ".csv"):
        if (folder / f"{stem}{suffix}").is_file():
            return folder / f"{stem}{suffix}"
    return None


def is_ogb_dir(path: Path) -> bool:
    return _find(path / "raw", "edge") is not None and (path / "split").is_dir()


def read_table(path: Path, dtype, columns: int | None = None) -> np.ndarray:
    """A ``.npy``, ``.csv`` or ``.csv.gz`` numeric table (no header), as ``dtype``.

    CSV is parsed by NumPy's C tokenizer over the whole text (``np.fromstring`` with ``,``), which
    is about as fast as ``pandas.read_csv`` for numbers; ``nan`` is accepted (OGB's unlabelled).
    """
    if path.suffix == ".npy":
        return np.asarray(_load_npy(path, mmap=False))
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rb") as f:
            text = f.read()
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise DatasetError(f"{path}: cannot read ({e})") from None
    lines = text.count(b"\n") + (0 if text.endswith(b"\n") or not text else 1)
    body = text.replace(b"\n", b",").rstrip(b",").decode("ascii", errors="replace")
    if not body.strip():
        values = np.zeros(0)
    else:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            try:
                values = np.fromstring(body, dtype=np.float64, sep=",")
            except (ValueError, DeprecationWarning):
                raise DatasetError(f"{path}: not a comma-separated numeric table") from None
    width = values.size // lines if lines else 0
    if lines and (values.size != lines * width or width == 0):
        raise DatasetError(
            f"{path}: {values.size} numbers on {lines} lines: rows of unequal length or "
            "non-numeric text"
        )
    if columns is not None and width not in (columns, 0):
        raise DatasetError(f"{path}: expected {columns} columns, found {width}")
    table = values.reshape(lines, width) if width != 1 else values
    if np.issubdtype(np.dtype(dtype), np.integer):
        finite = table[np.isfinite(table)] if table.size else table
        if finite.size and np.any(finite != np.round(finite)):
            raise DatasetError(f"{path}: expected integers, found fractional values")
        return table
    return table.astype(dtype)


def read_ogb(folder: str | os.PathLike, split: str | None = None) -> Dataset:
    """Reads an OGB node-property directory (module docs); ``split``: the ``split/`` sub-folder
    (default: the only one, or the first in name order)."""
    folder = Path(folder)
    raw = folder / "raw"
    edge_path = _find(raw, "edge")
    feat_path = _find(raw, "node-feat")
    label_path = _find(raw, "node-label")
    for what, p in (("edge", edge_path), ("node-feat", feat_path), ("node-label", label_path)):
        if p is None:
            raise DatasetError(f"{raw}: no {what}.npy, {what}.csv or {what}.csv.gz")
    splits = sorted(p for p in (folder / "split").iterdir() if p.is_dir())
    if not splits:
        raise DatasetError(f"{folder / 'split'}: no split folder (e.g. split/sales_ranking/)")
    chosen = folder / "split" / split if split else splits[0]
    if not chosen.is_dir():
        raise DatasetError(f"{chosen}: no such split (have: {', '.join(p.name for p in splits)})")

    features = read_table(feat_path, np.float32)
    if features.ndim == 1:
        features = features[:, None]
    n = features.shape[0]
    count_path = _find(raw, "num-node-list")
    if count_path is not None:
        stated = int(np.asarray(read_table(count_path, np.int64)).reshape(-1)[0])
        if stated != n:
            raise DatasetError(f"{count_path}: says {stated} nodes, {feat_path} has {n} rows")
    edges = np.asarray(read_table(edge_path, np.int64))
    if edges.ndim != 2 or 2 not in edges.shape:
        raise DatasetError(f"{edge_path}: expected an [E, 2] table, got shape {edges.shape}")
    if edges.shape[1] != 2:
        edges = edges.T
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        raise DatasetError(
            f"{edge_path}: node ids must lie in [0, {n}) ({feat_path} has {n} rows), found "
            f"{int(edges.min())}..{int(edges.max())}"
        )
    graph = from_edges(
        edges[:, 0].astype(np.int64), edges[:, 1].astype(np.int64), n, name=str(edge_path)
    )
    raw_labels = np.asarray(read_table(label_path, np.float64), dtype=np.float64).reshape(-1)
    if raw_labels.shape[0] != n:
        raise DatasetError(f"{label_path}: {raw_labels.shape[0]} labels for {n} nodes")
    labelled = np.isfinite(raw_labels) & (raw_labels >= 0)
    if np.any(raw_labels[labelled] != np.round(raw_labels[labelled])):
        raise DatasetError(f"{label_path}: class ids must be integers")
    labels = np.where(labelled, raw_labels, -1).astype(np.int32)
    idx = []
    for part in ("train", "valid", "test"):
        p = _find(chosen, part)
        if p is None:
            raise DatasetError(f"{chosen}: no {part}.npy, {part}.csv or {part}.csv.gz")
        ids = np.asarray(read_table(p, np.int64)).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            raise DatasetError(f"{p}: node ids must lie in [0, {n})")
        idx.append(np.sort(ids).astype(np.int32))
    return Dataset(
        name=folder.name,
        graph=graph,
        features=np.ascontiguousarray(features, dtype=np.float32),
        labels=labels,
        num_classes=int(labels.max()) + 1 if labelled.any() else 0,
        train_idx=idx[0],
        val_idx=idx[1],
        test_idx=idx[2],
        split=f"ogb:{chosen.name}",
    ).validate()
