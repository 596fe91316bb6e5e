import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from gns_jax.cli import main
from tests.helpers import TINY_ARGS

TINY = list(TINY_ARGS)

KEYS = {
    "dataset",
    "sampler",
    "seed",
    "config",
    "num_nodes",
    "num_edges",
    "num_features",
    "num_classes",
    "epochs",
    "val_accuracy",
    "test_accuracy",
    "epoch_time_s",
    "input_nodes_per_batch",
    "h2d_rows_per_batch",
    "h2d_bytes_per_batch",
    "cache_hit_rate",
    "compilations",
    "disk_read_bytes",
    "peak_rss_anon_gib",
}


@pytest.mark.integration
def test_train_writes_the_json_contract(trained_run):
    result = trained_run.result
    assert KEYS <= set(result)
    assert result["status"] == "completed"
    assert result["sampler"] == "gns" and result["compilations"] == 1  # GNS is the default
    assert 0 <= result["cache_hit_rate"] <= 1 and result["cache_refreshes"] == 2
    assert result["config"]["fanouts"] == [4, 3]
    assert [e["epoch"] for e in result["epochs"]] == [1, 2]  # counted from 1, as printed
    assert set(result["epochs"][0]) >= {"epoch", "train_loss", "val_accuracy", "time_s"}
    assert 1 <= result["best_epoch"] <= 2
    assert 0 <= result["test_accuracy"] <= 1
    assert 0 < result["peak_rss_gib"] < 64  # this process: JAX plus a tiny graph
    assert "glibc_tunables" in result["environment"]
    assert "test accuracy" in trained_run.stdout
    assert "epoch    1/2" in trained_run.stderr  # progress on stderr
    assert f"at epoch {result['best_epoch']})" in trained_run.stdout  # the JSON's numbering


@pytest.mark.parametrize(
    "args, message",
    [
        (["--fanouts", "5,0"], "--fanouts"),
        (["--fanouts", "5,x"], "--fanouts"),
        (["--batch-size", "0"], "--batch-size"),
        (["--batch-size", "-3"], "--batch-size"),
        (["--sampler", "bogus"], "--sampler"),
        (["--epochs", "0"], "--epochs"),
        (["--lr", "-1"], "--lr"),
        (["--dropout", "1.5"], "--dropout"),
        (["--cache-fraction", "0"], "--cache-fraction"),
        (["--cache-fraction", "1.5"], "--cache-fraction"),
        (["--cache-refresh", "0"], "--cache-refresh"),
        (["--cache-dist", "zipf"], "--cache-dist"),
        (["--input-fanout", "5,2"], "--input-fanout"),
        (["--gns-weights", "magic"], "--gns-weights"),
        (["--seed", "-1"], "--seed"),
        (["--split-seed", "-2"], "--split-seed"),
        (["--eval-fanouts", "5"], "--eval-fanouts"),  # one per layer
        (["--resume"], "--resume"),  # without --checkpoint-dir
        (["--input-fanout", "2,10"], "--input-fanout"),  # HT weights need min 0
        (["--task", "binary"], "--task: binary needs two classes"),  # three here
        (["--task", "regression"], "--task"),
    ],
)
def test_bad_options_fail_before_training(args, message, capsys):
    code = None
    try:
        code = main(["train", *TINY, *args])
    except SystemExit as e:  # argparse's own errors
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert "epoch " not in err  # nothing trained


def test_bad_dataset_is_one_clear_line(tmp_path, capsys):
    bad = tmp_path / "broken.zip"
    bad.write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    assert main(["train", "--dataset", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "broken.zip" in err[0] and err[0].startswith("gns-jax: error:")
    assert main(["train", "--dataset", "no_such_dataset"]) == 2
    assert "no_such_dataset" in capsys.readouterr().err


@pytest.mark.integration
def test_nan_features_exit_non_zero_as_a_module(tmp_path):
    n = 12
    x = np.ones((n, 2), np.float32)
    x[3, 0] = np.nan
    path = tmp_path / "nan.npz"
    masks = [np.arange(n) < 4, (np.arange(n) >= 4) & (np.arange(n) < 8), np.arange(n) >= 8]
    np.savez(
        path,
        node_features=x,
        node_labels=np.arange(n) % 2,
        edges=np.array([[0, 1], [1, 2]]),
        train_masks=masks[0][None],
        val_masks=masks[1][None],
        test_masks=masks[2][None],
    )
    proc = subprocess.run(
        [sys.executable, "-m", "gns_jax", "train", "--dataset", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "NaN" in proc.stderr and "nan.npz" in proc.stderr and "Traceback" not in proc.stderr


def test_unwritable_out_fails_before_training(tmp_path, capsys):
    assert main(["train", *TINY, "--out", str(tmp_path / "missing" / "r.json")]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "epoch " not in err


def test_help_shows_every_default_once(capsys):
    import dataclasses

    from gns_jax.config import TrainConfig, flag_of

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out.split("options:", 1)[1]
    entries = [" ".join(e.split()) for e in re.split(r"\n(?=  -)", text) if e.strip()]
    by_flag = {e.split()[0].rstrip(","): e for e in entries if e.startswith("--")}
    for field in dataclasses.fields(TrainConfig):
        entry = by_flag[flag_of(field.name)]
        # a None default's help says what unset means; every other default is shown once
        assert entry.count("(default: ") == (field.default is not None), entry
    flat = " ".join(entries)
    for shown in ("15,10,5)", "0,10)", "0.01)", "1000)", "gns)", "auto)", "0.003)", "false)"):
        assert f"(default: {shown}" in flat, shown


@pytest.mark.integration
def test_out_is_written_after_every_epoch_and_atomically_and_quiet_is_silent(
    tmp_path, monkeypatch, capsys
):
    import gns_jax.commands as commands  # where run_train looks write_atomically up

    out = tmp_path / "r.json"
    out.write_text('{"status": "completed", "test_accuracy": 0.99}')  # an older run's results
    seen = []
    real = commands.write_atomically

    def spy(path, data, option="--out"):
        real(path, data, option)
        seen.append(json.loads(path.read_text())["status"])
        assert not list(tmp_path.glob(".r.json.*.tmp"))  # no temporary file left behind

    monkeypatch.setattr(commands, "write_atomically", spy)
    assert main(["train", *TINY, "--quiet", "--out", str(out)]) == 0
    # replaced before anything else happened, then after each of the 2 epochs, then complete
    assert seen == ["starting", "running", "running", "completed"]
    assert capsys.readouterr().err == ""  # --quiet: no progress


def test_out_that_is_a_folder_fails_before_training(tmp_path, capsys):
    assert main(["train", *TINY, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "folder" in err and "epoch " not in err


@pytest.mark.slow
def test_compilation_is_reported_and_the_cache_folder_is_used(tmp_path):
    env = {**os.environ, "GNS_JAX_COMPILE_CACHE": str(tmp_path / "cache")}
    args = [sys.executable, "-m", "gns_jax", "train", *TINY, "--sampler", "ns"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "compiled the train step in" in proc.stderr
    assert "compiled the sampler" in proc.stderr
    assert any((tmp_path / "cache").iterdir())  # the persistent compilation cache was written
    off = {**env, "GNS_JAX_COMPILE_CACHE": "0"}
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env=off)
    assert proc.returncode == 0, proc.stderr
