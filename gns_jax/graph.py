"""Graphs in compressed sparse row (CSR) form. Host-side NumPy; never passed to jit.

A :class:`CSRGraph` stores, for every node ``v``, the list of its in-neighbours
``indices[indptr[v]:indptr[v + 1]]`` (messages flow ``u -> v``). Undirected graphs store both
directions. Construction from edge lists is vectorised (one sort), so it scales to 10^8 edges.

:meth:`CSRGraph.validate` checks the layout (dtypes, monotone ``indptr``, ids in range);
:meth:`CSRGraph.check_undirected` checks what every dataset's graph must also be: each edge stored
in both directions, rows sorted without duplicates, no self-loops (one CSR transpose, O(E)).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gns_jax.errors import GraphError

__all__ = ["CSRGraph", "from_edges"]


@dataclasses.dataclass(frozen=True)
class CSRGraph:
    """A directed graph stored by destination node.

    Attributes:
      indptr: int64 ``[num_nodes + 1]``, non-decreasing, ``indptr[0] == 0``,
        ``indptr[-1] == num_edges``.
      indices: int32 ``[num_edges]``; the in-neighbours (sources) of each node, sorted per row.
    """

    indptr: np.ndarray
    indices: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def num_edges(self) -> int:
        """Directed edges stored (an undirected edge counts twice)."""
        return int(self.indices.shape[0])

    def degrees(self) -> np.ndarray:
        """In-degree of every node, int64 ``[num_nodes]``."""
        return np.diff(self.indptr)

    def neighbors(self, node: int) -> np.ndarray:
        return self.indices[self.indptr[node] : self.indptr[node + 1]]

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """``(senders, receivers)`` of every stored edge, in CSR order."""
        receivers = np.repeat(np.arange(self.num_nodes, dtype=np.int32), self.degrees())
        return self.indices, receivers

    def largest_component(self) -> np.ndarray:
        """Boolean mask of the nodes in the largest connected component (edges as undirected)."""
        import scipy.sparse as sp
        from scipy.sparse.csgraph import connected_components

        data = np.ones(self.num_edges, dtype=np.int8)
        adjacency = sp.csr_matrix((data, self.indices, self.indptr), shape=(self.num_nodes,) * 2)
        _, component = connected_components(adjacency, directed=True, connection="weak")
        return component == np.argmax(np.bincount(component))

    def validate(self, name: str = "graph") -> CSRGraph:
        """Checks dtypes, shapes, monotone ``indptr`` and ids in range; raises GraphError."""
        if self.indptr.ndim != 1 or self.indptr.shape[0] < 1:
            raise GraphError(f"{name}: indptr must be a non-empty 1-D array")
        if self.indptr.dtype != np.int64:
            raise GraphError(f"{name}: indptr must be int64, got {self.indptr.dtype}")
        if self.indices.ndim != 1 or self.indices.dtype != np.int32:
            raise GraphError(f"{name}: indices must be a 1-D int32 array, got {self.indices.dtype}")
        if self.indptr[0] != 0 or self.indptr[-1] != self.indices.shape[0]:
            raise GraphError(
                f"{name}: indptr must start at 0 and end at num_edges={self.indices.shape[0]}, "
                f"got {self.indptr[0]}..{self.indptr[-1]}"
            )
        if np.any(np.diff(self.indptr) < 0):
            raise GraphError(f"{name}: indptr is not non-decreasing")
        if self.indices.size and (self.indices.min() < 0 or self.indices.max() >= self.num_nodes):
            raise GraphError(
                f"{name}: neighbour ids must lie in [0, {self.num_nodes}), "
                f"got {self.indices.min()}..{self.indices.max()}"
            )
        return self

    def check_undirected(self, name: str = "graph") -> CSRGraph:
        """Checks that the graph is undirected as stored: every row strictly increasing (sorted,
        no duplicate edges), no self-loops, and ``u -> v`` stored exactly when ``v -> u`` is.

        Call after :meth:`validate`. Costs one CSR transpose (SciPy, O(E)): about 0.8 s for
        4 x 10^7 stored edges on one CPU core. Raises GraphError naming one offending edge.
        """
        import scipy.sparse as sp

        n, e, indices, indptr = self.num_nodes, self.num_edges, self.indices, self.indptr
        if e == 0:
            return self
        # Strictly increasing within each row: a drop or repeat is allowed only at a row start.
        bad = np.diff(indices) <= 0
        starts = indptr[1:-1] - 1  # last position of each row but the last, where a row ends
        bad[starts[(starts >= 0) & (starts < e - 1)]] = False
        if bad.any():
            pos = int(np.argmax(bad)) + 1
            v = int(np.searchsorted(indptr, pos, side="right")) - 1
            raise GraphError(
                f"{name}: the neighbours of node {v} are not sorted and unique (found "
                f"{int(indices[pos - 1])} then {int(indices[pos])})"
            )
        small = indptr.astype(np.int32) if e < 2**31 else indptr
        adjacency = sp.csr_matrix((np.ones(e, np.int8), indices, small), shape=(n, n))
        loops = np.flatnonzero(adjacency.diagonal())
        if loops.size:
            raise GraphError(
                f"{name}: self-loop at node {int(loops[0])} ({loops.size} in all); a stored graph "
                "must have none: the edge-list readers drop them, so rebuild it from its edge list "
                "(gns_jax.graph.from_edges, or gns-jax save from the dataset it came from)"
            )
        reverse = adjacency.transpose().tocsr()  # rows come out sorted
        if np.array_equal(reverse.indptr, indptr) and np.array_equal(reverse.indices, indices):
            return self
        # The first row whose in-neighbours differ from its out-neighbours names the edge.
        differ = np.flatnonzero(np.diff(reverse.indptr) != np.diff(indptr))
        v = int(differ[0]) if differ.size else n - 1
        upto = int(indptr[v])
        same = reverse.indices[:upto] != indices[:upto]
        if same.any():
            v = int(np.searchsorted(indptr, int(np.argmax(same)), side="right")) - 1
        ins = set(self.neighbors(v).tolist())
        outs = set(reverse.indices[reverse.indptr[v] : reverse.indptr[v + 1]].tolist())
        if ins - outs:
            u = min(ins - outs)
            edge, back = f"{u} -> {v}", f"{v} -> {u}"
        else:
            u = min(outs - ins)
            edge, back = f"{v} -> {u}", f"{u} -> {v}"
        raise GraphError(
            f"{name}: not undirected: edge {edge} is stored but {back} is not (every edge must "
            "be stored in both directions)"
        )


def from_edges(
    senders: np.ndarray,
    receivers: np.ndarray,
    num_nodes: int,
    *,
    symmetrize: bool = True,
    name: str = "edge list",
) -> CSRGraph:
    """Builds a CSR graph from an edge list: drops self-loops and duplicates; symmetrises.

    Args:
      senders, receivers: integer arrays of equal length; edge ``senders[i] -> receivers[i]``.
      num_nodes: node ids must lie in ``[0, num_nodes)``.
      symmetrize: add the reverse of every edge (the graph is treated as undirected).
      name: what to call the input in error messages (a file name, say).

    Raises:
      GraphError: mismatched lengths, non-integer ids or ids out of range.
    """
    senders = np.asarray(senders)
    receivers = np.asarray(receivers)
    if senders.shape != receivers.shape or senders.ndim != 1:
        raise GraphError(f"{name}: senders and receivers must be 1-D arrays of the same length")
    for arr in (senders, receivers):
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise GraphError(f"{name}: node ids must be integers, got {arr.dtype}")
    if num_nodes < 0 or num_nodes >= 2**31 - 1:
        raise GraphError(f"{name}: num_nodes={num_nodes} must lie in [0, 2^31 - 1)")
    if senders.size:
        lo = min(senders.min(), receivers.min())
        hi = max(senders.max(), receivers.max())
        if lo < 0 or hi >= num_nodes:
            raise GraphError(
                f"{name}: node ids must lie in [0, {num_nodes}), found ids in [{lo}, {hi}]"
            )
    src = senders.astype(np.int64, copy=False)
    dst = receivers.astype(np.int64, copy=False)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    if symmetrize:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    # One sort of a combined key orders edges by (receiver, sender) and exposes duplicates.
    key = np.unique(dst * np.int64(num_nodes) + src)
    dst_sorted = key // num_nodes
    indices = (key - dst_sorted * num_nodes).astype(np.int32)
    counts = np.bincount(dst_sorted, minlength=num_nodes)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return CSRGraph(indptr=indptr, indices=indices)
