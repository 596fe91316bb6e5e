"""The ``gns-jax`` command line (also ``python -m gns_jax``). Host-side.

* ``gns-jax train`` loads a dataset, trains a GraphSAGE with the chosen sampler and writes the
  JSON results (``docs/results.md``); with ``--checkpoint-dir`` it checkpoints and ``--resume``
  continues a killed run.
* ``gns-jax predict`` writes every node's predicted class from a run's checkpoint.
* ``gns-jax plan`` picks the cache fraction of a GNS run (:mod:`gns_jax.plan`; what
  ``--cache-fraction auto`` runs before training) and prints what its pilot measured.
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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gns_jax.errors import ConfigError, GnsJaxError

__all__ = ["build_parser", "command", "main"]


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``gns-jax train: error: ... (--help lists the options)``,
    exit status 2, instead of the whole usage."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the options)\n")


def _parse(parse: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """An argparse type from a parse function raising ValueError (its message is kept)."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = name
    return convert


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"expected an integer, got '{text}'") from None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"expected a number, got '{text}'") from None


def _shown(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def add_option(parser, name: str, *, required: bool = False, **override: Any) -> None:
    """Adds the flag of :class:`~gns_jax.config.TrainConfig`'s field ``name`` to ``parser``,
    from the field's metadata: its help, choices, parser and default (shown in the help). The
    parsed namespace holds the option only when it was given (``argparse.SUPPRESS``), so a
    ``--config`` file's values and the defaults stay where they are."""
    import dataclasses
    import typing

    from gns_jax.config import TrainConfig, flag_of

    field = next(f for f in dataclasses.fields(TrainConfig) if f.name == name)
    meta, hint = field.metadata, typing.get_type_hints(TrainConfig)[name]
    kwargs: dict[str, Any] = {"dest": name, "help": meta["help"], "default": argparse.SUPPRESS}
    if not required and field.default is not None:  # a None default's help says what it means
        kwargs["help"] += f" (default: {_shown(field.default)})"
    if hint is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
    else:
        parse = meta.get("parse")
        if parse is None:  # a scalar (or None): int, float or str
            base = next(t for t in (int, float, str) if t == hint or t in typing.get_args(hint))
            parse = {int: _integer, float: _number, str: str}[base]
        kwargs["type"] = _parse(parse, meta.get("metavar") or parse.__name__)
        for key in ("choices", "metavar"):
            if meta.get(key):
                kwargs[key] = meta[key]
    kwargs.update(override)
    parser.add_argument(flag_of(name), required=required, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The command line. Imports no JAX: ``--help`` answers at once."""

    from gns_jax import __version__

    parser = _Parser(
        prog="gns-jax", description="Global Neighbor Sampling for GNN training, in JAX."
    )
    parser.add_argument("--version", action="version", version=f"gns-jax {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = commands.add_parser(
        "train",
        help="train a GraphSAGE and report accuracy, epoch time and data movement",
        description="Every option is a field of gns_jax.TrainConfig; a run's JSON results "
        "record them all, and --config RUN.json runs them again (options given here win).",
    )
    train.add_argument(
        "--config",
        default=None,
        metavar="RUN.json",
        help="start from the options of this run's JSON results (or of a JSON object of "
        "options); the flags given beside it change them",
    )
    _train_options(train)
    output = train.add_argument_group("output and processes")
    output.add_argument(
        "--out",
        default=None,
        help="write the JSON results here (after every epoch, then when complete)",
    )
    output.add_argument(
        "--coordinator",
        default=None,
        help="HOST:PORT of process 0, for several processes (one per host); with "
        "--num-processes and --process-id",
    )
    output.add_argument(
        "--num-processes", type=_parse(_integer, "int"), default=None, help="processes taking part"
    )
    output.add_argument(
        "--process-id", type=_parse(_integer, "int"), default=None, help="this process's index"
    )
    _common(output)

    predict = commands.add_parser(
        "predict", help="write every node's predicted class from a training run's checkpoint"
    )
    predict.add_argument("--checkpoint", required=True, help="a --checkpoint-dir of gns-jax train")
    add_option(predict, "dataset", required=True)
    add_option(predict, "data_dir")
    add_option(
        predict,
        "split_seed",
        help="the run's --split-seed (default: the one recorded in the checkpoint)",
    )
    predict.add_argument(
        "--proba",
        action="store_true",
        help="write float32 probabilities instead: [num_nodes, C] softmax for classes (binary: "
        "column 1 the positive class), [num_nodes, L] sigmoids for multi-label",
    )
    predict.add_argument(
        "--out",
        required=True,
        help="a .npy file: int32 [num_nodes], the predicted class (multi-label: int8 "
        "[num_nodes, L], 1 where a label's probability exceeds 0.5)",
    )
    _common(predict)

    plan = commands.add_parser(
        "plan",
        help="pick the cache fraction for a training run (what --cache-fraction auto runs)",
        description="A short pilot (gns_jax.plan): a few NS warm-up steps, then the gradient "
        "noise of GNS at increasing cache fractions against NS's on the run's own batches; "
        "prints what it measured and the smallest fraction that keeps up. Takes the options "
        "of gns-jax train (--cache-fraction is what it chooses).",
    )
    plan.add_argument(
        "--config", default=None, metavar="RUN.json", help="start from a run's options"
    )
    _train_options(plan)
    plan.add_argument("--out", default=None, help="write {'plan': ..., 'config': ...} here")
    _common(plan)

    save = commands.add_parser(
        "save",
        help="write a dataset (any --dataset, e.g. a synthetic graph) to a memory-mapped folder",
    )
    add_option(save, "dataset", required=True)
    add_option(save, "data_dir")
    add_option(save, "split_seed", help="seed of a random split (default: 0)")
    save.add_argument("--out", required=True, help="a new (or empty) folder")
    save.add_argument(
        "--feature-dtype",
        choices=("float32", "float16"),
        default="float32",
        help="on-disk feature type (float16 halves the file and the rows moved to the device; "
        "default: float32)",
    )
    save.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return parser


def _train_options(sub) -> None:
    """Every field of TrainConfig as a flag, in its group."""
    import dataclasses

    from gns_jax.config import GROUPS, TrainConfig

    groups = {title: sub.add_argument_group(title) for title in GROUPS}
    data_first = ("dataset", "data_dir", "split_seed")  # the data's options lead the help
    for field in sorted(dataclasses.fields(TrainConfig), key=lambda f: f.name not in data_first):
        add_option(groups[field.metadata["group"]], field.name)


def _common(sub) -> None:
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
        raise ConfigError(None, f"{option} {path}: is a folder, not a file")
    folder = out.absolute().parent
    if not folder.is_dir():
        raise ConfigError(None, f"{option} {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(None, f"{option} {path}: folder {folder} is not writable")
    if out.exists() and not os.access(out, os.W_OK):
        raise ConfigError(None, f"{option} {path}: the file exists and is not writable")
    return out


def _umask() -> int:
    """The process's umask (read by setting it, then putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomically(path: Path, data: bytes, option: str = "--out") -> None:
    """Writes ``data`` to a temporary file beside ``path`` and renames it into place, so ``path``
    always holds a whole file: the old one or the new one."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would ignore the user's umask
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise ConfigError(None, f"{option} {path}: cannot write ({e.strerror or e})") from None
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
    """The run's TrainConfig: ``--config``'s options (or the defaults), then the flags given,
    validated once. ``--devices all`` becomes the count; the split seed defaults to the seed."""
    import dataclasses

    from gns_jax.config import TrainConfig

    base = TrainConfig() if args.config is None else TrainConfig.from_json(args.config)
    given = {
        f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig) if f.name in args
    }
    config = base.replace(**given)
    if config.dataset is None:
        raise ConfigError("dataset", "required: a dataset name, spec or path (or --config)")
    if config.devices == "all" or config.devices != 1:
        from gns_jax.parallel import resolve_devices

        config = config.replace(devices=resolve_devices(config.devices))
    if config.split_seed is None:
        config = config.replace(split_seed=config.seed)
    return config.validate()


def _describe(config) -> str:
    """The options that differ from the defaults, on one line."""
    import dataclasses

    from gns_jax.config import TrainConfig

    default = TrainConfig()
    changed = [
        f"{f.name}={_shown(getattr(config, f.name))}"
        for f in dataclasses.fields(config)
        if getattr(config, f.name) != getattr(default, f.name)
    ]
    return "options: " + (" ".join(changed) if changed else "the defaults")


def _load(spec: str, data_dir: str | None, split_seed: int, quiet: bool):
    from gns_jax.data import load_dataset

    start = time.perf_counter()
    dataset = load_dataset(spec, data_dir, split_seed=split_seed)
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
    """``gns-jax train``: returns the JSON results (also written to ``--out``)."""
    start_processes(args)  # imports JAX only with --coordinator
    config = _config(args)
    lead = True
    if args.coordinator is not None:  # with several processes, process 0 writes and reports
        import jax

        lead = jax.process_index() == 0
    quiet = args.quiet or not lead
    out = check_output(args.out) if args.out is not None and lead else None

    def write(results: dict) -> None:
        write_atomically(out, json.dumps(results, indent=1).encode())

    if out is not None:  # a run killed before its first epoch leaves no stale results behind
        write({"status": "starting", "config": config.to_json()})
    # Before JAX is imported: a bad dataset is a one-line error in a fraction of a second.
    dataset = _load(config.dataset, config.data_dir, config.split_seed, quiet)
    if not quiet:  # once, after the data loaded: a bad dataset stays a one-line error
        print(_describe(config), file=sys.stderr)
    enable_compile_cache(args.no_compile_cache)
    from gns_jax.train import fit

    result = fit(dataset, config, quiet=quiet, on_epoch=write if out else None)
    metrics = result.metrics
    if out is not None:
        write(metrics)
    if not lead:
        return metrics
    best, m = metrics["best_epoch"], metrics["metric"]

    def value(key: str) -> str:
        return "-" if metrics.get(key) is None else f"{metrics[key]:.4f}"

    print(
        f"{dataset.name} {config.sampler} seed {config.seed}: "
        + (
            "not evaluated"
            if best is None
            else f"test {m} {value(f'test_{m}')} (best validation {m} {value(f'val_{m}')} at "
            f"epoch {best})"
            + (f", test accuracy {value('test_accuracy')}" if m != "accuracy" else "")
        )
        + f", epoch {metrics['epoch_time_s']:.3f}s, "
        f"{metrics['h2d_rows_per_batch']:,.0f} rows host->device per batch"
        + (f" (cache hit rate {metrics['cache_hit_rate']:.3f})" if config.sampler == "gns" else "")
        + f", peak memory {metrics['peak_rss_gib']:.1f} GiB"
    )
    return metrics


def run_plan(args: argparse.Namespace) -> dict:
    """``gns-jax plan``: returns ``{"plan": ..., "config": ...}`` (also written to ``--out``)."""
    args.cache_fraction = "auto"
    config = _config(args)
    if config.devices != 1:
        config = config.replace(devices=1, parallel="data")  # the pilot runs on one device
    out = check_output(args.out) if args.out is not None else None
    dataset = _load(config.dataset, config.data_dir, config.split_seed, args.quiet)
    enable_compile_cache(args.no_compile_cache)
    from gns_jax.factories import prepare_features
    from gns_jax.plan import plan_cache_fraction
    from gns_jax.tasks import resolve_task

    task, dataset = resolve_task(config.task, dataset)
    log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    plan = plan_cache_fraction(dataset, config, prepare_features(dataset, config), task, log=log)
    result = {"plan": plan, "config": config.replace(cache_fraction=plan["chosen"]).to_json()}
    if out is not None:
        write_atomically(out, json.dumps(result, indent=1).encode())
    rows = "\n".join(
        f"  {m['fraction']:>6.1%}  noise {m['noise_ratio']:5.2f}x NS's  rows {m['rows_vs_ns']:.2f} "
        f"of NS's" + ("  keeps up" if m["keeps_up"] else "")
        for m in plan["measured"]
    )
    verdict = "keeps up with NS" if plan["keeps_up"] else "the best found; none keeps up with NS"
    print(
        f"{dataset.name}: --cache-fraction {plan['chosen']:g} ({verdict}; "
        f"{plan['criterion']}; {plan['seconds']:.1f}s)\n{rows}"
    )
    return result


def run_predict(args: argparse.Namespace) -> None:
    import io

    import numpy as np

    from gns_jax.checkpoint import read_run
    from gns_jax.evaluate import resolve_eval_mode
    from gns_jax.train import load_model, predict

    out = check_output(args.out)
    if out.suffix != ".npy":
        raise ConfigError(None, f"--out {args.out}: must be a .npy file")
    _, record = read_run(args.checkpoint)
    saved = record["config"]
    split_seed = getattr(args, "split_seed", None)
    if split_seed is None:  # the run's, as recorded (older runs: their seed, the default)
        split_seed = saved["seed"] if saved.get("split_seed") is None else saved["split_seed"]
    dataset = _load(args.dataset, getattr(args, "data_dir", None), split_seed, args.quiet)
    model, config, record = load_model(args.checkpoint, dataset)
    mode = resolve_eval_mode(config.eval_mode, model)
    pred = predict(model, dataset, proba=args.proba, config=config)
    buffer = io.BytesIO()
    np.save(buffer, pred, allow_pickle=False)
    write_atomically(out, buffer.getvalue())
    if not args.quiet:
        print(
            f"wrote {pred.shape[0]:,} predicted "
            f"{'probabilities' if args.proba else 'predictions'} to {out} ({mode} inference, "
            f"the parameters of epoch {record['best']['epoch'] + 1}, validation "
            f"{_selection(record)})",
            file=sys.stderr,
        )


def _selection(record: dict) -> str:
    """``metric value`` of the checkpoint's best epoch (older records: accuracy)."""
    best = record["best"]
    score = best.get("score", best["val"])
    return f"{best.get('metric', 'accuracy')} {'-' if score is None else f'{score:.4f}'}"


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
    dataset = load_dataset(
        args.dataset, getattr(args, "data_dir", None), split_seed=getattr(args, "split_seed", 0)
    )
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
    """The ``gns-jax`` program: :func:`main` on ``sys.argv``. Call :func:`main` from Python.

    The program keeps large freed blocks for reuse (:func:`gns_jax.hostmem.keep_freed_memory`:
    fewer page faults a batch, in this process, nothing restarted); :func:`main` leaves the
    allocator of the calling process as it is."""
    from gns_jax.hostmem import keep_freed_memory

    keep_freed_memory()
    return main()


def _message(error: GnsJaxError) -> str:
    if isinstance(error, ConfigError) and error.param:
        from gns_jax.config import flag_of

        return f"{flag_of(error.param)}: {error.message}"
    return str(error)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line ``argv`` (``sys.argv[1:]`` when None) in this process."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "predict":
            enable_compile_cache(args.no_compile_cache)
        if args.command == "train":
            run_train(args)
        elif args.command == "predict":
            run_predict(args)
        elif args.command == "save":
            run_save(args)
        elif args.command == "plan":
            run_plan(args)
    except GnsJaxError as e:
        print(f"gns-jax: error: {_message(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gns-jax: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(command())
