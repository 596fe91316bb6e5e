"""Small helpers shared by the tests."""

import numpy as np

from gns_jax.graph import CSRGraph, from_edges


def random_graph(
    seed: int, num_nodes: int = 60, num_edges: int = 150, isolated: int = 5
) -> CSRGraph:
    """A random undirected graph whose last ``isolated`` nodes have no edges."""
    rng = np.random.default_rng(seed)
    live = num_nodes - isolated
    # A few hubs so that some degrees exceed the fan-outs, plus uniform edges.
    hubs = rng.integers(0, 3, size=num_edges // 3)
    src = np.concatenate([hubs, rng.integers(0, live, size=num_edges)])
    dst = rng.integers(0, live, size=src.shape[0])
    return from_edges(src, dst, num_nodes)


def edge_set(graph: CSRGraph) -> set[tuple[int, int]]:
    senders, receivers = graph.edges()
    return set(zip(senders.tolist(), receivers.tolist(), strict=True))
