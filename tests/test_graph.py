import numpy as np
import pytest

from gns_jax.errors import GraphError
from gns_jax.graph import CSRGraph, from_edges


def test_from_edges_symmetrises_and_drops_self_loops_and_duplicates():
    g = from_edges(np.array([0, 1, 1, 2, 3, 0]), np.array([1, 0, 1, 3, 2, 1]), num_nodes=5)
    senders, receivers = g.edges()
    assert sorted(zip(senders.tolist(), receivers.tolist())) == [(0, 1), (1, 0), (2, 3), (3, 2)]
    np.testing.assert_array_equal(g.degrees(), [1, 1, 1, 1, 0])
    assert g.indptr.dtype == np.int64 and g.indices.dtype == np.int32
    g.validate()


def test_directed_construction_keeps_direction():
    g = from_edges(np.array([0, 0]), np.array([1, 2]), num_nodes=3, symmetrize=False)
    np.testing.assert_array_equal(g.neighbors(1), [0])
    np.testing.assert_array_equal(g.neighbors(0), [])


def test_rows_are_sorted_and_unique_at_scale():
    rng = np.random.default_rng(0)
    n, e = 100_000, 1_000_000
    g = from_edges(rng.integers(0, n, e), rng.integers(0, n, e), n)
    rows = np.repeat(np.arange(n), g.degrees())
    key = rows.astype(np.int64) * n + g.indices
    assert np.all(np.diff(key) > 0)  # sorted by (receiver, sender), no duplicates
    assert g.num_edges % 2 == 0
    g.validate()


@pytest.mark.parametrize(
    "src, dst, n, message",
    [
        ([0, 5], [1, 2], 5, r"\[0, 5\)"),
        ([-1, 0], [1, 2], 5, "node ids"),
        ([0.5], [1.0], 5, "integers"),
        ([0, 1], [1], 5, "same length"),
    ],
)
def test_bad_edge_lists_are_refused(src, dst, n, message):
    with pytest.raises(GraphError, match=message):
        from_edges(np.array(src), np.array(dst), n, name="edges.csv")


def test_validate_catches_bad_csr():
    with pytest.raises(GraphError, match="non-decreasing"):
        CSRGraph(np.array([0, 2, 1, 2], np.int64), np.array([1, 0], np.int32)).validate()
    with pytest.raises(GraphError, match="neighbour ids"):
        CSRGraph(np.array([0, 1, 2], np.int64), np.array([1, 7], np.int32)).validate()
    with pytest.raises(GraphError, match="int64"):
        CSRGraph(np.array([0, 1, 2], np.int32), np.array([1, 0], np.int32)).validate()


def test_check_undirected_accepts_symmetrised_graphs():
    g = from_edges(np.array([0, 1, 2, 4]), np.array([1, 2, 0, 3]), num_nodes=6)
    assert g.check_undirected() is g
    empty = from_edges(np.array([], np.int64), np.array([], np.int64), num_nodes=3)
    assert empty.check_undirected() is empty


@pytest.mark.parametrize(
    "indptr, indices, message",
    [
        # 0 -> 1 stored (in row 1), 1 -> 0 missing
        ([0, 0, 1, 1], [0], r"edge 0 -> 1 is stored but 1 -> 0 is not"),
        # rows 0 and 2 hold each other, row 1 holds 2 but row 2 does not hold 1
        ([0, 1, 2, 3], [2, 2, 0], r"edge 2 -> 1 is stored but 1 -> 2 is not"),
        ([0, 2, 3, 4], [2, 2, 0, 0], r"neighbours of node 0 are not sorted and unique"),
        ([0, 2, 3, 3], [1, 0, 0], r"neighbours of node 0 are not sorted"),
        ([0, 1, 2], [0, 1], r"self-loop at node 0"),
    ],
)
def test_check_undirected_refuses_directed_or_unsorted_rows(indptr, indices, message):
    g = CSRGraph(np.array(indptr, np.int64), np.array(indices, np.int32)).validate()
    with pytest.raises(GraphError, match=message):
        g.check_undirected("saved/indices.npy")


def test_check_undirected_finds_one_missing_reverse_edge_in_a_large_graph():
    rng = np.random.default_rng(1)
    g = from_edges(rng.integers(0, 500, 3000), rng.integers(0, 500, 3000), 500)
    senders, receivers = g.edges()
    keep = np.ones(g.num_edges, bool)
    keep[1234] = False  # drop one direction of one edge
    directed = from_edges(senders[keep], receivers[keep], 500, symmetrize=False)
    u, v = int(senders[1234]), int(receivers[1234])
    with pytest.raises(GraphError, match=rf"edge {v} -> {u} is stored but {u} -> {v} is not"):
        directed.check_undirected()
