"""Hardening of every dataset reader, round 2: dtypes, Planetoid's adjacency lists, byte-order
marks, files replaced by directories, self-loops, unlabelled training splits, edgeless graphs and
absolute paths in messages. Each case is a crafted folder or file of a few nodes in ``tmp_path``
(Planetoid's and gnn-benchmark's need more: Planetoid's 500 validation rows, Shchur's 20 + 30
nodes per class). Warnings are errors here: a silent cast (``ComplexWarning``) is a failure."""

import dataclasses
import gzip
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from gns_jax.data import load_dataset
from gns_jax.data.dataset import Dataset, finish
from gns_jax.data.ondisk import save_dataset
from gns_jax.errors import DatasetError, GraphError
from gns_jax.graph import CSRGraph, from_edges
from tests.helpers import gnn_benchmark_npz

pytestmark = pytest.mark.filterwarnings("error")

BOM = b"\xef\xbb\xbf"
N = 6  # the small folders' nodes: a ring 0-1-...-5-0, two classes, splits of two nodes each
SPLITS = (np.array([0, 1]), np.array([2, 3]), np.array([4, 5]))


# ----------------------------------------------------------------------------------------------
# Writers of the smallest folder or file of each format


def ring(n: int = N) -> np.ndarray:
    return np.stack([np.arange(n), (np.arange(n) + 1) % n], 1)


def tiny(edges: np.ndarray | None = None) -> Dataset:
    edges = ring() if edges is None else edges
    graph = from_edges(edges[:, 0], edges[:, 1], N) if edges.size else empty_graph()
    features = np.arange(2 * N, dtype=np.float32).reshape(N, 2)
    return finish("tiny", graph, features, np.arange(N) % 2, SPLITS, "tiny")


def empty_graph(n: int = N) -> CSRGraph:
    return CSRGraph(np.zeros(n + 1, np.int64), np.zeros(0, np.int32))


def write_saved(folder: Path, ds: Dataset | None = None) -> Path:
    save_dataset(ds or tiny(), folder)
    return folder


