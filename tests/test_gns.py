import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gns_jax.cache import (
    build_device_cache,
    cache_distribution,
    cache_size,
    draw_cache,
    inclusion_probability,
    nonempty_probability,
    row_chunks,
)
from gns_jax.data import load_dataset
from gns_jax.errors import ConfigError
from gns_jax.graph import from_edges
from gns_jax.sampling.gns import GNSSampler, cache_first_layer, input_weights
from gns_jax.sampling.nodewise import DeviceTopology
from gns_jax.train import TrainConfig, fit
from tests.helpers import edge_set, random_graph


def test_inclusion_frequencies_match_pi():
    graph = random_graph(0)
    p = cache_distribution(graph, "degree")
    m, draws = 12, 4000
    rng = np.random.default_rng(0)
    counts = np.zeros(graph.num_nodes)
    for _ in range(draws):
        snap = draw_cache(rng, p, m)
        counts[snap.node_ids[: snap.num_cached]] += 1
        assert np.all(snap.node_ids[snap.num_cached :] == -1)
    pi = inclusion_probability(p, m)
    stderr = np.sqrt(pi * (1 - pi) / draws)
    # Per-node binomial frequencies; 4.5 standard errors over 60 nodes (two-sided, Bonferroni).
    assert np.all(np.abs(counts / draws - pi) <= 4.5 * stderr + 1e-12)
    assert np.all(counts[graph.degrees() == 0] == 0)  # degree-proportional: isolated never cached


@pytest.mark.parametrize("kind", ["degree", "uniform", "random-walk"])
def test_distributions_are_normalised(kind):
    graph = random_graph(1)
    p = cache_distribution(graph, kind, train_idx=np.arange(10))
    assert p.shape == (graph.num_nodes,) and np.isclose(p.sum(), 1.0) and p.min() >= 0
    if kind == "degree":
        np.testing.assert_allclose(p, graph.degrees() / graph.degrees().sum())


def test_bad_cache_options():
    with pytest.raises(ConfigError, match="cache_fraction"):
        cache_size(0.0, 100)
    with pytest.raises(ConfigError, match="cache_fraction"):
        cache_size(1.5, 100)
    with pytest.raises(ConfigError, match="cache_dist"):
        cache_distribution(random_graph(0), "zipf")
    for bad in (
        dict(cache_refresh=0),
        dict(cache_dist="zipf"),
        dict(input_fanout=(5, 2)),
        dict(cache_fraction=-0.1),
    ):
        with pytest.raises(ConfigError):
            dataclasses.replace(TrainConfig(), **bad).validate()
    with pytest.raises(ConfigError, match="input_fanout"):
        GNSSampler(random_graph(0), (3, 3), 8, 10, input_fanout=(4, 2))


@pytest.mark.parametrize("edge_chunk", [None, 7])
def test_cached_adjacency_equals_brute_force_intersection(edge_chunk, monkeypatch):
    graph = random_graph(2)
    if edge_chunk:  # the host passes over the edges in many chunks, as on a huge graph
        pi = inclusion_probability(cache_distribution(graph), 15)
        whole = nonempty_probability(graph, pi, 15)
        monkeypatch.setattr("gns_jax.cache.EDGE_CHUNK", edge_chunk)
        assert len(list(row_chunks(graph))) > 10
        np.testing.assert_array_equal(nonempty_probability(graph, pi, 15), whole)
    snap = draw_cache(np.random.default_rng(3), cache_distribution(graph), 15)
    cache, _ = build_device_cache(graph, np.zeros((graph.num_nodes, 2), np.float32), snap)
    cached = set(snap.node_ids[: snap.num_cached].tolist())
    ci, cx = np.asarray(cache.cached_indptr), np.asarray(cache.cached_indices)
    oi, ox = np.asarray(cache.other_indptr), np.asarray(cache.other_indices)
    for v in range(graph.num_nodes):
        nbrs = set(graph.neighbors(v).tolist())
        assert set(cx[ci[v] : ci[v + 1]].tolist()) == nbrs & cached
        assert set(ox[oi[v] : oi[v + 1]].tolist()) == nbrs - cached
    slot_of = np.asarray(cache.slot_of)
    for slot, u in enumerate(snap.node_ids[: snap.num_cached]):
        assert slot_of[u] == slot
    assert np.all(slot_of[np.setdiff1d(np.arange(graph.num_nodes), list(cached))] == 15)


