"""The streamed synthetic generator writes exactly the in-memory generator's saved folder."""

from __future__ import annotations

import numpy as np
import pytest

from gns_jax.cli import main
from gns_jax.data import load_dataset
from gns_jax.data import streamed as streamed_module
from gns_jax.data.ondisk import read_saved, save_dataset
from gns_jax.data.streamed import write_synthetic
from gns_jax.data.synthetic import spec_rng, synthetic
from gns_jax.errors import DatasetError

FILES = (
    "meta.json",
    "indptr.npy",
    "indices.npy",
    "features.npy",
    "labels.npy",
    "train_idx.npy",
    "val_idx.npy",
    "test_idx.npy",
)


def _differ(a, b) -> list[str]:
    """The files of two saved folders whose bytes differ (or that are missing)."""
    assert sorted(p.name for p in b.iterdir()) == sorted(FILES)  # no temporary files left
    return [f for f in FILES if (a / f).read_bytes() != (b / f).read_bytes()]


@pytest.mark.parametrize(
    "opts, chunk_edges, bucket_bytes, dtype",
    [
        # several edge chunks and buckets, some buckets holding a single receiver range
        (dict(nodes=3000, degree=7.5, features=16, classes=5), 1000, 20_000, "float32"),
        # more classes than the uniform draw covers: the first nodes take them (extra draws)
        (dict(nodes=12, degree=3, features=4, classes=10), 5, 100, "float32"),
        # one chunk, one bucket, float16 on disk, no homophily, a split leaving nodes out
        (
            dict(nodes=500, degree=4, features=3, classes=3, homophily=0.0, train=0.05, test=0.1),
            1 << 20,
            1 << 30,
            "float16",
        ),
    ],
)
def test_streamed_equals_in_memory(tmp_path, opts, chunk_edges, bucket_bytes, dtype):
    opts = dict(signal=0.1) | opts
    save_dataset(synthetic(spec_rng(3), name="s", **opts), tmp_path / "mem", feature_dtype=dtype)
    lines = []
    meta = write_synthetic(
        spec_rng(3),
        tmp_path / "str",
        name="s",
        feature_dtype=dtype,
        chunk_edges=chunk_edges,
        bucket_bytes=bucket_bytes,
        log=lines.append,
        **opts,
    )
    assert _differ(tmp_path / "mem", tmp_path / "str") == []
    ds = read_saved(tmp_path / "str")  # validates, the graph's symmetry included
    assert ds.graph.num_edges == meta["num_edges"] > 0
    assert any(line.startswith("edges:") for line in lines)
    assert any(line.startswith("graph:") for line in lines)


def test_unadvanced_streams_are_caught(tmp_path, monkeypatch):
    """The defect the equality test exists for: the three edge streams not advanced apart."""
    opts = dict(nodes=800, degree=6, features=4, classes=4)
    save_dataset(synthetic(spec_rng(0), **opts), tmp_path / "mem")
    real = streamed_module._advanced
    monkeypatch.setattr(streamed_module, "_advanced", lambda state, delta: real(state, 0))
    write_synthetic(spec_rng(0), tmp_path / "str", **opts)
    assert {"indptr.npy", "indices.npy", "features.npy"} <= set(
        _differ(tmp_path / "mem", tmp_path / "str")
    )


def test_save_streams_large_specs(tmp_path, monkeypatch, capsys):
    """``gns-jax save`` streams above the threshold and gives the folder load_dataset's graph."""
    spec = "synthetic:nodes=400,degree=5,features=6,classes=4,seed=2"
    monkeypatch.setattr(streamed_module, "STREAM_ABOVE", 0)
    assert main(["save", "--dataset", spec, "--out", str(tmp_path / "s")]) == 0
    assert "streamed to" in capsys.readouterr().err
    monkeypatch.setattr(streamed_module, "STREAM_ABOVE", 1 << 40)
    assert main(["save", "--dataset", spec, "--out", str(tmp_path / "m"), "--quiet"]) == 0
    assert _differ(tmp_path / "m", tmp_path / "s") == []
    expected, saved = load_dataset(spec), read_saved(tmp_path / "s")
    np.testing.assert_array_equal(saved.graph.indices, expected.graph.indices)
    np.testing.assert_array_equal(saved.features, expected.features)


def test_streamed_errors(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(DatasetError, match="not empty"):
        write_synthetic(spec_rng(0), tmp_path / "full", nodes=10, degree=2, features=2, classes=2)
    with pytest.raises(DatasetError, match="PCG64"):
        write_synthetic(
            np.random.Generator(np.random.MT19937(0)),
            tmp_path / "new",
            nodes=10,
            degree=2,
            features=2,
            classes=2,
        )
    with pytest.raises(DatasetError, match="classes <= nodes"):
        write_synthetic(spec_rng(0), tmp_path / "new", nodes=3, degree=2, features=2, classes=5)


def test_split_options(tmp_path):
    ds = load_dataset(
        "synthetic:nodes=1000,degree=4,features=2,classes=3,train=0.011,val=0.001,test=0.002"
    )
    assert (ds.train_idx.size, ds.val_idx.size, ds.test_idx.size) == (11, 1, 2)
    assert ds.split == "random 1.1/0.1/0.2"
    assert (
        load_dataset("synthetic:nodes=1000,degree=4,features=2,classes=3").split == "random 8/2/90"
    )
    for bad, message in [
        ("train=0", r"train must lie in \(0, 1\]"),
        ("val=1.5", r"val must lie in \(0, 1\]"),
        ("train=0.6,val=0.3,test=0.2", "does not fit in 1,000 nodes"),
        ("train=0.9,val=0.1", "does not fit"),  # nothing left for the default test split
    ]:
        with pytest.raises(DatasetError, match=message):
            load_dataset(f"synthetic:nodes=1000,degree=4,features=2,classes=3,{bad}")
    with pytest.raises(DatasetError, match="does not fit"):
        write_synthetic(
            spec_rng(0), tmp_path / "s", nodes=10, degree=2, features=2, classes=2, train=0.95
        )
