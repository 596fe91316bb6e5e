"""The input-layer estimators against node-wise sampling: accuracy per epoch and rows moved.

For every dataset and seed: NS, and GNS with each estimator (``ht``, ``hajek``, ``clipped``,
``exact``) at each cache fraction, same model, options and epochs. One ``gns-jax train`` per run
(``experiments/grid.py``); the command is resumable. Writes ``estimators.md`` (test accuracy mean
± std over seeds, the epochs' validation accuracy, rows moved per batch and their ratio to NS's,
hardware, versions and commit) and ``figures/<dataset>.png`` (validation accuracy against epoch,
and test accuracy against rows moved). ``--cache-dists`` adds cache distributions other than
the degree-proportional default (``min-variance``, ...): each is a run of its own, labelled
``hajek 1% min-variance``.

    python -m experiments.estimators --grid real --out experiments/results/estimators-real
    python -m experiments.estimators --grid products --dataset DIR \\
        --out experiments/results/estimators-products

``real``: the seven shipped datasets, seeds 0 1 2, two layers ``--fanouts 25,10 --lr 0.01
--epochs 150`` (60 for Coauthor CS), caches of 1 % and 5 % (0.1 % of these graphs is a handful
of nodes). ``products``: a saved products-scale folder (``gns-jax save --dataset
synthetic:nodes=2400000,degree=52,features=100,classes=47,signal=0.1 --out DIR``), seed 0, the
command's defaults, 3 epochs, caches of 0.1 %, 1 % and 5 %.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np

from experiments.grid import Run, environment_line, groups, mean_std, plot_per_dataset, pm, run_grid
from gns_jax.cache import DISTRIBUTIONS

REAL = (
    "cora",
    "citeseer",
    "amazon_photo",
    "amazon_computers",
    "coauthor_cs",
    "facebook_pagepage",
    "tolokers",
)
ESTIMATORS = ("ht", "hajek", "clipped", "exact")


def grid(name: str, datasets, seeds, estimators, fractions, dists=("degree",)) -> list[Run]:
    """NS and every estimator, fraction and cache distribution (``dists``) per dataset and seed;
    a run's options are its command line's, so that a run already completed is not run again."""
    runs = []
    for dataset in datasets:
        if name == "real":
            epochs = "60" if dataset == "coauthor_cs" else "150"
            base = ("--fanouts", "25,10", "--lr", "0.01", "--epochs", epochs)
        else:
            base = ("--epochs", "3")
        for seed in seeds:
            runs.append(Run(dataset, "ns", seed, (*base, "--sampler", "ns")))
            for est, f, dist in itertools.product(estimators, fractions, dists):
                args = (*base, "--sampler", "gns", "--gns-weights", est)
                args += ("--cache-fraction", str(f))
                if est == "hajek-fallback":  # a node with no cached neighbour takes 10
                    args += ("--input-fanout", "10,10")
                label = f"{est} {100 * f:g}%"
                if dist != "degree":  # the default's runs keep their names (and files)
                    args += ("--cache-dist", dist)
                    label += f" {dist}"
                runs.append(Run(dataset, label, seed, args))
    return runs


def label_of(result: dict) -> str:
    """The configuration's name in tables and plots, from its recorded options."""
    config = result["config"]
    if config["sampler"] == "ns":
        return "ns"
    label = f"{config['gns_weights']} {100 * config['cache_fraction']:g}%"
    if config.get("cache_dist", "degree") != "degree":
        label += f" {config['cache_dist']}"
    return label


def load_folder(folder: Path) -> list[dict]:
    """Every completed run in ``folder/runs``, labelled by its configuration."""
    results = []
    for path in sorted((folder / "runs").glob("*.json")):
        try:
            result = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if result.get("status") == "completed":
            result["label"] = result.get("label") or label_of(result)
            results.append(result)
    return results


