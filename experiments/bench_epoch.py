"""Epoch time, data movement and memory: GNS against node-wise sampling (NS), side by side.

One graph, one process, the same model, fan-outs, batch size and batches (``--ladies 512 5000``
adds LADIES with those nodes per layer). Each round trains every
configuration for one warm-up epoch (compilation; not timed) and one timed epoch of ``--batches``
batches, alternating between configurations, so that drifts in the machine's speed hit all of
them alike; the report gives medians over rounds and the ratio of each to NS. GNS draws its cache
once, in the warm-up epoch; the estimate of a full epoch adds one refresh (its measured time) to
the per-batch time scaled to the whole training set. Per configuration: seconds per batch, the
time split per batch (sample, gather, h2d, step, wait), rows and bytes moved host->device per
batch, the peak resident memory of the run, and compilations. Evaluation is off (it is not part
of an epoch's cost). After each run, a plain copy of the bytes its gather moved per batch
(``np.copyto`` between preallocated contiguous buffers, split over the gather's threads, from
cold caches; median of 5) is timed, and ``gather_vs_copy`` holds the gather phase against it
(median over rounds); with ``--prefetch`` above 0 the gather runs beside the step, so
``--prefetch 0`` gives the gather's own pace.

With ``--pyg`` (in the environment ``make peers`` builds: CPU PyTorch and torch_geometric with
torch-sparse) it also times, on the same graph: PyG's ``NeighborLoader`` with the same fan-outs
and batch size (batches per second, feature slicing included) against our NS sampler plus its
feature gather; and a PyG ``GraphSAGE`` training epoch of the same size against ours.

With ``--dgl`` it also times DGL 2.1 on the same saved folder (a ``--dataset`` that is not one is
saved to a temporary folder first), fan-outs, batch size and seed batches, through
``experiments/dgl_side.py`` run by ``.venv-dgl/bin/python`` (``make peers``; DGL needs torch < 2.3
and NumPy 1, so it has a venv of its own and never imports gns_jax), with torch and DGL on as many
threads as JAX has cores, in ``--rounds`` interleaved rounds before our training rounds: each
round one DGL run, then our input side in line, with the 1-minute load average at the round's
start and end. DGL's input side is its ``DataLoader`` as DGL's examples use it
(``NeighborSampler(..., prefetch_node_feats=["feat"], prefetch_labels=["label"])``,
``num_workers=0``, the seed batches in order), per batch from asking its iterator for the batch to
having its input features and labels; also reported, its ``sample_blocks`` and ``index_select``
in line, and a training batch of a GraphSAGE of ``dgl.nn.SAGEConv`` layers, one a fan-out. Ours
(:func:`input_side_inline`): NS's and the first GNS's sample, gather and h2d per batch (and the
whole batch, from asking the loader for it to having its input and labels: ``loop``) over the
second epoch of a loader without a prefetch thread or a train step, each configuration twice,
with its FeatureLoader's input built in place (the default) and with ``in_place = False`` (the
device assembly: before and after for h2d). The report gives each round (with its load averages)
and the medians over the rounds, with our batches per second (sample + gather + h2d) against
DGL's DataLoader's (ratios of the medians, and per round; > 1: gns-jax faster), and the training
batch against DGL's. ``--input-only`` (with ``--dgl``) leaves out the training comparison (ours
and DGL's): the input sides alone, in a few minutes.

    python -m experiments.bench_epoch --dataset PATH_OR_SPEC --batches 20 --rounds 3 \\
        --out experiments/results/bench_epoch

Writes ``bench_epoch.json`` and ``bench_epoch.md`` in ``--out``; prints the hardware.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from gns_jax.data import load_dataset
from gns_jax.data.ondisk import save_dataset
from gns_jax.factories import make_loader, make_sampler, prepare_features
from gns_jax.features import FeatureLoader, _aligned_empty
from gns_jax.gather import copy_rows
from gns_jax.hostmem import keep_freed_memory
from gns_jax.instrument import (
    TransferMeter,
    cache_sweep_bytes,
    environment,
    peak_rss_gib,
    reset_peak_rss,
)
from gns_jax.sampling import NodeWiseSampler
from gns_jax.sampling.budget import CALIBRATION_BATCHES, CALIBRATION_MARGIN, LayerSizes
from gns_jax.train import TrainConfig, fit


def configurations(args) -> dict[str, TrainConfig]:
    base = TrainConfig(
        batch_size=args.batch_size,
        fanouts=args.fanouts,
        hidden=args.hidden,
        epochs=2,
        cache_refresh=2,  # one cache, drawn in the warm-up epoch; its cost is added per epoch
        prefetch=args.prefetch,
        feature_norm="none",
    )
    configs = {}
    for budget in args.budgets:
        tag = "" if len(args.budgets) == 1 else f" [{budget}]"
        b = dataclasses.replace(base, budget=budget)
        configs[f"NS{tag}"] = dataclasses.replace(b, sampler="ns")
        for fraction in args.fractions:
            configs[f"GNS {100 * fraction:g}%{tag}"] = dataclasses.replace(
                b, sampler="gns", cache_fraction=fraction
            )
            if args.cache_first:
                configs[f"GNS {100 * fraction:g}% cache-first{tag}"] = dataclasses.replace(
                    b, sampler="gns", cache_fraction=fraction, cache_first=True
                )
        for nodes in getattr(args, "ladies", []):
            configs[f"LADIES ({nodes}){tag}"] = dataclasses.replace(
                b, sampler="ladies", ladies_nodes=nodes
            )
    return configs


def timed_subset(dataset, args):
    """The dataset with ``--batches`` x ``--batch-size`` training nodes: one timed epoch."""
    rng = np.random.default_rng([args.seed, 11])
    need = args.batches * args.batch_size
    if need > dataset.train_idx.size:
        raise SystemExit(
            f"--batches {args.batches} x --batch-size {args.batch_size} = {need} seeds, but the "
            f"training split has {dataset.train_idx.size}"
        )
    return dataclasses.replace(
        dataset, train_idx=np.sort(rng.choice(dataset.train_idx, need, replace=False))
    )


COPY_REPEATS = 5
CACHE_SWEEP_BYTES = cache_sweep_bytes()  # twice the last-level cache (64 MiB to 1 GiB)


def row_bytes(features: np.ndarray) -> tuple[int, np.dtype]:
    """Columns and dtype of a gathered row as the loader's host buffer holds it (float16 when
    the store is, float32 otherwise: :class:`gns_jax.features.FeatureLoader`)."""
    return features.shape[1], np.dtype(np.float16 if features.dtype == np.float16 else np.float32)


def plain_copy_s(rows: float, width: int, dtype: np.dtype, repeats: int = COPY_REPEATS) -> float:
    """Seconds for a plain copy of the bytes of ``rows`` gathered rows: ``np.copyto`` between two
    preallocated, already written, 64-byte aligned contiguous ``[rows, width]`` buffers, split
    over the gather's threads (:func:`gns_jax.gather.copy_rows`); one warm-up, then the median
    of ``repeats``, each from cold caches (twice the last-level cache is written first,
    untimed: :func:`gns_jax.instrument.cache_sweep_bytes`): the gather's rows come from memory,
    not the cache, and a copy of a batch smaller than the last-level cache would otherwise be
    read from it. The gather phase is held against it (``gather_vs_copy``)."""
    n = max(int(round(rows)), 1)
    source = _aligned_empty((n, width), dtype)
    target = _aligned_empty((n, width), dtype)
    source.fill(1)
    target.fill(0)
    sweep = np.zeros(CACHE_SWEEP_BYTES, np.uint8)
    copy_rows(source, target)
    times = []
    for _ in range(repeats):
        sweep += 1  # evicts source and target from the caches
        start = time.perf_counter()
        copy_rows(source, target)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def bench_ours(dataset, args) -> dict:
    subset = timed_subset(dataset, args)
    epoch_batches = -(-dataset.train_idx.size // args.batch_size)
    configs = configurations(args)
    runs = {name: [] for name in configs}
    for r in range(args.rounds):
        for name, config in configs.items():
            reset_peak_rss()
            start = time.perf_counter()
            result = fit(
                subset, dataclasses.replace(config, seed=r), quiet=True, evaluate_model=False
            ).metrics
            wall = time.perf_counter() - start
            # The timed epoch has no cache refresh (cache_refresh=2); an epoch estimate adds one.
            timed = result["epochs"][1]["time_s"]
            # A plain copy of the bytes a batch's gather moved, right after this run (so that
            # it meets the machine's state of the moment, as the run did).
            copy_s = plain_copy_s(result["h2d_rows_per_batch"], *row_bytes(dataset.features))
            runs[name].append(
                dict(
                    batch_s=timed / args.batches,
                    wall_s=wall,
                    peak_rss_gib=peak_rss_gib(),
                    h2d_rows=result["h2d_rows_per_batch"],
                    h2d_bytes=result["h2d_bytes_per_batch"],
                    input_nodes=result["input_nodes_per_batch"],
                    compilations=result["compilations"],
                    split=result["time_split_s"],
                    wait=result["input_wait_fraction"],
                    cache_refresh_s=result["cache_refresh_s"],
                    input_slots=result["budget"]["input_slots"],
                    growths=result["budget"]["growths"],
                    copy_s=copy_s,
                )
            )
            print(
                f"round {r + 1}/{args.rounds} {name:>24}: {runs[name][-1]['batch_s']:.3f} s/batch, "
                f"{result['h2d_rows_per_batch']:,.0f} rows/batch, wait "
                f"{result['input_wait_fraction']:.2f}, gather "
                f"{1e3 * result['time_split_s'].get('gather', 0):.1f} ms against a plain copy "
                f"{1e3 * copy_s:.1f} ms, peak {runs[name][-1]['peak_rss_gib']:.1f} GiB",
                file=sys.stderr,
                flush=True,
            )
    rows = []
    reference = next(name for name in runs if name.startswith("NS"))
    ns_batch = np.median([x["batch_s"] for x in runs[reference]])
    ns_rows = np.median([x["h2d_rows"] for x in runs[reference]])
    for name, xs in runs.items():
        batch_s = float(np.median([x["batch_s"] for x in xs]))
        split_keys = sorted({k for x in xs for k in x["split"]})
        rows.append(
            dict(
                config=name,
                batch_s=batch_s,
                refresh_s=float(np.median([x["cache_refresh_s"] for x in xs])),
                epoch_s=batch_s * epoch_batches
                + float(np.median([x["cache_refresh_s"] for x in xs])),
                ratio_vs_ns=batch_s / ns_batch,
                h2d_rows=float(np.median([x["h2d_rows"] for x in xs])),
                rows_vs_ns=float(np.median([x["h2d_rows"] for x in xs]) / ns_rows),
                h2d_mib=float(np.median([x["h2d_bytes"] for x in xs]) / 2**20),
                input_nodes=float(np.median([x["input_nodes"] for x in xs])),
                input_slots=int(max(x["input_slots"] for x in xs)),
                growths=int(max(x["growths"] for x in xs)),
                peak_rss_gib=float(max(x["peak_rss_gib"] for x in xs)),
                compilations=int(max(x["compilations"] for x in xs)),
                wait=float(np.median([x["wait"] for x in xs])),
                split={
                    k: float(np.median([x["split"].get(k, 0.0) for x in xs])) for k in split_keys
                },
                copy_ms=1e3 * float(np.median([x["copy_s"] for x in xs])),
                # per round (each run against the copy measured right after it), then the median
                gather_vs_copy=float(
                    np.median([x["split"].get("gather", 0.0) / x["copy_s"] for x in xs])
                ),
            )
        )
    ns_epoch = next(r["epoch_s"] for r in rows if r["config"] == reference)
    for r in rows:
        r["epoch_vs_ns"] = r["epoch_s"] / ns_epoch
    return {"rows": rows, "epoch_batches": epoch_batches, "runs": runs, "reference": reference}


def ns_sampling_rate(dataset, args, seeds_list) -> float:
    """Our NS sampler plus its feature gather, in line: batches per second.

    The budget is calibrated as ``fit`` calibrates it (8 batches sampled under the worst case,
    20 % head-room); every timed batch reads its overflow flag, as training does.
    """
    worst = NodeWiseSampler(dataset.graph, args.fanouts, args.batch_size)
    sizes = LayerSizes()
    for t, seeds in enumerate(seeds_list[:CALIBRATION_BATCHES]):
        sizes.observe(worst.sample(jax.random.key(1000 + t), worst.pad_seeds(seeds)))
    sampler = worst.with_budget(sizes.budget(worst.budget, CALIBRATION_MARGIN))
    loader = FeatureLoader(dataset.features, TransferMeter())
    for t, seeds in enumerate(seeds_list[:2]):  # compile and warm up
        batch = sampler.sample(jax.random.key(t), sampler.pad_seeds(seeds))
        jax.block_until_ready(loader.load(batch.input_nodes)[0])
    overflows = 0
    start = time.perf_counter()
    for t, seeds in enumerate(seeds_list):
        batch = sampler.sample(jax.random.key(100 + t), sampler.pad_seeds(seeds))
        overflows += int(np.asarray(batch.overflow).any())
        jax.block_until_ready(loader.load(batch.input_nodes)[0])
    rate = len(seeds_list) / (time.perf_counter() - start)
    if overflows:
        print(f"note: {overflows} batches overflowed the calibrated budget", file=sys.stderr)
    return rate


def bench_pyg(dataset, args, ours: dict) -> dict:
    """PyG NeighborLoader and a PyG GraphSAGE epoch on the same graph (needs `make peers`)."""
    import torch
    import torch_geometric
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(args.seed)
    senders, receivers = dataset.graph.edges()
    data = Data(
        x=torch.from_numpy(np.asarray(dataset.features, np.float32)),
        y=torch.from_numpy(np.maximum(dataset.labels, 0).astype(np.int64)),
        edge_index=torch.from_numpy(np.stack([senders, receivers]).astype(np.int64)),
        num_nodes=dataset.num_nodes,
    )
    rng = np.random.default_rng([args.seed, 12])
    seeds = rng.choice(dataset.train_idx, args.batches * args.batch_size, replace=False)
    seeds_list = [
        seeds[i * args.batch_size : (i + 1) * args.batch_size] for i in range(args.batches)
    ]
    loader = NeighborLoader(
        data,
        num_neighbors=list(args.fanouts),  # PyG lists hops from the seeds outwards, as we do
        batch_size=args.batch_size,
        input_nodes=torch.from_numpy(seeds.astype(np.int64)),
        shuffle=False,
    )
    it = iter(loader)
    next(it)  # warm-up (builds the CSC once)
    start = time.perf_counter()
    count = 1 + sum(1 for _ in it)
    pyg_rate = (count - 1) / (time.perf_counter() - start)
    our_rate = ns_sampling_rate(dataset, args, seeds_list)

    model = GraphSAGE(
        dataset.num_features,
        args.hidden,
        num_layers=len(args.fanouts),
        out_channels=dataset.num_classes,
    )
    opt = torch.optim.Adam(model.parameters(), lr=0.003)
    times = []
    for _ in range(2):  # a warm-up epoch, then the timed one
        start = time.perf_counter()
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[: batch.batch_size]
            loss = torch.nn.functional.cross_entropy(out, batch.y[: batch.batch_size])
            loss.backward()
            opt.step()
        times.append(time.perf_counter() - start)
    pyg_batch = times[-1] / args.batches
    gns = [r for r in ours["rows"] if r["config"].startswith("GNS")]
    ns = next(r for r in ours["rows"] if r["config"].startswith("NS"))
    return dict(
        torch=torch.__version__,
        torch_geometric=torch_geometric.__version__,
        threads=torch.get_num_threads(),
        pyg_loader_batches_per_s=pyg_rate,
        our_ns_sampling_batches_per_s=our_rate,
        sampling_speedup=our_rate / pyg_rate,
        pyg_train_batch_s=pyg_batch,
        ns_train_speedup=pyg_batch / ns["batch_s"],
        gns_train_speedup={r["config"]: pyg_batch / r["batch_s"] for r in gns},
    )


DGL_PYTHON = Path(__file__).resolve().parents[1] / ".venv-dgl" / "bin" / "python"
DGL_SIDE = Path(__file__).resolve().with_name("dgl_side.py")
INPUT_PHASES = ("sample", "gather", "h2d")


def threads() -> int:
    """The cores this process may run on: what JAX's CPU backend and our gathers use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def check_dgl_python(args) -> None:
    if not args.dgl_python.is_file():
        raise SystemExit(
            f"--dgl: {args.dgl_python} not found; run `make peers` (it builds .venv-dgl with DGL "
            "2.1.0 and torch 2.1.2), or point --dgl-python at such an interpreter"
        )


