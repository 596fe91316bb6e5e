"""The size study's aggregation: gaps to NS over seeds, the cache statistics that may explain
them, the table, the plots (``experiments/size_study.py`` runs the study).

For every graph row (a dataset and a depth) with both samplers, the runs are paired by seed:

* the *final gap*, GNS's test accuracy after the last epoch minus NS's, in points;
* the *curve gap*, the same for the mean of the test accuracy over the epochs (the area under
  the accuracy curve: a cache that learns more slowly shows there even when both end at 99 %);

each as mean ± standard deviation over the seeds, beside NS's figures and the rows GNS moves
per batch against NS's.

Candidate statistics of the graph and its 1 % degree cache, in closed form over node-wise
sampled batches of the graph (:mod:`gns_jax.cachestats`: expectations over the cache's draws,
so one figure per graph and depth, kept in ``OUT/stats/``):

* ``no_cached_share``: the share of the input block's destination nodes (the layer-1 nodes,
  whose input-layer neighbours GNS takes from the cache) that have no cached neighbour at all:
  under ``hajek`` their aggregated input is zero;
* ``cached_neighbours``: the mean number of cached neighbours of a layer-1 node (all of them,
  not the sampled at most 10);
* ``cache_nodes``: the cache's absolute size, its expected distinct nodes;
* ``rows_vs_ns``: the feature rows GNS moves per batch against NS's (measured in the runs).

Each candidate is held against the per-row mean gaps by Pearson's r (on the logarithm for the
cache's size) over the 3-layer rows and over all rows; the one with the largest |r| on the curve
gap over all rows is the one plotted large.

    python -m experiments.size_report --out experiments/reports/size-study --stats   # measure
    python -m experiments.size_report --out experiments/reports/size-study           # report
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

import numpy as np

from experiments.grid import environment_line, file_name, load_folder, mean_std, pm
from experiments.size_study import batches_per_epoch
from gns_jax.plan import choose, no_cached_limit, passes
from gns_jax.plotting import save_png

__all__ = ["CANDIDATES", "measure_statistics", "report", "rows"]

CANDIDATES = {
    "no_cached_share": "share of layer-1 nodes without a cached neighbour",
    "cached_neighbours": "cached neighbours per layer-1 node",
    "cache_nodes": "cache size (distinct nodes, log scale)",
    "rows_vs_ns": "rows moved vs NS",
}
LOG_SCALE = ("cache_nodes",)
STAT_BATCHES = 8  # batches of epoch 0 measured per (graph, depth, seed)
EARLY = 5  # epochs: the products-scale runs' length, the horizon of the early curve gap
HORIZON_NODES = 200_000  # the horizon table's graphs: where 1 % keeps up over 10 epochs


def depth_of(label: str) -> str:
    return label.split()[-1]  # "NS 3-layer", "GNS 1% 3-layer", "GNS 1% products"


def sampler_of(label: str) -> str:
    """``NS``, ``GNS`` (the fixed 1 % cache), ``AUTO`` (``--cache-fraction auto``) or, for a
    larger fixed cache, its label without the depth (``GNS 10%``)."""
    if label.startswith("NS"):
        return "NS"
    if " auto " in f" {label} ":
        return "AUTO"
    head = label.rsplit(" ", 1)[0]
    return "GNS" if head == "GNS 1%" else head


def nodes_label(n: int) -> str:
    """A graph's size in a figure: ``20k``, ``1M``, ``2.4M``."""
    return f"{n // 1000}k" if n < 1_000_000 else f"{n / 1e6:g}M"


def is_products(entry: dict) -> bool:
    return entry["depth"] == "products"


def family_of(entry: dict) -> str:
    """The graph family of a report row: the products-scale graph or the weak-feature ones."""
    return "products" if is_products(entry) else "weak-feature"


def nodes_of(result: dict) -> int:
    return int(result["num_nodes"])


def degree_of(dataset: str) -> str:
    """The ``degree=`` option of a synthetic spec ("-" for a saved folder)."""
    found = re.search(r"degree=([0-9.]+)", dataset)
    return found.group(1) if found else "-"


