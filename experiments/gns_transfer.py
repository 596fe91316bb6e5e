"""Input nodes and host->device feature rows per batch: GNS against node-wise sampling (NS).

Samples batches side by side on one graph, with the same seeds and fan-outs, and counts, per batch,
the real input-layer nodes and the rows that must cross from the host (input nodes not in the
device cache; all of them for NS). Optionally trains each configuration for a few epochs and
reports test accuracy too.

    python -m experiments.gns_transfer \
        --dataset synthetic:nodes=1000000,degree=40,features=100,classes=8 \
        --fractions 0.01 0.05 --batches 20 --out experiments/results/gns_transfer

Writes ``gns_transfer.json`` and ``gns_transfer.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from gns_jax.cache import build_device_cache, cache_distribution, cache_size, draw_cache
from gns_jax.data import load_dataset
from gns_jax.sampling import NodeWiseSampler
from gns_jax.sampling.gns import GNSSampler
from gns_jax.train import TrainConfig, fit


@jax.jit
def _counts(src_nodes, slot_of, num_slots):
    real = src_nodes >= 0
    slots = slot_of[jnp.where(real, src_nodes, slot_of.shape[0] - 1)]
    return jnp.sum(real), jnp.sum(real & (slots == num_slots))


def measure(dataset, fanouts, batch_size, fractions, num_batches, seed=0):
    """Returns one row per configuration with mean input nodes and h2d rows per batch."""
    graph = dataset.graph
    rng = np.random.default_rng([seed, 7])
    order = rng.permutation(dataset.train_idx)
    seeds_list = [order[i * batch_size : (i + 1) * batch_size] for i in range(num_batches)]
    rows = []
    ns = NodeWiseSampler(graph, fanouts, batch_size)
    no_cache = jnp.zeros(graph.num_nodes + 1, jnp.int32)
    inputs, moved = [], []
    start = time.perf_counter()
    for t, seeds in enumerate(seeds_list):
        batch = ns.sample(jax.random.key(t), ns.pad_seeds(seeds))
        n_in, n_miss = _counts(batch.input_nodes, no_cache, 0)
        inputs.append(int(n_in))
        moved.append(int(n_in))
    rows.append(
        dict(
            sampler="ns",
            cache_fraction=0.0,
            cache_first=False,
            input_nodes=float(np.mean(inputs)),
            h2d_rows=float(np.mean(moved)),
            sample_s=(time.perf_counter() - start) / num_batches,
        )
    )
    probs = cache_distribution(graph, "degree")
    for fraction in fractions:
        m = cache_size(fraction, graph.num_nodes)
        cache, _ = build_device_cache(
            graph, np.zeros((graph.num_nodes, 1), np.float32), draw_cache(rng, probs, m)
        )
        for cache_first in (False, True):
            sampler = GNSSampler(graph, fanouts, batch_size, m, cache_first_upper=cache_first)
            inputs, moved = [], []
            start = time.perf_counter()
            for t, seeds in enumerate(seeds_list):
                batch = sampler.sample(jax.random.key(t), sampler.pad_seeds(seeds), cache)
                n_in, n_miss = _counts(batch.input_nodes, cache.slot_of, m)
                inputs.append(int(n_in))
                moved.append(int(n_miss))
            rows.append(
                dict(
                    sampler="gns",
                    cache_fraction=fraction,
                    cache_first=cache_first,
                    input_nodes=float(np.mean(inputs)),
                    h2d_rows=float(np.mean(moved)),
                    sample_s=(time.perf_counter() - start) / num_batches,
                )
            )
    base = rows[0]["h2d_rows"]
    for row in rows:
        row["h2d_rows_vs_ns"] = row["h2d_rows"] / base
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dataset", default="synthetic:nodes=1000000,degree=40,features=100,classes=8"
    )
    parser.add_argument("--fanouts", default="15,10,5", help="output layer first")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.01, 0.05])
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--train-epochs", type=int, default=0, help="also train, this many epochs")
    parser.add_argument(
        "--train-fractions",
        type=float,
        nargs="*",
        default=None,
        help="train NS and GNS (uniform upper layers) at only these cache fractions",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--out", default="experiments/results/gns_transfer")
    args = parser.parse_args(argv)
    fanouts = tuple(int(f) for f in args.fanouts.split(","))
    start = time.perf_counter()
    dataset = load_dataset(args.dataset)
    print(
        f"loaded {args.dataset}: {dataset.num_nodes:,} nodes, "
        f"{dataset.graph.num_edges:,} directed edges in {time.perf_counter() - start:.0f}s",
        file=sys.stderr,
    )
    rows = measure(dataset, fanouts, args.batch_size, args.fractions, args.batches)
    if args.train_epochs:
        base = TrainConfig(
            epochs=args.train_epochs,
            fanouts=fanouts,
            batch_size=args.batch_size,
            eval_every=args.train_epochs,
        )
        for row in rows:
            if (
                args.train_fractions is not None
                and row["sampler"] == "gns"
                and (row["cache_first"] or row["cache_fraction"] not in args.train_fractions)
            ):
                continue
            config = dataclasses.replace(
                base,
                sampler=row["sampler"],
                cache_fraction=row["cache_fraction"] or 0.01,
                cache_first=row["cache_first"],
            )
            accs = [
                fit(dataset, dataclasses.replace(config, seed=s), quiet=True).metrics[
                    "test_accuracy"
                ]
                for s in args.seeds
            ]
            row["test_accuracy"] = float(np.mean(accs))
            print(row, file=sys.stderr)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {"backend": jax.default_backend(), "machine": platform.machine(), "jax": jax.__version__}
    (out / "gns_transfer.json").write_text(
        json.dumps(
            {
                "dataset": args.dataset,
                "fanouts": fanouts,
                "batch_size": args.batch_size,
                "num_nodes": dataset.num_nodes,
                "num_edges": dataset.graph.num_edges,
                "rows": rows,
                "environment": env,
            },
            indent=1,
        )
    )
    lines = [
        "| sampler | cache | cache-first upper | input nodes / batch | h2d rows / batch | "
        "rows vs NS | test acc |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        acc = f"{100 * r['test_accuracy']:.1f}" if "test_accuracy" in r else ""
        lines.append(
            f"| {r['sampler']} | {100 * r['cache_fraction']:.0f}% | {r['cache_first']} | "
            f"{r['input_nodes']:,.0f} | {r['h2d_rows']:,.0f} | {r['h2d_rows_vs_ns']:.3f} | "
            f"{acc} |"
        )
    lines.append(
        f"\n{args.dataset}: {dataset.num_nodes:,} nodes, {dataset.graph.num_edges:,} "
        f"directed edges; fan-outs {args.fanouts}; batch {args.batch_size}; "
        f"{args.batches} batches; ran on {env['backend']} ({env['machine']})."
    )
    (out / "gns_transfer.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
