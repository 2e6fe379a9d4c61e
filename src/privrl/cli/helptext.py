"""Help text as the terminal should show it.

Typer keeps the single line breaks of a docstring after its first paragraph, and rich then
wraps those lines again to the terminal's width, which leaves ragged half-empty lines. Here
every paragraph's prose lines are joined (so rich wraps them once), while indented lines
(examples) and bullet items keep their own lines.

The option panels themselves are drawn by `privrl.runs.helppanel` (nothing in them is cut at
80 columns); `privrl.cli.main` installs it.
"""

from __future__ import annotations

import inspect
from typing import Any

_BULLETS = ("- ", "* ", "• ")


def _keeps_own_line(line: str) -> bool:
    return line[:1].isspace() or line.startswith(_BULLETS) or line.startswith("\b")


def reflow(text: str) -> str:
    """Join the prose lines of each paragraph of `text` (a docstring or help string)."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    out = []
    for paragraph in paragraphs:
        lines = paragraph.split("\n")
        merged = [lines[0]]
        for line in lines[1:]:
            continues_item = merged[-1].startswith(_BULLETS) and line[:1].isspace()
            if continues_item:
                merged[-1] += " " + line.strip()
            elif _keeps_own_line(line) or _keeps_own_line(merged[-1]):
                merged.append(line)
            else:
                merged[-1] += " " + line
        out.append("\n".join(merged))
    return "\n\n".join(out)


def reflow_tree(command: Any) -> Any:
    """Reflow the help of a click command and of all its subcommands, in place."""
    if getattr(command, "help", None):
        command.help = reflow(command.help)
    for sub in getattr(command, "commands", {}).values():
        reflow_tree(sub)
    return command
