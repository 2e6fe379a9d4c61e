"""Perturbed physics for the expert-level DP experiments (Sharma et al., Appendix B.1).

Every expert is a policy for a *perturbed* copy of an environment and demonstrates on the
default one. This module holds the perturbations and vectorised simulators for them:

* :class:`CartPoleBatch` — gymnasium's ``CartPole-v1`` in numpy, batched over episodes, with
  per-episode ``gravity``, ``force_mag``, ``masscart`` (``total_mass`` and
  ``polemass_length`` recomputed as gymnasium does). Same Euler step, same termination rule
  (|x| > 2.4 or |θ| > 12°), reward 1 on every step including the terminating one.
* :class:`AcrobotBatch` — gymnasium's ``Acrobot-v1`` ("book" dynamics, one RK4 step of
  dt = 0.2, angle wrapping, velocity clipping, float32 start state), batched, with
  per-episode link lengths and masses set the way gymnasium's class attributes would be
  (``LINK_LENGTH_1`` enters the dynamics; ``LINK_LENGTH_2`` only the rendering).
* :class:`PerturbedHIVBatch` — :class:`privrl.envs.hiv.HIVBatch` with per-episode drug
  penalties R1, R2 in the reward and optional Gaussian noise on the efficacy of the drugs
  that are given.
* :func:`make_lunar_lander` / :func:`set_lunar_lander_physics` — gymnasium's Box2D
  ``LunarLander`` with a given gravity, wind power and turbulence power (Box2D does not
  vectorise; :func:`lunar_lander_rollout` steps a pool of single environments).

The perturbation grids are the paper's (:data:`PAPER_GRIDS`); :func:`expert_settings` assigns
one grid point to each of m experts.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, NamedTuple, Self

import gymnasium as gym
import numpy as np
import numpy.typing as npt

from privrl.arrays import FloatArray
from privrl.envs.hiv import HIVBatch, PerEpisodeParams, RewardWeights, efficacies

__all__ = [
    "HIV_DEFAULT",
    "PAPER_GRIDS",
    "AcrobotBatch",
    "AcrobotParams",
    "CartPoleBatch",
    "CartPoleParams",
    "PerturbationGrid",
    "PerturbedHIVBatch",
    "Rollout",
    "expert_settings",
    "lunar_lander_rollout",
    "make_lunar_lander",
    "numpy_rollout",
    "set_lunar_lander_physics",
]

ParamLike = float | FloatArray

# ============================================================================ perturbation grids


@dataclass(frozen=True)
class PerturbationGrid:
    """A product grid of physics settings: ``axes[name]`` lists the values of one parameter."""

    env: str
    axes: Mapping[str, tuple[float, ...]]

    @classmethod
    def linspace(cls, env: str, **ranges: tuple[float, float, int]) -> PerturbationGrid:
        """``name=(low, high, count)``: ``count`` equally spaced values from low to high."""
        return cls(env, {k: tuple(np.linspace(*r).tolist()) for k, r in ranges.items()})

    @property
    def size(self) -> int:
        return int(np.prod([len(v) for v in self.axes.values()]))

    def points(self) -> dict[str, FloatArray]:
        """All grid points, ``{name: [size]}`` (first axis varies slowest)."""
        mesh = np.meshgrid(*[np.asarray(v) for v in self.axes.values()], indexing="ij")
        return {k: m.reshape(-1) for k, m in zip(self.axes, mesh, strict=True)}

    def bounds(self) -> dict[str, tuple[float, float]]:
        return {k: (float(min(v)), float(max(v))) for k, v in self.axes.items()}


PAPER_GRIDS: dict[str, PerturbationGrid] = {
    # Appendix B.1: 10 values per parameter, 1000 settings, top 3 PPO agents each.
    "cartpole": PerturbationGrid.linspace(
        "CartPole-v1",
        gravity=(8.75, 11.0, 10),
        force_mag=(9.0, 11.25, 10),
        masscart=(0.8, 1.25, 10),
    ),
    # One length for both links (only LINK_LENGTH_1 enters gymnasium's dynamics).
    "acrobot": PerturbationGrid.linspace(
        "Acrobot-v1",
        link_length=(0.8, 1.2, 10),
        link_mass_1=(0.9, 1.1, 10),
        link_mass_2=(0.9, 1.1, 10),
    ),
    # The paper's "gravity 9.0 to 11.0" is a magnitude; gymnasium's gravity is negative.
    "lunarlander": PerturbationGrid.linspace(
        "LunarLander-v3",
        gravity=(-11.0, -9.0, 10),
        wind_power=(0.0, 5.0, 10),
        turbulence_power=(0.0, 0.5, 10),
    ),
    # 50 × 20 penalties × {no noise, efficacy noise std 0.01}: 2000 settings; the best agent of
    # each plus 1000 second-best ones.
    "hiv": PerturbationGrid.linspace(
        "privrl/HIV-v0",
        r1=(18750.0, 21250.0, 50),
        r2=(1850.0, 2150.0, 20),
        efficacy_std=(0.0, 0.01, 2),
    ),
}


def expert_settings(
    grid: PerturbationGrid, m: int, rng: np.random.Generator
) -> dict[str, FloatArray]:
    """One grid point per expert: every point ⌊m / size⌋ times, the remainder drawn without
    replacement (m = 3000 on 1000 points: each point thrice; on 2000 points: all once and 1000
    of them twice; m < size: m distinct random points). ``setting`` holds the point's index."""
    if m < 1:
        raise ValueError(f"need m >= 1 experts, got {m}")
    k, r = divmod(m, grid.size)
    idx = np.concatenate(
        [np.tile(np.arange(grid.size), k), np.sort(rng.choice(grid.size, size=r, replace=False))]
    )
    pts = grid.points()
    out = {name: v[idx] for name, v in pts.items()}
    out["setting"] = idx.astype(np.float64)
    return out


