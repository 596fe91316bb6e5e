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
