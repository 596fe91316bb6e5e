"""The cache-fraction planner (gns_jax.plan): what it computes, what it picks, its errors, and
that its closed form matches what the run's own GNS batches show."""

import json

import jax
import numpy as np
import pytest

from gns_jax import plan as plan_module
from gns_jax.cache import cache_distribution, cache_size
from gns_jax.cachestats import cache_statistics, sample_layer_sets
from gns_jax.config import TrainConfig, parse_fraction
from gns_jax.errors import ConfigError
from gns_jax.factories import make_loader, make_sampler, prepare_features
from gns_jax.plan import plan_cache_fraction
from tests.helpers import TINY_ARGS

KEYS = {
    "requested", "fractions", "measured", "chosen", "keeps_up", "criterion", "batches", "seconds",
}  # fmt: skip
MEASURED = {
    "fraction", "no_cached_share", "cached_neighbours", "rows_vs_ns", "cache_nodes", "keeps_up",
}  # fmt: skip
FRACTIONS = (0.01, 0.05, 0.2, 1.0)


@pytest.fixture(scope="module")
def gns_config(tiny_config):
    return tiny_config.replace(sampler="gns", cache_fraction="auto")


@pytest.fixture(scope="module")
def swept(tiny_dataset, gns_config):
    """Every fraction measured and none keeps up (a rows limit of 0)."""
    return plan_cache_fraction(tiny_dataset, gns_config, fractions=FRACTIONS, rows_limit=0.0)


def _plan(dataset, config, **kw):
    """The planner on the 600-node graph, whose caches are all below the default minimum size."""
    return plan_cache_fraction(dataset, config, fractions=FRACTIONS, min_cache_nodes=0, **kw)


def test_plan_records_what_it_computed(swept):
    assert set(swept) == KEYS
    assert swept["requested"] == "auto" and swept["fractions"] == list(FRACTIONS)
    assert [m["fraction"] for m in swept["measured"]] == list(FRACTIONS)
    assert all(set(m) == MEASURED for m in swept["measured"])
    assert swept["keeps_up"] is False and not any(m["keeps_up"] for m in swept["measured"])
    assert swept["batches"] == plan_module.BATCHES and swept["seconds"] > 0
    assert "no_cached_share <=" in swept["criterion"]


def test_the_share_falls_as_the_cache_grows(swept):
    """A larger cache leaves fewer layer-1 nodes without a cached neighbour and gives each more;
    caching every node (fraction 1: 600 draws, most nodes drawn) leaves almost none out."""
    shares = [m["no_cached_share"] for m in swept["measured"]]
    neighbours = [m["cached_neighbours"] for m in swept["measured"]]
    assert shares == sorted(shares, reverse=True) and shares[0] > 0.5 > shares[-1]
    assert neighbours == sorted(neighbours)
    nodes = [m["cache_nodes"] for m in swept["measured"]]
    assert nodes == sorted(nodes) and nodes[0] <= cache_size(0.01, 600)


def test_none_keeps_up_picks_the_smallest_within_the_share_limit(swept, gns_config):
    limit = plan_module.no_cached_limit(len(gns_config.fanouts))
    within = [m["fraction"] for m in swept["measured"] if m["no_cached_share"] <= limit]
    assert swept["chosen"] == (within[0] if within else FRACTIONS[-1])


def test_plan_picks_the_smallest_that_keeps_up(tiny_dataset, gns_config, swept):
    """With the limit between the second and third fraction's shares, the third is chosen."""
    shares = [m["no_cached_share"] for m in swept["measured"]]
    limit = (shares[1] + shares[2]) / 2
    plan = _plan(tiny_dataset, gns_config, limit=limit, rows_limit=1.0, small_graph_rows=1.0)
    assert plan["chosen"] == FRACTIONS[2] and plan["keeps_up"] is True
    assert [m["keeps_up"] for m in plan["measured"]] == [False, False, True, True]


def test_a_cache_too_small_does_not_keep_up(tiny_dataset, gns_config, swept):
    """With the minimum cache size between the third and fourth fraction's, the fourth is
    chosen although the third meets the share and rows limits."""
    shares = [m["no_cached_share"] for m in swept["measured"]]
    nodes = [m["cache_nodes"] for m in swept["measured"]]
    plan = plan_cache_fraction(
        tiny_dataset, gns_config, fractions=FRACTIONS, limit=(shares[1] + shares[2]) / 2,
        rows_limit=1.0, min_cache_nodes=(nodes[2] + nodes[3]) / 2, small_graph_rows=1.0,
    )  # fmt: skip
    assert plan["chosen"] == FRACTIONS[3]
    assert [m["keeps_up"] for m in plan["measured"]] == [False, False, False, True]
    assert "cache_nodes >=" in plan["criterion"]