def curve(result: dict) -> np.ndarray:
    return np.array([e["test_accuracy"] for e in result["epochs"]], dtype=float)


def stats_name(dataset: str, fanouts) -> str:
    return f"{file_name(dataset)}__{'-'.join(map(str, fanouts))}.json"


def measure_statistics(dataset: str, fanouts, batch_size: int = 1000,
                       fraction: float = 0.01, batches: int = STAT_BATCHES) -> dict:  # fmt: skip
    """The closed-form cache statistics (:mod:`gns_jax.cachestats`) of a 1 % degree cache on
    ``dataset`` over ``batches`` node-wise sampled batches of its training nodes (seed 0)."""
    from gns_jax.cache import cache_distribution, cache_size
    from gns_jax.cachestats import cache_statistics, sample_layer_sets
    from gns_jax.config import TrainConfig
    from gns_jax.data import load_dataset
    from gns_jax.plan import plan_cache_fraction

    data = load_dataset(dataset)
    rng = np.random.default_rng(0)
    sets = sample_layer_sets(data.graph, data.train_idx, fanouts, batch_size, rng, batches)
    p = cache_distribution(data.graph, "degree")
    stats = cache_statistics(data.graph, p, cache_size(fraction, data.num_nodes), sets)
    # what --cache-fraction auto answers on this graph, and its cost (the dataset loaded)
    config = TrainConfig(dataset=dataset, fanouts=tuple(fanouts), batch_size=batch_size,
                         cache_fraction="auto", seed=0)  # fmt: skip
    plan = plan_cache_fraction(data, config)
    with open("/proc/loadavg") as f:
        load = float(f.read().split()[0])
    return dict(dataset=dataset, fanouts=list(fanouts), fraction=fraction, batches=batches,
                layer1_nodes=float(np.mean([s.size for s in sets.layer1])), **stats,
                plan=dict(chosen=plan["chosen"], keeps_up=plan["keeps_up"],
                          seconds=plan["seconds"], load_average=load,
                          measured=plan["measured"]))  # fmt: skip


def fill_statistics(out: Path) -> None:
    """Measures every (dataset, fan-outs) of a completed GNS run that has no stats file."""
    folder = out / "stats"
    folder.mkdir(parents=True, exist_ok=True)
    for r in load_folder(out):
        if sampler_of(r["label"]) != "GNS":
            continue
        fanouts = r["config"]["fanouts"]
        path = folder / stats_name(r["dataset"], fanouts)
        if path.is_file():
            continue
        print(f"stats: {r['dataset']} {fanouts}", flush=True)
        stats = measure_statistics(r["dataset"], fanouts, r["config"]["batch_size"])
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(stats, indent=1))
        os.replace(tmp, path)


