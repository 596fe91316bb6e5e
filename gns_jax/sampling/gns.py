"""Global Neighbor Sampling (Dong et al., KDD 2021, arXiv:2106.06150). Jitted JAX, fixed shapes.

Per layer a minimum and a maximum fan-out ``(min_l, max_l)``. A cache-first layer takes up to
``max_l`` neighbours uniformly from the cached ones ``N_C(v) = N(v) ∩ C`` and, when fewer than
``min_l`` were found, tops up uniformly from the non-cached ones; a uniform layer takes
``min(max_l, d_v)`` neighbours uniformly from all of ``N(v)`` (node-wise sampling).

Defaults, as in the final version of the official code (github.com/jadadong/GNS; see
``docs/algorithm.md``): the input layer is cache-first with ``(0, 10)``, i.e. between 0 and 10
neighbours, all from the cache; the layers above take exactly their fan-out uniformly from all
neighbours (``cache_first_upper=True`` makes them cache-first with ``(K, K)``; whether the
paper's upper layers prefer cached neighbours is not known).

Input-layer edge weights (``weights=``; the default is ``"hajek"``, chosen by the measurements of
``experiments/README.md``):

* ``"ht"``: the Horvitz-Thompson weight ``w_uv = 1 / (d_v * pi_u * q_v)`` with
  ``pi_u = 1 - (1 - p_u)^m`` the cache-inclusion probability and ``q_v = min(1, K / |N_C(v)|)``
  computed from the realised cache (the official code's last version, ``GNS_yelp_test.py``, with
  the correct ``max``). Then ``E[sum_u w_uv x_u] = mean_{u in N(v)} x_u`` exactly
  (``docs/algorithm.md``, "Why the weights are unbiased").
* ``"hajek"`` (default), ``"hajek-scaled"``, ``"clipped"``, ``"exact"``: the lower-variance
  estimators of ``docs/algorithm.md`` (:func:`input_weights`, :func:`exact_input_block`):
  ``hajek`` divides the HT sum by the HT estimate of the neighbours' number.
* ``"hajek-fallback"``: ``hajek`` where ``N_C(v)`` is non-empty; a node with no cached neighbour
  takes ``min`` of the input fan-out ``(min, max)`` uniform neighbours instead (from the host),
  weighted ``1/k``, so that its aggregate is the neighbourhood mean in expectation given the
  cache instead of empty. Needs ``min >= 1``; it costs the rows of those neighbours.
* ``"minimum"``: the same with the bug of ``new_sample.py``/``GNS_yelp_new.py``,
  ``q_v = K / min(|N_C(v)|, K)``; it scales each aggregate by ``min(|N_C|, K) / max(|N_C|, K)``
  and is biased (kept for ablations).
* ``"none"``: the plain mean ``1/k`` over the ``k`` sampled cached neighbours (no importance
  sampling, as ``GNS_yelp_amazon.py`` effectively ran).
* ``"heuristic"``: the clipped heuristic of the scripts the official README runs
  (``GNS_sampling_prob.py``): ``clip(A_v / K, 1, 5) / k`` with ``A`` propagated from the seeds
  (:func:`heuristic_weights`).

Upper layers always carry the mean coefficient ``1/k``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from gns_jax import flat_random
from gns_jax.cache import DeviceCache
from gns_jax.config import WEIGHT_CLIP, WEIGHTS, check_estimator
from gns_jax.errors import ConfigError
from gns_jax.graph import CSRGraph
from gns_jax.sampling.base import JittedSampler, cap_fanouts, check_fanouts
from gns_jax.sampling.blocks import Block, MiniBatch
from gns_jax.sampling.budget import Budget
from gns_jax.sampling.nodewise import DeviceTopology, expand_layer, make_block

__all__ = ["WEIGHTS", "GNSSampler", "gns_budget", "sample_gns_blocks"]


def cache_first_layer(
    key: jax.Array,
    cache: DeviceCache,
    dst: jax.Array,
    min_fanout: int,
    max_fanout: int,
    fallback: bool = False,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Up to ``max_fanout`` cached neighbours, topped up to ``min_fanout`` from the rest. Jittable.

    ``fallback=True`` tops up only the destinations with no cached neighbour at all (with
    ``min_fanout`` picks); the others keep their cached picks alone.

    Both draws are uniform: the cached picks are a uniform subset of ``N_C(v)``, the top-up a
    uniform subset of the non-cached neighbours (tests/test_gns.py checks both with chi-square).

    Returns ``(nbrs, edge_mask, num_cached_nbrs, from_cache)``: ``[max_dst, width]`` neighbour ids
    and mask with ``width = max(min_fanout, max_fanout)``, ``|N_C(v)|`` per destination, and
    whether each pick came from the cache.
    """
    cached = DeviceTopology(cache.cached_indptr, cache.cached_indices)
    width = max(min_fanout, max_fanout)
    valid = dst >= 0
    safe = jnp.where(valid, dst, 0)
    num_cached = jnp.where(valid, cached.indptr[safe + 1] - cached.indptr[safe], 0)
    key_c, key_o = jax.random.split(key)
    if max_fanout > 0:
        nbrs_c, mask_c, _ = expand_layer(key_c, cached, dst, max_fanout)
    else:
        nbrs_c = jnp.full((dst.shape[0], 0), -1, jnp.int32)
        mask_c = jnp.zeros((dst.shape[0], 0), bool)
    take_c = jnp.sum(mask_c, axis=1, dtype=jnp.int32)
    cols = jnp.arange(width, dtype=jnp.int32)[None, :]
    pad = width - nbrs_c.shape[1]
    nbrs_c = jnp.pad(nbrs_c, ((0, 0), (0, pad)), constant_values=-1)
    mask_c = jnp.pad(mask_c, ((0, 0), (0, pad)))
    if min_fanout == 0:
        return nbrs_c, mask_c, num_cached, mask_c
    other = DeviceTopology(cache.other_indptr, cache.other_indices)
    nbrs_o, mask_o, _ = expand_layer(key_o, other, dst, min_fanout)
    # Floyd's columns are a uniform subset but not in a uniform order (and a short row is in
    # storage order): shuffle each row's picks, so that the first `shortfall` are uniform too.
    noise = flat_random.uniform(jax.random.fold_in(key_o, 1), nbrs_o.shape)
    order = jnp.argsort(jnp.where(mask_o, noise, 2.0), axis=1)
    nbrs_o = jnp.take_along_axis(nbrs_o, order, axis=1)
    mask_o = jnp.take_along_axis(mask_o, order, axis=1)
    if fallback:
        shortfall = jnp.where(take_c == 0, min_fanout, 0)
    else:
        shortfall = jnp.maximum(min_fanout - take_c, 0)
    # Column c of the row holds the c-th cached pick, then the (c - take_c)-th top-up pick.
    index_o = jnp.clip(cols - take_c[:, None], 0, min_fanout - 1)
    picked_o = jnp.take_along_axis(nbrs_o, index_o, axis=1)
    ok_o = jnp.take_along_axis(mask_o, index_o, axis=1) & (
        cols - take_c[:, None] < shortfall[:, None]
    )
    use_o = (cols >= take_c[:, None]) & ok_o
    nbrs = jnp.where(mask_c, nbrs_c, jnp.where(use_o, picked_o, -1))
    return nbrs, mask_c | use_o, num_cached, mask_c


def input_weights(
    kind: str,
    cache: DeviceCache,
    topology: DeviceTopology,
    dst: jax.Array,
    nbrs: jax.Array,
    edge_mask: jax.Array,
    num_cached: jax.Array,
    max_fanout: int,
    clip: float = WEIGHT_CLIP,
    from_cache: jax.Array | None = None,
) -> jax.Array:
    """Input-layer coefficients for the sampled ``[max_dst, width]`` edges (see module docs).

    ``from_cache`` (``hajek-fallback`` only): which picks came from the cache; the others are the
    fallback's uniform picks of a node with no cached neighbour, weighted ``1/k``.

    With ``inv_uv = 1 / (pi_u q_v)``, the number of neighbours a sampled cached neighbour stands
    for: ``ht`` is ``inv / d_v``; ``hajek`` is ``inv / sum_{u' in S_v} inv_u'v`` (the
    self-normalised ratio estimator: the HT estimate of the neighbours' sum over the HT estimate
    of their number; the weights of a node sum to 1, and to 0 when nothing was sampled);
    ``hajek-scaled`` is ``hajek`` divided by ``P(N_C(v) non-empty)`` (``cache.nonempty_prob``),
    so that, empty neighbourhoods included, its mean is the neighbourhood mean to first order,
    the scale exact evaluation sees; ``clipped`` is ``min(inv, clip) / d_v``.
    """
    take = jnp.sum(edge_mask, axis=1, keepdims=True).astype(jnp.float32)
    if kind == "none":
        return jnp.where(edge_mask, 1.0 / jnp.maximum(take, 1.0), 0.0)
    if kind == "hajek-fallback":
        if from_cache is None:
            raise ValueError("hajek-fallback weights need from_cache")
        topup = edge_mask & ~from_cache
        cached = input_weights(
            "hajek", cache, topology, dst, nbrs, from_cache, num_cached, max_fanout
        )
        num_topup = jnp.sum(topup, axis=1, keepdims=True).astype(jnp.float32)
        return jnp.where(topup, 1.0 / jnp.maximum(num_topup, 1.0), cached)
    safe = jnp.where(dst >= 0, dst, 0)
    degree = (topology.indptr[safe + 1] - topology.indptr[safe]).astype(jnp.float32)[:, None]
    n_c = num_cached.astype(jnp.float32)[:, None]
    k = jnp.float32(max_fanout)
    if kind in ("ht", "hajek", "hajek-scaled", "clipped"):
        q = jnp.minimum(1.0, k / jnp.maximum(n_c, 1.0))  # K / max(|N_C|, K)
    elif kind == "minimum":
        q = k / jnp.maximum(jnp.minimum(n_c, k), 1.0)  # the official code's bug: K / min(|N_C|, K)
    else:
        raise ValueError(kind)
    pi = cache.inclusion_prob[jnp.where(edge_mask, nbrs, 0)]
    if kind in ("ht", "minimum"):
        weight = 1.0 / (jnp.maximum(degree, 1.0) * jnp.maximum(pi, 1e-30) * q)
        return jnp.where(edge_mask, weight, 0.0)
    inv = jnp.where(edge_mask, 1.0 / (jnp.maximum(pi, 1e-30) * q), 0.0)
    if kind in ("hajek", "hajek-scaled"):
        weight = inv / jnp.maximum(jnp.sum(inv, axis=1, keepdims=True), 1e-30)
        if kind == "hajek":
            return weight
        return weight / jnp.maximum(cache.nonempty_prob[safe], 1e-30)[:, None]
    return jnp.minimum(inv, clip) / jnp.maximum(degree, 1.0)  # clipped