def _entry(fraction, rows, ok):
    return dict(fraction=fraction, no_cached_share=0.0, rows_vs_ns=rows, keeps_up=ok)


def test_a_small_graph_takes_the_largest_passing_fraction():
    """Where the smallest passing fraction still moves more than SMALL_GRAPH_ROWS of NS's rows
    the largest passing one is chosen; at or below, the smallest; never one that fails."""
    small = plan_module.SMALL_GRAPH_ROWS
    measured = [_entry(0.01, 0.9, False), _entry(0.05, small + 0.05, True),
                _entry(0.2, 0.45, True), _entry(0.5, 0.7, False)]  # fmt: skip
    assert plan_module.choose(measured, 0.25) == (0.2, True)
    measured[1]["rows_vs_ns"] = small
    assert plan_module.choose(measured, 0.25) == (0.05, True)
    assert plan_module.choose(measured, 0.25, small_graph_rows=small - 0.01) == (0.2, True)
    none = [m | dict(keeps_up=False) for m in measured]
    assert plan_module.choose(none, 0.25) == (0.01, False)


def test_the_plan_says_when_it_took_the_largest_on_a_small_graph(tiny_dataset, gns_config):
    lines = []
    plan = _plan(tiny_dataset, gns_config, limit=1.0, rows_limit=1.0, small_graph_rows=0.0,
                 log=lines.append)  # fmt: skip
    assert plan["chosen"] == FRACTIONS[-1] and plan["keeps_up"] is True
    (verdict,) = [line for line in lines if line.startswith("plan: cache fraction")]
    assert "a small graph: 0.01, the smallest that passes" in verdict
    assert "rows_vs_ns > 0" in plan["criterion"]


def test_the_plan_says_what_keeping_up_means_for_a_short_run(tiny_dataset, gns_config):
    """Keeping up is judged over 10 epochs or more; a run of fewer is told that GNS may trail
    NS's take-off (on the size study's largest graphs it lagged NS in the first epoch). A run
    long enough, or one where nothing keeps up, is not."""
    short = plan_module.KEEP_UP_EPOCHS - 1
    for epochs, rows_limit, said in ((short, 1.0, True), (short + 1, 1.0, False),
                                     (short, 0.0, False)):  # fmt: skip
        lines = []
        config = gns_config.replace(epochs=epochs)
        plan = _plan(tiny_dataset, config, limit=1.0, rows_limit=rows_limit, log=lines.append)
        assert plan["keeps_up"] is (rows_limit > 0)
        note = plan_module.horizon_note(epochs)
        assert (f"plan: {note}" in lines) is said, (epochs, rows_limit)
        assert f"over {epochs}," in note and f"{plan_module.KEEP_UP_EPOCHS} epochs" in note


def test_plan_is_deterministic(tiny_dataset, gns_config, swept):
    again = plan_cache_fraction(tiny_dataset, gns_config, fractions=FRACTIONS, rows_limit=0.0)
    assert again["measured"] == swept["measured"] and again["chosen"] == swept["chosen"]


def _loader_shares(dataset, config, epochs):
    """What the run's own GNS loader shows: per epoch (one cache draw each), the share of the
    input block's destination nodes with no cached neighbour, over that epoch's batches."""
    features = prepare_features(dataset, config)
    loader = make_loader(dataset, config, make_sampler(dataset, config), features)
    graph, out, sizes = dataset.graph, [], []
    it = loader.batches(0, epochs)
    try:
        for _ in range(epochs):
            none = total = 0
            for _ in range(loader.num_batches):
                batch = next(it)
                ids = loader.cache_schedule.ids
                cached = np.zeros(graph.num_nodes, dtype=bool)
                cached[ids] = True
                block = jax.device_get(batch.inputs.blocks[0])
                dst = np.asarray(block.src_nodes)[: block.dst_mask.shape[0]]
                dst = dst[np.asarray(block.dst_mask)]
                counts = np.array([cached[graph.neighbors(v)].sum() for v in dst])
                none += int((counts == 0).sum())
                total += dst.size
                sizes.append(dst.size)
            out.append(none / total)
    finally:
        it.close()
    return np.array(out), np.array(sizes)


@pytest.fixture(scope="module")
def loader_view(tiny_dataset, tiny_config):
    """The run's loader at 5 %, 12 epochs of one batch (every training node): 12 cache draws."""
    config = tiny_config.replace(sampler="gns", cache_fraction=0.05, batch_size=48)
    return config, _loader_shares(tiny_dataset, config, 12)


