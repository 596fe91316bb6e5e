"""Static batch sizes: the :class:`Budget`, its buckets, its worst case, its calibration, and the
policy that chooses and grows a loader's budget (:class:`BudgetPolicy`).

Every array a sampler returns has a shape fixed by a ``Budget`` (never by the data), so the
sampler and the train step compile once per budget. Two ways to choose one:

* **worst case** (:meth:`Budget.worst_case`): exact capacities no batch can overflow; affordable on
  small graphs, wasteful on large ones (most slots stay padding, and padding costs compute and
  transfer);
* **calibrated** (:meth:`Budget.calibrated`, fed by :class:`LayerSizes`): the largest real sizes
  of a few batches sampled under the worst case, plus head-room, each rounded up to a
  :func:`bucket`. A batch that does not fit is flagged by the sampler (``MiniBatch.overflow``),
  never truncated: the loader measures it, grows the budget and samples it again.

:class:`BudgetPolicy` is that choice for a loader (``--budget``: ``worst``, ``calibrated`` or
``auto``): how many worst-case samples calibration takes, the budget they give, and how it grows
on overflow. Host-side, except :meth:`LayerSizes.observe`, which reads the sizes of a device
batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gns_jax.config import BUDGETS
from gns_jax.errors import ConfigError

Sampler = Any  # a gns_jax.sampling.base.Sampler (which imports this module)

__all__ = [
    "AUTO_SAVING",
    "CALIBRATION_BATCHES",
    "CALIBRATION_MARGIN",
    "GROWTH_MARGIN",
    "Budget",
    "BudgetPolicy",
    "LayerSizes",
    "bucket",
]

CALIBRATION_BATCHES = 8  # worst-case batches whose real sizes size a calibrated budget
CALIBRATION_MARGIN = 1.2  # head-room over the largest size seen (then rounded up to a bucket)
GROWTH_MARGIN = 1.5  # head-room after an overflow
AUTO_SAVING = 0.75  # auto keeps the worst case unless calibration cuts a layer's slots below this


def bucket(n: int, minimum: int = 64) -> int:
    """Smallest ``m * 2^k >= n`` with ``m`` in 8..15, and at least ``minimum``.

    Steps of at most 12.5 % bound both the padding that crosses to the device and the number of
    distinct shapes (about eight per doubling of the row count).
    """
    n = max(n, minimum)
    shift = max(n.bit_length() - 4, 0)
    return -(-n >> shift) << shift if n > 15 else n


class Budget(NamedTuple):
    """Static sizes of one sampler configuration. Hashable: a valid jit static argument.

    Attributes:
      max_seeds: seed slots, ``batch_size + 1`` (the last one is a dummy).
      max_src: source slots per block, input layer first; includes the dummy slot.
      max_edges: edge slots per block, input layer first.
    """

    max_seeds: int
    max_src: tuple[int, ...]
    max_edges: tuple[int, ...]

    @property
    def max_dst(self) -> tuple[int, ...]:
        """Destination slots per block, input layer first."""
        return (*self.max_src[1:], self.max_seeds)

    @classmethod
    def worst_case(cls, batch_size: int, widths: Sequence[int], num_nodes: int) -> Budget:
        """Exact capacities for fan-out samplers; no batch can overflow them.

        ``widths`` are the neighbours taken per destination, **input layer first** (block order).
        Walking from the output layer down, each block has ``max_dst`` destination slots (the
        sources of the block above) and ``max_dst * width`` edge slots (one row per destination,
        the dummy row included); its sources are ``[destination prefix | new nodes | dummy]`` with
        at most ``min((max_dst - 1) * width, num_nodes)`` new nodes.
        """
        max_dst = batch_size + 1
        max_src, max_edges = [], []
        for width in reversed(widths):
            max_edges.append(max_dst * width)
            max_src.append(max_dst + min((max_dst - 1) * width, num_nodes) + 1)
            max_dst = max_src[-1]
        return cls(batch_size + 1, tuple(reversed(max_src)), tuple(reversed(max_edges)))

    def calibrated(
        self, new_nodes: Sequence[int], edges: Sequence[int], margin: float = 1.1
    ) -> Budget:
        """A budget sized from observed batches, never above this one (the worst case).

        Args:
          new_nodes: per layer (input first), the most source nodes seen that were not also
            destinations, over the calibration batches.
          edges: per layer, the most real edges seen.
          margin: head-room factor; each size is then rounded up to a bucket (at most 12.5 %
            more), which also keeps the number of distinct shapes small when a budget grows.
        """
        layers = len(self.max_src)
        max_src, max_edges = [0] * layers, [0] * layers
        max_dst = self.max_seeds
        for layer in reversed(range(layers)):
            worst_dst = self.max_dst[layer]
            worst_new = self.max_src[layer] - worst_dst - 1
            width = self.max_edges[layer] // worst_dst
            new = min(worst_new, bucket(math.ceil(new_nodes[layer] * margin) + 1, 16))
            max_src[layer] = max_dst + new + 1
            max_edges[layer] = min(max_dst * width, bucket(math.ceil(edges[layer] * margin), 16))
            max_dst = max_src[layer]
        return Budget(self.max_seeds, tuple(max_src), tuple(max_edges))

    def saving(self, worst: Budget) -> float:
        """The largest fraction of ``worst``'s slots that this budget keeps, over every layer's
        node and edge slots (1.0: no layer shrinks)."""
        mine = self.max_src + self.max_edges
        theirs = worst.max_src + worst.max_edges
        return min(a / w for a, w in zip(mine, theirs))


@jax.jit
def _layer_sizes(batch) -> tuple[jax.Array, jax.Array]:
    """Per block (input first): source nodes that are not destinations, and edge slots needed
    (the real edges, unless the sampler reports its needs in ``batch.sizes``)."""
    if batch.sizes is not None:
        return batch.sizes[:, 0], batch.sizes[:, 1]
    new = [jnp.sum(b.src_nodes >= 0) - jnp.sum(b.dst_mask) for b in batch.blocks]
    edges = [jnp.sum(b.edge_weight != 0) for b in batch.blocks]
    return jnp.stack(new), jnp.stack(edges)


class LayerSizes:
    """The largest real layer sizes seen in worst-case batches; what a calibrated budget covers.

    Per block (input first): source nodes that are not destinations, and real edges.
    """

    def __init__(self, new: Sequence[int] | None = None, edges: Sequence[int] | None = None):
        self.new = None if new is None else np.asarray(new, dtype=np.int64)
        self.edges = None if edges is None else np.asarray(edges, dtype=np.int64)

    def observe(self, batch) -> None:
        """Folds one batch's real sizes into the maxima (one device -> host sync)."""
        new, edges = (np.asarray(a, dtype=np.int64) for a in jax.device_get(_layer_sizes(batch)))
        self.new = new if self.new is None else np.maximum(self.new, new)
        self.edges = edges if self.edges is None else np.maximum(self.edges, edges)

    def budget(self, worst: Budget, margin: float) -> Budget:
        """:meth:`Budget.calibrated` over the maxima seen so far."""
        return worst.calibrated(self.new, self.edges, margin)