@pytest.mark.parametrize("cache_first", [False, True])
@pytest.mark.parametrize("seed", [0, *(pytest.param(s, marks=pytest.mark.slow) for s in (1, 2, 3))])
def test_gns_blocks_satisfy_invariants(seed, cache_first):
    graph = random_graph(seed)
    edges = edge_set(graph)
    degree = graph.degrees()
    m = 12
    snap = draw_cache(np.random.default_rng(seed), cache_distribution(graph), m)
    cache, _ = build_device_cache(graph, np.zeros((graph.num_nodes, 1), np.float32), snap)
    is_cached = np.zeros(graph.num_nodes, bool)
    is_cached[snap.node_ids[: snap.num_cached]] = True
    k_in = 3
    sampler = GNSSampler(
        graph, (4, 3, 2), 8, m, input_fanout=(0, k_in), cache_first_upper=cache_first, weights="ht"
    )
    seeds = np.random.default_rng(seed).choice(graph.num_nodes, 6, replace=False)
    batch = jax.device_get(sampler.sample(jax.random.key(seed), sampler.pad_seeds(seeds), cache))
    assert not batch.overflow.any()
    pi = inclusion_probability(cache_distribution(graph), m)
    for layer, block in enumerate(batch.blocks):
        max_src, max_dst = sampler.budget.max_src[layer], sampler.budget.max_dst[layer]
        assert block.src_nodes.shape == (max_src,)
        upper = batch.blocks[layer + 1].src_nodes if layer < 2 else batch.seeds
        np.testing.assert_array_equal(block.src_nodes[:max_dst], upper)
        real = block.edge_weight != 0
        assert np.all(block.senders[~real] == max_src - 1)
        assert np.all(block.receivers[~real] == max_dst - 1)
        u = block.src_nodes[block.senders[real]]
        v = block.src_nodes[block.receivers[real]]
        assert all((a, b) in edges for a, b in zip(u.tolist(), v.tolist()))
        for slot in np.flatnonzero(block.dst_mask):
            node = block.src_nodes[slot]
            mine = block.receivers[real] == slot
            picks = u[mine]
            assert np.unique(picks).size == picks.size
            n_cached = int(is_cached[graph.neighbors(node)].sum())
            if layer == 0:  # only cached neighbours, at most K, HT weights
                assert is_cached[picks].all()
                assert picks.size == min(k_in, n_cached)
                q = min(1.0, k_in / max(n_cached, 1))
                expected = 1.0 / (degree[node] * pi[picks] * q)
                np.testing.assert_allclose(block.edge_weight[real][mine], expected, rtol=1e-5)
            else:
                fanout = (3, 4)[layer - 1]
                assert picks.size == min(fanout, degree[node])
                if cache_first:  # as many cached picks as possible
                    assert int(is_cached[picks].sum()) == min(fanout, n_cached)
    # The input layer adds only cached nodes beyond the layer-1 nodes.
    b0 = batch.blocks[0]
    new = b0.src_nodes[sampler.budget.max_dst[0] :]
    assert is_cached[new[new >= 0]].all()


def _input_aggregates(graph, x, targets, probs, m, weights, draws, seed, k=10):
    """Monte Carlo input-layer aggregates ``sum_u w_uv x_u`` over cache draws and samples."""
    topology = DeviceTopology.from_graph(graph)
    x_dev = jnp.asarray(x)
    dst = jnp.asarray(targets, dtype=jnp.int32)

    @jax.jit
    def aggregate(key, cache):
        nbrs, mask, num_cached, _ = cache_first_layer(key, cache, dst, 0, k)
        w = input_weights(weights, cache, topology, dst, nbrs, mask, num_cached, k)
        return jnp.sum(w * x_dev[jnp.where(mask, nbrs, 0)], axis=1)

    rng = np.random.default_rng(seed)
    feats = np.zeros((graph.num_nodes, 1), np.float32)
    out = []
    for t in range(draws):
        cache, _ = build_device_cache(graph, feats, draw_cache(rng, probs, m))
        out.append(aggregate(jax.random.key(t), cache))
    return np.asarray(jnp.stack(out), dtype=np.float64)