# ============================================================================ batched rollouts


class Rollout(NamedTuple):
    """Episodes padded to ``horizon``: ``obs`` [n, H + 1, d] (rows past an episode's final
    observation are zero), ``actions``, ``rewards``, ``probs`` [n, H] (probability of each
    taken action, when the policy reports it), ``lengths`` [n], ``terminated`` [n] (the last
    step entered a terminal state; otherwise the episode hit the horizon)."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    probs: np.ndarray | None
    lengths: np.ndarray
    terminated: np.ndarray

    def returns(self) -> FloatArray:
        return self.rewards.sum(axis=1, dtype=np.float64)


# act(obs [k, d], episode_index [k], rng) -> actions [k] or (actions [k], probs [k])
ActFn = Callable[[np.ndarray, np.ndarray, np.random.Generator], Any]


def _split_act(out: Any) -> tuple[np.ndarray, np.ndarray | None]:
    if isinstance(out, tuple):
        return np.asarray(out[0]), np.asarray(out[1])
    return np.asarray(out), None


def numpy_rollout(
    env: CartPoleBatch | AcrobotBatch | PerturbedHIVBatch,
    act: ActFn,
    n: int,
    horizon: int,
    rng: np.random.Generator,
    *,
    record: bool = True,
    obs_dtype: npt.DTypeLike = np.float32,
) -> Rollout:
    """Run n episodes of a batched simulator for at most ``horizon`` steps.

    Episodes that terminate drop out of the batch (per-episode parameters are subset with
    them). With ``record=False`` only rewards, lengths and flags are kept (``obs`` is empty).
    """
    state = env.reset(n, rng)
    d = env.observe(state[:1]).shape[1]
    obs = np.zeros((n, horizon + 1, d) if record else (0, 0, d), dtype=obs_dtype)
    actions = np.zeros((n, horizon) if record else (0, 0), dtype=np.int64)
    rewards = np.zeros((n, horizon), dtype=np.float64)
    probs: np.ndarray | None = None
    lengths = np.full(n, horizon, dtype=np.int64)
    terminated = np.zeros(n, dtype=bool)
    idx = np.arange(n)
    sub = env
    for t in range(horizon):
        o = sub.observe(state)
        if record:
            obs[idx, t] = o
        a, p = _split_act(act(o, idx, rng))
        if record:
            actions[idx, t] = a
            if p is not None:
                if probs is None:
                    probs = np.zeros((n, horizon), dtype=np.float64)
                probs[idx, t] = p
        state, r, term = sub.step(state, a, rng)
        rewards[idx, t] = r
        if term.any():
            done = idx[term]
            lengths[done] = t + 1
            terminated[done] = True
            if record:
                obs[done, t + 1] = sub.observe(state[term])
            keep = ~term
            idx, state = idx[keep], state[keep]
            sub = sub.subset(keep)
            if idx.size == 0:
                break
    if record and idx.size:
        obs[idx, horizon] = sub.observe(state)
    return Rollout(obs, actions, rewards, probs, lengths, terminated)


def _subset_params(params: Any, keep: np.ndarray) -> Any:
    changes = {}
    for f in fields(params):
        v = getattr(params, f.name)
        if np.ndim(v) == 1:
            changes[f.name] = np.asarray(v)[keep]
    return dataclasses.replace(params, **changes) if changes else params


class _ParamsBatch:
    """A batch simulator whose physical constants ``params`` (a frozen dataclass of
    ``params_class``) are floats or per-episode [n] arrays."""

    params_class: ClassVar[type]

    def __init__(self, params: Any = None) -> None:
        self.params = params if params is not None else self.params_class()
        self.params.batch_size()  # validates the shapes

    def subset(self, keep: np.ndarray) -> Self:
        """The same simulator for the episodes ``keep`` only."""
        return type(self)(_subset_params(self.params, keep))

    def _check_episodes(self, n: int) -> None:
        nb = self.params.batch_size()
        if nb is not None and nb != n:
            raise ValueError(f"params are per-episode for {nb} episodes, cannot reset {n}")


# ============================================================================ CartPole


@dataclass(frozen=True)
class CartPoleParams(PerEpisodeParams):
    """gymnasium ``CartPoleEnv``'s physical constants; fields are floats or [n] arrays."""

    gravity: ParamLike = 9.8
    masscart: ParamLike = 1.0
    masspole: ParamLike = 0.1
    length: ParamLike = 0.5  # half the pole's length
    force_mag: ParamLike = 10.0
    tau: ParamLike = 0.02

    @property
    def total_mass(self) -> ParamLike:
        return self.masspole + self.masscart

    @property
    def polemass_length(self) -> ParamLike:
        return self.masspole * self.length


