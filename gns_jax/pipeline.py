"""Pipeline parallelism with local learning (PPLL): one stage of layers a device, queues between.

PPLL (Guo et al., 2024) trains a deep model over several devices without a global backward
pass: the layers are split into consecutive *stages*, one a device; each stage has a small
*local head* (a classifier on its output) and is updated from that head's loss alone, and hands
its output, detached, to the next stage. No stage waits for another's gradient, so while stage
``s`` trains on batch ``t``, stage ``s + 1`` trains on batch ``t - 1``: with ``D`` stages ``D``
batches are in flight, the devices busy at once.

On a GNN the stage boundaries follow the sampled blocks. A batch of ``L`` blocks (input layer
first, destinations a prefix of the sources at every layer, the seeds the first slots) is cut
where the layers are: stage ``s`` holds layers ``[a_s, b_s)``, reads the rows of
``blocks[a_s]``'s source slots and computes the rows of ``blocks[b_s - 1]``'s destinations. Its
local head reads the first ``max_seeds`` of them, the seed slots, and its loss is the task's
loss over the batch's real seeds (every stage is trained on the mini-batch's labels). The last
stage's "head" is the model's own output layer, so its loss is the model's loss, and the model
that comes out is the ordinary model, evaluated end to end (exact inference included).

:class:`PipelineStepper` runs it: one thread a stage, a bounded queue (``stage_queue`` batches)
in front of every stage but the first, which the caller feeds. A queue entry carries the stage's
output rows and the blocks, labels and seed mask the later stages need, moved to the next
stage's device with ``jax.device_put``. Every stage has its own jitted step (one compilation a
stage), its own optimiser state and its own copy of the dropout key; its loss and update are the
train step's (:func:`gns_jax.step.batch_loss`, :func:`gns_jax.step.descend`) over the stage's
forward pass. The dropout key of step ``t`` is ``fold_in(key, t)`` in every stage, split over
the layers exactly as the whole model splits it, so a one-stage pipeline trains exactly as
:func:`gns_jax.fit` without one (``tests/test_ppll.py``). Each stage processes batches in
order, so same seed, same numbers, however the threads interleave.

The stepper runs *windows*: it feeds ``count`` batches and returns when the last stage has
finished all of them (the pipeline drained), which is where :func:`gns_jax.fit` evaluates and
checkpoints (epoch ends, every ``checkpoint_every`` batches). It measures each stage's busy
time (from taking a batch to its outputs being ready), its wait for input and its wait for room
in the next queue.

A model takes part by offering its layers one by one: ``model.pipeline_layers()``, a list of
``(layer, output width)`` with ``layer(h, block)``, and ``model.layer_input(index, h, key)``,
what goes between the layers (activation, dropout), holding no variables
(:class:`~gns_jax.models.GraphSAGE` does).

(``gns_jax.pipeline.prefetch``, the prefetch queue's former name, still works and warns: the
queue is :class:`gns_jax.prefetch.Prefetcher`.)
"""

from __future__ import annotations

import functools
import queue
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from gns_jax.errors import ConfigError
from gns_jax.meters import CompileCounter
from gns_jax.prefetch import offer, stop_threads
from gns_jax.step import TrainState, batch_loss, descend, init_state
from gns_jax.tasks import LossFn, Task

__all__ = [
    "LocalHead",
    "PipelineStepper",
    "Stage",
    "build_stages",
    "stage_bounds",
    "stage_step",
]


def __getattr__(name: str):
    if name == "prefetch":
        warnings.warn(
            "gns_jax.pipeline.prefetch is now gns_jax.prefetch.Prefetcher",
            DeprecationWarning,
            stacklevel=2,
        )
        from gns_jax.prefetch import Prefetcher

        return Prefetcher
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def stage_bounds(num_layers: int, stages: int) -> list[tuple[int, int]]:
    """The layers ``[a, b)`` of each stage: consecutive, as even as possible, the later stages
    taking the layers left over (the input layer, reading the most rows and the widest
    features, is the heaviest)."""
    if not 1 <= stages <= num_layers:
        raise ConfigError(
            "devices",
            f"the pipeline puts at least one layer on each device: {num_layers} layer(s) "
            f"cannot fill {stages} devices",
        )
    base, extra = divmod(num_layers, stages)
    sizes = [base + (s >= stages - extra) for s in range(stages)]
    ends = np.cumsum(sizes).tolist()
    return [(b - n, b) for b, n in zip(ends, sizes)]


