"""The benchmark scripts run end to end on a small graph and report consistent figures."""

import argparse
import json
import types

import jax
import numpy as np
import pytest

from experiments import bench_disk, bench_epoch, bench_gather
from gns_jax import native
from gns_jax.data import load_dataset
from gns_jax.instrument import process_io


@pytest.mark.slow
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
        assert r["copy_ms"] > 0 and r["gather_vs_copy"] > 0
        runs = result["ours"]["runs"][r["config"]]
        assert r["gather_vs_copy"] == np.median([x["split"]["gather"] / x["copy_s"] for x in runs])
    assert result["hardware"]["backend"] == jax.default_backend()
    assert "glibc_tunables" in result["hardware"]
    assert "| NS |" in (tmp_path / "bench_epoch.md").read_text()


@pytest.mark.skipif(not native.available(), reason="gns_jax._native was not built")
def test_bench_gather_times_native_numpy_and_copy_side_by_side(tmp_path, capsys):
    spec = "synthetic:nodes=3000,degree=6,features=24,classes=3"
    out = tmp_path / "gather.json"
    assert (
        bench_gather.main(
            ["--dataset", spec, "--rows", "900", "40", "--repeats", "2"] + ["--out", str(out)]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert [r["rows"] for r in result["runs"]] == [900, 40] and result["row_bytes"] == 96
    for r in result["runs"]:
        assert all(r["ms"][k] > 0 for k in ("native", "numpy", "copy"))
        assert r["native_vs_copy"] == r["ms"]["native"] / r["ms"]["copy"]
    assert "| 900 |" in out.with_suffix(".md").read_text()
    with pytest.raises(SystemExit, match="only 3000 rows"):
        bench_gather.main(["--dataset", spec, "--rows", "3001", "--out", str(out)])


@pytest.mark.slow
def test_our_ns_sampling_rate_runs_on_a_calibrated_budget(capsys):
    data = load_dataset("synthetic:nodes=3000,degree=12,features=8,classes=3")
    args = argparse.Namespace(fanouts=(5, 3), batch_size=64)
    seeds = [data.train_idx[i * 64 : (i + 1) * 64] for i in range(10)]
    assert bench_epoch.ns_sampling_rate(data, args, seeds) > 0
    assert "overflowed" not in capsys.readouterr().err


def test_groups_never_pool_unlike_configurations():
    import pytest

    from experiments import estimators
    from experiments.grid import groups

    def result(seed, **config):
        base = {"sampler": "gns", "gns_weights": "hajek", "cache_fraction": 0.05, "seed": seed}
        return {"dataset": "d", "config": base | config, "label": "hajek 5%"}

    same = [result(0), result(1)]
    assert list(groups(same)) == [("d", "hajek 5%")]
    assert estimators.label_of(same[0]) == "hajek 5%"
    assert estimators.label_of(result(0, sampler="ns")) == "ns"
    with pytest.raises(ValueError, match="different configurations"):
        groups([*same, result(2, cache_fraction=0.2)])  # a 5 % and a 20 % cache: refused


def test_the_estimator_grid_adds_cache_distributions_without_renaming_its_runs():
    """A cache distribution other than degree's is its own run, labelled as :func:`label_of`
    labels its results; the degree runs keep the names (the files) of the committed reports."""
    from experiments import estimators

    before = estimators.grid("products", ["DIR"], [0], ["hajek"], [0.01])
    after = estimators.grid("products", ["DIR"], [0], ["hajek"], [0.01], ("degree", "min-variance"))
    assert [r.name for r in after[:2]] == [r.name for r in before]
    (extra,) = after[2:]
    assert extra.label == "hajek 1% min-variance" and extra.args[-2:] == (
        "--cache-dist",
        "min-variance",
    )
    config = {"sampler": "gns", "gns_weights": "hajek", "cache_fraction": 0.01}
    assert estimators.label_of({"config": config | {"cache_dist": "min-variance"}}) == extra.label
    assert estimators.label_of({"config": config | {"cache_dist": "degree"}}) == "hajek 1%"


def test_cache_variance_is_the_closed_form_summed_over_the_edges(capsys):
    """The summed HT variance is ``sum_v sum_{u in N(v)} ||x_u||^2 (1 - pi_u) / (d_v^2 pi_u)``
    (checked edge by edge), and at a small cache the min-variance distribution, which minimises
    its first-order form, gives a smaller sum than the degree and uniform caches."""
    from experiments import cache_variance
    from gns_jax.cache import cache_distribution, cache_size, inclusion_probability
    from gns_jax.data import load_dataset

    ds = load_dataset("synthetic:nodes=3000,degree=8,features=6,classes=3")
    rows = cache_variance.variance_table(ds, 0.002, ("degree", "uniform", "min-variance"))
    g, x = ds.graph, np.asarray(ds.features, np.float64)
    deg = g.degrees()
    pi = inclusion_probability(cache_distribution(g, "degree"), cache_size(0.002, g.num_nodes))
    senders, receivers = g.edges()
    by_edge = (
        np.sum(x[senders] ** 2, axis=1) * (1 - pi[senders]) / (deg[receivers] ** 2 * pi[senders])
    )
    assert rows[0]["summed"] == pytest.approx(by_edge.sum(), rel=1e-9)
    weighted = np.sum(by_edge * deg[receivers]) * g.num_nodes / deg.sum()
    assert rows[0]["degree_weighted"] == pytest.approx(weighted, rel=1e-9)
    summed = {r["dist"]: r["summed"] for r in rows}
    assert summed["min-variance"] < min(summed["degree"], summed["uniform"])
    assert cache_variance.main(["--dataset", "cora", "--fraction", "0.05"]) == 0
    assert "| min-variance |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cache_variance.main(["--dataset", "cora", "--fraction", "5"])


@pytest.mark.slow
def test_the_comparison_command_writes_its_table_and_plots(tmp_path):
    from experiments import compare

    spec = "synthetic:nodes=500,degree=6,features=8,classes=3"
    options = ["--epochs", "2", "--batch-size", "32", "--fanouts", "4,3", "--hidden", "8"]
    code = compare.main(
        ["--datasets", spec, "--seeds", "0", "--out", str(tmp_path), "--", *options]
    )
    assert code == 0
    text = (tmp_path / "compare.md").read_text()
    for label in ("NS", "LADIES (512)", "LADIES (5000)", "GNS"):
        assert f"| {label} |" in text
    assert "| NS | " in text and "| 1.00x |" in text  # NS's speed-up over itself
    assert "commit" in text and (tmp_path / "figures").is_dir()
    assert len(list((tmp_path / "runs").glob("*.json"))) == 4
    labels = {json.loads(p.read_text())["label"] for p in (tmp_path / "runs").glob("*.json")}
    assert labels == {"NS", "LADIES (512)", "LADIES (5000)", "GNS"}
    # completed runs are not run again
    from experiments.grid import Run, run_grid

    stamps = sorted(p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*.json"))
    runs = [Run(spec, label, 0, (*options, *opts)) for label, opts in compare.comparison()]
    run_grid(runs, tmp_path)
    assert sorted(p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*.json")) == stamps


def test_bench_disk_measures_reads_from_storage(tmp_path, capsys):
    if process_io() is None:
        pytest.skip("no /proc/self/io here")
    path = tmp_path / "features.npy"
    np.save(path, np.random.default_rng(0).normal(size=(8192, 64)).astype(np.float32))
    out = tmp_path / "disk"
    args = ["--file", str(path), "--seconds", "5", "--reads", "2000", "--out", str(out)]
    assert bench_disk.main(args) == 0
    result = json.loads((out / "disk.json").read_text())
    assert result["row_bytes"] == 256 and result["rows"] == 8192
    assert result["sequential"]["bytes"] == path.stat().st_size
    for phase in ("random_pread", "random_mapped", "random_advised"):
        assert result[phase]["rows"] == 2000 and result[phase]["rows_per_s"] > 0
    if result["sequential"]["disk_bytes"] > 0:  # not a tmpfs: the pages were really dropped
        assert result["sequential"]["disk_bytes"] >= path.stat().st_size // 2
        # a page of 4 KiB (16 rows here) holds each row read: at most a page per row requested
        assert 0 < result["random_pread"]["disk_bytes_per_row"] <= 4096 + 1
        # advised random: a fault reads its page, not the read-ahead window around it
        assert 0 < result["random_advised"]["disk_bytes_per_row"] <= 2 * 4096
    assert "random rows, memory-mapped" in (out / "disk.md").read_text()
    with pytest.raises(SystemExit):
        bench_disk.main(["--file", str(tmp_path / "missing.npy")])
    assert "missing.npy is not a file" in capsys.readouterr().err


@pytest.mark.slow
def test_beyond_memory_compares_gns_and_ns_reads_from_a_saved_folder(tmp_path, capsys):
    from experiments import beyond_memory
    from gns_jax.cli import main as cli

    if process_io() is None:
        pytest.skip("no /proc/self/io here")
    folder = tmp_path / "saved"
    spec = "synthetic:nodes=6000,degree=8,features=64,classes=4,seed=2,train=0.2,val=0.05,test=0.05"
    assert cli(["save", "--dataset", spec, "--out", str(folder), "--quiet"]) == 0
    out = tmp_path / "report"
    args = ["--dataset", str(folder), "--out", str(out), "--disk-seconds", "1"]
    train = ["--", "--fanouts", "4,3", "--batch-size", "200", "--hidden", "16", "--quiet"]
    assert beyond_memory.main(args + ["--cache-fraction", "0.2"] + train) == 0
    saved = json.loads((out / "beyond-memory.json").read_text())
    gns, ns = saved["rows"]
    assert (gns["sampler"], ns["sampler"]) == ("gns", "ns") and gns["batches"] == 6
    # every input row of NS comes from the file; GNS's cached rows come from the device
    assert ns["file_rows_per_batch"] >= ns["h2d_rows_per_batch"] > gns["h2d_rows_per_batch"]
    for row in (gns, ns):
        assert 0 <= row["page_cache_hit_rate"] <= 1 and row["eval_file_rows"] > 0
        assert row["val_accuracy"] is not None and row["peak_rss_anon_gib"] > 0
    text = (out / "beyond-memory.md").read_text()
    assert "| rows host -> device per batch |" in text and "GNS / NS" in text
    # resumable: completed runs are not run again
    stamps = [(out / "runs" / f"{s}.json").stat().st_mtime_ns for s in ("gns", "ns")]
    assert beyond_memory.main(args + train) == 0
    assert [(out / "runs" / f"{s}.json").stat().st_mtime_ns for s in ("gns", "ns")] == stamps
    with pytest.raises(SystemExit):
        beyond_memory.main(["--dataset", str(tmp_path), "--out", str(out)])
    assert "not a saved dataset folder" in capsys.readouterr().err


def _fake_result(dataset, label, seed, rows, **config):
    epochs = [
        {"time_s": 0.1, "eval_time_s": 0.01, "val_accuracy": 0.5 + 0.01 * k} for k in range(5)
    ]
    return {
        "dataset": dataset,
        "label": label,
        "config": config | {"seed": seed},
        "test_accuracy": 0.8 + 0.01 * seed,
        "epoch_time_s": 0.1 + 0.01 * seed,
        "h2d_rows_per_batch": rows,
        "epochs": epochs,
    }


@pytest.fixture
def drawn_figures(monkeypatch):
    """The figures the experiments' plots draw, kept open to be inspected."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures, close = [], plt.close
    monkeypatch.setattr(plt, "close", figures.append)
    yield figures
    for fig in figures:
        close(fig)


def test_the_plots_give_each_series_one_colour_in_every_figure(tmp_path, drawn_figures):
    from experiments import compare, estimators

    configs = [
        ("NS", 5239.0, {"sampler": "ns"}),
        ("LADIES (512)", 908.0, {"sampler": "ladies", "ladies_nodes": 512}),
        ("GNS", 1997.0, {"sampler": "gns"}),
    ]
    configs += [
        (f"GNS cache {k}%", 1500.0 + k, {"sampler": "gns", "cache_fraction": k / 100})
        for k in range(1, 13)
    ]
    results = [  # "a" lacks two GNS variants: the others keep their colours in its figure
        _fake_result(dataset, label, seed, rows, **config)
        for dataset in ("a", "b")
        for label, rows, config in configs[: (13 if dataset == "a" else 15)]
        for seed in (0, 1)
    ]
    paths = compare.plot(results, tmp_path / "compare")
    assert [p.name for p in paths] == ["a.png", "b.png"] and all(p.is_file() for p in paths)
    colours = []
    for fig in drawn_figures:
        scatter = fig.axes[0]
        colours.append({c.get_label(): tuple(c.get_facecolor()[0]) for c in scatter.collections})
        assert scatter.get_legend() is None and len(fig.legends) == 1  # one legend, below
        texts = fig.legends[0].get_texts()
        assert {t.get_fontsize() for t in texts} == {10.0}
        assert [t.get_text() for t in texts[:3]] == ["LADIES (512)", "NS", "GNS"]  # the table's
        bars = fig.axes[1]
        assert bars.get_xscale() == "linear" and bars.get_xlim()[0] == 0
        assert len(bars.patches) == len(texts) and len(bars.texts) == len(texts)  # annotated
    a, b = colours
    assert all(a[label] == b[label] for label in a)
    assert len(set(b.values())) == len(b) == 15  # 15 series, 15 colours
    assert matplotlib_hex(b["NS"]) == "#000000"

    drawn_figures.clear()
    gns = {"sampler": "gns", "gns_weights": "hajek"}
    results = [
        _fake_result("d", label, 0, rows, **config)
        for label, rows, config in [
            ("ns", 5239.0, {"sampler": "ns"}),
            ("hajek 1%", 2000.0, gns | {"cache_fraction": 0.01}),
            ("hajek 5%", 1900.0, gns | {"cache_fraction": 0.05}),
        ]
    ]
    estimators.plot(results, tmp_path / "estimators")
    (fig,) = drawn_figures
    lines = {line.get_label(): line.get_color() for line in fig.axes[0].get_lines()}
    assert lines["ns"] == "#000000" and len(set(lines.values())) == 3
    assert fig.axes[1].get_xscale() == "linear"  # 1,900 to 5,239 rows: no log axis needed
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["ns", "hajek 1%", "hajek 5%"]


def matplotlib_hex(rgba) -> str:
    from matplotlib.colors import to_hex

    return to_hex(rgba)


# A stand-in for .venv-dgl's interpreter: runs no DGL, answers what experiments/dgl_side.py
# answers (the keys bench_epoch reads), from the seed batches it is given, and logs its argv.
FAKE_DGL = """#!{python}
import json, sys
from pathlib import Path
import numpy as np

argv = sys.argv[1:]
with open({log!r}, "a") as log:
    log.write(json.dumps(argv) + "\\n")
value = dict(zip(argv[1::2], argv[2::2]))  # argv[0]: the dgl_side.py script
assert (Path(value["--dataset"]) / "meta.json").is_file()
seeds = np.load(value["--seeds"])
train = "--no-train" not in argv
run = len(Path({log!r}).read_text().splitlines())  # 1, 2, ...: DGL's pace drifts by run
ms = 10.0 * run
print("a note on stdout before the result")
print(json.dumps(dict(
    dgl="2.1.0", torch="2.1.2", numpy="1.26.4", threads=2, dgl_threads=2,
    fanouts_dgl=[int(f) for f in reversed(value["--fanouts"].split(","))],
    batches=int(seeds.shape[0]), batch_size=int(seeds.shape[1]), read_s=0.0, graph_s=0.0,
    loader_ms=ms, loader_median_ms=ms - 1, loader_batches_per_s=1e3 / ms,
    loader_input_nodes=500.0, loader_same_seeds=True, input_nodes=501.0,
    sample_ms=ms / 2, gather_ms=ms / 4, input_ms=0.75 * ms, input_batches_per_s=1e3 / (0.75 * ms),
    train_batch_s=0.2 if train else None, train_step_ms=150.0 if train else None,
    peak_rss_gib=0.1,
)))
"""


def _fake_dgl(tmp_path):
    import sys

    log = tmp_path / "dgl-argv.log"
    fake = tmp_path / "fake-dgl-python"
    fake.write_text(FAKE_DGL.format(python=sys.executable, log=str(log)))
    fake.chmod(0o755)
    return fake, log


def test_bench_epoch_dgl_input_only_interleaves_rounds_with_a_stand_in(
    tmp_path, capsys, monkeypatch
):
    """--dgl --input-only: rounds of one DGL run then our input side (in place and with the
    device assembly), medians and ratios; no training comparison, no KeyError in the table."""
    monkeypatch.setattr(bench_epoch, "CACHE_SWEEP_BYTES", 2**20)  # the copies' sweeps: small
    fake, log = _fake_dgl(tmp_path)
    spec = "synthetic:nodes=3000,degree=12,features=8,classes=3"
    out = tmp_path / "out"
    code = bench_epoch.main(
        ["--dataset", spec, "--batches", "2", "--rounds", "2", "--batch-size", "64"]
        + ["--fanouts", "5,3", "--hidden", "16", "--prefetch", "0", "--dgl", "--input-only"]
        + ["--dgl-python", str(fake), "--out", str(out)]
    )
    assert code == 0
    argvs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(argvs) == 2 and all("--no-train" in a for a in argvs)  # one DGL run a round
    result = json.loads((out / "bench_epoch.json").read_text())
    assert "ours" not in result and result["args"]["input_only"]
    d = result["dgl"]
    assert not d["trained"] and [r["round"] for r in d["rounds"]] == [0, 1]
    assert [r["batch_size"] for r in d["runs"]] == [64, 64] and d["runs"][0]["batches"] == 2
    for r in d["rounds"]:
        assert r["load_start"] >= 0 and r["load_end"] >= 0
    assert d["median"]["loader_batches_per_s"] == np.median([100.0, 50.0])
    assert d["median"]["train_batch_s"] is None
    assert set(d["ours"]) == {"NS", "GNS 1%"}
    for name, c in d["ours"].items():
        for prefix in ("", "old_"):
            assert set(c[f"{prefix}inline_ms"]) == {"sample", "gather", "h2d"}
            assert all(v > 0 for v in c[f"{prefix}inline_ms"].values())
            rates = [
                1 / sum((run[name]["old"] if prefix else run[name])["split"].values())
                for run in d["inline_runs"]
            ]
            assert c[f"{prefix}input_batches_per_s"] == pytest.approx(np.median(rates))
            assert c[f"{prefix}input_ratio"] == pytest.approx(
                c[f"{prefix}input_batches_per_s"] / d["median"]["loader_batches_per_s"]
            )
            per_round = [rate / dgl for rate, dgl in zip(rates, (100.0, 50.0), strict=True)]
            assert c[f"{prefix}input_ratios"] == pytest.approx(per_round)
            assert c[f"{prefix}loop_ms"] > 0
        assert "train_batch_s" not in c and c["copy_ms"] > 0
        # the two loaders of a configuration see the same batches
        for run in d["inline_runs"]:
            assert run[name]["input_nodes"] == run[name]["old"]["input_nodes"]
            assert run[name]["rows_moved"] == run[name]["old"]["rows_moved"]
    text = (out / "bench_epoch.md").read_text()
    assert "| round | load start | load end | DGL loader batches/s |" in text
    assert "| 1 | " in text and "| 2 | " in text and "| gns-jax NS |" in text
    assert "| DGL DataLoader |" in text and "h2d ms before" in text
    assert "training batch s" not in text and "| config | s/batch |" not in text

    # With the training comparison: DGL's training batches against ours (a stand-in `ours`).
    rounds = [
        dict(r, dgl=dict(run, train_batch_s=0.2 + 0.1 * i, train_step_ms=150.0), ours=inline)
        for i, (r, run, inline) in enumerate(zip(d["rounds"], d["runs"], d["inline_runs"]))
    ]
    ours = {
        "rows": [
            {"config": name, "batch_s": 0.1, "split": {"sample": 0.01, "step": 0.05}}
            for name in ("NS", "GNS 1%")
        ]
    }
    trained = bench_epoch.dgl_summary(rounds, ours)
    assert trained["trained"] and trained["median"]["train_batch_s"] == pytest.approx(0.25)
    assert trained["ours"]["NS"]["train_ratio"] == pytest.approx(2.5)
    assert trained["ours"]["NS"]["input_ratio"] == d["ours"]["NS"]["input_ratio"]
    lines = "\n".join(bench_epoch.dgl_markdown(trained))
    assert "| gns-jax GNS 1% | 10 / 0 / 0 / 50 | 0.100 | 2.50 |" in lines


def test_bench_epoch_input_only_needs_dgl(capsys):
    with pytest.raises(SystemExit):
        bench_epoch.main(["--dataset", "cora", "--input-only"])
    assert "--input-only goes with --dgl" in capsys.readouterr().err


@pytest.mark.slow
def test_dgl_side_times_dgls_dataloader_on_the_seed_batches(tmp_path):
    """The real experiments/dgl_side.py in .venv-dgl (make peers), on a tiny saved folder."""
    import os
    import subprocess

    if not bench_epoch.DGL_PYTHON.is_file():
        pytest.skip(".venv-dgl is not built (make peers)")
    from gns_jax.data.ondisk import save_dataset

    data = load_dataset("synthetic:nodes=3000,degree=12,features=8,classes=3")
    save_dataset(data, tmp_path / "saved")
    seeds = np.random.default_rng(0).permutation(data.train_idx)[:150].reshape(3, 50)
    np.save(tmp_path / "seeds.npy", seeds.astype(np.int64))
    done = subprocess.run(
        [str(bench_epoch.DGL_PYTHON), str(bench_epoch.DGL_SIDE), "--dataset"]
        + [str(tmp_path / "saved"), "--seeds", str(tmp_path / "seeds.npy"), "--fanouts", "5,3"]
        + ["--hidden", "8", "--threads", "1", "--no-train"],
        env=dict(os.environ, DGLBACKEND="pytorch", OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["loader_same_seeds"] and result["batches"] == 3 and result["batch_size"] == 50
    assert 0 < result["loader_median_ms"] and 0 < result["loader_ms"]
    assert result["loader_batches_per_s"] == pytest.approx(1e3 / result["loader_ms"])
    assert result["loader_input_nodes"] >= 50 and result["sample_ms"] > 0
    assert result["fanouts_dgl"] == [3, 5] and result["train_batch_s"] is None


def test_bench_link_scores_the_peer_with_the_evaluators_metrics(tmp_path):
    """The PyG side's metrics come from its logits through the same formulas as our evaluator's
    (a defect in either, e.g. ranks against the wrong negatives, makes them differ), and the
    split both sides read is the library's split with a random subset of its training edges."""
    from experiments import bench_link
    from gns_jax.linkeval import _metrics
    from gns_jax.links import load_edge_split, random_edge_split

    rng = np.random.default_rng(0)
    pos, neg = rng.normal(1.0, 1.0, 300), rng.normal(0.0, 1.0, 300)
    ranked = rng.normal(0.0, 1.0, (300, 20))
    ours = _metrics(pos, neg, ranked, types.SimpleNamespace(hits_k=5))  # reads only hits_k
    peer = bench_link.link_metrics(pos, neg, ranked, 5)
    for key in ("roc_auc", "average_precision", "mrr", "hits@5"):
        assert peer[f"test_{key}"] == pytest.approx(ours[key], abs=1e-6), key
    shuffled = bench_link.link_metrics(pos, neg, rng.permuted(ranked, axis=0) + 0.5, 5)
    assert shuffled["test_mrr"] != pytest.approx(ours["mrr"], abs=1e-3)

    dataset = load_dataset("cora")
    args = argparse.Namespace(edge_split="0.85,0.05,0.10", seed=3, rank_negatives=10,
                              train_edges=500)  # fmt: skip
    path = tmp_path / "split.npz"
    sizes = bench_link.write_split(dataset, args, path)
    full = random_edge_split(dataset.graph, (0.85, 0.05, 0.10), 3, 10)
    read = load_edge_split(path, dataset.graph, 10, 3)
    assert sizes["train_pos"] == len(read.train_pos) == 500
    keys = lambda a: set(map(tuple, a.tolist()))
    assert keys(read.train_pos) < keys(full.train_pos)
    np.testing.assert_array_equal(read.test_pos, full.test_pos)
    np.testing.assert_array_equal(read.test_rank_neg, full.test_rank_neg)


def _study_run(nodes, label, seed, accuracies, rows, **extra):
    """A completed size-study run JSON (the keys ``experiments.size_report`` reads)."""
    dataset = f"synthetic:nodes={nodes},degree=30,features=100,classes=20,signal=0.1"
    return dict(
        status="completed", dataset=dataset, label=label, seed=seed, num_nodes=nodes,
        config=dict(fanouts=[15, 10, 5], batch_size=1000, seed=seed),
        epochs=[dict(time_s=1.0, test_accuracy=a) for a in accuracies],
        epoch_time_s=1.0, h2d_rows_per_batch=rows, **extra,
    )  # fmt: skip


def test_the_size_report_pairs_the_planners_runs_with_ns_by_seed(tmp_path):
    """The ``auto`` table holds each planner run against NS's run of the same seed: paired any
    other way (seed 1's auto against seed 0's NS), the gaps and the verdict would differ."""
    from experiments import size_report

    folder = tmp_path / "runs"
    folder.mkdir()
    ns = {0: [0.5, 0.9], 1: [0.7, 0.99]}
    gns = {0: [0.4, 0.88], 1: [0.6, 0.97]}
    auto = {0: [0.49, 0.895], 1: [0.69, 0.985]}  # within a point of its own seed's NS
    plan = lambda s: dict(seconds=0.2 + s, chosen=0.05)
    runs = [_study_run(20_000, "NS 3-layer", s, a, 1000.0) for s, a in ns.items()]
    runs += [
        _study_run(20_000, "GNS 1% 3-layer", s, a, 500.0, cache_fraction=0.01)
        for s, a in gns.items()
    ]
    runs += [
        _study_run(20_000, "GNS auto 3-layer", s, a, 550.0, cache_fraction=0.05, plan=plan(s))
        for s, a in auto.items()
    ]
    for i, run in enumerate(runs):
        (folder / f"{i}.json").write_text(json.dumps(run))
    (entry,) = size_report.rows(tmp_path)
    a = entry["auto"]
    assert a["seeds"] == [0, 1] and a["chosen"] == [0.05, 0.05]
    np.testing.assert_allclose(a["final_gap"], [-0.5, -0.5])
    np.testing.assert_allclose(a["curve_gap"], [-0.75, -0.75])
    assert a["rows_vs_ns"] == pytest.approx(0.55)
    assert size_report.keeps_up(a)
    line = size_report.auto_table([entry]).splitlines()[-1]
    assert "| 0.05 | 1.20 |" in line and line.endswith("| 0.55 | yes |")
    # a run that falls behind its own seed's NS is not kept up, whatever the other seed did
    (folder / "5.json").write_text(json.dumps(runs[5] | dict(epochs=[
        dict(time_s=1.0, test_accuracy=v) for v in (0.6, 0.95)])))  # fmt: skip
    (entry,) = size_report.rows(tmp_path)
    assert not size_report.keeps_up(entry["auto"])
    assert size_report.auto_table([entry]).endswith("| no |")


def test_the_size_report_keeps_larger_fixed_caches_apart_from_the_1_percent_row(tmp_path):
    """A larger fixed cache (``GNS 10% 3-layer``) is its own row of the fractions table, paired
    with NS by seed: counted as the 1 % runs (the label's depth alone), it would replace them."""
    from experiments import size_report

    folder = tmp_path / "runs"
    folder.mkdir()
    ns = {0: [0.5, 0.9], 1: [0.7, 0.99]}
    gns = {0: [0.4, 0.8], 1: [0.6, 0.9]}  # 1 %: 10 points behind at the end
    ten = {0: [0.5, 0.9], 1: [0.7, 0.98]}  # 10 %: keeps up
    runs = [_study_run(50_000, "NS 3-layer", s, a, 1000.0) for s, a in ns.items()]
    runs += [_study_run(50_000, "GNS 1% 3-layer", s, a, 500.0, cache_fraction=0.01)
             for s, a in gns.items()]  # fmt: skip
    runs += [_study_run(50_000, "GNS 10% 3-layer", s, a, 400.0, cache_fraction=0.1)
             for s, a in ten.items()]  # fmt: skip
    for i, run in enumerate(runs):
        (folder / f"{i}.json").write_text(json.dumps(run))
    (entry,) = size_report.rows(tmp_path)
    np.testing.assert_allclose(entry["final_gap"], [-10, -9])  # the 1 % runs, not the 10 %
    ten_row = entry["fixed"]["GNS 10%"]
    assert ten_row["seeds"] == [0, 1] and ten_row["rows_vs_ns"] == pytest.approx(0.4)
    np.testing.assert_allclose(ten_row["final_gap"], [0, -1])
    lines = size_report.fractions_table([entry]).splitlines()[2:]
    assert [line.split(" | ")[4] for line in lines] == ["0.01", "0.1"]
    assert lines[0].endswith("| 0.50 | no |") and lines[1].endswith("| 0.40 | yes |")


def test_the_size_reports_horizon_table_measures_the_first_epochs_apart(tmp_path):
    """The horizon table's early gap is the curve gap over the first ``EARLY`` epochs only: a
    cache that lags in the first epoch and then keeps pace shows a larger gap there than over
    the whole run (computed over every epoch, both columns would agree)."""
    from experiments import size_report

    folder = tmp_path / "runs"
    folder.mkdir()
    early = size_report.EARLY
    ns = [0.8] + [1.0] * (2 * early - 1)
    gns = [0.4] + [1.0] * (2 * early - 1)  # 40 points behind in the first epoch only
    nodes = size_report.HORIZON_NODES
    runs = [_study_run(nodes, "NS 3-layer", s, ns, 1000.0) for s in (0, 1)]
    runs += [_study_run(nodes, "GNS 1% 3-layer", s, gns, 300.0, cache_fraction=0.01)
             for s in (0, 1)]  # fmt: skip
    runs += [_study_run(nodes - 1, "NS 3-layer", 0, ns, 1000.0)]  # below the table's size
    runs += [_study_run(nodes - 1, "GNS 1% 3-layer", 0, gns, 300.0, cache_fraction=0.01)]
    for i, run in enumerate(runs):
        (folder / f"{i}.json").write_text(json.dumps(run))
    entries = size_report.rows(tmp_path)
    (entry,) = [e for e in entries if e["nodes"] == nodes]
    one = entry["one_percent"]
    np.testing.assert_allclose(one["first_gap"], [-40, -40])
    np.testing.assert_allclose(one["epoch_gaps"], [[-40] + [0] * (2 * early - 1)] * 2)
    np.testing.assert_allclose(one["early_gap"], [-40 / early] * 2)
    np.testing.assert_allclose(one["curve_gap"], [-40 / (2 * early)] * 2)
    lines = size_report.horizon_table(entries).splitlines()[2:]
    assert len(lines) == 1 and f"| {nodes:,} | 1% | 2 | {2 * early} |" in lines[0]
    cells = [c.strip() for c in lines[0].strip("|").split("|")]
    assert cells[5:9] == ["-40.00 ± 0.00", f"{-40 / early:.2f} ± 0.00", "-4.00 ± 0.00",
                          "0.00 ± 0.00"]  # fmt: skip


def test_the_size_studys_held_out_planner_runs_stay_apart_from_its_auto_runs():
    """The planner's validation: NS and ``auto`` on seeds the rules were not set on, under a
    label of their own (pooled with the study's ``auto`` runs, whose picks followed the former
    rules, the table would mix two rules' fractions)."""
    from experiments import size_report, size_study

    runs = size_study.validation_runs()
    assert {r.seed for r in runs} == set(size_study.VALIDATION_SEEDS)
    assert not set(size_study.VALIDATION_SEEDS) & set(size_study.SEEDS)
    assert {size_report.sampler_of(r.label) for r in runs} == {"NS", "GNS validation", "GNS 50%"}
    planned = [r for r in runs if r.label.startswith("GNS validation")]
    ns = [r for r in runs if r.label.startswith("NS")]
    assert len(planned) == len(ns) == 4 * len(size_study.VALIDATION)
    assert all(r.args[-4:-2] == size_study.AUTO[-4:-2] for r in planned)
    names = {r.name for r in size_study.graph_runs()}
    assert not names & {r.name for r in runs}


@pytest.mark.slow
def test_a_resumable_grid_run_goes_on_from_its_last_epoch(tmp_path):
    """A resumable grid run killed after its first epoch (its checkpoint left in
    ``OUT/checkpoints/<name>``) resumes there, ends with both epochs, records no path of the
    machine and leaves no checkpoint; it pools with a run kept without checkpoints."""
    import subprocess

    from experiments.grid import CHECKPOINTS, Run, groups, run_grid

    options = ("--fanouts", "5,5", "--batch-size", "64", "--hidden", "16", "--eval-every", "1")
    run = Run("cora", "NS", 0, (*options, "--epochs", "2", "--sampler", "ns"))
    checkpoints = tmp_path / CHECKPOINTS / run.name
    first = Run("cora", "NS", 0, (*options, "--epochs", "1", "--sampler", "ns"))  # the killed run
    checkpoints.parent.mkdir()
    subprocess.run(first.command(tmp_path / "first.json", checkpoints), check=True)
    assert any(checkpoints.iterdir())
    (path,) = run_grid([run], tmp_path, resumable=True)
    result = json.loads(path.read_text())
    assert result["status"] == "completed" and len(result["epochs"]) == 2
    assert result["resumed_from_step"], "the run started again instead of resuming"
    assert result["config"]["checkpoint_dir"] == f"{CHECKPOINTS}/{run.name}"
    assert str(tmp_path) not in path.read_text()
    assert not checkpoints.exists()
    plain = json.loads((tmp_path / "first.json").read_text()) | {"label": "NS"}
    plain["config"] = plain["config"] | {"checkpoint_dir": None, "resume": False, "epochs": 2}
    assert len(groups([result, plain])) == 1