def table(results: list[dict]) -> list[str]:
    grouped = groups(results)
    lines = [
        "| dataset | sampler | test acc % | val acc % per epoch (mean over seeds) | seeds "
        "| rows / batch | rows vs NS | test acc - NS |",
        "|---|---|---|---|---|---|---|---|",
    ]
    datasets = sorted({d for d, _ in grouped}, key=lambda d: (d not in REAL, d))
    for dataset in datasets:
        labels = [lab for d, lab in grouped if d == dataset]
        labels.sort(key=lambda lab: (lab != "ns", lab.split()[0], _fraction(lab)))
        ns = grouped.get((dataset, "ns"), [])
        ns_acc = mean_std([r["test_accuracy"] for r in ns])[0]
        ns_rows = mean_std([r["h2d_rows_per_batch"] for r in ns])[0]
        for label in labels:
            members = grouped[(dataset, label)]
            acc, sd = mean_std([100 * r["test_accuracy"] for r in members])
            rows = mean_std([r["h2d_rows_per_batch"] for r in members])[0]
            curve = _val_curve(members)
            shown = curve if len(curve) <= 6 else curve[:: max(1, len(curve) // 5)]
            lines.append(
                f"| {dataset} | {label} | {pm(acc, sd, len(members))} "
                f"| {', '.join(f'{100 * v:.1f}' for v in shown)} | {len(members)} "
                f"| {rows:,.0f} | {rows / ns_rows:.3f} | {acc - 100 * ns_acc:+.2f} |"
            )
    return lines


def _fraction(label: str) -> float:
    try:
        return float(label.split()[1].rstrip("%"))
    except (IndexError, ValueError):
        return 0.0


def _val_curve(members: list[dict]) -> list[float]:
    curves = [[e.get("val_accuracy") for e in r["epochs"]] for r in members]
    length = min(len(c) for c in curves)
    return [float(np.mean([c[i] for c in curves if c[i] is not None])) for i in range(length)]


def plot(results: list[dict], folder: Path) -> list[Path]:
    """Validation accuracy against epoch, and test accuracy against rows moved: one colour and
    marker per configuration (the same in every dataset's figure), NS in black."""
    from gns_jax.plotting import scale_for

    def draw(axes, dataset, labels, grouped, palette):
        moved = []
        for label in labels:
            members = grouped[(dataset, label)]
            curve = _val_curve(members)
            style = palette[label]
            axes[0].plot(np.arange(1, len(curve) + 1), 100 * np.array(curve), label=label,
                         **style.line(len(curve)))  # fmt: skip
            acc = [100 * r["test_accuracy"] for r in members]
            rows = [r["h2d_rows_per_batch"] for r in members]
            moved += rows
            axes[1].scatter(rows, acc, label=label, s=30, zorder=3, **style.points())
        axes[0].set_xlabel("epoch")
        axes[0].xaxis.get_major_locator().set_params(integer=True)
        axes[0].set_ylabel("validation accuracy % (mean over seeds)")
        scale_for(axes[1], moved)
        axes[1].set_xlabel("feature rows host -> device per batch")
        axes[1].set_ylabel("test accuracy % (one point per seed)")

    order = lambda labels: sorted(labels, key=lambda lab: (lab != "ns", lab.split()[0],
                                                           _fraction(lab), lab))  # fmt: skip
    return plot_per_dataset(results, folder, 2, draw, order, baselines=("ns",))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", choices=("real", "products"), required=True)
    parser.add_argument("--dataset", nargs="+", default=None, help="datasets (default: the grid's)")
    parser.add_argument("--seeds", nargs="+", type=int, default=None)
    parser.add_argument("--estimators", nargs="+", default=list(ESTIMATORS))
    parser.add_argument("--fractions", nargs="+", type=float, default=None)
    parser.add_argument(
        "--cache-dists",
        nargs="+",
        default=["degree"],
        choices=DISTRIBUTIONS,
        help="cache distributions (default: degree); each runs every estimator and fraction",
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--table-only", action="store_true", help="only aggregate what has run in --out"
    )
    args = parser.parse_args(argv)
    if args.grid == "products" and not args.dataset:
        parser.error("--grid products needs --dataset DIR (a saved products-scale folder)")
    datasets = args.dataset or list(REAL)
    seeds = args.seeds or ([0, 1, 2] if args.grid == "real" else [0])
    fractions = args.fractions or ([0.01, 0.05] if args.grid == "real" else [0.001, 0.01, 0.05])
    if not args.table_only:
        runs = grid(args.grid, datasets, seeds, args.estimators, fractions, args.cache_dists)
        run_grid(runs, args.out)
    results = load_folder(args.out)  # every completed run in the folder, grids combined
    lines = ["# Input-layer estimators against node-wise sampling", "", *table(results), ""]
    lines.append(environment_line(results))
    (args.out / "estimators.md").write_text("\n".join(lines) + "\n")
    plot(results, args.out / "figures")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
