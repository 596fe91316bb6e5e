"""Choosing the cache fraction from the graph alone, before training, in about a second.

``gns-jax train --cache-fraction auto`` and ``gns-jax plan`` call :func:`plan_cache_fraction`.
It answers "what is the smallest cache that trains like NS on this graph?" from the statistic
that the size study (``experiments/size_study.py``, ``docs/cache-size.md``) found to track the
accuracy GNS gives up: **the share of layer-1 nodes without a cached neighbour**. The layer-1
nodes are the destinations of the input block, whose input-layer neighbours GNS takes from the
cache; one with no cached neighbour aggregates nothing from its neighbourhood under the
``hajek`` input layer, so the model sees that much less of the graph than NS does.

**What it computes.** It samples a few of the run's batches node-wise in NumPy (the run's fan-
outs and batch size, its training nodes, its seed) down to the layer-1 nodes, and, for every
tried fraction, computes in closed form over the cache's draws
(:func:`gns_jax.cachestats.cache_statistics`): the expected share of those nodes with no
cached neighbour, the cached neighbours per node, and the feature rows a batch moves against
NS's. No model is built and nothing is compiled.

**What it picks.** The smallest fraction of :data:`FRACTIONS` whose share is at most the limit
for the model's depth (:data:`NO_CACHED_LIMIT`: a 3-layer model computes the two hops above the
input layer exactly and tolerates a larger share than a 2-layer one), whose batches move at
most :data:`ROWS_LIMIT` of NS's rows, and whose cache holds at least :data:`MIN_CACHE_NODES`
distinct nodes (in the size study a cache of about 500 nodes learnt several points more slowly
than NS over the epochs whatever the share, one of 1,900 did not). On a *small graph*, where
that smallest passing fraction still moves more than :data:`SMALL_GRAPH_ROWS` of NS's rows (a
batch's layers cover much of the graph, so the cache saves little whatever its size), it takes
the largest passing fraction instead: in the size study (3 layers, 4 seeds and 4 held-out
ones) caches of 5 and 20 % on graphs of 50k and 100k nodes ended with NS but learnt 3.6-3.9
points more slowly over the epochs on one seed set or the other (10 % just kept up), while 50 %
kept up on all four such graphs and every seed set. On the larger graphs the smallest passing
fraction moves at most 0.48 of NS's rows and is kept. When no fraction passes all three tests,
it picks the smallest one within the share limit and says that NS is the better sampler for the
graph (``keeps_up: false``).

The limits were set on seeds 0-3 of the size study's graphs (3 layers: the cache size and the
small graphs) and of the calibration runs of ``experiments/plan.py`` (2 layers: the share), and
are validated on seeds 4-7 (``experiments/reports/plan``; ``experiments/reports/size-study``
for the two small graphs whose picks lagged). ``tests/test_reports.py`` replays the rules
on the study's recorded statistics.
Deterministic: the same seed gives the same choice.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from gns_jax.cache import cache_distribution, cache_size
from gns_jax.cachestats import cache_statistics, sample_layer_sets
from gns_jax.config import TrainConfig
from gns_jax.data import Dataset
from gns_jax.errors import ConfigError
from gns_jax.streams import PLAN

__all__ = [
    "BATCHES", "FRACTIONS", "KEEP_UP_EPOCHS", "MIN_CACHE_NODES", "NO_CACHED_LIMIT", "ROWS_LIMIT",
    "SMALL_GRAPH_ROWS", "choose", "horizon_note", "passes", "plan_cache_fraction",
]  # fmt: skip

FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
NO_CACHED_LIMIT = {1: 0.01, 2: 0.01, 3: 0.25}  # by the model's depth; deeper models use 3's
ROWS_LIMIT = 0.6  # of NS's rows a batch
SMALL_GRAPH_ROWS = 0.5  # the smallest passing fraction moves more: take the largest passing
MIN_CACHE_NODES = 1000  # expected distinct cached nodes: fewer learn more slowly (size study)
BATCHES = 4  # sampled batches the statistics are averaged over
# Keeping up is judged over at least this many epochs (the size study's runs). GNS lags NS
# where NS takes off (the first epoch of graphs of 1M nodes and more), then keeps pace: over
# 5 epochs a 1 % cache of 1M nodes was 4.4 points below NS, over 10 2.2; at products scale,
# 5 epochs, 1 % was 6.1 below and 5 % 3.8 (the first epoch's take-off varies with the seed).
KEEP_UP_EPOCHS = 10
PLAN_STREAM = PLAN  # the planner's own random stream of the run's seed (no other stream is used)


def horizon_note(epochs: int) -> str:
    """What "keeps up" means for a run of ``epochs`` shorter than :data:`KEEP_UP_EPOCHS`."""
    return (
        f"keeping up is judged over {KEEP_UP_EPOCHS} epochs or more; over {epochs}, expect GNS "
        "to trail NS where NS takes off (on graphs of 1M nodes and more, its first epoch)"
    )


def no_cached_limit(num_layers: int) -> float:
    """The share limit of a model of ``num_layers`` layers (:data:`NO_CACHED_LIMIT`)."""
    return NO_CACHED_LIMIT[min(max(num_layers, 1), max(NO_CACHED_LIMIT))]


def passes(
    stats: dict,
    *,
    limit: float,
    rows_limit: float = ROWS_LIMIT,
    min_cache_nodes: float = MIN_CACHE_NODES,
) -> bool:
    """Whether one fraction's statistics (``no_cached_share``, ``rows_vs_ns``, ``cache_nodes``)
    pass the planner's three tests."""
    return bool(
        stats["no_cached_share"] <= limit
        and stats["rows_vs_ns"] <= rows_limit
        and stats["cache_nodes"] >= min_cache_nodes
    )


