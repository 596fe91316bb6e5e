"""Deprecated: the prefetch queue is :class:`gns_jax.prefetch.Prefetcher`.

``gns_jax.pipeline.prefetch`` still works and warns; it will be removed (the name ``pipeline``
is for pipeline parallelism).
"""

from __future__ import annotations

import warnings

__all__: list[str] = []


def __getattr__(name: str):
    if name == "prefetch":
        warnings.warn(
            "gns_jax.pipeline.prefetch is now gns_jax.prefetch.Prefetcher",
            DeprecationWarning,
            stacklevel=2,
        )
        from gns_jax.prefetch import Prefetcher

        return Prefetcher
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
