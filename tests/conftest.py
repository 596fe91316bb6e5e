import atexit
import os
import shutil
import tempfile

import jax
import numpy as np
import pytest

from gns_jax.data import synthetic

jax.config.update("jax_numpy_rank_promotion", "raise")  # catches silent broadcasting bugs
# Not "jax_numpy_dtype_promotion=strict": optax.adam fails under it (optax 0.2.8).

# One persistent compilation cache for the whole session, in-process and in the subprocesses the
# tests start (they inherit the variable), never the user's own cache folder.
if "GNS_JAX_COMPILE_CACHE" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="gns-jax-tests-")
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
    os.environ["GNS_JAX_COMPILE_CACHE"] = _cache

from gns_jax.cli import enable_compile_cache  # noqa: E402

enable_compile_cache(off=False)


@pytest.fixture(scope="session")
def tiny_dataset():
    """600-node synthetic power-law graph with planted, learnable classes; deterministic."""
    return synthetic(
        np.random.default_rng(0), nodes=600, degree=8, features=16, classes=4, signal=1.0
    )
