"""Target edges out of a link batch's message passing (gns_jax/sampling/exclude.py), for every
sampler: no drawn target edge survives, in either direction, and the other coefficients keep
their sums, so a destination averages over its neighbours that are not targets."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gns_jax.config import TrainConfig
from gns_jax.factories import make_sampler
from gns_jax.loader import Loader
from gns_jax.sampling.exclude import exclude_targets, target_hits


def _batch(dataset, sampler_name: str, seeds: np.ndarray):
    config = TrainConfig(
        sampler=sampler_name, batch_size=len(seeds), fanouts=(30, 30), cache_fraction=0.5,
        ladies_nodes=600,
    )  # fmt: skip
    loader = Loader(
        dataset, make_sampler(dataset, config), seed=0, prefetch=0, nodes=seeds,
        shuffle=False, budget="worst",
    )  # fmt: skip
    batches = loader.batches(0, 1)
    batch = next(batches)
    batches.close()
    return batch


def _targets(dataset, seeds: np.ndarray, count: int) -> np.ndarray:
    """Seed-slot pairs (i, j) whose nodes are joined in the graph."""
    slot = {int(v): i for i, v in enumerate(seeds)}
    pairs = []
    for i, u in enumerate(seeds):
        for v in dataset.graph.neighbors(int(u)):
            if int(v) in slot and (slot[int(v)], i) not in pairs:
                pairs.append((i, slot[int(v)]))
    assert len(pairs) >= count
    return np.asarray(pairs[:count], np.int32)


@pytest.fixture(scope="module")
def seeds(tiny_dataset):
    """Nodes and some of their neighbours, so that many seed pairs are edges."""
    rng = np.random.default_rng(0)
    hubs = rng.choice(tiny_dataset.num_nodes, 12, replace=False)
    nbrs = np.concatenate([tiny_dataset.graph.neighbors(int(h))[:3] for h in hubs])
    return np.unique(np.concatenate([hubs, nbrs])).astype(np.int32)


@pytest.mark.parametrize("sampler", ["ns", "gns", "ladies"])
def test_no_target_edge_survives_and_the_rest_keep_their_sums(tiny_dataset, seeds, sampler):
    batch = _batch(tiny_dataset, sampler, seeds)
    num_seeds = batch.inputs.blocks[-1].dst_mask.shape[0]
    targets = _targets(tiny_dataset, seeds, 6)
    padded = np.full((10, 2), -1, np.int32)
    padded[: len(targets)] = targets
    blocks = batch.inputs.blocks
    drawn = sum(int(target_hits(b, jnp.asarray(padded), num_seeds).sum()) for b in blocks)
    assert drawn > 0  # the sampler drew target edges: the test has something to remove
    out = exclude_targets(blocks, jnp.asarray(padded), num_seeds)
    for before, after in zip(blocks, out, strict=True):
        r, s = np.asarray(after.receivers), np.asarray(after.senders)
        w = np.asarray(after.edge_weight)
        src = np.asarray(after.src_nodes)
        pairs = {(int(seeds[a]), int(seeds[b])) for a, b in targets}
        pairs |= {(b, a) for a, b in pairs}
        live = w != 0
        dst_nodes = src[r[live]]  # destinations are the source prefix
        edges = set(zip(dst_nodes.tolist(), src[s[live]].tolist(), strict=True))
        assert not edges & pairs  # by node ids, independently of the slot lookup
        num_dst = before.dst_mask.shape[0]
        sum_before = np.bincount(np.asarray(before.receivers), np.asarray(before.edge_weight),
                                 num_dst)  # fmt: skip
        sum_after = np.bincount(r, w, num_dst)
        has_other = np.bincount(r, live, num_dst) > 0
        np.testing.assert_allclose(sum_after[has_other], sum_before[has_other], rtol=1e-5)
        assert not sum_after[~has_other].any()


def test_a_mean_over_the_kept_neighbours_is_the_mean_without_the_targets(tiny_dataset, seeds):
    """Node-wise sampling with a fan-out above every degree draws every neighbour: after the
    exclusion each seed's aggregation is the exact mean over its neighbours in the graph
    without the target edges."""
    batch = _batch(tiny_dataset, "ns", seeds)
    top = batch.inputs.blocks[-1]
    num_seeds = top.dst_mask.shape[0]
    targets = _targets(tiny_dataset, seeds, 6)
    (after,) = exclude_targets((top,), jnp.asarray(targets), num_seeds)
    values = np.random.default_rng(1).normal(size=tiny_dataset.num_nodes)
    src = np.asarray(after.src_nodes)
    msg = np.bincount(np.asarray(after.receivers),
                      np.asarray(after.edge_weight) * values[np.maximum(src, 0)][after.senders],
                      num_seeds)  # fmt: skip
    removed = {(int(seeds[a]), int(seeds[b])) for a, b in targets}
    removed |= {(b, a) for a, b in removed}
    checked = 0
    for i, u in enumerate(seeds):
        if tiny_dataset.graph.degrees()[u] > 30:  # sampled, not every neighbour drawn
            continue
        checked += 1
        nbrs = [
            int(v) for v in tiny_dataset.graph.neighbors(int(u)) if (int(u), int(v)) not in removed
        ]
        want = np.mean(values[nbrs]) if nbrs else 0.0
        assert msg[i] == pytest.approx(want, rel=1e-4, abs=1e-6), i
    assert checked > len(seeds) // 2


def test_one_direction_only_would_leave_the_reverse_edges(tiny_dataset, seeds):
    """The defect the lookup guards against: keys of one direction only miss the reverse
    edges (both directions are stored in an undirected graph and both get drawn)."""
    batch = _batch(tiny_dataset, "ns", seeds)
    top = batch.inputs.blocks[-1]
    num_seeds = top.dst_mask.shape[0]
    targets = jnp.asarray(_targets(tiny_dataset, seeds, 6))
    both = target_hits(top, targets, num_seeds)
    # a one-way check: receiver a, sender b only
    a, b = targets[:, 0], targets[:, 1]
    oneway = jnp.isin(top.receivers * num_seeds + top.senders, a * num_seeds + b)
    assert int(both.sum()) > int((oneway & (top.edge_weight != 0)).sum()) > 0


def test_exclusion_is_jittable_and_leaves_other_batches_alone(tiny_dataset, seeds):
    batch = _batch(tiny_dataset, "gns", seeds)
    num_seeds = batch.inputs.blocks[-1].dst_mask.shape[0]
    none = jnp.full((4, 2), -1, jnp.int32)
    out = jax.jit(exclude_targets, static_argnums=2)(batch.inputs.blocks, none, num_seeds)
    for a, b in zip(batch.inputs.blocks, out, strict=True):
        np.testing.assert_array_equal(np.asarray(a.edge_weight), np.asarray(b.edge_weight))
