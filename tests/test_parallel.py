"""Data-parallel training (``gns_jax.parallel``, ``--devices``, several processes).

The test process has one CPU device, so every multi-device check runs ``tests/parallel_worker.py``
in a fresh Python whose ``XLA_FLAGS`` make several CPU devices; the multi-process check starts
``gns-jax train`` twice, the processes talking over JAX's distributed runtime (gloo on a CPU).
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gns_jax.config import TrainConfig
from gns_jax.errors import ConfigError
from gns_jax.parallel import resolve_devices
from gns_jax.step import SYNC_EVERY

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "parallel_worker.py"


def _env(devices: int) -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    return env


def _run(command: list[str], devices: int, timeout: int = 600) -> subprocess.CompletedProcess:
    """``command`` in a fresh Python with ``devices`` forced CPU devices."""
    return subprocess.run(
        command, env=_env(devices), capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def _worker(*args: str, devices: int = 4, timeout: int = 900) -> dict:
    done = _run([sys.executable, str(WORKER), *args], devices, timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["gns", "ns"])
def test_the_parallel_step_is_the_single_device_step_on_the_union_of_the_shards(sampler):
    """One SGD(1) step over 4 devices, shards of 35, 35, 35 and 25 seeds, against one device's
    step on the disjoint union of the shards (same seeds, same sampled neighbours): the same
    parameters to float precision. Two defects put in are caught by the same comparison: the
    mean over shards of each shard's mean loss, and an explicit psum of the gradients that
    shard_map has already summed (the update counted 4 times)."""
    out = _worker("step", sampler)
    assert out["shard_seeds"] == [35, 35, 35, 25]
    tolerance = 1e-4 * out["update_size"]
    assert out["update_size"] > 1e-3  # the step moved the parameters
    assert out["parallel"]["max_param_diff"] < tolerance, out
    assert math.isclose(out["parallel"]["loss"], out["ref_loss"], rel_tol=1e-5)
    for defect in ("mean_of_means", "psum_twice"):
        assert out[defect]["max_param_diff"] > 100 * tolerance, (defect, out)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train_command(out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gns_jax",
        "train",
        "--dataset",
        "cora",
        "--epochs",
        "2",
        "--batch-size",
        "70",
        "--fanouts",
        "10,5",
        "--hidden",
        "32",
        "--quiet",
        "--out",
        str(out),
        *extra,
    ]


@pytest.mark.slow
def test_two_processes_train_exactly_as_one_process_with_two_devices(tmp_path):
    """Two ``gns-jax train`` processes with one device each (the multi-host path: process-local
    sampling, a global batch assembled from each process's shard, collectives over gloo) give
    the numbers of one process with two devices: losses, accuracies and rows moved."""
    single = tmp_path / "single.json"
    done = _run(_train_command(single, "--devices", "2"), 2)
    assert done.returncode == 0, done.stderr[-3000:]
    port = _free_port()
    multi = tmp_path / "multi.json"
    procs = [
        subprocess.Popen(
            _train_command(multi, "--devices", "all")
            + ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2"]
            + ["--process-id", str(i)],
            env=_env(1),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for i in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
    a, b = json.loads(single.read_text()), json.loads(multi.read_text())
    assert (a["devices"], a["processes"]) == (2, 1)
    assert (b["devices"], b["processes"]) == (2, 2)
    for key in ("test_accuracy", "val_accuracy", "h2d_rows_per_batch"):
        assert a[key] == b[key], key
    assert a["h2d_rows_per_batch_per_device"] == b["h2d_rows_per_batch_per_device"]
    assert [e["train_loss"] for e in a["epochs"]] == [e["train_loss"] for e in b["epochs"]]


@pytest.mark.parallel
def test_accuracy_does_not_depend_on_the_device_count_and_nothing_recompiles():
    """Cora, 30 epochs, GNS at 1, 2 and 4 devices (global batch 140 every time): test accuracy
    within seed noise of one device's (runs differ in their random streams: each shard samples
    with its own key), and no compilation after the first epoch."""
    out = _worker("train", "gns", "1,2,4", "30", timeout=1800)
    one = out["1"]["test_accuracy"]
    # Cora's test set has 1000 nodes: a run's accuracy varies by about 1 point over seeds
    # (README), so two runs differ by about sqrt(2) points; 3 standard deviations.
    for n in ("2", "4"):
        assert abs(out[n]["test_accuracy"] - one) < 3 * math.sqrt(2) * 0.01, out
        assert len(out[n]["rows_per_device"]) == int(n)
    for n, run in out.items():
        assert all(c == run["compiles"][0] for c in run["compiles"]), (n, run["compiles"])


@pytest.mark.parallel
def test_a_parallel_run_resumes_from_its_checkpoint_exactly():
    """Two devices: one epoch, checkpointed, resumed to two, gives the straight run's losses."""
    out = _worker("resume", devices=2)
    assert out["resumed_from"] > 0
    assert out["resumed"] == out["straight"]
    assert out["test"][0] == out["test"][1]


def test_the_data_parallel_loop_dispatches_ahead():
    """Two devices: at most one host synchronisation every SYNC_EVERY steps on the main thread,
    and the count sees a wait put into every step."""
    out = _worker("syncs", devices=2)
    assert out["per_epoch"] <= out["steps"] // SYNC_EVERY + 1, out
    assert out["waiting_per_epoch"] > out["steps"] // SYNC_EVERY + 1, out


def test_device_options_are_checked_before_training():
    with pytest.raises(ConfigError, match="devices"):
        TrainConfig(devices=0).validate()
    with pytest.raises(ConfigError, match="batch_size"):
        TrainConfig(devices=3, batch_size=1000).validate()
    with pytest.raises(ConfigError, match="devices"):
        resolve_devices("1000")  # this process has one device
    with pytest.raises(ConfigError, match="devices"):
        resolve_devices("many")


def test_the_command_names_the_device_option(tmp_path):
    done = _run(_train_command(tmp_path / "r.json", "--devices", "4"), 2)
    assert done.returncode == 2
    assert "--devices" in done.stderr and "2" in done.stderr
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parallel
def test_the_scaling_benchmark_reports_every_device_count(tmp_path):
    """``experiments/bench_parallel.py`` on 1 and 2 forced devices: one row per count, the global
    batch growing with the devices, the ratio to linear scaling consistent with the times, and
    the rows moved listed per device."""
    done = _run(
        [sys.executable, "-m", "experiments.bench_parallel", "--devices", "1", "2"]
        + ["--dataset", "synthetic:nodes=4000,degree=8,features=16,classes=4"]
        + ["--per-device-batch", "64", "--batches", "2", "--rounds", "1", "--hidden", "16"]
        + ["--fanouts", "5,5", "--out", str(tmp_path)],
        2,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "bench_parallel.json").read_text())
    one, two = report["rows"]
    assert (one["devices"], two["devices"]) == (1, 2)
    assert two["batch_size"] == 2 * one["batch_size"] == 128
    assert len(one["rows_per_device"]) == 1 and len(two["rows_per_device"]) == 2
    expected = (two["seeds_per_s"] / one["seeds_per_s"]) / 2
    assert math.isclose(two["ratio_to_linear"], expected, rel_tol=1e-9)
    assert one["ratio_to_linear"] == 1.0
    assert "| 2 | 128 |" in (tmp_path / "bench_parallel.md").read_text()
