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


def test_predict_links_scores_given_pairs_with_the_whole_graph(tiny_dataset, tmp_path):
    """``load_model`` of a link run and ``predict_links``: a float32 probability a pair, the
    same twice; scores follow the model's logits (edges of the graph above random pairs here,
    since the model was trained on them); bad pairs are refused."""
    from gns_jax import load_model, predict_links

    folder = tmp_path / "ckpt"
    fit(tiny_dataset, LINK.replace(epochs=3, checkpoint_dir=str(folder)), quiet=True)
    model, config, _ = load_model(folder, tiny_dataset)
    s, r = tiny_dataset.graph.edges()
    edges = np.stack([s, r], 1)[:200]
    rng = np.random.default_rng(0)
    pairs = np.concatenate([edges, rng.integers(0, tiny_dataset.num_nodes, (200, 2))])
    first = predict_links(model, tiny_dataset, pairs, config=config)
    assert first.dtype == np.float32 and first.shape == (400,)
    assert ((first >= 0) & (first <= 1)).all()
    np.testing.assert_array_equal(first, predict_links(model, tiny_dataset, pairs, config=config))
    assert first[:200].mean() > first[200:].mean()
    with pytest.raises(ConfigError, match="pairs"):
        predict_links(model, tiny_dataset, pairs + tiny_dataset.num_nodes, config=config)
    with pytest.raises(ConfigError, match="pairs"):
        predict_links(model, tiny_dataset, pairs[:, :1], config=config)


@pytest.mark.slow
def test_the_predict_command_writes_pair_probabilities(tmp_path):
    ckpt, out = tmp_path / "ckpt", tmp_path / "scores.npy"
    args = ["--dataset", TINY_SPEC, "--task", "link", "--epochs", "1", "--batch-size", "32",
            "--fanouts", "4,3", "--hidden", "16", "--rank-negatives", "10",
            "--checkpoint-dir", str(ckpt)]  # fmt: skip
    gns = [sys.executable, "-m", "gns_jax"]
    done = subprocess.run([*gns, "train", *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    pairs = tmp_path / "pairs.npy"
    np.save(pairs, np.array([[0, 1], [2, 3], [5, 7]], np.int64))
    predict = [*gns, "predict", "--checkpoint", str(ckpt), "--dataset", TINY_SPEC]
    done = subprocess.run([*predict, "--pairs", str(pairs), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    scores = np.load(out)
    assert scores.dtype == np.float32 and scores.shape == (3,)
    bad = tmp_path / "bad.npy"
    np.save(bad, np.array([[0.5, 1.0]]))
    done = subprocess.run([*predict, "--pairs", str(bad), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2 and str(bad) in done.stderr and "Traceback" not in done.stderr
    done = subprocess.run([*predict, "--out", str(out)], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 2 and "--pairs" in done.stderr


def test_the_planner_picks_a_link_runs_cache_from_its_edges_endpoints(tiny_dataset):
    metrics = fit(tiny_dataset, LINK.replace(cache_fraction="auto", epochs=1), quiet=True).metrics
    plan = metrics["plan"]
    assert metrics["cache_fraction"] == plan["chosen"] and len(plan["fractions"]) >= 2
    assert metrics["config"]["cache_fraction"] == plan["chosen"]
