"""Claim 5: a theory that predicts the proper cache size, before any GNS run.

The paper's "proper size" is where GNS's training matches node-wise sampling's. Two predictions,
each from the closed-form input-layer variance (``docs/algorithm.md``, variance items 2 to 5;
:mod:`theory.variance`) of the model's real features, over layer-1-like nodes (drawn with
probability proportional to degree, as a sampled neighbour is):

* **Input level**: the fraction at which GNS's input-aggregate mean squared error ``V_GNS(rho)``
  falls to node-wise sampling's ``V_NS`` (its ``K``-neighbour mean's variance). It answers "when
  is the estimator as good as NS's?", which is not what training needs.
* **Noise budget**: SGD's noise is mostly the choice of the batch. With three gradient
  measurements that involve no GNS run (at initialisation, on random batches: the exact batch
  gradient, NS's sampled gradient, and the gradient with an exact input layer and NS's upper
  layers), the training-noise of GNS at ``rho`` is predicted to first order as

      sigma^2_GNS(rho) = sigma^2_batch + e_upper + e_input,NS * V_GNS(rho) / V_NS,

  against ``sigma^2_NS = sigma^2_batch + e_NS``; the predicted proper size is the smallest
  fraction where ``sigma^2_GNS <= 2 sigma^2_NS`` (log-log interpolation between fractions).

Finding 5, per graph and estimator where :mod:`theory.convergence` measured a proper size: the
predicted and the measured sizes are within a factor of 2 of each other.
"""

from __future__ import annotations

import jax
import numpy as np

from gns_jax.cache import cache_distribution, cache_size
from theory.common import Check, Setting
from theory.problem import Problem
from theory.variance import hajek_closed_form, item2, item3, ns_closed_form

ESTIMATORS = ("ht", "hajek", "hajek-scaled", "exact")
FACTOR = 2.0


def input_mse(problem: Problem, targets, fractions, k: int) -> dict:
    """``V_est(rho)`` (mean over ``targets``) for every estimator, and ``V_NS``."""
    graph = problem.dataset.graph
    x = np.asarray(problem.x, dtype=np.float64)
    p = cache_distribution(graph, "degree")
    out = {"ns": float(np.mean(ns_closed_form(graph, x, targets, k)))}
    for est in ESTIMATORS:
        out[est] = []
    for fraction in fractions:
        m = cache_size(fraction, graph.num_nodes)
        ht = []
        for v in targets:
            u = graph.neighbors(int(v))
            ht.append(item2(x[u], p[u], m, u.size) + item3(x[u], p[u], m, u.size, k))
        out["ht"].append(float(np.mean(ht)))
        out["hajek"].append(float(np.mean(hajek_closed_form(graph, x, targets, p, m, k))))
        out["hajek-scaled"].append(
            float(np.mean(hajek_closed_form(graph, x, targets, p, m, k, scaled=True)))
        )
        out["exact"].append(0.0)
    return out


def noise(problem: Problem, setting: Setting, seed: int) -> dict:
    """``sigma^2_batch``, ``e_NS`` and ``e_upper`` at initialisation, relative to
    ``||grad f||^2``."""
    theta = problem.theta0
    train_idx = problem.dataset.train_idx
    full = np.asarray(problem.grad(theta, problem.weights(train_idx)), dtype=np.float64)
    ns = problem.sampler(None, setting.conv_batch_size)
    upper = problem.sampler(0.01, setting.conv_batch_size, "exact")
    rng = np.random.default_rng([seed, 41])
    key = jax.random.key(seed + 41)
    batch_err, ns_err, upper_err = [], [], []
    for r in range(setting.predict_samples):
        seeds = np.sort(rng.choice(train_idx, setting.conv_batch_size, replace=False))
        exact = np.asarray(problem.grad(theta, problem.weights(seeds)), dtype=np.float64)
        g_ns = np.asarray(problem.draw_grad(ns, theta, jax.random.fold_in(key, r), seeds, rng))
        g_up = np.asarray(problem.draw_grad(upper, theta, jax.random.fold_in(key, r), seeds, rng))
        batch_err.append(np.sum((exact - full) ** 2))
        ns_err.append(np.sum((g_ns - exact) ** 2))
        upper_err.append(np.sum((g_up - exact) ** 2))
    scale = float(full @ full)
    return {
        "batch": float(np.mean(batch_err)) / scale,
        "ns": float(np.mean(ns_err)) / scale,
        "upper": float(np.mean(upper_err)) / scale,
    }


