"""Dynamics model: presets, splits, penalties, training, and what data each part may touch."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from privrl.data.dataset import TrajectoryDataset, Transitions
from privrl.nn.normalizer import Normalizer
from privrl.primorl import dynamics as dyn
from privrl.primorl.dynamics import (
    DYNAMICS_PRESETS,
    DynamicsConfig,
    DynamicsModel,
    dynamics_config,
    holdout_mse,
    select_elites,
    split_episode_indices,
    split_episodes,
    train_dynamics,
    u_ma,
    u_ma_frobenius,
    u_mpd,
)

torch.set_num_threads(1)

SMALL = DynamicsConfig(
    hidden=(32, 32), members=3, elites=2, batch_size=64, max_epochs=3, holdout_fraction=0.2
)


def _toy_dataset(n_episodes: int = 30, length: int = 40, seed: int = 0) -> TrajectoryDataset:
    """s ∈ R², a ∈ [−1, 1]: s' = 0.9 s + 0.3 a·(1, −1), r = −s₀² + 0.1 a."""
    rng = np.random.default_rng(seed)
    episodes = []
    for k in range(n_episodes):  # building test data, not a hot path
        s = rng.normal(size=2)
        obs, acts, rews = [s], [], []
        for _ in range(length):
            a = rng.uniform(-1, 1, size=1)
            rews.append(-(s[0] ** 2) + 0.1 * a[0])
            s = 0.9 * s + 0.3 * a[0] * np.array([1.0, -1.0])
            obs.append(s)
            acts.append(a)
        trunc = np.zeros(length, bool)
        trunc[-1] = True
        episodes.append(
            {
                "observations": np.array(obs, np.float32),
                "actions": np.array(acts, np.float32),
                "rewards": np.array(rews, np.float32),
                "terminated": np.zeros(length, bool),
                "truncated": trunc,
                "unit_id": k // 3,
            }
        )
    return TrajectoryDataset.from_episodes(episodes)


@pytest.fixture(scope="module")
def toy() -> tuple[Transitions, Transitions]:
    return split_episodes(_toy_dataset(), 0.2, seed=0)


def _poisoned(t: Transitions, scale: float = 1e3) -> Transitions:
    return Transitions(
        t.observations * scale + 7.0,
        t.actions * scale,
        t.rewards * scale - 5.0,
        t.next_observations * -scale,
        t.terminated,
        t.truncated,
    )


# ----------------------------------------------------------------------------- config


def test_presets_follow_the_spec() -> None:
    assert DYNAMICS_PRESETS["pendulum"].hidden == (64, 64)
    assert DYNAMICS_PRESETS["pendulum"].members == 3
    for task in ("balance", "swingup"):
        assert DYNAMICS_PRESETS[task].hidden == (128, 128)
        assert DYNAMICS_PRESETS[task].members == 5
        assert DYNAMICS_PRESETS[task].holdout_fraction == 0.01
    hc = DYNAMICS_PRESETS["halfcheetah"]
    assert hc.hidden == (200,) * 4 and hc.members == 7 and hc.holdout_fraction == 0.1
    # elites: all members for N <= 5, else 5
    assert [DYNAMICS_PRESETS[t].n_elites for t in ("pendulum", "balance", "halfcheetah")] == [
        3,
        5,
        5,
    ]
    for cfg in DYNAMICS_PRESETS.values():
        assert cfg.lr == 1e-3 and cfg.batch_size == 256 and cfg.weight_decay
        assert cfg.sampling == "shared"
    assert dynamics_config("pendulum", members=4).members == 4
    with pytest.raises(ValueError, match="known"):
        dynamics_config("hopper")
    with pytest.raises(ValueError, match="elites"):
        DynamicsConfig(members=3, elites=4)
    cfg = DYNAMICS_PRESETS["halfcheetah"].replace(weight_decays=(1.0,) * 5)
    assert DynamicsConfig.from_dict(cfg.to_dict()) == cfg


# ----------------------------------------------------------------------------- splits


