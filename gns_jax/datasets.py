"""Dataset readers, splits, the dataset registry and a synthetic graph generator. Host-side NumPy.

Supported inputs (the format of a path is detected from its content, not its name):

* Planetoid ``ind.<name>.*`` pickles (Cora, CiteSeer), read through a restricted unpickler that
  admits only the numpy/scipy/builtin types those files contain and refuses anything else;
* gnn-benchmark ``.npz`` files (Shchur et al. 2018: Amazon, Coauthor), bare or inside a ``.zip``;
* ``.npz`` files with ``node_features``/``node_labels``/``edges`` and split masks (Tolokers and the
  other Platonov et al. 2023 graphs);
* MUSAE csv + json directories (Facebook Page-Page);
* directories written by ``gns-jax save`` (memory-mapped ``.npy``) and OGB node-property
  directories (``raw/`` + ``split/``; CSV, gzipped CSV or ``.npy``): :mod:`gns_jax.ondisk`;
* ``synthetic:nodes=N,degree=D,features=F,classes=C[,seed=S]``: a seeded power-law graph with
  class-homophilous edges and class-informative noisy features.

Every problem with a file is reported as a :class:`~gns_jax.errors.DatasetError` that names the
file and what is wrong, before any training starts. ``np.load`` always runs with
``allow_pickle=False``.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import io
import json
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np

from gns_jax.errors import DatasetError, GnsJaxError
from gns_jax.graph import CSRGraph, from_edges

__all__ = [
    "REGISTRY",
    "Dataset",
    "default_data_dir",
    "load_dataset",
    "parse_synthetic",
    "per_class_split",
    "read_facebook",
    "read_gnn_benchmark",
    "read_planetoid",
    "read_tolokers",
    "synthetic",
]


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A node-classification dataset in host memory.

    Attributes:
      name: registered name, path or synthetic spec it was loaded from.
      graph: undirected graph (both directions stored), no self-loops, no duplicate edges.
      features: float32 ``[num_nodes, num_features]``, finite; may be a read-only ``np.memmap``
        (float32 or float16) of a saved dataset directory (:mod:`gns_jax.ondisk`).
      labels: int32 ``[num_nodes]``; class ids in ``[0, num_classes)``, -1 for unlabelled nodes
        (which lie in no split).
      num_classes: number of classes.
      train_idx, val_idx, test_idx: int32 node ids, disjoint, each non-empty.
      split: how the split was made (``"planetoid"``, ``"stored:0"``, ``"per-class 20/30 ..."``).
    """

    name: str
    graph: CSRGraph
    features: np.ndarray
    labels: np.ndarray
    num_classes: int
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    split: str

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    @property
    def num_features(self) -> int:
        return int(self.features.shape[1])

    def validate(self) -> Dataset:
        """Checks shapes, finite features, label range and splits; raises DatasetError."""
        n, where = self.graph.num_nodes, self.name
        self.graph.validate(where)
        if self.features.ndim != 2 or self.features.shape[0] != n:
            raise DatasetError(
                f"{where}: features must have shape [num_nodes={n}, F], got {self.features.shape}"
            )
        if not np.issubdtype(self.features.dtype, np.floating):
            raise DatasetError(
                f"{where}: features must be floating point, got {self.features.dtype}"
            )
        # In row chunks: a memory-mapped feature matrix is streamed, never loaded whole.
        step = max(1, (1 << 26) // max(1, self.features.shape[1]))
        for start in range(0, n, step):
            bad = ~np.isfinite(self.features[start : start + step])
            if bad.any():
                row = start + int(np.argwhere(bad)[0, 0])
                raise DatasetError(
                    f"{where}: features contain NaN or infinite values (first in the row of "
                    f"node {row})"
                )
        if self.labels.shape != (n,):
            raise DatasetError(f"{where}: labels must have shape [{n}], got {self.labels.shape}")
        if self.num_classes < 1:
            raise DatasetError(f"{where}: no classes")
        out = (self.labels < -1) | (self.labels >= self.num_classes)
        if out.any():
            raise DatasetError(
                f"{where}: labels must lie in [0, {self.num_classes}) (or -1 for unlabelled), "
                f"found {int(self.labels[out][0])} at node {int(np.flatnonzero(out)[0])}"
            )
        seen = np.zeros(n, dtype=bool)
        for split_name, idx in (
            ("train", self.train_idx),
            ("validation", self.val_idx),
            ("test", self.test_idx),
        ):
            if idx.size == 0:
                raise DatasetError(f"{where}: the {split_name} split is empty")
            if idx.min() < 0 or idx.max() >= n:
                raise DatasetError(f"{where}: {split_name} split has node ids outside [0, {n})")
            if seen[idx].any() or np.unique(idx).size != idx.size:
                raise DatasetError(
                    f"{where}: the {split_name} split overlaps another or repeats ids"
                )
            seen[idx] = True
            if (self.labels[idx] < 0).any():
                raise DatasetError(f"{where}: the {split_name} split contains unlabelled nodes")
        return self


# ----------------------------------------------------------------------------------------------
# Shared helpers


def _finish(
    name: str,
    graph: CSRGraph,
    features: np.ndarray,
    labels: np.ndarray,
    splits: tuple[np.ndarray, np.ndarray, np.ndarray],
    split: str,
    num_classes: int | None = None,
) -> Dataset:
    labels = np.asarray(labels)
    if labels.ndim != 1 or (labels.size and not np.issubdtype(labels.dtype, np.integer)):
        raise DatasetError(f"{name}: labels must be a 1-D integer array, got {labels.dtype}")
    if labels.size and labels.min() < -1:
        raise DatasetError(
            f"{name}: labels out of range: found {int(labels.min())} "
            f"at node {int(np.argmin(labels))} (class ids must be >= 0)"
        )
    if num_classes is None:
        num_classes = int(labels.max()) + 1 if labels.size else 0
    return Dataset(
        name=name,
        graph=graph,
        features=np.ascontiguousarray(features, dtype=np.float32),
        labels=labels.astype(np.int32),
        num_classes=num_classes,
        train_idx=np.asarray(splits[0], dtype=np.int32),
        val_idx=np.asarray(splits[1], dtype=np.int32),
        test_idx=np.asarray(splits[2], dtype=np.int32),
        split=split,
    ).validate()


def per_class_split(
    rng: np.random.Generator,
    labels: np.ndarray,
    num_train: int = 20,
    num_val: int = 30,
    eligible: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shchur et al. (2018) split: ``num_train`` + ``num_val`` random nodes per class, rest test.

    Only ``eligible`` nodes (default: all) and labelled nodes (label >= 0) enter a split; Shchur et
    al. evaluate on the largest connected component, which :func:`load_dataset` passes here.
    Raises DatasetError when a class has fewer than ``num_train + num_val + 1`` such nodes.
    """
    eligible = np.ones(labels.shape[0], bool) if eligible is None else eligible
    labels = np.where(eligible, labels, -1)
    train, val = [], []
    for c in np.unique(labels[labels >= 0]):
        members = np.flatnonzero(labels == c)
        if members.size <= num_train + num_val:
            raise DatasetError(
                f"class {int(c)} has {members.size} nodes, too few for a split of "
                f"{num_train} train + {num_val} validation nodes per class"
            )
        members = rng.permutation(members)
        train.append(members[:num_train])
        val.append(members[num_train : num_train + num_val])
    train, val = np.sort(np.concatenate(train)), np.sort(np.concatenate(val))
    rest = np.ones(labels.shape[0], dtype=bool)
    rest[train] = rest[val] = False
    rest &= labels >= 0
    return train, val, np.flatnonzero(rest)


_SHCHUR = "per-class 20/30 in the largest component, seed={}"


def _split_rng(split_seed: int) -> np.random.Generator:
    return np.random.default_rng([split_seed, 0x5B11])  # stream id: splits


def _require(path: Path) -> Path:
    if not path.exists():
        raise DatasetError(f"{path}: no such file or directory")
    return path


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
        with open(_require(path), "rb") as f:
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


def _planetoid_name(folder: Path) -> str | None:
    graphs = sorted(folder.glob("ind.*.graph"))
    return graphs[0].name[len("ind.") : -len(".graph")] if graphs else None


def read_planetoid(folder: str | os.PathLike, name: str | None = None) -> Dataset:
    """Reads ``ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}`` with Planetoid's public split.

    Follows Kipf & Welling's loader: test rows are reordered into ``test.index`` order; CiteSeer's
    15 test-range ids without a row get zero features and label -1 (in no split).
    """
    import scipy.sparse as sp

    folder = Path(folder)
    name = name or _planetoid_name(_require(folder))
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
    index_path = _require(folder / f"ind.{name}.test.index")
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
    return _finish(str(folder), graph, features, labels, splits, "planetoid", onehot.shape[1])


# ----------------------------------------------------------------------------------------------
# .npz files (gnn-benchmark, Platonov et al.), bare or zipped


def _open_npz(path: Path) -> tuple[dict[str, np.ndarray], str]:
    """Returns the arrays of an ``.npz`` (or of the one ``.npz`` inside a ``.zip``) and a label."""
    try:
        with zipfile.ZipFile(_require(path)) as zf:
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
    arrays, where = _open_npz(path)
    return _gnn_benchmark_from_arrays(arrays, where, split_seed)


def _gnn_benchmark_from_arrays(arrays: dict, where: str, split_seed: int) -> Dataset:
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
    splits = per_class_split(_split_rng(split_seed), labels, eligible=graph.largest_component())
    return _finish(where, graph, features, labels, splits, _SHCHUR.format(split_seed))


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
    arrays, where = _open_npz(path)
    return _tolokers_from_arrays(arrays, where, split)


def _tolokers_from_arrays(arrays: dict, where: str, split: int) -> Dataset:
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
    return _finish(where, graph, features, labels, tuple(masks), f"stored:{split}")


# ----------------------------------------------------------------------------------------------
# MUSAE csv + json (Facebook Page-Page)


def read_facebook(folder: str | os.PathLike, split_seed: int = 0) -> Dataset:
    """Reads ``facebook_edges.csv``, ``facebook_target.csv`` and ``facebook.json``.

    Labels are the sorted ``page_type`` values; split as in :func:`per_class_split`.
    """
    folder = Path(folder)
    edges_path = _require(folder / "facebook_edges.csv")
    target_path = _require(folder / "facebook_target.csv")
    feats_path = _require(folder / "facebook.json")
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
    splits = per_class_split(_split_rng(split_seed), labels, eligible=graph.largest_component())
    return _finish(str(folder), graph, features, labels, splits, _SHCHUR.format(split_seed))


# ----------------------------------------------------------------------------------------------
# Synthetic graphs


_SYNTHETIC_DEFAULTS = {
    "nodes": 10_000,
    "degree": 10,
    "features": 32,
    "classes": 8,
    "seed": 0,
    "homophily": 0.8,
    "signal": 0.5,
}


def parse_synthetic(spec: str) -> dict[str, float]:
    """Parses ``synthetic:nodes=N,degree=D,...`` into a dict of options (defaults filled in)."""
    body = spec.split(":", 1)[1] if ":" in spec else ""
    opts = dict(_SYNTHETIC_DEFAULTS)
    for item in filter(None, body.split(",")):
        key, sep, value = item.partition("=")
        if not sep or key not in opts:
            raise DatasetError(
                f"--dataset {spec}: unknown or malformed option '{item}' "
                f"(known: {', '.join(_SYNTHETIC_DEFAULTS)})"
            )
        try:
            opts[key] = float(value) if key in ("homophily", "signal", "degree") else int(value)
        except ValueError:
            raise DatasetError(
                f"--dataset {spec}: '{key}' must be a number, got '{value}'"
            ) from None
    if opts["nodes"] < 2 or opts["features"] < 1 or opts["classes"] < 2 or opts["degree"] <= 0:
        raise DatasetError(
            f"--dataset {spec}: need nodes >= 2, degree > 0, features >= 1, classes >= 2"
        )
    if not 0 <= opts["homophily"] <= 1:
        raise DatasetError(f"--dataset {spec}: homophily must lie in [0, 1]")
    return opts


def synthetic(
    rng: np.random.Generator,
    *,
    nodes: int = 10_000,
    degree: float = 10,
    features: int = 32,
    classes: int = 8,
    homophily: float = 0.8,
    signal: float = 0.5,
    exponent: float = 2.5,
    name: str = "synthetic",
) -> Dataset:
    """A degree-corrected planted-partition graph with power-law degrees. Vectorised.

    Each node gets a class uniformly at random and a weight ``w ~ Pareto(exponent - 1)``. Each of
    the ``nodes * degree / 2`` undirected edges picks a source with probability proportional to
    ``w``; with probability ``homophily`` its target is drawn ``∝ w`` within the source's class,
    otherwise ``∝ w`` among all nodes. Features are ``signal * mu_class + N(0, I)`` with class
    means ``mu ~ N(0, I)``. Split: 8 % train, 2 % validation, 90 % test (ogbn-products style).
    """
    labels = rng.integers(classes, size=nodes)
    weight = rng.pareto(exponent - 1.0, size=nodes) + 1.0
    num_edges = int(round(nodes * degree / 2))
    # Nodes sorted by class so that each class's weights form one contiguous run of the cumsum.
    order = np.argsort(labels, kind="stable")
    cum = np.cumsum(weight[order])
    class_end = np.searchsorted(labels[order], np.arange(classes), side="right")
    class_hi = cum[class_end - 1]
    class_lo = np.concatenate([[0.0], class_hi[:-1]])
    class_lo = np.where(class_end > np.concatenate([[0], class_end[:-1]]), class_lo, class_hi)

    def draw(lo, hi):
        pos = np.searchsorted(cum, lo + rng.random(lo.shape[0]) * (hi - lo), side="right")
        return order[np.minimum(pos, nodes - 1)]

    total = np.full(num_edges, cum[-1])
    src = draw(np.zeros(num_edges), total)
    same = rng.random(num_edges) < homophily
    c = labels[src]
    dst = draw(np.where(same, class_lo[c], 0.0), np.where(same, class_hi[c], total))
    graph = from_edges(src, dst, nodes, name=name)
    means = rng.standard_normal((classes, features)).astype(np.float32)
    x = rng.standard_normal((nodes, features), dtype=np.float32)
    x += np.float32(signal) * means[labels]
    perm = rng.permutation(nodes)
    n_train, n_val = max(1, int(0.08 * nodes)), max(1, int(0.02 * nodes))
    splits = (
        np.sort(perm[:n_train]),
        np.sort(perm[n_train : n_train + n_val]),
        np.sort(perm[n_train + n_val :]),
    )
    return _finish(name, graph, x, labels, splits, "random 8/2/90", classes)


# ----------------------------------------------------------------------------------------------
# Registry and format detection

# name -> (sub-directory of the data directory, reader kind, file inside it or None)
REGISTRY: dict[str, tuple[str, str, str | None]] = {
    "cora": ("cora", "planetoid", None),
    "citeseer": ("citeseer", "planetoid", None),
    "amazon_photo": ("amazon_photo", "npz", "amazon-photo.zip"),
    "amazon_computers": ("amazon_computers", "npz", "amazon-computers.zip"),
    "coauthor_cs": ("coauthor_cs", "npz", "coauthor-cs.zip"),
    "facebook_pagepage": ("facebook_pagepage", "facebook", None),
    "tolokers": ("tolokers", "npz", "tolokers.npz"),
}


def default_data_dir() -> Path:
    """``$GNS_JAX_DATA`` if set, else the repository's ``data/`` next to the package."""
    env = os.environ.get("GNS_JAX_DATA")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "data"


def load_dataset(
    spec: str, data_dir: str | os.PathLike | None = None, *, split_seed: int = 0
) -> Dataset:
    """Loads a registered name, a ``synthetic:...`` spec, or a path (format detected by content).

    Args:
      spec: ``cora``, ..., ``synthetic:nodes=N,...``, or a path to a file or directory.
      data_dir: where registered datasets live; defaults to :func:`default_data_dir`.
      split_seed: seed of the random per-class split, for datasets without a stored split.

    Raises:
      DatasetError: unknown name, missing, truncated or corrupt file, invalid content.
    """
    if spec.startswith("synthetic"):
        opts = parse_synthetic(spec)
        seed = int(opts.pop("seed"))
        return synthetic(np.random.default_rng([seed, 0x5E7]), name=spec, **opts)
    key = spec.lower().replace("-", "_")
    if key in REGISTRY:
        sub, _, file = REGISTRY[key]
        root = Path(data_dir) if data_dir is not None else default_data_dir()
        path = root / sub / file if file else root / sub
        if not path.exists():
            raise DatasetError(
                f"dataset '{spec}': {path} does not exist (set --data-dir to the folder holding "
                f"'{sub}/')"
            )
        ds = _load_path(path, split_seed)
        return dataclasses.replace(ds, name=key)
    path = Path(spec)
    if not path.exists():
        raise DatasetError(
            f"--dataset {spec}: neither a registered dataset ({', '.join(REGISTRY)}), "
            "a synthetic:... spec, nor an existing file or directory"
        )
    return _load_path(path, split_seed)


def _load_path(path: Path, split_seed: int) -> Dataset:
    try:
        if path.is_dir():
            from gns_jax import ondisk

            if ondisk.is_saved_dir(path):
                return ondisk.read_saved(path)
            if ondisk.is_ogb_dir(path):
                return ondisk.read_ogb(path)
            if _planetoid_name(path):
                return read_planetoid(path)
            if (path / "facebook_edges.csv").exists():
                return read_facebook(path, split_seed)
            raise DatasetError(
                f"{path}: directory holds no supported dataset (a gns-jax meta.json, an OGB "
                "raw/ + split/ layout, Planetoid ind.*.graph or facebook_edges.csv)"
            )
        with open(path, "rb") as f:
            magic = f.read(4)
        if magic[:2] == b"PK":
            arrays, where = _open_npz(path)
            if "adj_indptr" in arrays:
                return _gnn_benchmark_from_arrays(arrays, where, split_seed)
            if "node_features" in arrays:
                return _tolokers_from_arrays(arrays, where, split=0)
            raise DatasetError(f"{where}: unknown .npz layout (keys: {sorted(arrays)[:8]})")
        if magic[:1] == b"\x80":
            raise DatasetError(
                f"{path}: a single pickle; pass the Planetoid directory holding ind.<name>.* files"
            )
        raise DatasetError(f"{path}: unrecognised file format (not a zip/npz archive)")
    except GnsJaxError as e:
        if isinstance(e, DatasetError):
            raise
        raise DatasetError(str(e)) from None
    except OSError as e:
        raise DatasetError(f"{path}: cannot read ({e.strerror or e})") from None
