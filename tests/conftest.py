import jax
import numpy as np
import pytest

from gns_jax.data import synthetic

jax.config.update("jax_numpy_rank_promotion", "raise")  # catches silent broadcasting bugs
# Not "jax_numpy_dtype_promotion=strict": optax.adam fails under it (optax 0.2.8).


@pytest.fixture(scope="session")
def tiny_dataset():
    """600-node synthetic power-law graph with planted, learnable classes; deterministic."""
    return synthetic(
        np.random.default_rng(0), nodes=600, degree=8, features=16, classes=4, signal=1.0
    )
