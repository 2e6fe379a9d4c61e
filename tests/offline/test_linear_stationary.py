"""`--stationary` for the linear learners (VAPVI, DP-VAPVI, PEVI): every regression sum of step
h pooled over the transitions of all steps (`privrl.data.padding.step_rows`, shared with the
tabular learners' pooling). Privacy: a trajectory adds up to H terms to one pooled sum, so each
replace-one sensitivity is H times the per-step one (2H³, 2H², 2H², √2·H), and each noise std
is too, keeping every release ρ0 = ρ/(5H)-zCDP; H is the declared horizon. Also: the absorbing
padding of terminated episodes is, for a feature table, the masking the learners do."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from privrl.cli.main import main
from privrl.data.padding import entries_per_trajectory, pad_absorbing, step_rows
from privrl.envs.linear import LinearMDP, raw_features
from privrl.offline.pevi import pevi
from privrl.offline.vapvi import (
    FeatureTable,
    GaussianReleaser,
    LinearEpisodes,
    dp_vapvi,
    gram_shift,
    matrix_noise_std,
    vapvi,
    variance_statistics,
    weighted_statistics,
)
from privrl.privacy import accounting
from tests.noise import noise_rng

H, D = 6, 4


def test_entries_per_trajectory_is_the_declared_horizon() -> None:
    assert entries_per_trajectory(7, stationary=True) == 7
    assert entries_per_trajectory(7, stationary=False) == 1
    with pytest.raises(ValueError):
        entries_per_trajectory(0, stationary=True)


def test_step_rows_pool_every_step() -> None:
    a = np.arange(12).reshape(3, 4)
    (col,) = step_rows((a,), 2, stationary=False)
    (pooled,) = step_rows((a,), 2, stationary=True)
    np.testing.assert_array_equal(col, [2, 6, 10])
    np.testing.assert_array_equal(pooled, np.arange(12))


# ------------------------------------------------------------------------------ noise scale


@pytest.mark.parametrize(("kind", "power"), [("v2", 4), ("v1", 2), ("target", 2)])
def test_pooled_vector_noise_and_sensitivity_are_H_times_the_per_step_ones(
    kind: str, power: int
) -> None:
    """Noise scale: pooled over h, a vector release has sensitivity H·(2H² or 2H) and adds
    N(0, σ²I) with σ = H·√(2H^p/ρ0) (empirical std over 3000 draws); each release is still
    exactly ρ0 = ρ/(5H)-zCDP."""
    rho = 2.0
    rho0 = rho / (5 * H)
    rel = GaussianReleaser(rho=rho, H=H, d=D, rng=noise_rng(1), stationary=True)
    value = np.linspace(-1, 2, D)
    draws = np.stack([rel.vector(value, kind=kind, h=1) for _ in range(3000)]) - value
    sigma = H * math.sqrt(2 * H**power / rho0)
    assert draws.std() == pytest.approx(sigma, rel=0.04)
    release = rel.releases[-1]
    per_step = 2 * H**2 if kind == "v2" else 2 * H
    assert release.sensitivity == pytest.approx(H * per_step)
    assert release.noise["sigma"] == pytest.approx(sigma)
    assert accounting.zcdp_rho(release.event) == pytest.approx(rho0)


@pytest.mark.parametrize(("mode", "factor"), [("strict", 2.0), ("paper_exact", 4.0)])
def test_pooled_gram_noise_and_shift_are_H_times_the_per_step_ones(
    mode: str, factor: float
) -> None:
    """Noise scale: a pooled Gram release has Frobenius sensitivity √2·H and s = H/√(c·ρ0)
    (c = 2 strict, 4 paper_exact); its zCDP cost is the per-step one; E is H times larger."""
    rho = 1.0
    rho0 = rho / (5 * H)
    rel = GaussianReleaser(rho=rho, H=H, d=D, rng=noise_rng(2), matrix_noise=mode, stationary=True)
    s = H / math.sqrt(factor * rho0)
    assert rel.s == pytest.approx(s) == matrix_noise_std(rho0, mode, H)
    noise = np.stack([rel.gram(np.eye(D), kind="gram", h=0) for _ in range(2000)]) - np.eye(D)
    iu = np.triu_indices(D, 1)
    assert noise[:, iu[0], iu[1]].std() == pytest.approx(s, rel=0.04)
    release = rel.releases[-1]
    assert release.sensitivity == pytest.approx(math.sqrt(2) * H)
    assert release.extra["pooled_over_steps"] == H
    per_step = GaussianReleaser(rho=rho, H=H, d=D, rng=noise_rng(2), matrix_noise=mode)
    per_step.gram(np.eye(D), kind="gram", h=0)
    assert accounting.zcdp_rho(release.event) == pytest.approx(
        accounting.zcdp_rho(per_step.releases[-1].event)
    )
    assert rel.delivered_rho() == pytest.approx(per_step.delivered_rho())
    assert gram_shift(H, D, rho, 0.05, mode, stationary=True) == pytest.approx(
        H * gram_shift(H, D, rho, 0.05, mode)
    )


# ------------------------------------------------------------------------------ sensitivity


def _pooled(phi_tab, sigma2_tab, V, data: LinearEpisodes, h: int) -> dict[str, np.ndarray]:
    """The five pooled statistics of step h, by the algorithm's own functions."""
    s, a, r, nx, ab, ok = step_rows(
        (data.states, data.actions, data.rewards, data.next_states, data.absorbing, data.valid),
        h,
        stationary=True,
    )
    phi = phi_tab[s, a]
    v_next = np.where(ab, 0.0, V[nx])
    gram, v2, v1 = variance_statistics(phi, v_next, ok)
    gram_w, target = weighted_statistics(phi, sigma2_tab[s, a], r, v_next, ok)
    return {"gram": gram, "v2": v2, "v1": v1, "gram_weighted": gram_w, "target": target}


