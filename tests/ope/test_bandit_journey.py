"""The bandit journey, on Open-Bandit-like logs the test generates: 10⁵ impressions, 80
items, click rates near 0.5%, a uniform-random logging policy with its propensities, and a
target policy spread over the items → private SNIPS and DR at ε = 1 with a useful interval
(the default, auto, picks Bhatia–Davis) and a non-private reference to compare with, both from
the Python arrays API (`privrl.ope.bandit`) and from the command line (`privrl ope`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from privrl.cli.main import main
from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.data.io import save_hdf5
from privrl.ope import bandit
from privrl.privacy.noise import NoiseSource

N, ITEMS, CONTEXTS = 100_000, 80, 10
W = 20.0  # public weight clip: the target's largest π(a|s) is below 0.2, so π/μ ≤ 16 < W
USEFUL = 0.05  # the interval width asserted at ε = 1 (the reward range is [0, 1])


@pytest.fixture(scope="module")
def obd() -> dict[str, object]:
    """Contexts uniform over 10 segments, items logged uniformly (pscore = 1/80), clicks
    Bernoulli(ctr[s, a]) with rates 0.2%-0.8%, and a softmax target policy; its true value
    Σ_s p(s) Σ_a π(a|s) ctr(s, a) is known."""
    rng = np.random.default_rng(2024)
    ctr = rng.uniform(0.002, 0.008, (CONTEXTS, ITEMS))
    logits = 2.0 * rng.standard_normal((CONTEXTS, ITEMS))
    pi = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    pi = 0.5 * pi + 0.5 / ITEMS  # keep every weight ≤ 0.5·80·max π + 0.5 < W
    context = rng.integers(0, CONTEXTS, N)
    action = rng.integers(0, ITEMS, N)
    reward = (rng.random(N) < ctr[context, action]).astype(np.float64)
    pscore = np.full(N, 1.0 / ITEMS)
    truth = float(np.mean(np.sum(pi * ctr, axis=1)))
    assert float(np.max(pi)) * ITEMS < W
    return dict(
        context=context, action=action, reward=reward, pscore=pscore, pi=pi, ctr=ctr, truth=truth
    )


def arrays(log: dict[str, object]) -> dict[str, np.ndarray]:
    pi = np.asarray(log["pi"])
    return dict(
        reward=log["reward"],
        action=log["action"],
        pscore=log["pscore"],
        action_dist=pi[np.asarray(log["context"])][:, :, None],
    )


def width(interval: tuple[float, float]) -> float:
    return interval[1] - interval[0]


def test_arrays_api_private_snips_and_dr_with_a_non_private_reference(obd) -> None:
    """ε = 1, W = 20: private SNIPS and DR intervals are narrower than 0.05 and hold the true
    value (fixed noise seed); the default interval is Bhatia–Davis, the Popoviciu interval of
    the same release is more than 3× wider; the non-private reference (ε = ∞, private: false)
    holds the truth and lies near the private values. (The seeded noise makes the report
    uncertified; the command-line test below runs with secure noise.)"""
    obp = arrays(obd)
    # a public reward model, the usual click rate, declared as such: its range [0.005, 0.005]
    # (not the whole [0, 1]) keeps DR's summand range one-sided, so auto can pick Bhatia–Davis
    q = np.full((N, ITEMS, 1), 0.005)
    dr_model = dict(estimated_rewards_by_reg_model=q, reward_model_range=(0.005, 0.005))
    truth = float(obd["truth"])
    common = dict(weight_clip=W, reward_range=(0.0, 1.0))
    results = {
        "snips": (
            bandit.snips(**obp, epsilon=1.0, **common, noise=NoiseSource.insecure(1)),
            bandit.snips(**obp, non_private=True, **common),
            bandit.snips(**obp, epsilon=1.0, **common, interval="popoviciu",
                         noise=NoiseSource.insecure(1)),
        ),
        "dr": (
            bandit.dr(**obp, **dr_model, epsilon=1.0, **common,
                      noise=NoiseSource.insecure(1)),
            bandit.dr(**obp, **dr_model, non_private=True, **common),
            bandit.dr(**obp, **dr_model, epsilon=1.0, **common,
                      interval="popoviciu", noise=NoiseSource.insecure(1)),
        ),
    }  # fmt: skip
    for name, (private, reference, popoviciu) in results.items():
        assert private.metrics["interval_method"] == "bhatia-davis", name
        assert "auto" in private.metrics["interval_reason"]
        assert width(private.interval) < USEFUL, (name, private.interval)
        assert private.interval[0] <= truth <= private.interval[1], (name, private.interval)
        assert width(popoviciu.interval) > 3 * width(private.interval), name
        assert popoviciu.value == private.value  # the same release, another interval
        assert reference.report.private is False and math.isinf(reference.report.epsilon)
        assert reference.metrics["private"] is False and reference.report.releases == []
        # seeded (insecure) noise: uncertified, its nominal ε the target's
        assert private.report.nominal_epsilon <= 1.0 + 1e-9 and private.report.releases
        assert reference.interval[0] <= truth <= reference.interval[1], name
        bare = bandit.non_private(name, **obp, **common, **(dr_model if name == "dr" else {}))
        assert (reference.value, reference.interval) == (bare.value, (bare.ci_low, bare.ci_high))
        assert abs(private.value - reference.value) < 0.01, name


@pytest.fixture(scope="module")
def obd_file(obd, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The log as a privrl HDF5 of one-step episodes (context → Discrete(10), item →
    Discrete(80), propensities as behaviour_probs, horizon 1 declared) and π as a .npy."""
    root = tmp_path_factory.mktemp("obd")
    context = np.asarray(obd["context"])
    data = TrajectoryDataset(
        observations=np.repeat(context, 2),
        actions=np.asarray(obd["action"]),
        rewards=np.asarray(obd["reward"]),
        terminated=np.zeros(N, bool),
        truncated=np.ones(N, bool),
        episode_offsets=np.arange(N + 1),
        behaviour_probs=np.asarray(obd["pscore"]),
        metadata=DatasetMetadata(
            observation_space=spaces.Discrete(CONTEXTS),
            action_space=spaces.Discrete(ITEMS),
            horizon=1,
            discount=1.0,
        ),
    )
    np.save(root / "pi.npy", obd["pi"])
    return save_hdf5(data, root / "obd.h5"), root / "pi.npy"


