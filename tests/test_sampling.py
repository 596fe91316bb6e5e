import jax
import jax.numpy as jnp
import jraph
import numpy as np
import pytest

from gns_jax.errors import ConfigError
from gns_jax.sampling import (
    Budget,
    NodeWiseSampler,
    block_from_graphs_tuple,
    block_to_graphs_tuple,
    sample_without_replacement,
)
from tests.helpers import edge_set, random_graph

FANOUTS = (4, 3, 2)  # output layer first; small so that many nodes have more neighbours
WIDTHS = FANOUTS[::-1]  # per block, input layer first


@pytest.fixture(scope="module")
def setup():
    graph = random_graph(0)
    sampler = NodeWiseSampler(graph, FANOUTS, batch_size=8)
    return graph, sampler, edge_set(graph)


def _batch(setup, seed):
    graph, sampler, _ = setup
    rng = np.random.default_rng(seed)
    # Always include an isolated node (the last 5 nodes have degree 0) and pad below 8 seeds.
    seeds = np.concatenate(
        [rng.choice(graph.num_nodes - 5, 5, replace=False), [graph.num_nodes - 1]]
    )
    batch = sampler.sample(jax.random.key(seed), jnp.asarray(sampler.pad_seeds(seeds)))
    return seeds, jax.device_get(batch)


@pytest.mark.parametrize("seed", range(8))
def test_blocks_satisfy_invariants(setup, seed):
    graph, sampler, edges = setup
    seeds, batch = _batch(setup, seed)
    budget = sampler.budget
    degree = graph.degrees()
    assert batch.overflow.tolist() == [0, 0, 0]
    np.testing.assert_array_equal(batch.seeds[: seeds.size], seeds)
    assert np.all(batch.seeds[seeds.size :] == -1)
    np.testing.assert_array_equal(batch.seed_mask, batch.seeds >= 0)
    for layer, block in enumerate(batch.blocks):
        max_src, max_dst = budget.max_src[layer], budget.max_dst[layer]
        assert block.src_nodes.shape == (max_src,)
        assert block.senders.shape == block.receivers.shape == (budget.max_edges[layer],)
        assert block.dst_mask.shape == (max_dst,)
        # Destinations are a prefix of the sources; they are the sources of the block above.
        upper = batch.blocks[layer + 1].src_nodes if layer + 1 < len(FANOUTS) else batch.seeds
        np.testing.assert_array_equal(block.src_nodes[:max_dst], upper)
        np.testing.assert_array_equal(block.dst_mask, upper >= 0)
        # Dummies are never real; real sources are distinct.
        assert block.src_nodes[-1] == -1 and block.src_nodes[max_dst - 1] == -1
        real_src = block.src_nodes[block.src_nodes >= 0]
        assert np.unique(real_src).size == real_src.size
        real = block.edge_weight != 0
        # Padding edges: weight 0, dummy -> dummy.
        assert np.all(block.senders[~real] == max_src - 1)
        assert np.all(block.receivers[~real] == max_dst - 1)
        u = block.src_nodes[block.senders[real]]
        v = block.src_nodes[block.receivers[real]]
        assert np.all(u >= 0) and np.all(v >= 0)
        assert all((a, b) in edges for a, b in zip(u.tolist(), v.tolist()))  # edges exist
        fanout = WIDTHS[layer]
        for slot in np.flatnonzero(block.dst_mask):
            mine = block.receivers[real] == slot
            nbrs = u[mine]
            assert np.unique(nbrs).size == nbrs.size  # no neighbour twice
            node = block.src_nodes[slot]
            take = min(fanout, degree[node])
            assert nbrs.size == take  # all neighbours when the degree is small, none if isolated
            np.testing.assert_allclose(block.edge_weight[real][mine], 1.0 / max(take, 1))
        assert not block.dst_mask[max_dst - 1]


def test_isolated_seed_gets_no_edges(setup):
    graph, _, _ = setup
    seeds, batch = _batch(setup, 0)
    top = batch.blocks[-1]
    slot = int(np.flatnonzero(top.src_nodes == graph.num_nodes - 1)[0])
    assert not np.any((top.receivers == slot) & (top.edge_weight != 0))


def test_same_key_same_batch_and_keys_differ(setup):
    _, a = _batch(setup, 3)
    _, b = _batch(setup, 3)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y)
    _, c = _batch(setup, 4)
    assert not np.array_equal(a.blocks[0].src_nodes, c.blocks[0].src_nodes)


