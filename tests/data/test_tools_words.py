"""`privrl.data.tools` names its parameters in messages (`` `unit` ``); `privrl data` writes
them as the flags the command line has always printed (`privrl.runs.wording.in_data_words`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from privrl.data import tools
from privrl.runs.wording import in_data_words


def _cases(tmp: Path) -> list[tuple[Callable[[], object], str]]:
    """(a bad call, the message the command line prints for it)."""
    out = tmp / "out.h5"
    table = tmp / "t.csv"
    table.write_text("ep,s,a,r,u\n0,0,0,1.0,7\n", encoding="utf-8")
    cols = "episode=ep,obs=s,action=a,reward=r,unit=u"

    def imp(source: str = "t.csv", **kw: object) -> Callable[[], object]:
        return lambda: tools.import_dataset(str(tmp / source), out, **kw)  # type: ignore[arg-type]

    return [
        (
            lambda: tools.parse_unit("user"),
            "--unit 'user' is not understood; use --unit episode (each episode its own unit) "
            "or --unit column=NAME (the column holding each episode's user)",
        ),
        (
            lambda: tools.guess_format("x.txt"),
            "cannot tell the format of 'x.txt'; pass --format parquet|csv|minari",
        ),
        (imp(units=3), "--units K goes with --unit episode|column=NAME (the unit it counts)"),
        (imp(units=0, unit="episode"), "--units must be >= 1, got 0"),
        (imp(discount=2.0), "--discount must be a finite number in [0, 1], got 2.0"),
        (imp("mini-v0", keep_columns="p"), "--keep-columns applies to Parquet/CSV tables only"),
        (
            imp("mini-v0", bandit=True),
            "--bandit applies to Parquet/CSV tables only (one row per impression)",
        ),
        (
            imp("mini-v0", action_space="discrete:2"),
            "--action-space applies to Parquet/CSV tables; a Minari or HDF5 dataset keeps its "
            "own action space",
        ),
        (
            imp("d.h5", unit="episode"),
            "--unit and --observation-space apply to tables and Minari datasets; an HDF5 "
            "dataset keeps its own",
        ),
        (imp(), "--columns is required to import a table (e.g. episode=id,obs=s,...)"),
        (
            imp(columns=cols, unit="column=user"),
            "--unit column=user conflicts with unit=u in --columns; give the unit once",
        ),
        (
            lambda: tools.import_dataset(str(table), tmp, columns=cols),
            f"--out {tmp} is a directory; give a file path (e.g. {tmp}/data.h5)",
        ),
        (
            lambda: tools.export_dataset(tmp / "d.h5", str(tmp), "csv"),
            f"--out {tmp} is a directory; give a file path (e.g. {tmp}/data.h5)",
        ),
        (
            lambda: tools.describe(tmp / "d.h5", plot=tmp),
            f"--plot {tmp} is a directory; give a file path (e.g. {tmp}/data.h5)",
        ),
    ]


@pytest.mark.parametrize("index", range(14))
def test_messages_name_parameters_and_the_command_names_flags(tmp_path: Path, index: int) -> None:
    cases = _cases(tmp_path)
    call, command_message = cases[index]
    with pytest.raises(ValueError) as library:
        call()
    message = str(library.value)
    assert "--" not in message and "`" in message, message
    with pytest.raises(ValueError) as command, in_data_words():
        call()
    assert str(command.value) == command_message
    assert type(command.value) is type(library.value)


def test_every_case_is_run(tmp_path: Path) -> None:
    assert len(_cases(tmp_path)) == 14
