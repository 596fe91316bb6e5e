"""Crafted and corrupt inputs: every load ends in a one-line GnsJaxError naming the file or the
option, or in a Dataset that passes ``Dataset.validate()``; never another exception type, a crash
or silently wrong data. Crafted files are made in ``tmp_path``; loads that could crash the
interpreter (out-of-range sparse indices) run in a subprocess."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gns_jax.data import load_dataset, parse_synthetic, synthetic
from gns_jax.data.ondisk import save_dataset
from gns_jax.errors import DatasetError, GraphError
from gns_jax.graph import from_edges

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


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
        nodes=400, degree=6.0, features=8, classes=3, seed=0, homophily=0.8, signal=0.5
    )


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
