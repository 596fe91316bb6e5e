"""``python -m gns_jax.theory [--full | --setting S] [--only NAME ...] [--mutate DEFECT]``.

Runs the checks and prints every verdict: checks (PASS/FAIL) and findings on the paper's claims
(HOLDS/DOES NOT HOLD). Exit status 1 when a check fails, 0 otherwise: a finding that does not hold
is a result, not an error. ``--json PATH`` also writes every figure to PATH (xz-compressed when
PATH ends in ``.xz``). ``--full`` runs the report setting and rewrites the README.md and
figures/ of this package's folder, ``gns_jax/theory/``. ``--mutate`` puts one defect of
:mod:`gns_jax.theory.mutations` into the library first, to show that the checks catch it.

Compiled programs go to JAX's persistent compilation cache, as for the ``gns-jax`` commands
(``~/.cache/gns-jax/jax``; ``GNS_JAX_COMPILE_CACHE=DIR`` moves it, ``--no-compile-cache`` or
``GNS_JAX_COMPILE_CACHE=0`` turns it off): a second run loads the samplers and gradients it
compiled in the first instead of compiling them again.

``--resample SWEEP [PREDICTION ...]`` reads saved ``--json`` files instead of running: how often
each tested fraction is the measured proper size when the sweep's seeds are drawn again with
replacement, and how often each saved prediction of that graph's size is within 2x of it
(:func:`gns_jax.theory.predict.resampling_table`).

Every option that reads a saved ``--json`` file (``--from-json``, ``--convergence-from``,
``--resample``) reads it compressed (``.json.xz``) or inside a tar archive, in place:
``gns_jax/theory/second-graph/runs.tar.xz/tolokers.json`` (:mod:`gns_jax.theory.saved`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import time
from pathlib import Path

import jax
import numpy as np

from gns_jax.cli import enable_compile_cache
from gns_jax.theory.common import FULL, SETTINGS, Check, override
from gns_jax.theory.mutations import MUTATIONS
from gns_jax.theory.runner import MODULES, run_parallel
from gns_jax.theory.saved import read_json, write_json

HERE = Path(__file__).resolve().parent


def environment() -> str:
    return (
        f"{platform.machine()}, {jax.device_count()} x {jax.devices()[0].device_kind} "
        f"({jax.default_backend()} backend), jax {jax.__version__}, "
        f"python {platform.python_version()}"
    )


def _jsonable(value):
    if isinstance(value, Check):
        return value._asdict()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _report_from_json(path: Path, parser) -> int:
    from gns_jax.theory.report import results_from_json, write_report

    try:
        saved = read_json(path)
    except (OSError, ValueError) as e:
        parser.error(f"--from-json {path}: not a readable JSON file ({e})")
    meta = saved.pop("_run", {})
    if meta.get("setting") != FULL.name:
        parser.error(f"--from-json {path}: not the JSON of a --full run")
    results = results_from_json(saved)
    setting = FULL
    if "predict" in results:
        # A run without findings 5b or 5d (saved before they existed) ran with no such draws.
        if results["predict"].get("bound") is None:
            setting = dataclasses.replace(setting, bound_draws=0)
        if results["predict"].get("trajectory") is None:
            setting = dataclasses.replace(setting, trajectory_draws=0)
    write_report(results, setting, HERE, meta["environment"], meta["seconds"])
    print(f"wrote {HERE / 'README.md'} and {HERE / 'figures'} from {path}")
    return 0


def _sweep_dataset(sweep: dict) -> str:
    """The graph of a saved sweep; runs before the sweep recorded it name it in check 4a's text
    ("amazon_photo, L_0=...")."""
    return sweep.get("dataset") or sweep["checks"][0]["measured"].split(",")[0]


def _saved_sweep(path: Path, setting, parser) -> dict:
    """The convergence result of a saved run's JSON, checked against ``setting``."""
    try:
        sweep = read_json(path)["convergence"]
        dict(sweep["proper"]), float(sweep["c"]), float(sweep["lipschitz"])
        float(sweep["rows"][0]["horizons"][0]["sd"])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        parser.error(
            f"--convergence-from {path}: not the JSON of a run with a convergence sweep ({e!r})"
        )
    dataset = _sweep_dataset(sweep)
    if dataset != setting.model_dataset:
        parser.error(
            f"--convergence-from {path}: its sweep ran on {dataset}, the setting's "
            f"model_dataset is {setting.model_dataset} (add --set model_dataset={dataset})"
        )
    batch = sweep.get("batch_size", setting.conv_batch_size)
    if batch != setting.conv_batch_size:
        parser.error(
            f"--convergence-from {path}: its sweep's batches had {batch} nodes, the setting's "
            f"conv_batch_size is {setting.conv_batch_size}"
        )
    return {**sweep, "dataset": dataset}


