"""The closed-form cache statistics (gns_jax.cachestats) against direct counts and Monte Carlo."""

import numpy as np
import pytest

from gns_jax import cachestats
from gns_jax.cache import cache_distribution, cache_size, draw_cache
from gns_jax.cachestats import cache_statistics, sample_layer_sets, sample_neighbours

DRAWS = 400  # Monte Carlo cache draws


def test_sample_neighbours_distinct_true_neighbours(tiny_dataset):
    graph = tiny_dataset.graph
    nodes = np.arange(graph.num_nodes)
    k = 5
    picked = sample_neighbours(graph, nodes, k, np.random.default_rng(0))
    degree = graph.degrees()
    assert picked.size == int(np.minimum(degree, k).sum())
    offsets = np.concatenate([[0], np.cumsum(np.minimum(degree, k))])
    for v in nodes:
        mine = picked[offsets[v] : offsets[v + 1]]
        assert np.unique(mine).size == mine.size, v  # without replacement
        assert np.isin(mine, graph.neighbors(v)).all(), v


def test_sample_neighbours_uniform(tiny_dataset):
    """Each neighbour of a high-degree node is picked with probability k / d: the counts over
    many draws are within 4 binomial standard errors."""
    graph = tiny_dataset.graph
    v = int(np.argmax(graph.degrees()))
    d, k, n = int(graph.degrees()[v]), 5, 4000
    rng = np.random.default_rng(1)
    counts = np.zeros(d)
    where = {int(u): i for i, u in enumerate(graph.neighbors(v))}
    for _ in range(n):
        for u in sample_neighbours(graph, np.array([v]), k, rng):
            counts[where[int(u)]] += 1
    q = k / d
    assert np.all(np.abs(counts / n - q) <= 4 * np.sqrt(q * (1 - q) / n))


def _monte_carlo(graph, p, m, sets):
    """The statistics of ``DRAWS`` real cache draws over the same sets: means and their
    standard errors."""
    out = []
    for i in range(DRAWS):
        snap = draw_cache(np.random.default_rng(100 + i), p, m)
        cached = np.zeros(graph.num_nodes, dtype=bool)
        cached[snap.node_ids[: snap.num_cached]] = True
        none = neighbours = rows = total = 0
        for nodes, ns_rows in zip(sets.layer1, sets.ns_inputs):
            counts = np.array([cached[graph.neighbors(v)].sum() for v in nodes])
            none += (counts == 0).sum()
            neighbours += counts.sum()
            rows += (~cached[nodes]).sum() / ns_rows
            total += nodes.size
        out.append([none / total, neighbours / total, rows / len(sets.layer1), snap.num_cached])
    out = np.array(out)
    return out.mean(0), out.std(0, ddof=1) / np.sqrt(DRAWS)


@pytest.fixture(scope="module")
def setting(tiny_dataset):
    graph = tiny_dataset.graph
    sets = sample_layer_sets(graph, tiny_dataset.train_idx, (4, 3), 40, np.random.default_rng(2), 3)
    p = cache_distribution(graph, "degree")
    m = cache_size(0.02, graph.num_nodes)
    return graph, p, m, sets, _monte_carlo(graph, p, m, sets)


NAMES = ("no_cached_share", "cached_neighbours", "rows_vs_ns", "cache_nodes")


def test_closed_form_matches_monte_carlo(setting):
    graph, p, m, sets, (mean, se) = setting
    stats = cache_statistics(graph, p, m, sets)
    for i, name in enumerate(NAMES):
        assert abs(stats[name] - mean[i]) <= 4 * se[i] + 1e-12, (name, stats[name], mean[i], se[i])


def test_closed_form_check_catches_a_wrong_draw_count(setting):
    """The comparison above fails when the closed form assumes half the draws: it has the power
    to catch a wrong inclusion probability."""
    graph, p, m, sets, (mean, se) = setting
    wrong = cache_statistics(graph, p, m // 2, sets)
    assert any(abs(wrong[n] - mean[i]) > 4 * se[i] for i, n in enumerate(NAMES))


def test_sampling_with_replacement_is_caught(tiny_dataset, monkeypatch):
    """With the offsets drawn with replacement the distinctness test fails."""

    def with_replacement(rng, degree, k):
        return (rng.random((degree.size, k)) * degree[:, None]).astype(np.int64)

    monkeypatch.setattr(cachestats, "_k_subsets", with_replacement)
    with pytest.raises(AssertionError):
        test_sample_neighbours_distinct_true_neighbours(tiny_dataset)


def test_a_biased_subset_is_caught(tiny_dataset, monkeypatch):
    """With the first k offsets always taken, the uniformity test fails."""
    monkeypatch.setattr(
        cachestats, "_k_subsets", lambda rng, degree, k: np.tile(np.arange(k), (degree.size, 1))
    )
    with pytest.raises(AssertionError):
        test_sample_neighbours_uniform(tiny_dataset)


def test_layer_sets_shapes(tiny_dataset):
    graph = tiny_dataset.graph
    one = sample_layer_sets(graph, tiny_dataset.train_idx, (5,), 10, np.random.default_rng(0), 2)
    assert [s.size for s in one.layer1] == [10, 10]  # one layer: the seeds are layer 1
    assert all(n >= 10 for n in one.ns_inputs)
    two = sample_layer_sets(graph, tiny_dataset.train_idx, (5, 3), 10, np.random.default_rng(0), 2)
    assert all(s.size > 10 for s in two.layer1)
