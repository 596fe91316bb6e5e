"""gns_jax/theory/: the closed forms against exact enumeration, and every check against the defect
it exists to catch (the tiny setting; ``python -m gns_jax.theory`` runs the small one).

Each check must PASS on the library as it is and FAIL once a defect of
``gns_jax.theory.mutations`` is put in: a check that cannot fail checks nothing.
"""

import dataclasses
import itertools
import json
import lzma
import tarfile

import jax
import numpy as np
import pytest

from gns_jax.cache import cache_distribution, inclusion_probability
from gns_jax.graph import from_edges
from gns_jax.theory import TINY, convergence, gradients, predict, unbiased, variance
from gns_jax.theory.__main__ import main
from gns_jax.theory.common import Check, override
from gns_jax.theory.mutations import MUTATIONS, mutated
from gns_jax.theory.runner import chains, run, run_parallel
from gns_jax.theory.saved import read_json, write_json


def _tiny_graph():
    # node 0 has neighbours 1..4 of degrees 1, 2, 2, 3; node 5 hangs off 3 and 4
    s = np.array([1, 2, 3, 4, 2, 3, 4, 5, 4])
    r = np.array([0, 0, 0, 0, 5, 5, 5, 4, 1])
    return from_edges(s, r, 6, symmetrize=True)


def test_closed_form_variance_equals_exact_enumeration_of_the_cache():
    graph = _tiny_graph()
    p = cache_distribution(graph, "degree")
    m = 3
    pi = inclusion_probability(p, m)
    x = np.array([0.5, 1.0, -2.0, 3.0, 0.25, 1.5])
    for v in (0, 4, 5):
        nbrs, d = graph.neighbors(v), graph.degrees()[v]
        values, probs = [], []
        for draws in itertools.product(range(graph.num_nodes), repeat=m):
            cached = set(draws)
            values.append(sum(x[u] / (d * pi[u]) for u in nbrs if u in cached))
            probs.append(np.prod(p[list(draws)]))
        values, probs = np.array(values), np.array(probs)
        mean = probs @ values
        np.testing.assert_allclose(mean, x[nbrs].mean(), rtol=1e-12)  # unbiased, exactly
        exact = probs @ (values - mean) ** 2
        closed = variance.closed_form_variance(graph, x, np.array([v]), p, m)[0]
        np.testing.assert_allclose(closed, exact, rtol=1e-10)
        # vector features: the coordinates' variances add up
        two = variance.closed_form_variance(graph, np.stack([x, 2 * x], 1), np.array([v]), p, m)
        np.testing.assert_allclose(two[0], 5 * exact, rtol=1e-10)


def test_hajek_closed_form_matches_enumeration_where_linearisation_is_exact():
    """With every neighbour's feature equal, Hajek is exactly mu_v when a neighbour is cached
    and 0 otherwise: its MSE is P0 mu^2, which the closed form must give exactly."""
    graph = _tiny_graph()
    p = cache_distribution(graph, "degree")
    x = np.full(6, 1.5)
    for v, m in ((0, 2), (5, 3)):
        p0 = (1 - p[graph.neighbors(v)].sum()) ** m
        closed = variance.hajek_closed_form(graph, x, np.array([v]), p, m, k=10)[0]
        np.testing.assert_allclose(closed, p0 * 1.5**2, rtol=1e-10)
        # scaled by 1 / (1 - P0): 1.5 / (1 - P0) w.p. 1 - P0, else 0; mean 1.5, so the MSE is
        # the variance 1.5^2 P0 / (1 - P0)
        scaled = variance.hajek_closed_form(graph, x, np.array([v]), p, m, k=10, scaled=True)[0]
        np.testing.assert_allclose(scaled, 1.5**2 * p0 / (1 - p0), rtol=1e-10)


def test_node_wise_closed_form_equals_exact_enumeration_of_subsets():
    graph = from_edges(np.arange(1, 7), np.zeros(6, int), 7, symmetrize=True)
    x = np.array([0.0, 1.0, -2.0, 3.0, 0.5, 4.0, -1.0])
    for k in (1, 3, 5, 6):
        means = [x[list(c)].mean() for c in itertools.combinations(range(1, 7), k)]
        closed = variance.ns_closed_form(graph, x, np.array([0]), k)[0]
        np.testing.assert_allclose(closed, np.var(means), rtol=1e-12, atol=1e-15)


@pytest.mark.slow
@pytest.mark.parametrize("defect", [None, *MUTATIONS])
def test_claim_1_passes_and_fails_with_each_defect(defect):
    with mutated(defect):
        result = unbiased.run(TINY)
    check, reach = result["checks"]
    assert check.passed == (defect is None), check.measured
    assert reach.claim.startswith("1b") and (reach.passed or defect == "small-cache")


@pytest.mark.parametrize(
    "defect",
    [None, *MUTATIONS[:2], *(pytest.param(m, marks=pytest.mark.slow) for m in MUTATIONS[2:])],
)
def test_claim_2a_passes_and_fails_with_each_defect(defect):
    with mutated(defect):
        check, _ = variance.per_node(TINY)
    assert check.passed == (defect is None), check.measured