def test_floyd_sampling_is_uniform_without_replacement():
    # Rows of degree 7 with k=3: each position is included with probability 3/7. The inclusion
    # count of a position over R rows is Binomial(R, 3/7); allow 4 standard errors.
    rows, k, d = 20_000, 3, 7
    pos = np.asarray(sample_without_replacement(jax.random.key(1), jnp.full(rows, d), k))
    assert np.all(np.sort(pos, 1)[:, 1:] != np.sort(pos, 1)[:, :-1])  # distinct per row
    assert pos.min() >= 0 and pos.max() < d
    freq = np.bincount(pos.ravel(), minlength=d) / rows
    stderr = np.sqrt((k / d) * (1 - k / d) / rows)
    assert np.all(np.abs(freq - k / d) < 4 * stderr), freq
    # Pairs are uniform too: each of the C(7, 3) = 35 subsets has probability 1/35.
    codes = np.sort(pos, 1) @ np.array([49, 7, 1])
    counts = np.unique(codes, return_counts=True)[1]
    assert counts.size == 35
    p = 1 / 35
    assert np.all(np.abs(counts / rows - p) < 4 * np.sqrt(p * (1 - p) / rows))
    # Short rows take everything, in order.
    short = np.asarray(sample_without_replacement(jax.random.key(2), jnp.array([0, 2, 3]), 3))
    np.testing.assert_array_equal(short[2], [0, 1, 2])
    np.testing.assert_array_equal(short[1, :2], [0, 1])


def test_floyd_sampling_is_uniform_for_large_degrees():
    # d = 300,007, k = 5: every position in [0, d), distinct per row, and the 50 equal bins of
    # [0, d) each hold 1/50 of the draws (binomial, 4.5 standard errors).
    rows, k, d = 40_000, 5, 300_007
    pos = np.asarray(sample_without_replacement(jax.random.key(3), jnp.full(rows, d), k))
    assert pos.min() >= 0 and pos.max() < d
    assert np.all(np.sort(pos, 1)[:, 1:] != np.sort(pos, 1)[:, :-1])
    freq = np.bincount(pos.ravel() * 50 // d, minlength=50) / pos.size
    assert np.all(np.abs(freq - 1 / 50) < 4.5 * np.sqrt((1 / 50) * (49 / 50) / pos.size)), freq


def test_worst_case_budget_cannot_overflow_on_a_dense_graph():
    graph = random_graph(1, num_nodes=30, num_edges=400, isolated=0)
    sampler = NodeWiseSampler(graph, (6, 6), batch_size=10)
    batch = sampler.sample(jax.random.key(0), jnp.asarray(sampler.pad_seeds(np.arange(10))))
    assert int(batch.overflow.sum()) == 0
    assert sampler.budget == Budget.worst_case(10, (6, 6), 30)


def test_small_budget_reports_overflow():
    graph = random_graph(1, num_nodes=30, num_edges=400, isolated=0)
    tight = Budget(max_seeds=11, max_src=(30, 15), max_edges=(15 * 6, 11 * 6))
    sampler = NodeWiseSampler(graph, (6, 6), batch_size=10, budget=tight)
    batch = sampler.sample(jax.random.key(0), jnp.asarray(sampler.pad_seeds(np.arange(10))))
    overflow = np.asarray(batch.overflow)
    assert overflow.sum() > 0
    # Nothing dropped is left pointing at a real slot: dropped edges became padding.
    for block, max_src in zip(batch.blocks, tight.max_src):
        real = np.asarray(block.edge_weight) != 0
        assert np.all(np.asarray(block.senders)[real] < max_src - 1)


def test_graphs_tuple_round_trip(setup):
    _, batch = _batch(setup, 1)
    for block in batch.blocks:
        graph = block_to_graphs_tuple(block)
        assert int(graph.n_node[0]) == block.src_nodes.shape[0]
        back = block_from_graphs_tuple(graph)
        for x, y in zip(block, back):
            np.testing.assert_array_equal(x, y)


def test_graphs_tuple_carries_features_and_weights_for_jraph(setup):
    _, batch = _batch(setup, 1)
    block = batch.blocks[0]
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(block.src_nodes.shape[0], 3)), jnp.float32)
    graph = block_to_graphs_tuple(block, x)
    np.testing.assert_array_equal(graph.nodes["x"], x)
    # jraph's aggregation over the tuple is the block's weighted aggregation
    messages = graph.nodes["x"][graph.senders] * graph.edges["weight"][:, None]
    agg = jraph.segment_sum(messages, graph.receivers, num_segments=block.num_dst)
    expected = np.zeros((block.num_dst, 3), np.float32)
    for s, r, w in zip(
        *(np.asarray(a) for a in (block.senders, block.receivers, block.edge_weight))
    ):
        expected[r] += w * np.asarray(x)[s]
    np.testing.assert_allclose(agg, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="one row per source slot"):
        block_to_graphs_tuple(block, x[:-1])


@pytest.mark.parametrize("fanouts, batch_size", [((0, 3), 8), ((2, -1), 8), ((2,), 0)])
def test_bad_sampler_options(setup, fanouts, batch_size):
    graph, _, _ = setup
    with pytest.raises(ConfigError, match="fanouts|batch_size"):
        NodeWiseSampler(graph, fanouts, batch_size)


