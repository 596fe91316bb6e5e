"""Exceptions for bad input. Host-side; no JAX.

Every error raised for bad user input derives from :class:`GnsJaxError`, so the command line can
print one clear message (naming the file or option) and exit non-zero without a traceback.
"""

__all__ = ["ConfigError", "DatasetError", "GnsJaxError", "GraphError"]


class GnsJaxError(ValueError):
    """Bad input: a file, a dataset or an option. The message says which and what is wrong."""


class GraphError(GnsJaxError):
    """A malformed graph (ids out of range, a bad CSR layout)."""


class DatasetError(GnsJaxError):
    """A missing, truncated or corrupt dataset file, or invalid features, labels or splits."""


class ConfigError(GnsJaxError):
    """An impossible option value (a non-positive fan-out, an unknown sampler, ...)."""
