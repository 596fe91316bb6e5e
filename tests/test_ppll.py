"""The pipeline with local learning (``gns_jax.pipeline``, ``--parallel pipeline``).

In this process (one CPU device): a one-stage pipeline trains exactly as ``fit`` without one,
a stage's update is the gradient step of its own local loss, the layer split, the option
checks. The multi-device checks run ``tests/ppll_worker.py`` in a fresh Python with forced CPU
devices (``parallel`` marker).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from gns_jax.config import TrainConfig
from gns_jax.data import load_dataset
from gns_jax.errors import ConfigError
from gns_jax.factories import make_model, make_sampler, prepare_features
from gns_jax.loader import Loader
from gns_jax.pipeline import build_stages, stage_bounds, stage_step
from gns_jax.step import init_state
from gns_jax.tasks import Task, masked_mean, softmax_loss
from gns_jax.train import fit
from tests.helpers import concat_sage

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "ppll_worker.py"
SMALL = dict(epochs=3, batch_size=20, fanouts=(10, 5), hidden=32, cache_fraction=0.1, prefetch=1)


def _worker(what: str, devices: int) -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    done = subprocess.run(
        [sys.executable, str(WORKER), what], env=env, capture_output=True, text=True,
        timeout=1200, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_layers_split_into_consecutive_stages_the_later_taking_the_rest():
    assert stage_bounds(3, 1) == [(0, 3)]
    assert stage_bounds(3, 2) == [(0, 1), (1, 3)]
    assert stage_bounds(3, 3) == [(0, 1), (1, 2), (2, 3)]
    assert stage_bounds(5, 2) == [(0, 2), (2, 5)]
    with pytest.raises(ConfigError, match="devices"):
        stage_bounds(2, 3)


@pytest.mark.integration
def test_a_one_stage_pipeline_trains_exactly_as_fit_without_one():
    """The same losses, scores and compilations: the stage's key split, loss and update are
    the whole model's."""
    dataset = load_dataset("cora")
    plain = fit(dataset, TrainConfig(**SMALL), quiet=True).metrics
    piped = fit(dataset, TrainConfig(parallel="pipeline", **SMALL), quiet=True).metrics
    assert [e["train_loss"] for e in piped["epochs"]] == [e["train_loss"] for e in plain["epochs"]]
    assert piped["test_accuracy"] == plain["test_accuracy"]
    assert [e["stage_losses"] for e in piped["epochs"]] == [
        [e["train_loss"]] for e in plain["epochs"]
    ]
    assert piped["parallel"] == "pipeline" and plain["parallel"] == "data"
    assert piped["stage_compilations"] == [1] and plain["stage_compilations"] is None
    assert len(piped["stage_busy_fraction"]) == 1 and 0 < piped["stage_busy_fraction"][0] <= 1


def _batch_and_stages(dropout: float = 0.0):
    dataset = load_dataset("cora")
    config = TrainConfig(**SMALL, dropout=dropout)
    loader = Loader(dataset, make_sampler(dataset, config), seed=0,
                    features=prepare_features(dataset, config), prefetch=0)  # fmt: skip
    batches = loader.batches(0, 1)
    batch = next(batches).inputs
    batches.close()
    model = make_model(dataset, config, jax.random.key(1))
    stages, bounds = build_stages(model, 2, 0, jax.random.key(2))
    return model, stages, bounds, batch


