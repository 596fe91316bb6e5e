"""What a GNS cache of a given size does to a graph's mini-batches, without training.

Two steps, both host-side NumPy:

1. :func:`sample_layer_sets` draws a few node-wise sampled batches the way the run samples its
   upper layers (the seeds, then ``fanouts[0]``, ... neighbours of every node, without
   replacement), down to the *layer-1 nodes*: the destination nodes of the input block, whose
   input-layer neighbours GNS takes from the cache. It also draws NS's input layer (the
   layer-1 nodes and ``fanouts[-1]`` neighbours of each), whose rows NS moves.
2. :func:`cache_statistics` computes, for a cache of ``m`` draws from ``p``, in closed form
   over those sets (``pi_u = 1 - (1 - p_u)^m``, the chance that ``u`` is cached, and
   ``(1 - sum_{u in N(v)} p_u)^m``, the chance that none of ``v``'s neighbours is):

   * ``no_cached_share``: the expected share of layer-1 nodes with no cached neighbour. Under
     the ``hajek`` input layer such a node aggregates nothing from its neighbours;
   * ``cached_neighbours``: the expected number of cached neighbours of a layer-1 node;
   * ``rows_vs_ns``: the expected feature rows GNS moves per batch (its layer-1 nodes that are
     not cached: their own rows; the cached neighbours are on the device) against NS's (its
     whole input layer);
   * ``cache_nodes``: the expected number of distinct cached nodes, ``sum_u pi_u``.

The cost is a few passes over the sampled nodes' edges: well under a second on a graph of a
million nodes, with no compilation. :mod:`gns_jax.plan` picks the cache fraction from them.
"""

from __future__ import annotations

import numpy as np

from gns_jax.graph import CSRGraph

__all__ = ["LayerSets", "cache_statistics", "sample_layer_sets", "sample_neighbours"]


def _k_subsets(rng: np.random.Generator, degree: np.ndarray, k: int) -> np.ndarray:
    """``[len(degree), k]`` offsets, a uniform ``k``-subset of ``range(d)`` a row (each ``d``
    above ``k``): Floyd's algorithm, vectorised over the rows."""
    picks = np.empty((degree.size, k), dtype=np.int64)
    for i in range(k):
        top = degree - k + i  # draw from [0, top]; on a repeat, take top itself
        t = (rng.random(degree.size) * (top + 1)).astype(np.int64)
        seen = (picks[:, :i] == t[:, None]).any(axis=1)
        picks[:, i] = np.where(seen, top, t)
    return picks


def sample_neighbours(graph: CSRGraph, nodes: np.ndarray, k: int, rng: np.random.Generator):
    """``k`` distinct in-neighbours of every node of ``nodes`` (all of them when it has at most
    ``k``), node by node in the order of ``nodes``: node-wise sampling without replacement,
    vectorised."""
    start = graph.indptr[nodes]
    degree = graph.indptr[nodes + 1] - start
    taken = np.minimum(degree, k)
    first = np.cumsum(taken) - taken  # where each node's neighbours go in the output
    out = np.empty(int(taken.sum()), dtype=graph.indices.dtype)
    few = degree <= k
    s_degree = degree[few]
    offsets = np.arange(int(s_degree.sum()), dtype=np.int64)
    offsets -= np.repeat(np.cumsum(s_degree) - s_degree, s_degree)
    out[np.repeat(first[few], s_degree) + offsets] = graph.indices[
        np.repeat(start[few], s_degree) + offsets
    ]
    l_start, l_degree = start[~few], degree[~few]
    picks = _k_subsets(rng, l_degree, k)
    slots = first[~few][:, None] + np.arange(k)
    out[slots.ravel()] = graph.indices[(l_start[:, None] + picks).ravel()]
    return out


class LayerSets:
    """Sampled batches' layer-1 nodes and NS input nodes (:func:`sample_layer_sets`).

    Attributes:
      layer1: one int array a batch, the distinct layer-1 nodes.
      ns_inputs: one count a batch, NS's distinct input nodes.
    """

    def __init__(self, layer1: list[np.ndarray], ns_inputs: list[int]):
        self.layer1, self.ns_inputs = layer1, ns_inputs


def sample_layer_sets(
    graph: CSRGraph,
    seeds: np.ndarray,
    fanouts,
    batch_size: int,
    rng: np.random.Generator,
    batches: int = 4,
) -> LayerSets:
    """``batches`` batches of ``batch_size`` seeds drawn from ``seeds`` without replacement,
    sampled node-wise with ``fanouts`` (output layer first) down to the layer-1 nodes, and NS's
    input layer below them. One layer: the seeds are the layer-1 nodes."""
    fanouts = tuple(int(k) for k in fanouts)
    layer1, ns_inputs = [], []
    size = min(int(batch_size), int(seeds.shape[0]))
    for _ in range(batches):
        nodes = np.unique(rng.choice(seeds, size=size, replace=False))
        for k in fanouts[:-1]:
            nodes = np.union1d(nodes, sample_neighbours(graph, nodes, k, rng))
        layer1.append(nodes)
        below = sample_neighbours(graph, nodes, fanouts[-1], rng)
        ns_inputs.append(int(np.union1d(nodes, below).size))
    return LayerSets(layer1, ns_inputs)


def cache_statistics(graph: CSRGraph, p: np.ndarray, num_draws, sets: LayerSets) -> list[dict]:
    """The closed-form statistics (module docstring) of a cache of each of ``num_draws`` draws
    from ``p`` (an int or a sequence: one dict each) over ``sets``: ``no_cached_share``,
    ``cached_neighbours``, ``rows_vs_ns``, ``cache_nodes``, ``num_draws``; means over the
    batches, the shares weighted by their layer-1 sizes. The edges of the layer-1 nodes are
    read once for every cache size."""
    many = np.ndim(num_draws) > 0
    sizes = [int(m) for m in np.atleast_1d(num_draws)]
    with np.errstate(divide="ignore"):
        log_miss = np.log1p(-np.minimum(p, 1.0))  # log(1 - p_u)
    parts = []  # per batch: log(1 - mass_v) of its layer-1 nodes, its sources and their counts
    for nodes in sets.layer1:
        start, end = graph.indptr[nodes], graph.indptr[nodes + 1]
        degree = end - start
        edge = np.repeat(start - np.cumsum(degree) + degree, degree) + np.arange(degree.sum())
        src = graph.indices[edge]
        mass = np.bincount(np.repeat(np.arange(nodes.size), degree), weights=p[src])
        mass = np.pad(mass, (0, nodes.size - mass.size))
        with np.errstate(divide="ignore"):
            parts.append((np.log1p(-np.minimum(mass, 1.0)), *np.unique(src, return_counts=True)))
    counts = sum(nodes.size for nodes in sets.layer1)
    batches = max(len(sets.layer1), 1)
    out = []
    for m in sizes:
        none = neighbours = rows = 0.0
        for nodes, ns_rows, (log_none, sources, times) in zip(sets.layer1, sets.ns_inputs, parts):
            none += float(np.exp(m * log_none).sum())
            neighbours += float((-np.expm1(m * log_miss[sources]) * times).sum())
            rows += float(np.exp(m * log_miss[nodes]).sum()) / max(ns_rows, 1)
        out.append(
            dict(
                no_cached_share=none / max(counts, 1),
                cached_neighbours=neighbours / max(counts, 1),
                rows_vs_ns=rows / batches,
                cache_nodes=float(-np.expm1(m * log_miss).sum()),
                num_draws=m,
            )
        )
    return out if many else out[0]
