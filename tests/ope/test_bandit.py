"""`privrl.ope.bandit`: private IPS / SNIPS / DR on Open Bandit Pipeline-shaped arrays. The
arrays path and the dataset path release the same value with the same report; the
sensitivities and the noise scale are the stated ones; neighbouring logs publish the same
report; bad arrays are refused naming the argument."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gymnasium import spaces

from privrl.data.dataset import DatasetError
from privrl.ope import DR, IPS, SNIPS, DRConfig, IPSConfig, SNIPSConfig, bandit
from privrl.ope import importance as imp
from privrl.privacy.accounting import calibrate_noise_multiplier
from privrl.privacy.noise import NoiseSource
from tests.ope.test_importance import MEANS, MU, PI
from tests.ope.test_importance import bandit as bandit_dataset

S, A = PI.shape
W = float(np.max(PI / MU))
Q = np.array([[0.3, 0.4, 0.8], [0.6, 0.2, 0.3], [0.5, 0.7, 0.5]])  # a public q̂(s, a)


def logged(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A contextual-bandit log: context s, action a ~ μ(·|s), click r, pscore μ(a|s)."""
    rng = np.random.default_rng(seed)
    s = rng.choice(S, size=n, p=[0.5, 0.3, 0.2])
    a = (rng.random(n)[:, None] > np.cumsum(MU[s], axis=1)).sum(axis=1)
    r = (rng.random(n) < MEANS[s, a]).astype(float)
    return {"context": s, "action": a, "reward": r, "pscore": MU[s, a]}