def _resample(paths: list[Path], parser) -> int:
    """Prints :func:`gns_jax.theory.predict.resampling_table` for the sweep of ``paths[0]`` and the
    predictions of its graph in every file of ``paths``."""
    from gns_jax.theory.predict import resampling_table, saved_sizes

    saved = []
    for path in paths:
        try:
            saved.append(read_json(path))
        except (OSError, ValueError) as e:
            parser.error(f"--resample {path}: not a readable JSON file ({e})")
    sweep = saved[0].get("convergence")
    try:
        sweep["rows"][0]["horizons"][0]["seeds"], dict(sweep["proper"])
    except (KeyError, IndexError, TypeError) as e:
        parser.error(
            f"--resample {paths[0]}: not the JSON of a run with a convergence sweep ({e!r})"
        )
    dataset = _sweep_dataset(sweep)
    sweep = {**sweep, "dataset": dataset}
    predictions = []
    for i, (path, result) in enumerate(zip(paths, saved)):
        sizes = saved_sizes(result.get("predict", {}), dataset)
        if i > 0 and "predict" not in result:  # the sweep's own file may hold none
            parser.error(f"--resample {path}: not the JSON of a run with the predict module")
        if i > 0 and not sizes:
            parser.error(
                f"--resample {path}: its predictions are not on the sweep's graph {dataset}"
            )
        predictions += [(f"{label} ({path.name})", s) for label, s in sizes]
    print(resampling_table(sweep, predictions))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gns_jax.theory", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--full", action="store_true", help="the report setting; rewrites README")
    parser.add_argument(
        "--setting", choices=sorted(SETTINGS), default=None, help="sizes (default: small)"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=list(MODULES),
        default=list(MODULES),
        metavar="NAME",
        help=f"run only these modules (of {', '.join(MODULES)})",
    )
    parser.add_argument(
        "--mutate", choices=MUTATIONS, default=None, help="put this defect into the library first"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="processes to spread the modules over (default: 2, or 1 on a 1-core machine)",
    )
    parser.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="FIELD=VALUE",
        help="change fields of the setting, e.g. model_dataset=amazon_computers "
        "conv_fractions=0.01,0.05 (tuples comma-separated)",
    )
    parser.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="do not use JAX's persistent compilation cache (also GNS_JAX_COMPILE_CACHE=0)",
    )
    parser.add_argument(
        "--convergence-from",
        type=Path,
        metavar="PATH",
        help="a saved run's --json whose convergence sweep predict judges against (instead of "
        "running the sweep; --only without convergence)",
    )
    parser.add_argument(
        "--json", type=Path, help="also write every figure to this JSON file (.xz: compressed)"
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        help="rewrite this package's README.md from a --full run's --json file, without rerunning",
    )
    parser.add_argument(
        "--resample",
        type=Path,
        nargs="+",
        metavar="PATH",
        help="print how the measured proper size of a saved run's sweep (the first --json) and "
        "the verdicts of the predictions in the other saved runs' --json move over bootstrap "
        "resamples of the sweep's seeds, without rerunning",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.from_json is not None:
        return _report_from_json(args.from_json, parser)
    if args.resample is not None:
        return _resample(args.resample, parser)
    if args.json is not None and not args.json.parent.is_dir():
        parser.error(f"--json: folder {args.json.parent} does not exist")
    if args.full and args.setting not in (None, FULL.name):
        parser.error("--full is --setting full")
    setting = FULL if args.full else SETTINGS[args.setting or "small"]
    if args.set:
        if args.full:
            parser.error("--set changes the setting; --full is the report's, as fixed")
        try:
            setting = override(setting, args.set)
        except ValueError as e:
            parser.error(f"--set: {e}")
    sweep = None
    if args.convergence_from is not None:
        if "convergence" in args.only:
            parser.error(
                "--convergence-from replaces the convergence module: leave it out of --only"
            )
        sweep = _saved_sweep(args.convergence_from, setting, parser)
    cache_dir = enable_compile_cache(args.no_compile_cache)
    start = time.perf_counter()
    results = run_parallel(args.only, setting, args.jobs, args.mutate, cache_dir, sweep)
    elapsed = time.perf_counter() - start
    checks = [c for r in results.values() for c in r["checks"] if not c.finding]
    findings = [c for r in results.values() for c in r["checks"] if c.finding]
    failed = [c for c in checks if not c.passed]
    print(
        f"\n{len(checks) - len(failed)} of {len(checks)} checks passed; "
        f"{sum(c.passed for c in findings)} of {len(findings)} findings hold, "
        f"{sum(not c.passed for c in findings)} do not; {elapsed:.0f} s "
        f"({setting.name} setting{'' if args.mutate is None else ', mutation ' + args.mutate}; "
        f"{environment()})"
    )
    if args.json is not None:
        run_info = {"setting": setting.name, "environment": environment(), "seconds": elapsed}
        write_json(args.json, {**_jsonable(results), "_run": run_info})
    if args.full and args.mutate is None:
        from gns_jax.theory.report import write_report

        write_report(results, setting, HERE, environment(), elapsed)
        print(f"wrote {HERE / 'README.md'} and {HERE / 'figures'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
