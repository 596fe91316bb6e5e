"""Checkpoints of a training run, written with orbax-checkpoint. Host-side.

A checkpoint holds everything a run needs to go on exactly as if it had never stopped:

* arrays (orbax's pytree format): the train state (parameters, optimiser state, step), the
  parameters at the epoch of best validation accuracy, and the GNS cache's node ids;
* a JSON record: the format and version, the dataset's identity (name, sizes), every option
  (``TrainConfig``), the position (epoch, next batch), the loader's state (budget, the layer
  sizes it grows from, budget growths, the epoch its cache was drawn at), the history of the
  epochs done, the best-validation bookkeeping, the per-batch losses of the epoch in progress and
  the running totals behind the reported rates, and a SHA-256 digest of the arrays.

The random streams need no state: every one is derived from ``(seed, stream, counter)``
(:mod:`gns_jax.loader`), so the position is enough. With the same seed on the same machine, a
run killed at any point and resumed from its latest checkpoint ends with the same numbers as an
uninterrupted one (``tests/test_checkpoint.py`` kills one with SIGKILL mid-epoch).

Each checkpoint is written to a temporary folder and renamed into place when complete (orbax's
atomic commit), and the last :data:`KEEP` are kept. On resume the newest one is read and its
digest checked; a corrupt or truncated one is reported with a warning and the previous one used.
A checkpoint of another dataset, or of options that change the numbers, is refused with one
clear error.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import jax
import numpy as np

from gns_jax.errors import CheckpointError, ConfigError

__all__ = [
    "FORMAT",
    "KEEP",
    "Checkpointer",
    "CheckpointWarning",
    "RunCheckpoints",
    "class_name",
    "dataset_identity",
]

FORMAT = "gns-jax-checkpoint"
VERSION = 1
KEEP = 3  # checkpoints kept: the newest, and older ones to fall back on


class CheckpointWarning(UserWarning):
    """A checkpoint could not be read and an older one was used."""


def dataset_identity(dataset) -> dict:
    """What a checkpoint records of its dataset, to refuse another one on resume."""
    return {
        "name": dataset.name,
        "num_nodes": int(dataset.num_nodes),
        "num_edges": int(dataset.graph.num_edges),
        "num_features": int(dataset.num_features),
        "num_classes": int(dataset.num_classes),
        "split": dataset.split,
        "num_train": int(dataset.train_idx.size),
    }


def class_name(model) -> str:
    """``module.QualifiedName`` of a model's class (or of the class itself), as checkpoints
    record it."""
    cls = model if isinstance(model, type) else type(model)
    return f"{cls.__module__}.{cls.__qualname__}"


def _is_key(leaf) -> bool:
    return isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def storable(tree):
    """``tree`` with every typed PRNG key array (an ``nnx.Rngs`` stream's key, say) replaced by
    its raw ``uint32`` key data, which orbax and the digest can write."""
    return jax.tree.map(lambda leaf: jax.random.key_data(leaf) if _is_key(leaf) else leaf, tree)


def unstorable(tree, template):
    """The inverse of :func:`storable`: key data back into keys where ``template`` has keys."""

    def back(leaf, like):
        return (
            jax.random.wrap_key_data(leaf, impl=jax.random.key_impl(like))
            if _is_key(like)
            else leaf
        )

    return jax.tree.map(back, tree, template)


def digest(tree) -> str:
    """SHA-256 over every leaf's dtype, shape and bytes, in tree order (host copies; PRNG keys
    as their key data)."""
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(jax.device_get(storable(tree))):
        a = np.ascontiguousarray(np.asarray(leaf))
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _quiet_orbax():
    import orbax.checkpoint as ocp

    for name in ("absl", "orbax", "jax._src.distributed"):
        logging.getLogger(name).setLevel(logging.ERROR)
    return ocp


@contextlib.contextmanager
def _failures_unlogged():
    """While a checkpoint is written: orbax's worker threads neither log nor print the failures
    that :meth:`Checkpointer.save` reports itself, in one line."""
    loggers = [logging.getLogger(name) for name in ("absl", "orbax")]
    levels = [logger.level for logger in loggers]
    hooks = threading.excepthook, sys.unraisablehook
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    threading.excepthook = sys.unraisablehook = lambda args: None
    try:
        yield
    finally:
        threading.excepthook, sys.unraisablehook = hooks
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _causes(error: BaseException):
    """``error`` and the exceptions it was raised from or during."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