@pytest.mark.slow
def test_claim_2_slope_empty_neighbourhoods_and_estimators():
    result = variance.run(TINY)
    verdicts = {c.claim[:2]: c.passed for c in result["checks"]}
    assert verdicts == {"2a": True, "2b": True, "2c": True, "2d": True}, [
        c.measured for c in result["checks"]
    ]
    rows = {(r["estimator"], r["dist"]): r for r in result["estimators"]}
    # Hajek's weights sum to 1: far less variance than HT's, at the price of a bias
    assert rows["hajek", "degree"]["var"] < rows["ht", "degree"]["var"]
    assert rows["hajek", "degree"]["bias2"] > rows["ht", "degree"]["bias2"]
    with mutated("small-cache"):  # 2c exists to catch a cache of the wrong size
        broken = {c.claim[:2]: c.passed for c in variance.run(TINY)["checks"]}
    assert not broken["2c"]


@pytest.mark.slow
@pytest.mark.parametrize("defect", [None, "drop-q", "pi-mp", "small-cache"])
def test_claim_3_passes_and_fails_with_each_weight_defect(defect):
    setting = dataclasses.replace(TINY, grad_fractions=(0.02, 0.5), grad_samples=24)
    stages = ("init", "trained") if defect in ("pi-mp",) else ("init",)
    with mutated(defect):
        result = gradients.run(setting, stages=stages)
    checks = [c for c in result["checks"] if not c.finding]
    assert all(c.passed for c in checks) == (defect is None), [c.measured for c in checks]
    assert {r["stage"] for r in result["rows"]} == set(stages)


@pytest.mark.slow
def test_claim_4_rate_check_fails_when_the_sweep_cannot_resolve_a_rate():
    setting = dataclasses.replace(TINY, conv_horizons=(4, 8, 16), conv_fractions=(0.2,))
    result = convergence.run(setting)
    rate = result["checks"][0]
    assert rate.claim.startswith("4a") and not rate.passed and not rate.finding
    assert all(c.finding for c in result["checks"][1:])
    row = result["rows"][1]
    assert row["matches"] == all(p["mean"] <= b for p, b in zip(row["horizons"], result["band"]))


@pytest.mark.slow
def test_claim_5_crossing_and_the_estimators_order():
    assert predict.crossing([0.01, 0.1, 1.0], [100.0, 10.0, 1.0], 10.0) == pytest.approx(0.1)
    assert predict.crossing([0.01, 0.1, 1.0], [100.0, 10.0, 1.0], 31.6227766) == pytest.approx(
        0.031622776, rel=1e-6
    )
    assert predict.crossing([0.01, 0.1], [100.0, 50.0], 10.0) is None
    setting = dataclasses.replace(TINY, predict_fractions=(0.01, 0.2), predict_nodes=60)
    result = predict.run(setting)
    (graph,) = result["graphs"]
    v = graph["v"]
    for i in range(2):
        assert v["exact"][i] == 0 < v["hajek"][i] < v["ht"][i]
        assert v["hajek"][i] < v["hajek-scaled"][i]
    assert v["ht"][0] > v["ht"][1]  # the variance falls with the cache
    noise = graph["noise"]
    assert 0 < noise["upper"] < noise["ns"]  # an exact input layer removes some sampling error


def _sweep(sd, c=1.0, lipschitz=1.0, horizons=(1, 4)):
    ns = {"horizons": [{"horizon": t, "mean": 1.0, "sd": sd} for t in horizons]}
    return {"dataset": "g", "c": c, "lipschitz": lipschitz, "rows": [ns], "proper": {"ht": 0.2}}


def _errors(bias2, mse_over_ns, ns_mse=1.0, inner=(0.0, 0.0, 0.0)):
    ns = {"bias2": 0.0, "offset": 0.0, "sq": np.full(4, ns_mse), "inner": 0.0, "inner_se": 0.0}
    rows = {("ns", None): ns}
    for f, b, d, i in zip((0.01, 0.1, 1.0), bias2, mse_over_ns, inner):
        rows[("ht", f)] = {"bias2": b, "offset": 0.0, "sq": ns["sq"] + d, "inner": i, "inner_se": 0}
    return rows


def test_claim_5b_bound_prediction_counts_bias_whole_and_variance_at_the_bound_step():
    fractions = (0.01, 0.1, 1.0)
    # Bias only (the MSE difference is the bias's): excess = b^2, margin 2 SD = 0.2.
    bias_only = {"init": _errors((4.0, 0.4, 0.04), (4.0, 0.4, 0.04))}
    out = predict.bound_prediction(bias_only, _sweep(0.1), fractions, ["ht"])
    np.testing.assert_allclose(out["predicted"]["ht"]["ratio"], [20.0, 2.0, 0.2], rtol=1e-9)
    assert out["predicted"]["ht"]["size"] == pytest.approx(0.2, rel=0.05)  # log-log: 10^-0.7
    # Variance only: it enters as c L / sqrt(T), largest at the shortest horizon (T = 1 here).
    var_only = {"init": _errors((0.0, 0.0, 0.0), (1.0, 0.1, 0.01))}
    out = predict.bound_prediction(var_only, _sweep(0.1), fractions, ["ht"])
    cell = out["stages"]["init"]["ht"][0]
    np.testing.assert_allclose(cell["excess"], [1.0, 0.5], rtol=1e-9)
    # The larger excess of the two parameter points counts.
    both = {"init": var_only["init"], "trained": bias_only["init"]}
    out = predict.bound_prediction(both, _sweep(0.1), fractions, ["ht"])
    assert out["stages"]["init"]["ht"][0]["ratio"] == pytest.approx(5.0)
    assert out["predicted"]["ht"]["ratio"][0] == pytest.approx(20.0)
    # A wide NS spread admits every fraction; none does when the excess never falls to it.
    assert predict.bound_prediction(bias_only, _sweep(1e6), fractions, ["ht"])["predicted"]["ht"][
        "size"
    ] == pytest.approx(0.01)
    assert (
        predict.bound_prediction(bias_only, _sweep(1e-3), fractions, ["ht"])["predicted"]["ht"][
            "size"
        ]
        is None
    )


