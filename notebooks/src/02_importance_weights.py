# %% [markdown]
# # 2. The importance weights: unbiased, and at what cost
#
# GNS's input layer reads, for a node `v`, only neighbours that are in the cache `C`, at most
# `K` of them. Which neighbours those are depends on the cache draw, and the draw favours
# high-degree nodes. The importance weights undo that preference. This notebook derives them,
# checks numerically that they make the aggregate unbiased (and that the alternatives the
# official code shipped do not), and measures what they cost in variance, against lower-variance
# estimators the library also offers.
#
# ## The derivation
#
# * The cache is `m` draws with replacement from `p` (here `p_u ∝ d_u`), deduplicated. Node `u`
#   is in it unless all `m` draws miss it: `pi_u = P(u in C) = 1 - (1 - p_u)^m`.
# * Of `v`'s cached neighbours `N_C(v)`, the input layer keeps a uniform subset `S_v` of
#   `min(K, |N_C(v)|)`. Given the cache, a cached neighbour is kept with probability
#   `q_v = min(1, K / |N_C(v)|)`.
# * So `P(u in S_v) = pi_u q_v` (taking `q_v` from the realised cache, conditionally), and the
#   Horvitz-Thompson estimator of the neighbours' mean `mu_v = (1/d_v) sum_{u in N(v)} x_u` is
#
#   `h_v = sum_{u in S_v} x_u / (d_v pi_u q_v)`:
#
#   given `C`, `E[1{u in S_v}] / q_v = 1{u in C}`, and `E[1{u in C}] = pi_u`, so
#   `E[h_v] = (1/d_v) sum_u x_u = mu_v`. Nothing else is needed; it holds for every `v`.

# %%
import jax
import matplotlib.pyplot as plt
import numpy as np

from gns_jax import (
    GNSSampler,
    build_device_cache,
    cache_distribution,
    cache_size,
    draw_cache,
    load_dataset,
)
from gns_jax.plotting import Palette, legend, scale_for
from gns_jax.theory.variance import closed_form_variance, item3, ns_closed_form

data = load_dataset("cora")
graph = data.graph
degree = graph.degrees()
x = np.random.default_rng(7).normal(1.0, 1.0, graph.num_nodes)  # one scalar feature per node
senders, receivers = graph.edges()
mu = np.bincount(receivers, weights=x[senders], minlength=graph.num_nodes) / np.maximum(degree, 1)
# targets: 40 nodes, a quarter of them the highest-degree ones (where the cap K = 10 binds)
rng = np.random.default_rng(0)
hubs = np.argsort(-degree)[:10]
others = rng.choice(np.setdiff1d(np.flatnonzero(degree > 0), hubs), 30, replace=False)
targets = np.sort(np.concatenate([hubs, others]))
print(
    f"cora: {graph.num_nodes:,} nodes; target degrees from {degree[targets].min()} "
    f"to {degree[targets].max()}"
)

# %% [markdown]
# ## Unbiased, numerically
#
# For each of `R` draws: a fresh cache (the library's `draw_cache`), and one sampled input layer
# for the targets (a one-layer `GNSSampler`), whose block carries the estimator's coefficients
# in `edge_weight`. The same edges get each weighting: `ht` (the weights above), the official
# code's `minimum` variant (`q_v = K / min(|N_C|, K)`, a bug), and no weights at all (`none`,
# the plain mean of the cached neighbours).


# %%
def aggregates(fraction, weights, draws, dist="degree", seed=0):
    """[draws, targets] input aggregates of each weighting, on the same caches and edges."""
    m = cache_size(fraction, graph.num_nodes)
    p = cache_distribution(graph, dist, features=x[:, None])
    samplers = {w: GNSSampler(graph, (10,), len(targets), m, weights=w) for w in weights}
    seeds = samplers[weights[0]].pad_seeds(targets)
    zeros = np.zeros((graph.num_nodes, 1), np.float32)
    rng = np.random.default_rng([seed, int(fraction * 1e6)])
    out = {w: np.zeros((draws, len(targets))) for w in weights}
    for r in range(draws):
        cache, _ = build_device_cache(graph, zeros, draw_cache(rng, p, m), with_other=False)
        for w, sampler in samplers.items():
            block = jax.device_get(sampler.sample(jax.random.key(r), seeds, cache).blocks[0])
            values = block.edge_weight * x[np.maximum(block.src_nodes, 0)][block.senders]
            out[w][r] = np.bincount(block.receivers, values, minlength=block.num_dst)[
                : len(targets)
            ]
    return out


