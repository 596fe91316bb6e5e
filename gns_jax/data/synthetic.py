"""Seeded synthetic graphs: power-law degrees, class-homophilous edges, noisy class features.

``synthetic:nodes=N,degree=D,features=F,classes=C[,seed=S,homophily=H,signal=A,train=T,val=V,
test=U,multilabel=P]`` on the command line (the four sizes are required; seed, homophily and
signal default to 0, 0.8 and 0.5; the split's fractions to 0.08, 0.02 and the rest; ``multilabel``
to 0, a multi-class task: ``P > 0`` makes a multi-label one, see :func:`synthetic`), parsed by
:func:`parse_synthetic`; :func:`synthetic` from Python. Host-side NumPy, vectorised.
:mod:`gns_jax.data.streamed` writes the same graphs to a folder in bounded memory.
"""

from __future__ import annotations

import math

import numpy as np

from gns_jax.data.dataset import MAX_NODES, Dataset, check_alloc, finish
from gns_jax.errors import DatasetError
from gns_jax.graph import from_edges

__all__ = ["parse_synthetic", "spec_rng", "synthetic"]


# Working memory per generated (directed) edge: the draws, then from_edges's int64 copies and sort.
_EDGE_BYTES = 64

_REQUIRED = ("nodes", "degree", "features", "classes")
# The documented defaults; test=None: every node outside the training and validation splits.
_OPTIONAL = {
    "seed": 0,
    "homophily": 0.8,
    "signal": 0.5,
    "train": 0.08,
    "val": 0.02,
    "test": None,
    "multilabel": 0.0,
}
_FLOATS = ("degree", "homophily", "signal", "train", "val", "test", "multilabel")


def parse_synthetic(spec: str, in_memory: bool = True) -> dict[str, float]:
    """Parses ``synthetic:nodes=N,degree=D,features=F,classes=C[,seed=S,homophily=H,signal=A,...]``.

    ``nodes``, ``degree``, ``features`` and ``classes`` are required; ``seed`` (default 0),
    ``homophily`` (0.8), ``signal`` (0.5) and the split's fractions ``train`` (0.08), ``val``
    (0.02) and ``test`` (default: every other node) are optional. Returns every option; raises
    DatasetError naming ``--dataset`` for a missing, unknown, repeated or impossible option, or
    (``in_memory``) for a graph whose features or edges would not fit in memory.
    """
    head, colon, body = spec.partition(":")
    if head != "synthetic" or not colon:
        raise DatasetError(f"--dataset {spec}: a synthetic spec starts with 'synthetic:'")
    opts: dict[str, float] = {}
    for item in filter(None, body.split(",")):
        key, sep, value = item.partition("=")
        if not sep or key not in (*_REQUIRED, *_OPTIONAL):
            raise DatasetError(
                f"--dataset {spec}: unknown or malformed option '{item}' "
                f"(known: {', '.join((*_REQUIRED, *_OPTIONAL))})"
            )
        if key in opts:
            raise DatasetError(f"--dataset {spec}: '{key}' is given twice")
        try:
            opts[key] = float(value) if key in _FLOATS else int(value)
        except ValueError:
            raise DatasetError(
                f"--dataset {spec}: '{key}' must be a number, got '{value}'"
            ) from None
        if key in _FLOATS and not math.isfinite(opts[key]):
            raise DatasetError(f"--dataset {spec}: '{key}' must be finite, got '{value}'")
    missing = [k for k in _REQUIRED if k not in opts]
    if missing:
        raise DatasetError(
            f"--dataset {spec}: missing {', '.join(missing)} (a synthetic spec needs nodes, "
            "degree, features and classes; seed=0, homophily=0.8, signal=0.5, train=0.08, "
            "val=0.02 and test (default: the rest) are optional)"
        )
    opts = _OPTIONAL | opts
    if not 2 <= opts["nodes"] <= MAX_NODES or opts["features"] < 1 or opts["degree"] <= 0:
        raise DatasetError(
            f"--dataset {spec}: need 2 <= nodes <= {MAX_NODES:,}, degree > 0, features >= 1"
        )
    if not 2 <= opts["classes"] <= opts["nodes"]:
        raise DatasetError(f"--dataset {spec}: need 2 <= classes <= nodes")
    if not 0 <= opts["homophily"] <= 1:
        raise DatasetError(f"--dataset {spec}: homophily must lie in [0, 1]")
    if not 0 <= opts["multilabel"] < 1:
        raise DatasetError(f"--dataset {spec}: multilabel must lie in [0, 1)")
    if opts["seed"] < 0:
        raise DatasetError(f"--dataset {spec}: seed must be >= 0, got {opts['seed']}")
    split_sizes(opts["nodes"], opts["train"], opts["val"], opts["test"], f"--dataset {spec}")
    if not in_memory:
        return opts
    where = f"--dataset {spec}"
    check_alloc((opts["nodes"], opts["features"]), 4, where, "the feature matrix")
    edges = int(opts["nodes"] * opts["degree"])
    check_alloc((edges, _EDGE_BYTES), 1, where, "the edge arrays (edges x bytes)")
    return opts


