"""Readers of the shipped file formats. Host-side NumPy (SciPy for sparse matrices).

* Planetoid ``ind.<name>.*`` pickles (Cora, CiteSeer), read through a restricted unpickler that
  admits only the numpy/scipy/builtin types those files contain and refuses anything else;
* gnn-benchmark ``.npz`` files (Shchur et al. 2018: Amazon, Coauthor), bare or inside a ``.zip``;
* ``.npz`` files with ``node_features``/``node_labels``/``edges`` and split masks (Tolokers and the
  other Platonov et al. 2023 graphs);
* MUSAE csv + json directories (Facebook Page-Page).

Every problem with a file is a :class:`~gns_jax.errors.DatasetError` naming the file and what is
wrong. ``np.load`` always runs with ``allow_pickle=False``.
"""

from __future__ import annotations

import collections
import csv
import io
import json
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np

from gns_jax.data.dataset import SHCHUR_SPLIT, Dataset, finish, per_class_split, require, split_rng
from gns_jax.errors import DatasetError
from gns_jax.graph import from_edges

__all__ = [
    "open_npz",
    "planetoid_name",
    "read_facebook",
    "read_gnn_benchmark",
    "read_planetoid",
    "read_tolokers",
    "restricted_unpickle",
]


# ----------------------------------------------------------------------------------------------
# Planetoid pickles, through a restricted unpickler


def _numpy_reconstruct():
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct
    return _reconstruct


class _RefusedGlobal(pickle.UnpicklingError):
    """A pickle names a global outside the allow-list."""


class _PlanetoidUnpickler(pickle.Unpickler):
    """Admits only the globals that Planetoid's 2016 ``ind.*`` pickles reference; refuses the rest.

    Those files name ``scipy.sparse.csr.csr_matrix`` (a module path SciPy 2 removes), numpy arrays
    and dtypes, ``collections.defaultdict`` and ``list``. Any other global (``os.system``,
    ``builtins.eval``, ...) raises ``pickle.UnpicklingError`` before anything is called.
    """

    def find_class(self, module: str, name: str):
        import scipy.sparse

        allowed = {
            ("builtins", "list"): list,
            ("__builtin__", "list"): list,  # Python 2 name, as the 2016 files spell it
            ("collections", "defaultdict"): collections.defaultdict,
            ("numpy", "dtype"): np.dtype,
            ("numpy", "ndarray"): np.ndarray,
            ("numpy.core.multiarray", "_reconstruct"): _numpy_reconstruct(),
            ("numpy._core.multiarray", "_reconstruct"): _numpy_reconstruct(),
            ("scipy.sparse.csr", "csr_matrix"): scipy.sparse.csr_matrix,
            ("scipy.sparse._csr", "csr_matrix"): scipy.sparse.csr_matrix,
            ("scipy.sparse", "csr_matrix"): scipy.sparse.csr_matrix,
        }
        try:
            return allowed[(module, name)]
        except KeyError:
            raise _RefusedGlobal(
                f"refusing to load global '{module}.{name}': only the numpy/scipy/builtin types of "
                "Planetoid files are allowed"
            ) from None


def restricted_unpickle(path: Path):
    """Loads one Planetoid pickle with :class:`_PlanetoidUnpickler`; raises DatasetError."""
    try:
        with open(require(path), "rb") as f:
            return _PlanetoidUnpickler(f, encoding="latin1").load()
    except DatasetError:
        raise
    except _RefusedGlobal as e:
        raise DatasetError(f"{path}: not a valid Planetoid pickle: {e}") from None
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        IndexError,
        KeyError,
        OSError,
    ) as e:
        raise DatasetError(f"{path}: truncated or corrupt Planetoid pickle ({e!r})") from None


def planetoid_name(folder: Path) -> str | None:
    graphs = sorted(folder.glob("ind.*.graph"))
    return graphs[0].name[len("ind.") : -len(".graph")] if graphs else None


