"""Multi-label tasks end to end (labels, loss, probabilities, metrics, predict), task detection
and overrides, and the loss hook of ``fit``."""

import dataclasses

import numpy as np
import pytest

from gns_jax.data import synthetic
from gns_jax.data.dataset import check_label_matrix
from gns_jax.errors import ConfigError, DatasetError
from gns_jax.metrics import score
from gns_jax.tasks import Task, resolve_task, sigmoid_loss
from gns_jax.train import fit, predict


def _reference_multilabel(prob, labels):
    """scikit-learn's definitions, written out: subset accuracy, pooled and per-label F1,
    the mean of per-label AUCs over every (positive, negative) pair."""
    pred, truth = prob > 0.5, labels > 0
    tp, fp, fn = (pred & truth).sum(), (pred & ~truth).sum(), (~pred & truth).sum()
    per_f1 = []
    aucs = []
    for j in range(labels.shape[1]):
        t, p = truth[:, j], pred[:, j]
        a, b, c = (p & t).sum(), (p & ~t).sum(), (~p & t).sum()
        per_f1.append(0.0 if a + b + c == 0 else 2 * a / (2 * a + b + c))
        pos, neg = prob[t, j], prob[~t, j]
        if pos.size and neg.size:
            wins = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
            aucs.append(float(wins.mean()))
    return {
        "accuracy": float(np.mean(np.all(pred == truth, axis=1))),
        "f1_micro": 0.0 if tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn),
        "f1_macro": float(np.mean(per_f1)),
        "roc_auc": float(np.mean(aucs)) if aucs else None,
    }


@pytest.mark.parametrize("seed", range(6))
def test_multilabel_metrics_equal_their_reference(seed):
    rng = np.random.default_rng(seed)
    n, labels_count = int(rng.integers(4, 50)), int(rng.integers(1, 6))
    prob = rng.integers(0, 5, size=(n, labels_count)) / 4.0  # a coarse grid: ties, and 0.5
    labels = rng.integers(0, 2, size=(n, labels_count))
    got, expected = score(prob.astype(np.float32), labels), _reference_multilabel(prob, labels)
    for name, value in expected.items():
        assert got[name] == pytest.approx(value), name


def test_probability_one_half_is_not_a_positive_decision():
    prob = np.array([[0.5, 0.75]], np.float32)
    assert score(prob, np.array([[0, 1]]))["accuracy"] == 1.0
    assert score(prob, np.array([[1, 1]]))["accuracy"] == 0.0


def test_label_matrices_are_validated():
    good = np.array([[1, 0], [0, 1], [-1, -1]])
    assert check_label_matrix(good, "x", 3).dtype == np.int8
    with pytest.raises(DatasetError, match="entries must be 0 or 1.*found 2 at node 1, label 0"):
        check_label_matrix(np.array([[1, 0], [2, 1]]), "x", 2)
    with pytest.raises(DatasetError, match="whole row of -1.*node 0, label 1"):
        check_label_matrix(np.array([[-1, 0], [1, 1], [0, 0]]), "x", 3)
    with pytest.raises(DatasetError, match=r"1 of 2 labels are the same on every .*\(1\)"):
        check_label_matrix(np.array([[1, 1], [0, 1]]), "x", 2)
    with pytest.raises(DatasetError, match=r"shape \[num_nodes=3, L >= 1\]"):
        check_label_matrix(good[:2], "x", 3)


@pytest.fixture(scope="module")
def multilabel():
    """600 nodes, 5 labels: each node its class's label and, with probability 0.3, each other;
    40 % of the nodes in the training split."""
    return synthetic(
        np.random.default_rng(0), nodes=600, degree=8, features=16, classes=5, signal=1.5,
        multilabel=0.3, train=0.4, val=0.1,
    )  # fmt: skip


