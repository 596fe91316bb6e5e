"""The accelerator check: GNS at 1 % against NS on the products-scale synthetic graph, one JSON.

Run by ``experiments/device_check.sh`` (which picks the interpreter and checks what it needs);
sized to finish in under 8 minutes on one GPU. Steps, each timed:

1. the graph: ``gns-jax save --dataset synthetic:nodes=2400000,degree=52,features=100,classes=47``
   into ``--folder`` (kept: a second run with the same folder skips this), read back
   memory-mapped by the runs;
2. per configuration (NS, then GNS with a ``--fraction`` cache, default 1 %), ``gns-jax train
   --epochs 2`` on that folder in a process of its own (so that each reports its own device memory
   peak), with the command's defaults otherwise (fan-outs 15,10,5, batch 1000, hidden 256,
   prefetch 2, exact evaluation after the last epoch); after training, the process reads
   ``jax.devices()[0].memory_stats()`` (None on a CPU, where JAX keeps no such counters).

The JSON (``--out``): per configuration the epoch time (``epoch_time_s``: the median of the
epochs after the first, which compiles), host->device bytes (per batch and per epoch) and the
host->device time per batch (``time_split_s.h2d``: the buffer put and the on-device assembly,
waited for), the time split (sample, gather, h2d, step, wait), the input-wait fraction (the share of
the training loop the step waited for its input), the device memory (``memory_stats``: peak and
in-use bytes, limit), peak host RSS, test accuracy, and the whole ``gns-jax train`` JSON;
``gns_vs_ns`` ratios of epoch time, bytes and rows; ``stages_s`` and ``wall_s``, and
``within_8_minutes``.

``--tiny`` (or ``GNS_JAX_DEVICE_CHECK_TINY=1``) swaps in a 3,000-node graph and small fan-outs: the
CPU smoke run of ``tests/test_device_check.py``, with every key of the real one.

    experiments/device_check.sh --out device_check.json [--folder DIR] [--tiny]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PRODUCTS = "synthetic:nodes=2400000,degree=52,features=100,classes=47"
TINY = "synthetic:nodes=3000,degree=12,features=16,classes=4,seed=1"
TINY_OPTIONS = ["--fanouts", "5,3", "--batch-size", "64", "--hidden", "32"]
LIMIT_S = 8 * 60
#: the keys of a run's ``gns-jax train`` JSON the summary repeats (docs/results.md)
RUN_KEYS = (
    "epoch_time_s",
    "h2d_bytes_per_batch",
    "h2d_rows_per_batch",
    "input_nodes_per_batch",
    "input_wait_fraction",
    "time_split_s",
    "cache_hit_rate",
    "cache_refresh_s",
    "compilations",
    "peak_rss_gib",
    "test_accuracy",
)


def device_memory() -> dict | None:
    """``memory_stats()`` of the first JAX device (bytes), or None where it keeps none (CPU)."""
    import jax

    device = jax.devices()[0]
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - a backend without the counters
        stats = None
    if not stats:
        return None
    keys = ("peak_bytes_in_use", "bytes_in_use", "bytes_limit", "largest_alloc_size")
    return {k: int(stats[k]) for k in keys if k in stats}


def child(args) -> int:
    """One configuration: ``gns-jax train`` in this process, then the device memory."""
    from gns_jax.cli import main as cli_main
    from gns_jax.hostmem import keep_freed_memory

    keep_freed_memory()  # as the gns-jax program does
    code = cli_main(["train", *args.train, "--out", str(args.out), "--quiet"])
    if code != 0:
        return code
    import jax

    device = jax.devices()[0]
    result = json.loads(args.out.read_text())
    result["device_memory"] = device_memory()
    result["device"] = {"platform": device.platform, "kind": device.device_kind}
    args.out.write_text(json.dumps(result, indent=1))
    return 0


def run_config(name: str, train: list[str], out: Path) -> dict:
    """``gns-jax train`` plus the memory read, in a child process; its JSON."""
    command = [sys.executable, "-m", "experiments.device_check", "--child", "--out", str(out)]
    command += ["--", *train]
    print(f"device check: {name}: {' '.join(train)}", file=sys.stderr, flush=True)
    done = subprocess.run(command, check=False)
    if done.returncode != 0:
        raise SystemExit(f"device check: {name} failed (exit {done.returncode}): {' '.join(train)}")
    return json.loads(out.read_text())


def summarise(result: dict, epoch_batches: int) -> dict:
    """The figures of one run the check reports (``RUN_KEYS`` and the device memory)."""
    out = {k: result.get(k) for k in RUN_KEYS}
    out["h2d_bytes_per_epoch"] = result["h2d_bytes_per_batch"] * epoch_batches
    out["h2d_s_per_batch"] = result["time_split_s"].get("h2d")
    out["device_memory"] = result.get("device_memory")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the JSON to write")
    parser.add_argument(
        "--folder", type=Path, help="where the graph is saved (kept; default: a temporary one)"
    )
    parser.add_argument("--fraction", type=float, default=0.01, help="GNS cache fraction")
    parser.add_argument("--epochs", type=int, default=2, help="epochs per run (the first compiles)")
    parser.add_argument(
        "--tiny",
        action="store_true",
        default=os.environ.get("GNS_JAX_DEVICE_CHECK_TINY", "") not in ("", "0"),
        help="a 3,000-node graph: the CPU smoke run ($GNS_JAX_DEVICE_CHECK_TINY=1)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("train", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    if args.epochs < 2:
        parser.error("--epochs must be at least 2 (the first compiles; the others are timed)")
    if not 0 < args.fraction < 1:
        parser.error("--fraction must be in (0, 1)")
    start = time.perf_counter()
    spec = TINY if args.tiny else PRODUCTS
    options = TINY_OPTIONS if args.tiny else []
    stages = {}
    with tempfile.TemporaryDirectory(prefix="gns_jax_device_check_") as scratch:
        folder = args.folder or Path(scratch) / "graph"
        if not (folder / "meta.json").is_file():
            began = time.perf_counter()
            # in a process of its own, as the runs: this one never starts JAX (on a GPU its
            # first use would take most of the device memory from the runs)
            save = [sys.executable, "-m", "gns_jax", "save", "--dataset", spec, "--out"]
            if subprocess.run([*save, str(folder), "--quiet"], check=False).returncode != 0:
                raise SystemExit(f"device check: gns-jax save --dataset {spec} failed")
            stages["graph_save"] = time.perf_counter() - began
        meta = json.loads((folder / "meta.json").read_text())
        train_nodes = int(np.load(folder / "train_idx.npy", mmap_mode="r").shape[0])
        common = ["--dataset", str(folder), "--epochs", str(args.epochs), *options]
        configs = {
            "NS": ["--sampler", "ns"],
            f"GNS {100 * args.fraction:g}%": ["--sampler", "gns", "--cache-fraction"]
            + [str(args.fraction)],
        }
        results = {}
        for name, extra in configs.items():
            began = time.perf_counter()
            results[name] = run_config(name, common + extra, Path(scratch) / f"{extra[1]}.json")
            stages[name] = time.perf_counter() - began
    ns_name, gns_name = configs
    ns, gns = results[ns_name], results[gns_name]
    batch = ns["batch_size"]
    epoch_batches = -(-train_nodes // batch)
    wall = time.perf_counter() - start
    first = next(iter(results.values()))
    summary = {
        "dataset": spec,
        "tiny": args.tiny,
        "num_nodes": meta["num_nodes"],
        "num_edges": meta["num_edges"],
        "num_features": meta["num_features"],
        "batch_size": batch,
        "fanouts": ns["config"]["fanouts"],
        "epochs": args.epochs,
        "batches_per_epoch": epoch_batches,
        "device": first["device"],
        "runs": {name: summarise(r, epoch_batches) for name, r in results.items()},
        "gns_vs_ns": {
            "epoch_time": gns["epoch_time_s"] / ns["epoch_time_s"],
            "h2d_bytes": gns["h2d_bytes_per_batch"] / ns["h2d_bytes_per_batch"],
            "h2d_rows": gns["h2d_rows_per_batch"] / ns["h2d_rows_per_batch"],
        },
        "stages_s": stages,
        "wall_s": wall,
        "within_8_minutes": wall < LIMIT_S,
        "environment": first["environment"],
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1))
    print(
        f"device check on {first['device']['kind']}: NS epoch {ns['epoch_time_s']:.1f} s, "
        f"{gns_name} {gns['epoch_time_s']:.1f} s ({summary['gns_vs_ns']['epoch_time']:.3f} of "
        f"NS), {summary['gns_vs_ns']['h2d_bytes']:.3f} of NS's bytes; {wall:.0f} s in all",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
