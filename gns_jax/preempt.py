"""Preemption: SIGTERM or SIGINT during training stops it cleanly. Host-side.

Clusters preempt jobs with SIGTERM and a grace period (SLURM, Kubernetes); a user stops one with
Ctrl-C (SIGINT). :class:`Preemption`, installed by ``gns-jax train`` around the run, turns the
first such signal into a request that :func:`gns_jax.fit` reads after every step: the step in
flight finishes, the steps dispatched ahead are waited for, a checkpoint is written at the batch
reached (with ``--checkpoint-dir``), and ``fit`` raises :class:`Interrupted` carrying the results
so far (``"status": "interrupted"``), which the command writes to ``--out`` before it exits with
``128 + signal`` (143 for SIGTERM, 130 for SIGINT). ``--resume`` then goes on from that
checkpoint and ends with the numbers of an uninterrupted run.

A second signal while the run is stopping (writing its checkpoint or results) ends the process
at once, with the signal's default action: the checkpoint being written is abandoned (checkpoints
are written to a temporary folder and renamed), the previous one stays readable.
"""

from __future__ import annotations

import signal
import threading

from gns_jax.errors import GnsJaxError

__all__ = ["SIGNALS", "Interrupted", "Preemption"]

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(GnsJaxError):
    """Training stopped on a signal. ``results``: the JSON results so far (``status``
    ``"interrupted"``); ``signum``: the signal; ``where``: the epoch and batch reached."""

    def __init__(self, signum: int, results: dict, where: str):
        self.signum, self.results, self.where = signum, results, where
        super().__init__(f"stopped by {signal.Signals(signum).name} {where}")

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


class Preemption:
    """SIGTERM and SIGINT as a stop request for the duration of a ``with`` block (main thread
    only; elsewhere it does nothing). ``requested`` is the signal received, or None."""

    def __init__(self):
        self.requested: int | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame) -> None:
        if self.requested is not None:  # a second signal: stop now, the default way
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
            return
        self.requested = signum

    def stop_requested(self) -> bool:
        return self.requested is not None

    def __enter__(self) -> Preemption:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