def test_claim_5c_descent_budget_counts_only_the_bias_along_the_gradient():
    """5c replaces 5b's whole b^2 by the descent lemma's -2 <grad f, b> + 2 L eta b^2: a bias
    orthogonal to the gradient costs only its second-order term, one against it costs twice its
    projection, and one along it (a longer step) lowers the predicted excess."""
    fractions = (0.01, 0.1, 1.0)
    sweep = _sweep(0.1, c=0.5, horizons=(1, 4))  # L eta = 0.5, 0.25; margin 0.2
    # The MSE difference is the bias's: no variance term.
    orthogonal = {"init": _errors((4.0, 0.4, 0.04), (4.0, 0.4, 0.04))}
    out = predict.bound_prediction(orthogonal, sweep, fractions, ["ht"])
    np.testing.assert_allclose(out["stages"]["init"]["ht"][0]["descent"], [4.0, 2.0], rtol=1e-9)
    np.testing.assert_allclose(out["descent"]["ht"]["ratio"], [20.0, 2.0, 0.2], rtol=1e-9)
    np.testing.assert_allclose(out["predicted"]["ht"]["ratio"], [20.0, 2.0, 0.2], rtol=1e-9)
    against = {"init": _errors((4.0, 0.4, 0.04), (4.0, 0.4, 0.04), inner=(-1.0, -0.1, -0.01))}
    out = predict.bound_prediction(against, sweep, fractions, ["ht"])
    np.testing.assert_allclose(out["stages"]["init"]["ht"][0]["descent"], [6.0, 4.0], rtol=1e-9)
    along = {"init": _errors((4.0, 0.4, 0.04), (4.0, 0.4, 0.04), inner=(3.0, 0.3, 0.03))}
    out = predict.bound_prediction(along, sweep, fractions, ["ht"])
    np.testing.assert_allclose(out["stages"]["init"]["ht"][0]["descent"], [-2.0, -4.0], rtol=1e-9)
    assert out["descent"]["ht"]["size"] == pytest.approx(0.01)  # predicted to match everywhere
    assert out["predicted"]["ht"]["size"] == pytest.approx(0.2, rel=0.05)  # 5b: unchanged
    # The table's 5c rows, absent from a run saved before 5c.
    text = predict.table({"graphs": [], "bound": out})
    assert "| ht descent: predicted proper size |  | 1 % |" in text
    assert "| ht <grad f, b> | init | 3 ± 0 | 0.3 ± 0 | 0.03 ± 0 |" in text
    saved_before_5c = {k: v for k, v in out.items() if k != "descent"}
    old_text = predict.table({"graphs": [], "bound": saved_before_5c})
    assert "descent excess" not in old_text and "| ht <grad f, b> |" not in old_text
    # The checks: one 5b and one 5c line per estimator, judged against the sweep's 20 %.
    checks = predict.bound_checks(out, sweep)
    assert [c.claim[:2] for c in checks] == ["5b", "5c"]
    assert [c.passed for c in checks] == [True, False]


def _point(inner, mse_over_ns, bias2=0.0, draws=4):
    """One checkpoint's :func:`predict.point_errors` rows for NS and ``ht`` at 10 %: a bias of
    ``inner`` along the gradient on every draw, GNS's squared errors ``mse_over_ns`` above NS's."""
    ns = {"bias2": 0.0, "sq": np.ones(draws), "inner": 0.0, "along": np.zeros(draws)}
    gns = {"bias2": bias2, "sq": ns["sq"] + mse_over_ns, "inner": inner}
    return {("ns", None): ns, ("ht", 0.1): {**gns, "along": np.full(draws, inner)}}


