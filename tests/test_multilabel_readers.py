"""The GraphSAINT and GraphSAGE folder readers (gns_jax/data/saint.py), on small written folders."""

import json
import os
import pickle
import re

import numpy as np
import pytest
import scipy.sparse as sp

from gns_jax.data import load_dataset, read_graphsage, read_graphsaint
from gns_jax.errors import DatasetError

N, F, L = 30, 5, 4


def _edges():
    """A ring plus chords, with one self-loop, one duplicate and one reversed duplicate."""
    ring = [(i, (i + 1) % N) for i in range(N)]
    chords = [(i, (i + 7) % N) for i in range(0, N, 3)]
    return ring + chords + [(4, 4), (0, 1), (1, 0)]


def _undirected(edges):
    return {(min(u, v), max(u, v)) for u, v in edges if u != v}


def _labels(multilabel):
    """Class ids 0..2, or 0/1 lists of L labels, each label present and absent somewhere."""
    if not multilabel:
        return [i % 3 for i in range(N)]
    return [[int(b) for b in np.binary_repr(i % 15 + 1, L)] for i in range(N)]


def _features():
    return np.random.default_rng(0).random((N, F))  # float64, as GraphSAGE's PPI


SPLIT = (list(range(0, 18)), list(range(18, 24)), list(range(24, 30)))


def _json(path, value):
    path.write_text(json.dumps(value), encoding="utf-8")


def write_saint(folder, multilabel=False, class_map=None, role=None, feats=None, edges=None):
    folder.mkdir(exist_ok=True)
    pairs = np.array(edges if edges is not None else _edges())
    adj = sp.csr_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(N, N))
    adj.sum_duplicates()
    sp.save_npz(folder / "adj_full.npz", adj)
    np.save(folder / "feats.npy", _features() if feats is None else feats)
    labels = _labels(multilabel)
    _json(folder / "class_map.json", class_map or {str(i): labels[i] for i in range(N)})
    tr, va, te = SPLIT
    _json(folder / "role.json", role or {"tr": tr, "va": va, "te": te})
    return folder


def _sage_ids(i):
    return i if i % 2 else f"n{i}"  # ints and strings, as G.json may hold either


def write_sage(folder, multilabel=False, prefix="toy", class_map=None, nodes=None, links=None):
    folder.mkdir(exist_ok=True)
    order = np.random.default_rng(1).permutation(N)  # node i is row order[i] of feats.npy
    labels = _labels(multilabel)
    tr, va, te = SPLIT
    if nodes is None:
        nodes = [
            {"id": _sage_ids(i), "val": i in va, "test": i in te, "feature": None} for i in range(N)
        ]
    if links is None:
        links = [{"source": _sage_ids(u), "target": _sage_ids(v)} for u, v in _edges()]
    _json(folder / f"{prefix}-G.json", {"directed": False, "nodes": nodes, "links": links})
    _json(folder / f"{prefix}-id_map.json", {str(_sage_ids(i)): int(order[i]) for i in range(N)})
    _json(
        folder / f"{prefix}-class_map.json",
        class_map or {str(_sage_ids(i)): labels[i] for i in range(N)},
    )
    features = np.empty((N, F))
    features[order] = _features()
    np.save(folder / f"{prefix}-feats.npy", features)
    return folder, order


def _graph_edges(ds, rows=None):
    senders, receivers = ds.graph.edges()
    found = set(zip(senders.tolist(), receivers.tolist()))
    want = _undirected(_edges())
    if rows is not None:
        want = {(int(rows[u]), int(rows[v])) for u, v in want}
    return found, want | {(v, u) for u, v in want}


@pytest.mark.parametrize("multilabel", [False, True], ids=["classes", "multilabel"])
def test_graphsaint_folder(tmp_path, multilabel):
    folder = write_saint(tmp_path / "saint", multilabel)
    ds = read_graphsaint(folder)
    found, want = _graph_edges(ds)
    assert found == want and ds.num_nodes == N
    np.testing.assert_allclose(ds.features, _features().astype(np.float32))
    assert ds.features.dtype == np.float32
    expected = np.array(_labels(multilabel))
    np.testing.assert_array_equal(ds.labels, expected)
    if multilabel:
        assert ds.task == "multilabel" and ds.labels.shape == (N, L) and ds.num_classes == L
    else:
        assert ds.task == "multiclass" and ds.labels.shape == (N,) and ds.num_classes == 3
    for got, want_idx in zip((ds.train_idx, ds.val_idx, ds.test_idx), SPLIT):
        np.testing.assert_array_equal(got, want_idx)
    assert ds.split == "stored:graphsaint"
    detected = load_dataset(str(folder))
    np.testing.assert_array_equal(detected.labels, ds.labels)
    assert detected.split == "stored:graphsaint"


