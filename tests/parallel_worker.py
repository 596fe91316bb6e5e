"""Data-parallel checks, run by ``tests/test_parallel.py`` in a fresh Python with several CPU
devices (``XLA_FLAGS=--xla_force_host_platform_device_count=4``; the test process has one).

    python tests/parallel_worker.py step|train|resume|syncs [ARGS]

prints one JSON object on its last line of stdout.
"""

from __future__ import annotations

import json
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from gns_jax.config import TrainConfig
from gns_jax.data import load_dataset
from gns_jax.factories import make_model, make_sampler, prepare_features
from gns_jax.loader import DeviceBatch, Loader
from gns_jax.parallel import AXIS, DataParallel, make_parallel_train_step
from gns_jax.sampling.blocks import Block
from gns_jax.train import fit, init_state, train_step


def union(batch: DeviceBatch) -> DeviceBatch:
    """The single-device batch of the shards of a global ``batch`` (leading axis: the shards):
    their disjoint union in the block format (destinations a prefix of the sources at every
    layer, the last slots dummies), the same seeds and the same sampled neighbours."""
    host = jax.tree.map(np.asarray, batch)
    shards = host.labels.shape[0]
    blocks = host.blocks
    layers = len(blocks)
    top = blocks[-1].dst_mask.shape[1]
    dst_map = [np.arange(top) + s * top for s in range(shards)]  # shard slot -> union slot
    out_blocks = [None] * layers
    src_maps = [None] * layers
    for layer in reversed(range(layers)):
        b = blocks[layer]
        num_dst, num_src = b.dst_mask.shape[1], b.src_nodes.shape[1]
        total_dst, extra = shards * num_dst, num_src - num_dst
        maps = [
            np.concatenate([dst_map[s], total_dst + s * extra + np.arange(extra)])
            for s in range(shards)
        ]
        src = np.full(shards * num_src, -1, np.int32)
        dst_mask = np.zeros(total_dst, bool)
        senders, receivers, weights = [], [], []
        for s in range(shards):
            src[maps[s]] = b.src_nodes[s]
            dst_mask[dst_map[s]] = b.dst_mask[s]
            senders.append(maps[s][b.senders[s]])
            receivers.append(dst_map[s][b.receivers[s]])
            weights.append(b.edge_weight[s])
        out_blocks[layer] = Block(
            src,
            np.concatenate(senders).astype(np.int32),
            np.concatenate(receivers).astype(np.int32),
            np.concatenate(weights),
            dst_mask,
        )
        src_maps[layer] = maps
        dst_map = maps  # the sources of this layer are the destinations of the one below
    x = np.zeros((shards * host.x.shape[1], host.x.shape[2]), host.x.dtype)
    labels = np.zeros(shards * top, host.labels.dtype)
    mask = np.zeros(shards * top, bool)
    for s in range(shards):
        x[src_maps[0][s]] = host.x[s]
        labels[s * top : (s + 1) * top] = host.labels[s]
        mask[s * top : (s + 1) * top] = host.seed_mask[s]
    with jax.transfer_guard_host_to_device("allow"):
        return jax.device_put(DeviceBatch(x, tuple(out_blocks), labels, mask))


def _defective_step(graphdef, tx, parallel, defect: str):
    """A data-parallel step with a defect put in: ``mean_of_means`` (the mean over shards of
    each shard's mean loss: wrong when the shards hold different numbers of seeds) or
    ``psum_twice`` (an explicit psum of gradients that shard_map already summed)."""
    from jax.sharding import PartitionSpec as P

    from gns_jax.tasks import masked_mean, softmax_loss
    from gns_jax.train import TrainState

    def body(state, batch, key_data):
        batch = jax.tree.map(lambda leaf: leaf[0], batch)
        key = jax.random.fold_in(jax.random.wrap_key_data(key_data), state.step)

        def loss_fn(params):
            model = nnx.merge(graphdef, params, state.rest)
            logits = model(batch.x, batch.blocks, key=key)
            if defect == "mean_of_means":
                per_seed = softmax_loss(logits, batch.labels)
                return masked_mean(per_seed, batch.seed_mask) / parallel.shards
            per_seed = optax.softmax_cross_entropy_with_integer_labels(logits, batch.labels)
            return jnp.sum(per_seed * batch.seed_mask)

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        if defect == "psum_twice":
            count = jax.lax.psum(jnp.sum(batch.seed_mask).astype(jnp.float32), AXIS)
            grads = jax.tree.map(lambda g: jax.lax.psum(g, AXIS) / count, grads)
            loss = jax.lax.psum(loss, AXIS) / count
        else:
            loss = jax.lax.psum(loss, AXIS)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        return TrainState(params, opt_state, state.step + 1, state.rest), {"loss": loss}

    fn = jax.shard_map(body, mesh=parallel.mesh, in_specs=(P(), P(AXIS), P()), out_specs=(P(), P()))
    return jax.jit(fn)


