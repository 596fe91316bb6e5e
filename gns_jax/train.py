"""Pure jitted train step, exact full-neighbourhood evaluation, and the host epoch loop ``fit``.

Device side: :func:`train_step` is pure (``state, batch -> state, metrics``) over the functional
split of a Flax NNX model (``nnx.split`` once, ``nnx.merge`` inside jit), so it can be jitted,
differentiated and called eagerly in tests. :func:`full_inference` computes every node's logits
layer by layer over the whole graph with all neighbours (no sampling), which is the evaluation.

Host side: :func:`fit` runs the epochs: redraw the GNS cache every ``cache_refresh`` epochs (timed,
its bytes counted), shuffle the training nodes, sample each batch on the topology device, move the
input features that are not cached (counted), step, evaluate, and time it all. The input side
(everything before the step) runs in a bounded background thread (:mod:`gns_jax.pipeline`), up to
``config.prefetch`` batches ahead of the device.

Randomness: one stream per purpose, derived from ``(seed, stream, counter)``: the shuffle of epoch
``e`` uses ``np.random.default_rng([seed, SHUFFLE, e])``, the cache drawn at epoch ``e``
``np.random.default_rng([seed, CACHE, e])``, the sampler key of batch ``t`` is
``fold_in(fold_in(key(seed), SAMPLE), t)`` and dropout folds the step number into its own key.
Changing the refresh period therefore leaves the batch order alone. Same seed, same machine:
identical losses.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from gns_jax.cache import (
    DISTRIBUTIONS,
    build_device_cache,
    cache_distribution,
    cache_size,
    draw_cache,
)
from gns_jax.data import Dataset
from gns_jax.errors import ConfigError
from gns_jax.features import FeatureLoader, normalize_rows
from gns_jax.instrument import CompileCounter, Stopwatch, TransferMeter
from gns_jax.models import GraphSAGE
from gns_jax.pipeline import prefetch
from gns_jax.sampling.blocks import Block, Budget
from gns_jax.sampling.gns import WEIGHTS, GNSSampler
from gns_jax.sampling.nodewise import NodeWiseSampler

__all__ = [
    "FullGraph",
    "HostFeatures",
    "SparseFeatures",
    "TrainConfig",
    "TrainState",
    "evaluate",
    "fit",
    "full_inference",
    "init_state",
    "make_train_step",
    "train_step",
]

_SHUFFLE, _SAMPLE, _DROPOUT, _INIT, _CACHE, _CALIBRATE = 0, 1, 2, 3, 4, 5  # one stream a purpose
CALIBRATION_BATCHES = 8  # worst-case batches whose real sizes size a calibrated budget
CALIBRATION_MARGIN = 1.2  # head-room over the largest size seen (then rounded up to a bucket)
GROWTH_MARGIN = 1.5  # head-room after an overflow


@jax.jit
def _layer_sizes(batch) -> tuple[jax.Array, jax.Array]:
    """Per block (input first): source nodes that are not destinations, and real edges."""
    new = [jnp.sum(b.src_nodes >= 0) - jnp.sum(b.dst_mask) for b in batch.blocks]
    edges = [jnp.sum(b.edge_weight != 0) for b in batch.blocks]
    return jnp.stack(new), jnp.stack(edges)


class LayerSizes:
    """The largest real layer sizes seen in worst-case batches; what a calibrated budget covers.

    Per block (input first): source nodes that are not destinations, and real edges.
    """

    def __init__(self):
        self.new = self.edges = None

    def observe(self, batch) -> None:
        """Folds one batch's real sizes into the maxima (one device -> host sync)."""
        new, edges = (np.asarray(a) for a in jax.device_get(_layer_sizes(batch)))
        self.new = new if self.new is None else np.maximum(self.new, new)
        self.edges = edges if self.edges is None else np.maximum(self.edges, edges)

    def budget(self, worst: Budget, margin: float) -> Budget:
        """:meth:`Budget.calibrated` over the maxima seen so far."""
        return worst.calibrated(self.new, self.edges, margin)


