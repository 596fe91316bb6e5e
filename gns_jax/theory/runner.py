"""Runs the modules of :mod:`theory` and prints their verdicts, in one process or spread over
several (``python -m gns_jax.theory --jobs N``)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import NamedTuple

from gns_jax.theory import convergence, gradients, unbiased, variance
from gns_jax.theory.common import Check
from gns_jax.theory.mutations import mutated
from gns_jax.theory.problem import sharing

__all__ = ["COST", "MODULES", "SPLIT", "Part", "chains", "cost", "run", "run_parallel"]

MODULES = {
    "unbiased": unbiased,
    "variance": variance,
    "gradients": gradients,
    "convergence": convergence,
}
# CPU seconds of each module in the small setting, measured on 2 cores with the two workers of
# the default run (compilation cache warm).
COST = {"convergence": 100, "gradients": 34, "variance": 15, "unbiased": 9}
# The modules whose work can be split between workers (``run_part(setting, share=(lo, hi))`` and
# ``merge(setting, parts)``): ``(divisible, fixed)``, the CPU seconds of the work that divides by
# share (convergence: its SGD runs) and what a later part (``lo > 0``) pays whatever its share
# (L_0 and the samplers' compilation; beside gradients it shares the model and its training).
SPLIT = {"convergence": (80, 10)}
MIN_SHARE = 0.05  # below it, the part's fixed cost is most of what it takes over


class Part(NamedTuple):
    """A module, or the share ``[lo, hi)`` of a splittable module's work (:data:`SPLIT`)."""

    name: str
    lo: float = 0.0
    hi: float = 1.0

    @property
    def whole(self) -> bool:
        return (self.lo, self.hi) == (0.0, 1.0)

    def __str__(self) -> str:
        return self.name if self.whole else f"{self.name} [{self.lo:g}, {self.hi:g})"


def _print_check(check: Check) -> None:
    # One write, so that the lines of two worker processes do not interleave within a check.
    print(
        f"[{check.verdict}] {check.claim}  ({check.module})\n"
        f"       measured:  {check.measured}\n"
        f"       criterion: {check.criterion}",
        flush=True,
    )


def run(names, setting, *, quiet: bool = False) -> dict:
    """Runs the named modules (names or :class:`Part` s) in this process, sharing one model among
    them (:func:`gns_jax.theory.problem.sharing`); returns ``{name: result}`` (``{Part: part}``
    for a share of a module: a :func:`merge_parts` input) with ``seconds`` (wall) and
    ``cpu_seconds`` (this process's CPU time: what the module costs on a core of its own, when
    other work shares the machine) added to each."""
    results = {}
    with sharing():
        for unit in names:
            part = unit if isinstance(unit, Part) else Part(unit)
            if not quiet:
                print(f"-- {part} ({setting.name} setting)", file=sys.stderr, flush=True)
            start, cpu = time.perf_counter(), time.process_time()
            module = MODULES[part.name]
            if part.whole:
                result = module.run(setting)
            else:
                result = module.run_part(setting, share=(part.lo, part.hi))
            result["seconds"] = time.perf_counter() - start
            result["cpu_seconds"] = time.process_time() - cpu
            results[part.name if part.whole else part] = result
            if not quiet:
                for check in result.get("checks", []):
                    _print_check(check)
                print(
                    f"   ({result['seconds']:.0f} s, {result['cpu_seconds']:.0f} s CPU)",
                    file=sys.stderr,
                    flush=True,
                )
    return results


def merge_parts(parts: dict, setting, *, quiet: bool = False) -> dict:
    """``{name: result}`` from the results of :func:`run` s, the :class:`Part` s of a split
    module merged into one result (its ``seconds`` and ``cpu_seconds`` the parts' sums), its
    checks printed."""
    merged = {k: v for k, v in parts.items() if not isinstance(k, Part)}
    for name in dict.fromkeys(k.name for k in parts if isinstance(k, Part)):
        mine = sorted((k for k in parts if isinstance(k, Part) and k.name == name), key=tuple)
        result = MODULES[name].merge(setting, [parts[k] for k in mine])
        result["seconds"] = sum(parts[k]["seconds"] for k in mine)
        result["cpu_seconds"] = sum(parts[k]["cpu_seconds"] for k in mine)
        if not quiet:
            print(
                f"-- {name}: its {len(mine)} parts merged "
                f"({result['cpu_seconds']:.0f} s CPU in all)",
                file=sys.stderr,
                flush=True,
            )
            for check in result["checks"]:
                _print_check(check)
        merged[name] = result
    return merged