@pytest.fixture(scope="module")
def cora_setup():
    graph = load_dataset("cora").graph
    rng = np.random.default_rng(0)
    x = rng.normal(1.0, 1.0, graph.num_nodes).astype(np.float32)
    degree = graph.degrees()
    probs = cache_distribution(graph, "degree")
    m = cache_size(0.2, graph.num_nodes)
    pi = inclusion_probability(probs, m)
    # The z-test needs both outcomes (cached, not cached) of every neighbour to occur often in
    # 1500 draws, or the sample standard error is not a standard error (a neighbour cached in
    # every draw gives x/pi with an estimated error of 0). Keep nodes whose neighbours all have
    # 1500 * min(pi, 1 - pi) >= 10; that drops only neighbours of the largest hubs.
    ok = np.array(
        [
            np.all(np.minimum(pi, 1 - pi)[graph.neighbors(v)] * 1500 >= 10)
            for v in range(graph.num_nodes)
        ]
    )
    targets = np.flatnonzero((degree > 0) & ok)[::8][:300]  # low- and high-degree nodes alike
    senders, receivers = graph.edges()
    exact = np.bincount(receivers, weights=x[senders], minlength=graph.num_nodes) / np.maximum(
        degree, 1
    )
    return graph, x, targets, exact[targets], probs, m


def test_ht_input_aggregation_is_unbiased_on_cora(cora_setup):
    graph, x, targets, exact, probs, m = cora_setup
    draws = _input_aggregates(graph, x, targets, probs, m, "ht", draws=1500, seed=1)
    mean, stderr = draws.mean(0), draws.std(0, ddof=1) / np.sqrt(draws.shape[0])
    z = (mean - exact) / np.maximum(stderr, 1e-12)
    # 300 nodes, two-sided: 4.5 standard errors keep the family-wise false alarm below 0.2 %.
    assert np.all(np.abs(z) < 4.5), np.sort(np.abs(z))[-5:]


def test_minimum_bug_weights_are_detectably_biased_on_cora(cora_setup):
    graph, x, targets, exact, probs, m = cora_setup
    draws = _input_aggregates(graph, x, targets, probs, m, "minimum", draws=1500, seed=1)
    mean, stderr = draws.mean(0), draws.std(0, ddof=1) / np.sqrt(draws.shape[0])
    z = (mean - exact) / np.maximum(stderr, 1e-12)
    # The same check must fail: the bug scales each aggregate by min(|N_C|,K)/max(|N_C|,K) < 1.
    assert np.mean(np.abs(z) > 4.5) > 0.2
    assert np.mean(mean - exact) < 0


@pytest.mark.slow
def test_gns_trains_without_recompiling_across_cache_refreshes(tiny_dataset):
    config = TrainConfig(
        sampler="gns", epochs=4, batch_size=16, fanouts=(4, 3), hidden=16, cache_fraction=0.1
    )
    result = fit(tiny_dataset, config, quiet=True).metrics
    assert result["cache_refreshes"] == 4
    assert result["compilations"] == 1
    assert 0 < result["cache_hit_rate"] < 1
    assert result["h2d_rows_per_batch"] < result["input_nodes_per_batch"]
    same = fit(tiny_dataset, config, quiet=True).metrics
    assert [e["train_loss"] for e in result["epochs"]] == [e["train_loss"] for e in same["epochs"]]


def test_heuristic_weights_scale_the_mean_between_1_and_5():
    graph = random_graph(5, num_nodes=80, num_edges=400, isolated=0)
    m = 20
    snap = draw_cache(np.random.default_rng(0), cache_distribution(graph), m)
    cache, _ = build_device_cache(graph, np.zeros((graph.num_nodes, 1), np.float32), snap)
    sampler = GNSSampler(graph, (3, 2), 8, m, input_fanout=(0, 4), weights="heuristic")
    batch = sampler.sample(jax.random.key(0), sampler.pad_seeds(np.arange(8)), cache)
    block = jax.device_get(batch.blocks[0])
    real = block.edge_weight != 0
    take = np.bincount(block.receivers[real], minlength=block.dst_mask.shape[0])
    scaled = block.edge_weight[real] * take[block.receivers[real]]
    assert real.any() and np.all(scaled >= 1 - 1e-6) and np.all(scaled <= 5 + 1e-6)


