"""The expert-level systems on the run layer (`privrl.systems.expert`): typed configs that
round-trip, `privrl run CONFIG.toml` equal to the command line, the same refusals from a file
as from a flag."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from privrl.cli.main import main
from privrl.config import ConfigError
from privrl.systems.expert import DpSgdConfig, ExpertDpConfig

M = 16
FAST = {  # a tiny network, few steps, short evaluations (as the CLI tests' FAST)
    "batch_size": 8,
    "noise_multiplier": 5.0,
    "hidden": [8],
    "steps_cap": 10,
    "eval_episodes": 1,
    "eval_horizon": 10,
    "evals": 2,
    "eval_window": 10,
}


def _flags(settings: dict) -> list[str]:
    argv = []
    for key, value in settings.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            argv += [flag] if value else []
        elif isinstance(value, list):
            argv += [flag, ",".join(map(str, value))]
        else:
            argv += [flag, str(value)]
    return argv


def _toml(settings: dict) -> str:
    def value(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(str(v))

    return "\n".join(f"{k} = {value(v)}" for k, v in settings.items()) + "\n"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """M CartPole experts (LQR gains) × 2 short episodes each, m declared in the metadata."""
    from privrl.data.collect import collect
    from privrl.data.io import save_hdf5
    from privrl.expert.experts import CartPoleLQRExperts, save_experts

    root = tmp_path_factory.mktemp("expert_systems")
    experts = CartPoleLQRExperts({"K": np.random.default_rng(0).normal(size=(M, 4))})

    class Policy:  # each episode acts as its expert would, with 20% random actions
        def act(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
            a = (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
            return np.where(rng.random(len(obs)) < 0.2, 1 - a, a)

    ds = collect(
        "CartPole-v1",
        Policy(),
        n_episodes=2 * M,
        seed=0,
        max_steps=15,
        progress=False,
        unit_ids=np.repeat(np.arange(M), 2),
        num_envs=4,
    )
    ds = ds.with_metadata(
        ds.metadata.with_extra(n_experts=M, reference_returns={"random": 5.0, "nonprivate": 20.0})
    )
    return {
        "data": save_hdf5(ds, root / "d.h5"),
        "experts": save_experts(experts, root / "experts"),
    }


# ---------------------------------------------------------------------------------------------
# configs
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        ExpertDpConfig(epsilon=10.0),
        ExpertDpConfig(
            epsilon=3.0,
            experts=Path("e"),
            hidden=(8, 8),
            filter_calibration="pld",
            accounting="paper",
            dp_sgd_budget="joint",
            eps2_fraction=0.25,
            no_eval=True,
        ),
        DpSgdConfig(epsilon=1.0, sampling="shuffle", reference=Path("twin")),
        DpSgdConfig(non_private=True, steps=5, algo="bcq", reference_return=3.0),
    ],
)
def test_config_round_trips(config) -> None:
    again = type(config).from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config and again.fingerprint() == config.fingerprint()


def test_config_refuses_what_the_flags_refused() -> None:
    """The checks the command did on its flags are the config's own (same words)."""
    with pytest.raises(ConfigError, match=r"epsilon is required \(or --non-private"):
        DpSgdConfig()
    with pytest.raises(ConfigError, match="non_private takes no --epsilon"):
        DpSgdConfig(epsilon=1.0, non_private=True)
    with pytest.raises(ConfigError, match="not both"):
        DpSgdConfig(epsilon=1.0, reference=Path("x"), reference_return=1.0)
    with pytest.raises(ConfigError, match=r"p must be in \[0, 1\], got 1.5"):
        ExpertDpConfig(epsilon=1.0, p=1.5)
    with pytest.raises(ConfigError, match=r"hidden allows at most 16 layers"):
        ExpertDpConfig(epsilon=1.0, hidden=(10**8, 1))
    with pytest.raises(ConfigError, match="random_return must be finite"):
        DpSgdConfig(epsilon=1.0, random_return=float("inf"))
    with pytest.raises(ConfigError, match="accounting must be one of exact, paper"):
        ExpertDpConfig.from_dict({"epsilon": 1.0, "accounting": "loose"})


# ---------------------------------------------------------------------------------------------
# privrl run CONFIG.toml == the command line
# ---------------------------------------------------------------------------------------------


CASES = {
    "expert-dp": {"epsilon": 10.0, "p": 0.5, "filter_rounds": 2, **FAST},
    "dp-sgd": {"epsilon": 1.0, **FAST},
}