def test_split_by_episode_and_unit() -> None:
    data = _toy_dataset(n_episodes=30, length=5)
    tr, ho = split_episode_indices(data, 0.2, seed=3)
    assert len(ho) == 6 and len(tr) == 24 and not set(tr) & set(ho)
    assert np.array_equal(np.sort(np.concatenate([tr, ho])), np.arange(30))
    _, ho2 = split_episode_indices(data, 0.2, seed=3)
    assert np.array_equal(ho, ho2)  # deterministic in the seed
    assert not np.array_equal(ho, split_episode_indices(data, 0.2, seed=4)[1])
    assert len(split_episode_indices(data, 0.01, seed=0)[1]) == 1  # at least one episode
    assert len(split_episode_indices(data, 0.0, seed=0)[1]) == 0
    # by unit: 10 units of 3 episodes; a unit is never split across sides
    utr, uho = split_episode_indices(data, 0.2, seed=3, by="unit")
    units = data.episode_unit_ids
    assert not set(units[utr]) & set(units[uho]) and len(uho) == 6
    # transitions of the split are exactly those of the chosen episodes
    t_tr, t_ho = split_episodes(data, 0.2, seed=3)
    ref = data.subset(ho).transitions()
    np.testing.assert_array_equal(t_ho.observations, ref.observations)
    np.testing.assert_array_equal(t_ho.next_observations, ref.next_observations)
    assert len(t_tr.rewards) + len(t_ho.rewards) == data.n_transitions


# ----------------------------------------------------------------------------- penalties


def test_penalties_match_brute_force() -> None:
    rng = np.random.default_rng(0)
    n, b, d = 5, 7, 4  # d = obs_dim + 1 (reward last)
    means = rng.normal(size=(n, b, d))
    stds = rng.uniform(0.1, 2.0, size=(n, b, d))
    ma = np.array([max(np.linalg.norm(stds[i, r]) for i in range(n)) for r in range(b)])
    ma_s = np.array([max(np.linalg.norm(stds[i, r, :-1]) for i in range(n)) for r in range(b)])
    frob = np.array(
        [max(np.linalg.norm(np.diag(stds[i, r] ** 2), "fro") for i in range(n)) for r in range(b)]
    )
    mpd = np.array(
        [
            max(
                np.linalg.norm(means[i, r, :-1] - means[j, r, :-1])
                for i, j in itertools.product(range(n), repeat=2)
            )
            for r in range(b)
        ]
    )
    mpd_r = np.array(
        [
            max(
                np.linalg.norm(means[i, r] - means[j, r])
                for i, j in itertools.product(range(n), repeat=2)
            )
            for r in range(b)
        ]
    )
    np.testing.assert_allclose(u_ma(stds), ma, rtol=1e-12)
    np.testing.assert_allclose(u_ma(stds, include_reward=False), ma_s, rtol=1e-12)
    np.testing.assert_allclose(u_ma_frobenius(stds), frob, rtol=1e-12)
    np.testing.assert_allclose(u_mpd(means), mpd, rtol=1e-12)
    np.testing.assert_allclose(u_mpd(means, include_reward=True), mpd_r, rtol=1e-12)
    out = u_mpd(torch.tensor(means, dtype=torch.float32))
    assert isinstance(out, torch.Tensor) and out.shape == (b,)
    np.testing.assert_allclose(out.numpy(), mpd, rtol=1e-5)
    assert np.all(u_mpd(np.repeat(means[:1], n, axis=0)) == 0.0)  # identical members


# ----------------------------------------------------------------------------- model


def test_inputs_and_targets_layout(toy) -> None:
    tr, _ = toy
    model = DynamicsModel(2, 1, SMALL)
    y = model.raw_targets(tr.observations, tr.rewards, tr.next_observations).numpy()
    np.testing.assert_allclose(y[:, :2], tr.next_observations - tr.observations, rtol=1e-6)
    np.testing.assert_allclose(y[:, 2], tr.rewards)
    x = model.inputs(tr.observations, tr.actions).numpy()
    np.testing.assert_allclose(x, np.concatenate([tr.observations, tr.actions], 1))  # identity
    with pytest.raises(ValueError, match="dimension"):
        DynamicsModel(2, 1, SMALL, input_normalizer=Normalizer.identity(2))


