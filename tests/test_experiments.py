"""The benchmark scripts run end to end on a small graph and report consistent figures."""

import argparse
import json

import jax

from experiments import bench_epoch
from gns_jax.data import load_dataset


def test_bench_epoch_reports_ns_and_gns_side_by_side(tmp_path, capsys):
    spec = "synthetic:nodes=3000,degree=12,features=8,classes=3"
    code = bench_epoch.main(
        ["--dataset", spec, "--batches", "2", "--rounds", "1", "--batch-size", "64"]
        + ["--fanouts", "5,3", "--hidden", "16", "--cache-first", "--out", str(tmp_path)]
    )
    assert code == 0
    result = json.loads((tmp_path / "bench_epoch.json").read_text())
    rows = {r["config"]: r for r in result["ours"]["rows"]}
    assert set(rows) == {"NS", "GNS 1%", "GNS 1% cache-first"}
    assert rows["NS"]["ratio_vs_ns"] == rows["NS"]["rows_vs_ns"] == 1.0
    for name in ("GNS 1%", "GNS 1% cache-first"):
        assert 0 < rows[name]["rows_vs_ns"] < 1  # the cache saves rows on every batch
    for r in rows.values():
        assert r["batch_s"] > 0 and r["compilations"] >= 1 and 0 <= r["wait"] <= 1
        assert {"sample", "gather", "h2d", "step", "wait"} <= set(r["split"])
    assert result["hardware"]["backend"] == jax.default_backend()
    assert "glibc_tunables" in result["hardware"]
    assert "| NS |" in (tmp_path / "bench_epoch.md").read_text()


def test_our_ns_sampling_rate_runs_on_a_calibrated_budget(capsys):
    data = load_dataset("synthetic:nodes=3000,degree=12,features=8,classes=3")
    args = argparse.Namespace(fanouts=(5, 3), batch_size=64)
    seeds = [data.train_idx[i * 64 : (i + 1) * 64] for i in range(10)]
    assert bench_epoch.ns_sampling_rate(data, args, seeds) > 0
    assert "overflowed" not in capsys.readouterr().err


def test_a_grid_runs_resumably_and_never_pools_unlike_configurations(tmp_path):
    import pytest

    from experiments import estimators
    from experiments.grid import Run, groups, load_runs, run_grid

    spec = "synthetic:nodes=400,degree=6,features=8,classes=3"
    base = ("--epochs", "2", "--batch-size", "32", "--fanouts", "4,3", "--hidden", "8")
    runs = [
        Run(spec, "ns", 0, (*base, "--sampler", "ns")),
        Run(spec, "hajek 5%", 0, (*base, "--gns-weights", "hajek", "--cache-fraction", "0.05")),
        Run(spec, "hajek 5%", 1, (*base, "--gns-weights", "hajek", "--cache-fraction", "0.05")),
    ]
    paths = run_grid(runs, tmp_path)
    stamps = [p.stat().st_mtime_ns for p in paths]
    assert run_grid(runs, tmp_path) == paths  # completed runs are not run again
    assert [p.stat().st_mtime_ns for p in paths] == stamps
    results = load_runs(paths, runs)
    assert [estimators.label_of(r) for r in results] == [r.label for r in runs]
    assert len(estimators.load_folder(tmp_path)) == 3
    grouped = groups(results)
    assert sorted(len(v) for v in grouped.values()) == [1, 2]
    lines = estimators.table(results)
    assert any("| hajek 5% |" in line and "| 2 |" in line for line in lines)
    assert estimators.plot(results, tmp_path / "figures")[0].stat().st_size > 0
    # a label shared by two cache fractions would average them: refused
    other = json.loads(paths[2].read_text()) | {"label": "hajek 5%"}
    other["config"] = other["config"] | {"cache_fraction": 0.2}
    with pytest.raises(ValueError, match="different configurations"):
        groups([*results[:2], other])