def test_claim_5d_trajectory_budget_averages_the_descent_charge_over_the_checkpoints():
    """5d charges 5c's per-step terms at NS's checkpoints and averages them as A(T) averages the
    gradient norms there: a bias against the gradient at initialisation only is diluted by the
    checkpoints after it, the variance term shrinks with the step at longer horizons, and the
    narrowest margin decides."""
    sweep = _sweep(0.1, c=0.5, horizons=(1, 4))  # L eta = 0.5, 0.25; margin 0.2
    against_at_init = [_point(-1.0, 0.0), _point(0.0, 0.0), _point(0.0, 0.0), _point(0.0, 0.0)]
    points = {t: {"steps": [0, 1, 2, 3], "norms": [4, 1, 1, 1], "rows": against_at_init}
              for t in (1, 4)}  # fmt: skip
    out = predict.trajectory_prediction(points, sweep, [0.1], ["ht"])
    cells = [h[0] for h in out["predicted"]["ht"]["horizons"]]
    np.testing.assert_allclose([c["excess"] for c in cells], [0.5, 0.5])  # 2 * 1 / 4 points
    assert [c["se"] for c in cells] == [0.0, 0.0]  # every draw the same
    assert out["predicted"]["ht"]["ratio"] == [pytest.approx(2.5)]
    # Variance only (no bias): L eta_T times the MSE difference, at each horizon's step.
    variance = {t: {**points[t], "rows": [_point(0.0, 0.4)] * 4} for t in (1, 4)}
    out = predict.trajectory_prediction(variance, sweep, [0.1], ["ht"])
    np.testing.assert_allclose(
        [h[0]["excess"] for h in out["predicted"]["ht"]["horizons"]], [0.2, 0.1]
    )
    assert out["predicted"]["ht"]["size"] == pytest.approx(0.1)  # 1.0 at most: it matches
    # A bias along the gradient (a longer step) lowers the excess below zero; the same MSE
    # difference costs twice as much as an orthogonal bias (2 L eta b^2) as it does as variance.
    along = {t: {**points[t], "rows": [_point(0.5, 0.0)] * 4} for t in (1, 4)}
    out = predict.trajectory_prediction(along, sweep, [0.1], ["ht"])
    assert out["predicted"]["ht"]["horizons"][0][0]["excess"] == pytest.approx(-1.0)
    biased = {t: {**points[t], "rows": [_point(0.0, 0.4, bias2=0.4)] * 4} for t in (1, 4)}
    out = predict.trajectory_prediction(biased, sweep, [0.1], ["ht"])
    np.testing.assert_allclose(
        [h[0]["excess"] for h in out["predicted"]["ht"]["horizons"]], [0.4, 0.2]
    )
    # The table and the finding, judged against the sweep's 20 %.
    text = "\n".join(predict.trajectory_table(out))
    assert "| ht | largest | | **2** |" in text and "T=4: 4, 1, 1, 1" in text
    (check,) = predict.size_checks([("5d", "trajectory budget", out["predicted"])], out, sweep)
    assert check.claim.startswith("5d") and check.finding and not check.passed
    # Beside each prediction, the sweep's measured excess in the same unit (margins 0.2).
    gns = {"estimator": "ht", "fraction": 0.1, "horizons": [{"mean": 1.4}, {"mean": 0.9}]}
    swept = {**sweep, "rows": sweep["rows"] + [gns]}
    assert predict.measured_excess(swept, "ht", [0.1, 0.2]) == [
        [pytest.approx(2.0), None],
        [pytest.approx(-0.5), None],
    ]
    out = predict.trajectory_prediction(biased, swept, [0.1], ["ht"])
    text = "\n".join(predict.trajectory_table(out))
    assert "| ht | 4 | 0.2 | 1 ± 0 (measured -0.5) |" in text
    assert "| ht | largest | | **2** (measured 2) |" in text
    assert "| ht measured excess crosses the margin (interpolated) | | | beyond" in text
    swept["rows"][-1] = {**gns, "horizons": [{"mean": 1.2}, {"mean": 0.9}]}  # 1 margin: crosses
    text = "\n".join(
        predict.trajectory_table(predict.trajectory_prediction(biased, swept, [0.1], ["ht"]))
    )
    assert "| ht measured excess crosses the margin (interpolated) | | | 10 % |" in text


def test_claim_5e_one_step_budget_charges_the_measured_loss_change_not_l():
    """5e charges the measured loss one step on, ``(f(theta - eta g_GNS) - f(theta - eta
    g_NS)) / eta``, where 5d charges ``L eta`` times the MSE and twice the bias along the
    gradient: noise in flat directions costs nothing, noise as curved as ``2 L`` costs what 5d
    charges, and a bias against the gradient costs once, not twice."""
    sweep = _sweep(0.1, c=0.5, horizons=(1, 4))  # eta = 0.5, 0.25; L = 1; margin 0.2

    def predict_at(inner, mse_over_ns, curvature):
        p = _point(inner, mse_over_ns)
        ns, gns = p[("ns", None)], p[("ht", 0.1)]
        # f(theta - eta g) - f(theta) = -eta <grad f, g> + eta^2 / 2 * curvature * ||g||^2
        # (NS's own first and second order terms are 0 and 3, GNS's differ by inner, mse).
        ns["ahead"] = {eta: np.full(4, 3.0) for eta in (0.5, 0.25)}
        gns["ahead"] = {
            eta: 3.0 - eta * gns["along"] + eta**2 / 2 * curvature * (mse_over_ns + 2 * inner)
            for eta in (0.5, 0.25)
        }
        points = {t: {"steps": [0, 1, 2, 3], "norms": [1] * 4, "rows": [p] * 4} for t in (1, 4)}
        return predict.trajectory_prediction(points, sweep, [0.1], ["ht"])

    def excess(out, name):
        return [h[0]["excess"] for h in out[name]["ht"]["horizons"]]

    flat = predict_at(0.0, 0.4, 0.0)
    np.testing.assert_allclose(excess(flat, "predicted"), [0.2, 0.1])  # 5d: L eta 0.4
    np.testing.assert_allclose(excess(flat, "one_step"), [0.0, 0.0], atol=1e-12)
    assert flat["curvature"]["ht"] == [pytest.approx(0.0, abs=1e-12)]
    assert flat["one_step"]["ht"]["size"] == pytest.approx(0.1)  # predicted to match at 10 %
    curved = predict_at(0.0, 0.4, 2.0)  # curvature 2 L: 5d's charge
    np.testing.assert_allclose(excess(curved, "one_step"), [0.2, 0.1])
    assert curved["curvature"]["ht"] == [pytest.approx(2.0)]
    against = predict_at(-1.0, 0.0, 0.0)  # a bias against the gradient: 1, where 5d says 2
    np.testing.assert_allclose(excess(against, "one_step"), [1.0, 1.0])
    np.testing.assert_allclose(excess(against, "predicted"), [2.0, 2.0])
    text = "\n".join(predict.trajectory_table(against))
    assert "One-step budget on g (finding 5e)" in text and "| ht | largest | | **5** |" in text
    assert "(the descent budget charges L = 1)" in text
    checks = predict.size_checks([("5e", "one-step budget", against["one_step"])], against, sweep)
    assert [c.claim[:2] for c in checks] == ["5e"] and not checks[0].passed
    # Predicted 10 %, measured 20 %: within 2x, unless the sweep resolves no rate (4a fails),
    # whether its checks are the module's or a saved JSON's.
    budget = [("5e", "one-step budget", flat["one_step"])]
    (check,) = predict.size_checks(budget, flat, sweep)
    assert check.passed
    rate = Check("4a. NS converges at the SGD rate", "m", "slope -0.03", "<= -0.25", False)
    for saved in (rate, rate._asdict()):
        (check,) = predict.size_checks(budget, flat, {**sweep, "checks": [saved]})
        assert not check.passed and "check 4a fails" in check.measured
    # Rows without ``ahead`` (runs saved before 5e): 5d alone.
    old = {t: {"steps": [0], "norms": [1], "rows": [_point(0.0, 0.4)]} for t in (1, 4)}
    assert "one_step" not in predict.trajectory_prediction(old, sweep, [0.1], ["ht"])