def choose(
    measured: list[dict], limit: float, *, small_graph_rows: float = SMALL_GRAPH_ROWS
) -> tuple[float, bool]:
    """``(chosen, keeps_up)`` from the tried fractions' entries, in increasing order, each with
    its ``keeps_up`` verdict and ``rows_vs_ns``: the smallest that keeps up, or the largest
    that does where the smallest still moves more than ``small_graph_rows`` of NS's rows (a
    small graph); when none keeps up, the smallest within the share ``limit`` (the largest
    tried when none is)."""
    passing = [m for m in measured if m["keeps_up"]]
    if passing:
        small_graph = passing[0]["rows_vs_ns"] > small_graph_rows
        return passing[-1 if small_graph else 0]["fraction"], True
    within = [m for m in measured if m["no_cached_share"] <= limit] or measured[-1:]
    return within[0]["fraction"], False


def plan_cache_fraction(
    dataset: Dataset,
    config: TrainConfig,
    features: np.ndarray | None = None,
    task=None,
    *,
    fractions: tuple[float, ...] = FRACTIONS,
    limit: float | None = None,
    rows_limit: float = ROWS_LIMIT,
    min_cache_nodes: float = MIN_CACHE_NODES,
    small_graph_rows: float = SMALL_GRAPH_ROWS,
    batches: int = BATCHES,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Picks the cache fraction of ``config``'s GNS run on ``dataset`` (module docstring) and
    returns the ``plan`` object of the run JSON (``docs/results.md``): ``requested``,
    ``fractions`` (tried, in order), ``measured`` (one entry each: ``fraction``,
    ``no_cached_share``, ``cached_neighbours``, ``rows_vs_ns``, ``cache_nodes``,
    ``keeps_up``), ``chosen``, ``keeps_up``, ``criterion``, ``batches``, ``seconds``.

    ``features`` is the matrix the run reads (needed only by the ``min-variance`` cache
    distribution); ``task`` is not used (the choice depends on the graph, not the labels).
    ``limit`` overrides the depth's share limit; ``rows_limit``, ``min_cache_nodes`` and
    ``small_graph_rows`` the other rules' (:data:`ROWS_LIMIT` and the rest).
    """
    del task
    if config.sampler != "gns":
        raise ConfigError("cache_fraction", "auto is for --sampler gns")
    if len(fractions) < 2 or sorted(fractions) != list(fractions):
        raise ConfigError("fractions", f"at least two, increasing; got {fractions}")
    if batches < 1:
        raise ConfigError("batches", f"at least one sampled batch, got {batches}")
    log = log or (lambda line: None)
    start = time.perf_counter()
    limit = no_cached_limit(len(config.fanouts)) if limit is None else float(limit)
    graph = dataset.graph
    rng = np.random.default_rng([config.seed, PLAN_STREAM])
    size = min(config.batch_size, int(dataset.train_idx.shape[0]))
    sets = sample_layer_sets(graph, dataset.train_idx, config.fanouts, size, rng, batches)
    p = cache_distribution(
        graph, config.cache_dist, train_idx=dataset.train_idx,
        num_steps=len(config.fanouts), features=features,
    )  # fmt: skip
    stats = cache_statistics(graph, p, [cache_size(f, graph.num_nodes) for f in fractions], sets)
    measured = []
    for fraction, s in zip(fractions, stats):
        ok = passes(s, limit=limit, rows_limit=rows_limit, min_cache_nodes=min_cache_nodes)
        measured.append(
            dict(
                fraction=fraction,
                no_cached_share=s["no_cached_share"],
                cached_neighbours=s["cached_neighbours"],
                rows_vs_ns=s["rows_vs_ns"],
                cache_nodes=s["cache_nodes"],
                keeps_up=ok,
            )
        )
        log(
            f"plan: GNS {fraction:.0%}: {s['no_cached_share']:.3f} of layer-1 nodes without a "
            f"cached neighbour, {s['cached_neighbours']:.2f} cached neighbours each, rows "
            f"{s['rows_vs_ns']:.2f} of NS's" + (" (keeps up)" if ok else "")
        )
    chosen, keeps_up = choose(measured, limit, small_graph_rows=small_graph_rows)
    seconds = time.perf_counter() - start
    smallest = next((m for m in measured if m["keeps_up"]), None)
    why = ""
    if not keeps_up:
        why = " (none keeps up with NS on this graph: consider --sampler ns)"
    elif chosen != smallest["fraction"]:
        why = (
            f" (a small graph: {smallest['fraction']:g}, the smallest that passes, moves "
            f"{smallest['rows_vs_ns']:.2f} of NS's rows; the largest that passes is safer)"
        )
    log(f"plan: cache fraction {chosen:g}{why}, in {seconds:.2f}s")
    if keeps_up and config.epochs < KEEP_UP_EPOCHS:
        log(f"plan: {horizon_note(config.epochs)}")
    return dict(
        requested="auto",
        fractions=list(fractions),
        measured=measured,
        chosen=chosen,
        keeps_up=keeps_up,
        criterion=(
            f"no_cached_share <= {limit:g} and rows_vs_ns <= {rows_limit:g} and "
            f"cache_nodes >= {min_cache_nodes:g}; the largest that passes where the smallest "
            f"has rows_vs_ns > {small_graph_rows:g}"
        ),
        batches=batches,
        seconds=seconds,
    )
