"""Samplers that build fixed-shape mini-batches under jit, and the block format they share."""

from gns_jax.sampling.blocks import (
    Block,
    Budget,
    MiniBatch,
    block_from_graphs_tuple,
    block_to_graphs_tuple,
)
from gns_jax.sampling.nodewise import DeviceTopology, NodeWiseSampler, sample_without_replacement

__all__ = [
    "Block",
    "Budget",
    "DeviceTopology",
    "MiniBatch",
    "NodeWiseSampler",
    "block_from_graphs_tuple",
    "block_to_graphs_tuple",
    "sample_without_replacement",
]