def _local_loss(stage, batch, per_row: bool):
    """Stage 0's local loss, written out: layer 0, the head on the seed slots (``per_row``: the
    defect of a head over every destination row, the labels tiled)."""
    h = stage.layers[0](batch.x, batch.blocks[0])
    if per_row:
        reps = -(-h.shape[0] // batch.labels.shape[0])
        labels = jnp.tile(batch.labels, reps)[: h.shape[0]]
        return jnp.mean(softmax_loss(stage.head(h), labels))
    return masked_mean(softmax_loss(stage.head(h[: batch.labels.shape[0]]), batch.labels),
                       batch.seed_mask)  # fmt: skip


def test_a_stage_takes_the_gradient_step_of_its_local_loss_alone():
    """Stage 0's update (no dropout; plain gradient descent, so the update is the gradient) is
    the step on the gradient of its head's loss over the real seeds; the same check with the
    loss over every destination row (a defect) fails."""
    model, stages, bounds, batch = _batch_and_stages()
    tx = optax.sgd(1.0)
    graphdef, state = init_state(stages[0], tx)
    new, h, metrics = stage_step(
        state, batch.x, batch.blocks[:1], batch.labels, batch.seed_mask, jax.random.key(3),
        graphdef=graphdef, tx=tx, first=0, last=False, layer_input=model.layer_input,
        loss=softmax_loss, task=Task("multiclass"),
    )  # fmt: skip
    assert h.shape[0] == batch.blocks[0].num_dst  # the rows the next stage reads

    def expected(per_row: bool):
        def loss(params):
            return _local_loss(nnx.merge(graphdef, params, state.rest), batch, per_row)

        value, grads = jax.value_and_grad(loss)(state.params)
        updates, _ = tx.update(grads, state.opt_state, state.params)
        return value, optax.apply_updates(state.params, updates)

    value, params = expected(per_row=False)
    np.testing.assert_allclose(metrics["loss"], value, rtol=1e-6)
    for a, b in zip(jax.tree.leaves(new.params), jax.tree.leaves(params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    _, wrong_params = expected(per_row=True)
    gaps = [np.abs(a - b).max() for a, b in zip(jax.tree.leaves(new.params),
                                                jax.tree.leaves(wrong_params))]  # fmt: skip
    assert max(gaps) > 1e-3, gaps


def test_the_stages_share_the_models_layers_and_the_heads_are_extra():
    model, stages, bounds, _ = _batch_and_stages()
    assert bounds == [(0, 1), (1, 2)]
    assert stages[0].layers[0] is model.convs[0] and stages[1].layers[0] is model.convs[1]
    assert stages[0].head is not None and stages[1].head is None
    assert stages[0].head.out.out_features == model.convs[1].self_proj.out_features


def test_pipeline_options_are_checked_before_training():
    with pytest.raises(ConfigError, match="devices"):
        TrainConfig(parallel="pipeline", devices=3, fanouts=(10, 5)).validate()
    with pytest.raises(ConfigError, match="parallel"):
        TrainConfig(parallel="tensor").validate()
    with pytest.raises(ConfigError, match="stage_queue"):
        TrainConfig(stage_queue=0).validate()
    with pytest.raises(ConfigError, match="local_head"):
        TrainConfig(local_head=-1).validate()
    # the pipeline's batch is not split: any batch size goes
    TrainConfig(parallel="pipeline", devices=2, batch_size=999).validate()


def test_a_model_without_layers_one_by_one_is_refused_by_name():
    dataset = load_dataset("cora")
    model = concat_sage((dataset.num_features, 16, dataset.num_classes))
    with pytest.raises(ConfigError, match="pipeline_layers"):
        fit(dataset, TrainConfig(parallel="pipeline", **SMALL), model=model, quiet=True)


@pytest.mark.parallel
def test_two_stages_on_two_devices_learn_deterministically_and_compile_once():
    """Cora, 12 epochs, 2 stages: one distinct device and one compilation a stage; the same
    seed gives the same numbers; every epoch records both stages' losses; the model learns
    (well above the majority class); its checkpoint loads into the same predictions."""
    out = _worker("train", devices=3)
    a, b = out["a"], out["b"]
    assert a["stage_devices"] == ["TFRT_CPU_0", "TFRT_CPU_1"] or len(set(a["stage_devices"])) == 2
    assert a["stage_compilations"] == [1, 1] and a["compilations"] == 2
    assert a["losses"] == b["losses"] and a["stage_losses"] == b["stage_losses"]
    assert a["test_accuracy"] == b["test_accuracy"]
    assert all(len(s) == 2 for s in a["stage_losses"])
    assert a["stage_losses"][-1][0] < a["stage_losses"][0][0]  # the local head learns too
    assert a["test_accuracy"] > 0.6, a  # Cora's majority class: 0.32 of the test nodes
    assert all(0 < f <= 1 for f in a["stage_busy_fraction"])
    assert out["same_predictions"]
    three = out["three"]
    assert three["stage_layers"] == [[0, 1], [1, 2], [2, 3]]
    assert three["stage_compilations"] == [1, 1, 1] and len(set(three["stage_devices"])) == 3


@pytest.mark.parallel
def test_a_pipeline_resumes_mid_epoch_from_its_checkpoint_exactly():
    out = _worker("resume", devices=2)
    assert out["resumed_from"] == 6  # batch 6 of epoch 1: the mid-epoch checkpoint
    assert out["resumed"]["losses"] == out["straight"]["losses"]
    assert out["resumed"]["stage_losses"] == out["straight"]["stage_losses"]
    assert out["resumed"]["test_accuracy"] == out["straight"]["test_accuracy"]


@pytest.mark.parallel
def test_the_command_trains_a_pipeline_and_writes_its_keys(tmp_path):
    from tests.helpers import TINY_ARGS

    out = tmp_path / "r.json"
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    command = [sys.executable, "-m", "gns_jax", "train", *TINY_ARGS, "--quiet", "--out", str(out)]
    done = subprocess.run(
        [*command, "--parallel", "pipeline", "--devices", "2", "--local-head", "8"],
        env=env, capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["parallel"] == "pipeline" and result["config"]["local_head"] == 8
    assert result["stage_layers"] == [[0, 1], [1, 2]]
    assert all(len(e["stage_losses"]) == 2 for e in result["epochs"])
    refused = subprocess.run(
        [*command, "--parallel", "pipeline", "--devices", "3"],
        env=env, capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert refused.returncode == 2 and "--devices" in refused.stderr


@pytest.mark.parallel
def test_the_pipeline_benchmark_reports_every_mode_side_by_side(tmp_path):
    spec = "synthetic:nodes=600,degree=6,features=8,classes=3"
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=3")
    done = subprocess.run(
        [sys.executable, "-m", "experiments.bench_pipeline", "--graphs", spec, "--seeds", "0",
         "--epochs", "2", "--batches", "2", "--rounds", "1", "--throughput-graph",
         "synthetic:nodes=3000,degree=6,features=8,classes=3", "--throughput-batch", "32",
         "--out", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=1200, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    text = (tmp_path / "bench_pipeline.md").read_text()
    from experiments.bench_pipeline import MODES

    for label in MODES:
        assert text.count(f"| {label} |") == 2, label  # the accuracy and throughput tables
    assert "| end-to-end | " in text and "| 1.00 |" in text
    assert (tmp_path / "figures" / "pipeline.png").is_file()
    saved = json.loads((tmp_path / "throughput.json").read_text())
    piped = [r for r in saved["rows"] if r["mode"] == "pipeline, 3 stages"][0]
    assert len(piped["busy"]) == 3 and piped["compilations"] == [1, 1, 1]


def test_a_stage_that_fails_raises_in_the_caller_and_stops_every_stage_thread():
    import threading

    def broken(logits, labels):
        raise FloatingPointError("a defect in the loss")

    dataset = load_dataset("cora")
    with pytest.raises(FloatingPointError, match="defect"):
        fit(dataset, TrainConfig(parallel="pipeline", **SMALL), loss=broken, quiet=True)
    assert not [t for t in threading.enumerate() if t.name.startswith("gns-jax-stage")]
