"""Evaluation: exact full-graph inference, sampled inference, and accuracy.

Two ways to get a model's predictions, both deterministic (no dropout):

* **exact** (:func:`full_inference`): every node's logits, layer by layer over the whole graph
  with all neighbours and no sampling. It needs the model to say how one of its layers runs over
  the whole graph, the small :class:`ExactInference` interface (:class:`~gns_jax.models.GraphSAGE`
  offers it). A memory-mapped feature matrix is streamed through the first layer in row chunks,
  so neither the host nor the device ever holds it whole.
* **sampled** (:func:`sampled_inference`): any model, run on node-wise sampled blocks of the
  nodes to predict, through a :class:`~gns_jax.loader.Loader` (large fan-outs, 20 per layer by
  default, fixed keys: the same blocks at every evaluation). It needs no full-graph arrays, so it
  also serves graphs whose exact inference does not fit in memory.

:class:`Evaluator` picks one, holds what it needs on the device, and returns accuracies.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from gns_jax.data import Dataset
from gns_jax.errors import ConfigError
from gns_jax.features import HostFeatures, SparseFeatures, pad_to_chunks
from gns_jax.loader import DeviceBatch, Loader
from gns_jax.meters import TransferMeter
from gns_jax.metrics import METRICS, score
from gns_jax.sampling.nodewise import NodeWiseSampler
from gns_jax.tasks import Task

__all__ = [
    "Evaluator",
    "ExactInference",
    "FullGraph",
    "full_inference",
    "predictions_accuracy",
    "sampled_inference",
    "supports_exact",
]


@runtime_checkable
class ExactInference(Protocol):
    """What a model offers for exact inference over the whole graph.

    Layer ``index`` of the model, run over every node with all neighbours, must equal
    ``self_part + A nbr_part`` where ``(self_part, nbr_part) = model.project(index, h)``, ``A`` is
    the mean over all in-neighbours, and ``h`` is the previous layer's output (for ``index == 0``
    the input features, dense ``[N, F]`` or, when the model sets ``sparse_inputs = True``, a
    :class:`~gns_jax.features.SparseFeatures`). ``project`` is row-wise (row ``v`` of its outputs
    depends on row ``v`` of ``h`` only), which is what lets a feature matrix stream through it in
    chunks; it applies the model's activation to ``h`` itself when ``index > 0``.
    """

    num_layers: int

    def project(self, index: int, h) -> tuple[jax.Array, jax.Array]: ...


def supports_exact(model) -> bool:
    """Whether ``model`` offers :class:`ExactInference`."""
    return isinstance(model, ExactInference)


def resolve_eval_mode(mode: str, model) -> str:
    """The evaluation a run of ``eval_mode=mode`` uses for ``model``: ``exact`` or ``sampled``
    (``auto`` is exact when the model offers it). The one place this rule lives."""
    if mode == "auto":
        return "exact" if supports_exact(model) else "sampled"
    if mode == "exact" and not supports_exact(model):
        raise ConfigError("eval_mode", "exact needs a model with project() (ExactInference)")
    return mode


def in_eval_mode(graphdef: nnx.GraphDef, state) -> nnx.GraphDef:
    """The graph definition of the same model in evaluation mode (``model.eval()``: dropout
    off, running batch statistics); the modes are static, so this is another trace only once."""
    model = _merge(graphdef, state)
    model.eval()
    return nnx.graphdef(model)


def _merge(graphdef, state):
    """The model from its graph definition and its state (one ``nnx.State`` or a tuple)."""
    return nnx.merge(graphdef, *state) if isinstance(state, tuple) else nnx.merge(graphdef, state)


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
            *pad_to_chunks(chunk, (senders, np.int32), (receivers, np.int32), (weight, np.float32))
        )
        return meter.put(arrays, tag="eval") if meter else jax.device_put(arrays)


def _aggregate(z: jax.Array, graph: FullGraph) -> jax.Array:
    """``out[v] = sum_u w_uv z[u]`` over every edge, one chunk of edges at a time."""

    def body(acc, chunk):
        s, r, w = chunk
        return acc + jax.ops.segment_sum(z[s] * w[:, None], r, num_segments=z.shape[0]), None

    out, _ = jax.lax.scan(body, jnp.zeros_like(z), tuple(graph))
    return out


def _combine(self_part, nbr_part, graph: FullGraph):
    """A layer's output from its projections: ``self_part + A nbr_part``."""
    return self_part + _aggregate(nbr_part, graph)