def test_training_learns_the_dynamics(toy) -> None:
    tr, ho = toy
    # patience = max_epochs: on this tiny noise-free set the holdout MSE rises for a few epochs
    # while the log-variances shrink, which MOPO's 5-epoch patience would stop at.
    cfg = SMALL.replace(max_epochs=25, patience=25, lr=3e-3)  # tiny data: few steps per epoch
    model = DynamicsModel(2, 1, cfg, seed=0)
    res = train_dynamics(model, tr, ho, seed=0, fit_normalizer_on=tr)
    y = model.raw_targets(ho.observations, ho.rewards, ho.next_observations).numpy()
    zero = float((y**2).mean())
    assert res.epochs == 25
    assert res.best_holdout_mse.max() < 0.05 * zero
    assert res.train_loss[-1] < res.train_loss[0]
    assert res.holdout_mse.shape == (res.epochs, 3) and len(res.elites) == 2
    assert res.to_dict()["elites"] == list(res.elites)


def test_normaliser_fitted_only_on_declared_data(toy) -> None:
    tr, ho = toy
    cfg = SMALL.replace(max_epochs=1, normalize_targets=True)

    def fitted(train, holdout, fit_on, pre=None):
        m = DynamicsModel(2, 1, cfg, input_normalizer=pre, seed=0)
        train_dynamics(m, train, holdout, seed=0, fit_normalizer_on=fit_on)
        return m.input_normalizer, m.target_normalizer

    # fit on train: holdout (poisoned inputs and targets) has no effect
    a_in, a_out = fitted(tr, ho, tr)
    b_in, b_out = fitted(tr, _poisoned(ho), tr)
    for a, b in ((a_in, b_in), (a_out, b_out)):
        np.testing.assert_array_equal(a.mean, b.mean)
        np.testing.assert_array_equal(a.std, b.std)
    ref = Normalizer.fit(np.concatenate([tr.observations, tr.actions], 1).astype(np.float32))
    np.testing.assert_allclose(a_in.mean, ref.mean, rtol=1e-6)
    np.testing.assert_allclose(a_in.std, ref.std, rtol=1e-6)
    assert a_in.source == "fit_normalizer_on"
    # fit on a declared public set: neither train nor holdout has an effect
    public = _poisoned(ho, scale=2.0)
    p1, _ = fitted(tr, ho, public)
    p2, _ = fitted(_poisoned(tr), _poisoned(ho), public)
    np.testing.assert_array_equal(p1.mean, p2.mean)
    np.testing.assert_array_equal(p1.std, p2.std)
    assert not np.allclose(p1.mean, a_in.mean)
    # no source: a bounds normaliser stays exactly as given
    bounds = Normalizer.from_bounds([-3, -3, -1], [3, 3, 1], source="env bounds")
    k_in, k_out = fitted(_poisoned(tr), _poisoned(ho), None, pre=bounds)
    assert k_in is bounds and k_out.source == "identity"


def test_elites_follow_holdout_error(toy, monkeypatch) -> None:
    tr, ho = toy
    cfg = SMALL.replace(max_epochs=4)
    model = DynamicsModel(2, 1, cfg, seed=1)
    res = train_dynamics(model, tr, ho, seed=0, fit_normalizer_on=tr)
    # the kept snapshot's holdout error is what elites were chosen on
    np.testing.assert_allclose(holdout_mse(model, ho), res.best_holdout_mse, rtol=1e-5)
    assert res.elites == select_elites(res.best_holdout_mse, 2) == model.elites
    assert select_elites([3.0, 1.0, 2.0, 1.0], 2) == (1, 3)
    # poison one elite's holdout error: it is no longer an elite
    victim = res.elites[0]
    real = dyn._mse_tensors

    def poisoned(model, x, y, chunk):
        err = real(model, x, y, chunk).clone()
        err[victim] += 1e3
        return err

    monkeypatch.setattr(dyn, "_mse_tensors", poisoned)
    model2 = DynamicsModel(2, 1, cfg, seed=1)
    res2 = train_dynamics(model2, tr, ho, seed=0, fit_normalizer_on=tr)
    assert victim not in res2.elites and len(res2.elites) == 2


