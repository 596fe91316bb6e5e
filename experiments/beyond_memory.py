"""Training on a graph whose features do not fit in memory: GNS against NS, reads from disk.

The features of a saved dataset folder (``gns-jax save``) stay on disk, memory-mapped; every
batch reads its input rows from the file, through the page cache. GNS keeps a cache of nodes'
rows on the device (drawn once per epoch), so a batch reads only the rows of its input nodes
outside the cache; NS reads every input node's row. This benchmark runs one configuration of
each, one after the other on the same folder, each in its own process (its own counters and
peak memory) and each starting with the folder's files dropped from the page cache, and
reports side by side:

* epoch time (the training loop) and evaluation time (sampled, on the validation and test
  nodes: exact inference would stream the whole feature file through the model);
* rows per batch read from the file (``mapped_rows_read``), bytes per batch read from disk
  (``/proc/self/io``), and the page-cache hit rate of those rows (the fraction whose pages were
  resident just before the read, ``mincore``), for training and for evaluation;
* rows per batch moved host -> device, and peak memory: all resident pages (``VmHWM``, which
  counts mapped file pages the kernel can drop) and the process's own (``RssAnon``);
* the disk's measured sequential and random read throughput on the same file
  (:mod:`experiments.bench_disk`), the physical limit.

    gns-jax save --dataset synthetic:nodes=40000000,degree=16,features=256,classes=47,\\
        train=0.0005,val=0.00025,test=0.00025 --out DIR
    python -m experiments.beyond_memory --dataset DIR --out experiments/reports/beyond-memory

Resumable: a sampler whose JSON says ``completed`` is not run again (``--force`` reruns).
Options after ``--`` go to every ``gns-jax train`` (e.g. ``-- --fanouts 10,10,5``).
Writes ``runs/{gns,ns}.json`` and their logs, ``disk.json``, and ``beyond-memory.md`` in
``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from experiments import bench_disk
from gns_jax.instrument import drop_from_page_cache, environment, process_io

SAMPLERS = ("gns", "ns")
FILES = ("features.npy", "indices.npy", "indptr.npy")


def train_command(dataset: Path, sampler: str, args, out: Path) -> list[str]:
    cmd = [sys.executable, "-m", "gns_jax", "train", "--dataset", str(dataset)]
    cmd += ["--sampler", sampler, "--epochs", str(args.epochs), "--eval", "sampled"]
    cmd += ["--seed", str(args.seed), "--out", str(out)]
    if sampler == "gns":
        cmd += ["--cache-fraction", str(args.cache_fraction)]
    return cmd + list(args.train_args)


def run_one(dataset: Path, sampler: str, args, runs: Path) -> dict:
    """One ``gns-jax train`` of ``sampler`` in its own process, after the folder's files are
    dropped from the page cache; its results JSON with ``wall_s`` (the whole process) added."""
    out = runs / f"{sampler}.json"
    if out.is_file() and not args.force:
        done = json.loads(out.read_text())
        if done.get("status") == "completed":
            print(f"{sampler}: completed in {out}, not run again", file=sys.stderr)
            return done
    for name in FILES:
        if (dataset / name).is_file():
            drop_from_page_cache(dataset / name)
    cmd = train_command(dataset, sampler, args, out)
    print(f"{sampler}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    with open(runs / f"{sampler}.log", "w") as log:
        code = subprocess.run(cmd, stderr=log, stdout=log, check=False).returncode
    wall = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"{sampler}: gns-jax train exited with {code}; see {runs}/{sampler}.log")
    result = json.loads(out.read_text())
    result["wall_s"] = wall
    out.write_text(json.dumps(result, indent=1))
    return result


def summary(result: dict, train_nodes: int) -> dict:
    """The figures of one run that the table shows (training: the last epoch's loop; its
    evaluation: the last epoch's)."""
    last = result["epochs"][-1]
    batches = math.ceil(train_nodes / result["batch_size"])
    per_batch = lambda v: None if v is None else v / batches
    return {
        "sampler": result["sampler"],
        "epoch_time_s": last["time_s"],
        "eval_time_s": last.get("eval_time_s"),
        "wall_s": result.get("wall_s"),
        "batches": batches,
        "input_nodes_per_batch": result["input_nodes_per_batch"],
        "h2d_rows_per_batch": result["h2d_rows_per_batch"],
        "file_rows_per_batch": per_batch(last.get("mapped_rows_read")),
        "disk_bytes_per_batch": per_batch(last.get("disk_read_bytes")),
        "page_cache_hit_rate": last.get("page_cache_hit_rate"),
        "eval_file_rows": last.get("eval_mapped_rows_read"),
        "eval_disk_bytes": last.get("eval_disk_read_bytes"),
        "eval_page_cache_hit_rate": last.get("eval_page_cache_hit_rate"),
        "cache_nodes": result.get("cache_nodes"),
        "peak_rss_gib": result.get("peak_rss_gib"),
        "peak_rss_anon_gib": result.get("peak_rss_anon_gib"),
        "val_accuracy": result.get("val_accuracy"),
        "test_accuracy": result.get("test_accuracy"),
    }


def _f(value, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def report(meta: dict, disk: dict | None, rows: list[dict], files: dict) -> str:
    env = meta["environment"]
    feat = files["features.npy"]
    lines = [
        "# Training beyond memory: GNS against NS, features read from disk",
        "",
        f"Graph: {meta['dataset']['name']} ({meta['dataset']['num_nodes']:,} nodes, "
        f"{meta['dataset']['num_edges']:,} directed edges, {meta['dataset']['num_features']} "
        f"{meta['dataset'].get('feature_dtype', 'float32')} features). Features file "
        f"{feat / 2**30:.1f} GiB = {feat / 2**30 / env['memory_gib']:.2f} x this machine's "
        f"memory ({env['memory_gib']} GiB); all files {sum(files.values()) / 2**30:.1f} GiB. "
        f"Machine: {env['cpu']}, {env['cores']} cores, jax {env['jax']} ({env['backend']}).",
        "",
        f"Command per sampler: `{meta['command']}` (one epoch, sampled evaluation); each run in "
        "its own process, started with the folder's files dropped from the page cache.",
        "",
    ]
    if disk is not None:
        seq, rnd, mapped = disk["sequential"], disk["random_pread"], disk["random_mapped"]
        adv = disk["random_advised"]
        lines += [
            f"Disk (same file, page cache dropped; `bench_disk`): sequential "
            f"{seq['mb_per_s']:,.0f} MB/s; random rows by pread {rnd['rows_per_s']:,.0f} "
            f"rows/s; random rows gathered through the map in sorted batches of "
            f"{disk['batch']:,}: {mapped['rows_per_s']:,.0f} rows/s with the kernel's read-ahead "
            f"({mapped['disk_bytes_per_row']:,.0f} bytes read per row), "
            f"{adv['rows_per_s']:,.0f} rows/s advised random with "
            f"{bench_disk.READERS} readers, as the loader reads this file "
            f"({adv['disk_bytes_per_row']:,.0f} bytes per row).",
            "",
        ]
    names = [r["sampler"].upper() for r in rows]
    table = [
        ("training epoch, s", "epoch_time_s", ",.0f"),
        ("sampled evaluation, s", "eval_time_s", ",.0f"),
        ("process wall time, s", "wall_s", ",.0f"),
        ("batches", "batches", "d"),
        ("input nodes per batch", "input_nodes_per_batch", ",.0f"),
        ("rows host -> device per batch", "h2d_rows_per_batch", ",.0f"),
        ("rows read from the file per batch", "file_rows_per_batch", ",.0f"),
        ("bytes read from disk per batch", "disk_bytes_per_batch", ",.0f"),
        ("page-cache hit rate, training", "page_cache_hit_rate", ".3f"),
        ("rows read from the file, evaluation", "eval_file_rows", ",.0f"),
        ("bytes read from disk, evaluation", "eval_disk_bytes", ",.0f"),
        ("page-cache hit rate, evaluation", "eval_page_cache_hit_rate", ".3f"),
        ("peak resident memory (VmHWM), GiB", "peak_rss_gib", ".1f"),
        ("peak own memory (RssAnon), GiB", "peak_rss_anon_gib", ".1f"),
        ("validation accuracy", "val_accuracy", ".4f"),
        ("test accuracy", "test_accuracy", ".4f"),
    ]
    ratio = len(rows) == 2 and rows[1]["sampler"] == "ns"
    lines += ["| | " + " | ".join(names) + (" | GNS / NS |" if ratio else " |")]
    lines += ["|---|" + "---|" * (len(rows) + int(ratio))]
    for label, key, fmt in table:
        cells = [_f(r[key], fmt) for r in rows]
        if ratio:
            a, b = rows[0][key], rows[1][key]
            numeric = key not in ("batches", "val_accuracy", "test_accuracy")
            cells.append(f"{a / b:.3f}" if numeric and a is not None and b else "")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Rows read from the file per batch: GNS's epoch includes its cache's draw "
        f"({_f(rows[0].get('cache_nodes'), ',.0f')} rows, read once) spread over the batches.",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, required=True, help="a saved dataset folder")
    parser.add_argument("--out", type=Path, default=Path("experiments/results/beyond-memory"))
    parser.add_argument("--samplers", nargs="+", choices=SAMPLERS, default=list(SAMPLERS))
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--cache-fraction", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--disk-seconds", type=float, default=20.0, help="per random phase")
    parser.add_argument("--no-disk", action="store_true", help="skip the disk measurement")
    parser.add_argument("--force", action="store_true", help="rerun completed samplers")
    args = parser.parse_args(argv)
    args.train_args = extra
    meta_path = args.dataset / "meta.json"
    if not meta_path.is_file() or not (args.dataset / "features.npy").is_file():
        parser.error(f"--dataset {args.dataset}: not a saved dataset folder (gns-jax save)")
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")
    if not 0 < args.cache_fraction <= 1:
        parser.error("--cache-fraction must be in (0, 1]")
    if process_io() is None or not hasattr(os, "posix_fadvise"):
        parser.error("needs Linux (/proc/self/io, posix_fadvise) to tell disk from page cache")
    dataset_meta = json.loads(meta_path.read_text())
    train_nodes = int(np.load(args.dataset / "train_idx.npy", mmap_mode="r").shape[0])
    runs = args.out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    files = {n: (args.dataset / n).stat().st_size for n in FILES if (args.dataset / n).is_file()}
    disk = None
    disk_path = args.out / "disk.json"
    if not args.no_disk:
        if disk_path.is_file() and not args.force:
            disk = json.loads(disk_path.read_text())
        else:
            print("disk: measuring read throughput on features.npy", file=sys.stderr, flush=True)
            disk = bench_disk.measure(
                args.dataset / "features.npy",
                seconds=args.disk_seconds,
                reads=200_000,
                batch=4096,
                max_gib=4.0,
                seed=args.seed,
            )
            disk["batch"] = 4096
            disk_path.write_text(json.dumps(disk, indent=1))
    results = [run_one(args.dataset, s, args, runs) for s in args.samplers]
    rows = [summary(r, train_nodes) for r in results]
    shown = train_command(Path("DIR"), "SAMPLER", args, Path("runs/SAMPLER.json"))
    meta = {
        "dataset": dataset_meta,
        "environment": environment(),
        "command": " ".join(["gns-jax", *shown[3:]]),
    }
    text = report(meta, disk, rows, files)
    (args.out / "beyond-memory.md").write_text(text)
    (args.out / "beyond-memory.json").write_text(
        json.dumps({"meta": meta, "files": files, "disk": disk, "rows": rows}, indent=1)
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
