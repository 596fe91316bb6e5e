"""The field's metrics of node classification, from probabilities. Host-side, NumPy only.

Every metric reads the float32 probabilities that :func:`gns_jax.predict` returns: for a class
task ``[n, C]`` (softmax of the logits) against integer labels ``[n]``:

* ``accuracy``: the share of nodes whose most probable class is their label;
* ``f1_micro``: F1 over all nodes' decisions pooled (equal to accuracy for one label a node);
* ``f1_macro``: the unweighted mean over classes of each class's F1 (a class that is neither
  predicted nor present scores 0, as scikit-learn's ``zero_division=0``);
* ``roc_auc``: for two classes, the probability that a random positive node (label 1) scores
  above a random negative one, ties counting one half (the Mann-Whitney statistic of
  ``prob[:, 1]``); for more classes, the mean over classes of that statistic one class against
  the rest, over the classes present and absent in the labels. None when it is undefined (one
  label only).

For a multi-label task, probabilities ``[n, L]`` (a sigmoid a label) against a 0/1 matrix
``[n, L]``, with a label predicted when its probability exceeds 0.5 (scikit-learn's
definitions for multi-label indicator matrices):

* ``accuracy``: subset accuracy, the share of nodes whose every label is right;
* ``f1_micro``: F1 of all (node, label) decisions pooled: ``2 TP / (2 TP + FP + FN)`` (the GNS
  paper's metric for Yelp and Amazon);
* ``f1_macro``: the mean over labels of each label's F1 (0 where it has no TP, FP or FN);
* ``roc_auc``: the mean over labels of each label's ROC-AUC (labels with one value skipped).

The default metric that picks the best epoch is ``roc_auc`` for a binary task (the heterophily
benchmarks' choice, Platonov et al., ICLR 2023: a 22 % positive class trains at the majority
rate and still reads 78 % accuracy), ``f1_micro`` for a multi-label one and ``accuracy``
otherwise.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "METRICS",
    "accuracy",
    "average_precision",
    "default_metric",
    "f1_macro",
    "f1_micro",
    "hits_at_k",
    "mrr",
    "roc_auc",
    "score",
    "task_metrics",
]

METRICS = ("accuracy", "f1_micro", "f1_macro", "roc_auc")


def accuracy(prob: np.ndarray, labels: np.ndarray) -> float | None:
    if labels.shape[0] == 0:
        return None
    if labels.ndim == 2:  # subset accuracy
        return float(np.mean(np.all((prob > 0.5) == (labels > 0), axis=1)))
    return float(np.mean(np.argmax(prob, -1) == labels))


def _f1_per_class(pred: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
    tp = np.bincount(labels[pred == labels], minlength=num_classes).astype(np.float64)
    predicted = np.bincount(pred, minlength=num_classes).astype(np.float64)
    actual = np.bincount(labels, minlength=num_classes).astype(np.float64)
    denominator = predicted + actual
    return np.divide(2 * tp, denominator, out=np.zeros(num_classes), where=denominator > 0)


def _f1_per_label(pred: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per label (column) true positives, false positives and false negatives."""
    truth = labels > 0
    tp = np.sum(pred & truth, axis=0, dtype=np.float64)
    fp = np.sum(pred & ~truth, axis=0, dtype=np.float64)
    fn = np.sum(~pred & truth, axis=0, dtype=np.float64)
    return tp, fp, fn


def f1_micro(prob: np.ndarray, labels: np.ndarray) -> float | None:
    """Pooled F1; with one label a node, pooled precision = recall = accuracy."""
    if labels.ndim == 1 or labels.shape[0] == 0:
        return accuracy(prob, labels)
    tp, fp, fn = (v.sum() for v in _f1_per_label(prob > 0.5, labels))
    return float(2 * tp / (2 * tp + fp + fn)) if tp + fp + fn else 0.0


def f1_macro(prob: np.ndarray, labels: np.ndarray) -> float | None:
    if labels.shape[0] == 0:
        return None
    if labels.ndim == 2:
        tp, fp, fn = _f1_per_label(prob > 0.5, labels)
        denominator = 2 * tp + fp + fn
        per = np.divide(2 * tp, denominator, out=np.zeros_like(tp), where=denominator > 0)
        return float(np.mean(per))
    return float(np.mean(_f1_per_class(np.argmax(prob, -1), labels, prob.shape[1])))