@pytest.mark.parametrize("multilabel", [False, True], ids=["classes", "multilabel"])
def test_graphsage_folder(tmp_path, multilabel):
    folder, order = write_sage(tmp_path / "sage", multilabel)
    ds = read_graphsage(folder)
    found, want = _graph_edges(ds, rows=order)
    assert found == want and ds.num_nodes == N
    np.testing.assert_allclose(ds.features[order], _features().astype(np.float32))
    labels = np.array(_labels(multilabel))
    np.testing.assert_array_equal(ds.labels[order], labels)
    assert ds.multilabel == multilabel
    assert ds.task == ("multilabel" if multilabel else "multiclass")
    for got, want_idx in zip((ds.train_idx, ds.val_idx, ds.test_idx), SPLIT):
        np.testing.assert_array_equal(got, np.sort(order[want_idx]))
    assert ds.split == "stored:graphsage"
    detected = load_dataset(str(folder))
    np.testing.assert_array_equal(detected.train_idx, ds.train_idx)
    assert detected.split == "stored:graphsage"


def test_unlabelled_node_outside_every_split(tmp_path):
    labels = _labels(False)
    class_map = {str(i): labels[i] for i in range(N) if i != 29}
    role = {"tr": SPLIT[0], "va": SPLIT[1], "te": SPLIT[2][:-1]}
    ds = read_graphsaint(write_saint(tmp_path / "s", class_map=class_map, role=role))
    assert ds.labels[29] == -1 and 29 not in ds.test_idx


def test_bom_is_accepted(tmp_path):
    folder = write_saint(tmp_path / "s")
    path = folder / "role.json"
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert read_graphsaint(folder).train_idx.size == len(SPLIT[0])


# ----------------------------------------------------------------------------------------------
# One test per error class; each message names the file by its full path.


def _raises(path, pattern, folder):
    with pytest.raises(DatasetError) as info:
        load_dataset(str(folder))
    message = str(info.value)
    assert str(path.absolute()) in message, message
    assert "\n" not in message
    assert re.search(pattern, message), message
    return message


@pytest.mark.parametrize("file", ["class_map.json", "role.json"])
def test_bad_json(tmp_path, file):
    folder = write_saint(tmp_path / "s")
    (folder / file).write_text('{"0": [1, 0', encoding="utf-8")
    _raises(folder / file, "truncated or corrupt JSON", folder)


def test_json_of_the_wrong_type(tmp_path):
    folder, _ = write_sage(tmp_path / "g")
    _json(folder / "toy-id_map.json", [0, 1, 2])
    _raises(folder / "toy-id_map.json", "expected a JSON object.*got an array", folder)
    folder = write_saint(tmp_path / "s", role={"tr": [0, 1], "va": "2", "te": [3]})
    _raises(folder / "role.json", "'va' must be a list of integers", folder)


def test_link_to_unknown_id(tmp_path):
    links = [{"source": 1, "target": 3}, {"source": 5, "target": "ghost"}]
    folder, _ = write_sage(tmp_path / "g", links=links)
    _raises(folder / "toy-G.json", "node 'ghost'.*not in toy-id_map.json", folder)


def test_graphsaint_edge_outside_the_graph(tmp_path):
    folder = write_saint(tmp_path / "s")
    adj = sp.load_npz(folder / "adj_full.npz")
    np.savez(
        folder / "adj_full.npz",
        indptr=adj.indptr,
        indices=np.where(adj.indices == 3, 31, adj.indices),
        data=adj.data,
        shape=np.array(adj.shape),
        format=np.array(b"csr"),
    )
    _raises(folder / "adj_full.npz", r"column id 31 .*outside \[0, 30\)", folder)


@pytest.mark.parametrize("layout", ["saint", "sage"])
def test_ragged_label_lists(tmp_path, layout):
    labels = _labels(True)
    labels[7] = labels[7] + [1]
    if layout == "saint":
        folder = write_saint(tmp_path / "s", class_map={str(i): labels[i] for i in range(N)})
        path = folder / "class_map.json"
    else:
        class_map = {str(_sage_ids(i)): labels[i] for i in range(N)}
        folder, _ = write_sage(tmp_path / "g", class_map=class_map)
        path = folder / "toy-class_map.json"
    _raises(path, "same length.*node '?n?7'? has 5", folder)


def test_mixed_int_and_list_labels(tmp_path):
    labels = _labels(True)
    labels[3] = 1
    folder = write_saint(tmp_path / "s", class_map={str(i): labels[i] for i in range(N)})
    _raises(folder / "class_map.json", "mix class ids and label lists.*node '3'", folder)


