"""`privrl account` / `privrl calibrate` write the calculator's parameters as their flags."""

from __future__ import annotations

import inspect
import json

import pytest
import typer

from privrl.cli import account as account_cli
from privrl.cli.main import main
from privrl.privacy import calculator
from privrl.privacy.limits import InputError
from privrl.runs.wording import (
    CALCULATOR_FLAGS,
    calculator_notes,
    in_calculator_words,
    in_mapped_words,
    mapped_words,
)


def test_mapped_words_writes_mapped_parameters_as_flags_and_leaves_the_rest() -> None:
    flags = {"noise_multiplier": "--noise-multiplier", "mechanism": "--mechanism"}
    text = "`noise_multiplier` is not for `mechanism=zcdp`; see `other` and `x=1`"
    assert mapped_words(text, flags) == (
        "--noise-multiplier is not for --mechanism zcdp; see `other` and `x=1`"
    )
    phrases = (("use `noise_multiplier` >=", "use -z >="),)  # phrases come first
    assert mapped_words("use `noise_multiplier` >= 2, not `mechanism`", flags, phrases) == (
        "use -z >= 2, not --mechanism"
    )


def test_in_mapped_words_keeps_the_exception_and_rewrites_its_message() -> None:
    with pytest.raises(InputError) as err, in_mapped_words({"steps": "--steps"}):
        raise InputError("`steps` must be >= 1, got 0", "second")
    assert err.type is InputError
    assert err.value.args == ("--steps must be >= 1, got 0", "second")


def test_every_calculator_parameter_has_its_commands_flag() -> None:
    """The mapping covers each parameter of `account` / `calibrate`, and each flag it names is
    one the commands declare."""
    params = set(inspect.signature(calculator.account).parameters)
    params |= set(inspect.signature(calculator.calibrate).parameters)
    assert params == set(CALCULATOR_FLAGS)
    declared: set[str] = set()
    for command in (account_cli.account, account_cli.calibrate):
        for p in inspect.signature(command).parameters.values():
            if isinstance(p.default, typer.models.OptionInfo):
                declared.update(p.default.param_decls)
    assert set(CALCULATOR_FLAGS.values()) <= declared


def test_calculator_errors_in_command_words() -> None:
    with pytest.raises(InputError, match=r"^give exactly one of --steps .* --noise-multiplier"):
        with in_calculator_words():
            calculator.calibrate(1.0)
    with pytest.raises(InputError, match=r"use -z >= .* larger --epsilon / smaller"):
        with in_calculator_words():
            calculator.calibrate(1.0, noise_multiplier=1e-6)


def test_a_skipped_pld_note_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    result = calculator_notes(calculator.account(noise_multiplier=0.1, steps=20))
    notes = [row["note"] for row in result["results"] if row.get("note")]
    assert notes and notes[0].endswith("--backend pld forces it")
    assert main(["account", "-z", "0.1", "-T", "20", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["results"]
    assert any(str(r.get("note", "")).endswith("--backend pld forces it") for r in rows)


def test_a_bad_calculator_flag_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["account", "-m", "approx", "--epsilon0", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: --delta0 must be given and in (0, 1) for --mechanism approx"
