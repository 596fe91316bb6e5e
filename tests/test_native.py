"""The native CPU kernels (gns_jax.native, native/sampling.cc) against the JAX versions they
replace on a CPU: the same arrays, element for element, so that every distribution test of the
samplers (tests/test_sampling.py, test_gns.py), which run the native kernels here, also holds
for the JAX versions an accelerator runs; and the load's fallback: a library that cannot be
loaded, was built against another FFI API version or is rejected gives one warning and the JAX
versions, or an error under GNS_JAX_REQUIRE_NATIVE=1 (.ci/run), where these tests fail instead of
skipping when the kernels are not built."""

from __future__ import annotations

import importlib.util
import os
import threading
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gns_jax import native
from gns_jax.cache import build_device_cache, cache_distribution, draw_cache
from gns_jax.graph import from_edges
from gns_jax.sampling import GNSSampler, NodeWiseSampler
from gns_jax.sampling import nodewise as nw

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("gns_jax._native") is None
    and os.environ.get(native.REQUIRE, "0") in ("", "0"),
    reason="gns_jax._native was not built (no C++17 compiler when gns-jax was installed)",
)


def graph_with_every_degree(n: int = 400, seed: int = 0):
    """Degrees from 0 (isolated nodes) to above 40, so both sides of every fan-out occur."""
    rng = np.random.default_rng(seed)
    hubs = rng.choice(n, 12, replace=False)
    src = np.concatenate([rng.integers(0, n - 20, 3 * n), np.repeat(hubs, 45)])
    dst = np.concatenate([rng.integers(0, n - 20, 3 * n), rng.integers(0, n - 20, 12 * 45)])
    return from_edges(src, dst, n)  # nodes n-20.. are isolated


@pytest.fixture(scope="module")
def setup():
    graph = graph_with_every_degree()
    topology = nw.DeviceTopology.from_graph(graph)
    rng = np.random.default_rng(1)
    dst = np.r_[rng.choice(graph.num_nodes, 150, replace=False), -np.ones(10, int)]
    return graph, topology, jnp.asarray(dst.astype(np.int32))


def test_the_kernels_are_built_and_used():
    assert native.available()


@pytest.mark.parametrize("fanout", [1, 3, 10, 40])
@pytest.mark.parametrize("seed", [0, 7])
def test_expand_layer_equals_the_jax_version(setup, fanout, seed):
    _, topology, dst = setup
    key = jax.random.key(seed)
    want = jax.jit(nw._expand_layer_jax, static_argnums=3)(topology, dst, key, fanout)
    got = jax.jit(nw.expand_layer, static_argnums=3)(key, topology, dst, fanout)
    for w, g in zip(want, got, strict=True):
        assert w.dtype == g.dtype and w.shape == g.shape
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    assert np.asarray(want[1]).any() and not np.asarray(want[1]).all()  # both kinds of rows


def test_expand_layer_words_are_jax_random_bits(setup):
    # Another key gives other neighbours: the kernel reads the key, so the comparison above
    # would catch words drawn from a wrong stream.
    _, topology, dst = setup
    a = nw.expand_layer(jax.random.key(0), topology, dst, 3)[0]
    b = nw.expand_layer(jax.random.key(1), topology, dst, 3)[0]
    assert not np.array_equal(np.asarray(a), np.asarray(b))


def test_a_raw_uint32_key_gives_the_same_draws(setup):
    _, topology, dst = setup
    typed = nw.expand_layer(jax.random.key(5), topology, dst, 10)[0]
    raw = nw.expand_layer(jax.random.PRNGKey(5), topology, dst, 10)[0]
    np.testing.assert_array_equal(np.asarray(raw), np.asarray(typed))


@pytest.mark.parametrize("max_new", [2000, 60, 0])
def test_relabel_equals_the_jax_version(setup, max_new):
    graph, topology, dst = setup
    nbrs, mask, _ = nw.expand_layer(jax.random.key(3), topology, dst, 10)
    want = nw._relabel_jax(graph.num_nodes, dst, nbrs, mask, max_new)
    got = native.relabel(graph.num_nodes, dst, nbrs, mask, max_new)
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    if max_new < 2000:
        assert int(got[2]) > 0  # overflow counted the same


