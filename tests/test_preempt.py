"""Preemption (gns_jax/preempt.py): a stop request mid-epoch finishes the step, checkpoints at
the batch reached, reports ``"status": "interrupted"``; ``--resume`` then ends with the numbers
of an uninterrupted run. The command does it on SIGTERM and SIGINT (exit 143 and 130)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from gns_jax import fit
from gns_jax.preempt import Interrupted, Preemption
from gns_jax.step import Stepper

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX signals")


def _losses(metrics):
    return [e["train_loss"] for e in metrics["epochs"]]


def test_a_stop_mid_epoch_checkpoints_and_a_resume_ends_as_a_straight_run(
    monkeypatch, tiny_dataset, tiny_config, tmp_path
):
    config = tiny_config.replace(batch_size=4, epochs=2, checkpoint_dir=str(tmp_path / "ck"))
    straight = fit(tiny_dataset, config.replace(checkpoint_dir=None), quiet=True).metrics
    steps = {"n": 0}
    dispatch = Stepper.dispatch

    def counted(self, *args):
        steps["n"] += 1
        return dispatch(self, *args)

    monkeypatch.setattr(Stepper, "dispatch", counted)

    def stop():  # the request arrives during the 17th step (epoch 2, of 12 batches each)
        return signal.SIGTERM if steps["n"] >= 17 else None

    with pytest.raises(Interrupted) as raised:
        fit(tiny_dataset, config, quiet=True, stop=stop)
    stopped = raised.value
    assert stopped.exit_status == 143 and "at batch 5 of epoch 2" in stopped.where
    assert stopped.results["status"] == "interrupted"
    assert len(stopped.results["epochs"]) == 1  # the finished epoch
    assert not [p for p in (tmp_path / "ck").iterdir() if "tmp" in p.name]
    monkeypatch.setattr(Stepper, "dispatch", dispatch)
    resumed = fit(tiny_dataset, config.replace(resume=True), quiet=True).metrics
    assert resumed["resumed_from_step"] == 17
    assert _losses(resumed) == _losses(straight)
    assert resumed["test_accuracy"] == straight["test_accuracy"]


def test_a_second_signal_ends_the_process_at_once():
    code = (
        "import os, signal, time\n"
        "from gns_jax.preempt import Preemption\n"
        "with Preemption() as p:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    assert p.requested == signal.SIGTERM\n"
        "    print('requested', flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(5)\n"
        "    print('survived', flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGTERM
    assert "requested" in done.stdout and "survived" not in done.stdout


def test_handlers_are_restored_after_the_run():
    before = signal.getsignal(signal.SIGTERM)
    with Preemption():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.slow
@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_the_command_stops_on_a_signal_and_resumes_exactly(tmp_path, signum, status):
    spec = "synthetic:nodes=20000,degree=6,features=8,classes=3"
    # Epochs take 0.2 s on 2 cores: 40 of them leave the signal seconds to land mid-run.
    args = ["--dataset", spec, "--epochs", "40", "--batch-size", "16", "--fanouts", "4,3",
            "--hidden", "16", "--sampler", "ns", "--eval-every", "40"]  # fmt: skip
    gns = [sys.executable, "-m", "gns_jax", "train", *args]
    straight_out = tmp_path / "straight.json"
    done = subprocess.run([*gns, "--out", str(straight_out), "--quiet"], capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    out, ckpt = tmp_path / "run.json", tmp_path / "ckpt"
    run = [*gns, "--out", str(out), "--checkpoint-dir", str(ckpt)]
    proc = subprocess.Popen(run, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:  # after the first epoch's line: in the second epoch
        if line.startswith("epoch    1/40"):
            break
    start = time.monotonic()
    proc.send_signal(signum)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == status
    assert time.monotonic() - start < 60
    lines = [line for line in rest.splitlines() if line.startswith("gns-jax:")]
    assert len(lines) == 1 and signal.Signals(signum).name in lines[0], rest[-2000:]
    assert "Traceback" not in rest
    result = json.loads(out.read_text())
    assert result["status"] == "interrupted"
    assert not [p for p in ckpt.iterdir() if "tmp" in p.name]
    done = subprocess.run([*run, "--resume", "--quiet"], capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    resumed, straight = json.loads(out.read_text()), json.loads(straight_out.read_text())
    assert resumed["status"] == "completed" and resumed["resumed_from_step"] > 0
    assert _losses(resumed) == _losses(straight)
