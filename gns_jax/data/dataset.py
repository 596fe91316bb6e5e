"""The dataset type, its validation, and the splits every reader shares. Host-side NumPy.

A :class:`Dataset` is a graph, its node features, labels and a train/validation/test split, in
host memory (the features may be a read-only memory map, :mod:`gns_jax.data.ondisk`). Readers
build one through :func:`finish`, which validates it, so a malformed file never reaches training.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from gns_jax.errors import DatasetError
from gns_jax.graph import CSRGraph

__all__ = ["SHCHUR_SPLIT", "Dataset", "finish", "per_class_split", "require", "split_rng"]


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A node-classification dataset in host memory.

    Attributes:
      name: registered name, path or synthetic spec it was loaded from.
      graph: undirected graph (both directions stored), no self-loops, no duplicate edges.
      features: float32 ``[num_nodes, num_features]``, finite; may be a read-only ``np.memmap``
        (float32 or float16) of a saved dataset directory (:mod:`gns_jax.data.ondisk`).
      labels: int32 ``[num_nodes]``; class ids in ``[0, num_classes)``, -1 for unlabelled nodes
        (which lie in no split).
      num_classes: number of classes.
      train_idx, val_idx, test_idx: int32 node ids, disjoint, each non-empty.
      split: how the split was made (``"planetoid"``, ``"stored:0"``, ``"per-class 20/30 ..."``).
    """

    name: str
    graph: CSRGraph
    features: np.ndarray
    labels: np.ndarray
    num_classes: int
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    split: str

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    @property
    def num_features(self) -> int:
        return int(self.features.shape[1])

    def validate(self) -> Dataset:
        """Checks shapes, finite features, label range and splits; raises DatasetError."""
        n, where = self.graph.num_nodes, self.name
        self.graph.validate(where)
        if self.features.ndim != 2 or self.features.shape[0] != n:
            raise DatasetError(
                f"{where}: features must have shape [num_nodes={n}, F], got {self.features.shape}"
            )
        if not np.issubdtype(self.features.dtype, np.floating):
            raise DatasetError(
                f"{where}: features must be floating point, got {self.features.dtype}"
            )
        # In row chunks: a memory-mapped feature matrix is streamed, never loaded whole.
        step = max(1, (1 << 26) // max(1, self.features.shape[1]))
        for start in range(0, n, step):
            bad = ~np.isfinite(self.features[start : start + step])
            if bad.any():
                row = start + int(np.argwhere(bad)[0, 0])
                raise DatasetError(
                    f"{where}: features contain NaN or infinite values (first in the row of "
                    f"node {row})"
                )
        if self.labels.shape != (n,):
            raise DatasetError(f"{where}: labels must have shape [{n}], got {self.labels.shape}")
        if self.num_classes < 1:
            raise DatasetError(f"{where}: no classes")
        out = (self.labels < -1) | (self.labels >= self.num_classes)
        if out.any():
            raise DatasetError(
                f"{where}: labels must lie in [0, {self.num_classes}) (or -1 for unlabelled), "
                f"found {int(self.labels[out][0])} at node {int(np.flatnonzero(out)[0])}"
            )
        seen = np.zeros(n, dtype=bool)
        for split_name, idx in (
            ("train", self.train_idx),
            ("validation", self.val_idx),
            ("test", self.test_idx),
        ):
            if idx.size == 0:
                raise DatasetError(f"{where}: the {split_name} split is empty")
            if idx.min() < 0 or idx.max() >= n:
                raise DatasetError(f"{where}: {split_name} split has node ids outside [0, {n})")
            if seen[idx].any() or np.unique(idx).size != idx.size:
                raise DatasetError(
                    f"{where}: the {split_name} split overlaps another or repeats ids"
                )
            seen[idx] = True
            if (self.labels[idx] < 0).any():
                raise DatasetError(f"{where}: the {split_name} split contains unlabelled nodes")
        return self



def finish(
    name: str,
    graph: CSRGraph,
    features: np.ndarray,
    labels: np.ndarray,
    splits: tuple[np.ndarray, np.ndarray, np.ndarray],
    split: str,
    num_classes: int | None = None,
) -> Dataset:
    labels = np.asarray(labels)
    if labels.ndim != 1 or (labels.size and not np.issubdtype(labels.dtype, np.integer)):
        raise DatasetError(f"{name}: labels must be a 1-D integer array, got {labels.dtype}")
    if labels.size and labels.min() < -1:
        raise DatasetError(
            f"{name}: labels out of range: found {int(labels.min())} "
            f"at node {int(np.argmin(labels))} (class ids must be >= 0)"
        )
    if num_classes is None:
        num_classes = int(labels.max()) + 1 if labels.size else 0
    return Dataset(
        name=name,
        graph=graph,
        features=np.ascontiguousarray(features, dtype=np.float32),
        labels=labels.astype(np.int32),
        num_classes=num_classes,
        train_idx=np.asarray(splits[0], dtype=np.int32),
        val_idx=np.asarray(splits[1], dtype=np.int32),
        test_idx=np.asarray(splits[2], dtype=np.int32),
        split=split,
    ).validate()


def per_class_split(
    rng: np.random.Generator,
    labels: np.ndarray,
    num_train: int = 20,
    num_val: int = 30,
    eligible: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shchur et al. (2018) split: ``num_train`` + ``num_val`` random nodes per class, rest test.

    Only ``eligible`` nodes (default: all) and labelled nodes (label >= 0) enter a split; Shchur et
    al. evaluate on the largest connected component, which :func:`load_dataset` passes here.
    Raises DatasetError when a class has fewer than ``num_train + num_val + 1`` such nodes.
    """
    eligible = np.ones(labels.shape[0], bool) if eligible is None else eligible
    labels = np.where(eligible, labels, -1)
    train, val = [], []
    for c in np.unique(labels[labels >= 0]):
        members = np.flatnonzero(labels == c)
        if members.size <= num_train + num_val:
            raise DatasetError(
                f"class {int(c)} has {members.size} nodes, too few for a split of "
                f"{num_train} train + {num_val} validation nodes per class"
            )
        members = rng.permutation(members)
        train.append(members[:num_train])
        val.append(members[num_train : num_train + num_val])
    train, val = np.sort(np.concatenate(train)), np.sort(np.concatenate(val))
    rest = np.ones(labels.shape[0], dtype=bool)
    rest[train] = rest[val] = False
    rest &= labels >= 0
    return train, val, np.flatnonzero(rest)


SHCHUR_SPLIT = "per-class 20/30 in the largest component, seed={}"


def split_rng(split_seed: int) -> np.random.Generator:
    return np.random.default_rng([split_seed, 0x5B11])  # stream id: splits


def require(path: Path) -> Path:
    if not path.exists():
        raise DatasetError(f"{path}: no such file or directory")
    return path

