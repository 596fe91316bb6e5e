""":class:`DeviceBatch`: what the train step reads of a batch. Device-side data, no logic.

The loader (:mod:`gns_jax.loader`) builds it, the train steps (:mod:`gns_jax.step`,
:mod:`gns_jax.parallel`, :mod:`gns_jax.pipeline`) and sampled inference (:mod:`gns_jax.evaluate`)
read it; it lives apart so that the readers need not import the loader.
"""

from __future__ import annotations

from typing import NamedTuple

import jax

from gns_jax.sampling.blocks import Block

__all__ = ["DeviceBatch"]


class DeviceBatch(NamedTuple):
    """What the train step reads: a pytree of device arrays with shapes fixed by the budget.

    Attributes:
      x: float32 ``[max_src0, F]`` input features of ``blocks[0]``'s source slots (zero rows on
        padding).
      blocks: one :class:`~gns_jax.sampling.blocks.Block` per layer, input layer first.
      labels: int32 ``[max_seeds]`` labels of the seed slots (padding slots read node 0's); for
        link prediction float32 ``[P]``, 1 for a positive pair and 0 for a negative.
      seed_mask: bool ``[max_seeds]``, True for real seeds; for link prediction ``[P]``, True
        for real pairs.
      pairs: None for node tasks; for link prediction int32 ``[P, 2]``, the seed slots of each
        scored pair (:mod:`gns_jax.linkbatch`).
    """

    x: jax.Array
    blocks: tuple[Block, ...]
    labels: jax.Array
    seed_mask: jax.Array
    pairs: jax.Array | None = None
