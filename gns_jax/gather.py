"""Host row gathers: ``out[:] = store[ids]`` from the host feature store, over threads.

Where a batch's input rows and the GNS cache's rows are read from the host store, so that those
reads from a memory-mapped file are counted by :data:`gns_jax.instrument.PAGE_CACHE` and a store
larger than the memory is read the way a disk needs (many reads in flight). Exact evaluation
streams the store in row chunks instead (:mod:`gns_jax.evaluate`).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from gns_jax.data.dataset import beyond_memory
from gns_jax.instrument import PAGE_CACHE

__all__ = ["take_rows"]

_GATHER_THREADS = min(4, os.cpu_count() or 1)
_GATHER_SPLIT = 1 << 16  # rows per thread below which one thread is faster
_gather_pool: ThreadPoolExecutor | None = None
_IO_THREADS = 32  # rows read from disk (a store beyond memory): reads in flight
_IO_SPLIT = 256
_io_pool: ThreadPoolExecutor | None = None
_gather_pool_lock = threading.Lock()


def take_rows(store: np.ndarray, ids: np.ndarray, out: np.ndarray) -> None:
    """``out[:] = store[ids]`` (converting to ``out``'s dtype), split over up to four threads:
    NumPy's ``take`` releases the GIL, and one core copies at about 4 GB/s from a mapped file.
    From a store beyond memory (:func:`gns_jax.data.dataset.beyond_memory`), over up to 32
    threads, each with one read from disk in flight."""
    global _gather_pool, _io_pool
    PAGE_CACHE.count(store, ids)  # rows of a mapped file: were they in the page cache?
    if beyond_memory(store):
        # Rows from disk: each thread waits on one page fault at a time, so the number of
        # threads is the number of reads in flight (this machine's disk: 1,900 rows/s with 2,
        # 7,800 with 32, 10,000 with 128).
        parts = min(_IO_THREADS, ids.shape[0] // _IO_SPLIT)
        if parts < 2:
            return _take_part(store, ids, out)
        with _gather_pool_lock:
            if _io_pool is None:
                _io_pool = ThreadPoolExecutor(_IO_THREADS, thread_name_prefix="gns-jax-io")
        pool = _io_pool
    else:
        parts = min(_GATHER_THREADS, ids.shape[0] // _GATHER_SPLIT)
        if parts < 2:
            return _take_part(store, ids, out)
        with _gather_pool_lock:  # loaders may run in several threads (the prefetch thread)
            if _gather_pool is None:
                _gather_pool = ThreadPoolExecutor(
                    _GATHER_THREADS, thread_name_prefix="gns-jax-gather"
                )
        pool = _gather_pool
    bounds = np.linspace(0, ids.shape[0], parts + 1).astype(int)
    jobs = [
        pool.submit(_take_part, store, ids[a:b], out[a:b]) for a, b in zip(bounds[:-1], bounds[1:])
    ]
    for job in jobs:
        job.result()


def _take_part(store: np.ndarray, ids: np.ndarray, out: np.ndarray) -> None:
    if store.dtype == out.dtype:
        np.take(store, ids, axis=0, out=out)
    else:
        out[:] = store[ids]
