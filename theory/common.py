"""What every check shares: the settings, the result record, and the Monte Carlo GNS input layer.

Nothing here samples on its own: the input-layer estimator runs the library's cache
(:func:`gns_jax.cache.draw_cache`, :func:`gns_jax.cache.build_device_cache`) and its GNS input
layer (:func:`gns_jax.sampling.gns.cache_first_layer`, :func:`gns_jax.sampling.gns.input_weights`);
the node-wise reference runs :func:`gns_jax.sampling.nodewise.expand_layer`.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gns_jax.cache import (
    CacheSnapshot,
    build_device_cache,
    cache_distribution,
    cache_size,
    draw_cache,
    inclusion_probability,
)
from gns_jax.graph import CSRGraph
from gns_jax.sampling.gns import cache_first_layer, input_weights
from gns_jax.sampling.nodewise import DeviceTopology, expand_layer

__all__ = [
    "FULL",
    "SMALL",
    "Check",
    "Setting",
    "bonferroni_z",
    "by_fraction",
    "gns_input_draws",
    "ns_input_draws",
    "scalar_signal",
]


@dataclasses.dataclass(frozen=True)
class Setting:
    """Sizes of every check. ``SMALL`` runs in minutes on 2 CPU cores; ``FULL`` is the report."""

    name: str
    dataset: str = "cora"  # checks 1 and 2 (the estimator)
    model_dataset: str = "amazon_photo"  # checks 3 and 4 (a GraphSAGE): mean degree 31 > K
    fanout: int = 10  # K of the GNS input layer and of the node-wise reference
    # 1. unbiasedness
    unbiased_fractions: tuple[float, ...] = (0.2,)
    unbiased_draws: int = 1500
    targets: int = 300
    # 2. variance
    variance_fraction: float = 0.2
    variance_draws: int = 3000
    slope_fractions: tuple[float, ...] = (0.0025, 0.005, 0.01, 0.02)
    slope_draws: int = 3000
    # 3. gradient error
    hidden: int = 64
    grad_fanouts: tuple[int, ...] = (10, 10)  # output layer first, as on the command line
    grad_fractions: tuple[float, ...] = (0.01, 0.05, 0.2, 0.5)
    grad_samples: int = 32
    grad_batches: int = 2
    grad_batch_size: int = 128
    train_steps: int = 100
    # 4. convergence
    conv_fractions: tuple[float, ...] = (0.01, 0.05, 0.2, 0.5)
    conv_steps: int = 200
    conv_seeds: int = 3
    conv_batch_size: int = 40
    conv_samples: int = 32
    conv_every: int = 10
    power_iterations: int = 20


SMALL = Setting(name="small")
FULL = Setting(
    name="full",
    unbiased_fractions=(0.01, 0.05, 0.2),
    unbiased_draws=4000,
    targets=1000,
    variance_draws=8000,
    slope_fractions=(0.001, 0.002, 0.005, 0.01, 0.02),
    slope_draws=8000,
    grad_fractions=(0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5),
    grad_samples=128,
    grad_batches=8,
    conv_fractions=(0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5),
    conv_steps=1000,
    conv_seeds=5,
    conv_every=20,
    conv_samples=128,
)


class Check(NamedTuple):
    """One claim's verdict, as printed and as a row of theory/README.md."""

    claim: str
    module: str
    measured: str
    criterion: str
    passed: bool


def by_fraction(rows: list[dict], key: str) -> str:
    """``"1%: 0.123, 5%: 0.0456"``: one figure per cache fraction, for a check's measured text."""
    return ", ".join(f"{100 * r['fraction']:g}%: {r[key]:.3g}" for r in rows)


def bonferroni_z(num_tests: int, alpha: float = 0.01) -> float:
    """Two-sided z threshold keeping the family-wise false-alarm rate of ``num_tests`` at alpha."""
    return statistics.NormalDist().inv_cdf(1.0 - alpha / (2.0 * max(num_tests, 1)))


def scalar_signal(graph: CSRGraph, seed: int = 0) -> np.ndarray:
    """The scalar node feature of the estimator checks: ``x_v ~ N(1, 1)``, fixed by ``seed``."""
    return np.random.default_rng([seed, 7]).normal(1.0, 1.0, graph.num_nodes)


def exact_means(graph: CSRGraph, x: np.ndarray) -> np.ndarray:
    """The full-neighbourhood mean ``mu_v = (1/d_v) sum_{u in N(v)} x_u`` (0 for isolated v)."""
    senders, receivers = graph.edges()
    total = np.bincount(receivers, weights=x[senders], minlength=graph.num_nodes)
    return total / np.maximum(graph.degrees(), 1)


def draw_without_replacement(rng: np.random.Generator, p: np.ndarray, m: int) -> CacheSnapshot:
    """The C-prob cache (GNS.md section 1.2): ``m`` distinct nodes drawn without replacement,
    yet paired with the with-replacement ``pi = 1 - (1 - p)^m``: the biased variant of check 1."""
    n = p.shape[0]
    ids = np.sort(rng.choice(n, size=m, replace=False, p=p)).astype(np.int32)
    slot_of = np.full(n, m, dtype=np.int32)
    slot_of[ids] = np.arange(m, dtype=np.int32)
    return CacheSnapshot(ids, m, slot_of, inclusion_probability(p, m))


