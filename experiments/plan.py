"""``--cache-fraction auto`` validated: the planner's choice against NS and a fixed 1 % cache.

For every graph and seed, three ``gns-jax train`` runs (``experiments/grid.py``; resumable):
NS, GNS with a 1 % cache and GNS with ``--cache-fraction auto`` (the planner of
:mod:`gns_jax.plan`), each evaluated after every epoch. Writes, in ``--out``:

* ``runs/*.json``: every run's results;
* ``plan.md``: per graph, final test accuracy (mean ± std over seeds), the mean test accuracy
  over the epochs, rows moved per batch against NS's, the epoch time, the fractions ``auto``
  chose, the planner's time against its allowance (the larger of two NS epochs,
  median epoch time, and 15 % of the NS run's summed epoch times), and whether ``auto`` keeps up
  by the three tests (final within 1 point of NS's, mean over the epochs within 3 points, at
  most 0.6 of NS's rows per batch);
* ``plan.png``: test accuracy (mean over seeds) per epoch (top row) and against wall-clock
  time (bottom row: the summed epoch times, the planner's seconds included for ``auto``), one
  column a graph.

    python -m experiments.plan --seeds 4 5 6 7 --out experiments/reports/plan
    python -m experiments.plan --seeds 4 5 6 7 --out experiments/reports/plan --table-only
    python -m experiments.plan --graphs cora --seeds 0 1 --out /tmp/plan   # a quick look
    python -m experiments.plan --methods calibration --seeds 0 1 2 3 --out experiments/reports/plan

The last runs NS and GNS at fixed 5, 10 and 20 % on seeds 0-3: the runs that set the planner's
2-layer limit (every graph here is trained with 2 layers), apart from the seeds that validate it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from experiments.grid import Run, environment_line, load_runs, mean_std, pm, run_grid

SMALL = ("--fanouts", "25,10", "--lr", "0.01", "--epochs", "100")
GRAPHS = {
    "cora": ("cora", SMALL),
    "amazon_photo": ("amazon_photo", SMALL),
    "amazon_computers": ("amazon_computers", SMALL),
    "synthetic-100k": (
        "synthetic:nodes=100000,degree=15,features=100,classes=10,signal=0.1",
        ("--fanouts", "10,5", "--batch-size", "512", "--epochs", "8"),
    ),
    "synthetic-200k": (
        "synthetic:nodes=200000,degree=20,features=100,classes=20,signal=0.1",
        ("--fanouts", "10,5", "--batch-size", "1000", "--epochs", "8"),
    ),
}
METHODS = {
    "NS": ("--sampler", "ns"),
    "GNS 1%": ("--sampler", "gns", "--cache-fraction", "0.01"),
    "GNS auto": ("--sampler", "gns", "--cache-fraction", "auto"),
}
# Fixed fractions that set the planner's limits (seeds 0-3; `--methods calibration`)
CALIBRATION = {
    "NS": METHODS["NS"],
    **{f"GNS {f}%": ("--sampler", "gns", "--cache-fraction", f"{f / 100:g}") for f in (5, 10, 20)},
}


LABELS = ("NS", "GNS 1%", "GNS 5%", "GNS 10%", "GNS 20%", "GNS auto")  # the table's order


def runs(graphs, seeds, methods=None) -> list[Run]:
    out = []
    for seed in seeds:  # seed outermost: a partial grid covers every graph
        for name in graphs:
            spec, options = GRAPHS[name]
            for label, args in (methods or METHODS).items():
                out.append(Run(spec, label, seed, (*options, *args)))
    return out


def curve(result: dict) -> np.ndarray:
    return np.array([e["test_accuracy"] for e in result["epochs"]], dtype=float)


def clock(result: dict) -> np.ndarray:
    """Seconds of training at the end of each epoch (evaluation not counted), the planner's
    included."""
    pilot = result["plan"]["seconds"] if "plan" in result else 0.0
    return pilot + np.cumsum([e["time_s"] for e in result["epochs"]])


def summarise(results: list[dict], graphs) -> tuple[str, dict]:
    lines, table = [], {}
    header = (
        "| graph | method | final test % | mean over epochs % | rows/batch | rows vs NS | "
        "epoch s | fraction (per seed) | planner s | allowance s |"
    )
    lines += [header, "|" + "---|" * 10]
    for name in graphs:
        spec = GRAPHS[name][0]
        by = {m: [r for r in results if r["dataset"] == spec and r["label"] == m] for m in LABELS}
        if not by["NS"]:
            continue
        ns = by["NS"]
        ns_rows = np.mean([r["h2d_rows_per_batch"] for r in ns])
        ns_epoch = [np.median([e["time_s"] for e in r["epochs"]]) for r in ns]
        ns_summed = [np.sum([e["time_s"] for e in r["epochs"]]) for r in ns]
        budget = float(np.mean([max(2 * a, 0.15 * b) for a, b in zip(ns_epoch, ns_summed)]))
        entry = {}
        for method, rs in by.items():
            if not rs:
                continue
            final = [100 * r["epochs"][-1]["test_accuracy"] for r in rs]
            over = [100 * curve(r).mean() for r in rs]
            rows = np.mean([r["h2d_rows_per_batch"] for r in rs])
            epoch = np.mean([np.median([e["time_s"] for e in r["epochs"]]) for r in rs])
            fractions = [r.get("cache_fraction") for r in rs]
            pilot = [r["plan"]["seconds"] for r in rs if "plan" in r]
            entry[method] = dict(
                final=final, over=over, rows=rows, epoch=epoch, fractions=fractions, pilot=pilot,
                curve=np.mean([curve(r) for r in rs], axis=0).tolist(), seeds=len(rs),
                clock=np.mean([clock(r) for r in rs], axis=0).tolist(),
            )  # fmt: skip
            lines.append(
                f"| {name} | {method} | {pm(*mean_std(final), len(rs))} | "
                f"{pm(*mean_std(over), len(rs))} | {rows:,.0f} | {rows / ns_rows:.2f} | "
                f"{epoch:.3f} | "
                + ("-" if method == "NS" else ", ".join(f"{f:g}" for f in fractions))
                + (f" | {np.mean(pilot):.1f}" if pilot else " | -")
                + f" | {budget:.1f} |"
            )
        table[name] = entry
    return "\n".join(lines), table


def verdicts(table: dict) -> str:
    out = [
        "| graph | auto: final - NS (points) | mean over epochs - NS | rows vs NS | keeps up | "
        "1 %: final - NS | 1 %: mean - NS |",
        "|" + "---|" * 7,
    ]
    for name, entry in table.items():
        if "GNS auto" not in entry or "NS" not in entry:
            continue
        ns = entry["NS"]
        d_final = np.mean(entry["GNS auto"]["final"]) - np.mean(ns["final"])
        d_over = np.mean(entry["GNS auto"]["over"]) - np.mean(ns["over"])
        rows = entry["GNS auto"]["rows"] / ns["rows"]
        ok = d_final >= -1 and d_over >= -3 and rows <= 0.6
        g1 = entry.get("GNS 1%")
        one = (
            f"{np.mean(g1['final']) - np.mean(ns['final']):+.2f} | "
            f"{np.mean(g1['over']) - np.mean(ns['over']):+.2f}"
            if g1
            else "- | -"
        )
        out.append(
            f"| {name} | {d_final:+.2f} | {d_over:+.2f} | {rows:.2f} | "
            f"{'yes' if ok else 'NO'} | {one} |"
        )
    return "\n".join(out)


def plot(table: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gns_jax.plotting import save_png

    fig, axes = plt.subplots(2, len(table), figsize=(3.2 * len(table), 5.6), squeeze=False)
    for column, (name, entry) in enumerate(table.items()):
        top, bottom = axes[0][column], axes[1][column]
        for method, e in entry.items():
            c = np.array(e["curve"]) * 100
            top.plot(np.arange(1, c.size + 1), c, label=method)
            bottom.plot(e["clock"], c, label=method)
        top.set_title(name, fontsize=9)
        top.set_xlabel("epoch")
        bottom.set_xlabel("training s (planner included)")
    axes[0][0].set_ylabel("test accuracy % (mean over seeds)")
    axes[1][0].set_ylabel("test accuracy %")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, path, dpi=120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graphs", nargs="+", default=list(GRAPHS), choices=list(GRAPHS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--table-only", action="store_true", help="only aggregate --out")
    parser.add_argument(
        "--methods", choices=("validation", "calibration"), default="validation",
        help="validation: NS, GNS 1 %% and auto; calibration: NS and GNS at 5, 10, 20 %%",
    )  # fmt: skip
    args = parser.parse_args(argv)
    grid = runs(args.graphs, args.seeds, CALIBRATION if args.methods == "calibration" else None)
    if args.table_only:
        paths = [args.out / "runs" / f"{run.name}.json" for run in grid]
        missing = [p.name for p in paths if not p.is_file()]
        if missing:
            parser.error(f"--table-only: {len(missing)} runs missing in {args.out}/runs")
    else:
        paths = run_grid(grid, args.out)
    results = load_runs(paths, grid)
    text, table = summarise(results, args.graphs)
    report = (
        "# `--cache-fraction auto` against NS and a fixed 1 % cache\n\n"
        f"Seeds {', '.join(map(str, args.seeds))}; every run evaluated after every epoch "
        "(exact inference). Options per graph in `experiments/plan.py`.\n\n"
        f"{text}\n\n{verdicts(table)}\n\n{environment_line(results)}\n"
    )
    (args.out / "plan.md").write_text(report)
    plot(table, args.out / "plan.png")
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
