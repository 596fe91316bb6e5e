"""One run per output (gns_jax/runlock.py): a second run on the same ``--out`` or
``--checkpoint-dir`` is refused at once with the other process's id, exit 2, nothing written; a
lock left by an ended process is taken over with a warning."""

import json
import os
import subprocess
import sys
import time
import warnings

import pytest

from gns_jax.errors import ConfigError
from gns_jax.runlock import RunLock, lock_path
from tests.helpers import TINY_ARGS

HOLD = """
import sys, time
from gns_jax.runlock import RunLock
RunLock(sys.argv[1], sys.argv[2]).acquire()
print("locked", flush=True)
time.sleep(120)
"""


def _holder(target, option="--out"):
    """Another process holding the lock of ``target`` (until killed)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(target), option],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_held_lock_refuses_with_the_holders_pid(tmp_path):
    target = tmp_path / "run.json"
    holder = _holder(target)
    try:
        with pytest.raises(ConfigError, match=f"process {holder.pid}"):
            RunLock(target).acquire()
    finally:
        holder.kill()
        holder.wait()
    with warnings.catch_warnings(record=True) as caught:  # ended: taken over, with a warning
        warnings.simplefilter("always")
        lock = RunLock(target).acquire()
    assert any(f"process {holder.pid}" in str(w.message) for w in caught)
    assert lock_path(target).read_text().strip() == str(os.getpid())
    lock.release()
    with warnings.catch_warnings():  # released cleanly: no warning
        warnings.simplefilter("error")
        RunLock(target).acquire().release()


@pytest.mark.parametrize("option", ["--out", "--checkpoint-dir"])
def test_a_second_training_run_on_the_same_outputs_is_refused(tmp_path, option):
    out, ckpt = tmp_path / "run.json", tmp_path / "ckpt"
    holder = _holder(out if option == "--out" else ckpt, option)
    try:
        start = time.perf_counter()
        args = [*TINY_ARGS, "--out", str(out), "--checkpoint-dir", str(ckpt)]
        done = subprocess.run([sys.executable, "-m", "gns_jax", "train", *args],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 2
        assert time.perf_counter() - start < 30  # before the data loads
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and f"process {holder.pid}" in lines[0] and option in lines[0]
        assert not out.exists() and not ckpt.exists()  # nothing written
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_a_run_after_the_holder_ended_trains(tmp_path):
    out = tmp_path / "run.json"
    holder = _holder(out)
    holder.kill()
    holder.wait()
    done = subprocess.run([sys.executable, "-m", "gns_jax", "train", *TINY_ARGS, "--out", str(out)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(out.read_text())["status"] == "completed"
    assert f"process {holder.pid}" in done.stderr  # the take-over's warning
