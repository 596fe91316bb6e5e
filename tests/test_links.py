"""gns_jax.links (edge splits of link prediction) and the ranking metrics of gns_jax.metrics."""

import numpy as np
import pytest

from gns_jax import links, metrics
from gns_jax.errors import ConfigError, DatasetError, GraphError
from gns_jax.graph import from_edges
from tests.helpers import edge_set, random_graph

PAIRS = ("train_pos", "val_pos", "val_neg", "test_pos", "test_neg")
ARRAYS = (*PAIRS, "val_rank_neg", "test_rank_neg")


def _undirected(pairs) -> set[tuple[int, int]]:
    return {(min(u, v), max(u, v)) for u, v in np.asarray(pairs).tolist()}


@pytest.fixture(scope="module")
def graph():
    return random_graph(0, num_nodes=80, num_edges=400, isolated=5)


@pytest.fixture(scope="module")
def split(graph):
    return links.random_edge_split(graph, seed=3, rank_negatives=12)


def _save(path, split, **changes):
    arrays = {key: getattr(split, key) for key in PAIRS}
    arrays.update(changes)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


# ----------------------------------------------------------------------------------------------
# The random split


def test_the_parts_are_disjoint_and_cover_every_edge_once(graph, split):
    edges = _undirected(np.stack(graph.edges(), axis=1))
    parts = [split.train_pos, split.val_pos, split.test_pos]
    for pairs in parts:
        assert pairs.dtype == np.int32 and pairs.ndim == 2 and pairs.shape[1] == 2
        assert np.all(pairs[:, 0] < pairs[:, 1])  # each edge once, as (u, v) with u < v
    assert sum(p.shape[0] for p in parts) == len(edges)
    assert set().union(*(_undirected(p) for p in parts)) == edges
    train, val, test = (_undirected(p) for p in parts)
    assert not (train & val or train & test or val & test)


@pytest.mark.parametrize("fractions", [(0.85, 0.05, 0.10), (0.5, 0.3, 0.2), (0.7, 0.2, 0.1)])
def test_sizes_follow_the_fractions(graph, fractions):
    s = links.random_edge_split(graph, fractions, seed=1, rank_negatives=0)
    m = graph.num_edges // 2
    assert s.val_pos.shape[0] == round(fractions[1] * m)
    assert s.test_pos.shape[0] == round(fractions[2] * m)
    assert s.train_pos.shape[0] == m - s.val_pos.shape[0] - s.test_pos.shape[0]
    assert s.val_rank_neg.shape == (s.val_pos.shape[0], 0) and s.rank_negatives == 0


def test_the_negatives_are_distinct_non_edges(graph, split):
    edges = edge_set(graph)
    for pos, neg in ((split.val_pos, split.val_neg), (split.test_pos, split.test_neg)):
        assert neg.dtype == np.int32 and neg.shape == pos.shape
        assert np.all(neg[:, 0] != neg[:, 1])
        assert not {tuple(p) for p in neg.tolist()} & edges
        assert len(_undirected(neg)) == neg.shape[0]
    assert not _undirected(split.val_neg) & _undirected(split.test_neg)


def test_the_ranking_negatives_are_non_edges_of_each_head(graph, split):
    edges = edge_set(graph)
    for pos, tails in ((split.val_pos, split.val_rank_neg), (split.test_pos, split.test_rank_neg)):
        assert tails.dtype == np.int32 and tails.shape == (pos.shape[0], 12)
        for (u, _), row in zip(pos.tolist(), tails.tolist(), strict=True):
            assert all(t != u and (u, t) not in edges for t in row)
    assert split.rank_negatives == 12
    assert len(np.unique(split.test_rank_neg)) > 12  # drawn, not one constant row


def test_the_same_seed_gives_the_same_split_and_another_seed_another(graph, split):
    again = links.random_edge_split(graph, seed=3, rank_negatives=12)
    other = links.random_edge_split(graph, seed=4, rank_negatives=12)
    for key in ARRAYS:
        assert np.array_equal(getattr(split, key), getattr(again, key))
        assert not np.array_equal(getattr(split, key), getattr(other, key)), key


