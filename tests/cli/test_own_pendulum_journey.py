"""A team's own Pendulum-v1 logs → PRIMORL with its defaults, with no hand reshaping.

The logs are written here as a team would: 40 episodes of Gymnasium's Pendulum-v1 (raw
rewards) from a noisy swing-up controller, one CSV row per step. They are imported with
declared spaces and a declared K, then `privrl train primorl` runs with its defaults (q from
the declared K) at ε = 1: the run warns that the data is too small for the noise (public
values only: K, q, z, C) and still runs. From Python the same warnings are `SmallDataWarning`s;
with the old fixed q = 0.001 the run also warns that fewer than one trajectory is sampled per
round. Rounds and the policy stage are tiny so the test is fast."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from privrl.cli.main import main

torch.set_num_threads(1)

EPISODES = 40
OBS = ("cos", "sin", "omega")
STAGE = ["--epochs", "1", "--steps-per-epoch", "5", "--rollout-batch-size", "10",
         "--rollout-length", "2"]  # fmt: skip


def write_logs(path: Path, episodes: int = EPISODES, seed: int = 0) -> None:
    """The team's logs: torque along the angular velocity plus noise, clipped to [−2, 2]."""
    env = gym.make("Pendulum-v1")
    rng = np.random.default_rng(seed)
    header = ["episode", "t", *OBS, "torque", "reward", *(f"next_{c}" for c in OBS)]
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow([*header, "terminated", "truncated"])
        for ep in range(episodes):
            obs, _ = env.reset(seed=seed + ep)
            for t in range(200):
                u = float(np.clip(2.0 * np.sign(obs[2]) + rng.normal(0.0, 1.0), -2.0, 2.0))
                nxt, r, term, trunc, _ = env.step(np.array([u], np.float32))
                out.writerow([ep, t, *obs, u, r, *nxt, int(term), int(trunc)])
                obs = nxt
    env.close()


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CSV imported with declared spaces, env id and K (`--units`: never counted)."""
    root = tmp_path_factory.mktemp("own")
    write_logs(root / "logs.csv")
    columns = (
        "episode=episode,timestep=t,obs=cos|sin|omega,action=torque,reward=reward,"
        "next_obs=next_cos|next_sin|next_omega,terminated=terminated,truncated=truncated"
    )
    argv = ["data", "import", str(root / "logs.csv"), "--out", str(root / "logs.h5")]
    argv += ["--columns", columns, "--observation-space", "box:-8:8:3"]
    argv += ["--action-space", "box:-2:2:1", "--env-id", "Pendulum-v1"]
    assert main([*argv, "--unit", "episode", "--units", str(EPISODES)]) == 0
    return root / "logs.h5"


def _read(out: Path, name: str) -> Any:
    return json.loads((out / name).read_text())


def test_defaults_warn_that_the_data_is_too_small_and_still_run(
    logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """q = min(1, 30/K) = 0.75 from the declared K = 40; at ε = 1 over 200 rounds z ≈ 40, so
    the noise std per coordinate zC/(qK) exceeds the clip C: one `warning:` line, exit 0, and
    the report keeps the warning."""
    out = tmp_path / "run"
    argv = ["train", "primorl", "--data", str(logs), "--epsilon", "1", "--steps", "200"]
    assert main([*argv, *STAGE, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    warned = [line for line in err.splitlines() if line.startswith("warning: PRIMORL:")]
    assert len(warned) == 1 and "zC/(qK)" in warned[0] and "times the clip C = 0.02" in warned[0]
    privacy = _read(out, "privacy.json")
    params = {p["name"]: p for p in privacy["public_parameters"]}
    assert params["q (sampling rate)"]["value"] == pytest.approx(0.75)
    assert params["q (sampling rate)"]["source"] == "derived"
    assert params["K (declared number of units)"]["source"] == "public metadata"
    assert params["z (noise multiplier)"]["value"] > 30  # z ≥ qK: the noise dwarfs the clip
    assert any(n.startswith("warning: the noise std") for n in privacy["notes"])
    metrics = _read(out, "metrics.json")
    assert metrics["env_id"] == "Pendulum-v1" and metrics["epsilon"] <= 1.0
    assert (out / "model.pt").is_file() and (out / "policy.pt").is_file()


def test_from_python_the_same_run_warns_and_the_old_fixed_rate_warns_twice(logs: Path) -> None:
    """The Python API on the same file: with q = 0.001 (the fixed default before q came from
    K) only 0.04 trajectories are expected per round; both reasons are `SmallDataWarning`s and
    the fit still returns a policy and its report."""
    from privrl.data import load_hdf5
    from privrl.primorl import PRIMORL, PrimorlConfig, SmallDataWarning

    config = PrimorlConfig(
        epsilon=1.0, steps=20, sampling_rate=1e-3, epochs=1, steps_per_epoch=5,
        rollout_batch_size=10, rollout_length=2, eval_episodes=1, final_epochs=1,
    )  # fmt: skip
    with pytest.warns(SmallDataWarning) as record:
        result = PRIMORL(config).fit(load_hdf5(logs), seed=0)
    texts = [str(w.message) for w in record if issubclass(w.category, SmallDataWarning)]
    assert any("q·K = 0.04 < 1" in t for t in texts) and any("zC/(qK)" in t for t in texts)
    assert result.report.private and result.report.epsilon <= 1.0
    assert result.policy.act(np.zeros((1, 3)), np.random.default_rng(0)).shape == (1, 1)
