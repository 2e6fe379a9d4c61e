"""`privrl train dp-apvi | apvi` on variable-length episodes: --padding and --stationary.

Privacy property checked: with absorbing padding and pooled counts, two neighbouring datasets
(one trajectory replaced by one of a different length that terminates early, or runs past H)
publish the same config.json, privacy.json (every public parameter with its source, the
sensitivity √2·H and σ of the pooled counts) and console outside the noisy releases. Also:
the public parameters name the model's S + 1 states, and the release sizes follow the model.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from privrl.cli.main import main
from tests.neighbours import (
    Pair,
    assert_same_publication,
    dataset,
    episode,
    random_tabular_episodes,
    run_side,
    tabular_metadata,
)

H, S, A = 4, 5, 3
RELEASED = frozenset(
    {"known_fraction", "all_values_zero", "pessimistic_value_mean_V1", "timings_seconds"}
)
LINES = (r"^known \(h,s,a\)", r"^mean Ṽ_1", r"^warning: every pessimistic value is 0")


def _variable_length(pair: Pair, neighbour_len: int) -> None:
    """D: 30 episodes of 1..H+2 steps, half terminated early; D′: the first replaced by one of
    `neighbour_len` steps in the last state that terminates."""
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, H + 3, size=30)
    eps = random_tabular_episodes(30, lengths, S, A, seed=6, avoid_state=S - 1)
    for i, ep in enumerate(eps):
        if i % 2:
            ep["terminated"][-1], ep["truncated"][-1] = True, False
    other = episode(
        [S - 1] * (neighbour_len + 1),
        [A - 1] * neighbour_len,
        [1.0] * neighbour_len,
        terminated=True,
    )
    meta = tabular_metadata(S, A, horizon=H)
    pair.save(dataset(eps, meta), dataset([other, *eps[1:]], meta))


@pytest.mark.parametrize("neighbour_len", [1, H + 3])
@pytest.mark.parametrize("stationary", [False, True])
def test_neighbours_publish_the_same_with_padding(
    neighbour_len: int, stationary: bool, tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    pair = Pair(tmp_path)
    _variable_length(pair, neighbour_len)
    argv = [
        "train",
        "dp-apvi",
        "--data",
        "{data}",
        "--out",
        "{out}",
        "--rho",
        "1",
        "--privatize-rewards",
        "--reward-range",
        "0,1",
        "--padding",
        "absorbing",
    ] + (["--stationary"] if stationary else [])
    a = run_side(argv, pair.a, capsys)
    b = run_side(argv, pair.b, capsys)
    assert a.code == 0, a.stderr
    assert_same_publication(
        "dp-apvi-padding", a, b, pair.dirs(), released_metrics=RELEASED, released_lines=LINES
    )


def test_privacy_json_lists_the_pooled_sensitivity_and_model_size(tmp_path: Path, capsys) -> None:
    pair = Pair(tmp_path)
    _variable_length(pair, 2)
    out = tmp_path / "run"
    code = main(
        [
            "train",
            "dp-apvi",
            "--data",
            str(pair.a / "data.h5"),
            "--out",
            str(out),
            "--rho",
            "2",
            "--privatize-rewards",
            "--reward-range",
            "0,1",
            "--stationary",
        ]
    )
    assert code == 0, capsys.readouterr().err
    privacy = json.loads((out / "privacy.json").read_text())
    params = {p["name"]: p for p in privacy["public_parameters"]}
    assert params["horizon H"]["source"] == "public metadata"
    assert params["states in the model S + 1"]["value"] == S + 1
    assert params["ℓ2 sensitivity per family Δ₂"]["value"] == pytest.approx(math.sqrt(2) * H)
    assert params["Gaussian σ per count"]["value"] == pytest.approx(H * math.sqrt(3 / 2))
    sizes = [r["size"] for r in privacy["releases"]]
    assert sizes == [(S + 1) * A, (S + 1) * A * (S + 1), (S + 1) * A]
    config = json.loads((out / "config.json").read_text())
    assert config["padding"] == "absorbing" and config["stationary"] is True
    policy = np.load(out / "policy.npz")
    assert policy["actions"].shape == (H, S)


def test_padding_none_keeps_the_declared_states(tmp_path: Path, capsys) -> None:
    pair = Pair(tmp_path)
    _variable_length(pair, 2)
    out = tmp_path / "run"
    code = main(
        ["train", "apvi", "--data", str(pair.a / "data.h5"), "--out", str(out), "--padding", "none"]
    )
    assert code == 0, capsys.readouterr().err
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["releases"][0]["size"] == H * S * A


def test_bad_padding_is_one_error_line(tmp_path: Path, capsys) -> None:
    pair = Pair(tmp_path)
    _variable_length(pair, 2)
    code = main(
        [
            "train",
            "apvi",
            "--data",
            str(pair.a / "data.h5"),
            "--out",
            str(tmp_path / "r"),
            "--padding",
            "zeros",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error:") and len(err.strip().splitlines()) == 1
    assert "padding" in err


@pytest.mark.parametrize("stationary", [False, True])
def test_planned_releases_are_the_released_ones(stationary: bool, tmp_path: Path, capsys) -> None:
    """The report the ledger checks before the data are read (the plan) has the same releases
    (sizes, sensitivities, noise) as the run's final privacy.json, with padding and pooling."""
    from privrl.data.io import read_header
    from privrl.systems.tabular import DpApviConfig, DpApviSystem

    pair = Pair(tmp_path)
    _variable_length(pair, 2)
    data = pair.a / "data.h5"
    config = DpApviConfig(
        rho=1.0, privatize_rewards=True, stationary=stationary, reward_range=(0, 1)
    )
    planned = DpApviSystem().plan(config, read_header(data)).report.to_dict()["releases"]
    out = tmp_path / "run"
    argv = ["train", "dp-apvi", "--data", str(data), "--out", str(out), "--rho", "1"]
    flags = ["--privatize-rewards", "--reward-range", "0,1"]
    flags += ["--stationary"] if stationary else []
    assert main([*argv, *flags]) == 0, capsys.readouterr().err
    final = json.loads((out / "privacy.json").read_text())["releases"]

    def key(r):
        return (r["name"], r["size"], r["sensitivity"], json.dumps(r["noise"], sort_keys=True))

    assert [key(r) for r in planned] == [key(r) for r in final]
