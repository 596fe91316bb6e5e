"""Edge splits for link prediction: positives, fixed negatives, and the graphs models may see.
Host-side NumPy.

A link-prediction task trains on some edges of a graph and scores held-out ones. An
:class:`EdgeSplit` holds, as int32 node pairs ``[M, 2]``:

* ``train_pos``: the training positives;
* ``val_pos`` / ``test_pos``: the held-out positives;
* ``val_neg`` / ``test_neg``: fixed non-edges, scored against the positives by the binary
  metrics (ROC-AUC, average precision);
* ``val_rank_neg`` / ``test_rank_neg``: int32 ``[M, K]``, the ranking negatives of each
  held-out positive ``(u, v)``: ``K`` corrupted tails ``v'``, each ``(u, v')`` a non-edge of the
  full graph with ``v' != u`` (tails may repeat within a row). Row ``i`` belongs to positive
  ``i``, and the positive is ranked against its own row (Hits@K and MRR,
  :func:`gns_jax.metrics.hits_at_k`, :func:`gns_jax.metrics.mrr`, OGB's protocol for
  ogbl-citation2). They are drawn once, seeded, so every model is ranked against the same ones.
  Only the tails are stored: the heads are column 0 of the positives.

The graph a split is made from is the *full* graph (every edge, the held-out ones included; an
undirected CSR graph storing each edge both ways, as
:meth:`~gns_jax.graph.CSRGraph.check_undirected` requires). Models never see the edges they are
scored on: :meth:`EdgeSplit.train_graph` is the message-passing graph of training and of
validation (the full graph without the validation and test edges, both directions),
:meth:`EdgeSplit.test_graph` the one of testing (without the test edges only: the validation
edges are known when test edges are scored, as OGB does).

:func:`random_edge_split` splits the undirected edges at random by fractions (85/5/10 by default);
each edge appears once, as ``(u, v)`` with ``u < v``. :func:`load_edge_split` reads a user's split
from an ``.npz`` and checks it like every other file of the project (one
:class:`~gns_jax.errors.DatasetError` naming the file and what is wrong).

Randomness: every draw comes from ``np.random.default_rng([seed, EDGE_SPLIT, part])``, with
``EDGE_SPLIT = 9`` the stream id :mod:`gns_jax.streams` reserves for the edge split (kept here as
a literal so that this module needs no JAX), and ``part`` 0 for the permutation of the edges, 1
for the fixed negatives, 2 and 3 for the validation and test ranking negatives. Each part has its
own stream, so a split saved and read back with :func:`load_edge_split` and the same seed gets
the very ranking negatives :func:`random_edge_split` drew.

Scale: everything is vectorised and works on sorted int64 keys ``u * N + v`` of node pairs
(``u < v``: one key an undirected edge); membership is a binary search (``np.searchsorted``) of
the queries, sorted first so that the search walks the keys in order. Large arrays are processed
in chunks of 2^22 entries: 10^8 stored edges need a few arrays of 4 x 10^8 bytes besides the
graph (the ranking negatives take ``4 K`` bytes a held-out edge). Negatives come from rejection
sampling in vectorised rounds: uniform pairs are drawn, the edges (and, for the fixed negatives,
repeats) thrown out, and the shortfall drawn again.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import numpy as np

from gns_jax.data.dataset import check_kind
from gns_jax.data.formats import open_npz
from gns_jax.errors import ConfigError, DatasetError, GraphError
from gns_jax.graph import CSRGraph

__all__ = [
    "EDGE_SPLIT",
    "EdgeSplit",
    "load_edge_split",
    "parse_edge_split",
    "random_edge_split",
    "remove_edges",
]

EDGE_SPLIT = 9  # gns_jax.streams.EDGE_SPLIT (a literal: importing streams imports JAX)
_PERMUTE, _NEGATIVES, _VAL_RANK, _TEST_RANK = range(4)  # the parts of the EDGE_SPLIT stream
_CHUNK = 1 << 22  # entries a vectorised step handles at once (bounds the temporaries)
_SMALL = 1 << 16  # sorted keys searched directly (they stay in the cache)
_PAIRS = ("train_pos", "val_pos", "val_neg", "test_pos", "test_neg")
_RANKS = ("val_rank_neg", "test_rank_neg")


@dataclasses.dataclass(frozen=True, eq=False)
class EdgeSplit:
    """The edges of a link-prediction task (module docs).

    Attributes:
      train_pos: int32 ``[M_train, 2]``, the training positives.
      val_pos: int32 ``[M_val, 2]``, the validation positives.
      val_neg: int32 ``[V, 2]``, the validation non-edges (binary metrics).
      test_pos: int32 ``[M_test, 2]``, the test positives.
      test_neg: int32 ``[T, 2]``, the test non-edges.
      val_rank_neg: int32 ``[M_val, K]``, the corrupted tails of each validation positive: row
        ``i`` holds the ``v'`` of the non-edges ``(val_pos[i, 0], v')``.
      test_rank_neg: int32 ``[M_test, K]``, the same for the test positives.
    """

    train_pos: np.ndarray
    val_pos: np.ndarray
    val_neg: np.ndarray
    test_pos: np.ndarray
    test_neg: np.ndarray
    val_rank_neg: np.ndarray
    test_rank_neg: np.ndarray

    @property
    def rank_negatives(self) -> int:
        """``K``, the ranking negatives of each held-out positive."""
        return int(self.val_rank_neg.shape[1])

    def train_graph(self, graph: CSRGraph) -> CSRGraph:
        """The message-passing graph of training and validation: ``graph`` without the
        validation and test edges (both directions)."""
        return remove_edges(graph, np.concatenate([self.val_pos, self.test_pos]))

    def test_graph(self, graph: CSRGraph) -> CSRGraph:
        """The message-passing graph of testing: ``graph`` without the test edges (both
        directions); the validation edges stay."""
        return remove_edges(graph, self.test_pos)

    def validate(self, num_nodes: int, graph: CSRGraph | None, name: str = "edge split"):
        """Checks the split against a graph of ``num_nodes`` nodes; raises DatasetError
        ``"{name}: ..."`` on the first problem.

        Checks that every array is int32 of its shape (pairs ``[M, 2]``; ranking negatives
        ``[M_val, K]`` and ``[M_test, K]``), ids lie in ``[0, num_nodes)``, no positive part is
        empty or holds a pair twice, the positive parts are disjoint (in either direction: no
        validation or test edge in the training graph), and, when ``graph`` (the full graph) is
        given, that every positive is an edge of it and every negative pair and every ``(u, v')``
        of the ranking negatives is not (nor ``u == v``).

        Args:
          num_nodes: the number of nodes of the graph.
          graph: the full graph, undirected as stored; None skips the checks against it.
          name: what to call the split in messages (its file).

        Returns:
          The split itself.
        """
        for key in _PAIRS:
            _check_array(getattr(self, key), name, key, num_nodes, width=2)
        k = np.shape(self.val_rank_neg)[1] if np.ndim(self.val_rank_neg) == 2 else 0
        for key, pos in (("val_rank_neg", self.val_pos), ("test_rank_neg", self.test_pos)):
            _check_array(getattr(self, key), name, key, num_nodes, width=k, rows=pos.shape[0])
        keys = None
        if graph is not None:
            if graph.num_nodes != num_nodes:
                raise DatasetError(
                    f"{name}: a split of a graph of {num_nodes} nodes checked against one of "
                    f"{graph.num_nodes}"
                )
            keys = _edge_keys(graph, name)
        _check_split(self, num_nodes, keys, name)
        return self


# ----------------------------------------------------------------------------------------------
# Pair keys


def _keys(u: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    """int64 keys ``min * n + max`` of the unordered pairs ``(u[i], v[i])``."""
    u = u.astype(np.int64, copy=False)
    v = v.astype(np.int64, copy=False)
    return np.minimum(u, v) * np.int64(n) + np.maximum(u, v)


def _pair_keys(pairs: np.ndarray, n: int) -> np.ndarray:
    return _keys(pairs[:, 0], pairs[:, 1], n)


def _distinct(ascending: np.ndarray) -> np.ndarray:
    """The distinct values of an ascending array (``np.unique`` hashes, slower here)."""
    if ascending.size < 2:
        return ascending
    return ascending[np.r_[True, ascending[1:] != ascending[:-1]]]


def _search(sorted_keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    pos = np.searchsorted(sorted_keys, queries)
    np.minimum(pos, sorted_keys.size - 1, out=pos)
    return sorted_keys[pos] == queries


def _contains(sorted_keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """bool mask: which ``queries`` occur in the ascending array ``sorted_keys``.

    A binary search of random queries in a large array misses the cache at every step (about
    1 us a query at 5 x 10^7 keys), while sorted queries walk it in order (25 times faster):
    the queries are sorted first, and the hits mapped back by a search in the few keys found
    (or, when many are, by the sort's permutation)."""
    out = np.zeros(queries.shape, dtype=bool)
    if sorted_keys.size == 0 or queries.size == 0:
        return out
    if sorted_keys.size <= _SMALL:  # fits the cache: search directly
        return _search(sorted_keys, queries)
    flat_in, flat_out = queries.reshape(-1), out.reshape(-1)
    for a in range(0, flat_in.size, _CHUNK):
        chunk = flat_in[a : a + _CHUNK]
        ordered = np.sort(chunk)
        hit = _search(sorted_keys, ordered)
        found = _distinct(ordered[hit])
        if found.size == 0:
            continue
        if found.size <= _SMALL:
            flat_out[a : a + _CHUNK] = _search(found, chunk)
        else:
            flat_out[a + np.argsort(chunk)] = hit
    return out


def _entry_chunks(graph: CSRGraph):
    """``(a, b, rows, senders)`` over the stored edges ``a:b`` in chunks of :data:`_CHUNK`:
    each entry's row (its receiver) and sender, int64."""
    indptr, e = graph.indptr, graph.num_edges
    for a in range(0, e, _CHUNK):
        b = min(a + _CHUNK, e)
        r0 = int(np.searchsorted(indptr, a, side="right")) - 1
        r1 = int(np.searchsorted(indptr, b - 1, side="right")) - 1
        counts = np.diff(np.clip(indptr[r0 : r1 + 2], a, b))
        rows = np.repeat(np.arange(r0, r1 + 1, dtype=np.int64), counts)
        yield a, b, rows, graph.indices[a:b].astype(np.int64)


def _edge_keys(graph: CSRGraph, name: str = "graph") -> np.ndarray:
    """The ascending keys ``u * N + v`` (``u < v``) of the undirected edges of ``graph``, each
    once (self-loops left out). The graph must store every edge in both directions; a cheap
    count check catches graphs that store some only once (GraphError)."""
    n, parts, loops = graph.num_nodes, [], 0
    for _, _, rows, senders in _entry_chunks(graph):
        upper = senders > rows
        parts.append(rows[upper] * np.int64(n) + senders[upper])
        loops += int(np.count_nonzero(senders == rows))
    keys = np.concatenate(parts) if parts else np.empty(0, np.int64)
    if keys.size > 1 and not np.all(keys[1:] > keys[:-1]):  # rows unsorted or repeated edges
        keys = _distinct(np.sort(keys))
    if 2 * keys.size + loops != graph.num_edges:
        raise GraphError(
            f"{name}: not undirected: {graph.num_edges - loops} stored edges (self-loops aside) "
            f"for {keys.size} distinct edges u -> v with u < v (every edge must be stored once in "
            "each direction; see CSRGraph.check_undirected)"
        )
    return keys


def _to_pairs(keys: np.ndarray, n: int) -> np.ndarray:
    u = keys // n
    return np.stack([u, keys - u * n], axis=1).astype(np.int32)


# ----------------------------------------------------------------------------------------------
# Checks


def _check_fractions(fractions) -> tuple[float, float, float]:
    try:
        values = tuple(float(f) for f in fractions)
    except (TypeError, ValueError):
        raise ConfigError(
            "edge_split", f"expected three fractions (train, val, test), got {fractions!r}"
        ) from None
    if len(values) != 3:
        raise ConfigError(
            "edge_split", f"expected three fractions (train, val, test), got {len(values)}"
        )
    if not all(math.isfinite(f) and f > 0 for f in values):
        raise ConfigError("edge_split", f"every fraction must be positive, got {values}")
    if abs(sum(values) - 1.0) > 1e-6:
        raise ConfigError(
            "edge_split", f"the fractions must sum to 1, got {values} (sum {sum(values):g})"
        )
    return values


def _check_count(value, param: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ConfigError(param, f"must be a non-negative integer, got {value!r}")
    return int(value)


def _check_array(array, name: str, key: str, n: int, width: int, rows: int | None = None):
    if not isinstance(array, np.ndarray) or array.dtype != np.int32:
        got = array.dtype if isinstance(array, np.ndarray) else type(array).__name__
        raise DatasetError(f"{name}: {key} must be an int32 array, got {got}")
    shape = f"[{rows if rows is not None else 'M'}, {width}]"
    if array.ndim != 2 or array.shape[1] != width or rows not in (None, array.shape[0]):
        raise DatasetError(f"{name}: {key} must have shape {shape}, got {list(array.shape)}")
    _check_ids(array, name, key, n)


def _check_ids(array: np.ndarray, name: str, key: str, n: int) -> None:
    if array.size:
        lo, hi = array.min(), array.max()
        if lo < 0 or hi >= n:
            raise DatasetError(f"{name}: {key} has node ids outside [0, {n}) (found {lo}..{hi})")


def _where(mask: np.ndarray) -> int:
    return int(np.argmax(mask))


def _pair(array: np.ndarray, i: int) -> str:
    return f"({int(array[i, 0])}, {int(array[i, 1])})"


def _check_split(split: EdgeSplit, n: int, edge_keys: np.ndarray | None, name: str) -> None:
    """The checks of :meth:`EdgeSplit.validate` past shapes and ranges."""
    positives = {}
    for key, what in (("train_pos", "training"), ("val_pos", "validation"), ("test_pos", "test")):
        pairs = getattr(split, key)
        if pairs.shape[0] == 0:
            raise DatasetError(f"{name}: {key} is empty (no {what} edges)")
        keys = _pair_keys(pairs, n)
        order = np.argsort(keys, kind="stable")
        repeat = np.flatnonzero(keys[order][1:] == keys[order][:-1])
        if repeat.size:
            i = int(order[repeat[0] + 1])
            raise DatasetError(
                f"{name}: {key} holds the edge {_pair(pairs, i)} (row {i}) twice (counting "
                "both directions)"
            )
        if edge_keys is not None:
            missing = ~_contains(edge_keys, keys)
            if missing.any():
                i = _where(missing)
                raise DatasetError(
                    f"{name}: {key} row {i}, {_pair(pairs, i)}, is not an edge of the graph "
                    f"({int(missing.sum())} such rows; every positive must be an edge of the "
                    "full graph, which the split takes the held-out edges out of)"
                )
        positives[key] = keys[order]
    for key, other in (
        ("val_pos", "train_pos"),
        ("test_pos", "train_pos"),
        ("test_pos", "val_pos"),
    ):
        pairs = getattr(split, key)
        shared = _contains(positives[other], _pair_keys(pairs, n))
        if shared.any():
            i = _where(shared)
            raise DatasetError(
                f"{name}: {key} row {i}, {_pair(pairs, i)}, is also in {other} (in one direction "
                f"or the other; {int(shared.sum())} such rows): no validation or test edge may "
                "be in the training graph, and no test edge among the validation edges"
            )
    for key in ("val_neg", "test_neg"):
        pairs = getattr(split, key)
        loop = pairs[:, 0] == pairs[:, 1]
        if loop.any():
            i = _where(loop)
            raise DatasetError(f"{name}: {key} row {i} pairs node {int(pairs[i, 0])} with itself")
        if edge_keys is not None:
            edge = _contains(edge_keys, _pair_keys(pairs, n))
            if edge.any():
                i = _where(edge)
                raise DatasetError(
                    f"{name}: {key} row {i}, {_pair(pairs, i)}, is an edge of the graph "
                    f"({int(edge.sum())} such rows): a negative must be a non-edge"
                )
    for key, pos in (("val_rank_neg", split.val_pos), ("test_rank_neg", split.test_pos)):
        tails = getattr(split, key)
        step = max(1, _CHUNK // max(1, tails.shape[1]))
        for a in range(0, tails.shape[0], step):
            chunk = tails[a : a + step]
            heads = np.broadcast_to(pos[a : a + step, :1], chunk.shape)
            bad = heads == chunk
            if edge_keys is not None:
                bad |= _contains(edge_keys, _keys(heads, chunk, n))
            if bad.any():
                i, j = np.unravel_index(_where(bad.ravel()), bad.shape)
                raise DatasetError(
                    f"{name}: {key}[{a + i}, {j}] = {int(chunk[i, j])} makes the pair "
                    f"({int(heads[i, j])}, {int(chunk[i, j])}) a self-pair or an edge of the "
                    "graph: every ranking negative must be a non-edge"
                )


# ----------------------------------------------------------------------------------------------
# Sampling


def _rng(seed: int, part: int) -> np.random.Generator:
    return np.random.default_rng([seed, EDGE_SPLIT, part])


def _non_edges(edge_keys: np.ndarray, n: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` distinct keys of non-edges ``(u, v)``, ``u < v``, uniform without replacement,
    in the order drawn. The caller checks that that many exist."""
    total = n * (n - 1) // 2
    free = total - edge_keys.size
    got = np.empty(0, np.int64)
    while got.size < count:
        need = count - got.size
        accept = (free - got.size) / total * (1 - 1 / n)  # a draw is a new non-edge
        draws = min(_CHUNK, int(1.25 * need / accept) + 64)
        u, v = rng.integers(0, n, size=(2, draws), dtype=np.int64)
        keys = _keys(u[u != v], v[u != v], n)
        keys = keys[~_contains(edge_keys, keys)]
        merged = np.concatenate([got, keys])
        _, first = np.unique(merged, return_index=True)  # first occurrence: the draw order stays
        got = merged[np.sort(first)][:count]
    return got


def _rank_negatives(
    heads: np.ndarray, k: int, edge_keys: np.ndarray, n: int, rng: np.random.Generator
) -> np.ndarray:
    """int32 ``[M, k]``: for each head ``u``, ``k`` uniform tails ``v' != u`` with ``(u, v')``
    not an edge. Every head must have a non-neighbour (the caller checks)."""
    m = heads.shape[0]
    out = np.empty((m, k), dtype=np.int32)
    if m == 0 or k == 0:
        return out
    flat, step = out.reshape(-1), max(1, _CHUNK // k)
    for a in range(0, m, step):
        b = min(a + step, m)
        h = np.repeat(heads[a:b].astype(np.int64), k)
        tails = np.empty(h.size, dtype=np.int64)
        pending = np.arange(h.size)
        while pending.size:
            t = rng.integers(0, n, size=pending.size, dtype=np.int64)
            hp = h[pending]
            bad = (t == hp) | _contains(edge_keys, _keys(hp, t, n))
            tails[pending[~bad]] = t[~bad]
            pending = pending[bad]
        flat[a * k : b * k] = tails
    return out


def _saturated(heads: np.ndarray, graph: CSRGraph) -> np.ndarray:
    """The heads adjacent to every other node (no corrupted tail exists)."""
    return np.unique(heads[graph.degrees()[heads] >= graph.num_nodes - 1])


def _draw_rank_negatives(split_heads, k, edge_keys, graph, seed, fail) -> list[np.ndarray]:
    n = graph.num_nodes
    out = []
    for heads, part in zip(split_heads, (_VAL_RANK, _TEST_RANK), strict=True):
        if k:
            full = _saturated(heads, graph)
            if full.size:
                fail(
                    f"node {int(full[0])} ({full.size} such heads) is adjacent to every other "
                    "node, so no corrupted tail (u, v') exists for its held-out edges"
                )
        out.append(_rank_negatives(heads, k, edge_keys, n, _rng(seed, part)))
    return out


# ----------------------------------------------------------------------------------------------
# The public functions


def parse_edge_split(text: str) -> tuple[float, float, float]:
    """Parses ``"train,val,test"`` fractions (``"0.85,0.05,0.10"``).

    Args:
      text: three comma-separated positive numbers summing to 1 (within 1e-6).

    Returns:
      The fractions, as floats.

    Raises:
      ConfigError: on ``edge_split``, for anything else.
    """
    parts = [p.strip() for p in str(text).split(",")]
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        raise ConfigError(
            "edge_split",
            f"expected three comma-separated fractions like 0.85,0.05,0.10, got {text!r}",
        ) from None
    return _check_fractions(values)


def remove_edges(graph: CSRGraph, pairs: np.ndarray) -> CSRGraph:
    """``graph`` without the undirected edges ``pairs``, in both directions.

    Pairs that are not edges change nothing; the rest of the graph keeps its layout (rows stay
    sorted), so an undirected graph stays one (:meth:`~gns_jax.graph.CSRGraph.check_undirected`).
    O(E) in chunks, plus a sort of the pairs.

    Args:
      graph: a CSR graph.
      pairs: integer ``[M, 2]`` node pairs ``(u, v)``; ``u -> v`` and ``v -> u`` are removed.

    Returns:
      A new graph (the same object when ``pairs`` is empty).

    Raises:
      GraphError: ``pairs`` not an integer ``[M, 2]`` array of ids in ``[0, num_nodes)``.
    """
    pairs = np.asarray(pairs)
    n = graph.num_nodes
    if pairs.ndim != 2 or pairs.shape[1] != 2:
        raise GraphError(f"edges to remove: expected node pairs [M, 2], got shape {pairs.shape}")
    if pairs.shape[0] == 0:
        return graph
    if not np.issubdtype(pairs.dtype, np.integer):
        raise GraphError(f"edges to remove: node ids must be integers, got {pairs.dtype}")
    if pairs.min() < 0 or pairs.max() >= n:
        raise GraphError(
            f"edges to remove: node ids must lie in [0, {n}), got {pairs.min()}..{pairs.max()}"
        )
    u, v = pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)
    # Directed keys receiver * N + sender: a graph's entries come in ascending order of them.
    drop = _distinct(np.sort(np.concatenate([v * n + u, u * n + v])))
    keep = np.empty(graph.num_edges, dtype=bool)
    for a, b, rows, senders in _entry_chunks(graph):
        keep[a:b] = ~_contains(drop, rows * np.int64(n) + senders)
    removed = np.flatnonzero(~keep)
    per_row = np.bincount(np.searchsorted(graph.indptr, removed, side="right") - 1, minlength=n)
    indptr = graph.indptr.copy()
    indptr[1:] -= np.cumsum(per_row)
    return CSRGraph(indptr=indptr, indices=graph.indices[keep])


def random_edge_split(
    graph: CSRGraph,
    fractions: tuple[float, float, float] = (0.85, 0.05, 0.10),
    seed: int = 0,
    rank_negatives: int = 100,
) -> EdgeSplit:
    """A seeded random split of the undirected edges of ``graph`` (module docs).

    Each undirected edge (stored both ways; self-loops ignored) is taken once as ``(u, v)``,
    ``u < v``, and falls in train, validation or test: ``round(fraction * M)`` edges for
    validation and test, the rest for training. Each part comes out in ascending ``(u, v)``
    order. ``val_neg`` and ``test_neg`` hold as many distinct non-edges ``(u, v)``, ``u < v``,
    as their positives, uniform, and disjoint from each other; the ranking negatives are ``K``
    uniform corrupted tails a held-out positive (the head is ``u``, the smaller id of the
    edge). The same graph, fractions and seed give the same arrays.

    Args:
      graph: the full graph, undirected as stored.
      fractions: train, validation and test shares: positive, summing to 1 (within 1e-6).
      seed: a non-negative integer; the draws come from ``[seed, EDGE_SPLIT, part]``.
      rank_negatives: ``K``, the ranking negatives of each held-out positive (0: none).

    Returns:
      The split.

    Raises:
      ConfigError: on ``edge_split`` for bad fractions, fractions that leave a part empty or
        a graph with too few non-edges for the negatives; on ``seed`` or ``rank_negatives`` for
        a bad value, and on ``rank_negatives`` when a head is adjacent to every other node.
      GraphError: a graph that does not store every edge in both directions.
    """
    fractions = _check_fractions(fractions)
    seed = _check_count(seed, "seed")
    k = _check_count(rank_negatives, "rank_negatives")
    n = graph.num_nodes
    keys = _edge_keys(graph)
    m = keys.size
    sizes = {"validation": round(fractions[1] * m), "test": round(fractions[2] * m)}
    sizes = {"training": m - sum(sizes.values()), **sizes}
    empty = [part for part, size in sizes.items() if size < 1]
    if empty:
        raise ConfigError(
            "edge_split",
            f"the fractions {fractions} of the graph's {m} undirected edges leave the "
            f"{' and '.join(empty)} edges empty",
        )
    n_val, n_test = sizes["validation"], sizes["test"]
    free = n * (n - 1) // 2 - m
    if free < n_val + n_test:
        raise ConfigError(
            "edge_split",
            f"the graph has {free} non-edges, too few for the {n_val + n_test} negatives of the "
            "validation and test edges",
        )
    perm = _rng(seed, _PERMUTE).permutation(m)
    part = np.zeros(m, dtype=np.int8)
    part[perm[:n_val]] = 1
    part[perm[n_val : n_val + n_test]] = 2
    del perm
    train_pos, val_pos, test_pos = (_to_pairs(keys[part == p], n) for p in range(3))
    del part
    negatives = _non_edges(keys, n, n_val + n_test, _rng(seed, _NEGATIVES))
    val_neg = _to_pairs(np.sort(negatives[:n_val]), n)
    test_neg = _to_pairs(np.sort(negatives[n_val:]), n)

    def fail(message):
        raise ConfigError("rank_negatives", message + "; pass rank_negatives=0 for none")

    val_rank, test_rank = _draw_rank_negatives(
        (val_pos[:, 0], test_pos[:, 0]), k, keys, graph, seed, fail
    )
    return EdgeSplit(train_pos, val_pos, val_neg, test_pos, test_neg, val_rank, test_rank)


def load_edge_split(
    path: str | os.PathLike, graph: CSRGraph, rank_negatives: int = 100, seed: int = 0
) -> EdgeSplit:
    """Reads a user's edge split from an ``.npz`` (no pickles) and checks it against ``graph``.

    The file holds ``train_pos``, ``val_pos``, ``val_neg``, ``test_pos`` and ``test_neg``, each an
    integer ``[M, 2]`` array of node pairs (either orientation; column 0 is the head that the
    ranking negatives corrupt the tail of). Optionally it also holds ``val_rank_neg`` and
    ``test_rank_neg`` (both or neither), integer ``[M_val, K]`` and ``[M_test, K]`` tails: fixed
    ranking negatives of its own, as ogbl-citation2 ships, used as they are (``rank_negatives``
    is then ignored). Otherwise ``rank_negatives`` tails a held-out positive are drawn as
    :func:`random_edge_split` draws them (the same stream parts, so a saved random split read
    back with the same seed gets its own ranking negatives back). Other arrays are ignored.

    Every check of :meth:`EdgeSplit.validate` applies: the positives must be edges of ``graph``
    (the full graph), the positive parts disjoint in either direction, and every negative a
    non-edge.

    Args:
      path: the ``.npz`` file (or a ``.zip`` holding one).
      graph: the full graph, undirected as stored.
      rank_negatives: ``K``, the ranking negatives drawn a held-out positive (0: none).
      seed: a non-negative integer, the seed of those draws.

    Returns:
      The split, as int32 arrays.

    Raises:
      DatasetError: anything wrong with the file: one message, starting with its path.
      ConfigError: on ``seed`` or ``rank_negatives`` for a bad value.
    """
    seed = _check_count(seed, "seed")
    k = _check_count(rank_negatives, "rank_negatives")
    arrays, where = open_npz(Path(path))
    n = graph.num_nodes
    missing = [key for key in _PAIRS if key not in arrays]
    if missing:
        raise DatasetError(
            f"{where}: missing arrays {missing} (an edge split holds {', '.join(_PAIRS)})"
        )
    ranks = [key for key in _RANKS if key in arrays]
    if len(ranks) == 1:
        other = next(key for key in _RANKS if key not in arrays)
        raise DatasetError(f"{where}: holds {ranks[0]} but not {other} (give both or neither)")
    parts = {key: _read_ids(arrays[key], where, key, n, pairs=True) for key in _PAIRS}
    if ranks:
        given = {key: _read_ids(arrays[key], where, key, n, pairs=False) for key in _RANKS}
    else:
        given = {
            f"{key[:-4]}_rank_neg": np.empty((parts[key].shape[0], 0), np.int32)
            for key in ("val_pos", "test_pos")
        }
    split = EdgeSplit(**parts, **given)
    _check_array(
        split.val_rank_neg, where, "val_rank_neg", n, split.rank_negatives, split.val_pos.shape[0]
    )
    _check_array(
        split.test_rank_neg,
        where,
        "test_rank_neg",
        n,
        split.rank_negatives,
        split.test_pos.shape[0],
    )
    keys = _edge_keys(graph)
    _check_split(split, n, keys, where)
    if ranks:
        return split

    def fail(message):
        raise DatasetError(f"{where}: {message}; reorder those pairs or pass rank_negatives=0")

    val_rank, test_rank = _draw_rank_negatives(
        (split.val_pos[:, 0], split.test_pos[:, 0]), k, keys, graph, seed, fail
    )
    return dataclasses.replace(split, val_rank_neg=val_rank, test_rank_neg=test_rank)


def _read_ids(array, where: str, key: str, n: int, pairs: bool) -> np.ndarray:
    """A file's integer array as int32, after checking its kind, shape and id range."""
    array = check_kind(array, where, f"array '{key}'")
    if array.ndim != 2 or (pairs and array.shape[1] != 2):
        expect = "[M, 2] (one node pair a row)" if pairs else "[M, K] (K tails a positive)"
        raise DatasetError(f"{where}: array '{key}' must have shape {expect}, got {array.shape}")
    _check_ids(array, where, f"array '{key}'", n)
    return array.astype(np.int32)
