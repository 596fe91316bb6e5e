"""The host row gather: the rows, their dtype, the page-cache counts, the sort and the copy."""

import os

import jax
import numpy as np
import pytest

from gns_jax import features, gather, native
from gns_jax.data.dataset import advise_random
from gns_jax.features import FeatureLoader, _aligned_empty
from gns_jax.instrument import PageCacheCounter, TransferMeter, drop_from_page_cache
from gns_jax.sampling.budget import bucket


def reference_order(ids):
    order = np.argsort(ids)
    rank = np.empty(ids.size, np.int32)
    rank[order] = np.arange(ids.size, dtype=np.int32)
    return ids[order], rank


@pytest.mark.parametrize(
    "case",
    ["dense", "sparse range", "repeated", "one", "empty", "int64"],
)
def test_sorted_order_is_argsorts(case):
    rng = np.random.default_rng(1)
    ids = {
        "dense": rng.choice(10_000, 3000, replace=False),  # the bitmap path
        "sparse range": rng.choice(10**9, 300, replace=False),  # range > 64 x ids: argsort
        "repeated": rng.integers(0, 500, 400),  # not distinct: the bitmap gives up, argsort
        "one": np.array([7]),
        "empty": np.zeros(0, np.int64),
        "int64": rng.choice(10_000, 3000, replace=False).astype(np.int64),
    }[case].astype(np.int64 if case in ("int64", "sparse range") else np.int32)
    scratch = gather.SortScratch()
    for _ in range(2):  # the scratch is clean again after a call
        ordered, rank = gather.sorted_order(ids, scratch)
        want_ordered, want_rank = reference_order(ids)
        np.testing.assert_array_equal(ordered, want_ordered)
        assert ordered.dtype == ids.dtype and rank.dtype == np.int32
        np.testing.assert_array_equal(ordered[rank], ids)
        if case != "repeated":  # ranks among equal ids are argsort's, whichever it picks
            np.testing.assert_array_equal(rank, want_rank)
        assert not scratch.mark.any()


def test_sorted_order_reuses_a_dirty_scratch_correctly():
    """A second batch after a first, in one scratch: stale positions are never read."""
    rng = np.random.default_rng(2)
    scratch = gather.SortScratch()
    for size in (5000, 200, 4000):
        ids = rng.choice(8000, size, replace=False).astype(np.int32)
        ordered, rank = gather.sorted_order(ids, scratch)
        np.testing.assert_array_equal(ordered, np.sort(ids))
        np.testing.assert_array_equal(ordered[rank], ids)


@pytest.mark.parametrize("threads", [1, 3])
def test_gather_converts_in_blocks_as_numpy_indexing(monkeypatch, threads):
    monkeypatch.setattr(gather, "_GATHER_SPLIT", 100)
    monkeypatch.setattr(gather, "_GATHER_THREADS", threads)
    monkeypatch.setattr(gather, "_CONVERT_ROWS", 64)  # several blocks per piece
    rng = np.random.default_rng(3)
    store = rng.normal(size=(4000, 5))  # float64, gathered into float32
    ids = rng.choice(4000, 1001, replace=False)
    out = np.full((1001, 5), np.nan, np.float32)
    gather.take_rows(store, ids, out)
    np.testing.assert_array_equal(out, store[ids].astype(np.float32))


def test_gather_bounds_behave_as_numpy_take():
    store = np.arange(40, dtype=np.float32).reshape(10, 4)
    out = np.zeros((2, 4), np.float32)
    with pytest.raises(IndexError):
        gather.take_rows(store, np.array([3, 10]), out)  # not clipped into the last row
    gather.take_rows(store, np.array([-1, 2]), out)  # negative ids wrap, as NumPy's take does
    np.testing.assert_array_equal(out, store[[-1, 2]])
    gather.take_rows(store, np.zeros(0, np.int64), out[:0])


