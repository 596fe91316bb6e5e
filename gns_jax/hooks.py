"""The periodic work of :func:`gns_jax.fit`'s loop: evaluation, the epoch's report, checkpoints
and the running results, each a :class:`Hook`. Host-side.

``fit`` trains in *windows* (:meth:`gns_jax.step.StepperLike.run`: a run of batches after which
the state is complete, a pipeline drained). After every window it calls every hook's
:meth:`~Hook.after_window`, and at every epoch's end every hook's :meth:`~Hook.after_epoch`, in
the hooks' order (:meth:`gns_jax.run.Run.hooks`); a window ends at the epoch's end or where a
hook is due mid-epoch (:meth:`~Hook.until_due`). What the hooks read of the loop is a
:class:`Loop`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from gns_jax.checkpoint import RunCheckpoints
from gns_jax.evaluate import Evaluator
from gns_jax.loader import Batch
from gns_jax.probes import IoMeter
from gns_jax.results import RunRecord
from gns_jax.step import StepperLike

__all__ = ["NEVER", "Checkpointing", "Evaluation", "Hook", "Loop", "Publish", "Report", "heard"]

NEVER = 2**62  # batches until a hook that is never due mid-epoch is


@dataclasses.dataclass
class Loop:
    """Where ``fit``'s loop is: what its hooks read.

    Attributes:
      state: the train state, as the stepper holds it (replicated over a data-parallel mesh).
      epoch: the epoch in progress (from 0).
      first: the epoch's first batch (past 0 for the epoch a run resumes in).
      batch: the last batch trained (its ``state`` is the loader's position after it).
      variables: the model's ``(params, rest)`` that the evaluation read at this epoch's end
        (None when it did not evaluate).
    """

    state: Any
    epoch: int = 0
    first: int = 0
    batch: Batch | None = None
    variables: tuple | None = None


class Hook:
    """Something ``fit`` does every so often; the defaults do nothing."""

    def until_due(self, batches_done: int) -> int:
        """Batches from the ``batches_done``-th of the run to this hook's next mid-epoch call
        (:data:`NEVER`: none)."""
        return NEVER

    def after_window(self, loop: Loop, last: bool) -> None:
        """After a window of batches (``last``: it ended the epoch)."""

    def after_epoch(self, loop: Loop, row: dict) -> None:
        """At an epoch's end, with the epoch's entry of the results' ``epochs`` (which it may
        add to before :class:`Report` records it)."""

    def interrupted(self, loop: Loop, mid_epoch: bool) -> None:
        """When ``fit`` stops on a request (:mod:`gns_jax.preempt`), after the window that ended
        with it (``mid_epoch``: before the epoch's end)."""


def heard(record: RunRecord, progress, batch, loss, stage_losses) -> None:
    """The ``on_batch`` of :meth:`~gns_jax.step.StepperLike.run` (with ``record`` and
    ``progress`` bound): the batch into the record, one step of the progress."""
    record.add(batch, loss, stage_losses)
    progress.advance()


class Evaluation(Hook):
    """Evaluates the model at the end of every ``every``-th epoch and of the last; the record
    keeps the scores and the best epoch's parameters. Evaluation's reads are its own
    (``eval_*`` keys of the epoch)."""

    def __init__(self, evaluator: Evaluator, stepper: StepperLike, graphdef, record: RunRecord,
                 io_meter: IoMeter, every: int, epochs: int):  # fmt: skip
        self.evaluator, self.stepper, self.graphdef = evaluator, stepper, graphdef
        self.record, self.io_meter, self.every, self.epochs = record, io_meter, every, epochs

    def after_epoch(self, loop: Loop, row: dict) -> None:
        if (loop.epoch + 1) % self.every and loop.epoch != self.epochs - 1:
            return
        start = time.perf_counter()
        loop.variables = self.stepper.model_variables(loop.state)
        scores = self.evaluator.scores(self.graphdef, loop.variables, self.record.task.metrics)
        self.record.evaluated(
            row, loop.epoch, scores, time.perf_counter() - start, loop.variables[0]
        )
        row |= {f"eval_{k}": v for k, v in self.io_meter.lap().items()}


class Report(Hook):
    """Records the epoch's entry in the history, samples the memory probes and logs the
    epoch's line."""

    def __init__(self, record: RunRecord, io_meter: IoMeter, log: Callable[[str], None],
                 epochs: int, batch_size: int, num_batches: int):  # fmt: skip
        self.record, self.io_meter, self.log, self.epochs = record, io_meter, log, epochs
        self.batch_size, self.num_batches = batch_size, num_batches

    def after_epoch(self, loop: Loop, row: dict) -> None:
        self.record.history.append(row)
        self.io_meter.sample()
        seeds = (self.num_batches - loop.first) * self.batch_size
        self.log(self.record.line(row, self.epochs, seeds))


class Checkpointing(Hook):
    """Saves a checkpoint every ``checkpoint_every`` batches within an epoch and at every
    epoch's end (:class:`~gns_jax.checkpoint.RunCheckpoints`). Before any epoch was evaluated
    it saves the model's parameters of the moment as the best."""

    def __init__(self, checkpoints: RunCheckpoints, stepper: StepperLike, record: RunRecord):
        self.checkpoints, self.stepper, self.record = checkpoints, stepper, record

    def until_due(self, batches_done: int) -> int:
        return self.checkpoints.until_due(batches_done)

    def after_window(self, loop: Loop, last: bool) -> None:
        if self.checkpoints.due(self.record.totals.batches, last):
            self._save(loop, False, None)

    def after_epoch(self, loop: Loop, row: dict) -> None:
        self._save(loop, True, loop.variables)

    def interrupted(self, loop: Loop, mid_epoch: bool) -> None:
        if mid_epoch and loop.batch is not None:  # an epoch's end saved already
            self._save(loop, False, None)

    def _save(self, loop: Loop, epoch_done: bool, variables) -> None:
        state = self.stepper.local(loop.state)
        params = None
        if self.record.best_params is None:  # nothing evaluated yet: the model's now
            params = (variables or self.stepper.model_variables(loop.state))[0]
        self.checkpoints.save(state, self.record, loop.batch.state, epoch_done, params)


class Publish(Hook):
    """Computes the results so far (``status: "running"``) at every epoch's end and hands them
    to ``on_epoch`` (if any). With several processes every process computes them, ``on_epoch``
    or not: they sum over the processes."""

    def __init__(self, results: Callable[[str], dict], on_epoch: Callable[[dict], None] | None):
        self.results, self.on_epoch = results, on_epoch

    def after_epoch(self, loop: Loop, row: dict) -> None:
        running = self.results("running")
        if self.on_epoch is not None:
            self.on_epoch(running)
