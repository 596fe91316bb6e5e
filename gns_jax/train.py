"""``fit``: the epoch loop that drives a run's parts; ``load_model`` and ``predict``.

Host side: :func:`fit` builds the parts of a run from its options (:func:`gns_jax.run.build_run`:
the :class:`~gns_jax.loader.Loader`, which owns the whole input side, the stepper
(:class:`~gns_jax.step.StepperLike`), the :class:`~gns_jax.evaluate.Evaluator`, the
:class:`~gns_jax.checkpoint.RunCheckpoints` and the :class:`~gns_jax.results.RunRecord`) and
drives them: the stepper trains in windows of batches, and the periodic hooks of
:mod:`gns_jax.hooks` evaluate at the end of every ``eval_every``-th epoch, record and report the
epoch, checkpoint mid-epoch and at every epoch's end, and publish the results so far. The train
state and the pure step live in :mod:`gns_jax.step` (re-exported here). The dropout key of step
``t`` is ``fold_in(fold_in(key(seed), DROPOUT), t)``; every other random stream is the loader's
(:mod:`gns_jax.streams`). Same seed, same machine: identical losses, also across a kill and a
resume from a checkpoint.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import optax
from flax import nnx

from gns_jax.checkpoint import Checkpointer, class_name, dataset_identity, read_run
from gns_jax.config import TrainConfig
from gns_jax.data import Dataset
from gns_jax.errors import ConfigError
from gns_jax.evaluate import Evaluator, in_eval_mode, resolve_eval_mode
from gns_jax.factories import eval_fanouts, make_model, make_optimizer, prepare_features
from gns_jax.hooks import Loop, heard
from gns_jax.models import GraphSAGE, LinkPredictor
from gns_jax.pipeline import PipelineState, build_stages
from gns_jax.preempt import Interrupted
from gns_jax.progress import Reporter
from gns_jax.results import resolve_metric
from gns_jax.run import build_run
from gns_jax.step import (
    TrainState,
    eval_graphdef,
    init_state,
    make_train_step,
    model_of,
    train_step,
)
from gns_jax.tasks import LossFn, Task, resolve_task

__all__ = [
    "FitResult",
    "predict_links",
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
    stop: Callable[[], int | None] | None = None,
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
      stop: read after every step; when it returns a signal number (or any true value), the
        step in flight finishes, a checkpoint is written at the batch reached (with
        ``checkpoint_dir``) and :class:`~gns_jax.preempt.Interrupted` is raised with the results
        so far (``status: "interrupted"``); ``--resume`` goes on from there
        (:class:`gns_jax.preempt.Preemption` turns SIGTERM and SIGINT into such a request).

    Test scores are reported at the epoch of best validation score by ``config.metric``
    (ties: the earliest).
    """
    reporter = reporter or Reporter(quiet)
    stopping = stop or (lambda: None)
    run = build_run(
        dataset, config, model=model, optimizer=optimizer, loss=loss,
        evaluate_model=evaluate_model, log=reporter.line,
    )  # fmt: skip
    config, loader, stepper, record = run.config, run.loader, run.stepper, run.record
    hooks = run.hooks(reporter.line, on_epoch)
    loop = Loop(stepper.replicate(run.state))
    batches = loader.batches(run.start_epoch, config.epochs, run.start_index)
    try:
        for epoch in range(run.start_epoch, config.epochs):
            start, loop.epoch, loop.first = time.perf_counter(), epoch, run.first_batch(epoch)
            if epoch == 1 or (epoch == run.start_epoch and epoch > 0):
                stepper.reset_timing()  # the first epoch's compilation not counted
            if epoch > run.start_epoch or loop.first == 0:
                record.new_epoch()  # (a resumed epoch keeps the losses of its batches so far)
            title = f"epoch {epoch + 1}/{config.epochs}"
            with reporter.progress(title, loader.num_batches - loop.first) as progress:
                on_batch = functools.partial(heard, record, progress)
                index = loop.first
                while index < loader.num_batches:
                    # up to the next hook due mid-epoch, if any (a pipeline drains there)
                    due = (hook.until_due(record.totals.batches) for hook in hooks)
                    count = min(loader.num_batches - index, *due)
                    before = record.totals.batches
                    loop.state, loop.batch = stepper.run(
                        loop.state, batches, count, reporter.line, on_batch, stop=stopping
                    )
                    index += record.totals.batches - before
                    if stopping():
                        break
                    for hook in hooks:
                        hook.after_window(loop, index == loader.num_batches)
            if stopping() and index < loader.num_batches:  # stopped mid-epoch
                _stop(run, hooks, loop, True, stopping(), f"at batch {index} of epoch {epoch + 1}")
            # the loop's reads (epoch 1: the cache's draw too)
            row = record.epoch_done(epoch, time.perf_counter() - start, run.io_meter.lap())
            loop.variables = None
            for hook in hooks:  # evaluate, record and report, checkpoint, publish
                hook.after_epoch(loop, row)
            record.new_epoch()
            if stopping() and epoch + 1 < config.epochs:
                _stop(run, hooks, loop, False, stopping(), f"after epoch {epoch + 1}")
    finally:
        batches.close()
        stepper.close()
    metrics = run.results("completed")
    state = stepper.model_state(loop.state)
    trained = model_of(run.graphdef, state, record.best_params)
    return FitResult(metrics=metrics, model=trained, state=state, graphdef=run.graphdef)


