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

import math

import numpy as np

from gns_jax.graph import CSRGraph

__all__ = ["LayerSets", "cache_statistics", "draws", "sample_layer_sets", "sample_neighbours"]

_DUPLICATE_ROUNDS = 16  # redraws of repeated offsets; a repeat left after them is kept once


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
    picks = (rng.random((l_degree.size, k)) * l_degree[:, None]).astype(np.int64)
    for _ in range(_DUPLICATE_ROUNDS):
        picks.sort(axis=1)
        repeated = np.zeros(picks.shape, dtype=bool)
        repeated[:, 1:] = picks[:, 1:] == picks[:, :-1]
        if not repeated.any():
            break
        rows = np.nonzero(repeated)[0]
        picks[repeated] = (rng.random(rows.size) * l_degree[rows]).astype(np.int64)
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


def cache_statistics(graph: CSRGraph, p: np.ndarray, num_draws: int, sets: LayerSets) -> dict:
    """The closed-form statistics of a cache of ``num_draws`` draws from ``p`` over ``sets``
    (module docstring): ``no_cached_share``, ``cached_neighbours``, ``rows_vs_ns``,
    ``cache_nodes``; means over the batches, the shares weighted by their layer-1 sizes."""
    with np.errstate(divide="ignore"):
        log_miss = np.log1p(-np.minimum(p, 1.0))  # log(1 - p_u)
    pi = -np.expm1(num_draws * log_miss)
    none, neighbours, rows, counts = 0.0, 0.0, 0.0, 0
    for nodes, ns_rows in zip(sets.layer1, sets.ns_inputs):
        start, end = graph.indptr[nodes], graph.indptr[nodes + 1]
        degree = end - start
        edge = np.repeat(start - np.cumsum(degree) + degree, degree) + np.arange(degree.sum())
        src = graph.indices[edge]
        owner = np.repeat(np.arange(nodes.size), degree)
        mass = np.bincount(owner, weights=p[src], minlength=nodes.size)
        with np.errstate(divide="ignore"):
            none += float(np.exp(num_draws * np.log1p(-np.minimum(mass, 1.0))).sum())
        neighbours += float(pi[src].sum())
        rows += float((1.0 - pi[nodes]).sum()) / max(ns_rows, 1)
        counts += nodes.size
    batches = max(len(sets.layer1), 1)
    return dict(
        no_cached_share=none / max(counts, 1),
        cached_neighbours=neighbours / max(counts, 1),
        rows_vs_ns=rows / batches,
        cache_nodes=float(pi.sum()),
        num_draws=int(num_draws),
    )


def draws(fraction: float, num_nodes: int) -> int:
    """``m = ceil(fraction * num_nodes)`` (:func:`gns_jax.cache.cache_size`, unvalidated)."""
    return max(1, math.ceil(fraction * num_nodes))
