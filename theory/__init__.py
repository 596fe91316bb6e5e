"""Numerical checks of the GNS estimator and of its convergence claim (GNS.md section 2).

``python -m theory`` runs every check in the small setting (minutes on a 2-core CPU) and prints,
per claim, what was measured, the criterion (fixed in the code before the run) and PASS or FAIL;
``python -m theory --full`` runs the report setting and rewrites ``theory/README.md`` with its
tables and plots. One module per claim:

* :mod:`theory.unbiased`: the input-layer aggregate is unbiased; the biased variants are caught.
* :mod:`theory.variance`: per-node variance against the closed form, its slope in the cache
  fraction, and the probability of no cached neighbour.
* :mod:`theory.gradients`: relative bias and variance of the mini-batch gradient, GNS and NS.
* :mod:`theory.convergence`: the non-convex SGD bound with measured ``L``, ``sigma^2`` and ``b``,
  and the smallest cache fraction at which GNS is within a factor 2 of NS.

Nothing here reimplements a sampler: every check drives the library's cache, samplers and model.
"""

from theory.common import FULL, SMALL, Check, Setting

__all__ = ["FULL", "SMALL", "Check", "Setting"]