class CartPoleBatch(_ParamsBatch):
    """``CartPole-v1`` dynamics for a batch of episodes, state [n, 4] = (x, ẋ, θ, θ̇) float64."""

    n_actions = 2
    obs_dim = 4
    x_threshold = 2.4
    theta_threshold_radians = 12 * 2 * math.pi / 360
    env_id = "CartPole-v1"

    params_class = CartPoleParams
    params: CartPoleParams

    def reset(self, n: int, rng: np.random.Generator) -> FloatArray:
        self._check_episodes(n)
        return rng.uniform(-0.05, 0.05, size=(n, 4))

    @staticmethod
    def observe(state: np.ndarray) -> np.ndarray:
        return np.asarray(state, dtype=np.float32)

    def step(
        self, state: np.ndarray, actions: np.ndarray, rng: np.random.Generator | None = None
    ) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
        """(next state, reward, terminated), exactly as ``CartPoleEnv.step`` (Euler)."""
        p = self.params
        x, x_dot, theta, theta_dot = np.asarray(state, dtype=np.float64).T
        force = np.where(np.asarray(actions) == 1, p.force_mag, -np.asarray(p.force_mag))
        costheta, sintheta = np.cos(theta), np.sin(theta)
        temp = (force + p.polemass_length * np.square(theta_dot) * sintheta) / p.total_mass
        thetaacc = (p.gravity * sintheta - costheta * temp) / (
            p.length * (4.0 / 3.0 - p.masspole * np.square(costheta) / p.total_mass)
        )
        xacc = temp - p.polemass_length * thetaacc * costheta / p.total_mass
        nxt = np.stack(
            [
                x + p.tau * x_dot,
                x_dot + p.tau * xacc,
                theta + p.tau * theta_dot,
                theta_dot + p.tau * thetaacc,
            ],
            axis=1,
        )
        term = (
            (nxt[:, 0] < -self.x_threshold)
            | (nxt[:, 0] > self.x_threshold)
            | (nxt[:, 2] < -self.theta_threshold_radians)
            | (nxt[:, 2] > self.theta_threshold_radians)
        )
        return nxt, np.ones(nxt.shape[0]), term

    def linearised(self) -> tuple[FloatArray, FloatArray]:
        """Euler-discretised linearisation at the upright rest state: s' ≈ A s + B u, with u the
        force; ``A`` [n, 4, 4], ``B`` [n, 4] (n = 1 for scalar parameters)."""
        p = self.params
        n = p.batch_size() or 1
        g, mp, lh, tau = (
            np.broadcast_to(np.asarray(v, float), (n,))
            for v in (p.gravity, p.masspole, p.length, p.tau)
        )
        mt = np.broadcast_to(np.asarray(p.total_mass, float), (n,))
        # θ̈ = (g θ − u / M) / (l (4/3 − m_p / M)),  ẍ = u / M − m_p l θ̈ / M   (small angles)
        den = lh * (4.0 / 3.0 - mp / mt)
        a_tt, b_t = g / den, -1.0 / (mt * den)
        a_xt, b_x = -mp * lh * a_tt / mt, 1.0 / mt - mp * lh * b_t / mt
        ac = np.zeros((n, 4, 4))
        ac[:, 0, 1] = 1.0
        ac[:, 1, 2] = a_xt
        ac[:, 2, 3] = 1.0
        ac[:, 3, 2] = a_tt
        bc = np.stack([np.zeros(n), b_x, np.zeros(n), b_t], axis=1)
        a = np.eye(4)[None] + tau[:, None, None] * ac
        return a, tau[:, None] * bc


