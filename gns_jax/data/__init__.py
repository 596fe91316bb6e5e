"""Datasets: the type, the readers of every supported format, synthetic graphs, on-disk folders.

Modules, in dependency order (no cycles): :mod:`~gns_jax.data.dataset` (the :class:`Dataset`
type, its validation and the shared splits), :mod:`~gns_jax.data.formats` (Planetoid,
gnn-benchmark, Platonov et al., MUSAE readers), :mod:`~gns_jax.data.synthetic` (seeded generator),
:mod:`~gns_jax.data.ondisk` (the memory-mapped folder of ``gns-jax save`` and OGB's layout),
:mod:`~gns_jax.data.saint` (the GraphSAINT and GraphSAGE folders of multi-label graphs), and
:mod:`~gns_jax.data.load` (names, specs and paths to a :class:`Dataset`).
"""

from gns_jax.data.dataset import Dataset, per_class_split
from gns_jax.data.formats import read_facebook, read_gnn_benchmark, read_planetoid, read_tolokers
from gns_jax.data.load import REGISTRY, default_data_dir, load_dataset
from gns_jax.data.ondisk import read_ogb, read_saved, save_dataset
from gns_jax.data.saint import read_graphsage, read_graphsaint
from gns_jax.data.synthetic import parse_synthetic, synthetic

__all__ = [
    "REGISTRY",
    "Dataset",
    "default_data_dir",
    "load_dataset",
    "parse_synthetic",
    "per_class_split",
    "read_facebook",
    "read_gnn_benchmark",
    "read_graphsage",
    "read_graphsaint",
    "read_ogb",
    "read_planetoid",
    "read_saved",
    "read_tolokers",
    "save_dataset",
    "synthetic",
]
