import functools
import os
import pickle
import shutil

import numpy as np
import pytest

from gns_jax.data import REGISTRY, default_data_dir, load_dataset, parse_synthetic
from gns_jax.errors import DatasetError

# Figures from each data/<name>/SOURCE.md. CiteSeer's class counts exclude its 15 padded,
# unlabelled nodes (SOURCE.md's 264 for class 0 counts them as class 0; 249 + 15 = 264).
FIGURES = {
    "cora": dict(
        nodes=2708,
        edges=5278,
        isolated=0,
        max_degree=168,
        features=1433,
        nnz=49216,
        counts=[351, 217, 418, 818, 426, 298, 180],
        split=(140, 500, 1000),
    ),
    "citeseer": dict(
        nodes=3327,
        edges=4552,
        isolated=48,
        max_degree=99,
        features=3703,
        nnz=105165,
        counts=[249, 590, 668, 701, 596, 508],
        split=(120, 500, 1000),
    ),
    "amazon_photo": dict(
        nodes=7650,
        edges=119081,
        isolated=115,
        max_degree=1434,
        features=745,
        nnz=1979909,
        counts=[369, 1686, 703, 915, 882, 823, 1941, 331],
        split=(160, 240, 7087),  # in the 7487-node largest component
    ),
    "amazon_computers": dict(
        nodes=13752,
        edges=245861,
        isolated=281,
        max_degree=2992,
        features=767,
        nnz=3675081,
        counts=[436, 2142, 1414, 542, 5158, 308, 487, 818, 2156, 291],
        split=(200, 300, 12881),  # in the 13381-node largest component
    ),
    "coauthor_cs": dict(
        nodes=18333,
        edges=81894,
        isolated=0,
        max_degree=136,
        features=6805,
        nnz=1092079,
        counts=[708, 462, 2050, 429, 1394, 2193, 371, 924, 775, 118, 1444, 2033, 420, 4136, 876],
        split=(300, 450, 17583),
    ),
    "facebook_pagepage": dict(
        nodes=22470,
        edges=170823,
        isolated=0,
        max_degree=709,
        features=4714,
        nnz=314583,
        counts=[6495, 6880, 5768, 3327],
        split=(80, 120, 22270),
    ),
    "tolokers": dict(
        nodes=11758,
        edges=519000,
        isolated=0,
        max_degree=2138,
        features=10,
        nnz=None,
        counts=[9192, 2566],
        split=(5879, 2939, 2940),
    ),
}


@functools.cache
def load(name, split_seed=0):
    return load_dataset(name, split_seed=split_seed)


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_reader_matches_source_figures(name):
    fig, ds = FIGURES[name], load(name)
    deg = ds.graph.degrees()
    assert ds.num_nodes == fig["nodes"]
    assert ds.graph.num_edges == 2 * fig["edges"]
    assert int((deg == 0).sum()) == fig["isolated"]
    assert int(deg.max()) == fig["max_degree"]
    assert ds.num_features == fig["features"]
    if fig["nnz"] is not None:
        assert int(np.count_nonzero(ds.features)) == fig["nnz"]
    assert ds.num_classes == len(fig["counts"])
    np.testing.assert_array_equal(np.bincount(ds.labels[ds.labels >= 0]), fig["counts"])
    assert (ds.train_idx.size, ds.val_idx.size, ds.test_idx.size) == fig["split"]
    assert ds.features.dtype == np.float32 and ds.labels.dtype == np.int32
    ds.validate()


def test_planetoid_public_split():
    cora = load("cora")
    np.testing.assert_array_equal(cora.train_idx, np.arange(140))
    np.testing.assert_array_equal(cora.val_idx, np.arange(140, 640))
    citeseer = load("citeseer")
    assert int((citeseer.labels == -1).sum()) == 15
    assert not np.isin(np.flatnonzero(citeseer.labels == -1), citeseer.test_idx).any()


def test_random_split_is_per_class_seeded_and_deterministic():
    a, b, c = load("amazon_photo", 0), load("amazon_photo", 0), load("amazon_photo", 1)
    np.testing.assert_array_equal(a.train_idx, b.train_idx)
    assert not np.array_equal(a.train_idx, c.train_idx)
    np.testing.assert_array_equal(np.bincount(a.labels[a.train_idx]), [20] * 8)
    np.testing.assert_array_equal(np.bincount(a.labels[a.val_idx]), [30] * 8)


def test_random_splits_lie_in_the_largest_component():
    for name, size in (("amazon_photo", 7487), ("amazon_computers", 13381), ("coauthor_cs", 18333)):
        ds = load(name)
        lcc = ds.graph.largest_component()
        assert int(lcc.sum()) == size  # SOURCE.md's largest connected component
        assert lcc[np.concatenate([ds.train_idx, ds.val_idx, ds.test_idx])].all()


def test_coauthor_features_are_counts():
    assert load("coauthor_cs").features.max() == 105


def test_path_detection_matches_registry(tmp_path):
    root = default_data_dir()
    for name in ("cora", "tolokers", "amazon_photo", "facebook_pagepage"):
        sub, _, file = REGISTRY[name]
        path = root / sub / file if file else root / sub
        by_path = load_dataset(str(path))
        assert by_path.num_nodes == load(name).num_nodes
    # A bare gnn-benchmark .npz (extracted from the shipped zip) reads like the zip.
    import zipfile

    with zipfile.ZipFile(root / "amazon_photo" / "amazon-photo.zip") as zf:
        bare = tmp_path / "photo.npz"
        bare.write_bytes(zf.read(zf.namelist()[0]))
    assert load_dataset(str(bare)).graph.num_edges == 2 * 119081