def _table(path: Path, table, fmt: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = np.asarray(table)
    if fmt == "npy":
        np.save(path.with_name(path.name + ".npy"), table)
        return
    rows = table if table.ndim == 2 else table[:, None]
    data = "".join(",".join(repr(v) for v in row.tolist()) + "\n" for row in rows).encode()
    if fmt == "csv.gz":
        path.with_name(path.name + ".csv.gz").write_bytes(gzip.compress(data))
    else:
        path.with_name(path.name + ".csv").write_bytes(data)


def write_ogb(root: Path, fmt: str = "csv", **tables) -> Path:
    """OGB's layout: raw/edge, raw/node-feat, raw/node-label, split/random/{train,valid,test};
    ``tables`` replaces any of them (keys edge, feat, label, train, valid, test)."""
    default = dict(
        edge=ring(),
        feat=np.arange(2 * N, dtype=np.float64).reshape(N, 2),
        label=(np.arange(N) % 2).astype(np.float64),
        train=SPLITS[0],
        valid=SPLITS[1],
        test=SPLITS[2],
    )
    default.update(tables)
    names = dict(edge="raw/edge", feat="raw/node-feat", label="raw/node-label")
    for key, table in default.items():
        _table(root / names.get(key, f"split/random/{key}"), table, fmt)
    return root


def write_ogb_binary(root: Path, **arrays) -> Path:
    """OGB's binary layout: raw/data.npz and raw/node-label.npz, split/random/*.npy."""
    (root / "raw").mkdir(parents=True)
    graph = dict(
        edge_index=ring().T,
        node_feat=np.arange(2 * N, dtype=np.float32).reshape(N, 2),
        num_nodes_list=np.array([N]),
    )
    labels = dict(node_label=(np.arange(N) % 2).astype(np.float64))
    for key, value in arrays.items():
        (graph if key in graph else labels)[key] = value
    np.savez(root / "raw" / "data.npz", **graph)
    np.savez(root / "raw" / "node-label.npz", **labels)
    for part, idx in zip(("train", "valid", "test"), SPLITS):
        _table(root / "split" / "random" / part, idx, "npy")
    return root


def write_tolokers(path: Path, **arrays) -> Path:
    masks = [np.isin(np.arange(N), s)[None] for s in SPLITS]
    default = dict(
        node_features=np.arange(2 * N, dtype=np.float32).reshape(N, 2),
        node_labels=np.arange(N) % 2,
        edges=ring(),
        train_masks=masks[0],
        val_masks=masks[1],
        test_masks=masks[2],
    )
    np.savez(path, **(default | arrays))
    return path


GNN_N = 102  # 2 classes of 51 nodes: Shchur's 20 train + 30 validation per class, and a test node


def write_gnn_benchmark(path: Path, edges: np.ndarray | None = None, **arrays) -> Path:
    edges = ring(GNN_N) if edges is None else edges
    adj = sp.csr_matrix(
        (np.ones(len(edges), np.float32), (edges[:, 0], edges[:, 1])), shape=(GNN_N, GNN_N)
    )
    attr = sp.csr_matrix(np.eye(GNN_N, 3, dtype=np.float32))
    default = gnn_benchmark_npz(adj, attr, np.arange(GNN_N) % 2)
    np.savez(path, **(default | arrays))
    return path


def write_facebook(root: Path, edges: str | None = None, n: int = GNN_N) -> Path:
    root.mkdir()
    body = "".join(f"{i},{(i + 1) % n}\n" for i in range(n)) if edges is None else edges
    (root / "facebook_edges.csv").write_text("id_1,id_2\n" + body)
    kinds = ("company", "politician")
    rows = "".join(f"{i},{1000 + i},page {i},{kinds[i % 2]}\n" for i in range(n))
    (root / "facebook_target.csv").write_text("id,facebook_id,page_name,page_type\n" + rows)
    (root / "facebook.json").write_text(json.dumps({str(i): [i % 3] for i in range(n)}))
    return root


def write_saint(root: Path, adj=None, feats=None, class_map=None, role=None) -> Path:
    root.mkdir()
    if adj is None:
        e = ring()
        adj = sp.csr_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(N, N))
    sp.save_npz(root / "adj_full.npz", adj)
    np.save(root / "feats.npy", np.arange(2.0 * N).reshape(N, 2) if feats is None else feats)
    labels = class_map if class_map is not None else {str(i): i % 2 for i in range(N)}
    (root / "class_map.json").write_text(json.dumps(labels))
    tr, va, te = (s.tolist() for s in SPLITS)
    (root / "role.json").write_text(json.dumps(role or {"tr": tr, "va": va, "te": te}))
    return root


def write_sage(root: Path, links=None) -> Path:
    root.mkdir()
    nodes = [{"id": i, "val": i in SPLITS[1], "test": i in SPLITS[2]} for i in range(N)]
    if links is None:
        links = [{"source": int(u), "target": int(v)} for u, v in ring()]
    (root / "toy-G.json").write_text(json.dumps({"nodes": nodes, "links": links}))
    (root / "toy-id_map.json").write_text(json.dumps({str(i): i for i in range(N)}))
    (root / "toy-class_map.json").write_text(json.dumps({str(i): i % 2 for i in range(N)}))
    np.save(root / "toy-feats.npy", np.arange(2.0 * N).reshape(N, 2))
    return root


PLANETOID_TRAIN, PLANETOID_TEST = 4, 3  # + Planetoid's 500 validation rows: 507 nodes


def planetoid_parts(train_classes=None) -> dict:
    """The objects of ``ind.t.*``: sparse x/tx/allx, one-hot y/ty/ally (y repeating the first
    rows of ally), a ring as the graph; ``train_classes`` sets the training rows' classes."""
    known = PLANETOID_TRAIN + 500
    n = known + PLANETOID_TEST
    feats = np.eye(n, 4, dtype=np.float32) + np.eye(n, 4, -4, dtype=np.float32)
    classes = np.arange(n) % 2
    if train_classes is not None:
        classes[:PLANETOID_TRAIN] = train_classes
    onehot = np.eye(2, dtype=np.int32)[classes]
    return dict(
        x=sp.csr_matrix(feats[:PLANETOID_TRAIN]),
        y=onehot[:PLANETOID_TRAIN],
        allx=sp.csr_matrix(feats[:known]),
        ally=onehot[:known],
        tx=sp.csr_matrix(feats[known:]),
        ty=onehot[known:],
        graph={i: [(i + 1) % n] for i in range(n)},
    )