class Checkpointer:
    """Saves and restores the checkpoints of one run in ``directory``.

    Args:
      directory: the run's checkpoint folder (created if missing).
      keep: how many checkpoints to keep.
    """

    def __init__(self, directory: str | Path, keep: int = KEEP):
        self.directory = Path(directory).absolute()
        if self.directory.exists() and not self.directory.is_dir():
            raise ConfigError("checkpoint_dir", f"{directory} exists and is not a folder")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError("checkpoint_dir", f"cannot create {directory} ({e})") from None
        ocp = _quiet_orbax()
        self._ocp = ocp
        self._manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(
                max_to_keep=keep, create=True, enable_async_checkpointing=False
            ),
        )

    def steps(self) -> list[int]:
        """The steps of the complete checkpoints in the folder, oldest first."""
        self._manager.reload()
        return sorted(self._manager.all_steps())

    def save(self, step: int, arrays: Any, record: dict) -> None:
        """Writes checkpoint ``step``: ``arrays`` (a pytree of arrays) and a JSON ``record``."""
        ocp = self._ocp
        record = {"format": FORMAT, "version": VERSION, **record, "digest": digest(arrays)}
        for newer in [s for s in self.steps() if s >= step]:  # unreadable ones a resume skipped
            self._manager.delete(newer)
        before = set(os.listdir(self.directory))
        try:
            with _failures_unlogged():
                self._manager.save(
                    step,
                    args=ocp.args.Composite(
                        arrays=ocp.args.StandardSave(storable(arrays)),
                        record=ocp.args.JsonSave(record),
                    ),
                    force=True,
                )
                self._manager.wait_until_finished()
        except Exception as e:  # noqa: BLE001 - disk full, file-size limit, ...: any write failure
            for name in set(os.listdir(self.directory)) - before:  # the partial checkpoint
                shutil.rmtree(self.directory / name, ignore_errors=True)
            cause = next((c for c in _causes(e) if isinstance(c, OSError)), e)
            reason = getattr(cause, "strerror", None) or str(cause).splitlines()[0][:120]
            raise CheckpointError(
                f"{self.directory}: cannot write checkpoint {step} ({reason}); the folder keeps "
                f"its last complete checkpoints ({', '.join(map(str, self.steps())) or 'none'})"
            ) from None

    def read_record(self, step: int) -> dict:
        """The JSON record of checkpoint ``step`` (raises on a missing or corrupt one)."""
        ocp = self._ocp
        out = self._manager.restore(step, args=ocp.args.Composite(record=ocp.args.JsonRestore()))
        record = out["record"]
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            raise ValueError("not a gns-jax checkpoint record")
        if record.get("version") != VERSION:
            raise ValueError(f"checkpoint format version {record.get('version')}, need {VERSION}")
        return record

    def restore(self, step: int, template: Any, record: dict) -> Any:
        """The arrays of checkpoint ``step``, shaped like ``template``; checks the digest."""
        ocp = self._ocp
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, storable(template))
        out = self._manager.restore(
            step, args=ocp.args.Composite(arrays=ocp.args.StandardRestore(abstract))
        )
        arrays = unstorable(out["arrays"], template)
        if digest(arrays) != record.get("digest"):
            raise ValueError("its arrays do not match the digest written with them")
        return arrays

    def latest(self, template_of) -> tuple[int, Any, dict] | None:
        """The newest checkpoint that reads back intact: ``(step, arrays, record)``, or None.

        ``template_of(record)`` gives the pytree the arrays must have. An unreadable checkpoint
        is reported with a :class:`CheckpointWarning` and the previous one tried.
        """
        steps = self.steps()
        for i, step in enumerate(reversed(steps)):
            try:
                record = self.read_record(step)
                arrays = self.restore(step, template_of(record), record)
                return step, arrays, record
            except ConfigError:
                raise
            except Exception as e:  # noqa: BLE001 - any failure to read means corrupt
                older = steps[-i - 2] if i + 1 < len(steps) else None
                warnings.warn(
                    f"checkpoint {step} in {self.directory} is corrupt or truncated "
                    f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}); "
                    + (f"using checkpoint {older} instead" if older is not None else "none left"),
                    CheckpointWarning,
                    stacklevel=2,
                )
        return None


def check_compatible(record: dict, identity: dict, config: dict, resumable: tuple[str, ...], where):
    """Raises ConfigError when ``record`` is of another dataset or of options that change the
    numbers (any option outside ``resumable``)."""
    if record.get("identity") != identity:
        raise ConfigError(
            "checkpoint_dir",
            f"{where} holds a checkpoint of another dataset "
            f"({json.dumps(record.get('identity'))}), not of {json.dumps(identity)}",
        )
    from gns_jax.config import TrainConfig

    # an option added after the checkpoint was written had its default then
    saved = TrainConfig().to_json() | record.get("config", {})
    changed = [
        f"{k} ({saved.get(k)!r} there, {v!r} here)"
        for k, v in config.items()
        if k not in resumable and saved.get(k) != v
    ]
    if changed:
        raise ConfigError(
            "checkpoint_dir",
            f"{where} holds a checkpoint made with other options: {', '.join(changed)}; "
            "resume with the same options or choose another folder",
        )


