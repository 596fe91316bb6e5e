"""The tasks: three of node classification and link prediction; their loss, probabilities,
decisions and metrics.

* ``multiclass``: one class a node (int labels ``[N]``); softmax cross-entropy; probabilities
  are the softmax ``[n, C]``; the decision is the most probable class.
* ``binary``: the same with two classes; probabilities ``[n, 2]``, column 1 the positive class.
  Only the metric that picks the best epoch differs (ROC-AUC instead of accuracy).
* ``multilabel``: any number of labels a node (a 0/1 matrix ``[N, L]``, GraphSAINT's Yelp and
  Amazon); sigmoid binary cross-entropy, mean over the labels; probabilities are the sigmoids
  ``[n, L]``; a label is predicted when its probability exceeds 0.5.
* ``link``: link prediction (:mod:`gns_jax.linkbatch`): one logit a node pair, 1 for an edge
  and 0 for a negative; sigmoid binary cross-entropy a pair; the probability is the sigmoid.
  It is never detected: ``--task link`` asks for it.

The task is detected from the labels (:attr:`gns_jax.data.Dataset.task`: a label matrix is
multi-label, two classes binary) and overridable (``--task``, :func:`resolve_task`): a
two-class task can be scored as multi-class; ``multilabel`` on class labels trains one sigmoid
a class (one-vs-rest on the one-hot matrix); a label matrix with exactly one label a node can be
trained as multi-class.

A **loss** (the default of a task, or the one a user passes to :func:`gns_jax.fit`) maps the
logits ``[S, C]`` and labels (``[S]`` or ``[S, L]``) of a batch's seed slots to one loss a seed,
``[S]``; the library averages it over the real seeds (``seed_mask``), so padded slots never
count. Jittable, float32.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from gns_jax.data.dataset import Dataset
from gns_jax.errors import ConfigError

__all__ = [
    "TASKS",
    "LossFn",
    "Task",
    "masked_mean",
    "resolve_task",
    "link_loss",
    "sigmoid_loss",
    "softmax_loss",
]

TASKS = ("multiclass", "binary", "multilabel", "link")

LossFn = Callable[[jax.Array, jax.Array], jax.Array]


def softmax_loss(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Softmax cross-entropy a seed, ``[S]``, for integer labels ``[S]``."""
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels)


