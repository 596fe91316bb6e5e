"""Evaluation of a link predictor: the validation and test edges scored against negatives.

Exact inference only (the encoder must offer :class:`~gns_jax.evaluate.ExactInference`): every
node's embedding from the full neighbourhood, layer by layer, then one logit a pair
(:meth:`gns_jax.models.LinkPredictor.score`). As OGB does, the validation edges are scored on the
training graph (validation and test edges absent) and the test edges on the graph with the
validation edges present (the test edges absent); so a test costs one more full inference.

Per split: ``accuracy`` (the pair's decision at probability 0.5, positives and negatives),
``roc_auc`` and ``average_precision`` of the positives against the split's negatives, and
``mrr`` and ``hits@K`` of each positive ranked against its own fixed ``rank_negatives``
(:func:`gns_jax.metrics.mrr`, :func:`gns_jax.metrics.hits_at_k`; OGB's tie rule).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from gns_jax.data import Dataset
from gns_jax.evaluate import Evaluator, FullGraph, _merge, full_inference, in_eval_mode
from gns_jax.features import SparseFeatures
from gns_jax.meters import TransferMeter
from gns_jax.metrics import average_precision, hits_at_k, mrr
from gns_jax.tasks import Task

__all__ = ["LinkEvaluator", "node_embeddings", "score_pairs"]

PAIR_CHUNK = 1 << 16  # pairs scored per call


@functools.partial(jax.jit, static_argnums=0)
def _score(graphdef, state, h, pairs):
    return _merge(graphdef, state).score(h, pairs)


def score_pairs(graphdef: nnx.GraphDef, state, h: jax.Array, pairs: np.ndarray) -> np.ndarray:
    """float32 ``[M]`` logits of the node pairs ``pairs`` (``[M, 2]``) from the embeddings
    ``h`` (``[N, D]``), in chunks of one static size (one compilation)."""
    pairs = np.asarray(pairs, np.int32).reshape(-1, 2)
    out = np.empty(pairs.shape[0], np.float32)
    for start in range(0, pairs.shape[0], PAIR_CHUNK):
        chunk = pairs[start : start + PAIR_CHUNK]
        padded = np.zeros((PAIR_CHUNK, 2), np.int32)
        padded[: chunk.shape[0]] = chunk
        logits = _score(graphdef, state, h, jnp.asarray(padded))
        out[start : start + chunk.shape[0]] = np.asarray(logits)[: chunk.shape[0]]
    return out


def node_embeddings(evaluator: Evaluator, graphdef: nnx.GraphDef, state, graph=None) -> jax.Array:
    """``[N, D]`` every node's output by exact inference (in evaluation mode) over ``graph``
    (default: the evaluator's), from the features an exact :class:`Evaluator` holds."""
    graphdef = in_eval_mode(graphdef, state)
    model = _merge(graphdef, state)
    x = evaluator.x
    if isinstance(x, SparseFeatures) and not getattr(model, "sparse_inputs", False):
        x = jax.jit(SparseFeatures.dense)(x)
    graph = evaluator.graph if graph is None else graph
    return full_inference(graphdef, state, x, graph, evaluator.meter)


def _metrics(pos: np.ndarray, neg: np.ndarray, ranked: np.ndarray, task: Task) -> dict:
    labels = np.r_[np.ones(pos.size, bool), np.zeros(neg.size, bool)]
    logits = np.r_[pos, neg]
    out = {
        "accuracy": float(np.mean((logits > 0) == labels)),
        "roc_auc": _roc_auc(logits, labels),
        "average_precision": average_precision(logits, labels),
        "mrr": mrr(pos, ranked),
        f"hits@{task.hits_k}": hits_at_k(pos, ranked, task.hits_k),
    }
    return out


def _roc_auc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    from gns_jax.metrics import roc_auc

    labels = positive.astype(np.int64)
    return roc_auc(np.stack([-scores, scores], 1).astype(np.float32), labels)


class LinkEvaluator:
    """Scores of a link predictor on an edge split's validation and test edges.

    Args:
      dataset: the dataset (its full graph).
      split: the :class:`~gns_jax.links.EdgeSplit` (positives, negatives, ranking negatives).
      features: the feature matrix the model reads (as trained).
      task: the ``link`` task (its ``hits_k``).
      meter: counts what crosses host -> device (tag ``"eval"``).
    """

    mode = "exact"

    def __init__(self, dataset: Dataset, split, features: np.ndarray, task: Task,
                 meter: TransferMeter | None = None):  # fmt: skip
        self.task, self.split = task, split
        self.meter = meter or TransferMeter()
        train = dataclasses.replace(dataset, graph=split.train_graph(dataset.graph))
        # the features on the device (dense, sparse or streamed) as node evaluation holds them
        self._nodes = Evaluator(train, features, mode="exact", meter=self.meter, task=task)
        test = FullGraph.from_graph(split.test_graph(dataset.graph), self.meter)
        self.graphs = {"val": self._nodes.graph, "test": test}

    def embeddings(self, graphdef: nnx.GraphDef, state, which: str = "test") -> jax.Array:
        """``[N, D]`` embeddings of every node by exact inference on the ``which`` graph
        (``val``: the training graph; ``test``: validation edges present), in evaluation mode."""
        return node_embeddings(self._nodes, graphdef, state, self.graphs[which])

    def scores(self, graphdef: nnx.GraphDef, state, names=None) -> dict:
        """``{"train": None, "val": {metric: value}, "test": {...}}`` (module docs)."""
        split = self.split
        out: dict = {"train": None}
        eval_graphdef = in_eval_mode(graphdef, state)
        for which in ("val", "test"):
            h = self.embeddings(graphdef, state, which)
            pos_pairs = getattr(split, f"{which}_pos")
            neg_pairs = getattr(split, f"{which}_neg")
            ranked = getattr(split, f"{which}_rank_neg")  # [M, K] tails of (u, v')
            pos = score_pairs(eval_graphdef, state, h, pos_pairs)
            neg = score_pairs(eval_graphdef, state, h, neg_pairs)
            heads = np.repeat(pos_pairs[:, :1], ranked.shape[1], axis=1)
            tails = np.stack([heads, ranked], -1).reshape(-1, 2)
            rank = score_pairs(eval_graphdef, state, h, tails).reshape(ranked.shape)
            out[which] = _metrics(pos, neg, rank, self.task)
        return out
