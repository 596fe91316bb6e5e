"""Property: whatever a dataset file holds, ``load_dataset`` ends in a valid Dataset or in a
one-line DatasetError/GraphError naming the file (or a file inside the folder), never in another
exception type or a warning.

Hypothesis draws malformed contents (truncated bytes, flipped bytes, wrong dtypes, wrong shapes,
NaN and infinities, negative ids, ids out of range, empty arrays, duplicate split ids, byte-order
marks, non-integer adjacency lists) and writes them into the smallest folder or file of each
format (tests/test_hardening_readers.py). Settings are fixed (``derandomize=True``, no example
database) so a run is deterministic; the default run takes a few seconds, the slow one many more
examples.
"""

import pickle
import re
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gns_jax.data import load_dataset
from gns_jax.errors import DatasetError, GraphError
from tests.test_hardening_readers import (
    write_facebook,
    write_gnn_benchmark,
    write_ogb,
    write_ogb_binary,
    write_planetoid,
    write_sage,
    write_saint,
    write_saved,
    write_tolokers,
)

# format -> (what to load, relative to the copy; [(file, kind)]) where kind says how a file may
# be mutated: "npy" (an array), "npz" (its members), "text", "pickle-array", "pickle-csr",
# "pickle-graph"; every file also takes byte-level mutations.
SAVED = ["indptr", "indices", "features", "labels", "train_idx", "val_idx", "test_idx"]
OGB_NPY = ["raw/edge", "raw/node-feat", "raw/node-label"] + [
    f"split/random/{p}" for p in ("train", "valid", "test")
]
LAYOUTS = {
    "saved": ("", [(f"{a}.npy", "npy") for a in SAVED] + [("meta.json", "text")]),
    "ogb-npy": ("", [(f"{a}.npy", "npy") for a in OGB_NPY]),
    "ogb-csv": ("", [(f"{a}.csv", "text") for a in OGB_NPY]),
    "ogb-binary": ("", [("raw/data.npz", "npz"), ("raw/node-label.npz", "npz")]),
    "graphsaint": (
        "",
        [("adj_full.npz", "npz"), ("feats.npy", "npy")]
        + [("class_map.json", "text"), ("role.json", "text")],
    ),
    "planetoid": (
        "",
        [(f"ind.t.{p}", "pickle-array") for p in ("y", "ty", "ally")]
        + [(f"ind.t.{p}", "pickle-csr") for p in ("x", "tx", "allx")]
        + [("ind.t.graph", "pickle-graph"), ("ind.t.test.index", "text")],
    ),
    "tolokers": ("t.npz", [("t.npz", "npz")]),
    "gnn-benchmark": ("g.npz", [("g.npz", "npz")]),
    "facebook": (
        "",
        [(f, "text") for f in ("facebook_edges.csv", "facebook_target.csv", "facebook.json")],
    ),
    "graphsage": (
        "",
        [(f"toy-{f}", "text") for f in ("G.json", "id_map.json", "class_map.json")]
        + [("toy-feats.npy", "npy")],
    ),
}
WRITERS = {
    "saved": write_saved,
    "ogb-npy": lambda p: write_ogb(p, "npy"),
    "ogb-csv": lambda p: write_ogb(p, "csv"),
    "ogb-binary": write_ogb_binary,
    "graphsaint": write_saint,
    "planetoid": write_planetoid,
    "tolokers": lambda p: (p.mkdir(), write_tolokers(p / "t.npz")),
    "gnn-benchmark": lambda p: (p.mkdir(), write_gnn_benchmark(p / "g.npz")),
    "facebook": write_facebook,
    "graphsage": write_sage,
}

_BASES: dict[str, Path] = {}


def base(layout: str) -> Path:
    """The unmodified folder of ``layout``, written once per session."""
    if layout not in _BASES:
        root = Path(tempfile.mkdtemp(prefix="gns-readers-"))
        WRITERS[layout](root / layout)
        _BASES[layout] = root / layout
    return _BASES[layout]


@pytest.fixture(scope="module", autouse=True)
def _remove_bases():
    yield
    for path in _BASES.values():
        shutil.rmtree(path.parent, ignore_errors=True)
    _BASES.clear()


# ----------------------------------------------------------------------------------------------
# Mutations


DTYPES = [
    np.bool_,
    np.int8,
    np.int32,
    np.int64,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
    "U3",
    "S2",
    "M8[s]",
]
ODD_VALUES = [-1, -7, 5, 6, 7, 102, 507, 2**31 - 1, 2**31, 2**32, 2**62, 2**63 - 1]


