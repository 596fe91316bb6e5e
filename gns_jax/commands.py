"""The subcommands of ``gns-jax``: ``train`` (:func:`run_train`), ``plan``
(:func:`run_plan`), ``predict`` (:func:`run_predict`) and ``save`` (:func:`run_save`), each
given the parsed arguments (:func:`gns_jax.arguments.build_parser`). Host-side.

JAX and the training code are imported inside each command, after its input is checked: a bad
dataset or option is a one-line error in a fraction of a second.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from gns_jax.arguments import _shown
from gns_jax.atomic_write import check_output, write_atomically
from gns_jax.compile_cache import enable_compile_cache
from gns_jax.distributed import start_processes
from gns_jax.errors import ConfigError
from gns_jax.preempt import Interrupted, Preemption
from gns_jax.runlock import RunLock

__all__ = ["run_plan", "run_predict", "run_save", "run_train"]


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
    locks = []  # one run per output, taken before anything is written or loaded (held to exit)
    try:
        if out is not None:
            locks.append(RunLock(out, "--out").acquire())
        if config.checkpoint_dir and lead:
            locks.append(RunLock(config.checkpoint_dir, "--checkpoint-dir").acquire())
        return _train(config, quiet, lead, out, args.no_compile_cache)
    finally:
        for lock in locks:
            lock.release()


def _train(config, quiet: bool, lead: bool, out, no_compile_cache: bool) -> dict:
    """``gns-jax train`` once its outputs are locked: loads, trains, writes ``out``."""

    def write(results: dict) -> None:
        write_atomically(out, json.dumps(results, indent=1).encode())

    if out is not None:  # a run killed before its first epoch leaves no stale results behind
        write({"status": "starting", "config": config.to_json()})
    # Before JAX is imported: a bad dataset is a one-line error in a fraction of a second.
    dataset = _load(config.dataset, config.data_dir, config.split_seed, quiet)
    if not quiet:  # once, after the data loaded: a bad dataset stays a one-line error
        print(_describe(config), file=sys.stderr)
    enable_compile_cache(no_compile_cache)
    from gns_jax.train import fit

    with Preemption() as preemption:  # SIGTERM, SIGINT: stop cleanly (gns_jax/preempt.py)
        try:
            result = fit(dataset, config, quiet=quiet, on_epoch=write if out else None,
                         stop=lambda: preemption.requested)  # fmt: skip
        except Interrupted as stopped:
            if out is not None:
                write(stopped.results)
            if config.checkpoint_dir:
                saved = f"checkpoint in {config.checkpoint_dir} (--resume goes on from it)"
            else:
                saved = "no --checkpoint-dir: nothing to resume from"
            stopped.message = f"{stopped}; {saved}"
            raise
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
        config = config.replace(devices=1, parallel="data")  # as the planner sees the run
    out = check_output(args.out) if args.out is not None else None
    dataset = _load(config.dataset, config.data_dir, config.split_seed, args.quiet)
    enable_compile_cache(args.no_compile_cache)
    from gns_jax.factories import prepare_features
    from gns_jax.plan import KEEP_UP_EPOCHS, horizon_note, plan_cache_fraction
    from gns_jax.tasks import resolve_task

    task, dataset = resolve_task(config.task, dataset)
    log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    plan = plan_cache_fraction(dataset, config, prepare_features(dataset, config), task, log=log)
    result = {"plan": plan, "config": config.replace(cache_fraction=plan["chosen"]).to_json()}
    if out is not None:
        write_atomically(out, json.dumps(result, indent=1).encode())
    rows = "\n".join(
        f"  {m['fraction']:>6.1%}  {m['no_cached_share']:.3f} of layer-1 nodes without a cached "
        f"neighbour, rows {m['rows_vs_ns']:.2f} of NS's"
        + ("  passes" if m["keeps_up"] else "")
        + ("  <- chosen" if m["fraction"] == plan["chosen"] else "")
        for m in plan["measured"]
    )
    verdict = "keeps up with NS" if plan["keeps_up"] else "the best found; none keeps up with NS"
    if plan["keeps_up"] and config.epochs < KEEP_UP_EPOCHS:
        verdict += f"; {horizon_note(config.epochs)}"
    print(
        f"{dataset.name}: --cache-fraction {plan['chosen']:g} ({verdict}; "
        f"{plan['criterion']}; answered in {plan['seconds']:.2f}s)\n{rows}"
    )
    return result


def run_predict(args: argparse.Namespace) -> None:
    import io

    import numpy as np

    from gns_jax.checkpoint import read_run
    from gns_jax.evaluate import resolve_eval_mode
    from gns_jax.train import load_model, predict, predict_links

    out = check_output(args.out)
    if out.suffix != ".npy":
        raise ConfigError(None, f"--out {args.out}: must be a .npy file")
    _, record = read_run(args.checkpoint)
    saved = record["config"]
    split_seed = getattr(args, "split_seed", None)
    if split_seed is None:  # the run's, as recorded (older runs: their seed, the default)
        split_seed = saved["seed"] if saved.get("split_seed") is None else saved["split_seed"]
    dataset = _load(args.dataset, getattr(args, "data_dir", None), split_seed, args.quiet)
    pairs = _read_pairs(args.pairs) if getattr(args, "pairs", None) else None
    if (config_task := saved.get("task")) == "link" and pairs is None:
        raise ConfigError(None, f"{args.checkpoint} is a link prediction run: give --pairs")
    if pairs is not None and config_task != "link":
        raise ConfigError(None, f"--pairs: {args.checkpoint} is not a link prediction run")
    model, config, record = load_model(args.checkpoint, dataset)
    mode = resolve_eval_mode(config.eval_mode, model)
    if pairs is not None:
        pred = predict_links(model, dataset, pairs, config=config)
    else:
        pred = predict(model, dataset, proba=args.proba, config=config)
    buffer = io.BytesIO()
    np.save(buffer, pred, allow_pickle=False)
    write_atomically(out, buffer.getvalue())
    if not args.quiet:
        what = "pair probabilities" if pairs is not None else (
            "probabilities" if args.proba else "predictions")  # fmt: skip
        print(
            f"wrote {pred.shape[0]:,} predicted {what} to {out} ({mode} inference, "
            f"the parameters of epoch {record['best']['epoch'] + 1}, validation "
            f"{_selection(record)})",
            file=sys.stderr,
        )


def _read_pairs(path: str):
    """The ``[M, 2]`` integer node pairs of ``--pairs`` (a .npy, never unpickled)."""
    import numpy as np

    try:
        pairs = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ConfigError(None, f"--pairs {path}: cannot read a .npy array ({e})") from None
    if pairs.ndim != 2 or pairs.shape[1] != 2 or pairs.dtype.kind not in "iu":
        raise ConfigError(
            None, f"--pairs {path}: an integer [M, 2] array of node pairs, got {pairs.dtype} "
            f"{pairs.shape}"
        )  # fmt: skip
    return pairs


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