def test_copy_rows_copies_over_the_gathers_threads(monkeypatch):
    monkeypatch.setattr(gather, "_GATHER_SPLIT", 100)
    monkeypatch.setattr(gather, "_GATHER_THREADS", 3)
    source = np.random.default_rng(4).normal(size=(1001, 6)).astype(np.float32)
    out = np.zeros_like(source)
    gather.copy_rows(source, out)
    np.testing.assert_array_equal(out, source)


@pytest.mark.parametrize("threads", [1, 3])
def test_threaded_gather_counts_the_page_cache_as_one_count(tmp_path, monkeypatch, threads):
    """Every piece is counted before any is read: the same rows and resident rows as one count
    of all the ids before the read, on a file of which only some pages are in the page cache
    (a piece counted after another was read would see the pages that read brought in)."""
    monkeypatch.setattr(gather, "_GATHER_SPLIT", 100)
    monkeypatch.setattr(gather, "_GATHER_THREADS", threads)
    rng = np.random.default_rng(5)
    path = tmp_path / "x.npy"
    stored = rng.normal(size=(20_000, 64)).astype(np.float32)
    np.save(path, stored)
    if not hasattr(os, "posix_fadvise"):
        pytest.skip("no posix_fadvise here")
    drop_from_page_cache(path)
    mapped = np.load(path, mmap_mode="r")
    advise_random(mapped)  # no read-ahead: a read brings in its own pages only
    assert np.isfinite(mapped[:5000:7]).all()  # some pages back in the page cache
    ids = rng.permutation(20_000)[:3000]  # unsorted: every piece spans the whole file
    expected = PageCacheCounter()
    expected.count(mapped, ids)
    if expected.resident in (0, ids.size):
        pytest.skip("the page cache of files under tmp_path cannot be dropped here (tmpfs?)")
    counted = PageCacheCounter()
    out = np.empty((ids.size, 64), np.float32)
    gather.take_rows(mapped, ids, out, counted)
    np.testing.assert_array_equal(out, stored[ids])
    assert counted.snapshot() == expected.snapshot()


