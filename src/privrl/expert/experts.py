"""Expert sets for the expert-level DP experiments: m policies for perturbed physics.

The paper trains 3000 PPO agents per environment (Appendix B.1), which is out of reach on a
small machine; the spec asks for experts "diverse and mostly competent" at a cost that fits.
Each family here is a set of m parametric controllers stored as arrays with a leading expert
axis, so that :meth:`ArrayExperts.greedy_actions` answers for all m experts and n states in
one vectorised pass (einsum / broadcasting, never a loop over experts).

Families (how they are built: ``docs/expert-data.md``):

* ``cartpole-lqr`` — bang-bang discrete-time LQR: push right iff −K_i s > 0, K_i from the
  perturbed model's Euler linearisation and random LQR weights (:func:`solve_dare`).
* ``acrobot-linear`` — argmax over 3 linear scores of the observation (and a bias), found by a
  vectorised per-setting cross-entropy search (:func:`cem_per_setting`) on the numpy Acrobot.
* ``hiv-linear`` — argmax over 4 linear scores of the standardised log10 state, CEM as above
  after a shared warm start on randomly drawn perturbed models.
* ``lunarlander-heuristic`` — gymnasium's ``heuristic`` lander controller with its ten gains
  (PD gains, targets, dead band) as parameters, tuned per setting by a cheap random search.

Every expert is made admissible as in the paper: the greedy action gets probability
g = 1 − (|A| − 1)·p_min and every other action p_min (:func:`privrl.expert.base.modified_probs`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from privrl.arrays import FloatArray, IntArray
from privrl.data.files import read_npz
from privrl.expert.base import modified_probs
from privrl.rl.features import HIV_LOG_MEAN, HIV_LOG_STD

__all__ = [
    "FAMILIES",
    "LUNAR_HEURISTIC_GAINS",
    "AcrobotLinearExperts",
    "ArrayExperts",
    "CartPoleLQRExperts",
    "HIVLinearExperts",
    "LunarLanderHeuristicExperts",
    "build_acrobot_experts",
    "build_cartpole_experts",
    "build_hiv_experts",
    "build_lunarlander_experts",
    "cem_per_setting",
    "evaluate_experts",
    "hiv_warm_start",
    "load_experts",
    "lqr_gain",
    "save_experts",
    "solve_dare",
    "top_k_per_setting",
]

_CHUNK_ELEMENTS = 1 << 23  # bound on m × n × |A| temporaries in greedy_actions


class ArrayExperts:
    """m parametric experts whose parameters are arrays with leading axis m.

    ``params``: the controller parameters; ``settings``: per-expert perturbation values and
    measurements (e.g. ``gravity``, ``own_return``), all ``[m]``; ``info``: JSON provenance
    (build method, cost, ranges). Subclasses define the greedy rule twice: for all experts at
    all states (:meth:`_greedy_all`, ``[m, n]``) and for one expert per state
    (:meth:`_greedy_paired`, ``[n]``).
    """

    family: ClassVar[str]
    env_id: ClassVar[str]
    action_count: ClassVar[int]
    observation_dim: ClassVar[int]
    param_shapes: ClassVar[dict[str, tuple[int, ...]]]

    def __init__(
        self,
        params: Mapping[str, np.ndarray],
        settings: Mapping[str, np.ndarray] | None = None,
        info: Mapping[str, Any] | None = None,
    ) -> None:
        missing = set(self.param_shapes) - set(params)
        if missing:
            raise ValueError(f"{self.family}: missing parameter arrays {sorted(missing)}")
        p = {k: np.asarray(params[k], dtype=np.float64) for k in self.param_shapes}
        m = {v.shape[0] if v.ndim else -1 for v in p.values()}
        if len(m) != 1 or -1 in m:
            raise ValueError(f"{self.family}: parameter arrays disagree on m: {m}")
        self._m = int(next(iter(m)))
        for k, shape in self.param_shapes.items():
            if p[k].shape[1:] != shape:
                raise ValueError(
                    f"{self.family}: parameter {k!r} has shape {p[k].shape}, expected "
                    f"({self._m}, {', '.join(map(str, shape))})"
                )
            if not np.all(np.isfinite(p[k])):
                raise ValueError(f"{self.family}: parameter {k!r} has non-finite entries")
        self.params = p
        self.settings = {k: np.asarray(v) for k, v in (settings or {}).items()}
        for k, v in self.settings.items():
            if v.shape != (self._m,):
                raise ValueError(f"setting {k!r} has shape {v.shape}, expected ({self._m},)")
        self.info: dict[str, Any] = dict(info or {})

    # ------------------------------------------------------------------ protocol
    @property
    def n_experts(self) -> int:
        return self._m

    @property
    def n_actions(self) -> int:
        return self.action_count

    @property
    def obs_dim(self) -> int:
        return self.observation_dim

    def _check_obs(self, obs: np.ndarray) -> FloatArray:
        o = np.asarray(obs)
        if o.ndim != 2 or o.shape[1] != self.obs_dim:
            raise ValueError(
                f"{self.family}: expected observations of shape [n, {self.obs_dim}], got {o.shape}"
            )
        return o.astype(np.float64, copy=False)

    def greedy_actions(self, obs: np.ndarray) -> IntArray:
        """Greedy action of every expert at every observation, int64 ``[m, n]``.

        One vectorised pass over the experts; states are processed in chunks so the
        temporaries stay below ~64 MB whatever n is.
        """
        o = self._check_obs(obs)
        n = o.shape[0]
        step = max(1, _CHUNK_ELEMENTS // max(1, self._m * self.n_actions))
        if n <= step:
            return self._greedy_all(o).astype(np.int64, copy=False)
        out = np.empty((self._m, n), dtype=np.int64)
        for s in range(0, n, step):
            out[:, s : s + step] = self._greedy_all(o[s : s + step])
        return out

    def greedy_for(self, expert_ids: np.ndarray, obs: np.ndarray) -> IntArray:
        """Greedy action of expert ``expert_ids[k]`` at ``obs[k]``, int64 ``[n]``."""
        o = self._check_obs(obs)
        ids = self._check_ids(expert_ids, o.shape[0])
        return self._greedy_paired(ids, o).astype(np.int64, copy=False)

    def action_probs(self, expert_ids: np.ndarray, obs: np.ndarray, p_min: float) -> FloatArray:
        """π_i(·|s) of the p_min-modified experts, ``[n, n_actions]`` (one expert per row)."""
        return modified_probs(self.greedy_for(expert_ids, obs), self.n_actions, p_min)

    def act(
        self,
        expert_ids: np.ndarray,
        obs: np.ndarray,
        rng: np.random.Generator,
        p_min: float,
        *,
        return_probs: bool = False,
    ) -> IntArray | tuple[IntArray, FloatArray]:
        """Sample from the p_min-modified policy of expert ``expert_ids[k]`` at ``obs[k]``:
        the greedy action w.p. 1 − (|A| − 1)·p_min, each other action w.p. p_min. With
        ``return_probs`` also returns the probability of each sampled action."""
        a_n = self.n_actions
        if not 0.0 < p_min * a_n <= 1.0:
            raise ValueError(f"p_min={p_min} is not admissible for {a_n} actions")
        greedy = self.greedy_for(expert_ids, obs)
        g = 1.0 - (a_n - 1) * p_min
        keep = rng.random(greedy.shape[0]) < g
        other = (greedy + 1 + rng.integers(0, a_n - 1, size=greedy.shape[0])) % a_n
        actions = np.where(keep, greedy, other).astype(np.int64)
        if not return_probs:
            return actions
        return actions, np.where(keep, g, p_min)

    def _check_ids(self, expert_ids: np.ndarray, n: int) -> IntArray:
        ids = np.asarray(expert_ids)
        if ids.shape != (n,) or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"expected {n} integer expert ids, got {ids.shape} {ids.dtype}")
        if n and (ids.min() < 0 or ids.max() >= self._m):
            raise ValueError(f"expert ids must be in [0, {self._m}), got {ids.min()}..{ids.max()}")
        return ids.astype(np.int64, copy=False)

    def subset(self, ids: np.ndarray) -> ArrayExperts:
        """The experts ``ids`` (in that order) as a new set of the same family."""
        ids = self._check_ids(np.asarray(ids), len(ids))
        return type(self)(
            {k: v[ids] for k, v in self.params.items()},
            {k: v[ids] for k, v in self.settings.items()},
            self.info,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(family={self.family!r}, n_experts={self._m})"

    # ------------------------------------------------------------------ per family
    def _greedy_all(self, obs: FloatArray) -> np.ndarray:
        raise NotImplementedError

    def _greedy_paired(self, ids: IntArray, obs: FloatArray) -> np.ndarray:
        raise NotImplementedError


# ============================================================================ CartPole


class CartPoleLQRExperts(ArrayExperts):
    """Bang-bang LQR: push right (action 1) iff −K_i·s > 0."""

    family = "cartpole-lqr"
    env_id = "CartPole-v1"
    action_count = 2
    observation_dim = 4
    param_shapes: ClassVar[dict[str, tuple[int, ...]]] = {"K": (4,)}

    def _greedy_all(self, obs: FloatArray) -> np.ndarray:
        return (self.params["K"] @ obs.T) < 0.0

    def _greedy_paired(self, ids: IntArray, obs: FloatArray) -> np.ndarray:
        return np.einsum("nd,nd->n", self.params["K"][ids], obs) < 0.0


def solve_dare(a: FloatArray, b: FloatArray, q: FloatArray, r: FloatArray) -> FloatArray:
    """Batched discrete-time algebraic Riccati equation P = Q + AᵀPA − AᵀPB(R + BᵀPB)⁻¹BᵀPA
    by the structured doubling algorithm (quadratic convergence; ~20 batched iterations).

    ``a`` [n, k, k], ``b`` [n, k, u], ``q`` [n, k, k], ``r`` [n, u, u]; returns P [n, k, k].
    """
    eye = np.eye(a.shape[-1])
    ak = a.copy()
    gk = b @ np.linalg.solve(r, np.swapaxes(b, 1, 2))
    hk = q.copy()
    for _ in range(100):
        w = eye + gk @ hk
        w_a = np.linalg.solve(w, ak)
        w_g = np.linalg.solve(w, gk)
        h_next = hk + np.swapaxes(ak, 1, 2) @ hk @ w_a
        gk = gk + ak @ w_g @ np.swapaxes(ak, 1, 2)
        ak = ak @ w_a
        change = np.abs(h_next - hk).max(axis=(1, 2)) / np.abs(h_next).max(axis=(1, 2))
        hk = h_next
        if change.max() < 1e-13:
            return hk
    raise RuntimeError("Riccati doubling did not converge (is (A, B) stabilisable?)")


def lqr_gain(a: FloatArray, b: FloatArray, q: FloatArray, r: FloatArray) -> FloatArray:
    """K = (R + BᵀPB)⁻¹BᵀPA for the batched DARE solution P, shape [n, u, k]."""
    p = solve_dare(a, b, q, r)
    btp = np.swapaxes(b, 1, 2) @ p
    return np.linalg.solve(r + btp @ b, btp @ a)


# ============================================================================ linear families


class _LinearArgmaxExperts(ArrayExperts):
    """Greedy action argmax_a W_i[a]·φ(s) for a fixed feature map φ."""

    n_features: ClassVar[int]

    @staticmethod
    def features(obs: FloatArray) -> FloatArray:
        raise NotImplementedError

    def _greedy_all(self, obs: FloatArray) -> np.ndarray:
        return np.einsum("mad,nd->mna", self.params["W"], self.features(obs)).argmax(axis=2)

    def _greedy_paired(self, ids: IntArray, obs: FloatArray) -> np.ndarray:
        return np.einsum("nad,nd->na", self.params["W"][ids], self.features(obs)).argmax(axis=1)


class AcrobotLinearExperts(_LinearArgmaxExperts):
    """Acrobot: φ(s) = (cos θ1, sin θ1, cos θ2, sin θ2, θ̇1, θ̇2, 1), 3 actions (torque −1, 0, 1)."""

    family = "acrobot-linear"
    env_id = "Acrobot-v1"
    action_count = 3
    observation_dim = 6
    n_features = 7
    param_shapes: ClassVar[dict[str, tuple[int, ...]]] = {"W": (3, 7)}

    @staticmethod
    def features(obs: FloatArray) -> FloatArray:
        return np.concatenate([obs, np.ones((obs.shape[0], 1))], axis=1)


class HIVLinearExperts(_LinearArgmaxExperts):
    """HIV: φ(s) = ((log10 s − μ) / σ, 1) with the public μ, σ of ``privrl.rl.features``;
    4 actions (drug combinations)."""

    family = "hiv-linear"
    env_id = "privrl/HIV-v0"
    action_count = 4
    observation_dim = 6
    n_features = 7
    param_shapes: ClassVar[dict[str, tuple[int, ...]]] = {"W": (4, 7)}

    @staticmethod
    def features(obs: FloatArray) -> FloatArray:
        z = (np.log10(np.maximum(obs, 1e-10)) - HIV_LOG_MEAN) / HIV_LOG_STD
        return np.concatenate([z, np.ones((obs.shape[0], 1))], axis=1)


# ============================================================================ LunarLander

# gymnasium.envs.box2d.lunar_lander.heuristic, in order: angle target = clip(g0·x + g1·ẋ, ±g2),
# hover target = g3·|x|, angle todo = (target − angle)·g4 − ω·g5, hover todo = (target − y)·g6
# − ẏ·g7, after leg contact hover todo = −ẏ·g8; dead band g9.
LUNAR_HEURISTIC_GAINS = np.array([0.5, 1.0, 0.4, 0.55, 0.5, 1.0, 0.5, 0.5, 0.5, 0.05])


def _lunar_heuristic(g: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Vectorised ``heuristic``: ``g`` [..., 10] broadcasts against states ``s`` [..., 8]."""
    gi = [g[..., i] for i in range(10)]
    x, y, vx, vy, ang, angv, leg1, leg2 = (s[..., i] for i in range(8))
    angle_targ = np.clip(x * gi[0] + vx * gi[1], -gi[2], gi[2])
    hover_targ = gi[3] * np.abs(x)
    angle_todo = (angle_targ - ang) * gi[4] - angv * gi[5]
    hover_todo = (hover_targ - y) * gi[6] - vy * gi[7]
    contact = (leg1 != 0) | (leg2 != 0)
    angle_todo = np.where(contact, 0.0, angle_todo)
    hover_todo = np.where(contact, -vy * gi[8], hover_todo)
    a = np.where(angle_todo > gi[9], 1, 0)
    a = np.where(angle_todo < -gi[9], 3, a)
    return np.where((hover_todo > np.abs(angle_todo)) & (hover_todo > gi[9]), 2, a)


