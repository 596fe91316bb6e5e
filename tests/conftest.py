import atexit
import contextlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np
import pytest

from gns_jax.data import synthetic
from tests.helpers import TINY_ARGS

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


@pytest.fixture(scope="session")
def tiny_config():
    """A TrainConfig that trains on ``tiny_dataset`` in seconds (NS, 3 epochs of 3 batches)."""
    from gns_jax.config import TrainConfig

    return TrainConfig(
        sampler="ns", epochs=3, batch_size=16, fanouts=(4, 3), hidden=32, lr=0.01, seed=0
    )


class TrainedRun(NamedTuple):
    """``gns-jax train`` of :data:`TINY_ARGS` (GNS, the default) with ``--out`` and checkpoints."""

    argv: tuple[str, ...]
    out: Path  # the results JSON
    result: dict  # its contents
    checkpoints: Path
    stdout: str
    stderr: str


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory) -> TrainedRun:
    """One trained run for the whole session: the tests that only read a run's results, its
    checkpoints or its output share it instead of training again. Treat it as read-only."""
    from gns_jax.cli import main

    folder = tmp_path_factory.mktemp("trained-run")
    out, checkpoints = folder / "r.json", folder / "ckpt"
    argv = ("train", *TINY_ARGS, "--out", str(out), "--checkpoint-dir", str(checkpoints))
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(list(argv))
    assert code == 0, stderr.getvalue()
    result = json.loads(out.read_text())
    return TrainedRun(argv, out, result, checkpoints, stdout.getvalue(), stderr.getvalue())