def exact_input_block(
    num_nodes: int, dst: jax.Array, max_src: int, max_edges: int
) -> tuple[Block, jax.Array]:
    """The input layer without sampling: real destination ``v`` reads one source row, holding
    ``num_nodes + v``, the precomputed mean of its neighbours' features, with weight 1. Jittable.

    Sources are ``[dst prefix | mean rows, in the destinations' order | dummy]``. Returns the
    block and the number of mean rows that did not fit (0 under a worst-case budget).
    """
    max_dst = dst.shape[0]
    max_new = max_src - max_dst - 1
    real = dst >= 0
    rank = jnp.cumsum(real, dtype=jnp.int32) - 1
    fits = real & (rank < min(max_new, max_edges))
    slot = jnp.where(fits, rank, max_new)
    new = jnp.full(max_new, -1, jnp.int32).at[slot].set(dst + num_nodes, mode="drop")
    edge = jnp.where(fits, rank, max_edges)
    senders = jnp.full(max_edges, max_src - 1, jnp.int32).at[edge].set(max_dst + rank, mode="drop")
    receivers = (
        jnp.full(max_edges, max_dst - 1, jnp.int32)
        .at[edge]
        .set(jnp.arange(max_dst, dtype=jnp.int32), mode="drop")
    )
    weight = jnp.zeros(max_edges, jnp.float32).at[edge].set(1.0, mode="drop")
    src_nodes = jnp.concatenate([dst, new, jnp.full(1, -1, jnp.int32)])
    block = Block(src_nodes, senders, receivers, weight, dst_mask=real)
    return block, jnp.sum(real & ~fits, dtype=jnp.int32)


