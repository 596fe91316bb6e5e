"""The random streams of a run: one per purpose, derived from ``(seed, stream id, counter)``.

Host-side. Every random draw of a run comes from a stream named by one of the ids below, never
from a generator's position, so a run resumed at any batch draws exactly what an uninterrupted
one draws:

* the shuffle of epoch ``e``: ``np.random.default_rng([seed, SHUFFLE, e])``;
* the GNS cache drawn at epoch ``e``: ``np.random.default_rng([seed, CACHE, e])``;
* the sampler key of batch ``t`` (counted over the run):
  ``fold_in(fold_in(key(seed), SAMPLE), t)``;
* the calibration sample ``i``: ``fold_in(fold_in(key(seed), CALIBRATE), i)``;
* dropout at optimiser step ``s`` (:mod:`gns_jax.step`):
  ``fold_in(fold_in(key(seed), DROPOUT), s)``;
* the model's initialisation: ``fold_in(key(seed), INIT)``; the pipeline's local heads:
  ``fold_in(key(seed), HEADS)``;
* the cache-size planner's batches: ``PLAN`` (:mod:`gns_jax.cachestats`);
* link prediction's negatives of batch ``t``, shard ``s``:
  ``np.random.default_rng([seed, NEGATIVES, stream, 0, t, s])`` (calibration batch ``i``:
  ``[seed, NEGATIVES, stream, 1, i, s]``);
* the random edge split of link prediction: ``EDGE_SPLIT`` (:mod:`gns_jax.links`).

:class:`Streams` holds a loader's: an evaluation loader passes ``stream=1`` (``1000 + stream``
is folded into the base key of its sampler and calibration keys), which keeps its keys apart.
"""

from __future__ import annotations

import jax
import numpy as np

__all__ = [
    "CACHE",
    "CALIBRATE",
    "DROPOUT",
    "EDGE_SPLIT",
    "HEADS",
    "INIT",
    "NEGATIVES",
    "PLAN",
    "SAMPLE",
    "SHUFFLE",
    "Streams",
]

SHUFFLE, SAMPLE, DROPOUT, INIT, CACHE, CALIBRATE, HEADS = range(7)  # one stream a purpose
PLAN, NEGATIVES, EDGE_SPLIT = 7, 8, 9


class Streams:
    """A loader's random streams (module docs).

    Args:
      seed: the run's seed.
      stream: 0 for training; another value derives independent sampler and calibration keys
        (evaluation).

    Attributes:
      sample_key, calibration_key: the base keys of the sampler's and the calibration's
        batches (the batch's counter is folded in).
    """

    def __init__(self, seed: int = 0, stream: int = 0):
        self.seed, self.stream = int(seed), int(stream)
        # One-time setup may move Python scalars implicitly (the tests run the per-batch path
        # under a transfer guard).
        with jax.transfer_guard_host_to_device("allow"):
            base = jax.random.key(self.seed)
            if self.stream:
                base = jax.random.fold_in(base, 1000 + self.stream)
            self.sample_key = jax.random.fold_in(base, SAMPLE)
            self.calibration_key = jax.random.fold_in(base, CALIBRATE)

    def shuffle(self, epoch: int) -> np.random.Generator:
        """The generator of epoch ``epoch``'s shuffle."""
        return np.random.default_rng([self.seed, SHUFFLE, epoch])

    def cache(self, epoch: int) -> np.random.Generator:
        """The generator of the cache drawn at epoch ``epoch``."""
        return np.random.default_rng([self.seed, CACHE, epoch])

    def negatives(self, counter: int, shard: int, calibration: bool = False) -> np.random.Generator:
        """The generator of the negatives of link batch ``counter`` (calibration sample
        ``counter``), shard ``shard``."""
        return np.random.default_rng(
            [self.seed, NEGATIVES, self.stream, int(calibration), counter, shard]
        )
