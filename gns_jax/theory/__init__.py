"""Numerical checks of the GNS estimators and of the paper's convergence claim.

``python -m gns_jax.theory`` runs every module in the small setting (two worker processes,
``--jobs``, the convergence module's SGD runs split between them: the busiest worker takes about
90 s of CPU) and prints, per claim, what was measured, the criterion (fixed in the code before
the run) and the verdict: PASS or FAIL for a check of the implementation or of the
theory's own prediction, HOLDS or DOES NOT HOLD for a finding on one of the paper's claims.
``python -m gns_jax.theory --full`` runs the report setting and rewrites
``gns_jax/theory/README.md`` with its tables and plots. One module per claim:

* :mod:`gns_jax.theory.unbiased`: the HT input aggregate is unbiased, also where the cap binds; the
  other estimators' bias is measured.
* :mod:`gns_jax.theory.variance`: per-node variance against the closed form, its slope in the cache
  fraction, the probability of no cached neighbour, and the lower-variance estimators.
* :mod:`gns_jax.theory.gradients`: bias and variance of the mini-batch gradient, each against NS's.
* :mod:`gns_jax.theory.convergence`: the convergence rate over a sweep of horizons, and the smallest
  cache fraction at which GNS stays within NS's spread.

:mod:`gns_jax.theory.mutations` puts known defects into the library; the tests show every check
fails with them. Nothing here reimplements a sampler: every check drives the library's cache,
samplers and model.
"""

from gns_jax.theory.common import FULL, SMALL, TINY, Check, Setting

__all__ = ["FULL", "SMALL", "TINY", "Check", "Setting"]