def dgl_folder(dataset, args, scratch: Path) -> Path:
    """The saved folder DGL reads: ``--dataset`` when it is one, else a copy in ``scratch``."""
    given = Path(args.dataset)
    if given.is_dir() and (given / "meta.json").is_file():
        return given
    folder = scratch / "dataset"
    start = time.perf_counter()
    save_dataset(dataset, folder)
    print(
        f"--dgl: saved {dataset.name} to {folder} in {time.perf_counter() - start:.1f}s",
        file=sys.stderr,
    )
    return folder


def inline_config(args, name: str) -> TrainConfig:
    """The training configuration ``name`` (NS or GNS), in line (no prefetch thread), seed 0."""
    config = configurations(args)[name]
    return dataclasses.replace(config, prefetch=0, seed=0)


def dgl_seeds(subset, args) -> np.ndarray:
    """The seed batches of the timed epoch (the second) of our in-line loaders: [batches, B]."""
    name = next(iter(configurations(args)))
    config = inline_config(args, name)
    loader = make_loader(subset, config, make_sampler(subset, config), subset.features)
    order = loader.order(1)
    return order[: args.batches * args.batch_size].reshape(args.batches, args.batch_size)


def _inline_pass(subset, args, name: str, in_place: bool) -> dict:
    """One loader of configuration ``name`` (``in_place``: its FeatureLoader's attribute), run
    for two epochs (calibration, GNS's cache, every compilation), then its second epoch again,
    timed: per batch, the mean of the phases ``sample``, ``gather`` and ``h2d`` (the loader's
    stopwatch) and the wall time from asking the iterator for the batch to having its input and
    labels on the device (``loop_s``, ``loop_median_s``)."""
    config = inline_config(args, name)
    loader = make_loader(
        subset,
        config,
        make_sampler(subset, config),
        prepare_features(subset, config),
        TransferMeter(),
    )
    loader.feature_loader.in_place = in_place
    for _ in loader.batches(0, 2):  # calibrates, draws the cache, compiles
        pass
    inputs = moved = 0
    loop = []
    start = time.perf_counter()
    for batch in loader.batches(1, 2):  # the second epoch again: its shapes are compiled
        jax.block_until_ready(batch.inputs)
        loop.append(time.perf_counter() - start)
        inputs += batch.num_inputs
        moved += batch.rows_moved
        start = time.perf_counter()
    seconds = loader.watch.seconds
    batches = max(loader.timed_batches, 1)
    return dict(
        split={k: seconds.get(k, 0.0) / batches for k in INPUT_PHASES},
        input_nodes=inputs / batches,
        rows_moved=moved / batches,
        loop_s=float(np.mean(loop)),
        loop_median_s=float(np.median(loop)),
    )


