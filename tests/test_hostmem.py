"""The commands keep freed large blocks for reuse, in-process (gns_jax/hostmem.py)."""

import os
import subprocess
import sys

import pytest

from gns_jax.hostmem import _mallopt, wanted

GLIBC = _mallopt() is not None

# Allocates with malloc, touches and frees a 96 MiB block 8 times in another thread (as XLA's
# buffers are; NumPy advises huge pages on its own), then prints the minor faults that took.
_FAULTS = """
import ctypes, resource, threading
from gns_jax.hostmem import keep_freed_memory
print(keep_freed_memory())
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def churn():
    for _ in range(8):
        block = libc.malloc(96 << 20)
        ctypes.memset(block, 1, 96 << 20)
        libc.free(block)
worker = threading.Thread(target=churn)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
worker.start(); worker.join()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_wanted_unless_turned_off_or_not_glibc():
    assert wanted({}, glibc=True)
    assert not wanted({"GNS_JAX_KEEP_FREED": "0"}, glibc=True)
    assert wanted({"GNS_JAX_KEEP_FREED": "1"}, glibc=True)
    assert not wanted({}, glibc=False)


def _faults(env_extra: dict) -> tuple[bool, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GLIBC_", "GNS_JAX_KEEP"))}
    out = subprocess.run(
        [sys.executable, "-c", _FAULTS], env=env | env_extra, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    applied, faults = out.stdout.split()
    return applied == "True", int(faults)


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt only")
def test_a_thread_reuses_its_freed_blocks_instead_of_faulting_them_in_again():
    applied, kept = _faults({})
    assert applied
    skipped, fresh = _faults({"GNS_JAX_KEEP_FREED": "0"})
    assert not skipped
    pages = 8 * (96 << 20) // 4096  # every block faulted in afresh: 196,608 pages of 4 KiB
    # Without it each block is mapped afresh (transparent huge pages may fold some faults);
    # with it, the first block's pages are reused: at most about one block's worth of faults.
    assert kept <= pages // 8 * 1.1 + 2000, (kept, fresh)
    assert kept * 3 < fresh, (kept, fresh)
