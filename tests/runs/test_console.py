"""The console conventions shared by command-line entry points (`privrl.runs.console`)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from privrl.runs import collect
from privrl.runs.console import console_conventions, one_line, os_error


def test_os_errors_are_one_line_naming_the_path_and_the_fix(tmp_path: Path) -> None:
    assert os_error(FileNotFoundError(2, "No such file", "x.h5")) == "file not found: x.h5"
    line = os_error(IsADirectoryError(21, "Is a directory", str(tmp_path)))
    assert line.startswith(f"{tmp_path} is a directory") and "give a file path" in line
    assert "permission denied: y" in os_error(PermissionError(13, "denied", "y"))
    assert one_line("a\n  b\tc ") == "a b c"


def test_warnings_print_as_one_line_and_are_restored(capsys: pytest.CaptureFixture) -> None:
    saved = warnings.showwarning
    with console_conventions():
        warnings.warn("two\nlines", UserWarning, stacklevel=1)
    assert warnings.showwarning is saved
    assert capsys.readouterr().err == "warning: two lines\n"


def test_recipe_flags_are_refused_before_any_build(tmp_path: Path) -> None:
    """A recipe fixes its environment: --env with --recipe is refused, and nothing is built."""
    with pytest.raises(ValueError, match="remove --env"):
        collect.collect_recipe(
            "primorl-pendulum", {"--env"}, tmp_path, seed=0, quick=True, out=None
        )
    assert not any(tmp_path.iterdir())
    assert any(
        line.startswith("primorl-pendulum")
        for line in collect.collect_recipe("list", set(), None, seed=0, quick=False, out=None)
    )
    with pytest.raises(ValueError, match="--quick applies to --recipe only"):
        collect.check_env_collect({"--quick"}, "CartPole-v1", tmp_path / "d.h5")