def input_side_inline(subset, args, flip: bool = False) -> dict:
    """Our input side in line, as DGL's is timed: per configuration (NS and the first GNS),
    seconds per batch of ``sample``, ``gather`` and ``h2d`` over the second epoch of a loader
    without a prefetch thread or a train step. Two epochs first calibrate the budget, draw GNS's
    cache and compile every shape; the second epoch (the seed batches DGL gets) is then run
    again and timed, so that no compilation (a new row bucket in the gather) is timed.

    Each configuration runs twice, in two loaders of the same seed (the same batches, cache and
    calibration): with the FeatureLoader's default ``in_place`` (on JAX's CPU backend the input
    is written once on the host into a buffer the device array uses without a copy) and with
    ``in_place = False`` (``old``: rows gathered into a reused buffer, put, then assembled on
    the device by a jitted gather), the default first unless ``flip``. A plain copy of the
    default run's rows (:func:`plain_copy_s`) is timed right after it."""
    names = list(configurations(args))
    chosen = [names[0]] + [n for n in names if n.startswith("GNS")][:1]
    out = {}
    for name in chosen:
        runs, copy_s = {}, 0.0
        for in_place in (False, True) if flip else (True, False):
            runs[in_place] = _inline_pass(subset, args, name, in_place)
            if in_place:  # the plain copy right after the default run
                copy_s = plain_copy_s(runs[True]["rows_moved"], *row_bytes(subset.features))
        out[name] = dict(
            runs[True],
            copy_s=copy_s,
            gather_vs_copy=runs[True]["split"]["gather"] / copy_s,
            old=runs[False],
        )
        for label, run in (("in place", runs[True]), ("device assembly", runs[False])):
            print(
                f"in line {name:>10} ({label}): "
                + ", ".join(f"{k} {1e3 * v:.1f} ms" for k, v in run["split"].items())
                + f"; loop {1e3 * run['loop_s']:.1f} ms"
                + (f"; plain copy {1e3 * copy_s:.1f} ms" if run is runs[True] else ""),
                file=sys.stderr,
                flush=True,
            )
    return out


