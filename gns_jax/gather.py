"""Host row gathers: ``out[:] = store[ids]`` from the host feature store, over threads.

Where a batch's input rows and the GNS cache's rows are read from the host store, so that those
reads from a memory-mapped file are counted (:class:`gns_jax.pagecache.PageCacheCounter`) and a
store larger than the memory is read the way a disk needs (many reads in flight). Exact evaluation
streams the store in row chunks instead (:mod:`gns_jax.evaluate`).

Once the ids are checked in range, the copy is the native row gather (``native/gather.cc``,
:func:`gns_jax.native.take_rows_kernel`), which prefetches the rows 16 ahead and writes with
non-temporal stores (no read of the output's cache lines first): on a 2-core CPU, 300,000 rows
of 400 bytes out of 1,000,000 in about 1.8x the time of a plain copy of the same bytes, against
about 3x for NumPy's ``take``. Without the native extension (or with ``GNS_JAX_NATIVE=0``),
and for a dtype conversion, it is NumPy's ``take`` with ``mode="clip"``: with the default
``mode="raise"`` NumPy checks every index and, when given ``out``, writes into a temporary array
and copies that into ``out`` (a second pass over every byte, and an allocation of the whole
batch). :func:`copy_rows` is the plain copy of the same bytes over the same threads, the
yardstick ``experiments/bench_epoch.py`` holds the gather against. :func:`sorted_order` sorts a
batch's distinct ids with a bitmap over the id range rather than a comparison sort (natively
too where the extension is built).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from gns_jax import native
from gns_jax.data.dataset import beyond_memory
from gns_jax.pagecache import PageCacheCounter

__all__ = ["IO_READERS", "SortScratch", "copy_rows", "read_from_disk", "sorted_order", "take_rows"]

_GATHER_THREADS = min(4, os.cpu_count() or 1)
_GATHER_SPLIT = 1 << 13  # rows per thread below which one thread is faster
IO_READERS = 32  # threads reading a store beyond memory: the reads in flight
_IO_SPLIT = 256
_CONVERT_ROWS = 4096  # rows taken at a time into a scratch block when the dtype changes
_DENSE_SPAN = 64  # sorted_order marks a bitmap when the id range is at most this many x the ids
_pools: dict[str, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()  # loaders may run in several threads (the prefetch thread)


def take_rows(
    store: np.ndarray,
    ids: np.ndarray,
    out: np.ndarray,
    page_cache: PageCacheCounter | None = None,
    positions: np.ndarray | None = None,
) -> None:
    """``out[:] = store[ids]`` (converting to ``out``'s dtype), split over up to four threads
    (one per 8,192 rows; the native gather and NumPy's ``take`` release the GIL). From a store
    beyond memory (:func:`gns_jax.data.dataset.beyond_memory`), by :func:`read_from_disk`.
    ``page_cache`` counts the rows read from a mapped file and how many were in the page cache,
    all of them before any is read (a loader passes its ``TransferMeter.page_cache``).

    ``positions`` (int32, one per id, distinct): ``out[positions] = store[ids]`` instead, the
    rows read in the order of ``ids`` and each written to its own row of ``out`` (the loader's
    rows, read in id order, written straight to their input slots); ``out`` of the same dtype."""
    if positions is not None:
        if positions.shape != ids.shape or out.dtype != store.dtype:
            raise ValueError("positions: one per id, into an out of the store's dtype")
        positions = np.ascontiguousarray(positions, dtype=np.int32)
    if beyond_memory(store):
        return read_from_disk(store, ids, out, page_cache=page_cache, positions=positions)
    parts = min(_GATHER_THREADS, ids.shape[0] // _GATHER_SPLIT)
    _split(_pool("gather", _GATHER_THREADS), parts, store, ids, out, page_cache, positions)


def read_from_disk(
    store: np.ndarray,
    ids: np.ndarray,
    out: np.ndarray,
    parts: int | None = None,
    page_cache: PageCacheCounter | None = None,
    positions: np.ndarray | None = None,
):
    """``out[:] = store[ids]`` over up to :data:`IO_READERS` threads (``parts`` pieces; default
    one per 256 rows, at most one per thread). Each thread waits on one page fault at a time, so
    the threads are the reads in flight (this machine's disk: 1,900 rows/s with 2, 7,800 with
    32, 10,000 with 128)."""
    if parts is None:
        parts = min(IO_READERS, ids.shape[0] // _IO_SPLIT)
    _split(_pool("io", IO_READERS), parts, store, ids, out, page_cache, positions)


def copy_rows(source: np.ndarray, out: np.ndarray) -> None:
    """``out[:] = source``, a plain copy split as :func:`take_rows` splits a gather of as many
    rows (the same threads, the same pieces): the time a gather of those bytes is held to."""
    parts = min(_GATHER_THREADS, source.shape[0] // _GATHER_SPLIT)
    if parts < 2:
        return np.copyto(out, source)
    bounds = _bounds(source.shape[0], parts)
    _pieces(_pool("gather", _GATHER_THREADS), bounds, lambda a, b: np.copyto(out[a:b], source[a:b]))


class SortScratch:
    """The node-sized arrays :func:`sorted_order` marks in, kept between batches (a bitmap and
    an int32 position per id, grown to the largest id range seen). Not thread-safe: one per
    user (a :class:`~gns_jax.features.FeatureLoader` holds one)."""

    def __init__(self):
        self.mark = np.zeros(0, np.bool_)
        self.position = np.zeros(0, np.int32)

    def reserve(self, span: int) -> None:
        if self.mark.shape[0] < span:
            self.mark = np.zeros(span, np.bool_)
            self.position = np.empty(span, np.int32)


def sorted_order(
    ids: np.ndarray, scratch: SortScratch | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(ordered, rank)`` of non-negative ids: ``ordered = np.sort(ids)`` and ``rank[k]`` (int32)
    the position of ``ids[k]`` in ``ordered``, so that ``ordered[rank] == ids`` (for repeated
    ids, the order among equals is that of ``np.argsort``'s default sort).

    Distinct ids whose range is at most 64 times their number are marked in a bitmap over the
    range and read back in order (``np.flatnonzero``), their ranks scattered from there: 2.8 ms
    for 298,000 ids out of 1,000,000 against 18.7 ms for ``np.argsort`` (2-core CPU). Other ids
    are sorted by ``np.argsort``. ``scratch`` keeps the bitmap between calls. With the native
    extension the bitmap is one of bits, with a popcount prefix for the ranks
    (:func:`gns_jax.native.sorted_order_kernel`; 300,000 ids in about 2 ms)."""
    n = ids.shape[0]
    if n and ids.dtype.kind in "iu":
        low, high = int(ids.min()), int(ids.max())
        if low >= 0 and high < _DENSE_SPAN * n:
            kernel = native.sorted_order_kernel(ids.dtype)
            if kernel is not None:
                ids = np.ascontiguousarray(ids)
                ordered = np.empty(n, ids.dtype)
                rank = np.empty(n, np.int32)
                pointer = kernel.argtypes[0]
                repeated = kernel(
                    ids.ctypes.data_as(pointer),
                    n,
                    high + 1,
                    ordered.ctypes.data_as(pointer),
                    rank.ctypes.data_as(kernel.argtypes[4]),
                )
                if not repeated:
                    return ordered, rank
                return _argsort_order(ids)
            scratch = scratch or SortScratch()
            scratch.reserve(high + 1)
            mark = scratch.mark
            mark[ids] = True
            ordered = np.flatnonzero(mark[: high + 1]).astype(ids.dtype, copy=False)
            mark[ordered] = False  # all clear again for the next call
            if ordered.shape[0] == n:  # distinct
                position = scratch.position
                position[ordered] = np.arange(n, dtype=np.int32)
                return ordered, position[ids]
    return _argsort_order(ids)


def _argsort_order(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(ids)
    rank = np.empty(ids.shape[0], dtype=np.int32)
    rank[order] = np.arange(ids.shape[0], dtype=np.int32)
    return ids[order], rank


def _pool(name: str, threads: int) -> ThreadPoolExecutor:
    with _pools_lock:
        if name not in _pools:
            _pools[name] = ThreadPoolExecutor(threads, thread_name_prefix=f"gns-jax-{name}")
        return _pools[name]


def _bounds(n: int, parts: int) -> list[tuple[int, int]]:
    edges = np.linspace(0, n, parts + 1).astype(int)
    return list(zip(edges[:-1].tolist(), edges[1:].tolist()))


def _split(pool, parts: int, store, ids, out, page_cache=None, positions=None) -> None:
    if parts < 2:
        if page_cache is not None:
            page_cache.count(store, ids)  # rows of a mapped file: were they in the page cache?
        return _take_part(store, ids, out, positions)
    bounds = _bounds(ids.shape[0], parts)
    if page_cache is not None:  # every piece counted before any piece is read
        _pieces(pool, bounds, lambda a, b: page_cache.count(store, ids[a:b]))
    if positions is None:
        _pieces(pool, bounds, lambda a, b: _take_part(store, ids[a:b], out[a:b]))
    else:
        _pieces(pool, bounds, lambda a, b: _take_part(store, ids[a:b], out, positions[a:b]))


def _pieces(pool: ThreadPoolExecutor, bounds: list[tuple[int, int]], work) -> None:
    """``work(a, b)`` for every piece, the last on this thread (which would otherwise only
    wait), the others on ``pool``; returns when all are done, raising if any failed."""
    jobs = [pool.submit(work, a, b) for a, b in bounds[:-1]]
    try:
        work(*bounds[-1])
    finally:  # the other pieces are done (or have failed) before this returns or raises
        for job in jobs:
            job.result()


def _scatter_part(store, ids, out, positions, checked: bool) -> None:
    """``out[positions] = store[ids]``: natively when it can, else NumPy's take into a block a
    time and a scatter of the block."""
    source = np.asarray(store)
    kernel = native.take_rows_to_kernel(ids.dtype) if checked else None
    if kernel is not None and source.flags.c_contiguous and out.flags.c_contiguous:
        ids = np.ascontiguousarray(ids)
        row_bytes = source.itemsize * int(np.prod(source.shape[1:]))
        pointer = ids.ctypes.data_as(kernel.argtypes[1])
        kernel(source.ctypes.data, pointer, ids.shape[0], row_bytes, out.ctypes.data,
               positions.ctypes.data_as(kernel.argtypes[5]))  # fmt: skip
        return
    for a in range(0, ids.shape[0], _CONVERT_ROWS):
        b = min(ids.shape[0], a + _CONVERT_ROWS)
        out[positions[a:b]] = np.take(source, ids[a:b], axis=0)


def _take_part(store: np.ndarray, ids: np.ndarray, out: np.ndarray, positions=None) -> None:
    n = ids.shape[0]
    # In range: no per-index check, and `out` written directly (mode="raise" buffers it).
    checked = n > 0 and ids.dtype.kind in "iu" and ids.min() >= 0 and ids.max() < store.shape[0]
    if positions is not None:
        return _scatter_part(store, ids, out, positions, checked)
    if not checked:  # empty, or let NumPy raise or wrap negative ids as it always did
        if store.dtype == out.dtype:
            np.take(store, ids, axis=0, out=out)
        else:
            out[:] = store[ids]
        return
    source = np.asarray(store)  # a memory map's plain view: no subclass hooks per call
    if store.dtype == out.dtype:
        kernel = native.take_rows_kernel(ids.dtype)
        if kernel is not None and source.flags.c_contiguous and out.flags.c_contiguous:
            ids = np.ascontiguousarray(ids)
            row_bytes = source.itemsize * int(np.prod(source.shape[1:]))
            pointer = ids.ctypes.data_as(kernel.argtypes[1])
            kernel(source.ctypes.data, pointer, n, row_bytes, out.ctypes.data)
            return
        np.take(source, ids, axis=0, out=out, mode="clip")
        return
    block = np.empty((min(n, _CONVERT_ROWS), *store.shape[1:]), store.dtype)
    for a in range(0, n, _CONVERT_ROWS):  # taken a block at a time, converted while in cache
        b = min(n, a + _CONVERT_ROWS)
        np.take(source, ids[a:b], axis=0, out=block[: b - a], mode="clip")
        out[a:b] = block[: b - a]