def sigmoid_loss(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Sigmoid binary cross-entropy a seed, averaged over its labels, ``[S]``, for 0/1 labels
    ``[S, L]``."""
    return jnp.mean(optax.sigmoid_binary_cross_entropy(logits, labels.astype(logits.dtype)), -1)


def link_loss(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Sigmoid binary cross-entropy a pair, ``[P]``, for logits and 0/1 labels ``[P]``."""
    return optax.sigmoid_binary_cross_entropy(logits, labels.astype(logits.dtype))


def masked_mean(per_seed: jax.Array, mask: jax.Array) -> jax.Array:
    """The mean of ``per_seed`` over the real seed slots (``mask``); 0 for none."""
    weight = mask.astype(per_seed.dtype)
    return jnp.sum(per_seed * weight) / jnp.maximum(weight.sum(), 1.0)


LINK_METRICS = ("accuracy", "roc_auc", "average_precision", "mrr")  # and hits@K


@dataclasses.dataclass(frozen=True)
class Task:
    """A task kind (one of :data:`TASKS`) and what follows from it; ``hits_k``: the K of
    link prediction's Hits@K."""

    kind: str
    hits_k: int = 50

    def __post_init__(self):
        if self.kind not in TASKS:
            raise ConfigError("task", f"one of {', '.join(TASKS)}, got {self.kind!r}")

    @property
    def multilabel(self) -> bool:
        return self.kind == "multilabel"

    @property
    def link(self) -> bool:
        return self.kind == "link"

    @property
    def loss(self) -> LossFn:
        """The task's default loss a seed (a pair for ``link``)."""
        if self.link:
            return link_loss
        return sigmoid_loss if self.multilabel else softmax_loss

    def probabilities(self, logits: jax.Array) -> jax.Array:
        """float32 probabilities from logits: softmax over classes, or a sigmoid a label (a
        pair)."""
        logits = jnp.asarray(logits, jnp.float32)
        if self.multilabel or self.link:
            return jax.nn.sigmoid(logits)
        return jax.nn.softmax(logits, axis=-1)

    def correct(self, logits: jax.Array, labels: jax.Array) -> jax.Array:
        """Whether each seed's (pair's) decision is right, ``[S]`` (multi-label: every label
        right)."""
        if self.link:
            return (logits > 0) == (labels > 0.5)
        if self.multilabel:
            return jnp.all((logits > 0) == (labels > 0), axis=-1)
        return jnp.argmax(logits, -1) == labels

    def decide(self, prob: np.ndarray) -> np.ndarray:
        """Predictions from probabilities: int32 classes ``[n]``, or an int8 0/1 ``[n, L]``
        (``[n]`` for pairs)."""
        if self.multilabel or self.link:
            return (np.asarray(prob) > 0.5).astype(np.int8)
        return np.argmax(prob, -1).astype(np.int32)

    @property
    def metrics(self) -> tuple[str, ...]:
        """The metrics a run of this task reports (:mod:`gns_jax.metrics`); link prediction's:
        accuracy, ROC-AUC, average precision, MRR and ``hits@K``."""
        if self.link:
            return (*LINK_METRICS, f"hits@{self.hits_k}")
        from gns_jax.metrics import task_metrics

        return task_metrics(self.kind)

    @property
    def default_metric(self) -> str:
        """The metric that picks the best epoch when ``--metric auto`` (ROC-AUC for links)."""
        if self.link:
            return "roc_auc"
        from gns_jax.metrics import default_metric

        return default_metric(self.kind)

    def metric(self, name: str) -> str:
        """``name``, or for ``auto`` the task's default; an unsupported one is a ConfigError."""
        chosen = self.default_metric if name == "auto" else name
        if chosen not in self.metrics:
            raise ConfigError(
                "metric",
                f"{chosen!r} is not a metric of a {self.kind} task ({', '.join(self.metrics)})",
            )
        return chosen


def resolve_task(name: str, dataset: Dataset) -> tuple[Task, Dataset]:
    """The task a run trains (``name``: ``auto`` = :attr:`Dataset.task`, or one of
    :data:`TASKS`) and the dataset with its labels in that task's form.

    Raises ConfigError (option ``task``) for an override the labels cannot take: ``binary``
    with more than two classes, or a class task on a label matrix whose labelled rows do not
    each hold exactly one 1."""
    if name == "auto":
        return Task(dataset.task), dataset
    task = Task(name)
    if task.link:  # scores edges: the node labels are not read
        return task, dataset
    if task.multilabel and not dataset.multilabel:
        labels = np.full((dataset.num_nodes, dataset.num_classes), -1, np.int8)
        known = dataset.labels >= 0
        labels[known] = 0
        labels[np.flatnonzero(known), dataset.labels[known]] = 1
        return task, dataclasses.replace(dataset, labels=labels).validate()
    if not task.multilabel and dataset.multilabel:
        known = dataset.labelled()
        rows = dataset.labels[known]
        if not (rows.sum(1) == 1).all():
            raise ConfigError(
                "task",
                f"{name} needs one label a node; {dataset.name} has "
                f"{int(np.count_nonzero(rows.sum(1) != 1))} labelled nodes with none or several",
            )
        labels = np.full(dataset.num_nodes, -1, np.int32)
        labels[known] = np.argmax(rows, 1)
        dataset = dataclasses.replace(dataset, labels=labels).validate()
    if task.kind == "binary" and dataset.num_classes != 2:
        classes = dataset.num_classes
        raise ConfigError("task", f"binary needs two classes; {dataset.name} has {classes}")
    return task, dataset
