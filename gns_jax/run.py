"""A training run's parts, built from its options: :func:`build_run`. Host-side.

:func:`gns_jax.fit` is :func:`build_run` and a loop that drives its parts: the
:class:`~gns_jax.loader.Loader` yields the batches, the stepper
(:class:`~gns_jax.step.StepperLike`: :class:`~gns_jax.step.Stepper` or the pipeline's) trains on
them in windows, and the hooks (:mod:`gns_jax.hooks`) evaluate
(:class:`~gns_jax.evaluate.Evaluator`), record and report (:class:`~gns_jax.results.RunRecord`),
checkpoint (:class:`~gns_jax.checkpoint.RunCheckpoints`) and publish the results so far.
:func:`build_run` does, in order: the options' check, the task, the planner's cache fraction
(``cache_fraction="auto"``, :mod:`gns_jax.plan`), the sampler, the memory check, the loader, the
model and the stepper, the evaluator, and the checkpoints (resuming from the latest one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import optax
from flax import nnx

from gns_jax.checkpoint import RunCheckpoints, class_name, dataset_identity
from gns_jax.config import RESUMABLE, TrainConfig
from gns_jax.data import Dataset
from gns_jax.errors import ConfigError
from gns_jax.evaluate import Evaluator, resolve_eval_mode
from gns_jax.factories import (
    check_memory,
    feature_norm,
    make_edge_seeds,
    make_edge_split,
    make_evaluator,
    make_loader,
    make_model,
    make_optimizer,
    make_parallel,
    make_pipeline,
    make_sampler,
    prepare_features,
)
from gns_jax.hooks import Checkpointing, Evaluation, Hook, Publish, Report
from gns_jax.linkbatch import EdgeSeeds, max_seeds
from gns_jax.linkeval import LinkEvaluator
from gns_jax.loader import Loader
from gns_jax.meters import TransferMeter
from gns_jax.parallel import DataParallel
from gns_jax.plan import plan_cache_fraction
from gns_jax.probes import IoMeter
from gns_jax.results import RunRecord
from gns_jax.step import Stepper, StepperLike, init_state
from gns_jax.streams import DROPOUT, INIT
from gns_jax.tasks import LossFn, Task, resolve_task

__all__ = ["Run", "build_run"]


@dataclasses.dataclass
class Run:
    """The parts of one training run (:func:`build_run`) and where its training starts.

    Attributes:
      dataset: the dataset, its task resolved (:func:`gns_jax.tasks.resolve_task`).
      config: the options, ``cache_fraction`` the planner's choice when it was ``auto``.
      task: the task (loss, metrics).
      loader: the training loader.
      stepper: the stepper (:class:`~gns_jax.step.StepperLike`).
      graphdef: the model's graph definition.
      state: the train state to start from (initial, or the checkpoint's), one device's copy.
      evaluator: None when the run does not evaluate.
      checkpoints: None without ``checkpoint_dir``.
      record: the run's record (:class:`~gns_jax.results.RunRecord`; restored on resume).
      io_meter: the run's reads and memory (from before the loader: the dataset's loading not
        counted).
      parallel: data parallelism, or None.
      plan: the planner's report (``cache_fraction="auto"``), or None.
      eval_mode: ``exact`` or ``sampled``.
      start_epoch, start_index: the first batch to train (past 0 when resumed).
      resumed_from: the step of the checkpoint resumed from, or None.
    """

    dataset: Dataset
    config: TrainConfig
    task: Task
    loader: Loader
    stepper: StepperLike
    graphdef: nnx.GraphDef
    state: Any
    evaluator: Evaluator | LinkEvaluator | None
    checkpoints: RunCheckpoints | None
    record: RunRecord
    io_meter: IoMeter
    parallel: DataParallel | None = None
    plan: dict | None = None
    eval_mode: str = "exact"
    start_epoch: int = 0
    start_index: int = 0
    resumed_from: int | None = None

    def first_batch(self, epoch: int) -> int:
        """The first batch of ``epoch`` to train (past 0 in the epoch a resumed run starts)."""
        return self.start_index if epoch == self.start_epoch else 0

    def hooks(
        self, log: Callable[[str], None], on_epoch: Callable[[dict], None] | None = None
    ) -> list[Hook]:
        """What ``fit`` does besides stepping, in order: evaluate (if the run does), record and
        report the epoch, checkpoint (if the run does), publish the results so far (to
        ``on_epoch``; with several processes, always)."""
        config, loader, record = self.config, self.loader, self.record
        hooks: list[Hook] = []
        if self.evaluator is not None:
            every = (config.eval_every, config.epochs)
            hooks.append(
                Evaluation(
                    self.evaluator, self.stepper, self.graphdef, record, self.io_meter, *every
                )
            )
        sizes = (loader.batch_size, loader.num_batches)
        hooks.append(Report(record, self.io_meter, log, config.epochs, *sizes))
        if self.checkpoints is not None:
            hooks.append(Checkpointing(self.checkpoints, self.stepper, record))
        if on_epoch is not None or (self.parallel is not None and self.parallel.multi_process):
            hooks.append(Publish(self.results, on_epoch))
        return hooks

    def results(self, status: str) -> dict:
        """The JSON results (``docs/results.md``) with ``status``; ``completed`` ones carry the
        stepper's wait and step times too."""
        config, stepper = self.config, self.stepper
        out = self.record.to_json(
            status, dataset=self.dataset, config=config, loader=self.loader,
            evaluator=self.evaluator, counter=stepper.counter, resumed_from=self.resumed_from,
            norm=feature_norm(self.dataset, config), eval_mode=self.eval_mode,
            parallel=self.parallel, io_meter=self.io_meter,
        )  # fmt: skip
        out["cache_fraction"] = config.cache_fraction if self.loader.sampler.uses_cache else None
        out |= stepper.report()
        if self.plan is not None:
            out["plan"] = self.plan
        if status == "completed":
            timing = stepper.timing()
            out["time_split_s"] |= {"wait": timing["wait"], "step": timing["step"]}
            out["input_wait_fraction"] = timing["wait_fraction"]
        return out


