"""The native CPU kernels (gns_jax.native, native/sampling.cc) against the JAX versions they
replace on a CPU: the same arrays, element for element, so that every distribution test of the
samplers (tests/test_sampling.py, test_gns.py), which run the native kernels here, also holds
for the JAX versions an accelerator runs."""

from __future__ import annotations

import importlib.util
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gns_jax import native
from gns_jax.cache import build_device_cache, cache_distribution, draw_cache
from gns_jax.graph import from_edges
from gns_jax.sampling import GNSSampler, NodeWiseSampler
from gns_jax.sampling import nodewise as nw

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("gns_jax._native") is None,
    reason="gns_jax._native was not built (no C++17 compiler when gns-jax was installed)",
)


def graph_with_every_degree(n: int = 400, seed: int = 0):
    """Degrees from 0 (isolated nodes) to above 40, so both sides of every fan-out occur."""
    rng = np.random.default_rng(seed)
    hubs = rng.choice(n, 12, replace=False)
    src = np.concatenate([rng.integers(0, n - 20, 3 * n), np.repeat(hubs, 45)])
    dst = np.concatenate([rng.integers(0, n - 20, 3 * n), rng.integers(0, n - 20, 12 * 45)])
    return from_edges(src, dst, n)  # nodes n-20.. are isolated


@pytest.fixture(scope="module")
def setup():
    graph = graph_with_every_degree()
    topology = nw.DeviceTopology.from_graph(graph)
    rng = np.random.default_rng(1)
    dst = np.r_[rng.choice(graph.num_nodes, 150, replace=False), -np.ones(10, int)]
    return graph, topology, jnp.asarray(dst.astype(np.int32))


def test_the_kernels_are_built_and_used():
    assert native.available()


@pytest.mark.parametrize("fanout", [1, 3, 10, 40])
@pytest.mark.parametrize("seed", [0, 7])
def test_expand_layer_equals_the_jax_version(setup, fanout, seed):
    _, topology, dst = setup
    key = jax.random.key(seed)
    want = jax.jit(nw._expand_layer_jax, static_argnums=3)(topology, dst, key, fanout)
    got = jax.jit(nw.expand_layer, static_argnums=3)(key, topology, dst, fanout)
    for w, g in zip(want, got, strict=True):
        assert w.dtype == g.dtype and w.shape == g.shape
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    assert np.asarray(want[1]).any() and not np.asarray(want[1]).all()  # both kinds of rows


def test_expand_layer_words_are_jax_random_bits(setup):
    # Another key gives other neighbours: the kernel reads the key, so the comparison above
    # would catch words drawn from a wrong stream.
    _, topology, dst = setup
    a = nw.expand_layer(jax.random.key(0), topology, dst, 3)[0]
    b = nw.expand_layer(jax.random.key(1), topology, dst, 3)[0]
    assert not np.array_equal(np.asarray(a), np.asarray(b))


def test_a_raw_uint32_key_gives_the_same_draws(setup):
    _, topology, dst = setup
    typed = nw.expand_layer(jax.random.key(5), topology, dst, 10)[0]
    raw = nw.expand_layer(jax.random.PRNGKey(5), topology, dst, 10)[0]
    np.testing.assert_array_equal(np.asarray(raw), np.asarray(typed))


@pytest.mark.parametrize("max_new", [2000, 60, 0])
def test_relabel_equals_the_jax_version(setup, max_new):
    graph, topology, dst = setup
    nbrs, mask, _ = nw.expand_layer(jax.random.key(3), topology, dst, 10)
    want = nw._relabel_jax(graph.num_nodes, dst, nbrs, mask, max_new)
    got = native.relabel(graph.num_nodes, dst, nbrs, mask, max_new)
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    if max_new < 2000:
        assert int(got[2]) > 0  # overflow counted the same


def test_relabel_leaves_no_state_between_calls(setup):
    # The per-thread scratch array must be back to "unseen" after a call: a second call on
    # other destinations equals the JAX version too.
    graph, topology, dst = setup
    for seed in range(3):
        other = jnp.roll(dst, 17 * seed + 5)
        nbrs, mask, _ = nw.expand_layer(jax.random.key(seed), topology, other, 5)
        want = nw._relabel_jax(graph.num_nodes, other, nbrs, mask, 40)
        got = native.relabel(graph.num_nodes, other, nbrs, mask, 40)
        np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))


def test_kernels_agree_when_called_from_several_threads(setup):
    graph, topology, dst = setup
    fn = jax.jit(
        lambda k: nw.make_block(graph.num_nodes, dst, *nw.expand_layer(k, topology, dst, 10), 900)
    )
    want = [np.asarray(fn(jax.random.key(i))[0].senders) for i in range(6)]
    got = [None] * 6

    def run(i):
        got[i] = np.asarray(fn(jax.random.key(i))[0].senders)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("kind", ["ns", "gns"])
def test_whole_batches_equal_with_the_kernels_off(setup, monkeypatch, kind):
    graph, _, _ = setup
    seeds = np.arange(0, 380, 3)

    def batch():
        if kind == "ns":
            sampler = NodeWiseSampler(graph, (8, 4), batch_size=seeds.size)
            return sampler.sample(jax.random.key(2), sampler.pad_seeds(seeds))
        snap = draw_cache(np.random.default_rng(9), cache_distribution(graph), 40)
        cache, _ = build_device_cache(graph, np.zeros((graph.num_nodes, 1), np.float32), snap)
        sampler = GNSSampler(
            graph,
            (8, 4),
            seeds.size,
            40,
            input_fanout=(2, 6),
            weights="hajek-fallback",
            cache_first_upper=True,
        )
        return sampler.sample(jax.random.key(2), sampler.pad_seeds(seeds), cache)

    with_kernels = jax.tree.leaves(batch())
    monkeypatch.setenv("GNS_JAX_NATIVE", "0")
    assert not native.available()
    without = jax.tree.leaves(batch())
    assert len(with_kernels) == len(without)
    for a, b in zip(with_kernels, without, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("max_edges", [None, 10_000, 700, 50])
@pytest.mark.parametrize("max_new", [2000, 60])
def test_make_block_equals_the_jax_version(setup, max_edges, max_new):
    graph, topology, dst = setup
    nbrs, mask, weight = nw.expand_layer(jax.random.key(4), topology, dst, 10)
    max_src = dst.shape[0] + max_new + 1
    want = nw._make_block_jax(graph.num_nodes, dst, nbrs, mask, weight, max_src, max_edges)
    got = nw.make_block(graph.num_nodes, dst, nbrs, mask, weight, max_src, max_edges)
    for w, g in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=True):
        assert w.dtype == g.dtype and w.shape == g.shape
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    if max_edges is not None and max_edges < 1000 or max_new < 100:
        assert int(got[1]) > 0  # the overflow, counted the same
