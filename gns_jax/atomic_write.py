"""Output files written atomically: checked before any work (:func:`check_output`), then
written to a temporary file beside them and renamed into place (:func:`write_atomically`), so
a file always holds a whole result, the old one or the new one. Host-side."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from gns_jax.errors import ConfigError

__all__ = ["check_output", "write_atomically"]


def check_output(path: str, option: str = "--out") -> Path:
    """Checks before any work that ``path`` can be written (atomically, beside itself)."""
    out = Path(path)
    if out.is_dir():
        raise ConfigError(None, f"{option} {path}: is a folder, not a file")
    folder = out.absolute().parent
    if not folder.is_dir():
        raise ConfigError(None, f"{option} {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(None, f"{option} {path}: folder {folder} is not writable")
    if out.exists() and not os.access(out, os.W_OK):
        raise ConfigError(None, f"{option} {path}: the file exists and is not writable")
    return out


def _umask() -> int:
    """The process's umask (read by setting it, then putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomically(path: Path, data: bytes, option: str = "--out") -> None:
    """Writes ``data`` to a temporary file beside ``path`` and renames it into place, so ``path``
    always holds a whole file: the old one or the new one."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would ignore the user's umask
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise ConfigError(None, f"{option} {path}: cannot write ({e.strerror or e})") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