def write_planetoid(root: Path, **changes) -> Path:
    """A Planetoid folder ``ind.t.*``; ``changes`` replaces parts (plain objects, pickled here)."""
    root.mkdir()
    parts = planetoid_parts() | changes
    for key, obj in parts.items():
        (root / f"ind.t.{key}").write_bytes(pickle.dumps(obj, protocol=4))
    known = PLANETOID_TRAIN + 500
    ids = range(known, known + PLANETOID_TEST)
    (root / "ind.t.test.index").write_text("".join(f"{i}\n" for i in ids))
    return root


def refused(path, *fragments: str, starts: Path | None = None) -> str:
    """Loads ``path``; asserts a one-line DatasetError starting with ``starts`` (default: the
    path) and holding every fragment; returns the message."""
    with pytest.raises(DatasetError) as info:
        load_dataset(str(path))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{starts or path}: "), message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


# ----------------------------------------------------------------------------------------------
# 1. dtypes of every array


def test_ogb_binary_complex_features_are_refused_without_a_cast(tmp_path):
    # Before: cast to float32 with a ComplexWarning, the imaginary part dropped.
    root = write_ogb_binary(tmp_path / "o", node_feat=np.ones((N, 2), np.complex64) * 1j)
    refused(
        root,
        "array 'node_feat' must hold booleans, integers or floats, got complex64",
        "imaginary part",
        starts=root / "raw" / "data.npz",
    )


@pytest.mark.parametrize(
    "arrays, file, fragment",
    [
        (dict(node_feat=np.full((N, 2), "1.5")), "data.npz", "'node_feat' must hold booleans, "),
        (dict(node_label=np.ones(N, np.complex128)), "node-label.npz", "got complex128"),
        (dict(node_label=np.arange(N) % 2 == 0), "node-label.npz", "'node_label' must hold in"),
        (dict(node_label=np.arange(N) % 2 + 0.5), "node-label.npz", "class ids must be integers"),
        (dict(edge_index=ring().T == 1), "data.npz", "'edge_index' (node ids) must hold integ"),
        (dict(edge_index=ring().T + 2**32), "data.npz", "found 4294967296..4294967301"),
        (dict(num_nodes_list=np.array([6.0])), "data.npz", "'num_nodes_list' must hold integ"),
    ],
)
def test_ogb_binary_arrays_of_the_wrong_dtype(tmp_path, arrays, file, fragment):
    root = write_ogb_binary(tmp_path / "o", **arrays)
    refused(root, fragment, starts=root / "raw" / file)


@pytest.mark.parametrize(
    "table, value, file, fragment",
    [
        ("edge", ring() == 1, "raw/edge.npy", "the edges must hold integers or floats, got bool"),
        ("feat", np.ones((N, 2), np.complex64), "raw/node-feat.npy", "got complex64 (complex"),
        ("feat", np.full((N, 2), "x"), "raw/node-feat.npy", "got <U1 (text) for the node feat"),
        ("label", np.arange(N) % 2 == 1, "raw/node-label.npy", "class ids must hold integers"),
        ("train", np.array([True, True]), "split/random/train.npy", "node ids must hold integ"),
        ("train", np.array([0, 2**32]), "split/random/train.npy", "found 4294967296"),
        ("valid", np.array([2.5, 3]), "split/random/valid.npy", "found fractional values"),
    ],
)
def test_ogb_npy_arrays_of_the_wrong_dtype(tmp_path, table, value, file, fragment):
    root = write_ogb(tmp_path / "o", "npy", **{table: value})
    refused(root, fragment, starts=root / file)


def test_ogb_csv_fractional_label_names_the_node(tmp_path):
    root = write_ogb(tmp_path / "o", label=np.array([0, 1, 0, 1.5, 0, 1]))
    refused(
        root, "class ids must be integers, found 1.5 at node 3", starts=root / "raw/node-label.csv"
    )


@pytest.mark.parametrize(
    "name, array, fragment",
    [
        ("features", np.ones((N, 2), np.complex64), "expected float32 of shape [6, 2] (from m"),
        ("labels", np.arange(N) % 2 == 1, "expected int32 of shape [6]"),
        ("train_idx", np.array([0, 2**32]), "got int64 of shape [2]"),
        ("indices", np.zeros(12, np.uint32), "got uint32 of shape [12]"),
    ],
)
def test_saved_arrays_of_the_wrong_dtype_name_it(tmp_path, name, array, fragment):
    folder = write_saved(tmp_path / "s")
    np.save(folder / f"{name}.npy", array)
    refused(folder, fragment, starts=folder / f"{name}.npy")


