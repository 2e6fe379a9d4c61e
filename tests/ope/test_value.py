"""The θ-estimators' scalar value v = E_{d₀}[φ(s₀)]ᵀθ (privrl.ope.value): the start
distribution is public only, and the interval for the privacy noise covers the noise-free
value over repeated noise draws at about its level."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.data.io import save_hdf5
from privrl.envs.chain import ChainMDP
from privrl.ope.baselines import dp_lsw, first_visit_returns, plan_dp_lsw
from privrl.ope.gpope import StepSize, gpope_replicas
from privrl.ope.stats import trajectory_stats
from privrl.ope.value import gaussian_interval, resolve_start_states, t_interval
from tests.noise import noise_rng, noise_source

S = 8
OBS = spaces.Discrete(S)


def one_step_log(states: np.ndarray, seed: int = 0) -> TrajectoryDataset:
    rng = noise_rng(seed)
    m = len(states)
    return TrajectoryDataset(
        observations=np.repeat(states, 2),
        actions=np.zeros(m, np.int64),
        rewards=rng.random(m),
        terminated=np.ones(m, bool),
        truncated=np.zeros(m, bool),
        episode_offsets=np.arange(m + 1),
        metadata=DatasetMetadata(observation_space=OBS, action_space=spaces.Discrete(1)),
    )


def test_dp_lsw_interval_covers_the_noise_free_value_at_its_level() -> None:
    """Property: over repeated noise draws, v ± z·σ_hi·‖w‖ covers wᵀθ_X (the noise-free
    value) with probability ≈ 0.9. Each state is visited by one trajectory, so the data-
    dependent σ_X equals its public bound σ_hi and the coverage is exact, not just ≥ 0.9."""
    level, draws = 0.9, 400
    data = one_step_log(np.arange(S))
    Phi, rho = np.eye(S), np.full(S, 1.0 / S)
    fv = first_visit_returns(data, lambda o: np.asarray(o).reshape(-1), S, 0.5)
    kw = dict(epsilon=1.0, delta=1e-5, return_range=1.0)
    sigma_hi = plan_dp_lsw(Phi, rho, S, **kw).sigma_bounds[1]
    start = resolve_start_states("uniform", observation_space=OBS)
    w = start.mean_features(lambda o: Phi[np.asarray(o)])
    rng = noise_rng(0)
    hits = 0
    for _ in range(draws):
        res = dp_lsw(fv, Phi, rho, rng=rng, **kw)
        assert res.private_sigma == pytest.approx(sigma_hi)  # the tight case
        lo, hi = gaussian_interval(float(w @ res.theta), sigma_hi * np.linalg.norm(w), level)
        hits += lo <= float(w @ res.theta_nonprivate) <= hi
    assert abs(hits / draws - level) < 0.05  # ~3.3 binomial standard errors


def test_gpope_interval_from_public_replicas_covers_at_about_its_level() -> None:
    """Property: the interval v ± t·s_R, with s_R the spread of v over R runs of the same
    mechanism on an independent PUBLIC sample, covers the mechanism's mean value on the
    private data (its noise-free target, estimated by many private replicas) at ≈ 0.9."""
    level, R, draws = 0.9, 32, 400
    mdp = ChainMDP(n_states=6)
    feats = mdp.features()
    private = trajectory_stats(mdp.sample(60, seed=1), feats, mdp.gamma)
    public = trajectory_stats(mdp.sample(60, seed=2), feats, mdp.gamma)
    common = dict(iterations=300, clip=2.0, step=None, sigma=1.5)
    step = StepSize("constant", 0.5)
    w = np.asarray(mdp.start_distribution) @ feats(np.arange(6))

    def values(stats, n, seed):
        kw = {**common, "step": [step] * n}
        theta, *_ = gpope_replicas([stats], noise=noise_source(seed), **kw)
        return np.asarray(theta) @ w

    v_priv = values(private, draws, 3)
    target = float(np.mean(v_priv))
    s_pub = float(np.std(values(public, R, 4), ddof=1))
    covered = [lo <= target <= hi for lo, hi in (t_interval(v, s_pub, R, level) for v in v_priv)]
    assert abs(np.mean(covered) - level) < 0.07


def test_start_states_are_public_only(tmp_path: Path) -> None:
    """uniform, a distribution, public observations, a public dataset; never the --data file;
    the metadata's start_distribution unless marked inferred."""
    p = np.array([0.5, 0.5] + [0.0] * (S - 2))
    np.save(tmp_path / "d0.npy", p)
    st = resolve_start_states(str(tmp_path / "d0.npy"), observation_space=OBS)
    assert st is not None and st.weights @ np.arange(S) == pytest.approx(0.5)
    np.save(tmp_path / "obs.npy", np.array([1, 1, 3]))
    st = resolve_start_states(str(tmp_path / "obs.npy"), observation_space=OBS)
    assert st is not None and list(st.observations) == [1, 1, 3]
    pub = tmp_path / "pub.h5"
    save_hdf5(one_step_log(np.array([2, 2, 5])), pub)
    st = resolve_start_states(str(pub), observation_space=OBS, data_path=tmp_path / "other.h5")
    assert st is not None and sorted(st.observations) == [2, 2, 5]
    with pytest.raises(ValueError, match="private dataset itself"):
        resolve_start_states(str(pub), observation_space=OBS, data_path=pub)
    copy = tmp_path / "copy.h5"  # a copy of the private episodes is not public either
    copy.write_bytes(pub.read_bytes())
    with pytest.raises(ValueError, match="same episodes"):
        resolve_start_states(str(copy), observation_space=OBS, data_path=pub)
    meta = DatasetMetadata(observation_space=OBS, extra={"start_distribution": list(p)})
    st = resolve_start_states(None, observation_space=OBS, metadata=meta)
    assert st is not None and st.source == "public metadata"
    inferred = meta.with_extra(inferred_from_data=["start_distribution"])
    assert resolve_start_states(None, observation_space=OBS, metadata=inferred) is None
    assert resolve_start_states(None, observation_space=OBS) is None


@pytest.mark.parametrize(
    "content, needle",
    [
        (np.full(S, 0.2), "sum to 1"),
        (np.full(S - 1, 1.0 / (S - 1)), f"shape ({S},)"),
        (np.array([0, S]), "outside the observation space"),
        (np.array(["a"]), "not a numeric array"),
    ],
    ids=["not summing to 1", "wrong S", "state out of range", "not numeric"],
)
def test_bad_start_states_are_refused(tmp_path: Path, content, needle) -> None:
    np.save(tmp_path / "bad.npy", content)
    with pytest.raises(ValueError, match=None) as info:
        resolve_start_states(str(tmp_path / "bad.npy"), observation_space=OBS)
    assert needle in str(info.value)
    with pytest.raises(ValueError, match="not understood"):
        resolve_start_states("logged", observation_space=OBS)
