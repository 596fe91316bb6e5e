"""The host row gather: the rows, their dtype, the page-cache counts, the sort and the copy."""

import os

import jax
import numpy as np
import pytest

from gns_jax import gather
from gns_jax.data.dataset import advise_random
from gns_jax.features import FeatureLoader
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
    loader = FeatureLoader(x, TransferMeter())
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
