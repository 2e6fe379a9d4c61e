"""What a person reads in an 80-column terminal: every command's --help and every console
summary (sweep table, run and audit summaries, privacy report, ledger, dataset info) shows each
of its words whole — none cut to "…", folded or lost — no line is wider than the terminal, and
no example command line is broken. A word counts as cut when the 80-column rendering lacks a
word that a wide rendering of the same text has, so a new option with a long name or a long
grammar in its help fails here."""

from __future__ import annotations

import io
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from dp_accounting import dp_event
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from privrl.cli.main import _command, main
from privrl.cli.topics import TOPICS
from privrl.privacy.release import Release
from privrl.privacy.report import PrivacyReport

COLUMNS = 80
WIDE = 1000
_BOX = re.compile(r"[│╭╮╰╯─┃━┏┓┗┛┌┐└┘├┤┬┴┼╇┡┩┳┻╋]")


def _words(text: str) -> Counter[str]:
    return Counter(_BOX.sub(" ", text).split())


def cut_words(narrow: str, wide: str) -> list[str]:
    """The words of the wide rendering that the narrow one does not show whole."""
    return sorted((_words(wide) - _words(narrow)).elements())


def too_wide(text: str) -> list[str]:
    return [line for line in text.splitlines() if cell_len(line) > COLUMNS]


def broken_examples(narrow: str, wide: str) -> list[str]:
    """Example lines (`privrl ...`) of the wide rendering that the narrow one breaks."""
    shown = {line.strip(" │") for line in narrow.splitlines()}
    examples = [line.strip(" │") for line in wide.splitlines()]
    return [e for e in examples if e.startswith("privrl ") and e not in shown]


