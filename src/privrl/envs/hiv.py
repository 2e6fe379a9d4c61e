"""HIV treatment simulator: the Adams et al. (2004) model as used by Ernst et al. (2006).

State (cells/ml or copies/ml): T1 (healthy CD4+ T cells), T2 (healthy macrophages), T1*, T2*
(infected ones), V (free virus), E (HIV-specific cytotoxic T cells). Drugs: ε1 (reverse
transcriptase inhibitor, blocks new infections) and ε2 (protease inhibitor, blocks virus
production). The ODE (Adams et al. 2004, eq. 2; Ernst et al. 2006, eq. 1):

    dT1/dt  = λ1 − d1 T1 − (1 − ε1) k1 V T1
    dT2/dt  = λ2 − d2 T2 − (1 − f ε1) k2 V T2
    dT1*/dt = (1 − ε1) k1 V T1 − δ T1* − m1 E T1*
    dT2*/dt = (1 − f ε1) k2 V T2 − δ T2* − m2 E T2*
    dV/dt   = (1 − ε2) N_T δ (T1* + T2*) − c V − [(1 − ε1) ρ1 k1 T1 + (1 − f ε1) ρ2 k2 T2] V
    dE/dt   = λE + bE (T1* + T2*)/(T1* + T2* + Kb) E − dE (T1* + T2*)/(T1* + T2* + Kd) E − δE E

Actions (Ernst et al. 2006): every ``interval`` days (default 5) choose
(ε1, ε2) ∈ {0, 0.7} × {0, 0.3}; index a ↦ ACTIONS[a] = (0,0), (0.7,0), (0,0.3), (0.7,0.3).
(Check any table copied from elsewhere against this one; a widely used one was reported to
have a wrong entry. ``test_action_table_is_ernst_et_al`` pins it.)
Reward per interval, evaluated at the state reached (Ernst et al. 2006, eq. 3):
r = −(Q V + R1 ε1² + R2 ε2² − S E) with Q = 0.1, R1 = 20000, R2 = 2000, S = 1000, times
``RewardWeights.scale`` (default 1; e.g. 1e-5 brings returns to order 10⁴). Episodes last
``horizon`` intervals (default 200 = 1000 days) and are truncated (never terminated) there.
Start: Ernst et al.'s unhealthy steady state (optionally spread, ``init_log_std``).

Integration: classical RK4, vectorised over episodes, with a per-episode step bounded by the
local stiffness: h = min(0.25 day, 1.5/λ(x), time left), λ(x) the largest per-variable loss
rate (see :func:`stiffness`). A single fixed step does not work here: λ is ≈ 13/day (virus
clearance c) most of the time but reaches ≈ 150/day (macrophage infection k2·V) when the virus
rebounds to ~1.5e6 after treatment stops, and RK4 is only stable for h·λ < 2.78, so a fixed
step would need ~400 substeps per interval everywhere (and 20–100 substeps blow up). Measured
against ``scipy.integrate.solve_ivp`` (Radau, rtol 1e-11) from the reference states: per-interval
relative error ≤ 2e-3 on T2 (the stiff, tiny macrophage population) and ≤ 3e-5 on the other
five variables; tested at 1e-3 through a stiff rebound. Cost: ≈ 4 ms per 200-step episode in
batches of 10⁴ (≈ 50 RK4 steps per interval on average).

Parameters are a dataclass (:class:`HIVParams`) whose fields may be scalars or arrays of shape
[n] (one value per episode in a batch), so physics can be perturbed per episode.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from privrl.arrays import FloatArray

__all__ = [
    "ACTIONS",
    "ENV_ID",
    "HEALTHY_STATE",
    "INITIAL_STATE",
    "UNHEALTHY_STATE",
    "HIVBatch",
    "HIVEnv",
    "HIVParams",
    "PerEpisodeParams",
    "RewardWeights",
    "efficacies",
    "hiv_rhs",
    "log_state_statistics",
    "register_envs",
    "rk4_interval",
]

ENV_ID = "privrl/HIV-v0"

# (ε1, ε2) per action index (Ernst et al. 2006, §4: ε1 ∈ {0, 0.7}, ε2 ∈ {0, 0.3}).
ACTIONS = np.array([[0.0, 0.0], [0.7, 0.0], [0.0, 0.3], [0.7, 0.3]])

# Steady states of the untreated model (Adams et al. 2004, §3; Ernst et al. 2006, §4), in the
# order (T1, T2, T1*, T2*, V, E). The unhealthy one is Ernst et al.'s start state.
UNHEALTHY_STATE = np.array([163573.0, 5.0, 11945.0, 46.0, 63919.0, 24.0])
HEALTHY_STATE = np.array([967839.0, 621.0, 76.0, 6.0, 415.0, 353108.0])
INITIAL_STATE = UNHEALTHY_STATE
STATE_NAMES = ("T1", "T2", "T1*", "T2*", "V", "E")

DEFAULT_INTERVAL = 5.0  # days per decision (Ernst et al. 2006)
DEFAULT_HORIZON = 200  # decisions per episode: 1000 days
DEFAULT_MAX_STEP = 0.25  # days; RK4 step cap (see module docstring)
DEFAULT_STIFFNESS_FACTOR = 1.5  # h·λ(x) bound, inside RK4's real stability limit 2.78
_STATE_FLOOR = 1e-10  # guards log features and rates against round-off below zero

ParamLike = float | FloatArray


class PerEpisodeParams:
    """Physical constants (a dataclass) whose fields are floats or per-episode [n] arrays."""

    def batch_size(self) -> int | None:
        """The n of per-episode fields ([n] arrays), or None when all fields are scalars."""
        sizes = {np.shape(getattr(self, f.name)) for f in fields(self)} - {()}  # type: ignore[arg-type]
        if not sizes:
            return None
        if len(sizes) > 1 or any(len(s) != 1 for s in sizes):
            raise ValueError(f"per-episode parameters must all have one shape [n], got {sizes}")
        return int(next(iter(sizes))[0])


@dataclass(frozen=True)
class HIVParams(PerEpisodeParams):
    """Model parameters (Adams et al. 2004, Table 1; the values used by Ernst et al. 2006).

    Each field is a float or an array of shape [n] that broadcasts over a batch of n episodes
    (per-episode perturbation of the physics). Units: days, cells/ml, copies/ml.
    """

    lambda1: ParamLike = 1.0e4  # target cell type 1 production rate (cells/ml/day)
    d1: ParamLike = 0.01  # target cell type 1 death rate (1/day)
    k1: ParamLike = 8.0e-7  # population 1 infection rate (ml/(copies·day))
    lambda2: ParamLike = 31.98  # target cell type 2 production rate (cells/ml/day)
    d2: ParamLike = 0.01  # target cell type 2 death rate (1/day)
    f: ParamLike = 0.34  # treatment efficacy reduction in population 2
    k2: ParamLike = 1.0e-4  # population 2 infection rate (ml/(copies·day))
    delta: ParamLike = 0.7  # infected cell death rate (1/day)
    m1: ParamLike = 1.0e-5  # immune-induced clearance rate, population 1 (ml/(cells·day))
    m2: ParamLike = 1.0e-5  # immune-induced clearance rate, population 2 (ml/(cells·day))
    n_t: ParamLike = 100.0  # virions produced per infected cell (N_T)
    c: ParamLike = 13.0  # virus natural death rate (1/day)
    rho1: ParamLike = 1.0  # average virions infecting a type 1 cell
    rho2: ParamLike = 1.0  # average virions infecting a type 2 cell
    lambda_e: ParamLike = 1.0  # immune effector production rate (cells/ml/day)
    b_e: ParamLike = 0.3  # maximum birth rate for immune effectors (1/day)
    k_b: ParamLike = 100.0  # saturation constant for immune effector birth (cells/ml)
    d_e: ParamLike = 0.25  # maximum death rate for immune effectors (1/day)
    k_d: ParamLike = 500.0  # saturation constant for immune effector death (cells/ml)
    delta_e: ParamLike = 0.1  # natural death rate for immune effectors (1/day)

    def as_arrays(self) -> dict[str, FloatArray]:
        """Every field as a float64 array (scalars become 0-d arrays)."""
        return {f.name: np.asarray(getattr(self, f.name), dtype=np.float64) for f in fields(self)}

    def replace(self, **changes: Any) -> HIVParams:
        return dataclasses.replace(self, **changes)

    def perturbed(self, n: int, rel_std: float, rng: np.random.Generator) -> HIVParams:
        """n episodes' parameters, each field multiplied by an independent log-normal factor
        exp(N(0, rel_std²)) (f is kept in [0, 1])."""
        out: dict[str, FloatArray] = {}
        for name, value in self.as_arrays().items():
            v = np.broadcast_to(value, (n,)) * np.exp(rel_std * rng.standard_normal(n))
            out[name] = np.clip(v, 0.0, 1.0) if name == "f" else v
        return HIVParams(**out)


@dataclass(frozen=True)
class RewardWeights:
    """r = scale·(−(Q V + R1 ε1² + R2 ε2² − S E)) (Ernst et al. 2006, eq. 3 for scale = 1)."""

    q: float = 0.1
    r1: float = 20000.0
    r2: float = 2000.0
    s: float = 1000.0
    scale: float = 1.0

    def reward(self, state: np.ndarray, eps: np.ndarray) -> FloatArray:
        """Reward of reaching ``state`` [n, 6] under drug efficacies ``eps`` [n, 2]."""
        cost = self.q * state[:, 4] + self.r1 * eps[:, 0] ** 2 + self.r2 * eps[:, 1] ** 2
        return self.scale * (self.s * state[:, 5] - cost)


def _coefficients(eps: FloatArray, p: dict[str, FloatArray]) -> dict[str, FloatArray]:
    """Rates for one interval (drugs fixed): parameters combined with ε1, ε2 once, not per step."""
    e1, e2 = eps[0], eps[1]
    return {
        "a1": (1.0 - e1) * p["k1"],  # effective type-1 infection rate
        "a2": (1.0 - p["f"] * e1) * p["k2"],  # effective type-2 infection rate
        "pv": (1.0 - e2) * p["n_t"] * p["delta"],  # virions released per infected cell death
        **{k: p[k] for k in ("lambda1", "d1", "lambda2", "d2", "delta", "m1", "m2", "c")},
        **{k: p[k] for k in ("rho1", "rho2", "lambda_e", "b_e", "k_b", "d_e", "k_d", "delta_e")},
    }


def _rhs_t(x: FloatArray, q: dict[str, FloatArray]) -> FloatArray:
    """dx/dt in the transposed layout: ``x`` [6, n] (rows contiguous, for speed)."""
    t1, t2, t1s, t2s, v, ef = x
    inf1 = q["a1"] * v * t1  # new type-1 infections
    inf2 = q["a2"] * v * t2  # new type-2 infections
    infected = t1s + t2s
    d = np.empty_like(x)
    d[0] = q["lambda1"] - q["d1"] * t1 - inf1
    d[1] = q["lambda2"] - q["d2"] * t2 - inf2
    d[2] = inf1 - (q["delta"] + q["m1"] * ef) * t1s
    d[3] = inf2 - (q["delta"] + q["m2"] * ef) * t2s
    # virions released − cleared − consumed by new infections
    d[4] = q["pv"] * infected - q["c"] * v - q["rho1"] * inf1 - q["rho2"] * inf2
    d[5] = q["lambda_e"] + ef * (
        q["b_e"] * infected / (infected + q["k_b"])
        - q["d_e"] * infected / (infected + q["k_d"])
        - q["delta_e"]
    )
    return d


def _stiffness_t(x: FloatArray, q: dict[str, FloatArray]) -> FloatArray:
    """Largest per-variable loss rate L_i(x) (1/day), writing dx_i/dt = P_i(x) − L_i(x)·x_i."""
    t1, t2, _, _, v, ef = x
    lam = np.maximum(q["d1"] + q["a1"] * v, q["d2"] + q["a2"] * v)
    lam = np.maximum(lam, q["delta"] + np.maximum(q["m1"], q["m2"]) * ef)
    lam = np.maximum(lam, q["c"] + q["rho1"] * q["a1"] * t1 + q["rho2"] * q["a2"] * t2)
    return np.maximum(lam, q["delta_e"] + q["d_e"])


def _as_param_dict(params: HIVParams | dict[str, FloatArray], n: int) -> dict[str, FloatArray]:
    p = params.as_arrays() if isinstance(params, HIVParams) else params
    out = {}
    for k, v in p.items():
        v = np.asarray(v, dtype=np.float64)
        if v.ndim != 0 and v.shape != (n,):
            raise ValueError(f"parameter {k!r} has shape {v.shape}, expected () or ({n},)")
        out[k] = v
    return out


def _check_batch(state: np.ndarray, eps: np.ndarray) -> tuple[FloatArray, FloatArray]:
    x = np.asarray(state, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != 6:
        raise ValueError(f"expected states of shape [n, 6], got {x.shape}")
    e = np.broadcast_to(np.asarray(eps, dtype=np.float64), (x.shape[0], 2))
    return x, e


def hiv_rhs(
    state: np.ndarray, eps: np.ndarray, params: HIVParams | dict[str, FloatArray]
) -> FloatArray:
    """dx/dt for a batch: ``state`` [n, 6], ``eps`` [n, 2] (ε1, ε2), params broadcast over n."""
    x, e = _check_batch(state, eps)
    q = _coefficients(e.T, _as_param_dict(params, x.shape[0]))
    return _rhs_t(np.ascontiguousarray(x.T), q).T


def stiffness(
    state: np.ndarray, eps: np.ndarray, params: HIVParams | dict[str, FloatArray]
) -> FloatArray:
    """λ(x) = max_i L_i(x), the largest per-variable loss rate (1/day), per episode.

    A cheap estimate of the fastest mode: free-virus clearance (c + uptake ≈ 13–15/day most of
    the time) and macrophage infection k2·V (up to ≈ 150/day when V ≈ 1.5e6 in a rebound).
    """
    x, e = _check_batch(state, eps)
    q = _coefficients(e.T, _as_param_dict(params, x.shape[0]))
    return _stiffness_t(np.ascontiguousarray(x.T), q)


def _rk4_step(x: FloatArray, q: dict[str, FloatArray], h: FloatArray) -> FloatArray:
    """One classical RK4 step, layout [6, n], per-episode step size ``h`` [n]."""
    k1 = _rhs_t(x, q)
    k2 = _rhs_t(x + (0.5 * h) * k1, q)
    k3 = _rhs_t(x + (0.5 * h) * k2, q)
    k4 = _rhs_t(x + h * k3, q)
    return np.maximum(x + (h / 6.0) * (k1 + 2.0 * (k2 + k3) + k4), _STATE_FLOOR)


def rk4_interval(
    state: np.ndarray,
    eps: np.ndarray,
    params: HIVParams,
    duration: float = DEFAULT_INTERVAL,
    *,
    max_step: float = DEFAULT_MAX_STEP,
    stiffness_factor: float = DEFAULT_STIFFNESS_FACTOR,
    substeps: int | None = None,
) -> FloatArray:
    """Integrate the ODE over ``duration`` days with constant drugs by explicit RK4 steps.

    Default: each episode takes steps h = min(max_step, stiffness_factor / λ(x), time left),
    with λ(x) from :func:`stiffness` re-evaluated before every step, so h·λ stays inside RK4's
    stability interval (−2.78, 0) however stiff the state gets. Step sizes depend only on the
    episode's own state, so an episode's trajectory does not depend on the batch it is in;
    finished episodes drop out of the batch. ``substeps`` = k instead takes k equal steps
    (plain fixed-step RK4; unstable for k < ~400 when the virus rebounds).
    """
    x0, e = _check_batch(state, eps)
    n = x0.shape[0]
    q = _coefficients(np.ascontiguousarray(e.T), _as_param_dict(params, n))
    x = np.ascontiguousarray(x0.T)  # [6, n]
    if substeps is not None:
        h = np.full(n, float(duration) / int(substeps))
        for _ in range(int(substeps)):
            x = _rk4_step(x, q, h)
        return x.T.copy()
    idx = np.arange(n)
    xa, qa = x, q
    left = np.full(n, float(duration))
    tol = 1e-12 * float(duration)
    while idx.size:
        h = np.minimum(np.minimum(max_step, stiffness_factor / _stiffness_t(xa, qa)), left)
        xa = _rk4_step(xa, qa, h)
        left = left - h
        done = left <= tol
        if done.any():
            x[:, idx[done]] = xa[:, done]
            keep = ~done
            idx, xa, left = idx[keep], xa[:, keep], left[keep]
            qa = {k: (v if v.ndim == 0 else v[keep]) for k, v in qa.items()}
    return x.T.copy()


def observation_space() -> spaces.Box:
    """The raw state (T1, T2, T1*, T2*, V, E), float64, non-negative and unbounded."""
    return spaces.Box(low=0.0, high=np.inf, shape=(6,), dtype=np.float64)


def efficacies(actions: np.ndarray) -> FloatArray:
    """The drug efficacies (ε1, ε2) ``[n, 2]`` of actions in {0, 1, 2, 3}."""
    a = np.asarray(actions, dtype=np.int64)
    if a.size and (a.min() < 0 or a.max() > 3):
        raise ValueError("HIV actions must be in {0, 1, 2, 3}")
    return ACTIONS[a]


class HIVBatch:
    """Vectorised simulator: n episodes stepped together, state [n, 6].

    ``params`` may hold per-episode [n] arrays; ``reset(n, rng)`` then requires the same n.
    ``init_log_std`` > 0 multiplies each start-state component by 10^N(0, init_log_std²)
    (a spread of patients); 0 (default) starts every episode at Ernst et al.'s state.
    """

    n_actions = 4

    def __init__(
        self,
        params: HIVParams | None = None,
        *,
        interval: float = DEFAULT_INTERVAL,
        horizon: int = DEFAULT_HORIZON,
        max_step: float = DEFAULT_MAX_STEP,
        stiffness_factor: float = DEFAULT_STIFFNESS_FACTOR,
        reward: RewardWeights | None = None,
        initial_state: npt.ArrayLike = INITIAL_STATE,
        init_log_std: float = 0.0,
    ) -> None:
        if int(horizon) < 1 or float(interval) <= 0:
            raise ValueError("need horizon >= 1 and interval > 0")
        if not (0 < float(stiffness_factor) < 2.78) or float(max_step) <= 0:
            raise ValueError("need max_step > 0 and 0 < stiffness_factor < 2.78 (RK4 stability)")
        self.params = params if params is not None else HIVParams()
        self.params.batch_size()  # validates shapes
        self.interval = float(interval)
        self.horizon = int(horizon)
        self.max_step = float(max_step)
        self.stiffness_factor = float(stiffness_factor)
        self.reward_weights = reward if reward is not None else RewardWeights()
        self.initial_state = np.asarray(initial_state, dtype=np.float64).reshape(6)
        self.init_log_std = float(init_log_std)
        self.observation_space = observation_space()
        self.action_space = spaces.Discrete(4)

    def reset(self, n: int, rng: np.random.Generator) -> FloatArray:
        nb = self.params.batch_size()
        if nb is not None and nb != n:
            raise ValueError(f"params are per-episode for {nb} episodes, cannot reset {n}")
        x = np.tile(self.initial_state, (n, 1))
        if self.init_log_std > 0:
            x = x * 10.0 ** (self.init_log_std * rng.standard_normal((n, 6)))
        return x

    def step(
        self, obs: np.ndarray, actions: np.ndarray
    ) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
        """(next state, reward, terminated) for a batch; HIV episodes never terminate."""
        eps = efficacies(actions)
        return self._advance(obs, eps, eps)

    def _advance(
        self, obs: np.ndarray, acting: FloatArray, prescribed: FloatArray
    ) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
        """One interval with drug efficacies ``acting``; the reward penalises ``prescribed``."""
        nxt = rk4_interval(
            obs,
            acting,
            self.params,
            self.interval,
            max_step=self.max_step,
            stiffness_factor=self.stiffness_factor,
        )
        return nxt, self.reward_weights.reward(nxt, prescribed), np.zeros(nxt.shape[0], dtype=bool)


class HIVEnv(gym.Env[np.ndarray, np.int64]):
    """Gymnasium face of :class:`HIVBatch` (one episode; truncates at ``horizon`` steps)."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012

    def __init__(
        self, params: HIVParams | None = None, *, render_mode: str | None = None, **simulator: Any
    ) -> None:
        """``simulator``: the keywords of :class:`HIVBatch` (``interval``, ``horizon``,
        ``max_step``, ``stiffness_factor``, ``reward``, ``initial_state``, ``init_log_std``)."""
        if render_mode is not None:
            raise ValueError("HIVEnv does not render")
        if params is not None and params.batch_size() is not None:
            raise ValueError("HIVEnv takes scalar parameters (use HIVBatch for per-episode ones)")
        self.sim = HIVBatch(params, **simulator)
        self.observation_space = observation_space()
        self.action_space = spaces.Discrete(4)
        self._state = self.sim.initial_state.copy()
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._state = self.sim.reset(1, self.np_random)[0]
        self._t = 0
        return self._state.copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"invalid action {action!r} (expected 0..3)")
        nxt, r, _ = self.sim.step(self._state[None], np.array([int(action)]))
        self._state = nxt[0]
        self._t += 1
        return self._state.copy(), float(r[0]), False, self._t >= self.sim.horizon, {}


def log_state_statistics(
    n_episodes: int = 200, seed: int = 0, sim: HIVBatch | None = None
) -> tuple[FloatArray, FloatArray]:
    """Mean and std of log10(state) over public simulator rollouts (no private data).

    Uniformly random treatment every interval; half of the episodes start at the unhealthy and
    half at the healthy steady state (Adams et al. 2004), so that both regions a treatment
    policy can visit are represented. Used to standardise the ``hiv-log`` features.
    """
    sim = sim if sim is not None else HIVBatch()
    rng = np.random.default_rng(seed)
    half = n_episodes // 2
    x = np.concatenate(
        [np.tile(UNHEALTHY_STATE, (n_episodes - half, 1)), np.tile(HEALTHY_STATE, (half, 1))]
    )
    logs = [np.log10(x)]
    for _ in range(sim.horizon):
        x, _, _ = sim.step(x, rng.integers(0, 4, size=n_episodes))
        logs.append(np.log10(x))
    z = np.concatenate(logs, axis=0)
    return z.mean(axis=0), z.std(axis=0)


def register_envs() -> None:
    """Register ``privrl/HIV-v0`` with Gymnasium (idempotent)."""
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point=HIVEnv)
