"""``fit``: the epoch loop that composes a run's parts; ``load_model`` and ``predict``.

Host side: :func:`fit` is a short loop over a :class:`~gns_jax.loader.Loader` (which owns the
whole input side): step (:class:`~gns_jax.step.Stepper`), evaluate at the end of every
``eval_every``-th epoch (:class:`~gns_jax.evaluate.Evaluator`), keep the parameters of the best
epoch and the results (:class:`~gns_jax.results.RunRecord`), checkpoint
(:class:`~gns_jax.checkpoint.RunCheckpoints`), report. The train state and the pure step live in
:mod:`gns_jax.step` (re-exported here). The dropout key of step ``t`` is
``fold_in(fold_in(key(seed), DROPOUT), t)``; every other random stream is the loader's. Same seed,
same machine: identical losses, also across a kill and a resume from a checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import optax
from flax import nnx

from gns_jax.checkpoint import Checkpointer, RunCheckpoints, dataset_identity, read_run
from gns_jax.config import RESUMABLE, TrainConfig
from gns_jax.data import Dataset
from gns_jax.errors import ConfigError
from gns_jax.evaluate import Evaluator, resolve_eval_mode
from gns_jax.factories import (
    check_memory,
    eval_fanouts,
    feature_norm,
    make_evaluator,
    make_loader,
    make_model,
    make_optimizer,
    make_parallel,
    make_pipeline,
    make_sampler,
    prepare_features,
)
from gns_jax.loader import DROPOUT, INIT
from gns_jax.meters import TransferMeter
from gns_jax.models import GraphSAGE
from gns_jax.pipeline import PipelineState, build_stages
from gns_jax.plan import plan_cache_fraction
from gns_jax.probes import IoMeter
from gns_jax.progress import Reporter
from gns_jax.results import RunRecord, resolve_metric
from gns_jax.step import (
    Stepper,
    TrainState,
    eval_graphdef,
    init_state,
    make_train_step,
    model_of,
    train_step,
)
from gns_jax.tasks import LossFn, resolve_task

__all__ = [
    "FitResult",
    "TrainState",
    "eval_graphdef",
    "fit",
    "init_state",
    "load_model",
    "make_train_step",
    "model_of",
    "predict",
    "resolve_metric",
    "train_step",
]


@dataclasses.dataclass
class FitResult:
    """What :func:`fit` returns.

    Attributes:
      metrics: the JSON results (the dict ``gns-jax train --out`` writes; ``docs/results.md``).
      model: the trained module, at the epoch of best validation score (the last epoch when
        nothing was evaluated), in evaluation mode.
      state: the final train state; ``graphdef`` its static model definition. Under
        ``parallel="pipeline"`` its ``opt_state`` is the tuple of the stages' optimiser states.
    """

    metrics: dict[str, Any]
    model: nnx.Module
    state: TrainState
    graphdef: nnx.GraphDef


def fit(
    dataset: Dataset,
    config: TrainConfig,
    *,
    model: nnx.Module | None = None,
    optimizer: optax.GradientTransformation | None = None,
    loss: LossFn | None = None,
    quiet: bool = False,
    evaluate_model: bool = True,
    on_epoch: Callable[[dict], None] | None = None,
    reporter: Reporter | None = None,
) -> FitResult:
    """Trains ``model`` (default: the command's GraphSAGE) and evaluates it.

    Args:
      dataset: the graph, features, labels and splits.
      config: every option (:class:`~gns_jax.config.TrainConfig`); ``config.task`` picks the
        task (:mod:`gns_jax.tasks`, detected from the labels by default).
      model: any Flax NNX module with the contract of :mod:`gns_jax.models`, already
        initialised; its ``nnx.Param`` variables are trained, its other variables (batch
        statistics, ``nnx.Rngs`` streams) updated by every step; trained in training mode,
        evaluated and returned in evaluation mode (under ``parallel="pipeline"`` its layer
        objects are the stages', updated in place at every evaluation). Evaluated exactly
        when it offers :class:`~gns_jax.evaluate.ExactInference` (``eval_mode="auto"``), by
        sampled inference otherwise.
      optimizer: any optax transformation (default: :func:`~gns_jax.factories.make_optimizer`,
        Adam with ``lr`` and L2 ``weight_decay``); resume a run with the same one.
      loss: ``(logits [S, C], labels [S] or [S, L]) -> [S]``, one loss a seed slot, averaged over
        the real seeds (default: the task's, :attr:`gns_jax.tasks.Task.loss`).
      quiet: no progress on stderr.
      evaluate_model: False (benchmarks) skips evaluation; the scores are then None.
      on_epoch: called after every epoch with the results so far (``status: "running"``).

    Test scores are reported at the epoch of best validation score by ``config.metric``
    (ties: the earliest).
    """
    config.validate()
    io_meter = IoMeter()  # disk reads and memory from here: the dataset's loading not counted
    reporter = reporter or Reporter(quiet)
    task, dataset = resolve_task(config.task, dataset)
    run = RunRecord(task, task.metric(config.metric))
    parallel = make_parallel(config)
    features = prepare_features(dataset, config)
    plan = None
    if config.cache_fraction == "auto":  # the planner picks the fraction (gns_jax.plan)
        plan = plan_cache_fraction(dataset, config, features, task, log=reporter.line)
        config = config.replace(cache_fraction=plan["chosen"])
    sampler = make_sampler(dataset, config)
    check_memory(dataset, config, sampler, model)  # before the model, the cache, the batches
    meter = TransferMeter(page_cache=io_meter.page_cache)  # the gathers' mapped reads counted
    loader = make_loader(dataset, config, sampler, features, meter, reporter.line, parallel)
    tx = make_optimizer(config) if optimizer is None else optimizer
    with jax.transfer_guard_host_to_device("allow"):
        base_key = jax.random.key(config.seed)
        if model is None:
            model = make_model(dataset, config, jax.random.fold_in(base_key, INIT))
        dropout_key = jax.random.fold_in(base_key, DROPOUT)
    if config.parallel == "pipeline":  # one stage a device, local learning (gns_jax.pipeline)
        stepper = make_pipeline(model, tx, config, base_key, dropout_key, loss or task.loss, task)
        graphdef, state = stepper.graphdef, stepper.initial
    else:
        graphdef, state = init_state(model, tx)
        stepper = Stepper(graphdef, tx, parallel, dropout_key, loss=loss or task.loss, task=task)
    eval_mode = resolve_eval_mode(config.eval_mode, model)
    evaluator = None
    if evaluate_model:  # its own meter: evaluation's bytes are not training's
        eval_meter = TransferMeter(page_cache=io_meter.page_cache)
        evaluator = make_evaluator(
            dataset, config, features, eval_mode, task, eval_meter, reporter.line
        )
    start_epoch, start_index, resumed_from, checkpoints = 0, 0, None, None
    if config.checkpoint_dir:
        checkpoints = RunCheckpoints(
            config, dataset_identity(dataset), class_name(model), sampler.cache_size,
            loader.num_batches, RESUMABLE,
        )  # fmt: skip
        if config.resume:  # the model's parameters: the template of the saved best ones
            params = stepper.model_variables(state)[0]
            if found := checkpoints.resume(state, run, loader, reporter.line, params):
                state, start_epoch, start_index, resumed_from = found

    def unevaluated(params_rest=None):
        """What a checkpoint saves as the best parameters before any evaluation: the model's
        now (None once an epoch was evaluated: the best epoch's are saved)."""
        if run.best_params is not None:
            return None
        return (params_rest or stepper.model_variables(state))[0]

    def results(status: str) -> dict:
        out = run.to_json(
            status, dataset=dataset, config=config, loader=loader, evaluator=evaluator,
            counter=stepper.counter, resumed_from=resumed_from, norm=feature_norm(dataset, config),
            eval_mode=eval_mode, parallel=parallel, io_meter=io_meter,
        )  # fmt: skip
        out["cache_fraction"] = config.cache_fraction if sampler.uses_cache else None
        out |= stepper.report()
        if plan is not None:
            out["plan"] = plan
        return out

    state = stepper.replicate(state)
    batches = loader.batches(start_epoch, config.epochs, start_index)
    try:
        for epoch in range(start_epoch, config.epochs):
            start = time.perf_counter()
            first = start_index if epoch == start_epoch else 0
            if epoch == 1 or (epoch == start_epoch and epoch > 0):
                stepper.reset_timing()  # the first epoch's compilation not counted
            if epoch > start_epoch or first == 0:
                run.new_epoch()
            title = f"epoch {epoch + 1}/{config.epochs}"
            with reporter.progress(title, loader.num_batches - first) as progress:

                def on_batch(batch, batch_loss, stage_losses):
                    run.add(batch, batch_loss, stage_losses)
                    progress.advance()

                index = first
                while index < loader.num_batches:
                    # up to the next mid-epoch checkpoint, if any (a pipeline drains there)
                    count = loader.num_batches - index
                    if checkpoints:
                        count = min(count, checkpoints.until_due(run.totals.batches))
                    state, batch = stepper.run(state, batches, count, reporter.line, on_batch)
                    index += count
                    last = index == loader.num_batches
                    if checkpoints and checkpoints.due(run.totals.batches, last):
                        checkpoints.save(
                            stepper.local(state), run, batch.state, False, unevaluated()
                        )
            # the loop's reads (epoch 1: the cache's draw too)
            record = run.epoch_done(epoch, time.perf_counter() - start, io_meter.lap())
            params_rest = None
            if evaluator is not None and (
                (epoch + 1) % config.eval_every == 0 or epoch == config.epochs - 1
            ):
                t0 = time.perf_counter()
                params_rest = stepper.model_variables(state)
                scores = evaluator.scores(graphdef, params_rest, task.metrics)
                run.evaluated(record, epoch, scores, time.perf_counter() - t0, params_rest[0])
                record |= {f"eval_{k}": v for k, v in io_meter.lap().items()}
            run.history.append(record)
            io_meter.sample()
            seeds = (loader.num_batches - first) * loader.batch_size
            reporter.line(run.line(record, config.epochs, seeds))
            if checkpoints:
                checkpoints.save(
                    stepper.local(state), run, batch.state, True, unevaluated(params_rest)
                )
            # With several processes every one computes the results (they sum over processes).
            if on_epoch is not None or (parallel is not None and parallel.multi_process):
                running = results("running")
                if on_epoch is not None:
                    on_epoch(running)
            run.new_epoch()
    finally:
        batches.close()
        stepper.close()
    metrics = results("completed")
    timing = stepper.timing()
    metrics["time_split_s"] |= {"wait": timing["wait"], "step": timing["step"]}
    metrics["input_wait_fraction"] = timing["wait_fraction"]
    state = stepper.model_state(state)
    trained = model_of(graphdef, state, run.best_params)
    return FitResult(metrics=metrics, model=trained, state=state, graphdef=graphdef)


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
    params = state.params
    if config.parallel == "pipeline":  # the stages' states, read back on this device
        stages, _ = build_stages(model, config.devices, config.local_head, jax.random.key(0))
        state = PipelineState(tuple(init_state(stage, tx)[1] for stage in stages))
    slots = int(record["cache_slots"])
    template = {"state": state, "best": params, "cache_ids": np.zeros(slots, np.int32)}
    checkpoints = Checkpointer(directory)
    found = checkpoints.latest(lambda r: template)
    if found is None:
        raise ConfigError("checkpoint", f"{directory} holds no readable gns-jax checkpoint")
    _, arrays, record = found
    state = arrays["state"]
    if config.parallel == "pipeline":  # the model's other variables, from its stages
        for stage, saved in zip(stages, state.stages):
            nnx.update(stage, saved.rest)
        state = TrainState(None, None, None, nnx.state(model, nnx.Not(nnx.Param)))
    return model_of(graphdef, state, arrays["best"]), config, record


def predict(
    model: nnx.Module,
    dataset: Dataset,
    *,
    proba: bool = False,
    nodes: np.ndarray | None = None,
    config: TrainConfig | None = None,
) -> np.ndarray:
    """The model's predictions of ``nodes`` (default: every node), in that order: int32 classes
    ``[n]`` (an int8 0/1 matrix ``[n, L]`` for a multi-label task) or, with ``proba``, float32
    probabilities: the softmax ``[n, C]`` of a class task (binary: column 1 the positive
    class) or a sigmoid a label ``[n, L]`` (:mod:`gns_jax.tasks`; the task is ``config.task``'s).

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
    task, dataset = resolve_task(config.task, dataset)
    evaluator = Evaluator(
        dataset,
        prepare_features(dataset, config),
        mode=mode,
        fanouts=eval_fanouts(config),
        batch_size=config.batch_size,
        seed=config.seed,
        nodes=wanted,
        task=task,
    )
    out = evaluator.probabilities(graphdef, state) if proba else evaluator.predict(graphdef, state)
    return out[wanted] if mode == "exact" and nodes is not None else out
