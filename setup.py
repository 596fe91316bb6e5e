"""Builds gns-jax's native CPU kernels (native/sampling.cc, XLA FFI handlers, and
native/gather.cc, the host row gather; both loaded with ctypes by gns_jax/native.py).
Everything else about the package is in pyproject.toml.

The extension is optional: where no C++17 compiler is found the install still succeeds, with a
warning, and the samplers run their jitted JAX versions (the same numbers, more slowly on a
CPU). The headers of XLA's FFI (native/include, Apache-2.0, from jaxlib) are vendored so that the
build needs no jaxlib.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "gns_jax._native",
            sources=["native/sampling.cc", "native/gather.cc"],
            include_dirs=["native/include"],
            extra_compile_args=["-std=c++17", "-O3"],
            language="c++",
            optional=True,
        )
    ]
)
