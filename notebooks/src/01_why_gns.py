# %% [markdown]
# # 1. Why Global Neighbor Sampling
#
# A graph neural network computes a node's representation from its neighbours', layer by layer.
# Trained in mini-batches, each batch of *seed* nodes needs the features of every node within
# `L` hops (for `L` layers). On a giant graph the features live in host memory, and every batch
# copies its input-layer rows to the accelerator: that copy is the bottleneck GNS attacks.
#
# This notebook samples mini-batches of a real graph (Amazon Photo: co-purchased products,
# bag-of-words features) with the library, first with **node-wise sampling** (NS, GraphSAGE's
# sampler), then with **GNS**, and looks at what has to cross to the device.

# %%
import matplotlib.pyplot as plt
import numpy as np

from gns_jax import GNSSampler, Loader, NodeWiseSampler, cache_size, load_dataset
from gns_jax.plotting import Palette, colors, legend, scale_for, styles

data = load_dataset("amazon_photo")
print(
    f"{data.name}: {data.num_nodes:,} nodes, {data.graph.num_edges // 2:,} edges, "
    f"{data.num_features} features, mean degree {data.graph.degrees().mean():.1f}"
)

# %% [markdown]
# ## The neighbourhood explosion
#
# NS samples, for every node of a layer, `K` of its neighbours (here 15, 10 and 5, listed from
# the output layer down, as everywhere in `gns_jax`). A `MiniBatch` holds one block per layer,
# **input layer first**; a block's sources are the nodes whose representations it reads, and its
# destinations (a prefix of the sources) the nodes it computes.

# %%
batch_size, fanouts = 32, (15, 10, 5)


def layer_sizes(batch):
    """Real nodes per layer, from the seeds (output) down to the input layer."""
    blocks = batch.inputs.blocks
    sources = [int((np.asarray(b.src_nodes) >= 0).sum()) for b in blocks]
    return [len(batch.seeds), *reversed(sources)]


ns = Loader(data, NodeWiseSampler(data.graph, fanouts, batch_size), seed=0, prefetch=0)
ns_batch = next(iter(ns.epoch(0)))
ns_sizes = layer_sizes(ns_batch)
print("NS nodes per layer, seeds first:", ns_sizes)
print(f"input layer: {ns_sizes[-1] / data.num_nodes:.0%} of the graph for {batch_size} seeds")
print(f"feature rows moved host -> device: {ns_batch.rows_moved:,}")

# %% [markdown]
# Each hop multiplies the node count by about the fan-out until the sampled set covers much of
# the graph: `32` seeds read the features of thousands of nodes. On a graph of a hundred million
# nodes the product `15 x 10 x 5 = 750` per seed does not saturate, and every one of those rows
# is a host-to-device copy.
#
# ## What the global cache changes
#
# GNS draws a **global cache**: `m = ceil(rho n)` nodes, drawn with replacement with probability
# proportional to degree and deduplicated, whose features stay on the accelerator. The input
# layer then takes up to `K = 10` neighbours *from the cache only*; the layers above sample as
# NS does. The only rows that must cross are those of the layer-1 nodes (the input layer's
# destinations) that are not cached.

# %%
m = cache_size(0.01, data.num_nodes)
gns = Loader(data, GNSSampler(data.graph, fanouts, batch_size, m), seed=0, prefetch=0)
gns_batch = next(iter(gns.epoch(0)))
gns_sizes = layer_sizes(gns_batch)
print("GNS nodes per layer, seeds first:", gns_sizes)
print(f"input rows: {gns_batch.num_inputs:,}, moved host -> device: {gns_batch.rows_moved:,}")
print(f"the rest ({gns_batch.num_inputs - gns_batch.rows_moved:,}) are read from the cache")

# %%
palette = Palette(["GNS, 1 % cache"], baselines=["NS"])
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
hops = ["seeds", "layer 2", "layer 1", "input"]
for name, sizes in (("NS", ns_sizes), ("GNS, 1 % cache", gns_sizes)):
    axes[0].plot(hops, sizes, label=name, **palette[name].line(len(hops)))
    for hop, size, ns_size in zip(hops, sizes, ns_sizes):
        if name == "NS" or size != ns_size:  # GNS's own numbers where they differ
            axes[0].annotate(
                f"{size:,}",
                (hop, size),
                xytext=(0, 7 if name == "NS" else -15),
                textcoords="offset points",
                ha="center",
                color=palette[name].color,
            )
