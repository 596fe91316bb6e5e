"""The ``gns-jax`` command line (also ``python -m gns_jax``). Host-side.

* ``gns-jax train`` loads a dataset, trains a GraphSAGE with the chosen sampler and writes the
  JSON results (``docs/results.md``); with ``--checkpoint-dir`` it checkpoints and ``--resume``
  continues a killed run.
* ``gns-jax predict`` writes every node's predicted class from a run's checkpoint.
* ``gns-jax plan`` picks the cache fraction of a GNS run (:mod:`gns_jax.plan`; what
  ``--cache-fraction auto`` runs before training) and prints what its planner computed.
* ``gns-jax save`` writes any dataset (a synthetic graph, say) to a memory-mapped folder
  (:mod:`gns_jax.data.ondisk`) that ``--dataset FOLDER`` then loads in seconds.

Bad input (a missing or corrupt file, an impossible option) is reported as one line naming the
file or option, with exit status 2 and no traceback. ``--out`` is checked before any training and
written atomically (a temporary file renamed into place): after every epoch with
``"status": "running"``, at the end with ``"completed"``, so a killed run never leaves another
run's results looking like its own, and a long run keeps what it has measured.

JAX's persistent compilation cache is on for these commands (in ``$XDG_CACHE_HOME/gns-jax/jax``
or ``~/.cache/gns-jax/jax``): a second run of the same configuration loads its compiled programs
instead of compiling them again. ``--no-compile-cache`` or ``GNS_JAX_COMPILE_CACHE=0`` turns it
off; ``GNS_JAX_COMPILE_CACHE=DIR`` puts it elsewhere.

The command is split into modules of one job each; this one keeps :func:`main` and the
``gns-jax`` program (:func:`command`) and re-exports the others' names:

* :mod:`gns_jax.arguments`: the parser, generated from TrainConfig's field metadata
  (:func:`build_parser`, :func:`add_option`);
* :mod:`gns_jax.commands`: the subcommands (:func:`run_train`, :func:`run_plan`,
  :func:`run_predict`, :func:`run_save`);
* :mod:`gns_jax.compile_cache`: JAX's persistent compilation cache (:func:`enable_compile_cache`);
* :mod:`gns_jax.atomic_write`: ``--out`` checked first and written atomically
  (:func:`check_output`, :func:`write_atomically`);
* :mod:`gns_jax.distributed`: several processes, ``jax.distributed.initialize``
  (:func:`start_processes`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from gns_jax.arguments import add_option, build_parser
from gns_jax.atomic_write import check_output, write_atomically
from gns_jax.commands import _config as _config
from gns_jax.commands import run_plan, run_predict, run_save, run_train
from gns_jax.compile_cache import compile_cache_dir, enable_compile_cache
from gns_jax.distributed import start_processes
from gns_jax.errors import ConfigError, GnsJaxError
from gns_jax.preempt import Interrupted

__all__ = [
    "add_option",
    "build_parser",
    "check_output",
    "command",
    "compile_cache_dir",
    "enable_compile_cache",
    "main",
    "run_plan",
    "run_predict",
    "run_save",
    "run_train",
    "start_processes",
    "write_atomically",
]


def command() -> int:
    """The ``gns-jax`` program: :func:`main` on ``sys.argv``. Call :func:`main` from Python.

    The program keeps large freed blocks for reuse (:func:`gns_jax.hostmem.keep_freed_memory`:
    fewer page faults a batch, in this process, nothing restarted); :func:`main` leaves the
    allocator of the calling process as it is."""
    from gns_jax.hostmem import keep_freed_memory

    keep_freed_memory()
    return main()


def _message(error: GnsJaxError) -> str:
    if isinstance(error, ConfigError) and error.param:
        from gns_jax.config import flag_of

        return f"{flag_of(error.param)}: {error.message}"
    return str(error)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line ``argv`` (``sys.argv[1:]`` when None) in this process."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "predict":
            enable_compile_cache(args.no_compile_cache)
        if args.command == "train":
            run_train(args)
        elif args.command == "predict":
            run_predict(args)
        elif args.command == "save":
            run_save(args)
        elif args.command == "plan":
            run_plan(args)
    except Interrupted as e:  # stopped cleanly on SIGTERM or SIGINT (gns_jax/preempt.py)
        print(f"gns-jax: {getattr(e, 'message', e)}", file=sys.stderr)
        return e.exit_status
    except GnsJaxError as e:
        print(f"gns-jax: error: {_message(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gns-jax: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(command())