def test_relabel_leaves_no_state_between_calls(setup):
    # The per-thread scratch array must be back to "unseen" after a call: a second call on
    # other destinations equals the JAX version too.
    graph, topology, dst = setup
    for seed in range(3):
        other = jnp.roll(dst, 17 * seed + 5)
        nbrs, mask, _ = nw.expand_layer(jax.random.key(seed), topology, other, 5)
        want = nw._relabel_jax(graph.num_nodes, other, nbrs, mask, 40)
        got = native.relabel(graph.num_nodes, other, nbrs, mask, 40)
        np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))


def test_kernels_agree_when_called_from_several_threads(setup):
    graph, topology, dst = setup
    fn = jax.jit(
        lambda k: nw.make_block(graph.num_nodes, dst, *nw.expand_layer(k, topology, dst, 10), 900)
    )
    want = [np.asarray(fn(jax.random.key(i))[0].senders) for i in range(6)]
    got = [None] * 6

    def run(i):
        got[i] = np.asarray(fn(jax.random.key(i))[0].senders)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("kind", ["ns", "gns"])
def test_whole_batches_equal_with_the_kernels_off(setup, monkeypatch, kind):
    graph, _, _ = setup
    seeds = np.arange(0, 380, 3)

    def batch():
        if kind == "ns":
            sampler = NodeWiseSampler(graph, (8, 4), batch_size=seeds.size)
            return sampler.sample(jax.random.key(2), sampler.pad_seeds(seeds))
        snap = draw_cache(np.random.default_rng(9), cache_distribution(graph), 40)
        cache, _ = build_device_cache(graph, np.zeros((graph.num_nodes, 1), np.float32), snap)
        sampler = GNSSampler(
            graph,
            (8, 4),
            seeds.size,
            40,
            input_fanout=(2, 6),
            weights="hajek-fallback",
            cache_first_upper=True,
        )
        return sampler.sample(jax.random.key(2), sampler.pad_seeds(seeds), cache)

    with_kernels = jax.tree.leaves(batch())
    monkeypatch.setenv("GNS_JAX_NATIVE", "0")
    assert not native.available()
    without = jax.tree.leaves(batch())
    assert len(with_kernels) == len(without)
    for a, b in zip(with_kernels, without, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("max_edges", [None, 10_000, 700, 50])
@pytest.mark.parametrize("max_new", [2000, 60])
def test_make_block_equals_the_jax_version(setup, max_edges, max_new):
    graph, topology, dst = setup
    nbrs, mask, weight = nw.expand_layer(jax.random.key(4), topology, dst, 10)
    max_src = dst.shape[0] + max_new + 1
    want = nw._make_block_jax(graph.num_nodes, dst, nbrs, mask, weight, max_src, max_edges)
    got = nw.make_block(graph.num_nodes, dst, nbrs, mask, weight, max_src, max_edges)
    for w, g in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=True):
        assert w.dtype == g.dtype and w.shape == g.shape
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    if max_edges is not None and max_edges < 1000 or max_new < 100:
        assert int(got[1]) > 0  # the overflow, counted the same


# The load's fallback. Each test reloads the library through patched steps and leaves the cache
# cleared, so the next call loads it again (registering the same handlers twice is allowed).


@pytest.fixture
def reload(monkeypatch):
    """Clears the cached library (and its host functions) before and after the test, with
    GNS_JAX_NATIVE and GNS_JAX_REQUIRE_NATIVE unset: the warning path unless a test sets it."""
    monkeypatch.delenv("GNS_JAX_NATIVE", raising=False)
    monkeypatch.delenv(native.REQUIRE, raising=False)
    native._library.cache_clear()
    native._host_functions.cache_clear()
    yield
    native._library.cache_clear()
    native._host_functions.cache_clear()


def nodewise_batch(graph, seeds):
    sampler = NodeWiseSampler(graph, (8, 4), batch_size=seeds.size)  # a fresh trace
    return jax.tree.leaves(sampler.sample(jax.random.key(2), sampler.pad_seeds(seeds)))


def spy(monkeypatch, module, name):
    """Counts the calls (traces) of ``module.name``."""
    calls, original = [], getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(name)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def kernel_warnings(record):
    return [w for w in record if issubclass(w.category, native.NativeKernelWarning)]


def fail_to_open(path):
    raise OSError(f"{path}: cannot open shared object file (a test)")


def reject_handler(name, *args, **kwargs):
    raise RuntimeError(f"No FFI handler registered for {name} (a test)")


def test_the_built_and_runtime_api_versions_are_read_and_agree():
    assert native.available()
    built = native._built_api_version(native._library())
    assert built == native._runtime_api_version()  # built against this venv's jax
    assert built[0] == 0 and built[1] >= 1


