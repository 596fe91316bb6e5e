"""Probes of this process from ``/proc`` (Linux): peak and current resident memory, disk reads,
major page faults, and :class:`IoMeter`, which follows them over a run. Host-side.

Off Linux every probe answers None (peak RSS falls back to ``ru_maxrss``).
"""

from __future__ import annotations

import resource
from pathlib import Path

from gns_jax.pagecache import PageCacheCounter, hit_rate

__all__ = [
    "IoMeter",
    "major_faults",
    "memory_split",
    "peak_rss_gib",
    "process_io",
    "reset_peak_rss",
]


def reset_peak_rss() -> None:
    """Resets the kernel's peak-RSS mark of this process (Linux); harmless elsewhere."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_rss_gib() -> float:
    """Peak resident memory of this process in GiB (``VmHWM``; ``ru_maxrss`` off Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _proc_fields(path: str, names: tuple[str, ...]) -> dict[str, int] | None:
    """``{name: first integer}`` of the ``name:`` lines of a ``/proc`` file; None off Linux."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    out = {}
    for line in lines:
        name, _, rest = line.partition(":")
        if name in names and rest.split():
            out[name] = int(rest.split()[0])
    return out


def process_io() -> dict[str, int] | None:
    """This process's I/O counters (``/proc/self/io``): ``read_bytes``, the bytes it caused to be
    read from storage (page-cache misses, memory-mapped pages included), and ``rchar``, the bytes
    its read calls returned (page-cache hits included, mapped pages not); None off Linux."""
    return _proc_fields("/proc/self/io", ("read_bytes", "rchar"))


def major_faults() -> int | None:
    """Page faults of this process (all its threads) that had to read from storage: a touched
    page of a memory-mapped file that was not in the page cache (``majflt`` of
    ``/proc/self/stat``). None off Linux."""
    try:
        stat = Path("/proc/self/stat").read_text()
    except OSError:
        return None
    # Fields after the command name, which is parenthesised and may hold spaces: state is
    # field 3, majflt field 12.
    return int(stat.rpartition(")")[2].split()[9])


def memory_split() -> dict[str, float] | None:
    """Resident memory now, in GiB: ``anon`` (the process's own allocations) and ``file``
    (mapped file pages, e.g. memory-mapped features, which the kernel can drop and re-read);
    ``VmHWM`` counts both. None off Linux."""
    kib = _proc_fields("/proc/self/status", ("RssAnon", "RssFile"))
    if not kib or len(kib) < 2:
        return None
    return {"anon": kib["RssAnon"] / 2**20, "file": kib["RssFile"] / 2**20}


class IoMeter:
    """Disk reads and anonymous memory over a run: created when it begins, ``sample()`` where
    memory peaks (after every epoch and its evaluation), ``to_json()`` for the results.

    The anonymous peak is the largest sample (the kernel keeps no peak of it); the disk bytes are
    the change of ``read_bytes`` since creation, so that the reads that loaded the dataset before
    the run are not counted. ``lap()`` gives the reads and major faults since the previous lap
    (or creation), for one epoch's training loop or one evaluation. Off Linux every figure is
    None.
    """

    def __init__(self, page_cache: PageCacheCounter | None = None):
        self.io0 = process_io()
        self.peak_anon: float | None = None
        #: the counter the gathers of this run count into (``TransferMeter.page_cache``)
        self.page_cache = page_cache or PageCacheCounter()
        self._start = self._lap = self._counters()

    def _counters(self) -> tuple:
        io = process_io()
        read = None if io is None else io["read_bytes"]
        return read, major_faults(), self.page_cache.snapshot()

    @staticmethod
    def _since(now: tuple, before: tuple) -> dict:
        out = {
            name: None if a is None or b is None else a - b
            for name, a, b in zip(("disk_read_bytes", "major_faults"), now, before, strict=False)
        }
        rows, resident = (a - b for a, b in zip(now[2], before[2], strict=True))
        return out | {"mapped_rows_read": rows, "page_cache_hit_rate": hit_rate(rows, resident)}

    def lap(self) -> dict:
        """Since the previous lap: ``disk_read_bytes``, ``major_faults`` (None off Linux),
        ``mapped_rows_read`` and ``page_cache_hit_rate`` (None when no row came from a mapped
        file)."""
        now, before = self._counters(), self._lap
        self._lap = now
        return self._since(now, before)

    def sample(self) -> None:
        split = memory_split()
        if split is not None:
            self.peak_anon = max(self.peak_anon or 0.0, split["anon"])

    def to_json(self) -> dict:
        self.sample()
        now, split = process_io(), memory_split()
        counted = now is not None and self.io0 is not None
        return {
            **self._since(self._counters(), self._start),
            "read_call_bytes": now["rchar"] - self.io0["rchar"] if counted else None,
            "peak_rss_anon_gib": self.peak_anon,
            "rss_file_gib": None if split is None else split["file"],
        }
