"""Large host allocations kept between batches (glibc). Host-side, used by the commands.

Every training batch allocates and frees hundreds of megabytes of host memory: NumPy gather
buffers and, on JAX's CPU backend, every XLA buffer and temporary. glibc serves an allocation
above its mmap threshold (at most 32 MiB) with a fresh ``mmap`` region and unmaps it on
``free``, so each batch faults its memory in again, 4 KiB at a time: 177 million faults and 392 s
of system time in an 11-minute products-scale training run on the 2-core machine of
experiments/README.md.

:func:`keep_freed_memory` sets, in the running process (``mallopt``; nothing restarted), one
malloc arena for all threads and mmap and trim thresholds of 1 GiB and 2 GiB: large blocks then
come from the one heap, whichever thread (NumPy's, XLA's) asks, and stay there when freed, so the
next batch reuses pages already faulted in. Raising the thresholds alone does not do it: the
arenas of other threads map any block over 64 MiB afresh. Measured on a 200,000-node synthetic
graph (fanouts 15,10,5, batch 1000, hidden 256, NS, 3 epochs of 18 batches, prefetch 2; 2-core
x86_64, glibc 2.36, jax 0.10.2, CPU backend, a busy machine): 7.4 million minor faults and
27-29 s of system time by default; 6.5 million and 23 s with the thresholds alone; 0.4-0.5
million and 3.4-5.0 s with one arena too; 0.2 million and 9-13 s with
``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (transparent huge pages on malloc's mappings, which an
earlier version set by re-executing the command; a user can still set it, as any environment
variable, and the results record it). Epoch times on that machine were too noisy to rank the last
two (17-19 s and 11-23 s an epoch). Nothing numerical changes; what a run frees is kept for
reuse rather than returned to the system before the process ends.

The ``gns-jax`` program (:func:`gns_jax.cli.command`, also ``python -m gns_jax``) and
``experiments/bench_epoch.py`` call it first; :func:`gns_jax.cli.main` called from Python leaves
the caller's allocator alone;
``GNS_JAX_KEEP_FREED=0`` turns it off. It does nothing off glibc.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "keep_freed_memory", "wanted"]

#: allocations below this come from the heap rather than their own mapping (a glibc that
#: refuses so large a value gets 32 MiB, the largest its dynamic threshold reaches)
MMAP_THRESHOLD = 1 << 30
_FALLBACK_MMAP_THRESHOLD = 32 << 20
#: freed memory at the top of the heap kept up to this size instead of returned
TRIM_THRESHOLD = 1 << 31
OPT_OUT = "GNS_JAX_KEEP_FREED"
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8  # malloc.h


def wanted(environ: Mapping[str, str], glibc: bool) -> bool:
    """Whether :func:`keep_freed_memory` should act. Pure."""
    return glibc and environ.get(OPT_OUT, "1") != "0"


def _mallopt():
    try:
        name = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):
        return None
    if not name.startswith("glibc"):
        return None
    try:
        fn = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return fn


def keep_freed_memory(environ: Mapping[str, str] | None = None) -> bool:
    """One malloc arena and raised mmap and trim thresholds for this process; True when set.

    Call it once, first, before threads start allocating (arenas they already made stay);
    calling it again is harmless."""
    mallopt = _mallopt()
    if not wanted(os.environ if environ is None else environ, mallopt is not None):
        return False
    limit = 2**31 - 1  # mallopt takes an int
    ok = mallopt(_M_ARENA_MAX, 1) == 1
    ok &= any(
        mallopt(_M_MMAP_THRESHOLD, min(value, limit)) == 1
        for value in (MMAP_THRESHOLD, _FALLBACK_MMAP_THRESHOLD)
    )
    return mallopt(_M_TRIM_THRESHOLD, min(TRIM_THRESHOLD, limit)) == 1 and ok