def _closed_form(dataset, config, fanouts):
    rng = np.random.default_rng(0)
    sets = sample_layer_sets(dataset.graph, dataset.train_idx, fanouts, 48, rng, 16)
    p = cache_distribution(dataset.graph, "degree")
    stats = cache_statistics(dataset.graph, p, cache_size(0.05, dataset.num_nodes), sets)
    return stats, np.array([s.size for s in sets.layer1])


def test_the_closed_form_matches_the_runs_batches(tiny_dataset, loader_view):
    """The planner's expected share and layer-1 size agree with the real loader's batches
    within 4 standard errors (over its 12 cache draws, and over its batches)."""
    config, (shares, sizes) = loader_view
    stats, planned_sizes = _closed_form(tiny_dataset, config, config.fanouts)
    se = shares.std(ddof=1) / np.sqrt(shares.size)
    assert abs(stats["no_cached_share"] - shares.mean()) <= 4 * se
    se_size = np.hypot(sizes.std(ddof=1) / np.sqrt(sizes.size), planned_sizes.std(ddof=1) / 4)
    assert abs(planned_sizes.mean() - sizes.mean()) <= 4 * se_size


def test_the_agreement_check_catches_the_wrong_layer(tiny_dataset, loader_view):
    """Computed over the seeds instead of the layer-1 nodes (one layer too few), the closed
    form no longer matches the run's batches."""
    config, (shares, sizes) = loader_view
    _, planned_sizes = _closed_form(tiny_dataset, config, config.fanouts[-1:])
    se_size = np.hypot(sizes.std(ddof=1) / np.sqrt(sizes.size), planned_sizes.std(ddof=1) / 4)
    assert abs(planned_sizes.mean() - sizes.mean()) > 4 * se_size


def test_the_planner_has_its_own_random_stream(tiny_dataset, gns_config):
    """Another seed samples other batches (the statistics move a little); the run's streams
    are not touched (the planner only reads the dataset)."""
    a = plan_cache_fraction(tiny_dataset, gns_config, fractions=FRACTIONS)
    b = plan_cache_fraction(tiny_dataset, gns_config.replace(seed=1), fractions=FRACTIONS)
    assert a["measured"] != b["measured"]


def test_plan_errors(tiny_dataset, gns_config):
    with pytest.raises(ConfigError, match="auto is for --sampler gns"):
        plan_cache_fraction(tiny_dataset, gns_config.replace(sampler="ns"))
    with pytest.raises(ConfigError, match="at least two"):
        plan_cache_fraction(tiny_dataset, gns_config, fractions=(0.1,))
    with pytest.raises(ConfigError, match="at least two, increasing"):
        plan_cache_fraction(tiny_dataset, gns_config, fractions=(0.2, 0.1))


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
    # the planner draws from its own stream only: auto trains exactly as the fraction it picks
    fixed = fit(tiny_dataset, config.replace(cache_fraction=plan["chosen"]), quiet=True).metrics
    assert fixed["cache_fraction"] == plan["chosen"] and "plan" not in fixed
    assert [e["train_loss"] for e in fixed["epochs"]] == [
        e["train_loss"] for e in metrics["epochs"]
    ]
    assert fixed["test_accuracy"] == metrics["test_accuracy"]


def test_plan_command(tmp_path, capsys):
    from gns_jax.cli import main

    out = tmp_path / "plan.json"
    assert main(["plan", *TINY_ARGS, "--out", str(out), "--quiet"]) == 0
    saved = json.loads(out.read_text())
    assert set(saved["plan"]) == KEYS
    assert saved["config"]["cache_fraction"] == saved["plan"]["chosen"]
    printed = capsys.readouterr().out
    assert f"--cache-fraction {saved['plan']['chosen']:g}" in printed
    assert "without a cached neighbour" in printed
    chosen = [line for line in printed.splitlines() if line.endswith("<- chosen")]
    assert len(chosen) == 1 and f"{saved['plan']['chosen']:.1%}" in chosen[0]
    assert np.isfinite([m["no_cached_share"] for m in saved["plan"]["measured"]]).all()
    # the tiny run's 2 epochs are fewer than the study's: said where a fraction keeps up
    note = plan_module.horizon_note(saved["config"]["epochs"])
    assert (note in printed) is saved["plan"]["keeps_up"]


def test_plan_command_refuses_other_samplers(capsys):
    from gns_jax.cli import main

    assert main(["plan", *TINY_ARGS, "--sampler", "ns"]) == 2
    assert "--cache-fraction: auto is for --sampler gns" in capsys.readouterr().err
