"""The paper's comparison in one command: NS, LADIES(512), LADIES(5000) and GNS, and GNS ablations.

For every dataset and seed, one ``gns-jax train`` per configuration (``experiments/grid.py``;
resumable), all with one shared model configuration. Writes, in ``--out``:

* ``runs/*.json``: every run's results (``docs/results.md``), with its label;
* ``compare.md``: the table in the paper's shape (test accuracy mean ± std, epoch time and the
  speed-up over NS, input nodes per batch, host-to-device MB per batch), one per dataset, with
  the hardware, versions and commit; runs whose configurations differ are never pooled;
* ``figures/<dataset>.png``: accuracy against epoch time, feature rows moved per batch, and
  validation accuracy against wall time.

    python -m experiments.compare --datasets cora amazon_photo --seeds 0 1 2 \\
        --out experiments/results/compare
    python -m experiments.compare --ablations --datasets amazon_photo --out ...

``--ablations`` runs GNS variants instead: cache fraction (0.1 to 10 %), cache distribution,
input-layer weights, refresh period (every epoch, every 5, never) and cache-first upper layers.
Options after ``--`` go to every run (default: ``--fanouts 25,10 --lr 0.01 --epochs 100``, the
two-layer setting of the small graphs; pass the command's defaults for a products-scale folder).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from experiments.grid import (
    Run,
    environment_line,
    groups,
    load_folder,
    mean_std,
    plot_per_dataset,
    pm,
    run_grid,
)

SMALL_GRAPH_OPTIONS = ("--fanouts", "25,10", "--lr", "0.01", "--epochs", "100")
GNS = ("--sampler", "gns", "--cache-fraction", "0.01")  # the default estimator


def comparison() -> list[tuple[str, tuple[str, ...]]]:
    """``(label, options)``: the paper's four columns (LazyGCN is not implemented)."""
    return [
        ("NS", ("--sampler", "ns")),
        ("LADIES (512)", ("--sampler", "ladies", "--ladies-nodes", "512")),
        ("LADIES (5000)", ("--sampler", "ladies", "--ladies-nodes", "5000")),
        ("GNS", GNS),
    ]


def ablations(epochs: int) -> list[tuple[str, tuple[str, ...]]]:
    """``(label, options)``: one GNS knob at a time, the others at GNS's settings."""
    out = [("NS", ("--sampler", "ns")), ("GNS", GNS)]
    for f in (0.001, 0.005, 0.02, 0.05, 0.1):
        out.append((f"GNS cache {100 * f:g}%", ("--sampler", "gns", "--cache-fraction", str(f))))
    for dist in ("uniform", "random-walk", "min-variance"):
        out.append((f"GNS cache-dist {dist}", (*GNS, "--cache-dist", dist)))
    for weights in ("ht", "clipped", "exact", "minimum", "none", "heuristic"):
        options = ("--sampler", "gns", "--gns-weights", weights, "--cache-fraction", "0.01")
        out.append((f"GNS weights {weights}", options))
    for label, period in (("every 5 epochs", 5), ("never", epochs + 1)):
        out.append((f"GNS refresh {label}", (*GNS, "--cache-refresh", str(period))))
    out.append(("GNS cache-first", (*GNS, "--cache-first")))
    return out


def _epochs(options: tuple[str, ...]) -> int:
    return int(options[options.index("--epochs") + 1]) if "--epochs" in options else 100


