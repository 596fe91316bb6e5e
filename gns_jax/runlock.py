"""One run per output: an exclusive lock on a run's ``--out`` and ``--checkpoint-dir``. Host-side.

Two runs writing the same results file or checkpoint folder at once corrupt each other (one of
them dies when orbax lists the steps the other deletes, and which one is a race). ``gns-jax
train`` therefore takes a lock on each output at start-up, before the data loads, and a second
run that targets one of them while the first is alive is refused at once: one line naming the
other process, exit status 2, nothing written.

The lock is ``fcntl.flock`` on a file beside the output, ``.NAME.lock`` (for a folder, beside
the folder: the folder need not exist yet), holding the owner's process id. The kernel releases
a ``flock`` when its process ends, however it ends, so a lock file left by a dead process is
free: the next run takes it over and says so in a warning. On file systems without ``flock``
(some network mounts) the lock is skipped with a warning rather than refusing every run.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from gns_jax.errors import ConfigError

__all__ = ["RunLock", "lock_path"]


def lock_path(target: str | Path) -> Path:
    """The lock file of an output: ``.NAME.lock`` beside it."""
    target = Path(target).absolute()
    return target.parent / f".{target.name}.lock"


class RunLock:
    """An exclusive lock on the output ``target`` (a file or a folder) for this process's life
    (or until :meth:`release`). ``option`` names it in messages (``--out``)."""

    def __init__(self, target: str | Path, option: str = "--out"):
        self.target, self.option = Path(target), option
        self.path = lock_path(target)
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        """Takes the lock, or raises ConfigError naming the process that holds it."""
        import fcntl

        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise ConfigError(
                None, f"{self.option} {self.target}: cannot create the lock file {self.path} "
                f"({e.strerror or e})"
            ) from None  # fmt: skip
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _read_pid(fd)
            os.close(fd)
            who = f"process {owner}" if owner else "another process"
            raise ConfigError(
                None, f"{self.option} {self.target}: in use by another gns-jax run ({who}); "
                "one run per output"
            ) from None  # fmt: skip
        except OSError as e:  # no flock on this file system
            os.close(fd)
            warnings.warn(f"{self.option} {self.target}: not locked ({e.strerror or e})",
                          stacklevel=2)  # fmt: skip
            return self
        previous = _read_pid(fd)
        if previous and previous != os.getpid() and not _alive(previous):
            warnings.warn(
                f"{self.option} {self.target}: taking over the lock of process {previous}, "
                "which has ended", stacklevel=2,
            )  # fmt: skip
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Gives the lock up (the file stays; a later run takes it over silently)."""
        if self._fd is not None:
            import fcntl

            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
