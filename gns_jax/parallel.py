"""Data parallelism over devices and processes, on JAX's own mesh and ``shard_map``.

A data-parallel run keeps one replica of the model, the optimiser state and the GNS cache on
every device of a one-axis mesh (axis ``"data"``). A global mini-batch of ``batch_size`` seeds is
split into one shard per device; each device's shard is sampled on that device with its own key
(:class:`~gns_jax.loader.Loader` with ``parallel=``) and the train step
(:func:`make_parallel_train_step`) runs under :func:`jax.shard_map`: every device computes the
summed loss and gradient of its shard, a ``psum`` adds them over the mesh, and the sum is
divided by the number of real seeds in the whole batch. That is the gradient of the mean loss
over the concatenated batch, so the update is the single-device update on the union of the
shards (``tests/test_parallel.py`` checks it to float tolerance), and every replica applies it.

Several processes (one per host, ``jax.distributed.initialize``) form one mesh over all their
devices; each process samples only its own devices' shards, reading the same memory-mapped
dataset, and the processes agree on budget growth through one small all-gather
(:meth:`DataParallel.any`). Everything that is random is derived from the run's seed, so every
process computes the same epoch order, cache and keys without exchanging them.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from gns_jax.errors import ConfigError
from gns_jax.meters import CompileCounter

__all__ = ["AXIS", "DataParallel", "make_parallel_train_step", "resolve_devices"]

AXIS = "data"


def resolve_devices(devices: int | str) -> int:
    """``devices`` as a count: ``"all"`` is every device of every process (``jax.devices()``).

    Raises ConfigError (naming ``devices``) for anything but a positive integer up to that count.
    """
    available = jax.devices()
    if str(devices) == "all":
        return len(available)
    try:
        n = int(devices)
    except (TypeError, ValueError):
        raise ConfigError("devices", f"a positive integer or 'all', got {devices!r}") from None
    if n < 1:
        raise ConfigError("devices", f"must be a positive integer, got {n}")
    if n > len(available):
        hint = ""
        if available[0].platform == "cpu":
            hint = (
                "; on a CPU, set XLA_FLAGS=--xla_force_host_platform_device_count=N before "
                "starting Python for N devices"
            )
        raise ConfigError(
            "devices",
            f"{n} requested, but {len(available)} {available[0].platform} device(s) are "
            f"available{hint}",
        )
    if jax.process_count() > 1 and n != len(available):
        raise ConfigError(
            "devices",
            f"with {jax.process_count()} processes every device takes part: use all "
            f"({len(available)}), got {n}",
        )
    return n


@dataclasses.dataclass(frozen=True)
class DataParallel:
    """A one-axis mesh and what a data-parallel run needs of it.

    Attributes:
      mesh: the mesh, axis :data:`AXIS`; shard ``d`` of every batch lives on ``mesh.devices[d]``.
    """

    mesh: Mesh

    @classmethod
    def over(cls, devices: int | str | Sequence[jax.Device]) -> DataParallel:
        """The mesh over the first ``devices`` devices (or ``"all"``, or a list of devices)."""
        if isinstance(devices, (int, str)):
            devices = jax.devices()[: resolve_devices(devices)]
        return cls(Mesh(np.array(list(devices)), (AXIS,)))

    @property
    def shards(self) -> int:
        """Shards of a batch: one per device of the mesh."""
        return int(self.mesh.devices.size)

    @property
    def lanes(self) -> tuple[tuple[int, jax.Device], ...]:
        """``(shard, device)`` for this process's devices, in shard order."""
        here = jax.process_index()
        return tuple(
            (d, dev) for d, dev in enumerate(self.mesh.devices.flat) if dev.process_index == here
        )

    @property
    def multi_process(self) -> bool:
        return jax.process_count() > 1

    def replicate(self, tree):
        """``tree`` (host or device arrays, the same in every process) on every device."""
        sharding = NamedSharding(self.mesh, P())

        def put(leaf):
            host = np.asarray(leaf)
            return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

        with jax.transfer_guard_host_to_device("allow"):
            return jax.tree.map(put, tree)

    def local(self, tree):
        """A single-device copy of a replicated ``tree``: its replica on this process's first
        device of the mesh (for evaluation, checkpoints and the returned model)."""
        return jax.tree.map(lambda leaf: jnp.copy(leaf.addressable_data(0)), tree)

    def stack(self, parts: Sequence):
        """The global batch of this process's shards ``parts`` (one pytree a lane, each on its
        lane's device): every leaf gains a leading axis of ``shards`` entries, sharded over the
        mesh, one entry a device."""
        sharding = NamedSharding(self.mesh, P(AXIS))

        def one(*leaves):
            shape = (self.shards, *leaves[0].shape)
            return jax.make_array_from_single_device_arrays(
                shape, sharding, [leaf[None] for leaf in leaves]
            )

        return jax.tree.map(one, *parts)

    def any(self, flags: np.ndarray) -> np.ndarray:
        """Element-wise OR of ``flags`` over the processes (identity with one process)."""
        flags = np.asarray(flags)
        if not self.multi_process:
            return flags
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(flags)).max(axis=0)

    def sum(self, values: np.ndarray) -> np.ndarray:
        """Element-wise sum of ``values`` over the processes (identity with one process)."""
        values = np.asarray(values)
        if not self.multi_process:
            return values
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(values)).sum(axis=0)