def run_dgl(folder: Path, seeds_file: Path, args, train: bool = True) -> dict:
    """One run of experiments/dgl_side.py in .venv-dgl (``train``: with its GraphSAGE batches,
    else ``--no-train``); its JSON."""
    n = threads()
    env = dict(os.environ, DGLBACKEND="pytorch", OMP_NUM_THREADS=str(n))
    env.pop("PYTHONPATH", None)  # nothing of this venv's
    command = [
        str(args.dgl_python),
        str(DGL_SIDE),
        "--dataset",
        str(folder),
        "--seeds",
        str(seeds_file),
        "--fanouts",
        ",".join(map(str, args.fanouts)),
        "--hidden",
        str(args.hidden),
        "--threads",
        str(n),
        "--seed",
        str(args.seed),
    ] + ([] if train else ["--no-train"])
    start = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    except OSError as e:
        raise SystemExit(f"--dgl: cannot run {args.dgl_python} ({e}); run `make peers`") from None
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise SystemExit(
            f"--dgl: {DGL_SIDE.name} failed (exit {done.returncode}) under {args.dgl_python}; "
            f"is .venv-dgl complete? run `make peers`. Its stderr ended:\n{tail}"
        )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_s"] = time.perf_counter() - start
    if not result.get("loader_same_seeds", True):
        print("note: DGL's DataLoader did not yield the seed batches in order", file=sys.stderr)
    print(
        f"DGL {result['dgl']}: DataLoader {result['loader_ms']:.1f} ms a batch (median "
        f"{result['loader_median_ms']:.1f}), {result['loader_batches_per_s']:.2f} batches/s; "
        f"in line: sample {result['sample_ms']:.1f} ms, gather {result['gather_ms']:.1f} ms"
        + (
            f"; training batch {result['train_batch_s']:.3f} s"
            if result.get("train_batch_s") is not None
            else ""
        ),
        file=sys.stderr,
        flush=True,
    )
    return result


