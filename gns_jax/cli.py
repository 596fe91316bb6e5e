"""The ``gns-jax`` command line (also ``python -m gns_jax``). Host-side.

* ``gns-jax train`` loads a dataset, trains a GraphSAGE with the chosen sampler and writes the
  JSON results (``docs/results.md``); with ``--checkpoint-dir`` it checkpoints and ``--resume``
  continues a killed run.
* ``gns-jax predict`` writes every node's predicted class from a run's checkpoint.
* ``gns-jax save`` writes any dataset (a synthetic graph, say) to a memory-mapped folder
  (:mod:`gns_jax.data.ondisk`) that ``--dataset FOLDER`` then loads in seconds.

Bad input (a missing or corrupt file, an impossible option) is reported as one line naming the
file or option, with exit status 2 and no traceback. ``--out`` is checked before any training and
written atomically (a temporary file renamed into place): after every epoch with
``"status": "running"``, at the end with ``"completed"``, so a killed run never leaves another
run's results looking like its own, and a long run keeps what it has measured.

JAX's persistent compilation cache is on for these commands (in ``$XDG_CACHE_HOME/gns-jax/jax``
or ``~/.cache/gns-jax/jax``): a second run of the same configuration loads its compiled programs
instead of compiling them again. ``--no-compile-cache`` or ``GNS_JAX_COMPILE_CACHE=0`` turns it
off; ``GNS_JAX_COMPILE_CACHE=DIR`` puts it elsewhere.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from gns_jax.errors import ConfigError, GnsJaxError

__all__ = ["build_parser", "command", "main"]

# Library parameters whose flag is not ``--`` + the name with dashes.
_FLAGS = {
    "weights": "--gns-weights",
    "cache_first_upper": "--cache-first",
    "eval_mode": "--eval",
    "checkpoint_dir": "--checkpoint-dir",
}


def _flag(param: str) -> str:
    return _FLAGS.get(param, "--" + param.replace("_", "-"))


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


def _int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got '{text}'") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    parse.__name__ = "positive integer" if low == 1 else "non-negative integer"
    return parse


_positive_int, _non_negative_int = _int_at_least(1), _int_at_least(0)


def _comma(values) -> str:
    return ",".join(str(v) for v in values)


def build_parser() -> argparse.ArgumentParser:
    from gns_jax import __version__
    from gns_jax.cache import DISTRIBUTIONS
    from gns_jax.config import EVAL_FANOUT, EVAL_MODES, SAMPLERS, TrainConfig
    from gns_jax.loader import BUDGETS
    from gns_jax.sampling.gns import WEIGHTS

    defaults = TrainConfig()
    parser = argparse.ArgumentParser(
        prog="gns-jax", description="Global Neighbor Sampling for GNN training, in JAX."
    )
    parser.add_argument("--version", action="version", version=f"gns-jax {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    fmt = argparse.ArgumentDefaultsHelpFormatter
    dataset_help = (
        "a registered name (cora, citeseer, amazon_photo, amazon_computers, coauthor_cs, "
        "facebook_pagepage, tolokers), synthetic:nodes=N,degree=D,features=F,classes=C"
        "[,seed=S,homophily=H,signal=A,train=T,val=V,test=U], or a path to a dataset file or folder"
    )

    train = commands.add_parser(
        "train",
        help="train a GraphSAGE and report accuracy, epoch time and data movement",
        formatter_class=fmt,
    )
    train.add_argument("--dataset", required=True, help=dataset_help)
    train.add_argument(
        "--data-dir", default=None, help="folder of the registered datasets (default: data/)"
    )
    train.add_argument("--sampler", default=defaults.sampler, choices=SAMPLERS, help="sampler")
    train.add_argument("--epochs", type=_positive_int, default=defaults.epochs, help="epochs")
    train.add_argument(
        "--batch-size", type=_positive_int, default=defaults.batch_size, help="seeds per batch"
    )
    train.add_argument(
        "--fanouts",
        type=_int_list,
        default=_comma(defaults.fanouts),
        help="neighbours per node, from the output layer to the input layer; one layer each",
    )
    train.add_argument(
        "--hidden", type=_positive_int, default=defaults.hidden, help="hidden layer width"
    )
    train.add_argument("--lr", type=float, default=defaults.lr, help="Adam learning rate")
    train.add_argument(
        "--weight-decay", type=float, default=defaults.weight_decay, help="L2 added to gradients"
    )
    train.add_argument("--dropout", type=float, default=defaults.dropout, help="dropout rate")
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
        "--cache-refresh",
        type=_positive_int,
        default=defaults.cache_refresh,
        help="redraw the cache every R epochs",
    )
    gns.add_argument(
        "--cache-dist",
        choices=DISTRIBUTIONS,
        default=defaults.cache_dist,
        help="the distribution the cache is drawn from",
    )
    gns.add_argument(
        "--input-fanout",
        type=_min_max,
        default=_comma(defaults.input_fanout),
        help="MIN,MAX neighbours of the input layer, taken from the cache first",
    )
    gns.add_argument(
        "--cache-first",
        action="store_true",
        help="upper layers take cached neighbours first and fill up uniformly from the rest; "
        "their 1/k weights are then BIASED towards cached neighbours (theory/README.md gives "
        "the measured size; the JSON says biased_upper_layers)",
    )
    gns.add_argument(
        "--gns-weights",
        choices=WEIGHTS,
        default=defaults.gns_weights,
        help="the input-layer estimator: ht (unbiased Horvitz-Thompson), hajek (HT "
        "self-normalised), hajek-fallback (hajek; a node with no cached neighbour takes the "
        "--input-fanout minimum of uniform neighbours instead), clipped (HT with 1/(pi q) clipped "
        "at --weight-clip), minimum (the official code's biased q_v), none (plain mean), "
        "heuristic (the official scripts' weights)",
    )
    gns.add_argument(
        "--weight-clip",
        type=float,
        default=defaults.weight_clip,
        help="clipped weights: a sampled cached neighbour stands for at most this many",
    )
    train.add_argument(
        "--ladies-nodes",
        type=_positive_int,
        default=defaults.ladies_nodes,
        help="LADIES (--sampler ladies): nodes sampled in every layer",
    )
    train.add_argument(
        "--seed", type=_non_negative_int, default=defaults.seed, help="seed of every random stream"
    )
    train.add_argument(
        "--split-seed",
        type=_non_negative_int,
        default=None,
        help="seed of the random 20/30-per-class split (datasets without a stored split); "
        "default: --seed",
    )
    evaluation = train.add_argument_group("evaluation")
    evaluation.add_argument(
        "--eval-every",
        type=_positive_int,
        default=defaults.eval_every,
        help="evaluate every N epochs (and after the last)",
    )
    evaluation.add_argument(
        "--eval",
        choices=EVAL_MODES,
        default=defaults.eval_mode,
        help="exact: full-neighbourhood inference over all nodes; sampled: the model on "
        "node-wise sampled blocks of the validation and test nodes (--eval-fanouts); auto: exact",
    )
    evaluation.add_argument(
        "--eval-fanouts",
        type=_int_list,
        default=None,
        help=f"fan-outs of sampled evaluation, output layer first (default: {EVAL_FANOUT} per "
        "layer)",
    )
    train.add_argument(
        "--budget",
        choices=BUDGETS,
        default=defaults.budget,
        help="static batch sizes: the exact worst case, or calibrated on the first batches "
        "(overflows grow it and resample; auto: calibrated when it saves over 25%%)",
    )
    train.add_argument(
        "--prefetch",
        type=_non_negative_int,
        default=defaults.prefetch,
        help="batches the input thread prepares ahead while the device computes (0: no thread)",
    )
    dist = train.add_argument_group(
        "several devices and hosts (data parallelism; --batch-size is the global batch)"
    )
    dist.add_argument(
        "--devices",
        default="1",
        help="train data-parallel on N devices, or 'all' (default: 1; on a CPU, "
        "XLA_FLAGS=--xla_force_host_platform_device_count=N makes N devices)",
    )
    dist.add_argument(
        "--coordinator",
        default=None,
        help="HOST:PORT of process 0, for several processes (one per host); with "
        "--num-processes and --process-id",
    )
    dist.add_argument(
        "--num-processes", type=_positive_int, default=None, help="processes taking part"
    )
    dist.add_argument(
        "--process-id", type=_non_negative_int, default=None, help="this process's index"
    )
    ckpt = train.add_argument_group("checkpoints")
    ckpt.add_argument(
        "--checkpoint-dir",
        default=None,
        help="write checkpoints here (at every epoch's end and every --checkpoint-every batches)",
    )
    ckpt.add_argument(
        "--checkpoint-every",
        type=_non_negative_int,
        default=defaults.checkpoint_every,
        help="also checkpoint every N batches (0: at epoch ends only)",
    )
    ckpt.add_argument(
        "--resume",
        action="store_true",
        help="continue from the latest valid checkpoint in --checkpoint-dir (same options)",
    )
    train.add_argument(
        "--out",
        default=None,
        help="write the JSON results here (after every epoch, then when complete)",
    )
    _common(train)

    predict = commands.add_parser(
        "predict",
        help="write every node's predicted class from a training run's checkpoint",
        formatter_class=fmt,
    )
    predict.add_argument("--checkpoint", required=True, help="a --checkpoint-dir of gns-jax train")
    predict.add_argument("--dataset", required=True, help=f"the run's dataset: {dataset_help}")
    predict.add_argument(
        "--data-dir", default=None, help="folder of the registered datasets (default: data/)"
    )
    predict.add_argument(
        "--split-seed",
        type=_non_negative_int,
        default=None,
        help="the run's --split-seed (default: the --seed recorded in the checkpoint, which is "
        "the training command's default split seed)",
    )
    predict.add_argument(
        "--out", required=True, help="a .npy file: int32 [num_nodes], the predicted class"
    )
    _common(predict)

    save = commands.add_parser(
        "save",
        help="write a dataset (any --dataset, e.g. a synthetic graph) to a memory-mapped folder",
        formatter_class=fmt,
    )
    save.add_argument("--dataset", required=True, help=dataset_help)
    save.add_argument("--data-dir", default=None, help="folder of the registered datasets")
    save.add_argument(
        "--split-seed", type=_non_negative_int, default=0, help="seed of a random split"
    )
    save.add_argument("--out", required=True, help="a new (or empty) folder")
    save.add_argument(
        "--feature-dtype",
        choices=("float32", "float16"),
        default="float32",
        help="on-disk feature type (float16 halves the file and the rows moved to the device)",
    )
    save.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return parser


def _common(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--quiet", action="store_true", help="no progress on stderr")
    sub.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="do not use JAX's persistent compilation cache (also GNS_JAX_COMPILE_CACHE=0)",
    )


def compile_cache_dir() -> Path | None:
    """Where the commands keep JAX's persistent compilation cache (None: off)."""
    setting = os.environ.get("GNS_JAX_COMPILE_CACHE", "")
    if setting.lower() in ("0", "off", "false", "no"):
        return None
    if setting and setting != "1":
        return Path(setting)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gns-jax" / "jax"


