"""The policy stage (SAC in the pessimistic model): the structural privacy rule (no dataset
reaches it), start-state modes, never-terminal truncated rollouts, the real-data ratio, and
checkpoint/resume equality."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from privrl.envs.control import CONTROL_TASKS, control_task
from privrl.primorl import policy_stage as ps
from privrl.primorl.dynamics import DynamicsModel, dynamics_config
from privrl.primorl.pessimism import PenalizedModel
from privrl.primorl.policy_stage import (
    DatasetStartStates,
    InitialStartStates,
    PolicyStageConfig,
    PublicSplitStartStates,
    RolloutBounds,
    make_start_states,
    model_rollout,
    run_policy_stage,
)
from privrl.rl.replay import ReplayBuffer
from privrl.rl.sac import SAC, SACConfig

TASK = CONTROL_TASKS["pendulum"]

torch.set_num_threads(1)


def tiny_config(**kw: Any) -> PolicyStageConfig:
    base: dict[str, Any] = {
        "epochs": 3,
        "steps_per_epoch": 20,
        "rollout_length": 4,
        "rollout_batch_size": 32,
        "retain_epochs": 2,
        "eval_episodes": 2,
        "final_epochs": 2,
        "checkpoint_every": 1,
        "sac": SACConfig(hidden=(16, 16), batch_size=16, target_entropy=-3.0),
    }
    base.update(kw)
    return PolicyStageConfig(**base)


def tiny_model(seed: int = 0) -> PenalizedModel:
    cfg = dynamics_config("pendulum", hidden=(8, 8))
    return PenalizedModel(DynamicsModel(3, 1, cfg, seed=seed), "mpd", lam=2.0)


def initial_starts(cfg: PolicyStageConfig, **kw: Any) -> Any:
    return make_start_states("initial", TASK, pool_capacity=cfg.model_buffer_capacity, **kw)


# --------------------------------------------------------------------------------------------
# structural privacy rule
# --------------------------------------------------------------------------------------------


def test_policy_stage_api_has_no_dataset_parameter() -> None:
    """The stage's entry point takes the released model, public task facts, a start-state
    sampler and (MOPO only) a real-data buffer — no dataset, no file path."""
    params = inspect.signature(run_policy_stage).parameters
    assert set(params) == {
        "pmodel",
        "starts",
        "task",
        "config",
        "seed",
        "real_buffer",
        "require_public",
        "checkpoint",
        "progress",
        "device",
    }
    for p in params.values():
        assert "Dataset" not in str(p.annotation) and "Transitions" not in str(p.annotation)


def test_policy_stage_module_imports_no_data_layer() -> None:
    """policy_stage.py must not import the data layer, file readers or the MOPO pipeline."""
    tree = ast.parse(Path(ps.__file__).read_text())
    imported: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported.append(node.module or "")
        elif isinstance(node, ast.Import):
            imported.extend(a.name for a in node.names)
    forbidden = ("privrl.data", "privrl.primorl.mopo", "h5py", "minari", "reproductions")
    bad = [m for m in imported if m.startswith(forbidden)]
    assert not bad, bad


def test_initial_mode_never_touches_a_dataset(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the private configuration (initial starts, no real data, require_public) with every
    way of reading a dataset booby-trapped: it must complete."""
    from privrl.data import dataset as dataset_mod
    from privrl.data import io as io_mod

    def trap(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the policy stage read the dataset")

    for name in ("transitions", "sample_transitions", "subset", "split", "episode"):
        monkeypatch.setattr(dataset_mod.TrajectoryDataset, name, trap)
    for name in ("observations", "actions", "rewards"):
        monkeypatch.setattr(dataset_mod.TrajectoryDataset, name, property(trap))
    monkeypatch.setattr(dataset_mod.TrajectoryDataset, "load", classmethod(trap))
    monkeypatch.setattr(io_mod, "load_hdf5", trap)
    cfg = tiny_config(epochs=1)
    res = run_policy_stage(
        tiny_model(), initial_starts(cfg), TASK, cfg, seed=0, require_public=True
    )
    assert res.start_mode == "initial" and len(res.curve) == 1


def test_private_stage_refuses_private_inputs() -> None:
    cfg = tiny_config(epochs=1)
    data_starts = DatasetStartStates(np.zeros((5, 3)))
    with pytest.raises(ValueError, match="private data"):
        run_policy_stage(tiny_model(), data_starts, TASK, cfg, seed=0, require_public=True)
    real = ReplayBuffer(3, 1, 10)
    real.add_batch(np.zeros((4, 3)), np.zeros((4, 1)), np.zeros(4), np.zeros((4, 3)), np.zeros(4))
    with pytest.raises(ValueError, match="no real data"):
        run_policy_stage(
            tiny_model(),
            initial_starts(cfg),
            TASK,
            cfg,
            seed=0,
            real_buffer=real,
            require_public=True,
        )
    with pytest.raises(ValueError, match="real-data buffer"):
        run_policy_stage(
            tiny_model(), initial_starts(cfg), TASK, tiny_config(real_ratio=0.1), seed=0
        )


# --------------------------------------------------------------------------------------------
# start states
# --------------------------------------------------------------------------------------------


def test_dataset_mode_cannot_be_selected_without_a_dataset() -> None:
    with pytest.raises(ValueError, match="private pipeline never has"):
        make_start_states("dataset", TASK, pool_capacity=10)
    with pytest.raises(ValueError, match="public split"):
        make_start_states("public-split", TASK, pool_capacity=10)
    with pytest.raises(ValueError, match="unknown start mode"):
        make_start_states("anywhere", TASK, pool_capacity=10)
    s = make_start_states(
        "dataset", TASK, pool_capacity=10, dataset_states=(np.ones((3, 3)), np.zeros(3))
    )
    assert isinstance(s, DatasetStartStates) and not s.public and s.mode == "dataset"
    p = make_start_states(
        "public-split", TASK, pool_capacity=10, public_states=(np.ones((3, 3)), np.zeros(3))
    )
    assert isinstance(p, PublicSplitStartStates) and p.public
    i = make_start_states("initial", TASK, pool_capacity=10)
    assert isinstance(i, InitialStartStates) and i.public
    for sampler in (s, p, i):
        assert sampler.describe()["mode"] == sampler.mode


def test_initial_mode_draws_initial_states_then_chains_reached_ones() -> None:
    rng = np.random.default_rng(0)
    s = InitialStartStates(
        lambda n, g: np.column_stack([np.zeros(n), np.zeros(n), g.uniform(-1, 1, n)]),
        obs_dim=3,
        horizon=10,
        capacity=100,
        init_fraction=0.25,
    )
    obs, steps = s.sample(8, rng)  # empty pool: initial states only, time 0
    assert np.all(steps == 0) and np.all(obs[:, 0] == 0)
    reached = np.full((6, 3), 7.0)
    s.extend(reached, np.array([3, 4, 9, 10, 11, 5]))  # t ≥ horizon is truncated, not pooled
    assert s.size == 4
    obs, steps = s.sample(400, rng)
    from_pool = obs[:, 0] == 7.0
    assert from_pool.sum() == 300  # 1 − init_fraction of the batch
    assert set(steps[from_pool].tolist()) <= {3, 4, 5, 9} and np.all(steps[~from_pool] == 0)
    state = s.state_dict()
    t = InitialStartStates(lambda n, g: np.zeros((n, 3)), 3, 10, 100, 0.25)
    t.load_state_dict(state)
    assert t.size == s.size and t.ptr == s.ptr


def test_initial_mode_uses_the_simulators_initial_distribution() -> None:
    s = make_start_states("initial", TASK, pool_capacity=10)
    obs, steps = s.sample(500, np.random.default_rng(1))
    np.testing.assert_allclose(obs[:, 0] ** 2 + obs[:, 1] ** 2, 1.0, atol=1e-6)
    assert np.all(np.abs(obs[:, 2]) <= 1.0) and np.all(steps == 0)  # Pendulum: θ̇ ~ U(−1, 1)


def test_public_split_mode_draws_only_given_states() -> None:
    states = np.arange(12, dtype=np.float64).reshape(4, 3)
    s = PublicSplitStartStates(states, np.array([0, 1, 2, 3]))
    obs, steps = s.sample(50, np.random.default_rng(0))
    rows = {tuple(r) for r in obs.tolist()}
    assert rows <= {tuple(r) for r in states.tolist()}
    np.testing.assert_array_equal(obs[:, 0] / 3, steps)
    s.extend(np.zeros((3, 3)), np.zeros(3))  # fixed pools do not grow
    assert {tuple(r) for r in s.sample(50, np.random.default_rng(1))[0].tolist()} <= {
        tuple(r) for r in states.tolist()
    }


# --------------------------------------------------------------------------------------------
# rollouts
# --------------------------------------------------------------------------------------------


class Drift:
    """Deterministic 'model': s' = s + 1, r̂ = 1, constant uncertainty 0.5; rows whose first
    coordinate is negative blow up (NaN) to exercise the divergence guard."""

    obs_dim, act_dim = 3, 1

    def predict(self, obs: Any, act: Any, generator: Any = None, deterministic: bool = False):
        obs = np.asarray(obs, dtype=np.float64)
        nxt = obs + 1.0
        nxt[obs[:, 0] < 0] = np.nan
        b = obs.shape[0]
        stds = np.full((2, b, 4), 0.5 / 2.0)  # ‖σ‖ over 4 outputs = 0.5
        return nxt, np.ones(b), {"means": np.zeros((2, b, 4)), "stds": stds}


def test_rollouts_are_never_terminal_and_truncate_at_the_horizon() -> None:
    pm = PenalizedModel(Drift(), "ma", lam=2.0)
    start = np.zeros((3, 3))
    steps = np.array([0, 197, 199])  # Pendulum horizon 200
    ro = model_rollout(
        pm, lambda o: np.zeros((len(o), 1)), start, steps, 5, 200, generator=torch.Generator()
    )
    # row 0: 5 steps; row 1: 3 steps (197, 198, 199); row 2: 1 step
    assert ro.rew.shape[0] == 5 + 3 + 1
    assert np.all(ro.done == 0)
    np.testing.assert_allclose(ro.rew, 1.0 - 2.0 * 0.5)
    np.testing.assert_allclose(ro.model_reward, 1.0)
    assert ro.reached_steps.max() < 200  # states at the horizon are never chained
    assert sorted(ro.reached_steps.tolist()) == [1, 2, 3, 4, 5, 198, 199]
    # already at the horizon: nothing happens
    none = model_rollout(
        pm, lambda o: np.zeros((len(o), 1)), start[:1], np.array([200]), 5, 200, generator=None
    )
    assert none.rew.shape[0] == 0


def test_bounded_rollouts_stay_inside_the_simulators_box_and_reward_range() -> None:
    """Held rollouts: s' clipped to the public observation box, r̂ to the reward range, and r̃
    moved by the same amount (the penalty λu is unchanged)."""
    pm = PenalizedModel(Drift(), "ma", lam=2.0)
    bounds = RolloutBounds(np.array([-1.0, -1.0, -8.0]), np.array([1.0, 1.0, 8.0]), (0.0, 0.5))
    start = np.array([[0.5, 0.0, 7.5]])
    act = lambda o: np.zeros((len(o), 1))  # noqa: E731
    ro = model_rollout(pm, act, start, np.zeros(1), 4, 200, generator=None, bounds=bounds)
    assert np.all(ro.next_obs <= [1.0, 1.0, 8.0]) and np.all(ro.next_obs >= [-1.0, -1.0, -8.0])
    np.testing.assert_allclose(ro.next_obs[-1], [1.0, 1.0, 8.0])
    np.testing.assert_allclose(ro.model_reward, 0.5)  # r̂ = 1 clipped to the range's top
    np.testing.assert_allclose(ro.rew, 0.5 - 2.0 * 0.5)
    free = model_rollout(pm, act, start, np.zeros(1), 4, 200, generator=None)
    assert free.next_obs[-1, 2] == pytest.approx(11.5)  # unbounded: leaves the box


def test_pendulum_bounds_come_from_the_simulator() -> None:
    b = RolloutBounds.of_task(control_task("pendulum"))
    np.testing.assert_allclose(b.obs_high, [1.0, 1.0, 8.0])
    assert b.reward_range == (0.0, 1.0)
    assert RolloutBounds.of_task(control_task("halfcheetah")).reward_range is None


def test_diverging_rollouts_are_dropped() -> None:
    pm = PenalizedModel(Drift(), "ma", lam=0.0)
    start = np.array([[-1.0, 0, 0], [0.0, 0, 0]])
    ro = model_rollout(
        pm, lambda o: np.zeros((len(o), 1)), start, np.zeros(2), 3, 200, generator=None
    )
    assert ro.dropped == 1 and ro.rew.shape[0] == 3
    assert np.all(np.isfinite(ro.next_obs))


def test_stage_model_transitions_are_never_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    dones: list[torch.Tensor] = []
    orig = SAC.update

    def spy(self: SAC, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        dones.append(batch["done"].clone())
        return orig(self, batch)

    monkeypatch.setattr(SAC, "update", spy)
    cfg = tiny_config(epochs=1)
    run_policy_stage(tiny_model(), initial_starts(cfg), TASK, cfg, seed=0)
    assert len(dones) == cfg.steps_per_epoch and all(float(d.abs().sum()) == 0 for d in dones)


# --------------------------------------------------------------------------------------------
# real-data ratio
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("ratio", "expected"), [(0.05, 13), (0.5, 128), (0.0, 0)])
def test_real_ratio_sets_the_share_of_real_rows_in_every_batch(
    monkeypatch: pytest.MonkeyPatch, ratio: float, expected: int
) -> None:
    """Real rows carry a marker reward (1000) that model rows (|r̃| small) never reach; each
    SAC batch of 256 must hold round(ratio · 256) of them (MOPO: 0.05 → 13)."""
    counts: list[int] = []
    orig = SAC.update

    def spy(self: SAC, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        counts.append(int((batch["rew"] == 1000.0).sum()))
        assert batch["obs"].shape[0] == 256
        return orig(self, batch)

    monkeypatch.setattr(SAC, "update", spy)
    n = 500
    real = ReplayBuffer(3, 1, n, seed=0)
    rng = np.random.default_rng(0)
    real.add_batch(
        rng.normal(size=(n, 3)), rng.uniform(-2, 2, (n, 1)), np.full(n, 1000.0),
        rng.normal(size=(n, 3)), np.zeros(n),
    )  # fmt: skip
    cfg = tiny_config(
        epochs=1,
        steps_per_epoch=5,
        real_ratio=ratio,
        sac=SACConfig(hidden=(16, 16), batch_size=256, target_entropy=-3.0),
    )
    run_policy_stage(tiny_model(), initial_starts(cfg), TASK, cfg, seed=0, real_buffer=real)
    assert counts == [expected] * 5


# --------------------------------------------------------------------------------------------
# checkpoint / resume
# --------------------------------------------------------------------------------------------


class Interrupt(Exception):
    pass


def _comparable(curve: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if "seconds" not in k} for r in curve]


@pytest.mark.parametrize("mode", ["initial", "dataset"])
def test_resume_after_interruption_gives_the_uninterrupted_result(
    tmp_path: Path, mode: str
) -> None:
    cfg = tiny_config(epochs=4, real_ratio=0.25 if mode == "dataset" else 0.0)
    rng = np.random.default_rng(3)
    data_states = (rng.normal(size=(200, 3)), rng.integers(0, 200, 200))

    def real_buffer() -> ReplayBuffer | None:
        if mode != "dataset":
            return None
        buf = ReplayBuffer(3, 1, 200, seed=5)
        r = np.random.default_rng(4)
        buf.add_batch(
            r.normal(size=(200, 3)), r.uniform(-2, 2, (200, 1)), r.normal(size=200),
            r.normal(size=(200, 3)), np.zeros(200),
        )  # fmt: skip
        return buf

    def starts() -> Any:
        return make_start_states(
            mode, TASK, pool_capacity=cfg.model_buffer_capacity, dataset_states=data_states
        )

    full = run_policy_stage(
        tiny_model(), starts(), TASK, cfg, seed=7, real_buffer=real_buffer(),
        checkpoint=tmp_path / "a.pt",
    )  # fmt: skip

    def stop_at_2(record: dict[str, Any]) -> None:
        if record["epoch"] == 2:
            raise Interrupt

    with pytest.raises(Interrupt):
        run_policy_stage(
            tiny_model(), starts(), TASK, cfg, seed=7, real_buffer=real_buffer(),
            checkpoint=tmp_path / "b.pt", progress=stop_at_2,
        )  # fmt: skip
    assert ps.load_checkpoint(tmp_path / "b.pt")["epoch"] == 2
    resumed = run_policy_stage(
        tiny_model(), starts(), TASK, cfg, seed=7, real_buffer=real_buffer(),
        checkpoint=tmp_path / "b.pt",
    )  # fmt: skip
    assert resumed.resumed_from == 2 and full.resumed_from == 0
    assert _comparable(resumed.curve) == _comparable(full.curve)
    np.testing.assert_array_equal(resumed.eval_returns, full.eval_returns)
    assert resumed.return_mean == full.return_mean
    for (k, a), b in zip(
        full.agent.actor.state_dict().items(),
        resumed.agent.actor.state_dict().values(),
        strict=True,
    ):
        assert torch.equal(a, b), k
    assert torch.equal(full.agent.log_alpha, resumed.agent.log_alpha)
    ckpt = ps.load_checkpoint(tmp_path / "a.pt")
    assert ckpt["epoch"] == 4 and ckpt["dynamics_model"] is not None


def test_finished_checkpoint_returns_without_training_and_can_be_extended(
    tmp_path: Path,
) -> None:
    cfg = tiny_config(epochs=2)
    path = tmp_path / "c.pt"
    first = run_policy_stage(tiny_model(), initial_starts(cfg), TASK, cfg, seed=1, checkpoint=path)
    again = run_policy_stage(tiny_model(), initial_starts(cfg), TASK, cfg, seed=1, checkpoint=path)
    assert again.resumed_from == 2 and _comparable(again.curve) == _comparable(first.curve)
    longer = tiny_config(epochs=3)
    ext = run_policy_stage(
        tiny_model(), initial_starts(longer), TASK, longer, seed=1, checkpoint=path
    )
    assert len(ext.curve) == 3 and _comparable(ext.curve[:2]) == _comparable(first.curve)
    shorter = tiny_config(epochs=1)
    with pytest.raises(ValueError, match="already has 3 epochs"):
        run_policy_stage(
            tiny_model(), initial_starts(shorter), TASK, shorter, seed=1, checkpoint=path
        )


def test_checkpoint_of_another_run_is_refused(tmp_path: Path) -> None:
    cfg = tiny_config(epochs=1)
    path = tmp_path / "d.pt"
    run_policy_stage(tiny_model(), initial_starts(cfg), TASK, cfg, seed=1, checkpoint=path)
    with pytest.raises(ValueError, match=r"different run.*seed"):
        run_policy_stage(tiny_model(), initial_starts(cfg), TASK, cfg, seed=2, checkpoint=path)
    with pytest.raises(ValueError, match="model_digest"):
        run_policy_stage(
            tiny_model(seed=5), initial_starts(cfg), TASK, cfg, seed=1, checkpoint=path
        )
    with pytest.raises(ValueError, match="config"):
        other = tiny_config(epochs=1, rollout_length=2)
        run_policy_stage(tiny_model(), initial_starts(other), TASK, other, seed=1, checkpoint=path)


def test_result_reports_mode_curve_and_last_epochs_average() -> None:
    cfg = tiny_config(epochs=3, final_epochs=2)
    res = run_policy_stage(tiny_model(), initial_starts(cfg), TASK, cfg, seed=0)
    assert res.eval_returns.shape == (3, 2)
    assert res.return_mean == pytest.approx(res.eval_returns[-2:].mean())
    assert res.return_std == pytest.approx(res.eval_returns[-2:].std())
    assert [r["epoch"] for r in res.curve] == [1, 2, 3]
    assert all(r["start_mode"] == "initial" for r in res.curve)
    # Pendulum returns per step lie in [0, 1]
    assert np.all((res.eval_returns >= 0) & (res.eval_returns <= TASK.horizon))


def test_a_non_finite_policy_is_refused_before_it_acts() -> None:
    from privrl.primorl.policy_stage import POLICY_DIVERGED, check_finite_policy

    actor = torch.nn.Linear(3, 2)
    check_finite_policy(actor, 1)
    with torch.no_grad():
        actor.weight[0, 0] = float("nan")
    with pytest.raises(RuntimeError, match=POLICY_DIVERGED):
        check_finite_policy(actor, 2)