def _propagate(importance, block, dst, topology, fanout):
    """``A_src[u] = sum_{u -> v} A[v] min(1, K / d_v)`` over the block's real edges."""
    safe = jnp.where(dst >= 0, dst, 0)
    degree = (topology.indptr[safe + 1] - topology.indptr[safe]).astype(jnp.float32)
    factor = importance * jnp.minimum(1.0, fanout / jnp.maximum(degree, 1.0))
    values = jnp.where(block.edge_weight != 0, factor[block.receivers], 0.0)
    return jax.ops.segment_sum(values, block.senders, num_segments=block.src_nodes.shape[0])


def heuristic_weights(importance, edge_mask, max_fanout, num_nodes, topology, cache):
    """The official scripts' clipped heuristic (``GNS_sampling_prob.py``), per edge.

    ``A`` (propagated from the seeds) is clipped to ``<= 1 / (avg_degree * rho)``, zeros become 1,
    and every sampled cached edge of the input layer gets ``clip(A_v / K, 1, 5) / k_v``. The
    official code scales source features instead, where the last write wins; the per-edge form is
    its order-independent reading.
    """
    rho = cache.size / num_nodes
    avg_degree = topology.indices.shape[0] / num_nodes
    a = jnp.minimum(importance, 1.0 / (avg_degree * rho))
    a = jnp.where(a == 0, 1.0, a)
    scale = jnp.clip(a / max_fanout, 1.0, 5.0)[:, None]
    take = jnp.sum(edge_mask, axis=1, keepdims=True).astype(jnp.float32)
    return jnp.where(edge_mask, scale / jnp.maximum(take, 1.0), 0.0)


def sample_gns_blocks(
    key: jax.Array,
    topology: DeviceTopology,
    cache: DeviceCache,
    seeds: jax.Array,
    *,
    min_fanouts: tuple[int, ...],
    max_fanouts: tuple[int, ...],
    cache_first: tuple[bool, ...],
    weights: str,
    budget: Budget,
    clip: float = WEIGHT_CLIP,
) -> MiniBatch:
    """One GNS mini-batch rooted at ``seeds``; fan-out tuples input layer first. Jittable."""
    num_nodes = topology.num_nodes
    dst = seeds
    blocks, overflow = [], []
    keys = jax.random.split(key, len(max_fanouts))
    # The official heuristic (GNS_sampling_prob.py) propagates A = (B/n)/rho = B/m from the seeds.
    importance = jnp.where(seeds >= 0, jnp.sum(seeds >= 0) / cache.size, 0.0)
    for layer in reversed(range(len(max_fanouts))):  # output layer first
        lo, hi = min_fanouts[layer], max_fanouts[layer]
        if layer == 0 and weights == "exact":
            block, over = exact_input_block(num_nodes, dst, budget.max_src[0], budget.max_edges[0])
            blocks.append(block)
            overflow.append(over)
            break
        if cache_first[layer]:
            fallback = layer == 0 and weights == "hajek-fallback"
            nbrs, edge_mask, num_cached, from_cache = cache_first_layer(
                keys[layer], cache, dst, lo, hi, fallback
            )
            if layer == 0 and weights == "heuristic":
                weight = heuristic_weights(importance, edge_mask, hi, num_nodes, topology, cache)
            elif layer == 0:
                weight = input_weights(
                    weights, cache, topology, dst, nbrs, edge_mask, num_cached, hi, clip, from_cache
                )
            else:
                take = jnp.sum(edge_mask, axis=1, keepdims=True).astype(jnp.float32)
                weight = jnp.where(edge_mask, 1.0 / jnp.maximum(take, 1.0), 0.0)
        else:
            nbrs, edge_mask, weight = expand_layer(keys[layer], topology, dst, hi)
        block, over = make_block(
            num_nodes, dst, nbrs, edge_mask, weight, budget.max_src[layer], budget.max_edges[layer]
        )
        blocks.append(block)
        overflow.append(over)
        if layer > 0 and weights == "heuristic":
            importance = _propagate(importance, block, dst, topology, hi)
        dst = block.src_nodes
    return MiniBatch.from_layers(seeds, blocks, overflow)


