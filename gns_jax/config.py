"""The options of a training run, and the only place they become objects. Host-side.

:class:`TrainConfig` holds every option (the ``config`` of the JSON results); the factories below
turn it into the sampler, the model, the optimiser and the loader that :func:`gns_jax.train.fit`
uses, so a script that wants one of them with the command's defaults calls the same function.
Fan-outs are listed from the output layer to the input layer, everywhere.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import numpy as np
import optax
from flax import nnx

from gns_jax.cache import DISTRIBUTIONS, cache_size
from gns_jax.data import Dataset
from gns_jax.errors import ConfigError
from gns_jax.features import normalize_rows
from gns_jax.instrument import TransferMeter
from gns_jax.loader import BUDGETS, Loader
from gns_jax.models import GraphSAGE
from gns_jax.parallel import DataParallel
from gns_jax.sampling.base import Sampler
from gns_jax.sampling.gns import WEIGHT_CLIP, WEIGHTS, GNSSampler
from gns_jax.sampling.ladies import LADIESSampler
from gns_jax.sampling.nodewise import NodeWiseSampler

__all__ = [
    "EVAL_MODES",
    "SAMPLERS",
    "TrainConfig",
    "feature_norm",
    "make_loader",
    "make_model",
    "make_optimizer",
    "make_sampler",
    "prepare_features",
]

SAMPLERS = ("gns", "ns", "ladies")
EVAL_MODES = ("auto", "exact", "sampled")
EVAL_FANOUT = 20  # per layer, for sampled evaluation unless eval_fanouts says otherwise


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Every option of a training run (the ``config`` of the JSON results).

    ``fanouts`` are listed from the output layer to the input layer, as on the command line
    (PyG's ``num_neighbors`` order); the model has ``len(fanouts)`` layers. With GNS the input
    layer's entry is replaced by ``input_fanout = (min, max)``, taken from the cache; LADIES
    samples ``ladies_nodes`` nodes in every layer instead.

    ``budget`` sets the static sizes of a batch: ``worst`` is the exact worst case (no batch can
    overflow it); ``calibrated`` sizes each layer from the real sizes of the first batches
    (sampled under the worst case) plus 20 % and a bucket, and a batch that would not fit is
    measured, the budget grown (one more compilation) and the batch sampled again, never
    truncated; ``auto`` calibrates, but keeps the worst case when calibration would not cut some
    layer's node or edge slots below 75 % of it.

    ``eval_mode``: ``exact`` is full-neighbourhood layer-wise inference over every node (models
    that offer it, :class:`~gns_jax.evaluate.ExactInference`); ``sampled`` runs the model on
    node-wise sampled blocks of the validation and test nodes with ``eval_fanouts`` (default 20
    per layer); ``auto`` is exact when the model offers it.

    ``checkpoint_dir``: write checkpoints there at the end of every epoch and every
    ``checkpoint_every`` batches (0: epoch ends only); ``resume`` continues from the latest valid
    one (:mod:`gns_jax.checkpoint`).

    ``devices``: data-parallel training over this many devices (:mod:`gns_jax.parallel`);
    ``batch_size`` is the global batch, one equal shard a device, so it must divide evenly.
    """

    sampler: str = "gns"
    epochs: int = 100
    batch_size: int = 1000
    fanouts: tuple[int, ...] = (15, 10, 5)
    hidden: int = 256
    lr: float = 0.003
    weight_decay: float = 5e-4
    dropout: float = 0.5
    feature_norm: str = "auto"
    seed: int = 0
    eval_every: int = 1
    eval_mode: str = "auto"
    eval_fanouts: tuple[int, ...] | None = None
    cache_fraction: float = 0.01
    cache_refresh: int = 1
    cache_dist: str = "degree"
    input_fanout: tuple[int, int] = (0, 10)
    cache_first: bool = False
    gns_weights: str = "hajek"  # the measured choice: docs/algorithm.md, experiments/README.md
    ladies_nodes: int = 512
    weight_clip: float = WEIGHT_CLIP
    prefetch: int = 2
    budget: str = "auto"
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    resume: bool = False
    devices: int = 1

    def validate(self) -> TrainConfig:
        """Raises ConfigError naming the option when a value is impossible."""
        if self.sampler not in SAMPLERS:
            raise ConfigError("sampler", f"unknown sampler '{self.sampler}' (known: {SAMPLERS})")
        for name, fanouts in (("fanouts", self.fanouts), ("eval_fanouts", self.eval_fanouts)):
            if fanouts is None and name == "eval_fanouts":
                continue
            if not fanouts or any(int(f) < 1 for f in fanouts):
                raise ConfigError(name, f"every fan-out must be a positive integer, got {fanouts}")
        if self.eval_fanouts is not None and len(self.eval_fanouts) != len(self.fanouts):
            raise ConfigError(
                "eval_fanouts",
                f"one per layer: {len(self.fanouts)} (as fanouts), got {len(self.eval_fanouts)}",
            )
        for name in (
            "epochs",
            "batch_size",
            "hidden",
            "eval_every",
            "cache_refresh",
            "ladies_nodes",
            "devices",
        ):
            if int(getattr(self, name)) < 1:
                raise ConfigError(name, f"must be a positive integer, got {getattr(self, name)}")
        for name in ("seed", "prefetch", "checkpoint_every"):
            if int(getattr(self, name)) < 0:
                raise ConfigError(name, f"must be >= 0, got {getattr(self, name)}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ConfigError("lr", f"must be a positive number, got {self.lr}")
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            raise ConfigError("weight_decay", f"must be >= 0, got {self.weight_decay}")
        if not 0 <= self.dropout < 1:
            raise ConfigError("dropout", f"must lie in [0, 1), got {self.dropout}")
        if self.feature_norm not in ("auto", "row", "none"):
            raise ConfigError("feature_norm", f"auto, row or none, got '{self.feature_norm}'")
        if self.eval_mode not in EVAL_MODES:
            raise ConfigError("eval_mode", f"one of {EVAL_MODES}, got '{self.eval_mode}'")
        cache_size(self.cache_fraction, 1)  # validates the fraction
        if self.cache_dist not in DISTRIBUTIONS:
            raise ConfigError(
                "cache_dist", f"unknown distribution '{self.cache_dist}' (known: {DISTRIBUTIONS})"
            )
        lo, hi = self.input_fanout
        if lo < 0 or hi < 1 or lo > hi:
            raise ConfigError(
                "input_fanout", f"need 0 <= min <= max and max >= 1, got min={lo}, max={hi}"
            )
        if self.budget not in BUDGETS:
            raise ConfigError("budget", f"one of {BUDGETS}, got '{self.budget}'")
        if not (self.weight_clip > 0 and math.isfinite(self.weight_clip)):
            raise ConfigError("weight_clip", f"must be a positive number, got {self.weight_clip}")
        if self.gns_weights not in WEIGHTS:
            raise ConfigError("gns_weights", f"unknown '{self.gns_weights}' (known: {WEIGHTS})")
        if self.batch_size % self.devices:
            raise ConfigError(
                "batch_size",
                f"{self.batch_size} seeds do not split evenly over {self.devices} devices",
            )
        if self.resume and not self.checkpoint_dir:
            raise ConfigError("resume", "needs a checkpoint_dir to resume from")
        return self

    def to_json(self) -> dict:
        """The options as JSON-ready values (tuples become lists)."""
        return dataclasses.asdict(self)


# Options that may differ between a checkpointed run and its resumption: they change no number.
RESUMABLE = ("epochs", "prefetch", "checkpoint_dir", "checkpoint_every", "resume")


def feature_norm(dataset: Dataset, config: TrainConfig) -> str:
    """The feature normalisation a run uses: ``row`` or ``none``.

    ``auto`` row-normalises sparse non-negative (bag-of-words) features, under 5 % non-zero, as
    PyG's ``NormalizeFeatures`` is used for Planetoid and Coauthor; it keeps dense features as
    stored, and memory-mapped ones too (normalising would load them whole).
    """
    mapped = isinstance(dataset.features, np.memmap)
    if config.feature_norm == "row" and mapped:
        raise ConfigError(
            "feature_norm",
            "row: the features are memory-mapped from disk and are used as stored; normalise "
            "them before `gns-jax save`, or use none",
        )
    if config.feature_norm != "auto":
        return config.feature_norm
    if mapped:
        return "none"
    x = dataset.features
    sparse = np.count_nonzero(x) < 0.05 * x.size
    return "row" if sparse and x.min() >= 0 else "none"


def prepare_features(dataset: Dataset, config: TrainConfig) -> np.ndarray:
    """The feature matrix a run reads: ``dataset.features``, row-normalised if configured."""
    if feature_norm(dataset, config) == "row":
        return normalize_rows(dataset.features)
    return dataset.features


def batch_size(dataset: Dataset, config: TrainConfig) -> int:
    """``config.batch_size``, capped at the number of training nodes (one batch may hold all)."""
    return min(config.batch_size, int(dataset.train_idx.shape[0]))


def make_sampler(dataset: Dataset, config: TrainConfig, size: int | None = None) -> Sampler:
    """The sampler of ``config.sampler``, at its worst-case budget, for one device's shard of a
    batch (the whole batch on one device)."""
    size = -(-batch_size(dataset, config) // config.devices) if size is None else size
    if config.sampler == "ns":
        return NodeWiseSampler(dataset.graph, config.fanouts, size)
    if config.sampler == "ladies":  # the same nodes in every layer, one layer per fan-out
        return LADIESSampler(dataset.graph, (config.ladies_nodes,) * len(config.fanouts), size)
    return GNSSampler(
        dataset.graph,
        config.fanouts,
        size,
        cache_size(config.cache_fraction, dataset.num_nodes),
        input_fanout=config.input_fanout,
        cache_first_upper=config.cache_first,
        weights=config.gns_weights,
        weight_clip=config.weight_clip,
    )


def make_optimizer(config: TrainConfig) -> optax.GradientTransformation:
    """Adam with L2 regularisation added to the gradient (PyTorch ``Adam(weight_decay=...)``)."""
    return optax.chain(optax.add_decayed_weights(config.weight_decay), optax.adam(config.lr))


def make_model(dataset: Dataset, config: TrainConfig, key: jax.Array) -> GraphSAGE:
    """The command's model: GraphSAGE ``(F, hidden, ..., classes)``, one layer per fan-out."""
    dims = (dataset.num_features, *([config.hidden] * (len(config.fanouts) - 1)))
    return GraphSAGE(
        (*dims, dataset.num_classes), dropout_rate=config.dropout, rngs=nnx.Rngs(params=key)
    )


def make_loader(
    dataset: Dataset,
    config: TrainConfig,
    sampler: Sampler,
    features: np.ndarray,
    meter: TransferMeter | None = None,
    log: Callable[[str], None] | None = None,
    parallel: DataParallel | None = None,
) -> Loader:
    """The training loader of ``config`` (shuffled training nodes; ``parallel`` for
    data-parallel batches over its mesh)."""
    return Loader(
        dataset,
        sampler,
        seed=config.seed,
        features=features,
        cache_dist=config.cache_dist,
        cache_refresh=config.cache_refresh,
        budget=config.budget,
        prefetch=config.prefetch,
        meter=meter,
        log=log,
        parallel=parallel,
    )


def eval_fanouts(config: TrainConfig) -> tuple[int, ...]:
    """The fan-outs of sampled evaluation (output layer first)."""
    return config.eval_fanouts or (EVAL_FANOUT,) * len(config.fanouts)
