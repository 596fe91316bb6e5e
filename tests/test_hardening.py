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

from gns_jax.data import synthetic
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


# --- synthetic graphs and Dataset.validate ------------------------------------------------------


def test_small_synthetic_graphs_have_every_class():
    ds = synthetic(np.random.default_rng(3), nodes=10, degree=3, features=2, classes=8)
    assert ds.num_classes == 8 and np.all(np.bincount(ds.labels, minlength=8) > 0)
    # A draw that already covers every class is kept as drawn (seeded outputs are unchanged).
    big = small_synthetic(600)
    np.testing.assert_array_equal(big.labels, np.random.default_rng(0).integers(3, size=600))


def test_validate_refuses_a_directed_graph_and_an_empty_class():
    ds = small_synthetic()
    senders, receivers = ds.graph.edges()
    one_way = senders < receivers
    directed = from_edges(senders[one_way], receivers[one_way], ds.num_nodes, symmetrize=False)
    with pytest.raises(GraphError, match="where: not undirected: edge"):
        dataclasses.replace(ds, graph=directed).validate("where")
    with pytest.raises(DatasetError, match=r"contiguous 0\.\.3 .* 1 classes have no .*\(3\)"):
        dataclasses.replace(ds, num_classes=4).validate()
