"""Code-health targets of issue 18 that a parser can check.

"No function with more than 6 positional parameters": a long positional call
(``_baseline(a, b, ..., 1.0)``) is how arguments get swapped silently, so
trailing parameters must be keyword-only (after ``*``) or grouped in a config.
"""

from __future__ import annotations

import ast
from pathlib import Path

import privrl

MAX_POSITIONAL = 6
SRC = Path(privrl.__file__).resolve().parent


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
