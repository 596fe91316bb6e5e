"""Pipeline (PPLL) checks over several devices, run by ``tests/test_ppll.py`` in a fresh Python
with forced CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count=N``).

    python tests/ppll_worker.py train|resume

prints one JSON object on its last line of stdout.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from gns_jax.config import TrainConfig
from gns_jax.data import load_dataset
from gns_jax.train import fit, load_model, predict

# Cora, 7 batches an epoch, two layers: one a stage on two devices.
BASE = dict(
    parallel="pipeline", devices=2, batch_size=20, fanouts=(10, 5), hidden=32, lr=0.01,
    cache_fraction=0.1, prefetch=1,
)  # fmt: skip


def _summary(metrics: dict) -> dict:
    keys = ("parallel", "stage_devices", "stage_layers", "stage_compilations",
            "stage_busy_fraction", "stage_wait_s", "stage_blocked_s", "compilations",
            "test_accuracy", "val_accuracy", "best_epoch")  # fmt: skip
    return {k: metrics[k] for k in keys} | {
        "losses": [e["train_loss"] for e in metrics["epochs"]],
        "stage_losses": [e.get("stage_losses") for e in metrics["epochs"]],
    }


def check_train() -> dict:
    """Two identical 2-stage runs (determinism), a 3-stage run of a 3-layer model, the
    returned model's predictions against the saved-and-loaded one's."""
    dataset = load_dataset("cora")
    out = {}
    with tempfile.TemporaryDirectory() as folder:
        config = TrainConfig(epochs=12, checkpoint_dir=folder, **BASE)
        first = fit(dataset, config, quiet=True)
        out["a"] = _summary(first.metrics)
        loaded, _, _ = load_model(folder, dataset)
        out["same_predictions"] = bool(
            (predict(loaded, dataset) == predict(first.model, dataset)).all()
        )
    out["b"] = _summary(fit(dataset, TrainConfig(epochs=12, **BASE), quiet=True).metrics)
    three = TrainConfig(epochs=3, **(BASE | {"devices": 3, "fanouts": (10, 5, 5)}))
    out["three"] = _summary(fit(dataset, three, quiet=True).metrics)
    return out


def check_resume() -> dict:
    """Straight 2 epochs against: 1 epoch checkpointed every 3 batches, the epoch-end
    checkpoint removed (so the resume starts mid-epoch, at batch 6 of 7), resumed to 2."""
    dataset = load_dataset("cora")
    straight = fit(dataset, TrainConfig(epochs=2, **BASE), quiet=True).metrics
    with tempfile.TemporaryDirectory() as folder:
        part = TrainConfig(epochs=1, checkpoint_dir=folder, checkpoint_every=3, **BASE)
        fit(dataset, part, quiet=True)
        steps = sorted(int(p.name) for p in Path(folder).iterdir() if p.name.isdigit())
        shutil.rmtree(Path(folder) / str(steps[-1]))
        resumed = fit(dataset, part.replace(epochs=2, resume=True), quiet=True).metrics
    return {
        "steps": steps,
        "resumed_from": resumed["resumed_from_step"],
        "straight": _summary(straight),
        "resumed": _summary(resumed),
    }


if __name__ == "__main__":
    result = {"train": check_train, "resume": check_resume}[sys.argv[1]]()
    print(json.dumps(result))
