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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(PUBLISHED))
    parser.add_argument("--samplers", nargs="+", default=["ns"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", default="experiments/results/accuracy")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for dataset in args.datasets:
        for sampler in args.samplers:
            for seed in args.seeds:
                cli = ["train", "--dataset", dataset, "--sampler", sampler, "--seed", str(seed)]
                result = run_train(build_parser().parse_args(cli + ["--quiet", *extra]))
                runs.append(result)
                (out / "accuracy.json").write_text(json.dumps(runs, indent=1))
    lines = [
        "| dataset | sampler | test accuracy % (mean ± std) | seeds | published | difference |",
        "|---|---|---|---|---|---|",
    ]
    for dataset in args.datasets:
        for sampler in args.samplers:
            acc = [
                100 * r["test_accuracy"]
                for r in runs
                if r["config"]["dataset"] == dataset and r["sampler"] == sampler
            ]
            pub = PUBLISHED.get(dataset)
            diff = f"{np.mean(acc) - pub:+.1f}" if pub else ""
            lines.append(
                f"| {dataset} | {sampler} | {np.mean(acc):.1f} ± {np.std(acc):.1f} | {len(acc)} "
                f"| {pub or ''} | {diff} |"
            )
    env = runs[0]["environment"]
    lines.append(f"\nRan on {env['backend']} ({env['machine']}), jax {env['jax']}.")
    (out / "accuracy.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
