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

``--from-json`` reads its saved ``--json`` file compressed (``.json.xz``) or inside a tar
archive, in place: ``gns_jax/theory/second-graph/runs.tar.xz/tolokers.json``
(:mod:`gns_jax.theory.saved`).
"""

from __future__ import annotations

import argparse
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
    write_report(results, FULL, HERE, meta["environment"], meta["seconds"])
    print(f"wrote {HERE / 'README.md'} and {HERE / 'figures'} from {path}")
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
        "--json", type=Path, help="also write every figure to this JSON file (.xz: compressed)"
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        help="rewrite this package's README.md from a --full run's --json file, without rerunning",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.from_json is not None:
        return _report_from_json(args.from_json, parser)
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
    cache_dir = enable_compile_cache(args.no_compile_cache)
    start = time.perf_counter()
    results = run_parallel(args.only, setting, args.jobs, args.mutate, cache_dir)
    elapsed = time.perf_counter() - start
    checks = [c for r in results.values() for c in r["checks"] if not c.finding]
    findings = [c for r in results.values() for c in r["checks"] if c.finding]
    failed = [c for c in checks if not c.passed]
    # The busiest worker's CPU time: the wall time on cores of their own (the wall time above
    # grows when other work shares the machine).
    per_worker: dict[int, float] = {}
    for r in results.values():
        for worker, cpu in r["workers"].items():
            per_worker[worker] = per_worker.get(worker, 0.0) + cpu
    busiest = max(per_worker.values())
    print(
        f"\n{len(checks) - len(failed)} of {len(checks)} checks passed; "
        f"{sum(c.passed for c in findings)} of {len(findings)} findings hold, "
        f"{sum(not c.passed for c in findings)} do not; {elapsed:.0f} s, busiest worker "
        f"{busiest:.0f} s CPU "
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
