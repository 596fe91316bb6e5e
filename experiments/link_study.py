"""Link prediction: GNS against NS over seeds (``--task link``, the command's defaults).

Per graph, NS, GNS with a 1 % and a 20 % cache and GNS with the planner's choice (``--cache-
fraction auto``), each over ``--seeds`` (default 0, 1, 2), 100 epochs evaluated every 10th, the
command's defaults otherwise (3 layers 15,10,5, hidden 256, batch 1000 edges, one uniform
negative per positive, the seeded 85/5/10 edge split, which depends on the seed). Each run is
one ``gns-jax train --task link --out`` JSON in ``OUT/runs/`` (``experiments/grid.py``: a
completed run is skipped, so the study resumes); the table gives, per graph and method, the
test ROC-AUC, average precision, MRR and Hits@50 at the best validation epoch (mean ± std over
seeds), the gap to NS paired by seed, and the feature rows moved per batch against NS's.

    python -m experiments.link_study --out experiments/reports/link-study --max-minutes 40
    python -m experiments.link_study --out experiments/reports/link-study --table-only
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from experiments.grid import Run, environment_line, load_folder, mean_std, pm, run_grid

GRAPHS = ("cora",)
SEEDS = (0, 1, 2)
METHODS = {
    "NS": ("--sampler", "ns"),
    "GNS 1%": ("--sampler", "gns", "--cache-fraction", "0.01"),
    "GNS 20%": ("--sampler", "gns", "--cache-fraction", "0.2"),
    "GNS auto": ("--sampler", "gns", "--cache-fraction", "auto"),
}
OPTIONS = ("--task", "link", "--epochs", "100", "--eval-every", "10")
METRICS = ("test_roc_auc", "test_average_precision", "test_mrr", "test_hits@50")


def runs(graphs=GRAPHS, seeds=SEEDS) -> list[Run]:
    """Seeds outermost: a partial study covers every method."""
    return [
        Run(graph, label, seed, (*OPTIONS, *args))
        for seed in seeds
        for graph in graphs
        for label, args in METHODS.items()
    ]


def table(out: Path) -> str:
    results = load_folder(out)
    by = {}
    for r in results:
        by.setdefault((r["dataset"], r["label"]), {})[r["seed"]] = r
    lines = [
        "# Link prediction: GNS against NS",
        "",
        "`--task link`, the command's defaults (3 layers 15,10,5, batch 1000 edges, one uniform "
        "negative each, 85/5/10 edge split by seed), 100 epochs; test metrics at the best "
        "validation ROC-AUC, mean ± std over seeds; gap: GNS minus NS paired by seed, points of "
        "ROC-AUC.",
        "",
        "| graph | method | seeds | cache fraction | test ROC-AUC | AP | MRR | Hits@50 "
        "| ROC-AUC gap | rows vs NS |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for graph in sorted({g for g, _ in by}):
        ns = by.get((graph, "NS"), {})
        for label in METHODS:
            runs_ = by.get((graph, label), {})
            if not runs_:
                continue
            n = len(runs_)
            cells = [
                pm(*mean_std([100 * r[m] for r in runs_.values() if r[m] is not None]), n)
                for m in METRICS
            ]
            paired = [s for s in runs_ if s in ns]
            gap = mean_std([100 * (runs_[s]["test_roc_auc"] - ns[s]["test_roc_auc"])
                            for s in paired])  # fmt: skip
            rows = [runs_[s]["h2d_rows_per_batch"] / ns[s]["h2d_rows_per_batch"] for s in paired]
            fractions = sorted({r.get("cache_fraction") for r in runs_.values()}, key=str)
            lines.append(
                f"| {graph} | {label} | {len(runs_)} | "
                f"{', '.join('-' if f is None else f'{f:g}' for f in fractions)} | "
                + " | ".join(cells)
                + f" | {'-' if label == 'NS' else pm(*gap, len(paired))} | "
                + (f"{np.mean(rows):.2f}" if rows and label != "NS" else "-")
                + " |"
            )
    if results:
        lines += ["", environment_line(results)]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--graphs", nargs="+", default=list(GRAPHS))
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    parser.add_argument("--max-minutes", type=float, default=None)
    parser.add_argument("--table-only", action="store_true")
    args = parser.parse_args(argv)
    if not args.table_only:
        start = time.monotonic()
        for run in runs(args.graphs, args.seeds):
            if args.max_minutes and time.monotonic() - start > 60 * args.max_minutes:
                print("link_study: --max-minutes reached; rerun to go on", file=sys.stderr)
                break
            run_grid([run], args.out)
    text = table(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "link-study.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
