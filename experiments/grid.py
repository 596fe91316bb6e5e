"""Runs a grid of ``gns-jax train`` configurations and aggregates it without pooling unlike runs.

Every run is one ``gns-jax train`` process (its own memory, the persistent compilation cache
shared) writing its JSON results (``docs/results.md``) to ``OUT/runs/<name>.json``; a run whose
file says ``"status": "completed"`` is not run again, so a grid can be stopped and restarted.
Aggregation groups runs by dataset and label and refuses to pool runs whose configurations differ
in anything but the seed (:func:`groups`), so a 1 % and a 20 % cache never average together.

Used by ``experiments/estimators.py`` (the input-layer estimators against NS) and by any script
that needs runs side by side with one command.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from gns_jax.config import TrainConfig

__all__ = [
    "Run",
    "environment_line",
    "groups",
    "load_folder",
    "load_runs",
    "mean_std",
    "plot_per_dataset",
    "run_grid",
]


@dataclasses.dataclass(frozen=True)
class Run:
    """One ``gns-jax train`` run: ``args`` are its options (``--dataset`` and ``--seed`` apart)."""

    dataset: str
    label: str
    seed: int
    args: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        digest = hashlib.sha256(
            json.dumps([self.dataset, self.args, self.seed]).encode()
        ).hexdigest()[:10]
        return f"{file_name(self.dataset)}__{file_name(self.label)}__s{self.seed}__{digest}"

    def command(self, out: Path, checkpoint_dir: Path | None = None) -> list[str]:
        """The ``gns-jax train`` command writing ``out``; with ``checkpoint_dir`` it checkpoints
        there at every epoch's end and resumes from the latest checkpoint found there."""
        resume = [] if checkpoint_dir is None else ["--checkpoint-dir", str(checkpoint_dir)]
        return [
            sys.executable,
            "-m",
            "gns_jax",
            "train",
            "--dataset",
            self.dataset,
            "--seed",
            str(self.seed),
            *self.args,
            *resume,
            *(["--resume"] if resume else []),
            "--quiet",
            "--out",
            str(out),
        ]


def _completed(path: Path) -> bool:
    try:
        return json.loads(path.read_text()).get("status") == "completed"
    except (OSError, ValueError):
        return False


CHECKPOINTS = "checkpoints"  # OUT/checkpoints/<name>: a resumable run's, removed when it ends


