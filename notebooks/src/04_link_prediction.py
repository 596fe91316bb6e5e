# %% [markdown]
# # 4. Link prediction with GNS
#
# Link prediction asks whether two nodes should be joined: a recommender's user and item, two
# papers that should cite each other. A GNN embeds both endpoints from their neighbourhoods and a
# decoder scores the pair. Trained in mini-batches, a batch is a set of edges (positives) and as
# many non-edges (negatives), and its seed nodes are all their endpoints: GNS's cache serves
# their input layer as it does for node classification.
#
# This notebook splits Cora's citation edges, looks at one edge batch, shows why a batch's own
# edges must leave its message passing, and trains a link predictor (about a minute on 2 cores).

# %%
import dataclasses

import jax
import matplotlib.pyplot as plt
import numpy as np

from gns_jax import (
    EdgeSeeds,
    Loader,
    TrainConfig,
    fit,
    load_dataset,
    predict_links,
    random_edge_split,
)
from gns_jax.factories import make_sampler
from gns_jax.linkbatch import max_seeds
from gns_jax.sampling.exclude import target_hits

data = load_dataset("cora")
split = random_edge_split(data.graph, (0.85, 0.05, 0.10), seed=0, rank_negatives=100)
print(
    f"{data.graph.num_edges // 2:,} edges: {len(split.train_pos):,} training, "
    f"{len(split.val_pos):,} validation, {len(split.test_pos):,} test; "
    f"{split.rank_negatives} fixed negatives per held-out edge for the rankings"
)

# %% [markdown]
# ## The split
#
# Validation and test edges leave the graph the model trains on, in both directions: the
# sampler must never walk along an edge the model will be asked about. Each held-out edge also
# gets a fixed set of negatives `(u, v')`, seeded and the same for every model, against which
# MRR and Hits@K rank it.

# %%
train_graph = split.train_graph(data.graph)
held_out = {tuple(p) for p in np.concatenate([split.val_pos, split.test_pos]).tolist()}
s, r = train_graph.edges()
left = sum((int(a), int(b)) in held_out or (int(b), int(a)) in held_out for a, b in zip(s, r))
print(f"training graph: {train_graph.num_edges // 2:,} edges; held-out edges in it: {left}")

# %% [markdown]
# ## One edge batch
#
# A batch of `B` positives and `K` negatives each (here one uniform `v'` per positive) has at
# most `B * (2 + K)` distinct endpoints; they are the sampler's seeds, so every sampler (NS,
# LADIES, GNS) works unchanged, and the pairs are pairs of seed slots.

# %%
train_data = dataclasses.replace(data, graph=train_graph)
B, K = 256, 1
config = TrainConfig(sampler="ns", fanouts=(15, 10, 5))
sampler = make_sampler(train_data, config, max_seeds(B, K))
edges = EdgeSeeds(split.train_pos, data.num_nodes, neg_ratio=K)
loader = Loader(train_data, sampler, seed=0, prefetch=0, edges=edges)
batches = loader.batches(0, 1)
batch = next(batches)
pairs = np.asarray(batch.inputs.pairs)[np.asarray(batch.inputs.seed_mask)]
labels = np.asarray(batch.inputs.labels)[np.asarray(batch.inputs.seed_mask)]
print(
    f"{len(pairs)} pairs ({int(labels.sum())} positives), {len(batch.seeds)} distinct endpoints "
    f"(at most {max_seeds(B, K)}), {batch.num_inputs:,} input nodes"
)

# %% [markdown]
# ## Why a batch's own edges leave its message passing
#
# A positive `(u, v)` is an edge of the training graph, so the sampler can draw `v` as a
# neighbour of `u`. A model that sees the edge it is asked about learns to detect the edge
# rather than to predict it, and fails on edges it has never seen. The loader removes the
# batch's target edges, both ways, after sampling (`exclude_targets`): seeds hold the first slots
# of every layer, so a drawn target edge is an edge between two seed slots of a target pair.
# Below, the same seeds sampled again without the removal, against the batch the loader gave.

# %%
seeds = sampler.pad_seeds(batch.seeds)
raw = sampler.sample(jax.random.key(0), jax.device_put(seeds))
targets = pairs[labels == 1]
num_seeds = raw.blocks[-1].dst_mask.shape[0]
drawn = [int(target_hits(b, targets, num_seeds).sum()) for b in raw.blocks]
kept = [int(target_hits(b, targets, num_seeds).sum()) for b in batch.inputs.blocks]
print(f"target edges drawn per layer (input first): {drawn}; after the removal: {kept}")
batches.close()

# %% [markdown]
# ## Training
#
# `fit` with `task="link"` does all of the above every batch, with a GraphSAGE encoder and an
# inner-product decoder, binary cross-entropy over positives and negatives, and evaluates the
# validation edges after every epoch (exact inference on the training graph). GNS here keeps a
# 20 % cache.

# %%
result = fit(
    data,
    TrainConfig(task="link", sampler="gns", cache_fraction=0.2, epochs=20, eval_every=1),
    quiet=True,
)
m = result.metrics
print(
    f"test ROC-AUC {m['test_roc_auc']:.3f}, AP {m['test_average_precision']:.3f}, "
    f"MRR {m['test_mrr']:.3f}, Hits@50 {m['test_hits@50']:.3f} (best epoch {m['best_epoch']}); "
    f"{m['h2d_rows_per_batch']:,.0f} feature rows a batch from the host"
)
epochs = [e["epoch"] for e in m["epochs"]]
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(epochs, [e["val_roc_auc"] for e in m["epochs"]], marker="o", ms=3)
ax.set_xlabel("epoch")
ax.set_ylabel("validation ROC-AUC")
ax.set_title("Cora, link prediction, GNS 20 %")
fig.tight_layout()

# %% [markdown]
# ## Scoring pairs
#
# The trained model scores any node pairs with the whole graph for message passing
# (`predict_links`; `gns-jax predict --pairs` from a checkpoint).

# %%
some = np.concatenate([split.test_pos[:3], split.test_neg[:3]])
print(np.round(predict_links(result.model, data, some), 3), "(3 test edges, then 3 non-edges)")

# %% [markdown]
# ## Takeaway
#
# A link batch is rooted at its pairs' endpoints, so NS, LADIES and GNS sample it unchanged and
# GNS's cache serves its input layer; its own positives must leave its message passing, or the
# model learns from the answer. On a graph as small as Cora a batch's endpoints cover most
# nodes and the cache saves few rows (`experiments/reports/link-study/`): the savings need a
# graph much larger than a batch.
