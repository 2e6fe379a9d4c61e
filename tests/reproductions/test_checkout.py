"""`privrl reproduce` finds the reproductions of the checkout it runs in (they are not
installed), writes to that checkout's docs/reproductions, and outside a checkout says what to do
in one `error:` line with exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest

import privrl
from privrl.cli.main import main
from privrl.runs import checkout

ROOT = Path(__file__).resolve().parents[2]


def fake_checkout(root: Path) -> Path:
    (root / "reproductions").mkdir(parents=True)
    (root / "reproductions" / "reproduce.py").write_text("")
    (root / "pyproject.toml").write_text("")
    return root


def test_the_checkout_is_found_from_a_subdirectory(tmp_path: Path) -> None:
    root = fake_checkout(tmp_path / "repo")
    deep = root / "docs" / "deeper"
    deep.mkdir(parents=True)
    assert checkout.find_checkout(deep) == root
    assert checkout.find_checkout(root) == root


def test_a_folder_without_pyproject_is_not_a_checkout(tmp_path: Path) -> None:
    (tmp_path / "reproductions").mkdir()
    (tmp_path / "reproductions" / "reproduce.py").write_text("")
    assert checkout.find_checkout(tmp_path) is None


def test_outside_a_checkout_the_source_tree_is_the_fallback(tmp_path: Path) -> None:
    root = fake_checkout(tmp_path / "repo")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    source = root / "src" / "privrl" / "__init__.py"
    assert checkout.find_checkout(elsewhere, source) == root
    assert checkout.find_checkout(elsewhere, tmp_path / "site" / "privrl" / "__init__.py") is None


def test_this_checkout_is_found_from_anywhere_by_its_source_tree(tmp_path: Path) -> None:
    """Run from an unrelated directory, the command still finds the checkout privrl was
    imported from (here: this one), and its reports default to that checkout's docs."""
    module = checkout.load_reproductions(tmp_path)
    assert Path(module.__file__).resolve() == ROOT / "reproductions" / "reproduce.py"
    assert module.REPORTS == ROOT / "docs" / "reproductions"


def test_reproduce_outside_a_checkout_is_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    installed = tmp_path / "site-packages" / "privrl" / "__init__.py"
    monkeypatch.setattr(privrl, "__file__", str(installed))
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "--list"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: privrl reproduce runs from a checkout")
    assert "clone the repository and run the command from inside it" in lines[0]
    assert captured.out == ""


def test_reproduce_list_works_from_the_checkout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT / "docs")
    assert main(["reproduce", "--list"]) == 0
    assert "gpope-accounting" in capsys.readouterr().out