def enable_compile_cache(off: bool, folder: Path | None = None) -> Path | None:
    """Turns on JAX's persistent compilation cache (every compilation over 0.2 s is kept), in
    ``folder`` (default: :func:`compile_cache_dir`); returns the folder, or None when off."""
    folder = None if off else (folder or compile_cache_dir())
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # an unwritable cache folder costs time, never the run
    import jax

    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder


def check_output(path: str, option: str = "--out") -> Path:
    """Checks before any work that ``path`` can be written (atomically, beside itself)."""
    out = Path(path)
    if out.is_dir():
        raise ConfigError(f"{option} {path}: is a folder, not a file")
    folder = out.absolute().parent
    if not folder.is_dir():
        raise ConfigError(f"{option} {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{option} {path}: folder {folder} is not writable")
    if out.exists() and not os.access(out, os.W_OK):
        raise ConfigError(f"{option} {path}: the file exists and is not writable")
    return out


def write_atomically(path: Path, data: bytes, option: str = "--out") -> None:
    """Writes ``data`` to a temporary file beside ``path`` and renames it into place, so ``path``
    always holds a whole file: the old one or the new one."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise ConfigError(f"{option} {path}: cannot write ({e.strerror or e})") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def start_processes(args: argparse.Namespace) -> None:
    """``jax.distributed.initialize`` when ``--coordinator`` is given (before any JAX work);
    on the CPU backend the processes talk through gloo."""
    given = [args.coordinator, args.num_processes, args.process_id]
    if all(v is None for v in given):
        return
    if any(v is None for v in given):
        raise ConfigError("coordinator", "give --coordinator, --num-processes and --process-id")
    if args.process_id >= args.num_processes:
        raise ConfigError(
            "process_id", f"must lie in [0, {args.num_processes}), got {args.process_id}"
        )
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        args.coordinator, num_processes=args.num_processes, process_id=args.process_id
    )


def _config(args: argparse.Namespace):
    from gns_jax.config import TrainConfig
    from gns_jax.parallel import resolve_devices

    return TrainConfig(
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
        eval_mode=args.eval,
        eval_fanouts=None if args.eval_fanouts is None else tuple(args.eval_fanouts),
        cache_fraction=args.cache_fraction,
        cache_refresh=args.cache_refresh,
        cache_dist=args.cache_dist,
        input_fanout=tuple(args.input_fanout),
        cache_first=args.cache_first,
        gns_weights=args.gns_weights,
        weight_clip=args.weight_clip,
        ladies_nodes=args.ladies_nodes,
        prefetch=args.prefetch,
        budget=args.budget,
        checkpoint_dir=args.checkpoint_dir,
        checkpoint_every=args.checkpoint_every,
        resume=args.resume,
        devices=resolve_devices(args.devices),
    ).validate()


def _load(args, split_seed: int, quiet: bool):
    from gns_jax.data import load_dataset

    start = time.perf_counter()
    dataset = load_dataset(args.dataset, args.data_dir, split_seed=split_seed)
    if not quiet:
        print(
            f"{dataset.name}: {dataset.num_nodes:,} nodes, {dataset.graph.num_edges // 2:,} edges, "
            f"{dataset.num_features} features, {dataset.num_classes} classes, "
            f"split {dataset.split} "
            f"({dataset.train_idx.size}/{dataset.val_idx.size}/{dataset.test_idx.size}), "
            f"loaded in {time.perf_counter() - start:.1f}s",
            file=sys.stderr,
        )
    return dataset


def run_train(args: argparse.Namespace) -> dict:
    import jax

    from gns_jax.train import fit

    start_processes(args)
    config = _config(args)
    split_seed = args.seed if args.split_seed is None else args.split_seed
    lead = jax.process_index() == 0  # with several processes, process 0 writes and reports
    args.quiet = args.quiet or not lead
    out = check_output(args.out) if args.out is not None and lead else None
    extra = {"dataset": args.dataset, "data_dir": args.data_dir, "split_seed": split_seed}

    def write(results: dict) -> None:
        results = {**results, "config": results["config"] | extra}
        write_atomically(out, json.dumps(results, indent=1).encode())

    if out is not None:  # a run killed before its first epoch leaves no stale results behind
        write({"status": "starting", "config": config.to_json()})
    dataset = _load(args, split_seed, args.quiet)
    result = fit(dataset, config, quiet=args.quiet, on_epoch=write if out else None)
    metrics = result.metrics
    metrics["config"] |= extra
    if out is not None:
        write(metrics)
    if not lead:
        return metrics
    print(
        f"{dataset.name} {config.sampler} seed {config.seed}: test accuracy "
        f"{metrics['test_accuracy']:.4f} (best validation {metrics['val_accuracy']:.4f} at epoch "
        f"{metrics['best_epoch'] + 1}), epoch {metrics['epoch_time_s']:.3f}s, "
        f"{metrics['h2d_rows_per_batch']:,.0f} rows host->device per batch"
        + (f" (cache hit rate {metrics['cache_hit_rate']:.3f})" if config.sampler == "gns" else "")
        + f", peak memory {metrics['peak_rss_gib']:.1f} GiB"
    )
    return metrics


def run_predict(args: argparse.Namespace) -> None:
    import io

    import numpy as np
    from flax import nnx

    from gns_jax.checkpoint import read_run
    from gns_jax.config import eval_fanouts, prepare_features
    from gns_jax.evaluate import Evaluator, supports_exact
    from gns_jax.train import load_model

    out = check_output(args.out)
    if out.suffix != ".npy":
        raise ConfigError(f"--out {args.out}: must be a .npy file")
    _, record = read_run(args.checkpoint)
    split_seed = record["config"]["seed"] if args.split_seed is None else args.split_seed
    dataset = _load(args, split_seed, args.quiet)
    model, config, record = load_model(args.checkpoint, dataset)
    mode = config.eval_mode
    if mode == "auto":
        mode = "exact" if supports_exact(model) else "sampled"
    evaluator = Evaluator(
        dataset,
        prepare_features(dataset, config),
        mode=mode,
        fanouts=eval_fanouts(config),
        batch_size=config.batch_size,
        seed=config.seed,
        nodes=np.arange(dataset.num_nodes, dtype=np.int32),
    )
    graphdef, state = nnx.split(model)
    pred = evaluator.predict(graphdef, state).astype(np.int32)
    buffer = io.BytesIO()
    np.save(buffer, pred, allow_pickle=False)
    write_atomically(out, buffer.getvalue())
    if not args.quiet:
        print(
            f"wrote {pred.size:,} predicted classes to {out} ({mode} inference, the parameters "
            f"of epoch {record['best']['epoch'] + 1}, validation accuracy {record['best']['val']})",
            file=sys.stderr,
        )


def run_save(args: argparse.Namespace) -> None:
    from gns_jax.data import load_dataset
    from gns_jax.data.ondisk import save_dataset

    start = time.perf_counter()
    if args.dataset.startswith("synthetic:"):
        from gns_jax.data.streamed import STREAM_ABOVE, in_memory_bytes, write_synthetic
        from gns_jax.data.synthetic import parse_synthetic, spec_rng

        opts = parse_synthetic(args.dataset, in_memory=False)
        if in_memory_bytes(opts["nodes"], opts["degree"], opts["features"]) > STREAM_ABOVE:
            rng = spec_rng(opts.pop("seed"))  # the stream load_dataset gives it
            log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
            meta = write_synthetic(
                rng,
                args.out,
                name=args.dataset,
                feature_dtype=args.feature_dtype,
                log=log,
                **opts,
            )
            if not args.quiet:
                print(
                    f"{args.dataset}: {meta['num_nodes']:,} nodes, {meta['num_edges']:,} "
                    f"directed edges, {meta['num_features']} features: streamed to {args.out} "
                    f"in {time.perf_counter() - start:.1f}s (load it with --dataset {args.out})",
                    file=sys.stderr,
                )
            return
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


def _message(error: GnsJaxError) -> str:
    if isinstance(error, ConfigError) and error.param:
        return f"{_flag(error.param)}: {error.message}"
    return str(error)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line ``argv`` (``sys.argv[1:]`` when None) in this process."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command in ("train", "predict"):
            enable_compile_cache(args.no_compile_cache)
        if args.command == "train":
            run_train(args)
        elif args.command == "predict":
            run_predict(args)
        elif args.command == "save":
            run_save(args)
    except GnsJaxError as e:
        print(f"gns-jax: error: {_message(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gns-jax: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(command())