# ============================================================================ Acrobot


@dataclass(frozen=True)
class AcrobotParams(PerEpisodeParams):
    """gymnasium ``AcrobotEnv``'s class constants; fields are floats or [n] arrays."""

    link_length_1: ParamLike = 1.0
    link_length_2: ParamLike = 1.0  # rendering only, as in gymnasium
    link_mass_1: ParamLike = 1.0
    link_mass_2: ParamLike = 1.0
    link_com_pos_1: ParamLike = 0.5
    link_com_pos_2: ParamLike = 0.5
    link_moi: ParamLike = 1.0


class AcrobotBatch(_ParamsBatch):
    """``Acrobot-v1`` ("book" dynamics) for a batch, state [n, 4] = (θ1, θ2, θ̇1, θ̇2)."""

    n_actions = 3
    obs_dim = 6
    dt = 0.2
    max_vel_1 = 4 * math.pi
    max_vel_2 = 9 * math.pi
    avail_torque = np.array([-1.0, 0.0, 1.0])
    env_id = "Acrobot-v1"

    params_class = AcrobotParams
    params: AcrobotParams

    def reset(self, n: int, rng: np.random.Generator) -> FloatArray:
        self._check_episodes(n)
        # gymnasium draws the start state in float64 and stores it as float32
        return rng.uniform(-0.1, 0.1, size=(n, 4)).astype(np.float32).astype(np.float64)

    @staticmethod
    def observe(state: np.ndarray) -> np.ndarray:
        s = np.asarray(state)
        return np.stack(
            [np.cos(s[:, 0]), np.sin(s[:, 0]), np.cos(s[:, 1]), np.sin(s[:, 1]), s[:, 2], s[:, 3]],
            axis=1,
        ).astype(np.float32)

    def _dsdt(self, s: FloatArray, a: FloatArray) -> FloatArray:
        """``AcrobotEnv._dsdt`` (book version), layout [4, n]."""
        p = self.params
        m1, m2, l1 = p.link_mass_1, p.link_mass_2, p.link_length_1
        lc1, lc2, i1, i2 = p.link_com_pos_1, p.link_com_pos_2, p.link_moi, p.link_moi
        g = 9.8
        theta1, theta2, dtheta1, dtheta2 = s
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * np.cos(theta2)) + i1 + i2
        d2 = m2 * (lc2**2 + l1 * lc2 * np.cos(theta2)) + i2
        phi2 = m2 * lc2 * g * np.cos(theta1 + theta2 - math.pi / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * dtheta2**2 * np.sin(theta2)
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * np.sin(theta2)
            + (m1 * lc1 + m2 * l1) * g * np.cos(theta1 - math.pi / 2)
            + phi2
        )
        ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * np.sin(theta2) - phi2) / (
            m2 * lc2**2 + i2 - d2**2 / d1
        )
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return np.stack([dtheta1, dtheta2, ddtheta1, ddtheta2])

    def step(
        self, state: np.ndarray, actions: np.ndarray, rng: np.random.Generator | None = None
    ) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
        """(next state, reward, terminated), as ``AcrobotEnv.step``: one RK4 step of dt."""
        y0 = np.asarray(state, dtype=np.float64).T
        a = self.avail_torque[np.asarray(actions)]
        dt, dt2 = self.dt, self.dt / 2.0
        k1 = self._dsdt(y0, a)
        k2 = self._dsdt(y0 + dt2 * k1, a)
        k3 = self._dsdt(y0 + dt2 * k2, a)
        k4 = self._dsdt(y0 + dt * k3, a)
        ns = y0 + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        for i in (0, 1):  # gymnasium's wrap(x, -π, π)
            while (ns[i] > math.pi).any():
                ns[i] = np.where(ns[i] > math.pi, ns[i] - 2 * math.pi, ns[i])
            while (ns[i] < -math.pi).any():
                ns[i] = np.where(ns[i] < -math.pi, ns[i] + 2 * math.pi, ns[i])
        ns[2] = np.clip(ns[2], -self.max_vel_1, self.max_vel_1)
        ns[3] = np.clip(ns[3], -self.max_vel_2, self.max_vel_2)
        term = -np.cos(ns[0]) - np.cos(ns[1] + ns[0]) > 1.0
        return ns.T.copy(), np.where(term, 0.0, -1.0), term


