"""The learning problem of checks 3 and 4: a GraphSAGE on a shipped graph, its exact loss, and the
library's samplers' stochastic gradients of it.

Parameters are handled as one flat vector ``theta`` (``jax.flatten_util.ravel_pytree`` of the
model's ``nnx.State``), so gradients can be compared, averaged and stepped with plain array maths.
Dropout is 0: the model is deterministic and the only randomness is the sampler's (and the
cache's). The exact loss runs the library's full-neighbourhood inference
(:func:`gns_jax.evaluate.full_inference`); sampled gradients run the library's samplers
(:func:`gns_jax.factories.make_sampler`) and the same model on their blocks.
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.flatten_util import ravel_pytree

import gns_jax.cache as cache_lib
from gns_jax.config import TrainConfig
from gns_jax.data import load_dataset
from gns_jax.evaluate import FullGraph, full_inference
from gns_jax.factories import make_sampler, prepare_features
from gns_jax.features import neighbour_means
from gns_jax.models import GraphSAGE

__all__ = ["Problem", "shared_problem", "sharing"]

_SHARED: dict | None = None  # the Problems of the open sharing scope (None: no scope open)


class Problem:
    """GraphSAGE ``(F, hidden, ..., C)`` with ``len(fanouts)`` layers on ``dataset``.

    Args:
      fanouts: per layer, output layer first (as on the command line); GNS takes up to the input
        layer's entry from the cache (``input_fanout = (0, K)``).
    """

    def __init__(self, dataset: str, hidden: int, fanouts: tuple[int, ...], seed: int = 0):
        self.dataset = load_dataset(dataset)
        ds = self.dataset
        x = prepare_features(ds, TrainConfig())
        self.x = jnp.asarray(x)
        # The rows a block's source slots read: node v's features, then (slot N + v) the mean of
        # its neighbours' features, which the exact input layer reads.
        self.table = jnp.concatenate([self.x, jnp.asarray(neighbour_means(ds.graph, x))])
        self.labels = jnp.asarray(np.maximum(ds.labels, 0))
        self.labelled = np.flatnonzero(ds.labels >= 0)
        self.fanouts = tuple(fanouts)
        self.full = FullGraph.from_graph(ds.graph)
        dims = (ds.num_features, *([hidden] * (len(fanouts) - 1)), ds.num_classes)
        model = GraphSAGE(dims, dropout_rate=0.0, rngs=nnx.Rngs(params=jax.random.key(seed)))
        self.graphdef, params = nnx.split(model)
        self.theta0, self.unravel = ravel_pytree(params)
        self.num_params = int(self.theta0.size)
        self._probs = cache_lib.cache_distribution(ds.graph, "degree")
        self._dummy = np.zeros((ds.num_nodes, 1), np.float32)
        self._nonempty: dict[int, np.ndarray] = {}
        self._trained: dict[tuple[int, float], jax.Array] = {}

        graphdef = self.graphdef

        def loss(theta, weights):
            logits = full_inference(graphdef, self.unravel(theta), self.x, self.full)
            ce = optax.softmax_cross_entropy_with_integer_labels(logits, self.labels)
            return jnp.sum(weights * ce)

        def sampled(theta, batch):
            def batch_loss(theta):
                model = nnx.merge(graphdef, self.unravel(theta))
                src = batch.blocks[0].src_nodes
                h = jnp.where((src >= 0)[:, None], self.table[jnp.maximum(src, 0)], 0.0)
                logits = model(h, batch.blocks)
                ce = optax.softmax_cross_entropy_with_integer_labels(
                    logits, self.labels[jnp.maximum(batch.seeds, 0)]
                )
                mask = batch.seed_mask.astype(ce.dtype)
                return jnp.sum(ce * mask) / jnp.maximum(mask.sum(), 1.0)

            return jax.grad(batch_loss)(theta)

        self.loss = jax.jit(loss)
        self.grad = jax.jit(jax.grad(loss))
        self.loss_and_grad = jax.jit(jax.value_and_grad(loss))
        self.hvp = jax.jit(lambda t, w, v: jax.jvp(lambda s: jax.grad(loss)(s, w), (t,), (v,))[1])
        self.sampled_grad = jax.jit(sampled)

    def weights(self, nodes: np.ndarray) -> jax.Array:
        """Loss weights ``1/|nodes|`` on ``nodes``: the exact loss of that batch."""
        w = np.zeros(self.dataset.num_nodes, np.float32)
        w[nodes] = 1.0 / len(nodes)
        return jnp.asarray(w)

    def sampler(self, fraction: float | None, batch_size: int, weights: str = "ht"):
        """The library's NS sampler (``fraction=None``) or GNS sampler at a cache fraction, with
        the input-layer estimator ``weights``. Not cached: a sampler traces the library's code
        when first used, so that a defect of :mod:`gns_jax.theory.mutations` in force then is in
        it."""
        config = TrainConfig(
            sampler="ns" if fraction is None else "gns",
            fanouts=self.fanouts,
            cache_fraction=fraction or 0.01,
            input_fanout=(0, self.fanouts[-1]),
            gns_weights=weights,
        )
        return make_sampler(self.dataset, config, batch_size)

    def draw_grad(self, sampler, theta, key, seeds, rng: np.random.Generator) -> jax.Array:
        """One stochastic gradient: for GNS a fresh cache (from ``rng``), then a sampled batch."""
        cache = None
        if sampler.uses_cache:
            m = sampler.cache_size
            snap = cache_lib.draw_cache(rng, self._probs, m)
            if m not in self._nonempty:  # depends on the distribution and m only: once per m
                graph = self.dataset.graph
                self._nonempty[m] = cache_lib.nonempty_probability(graph, snap.inclusion_prob, m)
            cache, _ = cache_lib.build_device_cache(
                self.dataset.graph,
                self._dummy,
                snap,
                with_other=sampler.needs_other,
                nonempty=self._nonempty[m],
            )
        batch = sampler.sample(key, sampler.pad_seeds(seeds), cache)
        return self.sampled_grad(theta, batch)

    def train(self, steps: int, lr: float = 0.01) -> jax.Array:
        """Full-batch Adam on the exact training loss: the "trained" parameters of check 3 (and
        of check 4's step size); computed once per ``(steps, lr)`` (it is deterministic)."""
        if (steps, lr) not in self._trained:
            self._trained[(steps, lr)] = self._train(steps, lr)
        return self._trained[(steps, lr)]

    def _train(self, steps: int, lr: float) -> jax.Array:
        tx = optax.adam(lr)
        w = self.weights(self.dataset.train_idx)

        @jax.jit
        def step(theta, state):
            updates, state = tx.update(self.grad(theta, w), state, theta)
            return optax.apply_updates(theta, updates), state

        theta, state = self.theta0, tx.init(self.theta0)
        for _ in range(steps):
            theta, state = step(theta, state)
        return theta

    def smoothness(self, theta, weights, iterations: int, seed: int = 0) -> float:
        """The largest ``|eigenvalue|`` of the loss Hessian at ``theta``, by power iteration."""
        v = jax.random.normal(jax.random.key(seed), theta.shape)
        v = v / jnp.linalg.norm(v)
        value = 0.0
        for _ in range(iterations):
            hv = self.hvp(theta, weights, v)
            value = float(jnp.vdot(v, hv))
            v = hv / jnp.maximum(jnp.linalg.norm(hv), 1e-30)
        return abs(value)


@contextlib.contextmanager
def sharing():
    """Within the block, :func:`shared_problem` gives one :class:`Problem` per arguments: the
    modules that one process runs (:func:`gns_jax.theory.runner.run`) share the model, its
    compiled loss and its trained parameters instead of building and training it again. Open it
    only where one mutation (:mod:`gns_jax.theory.mutations`) is in force throughout: a Problem
    remembers figures of the library's cache (``P(N_C(v) non-empty)`` per cache size)."""
    global _SHARED
    saved, _SHARED = _SHARED, {}
    try:
        yield
    finally:
        _SHARED = saved


def shared_problem(dataset: str, hidden: int, fanouts: tuple[int, ...], seed: int = 0) -> Problem:
    """``Problem(dataset, hidden, fanouts, seed)``, the same one throughout a :func:`sharing`
    block (a new one outside any)."""
    if _SHARED is None:
        return Problem(dataset, hidden, fanouts, seed)
    key = (dataset, hidden, tuple(fanouts), seed)
    if key not in _SHARED:
        _SHARED[key] = Problem(*key)
    return _SHARED[key]
