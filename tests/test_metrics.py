"""The field's metrics against direct reference implementations on random inputs, ties
included, and the metric that picks the best epoch."""

import dataclasses
import itertools

import numpy as np
import pytest

from gns_jax.data import synthetic
from gns_jax.metrics import default_metric, f1_macro, f1_micro, roc_auc, score
from gns_jax.train import fit


def _reference_auc(scores, positive):
    """Every (positive, negative) pair: 1 if the positive scores higher, 1/2 on a tie."""
    pos, neg = scores[positive], scores[~positive]
    if pos.size == 0 or neg.size == 0:
        return None
    wins = [(1.0 if p > n else 0.5 if p == n else 0.0) for p, n in itertools.product(pos, neg)]
    return float(np.mean(wins))


def _reference_f1(pred, labels, c):
    tp = np.sum((pred == c) & (labels == c))
    fp = np.sum((pred == c) & (labels != c))
    fn = np.sum((pred != c) & (labels == c))
    return 0.0 if tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)


def _probabilities(rng, n, classes, levels):
    """Probabilities on a coarse grid (many ties), rows summing to 1."""
    raw = rng.integers(1, levels, size=(n, classes)).astype(np.float32)
    return raw / raw.sum(1, keepdims=True)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("classes", [2, 3, 5])
def test_metrics_equal_their_reference_implementations(seed, classes):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 60))
    prob = _probabilities(rng, n, classes, levels=4)
    labels = rng.integers(0, classes, size=n)
    pred = prob.argmax(1)
    got = score(prob, labels)
    assert got["accuracy"] == pytest.approx(np.mean(pred == labels))
    assert got["f1_micro"] == pytest.approx(np.mean(pred == labels))
    expected = np.mean([_reference_f1(pred, labels, c) for c in range(classes)])
    assert got["f1_macro"] == pytest.approx(expected)
    if classes == 2:
        expected_auc = _reference_auc(prob[:, 1], labels == 1)
    else:
        per = [_reference_auc(prob[:, c], labels == c) for c in range(classes)]
        per = [a for a in per if a is not None]
        expected_auc = float(np.mean(per)) if per else None
    assert got["roc_auc"] == pytest.approx(expected_auc)


def test_auc_counts_ties_one_half_and_is_undefined_with_one_label():
    prob = np.array([[0.5, 0.5]] * 4, np.float32)  # every score tied
    assert roc_auc(prob, np.array([0, 1, 0, 1])) == 0.5  # a tie counted as 0 would give 0
    perfect = np.array([[0.9, 0.1], [0.8, 0.2], [0.2, 0.8], [0.1, 0.9]], np.float32)
    assert roc_auc(perfect, np.array([0, 0, 1, 1])) == 1.0
    assert roc_auc(perfect, np.array([1, 1, 0, 0])) == 0.0
    assert roc_auc(perfect, np.array([1, 1, 1, 1])) is None


def test_a_majority_class_predictor_reads_high_accuracy_and_chance_auc():
    labels = np.array([0] * 78 + [1] * 22)  # Tolokers' share of positives
    prob = np.tile(np.array([[0.8, 0.2]], np.float32), (100, 1))
    got = score(prob, labels)
    assert got["accuracy"] == 0.78 and got["roc_auc"] == 0.5
    assert got["f1_macro"] == pytest.approx((2 * 78 / (2 * 78 + 22) + 0.0) / 2)
    assert f1_micro(prob, labels) == 0.78 and f1_macro(prob, labels) < 0.5


def test_default_metric_is_roc_auc_for_binary_tasks():
    assert default_metric(2) == "roc_auc" and default_metric(3) == "accuracy"


@pytest.mark.integration
def test_a_binary_run_reports_every_metric_and_picks_its_best_epoch_by_roc_auc(tiny_config):
    data = synthetic(np.random.default_rng(1), nodes=400, degree=6, features=8, classes=2)
    result = fit(data, dataclasses.replace(tiny_config, epochs=4), quiet=True).metrics
    assert result["metric"] == "roc_auc"
    epochs = result["epochs"]
    for e in epochs:
        assert {"val_roc_auc", "val_f1_macro", "test_roc_auc", "test_f1_micro"} <= set(e)
    aucs = [e["val_roc_auc"] for e in epochs]
    best = int(np.argmax(aucs))  # the earliest of equal values
    assert result["best_epoch"] == epochs[best]["epoch"]
    assert result["test_roc_auc"] == epochs[best]["test_roc_auc"]
    assert result["test_accuracy"] == epochs[best]["test_accuracy"]


@pytest.mark.slow
def test_metric_accuracy_picks_the_best_epoch_by_accuracy(tiny_config):
    data = synthetic(np.random.default_rng(1), nodes=400, degree=6, features=8, classes=2)
    by_accuracy = fit(
        data, dataclasses.replace(tiny_config, epochs=4, metric="accuracy"), quiet=True
    ).metrics
    assert by_accuracy["metric"] == "accuracy"
    accuracies = [e["val_accuracy"] for e in by_accuracy["epochs"]]
    assert by_accuracy["best_epoch"] == by_accuracy["epochs"][int(np.argmax(accuracies))]["epoch"]
