"""The prefetch queue and the memory-mapped feature path."""

import dataclasses
import subprocess
import sys
import threading

import jax
import numpy as np
import pytest

from gns_jax.features import FeatureLoader
from gns_jax.instrument import TransferMeter
from gns_jax.prefetch import Prefetcher
from gns_jax.sampling.budget import bucket
from gns_jax.train import TrainConfig, fit

CONFIG = TrainConfig(epochs=3, batch_size=16, fanouts=(4, 3), hidden=16, cache_fraction=0.1)


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_prefetch_yields_every_item_in_order(depth):
    assert list(Prefetcher(iter(range(50)), depth)) == list(range(50))


def test_prefetch_raises_the_producer_error_at_its_batch():
    def items():
        yield 1
        yield 2
        raise KeyError("bad batch")

    got = Prefetcher(items(), 2)
    assert next(got) == 1 and next(got) == 2
    with pytest.raises(KeyError, match="bad batch"):
        next(got)


def test_prefetch_close_stops_the_thread_early():
    produced = []

    def items():
        for i in range(10_000):
            produced.append(i)
            yield i

    got = Prefetcher(items(), 2)
    assert next(got) == 0
    got.close()
    assert not any(t.name == "gns-jax-input" and t.is_alive() for t in threading.enumerate())
    assert len(produced) <= 5  # the bounded queue: at most depth + 2 items were prepared


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["ns", "gns"])
def test_prefetching_changes_no_number(tiny_dataset, sampler):
    config = dataclasses.replace(CONFIG, sampler=sampler)
    sync = fit(tiny_dataset, dataclasses.replace(config, prefetch=0), quiet=True).metrics
    ahead = fit(tiny_dataset, dataclasses.replace(config, prefetch=2), quiet=True).metrics
    assert [e["train_loss"] for e in sync["epochs"]] == [e["train_loss"] for e in ahead["epochs"]]
    assert sync["h2d_rows_per_batch"] == ahead["h2d_rows_per_batch"]
    assert ahead["compilations"] == 1
    split = ahead["time_split_s"]
    assert {"sample", "gather", "h2d", "step", "wait"} <= set(split)
    assert all(v >= 0 for v in split.values())
    assert 0 <= ahead["input_wait_fraction"] <= 1


@pytest.mark.parametrize("in_place", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("cached", [False, True])
def test_loaded_inputs_are_the_rows_of_the_slots(tiny_dataset, tmp_path, dtype, cached, in_place):
    """In memory and memory-mapped, with and without a cache, built in place on the host (the CPU
    backend's path; float32 stores) or assembled on the device (an accelerator's path): the
    rows of the slots, zeros in padding, the same bytes counted."""
    from gns_jax.cache import build_device_cache, cache_distribution, draw_cache

    x = tiny_dataset.features.astype(dtype)
    path = tmp_path / "x.npy"
    np.save(path, x)
    mapped = np.load(path, mmap_mode="r")
    rng = np.random.default_rng(0)
    ids = np.concatenate([rng.permutation(x.shape[0])[:200], -np.ones(56, np.int64)])
    ids = rng.permutation(ids).astype(np.int32)  # padding between real slots too
    cache = None
    if cached:
        graph = tiny_dataset.graph
        snap = draw_cache(rng, cache_distribution(graph), 40)
        cache, _ = build_device_cache(graph, x.astype(np.float32), snap)
    src = jax.device_put(ids)
    meters = TransferMeter(), TransferMeter()
    a, real_a, moved_a = FeatureLoader(x, meters[0], in_place=in_place).load(src, cache)
    b, real_b, moved_b = FeatureLoader(mapped, meters[1], in_place=in_place).load(src, cache)
    a, b = np.asarray(a), np.asarray(b)
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.float32
    real = ids >= 0
    np.testing.assert_array_equal(a[real], x[ids[real]].astype(np.float32))
    assert not a[~real].any()
    in_cache = 0 if cache is None else int(np.isin(ids[real], np.asarray(cache.node_ids)).sum())
    assert (real_a, moved_a) == (real_b, moved_b) == (200, 200 - in_cache)
    assert not cached or in_cache > 0
    # Rows cross in the store's precision (float16 stays float16), plus an int32 rank per row.
    size = bucket(moved_a)
    expected = size * x.shape[1] * np.dtype(dtype).itemsize + size * 4
    assert meters[0].bytes_by_tag["features"] == meters[1].bytes_by_tag["features"] == expected


def test_bad_prefetch_option(tiny_dataset):
    from gns_jax.errors import ConfigError

    with pytest.raises(ConfigError, match="prefetch"):
        fit(tiny_dataset, dataclasses.replace(CONFIG, prefetch=-1), quiet=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_threaded_row_gather_equals_numpy_indexing(monkeypatch, dtype):
    from gns_jax import gather

    monkeypatch.setattr(gather, "_GATHER_SPLIT", 100)
    monkeypatch.setattr(gather, "_GATHER_THREADS", 3)
    rng = np.random.default_rng(0)
    store = rng.normal(size=(5000, 7)).astype(dtype)
    for count in [50, 250, 1001]:  # one thread, two, three
        ids = rng.choice(5000, count, replace=False)
        out = np.full((count, 7), np.nan, np.float32)
        gather.take_rows(store, ids, out)
        np.testing.assert_array_equal(out, store[ids].astype(np.float32))


_LEFT_RUNNING = """
import numpy as np
from gns_jax.data import synthetic
from gns_jax.loader import Loader
from gns_jax.sampling import NodeWiseSampler
data = synthetic(np.random.default_rng(0), nodes=20000, degree=10, features=64, classes=4)
loader = Loader(data, NodeWiseSampler(data.graph, (10, 5), 256), seed=0, prefetch=2)
batches = iter(loader.batches(0, 50))
next(batches)
print("left the loop")  # and exit with the producer thread busy in native code
"""


@pytest.mark.slow
def test_exiting_with_a_prefetch_thread_running_exits_cleanly():
    # Without the stop at exit the daemon thread was killed inside XLA: "terminate called ...",
    # exit status 134, in 2 of 3 runs here.
    out = subprocess.run([sys.executable, "-c", _LEFT_RUNNING], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "left the loop"


def test_the_former_name_still_works_and_warns():
    import gns_jax.pipeline

    with pytest.warns(DeprecationWarning, match="gns_jax.prefetch.Prefetcher"):
        former = gns_jax.pipeline.prefetch
    assert former is Prefetcher
