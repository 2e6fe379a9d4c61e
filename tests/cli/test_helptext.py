"""Help texts reach the terminal as paragraphs: prose lines joined, examples and bullets kept."""

from __future__ import annotations

import pytest

from privrl.cli.helptext import reflow
from privrl.cli.main import main

DOC = """Summary line.

    Prose that the source
    wraps at 100 columns
    goes on.

    Examples:

      privrl train x --a 1
      privrl train y --b 2

    - a bullet that
      continues
    - another
    """


def test_reflow_joins_prose_and_keeps_examples_and_bullets() -> None:
    assert reflow(DOC).split("\n\n") == [
        "Summary line.",
        "Prose that the source wraps at 100 columns goes on.",
        "Examples:",
        "  privrl train x --a 1\n  privrl train y --b 2",
        "- a bullet that continues\n- another",
    ]


def test_reflow_is_idempotent() -> None:
    assert reflow(reflow(DOC)) == reflow(DOC)


def test_command_help_is_not_broken_mid_sentence(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["train", "expert-dp", "--help"]) == 0
    out = capsys.readouterr().out
    # the docstring breaks this sentence after "training"; the help must not
    assert "releases stable trajectory prefixes; training (Algorithm 3) takes" in out