def test_the_generator_makes_a_multilabel_task(multilabel):
    assert multilabel.task == "multilabel" and multilabel.labels.shape == (600, 5)
    per_node = multilabel.labels.sum(1)
    assert per_node.min() >= 1 and 1.8 < per_node.mean() < 2.4  # 1 + 4 x 0.3 = 2.2
    single = synthetic(
        np.random.default_rng(0), nodes=600, degree=8, features=16, classes=5, signal=1.5,
        train=0.4, val=0.1,
    )  # fmt: skip
    # the graph and the split are those of the single-label graph; the class's label is set
    np.testing.assert_array_equal(multilabel.graph.indices, single.graph.indices)
    np.testing.assert_array_equal(multilabel.val_idx, single.val_idx)
    assert np.all(multilabel.labels[np.arange(600), single.labels] == 1)


def test_tasks_are_detected_and_overridden(multilabel, tiny_dataset):
    assert Task(tiny_dataset.task).kind == "multiclass"
    task, same = resolve_task("auto", multilabel)
    assert task.kind == "multilabel" and same is multilabel
    task, onehot = resolve_task("multilabel", tiny_dataset)  # one-vs-rest on the classes
    assert onehot.labels.shape == (600, 4)
    np.testing.assert_array_equal(onehot.labels.argmax(1), tiny_dataset.labels)
    assert np.all(onehot.labels.sum(1) == 1)
    task, back = resolve_task("multiclass", onehot)
    np.testing.assert_array_equal(back.labels, tiny_dataset.labels)
    with pytest.raises(ConfigError, match="task: binary needs two classes; .* has 4"):
        resolve_task("binary", tiny_dataset)
    with pytest.raises(ConfigError, match="task: multiclass needs one label a node"):
        resolve_task("multiclass", multilabel)
    with pytest.raises(ConfigError, match="'accuracy', 'f1_micro'|f1_micro"):
        Task("multilabel").metric("nonsense")


def _prior_f1(dataset):
    """F1-micro of the best label-blind guess: every label its training frequency > 0.5 (none
    here), or all positive; the larger of the two."""
    test = dataset.labels[dataset.test_idx]
    rate = dataset.labels[dataset.train_idx].mean(0)
    guess = np.broadcast_to(rate, test.shape).astype(np.float32)
    all_positive = np.ones_like(guess)
    return max(score(guess, test)["f1_micro"], score(all_positive, test)["f1_micro"])


@pytest.mark.slow  # two fits: 25 s
def test_a_multilabel_run_learns_and_scores_from_its_probabilities(multilabel, tiny_config):
    config = dataclasses.replace(tiny_config, epochs=5, batch_size=64)
    result = fit(multilabel, config, quiet=True)
    m = result.metrics
    assert m["task"] == "multilabel" and m["metric"] == "f1_micro"
    assert m["compilations"] == 1
    baseline = _prior_f1(multilabel)  # 0.59 here: all positive
    assert m["test_f1_micro"] > baseline + 0.1, (m["test_f1_micro"], baseline)
    # predict's probabilities: a sigmoid a label; the JSON's metrics are computed from them.
    proba = predict(result.model, multilabel, proba=True, config=config)
    assert proba.shape == (600, 5) and proba.dtype == np.float32
    assert np.all((proba > 0) & (proba < 1)) and not np.allclose(proba.sum(1), 1.0)
    decided = predict(result.model, multilabel, config=config)
    np.testing.assert_array_equal(decided, (proba > 0.5).astype(np.int8))
    test = multilabel.test_idx
    got = score(proba[test], multilabel.labels[test])
    for name in ("accuracy", "f1_micro", "f1_macro", "roc_auc"):
        assert got[name] == pytest.approx(m[f"test_{name}"], abs=1e-6), name
    # The defect: a loss hook that trains against the flipped labels scores below the prior.
    flipped = fit(
        multilabel, config, quiet=True, loss=lambda logits, y: sigmoid_loss(logits, 1 - y)
    )
    assert flipped.metrics["test_f1_micro"] < baseline


def test_a_saved_folder_keeps_the_label_matrix(multilabel, tmp_path):
    from gns_jax.data import load_dataset, save_dataset

    save_dataset(multilabel, tmp_path / "saved")
    back = load_dataset(str(tmp_path / "saved"))
    assert back.task == "multilabel" and back.labels.dtype == np.int8
    np.testing.assert_array_equal(back.labels, multilabel.labels)