def read_run(directory: str | Path) -> tuple[int, dict]:
    """The newest readable record of a run's checkpoint folder: ``(step, record)``."""
    folder = Path(directory)
    if not folder.is_dir():
        raise ConfigError("checkpoint", f"{directory} is not a folder")
    checkpoints = Checkpointer(folder)
    for step in reversed(checkpoints.steps()):
        try:
            return step, checkpoints.read_record(step)
        except Exception as e:  # noqa: BLE001
            warnings.warn(
                f"checkpoint {step} in {folder} is unreadable ({type(e).__name__}); trying older",
                CheckpointWarning,
                stacklevel=2,
            )
    raise ConfigError("checkpoint", f"{directory} holds no readable gns-jax checkpoint")


class RunCheckpoints:
    """The checkpoints of one :func:`gns_jax.fit` run: refuses a folder holding another run's
    unless resuming, resumes from the latest readable one, saves every ``checkpoint_every``
    batches and at every epoch's end.

    Args:
      config: the run's options (``checkpoint_dir``, ``checkpoint_every``, ``resume``).
      identity: :func:`dataset_identity` of the run's dataset.
      model_name: the model's class (``load_model`` needs a template of any but GraphSAGE).
      cache_slots: the GNS cache's size (its node ids are saved padded to it).
      num_batches: batches an epoch.
      resumable: options that may differ on resumption.
    """

    def __init__(self, config, identity: dict, model_name: str, cache_slots: int,
                 num_batches: int, resumable: tuple[str, ...]):  # fmt: skip
        self.config, self.identity, self.options = config, identity, config.to_json()
        self.model_name, self.slots, self.num_batches = model_name, cache_slots, num_batches
        self.resumable = resumable
        self.store = Checkpointer(config.checkpoint_dir)
        if self.store.steps() and not config.resume:
            raise ConfigError(
                "checkpoint_dir",
                f"{config.checkpoint_dir} holds checkpoints of an earlier run; resume it "
                "(--resume) or choose an empty folder",
            )

    def due(self, batches_done: int, last_of_epoch: bool) -> bool:
        """Whether to save after the ``batches_done``-th batch (the epoch's end saves anyway)."""
        every = self.config.checkpoint_every
        return bool(every) and batches_done % every == 0 and not last_of_epoch

    def until_due(self, batches_done: int) -> int:
        """Batches from the ``batches_done``-th to the next mid-epoch save (or a large number)."""
        every = self.config.checkpoint_every
        return every - batches_done % every if every else 2**62

    def resume(self, state, run, loader, log, params=None):
        """Restores the latest checkpoint into ``run`` and ``loader``; returns
        ``(state, epoch, batch index, step)`` or None (no checkpoint: a fresh start).
        ``state`` and ``params`` (the model's parameters; default ``state.params``) are the
        templates of what is read back."""
        params = state.params if params is None else params
        where = self.config.checkpoint_dir

        def template(record):
            # checkpoints written before data parallelism have no "devices": one device
            record.setdefault("config", {}).setdefault("devices", 1)
            check_compatible(record, self.identity, self.options, self.resumable, where)
            slots = int(record["cache_slots"])
            return {"state": state, "best": params, "cache_ids": np.zeros(slots, np.int32)}

        found = self.store.latest(template)
        if found is None:
            if self.store.steps():
                raise ConfigError("checkpoint_dir", f"no readable checkpoint in {where}")
            log(f"no checkpoint in {where}: starting afresh")
            return None
        step, arrays, record = found
        run.restore(record, arrays["best"])
        ids = np.asarray(arrays["cache_ids"])
        from gns_jax.loader import LoaderState

        loader.restore(LoaderState.from_json(record["loader"], ids[ids >= 0]))
        epoch, index = record["loader"]["epoch"], record["loader"]["index"]
        log(f"resumed from checkpoint {step} in {where}: epoch {epoch + 1}, batch {index + 1}")
        return arrays["state"], epoch, index, step

    def save(self, state, run, batch_state, epoch_done: bool, params=None) -> None:
        """Saves ``state`` (one device's copy; a pipeline's, one a stage), the best parameters
        and the run's record at the loader position ``batch_state``. ``params``: the model's
        parameters now (default ``state.params``), saved as the best before any evaluation."""
        padded = np.full(max(self.slots, 1), -1, np.int32)
        if batch_state.cache_ids is not None:
            padded[: batch_state.cache_ids.size] = batch_state.cache_ids
        position = batch_state.epoch * self.num_batches + batch_state.index
        if run.best_params is not None:
            best = run.best_params
        else:
            best = state.params if params is None else params
        self.store.save(
            position,
            {"state": state, "best": best, "cache_ids": padded},
            {
                "identity": self.identity,
                "config": self.options,
                "model": self.model_name,
                "loader": batch_state.to_json(),
                "cache_slots": max(self.slots, 1),
                **run.checkpoint(epoch_done),
            },
        )