# ============================================================================ HIV

# The paper's default HIV setting: treatment held for 20 days, 50 decisions (1000 days).
HIV_DEFAULT: dict[str, float] = {"interval": 20.0, "horizon": 50, "reward_scale": 1e-6}


class PerturbedHIVBatch(HIVBatch):
    """:class:`HIVBatch` with per-episode drug penalties and noisy drug efficacy.

    ``r1``, ``r2``: the penalties on ε1², ε2² (floats or [n]); ``efficacy_std`` (float or [n]):
    each interval, a drug that is given acts with efficacy ε + N(0, std²) (clipped to [0, 1]);
    a drug that is not given stays at 0, and the penalty is on the prescribed ε. Episodes
    never terminate. Observations are the raw state (float64).
    """

    env_id = "privrl/HIV-v0"
    obs_dim = 6

    def __init__(
        self,
        r1: ParamLike = 20000.0,
        r2: ParamLike = 2000.0,
        efficacy_std: ParamLike = 0.0,
        *,
        interval: float = HIV_DEFAULT["interval"],
        horizon: int = int(HIV_DEFAULT["horizon"]),
        reward_scale: float = HIV_DEFAULT["reward_scale"],
        **kwargs: Any,
    ) -> None:
        super().__init__(
            interval=interval,
            horizon=horizon,
            reward=RewardWeights(r1=r1, r2=r2, scale=reward_scale),  # type: ignore[arg-type]
            **kwargs,
        )
        self.r1, self.r2 = r1, r2
        self.efficacy_std = efficacy_std
        self.reward_scale = reward_scale
        self._kwargs = {"interval": interval, "horizon": horizon, "reward_scale": reward_scale}
        self._kwargs.update(kwargs)
        sizes = {np.shape(v) for v in (r1, r2, efficacy_std)} - {()}
        if len(sizes) > 1 or any(len(s) != 1 for s in sizes):
            raise ValueError(f"r1, r2, efficacy_std must be floats or one shape [n], got {sizes}")
        self._n = int(next(iter(sizes))[0]) if sizes else None

    def subset(self, keep: np.ndarray) -> PerturbedHIVBatch:
        def sub(v: ParamLike) -> ParamLike:
            return np.asarray(v)[keep] if np.ndim(v) == 1 else v

        return PerturbedHIVBatch(sub(self.r1), sub(self.r2), sub(self.efficacy_std), **self._kwargs)

    def reset(self, n: int, rng: np.random.Generator) -> FloatArray:
        if self._n is not None and self._n != n:
            raise ValueError(f"perturbations are per-episode for {self._n}, cannot reset {n}")
        return super().reset(n, rng)

    @staticmethod
    def observe(state: np.ndarray) -> np.ndarray:
        return np.asarray(state, dtype=np.float64)

    def step(  # type: ignore[override]
        self, obs: np.ndarray, actions: np.ndarray, rng: np.random.Generator | None = None
    ) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
        eps = efficacies(actions)
        std = np.asarray(self.efficacy_std, dtype=np.float64)
        acting = eps
        if np.any(std > 0):
            if rng is None:
                raise ValueError("noisy drug efficacy needs an rng")
            noise = rng.standard_normal(eps.shape) * np.reshape(std, (-1, 1))
            acting = np.clip(eps + noise * (eps > 0), 0.0, 1.0)
        return self._advance(obs, acting, eps)


# ============================================================================ LunarLander

LUNAR_LANDER_ID = "LunarLander-v3"
LUNAR_LANDER_HORIZON = 1000  # the registered TimeLimit