@pytest.mark.parametrize(
    "arrays, fragment",
    [
        (dict(node_features=np.ones((N, 2), np.complex64)), "numeric [6, F] array, got complex64"),
        (dict(node_features=np.full((N, 2), "a")), "node_features must be a numeric"),
        (
            dict(node_labels=np.arange(N) % 2 + 0.5),
            "node_labels must be a 1-D integer array, got f",
        ),
        (dict(node_labels=np.arange(N) % 2 == 1), "node_labels must be a 1-D integer array, got b"),
        (dict(edges=ring() == 1), "array 'edges' (node ids) must hold integers, got bool"),
        (dict(edges=ring() + 2**32), "array 'edges' (int64) holds node ids 4294967296..4294"),
        (dict(edges=ring().astype(np.uint64) + 2**63), "array 'edges' (uint64) holds node ids"),
        (dict(train_masks=np.ones((1, N), np.float32)), "'train_masks' must hold booleans"),
    ],
)
def test_tolokers_arrays_of_the_wrong_dtype(tmp_path, arrays, fragment):
    path = write_tolokers(tmp_path / "t.npz", **arrays)
    refused(path, fragment)


@pytest.mark.parametrize(
    "arrays, fragment",
    [
        (dict(attr_data=np.ones(3, np.complex64)), "'attr': data must be a 1-D numeric array"),
        (dict(labels=np.arange(GNN_N) % 2 == 1), "labels must be a 1-D integer array, got bool"),
        (dict(labels=np.arange(GNN_N) % 2 + 0.25), "labels must be a 1-D integer array, got flo"),
        (
            dict(adj_indices=np.ones(GNN_N, bool)),
            "integer arrays, got int32 array of shape (103,) and bool",
        ),
        (dict(attr_matrix=np.ones((GNN_N, 2), np.complex64)), "attr_matrix must be a numeric"),
    ],
)
def test_gnn_benchmark_arrays_of_the_wrong_dtype(tmp_path, arrays, fragment):
    refused(write_gnn_benchmark(tmp_path / "g.npz", **arrays), fragment)


@pytest.mark.parametrize(
    "feats, fragment",
    [
        (np.ones((N, 2), np.complex128), "a numeric 2-D array, got complex128"),
        (np.full((N, 2), "x"), "a numeric 2-D array, got <U1"),
    ],
)
def test_graphsaint_features_of_the_wrong_dtype(tmp_path, feats, fragment):
    folder = write_saint(tmp_path / "s", feats=feats)
    refused(folder, fragment, starts=folder / "feats.npy")


def test_boolean_features_are_read_as_zero_one(tmp_path):
    # Booleans make sense as features (0/1 indicators) and masks, never as ids or class ids.
    folder = write_saint(tmp_path / "s", feats=np.eye(N, 2, dtype=bool))
    np.testing.assert_array_equal(load_dataset(str(folder)).features, np.eye(N, 2))


@pytest.mark.parametrize(
    "part, obj, fragment",
    [
        (
            "x",
            sp.csr_matrix(np.ones((4, 4), np.complex64)),
            "refusing numpy.dtype('c8'): not a bool, integer or float",
        ),
        ("x", np.full((4, 4), "a"), "refusing numpy.dtype('U1'): not a bool, integer or float"),
        ("y", np.eye(2)[[0, 1, 0, 1]] * 0.5, "not a one-hot label matrix"),
        (
            "ty",
            np.ones((3, 2), np.complex64),
            "refusing numpy.dtype('c8'): not a bool, integer or float",
        ),
    ],
)
def test_planetoid_parts_of_the_wrong_dtype(tmp_path, part, obj, fragment):
    folder = write_planetoid(tmp_path / "p", **{part: obj})
    refused(folder, fragment, starts=folder / f"ind.t.{part}")


# ----------------------------------------------------------------------------------------------
# 2. Planetoid's adjacency lists


def _graph_with(node: int, neighbours: list, key=None) -> dict:
    graph = planetoid_parts()["graph"]
    graph[node] = neighbours
    if key is not None:
        graph[key] = graph.pop(node)
    return graph


