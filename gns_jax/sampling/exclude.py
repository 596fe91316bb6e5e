"""Target edges out of a link batch's message passing (what PyG calls disjoint training edges
and DGL ``exclude``). Jittable; works on the blocks of any sampler.

A link-prediction batch is rooted at the endpoints of its edges, as seed nodes; a positive
target edge ``(u, v)`` is in the training graph, so the sampler may draw ``v`` as a neighbour of
``u`` (or ``u`` of ``v``) and the model would learn to score an edge from its own presence.
:func:`exclude_targets` removes those draws after sampling, whatever the sampler.

It works in slot space. Seeds occupy the first slots of every layer (the destinations are a
prefix of the sources at every layer, and the next layer's sources are this layer's
destinations), and a sampled neighbour that is itself a seed takes that seed's slot. So a drawn
target edge is exactly an edge whose receiver and sender are both seed slots forming a target
pair, in either direction: the check is a lookup of ``receiver * S + sender`` among the sorted
keys of the target pairs (``S`` seed slots), with no node ids involved.

A removed edge's coefficient becomes 0 and the remaining coefficients of its destination are
scaled so that they sum to what they summed to before (node-wise sampling's ``1/k`` and GNS's
self-normalised weights then average over the neighbours that are not targets, which is the
mean over the graph without the target edges; with Horvitz-Thompson weights it is the ratio
estimator there). A destination whose every drawn neighbour was a target gets no message.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from gns_jax.sampling.blocks import Block

__all__ = ["exclude_targets", "target_hits"]


def _keys(targets: jax.Array, num_seeds: int) -> jax.Array:
    """Sorted int32 keys ``a * S + b`` of every target pair in both directions; padding pairs
    (a ``-1``) get a key past every real one."""
    a, b = targets[:, 0], targets[:, 1]
    real = (a >= 0) & (b >= 0)
    pad = jnp.int32(num_seeds * num_seeds)
    keys = jnp.concatenate([jnp.where(real, a * num_seeds + b, pad),
                            jnp.where(real, b * num_seeds + a, pad)])  # fmt: skip
    return jnp.sort(keys.astype(jnp.int32))


def target_hits(block: Block, targets: jax.Array, num_seeds: int) -> jax.Array:
    """bool ``[max_edges]``: the block's edges that are a target pair of seed slots (either
    direction). ``targets``: int32 ``[T, 2]`` seed slots of the target edges, ``-1`` padded."""
    keys = _keys(targets, num_seeds)
    r, s = block.receivers, block.senders
    seeds = (r < num_seeds) & (s < num_seeds)
    key = jnp.where(seeds, r * num_seeds + s, -1).astype(jnp.int32)
    at = jnp.clip(jnp.searchsorted(keys, key), 0, keys.shape[0] - 1)
    return seeds & (keys[at] == key) & (block.edge_weight != 0)


def exclude_targets(
    blocks: tuple[Block, ...], targets: jax.Array, num_seeds: int
) -> tuple[Block, ...]:
    """``blocks`` with every drawn target edge removed (coefficient 0) and the remaining
    coefficients of its destination rescaled to their former sum. Jittable.

    Args:
      blocks: a sampled batch's blocks (any sampler), input layer first.
      targets: int32 ``[T, 2]``, the seed slots of the batch's target edges (``-1`` padded);
        a pair ``(i, j)`` stands for the edges between seed ``i`` and seed ``j`` both ways.
      num_seeds: static, the seed slots (the batch's ``max_seeds``); needs
        ``num_seeds ** 2 < 2 ** 31``.
    """
    if num_seeds * num_seeds >= 2**31:
        raise ValueError(f"{num_seeds} seed slots: too many for int32 pair keys")
    out = []
    for block in blocks:
        hit = target_hits(block, targets, num_seeds)
        weight = block.edge_weight
        kept = jnp.where(hit, 0.0, weight)
        num_dst = block.dst_mask.shape[0]
        before = jax.ops.segment_sum(weight, block.receivers, num_dst)
        after = jax.ops.segment_sum(kept, block.receivers, num_dst)
        touched = jax.ops.segment_max(hit.astype(jnp.int32), block.receivers, num_dst) > 0
        scale = jnp.where(touched, jnp.where(after != 0, before / after, 0.0), 1.0)
        out.append(block._replace(edge_weight=(kept * scale[block.receivers]).astype(weight.dtype)))
    return tuple(out)