class LocalHead(nnx.Module):
    """A stage's local classifier: ReLU, then a linear layer (``width == 0``) or a hidden layer
    of ``width`` units with ReLU and a linear layer, to the classes."""

    def __init__(self, in_dim: int, width: int, classes: int, *, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(in_dim, width, rngs=rngs) if width else None
        self.out = nnx.Linear(width or in_dim, classes, rngs=rngs)

    def __call__(self, h: jax.Array) -> jax.Array:
        h = jax.nn.relu(h)
        if self.hidden is not None:
            h = jax.nn.relu(self.hidden(h))
        return self.out(h)


class Stage(nnx.Module):
    """The layers of one stage (the model's own layer objects) and its local head (None for the
    last stage, whose last layer is the model's output)."""

    def __init__(self, layers: Sequence[nnx.Module], head: LocalHead | None):
        self.layers = nnx.List(list(layers))
        self.head = head


def _layers_of(model: nnx.Module) -> list[tuple[nnx.Module, int]]:
    if not (hasattr(model, "pipeline_layers") and hasattr(model, "layer_input")):
        raise ConfigError(
            "parallel",
            f"the pipeline trains a model layer by layer: {type(model).__name__} offers no "
            "pipeline_layers() and layer_input() (gns_jax.models.GraphSAGE does); train it "
            "with --parallel data",
        )
    return list(model.pipeline_layers())


def build_stages(
    model: nnx.Module, stages: int, head_width: int, key: jax.Array
) -> tuple[list[Stage], list[tuple[int, int]]]:
    """The :class:`Stage` modules of ``model`` over ``stages`` stages and their layer bounds;
    the local heads (as many outputs as the model's last layer) are initialised from ``key``
    (one stream: the heads in stage order)."""
    layers = _layers_of(model)
    num_classes = layers[-1][1]
    bounds = stage_bounds(len(layers), stages)
    rngs = nnx.Rngs(params=key)
    out = []
    for s, (a, b) in enumerate(bounds):
        last = s == len(bounds) - 1
        head = None if last else LocalHead(layers[b - 1][1], head_width, num_classes, rngs=rngs)
        out.append(Stage([layer for layer, _ in layers[a:b]], head))
    return out, bounds


def stage_step(
    state: TrainState,
    h_in: jax.Array,
    blocks: tuple,
    labels: jax.Array,
    seed_mask: jax.Array,
    key: jax.Array,
    *,
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    first: int,
    last: bool,
    layer_input: Callable,
    loss: LossFn,
    task: Task,
):
    """One local-learning step of a stage. Pure.

    ``h_in``: the rows of ``blocks[0]``'s source slots (the input features for the first stage,
    the previous stage's output otherwise: a plain array, so no gradient leaves the stage).
    ``first``: the model's index of the stage's first layer. Returns the new state, the stage's
    output rows (None for the last stage) and ``{"loss", "correct", "count"}`` of its head.
    """
    step_key = jax.random.fold_in(key, state.step)

    def forward(stage):
        h = h_in
        for j, (layer, block) in enumerate(zip(stage.layers, blocks, strict=True)):
            h = layer(layer_input(first + j, h, step_key), block)
        seeds = h[: labels.shape[0]]  # the seed slots: the first destinations of every block
        return (seeds if stage.head is None else stage.head(seeds)), h

    # the train step's loss and update (gns_jax.step), with the stage's forward pass
    loss_fn = batch_loss(graphdef, state.rest, forward, labels, seed_mask, loss)
    new, h, metrics = descend(state, loss_fn, tx, task, labels, seed_mask)
    return new, (None if last else h), metrics


class PipelineState(NamedTuple):
    """The train state of a pipeline: one :class:`~gns_jax.step.TrainState` a stage, each on
    its stage's device (what a checkpoint saves)."""

    stages: tuple[TrainState, ...]


class _Failure(NamedTuple):
    error: BaseException


_STOP = object()


class PipelineStepper:
    """Trains ``model`` as a pipeline of ``len(devices)`` stages (module docstring); a
    :class:`~gns_jax.step.StepperLike`, as :func:`gns_jax.fit` drives it.

    Args:
      model: a layer-wise NNX module (``pipeline_layers``, ``layer_input``), initialised; its
        layer objects are shared with the stages, and :meth:`model_variables` writes the
        stages' values back into it.
      tx: the optimiser; every stage has its own state of it.
      devices: one device a stage, in stage order (the first reads the loader's batches).
      key: the run's dropout key; head_key: the local heads' initialisation.
      head_width: the local heads' hidden width (0: linear).
      queue_depth: batches a queue between two stages holds.
      loss, task: as :func:`gns_jax.step.train_step`.
    """

    def __init__(
        self,
        model: nnx.Module,
        tx: optax.GradientTransformation,
        devices: Sequence[jax.Device],
        key: jax.Array,
        *,
        head_key: jax.Array,
        head_width: int = 0,
        queue_depth: int = 2,
        loss: LossFn,
        task: Task,
    ):
        self.model, self.devices = model, list(devices)
        if len(set(self.devices)) != len(self.devices):
            raise ConfigError("devices", "the pipeline needs a distinct device for every stage")
        model.train()
        self.graphdef = nnx.graphdef(model)
        self.stages, self.bounds = build_stages(model, len(self.devices), head_width, head_key)
        self.counters = [CompileCounter() for _ in self.stages]
        self._steps, states = [], []
        for s, (stage, (a, _)) in enumerate(zip(self.stages, self.bounds)):
            graphdef, state = init_state(stage, tx)
            states.append(_put(state, self.devices[s]))
            fn = functools.partial(
                stage_step, graphdef=graphdef, tx=tx, first=a, last=s == len(self.stages) - 1,
                layer_input=model.layer_input, loss=loss, task=task,
            )  # fmt: skip
            self._steps.append(jax.jit(self.counters[s].wrap(fn), donate_argnums=0))
        self.initial = PipelineState(tuple(states))
        with jax.transfer_guard_host_to_device("allow"):
            self._keys = [jax.device_put(key, d) for d in self.devices]
        self.counter = _Total(self.counters)
        self._queues = [queue.Queue(maxsize=queue_depth) for _ in self.stages]
        self._out: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._states: list[TrainState] = list(states)
        self._messages: list[str] = []
        self._window_start = time.perf_counter()
        self._lock = threading.Lock()
        self.in_flight = len(self.stages) * (queue_depth + 1)
        self.reset_timing()
        self._threads = [
            threading.Thread(target=self._serve, args=(s,), name=f"gns-jax-stage{s}", daemon=True)
            for s in range(len(self.stages))
        ]
        for thread in self._threads:
            thread.start()
        self._finalizer = weakref.finalize(
            self, stop_threads, self._stop, self._queues, self._threads
        )

    # -- what fit asks of a stepper (gns_jax.step.StepperLike) ----------------------------------

    def reset_timing(self) -> None:
        """Starts the timings afresh (after the first epoch's compilations)."""
        n = len(self.stages)
        self.batches, self.wait_s, self.wall_s = 0, 0.0, 0.0
        self.busy_s, self.input_wait_s, self.blocked_s = [0.0] * n, [0.0] * n, [0.0] * n
        self.stage_batches = [0] * n

    def replicate(self, tree):
        return tree

    def local(self, tree):
        return tree

    def run(self, state: PipelineState, batches, count: int, log, on_batch, stop=None) -> tuple:
        """Streams the next ``count`` batches of ``batches`` through the stages and drains the
        pipeline; ``on_batch(batch, loss, stage_losses)`` hears of each batch as the last stage
        finishes it (in order); ``stop()`` true feeds no further batch (those fed are
        finished). Returns ``(state, last batch)``."""
        self._states = list(state.stages)
        start, fed, done, batch = time.perf_counter(), 0, 0, None
        self._window_start = start  # the stages' waits are counted from here
        try:
            while done < count:
                if stop is not None and stop():
                    count = fed  # finish what was fed
                    if done >= count:
                        break
                while fed < count and fed - done < self.in_flight:
                    t0 = time.perf_counter()
                    item = next(batches)
                    self.wait_s += time.perf_counter() - t0
                    inputs = item.inputs
                    entry = (item, inputs.x, inputs.blocks, inputs.labels, inputs.seed_mask, ())
                    if not offer(self._queues[0], entry, self._stop):
                        self._raise_failure()
                    fed += 1
                entry = self._out.get()
                if isinstance(entry, _Failure):
                    raise entry.error
                batch, losses = entry
                if self._stop.is_set():
                    self._raise_failure()
                self._flush(log)
                on_batch(batch, losses[-1], losses)
                done += 1
        except BaseException:
            self.close()
            raise
        self._flush(log)
        self.wall_s += time.perf_counter() - start
        self.batches += count
        return PipelineState(tuple(self._states)), batch

    def model_variables(self, state: PipelineState):
        """The model's ``(params, rest)`` (its ``nnx.Param`` variables and the others) on the
        first stage's device: the stages' values written back into the model, copied."""
        home = self.devices[0]
        for stage, stage_state in zip(self.stages, state.stages):
            params, rest = jax.tree.map(
                lambda a: jnp.copy(jax.device_put(a, home)), (stage_state.params, stage_state.rest)
            )
            nnx.update(stage, params, rest)
        _, params, rest = nnx.split(self.model, nnx.Param, ...)
        return params, rest

    def model_state(self, state: PipelineState) -> TrainState:
        """A :class:`~gns_jax.step.TrainState` of the model (``opt_state``: the stages')."""
        params, rest = self.model_variables(state)
        opt = tuple(s.opt_state for s in state.stages)
        return TrainState(params, opt, state.stages[-1].step, rest)

    def timing(self) -> dict[str, float]:
        """The mean wait for a batch from the loader, the mean time a batch of the pipeline took
        besides, and the share of waiting."""
        n = max(self.batches, 1)
        step = max(self.wall_s - self.wait_s, 0.0)
        return {
            "wait": self.wait_s / n,
            "step": step / n,
            "wait_fraction": self.wait_s / max(self.wall_s, 1e-12),
        }

    def report(self) -> dict[str, Any]:
        """The pipeline's keys of the JSON results (``docs/results.md``)."""
        wall = max(self.wall_s, 1e-12)
        per = [max(n, 1) for n in self.stage_batches]
        return {
            "parallel": "pipeline",
            "stage_devices": [str(d) for d in self.devices],
            "stage_layers": [list(b) for b in self.bounds],
            "stage_compilations": [c.count for c in self.counters],
            "stage_busy_fraction": [b / wall for b in self.busy_s],
            "stage_wait_s": [w / n for w, n in zip(self.input_wait_s, per)],
            "stage_blocked_s": [w / n for w, n in zip(self.blocked_s, per)],
        }

    def close(self) -> None:
        """Stops the stage threads (idempotent)."""
        self._finalizer()

    # -- the stage threads ---------------------------------------------------------------------

    def _raise_failure(self):
        """Raises the error a stage thread stopped with (the entries before it dropped)."""
        while True:
            entry = self._out.get()
            if isinstance(entry, _Failure):
                raise entry.error

    def _flush(self, log) -> None:
        with self._lock:
            messages, self._messages = self._messages, []
        for message in messages:
            log(message)

    def _serve(self, s: int) -> None:
        last = s == len(self.stages) - 1
        a, b = self.bounds[s]
        nxt = None if last else self.devices[s + 1]
        try:
            while True:
                t0 = time.perf_counter()
                entry = _take(self._queues[s], self._stop)
                if entry is _STOP:
                    return
                t1 = time.perf_counter()
                batch, h, blocks, labels, mask, losses = entry
                before = self.counters[s].count
                self._states[s], h, metrics = self._steps[s](
                    self._states[s], h, blocks[: b - a], labels, mask, self._keys[s]
                )
                if last:
                    jax.block_until_ready(metrics["loss"])
                    losses = (*losses, metrics["loss"])
                    out = (batch, [np.float32(v) for v in jax.device_get(losses)])
                else:
                    moved = jax.device_put((h, blocks[b - a :], labels, mask), nxt)
                    jax.block_until_ready(moved)
                    out = (batch, *moved, (*losses, metrics["loss"]))
                t2 = time.perf_counter()
                if self.counters[s].count != before:
                    with self._lock:
                        self._messages.append(f"compiled pipeline stage {s} in {t2 - t1:.1f}s")
                self.input_wait_s[s] += t1 - max(t0, self._window_start)
                self.busy_s[s] += t2 - t1
                self.stage_batches[s] += 1  # counted before the caller can hear of the batch
                target = self._out if last else self._queues[s + 1]
                if not offer(target, out, self._stop):
                    return
                self.blocked_s[s] += time.perf_counter() - t2
        except BaseException as error:  # handed to the caller, raised there
            self._out.put(_Failure(error))
            self._stop.set()


class _Total:
    """The compilations of every stage, added up (what ``compilations`` reports)."""

    def __init__(self, counters):
        self.counters = counters

    @property
    def count(self) -> int:
        return sum(c.count for c in self.counters)


def _put(tree, device):
    with jax.transfer_guard_host_to_device("allow"):
        return jax.tree.map(lambda a: jnp.copy(jax.device_put(a, device)), tree)


def _take(source: queue.Queue, stop: threading.Event):
    while not stop.is_set():
        try:
            return source.get(timeout=0.05)
        except queue.Empty:
            continue
    return _STOP
