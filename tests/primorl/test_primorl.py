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

from privrl.config import ConfigError
from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.data.public import declare_public_episodes, declared_public, split_declared
from privrl.primorl import primorl as P
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


FED_NAMES = {"max_rounds": "steps", "n_units": "trajectories"}  # DP-FedAvg's → the config's


def tiny_config(**fed) -> P.PrimorlConfig:
    base = dict(noise_multiplier=2.0, max_rounds=4, sampling_rate=0.2, n_units=30, eval_every=2)
    base.update(fed)
    return P.PrimorlConfig(
        task="pendulum",
        **{FED_NAMES.get(k, k): v for k, v in base.items()},
        epochs=2,
        steps_per_epoch=10,
        rollout_every=10,
        rollout_batch_size=20,
        rollout_length=5,
        eval_episodes=2,
        final_epochs=1,
        sac_hidden=(8, 8),
        sac_batch_size=16,
        dynamics=TINY_DYN,
    )


def declared_split(
    data: TrajectoryDataset, fraction: float = 0.2, seed: int = 11, by_unit: bool = False
) -> tuple[TrajectoryDataset, TrajectoryDataset]:
    """``(private, public)``: episodes (or units) declared public in the metadata, drawn from
    a public seed as a recipe would (never from their content)."""
    if by_unit:
        units = np.unique(data.episode_unit_ids)
        ids = [int(units[i]) for i in declare_public_episodes(units.size, fraction, seed)]
        meta = data.metadata.with_extra(public_unit_ids=ids)
    else:
        ids = declare_public_episodes(data.n_episodes, fraction, seed)
        meta = data.metadata.with_extra(public_episodes=ids)
    declared = data.with_metadata(meta)
    return split_declared(declared, declared_public(meta, data.n_episodes))


# ----------------------------------------------------------------------------- config


