"""LADIES: layer-dependent importance sampling (Zou et al., NeurIPS 2019). Jitted JAX, fixed shapes.

As the official code (github.com/acbull/LADIES, ``pytorch_ladies.py``) does it, top-down from
the output layer: with ``P = row_normalize(A + I)`` and ``U`` the upper layer's nodes,

1. the column norms ``pi_j = sum_{u in U} P_uj^2`` over ``U``'s rows, ``p = pi / sum pi``;
2. ``s`` nodes drawn **without replacement** with probability ``p`` (Gumbel top-``s``: the
   successive-sampling law of ``torch.multinomial(p, s, replacement=False)``), all candidates
   when fewer than ``s`` have ``p > 0``;
3. the layer's sources are ``U`` (the destinations, a prefix, for the self loop) and the sampled
   nodes; its edges are the non-zeros ``P_uj`` between them, with coefficients
   ``(P_uj / p_j) / sum_{j'} (P_uj' / p_j')``, row-normalised.

The coefficients go in ``edge_weight``, which the model uses (the DGL example's model ignores
them; this library's GraphSAGE does not). ``fanouts`` here are **nodes per layer**, output layer
first: ``LADIES(512)`` is ``(512, 512, 512)``.

Shapes: a layer scans every entry of ``U``'s rows of ``A + I``; the number of entries depends on
the degrees of the nodes drawn, so the budget's ``max_edges`` is that scan's size (worst case: the
largest degrees summed), calibrated like every budget. A batch reports the sizes it needed in
``MiniBatch.sizes`` (sampled new nodes, entries scanned), and one that does not fit is flagged in
``overflow``, never truncated.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from gns_jax.errors import ConfigError
from gns_jax.graph import CSRGraph
from gns_jax.sampling.base import JittedSampler
from gns_jax.sampling.blocks import Block, MiniBatch
from gns_jax.sampling.budget import Budget
from gns_jax.sampling.nodewise import DeviceTopology, relabel

__all__ = [
    "LADIESSampler",
    "ladies_budget",
    "ladies_layer",
    "row_normalise",
    "sample_ladies_blocks",
]


def row_normalise(scaled: jax.Array, owner: jax.Array, member: jax.Array, max_dst: int):
    """``scaled / sum of its destination's row``: every destination's coefficients sum to 1
    (0 where ``member`` is false). Jittable; looked up at call time by :func:`ladies_layer`."""
    row_sum = jax.ops.segment_sum(scaled, owner, num_segments=max_dst)
    return jnp.where(member, scaled / jnp.maximum(row_sum[owner], 1e-30), 0.0)


def ladies_layer(
    key: jax.Array,
    topology: DeviceTopology,
    dst: jax.Array,
    num_samples: int,
    max_src: int,
    max_scan: int,
) -> tuple[Block, jax.Array, jax.Array]:
    """One LADIES layer below the destinations ``dst`` (``-1`` padded). Jittable.

    Returns the block, its overflow (nodes or entries that did not fit) and its needed sizes
    ``[new nodes, entries scanned]``.
    """
    n = topology.num_nodes
    max_dst = dst.shape[0]
    valid = dst >= 0
    safe = jnp.where(valid, dst, 0)
    start = topology.indptr[safe]
    degree = jnp.where(valid, topology.indptr[safe + 1] - start, 0)
    counts = jnp.where(valid, degree + 1, 0)  # the row of A + I: the neighbours and the node
    ends = jnp.cumsum(counts)
    total = ends[-1]
    entry = jnp.arange(max_scan, dtype=jnp.int32)
    in_range = entry < total
    owner = jnp.minimum(jnp.searchsorted(ends, entry, side="right"), max_dst - 1).astype(jnp.int32)
    k = entry - (ends[owner] - counts[owner])
    own = dst[owner]
    neighbour = topology.indices[jnp.where(k < degree[owner], start[owner] + k, 0)]
    j = jnp.where(in_range, jnp.where(k < degree[owner], neighbour, own), n)  # n: no entry
    value = jnp.where(in_range, 1.0 / (degree[owner] + 1).astype(jnp.float32), 0.0)  # P_uj
    # Column norms over U's rows, in a node-sized scratch array (index n collects no entry).
    pi = jnp.zeros(n + 1, jnp.float32).at[j].add(value**2)
    first = jnp.full(n + 1, max_scan, jnp.int32).at[j].min(entry)
    is_first = in_range & (first[j] == entry)
    mass = jnp.sum(jnp.where(is_first, pi[j], 0.0))
    p = pi / jnp.maximum(mass, 1e-30)
    gumbel = -jnp.log(-jnp.log(jax.random.uniform(key, (max_scan,), minval=1e-20, maxval=1.0)))
    score = jnp.where(is_first & (pi[j] > 0), jnp.log(jnp.maximum(pi[j], 1e-30)) + gumbel, -jnp.inf)
    take = min(num_samples, max_scan)
    top_score, top = jax.lax.top_k(score, take)
    drawn = jnp.isfinite(top_score)
    sampled = jnp.where(drawn, j[top], -1)
    src_nodes, _, over_nodes = relabel(n, dst, sampled, drawn, max_new=max_src - max_dst - 1)
    slot = jnp.full(n + 1, -1, jnp.int32)
    slot = slot.at[jnp.where(src_nodes >= 0, src_nodes, n)].set(
        jnp.arange(max_src, dtype=jnp.int32)
    )
    slot = slot.at[n].set(-1)
    sender = slot[j]
    member = in_range & (sender >= 0)
    scaled = jnp.where(member, value / jnp.maximum(p[j], 1e-30), 0.0)
    weight = row_normalise(scaled, owner, member, max_dst)
    block = Block(
        src_nodes=src_nodes,
        senders=jnp.where(member, sender, max_src - 1),
        receivers=jnp.where(member, owner, max_dst - 1),
        edge_weight=weight,
        dst_mask=valid,
    )
    new = jnp.sum(src_nodes >= 0) - jnp.sum(valid)
    overflow = over_nodes + jnp.maximum(total - max_scan, 0)
    return block, overflow, jnp.stack([new + over_nodes, total]).astype(jnp.int32)


def sample_ladies_blocks(
    key: jax.Array,
    topology: DeviceTopology,
    seeds: jax.Array,
    *,
    samples: tuple[int, ...],
    budget: Budget,
) -> MiniBatch:
    """One LADIES mini-batch rooted at ``seeds``; ``samples`` per block, input layer first."""
    dst = seeds
    blocks, overflow, sizes = [], [], []
    keys = jax.random.split(key, len(samples))
    for layer in reversed(range(len(samples))):  # output layer first
        block, over, size = ladies_layer(
            keys[layer],
            topology,
            dst,
            samples[layer],
            budget.max_src[layer],
            budget.max_edges[layer],
        )
        blocks.append(block)
        overflow.append(over)
        sizes.append(size)
        dst = block.src_nodes
    return MiniBatch.from_layers(seeds, blocks, overflow, sizes)


def ladies_budget(batch_size: int, samples: tuple[int, ...], degree: np.ndarray) -> Budget:
    """Exact worst case, ``samples`` input layer first: ``max_dst + s + 1`` sources per layer and
    every entry of the ``max_dst - 1`` highest-degree rows of ``A + I`` scanned."""
    ordered = np.sort(np.asarray(degree, dtype=np.int64))[::-1]
    max_dst = batch_size + 1
    max_src, max_edges = [], []
    for s in reversed(samples):
        real = min(max_dst - 1, ordered.size)
        max_edges.append(max(1, int(ordered[:real].sum()) + real))
        max_src.append(max_dst + min(s, ordered.size) + 1)
        max_dst = max_src[-1]
    return Budget(batch_size + 1, tuple(reversed(max_src)), tuple(reversed(max_edges)))


class LADIESSampler(JittedSampler):
    """LADIES with ``fanouts`` nodes per layer (output layer first), jitted once per budget.

    Args:
      graph: the graph, in host memory; copied once to the topology device.
      fanouts: nodes sampled per layer, output layer first (``(512, 512, 512)``).
      batch_size: seeds per batch.
    """

    name = "ladies"

    def __init__(
        self,
        graph: CSRGraph,
        fanouts: tuple[int, ...],
        batch_size: int,
        *,
        device: jax.Device | None = None,
    ):
        try:
            self.fanouts = tuple(int(f) for f in fanouts)
        except (TypeError, ValueError):
            raise ConfigError("fanouts", f"expected integers, got {fanouts!r}") from None
        if not self.fanouts or min(self.fanouts) < 1:
            raise ConfigError("fanouts", f"nodes per layer must be positive, got {self.fanouts}")
        if int(batch_size) < 1:
            raise ConfigError("batch_size", f"must be a positive integer, got {batch_size}")
        self.batch_size = int(batch_size)
        self._samples = tuple(reversed(self.fanouts))  # block order: input layer first
        self.budget = ladies_budget(self.batch_size, self._samples, graph.degrees())
        self.topology = DeviceTopology.from_graph(graph, device)
        self.num_nodes = graph.num_nodes
        self._start()

    def _function(self, budget: Budget):
        return functools.partial(sample_ladies_blocks, samples=self._samples, budget=budget)

    def sample(self, key: jax.Array, seeds: jax.Array, cache=None) -> MiniBatch:
        """Samples a batch; the cache, if given, is not read."""
        return self._sample(key, self.topology, seeds)
