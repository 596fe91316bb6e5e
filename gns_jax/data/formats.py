"""Readers of the shipped file formats. Host-side NumPy (SciPy for sparse matrices).

* Planetoid ``ind.<name>.*`` pickles (Cora, CiteSeer), read through a restricted unpickler that
  admits only the numpy/scipy/builtin types those files contain and refuses anything else;
* gnn-benchmark ``.npz`` files (Shchur et al. 2018: Amazon, Coauthor), bare or inside a ``.zip``;
* ``.npz`` files with ``node_features``/``node_labels``/``edges`` and split masks (Tolokers and the
  other Platonov et al. 2023 graphs);
* MUSAE csv + json directories (Facebook Page-Page).

Every problem with a file is a :class:`~gns_jax.errors.DatasetError` naming the file and what is
wrong. Arrays in an ``.npz`` are read without pickles, after their ``.npy`` header's shape and
dtype are checked against the member's actual size and the memory bound
(:func:`~gns_jax.data.dataset.check_alloc`). Every sparse matrix (Planetoid's pickled
``csr_matrix`` objects, gnn-benchmark's ``adj_*`` and ``attr_*`` arrays) is rebuilt by
:func:`checked_csr` only after its parts are checked (``indptr`` starting at 0, non-decreasing
and ending at the number of entries, column ids in ``[0, ncols)``, sane shape): SciPy densifies
without bounds checks, so an unchecked column id writes outside the array.

Directedness: every reader builds its graph with :func:`~gns_jax.graph.from_edges` and
``symmetrize=True`` (a gnn-benchmark adjacency matrix is read as its list of non-zeros), so each
edge is stored in both directions by construction; self-loops and duplicate edges are dropped.
"""

from __future__ import annotations

import collections
import csv
import io
import json
import math
import os
import pickle
import re
import struct
import tokenize
import warnings
import zipfile
import zlib
from pathlib import Path

import numpy as np

from gns_jax.data.dataset import (
    MAX_NODES,
    SHCHUR_SPLIT,
    Dataset,
    check_alloc,
    check_kind,
    check_split_labels,
    class_count,
    finish,
    per_class_split,
    require,
    require_file,
    split_rng,
)
from gns_jax.errors import DatasetError
from gns_jax.graph import CSRGraph, from_edges

__all__ = [
    "checked_csr",
    "npy_header",
    "open_npz",
    "planetoid_name",
    "read_facebook",
    "read_gnn_benchmark",
    "read_planetoid",
    "read_tolokers",
    "restricted_unpickle",
]


# ----------------------------------------------------------------------------------------------
# Sparse matrices, checked before SciPy sees them


def _is_int_array(a) -> bool:
    return isinstance(a, np.ndarray) and a.ndim == 1 and np.issubdtype(a.dtype, np.integer)


def checked_csr(data, indices, indptr, shape, where: str, what: str):
    """A ``scipy.sparse.csr_matrix`` from untrusted parts, each checked first; raises DatasetError.

    ``shape`` must be two integers in ``[0, 2^31 - 1)``; ``indptr`` a 1-D integer array of
    ``rows + 1`` entries from 0, non-decreasing, ending at ``len(indices) == len(data)``; every
    column id in ``[0, cols)``; ``data`` 1-D numeric. ``what`` names the matrix in messages.
    """
    import scipy.sparse as sp

    try:  # the kind first: int() of a complex or float dimension would cast it
        integral = shape is not None and np.asarray(shape).dtype.kind in "iu"
        dims = [int(d) for d in np.asarray(shape).reshape(-1)] if integral else []
    except (TypeError, ValueError, OverflowError):
        dims = []
    if len(dims) != 2 or not all(0 <= d <= MAX_NODES for d in dims):
        raise DatasetError(
            f"{where}: {what}: shape must be two integers in [0, {MAX_NODES + 1:,}), got "
            f"{_short(shape)}"
        )
    rows, cols = dims
    if not _is_int_array(indptr) or not _is_int_array(indices):
        raise DatasetError(
            f"{where}: {what}: indptr and indices must be 1-D integer arrays, got "
            f"{_short(indptr)} and {_short(indices)}"
        )
    if not isinstance(data, np.ndarray) or data.ndim != 1 or data.dtype.kind not in "biuf":
        raise DatasetError(f"{where}: {what}: data must be a 1-D numeric array, got {_short(data)}")
    if indptr.shape[0] != rows + 1:
        raise DatasetError(
            f"{where}: {what}: indptr has {indptr.shape[0]} entries for {rows} rows (need rows + 1)"
        )
    if data.shape[0] != indices.shape[0]:
        raise DatasetError(
            f"{where}: {what}: {data.shape[0]} values but {indices.shape[0]} column ids"
        )
    if indptr[0] != 0 or indptr[-1] != indices.shape[0]:
        raise DatasetError(
            f"{where}: {what}: indptr must run from 0 to the {indices.shape[0]} entries, got "
            f"{int(indptr[0])}..{int(indptr[-1])}"
        )
    drops = np.flatnonzero(indptr[1:] < indptr[:-1])  # not np.diff: unsigned ids wrap around
    if drops.size:
        raise DatasetError(f"{where}: {what}: indptr decreases after row {int(drops[0])}")
    if indices.size and (indices.min() < 0 or indices.max() >= cols):
        bad = int(np.flatnonzero((indices < 0) | (indices >= cols))[0])
        raise DatasetError(
            f"{where}: {what}: column id {int(indices[bad])} (entry {bad}) outside [0, {cols})"
        )
    index = np.int32 if max(rows, cols, indices.shape[0]) < 2**31 else np.int64
    widen = data.dtype == np.float16  # SciPy has no float16 matrices
    return sp.csr_matrix(
        (
            np.array(data, dtype=np.float32 if widen else data.dtype, copy=True),
            np.array(indices, dtype=index, copy=True),
            np.array(indptr, dtype=index, copy=True),
        ),
        shape=(rows, cols),
    )