def _quadratic_drift(h, theta0, steps, segment_bias, eta):
    """NS's and GNS's mean iterates on ``f = theta' H theta / 2`` (GNS's gradient off by
    ``segment_bias[k]`` from checkpoint ``k`` to the next), stepped one by one: the gradient
    norms and what GNS adds to ``||grad f||^2`` at each checkpoint."""
    ns, gns, grads, excess = theta0.copy(), theta0.copy(), [], []
    for t in range(steps[-1] + 1):
        if t in steps:
            grads.append(h @ ns)
            excess.append(float((h @ gns) @ (h @ gns) - (h @ ns) @ (h @ ns)))
        k = int(np.searchsorted(steps, t, side="right")) - 1
        ns, gns = ns - eta * (h @ ns), gns - eta * (h @ gns + segment_bias[min(k, len(steps) - 2)])
    return grads, excess


@pytest.mark.parametrize("rank_of_h", [12, 3])
def test_claim_5f_drift_is_the_biased_descents_displacement_on_a_quadratic(rank_of_h, monkeypatch):
    """On a quadratic the drift budget's linearisation is exact: its excess at each checkpoint
    is what GNS's mean iterates, descending with the bias held between checkpoints, add to
    ``||grad f||^2``, step by step, whether the Lanczos space is the whole space or an invariant
    one that stops early (a Hessian of rank 3). Without the contraction by ``H`` (the drift
    taken as ``-eta n b``) the same check fails."""
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.standard_normal((12, 12)))[0][:, :rank_of_h]
    h = basis @ np.diag(np.geomspace(0.02, 1.5, rank_of_h)) @ basis.T
    steps, eta = [0, 5, 12, 20], 0.5
    bias = [rng.standard_normal(12) for _ in steps[:-1]] + [np.zeros(12)]
    grads, expected = _quadratic_drift(h, rng.standard_normal(12), steps, bias, eta)
    biases = [{"s": (b, b)} for b in bias]

    def drift():
        out = predict.drift_excess(lambda k, v: h @ v, grads, steps, biases, eta, 12, rng)
        return [e["s"] for e in out]

    assert expected[0] == 0 and max(map(abs, expected)) > 1
    np.testing.assert_allclose(drift(), expected, rtol=1e-8, atol=1e-9)
    monkeypatch.setattr(
        predict, "ritz", lambda hvp, dim, rank, rng: (np.zeros(0), np.zeros((dim, 0)))
    )
    assert not np.allclose(drift(), expected, rtol=0.1)


def test_claim_5f_drift_squares_the_bias_across_halves_not_its_noise():
    """The bias is measured from a few draws, so its estimate carries Monte Carlo noise that a
    square would count as drift: taken across two independent halves the excess is unbiased
    (its mean over repetitions within 4 standard errors of the noise-free one), where the
    square of one noisy estimate is too large by more than that."""
    rng = np.random.default_rng(1)
    h = np.diag(np.geomspace(0.05, 1.0, 6))
    steps, eta = [0, 4, 8], 0.5
    bias = [np.full(6, 0.3), np.full(6, -0.2), np.zeros(6)]
    grads, expected = _quadratic_drift(h, np.ones(6), steps, bias, eta)
    split, same = [], []
    for _ in range(400):
        noisy = [[b + rng.standard_normal(6) for b in bias] for _ in range(2)]
        for pairs, out in (
            ([{"s": (noisy[0][k], noisy[1][k])} for k in range(3)], split),
            ([{"s": (noisy[0][k], noisy[0][k])} for k in range(3)], same),
        ):
            excess = predict.drift_excess(lambda k, v: h @ v, grads, steps, pairs, eta, 6, rng)
            out.append(excess[-1]["s"])
    se = np.std(split, ddof=1) / np.sqrt(len(split))
    assert abs(np.mean(split) - expected[-1]) < 4 * se
    assert np.mean(same) - expected[-1] > 4 * np.std(same, ddof=1) / np.sqrt(len(same))


