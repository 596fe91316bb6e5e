"""The memory-mapped dataset directory and the OGB node-property reader."""

import dataclasses
import gc
import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from gns_jax.cli import main
from gns_jax.config import TrainConfig
from gns_jax.data import load_dataset
from gns_jax.data.ondisk import read_ogb, read_saved, save_dataset
from gns_jax.errors import DatasetError
from gns_jax.instrument import IoMeter, drop_from_page_cache, process_io
from gns_jax.train import fit
from tests.test_cli import TINY


def _same(a, b, features_rtol=0.0):
    np.testing.assert_array_equal(a.graph.indptr, b.graph.indptr)
    np.testing.assert_array_equal(a.graph.indices, b.graph.indices)
    np.testing.assert_allclose(
        np.asarray(a.features, np.float32), np.asarray(b.features, np.float32), rtol=features_rtol
    )
    np.testing.assert_array_equal(a.labels, b.labels)
    for name in ("train_idx", "val_idx", "test_idx"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.num_classes == b.num_classes


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_saved_directory_round_trips_and_maps_features(tiny_dataset, tmp_path, dtype):
    folder = tmp_path / "saved"
    save_dataset(tiny_dataset, folder, feature_dtype=dtype)
    loaded = load_dataset(str(folder))  # detected from its meta.json
    assert isinstance(loaded.features, np.memmap) and loaded.features.dtype == np.dtype(dtype)
    _same(tiny_dataset, loaded, features_rtol=0.0 if dtype == "float32" else 2**-10)
    assert loaded.split == tiny_dataset.split


def test_saved_directory_errors(tiny_dataset, tmp_path):
    folder = tmp_path / "saved"
    save_dataset(tiny_dataset, folder)
    with pytest.raises(DatasetError, match="not empty"):
        save_dataset(tiny_dataset, folder)
    with pytest.raises(DatasetError, match="--feature-dtype"):
        save_dataset(tiny_dataset, tmp_path / "other", feature_dtype="int8")
    # a truncated feature file
    data = (folder / "features.npy").read_bytes()
    (folder / "features.npy").write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError, match="features.npy"):
        read_saved(folder)
    # a foreign meta.json
    save_dataset(tiny_dataset, tmp_path / "b")
    (tmp_path / "b" / "meta.json").write_text(json.dumps({"format": "other", "version": 1}))
    with pytest.raises(DatasetError, match="meta.json"):
        read_saved(tmp_path / "b")
    # a missing array
    save_dataset(tiny_dataset, tmp_path / "c")
    (tmp_path / "c" / "labels.npy").unlink()
    with pytest.raises(DatasetError, match="labels.npy: missing"):
        read_saved(tmp_path / "c")
    # NaN features, found by the chunked scan
    save_dataset(tiny_dataset, tmp_path / "d")
    x = np.load(tmp_path / "d" / "features.npy", mmap_mode="r+")
    x[123, 4] = np.nan
    x.flush()
    del x
    with pytest.raises(DatasetError, match="NaN or infinite.*node 123"):
        read_saved(tmp_path / "d")


def _write(path, table, fmt):
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "npy":
        np.save(path.with_suffix(".npy"), table)
        return
    if np.asarray(table).dtype.kind == "f":
        text = "\n".join(",".join(f"{v:.9g}" for v in np.atleast_1d(row)) for row in table)
    else:
        text = "\n".join(",".join(str(v) for v in np.atleast_1d(row)) for row in table)
    data = (text + "\n").encode()
    if fmt == "csv.gz":
        path.with_suffix(".csv.gz").write_bytes(gzip.compress(data))
    else:
        path.with_suffix(".csv").write_bytes(data)


def _ogb_dir(ds, root, fmt, unlabelled=()):
    senders, receivers = ds.graph.edges()
    once = senders < receivers  # OGB stores each undirected edge once
    _write(root / "raw" / "edge", np.stack([senders[once], receivers[once]], 1), fmt)
    _write(root / "raw" / "node-feat", ds.features, fmt)
    labels = ds.labels.astype(np.float64)
    labels[list(unlabelled)] = np.nan
    _write(root / "raw" / "node-label", labels[:, None], fmt)
    _write(root / "raw" / "num-node-list", np.array([ds.num_nodes]), fmt)
    split = root / "split" / "random"
    for part, idx in (("train", ds.train_idx), ("valid", ds.val_idx), ("test", ds.test_idx)):
        _write(split / part, idx, fmt)
    return root


@pytest.mark.parametrize("fmt", ["npy", "csv", "csv.gz"])
def test_ogb_layout_reads_back_the_same_dataset(tiny_dataset, tmp_path, fmt):
    root = _ogb_dir(tiny_dataset, tmp_path / "ogbn-tiny", fmt)
    loaded = load_dataset(str(root))  # detected from raw/ + split/
    _same(tiny_dataset, loaded)
    assert loaded.split == "ogb:random" and loaded.name == "ogbn-tiny"