def _episodes(rng: np.random.Generator, K: int, S: int, A: int) -> LinearEpisodes:
    lengths = rng.integers(1, H + 1, size=K)
    valid = np.arange(H)[None, :] < lengths[:, None]
    return LinearEpisodes(
        states=rng.integers(0, S, (K, H)),
        actions=rng.integers(0, A, (K, H)),
        rewards=rng.random((K, H)),
        next_states=rng.integers(0, S, (K, H)),
        valid=valid,
        absorbing=valid & (np.arange(H)[None, :] == lengths[:, None] - 1),
    )


POOLED = {"gram": math.sqrt(2) * H, "gram_weighted": math.sqrt(2) * H, "v2": 2 * H**3,
          "v1": 2 * H**2, "target": 2 * H**2}  # fmt: skip


def test_pooled_sensitivity_bounds_hold_on_random_neighbours() -> None:
    """Sensitivity: replacing one trajectory (any length ≤ H, ‖φ‖ ≤ 1, Ṽ ∈ [0, H−1], σ̃² ≥ 1,
    r ∈ [0, 1]) moves each pooled sum by at most H times its per-step bound."""
    rng = noise_rng(5)
    S, A, d, K = 3, 4, D, 12
    worst = dict.fromkeys(POOLED, 0.0)
    for _ in range(200):
        raw = rng.normal(size=(S, A, d))
        phi_tab = raw / np.linalg.norm(raw, axis=-1, keepdims=True) * rng.random((S, A, 1))
        phi_tab[0, 0] /= np.linalg.norm(phi_tab[0, 0])
        data, other = _episodes(rng, K, S, A), _episodes(rng, K, S, A)
        j = int(rng.integers(K))
        pick = (np.arange(K) == j)[:, None]
        fields = ("states", "actions", "rewards", "next_states", "valid", "absorbing")
        neighbour = LinearEpisodes(
            *(np.where(pick, getattr(other, f), getattr(data, f)) for f in fields)
        )
        sigma2_tab = 1.0 + 20 * rng.random((S, A)) * (rng.random((S, A)) < 0.5)
        V = (H - 1) * rng.random(S)
        V[rng.integers(S)] = H - 1
        a, b = (
            _pooled(phi_tab, sigma2_tab, V, data, 0),
            _pooled(phi_tab, sigma2_tab, V, neighbour, 0),
        )
        for kind, bound in POOLED.items():
            worst[kind] = max(worst[kind], float(np.linalg.norm(a[kind] - b[kind])) / bound)
    assert max(worst.values()) <= 1.0 + 1e-12, worst
    assert min(worst.values()) > 0.1, worst


