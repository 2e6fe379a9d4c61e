"""Contextual-bandit logs as a first-class input: an Open Bandit Dataset-shaped log (one row
per impression: item, 1-based position, click, propensity, user features; no next_obs)
imported with `--bandit` / `from_table(bandit=True)` becomes one-step episodes with horizon
1 declared, and `privrl ope snips` runs on it with no hand reshaping and no --max-horizon."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from privrl.cli.main import main
from privrl.data import DatasetError, from_table, import_table, load_hdf5
from privrl.data.bandit_log import BanditColumns, parse_bandit_columns
from privrl.ope import IPS, SNIPS, IPSConfig, SNIPSConfig, bandit
from privrl.privacy.noise import NoiseSource

N_ITEMS, LEN_LIST = 6, 3
MAPPING = "position=position,action=item_id,reward=click,behaviour_prob=propensity_score"


def obd_log(n: int = 400, seed: int = 0) -> dict[str, np.ndarray]:
    """OBD's columns: a uniform-random logging policy over 6 items, 1-based positions."""
    rng = np.random.default_rng(seed)
    item = rng.integers(0, N_ITEMS, n)
    return {
        "timestamp": np.arange(n) * 7 + 1_000,
        "item_id": item,
        "position": rng.integers(1, LEN_LIST + 1, n),
        "click": (rng.random(n) < 0.05 + 0.03 * item).astype(np.int64),
        "propensity_score": np.full(n, 1.0 / N_ITEMS),
        "user_feature_0": rng.integers(0, 4, n),
    }


def write(log: dict[str, np.ndarray], path: Path) -> Path:
    import pyarrow as pa

    table = pa.table(log)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, path)
    else:
        import pyarrow.csv as pcsv

        pcsv.write_csv(table, path)
    return path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --------------------------------------------------------------------------------- layout


def test_each_impression_is_a_one_step_episode_with_horizon_one_declared() -> None:
    log = obd_log(50)
    ds = from_table(
        log,
        "obs=user_feature_0,position=position,action=item_id,reward=click,"
        "behaviour_prob=propensity_score",
        bandit=True,
        observation_space=spaces.MultiDiscrete([4, LEN_LIST], start=[0, 1]),
        action_space=spaces.Discrete(N_ITEMS),
    )
    assert ds.n_episodes == 50 and list(ds.episode_lengths) == [1] * 50
    tr = ds.transitions()
    # the observation is (context..., position), in row order; the final one repeats it
    np.testing.assert_array_equal(tr.observations[:, 0], log["user_feature_0"])
    np.testing.assert_array_equal(tr.observations[:, 1], log["position"])
    np.testing.assert_array_equal(tr.next_observations, tr.observations)
    np.testing.assert_array_equal(ds.actions, log["item_id"])
    np.testing.assert_array_equal(ds.rewards, log["click"])
    np.testing.assert_array_equal(ds.behaviour_probs, log["propensity_score"])
    assert ds.terminated.all() and not ds.truncated.any()
    md = ds.metadata
    assert md.horizon == 1 and md.discount == 1.0
    assert md.extra["bandit"]["context_columns"] == ["user_feature_0"]
    assert md.extra["bandit"]["position_column"] == "position"
    assert "inferred_from_data" not in md.extra


def test_a_context_free_log_declares_discrete_one_and_ids_must_be_unique() -> None:
    log = {"id": [5, 3, 9], "a": [0, 1, 1], "r": [1.0, 0.0, 1.0]}
    ds = from_table(
        log, "episode=id,action=a,reward=r", bandit=True, action_space=spaces.Discrete(2)
    )
    assert ds.metadata.observation_space == spaces.Discrete(1)
    assert ds.observations.tolist() == [0] * 6
    assert "inferred_from_data" not in ds.metadata.extra
    with pytest.raises(DatasetError, match=r"1 id\(s\) of column 'id'.*more than one row"):
        from_table({**log, "id": [5, 5, 9]}, "episode=id,action=a,reward=r", bandit=True)


def test_bandit_mappings_refuse_transition_keys_and_a_longer_horizon() -> None:
    with pytest.raises(DatasetError, match="no next_obs, flags or timestep"):
        parse_bandit_columns("obs=x,next_obs=x,action=a,reward=r")
    with pytest.raises(DatasetError, match=r"missing required key\(s\) \['reward'\]"):
        parse_bandit_columns("obs=x,action=a")
    cols = parse_bandit_columns("obs=x|y,action=a,reward=r,position=p")
    assert cols == BanditColumns(action="a", reward="r", obs=("x", "y"), position="p")
    assert cols.context_columns() == ["x", "y", "p"]
    assert parse_bandit_columns(cols.to_string()) == cols
    log = {"x": [0, 1], "a": [0, 1], "r": [1.0, 0.0]}
    with pytest.raises(DatasetError, match="horizon is 1, not 5"):
        from_table(log, "obs=x,action=a,reward=r", bandit=True, horizon=5)