def dgl_rounds(subset, dataset, args, scratch: Path) -> list[dict]:
    """``--rounds`` interleaved rounds: one DGL run, then our in-line input side; each round
    with the 1-minute load average at its start and its end."""
    folder = dgl_folder(dataset, args, scratch)
    seeds_file = scratch / "seeds.npy"
    np.save(seeds_file, dgl_seeds(subset, args).astype(np.int64))
    rounds = []
    for r in range(args.rounds):
        load_start = os.getloadavg()[0]
        dgl = run_dgl(folder, seeds_file, args, train=not args.input_only)
        ours = input_side_inline(subset, args, flip=bool(r % 2))
        load_end = os.getloadavg()[0]
        print(
            f"round {r + 1}/{args.rounds}: load {load_start:.2f} -> {load_end:.2f}",
            file=sys.stderr,
            flush=True,
        )
        rounds.append(dict(round=r, load_start=load_start, load_end=load_end, dgl=dgl, ours=ours))
    return rounds


def dgl_summary(rounds: list[dict], ours: dict | None) -> dict:
    """DGL's runs and our in-line input sides, round by round and as medians over the rounds,
    with the ratios (> 1: gns-jax is faster): our batches per second of sample + gather + h2d
    (with the input in place, and ``old_``: with the device assembly) against DGL's
    DataLoader's (ratios of the medians; ``input_ratios``: per round). With ``ours`` (the
    training comparison of :func:`bench_ours`), also the training batch against DGL's."""

    def med(xs):
        return float(np.median(xs))

    dgl_runs = [r["dgl"] for r in rounds]
    inline = [r["ours"] for r in rounds]
    trained = all(r.get("train_batch_s") is not None for r in dgl_runs)
    dgl = {
        k: med([r[k] for r in dgl_runs])
        for k in (
            "loader_ms",
            "loader_median_ms",
            "loader_batches_per_s",
            "loader_input_nodes",
            "sample_ms",
            "gather_ms",
            "input_ms",
            "input_batches_per_s",
            "input_nodes",
        )
    }
    dgl["train_batch_s"] = med([r["train_batch_s"] for r in dgl_runs]) if trained else None
    dgl["train_step_ms"] = med([r["train_step_ms"] for r in dgl_runs]) if trained else None

    def side(run):  # one configuration's figures in one round
        input_s = sum(run["split"][k] for k in INPUT_PHASES)
        return dict(
            inline_ms={k: 1e3 * run["split"][k] for k in INPUT_PHASES},
            input_ms=1e3 * input_s,
            input_batches_per_s=1 / input_s,
            loop_ms=1e3 * run["loop_s"],
        )

    per_round = []
    for r in rounds:
        dgl_rate = r["dgl"]["loader_batches_per_s"]
        figures = {}
        for name, run in r["ours"].items():
            new, old = side(run), side(run["old"])
            figures[name] = dict(
                input_batches_per_s=new["input_batches_per_s"],
                old_input_batches_per_s=old["input_batches_per_s"],
                input_ratio=new["input_batches_per_s"] / dgl_rate,
                old_input_ratio=old["input_batches_per_s"] / dgl_rate,
                h2d_ms=new["inline_ms"]["h2d"],
                old_h2d_ms=old["inline_ms"]["h2d"],
            )
        per_round.append(
            dict(
                round=r["round"],
                load_start=r["load_start"],
                load_end=r["load_end"],
                dgl_loader_ms=r["dgl"]["loader_ms"],
                dgl_loader_median_ms=r["dgl"]["loader_median_ms"],
                dgl_loader_batches_per_s=dgl_rate,
                ours=figures,
            )
        )

    rows = {} if ours is None else {r["config"]: r for r in ours["rows"]}
    configs = {}
    for name in inline[0]:
        new = [side(run[name]) for run in inline]
        old = [side(run[name]["old"]) for run in inline]
        c = {}
        for prefix, xs in (("", new), ("old_", old)):
            c[f"{prefix}inline_ms"] = {
                k: med([x["inline_ms"][k] for x in xs]) for k in INPUT_PHASES
            }
            c[f"{prefix}input_ms"] = med([x["input_ms"] for x in xs])
            c[f"{prefix}input_batches_per_s"] = med([x["input_batches_per_s"] for x in xs])
            c[f"{prefix}loop_ms"] = med([x["loop_ms"] for x in xs])
            c[f"{prefix}input_ratio"] = (
                c[f"{prefix}input_batches_per_s"] / dgl["loader_batches_per_s"]
            )
            c[f"{prefix}input_ratios"] = [
                p["ours"][name][f"{prefix}input_ratio"] for p in per_round
            ]
        c.update(
            input_ratio_vs_inline=c["input_batches_per_s"] / dgl["input_batches_per_s"],
            input_nodes=med([run[name]["input_nodes"] for run in inline]),
            rows_moved=med([run[name]["rows_moved"] for run in inline]),
            copy_ms=1e3 * med([run[name]["copy_s"] for run in inline]),
            gather_vs_copy=med([run[name]["gather_vs_copy"] for run in inline]),
        )
        if name in rows:
            train = rows[name]
            c.update(
                training_split_ms={k: 1e3 * v for k, v in train["split"].items()},
                train_batch_s=train["batch_s"],
                train_ratio=(dgl["train_batch_s"] / train["batch_s"]) if trained else None,
            )
        configs[name] = c
    first = dgl_runs[0]
    return dict(
        dgl=first["dgl"],
        torch=first["torch"],
        numpy=first["numpy"],
        threads=first["threads"],
        fanouts_dgl=first["fanouts_dgl"],
        trained=trained and ours is not None,
        runs=dgl_runs,
        inline_runs=inline,
        rounds=per_round,
        median=dgl,
        ours=configs,
    )


