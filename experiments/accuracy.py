"""Test scores of GraphSAGE trained with each sampler on the shipped real datasets, several seeds.

Node-wise sampling (NS) and GNS against published GraphSAGE figures, each graph scored by its
field's metric (the run's selection metric, ``--metric auto``: accuracy for the multi-class
graphs, ROC-AUC for Tolokers' binary task):

    python -m experiments.accuracy --samplers ns gns --out experiments/results/accuracy

Writes ``accuracy.json`` (every run's full results) and ``accuracy.md`` (mean +- std per dataset).
Each run is ``gns-jax train --dataset NAME --sampler S --seed K`` with the command's defaults,
unless options are passed after ``--``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from gns_jax.cli import build_parser, run_train

# GraphSAGE-mean on random 20/30-per-class splits: Shchur et al. 2018 ("Pitfalls of GNN
# evaluation"), Table 1, test accuracy. GraphSAGE on Tolokers' ten stored 50/25/25 splits:
# Platonov et al., ICLR 2023 ("A critical look at the evaluation of GNNs under heterophily"),
# Table 2, test ROC-AUC.
PUBLISHED = {
    "cora": 79.2,
    "citeseer": 71.6,
    "amazon_computers": 82.4,
    "amazon_photo": 91.4,
    "coauthor_cs": 91.3,
    "tolokers": 82.43,
}


def table(runs: list[dict], datasets: list[str], samplers: list[str]) -> list[str]:
    """Markdown rows: per dataset, mean ± std of its selection metric's test score per sampler,
    side by side, beside the published figure."""
    header = "| dataset | metric | " + " | ".join(f"{s} test % (mean ± std)" for s in samplers)
    header += " | seeds | published GraphSAGE | " + " | ".join(f"{s} - published" for s in samplers)
    if "gns" in samplers and "ns" in samplers:
        header += " | gns - ns"
    lines = [header + " |", "|" + "---|" * header.count("|")]
    for dataset in datasets:
        means, cells, metric, seeds = {}, [], "accuracy", 0
        for sampler in samplers:
            mine = [
                r for r in runs if r["config"]["dataset"] == dataset and r["sampler"] == sampler
            ]
            metric = mine[0].get("metric", "accuracy") if mine else metric
            score = [100 * r[f"test_{r.get('metric', 'accuracy')}"] for r in mine]
            means[sampler] = np.mean(score) if score else float("nan")
            cells.append(f"{np.mean(score):.1f} ± {np.std(score):.1f}" if score else "")
            seeds = len(score)
        pub = PUBLISHED.get(dataset)
        row = f"| {dataset} | {metric} | " + " | ".join(cells) + f" | {seeds} | {pub or ''} | "
        row += " | ".join(f"{means[s] - pub:+.1f}" if pub else "" for s in samplers)
        if "gns" in samplers and "ns" in samplers:
            row += f" | {means['gns'] - means['ns']:+.1f}"
        lines.append(row + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(PUBLISHED))
    parser.add_argument("--samplers", nargs="+", default=["ns"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", default="experiments/results/accuracy")
    parser.add_argument(
        "--from-json", nargs="+", default=None, help="only tabulate the runs in these files"
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    if args.from_json:
        runs = [r for path in args.from_json for r in json.loads(Path(path).read_text())]
    for dataset in args.datasets if not args.from_json else []:
        for sampler in args.samplers:
            for seed in args.seeds:
                cli = ["train", "--dataset", dataset, "--sampler", sampler, "--seed", str(seed)]
                result = run_train(build_parser().parse_args(cli + ["--quiet", *extra]))
                runs.append(result)
                (out / "accuracy.json").write_text(json.dumps(runs, indent=1))
    lines = table(runs, args.datasets, args.samplers)
    env = runs[0]["environment"]
    options = " ".join(extra) or ("as recorded in the JSON" if args.from_json else "defaults")
    lines.append(
        f"\nOptions: {options}. Ran on {env['backend']} ({env['machine']}), jax {env['jax']}."
    )
    (out / "accuracy.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