def _short(value) -> str:
    """A short description of an untrusted value for an error message."""
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array of shape {value.shape}"
    text = repr(value) if isinstance(value, int | float | tuple | list | str) else ""
    return text if text and len(text) <= 60 else type(value).__name__


def _dense(matrix, where: str, what: str) -> np.ndarray:
    """``matrix.toarray()`` as float32, within the memory bound (``matrix`` from checked_csr)."""
    check_alloc(matrix.shape, 4, where, what)
    return matrix.astype(np.float32).toarray()


# ----------------------------------------------------------------------------------------------
# Planetoid pickles, through a restricted unpickler


def _numpy_reconstruct():
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct

    def empty_reconstruct(subtype, shape, typecode):
        """NumPy's ``_reconstruct`` for what ``ndarray.__reduce__`` writes: an empty ndarray
        (the data follow in ``__setstate__``); a crafted shape could allocate terabytes."""
        try:  # ndarray.__reduce__ writes typecode b"b" ("b" from Python 2)
            empty = subtype is np.ndarray and math.prod(int(d) for d in shape) == 0
            empty = empty and isinstance(typecode, bytes | str) and typecode in (b"b", "b")
        except (TypeError, ValueError, OverflowError):
            empty = False
        if not empty:
            raise _RefusedGlobal(f"refusing _reconstruct({_short(shape)}): not an empty ndarray")
        return _reconstruct(subtype, shape, typecode)

    return empty_reconstruct


class _RefusedGlobal(pickle.UnpicklingError):
    """A pickle names a global outside the allow-list."""


_PICKLED_KINDS = "biuf"  # the dtypes of Planetoid's arrays: bool, integers, floats
_DTYPE_STATE_TAIL = (None, None, None, -1, -1, 0)  # no subarray, fields, size, alignment, flags


def _simple_dtype(obj, align=False, copy=False):
    """``numpy.dtype`` for a pickle: only a plain bool, integer or float type named by a string
    (no object, structured or text dtypes)."""
    try:
        ok = isinstance(obj, str) and all(f in (0, 1) for f in (align, copy))  # 2016: ints
        ok = ok and re.fullmatch(r"[<>|=]?[a-zA-Z?][0-9]{0,2}", obj) is not None  # 'i4', '<f8'
        dtype = np.dtype(obj) if ok else None
    except (TypeError, ValueError):
        dtype = None
    if dtype is None or dtype.kind not in _PICKLED_KINDS:
        raise _RefusedGlobal(f"refusing numpy.dtype({_short(obj)}): not a bool, integer or float")
    return np.dtype(obj, align, copy)


