"""gns-jax: Global Neighbor Sampling (Dong et al., KDD 2021) for GNN training, in JAX.

The supported surface is listed in ``__all__``. Modules, from the data to the command:

* ``graph``: CSR graphs on the host; ``data``: datasets (readers, splits, synthetic graphs,
  memory-mapped folders);
* ``cache``: the GNS cache (distributions, the draw, inclusion probabilities, device arrays);
* ``sampling``: the block format, budgets, the sampler interface, node-wise and GNS samplers;
* ``features``: the host feature store and the host -> device feature path;
* ``loader``: one epoch's device-ready batches and the whole input side;
* ``models``: Flax NNX GraphSAGE over blocks; ``evaluate``: exact and sampled inference;
* ``config``: the options of a run and the factories that turn them into objects;
* ``train``: the train state, the pure train step and ``fit``; ``checkpoint``: orbax checkpoints;
* ``instrument``: transfer, compilation and time counters, progress; ``cli``: the command.

``docs/`` explains the architecture and the algorithm.
"""

__version__ = "0.2.0"

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
from gns_jax.config import (
    TrainConfig,
    make_loader,
    make_model,
    make_optimizer,
    make_sampler,
    prepare_features,
)
from gns_jax.data import Dataset, load_dataset, save_dataset, synthetic
from gns_jax.errors import ConfigError, DatasetError, GnsJaxError, GraphError
from gns_jax.evaluate import (
    Evaluator,
    ExactInference,
    FullGraph,
    full_inference,
    sampled_inference,
)
from gns_jax.graph import CSRGraph, from_edges
from gns_jax.instrument import TransferMeter
from gns_jax.loader import Batch, DeviceBatch, Loader, LoaderState
from gns_jax.models import GraphSAGE, SAGEConv
from gns_jax.parallel import DataParallel, make_parallel_train_step
from gns_jax.sampling import (
    Block,
    Budget,
    GNSSampler,
    LADIESSampler,
    MiniBatch,
    NodeWiseSampler,
    Sampler,
)
from gns_jax.train import (
    FitResult,
    TrainState,
    fit,
    init_state,
    load_model,
    make_train_step,
    train_step,
)

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
    "Evaluator",
    "ExactInference",
    "FitResult",
    "FullGraph",
    "GNSSampler",
    "GnsJaxError",
    "GraphError",
    "GraphSAGE",
    "LADIESSampler",
    "Loader",
    "LoaderState",
    "MiniBatch",
    "NodeWiseSampler",
    "SAGEConv",
    "Sampler",
    "TrainConfig",
    "TrainState",
    "TransferMeter",
    "__version__",
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
    "make_loader",
    "make_model",
    "make_optimizer",
    "make_parallel_train_step",
    "make_sampler",
    "make_train_step",
    "prepare_features",
    "sampled_inference",
    "save_dataset",
    "synthetic",
    "train_step",
]
