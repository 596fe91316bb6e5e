"""Crafted and corrupt inputs: every load ends in a one-line GnsJaxError naming the file or the
option, or in a Dataset that passes ``Dataset.validate()``; never another exception type, a crash
or silently wrong data. Crafted files are made in ``tmp_path``; loads that could crash the
interpreter (out-of-range sparse indices) run in a subprocess."""

import dataclasses
import io
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from gns_jax.data import load_dataset, parse_synthetic, synthetic
from gns_jax.data.formats import restricted_unpickle
from gns_jax.data.ondisk import save_dataset
from gns_jax.errors import DatasetError, GnsJaxError, GraphError
from gns_jax.graph import from_edges
from tests.helpers import gnn_benchmark_npz

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

# Loads each path given on stdin (a JSON list) and prints one JSON line per load: the outcome, the
# message, and any warnings. A crash (a segfault) ends the process early: the caller sees it.
CHILD = r"""
import json, sys, warnings
from gns_jax.data import load_dataset
from gns_jax.errors import GnsJaxError
for spec in json.loads(sys.stdin.read()):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            ds = load_dataset(spec)
            ds.validate()
            out = {"outcome": "dataset", "nodes": ds.num_nodes, "classes": int(ds.num_classes)}
        except GnsJaxError as e:
            out = {"outcome": "error", "message": str(e)}
        except Exception as e:
            out = {"outcome": "other", "message": f"{type(e).__name__}: {e}"}
    out["spec"], out["warnings"] = spec, [str(w.message) for w in caught]
    print(json.dumps(out), flush=True)
"""


def load_in_child(paths, timeout: float = 120) -> list[dict]:
    """Loads every path in one fresh interpreter; fails on a crash, a timeout or a warning."""
    paths = [str(p) for p in paths]
    run = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=json.dumps(paths),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
        cwd=ROOT,
    )
    results = [json.loads(line) for line in run.stdout.splitlines()]
    crashed = paths[len(results)] if len(results) < len(paths) else None
    assert run.returncode == 0, f"exit {run.returncode} loading {crashed}: {run.stderr[-3000:]}"
    assert len(results) == len(paths)
    for r in results:
        assert r["outcome"] in ("dataset", "error"), r
        assert not r["warnings"], r
        assert r["outcome"] == "dataset" or "\n" not in r["message"], r
    return results


def errors_in_child(paths) -> list[str]:
    """The error message of each load, all of which must fail with a GnsJaxError."""
    results = load_in_child(paths)
    assert [r["outcome"] for r in results] == ["error"] * len(paths), results
    return [r["message"] for r in results]


def small_synthetic(nodes=200):
    return synthetic(np.random.default_rng(0), nodes=nodes, degree=5, features=8, classes=3)


def cli_train(dataset: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``gns-jax train --dataset DATASET`` for one quiet epoch, in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "gns_jax", "train", "--dataset", dataset, "--epochs", "1"]
        + ["--quiet"],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
        cwd=ROOT,
    )


