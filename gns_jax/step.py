"""The train state and the pure, jitted train step; :class:`Stepper` runs it batch after batch.

Device side: :func:`train_step` is pure (``state, batch, key -> state, metrics``) over the
functional split of a Flax NNX model (``nnx.split`` once, ``nnx.merge`` inside jit), so it can be
jitted, differentiated and called eagerly in tests. It trains any NNX module called as
``model(x, blocks, *, key=None)`` that returns the seed slots' logits (:mod:`gns_jax.models`);
every variable of the model (parameters, batch statistics, ``nnx.Rngs`` streams) goes in and
comes back. The loss is the task's (:mod:`gns_jax.tasks`) or the user's: one value a seed slot,
averaged over the real seeds. The dropout key of step ``t`` is ``fold_in(key, t)``.

:func:`batch_loss` (the loss of a step as a function of the parameters) and :func:`descend` (one
optimiser step down it) are the step's two halves; the pipeline's stage step
(:func:`gns_jax.pipeline.stage_step`) is made of the same two, with a stage's forward pass. What
:func:`gns_jax.fit` asks of a stepper, :class:`Stepper` or the pipeline's, is :class:`StepperLike`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from gns_jax.batch import DeviceBatch
from gns_jax.evaluate import in_eval_mode
from gns_jax.meters import CompileCounter
from gns_jax.parallel import DataParallel, make_parallel_train_step
from gns_jax.tasks import LossFn, Task, masked_mean, softmax_loss

__all__ = [
    "Stepper",
    "StepperLike",
    "TrainState",
    "batch_loss",
    "descend",
    "eval_graphdef",
    "init_state",
    "make_train_step",
    "model_of",
    "train_step",
]


class TrainState(NamedTuple):
    """Everything that changes during training; a pytree.

    Attributes:
      params: the model's ``nnx.Param`` variables (what the optimiser updates).
      opt_state: the optimiser's state.
      step: int32 scalar, optimiser steps taken.
      rest: the model's other variables (none for GraphSAGE): batch statistics, the counters and
        keys of ``nnx.Rngs`` streams, ...; what the model's call leaves in them is carried to
        the next step.
    """

    params: nnx.State
    opt_state: optax.OptState
    step: jax.Array
    rest: nnx.State


def init_state(
    model: nnx.Module, tx: optax.GradientTransformation
) -> tuple[nnx.GraphDef, TrainState]:
    """Splits ``model`` into its static graph definition and the initial :class:`TrainState`.

    The model is put in training mode first (``model.train()``: dropout on, batch statistics
    computed and updated); :func:`eval_graphdef` gives the same model in evaluation mode."""
    model.train()
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    # Copies: the jitted step donates the state, which must not free the model's own arrays.
    params, rest = jax.tree.map(jnp.copy, (params, rest))
    with jax.transfer_guard_host_to_device("allow"):
        return graphdef, TrainState(params, tx.init(params), jnp.zeros((), jnp.int32), rest)


def model_of(graphdef: nnx.GraphDef, state: TrainState, params: nnx.State | None = None):
    """The NNX module of ``state`` (with ``params`` instead of its own, if given), in
    evaluation mode (``model.eval()``: no dropout, running batch statistics)."""
    model = nnx.merge(graphdef, state.params if params is None else params, state.rest)
    model.eval()
    return model


def eval_graphdef(graphdef: nnx.GraphDef, state: TrainState) -> nnx.GraphDef:
    """The graph definition of the training model ``graphdef`` in evaluation mode (the modes
    are static attributes: another graph definition, traced once)."""
    return in_eval_mode(graphdef, (state.params, state.rest))


def _new_rest(model: nnx.Module) -> nnx.State:
    """What a call left in the model's variables other than its parameters."""
    return nnx.state(model, nnx.Not(nnx.Param))


