"""PRIMORL end to end (privrl.primorl.primorl): presets and variants, the public split, the
structural isolation of the policy stage, user-level clients, resume, and what neighbours
publish."""

from __future__ import annotations

import inspect
import json
import math

import numpy as np
import pytest
import torch
from gymnasium import spaces

from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.primorl import primorl as P
from privrl.primorl.dp_fedavg import DpFedAvgConfig
from privrl.primorl.dynamics import dynamics_config
from tests.noise import noise_rng, noise_source

torch.set_num_threads(1)

TINY_DYN = dynamics_config("pendulum", hidden=(8, 8), members=2)


def pendulum_data(
    n: int = 30, T: int = 20, seed: int = 0, users=None, extra=None
) -> TrajectoryDataset:
    """Pendulum-like episodes (cos θ, sin θ, ω) with actions in [−2, 2], rewards in [0, 1]."""
    rng = noise_rng(seed)
    obs = np.zeros((n, T + 1, 3), np.float32)
    th, w = rng.uniform(-np.pi, np.pi, n), rng.uniform(-1, 1, n)
    act = rng.uniform(-2, 2, (n, T, 1)).astype(np.float32)
    rew = np.zeros((n, T), np.float32)
    for t in range(T + 1):  # vectorised over episodes
        obs[:, t] = np.stack([np.cos(th), np.sin(th), w], axis=1)
        if t < T:
            rew[:, t] = 1 - (th**2 + 0.1 * w**2) / 16.27
            w = np.clip(w + (15 * np.sin(th) + 3 * act[:, t, 0]) * 0.05, -8, 8)
            th = th + w * 0.05
    episodes = []
    for k in range(n):
        trunc = np.zeros(T, bool)
        trunc[-1] = True
        ep = {
            "observations": obs[k],
            "actions": act[k],
            "rewards": rew[k],
            "terminated": np.zeros(T, bool),
            "truncated": trunc,
        }
        if users is not None:
            ep["unit_id"] = int(users[k])
        episodes.append(ep)
    meta = DatasetMetadata(
        observation_space=spaces.Box(
            np.array([-1, -1, -8], np.float32), np.array([1, 1, 8], np.float32)
        ),
        action_space=spaces.Box(-2.0, 2.0, (1,), np.float32),
        env_id="privrl/Pendulum-v0",
        discount=0.99,
        horizon=200,
        extra={"reference_returns": {"random": 100.0, "expert": 190.0}, **(extra or {})},
    )
    return TrajectoryDataset.from_episodes(episodes, metadata=meta)


def tiny_config(**fed) -> P.PrimorlConfig:
    base = dict(noise_multiplier=2.0, max_rounds=4, sampling_rate=0.2, n_units=30, eval_every=2)
    base.update(fed)
    return P.PrimorlConfig(
        task="pendulum",
        fedavg=DpFedAvgConfig(**base),
        epochs=2,
        steps_per_epoch=10,
        rollout_every=10,
        rollout_batch_size=20,
        rollout_length=5,
        eval_episodes=2,
        final_epochs=1,
        sac_hidden=(8, 8),
        sac_batch_size=16,
        holdout_fraction=0.2,
        dynamics=TINY_DYN,
    )


# ----------------------------------------------------------------------------- config


def test_presets_and_variants_set_what_the_papers_rows_set() -> None:
    """Table 1 rows: HIGH/LOW set the paper's z at the task's T_max (a public default, named
    as the preset); NO PRIVACY is z = 0 with clipping, NO CLIP z = 0 and C = ∞ (not private)."""
    high = P.PrimorlConfig(task="pendulum", variant="high", fedavg=DpFedAvgConfig(n_units=30000))
    plan = P.plan(high)
    assert (plan.z, plan.T_max, plan.clip_mode, plan.q) == (0.52, 7000, "per_layer", 1e-3)
    assert high.penalty == "mpd" and high.lam == 2.0 and high.rollout_length == 30
    sources = {p.name: (p.source.value, p.detail) for p in plan.params}
    assert sources["T_max (rounds, fixed in advance)"][0] == "default"
    assert "pendulum" in sources["T_max (rounds, fixed in advance)"][1]
    assert sources["z (noise multiplier)"][0] == "flag"
    low = P.plan(P.PrimorlConfig(task="swingup", variant="low", fedavg=DpFedAvgConfig(n_units=9)))
    assert (low.z, low.T_max, low.clip_mode) == (0.25, 10000, "flat")
    nopriv = P.plan(
        P.PrimorlConfig(task="balance", variant="no-privacy"), {"extra": {"n_trajectories": 9}}
    )
    assert nopriv.z == 0 and math.isfinite(nopriv.C) and not nopriv.private
    noclip = P.plan(
        P.PrimorlConfig(task="pendulum", variant="no-clip", fedavg=DpFedAvgConfig(n_units=5))
    )
    assert math.isinf(noclip.C) and not noclip.private


