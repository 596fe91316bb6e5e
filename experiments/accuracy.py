"""Test accuracy of GraphSAGE trained with each sampler on the shipped real datasets, several seeds.

Reproduces the "Done when" table of the foundation issue: node-wise sampling (NS) against the
GraphSAGE-mean accuracies published by Shchur et al. (2018, "Pitfalls of GNN evaluation").

    python -m experiments.accuracy --samplers ns --seeds 0 1 2 --out experiments/results/accuracy

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

# Shchur et al. 2018, Table 1 (GraphSAGE-mean, random 20/30-per-class splits).
PUBLISHED = {
    "cora": 79.2,
    "citeseer": 71.6,
    "amazon_computers": 82.4,
    "amazon_photo": 91.4,
    "coauthor_cs": 91.3,
}


def table(runs: list[dict], datasets: list[str], samplers: list[str]) -> list[str]:
    """Markdown rows: per dataset, mean ± std test accuracy per sampler, side by side."""
    header = "| dataset | " + " | ".join(f"{s} test acc % (mean ± std)" for s in samplers)
    header += " | seeds | published GraphSAGE | " + " | ".join(f"{s} - published" for s in samplers)
    if "gns" in samplers and "ns" in samplers:
        header += " | gns - ns"
    lines = [header + " |", "|" + "---|" * (header.count("|"))]
    for dataset in datasets:
        means, cells = {}, []
        for sampler in samplers:
            acc = [
                100 * r["test_accuracy"]
                for r in runs
                if r["config"]["dataset"] == dataset and r["sampler"] == sampler
            ]
            means[sampler] = np.mean(acc) if acc else float("nan")
            cells.append(f"{np.mean(acc):.1f} ± {np.std(acc):.1f}" if acc else "")
            seeds = len(acc)
        pub = PUBLISHED.get(dataset)
        row = f"| {dataset} | " + " | ".join(cells) + f" | {seeds} | {pub or ''} | "
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
