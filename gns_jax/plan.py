"""Choosing the cache fraction: a short pilot that measures GNS's gradient noise against NS's.

``gns-jax train --cache-fraction auto`` and ``gns-jax plan`` call :func:`plan_cache_fraction`.
The pilot answers, on the graph at hand, "what is the smallest cache whose GNS gradient is about
as good as NS's?", because what a cache costs in accuracy depends on the graph, its absolute
size and its features, and no closed-form statistic tried here predicted it
(``docs/reports/2026-12-cache-size-prediction.md``).

**What it measures.** SGD's progress per step is governed by the mean squared error of the
stochastic gradient against the full gradient ``G``: the minibatch's own noise, which NS and GNS
share (the same seeds), plus the error of sampling neighbours, where they differ (GNS's comes from
the cache: variance, and the bias of the self-normalised weights and of nodes with no cached
neighbour). The pilot trains the run's model with NS for a few warm-up steps (the run's optimiser,
seed and dropout stream), then, at those parameters, takes the gradients of ``R`` batches (the
run's own seed batches, shuffled as in the run) under NS and under GNS at each tried fraction
(each loader draws its own cache, redrawn at each epoch boundary as in the run). With ``g_b`` a
batch's gradient and ``G_{-b}`` the mean of the *other* batches' NS gradients (independent of
``g_b``), the noise of a sampler is

    N = mean_b ||g_b - G_{-b}||^2

and the same for both samplers up to one shared term (``G_{-b}``'s own noise). Its ratio
``noise_ratio = N_GNS / N_NS`` is the factor by which GNS's SGD noise, bias included, exceeds
NS's. A fraction *keeps up* when ``noise_ratio <= NOISE_LIMIT`` and its batches move at most
``ROWS_LIMIT`` of NS's feature rows (above that the cache no longer saves the copies it is for).

**What it picks.** It tries the fractions of :data:`FRACTIONS` in increasing order (at least two)
and stops at the first that keeps up, or at one that moves more rows than the limit (larger
caches move more still), never before the second; ``chosen`` is that fraction. When none keeps
up, it picks the one with the lowest noise ratio among those within the rows limit (the first
when none is; ``keeps_up: false``) and says so: NS is then the better sampler for the graph.

``NOISE_LIMIT`` and ``BATCHES`` were set on a first sweep of ``experiments/plan.py`` (seeds 0-3,
a limit of 1.2 over 8 batches: it chose caches that ended 1.1-2.8 points below NS on Cora and the
synthetic graphs) and validated on seeds 4-7 (``experiments/reports/plan``). Deterministic: the same
seed and machine give the same choice (the measurement uses no clock).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from gns_jax.config import TrainConfig
from gns_jax.data import Dataset
from gns_jax.errors import ConfigError
from gns_jax.factories import make_loader, make_model, make_optimizer, make_sampler
from gns_jax.loader import DROPOUT, INIT, DeviceBatch
from gns_jax.step import init_state
from gns_jax.tasks import LossFn, Task, masked_mean

__all__ = ["FRACTIONS", "NOISE_LIMIT", "ROWS_LIMIT", "plan_cache_fraction"]

FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
NOISE_LIMIT = 1.1
ROWS_LIMIT = 0.6
WARMUP = 10  # NS steps before the measurement (at most one epoch)
BATCHES = 16  # measured batches per sampler


def _gradient_fn(graphdef: nnx.GraphDef, loss: LossFn):
    @jax.jit
    def grads(params, rest, batch: DeviceBatch, key):
        def loss_fn(p):
            model = nnx.merge(graphdef, p, rest, copy=True)
            logits = model(batch.x, batch.blocks, key=key)
            return masked_mean(loss(logits, batch.labels), batch.seed_mask)

        value, g = jax.value_and_grad(loss_fn)(params)
        flat = jnp.concatenate([jnp.ravel(x) for x in jax.tree.leaves(g)])
        return value, g, flat

    return grads


def _update_fn(tx: optax.GradientTransformation):
    @jax.jit
    def update(params, opt_state, g):
        updates, opt_state = tx.update(g, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return update


def _positions(start: int, count: int, num_batches: int) -> tuple[int, int, int]:
    """The (start epoch, start index, end epoch) that cover ``count`` batches from ``start``."""
    return start // num_batches, start % num_batches, -(-(start + count) // num_batches)


def plan_cache_fraction(
    dataset: Dataset,
    config: TrainConfig,
    features: np.ndarray,
    task: Task,
    *,
    model: nnx.Module | None = None,
    optimizer: optax.GradientTransformation | None = None,
    loss: LossFn | None = None,
    fractions: tuple[float, ...] = FRACTIONS,
    noise_limit: float = NOISE_LIMIT,
    rows_limit: float = ROWS_LIMIT,
    warmup: int = WARMUP,
    batches: int = BATCHES,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Runs the pilot and returns the ``plan`` object of the run JSON (``docs/results.md``):
    ``fractions`` (tried, in order), ``measured`` (one entry each: ``fraction``,
    ``noise_ratio``, ``rows_per_batch``, ``rows_vs_ns``, ``keeps_up``), ``ns`` (its noise and
    rows per batch), ``chosen``, ``keeps_up``, ``criterion``, ``warmup_steps``, ``batches``,
    ``seconds``.

    ``dataset``'s labels are in ``task``'s form and ``features`` is the matrix the run reads
    (:func:`gns_jax.factories.prepare_features`); ``model`` (default: the command's GraphSAGE
    with the run's initialisation) is not changed. Runs on one device.
    """
    if config.sampler != "gns":
        raise ConfigError("cache_fraction", "auto is for --sampler gns")
    if len(fractions) < 2 or sorted(fractions) != list(fractions):
        raise ConfigError("fractions", f"at least two, increasing; got {fractions}")
    if batches < 2:
        raise ConfigError("batches", f"the noise needs at least 2 batches, got {batches}")
    log = log or (lambda line: None)
    start = time.perf_counter()
    config = config.replace(prefetch=0, devices=1, parallel="data")
    with jax.transfer_guard_host_to_device("allow"):
        base = jax.random.key(config.seed)
        if model is None:
            model = make_model(dataset, config, jax.random.fold_in(base, INIT))
        dropout = jax.random.fold_in(base, DROPOUT)
    tx = make_optimizer(config) if optimizer is None else optimizer
    graphdef, state = init_state(model, tx)  # copies: the caller's model is not changed
    grads = _gradient_fn(graphdef, loss or task.loss)
    update = _update_fn(tx)

    def loader_of(fraction: float | None):
        cfg = (
            config.replace(sampler="ns")
            if fraction is None
            else config.replace(cache_fraction=fraction)
        )
        return make_loader(dataset, cfg, make_sampler(dataset, cfg), features)

    ns = loader_of(None)
    num_batches = ns.num_batches
    warmup = min(warmup, num_batches)
    params, opt_state, rest = state.params, state.opt_state, state.rest
    # Warm-up: NS steps from the run's initialisation (the run's first batches and keys).
    if warmup:
        e0, i0, e1 = _positions(0, warmup, num_batches)
        it = ns.batches(e0, e1, i0)
        try:
            for t in range(warmup):
                batch = next(it)
                with jax.transfer_guard_host_to_device("allow"):
                    key = jax.random.fold_in(dropout, t)
                _, g, _ = grads(params, rest, batch.inputs, key)
                params, opt_state = update(params, opt_state, g)
        finally:
            it.close()

    def measure(loader) -> tuple[list[np.ndarray], float]:
        e0, i0, e1 = _positions(warmup, batches, num_batches)
        it = loader.batches(e0, e1, i0)
        out, rows = [], 0
        try:
            for t in range(warmup, warmup + batches):
                batch = next(it)
                with jax.transfer_guard_host_to_device("allow"):
                    key = jax.random.fold_in(dropout, t)
                _, _, flat = grads(params, rest, batch.inputs, key)
                out.append(np.asarray(jax.device_get(flat), dtype=np.float64))
                rows += batch.rows_moved
        finally:
            it.close()
        return out, rows / batches

    ns_grads, ns_rows = measure(ns)
    total = np.sum(ns_grads, axis=0)
    others = [(total - g) / (batches - 1) for g in ns_grads]  # G_{-b}

    def noise(gs: list[np.ndarray]) -> float:
        return float(np.mean([np.sum((g - o) ** 2) for g, o in zip(gs, others)]))

    ns_noise = noise(ns_grads)
    log(f"plan: NS noise {ns_noise:.4g}, {ns_rows:,.0f} rows a batch ({batches} batches)")
    measured, chosen = [], None
    for i, fraction in enumerate(fractions):
        gns_grads, rows = measure(loader_of(fraction))
        ratio = noise(gns_grads) / max(ns_noise, 1e-30)
        rows_vs_ns = rows / max(ns_rows, 1e-30)
        ok = bool(ratio <= noise_limit and rows_vs_ns <= rows_limit)
        measured.append(
            dict(
                fraction=fraction,
                noise_ratio=ratio,
                rows_per_batch=rows,
                rows_vs_ns=rows_vs_ns,
                keeps_up=ok,
            )
        )
        log(
            f"plan: GNS {fraction:.0%} noise {ratio:.2f}x NS's, rows {rows_vs_ns:.2f} of NS's"
            + (" (keeps up)" if ok else "")
        )
        if ok and chosen is None:
            chosen = fraction
        if i >= 1 and (chosen is not None or rows_vs_ns > rows_limit):
            break  # found, or larger caches move even more rows (always two tried)
    keeps_up = chosen is not None
    if not keeps_up:
        within = [m for m in measured if m["rows_vs_ns"] <= rows_limit] or measured[:1]
        chosen = min(within, key=lambda m: m["noise_ratio"])["fraction"]
    seconds = time.perf_counter() - start
    log(
        f"plan: cache fraction {chosen:g}"
        + ("" if keeps_up else " (none keeps up with NS on this graph: consider --sampler ns)")
        + f", in {seconds:.1f}s"
    )
    return dict(
        requested="auto",
        fractions=[m["fraction"] for m in measured],
        measured=measured,
        ns=dict(noise=ns_noise, rows_per_batch=ns_rows),
        chosen=chosen,
        keeps_up=keeps_up,
        criterion=f"noise_ratio <= {noise_limit} and rows_vs_ns <= {rows_limit}",
        warmup_steps=warmup,
        batches=batches,
        seconds=seconds,
    )