def test_the_split_follows_its_documented_stream(graph, split):
    """The edges, in ascending (u, v) order, go to validation and test in the order of
    ``default_rng([seed, EDGE_SPLIT, 0]).permutation(M)``."""
    edges = np.array(sorted(_undirected(np.stack(graph.edges(), axis=1))))
    perm = np.random.default_rng([3, links.EDGE_SPLIT, 0]).permutation(len(edges))
    n_val, n_test = split.val_pos.shape[0], split.test_pos.shape[0]
    assert np.array_equal(split.val_pos, edges[np.sort(perm[:n_val])])
    assert np.array_equal(split.test_pos, edges[np.sort(perm[n_val : n_val + n_test])])


def test_negatives_that_need_every_non_edge_get_each_once():
    rng = np.random.default_rng(0)
    n = 14
    u, v = np.triu_indices(n, 1)
    keep = rng.random(u.size) < 0.75
    g = from_edges(u[keep], v[keep], n)
    m, free = int(keep.sum()), int((~keep).sum())
    fractions = (1 - 2 * (free // 2) / m, (free // 2) / m, (free // 2) / m)
    s = links.random_edge_split(g, fractions, seed=0, rank_negatives=2)
    negatives = np.concatenate([s.val_neg, s.test_neg])
    assert negatives.shape[0] == 2 * (free // 2) >= free - 1
    assert len(_undirected(negatives)) == negatives.shape[0]  # distinct
    assert _undirected(negatives) <= set(zip(u[~keep].tolist(), v[~keep].tolist(), strict=True))


def test_the_stream_constant_is_the_one_streams_reserves():
    from gns_jax import streams

    assert getattr(streams, "EDGE_SPLIT", links.EDGE_SPLIT) == links.EDGE_SPLIT
    assert links.EDGE_SPLIT not in (0, 1, 2, 3, 4, 5, 6, 7, 8)  # the other streams' ids


def test_the_random_split_passes_its_own_validation(graph, split):
    assert split.validate(graph.num_nodes, graph, "split") is split


def test_the_training_graph_has_no_held_out_edge(graph, split):
    train = split.train_graph(graph).validate().check_undirected()
    stored = edge_set(train)
    assert stored == {e for u, v in split.train_pos.tolist() for e in ((u, v), (v, u))}
    for u, v in np.concatenate([split.val_pos, split.test_pos]).tolist():
        assert (u, v) not in stored and (v, u) not in stored


def test_the_test_graph_has_the_validation_edges_but_not_the_test_edges(graph, split):
    stored = edge_set(split.test_graph(graph).validate().check_undirected())
    for u, v in np.concatenate([split.train_pos, split.val_pos]).tolist():
        assert (u, v) in stored and (v, u) in stored
    for u, v in split.test_pos.tolist():
        assert (u, v) not in stored and (v, u) not in stored
    assert len(stored) == graph.num_edges - 2 * split.test_pos.shape[0]


def test_remove_edges_takes_both_directions_out_and_nothing_else(graph):
    pairs = np.stack(graph.edges(), axis=1)[::7][:10]
    pairs = np.concatenate([pairs, pairs[:3, ::-1], [[0, 0]]])  # repeats reversed, a non-edge
    out = links.remove_edges(graph, pairs).validate().check_undirected()
    gone = _undirected(pairs)
    assert edge_set(out) == {
        (u, v) for u, v in edge_set(graph) if (min(u, v), max(u, v)) not in gone
    }
    assert links.remove_edges(graph, np.zeros((0, 2), np.int32)) is graph
    with pytest.raises(GraphError, match="lie in"):
        links.remove_edges(graph, [[0, graph.num_nodes]])
    with pytest.raises(GraphError, match=r"\[M, 2\]"):
        links.remove_edges(graph, [0, 1])


def test_a_large_graph_keeps_every_invariant_across_chunks(monkeypatch):
    """Chunk boundaries (made small here) change nothing: the same split, valid graphs."""
    g = random_graph(5, num_nodes=3000, num_edges=20_000, isolated=10)
    whole = links.random_edge_split(g, seed=2, rank_negatives=5)
    monkeypatch.setattr(links, "_SMALL", 8)  # the sorted-query search path of _contains
    sorted_path = links.random_edge_split(g, seed=2, rank_negatives=5)
    for key in ARRAYS:
        assert np.array_equal(getattr(whole, key), getattr(sorted_path, key))
    monkeypatch.setattr(links, "_CHUNK", 997)
    chunked_train = whole.train_graph(g).check_undirected()
    monkeypatch.undo()
    train = whole.train_graph(g)
    assert np.array_equal(chunked_train.indptr, train.indptr)
    assert np.array_equal(chunked_train.indices, train.indices)
    assert train.num_edges == 2 * whole.train_pos.shape[0]
    whole.validate(g.num_nodes, g)


# ----------------------------------------------------------------------------------------------
# Bad options


@pytest.mark.parametrize(
    "fractions",
    [(0.9, 0.05, 0.1), (1.0, 0.0, 0.0), (1.1, -0.05, -0.05), (0.5, 0.5), (0.8, float("nan"), 0.2)],
)
def test_bad_fractions_are_a_config_error(graph, fractions):
    with pytest.raises(ConfigError) as caught:
        links.random_edge_split(graph, fractions)
    assert caught.value.param == "edge_split"


def test_parse_edge_split():
    assert links.parse_edge_split("0.85,0.05,0.10") == (0.85, 0.05, 0.10)
    assert links.parse_edge_split(" 0.8, 0.1 ,0.1 ") == (0.8, 0.1, 0.1)
    for bad in ("0.85,0.05", "a,b,c", "0.85;0.05;0.10", "0.9,0.1,0.1", "", "1,0,0"):
        with pytest.raises(ConfigError) as caught:
            links.parse_edge_split(bad)
        assert caught.value.param == "edge_split"


def test_fractions_that_leave_a_part_empty_are_refused():
    tiny = from_edges(np.array([0, 1, 2]), np.array([1, 2, 3]), 10)  # three edges
    with pytest.raises(ConfigError, match="validation") as caught:
        links.random_edge_split(tiny, (0.9, 0.05, 0.05))
    assert caught.value.param == "edge_split"


def test_a_graph_too_dense_for_the_negatives_is_refused():
    u, v = np.triu_indices(6, 1)
    complete = from_edges(u, v, 6)
    with pytest.raises(ConfigError, match="non-edges") as caught:
        links.random_edge_split(complete, (0.6, 0.2, 0.2), rank_negatives=0)
    assert caught.value.param == "edge_split"


def test_a_head_adjacent_to_every_node_has_no_ranking_negative():
    n = 30
    hub = np.zeros(n - 1, np.int64), np.arange(1, n)  # node 0 adjacent to all: head of its edges
    ring = np.arange(1, n), np.r_[np.arange(2, n), 1]
    g = from_edges(np.r_[hub[0], ring[0]], np.r_[hub[1], ring[1]], n)
    with pytest.raises(ConfigError, match="node 0") as caught:
        links.random_edge_split(g, (0.5, 0.25, 0.25), rank_negatives=3)
    assert caught.value.param == "rank_negatives"
    links.random_edge_split(g, (0.5, 0.25, 0.25), rank_negatives=0)  # fine without


@pytest.mark.parametrize(("param", "value"), [("seed", -1), ("rank_negatives", -2)])
def test_bad_seed_or_count_names_its_parameter(graph, param, value):
    with pytest.raises(ConfigError) as caught:
        links.random_edge_split(graph, **{param: value})
    assert caught.value.param == param


def test_a_graph_stored_one_way_is_refused():
    g = from_edges(np.array([0, 1]), np.array([1, 2]), 3, symmetrize=False)
    with pytest.raises(GraphError, match="undirected"):
        links.random_edge_split(g)


# ----------------------------------------------------------------------------------------------
# A user's split from an .npz


def test_a_saved_split_round_trips_with_its_ranking_negatives(tmp_path, graph, split):
    arrays = {key: getattr(split, key).astype(np.int64) for key in PAIRS}  # any integer type
    np.savez(tmp_path / "s.npz", **arrays)
    loaded = links.load_edge_split(tmp_path / "s.npz", graph, rank_negatives=12, seed=3)
    for key in ARRAYS:
        got = getattr(loaded, key)
        assert got.dtype == np.int32 and np.array_equal(got, getattr(split, key)), key
    other = links.load_edge_split(tmp_path / "s.npz", graph, rank_negatives=12, seed=4)
    assert not np.array_equal(other.test_rank_neg, split.test_rank_neg)


def test_a_file_may_bring_its_own_ranking_negatives(tmp_path, graph, split):
    path = _save(
        tmp_path / "r.npz",
        split,
        val_rank_neg=split.val_rank_neg[:, :4],
        test_rank_neg=split.test_rank_neg[:, :4],
    )
    loaded = links.load_edge_split(path, graph, rank_negatives=50)
    assert np.array_equal(loaded.test_rank_neg, split.test_rank_neg[:, :4])
    assert loaded.rank_negatives == 4


def test_user_pairs_keep_their_orientation(tmp_path, graph, split):
    path = _save(tmp_path / "o.npz", split, test_pos=split.test_pos[:, ::-1])
    loaded = links.load_edge_split(path, graph, rank_negatives=3)
    assert np.array_equal(loaded.test_pos, split.test_pos[:, ::-1])
    heads = loaded.test_pos[:, :1]
    assert np.all(loaded.test_rank_neg != heads)


def _bad_files(graph, split):
    """``(case, arrays or a writer, what the message must say)``."""
    n = graph.num_nodes
    edge = split.train_pos[0]
    non_edge = split.val_neg[0]
    with_row = lambda a, row: np.concatenate([a, np.asarray([row], a.dtype)])  # noqa: E731
    return {
        "missing key": (dict(test_neg=None), "missing arrays ['test_neg']"),
        "three columns": (dict(val_pos=np.zeros((4, 3), np.int32)), "shape [M, 2]"),
        "one-dimensional": (dict(val_neg=np.arange(6)), "shape [M, 2]"),
        "floats": (dict(test_pos=split.test_pos.astype(np.float64)), "integers"),
        "booleans": (dict(test_neg=split.test_neg > 0), "integers"),
        "objects": (dict(train_pos=np.array([[0, 1]], dtype=object)), "objects"),
        "id too large": (dict(val_neg=with_row(split.val_neg, [0, n])), f"outside [0, {n})"),
        "negative id": (dict(train_pos=with_row(split.train_pos, [-1, 2])), f"outside [0, {n})"),
        "val edge in train, reversed": (
            dict(train_pos=with_row(split.train_pos, split.val_pos[0][::-1])),
            "no validation or test edge may be in the training graph",
        ),
        "test edge in train": (
            dict(train_pos=with_row(split.train_pos, split.test_pos[1])),
            "no validation or test edge may be in the training graph",
        ),
        "test edge among val": (
            dict(val_pos=with_row(split.val_pos, split.test_pos[0][::-1])),
            "also in val_pos",
        ),
        "val_neg an edge": (dict(val_neg=with_row(split.val_neg, edge[::-1])), "is an edge"),
        "test_neg an edge": (dict(test_neg=with_row(split.test_neg, edge)), "is an edge"),
        "self-pair negative": (dict(test_neg=with_row(split.test_neg, [4, 4])), "with itself"),
        "positive not an edge": (
            dict(test_pos=with_row(split.test_pos, non_edge)),
            "is not an edge of the graph",
        ),
        "repeated positive": (
            dict(val_pos=with_row(split.val_pos, split.val_pos[0][::-1])),
            "twice",
        ),
        "empty test": (dict(test_pos=np.zeros((0, 2), np.int32)), "test_pos is empty"),
        "one ranking array": (dict(val_rank_neg=split.val_rank_neg), "give both or neither"),
        "ranking negative an edge": (
            dict(
                val_rank_neg=np.where(
                    np.arange(split.val_rank_neg.shape[1]) == 0,
                    split.val_pos[:, 1:],
                    split.val_rank_neg,
                ),
                test_rank_neg=split.test_rank_neg,
            ),
            "every ranking negative must be a non-edge",
        ),
        "ranking rows mismatch": (
            dict(val_rank_neg=split.val_rank_neg[1:], test_rank_neg=split.test_rank_neg),
            "must have shape",
        ),
        "not a zip": (b"this is not an npz file", "corrupt"),
        "truncated": ("truncate", "corrupt"),
        "no file": (None, "no such file"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing key",
        "three columns",
        "one-dimensional",
        "floats",
        "booleans",
        "objects",
        "id too large",
        "negative id",
        "val edge in train, reversed",
        "test edge in train",
        "test edge among val",
        "val_neg an edge",
        "test_neg an edge",
        "self-pair negative",
        "positive not an edge",
        "repeated positive",
        "empty test",
        "one ranking array",
        "ranking negative an edge",
        "ranking rows mismatch",
        "not a zip",
        "truncated",
        "no file",
    ],
)
def test_a_bad_file_is_one_error_naming_it(tmp_path, graph, split, case):
    content, expected = _bad_files(graph, split)[case]
    path = tmp_path / "bad split.npz"
    if isinstance(content, dict):
        _save(path, split, **content)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content == "truncate":
        _save(path, split)
        path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(DatasetError) as caught:
        links.load_edge_split(path, graph, rank_negatives=4)
    message = str(caught.value)
    assert str(path) in message and expected in message, message
    assert "\n" not in message


def test_a_head_adjacent_to_every_node_in_a_file_names_the_file(tmp_path):
    n = 12
    hub = np.zeros(n - 1, np.int64), np.arange(1, n)
    g = from_edges(*hub, n)
    arrays = dict(
        train_pos=np.stack(hub, 1)[:8],
        val_pos=np.stack(hub, 1)[8:9],
        val_neg=[[1, 2]],
        test_pos=np.stack(hub, 1)[9:],
        test_neg=[[3, 4]],
    )
    np.savez(tmp_path / "hub.npz", **arrays)
    with pytest.raises(DatasetError, match="adjacent to every other node") as caught:
        links.load_edge_split(tmp_path / "hub.npz", g, rank_negatives=2)
    assert str(tmp_path / "hub.npz") in str(caught.value)
    flipped = dict(arrays, val_pos=arrays["val_pos"][:, ::-1], test_pos=arrays["test_pos"][:, ::-1])
    np.savez(tmp_path / "hub.npz", **flipped)
    loaded = links.load_edge_split(tmp_path / "hub.npz", g, rank_negatives=2)
    assert np.all(loaded.test_rank_neg != 0)  # the other end is the head; 0 is its neighbour


def test_validate_checks_dtypes(graph, split):
    import dataclasses

    bad = dataclasses.replace(split, val_neg=split.val_neg.astype(np.int64))
    with pytest.raises(DatasetError, match="my split: val_neg must be an int32 array"):
        bad.validate(graph.num_nodes, graph, "my split")
    with pytest.raises(DatasetError, match="nodes"):
        split.validate(graph.num_nodes + 1, graph, "my split")
    split.validate(graph.num_nodes, None)


# ----------------------------------------------------------------------------------------------
# Hits@K and MRR


def _reference_ranks(pos, neg):
    """OGB's rule written out, one positive at a time."""
    ranks = []
    for p, row in zip(pos.tolist(), neg.tolist(), strict=True):
        above = sum(1 for x in row if x > p)
        tied = sum(1 for x in row if x == p)
        ranks.append(1 + above + tied / 2)
    return ranks


@pytest.mark.parametrize("seed", range(5))
def test_hits_and_mrr_match_a_reference_with_ties(seed):
    rng = np.random.default_rng(seed)
    m, k = int(rng.integers(1, 40)), int(rng.integers(1, 30))
    pos = rng.integers(0, 6, m).astype(np.float32)  # few values: many ties
    neg = rng.integers(0, 6, (m, k)).astype(np.float32)
    ranks = _reference_ranks(pos, neg)
    assert metrics.mrr(pos, neg) == pytest.approx(sum(1 / r for r in ranks) / m, rel=1e-12)
    for cut in (1, 3, 10):
        expected = sum(r <= cut for r in ranks) / m
        assert metrics.hits_at_k(pos, neg, cut) == pytest.approx(expected, rel=1e-12)


def test_hand_computed_ranks():
    # A positive tied with one negative among K ranks 1.5 (OGB), whatever K.
    pos, neg = np.array([0.5]), np.array([[0.5, 0.1, 0.2, 0.3]])
    assert metrics.mrr(pos, neg) == pytest.approx(1 / 1.5)
    assert metrics.hits_at_k(pos, neg, 1) == 0.0
    assert metrics.hits_at_k(pos, neg, 2) == 1.0
    # Ranks 1, 3 (two above) and 2.5 (one above, one tied): MRR (1 + 1/3 + 1/2.5) / 3.
    pos = np.array([0.9, 0.2, 0.4])
    neg = np.array([[0.1, 0.2, 0.3], [0.5, 0.6, 0.1], [0.7, 0.4, 0.1]])
    assert metrics.mrr(pos, neg) == pytest.approx((1 + 1 / 3 + 1 / 2.5) / 3)
    assert metrics.hits_at_k(pos, neg, 1) == pytest.approx(1 / 3)
    assert metrics.hits_at_k(pos, neg, 2) == pytest.approx(1 / 3)  # 2.5 > 2
    assert metrics.hits_at_k(pos, neg, 3) == 1.0
    # Two above and two tied: rank 1 + 2 + 2/2 = 4.
    assert metrics.mrr(np.array([0.4]), np.array([[0.7, 0.4, 0.4, 0.9, 0.1]])) == 0.25
    # All tied with K negatives: rank 1 + K/2.
    assert metrics.mrr(np.zeros(2), np.zeros((2, 4))) == pytest.approx(1 / 3)


def test_a_ranking_that_ignores_ties_would_differ():
    pos, neg = np.array([0.5]), np.array([[0.5, 0.1, 0.2, 0.3]])
    optimistic = 1 + np.sum(neg > pos[:, None], axis=1)  # ties in the positive's favour
    pessimistic = 1 + np.sum(neg >= pos[:, None], axis=1)
    ours = metrics.mrr(pos, neg)
    assert ours != pytest.approx(float(np.mean(1 / optimistic)))
    assert ours != pytest.approx(float(np.mean(1 / pessimistic)))
    assert metrics.hits_at_k(pos, neg, 1) != float(np.mean(optimistic <= 1))


def test_empty_and_bad_inputs():
    assert metrics.mrr(np.zeros(0), np.zeros((0, 5))) is None
    assert metrics.hits_at_k(np.zeros(0), np.zeros((0, 5)), 10) is None
    assert metrics.mrr(np.ones(3), np.zeros((3, 0))) == 1.0  # no negatives: rank 1
    with pytest.raises(ValueError):
        metrics.mrr(np.zeros(3), np.zeros((2, 5)))
    with pytest.raises(ValueError):
        metrics.mrr(np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError):
        metrics.hits_at_k(np.zeros(3), np.zeros((3, 2)), 0)
    assert "hits_at_k" in metrics.__all__ and "mrr" in metrics.__all__
