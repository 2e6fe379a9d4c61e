"""`privrl data import`: the privacy unit (`--unit`), kept per-row columns (`--keep-columns`),
declared observation spaces (multi-discrete codes, finite boxes) with clipping, and no raw
Python warnings on the console."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from privrl.cli.main import main
from privrl.data.io import load_hdf5

MAPPING = "episode=ep,obs=s1|s2,action=a,reward=r,behaviour_prob=p,timestep=t"
ROWS = [
    # ep, t, s1, s2, c, a, r, p, user, tp
    (1, 0, 0.5, 2, 0, 1, 1.0, 0.5, "u1", 0.9),
    (1, 1, 0.7, 3, 1, 0, 0.0, 0.5, "u1", 0.1),
    (1, 2, 0.9, 1, 2, 1, 1.0, 0.5, "u1", 0.9),
    (2, 0, -3.0, 1, 1, 0, 0.0, 0.5, "u2", 0.2),
    (2, 1, 0.1, 9, 7, 1, 1.0, 0.5, "u2", 0.9),
    (3, 0, 0.2, 0, 0, 0, 1.0, 0.5, "u1", 0.3),
    (3, 1, 0.3, 4, 1, 1, 0.0, 0.5, "u1", 0.9),
]


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "logs.csv"
    lines = ["ep,t,s1,s2,c,a,r,p,user,tp"] + [",".join(map(str, row)) for row in ROWS]
    path.write_text("\n".join(lines) + "\n")
    return path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_bad_input(code: int, err: str, *fragments: str) -> None:
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def imp(table: Path, out: Path, *extra: str) -> list[str]:
    head = ["data", "import", str(table), "-c", MAPPING, "--action-space", "discrete:2"]
    return [*head, *extra, "--out", str(out)]


def test_unit_column_becomes_the_unit_ids(
    table: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "d.h5"
    code, _, err = run(
        imp(table, out, "--observation-space", "box:-1,1", "--unit", "column=user"), capsys
    )
    assert code == 0, err
    ds = load_hdf5(out)
    # episodes 1 and 3 belong to u1, episode 2 to u2 (labels mapped 0..k-1 in sorted order)
    assert ds.unit_ids.tolist() == [0, 1, 0]
    extra = ds.metadata.extra
    assert extra["unit_column"] == "user"
    # the number of units is never counted into the metadata
    assert "n_users" not in extra and "n_trajectories" not in extra


def test_unit_count_only_as_declared(
    table: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "d.h5"
    argv = imp(table, out, "--observation-space", "box:-1,1", "--unit", "column=user")
    code, _, err = run([*argv, "--units", "1000"], capsys)
    assert code == 0, err
    assert load_hdf5(out).metadata.extra["n_users"] == 1000  # declared, not the 2 seen


def test_unit_episode_keeps_one_unit_per_episode(
    table: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "d.h5"
    code, _, err = run(
        imp(table, out, "--observation-space", "box:-1,1", "--unit", "episode"), capsys
    )
    assert code == 0, err
    ds = load_hdf5(out)
    assert ds.unit_ids is None and ds.metadata.extra["unit"] == "episode"


@pytest.mark.parametrize(
    ("flags", "fragments"),
    [
        (["--unit", "column=nope"], ["'nope'", "not found"]),
        (["--unit", "user"], ["--unit", "column=NAME"]),
        (["--units", "5"], ["--units", "--unit"]),
        (["--keep-columns", "missing"], ["'missing'", "not found"]),
        (["--observation-space", "box:1,0"], ["low <= high"]),
        (["--observation-space", "multidiscrete:3,0"], ["positive"]),
        (["--observation-space", "box:nofile.json"], ["bounds file not found"]),
    ],
)
def test_bad_import_flags_one_error_line(
    table: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    fragments: list[str],
) -> None:
    code, _, err = run(imp(table, tmp_path / "d.h5", *flags), capsys)
    assert_bad_input(code, err, *fragments)
    assert not (tmp_path / "d.h5").exists()


def test_kept_columns_are_stored_per_transition(
    table: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "d.h5"
    code, _, err = run(
        imp(table, out, "--observation-space", "box:-1,1", "--keep-columns", "tp,c"), capsys
    )
    assert code == 0, err
    ds = load_hdf5(out)
    # the last row of each episode only gives its final observation (no next_obs columns)
    np.testing.assert_array_equal(ds.extra_columns["tp"], [0.9, 0.1, 0.2, 0.3])
    np.testing.assert_array_equal(ds.extra_columns["c"], [0, 1, 1, 0])
    assert ds.metadata.extra["extra_columns"] == ["tp", "c"]
    # they travel with subsets and are outside the ledger's content fingerprint
    np.testing.assert_array_equal(ds.subset([2, 0]).extra_columns["tp"], [0.3, 0.9, 0.1])
    plain = tmp_path / "plain.h5"
    assert run(imp(table, plain, "--observation-space", "box:-1,1"), capsys)[0] == 0
    from privrl.data.io import read_header

    assert read_header(out).content_sha256 == read_header(plain).content_sha256


def test_box_bounds_clip_and_say_how_many_only_when_some_were(
    table: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "d.h5"
    code, _, err = run(imp(table, out, "--observation-space", "box:-1,1"), capsys)
    assert code == 0, err
    ds = load_hdf5(out)
    assert ds.metadata.observation_space == spaces.Box(-1.0, 1.0, (2,), np.float64)
    assert ds.observations.min() == -1.0 and ds.observations.max() == 1.0
    note = [line for line in err.splitlines() if "clipped" in line]
    # s1 = -3.0 once, s2 in {2, 3, 9, 4}: 5 values, said to the data holder at import
    assert len(note) == 1 and "5 observation value(s)" in note[0], err
    assert "'s1' (1)" in note[0] and "'s2' (4)" in note[0], note
    # a clean import prints no clipping note at all
    wide = tmp_path / "wide.h5"
    code, _, err_wide = run(imp(table, wide, "--observation-space", "box:-100,100"), capsys)
    assert code == 0
    assert not [x for x in err_wide.splitlines() if "clipped" in x], err_wide
    # what is stored does not depend on whether (or how much) anything was clipped
    extra, extra_wide = load_hdf5(out).metadata.extra, load_hdf5(wide).metadata.extra
    assert extra["observation_clipping"] == extra_wide["observation_clipping"]
    assert not any(ch.isdigit() for ch in extra["observation_clipping"])


def test_box_bounds_per_column_from_json_and_npz(
    table: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bounds_json = tmp_path / "b.json"
    bounds_json.write_text(json.dumps({"low": [0.0, 0.0], "high": [0.8, 3.0]}))
    bounds_npz = tmp_path / "b.npz"
    np.savez(bounds_npz, low=np.array([0.0, 0.0]), high=np.array([0.8, 3.0]))
    for bounds in (bounds_json, bounds_npz):
        out = tmp_path / f"{bounds.suffix[1:]}.h5"
        code, _, err = run(imp(table, out, "--observation-space", f"box:{bounds}"), capsys)
        assert code == 0, err
        obs = load_hdf5(out).observations
        np.testing.assert_array_equal(obs.min(axis=0), [0.0, 0.0])
        np.testing.assert_array_equal(obs.max(axis=0), [0.8, 3.0])


def test_multidiscrete_codes_outside_the_space_are_refused_unless_clipping_is_asked(
    table: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "d.h5"
    argv = [
        "data", "import", str(table), "-c", "episode=ep,obs=c|s2,action=a,reward=r,timestep=t",
        "--action-space", "discrete:2", "--observation-space", "multidiscrete:3,4",
        "--out", str(out),
    ]  # fmt: skip
    # codes 7 (c) and 9, 4 (s2) are outside 3 and 4 categories: refused, naming the columns
    code, _, err = run(argv, capsys)
    assert_bad_input(code, err, "3 observation value(s)", "'c' (1)", "'s2' (2)")
    assert "--clip-out-of-space" in err and not out.exists()
    code, _, err = run([*argv, "--clip-observations"], capsys)
    assert code == 0, err
    assert "3 observation value(s)" in err and "clipped" in err
    ds = load_hdf5(out)
    assert isinstance(ds.metadata.observation_space, spaces.MultiDiscrete)
    assert ds.observations.dtype == np.int64
    # clipped to the last codes, 2 and 3
    assert ds.observations[:, 0].max() == 2 and ds.observations[:, 1].max() == 3
    assert "inferred_from_data" not in ds.metadata.extra


def test_import_and_info_print_no_raw_python_warnings(
    table: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With warnings as errors, import (which drops rows and clips) and info still succeed:
    every notice is a plain `note:` line, no Python warning is raised or printed."""
    out = tmp_path / "d.h5"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, _, err = run(imp(table, out, "--observation-space", "box:-1,1"), capsys)
        assert code == 0, err
        code_info, info_out, err_info = run(["data", "info", str(out)], capsys)
    assert code_info == 0, err_info
    assert "Warning" not in err + err_info and "warning:" not in err + err_info
    assert all(line.startswith("note: ") for line in err.splitlines() if line.strip())
    assert "n_episodes" in info_out