def _paths(command: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [prefix]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        out += _paths(sub, (*prefix, name))
    return out


def _help(path: tuple[str, ...], width: int, capsys: Any, monkeypatch: Any) -> str:
    monkeypatch.setenv("COLUMNS", str(width))
    assert main([*path, "--help"]) == 0
    return capsys.readouterr().out


def _render(renderable: Any, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]


def assert_whole(narrow: str, wide: str) -> None:
    assert cut_words(narrow, wide) == [], narrow
    assert too_wide(narrow) == [], narrow


# ----------------------------------------------------------------------------------- help


@pytest.mark.parametrize("path", _paths(_command()), ids=lambda p: " ".join(p) or "privrl")
def test_every_help_is_whole_at_80_columns(path, capsys, monkeypatch) -> None:
    narrow = _help(path, COLUMNS, capsys, monkeypatch)
    wide = _help(path, WIDE, capsys, monkeypatch)
    assert_whole(narrow, wide)
    assert broken_examples(narrow, wide) == [], narrow


def test_the_check_finds_a_cut_word_and_a_broken_example() -> None:
    """The detector itself: a column too narrow for its word is reported, and so is an
    example line that wraps."""
    table = Table("option", "help")
    table.add_row("--columns", "episode=COL,obs=COL|COL,action=COL,reward=COL" * 2)
    narrow, wide = _render(table, COLUMNS), _render(table, WIDE)
    assert cut_words(narrow, wide) == ["episode=COL,obs=COL|COL,action=COL,reward=COL" * 2]
    example = "privrl data import visits.csv " + "--flag value " * 6
    assert broken_examples(_render(example, COLUMNS), _render(example, WIDE)) == [example.strip()]


def test_import_help_keeps_the_grammar_whole_and_points_to_the_topics(capsys, monkeypatch) -> None:
    text = _help(("data", "import"), COLUMNS, capsys, monkeypatch)
    for token in ("--observation-space", "episode=COL,obs=COL|COL,action=COL,reward=COL"):
        assert token in text
    assert "multidiscrete:N1,N2" in text and "privrl help columns" in text
    assert "…" not in text


@pytest.mark.parametrize("topic", sorted(TOPICS))
def test_help_topics_fit_80_columns(topic, capsys) -> None:
    assert main(["help", topic]) == 0
    text = capsys.readouterr().out
    assert text.strip() and too_wide(text) == []


def test_an_unknown_help_topic_is_one_error_line(capsys) -> None:
    assert main(["help", "colums"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "columns" in err and len(err.splitlines()) == 1


# ------------------------------------------------------------------------------ summaries

DP_APVI_METRICS = (
    "optimal_value policy_value suboptimality pessimistic_value epsilon delta metric.rho E "
    "iota noise_scale known_fraction pessimistic_value_mean_V1 privacy_epsilon privacy_delta"
).split()


def _sweep_outcome(tmp_path: Path) -> tuple[Any, Any]:
    """A 4-cell dp-apvi grid (two ρ × two seeds), as `run_sweep` summarises it."""
    from privrl.runs.sweep import Sweep, SweepOptions, SweepOutcome, summarise

    sweep = Sweep(tmp_path / "sweeps" / "budgets", [], ["rho", "seed"], SweepOptions())
    rows = [
        {"system": "dp-apvi", "rho": rho, "seed": seed, "status": "ok"}
        | {m: 1.0 + i / 7 + seed for i, m in enumerate(DP_APVI_METRICS)}
        for rho in (0.5, 1.0)
        for seed in (0, 1)
    ]
    return sweep, SweepOutcome(
        total=4, ran=4, rows=rows, summary=summarise(rows, sweep, DP_APVI_METRICS)
    )


def test_sweep_summary_fits_80_columns_scalars_only(tmp_path) -> None:
    from privrl.runs.sweep import summary_table

    sweep, outcome = _sweep_outcome(tmp_path)
    table = summary_table(sweep, outcome, COLUMNS)
    narrow, wide = _render(table, COLUMNS), _render(table, WIDE)
    assert_whole(narrow, wide)
    assert "{" not in narrow and "'mean'" not in narrow  # no nested value printed as a dict
    headers = [str(c.header) for c in table.columns]
    assert headers[:2] == ["rho", "ok"]
    assert headers[2:4] == ["suboptimality", "privacy_epsilon"]  # standard metric, then ε
    left_out = [m for m in DP_APVI_METRICS if m not in headers]
    assert left_out and "results.csv" in narrow
    assert all(m in " ".join(narrow.split()) for m in left_out)  # named in the caption
    # a wider terminal shows more metrics, never more than four by default
    assert len(summary_table(sweep, outcome, 200).columns) == 2 + 4


def _report() -> PrivacyReport:
    """Releases named and parametrised like the demo's (two noise parameters of 5 digits)."""
    event = dp_event.GaussianDpEvent(14.57)
    noise = {"sigma": 65.15, "noise_multiplier": 14.57}
    release = Release(
        "transition counts n_h(s,a,s') at target ε=0.25",
        "gaussian",
        4.472,
        "l2",
        noise,
        event=event,
    )
    return PrivacyReport.build("trajectory", "replace-one", [release, release], 1e-6, system="t")


def test_privacy_report_and_ledger_tables_fit_80_columns(tmp_path) -> None:
    from privrl.data import tools
    from privrl.envs.tabular import TabularMDP, behaviour_policy_full_support
    from privrl.privacy.ledger import BudgetLedger
    from privrl.privacy.units import parse_relation, parse_unit

    mdp = TabularMDP.random(5, 3, 4, seed=3)
    data = mdp.sample(behaviour_policy_full_support(4, 4, 5, 3, 0.1), 50, rng=5).save(
        tmp_path / "a.h5"
    )
    ledger = BudgetLedger.init(
        data,
        epsilon=10,
        delta=1e-6,
        unit=parse_unit("trajectory"),
        relation=parse_relation("replace_one"),
        backend="rdp",
    )
    ledger.record(_report(), label="dp-apvi")
    ledger.record(_report(), label="a longer label for the second run of the day")
    info = tools.summary_table(tools.describe(data, None), str(data))
    for table in (_report().to_table(), ledger.to_table(), info):
        assert_whole(_render(table, COLUMNS), _render(table, WIDE))
    assert ledger.entries[0].run_id in _render(ledger.to_table(), COLUMNS)


@pytest.mark.parametrize(
    ("system", "settings"),
    [
        ("dp-apvi", {"env": "random-tabular", "episodes": 300, "rho": 1.0}),
        ("audit-dp-apvi", {"rho": 1.0, "trials": 200}),
    ],
)
def test_run_and_audit_summaries_fit_80_columns(
    system, settings, tmp_path, capsys, monkeypatch
) -> None:
    from privrl.runs import catalog, registry
    from privrl.runs.layer import RunSpec, execute, print_summary

    catalog.load()
    config = registry.get(system).Config(**settings)
    result = execute(RunSpec(system, config, tmp_path / "run", None, 0), quiet=True)
    shown = {}
    for width in (COLUMNS, WIDE):
        monkeypatch.setenv("COLUMNS", str(width))
        print_summary(tmp_path / "run", result)
        shown[width] = capsys.readouterr().out
    assert_whole(shown[COLUMNS], shown[WIDE])


def test_run_list_fits_80_columns(capsys, monkeypatch) -> None:
    shown = {}
    for width in (COLUMNS, WIDE):
        monkeypatch.setenv("COLUMNS", str(width))
        assert main(["run", "--list"]) == 0
        shown[width] = capsys.readouterr().out
    assert_whole(shown[COLUMNS], shown[WIDE])
    assert "dp-apvi" in shown[COLUMNS].split()


def _example_lines(text: str) -> list[str]:
    """The `privrl ...` lines of a help text, with `\\` continuations joined."""
    lines, pending = [], ""
    for raw in text.splitlines():
        line = f"{pending} {raw.strip()}" if pending else raw.strip()
        if line.endswith("\\"):
            pending = line[:-1].rstrip()
            continue
        pending = ""
        if line.startswith("privrl "):
            lines.append(line)
    return lines


def _help_examples() -> list[str]:
    texts = [text for _, text in TOPICS.values()]

    def walk(command: Any) -> None:
        texts.extend(t for t in (command.help, command.epilog) if t)
        for sub in getattr(command, "commands", {}).values():
            walk(sub)

    walk(_command())
    return [line for text in texts for line in _example_lines(text)]


def test_help_examples_parse() -> None:
    """The examples the helps and topics show (shortened to fit 80 columns) still parse
    against the command tree."""
    from tests.cli.test_readme_commands import _argv_variants, parse

    examples = _help_examples()
    assert any(e.startswith("privrl data import") for e in examples)
    for line in examples:
        for argv in _argv_variants(line):
            parse(_command(), argv)
