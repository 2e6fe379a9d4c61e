"""The layer contract (`[tool.importlinter]` in pyproject.toml, checked by `make lint`) and the
README's layer list say the same thing, and the contract covers every package of privrl.

import-linter itself checks the imports; these tests check the contract's text: that the README
a newcomer reads lists the layers the linter enforces, in the same order, and that a package
added to privrl cannot escape the contract by not being named in it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "privrl"


def contracts() -> dict[str, dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}


def contract_layers() -> list[set[str]]:
    """The `layers` contract's layers, lowest first, as sets of names below `privrl.`."""
    layers = []
    for layer in reversed(contracts()["layers"]["layers"]):
        names = re.split(r"[:|]", layer)
        layers.append({n.strip().removeprefix("privrl.") for n in names})
    return layers


def readme_layers(text: str) -> list[set[str]]:
    """The numbered list after "The architecture is layered" in the README, lowest first: the
    backquoted names of each item before its parenthesis."""
    start = text.index("The architecture is layered")
    section = text[start:].split("\n\n", 2)[1]
    items = re.findall(r"^\d+\. (.*?)(?=^\d+\. |\Z)", section, flags=re.M | re.S)
    return [set(re.findall(r"`([a-z_]+)`", item.split("(", 1)[0])) for item in items]


def packages() -> set[str]:
    """privrl's top-level packages and modules (not `__init__`)."""
    found = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    found |= {p.stem for p in SRC.glob("*.py") if p.stem != "__init__"}
    return found


def test_readme_parser_reads_names_before_the_parenthesis() -> None:
    text = (
        "The architecture is layered, and so on:\n\n"
        "1. `a` (the core, not `b`);\n2. `c`, `d` (two,\n   wrapped `e`);\n3. `f`.\n\nAfter.\n"
    )
    assert readme_layers(text) == [{"a"}, {"c", "d"}, {"f"}]


def test_readme_layer_list_matches_the_contract() -> None:
    readme = readme_layers((ROOT / "README.md").read_text(encoding="utf-8"))
    assert readme == contract_layers()


def test_every_package_is_in_exactly_one_layer() -> None:
    named = [name for layer in contract_layers() for name in layer]
    assert len(named) == len(set(named)), "a package is named in two layers"
    assert set(named) == packages()


def test_privacy_is_forbidden_every_other_package() -> None:
    contract = contracts()["privacy-core"]
    assert contract["source_modules"] == ["privrl.privacy"]
    forbidden = {m.removeprefix("privrl.") for m in contract["forbidden_modules"]}
    assert forbidden == packages() - {"privacy"}


@pytest.mark.parametrize("package", ["runs", "systems", "cli"])
def test_algorithm_packages_may_not_import_the_application(package: str) -> None:
    contract = contracts()["algorithms-below-application"]
    assert f"privrl.{package}" in contract["forbidden_modules"]
    sources = {m.removeprefix("privrl.") for m in contract["source_modules"]}
    algorithms = {"offline", "online", "ope", "expert", "primorl", "audit"}
    assert sources == algorithms | {"rl", "nn", "envs", "data"}


def test_nothing_installed_may_import_the_reproductions() -> None:
    contract = contracts()["reproductions-not-installed"]
    assert contract["type"] == "forbidden"
    assert contract["source_modules"] == ["privrl"]
    assert contract["forbidden_modules"] == ["reproductions"]


def test_the_wheel_holds_no_reproduction_code() -> None:
    """The packages setuptools puts in the wheel (`[tool.setuptools.packages.find]`, found
    offline the way the build finds them) are privrl's, and `reproductions/` is outside them."""
    from setuptools import find_packages

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    find = config["tool"]["setuptools"]["packages"]["find"]
    roots = [ROOT / where for where in find.get("where", ["."])]
    found = {
        name
        for root in roots
        for name in find_packages(
            where=str(root),
            include=find.get("include", ["*"]),
            exclude=find.get("exclude", []),
        )
    }
    assert "privrl" in found and "privrl.privacy" in found
    assert all(name == "privrl" or name.startswith("privrl.") for name in found), sorted(found)
    reproductions = (ROOT / "reproductions").resolve()
    assert (reproductions / "reproduce.py").is_file()
    assert not any(reproductions.is_relative_to(root.resolve()) for root in roots)


def test_importing_the_cli_imports_no_reproduction() -> None:
    """At run time too: the CLI and the library load without the reproductions."""
    import subprocess
    import sys

    code = (
        "import sys, privrl.cli.main, privrl.runs.layer, privrl.systems.tabular; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'reproductions'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "[]"