class BudgetPolicy:
    """How a loader chooses its budget and grows it. Host-side.

    ``worst`` samples under the sampler's exact worst case. ``calibrated`` samples under a budget
    sized from :meth:`calibration_samples` worst-case samples plus :data:`CALIBRATION_MARGIN`
    (:meth:`calibrate`). ``auto`` calibrates, but keeps the worst case unless calibration cuts
    some layer's node or edge slots to :data:`AUTO_SAVING` of it or less (then no overflow is
    possible). A batch that overflows a calibrated budget is measured under the worst case and
    the budget grows from every size seen so far, with :data:`GROWTH_MARGIN` (:meth:`grow`); if
    the batch still overflows, the loader falls back to the worst case (:meth:`fall_back`).
    The module's constants are read when used (a test may change them).

    Attributes:
      worst: the sampler given, at its worst-case budget.
      mode: ``worst``, ``calibrated`` or ``auto``.
      active: the sampler at the budget in use (None before :meth:`calibrate`).
      sizes: the largest layer sizes seen (:class:`LayerSizes`), what growth sizes from.
      growths: the growths so far.
    """

    def __init__(self, worst: Sampler, mode: str = "auto"):
        if mode not in BUDGETS:
            raise ConfigError("budget", f"one of {BUDGETS}, got '{mode}'")
        self.worst, self.mode = worst, mode
        self.active: Sampler = None
        self.sizes = LayerSizes()
        self.growths = 0

    @property
    def budget(self) -> Budget:
        """The budget in use (the worst case until calibrated)."""
        return (self.active or self.worst).budget

    def calibration_samples(self, shards: int = 1) -> int:
        """Worst-case samples calibration takes: :data:`CALIBRATION_BATCHES`, at least one per
        shard of a batch (none for ``worst``)."""
        return 0 if self.mode == "worst" else max(CALIBRATION_BATCHES, shards)

    def calibrate(self, samples: Iterable) -> None:
        """Sizes the budget from ``samples``, taken under the worst case (an iterable, read one
        sample at a time; not read at all for ``worst``)."""
        if self.mode == "worst":
            self.active = self.worst
            return
        for sample in samples:
            self.sizes.observe(sample)
        active = self.worst.with_budget(self.sizes.budget(self.worst.budget, CALIBRATION_MARGIN))
        if self.mode == "auto" and active.budget.saving(self.worst.budget) > AUTO_SAVING:
            active = self.worst  # the exact worst case is affordable: no overflow possible
        self.active = active

    def grow(self, exact_samples: Iterable, what: str = "") -> Budget:
        """Observes ``exact_samples`` (the overflowing samples again, under the worst case) and
        grows the budget from every size seen so far; returns the budget it replaces. Raises
        RuntimeError, before reading ``exact_samples``, when the budget is the worst case (a
        bug: nothing overflows it); ``what`` describes the overflow in that message."""
        if self.active is self.worst:
            what = f" {what}" if what else ""
            raise RuntimeError(f"sampler budget overflow{what} under the worst case (a bug)")
        old = self.active.budget
        for sample in exact_samples:
            self.sizes.observe(sample)
        self.active = self.worst.with_budget(self.sizes.budget(self.worst.budget, GROWTH_MARGIN))
        self.growths += 1
        return old

    def fall_back(self) -> None:
        """Takes the exact worst case (a grown budget that still overflowed)."""
        self.active = self.worst

    def restore(
        self,
        budget: Budget | None,
        sizes_new: Sequence[int] | None,
        sizes_edges: Sequence[int] | None,
        growths: int,
    ) -> None:
        """Takes up a saved policy state (a ``LoaderState``'s fields): the budget in use (None:
        not calibrated yet), the sizes seen and the growths."""
        self.sizes = LayerSizes(sizes_new, sizes_edges)
        self.growths = int(growths)
        if budget is None:
            self.active = None
        elif budget == self.worst.budget:
            self.active = self.worst
        else:
            self.active = self.worst.with_budget(budget)
