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

It is compiled against the FFI headers of the jaxlib present at build time
(``jax.ffi.include_dir()``) and exports their version (``gns_ffi_api_major``/``_minor``). At the
first :func:`available`, the library is loaded, that version checked against the running
jaxlib's (the version of the headers it ships: same major, minor no newer) and the handlers
registered. If any step fails (an ``OSError`` from ``ctypes``, a mismatch, XLA rejecting a
handler) one :class:`NativeKernelWarning` names the cause and the versions, :func:`available`
is false and the JAX versions run; with ``GNS_JAX_REQUIRE_NATIVE=1`` (``.ci/run``) it raises
RuntimeError instead, as does a library that was not built.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "REQUIRE",
    "NativeKernelWarning",
    "available",
    "count_resident_kernel",
    "expand_layer",
    "key_data",
    "make_block",
    "on_cpu",
    "relabel",
    "sorted_order_kernel",
    "take_rows_kernel",
    "take_rows_to_kernel",
]

_TARGETS = {
    "gns_expand_layer": "GnsExpandLayer",
    "gns_relabel": "GnsRelabel",
    "gns_make_block": "GnsMakeBlock",
}


REQUIRE = "GNS_JAX_REQUIRE_NATIVE"
"""The environment variable that, set to anything but ``0``, makes a native library that
cannot be used (not built, not loadable, built against another FFI API version, rejected by
XLA) an error instead of a warning; .ci/run sets it, and setup.py then fails on a compile
error instead of installing without the kernels."""


class _Mismatch(Exception):
    """The library's FFI API version is not one the running jaxlib accepts."""


class NativeKernelWarning(RuntimeWarning):
    """The native kernels are built but cannot be used in this process: the samplers run their
    JAX versions (the same numbers, more slowly on a CPU). Given once per process."""


def _required() -> bool:
    return os.environ.get(REQUIRE, "0") not in ("", "0")


def _open(path: str) -> ctypes.CDLL:
    return ctypes.CDLL(path)


def _built_api_version(library: ctypes.CDLL) -> tuple[int, int]:
    """The XLA FFI API version (major, minor) of the headers ``native/sampling.cc`` was
    compiled against: ``XLA_FFI_API_MAJOR`` and ``XLA_FFI_API_MINOR``, returned by its
    ``gns_ffi_api_major`` and ``gns_ffi_api_minor``."""
    return library.gns_ffi_api_major(), library.gns_ffi_api_minor()


@functools.cache
def _runtime_api_version() -> tuple[int, int]:
    """The XLA FFI API version (major, minor) of the running jaxlib: the ``XLA_FFI_API_MAJOR``
    and ``XLA_FFI_API_MINOR`` of the FFI headers it ships (``jax.ffi.include_dir()``), which
    are those its own XLA was built from. jaxlib exposes no other way to read it."""
    header = os.path.join(jax.ffi.include_dir(), "xla", "ffi", "api", "c_api.h")
    with open(header, encoding="utf-8") as f:
        text = f.read()
    version = []
    for part in ("MAJOR", "MINOR"):
        found = re.search(rf"^#define XLA_FFI_API_{part} (\d+)", text, re.MULTILINE)
        if found is None:
            raise RuntimeError(f"no XLA_FFI_API_{part} in {header}")
        version.append(int(found[1]))
    return version[0], version[1]


def _compatible(built: tuple[int, int], runtime: tuple[int, int]) -> bool:
    """XLA's rule for an FFI handler: the same major version, and a minor version no newer than
    the runtime's (a minor version adds to the API; older handlers stay supported)."""
    return built[0] == runtime[0] and built[1] <= runtime[1]


def _register(library: ctypes.CDLL) -> None:
    # The CPU backend first: registration is deferred until it exists, and XLA's rejection of
    # a handler must raise here, not at the first jitted call.
    try:
        jax.devices("cpu")
    except RuntimeError:  # no CPU backend in this process (JAX_PLATFORMS): nothing runs there
        pass
    for target, symbol in _TARGETS.items():
        jax.ffi.register_ffi_target(
            target, jax.ffi.pycapsule(getattr(library, symbol)), platform="cpu"
        )