def test_synthetic_is_seeded_power_law_and_homophilous():
    a = load_dataset("synthetic:nodes=20000,degree=12,features=8,classes=5,seed=3")
    b = load_dataset("synthetic:nodes=20000,degree=12,features=8,classes=5,seed=3")
    c = load_dataset("synthetic:nodes=20000,degree=12,features=8,classes=5,seed=4")
    np.testing.assert_array_equal(a.graph.indices, b.graph.indices)
    np.testing.assert_array_equal(a.features, b.features)
    assert not np.array_equal(a.labels, c.labels)
    deg = a.graph.degrees()
    assert 10 < deg.mean() <= 12  # duplicates and self-loops removed
    assert deg.max() > 20 * deg.mean()  # heavy tail
    senders, receivers = a.graph.edges()
    same = np.mean(a.labels[senders] == a.labels[receivers])
    assert same > 0.75  # homophily 0.8 plus chance agreement 0.2 / 5
    assert (a.num_features, a.num_classes) == (8, 5)


@pytest.mark.parametrize("spec", ["synthetic:nodes=x", "synthetic:bogus=3", "synthetic:nodes=1"])
def test_bad_synthetic_spec(spec):
    with pytest.raises(DatasetError, match="--dataset"):
        parse_synthetic(spec)


# --- bad input -------------------------------------------------------------------------------


def write_npz(path, n=20, **overrides):
    rng = np.random.default_rng(0)
    arrays = dict(
        node_features=rng.random((n, 3)).astype(np.float32),
        node_labels=np.arange(n) % 2,
        edges=np.stack([np.arange(n - 1), np.arange(1, n)], 1),
        train_masks=(np.arange(n) < 8)[None],
        val_masks=((np.arange(n) >= 8) & (np.arange(n) < 14))[None],
        test_masks=(np.arange(n) >= 14)[None],
    )
    arrays.update(overrides)
    np.savez(path, **arrays)
    return str(path)


def test_small_npz_loads(tmp_path):
    ds = load_dataset(write_npz(tmp_path / "ok.npz"))
    assert ds.num_nodes == 20 and ds.graph.num_edges == 38


def test_missing_file(tmp_path):
    with pytest.raises(DatasetError, match="neither a registered dataset"):
        load_dataset(str(tmp_path / "missing.npz"))
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset("cora", data_dir=tmp_path)


def test_unknown_dataset_name():
    with pytest.raises(DatasetError, match="nosuchdataset"):
        load_dataset("nosuchdataset")


@pytest.mark.parametrize(
    "name, file", [("amazon_photo", "amazon-photo.zip"), ("tolokers", "tolokers.npz")]
)
def test_truncated_archive(tmp_path, name, file):
    data = (default_data_dir() / name / file).read_bytes()
    path = tmp_path / file
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError, match=f"{file}.*(truncated|corrupt)"):
        load_dataset(str(path))


def test_truncated_pickle(tmp_path):
    folder = tmp_path / "cora"
    shutil.copytree(default_data_dir() / "cora", folder)
    graph_file = folder / "ind.cora.graph"
    graph_file.write_bytes(graph_file.read_bytes()[:1000])
    with pytest.raises(DatasetError, match="ind.cora.graph.*truncated or corrupt"):
        load_dataset(str(folder))


def test_garbage_file(tmp_path):
    path = tmp_path / "noise.bin"
    path.write_bytes(os.urandom(256).replace(b"PK", b"xx"))
    with pytest.raises(DatasetError, match="unrecognised file format"):
        load_dataset(str(path))


def test_ids_out_of_range(tmp_path):
    path = write_npz(tmp_path / "bad.npz", edges=np.array([[0, 1], [2, 25]]))
    with pytest.raises(DatasetError, match=r"bad.npz.*\[0, 20\)"):
        load_dataset(path)


def test_nan_features(tmp_path):
    x = np.ones((20, 3), np.float32)
    x[7, 1] = np.nan
    with pytest.raises(DatasetError, match="NaN or infinite.*node 7"):
        load_dataset(write_npz(tmp_path / "nan.npz", node_features=x))
    x[7, 1] = np.inf
    with pytest.raises(DatasetError, match="NaN or infinite"):
        load_dataset(write_npz(tmp_path / "inf.npz", node_features=x))


def test_labels_out_of_range(tmp_path):
    labels = np.arange(20) % 2
    labels[4] = -3
    with pytest.raises(DatasetError, match="labels out of range.*-3"):
        load_dataset(write_npz(tmp_path / "labels.npz", node_labels=labels))


def test_empty_split(tmp_path):
    path = write_npz(tmp_path / "empty.npz", train_masks=np.zeros((1, 20), bool))
    with pytest.raises(DatasetError, match="train split is empty"):
        load_dataset(path)


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_restricted_unpickler_refuses_crafted_pickle(tmp_path):
    folder = tmp_path / "evil"
    shutil.copytree(default_data_dir() / "cora", folder)
    marker = tmp_path / "pwned"
    (folder / "ind.cora.graph").write_bytes(pickle.dumps(_Evil(str(marker)), protocol=2))
    with pytest.raises(DatasetError, match="refusing to load global 'posix.mkdir'"):
        load_dataset(str(folder))
    assert not marker.exists()