def test_non_cached_adjacency_is_built_only_when_a_layer_tops_up():
    graph = random_graph(3)
    m = 12
    snap = draw_cache(np.random.default_rng(0), cache_distribution(graph), m)
    feats = np.zeros((graph.num_nodes, 1), np.float32)
    plain = GNSSampler(graph, (3, 2), 8, m)
    topped = GNSSampler(graph, (3, 2), 8, m, cache_first_upper=True)
    assert not plain.needs_other and topped.needs_other
    full, _ = build_device_cache(graph, feats, snap)
    lean, _ = build_device_cache(graph, feats, snap, with_other=False)
    assert lean.other_indices.shape == (1,)
    seeds = plain.pad_seeds(np.arange(8))
    a = jax.device_get(plain.sample(jax.random.key(1), seeds, full))
    b = jax.device_get(plain.sample(jax.random.key(1), seeds, lean))
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y)


def _star_with_cache(num_leaves: int, cached_leaves: list[int], m: int):
    """Node 0 with ``num_leaves`` neighbours; a cache holding exactly ``cached_leaves``."""
    from gns_jax.cache import snapshot_from_ids

    graph = from_edges(np.zeros(num_leaves, int), np.arange(1, num_leaves + 1), num_leaves + 1)
    p = cache_distribution(graph, "degree")
    snap = snapshot_from_ids(np.asarray(cached_leaves), p, m)
    cache, _ = build_device_cache(graph, np.zeros((graph.num_nodes, 1), np.float32), snap)
    return graph, cache


def _chi_square(counts: np.ndarray) -> float:
    expected = counts.sum() / counts.size
    return float(((counts - expected) ** 2 / expected).sum())


# chi-square critical values at 1e-3 for 39 and 19 degrees of freedom
CHI2_39, CHI2_19 = 72.05, 43.82


def test_cache_first_top_up_is_uniform_over_the_non_cached_neighbours():
    """Degree 44, 4 cached, (K, K) = (5, 5): the top-up takes 1 of the 40 non-cached
    neighbours, each with probability 1/40. Taking the first column of a Floyd sample (the
    defect this catches) never picks some of them."""
    graph, cache = _star_with_cache(44, [1, 2, 3, 4], m=8)
    dst = jnp.zeros(5000, jnp.int32)
    counts = np.zeros(graph.num_nodes)
    first = jax.jit(lambda key: cache_first_layer(key, cache, dst, 5, 5))
    for t in range(4):
        nbrs, mask, _, from_cache = jax.device_get(first(jax.random.key(t)))
        assert np.all(mask.sum(1) == 5) and np.all(from_cache.sum(1) == 4)
        np.add.at(counts, nbrs[mask & ~from_cache], 1)
    topped = counts[5:]  # the 40 non-cached leaves
    assert topped.sum() == 20_000 and counts[1:5].sum() == 0
    assert _chi_square(topped) < CHI2_39, topped


def test_cached_picks_are_uniform_where_the_cap_binds_and_first_k_is_caught():
    """Degree 20, all cached, cap 5: every leaf is picked with probability 1/4. The defect of a
    sampler that takes the first K neighbours fails the same test."""
    from gns_jax.theory.mutations import mutated

    graph, cache = _star_with_cache(20, list(range(1, 21)), m=40)
    dst = jnp.zeros(4000, jnp.int32)

    def counts_of():
        first = jax.jit(lambda key: cache_first_layer(key, cache, dst, 0, 5))
        counts = np.zeros(graph.num_nodes)
        for t in range(3):
            nbrs, mask, num_cached, _ = jax.device_get(first(jax.random.key(10 + t)))
            assert np.all(num_cached == 20) and np.all(mask.sum(1) == 5)
            np.add.at(counts, nbrs[mask], 1)
        return counts[1:]

    assert _chi_square(counts_of()) < CHI2_19
    with mutated("first-k"):
        assert _chi_square(counts_of()) > CHI2_19


