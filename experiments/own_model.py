"""The README's own model (a GIN with BatchNorm and nnx.Dropout) against the command's GraphSAGE.

Same data, options and seeds for both: the README's configuration on Cora (GNS, 20 % cache,
fan-outs 10,10, batch 70, 20 epochs, evaluated every 5), sampled evaluation for both so that
they are scored alike. Prints, per model, the test accuracy (mean ± std over the seeds), the
compilations of the train step and the epoch time:

    python -m experiments.own_model --seeds 0 1 2 --out experiments/results/own-model

Writes ``own-model.json`` (every run's results) and ``own-model.md`` (the table).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_model():
    """The ``GIN`` class of the README's "Your own model" section, as the README defines it."""
    body = README.read_text().split("## Your own model\n", 1)[1].split("\n## ", 1)[0]
    code = re.findall(r"```python\n(.*?)```", body, flags=re.S)[0]
    scope: dict = {}
    exec(compile(code.split("\ndata = ", 1)[0], str(README), "exec"), scope)  # the class only
    return scope["GIN"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--dataset", default="cora")
    parser.add_argument("--out", default="experiments/results/own-model")
    args = parser.parse_args(argv)
    from flax import nnx

    from gns_jax import TrainConfig, fit, load_dataset

    gin = readme_model()
    data = load_dataset(args.dataset)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for seed in args.seeds:
        config = TrainConfig(
            dataset=args.dataset, epochs=20, batch_size=70, fanouts=(10, 10), lr=0.01,
            cache_fraction=0.2, eval_every=5, eval_mode="sampled", seed=seed,
        )  # fmt: skip
        for name in ("GIN + BatchNorm + Dropout", "GraphSAGE"):
            model = None
            if name != "GraphSAGE":
                model = gin((data.num_features, 64, data.num_classes), rngs=nnx.Rngs(seed))
            result = fit(data, config, model=model, quiet=True).metrics
            runs.append({"model": name, **result})
            print(f"{name} seed {seed}: {result['test_accuracy']:.4f}", file=sys.stderr)
            (out / "own-model.json").write_text(json.dumps(runs, indent=1))
    lines = [
        "| model | test accuracy % (mean ± std) | seeds | train-step compilations | epoch s |",
        "|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(r["model"] for r in runs):
        mine = [r for r in runs if r["model"] == name]
        acc = 100 * np.array([r["test_accuracy"] for r in mine])
        compiled = sorted({r["compilations"] for r in mine})
        epoch = np.mean([r["epoch_time_s"] for r in mine])
        lines.append(
            f"| {name} | {acc.mean():.1f} ± {acc.std():.1f} | {len(mine)} | "
            f"{', '.join(map(str, compiled))} | {epoch:.3f} |"
        )
    env = runs[0]["environment"]
    lines.append(f"\n{args.dataset}; ran on {env['backend']} ({env['machine']}), jax {env['jax']}.")
    (out / "own-model.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