def read_planetoid(folder: str | os.PathLike, name: str | None = None) -> Dataset:
    """Reads ``ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}`` with Planetoid's public split.

    Follows Kipf & Welling's loader: test rows are reordered into ``test.index`` order; CiteSeer's
    15 test-range ids without a row get zero features and label -1 (in no split).
    """
    import scipy.sparse as sp

    folder = Path(folder)
    name = name or planetoid_name(require(folder))
    if name is None:
        raise DatasetError(f"{folder}: no ind.<name>.graph file (not a Planetoid directory)")
    parts = {s: restricted_unpickle(folder / f"ind.{name}.{s}") for s in ("x", "y", "tx", "ty")}
    parts |= {s: restricted_unpickle(folder / f"ind.{name}.{s}") for s in ("allx", "ally", "graph")}
    for s in ("x", "tx", "allx"):
        if not sp.issparse(parts[s]) and not isinstance(parts[s], np.ndarray):
            raise DatasetError(f"{folder / f'ind.{name}.{s}'}: expected a feature matrix")
    for s in ("y", "ty", "ally"):
        if not isinstance(parts[s], np.ndarray) or parts[s].ndim != 2:
            raise DatasetError(f"{folder / f'ind.{name}.{s}'}: expected a one-hot label matrix")
    if not isinstance(parts["graph"], dict):
        raise DatasetError(f"{folder / f'ind.{name}.graph'}: expected a dict of adjacency lists")
    index_path = require(folder / f"ind.{name}.test.index")
    try:
        test_idx = np.loadtxt(index_path, dtype=np.int64, ndmin=1)
    except ValueError as e:
        raise DatasetError(f"{index_path}: not a list of integer node ids ({e})") from None

    x, y, tx, ty, allx, ally = (parts[s] for s in ("x", "y", "tx", "ty", "allx", "ally"))
    tx, allx = sp.csr_matrix(tx), sp.csr_matrix(allx)
    if tx.shape[0] != ty.shape[0] or allx.shape[0] != ally.shape[0] or test_idx.size == 0:
        raise DatasetError(f"{folder}: Planetoid feature and label files disagree in length")
    srt = np.sort(test_idx)
    lo, hi = int(srt[0]), int(srt[-1])
    if lo < allx.shape[0]:
        raise DatasetError(f"{index_path}: test ids must follow the allx rows (>= {allx.shape[0]})")
    # CiteSeer: some ids in the test range have no tx/ty row; give them zero rows (label -1).
    full_tx = sp.lil_matrix((hi - lo + 1, tx.shape[1]), dtype=np.float32)
    full_ty = np.zeros((hi - lo + 1, ty.shape[1]), dtype=ty.dtype)
    if srt.size != tx.shape[0]:
        raise DatasetError(f"{index_path}: {srt.size} test ids but {tx.shape[0]} rows in tx")
    full_tx[srt - lo, :] = tx
    full_ty[srt - lo, :] = ty
    features = sp.vstack([allx, full_tx.tocsr()]).toarray().astype(np.float32)
    onehot = np.vstack([ally, full_ty])
    features[test_idx] = features[srt]
    onehot[test_idx] = onehot[srt]
    n = features.shape[0]
    labels = np.where(onehot.sum(1) > 0, onehot.argmax(1), -1)

    adj = parts["graph"]
    try:
        src = np.repeat(np.fromiter(adj.keys(), np.int64), [len(v) for v in adj.values()])
        dst = np.fromiter((v for vs in adj.values() for v in vs), np.int64)
    except (TypeError, ValueError) as e:
        raise DatasetError(f"{folder / f'ind.{name}.graph'}: bad adjacency lists ({e})") from None
    graph = from_edges(src, dst, n, name=str(folder / f"ind.{name}.graph"))
    num_train = y.shape[0]
    splits = (np.arange(num_train), np.arange(num_train, num_train + 500), test_idx)
    return finish(str(folder), graph, features, labels, splits, "planetoid", onehot.shape[1])


# ----------------------------------------------------------------------------------------------
# .npz files (gnn-benchmark, Platonov et al.), bare or zipped


