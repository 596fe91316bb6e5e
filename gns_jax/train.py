"""The train state, the pure train step, and ``fit``: the epoch loop over a loader.

Device side: :func:`train_step` is pure (``state, batch, key -> state, metrics``) over the
functional split of a Flax NNX model (``nnx.split`` once, ``nnx.merge`` inside jit), so it can be
jitted, differentiated and called eagerly in tests. It trains any NNX module called as
``model(x, blocks, *, key=None)`` that returns the seed slots' logits (:mod:`gns_jax.models`).

Host side: :func:`fit` is a short loop over a :class:`~gns_jax.loader.Loader` (which owns the
whole input side): step, evaluate at the end of every ``eval_every``-th epoch, keep the
parameters of the best validation accuracy, checkpoint, report. The dropout key of step ``t`` is
``fold_in(fold_in(key(seed), DROPOUT), t)``; every other random stream is the loader's. Same seed,
same machine: identical losses, also across a kill and a resume from a checkpoint.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from gns_jax.checkpoint import Checkpointer, check_compatible, dataset_identity, read_run
from gns_jax.config import RESUMABLE, TrainConfig
from gns_jax.data import Dataset
from gns_jax.errors import ConfigError
from gns_jax.evaluate import Evaluator, in_eval_mode, resolve_eval_mode
from gns_jax.factories import (
    eval_fanouts,
    feature_norm,
    make_loader,
    make_model,
    make_optimizer,
    make_sampler,
    prepare_features,
)
from gns_jax.instrument import (
    CompileCounter,
    IoMeter,
    Reporter,
    TransferMeter,
    environment,
    peak_rss_gib,
)
from gns_jax.loader import DROPOUT, INIT, DeviceBatch, LoaderState
from gns_jax.metrics import default_metric, task_metrics
from gns_jax.models import GraphSAGE
from gns_jax.parallel import DataParallel, make_parallel_train_step, resolve_devices

__all__ = [
    "FitResult",
    "TrainState",
    "fit",
    "eval_graphdef",
    "init_state",
    "load_model",
    "make_train_step",
    "predict",
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


def _masked_loss(logits, labels, mask):
    per_seed = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    weight = mask.astype(per_seed.dtype)
    return jnp.sum(per_seed * weight) / jnp.maximum(weight.sum(), 1.0)


def train_step(
    state: TrainState,
    batch: DeviceBatch,
    key: jax.Array,
    *,
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """One optimiser step on a sampled batch. Pure: no host I/O, no Python-side state.

    Args:
      batch: the loader's device arrays (input features, blocks, seed labels and mask).
      key: the run's dropout key; the step number is folded in.

    Returns the new state and ``{"loss", "correct", "count"}`` (mean loss over the real seeds,
    correctly predicted seeds, real seeds).
    """
    key = jax.random.fold_in(key, state.step)

    def loss_fn(params):
        model = nnx.merge(graphdef, params, state.rest, copy=True)
        logits = model(batch.x, batch.blocks, key=key)
        return _masked_loss(logits, batch.labels, batch.seed_mask), (logits, _new_rest(model))

    (loss, (logits, rest)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    correct = jnp.sum((jnp.argmax(logits, -1) == batch.labels) & batch.seed_mask)
    metrics = {"loss": loss, "correct": correct, "count": jnp.sum(batch.seed_mask)}
    return TrainState(params, opt_state, state.step + 1, rest), metrics


def make_train_step(graphdef, tx, counter: CompileCounter | None = None):
    """``jax.jit`` of :func:`train_step` with the state donated; traces counted by ``counter``."""
    fn = functools.partial(train_step, graphdef=graphdef, tx=tx)
    if counter is not None:
        fn = counter.wrap(fn)
    return jax.jit(fn, donate_argnums=0)


@dataclasses.dataclass
class FitResult:
    """What :func:`fit` returns.

    Attributes:
      metrics: the JSON results (the dict ``gns-jax train --out`` writes; ``docs/results.md``).
      model: the trained module, at the epoch of best validation accuracy (the last epoch when
        nothing was evaluated).
      state: the final train state; ``graphdef`` its static model definition.
    """

    metrics: dict[str, Any]
    model: nnx.Module
    state: TrainState
    graphdef: nnx.GraphDef


class _Totals:
    """Running sums behind the per-batch rates; saved in checkpoints."""

    FIELDS = (
        "rows",
        "inputs",
        "batches",
        "bytes",
        "refreshes",
        "cached",
        "refresh_s",
        "cache_bytes",
        "shard_rows",
    )

    def __init__(self, **values):
        for k in self.FIELDS:
            setattr(self, k, values.get(k, 0))
        self.shard_rows = list(values.get("shard_rows") or [])

    def add(self, batch) -> None:
        if len(self.shard_rows) != len(batch.rows_per_shard):
            self.shard_rows = [0] * len(batch.rows_per_shard)
        self.shard_rows = [a + b for a, b in zip(self.shard_rows, batch.rows_per_shard)]
        self.rows += batch.rows_moved
        self.inputs += batch.num_inputs
        self.batches += 1
        self.bytes += batch.bytes_moved
        if batch.refresh is not None:
            self.refreshes += 1
            self.refresh_s += batch.refresh[0]
            self.cached += batch.refresh[1]
            self.cache_bytes += batch.refresh[2]

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.FIELDS}


def fit(
    dataset: Dataset,
    config: TrainConfig,
    *,
    model: nnx.Module | None = None,
    optimizer: optax.GradientTransformation | None = None,
    quiet: bool = False,
    evaluate_model: bool = True,
    on_epoch: Callable[[dict], None] | None = None,
    reporter: Reporter | None = None,
) -> FitResult:
    """Trains ``model`` (default: the command's GraphSAGE) and evaluates it.

    Args:
      dataset: the graph, features, labels and splits.
      config: every option (:class:`~gns_jax.config.TrainConfig`).
      model: any Flax NNX module with the contract of :mod:`gns_jax.models`, already
        initialised; its ``nnx.Param`` variables are trained, its other variables (batch
        statistics, ``nnx.Rngs`` streams) updated by every step; trained in training mode,
        evaluated and returned in evaluation mode. Evaluated exactly when it offers
        :class:`~gns_jax.evaluate.ExactInference` (``eval_mode="auto"``), by sampled inference
        otherwise.
      optimizer: any optax transformation (default: :func:`~gns_jax.factories.make_optimizer`,
        Adam with ``lr`` and L2 ``weight_decay``); resume a run with the same one.
      quiet: no progress on stderr.
      evaluate_model: False (benchmarks) skips evaluation; the accuracies are then None.
      on_epoch: called after every epoch with the results so far (``status: "running"``).

    Test accuracy is reported at the epoch of best validation accuracy (ties: the earliest).
    """
    config.validate()
    io_meter = IoMeter()  # disk reads and memory from here: the dataset's loading not counted
    reporter = reporter or Reporter(quiet)
    parallel = None
    if resolve_devices(config.devices) > 1 or jax.process_count() > 1:
        parallel = DataParallel.over(config.devices)
        if parallel.multi_process and config.checkpoint_dir:
            raise ConfigError(
                "checkpoint_dir", "checkpoints are not supported with several processes yet"
            )
    features = prepare_features(dataset, config)
    meter = TransferMeter(page_cache=io_meter.page_cache)  # the gathers' mapped reads counted
    sampler = make_sampler(dataset, config)
    loader = make_loader(
        dataset, config, sampler, features, meter, log=reporter.line, parallel=parallel
    )
    tx = make_optimizer(config) if optimizer is None else optimizer
    with jax.transfer_guard_host_to_device("allow"):
        base_key = jax.random.key(config.seed)
        if model is None:
            model = make_model(dataset, config, jax.random.fold_in(base_key, INIT))
        dropout_key = jax.random.fold_in(base_key, DROPOUT)
    graphdef, state = init_state(model, tx)
    metric = resolve_metric(config.metric, dataset.num_classes)  # picks the best epoch
    names = task_metrics(dataset.num_classes)
    model_name = class_name(model)  # recorded: load_model needs a template of any other
    eval_mode = resolve_eval_mode(config.eval_mode, model)
    evaluator = None
    if evaluate_model:
        evaluator = Evaluator(
            dataset,
            features,
            mode=eval_mode,
            fanouts=eval_fanouts(config),
            batch_size=config.batch_size,
            seed=config.seed,
            budget=config.budget,
            prefetch=config.prefetch,
            # its own: evaluation's bytes are not training's; its mapped reads are counted
            meter=TransferMeter(page_cache=io_meter.page_cache),
            log=reporter.line,
        )
    counter = CompileCounter()
    if parallel is None:
        step = make_train_step(graphdef, tx, counter)
        step_key = dropout_key
    else:
        step = make_parallel_train_step(graphdef, tx, parallel, counter)
        step_key = parallel.replicate(jax.random.key_data(dropout_key))
    # One device's copy of the (replicated) state: what evaluation and checkpoints read.
    local = (lambda tree: tree) if parallel is None else parallel.local

    # Where to start: fresh, or from the latest valid checkpoint.
    history, best = [], {"val": None, "test": None, "epoch": -1}
    best_params = None  # a copy of the parameters at the best validation accuracy
    totals, epoch_losses = _Totals(), []
    start_epoch, start_index, resumed_from = 0, 0, None
    checkpoints = None
    identity = dataset_identity(dataset)
    options = config.to_json()
    if config.checkpoint_dir:
        checkpoints = Checkpointer(config.checkpoint_dir)
        if checkpoints.steps() and not config.resume:
            raise ConfigError(
                "checkpoint_dir",
                f"{config.checkpoint_dir} holds checkpoints of an earlier run; resume it "
                "(--resume) or choose an empty folder",
            )
        if config.resume:

            def template(record):
                # checkpoints written before data parallelism have no "devices": one device
                record.setdefault("config", {}).setdefault("devices", 1)
                check_compatible(record, identity, options, RESUMABLE, config.checkpoint_dir)
                slots = int(record["cache_slots"])
                return {
                    "state": state,
                    "best": state.params,
                    "cache_ids": np.zeros(slots, np.int32),
                }

            found = checkpoints.latest(template)
            if found is None:
                if checkpoints.steps():
                    raise ConfigError(
                        "checkpoint_dir", f"no readable checkpoint in {config.checkpoint_dir}"
                    )
                reporter.line(f"no checkpoint in {config.checkpoint_dir}: starting afresh")
            else:
                resumed_from, arrays, record = found
                state = arrays["state"]
                best_params = arrays["best"] if record["best"]["epoch"] >= 0 else None
                ids = np.asarray(arrays["cache_ids"])
                loader.restore(LoaderState.from_json(record["loader"], ids[ids >= 0]))
                start_epoch, start_index = record["loader"]["epoch"], record["loader"]["index"]
                history, best = record["history"], record["best"]
                totals = _Totals(**record["totals"])
                epoch_losses = list(record["epoch_losses"])
                reporter.line(
                    f"resumed from checkpoint {resumed_from} in {config.checkpoint_dir}: "
                    f"epoch {start_epoch + 1}, batch {start_index + 1}"
                )

    def save(batch_state: LoaderState, epoch_done: bool) -> None:
        cache_ids = batch_state.cache_ids
        slots = max(sampler.cache_size, 1)
        padded = np.full(slots, -1, np.int32)
        if cache_ids is not None:
            padded[: cache_ids.size] = cache_ids
        position = batch_state.epoch * loader.num_batches + batch_state.index
        checkpoints.save(
            position,
            {
                "state": local(state),
                "best": state.params if best_params is None else best_params,
                "cache_ids": padded,
            },
            {
                "identity": identity,
                "config": options,
                "model": model_name,
                "loader": batch_state.to_json(),
                "cache_slots": slots,
                "history": history,
                "best": best,
                "totals": totals.to_json(),
                "epoch_losses": [] if epoch_done else [float(v) for v in epoch_losses],
            },
        )

    def results(status: str) -> dict:
        return _metrics(
            dataset, config, loader, evaluator, history, best, totals, counter, status,
            resumed_from, feature_norm(dataset, config), eval_mode, parallel, io_meter,
        )  # fmt: skip

    if parallel is not None:
        state = parallel.replicate(state)

    timed_batches, device_wait, device_step = 0, 0.0, 0.0
    batches = loader.batches(start_epoch, config.epochs, start_index)
    try:
        for epoch in range(start_epoch, config.epochs):
            start = time.perf_counter()
            first = start_index if epoch == start_epoch else 0
            if epoch == 1 or (epoch == start_epoch and epoch > 0):
                timed_batches, device_wait, device_step = 0, 0.0, 0.0
            if epoch > start_epoch or first == 0:
                epoch_losses = []
            title = f"epoch {epoch + 1}/{config.epochs}"
            with reporter.progress(title, loader.num_batches - first) as progress:
                for _ in range(first, loader.num_batches):
                    t0 = time.perf_counter()
                    batch = next(batches)
                    t1 = time.perf_counter()
                    before = counter.count
                    state, metrics = step(state, batch.inputs, step_key)
                    jax.block_until_ready(state)
                    t2 = time.perf_counter()
                    if counter.count != before:
                        reporter.line(f"compiled the train step in {t2 - t1:.1f}s")
                    device_wait += t1 - t0
                    device_step += t2 - t1
                    timed_batches += 1
                    loss = metrics["loss"] if parallel is None else local(metrics["loss"])
                    epoch_losses.append(np.float32(jax.device_get(loss)))
                    totals.add(batch)
                    progress.advance()
                    last = batch.index == loader.num_batches - 1
                    every = config.checkpoint_every
                    if checkpoints and every and totals.batches % every == 0 and not last:
                        save(batch.state, epoch_done=False)
            epoch_time = time.perf_counter() - start
            train_loss = float(np.mean(np.asarray(epoch_losses, dtype=np.float32)))
            record = {"epoch": epoch + 1, "train_loss": train_loss, "time_s": epoch_time}
            record |= io_meter.lap()  # the loop's reads (epoch 0: the cache's draw too)
            if evaluator is not None and (
                (epoch + 1) % config.eval_every == 0 or epoch == config.epochs - 1
            ):
                t0 = time.perf_counter()
                scores = evaluator.scores(graphdef, local((state.params, state.rest)), names)
                flat = {
                    f"{split}_{name}": (None if scores[split] is None else scores[split][name])
                    for split in ("val", "test", "train")
                    for name in names
                }
                record |= {k: flat[k] for k in ("val_accuracy", "test_accuracy", "train_accuracy")}
                record |= {"eval_time_s": time.perf_counter() - t0}
                record |= {k: v for k, v in flat.items() if not k.startswith("train_")}
                record |= {f"eval_{k}": v for k, v in io_meter.lap().items()}
                chosen = flat[f"val_{metric}"]
                # records of runs before the metric existed selected by accuracy
                kept = best.get("score", best["val"])
                if chosen is not None and (kept is None or chosen > kept):
                    best = {
                        "val": flat["val_accuracy"],
                        "test": flat["test_accuracy"],
                        "epoch": epoch,
                        "score": chosen,
                        "scores": {k: v for k, v in flat.items() if not k.startswith("train_")},
                    }
                    # a copy: the step donates the state
                    best_params = jax.tree.map(jnp.copy, local(state.params))
            history.append(record)
            io_meter.sample()
            reporter.line(
                f"epoch {epoch + 1:>4}/{config.epochs}  loss {train_loss:.4f}  "
                + (
                    f"val {metric} {record[f'val_{metric}']:.4f}  "
                    if record.get(f"val_{metric}") is not None
                    else ""
                )
                + f"{epoch_time:.2f}s  "
                + f"{(loader.num_batches - first) * loader.batch_size / epoch_time:,.0f} seeds/s"
            )
            if checkpoints:
                save(batch.state, epoch_done=True)
            # With several processes every one computes the results (they sum over processes).
            if on_epoch is not None or (parallel is not None and parallel.multi_process):
                running = results("running")
                if on_epoch is not None:
                    on_epoch(running)
            epoch_losses = []
    finally:
        batches.close()
    metrics = results("completed")
    metrics["time_split_s"] |= {
        "wait": device_wait / max(timed_batches, 1),
        "step": device_step / max(timed_batches, 1),
    }
    metrics["input_wait_fraction"] = device_wait / max(device_wait + device_step, 1e-12)
    state = local(state)
    trained = model_of(graphdef, state, best_params)
    return FitResult(metrics=metrics, model=trained, state=state, graphdef=graphdef)


def _metrics(
    dataset, config, loader, evaluator, history, best, totals, counter, status, resumed_from,
    norm, eval_mode, parallel, io_meter,
) -> dict:  # fmt: skip
    """The JSON results (``docs/results.md``)."""
    batches = max(totals.batches, 1)
    # With several processes each counted its own shards; every process adds them up alike.
    shard_rows = [int(v) for v in totals.shard_rows] or [0]
    rows, inputs = totals.rows, totals.inputs
    if parallel is not None and parallel.multi_process:
        summed = parallel.sum(np.array([rows, inputs, *shard_rows], dtype=np.int64))
        rows, inputs, shard_rows = int(summed[0]), int(summed[1]), [int(v) for v in summed[2:]]
    times = [h["time_s"] for h in history[1:]] or [h["time_s"] for h in history[:1]] or [0.0]
    uses_cache = loader.sampler.uses_cache
    budget, worst = loader.budget, loader.sampler.budget
    return {
        "status": status,
        "dataset": dataset.name,
        "sampler": config.sampler,
        "seed": config.seed,
        "config": config.to_json(),
        "num_nodes": dataset.num_nodes,
        "num_edges": dataset.graph.num_edges,
        "num_features": dataset.num_features,
        "num_classes": dataset.num_classes,
        "split": dataset.split,
        "val_accuracy": best["val"],
        "test_accuracy": best["test"],
        "metric": resolve_metric(config.metric, dataset.num_classes),
        **{
            f"{split}_{name}": best.get("scores", {}).get(f"{split}_{name}")
            for split in ("val", "test")
            for name in task_metrics(dataset.num_classes)
            if name != "accuracy"
        },
        "best_epoch": best["epoch"] + 1 if best["epoch"] >= 0 else None,
        "epochs": history,
        "epoch_time_s": float(np.median(times)),
        "input_nodes_per_batch": inputs / batches,
        "h2d_rows_per_batch": rows / batches,
        "devices": config.devices,
        "processes": jax.process_count(),
        "h2d_rows_per_batch_per_device": [v / batches for v in shard_rows],
        "h2d_bytes_per_batch": totals.bytes / batches,
        "cache_hit_rate": 1.0 - rows / max(inputs, 1) if uses_cache else 0.0,
        "cache_refresh_s": totals.refresh_s / max(totals.refreshes, 1),
        "cache_refreshes": totals.refreshes,
        "cache_nodes": totals.cached / max(totals.refreshes, 1),
        "cache_bytes_per_refresh": totals.cache_bytes / max(totals.refreshes, 1),
        "compilations": counter.count,
        "sampler_compilations": loader.sampler.compilations,
        "assemble_compilations": loader.feature_loader.compilations,
        "time_split_s": {
            k: v / max(loader.timed_batches, 1) for k, v in loader.watch.seconds.items()
        },
        "input_wait_fraction": None,
        "prefetch": config.prefetch,
        "batch_size": loader.batch_size,
        "budget": {
            "mode": config.budget,
            "calibrated": budget != worst,
            "input_slots": int(budget.max_src[0]),
            "worst_case_input_slots": int(worst.max_src[0]),
            "edge_slots": [int(v) for v in budget.max_edges],
            "worst_case_edge_slots": [int(v) for v in worst.max_edges],
            "growths": loader.growths,
        },
        "feature_norm": norm,
        # cache-first upper layers weight 1/k over a selection that prefers cached neighbours:
        # biased (gns_jax/theory/README.md measures by how much)
        "biased_upper_layers": bool(config.sampler == "gns" and config.cache_first),
        "evaluation": None if evaluator is None else eval_mode,
        "resumed_from_step": resumed_from,
        "peak_rss_gib": peak_rss_gib(),
        **io_meter.to_json(),
        "environment": environment(),
    }


def resolve_metric(metric: str, num_classes: int) -> str:
    """The metric that picks the best epoch: ``metric``, or for ``auto`` the task's default
    (:func:`gns_jax.metrics.default_metric`: roc_auc for two classes, accuracy otherwise)."""
    return default_metric(num_classes) if metric == "auto" else metric


def class_name(model: nnx.Module | type) -> str:
    """``module.QualifiedName`` of a model's class, as checkpoints record it."""
    cls = model if isinstance(model, type) else type(model)
    return f"{cls.__module__}.{cls.__qualname__}"


def load_model(
    directory: str | Path,
    dataset,
    model: nnx.Module | None = None,
    optimizer: optax.GradientTransformation | None = None,
):
    """The model of a training run at its best validation accuracy, from its checkpoint folder,
    for ``dataset`` (which must be the run's), in evaluation mode. Returns
    ``(model, config, record)``.

    ``model``: for a run of a model other than GraphSAGE, a template: a model of the same class
    built the same way (its values, random streams included, are replaced by the saved ones).
    A GraphSAGE run needs none. ``optimizer``: the one the run trained with, if not the
    default (the checkpoint holds its state)."""
    step, record = read_run(directory)
    saved = record.get("model", class_name(GraphSAGE))
    if model is None and saved != class_name(GraphSAGE):
        raise ConfigError(
            "checkpoint",
            f"{directory} holds a {saved}, not a GraphSAGE: pass a template of it, "
            "gns_jax.load_model(directory, dataset, model=...)",
        )
    if model is not None and class_name(model) != saved:
        raise ConfigError(
            "checkpoint", f"{directory} holds a {saved}; the template is a {class_name(model)}"
        )
    identity = dataset_identity(dataset)
    if record.get("identity") != identity:
        raise ConfigError(
            "checkpoint",
            f"{directory} is a checkpoint of {json.dumps(record.get('identity'))}, "
            f"not of {json.dumps(identity)}",
        )
    config = TrainConfig.from_json(record["config"])
    if model is None:
        with jax.transfer_guard_host_to_device("allow"):
            model = make_model(dataset, config, jax.random.key(0))
    tx = make_optimizer(config) if optimizer is None else optimizer
    graphdef, state = init_state(model, tx)
    slots = int(record["cache_slots"])
    template = {"state": state, "best": state.params, "cache_ids": np.zeros(slots, np.int32)}
    checkpoints = Checkpointer(directory)
    found = checkpoints.latest(lambda r: template)
    if found is None:
        raise ConfigError("checkpoint", f"{directory} holds no readable gns-jax checkpoint")
    _, arrays, record = found
    model = model_of(graphdef, arrays["state"], arrays["best"])
    return model, config, record


def predict(
    model: nnx.Module,
    dataset: Dataset,
    *,
    proba: bool = False,
    nodes: np.ndarray | None = None,
    config: TrainConfig | None = None,
) -> np.ndarray:
    """The model's predicted classes (int32 ``[n]``) or, with ``proba``, class probabilities
    (float32 ``[n, C]``, softmax) of ``nodes`` (default: every node), in that order.

    Always in evaluation mode and with fixed sampling keys: two calls give the same numbers,
    whatever mode the model object is in (it is not changed). ``config``: the run's options
    (feature normalisation, evaluation mode and fan-outs, batch size, seed; the defaults when
    None), as :func:`load_model` returns them. Exact inference when the model offers it
    (``eval_mode="auto"``), sampled otherwise; sampled inference draws neighbours per batch of
    ``nodes``, so a subset's rows differ slightly from the same rows of a call over more nodes
    (each call repeats exactly).
    """
    config = config or TrainConfig()
    graphdef, state = nnx.split(model)  # the Evaluator runs it in evaluation mode
    mode = resolve_eval_mode(config.eval_mode, model)
    if nodes is None:
        wanted = np.arange(dataset.num_nodes, dtype=np.int32)
    else:
        wanted = np.asarray(nodes, dtype=np.int32)
    if wanted.ndim != 1 or (
        wanted.size and (wanted.min() < 0 or wanted.max() >= dataset.num_nodes)
    ):
        raise ConfigError("nodes", f"node ids in [0, {dataset.num_nodes}) as a 1-D array")
    evaluator = Evaluator(
        dataset,
        prepare_features(dataset, config),
        mode=mode,
        fanouts=eval_fanouts(config),
        batch_size=config.batch_size,
        seed=config.seed,
        nodes=wanted,
    )
    out = evaluator.probabilities(graphdef, state) if proba else evaluator.predict(graphdef, state)
    return out[wanted] if mode == "exact" and nodes is not None else out