@pytest.fixture
def bandit(tmp_path: Path) -> tuple[Path, float]:
    """A one-step log with a uniform behaviour policy and a kept column `tp`: the target
    policy's probability of the logged action; returns the file and the exact IPS value."""
    rng = np.random.default_rng(0)
    n = 300
    x, a = rng.integers(0, 3, n), rng.integers(0, 2, n)
    r = (rng.random(n) < 0.3 + 0.4 * a).astype(float)
    tp = np.where(a == 1, 0.8, 0.2)
    tp[0] = 1.7  # outside [0, 1]: clipped to 1, never refused (the values are private)
    lines = ["ep,x,a,r,p,tp"] + [f"{i},{x[i]},{a[i]},{r[i]},0.5,{tp[i]}" for i in range(n)]
    csv = tmp_path / "bandit.csv"
    csv.write_text("\n".join(lines) + "\n")
    out = tmp_path / "bandit.h5"
    argv = [
        "data", "import", str(csv), "-c",
        "episode=ep,obs=x,action=a,reward=r,behaviour_prob=p,next_obs=x",
        "--observation-space", "discrete:3", "--action-space", "discrete:2",
        "--keep-columns", "tp", "--out", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    exact = float(np.mean(np.clip(tp, 0, 1) / 0.5 * r))
    return out, exact


def ope(estimator: str, data: Path, target: str, out: Path, eps: str = "100") -> list[str]:
    return [
        "ope", estimator, "--data", str(data), "--target-policy", target,
        "--reward-range", "0,1", "-W", "10", "--epsilon", eps, "--max-horizon", "1",
        "--gamma", "1", "--out", str(out),
    ]  # fmt: skip


@pytest.mark.parametrize("estimator", ["ips", "snips"])
def test_target_policy_column_in_ips_and_snips(
    bandit: tuple[Path, float],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    estimator: str,
) -> None:
    """`--target-policy column:tp` weights each row by tp/μ: at ε = 100 the private IPS is
    within 0.02 of the exact IPS of the clipped column (SNIPS: its self-normalised version)."""
    data, exact = bandit
    out = tmp_path / estimator
    code, _, err = run(ope(estimator, data, "column:tp", out), capsys)
    assert code == 0, err
    value = json.loads((out / "metrics.json").read_text())["value"]
    if estimator == "ips":
        assert value == pytest.approx(exact, abs=0.02)
    else:
        ds = load_hdf5(data)
        w = np.clip(ds.extra_columns["tp"], 0, 1) / ds.behaviour_probs
        assert value == pytest.approx(float(np.sum(w * ds.rewards) / np.sum(w)), abs=0.02)
    params = json.loads((out / "privacy.json").read_text())["public_parameters"]
    assert any(p["name"] == "target policy π" and p["value"] == "column:tp" for p in params)


@pytest.mark.parametrize(
    ("estimator", "target", "fragment"),
    [
        ("snips", "column:nope", "--keep-columns nope"),
        ("dr", "column:tp", "needs π(a|s) for every action"),
    ],
)
def test_target_policy_column_refusals(
    bandit: tuple[Path, float],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    estimator: str,
    target: str,
    fragment: str,
) -> None:
    code, _, err = run(ope(estimator, bandit[0], target, tmp_path / "r", eps="1"), capsys)
    assert_bad_input(code, err, fragment)


def test_feature_maps_work_on_imported_contexts(
    table: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A declared MultiDiscrete space gets one-hot blocks per column; a finite Box gets the
    Fourier basis (both need the declared, public space, never the data's range)."""
    from privrl.rl.features import make_features

    cat = tmp_path / "cat.h5"
    argv = [
        "data", "import", str(table), "-c", "episode=ep,obs=c|s2,action=a,reward=r,timestep=t",
        "--action-space", "discrete:2", "--observation-space", "multidiscrete:3,4",
        "--clip-observations", "--out", str(cat),
    ]  # fmt: skip
    assert run(argv, capsys)[0] == 0
    ds = load_hdf5(cat)
    phi = make_features("onehot", ds.metadata.observation_space)(ds.observations)
    assert phi.shape == (len(ds.observations), 7)
    np.testing.assert_array_equal(phi.sum(axis=1), 2.0)
    np.testing.assert_array_equal(phi[0], [1, 0, 0, 0, 0, 1, 0])  # codes (0, 2)
    box = tmp_path / "box.h5"
    assert run(imp(table, box, "--observation-space", "box:-1,1"), capsys)[0] == 0
    ds = load_hdf5(box)
    fourier = make_features("fourier:2", ds.metadata.observation_space)
    assert fourier(ds.observations).shape == (len(ds.observations), 9)


def test_kept_columns_survive_export_and_reimport(
    table: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "d.h5"
    assert (
        run(imp(table, out, "--observation-space", "box:-1,1", "--keep-columns", "tp"), capsys)[0]
        == 0
    )
    pq = tmp_path / "d.parquet"
    code, said, err = run(["data", "export", str(out), "--out", str(pq)], capsys)
    assert code == 0, err
    assert "--keep-columns tp" in said
    back = tmp_path / "back.h5"
    code, _, err = run(
        ["data", "import", str(pq), "-c", "episode=episode,obs=obs_0|obs_1,action=action,"
         "reward=reward,next_obs=next_obs_0|next_obs_1,terminated=terminated,"
         "truncated=truncated,behaviour_prob=behaviour_prob,timestep=timestep",
         "--keep-columns", "tp", "--out", str(back)], capsys,
    )  # fmt: skip
    assert code == 0, err
    assert load_hdf5(back).equals(load_hdf5(out))


def test_primorl_user_column_matches_the_imported_unit_column(
    table: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`privrl train primorl --unit user --user-column NAME` checks NAME against the column the
    import recorded (header only)."""
    from types import SimpleNamespace

    from privrl.config import ConfigError
    from privrl.data.io import read_header
    from privrl.systems.primorl import _check_declared

    out = tmp_path / "d.h5"
    argv = imp(table, out, "--observation-space", "box:-1,1", "--unit", "column=user")
    argv[argv.index("discrete:2")] = "box:-1:1:1"
    assert run(argv, capsys)[0] == 0
    header = read_header(out)
    task = SimpleNamespace(obs_dim=2, act_dim=1, env_id="Toy-v0")
    _check_declared(header, task, SimpleNamespace(unit="user", user_column="user"))
    with pytest.raises(ConfigError, match="came from column 'user'"):
        _check_declared(header, task, SimpleNamespace(unit="user", user_column="patient"))
