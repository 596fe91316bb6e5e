"""LADIES: the drawn nodes, the coefficients against a dense NumPy reference, the weighted
aggregation's expectation by exact enumeration, and one compilation per budget."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gns_jax.config import TrainConfig
from gns_jax.graph import from_edges
from gns_jax.loader import Loader
from gns_jax.sampling.ladies import LADIESSampler, ladies_layer
from gns_jax.sampling.nodewise import DeviceTopology
from tests.helpers import random_graph


def _dense_p(graph):
    """row_normalize(A + I), dense."""
    n = graph.num_nodes
    a = np.eye(n)
    s, r = graph.edges()
    a[r, s] = 1.0  # row v holds v's in-neighbours (the graph is symmetric)
    return a / a.sum(1, keepdims=True)


def _reference(graph, upper, after):
    """The official code's coefficients for destinations ``upper`` and sources ``after``."""
    lap = _dense_p(graph)
    rows = lap[upper]
    pi = (rows**2).sum(0)
    p = pi / pi.sum()
    adj = rows[:, after] / p[after]
    return adj / adj.sum(1, keepdims=True)


@pytest.mark.parametrize("seed", range(3))
def test_drawn_nodes_and_coefficients_match_the_dense_reference(seed):
    graph = random_graph(seed, num_nodes=40, num_edges=90, isolated=3)
    topology = DeviceTopology.from_graph(graph)
    upper = np.random.default_rng(seed).choice(37, 6, replace=False).astype(np.int32)
    dst = jnp.asarray(np.concatenate([upper, [-1]]))
    block, overflow, sizes = jax.device_get(
        jax.jit(lambda k: ladies_layer(k, topology, dst, 8, 7 + 8 + 1, 400))(jax.random.key(seed))
    )
    assert overflow == 0 and sizes[1] == sum(graph.degrees()[upper] + 1)
    src = block.src_nodes[block.src_nodes >= 0]
    np.testing.assert_array_equal(src[:6], upper)  # destinations first
    assert np.unique(src).size == src.size  # drawn nodes are distinct
    reach = set(upper.tolist())
    for u in upper:
        reach |= set(graph.neighbors(int(u)).tolist())
    assert set(src.tolist()) <= reach  # within the upper layer's neighbourhoods
    expected = _reference(graph, upper, src)
    got = np.zeros_like(expected)
    real = block.edge_weight != 0
    position = np.cumsum(block.src_nodes >= 0) - 1  # slot -> index into src
    np.add.at(got, (block.receivers[real], position[block.senders[real]]), block.edge_weight[real])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)


def test_the_weighted_aggregation_has_the_estimators_expectation():
    """E[sum_j w_uj x_j] by exact enumeration of every draw (successive sampling without
    replacement, which Gumbel top-s is) against the Monte Carlo mean of the sampler."""
    s = np.array([0, 0, 0, 1, 1, 2, 5])
    r = np.array([1, 2, 3, 3, 4, 5, 6])
    graph = from_edges(s, r, 7, symmetrize=True)
    upper = np.array([0, 1])
    x = np.array([1.0, -2.0, 3.0, 0.5, 4.0, -1.0, 2.0])
    lap = _dense_p(graph)
    pi = (lap[upper] ** 2).sum(0)
    p = pi / pi.sum()
    candidates = np.flatnonzero(pi > 0)
    expected = np.zeros(2)
    for a, b in itertools.permutations(candidates, 2):
        prob = p[a] * p[b] / (1 - p[a])
        after = np.union1d(upper, [a, b])
        expected += prob * (_reference(graph, upper, after) @ x[after])
    topology = DeviceTopology.from_graph(graph)
    dst = jnp.asarray([0, 1, -1], jnp.int32)

    @jax.jit
    def aggregate(key):
        block, _, _ = ladies_layer(key, topology, dst, 2, 3 + 2 + 1, 32)
        h = jnp.where(block.src_nodes >= 0, jnp.asarray(x)[jnp.maximum(block.src_nodes, 0)], 0)
        values = h[block.senders] * block.edge_weight
        return jax.ops.segment_sum(values, block.receivers, num_segments=3)[:2]

    draws = np.asarray(jax.vmap(aggregate)(jax.random.split(jax.random.key(0), 20_000)))
    z = (draws.mean(0) - expected) / (draws.std(0, ddof=1) / np.sqrt(draws.shape[0]))
    assert np.all(np.abs(z) < 4.0), (draws.mean(0), expected, z)


def test_no_recompilation_across_batches_and_the_budget_is_calibrated(tiny_dataset):
    sampler = LADIESSampler(tiny_dataset.graph, (32, 32), 16)
    loader = Loader(tiny_dataset, sampler, seed=0, prefetch=0, budget="calibrated")
    batches = list(loader.batches(0, 3))
    assert len(batches) == 3 * loader.num_batches
    assert sampler.compilations == 1 + 1 + loader.growths  # the worst case, then calibrated
    assert loader.budget.max_edges[0] < sampler.budget.max_edges[0]
    for batch in batches:
        for block in batch.inputs.blocks:
            real = np.asarray(block.edge_weight) != 0
            mask = np.asarray(block.dst_mask)
            sums = np.bincount(np.asarray(block.receivers)[real],
                               weights=np.asarray(block.edge_weight)[real],
                               minlength=mask.size)  # fmt: skip
            np.testing.assert_allclose(sums[mask], 1.0, rtol=1e-5)


@pytest.mark.slow
def test_the_command_trains_ladies(tiny_dataset):
    from gns_jax.train import fit

    config = TrainConfig(sampler="ladies", ladies_nodes=48, epochs=2, batch_size=16,
                         fanouts=(4, 3), hidden=16)  # fmt: skip
    metrics = fit(tiny_dataset, config, quiet=True).metrics
    assert metrics["sampler"] == "ladies" and metrics["cache_hit_rate"] == 0.0
    assert metrics["compilations"] >= 1 and 0 <= metrics["test_accuracy"] <= 1