def rows(out: Path) -> list[dict]:
    """One entry per (dataset, depth) with both samplers: gaps paired by seed, the statistics."""
    results = load_folder(out)
    keyed: dict[tuple[str, str], dict[str, dict[int, dict]]] = {}
    for r in results:
        key = (r["dataset"], depth_of(r["label"]))
        keyed.setdefault(key, {}).setdefault(sampler_of(r["label"]), {})[r["seed"]] = r
    entries = []
    for (dataset, depth), by in keyed.items():
        seeds = sorted(set(by.get("NS", {})) & set(by.get("GNS", {})))
        if not seeds:
            continue
        ns = [by["NS"][s] for s in seeds]
        gns = [by["GNS"][s] for s in seeds]
        one = paired(by["NS"], by["GNS"])  # the 1 % cache against NS
        path = out / "stats" / stats_name(dataset, gns[0]["config"]["fanouts"])
        stats = json.loads(path.read_text()) if path.is_file() else None

        def pct(results, f):
            return [100 * f(curve(r)) for r in results]

        def clock(results):
            return np.mean([np.cumsum([e["time_s"] for e in r["epochs"]]) for r in results], 0)

        entry = dict(
            dataset=dataset, depth=depth, nodes=nodes_of(ns[0]), seeds=seeds,
            fanouts=ns[0]["config"]["fanouts"], epochs=len(ns[0]["epochs"]),
            ns_final=pct(ns, lambda c: c[-1]), gns_final=pct(gns, lambda c: c[-1]),
            ns_over=pct(ns, np.mean), gns_over=pct(gns, np.mean),
            final_gap=one["final_gap"], curve_gap=one["curve_gap"], rows_vs_ns=one["rows_vs_ns"],
            one_percent=one,
            ns_epoch_s=float(np.mean([n["epoch_time_s"] for n in ns])),
            gns_epoch_s=float(np.mean([g["epoch_time_s"] for g in gns])),
            ns_curve=np.mean([curve(n) for n in ns], axis=0).tolist(),
            gns_curve=np.mean([curve(g) for g in gns], axis=0).tolist(),
            ns_clock=clock(ns).tolist(), gns_clock=clock(gns).tolist(),
            allowance_s=float(np.mean([allowance(n) for n in ns])),
            plan=stats.get("plan") if stats else None,
        )  # fmt: skip
        for name in ("no_cached_share", "cached_neighbours", "cache_nodes"):
            entry[name] = stats[name] if stats else None
        entry["auto"] = planner_runs(by.get("NS", {}), by.get("AUTO", {}))
        entry["fixed"] = {
            name: paired(by["NS"], runs)
            for name, runs in by.items()
            if name.startswith("GNS ") and set(runs) & set(by.get("NS", {}))
        }  # the larger fixed caches, by label
        entries.append(entry)
    entries.sort(key=lambda e: (e["depth"] != "3-layer", e["depth"], e["nodes"], e["dataset"]))
    return entries


def planner_runs(ns: dict[int, dict], auto: dict[int, dict]) -> dict | None:
    """The ``--cache-fraction auto`` runs against NS, paired by seed: what the planner chose in
    each run, its cost there, and the gaps of the run it chose (``None`` without such runs)."""
    out = paired(ns, auto)
    if out is not None:
        seeds = out["seeds"]
        out["plan_s"] = [float(auto[s]["plan"]["seconds"]) for s in seeds]
    return out


def paired(ns: dict[int, dict], gns: dict[int, dict]) -> dict | None:
    """GNS runs (any cache fraction) against NS's run of the same seed: the fraction of each,
    the final and curve gaps and the rows moved against NS's (``None`` without a pair)."""
    seeds = sorted(set(ns) & set(gns))
    if not seeds:
        return None
    pairs = [(gns[s], ns[s]) for s in seeds]
    return dict(
        seeds=seeds,
        chosen=[float(a["cache_fraction"]) for a, _ in pairs],
        curve=np.mean([curve(a) for a, _ in pairs], axis=0).tolist(),  # over the seeds
        planned=all("plan" in a for a, _ in pairs),  # --cache-fraction auto runs
        final_gap=[100 * (curve(a)[-1] - curve(n)[-1]) for a, n in pairs],
        curve_gap=[100 * (curve(a).mean() - curve(n).mean()) for a, n in pairs],
        first_gap=[100 * (curve(a)[0] - curve(n)[0]) for a, n in pairs],
        epoch_gaps=[(100 * (curve(a) - curve(n))).tolist() for a, n in pairs],
        early_gap=[100 * (curve(a)[:EARLY].mean() - curve(n)[:EARLY].mean()) for a, n in pairs],
        rows_vs_ns=float(
            np.mean([a["h2d_rows_per_batch"] / n["h2d_rows_per_batch"] for a, n in pairs])
        ),  # fmt: skip
    )


def allowance(ns_run: dict) -> float:
    """The planner's allowance on a graph: the larger of two NS epochs (the median epoch) and
    15 % of the NS run's summed epoch times, compilation included."""
    times = [e["time_s"] for e in ns_run["epochs"]]
    return max(2 * float(np.median(times)), 0.15 * float(np.sum(times)))