@pytest.mark.parametrize(
    "graph, fragment",
    [
        (_graph_with(2, [3.7]), "node 2: neighbour id 3.7 (float) is not an integer"),
        (_graph_with(2, [3.0]), "node 2: neighbour id 3.0 (float) is not an integer"),
        (_graph_with(2, [True]), "node 2: neighbour id True (bool) is not an integer"),
        (_graph_with(2, ["3"]), "node 2: neighbour id '3' (str) is not an integer"),
        (_graph_with(2, [3], key=2.5), "node id 2.5 (float) is not an integer"),
        (_graph_with(2, [3], key="2"), "node id '2' (str) is not an integer"),
        (_graph_with(2, 3), "node 2: expected a list of neighbour ids, got 3"),
        (_graph_with(2, [2**70]), "a node id beyond int64, outside [0, 507)"),
    ],
)
def test_planetoid_graph_ids_must_be_integers(tmp_path, graph, fragment):
    # Before: np.fromiter read 3.7 as 3, True as 1 and '3' as 3 without a word.
    folder = write_planetoid(tmp_path / "p", graph=graph)
    refused(folder, fragment, starts=folder / "ind.t.graph")


def test_planetoid_tiny_folder_loads(tmp_path):
    ds = load_dataset(str(write_planetoid(tmp_path / "p")))
    assert (ds.num_nodes, ds.graph.num_edges, ds.num_classes) == (507, 1014, 2)
    assert (ds.train_idx.size, ds.val_idx.size, ds.test_idx.size) == (4, 500, 3)


# ----------------------------------------------------------------------------------------------
# 3. UTF-8 byte-order marks in every text file


def _bom(path: Path) -> None:
    path.write_bytes(BOM + path.read_bytes())


@pytest.mark.parametrize(
    "write, files",
    [
        (
            lambda p: write_facebook(p),
            ["facebook_edges.csv", "facebook_target.csv", "facebook.json"],
        ),
        (lambda p: write_ogb(p), ["raw/edge.csv", "raw/node-feat.csv", "raw/node-label.csv"]),
        (lambda p: write_ogb(p), ["split/random/train.csv", "split/random/valid.csv"]),
        (lambda p: write_planetoid(p), ["ind.t.test.index"]),
        (lambda p: write_saved(p), ["meta.json"]),
        (lambda p: write_saint(p), ["class_map.json", "role.json"]),
        (lambda p: write_sage(p), ["toy-G.json", "toy-id_map.json", "toy-class_map.json"]),
    ],
    ids=["facebook", "ogb-raw", "ogb-split", "planetoid", "saved", "graphsaint", "graphsage"],
)
def test_text_files_with_a_byte_order_mark_are_read(tmp_path, write, files):
    # Before: Facebook's target csv lost its 'id' column ('\ufeffid'), its json and meta.json
    # were "not readable JSON", OGB's csv "not a comma-separated numeric table".
    plain = load_dataset(str(write(tmp_path / "plain")))
    folder = write(tmp_path / "bom")
    for name in files:
        _bom(folder / name)
    marked = load_dataset(str(folder))
    np.testing.assert_array_equal(marked.graph.indices, plain.graph.indices)
    np.testing.assert_array_equal(marked.features, plain.features)
    np.testing.assert_array_equal(marked.labels, plain.labels)
    np.testing.assert_array_equal(marked.train_idx, plain.train_idx)


def test_gzipped_ogb_csv_with_a_byte_order_mark(tmp_path):
    root = write_ogb(tmp_path / "o", "csv.gz")
    path = root / "raw" / "edge.csv.gz"
    path.write_bytes(gzip.compress(BOM + gzip.decompress(path.read_bytes())))
    assert load_dataset(str(root)).graph.num_edges == 2 * N


# ----------------------------------------------------------------------------------------------
# 4. A file replaced by a directory