def test_imported_log_and_obp_arrays_give_the_same_private_release(tmp_path: Path) -> None:
    """The imported CSV evaluated by SNIPS and the same log as OBP arrays (`ope.bandit`), same
    insecure seed: identical value and interval, so the import reshapes nothing wrongly."""
    log = obd_log(500)
    ds = import_table(
        write(log, tmp_path / "obd.csv"),
        MAPPING,
        bandit=True,
        observation_space=spaces.Discrete(LEN_LIST, start=1),
        action_space=spaces.Discrete(N_ITEMS),
    )
    target = np.array([[0.5, 0.1, 0.1, 0.1, 0.1, 0.1], [0.1] * 5 + [0.5], [1 / 6] * 6])
    settings = dict(epsilon=1.0, weight_clip=3.0, reward_range=(0.0, 1.0))
    got = SNIPS(SNIPSConfig(**settings)).estimate(ds, target, noise=NoiseSource.insecure(3))
    dist = target[log["position"] - 1][:, :, None]
    ref = bandit.snips(
        log["click"].astype(float),
        log["item_id"],
        log["propensity_score"],
        dist,
        **settings,
        noise=NoiseSource.insecure(3),
    )
    assert got.value == pytest.approx(ref.value, abs=1e-12)
    assert got.interval == pytest.approx(ref.interval, abs=1e-12)


# ------------------------------------------------------------------------ the command line


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_obd_shaped_log_to_private_snips_with_no_hand_reshaping(
    suffix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write(obd_log(), tmp_path / f"obd{suffix}")
    out = tmp_path / "obd.h5"
    imp = ["data", "import", str(source), "--bandit", "-c", MAPPING, "--out", str(out),
           "--action-space", f"discrete:{N_ITEMS}"]  # fmt: skip
    # 1-based positions under a 0-based space are refused, with the way to declare them
    code, _, err = run([*imp, "--observation-space", f"discrete:{LEN_LIST}"], capsys)
    assert code == 2 and "observation value(s)" in err and "'position'" in err, err
    assert "start=1" in err and not out.exists()
    code, printed, err = run([*imp, "--observation-space", f"discrete:{LEN_LIST}:1"], capsys)
    assert code == 0, err
    assert "400 episodes, 400 transitions" in printed
    assert "clipped" not in err and "dropped" not in err, err
    md = load_hdf5(out).metadata
    assert md.horizon == 1 and md.observation_space == spaces.Discrete(LEN_LIST, start=1)
    # no --max-horizon and no --gamma: both come from the bandit log's public metadata
    run_dir = tmp_path / "snips"
    ope = ["ope", "snips", "--data", str(out), "--target-policy", "uniform",
           "--reward-range", "0,1", "--weight-clip", "2", "--epsilon", "1",
           "--out", str(run_dir)]  # fmt: skip
    code, _, err = run(ope, capsys)
    assert code == 0, err
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert 0.0 <= metrics["value_ci_low"] <= metrics["value_ci_high"] <= 1.0
    privacy = json.loads((run_dir / "privacy.json").read_text())
    params = {p["name"]: p for p in privacy["public_parameters"]}
    assert params["horizon H"]["value"] == 1 and params["horizon H"]["source"] == "public metadata"
    assert params["discount γ"]["value"] == 1.0
    # DR too, with its public reward model
    dr = [*ope[:1], "dr", *ope[2:-1], str(tmp_path / "dr")]
    code, _, err = run(dr, capsys)
    assert code == 0, err
    assert (tmp_path / "dr" / "metrics.json").is_file()


def test_bandit_import_is_refused_for_minari_and_without_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x.h5"
    code, _, err = run(["data", "import", "some-minari-v0", "--bandit", "-o", str(out)], capsys)
    assert code == 2 and "--bandit applies to Parquet/CSV tables" in err, err
    source = write(obd_log(10), tmp_path / "obd.csv")
    code, _, err = run(["data", "import", str(source), "--bandit", "-o", str(out)], capsys)
    assert code == 2 and "action=item,reward=click" in err, err


def test_users_and_kept_target_columns_work_in_bandit_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--unit column=user` makes each impression's user its unit (several episodes per unit),
    and a kept column of target probabilities feeds `--target-policy column:NAME`."""
    log = obd_log(300)
    rng = np.random.default_rng(5)
    log["user"] = rng.integers(100, 140, 300)
    log["pi_logged"] = np.full(300, 1.0 / N_ITEMS)  # the uniform target, per logged action
    source = write(log, tmp_path / "obd.parquet")
    out = tmp_path / "obd.h5"
    argv = ["data", "import", str(source), "--bandit", "-c", MAPPING, "--out", str(out),
            "--observation-space", f"discrete:{LEN_LIST}:1",
            "--action-space", f"discrete:{N_ITEMS}", "--unit", "column=user", "--units", "40",
            "--keep-columns", "pi_logged"]  # fmt: skip
    code, _, err = run(argv, capsys)
    assert code == 0, err
    ds = load_hdf5(out)
    np.testing.assert_array_equal(ds.unit_ids, log["user"])
    assert ds.metadata.extra["n_users"] == 40 and ds.metadata.extra["unit_column"] == "user"
    np.testing.assert_array_equal(ds.extra_columns["pi_logged"], log["pi_logged"])
    run_dir = tmp_path / "ips"
    ope = ["ope", "ips", "--data", str(out), "--target-policy", "column:pi_logged",
           "--reward-range", "0,1", "--weight-clip", "1", "--epsilon", "1", "--out",
           str(run_dir)]  # fmt: skip
    code, _, err = run(ope, capsys)
    assert code == 0, err
    assert (run_dir / "metrics.json").is_file()
    # the kept column is the uniform target's probability of each logged action, so both
    # targets give the same release on the same noise
    ips = IPS(IPSConfig(epsilon=1.0, weight_clip=1.0, reward_range=(0.0, 1.0)))
    by_column = ips.estimate(ds, "column:pi_logged", noise=NoiseSource.insecure(2))
    by_table = ips.estimate(ds, "uniform", noise=NoiseSource.insecure(2))
    assert by_column.value == pytest.approx(by_table.value, abs=1e-12)
