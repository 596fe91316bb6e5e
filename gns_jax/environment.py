"""What a run ran on: :func:`environment` (CPU, cores, memory, Python, JAX backend and devices,
glibc tunables) and the CPU's last-level cache (:func:`last_level_cache_bytes`,
:func:`cache_sweep_bytes`). Host-side.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import jax

__all__ = ["cache_sweep_bytes", "environment", "last_level_cache_bytes"]


def last_level_cache_bytes() -> int | None:
    """The size of the CPU's largest cache (Linux's ``/sys/devices/system/cpu/cpu0/cache``), or
    None where it cannot be read."""
    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = entry.read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes) if sizes else None


def cache_sweep_bytes(floor: int = 64 << 20, cap: int = 1 << 30) -> int:
    """Bytes to write between timed copies so that their data is no longer in any cache: twice
    the last-level cache (:func:`last_level_cache_bytes`), at least ``floor`` (where it is
    unknown or small) and at most ``cap``. The benchmarks' cold plain copies use it."""
    llc = last_level_cache_bytes() or 0
    return int(min(max(2 * llc, floor), cap))


def environment() -> dict:
    """What a run ran on: CPU model, cores, memory, Python, JAX backend and devices, and the
    glibc tunables (gns_jax/hostmem.py). Every reported figure names it."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        memory = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        memory = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": memory,
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
        "last_level_cache_mib": (lambda b: None if b is None else round(b / 2**20, 1))(
            last_level_cache_bytes()
        ),
    }