def test_hajek_fallback_tops_up_only_empty_cached_neighbourhoods_and_their_mean_is_exact():
    """With a small cache many nodes have no cached neighbour: ``hajek-fallback`` gives exactly
    those ``min(F, d_v)`` uniform neighbours weighted ``1/k`` (their aggregate is the
    neighbourhood mean in expectation, given the cache), and leaves the others' cached picks and
    ``hajek`` weights alone."""
    graph = random_graph(7, num_nodes=80, num_edges=300, isolated=0)
    m, fallback, k = 6, 3, 5
    snap = draw_cache(np.random.default_rng(0), cache_distribution(graph), m)
    cache, _ = build_device_cache(graph, np.zeros((graph.num_nodes, 1), np.float32), snap)
    topology = DeviceTopology.from_graph(graph)
    degree = graph.degrees()
    dst_np = np.flatnonzero(degree > 0)
    dst = jnp.asarray(dst_np, jnp.int32)
    x = np.random.default_rng(1).normal(size=graph.num_nodes)
    senders, receivers = graph.edges()
    exact = (np.bincount(receivers, weights=x[senders], minlength=graph.num_nodes) / degree)[dst_np]

    @jax.jit
    def draw(key):
        nbrs, mask, num_cached, from_cache = cache_first_layer(key, cache, dst, fallback, k, True)
        w = input_weights(
            "hajek-fallback", cache, topology, dst, nbrs, mask, num_cached, k, from_cache=from_cache
        )
        agg = jnp.sum(w * jnp.asarray(x, jnp.float32)[jnp.where(mask, nbrs, 0)], axis=1)
        return mask, num_cached, from_cache, w, agg

    aggs = []
    for t in range(400):
        mask, num_cached, from_cache, w, agg = jax.device_get(draw(jax.random.key(t)))
        empty = num_cached == 0
        assert 0 < empty.sum() < empty.size  # both kinds of node are present
        np.testing.assert_array_equal(mask[~empty], from_cache[~empty])  # no top-up there
        assert not from_cache[empty].any()
        np.testing.assert_array_equal(
            mask[empty].sum(1), np.minimum(fallback, degree[dst_np][empty])
        )
        np.testing.assert_allclose(w.sum(1), 1.0, rtol=1e-5)  # hajek and 1/k both sum to 1
        aggs.append(agg)
    aggs = np.asarray(aggs, np.float64)[:, empty]  # the same cache in every draw
    mean, stderr = aggs.mean(0), aggs.std(0, ddof=1) / np.sqrt(aggs.shape[0])
    # Nodes of degree <= F take every neighbour (stderr 0); 4.5 SE over the rest, two-sided.
    assert np.all(np.abs(mean - exact[empty]) <= 4.5 * stderr + 1e-5), np.abs(mean - exact[empty])


def test_hajek_fallback_needs_an_input_minimum_and_builds_the_non_cached_adjacency():
    graph = random_graph(3)
    with pytest.raises(ConfigError, match="input_fanout"):
        GNSSampler(graph, (3, 2), 8, 12, input_fanout=(0, 4), weights="hajek-fallback")
    sampler = GNSSampler(graph, (3, 2), 8, 12, input_fanout=(2, 4), weights="hajek-fallback")
    assert sampler.needs_other
    snap = draw_cache(np.random.default_rng(0), cache_distribution(graph), 12)
    cache, _ = build_device_cache(graph, np.zeros((graph.num_nodes, 1), np.float32), snap)
    batch = jax.device_get(
        sampler.sample(jax.random.key(0), sampler.pad_seeds(np.arange(8)), cache)
    )
    block = batch.blocks[0]
    real = block.edge_weight != 0
    sums = np.bincount(block.receivers[real], weights=block.edge_weight[real])
    np.testing.assert_allclose(sums[sums > 0], 1.0, rtol=1e-5)