def set_lunar_lander_physics(
    env: gym.Env, gravity: float, wind_power: float, turbulence_power: float
) -> None:
    """Set the physics of a LunarLander instance; it takes effect at the next ``reset`` (which
    rebuilds the Box2D world). Wind is enabled iff wind or turbulence power is positive."""
    u = env.unwrapped
    if not -12.0 < gravity < 0.0:
        raise ValueError(f"LunarLander gravity must be in (-12, 0), got {gravity}")
    u.gravity = float(gravity)
    u.wind_power = float(wind_power)
    u.turbulence_power = float(turbulence_power)
    u.enable_wind = bool(wind_power > 0 or turbulence_power > 0)


def make_lunar_lander(
    gravity: float = -10.0, wind_power: float = 0.0, turbulence_power: float = 0.0
) -> gym.Env:
    """An unwrapped ``LunarLander`` (discrete actions) with the given physics (no time limit:
    :func:`lunar_lander_rollout` applies the horizon)."""
    from gymnasium.envs.box2d.lunar_lander import LunarLander

    env = LunarLander(
        gravity=float(gravity),
        enable_wind=bool(wind_power > 0 or turbulence_power > 0),
        wind_power=float(wind_power),
        turbulence_power=float(turbulence_power),
    )
    return env


def lunar_lander_rollout(
    act: ActFn,
    seeds: np.ndarray,
    rng: np.random.Generator,
    *,
    physics: Mapping[str, np.ndarray] | None = None,
    horizon: int = LUNAR_LANDER_HORIZON,
    pool: int = 64,
    record: bool = True,
    progress: Callable[[int], None] | None = None,
) -> Rollout:
    """Run one LunarLander episode per entry of ``seeds`` (the reset seed) on a pool of Box2D
    environments, computing actions for all running episodes in one ``act`` call per step.

    ``physics`` (optional) holds per-episode ``gravity``, ``wind_power``, ``turbulence_power``
    [n]; default: the default environment. Episodes are assigned to pool slots in order, so
    the result is the same for a given (seeds, rng state, pool). ``progress(k)`` is called with
    the number of episodes just finished.
    """
    n = len(seeds)
    pool = max(1, min(int(pool), n))
    envs = [make_lunar_lander() for _ in range(pool)]
    obs = np.zeros((n, horizon + 1, 8) if record else (0, 0, 8), dtype=np.float32)
    actions = np.zeros((n, horizon) if record else (0, 0), dtype=np.int64)
    rewards = np.zeros((n, horizon), dtype=np.float64)
    probs: np.ndarray | None = None
    lengths = np.full(n, horizon, dtype=np.int64)
    terminated = np.zeros(n, dtype=bool)
    slot_ep = np.full(pool, -1, dtype=np.int64)
    slot_t = np.zeros(pool, dtype=np.int64)
    cur = np.zeros((pool, 8), dtype=np.float32)
    nxt_ep = 0

    def start(k: int) -> None:
        nonlocal nxt_ep
        if nxt_ep >= n:
            slot_ep[k] = -1
            return
        j = nxt_ep
        nxt_ep += 1
        if physics is not None:
            set_lunar_lander_physics(
                envs[k],
                float(physics["gravity"][j]),
                float(physics["wind_power"][j]),
                float(physics["turbulence_power"][j]),
            )
        else:
            set_lunar_lander_physics(envs[k], -10.0, 0.0, 0.0)
        o, _ = envs[k].reset(seed=int(seeds[j]))
        slot_ep[k], slot_t[k] = j, 0
        cur[k] = o

    try:
        for k in range(pool):
            start(k)
        while (slot_ep >= 0).any():
            live = np.flatnonzero(slot_ep >= 0)
            eps, ts = slot_ep[live], slot_t[live]
            if record:
                obs[eps, ts] = cur[live]
            a, p = _split_act(act(cur[live], eps, rng))
            if record:
                actions[eps, ts] = a
                if p is not None:
                    if probs is None:
                        probs = np.zeros((n, horizon), dtype=np.float64)
                    probs[eps, ts] = p
            finished = 0
            for i, k in enumerate(live):
                o, r, term, _, _ = envs[k].step(int(a[i]))
                j, t = int(eps[i]), int(ts[i])
                rewards[j, t] = r
                cur[k] = o
                slot_t[k] = t + 1
                if term or t + 1 >= horizon:
                    lengths[j], terminated[j] = t + 1, bool(term)
                    if record:
                        obs[j, t + 1] = o
                    finished += 1
                    start(k)
            if progress is not None and finished:
                progress(finished)
    finally:
        for e in envs:
            e.close()
    return Rollout(obs, actions, rewards, probs, lengths, terminated)