def dgl_markdown(d: dict) -> list[str]:
    if "median" not in d:  # a run of before the interleaved rounds (reports/bench-dgl/)
        return dgl_markdown_means(d)
    m = d["median"]
    names = list(d["ours"])
    lines = [
        "",
        f"DGL {d['dgl']} (torch {d['torch']}, NumPy {d['numpy']}, {d['threads']} threads) "
        f"against gns-jax, input side, in {len(d['rounds'])} interleaved rounds: each round one "
        f"DGL run, then our loaders in line. DGL: `NeighborSampler({d['fanouts_dgl']}, "
        "prefetch_node_feats=['feat'], prefetch_labels=['label'])` in "
        "`dgl.dataloading.DataLoader(..., shuffle=False, num_workers=0)` over the same seed "
        "batches, as DGL's examples run it, timed from asking its iterator for a batch to having "
        "its input features and labels (its rows stay on the host); DGL in line: its "
        "`sample_blocks` and `index_select`. gns-jax: sample + gather + h2d (phase times, no "
        "train step running), h2d after (the input written in place on the host, used by the "
        "device without a copy) and before (`in_place=False`: put, then assembled on the "
        "device by a jitted gather); loop: the whole batch from asking for it to having it. "
        "Load: the 1-minute load average at the round's start and end. Batches/s from the mean "
        "ms per batch; ratios > 1: gns-jax faster.",
        "",
        "| round | load start | load end | DGL loader batches/s "
        + "".join(f"| {n} batches/s after / before | {n} vs DGL after / before " for n in names)
        + "|",
        "|---|---|---|---" + "|---|---" * len(names) + "|",
    ]
    for r in d["rounds"]:
        lines.append(
            f"| {r['round'] + 1} | {r['load_start']:.2f} | {r['load_end']:.2f} "
            f"| {r['dgl_loader_batches_per_s']:.2f} "
            + "".join(
                f"| {o['input_batches_per_s']:.2f} / {o['old_input_batches_per_s']:.2f} "
                f"| {o['input_ratio']:.2f} / {o['old_input_ratio']:.2f} "
                for o in (r["ours"][n] for n in names)
            )
            + "|"
        )
    lines += [
        "",
        "Medians over the rounds (ratios: of the medians); ms per batch.",
        "",
        "| side | input nodes | sample ms | gather ms | h2d ms | input ms | loop ms | batches/s "
        "| vs DGL | h2d ms before | input ms before | batches/s before | vs DGL before |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        f"| DGL DataLoader | {m['loader_input_nodes']:,.0f} | - | - | - | - "
        f"| {m['loader_ms']:.1f} (median {m['loader_median_ms']:.1f}) "
        f"| {m['loader_batches_per_s']:.2f} | 1.00 | - | - | - | - |",
        f"| DGL in line | {m['input_nodes']:,.0f} | {m['sample_ms']:.1f} | {m['gather_ms']:.1f} "
        f"| - | {m['input_ms']:.1f} | - | {m['input_batches_per_s']:.2f} "
        f"| {m['input_batches_per_s'] / m['loader_batches_per_s']:.2f} | - | - | - | - |",
    ]
    for name, c in d["ours"].items():
        i, o = c["inline_ms"], c["old_inline_ms"]
        lines.append(
            f"| gns-jax {name} | {c['input_nodes']:,.0f} | {i['sample']:.1f} | {i['gather']:.1f} "
            f"| {i['h2d']:.1f} | {c['input_ms']:.1f} | {c['loop_ms']:.1f} "
            f"| {c['input_batches_per_s']:.2f} | {c['input_ratio']:.2f} | {o['h2d']:.1f} "
            f"| {c['old_input_ms']:.1f} | {c['old_input_batches_per_s']:.2f} "
            f"| {c['old_input_ratio']:.2f} |"
        )
    lines += [
        "",
        "Input vs DGL, round by round: "
        + "; ".join(
            f"{name} after "
            + ", ".join(f"{x:.2f}" for x in c["input_ratios"])
            + " (before "
            + ", ".join(f"{x:.2f}" for x in c["old_input_ratios"])
            + ")"
            for name, c in d["ours"].items()
        )
        + ".",
    ]
    if d.get("trained"):
        lines += [
            "",
            "Training (medians): DGL's GraphSAGE batch (its in-line sample and gather, forward, "
            "backward, Adam) against ours; train split: ms per batch of each phase in training "
            "(with a prefetch above 0, our input side runs in its own thread, beside the step).",
            "",
            "| side | train: sample / gather / h2d / step ms | training batch s "
            "| training vs DGL |",
            "|---|---|---|---|",
            f"| DGL | - / - / - / {m['train_step_ms']:.0f} | {m['train_batch_s']:.3f} | 1.00 |",
        ]
        for name, c in d["ours"].items():
            t = c["training_split_ms"]
            lines.append(
                f"| gns-jax {name} | {t.get('sample', 0):.0f} / {t.get('gather', 0):.0f} / "
                f"{t.get('h2d', 0):.0f} / {t.get('step', 0):.0f} | {c['train_batch_s']:.3f} "
                f"| {c['train_ratio']:.2f} |"
            )
    return lines