@pytest.mark.parametrize(
    "write, name",
    [
        (write_saved, "features.npy"),
        (write_saved, "meta.json"),
        (write_saved, "train_idx.npy"),
        (lambda p: write_ogb(p), "raw/edge.csv"),
        (lambda p: write_ogb(p, "npy"), "raw/node-feat.npy"),
        (lambda p: write_ogb(p), "split/random/train.csv"),
        (write_ogb_binary, "raw/node-label.npz"),
        (write_planetoid, "ind.t.allx"),
        (write_planetoid, "ind.t.graph"),
        (write_planetoid, "ind.t.test.index"),
        (write_facebook, "facebook_edges.csv"),
        (write_facebook, "facebook.json"),
        (write_saint, "feats.npy"),
        (write_saint, "class_map.json"),
        (write_saint, "adj_full.npz"),
        (write_sage, "toy-G.json"),
        (write_sage, "toy-feats.npy"),
    ],
)
def test_a_file_replaced_by_a_directory_is_named(tmp_path, write, name):
    # Before: "features.npy: missing", "<folder>: cannot read (Is a directory)" naming the
    # parent, or "<folder>: directory holds no supported dataset".
    folder = write(tmp_path / "d")
    path = folder / name
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("x")
    refused(folder, "is a directory, expected a file", starts=path)


# ----------------------------------------------------------------------------------------------
# 5. Self-loops: dropped from edge lists, refused in a saved CSR with the one message


def test_edge_list_readers_drop_self_loops(tmp_path):
    loops = np.concatenate([ring(), [[3, 3], [0, 0]]])
    ds = load_dataset(str(write_tolokers(tmp_path / "t.npz", edges=loops)))
    assert ds.graph.num_edges == 2 * N
    adj = sp.csr_matrix(np.diag(np.ones(N)) + sp.csr_matrix(np.roll(np.eye(N), 1, 1)))
    saint = load_dataset(str(write_saint(tmp_path / "s", adj=adj)))
    np.testing.assert_array_equal(saint.graph.indices, ds.graph.indices)


