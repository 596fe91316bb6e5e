"""The loader: batches, random streams, budgets and the cache, and resuming from its state."""

import hashlib

import jax
import numpy as np
import pytest

from gns_jax.config import TrainConfig
from gns_jax.errors import ConfigError
from gns_jax.factories import make_loader, make_sampler
from gns_jax.loader import Loader, LoaderState


def _digest(batch) -> str:
    """A hash of everything a batch hands the train step."""
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(jax.device_get(batch.inputs)):
        h.update(np.ascontiguousarray(leaf).tobytes())
    return h.hexdigest()


CONFIGS = {
    "ns": TrainConfig(sampler="ns", batch_size=40, fanouts=(4, 3), budget="calibrated"),
    "gns": TrainConfig(
        sampler="gns", batch_size=40, fanouts=(4, 3), cache_fraction=0.1, cache_refresh=2
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ns", "gns"])
def test_resuming_from_any_batch_state_yields_the_same_batches(tiny_dataset, kind):
    config = CONFIGS[kind]
    ds = tiny_dataset

    sampler = make_sampler(ds, config)  # shared: its budgets compile once

    def loader():
        return make_loader(ds, config, sampler, ds.features)

    whole = loader()
    batches = list(whole.batches(0, 3))
    digests = [_digest(b) for b in batches]
    assert len(batches) == 3 * whole.num_batches and len(set(digests)) == len(digests)
    for cut in (1, whole.num_batches - 1, whole.num_batches + 2):
        state = batches[cut].state  # the state right after batch `cut`
        # through JSON and back, as a checkpoint stores it
        state = LoaderState.from_json(state.to_json(), state.cache_ids)
        again = loader()
        again.restore(state)
        rest = list(again.batches(state.epoch, 3, state.index))
        assert [_digest(b) for b in rest] == digests[cut + 1 :]
        assert [(b.epoch, b.index) for b in rest] == [
            (b.epoch, b.index) for b in batches[cut + 1 :]
        ]
        assert [b.rows_moved for b in rest] == [b.rows_moved for b in batches[cut + 1 :]]


def test_gns_cache_is_drawn_every_refresh_period(tiny_dataset):
    config = CONFIGS["gns"]
    ds = tiny_dataset
    loader = make_loader(ds, config, make_sampler(ds, config), ds.features)
    refreshed = [(b.epoch, b.index) for b in loader.batches(0, 5) if b.refresh is not None]
    assert refreshed == [(0, 0), (2, 0), (4, 0)]
    assert loader.state(5, 0).cache_epoch == 4


def test_epoch_orders_are_permutations_fixed_by_the_seed(tiny_dataset):
    ds = tiny_dataset
    sampler = make_sampler(ds, CONFIGS["ns"])
    a, b = Loader(ds, sampler, seed=3), Loader(ds, sampler, seed=3)
    np.testing.assert_array_equal(a.order(2), b.order(2))
    assert sorted(a.order(2).tolist()) == sorted(ds.train_idx.tolist())
    assert not np.array_equal(a.order(1), a.order(2))
    assert not np.array_equal(a.order(1), Loader(ds, sampler, seed=4).order(1))
    fixed = Loader(ds, sampler, shuffle=False, nodes=ds.test_idx[:100])
    seeds = np.concatenate([batch.seeds for batch in fixed.epoch(0)])
    np.testing.assert_array_equal(seeds, ds.test_idx[:100])


def test_loader_options_are_checked(tiny_dataset):
    sampler = make_sampler(tiny_dataset, CONFIGS["ns"])
    for bad in (dict(budget="tight"), dict(prefetch=-1), dict(cache_refresh=0), dict(seed=-1)):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            Loader(tiny_dataset, sampler, **bad)
    with pytest.raises(ConfigError, match="seeds"):
        sampler.pad_seeds(np.array([1, 2, 2]))


def test_budget_policy_calibrates_grows_and_refuses_to_grow_the_worst_case(tiny_dataset):
    from gns_jax.sampling.budget import BudgetPolicy

    sampler = make_sampler(tiny_dataset, CONFIGS["ns"])

    def never():  # what the policy must not read
        raise AssertionError("read")
        yield

    worst = BudgetPolicy(sampler, "worst")
    assert worst.calibration_samples(4) == 0
    worst.calibrate(never())
    assert worst.active is sampler and worst.budget == sampler.budget
    with pytest.raises(RuntimeError, match="worst case"):
        worst.grow(never(), "[3, 0]")  # nothing overflows the worst case: a bug, said at once

    seeds = sampler.pad_seeds(tiny_dataset.train_idx[:40])
    samples = [sampler.sample(jax.random.key(t), seeds) for t in range(2)]
    calibrated = BudgetPolicy(sampler, "calibrated")
    assert calibrated.calibration_samples(1) == 8 and calibrated.calibration_samples(12) == 12
    calibrated.calibrate(iter(samples))
    small = calibrated.budget
    assert small.max_src[0] < sampler.budget.max_src[0]  # calibration cut the input layer
    assert calibrated.grow(iter(samples[:1])) == small and calibrated.growths == 1
    assert calibrated.budget.max_src[0] >= small.max_src[0]  # more head-room, never less
    again = BudgetPolicy(sampler, "calibrated")
    sizes = calibrated.sizes
    again.restore(calibrated.budget, sizes.new, sizes.edges, calibrated.growths)
    assert (again.budget, again.growths) == (calibrated.budget, 1)
    np.testing.assert_array_equal(again.sizes.new, sizes.new)
    calibrated.fall_back()
    assert calibrated.active is sampler


def test_cache_schedule_draws_on_its_epochs_and_rebuilds_a_saved_draw(tiny_dataset):
    from gns_jax.cache import CacheSchedule
    from gns_jax.instrument import TransferMeter

    ds = tiny_dataset
    sampler = make_sampler(ds, CONFIGS["gns"])

    def schedule():
        return CacheSchedule(
            ds.graph,
            ds.features,
            sampler,
            dist="degree",
            refresh=2,
            rng=lambda epoch: np.random.default_rng([0, epoch]),
            meter=TransferMeter(),
        )

    cache = schedule()
    assert cache.on(None) is None
    refreshes = [cache.for_epoch(e) for e in range(5)]
    assert [r is not None for r in refreshes] == [True, False, True, False, True]
    assert cache.epoch == 4 and refreshes[4][1] == cache.ids.size  # distinct nodes drawn
    assert refreshes[0][2] > 0  # bytes put on the device
    drawn_at_4 = cache.ids.copy()
    resumed = schedule()
    resumed.restore(4, drawn_at_4)
    assert resumed.for_epoch(5) is None  # a resumed draw is no refresh
    np.testing.assert_array_equal(
        np.asarray(resumed.on(None).node_ids), np.asarray(cache.on(None).node_ids)
    )
    fresh = schedule()
    fresh.for_epoch(5)  # nothing saved: the draw of epoch 4, made afresh, is the same one
    np.testing.assert_array_equal(fresh.ids, drawn_at_4)
