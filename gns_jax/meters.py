"""Counters: bytes and rows moved host->device, and compilations. Boundary module.

:class:`TransferMeter` is the one place the training loop moves host data to a device, so every
byte that crosses is counted by tag. On the CPU backend ``device_put`` may not copy, but the count
is the same: it is what would cross to an accelerator. :class:`CompileCounter` counts the traces
(compilations) of a jitted function.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable

import jax
import numpy as np

from gns_jax.pagecache import PageCacheCounter

__all__ = ["CompileCounter", "TransferMeter"]


@dataclasses.dataclass
class TransferMeter:
    """Counts logical bytes and puts host -> device, by tag (``features``, ``structure``, ...)."""

    device: jax.Device | None = None
    bytes_by_tag: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    puts_by_tag: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    #: the rows its loader's gathers read from memory-mapped files (shared with an IoMeter)
    page_cache: PageCacheCounter = dataclasses.field(default_factory=lambda: PageCacheCounter())

    def put(self, tree, *, tag: str, device: jax.Device | None = None, nbytes: int | None = None):
        """``jax.device_put(tree)`` (to ``device``, default the meter's) with its bytes counted
        under ``tag`` (``nbytes`` of them when given: the logical bytes of a put that aliases a
        larger host buffer)."""
        if nbytes is None:
            nbytes = sum(np.asarray(leaf).nbytes for leaf in jax.tree.leaves(tree))
        self.bytes_by_tag[tag] += nbytes
        self.puts_by_tag[tag] += 1
        return jax.device_put(tree, device or self.device)


class CompileCounter:
    """Wraps a function so that each trace (one per compilation by ``jax.jit``) is counted.

    Example::

        counter = CompileCounter()
        step = jax.jit(counter.wrap(train_step))
        ...
        counter.count  # how many times ``train_step`` was traced, i.e. compiled
    """

    def __init__(self):
        self.count = 0

    def wrap(self, fn: Callable) -> Callable:
        def traced(*args, **kwargs):
            self.count += 1  # runs at trace time only
            return fn(*args, **kwargs)

        traced.__name__ = getattr(fn, "__name__", "traced")
        return traced