def dgl_markdown_means(d: dict) -> list[str]:
    """The DGL table of a run of before the interleaved rounds (DGL before and after ours,
    means; its JSON has ``mean``): kept so that ``experiments.regenerate bench-dgl`` rebuilds
    the committed report."""
    m = d["mean"]
    runs = d["runs"]
    lines = [
        "",
        f"DGL {d['dgl']} (torch {d['torch']}, NumPy {d['numpy']}, {d['threads']} threads; "
        f"`NeighborSampler({d['fanouts_dgl']})`, the same seed batches) against gns-jax, input "
        "side in line (sample + gather + h2d, no train step running; DGL's input side is "
        "sample + gather, its rows stay on the host); DGL ran before and after ours "
        f"(input side {runs[0]['input_ms']:.1f} and {runs[-1]['input_ms']:.1f} ms, training "
        f"batch {runs[0]['train_batch_s']:.3f} and {runs[-1]['train_batch_s']:.3f} s), our "
        "input side after each DGL run; means. Training-split columns: ms per batch in "
        "training (the input side in its own thread, overlapping the step). Ratios > 1: "
        "gns-jax faster.",
        "",
        "| side | input nodes | sample ms | gather ms | h2d ms | input ms | input batches/s "
        "| input vs DGL | train: sample / gather / h2d / step ms | training batch s "
        "| training vs DGL |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| DGL | {m['input_nodes']:,.0f} | {m['sample_ms']:.1f} | {m['gather_ms']:.1f} | - "
        f"| {m['input_ms']:.1f} | {m['input_batches_per_s']:.2f} | 1.00 "
        f"| - / - / - / {m['train_step_ms']:.0f} | {m['train_batch_s']:.3f} | 1.00 |",
    ]
    for name, c in d["ours"].items():
        i, t = c["inline_ms"], c["training_split_ms"]
        lines.append(
            f"| gns-jax {name} | {c['input_nodes']:,.0f} | {i['sample']:.1f} | {i['gather']:.1f} "
            f"| {i['h2d']:.1f} | {c['input_ms']:.1f} | {c['input_batches_per_s']:.2f} "
            f"| {c['input_ratio']:.2f} "
            f"| {t.get('sample', 0):.0f} / {t.get('gather', 0):.0f} / {t.get('h2d', 0):.0f} / "
            f"{t.get('step', 0):.0f} | {c['train_batch_s']:.3f} | {c['train_ratio']:.2f} |"
        )
    return lines