def gns_budget(
    batch_size: int,
    widths: tuple[int, ...],
    num_nodes: int,
    cache_size: int,
    input_cache_only: bool,
) -> Budget:
    """Exact worst case; when the input layer draws only cached nodes, its new sources number at
    most ``cache_size`` (the cache bounds the input layer: the point of GNS)."""
    budget = Budget.worst_case(batch_size, widths, num_nodes)
    if not input_cache_only:
        return budget
    max_dst = budget.max_dst[0]
    new = min((max_dst - 1) * widths[0], num_nodes, cache_size)
    return budget._replace(max_src=(max_dst + new + 1, *budget.max_src[1:]))


class GNSSampler(JittedSampler):
    """Global Neighbor Sampling with per-layer ``(min, max)`` fan-outs, jitted once per budget.

    Args:
      graph: the graph, in host memory; copied once to the topology device.
      fanouts: neighbours per destination, **output layer first**, as on the command line; the
        last entry (the input layer's) is replaced by ``input_fanout``: ``(15, 10, 5)`` samples 15
        and 10 neighbours uniformly in the upper layers and 0..10 cached ones in the input layer.
      batch_size: seeds per batch.
      cache_size: ``m``, the number of cache draws (the static shapes of the cache).
      input_fanout: ``(min, max)`` of the input layer; default ``(0, 10)``.
      cache_first_upper: make the upper layers cache-first with ``(K, K)``.
      weights: the input-layer estimator, one of :data:`WEIGHTS` (module docs).
      weight_clip: the bound of the ``clipped`` weights' inverse probability.

    Attributes ``min_fanouts``, ``max_fanouts`` and ``cache_first`` are per block, input layer
    first (the order of ``MiniBatch.blocks``).
    """

    name = "gns"
    uses_cache = True

    def __init__(
        self,
        graph: CSRGraph,
        fanouts: tuple[int, ...],
        batch_size: int,
        cache_size: int,
        *,
        input_fanout: tuple[int, int] = (0, 10),
        cache_first_upper: bool = False,
        weights: str = "hajek",
        weight_clip: float = WEIGHT_CLIP,
        device: jax.Device | None = None,
    ):
        # the upper layers' fan-outs capped at the largest degree (the input layer's is
        # input_fanout's)
        self.fanouts = cap_fanouts(check_fanouts(fanouts, batch_size), graph)
        widths = tuple(reversed(self.fanouts))  # block order: input layer first
        lo, hi = check_estimator(weights, input_fanout)
        if not weight_clip > 0:
            raise ConfigError("weight_clip", f"must be a positive number, got {weight_clip}")
        if int(cache_size) < 1:
            raise ConfigError("cache_size", f"must be a positive integer, got {cache_size}")
        self.input_fanout = (lo, hi)
        self.min_fanouts = (lo, *widths[1:])
        self.max_fanouts = (hi, *widths[1:])
        self.cache_first = (True, *([bool(cache_first_upper)] * (len(widths) - 1)))
        self.weights = weights
        self.weight_clip = float(weight_clip)
        self.batch_size = int(batch_size)
        self.cache_size = int(cache_size)
        block_widths = tuple(max(a, b) for a, b in zip(self.min_fanouts, self.max_fanouts))
        # The exact input layer reads one mean row per destination (not bounded by the cache).
        self.needs_means = weights == "exact"
        if self.needs_means:
            block_widths = (1, *block_widths[1:])
        self.budget = gns_budget(
            self.batch_size,
            block_widths,
            graph.num_nodes,
            self.cache_size,
            input_cache_only=lo == 0 and not self.needs_means,
        )
        self.topology = DeviceTopology.from_graph(graph, device)
        self.num_nodes = graph.num_nodes
        # Top-ups from non-cached neighbours read the cache's non-cached adjacency.
        self.needs_other = any(
            first and lo > 0 for first, lo in zip(self.cache_first, self.min_fanouts)
        )
        self._start()

    def _function(self, budget: Budget):
        return functools.partial(
            sample_gns_blocks,
            min_fanouts=self.min_fanouts,
            max_fanouts=self.max_fanouts,
            cache_first=self.cache_first,
            weights=self.weights,
            budget=budget,
            clip=self.weight_clip,
        )

    def sample(self, key: jax.Array, seeds: jax.Array, cache: DeviceCache | None = None):
        """Samples a batch with the current cache (its shapes are fixed, so no recompilation)."""
        if cache is None:
            raise ConfigError(
                "cache", "GNS samples from a cache: pass the DeviceCache drawn for it"
            )
        return self._sample(key, self.topology, cache, seeds)