def test_non_binary_list_entries(tmp_path):
    labels = _labels(True)
    labels[5] = [0, 2, 1, 0]
    folder = write_saint(tmp_path / "s", class_map={str(i): labels[i] for i in range(N)})
    _raises(folder / "class_map.json", "must hold 0 or 1.*node '5' has 2 at position 1", folder)
    labels[5] = [0, 1.0, 1, 0]
    folder = write_saint(tmp_path / "t", class_map={str(i): labels[i] for i in range(N)})
    _raises(folder / "class_map.json", "node '5' has 1.0", folder)


def test_non_contiguous_classes(tmp_path):
    labels = [i % 3 * 2 for i in range(N)]  # 0, 2, 4: classes 1 and 3 missing
    folder = write_saint(tmp_path / "s", class_map={str(i): labels[i] for i in range(N)})
    _raises(folder / "class_map.json", "contiguous", folder)


@pytest.mark.parametrize("layout", ["saint", "sage"])
def test_feature_rows_mismatch(tmp_path, layout):
    if layout == "saint":
        folder = write_saint(tmp_path / "s")
        path = folder / "feats.npy"
    else:
        folder, _ = write_sage(tmp_path / "g")
        path = folder / "toy-feats.npy"
    np.save(path, np.ones((N - 1, F)))
    _raises(path, "29 rows for 30 nodes", folder)
    np.save(path, np.ones(N))
    _raises(path, "numeric 2-D array", folder)
    np.save(path, np.ones((N, F)))
    path.write_bytes(path.read_bytes()[:-8])
    _raises(path, "truncated or corrupt", folder)


def test_node_in_two_splits(tmp_path):
    folder = write_saint(tmp_path / "s", role={"tr": [0, 1, 2], "va": [3, 2], "te": [4]})
    _raises(folder / "role.json", "node 2 is in both 'tr' and 'va'", folder)
    nodes = [{"id": _sage_ids(i), "val": i == 1, "test": i in (1, 2)} for i in range(N)]
    folder, _ = write_sage(tmp_path / "g", nodes=nodes)
    _raises(folder / "toy-G.json", "node 1 is in two splits", folder)


def test_split_node_without_label(tmp_path):
    labels = _labels(False)
    class_map = {str(_sage_ids(i)): labels[i] for i in range(N) if i != 4}
    folder, _ = write_sage(tmp_path / "g", class_map=class_map)
    _raises(
        folder / "toy-class_map.json", "node 'n4' is in the train split but has no label", folder
    )


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


@pytest.mark.parametrize("kind", ["object-npy", "raw-pickle"])
def test_pickled_features_are_refused(tmp_path, kind):
    folder = write_saint(tmp_path / "s")
    marker = tmp_path / "pwned"
    path = folder / "feats.npy"
    if kind == "object-npy":
        np.save(path, np.array([[_Evil(str(marker))]] * N, dtype=object), allow_pickle=True)
        pattern = "holds Python objects"
    else:
        path.write_bytes(pickle.dumps(_Evil(str(marker))))
        pattern = "corrupt .npy header"
    _raises(path, pattern, folder)
    assert not marker.exists()


def test_more_than_one_prefix(tmp_path):
    folder, _ = write_sage(tmp_path / "g")
    write_sage(folder, prefix="other")
    with pytest.raises(DatasetError, match="more than one GraphSAGE dataset.*other, toy"):
        load_dataset(str(folder))


def test_unsupported_folder_lists_the_layouts(tmp_path):
    with pytest.raises(DatasetError, match="GraphSAINT adj_full.npz.*GraphSAGE PREFIX-G.json"):
        load_dataset(str(tmp_path))


def test_ids_outside_the_graph(tmp_path):
    labels = _labels(False)
    class_map = {**{str(i): labels[i] for i in range(N)}, "30": 0}
    folder = write_saint(tmp_path / "s", class_map=class_map)
    _raises(folder / "class_map.json", "node id '30' is not a node of the graph", folder)
    folder = write_saint(tmp_path / "t", role={"tr": [0, 1], "va": [2, 2], "te": [3]})
    _raises(folder / "role.json", "'va' lists node 2 more than once", folder)
    folder, _ = write_sage(tmp_path / "g")
    id_map = json.loads((folder / "toy-id_map.json").read_text())
    id_map["1"] = id_map["3"]
    _json(folder / "toy-id_map.json", id_map)
    _raises(folder / "toy-id_map.json", "nodes '1' and '3' both have row", folder)
