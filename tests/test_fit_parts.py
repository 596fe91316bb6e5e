"""fit from parts, and a Loader from parts: ``build_run``'s parts and hooks, the steppers'
protocol, the loss the train step and the pipeline share, and a loader built from explicit
parts against the documented constructor."""

import ast
import functools
import hashlib
import inspect
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx

import gns_jax
from gns_jax import batch as batch_module
from gns_jax import pipeline, step, streams
from gns_jax.config import TrainConfig
from gns_jax.errors import ConfigError
from gns_jax.evaluate import Evaluator
from gns_jax.factories import (
    eval_fanouts,
    make_evaluator,
    make_loader,
    make_model,
    make_optimizer,
    make_sampler,
)
from gns_jax.hooks import Checkpointing, Evaluation, Publish, Report
from gns_jax.loader import Loader, LoaderParts
from gns_jax.pipeline import PipelineStepper, build_stages, stage_step
from gns_jax.run import build_run
from gns_jax.step import Stepper, StepperLike, batch_loss, init_state, train_step
from gns_jax.tasks import Task, resolve_task, softmax_loss

ROOT = Path(__file__).resolve().parent.parent
GNS = TrainConfig(sampler="gns", batch_size=40, fanouts=(4, 3), cache_fraction=0.1, seed=3)


def _digests(loader, epochs=2):
    out = []
    for batch in loader.batches(0, epochs):
        h = hashlib.sha256()
        for leaf in jax.tree.leaves(jax.device_get(batch.inputs)):
            h.update(np.ascontiguousarray(leaf).tobytes())
        out.append((h.hexdigest(), batch.rows_moved, batch.refresh is not None))
    return out


