"""Writes ``gns_jax/theory/README.md`` and ``figures/*.png`` beside it from a ``--full`` run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from gns_jax.theory import convergence, gradients, unbiased, variance
from gns_jax.theory.common import Check, Setting

INTRO = """\
# gns_jax/theory/: numerical checks of the GNS estimators and of the convergence claim

The GNS paper (Dong et al., KDD 2021) says that "with cached node data of a proper size, it enjoys
a comparable convergence rate as the underlying node-wise sampling method", and uses a cache of
1 % of the nodes. Its theorem, its assumptions and its cache size are not public, so this package
states its own assumptions and checks the claim numerically, on the library's own cache, samplers
and model (nothing here reimplements them). Every criterion is fixed in the code before its check
runs. There are two kinds of verdict:

* a **check** (PASS or FAIL) tests the implementation or the theory's own prediction; each check
  exists to catch a defect, and `tests/test_theory.py` puts that defect into the library
  (`gns_jax/theory/mutations.py`, ten of them: a dropped `q_v`, `pi = m p`, a cache ten times too
  small, a sampler that takes the first `K` neighbours, the `minimum` `q_v`, `d_v + 1`, a Hajek
  normaliser without `q_v`, an unscaled `hajek-fallback`, LADIES without its row normalisation,
  NS without its `1/k`) and asserts that the check then FAILs (checks 1c and 1d are newer than
  the run below, which does not hold them);
* a **finding** (HOLDS or DOES NOT HOLD) says whether one of the paper's claims holds on the
  measured numbers. A negative finding is a result, reported with its figures; it never reads
  PASS.

```
python -m gns_jax.theory              # small setting: every check and finding, ~2-5 min
python -m gns_jax.theory --full       # report setting: rewrites this file and figures/
                                      #   (matplotlib: pip install -e '.[theory]', or `make theory`)
python -m gns_jax.theory --only variance --json out.json  # one module, every figure as JSON
python -m gns_jax.theory --only unbiased --mutate drop-q  # that check with a defect put in: FAIL
python -m gns_jax.theory --jobs 1                         # one process (default 2 workers)
python -m gns_jax.theory --only convergence --set model_dataset=amazon_computers
                                      # any field of the setting changed
```

`second-graph/` holds the convergence module on other graphs (Amazon Computers, Tolokers, a
synthetic graph of the products-scale shape, Amazon Photo with 8 and 16 seeds), with its own
README and its runs in one archive, `second-graph/runs.tar.xz`. Those runs also hold the
verdicts of a former module, `predict.py`, which predicted the proper cache size from the closed
forms and gradient measurements; it was removed (its findings:
`docs/reports/2026-12-cache-size-prediction.md`), and the runs' `predict` entries are no longer
read.

This file was written by `python -m gns_jax.theory --full --json
gns_jax/theory/full-run.json.xz` (`make theory`); every number below is in that xz-compressed
JSON (`python -m gns_jax.theory --from-json gns_jax/theory/full-run.json.xz` redraws this file
and the plots from it without rerunning).
"""

ASSUMPTIONS = """\
## The setting and the assumptions

* Checks 1 and 2 (the estimators): `{dataset}` with a scalar node feature `x ~ N(1, 1)`, the
  library's GNS input layer with `K = {fanout}` cached neighbours at most, a cache of
  `m = ceil(rho n)` draws with replacement (deduplicated) from a degree-proportional (or the
  `min-variance`) distribution, and the estimators of `docs/algorithm.md`: Horvitz-Thompson
  (`ht`, weights `1 / (d_v pi_u q_v)`, `pi_u = 1 - (1 - p_u)^m`, `q_v = min(1, K / |N_C(v)|)`),
  its self-normalised form (`hajek`), clipped weights (`clipped`). Each Monte Carlo draw redraws
  the cache and the neighbour sample. A quarter of the target nodes are the highest-degree ones,
  where the cap `K` binds.
* Checks 3 to 5 (learning): a {layers}-layer GraphSAGE (hidden {hidden}, no dropout) on
  `{model_dataset}`, fan-outs {fanouts} (output layer first; GNS's input layer takes up to
  {fanout_in} cached neighbours, the layer above samples uniformly). The objective `f` is the
  exact full-neighbourhood cross-entropy over the training nodes.
* Check 4's theory: for an `L`-smooth `f` and stochastic gradients (a uniform batch of {batch}
  training nodes, its sampled blocks and, for GNS, a fresh cache) of variance `sigma^2` and bias
  `b`, SGD with the step `c / sqrt(T)` over a horizon `T` has
  `A(T) = (1/T) sum_t E||grad f(theta_t)||^2 <= 2 f(theta_0) / (c sqrt(T)) + c L sigma^2 /
  sqrt(T) + b^2`: the rate `T^-1/2` down to a floor set by the bias. The claim "comparable
  convergence rate" is tested on measured `A(T)` over a sweep of horizons, not on a bound whose
  constants are taken from the run it judges.