def test_claim_5f_replaces_the_bias_local_cost_by_its_drift():
    """5f is 5e's charge less the bias's one-step cost at the checkpoint (the loss one step down
    the mean gradients, GNS's against NS's) plus the drift's excess there; judged as 5e."""
    sweep = _sweep(0.1, c=0.5, horizons=(1, 4))  # eta = 0.5, 0.25; margin 0.2
    p = _point(0.0, 0.0)
    ns, gns = p[("ns", None)], p[("ht", 0.1)]
    etas = (0.5, 0.25)
    ns["ahead"], gns["ahead"] = ({e: np.full(4, 3.0) for e in etas},
                                 {e: np.full(4, 3.0 + 0.1 * e) for e in etas})  # fmt: skip
    ns["mean_ahead"], gns["mean_ahead"] = {e: 2.0 for e in etas}, {e: 2.0 + 0.05 * e for e in etas}
    gns["drift"], ns["drift"] = 0.3, 0.0
    points = {t: {"steps": [0, 1], "norms": [1, 1], "rows": [p, p]} for t in (1, 4)}
    out = predict.trajectory_prediction(points, sweep, [0.1], ["ht"])
    np.testing.assert_allclose([h[0]["excess"] for h in out["one_step"]["ht"]["horizons"]], 0.1)
    np.testing.assert_allclose([h[0]["excess"] for h in out["drift"]["ht"]["horizons"]], 0.35)
    assert out["drift"]["ht"]["ratio"] == [pytest.approx(1.75)]
    text = "\n".join(predict.trajectory_table(out))
    assert "Drift budget on g (finding 5f)" in text and "| ht | largest | | **1.75** |" in text
    (check,) = predict.size_checks([("5f", "drift budget", out["drift"])], out, sweep)
    assert check.claim.startswith("5f") and not check.passed
    del gns["drift"]  # rows without a drift (drift_rank 0): no 5f
    assert "drift" not in predict.trajectory_prediction(points, sweep, [0.1], ["ht"])


@pytest.mark.slow
def test_claim_5e_measures_the_training_loss_one_step_down_the_drawn_gradient(monkeypatch):
    """``point_errors``' ``ahead`` is the training loss at ``theta - eta g`` for the drawn
    ``g`` (a step down, not up, on the training weights), and its first order agrees with the
    bias along the gradient that 5c and 5d measure: for a small step, the difference between
    two samplers' losses is ``-eta`` times the difference of their ``<grad f, g>``."""
    from gns_jax.theory.problem import Problem

    problem = Problem(TINY.model_dataset, TINY.hidden, TINY.grad_fanouts, 0)
    theta = problem.theta0
    weights = problem.weights(problem.dataset.train_idx)
    directions = {
        "a": jax.random.normal(jax.random.key(3), theta.shape) * 0.01,
        "b": jax.random.normal(jax.random.key(4), theta.shape) * 0.01,
    }
    monkeypatch.setattr(problem, "draw_grad", lambda sampler, *args: directions[sampler])
    batches = predict.bound_batches(problem.dataset.train_idx, 2, 8, 0)
    samplers = {("ns", None): "a", ("ht", 0.5): "b"}
    eta = 0.01
    rows = predict.point_errors(problem, theta, batches, samplers, 0, "t", steps=[eta, 1.0])
    a, b = rows[("ns", None)], rows[("ht", 0.5)]
    down = float(problem.loss(theta - directions["b"], weights))
    np.testing.assert_allclose(b["ahead"][1.0], down, rtol=1e-6)
    assert not np.allclose(b["ahead"][1.0], float(problem.loss(theta + directions["b"], weights)))
    first_order = -eta * (b["along"] - a["along"])
    np.testing.assert_allclose(b["ahead"][eta] - a["ahead"][eta], first_order, rtol=0.05)


@pytest.mark.slow
def test_claim_5d_reruns_the_sweeps_own_ns_iterates_or_says_it_cannot():
    """The trajectory budget's checkpoints are NS's own: its rerun of the first seed gives the
    sweep's A(T); a sweep that it does not reproduce (another setting) is an error, not a
    prediction on other iterates."""
    setting = dataclasses.replace(
        TINY,
        conv_horizons=(6, 12),
        conv_seeds=2,
        conv_evals=3,
        conv_fractions=(0.5,),
        trajectory_draws=2,
        drift_rank=3,
    )
    sweep = {**convergence.run(setting), "dataset": setting.model_dataset}
    out = predict.trajectory_budget(setting, 0, sweep)
    for h, norms in zip(sweep["rows"][0]["horizons"], out["ns_norms"]):
        assert np.mean(norms) == pytest.approx(h["seeds"][0], rel=1e-5)
    assert out["steps"] == [[0, 3, 6], [0, 6, 12]]
    assert len(out["predicted"]["ht"]["horizons"]) == 2
    # 5e beside it, on the same draws: one loss per step size and draw, finite.
    assert np.isfinite(out["one_step"]["ht"]["ratio"]).all() and out["curvature"]["ht"][0] != 0
    # 5f beside them: the drift moves 5e's excess, by a finite amount.
    assert np.isfinite(out["drift"]["ht"]["ratio"]).all()
    assert out["drift"]["ht"]["ratio"] != out["one_step"]["ht"]["ratio"]
    other = dataclasses.replace(setting, hidden=setting.hidden * 2)
    with pytest.raises(ValueError, match="does not reproduce the sweep"):
        predict.trajectory_budget(other, 0, sweep)