def _check_build(inst, state) -> None:
    """Checks the state a pickle's BUILD gives a NumPy dtype or array before NumPy sees it.

    ``dtype.__setstate__`` trusts its tuple: a flipped byte in a pickled dtype's flags or sizes
    makes a dtype that NumPy's internals then misuse (``RuntimeError: get_clear_loop not set``,
    ``SystemError``, a reference count flag on integers: a crash). Only the state of a plain
    dtype, ``(3, byteorder, None, None, None, -1, -1, 0)``, is admitted; an array's state must be
    ``(1, shape, plain dtype, is_fortran, raw bytes of exactly the size the shape says)``.
    """
    if isinstance(inst, np.dtype):
        if not (
            type(state) is tuple
            and len(state) == 8
            and state[0] == 3
            and state[1] in ("<", ">", "|", "=")
            and state[2:] == _DTYPE_STATE_TAIL
        ):
            raise _RefusedGlobal(f"refusing the state of a dtype: {_short(state)}")
    elif isinstance(inst, np.ndarray):
        ok = type(state) is tuple and len(state) == 5 and state[0] == 1
        shape = state[1] if ok else None
        ok = ok and type(shape) is tuple and all(type(d) is int and d >= 0 for d in shape)
        dtype = state[2] if ok else None
        ok = ok and isinstance(dtype, np.dtype) and dtype.kind in _PICKLED_KINDS
        ok = ok and type(state[3]) is bool and isinstance(state[4], bytes | str)
        if not ok or len(state[4]) != math.prod(shape) * dtype.itemsize:
            raise _RefusedGlobal(f"refusing the state of an array: {_short(state)}")


class _PlanetoidUnpickler(pickle._Unpickler):
    """Admits only the globals that Planetoid's 2016 ``ind.*`` pickles reference; refuses the rest.

    Those files name ``scipy.sparse.csr.csr_matrix`` (a module path SciPy 2 removes), numpy arrays
    and dtypes, ``collections.defaultdict`` and ``list``. Any other global (``os.system``,
    ``builtins.eval``, ...) raises ``pickle.UnpicklingError`` before anything is called. It is
    the pure-Python unpickler, whose BUILD opcode can be intercepted: the state of every NumPy
    dtype and array is checked (:func:`_check_build`) before NumPy's ``__setstate__`` runs.
    """

    dispatch = dict(pickle._Unpickler.dispatch)

    def load_build(self):
        if len(self.stack) >= 2:
            _check_build(self.stack[-2], self.stack[-1])
        pickle._Unpickler.load_build(self)

    dispatch[pickle.BUILD[0]] = load_build

    def find_class(self, module: str, name: str):
        import scipy.sparse

        allowed = {
            ("builtins", "list"): list,
            ("__builtin__", "list"): list,  # Python 2 name, as the 2016 files spell it
            ("collections", "defaultdict"): collections.defaultdict,
            ("numpy", "dtype"): _simple_dtype,
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
    """Loads one Planetoid pickle with :class:`_PlanetoidUnpickler`; raises DatasetError.

    The file is read into memory first, so a corrupt length in the pickle cannot ask for more
    than the file holds; NumPy's ``MemoryError`` for an array whose declared shape overflows is
    reported as a corrupt file.
    """
    try:
        data = require_file(path).read_bytes()
        return _PlanetoidUnpickler(io.BytesIO(data), encoding="latin1").load()
    except DatasetError:
        raise
    except _RefusedGlobal as e:
        raise DatasetError(f"{path}: not a valid Planetoid pickle: {e}") from None
    except OSError as e:
        raise DatasetError(f"{path}: cannot read ({e.strerror or e})") from None
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        IndexError,
        KeyError,
        OverflowError,
        MemoryError,
        RecursionError,
        struct.error,  # the pure-Python unpickler's reading of a cut length
    ) as e:
        raise DatasetError(
            f"{path}: truncated or corrupt Planetoid pickle ({type(e).__name__}: {e})"
        ) from None


def planetoid_name(folder: Path) -> str | None:
    graphs = sorted(folder.glob("ind.*.graph"))
    return graphs[0].name[len("ind.") : -len(".graph")] if graphs else None


def _planetoid_features(obj, path: Path):
    """A Planetoid feature matrix (a pickled ``csr_matrix`` or a dense array) as checked CSR.

    An unpickled ``csr_matrix`` is only a bag of attributes set by the pickle, never checked by
    SciPy; its parts are taken from ``vars()`` and rebuilt by :func:`checked_csr`.
    """
    import scipy.sparse as sp

    if isinstance(obj, sp.csr_matrix):
        parts = vars(obj)
        return checked_csr(
            parts.get("data"),
            parts.get("indices"),
            parts.get("indptr"),
            parts.get("_shape"),
            str(path),
            "feature matrix",
        )
    if isinstance(obj, np.ndarray) and obj.ndim == 2 and obj.dtype.kind in "biuf":
        return sp.csr_matrix(obj.astype(np.float32))
    raise DatasetError(f"{path}: expected a feature matrix, got {_short(obj)}")


def _planetoid_onehot(obj, path: Path) -> np.ndarray:
    if not isinstance(obj, np.ndarray) or obj.ndim != 2 or obj.dtype.kind not in "biuf":
        raise DatasetError(f"{path}: expected a one-hot label matrix, got {_short(obj)}")
    if obj.size and not (np.isin(obj, (0, 1)).all() and obj.sum(1).max() <= 1):
        raise DatasetError(
            f"{path}: not a one-hot label matrix (entries must be 0 or 1, at most one 1 per row)"
        )
    return obj.astype(np.int8)