"""


def _cell(text: str) -> str:
    """Markdown table cell: ``|`` (as in ``|z|`` or ``||grad f||``) escaped."""
    return str(text).replace("|", "\\|")


def _summary(results: dict) -> str:
    lines = [
        "## Results, one row per check or finding",
        "",
        "| claim | module | measured | criterion | verdict |",
        "|---|---|---|---|---|",
    ]
    for result in results.values():
        for c in result["checks"]:
            lines.append(
                f"| {_cell(c.claim)} | `{c.module}` | {_cell(c.measured)} | {_cell(c.criterion)} "
                f"| {c.verdict} |"
            )
    return "\n".join(lines)


def _module(path: str) -> str:
    """A check's module; runs saved before the package moved into ``gns_jax`` name it
    ``theory/...``."""
    return f"gns_jax/{path}" if path.startswith("theory/") else path


def results_from_json(saved: dict) -> dict:
    """The results of a run from its ``--json`` file (checks and arrays restored)."""
    results = {}
    for name, result in saved.items():
        if name not in ("unbiased", "variance", "gradients", "convergence"):
            continue  # a removed module's results (predict, in runs saved before it went)
        result = dict(result)
        result["checks"] = [
            Check(**{**c, "module": _module(c["module"])}) for c in result["checks"]
        ]
        if name == "variance":
            for part, keys in {
                "sweep": ("rho", "measured", "closed"),
                "per_node": ("degree", "measured", "predicted", "ns_measured", "ns_predicted"),
            }.items():
                result[part] = {
                    k: np.asarray(v) if k in keys else v for k, v in result[part].items()
                }
        if name == "convergence" and "proper" in result:
            result = convergence.rejudge(result)  # finding 4b by the current test
        results[name] = result
    return results


def write_report(results: dict, setting: Setting, folder: Path, env: str, elapsed: float):
    """Rewrites ``folder/README.md`` and the plots in ``folder/figures``."""
    figures = folder / "figures"
    figures.mkdir(exist_ok=True)
    parts = [
        INTRO,
        ASSUMPTIONS.format(
            dataset=setting.dataset,
            fanout=setting.fanout,
            layers=len(setting.grad_fanouts),
            hidden=setting.hidden,
            model_dataset=setting.model_dataset,
            fanouts=",".join(map(str, setting.grad_fanouts)),
            fanout_in=setting.grad_fanouts[-1],
            batch=setting.conv_batch_size,
        ),
        _summary(results),
        f"\nRun: `python -m gns_jax.theory --full`, {elapsed / 60:.0f} min on {env}. Setting: "
        + ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(setting).items() if k != "name")
        + ".",
        _findings(results),
    ]
    if "unbiased" in results:
        parts += ["## 1. Unbiasedness (`unbiased.py`)", unbiased.table(results["unbiased"])]
    if "variance" in results:
        variance.plot(results["variance"], figures / "variance.png")
        parts += [
            "## 2. Variance (`variance.py`)",
            variance.table(results["variance"]),
            "![variance](figures/variance.png)",
        ]
    if "gradients" in results:
        gradients.plot(results["gradients"], figures / "gradients.png")
        parts += [
            "## 3. Gradient error (`gradients.py`)",
            f"Relative to the exact mini-batch gradient `g*` of the same seeds "
            f"({results['gradients']['params']:,} parameters); mean over batches.",
            gradients.table(results["gradients"]),
            "![gradients](figures/gradients.png)",
        ]
    if "convergence" in results:
        convergence.plot(results["convergence"], figures / "convergence.png")
        parts += [
            "## 4. Convergence rate (`convergence.py`)",
            convergence.table(results["convergence"]),
            "![convergence](figures/convergence.png)",
        ]
    (folder / "README.md").write_text("\n\n".join(parts) + "\n")


def _pct(fraction) -> str:
    return "none of the tested fractions" if fraction is None else f"{100 * fraction:g} %"


def _findings(results: dict) -> str:
    """What the figures say, in words, generated from the figures themselves."""
    lines = ["## What this says"]
    checks = [c for r in results.values() for c in r["checks"]]
    failed = [c for c in checks if not c.finding and not c.passed]
    lines.append(
        f"* Checks: {sum(not c.finding for c in checks) - len(failed)} of "
        f"{sum(not c.finding for c in checks)} PASS"
        + ("" if not failed else " (FAIL: " + "; ".join(c.claim for c in failed) + ")")
        + "."
    )
    if "variance" in results:
        sweep = results["variance"]["sweep"]
        i = int(np.argmin(np.abs(np.log(np.asarray(sweep["rho"]) / 0.01))))
        ns_mean = {str(k): v for k, v in sweep["ns_mean"].items()}
        lines.append(
            f"* The variance of the HT input aggregate follows its closed form node by node and "
            f"scales as 1/rho (slope {sweep['slope']:.3f} ± {sweep['slope_se']:.3f}); at "
            f"rho = {100 * sweep['rho'][i]:.2g} % its mean is "
            f"{sweep['measured'][i] / ns_mean['10']:,.0f}x node-wise sampling's with K = 10, and "
            f"{100 * results['variance']['empty'][i]['measured']:.0f} % of the nodes have no "
            "cached neighbour at all."
        )
        est = results["variance"].get("estimators", [])
        if est:
            smallest = min(r["fraction"] for r in est)
            pick = {(r["estimator"], r["dist"]): r for r in est if r["fraction"] == smallest}
            lines.append(
                f"* Lower-variance estimators at rho = {100 * smallest:g} % (MSE relative to NS's "
                "variance): "
                + ", ".join(
                    f"{e} with a {d} cache {r['mse_vs_ns']:.3g}" for (e, d), r in pick.items()
                )
                + "."
            )
    if "gradients" in results:
        for c in results["gradients"]["checks"]:
            if c.finding:
                lines.append(f"* {c.claim}: **{c.verdict}** ({c.measured}).")
    if "convergence" in results:
        conv = results["convergence"]
        for est, proper in conv["proper"].items():
            at_one = [c for c in conv["checks"] if c.finding and f"GNS {est} at 1 %" in c.claim]
            lines.append(
                f"* Convergence, GNS {est}: the smallest tested fraction whose A(T) is not above "
                f"NS's at any horizon (finding 4b's test, false-positive rate 5 %) is "
                f"**{_pct(proper)}**"
                + (
                    f"; at the paper's 1 % the claim **{at_one[0].verdict}** ({at_one[0].measured})"
                    if at_one
                    else ""
                )
                + "."
            )
    return "\n".join(lines)