def open_npz(path: Path) -> tuple[dict[str, np.ndarray], str]:
    """Returns the arrays of an ``.npz`` (or of the one ``.npz`` inside a ``.zip``) and a label."""
    try:
        with zipfile.ZipFile(require(path)) as zf:
            members = zf.namelist()
            inner = [m for m in members if m.endswith(".npz")]
            if members and all(m.endswith(".npy") for m in members):
                raw, where = path.read_bytes(), str(path)
            elif len(inner) == 1:
                raw, where = zf.read(inner[0]), f"{path}:{inner[0]}"
            else:
                raise DatasetError(
                    f"{path}: a zip archive that is neither an .npz nor holds exactly one .npz "
                    f"(members: {members[:5]})"
                )
        with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
            keys = set(npz.files)
            arrays = {
                k: npz[k] for k in keys if k not in ("class_names", "node_names", "attr_names")
            }
    except DatasetError:
        raise
    except zipfile.BadZipFile as e:
        raise DatasetError(f"{path}: truncated or corrupt archive ({e})") from None
    except (ValueError, OSError, EOFError, KeyError, zipfile.LargeZipFile) as e:
        raise DatasetError(f"{path}: truncated or corrupt .npz ({e})") from None
    return arrays, where


def _need(arrays: dict, keys: tuple[str, ...], where: str) -> None:
    missing = [k for k in keys if k not in arrays]
    if missing:
        raise DatasetError(f"{where}: missing arrays {missing}")


def _csr_parts(arrays: dict, prefix: str, where: str):
    import scipy.sparse as sp

    try:
        return sp.csr_matrix(
            (arrays[f"{prefix}_data"], arrays[f"{prefix}_indices"], arrays[f"{prefix}_indptr"]),
            shape=tuple(int(s) for s in arrays[f"{prefix}_shape"]),
        )
    except (ValueError, TypeError, IndexError) as e:
        raise DatasetError(f"{where}: invalid sparse matrix '{prefix}' ({e})") from None


def read_gnn_benchmark(path: str | os.PathLike, split_seed: int = 0) -> Dataset:
    """Reads a gnn-benchmark ``.npz`` (bare or the single file inside a ``.zip``).

    Split: 20 train and 30 validation nodes per class, the rest test, within the largest
    connected component (Shchur et al.), drawn with ``split_seed``.
    """
    path = Path(path)
    arrays, where = open_npz(path)
    return gnn_benchmark_from_arrays(arrays, where, split_seed)


def gnn_benchmark_from_arrays(arrays: dict, where: str, split_seed: int) -> Dataset:
    _need(arrays, ("adj_data", "adj_indices", "adj_indptr", "adj_shape", "labels"), where)
    adj = _csr_parts(arrays, "adj", where)
    if adj.shape[0] != adj.shape[1]:
        raise DatasetError(f"{where}: adjacency matrix is not square: {adj.shape}")
    if "attr_matrix" in arrays:
        features = np.asarray(arrays["attr_matrix"], dtype=np.float32)
    else:
        _need(arrays, ("attr_data", "attr_indices", "attr_indptr", "attr_shape"), where)
        features = _csr_parts(arrays, "attr", where).toarray()
    labels = arrays["labels"]
    if labels.ndim != 1 or labels.shape[0] != adj.shape[0]:
        raise DatasetError(f"{where}: labels must have shape [{adj.shape[0]}], got {labels.shape}")
    coo = adj.tocoo()
    graph = from_edges(coo.row, coo.col, adj.shape[0], name=where)
    labels = _check_labels(labels, where)
    splits = per_class_split(split_rng(split_seed), labels, eligible=graph.largest_component())
    return finish(where, graph, features, labels, splits, SHCHUR_SPLIT.format(split_seed))


def _check_labels(labels: np.ndarray, where: str) -> np.ndarray:
    if not np.issubdtype(labels.dtype, np.integer):
        raise DatasetError(f"{where}: labels must be integers, got {labels.dtype}")
    if labels.size and labels.min() < 0:
        raise DatasetError(
            f"{where}: labels out of range: found {int(labels.min())} at node "
            f"{int(np.argmin(labels))} (class ids must be >= 0)"
        )
    return labels