def markdown(result: dict) -> str:
    hw = result["hardware"]
    head = (
        f"Hardware: {hw['cpu']}, {hw['cores']} cores, {hw['memory_gib']} GiB; jax "
        f"{hw['jax']} ({hw['backend']}: {', '.join(hw['devices'])}); GLIBC_TUNABLES "
        f"'{hw.get('glibc_tunables', '')}'."
    )
    if "ours" not in result:  # --dgl --input-only: the input sides alone, no training columns
        a = result["args"]
        lines = [
            head,
            f"Graph: {result['dataset']} ({result['num_nodes']:,} nodes, "
            f"{result['num_edges']:,} directed edges, {result['num_features']} features); "
            f"fan-outs {','.join(map(str, a['fanouts']))}, batch {a['batch_size']}; "
            f"{a['batches']} timed batches x {a['rounds']} rounds; input side only "
            "(`--input-only`: no training comparison).",
        ]
        if "dgl" in result:
            lines += dgl_markdown(result["dgl"])
        return "\n".join(lines) + "\n"
    ours = result["ours"]
    lines = [
        head,
        f"Graph: {result['dataset']} ({result['num_nodes']:,} nodes, {result['num_edges']:,} "
        f"directed edges, {result['num_features']} features); fan-outs "
        f"{','.join(map(str, result['args']['fanouts']))}, batch {result['args']['batch_size']}, "
        f"hidden {result['args']['hidden']}, prefetch {result['args']['prefetch']}; "
        f"{result['args']['batches']} timed batches x {result['args']['rounds']} rounds "
        f"(medians); a full epoch is {ours['epoch_batches']} batches. Times in s per batch; "
        "copy: a plain copy of the bytes the batch's gather moved (contiguous, preallocated, "
        "on the gather's threads"
        + (", from cold caches" if result.get("copy_cold_caches") else "")
        + "), measured after each run; gather / copy: per run, median"
        + (
            " (the gather runs in the prefetch thread, beside the step)."
            if result["args"]["prefetch"]
            else "."
        ),
        "",
        "| config | s/batch | batch vs NS | epoch s (est.) | epoch vs NS | input nodes (slots) "
        "| rows/batch "
        "| rows vs NS | MiB/batch | sample | gather | copy | gather / copy | h2d | step "
        "| wait frac. | peak RSS GiB | compilations (growths) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in ours["rows"]:
        sp = r["split"]
        lines.append(
            f"| {r['config']} | {r['batch_s']:.3f} | {r['ratio_vs_ns']:.3f} | {r['epoch_s']:.0f} "
            f"| {r['epoch_vs_ns']:.3f} "
            f"| {r['input_nodes']:,.0f} ({r['input_slots']:,}) | {r['h2d_rows']:,.0f} "
            f"| {r['rows_vs_ns']:.3f} | {r['h2d_mib']:.1f} "
            f"| {sp.get('sample', 0):.3f} | {sp.get('gather', 0):.3f} | {r['copy_ms'] / 1e3:.3f} "
            f"| {r['gather_vs_copy']:.2f} | {sp.get('h2d', 0):.3f} "
            f"| {sp.get('step', 0):.3f} | {r['wait']:.2f} | {r['peak_rss_gib']:.1f} "
            f"| {r['compilations']} ({r['growths']}) |"
        )
    if "pyg" in result:
        p = result["pyg"]
        lines += [
            "",
            f"PyG {p['torch_geometric']} (torch {p['torch']}, {p['threads']} threads): "
            f"NeighborLoader {p['pyg_loader_batches_per_s']:.2f} batches/s against our NS "
            f"sampler + gather {p['our_ns_sampling_batches_per_s']:.2f} "
            f"({p['sampling_speedup']:.1f}x); a PyG GraphSAGE training batch "
            f"{p['pyg_train_batch_s']:.3f} s, ours with NS {p['ns_train_speedup']:.1f}x faster, "
            + ", ".join(f"{k} {v:.1f}x" for k, v in p["gns_train_speedup"].items())
            + ".",
        ]
    if "dgl" in result:
        lines += dgl_markdown(result["dgl"])
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--batches", type=int, default=10, help="timed batches per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument(
        "--fanouts", type=lambda s: tuple(int(v) for v in s.split(",")), default=(15, 10, 5)
    )
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.01])
    parser.add_argument("--cache-first", action="store_true", help="also cache-first upper layers")
    parser.add_argument(
        "--ladies", type=int, nargs="*", default=[], help="also LADIES with these nodes per layer"
    )
    parser.add_argument("--prefetch", type=int, default=2)
    parser.add_argument(
        "--budgets",
        nargs="+",
        choices=("auto", "calibrated", "worst"),
        default=["auto"],
        help="batch budgets to compare (each with every sampler)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pyg", action="store_true", help="also time PyG (make peers)")
    parser.add_argument(
        "--dgl", action="store_true", help="also time DGL in .venv-dgl (make peers)"
    )
    parser.add_argument(
        "--dgl-python", type=Path, default=DGL_PYTHON, help="the interpreter of .venv-dgl"
    )
    parser.add_argument(
        "--input-only",
        action="store_true",
        help="with --dgl: compare the input sides only (no training comparison, no DGL training)",
    )
    parser.add_argument("--out", type=Path, default=Path("experiments/results/bench_epoch"))
    args = parser.parse_args(argv)
    if args.batches < 1 or args.rounds < 1 or args.batch_size < 1:
        parser.error("--batches, --rounds and --batch-size must be positive")
    if args.input_only and not args.dgl:
        parser.error("--input-only goes with --dgl")
    if args.input_only and args.pyg:
        parser.error("--pyg compares training too: it does not go with --input-only")
    if args.dgl:
        check_dgl_python(args)  # before anything is measured
    hw = environment()
    print(f"hardware: {json.dumps(hw)}", file=sys.stderr)
    start = time.perf_counter()
    dataset = load_dataset(args.dataset)
    print(f"loaded {dataset.name} in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    result = dict(
        dataset=dataset.name,
        num_nodes=dataset.num_nodes,
        num_edges=dataset.graph.num_edges,
        num_features=dataset.num_features,
        args={
            k: (list(v) if isinstance(v, tuple) else v)
            for k, v in vars(args).items()
            if k not in ("out", "dgl_python")
        },
        hardware=hw,
        copy_cold_caches=True,  # plain_copy_s sweeps the caches before each timed copy
    )
    if args.dgl:  # interleaved rounds: DGL, then our input side; then our training rounds
        with tempfile.TemporaryDirectory(prefix="bench_epoch_dgl_") as scratch:
            rounds = dgl_rounds(timed_subset(dataset, args), dataset, args, Path(scratch))
    if not args.input_only:
        result["ours"] = bench_ours(dataset, args)
    if args.dgl:
        result["dgl"] = dgl_summary(rounds, result.get("ours"))
    if args.pyg:
        result["pyg"] = bench_pyg(dataset, args, result["ours"])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_epoch.json").write_text(json.dumps(result, indent=1))
    table = markdown(result)
    (args.out / "bench_epoch.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    keep_freed_memory()  # as the gns-jax command does (gns_jax/hostmem.py)
    sys.exit(main())
