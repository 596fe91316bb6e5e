"""experiments/device_check.sh: the CPU smoke run writes the JSON the GPU run would."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_device_check_smoke_run_writes_every_key(tmp_path):
    out = tmp_path / "check.json"
    env = dict(os.environ, GNS_JAX_DEVICE_CHECK_TINY="1", PYTHON=sys.executable)
    done = subprocess.run(
        [str(ROOT / "experiments" / "device_check.sh"), "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["tiny"] and result["num_nodes"] == 3000
    assert set(result["runs"]) == {"NS", "GNS 1%"}
    ns_rows = result["results"]["NS"]["h2d_rows_per_batch"]
    for name, run in result["runs"].items():
        full = result["results"][name]
        assert run["epoch_time_s"] == full["epoch_time_s"] > 0
        assert run["h2d_bytes_per_batch"] > 0
        assert (
            run["h2d_bytes_per_epoch"] == run["h2d_bytes_per_batch"] * result["batches_per_epoch"]
        )
        assert run["h2d_s_per_batch"] == full["time_split_s"]["h2d"] > 0
        assert {"sample", "gather", "h2d", "step", "wait"} <= set(run["time_split_s"])
        assert 0 <= run["input_wait_fraction"] <= 1
        assert "device_memory" in run  # None on a CPU: JAX keeps no such counters there
        assert run["device_memory"] is None or run["device_memory"]["peak_bytes_in_use"] > 0
        assert len(full["epochs"]) == result["epochs"] == 2
    assert result["results"]["GNS 1%"]["h2d_rows_per_batch"] < ns_rows  # the cache saves rows
    ratios = result["gns_vs_ns"]
    assert ratios["h2d_rows"] == result["results"]["GNS 1%"]["h2d_rows_per_batch"] / ns_rows
    assert {"epoch_time", "h2d_bytes"} <= set(ratios)
    assert result["device"]["platform"] == "cpu"
    assert {"graph_save", "NS", "GNS 1%"} == set(result["stages_s"])
    assert result["within_8_minutes"] == (result["wall_s"] < 480)


def test_device_check_refuses_a_bad_fraction(tmp_path, capsys):
    from experiments import device_check

    with pytest.raises(SystemExit):
        device_check.main(["--out", str(tmp_path / "x.json"), "--fraction", "1.5"])
    assert "--fraction" in capsys.readouterr().err