def read_planetoid(folder: str | os.PathLike, name: str | None = None) -> Dataset:
    """Reads ``ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}`` with Planetoid's public split.

    Follows Kipf & Welling's loader: the ``tx``/``ty`` rows go to the ids of ``test.index``, which
    must be unique and follow the ``allx`` rows; CiteSeer's 15 test-range ids without a row get
    zero features and label -1 (in no split). At most as many such gaps as test ids are accepted.
    The class count is the one-hot width; every class must have a labelled node.
    """
    folder = Path(folder).absolute()
    name = name or planetoid_name(require(folder))
    if name is None:
        raise DatasetError(f"{folder}: no ind.<name>.graph file (not a Planetoid directory)")
    paths = {s: folder / f"ind.{name}.{s}" for s in ("x", "y", "tx", "ty", "allx", "ally")}
    graph_path = folder / f"ind.{name}.graph"
    parts = {s: restricted_unpickle(p) for s, p in paths.items()}
    graph_obj = restricted_unpickle(graph_path)
    x, tx, allx = (_planetoid_features(parts[s], paths[s]) for s in ("x", "tx", "allx"))
    y, ty, ally = (_planetoid_onehot(parts[s], paths[s]) for s in ("y", "ty", "ally"))
    if not isinstance(graph_obj, dict):
        raise DatasetError(f"{graph_path}: expected a dict of adjacency lists")
    index_path = require_file(folder / f"ind.{name}.test.index")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "input contained no data": the size check says so
            test_idx = np.loadtxt(index_path, dtype=np.int64, ndmin=1, encoding="utf-8-sig")
    except (ValueError, OverflowError, UnicodeDecodeError) as e:
        raise DatasetError(f"{index_path}: not a list of integer node ids ({e})") from None
    except OSError as e:
        raise DatasetError(f"{index_path}: cannot read ({e.strerror or e})") from None

    for a, b, what in ((x, y, "x/y"), (tx, ty, "tx/ty"), (allx, ally, "allx/ally")):
        if a.shape[0] != b.shape[0]:
            raise DatasetError(
                f"{paths[what.split('/')[1]]}: Planetoid {what} disagree in length "
                f"({a.shape[0]} vs {b.shape[0]} rows)"
            )
    # A width that differs from allx's (ally's) names its file.
    odd_x = "x" if x.shape[1] != allx.shape[1] else "tx"
    if not x.shape[1] == tx.shape[1] == allx.shape[1]:
        raise DatasetError(
            f"{paths[odd_x]}: x, tx and allx have different widths "
            f"({x.shape[1]}, {tx.shape[1]}, {allx.shape[1]} features)"
        )
    odd_y = "y" if y.shape[1] != ally.shape[1] else "ty" if ty.shape[1] != ally.shape[1] else "ally"
    if not y.shape[1] == ty.shape[1] == ally.shape[1] >= 1:
        raise DatasetError(
            f"{paths[odd_y]}: y, ty and ally have different widths "
            f"({y.shape[1]}, {ty.shape[1]}, {ally.shape[1]} classes)"
        )
    num_train, known = y.shape[0], allx.shape[0]
    if num_train + 500 > known:
        raise DatasetError(
            f"{paths['y']}: {num_train} training rows and Planetoid's 500 validation rows "
            f"exceed the {known} rows of {paths['allx'].name}"
        )
    if test_idx.ndim != 1 or test_idx.size != tx.shape[0] or not test_idx.size:
        raise DatasetError(f"{index_path}: {test_idx.size} test ids but {tx.shape[0]} rows in tx")
    srt = np.sort(test_idx)
    lo, hi = int(srt[0]), int(srt[-1])
    if lo != known:
        raise DatasetError(
            f"{index_path}: test ids must start right after the {known} allx rows, found {lo}"
        )
    if np.any(srt[1:] == srt[:-1]):
        raise DatasetError(f"{index_path}: repeated test id {int(srt[1:][srt[1:] == srt[:-1]][0])}")
    gaps = hi - lo + 1 - srt.size
    if gaps > srt.size:
        raise DatasetError(
            f"{index_path}: test ids span {hi - lo + 1:,} ids for {srt.size} rows; at most as many "
            "gaps as test ids are accepted (a corrupt id?)"
        )
    n = hi + 1
    check_alloc((n, allx.shape[1]), 4, str(folder), "the dense feature matrix")
    # Kipf & Welling: features[test_idx[i]] = tx[i]; ids in the test range without a row stay 0.
    features = np.zeros((n, allx.shape[1]), dtype=np.float32)
    features[:known] = _dense(allx, str(paths["allx"]), "feature matrix")
    features[test_idx] = _dense(tx, str(paths["tx"]), "feature matrix")
    onehot = np.zeros((n, ally.shape[1]), dtype=np.int8)
    onehot[:known] = ally
    onehot[test_idx] = ty
    labels = np.where(onehot.sum(1) > 0, onehot.argmax(1), -1)
    splits = (np.arange(num_train), np.arange(num_train, num_train + 500), test_idx)
    # y holds the training rows' labels, which must be the first rows of ally (Kipf & Welling
    # train on ally's): an all-zero y means no labelled training node, whatever ally says.
    check_split_labels(y.sum(1) > 0, splits[0], "train", str(paths["y"]))
    differ = np.flatnonzero((y != ally[:num_train]).any(1))
    if differ.size:
        row = int(differ[0])
        raise DatasetError(
            f"{paths['y']}: training row {row} disagrees with row {row} of {paths['ally'].name} "
            f"({differ.size} rows differ; y must repeat the first {num_train} rows of ally)"
        )
    labelled = labels >= 0
    check_split_labels(labelled, splits[1], "validation", str(paths["ally"]))
    check_split_labels(labelled, splits[2], "test", str(paths["ty"]))
    graph = _planetoid_graph(graph_obj, graph_path, n)
    files = dict(
        graph=graph_path.name,
        features=f"{paths['allx'].name}, {paths['tx'].name}",
        labels=f"{paths['ally'].name}, {paths['ty'].name}",
        train=paths["y"].name,
        validation=paths["ally"].name,
        test=index_path.name,
    )
    return finish(
        str(folder), graph, features, labels, splits, "planetoid", onehot.shape[1], files=files
    )