def test_no_privacy_variant_still_needs_K_from_a_public_source() -> None:
    """K is declared (flag or metadata), never counted from the data."""
    with pytest.raises(ValueError, match="K"):
        P.plan(P.PrimorlConfig(task="pendulum", variant="high"), {"extra": {}})
    inferred = {"extra": {"n_trajectories": 30, "inferred_from_data": ["n_trajectories"]}}
    with pytest.raises(ValueError, match="inferred"):
        P.plan(P.PrimorlConfig(task="pendulum", variant="high"), inferred)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"variant": "high", "fedavg": DpFedAvgConfig(noise_multiplier=1.0)}, "variant"),
        ({"variant": "no-clip", "fedavg": DpFedAvgConfig(clip_norm=1.0)}, "clipping"),
        ({"variant": "medium"}, "variant"),
        ({"starts": "dataset"}, "private states"),
        ({"penalty": "max"}, "penalty"),
        ({"lam": -1.0}, "λ"),
        ({"holdout_fraction": 0.0, "starts": "public-split"}, "public split"),
    ],
)
def test_config_refuses_bad_settings(kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        P.PrimorlConfig(task="pendulum", **kw)


def test_halfcheetah_has_no_low_high_row_and_needs_its_T() -> None:
    with pytest.raises(ValueError, match="no HIGH row"):
        P.PrimorlConfig(task="halfcheetah", variant="high")
    cfg = P.PrimorlConfig(task="halfcheetah", fedavg=DpFedAvgConfig(noise_multiplier=1e-3))
    with pytest.raises(ValueError, match="--steps"):
        P.plan(cfg, {"extra": {"n_trajectories": 2000}})
    plan = P.plan(
        cfg.__class__(
            task="halfcheetah",
            fedavg=DpFedAvgConfig(noise_multiplier=1e-3, max_rounds=10, n_units=2000),
        )
    )
    assert (plan.C, plan.q, plan.clip_mode) == (15.0, 1e-2, "per_layer")


# ----------------------------------------------------------------------------- public split


@pytest.mark.parametrize("unit", ["trajectory", "user"])
def test_public_split_does_not_move_when_a_private_unit_is_removed(unit: str) -> None:
    """Neighbour stability: removing one private unit leaves the public split identical (a
    unit's side depends on that unit alone), and about the declared fraction is public."""
    users = np.repeat(np.arange(100), 2) if unit == "user" else None
    data = pendulum_data(200, T=5, users=users)
    priv, pub = P.split_public(data, 0.1, salt="s", unit=unit)
    n_units, n_public = (100, pub.n_episodes // 2) if unit == "user" else (200, pub.n_episodes)
    assert 0.04 * n_units <= n_public <= 0.18 * n_units  # Binomial(n, 0.1), ±3 sd
    keep = np.ones(data.n_episodes, bool)
    pub_obs = {pub.observations[i].tobytes() for i in range(pub.observations.shape[0])}
    victim = next(
        e
        for e in range(data.n_episodes)
        if data.observations[data.episode_offsets[e] + e].tobytes() not in pub_obs
    )
    if unit == "user":
        keep[data.episode_unit_ids == data.episode_unit_ids[victim]] = False
    else:
        keep[victim] = False
    _, pub2 = P.split_public(data.subset(np.flatnonzero(keep)), 0.1, salt="s", unit=unit)
    np.testing.assert_array_equal(pub.observations, pub2.observations)
    np.testing.assert_array_equal(pub.rewards, pub2.rewards)
    assert priv.n_episodes + pub.n_episodes == data.n_episodes


# ----------------------------------------------------------------------------- isolation


def test_policy_stage_takes_no_data_argument() -> None:
    """Structural rule: the policy stage's entry point has no handle on the episodes."""
    params = set(inspect.signature(P.policy_from_model).parameters)
    assert params == {"released", "config", "seed", "checkpoint", "progress"}
    fields = set(P.ReleasedModel.__dataclass_fields__)
    public = {"model", "task", "env_id", "report", "public_states", "reference_returns"}
    assert fields == {*public, "fedavg"}  # env_id: the task's id (its reward scale), public


def test_poisoned_private_split_does_not_change_the_policy_once_the_model_is_fixed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Structural isolation: with the release fixed (DP-FedAvg replaced by a stub that loads
    fixed parameters), a private split poisoned with huge observations and NaN-free garbage
    rewards yields a bit-identical policy, curve and returns; and the policy stage runs with
    every dataset accessor rigged to raise."""
    real = P.train_dp_fedavg
    fixed: dict[str, torch.Tensor] = {}

    def stub(model, private, plan, **kw):
        res = real(model, private, plan, **kw)  # exercise the real code, then pin the release
        if not fixed:
            fixed.update({k: v.clone() for k, v in model.ensemble.state_dict().items()})
        model.ensemble.load_state_dict(fixed)
        model.elites = (0, 1)
        return res

    monkeypatch.setattr(P, "train_dp_fedavg", stub)
    cfg = tiny_config()
    data = pendulum_data(30, seed=1)
    priv, pub = P.split_public(data, cfg.holdout_fraction, salt=cfg.split_salt)
    poisoned = TrajectoryDataset.from_episodes(
        [
            {
                "observations": np.full((21, 3), 1e3, np.float32),
                "actions": np.full((20, 1), 2.0, np.float32),
                "rewards": np.full(20, -1e4, np.float32),
                "terminated": np.zeros(20, bool),
                "truncated": np.r_[np.zeros(19, bool), True],
            }
        ]
        * priv.n_episodes,
        metadata=data.metadata,
    )
    outs = []
    for private in (priv, poisoned):
        res = P.run(cfg, private, 7, public_split=pub)
        outs.append(res)
    a, b = outs
    for (k, x), (_, y) in zip(
        a.stage.agent.state_dict().items(), b.stage.agent.state_dict().items(), strict=True
    ):
        if isinstance(x, torch.Tensor):
            assert torch.equal(x, y), k
    np.testing.assert_array_equal(a.stage.eval_returns, b.stage.eval_returns)
    # the policy stage alone, from the released model, with the data layer rigged to raise
    for name in ("observations", "actions", "rewards", "transitions"):
        monkeypatch.setattr(
            TrajectoryDataset, name, property(lambda self: (_ for _ in ()).throw(AssertionError))
        )
    again = P.policy_from_model(a.released, cfg, seed=P._seeds(7)["stage"])
    np.testing.assert_array_equal(again.eval_returns, a.stage.eval_returns)


# ----------------------------------------------------------------------------- user level


def test_user_level_clients_group_each_users_trajectories() -> None:
    """Users own 1–20 trajectories; --unit user makes one DP-FedAvg client per user, K is the
    declared number of users and the report names the unit 'user'."""
    rng = noise_rng(3)
    owned = rng.integers(1, 21, size=12)
    users = np.repeat(np.arange(12), owned)
    data = pendulum_data(int(owned.sum()), T=8, users=users, extra={"n_users": 12})
    cfg = tiny_config(unit="user", n_units=None, sampling_rate=0.3)
    priv, pub = P.split_public(data, cfg.holdout_fraction, salt=cfg.split_salt, unit="user")
    assert set(np.unique(priv.episode_unit_ids)).isdisjoint(np.unique(pub.episode_unit_ids))
    res = P.run(cfg, priv, 0, public_split=pub)
    rep = res.report.to_dict()
    assert rep["unit"] == "user" and rep["relation"] == "add_remove"
    (release,) = rep["releases"]
    assert release["extra"]["clients"] == "one per user" and release["extra"]["K"] == 12
    k = next(p for p in rep["public_parameters"] if p["name"].startswith("K "))
    assert k["source"] == "public metadata" and "n_users" in k["detail"]


# ----------------------------------------------------------------------------- resume


def _interrupted_and_resumed(cfg, priv, pub, workdir) -> P.PrimorlResult:
    """`cfg` run in `workdir`, stopped at round 4 (checkpoints every 2 rounds), then rerun."""

    class Stop(Exception):
        pass

    def interrupt(phase, record):
        if phase == "fedavg" and record["round"] == 4:
            raise Stop

    with pytest.raises(Stop):
        P.run(
            cfg,
            priv,
            5,
            noise=noise_source(5),
            public_split=pub,
            workdir=workdir,
            progress=interrupt,
            fedavg_checkpoint_every=2,
        )
    assert (workdir / "fedavg_state.pt").exists()
    return P.run(cfg, priv, 5, noise=noise_source(5), public_split=pub, workdir=workdir)


def _same_release(a: P.PrimorlResult, b: P.PrimorlResult) -> bool:
    x, y = a.released.model.ensemble.state_dict(), b.released.model.ensemble.state_dict()
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def test_interrupted_dp_fedavg_resumes_to_the_same_release(tmp_path) -> None:
    """Resume: the DP-FedAvg state (θ, round counter, generators) is checkpointed; a run
    interrupted mid-training and rerun ends with the release of an uninterrupted run, and the
    secret state file is removed once the release exists."""
    cfg = tiny_config(max_rounds=6, eval_every=1, patience=100)
    data = pendulum_data(30, seed=2)
    priv, pub = P.split_public(data, cfg.holdout_fraction, salt=cfg.split_salt)
    full = P.run(cfg, priv, 5, noise=noise_source(5), public_split=pub)
    resumed = _interrupted_and_resumed(cfg, priv, pub, tmp_path)
    assert not (tmp_path / "fedavg_state.pt").exists()
    assert _same_release(full, resumed)
    assert resumed.fedavg["rounds"] == 6


def test_a_run_with_server_momentum_resumes_to_the_same_release(tmp_path) -> None:
    """The server's momentum buffer is part of the checkpointed state: interrupted and rerun,
    a run with β = 0.9 ends with the uninterrupted run's release, which differs from FedAvg's
    (z = 0 and any improvement kept, so that the snapshots are not round 1's, where the two
    coincide)."""
    fast = dict(max_rounds=6, eval_every=1, patience=100, noise_multiplier=0.0, min_improvement=0.0)
    cfg = tiny_config(**fast, server_momentum=0.9)
    data = pendulum_data(30, seed=2)
    priv, pub = P.split_public(data, cfg.holdout_fraction, salt=cfg.split_salt)
    full = P.run(cfg, priv, 5, noise=noise_source(5), public_split=pub)
    fedavg = P.run(tiny_config(**fast), priv, 5, noise=noise_source(5), public_split=pub)
    assert _same_release(full, _interrupted_and_resumed(cfg, priv, pub, tmp_path))
    assert not _same_release(full, fedavg)
    assert full.fedavg["best_round"] != [1] * len(full.fedavg["best_round"])
    assert "server_momentum" in cfg.to_dict()["fedavg"]
    assert "server_momentum" not in tiny_config().to_dict()["fedavg"]  # earlier runs resume


# ----------------------------------------------------------------------------- neighbours


def test_neighbours_publish_the_same_report_and_non_release_metrics() -> None:
    """Add/remove neighbour (one private trajectory removed), same seed: the report (ε, the one
    release, public parameters with sources, notes, public items) and the rounds run are
    identical; only the noisy model and what is computed from it may differ."""
    cfg = tiny_config(patience=100)
    data = pendulum_data(30, seed=4)
    priv, pub = P.split_public(data, cfg.holdout_fraction, salt=cfg.split_salt)
    published = []
    for private in (priv, priv.subset(np.arange(1, priv.n_episodes))):
        res = P.run(cfg, private, 0, public_split=pub)
        rep = res.report.to_dict()
        rep.pop("created")
        fed = {k: res.fedavg[k] for k in ("rounds", "max_rounds", "epsilon", "epsilon_max")}
        published.append(json.dumps([rep, fed, res.stage.start_mode], sort_keys=True))
    assert published[0] == published[1]