def batch_loss(
    graphdef: nnx.GraphDef,
    rest: nnx.State,
    forward: Callable[[nnx.Module], tuple[jax.Array, Any]],
    labels: jax.Array,
    seed_mask: jax.Array,
    loss: LossFn,
) -> Callable[[nnx.State], tuple[jax.Array, tuple]]:
    """The loss of one step as a function of the parameters (what the step differentiates).

    ``params -> (value, (logits, out, rest'))``: the module ``nnx.merge(graphdef, params,
    rest)``, ``forward(module) -> (logits, out)`` (the seed slots' logits and anything else the
    caller wants back), ``value`` the mean of ``loss(logits, labels)`` over the real seeds
    (``seed_mask``), and ``rest'`` what the call left in the module's other variables. The
    train step's forward is the model's call; a pipeline stage's runs its layers and its head.
    """

    def loss_fn(params):
        module = nnx.merge(graphdef, params, rest, copy=True)
        logits, out = forward(module)
        value = masked_mean(loss(logits, labels), seed_mask)
        return value, (logits, out, _new_rest(module))

    return loss_fn


def descend(
    state: TrainState,
    loss_fn: Callable[[nnx.State], tuple[jax.Array, tuple]],
    tx: optax.GradientTransformation,
    task: Task,
    labels: jax.Array,
    seed_mask: jax.Array,
) -> tuple[TrainState, Any, dict[str, jax.Array]]:
    """One optimiser step of ``state`` down ``loss_fn`` (a :func:`batch_loss`). Returns the new
    state, the forward's ``out`` and ``{"loss", "correct", "count"}`` (mean loss over the real
    seeds, correctly predicted seeds, real seeds)."""
    (value, (logits, out, rest)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    correct = jnp.sum(task.correct(logits, labels) & seed_mask)
    metrics = {"loss": value, "correct": correct, "count": jnp.sum(seed_mask)}
    return TrainState(params, opt_state, state.step + 1, rest), out, metrics


def train_step(
    state: TrainState,
    batch: DeviceBatch,
    key: jax.Array,
    *,
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    loss: LossFn = softmax_loss,
    task: Task | None = None,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """One optimiser step on a sampled batch. Pure: no host I/O, no Python-side state.

    Args:
      batch: the loader's device arrays (input features, blocks, seed labels and mask).
      key: the run's dropout key; the step number is folded in.
      loss: one loss a seed slot from ``(logits, labels)`` (:mod:`gns_jax.tasks`); averaged
        over the real seeds.
      task: decides what ``correct`` counts (default: multi-class).

    Returns the new state and ``{"loss", "correct", "count"}`` (mean loss over the real seeds,
    correctly predicted seeds, real seeds).
    """
    key = jax.random.fold_in(key, state.step)
    task = task or Task("multiclass")

    def forward(model):
        h = model(batch.x, batch.blocks, key=key)
        if batch.pairs is not None:  # link prediction: one logit a pair
            h = model.score(h, batch.pairs)
        return h, None

    loss_fn = batch_loss(graphdef, state.rest, forward, batch.labels, batch.seed_mask, loss)
    state, _, metrics = descend(state, loss_fn, tx, task, batch.labels, batch.seed_mask)
    return state, metrics


def make_train_step(
    graphdef,
    tx,
    counter: CompileCounter | None = None,
    *,
    loss: LossFn = softmax_loss,
    task: Task | None = None,
):
    """``jax.jit`` of :func:`train_step` with the state donated; traces counted by ``counter``."""
    fn = functools.partial(train_step, graphdef=graphdef, tx=tx, loss=loss, task=task)
    if counter is not None:
        fn = counter.wrap(fn)
    return jax.jit(fn, donate_argnums=0)


# The pipeline's keys of the JSON results (gns_jax.pipeline.PipelineStepper.report).
STAGE_KEYS = (
    "stage_devices",
    "stage_layers",
    "stage_compilations",
    "stage_busy_fraction",
    "stage_wait_s",
    "stage_blocked_s",
)


class CompileCount(Protocol):
    """A count of compilations (:class:`~gns_jax.meters.CompileCounter`, or a pipeline's sum)."""

    @property
    def count(self) -> int: ...


@runtime_checkable
class StepperLike(Protocol):
    """What :func:`gns_jax.fit` asks of a stepper: :class:`Stepper` (one device or data
    parallel) and :class:`gns_jax.pipeline.PipelineStepper` both are one.

    A stepper trains in *windows* (:meth:`run`): ``count`` batches, after which the state is
    complete (a pipeline has drained), so that evaluation and checkpoints may read it.
    """

    @property
    def counter(self) -> CompileCount:
        """The train step's compilations (the results' ``compilations``)."""
        ...

    def run(self, state, batches, count: int, log, on_batch, stop=None) -> tuple:
        """Steps on the next ``count`` batches of ``batches``; ``on_batch(batch, loss,
        stage_losses or None)`` hears of each, in order; ``log`` of compilations. ``stop``
        (optional, no arguments): when it turns true, no further batch is taken and the window
        ends early, complete (every batch taken heard of). Returns ``(state, last batch)``."""
        ...

    def replicate(self, tree):
        """``tree`` as the stepper holds it (on every device of a data-parallel mesh)."""
        ...

    def local(self, tree):
        """One device's copy of a tree the stepper holds (what a checkpoint saves)."""
        ...

    def model_variables(self, state) -> tuple[nnx.State, nnx.State]:
        """The model's ``(params, rest)`` of ``state``, one device's copy (for evaluation)."""
        ...

    def model_state(self, state) -> TrainState:
        """The model's :class:`TrainState` of ``state``, one device's copy (what fit returns)."""
        ...

    def reset_timing(self) -> None:
        """Starts the timings afresh (after the first epoch's compilation)."""
        ...

    def timing(self) -> dict[str, float]:
        """``{"wait", "step", "wait_fraction"}``: the mean wait for a batch, the mean time of a
        step besides, and the share of waiting."""
        ...

    def report(self) -> dict:
        """The stepper's keys of the JSON results (``parallel`` and the ``stage_*`` keys)."""
        ...

    def close(self) -> None:
        """Stops what the stepper runs (idempotent)."""
        ...


# Steps dispatched between two host synchronisations of the training loop (Stepper.run): the
# losses of a group of steps are stacked on the device and fetched at once, one group behind, so
# that the device always has the next group queued and at most 2 * SYNC_EVERY steps are in flight.
SYNC_EVERY = 4


class Stepper:
    """The jitted step of a run, on one device or data-parallel, with its compile count and
    the time it waits for batches and spends stepping; a :class:`StepperLike`.

    :meth:`run` dispatches ahead: it does not wait for a step before dispatching the next (JAX's
    asynchronous dispatch hides the input side behind the device's work). Every
    :data:`SYNC_EVERY` steps it fetches the losses of the group of steps before, stacked on the
    device (one host synchronisation), and at the end of a window those not fetched yet; step
    times come from these sampled synchronisations.

    Args:
      graphdef, tx: the model's graph definition and the optimiser.
      parallel: data parallelism over devices, or None.
      key: the run's dropout key.
      loss, task: as :func:`train_step`.
    """

    def __init__(
        self,
        graphdef: nnx.GraphDef,
        tx: optax.GradientTransformation,
        parallel: DataParallel | None,
        key: jax.Array,
        *,
        loss: LossFn,
        task: Task,
    ):
        self.counter = CompileCounter()
        self.parallel = parallel
        if parallel is None:
            self._step = make_train_step(graphdef, tx, self.counter, loss=loss, task=task)
            self._key = key
        else:
            self._step = make_parallel_train_step(
                graphdef, tx, parallel, self.counter, loss=loss, task=task
            )
            self._key = parallel.replicate(jax.random.key_data(key))
        self.reset_timing()

    def reset_timing(self) -> None:
        """Starts the wait/step averages afresh (after the first epoch's compilation)."""
        self.batches, self.wait_s, self.step_s = 0, 0.0, 0.0

    def local(self, tree):
        """One device's copy of a replicated tree (the tree itself on one device)."""
        return tree if self.parallel is None else self.parallel.local(tree)

    def replicate(self, tree):
        return tree if self.parallel is None else self.parallel.replicate(tree)

    def dispatch(self, state: TrainState, batches, log) -> tuple[TrainState, object, jax.Array]:
        """Takes the next batch of ``batches`` and dispatches the step on it without waiting for
        it; returns the new state, the batch and its loss (on the device). ``log`` hears of a
        compilation (traced and compiled before the dispatch returns)."""
        t0 = time.perf_counter()
        batch = next(batches)
        t1 = time.perf_counter()
        before = self.counter.count
        state, metrics = self._step(state, batch.inputs, self._key)
        if self.counter.count != before:
            log(f"compiled the train step in {time.perf_counter() - t1:.1f}s")
        self.wait_s += t1 - t0
        return state, batch, self.local(metrics["loss"])

    def __call__(self, state: TrainState, batches, log) -> tuple[TrainState, object, np.float32]:
        """One step, waited for: :meth:`dispatch`, then the loss fetched (a host float32)."""
        t0, wait = time.perf_counter(), self.wait_s
        state, batch, loss = self.dispatch(state, batches, log)
        loss = np.float32(jax.device_get(loss))
        self.step_s += time.perf_counter() - t0 - (self.wait_s - wait)
        self.batches += 1
        return state, batch, loss

    def run(self, state: TrainState, batches, count: int, log, on_batch, stop=None) -> tuple:
        """Steps on the next ``count`` batches, dispatching ahead; ``on_batch(batch, loss,
        None)`` hears of each, in order, when its group's losses arrive (all of them before
        this returns); ``stop()`` true ends the window after the step in flight. Returns
        ``(state, last batch)``, the state possibly still computing (the interface of
        :class:`gns_jax.pipeline.PipelineStepper`)."""
        mark, wait = time.perf_counter(), self.wait_s
        fetched, pending, batch = [], [], None

        def fetch(group):  # one host synchronisation for the group's losses
            nonlocal mark, wait
            losses = np.asarray(jax.device_get(jnp.stack([loss for _, loss in group])))
            now = time.perf_counter()
            self.step_s += now - mark - (self.wait_s - wait)
            self.batches += len(group)
            mark, wait = now, self.wait_s
            for (done, _), value in zip(group, losses, strict=True):
                on_batch(done, np.float32(value), None)

        for i in range(count):
            if stop is not None and stop():
                break
            state, batch, loss = self.dispatch(state, batches, log)
            pending.append((batch, loss))
            if (i + 1) % SYNC_EVERY == 0:  # the group before this one; this one stays queued
                if fetched:
                    fetch(fetched)
                fetched, pending = pending, []
        if fetched or pending:  # the window's end: the rest, at once
            fetch(fetched + pending)
        return state, batch

    def model_variables(self, state: TrainState):
        """The model's ``(params, rest)``, one device's copy."""
        return self.local((state.params, state.rest))

    def model_state(self, state: TrainState) -> TrainState:
        """The train state of the model, one device's copy."""
        return self.local(state)

    def report(self) -> dict:
        """The stage keys of the JSON results: None (no pipeline)."""
        return {"parallel": "data"} | dict.fromkeys(STAGE_KEYS)

    def close(self) -> None:
        """Nothing to stop (the interface of :class:`gns_jax.pipeline.PipelineStepper`)."""

    def timing(self) -> dict[str, float]:
        """The mean wait for a batch and step time, and the share of waiting."""
        n = max(self.batches, 1)
        return {
            "wait": self.wait_s / n,
            "step": self.step_s / n,
            "wait_fraction": self.wait_s / max(self.wait_s + self.step_s, 1e-12),
        }
