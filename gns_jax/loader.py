"""The loader: one epoch's device-ready batches, and everything on the input side. Boundary module.

:class:`Loader` owns the whole input side of training, so a training loop is a few lines::

    loader = Loader(dataset, sampler, seed=0)
    for batch in loader.batches(0, epochs):
        state, metrics = step(state, batch.inputs, dropout_key)

It works with collaborators built apart (:class:`LoaderParts`: from a
:class:`~gns_jax.config.TrainConfig` by :meth:`LoaderParts.from_config`, which
:func:`gns_jax.factories.make_loader` uses, or from the keyword arguments above), in order of use:

* **the random streams** (:class:`gns_jax.streams.Streams`), one per purpose, derived from
  ``(seed, stream, counter)``: the shuffle of epoch ``e`` is
  ``np.random.default_rng([seed, SHUFFLE, e])``, the cache drawn at epoch ``e``
  ``np.random.default_rng([seed, CACHE, e])``, the sampler key of batch ``t`` (counted over the
  whole run) ``fold_in(fold_in(key(seed), SAMPLE), t)``. Nothing depends on how far a previous
  iterator got, so a run resumed at any batch draws exactly what an uninterrupted one draws;
* **the GNS cache**, when the sampler reads one (``sampler.uses_cache``): drawn at epoch 0 and
  every ``cache_refresh`` epochs, its features and cached adjacency put on every device
  (:class:`gns_jax.cache.CacheSchedule`);
* **the budget**: the sampler's exact worst case, or one calibrated on the first
  ``CALIBRATION_BATCHES`` batches and grown (never truncated) when a batch overflows it
  (:class:`gns_jax.sampling.budget.BudgetPolicy`); every growth is reported and counted;
* **the host gather and the transfer**: the input rows that are not cached are read from the host
  store and moved (:class:`gns_jax.features.FeatureLoader`); every byte is counted by a
  :class:`~gns_jax.meters.TransferMeter`;
* **the prefetch**: all of it runs in a background thread up to ``prefetch`` batches ahead of the
  consumer (:class:`gns_jax.prefetch.Prefetcher`), and the phases are timed (``sample``,
  ``gather``, ``h2d``).

Every batch takes one path (:meth:`Loader._batch`): its shards' seeds and keys, sampling under
the budget (an overflow grows it and samples again), the gather and transfer of each shard's
input rows, and the shards stacked into the global batch. One device is one shard; with
``parallel`` a batch has one shard per device of the mesh, and this process takes its own.

Each :class:`Batch` carries its device arrays (:class:`~gns_jax.batch.DeviceBatch`, what the
train step reads), its position, what it moved, and the loader's :class:`LoaderState` right after
it, from which :meth:`Loader.restore` resumes (the checkpoints of :mod:`gns_jax.checkpoint` store
it).

(The stream ids ``SHUFFLE``, ``SAMPLE``, ``DROPOUT``, ``INIT``, ``CACHE``, ``CALIBRATE`` and
``HEADS`` live in :mod:`gns_jax.streams`, :class:`DeviceBatch` in :mod:`gns_jax.batch`; both are
re-exported here.)
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gns_jax.batch import DeviceBatch
from gns_jax.cache import CacheSchedule, DeviceCache
from gns_jax.config import BUDGETS, TrainConfig
from gns_jax.data import Dataset
from gns_jax.errors import ConfigError
from gns_jax.features import FeatureLoader, neighbour_means
from gns_jax.linkbatch import EdgeSeeds, LinkSeeds
from gns_jax.meters import TransferMeter
from gns_jax.parallel import DataParallel
from gns_jax.prefetch import Prefetcher
from gns_jax.sampling.base import Sampler
from gns_jax.sampling.blocks import MiniBatch
from gns_jax.sampling.budget import Budget, BudgetPolicy
from gns_jax.sampling.exclude import exclude_targets
from gns_jax.streams import (  # noqa: F401 - the stream ids, re-exported from their old home
    CACHE,
    CALIBRATE,
    DROPOUT,
    HEADS,
    INIT,
    NEGATIVES,
    SAMPLE,
    SHUFFLE,
    Streams,
)
from gns_jax.timing import Stopwatch

__all__ = ["BUDGETS", "Batch", "DeviceBatch", "Loader", "LoaderParts", "LoaderState"]


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


class _Lane(NamedTuple):
    """One shard of a batch as this process samples it: its seeds (unpadded, then padded on
    ``device``), its key, and for link prediction its pairs (:class:`LinkSeeds`)."""

    shard: int
    device: jax.Device | None
    ids: np.ndarray
    seeds: jax.Array
    key: jax.Array
    link: LinkSeeds | None = None


_exclude = jax.jit(exclude_targets, static_argnums=2)


@jax.jit
def _seed_labels(labels: jax.Array, seeds: jax.Array) -> tuple[jax.Array, jax.Array]:
    return labels[jnp.maximum(seeds, 0)], seeds >= 0


@dataclasses.dataclass(frozen=True)
class LoaderParts:
    """The collaborators a :class:`Loader` works with, built apart.

    :meth:`from_config` builds them from a :class:`~gns_jax.config.TrainConfig` (what
    :func:`gns_jax.factories.make_loader` does); :meth:`build` from the keyword arguments of
    ``Loader(dataset, sampler, seed=..., ...)``.

    Attributes:
      streams: the random streams (:class:`~gns_jax.streams.Streams`).
      budgets: the :class:`~gns_jax.sampling.budget.BudgetPolicy` that sizes and grows the budget.
      feature_loader: the :class:`~gns_jax.features.FeatureLoader` that gathers and moves the
        input rows (with the neighbour means when the sampler ``needs_means``).
      cache_schedule: the :class:`~gns_jax.cache.CacheSchedule` of the GNS cache (None for
        samplers without ``uses_cache``).
      meter: the :class:`~gns_jax.meters.TransferMeter` of every byte moved (the feature
        loader's and the cache's).
      parallel: data parallelism (:class:`~gns_jax.parallel.DataParallel`), or None.
      prefetch: batches prepared ahead in a background thread (0: in the caller's thread).
      log: where to report compilations and budget growth (a callable taking one line).
    """

    streams: Streams
    budgets: BudgetPolicy
    feature_loader: FeatureLoader
    cache_schedule: CacheSchedule | None
    meter: TransferMeter
    parallel: DataParallel | None = None
    prefetch: int = 2
    log: Callable[[str], None] = lambda line: None

    @classmethod
    def from_config(
        cls,
        dataset: Dataset,
        config: TrainConfig,
        sampler: Sampler,
        features: np.ndarray | None = None,
        meter: TransferMeter | None = None,
        log: Callable[[str], None] | None = None,
        parallel: DataParallel | None = None,
        stream: int = 0,
    ) -> LoaderParts:
        """The parts of a loader of ``sampler`` with ``config``'s options (``seed``, ``budget``,
        ``cache_dist``, ``cache_refresh``, ``prefetch``; the config is taken as valid:
        :meth:`~gns_jax.config.TrainConfig.validate` checks them). ``features``: the feature
        store (default ``dataset.features``); ``meter``: a new one by default; ``stream``: 0 for
        training, another value for independent sampler keys (evaluation)."""
        features = dataset.features if features is None else features
        meter = meter or TransferMeter()
        log = log or (lambda line: None)
        means = None
        if getattr(sampler, "needs_means", False):  # the exact input layer's neighbour means
            start = time.perf_counter()
            means = neighbour_means(dataset.graph, features)
            log(
                f"computed the neighbour means of {dataset.num_nodes:,} nodes in "
                f"{time.perf_counter() - start:.1f}s"
            )
        streams = Streams(config.seed, stream)
        cache = None
        if sampler.uses_cache:
            cache = CacheSchedule(
                dataset.graph,
                features,
                sampler,
                dist=config.cache_dist,
                refresh=config.cache_refresh,
                rng=streams.cache,
                meter=meter,
                devices=[device for _, device in _lanes(parallel)],
                train_idx=dataset.train_idx,
                means=means,
            )
        return cls(
            streams=streams,
            budgets=BudgetPolicy(sampler, config.budget),
            feature_loader=FeatureLoader(features, meter, means=means),
            cache_schedule=cache,
            meter=meter,
            parallel=parallel,
            prefetch=config.prefetch,
            log=log,
        )

    @classmethod
    def build(
        cls,
        dataset: Dataset,
        sampler: Sampler,
        *,
        seed: int = 0,
        features: np.ndarray | None = None,
        cache_dist: str = "degree",
        cache_refresh: int = 1,
        budget: str = "auto",
        prefetch: int = 2,
        meter: TransferMeter | None = None,
        stream: int = 0,
        log: Callable[[str], None] | None = None,
        parallel: DataParallel | None = None,
    ) -> LoaderParts:
        """The parts from the keyword arguments of :class:`Loader` (documented there). The
        options of the same names as :class:`~gns_jax.config.TrainConfig`'s are checked by its
        rules (ConfigError naming the option), then built as :meth:`from_config` builds them."""
        config = TrainConfig(
            seed=int(seed),
            cache_dist=cache_dist,
            cache_refresh=int(cache_refresh),
            budget=budget,
            prefetch=int(prefetch),
        ).validate()
        return cls.from_config(dataset, config, sampler, features, meter, log, parallel, stream)


def _lanes(parallel: DataParallel | None) -> tuple[tuple[int, jax.Device | None], ...]:
    """``(shard, device)`` of this process's shards: one on the default device without
    ``parallel``."""
    return ((0, None),) if parallel is None else parallel.lanes


class Loader:
    """Iterates device-ready batches of a dataset with a sampler.

    ``Loader(dataset, sampler, parts)`` takes its collaborators built (:class:`LoaderParts`);
    ``Loader(dataset, sampler, seed=0, ...)`` builds them from the keyword arguments below
    (:meth:`LoaderParts.build`).

    Args:
      dataset: the graph, features, labels and splits.
      sampler: any :class:`~gns_jax.sampling.base.Sampler`, at its worst-case budget.
      parts: the loader's collaborators (:class:`LoaderParts`); None: built from ``options``.
      nodes: the seed nodes to iterate (default: the training nodes).
      edges: link prediction: the training edges to iterate instead of nodes, with how
        negatives are drawn (:class:`~gns_jax.linkbatch.EdgeSeeds`). A batch is then
        ``B = sampler.batch_size // (2 + neg_ratio)`` positives and their negatives, its seeds
        the pairs' distinct endpoints, its positives taken out of its message passing
        (:func:`~gns_jax.sampling.exclude.exclude_targets`); ``Batch.inputs`` carries the pairs
        (:class:`~gns_jax.batch.DeviceBatch`).
      shuffle: reshuffle ``nodes`` every epoch (training); False keeps their order (inference).
      name: what the log lines call the sampler.
      options: without ``parts``, what they are built from (:meth:`LoaderParts.build`):

        * ``seed``: the seed of every random stream (module docs).
        * ``features``: the feature store to gather from (default ``dataset.features``; pass
          the normalised matrix when the features are normalised).
        * ``cache_dist``: the cache distribution (``degree``, ``uniform``, ``random-walk``,
          ``min-variance``), for samplers with ``uses_cache``.
        * ``cache_refresh``: redraw the cache every this many epochs.
        * ``budget``: ``worst``, ``calibrated`` or ``auto`` (calibrated when that cuts some
          layer's node or edge slots below 75 % of the worst case; the worst case otherwise).
        * ``prefetch``: batches prepared ahead in a background thread (0: in the caller's
          thread).
        * ``meter``: counts the bytes moved (a new one by default).
        * ``stream``: 0 for training; another value derives independent sampler keys
          (evaluation).
        * ``log``: where to report compilations and budget growth (a callable taking one
          line), or None.
        * ``parallel``: data parallelism (:class:`~gns_jax.parallel.DataParallel`): a batch is
          then one shard of ``sampler.batch_size`` seeds per device of its mesh, each sampled
          on its device with key ``fold_in(key_t, shard)`` from that device's replica of the
          cache, and ``Batch.inputs`` is the global batch (every leaf stacked over the shards
          and sharded over the mesh). This process samples only its own devices' shards.
          Without it a batch is one shard on the default device, sampled with ``key_t``.

    Attributes:
      sampler: the sampler given (its worst-case budget); the calibrated one is derived from it.
      budgets: the :class:`~gns_jax.sampling.budget.BudgetPolicy` that sizes and grows the budget.
      cache_schedule: the :class:`~gns_jax.cache.CacheSchedule` of the GNS cache (None for
        samplers without ``uses_cache``).
      feature_loader: the :class:`~gns_jax.features.FeatureLoader` that gathers and moves the
        input rows (``compilations`` counts its assembler's).
      meter: the :class:`~gns_jax.meters.TransferMeter` of every byte moved.
      streams: the random streams (:class:`~gns_jax.streams.Streams`).
    """

    def __init__(
        self,
        dataset: Dataset,
        sampler: Sampler,
        parts: LoaderParts | None = None,
        *,
        nodes: np.ndarray | None = None,
        edges: EdgeSeeds | None = None,
        shuffle: bool = True,
        name: str = "sampler",
        **options,
    ):
        if parts is not None and options:
            raise TypeError(f"Loader: {', '.join(options)} given beside parts (they build them)")
        self.dataset, self.sampler, self.name = dataset, sampler, name
        self.nodes = np.asarray(dataset.train_idx if nodes is None else nodes, dtype=np.int32)
        self.edges = edges
        if edges is not None:
            if nodes is not None:
                raise ConfigError("edges", "a loader iterates nodes or edges, not both")
            per, rest = divmod(sampler.batch_size, 2 + edges.neg_ratio)
            if rest or per < 1:
                raise ConfigError(
                    "batch_size",
                    f"a link sampler's batch is B * (2 + neg_ratio) seeds; {sampler.batch_size} "
                    f"is not a multiple of {2 + edges.neg_ratio}",
                )
            self.link_batch = per  # positives a shard
            self.nodes = np.zeros(0, np.int32)  # no seed nodes: edges
        elif self.nodes.size == 0:
            raise ConfigError("nodes", "no seed nodes to iterate")
        self.shuffle = bool(shuffle)
        if parts is None:
            parts = LoaderParts.build(dataset, sampler, **options)
        self.streams, self.budgets = parts.streams, parts.budgets
        self.feature_loader, self.cache_schedule = parts.feature_loader, parts.cache_schedule
        self.meter, self.parallel = parts.meter, parts.parallel
        self.prefetch, self.log = int(parts.prefetch), parts.log
        self.shards = 1 if self.parallel is None else self.parallel.shards
        self.lanes = _lanes(self.parallel)  # (shard, device) of this process's shards
        per = sampler.batch_size if edges is None else self.link_batch
        self.batch_size = per * self.shards  # seeds (link: positives) of a (global) batch
        items = self.nodes.shape[0] if edges is None else edges.num_edges
        self.num_batches = -(-items // self.batch_size)
        devices = [device for _, device in self.lanes]
        self._labels = {d: self.meter.put(dataset.labels, tag="labels", device=d) for d in devices}
        self.labels = self._labels[devices[0]]
        self.watch = Stopwatch()  # the input side's phases, first epoch excluded
        self.timed_batches = 0

    # -- the options the parts were built from -------------------------------------------------

    @property
    def seed(self) -> int:
        return self.streams.seed

    @property
    def budget_mode(self) -> str:
        return self.budgets.mode

    @property
    def cache_refresh(self) -> int | None:
        """The cache's refresh period (None without a cache)."""
        return None if self.cache_schedule is None else self.cache_schedule.refresh

    @property
    def means(self) -> np.ndarray | None:
        """The neighbour means of the exact input layer (None unless the sampler needs them)."""
        return self.feature_loader.means

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
        return self.budgets.budget

    @property
    def growths(self) -> int:
        return self.budgets.growths

    def state(self, epoch: int, index: int) -> LoaderState:
        """The loader's state, positioned at batch ``index`` of ``epoch``."""
        active, sizes, cache = self.budgets.active, self.budgets.sizes, self.cache_schedule
        return LoaderState(
            epoch=epoch,
            index=index,
            budget=None if active is None else active.budget,
            sizes_new=None if sizes.new is None else tuple(int(v) for v in sizes.new),
            sizes_edges=None if sizes.edges is None else tuple(int(v) for v in sizes.edges),
            growths=self.budgets.growths,
            cache_epoch=-1 if cache is None else cache.epoch,
            cache_ids=None if cache is None else cache.ids,
        )

    def restore(self, state: LoaderState) -> None:
        """Takes up ``state`` (a :attr:`Batch.state`, e.g. from a checkpoint): its budget, the
        sizes that budget growth starts from, and its cache. Iterate from
        ``(state.epoch, state.index)`` next."""
        self.budgets.restore(state.budget, state.sizes_new, state.sizes_edges, state.growths)
        if self.cache_schedule is not None:
            self.cache_schedule.restore(state.cache_epoch, state.cache_ids)

    # -- iteration ---------------------------------------------------------------------------

    def order(self, epoch: int) -> np.ndarray:
        """The seed nodes in epoch ``epoch``'s order."""
        items = self.nodes if self.edges is None else np.arange(self.edges.num_edges)
        if not self.shuffle:
            return items
        return self.streams.shuffle(epoch).permutation(items)

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

    def _produce(self, start_epoch: int, end_epoch: int, start_index: int) -> Iterator[Batch]:
        """The input side of every batch, in order: cache, calibration, then :meth:`_batch`."""
        for epoch in range(start_epoch, end_epoch):
            if epoch == 1:  # the time split leaves out the first epoch (compilation)
                self.watch.seconds.clear()
                self.timed_batches = 0
            first = start_index if epoch == start_epoch else 0
            cache = self.cache_schedule
            refresh = None if cache is None else cache.for_epoch(epoch)
            order = self.order(epoch)
            if self.budgets.active is None:
                self.budgets.calibrate(self._calibration_samples(order))
            for b in range(first, self.num_batches):
                yield self._batch(order, epoch, b, refresh if b == first else None)

    def _batch(self, order: np.ndarray, epoch: int, b: int, refresh) -> Batch:
        """Batch ``b`` of ``epoch``, by the one path: this process's shards sampled under one
        budget (:meth:`_sample`), each shard's input rows gathered and moved to its device, and
        the shards stacked into the global batch (one shard: the batch itself)."""
        before = self._moved()
        counter = epoch * self.num_batches + b
        lanes = [self._lane(order, b, shard, device, counter) for shard, device in self.lanes]
        with self.watch("sample"):
            samples = self._sample(lanes, order, epoch, b)
            jax.block_until_ready(samples)
        parts, rows, inputs = [], [0] * self.shards, 0
        for lane, sample in zip(lanes, samples, strict=True):
            x, num_inputs, rows[lane.shard] = self.feature_loader.load(
                sample.input_nodes, self._cache_on(lane.device), self.watch, device=lane.device
            )
            if lane.link is None:
                labels, mask = _seed_labels(self._labels[lane.device], lane.seeds)
                parts.append(DeviceBatch(x, sample.blocks, labels, mask))
            else:
                link = lane.link
                labels, mask, pairs, targets = self.meter.put(
                    (link.labels, link.mask, link.pairs, link.targets),
                    tag="structure",
                    device=lane.device,
                )
                blocks = _exclude(sample.blocks, targets, self.sampler.budget.max_seeds)
                parts.append(DeviceBatch(x, blocks, labels, mask, pairs))
            inputs += num_inputs
        self.timed_batches += 1
        return Batch(
            inputs=parts[0] if self.parallel is None else self.parallel.stack(parts),
            epoch=epoch,
            index=b,
            seeds=np.concatenate([lane.ids for lane in lanes]),
            num_inputs=inputs,
            rows_moved=int(sum(rows)),
            rows_per_shard=tuple(rows),
            bytes_moved=self._moved() - before,
            refresh=refresh,
            state=self.state(*_next(epoch, b, self.num_batches)),
        )

    def _lane(
        self, order: np.ndarray, b: int, shard: int, device, counter: int, calibration=False
    ) -> _Lane:
        """Shard ``shard`` of batch ``b`` on ``device``: its seeds, put there with ``counter``,
        and its key: ``fold_in(key, counter)`` of the sampler's (the calibration's) stream, and
        ``shard`` folded in too for a shard of a data-parallel batch."""
        per = self.sampler.batch_size if self.edges is None else self.link_batch
        start = b * self.batch_size + shard * per
        ids = order[start : min(start + per, (b + 1) * self.batch_size)]  # possibly none
        link = None
        if self.edges is not None:  # ids are edges: their pairs' endpoints are the seeds
            rng = self.streams.negatives(counter, shard, calibration)
            link = self.edges.batch(self.edges.edges[ids], rng, per)
            ids = link.ids
        seeds, count = self.meter.put(
            (self.sampler.pad_seeds(ids), np.int32(counter)),
            tag="calibration" if calibration else "structure",
            device=device,
        )
        base = self.streams.calibration_key if calibration else self.streams.sample_key
        key = jax.random.fold_in(base, count)
        if self.parallel is not None and not calibration:
            with jax.transfer_guard_host_to_device("allow"):
                key = jax.random.fold_in(key, shard)
        return _Lane(shard, device, ids, seeds, key, link)

    def _calibration_samples(self, order: np.ndarray) -> Iterator[MiniBatch]:
        """The worst-case samples the budget is sized from (``budgets.calibration_samples``):
        sample ``i`` is shard ``i % shards`` of batch ``i // shards``, cycling over the epoch's
        batches when it has fewer (one batch sampled once says little about the next samples of
        it), with key ``fold_in(calibration key, i)``, on this process's first device, alike in
        every process."""
        device = self.lanes[0][1]
        for i in range(self.budgets.calibration_samples(self.shards)):
            b, shard = (i // self.shards) % self.num_batches, i % self.shards
            yield self._timed_sample(self.sampler, self._lane(order, b, shard, device, i, True))

    def _sample(self, lanes: Sequence[_Lane], order, epoch: int, b: int) -> list[MiniBatch]:
        """The lanes sampled under the budget in use. When a shard of any process overflows it,
        every process measures the overflowing shards under the worst case (the same samples
        everywhere: seeds and keys are derived, not exchanged), grows the budget alike and
        samples its shards again; a batch that still overflows takes the worst case."""
        samples = [self._timed_sample(self.budgets.active, lane) for lane in lanes]
        overflow = self._overflow(lanes, samples)
        shards = np.flatnonzero(overflow.any(axis=1))
        if shards.size == 0:
            return samples
        what = f"in shards {shards.tolist()}" if self.parallel else str(overflow[0].tolist())
        here = {lane.shard: lane for lane in lanes}  # another process's shard: sampled here too
        counter, first = epoch * self.num_batches + b, self.lanes[0][1]
        exact = (
            self._timed_sample(self.sampler, here.get(s) or self._lane(order, b, s, first, counter))
            for s in shards.tolist()
        )  # never truncate: measure exactly, grow (one more compilation here and in the step)
        old = self.budgets.grow(exact, what)
        samples = [self._timed_sample(self.budgets.active, lane) for lane in lanes]
        if self._overflow(lanes, samples).any():
            self.budgets.fall_back()
            samples = [self._timed_sample(self.budgets.active, lane) for lane in lanes]
        self.log(
            f"{self.name} budget grew at batch {b + 1} of epoch {epoch + 1} (overflow {what}): "
            f"{_describe(old)} -> {_describe(self.budget)}; the train step compiles again"
        )
        return samples

    def _overflow(self, lanes: Sequence[_Lane], samples: Sequence[MiniBatch]) -> np.ndarray:
        """``[shards, layers]`` overflow counts of the batch, the largest over the processes."""
        counts = np.asarray(jax.device_get([sample.overflow for sample in samples]))
        out = np.zeros((self.shards, counts.shape[1]), dtype=counts.dtype)
        out[[lane.shard for lane in lanes]] = counts
        return out if self.parallel is None else self.parallel.any(out)

    def _timed_sample(self, sampler: Sampler, lane: _Lane) -> MiniBatch:
        """``sampler.sample`` of ``lane`` on its device, reporting a compilation (a new
        budget's first batch)."""
        sampler = sampler.placed(lane.device)
        before, start = sampler.compilations, time.perf_counter()
        batch = sampler.sample(lane.key, lane.seeds, self._cache_on(lane.device))
        if sampler.compilations != before:
            jax.block_until_ready(batch)
            self.log(
                f"compiled the {self.name} for {_describe(sampler.budget)} in "
                f"{time.perf_counter() - start:.1f}s"
            )
        return batch

    def _cache_on(self, device) -> DeviceCache | None:
        return None if self.cache_schedule is None else self.cache_schedule.on(device)

    def _moved(self) -> int:
        return self.meter.bytes_by_tag["features"] + self.meter.bytes_by_tag["structure"]


def _next(epoch: int, index: int, num_batches: int) -> tuple[int, int]:
    return (epoch, index + 1) if index + 1 < num_batches else (epoch + 1, 0)


def _describe(budget: Budget) -> str:
    return f"input-layer slots {budget.max_src[0]:,}, edge slots {sum(budget.max_edges):,}"
