"""Deprecated: renamed :mod:`gns_jax.flat_random` (random draws of any shape drawn flat).

Importing it warns; it will be removed.
"""

from __future__ import annotations

import warnings

from gns_jax.flat_random import bits, uniform

__all__ = ["bits", "uniform"]

warnings.warn("gns_jax.rng is now gns_jax.flat_random", DeprecationWarning, stacklevel=2)
