"""Every metric of :mod:`gns_jax.metrics` against scikit-learn's implementation (a test
dependency only; the runtime code stays NumPy), on random inputs over fixed seeds and on inputs
with tied scores and edge cases.

The project's definitions (``gns_jax/metrics.py``, ``docs/results.md``) are scikit-learn's, read
as follows:

* a class task compares the argmax of ``prob`` with the labels; ``f1_micro`` and ``f1_macro``
  are ``f1_score(..., labels=range(C), zero_division=0)``: every one of the model's ``C`` classes
  counts in the macro mean, a class that is neither predicted nor present scoring 0 (sklearn's
  default label set, the union of the classes in the labels and the predictions, would leave
  such a class out: pinned in
  ``test_f1_macro_counts_every_class_of_the_model_not_sklearns_default_label_set``);
* a multi-label task predicts a label when its probability exceeds 0.5: ``accuracy`` is
  ``accuracy_score`` (subset accuracy) and the F1s are ``f1_score(average="micro"/"macro",
  zero_division=0)`` of that indicator matrix;
* ``roc_auc`` is ``roc_auc_score`` of ``prob[:, 1]`` for two classes, and above two classes (or
  for multi-label) the mean of ``roc_auc_score(..., multi_class="ovr", average=None)`` (or of
  the per-label scores) over the classes (labels) where it is defined. The one adaptation:
  sklearn scores an undefined class or label NaN (one value in the column: a class absent from
  the labels, a label always 0 or always 1) and its macro mean turns NaN, while the project skips
  it, so the reference takes ``np.nanmean``; where nothing is defined the project reads None
  and sklearn NaN.

The probabilities are compared as :func:`gns_jax.metrics.score` reads them (float32), so that
both sides see the same ties. There is no average precision among the project's metrics
(``metrics.METRICS``), so none is compared.
"""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import UndefinedMetricWarning
from sklearn.metrics import accuracy_score, f1_score, roc_auc_score

from gns_jax import metrics
from gns_jax.metrics import METRICS, score

RTOL = 1e-12


def _nanmean_or_none(values):
    values = np.asarray(values, dtype=np.float64)
    return None if np.all(np.isnan(values)) else float(np.nanmean(values))


def _sklearn(prob, labels):
    """The project's metrics computed by scikit-learn (NaN read as None, see the docstring)."""
    prob = np.asarray(prob, dtype=np.float32).astype(np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        if labels.ndim == 2:
            truth, pred = labels > 0, prob > 0.5
            auc = _nanmean_or_none(roc_auc_score(truth, prob, average=None))
            return {
                "accuracy": accuracy_score(truth, pred),
                "f1_micro": f1_score(truth, pred, average="micro", zero_division=0),
                "f1_macro": f1_score(truth, pred, average="macro", zero_division=0),
                "roc_auc": auc,
            }
        classes = list(range(prob.shape[1]))
        pred = prob.argmax(1)
        if len(classes) == 2:
            auc = _nanmean_or_none([roc_auc_score(labels == 1, prob[:, 1])])
        else:
            per_class = roc_auc_score(labels, prob, multi_class="ovr", labels=classes, average=None)
            auc = _nanmean_or_none(per_class)
            if not np.isnan(per_class).any():  # every class defined: sklearn's own macro mean
                macro = roc_auc_score(labels, prob, multi_class="ovr", labels=classes)
                assert macro == pytest.approx(auc, rel=RTOL)
        f1 = {"labels": classes, "zero_division": 0}
        return {
            "accuracy": accuracy_score(labels, pred),
            "f1_micro": f1_score(labels, pred, average="micro", **f1),
            "f1_macro": f1_score(labels, pred, average="macro", **f1),
            "roc_auc": auc,
        }


def _mismatches(prob, labels):
    """``{name: (project, sklearn)}`` for each metric where the two disagree."""
    got, expected = score(prob, labels), _sklearn(prob, labels)
    assert set(got) == set(expected) == set(METRICS)
    out = {}
    for name in METRICS:
        a, b = got[name], expected[name]
        if a is None or b is None:
            same = a is None and b is None
        else:
            same = a == pytest.approx(float(b), rel=RTOL, abs=1e-15)
        if not same:
            out[name] = (a, b)
    return out


def _softmax(logits):
    e = np.exp(logits - logits.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True)).astype(np.float32)


