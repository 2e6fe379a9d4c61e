"""Typer's rich help, redrawn for an 80-column terminal: the Options/Arguments panels keep every
option name and type whole. Used by the `privrl` command line (`use_options_panel`).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

# Typer's own panel gives each of an option's spellings (long, short, negative, negative short)
# its own column and lets rich shrink every column alike, so at 80 columns a long negative
# (`--no-privatize-rewards`) is cut to `--no-privatize-re…` and the help is squeezed into ~20
# characters. This panel keeps the names and the type whole (no wrapping) and gives the help
# all the width that is left: the negative goes on its own line under the positive, and a long
# list of choices moves from the type column into the help.

LONG_TYPE = 12  # a type label longer than this (a list of choices) moves into the help


def _names(param: Any) -> Text:
    """`--episodes -n` (and `--no-x` on a line of its own), or an argument's name."""
    from typer.core import TyperArgument
    from typer.rich_utils import highlighter, negative_highlighter

    if isinstance(param, TyperArgument):
        return Text(param.display_name_raw, style="bold cyan")
    longs = [o for o in param.opts if o.startswith("--")]
    shorts = [o for o in param.opts if not o.startswith("--")]
    names = highlighter(Text(" ".join(longs + shorts)))
    if param.secondary_opts:
        names.append("\n")
        names.append_text(negative_highlighter(Text(" ".join(param.secondary_opts))))
    return names


def _type_and_choices(param: Any, ctx: Any) -> tuple[Text, str | None]:
    """The type label for its column, and the choices when they are too long for it."""
    from typer.rich_utils import types_highlighter

    label = param.display_type_rich(ctx=ctx) or ""
    if len(label) > LONG_TYPE and "|" in label:  # `<a|b|c>`: the choices
        return types_highlighter(Text("<choice>")), "one of: " + ", ".join(
            label.strip("<>").split("|")
        )
    range_str = getattr(param, "_get_number_range_help_str", lambda: None)()
    if range_str:
        label += f" [{range_str}]"
    return types_highlighter(Text(label)), None


def options_panel(
    *, name: str, params: list[Any], ctx: Any, markup_mode: Any, console: Console
) -> None:
    """Print an Options/Arguments panel whose names and types are never cut (the drop-in for
    typer's `_print_options_panel`, with the same keywords)."""
    from typer import rich_utils

    if not params:
        return
    table = Table(show_header=False, expand=True, box=None, pad_edge=False, padding=(0, 1))
    marked = any(param.required for param in params)
    if marked:
        table.add_column(no_wrap=True)  # the required marker
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_column(ratio=1)
    for param in params:
        kind, choices = _type_and_choices(param, ctx)
        text: Any = rich_utils._get_parameter_help(param=param, ctx=ctx, markup_mode=markup_mode)
        if choices:
            text = Group(text, Text(choices, style=rich_utils.STYLE_OPTION_HELP))
        row = [_names(param), kind, text]
        if marked:
            star = rich_utils.REQUIRED_SHORT_STRING if param.required else ""
            row.insert(0, Text(star, style=rich_utils.STYLE_REQUIRED_SHORT))
        table.add_row(*row)
    console.print(
        Panel(
            table,
            border_style=rich_utils.STYLE_OPTIONS_PANEL_BORDER,
            title=name,
            title_align=rich_utils.ALIGN_OPTIONS_PANEL,
        )
    )


def use_options_panel() -> None:
    """Make typer's rich help draw its option panels with `options_panel` (an older typer,
    whose parameters have no `display_type_rich`, keeps its own panel)."""
    from typer import core, rich_utils

    if hasattr(core.TyperOption, "display_type_rich") and hasattr(
        rich_utils, "_print_options_panel"
    ):
        rich_utils._print_options_panel = options_panel  # type: ignore[assignment]
