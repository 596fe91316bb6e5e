"""Data-parallel scaling: batches per second against the number of devices, side by side.

Weak scaling, as data parallelism is used: every device keeps ``--per-device-batch`` seeds, so the
global batch grows with the device count (``--batch-size = N x per-device batch``) and perfect
scaling keeps the seconds per batch constant: ``N`` times the seeds per second. For each device
count in ``--devices`` the same graph and model train one warm-up epoch (compilation; not timed)
and one timed epoch of ``--batches`` batches, in rounds that alternate between the device counts
(medians over rounds). The report gives per device count: seconds per batch, seeds per second,
the speed-up over one device and its ratio to linear scaling (speed-up / N), the time split per
batch (sample, gather, h2d, step, wait) and per device (the sampling of a process's devices runs
one after the other in its input thread), host-to-device rows per device, and compilations.

On a CPU the devices are forced (``XLA_FLAGS=--xla_force_host_platform_device_count=N``, set by
this script before JAX starts when it is not set); they share the machine's cores, so the figures
measure the overhead of the data-parallel machinery (sharded sampling, the assembly of the
global batch, the collectives) rather than a speed-up. On a machine with several accelerators
the same command measures real scaling.

    python -m experiments.bench_parallel --devices 1 2 4 --per-device-batch 256 \\
        --batches 10 --rounds 3 --out experiments/results/bench_parallel

Writes ``bench_parallel.json`` and ``bench_parallel.md`` in ``--out``; prints the hardware.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def _force_devices(count: int) -> None:
    """Forces ``count`` CPU devices unless XLA_FLAGS already chooses (before JAX is imported)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dataset",
        default="synthetic:nodes=200000,degree=15,features=100,classes=10",
        help="shipped name, folder or synthetic spec",
    )
    parser.add_argument("--sampler", default="gns", choices=("gns", "ns", "ladies"))
    parser.add_argument("--devices", nargs="+", type=int, default=[1, 2, 4])
    parser.add_argument("--per-device-batch", type=int, default=256)
    parser.add_argument("--batches", type=int, default=10, help="timed batches per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fanouts", default="15,10,5")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--cache-fraction", type=float, default=0.01)
    parser.add_argument("--prefetch", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("experiments/results/bench_parallel"))
    args = parser.parse_args(argv)
    if min(args.devices) < 1 or min(args.per_device_batch, args.batches, args.rounds) < 1:
        parser.error("--devices, --per-device-batch, --batches and --rounds must be positive")
    try:
        args.fanouts = tuple(int(v) for v in args.fanouts.split(","))
    except ValueError:
        parser.error(f"--fanouts: comma-separated integers, got {args.fanouts!r}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    _force_devices(max(args.devices))

    import dataclasses

    import jax
    import numpy as np

    from gns_jax.data import load_dataset
    from gns_jax.instrument import environment
    from gns_jax.train import TrainConfig, fit

    available = len(jax.devices())
    if max(args.devices) > available:
        raise SystemExit(
            f"--devices {max(args.devices)}: only {available} device(s); XLA_FLAGS is "
            f"{os.environ.get('XLA_FLAGS')!r}"
        )
    dataset = load_dataset(args.dataset)
    largest = max(args.devices) * args.per_device_batch * args.batches
    if largest > dataset.train_idx.size:
        raise SystemExit(
            f"--batches {args.batches} x {max(args.devices)} devices x --per-device-batch "
            f"{args.per_device_batch} = {largest} seeds, but the training split of "
            f"{dataset.name} has {dataset.train_idx.size}"
        )
    env = environment()
    machine = (
        f"{env.get('cpu')}, {env.get('cores')} cores, {env.get('backend')} backend with "
        f"{len(jax.devices())} device(s), jax {env.get('jax')}"
    )
    print(machine, file=sys.stderr)
    runs: dict[int, list[dict]] = {n: [] for n in args.devices}
    for r in range(args.rounds):
        rng = np.random.default_rng([args.seed, r])
        for n in args.devices:
            batch = n * args.per_device_batch
            seeds = np.sort(rng.choice(dataset.train_idx, batch * args.batches, replace=False))
            subset = dataclasses.replace(dataset, train_idx=seeds)
            config = TrainConfig(
                sampler=args.sampler,
                devices=n,
                batch_size=batch,
                fanouts=args.fanouts,
                hidden=args.hidden,
                cache_fraction=args.cache_fraction,
                cache_refresh=2,  # one cache, drawn in the warm-up epoch
                epochs=2,
                prefetch=args.prefetch,
                seed=r,
                feature_norm="none",
            )
            start = time.perf_counter()
            result = fit(subset, config, quiet=True, evaluate_model=False).metrics
            timed = result["epochs"][1]["time_s"]
            runs[n].append(
                dict(
                    batch_s=timed / args.batches,
                    wall_s=time.perf_counter() - start,
                    split=result["time_split_s"],
                    rows_per_device=result["h2d_rows_per_batch_per_device"],
                    compilations=result["compilations"],
                    sampler_compilations=result["sampler_compilations"],
                )
            )
            print(
                f"round {r + 1}/{args.rounds} {n} device(s): {runs[n][-1]['batch_s']:.3f} s/batch"
                f" of {batch} seeds",
                file=sys.stderr,
                flush=True,
            )
    one = float(np.median([x["batch_s"] for x in runs[min(args.devices)]]))
    base = min(args.devices)
    rows = []
    for n, xs in runs.items():
        batch_s = float(np.median([x["batch_s"] for x in xs]))
        split = {k: float(np.median([x["split"].get(k, 0.0) for x in xs])) for k in xs[0]["split"]}
        # speed-up in seeds per second over the smallest device count
        speedup = (n * args.per_device_batch / batch_s) / (base * args.per_device_batch / one)
        rows.append(
            dict(
                devices=n,
                batch_size=n * args.per_device_batch,
                batch_s=batch_s,
                batches_per_s=1.0 / batch_s,
                seeds_per_s=n * args.per_device_batch / batch_s,
                speedup=speedup,
                ratio_to_linear=speedup / (n / base),
                split_per_batch=split,
                sample_per_device_s=split.get("sample", 0.0) / n,
                rows_per_device=[
                    float(np.median(v)) for v in zip(*[x["rows_per_device"] for x in xs])
                ],
                compilations=xs[-1]["compilations"],
            )
        )
    report = dict(
        environment=env,
        dataset=dataset.name,
        sampler=args.sampler,
        per_device_batch=args.per_device_batch,
        fanouts=list(args.fanouts),
        hidden=args.hidden,
        batches=args.batches,
        rounds=args.rounds,
        xla_flags=os.environ.get("XLA_FLAGS", ""),
        rows=rows,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_parallel.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        f"Data-parallel weak scaling, {dataset.name}, {args.sampler}, {args.per_device_batch} seeds"
        f" per device, fan-outs {','.join(map(str, args.fanouts))}, hidden {args.hidden}; "
        f"medians of {args.rounds} rounds of {args.batches} batches; {machine}",
        "",
        "| devices | global batch | s/batch | seeds/s | speed-up | / linear | sample | gather "
        "| h2d | step | wait | sample per device | rows per device |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        s = row["split_per_batch"]
        lines.append(
            f"| {row['devices']} | {row['batch_size']} | {row['batch_s']:.3f} | "
            f"{row['seeds_per_s']:,.0f} | {row['speedup']:.2f} | {row['ratio_to_linear']:.2f} | "
            + " | ".join(
                f"{s.get(k, 0.0):.3f}" for k in ("sample", "gather", "h2d", "step", "wait")
            )
            + f" | {row['sample_per_device_s']:.3f} | "
            + ", ".join(f"{v:,.0f}" for v in row["rows_per_device"])
            + " |"
        )
    (args.out / "bench_parallel.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
