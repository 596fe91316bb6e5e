"""The loader: one epoch's device-ready batches, and everything on the input side. Boundary module.

:class:`Loader` owns the whole input side of training, so a training loop is a few lines::

    loader = Loader(dataset, sampler, seed=0)
    for batch in loader.batches(0, epochs):
        state, metrics = step(state, batch.inputs, dropout_key)

It keeps, in order of use:

* **the random streams**, one per purpose, derived from ``(seed, stream, counter)``: the shuffle
  of epoch ``e`` is ``np.random.default_rng([seed, SHUFFLE, e])``, the cache drawn at epoch ``e``
  ``np.random.default_rng([seed, CACHE, e])``, the sampler key of batch ``t`` (counted over the
  whole run) ``fold_in(fold_in(key(seed), SAMPLE), t)``. Nothing depends on how far a previous
  iterator got, so a run resumed at any batch draws exactly what an uninterrupted one draws;
* **the GNS cache**, when the sampler reads one (``sampler.uses_cache``): drawn at epoch 0 and
  every ``cache_refresh`` epochs (:func:`gns_jax.cache.draw_cache`), its features and cached
  adjacency put on the device (:func:`gns_jax.cache.build_device_cache`);
* **the budget**: the sampler's exact worst case, or one calibrated on the first
  ``CALIBRATION_BATCHES`` batches and grown (never truncated) when a batch overflows it
  (:mod:`gns_jax.sampling.budget`); every growth is reported and counted;
* **the host gather and the transfer**: the input rows that are not cached are read from the host
  store and moved (:class:`gns_jax.features.FeatureLoader`); every byte is counted by a
  :class:`~gns_jax.instrument.TransferMeter`;
* **the prefetch**: all of it runs in a background thread up to ``prefetch`` batches ahead of the
  consumer (:class:`gns_jax.prefetch.Prefetcher`), and the phases are timed (``sample``,
  ``gather``, ``h2d``).

Each :class:`Batch` carries its device arrays (:class:`DeviceBatch`, what the train step reads),
its position, what it moved, and the loader's :class:`LoaderState` right after it, from which
:meth:`Loader.restore` resumes (the checkpoints of :mod:`gns_jax.checkpoint` store it).
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable, Iterator
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gns_jax.cache import (
    build_device_cache,
    cache_distribution,
    draw_cache,
    inclusion_probability,
    nonempty_probability,
    snapshot_from_ids,
)
from gns_jax.config import BUDGETS
from gns_jax.data import Dataset
from gns_jax.errors import ConfigError
from gns_jax.features import FeatureLoader, neighbour_means
from gns_jax.instrument import Stopwatch, TransferMeter
from gns_jax.parallel import DataParallel
from gns_jax.prefetch import Prefetcher
from gns_jax.sampling.base import Sampler
from gns_jax.sampling.blocks import Block
from gns_jax.sampling.budget import (
    CALIBRATION_BATCHES,
    CALIBRATION_MARGIN,
    GROWTH_MARGIN,
    Budget,
    LayerSizes,
)

__all__ = ["BUDGETS", "Batch", "DeviceBatch", "Loader", "LoaderState"]

SHUFFLE, SAMPLE, DROPOUT, INIT, CACHE, CALIBRATE = 0, 1, 2, 3, 4, 5  # one stream a purpose
AUTO_SAVING = 0.75  # auto keeps the worst case unless calibration cuts a layer's slots below this


class DeviceBatch(NamedTuple):
    """What the train step reads: a pytree of device arrays with shapes fixed by the budget.

    Attributes:
      x: float32 ``[max_src0, F]`` input features of ``blocks[0]``'s source slots (zero rows on
        padding).
      blocks: one :class:`~gns_jax.sampling.blocks.Block` per layer, input layer first.
      labels: int32 ``[max_seeds]`` labels of the seed slots (padding slots read node 0's).
      seed_mask: bool ``[max_seeds]``, True for real seeds.
    """

    x: jax.Array
    blocks: tuple[Block, ...]
    labels: jax.Array
    seed_mask: jax.Array


class LoaderState(NamedTuple):
    """Where a loader is, and what it needs to go on exactly as it would have. Host-side.

    Attributes:
      epoch, index: the position of the next batch.
      budget: the budget in use (None before calibration).
      sizes_new, sizes_edges: the largest real layer sizes seen (what budget growth sizes from).
      growths: budget growths so far.
      cache_epoch: the epoch at which the cache in use was drawn (-1: none).
      cache_ids: int32 ``[num_cached]``, the distinct cached nodes (None: none).
    """

    epoch: int = 0
    index: int = 0
    budget: Budget | None = None
    sizes_new: tuple[int, ...] | None = None
    sizes_edges: tuple[int, ...] | None = None
    growths: int = 0
    cache_epoch: int = -1
    cache_ids: np.ndarray | None = None

    def to_json(self) -> dict:
        """Everything but ``cache_ids``, as JSON-ready values."""
        out = self._asdict()
        out.pop("cache_ids")
        out["budget"] = None if self.budget is None else list(map(list, _budget_lists(self.budget)))
        return out

    @classmethod
    def from_json(cls, value: dict, cache_ids: np.ndarray | None) -> LoaderState:
        budget = value.get("budget")
        if budget is not None:
            seeds, src, edges = budget
            budget = Budget(int(seeds[0]), tuple(map(int, src)), tuple(map(int, edges)))
        tup = lambda v: None if v is None else tuple(int(x) for x in v)
        return cls(
            epoch=int(value["epoch"]),
            index=int(value["index"]),
            budget=budget,
            sizes_new=tup(value.get("sizes_new")),
            sizes_edges=tup(value.get("sizes_edges")),
            growths=int(value.get("growths", 0)),
            cache_epoch=int(value.get("cache_epoch", -1)),
            cache_ids=None if cache_ids is None else np.asarray(cache_ids, dtype=np.int32),
        )


def _budget_lists(budget: Budget):
    return [budget.max_seeds], list(budget.max_src), list(budget.max_edges)


class Batch(NamedTuple):
    """One batch as the loader yields it.

    Attributes:
      inputs: the :class:`DeviceBatch` the train step reads.
      epoch, index: its position (batch ``index`` of epoch ``epoch``).
      seeds: int32 host array of its seed nodes, in slot order (unpadded).
      num_inputs: real input-layer nodes.
      rows_moved: feature rows that crossed host -> device (the non-cached input rows), all of
        this process's shards together.
      rows_per_shard: the same per shard of the batch (one entry without data parallelism;
        zero for shards another process samples).
      bytes_moved: bytes of this batch host -> device (feature rows and structure).
      refresh: ``(seconds, num_cached, bytes)`` when the cache was redrawn just before this
        batch: the time it took, the distinct nodes drawn, the bytes put on the device.
      state: the loader's state right after this batch; resuming from it yields the next one.
    """

    inputs: DeviceBatch
    epoch: int
    index: int
    seeds: np.ndarray
    num_inputs: int
    rows_moved: int
    rows_per_shard: tuple[int, ...]
    bytes_moved: int
    refresh: tuple[float, int, int] | None
    state: LoaderState


@jax.jit
def _seed_labels(labels: jax.Array, seeds: jax.Array) -> tuple[jax.Array, jax.Array]:
    return labels[jnp.maximum(seeds, 0)], seeds >= 0


class Loader:
    """Iterates device-ready batches of a dataset with a sampler.

    Args:
      dataset: the graph, features, labels and splits.
      sampler: any :class:`~gns_jax.sampling.base.Sampler`, at its worst-case budget.
      seed: the seed of every random stream (module docs).
      nodes: the seed nodes to iterate (default: the training nodes).
      shuffle: reshuffle ``nodes`` every epoch (training); False keeps their order (inference).
      features: the feature store to gather from (default ``dataset.features``; pass the
        normalised matrix when the features are normalised).
      cache_dist: the cache distribution (``degree``, ``uniform``, ``random-walk``), for samplers
        with ``uses_cache``.
      cache_refresh: redraw the cache every this many epochs.
      budget: ``worst``, ``calibrated`` or ``auto`` (calibrated when that cuts some layer's node
        or edge slots below 75 % of the worst case; the worst case otherwise).
      prefetch: batches prepared ahead in a background thread (0: in the caller's thread).
      meter: counts the bytes moved (a new one by default).
      stream: 0 for training; another value derives independent sampler keys (evaluation).
      log: where to report compilations and budget growth (a callable taking one line), or None.
      parallel: data parallelism (:class:`~gns_jax.parallel.DataParallel`): a batch is then one
        shard of ``sampler.batch_size`` seeds per device of its mesh, each sampled on its device
        with key ``fold_in(key_t, shard)`` from that device's replica of the cache, and
        ``Batch.inputs`` is the global batch (every leaf stacked over the shards and sharded over
        the mesh). This process samples only its own devices' shards.

    Attributes:
      sampler: the sampler given (its worst-case budget); the calibrated one is derived from it.
      feature_loader: the :class:`~gns_jax.features.FeatureLoader` that gathers and moves the
        input rows (``compilations`` counts its assembler's).
      meter: the :class:`~gns_jax.instrument.TransferMeter` of every byte moved.
    """

    def __init__(
        self,
        dataset: Dataset,
        sampler: Sampler,
        *,
        seed: int = 0,
        nodes: np.ndarray | None = None,
        shuffle: bool = True,
        features: np.ndarray | None = None,
        cache_dist: str = "degree",
        cache_refresh: int = 1,
        budget: str = "auto",
        prefetch: int = 2,
        meter: TransferMeter | None = None,
        stream: int = 0,
        log: Callable[[str], None] | None = None,
        name: str = "sampler",
        parallel: DataParallel | None = None,
    ):
        if budget not in BUDGETS:
            raise ConfigError("budget", f"one of {BUDGETS}, got '{budget}'")
        if int(prefetch) < 0:
            raise ConfigError("prefetch", f"must be >= 0 batches, got {prefetch}")
        if int(cache_refresh) < 1:
            raise ConfigError("cache_refresh", f"must be a positive integer, got {cache_refresh}")
        if int(seed) < 0:
            raise ConfigError("seed", f"must be >= 0, got {seed}")
        self.dataset = dataset
        self.sampler = sampler
        self.nodes = np.asarray(dataset.train_idx if nodes is None else nodes, dtype=np.int32)
        if self.nodes.size == 0:
            raise ConfigError("nodes", "no seed nodes to iterate")
        self.seed, self.shuffle = int(seed), bool(shuffle)
        self.parallel = parallel
        self.shards = 1 if parallel is None else parallel.shards
        self.lanes = ((0, None),) if parallel is None else parallel.lanes
        self.batch_size = sampler.batch_size * self.shards  # seeds of a (global) batch
        self.num_batches = -(-self.nodes.shape[0] // self.batch_size)
        self.cache_refresh = int(cache_refresh)
        self.budget_mode = budget
        self.prefetch = int(prefetch)
        self.meter = meter or TransferMeter()
        self.log = log or (lambda line: None)
        self.name = name
        features = dataset.features if features is None else features
        self.means = None
        if getattr(sampler, "needs_means", False):  # the exact input layer's neighbour means
            start = time.perf_counter()
            self.means = neighbour_means(dataset.graph, features)
            self.log(
                f"computed the neighbour means of {dataset.num_nodes:,} nodes in "
                f"{time.perf_counter() - start:.1f}s"
            )
        self.feature_loader = FeatureLoader(features, self.meter, means=self.means)
        # One-time setup may move Python scalars implicitly; the per-batch path moves data only
        # through ``meter.put`` (the tests run it under a transfer guard).
        with jax.transfer_guard_host_to_device("allow"):
            base = jax.random.key(self.seed)
            if stream:
                base = jax.random.fold_in(base, 1000 + int(stream))
            self._sample_key = jax.random.fold_in(base, SAMPLE)
            self._calib_key = jax.random.fold_in(base, CALIBRATE)
        self.labels = self.meter.put(dataset.labels, tag="labels", device=self.lanes[0][1])
        self._labels = {self.lanes[0][1]: self.labels}
        for _, device in self.lanes[1:]:
            self._labels[device] = self.meter.put(dataset.labels, tag="labels", device=device)
        if sampler.uses_cache:
            self._probs = cache_distribution(
                dataset.graph,
                cache_dist,
                train_idx=dataset.train_idx,
                num_steps=len(sampler.fanouts),
                features=features,
            )
            self._nonempty = nonempty_probability(
                dataset.graph,
                inclusion_probability(self._probs, sampler.cache_size),
                sampler.cache_size,
            )
        self.watch = Stopwatch()  # the input side's phases, first epoch excluded
        self.timed_batches = 0
        self._sizes = LayerSizes()
        self._active: Sampler | None = None
        self._growths = 0
        self._cache = None  # the cache on the first lane's device
        self._caches: dict = {}  # device -> its replica of the cache
        self._cache_epoch, self._cache_ids = -1, None

    # -- former names (deprecated) -------------------------------------------------------------

    @property
    def gather(self) -> FeatureLoader:
        """Deprecated: :attr:`feature_loader`."""
        warnings.warn("Loader.gather is now Loader.feature_loader", DeprecationWarning, 2)
        return self.feature_loader

    @property
    def worst(self) -> Sampler:
        """Deprecated: :attr:`sampler` (the sampler given, at its worst-case budget)."""
        warnings.warn("Loader.worst is now Loader.sampler", DeprecationWarning, 2)
        return self.sampler

    # -- state -------------------------------------------------------------------------------

    @property
    def budget(self) -> Budget:
        """The budget in use (the worst case until the loader has calibrated)."""
        return (self._active or self.sampler).budget

    @property
    def growths(self) -> int:
        return self._growths

    def state(self, epoch: int, index: int) -> LoaderState:
        """The loader's state, positioned at batch ``index`` of ``epoch``."""
        sizes = self._sizes
        return LoaderState(
            epoch=epoch,
            index=index,
            budget=None if self._active is None else self._active.budget,
            sizes_new=None if sizes.new is None else tuple(int(v) for v in sizes.new),
            sizes_edges=None if sizes.edges is None else tuple(int(v) for v in sizes.edges),
            growths=self._growths,
            cache_epoch=self._cache_epoch,
            cache_ids=self._cache_ids,
        )

    def restore(self, state: LoaderState) -> None:
        """Takes up ``state`` (a :attr:`Batch.state`, e.g. from a checkpoint): its budget, the
        sizes that budget growth starts from, and its cache. Iterate from
        ``(state.epoch, state.index)`` next."""
        self._sizes = LayerSizes(state.sizes_new, state.sizes_edges)
        self._growths = state.growths
        if state.budget is None:
            self._active = None
        elif state.budget == self.sampler.budget:
            self._active = self.sampler
        else:
            self._active = self.sampler.with_budget(state.budget)
        self._cache, self._caches = None, {}
        self._cache_epoch, self._cache_ids = state.cache_epoch, state.cache_ids

    # -- iteration ---------------------------------------------------------------------------

    def order(self, epoch: int) -> np.ndarray:
        """The seed nodes in epoch ``epoch``'s order."""
        if not self.shuffle:
            return self.nodes
        return np.random.default_rng([self.seed, SHUFFLE, epoch]).permutation(self.nodes)

    def epoch(self, epoch: int) -> Prefetcher:
        """The batches of one epoch (prefetched)."""
        return self.batches(epoch, epoch + 1)

    def batches(self, start_epoch: int, end_epoch: int, start_index: int = 0) -> Prefetcher:
        """Batches of epochs ``start_epoch .. end_epoch - 1``, from batch ``start_index`` of the
        first, in one prefetched stream (the next epoch's cache and batches are prepared while
        the consumer finishes the current one). Close it (``.close()``) if not run to the end."""
        if not 0 <= start_index <= self.num_batches:
            raise ConfigError("start_index", f"must lie in [0, {self.num_batches}]")
        return Prefetcher(self._produce(start_epoch, end_epoch, start_index), self.prefetch)

    def _draw_cache(self, epoch: int, ids: np.ndarray | None) -> tuple[float, int, int]:
        """Builds the cache of ``epoch`` on the device, from ``ids`` or a fresh draw; returns the
        seconds it took, the distinct nodes and the bytes put on the device."""
        start = time.perf_counter()
        bytes_before = self.meter.bytes_by_tag["cache"]
        m = self.sampler.cache_size
        if ids is None:
            rng = np.random.default_rng([self.seed, CACHE, epoch])
            snapshot = draw_cache(rng, self._probs, m)
        else:
            snapshot = snapshot_from_ids(ids, self._probs, m)
        put = functools.partial(self.meter.put, tag="cache")
        self._caches, _ = build_device_cache(
            self.dataset.graph,
            self.feature_loader.features,
            snapshot,
            put=lambda host: {device: put(host, device=device) for _, device in self.lanes},
            with_other=self.sampler.needs_other,
            means=self.means,
            nonempty=self._nonempty,
            page_cache=self.meter.page_cache,
        )
        self._cache = self._caches[self.lanes[0][1]]
        jax.block_until_ready(list(self._caches.values()))
        self._cache_epoch = epoch
        self._cache_ids = snapshot.node_ids[: snapshot.num_cached]
        moved = self.meter.bytes_by_tag["cache"] - bytes_before
        return time.perf_counter() - start, snapshot.num_cached, moved

    def _seeds(self, order: np.ndarray, b: int, counter: int, tag: str):
        ids = order[b * self.batch_size : (b + 1) * self.batch_size]
        seeds, counter = self.meter.put((self.sampler.pad_seeds(ids), np.int32(counter)), tag=tag)
        return ids, seeds, counter

    def _calibrate(self, order: np.ndarray) -> None:
        """Sizes the budget from ``CALIBRATION_BATCHES`` samples under the worst case: the first
        batches, or, when an epoch has fewer, its batches again with other keys (one batch
        sampled once says little about the next samples of it)."""
        if self.budget_mode == "worst":
            self._active = self.sampler
            return
        if self.shards == 1:
            for i in range(CALIBRATION_BATCHES):
                _, seeds, counter = self._seeds(order, i % self.num_batches, i, tag="calibration")
                key = jax.random.fold_in(self._calib_key, counter)
                self._sizes.observe(self._timed_sample(self.sampler, key, seeds))
        else:  # every shard of the first batches, sampled alike in every process
            device = self.lanes[0][1]
            for i in range(max(CALIBRATION_BATCHES, self.shards)):
                b, shard = (i // self.shards) % self.num_batches, i % self.shards
                ids = self._shard_ids(order, b, shard)
                seeds = self.meter.put(
                    self.sampler.pad_seeds(ids), tag="calibration", device=device
                )
                with jax.transfer_guard_host_to_device("allow"):
                    key = jax.random.fold_in(self._calib_key, i)
                self._sizes.observe(self._timed_sample(self.sampler.placed(device), key, seeds))
        active = self.sampler.with_budget(
            self._sizes.budget(self.sampler.budget, CALIBRATION_MARGIN)
        )
        if self.budget_mode == "auto" and active.budget.saving(self.sampler.budget) > AUTO_SAVING:
            active = self.sampler  # the exact worst case is affordable: no overflow possible
        self._active = active

    def _timed_sample(self, sampler: Sampler, key, seeds, cache=None):
        """``sampler.sample``, reporting a compilation (a new budget's first batch)."""
        before, start = sampler.compilations, time.perf_counter()
        batch = sampler.sample(key, seeds, self._cache if cache is None else cache)
        if sampler.compilations != before:
            jax.block_until_ready(batch)
            self.log(
                f"compiled the {self.name} for {_describe(sampler.budget)} in "
                f"{time.perf_counter() - start:.1f}s"
            )
        return batch

    def _grow(self, exact_samples) -> Budget:
        """Observes ``exact_samples`` (taken under the worst case) and grows the active budget
        from every size seen so far; returns the budget it replaces."""
        old = self._active.budget
        for sample in exact_samples:
            self._sizes.observe(sample)
        self._active = self.sampler.with_budget(
            self._sizes.budget(self.sampler.budget, GROWTH_MARGIN)
        )
        self._growths += 1
        return old

    def _sample(self, key, seeds, epoch: int, index: int):
        """One batch under the active budget; on overflow, grows the budget and samples again."""
        batch = self._timed_sample(self._active, key, seeds)
        overflow = np.asarray(jax.device_get(batch.overflow))
        if not overflow.any():
            return batch
        if self._active is self.sampler:
            raise RuntimeError(
                f"sampler budget overflow {overflow.tolist()} (a bug: the budget is the worst case)"
            )
        # Never truncate: measure this batch exactly, grow, and sample it again (one more
        # compilation of the sampler and of the train step).
        old = self._grow([self._timed_sample(self.sampler, key, seeds)])
        batch = self._timed_sample(self._active, key, seeds)
        if np.asarray(jax.device_get(batch.overflow)).any():
            self._active = self.sampler
            batch = self._timed_sample(self._active, key, seeds)
        self.log(
            f"{self.name} budget grew at batch {index + 1} of epoch {epoch + 1} "
            f"(overflow {overflow.tolist()}): {_describe(old)} -> {_describe(self._active.budget)}"
            "; the train step compiles again"
        )
        return batch

    def _produce(self, start_epoch: int, end_epoch: int, start_index: int) -> Iterator[Batch]:
        """The input side of every batch, in order: cache, calibration, sampling, gather."""
        uses_cache = self.sampler.uses_cache
        for epoch in range(start_epoch, end_epoch):
            if epoch == 1:  # the time split leaves out the first epoch (compilation)
                self.watch.seconds.clear()
                self.timed_batches = 0
            first = start_index if epoch == start_epoch else 0
            refresh = None
            if uses_cache:
                due = epoch - epoch % self.cache_refresh  # the epoch whose cache is in use
                if epoch % self.cache_refresh == 0 and self._cache_epoch != epoch:
                    refresh = self._draw_cache(epoch, None)  # a scheduled refresh
                elif self._cache is None or self._cache_epoch != due:
                    same = self._cache_epoch == due and self._cache_ids is not None
                    self._draw_cache(due, self._cache_ids if same else None)  # resumed
            order = self.order(epoch)
            if self._active is None:
                self._calibrate(order)
            if self.shards > 1:
                yield from self._sharded(epoch, order, first, refresh)
                continue
            for b in range(first, self.num_batches):
                before = self.meter.bytes_by_tag["features"] + self.meter.bytes_by_tag["structure"]
                ids, seeds, counter = self._seeds(
                    order, b, epoch * self.num_batches + b, tag="structure"
                )
                key = jax.random.fold_in(self._sample_key, counter)
                with self.watch("sample"):
                    batch = self._sample(key, seeds, epoch, b)
                    jax.block_until_ready(batch)
                x, num_inputs, rows = self.feature_loader.load(
                    batch.input_nodes, self._cache, self.watch
                )
                labels, mask = _seed_labels(self.labels, seeds)
                after = self.meter.bytes_by_tag["features"] + self.meter.bytes_by_tag["structure"]
                self.timed_batches += 1
                yield Batch(
                    inputs=DeviceBatch(x, batch.blocks, labels, mask),
                    epoch=epoch,
                    index=b,
                    seeds=ids,
                    num_inputs=num_inputs,
                    rows_moved=rows,
                    rows_per_shard=(rows,),
                    bytes_moved=after - before,
                    refresh=refresh if b == first else None,
                    state=self.state(*_next(epoch, b, self.num_batches)),
                )

    # -- data parallelism --------------------------------------------------------------------

    def _shard_ids(self, order: np.ndarray, b: int, shard: int) -> np.ndarray:
        """The seeds of shard ``shard`` of batch ``b`` (unpadded; possibly none at the end)."""
        per = self.sampler.batch_size
        start = b * self.batch_size + shard * per
        return order[start : min(start + per, (b + 1) * self.batch_size)]

    def _shard_key(self, counter: int, shard: int) -> jax.Array:
        with jax.transfer_guard_host_to_device("allow"):
            return jax.random.fold_in(jax.random.fold_in(self._sample_key, counter), shard)

    def _sample_shards(self, order, b: int, counter: int, epoch: int):
        """This process's shards of batch ``b``, sampled under one budget: when a shard of any
        process overflows it, every process measures the overflowing shards under the worst case
        (the same samples everywhere: the seeds and keys are derived, not exchanged), grows the
        budget alike and samples its shards again."""
        seeds = {}
        for shard, device in self.lanes:
            ids = self._shard_ids(order, b, shard)
            seeds[shard] = (ids, self.meter.put(self.sampler.pad_seeds(ids), tag="structure",
                                                device=device))  # fmt: skip
        keys = {shard: self._shard_key(counter, shard) for shard, _ in self.lanes}
        while True:
            samples = {
                shard: self._timed_sample(
                    self._active.placed(device),
                    keys[shard],
                    seeds[shard][1],
                    self._caches.get(device),
                )
                for shard, device in self.lanes
            }
            local = np.zeros(self.shards, dtype=np.int32)
            for shard, sample in samples.items():
                local[shard] = int(np.asarray(jax.device_get(sample.overflow)).any())
            overflowed = np.flatnonzero(self.parallel.any(local))
            if overflowed.size == 0:
                return seeds, samples
            if self._active is self.sampler:
                raise RuntimeError("sampler budget overflow under the worst case (a bug)")
            device = self.lanes[0][1]
            worst = self.sampler.placed(device)
            exact = []
            for shard in overflowed:
                ids = self._shard_ids(order, b, int(shard))
                padded = self.meter.put(worst.pad_seeds(ids), tag="structure", device=device)
                key = self._shard_key(counter, int(shard))
                exact.append(self._timed_sample(worst, key, padded, self._cache))
            old = self._grow(exact)
            if self._active.budget == old:
                self._active = self.sampler
            self.log(
                f"{self.name} budget grew at batch {b + 1} of epoch {epoch + 1} (shards "
                f"{overflowed.tolist()} overflowed): {_describe(old)} -> "
                f"{_describe(self._active.budget)}; the train step compiles again"
            )

    def _sharded(self, epoch: int, order: np.ndarray, first: int, refresh) -> Iterator[Batch]:
        """The batches of one epoch with data parallelism (see ``parallel``)."""
        for b in range(first, self.num_batches):
            before = self.meter.bytes_by_tag["features"] + self.meter.bytes_by_tag["structure"]
            counter = epoch * self.num_batches + b
            with self.watch("sample"):
                seeds, samples = self._sample_shards(order, b, counter, epoch)
                jax.block_until_ready(samples)
            parts, rows, inputs = [], [0] * self.shards, 0
            for shard, device in self.lanes:
                sample = samples[shard]
                x, num_inputs, moved = self.feature_loader.load(
                    sample.input_nodes, self._caches.get(device), self.watch, device=device
                )
                labels, mask = _seed_labels(self._labels[device], seeds[shard][1])
                parts.append(DeviceBatch(x, sample.blocks, labels, mask))
                rows[shard] = moved
                inputs += num_inputs
            inputs_global = self.parallel.stack(parts)
            after = self.meter.bytes_by_tag["features"] + self.meter.bytes_by_tag["structure"]
            self.timed_batches += 1
            yield Batch(
                inputs=inputs_global,
                epoch=epoch,
                index=b,
                seeds=np.concatenate([seeds[shard][0] for shard, _ in self.lanes]),
                num_inputs=inputs,
                rows_moved=int(sum(rows)),
                rows_per_shard=tuple(rows),
                bytes_moved=after - before,
                refresh=refresh if b == first else None,
                state=self.state(*_next(epoch, b, self.num_batches)),
            )


def _next(epoch: int, index: int, num_batches: int) -> tuple[int, int]:
    return (epoch, index + 1) if index + 1 < num_batches else (epoch + 1, 0)


def _describe(budget: Budget) -> str:
    return f"input-layer slots {budget.max_src[0]:,}, edge slots {sum(budget.max_edges):,}"
