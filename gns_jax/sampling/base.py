"""The interface every sampler shares, and the padding of a batch's seeds. Host-side.

A sampler turns a batch of seed nodes into a :class:`~gns_jax.sampling.blocks.MiniBatch` of
fixed shapes. Node-wise sampling, GNS and any other sampler offer the same :class:`Sampler`
interface, so the loader, the train step and the theory checks never branch on the kind: a
sampler that reads the GNS cache says so in ``uses_cache``, and the loader then keeps one.

Fan-outs are listed **from the output layer to the input layer** everywhere in the public API
(the command line's ``--fanouts 15,10,5``, :class:`~gns_jax.config.TrainConfig`, every sampler's
constructor): the first entry is the number of neighbours sampled for each seed. Blocks are
stored the other way round, input layer first (``MiniBatch.blocks[0]`` is the input layer), as
the model consumes them.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import jax
import numpy as np

from gns_jax.errors import ConfigError
from gns_jax.meters import CompileCounter
from gns_jax.sampling.blocks import MiniBatch
from gns_jax.sampling.budget import Budget

if TYPE_CHECKING:  # pragma: no cover
    from gns_jax.cache import DeviceCache

__all__ = ["JittedSampler", "Sampler", "check_fanouts", "pad_seeds"]


@runtime_checkable
class Sampler(Protocol):
    """What the loader needs of a sampler.

    Attributes:
      name: short name (``"ns"``, ``"gns"``), recorded in results.
      fanouts: neighbours per destination, output layer first; one model layer each.
      batch_size: seeds per batch.
      budget: the static sizes of its batches; at construction, the exact worst case.
      uses_cache: whether :meth:`sample` reads a :class:`~gns_jax.cache.DeviceCache`; the loader
        then draws one (and redraws it every ``cache_refresh`` epochs) and passes it.
      cache_size: ``m``, the cache draws that fix the cache's static shapes (0 when unused).
      needs_other: whether that cache must hold the non-cached adjacency too.
      compilations: how many times its jitted sampling function was traced.
    """

    name: str
    fanouts: tuple[int, ...]
    batch_size: int
    budget: Budget
    uses_cache: bool
    cache_size: int
    needs_other: bool

    @property
    def compilations(self) -> int: ...

    def pad_seeds(self, seeds: np.ndarray) -> np.ndarray:
        """Host-side: the seeds padded with ``-1`` to ``budget.max_seeds`` slots."""

    def sample(
        self, key: jax.Array, seeds: jax.Array, cache: DeviceCache | None = None
    ) -> MiniBatch:
        """One mini-batch rooted at ``seeds`` (as :meth:`pad_seeds` returns them). Jitted."""

    def with_budget(self, budget: Budget) -> Sampler:
        """The same sampler with other static sizes (jitted anew; same device topology)."""


def check_fanouts(fanouts, batch_size: int) -> tuple[int, ...]:
    """Validates fan-outs and batch size (ConfigError naming the parameter); returns the
    fan-outs as ints."""
    try:
        fanouts = tuple(int(f) for f in fanouts)
    except (TypeError, ValueError):
        raise ConfigError("fanouts", f"expected a sequence of integers, got {fanouts!r}") from None
    if not fanouts or min(fanouts) < 1:
        raise ConfigError("fanouts", f"every fan-out must be a positive integer, got {fanouts}")
    if int(batch_size) < 1:
        raise ConfigError("batch_size", f"must be a positive integer, got {batch_size}")
    return fanouts


def cap_fanouts(fanouts: tuple[int, ...], graph) -> tuple[int, ...]:
    """``fanouts`` with each capped at the graph's largest degree (at least 1): a node has no
    more neighbours to draw, so uniform draws of ``min(k, d_v)`` neighbours are the same, while
    the static shapes (``[destinations, k]`` per layer) and the worst-case budget stop growing
    with ``k`` (``--fanouts 100000,100000`` would otherwise allocate for 10^10 edges)."""
    largest = int(np.max(graph.degrees(), initial=0))
    return tuple(min(int(f), max(largest, 1)) for f in fanouts)


def pad_seeds(seeds: np.ndarray, budget: Budget) -> np.ndarray:
    """Host-side: pads ``seeds`` to ``budget.max_seeds`` with -1 (the last slot stays a dummy).

    Raises ConfigError when there are more seeds than the batch size, an id is negative, or a
    seed repeats (a block's destinations must be distinct).
    """
    seeds = np.asarray(seeds, dtype=np.int32)
    if seeds.ndim != 1:
        raise ConfigError("seeds", f"must be one-dimensional, got shape {seeds.shape}")
    if seeds.shape[0] > budget.max_seeds - 1:
        raise ConfigError(
            "seeds", f"{seeds.shape[0]} seeds exceed the batch size {budget.max_seeds - 1}"
        )
    if seeds.size and seeds.min() < 0:
        raise ConfigError("seeds", f"node ids must be >= 0, got {int(seeds.min())}")
    if np.unique(seeds).size != seeds.size:
        raise ConfigError("seeds", "a seed repeats; the seeds of a batch must be distinct")
    out = np.full(budget.max_seeds, -1, dtype=np.int32)
    out[: seeds.shape[0]] = seeds
    return out


class JittedSampler:
    """What every sampler of this package shares: a jitted sampling function per budget (kept
    by every :meth:`with_budget` copy, so a budget seen before compiles no more), a count of its
    compilations, and seed padding. A subclass sets ``budget``, ``batch_size``, ``fanouts`` and
    ``topology``, calls :meth:`_start`, and implements :meth:`_function` (the sampling function
    of a budget, to be jitted) and :meth:`sample`."""

    uses_cache = False
    cache_size = 0
    needs_other = False

    def _start(self) -> None:
        self._traces = CompileCounter()
        self._jitted: dict = {}
        self._placed: dict = {}  # device -> the topology's copy there (shared by every copy)
        self._sample = self._jit(self.budget)

    def _function(self, budget: Budget):
        raise NotImplementedError

    def _jit(self, budget: Budget):
        if budget not in self._jitted:
            self._jitted[budget] = jax.jit(self._traces.wrap(self._function(budget)))
        return self._jitted[budget]

    @property
    def compilations(self) -> int:
        """Traces (compilations) of the jitted sampling function, all budgets together."""
        return self._traces.count

    def pad_seeds(self, seeds: np.ndarray) -> np.ndarray:
        """Host-side: pads up to ``budget.max_seeds`` with -1 (the last slot is always a dummy)."""
        return pad_seeds(seeds, self.budget)

    def with_budget(self, budget: Budget):
        """The same sampler (same device topology) with other static sizes."""
        other = copy.copy(self)
        other.budget = budget
        other._sample = self._jit(budget)
        return other

    def placed(self, device: jax.Device | None):
        """The same sampler sampling on ``device`` (its topology copied there once, kept for
        every budget); itself for ``None``. Data-parallel loaders sample each shard on its own
        device."""
        if device is None:
            return self
        if device not in self._placed:
            self._placed[device] = jax.device_put(self.topology, device)
        other = copy.copy(self)
        other.topology = self._placed[device]
        return other
