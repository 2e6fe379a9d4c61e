"""Vectorised simulators with the same dynamics and rewards as the control envs.

``make_batched(task, n)`` returns a :class:`BatchedControlEnv` that runs ``n`` episodes in
lockstep (float64 throughout): for collecting datasets, evaluating policies on many episodes at
once and sampling start states from the task's initial distribution (public simulator
knowledge, used for model-rollout starts).

- **Pendulum**: gymnasium's Pendulum-v1 equations in numpy, with the reward transform of
  :func:`privrl.envs.control.pendulum_reward_transform` for privrl/Pendulum-v0 (the raw
  reward −cost for the task of the standard id Pendulum-v1).
- **Cartpole balance / swingup**: dm_control's cartpole model compiled as a raw
  ``mujoco.MjModel``; one control step = one physics step (dm_control's default, 0.01 s, RK4);
  initial-state sampling and the dense reward re-implemented in numpy.
- **HalfCheetah**: gymnasium's ``half_cheetah.xml``, 5 physics steps per control step,
  reward = 1.0·ẋ − 0.1·‖a‖², obs = qpos[1:] ++ qvel, reset noise 0.1 (HalfCheetah-v5).

MuJoCo stepping: one ``MjData`` is reused for all episodes; each episode's integration state
(qpos, qvel, qacc_warmstart, ctrl) lives in a row of a numpy array and is swapped in with
``mj_setState``/``mj_getState`` around ``mj_step``. Keeping the warm start makes the result
bit-identical to a dedicated ``MjData`` per episode (and so to dm_control / Gymnasium), which
``mujoco.rollout`` (it does not return the warm start) is not once constraints are active
(joint limits, contacts); at equal speed, see docs/control.md.
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from privrl.arrays import BoolArray, FloatArray
from privrl.envs.control import (
    ControlTask,
    control_task,
    import_dm_cartpole,
    pendulum_reward_transform,
)

__all__ = [
    "BatchedCartpole",
    "BatchedControlEnv",
    "BatchedHalfCheetah",
    "BatchedPendulum",
    "make_batched",
]


class BatchedControlEnv(ABC):
    """``num_envs`` episodes of one task stepped together.

    The physical state (``get_state``/``set_state``) is task-specific: Pendulum (θ, θ̇);
    MuJoCo tasks qpos ++ qvel. Truncation at ``horizon`` is the caller's job (``elapsed_steps``
    counts steps since the last reset); no task here ever terminates.
    """

    task: ControlTask
    num_envs: int
    horizon: int
    state_dim: int

    def __init__(self, task: ControlTask, num_envs: int, seed: int | None = None) -> None:
        if int(num_envs) < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.task = task
        self.num_envs = int(num_envs)
        self.horizon = task.horizon
        self.elapsed_steps = 0
        self._rng = np.random.default_rng(seed)
        self._ready = False

    # -- public API ---------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> FloatArray:
        """Start ``num_envs`` episodes from the initial distribution; returns obs [n, obs_dim].

        With ``seed`` the env's generator is reseeded; without, it continues its stream.
        """
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        return self.set_state(self._sample_initial_states(self.num_envs, self._rng))

    def step(self, actions: np.ndarray) -> tuple[FloatArray, FloatArray, BoolArray]:
        """Apply ``actions`` [n, act_dim] (clipped to the action box).

        Returns (next_obs [n, obs_dim], reward [n], terminated [n], always False).
        """
        if not self._ready:
            raise RuntimeError("call reset() (or set_state()) before step()")
        a = self._check_actions(actions)
        reward = self._step(a)
        self.elapsed_steps += 1
        return self._observe_current(), reward, np.zeros(self.num_envs, dtype=bool)

    def sample_initial_observations(self, n: int, rng: np.random.Generator) -> FloatArray:
        """``n`` observations drawn from the task's initial-state distribution."""
        if int(n) < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        return self._observe(self._sample_initial_states(int(n), rng))

    def get_state(self) -> FloatArray:
        """Copy of the physical state, [n, state_dim]."""
        if not self._ready:
            raise RuntimeError("call reset() (or set_state()) first")
        return self._get_state()

    def set_state(self, state: np.ndarray, warmstart: np.ndarray | None = None) -> FloatArray:
        """Set the physical state [n, state_dim] (as just after a reset); returns obs.

        ``warmstart`` ([n, nv], MuJoCo tasks only) is the solver warm start carried between
        steps; leave it ``None`` for a freshly reset state (MuJoCo's reset zeroes it).
        """
        s = np.asarray(state, dtype=np.float64)
        if s.shape != (self.num_envs, self.state_dim):
            raise ValueError(
                f"expected state of shape {(self.num_envs, self.state_dim)}, got {s.shape}"
            )
        if not np.all(np.isfinite(s)):
            raise ValueError("state contains NaN or infinite values")
        self._set_state(s, warmstart)
        self.elapsed_steps = 0
        self._ready = True
        return self._observe_current()

    def set_state_from_gym(self, envs: Sequence[Any]) -> FloatArray:
        """Copy the physical state of ``num_envs`` Gymnasium envs of this task; returns obs."""
        if len(envs) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} Gymnasium envs, got {len(envs)}")
        pairs = [self.gym_state(env) for env in envs]
        states = np.stack([p[0] for p in pairs])
        warm = None if pairs[0][1] is None else np.stack([p[1] for p in pairs])
        return self.set_state(states, warm)

    @staticmethod
    @abstractmethod
    def gym_state(env: Any) -> tuple[FloatArray, FloatArray | None]:
        """(physical state, warm start or None) of one Gymnasium env of this task."""

    # -- task-specific parts ------------------------------------------------------------------

    @abstractmethod
    def _sample_initial_states(self, n: int, rng: np.random.Generator) -> FloatArray: ...

    @abstractmethod
    def _observe(self, states: FloatArray) -> FloatArray: ...

    @abstractmethod
    def _get_state(self) -> FloatArray: ...

    @abstractmethod
    def _set_state(self, state: FloatArray, warmstart: np.ndarray | None) -> None: ...

    @abstractmethod
    def _step(self, actions: FloatArray) -> FloatArray: ...

    def _observe_current(self) -> FloatArray:
        return self._observe(self._get_state())

    def _check_actions(self, actions: np.ndarray) -> FloatArray:
        a = np.asarray(actions, dtype=np.float64)
        expected = (self.num_envs, self.task.act_dim)
        if a.shape != expected:
            raise ValueError(f"expected actions of shape {expected}, got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError("actions contain NaN or infinite values")
        return np.clip(a, self.task.action_low, self.task.action_high)


# ------------------------------------------------------------------------------------------
# Pendulum (gymnasium Pendulum-v1, pure numpy)


class BatchedPendulum(BatchedControlEnv):
    """Pendulum-v1: g = 10, m = l = 1, dt = 0.05, |θ̇| ≤ 8, |u| ≤ 2; state (θ, θ̇)."""

    state_dim = 2
    g, m, l, dt, max_speed, max_torque = 10.0, 1.0, 1.0, 0.05, 8.0, 2.0  # noqa: E741

    def __init__(self, task: ControlTask, num_envs: int, seed: int | None = None) -> None:
        super().__init__(task, num_envs, seed)
        self._state = np.zeros((self.num_envs, 2))

    @staticmethod
    def gym_state(env: Any) -> tuple[FloatArray, None]:
        return np.array(env.unwrapped.state, dtype=np.float64), None

    def _sample_initial_states(self, n: int, rng: np.random.Generator) -> FloatArray:
        return rng.uniform(low=[-np.pi, -1.0], high=[np.pi, 1.0], size=(n, 2))

    def _observe(self, states: FloatArray) -> FloatArray:
        th, thdot = states[:, 0], states[:, 1]
        return np.stack([np.cos(th), np.sin(th), thdot], axis=1)

    def _get_state(self) -> FloatArray:
        return self._state.copy()

    def _set_state(self, state: FloatArray, warmstart: np.ndarray | None) -> None:
        if warmstart is not None:
            raise ValueError("Pendulum has no warm start")
        self._state = state.copy()

    def _step(self, actions: FloatArray) -> FloatArray:
        th, thdot = self._state[:, 0], self._state[:, 1]
        u = actions[:, 0]
        norm_th = ((th + np.pi) % (2 * np.pi)) - np.pi  # angle_normalize
        costs = norm_th**2 + 0.1 * thdot**2 + 0.001 * (u**2)
        g, m, l, dt = self.g, self.m, self.l, self.dt  # noqa: E741
        newthdot = thdot + (3 * g / (2 * l) * np.sin(th) + 3.0 / (m * l**2) * u) * dt
        newthdot = np.clip(newthdot, -self.max_speed, self.max_speed)
        newth = th + newthdot * dt
        self._state = np.stack([newth, newthdot], axis=1)
        if self.task.reward_transform == "privrl":
            return pendulum_reward_transform(-costs)
        return -costs


# ------------------------------------------------------------------------------------------
# MuJoCo tasks


class _MujocoBatch(BatchedControlEnv):
    """Shared MuJoCo machinery: one MjData, per-episode integration state in ``_buf`` rows."""

    n_sub_steps: int

    def __init__(
        self, task: ControlTask, num_envs: int, model: mujoco.MjModel, seed: int | None = None
    ) -> None:
        super().__init__(task, num_envs, seed)
        self.model = model
        self._data = mujoco.MjData(model)
        nq, nv, nu = model.nq, model.nv, model.nu
        self.state_dim = nq + nv
        s = mujoco.mjtState
        self._spec = int(s.mjSTATE_QPOS | s.mjSTATE_QVEL | s.mjSTATE_WARMSTART | s.mjSTATE_CTRL)
        if mujoco.mj_stateSize(model, self._spec) != nq + 2 * nv + nu:
            raise RuntimeError("unexpected MuJoCo state layout")
        # Row layout (mjtState bit order): qpos | qvel | qacc_warmstart | ctrl.
        self._nq, self._nv, self._nu = nq, nv, nu
        self._buf = np.zeros((self.num_envs, nq + 2 * nv + nu))
        self._rows = list(self._buf)  # views: mj_getState writes straight into _buf

    @staticmethod
    def _gym_data_state(data: Any) -> tuple[FloatArray, FloatArray]:
        state = np.concatenate([data.qpos, data.qvel]).astype(np.float64)
        return state, np.array(data.qacc_warmstart, dtype=np.float64)

    def _get_state(self) -> FloatArray:
        return self._buf[:, : self.state_dim].copy()

    def _set_state(self, state: FloatArray, warmstart: np.ndarray | None) -> None:
        nq, nv = self._nq, self._nv
        self._buf[:, : nq + nv] = state
        if warmstart is None:
            self._buf[:, nq + nv : nq + 2 * nv] = 0.0
        else:
            w = np.asarray(warmstart, dtype=np.float64)
            if w.shape != (self.num_envs, nv):
                raise ValueError(
                    f"expected warmstart of shape {(self.num_envs, nv)}, got {w.shape}"
                )
            self._buf[:, nq + nv : nq + 2 * nv] = w
        self._buf[:, nq + 2 * nv :] = 0.0

    def _advance(self, ctrl: FloatArray) -> None:
        """Set ctrl and take ``n_sub_steps`` physics steps in every episode."""
        m, d, spec, nsub = self.model, self._data, self._spec, self.n_sub_steps
        self._buf[:, self._nq + 2 * self._nv :] = ctrl
        warnings_before = d.warning.number.copy()
        set_state, get_state, mj_step = mujoco.mj_setState, mujoco.mj_getState, mujoco.mj_step
        for row in self._rows:  # C calls only; MuJoCo has no warm-start-preserving batch step
            set_state(m, d, row, spec)
            mj_step(m, d, nsub)
            get_state(m, d, row, spec)
        raised = d.warning.number > warnings_before
        if raised.any():  # as dm_control's Physics.check_invalid_state
            self._ready = False
            names = [w for w, r in zip(mujoco.mjtWarning.__members__, raised, strict=False) if r]
            raise RuntimeError(
                f"MuJoCo reported an invalid physics state ({', '.join(names)}); MuJoCo reset "
                "the affected episodes, so call reset() or set_state() before stepping again"
            )


class BatchedCartpole(_MujocoBatch):
    """dm_control cartpole ``balance`` / ``swingup`` with the dense (non-sparse) reward."""

    n_sub_steps = 1  # dm_control's Environment default; 0.01 s control step

    def __init__(self, task: ControlTask, num_envs: int, seed: int | None = None) -> None:
        if task.name not in ("balance", "swingup"):
            raise ValueError(f"not a cartpole task: {task.name!r}")
        xml, assets = import_dm_cartpole().get_model_and_assets()
        super().__init__(task, num_envs, mujoco.MjModel.from_xml_string(xml, assets), seed)
        self.swing_up = task.name == "swingup"

    @staticmethod
    def gym_state(env: Any) -> tuple[FloatArray, FloatArray]:
        return _MujocoBatch._gym_data_state(env.unwrapped.physics.data)

    def _sample_initial_states(self, n: int, rng: np.random.Generator) -> FloatArray:
        # cartpole.Balance.initialize_episode (nv = 2)
        if self.swing_up:
            x = 0.01 * rng.standard_normal(n)
            th = np.pi + 0.01 * rng.standard_normal(n)
        else:
            x = rng.uniform(-0.1, 0.1, n)
            th = rng.uniform(-0.034, 0.034, n)
        qvel = 0.01 * rng.standard_normal((n, 2))
        return np.column_stack([x, th, qvel])

    def _observe(self, states: FloatArray) -> FloatArray:
        th = states[:, 1]
        return np.column_stack([states[:, 0], np.cos(th), np.sin(th), states[:, 2], states[:, 3]])

    def _step(self, actions: FloatArray) -> FloatArray:
        self._advance(actions)
        s = self._buf
        cart_x, cos_th, th_dot, u = s[:, 0], np.cos(s[:, 1]), s[:, 3], actions[:, 0]
        # cartpole.Balance._get_reward(sparse=False), rewards.tolerance written out:
        # gaussian tolerance(v, margin) = exp(−½ (|v|/margin · √(−2 ln 0.1))²)
        gauss = np.sqrt(-2 * np.log(0.1))
        upright = (cos_th + 1) / 2
        centered = (1 + np.exp(-0.5 * (np.abs(cart_x) / 2 * gauss) ** 2)) / 2
        small_control = (4 + np.where(np.abs(u) < 1, 1 - u**2, 0.0)) / 5  # quadratic, margin 1
        small_velocity = (1 + np.exp(-0.5 * (np.abs(th_dot) / 5 * gauss) ** 2)) / 2
        return upright * small_control * small_velocity * centered


def _half_cheetah_xml() -> Path:
    spec = importlib.util.find_spec("gymnasium.envs.mujoco")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("gymnasium's MuJoCo environments are not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "assets" / "half_cheetah.xml"


class BatchedHalfCheetah(_MujocoBatch):
    """HalfCheetah-v5 defaults: frame_skip 5, forward weight 1.0, ctrl cost 0.1, noise 0.1."""

    n_sub_steps = 5
    forward_reward_weight = 1.0
    ctrl_cost_weight = 0.1
    reset_noise_scale = 0.1

    def __init__(self, task: ControlTask, num_envs: int, seed: int | None = None) -> None:
        model = mujoco.MjModel.from_xml_path(str(_half_cheetah_xml()))
        super().__init__(task, num_envs, model, seed)
        self.dt = model.opt.timestep * self.n_sub_steps
        self._init_qpos = model.qpos0.copy()

    @staticmethod
    def gym_state(env: Any) -> tuple[FloatArray, FloatArray]:
        return _MujocoBatch._gym_data_state(env.unwrapped.data)

    def _sample_initial_states(self, n: int, rng: np.random.Generator) -> FloatArray:
        c = self.reset_noise_scale
        qpos = self._init_qpos + rng.uniform(-c, c, size=(n, self._nq))
        qvel = c * rng.standard_normal((n, self._nv))
        return np.concatenate([qpos, qvel], axis=1)

    def _observe(self, states: FloatArray) -> FloatArray:
        return states[:, 1:].copy()  # qpos[1:] ++ qvel (exclude x position)

    def _step(self, actions: FloatArray) -> FloatArray:
        x_before = self._buf[:, 0].copy()
        self._advance(actions)
        x_velocity = (self._buf[:, 0] - x_before) / self.dt
        ctrl_cost = self.ctrl_cost_weight * np.sum(np.square(actions), axis=1)
        return self.forward_reward_weight * x_velocity - ctrl_cost


_CLASSES: dict[str, type[BatchedControlEnv]] = {
    "pendulum": BatchedPendulum,
    "balance": BatchedCartpole,
    "swingup": BatchedCartpole,
    "halfcheetah": BatchedHalfCheetah,
}


def make_batched(
    task: str | ControlTask, num_envs: int, seed: int | None = None
) -> BatchedControlEnv:
    """Batched simulator for ``task`` (name, Gymnasium id or :class:`ControlTask`)."""
    t = control_task(task)
    return _CLASSES[t.name](t, num_envs, seed)  # type: ignore[call-arg]
