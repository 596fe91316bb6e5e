"""The options of a training run, in one place. Host-side; imports nothing beyond the standard
library, so that ``gns-jax --help`` starts at once.

:class:`TrainConfig` holds every option of ``gns-jax train``: each field carries its default and,
as field metadata, its help text, its command-line flag and its group. The command line is
generated from these fields (:func:`gns_jax.arguments.build_parser`; no option is copied by
hand), :meth:`TrainConfig.from_json` reads the ``config`` of a run's JSON results back
(``gns-jax train --config run.json`` reproduces that run), and :meth:`TrainConfig.validate` is
the one place where the rules on the options live: an impossible value raises one
:class:`~gns_jax.errors.ConfigError` naming the option.

The allowed values of the options (samplers, estimators, budgets, cache distributions) are
defined here; the modules that use them import them from here. The factories that turn a config
into objects (sampler, model, optimiser, loader) are in :mod:`gns_jax.factories`
(``gns_jax.make_sampler`` and the other names of ``gns_jax.__all__`` are unchanged).

Fan-outs are listed from the output layer to the input layer, everywhere.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gns_jax.errors import ConfigError

__all__ = [
    "BUDGETS",
    "DECODERS",
    "DISTRIBUTIONS",
    "EVAL_FANOUT",
    "EVAL_MODES",
    "METRIC_CHOICES",
    "NEGATIVES",
    "PARALLEL",
    "FEATURE_NORMS",
    "RESUMABLE",
    "SAMPLERS",
    "WEIGHTS",
    "WEIGHT_CLIP",
    "TrainConfig",
    "check_estimator",
    "flag_of",
    "parse_devices",
    "parse_fraction",
    "parse_ints",
    "parse_min_max",
]

SAMPLERS = ("gns", "ns", "ladies")
EVAL_MODES = ("auto", "exact", "sampled")
METRIC_CHOICES = (  # gns_jax.metrics; the last two for link prediction
    "auto", "accuracy", "f1_micro", "f1_macro", "roc_auc", "average_precision", "mrr",
)  # fmt: skip
TASK_CHOICES = ("auto", "multiclass", "binary", "multilabel", "link")  # gns_jax.tasks
NEGATIVES = ("uniform", "degree", "in-batch")  # link prediction's negatives (gns_jax.linkbatch)
DECODERS = ("dot", "mlp")  # link prediction's decoders (gns_jax.models.LinkPredictor)
EDGE_SPLIT = "0.85,0.05,0.10"  # link prediction's default random edge split
WEIGHT_DECAY = 5e-4  # the default L2 regularisation of node tasks (link prediction: 0)
PARALLEL = ("data", "pipeline")  # gns_jax.parallel, gns_jax.pipeline
EVAL_FANOUT = 20  # per layer, for sampled evaluation unless eval_fanouts says otherwise
FEATURE_NORMS = ("auto", "row", "none")
BUDGETS = ("auto", "calibrated", "worst")
DISTRIBUTIONS = ("degree", "uniform", "random-walk", "min-variance")
# The input-layer estimators of GNS (gns_jax.sampling.gns; docs/algorithm.md derives them).
WEIGHTS = (
    "ht",
    "hajek",
    "hajek-scaled",
    "hajek-fallback",
    "clipped",
    "exact",
    "minimum",
    "none",
    "heuristic",
)
WEIGHT_CLIP = 10.0  # default bound of the clipped weights' inverse probability
MAX_SEED = 2**63 - 1  # jax.random.key takes a signed 64-bit seed
# Estimators whose weights are defined only over cached neighbours: no uniform top-up.
CACHE_ONLY_WEIGHTS = ("ht", "hajek", "hajek-scaled", "clipped", "minimum")

DATASET_HELP = (
    "a registered name (cora, citeseer, amazon_photo, amazon_computers, coauthor_cs, "
    "facebook_pagepage, tolokers), synthetic:nodes=N,degree=D,features=F,classes=C"
    "[,seed=S,homophily=H,signal=A,train=T,val=V,test=U], or a path to a dataset file or folder"
)

# Command-line groups, in the order ``--help`` shows them.
GROUPS = (
    "data",
    "training",
    "GNS (--sampler gns)",
    "LADIES (--sampler ladies)",
    "evaluation",
    "input side",
    "checkpoints",
    "several devices (--parallel data: --batch-size is the global batch)",
    "link prediction (--task link)",
)


def parse_ints(text: str) -> tuple[int, ...]:
    """``"15,10,5"`` -> ``(15, 10, 5)``; the values are checked by :meth:`TrainConfig.validate`."""
    try:
        return tuple(int(v) for v in str(text).split(","))
    except ValueError:
        raise ValueError(
            f"expected comma-separated integers such as 15,10,5, got '{text}'"
        ) from None


def parse_fraction(text: str) -> float | str:
    """``"0.05"`` -> ``0.05``; ``"auto"`` stays ``"auto"`` (the planner's choice)."""
    if str(text) == "auto":
        return "auto"
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"expected a number in (0, 1] or auto, got '{text}'") from None


