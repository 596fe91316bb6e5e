"""The training loop dispatches ahead: at most one host synchronisation every
``step.SYNC_EVERY`` steps on the main thread (evaluation aside), the same losses as a loop that
waits for every step, and the steps in flight bounded."""

import jax
import pytest

from gns_jax import fit
from gns_jax.step import SYNC_EVERY, Stepper
from tests.helpers import HostSyncs


def _syncs(dataset, config) -> int:
    with HostSyncs().watching() as syncs:
        fit(dataset, config, quiet=True, evaluate_model=False)
    return syncs.count


@pytest.fixture(scope="module")
def many_batches(tiny_config):
    return tiny_config.replace(batch_size=4)  # 12 batches an epoch on the tiny graph


def _per_epoch(tiny_dataset, config) -> float:
    """Syncs of one more epoch (those of the set-up cancel out)."""
    one = _syncs(tiny_dataset, config.replace(epochs=1))
    return (_syncs(tiny_dataset, config.replace(epochs=3)) - one) / 2


def test_at_most_one_host_sync_every_four_steps(tiny_dataset, many_batches):
    from gns_jax.run import build_run

    run = build_run(tiny_dataset, many_batches, evaluate_model=False)
    steps = run.loader.num_batches
    run.stepper.close()
    assert steps == 12
    per_epoch = _per_epoch(tiny_dataset, many_batches)
    # groups of SYNC_EVERY steps, the window's end fetching the rest at once
    assert per_epoch <= steps // SYNC_EVERY + 1, per_epoch


def test_the_count_fails_when_every_step_waits(monkeypatch, tiny_dataset, many_batches):
    """The defect the test above exists for: a wait put into every step is seen."""
    dispatch = Stepper.dispatch

    def waiting(self, state, batches, log):
        state, batch, loss = dispatch(self, state, batches, log)
        jax.block_until_ready(state)
        return state, batch, loss

    monkeypatch.setattr(Stepper, "dispatch", waiting)
    per_epoch = _per_epoch(tiny_dataset, many_batches)
    assert per_epoch > 12 // SYNC_EVERY + 1


def test_dispatching_ahead_changes_no_number(monkeypatch, tiny_dataset, many_batches):
    """The losses of a loop that waits for every step (the old loop) are the same, bit for bit."""
    ahead = fit(tiny_dataset, many_batches.replace(epochs=2), quiet=True).metrics

    def waiting_run(self, state, batches, count, log, on_batch, stop=None):
        batch = None
        for _ in range(count):
            state, batch, loss = self(state, batches, log)
            on_batch(batch, loss, None)
        return state, batch

    monkeypatch.setattr(Stepper, "run", waiting_run)
    waited = fit(tiny_dataset, many_batches.replace(epochs=2), quiet=True).metrics
    for a, w in zip(ahead["epochs"], waited["epochs"], strict=True):
        assert a["train_loss"] == w["train_loss"] and a["val_accuracy"] == w["val_accuracy"]
    assert ahead["test_accuracy"] == waited["test_accuracy"]


def test_steps_in_flight_are_bounded(monkeypatch, tiny_dataset, many_batches):
    """At most 2 * SYNC_EVERY steps are dispatched and not yet heard of (fetched), and more
    than SYNC_EVERY: the device has the next group queued while the host fetches."""
    counts = {"dispatched": 0, "heard": 0, "most": 0}
    dispatch, run = Stepper.dispatch, Stepper.run

    def counted_dispatch(self, state, batches, log):
        counts["dispatched"] += 1
        counts["most"] = max(counts["most"], counts["dispatched"] - counts["heard"])
        return dispatch(self, state, batches, log)

    def counted_run(self, state, batches, count, log, on_batch, stop=None):
        def heard(*args):
            counts["heard"] += 1
            on_batch(*args)

        return run(self, state, batches, count, log, heard, stop)

    monkeypatch.setattr(Stepper, "dispatch", counted_dispatch)
    monkeypatch.setattr(Stepper, "run", counted_run)
    fit(tiny_dataset, many_batches.replace(epochs=1), quiet=True, evaluate_model=False)
    assert counts["dispatched"] == counts["heard"] == 12
    assert SYNC_EVERY < counts["most"] <= 2 * SYNC_EVERY
