"""The counters and probes of a run, re-exported from the modules that hold them (one job each):

* :mod:`gns_jax.meters`: :class:`TransferMeter` (bytes and puts host -> device, by tag) and
  :class:`CompileCounter` (compilations);
* :mod:`gns_jax.timing`: :class:`Stopwatch` (wall-clock splits by phase);
* :mod:`gns_jax.probes`: ``/proc`` probes: peak RSS, resident memory, disk reads, major faults,
  and :class:`IoMeter`, which follows them over a run;
* :mod:`gns_jax.pagecache`: :class:`PageCacheCounter` (``mincore``: the page-cache hit rate of
  reads from memory-mapped files), :func:`drop_from_page_cache`;
* :mod:`gns_jax.environment`: :func:`environment` (what a run ran on), the last-level cache;
* :mod:`gns_jax.progress`: :class:`Reporter` (progress and notices on stderr).

``from gns_jax.instrument import X`` keeps working for every name below; code inside the package
imports from those modules.
"""

from __future__ import annotations

from gns_jax.environment import cache_sweep_bytes, environment, last_level_cache_bytes
from gns_jax.meters import CompileCounter, TransferMeter
from gns_jax.pagecache import PageCacheCounter, drop_from_page_cache, hit_rate
from gns_jax.probes import (
    IoMeter,
    major_faults,
    memory_split,
    peak_rss_gib,
    process_io,
    reset_peak_rss,
)
from gns_jax.progress import Reporter
from gns_jax.timing import Stopwatch

__all__ = [
    "CompileCounter",
    "IoMeter",
    "PageCacheCounter",
    "Stopwatch",
    "Reporter",
    "TransferMeter",
    "cache_sweep_bytes",
    "drop_from_page_cache",
    "environment",
    "hit_rate",
    "last_level_cache_bytes",
    "major_faults",
    "memory_split",
    "peak_rss_gib",
    "process_io",
    "reset_peak_rss",
]