def table(results: list[dict]) -> list[str]:
    grouped = groups(results)
    lines = []
    for dataset in sorted({d for d, _ in grouped}):
        labels = _order([lab for d, lab in grouped if d == dataset])
        ns = grouped.get((dataset, "NS"))
        ns_time = mean_std([r["epoch_time_s"] for r in ns])[0] if ns else float("nan")
        lines += [
            f"### {dataset}",
            "",
            "| method | test acc % | epoch time s | speed-up over NS | input nodes / batch "
            "| host->device MB / batch | rows / batch | seeds |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for label in labels:
            members = grouped[(dataset, label)]
            acc, sd = mean_std([100 * r["test_accuracy"] for r in members])
            t = mean_std([r["epoch_time_s"] for r in members])[0]
            nodes = mean_std([r["input_nodes_per_batch"] for r in members])[0]
            mb = mean_std([r["h2d_bytes_per_batch"] / 2**20 for r in members])[0]
            rows = mean_std([r["h2d_rows_per_batch"] for r in members])[0]
            lines.append(
                f"| {label} | {pm(acc, sd, len(members))} | {t:.3f} | {ns_time / t:.2f}x "
                f"| {nodes:,.0f} | {mb:.2f} | {rows:,.0f} | {len(members)} |"
            )
        lines.append("")
    return lines


def _order(labels) -> list[str]:
    """The comparison's columns, then the ablations, as in the table."""
    order = {lab: i for i, (lab, _) in enumerate(comparison() + ablations(100))}
    return sorted(labels, key=lambda lab: (order.get(lab, len(order)), lab))


def plot(results: list[dict], folder: Path) -> list[Path]:
    """Accuracy against epoch time, rows moved per batch, validation accuracy against wall time:
    one colour and marker per configuration (the same in every dataset's figure), NS in black."""
    from gns_jax.plotting import hbars, scale_for

    def draw(axes, dataset, labels, grouped, palette):
        times, rows = [], []
        for label in labels:
            members = grouped[(dataset, label)]
            style = palette[label]
            acc = [100 * r["test_accuracy"] for r in members]
            times += [r["epoch_time_s"] for r in members]
            axes[0].scatter([r["epoch_time_s"] for r in members], acc, label=label, s=30,
                            zorder=3, **style.points())  # fmt: skip
            rows.append(mean_std([r["h2d_rows_per_batch"] for r in members])[0])
            first = members[0]
            wall = np.cumsum([e["time_s"] + e.get("eval_time_s", 0.0) for e in first["epochs"]])
            val = [e.get("val_accuracy") for e in first["epochs"]]
            keep = [k for k, v in enumerate(val) if v is not None]
            axes[2].plot(wall[keep], 100 * np.array([val[k] for k in keep]), label=label,
                         **style.line(len(keep)))  # fmt: skip
        scale_for(axes[0], times)
        axes[0].set_xlabel("epoch time s (median, first epoch excluded)")
        axes[0].set_ylabel("test accuracy % (one point per seed)")
        hbars(axes[1], labels, rows, [palette[lab].color for lab in labels])
        axes[1].set_xlabel("feature rows host -> device per batch (mean over seeds)")
        axes[2].set_xlabel("wall time s (training and evaluation; first seed)")
        axes[2].set_ylabel("validation accuracy %")

    return plot_per_dataset(results, folder, 3, draw, _order, baselines=("NS",))


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = tuple(argv[argv.index("--") + 1 :]) if "--" in argv else SMALL_GRAPH_OPTIONS
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", required=True)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--ablations", action="store_true", help="GNS ablations instead")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--table-only", action="store_true", help="only aggregate --out")
    args = parser.parse_args(argv)
    configs = ablations(_epochs(extra)) if args.ablations else comparison()
    runs = [
        Run(dataset, label, seed, (*extra, *options))
        for dataset in args.datasets
        for seed in args.seeds
        for label, options in configs
    ]
    if not args.table_only:
        run_grid(runs, args.out)
    else:  # the header states the options: every run in --out must be one of this grid's
        foreign = sorted(
            p.name
            for p in (args.out / "runs").glob("*.json")
            if p.stem not in {r.name for r in runs}
        )
        if foreign:
            parser.error(
                f"--table-only: {len(foreign)} runs in {args.out} (e.g. {foreign[0]}) were not "
                "made with these --datasets, --seeds and options; give the grid's options "
                "(after --) so that the report states them truly"
            )
    results = load_folder(args.out)
    title = "GNS ablations" if args.ablations else "NS, LADIES and GNS"
    lines = [f"# {title}", "", f"Options of every run: `{' '.join(extra)}`.", ""]
    lines += table(results)
    lines.append(environment_line(results))
    (args.out / "compare.md").write_text("\n".join(lines) + "\n")
    plot(results, args.out / "figures")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