def spec_rng(seed: int) -> np.random.Generator:
    """The random generator a ``synthetic:...,seed=S`` spec's graph is drawn from."""
    return np.random.default_rng([int(seed), 0x5E7])  # stream id: synthetic graphs


def synthetic(
    rng: np.random.Generator,
    *,
    nodes: int = 10_000,
    degree: float = 10,
    features: int = 32,
    classes: int = 8,
    homophily: float = 0.8,
    signal: float = 0.5,
    exponent: float = 2.5,
    name: str = "synthetic",
    train: float = 0.08,
    val: float = 0.02,
    test: float | None = None,
    multilabel: float = 0.0,
) -> Dataset:
    """A degree-corrected planted-partition graph with power-law degrees. Vectorised.

    Each node gets a class uniformly at random and a weight ``w ~ Pareto(exponent - 1)``. Each of
    the ``nodes * degree / 2`` undirected edges picks a source with probability proportional to
    ``w``; with probability ``homophily`` its target is drawn ``∝ w`` within the source's class,
    otherwise ``∝ w`` among all nodes. Features are ``signal * mu_class + N(0, I)`` with class
    means ``mu ~ N(0, I)``. Split: a random ``train`` (8 %) and ``val`` (2 %) of the nodes, and
    ``test`` of them (default: the other 90 %, ogbn-products style); a smaller ``test`` leaves
    nodes in no split (ogbn-papers100M style, whose splits cover 1.4 % of its nodes).
    Every class gets a node: should the uniform draw miss one (only on small graphs), the first
    ``classes`` nodes take the classes in a random order.

    ``multilabel = P > 0`` makes a multi-label task of ``classes`` labels (GraphSAINT's Yelp and
    Amazon are such tasks): a node carries its own class's label and, independently with
    probability ``P``, each other label, whose mean is added to its features too (the graph, the
    split and the single-label draws stay those of ``P = 0``). Raises DatasetError for sizes that
    are impossible or beyond :func:`~gns_jax.data.dataset.memory_budget`.
    """
    check_sizes(name, nodes, degree, features, classes)
    check_alloc((nodes, features), 4, name, "the feature matrix")
    check_alloc((int(nodes * degree), _EDGE_BYTES), 1, name, "the edge arrays (edges x bytes)")
    split_sizes(nodes, train, val, test, name)
    labels, order, cum, class_lo, class_hi = draw_nodes(rng, nodes, classes, exponent)
    num_edges = int(round(nodes * degree / 2))

    def draw(lo, hi):
        pos = np.searchsorted(cum, lo + rng.random(lo.shape[0]) * (hi - lo), side="right")
        return order[np.minimum(pos, nodes - 1)]

    total = np.full(num_edges, cum[-1])
    src = draw(np.zeros(num_edges), total)
    same = rng.random(num_edges) < homophily
    c = labels[src]
    dst = draw(np.where(same, class_lo[c], 0.0), np.where(same, class_hi[c], total))
    graph = from_edges(src, dst, nodes, name=name)
    means = rng.standard_normal((classes, features)).astype(np.float32)
    x = rng.standard_normal((nodes, features), dtype=np.float32)
    x += np.float32(signal) * means[labels]
    splits, described = random_split(rng.permutation(nodes), train, val, test, name)
    if multilabel > 0:
        if not multilabel < 1:
            raise DatasetError(f"{name}: multilabel must lie in [0, 1), got {multilabel}")
        check_alloc((nodes, classes), 1, name, "the label matrix")
        matrix = (rng.random((nodes, classes)) < multilabel).astype(np.int8)
        matrix[np.arange(nodes), labels] = 1
        extra = matrix.astype(np.float32)
        extra[np.arange(nodes), labels] = 0
        x += np.float32(signal) * (extra @ means)
        labels = matrix
    return finish(name, graph, x, labels, splits, described, classes)