def _planetoid_graph(graph_obj: dict, path: Path, n: int) -> CSRGraph:
    """The graph of ``ind.<name>.graph``, a dict of node id -> list of neighbour ids, where every
    id must be a Python int (not a float, which ``np.fromiter`` would truncate, a bool or a
    string)."""
    keys, lists = list(graph_obj), list(graph_obj.values())
    if set(map(type, keys)) - {int}:
        bad = next(k for k in keys if type(k) is not int)
        raise DatasetError(
            f"{path}: node id {_short(bad)} ({type(bad).__name__}) is not an integer; the graph "
            "must map integer node ids to lists of integer neighbour ids"
        )
    if set(map(type, lists)) - {list, tuple}:
        i = next(i for i, v in enumerate(lists) if type(v) not in (list, tuple))
        raise DatasetError(
            f"{path}: node {keys[i]}: expected a list of neighbour ids, got {_short(lists[i])}"
        )
    if set(map(type, (v for vs in lists for v in vs))) - {int}:
        i, bad = next((i, v) for i, vs in enumerate(lists) for v in vs if type(v) is not int)
        raise DatasetError(
            f"{path}: node {keys[i]}: neighbour id {_short(bad)} ({type(bad).__name__}) is not "
            "an integer"
        )
    try:
        src = np.repeat(np.array(keys, dtype=np.int64), [len(v) for v in lists])
        dst = np.fromiter((v for vs in lists for v in vs), np.int64, count=src.size)
    except OverflowError:
        raise DatasetError(f"{path}: a node id beyond int64, outside [0, {n})") from None
    return from_edges(src, dst, n, name=str(path))


# ----------------------------------------------------------------------------------------------
# .npz files (gnn-benchmark, Platonov et al.), bare or zipped


_UNUSED = ("class_names", "node_names", "attr_names")  # object arrays in some files; never read
# What reading a corrupt zip member can raise, besides DatasetError.
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    EOFError,
    OSError,
    ValueError,
    KeyError,
    OverflowError,
    NotImplementedError,  # an unknown compression method
    RuntimeError,  # an encrypted member
)


