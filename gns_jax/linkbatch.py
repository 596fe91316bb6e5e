"""Edge batches for link prediction: positives, their negatives, and the seed nodes they need.
Host-side NumPy.

A link batch is ``B`` training edges (positives) and ``K`` negatives for each (``neg_ratio``),
drawn afresh every batch from the run's ``NEGATIVES`` stream (:mod:`gns_jax.streams`):

* ``uniform`` (default): the positive ``(u, v)`` gives ``(u, v')`` with ``v'`` uniform over the
  nodes;
* ``degree``: ``v'`` drawn in proportion to its degree (hard negatives: popular nodes);
* ``in-batch``: ``v'`` the head of another positive of the batch (``v`` of positive
  ``i + k``, ``k = 1..K``, cyclically), so negatives add no nodes.

Negatives are not checked against the graph (a random pair is an edge with probability about
``degree / num_nodes``), as PyG's and DGL's samplers do. The batch's seed nodes are the distinct
endpoints of all its pairs, at most ``B * (2 + K)`` (:func:`max_seeds`), in ascending order; a
pair is two seed slots. The sampler then samples every endpoint's neighbourhood in one block
stack, and :func:`gns_jax.sampling.exclude.exclude_targets` takes the positives out of it.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from gns_jax.config import NEGATIVES
from gns_jax.errors import ConfigError

__all__ = ["NEGATIVES", "EdgeSeeds", "LinkSeeds", "max_pairs", "max_seeds"]


def max_pairs(batch_size: int, neg_ratio: int) -> int:
    """Pair slots of a batch of ``batch_size`` positives: each and its negatives."""
    return batch_size * (1 + neg_ratio)


def max_seeds(batch_size: int, neg_ratio: int) -> int:
    """The most distinct endpoints a batch can have (``u``, ``v`` and ``K`` tails a positive)."""
    return batch_size * (2 + neg_ratio)


class LinkSeeds(NamedTuple):
    """One link batch, host-side.

    Attributes:
      ids: int32 ``[n]``, its distinct endpoints, ascending: the sampler's seeds.
      pairs: int32 ``[P, 2]`` seed slots of every pair (positives first, then each positive's
        negatives in turn), padded to :func:`max_pairs` with the dummy slot ``seed_slots - 1``.
      labels: float32 ``[P]``, 1 for a positive, 0 for a negative (0 on padding).
      mask: bool ``[P]``, True for real pairs.
      targets: int32 ``[B, 2]`` the positives' seed slots, ``-1`` padded (what is excluded from
        message passing).
    """

    ids: np.ndarray
    pairs: np.ndarray
    labels: np.ndarray
    mask: np.ndarray
    targets: np.ndarray


@dataclasses.dataclass(frozen=True)
class EdgeSeeds:
    """The training edges a link-prediction loader iterates, and how it draws negatives.

    Args:
      edges: int32 ``[M, 2]`` training edges (each undirected edge once).
      num_nodes: nodes of the graph (negatives are drawn among them).
      neg_ratio: negatives per positive (``K``, at least 1).
      negatives: ``uniform``, ``degree`` or ``in-batch`` (module docs).
      degrees: the nodes' degrees (``degree`` negatives only).
    """

    edges: np.ndarray
    num_nodes: int
    neg_ratio: int = 1
    negatives: str = "uniform"
    degrees: np.ndarray | None = None

    def __post_init__(self):
        edges = np.asarray(self.edges)
        if edges.ndim != 2 or edges.shape[1] != 2 or edges.shape[0] == 0:
            raise ConfigError(
                "edges", f"training edges as a non-empty [M, 2] array, got {edges.shape}"
            )
        if edges.min() < 0 or edges.max() >= self.num_nodes:
            raise ConfigError("edges", f"node ids in [0, {self.num_nodes})")
        if int(self.neg_ratio) < 1:
            raise ConfigError("neg_ratio", f"at least 1 negative a positive, got {self.neg_ratio}")
        if self.negatives not in NEGATIVES:
            raise ConfigError("negatives", f"one of {', '.join(NEGATIVES)}, got {self.negatives!r}")
        if self.negatives == "degree" and self.degrees is None:
            raise ConfigError("negatives", "degree-biased negatives need the degrees")
        object.__setattr__(self, "edges", edges.astype(np.int32))
        if self.degrees is not None:
            p = np.asarray(self.degrees, np.float64)
            object.__setattr__(self, "_cumulative", np.cumsum(p / p.sum()))

    @property
    def num_edges(self) -> int:
        return int(self.edges.shape[0])

    def tails(self, positives: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """int32 ``[b, K]``: the negatives' tails of each positive (``(u, v')``)."""
        b, k = positives.shape[0], int(self.neg_ratio)
        if self.negatives == "uniform":
            return rng.integers(0, self.num_nodes, size=(b, k), dtype=np.int32)
        if self.negatives == "degree":
            draws = np.searchsorted(self._cumulative, rng.random((b, k)), side="right")
            return np.minimum(draws, self.num_nodes - 1).astype(np.int32)
        shift = (np.arange(b)[:, None] + np.arange(1, k + 1)[None, :]) % max(b, 1)
        return positives[shift, 1].astype(np.int32)

    def batch(self, positives: np.ndarray, rng: np.random.Generator, batch_size: int) -> LinkSeeds:
        """The link batch of ``positives`` (int32 ``[b, 2]``, ``b <= batch_size``) with negatives
        from ``rng``, padded for a batch of ``batch_size`` positives."""
        k = int(self.neg_ratio)
        b = positives.shape[0]
        tails = self.tails(positives, rng)
        heads = np.repeat(positives[:, :1], k, axis=1)
        negatives = np.stack([heads, tails], axis=-1).reshape(-1, 2)
        pairs = np.concatenate([positives, negatives]).astype(np.int32)
        ids, slots = np.unique(pairs, return_inverse=True)
        slots = slots.reshape(-1, 2).astype(np.int32)
        dummy = max_seeds(batch_size, k)  # the sampler's last seed slot (padded seeds + 1)
        size = max_pairs(batch_size, k)
        out = np.full((size, 2), dummy, np.int32)
        out[: pairs.shape[0]] = slots
        labels = np.zeros(size, np.float32)
        labels[:b] = 1.0
        mask = np.zeros(size, bool)
        mask[: pairs.shape[0]] = True
        targets = np.full((batch_size, 2), -1, np.int32)
        targets[:b] = slots[:b]
        return LinkSeeds(ids.astype(np.int32), out, labels, mask, targets)