def _class_inputs(seed, classes):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 200))
    labels = rng.integers(0, classes, size=n)
    logits = rng.normal(size=(n, classes)) + 1.5 * np.eye(classes)[labels] * rng.random((n, 1))
    return _softmax(logits), labels


def _multilabel_inputs(seed, width):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 200))
    rate = rng.uniform(0.1, 0.6, size=width)  # imbalanced labels, each its own rate
    labels = (rng.random((n, width)) < rate).astype(np.int64)
    logits = rng.normal(size=(n, width)) + 2.0 * (labels - 0.5) * rng.random((n, 1))
    return (1 / (1 + np.exp(-logits))).astype(np.float32), labels


def _tied_class_inputs(seed, classes):
    """Few distinct probability rows (every column full of ties), rows summing to 1."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 200))
    if classes == 2:  # scores rounded to one decimal
        p1 = np.round(rng.random(n), 1)
        prob = np.stack([1 - p1, p1], 1).astype(np.float32)
    else:
        templates = rng.dirichlet(np.ones(classes), size=3).astype(np.float32)
        prob = templates[rng.integers(0, 3, size=n)]
    return prob, rng.integers(0, classes, size=n)


# ---------------------------------------------------------------- random inputs


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("classes", [2, 3, 5, 7])
def test_class_task_metrics_equal_sklearn_on_random_inputs(seed, classes):
    assert _mismatches(*_class_inputs(seed, classes)) == {}


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("width", [2, 4, 6])
def test_multilabel_metrics_equal_sklearn_on_random_inputs(seed, width):
    assert _mismatches(*_multilabel_inputs(seed, width)) == {}


# ---------------------------------------------------------------- ties


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("classes", [2, 3, 5])
def test_class_task_metrics_equal_sklearn_on_tied_scores(seed, classes):
    prob, labels = _tied_class_inputs(seed, classes)
    assert _mismatches(prob, labels) == {}


@pytest.mark.parametrize("seed", range(5))
def test_multilabel_metrics_equal_sklearn_on_scores_rounded_to_one_decimal(seed):
    prob, labels = _multilabel_inputs(seed, 4)
    prob = np.round(prob, 1)  # ties, and probabilities of exactly 0.5 (predicted negative)
    assert np.any(prob == np.float32(0.5))
    assert _mismatches(prob, labels) == {}


@pytest.mark.parametrize("classes", [2, 4])
def test_constant_scores_read_chance_auc_and_leave_classes_unpredicted(classes):
    labels = np.arange(40) % classes
    prob = np.full((40, classes), 1 / classes, np.float32)  # argmax: class 0 for every node
    assert _mismatches(prob, labels) == {}
    got = score(prob, labels)
    assert got["roc_auc"] == 0.5 and got["accuracy"] == pytest.approx(1 / classes)
    multilabel = np.full((40, 3), 0.7, np.float32)
    assert _mismatches(multilabel, (np.arange(120).reshape(40, 3) % 3 == 0).astype(int)) == {}


# ---------------------------------------------------------------- edge cases


def test_a_class_absent_from_the_predictions_scores_f1_zero_as_sklearn():
    labels = np.array([0, 0, 1, 1, 2, 2, 2])
    prob = _softmax(np.where(np.arange(3) == 2, -5.0, 0.0) + np.eye(3)[[0, 0, 1, 0, 1, 1, 0]])
    assert not np.any(prob.argmax(1) == 2)  # class 2 is never predicted
    assert _mismatches(prob, labels) == {}


def test_a_class_absent_from_the_labels_is_skipped_by_roc_auc():
    """sklearn scores the absent class NaN (its macro mean: NaN); the project's mean skips it."""
    prob, labels = _class_inputs(3, 4)
    labels = np.where(labels == 3, 0, labels)  # class 3 never a label
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        per_class = roc_auc_score(
            labels, prob.astype(np.float64), multi_class="ovr", labels=[0, 1, 2, 3], average=None
        )
    assert np.isnan(per_class[3]) and not np.isnan(per_class[:3]).any()
    assert score(prob, labels)["roc_auc"] == pytest.approx(per_class[:3].mean(), rel=RTOL)
    assert _mismatches(prob, labels) == {}