def keeps_up(entry: dict) -> bool:
    """1 % keeps up: final within 1 point of NS, the mean over the epochs within 3, at most 0.6
    of NS's rows."""
    return (
        np.mean(entry["final_gap"]) >= -1
        and np.mean(entry["curve_gap"]) >= -3
        and entry["rows_vs_ns"] <= 0.6
    )


def graph_cells(e: dict) -> str:
    """The first cells of a plan or auto table's row: family, nodes, degree, depth."""
    return f"| {family_of(e)} | {e['nodes']:,} | {degree_of(e['dataset'])} | {e['depth']} |"


def replay(entry: dict, **rules) -> tuple[float, bool] | None:
    """The planner's choice under its current rules (:func:`gns_jax.plan.passes` and
    :func:`~gns_jax.plan.choose`; ``rules`` overrides their limits) on the statistics
    its run on this graph recorded, which do not depend on the rules: ``(chosen, keeps_up)``,
    ``None`` without them."""
    plan = entry.get("plan")
    if not plan:
        return None
    limit = rules.pop("limit", no_cached_limit(len(entry["fanouts"])))
    small = {k: rules.pop(k) for k in ("small_graph_rows",) if k in rules}  # choose()'s
    measured = [m | dict(keeps_up=passes(m, limit=limit, **rules)) for m in plan["measured"]]
    return choose(measured, limit, **small)


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def trained_at(entry: dict, fraction: float) -> list[dict]:
    """This graph's sets of runs at a cache ``fraction`` against NS, each paired by seed: the
    1 % row, a larger fixed cache, the ``auto`` runs that all chose it (the study's seeds or
    the held-out ones); empty if none was trained."""
    if fraction == 0.01:
        return [entry]
    sets = list(entry.get("fixed", {}).values()) + [entry.get("auto")]
    return [a for a in sets if a and set(a["chosen"]) == {fraction}]


def plan_table(entries: list[dict]) -> str:
    lines = [
        "| graph | nodes | degree | depth | 1 % keeps up | `auto` picks | share at its pick | "
        "its runs keep up | planner s | allowance s | load |",
        "|" + "---|" * 11,
    ]
    for e in entries:
        plan = e.get("plan")
        if not plan:
            continue
        chosen, ok = replay(e)
        pick = next(m for m in plan["measured"] if m["fraction"] == chosen)
        verdict = " + ".join(
            f"{'yes' if keeps_up(runs) else 'no'} ({plural(len(runs['seeds']), 'seed')})"
            for runs in trained_at(e, chosen)
        )
        lines.append(
            f"{graph_cells(e)} {'yes' if keeps_up(e) else 'no'} | "
            f"{chosen:g}{'' if ok else ' (none keeps up)'} | {pick['no_cached_share']:.3f} | "
            f"{verdict or 'not trained'} | {plan['seconds']:.2f} | {e['allowance_s']:.1f} | "
            f"{plan['load_average']:.1f} |"
        )
    return "\n".join(lines)


def auto_table(entries: list[dict]) -> str:
    """The planner's picks trained against NS: does the run it chose keep up?"""
    lines = [
        "| graph | nodes | degree | depth | seeds | `auto` chose | planner s | allowance s | "
        "final gap (points) | curve gap (points) | rows vs NS | keeps up |",
        "|" + "---|" * 12,
    ]
    for e in entries:
        a = e.get("auto")
        if not a:
            continue
        n = len(a["seeds"])
        chosen = ", ".join(sorted({f"{c:g}" for c in a["chosen"]}))
        lines.append(
            f"{graph_cells(e)} {n} | {chosen} | "
            f"{max(a['plan_s']):.2f} | {e['allowance_s']:.1f} | "
            f"{pm(*mean_std(a['final_gap']), n)} | {pm(*mean_std(a['curve_gap']), n)} | "
            f"{a['rows_vs_ns']:.2f} | {'yes' if keeps_up(a) else 'no'} |"
        )
    return "\n".join(lines)


