"""Small helpers shared by the tests."""

import contextlib
import threading

import jax
import numpy as np
from jax._src import array as jax_array

from gns_jax.graph import CSRGraph, from_edges

# A command line of a tiny run (400 nodes, 2 epochs, a few seconds), for the command's tests.
TINY_SPEC = "synthetic:nodes=400,degree=6,features=8,classes=3"
TINY_ARGS = (
    *("--dataset", TINY_SPEC, "--epochs", "2", "--batch-size", "16"),
    *("--fanouts", "4,3", "--hidden", "16"),
)


def random_graph(
    seed: int, num_nodes: int = 60, num_edges: int = 150, isolated: int = 5
) -> CSRGraph:
    """A random undirected graph whose last ``isolated`` nodes have no edges."""
    rng = np.random.default_rng(seed)
    live = num_nodes - isolated
    # A few hubs so that some degrees exceed the fan-outs, plus uniform edges.
    hubs = rng.integers(0, 3, size=num_edges // 3)
    src = np.concatenate([hubs, rng.integers(0, live, size=num_edges)])
    dst = rng.integers(0, live, size=src.shape[0])
    return from_edges(src, dst, num_nodes)


def edge_set(graph: CSRGraph) -> set[tuple[int, int]]:
    senders, receivers = graph.edges()
    return set(zip(senders.tolist(), receivers.tolist(), strict=True))


def concat_sage(dims, seed: int = 0):
    """A model that is not GraphSAGE and offers no exact inference: per layer
    ``h_v' = W [h_v || sum_u w_uv h_u]`` (concatenation instead of a sum of two projections),
    ReLU between layers, dropout on the input when a key is given."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    class _ConcatSAGE(nnx.Module):
        def __init__(self, dims, *, rngs):
            pairs = zip(dims[:-1], dims[1:])
            self.layers = nnx.List([nnx.Linear(2 * a, b, rngs=rngs) for a, b in pairs])

        def __call__(self, x, blocks, *, key=None):
            if key is not None:
                x = jnp.where(jax.random.bernoulli(key, 0.9, x.shape), x / 0.9, 0.0)
            h = x
            for i, (layer, block) in enumerate(zip(self.layers, blocks)):
                agg = jax.ops.segment_sum(
                    h[block.senders] * block.edge_weight[:, None],
                    block.receivers,
                    num_segments=block.num_dst,
                )
                h = layer(jnp.concatenate([h[: block.num_dst], agg], axis=-1))
                if i < len(blocks) - 1:
                    h = jax.nn.relu(h)
            return h

    return _ConcatSAGE(dims, rngs=nnx.Rngs(params=jax.random.key(seed)))


def gnn_benchmark_npz(adj, attr, labels: np.ndarray) -> dict:
    """The arrays of a gnn-benchmark ``.npz`` (Amazon Photo's layout): the CSR parts of the
    adjacency ``adj`` and of the attribute matrix ``attr`` (scipy sparse), and ``labels``."""
    return dict(
        adj_data=adj.data,
        adj_indices=adj.indices,
        adj_indptr=adj.indptr,
        adj_shape=np.array(adj.shape),
        attr_data=attr.data,
        attr_indices=attr.indices,
        attr_indptr=attr.indptr,
        attr_shape=np.array(attr.shape),
        labels=labels,
    )


class HostSyncs:
    """Counts the main thread's host synchronisations while :meth:`watching`:
    ``jax.block_until_ready`` and ``jax.device_get`` (one each, whatever the tree) and every other
    wait for a device array or read of its value on the host (``np.asarray``, ``float``,
    ``.item()``, ...). Other threads (the input thread's) are not counted."""

    def __init__(self):
        self.count, self._inside = 0, False

    def _counted(self, fn):
        def wrapper(*args, **kwargs):
            if threading.current_thread() is not threading.main_thread() or self._inside:
                return fn(*args, **kwargs)
            self.count, self._inside = self.count + 1, True
            try:
                return fn(*args, **kwargs)
            finally:
                self._inside = False

        return wrapper

    @contextlib.contextmanager
    def watching(self):
        impl = jax_array.ArrayImpl
        patched = [
            (jax, "block_until_ready", self._counted(jax.block_until_ready)),
            (jax, "device_get", self._counted(jax.device_get)),
            (impl, "block_until_ready", self._counted(impl.block_until_ready)),
            (impl, "_value", property(self._counted(impl._value.fget))),
        ]
        saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in patched]
        try:
            for owner, name, value in patched:
                setattr(owner, name, value)
            yield self
        finally:
            for owner, name, value in saved:
                setattr(owner, name, value)