SAMPLERS = ("gns", "ns")
BUDGETS = ("auto", "calibrated", "worst")
AUTO_SAVING = 0.75  # auto keeps the worst case unless calibration cuts a layer's slots below this


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Every option of a training run (the ``config`` of the JSON results).

    ``fanouts`` are listed from the output layer to the input layer, as on the command line
    (PyG's ``num_neighbors`` order); the model has ``len(fanouts)`` layers.

    ``budget`` sets the static sizes of a batch: ``worst`` is the exact worst case (no batch can
    overflow it); ``calibrated`` sizes each layer from the real sizes of the first
    ``CALIBRATION_BATCHES`` batches (sampled under the worst case) plus 20 % and a bucket, and a
    batch that would not fit is measured, the budget grown (one more compilation) and the batch
    sampled again, never truncated; ``auto`` calibrates, but keeps the worst case when
    calibration would not cut some layer's node or edge slots below ``AUTO_SAVING`` of it.
    """

    sampler: str = "gns"
    epochs: int = 100
    batch_size: int = 1000
    fanouts: tuple[int, ...] = (15, 10, 5)
    hidden: int = 256
    lr: float = 0.003
    weight_decay: float = 5e-4
    dropout: float = 0.5
    feature_norm: str = "auto"
    seed: int = 0
    eval_every: int = 1
    cache_fraction: float = 0.01
    cache_refresh: int = 1
    cache_dist: str = "degree"
    input_fanout: tuple[int, int] = (0, 10)
    cache_first: bool = False
    gns_weights: str = "ht"
    prefetch: int = 2
    budget: str = "auto"

    def validate(self) -> TrainConfig:
        """Raises ConfigError naming the option when a value is impossible."""
        if self.sampler not in SAMPLERS:
            raise ConfigError(f"--sampler: unknown sampler '{self.sampler}' (known: {SAMPLERS})")
        if not self.fanouts or any(int(f) < 1 for f in self.fanouts):
            raise ConfigError(
                f"--fanouts: every fan-out must be a positive integer, got {self.fanouts}"
            )
        for name, value in (
            ("--epochs", self.epochs),
            ("--batch-size", self.batch_size),
            ("--hidden", self.hidden),
            ("--eval-every", self.eval_every),
        ):
            if int(value) < 1:
                raise ConfigError(f"{name}: must be a positive integer, got {value}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ConfigError(f"--lr: must be a positive number, got {self.lr}")
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            raise ConfigError(f"--weight-decay: must be >= 0, got {self.weight_decay}")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"--dropout: must lie in [0, 1), got {self.dropout}")
        if self.feature_norm not in ("auto", "row", "none"):
            raise ConfigError(f"--feature-norm: auto, row or none, got '{self.feature_norm}'")
        cache_size(self.cache_fraction, 1)  # validates the fraction
        if int(self.cache_refresh) < 1:
            raise ConfigError(
                f"--cache-refresh: must be a positive integer, got {self.cache_refresh}"
            )
        if self.cache_dist not in DISTRIBUTIONS:
            raise ConfigError(
                f"--cache-dist: unknown distribution '{self.cache_dist}' (known: {DISTRIBUTIONS})"
            )
        lo, hi = self.input_fanout
        if lo < 0 or hi < 1 or lo > hi:
            raise ConfigError(
                f"--input-fanout: need 0 <= min <= max and max >= 1, got min={lo}, max={hi}"
            )
        if self.budget not in BUDGETS:
            raise ConfigError(f"--budget: one of {BUDGETS}, got '{self.budget}'")
        if int(self.prefetch) < 0:
            raise ConfigError(f"--prefetch: must be >= 0 batches, got {self.prefetch}")
        if self.gns_weights not in WEIGHTS:
            raise ConfigError(f"--gns-weights: unknown '{self.gns_weights}' (known: {WEIGHTS})")
        return self


class TrainState(NamedTuple):
    """Everything that changes during training; a pytree."""

    params: nnx.State
    opt_state: optax.OptState
    step: jax.Array  # int32 scalar


def make_optimizer(config: TrainConfig) -> optax.GradientTransformation:
    """Adam with L2 regularisation added to the gradient (PyTorch ``Adam(weight_decay=...)``)."""
    return optax.chain(optax.add_decayed_weights(config.weight_decay), optax.adam(config.lr))


def init_state(
    key: jax.Array, dims: tuple[int, ...], config: TrainConfig, tx: optax.GradientTransformation
) -> tuple[nnx.GraphDef, TrainState]:
    """Builds the model and returns its static graph definition and the initial state."""
    model = GraphSAGE(dims, dropout_rate=config.dropout, rngs=nnx.Rngs(params=key))
    graphdef, params = nnx.split(model)
    return graphdef, TrainState(params, tx.init(params), jnp.zeros((), jnp.int32))


def _masked_loss(logits, labels, mask):
    per_seed = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    weight = mask.astype(per_seed.dtype)
    return jnp.sum(per_seed * weight) / jnp.maximum(weight.sum(), 1.0)


def train_step(
    state: TrainState,
    x: jax.Array,
    blocks: tuple[Block, ...],
    seeds: jax.Array,
    labels: jax.Array,
    key: jax.Array,
    *,
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """One optimiser step on a sampled batch. Pure: no host I/O, no Python-side state.

    Args:
      x: float32 ``[max_src0, F]`` input features of ``blocks[0]``'s source slots.
      seeds: int32 ``[max_seeds]`` seed ids, ``-1`` on padding (left out of the loss).
      labels: int32 ``[num_nodes]`` labels of every node, on the device.
      key: dropout key; the step number is folded in.
    """
    key = jax.random.fold_in(key, state.step)
    seed_mask = seeds >= 0
    labels = labels[jnp.maximum(seeds, 0)]

    def loss_fn(params):
        model = nnx.merge(graphdef, params)
        logits = model(x, blocks, key=key)
        return _masked_loss(logits, labels, seed_mask), logits

    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    correct = jnp.sum((jnp.argmax(logits, -1) == labels) & seed_mask)
    metrics = {"loss": loss, "correct": correct, "count": jnp.sum(seed_mask)}
    return TrainState(params, opt_state, state.step + 1), metrics


def make_train_step(graphdef, tx, counter: CompileCounter | None = None):
    """``jax.jit`` of :func:`train_step` with the state donated; traces counted by ``counter``."""
    fn = functools.partial(train_step, graphdef=graphdef, tx=tx)
    if counter is not None:
        fn = counter.wrap(fn)
    return jax.jit(fn, donate_argnums=0)


def _chunked(chunk: int, *arrays: tuple[np.ndarray, type]) -> list[np.ndarray]:
    """Zero-pads equal-length arrays to whole chunks, each reshaped to ``[num_chunks, chunk]``."""
    length = arrays[0][0].shape[0]
    total = max(1, -(-length // chunk)) * chunk
    out = []
    for a, dtype in arrays:
        padded = np.zeros(total, dtype=dtype)
        padded[:length] = a
        out.append(padded.reshape(-1, chunk))
    return out


class FullGraph(NamedTuple):
    """All edges with mean coefficients ``1/d_v``, padded to whole chunks, on a device.

    Attributes:
      senders, receivers: int32 ``[num_chunks, chunk]``; padding edges are ``0 -> 0`` with weight 0.
      edge_weight: float32 ``[num_chunks, chunk]``.
    """

    senders: jax.Array
    receivers: jax.Array
    edge_weight: jax.Array

    @classmethod
    def from_graph(cls, graph, meter: TransferMeter | None = None, chunk: int = 1 << 18):
        senders, receivers = graph.edges()
        degree = graph.degrees()
        weight = (1.0 / np.maximum(degree, 1))[receivers].astype(np.float32)
        chunk = max(1, min(chunk, senders.shape[0]))
        arrays = cls(
            *_chunked(chunk, (senders, np.int32), (receivers, np.int32), (weight, np.float32))
        )
        return meter.put(arrays, tag="eval") if meter else jax.device_put(arrays)


class SparseFeatures(NamedTuple):
    """A feature matrix in coordinate form, padded to whole chunks (padding values are 0).

    Evaluation multiplies the features of all nodes by the first layer's weights; for bag-of-words
    features (under 1 % non-zero on Cora, CiteSeer, Coauthor, Facebook) the product over the
    non-zeros is far cheaper than a dense matmul and gives the same numbers up to rounding.
    """

    rows: jax.Array  # int32 [num_chunks, chunk]
    cols: jax.Array  # int32 [num_chunks, chunk]
    values: jax.Array  # float32 [num_chunks, chunk]

    @classmethod
    def from_dense(cls, x: np.ndarray, chunk: int = 1 << 16) -> SparseFeatures:
        rows, cols = np.nonzero(x)
        values = x[rows, cols]
        return cls(*_chunked(chunk, (rows, np.int32), (cols, np.int32), (values, np.float32)))


def _sparse_matmul(x: SparseFeatures, kernel: jax.Array, num_rows: int) -> jax.Array:
    """``X @ kernel`` for coordinate-form ``X``, one chunk of non-zeros at a time."""

    def body(acc, chunk):
        r, c, v = chunk
        return acc + jax.ops.segment_sum(kernel[c] * v[:, None], r, num_segments=num_rows), None

    out, _ = jax.lax.scan(body, jnp.zeros((num_rows, kernel.shape[1]), kernel.dtype), tuple(x))
    return out


def _aggregate(z: jax.Array, graph: FullGraph) -> jax.Array:
    """``out[v] = sum_u w_uv z[u]`` over every edge, one chunk of edges at a time."""

    def body(acc, chunk):
        s, r, w = chunk
        return acc + jax.ops.segment_sum(z[s] * w[:, None], r, num_segments=z.shape[0]), None

    out, _ = jax.lax.scan(body, jnp.zeros_like(z), tuple(graph))
    return out


class HostFeatures(NamedTuple):
    """A host (possibly memory-mapped) feature matrix that evaluation streams in row chunks.

    The first layer's projections ``x W_self + b`` and ``x W_nbr`` are computed ``chunk`` rows at
    a time (each chunk moved to the device, float32, and dropped), so neither the host RAM nor the
    device ever holds the whole matrix; the layers above work on ``hidden``-wide rows.
    """

    array: np.ndarray
    chunk: int = 1 << 16


@functools.partial(jax.jit, static_argnums=0, donate_argnums=(2, 3))
def _project_rows(graphdef: nnx.GraphDef, params: nnx.State, self_part, nbr_part, rows, start):
    """Writes the first layer's projections of ``rows`` into the donated outputs at ``start``."""
    conv = nnx.merge(graphdef, params).convs[0]
    self_part = jax.lax.dynamic_update_slice_in_dim(self_part, conv.self_proj(rows), start, 0)
    nbr_part = jax.lax.dynamic_update_slice_in_dim(nbr_part, conv.nbr_proj(rows), start, 0)
    return self_part, nbr_part


def _next_layer(graphdef, index: int, params, self_part, nbr_part, graph: FullGraph):
    """Layer ``index``'s projections of ``relu(self_part + A nbr_part)``."""
    conv = nnx.merge(graphdef, params).convs[index]
    h = jax.nn.relu(_combine(self_part, nbr_part, graph))
    return conv.self_proj(h), conv.nbr_proj(h)


# Inputs are donated where the outputs have their shape (a hidden -> hidden layer), so that the
# new projections are written over the old ones.
_next_layer_in_place = jax.jit(_next_layer, static_argnums=(0, 1), donate_argnums=(3, 4))
_next_layer_jit = jax.jit(_next_layer, static_argnums=(0, 1))


@functools.partial(jax.jit, donate_argnums=0)
def _last_layer(self_part, nbr_part, graph: FullGraph):
    return _combine(self_part, nbr_part, graph)


def _combine(self_part, nbr_part, graph: FullGraph):
    """A layer's output from its projections: ``self_part + A nbr_part``."""
    return self_part + _aggregate(nbr_part, graph)


@functools.partial(jax.jit, static_argnums=0)
def _upper_layers(graphdef, params, self_part, nbr_part, graph: FullGraph):
    """Every layer after the first layer's projections, in one computation."""
    for index in range(1, len(nnx.merge(graphdef, params).convs)):
        self_part, nbr_part = _next_layer(graphdef, index, params, self_part, nbr_part, graph)
    return _combine(self_part, nbr_part, graph)


@functools.partial(jax.jit, static_argnums=(0, 4))
def _full_inference(graphdef, params, x, graph, num_nodes):
    model = nnx.merge(graphdef, params)
    conv = model.convs[0]
    if isinstance(x, SparseFeatures):
        self_part = _sparse_matmul(x, conv.self_proj.kernel[...], num_nodes)
        self_part = self_part + conv.self_proj.bias[...][None, :]
        nbr_part = _sparse_matmul(x, conv.nbr_proj.kernel[...], num_nodes)
    else:
        self_part, nbr_part = conv.self_proj(x), conv.nbr_proj(x)
    return _upper_layers(graphdef, params, self_part, nbr_part, graph)


def full_inference(
    graphdef: nnx.GraphDef,
    params: nnx.State,
    x: jax.Array | SparseFeatures | HostFeatures,
    graph: FullGraph,
    num_nodes: int | None = None,
    meter: TransferMeter | None = None,
):
    """Exact layer-wise inference: all nodes, all neighbours, no dropout. Returns ``[N, C]`` logits.

    Uses ``W_nbr sum_u w_uv h_u = sum_u w_uv (W_nbr h_u)`` (``nbr_proj`` has no bias), so each layer
    aggregates ``out_dim``-wide rows rather than ``in_dim``-wide ones. ``x`` is dense ``[N, F]`` on
    the device, :class:`SparseFeatures` with ``num_nodes`` given (both jitted whole), or
    :class:`HostFeatures`, streamed in row chunks (moved through ``meter`` under ``"eval"``)
    into preallocated projections, then one jitted call per layer whose ``[N, hidden]`` inputs
    are donated, so that at most about four ``[N, hidden]`` arrays are alive at once.
    """
    if not isinstance(x, HostFeatures):
        return _full_inference(graphdef, params, x, graph, num_nodes)
    put = functools.partial(meter.put, tag="eval") if meter else jax.device_put
    model = nnx.merge(graphdef, params)
    n = x.array.shape[0]
    chunk = min(x.chunk, n)
    total = -(-n // chunk) * chunk  # rows past n are padding; no edge reads them
    width = model.convs[0].self_proj.out_features
    self_part, nbr_part = jnp.zeros((total, width)), jnp.zeros((total, width))
    for start in range(0, n, chunk):
        rows = np.asarray(x.array[start : start + chunk], dtype=np.float32)
        if rows.shape[0] < chunk:  # one shape for every chunk: pad the last
            rows = np.concatenate(
                [rows, np.zeros((chunk - rows.shape[0], rows.shape[1]), rows.dtype)]
            )
        rows, offset = put((rows, np.int32(start)))
        self_part, nbr_part = _project_rows(graphdef, params, self_part, nbr_part, rows, offset)
    for index in range(1, len(model.convs)):
        same = model.convs[index].self_proj.out_features == self_part.shape[1]
        step = _next_layer_in_place if same else _next_layer_jit
        self_part, nbr_part = step(graphdef, index, params, self_part, nbr_part, graph)
    return _last_layer(self_part, nbr_part, graph)[:n]


def evaluate(
    logits: jax.Array, labels: jax.Array, splits: dict[str, jax.Array]
) -> dict[str, float]:
    """Accuracy of ``argmax(logits)`` on each split (host floats; one sync)."""
    return {name: float(v) for name, v in jax.device_get(_accuracy(logits, labels, splits)).items()}


@jax.jit
def _accuracy(logits, labels, splits):
    pred = jnp.argmax(logits, -1)
    return {name: jnp.mean(pred[idx] == labels[idx]) for name, idx in splits.items()}


def _progress(quiet: bool, message: str) -> None:
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def _feature_norm(dataset: Dataset, config: TrainConfig) -> str:
    """``auto``: row-normalise sparse non-negative (bag-of-words) features, as PyG's
    ``NormalizeFeatures`` is used for Planetoid and Coauthor; keep dense features as stored, and
    memory-mapped ones too (normalising would load them whole)."""
    mapped = isinstance(dataset.features, np.memmap)
    if config.feature_norm == "row" and mapped:
        raise ConfigError(
            "--feature-norm row: the features are memory-mapped from disk and are used as "
            "stored; normalise them before `gns-jax save`, or use --feature-norm none"
        )
    if config.feature_norm != "auto":
        return config.feature_norm
    if mapped:
        return "none"
    x = dataset.features
    sparse = np.count_nonzero(x) < 0.05 * x.size
    return "row" if sparse and x.min() >= 0 else "none"


def make_sampler(dataset: Dataset, config: TrainConfig, batch_size: int):
    """The sampler of ``config.sampler`` (fan-outs turned input layer first)."""
    fanouts = tuple(reversed(config.fanouts))
    if config.sampler == "ns":
        return NodeWiseSampler(dataset.graph, fanouts, batch_size)
    return GNSSampler(
        dataset.graph,
        fanouts,
        batch_size,
        cache_size(config.cache_fraction, dataset.num_nodes),
        input_fanout=config.input_fanout,
        cache_first_upper=config.cache_first,
        weights=config.gns_weights,
    )


def fit(
    dataset: Dataset, config: TrainConfig, *, quiet: bool = False, evaluate_model: bool = True
) -> dict[str, Any]:
    """Trains and evaluates; returns the JSON-ready results of DESIGN.md section 5.

    Test accuracy is reported at the epoch of best validation accuracy (ties: the earliest).
    ``evaluate_model=False`` (benchmarks) skips evaluation and its full-graph arrays; the
    accuracies are then ``None``.
    """
    config.validate()
    batch_size = min(config.batch_size, dataset.train_idx.shape[0])  # one batch may hold all
    features = dataset.features
    if _feature_norm(dataset, config) == "row":
        features = normalize_rows(features)
    meter = TransferMeter()
    sampler = make_sampler(dataset, config, batch_size)
    loader = FeatureLoader(features, meter)
    labels = meter.put(dataset.labels, tag="labels")
    splits = meter.put(
        {"train": dataset.train_idx, "val": dataset.val_idx, "test": dataset.test_idx}, tag="labels"
    )
    if evaluate_model:
        full_graph = FullGraph.from_graph(dataset.graph, meter)
        if isinstance(features, np.memmap):  # streamed from the file at each evaluation
            x_all = HostFeatures(features)
        else:
            density = np.count_nonzero(features) / max(features.size, 1)
            x_all = meter.put(
                SparseFeatures.from_dense(features) if density < 0.05 else features, tag="eval"
            )
    use_cache = config.sampler == "gns"
    if use_cache:
        probs = cache_distribution(
            dataset.graph,
            config.cache_dist,
            train_idx=dataset.train_idx,
            num_steps=len(config.fanouts),
        )
        num_draws = cache_size(config.cache_fraction, dataset.num_nodes)

    tx = make_optimizer(config)
    dims = (
        dataset.num_features,
        *([config.hidden] * (len(config.fanouts) - 1)),
        dataset.num_classes,
    )
    # One-time setup may move Python scalars implicitly; the per-batch path below moves data
    # only through ``meter.put`` (the tests run it under a transfer guard).
    with jax.transfer_guard_host_to_device("allow"):
        base_key = jax.random.key(config.seed)
        graphdef, state = init_state(jax.random.fold_in(base_key, _INIT), dims, config, tx)
        sample_key = jax.random.fold_in(base_key, _SAMPLE)
        calib_key = jax.random.fold_in(base_key, _CALIBRATE)
        dropout_key = jax.random.fold_in(base_key, _DROPOUT)
    counter = CompileCounter()
    step = make_train_step(graphdef, tx, counter)

    history, best = [], {"val": None, "test": None, "epoch": -1}
    totals = {"rows": 0, "inputs": 0, "batches": 0}
    refresh_s, cached_nodes = [], []
    feature_bytes_before = meter.bytes_by_tag["features"]
    # Two clocks: the input side (its own thread when prefetching) and the device side.
    input_watch, device_watch = Stopwatch(), Stopwatch()
    produced = {"timed": 0}
    train_idx = dataset.train_idx
    num_batches = -(-train_idx.shape[0] // batch_size)

    worst = sampler  # the exact worst-case budget: never overflows
    budget_log = {"growths": 0}
    sizes = LayerSizes()  # of worst-case batches: the calibration and any growth
    observe = sizes.observe

    def draw(active, key, seeds, cache):
        return active.sample(key, seeds, cache) if use_cache else active.sample(key, seeds)

    def calibrated(margin: float):
        return worst.with_budget(sizes.budget(worst.budget, margin))

    def produce():
        """The input side of every step, in order: cache refreshes, sampling, feature moves."""
        cache, active = None, sampler
        for epoch in range(config.epochs):
            if epoch == 1:  # the time split leaves out the first epoch (compilation)
                input_watch.seconds.clear()
                produced["timed"] = 0
            if use_cache and epoch % config.cache_refresh == 0:
                start = time.perf_counter()
                rng = np.random.default_rng([config.seed, _CACHE, epoch])
                snapshot = draw_cache(rng, probs, num_draws)
                cache, _ = build_device_cache(
                    dataset.graph,
                    features,
                    snapshot,
                    put=functools.partial(meter.put, tag="cache"),
                    with_other=sampler.needs_other,
                )
                jax.block_until_ready(cache)
                refresh_s.append(time.perf_counter() - start)
                cached_nodes.append(snapshot.num_cached)
            order = np.random.default_rng([config.seed, _SHUFFLE, epoch]).permutation(train_idx)
            if epoch == 0 and config.budget != "worst":
                # Real sizes of the first batches under the worst case, from their own keys.
                for b in range(min(CALIBRATION_BATCHES, num_batches)):
                    seeds, counter_t = meter.put(
                        (
                            sampler.pad_seeds(order[b * batch_size : (b + 1) * batch_size]),
                            np.int32(b),
                        ),
                        tag="structure",
                    )
                    observe(draw(worst, jax.random.fold_in(calib_key, counter_t), seeds, cache))
                active = calibrated(CALIBRATION_MARGIN)
                ratios = [
                    a / w
                    for a, w in zip(
                        active.budget.max_src + active.budget.max_edges,
                        worst.budget.max_src + worst.budget.max_edges,
                    )
                ]
                if config.budget == "auto" and min(ratios) > AUTO_SAVING:
                    active = worst  # the exact worst case is affordable: no overflow possible
            for b in range(num_batches):
                seeds, counter_t = meter.put(
                    (
                        sampler.pad_seeds(order[b * batch_size : (b + 1) * batch_size]),
                        np.int32(epoch * num_batches + b),
                    ),
                    tag="structure",
                )
                batch_key = jax.random.fold_in(sample_key, counter_t)
                with input_watch("sample"):
                    batch = draw(active, batch_key, seeds, cache)
                    overflow = np.asarray(jax.device_get(batch.overflow))
                    if overflow.any():
                        if active is worst:
                            raise RuntimeError(
                                f"sampler budget overflow {overflow.tolist()} "
                                "(a bug: the budget is the worst case)"
                            )
                        # Never truncate: measure this batch exactly, grow, and sample it again
                        # (one more compilation of the sampler and the step).
                        observe(draw(worst, batch_key, seeds, cache))
                        active = calibrated(GROWTH_MARGIN)
                        budget_log["growths"] += 1
                        batch = draw(active, batch_key, seeds, cache)
                        if np.asarray(jax.device_get(batch.overflow)).any():
                            active = worst
                            batch = draw(active, batch_key, seeds, cache)
                    jax.block_until_ready(batch)
                x, num_inputs, num_rows = loader.load(batch.input_nodes, cache, watch=input_watch)
                totals["rows"] += num_rows
                totals["inputs"] += num_inputs
                totals["batches"] += 1
                produced["timed"] += 1
                budget_log["active"] = active.budget
                yield x, batch

    inputs = prefetch(produce(), config.prefetch)
    timed_batches = 0
    try:
        for epoch in range(config.epochs):
            start = time.perf_counter()
            if epoch == 1:
                device_watch.seconds.clear()
                timed_batches = 0
            losses = []
            for _ in range(num_batches):
                with device_watch("wait"):  # the device idles while the input is not ready
                    x, batch = next(inputs)
                with device_watch("step"):
                    state, metrics = step(state, x, batch.blocks, batch.seeds, labels, dropout_key)
                    jax.block_until_ready(state)
                losses.append(metrics["loss"])
                timed_batches += 1
            epoch_time = time.perf_counter() - start
            train_loss = float(np.mean(jax.device_get(losses)))
            record = {"epoch": epoch, "train_loss": train_loss, "time_s": epoch_time}
            if evaluate_model and (
                (epoch + 1) % config.eval_every == 0 or epoch == config.epochs - 1
            ):
                logits = full_inference(
                    graphdef, state.params, x_all, full_graph, dataset.num_nodes, meter
                )
                acc = evaluate(logits, labels, splits)
                record |= {
                    "val_accuracy": acc["val"],
                    "test_accuracy": acc["test"],
                    "train_accuracy": acc["train"],
                }
                if best["val"] is None or acc["val"] > best["val"]:
                    best = {"val": acc["val"], "test": acc["test"], "epoch": epoch}
            history.append(record)
            _progress(
                quiet,
                f"epoch {epoch + 1:>4}/{config.epochs}  loss {train_loss:.4f}  "
                + (f"val {record['val_accuracy']:.4f}  " if "val_accuracy" in record else "")
                + f"{epoch_time:.2f}s  {train_idx.shape[0] / epoch_time:,.0f} seeds/s",
            )
    finally:
        inputs.close()
    rows_moved, input_nodes, batches = totals["rows"], totals["inputs"], totals["batches"]

    times = [h["time_s"] for h in history[1:]] or [history[0]["time_s"]]
    feature_bytes = meter.bytes_by_tag["features"] - feature_bytes_before
    structure_bytes = meter.bytes_by_tag["structure"]
    return {
        "val_accuracy": best["val"],
        "test_accuracy": best["test"],
        "best_epoch": best["epoch"],
        "epochs": history,
        "epoch_time_s": float(np.median(times)),
        "input_nodes_per_batch": input_nodes / batches,
        "h2d_rows_per_batch": rows_moved / batches,
        "h2d_bytes_per_batch": (feature_bytes + structure_bytes) / batches,
        "cache_hit_rate": 1.0 - rows_moved / max(input_nodes, 1) if use_cache else 0.0,
        "cache_refresh_s": float(np.median(refresh_s)) if refresh_s else 0.0,
        "cache_refreshes": len(refresh_s),
        "cache_nodes": float(np.mean(cached_nodes)) if cached_nodes else 0.0,
        "cache_bytes_per_refresh": meter.bytes_by_tag["cache"] / max(len(refresh_s), 1),
        "compilations": counter.count,
        "assemble_compilations": loader.compilations,
        "time_split_s": {
            **{k: v / max(produced["timed"], 1) for k, v in input_watch.seconds.items()},
            **{k: v / max(timed_batches, 1) for k, v in device_watch.seconds.items()},
        },
        "input_wait_fraction": device_watch.seconds["wait"]
        / max(device_watch.seconds["wait"] + device_watch.seconds["step"], 1e-12),
        "prefetch": config.prefetch,
        "batch_size": batch_size,
        "budget": {
            "mode": config.budget,
            "calibrated": budget_log.get("active", worst.budget) != worst.budget,
            "input_slots": int(budget_log.get("active", worst.budget).max_src[0]),
            "worst_case_input_slots": int(worst.budget.max_src[0]),
            "edge_slots": [int(v) for v in budget_log.get("active", worst.budget).max_edges],
            "worst_case_edge_slots": [int(v) for v in worst.budget.max_edges],
            "growths": budget_log["growths"],
        },
        "feature_norm": _feature_norm(dataset, config),
    }