def test_the_version_rule_is_xlas():
    assert native._compatible((0, 3), (0, 3))
    assert native._compatible((0, 2), (0, 3))  # an older minor version stays supported
    assert not native._compatible((0, 4), (0, 3))  # headers newer than the runtime
    assert not native._compatible((1, 0), (0, 3))
    assert not native._compatible((0, 3), (1, 3))


def _fallback_batch(monkeypatch, graph, seeds):
    """A node-wise batch sampled after the kernels failed to load: the library's warnings
    recorded, and the batch checked to come from the JAX version (traced anew, no kernel call)."""
    kernel = spy(monkeypatch, native, "expand_layer")
    jax_version = spy(monkeypatch, nw, "_expand_layer_jax")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert not native.available()
        fallback = nodewise_batch(graph, seeds)
        assert not native.available()
    assert jax_version and not kernel
    return fallback, record


@pytest.mark.parametrize("defect", ["load", "register"])
def test_a_library_that_fails_warns_once_and_the_jax_versions_give_the_same_batch(
    setup, reload, monkeypatch, defect
):
    graph, _, _ = setup
    seeds = np.arange(0, 380, 3)
    assert native.available()
    with_kernels = nodewise_batch(graph, seeds)

    native._library.cache_clear()
    if defect == "load":
        monkeypatch.setattr(native, "_open", fail_to_open)
    else:
        monkeypatch.setattr(jax.ffi, "register_ffi_target", reject_handler)
    fallback, record = _fallback_batch(monkeypatch, graph, seeds)
    assert native.take_rows_kernel(np.int64) is None  # the host gather falls back too
    (warning,) = kernel_warnings(record)
    message = str(warning.message)
    cause = "cannot open shared object" if defect == "load" else "No FFI handler registered"
    assert cause in message
    assert f"jax {jax.__version__}" in message and "JAX versions" in message
    with pytest.raises(RuntimeError, match="not in use"):
        native.relabel(
            10, jnp.zeros(2, jnp.int32), jnp.zeros((2, 2), jnp.int32), jnp.ones((2, 2), bool), 4
        )
    assert len(with_kernels) == len(fallback)
    for a, b in zip(with_kernels, fallback, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_version_mismatch_warns_and_falls_back_before_registering(setup, reload, monkeypatch):
    # A running jaxlib whose FFI API is older than the headers the library was built against:
    # the handlers are not registered at all (XLA would reject them, or not say so: "No FFI
    # handler registered" at the first call), and the samplers give the same batch in JAX.
    graph, _, _ = setup
    seeds = np.arange(0, 380, 3)
    assert native.available()
    with_kernels = nodewise_batch(graph, seeds)
    built = native._built_api_version(native._library())
    older = (built[0], built[1] - 1) if built[1] > 0 else (built[0] - 1, 0)

    native._library.cache_clear()
    monkeypatch.setattr(native, "_runtime_api_version", lambda: older)
    registered = []
    monkeypatch.setattr(jax.ffi, "register_ffi_target", lambda *a, **k: registered.append(a))
    fallback, record = _fallback_batch(monkeypatch, graph, seeds)
    (warning,) = kernel_warnings(record)
    message = str(warning.message)
    assert "another XLA FFI API version" in message
    assert f"(XLA FFI API {older[0]}.{older[1]})" in message
    assert f"gns_jax._native built against XLA FFI API {built[0]}.{built[1]}" in message
    assert not registered
    for a, b in zip(with_kernels, fallback, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("defect", ["load", "register", "version", "not built"])
def test_require_native_turns_the_fallback_into_an_error(reload, monkeypatch, defect):
    monkeypatch.setenv(native.REQUIRE, "1")
    if defect == "load":
        monkeypatch.setattr(native, "_open", fail_to_open)
    elif defect == "register":
        monkeypatch.setattr(jax.ffi, "register_ffi_target", reject_handler)
    elif defect == "version":
        monkeypatch.setattr(native, "_runtime_api_version", lambda: (99, 0))
    else:
        monkeypatch.setattr(native.importlib.util, "find_spec", lambda name: None)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match=native.REQUIRE):
            native.available()
        with pytest.raises(RuntimeError, match=native.REQUIRE):  # every time, not only once
            native.available()
    assert not kernel_warnings(record)


def test_without_require_a_library_not_built_is_silently_off(reload, monkeypatch):
    monkeypatch.setattr(native.importlib.util, "find_spec", lambda name: None)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert not native.available()
    assert not kernel_warnings(record)