def open_npz(path: Path) -> tuple[dict[str, np.ndarray], str]:
    """Returns the arrays of an ``.npz`` (or of the one ``.npz`` inside a ``.zip``) and a label.

    Each member's ``.npy`` header is read first: object dtypes are refused, and the declared
    shape must match the member's size exactly and fit :func:`~gns_jax.data.dataset.check_alloc`
    before anything is allocated. The arrays ``class_names``, ``node_names`` and ``attr_names``
    (object arrays in the Coauthor files) are skipped.
    """
    try:
        with zipfile.ZipFile(require_file(path)) as zf:
            members = zf.namelist()
            inner = [m for m in members if m.endswith(".npz")]
            if members and all(m.endswith(".npy") for m in members):
                return _npz_arrays(zf, str(path)), str(path)
            if len(inner) != 1:
                raise DatasetError(
                    f"{path}: a zip archive that is neither an .npz nor holds exactly one .npz "
                    f"(members: {members[:5]})"
                )
            where = f"{path}:{inner[0]}"
            check_alloc((zf.getinfo(inner[0]).file_size,), 1, where, "the archive member")
            raw = zf.read(inner[0])
        with zipfile.ZipFile(io.BytesIO(raw)) as npz:
            return _npz_arrays(npz, where), where
    except DatasetError:
        raise
    except zipfile.BadZipFile as e:
        raise DatasetError(f"{path}: truncated or corrupt archive ({e})") from None
    except _ZIP_ERRORS as e:
        raise DatasetError(f"{path}: truncated or corrupt .npz ({type(e).__name__}: {e})") from None