@pytest.mark.parametrize("system", sorted(CASES))
def test_privrl_run_equals_the_command_line(system, files, tmp_path, capsys) -> None:
    """Same settings and seed: `privrl run` writes the same metrics.json, privacy.json
    (but its timestamp) and config.json as `privrl train <system>`."""
    settings = dict(CASES[system])
    if system == "expert-dp":
        settings["experts"] = str(files["experts"])
    cli_out, toml_out = tmp_path / "cli", tmp_path / "toml"
    argv = ["train", system, "--data", str(files["data"]), "--seed", "4", "--out", str(cli_out)]
    assert main([*argv, *_flags(settings)]) == 0
    config = tmp_path / "run.toml"
    head = {"system": system, "data": str(files["data"]), "seed": 4, "out": str(toml_out)}
    config.write_text(_toml({**head, **settings}))
    assert main(["run", str(config)]) == 0
    capsys.readouterr()

    def read(out: Path, name: str) -> dict:
        found = json.loads((out / name).read_text())
        found.pop("created", None)
        return found

    metrics = read(cli_out, "metrics.json")
    assert metrics == read(toml_out, "metrics.json")
    assert metrics["steps"] > 0 and "return_mean" in metrics and "normalised_score" in metrics
    assert read(cli_out, "privacy.json") == read(toml_out, "privacy.json")
    assert read(cli_out, "config.json") == read(toml_out, "config.json")
    assert read(cli_out, "config.json")["command"] == f"privrl train {system}"
    for name in ("metrics.csv", "learner.pt", "learner.json", "plots/learning_curve.png"):
        assert (toml_out / name).is_file(), name


# ---------------------------------------------------------------------------------------------
# a bad value in a file: the same refusal as the bad flag
# ---------------------------------------------------------------------------------------------


BAD = [  # (system, the bad setting, the other settings, the problem)
    ("dp-sgd", {"epsilon": 1e300}, {}, "must be at most 100, got 1e+300"),
    ("dp-sgd", {"batch_size": 40}, {"epsilon": 1.0}, "40 exceeds the number of experts m = 16"),
    ("dp-sgd", {"algo": "x"}, {"epsilon": 1.0}, "must be one of cql, bcq"),
    ("dp-sgd", {"n_experts": 10**12}, {"epsilon": 1.0}, "must be at most 1000000000"),
    ("expert-dp", {"p": 1.5}, {"epsilon": 10.0}, "must be in [0, 1], got 1.5"),
    ("expert-dp", {"filter_calibration": "loose"}, {"epsilon": 10.0}, "must be one of paper"),
    ("expert-dp", {"p_min": 0.6}, {"epsilon": 10.0}, "must be in (0, 0.5], got 0.6"),
    # a NaN reaches the setting's own check (TOML and the command line both parse "nan")
    ("expert-dp", {"p": math.nan}, {"epsilon": 10.0}, "must be in [0, 1], got nan"),
    ("dp-sgd", {"reference_return": math.nan}, {"epsilon": 1.0}, "must be finite, got nan"),
]


@pytest.mark.parametrize(("system", "bad", "others", "problem"), BAD)
def test_a_bad_value_in_a_file_is_refused_like_the_flag(
    system, bad, others, problem, files, tmp_path, capsys
) -> None:
    """Exit code 2 and one `error:` line from both faces, with the same problem: named by
    its flag on the command line, by its key in the file; nothing is written."""
    (key,) = bad
    settings = {**others, **bad}
    if system == "expert-dp":
        settings["experts"] = str(files["experts"])
    cli_out, toml_out = tmp_path / "cli", tmp_path / "toml"
    argv = ["train", system, "--data", str(files["data"]), "--out", str(cli_out)]
    assert main([*argv, *_flags(settings)]) == 2
    cli_err = capsys.readouterr().err.strip()
    config = tmp_path / "bad.toml"
    config.write_text(
        _toml({"system": system, "data": str(files["data"]), "out": str(toml_out), **settings})
    )
    assert main(["run", str(config)]) == 2
    toml_err = capsys.readouterr().err.strip()
    flag = "--" + key.replace("_", "-")
    assert cli_err.startswith(f"error: {flag} ") and problem in cli_err, cli_err
    assert toml_err.startswith("error:") and f"{key} " in toml_err and problem in toml_err
    assert len(cli_err.splitlines()) == len(toml_err.splitlines()) == 1
    assert not cli_out.exists() and not toml_out.exists()


@pytest.mark.parametrize("system", ["expert-dp", "dp-sgd"])
def test_old_command_lines_keep_their_out_default(system, capsys) -> None:
    """--out stays optional on these commands (default runs/<command>, as before the run
    layer); switches stay single flags (--no-eval, --non-private), with no --no-no-eval."""
    assert main(["train", system, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"[default: runs/{system}]" in text
    assert "--no-eval" in text and "--no-no-eval" not in text