def fractions_table(entries: list[dict]) -> str:
    """On the graphs trained with larger fixed caches: every fraction trained there (1 %, the
    larger ones, ``auto``'s pick), its planner statistics (seed 0's plan) and the run against
    NS, paired by seed; ``keeps up`` as in the ``auto`` table."""
    lines = [
        "| graph | nodes | degree | depth | cache | seeds | share without a cached nbr | "
        "cache nodes | final gap (points) | curve gap (points) | rows vs NS | keeps up |",
        "|" + "---|" * 12,
    ]
    for e in entries:
        if not e.get("fixed"):
            continue
        trained = [("1%", e["one_percent"])] + sorted(
            e["fixed"].items(), key=lambda kv: kv[1]["chosen"][0]
        )
        if e.get("auto"):
            trained.append(("auto", e["auto"]))
        measured = {m["fraction"]: m for m in (e.get("plan") or {}).get("measured", [])}
        for name, a in sorted(trained, key=lambda kv: (kv[1]["chosen"][0], kv[0] == "auto")):
            n, fraction = len(a["seeds"]), a["chosen"][0]
            m = measured.get(fraction)
            what = f"{fraction:g}"
            if name == "auto":
                what = f"auto when trained ({fraction:g})"
            elif a.get("planned"):  # the held-out seeds' auto runs (size_study.VALIDATION)
                what = f"held-out auto ({fraction:g}), seeds {a['seeds'][0]}-{a['seeds'][-1]}"
            stats = f"{m['no_cached_share']:.3f} | {m['cache_nodes']:,.0f}" if m else "- | -"
            lines.append(
                f"{graph_cells(e)} {what} | {n} | {stats} | "
                f"{pm(*mean_std(a['final_gap']), n)} | {pm(*mean_std(a['curve_gap']), n)} | "
                f"{a['rows_vs_ns']:.2f} | {'yes' if keeps_up(a) else 'no'} |"
            )
    return "\n".join(lines)


def horizon_sets(entries: list[dict]) -> list[tuple[dict, dict]]:
    """The horizon table's rows: ``(entry, runs)`` for each cache trained on a 3-layer graph of
    at least :data:`HORIZON_NODES` nodes or at products scale, by graph and fraction."""
    out = []
    for e in entries:
        if e["depth"] == "2-layer" or e["nodes"] < HORIZON_NODES:
            continue
        sets = [e["one_percent"]] + list(e.get("fixed", {}).values())
        out += [(e, a) for a in sorted(sets, key=lambda a: a["chosen"][0])]
    return out


