"""The committed reports: each is rebuilt from its one archive of runs, and the tracked files
stay small (``experiments/regenerate.py``)."""

import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from experiments import regenerate

ROOT = Path(__file__).resolve().parent.parent


def _run_result(sampler, seed, accuracy, rows):
    config = {"sampler": sampler, "seed": seed, "gns_weights": "hajek", "cache_dist": "degree"}
    config["cache_fraction"] = 0.01 if sampler == "gns" else None
    epochs = [{"val_accuracy": accuracy - 0.1}, {"val_accuracy": accuracy}]
    env = {"cpu": "test cpu", "cores": 2, "memory_gib": 1.0, "backend": "cpu", "jax": "0"}
    return {"status": "completed", "dataset": "cora", "config": config, "epochs": epochs,
            "test_accuracy": accuracy, "h2d_rows_per_batch": rows, "environment": env}  # fmt: skip


def test_a_report_is_regenerated_from_its_archive_and_packed_again(tmp_path, capsys):
    """``python -m experiments.regenerate NAME`` unpacks a report's runs.tar.xz, aggregates it
    with the script's own --table-only and writes the table and plots; --pack writes the
    archive from unpacked files (never the report's own outputs), which --unpack restores."""
    folder = tmp_path / "report"
    (folder / "runs").mkdir(parents=True)
    for name, result in {
        "cora__ns__s0": _run_result("ns", 0, 0.80, 1000.0),
        "cora__hajek_1__s0": _run_result("gns", 0, 0.75, 400.0),
    }.items():
        (folder / "runs" / f"{name}.json").write_text(json.dumps(result))
    (folder / "estimators.md").write_text("an old table: not packed\n")
    report = regenerate.REPORTS["estimators-real"]
    archive = tmp_path / "runs.tar.xz"
    packed = regenerate.pack(folder, report, archive)
    assert packed == ["runs/cora__hajek_1__s0.json", "runs/cora__ns__s0.json"]
    with tarfile.open(archive) as tar:
        assert all(m.uid == 0 and m.uname == "" for m in tar.getmembers())
    out = tmp_path / "out"
    assert regenerate.main(["estimators-real", "--archive", str(archive), "--out", str(out)]) == 0
    assert "estimators-real: wrote 2 files" in capsys.readouterr().out
    table = (out / "estimators.md").read_text()
    assert "| cora | ns | 80.00 |" in table, table
    assert "| cora | hajek 1% | 75.00 |" in table and "| 400 | 0.400 | -5.00 |" in table
    assert "Ran on test cpu (2 cores, 1.0 GiB)" in table
    assert (out / "figures" / "cora.png").stat().st_size > 0
    assert sorted(regenerate.unpack(archive, tmp_path / "again")) == packed
    assert regenerate.main(["disk"]) == 1  # no rebuild from its archive: it says why
    assert "disk.json predates" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        regenerate.main(["nonesuch"])


def test_every_report_keeps_its_raw_runs_in_one_archive():
    """Tracked under a report: its tables (.md), plots (.png) and runs.tar.xz, nothing else."""
    tracked = subprocess.run(
        ["git", "ls-files", "experiments/reports"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    loose = [p for p in tracked if not p.endswith((".md", ".png", "/runs.tar.xz"))]
    assert loose == []
    names = {Path(p).parts[2] for p in tracked}
    assert names == set(regenerate.REPORTS)
    for name in names:
        assert f"experiments/reports/{name}/runs.tar.xz" in tracked


def test_the_tracked_files_other_than_the_datasets_stay_under_8_mib():
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split("\0")
    if not any(tracked):
        pytest.skip("not a git checkout")
    paths = [ROOT / p for p in tracked if p and not p.startswith("data/")]
    total = sum(p.stat().st_size for p in paths if p.is_file())
    assert total < 8 * 2**20, f"{total / 2**20:.1f} MiB tracked outside data/"