def as_obp(log: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same log as OBP's arrays: action_dist [n, A, 1] = π(·|s_i)."""
    return {
        "reward": log["reward"],
        "action": log["action"],
        "pscore": log["pscore"],
        "action_dist": PI[log["context"]][:, :, None],
    }


def dataset_of(log: dict[str, np.ndarray]):
    """The same log as a dataset of one-step episodes over the contexts (horizon 1, γ = 1
    declared, as the arrays path declares them)."""
    d = bandit_dataset(log["context"], log["action"], log["reward"], log["pscore"])
    d.metadata = type(d.metadata)(
        observation_space=spaces.Discrete(S), action_space=spaces.Discrete(A), horizon=1,
        discount=1.0,
    )  # fmt: skip
    return d


def public_except(report, names: set[str]) -> list[dict]:
    return [p for p in report.public_parameters if p["name"] not in names]


SETTINGS = dict(epsilon=1.0, weight_clip=W, reward_range=(0.0, 1.0))
DESCRIBED = {"target policy π", "reward model q̂"}  # named by their form, not their values


@pytest.mark.parametrize("name", ["ips", "snips", "dr"])
def test_arrays_and_dataset_give_the_same_release_and_report(name: str) -> None:
    """Same log, same insecure seed: the value, the interval, every release and every public
    parameter but the policy's and the model's names are identical."""
    log = logged(600)
    obp = as_obp(log)
    noise = dict(noise=NoiseSource.insecure(5))
    cfg = dict(SETTINGS)
    if name == "dr":
        erm = Q[log["context"]][:, :, None]
        got = bandit.dr(**obp, estimated_rewards_by_reg_model=erm, **cfg, **noise)
        b = imp.Bounds(W, (0.0, 1.0), 1, 1.0)
        q = imp.table_reward_model(Q, b, spaces.Discrete(A), spaces.Discrete(S), q_range=(0, 1))
        ref = DR(DRConfig(**cfg)).estimate(
            dataset_of(log), PI, reward_model=q, noise=NoiseSource.insecure(5)
        )
    else:
        got = getattr(bandit, name)(**obp, **cfg, **noise)
        cls, config = (IPS, IPSConfig) if name == "ips" else (SNIPS, SNIPSConfig)
        ref = cls(config(**cfg)).estimate(dataset_of(log), PI, noise=NoiseSource.insecure(5))
    assert got.value == ref.value and got.interval == ref.interval
    assert [r.to_dict() for r in got.report.releases] == [r.to_dict() for r in ref.report.releases]
    assert got.report.epsilon == ref.report.epsilon
    assert public_except(got.report, DESCRIBED) == public_except(ref.report, DESCRIBED)
    assert got.metrics == ref.metrics


def test_positions_select_the_action_dist_column() -> None:
    """With len_list = 3, row i's target is action_dist[i, :, position[i]] (OBP's rule): the
    same release as the dataset whose state is the position and whose policy is the table
    [position, A]."""
    rng = np.random.default_rng(1)
    n, L = 500, 3
    pos = rng.integers(0, L, size=n)
    table = np.array([[0.6, 0.2, 0.2], [0.1, 0.8, 0.1], [1 / 3, 1 / 3, 1 / 3]])
    a = rng.integers(0, A, size=n)
    r = (rng.random(n) < 0.3).astype(float)
    p = np.full(n, 1.0 / A)
    dist = np.broadcast_to(table.T[None], (n, A, L))  # [n, A, L]: column k is table[k]
    got = bandit.ips(r, a, p, dist, pos, **SETTINGS, noise=NoiseSource.insecure(2))
    log = {"context": pos, "action": a, "reward": r, "pscore": p}
    ref = IPS(IPSConfig(**SETTINGS)).estimate(dataset_of(log), table, noise=NoiseSource.insecure(2))
    assert (got.value, got.interval) == (ref.value, ref.interval)
    with pytest.raises(ValueError, match="position is required"):
        bandit.ips(r, a, p, dist, **SETTINGS)


def test_sensitivities_and_noise_scale() -> None:
    """Privacy: each release's sensitivity is the stated bound (IPS W·R, SNIPS (W·R, W), DR
    (q_hi − q_lo) + W (R + q_hi − q_lo) for the declared q̂ range) with R the width of the
    return range [min(r_min, 0), max(r_max, 0)]; σ = z·Δ with z calibrated for (ε, δ) over
    the estimator's releases; and the noise actually drawn has that scale (the released
    value minus the non-private one, times n, over 300 insecure draws: std within 15%)."""
    log = as_obp(logged(200))
    n, W2 = 200, 3.0
    cfg = dict(epsilon=0.5, delta=1e-5, weight_clip=W2, reward_range=(-1.0, 2.0))
    R = 2.0 - (-1.0)
    erm = np.full((n, A, 1), 5.0)  # clipped into the declared range [0, 1]
    cases = {
        "ips": (lambda **k: bandit.ips(**log, **cfg, **k), [W2 * R]),
        "snips": (lambda **k: bandit.snips(**log, **cfg, **k), [W2 * R, W2]),
        "dr": (
            lambda **k: bandit.dr(
                **log, estimated_rewards_by_reg_model=erm, reward_model_range=(0.0, 1.0), **cfg,
                **k,
            ),
            [1.0 + W2 * (R + 1.0)],
        ),
    }  # fmt: skip
    for run, sensitivities in cases.values():
        est = run()
        assert [r.sensitivity for r in est.report.releases] == pytest.approx(sensitivities)
        z = calibrate_noise_multiplier(0.5, 1e-5, len(sensitivities), sampling="none",
                                       relation=imp.RELATION)  # fmt: skip
        assert est.metrics["noise_std"] == pytest.approx([z * s for s in sensitivities])
        assert est.report.epsilon <= 0.5 + 1e-9
    plain = bandit.non_private("ips", **log, weight_clip=W2, reward_range=(-1.0, 2.0))
    draws = [
        (bandit.ips(**log, **cfg, noise=NoiseSource.insecure(k)).value - plain.value) * n
        for k in range(300)
    ]
    z = calibrate_noise_multiplier(0.5, 1e-5, 1, sampling="none", relation=imp.RELATION)
    assert np.std(draws) == pytest.approx(z * W2 * R, rel=0.15)
    assert abs(np.mean(draws)) < 4 * z * W2 * R / math.sqrt(300)


def test_laplace_noise_scale() -> None:
    """--mechanism laplace: each release's scale is b = Δ/ε_each (std √2·b), ε_each ≤ ε/k."""
    log = as_obp(logged(200))
    est = bandit.snips(**log, **SETTINGS, mechanism="laplace")
    eps_each = imp.noise_spec("snips", "laplace", 1.0, 1e-5).epsilon_each
    assert eps_each <= 0.5
    expected = [math.sqrt(2.0) * s / eps_each for s in (W * 1.0, W)]
    assert est.metrics["noise_std"] == pytest.approx(expected)
    assert [r.mechanism for r in est.report.releases] == ["laplace", "laplace"]


def test_neighbouring_logs_publish_the_same_report() -> None:
    """Replace-one: a log and its neighbour (one row replaced by an extreme one) give reports
    identical in every release and public parameter; only the noisy value may differ."""
    log = as_obp(logged(300))
    other = {k: v.copy() for k, v in log.items()}
    other["reward"][0], other["action"][0], other["pscore"][0] = 1.0, 2, 0.001
    erm = Q[logged(300)["context"]][:, :, None]
    for run in (
        lambda d: bandit.ips(**d, **SETTINGS),
        lambda d: bandit.snips(**d, **SETTINGS),
        lambda d: bandit.dr(**d, estimated_rewards_by_reg_model=erm, **SETTINGS),
    ):
        a, b = run(log).report.to_dict(), run(other).report.to_dict()
        a.pop("created"), b.pop("created")
        assert a == b


def test_bad_arrays_are_refused_naming_the_argument() -> None:
    log = as_obp(logged(50))
    cases = [
        (dict(log, action_dist=log["action_dist"][:, :, 0]), "action_dist"),
        (dict(log, action=log["action"][:10]), "action"),
        (dict(log, pscore=np.zeros(50)), "behaviour_probs"),
        (dict(log, action=np.full(50, 7)), "action"),
    ]
    for arrays, needle in cases:
        with pytest.raises((ValueError, DatasetError), match=needle):
            bandit.ips(**arrays, **SETTINGS)
    with pytest.raises(ValueError, match="reward_range"):
        bandit.ips(**log, epsilon=1.0, weight_clip=W, reward_range=(1.0,))
    with pytest.raises(ValueError, match="estimated_rewards_by_reg_model"):
        bandit.dr(**log, estimated_rewards_by_reg_model=np.zeros((50, A)), **SETTINGS)