def plot_horizon(sets: list[tuple[dict, dict]], path: Path, plt) -> Path:
    """GNS minus NS in test accuracy after each epoch, mean ± std over the paired seeds, one
    line per graph and cache, against the epoch (left) and the training steps (right, log
    scale): the lag sits where NS takes off, in the first epoch of the larger graphs."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.7), sharey=True)
    for i, (e, a) in enumerate(sets):
        gaps = np.array(a["epoch_gaps"])
        m = gaps.mean(0)
        s = gaps.std(0, ddof=1) if len(gaps) > 1 else np.zeros_like(m)
        epochs = np.arange(1, m.size + 1)
        steps = epochs * batches_per_epoch(e["nodes"])
        name = "products" if is_products(e) else f"{nodes_label(e['nodes'])} nodes"
        label = f"{name}, {a['chosen'][0]:.0%} ({plural(len(gaps), 'seed')})"
        for ax, x in zip(axes, (epochs, steps)):
            ax.plot(x, m, marker="o", ms=3, color=f"C{i}", label=label)
            ax.fill_between(x, m - s, m + s, color=f"C{i}", alpha=0.15, lw=0)
    for ax in axes:
        ax.axhline(0, color="grey", lw=0.6)
    axes[0].axvline(EARLY + 0.5, color="grey", lw=0.6, ls=":")
    axes[0].set_xlabel(f"epoch (dotted: the products runs' {EARLY})")
    axes[1].set_xlabel("training steps (batches of 1000)")
    axes[1].set_xscale("log")
    axes[0].set_ylabel("GNS - NS, test accuracy (points)")
    axes[0].legend(fontsize=7)
    fig.suptitle("3 layers (15,10,5): the cache's lag behind NS, mean ± std over seeds", fontsize=9)
    fig.tight_layout()
    save_png(fig, path, dpi=110)
    plt.close(fig)
    return path


def horizon_table(entries: list[dict]) -> str:
    """On the 3-layer graphs of at least :data:`HORIZON_NODES` nodes and at products scale:
    each cache trained there against NS, paired by seed, over three horizons: the first epoch,
    the first :data:`EARLY` epochs (the products runs' length) and the whole run."""
    lines = [
        "| graph | nodes | cache | seeds | epochs | first epoch gap | curve gap, "
        f"{EARLY} epochs | curve gap, all | final gap | rows vs NS |",
        "|" + "---|" * 10,
    ]
    for e, a in horizon_sets(entries):
        n = len(a["seeds"])
        lines.append(
            f"| {family_of(e)} | {e['nodes']:,} | {a['chosen'][0]:.0%} | {n} | {e['epochs']} | "
            + " | ".join(
                pm(*mean_std(a[k]), n) for k in ("first_gap", "early_gap", "curve_gap", "final_gap")
            )
            + f" | {a['rows_vs_ns']:.2f} |"
        )
    return "\n".join(lines)


def correlations(entries: list[dict]) -> dict[str, dict[str, float | None]]:
    """Pearson's r of each candidate against the mean final and curve gaps, over the 3-layer
    rows and over every synthetic row (products aside: another family)."""
    out = {}
    for name in CANDIDATES:
        out[name] = {}
        for subset, keep in (("3-layer", ("3-layer",)), ("all", ("3-layer", "2-layer"))):
            es = [e for e in entries if e["depth"] in keep and e.get(name) is not None]
            for gap in ("final_gap", "curve_gap"):
                if len(es) < 3:
                    out[name][f"{gap} {subset}"] = None
                    continue
                x = np.array([e[name] for e in es], dtype=float)
                x = np.log10(x) if name in LOG_SCALE else x
                y = np.array([np.mean(e[gap]) for e in es])
                ok = np.std(x) > 0 and np.std(y) > 0
                out[name][f"{gap} {subset}"] = float(np.corrcoef(x, y)[0, 1]) if ok else None
    return out


def _fmt(v, digits=3):
    return "-" if v is None else f"{v:.{digits}f}"


def table(entries: list[dict]) -> str:
    lines = [
        "| graph | nodes | degree | depth (fan-outs) | epochs | seeds | NS final % | "
        "GNS 1 % final % | final gap (points) | curve gap (points) | rows vs NS | "
        "no cached nbr | cached nbrs | cache nodes |",
        "|" + "---|" * 14,
    ]
    for e in entries:
        n = len(e["seeds"])
        lines.append(
            f"| {family_of(e)} | {e['nodes']:,} | {degree_of(e['dataset'])} | "
            f"{e['depth']} ({','.join(map(str, e['fanouts']))}) | "
            f"{e['epochs']} | {n} | {pm(*mean_std(e['ns_final']), n)} | "
            f"{pm(*mean_std(e['gns_final']), n)} | {pm(*mean_std(e['final_gap']), n)} | "
            f"{pm(*mean_std(e['curve_gap']), n)} | {e['rows_vs_ns']:.2f} | "
            f"{_fmt(e['no_cached_share'])} | {_fmt(e['cached_neighbours'], 2)} | "
            + ("-" if e["cache_nodes"] is None else f"{e['cache_nodes']:,.0f}")
            + " |"
        )
    return "\n".join(lines)


def correlation_table(corr: dict) -> str:
    cols = ["final_gap 3-layer", "curve_gap 3-layer", "final_gap all", "curve_gap all"]
    lines = ["| candidate | " + " | ".join(f"r, {c}" for c in cols) + " |", "|" + "---|" * 5]
    for name, rs in corr.items():
        lines.append(f"| {CANDIDATES[name]} | " + " | ".join(_fmt(rs[c], 2) for c in cols) + " |")
    return "\n".join(lines)


def best_candidate(corr: dict) -> str | None:
    scored = [(abs(rs["curve_gap all"]), n) for n, rs in corr.items() if rs["curve_gap all"]]
    return max(scored)[1] if scored else None


def plot(entries: list[dict], corr: dict, folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    synthetic = [e for e in entries if not is_products(e)]
    # the gaps against every candidate
    fig, axes = plt.subplots(2, len(CANDIDATES), figsize=(3.4 * len(CANDIDATES), 6.2))
    for column, name in enumerate(CANDIDATES):
        for row, gap in enumerate(("final_gap", "curve_gap")):
            ax = axes[row][column]
            for e in synthetic:
                if e.get(name) is None:
                    continue
                m, s = mean_std(e[gap])
                marker = "o" if e["depth"] == "3-layer" else "s"
                ax.errorbar(e[name], m, yerr=s, fmt=marker, color="C0" if marker == "o" else "C1")
                text = f"{nodes_label(e['nodes'])} d{degree_of(e['dataset'])}"
                ax.annotate(text, (e[name], m), fontsize=6, xytext=(3, 3),
                            textcoords="offset points")  # fmt: skip
            if name in LOG_SCALE:
                ax.set_xscale("log")
            ax.axhline(0, color="grey", lw=0.6)
            r = corr[name][f"{gap} all"]
            ax.set_title(f"r = {_fmt(r, 2)}", fontsize=8)
            if row == 1:
                ax.set_xlabel(CANDIDATES[name], fontsize=8)
        axes[0][0].set_ylabel("final gap, GNS 1 % - NS (points)")
        axes[1][0].set_ylabel("curve gap (points)")
    fig.suptitle("GNS at 1 % against NS: circles 3 layers (15,10,5), squares 2 layers (10,5)")
    fig.tight_layout()
    paths.append(folder / "gap-vs-statistics.png")
    save_png(fig, paths[-1], dpi=110)
    plt.close(fig)
    # accuracy per epoch and against time, one column a row of the table
    fig, axes = plt.subplots(2, len(entries), figsize=(2.6 * len(entries), 5.2), squeeze=False)
    for column, e in enumerate(entries):
        top, bottom = axes[0][column], axes[1][column]
        for label, c, t in (("NS", e["ns_curve"], e["ns_clock"]),
                            ("GNS 1 %", e["gns_curve"], e["gns_clock"])):  # fmt: skip
            c = 100 * np.array(c)
            top.plot(np.arange(1, c.size + 1), c, label=label)
            bottom.plot(t, c, label=label)
        top.set_title(f"{nodes_label(e['nodes'])}, {e['depth']}", fontsize=8)
        top.set_xlabel("epoch", fontsize=8)
        bottom.set_xlabel("training s", fontsize=8)
    axes[0][0].set_ylabel("test accuracy % (mean over seeds)")
    axes[1][0].set_ylabel("test accuracy %")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    paths.append(folder / "curves.png")
    save_png(fig, paths[-1], dpi=100)
    plt.close(fig)
    large = horizon_sets(entries)
    if large:
        paths.append(plot_horizon(large, folder / "gap-per-epoch.png", plt))
    checked = [e for e in entries if e.get("fixed")]
    if checked:
        paths.append(plot_fractions(checked, folder / "fractions.png", plt))
    return paths


def plot_fractions(entries: list[dict], path: Path, plt) -> Path:
    """Accuracy per epoch (mean over seeds) of NS and every cache trained on the graphs with
    larger fixed caches: does a larger cache learn as fast as NS?"""
    fig, axes = plt.subplots(1, len(entries), figsize=(4.6 * len(entries), 3.6), squeeze=False)
    for ax, e in zip(axes[0], entries):
        lines = [("NS", e["ns_curve"], "k"), ("1%", e["gns_curve"], None)]
        fixed = [a for a in e["fixed"].values() if not a.get("planned")]  # the study's seeds
        for a in sorted(fixed, key=lambda a: a["chosen"][0]):
            lines.append((f"{a['chosen'][0]:.0%}", a["curve"], None))
        if e.get("auto"):
            chosen = e["auto"]["chosen"][0]  # the rules of the runs' time: replay() for today's
            lines.append((f"auto when trained ({chosen:.0%})", e["auto"]["curve"], None))
        for label, c, color in lines:
            c = 100 * np.array(c)
            style = dict(color=color, lw=2) if color else dict(ls="--" if "auto" in label else "-")
            ax.plot(np.arange(1, c.size + 1), c, label=label, **style)
        ax.set_title(f"{nodes_label(e['nodes'])} nodes, degree {degree_of(e['dataset'])}, "
                     f"{e['depth']}", fontsize=9)  # fmt: skip
        ax.set_xlabel("epoch")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("test accuracy % (mean over seeds)")
    fig.tight_layout()
    save_png(fig, path, dpi=100)
    plt.close(fig)
    return path


def report(out: Path) -> str:
    """Writes ``OUT/size-study.md``, ``OUT/size-study.json`` (the aggregated rows) and the
    figures in ``OUT/figures``; returns the markdown."""
    entries = rows(out)
    corr = correlations(entries)
    best = best_candidate(corr)
    results = load_folder(out)
    if entries:
        plot(entries, corr, out / "figures")
    text = (
        "# Where a 1 % cache is enough: GNS at 1 % (`hajek`) against NS over graph sizes\n\n"
        "Weak-feature synthetic graphs (degree 30, 100 features, 20 classes, signal 0.1); "
        "batch 1000; gaps are GNS minus NS paired by seed, mean ± std over seeds, in points of "
        "test accuracy. The curve gap is the gap of the mean test accuracy over the epochs. "
        "Options per row in `experiments/size_study.py`.\n\n"
        f"{table(entries)}\n\n"
        "Pearson's r between each candidate statistic and the per-row mean gap (3-layer rows; "
        "every synthetic row):\n\n"
        f"{correlation_table(corr)}\n\n"
        + (
            f"Largest |r| on the curve gap over every row: **{CANDIDATES[best]}**.\n\n"
            if best
            else ""
        )
        + "What `--cache-fraction auto` picks on each graph under the planner's current rules "
        "(from the statistics of its run on the loaded graph, seed 0), whether the study's "
        "runs at that fraction keep up with NS (paired by seed, as below), the planner's cost "
        "against its allowance (the larger of two NS epochs and 15 % of the NS run's summed "
        "epoch times, from the NS runs beside it) and the 1-minute load average when it "
        "ran:\n\n"
        f"{plan_table(entries)}\n\n"
        "Where the study trained `--cache-fraction auto` (graphs where 1 % does not keep up): "
        "the fraction each run chose, the planner's largest cost in those runs, and the run "
        "against NS paired by seed; it keeps up when the final gap is within 1 point, the "
        "curve gap within 3 and its rows at most 0.6 of NS's:\n\n"
        f"{auto_table(entries)}\n\n"
        + (
            "Where the planner's pick did not keep up, larger fixed caches trained against NS "
            "(3 layers, paired by seed; the share and cache nodes are the planner's figures "
            "for that fraction). *Held-out auto*: `--cache-fraction auto` on seeds 4-7, under "
            "the rows limit of 0.55 without the small-graph rule (the rules between the "
            "study's `auto` runs and today's):\n\n" + f"{fractions_table(entries)}\n\n"
            if any(e.get("fixed") for e in entries)
            else ""
        )
        + "How long the run is matters on the large graphs: a 1 % cache lags NS in the "
        f"first epoch and then keeps pace, so the curve gap over the first {EARLY} epochs (the "
        "products-scale runs' length) is larger than over the whole run (gaps in points, "
        "paired by seed):\n\n"
        f"{horizon_table(entries)}\n\n" + f"{environment_line(results)}\n"
    )
    (out / "size-study.md").write_text(text)
    (out / "size-study.json").write_text(json.dumps(dict(rows=entries, r=corr), indent=1))
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stats", action="store_true", help="measure missing statistics first")
    args = parser.parse_args(argv)
    if args.stats:
        fill_statistics(args.out)
    print(report(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