def run_grid(
    runs: Iterable[Run], out: Path, *, env: dict | None = None, resumable: bool = False
) -> list[Path]:
    """Runs every run not completed yet, in order; returns the JSON paths of all runs.

    ``resumable``: each run checkpoints at every epoch's end in ``OUT/checkpoints/<name>``, so a
    run killed part way (a session's end) goes on from its last finished epoch the next time
    instead of starting again; the folder is removed once the run has completed, and the run
    file records it as ``checkpoints/<name>`` (relative to ``OUT``)."""
    runs = list(runs)
    folder = out / "runs"
    folder.mkdir(parents=True, exist_ok=True)
    if resumable:
        (out / CHECKPOINTS).mkdir(exist_ok=True)  # its runs lock their folders beside them
    paths = []
    for i, run in enumerate(runs):
        path = folder / f"{run.name}.json"
        paths.append(path)
        if _completed(path):
            continue
        start = time.perf_counter()
        print(
            f"[{i + 1}/{len(runs)}] {run.dataset} {run.label} seed {run.seed}",
            file=sys.stderr,
            flush=True,
        )
        # relative to the working folder: the run file in progress names no absolute path
        checkpoints = Path(os.path.relpath(out / CHECKPOINTS / run.name)) if resumable else None
        proc = subprocess.run(
            run.command(path, checkpoints),
            env={**os.environ, **(env or {})},
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            print(proc.stderr[-2000:], file=sys.stderr)
            raise SystemExit(f"run {run.name} failed with exit status {proc.returncode}")
        result = json.loads(path.read_text())
        result["label"] = run.label  # what aggregation groups by
        if checkpoints is not None:  # bookkeeping of the grid: no path of this machine
            result["config"]["checkpoint_dir"] = f"{CHECKPOINTS}/{run.name}"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        os.replace(tmp, path)
        if checkpoints is not None:
            shutil.rmtree(checkpoints, ignore_errors=True)
        print(f"    done in {time.perf_counter() - start:.0f}s", file=sys.stderr, flush=True)
    return paths


def load_folder(folder: Path) -> list[dict]:
    """Every completed run in ``folder/runs`` (each carries its ``label``)."""
    results = []
    for path in sorted((folder / "runs").glob("*.json")):
        if _completed(path):
            results.append(json.loads(path.read_text()))
    return results


def load_runs(paths: Iterable[Path], runs: Iterable[Run]) -> list[dict]:
    """The completed results, each with its run's ``label`` added."""
    out = []
    for path, run in zip(paths, runs):
        if _completed(path):
            result = json.loads(path.read_text())
            result["label"] = run.label
            out.append(result)
    return out


_SEED_KEYS = ("seed", "split_seed")
_RESUME_KEYS = ("checkpoint_dir", "checkpoint_every", "resume")  # how a run was kept, not what


def groups(results: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """Results grouped by ``(dataset, label)``; raises if a group mixes configurations."""
    out: dict[tuple[str, str], list[dict]] = {}
    for r in results:
        out.setdefault((r["dataset"], r["label"]), []).append(r)
    # An option a run's version did not have yet counts as its default.
    defaults = json.loads(json.dumps(TrainConfig().to_json()))
    ignored = _SEED_KEYS + _RESUME_KEYS
    for key, members in out.items():
        configs = {
            json.dumps(
                {k: v for k, v in (defaults | m["config"]).items() if k not in ignored},
                sort_keys=True,
            )
            for m in members
        }
        if len(configs) > 1:
            raise ValueError(f"{key}: runs with different configurations share a label")
    return out


def file_name(text: str) -> str:
    """``text`` (a dataset's name, path or synthetic spec; a label) as a portable file name:
    the last path component, every character but letters, digits and ``-_.`` as ``_``."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(text).name)


def plot_per_dataset(
    results: list[dict], folder: Path, panels: int, draw, order=sorted, baselines=()
) -> list[Path]:
    """One figure of ``panels`` axes per dataset, ``folder/<dataset>.png`` (:func:`file_name`):
    ``draw(axes, dataset, labels, grouped, palette)`` fills it, ``order`` sorts its labels.

    ``palette`` (:class:`gns_jax.plotting.Palette`) holds every label of ``results`` in
    ``order``, ``baselines`` in black: a label has one colour and marker in every figure. The
    dataset is the figure's title and one legend below the panels names every series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gns_jax.plotting import Palette, figure_legend, legend_columns, save_png

    folder.mkdir(parents=True, exist_ok=True)
    grouped = groups(results)
    palette = Palette(order(sorted({lab for _, lab in grouped})), baselines=baselines)
    paths = []
    for dataset in sorted({d for d, _ in grouped}):
        labels = order([lab for d, lab in grouped if d == dataset])
        width = 5.3 * panels
        rows = math.ceil(len(labels) / legend_columns(labels, width))  # the legend's
        fig, axes = plt.subplots(
            1, panels, figsize=(width, 4.3 + 0.25 * rows), layout="constrained", squeeze=False
        )
        draw(axes[0], dataset, labels, grouped, palette)
        fig.suptitle(dataset)
        figure_legend(fig)
        path = folder / f"{file_name(dataset)}.png"
        save_png(fig, path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths


def pm(mean: float, sd: float, n: int) -> str:
    """``"81.53 ± 0.67"``, or the value alone for a single run (no spread to show)."""
    return f"{mean:.2f}" if n < 2 else f"{mean:.2f} ± {sd:.2f}"


def mean_std(values) -> tuple[float, float]:
    values = np.asarray([v for v in values if v is not None], dtype=float)
    if values.size == 0:
        return float("nan"), float("nan")
    return float(values.mean()), float(values.std(ddof=1)) if values.size > 1 else 0.0


def environment_line(results: list[dict]) -> str:
    """Hardware, versions and commit beside every table."""
    env = results[0]["environment"] if results else {}
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return (
        f"Ran on {env.get('cpu', '?')} ({env.get('cores', '?')} cores, "
        f"{env.get('memory_gib', '?')} GiB), {env.get('backend', '?')} backend, "
        f"jax {env.get('jax', '?')}, python {env.get('python', '?')}; commit {commit}."
    )
