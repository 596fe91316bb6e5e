"""The cache-fraction planner (gns_jax.plan): what it measures, what it records, its errors."""

import json

import numpy as np
import pytest

from gns_jax.cache import cache_size
from gns_jax.config import TrainConfig, parse_fraction
from gns_jax.errors import ConfigError
from gns_jax.factories import prepare_features
from gns_jax.plan import plan_cache_fraction
from gns_jax.tasks import resolve_task
from tests.helpers import TINY_ARGS

KEYS = {
    "requested", "fractions", "measured", "ns", "chosen", "keeps_up", "criterion",
    "warmup_steps", "batches", "seconds",
}  # fmt: skip


def _plan(dataset, config, **kw):
    task, dataset = resolve_task(config.task, dataset)
    return plan_cache_fraction(dataset, config, prepare_features(dataset, config), task, **kw)


@pytest.fixture(scope="module")
def gns_config(tiny_config):
    return tiny_config.replace(sampler="gns", cache_fraction="auto", dropout=0.0)


@pytest.fixture(scope="module")
def swept(tiny_dataset, gns_config):
    """Every fraction measured (nothing can keep up at a noise limit of 0)."""
    kw = dict(fractions=(0.01, 0.1, 1.0), noise_limit=0.0, rows_limit=1.0, warmup=2, batches=12)
    return _plan(tiny_dataset, gns_config, **kw), kw


def test_plan_records_what_it_measured(swept):
    plan, kw = swept
    assert set(plan) == KEYS
    assert plan["fractions"] == [0.01, 0.1, 1.0]  # none kept up: every one tried
    assert [m["fraction"] for m in plan["measured"]] == plan["fractions"]
    assert plan["keeps_up"] is False
    assert plan["chosen"] in plan["fractions"]
    # none keeps up: the lowest noise among those within the rows limit
    assert plan["chosen"] == min(plan["measured"], key=lambda m: m["noise_ratio"])["fraction"]
    assert plan["ns"]["noise"] > 0 and plan["ns"]["rows_per_batch"] > 0
    assert plan["warmup_steps"] == 2 and plan["batches"] == 12 and plan["seconds"] > 0
    for m in plan["measured"]:
        assert m["rows_vs_ns"] == pytest.approx(m["rows_per_batch"] / plan["ns"]["rows_per_batch"])


def test_noise_falls_as_the_cache_grows(swept):
    """A 1 % cache of 600 nodes (6 draws) leaves most nodes without a cached neighbour: its
    gradient is much noisier than NS's (2.4x here); caching every node brings it back near
    NS's (1.05x). If the measurement ignored GNS's gradients (or compared NS with itself) every
    ratio would read 1. Without dropout (``gns_config``), whose noise both samplers share and
    which, on this tiny graph, hides the difference in 12 batches."""
    plan, _ = swept
    ratio = {m["fraction"]: m["noise_ratio"] for m in plan["measured"]}
    assert ratio[0.01] > 1.8
    assert ratio[0.01] > ratio[0.1] > ratio[1.0]
    assert ratio[1.0] < 1.3


def test_plan_is_deterministic(tiny_dataset, gns_config, swept):
    plan, kw = swept
    again = _plan(tiny_dataset, gns_config, **kw)
    assert [m["noise_ratio"] for m in again["measured"]] == [
        m["noise_ratio"] for m in plan["measured"]
    ]


def test_plan_stops_at_the_first_that_keeps_up(tiny_dataset, gns_config):
    """With a limit every fraction meets, it tries two (the least allowed) and picks the first."""
    kw = dict(fractions=(0.01, 0.1, 1.0), noise_limit=1e9, rows_limit=1.0, warmup=1, batches=3)
    plan = _plan(tiny_dataset, gns_config, **kw)
    assert plan["fractions"] == [0.01, 0.1]
    assert plan["chosen"] == 0.01 and plan["keeps_up"] is True


def test_plan_tries_two_even_when_the_first_moves_too_many_rows(tiny_dataset, gns_config):
    """A first fraction over the rows limit (every fraction moves more rows than it) still
    gets a second measured: the plan records at least two (a 140-node training split with
    batch 1000 on Cora stopped after one)."""
    kw = dict(fractions=(0.01, 0.1, 1.0), noise_limit=1e9, rows_limit=0.0, warmup=1, batches=3)
    plan = _plan(tiny_dataset, gns_config, **kw)
    assert plan["fractions"] == [0.01, 0.1] and plan["keeps_up"] is False
    assert all(m["rows_vs_ns"] > 0.0 for m in plan["measured"])


def test_auto_rules():
    assert parse_fraction("auto") == "auto" and parse_fraction("0.05") == 0.05
    with pytest.raises(ValueError, match="auto"):
        parse_fraction("lots")
    with pytest.raises(ConfigError, match="auto is for --sampler gns"):
        TrainConfig(sampler="ns", cache_fraction="auto").validate()
    TrainConfig(cache_fraction="auto").validate()
    with pytest.raises(ConfigError, match="auto is resolved"):
        cache_size("auto", 100)


@pytest.mark.slow
def test_fit_records_the_fraction_it_trained_with(tiny_dataset, gns_config):
    from gns_jax.train import fit

    config = gns_config.replace(epochs=1)
    metrics = fit(tiny_dataset, config, quiet=True).metrics
    plan = metrics["plan"]
    assert set(plan) == KEYS and len(plan["fractions"]) >= 2
    assert metrics["cache_fraction"] == plan["chosen"] == metrics["config"]["cache_fraction"]
    assert metrics["cache_nodes"] <= cache_size(plan["chosen"], tiny_dataset.num_nodes)
    fixed = fit(tiny_dataset, config.replace(cache_fraction=0.05), quiet=True).metrics
    assert fixed["cache_fraction"] == 0.05 and "plan" not in fixed


@pytest.mark.slow
def test_plan_command(tmp_path, capsys):
    from gns_jax.cli import main

    out = tmp_path / "plan.json"
    assert main(["plan", *TINY_ARGS, "--out", str(out), "--quiet"]) == 0
    saved = json.loads(out.read_text())
    assert set(saved["plan"]) == KEYS
    assert saved["config"]["cache_fraction"] == saved["plan"]["chosen"]
    printed = capsys.readouterr().out
    assert f"--cache-fraction {saved['plan']['chosen']:g}" in printed
    assert np.isfinite([m["noise_ratio"] for m in saved["plan"]["measured"]]).all()


def test_plan_command_refuses_other_samplers(capsys):
    from gns_jax.cli import main

    assert main(["plan", *TINY_ARGS, "--sampler", "ns"]) == 2
    assert "--cache-fraction: auto is for --sampler gns" in capsys.readouterr().err
