"""The host feature store and the host -> device feature path. Boundary module.

Per batch, the ids of the input nodes come back from the sampling device, their rows are gathered
from the host store (NumPy; a memory-mapped array works too) into a buffer whose row count is the
number of real input nodes rounded up to a power of two, and only that buffer crosses to the
accelerator. A small jitted ``assemble`` then scatters the rows into the fixed
``[max_src, F]`` input of the train step, so the step's shapes never depend on the data: it
compiles once, and the assembler once per row bucket (a handful per run, reported).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from gns_jax.instrument import CompileCounter, TransferMeter

__all__ = ["FeatureLoader", "bucket", "normalize_rows"]


def bucket(n: int, minimum: int = 64) -> int:
    """Smallest power of two ``>= n``, and at least ``minimum``. Bounds the number of shapes."""
    return max(minimum, 1 << max(n - 1, 0).bit_length())


def normalize_rows(features: np.ndarray) -> np.ndarray:
    """Divides each row by the sum of its absolute values (rows of zeros stay zero). Host-side."""
    norm = np.abs(features).sum(axis=1, keepdims=True)
    return (features / np.where(norm > 0, norm, 1.0)).astype(np.float32)


def _assemble(rows: jax.Array, src_nodes: jax.Array) -> jax.Array:
    """Places ``rows[i]`` at the i-th real slot of ``src_nodes``; padding slots get zeros."""
    real = src_nodes >= 0
    index = jnp.clip(jnp.cumsum(real) - 1, 0, rows.shape[0] - 1)
    return jnp.where(real[:, None], rows[index], 0.0)


class FeatureLoader:
    """Moves the input-layer features of a batch from the host store to the device.

    Args:
      features: float ``[num_nodes, F]`` host array (may be a ``np.memmap``).
      meter: counts the bytes put, under the tag ``"features"``.
    """

    def __init__(self, features: np.ndarray, meter: TransferMeter):
        self.features = features
        self.meter = meter
        self.compiles = CompileCounter()
        self._assemble = jax.jit(self.compiles.wrap(_assemble))

    def load(self, src_nodes: jax.Array) -> tuple[jax.Array, int, np.ndarray]:
        """Returns the ``[max_src, F]`` device input, the rows moved and the ids (host copy)."""
        ids = np.asarray(jax.device_get(src_nodes))
        real = ids[ids >= 0]
        buffer = np.zeros((bucket(real.shape[0]), self.features.shape[1]), dtype=np.float32)
        buffer[: real.shape[0]] = self.features[real]
        rows = self.meter.put(buffer, tag="features")
        return self._assemble(rows, src_nodes), int(real.shape[0]), ids
