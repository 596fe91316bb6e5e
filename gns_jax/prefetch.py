"""The prefetch queue: batches prepared ahead in a bounded background thread. Host-side.

While the device runs step ``t``, a thread samples and gathers the inputs of the next ``depth``
batches (JAX dispatch is thread-safe; NumPy gathers release the GIL). ``depth=0`` runs the input
side in the caller's thread, one batch at a time (the synchronous baseline the benchmark compares
against). Errors in the thread are raised in the caller at the batch where they happened.

The thread runs under ``jax.transfer_guard_host_to_device("disallow")``: everything it moves goes
through an explicit ``device_put`` (``TransferMeter.put``), so an accidental implicit transfer is
an error rather than a hidden cost.

A thread still running when the interpreter exits (a loop left with ``break`` and never closed)
is stopped and joined first, so that it is not killed inside XLA's native code.
(``gns_jax.pipeline.prefetch``, this class's former name, still works and warns.)
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import jax

__all__ = ["Prefetcher", "offer", "stop_threads"]

_DONE = object()


class Prefetcher:
    """Iterates ``items`` at most ``depth`` items ahead in a daemon thread (``0``: no thread).

    ``for item in Prefetcher(items, 2): ...``; :meth:`close` stops the thread early."""

    def __init__(self, items: Iterator[Any], depth: int):
        if depth < 0:
            raise ValueError(f"prefetch depth must be >= 0, got {depth}")
        self._items = items
        self._depth = depth
        if depth:
            self._queue: queue.Queue = queue.Queue(maxsize=depth)
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._run, name="gns-jax-input", daemon=True)
            self._thread.start()
            # Also called at interpreter exit while the thread lives (weakref.finalize's atexit).
            self._finalizer = weakref.finalize(
                self, stop_threads, self._stop, [self._queue], [self._thread]
            )

    def _offer(self, entry) -> bool:
        return offer(self._queue, entry, self._stop)

    def _run(self) -> None:
        try:
            with jax.transfer_guard_host_to_device("disallow"):
                for item in self._items:
                    if not self._offer((item, None)):
                        return
        except BaseException as error:  # handed to the consumer, raised there
            self._offer((None, error))
            return
        self._offer((_DONE, None))

    def __iter__(self):
        return self

    def __next__(self):
        if not self._depth:
            return next(self._items)
        item, error = self._queue.get()
        if error is not None:
            self.close()
            raise error
        if item is _DONE:
            raise StopIteration
        return item

    def close(self) -> None:
        """Stops the thread (if any) and drops what it prepared."""
        if not self._depth:
            self._items.close()
            return
        self._finalizer()


def offer(target: queue.Queue, entry, stop: threading.Event) -> bool:
    """Puts ``entry`` into the bounded ``target`` as soon as there is room; False (not put) once
    ``stop`` is set."""
    while not stop.is_set():
        try:
            target.put(entry, timeout=0.05)
            return True
        except queue.Full:
            continue
    return False


def stop_threads(stop: threading.Event, queues, threads) -> None:
    """Sets ``stop``, empties ``queues`` (so that no thread stays blocked on a full one) and
    joins ``threads``."""
    stop.set()
    for entries in queues:
        while True:
            try:
                entries.get_nowait()
            except queue.Empty:
                break
    for thread in threads:
        thread.join()
