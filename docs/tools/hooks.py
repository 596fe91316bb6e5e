"""Build-time hooks of the documentation site (``mkdocs.yml``: ``hooks``).

Three jobs, so that the site cannot drift from the code or the repository:

* ``<!-- gns-jax:options -->`` in a page becomes the option tables of every ``gns-jax``
  subcommand, read from the parser that the command itself runs
  (:func:`gns_jax.arguments.build_parser`, itself generated from ``TrainConfig``'s field
  metadata): :func:`option_tables`.
* ``<!-- gns-jax:api -->`` becomes one mkdocstrings entry (``::: gns_jax.NAME``) for every name
  of ``gns_jax.__all__``, grouped by the module that defines it: :func:`api_reference`.
* The pages are written to read on GitHub too, so their links are relative paths in the
  repository, some of them outside ``docs/`` (``../experiments/README.md``, a report's plot).
  Every such file that the site can show (markdown, images) is mounted under ``repo/`` and the
  link pointed at it; a link to a file the site cannot show (a script, an archive, a folder)
  keeps its text and loses its target; a link to nothing is a warning, so ``mkdocs build
  --strict`` fails. Every embedded figure must be one that a command regenerates from a
  committed run file (:func:`figure_source`); the hook adds that command under a figure whose
  paragraph does not already give it.

The two generators import no mkdocs (``tests/test_docs.py`` calls them directly).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import posixpath
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MOUNT = "repo"  # the site's folder for the repository's files outside docs/
OPTIONS_MARK = "<!-- gns-jax:options -->"
API_MARK = "<!-- gns-jax:api -->"
SHOWN = (".md", ".png", ".svg", ".jpg", ".jpeg", ".gif")  # what the site mounts
IMAGES = SHOWN[1:]

log = logging.getLogger("mkdocs.hooks.gns_docs")  # under mkdocs: a warning fails --strict
_API_PAGES: set[str] = set()  # the pages that hold the API reference


def _importable() -> None:
    """The repository's packages (gns_jax, experiments) importable, whatever the caller's path."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


# -- the command's options --------------------------------------------------------------------


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "&#124;")


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if "%" in text:
        params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
        text = text % params  # argparse's own expansion: '25%%' -> '25%'
    return _cell(text)


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:  # a flag
        return ""
    if action.choices:
        return ", ".join(f"`{c}`" for c in action.choices)
    name = action.metavar or getattr(action.type, "__name__", "").lstrip("_").upper()
    return f"<code>{_cell(name or action.dest.upper())}</code>"


def _flags(action: argparse.Action) -> str:
    return "<br>".join(f"`{flag}`" for flag in action.option_strings)


def _table(actions: list[argparse.Action], fields: set[str]) -> list[str]:
    rows = ["| option | value | `TrainConfig` field | what it does |", "|---|---|---|---|"]
    for action in actions:
        field = f"`{action.dest}`" if action.dest in fields else ""
        rows.append(f"| {_flags(action)} | {_value(action)} | {field} | {_help(action)} |")
    return rows


def option_tables() -> str:
    """The option tables of ``gns-jax train``, ``plan``, ``predict`` and ``save``: every flag
    that the command's parser defines, with its values, the ``TrainConfig`` field it sets, its
    help and its default, in the groups of ``gns-jax train --help``."""
    _importable()
    from gns_jax.arguments import build_parser
    from gns_jax.config import GROUPS, TrainConfig

    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help for a in sub._choices_actions}
    out: list[str] = []
    for name, command in sub.choices.items():
        out += [f"### gns-jax {name}", "", f"{_cell(helps.get(name, ''))}."]
        if command.description:
            out += ["", _cell(command.description)]
        for group in command._action_groups:
            actions = [a for a in group._group_actions if a.option_strings and a.dest != "help"]
            if not actions:
                continue
            if name != "train" and group.title in GROUPS:
                continue  # plan takes train's options: listed once, under train
            title = "options" if group.title == "options" else group.title
            out += ["", f"#### {name}: {title}", "", *_table(actions, fields)]
        if name == "plan":
            out += ["", "`gns-jax plan` also takes every option of `gns-jax train` above."]
        out.append("")
    return "\n".join(out)


