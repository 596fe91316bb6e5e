"""gns_jax.metrics.average_precision against scikit-learn's average_precision_score."""

import numpy as np
import pytest

from gns_jax import metrics

sklearn_metrics = pytest.importorskip("sklearn.metrics")


def _inputs(seed, ties):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 400))
    positive = rng.random(n) < rng.uniform(0.05, 0.7)
    positive[0] = True
    scores = rng.random(n) + 0.3 * positive
    if ties:
        scores = np.round(scores, 1)
    return scores, positive


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_matches_scikit_learn(seed, ties):
    scores, positive = _inputs(seed, ties)
    expected = sklearn_metrics.average_precision_score(positive, scores)
    assert metrics.average_precision(scores, positive) == pytest.approx(expected, rel=1e-12)


def test_edge_cases():
    assert metrics.average_precision(np.array([0.3, 0.1]), np.array([False, False])) is None
    constant = np.full(10, 0.5)
    positive = np.arange(10) < 3
    assert metrics.average_precision(constant, positive) == pytest.approx(
        sklearn_metrics.average_precision_score(positive, constant)
    )
    assert metrics.average_precision(np.array([0.9, 0.1]), np.array([True, False])) == 1.0


def test_ties_broken_one_by_one_are_caught():
    """Treating tied scores as separate thresholds (in their stable order) is a defect the
    comparison sees on the tied inputs."""

    def one_by_one(scores, positive):
        order = np.argsort(-scores, kind="stable")
        hits = positive[order]
        tp = np.cumsum(hits)
        precision = tp / np.arange(1, hits.size + 1)
        return float(np.sum(precision[hits]) / hits.sum())

    differs = [
        abs(one_by_one(s, p) - sklearn_metrics.average_precision_score(p, s)) > 1e-9
        for s, p in (_inputs(seed, True) for seed in range(6))
    ]
    assert any(differs)
