"""``python -m theory [--full] [--only NAME ...] [--json PATH] [--from-json PATH]``.

Runs the checks and prints their verdicts.

Exit status 0 when every check passes, 1 when one fails (each FAIL is printed with its figures).
``--full`` runs the report setting and rewrites ``theory/README.md`` and ``theory/figures/``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import jax
import numpy as np

from theory import convergence, gradients, unbiased, variance
from theory.common import FULL, SMALL, Check

MODULES = {
    "unbiased": unbiased,
    "variance": variance,
    "gradients": gradients,
    "convergence": convergence,
}
HERE = Path(__file__).resolve().parent


def _print_check(check: Check) -> None:
    verdict = "PASS" if check.passed else "FAIL"
    print(f"[{verdict}] {check.claim}  ({check.module})", flush=True)
    print(f"       measured:  {check.measured}", flush=True)
    print(f"       criterion: {check.criterion}", flush=True)


def environment() -> str:
    return (
        f"{platform.machine()}, {jax.device_count()} x {jax.devices()[0].device_kind} "
        f"({jax.default_backend()} backend), jax {jax.__version__}, "
        f"python {platform.python_version()}"
    )


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if isinstance(value, Check):
            return value._asdict()
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def run(names, setting, *, quiet: bool = False) -> dict:
    """Runs the named checks; returns ``{name: result}`` with ``seconds`` added to each."""
    results = {}
    for name in names:
        if not quiet:
            print(f"-- {name} ({setting.name} setting)", file=sys.stderr, flush=True)
        start = time.perf_counter()
        results[name] = MODULES[name].run(setting)
        results[name]["seconds"] = time.perf_counter() - start
        if not quiet:
            for check in results[name]["checks"]:
                _print_check(check)
            print(f"   ({results[name]['seconds']:.0f} s)", file=sys.stderr, flush=True)
    return results


def _report_from_json(path: Path, parser) -> int:
    from theory.report import results_from_json, write_report

    try:
        saved = json.loads(path.read_text())
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
    parser = argparse.ArgumentParser(prog="python -m theory", description=__doc__.split("\n")[0])
    parser.add_argument("--full", action="store_true", help="the report setting; rewrites README")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=sorted(MODULES),
        default=list(MODULES),
        metavar="NAME",
        help=f"run only these checks (of {', '.join(MODULES)})",
    )
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    parser.add_argument(
        "--from-json",
        type=Path,
        help="rewrite theory/README.md from a --full run's --json file, without rerunning",
    )
    args = parser.parse_args(argv)
    if args.from_json is not None:
        return _report_from_json(args.from_json, parser)
    if args.json is not None and not args.json.parent.is_dir():
        parser.error(f"--json: folder {args.json.parent} does not exist")
    setting = FULL if args.full else SMALL
    start = time.perf_counter()
    results = run(args.only, setting)
    elapsed = time.perf_counter() - start
    checks = [c for r in results.values() for c in r["checks"]]
    failed = [c for c in checks if not c.passed]
    print(
        f"\n{len(checks) - len(failed)} of {len(checks)} checks passed in {elapsed:.0f} s "
        f"({setting.name} setting; {environment()})"
    )
    if args.json is not None:
        run_info = {"setting": setting.name, "environment": environment(), "seconds": elapsed}
        args.json.write_text(json.dumps({**_jsonable(results), "_run": run_info}, indent=1))
    if args.full:
        from theory.report import write_report

        write_report(results, setting, HERE, environment(), elapsed)
        print(f"wrote {HERE / 'README.md'} and {HERE / 'figures'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
