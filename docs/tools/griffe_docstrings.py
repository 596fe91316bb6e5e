"""A griffe extension for the API reference (``mkdocs.yml``). The docstrings of gns_jax are
written for plain-text and Sphinx readers; this renders their forms in Markdown before
mkdocstrings parses them (Google style):

* a Sphinx role, ``:class:`~gns_jax.evaluate.ExactInference```, becomes code naming the object
  as Sphinx shows it (```ExactInference```); nothing is linked, so no reference can dangle;
* a ``Example::`` literal block becomes a fenced code block;
* an argument entry naming several parameters at once (``graphdef, state: the model ...``)
  becomes one entry a parameter, each with the shared description, so that every entry names
  one parameter of the signature.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|obj|exc|const):`(~?)([^`]+)`")
_LITERAL_BLOCK = re.compile(r"^(?P<lead>.*?)::\n\n(?P<body>(?:(?: {4,}.*)?\n)+)", re.M)
_SECTION = re.compile(r"^(Args|Arguments|Parameters|Keyword Args|Keyword Arguments):\s*$")
_GROUPED = re.compile(r"^(?P<indent>\s+)(?P<names>\*{0,2}\w+(?:,\s*\*{0,2}\w+)+):\s(?P<rest>.*)$")


def _role(match: re.Match) -> str:
    short, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


def _literal_block(match: re.Match) -> str:
    lead = match.group("lead")
    lines = match.group("body").rstrip("\n").split("\n")
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    code = "\n".join(line[indent:] for line in lines)
    head = f"{lead}:" if lead.strip() else ""
    return f"{head}\n\n```python\n{code}\n```\n\n"


def _split_grouped(text: str) -> str:
    """One argument entry a parameter (see the module's docstring)."""
    lines, out, i, in_args = text.split("\n"), [], 0, False
    while i < len(lines):
        line = lines[i]
        if not line.startswith((" ", "\t")) and line.strip():
            in_args = bool(_SECTION.match(line))
        match = _GROUPED.match(line) if in_args else None
        if not match:
            out.append(line)
            i += 1
            continue
        indent = match.group("indent")
        more = []  # the entry's continuation lines, indented deeper
        i += 1
        while i < len(lines) and lines[i].startswith(indent + " ") and lines[i].strip():
            more.append(lines[i])
            i += 1
        for name in re.split(r",\s*", match.group("names")):
            out += [f"{indent}{name}: {match.group('rest')}", *more]
    return "\n".join(out)


def markdown_of(text: str) -> str:
    """The docstring ``text`` in the Markdown and Google style that mkdocstrings reads."""
    text = _LITERAL_BLOCK.sub(_literal_block, _ROLE.sub(_role, text + "\n")).rstrip("\n")
    return _split_grouped(text)


class GnsDocstrings(griffe.Extension):
    """Rewrites every loaded object's docstring (see the module's docstring)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_of(obj.docstring.value)