def build_run(
    dataset: Dataset,
    config: TrainConfig,
    *,
    model: nnx.Module | None = None,
    optimizer: optax.GradientTransformation | None = None,
    loss: LossFn | None = None,
    evaluate_model: bool = True,
    log: Callable[[str], None] | None = None,
) -> Run:
    """The parts of a training run of ``config`` on ``dataset`` (the arguments as
    :func:`gns_jax.fit`'s; ``log`` hears the planner, compilations, budget growth and resumption).

    Raises ConfigError for impossible options, a run that cannot fit in memory, or a checkpoint
    folder that cannot be resumed."""
    config = config.validate().resolved()  # the recorded options: task defaults filled in
    log = log or (lambda line: None)
    io_meter = IoMeter()  # disk reads and memory from here: the dataset's loading not counted
    task, dataset = resolve_task(config.task, dataset)
    split = edges = None
    train_data = dataset  # the graph training samples from (link prediction: the train edges')
    if task.link:
        task = dataclasses.replace(task, hits_k=config.hits_k)
        split = make_edge_split(dataset, config)
        train_data = dataclasses.replace(dataset, graph=split.train_graph(dataset.graph))
        edges = make_edge_seeds(train_data, config, split)
        log(f"edge split: {len(split.train_pos):,} training, {len(split.val_pos):,} validation "
            f"and {len(split.test_pos):,} test edges")  # fmt: skip
    record = RunRecord(task, task.metric(config.metric))
    parallel = make_parallel(config)
    features = prepare_features(dataset, config)
    plan = None
    if config.cache_fraction == "auto":  # the planner picks the fraction (gns_jax.plan)
        plan = plan_cache_fraction(*_plan_inputs(train_data, config, edges), features, task,
                                   log=log)  # fmt: skip
        config = config.replace(cache_fraction=plan["chosen"])
    size = None if edges is None else link_seeds(config, edges)
    sampler = make_sampler(train_data, config, size)
    check_memory(train_data, config, sampler, model)  # before the model, the cache, the batches
    meter = TransferMeter(page_cache=io_meter.page_cache)  # the gathers' mapped reads counted
    loader = make_loader(train_data, config, sampler, features, meter, log, parallel, edges)
    tx = make_optimizer(config) if optimizer is None else optimizer
    with jax.transfer_guard_host_to_device("allow"):
        base_key = jax.random.key(config.seed)
        if model is None:
            model = make_model(dataset, config, jax.random.fold_in(base_key, INIT))
        dropout_key = jax.random.fold_in(base_key, DROPOUT)
    loss = loss or task.loss
    if config.parallel == "pipeline":  # one stage a device, local learning (gns_jax.pipeline)
        stepper = make_pipeline(model, tx, config, base_key, dropout_key, loss, task)
        graphdef, state = stepper.graphdef, stepper.initial
    else:
        graphdef, state = init_state(model, tx)
        stepper = Stepper(graphdef, tx, parallel, dropout_key, loss=loss, task=task)
    eval_mode = resolve_eval_mode(config.eval_mode, model)
    evaluator = None
    if evaluate_model and task.link:  # the validation and test edges (exact inference)
        if eval_mode != "exact":
            raise ConfigError("eval_mode", "link prediction evaluates exactly: the model needs "
                              "project() (ExactInference)")  # fmt: skip
        eval_meter = TransferMeter(page_cache=io_meter.page_cache)
        evaluator = LinkEvaluator(dataset, split, features, task, eval_meter)
    elif evaluate_model:  # its own meter: evaluation's bytes are not training's
        eval_meter = TransferMeter(page_cache=io_meter.page_cache)
        evaluator = make_evaluator(dataset, config, features, eval_mode, task, eval_meter, log)
    run = Run(
        dataset, config, task, loader, stepper, graphdef, state, evaluator, None, record,
        io_meter, parallel, plan, eval_mode,
    )  # fmt: skip
    if config.checkpoint_dir:
        run.checkpoints = _checkpoints(run, model, sampler.cache_size, log)
    return run


