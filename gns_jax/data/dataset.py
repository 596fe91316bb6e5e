"""The dataset type, its validation, and the splits every reader shares. Host-side NumPy.

A :class:`Dataset` is a graph, its node features, labels and a train/validation/test split, in
host memory (the features may be a read-only memory map, :mod:`gns_jax.data.ondisk`). Readers
build one through :func:`finish`, which validates it, so a malformed file never reaches training.

Shared rules for every reader:

* **Classes** are contiguous: with ``C`` classes every id in ``[0, C)`` has at least one labelled
  node. Where a file gives only labels, ``C`` is the largest label plus one and a gap is an error
  (:func:`class_count`), so a stray label of 100000 cannot make a 100001-way classifier.
* **Memory bound**: before a reader allocates a dense array whose size a file declares (a sparse
  feature matrix densified, an ``.npz`` member, a decompressed csv), :func:`check_alloc` refuses
  anything above :func:`memory_budget`, half the machine's physical memory; a corrupt size
  becomes a one-line :class:`~gns_jax.errors.DatasetError` instead of a ``MemoryError``. Memory
  maps (the features of a saved folder) are not allocations and are not bounded.
* **Self-loops**: the readers of edge lists (Planetoid, the ``.npz`` formats, Facebook's csv,
  OGB, GraphSAINT and GraphSAGE) drop them while symmetrising, as the shipped files' figures in
  ``data/README.md`` count them, and a saved folder, whose CSR ``gns-jax save`` writes without
  any, is used as stored and refused if it has one, with the one message of
  :meth:`~gns_jax.graph.CSRGraph.check_undirected` saying how to rebuild it.
* **Dtypes**: every array a reader takes from a file is checked for its kind before any cast
  (:func:`check_kind`): complex, text, object and date arrays are refused everywhere, booleans
  are accepted only as features, split masks and 0/1 label matrices (never as ids or class
  ids), and float class ids must be whole numbers; the message names the file, the array and
  its dtype.
* **Paths**: readers take ``Path.absolute()`` of what they are given, so every message names a
  file by its full path; a file that is a directory (or not a regular file) is refused by
  :func:`require_file` naming it. Text files (csv, json) may start with a UTF-8 byte-order mark.
* **Labelled splits**: a split holding a node without a label is refused naming the file of
  the labels (or of the split), and a training split without a single labelled node says so
  (:func:`check_split_labels`); a training split of a single class is fine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import mmap
import os
from pathlib import Path

import numpy as np

from gns_jax.errors import DatasetError, GnsJaxError
from gns_jax.graph import CSRGraph

__all__ = [
    "MAX_NODES",
    "SHCHUR_SPLIT",
    "Dataset",
    "advise_random",
    "beyond_memory",
    "check_alloc",
    "check_kind",
    "check_label_matrix",
    "check_split_labels",
    "class_count",
    "finish",
    "memory_budget",
    "per_class_split",
    "require",
    "require_file",
    "split_rng",
]

MAX_NODES = 2**31 - 2  # node ids are int32 (CSRGraph.indices); from_edges needs n < 2^31 - 1


def memory_budget() -> int:
    """Bytes one dense allocation made on behalf of a file may take: half of physical memory."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not POSIX: assume 16 GiB
        total = 16 << 30
    return max(1, total // 2)


def beyond_memory(features: np.ndarray) -> bool:
    """Whether ``features`` is a whole ``.npy`` file, memory-mapped and C-ordered, larger than
    :func:`memory_budget`: a store that is read from disk rather than from the page cache, whose
    reads the library treats as random (:func:`advise_random`, its loading check streamed)."""
    path = getattr(features, "filename", None)
    return (
        isinstance(features, np.memmap)
        and path is not None
        and features.flags.c_contiguous
        and features.nbytes > memory_budget()
        and os.path.getsize(path) == features.offset + features.nbytes
    )


def advise_random(features: np.ndarray) -> bool:
    """Tells the kernel that ``features``' mapping is read at random (``MADV_RANDOM``): a page
    fault then reads its page, not the read-ahead window around it (8 MiB on a disk whose
    ``read_ahead_kb`` is 8192, where a gather of 4,096 random 1 KiB rows read 22 GB). Returns
    whether the advice was given (not where the platform has no ``madvise``)."""
    mapping = getattr(features, "_mmap", None)
    if mapping is None or not hasattr(mmap, "MADV_RANDOM"):
        return False
    try:
        mapping.madvise(mmap.MADV_RANDOM)
    except (OSError, ValueError):
        return False
    return True


def _feature_chunks(features: np.ndarray, step: int):
    """``(first row, rows)`` over ``features`` in chunks of ``step`` rows.

    A memory-mapped file larger than :func:`memory_budget` is read with read calls into one
    buffer, and each chunk's pages are dropped from the page cache once checked: reading it
    through the map would leave the page cache full of its last rows (and of pages the process
    has mapped, which the kernel keeps), so that training would start on whatever the check
    happened to leave rather than on what its own reads bring in.
    """
    n = features.shape[0]
    path = getattr(features, "filename", None)
    if not (beyond_memory(features) and hasattr(os, "posix_fadvise")):
        for start in range(0, n, step):
            yield start, features[start : start + step]
        return
    row_bytes = features.strides[0]
    buffer = np.empty((step, features.shape[1]), dtype=features.dtype)
    fd = os.open(path, os.O_RDONLY)
    try:
        for start in range(0, n, step):
            count = min(step, n - start)
            pos = features.offset + start * row_bytes
            view = memoryview(buffer[:count]).cast("B")
            done = 0
            while done < count * row_bytes:
                got = os.preadv(fd, [view[done:]], pos + done)
                if got <= 0:
                    raise DatasetError(f"{path}: ended after {start * row_bytes + done} bytes")
                done += got
            os.posix_fadvise(fd, pos, count * row_bytes, os.POSIX_FADV_DONTNEED)
            yield start, buffer[:count]
    finally:
        os.close(fd)


def check_alloc(shape: tuple[int, ...], itemsize: int, where: str, what: str) -> None:
    """Raises DatasetError if an array of ``shape`` would exceed :func:`memory_budget`."""
    nbytes = math.prod(int(s) for s in shape) * int(itemsize)
    if nbytes > memory_budget():
        raise DatasetError(
            f"{where}: {what} of shape {tuple(int(s) for s in shape)} would take "
            f"{nbytes / 2**30:,.1f} GiB, over the bound of {memory_budget() / 2**30:,.1f} GiB "
            "(half this machine's memory)"
        )


_KIND_NAMES = {"b": "booleans", "i": "integers", "u": "integers", "f": "floats"}
_KIND_WHY = {
    "c": " (complex values: the imaginary part would be lost)",
    "U": " (text)",
    "S": " (bytes)",
    "O": " (Python objects)",
    "M": " (dates)",
    "m": " (time spans)",
    "V": " (raw or structured records)",
}


def check_kind(array, where: str, what: str, kinds: str = "iu") -> np.ndarray:
    """Returns ``array`` as an ndarray if its dtype kind is one of ``kinds`` (``"b"`` bool,
    ``"i"``/``"u"`` integers, ``"f"`` floats); else raises DatasetError
    ``"{where}: {what} must hold ..., got {dtype} (...)"``. An empty array of any real kind
    passes (``np.zeros((0, 2))`` is a float64 list of no edges)."""
    array = np.asarray(array)
    kind = array.dtype.kind
    if kind in kinds or (array.size == 0 and kind in "biuf"):
        return array
    names = list(dict.fromkeys(_KIND_NAMES[k] for k in kinds))
    allowed = " or ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} or {names[-1]}"
    raise DatasetError(
        f"{where}: {what} must hold {allowed}, got {array.dtype}{_KIND_WHY.get(kind, '')}"
    )


def check_split_labels(
    labelled: np.ndarray, idx: np.ndarray, split_name: str, where: str, labels: str = ""
) -> None:
    """Raises DatasetError (starting with ``where``, the file to blame) when the nodes ``idx`` of
    the split ``split_name`` include one that ``labelled`` (bool ``[num_nodes]``) marks
    unlabelled: ``"no labelled node in the training split"`` when none is labelled. ``labels``
    names the file of the labels in the message. Ids outside ``[0, num_nodes)`` are left to
    :meth:`Dataset.validate`."""
    idx = np.asarray(idx)
    if not np.issubdtype(idx.dtype, np.integer):
        return
    ids = idx[(idx >= 0) & (idx < labelled.shape[0])]
    missing = ~labelled[ids]
    if not missing.any():
        return
    label = "training" if split_name == "train" else split_name
    inside = f" in {labels}" if labels else ""
    if missing.all():
        raise DatasetError(
            f"{where}: no labelled node in the {label} split (none of its {ids.size} nodes has a "
            f"label{inside})"
        )
    raise DatasetError(
        f"{where}: node {int(ids[missing][0])} of the {label} split has no label{inside} "
        f"({int(missing.sum())} of its {ids.size} nodes are unlabelled)"
    )


def _missing_classes(labels: np.ndarray, num_classes: int, where: str) -> None:
    """Raises DatasetError unless every class in ``[0, num_classes)`` has a labelled node."""
    labelled = labels[labels >= 0].astype(np.intp)  # bincount refuses uint64
    if num_classes > labelled.size:
        raise DatasetError(
            f"{where}: {num_classes} classes but only {labelled.size} labelled nodes; class ids "
            "must be contiguous 0..C-1 with every class present"
        )
    missing = np.flatnonzero(np.bincount(labelled, minlength=num_classes) == 0)
    if missing.size:
        shown = ", ".join(str(int(c)) for c in missing[:5]) + (", ..." if missing.size > 5 else "")
        raise DatasetError(
            f"{where}: class ids must be contiguous 0..{num_classes - 1} with every class "
            f"present, but {missing.size} classes have no labelled node ({shown})"
        )


def class_count(labels: np.ndarray, where: str, unlabelled: bool = True) -> int:
    """The number of classes of integer ``labels`` (-1 = unlabelled when ``unlabelled``): the
    largest label plus one, after checking the ids are contiguous. Raises DatasetError."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or (labels.size and not np.issubdtype(labels.dtype, np.integer)):
        raise DatasetError(
            f"{where}: labels must be a 1-D integer array, got {labels.dtype} of shape "
            f"{labels.shape}"
        )
    if not labels.size:
        raise DatasetError(f"{where}: no labels")
    lowest = -1 if unlabelled else 0
    if labels.min() < lowest:
        raise DatasetError(
            f"{where}: labels out of range: found {int(labels.min())} at node "
            f"{int(np.argmin(labels))} (class ids must be >= 0"
            + (", or -1 for unlabelled)" if unlabelled else ")")
        )
    top = int(labels.max())
    if top < 0:
        raise DatasetError(f"{where}: no labelled node")
    labelled = int(np.count_nonzero(labels >= 0))
    if top >= labelled:
        raise DatasetError(
            f"{where}: class id {top} at node {int(np.argmax(labels))} with only {labelled} "
            "labelled nodes; class ids must be contiguous 0..C-1 with every class present"
        )
    _missing_classes(labels, top + 1, where)
    return top + 1


@contextlib.contextmanager
def _blame(files: dict[str, str], part: str):
    """Adds ``(in FILE)`` to a DatasetError or GraphError raised about ``part`` of a dataset when
    ``files`` names the file it came from."""
    try:
        yield
    except GnsJaxError as e:
        if part not in files:
            raise
        raise type(e)(f"{e} (in {files[part]})") from None


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A node-classification dataset in host memory.

    Attributes:
      name: registered name, path or synthetic spec it was loaded from.
      graph: undirected graph (both directions stored), no self-loops, no duplicate edges.
      features: float32 ``[num_nodes, num_features]``, finite; may be a read-only ``np.memmap``
        (float32 or float16) of a saved dataset directory (:mod:`gns_jax.data.ondisk`).
      labels: int32 ``[num_nodes]``, class ids in ``[0, num_classes)`` and -1 for unlabelled
        nodes (which lie in no split); or, for a multi-label task, an int8 ``[num_nodes, L]``
        0/1 matrix, a row of -1 for an unlabelled node.
      num_classes: number of classes (every class in ``[0, num_classes)`` has a labelled node),
        or the number of labels ``L`` of a multi-label matrix.
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

    @property
    def multilabel(self) -> bool:
        """Whether ``labels`` is a ``[num_nodes, L]`` 0/1 matrix (a multi-label task)."""
        return self.labels.ndim == 2

    @property
    def task(self) -> str:
        """The task the labels describe: ``"multilabel"`` (a label matrix), ``"binary"`` (two
        classes) or ``"multiclass"``; :func:`gns_jax.tasks.resolve_task` lets a run override it."""
        if self.multilabel:
            return "multilabel"
        return "binary" if self.num_classes == 2 else "multiclass"

    def labelled(self) -> np.ndarray:
        """Bool ``[num_nodes]``: the nodes that carry a label."""
        return self.labels[:, 0] >= 0 if self.multilabel else self.labels >= 0

    def validate(self, where: str | None = None, files: dict[str, str] | None = None) -> Dataset:
        """Checks the graph (valid CSR, undirected), shapes, finite features, labels (contiguous
        classes, every one present) and splits; raises DatasetError or GraphError whose message
        starts with ``where`` (default: the dataset's name). ``files`` names the file each part
        came from (keys ``graph``, ``features``, ``labels``, ``train``, ``validation``,
        ``test``), added to a message about that part as ``(in FILE)``."""
        n, where = self.graph.num_nodes, where or self.name
        files = files or {}
        with _blame(files, "graph"):
            self.graph.validate(where)
            self.graph.check_undirected(where)
        with _blame(files, "features"):
            if self.features.ndim != 2 or self.features.shape[0] != n:
                raise DatasetError(
                    f"{where}: features must have shape [num_nodes={n}, F], got "
                    f"{self.features.shape}"
                )
            if not np.issubdtype(self.features.dtype, np.floating):
                raise DatasetError(
                    f"{where}: features must be floating point, got {self.features.dtype}"
                )
            if self.features.shape[1] < 1:
                raise DatasetError(f"{where}: features have no columns")
            # In row chunks: a memory-mapped feature matrix is streamed, never loaded whole.
            step = max(1, (1 << 26) // max(1, self.features.shape[1]))
            for start, rows in _feature_chunks(self.features, step):
                bad = ~np.isfinite(rows)
                if bad.any():
                    row = start + int(np.argwhere(bad)[0, 0])
                    raise DatasetError(
                        f"{where}: features contain NaN or infinite values (first in the row of "
                        f"node {row})"
                    )
        with _blame(files, "labels"):
            if not np.issubdtype(self.labels.dtype, np.integer):
                raise DatasetError(f"{where}: labels must be integers, got {self.labels.dtype}")
            if not isinstance(self.num_classes, int | np.integer) or self.num_classes < 1:
                raise DatasetError(f"{where}: no classes (num_classes={self.num_classes!r})")
            if self.labels.ndim == 2:
                check_label_matrix(self.labels, where, n)
                if self.labels.shape[1] != self.num_classes:
                    raise DatasetError(
                        f"{where}: {self.labels.shape[1]} label columns but num_classes="
                        f"{self.num_classes}"
                    )
            else:
                if self.labels.shape != (n,):
                    raise DatasetError(
                        f"{where}: labels must have shape [{n}] (classes) or [{n}, L] (a "
                        f"multi-label 0/1 matrix), got {self.labels.shape}"
                    )
                out = (self.labels < -1) | (self.labels >= self.num_classes)
                if out.any():
                    raise DatasetError(
                        f"{where}: labels must lie in [0, {self.num_classes}) (or -1 for "
                        f"unlabelled), found {int(self.labels[out][0])} at node "
                        f"{int(np.flatnonzero(out)[0])}"
                    )
                _missing_classes(self.labels, int(self.num_classes), where)
        labelled = self.labelled()
        seen = np.zeros(n, dtype=bool)
        for split_name, idx in (
            ("train", self.train_idx),
            ("validation", self.val_idx),
            ("test", self.test_idx),
        ):
            with _blame(files, split_name):
                if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
                    raise DatasetError(
                        f"{where}: the {split_name} split must be a 1-D array of node ids, got "
                        f"{idx.dtype} of shape {idx.shape}"
                    )
                if idx.size == 0:
                    raise DatasetError(f"{where}: the {split_name} split is empty")
                if idx.min() < 0 or idx.max() >= n:
                    raise DatasetError(f"{where}: {split_name} split has node ids outside [0, {n})")
                if seen[idx].any() or np.unique(idx).size != idx.size:
                    raise DatasetError(
                        f"{where}: the {split_name} split overlaps another or repeats ids"
                    )
                seen[idx] = True
                if not labelled[idx].any():
                    raise DatasetError(
                        f"{where}: no labelled node in the "
                        f"{'training' if split_name == 'train' else split_name} split"
                    )
                if not labelled[idx].all():
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
    files: dict[str, str] | None = None,
) -> Dataset:
    """Builds and validates a :class:`Dataset`; ``num_classes`` defaults to
    :func:`class_count` of ``labels`` (contiguous ids). Errors start with ``name``; ``files``
    names the file of each part, as for :meth:`Dataset.validate`."""
    labels = np.asarray(labels)
    if labels.ndim == 2:  # a multi-label 0/1 matrix
        labels = check_label_matrix(labels, name, labels.shape[0])
        num_classes = int(labels.shape[1])
    elif labels.ndim != 1 or (labels.size and not np.issubdtype(labels.dtype, np.integer)):
        raise DatasetError(
            f"{name}: labels must be a 1-D integer array or a 2-D 0/1 label matrix, got "
            f"{labels.dtype} of shape {labels.shape}"
        )
    if labels.size and labels.min() < -1:
        raise DatasetError(
            f"{name}: labels out of range: found {int(labels.min())} "
            f"at node {int(np.argmin(labels))} (class ids must be >= 0)"
        )
    if num_classes is None:
        num_classes = class_count(labels, name)
    features = np.asarray(features)
    if features.ndim != 2 or features.dtype.kind not in "biuf":
        raise DatasetError(
            f"{name}: features must be a 2-D numeric array, got {features.dtype} of shape "
            f"{features.shape}"
        )
    if labels.ndim == 1 and labels.size and labels.max() >= num_classes:
        raise DatasetError(
            f"{name}: labels must lie in [0, {num_classes}), found {int(labels.max())} at node "
            f"{int(np.argmax(labels))}"
        )
    n = graph.num_nodes
    checked = []
    for split_name, idx in zip(("train", "validation", "test"), splits):
        idx = np.asarray(idx)
        if idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
            raise DatasetError(
                f"{name}: the {split_name} split must be a 1-D array of integer node ids, got "
                f"{idx.dtype} of shape {idx.shape}"
            )
        if idx.size and (idx.min() < 0 or idx.max() >= n):  # before the int32 cast wraps them
            bad = idx[(idx < 0) | (idx >= n)][0]
            raise DatasetError(
                f"{name}: the {split_name} split names node {int(bad)}, outside [0, {n})"
            )
        checked.append(idx)
    with np.errstate(over="ignore", invalid="ignore"):  # beyond float32: found just below
        features = np.ascontiguousarray(features, dtype=np.float32)
    return Dataset(
        name=name,
        graph=graph,
        features=features,
        labels=labels.astype(np.int8 if labels.ndim == 2 else np.int32),
        num_classes=num_classes,
        train_idx=checked[0].astype(np.int32),
        val_idx=checked[1].astype(np.int32),
        test_idx=checked[2].astype(np.int32),
        split=split,
    ).validate(files=files)


def check_label_matrix(labels: np.ndarray, where: str, num_nodes: int) -> np.ndarray:
    """Checks a multi-label matrix: integer or bool ``[num_nodes, L]`` with ``L >= 1``, entries 0 or
    1, a row of -1 for an unlabelled node, every label positive on some node and negative on some
    other (a constant column cannot be learned or scored). Returns it as int8; raises
    DatasetError starting with ``where``."""
    labels = np.asarray(labels)
    if labels.dtype == bool:
        labels = labels.astype(np.int8)
    if labels.ndim != 2 or labels.shape[0] != num_nodes or labels.shape[1] < 1:
        raise DatasetError(
            f"{where}: a label matrix must have shape [num_nodes={num_nodes}, L >= 1], got "
            f"{labels.shape}"
        )
    if labels.size and not np.issubdtype(labels.dtype, np.integer):
        raise DatasetError(f"{where}: the label matrix must be integer 0/1, got {labels.dtype}")
    unlabelled = labels[:, 0] == -1
    bad = ~np.isin(labels, (0, 1)) & ~unlabelled[:, None]
    bad |= unlabelled[:, None] & (labels != -1)
    if bad.any():
        node, col = (int(v) for v in np.argwhere(bad)[0])
        raise DatasetError(
            f"{where}: label matrix entries must be 0 or 1 (or a whole row of -1 for an "
            f"unlabelled node), found {int(labels[node, col])} at node {node}, label {col}"
        )
    rows = labels[~unlabelled]
    if not rows.shape[0]:
        raise DatasetError(f"{where}: no labelled node")
    positives = rows.sum(axis=0, dtype=np.int64)
    constant = np.flatnonzero((positives == 0) | (positives == rows.shape[0]))
    if constant.size:
        shown = ", ".join(str(int(c)) for c in constant[:5]) + (
            ", ..." if constant.size > 5 else ""
        )
        raise DatasetError(
            f"{where}: {constant.size} of {labels.shape[1]} labels are the same on every labelled "
            f"node ({shown}); drop those columns"
        )
    return labels.astype(np.int8, copy=False)


def per_class_split(
    rng: np.random.Generator,
    labels: np.ndarray,
    num_train: int = 20,
    num_val: int = 30,
    eligible: np.ndarray | None = None,
    name: str = "dataset",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shchur et al. (2018) split: ``num_train`` + ``num_val`` random nodes per class, rest test.

    Only ``eligible`` nodes (default: all) and labelled nodes (label >= 0) enter a split; Shchur et
    al. evaluate on the largest connected component, which :func:`load_dataset` passes here.
    Raises DatasetError (starting with ``name``, the file) when a class has fewer than
    ``num_train + num_val + 1`` such nodes; the message calls ``eligible`` the largest connected
    component, as every reader passes it.
    """
    among = "" if eligible is None else " in the largest connected component"
    eligible = np.ones(labels.shape[0], bool) if eligible is None else eligible
    labels = np.where(eligible, labels, -1)
    train, val = [], []
    for c in np.unique(labels[labels >= 0]):
        members = np.flatnonzero(labels == c)
        if members.size <= num_train + num_val:
            raise DatasetError(
                f"{name}: class {int(c)} has {members.size} labelled nodes{among}, too few for a "
                f"split of {num_train} train + {num_val} validation nodes per class"
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


def require_file(path: Path) -> Path:
    """``path`` if it is a regular file; DatasetError naming it if it is missing, a directory
    (a file replaced by a folder) or something else (a pipe, a device: reading could hang)."""
    if path.is_dir():
        raise DatasetError(f"{path}: is a directory, expected a file")
    if not path.exists():
        raise DatasetError(f"{path}: no such file or directory")
    if not path.is_file():
        raise DatasetError(f"{path}: not a regular file")
    return path