def test_loader_buffer_reused_across_batches_keeps_every_input_right(tiny_dataset):
    """The host buffer is kept between loads: a smaller batch after a larger one (stale rows
    past its end) and a larger one after it (the buffer grows) give the rows of their slots,
    and an earlier batch's input is not changed by a later load."""
    x = tiny_dataset.features.astype(np.float32)
    loader = FeatureLoader(x, TransferMeter(), in_place=False)  # the accelerator's path
    rng = np.random.default_rng(6)
    inputs, expected = [], []
    for size in (300, 40, 500):
        ids = rng.permutation(x.shape[0])[:size]
        ids = np.concatenate([ids, -np.ones(size // 4, np.int64)]).astype(np.int32)
        ids = rng.permutation(ids)
        got, real, moved = loader.load(jax.device_put(ids))
        want = np.where((ids >= 0)[:, None], x[np.maximum(ids, 0)], 0)
        np.testing.assert_array_equal(np.asarray(got), want)
        assert real == moved == size and loader._host.shape[0] >= bucket(size)
        inputs.append(got)
        expected.append(want)
    for got, want in zip(inputs, expected):  # none of them aliases the reused buffer
        np.testing.assert_array_equal(np.asarray(got), want)


needs_native = pytest.mark.skipif(
    not native.available(), reason="gns_jax._native was not built (no C++17 compiler)"
)


@needs_native
@pytest.mark.parametrize(
    "dtype, width, aligned",
    [
        (np.float32, 100, True),  # 400-byte rows into an aligned buffer: non-temporal stores
        (np.float32, 100, False),  # the same rows into an unaligned buffer: memcpy
        (np.float32, 3, True),  # 12-byte rows (not a multiple of 16): memcpy
        (np.float16, 8, True),  # 16-byte rows
        (np.float64, 33, True),
    ],
)
@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
def test_native_gather_is_numpys(monkeypatch, dtype, width, aligned, id_dtype):
    """The native row gather writes every row as NumPy's indexing does, into any buffer, with
    either id type, over one thread or several (whose pieces start anywhere in the rows)."""
    monkeypatch.setattr(gather, "_GATHER_SPLIT", 97)
    rng = np.random.default_rng(5)
    store = rng.normal(size=(3000, width)).astype(dtype)
    ids = rng.choice(3000, 1000, replace=True).astype(id_dtype)  # repeats are fine here
    raw = np.full(1000 * width * store.itemsize + 128, 0xFF, np.uint8)
    offset = 0 if aligned else store.itemsize  # off a 16-byte boundary when not aligned
    start = -raw.ctypes.data % 64 + offset
    out = raw[start : start + 1000 * width * store.itemsize].view(dtype).reshape(1000, width)
    assert (out.ctypes.data % 16 == 0) == aligned
    gather.take_rows(store, ids, out)
    np.testing.assert_array_equal(out, store[ids])
    assert (raw[:start] == 0xFF).all() and (raw[start + out.nbytes :] == 0xFF).all()


@needs_native
def test_native_gather_is_what_runs(monkeypatch):
    """take_rows calls the native kernel when it is built and enabled, NumPy's take otherwise:
    a store whose take is broken only gives wrong rows where NumPy runs."""
    calls = []
    real = native.take_rows_kernel

    def spy(id_dtype):
        kernel = real(id_dtype)
        calls.append(kernel is not None)
        return kernel

    monkeypatch.setattr(native, "take_rows_kernel", spy)
    store = np.arange(60, dtype=np.float32).reshape(20, 3)
    out = np.zeros((4, 3), np.float32)
    gather.take_rows(store, np.array([3, 1, 19, 0]), out)
    assert calls == [True]
    monkeypatch.setenv("GNS_JAX_NATIVE", "0")
    gather.take_rows(store, np.array([3, 1, 19, 0]), out)
    assert calls == [True, False]
    np.testing.assert_array_equal(out, store[[3, 1, 19, 0]])


@pytest.mark.parametrize("enabled", ["1", "0"])
def test_sorted_order_native_and_numpy_agree(monkeypatch, enabled):
    """The native bitmap sort and the NumPy one give argsort's order and ranks, and both give up
    on a repeated id (argsort then)."""
    monkeypatch.setenv("GNS_JAX_NATIVE", enabled)
    rng = np.random.default_rng(6)
    for id_dtype in (np.int32, np.int64):
        ids = rng.choice(200_000, 60_000, replace=False).astype(id_dtype)
        for case in (ids, np.concatenate([ids[:500], ids[:1]])):  # distinct, then one repeat
            ordered, rank = gather.sorted_order(case)
            want_ordered, want_rank = reference_order(case)
            np.testing.assert_array_equal(ordered, want_ordered)
            np.testing.assert_array_equal(ordered[rank], case)
            if case.shape[0] == ids.shape[0]:
                np.testing.assert_array_equal(rank, want_rank)


@needs_native
@pytest.mark.parametrize("page", [4096, 1000])  # a power of two (shifts), and not (divisions)
@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
def test_native_page_cache_count_is_numpys(page, id_dtype):
    """The native count of rows wholly on resident pages is the NumPy formula's, for rows that
    straddle pages and a store that starts inside its first page."""
    rng = np.random.default_rng(7)
    row_bytes, rows, offset = 400, 5000, 123
    pages = -(-(offset + rows * row_bytes) // page)
    vec = (rng.random(pages) < 0.7).astype(np.uint8) | 0x80  # only bit 0 means resident
    ids = rng.choice(rows, 2000, replace=False).astype(id_dtype)
    absent = np.concatenate([[0], np.cumsum((vec & 1) == 0)])
    start = offset + ids.astype(np.int64) * row_bytes
    first, last = start // page, (start + row_bytes - 1) // page
    want = int(np.count_nonzero(absent[last + 1] == absent[first]))
    kernel = native.count_resident_kernel(id_dtype)
    pointer = ids.ctypes.data_as(kernel.argtypes[1])
    got = kernel(vec.ctypes.data, pointer, ids.size, offset, row_bytes, page)
    assert got == want and 0 < want < ids.size


@pytest.mark.parametrize("kernel", ["native", "numpy"])
@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
def test_scattering_gather_writes_each_row_to_its_position(monkeypatch, kernel, id_dtype):
    """``take_rows(..., positions=)``: row i of ``ids`` lands in row ``positions[i]`` of ``out``
    and no other row of ``out`` is touched, over one thread or several, natively or not."""
    if kernel == "native" and not native.available():
        pytest.skip("gns_jax._native was not built")
    if kernel == "numpy":
        monkeypatch.setattr(native, "take_rows_to_kernel", lambda dtype: None)
    monkeypatch.setattr(gather, "_GATHER_SPLIT", 97)
    rng = np.random.default_rng(8)
    store = rng.normal(size=(3000, 100)).astype(np.float32)
    ids = np.sort(rng.choice(3000, 1000, replace=False)).astype(id_dtype)
    positions = rng.permutation(1500)[:1000].astype(np.int32)
    out = _aligned_empty((1500, 100), np.float32)
    out[:] = np.nan
    gather.take_rows(store, ids, out, positions=positions)
    np.testing.assert_array_equal(out[positions], store[ids])
    untouched = np.setdiff1d(np.arange(1500), positions)
    assert np.isnan(out[untouched]).all()


def test_a_cpu_batch_is_written_once_and_used_in_place(monkeypatch, tiny_dataset):
    """On the CPU backend the device array of a batch's input is the host buffer its rows were
    gathered into (no copy by the put, no assembly on the device); later loads leave it alone
    while the array lives, and reuse its buffer once it is gone. An unaligned buffer, which the
    put has to copy, is seen."""
    if jax.devices()[0].platform != "cpu":
        pytest.skip("the in-place path is the CPU backend's")
    x = tiny_dataset.features.astype(np.float32)
    made = []
    take = features.BufferPool.take

    def spy(self, shape):
        made.append(take(self, shape))
        return made[-1]

    monkeypatch.setattr(features.BufferPool, "take", spy)
    loader = FeatureLoader(x, TransferMeter())
    rng = np.random.default_rng(9)
    ids = np.concatenate([rng.permutation(x.shape[0])[:300], -np.ones(60, np.int64)])
    got, _, _ = loader.load(jax.device_put(ids.astype(np.int32)))
    assert loader.compilations == 0  # nothing assembled on the device
    assert got.unsafe_buffer_pointer() == made[-1].ctypes.data
    first = np.asarray(got).copy()
    other, _, _ = loader.load(jax.device_put(rng.permutation(ids).astype(np.int32)))
    assert other.unsafe_buffer_pointer() != got.unsafe_buffer_pointer()  # `got` still lives
    np.testing.assert_array_equal(np.asarray(got), first)
    pointer = got.unsafe_buffer_pointer()
    made.clear()
    del got
    again, _, _ = loader.load(jax.device_put(ids.astype(np.int32)))
    assert again.unsafe_buffer_pointer() == pointer  # its buffer, free again, is reused
    np.testing.assert_array_equal(np.asarray(again), first)

    def unaligned(self, shape):  # the defect: a buffer the put must copy
        raw = _aligned_empty((shape[0] * shape[1] + 1,), np.float32)
        made.append(raw[1:].reshape(shape))
        return made[-1]

    monkeypatch.setattr(features.BufferPool, "take", unaligned)
    copied, _, _ = loader.load(jax.device_put(ids.astype(np.int32)))
    assert copied.unsafe_buffer_pointer() != made[-1].ctypes.data
    np.testing.assert_array_equal(np.asarray(copied), first)