def link_seeds(config: TrainConfig, edges: EdgeSeeds) -> int:
    """A link sampler's seeds a shard: the endpoints of ``B`` positives and their negatives."""
    if config.batch_size % config.data_shards:
        raise ConfigError("batch_size", f"{config.batch_size} edges do not split over "
                          f"{config.data_shards} devices")  # fmt: skip
    return max_seeds(config.batch_size // config.data_shards, edges.neg_ratio)


def _plan_inputs(dataset: Dataset, config: TrainConfig, edges: EdgeSeeds | None):
    """What the planner samples: the run's seed nodes and batch; for link prediction the
    training edges' endpoints, in batches of a link batch's seeds."""
    if edges is None:
        return dataset, config
    ends = np.unique(edges.edges)
    return (dataclasses.replace(dataset, train_idx=ends.astype(np.int32)),
            config.replace(batch_size=link_seeds(config, edges)))  # fmt: skip


def _checkpoints(run: Run, model: nnx.Module, cache_slots: int, log) -> RunCheckpoints:
    """The run's checkpoints; with ``resume``, the run (state, record, loader, start) taken up
    from the latest one, if any."""
    config = run.config
    checkpoints = RunCheckpoints(
        config, dataset_identity(run.dataset), class_name(model), cache_slots,
        run.loader.num_batches, RESUMABLE,
    )  # fmt: skip
    if config.resume:  # the model's parameters: the template of the saved best ones
        params = run.stepper.model_variables(run.state)[0]
        found = checkpoints.resume(run.state, run.record, run.loader, log, params)
        if found:
            run.state, run.start_epoch, run.start_index, run.resumed_from = found
    return checkpoints