def _next_layer(graphdef, index: int, state, self_part, nbr_part, graph: FullGraph):
    """Layer ``index``'s projections of the previous layer's output."""
    return _merge(graphdef, state).project(index, _combine(self_part, nbr_part, graph))


# Inputs are donated where the outputs have their shape (a hidden -> hidden layer), so that the
# new projections are written over the old ones.
_next_layer_in_place = jax.jit(_next_layer, static_argnums=(0, 1), donate_argnums=(3, 4))
_next_layer_jit = jax.jit(_next_layer, static_argnums=(0, 1))


@functools.partial(jax.jit, donate_argnums=0)
def _last_layer(self_part, nbr_part, graph: FullGraph):
    return _combine(self_part, nbr_part, graph)


@functools.partial(jax.jit, static_argnums=0)
def _exact_in_memory(graphdef, state, x, graph: FullGraph):
    model = _merge(graphdef, state)
    self_part, nbr_part = model.project(0, x)
    for index in range(1, model.num_layers):
        self_part, nbr_part = model.project(index, _combine(self_part, nbr_part, graph))
    return _combine(self_part, nbr_part, graph)


@functools.partial(jax.jit, static_argnums=0, donate_argnums=(2, 3))
def _project_rows(graphdef, state, self_part, nbr_part, rows, start):
    """Writes the first layer's projections of ``rows`` into the donated outputs at ``start``."""
    new_self, new_nbr = _merge(graphdef, state).project(0, rows)
    self_part = jax.lax.dynamic_update_slice_in_dim(self_part, new_self, start, 0)
    nbr_part = jax.lax.dynamic_update_slice_in_dim(nbr_part, new_nbr, start, 0)
    return self_part, nbr_part