def parse_min_max(text: str) -> tuple[int, int]:
    """``"0,10"`` -> ``(0, 10)``."""
    values = parse_ints(text)
    if len(values) != 2:
        raise ValueError(f"expected MIN,MAX such as 0,10, got '{text}'")
    return values


def parse_devices(text: str) -> int | str:
    """A device count, or ``"all"`` (resolved against the devices present by the command)."""
    if str(text) == "all":
        return "all"
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"a positive integer or 'all', got '{text}'") from None


def _option(default: Any, help: str, group: str, **cli: Any) -> Any:
    """A field with its help text and command-line details (``flag``, ``parse``, ``metavar``)."""
    assert group in GROUPS, group
    return dataclasses.field(default=default, metadata={"help": help, "group": group, **cli})


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Every option of a training run (the ``config`` of the JSON results, ``docs/results.md``).

    ``TrainConfig()`` is the command's default run; each field's help (``gns-jax train --help``)
    says what it does. ``fanouts`` are listed from the output layer to the input layer, as on the
    command line (PyG's ``num_neighbors`` order); the model has ``len(fanouts)`` layers. With GNS
    the input layer's entry is replaced by ``input_fanout = (min, max)``, taken from the cache;
    LADIES samples ``ladies_nodes`` nodes in every layer instead.

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

    ``devices``: training over this many devices. ``parallel="data"`` (:mod:`gns_jax.parallel`):
    ``batch_size`` is the global batch, one equal shard a device, so it must divide evenly.
    ``parallel="pipeline"`` (:mod:`gns_jax.pipeline`): the layers split into one stage a device
    (at most one device a layer), every stage trained by its local loss through a local head of
    ``local_head`` hidden units (0: linear), ``stage_queue`` batches between two stages.

    ``dataset``, ``data_dir`` and ``split_seed`` name the data a run read (the command fills
    them; :func:`gns_jax.train.fit` takes the loaded dataset itself and only records them).
    """

    sampler: str = _option("gns", "the sampler", "training", choices=SAMPLERS)
    epochs: int = _option(100, "training epochs", "training")
    batch_size: int = _option(1000, "seed nodes per batch", "training")
    fanouts: tuple[int, ...] = _option(
        (15, 10, 5),
        "neighbours per node, from the output layer to the input layer; one layer each",
        "training",
        parse=parse_ints,
        metavar="K,K,...",
    )
    hidden: int = _option(256, "hidden layer width", "training")
    lr: float = _option(0.003, "Adam learning rate", "training")
    weight_decay: float | None = _option(
        None,
        "L2 regularisation added to the gradients (unset: 5e-4, and 0 for --task link, where it "
        "holds the embeddings' inner products down)",
        "training",
    )
    dropout: float = _option(0.5, "dropout rate", "training")
    feature_norm: str = _option(
        "auto",
        "row: divide each feature row by its L1 norm; auto: row for sparse non-negative "
        "(bag-of-words) features, under 5%% non-zero; none: the features as stored",
        "data",
        choices=FEATURE_NORMS,
    )
    seed: int = _option(0, "seed of every random stream", "training")
    eval_every: int = _option(1, "evaluate every N epochs (and after the last)", "evaluation")
    eval_mode: str = _option(
        "auto",
        "exact: full-neighbourhood inference over all nodes; sampled: the model on node-wise "
        "sampled blocks of the validation and test nodes (--eval-fanouts); auto: exact when the "
        "model offers it",
        "evaluation",
        choices=EVAL_MODES,
        flag="--eval",
    )
    eval_fanouts: tuple[int, ...] | None = _option(
        None,
        f"fan-outs of sampled evaluation, output layer first (unset: {EVAL_FANOUT} per layer)",
        "evaluation",
        parse=parse_ints,
        metavar="K,K,...",
    )
    metric: str = _option(
        "auto",
        "the metric that picks the best epoch (every one is reported): accuracy, f1_micro, "
        "f1_macro or roc_auc (one class against the rest above two classes, the mean over "
        "labels for multi-label); auto: roc_auc for a binary task, f1_micro for a multi-label "
        "one, accuracy otherwise",
        "evaluation",
        choices=METRIC_CHOICES,
    )
    task: str = _option(
        "auto",
        "multiclass (softmax cross-entropy), binary (the same, scored by ROC-AUC), multilabel "
        "(a sigmoid cross-entropy a label) or link (link prediction: edges against negatives, "
        "--batch-size edges a batch); auto: detected from the labels (a 0/1 label matrix is "
        "multi-label, two classes binary)",
        "training",
        choices=TASK_CHOICES,
    )
    cache_fraction: float | str = _option(
        0.01,
        "the cache draws m = ceil(F * num_nodes) nodes, with replacement, deduplicated; auto: "
        "the planner picks, from the graph alone, the smallest fraction that leaves few "
        "layer-1 nodes without a cached neighbour (gns-jax plan; the JSON's plan and "
        "cache_fraction)",
        "GNS (--sampler gns)",
        parse=parse_fraction,
        metavar="F|auto",
    )
    cache_refresh: int = _option(1, "redraw the cache every R epochs", "GNS (--sampler gns)")
    cache_dist: str = _option(
        "degree",
        "the distribution the cache is drawn from",
        "GNS (--sampler gns)",
        choices=DISTRIBUTIONS,
    )
    input_fanout: tuple[int, int] = _option(
        (0, 10),
        "MIN,MAX neighbours of the input layer, taken from the cache first",
        "GNS (--sampler gns)",
        parse=parse_min_max,
        metavar="MIN,MAX",
    )
    cache_first: bool = _option(
        False,
        "upper layers take cached neighbours first and fill up uniformly from the rest; their "
        "1/k weights are then BIASED towards cached neighbours (the JSON says "
        "biased_upper_layers)",
        "GNS (--sampler gns)",
    )
    gns_weights: str = _option(
        "hajek",
        "the input-layer estimator: ht (unbiased Horvitz-Thompson), hajek (HT self-normalised), "
        "hajek-scaled (hajek rescaled by the sampled share of the degree), hajek-fallback "
        "(hajek; a node with no cached neighbour takes the --input-fanout minimum of uniform "
        "neighbours instead), clipped (HT with 1/(pi q) clipped at --weight-clip), exact (the "
        "exact neighbour mean, a reference), minimum (the official code's biased q_v), none "
        "(plain mean), heuristic (the official scripts' weights)",
        "GNS (--sampler gns)",
        choices=WEIGHTS,
    )
    weight_clip: float = _option(
        WEIGHT_CLIP,
        "clipped weights: a sampled cached neighbour stands for at most this many",
        "GNS (--sampler gns)",
    )
    ladies_nodes: int = _option(512, "nodes sampled in every layer", "LADIES (--sampler ladies)")
    prefetch: int = _option(
        2,
        "batches the input thread prepares ahead while the device computes (0: no thread)",
        "input side",
    )
    budget: str = _option(
        "auto",
        "static batch sizes: worst, the exact worst case; calibrated on the first batches "
        "(overflows grow it and resample); auto: calibrated when it saves over 25%%",
        "input side",
        choices=BUDGETS,
    )
    checkpoint_dir: str | None = _option(
        None,
        "write checkpoints here (at every epoch's end and every --checkpoint-every batches)",
        "checkpoints",
        metavar="DIR",
    )
    checkpoint_every: int = _option(
        0, "also checkpoint every N batches (0: at epoch ends only)", "checkpoints"
    )
    resume: bool = _option(
        False,
        "continue from the latest valid checkpoint in --checkpoint-dir (same options)",
        "checkpoints",
    )
    devices: int = _option(
        1,
        "train on N devices, or 'all' (on a CPU, "
        "XLA_FLAGS=--xla_force_host_platform_device_count=N makes N devices)",
        "several devices (--parallel data: --batch-size is the global batch)",
        parse=parse_devices,
        metavar="N",
    )
    parallel: str = _option(
        "data",
        "data: every device trains a replica on its shard of the batch; pipeline: the "
        "model's layers split into one stage a device, each trained by its own local head "
        "and loss (PPLL), batches streamed through the stages",
        "several devices (--parallel data: --batch-size is the global batch)",
        choices=PARALLEL,
    )
    local_head: int = _option(
        0,
        "pipeline: hidden width of every stage's local head but the last (0: a linear "
        "classifier on the stage's output)",
        "several devices (--parallel data: --batch-size is the global batch)",
    )
    stage_queue: int = _option(
        2,
        "pipeline: batches a queue between two stages holds",
        "several devices (--parallel data: --batch-size is the global batch)",
    )
    dataset: str | None = _option(
        None,
        DATASET_HELP + " (gns-jax train: required unless --config names it)",
        "data",
        metavar="NAME|PATH",
    )
    data_dir: str | None = _option(
        None,
        "folder of the registered datasets (unset: $GNS_JAX_DATA, else the shipped copies)",
        "data",
        metavar="DIR",
    )
    split_seed: int | None = _option(
        None,
        "seed of the random 20/30-per-class split of datasets without a stored split, and of "
        "link prediction's random edge split (unset: --seed)",
        "data",
    )
    edge_split: str = _option(
        EDGE_SPLIT,
        "train,val,test fractions of a seeded random split of the graph's edges, or an .npz "
        "with train_pos, val_pos, val_neg, test_pos and test_neg ([M, 2] node pairs); "
        "validation and test edges leave the training graph",
        "link prediction (--task link)",
        metavar="F,F,F|FILE",
    )
    neg_ratio: int = _option(
        1, "negatives drawn per positive edge in training", "link prediction (--task link)"
    )
    negatives: str = _option(
        "uniform",
        "how training negatives (u, v') are drawn: uniform v', v' by degree, or in-batch (the "
        "other positives' v)",
        "link prediction (--task link)",
        choices=NEGATIVES,
    )
    decoder: str = _option(
        "dot",
        "scores a node pair from its embeddings: dot (inner product) or mlp (a two-layer "
        "perceptron on their element-wise product)",
        "link prediction (--task link)",
        choices=DECODERS,
    )
    hits_k: int = _option(
        50, "K of Hits@K (the JSON's test_hits@K)", "link prediction (--task link)"
    )
    rank_negatives: int = _option(
        100,
        "fixed negatives per validation and test edge (seeded, the same for every model) that "
        "Hits@K and MRR rank it against",
        "link prediction (--task link)",
    )

    # -- the rules ----------------------------------------------------------------------------

    def validate(self) -> TrainConfig:
        """Returns ``self``, or raises ConfigError naming the first impossible option."""
        for f in dataclasses.fields(self):
            _check_type(f.name, getattr(self, f.name), _hints()[f.name])
        if self.sampler not in SAMPLERS:
            raise ConfigError("sampler", f"unknown sampler '{self.sampler}' (known: {SAMPLERS})")
        for name in ("fanouts", "eval_fanouts"):
            fanouts = getattr(self, name)
            if fanouts is not None and (not fanouts or min(fanouts) < 1):
                raise ConfigError(name, f"every fan-out must be a positive integer, got {fanouts}")
        if self.eval_fanouts is not None and len(self.eval_fanouts) != len(self.fanouts):
            raise ConfigError(
                "eval_fanouts",
                f"one per layer: {len(self.fanouts)} (as fanouts), got {len(self.eval_fanouts)}",
            )
        positive = ("epochs", "batch_size", "hidden", "eval_every", "cache_refresh", "neg_ratio")
        positive += ("hits_k", "rank_negatives")
        for name in (*positive, "ladies_nodes", "devices", "stage_queue"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be a positive integer, got {getattr(self, name)}")
        for name in ("seed", "split_seed", "prefetch", "checkpoint_every", "local_head"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(name, f"must be >= 0, got {value}")
        for name in ("seed", "split_seed"):
            value = getattr(self, name)
            if value is not None and value > MAX_SEED:
                raise ConfigError(name, f"must be at most 2**63 - 1, got {value}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ConfigError("lr", f"must be a positive number, got {self.lr}")
        if self.weight_decay is not None and not (
            self.weight_decay >= 0 and math.isfinite(self.weight_decay)
        ):
            raise ConfigError("weight_decay", f"must be >= 0, got {self.weight_decay}")
        if not 0 <= self.dropout < 1:
            raise ConfigError("dropout", f"must lie in [0, 1), got {self.dropout}")
        _check_choice("feature_norm", self.feature_norm, FEATURE_NORMS)
        _check_choice("eval_mode", self.eval_mode, EVAL_MODES)
        _check_choice("metric", self.metric, METRIC_CHOICES)
        _check_choice("task", self.task, TASK_CHOICES)
        _check_choice("negatives", self.negatives, NEGATIVES)
        _check_choice("decoder", self.decoder, DECODERS)
        if self.task == "link":
            if self.parallel == "pipeline":
                raise ConfigError("parallel", "link prediction trains with --parallel data")
            if self.eval_mode == "sampled":
                raise ConfigError("eval_mode", "link prediction evaluates exactly (auto, exact)")
            if self.metric in ("f1_micro", "f1_macro"):
                raise ConfigError("metric", "link prediction: accuracy, roc_auc, "
                                  "average_precision or mrr")  # fmt: skip
        elif self.metric in ("average_precision", "mrr"):
            raise ConfigError("metric", f"{self.metric} is a metric of --task link")
        if self.cache_fraction == "auto":
            if self.sampler != "gns":
                raise ConfigError("cache_fraction", "auto is for --sampler gns")
        else:
            check_cache_fraction(self.cache_fraction)
        _check_choice("cache_dist", self.cache_dist, DISTRIBUTIONS)
        _check_choice("budget", self.budget, BUDGETS)
        if not (self.weight_clip > 0 and math.isfinite(self.weight_clip)):
            raise ConfigError("weight_clip", f"must be a positive number, got {self.weight_clip}")
        check_estimator(self.gns_weights, self.input_fanout, ("gns_weights", "input_fanout"))
        _check_choice("parallel", self.parallel, PARALLEL)
        if self.parallel == "pipeline" and self.devices > len(self.fanouts):
            raise ConfigError(
                "devices",
                f"the pipeline puts at least one layer on each device: {len(self.fanouts)} "
                f"layer(s) (fanouts) cannot fill {self.devices} devices",
            )
        if self.data_shards > 1 and self.batch_size % self.devices:
            raise ConfigError(
                "batch_size",
                f"{self.batch_size} seeds do not split evenly over {self.devices} devices",
            )
        if self.resume and not self.checkpoint_dir:
            raise ConfigError("resume", "needs a checkpoint_dir to resume from")
        return self

    @property
    def data_shards(self) -> int:
        """Shards of a batch: one a device for data parallelism, one for the pipeline (every
        stage sees the whole batch)."""
        return self.devices if self.parallel == "data" else 1

    # -- JSON ---------------------------------------------------------------------------------

    def to_json(self) -> dict:
        """The options as JSON-ready values (tuples become lists)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def from_json(cls, source: str | Path | Mapping[str, Any]) -> TrainConfig:
        """The config of a run: a run's JSON results file (its ``config``), a file holding the
        options alone, or such a mapping. Options it does not name keep their defaults; an
        unknown option, or a value of the wrong type, raises ConfigError naming it."""
        where = "config"
        if isinstance(source, Mapping):
            data = source
        else:
            where = str(source)
            try:
                data = json.loads(Path(source).read_text())
            except OSError as e:
                raise ConfigError("config", f"{source}: cannot read ({e.strerror or e})") from None
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise ConfigError("config", f"{source}: not a JSON file ({e})") from None
        if isinstance(data, Mapping) and isinstance(data.get("config"), Mapping):
            data = data["config"]  # a run's results: its resolved options
        if not isinstance(data, Mapping):
            raise ConfigError("config", f"{where}: expected a JSON object of options")
        hints = _hints()
        unknown = sorted(set(data) - set(hints))
        if unknown:
            raise ConfigError(
                "config", f"{where}: unknown option(s) {', '.join(unknown)} (not a gns-jax run?)"
            )
        values = {}
        for name, value in data.items():
            if isinstance(value, list):
                value = tuple(value)
            try:
                _check_type(name, value, hints[name])
            except ConfigError as e:
                raise ConfigError("config", f"{where}: {e}") from None
            values[name] = value
        return cls(**values)

    def resolved(self) -> TrainConfig:
        """The options with their task-dependent defaults filled in: ``weight_decay`` unset is
        5e-4, and 0 for link prediction (what a run records)."""
        if self.weight_decay is not None:
            return self
        return self.replace(weight_decay=0.0 if self.task == "link" else WEIGHT_DECAY)

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with ``changes`` (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)


# Options that may differ between a checkpointed run and its resumption: they change no number.
RESUMABLE = (
    "epochs",
    "prefetch",
    "checkpoint_dir",
    "checkpoint_every",
    "resume",
    "dataset",
    "data_dir",
)


# Library parameters named otherwise than the option they come from.
_OPTION_OF = {"weights": "gns_weights", "cache_first_upper": "cache_first"}


def flag_of(name: str) -> str:
    """The command-line flag of an option (``eval_mode`` -> ``--eval``), or of the library
    parameter that an option sets (``weights`` -> ``--gns-weights``)."""
    name = _OPTION_OF.get(name, name)
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    if name in fields and fields[name].metadata.get("flag"):
        return fields[name].metadata["flag"]
    return "--" + name.replace("_", "-")


def check_cache_fraction(fraction: float) -> None:
    if isinstance(fraction, str):
        raise ConfigError(
            "cache_fraction",
            f"expected a number in (0, 1], got '{fraction}' (auto is resolved by gns_jax.fit "
            "and gns_jax.plan.plan_cache_fraction, before any cache is drawn)",
        )
    if not (0 < fraction <= 1):  # NaN fails too
        raise ConfigError("cache_fraction", f"must lie in (0, 1], got {fraction}")


def check_estimator(
    weights: str,
    input_fanout: tuple[int, int],
    names: tuple[str, str] = ("weights", "input_fanout"),
) -> tuple[int, int]:
    """The rule tying GNS's input-layer estimator to its fan-out ``(min, max)``; returns it.

    The estimators defined over cached neighbours alone take no uniform top-up (min 0);
    ``hajek-fallback`` needs one (min >= 1: what a node with no cached neighbour takes).
    ``names``: the two options' names in the caller (the library's or the config's).
    """
    weights_name, fanout_name = names
    _check_choice(weights_name, weights, WEIGHTS)
    lo, hi = (int(v) for v in input_fanout)
    if lo < 0 or hi < 1 or lo > hi:
        raise ConfigError(fanout_name, f"need 0 <= min <= max and max >= 1, got min={lo}, max={hi}")
    if weights in CACHE_ONLY_WEIGHTS and lo > 0:
        raise ConfigError(
            fanout_name,
            f"{weights} weights need an input-layer minimum of 0 (top-ups from non-cached "
            "neighbours have no inclusion probability)",
        )
    if weights == "hajek-fallback" and lo == 0:
        raise ConfigError(
            fanout_name,
            "hajek-fallback weights need an input-layer minimum of at least 1: the number of "
            "uniform neighbours a node with no cached neighbour takes (e.g. 10,10)",
        )
    return lo, hi


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(name, f"unknown '{value}' (known: {', '.join(choices)})")


@functools.cache
def _hints() -> dict[str, Any]:
    """The fields' types (the annotations are strings until resolved)."""
    return typing.get_type_hints(TrainConfig)


def _check_type(name: str, value: Any, hint: Any) -> None:
    """Raises ConfigError unless ``value`` has the field's type (bool is no int; an int is a
    float; tuples hold ints)."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    for option in options:
        if _is(value, option):
            return
    expected = " or ".join(_describe(o) for o in options)
    raise ConfigError(name, f"expected {expected}, got {value!r}")


def _is(value: Any, hint: Any) -> bool:
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_is(v, args[0]) for v in value)
        return len(value) == len(args) and all(_is(v, a) for v, a in zip(value, args))
    raise TypeError(f"no check for {hint}")  # a new field type: teach _is about it


def _describe(hint: Any) -> str:
    if hint is type(None):
        return "null"
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        return "a list of integers" if args[1:] == (Ellipsis,) else f"{len(args)} integers"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}[hint]
