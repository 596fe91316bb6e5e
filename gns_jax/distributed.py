"""Several processes (one per host): ``jax.distributed.initialize`` from the command's
``--coordinator``, ``--num-processes`` and ``--process-id``. Host-side."""

from __future__ import annotations

import argparse

from gns_jax.errors import ConfigError

__all__ = ["start_processes"]


def start_processes(args: argparse.Namespace) -> None:
    """``jax.distributed.initialize`` when ``--coordinator`` is given (before any JAX work);
    on the CPU backend the processes talk through gloo."""
    given = [args.coordinator, args.num_processes, args.process_id]
    if all(v is None for v in given):
        return
    if any(v is None for v in given):
        raise ConfigError("coordinator", "give --coordinator, --num-processes and --process-id")
    if args.process_id >= args.num_processes:
        raise ConfigError(
            "process_id", f"must lie in [0, {args.num_processes}), got {args.process_id}"
        )
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        args.coordinator, num_processes=args.num_processes, process_id=args.process_id
    )