def test_roc_auc_is_none_where_sklearn_reads_nan():
    prob, _ = _class_inputs(0, 2)
    assert _mismatches(prob, np.ones(len(prob), np.int64)) == {}  # binary, one label only
    assert score(prob, np.ones(len(prob), np.int64))["roc_auc"] is None
    prob, labels = _multilabel_inputs(1, 3)
    labels[:, 0], labels[:, 2] = 1, 0  # two labels with one value: skipped
    assert _mismatches(prob, labels) == {}
    labels[:, 1] = 1  # none defined
    assert _mismatches(prob, labels) == {} and score(prob, labels)["roc_auc"] is None


def test_multilabel_with_no_positive_and_no_prediction_reads_f1_zero():
    prob = np.full((10, 3), 0.2, np.float32)
    labels = np.zeros((10, 3), np.int64)
    assert _mismatches(prob, labels) == {}
    got = score(prob, labels)
    assert got["f1_micro"] == got["f1_macro"] == 0.0 and got["accuracy"] == 1.0
    assert got["roc_auc"] is None


def test_empty_input_reads_none_where_sklearn_refuses():
    for prob, labels in [(np.zeros((0, 3)), np.zeros(0)), (np.zeros((0, 2)), np.zeros((0, 2)))]:
        assert score(prob, labels) == dict.fromkeys(METRICS)
    with pytest.raises(ValueError):
        accuracy_score(np.zeros(0), np.zeros(0))


def test_f1_macro_counts_every_class_of_the_model_not_sklearns_default_label_set():
    """Class 2 is neither a label nor predicted: it scores 0 in the project's mean (as
    ``labels=range(C)``), where sklearn's default label set would leave it out."""
    labels = np.array([0, 0, 1, 1, 0])
    prob = np.array([[0.8, 0.1, 0.1]] * 3 + [[0.1, 0.8, 0.1]] * 2, np.float32)
    assert _mismatches(prob, labels) == {}
    got = score(prob, labels)["f1_macro"]
    default = f1_score(labels, prob.argmax(1), average="macro", zero_division=0)
    assert got == pytest.approx(default * 2 / 3, rel=RTOL) and got != pytest.approx(default)


# ---------------------------------------------------------------- the check catches defects


def _auc_ordinal_ranks(scores, positive):
    """A defective ROC-AUC: ordinal ranks (argsort order), ties not averaged."""
    n_pos = int(np.count_nonzero(positive))
    n_neg = positive.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = np.empty(scores.size)
    ranks[np.argsort(scores, kind="stable")] = np.arange(1, scores.size + 1)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


@pytest.mark.parametrize("classes", [2, 3])
def test_the_comparison_catches_an_auc_that_ignores_ties(monkeypatch, classes):
    monkeypatch.setattr(metrics, "_auc", _auc_ordinal_ranks)
    # without ties the defect is invisible: only the tied inputs expose it
    assert _mismatches(*_class_inputs(0, classes)) == {}
    caught = [set(_mismatches(*_tied_class_inputs(seed, classes))) for seed in range(5)]
    assert caught == [{"roc_auc"}] * 5
    constant = np.full((40, classes), 1 / classes, np.float32)
    # imbalanced: on classes of equal sizes the one-vs-rest mean of the defect is exactly 1/2
    labels = np.random.default_rng(0).choice(
        classes, size=40, p={2: [0.7, 0.3], 3: [0.6, 0.3, 0.1]}[classes]
    )
    assert set(_mismatches(constant, labels)) == {"roc_auc"}


def test_the_comparison_catches_macro_f1_computed_as_micro(monkeypatch):
    monkeypatch.setitem(metrics._FUNCTIONS, "f1_macro", metrics.f1_micro)
    labels = np.array([0] * 78 + [1] * 22)  # imbalanced; a majority-class predictor
    prob = np.tile(np.array([[0.8, 0.2]], np.float32), (100, 1))
    assert set(_mismatches(prob, labels)) == {"f1_macro"}
    assert set(_mismatches(*_multilabel_inputs(0, 4))) == {"f1_macro"}
