"""Exact inference (dense, sparse, streamed from a memory map) and sampled inference."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from gns_jax.config import TrainConfig
from gns_jax.data import load_dataset
from gns_jax.evaluate import Evaluator, FullGraph, full_inference, supports_exact
from gns_jax.features import FeatureLoader, HostFeatures, SparseFeatures
from gns_jax.instrument import TransferMeter
from gns_jax.models import GraphSAGE
from gns_jax.sampling import NodeWiseSampler
from tests.helpers import concat_sage


def _model(dims, seed=0):
    model = GraphSAGE(dims, rngs=nnx.Rngs(params=jax.random.key(seed)))
    return nnx.split(model)


@pytest.mark.slow
def test_full_neighbourhood_sampling_equals_exact_inference(tiny_dataset):
    """With fan-outs >= the max degree, a sampled forward pass is the exact computation."""
    ds = tiny_dataset
    max_degree = int(ds.graph.degrees().max())
    graphdef, state = _model((ds.num_features, 16, 8, ds.num_classes), seed=3)
    exact = full_inference(
        graphdef, state, jnp.asarray(ds.features), FullGraph.from_graph(ds.graph, chunk=512)
    )
    sampler = NodeWiseSampler(ds.graph, (max_degree,) * 3, batch_size=32)
    seeds = ds.test_idx[:32]
    batch = sampler.sample(jax.random.key(0), jnp.asarray(sampler.pad_seeds(seeds)))
    x, _, _ = FeatureLoader(ds.features, TransferMeter()).load(batch.input_nodes)
    logits = nnx.merge(graphdef, state)(x, batch.blocks)
    # float32 sums in different orders: rtol/atol for float32 against float32 on the CPU.
    np.testing.assert_allclose(logits[: seeds.size], exact[seeds], rtol=1e-4, atol=1e-5)


def test_sparse_feature_evaluation_equals_dense():
    ds = load_dataset("cora")
    graphdef, state = _model((ds.num_features, 16, 7))
    graph = FullGraph.from_graph(ds.graph)
    dense = full_inference(graphdef, state, jnp.asarray(ds.features), graph)
    sparse_x = jax.device_put(SparseFeatures.from_dense(ds.features, chunk=4096))
    sparse = full_inference(graphdef, state, sparse_x, graph)
    # float32 sums of the same products in different orders.
    np.testing.assert_allclose(sparse, dense, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(jax.jit(SparseFeatures.dense)(sparse_x), ds.features)


@pytest.mark.parametrize("hidden", [(16,), (16, 8)])
def test_streamed_memory_mapped_evaluation_equals_dense(tmp_path, hidden):
    ds = load_dataset("cora")
    graphdef, state = _model((ds.num_features, *hidden, 7))
    graph = FullGraph.from_graph(ds.graph)
    dense = full_inference(graphdef, state, jnp.asarray(ds.features), graph)
    np.save(tmp_path / "x.npy", ds.features)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    meter = TransferMeter()
    streamed = full_inference(graphdef, state, HostFeatures(mapped, chunk=1000), graph, meter=meter)
    np.testing.assert_allclose(streamed, dense, rtol=1e-5, atol=1e-6)
    assert meter.puts_by_tag["eval"] == 3  # 2708 rows in chunks of 1000, the last padded


@pytest.mark.slow
def test_sampled_evaluation_with_all_neighbours_equals_exact(tiny_dataset):
    """Sampled inference with fan-outs above the largest degree takes every neighbour: it must
    give exact inference's predictions (GraphSAGE offers both)."""
    ds = tiny_dataset
    graphdef, state = _model((ds.num_features, 16, ds.num_classes), seed=1)
    assert supports_exact(nnx.merge(graphdef, state))
    assert not supports_exact(concat_sage((4, 4, 2)))
    exact = Evaluator(ds, ds.features, mode="exact")
    fanouts = (int(ds.graph.degrees().max()),) * 2
    sampled = Evaluator(ds, ds.features, mode="sampled", fanouts=fanouts, batch_size=64)
    a, b = exact(graphdef, state), sampled(graphdef, state)
    assert b["train"] is None
    assert a["val"] == b["val"] and a["test"] == b["test"]
    pred = exact.predict(graphdef, state)
    nodes = sampled.nodes
    np.testing.assert_array_equal(sampled.predict(graphdef, state), pred[nodes])


@pytest.mark.slow
def test_sampled_evaluation_is_deterministic(tiny_dataset):
    ds = tiny_dataset
    graphdef, state = _model((ds.num_features, 16, ds.num_classes), seed=2)
    ev = Evaluator(ds, ds.features, mode="sampled", fanouts=(3, 3), batch_size=50)
    first = ev.predict(graphdef, state)
    np.testing.assert_array_equal(first, ev.predict(graphdef, state))
    assert first.shape == (ds.val_idx.size + ds.test_idx.size,)


def test_exact_evaluation_needs_a_model_that_offers_it(tiny_dataset):
    from gns_jax.errors import ConfigError
    from gns_jax.train import fit

    config = TrainConfig(sampler="ns", epochs=1, fanouts=(3, 3), eval_mode="exact")
    model = concat_sage((tiny_dataset.num_features, 8, tiny_dataset.num_classes))
    with pytest.raises(ConfigError, match="exact"):
        fit(tiny_dataset, dataclasses.replace(config, batch_size=64), model=model, quiet=True)
