"""The padded mini-batch format shared by every sampler, its budget, and jraph interop.

Pure data types; the samplers that fill them run under jit (``sampling/nodewise.py``).

Layout of one block (DESIGN.md section 4), for ``max_dst`` destination and ``max_src`` source slots:

* ``src_nodes[:max_dst]`` are the destination nodes (the destinations are a prefix of the
  sources), so the self term of a layer is ``h_src[:max_dst]``;
* the last destination slot and the last source slot are dummies and never hold a real node;
  unused slots hold ``-1``;
* edges are ``src_nodes[senders[e]] -> dst[receivers[e]]`` with coefficient ``edge_weight[e]``
  (``1/k`` for node-wise mean aggregation); padding edges run from the source dummy to the
  destination dummy with weight 0, so they change nothing in a weighted sum.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jraph
import numpy as np

__all__ = [
    "Block",
    "Budget",
    "MiniBatch",
    "block_from_graphs_tuple",
    "block_to_graphs_tuple",
    "pad_seeds",
]


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
        trained on: ``fit`` grows a calibrated budget and samples the batch again).
    """

    blocks: tuple[Block, ...]
    seeds: jax.Array
    seed_mask: jax.Array
    overflow: jax.Array

    @property
    def input_nodes(self) -> jax.Array:
        return self.blocks[0].src_nodes


class Budget(NamedTuple):
    """Static sizes of one sampler configuration. Hashable: a valid jit static argument.

    Attributes:
      max_seeds: seed slots, ``batch_size + 1`` (the last one is a dummy).
      max_src: source slots per block, input layer first; includes the dummy slot.
      max_edges: edge slots per block, input layer first.
    """

    max_seeds: int
    max_src: tuple[int, ...]
    max_edges: tuple[int, ...]

    @property
    def max_dst(self) -> tuple[int, ...]:
        """Destination slots per block, input layer first."""
        return (*self.max_src[1:], self.max_seeds)

    @classmethod
    def worst_case(cls, batch_size: int, fanouts: tuple[int, ...], num_nodes: int) -> Budget:
        """Exact capacities for fan-out samplers; no batch can overflow them.

        ``fanouts`` are listed input layer first. Walking from the output layer down, each block
        has ``max_dst`` destination slots (the sources of the block above) and
        ``max_dst * fanout`` edge slots (one row of ``fanout`` per destination, the dummy row
        included); its sources are ``[destination prefix | new nodes | dummy]`` with at most
        ``min((max_dst - 1) * fanout, num_nodes)`` new nodes.
        """
        max_dst = batch_size + 1
        max_src, max_edges = [], []
        for fanout in reversed(fanouts):
            max_edges.append(max_dst * fanout)
            max_src.append(max_dst + min((max_dst - 1) * fanout, num_nodes) + 1)
            max_dst = max_src[-1]
        return cls(batch_size + 1, tuple(reversed(max_src)), tuple(reversed(max_edges)))

    def calibrated(
        self, new_nodes: Sequence[int], edges: Sequence[int], margin: float = 1.1
    ) -> Budget:
        """A budget sized from observed batches, never above this one (the worst case).

        Args:
          new_nodes: per layer (input first), the most source nodes seen that were not also
            destinations, over the calibration batches.
          edges: per layer, the most real edges seen.
          margin: head-room factor; each size is then rounded up to a bucket (at most 12.5 %
            more), which also keeps the number of distinct shapes small when a budget grows.
        """
        from gns_jax.features import bucket  # a leaf module: no import cycle

        layers = len(self.max_src)
        max_src, max_edges = [0] * layers, [0] * layers
        max_dst = self.max_seeds
        for layer in reversed(range(layers)):
            worst_dst = self.max_dst[layer]
            worst_new = self.max_src[layer] - worst_dst - 1
            width = self.max_edges[layer] // worst_dst
            new = min(worst_new, bucket(math.ceil(new_nodes[layer] * margin) + 1, 16))
            max_src[layer] = max_dst + new + 1
            max_edges[layer] = min(max_dst * width, bucket(math.ceil(edges[layer] * margin), 16))
            max_dst = max_src[layer]
        return Budget(self.max_seeds, tuple(max_src), tuple(max_edges))


def pad_seeds(seeds: np.ndarray, budget: Budget) -> np.ndarray:
    """Host-side: pads ``seeds`` to ``budget.max_seeds`` with -1 (the last slot stays a dummy).

    Raises ConfigError when there are more seeds than the batch size or a seed repeats.
    """
    from gns_jax.errors import ConfigError

    seeds = np.asarray(seeds, dtype=np.int32)
    if seeds.shape[0] > budget.max_seeds - 1:
        raise ConfigError(f"{seeds.shape[0]} seeds exceed the batch size {budget.max_seeds - 1}")
    out = np.full(budget.max_seeds, -1, dtype=np.int32)
    out[: seeds.shape[0]] = seeds
    return out


def block_to_graphs_tuple(block: Block) -> jraph.GraphsTuple:
    """A block as a one-graph ``jraph.GraphsTuple`` over its source slots.

    Nodes are the ``max_src`` source slots (``nodes["id"]`` holds global ids, ``-1`` on padding,
    ``nodes["dst_mask"]`` marks real destinations, which come first); ``edges["weight"]`` holds
    the coefficients; receivers index the same node set, since destinations are a source prefix.
    """
    max_src, max_dst = block.src_nodes.shape[0], block.num_dst
    dst_mask = jnp.zeros(max_src, dtype=bool).at[:max_dst].set(block.dst_mask)
    return jraph.GraphsTuple(
        nodes={"id": block.src_nodes, "dst_mask": dst_mask},
        edges={"weight": block.edge_weight},
        senders=block.senders,
        receivers=block.receivers,
        n_node=jnp.asarray([max_src], dtype=jnp.int32),
        n_edge=jnp.asarray([block.senders.shape[0]], dtype=jnp.int32),
        globals={"num_dst": jnp.asarray([max_dst], dtype=jnp.int32)},
    )


def block_from_graphs_tuple(graph: jraph.GraphsTuple) -> Block:
    """Inverse of :func:`block_to_graphs_tuple` (``num_dst`` is read back as a static int)."""
    max_dst = int(np.asarray(graph.globals["num_dst"])[0])
    return Block(
        src_nodes=graph.nodes["id"],
        senders=graph.senders,
        receivers=graph.receivers,
        edge_weight=graph.edges["weight"],
        dst_mask=graph.nodes["dst_mask"][:max_dst],
    )