def _run_chain(names, setting, mutate, cache_dir=None):
    """One worker's share: ``names`` in order, with ``mutate`` in force (a spawned process),
    compiling through the persistent cache in ``cache_dir`` (None: as configured already)."""
    if cache_dir is not None:
        from gns_jax.cli import enable_compile_cache

        enable_compile_cache(False, Path(cache_dir))
    with mutated(mutate):
        return run(names, setting)


def cost(part: Part) -> float:
    """What ``part`` costs, in CPU seconds, by :data:`COST` and :data:`SPLIT`."""
    if part.whole:
        return COST[part.name]
    divisible, fixed = SPLIT[part.name]
    if part.lo == 0.0:  # the first part: the whole module less the runs it leaves
        return COST[part.name] - divisible * (1.0 - part.hi)
    return fixed + divisible * (part.hi - part.lo)


def chains(names, jobs: int) -> list[list[Part]]:
    """Splits the modules into at most ``jobs`` ordered chains that can run side by side.

    The modules are dealt to the chains greedily by their default-setting cost (:data:`COST`),
    longest first. Then a splittable module (:data:`SPLIT`) in the busiest chain gives the share
    of its work that evens the load to the lightest chain (or to an idle worker): the busiest
    keeps ``Part(name, 0, cut)``, the lightest runs ``Part(name, cut, 1)`` last.
    """

    def load(chain):
        return sum(cost(p) for p in chain)

    out: list[list[Part]] = [[] for _ in range(max(1, min(jobs, len(names))))]
    for name in sorted(names, key=lambda n: -COST[n]):
        min(out, key=load).append(Part(name))
    if jobs > len(out):
        out.append([])  # an idle worker
    busiest, lightest = max(out, key=load), min(out, key=load)
    split = [p for p in busiest if p.name in SPLIT]
    if jobs > 1 and split and lightest is not busiest:
        name = split[0].name
        divisible, fixed = SPLIT[name]
        # busiest - share divisible = lightest + fixed + share divisible
        share = (load(busiest) - load(lightest) - fixed) / (2 * divisible)
        if share >= MIN_SHARE:
            cut = round(1.0 - share, 2)
            busiest[busiest.index(split[0])] = Part(name, 0.0, cut)
            lightest.append(Part(name, cut, 1.0))
    order = {n: i for i, n in enumerate(names)}
    return [sorted(c, key=lambda p: (order[p.name], p.lo)) for c in out if c]


def run_parallel(
    names,
    setting,
    jobs: int,
    mutate: str | None = None,
    cache_dir: Path | None = None,
) -> dict:
    """:func:`run` with the modules spread over ``jobs`` processes (most of each module is
    single-threaded Python driving small XLA calls, so two processes use two cores), the parts of
    a split module merged; the results are those of a serial run (every module draws from its own
    fixed seeds). The workers use JAX's persistent compilation cache in ``cache_dir`` (None:
    none). Each result gains ``workers``: ``{worker: CPU seconds}`` it took on each."""
    import concurrent.futures
    import multiprocessing

    plan = chains(names, jobs)
    if len(plan) == 1:
        parts = [_run_chain(plan[0], setting, mutate, None)]
    else:
        context = multiprocessing.get_context("spawn")
        # Each worker runs XLA's CPU kernels on its own thread: two workers with a thread pool
        # each would oversubscribe the cores. The spawned processes read the variable when jax
        # loads.
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
    workers: dict[str, dict[int, float]] = {}
    for w, part in enumerate(parts):
        for key, result in part.items():
            name = key.name if isinstance(key, Part) else key
            mine = workers.setdefault(name, {})
            mine[w] = mine.get(w, 0.0) + result["cpu_seconds"]
    merged = merge_parts({k: v for part in parts for k, v in part.items()}, setting)
    for name, result in merged.items():
        result["workers"] = workers[name]
    return {name: merged[name] for name in names}