def check_step(sampler: str) -> dict:
    """One data-parallel step against the single-device step on the union of its shards."""
    dataset = load_dataset("cora")
    config = TrainConfig(
        sampler=sampler, devices=4, batch_size=140, fanouts=(10, 5), dropout=0.0, hidden=32
    )
    parallel = DataParallel.over(4)
    # 130 seeds: shards of 35, 35, 35 and 25, so that a per-shard mean would be wrong
    loader = Loader(
        dataset,
        make_sampler(dataset, config),
        seed=0,
        nodes=dataset.train_idx[:130],
        features=prepare_features(dataset, config),
        parallel=parallel,
        prefetch=0,
    )
    batches = loader.batches(0, 1)
    batch = next(batches)
    batches.close()
    # Plain SGD with step 1: the update is the gradient (Adam's first step is its sign, which
    # float noise flips where a gradient entry is ~0).
    tx = optax.sgd(1.0)
    with jax.transfer_guard_host_to_device("allow"):
        model = make_model(dataset, config, jax.random.key(1))
        key = jax.random.key(2)
    graphdef, state = init_state(model, tx)
    key_data = parallel.replicate(jax.random.key_data(key))
    results = {}
    for name, make in (
        ("parallel", lambda: make_parallel_train_step(graphdef, tx, parallel)),
        ("mean_of_means", lambda: _defective_step(graphdef, tx, parallel, "mean_of_means")),
        ("psum_twice", lambda: _defective_step(graphdef, tx, parallel, "psum_twice")),
    ):
        new, metrics = make()(parallel.replicate(state), batch.inputs, key_data)
        results[name] = (parallel.local(new.params), float(parallel.local(metrics["loss"])))
    single = union(batch.inputs)
    ref_state, ref_metrics = jax.jit(lambda s, b, k: train_step(s, b, k, graphdef=graphdef, tx=tx))(
        state, single, key
    )
    ref = jax.tree.leaves(ref_state.params)
    out = {"shard_seeds": [int(v) for v in np.asarray(batch.inputs.seed_mask).sum(1)]}
    out["ref_loss"] = float(ref_metrics["loss"])
    scale = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(ref, jax.tree.leaves(state.params)))
    out["update_size"] = scale
    for name, (params, loss) in results.items():
        diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(ref, jax.tree.leaves(params)))
        out[name] = {"loss": loss, "max_param_diff": diff}
    return out


def check_train(sampler: str, devices: list[int], epochs: int) -> dict:
    """Training on Cora with each device count: accuracies, compilations after every epoch."""
    dataset = load_dataset("cora")
    out = {}
    for n in devices:
        config = TrainConfig(
            sampler=sampler,
            devices=n,
            epochs=epochs,
            eval_every=epochs,
            batch_size=140,
            fanouts=(25, 10),
            lr=0.01,
            budget="worst",
        )
        compiles: list[list[int]] = []

        def record(r, compiles=compiles):
            compiles.append([r["compilations"], r["sampler_compilations"]])

        result = fit(dataset, config, quiet=True, on_epoch=record)
        m = result.metrics
        out[str(n)] = {
            "test_accuracy": m["test_accuracy"],
            "compiles": compiles,
            "rows": m["h2d_rows_per_batch"],
            "rows_per_device": m["h2d_rows_per_batch_per_device"],
        }
    return out


def check_resume() -> dict:
    """Two devices: 2 epochs straight, and 1 epoch checkpointed then resumed to 2."""
    dataset = load_dataset("cora")
    base = dict(sampler="gns", devices=2, batch_size=70, fanouts=(10, 5), eval_every=1)
    straight = fit(dataset, TrainConfig(epochs=2, **base), quiet=True).metrics
    with tempfile.TemporaryDirectory() as folder:
        fit(dataset, TrainConfig(epochs=1, checkpoint_dir=folder, **base), quiet=True)
        resumed = fit(
            dataset, TrainConfig(epochs=2, checkpoint_dir=folder, resume=True, **base), quiet=True
        ).metrics
    losses = lambda m: [e["train_loss"] for e in m["epochs"]]
    return {
        "straight": losses(straight),
        "resumed": losses(resumed),
        "resumed_from": resumed["resumed_from_step"],
        "test": [straight["test_accuracy"], resumed["test_accuracy"]],
    }


def check_syncs() -> dict:
    """Two devices: the main thread's host synchronisations of one more epoch (1 and 3 epochs
    of 12 global batches of the tiny synthetic graph), and the same with a wait in every step."""
    from helpers import HostSyncs

    from gns_jax.data import synthetic
    from gns_jax.step import Stepper

    dataset = synthetic(np.random.default_rng(0), nodes=600, degree=8, features=16, classes=4)
    config = TrainConfig(sampler="ns", devices=2, batch_size=4, fanouts=(4, 3), hidden=32)

    def per_epoch() -> float:
        counts = []
        for epochs in (1, 3):
            with HostSyncs().watching() as syncs:
                fit(dataset, config.replace(epochs=epochs), quiet=True, evaluate_model=False)
            counts.append(syncs.count)
        return (counts[1] - counts[0]) / 2

    ahead = per_epoch()
    dispatch = Stepper.dispatch

    def waiting(self, state, batches, log):  # the defect: a wait in every step
        state, batch, loss = dispatch(self, state, batches, log)
        jax.block_until_ready(state)
        return state, batch, loss

    Stepper.dispatch = waiting
    return {"per_epoch": ahead, "waiting_per_epoch": per_epoch(), "steps": 12}


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "step":
        result = check_step(sys.argv[2])
    elif what == "train":
        counts = [int(v) for v in sys.argv[3].split(",")]
        result = check_train(sys.argv[2], counts, int(sys.argv[4]))
    elif what == "resume":
        result = check_resume()
    elif what == "syncs":
        result = check_syncs()
    else:
        raise SystemExit(f"unknown check {what}")
    print(json.dumps(result))
