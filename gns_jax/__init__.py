"""gns-jax: Global Neighbor Sampling (Dong et al., KDD 2021) for GNN training, in JAX.

The supported surface is listed in ``__all__``; modules:

* ``graph``: CSR graphs on the host;
* ``datasets``: readers, splits, the registry, synthetic graphs;
* ``sampling``: the padded block format and the jitted samplers;
* ``features``: the host feature store and the host -> device feature path;
* ``models``: Flax NNX GraphSAGE over blocks;
* ``train``: the pure train step, exact evaluation and the epoch loop;
* ``instrument``: transfer, compilation and time counters;
* ``cli``: the ``gns-jax`` command.
"""

__version__ = "0.1.0"

from gns_jax.data import Dataset, load_dataset
from gns_jax.errors import ConfigError, DatasetError, GnsJaxError, GraphError
from gns_jax.graph import CSRGraph, from_edges
from gns_jax.models import GraphSAGE, SAGEConv
from gns_jax.sampling import Block, Budget, MiniBatch, NodeWiseSampler
from gns_jax.train import TrainConfig, fit

__all__ = [
    "Block",
    "Budget",
    "CSRGraph",
    "ConfigError",
    "Dataset",
    "DatasetError",
    "GnsJaxError",
    "GraphError",
    "GraphSAGE",
    "MiniBatch",
    "NodeWiseSampler",
    "SAGEConv",
    "TrainConfig",
    "__version__",
    "fit",
    "from_edges",
    "load_dataset",
]
