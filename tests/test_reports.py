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


def _size_study_rows(tmp_path):
    from experiments import size_report

    folder = tmp_path / "size-study"
    regenerate.unpack(ROOT / "experiments/reports/size-study/runs.tar.xz", folder)
    return size_report.rows(folder)


def _lagging_picks(entries, **rules):
    """The graphs where the planner, replayed on the study's recorded statistics, says a
    fraction keeps up and the study's runs at that fraction (4 seeds or more) do not."""
    from experiments import size_report

    out = []
    for e in entries:
        chosen, ok = size_report.replay(e, **rules) or (None, False)
        for runs in size_report.trained_at(e, chosen) if ok else []:
            if len(runs["seeds"]) >= 4 and not size_report.keeps_up(runs):
                out.append((e["nodes"], e["depth"], chosen))
    return out


def test_the_planners_picks_keep_up_where_the_size_study_trained_them(tmp_path):
    """Issue's criterion on the committed runs: wherever the planner's rules pick a fraction
    and the size study trained that fraction on that graph over 4 seeds (each seed set on its
    own), it keeps up with NS (final within 1 point, curve within 3, at most 0.6 of NS's rows).
    The defect this catches is the smallest passing fraction kept on a small graph: it picks
    5 % of the 100k-node graph and 20 % of the 50k-node degree-15 one, which learn 3.6-3.9
    points more slowly than NS over the epochs.

    One pick lags, measured and named here: 1 % at products scale, whose runs are 5 epochs long
    (the study's others 10 or more). It ends within 0.3 points of NS but trails NS's first
    epoch by 29 points, 6.1 over the 5 epochs (4 seeds); 1M nodes does the same over its first
    5 epochs (the report's horizon table), and 5 % there lags too (3.8 over the 5). Should that
    pick change or its runs keep up, this list changes and the test says so."""
    entries = _size_study_rows(tmp_path)
    checked = [e for e in entries if e.get("plan")]
    assert len(checked) >= 10
    assert _lagging_picks(entries) == [(2_400_000, "products", 0.01)]
    smallest = _lagging_picks(entries, small_graph_rows=1.0)
    assert {(100_000, "3-layer", 0.05), (50_000, "3-layer", 0.2)} <= set(smallest)
