"""Discrete codes outside a declared space, on every import path: refused by default with the
count and the column (the data holder's own tool, before anything is released), clipped only
with `clip_out_of_space=True` / `--clip-out-of-space`, and the "clipped" note printed only
when values were clipped. Actions as well as observations; tables, bandit logs, Minari."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from privrl.cli.main import main
from privrl.data import DatasetError, from_table, load_hdf5

# 1-based actions 1..3 declared as discrete:3 (codes 0..2): two rows hold a 3
ONE_BASED = {
    "ep": [0, 0, 0, 1, 1, 1],
    "s": [0, 1, 2, 2, 1, 0],
    "s2": [1, 2, 0, 1, 0, 1],
    "a": [1, 3, 2, 3, 1, 2],
    "r": [1.0, 0.0, 1.0, 0.0, 1.0, 0.0],
}
MAPPING = "episode=ep,obs=s,next_obs=s2,action=a,reward=r"


def _table(tmp_path: Path, columns: dict[str, list[float]], name: str = "t.csv") -> Path:
    path = tmp_path / name
    lines = [",".join(columns)]
    lines += [",".join(str(v) for v in row) for row in zip(*columns.values(), strict=True)]
    path.write_text("\n".join(lines) + "\n")
    return path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_error_line(code: int, err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), (code, err)
    assert "Traceback" not in err
    return lines[0]


# ------------------------------------------------------------------------------ actions


def _from_table(columns: dict[str, list[float]] = ONE_BASED, **options: bool):
    return from_table(
        columns,
        MAPPING,
        observation_space=spaces.Discrete(3),
        action_space=spaces.Discrete(3),
        **options,
    )


def test_one_based_action_codes_are_refused_with_the_count_and_the_column() -> None:
    with pytest.raises(DatasetError) as err:
        _from_table()
    text = str(err.value)
    assert "2 action value(s)" in text and "'a' (2)" in text
    assert "clip_out_of_space=True" in text and "--" not in text  # the library names keywords


def test_clipping_actions_needs_the_flag_warns_with_the_count_and_is_recorded() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = _from_table(clip_out_of_space=True)
    clipped = [str(w.message) for w in caught if "clipped" in str(w.message)]
    assert len(clipped) == 1 and "2 action value(s)" in clipped[0], clipped
    assert ds.actions.tolist() == [1, 2, 2, 2, 1, 2]  # the 3s became 2 (the last code)
    assert "action_clipping" in ds.metadata.extra


def test_actions_inside_the_space_print_no_clipping_note_with_or_without_the_flag() -> None:
    columns = {**ONE_BASED, "a": [0, 2, 1, 2, 0, 1]}
    for options in ({}, {"clip_out_of_space": True}):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ds = _from_table(columns, **options)
        assert not [w for w in caught if "clipped" in str(w.message)], caught
        assert ds.actions.tolist() == [0, 2, 1, 2, 0, 1]
        # the stored fact depends on the option alone, never on whether a value moved
        assert ("action_clipping" in ds.metadata.extra) == bool(options)


def test_cli_refuses_one_based_actions_and_clips_them_only_with_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = _table(tmp_path, ONE_BASED)
    out = tmp_path / "d.h5"
    argv = [
        "data", "import", str(table), "-c", MAPPING,
        "--observation-space", "discrete:3", "--action-space", "discrete:3", "--out", str(out),
    ]  # fmt: skip
    line = _one_error_line(*run(argv, capsys)[::2])
    assert "2 action value(s)" in line and "'a' (2)" in line and "--clip-out-of-space" in line
    assert not out.exists()
    code, _, err = run([*argv, "--clip-out-of-space"], capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if "clipped" in line]
    assert len(notes) == 1 and "2 action value(s)" in notes[0], err
    assert load_hdf5(out).actions.max() == 2


def test_the_old_flag_name_still_clips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = _table(tmp_path, ONE_BASED)
    out = tmp_path / "d.h5"
    argv = [
        "data", "import", str(table), "-c", MAPPING,
        "--observation-space", "discrete:3", "--action-space", "discrete:3",
        "--clip-observations", "--out", str(out),
    ]  # fmt: skip
    code, _, err = run(argv, capsys)
    assert code == 0, err
    assert load_hdf5(out).actions.max() == 2


def test_import_help_names_the_flag_for_actions_too(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["data", "import", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--clip-out-of-space" in text and "action codes" in text and "refused" in text


# ----------------------------------------------------------------------------- bandit log


def test_bandit_positions_are_counted_once_per_row() -> None:
    """A bandit row stores its context twice (observation and final observation); the refusal
    counts rows, so 1-based positions 1..3 under discrete:3 give the number of rows holding
    a 3."""
    log = {"item": [0, 1, 2, 1], "pos": [1, 3, 2, 3], "click": [0, 1, 0, 0]}
    with pytest.raises(DatasetError, match=r"2 observation value\(s\).*'pos' \(2\)"):
        from_table(
            log,
            "action=item,reward=click,position=pos",
            bandit=True,
            observation_space=spaces.Discrete(3),
            action_space=spaces.Discrete(3),
        )
    with pytest.raises(DatasetError, match=r"1 action value\(s\).*'item' \(1\)"):
        from_table(
            {**log, "pos": [0, 2, 1, 2]},
            "action=item,reward=click,position=pos",
            bandit=True,
            observation_space=spaces.Discrete(3),
            action_space=spaces.Discrete(2),
        )


# ------------------------------------------------------------------------------ Minari


def test_minari_observation_codes_are_refused_with_the_count_unless_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("minari")
    from privrl.data import DatasetMetadata, TrajectoryDataset, export_minari

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    ds = TrajectoryDataset(
        observations=np.array([0, 1, 3, 1, 4, 2]),  # two values (3, 4) outside discrete:3
        actions=np.array([0, 1, 0, 1]),
        rewards=np.zeros(4),
        terminated=np.array([False, True, False, True]),
        truncated=np.zeros(4, bool),
        episode_offsets=np.array([0, 2, 4]),
        metadata=DatasetMetadata(
            observation_space=spaces.Discrete(5), action_space=spaces.Discrete(2)
        ),
    )
    export_minari(ds, "privrl/codes-v0")
    out = tmp_path / "m.h5"
    argv = ["data", "import", "privrl/codes-v0", "--observation-space", "discrete:3"]
    line = _one_error_line(*run([*argv, "--out", str(out)], capsys)[::2])
    assert "2 observation value(s)" in line and "--clip-out-of-space" in line
    code, _, err = run([*argv, "--clip-out-of-space", "--out", str(out)], capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if "clipped" in line]
    assert len(notes) == 1 and "2 observation value(s)" in notes[0], err
    assert load_hdf5(out).observations.max() == 2
    code, _, err = run([*argv[:3], "--observation-space", "discrete:5", "--out", str(out)], capsys)
    assert code == 0 and "clipped" not in err, err
    # a Minari dataset keeps its own action space: --action-space is refused, not ignored
    refused = run([*argv[:3], "--action-space", "discrete:2", "-o", str(out)], capsys)
    line = _one_error_line(*refused[::2])
    assert "--action-space" in line and "Minari" in line