def _real_edges(batch):
    """The set of (source id, destination id, weight) of every real edge, per block."""
    out = []
    for block in batch.blocks:
        real = block.edge_weight != 0
        dst = block.src_nodes[: block.dst_mask.shape[0]]
        out.append(
            sorted(
                zip(
                    block.src_nodes[block.senders[real]].tolist(),
                    dst[block.receivers[real]].tolist(),
                    np.round(block.edge_weight[real], 6).tolist(),
                )
            )
        )
    return out


def test_calibrated_budget_is_bounded_by_the_worst_case_and_covers_what_it_saw():
    worst = Budget.worst_case(1000, (5, 10, 15), 2_400_000)
    new, edges = (400_000, 120_000, 14_000), (680_000, 150_000, 14_900)
    cal = worst.calibrated(new, edges, margin=1.1)
    assert cal.max_seeds == worst.max_seeds
    for layer in range(3):
        assert cal.max_src[layer] <= worst.max_src[layer]
        assert cal.max_edges[layer] <= worst.max_edges[layer]
        assert cal.max_src[layer] - cal.max_dst[layer] - 1 >= min(
            1.1 * new[layer], worst.max_src[layer] - worst.max_dst[layer] - 1
        )
        width = worst.max_edges[layer] // worst.max_dst[layer]
        assert cal.max_edges[layer] >= min(1.1 * edges[layer], cal.max_dst[layer] * width)
    assert cal.max_src[0] < 0.7 * worst.max_src[0]  # the point: far fewer input slots


@pytest.mark.slow
def test_compacted_edges_are_the_same_edges_and_overflow_is_flagged(setup):
    graph, sampler, edges = setup
    seeds = sampler.pad_seeds(np.arange(6))
    key = jax.random.key(3)
    full = jax.device_get(sampler.sample(key, seeds))
    real = [int((b.edge_weight != 0).sum()) for b in full.blocks]
    new = [int((b.src_nodes >= 0).sum() - b.dst_mask.sum()) for b in full.blocks]
    # Keep the node slots of the worst case (same random draws), compact the edges exactly.
    tight = sampler.budget._replace(max_edges=tuple(real))
    same = jax.device_get(sampler.with_budget(tight).sample(key, seeds))
    assert not same.overflow.any()
    assert _real_edges(same) == _real_edges(full)
    assert [b.senders.shape[0] for b in same.blocks] == real
    short = sampler.budget._replace(max_edges=(real[0] - 1, *real[1:]))
    assert jax.device_get(sampler.with_budget(short).sample(key, seeds)).overflow[0] > 0
    # Too few node slots are flagged too.
    few = sampler.budget._replace(
        max_src=(full.blocks[0].dst_mask.shape[0] + 2, *sampler.budget.max_src[1:])
    )
    assert jax.device_get(sampler.with_budget(few).sample(key, seeds)).overflow[0] > 0
    # A calibrated budget samples valid blocks: every real edge is an edge of the graph.
    cal = sampler.budget.calibrated(new, real, margin=1.5)
    batch = jax.device_get(sampler.with_budget(cal).sample(jax.random.key(4), seeds))
    assert not batch.overflow.any()
    for layer in _real_edges(batch):
        assert all((u, v) in edges for u, v, _ in layer)


@pytest.mark.parametrize("max_new", [40, 7, 0])
def test_relabel_matches_a_numpy_reference(max_new):
    from gns_jax.sampling.nodewise import relabel

    rng = np.random.default_rng(max_new)
    num_nodes, max_dst, width = 50, 9, 6
    dst = np.full(max_dst, -1, np.int32)
    dst[:6] = rng.choice(num_nodes, 6, replace=False)
    nbrs = rng.integers(0, num_nodes, (max_dst, width)).astype(np.int32)
    mask = rng.random((max_dst, width)) < 0.7
    mask[dst < 0] = False
    src, senders, overflow = jax.device_get(
        jax.jit(relabel, static_argnums=(0, 4))(num_nodes, dst, nbrs, mask, max_new)
    )
    # Reference: new nodes in order of first occurrence (row-major), the first max_new kept.
    new = list(dict.fromkeys(u for u in nbrs[mask].tolist() if u not in set(dst.tolist())))
    kept = new[:max_new]
    np.testing.assert_array_equal(src[:max_dst], dst)
    np.testing.assert_array_equal(src[max_dst : max_dst + len(kept)], kept)
    assert np.all(src[max_dst + len(kept) :] == -1) and src.shape == (max_dst + max_new + 1,)
    assert int(overflow) == len(new) - len(kept)
    dummy = max_dst + max_new
    for (r, c), u in np.ndenumerate(nbrs):
        expected = src.tolist().index(u) if mask[r, c] and u in src.tolist() else dummy
        assert senders[r, c] == expected