draws = 1500
values = aggregates(0.2, ("ht", "minimum", "none"), draws)
weights = Palette(["ht", "minimum", "none"])  # one style per weighting
fig, ax = plt.subplots(figsize=(9, 3.8), layout="constrained")
for w in values:
    mean = values[w].mean(0)
    se = values[w].std(0, ddof=1) / np.sqrt(draws)
    z = (mean - mu[targets]) / se
    ax.scatter(degree[targets], z, s=20, alpha=0.8, label=f"{w}: max |z| {np.abs(z).max():.1f}",
               **weights[w].points())  # fmt: skip
ax.axhspan(-3.5, 3.5, color="grey", alpha=0.2, label="|z| < 3.5")
scale_for(ax, degree[targets])  # degrees 1 to 168
ax.set_yscale("symlog")  # z from about 0 to hundreds, of both signs
ax.set_xlabel("degree of the target node")
ax.set_ylabel("z = (mean of R draws - mu_v) / SE")
ax.set_title("20 % cache, K = 10, 1500 cache draws")
legend(ax, inside=4, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
plt.show()

# %% [markdown]
# The Horvitz-Thompson aggregate's mean sits within Monte Carlo error of the true
# neighbourhood mean for every target, hubs included (where `|N_C(v)| > K` and `q_v < 1`
# matters). The `minimum` weights shrink every aggregate where the cap binds or few neighbours
# are cached, and the plain mean is pulled towards the cached (high-degree) neighbours and
# towards 0 when none is cached: both are biased by hundreds of standard errors.
#
# ## What unbiasedness costs
#
# The variance of `h_v` has a closed form (`docs/algorithm.md`, `gns_jax/theory/variance.py`): over
# the caches, `sum_u x_u^2 (1 - pi_u) / (d_v^2 pi_u)` plus the covariances of the inclusions, plus a
# term for the subsampling when the cap binds. For small caches `pi_u ≈ rho d_u / mean degree`, so
# the variance grows as `1 / rho`, and most for low-degree neighbours, which are rarely cached and
# then weighted by `1 / pi_u`. Node-wise sampling's `K`-neighbour mean has variance
# `sigma_v^2 (d_v - K) / (K (d_v - 1))`, zero when `d_v <= K`.

# %%
fractions = [0.01, 0.02, 0.05, 0.1, 0.2]
p_deg = cache_distribution(graph, "degree")
measured, closed = [], []
for rho in fractions:
    m = cache_size(rho, graph.num_nodes)
    v = aggregates(rho, ("ht",), 400, seed=1)["ht"]
    measured.append(v.var(0, ddof=1).mean())
    third = [
        item3(x[graph.neighbors(t)][:, None], p_deg[graph.neighbors(t)], m, degree[t], 10)
        for t in targets
    ]
    closed.append(np.mean(closed_form_variance(graph, x, targets, p_deg, m) + third))
ns_var = ns_closed_form(graph, x, targets, 10).mean()
ht = weights["ht"]
fig, ax = plt.subplots(figsize=(6.5, 3.8), layout="constrained")
ax.plot(fractions, closed, "-", color=ht.color, label="HT, closed form")
ax.scatter(fractions, measured, s=30, zorder=3, label="HT, measured (400 draws)", **ht.points())
ax.axhline(ns_var, color="k", ls="--", label="node-wise sampling, K = 10")
scale_for(ax, fractions)  # 1 % to 20 %
scale_for(ax, [*closed, *measured, ns_var], "y")  # thousands of times apart
ax.set_xlabel("cache fraction rho")
ax.set_ylabel("mean variance of h_v over the targets")
legend(ax)
plt.show()
print(f"at 1 %: {closed[0] / ns_var:,.0f} times node-wise sampling's variance")

# %% [markdown]
# ## Lower-variance estimators
#
# Three ways to pay less variance, all in the library (`--gns-weights`, `--cache-dist`):
#
# * `hajek`: divide the HT sum by the HT estimate of the number of neighbours,
#   `sum_S x_u / (pi_u q_v) / sum_S 1 / (pi_u q_v)`: a weighted mean of the sampled neighbours.
#   Slightly biased (a ratio of unbiased estimates), and 0 when nothing is cached, but its
#   weights sum to 1, so it no longer swings with how many neighbours happened to be cached.
# * `clipped`: HT with `1 / (pi_u q_v)` capped at 10: bounded weights, a bias where it clips.
# * a `min-variance` cache distribution: minimising the summed small-cache HT variance over `p`
#   gives `p_u ∝ ||x_u|| sqrt(sum_{v in N(u)} 1 / d_v^2)`, which puts less mass on hubs.
#
# Mean squared error (bias² + variance) over the targets, relative to node-wise sampling's
# variance:

# %%
rows = {}
for rho in (0.01, 0.05):
    for dist in ("degree", "min-variance"):
        v = aggregates(rho, ("ht", "hajek", "clipped"), 600, dist=dist, seed=2)
        for w, values_w in v.items():
            bias2 = (values_w.mean(0) - mu[targets]) ** 2
            rows[(rho, w, dist)] = (bias2 + values_w.var(0, ddof=1)).mean() / ns_var
# one row per estimator and cache distribution, one point per cache fraction: the errors span
# orders of magnitude, so points on a log axis (a bar's length from zero means nothing there)
combos = [(w, d) for w in ("ht", "hajek", "clipped") for d in ("degree", "min-variance")]
y = np.arange(len(combos))[::-1]
caches = Palette([f"{rho:.0%} cache" for rho in (0.01, 0.05)])
fig, ax = plt.subplots(figsize=(9, 3.8), layout="constrained")
for rho, shift in ((0.01, 0.12), (0.05, -0.12)):
    name = f"{rho:.0%} cache"
    vals = [rows[(rho, w, d)] for w, d in combos]
    ax.scatter(vals, y + shift, s=40, zorder=3, label=name, **caches[name].points())
    for v, yi in zip(vals, y + shift):
        ax.annotate(f"{v:,.0f}", (v, yi), xytext=(6, 0), textcoords="offset points", va="center")
scale_for(ax, list(rows.values()))
ax.set_xlim(right=3 * max(rows.values()))  # room for the values written beside the points
ax.grid(axis="y", linestyle=":", linewidth=0.8)
ax.set_yticks(y, [f"{w}, {d}" for w, d in combos])
ax.set_xlabel("MSE / NS variance (mean over the targets)")
legend(ax)
plt.show()
for key, value in sorted(rows.items()):
    print(f"rho {key[0]:.0%}  {key[1]:>7}  {key[2]:>12}: {value:10.1f}")

# %% [markdown]
# ## Takeaway
#
# The Horvitz-Thompson weights `1 / (d_v pi_u q_v)` make GNS's input aggregate exactly
# unbiased, and the shortcuts the official code took (`minimum`, no weights) are biased by
# hundreds of standard errors. But at a small cache the unbiased estimator is thousands of times
# noisier than node-wise sampling's mean (printed above), and its noise grows as `1 / rho`.
# Self-normalising the weights (`hajek`) cuts the mean squared error by well over an order of
# magnitude for a small bias; clipping does less; a variance-minimising cache distribution
# lowers HT's error but not the self-normalised one's. None comes near node-wise sampling at
# 1 %. What that does to training is notebook 3's question.