def parallel_train_step(state, batch, key_data, *, graphdef, tx, loss=None, task=None):
    """The per-device body of the data-parallel step (under ``shard_map``).

    ``batch`` is this device's shard (a leading axis of one); ``key_data`` the run's dropout key
    as raw data. The dropout key of shard ``d`` at step ``t`` is ``fold_in(fold_in(key, t), d)``.
    ``loss`` and ``task`` as :func:`gns_jax.step.train_step`. Returns the new (replicated) state
    and ``{"loss", "correct", "count"}`` over the whole batch.
    """
    from gns_jax.tasks import Task, softmax_loss

    loss, task = loss or softmax_loss, task or Task("multiclass")
    batch = jax.tree.map(lambda leaf: leaf[0], batch)
    key = jax.random.fold_in(jax.random.wrap_key_data(key_data), state.step)
    key = jax.random.fold_in(key, jax.lax.axis_index(AXIS))

    def loss_fn(params):
        model = nnx.merge(graphdef, params, state.rest, copy=True)
        logits = model(batch.x, batch.blocks, key=key)
        if batch.pairs is not None:  # link prediction: one logit a pair
            logits = model.score(logits, batch.pairs)
        rest = nnx.state(model, nnx.Not(nnx.Param))
        per_seed = loss(logits, batch.labels)
        return jnp.sum(per_seed * batch.seed_mask.astype(per_seed.dtype)), (logits, rest)

    # The parameters enter replicated (invariant over the mesh axis) and the summed loss
    # varies over it, so under shard_map's varying-axes checking the gradient with respect to
    # the parameters already is the sum over devices (the transpose of the implicit broadcast
    # is a psum): it needs no psum of its own, only the division by the batch's seed count.
    (total, (logits, rest)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    # The other variables stay replicated: batch statistics are averaged over the devices'
    # shards; counters and keys advance the same way on every device.
    rest = jax.tree.map(_replicated, rest)
    count = jax.lax.psum(jnp.sum(batch.seed_mask).astype(jnp.float32), AXIS)
    scale = 1.0 / jnp.maximum(count, 1.0)
    grads = jax.tree.map(lambda g: g * scale, grads)
    mean_loss = jax.lax.psum(total, AXIS) * scale
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    correct = jnp.sum(task.correct(logits, batch.labels) & batch.seed_mask)
    metrics = {
        "loss": mean_loss,
        "correct": jax.lax.psum(correct, AXIS),
        "count": count.astype(jnp.int32),
    }
    new = state._replace(params=params, opt_state=opt_state, step=state.step + 1, rest=rest)
    return new, metrics


def _replicated(leaf: jax.Array) -> jax.Array:
    if jnp.issubdtype(leaf.dtype, jnp.floating):
        return jax.lax.pmean(leaf, AXIS)
    return leaf


def make_parallel_train_step(
    graphdef,
    tx,
    parallel: DataParallel,
    counter: CompileCounter | None = None,
    *,
    loss=None,
    task=None,
):
    """The jitted data-parallel step: ``(state, global batch, key_data) -> (state, metrics)``,
    with the replicated state donated; traces counted by ``counter``."""
    body = functools.partial(parallel_train_step, graphdef=graphdef, tx=tx, loss=loss, task=task)
    fn = jax.shard_map(body, mesh=parallel.mesh, in_specs=(P(), P(AXIS), P()), out_specs=(P(), P()))
    if counter is not None:
        fn = counter.wrap(fn)
    return jax.jit(fn, donate_argnums=0)
