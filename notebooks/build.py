"""Builds the teaching notebooks from their sources and runs them, so that every committed output
comes from the committed code: ``python notebooks/build.py`` (or ``make notebooks``).

Each ``notebooks/src/NAME.py`` is a plain Python file in the "percent" format: ``# %%`` starts a
code cell, ``# %% [markdown]`` a markdown cell (its lines are comments). The build writes
``notebooks/NAME.ipynb`` and executes it in place with nbclient, from the ``notebooks/`` folder,
on the ``python3`` kernel of the current environment. ``tests/test_notebooks.py`` checks that the
committed notebooks' cells are their sources' and runs them again.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "src"
TIMEOUT_S = 600  # per cell


def cells(source: str) -> list[tuple[str, str]]:
    """``(kind, text)`` per cell of a percent-format source."""
    out: list[tuple[str, list[str]]] = []
    for line in source.splitlines():
        if line.startswith("# %%"):
            out.append(("markdown" if "[markdown]" in line else "code", []))
            continue
        if not out:
            continue
        kind, lines = out[-1]
        if kind == "markdown":
            lines.append(line[2:] if line.startswith("# ") else line.lstrip("#"))
        else:
            lines.append(line)
    return [(kind, "\n".join(lines).strip("\n")) for kind, lines in out]


def notebook(source_path: Path) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.metadata["language_info"] = {"name": "python"}
    for kind, text in cells(source_path.read_text()):
        make = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
        nb.cells.append(make(text))
    return nb


def execute(nb: nbformat.NotebookNode, timeout: int = TIMEOUT_S) -> nbformat.NotebookNode:
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}
    )
    client.execute()
    return nb


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="notebooks to build (default: all)")
    args = parser.parse_args(argv)
    sources = sorted(SOURCES.glob("*.py"))
    if args.names:
        sources = [s for s in sources if s.stem in args.names]
    for source in sources:
        start = time.perf_counter()
        nb = execute(notebook(source))
        for cell in nb.cells:  # ids and timings would churn every build
            cell.metadata.pop("execution", None)
        nbformat.write(nb, HERE / f"{source.stem}.ipynb")
        print(f"{source.stem}.ipynb: ran in {time.perf_counter() - start:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
