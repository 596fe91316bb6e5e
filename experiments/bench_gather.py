"""The host row gather on its own, side by side: native, NumPy's ``take`` and a plain copy.

For each row count (default: the NS and GNS 1 % batches of ``experiments/bench_epoch.py``'s 1M-node
graph, 300,000 and 85,000 rows), a fresh set of sorted distinct random ids per repeat, drawn
from the store's rows, gathered into a 64-byte-aligned buffer by

- ``native``: :func:`gns_jax.gather.take_rows` with the native kernel (``native/gather.cc``);
- ``numpy``: the same call with ``GNS_JAX_NATIVE=0`` (NumPy's ``take`` in clip mode);
- ``copy``: :func:`gns_jax.gather.copy_rows` of as many contiguous rows (the yardstick);

the three interleaved repeat by repeat, each after a cache sweep of twice the last-level cache
(untimed), on the same threads. Prints a table and writes ``--out`` (JSON): medians in ms and
the ratios to the copy. The sort of the ids and the loader's other work are not in it
(``bench_epoch.py`` times the whole gather phase).

    python -m experiments.bench_gather --dataset DIR [--rows 300000 85000] [--repeats 15]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from gns_jax import gather, native
from gns_jax.data import load_dataset
from gns_jax.features import _aligned_empty
from gns_jax.instrument import cache_sweep_bytes, environment

SWEEP_BYTES = cache_sweep_bytes()  # twice the last-level cache (64 MiB to 1 GiB)


def measure(store: np.ndarray, rows: int, repeats: int, seed: int) -> dict:
    """Median ms of native, numpy and copy for ``rows`` rows, interleaved, from cold caches."""
    if rows > store.shape[0]:
        raise SystemExit(f"--rows {rows}: the store has only {store.shape[0]} rows")
    rng = np.random.default_rng([seed, rows])
    dtype = np.float16 if store.dtype == np.float16 else np.float32
    out = _aligned_empty((rows, store.shape[1]), np.dtype(dtype))
    source = np.ascontiguousarray(np.asarray(store[:rows], dtype=dtype))
    sweep = np.zeros(SWEEP_BYTES, np.uint8)
    features = store if store.dtype == dtype else np.asarray(store, dtype=dtype)
    times: dict[str, list[float]] = {"native": [], "numpy": [], "copy": []}

    def run(name: str, ids: np.ndarray) -> None:
        sweep[:] += 1  # evicts the store's rows, the buffer and the copy's source
        if name == "numpy":
            os.environ["GNS_JAX_NATIVE"] = "0"
        start = time.perf_counter()
        try:
            if name == "copy":
                gather.copy_rows(source, out)
            else:
                gather.take_rows(features, ids, out)
        finally:
            os.environ.pop("GNS_JAX_NATIVE", None)
        times[name].append(time.perf_counter() - start)

    for repeat in range(repeats + 1):  # the first is a warm-up, not kept
        ids = np.sort(rng.choice(store.shape[0], rows, replace=False)).astype(np.int32)
        for name in ("native", "numpy", "copy"):
            run(name, ids)
        if repeat == 0:
            times = {k: [] for k in times}
    for name in ("native", "numpy"):  # and both gave the rows (checked after the timing)
        run(name, ids)
        np.testing.assert_array_equal(out, features[ids], err_msg=f"{name} gathered wrong rows")
        times[name].pop()
    ms = {k: 1e3 * float(np.median(v)) for k, v in times.items()}
    return dict(
        rows=rows,
        mib=rows * store.shape[1] * np.dtype(dtype).itemsize / 2**20,
        ms=ms,
        native_vs_copy=ms["native"] / ms["copy"],
        numpy_vs_copy=ms["numpy"] / ms["copy"],
        numpy_vs_native=ms["numpy"] / ms["native"],
    )


def markdown(result: dict) -> str:
    hw = result["hardware"]
    lines = [
        f"Hardware: {hw.get('cpu', '?')}, {hw.get('cores', '?')} cores; store {result['dataset']} "
        f"({result['store_rows']:,} rows of {result['row_bytes']} bytes); {result['repeats']} "
        "repeats, interleaved, each from cold caches; medians in ms.",
        "",
        "| rows | MiB | native | NumPy take | plain copy | native / copy | NumPy / copy "
        "| NumPy / native |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        lines.append(
            f"| {r['rows']:,} | {r['mib']:.1f} | {r['ms']['native']:.1f} | {r['ms']['numpy']:.1f} "
            f"| {r['ms']['copy']:.1f} | {r['native_vs_copy']:.2f} | {r['numpy_vs_copy']:.2f} "
            f"| {r['numpy_vs_native']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", required=True, help="a saved folder or a dataset spec")
    parser.add_argument("--rows", type=int, nargs="+", default=[300_000, 85_000])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("experiments/results/bench_gather.json"))
    args = parser.parse_args(argv)
    if args.repeats < 1 or min(args.rows) < 1:
        parser.error("--repeats and --rows must be positive")
    if not native.available():
        raise SystemExit("bench_gather: the native extension is not built (or GNS_JAX_NATIVE=0)")
    store = load_dataset(args.dataset).features
    result = dict(
        dataset=args.dataset,
        store_rows=int(store.shape[0]),
        row_bytes=int(store.shape[1] * (2 if store.dtype == np.float16 else 4)),
        repeats=args.repeats,
        hardware=environment(),
        runs=[],
    )
    for rows in args.rows:
        result["runs"].append(measure(store, rows, args.repeats, args.seed))
        print(f"{rows:,} rows: {result['runs'][-1]['ms']}", file=sys.stderr, flush=True)
    text = markdown(result)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    args.out.with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