def test_early_stopping_keeps_best_snapshot_per_member(toy, monkeypatch) -> None:
    tr, ho = toy
    script = [[1.0, 1.0, 1.0], [0.5, 2.0, 1.0], [0.4, 2.0, 0.995], [0.39, 1.0, 0.5]]
    script += [[1.0, 1.0, 1.0]] * 10
    calls = iter(script)
    monkeypatch.setattr(dyn, "_mse_tensors", lambda *a: torch.tensor(next(calls)))
    model = DynamicsModel(2, 1, SMALL.replace(max_epochs=20, patience=2), seed=0)
    seen: list[dict] = []

    def record(r):
        seen.append({k: v.detach().clone() for k, v in model.ensemble.parameters_dict().items()})

    res = train_dynamics(model, tr, ho, seed=0, progress=record)
    # epoch 4: member 0 improves by 2.5% (> 1%), member 2 by 50%; epoch 3's 0.5% is not enough
    assert res.best_epoch.tolist() == [4, 1, 4]
    np.testing.assert_allclose(res.best_holdout_mse, [0.39, 1.0, 0.5])
    assert res.stopped_early and res.epochs == 6  # two epochs without improvement
    for member, epoch in enumerate(res.best_epoch):
        for k, v in model.ensemble.parameters_dict().items():
            assert torch.equal(v[:, member], seen[epoch - 1][k][:, member])
    assert res.elites == (0, 2)


def test_no_holdout_uses_all_members(toy) -> None:
    tr, _ = toy
    model = DynamicsModel(2, 1, SMALL.replace(max_epochs=2))
    res = train_dynamics(model, tr, None, seed=0)
    assert res.epochs == 2 and not res.stopped_early and res.elites == (0, 1, 2)
    assert res.extra["elites_source"] == "all members (no holdout)"


def test_sampling_modes() -> None:
    rng = np.random.default_rng(0)
    shared = dyn._epoch_indices(rng, 10, 3, "shared", 25, None)
    assert shared.shape == (1, 25)  # one batch for all members
    assert sorted(shared[0, :10]) == list(range(10))
    ind = dyn._epoch_indices(rng, 10, 3, "independent", 10, None)
    assert ind.shape == (3, 10) and all(sorted(r) == list(range(10)) for r in ind)
    assert not np.array_equal(ind[0], ind[1])
    boot = rng.integers(0, 10, size=(3, 10))
    b = dyn._epoch_indices(rng, 10, 3, "bootstrap", 10, boot)
    for i in range(3):
        assert sorted(b[i]) == sorted(boot[i])


@pytest.mark.parametrize("sampling", ["bootstrap", "independent"])
def test_other_sampling_modes_train(toy, sampling) -> None:
    tr, ho = toy
    model = DynamicsModel(2, 1, SMALL.replace(max_epochs=2, sampling=sampling))
    res = train_dynamics(model, tr, ho, seed=0, fit_normalizer_on=tr)
    assert res.extra["sampling"] == sampling and np.isfinite(res.best_holdout_mse).all()


def test_fixed_logvar_bounds_stay_fixed(toy) -> None:
    tr, _ = toy
    model = DynamicsModel(2, 1, SMALL.replace(max_epochs=1, learn_logvar_bounds=False))
    before = model.ensemble.max_logvar.detach().clone()
    w_before = model.ensemble.w0.detach().clone()
    train_dynamics(model, tr, None, seed=0)
    assert torch.equal(model.ensemble.max_logvar, before)
    assert not torch.equal(model.ensemble.w0, w_before)


def test_training_is_deterministic_in_seed(toy) -> None:
    tr, ho = toy
    cfg = SMALL.replace(max_epochs=2)
    a, b = DynamicsModel(2, 1, cfg, seed=0), DynamicsModel(2, 1, cfg, seed=0)
    ra = train_dynamics(a, tr, ho, seed=5, fit_normalizer_on=tr)
    rb = train_dynamics(b, tr, ho, seed=5, fit_normalizer_on=tr)
    np.testing.assert_array_equal(ra.holdout_mse, rb.holdout_mse)
    assert torch.equal(a.ensemble.w1, b.ensemble.w1)


# ----------------------------------------------------------------------------- prediction