def full_inference(
    graphdef: nnx.GraphDef,
    state,
    x: jax.Array | SparseFeatures | HostFeatures,
    graph: FullGraph,
    meter: TransferMeter | None = None,
) -> jax.Array:
    """Exact layer-wise inference: all nodes, all neighbours, no dropout. Returns ``[N, C]`` logits.

    Args:
      graphdef, state: the model (``nnx.split``), state as one ``nnx.State`` or a tuple of them;
        the model must offer :class:`ExactInference`.
      x: the features of every node: dense on the device or :class:`SparseFeatures` (jitted
        whole), or :class:`HostFeatures`, streamed in row chunks (moved through ``meter`` under
        ``"eval"``) into preallocated projections, then one jitted call per layer whose
        ``[N, hidden]`` inputs are donated, so that at most about four ``[N, hidden]`` arrays are
        alive at once.
      graph: every edge with its mean coefficient.
    """
    if not isinstance(x, HostFeatures):
        return _exact_in_memory(graphdef, state, x, graph)
    put = functools.partial(meter.put, tag="eval") if meter else jax.device_put
    model = _merge(graphdef, state)
    n, width_in = x.array.shape
    chunk = min(x.chunk, n)
    total = -(-n // chunk) * chunk  # rows past n are padding; no edge reads them
    shapes = jax.eval_shape(
        lambda r: model.project(0, r), jax.ShapeDtypeStruct((chunk, width_in), jnp.float32)
    )
    self_part = jnp.zeros((total, shapes[0].shape[1]))
    nbr_part = jnp.zeros((total, shapes[1].shape[1]))
    for start in range(0, n, chunk):
        rows = np.asarray(x.array[start : start + chunk], dtype=np.float32)
        if rows.shape[0] < chunk:  # one shape for every chunk: pad the last
            rows = np.concatenate(
                [rows, np.zeros((chunk - rows.shape[0], rows.shape[1]), rows.dtype)]
            )
        rows, offset = put((rows, np.int32(start)))
        self_part, nbr_part = _project_rows(graphdef, state, self_part, nbr_part, rows, offset)
    for index in range(1, model.num_layers):
        out = jax.eval_shape(
            functools.partial(_next_layer, graphdef, index), state, self_part, nbr_part, graph
        )
        same = out[0].shape == self_part.shape and out[1].shape == nbr_part.shape
        step = _next_layer_in_place if same else _next_layer_jit
        self_part, nbr_part = step(graphdef, index, state, self_part, nbr_part, graph)
    return _last_layer(self_part, nbr_part, graph)[:n]


@functools.partial(jax.jit, static_argnums=0)
def _sampled_logits(graphdef, state, inputs: DeviceBatch) -> jax.Array:
    return _merge(graphdef, state)(inputs.x, inputs.blocks)


def sampled_inference(graphdef: nnx.GraphDef, state, loader: Loader) -> np.ndarray:
    """Logits of ``loader.nodes`` (in that order; the loader must not shuffle), from the model
    run on sampled blocks (no dropout). Host float32 ``[len(loader.nodes), C]``."""
    if loader.shuffle:
        raise ValueError("sampled_inference needs a loader with shuffle=False")
    parts = [None] * loader.num_batches
    for batch in loader.epoch(0):
        logits = _sampled_logits(graphdef, state, batch.inputs)
        parts[batch.index] = np.asarray(jax.device_get(logits[: batch.seeds.shape[0]]))
    return np.concatenate(parts)


@functools.partial(jax.jit, static_argnums=1)
def _probabilities(logits, task: Task):
    return task.probabilities(logits)


def predictions_accuracy(pred: np.ndarray, labels: np.ndarray) -> float:
    """The fraction of ``pred == labels`` (a host float; NaN for no nodes)."""
    return float(np.mean(pred == labels)) if labels.size else float("nan")


class Evaluator:
    """Accuracies of a model on a dataset's splits, exactly or by sampled inference.

    Args:
      dataset: labels and splits (and the graph).
      features: the feature matrix the model reads (as trained).
      mode: ``exact`` (the model must offer :class:`ExactInference`) or ``sampled``.
      fanouts: sampled inference's fan-outs, output layer first.
      batch_size, seed, budget, prefetch: of sampled inference's loader.
      nodes: the nodes sampled inference predicts (default: validation and test).
      loader: sampled inference's loader, built (``shuffle=False``; it predicts
        ``loader.nodes``); None: built from ``fanouts``, ``batch_size``, ``seed``, ``budget``,
        ``prefetch``, ``nodes`` and ``log``.
      meter: counts what crosses host -> device (tag ``"eval"``).
      task: how logits become probabilities and decisions (default: the dataset's task,
        :mod:`gns_jax.tasks`).
    """

    def __init__(
        self,
        dataset: Dataset,
        features: np.ndarray,
        *,
        mode: str = "exact",
        fanouts: tuple[int, ...] | None = None,
        batch_size: int = 1000,
        seed: int = 0,
        budget: str = "auto",
        prefetch: int = 2,
        nodes: np.ndarray | None = None,
        meter: TransferMeter | None = None,
        log: Callable[[str], None] | None = None,
        task: Task | None = None,
        loader: Loader | None = None,
    ):
        if mode not in ("exact", "sampled"):
            raise ValueError(f"mode: exact or sampled, got {mode!r}")
        self.mode = mode
        self.task = task or Task(dataset.task)
        self.dataset = dataset
        self.meter = meter or TransferMeter()
        self.splits = {"train": dataset.train_idx, "val": dataset.val_idx, "test": dataset.test_idx}
        if mode == "exact":
            self.graph = FullGraph.from_graph(dataset.graph, self.meter)
            if isinstance(features, np.memmap):  # streamed from the file at each evaluation
                self.x = HostFeatures(features)
            else:
                density = np.count_nonzero(features) / max(features.size, 1)
                self.x = self.meter.put(
                    SparseFeatures.from_dense(features) if density < 0.05 else features, tag="eval"
                )
            self.nodes = None
            return
        if loader is not None:
            self.loader, self.nodes = loader, loader.nodes
            return
        if fanouts is None:
            raise ValueError("sampled evaluation needs fanouts")
        if nodes is None:
            nodes = np.concatenate([dataset.val_idx, dataset.test_idx])
        self.nodes = np.asarray(nodes, dtype=np.int32)
        size = min(batch_size, self.nodes.shape[0])
        self.loader = Loader(
            dataset,
            NodeWiseSampler(dataset.graph, fanouts, size),
            seed=seed,
            nodes=self.nodes,
            shuffle=False,
            features=features,
            budget=budget,
            prefetch=prefetch,
            meter=self.meter,
            stream=1,
            log=log,
            name="evaluation sampler",
        )

    def predict(self, graphdef: nnx.GraphDef, state) -> np.ndarray:
        """Predictions (int32 classes ``[n]``, or an int8 0/1 label matrix ``[n, L]``): of every
        node (exact) or of ``nodes`` in order (sampled). In evaluation mode, whatever mode
        ``graphdef`` is in (:func:`in_eval_mode`)."""
        return self.task.decide(self.probabilities(graphdef, state))

    def probabilities(self, graphdef: nnx.GraphDef, state) -> np.ndarray:
        """float32 probabilities (:meth:`gns_jax.tasks.Task.probabilities`: softmax ``[n, C]``,
        or a sigmoid a label ``[n, L]``): of every node (exact) or of ``nodes`` in order
        (sampled); in evaluation mode."""
        graphdef = in_eval_mode(graphdef, state)
        if self.mode == "exact":
            model = _merge(graphdef, state)
            x = self.x
            if isinstance(x, SparseFeatures) and not getattr(model, "sparse_inputs", False):
                x = jax.jit(SparseFeatures.dense)(x)  # the model reads dense features only
            logits = full_inference(graphdef, state, x, self.graph, self.meter)
        else:
            logits = sampled_inference(graphdef, state, self.loader)
        return np.asarray(jax.device_get(_probabilities(logits, self.task)), dtype=np.float32)

    def scores(
        self, graphdef: nnx.GraphDef, state, names: tuple[str, ...] = METRICS
    ) -> dict[str, dict[str, float | None] | None]:
        """``{"train", "val", "test"}`` -> ``{metric: value}`` (:mod:`gns_jax.metrics`), from the
        class probabilities; a split that was not predicted (train under sampled evaluation)
        is None."""
        prob = self.probabilities(graphdef, state)
        labels = self.dataset.labels
        if self.mode == "exact":
            return {k: score(prob[v], labels[v], names) for k, v in self.splits.items()}
        where = {int(node): i for i, node in enumerate(self.nodes)}
        out: dict[str, dict[str, float | None] | None] = {"train": None}
        for k in ("val", "test"):
            idx = self.splits[k]
            if all(int(v) in where for v in idx[:1]):
                rows = np.fromiter((where[int(v)] for v in idx), np.int64, idx.size)
                out[k] = score(prob[rows], labels[idx], names)
            else:
                out[k] = None
        return out

    def __call__(self, graphdef: nnx.GraphDef, state) -> dict[str, float | None]:
        """``{"train", "val", "test"}`` accuracies; train is None under sampled evaluation."""
        return {
            k: (None if v is None else v["accuracy"])
            for k, v in self.scores(graphdef, state, ("accuracy",)).items()
        }