def _run(argv: list[str], out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict, str]:
    code = main([*argv, "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads((out / "metrics.json").read_text()), captured.out


@pytest.mark.parametrize("command", ["snips", "dr"])
def test_command_line_private_and_reference(command, obd, obd_file, tmp_path, capsys) -> None:
    """`privrl ope snips|dr` at ε = 1 prints an interval narrower than 0.05 and names it
    (bhatia-davis, auto); `--non-private` writes ε = ∞ and private: false, its value within
    0.01 of the private one and its interval holding the truth."""
    data, pi = obd_file
    argv = [
        "ope", command, "--data", str(data), "--target-policy", str(pi),
        "--reward-range", "0,1", "--weight-clip", str(W),
    ]  # fmt: skip
    if command == "dr":
        argv += ["--reward-model", "constant:0.005"]
    private, out = _run([*argv, "--epsilon", "1"], tmp_path / "private", capsys)
    assert private["value_ci_high"] - private["value_ci_low"] < USEFUL
    assert private["interval_method"] == "bhatia-davis" and private["private"] is True
    assert "interval: bhatia-davis (auto:" in out and "privacy noise included" in out
    reference, out = _run([*argv, "--non-private"], tmp_path / "reference", capsys)
    assert reference["private"] is False and reference["epsilon"] == "inf"
    assert "NOT private" in out
    report = json.loads((tmp_path / "reference" / "privacy.json").read_text())
    assert report["private"] is False and report["releases"] == []
    assert abs(private["value"] - reference["value"]) < 0.01
    assert reference["value_ci_low"] <= float(obd["truth"]) <= reference["value_ci_high"]