def _unusable(cause: str, built: tuple[int, int] | None = None) -> None:
    """Warns once (the caller is cached) that the kernels are not in use, naming the cause and
    the versions, or raises RuntimeError when :data:`REQUIRE` is set."""
    import jaxlib

    try:
        runtime = "XLA FFI API {}.{}".format(*_runtime_api_version())
    except Exception:  # only for the message
        runtime = "XLA FFI API unknown"
    versions = f"jax {jax.__version__}, jaxlib {jaxlib.__version__} ({runtime})"
    if built is not None:
        versions += f"; gns_jax._native built against XLA FFI API {built[0]}.{built[1]}"
    message = (
        f"gns-jax's native CPU kernels are not in use: {cause} ({versions}). The samplers run "
        "their JAX versions (the same numbers, more slowly on a CPU); to use the kernels, "
        "reinstall gns-jax built against this jax (e.g. pip install --no-build-isolation)."
    )
    if _required():
        raise RuntimeError(f"{message} ({REQUIRE} is set)")
    warnings.warn(message, NativeKernelWarning, stacklevel=4)


@functools.cache
def _library() -> ctypes.CDLL | None:
    """The native library, loaded, checked against the running jaxlib's FFI API version and
    its handlers registered; None where it is not built or any of that fails (then once a
    :class:`NativeKernelWarning`, or RuntimeError under :data:`REQUIRE`)."""
    spec = importlib.util.find_spec("gns_jax._native")
    if spec is None or spec.origin is None:
        if _required():
            raise RuntimeError(
                "gns_jax._native is not built (no C++17 compiler at install time?) and "
                f"{REQUIRE} is set"
            )
        return None  # the install warned; the JAX versions run
    built = None
    try:
        library = _open(spec.origin)
        built = _built_api_version(library)
        runtime = _runtime_api_version()
        if not _compatible(built, runtime):
            raise _Mismatch(
                "it was built against another XLA FFI API version than the running jaxlib's, "
                "one that jaxlib does not accept (it needs the same major version and a minor "
                "one no newer)"
            )
        _register(library)
    except _Mismatch as error:
        _unusable(str(error), built)
        return None
    except Exception as error:  # OSError, a missing symbol, a rejected handler
        _unusable(f"{type(error).__name__}: {error}", built)
        return None
    return library


def _require() -> None:
    if _library() is None:
        raise RuntimeError(
            "gns-jax's native kernels are not in use (not built, or not usable with this jax: "
            "see the warning): reinstall gns-jax, or let the samplers use their JAX versions"
        )


def available() -> bool:
    """Whether the native CPU kernels are built, usable with the running jaxlib and enabled
    (``GNS_JAX_NATIVE`` is not ``0``). False after a load that failed (one
    :class:`NativeKernelWarning` names the cause); with ``GNS_JAX_REQUIRE_NATIVE=1`` such a
    failure raises RuntimeError instead."""
    return os.environ.get("GNS_JAX_NATIVE", "1") != "0" and _library() is not None


def take_rows_kernel(id_dtype: np.dtype):
    """The native host row gather (``native/gather.cc``) for ids of ``id_dtype`` (int32 or
    int64), a ctypes function ``(store, ids, n, row_bytes, out)`` that releases the GIL, or None
    when the kernels are not built or not enabled, or for another id type.
    :func:`gns_jax.gather.take_rows` calls it; the ids must be in range."""
    return _host_function("take_rows", id_dtype)


def take_rows_to_kernel(id_dtype: np.dtype):
    """The native scattering gather ``out[positions[i]] = store[ids[i]]`` (int32 positions), or
    None as for :func:`take_rows_kernel`."""
    return _host_function("take_rows_to", id_dtype)


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
        take_to = getattr(library, f"gns_take_rows_to_i{8 * size}")
        take_to.restype = None
        take_to.argtypes = take.argtypes + [ctypes.POINTER(ctypes.c_int32)]
        functions["take_rows_to", size] = take_to
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
