"""``python -m gns_jax``: the same as the ``gns-jax`` command."""

import sys

from gns_jax.cli import command

sys.exit(command())