def read_tolokers(path: str | os.PathLike, split: int = 0) -> Dataset:
    """Reads a Platonov et al. (2023) ``.npz`` and uses its stored split number ``split``."""
    path = Path(path)
    arrays, where = open_npz(path)
    return tolokers_from_arrays(arrays, where, split)


def tolokers_from_arrays(arrays: dict, where: str, split: int) -> Dataset:
    keys = ("node_features", "node_labels", "edges", "train_masks", "val_masks", "test_masks")
    _need(arrays, keys, where)
    features, labels, edges = arrays["node_features"], arrays["node_labels"], arrays["edges"]
    n = labels.shape[0]
    if edges.ndim != 2 or edges.shape[1] != 2:
        raise DatasetError(f"{where}: edges must have shape [E, 2], got {edges.shape}")
    graph = from_edges(edges[:, 0], edges[:, 1], n, name=where)
    labels = _check_labels(labels, where)
    masks = []
    for k in ("train_masks", "val_masks", "test_masks"):
        m = arrays[k]
        m = m[None] if m.ndim == 1 else m
        if m.ndim != 2 or m.shape[1] != n or not 0 <= split < m.shape[0]:
            raise DatasetError(f"{where}: '{k}' must have shape [splits, {n}] with split {split}")
        masks.append(np.flatnonzero(m[split]))
    return finish(where, graph, features, labels, tuple(masks), f"stored:{split}")


# ----------------------------------------------------------------------------------------------
# MUSAE csv + json (Facebook Page-Page)


def read_facebook(folder: str | os.PathLike, split_seed: int = 0) -> Dataset:
    """Reads ``facebook_edges.csv``, ``facebook_target.csv`` and ``facebook.json``.

    Labels are the sorted ``page_type`` values; split as in :func:`per_class_split`.
    """
    folder = Path(folder)
    edges_path = require(folder / "facebook_edges.csv")
    target_path = require(folder / "facebook_target.csv")
    feats_path = require(folder / "facebook.json")
    try:
        edges = np.loadtxt(edges_path, delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    except ValueError as e:
        raise DatasetError(f"{edges_path}: not a csv of integer id pairs ({e})") from None
    if edges.shape[1] != 2:
        raise DatasetError(f"{edges_path}: expected two columns id_1,id_2")
    with open(target_path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or "page_type" not in rows[0] or "id" not in rows[0]:
        raise DatasetError(f"{target_path}: expected a csv with columns id,...,page_type")
    try:
        ids = np.array([int(r["id"]) for r in rows])
    except (TypeError, ValueError) as e:
        raise DatasetError(f"{target_path}: bad node id ({e})") from None
    n = len(rows)
    if not np.array_equal(ids, np.arange(n)):
        raise DatasetError(f"{target_path}: rows must list node ids 0..{n - 1} in order")
    classes = sorted({r["page_type"] for r in rows})
    labels = np.array([classes.index(r["page_type"]) for r in rows], dtype=np.int64)
    try:
        with open(feats_path, encoding="utf-8") as f:
            feats = json.load(f)
        rows_, cols = [], []
        for k, v in feats.items():
            rows_.append(np.full(len(v), int(k), dtype=np.int64))
            cols.append(np.asarray(v, dtype=np.int64))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DatasetError(f"{feats_path}: truncated or corrupt JSON ({e})") from None
    except (TypeError, ValueError, AttributeError) as e:
        raise DatasetError(f"{feats_path}: expected {{node id: [feature ids]}} ({e})") from None
    r, c = np.concatenate(rows_), np.concatenate(cols)
    if r.size and (r.min() < 0 or r.max() >= n or c.min() < 0):
        raise DatasetError(f"{feats_path}: node or feature ids out of range")
    features = np.zeros((n, int(c.max()) + 1 if c.size else 1), dtype=np.float32)
    features[r, c] = 1.0
    graph = from_edges(edges[:, 0], edges[:, 1], n, name=str(edges_path))
    splits = per_class_split(split_rng(split_seed), labels, eligible=graph.largest_component())
    return finish(str(folder), graph, features, labels, splits, SHCHUR_SPLIT.format(split_seed))

