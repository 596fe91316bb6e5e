"""The ``gns-jax`` command line (also ``python -m gns_jax``). Host-side.

``gns-jax train`` loads a dataset, trains a GraphSAGE with the chosen sampler and writes the JSON
results of DESIGN.md section 5. ``gns-jax save`` writes any dataset (a synthetic graph, say) to a
memory-mapped folder (:mod:`gns_jax.data.ondisk`) that ``--dataset FOLDER`` then loads in seconds.
Bad input (a missing or corrupt file, an impossible option) is reported as one line naming the
file or option, with exit status 2 and no traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence

from gns_jax.errors import ConfigError, GnsJaxError

__all__ = ["build_parser", "command", "main"]


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers such as 15,10,5, got '{text}'"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"every fan-out must be a positive integer, got '{text}'")
    return values


def _min_max(text: str) -> tuple[int, int]:
    try:
        lo, hi = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MIN,MAX such as 0,10, got '{text}'") from None
    if lo < 0 or hi < 1 or lo > hi:
        raise argparse.ArgumentTypeError(f"need 0 <= MIN <= MAX and MAX >= 1, got '{text}'")
    return lo, hi


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from gns_jax import __version__
    from gns_jax.cache import DISTRIBUTIONS
    from gns_jax.sampling.gns import WEIGHTS
    from gns_jax.train import SAMPLERS, TrainConfig

    defaults = TrainConfig()
    parser = argparse.ArgumentParser(
        prog="gns-jax", description="Global Neighbor Sampling for GNN training, in JAX."
    )
    parser.add_argument("--version", action="version", version=f"gns-jax {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser(
        "train",
        help="train a GraphSAGE and report accuracy, epoch time and data movement",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    train.add_argument(
        "--dataset",
        required=True,
        help="a registered name (cora, citeseer, amazon_photo, amazon_computers, coauthor_cs, "
        "facebook_pagepage, tolokers), synthetic:nodes=N,degree=D,features=F,classes=C[,seed=S], "
        "or a path to a dataset file or directory",
    )
    train.add_argument("--data-dir", default=None, help="folder of the registered datasets")
    train.add_argument("--sampler", default=defaults.sampler, choices=SAMPLERS)
    train.add_argument("--epochs", type=_positive_int, default=defaults.epochs)
    train.add_argument("--batch-size", type=_positive_int, default=defaults.batch_size)
    train.add_argument(
        "--fanouts",
        type=_int_list,
        default=defaults.fanouts,
        help="neighbours per node, from the output layer to the input layer; one layer each",
    )
    train.add_argument("--hidden", type=_positive_int, default=defaults.hidden)
    train.add_argument("--lr", type=float, default=defaults.lr)
    train.add_argument("--weight-decay", type=float, default=defaults.weight_decay)
    train.add_argument("--dropout", type=float, default=defaults.dropout)
    train.add_argument(
        "--feature-norm",
        choices=("auto", "row", "none"),
        default=defaults.feature_norm,
        help="row: divide each feature row by its L1 norm; auto: row for sparse non-negative "
        "(bag-of-words) features, under 5%% non-zero; none otherwise",
    )
    gns = train.add_argument_group("GNS (--sampler gns)")
    gns.add_argument(
        "--cache-fraction",
        type=float,
        default=defaults.cache_fraction,
        help="cache draws m = ceil(F * num_nodes), with replacement, deduplicated",
    )
    gns.add_argument(
        "--cache-refresh", type=int, default=defaults.cache_refresh, help="redraw every R epochs"
    )
    gns.add_argument("--cache-dist", choices=DISTRIBUTIONS, default=defaults.cache_dist)
    gns.add_argument(
        "--input-fanout",
        type=_min_max,
        default=defaults.input_fanout,
        help="MIN,MAX neighbours of the input layer, taken from the cache first",
    )
    gns.add_argument(
        "--cache-first",
        action="store_true",
        help="upper layers take cached neighbours first and fill up uniformly from the rest",
    )
    gns.add_argument(
        "--gns-weights",
        choices=WEIGHTS,
        default=defaults.gns_weights,
        help="input-layer weights: ht (unbiased Horvitz-Thompson), minimum (the official "
        "code's biased q_v), none (plain mean), heuristic (the official scripts' clipped weights)",
    )
    train.add_argument("--seed", type=int, default=defaults.seed)
    train.add_argument(
        "--split-seed",
        type=int,
        default=None,
        help="seed of the random 20/30-per-class split (datasets without a stored split); "
        "defaults to --seed",
    )
    train.add_argument("--eval-every", type=_positive_int, default=defaults.eval_every)
    train.add_argument(
        "--budget",
        choices=("auto", "calibrated", "worst"),
        default=defaults.budget,
        help="static batch sizes: the exact worst case, or calibrated on the first batches "
        "(overflows grow it and resample; auto: calibrated when it saves over 25%%)",
    )
    train.add_argument(
        "--prefetch",
        type=int,
        default=defaults.prefetch,
        help="batches the input thread prepares ahead while the device computes (0: no thread)",
    )
    train.add_argument("--out", default=None, help="write the JSON results here")
    train.add_argument("--quiet", action="store_true", help="no progress on stderr")

    save = commands.add_parser(
        "save",
        help="write a dataset (any --dataset, e.g. a synthetic graph) to a memory-mapped folder",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    save.add_argument("--dataset", required=True, help="as for train")
    save.add_argument("--data-dir", default=None, help="folder of the registered datasets")
    save.add_argument("--split-seed", type=int, default=0)
    save.add_argument("--out", required=True, help="a new (or empty) folder")
    save.add_argument(
        "--feature-dtype",
        choices=("float32", "float16"),
        default="float32",
        help="on-disk feature type (float16 halves the file and the rows moved to the device)",
    )
    save.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return parser


def run_train(args: argparse.Namespace) -> dict:
    from gns_jax.data import load_dataset
    from gns_jax.instrument import environment, peak_rss_gib
    from gns_jax.train import TrainConfig, fit

    config = TrainConfig(
        sampler=args.sampler,
        epochs=args.epochs,
        batch_size=args.batch_size,
        fanouts=tuple(args.fanouts),
        hidden=args.hidden,
        lr=args.lr,
        weight_decay=args.weight_decay,
        dropout=args.dropout,
        feature_norm=args.feature_norm,
        seed=args.seed,
        eval_every=args.eval_every,
        cache_fraction=args.cache_fraction,
        cache_refresh=args.cache_refresh,
        cache_dist=args.cache_dist,
        input_fanout=tuple(args.input_fanout),
        cache_first=args.cache_first,
        gns_weights=args.gns_weights,
        prefetch=args.prefetch,
        budget=args.budget,
    ).validate()
    split_seed = args.seed if args.split_seed is None else args.split_seed
    if args.out is not None:
        folder = os.path.dirname(os.path.abspath(args.out))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            raise ConfigError(
                f"--out {args.out}: folder {folder} does not exist or is not writable"
            )
    start = time.perf_counter()
    dataset = load_dataset(args.dataset, args.data_dir, split_seed=split_seed)
    if not args.quiet:
        print(
            f"{dataset.name}: {dataset.num_nodes:,} nodes, {dataset.graph.num_edges // 2:,} edges, "
            f"{dataset.num_features} features, {dataset.num_classes} classes, "
            f"split {dataset.split} "
            f"({dataset.train_idx.size}/{dataset.val_idx.size}/{dataset.test_idx.size}), "
            f"loaded in {time.perf_counter() - start:.1f}s",
            file=sys.stderr,
        )
    results = fit(dataset, config, quiet=args.quiet)
    out = {
        "dataset": dataset.name,
        "sampler": config.sampler,
        "seed": config.seed,
        "config": dataclasses.asdict(config)
        | {"dataset": args.dataset, "data_dir": args.data_dir, "split_seed": split_seed},
        "num_nodes": dataset.num_nodes,
        "num_edges": dataset.graph.num_edges,
        "num_features": dataset.num_features,
        "num_classes": dataset.num_classes,
        "split": dataset.split,
        **results,
        "peak_rss_gib": peak_rss_gib(),
        "environment": environment(),
    }
    if args.out is not None:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    print(
        f"{dataset.name} {config.sampler} seed {config.seed}: test accuracy "
        f"{out['test_accuracy']:.4f} (best validation {out['val_accuracy']:.4f} at epoch "
        f"{out['best_epoch'] + 1}), epoch {out['epoch_time_s']:.3f}s, "
        f"{out['h2d_rows_per_batch']:,.0f} rows host->device per batch"
        + (f" (cache hit rate {out['cache_hit_rate']:.3f})" if config.sampler == "gns" else "")
        + f", peak memory {out['peak_rss_gib']:.1f} GiB"
    )
    return out


def run_save(args: argparse.Namespace) -> None:
    from gns_jax.data import load_dataset
    from gns_jax.data.ondisk import save_dataset

    start = time.perf_counter()
    dataset = load_dataset(args.dataset, args.data_dir, split_seed=args.split_seed)
    loaded = time.perf_counter() - start
    save_dataset(dataset, args.out, feature_dtype=args.feature_dtype)
    if not args.quiet:
        print(
            f"{dataset.name}: {dataset.num_nodes:,} nodes, {dataset.graph.num_edges:,} directed "
            f"edges, {dataset.num_features} features: built in {loaded:.1f}s, written to "
            f"{args.out} in {time.perf_counter() - start - loaded:.1f}s "
            f"(load it with --dataset {args.out})",
            file=sys.stderr,
        )


def command() -> int:
    """The ``gns-jax`` program: restarts once with huge pages where that helps, then runs
    :func:`main` on ``sys.argv`` (:mod:`gns_jax.hostmem`). Call :func:`main` from Python."""
    from gns_jax.hostmem import restart_with_huge_pages

    restart_with_huge_pages()
    return main()


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line ``argv`` (``sys.argv[1:]`` when None) in this process."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "train":
            run_train(args)
        elif args.command == "save":
            run_save(args)
    except GnsJaxError as e:
        print(f"gns-jax: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gns-jax: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(command())
