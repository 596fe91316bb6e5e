"""Defects put into the library on purpose, to show that each check can fail.

A check exists to catch a defect; :func:`mutated` puts one in for the duration of a ``with``
block (by replacing a library function at its module, where every caller looks it up), and the
tests assert that the check's verdict flips. The defects:

* ``drop-q``: the Horvitz-Thompson weights forget ``q_v = min(1, K / |N_C(v)|)``, the
  probability that a cached neighbour survives the cap ``K`` (one of the official code's
  variants): the aggregate is inflated by ``|N_C(v)| / K`` wherever the cap binds.
* ``pi-mp``: the inclusion probability is taken as ``m p_u`` instead of ``1 - (1 - p_u)^m``
  (right only when ``m p_u << 1``): the weights of frequently drawn nodes are too small.
* ``small-cache``: the cache is drawn with ten times fewer draws than the weights assume.
* ``first-k``: node-wise sampling takes the first ``K`` neighbours in storage order instead of a
  uniform sample (Floyd's algorithm replaced), which biases every layer where ``d_v > K``.
* ``min-q``: the HT weights take the official code's ``q_v = K / min(|N_C(v)|, K)`` (the
  ``minimum`` bug) instead of ``min(1, K / |N_C(v)|)``: too small wherever ``|N_C(v)| < K``.
* ``degree-plus-one``: the HT weights divide by ``d_v + 1`` (a self loop counted) instead of
  ``d_v``: the aggregate shrinks by ``d_v / (d_v + 1)``.
* ``hajek-normaliser``: the Hajek normaliser forgets ``q_v`` (it sums ``1 / pi_u`` instead of
  ``1 / (pi_u q_v)``): the weights of a node where the cap binds sum to ``1 / q_v > 1``.
* ``unscaled-fallback``: ``hajek-fallback``'s uniform picks of a node with no cached neighbour
  are weighted 1 each instead of ``1/k``: their aggregate is a sum, not a mean.
* ``ladies-unnormalised``: LADIES skips its row normalisation: a destination's coefficients
  ``P_uj / p_j`` no longer sum to 1.
* ``ns-sum``: node-wise sampling forgets its ``1/k``: the aggregate is the sum of the ``k``
  sampled neighbours, not their mean.

Nothing here is used outside the tests and ``python -m gns_jax.theory --mutate NAME``.
"""

from __future__ import annotations

import contextlib

import jax.numpy as jnp
import numpy as np

import gns_jax.cache as cache_lib
import gns_jax.native as native_lib
import gns_jax.sampling.gns as gns_lib
import gns_jax.sampling.ladies as ladies_lib
import gns_jax.sampling.nodewise as nodewise_lib

__all__ = ["MUTATIONS", "mutated"]

MUTATIONS = (
    "drop-q",
    "pi-mp",
    "small-cache",
    "first-k",
    "min-q",
    "degree-plus-one",
    "hajek-normaliser",
    "unscaled-fallback",
    "ladies-unnormalised",
    "ns-sum",
)


def _weights_without_q(original):
    def input_weights(
        kind, cache, topology, dst, nbrs, edge_mask, num_cached, max_fanout, *a, **kw
    ):
        if kind != "ht":
            return original(
                kind, cache, topology, dst, nbrs, edge_mask, num_cached, max_fanout, *a, **kw
            )
        safe = jnp.where(dst >= 0, dst, 0)
        degree = (topology.indptr[safe + 1] - topology.indptr[safe]).astype(jnp.float32)[:, None]
        pi = cache.inclusion_prob[jnp.where(edge_mask, nbrs, 0)]
        weight = 1.0 / (jnp.maximum(degree, 1.0) * jnp.maximum(pi, 1e-30))
        return jnp.where(edge_mask, weight, 0.0)

    return input_weights


def _degree(topology, dst):
    safe = jnp.where(dst >= 0, dst, 0)
    return (topology.indptr[safe + 1] - topology.indptr[safe]).astype(jnp.float32)[:, None]


def _weights_with(original, defect):
    """``input_weights`` with ``defect(kind, weight, args, kwargs)`` applied to its result."""

    def input_weights(kind, *args, **kwargs):
        return defect(kind, original(kind, *args, **kwargs), args, kwargs)

    return input_weights


