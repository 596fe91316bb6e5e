"""The ``gns-jax`` argument parser, generated from :class:`~gns_jax.config.TrainConfig`'s field
metadata (help, group, choices, parser, default): no option is copied by hand. Host-side.

Imports no JAX: ``gns-jax --help`` answers at once. Errors are one line with exit status 2.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

__all__ = ["add_option", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``gns-jax train: error: ... (--help lists the options)``,
    exit status 2, instead of the whole usage."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the options)\n")


def _parse(parse: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """An argparse type from a parse function raising ValueError (its message is kept)."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = name
    return convert


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"expected an integer, got '{text}'") from None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"expected a number, got '{text}'") from None


def _shown(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def add_option(parser, name: str, *, required: bool = False, **override: Any) -> None:
    """Adds the flag of :class:`~gns_jax.config.TrainConfig`'s field ``name`` to ``parser``,
    from the field's metadata: its help, choices, parser and default (shown in the help). The
    parsed namespace holds the option only when it was given (``argparse.SUPPRESS``), so a
    ``--config`` file's values and the defaults stay where they are."""
    import dataclasses
    import typing

    from gns_jax.config import TrainConfig, flag_of

    field = next(f for f in dataclasses.fields(TrainConfig) if f.name == name)
    meta, hint = field.metadata, typing.get_type_hints(TrainConfig)[name]
    kwargs: dict[str, Any] = {"dest": name, "help": meta["help"], "default": argparse.SUPPRESS}
    if not required and field.default is not None:  # a None default's help says what it means
        kwargs["help"] += f" (default: {_shown(field.default)})"
    if hint is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
    else:
        parse = meta.get("parse")
        if parse is None:  # a scalar (or None): int, float or str
            base = next(t for t in (int, float, str) if t == hint or t in typing.get_args(hint))
            parse = {int: _integer, float: _number, str: str}[base]
        kwargs["type"] = _parse(parse, meta.get("metavar") or parse.__name__)
        for key in ("choices", "metavar"):
            if meta.get(key):
                kwargs[key] = meta[key]
    kwargs.update(override)
    parser.add_argument(flag_of(name), required=required, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The command line. Imports no JAX: ``--help`` answers at once."""

    from gns_jax import __version__

    parser = _Parser(
        prog="gns-jax", description="Global Neighbor Sampling for GNN training, in JAX."
    )
    parser.add_argument("--version", action="version", version=f"gns-jax {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = commands.add_parser(
        "train",
        help="train a GraphSAGE and report accuracy, epoch time and data movement",
        description="Every option is a field of gns_jax.TrainConfig; a run's JSON results "
        "record them all, and --config RUN.json runs them again (options given here win).",
    )
    train.add_argument(
        "--config",
        default=None,
        metavar="RUN.json",
        help="start from the options of this run's JSON results (or of a JSON object of "
        "options); the flags given beside it change them",
    )
    _train_options(train)
    output = train.add_argument_group("output and processes")
    output.add_argument(
        "--out",
        default=None,
        help="write the JSON results here (after every epoch, then when complete)",
    )
    output.add_argument(
        "--coordinator",
        default=None,
        help="HOST:PORT of process 0, for several processes (one per host); with "
        "--num-processes and --process-id",
    )
    output.add_argument(
        "--num-processes", type=_parse(_integer, "int"), default=None, help="processes taking part"
    )
    output.add_argument(
        "--process-id", type=_parse(_integer, "int"), default=None, help="this process's index"
    )
    _common(output)

    predict = commands.add_parser(
        "predict", help="write every node's predicted class from a training run's checkpoint"
    )
    predict.add_argument("--checkpoint", required=True, help="a --checkpoint-dir of gns-jax train")
    add_option(predict, "dataset", required=True)
    add_option(predict, "data_dir")
    add_option(
        predict,
        "split_seed",
        help="the run's --split-seed (default: the one recorded in the checkpoint)",
    )
    predict.add_argument(
        "--proba",
        action="store_true",
        help="write float32 probabilities instead: [num_nodes, C] softmax for classes (binary: "
        "column 1 the positive class), [num_nodes, L] sigmoids for multi-label",
    )
    predict.add_argument(
        "--pairs",
        default=None,
        metavar="PAIRS.npy",
        help="a link prediction run (--task link): score these node pairs (an integer [M, 2] "
        ".npy) with the whole given graph for message passing; --out gets float32 [M], the "
        "probability that each pair is an edge",
    )
    predict.add_argument(
        "--out",
        required=True,
        help="a .npy file: int32 [num_nodes], the predicted class (multi-label: int8 "
        "[num_nodes, L], 1 where a label's probability exceeds 0.5; with --pairs: float32 [M])",
    )
    _common(predict)

    plan = commands.add_parser(
        "plan",
        help="pick the cache fraction for a training run (what --cache-fraction auto runs)",
        description="The planner (gns_jax.plan): samples a few of the run's batches and "
        "computes, for increasing cache fractions, the share of layer-1 nodes without a "
        "cached neighbour and the rows moved against NS's, without training; prints them and "
        "the smallest fraction that keeps up. Takes the options of gns-jax train "
        "(--cache-fraction is what it chooses).",
    )
    plan.add_argument(
        "--config", default=None, metavar="RUN.json", help="start from a run's options"
    )
    _train_options(plan)
    plan.add_argument("--out", default=None, help="write {'plan': ..., 'config': ...} here")
    _common(plan)

    save = commands.add_parser(
        "save",
        help="write a dataset (any --dataset, e.g. a synthetic graph) to a memory-mapped folder",
    )
    add_option(save, "dataset", required=True)
    add_option(save, "data_dir")
    add_option(save, "split_seed", help="seed of a random split (default: 0)")
    save.add_argument("--out", required=True, help="a new (or empty) folder")
    save.add_argument(
        "--feature-dtype",
        choices=("float32", "float16"),
        default="float32",
        help="on-disk feature type (float16 halves the file and the rows moved to the device; "
        "default: float32)",
    )
    save.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return parser


def _train_options(sub) -> None:
    """Every field of TrainConfig as a flag, in its group."""
    import dataclasses

    from gns_jax.config import GROUPS, TrainConfig

    groups = {title: sub.add_argument_group(title) for title in GROUPS}
    data_first = ("dataset", "data_dir", "split_seed")  # the data's options lead the help
    for field in sorted(dataclasses.fields(TrainConfig), key=lambda f: f.name not in data_first):
        add_option(groups[field.metadata["group"]], field.name)


def _common(sub) -> None:
    sub.add_argument("--quiet", action="store_true", help="no progress on stderr")
    sub.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="do not use JAX's persistent compilation cache (also GNS_JAX_COMPILE_CACHE=0)",
    )
