"""Accuracy of NS-trained GraphSAGE on a shipped dataset (minutes; run with ``-m slow``)."""

import numpy as np
import pytest

from gns_jax.data import load_dataset
from gns_jax.train import TrainConfig, fit


@pytest.mark.slow
def test_cora_ns_reaches_the_published_graphsage_accuracy():
    # Shchur et al. (2018) report 79.2 for GraphSAGE-mean on Cora; the foundation issue asks for
    # no more than 2 points below, as a mean over 3 seeds with the command's defaults.
    accs = [
        fit(load_dataset("cora"), TrainConfig(seed=seed), quiet=True).metrics["test_accuracy"]
        for seed in range(3)
    ]
    assert np.mean(accs) >= 0.772, accs
