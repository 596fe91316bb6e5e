"""Link prediction through ``fit`` and the command: the edge split, the JSON keys, the
training graph without the held-out edges, checkpoints and resumption, bad options and files."""

import json
import subprocess
import sys

import numpy as np
import pytest

from gns_jax import fit
from gns_jax.config import TrainConfig
from gns_jax.errors import ConfigError
from gns_jax.run import build_run
from tests.helpers import TINY_SPEC, edge_set

LINK = TrainConfig(task="link", sampler="gns", epochs=2, batch_size=32, fanouts=(5, 3),
                   hidden=16, cache_fraction=0.2, hits_k=5, rank_negatives=20)  # fmt: skip


def test_a_link_run_reports_its_ranking_metrics(tiny_dataset):
    metrics = fit(tiny_dataset, LINK, quiet=True).metrics
    assert metrics["task"] == "link" and metrics["metric"] == "roc_auc"
    for split in ("val", "test"):
        for name in ("roc_auc", "average_precision", "mrr", "hits@5"):
            value = metrics[f"{split}_{name}"]
            assert value is not None and 0 <= value <= 1, (split, name, value)
    assert metrics["val_accuracy"] is not None  # the pairs' decisions at 0.5
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2]


def test_the_held_out_edges_leave_the_training_graph(tiny_dataset):
    run = build_run(tiny_dataset, LINK)
    try:
        trained = edge_set(run.loader.dataset.graph)
        split = run.evaluator.split
        for part in (split.val_pos, split.test_pos):
            for u, v in part.tolist():
                assert (u, v) not in trained and (v, u) not in trained
        assert all((u, v) in trained for u, v in split.train_pos.tolist())
        # evaluation of the test edges sees the validation edges, as OGB does
        test_graph = edge_set(split.test_graph(tiny_dataset.graph))
        assert all((u, v) in test_graph for u, v in split.val_pos.tolist())
        assert run.loader.num_batches == -(-len(split.train_pos) // 32)
    finally:
        run.stepper.close()


@pytest.mark.slow
def test_a_resumed_link_run_ends_as_a_straight_one(tiny_dataset, tmp_path):
    base = LINK.replace(epochs=2, checkpoint_dir=str(tmp_path / "ckpt"))
    straight = fit(tiny_dataset, LINK.replace(epochs=2), quiet=True).metrics
    fit(tiny_dataset, base.replace(epochs=1), quiet=True)
    resumed = fit(tiny_dataset, base.replace(resume=True), quiet=True).metrics
    assert resumed["resumed_from_step"] > 0
    losses = lambda m: [e["train_loss"] for e in m["epochs"]]  # noqa: E731
    assert losses(resumed) == losses(straight)
    assert resumed["test_roc_auc"] == straight["test_roc_auc"]


@pytest.mark.parametrize(
    "changes, option",
    [
        ({"parallel": "pipeline", "devices": 1}, "parallel"),
        ({"eval_mode": "sampled"}, "eval_mode"),
        ({"metric": "f1_micro"}, "metric"),
        ({"neg_ratio": 0}, "neg_ratio"),
        ({"negatives": "hard"}, "negatives"),
        ({"decoder": "bilinear"}, "decoder"),
        ({"edge_split": "0.5,0.5"}, "edge_split"),
    ],
)
def test_bad_link_options_are_refused_before_training(tiny_dataset, changes, option):
    with pytest.raises(ConfigError) as raised:
        fit(tiny_dataset, LINK.replace(**changes), quiet=True)
    assert raised.value.param == option


def test_link_metrics_are_refused_for_node_tasks():
    with pytest.raises(ConfigError, match="mrr is a metric of --task link"):
        TrainConfig(metric="mrr").validate()


@pytest.mark.slow
def test_the_command_trains_links_and_names_a_bad_split_file(tmp_path):
    out = tmp_path / "run.json"
    args = ["--dataset", TINY_SPEC, "--task", "link", "--epochs", "1", "--batch-size", "32",
            "--fanouts", "4,3", "--hidden", "16", "--rank-negatives", "10",
            "--hits-k", "3"]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "gns_jax", "train", *args, "--out", str(out)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert {"val_roc_auc", "test_roc_auc", "test_mrr", "test_hits@3"} <= set(result)
    bad = tmp_path / "split.npz"
    np.savez(bad, train_pos=np.zeros((3, 3), np.int64))
    done = subprocess.run(
        [sys.executable, "-m", "gns_jax", "train", *args, "--edge-split", str(bad)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert str(bad) in lines[-1] and "Traceback" not in done.stderr