@pytest.mark.slow
def test_claim_5b_5c_bias_measurements_catch_a_weight_defect():
    """The bias the bound budget counts, on the batches' control variate: dropping ``q_v``
    (weights too large at hubs, a bias that does not average out) must raise it beyond its
    Monte Carlo error, where the library's HT weights leave it at the noise floor's scale."""
    from gns_jax.theory.problem import Problem

    setting = dataclasses.replace(TINY, bound_draws=48)
    problem = Problem(setting.model_dataset, setting.hidden, setting.grad_fanouts, 0)
    found = {}
    for defect in (None, "drop-q"):
        with mutated(defect):
            rows = predict.bound_errors(problem, setting, 0, [("ht", 0.5)], stages=("init",))
        found[defect] = rows["init"][("ht", 0.5)]

    def se(r):  # SD of ||mean d||^2 - offset: 4 m'Sm/R + 2 tr(S^2)/R^2 <= 4 b^2 off + 2 off^2
        return np.sqrt(4 * r["bias2"] * r["offset"] + 2 * r["offset"] ** 2)

    clean, bad = found[None], found["drop-q"]
    assert clean["bias2"] < 3 * se(clean) + clean["offset"], clean
    assert bad["bias2"] - clean["bias2"] > 3 * np.hypot(se(bad), se(clean)), (bad, clean)
    # 5c's <grad f, b>, the bias along the gradient: at the noise level for HT, and the defect's
    # bias has a component along it beyond the Monte Carlo error.
    assert abs(clean["inner"]) < 3 * clean["inner_se"], clean
    assert abs(bad["inner"] - clean["inner"]) > 3 * np.hypot(bad["inner_se"], clean["inner_se"])


def _seeded_sweep(ns_seeds, gns_seeds: dict, proper):
    """A saved sweep's shape with per-seed A(T) (horizons x seeds) for NS and GNS hajek."""

    def row(seeds, fraction):
        seeds = np.asarray(seeds, dtype=float)
        horizons = [
            {"horizon": t, "mean": s.mean(), "sd": s.std(ddof=1), "seeds": s.tolist()}
            for t, s in zip((250, 500), seeds)
        ]
        return {"fraction": fraction, "estimator": None if fraction is None else "hajek",
                "horizons": horizons}  # fmt: skip

    rows = [row(ns_seeds, None)] + [row(s, f) for f, s in gns_seeds.items()]
    return {"dataset": "g", "rows": rows, "proper": {"hajek": proper}, "checks": []}


def test_resampled_sizes_measure_how_firmly_the_seeds_fix_the_proper_size():
    ns = [[1.0, 1.2, 0.8, 1.1], [0.5, 0.6, 0.4, 0.55]]
    far_above = [[5.0, 5.1, 4.9, 5.2], [3.0, 3.1, 2.9, 3.2]]
    well_below = [[0.2, 0.3, 0.25, 0.2], [0.1, 0.12, 0.11, 0.1]]
    firm = _seeded_sweep(ns, {0.1: far_above, 0.5: well_below}, 0.5)
    sizes = convergence.resampled_sizes(firm, draws=2000)["hajek"]
    assert np.all(sizes == 0.5)  # clear of the band either way: every resample agrees
    assert predict.share_within(0.3, sizes) == 1.0  # 0.5 / 0.3 < 2
    assert predict.share_within(0.2, sizes) == 0.0 and predict.share_within(None, sizes) == 0.0
    # GNS at 10 % on NS's own seeds: it matches as measured, but a resample of either sampler's
    # seeds can push its mean above NS's band, and then 50 % is the size.
    edge = _seeded_sweep(ns, {0.1: ns, 0.5: well_below}, 0.1)
    sizes = convergence.resampled_sizes(edge, draws=2000)["hajek"]
    share = np.mean(sizes == 0.1)
    assert 0.5 < share < 0.99 and np.all((sizes == 0.1) | (sizes == 0.5)), share
    np.testing.assert_array_equal(sizes, convergence.resampled_sizes(edge, draws=2000)["hajek"])
    # No size is within 2x of both 10 and 50 %: a prediction agrees with one outcome only.
    assert predict.share_within(0.2, sizes) == predict.share_within(0.05, sizes) == share
    assert predict.share_within(0.3, sizes) == pytest.approx(1 - share)
    # No match at all: every resample says "beyond", which no prediction can be within 2x of.
    none = _seeded_sweep(ns, {0.1: far_above, 0.5: far_above}, None)
    sizes = convergence.resampled_sizes(none, draws=500)["hajek"]
    assert np.all(np.isnan(sizes)) and predict.share_within(0.5, sizes) == 0.0


def test_resample_command_reads_saved_runs_and_names_a_bad_file(tmp_path, capsys):
    ns = [[1.0, 1.2, 0.8, 1.1], [0.5, 0.6, 0.4, 0.55]]
    sweep = _seeded_sweep(ns, {0.1: [[5.0] * 4, [3.0] * 4], 0.5: [[0.2] * 4, [0.1] * 4]}, 0.5)
    (tmp_path / "sweep.json").write_text(json.dumps({"convergence": sweep}))
    drift = {"hajek": {"size": 0.3, "ratio": [2.0, 0.5]}}
    saved = {"predict": {"graphs": [], "bound": None,
                         "trajectory": {"dataset": "g", "drift": drift}}}  # fmt: skip
    (tmp_path / "drift.json").write_text(json.dumps(saved))
    assert main(["--resample", str(tmp_path / "sweep.json"), str(tmp_path / "drift.json")]) == 0
    printed = capsys.readouterr().out
    assert "| hajek | 50 % | 0.0 % | 100.0 % | 0.0 % |" in printed
    assert "| 5f (drift.json) | hajek | 30 % | yes | 100.0 % |" in printed
    with pytest.raises(SystemExit):
        main(["--resample", str(tmp_path / "drift.json")])
    assert "drift.json: not the JSON of a run with a convergence sweep" in capsys.readouterr().err
    (tmp_path / "other.json").write_text(json.dumps({"predict": {"graphs": []}}))
    with pytest.raises(SystemExit):
        main(["--resample", str(tmp_path / "sweep.json"), str(tmp_path / "other.json")])
    assert "other.json: its predictions are not on the sweep's graph g" in capsys.readouterr().err


