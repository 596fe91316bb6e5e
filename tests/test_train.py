import dataclasses
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from gns_jax.config import TrainConfig
from gns_jax.data import load_dataset
from gns_jax.factories import make_model, make_optimizer, make_sampler
from gns_jax.instrument import CompileCounter
from gns_jax.loader import Loader
from gns_jax.train import fit, init_state, make_train_step, train_step


@pytest.fixture(scope="module")
def step_inputs(tiny_dataset, tiny_config):
    ds = tiny_dataset
    tx = make_optimizer(tiny_config)
    graphdef, state = init_state(make_model(ds, tiny_config, jax.random.key(0)), tx)
    loader = Loader(ds, make_sampler(ds, tiny_config), seed=0, prefetch=0, budget="worst")
    batches = [b.inputs for _, b in zip(range(3), loader.epoch(0))]
    return graphdef, tx, state, batches


@pytest.mark.slow
def test_jit_matches_eager(step_inputs):
    graphdef, tx, state, batches = step_inputs
    key = jax.random.key(7)
    eager_state, eager_metrics = train_step(state, batches[0], key, graphdef=graphdef, tx=tx)
    jitted = jax.jit(lambda *a: train_step(*a, graphdef=graphdef, tx=tx))
    jit_state, jit_metrics = jitted(state, batches[0], key)
    # float32 on the CPU: XLA may fuse differently from op-by-op execution.
    np.testing.assert_allclose(eager_metrics["loss"], jit_metrics["loss"], rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree.leaves(eager_state.params), jax.tree.leaves(jit_state.params)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert int(jit_state.step) == 1


def test_train_step_compiles_once(step_inputs, caplog):
    graphdef, tx, state, batches = step_inputs
    counter = CompileCounter()
    step = make_train_step(graphdef, tx, counter)
    state = jax.tree.map(jnp.copy, state)  # the step donates its input state
    key = jax.random.key(0)
    state, _ = step(state, batches[0], key)
    with jax.log_compiles(), caplog.at_level(logging.WARNING, logger="jax"):
        for batch in batches[1:] * 3:
            state, _ = step(state, batch, key)
        jax.block_until_ready(state)
    compiled = [r for r in caplog.records if "train_step" in r.getMessage()]
    assert not compiled, [r.getMessage() for r in compiled]
    assert counter.count == 1


@pytest.mark.slow  # three fits; the default run checks both through trained_run
def test_fit_compiles_the_step_once_and_is_deterministic(tiny_config, tiny_dataset):
    config = dataclasses.replace(tiny_config, epochs=2)
    a = fit(tiny_dataset, config, quiet=True).metrics
    b = fit(tiny_dataset, config, quiet=True).metrics
    assert a["compilations"] == 1  # one configuration, two epochs, three batches each
    assert [e["train_loss"] for e in a["epochs"]] == [e["train_loss"] for e in b["epochs"]]
    c = fit(tiny_dataset, dataclasses.replace(config, seed=1), quiet=True).metrics
    assert [e["train_loss"] for e in a["epochs"]] != [e["train_loss"] for e in c["epochs"]]
    assert a["cache_hit_rate"] == 0.0
    assert a["h2d_rows_per_batch"] == a["input_nodes_per_batch"] > 0
    # Bytes: the feature buffers (rows rounded up to a bucket) plus the seed ids.
    row_bytes = tiny_dataset.num_features * 4
    assert a["h2d_bytes_per_batch"] >= a["h2d_rows_per_batch"] * row_bytes


@pytest.mark.slow
def test_tiny_overfit(tiny_dataset):
    config = TrainConfig(
        sampler="ns",
        epochs=60,
        batch_size=16,
        fanouts=(10, 10),
        hidden=64,
        lr=0.01,
        weight_decay=0.0,
        dropout=0.0,
        feature_norm="none",
    )
    result = fit(tiny_dataset, config, quiet=True).metrics
    assert result["epochs"][-1]["train_accuracy"] >= 0.95
    assert result["epochs"][-1]["train_loss"] < 0.2 * result["epochs"][0]["train_loss"]


@pytest.mark.integration
def test_fit_runs_without_implicit_transfers(tiny_config, tiny_dataset):
    with jax.transfer_guard_host_to_device("disallow"):
        result = fit(tiny_dataset, dataclasses.replace(tiny_config, epochs=2), quiet=True).metrics
    assert result["compilations"] == 1


def test_auto_feature_norm_rows_normalises_only_sparse_bag_of_words(tiny_dataset):
    from gns_jax.factories import feature_norm

    config = TrainConfig()
    assert feature_norm(load_dataset("cora"), config) == "row"  # 1.3 % non-zero, 0/1
    assert feature_norm(load_dataset("tolokers"), config) == "none"  # dense
    assert feature_norm(tiny_dataset, config) == "none"  # Gaussian, negative values
    assert feature_norm(tiny_dataset, dataclasses.replace(config, feature_norm="row")) == "row"


@pytest.mark.slow
def test_calibrated_budget_grows_on_overflow_and_stays_reproducible(
    tiny_config, tiny_dataset, monkeypatch
):
    import gns_jax.sampling.budget as budget_module

    # Calibrate on one batch with no head-room, so that later batches overflow and must grow.
    monkeypatch.setattr(budget_module, "CALIBRATION_BATCHES", 1)
    monkeypatch.setattr(budget_module, "CALIBRATION_MARGIN", 0.6)
    config = dataclasses.replace(tiny_config, epochs=3, budget="calibrated")
    first = fit(tiny_dataset, config, quiet=True).metrics
    budget = first["budget"]
    assert budget["calibrated"] and budget["growths"] >= 1
    assert budget["input_slots"] <= budget["worst_case_input_slots"]
    # one step compilation per budget that reached the step (a growth before the first step
    # replaces the calibrated budget before it is ever compiled)
    assert 1 <= first["compilations"] <= 1 + budget["growths"]
    assert np.all(np.isfinite([e["train_loss"] for e in first["epochs"]]))
    again = fit(tiny_dataset, config, quiet=True).metrics
    assert [e["train_loss"] for e in first["epochs"]] == [e["train_loss"] for e in again["epochs"]]
    assert again["budget"] == budget


@pytest.mark.integration
def test_worst_case_budget_never_grows(tiny_config, tiny_dataset):
    result = fit(tiny_dataset, dataclasses.replace(tiny_config, budget="worst"), quiet=True).metrics
    assert not result["budget"]["calibrated"] and result["budget"]["growths"] == 0
    assert result["budget"]["input_slots"] == result["budget"]["worst_case_input_slots"]


@pytest.mark.parametrize("rate", [0.5, 0.3, 0.9])
def test_dropout_keeps_k_over_256_and_stays_unbiased(rate):
    from gns_jax.models import dropout

    n = 200_000
    x = jnp.full((n // 100, 100), 2.0)
    y = np.asarray(dropout(jax.random.key(1), x, rate))
    keep = round((1 - rate) * 256) / 256
    kept = y != 0
    # Binomial keep fraction within 4.5 standard errors; kept values scaled by 1/keep.
    assert abs(kept.mean() - keep) < 4.5 * np.sqrt(keep * (1 - keep) / n)
    np.testing.assert_allclose(y[kept], 2.0 / keep, rtol=1e-6)
    assert abs(y.mean() - 2.0) < 4.5 * 2.0 * np.sqrt((1 - keep) / keep / n)
    assert dropout(None, x, rate) is x and dropout(jax.random.key(1), x, 0.0) is x


@pytest.mark.parametrize("rate", [0.5, 0.25, 0.3])
def test_dropout_masks_of_rows_sharing_a_random_word_are_independent(rate):
    # Rows r and r + 1 read neighbouring bits of one word: P(both kept) must be keep^2.
    from gns_jax.models import dropout

    x = jnp.ones((64_000, 7))
    kept = np.asarray(dropout(jax.random.key(2), x, rate)) != 0
    keep = round((1 - rate) * 256) / 256
    both = kept[0::2] & kept[1::2]
    n = both.size
    assert abs(both.mean() - keep**2) < 4.5 * np.sqrt(keep**2 * (1 - keep**2) / n)
    # Any shape works, and the mask is a function of the key alone.
    for shape in [(1001,), (3, 5, 7)]:
        y = dropout(jax.random.key(3), jnp.ones(shape), rate)
        assert y.shape == shape
        np.testing.assert_array_equal(y, dropout(jax.random.key(3), jnp.ones(shape), rate))


@pytest.mark.integration
def test_fit_trains_with_the_optimizer_it_is_given(tiny_config, tiny_dataset, tmp_path):
    import optax

    from gns_jax.train import load_model

    config = dataclasses.replace(tiny_config, epochs=2, checkpoint_dir=str(tmp_path / "ckpt"))
    sgd = optax.sgd(0.05)
    result = fit(tiny_dataset, config, optimizer=sgd, quiet=True)
    # plain SGD keeps no moments: its state is not the default Adam's (two per parameter)
    leaves = jax.tree.leaves(result.state.opt_state)
    assert not leaves or all(np.asarray(leaf).size <= 1 for leaf in leaves)
    model, _, _ = load_model(config.checkpoint_dir, tiny_dataset, optimizer=sgd)
    for a, b in zip(jax.tree.leaves(nnx.state(model)), jax.tree.leaves(nnx.state(result.model))):
        np.testing.assert_array_equal(a, b)
