"""The factories that turn a :class:`~gns_jax.config.TrainConfig` into the objects of a run.
Host-side.

:func:`gns_jax.train.fit` builds its sampler, model, optimiser, loader and evaluator with these
functions (through :func:`gns_jax.run.build_run`), so a script that wants one of them with the
command's defaults calls the same function and gets the same object. They are in
``gns_jax.__all__`` too. The loaders' parts are built from the config by
:meth:`gns_jax.loader.LoaderParts.from_config`, each option going to the part that uses it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np
import optax
from flax import nnx

from gns_jax.cache import cache_size
from gns_jax.config import EVAL_FANOUT, TrainConfig
from gns_jax.data import Dataset
from gns_jax.errors import ConfigError
from gns_jax.features import normalize_rows
from gns_jax.linkbatch import EdgeSeeds
from gns_jax.loader import Loader, LoaderParts
from gns_jax.meters import TransferMeter
from gns_jax.models import GraphSAGE, LinkPredictor
from gns_jax.parallel import DataParallel, resolve_devices
from gns_jax.sampling.base import Sampler
from gns_jax.sampling.gns import GNSSampler
from gns_jax.sampling.ladies import LADIESSampler
from gns_jax.sampling.nodewise import NodeWiseSampler
from gns_jax.tasks import Task

__all__ = [
    "available_memory",
    "batch_size",
    "check_memory",
    "eval_fanouts",
    "feature_norm",
    "make_edge_seeds",
    "make_edge_split",
    "make_evaluator",
    "make_loader",
    "make_model",
    "make_parallel",
    "make_pipeline",
    "make_optimizer",
    "make_sampler",
    "prepare_features",
]


def feature_norm(dataset: Dataset, config: TrainConfig) -> str:
    """The feature normalisation a run uses: ``row`` or ``none``.

    ``auto`` row-normalises sparse non-negative (bag-of-words) features, under 5 % non-zero, as
    PyG's ``NormalizeFeatures`` is used for Planetoid and Coauthor; it keeps dense features as
    stored, and memory-mapped ones too (normalising would load them whole).
    """
    mapped = isinstance(dataset.features, np.memmap)
    if config.feature_norm == "row" and mapped:
        raise ConfigError(
            "feature_norm",
            "row: the features are memory-mapped from disk and are used as stored; normalise "
            "them before `gns-jax save`, or use none",
        )
    if config.feature_norm != "auto":
        return config.feature_norm
    if mapped:
        return "none"
    x = dataset.features
    sparse = np.count_nonzero(x) < 0.05 * x.size
    return "row" if sparse and x.min() >= 0 else "none"


def prepare_features(dataset: Dataset, config: TrainConfig) -> np.ndarray:
    """The feature matrix a run reads: ``dataset.features``, row-normalised if configured."""
    if feature_norm(dataset, config) == "row":
        return normalize_rows(dataset.features)
    return dataset.features


def batch_size(dataset: Dataset, config: TrainConfig) -> int:
    """``config.batch_size``, capped at the number of training nodes (one batch may hold all)."""
    return min(config.batch_size, int(dataset.train_idx.shape[0]))


def make_sampler(dataset: Dataset, config: TrainConfig, size: int | None = None) -> Sampler:
    """The sampler of ``config.sampler``, at its worst-case budget, for one device's shard of a
    batch (the whole batch on one device)."""
    size = -(-batch_size(dataset, config) // config.data_shards) if size is None else size
    if config.sampler == "ns":
        return NodeWiseSampler(dataset.graph, config.fanouts, size)
    if config.sampler == "ladies":  # the same nodes in every layer, one layer per fan-out
        return LADIESSampler(dataset.graph, (config.ladies_nodes,) * len(config.fanouts), size)
    return GNSSampler(
        dataset.graph,
        config.fanouts,
        size,
        cache_size(config.cache_fraction, dataset.num_nodes),
        input_fanout=config.input_fanout,
        cache_first_upper=config.cache_first,
        weights=config.gns_weights,
        weight_clip=config.weight_clip,
    )


def make_optimizer(config: TrainConfig) -> optax.GradientTransformation:
    """Adam with L2 regularisation added to the gradient (PyTorch ``Adam(weight_decay=...)``;
    unset: the task's default, :meth:`~gns_jax.config.TrainConfig.resolved`)."""
    decay = config.resolved().weight_decay
    return optax.chain(optax.add_decayed_weights(decay), optax.adam(config.lr))


def make_model(dataset: Dataset, config: TrainConfig, key: jax.Array) -> nnx.Module:
    """The command's model: GraphSAGE ``(F, hidden, ..., classes)``, one layer per fan-out; for
    link prediction a :class:`~gns_jax.models.LinkPredictor` of GraphSAGE ``(F, hidden, ...,
    hidden)`` and ``config.decoder``."""
    dims = (dataset.num_features, *([config.hidden] * (len(config.fanouts) - 1)))
    if config.task == "link":
        encoder = GraphSAGE((*dims, config.hidden), dropout_rate=config.dropout,
                            rngs=nnx.Rngs(params=key))  # fmt: skip
        decoder_key = jax.random.fold_in(key, 1)
        return LinkPredictor(encoder, config.decoder, dim=config.hidden,
                             rngs=nnx.Rngs(params=decoder_key))  # fmt: skip
    return GraphSAGE(
        (*dims, dataset.num_classes), dropout_rate=config.dropout, rngs=nnx.Rngs(params=key)
    )


def make_edge_split(dataset: Dataset, config: TrainConfig):
    """Link prediction's :class:`~gns_jax.links.EdgeSplit` of ``dataset``'s edges: a random one
    by ``config.edge_split``'s fractions (seed ``split_seed``, else ``seed``), or the user's
    ``.npz`` (a bad file is one DatasetError naming it)."""
    from gns_jax.links import load_edge_split, parse_edge_split, random_edge_split

    seed = config.seed if config.split_seed is None else config.split_seed
    text = config.edge_split
    if text.endswith(".npz") or Path(text).is_file():
        return load_edge_split(text, dataset.graph, config.rank_negatives, seed)
    return random_edge_split(dataset.graph, parse_edge_split(text), seed, config.rank_negatives)


def make_edge_seeds(dataset: Dataset, config: TrainConfig, split) -> EdgeSeeds:
    """The training edges of ``split`` as a link loader iterates them, with ``config``'s
    negatives (degrees: those of ``dataset``'s graph, the training graph)."""
    return EdgeSeeds(split.train_pos, dataset.num_nodes, config.neg_ratio, config.negatives,
                     degrees=dataset.graph.degrees())  # fmt: skip


def make_loader(
    dataset: Dataset,
    config: TrainConfig,
    sampler: Sampler,
    features: np.ndarray,
    meter: TransferMeter | None = None,
    log: Callable[[str], None] | None = None,
    parallel: DataParallel | None = None,
    edges: EdgeSeeds | None = None,
) -> Loader:
    """The training loader of ``config`` (shuffled training nodes, or the training ``edges``
    of link prediction; ``parallel`` for data-parallel batches over its mesh): its parts built
    from the config (:meth:`~gns_jax.loader.LoaderParts.from_config`)."""
    parts = LoaderParts.from_config(dataset, config, sampler, features, meter, log, parallel)
    return Loader(dataset, sampler, parts, edges=edges)


def eval_fanouts(config: TrainConfig) -> tuple[int, ...]:
    """The fan-outs of sampled evaluation (output layer first)."""
    return config.eval_fanouts or (EVAL_FANOUT,) * len(config.fanouts)


def make_parallel(config: TrainConfig) -> DataParallel | None:
    """Data parallelism over ``config.devices`` (and every process), or None for one device
    and for the pipeline (:mod:`gns_jax.pipeline`; its loader feeds one device). Raises
    ConfigError for checkpoints with several processes (not supported yet) and for a
    pipeline over several processes."""
    if config.parallel == "pipeline":
        if jax.process_count() > 1:
            raise ConfigError("parallel", "the pipeline runs in one process; use --parallel data")
        resolve_devices(config.devices)
        return None
    if resolve_devices(config.devices) == 1 and jax.process_count() == 1:
        return None
    parallel = DataParallel.over(config.devices)
    if parallel.multi_process and config.checkpoint_dir:
        raise ConfigError(
            "checkpoint_dir", "checkpoints are not supported with several processes yet"
        )
    return parallel


def make_evaluator(
    dataset: Dataset,
    config: TrainConfig,
    features: np.ndarray,
    mode: str,
    task: Task,
    meter: TransferMeter | None = None,
    log: Callable[[str], None] | None = None,
):
    """The evaluator of a run: ``mode`` (``exact`` or ``sampled``) inference of ``task`` on
    the dataset's splits; sampled inference through a loader of the validation and test nodes
    in order, with the run's evaluation fan-outs, batch size, seed and budget, its parts built
    from the config (:meth:`~gns_jax.loader.LoaderParts.from_config`, stream 1)."""
    from gns_jax.evaluate import Evaluator

    meter = meter or TransferMeter()
    loader = None
    if mode == "sampled":
        nodes = np.concatenate([dataset.val_idx, dataset.test_idx])
        size = min(config.batch_size, nodes.shape[0])
        sampler = NodeWiseSampler(dataset.graph, eval_fanouts(config), size)
        parts = LoaderParts.from_config(dataset, config, sampler, features, meter, log, stream=1)
        loader = Loader(
            dataset, sampler, parts, nodes=nodes, shuffle=False, name="evaluation sampler"
        )
    return Evaluator(dataset, features, mode=mode, loader=loader, meter=meter, task=task)


def available_memory(device: jax.Device | None = None) -> tuple[int, str]:
    """``(bytes, where)``: the memory a run may still allocate on ``device`` (default: the first
    device): an accelerator's free memory, or for the CPU backend the host's available memory
    (``MemAvailable``; half of physical memory where it cannot be read)."""
    device = device or jax.devices()[0]
    if device.platform != "cpu":
        stats = device.memory_stats() or {}
        if "bytes_limit" in stats:
            return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)), str(device)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "this machine"
    except OSError:
        pass
    from gns_jax.data.dataset import memory_budget

    return memory_budget(), "this machine"


