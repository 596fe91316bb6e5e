"""Progress and notices for the person running a command, on stderr (:class:`Reporter`).
Host-side."""

from __future__ import annotations

import time

__all__ = ["Reporter"]


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