def _loop_graph() -> CSRGraph:
    src, dst = (
        np.concatenate([ring()[:, 0], ring()[:, 1], [3]]),
        np.concatenate([ring()[:, 1], ring()[:, 0], [3]]),
    )
    key = np.unique(dst * N + src)
    indptr = np.zeros(N + 1, np.int64)
    np.cumsum(np.bincount(key // N, minlength=N), out=indptr[1:])
    return CSRGraph(indptr, (key % N).astype(np.int32))


def test_saved_self_loop_is_refused_saying_how_to_fix_it(tmp_path):
    folder = write_saved(tmp_path / "s")
    graph = _loop_graph()
    np.save(folder / "indptr.npy", graph.indptr)
    np.save(folder / "indices.npy", graph.indices)
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps(meta | {"num_edges": graph.num_edges}))
    message = refused(folder, "self-loop at node 3 (1 in all)", "rebuild it from its edge list")
    assert message.endswith(" (in indptr.npy, indices.npy)")
    # The same message wherever one is refused: Dataset.validate of any dataset.
    with pytest.raises(GraphError) as info:
        dataclasses.replace(tiny(), graph=graph).validate(str(folder))
    assert f"{info.value} (in indptr.npy, indices.npy)" == message


# ----------------------------------------------------------------------------------------------
# 6. Training splits without a labelled node


def test_planetoid_all_zero_y_is_refused(tmp_path):
    # Before: trained on ally's labels while y, the training labels, said "none".
    folder = write_planetoid(tmp_path / "p", y=np.zeros((PLANETOID_TRAIN, 2), np.int32))
    refused(folder, "no labelled node in the training split", starts=folder / "ind.t.y")


def test_planetoid_y_disagreeing_with_ally_is_refused(tmp_path):
    y = np.eye(2, dtype=np.int32)[[1, 1, 0, 1]]
    folder = write_planetoid(tmp_path / "p", y=y)
    refused(folder, "training row 0 disagrees with row 0 of ind.t.ally", starts=folder / "ind.t.y")


def test_saved_training_split_all_unlabelled(tmp_path):
    folder = write_saved(tmp_path / "s")
    labels = np.load(folder / "labels.npy")
    labels[SPLITS[0]] = -1
    np.save(folder / "labels.npy", labels)
    refused(
        folder,
        "no labelled node in the training split",
        "labels.npy",
        starts=folder / "train_idx.npy",
    )


def test_ogb_training_split_all_unlabelled(tmp_path):
    root = write_ogb(tmp_path / "o", label=np.array([np.nan, -1, 0, 1, 0, 1]))
    refused(
        root,
        "no labelled node in the training split (none of its 2 nodes has a label in node-label.cs",
        starts=root / "split/random/train.csv",
    )


def test_graphsaint_training_split_all_unlabelled(tmp_path):
    class_map = {str(i): i % 2 for i in range(2, N)}
    folder = write_saint(tmp_path / "s", class_map=class_map)
    refused(folder, "no labelled node in the training split", starts=folder / "class_map.json")


def test_dataset_validate_says_no_labelled_node():
    ds = tiny()
    with pytest.raises(DatasetError, match="^tiny: no labelled node in the training split$"):
        dataclasses.replace(
            ds, labels=np.where(np.isin(np.arange(N), SPLITS[0]), -1, ds.labels)
        ).validate()


def test_a_training_split_of_one_class_is_fine(tmp_path):
    ds = load_dataset(str(write_planetoid(tmp_path / "p", **_one_class_train())))
    assert set(ds.labels[ds.train_idx].tolist()) == {0}
    saved = write_saved(tmp_path / "s")
    labels = np.load(saved / "labels.npy")
    labels[SPLITS[0]] = 0
    labels[SPLITS[1]] = 1
    np.save(saved / "labels.npy", labels)
    assert set(load_dataset(str(saved)).labels[SPLITS[0]].tolist()) == {0}


def _one_class_train() -> dict:
    parts = planetoid_parts(train_classes=0)
    return dict(y=parts["y"], ally=parts["ally"])


# ----------------------------------------------------------------------------------------------
# 7. Graphs without a single edge load


@pytest.mark.parametrize(
    "write",
    [
        lambda p: write_saved(p, tiny(np.zeros((0, 2), np.int64))),
        lambda p: write_ogb(p, edge=np.zeros((0, 2), np.int64)),  # an empty csv file
        lambda p: write_ogb(p, "npy", edge=np.zeros((0, 2), np.int64)),
        lambda p: write_ogb(p, "csv.gz", edge=np.zeros((0, 2), np.int64)),
        lambda p: write_ogb_binary(p, edge_index=np.zeros((2, 0), np.int64)),
        lambda p: write_gnn_benchmark(p.with_suffix(".npz"), edges=np.zeros((0, 2), np.int64)),
        lambda p: write_tolokers(p.with_suffix(".npz"), edges=np.zeros((0, 2), np.int64)),
        lambda p: write_tolokers(p.with_suffix(".npz"), edges=np.zeros((0, 2))),  # float64
        lambda p: write_saint(p, adj=sp.csr_matrix((N, N))),
        lambda p: write_sage(p, links=[]),
        lambda p: write_planetoid(p, graph={i: [] for i in range(507)}),
        lambda p: write_planetoid(p, graph={}),
        lambda p: write_facebook(p, edges=""),
    ],
    ids=[
        "saved",
        "ogb-csv",
        "ogb-npy",
        "ogb-csv.gz",
        "ogb-binary",
        "gnn-benchmark",
        "tolokers",
        "tolokers-float",
        "graphsaint",
        "graphsage",
        "planetoid",
        "planetoid-empty-dict",
        "facebook",
    ],
)
def test_a_graph_without_edges_loads(tmp_path, write):
    # Before: OGB's empty csv was "expected an [E, 2] table, got shape (0, 0)", Facebook's
    # header-only csv "expected two columns", gnn-benchmark's split drew from a one-node
    # "largest component".
    ds = load_dataset(str(write(tmp_path / "e")))
    assert ds.graph.num_edges == 0 and ds.num_nodes > 0
    ds.validate()


# ----------------------------------------------------------------------------------------------
# 8. Full paths in messages, the dataset's name as given


def test_relative_paths_are_reported_in_full(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_facebook(tmp_path / "fb")
    assert load_dataset("fb").name == "fb"  # the name as given, for the run's record
    (tmp_path / "fb" / "facebook.json").write_text("{")
    refused("fb", "truncated or corrupt JSON", starts=tmp_path / "fb" / "facebook.json")
    write_tolokers(tmp_path / "t.npz", edges=ring() + 10)
    refused("t.npz", "outside [0, 6)", starts=tmp_path / "t.npz")


@pytest.mark.integration
def test_complex_ogb_features_exit_2_on_the_command_line(tmp_path):
    from tests.test_hardening import assert_clean_exit, cli_train

    root = write_ogb_binary(tmp_path / "o", node_feat=np.ones((N, 2), np.complex64))
    assert_clean_exit(cli_train(str(root)), f"{root / 'raw' / 'data.npz'}: array 'node_feat'")
