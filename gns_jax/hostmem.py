"""Huge pages for large host allocations on Linux (glibc). Host-side, used by the commands.

Every training batch allocates and frees hundreds of megabytes of host memory: NumPy gather
buffers and, on JAX's CPU backend, every XLA buffer and temporary. glibc serves allocations above
32 MiB with fresh ``mmap`` regions, so each batch faults its memory in again, 4 KiB at a time:
177 million faults and 392 s of system time in an 11-minute products-scale training run on the
2-core machine of experiments/README.md. With ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (glibc
2.35 and later) malloc advises transparent huge pages (2 MiB) on the memory it maps: the faults of
a profile fell 15-fold, the on-device assembly of an NS batch from 0.26 to 0.04 s, and an NS
batch from 0.91 to 0.78 s.

glibc reads its tunables once, when a process starts, so :func:`restart_with_huge_pages`
re-executes the running command once (same process id, same arguments) with the tunable added.
The ``gns-jax`` program (:func:`gns_jax.cli.command`, also ``python -m gns_jax``) and
``python -m experiments.bench_epoch`` call it first; :func:`gns_jax.cli.main`, called from
Python or a notebook, never restarts anything. Nothing numerical changes.
``GNS_JAX_HUGE_PAGES=0`` turns it off; it does nothing off Linux, under another C library or
glibc before 2.35, when the tunable is already set, and when the kernel's transparent huge
pages are ``never`` (nothing to gain) or ``always`` (already in use).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

__all__ = ["TUNABLE", "huge_page_environment", "restart_with_huge_pages"]

TUNABLE = "glibc.malloc.hugetlb=1"
OPT_OUT = "GNS_JAX_HUGE_PAGES"
_RESTARTED = "GNS_JAX_HUGE_PAGES_RESTARTED"
_THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def _glibc_version() -> tuple[int, int] | None:
    try:
        name, version = os.confstr("CS_GNU_LIBC_VERSION").split()
        major, minor = version.split(".")[:2]
        return (int(major), int(minor)) if name == "glibc" else None
    except (AttributeError, ValueError, OSError):
        return None


def _thp_mode() -> str | None:
    """The bracketed mode of the kernel's transparent huge pages, or None when unknown."""
    try:
        text = open(_THP).read()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def huge_page_environment(
    environ: Mapping[str, str],
    platform: str,
    glibc: tuple[int, int] | None,
    thp_mode: str | None,
) -> dict[str, str] | None:
    """The environment to restart with, or None when a restart would gain nothing. Pure."""
    if environ.get(OPT_OUT, "1") == "0" or environ.get(_RESTARTED):
        return None
    if not platform.startswith("linux") or glibc is None or glibc < (2, 35):
        return None
    if thp_mode != "madvise":
        return None
    tunables = environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb" in tunables:
        return None
    return {
        **environ,
        "GLIBC_TUNABLES": ":".join(t for t in (tunables, TUNABLE) if t),
        _RESTARTED: "1",
    }


def restart_with_huge_pages() -> None:
    """Re-executes this command once with :data:`TUNABLE`; returns when there is nothing to do."""
    env = huge_page_environment(os.environ, sys.platform, _glibc_version(), _thp_mode())
    if env is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
