"""Native CPU kernels of the samplers, called from jitted code through JAX's FFI.

``native/sampling.cc`` (built by ``pip install``, as the extension ``gns_jax._native``) holds
the exact sequential counterparts of three jitted JAX functions of
:mod:`gns_jax.sampling.nodewise`: :func:`expand_layer` (Floyd's sampling of ``min(k, d_v)``
neighbours, from the words ``jax.random.bits`` draws from the same key: the kernel computes
JAX's threefry2x32 itself, which XLA:CPU's took most of the layer's time for), :func:`relabel`
(the source set and local sender ids) and :func:`make_block` (relabel and the block's edge
arrays, compacted, in one pass). They give the same arrays, element for element
(``tests/test_native.py``), so the samplers' distributions, keys and numbers do not depend on
which one runs.

``native/gather.cc``, in the same extension, is the host row gather of the feature loader
(:func:`take_rows_kernel`, plain C called through ctypes by :func:`gns_jax.gather.take_rows`):
rows prefetched ahead and written with non-temporal stores.

The samplers call them through ``jax.lax.platform_dependent``: on a CPU the native kernel, on
an accelerator the JAX version, compiled there with the rest of the sampler (the topology lives
on the device either way). On a 2-core x86_64 CPU the native input layer of a 1M-node graph is
several times faster than XLA:CPU's dense ``[n, k]`` program over node-sized scratch arrays
(``experiments/bench_epoch.py`` measures the sampler).

The extension is optional: without a C++17 compiler at install time (or with
``GNS_JAX_NATIVE=0`` in the environment) :func:`available` is false, the JAX versions run
on the CPU too and the rows are gathered by NumPy.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "available",
    "count_resident_kernel",
    "expand_layer",
    "key_data",
    "make_block",
    "on_cpu",
    "relabel",
    "sorted_order_kernel",
    "take_rows_kernel",
]

_TARGETS = {
    "gns_expand_layer": "GnsExpandLayer",
    "gns_relabel": "GnsRelabel",
    "gns_make_block": "GnsMakeBlock",
}


@functools.cache
def _library() -> ctypes.CDLL | None:
    spec = importlib.util.find_spec("gns_jax._native")
    if spec is None or spec.origin is None:
        return None
    library = ctypes.CDLL(spec.origin)
    for target, symbol in _TARGETS.items():
        jax.ffi.register_ffi_target(
            target, jax.ffi.pycapsule(getattr(library, symbol)), platform="cpu"
        )
    return library


def _require() -> None:
    if _library() is None:
        raise RuntimeError(
            "gns_jax._native is not built (no C++17 compiler at install time?): reinstall "
            "gns-jax with one, or let the samplers use their JAX versions"
        )


def available() -> bool:
    """Whether the native CPU kernels are built and enabled (``GNS_JAX_NATIVE`` is not ``0``)."""
    return os.environ.get("GNS_JAX_NATIVE", "1") != "0" and _library() is not None


def take_rows_kernel(id_dtype: np.dtype):
    """The native host row gather (``native/gather.cc``) for ids of ``id_dtype`` (int32 or
    int64), a ctypes function ``(store, ids, n, row_bytes, out)`` that releases the GIL, or None
    when the kernels are not built or not enabled, or for another id type.
    :func:`gns_jax.gather.take_rows` calls it; the ids must be in range."""
    return _host_function("take_rows", id_dtype)


def sorted_order_kernel(id_dtype: np.dtype):
    """The native bitmap sort (``native/gather.cc``) of distinct non-negative ids of
    ``id_dtype`` (int32 or int64), a ctypes function ``(ids, n, span, ordered, rank) -> int``
    (0, or 1 when an id repeats), or None as for :func:`take_rows_kernel`.
    :func:`gns_jax.gather.sorted_order` calls it; the ids must lie in ``[0, span)``."""
    return _host_function("sorted_order", id_dtype)


def count_resident_kernel(id_dtype: np.dtype):
    """The native page-cache count (``native/gather.cc``) of rows of ``id_dtype`` ids (int32 or
    int64), a ctypes function ``(resident, ids, n, offset, row_bytes, page) -> int`` over a
    ``mincore`` vector, or None as for :func:`take_rows_kernel`.
    :class:`gns_jax.pagecache.PageCacheCounter` calls it."""
    return _host_function("count_resident", id_dtype)


def _host_function(name: str, id_dtype: np.dtype):
    id_dtype = np.dtype(id_dtype)
    if id_dtype not in (np.dtype(np.int32), np.dtype(np.int64)) or not available():
        return None
    return _host_functions()[name, id_dtype.itemsize]


@functools.cache
def _host_functions() -> dict[tuple[str, int], ctypes._CFuncPtr]:
    """The plain C functions of ``native/gather.cc`` with their ctypes signatures."""
    library = _library()
    functions = {}
    for size, id_type in ((4, ctypes.c_int32), (8, ctypes.c_int64)):
        ids = ctypes.POINTER(id_type)
        take = getattr(library, f"gns_take_rows_i{8 * size}")
        take.restype = None
        take.argtypes = [ctypes.c_void_p, ids, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        functions["take_rows", size] = take
        order = getattr(library, f"gns_sorted_order_i{8 * size}")
        order.restype = ctypes.c_int
        order.argtypes = [ids, ctypes.c_int64, ctypes.c_int64, ids, ctypes.POINTER(ctypes.c_int32)]
        functions["sorted_order", size] = order
        count = getattr(library, f"gns_count_resident_i{8 * size}")
        count.restype = ctypes.c_int64
        count.argtypes = [ctypes.c_void_p, ids] + [ctypes.c_int64] * 4
        functions["count_resident", size] = count
    return functions


def on_cpu(kernel, fallback, *args):
    """``kernel(*args)`` when the computation runs on a CPU and the kernels are built (and
    enabled), else ``fallback(*args)``, its JAX version, which must give the same arrays: the
    one dispatch of every sampler step that has a kernel. Jittable."""
    if not available():
        return fallback(*args)
    return jax.lax.platform_dependent(*args, cpu=kernel, default=fallback)


def key_data(key: jax.Array) -> jax.Array | None:
    """The uint32 ``[2]`` data of a threefry key whose ``jax.random.bits`` the native kernel
    reproduces (``jax_threefry_partitionable`` on, JAX's default), else None: then the caller
    draws the words in JAX."""
    if not jax.config.jax_threefry_partitionable:
        return None
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if str(jax.random.key_impl(key)) != "threefry2x32" or key.shape != ():
            return None
        return jax.random.key_data(key)
    if key.dtype == jnp.uint32 and key.shape == (2,):  # a raw key: the default implementation
        return key if jax.config.jax_default_prng_impl == "threefry2x32" else None
    return None


def expand_layer(
    indptr: jax.Array, indices: jax.Array, dst: jax.Array, key: jax.Array, fanout: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(nbrs, edge_mask, edge_weight)`` ``[n, fanout]`` of
    :func:`gns_jax.sampling.nodewise.expand_layer` for destinations ``dst`` (int32 ``[n]``, -1
    padding), from :func:`key_data` ``key``: the kernel computes the words
    ``jax.random.bits(key, (n * fanout,))`` itself, for the rows that need them. CPU only;
    jittable."""
    _require()
    n = dst.shape[0]
    shapes = (
        jax.ShapeDtypeStruct((n, fanout), jnp.int32),
        jax.ShapeDtypeStruct((n, fanout), jnp.bool_),
        jax.ShapeDtypeStruct((n, fanout), jnp.float32),
    )
    call = jax.ffi.ffi_call("gns_expand_layer", shapes, vmap_method="sequential")
    return call(indptr, indices, dst, key, fanout=np.int64(fanout))


def relabel(
    num_nodes: int, dst: jax.Array, nbrs: jax.Array, edge_mask: jax.Array, max_new: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(src_nodes, senders, overflow)`` of :func:`gns_jax.sampling.nodewise.relabel`. CPU only;
    jittable."""
    _require()
    max_src = dst.shape[0] + max_new + 1
    shapes = (
        jax.ShapeDtypeStruct((max_src,), jnp.int32),
        jax.ShapeDtypeStruct(nbrs.shape, jnp.int32),
        jax.ShapeDtypeStruct((), jnp.int32),
    )
    call = jax.ffi.ffi_call("gns_relabel", shapes, vmap_method="sequential")
    return call(dst, nbrs, edge_mask, num_nodes=np.int64(num_nodes), max_new=np.int64(max_new))


def make_block(
    num_nodes: int,
    dst: jax.Array,
    nbrs: jax.Array,
    edge_mask: jax.Array,
    weight: jax.Array,
    max_src: int,
    max_edges: int | None = None,
) -> tuple[tuple[jax.Array, ...], jax.Array]:
    """``((src_nodes, senders, receivers, edge_weight), overflow)``: the arrays of
    :func:`gns_jax.sampling.nodewise.make_block`'s block (without ``dst_mask``) and its overflow,
    relabelled and, with ``max_edges`` below the number of entries, compacted in one pass. CPU
    only; jittable."""
    _require()
    entries = nbrs.size
    compact = max_edges is not None and max_edges < entries
    edges = max_edges if compact else entries
    shapes = (
        jax.ShapeDtypeStruct((max_src,), jnp.int32),
        jax.ShapeDtypeStruct((edges,), jnp.int32),
        jax.ShapeDtypeStruct((edges,), jnp.int32),
        jax.ShapeDtypeStruct((edges,), jnp.float32),
        jax.ShapeDtypeStruct((), jnp.int32),
    )
    call = jax.ffi.ffi_call("gns_make_block", shapes, vmap_method="sequential")
    *arrays, overflow = call(
        dst,
        nbrs,
        edge_mask,
        weight.astype(jnp.float32),
        num_nodes=np.int64(num_nodes),
        max_new=np.int64(max_src - dst.shape[0] - 1),
        max_edges=np.int64(max_edges if compact else -1),
    )
    return tuple(arrays), overflow
