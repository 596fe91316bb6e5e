"""Samplers that build fixed-shape mini-batches under jit, and what they share.

``blocks`` (the padded block format), ``budget`` (static sizes, worst case, calibration),
``base`` (the sampler interface, seed padding), ``nodewise`` (uniform node-wise sampling, the NS
baseline), ``gns`` (Global Neighbor Sampling) and ``ladies`` (layer-wise importance sampling,
the LADIES baseline). Fan-outs are listed output layer first.
"""

from gns_jax.sampling.base import Sampler, pad_seeds
from gns_jax.sampling.blocks import (
    Block,
    MiniBatch,
    block_from_graphs_tuple,
    block_to_graphs_tuple,
)
from gns_jax.sampling.budget import Budget, LayerSizes, bucket
from gns_jax.sampling.gns import GNSSampler
from gns_jax.sampling.ladies import LADIESSampler
from gns_jax.sampling.nodewise import DeviceTopology, NodeWiseSampler, sample_without_replacement

__all__ = [
    "Block",
    "Budget",
    "DeviceTopology",
    "GNSSampler",
    "LADIESSampler",
    "LayerSizes",
    "MiniBatch",
    "NodeWiseSampler",
    "Sampler",
    "block_from_graphs_tuple",
    "block_to_graphs_tuple",
    "bucket",
    "pad_seeds",
    "sample_without_replacement",
]
