"""``gns_jax.flat_random`` draws the same values as ``jax.random`` for every shape (so drawing flat
changes no sampler's or dropout mask's numbers, only their compile time)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gns_jax import flat_random


@pytest.mark.parametrize("shape", [(129, 10), (3, 5, 4), (0, 4)])
def test_flat_draws_equal_jax_random_word_for_word(shape):
    key = jax.random.fold_in(jax.random.key(3), 11)
    expected = jax.random.bits(key, shape, jnp.uint32)
    np.testing.assert_array_equal(flat_random.bits(key, shape), expected)
    np.testing.assert_array_equal(flat_random.uniform(key, shape), jax.random.uniform(key, shape))
    under_jit = jax.jit(lambda k: flat_random.bits(k, shape))(key)
    np.testing.assert_array_equal(under_jit, jax.random.bits(key, shape, jnp.uint32))
    assert flat_random.bits(key, shape).shape == shape
