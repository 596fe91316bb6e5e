"""Loading a dataset by name, synthetic spec or path: the registry and format detection.

Host-side. A path's format is detected from its content, not its name (see
:mod:`gns_jax.data.formats` and :mod:`gns_jax.data.ondisk`).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from gns_jax.data import formats, ondisk, saint
from gns_jax.data.dataset import Dataset
from gns_jax.data.synthetic import parse_synthetic, spec_rng, synthetic
from gns_jax.errors import DatasetError, GnsJaxError

__all__ = ["REGISTRY", "default_data_dir", "load_dataset"]


# Registry and format detection

# name -> (sub-directory of the data directory, reader kind, file inside it or None)
REGISTRY: dict[str, tuple[str, str, str | None]] = {
    "cora": ("cora", "planetoid", None),
    "citeseer": ("citeseer", "planetoid", None),
    "amazon_photo": ("amazon_photo", "npz", "amazon-photo.zip"),
    "amazon_computers": ("amazon_computers", "npz", "amazon-computers.zip"),
    "coauthor_cs": ("coauthor_cs", "npz", "coauthor-cs.zip"),
    "facebook_pagepage": ("facebook_pagepage", "facebook", None),
    "tolokers": ("tolokers", "npz", "tolokers.npz"),
}


def default_data_dir() -> Path:
    """Where the registered datasets are read from: ``$GNS_JAX_DATA`` if set; else the shipped
    copies, installed with the package as ``gns_jax/datasets/`` (a wheel), or the checkout's
    ``data/`` next to the package (an editable install)."""
    env = os.environ.get("GNS_JAX_DATA")
    if env:
        return Path(env)
    package = Path(__file__).resolve().parents[1]
    installed = package / "datasets"
    return installed if installed.is_dir() else package.parent / "data"


def load_dataset(
    spec: str, data_dir: str | os.PathLike | None = None, *, split_seed: int = 0
) -> Dataset:
    """Loads a registered name, a ``synthetic:...`` spec, or a path (format detected by content).

    Args:
      spec: ``cora``, ..., ``synthetic:nodes=N,...``, or a path to a file or directory.
      data_dir: where registered datasets live; defaults to :func:`default_data_dir`.
      split_seed: seed of the random per-class split, for datasets without a stored split.

    Raises:
      DatasetError: unknown name, missing, truncated or corrupt file, invalid content.
    """
    if spec.startswith("synthetic:"):  # only with the colon: "synthetic_small" is a path
        opts = parse_synthetic(spec)
        return synthetic(spec_rng(opts.pop("seed")), name=spec, **opts)
    key = spec.lower().replace("-", "_")
    if key in REGISTRY:
        sub, _, file = REGISTRY[key]
        root = Path(data_dir) if data_dir is not None else default_data_dir()
        path = root / sub / file if file else root / sub
        if not path.exists():
            raise DatasetError(
                f"dataset '{spec}': {path} does not exist (set --data-dir to the folder holding "
                f"'{sub}/')"
            )
        ds = _load_path(path, split_seed)
        return dataclasses.replace(ds, name=key)
    path = Path(spec)
    if not path.exists():
        raise DatasetError(
            f"--dataset {spec}: neither a registered dataset ({', '.join(REGISTRY)}), "
            "a synthetic:... spec, nor an existing file or directory"
        )
    return _load_path(path, split_seed)


def _load_path(path: Path, split_seed: int) -> Dataset:
    """Reads ``path`` with the reader its content calls for. Readers are given the absolute path,
    so every message names a file in full; a dataset named after its path keeps the path as
    given (``--dataset data/cora`` stays ``data/cora``)."""
    given, path = str(path), path.absolute()
    ds = _read_path(path, split_seed)
    if given != str(path) and ds.name.startswith(str(path)):
        ds = dataclasses.replace(ds, name=given + ds.name[len(str(path)) :])
    return ds


def _read_path(path: Path, split_seed: int) -> Dataset:
    try:
        if path.is_dir():
            if ondisk.is_saved_dir(path):
                return ondisk.read_saved(path)
            if ondisk.is_ogb_dir(path):
                return ondisk.read_ogb(path)
            if formats.planetoid_name(path):
                return formats.read_planetoid(path)
            if (path / "facebook_edges.csv").exists():
                return formats.read_facebook(path, split_seed)
            if (path / "adj_full.npz").exists() and (path / "role.json").exists():
                return saint.read_graphsaint(path)
            if saint.graphsage_prefix(path) is not None:
                return saint.read_graphsage(path)
            raise DatasetError(
                f"{path}: directory holds no supported dataset (a gns-jax meta.json, an OGB "
                "raw/ + split/ layout, Planetoid ind.*.graph, facebook_edges.csv, GraphSAINT "
                "adj_full.npz + role.json or a GraphSAGE PREFIX-G.json)"
            )
        if not path.is_file():
            raise DatasetError(f"{path}: not a regular file or directory")
        with open(path, "rb") as f:
            magic = f.read(4)
        if magic[:2] == b"PK":
            arrays, where = formats.open_npz(path)
            if "adj_indptr" in arrays:
                return formats.gnn_benchmark_from_arrays(arrays, where, split_seed)
            if "node_features" in arrays:
                return formats.tolokers_from_arrays(arrays, where, split=0)
            raise DatasetError(f"{where}: unknown .npz layout (keys: {sorted(arrays)[:8]})")
        if magic[:1] == b"\x80":
            raise DatasetError(
                f"{path}: a single pickle; pass the Planetoid directory holding ind.<name>.* files"
            )
        raise DatasetError(f"{path}: unrecognised file format (not a zip/npz archive)")
    except GnsJaxError as e:
        if isinstance(e, DatasetError):
            raise
        raise DatasetError(str(e)) from None
    except OSError as e:  # the file the system names, else the dataset's path
        where = Path(e.filename).absolute() if isinstance(e.filename, str) else path
        raise DatasetError(f"{where}: cannot read ({e.strerror or e})") from None