def test_saved_runs_are_read_compressed_or_inside_an_archive(tmp_path, capsys):
    """A report's raw runs live in one archive (``runs.tar.xz``) or a ``.json.xz`` file; the
    options that read saved runs read them in place, and a missing member is named."""
    ns = [[1.0, 1.2, 0.8, 1.1], [0.5, 0.6, 0.4, 0.55]]
    gns = {0.1: [[5.0] * 4, [3.0] * 4], 0.5: [[0.2] * 4, [0.1] * 4]}
    sweep = {"convergence": _seeded_sweep(ns, gns, 0.5)}
    write_json(tmp_path / "sweep.json.xz", sweep)
    assert lzma.decompress((tmp_path / "sweep.json.xz").read_bytes())  # compressed on disk
    assert read_json(tmp_path / "sweep.json.xz") == sweep
    (tmp_path / "sweep.json").write_text(json.dumps(sweep))
    with tarfile.open(tmp_path / "runs.tar.xz", "w:xz") as tar:
        tar.add(tmp_path / "sweep.json", arcname="sweep.json")
    inside = tmp_path / "runs.tar.xz" / "sweep.json"
    assert read_json(inside) == sweep
    with pytest.raises(OSError, match="no member other.json"):
        read_json(tmp_path / "runs.tar.xz" / "other.json")
    assert main(["--resample", str(inside)]) == 0
    archived = capsys.readouterr().out
    assert main(["--resample", str(tmp_path / "sweep.json")]) == 0
    assert capsys.readouterr().out == archived and "| hajek | 50 % |" in archived
    with pytest.raises(SystemExit):
        main(["--only", "predict", "--convergence-from", str(tmp_path / "runs.tar.xz" / "x.json")])
    assert "no member x.json" in capsys.readouterr().err


@pytest.mark.slow
def test_command_prints_verdicts_and_writes_json(tmp_path, capsys):
    out = tmp_path / "theory.json"
    assert main(["--setting", "tiny", "--only", "unbiased", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "[PASS] 1." in printed and "2 of 2 checks passed" in printed
    saved = json.loads(out.read_text())
    assert saved["unbiased"]["checks"][0]["passed"] is True
    assert main(["--setting", "tiny", "--only", "unbiased", "--mutate", "drop-q"]) == 1
    assert "[FAIL] 1." in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["--json", str(tmp_path / "missing" / "x.json")])
    assert exit_info.value.code == 2
    assert "--json" in capsys.readouterr().err


def test_convergence_from_names_the_file_and_what_is_wrong(tmp_path, capsys):
    saved = tmp_path / "sweep.json"
    saved.write_text(json.dumps({"convergence": {**_sweep(0.1), "dataset": "cora"}}))
    for argv, words in (
        (["--only", "predict", "--convergence-from", str(saved)], "model_dataset=cora"),
        (["--convergence-from", str(saved)], "leave it out of --only"),
        (["--only", "predict", "--convergence-from", str(tmp_path / "none.json")], "not the JSON"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert "--convergence-from" in err and words in err, err


def test_chains_keep_predict_after_convergence_and_balance_the_rest():
    names = ["unbiased", "variance", "gradients", "convergence", "predict"]
    plan = chains(names, 2)
    assert sorted(n for c in plan for n in c) == sorted(names)  # every module exactly once
    with_conv = next(c for c in plan if "convergence" in c)
    assert with_conv.index("predict") == with_conv.index("convergence") + 1
    assert chains(names, 1) == [names]  # one job: the serial order
    assert chains(["unbiased"], 4) == [["unbiased"]]  # never more chains than modules
    assert len(chains(names, 8)) == 4  # convergence and predict stay together


@pytest.mark.slow
def test_parallel_run_gives_the_serial_verdicts_and_carries_the_mutation():
    names = ["unbiased", "variance"]
    serial = run(names, TINY, quiet=True)
    parallel = run_parallel(names, TINY, 2)
    for name in names:
        assert [c.measured for c in parallel[name]["checks"]] == [
            c.measured for c in serial[name]["checks"]
        ]
    broken = run_parallel(names, TINY, 2, mutate="drop-q")  # the workers must put it in
    assert not broken["unbiased"]["checks"][0].passed


def test_set_overrides_fields_by_their_types_and_names_what_is_wrong(capsys):
    changed = override(TINY, ["model_dataset=cora", "conv_fractions=0.05,0.5", "conv_seeds=4"])
    assert (changed.model_dataset, changed.conv_fractions, changed.conv_seeds) == (
        "cora",
        (0.05, 0.5),
        4,
    )
    assert (
        "conv_fractions=0.05,0.5" in changed.name and changed.unbiased_draws == TINY.unbiased_draws
    )
    for bad, says in (
        (["conv_seed=4"], "FIELD=VALUE"),
        (["conv_seeds=four"], "not a int"),
        (["conv_fractions="], "empty"),
    ):
        with pytest.raises(ValueError, match=says):
            override(TINY, bad)
    with pytest.raises(SystemExit):
        main(["--setting", "tiny", "--set", "hidden=x"])
    assert "--set: 'hidden=x'" in capsys.readouterr().err
