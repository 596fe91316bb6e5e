"""The disk's read throughput, the physical limit of training on features read from disk.

Three measurements on one file (a saved dataset's ``features.npy``, or any large file), each
after its pages are dropped from the page cache (``posix_fadvise(DONTNEED)``: no root needed;
the pages of a file another process maps stay), so that every byte comes from storage:

* **sequential**: the file read front to back in 8 MiB calls (``--max-gib`` of it at most);
* **random rows, read calls**: ``pread`` of one feature row at uniformly random rows, with
  read-ahead switched off (``POSIX_FADV_RANDOM``): the device's random-read rate;
* **random rows, memory-mapped**: the same rows gathered through ``np.memmap`` in batches of
  ``--batch`` sorted row ids, as the loader gathers a batch's input rows from a file that fits
  in memory: the rows per second, and the bytes the kernel reads per row requested (its
  fault-around reads whole pages and the read-ahead window around them: the read
  amplification);
* **random rows, memory-mapped, advised random**: as the loader gathers from a file beyond
  memory: the mapping advised ``MADV_RANDOM`` (a fault reads its page only) and each batch split
  over 32 reader threads (reads in flight).

Each random phase runs for ``--seconds`` or ``--reads`` rows, whichever ends first, and reports
the bytes read from storage (``/proc/self/io``), so that a page-cache hit cannot pass as disk
speed. The report states the hardware, the file's size and the machine's memory.

    python -m experiments.bench_disk --dataset DIR --out experiments/results/disk

Writes ``disk.json`` and ``disk.md`` in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from gns_jax.data.dataset import advise_random
from gns_jax.gather import IO_READERS, read_from_disk
from gns_jax.instrument import drop_from_page_cache, environment, process_io

CHUNK = 8 << 20
READERS = IO_READERS  # the loader's reader threads for a store beyond memory


def _read_bytes() -> int:
    io = process_io()
    return 0 if io is None else io["read_bytes"]


def sequential(path: Path, max_bytes: int) -> dict:
    drop_from_page_cache(path)
    disk0, start, done = _read_bytes(), time.perf_counter(), 0
    with open(path, "rb", buffering=0) as f:
        while done < max_bytes:
            chunk = f.read(min(CHUNK, max_bytes - done))
            if not chunk:
                break
            done += len(chunk)
    seconds = time.perf_counter() - start
    return {
        "bytes": done,
        "seconds": seconds,
        "mb_per_s": done / seconds / 1e6,
        "disk_bytes": _read_bytes() - disk0,
    }


def _random_phase(read_rows, rows: np.ndarray, row_bytes: int, seconds: float, step: int) -> dict:
    disk0, start, done = _read_bytes(), time.perf_counter(), 0
    while done < rows.size and time.perf_counter() - start < seconds:
        read_rows(rows[done : done + step])
        done += min(step, rows.size - done)
    elapsed = time.perf_counter() - start
    disk = _read_bytes() - disk0
    return {
        "rows": done,
        "seconds": elapsed,
        "rows_per_s": done / elapsed,
        "mb_per_s": done * row_bytes / elapsed / 1e6,
        "disk_bytes": disk,
        "disk_bytes_per_row": disk / max(done, 1),
    }


def random_reads(path: Path, offset: int, row_bytes: int, rows: np.ndarray, seconds: float):
    drop_from_page_cache(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)

        def read_rows(ids):
            for i in ids:
                os.pread(fd, row_bytes, offset + int(i) * row_bytes)

        return _random_phase(read_rows, rows, row_bytes, seconds, 64)
    finally:
        os.close(fd)


def mapped_gathers(path: Path, rows: np.ndarray, seconds: float, batch: int) -> dict:
    drop_from_page_cache(path)
    table = np.load(path, mmap_mode="r", allow_pickle=False)
    row_bytes = table.shape[1] * table.dtype.itemsize
    sink = []

    def read_rows(ids):
        sink.append(float(np.asarray(table[np.sort(ids)]).sum()))  # the bytes are touched

    return _random_phase(read_rows, rows, row_bytes, seconds, batch)


def advised_gathers(path: Path, rows: np.ndarray, seconds: float, batch: int) -> dict:
    """As :func:`mapped_gathers`, the way the loader reads a store beyond memory: the mapping
    advised ``MADV_RANDOM`` (no read-ahead) and each batch split over the loader's reader
    threads (:func:`gns_jax.gather.read_from_disk`), one piece per thread."""
    drop_from_page_cache(path)
    table = np.load(path, mmap_mode="r", allow_pickle=False)
    advise_random(table)
    row_bytes = table.shape[1] * table.dtype.itemsize

    def read_rows(ids):
        ids = np.sort(ids)
        out = np.empty((ids.size, table.shape[1]), table.dtype)
        read_from_disk(table, ids, out, parts=READERS)

    return _random_phase(read_rows, rows, row_bytes, seconds, batch)


def measure(path: Path, *, seconds: float, reads: int, batch: int, max_gib: float, seed: int):
    table = np.load(path, mmap_mode="r", allow_pickle=False)
    if table.ndim != 2:
        raise SystemExit(f"--file {path}: a 2-d .npy array is needed, found shape {table.shape}")
    num_rows, row_bytes, offset = (
        table.shape[0],
        table.shape[1] * table.dtype.itemsize,
        table.offset,
    )
    del table
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, num_rows, size=reads)
    size = path.stat().st_size
    return {
        "file_bytes": size,
        "rows": num_rows,
        "row_bytes": row_bytes,
        "sequential": sequential(path, min(size, int(max_gib * 2**30))),
        "random_pread": random_reads(path, offset, row_bytes, rows, seconds),
        "random_mapped": mapped_gathers(
            path, rng.integers(0, num_rows, size=reads), seconds, batch
        ),
        "random_advised": advised_gathers(
            path, rng.integers(0, num_rows, size=reads), seconds, batch
        ),
        "environment": environment(),
    }


def report(result: dict) -> str:
    env = result["environment"]
    seq, rnd, mapped = result["sequential"], result["random_pread"], result["random_mapped"]
    adv = result["random_advised"]
    return "\n".join(
        [
            "# Disk read throughput",
            "",
            f"File: {result['file_bytes'] / 2**30:.2f} GiB, {result['rows']:,} rows of "
            f"{result['row_bytes']:,} bytes; machine: {env.get('cpu')} ({env.get('cores')} "
            f"cores, {env.get('memory_gib')} GiB). Pages dropped before each phase; disk bytes "
            "from /proc/self/io.",
            "",
            "| phase | MB/s | rows/s | disk bytes per row read |",
            "|---|---|---|---|",
            f"| sequential, 8 MiB reads ({seq['bytes'] / 2**30:.2f} GiB) | {seq['mb_per_s']:,.0f} "
            "| | |",
            f"| random rows, pread, no read-ahead ({rnd['rows']:,} rows) | {rnd['mb_per_s']:,.1f} "
            f"| {rnd['rows_per_s']:,.0f} | {rnd['disk_bytes_per_row']:,.0f} |",
            f"| random rows, memory-mapped batches ({mapped['rows']:,} rows) "
            f"| {mapped['mb_per_s']:,.1f} | {mapped['rows_per_s']:,.0f} "
            f"| {mapped['disk_bytes_per_row']:,.0f} |",
            f"| random rows, memory-mapped batches, MADV_RANDOM, {READERS} readers "
            f"({adv['rows']:,} rows) | {adv['mb_per_s']:,.1f} | {adv['rows_per_s']:,.0f} "
            f"| {adv['disk_bytes_per_row']:,.0f} |",
            "",
        ]
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--dataset", type=Path, help="a saved dataset folder (its features.npy)")
    where.add_argument("--file", type=Path, help="any 2-d .npy file")
    parser.add_argument("--seconds", type=float, default=20.0, help="limit of each random phase")
    parser.add_argument("--reads", type=int, default=200_000, help="rows per random phase")
    parser.add_argument("--batch", type=int, default=4096, help="rows per memory-mapped gather")
    parser.add_argument("--max-gib", type=float, default=8.0, help="of the sequential read")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("experiments/results/disk"))
    args = parser.parse_args(argv)
    path = args.file or args.dataset / "features.npy"
    if not path.is_file():
        parser.error(f"{'--file' if args.file else '--dataset'}: {path} is not a file")
    for name in ("seconds", "reads", "batch", "max_gib"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if process_io() is None or not hasattr(os, "posix_fadvise"):
        parser.error("needs Linux (/proc/self/io and posix_fadvise) to tell disk from cache")
    result = measure(
        path,
        seconds=args.seconds,
        reads=args.reads,
        batch=args.batch,
        max_gib=args.max_gib,
        seed=args.seed,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "disk.json").write_text(json.dumps(result, indent=1))
    text = report(result)
    (args.out / "disk.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