def check_sizes(name: str, nodes: int, degree: float, features: int, classes: int) -> None:
    """DatasetError naming ``name`` for sizes no synthetic graph can have."""
    if not 2 <= classes <= nodes <= MAX_NODES or features < 1 or not 0 < degree < math.inf:
        raise DatasetError(
            f"{name}: need 2 <= classes <= nodes <= {MAX_NODES:,}, features >= 1 and a finite "
            f"degree > 0, got nodes={nodes}, degree={degree}, features={features}, "
            f"classes={classes}"
        )


def draw_nodes(rng: np.random.Generator, nodes: int, classes: int, exponent: float):
    """The graph's first draws: each node's class and Pareto weight. Returns ``labels``,
    ``order`` (the nodes sorted by class, so that each class's weights form one contiguous run
    of the cumulative sum), ``cum`` (the cumulative weights in that order) and each class's run
    ``[class_lo, class_hi)`` of it."""
    labels = rng.integers(classes, size=nodes)
    if np.bincount(labels, minlength=classes).min() == 0:
        labels[:classes] = rng.permutation(classes)
    weight = rng.pareto(exponent - 1.0, size=nodes) + 1.0
    order = np.argsort(labels, kind="stable")
    cum = np.cumsum(weight[order])
    class_end = np.searchsorted(labels[order], np.arange(classes), side="right")
    class_hi = cum[class_end - 1]
    class_lo = np.concatenate([[0.0], class_hi[:-1]])
    class_lo = np.where(class_end > np.concatenate([[0], class_end[:-1]]), class_lo, class_hi)
    return labels, order, cum, class_lo, class_hi


def split_sizes(
    nodes: int, train: float, val: float, test: float | None, where: str
) -> tuple[int, int, int]:
    """Node counts of the random split; DatasetError naming ``where`` if it is impossible."""
    fractions = {"train": train, "val": val} | ({} if test is None else {"test": test})
    for key, value in fractions.items():
        if not 0 < value <= 1:
            raise DatasetError(f"{where}: the split fraction {key} must lie in (0, 1], got {value}")
    n_train, n_val = max(1, int(train * nodes)), max(1, int(val * nodes))
    n_test = nodes - n_train - n_val if test is None else max(1, int(test * nodes))
    if n_test < 1 or n_train + n_val + n_test > nodes:
        raise DatasetError(
            f"{where}: a split of {n_train:,} train, {n_val:,} validation and {max(n_test, 0):,} "
            f"test nodes (train={train:g}, val={val:g}, test={test}) does not fit in "
            f"{nodes:,} nodes"
        )
    return n_train, n_val, n_test


def random_split(
    perm: np.ndarray, train: float, val: float, test: float | None, where: str
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], str]:
    """The first ``train``, next ``val`` and next ``test`` of the permutation ``perm`` (sorted),
    and the split's description (``random 8/2/90``, percentages)."""
    n_train, n_val, n_test = split_sizes(perm.shape[0], train, val, test, where)
    ends = np.cumsum([n_train, n_val, n_test])
    splits = (
        np.sort(perm[: ends[0]]),
        np.sort(perm[ends[0] : ends[1]]),
        np.sort(perm[ends[1] : ends[2]]),
    )
    shares = (train, val, 1 - train - val if test is None else test)
    return splits, "random " + "/".join(f"{100 * share:g}" for share in shares)
