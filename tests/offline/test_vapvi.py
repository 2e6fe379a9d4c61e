"""VAPVI / DP-VAPVI: noise scale and sensitivity of every release, the PD shift E, the privacy
report (strict vs paper_exact), ρ → ∞ equivalence with VAPVI, learning, policies and data."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

import privrl.offline.vapvi as vapvi_module
from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.envs.linear import LinearMDP
from privrl.offline.vapvi import (
    FeatureTable,
    GaussianReleaser,
    LinearEpisodes,
    LinearGreedyPolicy,
    _floor_eigenvalues,
    dp_vapvi,
    dp_vapvi_planned_event,
    gram_shift,
    load_policy,
    matrix_noise_std,
    vapvi,
    variance_statistics,
    weighted_statistics,
)
from privrl.privacy import accounting
from privrl.privacy.mechanisms import gaussian_symmetric_matrix
from privrl.privacy.units import NeighbourRelation, PrivacyUnit
from tests.noise import noise_rng

H, D = 20, 10


@pytest.fixture(scope="module")
def mdp() -> LinearMDP:
    return LinearMDP.qiao_wang(0)


@pytest.fixture(scope="module")
def table(mdp: LinearMDP) -> FeatureTable:
    return FeatureTable.from_array(mdp.phi, source="linear-mdp:0")


@pytest.fixture(scope="module")
def data(mdp: LinearMDP) -> LinearEpisodes:
    return LinearEpisodes.from_dataset(mdp.sample(300, rng=11), n_states=2, n_actions=100)


# ------------------------------------------------------------------------------ noise scales


@pytest.mark.parametrize(
    ("kind", "power", "sens"), [("v2", 4, 2 * H**2), ("v1", 2, 2 * H), ("target", 2, 2 * H)]
)
def test_vector_release_noise_matches_formula(kind: str, power: int, sens: float) -> None:
    """Noise scale: a vector release adds N(0, σ²I) with σ² = 2H⁴/ρ0 for Σφ̄Ṽ² and 2H²/ρ0 for
    Σφ̄Ṽ and Σφ(r+Ṽ)/σ̃² (ρ0 = ρ/(5H)); empirical std over 4000 draws on fixed data."""
    rho = 2.0
    rel = GaussianReleaser(rho=rho, H=H, d=D, rng=noise_rng(1))
    value = np.linspace(-3, 5, D)
    draws = np.stack([rel.vector(value, kind=kind, h=3) for _ in range(4000)]) - value
    sigma = math.sqrt(2 * H**power / (rho / (5 * H)))
    assert draws.std() == pytest.approx(sigma, rel=0.03)
    assert abs(draws.mean()) < 4 * sigma / math.sqrt(draws.size)
    release = rel.releases[-1]
    assert release.sensitivity == sens and release.norm == "l2"
    assert release.noise["sigma"] == pytest.approx(sigma)
    # Each vector release is exactly ρ0-zCDP: z = σ/Δ, ρ = 1/(2z²) = ρ0.
    assert accounting.zcdp_rho(release.event) == pytest.approx(rho / (5 * H))
    assert "step h=4" in release.name


@pytest.mark.parametrize(("mode", "rho_factor"), [("strict", 1.0), ("paper_exact", 2.0)])
def test_gram_release_noise_matches_formula(mode: str, rho_factor: float) -> None:
    """Noise scale: a Gram release adds (Z+Zᵀ)/√2, Z_ij ~ N(0, s²): variance s² off the
    diagonal and 2s² on it, s² = 1/(2ρ0) (strict) or 1/(4ρ0) (paper_exact); its event is ρ0
    (strict) or 2ρ0 (paper_exact) zCDP under replace-one (‖Δ‖_F ≤ √2)."""
    rho = 1.0
    rho0 = rho / (5 * H)
    rel = GaussianReleaser(rho=rho, H=H, d=D, rng=noise_rng(2), matrix_noise=mode)
    s = 1 / math.sqrt((2.0 if mode == "strict" else 4.0) * rho0)
    assert rel.s == pytest.approx(s)
    value = np.eye(D) * 3.0
    noise = np.stack([rel.gram(value, kind="gram", h=0) for _ in range(3000)]) - value
    np.testing.assert_array_equal(noise, np.swapaxes(noise, 1, 2))  # symmetric
    off = noise[:, np.triu_indices(D, 1)[0], np.triu_indices(D, 1)[1]]
    diag = noise[:, np.arange(D), np.arange(D)]
    assert off.std() == pytest.approx(s, rel=0.03)
    assert diag.std() == pytest.approx(math.sqrt(2) * s, rel=0.03)
    release = rel.releases[-1]
    assert release.sensitivity == pytest.approx(math.sqrt(2)) and release.norm == "frobenius"
    assert release.extra["matrix_noise"] == mode
    assert accounting.zcdp_rho(release.event) == pytest.approx(rho_factor * rho0)


# ------------------------------------------------------------------------------ sensitivity


def _random_table(rng: np.random.Generator, S: int, A: int, d: int) -> np.ndarray:
    """Features with mixed signs and norms in [0, 1], some exactly 1."""
    raw = rng.normal(size=(S, A, d))
    raw /= np.linalg.norm(raw, axis=-1, keepdims=True)
    norms = rng.random((S, A, 1))
    norms[0, 0] = 1.0
    return raw * norms


def _stats(phi_tab, sigma2_tab, V, data: LinearEpisodes, h: int):
    """The five statistics of step h (the algorithm's own functions)."""
    s, a, s2 = data.states[:, h], data.actions[:, h], data.next_states[:, h]
    phi = phi_tab[s, a]
    v_next = np.where(data.absorbing[:, h], 0.0, V[s2])
    gram, v2, v1 = variance_statistics(phi, v_next, data.valid[:, h])
    gram_w, target = weighted_statistics(
        phi, sigma2_tab[s, a], data.rewards[:, h], v_next, data.valid[:, h]
    )
    return {"gram": gram, "v2": v2, "v1": v1, "gram_weighted": gram_w, "target": target}


def _episodes(rng: np.random.Generator, K: int, S: int, A: int) -> LinearEpisodes:
    lengths = rng.integers(1, H + 1, size=K)
    valid = np.arange(H)[None, :] < lengths[:, None]
    absorbing = valid & (np.arange(H)[None, :] == lengths[:, None] - 1) & (rng.random((K, 1)) < 0.5)
    return LinearEpisodes(
        states=rng.integers(0, S, (K, H)),
        actions=rng.integers(0, A, (K, H)),
        rewards=rng.random((K, H)),
        next_states=rng.integers(0, S, (K, H)),
        valid=valid,
        absorbing=absorbing,
    )


BOUNDS = {"gram": math.sqrt(2), "gram_weighted": math.sqrt(2), "v2": 2 * H**2, "v1": 2 * H,
          "target": 2 * H}  # fmt: skip


def test_replace_one_sensitivity_bounds_hold_on_random_neighbours() -> None:
    """Sensitivity: replacing one trajectory (any length, any features with ‖φ‖ ≤ 1, values
    Ṽ_{h+1} ∈ [0, H−h−1], σ̃² ≥ 1, r ∈ [0, 1]) moves Σφ̄Ṽ² by ≤ 2H², Σφ̄Ṽ and Σφ(r+Ṽ)/σ̃² by
    ≤ 2H (ℓ2), and each Gram sum by ≤ √2 (Frobenius), at every step h."""
    rng = noise_rng(5)
    S, A, d, K = 4, 6, 5, 30
    worst = dict.fromkeys(BOUNDS, 0.0)
    for _ in range(150):
        phi_tab = _random_table(rng, S, A, d)
        data = _episodes(rng, K, S, A)
        other = _episodes(rng, K, S, A)
        j = int(rng.integers(K))
        idx = np.arange(K)
        neighbour = LinearEpisodes(
            *(
                np.where((idx == j)[:, None], getattr(other, f), getattr(data, f))
                for f in ("states", "actions", "rewards", "next_states", "valid", "absorbing")
            )
        )
        sigma2_tab = 1.0 + 50 * rng.random((S, A)) * (rng.random((S, A)) < 0.5)
        for h in range(H):
            V = (H - h - 1) * rng.random(S)
            V[rng.integers(S)] = H - h - 1  # values reach their range
            a, b = (
                _stats(phi_tab, sigma2_tab, V, data, h),
                _stats(phi_tab, sigma2_tab, V, neighbour, h),
            )
            for kind, bound in BOUNDS.items():
                change = float(np.linalg.norm(a[kind] - b[kind]))  # ℓ2 / Frobenius
                worst[kind] = max(worst[kind], change / bound)
    assert max(worst.values()) <= 1.0 + 1e-12, worst
    assert min(worst.values()) > 0.2, worst  # the neighbours do exercise the bounds


def test_replace_one_sensitivity_bounds_are_attained() -> None:
    """Adversarial neighbours reach the Gram and Σφ(r+Ṽ)/σ̃² bounds exactly and Σφ̄Ṽ², Σφ̄Ṽ up
    to the value range (Ṽ_{h+1} ≤ H−1), so the stated sensitivities are not loose by more."""
    d = 3
    phi_tab = np.zeros((2, 2, d))
    phi_tab[0, 0] = [1, 0, 0]
    phi_tab[0, 1] = [-1, 0, 0]
    phi_tab[1, 0] = [0, 1, 0]
    sigma2_tab = np.ones((2, 2))
    V = np.array([H - 1.0, 0.0])

    def one(s: int, a: int) -> LinearEpisodes:
        z = np.zeros((1, H), dtype=np.int64)
        return LinearEpisodes(z + s, z + a, np.ones((1, H)), z, np.ones((1, H), bool),
                              np.zeros((1, H), bool))  # fmt: skip

    x, y, w = one(0, 0), one(0, 1), one(1, 0)
    sx, sy, sw = (_stats(phi_tab, sigma2_tab, V, e, 0) for e in (x, y, w))
    assert np.linalg.norm(sx["target"] - sy["target"]) == pytest.approx(2 * H)
    assert np.linalg.norm(sx["v2"] - sy["v2"]) == pytest.approx(2 * (H - 1) ** 2)
    assert np.linalg.norm(sx["v1"] - sy["v1"]) == pytest.approx(2 * (H - 1))
    assert np.linalg.norm(sx["gram"] - sw["gram"]) == pytest.approx(math.sqrt(2))
    assert np.linalg.norm(sx["gram_weighted"] - sw["gram_weighted"]) == pytest.approx(math.sqrt(2))


# ------------------------------------------------------------------------------ the shift E


@pytest.mark.parametrize("mode", ["strict", "paper_exact"])
def test_shift_bounds_the_noise_of_all_2H_gram_matrices(mode: str) -> None:
    """E: in ≥ 1−δ of runs, every one of the 2H symmetric noises (drawn by the privacy core
    with DP-VAPVI's s) has spectral norm ≤ E/2, so K1, K2 = E/2·I + noise are PSD."""
    rho, delta, runs = 1.0, 0.05, 150
    s = matrix_noise_std(rho / (5 * H), mode)
    E = gram_shift(H, D, rho, delta, mode)
    if mode == "paper_exact":  # the spec's closed form
        expected = math.sqrt(10 * H / rho) * (
            2 * math.sqrt(D) + math.sqrt(2 * math.log(2 * H / delta))
        )
        assert E == pytest.approx(expected)
    rng = noise_rng(3)
    zero = np.zeros((D, D))
    largest = np.empty(runs)
    for r in range(runs):
        mats = [
            gaussian_symmetric_matrix(zero, sensitivity=math.sqrt(2), s=s, rng=rng, name="K")[0]
            for _ in range(2 * H)
        ]
        largest[r] = np.abs(np.linalg.eigvalsh(np.stack(mats))).max()
    assert np.mean(largest > E / 2) <= delta
    assert np.quantile(largest, 1 - delta) <= E / 2


def test_eigenvalue_floor_is_post_processing_to_lambda() -> None:
    rng = noise_rng(0)
    m = rng.normal(size=(6, 6))
    m = m + m.T
    out, clipped = _floor_eigenvalues(m, 1.0)
    assert clipped and np.linalg.eigvalsh(out).min() >= 1.0 - 1e-10
    np.testing.assert_allclose(out, out.T)
    spd = m @ m.T + 2 * np.eye(6)
    same, clipped = _floor_eigenvalues(spd, 1.0)
    assert not clipped and same is spd


# ------------------------------------------------------------------------------ the report


@pytest.mark.parametrize(("mode", "factor"), [("strict", 1.0), ("paper_exact", 1.4)])
def test_report_states_rho_and_every_release(mode: str, factor: float, data, table) -> None:
    """strict gives exactly ρ-zCDP; paper_exact's Gram noise (s² = 1/(4ρ0)) costs 2ρ0 each under
    replace-one, so the report states 7ρ/5 and says why. 5H releases, one per statistic per h."""
    rho, delta = 2.0, 1e-5
    res = dp_vapvi(data, table, rho=rho, rng=0, noise=noise_rng(0), matrix_noise=mode, delta=delta)
    rep = res.report
    assert rep.unit is PrivacyUnit.TRAJECTORY and rep.relation is NeighbourRelation.REPLACE_ONE
    assert rep.rho == pytest.approx(factor * rho, rel=1e-12)
    assert len(rep.releases) == 5 * H
    names = [r.name for r in rep.releases]
    for h in range(1, H + 1):
        assert sum(n.endswith(f"step h={h}") for n in names) == 5
    assert any(f"matrix noise: {mode}" in n for n in rep.notes)
    eps = accounting.epsilon(rep.event, delta, relation=NeighbourRelation.REPLACE_ONE)
    assert rep.epsilon == pytest.approx(eps)
    assert rep.epsilon <= accounting.zcdp_to_dp(rep.rho, delta) + 1e-9
    assert any("Bun–Steinke" in n for n in rep.notes)
    # The planned event used for ledger checks is equivalent to the composition.
    planned = accounting.epsilon(
        dp_vapvi_planned_event(rho, mode), delta, relation=NeighbourRelation.REPLACE_ONE
    )
    assert planned == pytest.approx(rep.epsilon, rel=1e-6)
    d = rep.to_dict()
    for key in ("unit", "relation", "epsilon", "delta", "rho", "accountant", "releases"):
        assert key in d


@pytest.mark.parametrize(
    ("rho", "delta", "eps"),
    [(25, 0.1, 40.2), (25, 1e-3, 51.3), (5, 0.1, 11.8), (5, 1e-3, 16.8), (1, 0.1, 4.0),
     (1, 1e-3, 6.26), (0.1, 0.1, 1.1), (0.1, 1e-3, 1.8)],
)  # fmt: skip
def test_zcdp_to_dp_table_of_the_spec(rho: float, delta: float, eps: float) -> None:
    """Accountant value: ε = ρ + 2√(ρ log(1/δ)) reproduces the spec's table (Bun–Steinke)."""
    assert accounting.zcdp_to_dp(rho, delta) == pytest.approx(eps, abs=0.05)


def test_noise_is_only_drawn_by_the_privacy_core() -> None:
    """Structural rule: the DP-VAPVI/PEVI modules draw no noise themselves."""
    root = Path(vapvi_module.__file__).parent
    pattern = re.compile(r"\.(normal|standard_normal|laplace|gumbel|exponential)\(")
    for name in ("vapvi.py", "pevi.py"):
        assert not pattern.search((root / name).read_text()), name


# ------------------------------------------------------------------------------ equivalences


@pytest.mark.parametrize("split", [False, True])
def test_dp_vapvi_with_huge_rho_equals_vapvi(split: bool, data, table) -> None:
    """ρ → ∞: DP-VAPVI's output equals VAPVI's (same data, same seed for the split)."""
    ref = vapvi(data, table, split=split, rng=9)
    dp = dp_vapvi(data, table, rho=1e24, rng=9, noise=noise_rng(9), split=split)
    np.testing.assert_array_equal(dp.policy.actions, ref.policy.actions)
    np.testing.assert_allclose(dp.q, ref.q, atol=1e-6)
    np.testing.assert_allclose(dp.v, ref.v, atol=1e-6)
    assert not ref.report.private and ref.report.epsilon == math.inf


def test_values_are_clipped_and_seeded(data, table) -> None:
    a = dp_vapvi(data, table, rho=0.5, rng=4, noise=noise_rng(4))
    b = dp_vapvi(data, table, rho=0.5, rng=4, noise=noise_rng(4))
    c = dp_vapvi(data, table, rho=0.5, rng=5, noise=noise_rng(5))
    np.testing.assert_array_equal(a.q, b.q)  # same seed, same result
    assert not np.array_equal(a.q, c.q)
    steps_left = H - np.arange(H)
    assert np.all(a.q >= 0) and np.all(a.q <= steps_left[:, None, None])
    assert np.all(a.v[:H] <= steps_left[:, None]) and np.all(a.v[H] == 0)


def test_suboptimality_decreases_with_K(mdp, table) -> None:
    """On a fixed instance, VAPVI's mean exact suboptimality (3 seeds) drops along K."""
    means = []
    for K in (20, 200, 2000):
        vals = []
        for seed in range(3):
            ep = LinearEpisodes.from_dataset(mdp.sample(K, rng=seed), n_states=2, n_actions=100)
            vals.append(float(mdp.suboptimality(vapvi(ep, table, bonus_scale=0.5).policy.actions)))
        means.append(np.mean(vals))
    assert means[0] > means[1] > means[2], means
    assert means[2] < 0.1 * mdp.optimal_value()


def test_dp_vapvi_improves_with_K_at_large_rho(mdp, table) -> None:
    """DP-VAPVI's suboptimality (ρ = 5000, 3 seeds) also drops along K."""
    means = []
    for K in (20, 2000):
        vals = []
        for seed in range(3):
            ep = LinearEpisodes.from_dataset(mdp.sample(K, rng=seed), n_states=2, n_actions=100)
            res = dp_vapvi(ep, table, rho=5000.0, rng=seed, noise=noise_rng(seed), bonus_scale=0.5)
            vals.append(float(mdp.suboptimality(res.policy.actions)))
        means.append(np.mean(vals))
    assert means[0] > means[1], means


# ------------------------------------------------------------------------------ policy & data


def test_policy_round_trip_and_feature_map_q(tmp_path, data, table) -> None:
    res = dp_vapvi(data, table, rho=1.0, rng=0, noise=noise_rng(0))
    path = res.policy.save(tmp_path / "policy.npz")
    back = load_policy(path)
    assert isinstance(back, LinearGreedyPolicy) and back.algorithm == "dp-vapvi"
    np.testing.assert_array_equal(back.actions, res.policy.actions)
    np.testing.assert_array_equal(back.q, res.q)
    assert back.meta["matrix_noise"] == "strict" and back.features_source == "linear-mdp:0"
    for h in (0, 7, H - 1):
        np.testing.assert_allclose(back.q_values(table.phi, h), res.q[h], atol=1e-9)
    obs = np.array([0, 1, 1])
    np.testing.assert_array_equal(back.act(obs, h=3), res.policy.actions[3, obs])
    probs = back.action_probs(obs, h=3)
    assert probs.shape == (3, 100) and np.all(probs.sum(1) == 1)
    step = back.at_step(3)  # the Policy protocol, for collection and evaluation tools
    np.testing.assert_array_equal(step.act(obs, noise_rng(0)), back.act(obs, h=3))
    np.savez(tmp_path / "other.npz", kind=np.array("something else"))
    with pytest.raises(ValueError, match="not a"):
        load_policy(tmp_path / "other.npz")


def test_feature_table_rescales_and_validates() -> None:
    ft = FeatureTable.from_array(np.full((2, 3, 4), 1.0))
    assert ft.scale == pytest.approx(2.0) and np.linalg.norm(ft.phi, axis=-1).max() <= 1 + 1e-12
    with pytest.raises(ValueError, match=r"\[S, A, d\]"):
        FeatureTable.from_array(np.ones((3, 4)))
    with pytest.raises(ValueError, match="NaN"):
        FeatureTable.from_array(np.full((1, 1, 2), np.nan))


def _dataset(
    obs, actions, lengths, *, terminated_last=False, units=None, horizon=3
) -> TrajectoryDataset:
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    n = int(offsets[-1])
    term = np.zeros(n, bool)
    trunc = np.zeros(n, bool)
    ends = offsets[1:] - 1
    (term if terminated_last else trunc)[ends] = True
    return TrajectoryDataset(
        observations=np.asarray(obs),
        actions=np.asarray(actions),
        rewards=np.linspace(-1, 2, n),
        terminated=term,
        truncated=trunc,
        episode_offsets=offsets,
        unit_ids=units,
        metadata=DatasetMetadata(horizon=horizon),
    )


def test_linear_episodes_from_dataset_layout() -> None:
    # Episode 0: 3 steps, states 0,1,0 → 1; episode 1: 2 steps (short), terminated.
    ds = _dataset([0, 1, 0, 1, 1, 0, 1], [1, 0, 1, 0, 1], [3, 2], terminated_last=True)
    ep = LinearEpisodes.from_dataset(ds, n_states=2, n_actions=2)
    assert (ep.K, ep.H) == (2, 3)
    np.testing.assert_array_equal(ep.states, [[0, 1, 0], [1, 0, 0]])
    np.testing.assert_array_equal(ep.next_states, [[1, 0, 1], [0, 1, 0]])
    np.testing.assert_array_equal(ep.actions, [[1, 0, 1], [0, 1, 0]])
    np.testing.assert_array_equal(ep.valid, [[1, 1, 1], [1, 1, 0]])
    np.testing.assert_array_equal(ep.absorbing, [[0, 0, 1], [0, 1, 0]])
    assert ep.rewards.min() >= 0 and ep.rewards.max() <= 1  # clipped to [0, 1]


def test_horizon_is_public_never_the_longest_episode() -> None:
    """Structural rule: H (which sets ρ/(5H), the sensitivities and the 5H releases) comes from
    the caller or the metadata; without either it is refused, whatever the episode lengths."""
    ds = _dataset([0, 1, 0, 1, 1, 0, 1], [1, 0, 1, 0, 1], [3, 2], horizon=None)
    with pytest.raises(ValueError, match="`horizon=H`"):
        LinearEpisodes.from_dataset(ds, n_states=2, n_actions=2)
    assert LinearEpisodes.from_dataset(ds, n_states=2, n_actions=2, horizon=5).H == 5


def test_linear_episodes_fit_bad_data_to_the_public_bounds() -> None:
    """Property (no data-dependent error): a non-integral or out-of-range state and an episode
    longer than H are not refused — the step is masked, the episode truncated to H — so each
    trajectory still adds at most one term per step."""
    half = _dataset([0.5, 1, 0, 1], [1, 0, 1], [3])
    ep = LinearEpisodes.from_dataset(half, n_states=2, n_actions=2)
    np.testing.assert_array_equal(ep.valid, [[0, 1, 1]])  # step 0's state is 0.5
    out = _dataset([0, 5, 0, 1], [1, 0, 1], [3])
    ep = LinearEpisodes.from_dataset(out, n_states=2, n_actions=2)
    np.testing.assert_array_equal(ep.valid, [[0, 0, 1]])  # state 5 is s' of step 0, s of step 1
    long = _dataset([0, 1, 0, 1, 0, 1], [1, 0, 1, 0, 1], [5])
    ep = LinearEpisodes.from_dataset(long, n_states=2, n_actions=2)  # metadata H = 3
    assert ep.H == 3 and ep.valid.all()
    np.testing.assert_array_equal(ep.next_states, [[1, 0, 1]])
    with pytest.raises(ValueError, match="non-scalar"):
        LinearEpisodes.from_dataset(
            _dataset(np.zeros((4, 2)), [1, 0, 1], [3]), n_states=2, n_actions=2
        )


@pytest.mark.parametrize("units", [[7, 8], [7, 7]])
def test_dp_vapvi_refuses_declared_units_by_schema(units: list[int], table) -> None:
    """Structural rule: a dataset with a unit_ids field is refused by DP-VAPVI whether or not
    its ids repeat (a decision on the ids could differ between neighbours)."""
    ds = _dataset([0, 1, 0, 1, 1, 0, 1], [1, 0, 1, 0, 1], [3, 2], units=units)
    with pytest.raises(ValueError, match="unit_ids field"):
        dp_vapvi(ds, table, rho=1.0, rng=0, noise=noise_rng(0))
    assert LinearEpisodes.from_dataset(ds, n_states=2, n_actions=2).K == 2  # VAPVI may use it
