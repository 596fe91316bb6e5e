"""The documentation site (mkdocs.yml, docs/) and the README: the generated pages cover what they
must (every name of ``gns_jax.__all__``, every ``TrainConfig`` field), every figure can be
regenerated, every relative link names a file, and the README stays one page. The fast tests
need no mkdocs; the strict build itself is marked slow and skipped where mkdocs is missing."""

import dataclasses
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gns_jax
from gns_jax.config import TrainConfig, flag_of

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_docs_{name}", DOCS / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = _load("hooks")


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md"))


def _nav_pages() -> list[str]:
    text = (ROOT / "mkdocs.yml").read_text()
    nav = text.split("\nnav:\n", 1)[1]
    return re.findall(r":\s*([\w./-]+\.md)\s*$", nav, flags=re.M)


def test_the_api_reference_has_every_public_name_once():
    grouped = hooks.api_names()
    listed = [name for names in grouped.values() for name in names]
    assert sorted(listed) == sorted(gns_jax.__all__)
    assert len(listed) == len(set(listed))
    reference = hooks.api_reference()
    for name in gns_jax.__all__:
        assert f"\n::: gns_jax.{name}\n" in f"\n{reference}"
    assert hooks.API_MARK in (DOCS / "api.md").read_text()


def test_the_api_reference_names_exist_where_it_says():
    where = gns_jax._WHERE
    for module, names in hooks.api_names().items():
        for name in names:
            assert where.get(name, "gns_jax") == module
            assert hasattr(gns_jax, name)


def test_the_command_page_covers_every_train_config_field():
    tables = hooks.option_tables()
    for field in dataclasses.fields(TrainConfig):
        row = next((r for r in tables.splitlines() if f"| `{field.name}` |" in r), None)
        assert row is not None, f"no row for TrainConfig.{field.name}"
        assert f"`{flag_of(field.name)}`" in row
    for command in ("train", "plan", "predict", "save"):
        assert f"### gns-jax {command}\n" in tables
    assert hooks.OPTIONS_MARK in (DOCS / "command.md").read_text()


def test_the_command_page_shows_every_flag_of_the_parser():
    import argparse

    from gns_jax.arguments import build_parser

    tables = hooks.option_tables()
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command in sub.choices.values():
        for action in command._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}`" in tables, flag


def test_every_nav_page_exists_and_every_page_is_in_the_nav():
    nav = _nav_pages()
    assert nav, "no nav in mkdocs.yml"
    for page in nav:
        assert (DOCS / page).is_file(), page
    pages = {str(p.relative_to(DOCS)) for p in _pages()}
    assert pages == set(nav), pages ^ set(nav)


def _links(path: Path):
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    return [(m.group(1) == "!", m.group(3)) for m in hooks._LINK.finditer(text)]


@pytest.mark.parametrize(
    "path", [ROOT / "README.md", *_pages()], ids=lambda p: str(p.relative_to(ROOT))
)
def test_relative_links_name_files_and_figures_can_be_regenerated(path):
    here = str(path.relative_to(ROOT))
    for is_image, target in _links(path):
        if not hooks._is_local(target) or not target.split("#", 1)[0]:
            continue
        resolved = hooks.repo_path(here, target)
        assert (ROOT / resolved).exists(), f"{here}: {target}"
        if is_image:
            assert hooks.figure_source(resolved), f"{here}: figure {target} has no run file"
            command = hooks.figure_source(resolved)[0]
            text = " ".join(path.read_text().split())
            assert command in text, f"{here}: the page does not say `{command}`"


def test_the_readme_is_one_page_with_its_commands_and_the_docs_snippets():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert "make test " in text and "make train " in text
    for section in ("Choosing the cache fraction", "Results", "Your own model"):
        assert f"\n## {section}\n" in text
    assert "**Does a 1 % cache train like NS?**" in text
    for name in re.findall(r'--8<-- "README.md:([\w-]+)"', (DOCS / "own-model.md").read_text()):
        assert f"<!-- --8<-- [start:{name}] -->" in text
        assert f"<!-- --8<-- [end:{name}] -->" in text


@pytest.mark.slow
def test_the_site_builds_strict(tmp_path):
    """``mkdocs build --strict`` (what ``make docs`` runs): no broken link, anchor, figure or
    reference; every public name has its entry and every option its row."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or "mkdocs"
    site = tmp_path / "site"
    done = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    api = (site / "api.html").read_text()
    for name in gns_jax.__all__:
        assert f'id="gns_jax.{name}"' in api, name
    command = (site / "command.html").read_text()
    assert "gns-jax:options" not in command and "--cache-fraction" in command