def assert_clean_exit(run: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit status 2 and one stderr line ``gns-jax: error: ...`` holding every fragment."""
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("gns-jax: error: "), run.stderr[-2000:]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def test_error_messages_are_one_line():
    error = DatasetError("data.npz: corrupt (ValueError: first\nsecond\r\nthird)")
    assert str(error) == "data.npz: corrupt (ValueError: first second third)"
    assert isinstance(error, GnsJaxError)


# --- synthetic specs ----------------------------------------------------------------------------


def test_only_synthetic_colon_is_a_spec(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    save_dataset(small_synthetic(), tmp_path / "synthetic_small")
    ds = load_dataset("synthetic_small")  # a folder, not a default 10,000-node spec
    assert ds.num_nodes == 200 and ds.num_features == 8
    with pytest.raises(DatasetError, match="--dataset synthetic: neither a registered dataset"):
        load_dataset("synthetic")


@pytest.mark.parametrize(
    "spec, message",
    [
        ("synthetic:nodes=400,degree=6,features=8", "missing classes"),
        ("synthetic:", "missing nodes, degree, features, classes"),
        ("synthetic:nodes=400,features=8,classes=3", "missing degree"),
        ("synthetic:nodes=400,degree=6,features=8,classes=3,seed=-1", "seed must be >= 0"),
        ("synthetic:nodes=400,degree=nan,features=8,classes=3", "'degree' must be finite"),
        ("synthetic:nodes=400,degree=6,features=8,classes=3,signal=inf", "'signal' must be fin"),
        ("synthetic:nodes=400,nodes=500,degree=6,features=8,classes=3", "'nodes' is given twice"),
        ("synthetic:nodes=4,degree=2,features=8,classes=5", "classes <= nodes"),
        ("synthetic:nodes=4000000000,degree=2,features=8,classes=5", "nodes <= 2,147,483,646"),
        ("synthetic:nodes=10000000,degree=2,features=10000000,classes=5", "feature matrix"),
        ("synthetic:nodes=1000,degree=1e15,features=8,classes=5", "edge arrays"),
    ],
)
def test_bad_synthetic_specs_name_the_option(spec, message):
    with pytest.raises(DatasetError, match=f"^--dataset {spec}: .*") as info:
        parse_synthetic(spec)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_synthetic_optional_keys_take_the_documented_defaults():
    opts = parse_synthetic("synthetic:nodes=400,degree=6,features=8,classes=3")
    assert opts == dict(
        nodes=400,
        degree=6.0,
        features=8,
        classes=3,
        seed=0,
        homophily=0.8,
        signal=0.5,
        train=0.08,
        val=0.02,
        test=None,
        multilabel=0.0,
    )


@pytest.mark.integration
def test_negative_seed_exits_2_on_the_command_line():
    assert_clean_exit(
        cli_train("synthetic:nodes=400,degree=6,features=8,classes=3,seed=-1"),
        "--dataset synthetic:",
        "seed must be >= 0",
    )


def test_small_synthetic_graphs_have_every_class():
    ds = synthetic(np.random.default_rng(3), nodes=10, degree=3, features=2, classes=8)
    assert ds.num_classes == 8 and np.all(np.bincount(ds.labels, minlength=8) > 0)
    # A draw that already covers every class is kept as drawn (seeded outputs are unchanged).
    big = small_synthetic(600)
    np.testing.assert_array_equal(big.labels, np.random.default_rng(0).integers(3, size=600))


# --- Dataset.validate --------------------------------------------------------------------------


def test_validate_refuses_a_directed_graph_and_an_empty_class():
    ds = small_synthetic()
    senders, receivers = ds.graph.edges()
    one_way = senders < receivers
    directed = from_edges(senders[one_way], receivers[one_way], ds.num_nodes, symmetrize=False)
    with pytest.raises(GraphError, match="where: not undirected: edge"):
        dataclasses.replace(ds, graph=directed).validate("where")
    with pytest.raises(DatasetError, match=r"contiguous 0\.\.3 .* 1 classes have no .*\(3\)"):
        dataclasses.replace(ds, num_classes=4).validate()


# --- Planetoid ---------------------------------------------------------------------------------


def planetoid_copy(tmp_path: Path, tag: str) -> Path:
    folder = tmp_path / tag
    shutil.copytree(DATA / "cora", folder, ignore=shutil.ignore_patterns("SOURCE.md"))
    return folder


def repickle(path: Path, mutate) -> None:
    """Rewrites one Planetoid pickle after ``mutate`` changes (or replaces) its object."""
    obj = restricted_unpickle(path)
    changed = mutate(obj)
    obj = obj if changed is None else changed
    path.write_bytes(pickle.dumps(obj, protocol=4))


def test_planetoid_feature_column_ids_out_of_range_are_refused(tmp_path):
    # The figures: 2^31-1 crashed (exit 139), 10^8 wrote into other memory, 1440 and -1
    # (cora has 1433 columns) changed another row's features without a word.
    values = [2**31 - 1, 10**8, 1440, -1]
    folders = []
    for v in values:
        folder = planetoid_copy(tmp_path, f"cora_{v}")
        repickle(folder / "ind.cora.allx", lambda m, v=v: m.indices.__setitem__(5, v))
        folders.append(folder)
    for v, folder, message in zip(values, folders, errors_in_child(folders)):
        assert message.startswith(f"{folder / 'ind.cora.allx'}: feature matrix: column id {v} ")
        assert "outside [0, 1433)" in message


@pytest.mark.integration
def test_planetoid_column_id_crash_exits_2_on_the_command_line(tmp_path):
    folder = planetoid_copy(tmp_path, "cora")
    repickle(folder / "ind.cora.tx", lambda m: m.indices.__setitem__(0, 2**31 - 1))
    assert_clean_exit(cli_train(str(folder)), "ind.cora.tx: feature matrix: column id 2147483647")


def _set(name, value):
    return lambda m: m.__dict__.__setitem__(name, value)


@pytest.mark.parametrize(
    "part, mutate, message",
    [
        ("allx", _set("indptr", np.array([0, 5, 3], np.int32)), "indptr has 3 entries for 1708"),
        ("x", _set("_shape", (140, 10**12)), "shape must be two integers"),
        ("x", _set("_shape", "big"), "shape must be two integers"),
        ("x", _set("indices", [1, 2]), "indptr and indices must be 1-D integer arrays"),
        ("x", lambda m: np.arange(3), "expected a feature matrix, got int64 array of shape (3,)"),
        ("y", lambda y: y * 2, "ind.cora.y: not a one-hot label matrix"),
        ("ty", lambda y: y[:, :5], "y, ty and ally have different widths (7, 5, 7 classes)"),
        ("tx", lambda m: m[:, :100], "x, tx and allx have different widths (1433, 100, 1433"),
    ],
)
def test_planetoid_malformed_parts_name_the_file(tmp_path, part, mutate, message):
    folder = planetoid_copy(tmp_path, "cora")
    repickle(folder / f"ind.cora.{part}", mutate)
    with pytest.raises(DatasetError, match=str(folder).replace("\\", "\\\\")) as info:
        load_dataset(str(folder))
    assert message in str(info.value)


def test_planetoid_indptr_not_monotone(tmp_path):
    folder = planetoid_copy(tmp_path, "cora")

    def mutate(m):
        m.indptr[10] = m.indptr[12]  # row 10 ends after row 11 starts

    repickle(folder / "ind.cora.allx", mutate)
    with pytest.raises(DatasetError, match=r"ind\.cora\.allx: feature matrix: indptr decreases"):
        load_dataset(str(folder))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda ids: ids[:-1] + ["1000000000"], r"test ids span 999,998,293 ids for 1000 rows"),
        (lambda ids: ids[:-1] + [ids[0]], r"repeated test id"),
        (lambda ids: [str(int(i) + 5) for i in ids], r"must start right after the 1708 allx"),
        (lambda ids: ids[:-1] + ["99999999999999999999999"], r"not a list of integer node ids"),
    ],
)
def test_planetoid_test_index_is_checked(tmp_path, edit, message):
    folder = planetoid_copy(tmp_path, "cora")
    index = folder / "ind.cora.test.index"
    index.write_text("\n".join(edit(index.read_text().split())) + "\n")
    with pytest.raises(DatasetError, match=rf"ind\.cora\.test\.index: .*{message}"):
        load_dataset(str(folder))


def test_planetoid_refuses_reconstruct_of_a_huge_array(tmp_path):
    # _reconstruct(ndarray, (2^40,), b'b') would allocate a terabyte before any check.
    folder = planetoid_copy(tmp_path, "cora")
    crafted = (
        b"\x80\x02cnumpy.core.multiarray\n_reconstruct\nq\x00cnumpy\nndarray\nq\x01"
        b"\x8a\x06\x00\x00\x00\x00\x00\x01\x85C\x01b\x87R."
    )
    (folder / "ind.cora.ty").write_bytes(crafted)
    with pytest.raises(DatasetError, match=r"ind\.cora\.ty: .*refusing _reconstruct"):
        load_dataset(str(folder))


# --- gnn-benchmark .npz ------------------------------------------------------------------------


def gnn_benchmark_arrays(n: int = 120, classes: int = 2) -> dict:
    """A small gnn-benchmark layout: a directed adjacency (each edge stored once), sparse counts."""
    rng = np.random.default_rng(0)
    src = np.concatenate([np.arange(n), rng.integers(0, n, 2 * n)])
    dst = np.concatenate([(np.arange(n) + 1) % n, rng.integers(0, n, 2 * n)])
    adj = sp.csr_matrix((np.ones(src.size, np.float32), (src, dst)), shape=(n, n))
    adj.sum_duplicates()
    attr = sp.csr_matrix((rng.random((n, 6)) < 0.3) * rng.integers(1, 4, (n, 6)), dtype=np.float32)
    return gnn_benchmark_npz(adj, attr, np.arange(n) % classes)


def write_gnn_benchmark(path: Path, **changes) -> Path:
    arrays = gnn_benchmark_arrays()
    for key, change in changes.items():
        arrays[key] = change(arrays[key].copy()) if callable(change) else change
    np.savez(path, **arrays)
    return path


def test_gnn_benchmark_directed_adjacency_is_symmetrised(tmp_path):
    arrays = gnn_benchmark_arrays()
    ds = load_dataset(str(write_gnn_benchmark(tmp_path / "g.npz")))
    ds.graph.check_undirected()
    adj = sp.csr_matrix(
        (arrays["adj_data"], arrays["adj_indices"], arrays["adj_indptr"]), shape=(120, 120)
    )
    both = ((adj + adj.T) > 0).astype(np.int8).tolil()
    both.setdiag(0)
    both = both.tocsr()
    np.testing.assert_array_equal(ds.graph.indptr, both.indptr)
    np.testing.assert_array_equal(ds.graph.indices, both.indices)
    np.testing.assert_array_equal(
        ds.features,
        sp.csr_matrix(
            (arrays["attr_data"], arrays["attr_indices"], arrays["attr_indptr"]), shape=(120, 6)
        ).toarray(),
    )


def _entry(key, index, value):
    def change(a):
        a[index] = value
        return a

    return {key: change}


def _drop_at_60_unsigned(indptr):
    """indptr[60] = indptr[59] - 1, as uint64 (where np.diff wraps around instead of going < 0)."""
    return np.where(np.arange(indptr.size) == 60, indptr[59] - 1, indptr).astype(np.uint64)


@pytest.mark.integration
def test_gnn_benchmark_sparse_ids_out_of_range_are_refused(tmp_path):
    cases = [
        (_entry("attr_indices", 3, 2**31 - 1), "sparse matrix 'attr': column id 2147483647"),
        (_entry("attr_indices", 3, 10**8), "sparse matrix 'attr': column id 100000000"),
        (_entry("attr_indices", 3, 6), "sparse matrix 'attr': column id 6 (entry 3) outside"),
        (_entry("attr_indices", 3, -1), "sparse matrix 'attr': column id -1 (entry 3) outside"),
        (_entry("adj_indices", 0, 120), "sparse matrix 'adj': column id 120 (entry 0) outside"),
        (_entry("adj_indices", 0, -5), "sparse matrix 'adj': column id -5 (entry 0) outside"),
        (_entry("adj_indptr", 7, 0), "sparse matrix 'adj': indptr decreases after row 6"),
        ({"attr_indptr": lambda a: a[:-1]}, "'attr': indptr has 120 entries for 120 rows"),
        ({"attr_indptr": _drop_at_60_unsigned}, "'attr': indptr decreases after row 59"),
        ({"attr_shape": np.array([120, 2_000_000_000])}, "over the bound"),
        ({"attr_shape": np.array([120, 2**40])}, "'attr': shape must be two integers"),
        ({"adj_shape": np.array([120.0, 120.0])}, "'adj': shape must be two integers"),
        ({"adj_shape": np.array([120, 121])}, "adjacency matrix is not square: (120, 121)"),
        ({"labels": lambda a: a[:-1]}, "labels must have shape [120], got (119,)"),
    ]
    paths = [write_gnn_benchmark(tmp_path / f"g{i}.npz", **c) for i, (c, _) in enumerate(cases)]
    for path, (_, fragment), message in zip(paths, cases, errors_in_child(paths)):
        assert message.startswith(f"{path}: ") and fragment in message, (fragment, message)
    assert_clean_exit(cli_train(str(paths[4])), "g4.npz: sparse matrix 'adj': column id 120")


@pytest.mark.parametrize(
    "labels, message",
    [
        (np.where(np.arange(120) == 7, 5, np.arange(120) % 2), r"3 classes have no .* \(2, 3, 4\)"),
        (np.where(np.arange(120) == 7, 2**31 - 1, np.arange(120) % 2), "class id 2147483647 at"),
        (np.arange(120) % 3, "class 0 has 40 labelled nodes in the largest connected component"),
        (np.arange(120) % 2 - 1, r"labels out of range: found -1 at node 0"),
        (np.arange(120) % 2 * 1.0, r"labels must be a 1-D integer array"),
    ],
)
def test_gnn_benchmark_labels_are_checked_naming_the_file(tmp_path, labels, message):
    path = write_gnn_benchmark(tmp_path / "photo.npz", labels=labels)
    with pytest.raises(DatasetError, match=rf"^{path}: .*{message}"):
        load_dataset(str(path))


def npz_with_member(path: Path, arrays: dict, name: str, raw: bytes) -> Path:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    with zipfile.ZipFile(buf, "a") as zf:
        zf.writestr(name, raw)
    path.write_bytes(buf.getvalue())
    return path


def npy_header(shape, descr="<i8") -> bytes:
    buf = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue()


def test_npz_members_are_checked_before_allocation(tmp_path):
    arrays = gnn_benchmark_arrays()
    labels = arrays.pop("labels")
    huge = npz_with_member(
        tmp_path / "huge.npz", arrays, "labels.npy", npy_header((10**12,)) + labels.tobytes()
    )
    with pytest.raises(
        DatasetError,
        match=r"'labels' declares shape \(1000000000000,\) .*"
        r"but holds 960 bytes",
    ):
        load_dataset(str(huge))
    short = npz_with_member(
        tmp_path / "short.npz", arrays, "labels.npy", npy_header((120,)) + labels[:60].tobytes()
    )
    with pytest.raises(DatasetError, match=r"short\.npz: array 'labels' .*truncated or corrupt"):
        load_dataset(str(short))
    objects = npz_with_member(
        tmp_path / "objects.npz", arrays, "labels.npy", npy_header((2,), "|O") + b"\x80\x04N."
    )
    with pytest.raises(DatasetError, match=r"objects\.npz: array 'labels' holds Python objects"):
        load_dataset(str(objects))
    # The same bound inside a .zip holding the .npz (the shipped Amazon/Coauthor layout)
    outer = tmp_path / "outer.zip"
    with zipfile.ZipFile(outer, "w") as zf:
        zf.writestr("inner.npz", huge.read_bytes())
    with pytest.raises(DatasetError, match=r"outer\.zip:inner\.npz: array 'labels' declares"):
        load_dataset(str(outer))


# --- Tolokers-style .npz -----------------------------------------------------------------------


@pytest.mark.integration
def test_tolokers_label_outside_the_classes_is_refused(tmp_path):
    from tests.test_datasets import write_npz

    labels = np.arange(20) % 2
    labels[3] = 5  # trained 6 classes before
    path = write_npz(tmp_path / "tolokers.npz", node_labels=labels)
    message = errors_in_child([path])[0]
    assert message.startswith(f"{path}: ") and "classes have no labelled node (2, 3, 4)" in message
    assert_clean_exit(cli_train(path), "tolokers.npz: class ids must be contiguous 0..5")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(node_labels=np.array(3)), "node_labels must be 1-D"),
        (dict(train_masks=(np.arange(20) < 8)[None] * 2), "'train_masks' must hold booleans"),
        (dict(node_features=np.array([["a"] * 3] * 20)), "node_features must be a numeric"),
        (dict(edges=np.array([[0, 1, 2]])), "edges must have shape [E, 2]"),
        (dict(node_features=np.full((20, 3), 1e39)), "NaN or infinite"),
    ],
)
def test_tolokers_malformed_arrays(tmp_path, overrides, message):
    from tests.test_datasets import write_npz

    path = write_npz(tmp_path / "t.npz", **overrides)
    with pytest.raises(DatasetError, match=rf"^{path}: ") as info:
        load_dataset(path)
    assert message in str(info.value)


# --- MUSAE csv + json --------------------------------------------------------------------------


def facebook_folder(root: Path, n: int = 120) -> Path:
    root.mkdir()
    rng = np.random.default_rng(0)
    edges = "".join(f"{i},{(i + 1) % n}\n" for i in range(n))
    (root / "facebook_edges.csv").write_text("id_1,id_2\n" + edges)
    kinds = ("company", "politician")
    rows = "".join(f"{i},{1000 + i},page {i},{kinds[i % 2]}\n" for i in range(n))
    (root / "facebook_target.csv").write_text("id,facebook_id,page_name,page_type\n" + rows)
    feats = {str(i): sorted(rng.choice(20, 3, replace=False).tolist()) for i in range(n)}
    (root / "facebook.json").write_text(json.dumps(feats))
    return root


def test_facebook_small_folder_loads(tmp_path):
    ds = load_dataset(str(facebook_folder(tmp_path / "fb")))
    assert (ds.num_nodes, ds.num_classes, ds.graph.num_edges) == (120, 2, 240)
    assert ds.features.sum() == 360


@pytest.mark.integration
def test_facebook_target_cut_mid_row(tmp_path):
    folder = facebook_folder(tmp_path / "fb")
    target = folder / "facebook_target.csv"
    text = target.read_text()
    target.write_text(text[: text.index("57,1057,") + len("57,1057,page")])
    assert_clean_exit(
        cli_train(str(folder)), f"{target}: line 59 has 3 fields, the header 4 (a truncated"
    )


@pytest.mark.parametrize(
    "feats, message",
    [
        ({"0": [1.5]}, "node 0: expected a list of non-negative integer feature ids"),
        ({"0": [-1]}, "node 0: expected a list of non-negative integer feature ids"),
        ({"0": [2**70]}, "feature id 1180591620717411303424 out of range"),
        ({"0": [2_000_000_000]}, "the dense feature matrix of shape (120, 2000000001)"),
        ({"500": [1]}, "node id 500 outside [0, 120)"),
        ({"x": [1]}, "node id 'x' is not an integer"),
        ([[1]], "expected {node id: [feature ids]}, got [[1]]"),
    ],
)
def test_facebook_features_json_is_checked(tmp_path, feats, message):
    folder = facebook_folder(tmp_path / "fb")
    (folder / "facebook.json").write_text(json.dumps(feats))
    with pytest.raises(DatasetError, match=r"facebook\.json: ") as info:
        load_dataset(str(folder))
    assert message in str(info.value)


def test_facebook_class_too_small_names_the_target_file(tmp_path):
    folder = facebook_folder(tmp_path / "fb", n=80)
    with pytest.raises(DatasetError, match=r"facebook_target\.csv: class 0 has 40 labelled"):
        load_dataset(str(folder))


# --- saved folders (gns-jax save) --------------------------------------------------------------


@pytest.fixture
def saved(tmp_path) -> Path:
    """A small saved folder whose dataset is named after its generating spec."""
    folder = tmp_path / "saved"
    save_dataset(load_dataset("synthetic:nodes=200,degree=5,features=8,classes=3"), folder)
    return folder


def edit_meta(folder: Path, change) -> None:
    path = folder / "meta.json"
    meta = json.loads(path.read_text())
    meta = change(meta) if callable(change) else change
    path.write_text(json.dumps(meta))


@pytest.mark.integration
def test_meta_json_missing_a_key_or_not_an_object(saved):
    meta = saved / "meta.json"
    original = meta.read_text()
    edit_meta(saved, lambda m: {k: v for k, v in m.items() if k != "num_nodes"})
    assert_clean_exit(
        cli_train(str(saved)), f"{meta}: 'num_nodes' must be a non-negative integer, got nothing"
    )
    for change, message in (
        ([1, 2], "must be a JSON object, got list"),
        (lambda m: {k: v for k, v in m.items() if k != "num_features"}, "got nothing (missing)"),
        (lambda m: m | {"num_edges": "12"}, "'num_edges' must be a non-negative integer, got '12'"),
        (lambda m: m | {"num_classes": -3}, "'num_classes' must be a non-negative integer, got -3"),
        (lambda m: m | {"feature_dtype": "int8"}, "'feature_dtype' must be float32 or float16"),
        (lambda m: m | {"num_nodes": 2**40}, "num_nodes=1099511627776 exceeds"),
        (lambda m: m | {"name": 3}, "'name' must be a string"),
    ):
        meta.write_text(original)
        edit_meta(saved, change)
        with pytest.raises(DatasetError, match=f"^{meta}: ") as info:
            load_dataset(str(saved))
        assert message in str(info.value)


def test_saved_features_narrower_than_meta_says(saved):
    x = np.load(saved / "features.npy")
    np.save(saved / "features.npy", np.ascontiguousarray(x[:, :5]))
    with pytest.raises(DatasetError, match=r"features\.npy: expected float32 of shape \[200, 8\]"):
        load_dataset(str(saved))


@pytest.mark.parametrize(
    "name, array, message",
    [
        ("features", np.zeros((200, 8), np.float64), r"features\.npy: expected float32"),
        ("features", np.asfortranarray(np.ones((200, 8), np.float32)), "Fortran order"),
        ("labels", np.zeros((200, 1), np.int32), r"labels\.npy: expected int32 of shape \[200\]"),
        ("labels", np.zeros(200, np.int64), r"labels\.npy: expected int32"),
        ("indptr", np.zeros(201, np.int32), r"indptr\.npy: expected int64 of shape \[201\]"),
        ("train_idx", np.zeros((2, 2), np.int32), r"train_idx\.npy: expected int32 of shape"),
        ("indices", np.zeros(3, np.int32), r"indices\.npy: expected int32 of shape \["),
        ("labels", np.full(200, None), r"labels\.npy: the array holds Python objects"),
    ],
)
def test_saved_arrays_of_the_wrong_dtype_or_shape(saved, name, array, message):
    np.save(saved / f"{name}.npy", array)
    with pytest.raises(DatasetError, match=message):
        load_dataset(str(saved))


def test_saved_npy_header_declaring_more_than_the_file_holds(saved):
    raw = npy_header((10**12,), "<i4") + np.zeros(200, np.int32).tobytes()
    (saved / "labels.npy").write_bytes(raw)
    with pytest.raises(DatasetError, match=r"labels\.npy: not a readable \.npy array"):
        load_dataset(str(saved))


@pytest.mark.parametrize(
    "old, new, message",
    [
        (b"(200,)", b"(200,(", r"TokenError: \('EOF in multi-line statement'"),
        (b"'<i4'", b"'\\d4'", "descr is not a valid dtype descriptor"),
        (b"{'descr'", b"('descr'", "Cannot parse header"),
    ],
)
def test_saved_npy_header_mangled(saved, old, new, message):
    path = saved / "labels.npy"
    path.write_bytes(path.read_bytes().replace(old, new, 1))
    # In a fresh interpreter with every warning shown: the error comes alone, without warnings.
    (result,) = errors_in_child([saved])
    assert result.startswith(f"{path}: the array has a truncated or corrupt .npy header")
    assert re.search(message, result), result


def test_saved_errors_name_the_folder_not_the_spec(saved):
    x = np.load(saved / "features.npy", mmap_mode="r+")
    x[17, 2] = np.inf
    x.flush()
    del x
    with pytest.raises(DatasetError) as info:
        load_dataset(str(saved))
    assert str(info.value).startswith(f"{saved}: features contain NaN or infinite values")
    assert "synthetic:" not in str(info.value)


def test_saved_num_classes_beyond_the_labels(saved):
    edit_meta(saved, lambda m: m | {"num_classes": 2**31 - 1})  # would ask the device for GiBs
    with pytest.raises(DatasetError, match=rf"^{saved}: 2147483647 classes but only 200 labelled"):
        load_dataset(str(saved))
    edit_meta(saved, lambda m: m | {"num_classes": 5})
    with pytest.raises(DatasetError, match=r"2 classes have no labelled node \(3, 4\)"):
        load_dataset(str(saved))


@pytest.mark.integration
def test_saved_directed_graph_is_refused(saved):
    indptr, indices = np.load(saved / "indptr.npy"), np.load(saved / "indices.npy")
    senders = indices
    receivers = np.repeat(np.arange(200), np.diff(indptr))
    keep = senders < receivers  # one direction of every edge
    graph = from_edges(senders[keep], receivers[keep], 200, symmetrize=False)
    np.save(saved / "indptr.npy", graph.indptr)
    np.save(saved / "indices.npy", graph.indices)
    edit_meta(saved, lambda m: m | {"num_edges": graph.num_edges})
    assert_clean_exit(cli_train(str(saved)), f"{saved}: not undirected: edge ")


def test_interrupted_save_is_reported_as_incomplete(tmp_path, monkeypatch):
    import gns_jax.data.ondisk as ondisk

    real_save = np.save

    def interrupted(path, array):
        if Path(path).name == "val_idx.npy":
            raise KeyboardInterrupt
        real_save(path, array)

    monkeypatch.setattr(ondisk.np, "save", interrupted)
    folder = tmp_path / "partial"
    with pytest.raises(KeyboardInterrupt):
        save_dataset(small_synthetic(), folder)
    monkeypatch.undo()
    assert not (folder / "meta.json").exists() and (folder / "features.npy").exists()
    with pytest.raises(DatasetError, match=rf"^{folder}: incomplete save \(interrupted\?\): "):
        load_dataset(str(folder))
    # meta.json is the last file written, and never half-written: a temporary name is renamed.
    complete = tmp_path / "complete"
    save_dataset(small_synthetic(), complete)
    names = sorted(p.name for p in complete.iterdir())
    assert "meta.json" in names and not any(n.endswith(".tmp") for n in names)
    newest = max(complete.iterdir(), key=lambda p: p.stat().st_mtime_ns)
    assert newest.name == "meta.json"


@pytest.mark.integration
def test_save_onto_an_existing_file(tmp_path):
    target = tmp_path / "taken.txt"
    target.write_text("keep me\n")
    with pytest.raises(DatasetError, match=rf"^{target}: exists and is not a folder"):
        save_dataset(small_synthetic(), target)
    assert target.read_text() == "keep me\n"
    run = subprocess.run(
        [sys.executable, "-m", "gns_jax", "save", "--quiet", "--out", str(target)]
        + ["--dataset", "synthetic:nodes=200,degree=5,features=8,classes=3"],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
        cwd=ROOT,
    )
    assert_clean_exit(run, f"{target}: exists and is not a folder")
    with pytest.raises(DatasetError, match=r"taken\.txt/sub: cannot write the dataset"):
        save_dataset(small_synthetic(), target / "sub")


# --- OGB node-property layout ------------------------------------------------------------------


def ogb_dir(root: Path, fmt: str = "csv") -> Path:
    from tests.test_ondisk import _ogb_dir

    return _ogb_dir(small_synthetic(), root, fmt)


@pytest.mark.integration
def test_ogb_label_beyond_the_classes_is_refused(tmp_path):
    root = ogb_dir(tmp_path / "ogbn-small")
    label = root / "raw" / "node-label.csv"
    lines = label.read_text().splitlines()
    lines[9] = "100000"  # gave 100001 classes and validation accuracy 0
    label.write_text("\n".join(lines) + "\n")
    assert_clean_exit(cli_train(str(root)), f"{label}: class id 100000 at node 9 with only 200")
    lines[9] = "5"
    label.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=r"node-label\.csv: .*2 classes have no labelled node"):
        load_dataset(str(root))


@pytest.mark.parametrize(
    "text, message",
    [
        ("0,1\n2\n3,4,5\n", r"line 2 has 1 fields, line 1 has 2 \(rows of unequal length\)"),
        ("0,1\n2,3\n\n", r"line 3 has 1 fields, line 1 has 2"),
        ("0,1\n2,nan\n", r"expected integers, found NaN or infinite values"),
        ("0,1\n2,inf\n", r"expected integers, found NaN or infinite values"),
        ("0,1\n2,1e300\n", r"integer 1000000000000000052504760255204420248704468581108159154915"),
        ("0,1\n2,,\n", r"line 2 has 3 fields"),
        ("0,1\n2,x\n", r"not a comma-separated numeric table"),
    ],
)
def test_ogb_edge_tables_are_parsed_strictly(tmp_path, text, message):
    root = ogb_dir(tmp_path / "o")
    (root / "raw" / "edge.csv").write_text(text)
    with pytest.raises(DatasetError, match=rf"edge\.csv: {message}"):
        load_dataset(str(root))


def test_ogb_npy_tables_are_checked(tmp_path):
    root = ogb_dir(tmp_path / "o", "npy")
    np.save(root / "raw" / "edge.npy", np.array([[0, 1], [2, 3]], np.float64) + 0.5)
    with pytest.raises(DatasetError, match=r"edge\.npy: expected integers, found fractional"):
        load_dataset(str(root))
    np.save(root / "raw" / "edge.npy", np.array([["a", "b"]]))
    with pytest.raises(DatasetError, match=r"edge\.npy: expected a numeric array, got <U1"):
        load_dataset(str(root))
    np.save(root / "raw" / "num-node-list.npy", np.zeros(0, np.int64))
    with pytest.raises(DatasetError, match=r"num-node-list\.npy: says \[\] nodes"):
        load_dataset(str(root))


def test_ogb_gz_bomb_is_bounded(tmp_path, monkeypatch):
    import gzip

    import gns_jax.data.ondisk as ondisk

    root = ogb_dir(tmp_path / "o", "csv.gz")
    (root / "raw" / "edge.csv.gz").write_bytes(gzip.compress(b"0,1\n" * 300_000))
    monkeypatch.setattr(ondisk, "memory_budget", lambda: 1 << 20)  # 1 MiB for this test
    with pytest.raises(DatasetError, match=r"edge\.csv\.gz: more than 0\.0 GiB of text"):
        ondisk.read_ogb(root)


# --- fuzz: every shipped format, corrupted in many ways ----------------------------------------

# Variants whose corruption makes the data invalid must end in an error ("error"); truncations
# and byte flips may also leave a valid dataset ("any": a cut at a line end of a csv, a flipped
# feature value). Either way the outcome is a GnsJaxError naming the variant's path, or a Dataset
# that passes validate(); the child process must not crash or warn.


class Variants:
    def __init__(self, root: Path, seed: int = 0):
        self.root, self.rng, self.made = root, np.random.default_rng(seed), []

    def new(self, base: Path, tag: str, expect: str) -> Path:
        path = self.root / f"v{len(self.made):03d}-{tag}{base.suffix if base.is_file() else ''}"
        if base.is_dir():
            shutil.copytree(base, path)
        else:
            shutil.copyfile(base, path)
        self.made.append((path, expect, tag))
        return path

    def truncations(self, base: Path, names, tag: str, points=(0.1, 0.9)):
        for name in names:
            for frac in points:
                path = self.new(base, f"{tag}-{name}-cut{int(frac * 100)}", "any")
                target = path / name if name else path
                data = target.read_bytes()
                target.write_bytes(data[: int(len(data) * frac)])

    def flips(self, base: Path, names, tag: str, count: int = 4):
        for name in names:
            path = self.new(base, f"{tag}-{name}-flip", "any")
            target = path / name if name else path
            data = bytearray(target.read_bytes())
            for pos in self.rng.integers(0, len(data), count):
                data[pos] ^= int(self.rng.integers(1, 256))
            target.write_bytes(bytes(data))

    def member_flips(self, base: Path, members, tag: str, count: int = 3):
        """Flips bytes inside one member of an .npz and rewrites the archive with correct CRCs,
        so the corruption reaches the .npy header or data rather than the zip checksum."""
        for member in members:
            path = self.new(base, f"{tag}-{member}-member-flip", "any")
            with zipfile.ZipFile(path) as zf:
                contents = {info.filename: zf.read(info) for info in zf.infolist()}
            data = bytearray(contents[member])
            for pos in self.rng.integers(0, len(data), count):
                data[pos] ^= int(self.rng.integers(1, 256))
            contents[member] = bytes(data)
            with zipfile.ZipFile(path, "w") as zf:
                for name, raw in contents.items():
                    zf.writestr(name, raw)


def _planetoid_variants(v: Variants, base: Path):
    files = [f"ind.cora.{s}" for s in ("x", "y", "tx", "ty", "allx", "ally", "graph")]
    v.truncations(base, files[2:] + ["ind.cora.test.index"], "cora")
    v.flips(base, files + ["ind.cora.test.index"], "cora")

    def pickled(tag, part, mutate):
        repickle(v.new(base, f"cora-{tag}", "error") / f"ind.cora.{part}", mutate)

    def at(attr, index, value):
        return lambda m: getattr(m, attr).__setitem__(index, value)

    pickled("allx-col-big", "allx", at("indices", 5, 2**31 - 1))
    pickled("allx-col-neg", "allx", at("indices", 5, -7))
    pickled("allx-ptr-big", "allx", at("indptr", 3, 10**9))
    pickled("allx-ptr-neg", "allx", at("indptr", 3, -1))
    pickled("tx-col-ncols", "tx", at("indices", 0, 1433))
    pickled("tx-col-neg", "tx", at("indices", 0, -1))
    pickled("tx-ptr-end", "tx", at("indptr", -1, 10**6))
    pickled("allx-nan", "allx", at("data", 0, np.nan))
    pickled("tx-inf", "tx", at("data", 4, np.inf))
    pickled("graph-big", "graph", lambda g: g[0].append(10**6))
    pickled("graph-neg", "graph", lambda g: g[5].append(-3))
    pickled("ally-two", "ally", lambda y: y.__setitem__((0, 0), 2))
    pickled("ty-neg", "ty", lambda y: y.__setitem__((0, 0), -1))
    pickled("ty-narrow", "ty", lambda y: y[:, :6])
    for tag, first in (("big", "10000000"), ("neg", "-1")):
        index = v.new(base, f"cora-test-index-{tag}", "error") / "ind.cora.test.index"
        ids = index.read_text().split()
        index.write_text("\n".join([first, *ids[1:]]) + "\n")


def _saved_variants(v: Variants, base: Path):
    arrays = ["indptr", "indices", "features", "labels", "train_idx", "val_idx", "test_idx"]
    v.truncations(base, [f"{a}.npy" for a in arrays] + ["meta.json"], "saved", points=(0.5,))
    v.truncations(base, [f"{a}.npy" for a in arrays[:4]], "saved", points=(0.02,))
    v.flips(base, [f"{a}.npy" for a in arrays], "saved")

    def changed(tag, name, change):
        path = v.new(base, f"saved-{tag}", "error") / f"{name}.npy"
        np.save(path, change(np.load(path)))

    def at(index, value):
        def change(a):
            a = a.copy()
            a[index] = value
            return a

        return change

    for name, big in (
        ("indices", 200),
        ("indptr", 10**9),
        ("train_idx", 200),
        ("val_idx", 10**6),
        ("test_idx", 2**31 - 1),
    ):
        changed(f"{name}-big", name, at(1, big))
        changed(f"{name}-neg", name, at(1, -1))
    changed("features-nan", "features", at((3, 1), np.nan))
    changed("features-inf", "features", at((199, 7), -np.inf))
    changed("labels-eq-classes", "labels", at(10, 3))
    changed("labels-neg", "labels", at(10, -2))
    changed("labels-huge", "labels", at(10, 2**31 - 1))
    changed("features-f64", "features", lambda a: a.astype(np.float64))
    changed("features-narrow", "features", lambda a: np.ascontiguousarray(a[:, :7]))
    changed("labels-i64", "labels", lambda a: a.astype(np.int64))
    changed("indptr-i32", "indptr", lambda a: a.astype(np.int32))
    changed("labels-2d", "labels", lambda a: a[:, None])
    changed("train-f32", "train_idx", lambda a: a.astype(np.float32))
    meta = v.new(base, "saved-meta-nodes", "error") / "meta.json"
    meta.write_text(json.dumps(json.loads(meta.read_text()) | {"num_nodes": 201}))


def _gnn_benchmark_variants(v: Variants, root: Path):
    base = write_gnn_benchmark(root / "gnn.npz")
    zipped = root / "gnn.zip"
    with zipfile.ZipFile(zipped, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(base, "gnn.npz")
    v.truncations(base, [None], "npz", points=(0.3, 0.95))
    v.flips(base, [None], "npz")
    members = ("adj_indices", "adj_indptr", "adj_shape", "attr_indices", "attr_data", "labels")
    v.member_flips(base, [f"{m}.npy" for m in members], "npz")
    v.truncations(zipped, [None], "zip", points=(0.5, 0.99))
    v.flips(zipped, [None], "zip")

    def changed(tag, **changes):
        path = v.new(base, f"npz-{tag}", "error")
        write_gnn_benchmark(path, **changes)

    for key, big in (
        ("adj_indices", 120),
        ("adj_indptr", 10**9),
        ("attr_indices", 6),
        ("attr_indptr", 10**9),
    ):
        changed(f"{key}-big", **_entry(key, 5, big))
        changed(f"{key}-neg", **_entry(key, 5, -1))
    changed("attr-col-huge", **_entry("attr_indices", 5, 2**31 - 1))
    changed("attr-nan", **_entry("attr_data", 0, np.nan))
    changed("attr-inf", **_entry("attr_data", 0, np.inf))
    changed("labels-gap", **_entry("labels", 7, 5))
    changed("labels-neg", **_entry("labels", 7, -1))
    changed("labels-huge", **_entry("labels", 7, 2**31 - 1))
    changed("adj-shape-3", adj_shape=np.array([120, 120, 1]))
    changed("attr-shape-float", attr_shape=np.array([120.0, 6.0]))
    changed("labels-2d", labels=lambda a: a[:, None])


def _tolokers_variants(v: Variants, root: Path):
    from tests.test_datasets import write_npz

    base = Path(write_npz(root / "tolokers.npz"))
    v.truncations(base, [None], "tolokers", points=(0.5,))
    v.flips(base, [None], "tolokers")
    v.member_flips(base, ["edges.npy", "node_labels.npy"], "tolokers")
    edges = np.stack([np.arange(19), np.arange(1, 20)], 1)
    for tag, overrides in (
        ("edges-big", dict(edges=np.where(edges == 7, 20, edges))),
        ("edges-neg", dict(edges=np.where(edges == 7, -1, edges))),
        ("labels-gap", dict(node_labels=np.where(np.arange(20) == 3, 5, np.arange(20) % 2))),
        ("labels-neg", dict(node_labels=np.where(np.arange(20) == 3, -1, np.arange(20) % 2))),
        ("features-nan", dict(node_features=np.where(np.eye(20, 3) > 0, np.nan, 1.0))),
        ("features-inf", dict(node_features=np.where(np.eye(20, 3) > 0, np.inf, 1.0))),
        ("masks-short", dict(train_masks=np.ones((1, 19), bool))),
        ("features-1d", dict(node_features=np.ones(20, np.float32))),
    ):
        write_npz(v.new(base, f"tolokers-{tag}", "error"), **overrides)


def _facebook_variants(v: Variants, root: Path):
    base = facebook_folder(root / "facebook")
    files = ["facebook_edges.csv", "facebook_target.csv", "facebook.json"]
    v.truncations(base, files, "fb", points=(0.3, 0.75))
    v.flips(base, files, "fb", count=2)

    def edited(tag, name, edit):
        path = v.new(base, f"fb-{tag}", "error") / name
        path.write_text(edit(path.read_text()))

    edited("edge-big", "facebook_edges.csv", lambda t: t + "5,500\n")
    edited("edge-neg", "facebook_edges.csv", lambda t: t + "-1,3\n")
    edited("json-neg", "facebook.json", lambda t: json.dumps(json.loads(t) | {"0": [-1]}))
    edited("json-huge", "facebook.json", lambda t: json.dumps(json.loads(t) | {"0": [2**40]}))
    edited("json-node", "facebook.json", lambda t: json.dumps(json.loads(t) | {"999": [1]}))
    edited("target-order", "facebook_target.csv", lambda t: t.replace("\n3,", "\n4,", 1))


def _ogb_variants(v: Variants, root: Path):
    base = ogb_dir(root / "ogbn-small")
    raw = ["raw/edge.csv", "raw/node-feat.csv", "raw/node-label.csv"]
    v.truncations(base, raw, "ogb", points=(0.5,))
    v.flips(base, raw, "ogb", count=2)

    def edited(tag, name, edit):
        path = v.new(base, f"ogb-{tag}", "error") / name
        lines = path.read_text().splitlines()
        path.write_text("\n".join(edit(lines)) + "\n")

    def line(index, text):
        return lambda lines: lines[:index] + [text] + lines[index + 1 :]

    edited("edge-big", "raw/edge.csv", line(3, "0,200"))
    edited("edge-neg", "raw/edge.csv", line(3, "-1,2"))
    edited("edge-ragged", "raw/edge.csv", line(3, "4"))
    edited("train-big", "split/random/train.csv", line(0, "100000"))
    edited("train-neg", "split/random/train.csv", line(0, "-4"))
    edited("feat-nan", "raw/node-feat.csv", line(2, ",".join(["nan"] * 8)))
    edited("feat-inf", "raw/node-feat.csv", line(2, ",".join(["inf"] * 8)))
    edited("label-big", "raw/node-label.csv", line(2, "100000"))
    edited("label-frac", "raw/node-label.csv", line(2, "1.5"))
    edited("count", "raw/num-node-list.csv", line(0, "199"))


@pytest.mark.slow  # 130 variants: the corpus of the slow run
def test_fuzz_every_format_ends_in_an_error_or_a_valid_dataset(tmp_path):
    v = Variants(tmp_path / "variants")
    v.root.mkdir()
    bases = tmp_path / "bases"
    bases.mkdir()
    _planetoid_variants(v, planetoid_copy(bases, "cora"))
    saved = bases / "saved"
    save_dataset(small_synthetic(), saved)
    _saved_variants(v, saved)
    _gnn_benchmark_variants(v, bases)
    _tolokers_variants(v, bases)
    _facebook_variants(v, bases)
    _ogb_variants(v, bases)
    assert 100 <= len(v.made) <= 150

    results = load_in_child([path for path, _, _ in v.made], timeout=120)
    tally: dict[str, dict[str, int]] = {}
    for (path, expect, tag), r in zip(v.made, results):
        counts = tally.setdefault(tag.split("-")[0], {"error": 0, "dataset": 0})
        counts[r["outcome"]] += 1
        if expect == "error":
            assert r["outcome"] == "error", (tag, r)
        if r["outcome"] == "error":
            assert str(path) in r["message"], (tag, r["message"])  # names the file or folder
    errors = sum(c["error"] for c in tally.values())
    print(
        f"\nfuzz: {len(v.made)} variants, {errors} errors, {len(v.made) - errors} datasets; {tally}"
    )
