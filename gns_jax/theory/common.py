"""What every check shares: the settings, the verdict record, and the Monte Carlo input layer.

Nothing here samples on its own: the input-layer estimators run the library's cache
(:func:`gns_jax.cache.draw_cache`, :func:`gns_jax.cache.build_device_cache`) and its GNS input layer
(:func:`gns_jax.sampling.gns.cache_first_layer`, :func:`gns_jax.sampling.gns.input_weights`), looked
up at their modules at call time, so that :mod:`gns_jax.theory.mutations` can put a defect in and
the tests can show that a check catches it; the node-wise reference runs
:func:`gns_jax.sampling.nodewise.expand_layer`.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import gns_jax.cache as cache_lib
import gns_jax.sampling.gns as gns_lib
import gns_jax.sampling.ladies as ladies_lib
import gns_jax.sampling.nodewise as nodewise_lib
from gns_jax.cache import CacheSnapshot
from gns_jax.graph import CSRGraph
from gns_jax.sampling.nodewise import DeviceTopology

__all__ = [
    "FULL",
    "SMALL",
    "TINY",
    "Check",
    "Setting",
    "bonferroni_z",
    "by_fraction",
    "gns_input_draws",
    "loglog_slope",
    "ns_input_draws",
    "override",
    "scalar_signal",
    "targets_with_hubs",
]

ESTIMATORS = ("ht", "hajek", "clipped")  # the unbiased estimator and its lower-variance rivals


@dataclasses.dataclass(frozen=True)
class Setting:
    """Sizes of every check. ``TINY`` is what the tests run, ``SMALL`` the default of
    ``python -m gns_jax.theory`` (on 2 cores with its two worker processes: the busiest about
    100 s CPU with an empty compilation cache, 90 s with a warm one), ``FULL`` the report."""

    name: str
    dataset: str = "cora"  # checks 1 and 2 (the estimators)
    model_dataset: str = "amazon_photo"  # checks 3 to 5 (a GraphSAGE): mean degree 31 > K
    fanout: int = 10  # K of the GNS input layer and of the node-wise reference
    # 1. unbiasedness
    unbiased_fractions: tuple[float, ...] = (0.2,)
    unbiased_draws: int = 1500
    targets: int = 300
    hub_share: float = 0.25  # of the targets: the highest-degree ones, where the cap K binds
    # 2. variance
    variance_fraction: float = 0.2
    variance_draws: int = 3000
    slope_fractions: tuple[float, ...] = (0.0025, 0.005, 0.01, 0.02)
    slope_draws: int = 3000
    estimator_fractions: tuple[float, ...] = (0.01, 0.05, 0.2)
    estimator_draws: int = 1000
    # 3. gradient error
    hidden: int = 64
    grad_fanouts: tuple[int, ...] = (10, 10)  # output layer first, as on the command line
    grad_fractions: tuple[float, ...] = (0.01, 0.05, 0.2, 0.5)
    grad_estimators: tuple[str, ...] = ("ht", "hajek")
    grad_samples: int = 32
    grad_batches: int = 2
    grad_batch_size: int = 128
    train_steps: int = 100
    # 4. convergence rate
    conv_fractions: tuple[float, ...] = (0.01, 0.2)
    conv_estimators: tuple[str, ...] = ("ht",)
    conv_horizons: tuple[int, ...] = (120, 240, 480)  # a factor of 4
    conv_seeds: int = 3
    conv_batch_size: int = 40
    conv_evals: int = 8  # full-gradient evaluations per run, evenly spaced
    power_iterations: int = 20


TINY = Setting(
    name="tiny",
    unbiased_draws=600,
    targets=120,
    variance_draws=1000,
    slope_fractions=(0.005, 0.02),
    slope_draws=800,
    estimator_fractions=(0.05,),
    estimator_draws=300,
    hidden=32,
    grad_fractions=(0.02, 0.2, 0.5),
    grad_estimators=("ht",),
    grad_samples=16,
    grad_batches=1,
    train_steps=40,
    conv_fractions=(0.2,),
    conv_horizons=(50, 100, 200),
    conv_seeds=2,
    conv_evals=5,
    power_iterations=8,
)
# The default of ``python -m gns_jax.theory``. Its horizons stay those of the dataclass: with 60-240
# steps NS's A(T) had not yet started to fall (check 4a failed).
SMALL = Setting(
    name="small",
    variance_draws=1500,
    slope_draws=1200,
    estimator_draws=500,
    grad_fractions=(0.01, 0.1, 0.5),
    grad_samples=16,
    conv_evals=6,
)
FULL = Setting(
    name="full",
    unbiased_fractions=(0.01, 0.05, 0.2),
    unbiased_draws=4000,
    targets=1000,
    variance_draws=8000,
    slope_fractions=(0.001, 0.002, 0.005, 0.01, 0.02),
    slope_draws=8000,
    estimator_fractions=(0.001, 0.01, 0.05, 0.2),
    estimator_draws=4000,
    grad_fractions=(0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5),
    grad_estimators=("ht", "hajek", "exact"),
    grad_samples=64,
    grad_batches=4,
    conv_fractions=(0.01, 0.02, 0.05, 0.1, 0.2, 0.5),
    conv_estimators=("ht", "hajek"),
    conv_horizons=(250, 500, 1000),
    conv_seeds=4,
    conv_evals=12,
)
SETTINGS = {s.name: s for s in (TINY, SMALL, FULL)}


def override(setting: Setting, assignments: list[str]) -> Setting:
    """``setting`` with ``FIELD=VALUE`` assignments applied, each value parsed as its field's
    type (tuples comma-separated); the name gains the assignments, so reports say what ran.
    Raises ``ValueError`` naming the assignment that is wrong."""
    fields = {f.name: f for f in dataclasses.fields(Setting)}
    changes = {}
    for text in assignments:
        name, sep, value = text.partition("=")
        if not sep or name not in fields or name == "name":
            known = ", ".join(n for n in fields if n != "name")
            raise ValueError(f"{text!r} is not FIELD=VALUE with a FIELD of: {known}")
        current = getattr(setting, name)
        kind = type(current[0]) if isinstance(current, tuple) and current else type(current)
        try:
            parts = [kind(v) for v in value.split(",") if v] if isinstance(current, tuple) else None
            changes[name] = tuple(parts) if parts is not None else kind(value)
        except ValueError:
            raise ValueError(f"{text!r}: {value!r} is not a {kind.__name__}") from None
        if isinstance(current, tuple) and not changes[name]:
            raise ValueError(f"{text!r}: an empty list")
    return dataclasses.replace(setting, name=f"{setting.name}, {' '.join(assignments)}", **changes)


class Check(NamedTuple):
    """One verdict, as printed and as a row of gns_jax/theory/README.md.

    A check (``finding=False``) tests the implementation or the theory's own prediction and is
    ``PASS`` or ``FAIL``; a finding reports whether one of the paper's claims holds on the
    measured numbers (``HOLDS`` or ``DOES NOT HOLD``): a negative finding is a result, not an
    error, and does not change the exit status.
    """

    claim: str
    module: str
    measured: str
    criterion: str
    passed: bool
    finding: bool = False

    @property
    def verdict(self) -> str:
        if self.finding:
            return "HOLDS" if self.passed else "DOES NOT HOLD"
        return "PASS" if self.passed else "FAIL"


def progress(message: str, since: float | None = None) -> None:
    """One progress line on stderr (``(12 s)`` appended when ``since`` is a perf_counter start):
    the report setting's modules run for tens of minutes."""
    tail = "" if since is None else f" ({time.perf_counter() - since:.0f} s)"
    print(f"   {message}{tail}", file=sys.stderr, flush=True)


