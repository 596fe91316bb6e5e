"""Builds gns-jax's native CPU kernels (native/sampling.cc, XLA FFI handlers, and
native/gather.cc, the host row gather; both loaded with ctypes by gns_jax/native.py).
Everything else about the package is in pyproject.toml.

The headers of XLA's FFI come from the JAX present at build time (``jax.ffi.include_dir()``,
the headers jaxlib ships; jax is a build requirement in pyproject.toml). The library records
the FFI API version it was compiled against, and gns_jax/native.py checks it against the
running jaxlib's at load: a mismatch (a build against another jaxlib than the one that runs)
gives one warning and the JAX versions of the kernels, never a handler XLA rejects.

The extension is optional: where no C++17 compiler is found the install still succeeds, with a
warning, and the samplers run their jitted JAX versions (the same numbers, more slowly on a
CPU). With ``GNS_JAX_REQUIRE_NATIVE=1`` in the environment (.ci/run sets it) a failed compile
fails the install instead.
"""

import os

from setuptools import Extension, setup

try:
    import jax
except ImportError as error:  # only without build isolation, in an environment without jax
    raise SystemExit(
        "building gns-jax needs jax (a build requirement, for the headers of XLA's FFI): "
        "pip install jax first, or build with build isolation"
    ) from error

required = os.environ.get("GNS_JAX_REQUIRE_NATIVE", "0") not in ("", "0")

setup(
    ext_modules=[
        Extension(
            "gns_jax._native",
            sources=["native/sampling.cc", "native/gather.cc"],
            include_dirs=[jax.ffi.include_dir()],
            extra_compile_args=["-std=c++17", "-O3"],
            language="c++",
            optional=not required,
        )
    ]
)
