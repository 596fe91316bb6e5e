"""Readers of the GraphSAINT and GraphSAGE folders (Yelp, Amazon, PPI, Reddit). Host-side NumPy.

The multi-label graphs of the GNS paper are shared in two folder layouts:

* **GraphSAINT** (Zeng et al. 2020): ``adj_full.npz``, a SciPy CSR adjacency matrix written by
  ``scipy.sparse.save_npz``; ``feats.npy``, the ``[N, F]`` feature matrix; ``class_map.json``,
  node id (the string ``"0"`` .. ``"N-1"``) -> a class id, or a list of 0/1 labels; ``role.json``,
  ``{"tr": [...], "va": [...], "te": [...]}``, the node ids of each split. Node ``i`` is row ``i``.
* **GraphSAGE** (Hamilton et al. 2017): ``PREFIX-G.json``, a networkx node-link graph whose nodes
  carry ``"val"`` and ``"test"`` flags (neither set: train; both set: an error);
  ``PREFIX-id_map.json``, node id (as a string; the graph may spell it as an int) -> row of
  ``PREFIX-feats.npy``; ``PREFIX-class_map.json``, node id -> class id or list of 0/1 labels. The
  folder holds one prefix, found from the ``-G.json`` file's name.

In both, integer labels become the usual class ids (contiguous, checked by
:func:`~gns_jax.data.dataset.class_count`) and lists become an int8 ``[N, L]`` label matrix (a
multi-label task, :func:`~gns_jax.data.dataset.check_label_matrix`): every list of one length, each
entry 0 or 1, no mixing of the two kinds. A node absent from the class map is unlabelled, which is
an error for a node in a split. The graph is built by :func:`~gns_jax.graph.from_edges` as for
every reader (symmetrised, self-loops and duplicate edges dropped; for GraphSAINT the stored
non-zeros of the matrix, after :func:`~gns_jax.data.formats.checked_csr` checks its parts).

Every problem is a one-line :class:`~gns_jax.errors.DatasetError` naming the file by its full
path: JSON syntax errors, wrong types, ids outside the graph (a link to an unknown node names
it), a node in two splits. ``feats.npy`` is read without pickles: its header must declare a
numeric 2-D array of one row per node, whose size matches the file and fits
:func:`~gns_jax.data.dataset.check_alloc`, before anything is allocated. Only the stored split
is used (the split description is ``stored:graphsaint`` or ``stored:graphsage``); features are
taken as stored (GraphSAINT's and GraphSAGE's own loaders standardise them on the training nodes).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from gns_jax.data.dataset import (
    Dataset,
    check_alloc,
    check_label_matrix,
    class_count,
    finish,
    require_file,
)
from gns_jax.data.formats import checked_csr, npy_header, open_npz
from gns_jax.errors import DatasetError
from gns_jax.graph import from_edges

__all__ = ["graphsage_prefix", "read_graphsage", "read_graphsaint"]

GRAPHSAINT_SPLIT = "stored:graphsaint"
GRAPHSAGE_SPLIT = "stored:graphsage"


# ----------------------------------------------------------------------------------------------
# Shared pieces


def _describe(value) -> str:
    """A short description of an untrusted JSON value for an error message."""
    text = repr(value)
    return text if len(text) <= 40 else f"{type(value).__name__} {text[:37]}..."


def _read_json(path: Path, what: str):
    """``json.load`` of ``path`` (UTF-8, a BOM allowed), which must hold a JSON object."""
    require_file(path)
    try:
        with open(path, encoding="utf-8-sig") as f:
            value = json.load(f)
    except OSError as e:
        raise DatasetError(f"{path}: cannot read ({e.strerror or e})") from None
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, huge ints
        raise DatasetError(f"{path}: truncated or corrupt JSON ({e})") from None
    if not isinstance(value, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
        raise DatasetError(
            f"{path}: expected a JSON object ({what}), got {kind.get(type(value), 'a number')}"
        )
    return value


def _int_list(values, path: Path, what: str) -> np.ndarray:
    """A JSON list of integers as int64 (booleans, floats and strings refused)."""
    if not isinstance(values, list):
        raise DatasetError(f"{path}: {what} must be a list of integers, got {_describe(values)}")
    if set(map(type, values)) - {int}:
        bad = next(v for v in values if type(v) is not int)
        raise DatasetError(f"{path}: {what} must hold integers, found {_describe(bad)}")
    try:
        return np.array(values, dtype=np.int64).reshape(-1)
    except OverflowError:
        raise DatasetError(f"{path}: {what}: an integer out of range") from None


def _read_features(path: Path, n: int) -> np.ndarray:
    """``feats.npy``: header checked (no pickles, numeric, ``[n, F]``, size of the file, memory
    bound) before the array is read."""
    require_file(path)
    try:
        with open(path, "rb") as f:
            shape, dtype = npy_header(f, str(path), "the feature matrix")
            header = f.tell()
        size = os.path.getsize(path)
    except OSError as e:
        raise DatasetError(f"{path}: cannot read ({e.strerror or e})") from None
    if len(shape) != 2 or dtype.kind not in "biuf":
        raise DatasetError(
            f"{path}: the feature matrix must be a numeric 2-D array, got {dtype} of shape {shape}"
        )
    if shape[0] != n:
        raise DatasetError(f"{path}: the feature matrix has {shape[0]} rows for {n} nodes")
    nbytes = math.prod(shape) * dtype.itemsize
    if header + nbytes != size:
        raise DatasetError(
            f"{path}: the feature matrix declares shape {shape} of {dtype} ({nbytes:,} bytes) but "
            f"the file holds {size - header:,} bytes after its header (truncated or corrupt)"
        )
    # The array as stored, and its float32 copy made by finish().
    check_alloc(shape, dtype.itemsize + 4, str(path), "the feature matrix")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the header parses again (checked above)
            return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise DatasetError(f"{path}: not a readable .npy array ({e})") from None


def _read_labels(path: Path, n: int, row_of: Callable[[str], int | None]) -> np.ndarray:
    """The class map at ``path``: node id -> int (1-D labels) or list of 0/1 (an int8 ``[n, L]``
    matrix); -1 (a row of -1) for nodes it does not name. ``row_of`` maps an id to its row, or
    None for an id that is not a node."""
    mapping = _read_json(path, "node id -> class id or list of 0/1 labels")
    if not mapping:
        raise DatasetError(f"{path}: no labels (an empty object)")
    keys, values = list(mapping), list(mapping.values())
    rows = np.empty(len(keys), dtype=np.int64)
    for i, key in enumerate(keys):
        row = row_of(key)
        if row is None:
            raise DatasetError(f"{path}: node id {_describe(key)} is not a node of the graph")
        rows[i] = row
    if (np.bincount(rows, minlength=n) > 1).any():  # rows lie in [0, n)
        seen: dict[int, str] = {}
        for key, row in zip(keys, rows.tolist()):
            if row in seen:
                raise DatasetError(
                    f"{path}: node ids {_describe(seen[row])} and {_describe(key)} name the "
                    "same node"
                )
            seen[row] = key
    kinds = set(map(type, values))
    if kinds == {int}:
        if min(values) < 0:
            key = keys[values.index(min(values))]
            raise DatasetError(
                f"{path}: node {_describe(key)} has class {min(values)} (class ids must be >= 0)"
            )
        if max(values) > 2**31 - 2:
            raise DatasetError(f"{path}: class id {max(values)} out of range")
        labels = np.full(n, -1, dtype=np.int64)
        labels[rows] = np.array(values, dtype=np.int64)
        class_count(labels, str(path))  # contiguous ids, every class present
        return labels
    if kinds == {list}:
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
        width = int(lengths[0])
        if (lengths != width).any():
            i = int(np.flatnonzero(lengths != width)[0])
            raise DatasetError(
                f"{path}: label lists must all have the same length, but node "
                f"{_describe(keys[0])} has {width} labels and node {_describe(keys[i])} has "
                f"{int(lengths[i])}"
            )
        if width == 0:
            raise DatasetError(f"{path}: the label lists are empty")
        check_alloc((n, width), 1 + 8, str(path), "the label matrix")
        try:
            stored = np.array(values)
        except (ValueError, OverflowError):  # nested lists of uneven depth
            stored = np.array([None])
        if stored.ndim != 2 or stored.dtype.kind not in "biu" or not np.isin(stored, (0, 1)).all():
            i, j = _first_bad_entry(values)
            raise DatasetError(
                f"{path}: label lists must hold 0 or 1, but node {_describe(keys[i])} has "
                f"{_describe(values[i][j])} at position {j}"
            )
        labels = np.full((n, width), -1, dtype=np.int8)
        labels[rows] = stored
        return check_label_matrix(labels, str(path), n)
    if kinds <= {int, list}:
        first = type(values[0])
        i = next(i for i, v in enumerate(values) if type(v) is not first)
        raise DatasetError(
            f"{path}: labels mix class ids and label lists (node {_describe(keys[0])} has "
            f"{_describe(values[0])}, node {_describe(keys[i])} has {_describe(values[i])})"
        )
    i = next(i for i, v in enumerate(values) if type(v) not in (int, list))
    raise DatasetError(
        f"{path}: node {_describe(keys[i])}: a label must be a class id or a list of 0/1, got "
        f"{_describe(values[i])}"
    )


def _first_bad_entry(values: list) -> tuple[int, int]:
    """``(list, position)`` of the first entry of the label lists that is not 0 or 1."""
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            if type(v) not in (int, bool) or v not in (0, 1):
                return i, j
    return 0, 0  # not reached: some entry made the array non-0/1


def _check_labelled(labels: np.ndarray, splits, path: Path, name_of: Callable[[int], str]):
    """Raises DatasetError (naming the class map) for a node in a split that it leaves out."""
    unlabelled = labels[:, 0] < 0 if labels.ndim == 2 else labels < 0
    for split_name, idx in zip(("train", "validation", "test"), splits):
        missing = idx[unlabelled[idx]]
        if missing.size and missing.size == idx.size:
            label = "training" if split_name == "train" else split_name
            raise DatasetError(
                f"{path}: no labelled node in the {label} split (it names none of its "
                f"{idx.size} nodes)"
            )
        if missing.size:
            raise DatasetError(
                f"{path}: node {name_of(int(missing[0]))} is in the {split_name} split but has no "
                f"label ({missing.size} unlabelled in that split)"
            )


# ----------------------------------------------------------------------------------------------
# GraphSAINT


def read_graphsaint(folder: str | os.PathLike) -> Dataset:
    """Reads a GraphSAINT folder: ``adj_full.npz``, ``feats.npy``, ``class_map.json``,
    ``role.json``; the stored split. Raises DatasetError naming the file."""
    folder = Path(folder).absolute()
    adj_path = folder / "adj_full.npz"
    arrays, where = open_npz(adj_path)
    missing = [k for k in ("indptr", "indices", "data", "shape") if k not in arrays]
    if missing:
        raise DatasetError(f"{where}: missing arrays {missing} (not a scipy.sparse.save_npz file)")
    fmt = arrays.get("format")
    fmt = fmt.item() if isinstance(fmt, np.ndarray) and fmt.size == 1 else fmt
    fmt = fmt.decode("ascii", "replace") if isinstance(fmt, bytes) else fmt
    if fmt is not None and not (isinstance(fmt, str) and fmt == "csr"):
        raise DatasetError(f"{where}: a sparse matrix in format {_describe(fmt)}, expected 'csr'")
    adj = checked_csr(
        arrays["data"], arrays["indices"], arrays["indptr"], arrays["shape"], where, "adjacency"
    )
    n = adj.shape[0]
    if adj.shape[0] != adj.shape[1]:
        raise DatasetError(f"{where}: the adjacency matrix is not square: {adj.shape}")
    if n == 0:
        raise DatasetError(f"{where}: the graph has no nodes")
    coo = adj.tocoo()
    stored = coo.data != 0  # an explicit zero is not an edge
    graph = from_edges(coo.row[stored], coo.col[stored], n, name=where)

    role_path = folder / "role.json"
    role = _read_json(role_path, '{"tr": [...], "va": [...], "te": [...]}')
    splits = []
    owner = np.full(n, -1, dtype=np.int8)
    names = {"tr": "train", "va": "validation", "te": "test"}
    for s, key in enumerate(names):
        if key not in role:
            raise DatasetError(f"{role_path}: no '{key}' list (expected keys tr, va, te)")
        idx = _int_list(role[key], role_path, f"'{key}'")
        if not idx.size:
            raise DatasetError(f"{role_path}: the '{key}' ({names[key]}) list is empty")
        out = (idx < 0) | (idx >= n)
        if out.any():
            raise DatasetError(
                f"{role_path}: '{key}' names node {int(idx[out][0])}, outside the graph's [0, {n})"
            )
        counts = np.bincount(idx, minlength=n)  # not np.unique: a hash set, slow at 10^6
        if (counts > 1).any():
            node = int(np.argmax(counts > 1))
            raise DatasetError(f"{role_path}: '{key}' lists node {node} more than once")
        taken = owner[idx] >= 0
        if taken.any():
            node = int(idx[taken][0])
            other = list(names)[owner[node]]
            raise DatasetError(f"{role_path}: node {node} is in both '{other}' and '{key}'")
        owner[idx] = s
        splits.append(np.sort(idx))

    map_path = folder / "class_map.json"

    def row_of(key: str) -> int | None:
        if not (key.isascii() and key.isdigit()) or str(int(key)) != key:
            return None
        return int(key) if int(key) < n else None

    labels = _read_labels(map_path, n, row_of)
    _check_labelled(labels, splits, map_path, str)
    features = _read_features(folder / "feats.npy", n)
    files = dict(graph=adj_path.name, features="feats.npy", labels=map_path.name)
    files.update(dict.fromkeys(("train", "validation", "test"), role_path.name))
    return finish(
        str(folder), graph, features, labels, tuple(splits), GRAPHSAINT_SPLIT, files=files
    )


# ----------------------------------------------------------------------------------------------
# GraphSAGE


def graphsage_prefix(folder: Path) -> str | None:
    """The PREFIX of the folder's ``PREFIX-G.json`` (None if it has none); raises DatasetError
    when it holds more than one."""
    prefixes = sorted(p.name[: -len("-G.json")] for p in folder.glob("*-G.json"))
    if len(prefixes) > 1:
        raise DatasetError(
            f"{folder}: more than one GraphSAGE dataset (prefixes {', '.join(prefixes)}); keep "
            "one PREFIX-G.json per folder"
        )
    return prefixes[0] if prefixes else None


def read_graphsage(folder: str | os.PathLike) -> Dataset:
    """Reads a GraphSAGE folder: ``PREFIX-G.json``, ``PREFIX-id_map.json``,
    ``PREFIX-class_map.json``, ``PREFIX-feats.npy``; the split of the nodes' ``val``/``test``
    flags. Raises DatasetError naming the file."""
    folder = Path(folder).absolute()
    if not folder.is_dir():
        raise DatasetError(f"{folder}: not a directory")
    prefix = graphsage_prefix(folder)
    if prefix is None:
        raise DatasetError(f"{folder}: no PREFIX-G.json file (not a GraphSAGE folder)")
    g_path, id_path, map_path, feats_path = (
        folder / f"{prefix}-{suffix}"
        for suffix in ("G.json", "id_map.json", "class_map.json", "feats.npy")
    )
    for path in (g_path, id_path, map_path, feats_path):
        require_file(path)

    # id_map: node id string -> row; a permutation of 0..N-1.
    id_map = _read_json(id_path, "node id -> row of the feature matrix")
    n = len(id_map)
    if n == 0:
        raise DatasetError(f"{id_path}: no nodes (an empty object)")
    rows = _int_list(list(id_map.values()), id_path, "the rows")
    out = (rows < 0) | (rows >= n)
    if out.any():
        i = int(np.flatnonzero(out)[0])
        raise DatasetError(
            f"{id_path}: node {_describe(list(id_map)[i])} has row {int(rows[i])}, outside the "
            f"{n} rows [0, {n})"
        )
    counts = np.bincount(rows, minlength=n)
    if (counts > 1).any():
        row = int(np.argmax(counts > 1))
        keys = [k for k, r in zip(id_map, rows.tolist()) if r == row][:2]
        raise DatasetError(
            f"{id_path}: nodes {_describe(keys[0])} and {_describe(keys[1])} both have row {row} "
            "(each row must belong to one node)"
        )
    lookup: dict = dict(zip(id_map, rows.tolist()))
    for key, row in list(lookup.items()):  # the graph may spell an integer id as a number
        try:
            if str(int(key)) == key:
                lookup[int(key)] = row
        except ValueError:
            pass

    graph_json = _read_json(g_path, "a networkx node-link graph")
    nodes = graph_json.get("nodes")
    links = graph_json.get("links", graph_json.get("edges"))
    if not isinstance(nodes, list) or not isinstance(links, list):
        raise DatasetError(
            f"{g_path}: expected a node-link graph with lists 'nodes' and 'links', got keys "
            f"{sorted(graph_json)[:6]}"
        )
    split_of = np.full(n, -1, dtype=np.int8)  # 0 train, 1 validation, 2 test
    for i, node in enumerate(nodes):
        if not isinstance(node, dict) or "id" not in node:
            raise DatasetError(f"{g_path}: node entry {i} is not an object with an 'id'")
        node_id = node["id"]
        row = lookup.get(node_id) if type(node_id) in (int, str) else None
        if row is None:
            raise DatasetError(
                f"{g_path}: node {_describe(node_id)} (entry {i}) is not in {id_path.name}"
            )
        val, test = node.get("val", False), node.get("test", False)
        if type(val) is not bool or type(test) is not bool:
            raise DatasetError(
                f"{g_path}: node {_describe(node_id)}: 'val' and 'test' must be true or false"
            )
        if val and test:
            raise DatasetError(
                f"{g_path}: node {_describe(node_id)} is in two splits ('val' and 'test' both true)"
            )
        if split_of[row] >= 0:
            raise DatasetError(f"{g_path}: node {_describe(node_id)} is listed more than once")
        split_of[row] = 2 if test else 1 if val else 0

    try:
        sources = [link["source"] for link in links]
        targets = [link["target"] for link in links]
    except (TypeError, KeyError):
        i = next(
            i
            for i, link in enumerate(links)
            if not isinstance(link, dict) or "source" not in link or "target" not in link
        )
        raise DatasetError(
            f"{g_path}: link {i} is not an object with a 'source' and a 'target'"
        ) from None
    ends = sources + targets
    if set(map(type, ends)) - {int, str}:
        bad = next(v for v in ends if type(v) not in (int, str))
        raise DatasetError(f"{g_path}: a link names {_describe(bad)}, not a node id")
    try:
        src = np.fromiter(map(lookup.__getitem__, sources), dtype=np.int64, count=len(sources))
        dst = np.fromiter(map(lookup.__getitem__, targets), dtype=np.int64, count=len(targets))
    except KeyError as e:
        raise DatasetError(
            f"{g_path}: a link names node {_describe(e.args[0])}, which is not in {id_path.name}"
        ) from None
    graph = from_edges(src, dst, n, name=str(g_path))

    splits = tuple(np.flatnonzero(split_of == s) for s in range(3))
    for idx, empty in zip(
        splits,
        (
            "no train nodes (every node has 'val' or 'test' true)",
            "no validation nodes (no node has 'val' true)",
            "no test nodes (no node has 'test' true)",
        ),
    ):
        if not idx.size:
            raise DatasetError(f"{g_path}: {empty}")
    names = dict(zip(rows.tolist(), id_map))

    def row_of(key: str) -> int | None:
        return lookup.get(key)

    labels = _read_labels(map_path, n, row_of)
    _check_labelled(labels, splits, map_path, lambda row: _describe(names[row]))
    features = _read_features(feats_path, n)
    files = dict(graph=g_path.name, features=feats_path.name, labels=map_path.name)
    files.update(dict.fromkeys(("train", "validation", "test"), g_path.name))
    return finish(str(folder), graph, features, labels, splits, GRAPHSAGE_SPLIT, files=files)