class InputDraws(NamedTuple):
    """Monte Carlo draws of the GNS input-layer aggregate at a set of target nodes.

    Attributes:
      values: ``{weights: float64 [draws, targets]}``, ``h_v = sum_u w_uv x_u``.
      num_cached: int ``[draws, targets]``, ``|N_C(v)|`` of each draw's cache.
      srs_var: float64 ``[draws, targets]``, the exact conditional variance, given the cache, of
        the ``ht`` estimator from sampling ``K`` of ``|N_C(v)|`` (GNS.md section 2.2, item 3).
    """

    values: dict[str, np.ndarray]
    num_cached: np.ndarray
    srs_var: np.ndarray


def gns_input_draws(
    graph: CSRGraph,
    x: np.ndarray,
    targets: np.ndarray,
    fraction: float,
    draws: int,
    *,
    fanout: int = 10,
    weights: tuple[str, ...] = ("ht",),
    replace: bool = True,
    seed: int = 0,
) -> InputDraws:
    """Draws a fresh degree-proportional cache and a fresh input-layer sample ``draws`` times.

    Every weighting in ``weights`` is applied to the same sampled edges. ``replace=False`` draws
    the cache without replacement (see :func:`draw_without_replacement`).
    """
    topology = DeviceTopology.from_graph(graph)
    probs = cache_distribution(graph, "degree")
    m = cache_size(fraction, graph.num_nodes)
    dst = jnp.asarray(targets, dtype=jnp.int32)
    x_dev = jnp.asarray(x, dtype=jnp.float32)
    degree = jnp.asarray(np.maximum(graph.degrees(), 1), dtype=jnp.float32)
    width = max(1, int(graph.degrees()[targets].max()))

    @jax.jit
    def one(key, cache):
        nbrs, mask, num_cached, _ = cache_first_layer(key, cache, dst, 0, fanout)
        gathered = x_dev[jnp.where(mask, nbrs, 0)]
        out = {
            w: jnp.sum(
                input_weights(w, cache, topology, dst, nbrs, mask, num_cached, fanout) * gathered,
                axis=1,
            )
            for w in weights
        }
        # y_u = x_u / (d_v pi_u) over the cached neighbours of every target (<= width of them).
        start = cache.cached_indptr[dst]
        cols = jnp.arange(width)[None, :]
        valid = cols < num_cached[:, None]
        u = cache.cached_indices[jnp.where(valid, start[:, None] + cols, 0)]
        y = jnp.where(valid, x_dev[u] / (degree[dst][:, None] * cache.inclusion_prob[u]), 0.0)
        n = num_cached.astype(jnp.float32)
        mean = jnp.sum(y, axis=1) / jnp.maximum(n, 1.0)
        s2 = jnp.sum(jnp.where(valid, (y - mean[:, None]) ** 2, 0.0), axis=1) / jnp.maximum(
            n - 1.0, 1.0
        )
        srs = jnp.where(n > fanout, n**2 * (1.0 - fanout / jnp.maximum(n, 1.0)) * s2 / fanout, 0.0)
        return out, num_cached, srs

    rng = np.random.default_rng([seed, int(fraction * 1e6), int(replace)])
    dummy = np.zeros((graph.num_nodes, 1), np.float32)
    values = {w: [] for w in weights}
    counts, srs_var = [], []
    for t in range(draws):
        snap = draw_cache(rng, probs, m) if replace else draw_without_replacement(rng, probs, m)
        cache, _ = build_device_cache(graph, dummy, snap)
        out, num_cached, srs = one(jax.random.key(t), cache)
        for w in weights:
            values[w].append(out[w])
        counts.append(num_cached)
        srs_var.append(srs)
    stacked = jax.device_get((values, counts, srs_var))
    return InputDraws(
        values={w: np.asarray(v, dtype=np.float64) for w, v in stacked[0].items()},
        num_cached=np.asarray(stacked[1]),
        srs_var=np.asarray(stacked[2], dtype=np.float64),
    )


def ns_input_draws(
    graph: CSRGraph, x: np.ndarray, targets: np.ndarray, draws: int, *, fanout: int, seed: int = 0
) -> np.ndarray:
    """Node-wise sampling's input aggregate ``(1/k) sum_{u in S} x_u``, ``[draws, targets]``."""
    topology = DeviceTopology.from_graph(graph)
    dst = jnp.asarray(targets, dtype=jnp.int32)
    x_dev = jnp.asarray(x, dtype=jnp.float32)

    @jax.jit
    def many(keys):
        def one(key):
            nbrs, mask, weight = expand_layer(key, topology, dst, fanout)
            return jnp.sum(weight * x_dev[jnp.where(mask, nbrs, 0)], axis=1)

        return jax.lax.map(one, keys)

    keys = jax.random.split(jax.random.key(seed), draws)
    return np.asarray(many(keys), dtype=np.float64)
