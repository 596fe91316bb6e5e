"""TrainConfig, the one configuration object, and the command line generated from it."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from gns_jax.cli import _config, build_parser, write_atomically
from gns_jax.config import TrainConfig, flag_of
from gns_jax.errors import ConfigError


def test_default_config_is_valid_and_round_trips_through_json(tmp_path):
    config = TrainConfig().validate()
    assert TrainConfig.from_json(config.to_json()) == config
    changed = config.replace(fanouts=(7, 3), input_fanout=(0, 4), eval_fanouts=(9, 9), seed=5)
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"status": "completed", "config": changed.to_json()}))
    assert TrainConfig.from_json(path) == changed  # a run's results: their ``config``


def test_every_field_has_help_a_group_and_a_flag():
    parser = build_parser()
    train = parser._subparsers._group_actions[0].choices["train"]
    flags = {s for a in train._actions for s in a.option_strings}
    for field in dataclasses.fields(TrainConfig):
        assert field.metadata["help"], field.name
        assert field.metadata["group"], field.name
        assert flag_of(field.name) in flags, field.name


@pytest.mark.parametrize(
    "data, option",
    [
        ({"no_such_option": 1}, "no_such_option"),
        ({"epochs": "3"}, "epochs"),
        ({"epochs": True}, "epochs"),
        ({"fanouts": [10, 2.5]}, "fanouts"),
        ({"input_fanout": [0, 1, 2]}, "input_fanout"),
    ],
)
def test_from_json_names_an_unknown_option_or_a_wrong_type(data, option):
    with pytest.raises(ConfigError, match=option):
        TrainConfig.from_json(data)


def test_from_json_names_an_unreadable_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="bad.json: not a JSON file"):
        TrainConfig.from_json(bad)
    with pytest.raises(ConfigError, match="missing.json: cannot read"):
        TrainConfig.from_json(tmp_path / "missing.json")


@pytest.mark.parametrize(
    "changes, option",
    [
        ({"fanouts": (10, 0)}, "fanouts"),
        ({"seed": 2**63}, "seed"),
        ({"cache_fraction": float("nan")}, "cache_fraction"),
        ({"gns_weights": "ht", "input_fanout": (2, 10)}, "input_fanout"),  # HT takes no top-up
        ({"gns_weights": "hajek-fallback"}, "input_fanout"),  # fallback needs one
        ({"batch_size": 10, "devices": 3}, "batch_size"),
        ({"resume": True}, "resume"),
        ({"eval_fanouts": (5,)}, "eval_fanouts"),
    ],
)
def test_validate_names_the_option(changes, option):
    with pytest.raises(ConfigError) as error:
        TrainConfig(**changes).validate()
    assert error.value.param == option


def test_the_estimator_rule_lives_in_one_place_and_the_sampler_uses_it():
    from gns_jax.graph import from_edges
    from gns_jax.sampling.gns import GNSSampler

    graph = from_edges([0, 1], [1, 2], 3)
    with pytest.raises(ConfigError, match="hajek-fallback weights need an input-layer minimum"):
        GNSSampler(graph, (2, 2), 2, 2, weights="hajek-fallback", input_fanout=(0, 4))


def _args(*argv):
    return build_parser().parse_args(["train", *argv])


def test_the_command_starts_from_a_run_json_and_the_given_flags_win(tmp_path):
    run = TrainConfig(dataset="cora", sampler="ns", epochs=7, fanouts=(4, 4), split_seed=3)
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"config": run.to_json()}))
    assert _config(_args("--config", str(path))) == run
    again = _config(_args("--config", str(path), "--epochs", "2", "--no-cache-first"))
    assert again == run.replace(epochs=2)
    # no --config: the defaults, with the split seed resolved to the seed
    assert _config(_args("--dataset", "cora", "--seed", "4")) == TrainConfig(
        dataset="cora", seed=4, split_seed=4
    )


def test_a_run_needs_a_dataset():
    with pytest.raises(ConfigError, match="required"):
        _config(_args("--epochs", "2"))


def _command(*argv):
    return subprocess.run(
        [sys.executable, "-m", "gns_jax", *argv], capture_output=True, text=True, timeout=120
    )


def test_help_imports_no_jax():
    code = (
        "import sys; from gns_jax.cli import build_parser; build_parser(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'flax', 'optax')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_bad_dataset_is_refused_before_jax_is_imported(tmp_path):
    code = (
        "import sys; from gns_jax.cli import main; "
        f"code = main(['train', '--dataset', {str(tmp_path / 'missing')!r}, '--quiet']); "
        "print(code, sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'flax')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "2 []"
    assert "--dataset" in out.stderr and "missing" in out.stderr


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--fanouts", "x"], "argument --fanouts: expected comma-separated integers"),
        (["--fanouts", "10,0"], "--fanouts: every fan-out must be a positive integer"),
        (["--seed", str(2**70)], "--seed: must be at most 2**63 - 1"),
        (["--sampler", "bogus"], "argument --sampler: invalid choice"),
    ],
)
def test_option_errors_are_one_line_with_exit_2(argv, expected):
    result = _command("train", "--dataset", "cora", *argv)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_written_files_follow_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        write_atomically(tmp_path / "a.json", b"{}")
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o640
