"""Checkpoints: a run killed with SIGKILL mid-epoch resumes to the same numbers; corrupt
checkpoints fall back; incompatible ones are refused; predictions come from the best epoch."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from gns_jax.checkpoint import Checkpointer, CheckpointWarning
from gns_jax.cli import main
from gns_jax.config import TrainConfig
from gns_jax.data import load_dataset
from gns_jax.train import fit, load_model, predict
from tests.helpers import TINY_SPEC

ROOT = Path(__file__).resolve().parent.parent
# Cora: 140 training nodes in batches of 32, so 5 batches an epoch.
RUN = [
    "train",
    "--dataset",
    "cora",
    "--sampler",
    "gns",
    "--cache-fraction",
    "0.05",
    "--epochs",
    "5",
    "--batch-size",
    "32",
    "--fanouts",
    "5,5",
    "--hidden",
    "16",
    "--seed",
    "4",
    "--quiet",
]
SAME = (
    "val_accuracy",
    "test_accuracy",
    "best_epoch",
    "input_nodes_per_batch",
    "h2d_rows_per_batch",
    "h2d_bytes_per_batch",
    "cache_hit_rate",
)


def _numbers(result: dict) -> dict:
    epochs = [
        {k: e.get(k) for k in ("epoch", "train_loss", "val_accuracy", "test_accuracy")}
        for e in result["epochs"]
    ]
    return {"epochs": epochs, **{k: result[k] for k in SAME}}


def _run(args, **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "gns_jax", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_gives_the_uninterrupted_numbers(tmp_path):
    whole = tmp_path / "whole.json"
    assert main([*RUN, "--out", str(whole)]) == 0
    expected = _numbers(json.loads(whole.read_text()))

    folder, out = tmp_path / "ckpt", tmp_path / "killed.json"
    args = [*RUN, "--checkpoint-dir", str(folder), "--checkpoint-every", "1", "--out", str(out)]
    proc = _run(args)
    # Kill it as soon as a checkpoint in the middle of the third epoch (batch 2 of 5) is done.
    target = folder / str(2 * 5 + 2)
    deadline = time.monotonic() + 240
    while not (target / "commit_success.txt").exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    killed = json.loads(out.read_text())
    assert killed["status"] == "running"  # what it had measured, not another run's results
    assert len(killed["epochs"]) == 2

    resumed = _run([*args, "--resume"])
    stdout, stderr = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, stderr
    result = json.loads(out.read_text())
    assert result["status"] == "completed"
    step = result["resumed_from_step"]
    assert step is not None and step >= 12 and step % 5 != 0, step  # mid-epoch
    assert _numbers(result) == expected  # bit-identical on the same machine


def _small_run(folder, **options):
    config = TrainConfig(
        sampler="ns",
        epochs=2,
        batch_size=64,
        fanouts=(4, 3),
        hidden=16,
        checkpoint_dir=str(folder),
        **options,
    )
    return config


@pytest.mark.slow
def test_corrupt_latest_checkpoint_falls_back_with_a_warning(tiny_dataset, tmp_path):
    folder = tmp_path / "ckpt"
    config = _small_run(folder)
    fit(tiny_dataset, config, quiet=True)
    steps = Checkpointer(folder).steps()
    assert len(steps) == 2  # the ends of the two epochs
    # Flip bytes in every array file of the newest checkpoint.
    newest = folder / str(steps[-1])
    files = [p for p in (newest / "arrays").rglob("*") if p.is_file() and p.stat().st_size > 64]
    assert files
    for path in files:
        data = bytearray(path.read_bytes())
        for i in range(16, len(data), 97):
            data[i] ^= 0xFF
        path.write_bytes(bytes(data))
    import dataclasses

    with pytest.warns(CheckpointWarning, match=f"checkpoint {steps[-1]}.*using checkpoint"):
        resumed = fit(
            tiny_dataset, dataclasses.replace(config, epochs=3, resume=True), quiet=True
        ).metrics
    assert resumed["resumed_from_step"] == steps[0]
    assert [e["epoch"] for e in resumed["epochs"]] == [1, 2, 3]


@pytest.mark.integration
def test_truncated_record_falls_back_and_nothing_readable_is_an_error(
    trained_run, tmp_path, capsys
):
    folder = tmp_path / "ckpt"
    shutil.copytree(trained_run.checkpoints, folder)  # the session's run: two epochs' ends
    argv = [*trained_run.argv[: trained_run.argv.index("--out")], "--quiet"]
    argv += ["--checkpoint-dir", str(folder), "--resume", "--out", str(tmp_path / "r.json")]
    steps = Checkpointer(folder).steps()
    assert len(steps) == 2
    (folder / str(steps[-1]) / "record" / "metadata").write_text('{"format": "gns-jax-chec')
    with pytest.warns(CheckpointWarning, match=f"checkpoint {steps[-1]}.*using checkpoint"):
        assert main(argv) == 0
    again = json.loads((tmp_path / "r.json").read_text())
    assert again["resumed_from_step"] == steps[0]
    assert [e["epoch"] for e in again["epochs"]] == [1, 2]
    # the epoch trained again after the fallback gives the uninterrupted run's numbers
    assert again["epochs"][1]["train_loss"] == trained_run.result["epochs"][1]["train_loss"]
    for step in Checkpointer(folder).steps():  # now every record is unreadable
        (folder / str(step) / "record" / "metadata").write_text("")
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckpointWarning)
        assert main(argv) == 2
    assert "no readable checkpoint" in capsys.readouterr().err


@pytest.mark.integration
def test_incompatible_checkpoints_are_refused(trained_run, tmp_path, capsys):
    folder = tmp_path / "ckpt"
    shutil.copytree(trained_run.checkpoints, folder)
    argv = [*trained_run.argv[: trained_run.argv.index("--out")], "--quiet"]
    argv += ["--checkpoint-dir", str(folder)]

    def refused(*extra: str) -> str:
        capsys.readouterr()
        assert main([*argv, *extra]) == 2
        return capsys.readouterr().err

    assert "earlier run" in refused()  # not told to resume
    assert "other options: lr" in refused("--lr", "0.1", "--resume")
    other = "synthetic:nodes=300,degree=6,features=8,classes=3"
    assert "another dataset" in refused("--resume", "--dataset", other)
    # More epochs (and another prefetch) change no number: allowed.
    out = tmp_path / "more.json"
    assert main([*argv, "--resume", "--epochs", "3", "--prefetch", "0", "--out", str(out)]) == 0
    more = json.loads(out.read_text())
    assert [e["epoch"] for e in more["epochs"]] == [1, 2, 3]
    losses = [e["train_loss"] for e in more["epochs"][:2]]
    assert losses == [e["train_loss"] for e in trained_run.result["epochs"]]  # kept, not rerun


@pytest.mark.integration
def test_predict_writes_the_predictions_of_the_reported_test_accuracy(
    trained_run, tmp_path, capsys
):
    folder, result = trained_run.checkpoints, trained_run.result
    pred_path = tmp_path / "pred.npy"
    code = main(
        ["predict", "--checkpoint", str(folder), "--dataset", TINY_SPEC, "--out", str(pred_path)]
    )
    assert code == 0
    pred = np.load(pred_path, allow_pickle=False)
    ds = load_dataset(TINY_SPEC)
    assert pred.shape == (ds.num_nodes,) and pred.dtype == np.int32
    assert float(np.mean(pred[ds.test_idx] == ds.labels[ds.test_idx])) == result["test_accuracy"]
    assert float(np.mean(pred[ds.val_idx] == ds.labels[ds.val_idx])) == result["val_accuracy"]
    proba_path = tmp_path / "proba.npy"
    argv = ["predict", "--checkpoint", str(folder), "--dataset", TINY_SPEC, "--proba"]
    assert main([*argv, "--out", str(proba_path)]) == 0
    proba = np.load(proba_path, allow_pickle=False)
    assert proba.shape == (ds.num_nodes, ds.num_classes) and proba.dtype == np.float32
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(proba.argmax(1), pred)
    # The library's predict: the same numbers (exact inference), any nodes in their order.
    model, config, _ = load_model(folder, ds)
    np.testing.assert_array_equal(predict(model, ds, config=config), pred)
    some = ds.test_idx[::-7]
    np.testing.assert_array_equal(
        predict(model, ds, proba=True, nodes=some, config=config), proba[some]
    )
    # The wrong dataset, or a folder that holds no checkpoint: one line, exit 2.
    assert main(["predict", "--checkpoint", str(folder), "--dataset", "cora",
                 "--out", str(pred_path)]) == 2  # fmt: skip
    assert "not of" in capsys.readouterr().err
    os.makedirs(tmp_path / "empty")
    assert main(["predict", "--checkpoint", str(tmp_path / "empty"), "--dataset", "cora",
                 "--out", str(pred_path)]) == 2  # fmt: skip
    assert "no readable" in capsys.readouterr().err