def check_memory(
    dataset: Dataset, config: TrainConfig, sampler: Sampler, model: nnx.Module | None = None
) -> dict[str, int]:
    """Estimates, before anything large is allocated, the memory a run needs and raises
    ConfigError (exit 2) when it exceeds :func:`available_memory`; returns the estimate's parts
    in bytes.

    Counted: the model's parameters four times (themselves, their gradients, Adam's two moments;
    GraphSAGE's from ``--hidden`` and the fan-outs' layer count when ``model`` is None), and one
    batch at the sampler's worst-case budget: its input features, the sampler's per-edge arrays
    (about six int32 a slot) and, per layer, the gathered messages, sources and outputs of the
    forward pass kept for the backward one (``--hidden`` wide; ``--budget worst`` trains at that
    budget, ``auto`` only samples a few batches there, so the layers count at the seeds' size).
    A lower bound: what it refuses cannot run; XLA's temporaries come on top."""
    hidden = [config.hidden] * (len(config.fanouts) - 1)
    dims = (dataset.num_features, *hidden, dataset.num_classes)
    if model is None:  # GraphSAGE: two kernels and a bias a layer
        params = sum(2 * a * b + b for a, b in zip(dims[:-1], dims[1:]))
    else:
        params = sum(int(v.size) for v in jax.tree.leaves(nnx.state(model, nnx.Param)))
    budget = sampler.budget
    parts = {"model and optimiser": 4 * 4 * params}
    parts["input features"] = 4 * int(budget.max_src[0]) * dataset.num_features
    parts["sampler"] = 6 * 4 * sum(int(e) for e in budget.max_edges)
    layers = 0
    for layer, (d_in, d_out) in enumerate(zip(dims[:-1], dims[1:])):
        if config.budget == "worst":
            edges, src, dst = budget.max_edges[layer], budget.max_src[layer], budget.max_dst[layer]
        else:
            edges = src = dst = budget.max_seeds
        layers += 2 * 4 * (int(edges) * d_in + int(src) * d_in + int(dst) * d_out)
    parts["activations"] = layers
    need = sum(parts.values())
    have, where = available_memory()
    if need > have:
        largest = max(parts, key=parts.get)
        option = "hidden" if largest in ("model and optimiser", "activations") else "fanouts"
        shown = ", ".join(f"{k} {v / 2**30:,.1f}" for k, v in parts.items() if v >= 2**26)
        raise ConfigError(
            option,
            f"this run needs at least {need / 2**30:,.1f} GiB ({shown} GiB), more than the "
            f"{have / 2**30:,.1f} GiB {where} has available",
        )
    return parts


def make_pipeline(model, tx, config: TrainConfig, base_key, dropout_key, loss, task):
    """The pipeline of ``config`` (:class:`~gns_jax.pipeline.PipelineStepper`): one stage a
    device over the first ``config.devices`` devices, the local heads drawn from the run's
    ``HEADS`` stream."""
    from gns_jax.pipeline import PipelineStepper
    from gns_jax.streams import HEADS

    devices = jax.devices()[: resolve_devices(config.devices)]
    with jax.transfer_guard_host_to_device("allow"):
        head_key = jax.random.fold_in(base_key, HEADS)
    return PipelineStepper(
        model, tx, devices, dropout_key, head_key=head_key, head_width=config.local_head,
        queue_depth=config.stage_queue, loss=loss, task=task,
    )  # fmt: skip