def test_ogb_unlabelled_nodes_get_minus_one(tiny_dataset, tmp_path):
    node = int(tiny_dataset.test_idx[0])  # made unlabelled, so it leaves the test split
    ds = dataclasses.replace(tiny_dataset, test_idx=tiny_dataset.test_idx[1:])
    loaded = read_ogb(_ogb_dir(ds, tmp_path / "o", "csv", unlabelled=[node]))
    assert loaded.labels[node] == -1
    assert np.all(np.delete(loaded.labels, node) >= 0)


def test_ogb_errors_name_the_file(tiny_dataset, tmp_path):
    root = _ogb_dir(tiny_dataset, tmp_path / "bad", "csv")
    edge = root / "raw" / "edge.csv"
    good = edge.read_text()
    edge.write_text(good + f"0,{tiny_dataset.num_nodes}\n")
    with pytest.raises(DatasetError, match=r"edge\.csv: node ids must lie in"):
        read_ogb(root)
    edge.write_text(good + "1,2,3\n")
    with pytest.raises(DatasetError, match=r"edge\.csv: .*unequal length"):
        read_ogb(root)
    edge.write_text(good.replace("1", "x", 1))
    with pytest.raises(DatasetError, match=r"edge\.csv: not a comma-separated numeric table"):
        read_ogb(root)
    edge.write_text(good)
    (root / "split" / "random" / "valid.csv").unlink()
    with pytest.raises(DatasetError, match="no valid.npy"):
        read_ogb(root)
    with pytest.raises(DatasetError, match="no such split"):
        read_ogb(root, split="time")
    gz = _ogb_dir(tiny_dataset, tmp_path / "gz", "csv.gz")
    data = (gz / "raw" / "node-feat.csv.gz").read_bytes()
    (gz / "raw" / "node-feat.csv.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError, match=r"node-feat\.csv\.gz: cannot read"):
        read_ogb(gz)


@pytest.mark.slow
def test_cli_save_then_train_on_the_mapped_folder(tmp_path):
    folder = tmp_path / "syn"
    spec = TINY[1]  # the CLI tests' small synthetic graph
    cmd = [sys.executable, "-m", "gns_jax"]
    saved = subprocess.run(
        [*cmd, "save", "--dataset", spec, "--out", str(folder), "--feature-dtype", "float16"],
        capture_output=True,
        text=True,
    )
    assert saved.returncode == 0, saved.stderr
    assert json.loads((folder / "meta.json").read_text())["num_nodes"] == 400
    again = subprocess.run(
        [*cmd, "save", "--dataset", spec, "--out", str(folder)], capture_output=True, text=True
    )
    assert again.returncode == 2 and "not empty" in again.stderr
    out = tmp_path / "r.json"
    # the small training options of the CLI tests, on the saved folder instead
    options = [*TINY[2:], "--quiet", "--out", str(out)]
    run = subprocess.run(
        [*cmd, "train", "--dataset", str(folder), *options], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(out.read_text())
    assert result["num_nodes"] == 400 and 0 <= result["test_accuracy"] <= 1


def _ogb_binary_dir(ds, root, unlabelled=()):
    """ogbn-papers100M's binary layout: raw/data.npz and raw/node-label.npz, splits as csv.gz."""
    senders, receivers = ds.graph.edges()
    once = senders < receivers
    (root / "raw").mkdir(parents=True)
    np.savez(
        root / "raw" / "data.npz",
        edge_index=np.stack([senders[once], receivers[once]]).astype(np.int64),
        node_feat=ds.features.astype(np.float16),  # papers100M stores float16
        num_nodes_list=np.array([ds.num_nodes]),
    )
    labels = ds.labels.astype(np.float32)[:, None]
    labels[list(unlabelled)] = np.nan
    np.savez_compressed(root / "raw" / "node-label.npz", node_label=labels)
    split = root / "split" / "time"
    for part, idx in (("train", ds.train_idx), ("valid", ds.val_idx), ("test", ds.test_idx)):
        _write(split / part, idx, "csv.gz")
    return root


def test_ogb_binary_layout_reads_back_the_same_dataset(tiny_dataset, tmp_path):
    node = int(tiny_dataset.test_idx[0])
    ds = dataclasses.replace(tiny_dataset, test_idx=tiny_dataset.test_idx[1:])
    root = _ogb_binary_dir(ds, tmp_path / "ogbn-papers-tiny", unlabelled=[node])
    loaded = load_dataset(str(root))
    assert loaded.split == "ogb:time" and loaded.labels[node] == -1
    np.testing.assert_array_equal(loaded.graph.indptr, ds.graph.indptr)
    np.testing.assert_array_equal(loaded.graph.indices, ds.graph.indices)
    np.testing.assert_allclose(loaded.features, ds.features.astype(np.float16), rtol=0)
    np.testing.assert_array_equal(loaded.train_idx, ds.train_idx)


def test_ogb_binary_errors_name_the_file(tiny_dataset, tmp_path):
    root = _ogb_binary_dir(tiny_dataset, tmp_path / "b")
    data = dict(np.load(root / "raw" / "data.npz"))
    np.savez(root / "raw" / "data.npz", **(data | {"num_nodes_list": np.array([7])}))
    with pytest.raises(DatasetError, match=r"data\.npz: 'num_nodes_list' says"):
        read_ogb(root)
    np.savez(root / "raw" / "data.npz", node_feat=data["node_feat"])
    with pytest.raises(DatasetError, match=r"data\.npz: no 'edge_index'"):
        read_ogb(root)
    (root / "raw" / "node-label.npz").write_bytes(b"PK\x03\x04 truncated")
    np.savez(root / "raw" / "data.npz", **data)
    with pytest.raises(DatasetError, match=r"node-label\.npz"):
        read_ogb(root)


def _read_all(path) -> int:
    with open(path, "rb", buffering=0) as f:
        return sum(len(chunk) for chunk in iter(lambda: f.read(1 << 20), b""))


@pytest.fixture
def block_reads(tmp_path):
    """A file of 4 MiB under ``tmp_path``, evicted; skips where reads there never reach storage
    (tmpfs) or the kernel gives no I/O counters (not Linux)."""
    if not hasattr(os, "posix_fadvise") or process_io() is None:
        pytest.skip("no /proc/self/io or posix_fadvise here")
    path = tmp_path / "probe.bin"
    path.write_bytes(np.random.default_rng(0).bytes(4 << 20))
    drop_from_page_cache(path)
    before = process_io()["read_bytes"]
    _read_all(path)
    if process_io()["read_bytes"] - before < (1 << 20):
        pytest.skip("reads under tmp_path do not reach a block device (tmpfs?)")
    drop_from_page_cache(path)
    return path


def test_io_meter_counts_this_runs_disk_reads_and_page_cache_hits(block_reads):
    size = block_reads.stat().st_size
    meter = IoMeter()
    assert _read_all(block_reads) == size
    cold = meter.to_json()
    # the file's bytes from storage, not the process's reads before the meter started
    assert size <= cold["disk_read_bytes"] <= size + (1 << 20)
    assert cold["read_call_bytes"] >= size
    _read_all(block_reads)  # again: from the page cache
    warm = meter.to_json()
    assert warm["disk_read_bytes"] - cold["disk_read_bytes"] < size // 10
    assert warm["read_call_bytes"] - cold["read_call_bytes"] >= size
    assert warm["peak_rss_anon_gib"] > 0 and warm["rss_file_gib"] >= 0


def test_io_meter_laps_count_reads_and_page_cache_hits_of_a_mapping_once(block_reads):
    size = block_reads.stat().st_size
    meter = IoMeter()
    mapped = np.memmap(block_reads, dtype=np.float32, mode="r", shape=(size // 1024, 256))
    rows = np.arange(0, mapped.shape[0], 3)
    meter.page_cache.count(mapped, rows)  # as the gather does, before it reads
    assert np.isfinite(mapped[rows]).any()
    cold = meter.lap()
    # from storage through page faults (read-around: several pages each); none were cached
    assert cold["major_faults"] >= 1 and cold["disk_read_bytes"] >= size // 2
    assert cold["mapped_rows_read"] == rows.size and cold["page_cache_hit_rate"] == 0.0
    meter.page_cache.count(mapped, rows)
    assert np.isfinite(mapped[rows]).any()  # again: mapped and cached
    warm = meter.lap()  # counts from the previous lap, not from the meter's start
    assert warm["major_faults"] == 0 and warm["disk_read_bytes"] < size // 10
    assert warm["mapped_rows_read"] == rows.size and warm["page_cache_hit_rate"] == 1.0
    meter.page_cache.count(np.asarray(mapped[:10]), np.arange(10))  # in memory: not a mapped read
    assert meter.lap()["mapped_rows_read"] == 0
    total = meter.to_json()
    assert total["major_faults"] >= cold["major_faults"]
    assert total["mapped_rows_read"] == 2 * rows.size and total["page_cache_hit_rate"] == 0.5
    del mapped


@pytest.mark.slow
def test_training_from_disk_reports_its_reads_and_memory(block_reads, tmp_path):
    folder = tmp_path / "saved"
    spec = "synthetic:nodes=4000,degree=6,features=128,classes=4,seed=3"
    assert main(["save", "--dataset", spec, "--out", str(folder), "--quiet"]) == 0
    loaded = load_dataset(str(folder))  # checks every row: the features are now cached
    assert isinstance(loaded.features, np.memmap)
    # As for a graph larger than the page cache: the pages dropped and mapped afresh (the kernel
    # keeps the pages of a live mapping that were touched).
    dataset = dataclasses.replace(loaded, features=None)
    del loaded
    gc.collect()
    drop_from_page_cache(folder / "features.npy")
    features = np.load(folder / "features.npy", mmap_mode="r", allow_pickle=False)
    dataset = dataclasses.replace(dataset, features=features)
    config = TrainConfig(sampler="ns", fanouts=(4, 3), epochs=1, batch_size=64, eval_mode="sampled")
    result = fit(dataset, config, quiet=True).metrics
    size = (folder / "features.npy").stat().st_size
    # the mapped rows that the batches and the evaluation touched came from storage, once
    assert 0 < result["disk_read_bytes"] <= size + (1 << 20)
    assert result["rss_file_gib"] > 0 and result["peak_rss_anon_gib"] > 0
    assert result["read_call_bytes"] >= 0
    # per epoch: the training loop's reads and the evaluation's, each within the run's total
    (epoch,) = result["epochs"]
    assert epoch["disk_read_bytes"] > 0 and 0 <= epoch["page_cache_hit_rate"] < 1
    assert epoch["mapped_rows_read"] + epoch["eval_mapped_rows_read"] == result["mapped_rows_read"]
    assert epoch["disk_read_bytes"] + epoch["eval_disk_read_bytes"] <= result["disk_read_bytes"]
    assert epoch["major_faults"] + epoch["eval_major_faults"] <= result["major_faults"]


@pytest.mark.parametrize("over_budget", [False, True])
def test_feature_check_of_a_large_mapped_file_streams_it_out_of_the_page_cache(
    block_reads, tmp_path, monkeypatch, over_budget
):
    folder = tmp_path / "saved"
    spec = "synthetic:nodes=3000,degree=6,features=256,classes=4,seed=5"
    assert main(["save", "--dataset", spec, "--out", str(folder), "--quiet"]) == 0
    path = folder / "features.npy"
    if over_budget:  # as a file larger than half the machine's memory
        monkeypatch.setattr("gns_jax.data.dataset.memory_budget", lambda: 1 << 20)
    drop_from_page_cache(path)
    loaded = load_dataset(str(folder))
    del loaded
    gc.collect()
    fresh = np.load(path, mmap_mode="r", allow_pickle=False)
    meter = IoMeter()
    meter.page_cache.count(fresh, np.arange(fresh.shape[0]))
    resident = meter.lap()["page_cache_hit_rate"]
    # streamed: the checked pages were dropped; through the map they stay (the old behaviour)
    assert resident < 0.1 if over_budget else resident > 0.9
    # a bad row is still found, by its node
    bad = np.load(path, mmap_mode="r+", allow_pickle=False)
    bad[2345, 7] = np.nan
    bad.flush()
    del bad, fresh
    with pytest.raises(DatasetError, match="row of node 2345"):
        load_dataset(str(folder))


def test_features_beyond_memory_are_advised_random_and_gathered_by_many_readers(
    tmp_path, monkeypatch
):
    from gns_jax import gather as gather_module

    folder = tmp_path / "saved"
    spec = "synthetic:nodes=20000,degree=4,features=32,classes=4,seed=6"
    assert main(["save", "--dataset", spec, "--out", str(folder), "--quiet"]) == 0
    in_memory = np.load(folder / "features.npy")
    monkeypatch.setattr("gns_jax.data.dataset.memory_budget", lambda: 1 << 20)
    loaded = load_dataset(str(folder))
    path = str(folder / "features.npy")
    smaps = open("/proc/self/smaps").read() if os.path.exists("/proc/self/smaps") else ""
    if path in smaps:  # the mapping's VmFlags say 'rr': random reads advised, no read-ahead
        block = smaps[smaps.index(path) :]
        flags = block[block.index("VmFlags:") :].split("\n", 1)[0]
        assert " rr" in flags
    ids = np.sort(np.random.default_rng(0).choice(20000, 5000, replace=False))
    out = np.empty((ids.size, 32), np.float32)
    used = []
    real = gather_module._take_part
    monkeypatch.setattr(
        gather_module, "_take_part", lambda s, i, o: used.append(i.size) or real(s, i, o)
    )
    gather_module.take_rows(loaded.features, ids, out)
    np.testing.assert_array_equal(out, in_memory[ids])
    assert len(used) >= 16  # split over the reader threads, not the four copy threads
