"""Exceptions for bad input. Host-side; no JAX.

Every error raised for bad user input derives from :class:`GnsJaxError`, so the command line can
print one clear, one-line message (naming the file or option) and exit with status 2, without a
traceback. Library code names its own parameters (``fanouts``, ``cache_fraction``); a
:class:`ConfigError` carries the parameter in :attr:`ConfigError.param`, and the command line
names the matching flag.
"""

from __future__ import annotations

__all__ = ["CheckpointError", "ConfigError", "DatasetError", "GnsJaxError", "GraphError"]


class GnsJaxError(ValueError):
    """Bad input: a file, a dataset or an option. The message says which and what is wrong.

    The message is kept to one line: line breaks in it (from a quoted library error, say) become
    spaces, so the command line's ``gns-jax: error: ...`` is always a single line.
    """

    def __init__(self, *args):
        if len(args) == 1 and isinstance(args[0], str):
            args = (" ".join(args[0].splitlines()),)
        super().__init__(*args)


class GraphError(GnsJaxError):
    """A malformed graph (ids out of range, a bad CSR layout)."""


class DatasetError(GnsJaxError):
    """A missing, truncated or corrupt dataset file, or invalid features, labels or splits."""


class CheckpointError(GnsJaxError):
    """A checkpoint that could not be written (disk full, a file-size limit, permissions); the
    folder keeps its last complete checkpoints and nothing partial."""


class ConfigError(GnsJaxError):
    """An impossible option value (a non-positive fan-out, an unknown sampler, ...).

    Args:
      param: the option's name (``"fanouts"``, as in :class:`~gns_jax.config.TrainConfig` or the
        library function's parameter), which the command line turns into its flag; None when
        the message names what is wrong itself.
      message: what is wrong with it. ``str(error)`` is ``"param: message"``.
    """

    def __init__(self, param: str | None, message: str):
        self.param = param
        self.message = " ".join(str(message).splitlines())
        super().__init__(f"{param}: {self.message}" if param else self.message)