def _min_q(original):
    def input_weights(kind, *args, **kwargs):
        return original("minimum" if kind == "ht" else kind, *args, **kwargs)

    return input_weights


def _plus_one(kind, weight, args, kwargs):
    if kind != "ht":
        return weight
    degree = _degree(args[1], args[2])
    return weight * degree / (degree + 1.0)


def _hajek_without_q(kind, weight, args, kwargs):
    if kind not in ("hajek", "hajek-scaled"):
        return weight
    num_cached, max_fanout = args[5], args[6]
    q = jnp.minimum(1.0, max_fanout / jnp.maximum(num_cached.astype(jnp.float32), 1.0))
    return weight / q[:, None]


def _unscaled_fallback(kind, weight, args, kwargs):
    if kind != "hajek-fallback":
        return weight
    edge_mask, from_cache = args[4], kwargs.get("from_cache")
    return jnp.where(edge_mask & ~from_cache, 1.0, weight)


def _rows_unnormalised(scaled, owner, member, max_dst):
    return jnp.where(member, scaled, 0.0)


def _sum_not_mean(original):
    def expand_layer(key, topology, dst, fanout):
        nbrs, edge_mask, _ = original(key, topology, dst, fanout)
        return nbrs, edge_mask, jnp.where(edge_mask, 1.0, 0.0)

    return expand_layer


def _linear_inclusion(p, num_draws):
    return np.asarray(p, dtype=np.float64) * num_draws


def _small_draw(original):
    def draw_cache(rng, p, num_draws):
        snapshot = original(rng, p, max(1, num_draws // 10))
        padded = np.full(num_draws, -1, dtype=np.int32)
        padded[: snapshot.num_cached] = snapshot.node_ids[: snapshot.num_cached]
        small = snapshot.node_ids.shape[0]
        slot_of = np.where(snapshot.slot_of < small, snapshot.slot_of, num_draws)
        return cache_lib.CacheSnapshot(
            padded,
            snapshot.num_cached,
            slot_of.astype(np.int32),
            cache_lib.inclusion_probability(p, num_draws),  # the weights still assume m draws
        )

    return draw_cache


def _first_k(key, degree, k):
    columns = jnp.arange(k, dtype=jnp.int32)[None, :]
    return jnp.broadcast_to(columns, (degree.shape[0], k))


@contextlib.contextmanager
def mutated(name: str | None):
    """Runs the ``with`` block with the defect ``name`` in the library (None: no defect)."""
    if name is None:
        yield
        return
    if name not in MUTATIONS:
        raise ValueError(f"unknown mutation {name!r} (known: {MUTATIONS})")
    patches = {
        "drop-q": [(gns_lib, "input_weights", _weights_without_q(gns_lib.input_weights))],
        "pi-mp": [(cache_lib, "inclusion_probability", _linear_inclusion)],
        "small-cache": [(cache_lib, "draw_cache", _small_draw(cache_lib.draw_cache))],
        "first-k": [(nodewise_lib, "sample_without_replacement", _first_k)],
        "min-q": [(gns_lib, "input_weights", _min_q(gns_lib.input_weights))],
        "degree-plus-one": [
            (gns_lib, "input_weights", _weights_with(gns_lib.input_weights, _plus_one))
        ],
        "hajek-normaliser": [
            (gns_lib, "input_weights", _weights_with(gns_lib.input_weights, _hajek_without_q))
        ],
        "unscaled-fallback": [
            (gns_lib, "input_weights", _weights_with(gns_lib.input_weights, _unscaled_fallback))
        ],
        "ladies-unnormalised": [(ladies_lib, "row_normalise", _rows_unnormalised)],
        "ns-sum": [(nodewise_lib, "expand_layer", _sum_not_mean(nodewise_lib.expand_layer))],
    }[name]
    # The native CPU kernels (gns_jax.native) bypass the JAX functions patched here.
    patches.append((native_lib, "available", lambda: False))
    saved = [(module, attr, getattr(module, attr)) for module, attr, _ in patches]
    try:
        for module, attr, value in patches:
            setattr(module, attr, value)
        yield
    finally:
        for module, attr, value in saved:
            setattr(module, attr, value)
