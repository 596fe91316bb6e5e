"""Edge batches for link prediction (gns_jax/linkbatch.py) through the Loader's one path: the
pairs point at their endpoints' seed slots, negatives follow their rule and stream, the
positives are out of the message passing, the shapes are static."""

import numpy as np
import pytest

from gns_jax.config import TrainConfig
from gns_jax.errors import ConfigError
from gns_jax.factories import make_sampler
from gns_jax.linkbatch import EdgeSeeds, max_pairs, max_seeds
from gns_jax.loader import Loader
from gns_jax.sampling.exclude import target_hits

B, K = 8, 2


def _edges(dataset, count: int) -> np.ndarray:
    senders, receivers = dataset.graph.edges()
    once = senders < receivers
    pairs = np.stack([senders[once], receivers[once]], 1)
    return pairs[np.random.default_rng(0).permutation(pairs.shape[0])[:count]]


def _loader(dataset, sampler="ns", negatives="uniform", seed=0, edges=None, budget="auto"):
    config = TrainConfig(sampler=sampler, batch_size=max_seeds(B, K), fanouts=(6, 4))
    seeds = EdgeSeeds(
        _edges(dataset, 40) if edges is None else edges, dataset.num_nodes, K, negatives,
        degrees=dataset.graph.degrees(),
    )  # fmt: skip
    sampler = make_sampler(dataset, config)
    return Loader(dataset, sampler, seed=seed, prefetch=0, edges=seeds, budget=budget)


@pytest.mark.parametrize("sampler", ["ns", "gns"])
def test_a_link_batch_scores_its_edges_and_never_sees_them(tiny_dataset, sampler):
    loader = _loader(tiny_dataset, sampler)
    assert loader.num_batches == 5 and loader.batch_size == B
    edges = set(map(tuple, loader.edges.edges.tolist()))
    seen = set()
    for batch in loader.batches(0, 1):
        inputs = batch.inputs
        pairs, labels, mask = (
            np.asarray(a) for a in (inputs.pairs, inputs.labels, inputs.seed_mask)
        )
        assert pairs.shape == (max_pairs(B, K), 2) and mask.sum() == B * (1 + K)
        nodes = batch.seeds[pairs[mask]]  # seed slot -> node
        positives = nodes[labels[mask] == 1]
        assert len(positives) == B
        seen |= set(map(tuple, positives.tolist()))
        heads = nodes[labels[mask] == 0][:, 0]
        np.testing.assert_array_equal(heads, np.repeat(positives[:, 0], K))
        top = inputs.blocks[-1]
        np.testing.assert_array_equal(np.asarray(top.src_nodes)[: len(batch.seeds)], batch.seeds)
        targets = np.full((B, 2), -1, np.int32)
        targets[:] = pairs[:B]
        num_seeds = top.dst_mask.shape[0]
        for block in inputs.blocks:
            assert not np.asarray(target_hits(block, targets, num_seeds)).any()
    assert seen == edges  # every training edge once an epoch


def test_negatives_follow_their_stream_and_rule(tiny_dataset):
    first = next(iter(_loader(tiny_dataset).batches(0, 1)))
    again = next(iter(_loader(tiny_dataset).batches(0, 1)))
    other = next(iter(_loader(tiny_dataset, seed=1).batches(0, 1)))
    np.testing.assert_array_equal(first.seeds, again.seeds)
    assert not np.array_equal(first.seeds, other.seeds)
    inb = _loader(tiny_dataset, negatives="in-batch")
    batch = next(iter(inb.batches(0, 1)))
    pairs, labels = np.asarray(batch.inputs.pairs), np.asarray(batch.inputs.labels)
    nodes = batch.seeds[pairs[: B * (1 + K)]]
    tails = nodes[B:, 1]
    assert set(tails.tolist()) <= set(nodes[:B, 1].tolist())  # heads of the batch's positives
    assert len(batch.seeds) <= 2 * B  # in-batch negatives add no node
    assert labels[:B].all() and not labels[B:].any()


def test_degree_negatives_prefer_high_degrees(tiny_dataset):
    seeds = EdgeSeeds(_edges(tiny_dataset, 40), tiny_dataset.num_nodes, 50, "degree",
                      degrees=tiny_dataset.graph.degrees())  # fmt: skip
    tails = seeds.tails(seeds.edges[:40], np.random.default_rng(0)).ravel()
    degrees = tiny_dataset.graph.degrees()
    uniform = degrees.mean()
    weighted = (degrees**2).sum() / degrees.sum()  # E[deg] when drawn by degree
    se = degrees.std() / np.sqrt(tails.size) * 4
    assert degrees[tails].mean() > uniform + se
    assert abs(degrees[tails].mean() - weighted) < weighted * 0.2


