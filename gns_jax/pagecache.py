"""The page cache: which rows read from memory-mapped files were in it (``mincore``), and
dropping a file from it (``posix_fadvise``). Host-side.

:class:`PageCacheCounter` is held by a loader's :class:`~gns_jax.meters.TransferMeter` (its
gathers count into it) and read by a run's :class:`~gns_jax.probes.IoMeter`.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading

import numpy as np

from gns_jax import native

__all__ = ["PageCacheCounter", "drop_from_page_cache", "hit_rate"]


def drop_from_page_cache(path) -> None:
    """Writes ``path`` back and drops its pages from the page cache (``posix_fadvise``, no root
    needed), so that its next reads come from storage; the pages a live mapping has touched stay."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class PageCacheCounter:
    """Rows read from memory-mapped feature files, and how many of them were in the page cache
    just before the read (``mincore``): the page-cache hit rate of a run that reads its features
    from disk. Held by the :class:`~gns_jax.meters.TransferMeter` of a loader (its gathers count
    into it) and read by an :class:`~gns_jax.probes.IoMeter` given the same counter; readers take
    differences."""

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