scale_for(axes[0], ns_sizes + gns_sizes, "y")  # seeds to input: two orders of magnitude
axes[0].set_ylim(top=2 * max(ns_sizes))  # room for the numbers above the points
axes[0].set_ylabel("real nodes")
axes[0].set_title("nodes per layer of one batch")
legend(axes[0], loc="upper left")
moved = [ns_batch.rows_moved, gns_batch.rows_moved]
cached = [0, gns_batch.num_inputs - gns_batch.rows_moved]
where = colors(2)
bars = axes[1].bar(["NS", "GNS 1 %"], moved, color=where[0], label="moved host -> device")
axes[1].bar_label(bars, fmt="{:,.0f}", label_type="center")
bars = axes[1].bar(
    ["NS", "GNS 1 %"], cached, bottom=moved, color=where[1], label="read from the device cache"
)
axes[1].bar_label(bars, labels=["", f"{cached[1]:,}"], padding=2)
axes[1].set_ylim(0, 1.3 * max(np.add(moved, cached)))  # room for the legend
axes[1].set_ylabel("input-layer feature rows")
axes[1].set_title("where the input rows come from")
legend(axes[1])
plt.show()

# %% [markdown]
# ## How it changes with the cache fraction
#
# A larger cache serves more input rows and holds more layer-1 nodes. Over a few batches per
# fraction (one cache each), the rows moved and the share of layer-1 nodes with no cached
# neighbour at all (whose input-layer aggregate is then empty):

# %%
fractions = [0.005, 0.01, 0.02, 0.05, 0.2, 0.5]
rows, hits, empty = [], [], []
for rho in fractions:
    loader = Loader(
        data,
        GNSSampler(data.graph, fanouts, batch_size, cache_size(rho, data.num_nodes)),
        seed=0,
        prefetch=0,
    )
    batches = [b for _, b in zip(range(4), loader.epoch(0))]
    rows.append(np.mean([b.rows_moved for b in batches]))
    hits.append(1 - sum(b.rows_moved for b in batches) / sum(b.num_inputs for b in batches))
    per_node = []
    for b in batches:
        block = b.inputs.blocks[0]
        real = np.asarray(block.edge_weight) != 0
        has = np.bincount(np.asarray(block.receivers)[real], minlength=block.num_dst) > 0
        per_node.append(1 - has[np.asarray(block.dst_mask)].mean())
    empty.append(np.mean(per_node))

ns_rows = np.mean([b.rows_moved for _, b in zip(range(4), ns.epoch(0))])
share, hit, none = styles(3)
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
axes[0].plot(fractions, np.array(rows) / ns_rows, label="GNS rows / NS rows", **share.line())
axes[0].plot(fractions, hits, label="cache hit rate of input rows", **hit.line())
axes[0].set_xlabel("cache fraction rho")
legend(axes[0])
axes[1].plot(fractions, empty, **none.line())
axes[1].set_xlabel("cache fraction rho")
axes[1].set_ylabel("layer-1 nodes with no cached neighbour")
for ax in axes:
    scale_for(ax, fractions)  # 0.5 % to 50 %
plt.show()
for rho, r, e in zip(fractions, rows, empty):
    print(
        f"rho {rho:>5.1%}: {r:8,.0f} rows a batch ({r / ns_rows:.2f} of NS's), "
        f"{e:.0%} of layer-1 nodes without a cached neighbour"
    )

# %% [markdown]
# ## Takeaway
#
# Node-wise sampling's input layer grows as the product of the fan-outs until it covers the
# graph, and every input row is a host-to-device copy. GNS reads the input layer's neighbours
# from a small device-resident cache, so only the layer-1 nodes that are not cached cross: a
# fraction of NS's rows even at a 1 % cache. The price is visible in the last plot: at small
# caches many nodes have no cached neighbour at all, and the others see only a few, chosen with
# probabilities far from uniform. Notebook 2 shows how the importance weights correct for that
# choice, and what it costs in variance.