def _quiet(make):
    """``make()`` with NumPy's casting warnings silenced (the mutation, not the reader)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            return make()
        except (ValueError, TypeError, OverflowError):
            return None


@st.composite
def mutated_array(draw, a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    how = draw(
        st.sampled_from(["dtype", "shape", "nan", "inf", "value", "empty", "duplicate", "shuffle"])
    )
    flat_index = draw(st.integers(0, max(0, a.size - 1)))
    out = None
    if how == "dtype":
        dtype = draw(st.sampled_from(DTYPES))
        out = _quiet(lambda: a.astype(dtype))
    elif how == "shape":
        change = draw(st.sampled_from(["short", "long", "flat", "extra-dim", "transpose", "col"]))
        out = _quiet(
            lambda: {
                "short": lambda: a[:-1],
                "long": lambda: np.concatenate([a, a[:1]]),
                "flat": lambda: a.reshape(-1),
                "extra-dim": lambda: a[None],
                "transpose": lambda: np.ascontiguousarray(a.T),
                "col": lambda: np.ascontiguousarray(a[..., :1]),
            }[change]()
        )
    elif how in ("nan", "inf") and a.size:
        out = a.astype(np.float64 if a.dtype.kind != "f" else a.dtype)
        out.reshape(-1)[flat_index] = np.nan if how == "nan" else -np.inf
    elif how == "value" and a.size:
        value = draw(st.sampled_from(ODD_VALUES))
        out = a.astype(np.int64) if a.dtype.kind in "biu" else a.copy()
        out.reshape(-1)[flat_index] = value
    elif how == "empty":
        out = a[:0]
    elif how == "duplicate" and a.size:
        out = np.concatenate([a.reshape(-1), a.reshape(-1)[flat_index : flat_index + 1]])
    elif how == "shuffle" and a.size:
        out = a.reshape(-1)[::-1].reshape(a.shape).copy()
    return a if out is None else out


def _text_edit(draw, data: bytes) -> bytes:
    how = draw(st.sampled_from(["bom", "line", "char", "empty", "only-header"]))
    if how == "bom":
        return b"\xef\xbb\xbf" + data
    if how == "empty":
        return b""
    if how == "only-header":
        return data.split(b"\n", 1)[0] + b"\n"
    if how == "line":
        line = draw(
            st.sampled_from(
                [b"-1,3", b"0,1000", b"1e300,2", b"x,y", b"", b"3", b"1,2,3", b"nan,nan", b"0.5,1"]
            )
        )
        return data + line + b"\n"
    if not data:
        return data
    pos = draw(st.integers(0, len(data) - 1))
    char = draw(
        st.sampled_from([b",", b"-", b".", b"x", b"9", b" ", b"\x00", b"\n", b'"', b"\xff"])
    )
    return data[:pos] + char + data[pos + 1 :]


def _bytes_edit(draw, data: bytes) -> bytes:
    how = draw(st.sampled_from(["truncate", "flip"]))
    if how == "truncate" or not data:
        return data[: draw(st.integers(0, max(0, len(data) - 1)))]
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        out[draw(st.integers(0, len(out) - 1))] ^= draw(st.integers(1, 255))
    return bytes(out)


def _npz_edit(draw, path: Path) -> None:
    arrays = dict(np.load(path, allow_pickle=False))
    if not arrays:
        raise ValueError("no members left")
    key = draw(st.sampled_from(sorted(arrays)))
    if draw(st.booleans()):
        arrays[key] = draw(mutated_array(arrays[key]))
    else:
        del arrays[key]
    np.savez(path, **arrays)


def _pickle_edit(draw, path: Path, kind: str) -> None:
    obj = pickle.loads(path.read_bytes())
    if kind == "pickle-array":
        obj = draw(mutated_array(obj))
    elif kind == "pickle-csr":
        attr = draw(st.sampled_from(["data", "indices", "indptr", "_shape"]))
        if attr == "_shape":
            obj._shape = draw(st.sampled_from([(2**40, 4), (-1, 4), (4,), ("a", 4), (4, 2.5)]))
        else:
            obj.__dict__[attr] = draw(mutated_array(getattr(obj, attr)))
    else:  # the adjacency dict
        keys = sorted(obj)
        key = draw(st.sampled_from(keys))
        odd = st.sampled_from([-1, 3.7, 3.0, True, "3", None, 506, 507, 2**40, 2**70, [1]])
        if draw(st.booleans()):
            obj[key] = draw(st.lists(odd | st.integers(0, 506), max_size=3))
        else:
            obj[draw(odd.filter(lambda v: isinstance(v, int | float | str)))] = obj.pop(key)
    path.write_bytes(pickle.dumps(obj, protocol=4))


def mutate(draw, layout: str, folder: Path) -> str:
    """Makes one drawn change to one file of the copy ``folder`` of ``layout``; returns a
    description. ``draw`` is Hypothesis's interactive ``data.draw``."""
    _, files = LAYOUTS[layout]
    name, kind = draw(st.sampled_from(files))
    level = draw(st.sampled_from(["bytes", "content", "content", "content", "directory"]))
    path = folder / name
    if level == "directory" or path.is_dir():  # the file replaced by a folder
        if path.is_file():
            path.unlink()
            path.mkdir()
        return f"directory {name}"
    original = path.read_bytes()
    if level == "content" and kind != "text":
        try:  # a file a first change left unreadable takes byte-level changes only
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if kind == "npy":
                    np.save(path, draw(mutated_array(np.load(path, allow_pickle=False))))
                elif kind == "npz":
                    _npz_edit(draw, path)
                else:
                    _pickle_edit(draw, path, kind)
            return f"content {name}"
        except Exception:  # whatever NumPy, zipfile or pickle raise for a corrupt file
            path.write_bytes(original)
    if level == "content" and kind == "text":
        path.write_bytes(_text_edit(draw, original))
        return f"text {name}"
    path.write_bytes(_bytes_edit(draw, original))
    return f"bytes {name}"