def crossing(fractions, values, limit) -> float | None:
    """The smallest fraction where ``values`` (decreasing in it) reaches ``limit``, by log-log
    interpolation between tested fractions; None if no tested fraction reaches it."""
    f, v = np.asarray(fractions, float), np.asarray(values, float)
    below = np.flatnonzero(v <= limit)
    if below.size == 0:
        return None
    i = int(below[0])
    if i == 0 or v[i] <= 0 or v[i - 1] <= 0:
        return float(f[i])
    t = np.log(limit / v[i - 1]) / np.log(v[i] / v[i - 1])
    return float(np.exp(np.log(f[i - 1]) + t * (np.log(f[i]) - np.log(f[i - 1]))))


def predict_graph(dataset: str, setting: Setting, seed: int) -> dict:
    problem = Problem(dataset, setting.hidden, setting.grad_fanouts, seed)
    graph = problem.dataset.graph
    degree = graph.degrees().astype(float)
    rng = np.random.default_rng([seed, 43])
    count = min(setting.predict_nodes, int((degree > 0).sum()))
    targets = np.sort(rng.choice(graph.num_nodes, count, replace=False, p=degree / degree.sum()))
    k = setting.grad_fanouts[-1]
    fractions = tuple(setting.predict_fractions)
    v = input_mse(problem, targets, fractions, k)
    n = noise(problem, setting, seed)
    e_input = max(n["ns"] - n["upper"], 0.0)
    total_ns = n["batch"] + n["ns"]
    out = {"dataset": dataset, "fractions": fractions, "v": v, "noise": n, "predicted": {}}
    for est in ESTIMATORS:
        total = [n["batch"] + n["upper"] + e_input * x / max(v["ns"], 1e-30) for x in v[est]]
        out["predicted"][est] = {
            "input": crossing(fractions, v[est], v["ns"]),
            "noise": crossing(fractions, total, FACTOR * total_ns),
            "total": total,
        }
    out["total_ns"] = total_ns
    return out


def run(setting: Setting, seed: int = 0, measured: dict | None = None) -> dict:
    """Predictions on ``setting.predict_datasets``; ``measured`` maps ``(dataset, estimator)`` to
    the proper size claim 4 (or an accuracy experiment) measured (absent: nothing to compare)."""
    graphs = [predict_graph(name, setting, seed) for name in setting.predict_datasets]
    checks = []
    for g in graphs:
        for est in ESTIMATORS:
            pred = g["predicted"][est]["noise"]
            key = (g["dataset"], est)
            if measured is None or key not in measured:
                continue
            meas = measured[key]
            agree = (
                pred is not None and meas is not None and max(pred / meas, meas / pred) <= FACTOR
            )
            checks.append(
                Check(
                    claim=f"5. the predicted proper cache size of {est} is the measured one "
                    f"within {FACTOR:g}x ({g['dataset']})",
                    module="theory/predict.py",
                    measured=(
                        f"predicted {_pct(pred)} (noise budget; input level "
                        f"{_pct(g['predicted'][est]['input'])}), measured {_pct(meas)}"
                    ),
                    criterion=f"max(predicted/measured, measured/predicted) <= {FACTOR:g}",
                    passed=bool(agree),
                    finding=True,
                )
            )
    return {"checks": checks, "graphs": graphs}


def _pct(fraction) -> str:
    return "beyond the tested fractions" if fraction is None else f"{100 * fraction:.3g} %"


def table(result: dict) -> str:
    lines = []
    for g in result["graphs"]:
        n = g["noise"]
        lines += [
            f"{g['dataset']}: relative to ||grad f||^2 at initialisation, batch noise "
            f"{n['batch']:.3g}, NS sampling error {n['ns']:.3g} (of which the upper layer "
            f"{n['upper']:.3g}); NS input variance V_NS = {g['v']['ns']:.4g}.",
            "",
            "| estimator | " + " | ".join(f"V at {100 * f:g} %" for f in g["fractions"])
            + " | predicted: input level | predicted: noise budget |",
            "|---|" + "---|" * (len(g["fractions"]) + 2),
        ]  # fmt: skip
        for est in ESTIMATORS:
            cells = " | ".join(f"{x:.3g}" for x in g["v"][est])
            pred = g["predicted"][est]
            lines.append(f"| {est} | {cells} | {_pct(pred['input'])} | {_pct(pred['noise'])} |")
        lines.append("")
    return "\n".join(lines)
