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
of an epoch's cost).

With ``--pyg`` (in the environment ``make peers`` builds: CPU PyTorch and torch_geometric with
torch-sparse) it also times, on the same graph: PyG's ``NeighborLoader`` with the same fan-outs
and batch size (batches per second, feature slicing included) against our NS sampler plus its
feature gather; and a PyG ``GraphSAGE`` training epoch of the same size against ours.

    python -m experiments.bench_epoch --dataset PATH_OR_SPEC --batches 20 --rounds 3 \\
        --out experiments/results/bench_epoch

Writes ``bench_epoch.json`` and ``bench_epoch.md`` in ``--out``; prints the hardware.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import jax
import numpy as np

from gns_jax.data import load_dataset
from gns_jax.features import FeatureLoader
from gns_jax.hostmem import keep_freed_memory
from gns_jax.instrument import TransferMeter, environment, peak_rss_gib, reset_peak_rss
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


def bench_ours(dataset, args) -> dict:
    rng = np.random.default_rng([args.seed, 11])
    need = args.batches * args.batch_size
    if need > dataset.train_idx.size:
        raise SystemExit(
            f"--batches {args.batches} x --batch-size {args.batch_size} = {need} seeds, but the "
            f"training split has {dataset.train_idx.size}"
        )
    subset = dataclasses.replace(
        dataset, train_idx=np.sort(rng.choice(dataset.train_idx, need, replace=False))
    )
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
                )
            )
            print(
                f"round {r + 1}/{args.rounds} {name:>24}: {runs[name][-1]['batch_s']:.3f} s/batch, "
                f"{result['h2d_rows_per_batch']:,.0f} rows/batch, wait "
                f"{result['input_wait_fraction']:.2f}, "
                f"peak {runs[name][-1]['peak_rss_gib']:.1f} GiB",
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


def markdown(result: dict) -> str:
    hw = result["hardware"]
    ours = result["ours"]
    lines = [
        f"Hardware: {hw['cpu']}, {hw['cores']} cores, {hw['memory_gib']} GiB; jax "
        f"{hw['jax']} ({hw['backend']}: {', '.join(hw['devices'])}); GLIBC_TUNABLES "
        f"'{hw.get('glibc_tunables', '')}'.",
        f"Graph: {result['dataset']} ({result['num_nodes']:,} nodes, {result['num_edges']:,} "
        f"directed edges, {result['num_features']} features); fan-outs "
        f"{','.join(map(str, result['args']['fanouts']))}, batch {result['args']['batch_size']}, "
        f"hidden {result['args']['hidden']}, prefetch {result['args']['prefetch']}; "
        f"{result['args']['batches']} timed batches x {result['args']['rounds']} rounds "
        f"(medians); a full epoch is {ours['epoch_batches']} batches.",
        "",
        "| config | s/batch | batch vs NS | epoch s (est.) | epoch vs NS | input nodes (slots) "
        "| rows/batch "
        "| rows vs NS | MiB/batch | sample | gather | h2d | step | wait frac. | peak RSS GiB "
        "| compilations (growths) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in ours["rows"]:
        sp = r["split"]
        lines.append(
            f"| {r['config']} | {r['batch_s']:.3f} | {r['ratio_vs_ns']:.3f} | {r['epoch_s']:.0f} "
            f"| {r['epoch_vs_ns']:.3f} "
            f"| {r['input_nodes']:,.0f} ({r['input_slots']:,}) | {r['h2d_rows']:,.0f} "
            f"| {r['rows_vs_ns']:.3f} | {r['h2d_mib']:.1f} "
            f"| {sp.get('sample', 0):.3f} | {sp.get('gather', 0):.3f} | {sp.get('h2d', 0):.3f} "
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
    parser.add_argument("--out", type=Path, default=Path("experiments/results/bench_epoch"))
    args = parser.parse_args(argv)
    if args.batches < 1 or args.rounds < 1 or args.batch_size < 1:
        parser.error("--batches, --rounds and --batch-size must be positive")
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
            k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items() if k != "out"
        },
        hardware=hw,
    )
    result["ours"] = bench_ours(dataset, args)
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
