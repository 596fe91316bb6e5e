"""Counters: bytes and rows moved host->device, compilations, wall-clock splits. Boundary module.

:class:`TransferMeter` is the one place the training loop moves host data to a device, so every
byte that crosses is counted by tag. On the CPU backend ``device_put`` may not copy, but the count
is the same: it is what would cross to an accelerator.
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import mmap
import os
import platform
import resource
import threading
import time
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np

from gns_jax import native

__all__ = [
    "CompileCounter",
    "IoMeter",
    "PageCacheCounter",
    "Stopwatch",
    "Reporter",
    "TransferMeter",
    "drop_from_page_cache",
    "environment",
    "major_faults",
    "memory_split",
    "peak_rss_gib",
    "process_io",
    "reset_peak_rss",
]


@dataclasses.dataclass
class TransferMeter:
    """Counts logical bytes and puts host -> device, by tag (``features``, ``structure``, ...)."""

    device: jax.Device | None = None
    bytes_by_tag: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    puts_by_tag: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    #: the rows its loader's gathers read from memory-mapped files (shared with an IoMeter)
    page_cache: PageCacheCounter = dataclasses.field(default_factory=lambda: PageCacheCounter())

    def put(self, tree, *, tag: str, device: jax.Device | None = None):
        """``jax.device_put(tree)`` (to ``device``, default the meter's) with its bytes counted
        under ``tag``."""
        self.bytes_by_tag[tag] += sum(np.asarray(leaf).nbytes for leaf in jax.tree.leaves(tree))
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


def drop_from_page_cache(path) -> None:
    """Writes ``path`` back and drops its pages from the page cache (``posix_fadvise``, no root
    needed), so that its next reads come from storage; the pages a live mapping has touched stay."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


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


class PageCacheCounter:
    """Rows read from memory-mapped feature files, and how many of them were in the page cache
    just before the read (``mincore``): the page-cache hit rate of a run that reads its features
    from disk. Held by the :class:`TransferMeter` of a loader (its gathers count into it) and
    read by an :class:`IoMeter` given the same counter; readers take differences."""

    def __init__(self):
        self.rows = 0
        self.resident = 0
        self._lock = threading.Lock()
        self._mincore = _libc_mincore()

    def count(self, store: np.ndarray, ids: np.ndarray) -> None:
        """Counts the rows ``ids`` of ``store`` about to be read, if ``store`` is a memory-mapped
        C-ordered array (anything else is in memory: not counted). One ``mincore`` call over
        the pages the rows span."""
        if self._mincore is None or not isinstance(store, np.memmap) or ids.size == 0:
            return
        if not store.flags.c_contiguous:
            return
        page = mmap.PAGESIZE
        stride = store.strides[0]
        first_row, last_row = int(ids.min()), int(ids.max())
        lo = store.ctypes.data + first_row * stride
        start = lo - lo % page
        length = store.ctypes.data + (last_row + 1) * stride - start
        pages = -(-length // page)
        vec = np.zeros(pages, dtype=np.uint8)
        if self._mincore(ctypes.c_void_p(start), ctypes.c_size_t(length), vec.ctypes.data) != 0:
            return  # not a mapping mincore can read: count nothing rather than guess
        kernel = native.count_resident_kernel(ids.dtype)
        if kernel is not None:  # one pass (the NumPy one below takes 8 ms for 300,000 rows)
            ids = np.ascontiguousarray(ids)
            pointer = ids.ctypes.data_as(kernel.argtypes[1])
            resident = int(
                kernel(vec.ctypes.data, pointer, ids.size, store.ctypes.data - start, stride, page)
            )
        else:
            absent = np.concatenate([[0], np.cumsum((vec & 1) == 0)])
            offset = store.ctypes.data - start + ids.astype(np.int64) * stride
            first, last = offset // page, (offset + stride - 1) // page
            resident = int(np.count_nonzero(absent[last + 1] == absent[first]))
        with self._lock:
            self.rows += int(ids.size)
            self.resident += resident

    def snapshot(self) -> tuple[int, int]:
        with self._lock:
            return self.rows, self.resident


def _libc_mincore():
    try:
        fn = ctypes.CDLL(None, use_errno=True).mincore
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


def hit_rate(rows: int, resident: int) -> float | None:
    """``resident / rows``; None when no row was read from a mapped file."""
    return resident / rows if rows else None


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


def last_level_cache_bytes() -> int | None:
    """The size of the CPU's largest cache (Linux's ``/sys/devices/system/cpu/cpu0/cache``), or
    None where it cannot be read."""
    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = entry.read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes) if sizes else None


def cache_sweep_bytes(floor: int = 64 << 20, cap: int = 1 << 30) -> int:
    """Bytes to write between timed copies so that their data is no longer in any cache: twice
    the last-level cache (:func:`last_level_cache_bytes`), at least ``floor`` (where it is
    unknown or small) and at most ``cap``. The benchmarks' cold plain copies use it."""
    llc = last_level_cache_bytes() or 0
    return int(min(max(2 * llc, floor), cap))


def environment() -> dict:
    """What a run ran on: CPU model, cores, memory, Python, JAX backend and devices, and the
    glibc tunables (gns_jax/hostmem.py). Every reported figure names it."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        memory = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        memory = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": memory,
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
        "last_level_cache_mib": (lambda b: None if b is None else round(b / 2**20, 1))(
            last_level_cache_bytes()
        ),
    }


class Reporter:
    """Progress and notices for the person running a command, on stderr.

    ``line`` prints one line (thread-safe; the input thread reports compilations and budget
    growth through it). :meth:`progress` shows a long epoch's progress: a live bar on a terminal
    (rich, which comes with flax), and otherwise a line at most every ``every_s`` seconds.
    ``quiet=True`` silences everything.
    """

    def __init__(self, quiet: bool = False, stream=None, every_s: float = 30.0):
        import sys
        import threading

        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.every_s = every_s
        self._lock = threading.Lock()
        self._bar = None

    def line(self, text: str) -> None:
        if self.quiet:
            return
        with self._lock:
            if self._bar is not None:
                self._bar.console.print(text, highlight=False, markup=False)
            else:
                print(text, file=self.stream, flush=True)

    def progress(self, title: str, total: int, min_total: int = 20) -> _Progress:
        """A context manager whose ``advance()`` counts one step of ``total``."""
        return _Progress(self, title, total, show=not self.quiet and total >= min_total)


class _Progress:
    def __init__(self, reporter: Reporter, title: str, total: int, show: bool):
        self.reporter, self.title, self.total, self.show = reporter, title, total, show
        self.done, self._task = 0, None

    def __enter__(self):
        if not self.show:
            return self
        self.start = self.last = time.perf_counter()
        isatty = getattr(self.reporter.stream, "isatty", lambda: False)()
        if isatty:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

            bar = Progress(
                "{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=Console(file=self.reporter.stream),
                transient=True,
            )
            bar.start()
            self._task = bar.add_task(self.title, total=self.total)
            with self.reporter._lock:
                self.reporter._bar = bar
        return self

    def advance(self) -> None:
        self.done += 1
        if not self.show:
            return
        bar = self.reporter._bar
        if bar is not None and self._task is not None:
            bar.update(self._task, completed=self.done)
            return
        now = time.perf_counter()
        if now - self.last >= self.reporter.every_s and self.done < self.total:
            self.last = now
            rate = self.done / max(now - self.start, 1e-9)
            self.reporter.line(
                f"  {self.title}: {self.done}/{self.total} batches, {rate:.2f} batches/s, "
                f"about {(self.total - self.done) / max(rate, 1e-9):.0f}s left"
            )

    def __exit__(self, *exc):
        bar = self.reporter._bar
        if bar is not None and self._task is not None:
            bar.stop()
            with self.reporter._lock:
                self.reporter._bar = None
        return False
