"""The closed-form input-layer variance of the HT estimator under each cache distribution.

For a dataset (a shipped name, a ``synthetic:`` spec or a saved folder) and a cache fraction,
prints per cache distribution the summed first-order variance of the Horvitz-Thompson input
aggregates (``docs/algorithm.md``), ``sum_v sum_{u in N(v)} ||x_u||^2 (1 - pi_u) / (d_v^2 pi_u)``,
over all nodes and weighted by degree (as layer-1 nodes are drawn), and the weights ``1 / pi_u``
(median, 99.9th percentile, largest), the heavy tail the summed variance does not show. Host-side
NumPy, one pass over the edges; the cap ``K`` on the sampled cached neighbours is left out::

    python -m experiments.cache_variance --dataset DIR --fraction 0.01
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from gns_jax.cache import (
    DISTRIBUTIONS,
    cache_distribution,
    cache_size,
    inclusion_probability,
    neighbour_sum,
    squared_row_norms,
)
from gns_jax.config import TrainConfig
from gns_jax.data import load_dataset
from gns_jax.factories import prepare_features


def variance_table(dataset, fraction: float, dists=("degree", "min-variance")) -> list[dict]:
    """One row per distribution: the summed variances and the weights' quantiles."""
    graph = dataset.graph
    degree = graph.degrees().astype(np.float64)
    inv = 1.0 / np.maximum(degree, 1.0)
    features = prepare_features(dataset, TrainConfig())  # as a run with the defaults reads them
    norms = squared_row_norms(features)
    per_node = neighbour_sum(graph, inv**2)  # sum over v in N(u) of 1 / d_v^2
    per_edge = neighbour_sum(graph, inv)  # the same, each v weighted by its degree d_v
    m = cache_size(fraction, graph.num_nodes)
    rows = []
    for dist in dists:
        p = cache_distribution(graph, dist, features=features, train_idx=dataset.train_idx)
        pi = inclusion_probability(p, m)
        with np.errstate(divide="ignore", invalid="ignore"):  # p_u = 0: left out below
            weight = norms * (1.0 - pi) / pi
            inv_pi = 1.0 / pi
        reachable = pi > 0  # p_u = 0 (no neighbours, or zero features): adds nothing to the sum
        rows.append(
            dict(
                dist=dist,
                draws=m,
                summed=float(np.sum(weight[reachable] * per_node[reachable])),
                degree_weighted=float(
                    np.sum(weight[reachable] * per_edge[reachable]) * graph.num_nodes / degree.sum()
                ),
                median=float(np.median(inv_pi[reachable])),
                p999=float(np.quantile(inv_pi[reachable], 0.999)),
                largest=float(np.max(inv_pi[reachable])),
            )
        )
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument(
        "--dists", nargs="+", default=["degree", "min-variance"], choices=DISTRIBUTIONS
    )
    args = parser.parse_args(argv)
    if not 0 < args.fraction <= 1:
        parser.error(f"--fraction {args.fraction}: must lie in (0, 1]")
    rows = variance_table(load_dataset(args.dataset), args.fraction, args.dists)
    print(f"cache fraction {args.fraction:g} ({rows[0]['draws']:,} draws)")
    print("| distribution | summed variance | degree-weighted | 1/pi median | 99.9 % | largest |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['dist']} | {r['summed']:.4g} | {r['degree_weighted']:.4g} | {r['median']:.4g} "
            f"| {r['p999']:.4g} | {r['largest']:.4g} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