def by_fraction(rows: list[dict], key: str) -> str:
    """``"1%: 0.123, 5%: 0.0456"``: one figure per cache fraction, for a check's measured text."""
    return ", ".join(f"{100 * r['fraction']:g}%: {r[key]:.3g}" for r in rows)


def bonferroni_z(num_tests: int, alpha: float = 0.01) -> float:
    """Two-sided z threshold keeping the family-wise false-alarm rate of ``num_tests`` at alpha."""
    return statistics.NormalDist().inv_cdf(1.0 - alpha / (2.0 * max(num_tests, 1)))


def loglog_slope(x, y) -> float:
    """Least-squares slope of ``log y`` against ``log x``."""
    return float(np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), 1)[0])


def scalar_signal(graph: CSRGraph, seed: int = 0) -> np.ndarray:
    """The scalar node feature of the estimator checks: ``x_v ~ N(1, 1)``, fixed by ``seed``."""
    return np.random.default_rng([seed, 7]).normal(1.0, 1.0, graph.num_nodes)


def exact_means(graph: CSRGraph, x: np.ndarray) -> np.ndarray:
    """The full-neighbourhood mean ``mu_v = (1/d_v) sum_{u in N(v)} x_u`` (0 for isolated v)."""
    senders, receivers = graph.edges()
    total = np.bincount(receivers, weights=x[senders], minlength=graph.num_nodes)
    return total / np.maximum(graph.degrees(), 1)


