"""Packaging: light imports of the library, one version, the type marker, the license.

`import privrl` and the privacy core must not load the command line's or the plots' packages
(typer, rich, matplotlib) nor Ray: a user's script pays only for what it uses. Each check runs
in a fresh interpreter, since this test process has imported them already.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import privrl

ROOT = Path(__file__).resolve().parents[1]
SRC = Path(privrl.__file__).resolve().parent
HEAVY = ("typer", "rich", "matplotlib", "ray")


def loaded_after(module: str) -> list[str]:
    """The HEAVY packages present in sys.modules after importing `module` in a fresh process."""
    code = (
        f"import sys, json, {module}\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(out.stdout)


def test_the_probe_sees_a_heavy_import() -> None:
    """The check can fail: a module that loads rich is reported."""
    assert "rich" in loaded_after("rich.table")


@pytest.mark.parametrize(
    "module",
    [
        "privrl",
        "privrl.privacy",
        "privrl.config",
        "privrl.data",
        "privrl.data.tools",
        "privrl.offline",
        "privrl.ope",
        "privrl.algorithm",
    ],
)
def test_library_imports_stay_light(module: str) -> None:
    assert loaded_after(module) == []


def test_one_version() -> None:
    """pyproject reads the version from privrl.__version__ (no second copy)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "privrl.__version__"}
    assert privrl.__version__.count(".") == 2


def test_typed_marker_ships() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert (SRC / "py.typed").is_file()
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["privrl"]


def test_torch_is_a_range_and_ci_pins_it() -> None:
    """The library accepts a range of torch; `make install` pins the wheel CI tests."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    torch = [d for d in project["project"]["dependencies"] if d.startswith("torch")]
    assert len(torch) == 1 and ">=" in torch[0] and "==" not in torch[0]
    pins = (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines()
    assert "torch==2.13.0" in pins
    assert "-c constraints.txt" in (ROOT / "Makefile").read_text(encoding="utf-8")


def test_license_matches_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.lstrip().startswith("Apache License")
    assert "Version 2.0, January 2004" in text


def test_every_top_level_name_resolves_to_its_family_s_object() -> None:
    """`privrl.X` is the object its family exports (loaded on first use), and an unknown name
    is an AttributeError."""
    import importlib

    import privrl

    for name in privrl.__all__:
        if name == "__version__":
            continue
        module = importlib.import_module(privrl._EXPORTS[name])
        assert getattr(privrl, name) is getattr(module, name), name
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        privrl.Nope  # noqa: B018