def test_pooled_target_bound_is_attained() -> None:
    """An adversarial pair of trajectories (H steps each, φ = ±e₁, r = 1, Ṽ(s') = H − 1)
    moves the pooled Σφ(r+Ṽ)/σ̃² by exactly 2H², and two full trajectories on orthogonal
    features move the pooled Gram by exactly √2·H: the stated bounds are tight."""
    phi_tab = np.zeros((2, 2, 3))
    phi_tab[0, 0], phi_tab[0, 1], phi_tab[1, 0] = [1, 0, 0], [-1, 0, 0], [0, 1, 0]
    V = np.array([H - 1.0, 0.0])

    def one(s: int, a: int) -> LinearEpisodes:
        z = np.zeros((1, H), dtype=np.int64)
        return LinearEpisodes(z + s, z + a, np.ones((1, H)), z, np.ones((1, H), bool),
                              np.zeros((1, H), bool))  # fmt: skip

    ones = np.ones((2, 2))
    x, y, w = (_pooled(phi_tab, ones, V, one(s, a), 0) for s, a in ((0, 0), (0, 1), (1, 0)))
    assert np.linalg.norm(x["target"] - y["target"]) == pytest.approx(2 * H**2)
    assert np.linalg.norm(x["gram"] - w["gram"]) == pytest.approx(math.sqrt(2) * H)


# ------------------------------------------------------------------------------ the learners


@pytest.fixture(scope="module")
def problem() -> tuple[LinearEpisodes, FeatureTable]:
    mdp = LinearMDP.qiao_wang(0)
    data = LinearEpisodes.from_dataset(mdp.sample(80, rng=3), n_states=2, n_actions=100)
    return data, FeatureTable.from_array(mdp.phi)


def test_pooled_pevi_regresses_on_every_step(problem) -> None:
    """PEVI --stationary: Λ_h is the Gram matrix of every valid transition (the same at each
    h), and differs from the per-step one."""
    data, table = problem
    res = pevi(data, table, stationary=True)
    ok = data.valid.reshape(-1)
    phi = table.phi[data.states.reshape(-1), data.actions.reshape(-1)][ok]
    expected = phi.T @ phi + np.eye(table.d)
    for h in range(data.H):
        np.testing.assert_allclose(res.policy.lambdas[h], expected, rtol=1e-10)
    assert not np.allclose(pevi(data, table).policy.lambdas[0], expected)


def test_pooled_dp_vapvi_with_huge_rho_equals_pooled_vapvi(problem) -> None:
    """ρ → ∞: pooled DP-VAPVI equals pooled VAPVI; its report lists 5H releases, each with the
    pooled sensitivity, and says the model is stationary."""
    data, table = problem
    ref = vapvi(data, table, stationary=True)
    dp = dp_vapvi(data, table, rho=1e24, rng=9, noise=noise_rng(9), stationary=True)
    np.testing.assert_allclose(dp.q, ref.q, atol=1e-6)
    assert not np.allclose(ref.q, vapvi(data, table).q)
    Hd = data.H
    assert len(dp.report.releases) == 5 * Hd
    sens = sorted({round(r.sensitivity, 9) for r in dp.report.releases})
    assert sens == sorted(round(x, 9) for x in (2 * Hd**3, 2 * Hd**2, math.sqrt(2) * Hd))
    assert any("stationary model" in n for n in dp.report.notes)


