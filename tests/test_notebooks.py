"""The teaching notebooks: their committed cells are their sources' (so the committed outputs come
from the committed code, written by ``make notebooks``), and each runs headlessly without error
(``-m notebooks``: ``make test-notebooks``, which ``.ci/run`` runs after ``make test``)."""

import importlib.util
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "notebooks"
NAMES = sorted(p.stem for p in (FOLDER / "src").glob("*.py"))


def _build():
    spec = importlib.util.spec_from_file_location("notebook_build", FOLDER / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_there_are_four_notebooks():
    assert NAMES == [
        "01_why_gns",
        "02_importance_weights",
        "03_training_and_convergence",
        "04_link_prediction",
    ]


@pytest.mark.parametrize("name", NAMES)
def test_the_committed_notebook_is_its_source_and_has_its_outputs(name):
    build = _build()
    expected = build.notebook(FOLDER / "src" / f"{name}.py")
    committed = nbformat.read(FOLDER / f"{name}.ipynb", as_version=4)
    assert [(c.cell_type, c.source) for c in committed.cells] == [
        (c.cell_type, c.source) for c in expected.cells
    ]
    code = [c for c in committed.cells if c.cell_type == "code"]
    assert code and all(c.get("outputs") is not None for c in code)
    assert any(c.outputs for c in code)  # it was run
    errors = [o for c in code for o in c.outputs if o.get("output_type") == "error"]
    assert not errors
    last = committed.cells[-1]
    assert last.cell_type == "markdown" and "Takeaway" in last.source


@pytest.mark.notebooks
@pytest.mark.parametrize("name", NAMES)
def test_the_notebook_runs_headlessly(name):
    build = _build()
    nb = build.execute(build.notebook(FOLDER / "src" / f"{name}.py"))
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs
        if o.get("output_type") == "error"
    ]  # fmt: skip
    assert not errors
