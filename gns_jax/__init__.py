"""gns-jax: Global Neighbor Sampling (Dong et al., KDD 2021) for GNN training, in JAX.

The supported surface is listed in ``__all__``. Modules, from the data to the command:

* ``graph``: CSR graphs on the host; ``data``: datasets (readers, splits, synthetic graphs,
  memory-mapped folders);
* ``cache``: the GNS cache (distributions, the draw, inclusion probabilities, device arrays);
* ``sampling``: the block format, budgets, the sampler interface, node-wise and GNS samplers;
* ``features``: the host feature store and the host -> device feature path;
* ``loader``: one epoch's device-ready batches and the whole input side;
* ``models``: Flax NNX GraphSAGE over blocks; ``evaluate``: exact and sampled inference;
* ``config``: the options of a run (no JAX: the command's ``--help`` imports only this);
  ``factories``: the functions that turn them into the sampler, model, optimiser and loader;
* ``tasks``: multi-class, binary and multi-label tasks (loss, probabilities, decisions);
  ``metrics``: accuracy, F1 and ROC-AUC from probabilities;
* ``step``: the train state and the pure train step; ``results``: a run's record and JSON;
  ``train``: ``fit``, ``load_model``, ``predict``; ``checkpoint``: orbax checkpoints;
* ``parallel``: data parallelism over devices and hosts; ``pipeline``: pipeline parallelism
  with local learning (PPLL), one stage of layers a device;
* ``meters``: transfer and compilation counters; ``timing``: time splits; ``probes``: ``/proc``
  probes (memory, disk reads); ``pagecache``: page-cache hits of memory-mapped reads;
  ``environment``: what a run ran on; ``progress``: progress on stderr (``instrument``
  re-exports them all);
* ``cli``: the command (``main``), over ``arguments`` (the parser), ``commands`` (the
  subcommands), ``compile_cache``, ``atomic_write`` (``--out`` files) and ``distributed``.

``docs/`` explains the architecture and the algorithm.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.2.0"

# Where each public name lives; imported on first use (PEP 562), so that ``import gns_jax`` and
# ``gns-jax --help`` start without loading JAX. ``from gns_jax import fit`` works as usual.
_WHERE = {
    "Batch": "gns_jax.loader",
    "Block": "gns_jax.sampling",
    "Budget": "gns_jax.sampling",
    "CSRGraph": "gns_jax.graph",
    "CacheSnapshot": "gns_jax.cache",
    "CheckpointWarning": "gns_jax.checkpoint",
    "Checkpointer": "gns_jax.checkpoint",
    "ConfigError": "gns_jax.errors",
    "DataParallel": "gns_jax.parallel",
    "Dataset": "gns_jax.data",
    "DatasetError": "gns_jax.errors",
    "DeviceBatch": "gns_jax.loader",
    "DeviceCache": "gns_jax.cache",
    "Evaluator": "gns_jax.evaluate",
    "ExactInference": "gns_jax.evaluate",
    "FitResult": "gns_jax.train",
    "FullGraph": "gns_jax.evaluate",
    "GNSSampler": "gns_jax.sampling",
    "GnsJaxError": "gns_jax.errors",
    "GraphError": "gns_jax.errors",
    "EdgeSeeds": "gns_jax.linkbatch",
    "EdgeSplit": "gns_jax.links",
    "GraphSAGE": "gns_jax.models",
    "LinkPredictor": "gns_jax.models",
    "LADIESSampler": "gns_jax.sampling",
    "Loader": "gns_jax.loader",
    "LoaderState": "gns_jax.loader",
    "MiniBatch": "gns_jax.sampling",
    "NodeWiseSampler": "gns_jax.sampling",
    "PipelineStepper": "gns_jax.pipeline",
    "SAGEConv": "gns_jax.models",
    "Sampler": "gns_jax.sampling",
    "Task": "gns_jax.tasks",
    "TrainConfig": "gns_jax.config",
    "TrainState": "gns_jax.step",
    "TransferMeter": "gns_jax.meters",
    "block_from_graphs_tuple": "gns_jax.sampling",
    "block_to_graphs_tuple": "gns_jax.sampling",
    "build_device_cache": "gns_jax.cache",
    "cache_distribution": "gns_jax.cache",
    "cache_size": "gns_jax.cache",
    "draw_cache": "gns_jax.cache",
    "fit": "gns_jax.train",
    "from_edges": "gns_jax.graph",
    "full_inference": "gns_jax.evaluate",
    "inclusion_probability": "gns_jax.cache",
    "init_state": "gns_jax.step",
    "load_dataset": "gns_jax.data",
    "load_edge_split": "gns_jax.links",
    "load_model": "gns_jax.train",
    "make_loader": "gns_jax.factories",
    "make_model": "gns_jax.factories",
    "make_optimizer": "gns_jax.factories",
    "make_parallel_train_step": "gns_jax.parallel",
    "make_sampler": "gns_jax.factories",
    "make_train_step": "gns_jax.step",
    "model_of": "gns_jax.step",
    "predict": "gns_jax.train",
    "predict_links": "gns_jax.train",
    "prepare_features": "gns_jax.factories",
    "random_edge_split": "gns_jax.links",
    "sampled_inference": "gns_jax.evaluate",
    "save_dataset": "gns_jax.data",
    "synthetic": "gns_jax.data",
    "train_step": "gns_jax.step",
}


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module 'gns_jax' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from gns_jax.cache import (
        CacheSnapshot,
        DeviceCache,
        build_device_cache,
        cache_distribution,
        cache_size,
        draw_cache,
        inclusion_probability,
    )
    from gns_jax.checkpoint import Checkpointer, CheckpointWarning
    from gns_jax.config import TrainConfig
    from gns_jax.data import Dataset, load_dataset, save_dataset, synthetic
    from gns_jax.errors import ConfigError, DatasetError, GnsJaxError, GraphError
    from gns_jax.evaluate import (
        Evaluator,
        ExactInference,
        FullGraph,
        full_inference,
        sampled_inference,
    )
    from gns_jax.factories import (
        make_loader,
        make_model,
        make_optimizer,
        make_sampler,
        prepare_features,
    )
    from gns_jax.graph import CSRGraph, from_edges
    from gns_jax.linkbatch import EdgeSeeds
    from gns_jax.links import EdgeSplit, load_edge_split, random_edge_split
    from gns_jax.loader import Batch, DeviceBatch, Loader, LoaderState
    from gns_jax.meters import TransferMeter
    from gns_jax.models import GraphSAGE, LinkPredictor, SAGEConv
    from gns_jax.parallel import DataParallel, make_parallel_train_step
    from gns_jax.pipeline import PipelineStepper
    from gns_jax.sampling import (
        Block,
        Budget,
        GNSSampler,
        LADIESSampler,
        MiniBatch,
        NodeWiseSampler,
        Sampler,
        block_from_graphs_tuple,
        block_to_graphs_tuple,
    )
    from gns_jax.step import TrainState, init_state, make_train_step, model_of, train_step
    from gns_jax.tasks import Task
    from gns_jax.train import FitResult, fit, load_model, predict, predict_links

__all__ = [
    "Batch",
    "Block",
    "Budget",
    "CSRGraph",
    "CacheSnapshot",
    "CheckpointWarning",
    "Checkpointer",
    "ConfigError",
    "DataParallel",
    "Dataset",
    "DatasetError",
    "DeviceBatch",
    "DeviceCache",
    "EdgeSeeds",
    "EdgeSplit",
    "Evaluator",
    "ExactInference",
    "FitResult",
    "FullGraph",
    "GNSSampler",
    "GnsJaxError",
    "GraphError",
    "GraphSAGE",
    "LADIESSampler",
    "LinkPredictor",
    "Loader",
    "LoaderState",
    "MiniBatch",
    "NodeWiseSampler",
    "PipelineStepper",
    "SAGEConv",
    "Sampler",
    "Task",
    "TrainConfig",
    "TrainState",
    "TransferMeter",
    "__version__",
    "block_from_graphs_tuple",
    "block_to_graphs_tuple",
    "build_device_cache",
    "cache_distribution",
    "cache_size",
    "draw_cache",
    "fit",
    "from_edges",
    "full_inference",
    "inclusion_probability",
    "init_state",
    "load_model",
    "load_dataset",
    "load_edge_split",
    "make_loader",
    "make_model",
    "make_optimizer",
    "make_parallel_train_step",
    "make_sampler",
    "make_train_step",
    "model_of",
    "predict",
    "predict_links",
    "prepare_features",
    "random_edge_split",
    "sampled_inference",
    "save_dataset",
    "synthetic",
    "train_step",
]
