"""Every `privrl …` command line shown in README.md and in docs/*.md code blocks still parses
against the real command tree, so a flag or command that is renamed or removed fails here.

The lines are parsed, not run (they train for hours): each goes through click's
`make_context`, which refuses an unknown command, an unknown option, a bad choice, a value of
the wrong type and a missing required option. Paths are placeholders (parsing opens no file).
Lines continued with `\\` are joined; `# comments` are dropped; `A | B` lists alternatives.
Commands named in the README's prose (`privrl train dp-apvi`) must resolve to a command.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from privrl.cli.main import app, click_exceptions

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_COMMAND = re.compile(r"^(?:\$ )?privrl(?:\s|$)")
_INLINE = re.compile(r"`(privrl(?: [a-z][\w-]*)*)[^`]*`")


def _code_lines(path: Path) -> list[tuple[str, str]]:
    """(file:line, command line) for each `privrl …` line in the fenced code blocks of `path`."""
    found, in_block, pending, start = [], False, "", 0
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if raw.lstrip().startswith("```"):
            in_block, pending = not in_block, ""
            continue
        if not in_block:
            continue
        line = raw.strip()
        if pending:
            line = f"{pending} {line}"
        else:
            start = number
        if line.endswith("\\"):
            pending = line[:-1].rstrip()
            continue
        pending = ""
        if _COMMAND.match(line):
            found.append((f"{path.name}:{start}", line.removeprefix("$ ")))
    return found


def _argv_variants(line: str) -> list[list[str]]:
    """The argument lists of a command line (without `privrl`): comments dropped, `A | B | C`
    expanded into one list per alternative."""
    tokens = shlex.split(line, comments=True)[1:]
    if "|" not in tokens:
        return [tokens]
    groups: list[list[str]] = [[]]
    for token in tokens:
        if token == "|":
            groups.append([])
        else:
            groups[-1].append(token)
    prefix, first = groups[0][:-1], groups[0][-1:]
    return [prefix + first] + [prefix + group for group in groups[1:]]


CASES = [
    pytest.param(argv, id=f"{where} {' '.join(argv)}"[:120])
    for path in DOCS
    for where, line in _code_lines(path)
    for argv in _argv_variants(line)
]


@pytest.fixture(scope="module")
def root() -> typer.core.TyperGroup:
    return typer.main.get_command(app)


def _walk(root, argv: list[str]):
    """Descend through the groups named at the front of `argv`: (command, its context's parent,
    the command's name, the arguments left for it)."""
    command, parent, name, rest = root, None, "privrl", list(argv)
    while hasattr(command, "get_command") and rest and not rest[0].startswith("-"):
        parent = command.context_class(command, info_name=name, parent=parent)
        sub = command.get_command(parent, rest[0])
        assert sub is not None, f"no command {rest[0]!r} under {parent.command_path!r}"
        command, name, rest = sub, rest[0], rest[1:]
    return command, parent, name, rest


def parse(root, argv: list[str]) -> dict[str, object]:
    """The parameters of `privrl ARGV` as click parses them; raises click's UsageError (or
    BadParameter, NoSuchOption, MissingParameter) if the line does not parse."""
    command, parent, name, rest = _walk(root, argv)
    try:
        ctx = command.make_context(name, rest, parent=parent)
    except typer.Exit as exc:  # --help / --version: printed and exited, like the real command
        assert exc.exit_code == 0
        return {}
    if hasattr(command, "get_command"):  # a group is shown as its help: nothing may be left
        assert not ctx.args and not getattr(ctx, "_protected_args", []), argv
    return dict(ctx.params)


def _placeholder(value: object) -> bool:
    text = str(value)
    return text.isupper() or "…" in text or "$" in text


def test_the_docs_show_commands_of_every_family() -> None:
    """The extraction finds the README's commands (a broken extraction must not pass silently)."""
    readme = {line.split()[1] for _, line in _code_lines(ROOT / "README.md") if " " in line}
    assert {
        "account",
        "calibrate",
        "data",
        "ledger",
        "train",
        "ope",
        "online",
        "reproduce",
    } <= readme
    assert len(CASES) >= 30


@pytest.mark.parametrize("argv", CASES)
def test_documented_command_line_parses(root, argv: list[str]) -> None:
    """The documented line parses; a named reproduction or recipe exists."""
    from privrl.runs.recipes import RECIPES
    from reproductions.reproduce import REPRODUCTIONS

    params = parse(root, argv)
    if argv[:1] == ["reproduce"] and params.get("target") and not _placeholder(params["target"]):
        assert params["target"] in {*REPRODUCTIONS, "all"}
    if argv[:2] == ["data", "collect"] and params.get("recipe") not in (None, "list"):
        assert params["recipe"] in RECIPES


def _inline_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return sorted({m.group(1) for m in _INLINE.finditer(text)})


@pytest.mark.parametrize("line", _inline_commands())
def test_command_named_in_the_readme_exists(root, line: str) -> None:
    words = [w for w in line.split()[1:] if not w.isupper()]  # `privrl reproduce ID`
    command, _, _, rest = _walk(root, words)
    assert not rest or not hasattr(command, "get_command"), f"{line!r}: no command {rest[0]!r}"
    if words[:1] == ["reproduce"] and rest:
        from reproductions.reproduce import REPRODUCTIONS

        assert rest[0] in REPRODUCTIONS


@pytest.mark.parametrize(
    "argv",
    [
        ["account", "--noise-multiplyer", "1"],  # a renamed flag
        ["train", "dp-apvi-old", "--rho", "1"],  # a renamed command
        ["data", "import", "t.csv", "--format", "xlsx", "--out", "t.h5"],  # a removed choice
        ["calibrate", "--delta", "1e-5"],  # a required option dropped from the line
    ],
)
def test_a_line_that_no_longer_parses_fails(root, argv: list[str]) -> None:
    """The check can fail: the parser refuses what the commands no longer accept."""
    with pytest.raises((click_exceptions.UsageError, AssertionError)):
        parse(root, argv)
