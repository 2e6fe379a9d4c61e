"""Report prose from markdown templates.

A template file holds named fragments; each starts at a line ``%% name`` and runs to the next
such line (trailing blank lines dropped; text before the first marker is a comment). Fragments
are `string.Template` text: ``$name`` or ``${name}`` is filled from a mapping (``$$`` is a
literal dollar); a value may span lines (a table, a list) and is spliced in as it is. A line
that is only a field, ``$name``, whose value is the empty string disappears entirely, so an
optional paragraph is a field that the code fills with a fragment or with "". Tables come from
`table`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from string import Template
from typing import Any

_MARKER = re.compile(r"^%% (\w+)$")
_LONE_FIELD = re.compile(r"^\$(?:(\w+)|\{(\w+)\})$")


class Fragments:
    """The fragments of one template file; ``fragments.fill(name, **fields)`` renders one."""

    def __init__(self, text: str) -> None:
        self._parts: dict[str, str] = {}
        name: str | None = None
        lines: list[str] = []
        for line in [*text.split("\n"), "%% _end"]:
            match = _MARKER.match(line)
            if match is None:
                lines.append(line)
                continue
            if name is not None:
                if name in self._parts:
                    raise ValueError(f"fragment {name!r} defined twice")
                self._parts[name] = "\n".join(lines).rstrip("\n")
            name, lines = match.group(1), []

    def names(self) -> list[str]:
        return list(self._parts)

    def fill(self, name: str, fields: Mapping[str, Any] | None = None, **more: Any) -> str:
        """Fragment `name` with its fields filled from `fields` and `more`; every field must be
        given (a missing one is a KeyError)."""
        values = {**(fields or {}), **more}
        kept = [line for line in self._parts[name].split("\n") if not _is_empty_field(line, values)]
        return Template("\n".join(kept)).substitute(values)


def _is_empty_field(line: str, values: Mapping[str, Any]) -> bool:
    match = _LONE_FIELD.match(line)
    return match is not None and values.get(match.group(1) or match.group(2)) == ""


@cache
def fragments(path: str | Path) -> Fragments:
    """The fragments of the template file at `path` (read once)."""
    return Fragments(Path(path).read_text(encoding="utf-8"))


def beside(module_file: str, name: str) -> Fragments:
    """The fragments of template file `name` in the folder of `module_file` (``__file__``)."""
    return fragments(Path(module_file).with_name(name))


def row(cells: Iterable[Any]) -> str:
    """One markdown table row: ``| a | b |``."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


def table(header: Sequence[Any], rows: Iterable[Iterable[Any]]) -> str:
    """A markdown table: the header row, a ``|---|`` rule, then one line per row."""
    lines = [row(header), "|" + "---|" * len(header)]
    lines.extend(row(r) for r in rows)
    return "\n".join(lines)
