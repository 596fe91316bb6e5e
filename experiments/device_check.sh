#!/usr/bin/env bash
# The accelerator check of gns-jax (experiments/device_check.py): on the products-scale synthetic
# graph (2.4M nodes, 116.6M directed edges, 100 float32 features, 47 classes), NS and GNS with a
# 1 % cache, two epochs each, the command's defaults; epoch time, host->device bytes and time, the
# time split, the input-wait fraction and the device memory peak, in one JSON. Sized to run in
# under 8 minutes on one GPU (the graph's build is most of it; --folder DIR keeps it for a rerun).
#
#   experiments/device_check.sh --out device_check.json [--folder DIR] [--fraction 0.01]
#   GNS_JAX_DEVICE_CHECK_TINY=1 experiments/device_check.sh --out smoke.json   # CPU smoke run
#
# It installs nothing and reaches no network. It needs a Python (3.11+; $PYTHON, else
# .venv/bin/python, else python3) that imports gns-jax's dependencies: jax with its GPU plugin
# (on an NVIDIA GPU, `pip install "jax[cuda12]"` or `jax[cuda13]` beside `make install`; the
# project declares no CUDA extra), flax, optax, orbax-checkpoint, jraph, numpy, scipy and rich.
# gns_jax itself is imported from this checkout (PYTHONPATH), installed or not. A machine without
# a network that has JAX for its GPU but lacks jraph (a pure-Python wheel) gets it carried as a
# wheel and installed offline before this runs (pip install --no-index --target DIR; PYTHONPATH).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
if ! "$PYTHON" -c 'import jax, flax, optax, orbax.checkpoint, jraph, numpy, scipy, rich, gns_jax' \
    2>/dev/null; then
    echo "device_check.sh: $PYTHON cannot import gns-jax's dependencies (jax, flax, optax," \
        "orbax-checkpoint, jraph, numpy, scipy, rich); see this script's header" >&2
    "$PYTHON" -c 'import jax, flax, optax, orbax.checkpoint, jraph, numpy, scipy, rich, gns_jax' || true
    exit 2
fi
"$PYTHON" -c 'import jax; d = jax.devices()[0]; print(f"device_check.sh: JAX {jax.__version__} on {d.platform} ({d.device_kind})")' >&2
exec "$PYTHON" -m experiments.device_check "$@"