def test_predict_shapes_types_and_sampling(toy) -> None:
    tr, ho = toy
    model = DynamicsModel(2, 1, SMALL.replace(max_epochs=2), seed=0)
    train_dynamics(model, tr, ho, seed=0, fit_normalizer_on=tr)
    obs, act = ho.observations[:8], ho.actions[:8]
    nxt, rew, info = model.predict(obs, act, generator=0)
    assert nxt.shape == (8, 2) and rew.shape == (8,) and isinstance(nxt, np.ndarray)
    assert info["means"].shape == info["stds"].shape == (3, 8, 3)
    assert set(info["members"].tolist()) <= set(model.elites)
    nxt2, _, _ = model.predict(obs, act, generator=np.random.default_rng(0))
    assert nxt2.shape == (8, 2)
    again, _, _ = model.predict(obs, act, generator=0)
    np.testing.assert_array_equal(nxt, again)
    t_nxt, _, t_info = model.predict(torch.tensor(obs), torch.tensor(act), 0)
    assert isinstance(t_nxt, torch.Tensor) and isinstance(t_info["means"], torch.Tensor)
    # deterministic: mean over elites of the members' means, no generator needed
    d_nxt, d_rew, _ = model.predict(obs, act, deterministic=True)
    el = list(model.elites)
    np.testing.assert_allclose(d_nxt, obs + info["means"][el, :, :2].mean(0), rtol=1e-5)
    np.testing.assert_allclose(d_rew, info["means"][el, :, 2].mean(0), rtol=1e-5)
    with pytest.raises(ValueError, match="generator"):
        model.predict(obs, act)
    # sampling law: one elite uniformly, then its Gaussian ⇒ mixture moments
    rep = 40000
    o, a = np.repeat(obs[:1], rep, 0), np.repeat(act[:1], rep, 0)
    s_nxt, s_rew, s_info = model.predict(o, a, generator=1)
    mu, sd = s_info["means"][el, 0], s_info["stds"][el, 0]
    mix_mean = mu.mean(0)
    mix_var = (sd**2 + mu**2).mean(0) - mix_mean**2
    sample = np.concatenate([s_nxt - o, s_rew[:, None]], 1)
    se = np.sqrt(mix_var / rep)
    assert np.all(np.abs(sample.mean(0) - mix_mean) < 5 * se)
    np.testing.assert_allclose(sample.var(0), mix_var, rtol=0.05)


def test_target_normaliser_is_undone_in_predictions(toy) -> None:
    _, ho = toy
    cfg = SMALL.replace(max_epochs=1)
    tn = Normalizer([1.0, -2.0, 3.0], [2.0, 0.5, 4.0], source="test")
    model = DynamicsModel(2, 1, cfg, target_normalizer=tn, seed=0)
    mean_n, lv = model.ensemble(model.inputs(ho.observations[:4], ho.actions[:4]))
    means, stds = model.distribution(ho.observations[:4], ho.actions[:4])
    torch.testing.assert_close(
        means, mean_n[0] * torch.tensor(tn.std).float() + torch.tensor(tn.mean).float()
    )
    torch.testing.assert_close(stds, torch.exp(0.5 * lv[0]) * torch.tensor(tn.std).float())
    y = model.targets(ho.observations, ho.rewards, ho.next_observations)
    raw = model.raw_targets(ho.observations, ho.rewards, ho.next_observations)
    torch.testing.assert_close(tn.inverse(y), raw, rtol=1e-5, atol=1e-5)


def test_checkpoint_roundtrip(toy, tmp_path) -> None:
    tr, ho = toy
    model = DynamicsModel(2, 1, SMALL.replace(max_epochs=2), seed=0)
    train_dynamics(model, tr, ho, seed=0, fit_normalizer_on=tr)
    model.elites = (2,)
    path = tmp_path / "dyn.pt"
    torch.save(model.state_dict(), path)
    back = DynamicsModel.from_state_dict(torch.load(path, weights_only=True))
    assert back.elites == (2,) and back.config == model.config
    np.testing.assert_array_equal(back.input_normalizer.mean, model.input_normalizer.mean)
    a = model.predict(ho.observations[:5], ho.actions[:5], generator=3)
    b = back.predict(ho.observations[:5], ho.actions[:5], generator=3)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    with pytest.raises(ValueError, match="obs_dim"):
        DynamicsModel(3, 1, SMALL).load_state_dict(model.state_dict())