# -- the API reference ------------------------------------------------------------------------

#: the order and titles of the reference's sections, by defining module; a module not listed
#: gets a section of its own after these (so a new module's names are not dropped)
SECTIONS = (
    ("gns_jax.train", "Training"),
    ("gns_jax.config", "Options"),
    ("gns_jax.factories", "What a config builds"),
    ("gns_jax.step", "The train step"),
    ("gns_jax.data", "Datasets"),
    ("gns_jax.graph", "Graphs"),
    ("gns_jax.cache", "The GNS cache"),
    ("gns_jax.sampling", "Samplers and blocks"),
    ("gns_jax.loader", "The loader"),
    ("gns_jax.models", "Models"),
    ("gns_jax.tasks", "Tasks"),
    ("gns_jax.evaluate", "Evaluation"),
    ("gns_jax.parallel", "Data parallelism"),
    ("gns_jax.pipeline", "Pipeline parallelism"),
    ("gns_jax.checkpoint", "Checkpoints"),
    ("gns_jax.meters", "Counters"),
    ("gns_jax.errors", "Errors"),
    ("gns_jax", "The package"),
)


def api_names() -> dict[str, list[str]]:
    """``gns_jax.__all__`` by defining module (``gns_jax._WHERE``), in :data:`SECTIONS`'
    order."""
    _importable()
    import gns_jax

    where = getattr(gns_jax, "_WHERE", {})
    by_module: dict[str, list[str]] = {module: [] for module, _ in SECTIONS}
    for name in sorted(gns_jax.__all__, key=lambda n: (n.lower(), n)):
        by_module.setdefault(where.get(name, "gns_jax"), []).append(name)
    return {module: names for module, names in by_module.items() if names}


def api_reference() -> str:
    """One ``::: gns_jax.NAME`` entry for every name of ``gns_jax.__all__``, under a heading
    for its defining module."""
    titles = dict(SECTIONS)
    out: list[str] = []
    for module, names in api_names().items():
        out += [f"## {titles.get(module, module)}", "", f"Defined in `{module}`.", ""]
        for name in names:
            out += [f"::: gns_jax.{name}", ""]
    return "\n".join(out)


# -- figures ----------------------------------------------------------------------------------


def figure_source(path: str) -> tuple[str, str] | None:
    """``(command, run file)`` that regenerate the figure at repository path ``path``, or
    ``None`` when no committed run file and command rebuild it."""
    parts = path.split("/")
    if parts[:2] == ["experiments", "reports"] and len(parts) >= 4:
        _importable()
        from experiments.regenerate import ARCHIVE, REPORTS

        name, inside = parts[2], parts[3]
        report = REPORTS.get(name)
        archive = f"experiments/reports/{name}/{ARCHIVE}"
        if report and report.rebuild and inside in report.outputs and (ROOT / archive).exists():
            return f"python -m experiments.regenerate {name}", archive
        return None
    if path.startswith("gns_jax/theory/figures/"):
        run = "gns_jax/theory/full-run.json.xz"
        if (ROOT / run).exists():
            return f"python -m gns_jax.theory --from-json {run}", run
    return None


# -- links ------------------------------------------------------------------------------------

_FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.M | re.S)
_LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)((?:\s+\"[^\"]*\")?)\)")


def _outside_fences(text: str, replace) -> str:
    """``replace`` applied to the parts of markdown ``text`` outside fenced code blocks."""
    out, last = [], 0
    for fence in _FENCE.finditer(text):
        out += [replace(text[last : fence.start()]), fence.group(0)]
        last = fence.end()
    out.append(replace(text[last:]))
    return "".join(out)


def _targets(text: str):
    found: list[tuple[bool, str]] = []

    def collect(part: str) -> str:
        found.extend((m.group(1) == "!", m.group(3)) for m in _LINK.finditer(part))
        return part

    _outside_fences(text, collect)
    return found


def _is_local(target: str) -> bool:
    return not (re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")))


def repo_path(page_path: str, target: str) -> str:
    """The repository path that relative ``target`` names from the file at ``page_path``."""
    path = target.split("#", 1)[0]
    return posixpath.normpath(posixpath.join(posixpath.dirname(page_path), path))


def mounted_files(start: list[str]) -> list[str]:
    """The repository files outside ``docs/`` that the pages at ``start`` (repository paths)
    show or link to, and those that the mounted pages in turn link to."""
    seen: set[str] = set()
    todo = list(start)
    while todo:
        page = todo.pop()
        for _, target in _targets((ROOT / page).read_text(encoding="utf-8")):
            if not _is_local(target) or not target.split("#", 1)[0]:
                continue
            path = repo_path(page, target)
            if path.startswith(("docs/", "../")) or path in seen or not path.endswith(SHOWN):
                continue
            if (ROOT / path).is_file():
                seen.add(path)
                if path.endswith(".md"):
                    todo.append(path)
    return sorted(seen)


# -- mkdocs hooks -----------------------------------------------------------------------------


def _page_path(src_uri: str) -> str:
    """A page's path in the repository, from its path in the site's sources."""
    prefix = MOUNT + "/"
    return src_uri[len(prefix) :] if src_uri.startswith(prefix) else f"docs/{src_uri}"


def _site_path(path: str) -> str:
    return path[len("docs/") :] if path.startswith("docs/") else f"{MOUNT}/{path}"


def on_files(files, config):
    from mkdocs.structure.files import File, InclusionLevel

    pages = [f"docs/{f.src_uri}" for f in files.documentation_pages()]
    for path in mounted_files(pages):
        files.append(
            File.generated(
                config,
                f"{MOUNT}/{path}",
                abs_src_path=str(ROOT / path),
                inclusion=InclusionLevel.NOT_IN_NAV,
            )
        )
    return files


def on_page_markdown(markdown, page, config, files):
    src_uri = page.file.src_uri
    here = _page_path(src_uri)
    if OPTIONS_MARK in markdown:
        markdown = markdown.replace(OPTIONS_MARK, option_tables())
    if API_MARK in markdown:
        markdown = markdown.replace(API_MARK, api_reference())
        _API_PAGES.add(src_uri)

    def relink(match: re.Match) -> str:
        bang, text, target, title = match.groups()
        if not _is_local(target):
            return match.group(0)
        path, _, anchor = target.partition("#")
        if not path:
            return match.group(0)
        resolved = repo_path(here, path)
        if not (ROOT / resolved).exists():
            log.warning("%s: the link to '%s' names no file of the repository", here, target)
            return match.group(0)
        site = _site_path(resolved)
        if bang and not figure_source(resolved):
            log.warning("%s: figure '%s' has no run file and command", here, target)
        if files.get_file_from_path(site) is None:
            if bang:
                log.warning("%s: figure '%s' is not in the site", here, target)
            return text  # a script, an archive, a folder: named, not linked
        new = posixpath.relpath(site, posixpath.dirname(src_uri) or ".")
        return f"{bang}[{text}]({new}{'#' + anchor if anchor else ''}{title})"

    markdown = _outside_fences(markdown, lambda part: _caption_figures(part, here))
    return _outside_fences(markdown, lambda part: _LINK.sub(relink, part))


def on_page_content(html, page, config, files):
    """The API reference holds an entry for every name of ``gns_jax.__all__``."""
    if page.file.src_uri in _API_PAGES:
        for names in api_names().values():
            for name in names:
                if f'id="gns_jax.{name}"' not in html:
                    log.warning("%s: no entry for gns_jax.%s", page.file.src_uri, name)
    return html


def _caption_figures(text: str, here: str) -> str:
    """Adds the regenerating command under each figure whose paragraph does not name it."""
    paragraphs = text.split("\n\n")
    for i, paragraph in enumerate(paragraphs):
        for match in _LINK.finditer(paragraph):
            if match.group(1) and _is_local(match.group(3)):
                source = figure_source(repo_path(here, match.group(3)))
                nearby = " ".join(" ".join(paragraphs[i : i + 2]).split())  # and the next
                if source and source[0] not in nearby:
                    paragraphs[i] += f"\n\n*Regenerated by `{source[0]}` from `{source[1]}`.*"
    return "\n\n".join(paragraphs)
