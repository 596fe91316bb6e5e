"""Wall-clock splits: :class:`Stopwatch` accumulates the time of each phase. Host-side."""

from __future__ import annotations

import collections
import dataclasses
import time

__all__ = ["Stopwatch"]


@dataclasses.dataclass
class Stopwatch:
    """Accumulates wall time by phase: ``with watch("sample"): ...``."""

    seconds: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def __call__(self, phase: str):
        return _Lap(self, phase)


class _Lap:
    def __init__(self, watch: Stopwatch, phase: str):
        self.watch, self.phase = watch, phase

    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.watch.seconds[self.phase] += time.perf_counter() - self.start
        return False