# ----------------------------------------------------------------------------------------------
# The property


def check_outcome(target: Path, single_file: bool = False) -> str:
    """Loads ``target`` with every warning an error; returns "dataset" or "error" after checking
    the Dataset validates or the message is one line starting with the target's path and naming
    a file (any message naming ``target`` when it is a ``single_file`` layout, an ``.npz``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            ds = load_dataset(str(target))
        except (DatasetError, GraphError) as e:
            message = str(e)
            assert "\n" not in message and "\r" not in message, message
            assert message.startswith(str(target)), (str(target), message)
            # A file: the target itself, one inside the folder, or the folder and "(in FILE)".
            names_file = single_file or message.startswith(f"{target}/")
            assert names_file or re.search(r" \(in [^()]+\)$", message), message
            return "error"
        ds.validate()
    return "dataset"


def run_example(data, layouts=tuple(LAYOUTS)) -> str:
    layout = data.draw(st.sampled_from(layouts), label="layout")
    entry, _ = LAYOUTS[layout]
    with tempfile.TemporaryDirectory(prefix="gns-prop-") as tmp:
        folder = Path(tmp) / layout
        shutil.copytree(base(layout), folder)
        for _ in range(data.draw(st.integers(1, 2), label="changes")):
            mutate(data.draw, layout, folder)
        return check_outcome(folder / entry if entry else folder, single_file=bool(entry))


COMMON = dict(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_every_unmodified_layout_loads():
    for layout in LAYOUTS:
        entry, _ = LAYOUTS[layout]
        assert check_outcome(base(layout) / entry if entry else base(layout)) == "dataset"


@settings(max_examples=800, **COMMON)
@given(st.data())
def test_malformed_files_end_in_a_dataset_or_a_named_error(data):
    run_example(data)


@pytest.mark.slow
@settings(max_examples=8000, **COMMON)
@given(st.data())
def test_malformed_files_end_in_a_dataset_or_a_named_error_long(data):
    run_example(data)


def test_planetoid_graph_mutation_reaches_the_reader():
    # A sanity check of the strategy: a float neighbour id is refused naming ind.t.graph.
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "p"
        shutil.copytree(base("planetoid"), folder)
        graph = pickle.loads((folder / "ind.t.graph").read_bytes())
        graph[0] = [3.7]
        (folder / "ind.t.graph").write_bytes(pickle.dumps(graph))
        with pytest.raises(DatasetError, match=r"ind\.t\.graph: node 0: neighbour id 3\.7"):
            load_dataset(str(folder))


def test_sparse_csr_is_pickled_with_its_parts():
    # _pickle_edit relies on csr_matrix keeping data/indices/indptr/_shape in __dict__.
    m = pickle.loads(pickle.dumps(sp.csr_matrix(np.eye(3))))
    assert {"data", "indices", "indptr", "_shape"} <= set(vars(m))