def test_bad_link_options_are_named(tiny_dataset):
    edges = _edges(tiny_dataset, 10)
    with pytest.raises(ConfigError, match="neg_ratio"):
        EdgeSeeds(edges, tiny_dataset.num_nodes, 0)
    with pytest.raises(ConfigError, match="negatives"):
        EdgeSeeds(edges, tiny_dataset.num_nodes, 1, "hard")
    with pytest.raises(ConfigError, match="edges"):
        EdgeSeeds(edges + tiny_dataset.num_nodes, tiny_dataset.num_nodes)
    config = TrainConfig(sampler="ns", batch_size=10, fanouts=(4,))
    with pytest.raises(ConfigError, match="batch_size"):
        Loader(tiny_dataset, make_sampler(tiny_dataset, config), prefetch=0,
               edges=EdgeSeeds(edges, tiny_dataset.num_nodes, 2))  # fmt: skip


def test_one_compilation_for_every_link_batch(tiny_dataset):
    """Static shapes: under the worst-case budget every link batch of two epochs (other
    endpoint counts, other negatives) is sampled by one compiled sampler."""
    loader = _loader(tiny_dataset, "gns", budget="worst")
    sizes = {len(batch.seeds) for batch in loader.batches(0, 2)}
    assert len(sizes) > 1 and loader.sampler.compilations == 1


def test_a_model_cannot_score_a_target_edge_from_its_own_presence(monkeypatch, tiny_dataset):
    """Random features on a random graph: nothing tells an edge from a non-edge but the edge
    itself. An encoder ``h = x + mean of the neighbours' x`` with an inner-product decoder scores
    a pair whose edge it can see by ``|x_u|^2 / deg``: with the target edges excluded the batch's
    positives score like its negatives (ROC-AUC near 0.5); with the exclusion taken out (the
    defect) they stand out."""
    import dataclasses

    import jax.numpy as jnp
    from flax import nnx

    from gns_jax import loader as loader_module
    from gns_jax.graph import from_edges
    from gns_jax.metrics import roc_auc
    from gns_jax.models import GraphSAGE, LinkPredictor

    rng = np.random.default_rng(3)
    n = 3000
    pairs = rng.integers(0, n, size=(6000, 2))
    pairs = np.unique(np.sort(pairs[pairs[:, 0] != pairs[:, 1]], axis=1), axis=0)
    both = np.concatenate([pairs, pairs[:, ::-1]])
    x = rng.normal(size=(n, 256)).astype(np.float32)
    base = tiny_dataset
    dataset = dataclasses.replace(
        base, graph=from_edges(both[:, 0], both[:, 1], n), features=x,
        labels=np.zeros(n, np.int32), train_idx=np.arange(10, dtype=np.int32),
        val_idx=np.arange(10, 20, dtype=np.int32), test_idx=np.arange(20, 30, dtype=np.int32),
    )  # fmt: skip
    encoder = GraphSAGE((256, 256), dropout_rate=0.0, rngs=nnx.Rngs(0))
    conv = encoder.convs[0]
    conv.self_proj.kernel[...] = jnp.eye(256)
    conv.self_proj.bias[...] = jnp.zeros(256)
    conv.nbr_proj.kernel[...] = jnp.eye(256)
    model = LinkPredictor(encoder)

    def auc() -> float:
        config = TrainConfig(sampler="ns", batch_size=max_seeds(64, 1), fanouts=(50,))
        seeds = EdgeSeeds(pairs[:640], n, 1)
        sampler = make_sampler(dataset, config, max_seeds(64, 1))
        loader = Loader(dataset, sampler, seed=0, prefetch=0, edges=seeds)
        scores, labels = [], []
        for batch in loader.batches(0, 1):
            inputs = batch.inputs
            h = model(inputs.x, inputs.blocks)
            mask = np.asarray(inputs.seed_mask)
            scores.append(np.asarray(model.score(h, inputs.pairs))[mask])
            labels.append(np.asarray(inputs.labels)[mask])
        s, y = np.concatenate(scores), np.concatenate(labels).astype(np.int32)
        return roc_auc(np.stack([-s, s], 1), y)

    excluded = auc()
    monkeypatch.setattr(loader_module, "_exclude", lambda blocks, targets, seeds: blocks)
    leaked = auc()
    # 640 positives and 640 negatives: ROC-AUC's standard error at 0.5 is about 0.016
    assert abs(excluded - 0.5) < 0.06, excluded
    assert leaked > 0.9, leaked