def _auc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """Mann-Whitney: P(score of a positive > score of a negative), ties one half."""
    n_pos = int(np.count_nonzero(positive))
    n_neg = positive.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(scores.size, dtype=np.float64)
    ordered = scores[order]
    # average ranks over ties (1-based)
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], ordered.size]
    average = (starts + ends + 1) / 2.0
    ranks[order] = np.repeat(average, ends - starts)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def average_precision(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """The area under the precision-recall curve as a step sum,
    ``sum_k (R_k - R_{k-1}) P_k`` over the distinct score thresholds, highest first (tied scores
    form one threshold): scikit-learn's ``average_precision_score``. None without positives.
    Not among :data:`METRICS` (no node task reports it); a building block for ranking tasks."""
    scores = np.asarray(scores, dtype=np.float64).ravel()
    positive = np.asarray(positive, dtype=bool).ravel()
    n_pos = int(np.count_nonzero(positive))
    if n_pos == 0:
        return None
    order = np.argsort(-scores, kind="stable")
    ordered, hits = scores[order], positive[order]
    last = np.r_[ordered[1:] != ordered[:-1], True]  # the last entry of each tied group
    tp = np.cumsum(hits)[last]
    seen = np.flatnonzero(last) + 1
    recall = tp / n_pos
    precision = tp / seen
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def _link_ranks(pos_scores: np.ndarray, neg_scores: np.ndarray) -> np.ndarray:
    """float64 ``[M]``: the rank of each positive among its own negatives, OGB's tie rule
    ``1 + (#{neg > pos} + #{neg >= pos}) / 2`` (a tie counts one half)."""
    pos = np.asarray(pos_scores, dtype=np.float64)
    neg = np.asarray(neg_scores, dtype=np.float64)
    if pos.ndim != 1 or neg.ndim != 2 or neg.shape[0] != pos.shape[0]:
        raise ValueError(
            f"positive scores {pos.shape} need negative scores [M, K], got {neg.shape}"
        )
    above = np.count_nonzero(neg > pos[:, None], axis=1)
    at_least = np.count_nonzero(neg >= pos[:, None], axis=1)
    return 1.0 + 0.5 * (above + at_least)


def hits_at_k(pos_scores: np.ndarray, neg_scores: np.ndarray, k: int) -> float | None:
    """Hits@K of link prediction: the share of positives ranked within the top ``k`` among their
    own negatives (OGB's ranking protocol, ogbl-citation2: a positive's rank is
    ``1 + (#{neg > pos} + #{neg >= pos}) / 2``, so a tie with one negative ranks 1.5).

    Args:
      pos_scores: ``[M]``, the score of each positive pair.
      neg_scores: ``[M, K]``, the scores of each positive's own negatives.
      k: the cut-off, a positive integer.

    Returns:
      ``mean(rank <= k)``; None without positives.
    """
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"hits_at_k: k must be a positive integer, got {k!r}")
    ranks = _link_ranks(pos_scores, neg_scores)
    return float(np.mean(ranks <= k)) if ranks.size else None


def mrr(pos_scores: np.ndarray, neg_scores: np.ndarray) -> float | None:
    """Mean reciprocal rank of link prediction: ``mean(1 / rank)``, each positive ranked among
    its own negatives with OGB's tie rule (:func:`hits_at_k`).

    Args:
      pos_scores: ``[M]``, the score of each positive pair.
      neg_scores: ``[M, K]``, the scores of each positive's own negatives.

    Returns:
      The mean reciprocal rank; None without positives.
    """
    ranks = _link_ranks(pos_scores, neg_scores)
    return float(np.mean(1.0 / ranks)) if ranks.size else None


def roc_auc(prob: np.ndarray, labels: np.ndarray) -> float | None:
    if labels.shape[0] == 0:
        return None
    if labels.ndim == 2:
        columns = range(labels.shape[1])
        per_label = [_auc(prob[:, j].astype(np.float64), labels[:, j] > 0) for j in columns]
        defined = [a for a in per_label if a is not None]
        return float(np.mean(defined)) if defined else None
    if prob.shape[1] == 2:
        return _auc(prob[:, 1].astype(np.float64), labels == 1)
    per_class = [_auc(prob[:, c].astype(np.float64), labels == c) for c in range(prob.shape[1])]
    defined = [a for a in per_class if a is not None]
    return float(np.mean(defined)) if defined else None


_FUNCTIONS = {"accuracy": accuracy, "f1_micro": f1_micro, "f1_macro": f1_macro, "roc_auc": roc_auc}


def task_metrics(task: str | int) -> tuple[str, ...]:
    """The metrics a run reports: all four, for every task (``multiclass``, ``binary``,
    ``multilabel``; a number of classes is read as the class task it makes)."""
    del task
    return METRICS


def default_metric(task: str | int) -> str:
    """``roc_auc`` for a binary task, ``f1_micro`` for a multi-label one, ``accuracy``
    otherwise; ``task`` may be a number of classes (2: binary)."""
    if isinstance(task, int | np.integer):
        task = "binary" if task == 2 else "multiclass"
    return {"binary": "roc_auc", "multilabel": "f1_micro"}.get(task, "accuracy")


def score(
    prob: np.ndarray, labels: np.ndarray, names: tuple[str, ...] = METRICS
) -> dict[str, float | None]:
    """``{name: value}`` for each metric in ``names`` (None where undefined)."""
    prob = np.asarray(prob, dtype=np.float32)
    labels = np.asarray(labels, dtype=np.int64)
    if prob.ndim != 2 or prob.shape[0] != labels.shape[0]:
        raise ValueError(f"probabilities {prob.shape} for {labels.shape[0]} labels")
    if labels.ndim == 2 and labels.shape != prob.shape:
        raise ValueError(f"probabilities {prob.shape} for a label matrix {labels.shape}")
    return {name: _FUNCTIONS[name](prob, labels) for name in names}
