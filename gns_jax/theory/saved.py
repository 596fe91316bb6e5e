"""The ``--json`` files of saved runs: plain, xz-compressed, or a member of a tar archive.

A report's raw runs are kept in one compressed archive (``second-graph/runs.tar.xz``) or file
(``full-run.json.xz``) beside it. :func:`read_json` reads any of them in place: a path that goes
through an archive, ``gns_jax/theory/second-graph/runs.tar.xz/tolokers.json``, names that member;
a path ending in ``.xz`` is decompressed; anything else is read as it is. :func:`write_json`
compresses when the path ends in ``.xz``.
"""

from __future__ import annotations

import json
import lzma
import tarfile
from pathlib import Path

__all__ = ["ARCHIVE_SUFFIXES", "read_json", "write_json"]

ARCHIVE_SUFFIXES = (".tar.xz", ".tar.gz", ".tar.bz2", ".tar")


def _archive_member(path: Path) -> tuple[Path, str] | None:
    """``(archive, member)`` where a parent of ``path`` is a tar archive on disk, else None."""
    for parent in path.parents:
        if parent.name.endswith(ARCHIVE_SUFFIXES) and parent.is_file():
            return parent, path.relative_to(parent).as_posix()
    return None


def read_json(path: Path):
    """The JSON at ``path`` (module docs); OSError when it cannot be read, ValueError when it is
    not JSON."""
    path = Path(path)
    inside = _archive_member(path)
    if inside is not None:
        archive, member = inside
        try:
            with tarfile.open(archive) as tar:
                file = tar.extractfile(member)
                if file is None:
                    raise OSError(f"{member} in {archive} is not a file")
                data = file.read()
        except KeyError:
            raise OSError(f"no member {member} in {archive}") from None
        except tarfile.TarError as e:
            raise OSError(f"{archive}: not a readable tar archive ({e})") from None
        return json.loads(data)
    if path.suffix == ".xz":
        try:
            with lzma.open(path, "rt") as file:
                return json.load(file)
        except lzma.LZMAError as e:
            raise OSError(f"{path}: not xz-compressed ({e})") from None
    return json.loads(path.read_text())


def write_json(path: Path, value) -> None:
    """Writes ``value`` as indented JSON to ``path``, xz-compressed when it ends in ``.xz``."""
    text = json.dumps(value, indent=1)
    if Path(path).suffix == ".xz":
        with lzma.open(path, "wt", preset=9) as file:
            file.write(text)
    else:
        Path(path).write_text(text)