def npy_header(f, where: str, what: str = "the array") -> tuple[tuple[int, ...], np.dtype]:
    """Reads a ``.npy`` header from ``f`` (left just after it): the shape and dtype. Refuses
    object dtypes (pickles), negative dimensions and unknown versions; raises DatasetError
    ``"{where}: {what} ..."``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a mangled header can warn about escape sequences
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise DatasetError(f"{where}: {what} has an unsupported .npy version {version}")
    except DatasetError:
        raise
    except (ValueError, EOFError, TypeError, SyntaxError, tokenize.TokenError) as e:
        # NumPy parses the header as a Python literal (tokenize errors for a mangled one).
        raise DatasetError(
            f"{where}: {what} has a truncated or corrupt .npy header ({type(e).__name__}: {e})"
        ) from None
    if dtype.hasobject:
        raise DatasetError(f"{where}: {what} holds Python objects (not read: no pickles)")
    if any(d < 0 for d in shape):
        raise DatasetError(f"{where}: {what} declares a negative shape {shape}")
    return shape, dtype


def _npz_arrays(zf: zipfile.ZipFile, where: str) -> dict[str, np.ndarray]:
    arrays = {}
    for info in zf.infolist():
        key = info.filename[: -len(".npy")] if info.filename.endswith(".npy") else info.filename
        if key in _UNUSED:
            continue
        with zf.open(info) as f:
            shape, dtype = npy_header(f, where, f"array '{key}'")
            header = f.tell()
        nbytes = math.prod(shape) * dtype.itemsize
        if header + nbytes != info.file_size:
            raise DatasetError(
                f"{where}: array '{key}' declares shape {shape} of {dtype} ({nbytes:,} bytes) but "
                f"holds {info.file_size - header:,} bytes (truncated or corrupt)"
            )
        check_alloc(shape, dtype.itemsize, where, f"array '{key}'")
        with zf.open(info) as f, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the header parses again (checked above)
            arrays[key] = np.lib.format.read_array(f, allow_pickle=False)
    return arrays


def _need(arrays: dict, keys: tuple[str, ...], where: str) -> None:
    missing = [k for k in keys if k not in arrays]
    if missing:
        raise DatasetError(f"{where}: missing arrays {missing}")


def _csr_parts(arrays: dict, prefix: str, where: str):
    return checked_csr(
        arrays[f"{prefix}_data"],
        arrays[f"{prefix}_indices"],
        arrays[f"{prefix}_indptr"],
        arrays[f"{prefix}_shape"],
        where,
        f"sparse matrix '{prefix}'",
    )


def read_gnn_benchmark(path: str | os.PathLike, split_seed: int = 0) -> Dataset:
    """Reads a gnn-benchmark ``.npz`` (bare or the single file inside a ``.zip``).

    The adjacency matrix may be directed (Amazon's are): its non-zeros are symmetrised. Labels
    must be contiguous class ids. Split: 20 train and 30 validation nodes per class, the rest
    test, within the largest connected component (Shchur et al.), drawn with ``split_seed``.
    """
    path = Path(path)
    arrays, where = open_npz(path)
    return gnn_benchmark_from_arrays(arrays, where, split_seed)


def gnn_benchmark_from_arrays(arrays: dict, where: str, split_seed: int) -> Dataset:
    _need(arrays, ("adj_data", "adj_indices", "adj_indptr", "adj_shape", "labels"), where)
    adj = _csr_parts(arrays, "adj", where)
    n = adj.shape[0]
    if adj.shape[0] != adj.shape[1]:
        raise DatasetError(f"{where}: adjacency matrix is not square: {adj.shape}")
    labels = arrays["labels"]
    if labels.ndim != 1 or labels.shape[0] != n:
        raise DatasetError(f"{where}: labels must have shape [{n}], got {labels.shape}")
    num_classes = class_count(labels, where, unlabelled=False)
    if "attr_matrix" in arrays:
        features = arrays["attr_matrix"]
        if features.ndim != 2 or features.shape[0] != n or features.dtype.kind not in "biuf":
            raise DatasetError(
                f"{where}: attr_matrix must be a numeric [{n}, F] array, got {_short(features)}"
            )
    else:
        _need(arrays, ("attr_data", "attr_indices", "attr_indptr", "attr_shape"), where)
        attr = _csr_parts(arrays, "attr", where)
        if attr.shape[0] != n:
            raise DatasetError(f"{where}: attr_shape has {attr.shape[0]} rows for {n} nodes")
        features = _dense(attr, where, "the dense feature matrix")
    coo = adj.tocoo()
    graph = from_edges(coo.row, coo.col, n, name=where)
    splits = per_class_split(split_rng(split_seed), labels, eligible=_eligible(graph), name=where)
    return finish(
        where, graph, features, labels, splits, SHCHUR_SPLIT.format(split_seed), num_classes
    )


def _eligible(graph: CSRGraph) -> np.ndarray | None:
    """The nodes a Shchur split draws from: the largest connected component, or every node of a
    graph without edges (whose components are all single nodes)."""
    return graph.largest_component() if graph.num_edges else None


def read_tolokers(path: str | os.PathLike, split: int = 0) -> Dataset:
    """Reads a Platonov et al. (2023) ``.npz`` and uses its stored split number ``split``.

    Labels must be contiguous class ids; the split masks boolean (or 0/1) ``[splits, N]``.
    """
    path = Path(path)
    arrays, where = open_npz(path)
    return tolokers_from_arrays(arrays, where, split)


def tolokers_from_arrays(arrays: dict, where: str, split: int) -> Dataset:
    keys = ("node_features", "node_labels", "edges", "train_masks", "val_masks", "test_masks")
    _need(arrays, keys, where)
    features, labels, edges = arrays["node_features"], arrays["node_labels"], arrays["edges"]
    if labels.ndim != 1:
        raise DatasetError(f"{where}: node_labels must be 1-D, got shape {labels.shape}")
    if labels.dtype.kind not in "iu":
        raise DatasetError(
            f"{where}: node_labels must be a 1-D integer array, got {labels.dtype} of shape "
            f"{labels.shape}"
        )
    edges = check_kind(edges, where, "array 'edges' (node ids)")
    n = labels.shape[0]
    num_classes = class_count(labels, where, unlabelled=False)
    if features.ndim != 2 or features.shape[0] != n or features.dtype.kind not in "biuf":
        raise DatasetError(
            f"{where}: node_features must be a numeric [{n}, F] array, got {_short(features)}"
        )
    if edges.ndim != 2 or edges.shape[1] != 2:
        raise DatasetError(f"{where}: edges must have shape [E, 2], got {edges.shape}")
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        raise DatasetError(
            f"{where}: array 'edges' ({edges.dtype}) holds node ids {edges.min()}..{edges.max()}, "
            f"outside [0, {n})"
        )
    graph = from_edges(edges[:, 0], edges[:, 1], n, name=where)
    masks = []
    for k in ("train_masks", "val_masks", "test_masks"):
        m = arrays[k]
        m = m[None] if m.ndim == 1 else m
        if m.ndim != 2 or m.shape[1] != n or not 0 <= split < m.shape[0]:
            raise DatasetError(f"{where}: '{k}' must have shape [splits, {n}] with split {split}")
        if m.dtype != bool and not (m.dtype.kind in "iu" and np.isin(m, (0, 1)).all()):
            raise DatasetError(f"{where}: '{k}' must hold booleans (or 0/1), got {m.dtype}")
        if not m[split].any():
            part = k.split("_")[0].replace("val", "validation")
            raise DatasetError(
                f"{where}: the {part} split is empty ('{k}' row {split} is all false)"
            )
        masks.append(np.flatnonzero(m[split]))
    return finish(where, graph, features, labels, tuple(masks), f"stored:{split}", num_classes)


# ----------------------------------------------------------------------------------------------
# MUSAE csv + json (Facebook Page-Page)


def read_facebook(folder: str | os.PathLike, split_seed: int = 0) -> Dataset:
    """Reads ``facebook_edges.csv``, ``facebook_target.csv`` and ``facebook.json``.

    Labels are the sorted ``page_type`` values; split as in :func:`per_class_split`. Every row of
    the target csv must have all its fields, node ids ``0..N-1`` in order; the JSON maps node ids
    to lists of non-negative integer feature ids.
    """
    folder = Path(folder).absolute()
    edges_path = require_file(folder / "facebook_edges.csv")
    target_path = require_file(folder / "facebook_target.csv")
    feats_path = require_file(folder / "facebook.json")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "input contained no data": the shape check says so
            edges = np.loadtxt(
                edges_path,
                delimiter=",",
                skiprows=1,
                dtype=np.int64,
                ndmin=2,
                encoding="utf-8-sig",
            )
    except (ValueError, OverflowError, UnicodeDecodeError) as e:
        raise DatasetError(f"{edges_path}: not a csv of integer id pairs ({e})") from None
    except OSError as e:
        raise DatasetError(f"{edges_path}: cannot read ({e.strerror or e})") from None
    if edges.size == 0:  # the header alone: a graph without edges
        edges = edges.reshape(0, 2)
    if edges.shape[1] != 2:
        raise DatasetError(f"{edges_path}: expected two columns id_1,id_2")
    labels, n = _facebook_targets(target_path)
    features = _facebook_features(feats_path, n)
    graph = from_edges(edges[:, 0], edges[:, 1], n, name=str(edges_path))
    splits = per_class_split(
        split_rng(split_seed), labels, eligible=_eligible(graph), name=str(target_path)
    )
    files = dict(
        graph=edges_path.name,
        features=feats_path.name,
        labels=target_path.name,
        train=target_path.name,
        validation=target_path.name,
        test=target_path.name,
    )
    return finish(
        str(folder), graph, features, labels, splits, SHCHUR_SPLIT.format(split_seed), files=files
    )


def _facebook_targets(path: Path) -> tuple[np.ndarray, int]:
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:  # Excel writes a BOM
            rows = list(csv.reader(f))
    except (csv.Error, UnicodeDecodeError) as e:
        raise DatasetError(f"{path}: not a readable csv ({e})") from None
    except OSError as e:
        raise DatasetError(f"{path}: cannot read ({e.strerror or e})") from None
    header = rows[0] if rows else []
    if "page_type" not in header or "id" not in header:
        raise DatasetError(f"{path}: expected a csv with columns id,...,page_type")
    body = rows[1:]
    for line, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise DatasetError(
                f"{path}: line {line} has {len(row)} fields, the header {len(header)} "
                "(a truncated or corrupt row)"
            )
    id_col, type_col = header.index("id"), header.index("page_type")
    try:
        ids = np.array([int(r[id_col]) for r in body], dtype=np.int64)
    except (ValueError, OverflowError) as e:
        raise DatasetError(f"{path}: bad node id ({e})") from None
    n = len(body)
    if not n or not np.array_equal(ids, np.arange(n)):
        raise DatasetError(f"{path}: rows must list node ids 0..{n - 1} in order")
    _, labels = np.unique([r[type_col] for r in body], return_inverse=True)
    return labels.astype(np.int64), n


def _facebook_features(path: Path, n: int) -> np.ndarray:
    try:
        with open(path, encoding="utf-8-sig") as f:
            feats = json.load(f)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, huge ints
        raise DatasetError(f"{path}: truncated or corrupt JSON ({e})") from None
    except OSError as e:
        raise DatasetError(f"{path}: cannot read ({e.strerror or e})") from None
    if not isinstance(feats, dict):
        raise DatasetError(f"{path}: expected {{node id: [feature ids]}}, got {_short(feats)}")
    rows, cols = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for key, ids in feats.items():
        try:
            node = int(key)
        except ValueError:
            raise DatasetError(f"{path}: node id '{key[:20]}' is not an integer") from None
        if str(node) != key:  # " 3", "+3" and "03" would all name node 3
            raise DatasetError(f"{path}: node id '{key[:20]}' is not written as a plain integer")
        if not isinstance(ids, list) or not all(type(i) is int and i >= 0 for i in ids):
            raise DatasetError(
                f"{path}: node {key[:20]}: expected a list of non-negative integer feature ids"
            )
        if not 0 <= node < n:
            raise DatasetError(f"{path}: node id {node} outside [0, {n})")
        if ids and max(ids) > MAX_NODES:
            raise DatasetError(f"{path}: node {node}: feature id {max(ids)} out of range")
        rows.append(np.full(len(ids), node, dtype=np.int64))
        cols.append(np.asarray(ids, dtype=np.int64))
    r, c = np.concatenate(rows), np.concatenate(cols)
    width = int(c.max()) + 1 if c.size else 1
    check_alloc((n, width), 4, str(path), "the dense feature matrix")
    features = np.zeros((n, width), dtype=np.float32)
    features[r, c] = 1.0
    return features
