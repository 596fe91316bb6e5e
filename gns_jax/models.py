"""Flax NNX GNNs that consume padded blocks with edge weights. Pure under jit via split/merge.

The model contract (what :func:`gns_jax.train.fit` trains): an NNX module called as
``model(x, blocks, *, key=None)`` with ``x`` the ``[max_src, F]`` input features of
``blocks[0]``'s source slots and ``blocks`` one :class:`~gns_jax.sampling.blocks.Block` per layer,
input layer first; it returns the logits of the seed slots (``blocks[-1]``'s destinations).
``key`` is a dropout key in training and None in evaluation. A layer sees blocks and never global
ids, samplers or caches: the estimator (node-wise mean ``1/k``, GNS importance weights) arrives in
``edge_weight``, so one model serves every sampler.

A model may also offer exact full-graph inference (:class:`~gns_jax.evaluate.ExactInference`):
:class:`GraphSAGE` does, through :meth:`GraphSAGE.project`. A model trained by the pipeline
(``parallel="pipeline"``, :mod:`gns_jax.pipeline`) offers its layers one by one:
``pipeline_layers()`` (each layer, called as ``layer(h, block)``, with its output width) and
``layer_input(index, h, key)`` (what goes between layers, without variables); GraphSAGE does.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from gns_jax import flat_random
from gns_jax.config import DECODERS
from gns_jax.features import SparseFeatures
from gns_jax.sampling.blocks import Block

__all__ = ["DECODERS", "GraphSAGE", "LinkPredictor", "SAGEConv", "dropout"]


def dropout(key: jax.Array | None, x: jax.Array, rate: float) -> jax.Array:
    """Inverted dropout; the identity when ``key`` is None or ``rate == 0``. Pure.

    The keep probability is ``k / 256`` with ``k = round((1 - rate) * 256)`` (exact for rates
    that are multiples of 1/256, such as 0.5), and kept values are scaled by ``256 / k``, so the
    layer stays unbiased. Each element reads the fewest random bits that express ``k / 256``
    exactly: one bit at rate 0.5 (32 elements per 32-bit word), two at 0.25 or 0.75, up to a
    byte. ``jax.random.bernoulli`` uses a whole word per element; its threefry bits were about
    half of a CPU training step on products-scale batches (experiments/README.md).
    """
    if key is None or rate == 0.0:
        return x
    keep = round((1.0 - rate) * 256)
    if keep >= 256:
        return x
    if keep <= 0:
        return jnp.zeros_like(x)
    bits = next(b for b in (1, 2, 4, 8) if keep % (256 >> b) == 0)
    per_word = 32 // bits
    # Element (r, c) of the 2-D view reads bits [s, s + bits) of word (r // per_word, c), with
    # s = (r % per_word) * bits; this layout fuses into one pass on XLA:CPU.
    rows = x.shape[0] if x.ndim else 1
    view = x.reshape(rows, -1)
    words = flat_random.bits(key, (-(-rows // per_word), view.shape[1]))
    shifts = jnp.arange(per_word, dtype=jnp.uint32)[None, :, None] * bits
    fields = ((words[:, None, :] >> shifts) & ((1 << bits) - 1)).reshape(-1, view.shape[1])
    kept = fields[:rows] < (keep >> (8 - bits))
    return jnp.where(kept, view * (256.0 / keep), 0.0).astype(x.dtype).reshape(x.shape)


class SAGEConv(nnx.Module):
    """GraphSAGE layer: ``h_v' = W_self h_v + W_nbr sum_u w_uv h_u + b`` (Hamilton et al. 2017).

    With ``w_uv = 1/k`` over ``k`` sampled neighbours this is the GraphSAGE-mean layer; with
    ``w_uv = 1/d_v`` over all neighbours it is the exact full-neighbourhood layer.
    """

    def __init__(self, in_dim: int, out_dim: int, *, rngs: nnx.Rngs):
        self.self_proj = nnx.Linear(in_dim, out_dim, rngs=rngs)
        self.nbr_proj = nnx.Linear(in_dim, out_dim, use_bias=False, rngs=rngs)

    def __call__(self, h_src: jax.Array, block: Block) -> jax.Array:
        """``h_src`` ``[max_src, in_dim]`` -> ``[max_dst, out_dim]`` (rows of padding are junk)."""
        num_dst = block.num_dst  # static: a shape, not a count
        messages = h_src[block.senders] * block.edge_weight[:, None]
        aggregated = jax.ops.segment_sum(messages, block.receivers, num_segments=num_dst)
        return self.self_proj(h_src[:num_dst]) + self.nbr_proj(aggregated)


class GraphSAGE(nnx.Module):
    """A stack of :class:`SAGEConv` layers with ReLU and dropout between them.

    Args:
      dims: ``(in_dim, hidden, ..., num_classes)``; ``len(dims) - 1`` layers.
      dropout_rate: applied to the input features and after every hidden layer, in training.
      rngs: parameter initialisation.
    """

    sparse_inputs = True  # project(0, ...) also takes SparseFeatures

    def __init__(self, dims: Sequence[int], *, dropout_rate: float = 0.5, rngs: nnx.Rngs):
        self.convs = nnx.List([SAGEConv(a, b, rngs=rngs) for a, b in zip(dims[:-1], dims[1:])])
        self.dropout_rate = dropout_rate

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def project(self, index: int, h: jax.Array | SparseFeatures) -> tuple[jax.Array, jax.Array]:
        """The row-wise part of layer ``index`` for exact inference over the whole graph.

        ``h`` is the previous layer's output (ReLU is applied here for ``index > 0``) or, for
        ``index == 0``, the input features, dense or :class:`~gns_jax.features.SparseFeatures`
        over every node. Returns ``(self_part, nbr_part)`` such that the layer's full-graph
        output is ``self_part + A nbr_part``, ``A`` the mean over all neighbours: since
        ``nbr_proj`` is linear and bias-free, ``W_nbr sum_u w_uv h_u = sum_u w_uv W_nbr h_u``, so
        evaluation aggregates ``out_dim``-wide rows rather than ``in_dim``-wide ones.
        """
        conv = self.convs[index]
        if index > 0:
            h = jax.nn.relu(h)
        if isinstance(h, SparseFeatures):  # the product over the non-zeros
            self_part = h.matmul(conv.self_proj.kernel[...]) + conv.self_proj.bias[...][None, :]
            return self_part, h.matmul(conv.nbr_proj.kernel[...])
        return conv.self_proj(h), conv.nbr_proj(h)

    def pipeline_layers(self) -> list[tuple[SAGEConv, int]]:
        """The layers, input layer first, each with its output width: what a pipeline stage
        holds (:mod:`gns_jax.pipeline`). Layer ``i`` reads :meth:`layer_input` ``(i, ...)``."""
        return [(conv, conv.self_proj.out_features) for conv in self.convs]

    def layer_input(self, index: int, h: jax.Array, key: jax.Array | None) -> jax.Array:
        """What layer ``index`` reads: the input features after dropout (``index == 0``), or the
        previous layer's output after ReLU and dropout. ``key`` is the step's dropout key
        (None: no dropout); each layer draws its own part of it. Holds no variables, so a
        pipeline stage can apply it to its own layers."""
        if index > 0:
            h = jax.nn.relu(h)
        if key is None:
            return h
        keys = jax.random.split(key, self.num_layers + 1)
        return dropout(keys[index - 1], h, self.dropout_rate)  # the input layer: keys[-1]

    def __call__(
        self, x: jax.Array, blocks: Sequence[Block], *, key: jax.Array | None = None
    ) -> jax.Array:
        """Logits of the seed slots. ``key=None`` means deterministic (evaluation)."""
        h = x
        for i, (conv, block) in enumerate(zip(self.convs, blocks, strict=True)):
            h = conv(self.layer_input(i, h, key), block)
        return h


class LinkPredictor(nnx.Module):
    """Link prediction: an encoder of nodes and a decoder of node pairs.

    The encoder is any model of the contract above (its output rows are the seed slots'
    embeddings); :meth:`score` decodes pairs of rows into one logit a pair: ``dot``, the inner
    product ``<h_u, h_v>``, or ``mlp``, a two-layer perceptron on the element-wise product
    ``h_u * h_v`` (symmetric in ``u`` and ``v``, as OGB's link baselines use it). It offers
    exact inference when the encoder does (:meth:`project` is the encoder's).

    Args:
      encoder: the node encoder (e.g. ``GraphSAGE((F, hidden, ..., hidden))``).
      decoder: ``dot`` or ``mlp``.
      dim: the embeddings' width (the ``mlp`` decoder's input).
      rngs: the ``mlp`` decoder's initialisation.
    """

    def __init__(self, encoder: nnx.Module, decoder: str = "dot", *, dim: int = 0,
                 rngs: nnx.Rngs | None = None):  # fmt: skip
        if decoder not in DECODERS:
            raise ValueError(f"decoder: one of {', '.join(DECODERS)}, got {decoder!r}")
        self.encoder = encoder
        self.decoder = decoder
        if decoder == "mlp":
            if rngs is None or dim < 1:
                raise ValueError("the mlp decoder needs dim and rngs")
            self.mlp = nnx.List([nnx.Linear(dim, dim, rngs=rngs), nnx.Linear(dim, 1, rngs=rngs)])
        else:
            self.mlp = None
        if hasattr(encoder, "project"):
            self.sparse_inputs = getattr(encoder, "sparse_inputs", False)

    def __call__(
        self, x: jax.Array, blocks: Sequence[Block], *, key: jax.Array | None = None
    ) -> jax.Array:
        """The seed slots' embeddings (the encoder's output)."""
        return self.encoder(x, blocks, key=key)

    def score(self, h: jax.Array, pairs: jax.Array) -> jax.Array:
        """float32 ``[P]`` logits of the pairs ``pairs`` (int32 ``[P, 2]`` rows of ``h``)."""
        a, b = h[pairs[:, 0]], h[pairs[:, 1]]
        if self.mlp is None:
            return jnp.sum(a * b, axis=-1)
        hidden = jax.nn.relu(self.mlp[0](a * b))
        return self.mlp[1](hidden)[:, 0]

    @property
    def num_layers(self) -> int:
        return self.encoder.num_layers

    def project(self, index: int, h) -> tuple[jax.Array, jax.Array]:
        """The encoder's :meth:`GraphSAGE.project` (exact inference of the embeddings)."""
        return self.encoder.project(index, h)
