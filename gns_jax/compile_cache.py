"""JAX's persistent compilation cache for the commands. Host-side.

It is kept in ``$XDG_CACHE_HOME/gns-jax/jax`` or ``~/.cache/gns-jax/jax``: a second run of the
same configuration loads its compiled programs instead of compiling them again.
``--no-compile-cache`` or ``GNS_JAX_COMPILE_CACHE=0`` turns it off; ``GNS_JAX_COMPILE_CACHE=DIR``
puts it elsewhere. JAX is imported only when the cache is turned on.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["compile_cache_dir", "enable_compile_cache"]


def compile_cache_dir() -> Path | None:
    """Where the commands keep JAX's persistent compilation cache (None: off)."""
    setting = os.environ.get("GNS_JAX_COMPILE_CACHE", "")
    if setting.lower() in ("0", "off", "false", "no"):
        return None
    if setting and setting != "1":
        return Path(setting)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gns-jax" / "jax"


def enable_compile_cache(off: bool, folder: Path | None = None) -> Path | None:
    """Turns on JAX's persistent compilation cache (every compilation over 0.2 s is kept), in
    ``folder`` (default: :func:`compile_cache_dir`); returns the folder, or None when off."""
    folder = None if off else (folder or compile_cache_dir())
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # an unwritable cache folder costs time, never the run
    import jax

    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder
