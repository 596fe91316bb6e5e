"""A Flax NNX model with state besides its parameters (BatchNorm's statistics, an
``nnx.Dropout`` with its own ``nnx.Rngs`` stream) trains through fit: the state travels through
the jitted step, evaluation runs in evaluation mode, and checkpoints keep the stream's key."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from gns_jax.checkpoint import digest, storable, unstorable
from gns_jax.errors import ConfigError
from gns_jax.factories import make_model
from gns_jax.train import fit, init_state, load_model, make_train_step, model_of, predict


class NormedSAGE(nnx.Module):
    """Mean aggregation, then BatchNorm and an ``nnx.Dropout`` that draws from its own stream."""

    def __init__(self, dims, *, rngs: nnx.Rngs):
        pairs = list(zip(dims[:-1], dims[1:]))
        self.layers = nnx.List([nnx.Linear(2 * a, b, rngs=rngs) for a, b in pairs])
        self.norms = nnx.List([nnx.BatchNorm(b, rngs=rngs) for _, b in pairs[:-1]])
        self.drop = nnx.Dropout(0.5, rngs=rngs)

    def __call__(self, x, blocks, *, key=None):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            messages = h[block.senders] * block.edge_weight[:, None]
            agg = jax.ops.segment_sum(messages, block.receivers, num_segments=block.num_dst)
            h = layer(jnp.concatenate([h[: block.num_dst], agg], -1))
            if i < len(self.norms):
                real = jnp.broadcast_to(block.dst_mask[:, None], h.shape)  # not the padding
                h = self.drop(jax.nn.relu(self.norms[i](h, mask=real)))
        return h


def _model(dataset, seed=0):
    return NormedSAGE((dataset.num_features, 16, dataset.num_classes), rngs=nnx.Rngs(seed))


def _running_mean(model) -> np.ndarray:
    return np.asarray(model.norms[0].mean[...])


@pytest.mark.slow  # three fits, a load and five sampled predictions: 40 s
def test_batchnorm_and_rngs_dropout_train_through_fit(tiny_config, tiny_dataset, tmp_path):
    config = dataclasses.replace(
        tiny_config, epochs=2, eval_mode="sampled", checkpoint_dir=str(tmp_path / "ckpt")
    )
    result = fit(tiny_dataset, config, model=_model(tiny_dataset), quiet=True)
    metrics = result.metrics
    assert metrics["compilations"] == 1
    assert np.all(np.isfinite([e["train_loss"] for e in metrics["epochs"]]))
    assert metrics["test_accuracy"] > 0.4  # 4 classes: better than chance (0.25)
    # The running statistics were updated by the steps (they start at zero mean).
    assert np.abs(_running_mean(result.model)).max() > 1e-3
    # The stream advanced once per step: 2 epochs of 3 batches.
    assert int(result.model.drop.rngs.count[...]) == 6
    # The returned model is in evaluation mode: its predictions are deterministic.
    assert result.model.drop.deterministic and result.model.norms[0].use_running_average
    # load_model restores it into a template of its class, whatever the template's seeds.
    folder = config.checkpoint_dir
    with pytest.raises(
        ConfigError,
        match=r"NormedSAGE, not the command's gns_jax\.models\.GraphSAGE: pass a template",
    ):
        load_model(folder, tiny_dataset)
    with pytest.raises(ConfigError, match="the template is a gns_jax.models.GraphSAGE"):
        load_model(folder, tiny_dataset, model=make_model(tiny_dataset, config, jax.random.key(0)))
    loaded, _, _ = load_model(folder, tiny_dataset, model=_model(tiny_dataset, seed=5))
    saved, restored = nnx.state(result.model), nnx.state(loaded)
    for a, b in zip(jax.tree.leaves(storable(saved)), jax.tree.leaves(storable(restored))):
        np.testing.assert_array_equal(a, b)
    assert loaded.drop.deterministic  # evaluation mode
    # predict: evaluation mode and fixed keys whatever mode the object is in; nodes in order.
    loaded.train()
    first = predict(loaded, tiny_dataset, config=config)
    assert loaded.drop.deterministic is False  # the object is not changed
    np.testing.assert_array_equal(predict(loaded, tiny_dataset, config=config), first)
    proba = predict(loaded, tiny_dataset, proba=True, config=config)
    assert proba.shape == (tiny_dataset.num_nodes, tiny_dataset.num_classes)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(proba.argmax(1), first)
    some = tiny_dataset.test_idx[:50]  # sampled inference: batches of these nodes, same keys
    subset = predict(loaded, tiny_dataset, proba=True, nodes=some, config=config)
    assert subset.shape == (50, tiny_dataset.num_classes)
    again = predict(loaded, tiny_dataset, proba=True, nodes=some, config=config)
    np.testing.assert_array_equal(subset, again)
    # fit's sampled evaluation predicts the validation then the test nodes: the same batches
    val, test = tiny_dataset.val_idx, tiny_dataset.test_idx
    evaluated = predict(loaded, tiny_dataset, nodes=np.concatenate([val, test]), config=config)
    labels = tiny_dataset.labels[test]
    assert float(np.mean(evaluated[val.size :] == labels)) == metrics["test_accuracy"]
    # Resuming reads the stream's key back from the checkpoint.
    more = fit(
        tiny_dataset,
        dataclasses.replace(config, epochs=3, resume=True),
        model=_model(tiny_dataset),
        quiet=True,
    )
    assert more.metrics["resumed_from_step"] == 6
    assert [e["train_loss"] for e in more.metrics["epochs"][:2]] == [
        e["train_loss"] for e in metrics["epochs"]
    ]
    assert int(more.model.drop.rngs.count[...]) == 9


def test_the_step_carries_the_state_it_leaves(tiny_config, tiny_dataset):
    from gns_jax.factories import make_optimizer, make_sampler
    from gns_jax.loader import Loader

    tx = make_optimizer(tiny_config)
    graphdef, state = init_state(_model(tiny_dataset), tx)
    loader = Loader(
        tiny_dataset, make_sampler(tiny_dataset, tiny_config), seed=0, prefetch=0, budget="worst"
    )
    step = make_train_step(graphdef, tx)
    before = _running_mean(model_of(graphdef, state))
    for batch in loader.epoch(0):
        state, _ = step(state, batch.inputs, jax.random.key(0))
    model = model_of(graphdef, state)
    assert int(model.drop.rngs.count[...]) == loader.num_batches  # a step dropped the update
    assert not np.allclose(_running_mean(model), before)  # ... or the statistics


def test_checkpoint_arrays_hold_prng_keys_as_key_data():
    tree = {"key": jax.random.key(3), "x": jnp.arange(3.0)}
    stored = storable(tree)
    assert stored["key"].dtype == jnp.uint32
    back = unstorable(stored, tree)
    assert jax.dtypes.issubdtype(back["key"].dtype, jax.dtypes.prng_key)
    np.testing.assert_array_equal(
        jax.random.key_data(back["key"]), jax.random.key_data(tree["key"])
    )
    assert digest(tree) == digest(back)
    assert digest(tree) != digest({"key": jax.random.key(4), "x": jnp.arange(3.0)})
