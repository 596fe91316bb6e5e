"""Runs the modules of :mod:`theory` and prints their verdicts, in one process or spread over
several (``python -m gns_jax.theory --jobs N``)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from gns_jax.theory import convergence, gradients, unbiased, variance
from gns_jax.theory.common import Check
from gns_jax.theory.mutations import mutated

__all__ = ["MODULES", "chains", "run", "run_parallel"]

MODULES = {
    "unbiased": unbiased,
    "variance": variance,
    "gradients": gradients,
    "convergence": convergence,
}


def _print_check(check: Check) -> None:
    # One write, so that the lines of two worker processes do not interleave within a check.
    print(
        f"[{check.verdict}] {check.claim}  ({check.module})\n"
        f"       measured:  {check.measured}\n"
        f"       criterion: {check.criterion}",
        flush=True,
    )


def run(names, setting, *, quiet: bool = False) -> dict:
    """Runs the named modules; returns ``{name: result}`` with ``seconds`` (wall) and
    ``cpu_seconds`` (this process's CPU time: what the module costs on a core of its own, when
    other work shares the machine) added to each."""
    results = {}
    for name in names:
        if not quiet:
            print(f"-- {name} ({setting.name} setting)", file=sys.stderr, flush=True)
        start, cpu = time.perf_counter(), time.process_time()
        results[name] = MODULES[name].run(setting)
        results[name]["seconds"] = time.perf_counter() - start
        results[name]["cpu_seconds"] = time.process_time() - cpu
        if not quiet:
            for check in results[name]["checks"]:
                _print_check(check)
            print(
                f"   ({results[name]['seconds']:.0f} s, {results[name]['cpu_seconds']:.0f} s CPU)",
                file=sys.stderr,
                flush=True,
            )
    return results


def _run_chain(names, setting, mutate, cache_dir=None):
    """One worker's share: ``names`` in order, with ``mutate`` in force (a spawned process),
    compiling through the persistent cache in ``cache_dir`` (None: as configured already)."""
    if cache_dir is not None:
        from gns_jax.cli import enable_compile_cache

        enable_compile_cache(False, Path(cache_dir))
    with mutated(mutate):
        return run(names, setting)


def chains(names, jobs: int) -> list[list[str]]:
    """Splits the modules into at most ``jobs`` ordered chains that can run side by side.

    The modules are dealt to the chains greedily by their default-setting cost (seconds,
    measured), longest first.
    """
    cost = {"convergence": 190, "gradients": 115, "variance": 40, "unbiased": 22}
    units = sorted(([n] for n in names), key=lambda u: -sum(cost[n] for n in u))
    out: list[list[str]] = [[] for _ in range(max(1, min(jobs, len(units))))]
    for unit in units:
        min(out, key=lambda c: sum(cost[n] for n in c)).extend(unit)
    order = {n: i for i, n in enumerate(names)}
    return [sorted(c, key=order.__getitem__) for c in out if c]


def run_parallel(
    names,
    setting,
    jobs: int,
    mutate: str | None = None,
    cache_dir: Path | None = None,
) -> dict:
    """:func:`run` with the modules spread over ``jobs`` processes (most of each module is
    single-threaded Python driving small XLA calls, so two processes use two cores); the
    results are those of a serial run (every module draws from its own fixed seeds). The
    workers use JAX's persistent compilation cache in ``cache_dir`` (None: none)."""
    import concurrent.futures
    import multiprocessing

    plan = chains(names, jobs)
    if len(plan) == 1:
        return _run_chain(names, setting, mutate, None)
    context = multiprocessing.get_context("spawn")
    # Each worker runs XLA's CPU kernels on its own thread: two workers with a thread pool each
    # would oversubscribe the cores. The spawned processes read the variable when jax loads.
    saved = os.environ.get("XLA_FLAGS")
    os.environ["XLA_FLAGS"] = f"{saved or ''} --xla_cpu_multi_thread_eigen=false".strip()
    try:
        with concurrent.futures.ProcessPoolExecutor(len(plan), mp_context=context) as pool:
            n = len(plan)
            args = (plan, [setting] * n, [mutate] * n, [cache_dir] * n)
            parts = list(pool.map(_run_chain, *args))
    finally:
        if saved is None:
            os.environ.pop("XLA_FLAGS", None)
        else:
            os.environ["XLA_FLAGS"] = saved
    merged = {k: v for part in parts for k, v in part.items()}
    return {name: merged[name] for name in names}
