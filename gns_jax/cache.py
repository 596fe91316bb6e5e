"""The GNS global cache: distributions, the draw, inclusion probabilities, and its device arrays.

Host part (NumPy): :func:`cache_distribution` gives the sampling distribution ``p`` over nodes
(degree-proportional, uniform, or the random-walk visit probability from the training nodes);
:func:`draw_cache` draws ``m = ceil(cache_fraction * num_nodes)`` nodes **with replacement** from
``p`` and keeps the distinct ones, so that the inclusion probability is exactly

    pi_u = P(u in C) = 1 - (1 - p_u)^m

(``docs/algorithm.md``; the importance weights rely on it). Device part: :class:`DeviceCache`
holds, on the accelerator, the cached ids, ``slot_of`` for every node (``m`` = not cached), ``pi``,
the cached feature rows plus one zero dummy row, and the cached-neighbour adjacency (CSR of the
edges whose source is cached) that the GNS sampler draws the input layer from, plus the complement
(edges from non-cached sources) for cache-first upper layers. Every shape depends only on the
graph and ``m``, never on how many draws were duplicates, so a refresh never recompiles anything.

Schedule: :class:`CacheSchedule` keeps a run's cache epoch by epoch, as the loader uses it:
drawn at epoch 0 and every ``refresh`` epochs, one replica per device, and rebuilt from its
distinct ids when a run resumes between two draws.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import numpy as np

from gns_jax.config import DISTRIBUTIONS, check_cache_fraction
from gns_jax.errors import ConfigError
from gns_jax.gather import take_rows
from gns_jax.graph import CSRGraph
from gns_jax.meters import TransferMeter
from gns_jax.pagecache import PageCacheCounter

__all__ = [
    "DISTRIBUTIONS",
    "CacheSnapshot",
    "CacheSchedule",
    "DeviceCache",
    "build_device_cache",
    "cache_distribution",
    "cache_size",
    "draw_cache",
    "inclusion_probability",
    "min_variance_distribution",
    "neighbour_sum",
    "nonempty_probability",
    "row_chunks",
    "snapshot_from_ids",
    "squared_row_norms",
]


def cache_size(cache_fraction: float, num_nodes: int) -> int:
    """``m = ceil(cache_fraction * num_nodes)``, the number of draws; validates the fraction."""
    check_cache_fraction(cache_fraction)
    return max(1, math.ceil(cache_fraction * num_nodes))


def cache_distribution(
    graph: CSRGraph,
    kind: str = "degree",
    *,
    train_idx: np.ndarray | None = None,
    num_steps: int = 3,
    features: np.ndarray | None = None,
) -> np.ndarray:
    """The cache sampling distribution ``p`` (float64 ``[num_nodes]``, sums to 1). Host-side.

    Args:
      kind: ``degree`` (``p_u ∝ d_u``, the paper's default), ``uniform``, ``random-walk``:
        start from ``1/|train|`` on the training nodes and run ``num_steps`` steps of
        ``p <- sum_{u in N(v)} p_u / d_u + p_v``, renormalised each step (the alternative in the
        official code), or ``min-variance``: the static distribution that minimises the summed
        input-layer variance of the Horvitz-Thompson estimator in the small-cache regime,
        ``p_u ∝ ||x_u|| sqrt(sum_{v in N(u)} 1 / d_v^2)`` (:func:`min_variance_distribution`;
        needs ``features``).
    """
    n = graph.num_nodes
    degree = graph.degrees().astype(np.float64)
    if kind == "degree":
        p = degree.copy()
        if p.sum() == 0:
            p[:] = 1.0
    elif kind == "uniform":
        p = np.ones(n)
    elif kind == "random-walk":
        if train_idx is None or len(train_idx) == 0:
            raise ConfigError("cache_dist", "random-walk needs training nodes")
        p = np.zeros(n)
        p[train_idx] = 1.0 / len(train_idx)
        senders, receivers = graph.edges()
        inv_degree = 1.0 / np.maximum(degree, 1.0)
        for _ in range(num_steps):
            p = np.bincount(receivers, weights=(p * inv_degree)[senders], minlength=n) + p
            p /= p.sum()
    elif kind == "min-variance":
        if features is None:
            raise ConfigError("cache_dist", "min-variance needs the node features")
        p = min_variance_distribution(graph, features)
    else:
        raise ConfigError("cache_dist", f"unknown distribution '{kind}' (known: {DISTRIBUTIONS})")
    return p / p.sum()


def min_variance_distribution(graph: CSRGraph, features: np.ndarray) -> np.ndarray:
    """``p_u ∝ ||x_u|| sqrt(sum_{v in N(u)} d_v^-2)``, unnormalised. Host-side, one pass.

    In the small-cache regime (``m p_u << 1``) the inclusion probability is ``pi_u ≈ m p_u`` and
    the Horvitz-Thompson input aggregate of node ``v`` has variance about
    ``sum_{u in N(v)} ||x_u||^2 / (d_v^2 m p_u)`` (summed over the feature dimensions). Summed
    over all nodes ``v`` this is ``(1/m) sum_u c_u / p_u`` with
    ``c_u = ||x_u||^2 sum_{v in N(u)} 1 / d_v^2`` (the graph is symmetric), and minimising it
    subject to ``sum_u p_u = 1`` (a Lagrange multiplier) gives ``p_u ∝ sqrt(c_u)``. A
    degree-proportional cache is optimal only when ``c_u ∝ d_u^2``; this one puts less mass on
    hubs and more on the nodes whose features many low-degree nodes average. Features are read
    in row chunks (a memory-mapped matrix is streamed).
    """
    degree = graph.degrees().astype(np.float64)
    sums = neighbour_sum(graph, 1.0 / np.maximum(degree, 1.0) ** 2)
    norms = squared_row_norms(features)
    p = np.sqrt(norms * sums)
    if not p.sum() > 0:
        p = np.ones(graph.num_nodes)
    return p


def neighbour_sum(graph: CSRGraph, values: np.ndarray) -> np.ndarray:
    """``sum_{v in N(u)} values_v`` for every node ``u`` (float64; 0 without neighbours).
    Host-side, one pass over the edges in :func:`row_chunks` (per-edge temporaries bounded)."""
    out = np.zeros(graph.num_nodes)
    for a, b in row_chunks(graph):
        starts = graph.indptr[a:b]
        rows = np.flatnonzero(graph.indptr[a + 1 : b + 1] > starts)
        if rows.size:
            lo, hi = int(graph.indptr[a]), int(graph.indptr[b])
            out[a + rows] = np.add.reduceat(values[graph.indices[lo:hi]], starts[rows] - lo)
    return out


def squared_row_norms(features: np.ndarray) -> np.ndarray:
    """``||x_u||^2`` per row (float64), in row chunks: a memory-mapped matrix is streamed."""
    out = np.empty(features.shape[0])
    step = max(1, (1 << 24) // max(1, features.shape[1]))
    for start in range(0, features.shape[0], step):
        rows = np.asarray(features[start : start + step], dtype=np.float64)
        out[start : start + step] = np.einsum("ij,ij->i", rows, rows)
    return out


def inclusion_probability(p: np.ndarray, num_draws: int) -> np.ndarray:
    """``pi_u = 1 - (1 - p_u)^m``, computed as ``-expm1(m log1p(-p_u))`` for accuracy."""
    with np.errstate(divide="ignore"):
        return -np.expm1(num_draws * np.log1p(-np.minimum(p, 1.0)))


class CacheSnapshot(NamedTuple):
    """One draw of the cache, on the host.

    Attributes:
      node_ids: int32 ``[m]`` distinct cached ids, ascending, then ``-1`` padding.
      num_cached: how many distinct nodes were drawn (``<= m``).
      slot_of: int32 ``[num_nodes]``; the row of each node in the device cache, ``m`` if not cached.
      inclusion_prob: float64 ``[num_nodes]``, ``pi_u`` under the draw actually used.
    """

    node_ids: np.ndarray
    num_cached: int
    slot_of: np.ndarray
    inclusion_prob: np.ndarray


def draw_cache(rng: np.random.Generator, p: np.ndarray, num_draws: int) -> CacheSnapshot:
    """Draws ``num_draws`` nodes i.i.d. from ``p`` and keeps the distinct ones. Host-side."""
    n = p.shape[0]
    draws = rng.choice(n, size=num_draws, replace=True, p=p)
    distinct = np.unique(draws).astype(np.int32)
    node_ids = np.full(num_draws, -1, dtype=np.int32)
    node_ids[: distinct.size] = distinct
    slot_of = np.full(n, num_draws, dtype=np.int32)
    slot_of[distinct] = np.arange(distinct.size, dtype=np.int32)
    return CacheSnapshot(node_ids, int(distinct.size), slot_of, inclusion_probability(p, num_draws))


def snapshot_from_ids(node_ids: np.ndarray, p: np.ndarray, num_draws: int) -> CacheSnapshot:
    """The snapshot of a cache whose distinct nodes are ``node_ids`` (a checkpoint's), drawn with
    ``num_draws`` draws from ``p``: what :func:`draw_cache` returned when it drew them."""
    n = p.shape[0]
    distinct = np.unique(np.asarray(node_ids, dtype=np.int32))
    if distinct.size > num_draws or (distinct.size and (distinct[0] < 0 or distinct[-1] >= n)):
        raise ValueError(f"{distinct.size} cached ids do not fit a cache of {num_draws} draws")
    padded = np.full(num_draws, -1, dtype=np.int32)
    padded[: distinct.size] = distinct
    slot_of = np.full(n, num_draws, dtype=np.int32)
    slot_of[distinct] = np.arange(distinct.size, dtype=np.int32)
    return CacheSnapshot(padded, int(distinct.size), slot_of, inclusion_probability(p, num_draws))


class DeviceCache(NamedTuple):
    """The cache on the accelerator; shapes depend only on the graph and ``m``.

    Attributes:
      node_ids: int32 ``[m]`` cached ids (``-1`` padding).
      slot_of: int32 ``[num_nodes + 1]``; the row of ``features`` of every node, the last row
        (the dummy) if not cached; the extra last entry is for padding ids so that gathers need
        no branch (``[2 num_nodes + 1]`` with the neighbour means' rows, see
        :func:`build_device_cache`).
      inclusion_prob: float32 ``[num_nodes]``, ``pi_u``.
      features: float32 ``[m + 1, F]`` cached feature rows (``[2m + 1, F]`` with the neighbour
        means'); rows of padding and the last (dummy) row are zero.
      cached_indptr, cached_indices: CSR of ``N_C(v)``, the cached in-neighbours of every node
        (int32 ``[num_nodes + 1]`` and ``[max_cached_edges]``, padded with 0).
      other_indptr, other_indices: CSR of the non-cached in-neighbours (int32 ``[num_nodes + 1]``
        and ``[num_edges]``), for cache-first upper layers.
      nonempty_prob: float32 ``[num_nodes]``, the probability that a node has a cached neighbour,
        ``1 - (1 - sum_{u in N(v)} p_u)^m`` (:func:`nonempty_probability`).
    """

    node_ids: jax.Array
    slot_of: jax.Array
    inclusion_prob: jax.Array
    features: jax.Array
    cached_indptr: jax.Array
    cached_indices: jax.Array
    other_indptr: jax.Array
    other_indices: jax.Array
    nonempty_prob: jax.Array

    @property
    def size(self) -> int:
        """``m``, the static number of cache slots (also the index of the dummy row)."""
        return self.node_ids.shape[0]


def nonempty_probability(graph: CSRGraph, inclusion: np.ndarray, num_draws: int) -> np.ndarray:
    """``P(N_C(v) non-empty) = 1 - (1 - sum_{u in N(v)} p_u)^m`` for every node: no draw lands in
    ``v``'s neighbourhood otherwise. ``p`` is recovered exactly from ``pi = 1 - (1 - p)^m``, so
    the inclusion probabilities of a snapshot suffice. Host-side, one pass over the edges."""
    pi = np.clip(np.asarray(inclusion, dtype=np.float64), 0.0, 1.0)
    with np.errstate(divide="ignore"):
        p = -np.expm1(np.log1p(-pi) / num_draws)
    mass = neighbour_sum(graph, p)
    with np.errstate(divide="ignore"):
        return -np.expm1(num_draws * np.log1p(-np.minimum(mass, 1.0)))


def max_cached_edges(graph: CSRGraph, num_draws: int) -> int:
    """Exact bound on the edges from cached sources: the ``m`` largest degrees summed."""
    degree = graph.degrees()
    m = min(num_draws, degree.shape[0])
    top = np.partition(degree, degree.shape[0] - m)[degree.shape[0] - m :] if m else degree[:0]
    return max(1, int(top.sum()))


EDGE_CHUNK = 1 << 24  # edges per host pass over the graph: bounds per-edge temporaries


def row_chunks(graph: CSRGraph, edges: int | None = None):
    """``(first row, end row)`` ranges covering every node, each holding about ``edges`` edges
    (default :data:`EDGE_CHUNK`; a row with more is a range of its own): host passes over the
    edges in bounded memory."""
    n, edges = graph.num_nodes, edges or EDGE_CHUNK
    cuts = np.searchsorted(graph.indptr, np.arange(edges, graph.num_edges, edges), side="right")
    bounds = np.unique(np.concatenate([[0], np.clip(cuts - 1, 0, n), [n]]))
    yield from zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)


def _split_csr(graph: CSRGraph, keep_of, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """The sub-CSR of the edges whose target ``u`` has ``keep_of(u)``, with ``indices`` padded
    to ``capacity``; one pass in chunks of rows, so no temporary holds a value per edge."""
    indptr = np.zeros(graph.num_nodes + 1, dtype=np.int64)
    indices = np.zeros(capacity, dtype=np.int32)
    filled = 0
    for a, b in row_chunks(graph):
        lo, hi = int(graph.indptr[a]), int(graph.indptr[b])
        nbrs = np.asarray(graph.indices[lo:hi])
        keep = keep_of(nbrs)
        kept_before = np.zeros(hi - lo + 1, dtype=np.int64)
        np.cumsum(keep, out=kept_before[1:])
        indptr[a + 1 : b + 1] = filled + kept_before[graph.indptr[a + 1 : b + 1] - lo]
        chosen = nbrs[keep]
        if filled + chosen.size > capacity:  # not with max_cached_edges; guard the invariant
            raise ValueError(f"{filled + chosen.size} cached edges exceed the capacity {capacity}")
        indices[filled : filled + chosen.size] = chosen
        filled += chosen.size
    return indptr.astype(np.int32), indices


def build_device_cache(
    graph: CSRGraph,
    features: np.ndarray,
    snapshot: CacheSnapshot,
    *,
    put=jax.device_put,
    edge_capacity: int | None = None,
    with_other: bool = True,
    means: np.ndarray | None = None,
    nonempty: np.ndarray | None = None,
    page_cache: PageCacheCounter | None = None,
) -> tuple[DeviceCache, float]:
    """Builds the device arrays of a snapshot; returns them and the host build time in seconds.

    Args:
      put: how arrays reach the device (``TransferMeter.put`` with a tag, to count bytes).
      edge_capacity: size of ``cached_indices``; default :func:`max_cached_edges`.
      with_other: build the non-cached adjacency (a copy of most of the graph's edges), which
        only cache-first layers with top-ups read; without it ``other_*`` are empty
        placeholders (``GNSSampler.needs_other`` says which a sampler needs).
      means: the neighbour means of the features (the exact input layer,
        :func:`gns_jax.features.neighbour_means`); the cache then also holds the cached nodes'
        mean rows: ``features`` is ``[2m + 1, F]`` (rows, then mean rows, then the dummy) and
        ``slot_of`` has ``2 num_nodes + 1`` entries, ``num_nodes + v`` for ``v``'s mean row.
      nonempty: :func:`nonempty_probability` of this snapshot's distribution, computed once by a
        caller that refreshes the cache often (default: computed here).
      page_cache: counts the cached rows read from a memory-mapped store
        (``TransferMeter.page_cache``).
    """
    start = time.perf_counter()
    m = snapshot.node_ids.shape[0]
    capacity = edge_capacity or max_cached_edges(graph, m)
    slot_of = snapshot.slot_of
    cached_indptr, cached_indices = _split_csr(graph, lambda u: slot_of[u] < m, capacity)
    if with_other:
        other = max(1, graph.num_edges)
        other_indptr, other_indices = _split_csr(graph, lambda u: slot_of[u] >= m, other)
    else:
        other_indptr = np.zeros(graph.num_nodes + 1, np.int32)
        other_indices = np.zeros(1, np.int32)
    ids = snapshot.node_ids[: snapshot.num_cached]
    if means is None:
        rows = np.zeros((m + 1, features.shape[1]), dtype=np.float32)
        take_rows(features, ids, rows[: snapshot.num_cached], page_cache)
        slot_of = np.append(snapshot.slot_of, np.int32(m))
    else:
        rows = np.zeros((2 * m + 1, features.shape[1]), dtype=np.float32)
        take_rows(features, ids, rows[: snapshot.num_cached], page_cache)
        rows[m : m + snapshot.num_cached] = means[ids]
        own = np.where(snapshot.slot_of < m, snapshot.slot_of, 2 * m)
        mean_rows = np.where(snapshot.slot_of < m, snapshot.slot_of + m, 2 * m)
        slot_of = np.concatenate([own, mean_rows, [2 * m]]).astype(np.int32)
    host = DeviceCache(
        node_ids=snapshot.node_ids,
        slot_of=slot_of,
        inclusion_prob=snapshot.inclusion_prob.astype(np.float32),
        features=rows,
        cached_indptr=cached_indptr,
        cached_indices=cached_indices,
        other_indptr=other_indptr,
        other_indices=other_indices,
        nonempty_prob=(
            nonempty_probability(graph, snapshot.inclusion_prob, m)
            if nonempty is None
            else nonempty
        ).astype(np.float32),
    )
    build_s = time.perf_counter() - start
    return put(host), build_s


class CacheSchedule:
    """A run's GNS cache, epoch by epoch: drawn at epoch 0 and every ``refresh`` epochs, its
    device arrays (:func:`build_device_cache`) replicated on every device of ``devices``.

    Args:
      graph, features: the graph and the feature store the cached rows are read from.
      sampler: the sampler that reads the cache (its ``cache_size``, ``needs_other`` and the
        number of layers, ``len(fanouts)``, for the random-walk distribution).
      dist: the distribution (:func:`cache_distribution`).
      refresh: redraw every this many epochs.
      rng: the generator of the draw made at an epoch (the loader's ``(seed, CACHE, epoch)``).
      meter: counts the bytes put, under the tag ``"cache"``, and the rows read from a mapped
        store (``meter.page_cache``).
      devices: where replicas live (``None``: the default device).
      train_idx: the training nodes (the random-walk distribution starts there).
      means: the neighbour means (an exact input layer), cached beside the rows.

    Attributes:
      epoch: the epoch at which the cache in use was drawn (-1: none yet).
      ids: int32 ``[num_cached]``, its distinct nodes (None: none yet).
    """

    def __init__(
        self,
        graph: CSRGraph,
        features: np.ndarray,
        sampler,
        *,
        dist: str,
        refresh: int,
        rng: Callable[[int], np.random.Generator],
        meter: TransferMeter,
        devices: Sequence = (None,),
        train_idx: np.ndarray | None = None,
        means: np.ndarray | None = None,
    ):
        self.graph, self.features, self.means = graph, features, means
        self.size, self.with_other = sampler.cache_size, sampler.needs_other
        self.refresh, self.rng, self.meter, self.devices = int(refresh), rng, meter, tuple(devices)
        self.probs = cache_distribution(
            graph, dist, train_idx=train_idx, num_steps=len(sampler.fanouts), features=features
        )
        self.nonempty = nonempty_probability(
            graph, inclusion_probability(self.probs, self.size), self.size
        )
        self.epoch, self.ids = -1, None
        self._replicas: dict = {}  # device -> its DeviceCache

    def on(self, device) -> DeviceCache | None:
        """The replica on ``device`` (None before :meth:`for_epoch`)."""
        return self._replicas.get(device)

    def restore(self, epoch: int, ids: np.ndarray | None) -> None:
        """Takes up a saved cache: drawn at ``epoch``, with distinct nodes ``ids``; its device
        arrays are rebuilt by the next :meth:`for_epoch`."""
        self.epoch, self.ids, self._replicas = int(epoch), ids, {}

    def for_epoch(self, epoch: int) -> tuple[float, int, int] | None:
        """Puts epoch ``epoch``'s cache on the devices, if it is not there: a fresh draw when a
        refresh is due at ``epoch``, else the draw in use (rebuilt from :attr:`ids` when it is
        the one a resumed run was using). Returns ``(seconds, num_cached, bytes)`` for a
        scheduled refresh at ``epoch``, None otherwise."""
        due = epoch - epoch % self.refresh  # the epoch whose cache is in use
        if epoch % self.refresh == 0 and self.epoch != epoch:
            return self._build(epoch, None)  # a scheduled refresh
        if not self._replicas or self.epoch != due:
            same = self.epoch == due and self.ids is not None
            self._build(due, self.ids if same else None)  # resumed
        return None

    def _build(self, epoch: int, ids: np.ndarray | None) -> tuple[float, int, int]:
        """The cache of ``epoch`` on every device, from ``ids`` or a fresh draw; returns the
        seconds it took, the distinct nodes and the bytes put on the devices."""
        start = time.perf_counter()
        bytes_before = self.meter.bytes_by_tag["cache"]
        if ids is None:
            snapshot = draw_cache(self.rng(epoch), self.probs, self.size)
        else:
            snapshot = snapshot_from_ids(ids, self.probs, self.size)
        put = self.meter.put
        self._replicas, _ = build_device_cache(
            self.graph,
            self.features,
            snapshot,
            put=lambda host: {d: put(host, tag="cache", device=d) for d in self.devices},
            with_other=self.with_other,
            means=self.means,
            nonempty=self.nonempty,
            page_cache=self.meter.page_cache,
        )
        jax.block_until_ready(list(self._replicas.values()))
        self.epoch = epoch
        self.ids = snapshot.node_ids[: snapshot.num_cached]
        moved = self.meter.bytes_by_tag["cache"] - bytes_before
        return time.perf_counter() - start, snapshot.num_cached, moved
