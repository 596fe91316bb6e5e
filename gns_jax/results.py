"""A training run's record: its epochs, the best epoch, the running totals, and the JSON results.

Host-side. :class:`RunRecord` is what :func:`gns_jax.fit` keeps between batches and epochs (and
what a checkpoint saves of it); :meth:`RunRecord.to_json` writes the results of
``docs/results.md``, whose keys experiments and outside checks read.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from gns_jax.environment import environment
from gns_jax.probes import peak_rss_gib
from gns_jax.tasks import Task

__all__ = ["RunRecord", "Totals", "resolve_metric"]


class Totals:
    """Running sums behind the per-batch rates; saved in checkpoints."""

    FIELDS = (
        "rows",
        "inputs",
        "batches",
        "bytes",
        "refreshes",
        "cached",
        "refresh_s",
        "cache_bytes",
        "shard_rows",
    )

    def __init__(self, **values):
        for k in self.FIELDS:
            setattr(self, k, values.get(k, 0))
        self.shard_rows = list(values.get("shard_rows") or [])

    def add(self, batch) -> None:
        if len(self.shard_rows) != len(batch.rows_per_shard):
            self.shard_rows = [0] * len(batch.rows_per_shard)
        self.shard_rows = [a + b for a, b in zip(self.shard_rows, batch.rows_per_shard)]
        self.rows += batch.rows_moved
        self.inputs += batch.num_inputs
        self.batches += 1
        self.bytes += batch.bytes_moved
        if batch.refresh is not None:
            self.refreshes += 1
            self.refresh_s += batch.refresh[0]
            self.cached += batch.refresh[1]
            self.cache_bytes += batch.refresh[2]

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.FIELDS}


def resolve_metric(metric: str, task: str | int) -> str:
    """The metric that picks the best epoch: ``metric``, or for ``auto`` the task's default
    (:func:`gns_jax.metrics.default_metric`; ``task`` may be a number of classes)."""
    from gns_jax.metrics import default_metric

    return default_metric(task) if metric == "auto" else metric


class RunRecord:
    """The epochs done, the best one by the selection metric (ties: the earliest), its
    parameters, the running totals and the losses of the epoch in progress."""

    def __init__(self, task: Task, metric: str):
        self.task, self.metric = task, metric
        self.history: list[dict] = []
        self.best: dict = {"val": None, "test": None, "epoch": -1}
        self.best_params = None  # a copy of the parameters of the best epoch
        self.totals = Totals()
        self.epoch_losses: list = []
        self.epoch_stage_losses: list = []  # a pipeline's: one list of stage losses a batch

    def add(self, batch, loss, stage_losses=None) -> None:
        self.epoch_losses.append(loss)
        if stage_losses is not None:
            self.epoch_stage_losses.append([float(v) for v in stage_losses])
        self.totals.add(batch)

    def new_epoch(self) -> None:
        """Forgets the per-batch losses (an epoch starts)."""
        self.epoch_losses, self.epoch_stage_losses = [], []

    def checkpoint(self, epoch_done: bool) -> dict:
        """What a checkpoint's record holds of the run."""
        return {
            "history": self.history,
            "best": self.best,
            "totals": self.totals.to_json(),
            "epoch_losses": [] if epoch_done else [float(v) for v in self.epoch_losses],
            "epoch_stage_losses": [] if epoch_done else self.epoch_stage_losses,
        }

    def restore(self, record: dict, best_params) -> None:
        self.history, self.best = record["history"], record["best"]
        self.best_params = best_params if self.best["epoch"] >= 0 else None
        self.totals = Totals(**record["totals"])
        self.epoch_losses = list(record["epoch_losses"])
        self.epoch_stage_losses = list(record.get("epoch_stage_losses", []))

    def epoch_done(self, epoch: int, seconds: float, io: dict) -> dict:
        """The record of an epoch just trained (its mean loss, time and reads)."""
        loss = float(np.mean(np.asarray(self.epoch_losses, dtype=np.float32)))
        record = {"epoch": epoch + 1, "train_loss": loss, "time_s": seconds} | io
        if self.epoch_stage_losses:  # a pipeline: each stage's local loss
            means = np.mean(np.asarray(self.epoch_stage_losses, dtype=np.float32), axis=0)
            record["stage_losses"] = [float(v) for v in means]
        return record

    def evaluated(self, record: dict, epoch: int, scores: dict, seconds: float, params) -> None:
        """Adds an evaluation's ``scores`` (:meth:`gns_jax.evaluate.Evaluator.scores`) to the
        epoch's ``record``; keeps a copy of ``params`` if the epoch is the best so far."""
        names = self.task.metrics
        flat = {
            f"{split}_{name}": (None if scores[split] is None else scores[split][name])
            for split in ("val", "test", "train")
            for name in names
        }
        record |= {k: flat[k] for k in ("val_accuracy", "test_accuracy", "train_accuracy")}
        record |= {"eval_time_s": seconds}
        record |= {k: v for k, v in flat.items() if not k.startswith("train_")}
        chosen = flat[f"val_{self.metric}"]
        kept = self.best.get("score", self.best["val"])  # older records: selected by accuracy
        if chosen is not None and (kept is None or chosen > kept):
            self.best = {
                "val": flat["val_accuracy"],
                "test": flat["test_accuracy"],
                "epoch": epoch,
                "metric": self.metric,
                "score": chosen,
                "scores": {k: v for k, v in flat.items() if not k.startswith("train_")},
            }
            self.best_params = jax.tree.map(jnp.copy, params)  # a copy: the step donates

    def line(self, record: dict, epochs: int, seeds: int) -> str:
        """The epoch's progress line."""
        score = record.get(f"val_{self.metric}")
        stages = record.get("stage_losses")
        return (
            f"epoch {record['epoch']:>4}/{epochs}  loss {record['train_loss']:.4f}  "
            + (f"(stages {' '.join(f'{v:.4f}' for v in stages)})  " if stages else "")
            + (f"val {self.metric} {score:.4f}  " if score is not None else "")
            + f"{record['time_s']:.2f}s  {seeds / record['time_s']:,.0f} seeds/s"
        )

    def to_json(
        self, status, *, dataset, config, loader, evaluator, counter, resumed_from, norm,
        eval_mode, parallel, io_meter,
    ) -> dict:  # fmt: skip
        """The JSON results (``docs/results.md``)."""
        totals, best, history = self.totals, self.best, self.history
        batches = max(totals.batches, 1)
        # With several processes each counted its own shards; every process adds them up alike.
        shard_rows = [int(v) for v in totals.shard_rows] or [0]
        rows, inputs = totals.rows, totals.inputs
        if parallel is not None and parallel.multi_process:
            summed = parallel.sum(np.array([rows, inputs, *shard_rows], dtype=np.int64))
            rows, inputs, shard_rows = int(summed[0]), int(summed[1]), [int(v) for v in summed[2:]]
        times = [h["time_s"] for h in history[1:]] or [h["time_s"] for h in history[:1]] or [0.0]
        uses_cache = loader.sampler.uses_cache
        budget, worst = loader.budget, loader.sampler.budget
        return {
            "status": status,
            "dataset": dataset.name,
            "sampler": config.sampler,
            "seed": config.seed,
            "config": config.to_json(),
            "num_nodes": dataset.num_nodes,
            "num_edges": dataset.graph.num_edges,
            "num_features": dataset.num_features,
            "num_classes": dataset.num_classes,
            "task": self.task.kind,
            "split": dataset.split,
            "val_accuracy": best["val"],
            "test_accuracy": best["test"],
            "metric": self.metric,
            **{
                f"{split}_{name}": best.get("scores", {}).get(f"{split}_{name}")
                for split in ("val", "test")
                for name in self.task.metrics
                if name != "accuracy"
            },
            "best_epoch": best["epoch"] + 1 if best["epoch"] >= 0 else None,
            "epochs": history,
            "epoch_time_s": float(np.median(times)),
            "input_nodes_per_batch": inputs / batches,
            "h2d_rows_per_batch": rows / batches,
            "devices": config.devices,
            "processes": jax.process_count(),
            "h2d_rows_per_batch_per_device": [v / batches for v in shard_rows],
            "h2d_bytes_per_batch": totals.bytes / batches,
            "cache_hit_rate": 1.0 - rows / max(inputs, 1) if uses_cache else 0.0,
            "cache_refresh_s": totals.refresh_s / max(totals.refreshes, 1),
            "cache_refreshes": totals.refreshes,
            "cache_nodes": totals.cached / max(totals.refreshes, 1),
            "cache_bytes_per_refresh": totals.cache_bytes / max(totals.refreshes, 1),
            "compilations": counter.count,
            "sampler_compilations": loader.sampler.compilations,
            "assemble_compilations": loader.feature_loader.compilations,
            "time_split_s": {
                k: v / max(loader.timed_batches, 1) for k, v in loader.watch.seconds.items()
            },
            "input_wait_fraction": None,
            "prefetch": config.prefetch,
            "batch_size": loader.batch_size,
            "budget": {
                "mode": config.budget,
                "calibrated": budget != worst,
                "input_slots": int(budget.max_src[0]),
                "worst_case_input_slots": int(worst.max_src[0]),
                "edge_slots": [int(v) for v in budget.max_edges],
                "worst_case_edge_slots": [int(v) for v in worst.max_edges],
                "growths": loader.growths,
            },
            "feature_norm": norm,
            # cache-first upper layers weight 1/k over a selection that prefers cached
            # neighbours: biased (gns_jax/theory/README.md measures by how much)
            "biased_upper_layers": bool(config.sampler == "gns" and config.cache_first),
            "evaluation": None if evaluator is None else eval_mode,
            "resumed_from_step": resumed_from,
            "peak_rss_gib": peak_rss_gib(),
            **io_meter.to_json(),
            "environment": environment(),
        }