def _stop(run, hooks, loop: Loop, mid_epoch: bool, signum, where: str) -> None:
    """Ends a run stopped on request: checkpoints where it stopped, raises Interrupted."""
    for hook in hooks:
        hook.interrupted(loop, mid_epoch)
    signum = signum if isinstance(signum, int) and not isinstance(signum, bool) else 15
    raise Interrupted(signum, run.results("interrupted"), where)


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
    config = TrainConfig.from_json(record["config"])
    own = class_name(LinkPredictor) if config.task == "link" else class_name(GraphSAGE)
    if model is None and saved != own:  # not the command's model: a template is needed
        raise ConfigError(
            "checkpoint",
            f"{directory} holds a {saved}, not the command's {own}: pass a template of it, "
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


def predict_links(
    model: nnx.Module,
    dataset: Dataset,
    pairs: np.ndarray,
    *,
    config: TrainConfig | None = None,
) -> np.ndarray:
    """float32 ``[M]``: the probability that each node pair of ``pairs`` (int ``[M, 2]``) is an
    edge, from a link predictor (:class:`~gns_jax.models.LinkPredictor`, e.g. from
    :func:`load_model` of a ``--task link`` run), with the whole of ``dataset``'s graph for
    message passing: exact inference of every node's embedding, then the model's decoder and a
    sigmoid. In evaluation mode; two calls give the same numbers. ``config``: the run's options
    (its feature normalisation), as :func:`load_model` returns them."""
    from gns_jax.linkeval import node_embeddings, score_pairs

    config = config or TrainConfig(task="link")
    pairs = np.asarray(pairs)
    if pairs.ndim != 2 or pairs.shape[1] != 2 or pairs.dtype.kind not in "iu":
        raise ConfigError("pairs", f"an integer [M, 2] array of node pairs, got {pairs.dtype} "
                          f"{pairs.shape}")  # fmt: skip
    if pairs.size and (pairs.min() < 0 or pairs.max() >= dataset.num_nodes):
        raise ConfigError("pairs", f"node ids in [0, {dataset.num_nodes})")
    if not hasattr(model, "score"):
        raise ConfigError("model", "predict_links needs a link predictor (a model with score())")
    graphdef, state = nnx.split(model)
    evaluator = Evaluator(dataset, prepare_features(dataset, config), mode="exact",
                          task=Task("link"))  # fmt: skip
    h = node_embeddings(evaluator, graphdef, state)
    logits = score_pairs(in_eval_mode(graphdef, state), state, h, pairs)
    return (1.0 / (1.0 + np.exp(-logits.astype(np.float64)))).astype(np.float32)