def distribution(graph: CSRGraph, kind: str, x: np.ndarray) -> np.ndarray:
    """The cache distribution ``kind`` for the scalar feature ``x``."""
    return cache_lib.cache_distribution(graph, kind, features=np.asarray(x, float)[:, None])


def targets_with_hubs(
    graph: CSRGraph, p: np.ndarray, m: int, draws: int, count: int, hub_share: float
) -> np.ndarray:
    """Target nodes whose z-test is valid, a share of them the highest-degree such nodes.

    Valid: every neighbour is cached and not cached about 10 times in ``draws`` draws
    (``draws min(pi, 1 - pi) >= 10``), so the Monte Carlo standard error is estimable. The hubs
    are where ``|N_C(v)|`` exceeds ``K``, the only place a defect in ``q_v`` shows.
    """
    pi = cache_lib.inclusion_probability(p, m)
    ok_edge = np.minimum(pi, 1 - pi)[graph.indices] * draws >= 10
    bad = np.bincount(
        np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr)),
        weights=~ok_edge,
        minlength=graph.num_nodes,
    )
    eligible = np.flatnonzero((graph.degrees() > 0) & (bad == 0))
    hubs = int(round(count * hub_share))
    by_degree = eligible[np.argsort(-graph.degrees()[eligible], kind="stable")]
    top = by_degree[:hubs]
    rest = np.setdiff1d(eligible, top)
    step = max(1, rest.size // max(count - top.size, 1))
    return np.sort(np.concatenate([top, rest[::step][: count - top.size]]))


def draw_without_replacement(rng: np.random.Generator, p: np.ndarray, m: int) -> CacheSnapshot:
    """The cache of the official scripts that the README runs: ``m`` distinct nodes drawn
    without replacement, yet paired with the with-replacement ``pi = 1 - (1 - p)^m``: a biased
    variant that check 1 reports."""
    n = p.shape[0]
    ids = np.sort(rng.choice(n, size=m, replace=False, p=p)).astype(np.int32)
    slot_of = np.full(n, m, dtype=np.int32)
    slot_of[ids] = np.arange(m, dtype=np.int32)
    return CacheSnapshot(ids, m, slot_of, cache_lib.inclusion_probability(p, m))


class InputDraws(NamedTuple):
    """Monte Carlo draws of the GNS input-layer aggregate at a set of target nodes.

    Attributes:
      values: ``{weights: float64 [draws, targets]}``, ``h_v = sum_u w_uv x_u``.
      num_cached: int ``[draws, targets]``, ``|N_C(v)|`` of each draw's cache.
      srs_var: float64 ``[draws, targets]``, the exact conditional variance, given the cache, of
        the ``ht`` estimator from sampling ``K`` of ``|N_C(v)|`` (``docs/algorithm.md``,
        variance item 3).
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
    dist: str = "degree",
    top_up: bool = False,
    fallback: int = 0,
    seed: int = 0,
) -> InputDraws:
    """Draws a fresh cache (from ``dist``) and a fresh input-layer sample ``draws`` times.

    Every weighting in ``weights`` is applied to the same sampled edges. ``replace=False`` draws
    the cache without replacement (see :func:`draw_without_replacement`). ``top_up=True`` samples
    as a cache-first upper layer does: ``K`` neighbours, the cached ones first, topped up with
    non-cached ones (then ``weights=("none",)`` is that layer's estimator, ``1/k`` each).
    ``fallback=F > 0`` samples as ``hajek-fallback`` does: a target with no cached neighbour takes
    ``F`` uniform neighbours instead (then ``weights=("hajek-fallback",)``).
    """
    topology = DeviceTopology.from_graph(graph)
    probs = distribution(graph, dist, x)
    m = cache_lib.cache_size(fraction, graph.num_nodes)
    dst = jnp.asarray(targets, dtype=jnp.int32)
    x_dev = jnp.asarray(x, dtype=jnp.float32)
    degree = jnp.asarray(np.maximum(graph.degrees(), 1), dtype=jnp.float32)
    width = max(1, int(graph.degrees()[targets].max()))
    first_layer, layer_weights = gns_lib.cache_first_layer, gns_lib.input_weights

    @jax.jit
    def one(key, cache):
        low = fallback if fallback else (fanout if top_up else 0)
        nbrs, mask, num_cached, from_cache = first_layer(
            key, cache, dst, low, fanout, bool(fallback)
        )
        gathered = x_dev[jnp.where(mask, nbrs, 0)]
        extra = {"from_cache": from_cache} if fallback else {}
        out = {
            w: jnp.sum(
                layer_weights(w, cache, topology, dst, nbrs, mask, num_cached, fanout, **extra)
                * gathered,
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
    nonempty = None  # P(N_C(v) non-empty) depends on the distribution and m only: once
    values = {w: [] for w in weights}
    counts, srs_var = [], []
    draw = cache_lib.draw_cache
    for t in range(draws):
        snap = draw(rng, probs, m) if replace else draw_without_replacement(rng, probs, m)
        if nonempty is None:
            nonempty = cache_lib.nonempty_probability(graph, snap.inclusion_prob, m)
        cache, _ = cache_lib.build_device_cache(
            graph, dummy, snap, with_other=top_up or fallback > 0, nonempty=nonempty
        )
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


def ladies_row_sums(
    graph: CSRGraph, seeds: np.ndarray, samples: int, draws: int, *, layers: int = 2, seed: int = 0
) -> np.ndarray:
    """The sum of every real destination's LADIES coefficients in every block of ``draws``
    batches rooted at ``seeds`` (``samples`` nodes per layer): float64 ``[draws, entries]``.
    Runs :func:`gns_jax.sampling.ladies.sample_ladies_blocks` (looked up at call time)."""
    topology = DeviceTopology.from_graph(graph)
    per_layer = (int(samples),) * layers
    budget = ladies_lib.ladies_budget(len(seeds), per_layer, graph.degrees())
    padded = np.full(budget.max_seeds, -1, dtype=np.int32)
    padded[: len(seeds)] = seeds
    sample = ladies_lib.sample_ladies_blocks

    @jax.jit
    def one(key):
        batch = sample(key, topology, jnp.asarray(padded), samples=per_layer, budget=budget)
        sums = []
        for block in batch.blocks:
            rows = jax.ops.segment_sum(
                block.edge_weight, block.receivers, num_segments=block.dst_mask.shape[0]
            )
            sums.append(jnp.where(block.dst_mask, rows, jnp.nan))
        return jnp.concatenate(sums)

    key = jax.random.key(seed)
    out = jax.device_get([one(jax.random.fold_in(key, t)) for t in range(draws)])
    return np.asarray(out, dtype=np.float64)


def ns_input_draws(
    graph: CSRGraph, x: np.ndarray, targets: np.ndarray, draws: int, *, fanout: int, seed: int = 0
) -> np.ndarray:
    """Node-wise sampling's input aggregate ``(1/k) sum_{u in S} x_u``, ``[draws, targets]``."""
    topology = DeviceTopology.from_graph(graph)
    dst = jnp.asarray(targets, dtype=jnp.int32)
    x_dev = jnp.asarray(x, dtype=jnp.float32)
    expand = nodewise_lib.expand_layer

    @jax.jit
    def many(keys):
        def one(key):
            nbrs, mask, weight = expand(key, topology, dst, fanout)
            return jnp.sum(weight * x_dev[jnp.where(mask, nbrs, 0)], axis=1)

        return jax.lax.map(one, keys)

    keys = jax.random.split(jax.random.key(seed), draws)
    return np.asarray(many(keys), dtype=np.float64)
