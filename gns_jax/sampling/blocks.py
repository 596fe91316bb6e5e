"""The padded mini-batch format shared by every sampler, and its jraph interop.

Pure data types; the samplers that fill them run under jit (:mod:`gns_jax.sampling.nodewise`,
:mod:`gns_jax.sampling.gns`); their static sizes are a :class:`~gns_jax.sampling.budget.Budget`.

Layout of one block (``docs/architecture.md``, "The block format"), for ``max_dst`` destination
and ``max_src`` source slots:

* ``src_nodes[:max_dst]`` are the destination nodes (the destinations are a prefix of the
  sources), so the self term of a layer is ``h_src[:max_dst]``;
* the last destination slot and the last source slot are dummies and never hold a real node;
  unused slots hold ``-1``;
* edges are ``src_nodes[senders[e]] -> dst[receivers[e]]`` with coefficient ``edge_weight[e]``
  (``1/k`` for node-wise mean aggregation); padding edges run from the source dummy to the
  destination dummy with weight 0, so they change nothing in a weighted sum.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import jraph
import numpy as np

__all__ = ["Block", "MiniBatch", "block_from_graphs_tuple", "block_to_graphs_tuple"]


class Block(NamedTuple):
    """One sampled message-passing layer, padded to a static budget.

    Attributes:
      src_nodes: int32 ``[max_src]`` global node ids; ``-1`` in padding and dummy slots.
      senders: int32 ``[max_edges]`` local index into ``src_nodes``; ``max_src - 1`` on padding.
      receivers: int32 ``[max_edges]`` local index into the destination prefix; ``max_dst - 1``
        on padding.
      edge_weight: float32 ``[max_edges]`` estimator coefficient; 0 on padding edges.
      dst_mask: bool ``[max_dst]``; True for real destination nodes.
    """

    src_nodes: jax.Array
    senders: jax.Array
    receivers: jax.Array
    edge_weight: jax.Array
    dst_mask: jax.Array

    @property
    def num_dst(self) -> int:
        """Static number of destination slots (a shape, not a count of real nodes)."""
        return self.dst_mask.shape[0]

    @property
    def src_mask(self) -> jax.Array:
        return self.src_nodes >= 0


class MiniBatch(NamedTuple):
    """What a sampler returns: padded arrays with shapes fixed by the :class:`Budget`.

    Attributes:
      blocks: one block per layer, ``blocks[0]`` is the input layer; ``blocks[l].src_nodes`` of
        layer ``l + 1`` equal the destination prefix of layer ``l``.
      seeds: int32 ``[max_seeds]``, the output nodes; ``-1`` in padding slots.
      seed_mask: bool ``[max_seeds]``.
      overflow: int32 ``[num_layers]``, nodes and edges per layer that did not fit the budget.
        Always 0 under a worst-case budget; a non-zero entry means the batch is invalid (never
        trained on: the loader grows a calibrated budget and samples the batch again).
      sizes: int32 ``[num_layers, 2]`` or None: the source nodes beyond the destinations and the
        edge slots each layer needed, for samplers whose needs are not the block's real content
        (LADIES scans more entries than it keeps); None means "count the block".
    """

    blocks: tuple[Block, ...]
    seeds: jax.Array
    seed_mask: jax.Array
    overflow: jax.Array
    sizes: jax.Array | None = None

    @property
    def input_nodes(self) -> jax.Array:
        return self.blocks[0].src_nodes

    @classmethod
    def from_layers(cls, seeds, blocks, overflow, sizes=None) -> MiniBatch:
        """The batch of per-layer results listed **output layer first**, as samplers produce
        them top-down (stored input layer first). Jittable."""
        return cls(
            blocks=tuple(reversed(blocks)),
            seeds=seeds,
            seed_mask=seeds >= 0,
            overflow=jnp.stack(overflow[::-1]),
            sizes=None if sizes is None else jnp.stack(sizes[::-1]),
        )


def block_to_graphs_tuple(block: Block, x: jax.Array | None = None) -> jraph.GraphsTuple:
    """A block as a one-graph ``jraph.GraphsTuple`` over its source slots.

    Nodes are the ``max_src`` source slots (``nodes["id"]`` holds global ids, ``-1`` on padding,
    ``nodes["dst_mask"]`` marks real destinations, which come first, and ``nodes["x"]`` holds
    ``x``, the ``[max_src, F]`` features of the sources, when given); ``edges["weight"]`` holds
    the estimator's coefficients; receivers index the same node set, since destinations are a
    source prefix. So ``jraph.segment_sum(x[senders] * weight[:, None], receivers)`` is the
    block's weighted aggregation (padding edges weigh 0).
    """
    max_src, max_dst = block.src_nodes.shape[0], block.num_dst
    dst_mask = jnp.zeros(max_src, dtype=bool).at[:max_dst].set(block.dst_mask)
    nodes = {"id": block.src_nodes, "dst_mask": dst_mask}
    if x is not None:
        if x.shape[0] != max_src:
            raise ValueError(f"x must have one row per source slot ({max_src}), got {x.shape}")
        nodes["x"] = x
    return jraph.GraphsTuple(
        nodes=nodes,
        edges={"weight": block.edge_weight},
        senders=block.senders,
        receivers=block.receivers,
        n_node=jnp.asarray([max_src], dtype=jnp.int32),
        n_edge=jnp.asarray([block.senders.shape[0]], dtype=jnp.int32),
        globals={"num_dst": jnp.asarray([max_dst], dtype=jnp.int32)},
    )


def block_from_graphs_tuple(graph: jraph.GraphsTuple) -> Block:
    """Inverse of :func:`block_to_graphs_tuple` (``num_dst`` is read back as a static int; the
    features, if any, are ``graph.nodes["x"]``)."""
    max_dst = int(np.asarray(graph.globals["num_dst"])[0])
    return Block(
        src_nodes=graph.nodes["id"],
        senders=graph.senders,
        receivers=graph.receivers,
        edge_weight=graph.edges["weight"],
        dst_mask=graph.nodes["dst_mask"][:max_dst],
    )