def test_presets_and_variants_set_what_the_papers_rows_set() -> None:
    """Table 1 rows: HIGH/LOW set the paper's z at the task's T_max (a public default, named
    as the preset); NO PRIVACY is z = 0 with clipping, NO CLIP z = 0 and C = ∞ (not private)."""
    high = P.PrimorlConfig(task="pendulum", variant="high", trajectories=30000)
    plan = P.plan(high)
    assert (plan.z, plan.T_max, plan.clip_mode, plan.q) == (0.52, 7000, "per_layer", 1e-3)
    assert high.penalty == "mpd" and high.lam == 2.0 and high.rollout_length == 30
    sources = {p.name: (p.source.value, p.detail) for p in plan.params}
    assert sources["T_max (rounds, fixed in advance)"][0] == "default"
    assert "pendulum" in sources["T_max (rounds, fixed in advance)"][1]
    assert sources["z (noise multiplier)"][0] == "flag"
    low = P.plan(P.PrimorlConfig(task="swingup", variant="low", trajectories=9))
    assert (low.z, low.T_max, low.clip_mode) == (0.25, 10000, "flat")
    nopriv = P.plan(
        P.PrimorlConfig(task="balance", variant="no-privacy"), {"extra": {"n_trajectories": 9}}
    )
    assert nopriv.z == 0 and math.isfinite(nopriv.C) and not nopriv.private
    noclip = P.plan(P.PrimorlConfig(task="pendulum", variant="no-clip", trajectories=5))
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
        ({"variant": "high", "noise_multiplier": 1.0}, "variant"),
        ({"variant": "no-clip", "clip": 1.0}, "clipping"),
        ({"variant": "medium"}, "variant"),
        ({"start_states": "dataset"}, "private states"),
        ({"penalty": "max"}, "penalty"),
        ({"lam": -1.0}, "λ"),
    ],
)
def test_config_refuses_bad_settings(kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        P.PrimorlConfig(task="pendulum", **kw)


def test_halfcheetah_has_no_low_high_row_and_needs_its_T() -> None:
    with pytest.raises(ValueError, match="no HIGH row"):
        P.PrimorlConfig(task="halfcheetah", variant="high")
    cfg = P.PrimorlConfig(task="halfcheetah", noise_multiplier=1e-3)
    with pytest.raises(ConfigError, match=r"^steps is required") as err:  # the field's name
        P.plan(cfg, {"extra": {"n_trajectories": 2000}})
    assert err.value.key == "steps"
    plan = P.plan(
        cfg.__class__(task="halfcheetah", noise_multiplier=1e-3, steps=10, trajectories=2000)
    )
    assert (plan.C, plan.q, plan.clip_mode) == (15.0, 1e-2, "per_layer")


# ----------------------------------------------------------------------------- public split


@pytest.mark.parametrize("by_unit", [False, True])
def test_declared_public_split_is_the_declaration_and_ignores_content(by_unit: bool) -> None:
    """The public split is exactly the declared episodes (units); it does not move when a
    private episode's content changes, and the parts drop the declaration."""
    users = np.repeat(np.arange(50), 2) if by_unit else None
    data = pendulum_data(100, T=5, users=users)
    priv, pub = declared_split(data, 0.1, by_unit=by_unit)
    assert pub.n_episodes == 10 and priv.n_episodes == 90  # 5 users of 2, or 10 episodes
    meta = data.metadata.with_extra(public_episodes=[3, 7])
    changed = data.observations.copy()
    changed[data.episode_offsets[0] : data.episode_offsets[1] + 1] = 0.5  # episode 0: private
    rewritten = TrajectoryDataset(
        observations=changed,
        actions=data.actions,
        rewards=data.rewards,
        terminated=data.terminated,
        truncated=data.truncated,
        episode_offsets=data.episode_offsets,
        metadata=meta,
    )
    for d in (data.with_metadata(meta), rewritten):
        p, q = split_declared(d, declared_public(meta, d.n_episodes))
        np.testing.assert_array_equal(q.observations, data.subset([3, 7]).observations)
        assert "public_episodes" not in p.metadata.extra | q.metadata.extra


@pytest.mark.parametrize(
    "extra, match",
    [
        ({"public_episodes": [0, 100]}, "outside"),
        ({"public_episodes": [1, 1]}, "twice"),
        ({"public_episodes": ["1"]}, "integers"),
        ({"public_episodes": [1], "public_unit_ids": [2]}, "not both"),
    ],
)
def test_bad_public_declarations_are_refused(extra: dict, match: str) -> None:
    from privrl.data.dataset import DatasetError

    with pytest.raises(DatasetError, match=match):
        declared_public(DatasetMetadata(extra=extra), 100)


def _no_public_run(data: TrajectoryDataset) -> P.PrimorlResult:
    return P.run(tiny_config(patience=1, min_improvement=0.5), data, 3, public_split=None)


def test_without_public_data_no_private_episode_is_used_in_the_clear() -> None:
    """No public data: the released model carries no states, its input normaliser is the
    declared bounds' (not a fit), every member is an elite, all T_max rounds run (no early
    stopping, even with patience 1); changing one private episode changes none of these, and
    the report says what the guarantee covers."""
    data = pendulum_data(30, seed=6)
    res = _no_public_run(data)
    rel = res.released
    assert rel.public_states is None and "public_states" not in _tensor_keys(rel)
    norm = rel.model.input_normalizer
    assert norm.source == "declared observation/action bounds"
    np.testing.assert_allclose(np.asarray(norm.mean), [0, 0, 0, 0])
    np.testing.assert_allclose(np.asarray(norm.std), [1, 1, 8, 2])
    assert rel.model.elites == (0, 1) and res.fedavg["elites"] == [0, 1]
    assert res.fedavg["rounds"] == 4 and not res.fedavg["stopped_early"]
    assert any("covers every trajectory" in n for n in res.report.notes)
    changed = data.subset(np.arange(1, 30))  # one private episode removed
    other = _no_public_run(changed).released
    for name in ("mean", "std"):
        np.testing.assert_array_equal(
            np.asarray(getattr(other.model.input_normalizer, name)), np.asarray(getattr(norm, name))
        )
    assert other.model.elites == rel.model.elites and other.fedavg["rounds"] == 4


def _tensor_keys(released: P.ReleasedModel) -> set[str]:
    return {k for k, v in released.state_dict().items() if v is not None}


def test_with_public_data_the_public_episodes_drive_normaliser_stopping_and_starts() -> None:
    """With public data the input normaliser is fitted on it, the model carries its states
    (and only its states) for public-split starts, and the report names it as not covered."""
    data = pendulum_data(30, seed=7)
    priv, pub = declared_split(data)
    res = P.run(tiny_config(), priv, 0, public_split=pub, public_source="6 episodes declared")
    rel = res.released
    assert rel.public_states is not None
    np.testing.assert_array_equal(rel.public_states[0], pub.transitions().observations)
    x = np.concatenate([pub.transitions().observations, pub.transitions().actions], axis=1)
    np.testing.assert_allclose(np.asarray(rel.model.input_normalizer.mean), x.mean(0), rtol=1e-5)
    notes = " ".join(res.report.notes)
    assert "except the public data (6 episodes declared)" in notes
    assert "public data: 6 episodes declared" in res.report.public


def test_without_public_data_unbounded_spaces_are_refused() -> None:
    data = pendulum_data(10, seed=1)
    meta = data.metadata.replace(observation_space=spaces.Box(-np.inf, np.inf, (3,), np.float32))
    with pytest.raises(ValueError, match="without public data"):
        P.bounds_normalizer(meta)


# ----------------------------------------------------------------------------- isolation


def test_policy_stage_takes_no_data_argument() -> None:
    """Structural rule: the policy stage's entry point has no handle on the episodes."""
    params = set(inspect.signature(P.policy_from_model).parameters)
    assert params == {"released", "config", "seed", "checkpoint", "progress", "device"}
    fields = set(P.ReleasedModel.__dataclass_fields__)
    public = {"model", "task", "env_id", "report", "public_states", "reference_returns"}
    public.add("public_source")  # what the public data was: a declaration, never content
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
    priv, pub = declared_split(data)
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
    priv, pub = declared_split(data, 0.2, by_unit=True)
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
    priv, pub = declared_split(data)
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
    priv, pub = declared_split(data)
    full = P.run(cfg, priv, 5, noise=noise_source(5), public_split=pub)
    fedavg = P.run(tiny_config(**fast), priv, 5, noise=noise_source(5), public_split=pub)
    assert _same_release(full, _interrupted_and_resumed(cfg, priv, pub, tmp_path))
    assert not _same_release(full, fedavg)
    assert full.fedavg["best_round"] != [1] * len(full.fedavg["best_round"])
    assert "server_momentum" in cfg.settings()["fedavg"]
    assert "server_momentum" not in tiny_config().settings()["fedavg"]  # earlier runs resume


# ----------------------------------------------------------------------------- neighbours


def test_neighbours_publish_the_same_report_and_non_release_metrics() -> None:
    """Add/remove neighbour (one private trajectory removed), same seed: the report (ε, the one
    release, public parameters with sources, notes, public items) and the rounds run are
    identical; only the noisy model and what is computed from it may differ."""
    cfg = tiny_config(patience=100)
    data = pendulum_data(30, seed=4)
    priv, pub = declared_split(data)
    published = []
    for private in (priv, priv.subset(np.arange(1, priv.n_episodes))):
        res = P.run(cfg, private, 0, public_split=pub)
        rep = res.report.to_dict()
        rep.pop("created")
        fed = {k: res.fedavg[k] for k in ("rounds", "max_rounds", "epsilon", "epsilon_max")}
        published.append(json.dumps([rep, fed, res.stage.start_mode], sort_keys=True))
    assert published[0] == published[1]


def test_an_empty_declaration_is_no_public_data() -> None:
    assert declared_public(DatasetMetadata(extra={"public_episodes": []}), 5) is None
    assert declared_public(DatasetMetadata(extra={}), 5) is None


def test_a_pending_release_stored_without_public_states_resumes_with_them(tmp_path) -> None:
    """A committed sweep keeps a running cell's release small by storing it without the
    declared-public states: the resumed run refills them from the same public split and ends
    as an uninterrupted run does."""

    class Stop(Exception):
        pass

    def interrupt(phase, record):
        if phase == "policy":
            raise Stop

    cfg = tiny_config(max_rounds=2, eval_every=1, patience=100)
    priv, pub = declared_split(pendulum_data(30, seed=2))
    full = P.run(cfg, priv, 5, noise=noise_source(5), public_split=pub)
    with pytest.raises(Stop):
        P.run(
            cfg,
            priv,
            5,
            noise=noise_source(5),
            public_split=pub,
            workdir=tmp_path,
            progress=interrupt,
        )
    pending = tmp_path / P.PENDING_MODEL
    state = torch.load(pending, map_location="cpu", weights_only=False)
    want = [np.asarray(a) for a in state["public_states"]]
    torch.save({**state, "public_states": None}, pending)
    (tmp_path / "checkpoint.pt").unlink(missing_ok=True)  # the policy stage starts afresh
    resumed = P.run(cfg, priv, 5, noise=noise_source(5), public_split=pub, workdir=tmp_path)
    assert _same_release(full, resumed)
    got = resumed.released.public_states
    assert got is not None
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert resumed.return_mean == full.return_mean
