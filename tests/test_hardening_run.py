"""Hardening of a run: graphs without edges train, fan-outs are capped at the largest degree,
a configuration that cannot fit in memory stops before allocating, and a checkpoint that cannot
be written is one clear error that leaves the last complete checkpoint intact."""

import contextlib
import dataclasses
import io
import os
import resource

import jax
import numpy as np
import pytest

from gns_jax.cli import main
from gns_jax.data import save_dataset, synthetic
from gns_jax.errors import CheckpointError, ConfigError, DatasetError
from gns_jax.factories import check_memory, make_sampler
from gns_jax.graph import CSRGraph
from gns_jax.sampling import NodeWiseSampler
from gns_jax.train import fit, load_model, predict


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def edgeless(tmp_path_factory):
    """A saved 300-node graph with no edge at all (every node isolated)."""
    data = synthetic(np.random.default_rng(0), nodes=300, degree=4, features=8, classes=3)
    graph = CSRGraph(np.zeros(301, np.int64), np.zeros(0, np.int32))
    folder = tmp_path_factory.mktemp("edgeless") / "g"
    save_dataset(dataclasses.replace(data, graph=graph), folder)
    return folder


@pytest.mark.parametrize(
    "sampler", ["ns", *(pytest.param(s, marks=pytest.mark.slow) for s in ("gns", "ladies"))]
)
def test_a_graph_without_edges_trains_on_self_features(edgeless, sampler):
    code, _, err = _run(
        ["train", "--dataset", str(edgeless), "--sampler", sampler, "--epochs", "2", "--quiet"]
    )
    assert code == 0, err


def test_fanouts_are_capped_at_the_largest_degree(tiny_dataset):
    largest = int(tiny_dataset.graph.degrees().max())
    capped = NodeWiseSampler(tiny_dataset.graph, (100_000, 100_000), 16)
    exact = NodeWiseSampler(tiny_dataset.graph, (largest, largest), 16)
    assert capped.fanouts == (largest, largest) and capped.budget == exact.budget
    # the same draws: every neighbour of a node of degree <= fan-out
    seeds = capped.pad_seeds(tiny_dataset.train_idx[:16])
    a = capped.sample(jax.random.key(0), seeds)
    b = exact.sample(jax.random.key(0), seeds)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y)


def test_a_run_that_cannot_fit_stops_before_allocating(tiny_dataset, tiny_config):
    config = dataclasses.replace(tiny_config, hidden=100_000_000)
    with pytest.raises(ConfigError, match=r"hidden: this run needs at least [\d,.]+ GiB"):
        check_memory(tiny_dataset, config, make_sampler(tiny_dataset, config))
    parts = check_memory(tiny_dataset, tiny_config, make_sampler(tiny_dataset, tiny_config))
    # GraphSAGE (16 -> 32 -> 4): 2 x 16 x 32 + 32 + 2 x 32 x 4 + 4 parameters, four copies
    assert parts["model and optimiser"] == 16 * (2 * 16 * 32 + 32 + 2 * 32 * 4 + 4)
    code, out, err = _run(
        ["train", "--dataset", "synthetic:nodes=400,degree=6,features=8,classes=3",
         "--hidden", "100000000", "--quiet"]
    )  # fmt: skip
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("gns-jax: error: --hidden:")
    assert "GiB this machine has available" in lines[0] and not out


@pytest.mark.slow  # three short fits: 15 s
def test_a_checkpoint_that_cannot_be_written_leaves_the_last_one_intact(
    tiny_dataset, tiny_config, tmp_path
):
    folder = tmp_path / "ckpt"
    config = dataclasses.replace(tiny_config, checkpoint_dir=str(folder))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)

    def limit(_):  # after the first epoch's checkpoint: no file may grow beyond 1 KiB
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, hard))

    try:
        with pytest.raises(CheckpointError, match="cannot write checkpoint 6") as caught:
            fit(tiny_dataset, config, quiet=True, on_epoch=limit)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    message = str(caught.value)
    assert "\n" not in message and str(folder) in message and "checkpoints (3)" in message
    assert sorted(os.listdir(folder)) == ["3"]  # nothing partial beside it
    model, _, record = load_model(folder, tiny_dataset)
    assert record["loader"]["epoch"] == 1 and record["history"][0]["epoch"] == 1
    assert predict(model, tiny_dataset).shape == (tiny_dataset.num_nodes,)
    # resuming goes on from it
    more = fit(tiny_dataset, dataclasses.replace(config, resume=True), quiet=True)
    assert more.metrics["resumed_from_step"] == 3 and len(more.metrics["epochs"]) == 3


@pytest.mark.parametrize("exists", [False, True])
def test_a_dataset_that_cannot_be_written_leaves_nothing_behind(tiny_dataset, tmp_path, exists):
    """``save`` beyond the file-size limit: one line naming the folder, and no partial dataset
    (a folder it created is gone; an empty one given stays empty)."""
    folder = tmp_path / "saved"
    if exists:
        folder.mkdir()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, hard))
    try:
        with pytest.raises(DatasetError, match="cannot write the dataset") as caught:
            save_dataset(tiny_dataset, folder)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert "\n" not in str(caught.value) and str(folder) in str(caught.value)
    assert (folder.exists() and not any(folder.iterdir())) if exists else not folder.exists()


@pytest.mark.slow
def test_results_that_cannot_be_written_are_one_line_and_leave_a_whole_file(tmp_path):
    """``--out`` beyond the file-size limit (1 KiB: the start-up record fits, the results do
    not): one line naming the file and the reason, exit 2, the file still a whole JSON, no
    temporary file beside it."""
    import json
    import subprocess
    import sys

    from tests.helpers import TINY_ARGS

    out = tmp_path / "run.json"
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    done = subprocess.run(
        [sys.executable, "-m", "gns_jax", "train", *TINY_ARGS, "--out", str(out), "--quiet",
         "--no-compile-cache"],
        capture_output=True, text=True, timeout=300,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (1024, hard)),
    )  # fmt: skip
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert str(out) in lines[0] and "cannot write" in lines[0]
    assert json.loads(out.read_text())["status"] == "starting"
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [
        "run.json"
    ]
