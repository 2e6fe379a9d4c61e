"""The documentation and the code are self-contained: no citation of files that are not in the
repository (a design document, per-paper specification files) and no internal paper numbers.
Papers are cited by authors, title and year; a decision is restated where it is relied on."""

from __future__ import annotations

import re
from pathlib import Path

import privrl

ROOT = Path(__file__).resolve().parents[1]
SRC = Path(privrl.__file__).resolve().parent

FORBIDDEN = re.compile(
    r"DESIGN\.md"  # the design document outside the repository
    r"|\bspecs/"  # its per-paper specification files ...
    r"|\bspecs?\s+`?\w+\.md"  # ... also cited as "spec sdp_pe.md"
    r"|\bpaper\s+000\b"  # an internal number for a paper
    r"|/work/shared\b"  # a machine path
)

# Nothing is excluded: the library, the reproductions, their templates, the guides and the
# committed reports are all scanned.
EXCLUDED: tuple[Path, ...] = ()


def offending_lines(text: str) -> list[tuple[int, str]]:
    return [
        (n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if FORBIDDEN.search(line)
    ]


def scanned_files() -> list[Path]:
    files = [*SRC.rglob("*.py"), *(ROOT / "reproductions").rglob("*.py")]
    files += [*(ROOT / "reproductions").rglob("*.md.tmpl")]  # report templates
    files += [*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]
    return sorted(f for f in files if not any(f.is_relative_to(e) for e in EXCLUDED))


def test_the_checker_finds_each_kind_of_reference() -> None:
    text = (
        "see DESIGN.md\n"
        "as in `specs/primorl.md`\n"
        "(spec sdp_pe.md, decision)\n"
        "paper 000, Table 1\n"
        "/work/shared/STYLE.md\n"
        "RunSpec(...) and a feature spec, paper 2000\n"
    )
    assert [n for n, _ in offending_lines(text)] == [1, 2, 3, 4, 5]


def test_the_scan_covers_the_library_and_the_guides() -> None:
    files = scanned_files()
    assert SRC / "privacy" / "clipping.py" in files
    assert ROOT / "reproductions" / "reproduce.py" in files
    assert any(f.name.endswith(".md.tmpl") for f in files)
    assert ROOT / "docs" / "privacy.md" in files
    assert any(f.is_relative_to(ROOT / "docs" / "reproductions") for f in files)


def test_no_reference_to_files_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(ROOT).as_posix()}:{n}: {line}"
        for path in scanned_files()
        for n, line in offending_lines(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "\n".join(found)
