"""Code-health targets of issue 18 that a parser can check.

"No function with more than 6 positional parameters": a long positional call
(``_baseline(a, b, ..., 1.0)``) is how arguments get swapped silently, so
trailing parameters must be keyword-only (after ``*``) or grouped in a config.

"No reproduction module over 600 lines" (every module under reproductions/)
and "cli/ under 1,500 lines" (src/privrl/cli/*.py together): a reproduction that
grows past the limit is split into coherent modules (trials, report, claims), and
the CLI stays thin flags over the run layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import privrl

MAX_POSITIONAL = 6
MAX_EXPERIMENT_LINES = 600
MAX_CLI_LINES = 1500  # the total must stay below it
SRC = Path(privrl.__file__).resolve().parent
REPRODUCTIONS = Path(__file__).resolve().parents[1] / "reproductions"


def positional_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Positional-only + positional-or-keyword parameters, less a leading self/cls."""
    names = [a.arg for a in node.args.posonlyargs + node.args.args]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names)


def offenders(root: Path, limit: int = MAX_POSITIONAL) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                count = positional_count(node)
                if count > limit:
                    rel = path.relative_to(root.parent).as_posix()
                    found.append(f"{rel}:{node.lineno} {node.name} ({count})")
    return found


def test_checker_counts_positional_parameters_only() -> None:
    """The checker counts what the target names: not self, not keyword-only."""
    tree = ast.parse(
        "class C:\n"
        "    def m(self, a, b, c, d, e, f): ...\n"
        "def g(a, b, /, c, d, e, f, g): ...\n"
        "def h(a, b, c, *, d, e, f, g, h): ...\n"
        "def k(a, b, c, d, e, f, *args, **kw): ...\n"
    )
    counts = {n.name: positional_count(n) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert counts == {"m": 6, "g": 7, "h": 3, "k": 6}


def test_no_function_takes_more_than_six_positional_parameters() -> None:
    """Every function under src/privrl takes at most 6 positional parameters."""
    assert SRC.name == "privrl" and any(SRC.rglob("*.py"))
    bad = offenders(SRC)
    assert not bad, "more than 6 positional parameters (make the rest keyword-only):\n" + "\n".join(
        bad
    )


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def long_modules(root: Path, limit: int = MAX_EXPERIMENT_LINES) -> list[str]:
    """The modules below `root` longer than `limit` lines, as "path (lines)"."""
    found = []
    for path in sorted(root.rglob("*.py")):
        n = line_count(path)
        if n > limit:
            found.append(f"{path.relative_to(root.parent).as_posix()} ({n})")
    return found


def test_long_module_checker_lists_each_offender_with_its_count(tmp_path: Path) -> None:
    """At the limit passes; one line over is listed, with its line count, nested ones too."""
    root = tmp_path / "experiments"
    (root / "pkg").mkdir(parents=True)
    (root / "ok.py").write_text("x = 1\n" * MAX_EXPERIMENT_LINES)
    (root / "pkg" / "big.py").write_text("x = 1\n" * (MAX_EXPERIMENT_LINES + 1))
    (root / "notes.md").write_text("x\n" * 2000)
    assert long_modules(root) == [f"experiments/pkg/big.py ({MAX_EXPERIMENT_LINES + 1})"]


def test_no_reproduction_module_is_over_600_lines() -> None:
    """Every module under reproductions/ has at most 600 lines."""
    root = REPRODUCTIONS
    assert len(list(root.rglob("*.py"))) > 20  # the reproductions themselves, not an empty tree
    bad = long_modules(root)
    assert not bad, f"modules over {MAX_EXPERIMENT_LINES} lines (split them):\n" + "\n".join(bad)


def test_cli_is_under_1500_lines() -> None:
    """src/privrl/cli/*.py together have fewer than 1,500 lines."""
    counts = {p.name: line_count(p) for p in sorted((SRC / "cli").glob("*.py"))}
    assert "main.py" in counts
    total = sum(counts.values())
    largest = sorted(counts.items(), key=lambda kv: -kv[1])[:5]
    assert total < MAX_CLI_LINES, (
        f"src/privrl/cli/*.py has {total} lines, the target is under {MAX_CLI_LINES}; largest: "
        + ", ".join(f"{k} ({n})" for k, n in largest)
    )


def test_only_the_application_layer_draws_progress_bars() -> None:
    """Library packages report progress through a callback (`privrl.progress.Progress`); only
    `privrl.runs` and `privrl.cli` import rich's progress bars."""
    import ast

    src = Path(__file__).resolve().parents[1] / "src" / "privrl"
    drawing = []
    for path in sorted(src.rglob("*.py")):
        package = path.relative_to(src).parts[0]
        if package in ("runs", "cli"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rich.progress"):
                drawing.append(path.relative_to(src).as_posix())
    assert drawing == [], drawing