class LunarLanderHeuristicExperts(ArrayExperts):
    """gymnasium's heuristic lander with per-expert gains (``LUNAR_HEURISTIC_GAINS`` layout)."""

    family = "lunarlander-heuristic"
    env_id = "LunarLander-v3"
    action_count = 4
    observation_dim = 8
    param_shapes: ClassVar[dict[str, tuple[int, ...]]] = {"gains": (10,)}

    def _greedy_all(self, obs: FloatArray) -> np.ndarray:
        return _lunar_heuristic(self.params["gains"][:, None, :], obs[None, :, :])

    def _greedy_paired(self, ids: IntArray, obs: FloatArray) -> np.ndarray:
        return _lunar_heuristic(self.params["gains"][ids], obs)


FAMILIES: dict[str, type[ArrayExperts]] = {
    cls.family: cls
    for cls in (
        CartPoleLQRExperts,
        AcrobotLinearExperts,
        HIVLinearExperts,
        LunarLanderHeuristicExperts,
    )
}


# ============================================================================ search


def cem_per_setting(
    evaluate: Callable[[FloatArray, np.random.Generator], FloatArray],
    mean: FloatArray,
    std: FloatArray,
    rng: np.random.Generator,
    *,
    population: int,
    generations: int,
    n_elite: int,
    min_std: float = 0.05,
    keep_mean: bool = False,
    progress: Callable[[int], None] | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Cross-entropy search run independently for S settings, all evaluated in one batch.

    ``mean``, ``std`` [S, d]: the initial Gaussian per setting. ``evaluate(theta [S, P, d],
    rng) -> scores [S, P]`` (higher is better). Each generation refits mean and std (+
    ``min_std``) to the ``n_elite`` best candidates of its setting; ``keep_mean`` puts the
    current mean in slot 0 of the first population. Returns the last population [S, P, d]
    and its scores [S, P] — callers take each setting's best candidates (like the paper's
    "top agents per setting").
    """
    mean, std = np.array(mean, dtype=np.float64), np.array(std, dtype=np.float64)
    if mean.ndim != 2 or mean.shape != std.shape:
        raise ValueError(f"mean and std must both be [S, d], got {mean.shape}, {std.shape}")
    if not 1 <= n_elite <= population or generations < 1:
        raise ValueError("need 1 <= n_elite <= population and generations >= 1")
    s, d = mean.shape
    theta = scores = np.empty(0)
    for gen in range(generations):
        theta = mean[:, None, :] + std[:, None, :] * rng.standard_normal((s, population, d))
        if keep_mean and gen == 0:
            theta[:, 0] = mean
        scores = np.asarray(evaluate(theta, rng), dtype=np.float64)
        if scores.shape != (s, population):
            raise ValueError(f"evaluate returned {scores.shape}, expected ({s}, {population})")
        elite_idx = np.argsort(-scores, axis=1, kind="stable")[:, :n_elite]
        elite = np.take_along_axis(theta, elite_idx[:, :, None], axis=1)
        mean = elite.mean(axis=1)
        std = elite.std(axis=1) + min_std
        if progress is not None:
            progress(gen + 1)
    return theta, scores


def top_k_per_setting(
    theta: FloatArray, scores: FloatArray, counts: IntArray
) -> tuple[FloatArray, FloatArray]:
    """The ``counts[s]`` best candidates of each setting s, concatenated in setting order:
    parameters [Σ counts, d] and their scores."""
    order = np.argsort(-scores, axis=1, kind="stable")
    rank = np.arange(theta.shape[1])[None, :]
    take = rank < np.asarray(counts)[:, None]
    if np.any(np.asarray(counts) > theta.shape[1]):
        raise ValueError("more experts per setting than candidates in the population")
    sel = np.take_along_axis(theta, order[:, :, None], axis=1)[take]
    sc = np.take_along_axis(scores, order, axis=1)[take]
    return sel, sc


# ============================================================================ builders


def _group(settings: Mapping[str, np.ndarray]) -> tuple[IntArray, IntArray, IntArray]:
    """Experts grouped by their grid point: (first expert of each unique setting, experts per
    setting, and the order that lists experts setting by setting)."""
    idx = np.asarray(settings["setting"]).astype(np.int64)
    order = np.argsort(idx, kind="stable")
    _, first, counts = np.unique(idx[order], return_index=True, return_counts=True)
    return order[first], counts, order


def _assign(order: IntArray, values: np.ndarray, m: int) -> np.ndarray:
    out = np.empty((m, *values.shape[1:]), dtype=values.dtype)
    out[order] = values
    return out


def _own_physics_repeat(
    settings: Mapping[str, np.ndarray], names: tuple[str, ...], rows: IntArray, reps: int
) -> dict[str, FloatArray]:
    return {k: np.repeat(np.asarray(settings[k], dtype=np.float64)[rows], reps) for k in names}


def _cartpole_env(phys: Mapping[str, FloatArray] | None) -> Any:
    from privrl.envs.perturbed import CartPoleBatch, CartPoleParams

    if phys is None:
        return CartPoleBatch()
    return CartPoleBatch(
        CartPoleParams(
            gravity=phys["gravity"], force_mag=phys["force_mag"], masscart=phys["masscart"]
        )
    )


def _acrobot_env(phys: Mapping[str, FloatArray] | None) -> Any:
    from privrl.envs.perturbed import AcrobotBatch, AcrobotParams

    if phys is None:
        return AcrobotBatch()
    return AcrobotBatch(
        AcrobotParams(
            link_length_1=phys["link_length"],
            link_length_2=phys["link_length"],
            link_mass_1=phys["link_mass_1"],
            link_mass_2=phys["link_mass_2"],
        )
    )


def _hiv_env(phys: Mapping[str, FloatArray] | None) -> Any:
    from privrl.envs.perturbed import PerturbedHIVBatch

    if phys is None:
        return PerturbedHIVBatch()
    return PerturbedHIVBatch(phys["r1"], phys["r2"], phys["efficacy_std"])


_PHYSICS = {
    "cartpole": (("gravity", "force_mag", "masscart"), _cartpole_env, 200),
    "acrobot": (("link_length", "link_mass_1", "link_mass_2"), _acrobot_env, 200),
    "hiv": (("r1", "r2", "efficacy_std"), _hiv_env, 50),
}


def evaluate_experts(
    experts: ArrayExperts,
    env: str,
    rng: np.random.Generator,
    *,
    episodes: int,
    own: bool,
    horizon: int | None = None,
) -> FloatArray:
    """Mean return of each expert's greedy policy over ``episodes`` episodes, on its own
    perturbed physics (``own``) or on the default environment; numpy simulators only."""
    from privrl.envs.perturbed import numpy_rollout

    names, make, h = _PHYSICS[env]
    m = experts.n_experts
    rows = np.arange(m)
    phys = _own_physics_repeat(experts.settings, names, rows, episodes) if own else None
    sim = make(phys)
    ids = np.repeat(rows, episodes)

    def act(obs: np.ndarray, idx: np.ndarray, _: np.random.Generator) -> np.ndarray:
        return experts.greedy_for(ids[idx], obs)

    ro = numpy_rollout(sim, act, m * episodes, horizon or h, rng, record=False)
    return ro.returns().reshape(m, episodes).mean(axis=1)


def build_cartpole_experts(
    settings: Mapping[str, np.ndarray],
    rng: np.random.Generator,
    *,
    weight_log10: tuple[float, float] = (-2.0, 2.0),
    eval_episodes: int = 10,
    eval_horizon: int = 200,
) -> CartPoleLQRExperts:
    """Bang-bang LQR per perturbed model: Euler linearisation at the upright state (the
    simulator's own integrator), Q = diag(q), R = r with q_j, r ~ 10^U(weight_log10) drawn per
    expert (diversity), K from the batched DARE. ``own_return``: mean return of the greedy
    expert over ``eval_episodes`` episodes of ``eval_horizon`` steps on its own physics."""
    from privrl.envs.perturbed import CartPoleBatch, CartPoleParams

    m = len(settings["gravity"])
    params = CartPoleParams(
        gravity=np.asarray(settings["gravity"], dtype=np.float64),
        force_mag=np.asarray(settings["force_mag"], dtype=np.float64),
        masscart=np.asarray(settings["masscart"], dtype=np.float64),
    )
    a, b = CartPoleBatch(params).linearised()
    q = 10.0 ** rng.uniform(*weight_log10, size=(m, 4))
    r = 10.0 ** rng.uniform(*weight_log10, size=m)
    k = lqr_gain(a, b[:, :, None], q[:, :, None] * np.eye(4), r[:, None, None])[:, 0, :]
    out = {k_: np.asarray(v) for k_, v in settings.items()}
    out.update({f"lqr_q{j}": q[:, j] for j in range(4)})
    out["lqr_r"] = r
    experts = CartPoleLQRExperts(
        {"K": k},
        out,
        {
            "method": "bang-bang discrete LQR on the perturbed Euler model",
            "weight_log10": list(weight_log10),
        },
    )
    experts.settings["own_return"] = evaluate_experts(
        experts, "cartpole", rng, episodes=eval_episodes, own=True, horizon=eval_horizon
    )
    return experts


def build_acrobot_experts(
    settings: Mapping[str, np.ndarray],
    rng: np.random.Generator,
    *,
    population: int = 16,
    generations: int = 10,
    n_elite: int = 4,
    episodes: int = 3,
    eval_episodes: int = 10,
    progress: Callable[[int], None] | None = None,
) -> AcrobotLinearExperts:
    """Per-setting CEM over W ∈ R^{3×7} (start N(0, 1)), each candidate scored by its mean
    return over ``episodes`` 200-step episodes on its own physics, all settings × candidates ×
    episodes simulated in one batch; the experts of a setting are its best final candidates."""
    names = ("link_length", "link_mass_1", "link_mass_2")
    firsts, counts, order = _group(settings)
    s = len(firsts)
    d = 3 * 7

    def evaluate(theta: FloatArray, g: np.random.Generator) -> FloatArray:
        from privrl.envs.perturbed import numpy_rollout

        p = theta.shape[1]
        w = theta.reshape(s * p, 3, 7)
        sim = _acrobot_env(_own_physics_repeat(settings, names, firsts, p * episodes))

        def act(obs: np.ndarray, idx: np.ndarray, _: np.random.Generator) -> np.ndarray:
            phi = AcrobotLinearExperts.features(obs.astype(np.float64))
            return np.einsum("nad,nd->na", w[idx // episodes], phi).argmax(axis=1)

        ro = numpy_rollout(sim, act, s * p * episodes, 200, g, record=False)
        return ro.returns().reshape(s, p, episodes).mean(axis=2)

    theta, scores = cem_per_setting(
        evaluate,
        np.zeros((s, d)),
        np.ones((s, d)),
        rng,
        population=population,
        generations=generations,
        n_elite=n_elite,
        progress=progress,
    )
    sel, _ = top_k_per_setting(theta, scores, counts)
    m = len(order)
    experts = AcrobotLinearExperts(
        {"W": _assign(order, sel.reshape(-1, 3, 7), m)},
        dict(settings),
        {
            "method": "per-setting CEM over linear argmax policies",
            "population": population,
            "generations": generations,
            "n_elite": n_elite,
            "episodes": episodes,
        },
    )
    experts.settings["own_return"] = evaluate_experts(
        experts, "acrobot", rng, episodes=eval_episodes, own=True
    )
    return experts


def hiv_warm_start(
    settings: Mapping[str, np.ndarray],
    rng: np.random.Generator,
    *,
    population: int = 400,
    generations: int = 15,
    n_elite: int = 50,
    progress: Callable[[int], None] | None = None,
) -> tuple[FloatArray, FloatArray]:
    """A shared starting point for the HIV experts: one CEM (start N(0, 2²)) whose candidates
    are each scored on a perturbed model drawn from ``settings`` (domain randomisation over
    the perturbation grid, never the default model). Returns (mean, std), each [28]."""
    names = ("r1", "r2", "efficacy_std")
    n = len(settings["r1"])
    d = 4 * 7

    def evaluate(theta: FloatArray, g: np.random.Generator) -> FloatArray:
        from privrl.envs.perturbed import numpy_rollout

        p = theta.shape[1]
        pick = g.integers(0, n, size=p)
        sim = _hiv_env({k: np.asarray(settings[k], dtype=np.float64)[pick] for k in names})
        w = theta.reshape(p, 4, 7)

        def act(obs: np.ndarray, idx: np.ndarray, _: np.random.Generator) -> np.ndarray:
            phi = HIVLinearExperts.features(obs)
            return np.einsum("nad,nd->na", w[idx], phi).argmax(axis=1)

        return numpy_rollout(sim, act, p, 50, g, record=False).returns()[None, :]

    theta, scores = cem_per_setting(
        evaluate,
        np.zeros((1, d)),
        np.full((1, d), 2.0),
        rng,
        population=population,
        generations=generations,
        n_elite=n_elite,
        min_std=0.02,
        progress=progress,
    )
    elite = theta[0, np.argsort(-scores[0], kind="stable")[:n_elite]]
    return elite.mean(axis=0), elite.std(axis=0)


def build_hiv_experts(
    settings: Mapping[str, np.ndarray],
    rng: np.random.Generator,
    warm_start: tuple[FloatArray, FloatArray],
    *,
    population: int = 8,
    generations: int = 3,
    n_elite: int = 2,
    init_std: float = 0.3,
    progress: Callable[[int], None] | None = None,
) -> HIVLinearExperts:
    """Per-setting CEM over W ∈ R^{4×7} started at the warm-start mean with std ``init_std``,
    one 50-step episode per candidate on its own perturbed model (penalties R1, R2, efficacy
    noise); the experts of a setting are its best final candidates, ``own_return`` their
    score in the last generation."""
    names = ("r1", "r2", "efficacy_std")
    firsts, counts, order = _group(settings)
    s = len(firsts)
    mean0 = np.asarray(warm_start[0], dtype=np.float64).reshape(1, 28)

    def evaluate(theta: FloatArray, g: np.random.Generator) -> FloatArray:
        from privrl.envs.perturbed import numpy_rollout

        p = theta.shape[1]
        w = theta.reshape(s * p, 4, 7)
        sim = _hiv_env(_own_physics_repeat(settings, names, firsts, p))

        def act(obs: np.ndarray, idx: np.ndarray, _: np.random.Generator) -> np.ndarray:
            phi = HIVLinearExperts.features(obs)
            return np.einsum("nad,nd->na", w[idx], phi).argmax(axis=1)

        return numpy_rollout(sim, act, s * p, 50, g, record=False).returns().reshape(s, p)

    theta, scores = cem_per_setting(
        evaluate,
        np.repeat(mean0, s, axis=0),
        np.full((s, 28), init_std),
        rng,
        population=population,
        generations=generations,
        n_elite=n_elite,
        min_std=0.02,
        keep_mean=True,
        progress=progress,
    )
    sel, sc = top_k_per_setting(theta, scores, counts)
    m = len(order)
    out = dict(settings)
    out["own_return"] = _assign(order, sc, m)
    return HIVLinearExperts(
        {"W": _assign(order, sel.reshape(-1, 4, 7), m)},
        out,
        {
            "method": "warm-started per-setting CEM over linear argmax policies",
            "population": population,
            "generations": generations,
            "n_elite": n_elite,
            "init_std": init_std,
        },
    )


def build_lunarlander_experts(
    settings: Mapping[str, np.ndarray],
    rng: np.random.Generator,
    *,
    candidates: int = 6,
    episodes: int = 2,
    gain_log_std: float = 0.25,
    eval_episodes: int = 1,
    pool: int = 64,
    progress: Callable[[int], None] | None = None,
) -> LunarLanderHeuristicExperts:
    """Random search per setting: candidate 0 is gymnasium's heuristic, the others multiply
    each of its ten gains by exp(N(0, ``gain_log_std``²)); each candidate runs ``episodes``
    episodes on its own physics (Box2D, a pool of environments), and the experts of a
    setting are its best candidates (``search_score``); ``own_return`` is their mean return
    over ``eval_episodes`` fresh episodes on their own physics."""
    from privrl.envs.perturbed import lunar_lander_rollout

    names = ("gravity", "wind_power", "turbulence_power")
    firsts, counts, order = _group(settings)
    s = len(firsts)
    gains = LUNAR_HEURISTIC_GAINS * np.exp(gain_log_std * rng.standard_normal((s, candidates, 10)))
    gains[:, 0] = LUNAR_HEURISTIC_GAINS
    flat = gains.reshape(s * candidates, 10)
    phys = _own_physics_repeat(settings, names, firsts, candidates * episodes)
    seeds = rng.integers(0, 2**31 - 1, size=s * candidates * episodes)

    def act(obs: np.ndarray, idx: np.ndarray, _: np.random.Generator) -> np.ndarray:
        return _lunar_heuristic(flat[idx // episodes], obs.astype(np.float64))

    ro = lunar_lander_rollout(
        act, seeds, rng, physics=phys, pool=pool, record=False, progress=progress
    )
    scores = ro.returns().reshape(s, candidates, episodes).mean(axis=2)
    sel, sc = top_k_per_setting(gains, scores, counts)
    m = len(order)
    out = dict(settings)
    out["search_score"] = _assign(order, sc, m)
    experts = LunarLanderHeuristicExperts(
        {"gains": _assign(order, sel, m)},
        out,
        {
            "method": "random search over the gains of gymnasium's heuristic",
            "candidates": candidates,
            "episodes": episodes,
            "gain_log_std": gain_log_std,
            "eval_episodes": eval_episodes,
        },
    )
    # fresh episodes: the search score of the selected candidates is biased upwards
    ids = np.repeat(np.arange(m), eval_episodes)
    own = lunar_lander_rollout(
        lambda obs, idx, _: experts.greedy_for(ids[idx], obs),
        rng.integers(0, 2**31 - 1, size=ids.size),
        rng,
        physics=_own_physics_repeat(settings, names, np.arange(m), eval_episodes),
        pool=pool,
        record=False,
        progress=progress,
    )
    experts.settings["own_return"] = own.returns().reshape(m, eval_episodes).mean(axis=1)
    return experts


# ============================================================================ storage

_INFO_FILE = "experts.json"
_ARRAY_FILE = "experts.npz"


def save_experts(experts: ArrayExperts, directory: str | Path) -> Path:
    """Write ``experts.npz`` (parameters ``param/<name>``, settings ``setting/<name>``) and
    ``experts.json`` (family, env id, sizes, info) into ``directory``, atomically: the files
    are written into a temporary sibling directory that is then renamed into place."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        arrays = {f"param/{k}": v for k, v in experts.params.items()}
        arrays.update({f"setting/{k}": v for k, v in experts.settings.items()})
        np.savez(tmp / _ARRAY_FILE, **arrays)
        meta = {
            "family": experts.family,
            "env_id": experts.env_id,
            "n_experts": experts.n_experts,
            "n_actions": experts.n_actions,
            "obs_dim": experts.obs_dim,
            "settings": sorted(experts.settings),
            "info": experts.info,
        }
        (tmp / _INFO_FILE).write_text(json.dumps(meta, indent=2, allow_nan=False))
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return directory


def load_experts(directory: str | Path) -> ArrayExperts:
    """Read an expert set written by :func:`save_experts` (dispatching on its family)."""
    directory = Path(directory)
    info_path = directory / _INFO_FILE
    if not info_path.is_file():
        raise FileNotFoundError(f"no expert set in {directory} (missing {_INFO_FILE})")
    meta = json.loads(info_path.read_text())
    family = meta.get("family")
    if family not in FAMILIES:
        raise ValueError(f"unknown expert family {family!r}; known: {', '.join(FAMILIES)}")
    z = read_npz(directory / _ARRAY_FILE, "expert set")
    params = {k.split("/", 1)[1]: z[k] for k in z if k.startswith("param/")}
    settings = {k.split("/", 1)[1]: z[k] for k in z if k.startswith("setting/")}
    experts = FAMILIES[family](params, settings, meta.get("info"))
    if experts.n_experts != int(meta["n_experts"]):
        raise ValueError(
            f"{directory}: {experts.n_experts} experts stored, json says {meta['n_experts']}"
        )
    return experts