def test_absorbing_padding_is_the_masking_for_a_feature_table() -> None:
    """Padding a terminated episode with the absorbing state z (privrl.data.padding) and
    φ(z, ·) = 0 gives the same VAPVI values as masking the steps after its end."""
    rng = noise_rng(0)
    S, A, K = 3, 2, 40
    raw = rng.normal(size=(S, A, D))
    table = FeatureTable.from_array(raw / (2 * np.linalg.norm(raw, axis=-1, keepdims=True)))
    walk = rng.integers(0, S, (K, H + 1))  # states s_0..s_H of each trajectory
    lengths = rng.integers(1, H + 1, size=K)
    valid = np.arange(H)[None, :] < lengths[:, None]
    terminated = rng.random(K) < 0.6
    ep = LinearEpisodes(
        walk[:, :-1],
        rng.integers(0, A, (K, H)),
        rng.random((K, H)) * valid,
        walk[:, 1:],
        valid,
        valid & (np.arange(H)[None, :] == lengths[:, None] - 1) & terminated[:, None],
    )
    padded = pad_absorbing(
        walk, ep.actions, ep.rewards, valid, valid,
        lengths=lengths, terminated=terminated, absorbing=S,
    )  # fmt: skip
    assert padded.padded.any()
    with_z = FeatureTable.from_array(np.concatenate([table.phi, np.zeros((1, A, D))]))
    as_padded = LinearEpisodes(
        padded.states[:, :-1],
        padded.actions,
        padded.rewards,
        padded.states[:, 1:],
        padded.valid,
        np.zeros_like(padded.valid),
    )
    for stationary in (False, True):
        a = vapvi(ep, table, stationary=stationary)
        b = vapvi(as_padded, with_z, stationary=stationary)
        np.testing.assert_allclose(b.q[:, :S], a.q, atol=1e-9)
        np.testing.assert_allclose(b.v[:, S], 0.0)


# ------------------------------------------------------------------------------ the command


@pytest.fixture(scope="module")
def user_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from privrl.data.io import save_hdf5

    root = tmp_path_factory.mktemp("linear_stationary")
    ds = LinearMDP.qiao_wang(0).sample(30, rng=4)
    plain = ds.with_metadata(ds.metadata.replace(extra={}, env_id=None))
    np.save(root / "phi.npy", raw_features())
    return save_hdf5(plain, root / "plain.h5"), root / "phi.npy"


@pytest.mark.parametrize("algo", ["dp-vapvi", "vapvi", "pevi"])
def test_train_stationary_on_a_dataset(algo: str, user_data, tmp_path: Path, capsys) -> None:
    """`privrl train ALGO --data D --features F --stationary` runs; config.json says so; for
    dp-vapvi privacy.json states the pooled sensitivities with H from the metadata."""
    data, phi = user_data
    out = tmp_path / algo
    argv = ["train", algo, "--data", str(data), "--features", str(phi), "--stationary"]
    argv += ["--rho", "5", "--reward-range", "0,1"] if algo == "dp-vapvi" else []
    code = main([*argv, "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    assert json.loads((out / "config.json").read_text())["stationary"] is True
    if algo == "dp-vapvi":
        privacy = json.loads((out / "privacy.json").read_text())
        given = {p["name"]: p for p in privacy["public_parameters"]}
        Hm = given["horizon H"]["value"]
        assert given["terms per trajectory in one statistic"]["value"] == Hm
        assert given["ℓ2 sensitivity of Σφ̄Ṽ²"]["value"] == pytest.approx(2 * Hm**3)
        assert given["Frobenius sensitivity of the Gram matrices"]["value"] == pytest.approx(
            math.sqrt(2) * Hm
        )
        sens = {round(r["sensitivity"], 9) for r in privacy["releases"]}
        assert round(2 * Hm**3, 9) in sens and round(math.sqrt(2) * Hm, 9) in sens
