"""The pipeline with local learning (PPLL) against end-to-end and data-parallel training.

Side by side, on the same graphs, fan-outs, batches and (forced) devices:

* accuracy: for every shipped graph of ``--graphs`` and every seed, one ``gns-jax train`` run a
  mode (``experiments/grid.py``; resumable), evaluated after every epoch (exact inference):
  end-to-end on one device, data parallel on 2 devices, the pipeline of 2 stages (a linear
  local head, and a head of 256 hidden units) and of 3 stages (one layer a stage). Per graph and
  mode: the final test accuracy (at the best validation epoch; mean ± std over seeds), the mean
  test accuracy at epochs 5, 10 and 25 and over all epochs, the epoch time, how busy each stage
  was and how long it waited for its input;
* throughput: on a larger synthetic graph, in this process, training epochs of ``--batches``
  batches (one warm-up epoch that compiles, one timed), in rounds that alternate the modes:
  seeds per second (median over rounds), the ratio to end-to-end, each stage's busy fraction,
  its mean wait for input and for room in the next queue.

Writes, in ``--out``: ``runs/*.json`` (every accuracy run), ``throughput.json``,
``bench_pipeline.md`` (the tables) and ``figures/pipeline.png`` (test accuracy per epoch, mean
over seeds with the range as a band, and the training losses: end-to-end's and each pipeline
stage's local loss).

The devices are CPU devices forced by ``XLA_FLAGS=--xla_force_host_platform_device_count=3``
(set by this script for its runs and for itself, before JAX starts). They share the machine's
cores, so on a CPU the throughput part measures what overlapping the stages buys when the
stages compete for the same cores, not what separate accelerators would give.

    python -m experiments.bench_pipeline --out experiments/reports/bench-pipeline
    python -m experiments.bench_pipeline --out experiments/reports/bench-pipeline --table-only
    python -m experiments.bench_pipeline --graphs cora --seeds 0 --epochs 5 --batches 4 \\
        --rounds 1 --out /tmp/pipe   # a quick look (about 3 minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

DEVICES = 3  # forced CPU devices: the most any mode uses
FORCE = f"--xla_force_host_platform_device_count={DEVICES}"
GRAPHS = ("cora", "amazon_photo")
COMMON = ("--fanouts", "10,10,5", "--batch-size", "32", "--lr", "0.01", "--prefetch", "2")
MODES = {
    "end-to-end": ("--devices", "1"),
    "data, 2 devices": ("--devices", "2", "--parallel", "data"),
    "pipeline, 2 stages": ("--devices", "2", "--parallel", "pipeline"),
    "pipeline, 2 stages, head 256": (
        *("--devices", "2", "--parallel", "pipeline", "--local-head", "256"),
    ),
    "pipeline, 3 stages": ("--devices", "3", "--parallel", "pipeline"),
}
THROUGHPUT_GRAPH = "synthetic:nodes=100000,degree=15,features=100,classes=10,signal=0.1"
MARKS = (5, 10, 25)  # epochs whose test accuracy the table gives


def _force_devices() -> None:
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {FORCE}".strip()


def accuracy_runs(graphs, seeds, epochs: int):
    from experiments.grid import Run

    out = []
    for seed in seeds:  # seed outermost: a partial grid covers every graph
        for graph in graphs:
            for label, args in MODES.items():
                out.append(Run(graph, label, seed, (*COMMON, "--epochs", str(epochs), *args)))
    return out


def _options(args: tuple[str, ...]) -> dict:
    """``--flag value`` pairs of a mode as TrainConfig fields."""
    pairs = dict(zip(args[::2], args[1::2]))
    out = {"devices": int(pairs.get("--devices", 1))}
    out["parallel"] = pairs.get("--parallel", "data")
    out["local_head"] = int(pairs.get("--local-head", 0))
    return out


def throughput(args) -> dict:
    """Seeds per second of every mode on the synthetic graph, rounds alternating the modes."""
    import dataclasses
    import time

    import jax

    from gns_jax.config import TrainConfig
    from gns_jax.data import load_dataset
    from gns_jax.instrument import environment
    from gns_jax.train import fit

    dataset = load_dataset(args.throughput_graph)
    batch = args.throughput_batch
    if batch * args.batches > dataset.train_idx.size:
        raise SystemExit(
            f"--throughput-batch {batch} x --batches {args.batches} seeds: {args.throughput_graph}"
            f" has {dataset.train_idx.size} training nodes"
        )
    runs: dict[str, list[dict]] = {label: [] for label in MODES}
    for r in range(args.rounds):
        rng = np.random.default_rng([args.seed, r])
        seeds = np.sort(rng.choice(dataset.train_idx, batch * args.batches, replace=False))
        subset = dataclasses.replace(dataset, train_idx=seeds)
        for label, mode in MODES.items():
            config = TrainConfig(
                epochs=2, batch_size=batch, fanouts=(10, 10, 5), hidden=256, seed=r,
                cache_refresh=2, prefetch=2, feature_norm="none", **_options(mode),
            )  # fmt: skip
            start = time.perf_counter()
            m = fit(subset, config, quiet=True, evaluate_model=False).metrics
            timed = m["epochs"][1]["time_s"]
            runs[label].append(
                {
                    "seeds_per_s": batch * args.batches / timed,
                    "wall_s": time.perf_counter() - start,
                    "busy": m["stage_busy_fraction"],
                    "wait": m["stage_wait_s"],
                    "blocked": m["stage_blocked_s"],
                    "compilations": m["stage_compilations"] or [m["compilations"]],
                    "input_wait_fraction": m["input_wait_fraction"],
                }
            )
            print(
                f"throughput round {r + 1}/{args.rounds} {label}: "
                f"{runs[label][-1]['seeds_per_s']:,.0f} seeds/s",
                file=sys.stderr,
                flush=True,
            )
    rows = []
    base = float(np.median([x["seeds_per_s"] for x in runs["end-to-end"]]))
    for label, xs in runs.items():
        rate = float(np.median([x["seeds_per_s"] for x in xs]))

        def med(key, xs=xs):
            if xs[0][key] is None:
                return None
            return [float(np.median(v)) for v in zip(*[x[key] for x in xs])]

        rows.append(
            {
                "mode": label,
                "seeds_per_s": rate,
                "ratio": rate / base,
                "busy": med("busy"),
                "wait": med("wait"),
                "blocked": med("blocked"),
                "compilations": xs[-1]["compilations"],
                "input_wait_fraction": float(np.median([x["input_wait_fraction"] for x in xs])),
            }
        )
    return {
        "dataset": args.throughput_graph,
        "batch_size": batch,
        "batches": args.batches,
        "rounds": args.rounds,
        "fanouts": [10, 10, 5],
        "hidden": 256,
        "devices": [str(d) for d in jax.devices()],
        "environment": environment(),
        "rows": rows,
    }


def _fmt(values, digits=2) -> str:
    return "–" if values is None else ", ".join(f"{v:.{digits}f}" for v in values)


def accuracy_table(results: list[dict], graphs) -> tuple[str, dict]:
    from experiments.grid import groups, mean_std, pm

    grouped = groups(results)
    lines, curves = [], {}
    for graph in graphs:
        lines += [
            f"**{graph}** (test accuracy %; epochs counted from 1)",
            "",
            "| mode | final (best val) | "
            + " | ".join(f"epoch {e}" for e in MARKS)
            + " | mean over epochs | epoch s | stage busy | stage input wait s |",
            "|---|---|" + "---|" * len(MARKS) + "---|---|---|---|",
        ]
        for label in MODES:
            runs = grouped.get((graph, label), [])
            if not runs:
                continue
            final = mean_std([100 * r["test_accuracy"] for r in runs])
            acc = np.array([[100 * e["test_accuracy"] for e in r["epochs"]] for r in runs])
            losses = np.array([[e["train_loss"] for e in r["epochs"]] for r in runs])
            stage = [[e.get("stage_losses") for e in r["epochs"]] for r in runs]
            stage = np.array(stage, dtype=float) if stage[0][0] is not None else None
            curves[(graph, label)] = (acc, losses, stage)
            marks = [
                f"{acc[:, e - 1].mean():.1f}" if e <= acc.shape[1] else "–" for e in MARKS
            ]  # fmt: skip
            busy = runs[0]["stage_busy_fraction"]
            busy = None if busy is None else np.mean([r["stage_busy_fraction"] for r in runs], 0)
            wait = runs[0]["stage_wait_s"]
            wait = None if wait is None else np.mean([r["stage_wait_s"] for r in runs], 0)
            epoch_s = float(np.median([r["epoch_time_s"] for r in runs]))
            lines.append(
                f"| {label} | {pm(*final, len(runs))} | "
                + " | ".join(marks)
                + f" | {acc.mean():.1f} | {epoch_s:.3f} | {_fmt(busy)} | {_fmt(wait, 3)} |"
            )
        lines.append("")
    return "\n".join(lines), curves


def throughput_table(saved: dict) -> str:
    lines = [
        f"Throughput: `{saved['dataset']}`, batch {saved['batch_size']}, fan-outs "
        f"{','.join(map(str, saved['fanouts']))}, hidden {saved['hidden']}, {saved['batches']} "
        f"timed batches, median of {saved['rounds']} rounds (modes alternating); "
        f"{len(saved['devices'])} forced CPU devices.",
        "",
        "| mode | seeds/s | / end-to-end | stage busy | stage input wait s | stage blocked s "
        "| compilations | loader wait share |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in saved["rows"]:
        lines.append(
            f"| {row['mode']} | {row['seeds_per_s']:,.0f} | {row['ratio']:.2f} | "
            f"{_fmt(row['busy'])} | {_fmt(row['wait'], 3)} | {_fmt(row['blocked'], 3)} | "
            f"{row['compilations']} | {row['input_wait_fraction']:.2f} |"
        )
    return "\n".join(lines)


def plot(curves: dict, graphs, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gns_jax.plotting import Palette, figure_legend, save_png

    palette = Palette(list(MODES))
    fig, axes = plt.subplots(
        2, len(graphs), figsize=(5.5 * len(graphs), 8.0), layout="constrained", squeeze=False
    )
    for col, graph in enumerate(graphs):
        top, bottom = axes[0][col], axes[1][col]
        for label in MODES:
            if (graph, label) not in curves:
                continue
            acc, losses, stage = curves[(graph, label)]
            style = palette[label]
            epochs = np.arange(1, acc.shape[1] + 1)
            top.plot(epochs, acc.mean(0), color=style.color, ls=style.linestyle, label=label)
            top.fill_between(epochs, acc.min(0), acc.max(0), color=style.color, alpha=0.15)
            if stage is None:
                bottom.plot(epochs, losses.mean(0), color=style.color, ls=style.linestyle)
            elif label == "pipeline, 2 stages" or label == "pipeline, 3 stages":
                for s in range(stage.shape[2]):
                    bottom.plot(
                        epochs, stage[:, :, s].mean(0), color=style.color,
                        ls=("--", ":", "-.")[s % 3], lw=1.2, label=f"{label}: stage {s} local loss",
                    )  # fmt: skip
        top.set_title(graph)
        top.set_ylabel("test accuracy % (mean, range over seeds)")
        bottom.set_ylabel("training loss (mean over seeds)")
        bottom.set_xlabel("epoch")
        bottom.set_yscale("log")
    figure_legend(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_png(fig, path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graphs", nargs="+", default=list(GRAPHS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batches", type=int, default=10, help="timed batches (throughput)")
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds")
    parser.add_argument("--seed", type=int, default=0, help="throughput subsets and models")
    parser.add_argument("--throughput-graph", default=THROUGHPUT_GRAPH, help="a synthetic spec")
    parser.add_argument("--throughput-batch", type=int, default=512)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--table-only", action="store_true", help="only aggregate --out")
    args = parser.parse_args(argv)
    if min(args.epochs, args.batches, args.rounds, args.throughput_batch) < 1:
        parser.error("--epochs, --batches, --rounds and --throughput-batch must be positive")
    _force_devices()
    from experiments.grid import environment_line, load_runs, run_grid

    grid = accuracy_runs(args.graphs, args.seeds, args.epochs)
    saved_path = args.out / "throughput.json"
    if args.table_only:
        paths = [args.out / "runs" / f"{run.name}.json" for run in grid]
        missing = [p.name for p in paths if not p.is_file()]
        if missing or not saved_path.is_file():
            parser.error(f"--table-only: {len(missing)} runs or throughput.json missing")
        saved = json.loads(saved_path.read_text())
    else:
        paths = run_grid(grid, args.out, env={"XLA_FLAGS": os.environ["XLA_FLAGS"]})
        saved = throughput(args)
        saved_path.write_text(json.dumps(saved, indent=1) + "\n")
    results = load_runs(paths, grid)
    text, curves = accuracy_table(results, args.graphs)
    plot(curves, args.graphs, args.out / "figures" / "pipeline.png")
    report = (
        "# The pipeline with local learning against end-to-end and data-parallel training\n\n"
        f"Accuracy: seeds {', '.join(map(str, args.seeds))}, {args.epochs} epochs, options "
        f"`{' '.join(COMMON)}` and the mode's (`experiments/bench_pipeline.py`); every run "
        "evaluated after every epoch. Stage busy: the share of the run's training time each "
        "stage spent computing (its step and the move of its output to the next device).\n\n"
        f"{text}\n{throughput_table(saved)}\n\n{environment_line(results)}\n"
    )
    (args.out / "bench_pipeline.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