def _body_lines(path: Path, name: str) -> int:
    """Lines of function ``name``'s body in ``path``, its docstring left out."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            body = node.body
            if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]
            return body[-1].end_lineno - body[0].lineno + 1
    raise AssertionError(f"no {name} in {path}")


def test_fit_drives_parts_in_at_most_sixty_lines():
    assert _body_lines(ROOT / "gns_jax" / "train.py", "fit") <= 60
    params = inspect.signature(Loader.__init__).parameters
    assert len(params) - 1 <= 8  # besides self


def test_build_run_returns_the_parts_and_the_hooks_in_order(tiny_dataset, tiny_config, tmp_path):
    run = build_run(tiny_dataset, tiny_config, evaluate_model=False)
    assert isinstance(run.stepper, Stepper) and isinstance(run.stepper, StepperLike)
    assert run.evaluator is None and run.checkpoints is None and run.plan is None
    assert (run.start_epoch, run.start_index, run.resumed_from) == (0, 0, None)
    assert [type(h) for h in run.hooks(print)] == [Report]
    assert [type(h) for h in run.hooks(print, on_epoch=print)] == [Report, Publish]
    config = tiny_config.replace(checkpoint_dir=str(tmp_path / "ckpt"))
    run = build_run(tiny_dataset, config)
    assert isinstance(run.evaluator, Evaluator) and run.checkpoints is not None
    assert run.loader.num_batches == 3 and run.record.history == []
    assert [type(h) for h in run.hooks(print)] == [Evaluation, Report, Checkpointing]
    # evaluation is due at the epoch's end only; checkpoints every checkpoint_every batches
    assert run.hooks(print)[0].until_due(0) >= 2**62
    run.stepper.close()


def test_both_steppers_are_stepper_like(tiny_dataset, tiny_config):
    model = make_model(tiny_dataset, tiny_config, jax.random.key(0))
    tx = make_optimizer(tiny_config)
    graphdef, _ = init_state(model, tx)
    task = Task("multiclass")
    plain = Stepper(graphdef, tx, None, jax.random.key(1), loss=softmax_loss, task=task)
    piped = PipelineStepper(
        model, tx, jax.devices()[:1], jax.random.key(1), head_key=jax.random.key(2),
        loss=softmax_loss, task=task,
    )  # fmt: skip
    try:
        assert isinstance(plain, StepperLike) and isinstance(piped, StepperLike)
    finally:
        piped.close()

    class NoTiming:  # everything but timing()
        counter = None
        run = replicate = local = model_variables = model_state = lambda self, *a: None
        reset_timing = report = close = lambda self: None

    assert not isinstance(NoTiming(), StepperLike)


def test_the_train_step_and_a_stage_share_one_loss(tiny_dataset, tiny_config):
    """The pipeline's stage step is the train step's loss and update over a stage's forward:
    a one-stage pipeline's loss and update are the train step's, and both are batch_loss's."""
    assert pipeline.batch_loss is step.batch_loss and pipeline.descend is step.descend
    assert "masked_mean" not in inspect.getsource(stage_step)  # no copy of the loss
    loader = Loader(tiny_dataset, make_sampler(tiny_dataset, tiny_config), seed=0, prefetch=0)
    batches = loader.batches(0, 1)
    batch = next(batches).inputs
    batches.close()
    model = make_model(tiny_dataset, tiny_config, jax.random.key(1))
    tx = make_optimizer(tiny_config)
    task, key = Task("multiclass"), jax.random.key(4)
    graphdef, state = init_state(model, tx)
    stepped, metrics = jax.jit(
        functools.partial(train_step, graphdef=graphdef, tx=tx, loss=softmax_loss, task=task)
    )(state, batch, key)
    step_key = jax.random.fold_in(key, state.step)

    def forward(module):
        return module(batch.x, batch.blocks, key=step_key), None

    loss_fn = batch_loss(graphdef, state.rest, forward, batch.labels, batch.seed_mask, softmax_loss)
    value = jax.jit(loss_fn)(state.params)[0]
    (stage,), _ = build_stages(model, 1, 0, jax.random.key(2))
    stage_graphdef, stage_state = init_state(stage, tx)
    one_stage = functools.partial(
        stage_step, graphdef=stage_graphdef, tx=tx, first=0, last=True,
        layer_input=model.layer_input, loss=softmax_loss, task=task,
    )  # fmt: skip
    staged, out, stage_metrics = jax.jit(one_stage)(
        stage_state, batch.x, batch.blocks, batch.labels, batch.seed_mask, key
    )
    assert out is None
    np.testing.assert_array_equal(metrics["loss"], value)
    np.testing.assert_array_equal(stage_metrics["loss"], value)
    np.testing.assert_array_equal(stage_metrics["correct"], metrics["correct"])
    for a, b in zip(jax.tree.leaves(staged.params), jax.tree.leaves(stepped.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_a_loader_from_explicit_parts_yields_the_documented_constructors_batches(tiny_dataset):
    ds = tiny_dataset
    sampler = make_sampler(ds, GNS)  # shared: its budgets compile once
    documented = Loader(ds, sampler, seed=3, features=ds.features, prefetch=0)
    parts = LoaderParts.from_config(ds, GNS.replace(prefetch=0), sampler, ds.features)
    explicit = Loader(ds, sampler, parts)
    factory = make_loader(ds, GNS, sampler, ds.features)
    expected = _digests(documented)
    assert len(expected) == 2 * documented.num_batches and expected[0][2]  # the cache drawn
    assert _digests(explicit) == expected
    assert _digests(factory) == expected
    assert explicit.seed == 3 and explicit.cache_refresh == 1 and explicit.budget_mode == "auto"
    assert explicit.streams is parts.streams and explicit.meter is parts.meter
    with pytest.raises(TypeError, match="seed"):
        Loader(ds, sampler, parts, seed=3)
    with pytest.raises(ConfigError, match="prefetch"):
        LoaderParts.build(ds, sampler, prefetch=-1)


def test_the_factorys_sampled_evaluator_is_the_documented_one(tiny_dataset, tiny_config):
    task, ds = resolve_task("auto", tiny_dataset)
    model = make_model(ds, tiny_config, jax.random.key(1))
    graphdef, state = nnx.split(model)
    built = make_evaluator(ds, tiny_config, ds.features, "sampled", task)
    documented = Evaluator(
        ds, ds.features, mode="sampled", fanouts=eval_fanouts(tiny_config),
        batch_size=tiny_config.batch_size, seed=tiny_config.seed, budget=tiny_config.budget,
        prefetch=tiny_config.prefetch, task=task,
    )  # fmt: skip
    np.testing.assert_array_equal(built.nodes, documented.nodes)
    assert built.loader.name == documented.loader.name == "evaluation sampler"
    np.testing.assert_array_equal(
        built.probabilities(graphdef, state), documented.probabilities(graphdef, state)
    )


def test_moved_names_keep_their_old_import_paths():
    from gns_jax.loader import (
        CACHE,
        CALIBRATE,
        DROPOUT,
        HEADS,
        INIT,
        SAMPLE,
        SHUFFLE,
        DeviceBatch,
    )
    from gns_jax.train import class_name

    ids = (SHUFFLE, SAMPLE, DROPOUT, INIT, CACHE, CALIBRATE, HEADS)
    assert ids == (streams.SHUFFLE, streams.SAMPLE, streams.DROPOUT, streams.INIT,
                   streams.CACHE, streams.CALIBRATE, streams.HEADS) == tuple(range(7))  # fmt: skip
    assert DeviceBatch is batch_module.DeviceBatch is gns_jax.DeviceBatch
    assert class_name(gns_jax.GraphSAGE) == "gns_jax.models.GraphSAGE"
