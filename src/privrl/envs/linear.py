"""The linear MDP of Qiao & Wang's simulations (Min et al. 2021 family), with exact evaluation.

A linear MDP has ``P_h(s'|s,a) = ⟨φ(s,a), ν_h(s')⟩`` and ``r_h(s,a) = ⟨φ(s,a), θ_h⟩``. The
instance of Qiao & Wang's experiment (the one the qiao-wang reproductions run) has

* ``S = {0, 1}``, ``A = 100`` actions, ``d = 10``, ``H = 20``;
* an 8-bit binary code **a** per action (least significant bit first; actions < 100 never set
  the top bit, so that coordinate of φ is always 0, as in Min et al.);
* ``δ(s,a) = 1`` if ``1{s=0} = 1{a=0}`` else 0, and ``φ(s,a) = (**a**, δ(s,a), 1 − δ(s,a))``;
* ``ν_h(0) = (0,…,0, α_{h,1}, α_{h,2})``, ``ν_h(1) = (0,…,0, 1 − α_{h,1}, 1 − α_{h,2})`` with
  ``α ~ U[0,1]`` per instance, so ``P_h(0|s,a) = α_{h,1}`` if ``δ(s,a) = 1`` else ``α_{h,2}``;
* ``θ_h = (u_h/16, r_h/2, (1 − r_h)/2)`` with ``u_h ~ U[0,1]⁸``, ``r_h ~ U[0,1]`` (our choice:
  the paper's reward is in its lost appendix F); rewards lie in [0, 1];
* behaviour μ: action 0 with probability 0.6, the other 99 uniformly; ``d1`` uniform.

**Rescaling.** The privacy analysis needs ``‖φ‖ ≤ 1``. The raw features have norm up to √7
(the largest code weight below 100 is 6), so φ is divided by its maximum norm ``c`` and ν, θ
are multiplied by ``c``: ``⟨φ/c, c·ν⟩ = ⟨φ, ν⟩``, an *equivalent* linear MDP (same P and r,
hence same values). Because S is finite, the instance also exposes the equivalent
:class:`~privrl.envs.tabular.TabularMDP`, used for exact ``v*`` and exact policy evaluation
(suboptimality with no Monte-Carlo error). Steps are ``h = 0..H-1`` in code (``1..H`` in the
paper).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt

from privrl.arrays import FloatArray
from privrl.envs.tabular import TabularMDP, TabularMDPEnv

if TYPE_CHECKING:
    from privrl.data.dataset import TrajectoryDataset

__all__ = [
    "ENV_ID",
    "LinearMDP",
    "action_codes",
    "feature_table_sha256",
    "linear_mdp_from_metadata",
    "make_linear_mdp_env",
    "raw_features",
    "register_envs",
]

ENV_ID = "privrl/LinearMDP-v0"
METADATA_KEY = "linear_mdp"  # key in DatasetMetadata.extra holding the instance recipe
N_STATES = 2
N_ACTIONS = 100
CODE_BITS = 8
HORIZON = 20
BEHAVIOUR_ACTION0 = 0.6  # μ(0|s); the other actions share the rest uniformly
_NORM_ATOL = 1e-12


def action_codes(n_actions: int = N_ACTIONS, bits: int = CODE_BITS) -> FloatArray:
    """Binary code of each action ``[A, bits]`` (least significant bit first)."""
    if n_actions < 1 or n_actions > 2**bits:
        raise ValueError(f"n_actions must be in [1, 2**bits] = [1, {2**bits}], got {n_actions}")
    a = np.arange(n_actions, dtype=np.int64)
    return ((a[:, None] >> np.arange(bits)) & 1).astype(np.float64)


def raw_features(n_actions: int = N_ACTIONS, bits: int = CODE_BITS) -> FloatArray:
    """Unscaled ``φ(s,a) = (**a**, δ(s,a), 1 − δ(s,a))`` ``[S=2, A, bits + 2]``."""
    codes = action_codes(n_actions, bits)
    s = np.arange(N_STATES)[:, None]
    a = np.arange(n_actions)[None, :]
    delta = ((s == 0) == (a == 0)).astype(np.float64)  # δ(s,a) = 1 iff 1{s=0} = 1{a=0}
    return np.concatenate(
        [
            np.broadcast_to(codes, (N_STATES, n_actions, bits)),
            delta[..., None],
            1 - delta[..., None],
        ],
        axis=-1,
    )


def feature_table_sha256(phi: npt.ArrayLike) -> str:
    """SHA-256 of a float64 C-ordered feature table (identifies φ in dataset metadata)."""
    arr = np.ascontiguousarray(np.asarray(phi, dtype=np.float64))
    h = hashlib.sha256(str(arr.shape).encode())
    h.update(arr.tobytes())
    return h.hexdigest()


@dataclass(frozen=True, eq=False)
class LinearMDP:
    """A finite-state linear MDP: features ``φ [S, A, d]`` (‖φ‖ ≤ 1), ``ν [H, S, d]``
    (``ν[h, s']`` = ν_h(s')), ``θ [H, d]`` and ``d1 [S]``.

    ``scale`` is the factor φ was divided by (1 if it was not rescaled); ``recipe`` (JSON)
    rebuilds the instance, e.g. ``{"generator": "qiao_wang", "instance": 0, ...}``.
    """

    phi: FloatArray
    nu: FloatArray
    theta: FloatArray
    d1: FloatArray
    scale: float = 1.0
    recipe: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        phi = np.array(self.phi, dtype=np.float64)
        nu = np.array(self.nu, dtype=np.float64)
        theta = np.array(self.theta, dtype=np.float64)
        d1 = np.array(self.d1, dtype=np.float64)
        if phi.ndim != 3:
            raise ValueError(f"phi must be [S, A, d], got shape {phi.shape}")
        S, _, d = phi.shape
        if nu.ndim != 3 or nu.shape[1:] != (S, d):
            raise ValueError(f"nu must be [H, S, d] = [H, {S}, {d}], got shape {nu.shape}")
        if theta.shape != (nu.shape[0], d):
            raise ValueError(f"theta must be [H, d] = [{nu.shape[0]}, {d}], got {theta.shape}")
        norms = np.linalg.norm(phi, axis=-1)
        if norms.max() > 1 + _NORM_ATOL:
            raise ValueError(
                f"features must satisfy ‖φ(s,a)‖ ≤ 1 (max is {norms.max():.6g}); build the MDP "
                "with LinearMDP.rescaled(...) to divide φ by its max norm"
            )
        for x in (phi, nu, theta, d1):
            x.flags.writeable = False
        object.__setattr__(self, "phi", phi)
        object.__setattr__(self, "nu", nu)
        object.__setattr__(self, "theta", theta)
        object.__setattr__(self, "d1", d1)
        object.__setattr__(self, "_tabular", None)

    # ---- construction ------------------------------------------------------------------

    @classmethod
    def rescaled(
        cls,
        phi: npt.ArrayLike,
        nu: npt.ArrayLike,
        theta: npt.ArrayLike,
        d1: npt.ArrayLike,
        *,
        recipe: dict[str, Any] | None = None,
    ) -> LinearMDP:
        """The equivalent MDP with ``φ/c``, ``c·ν``, ``c·θ``, ``c = max ‖φ(s,a)‖`` (if > 1)."""
        phi = np.asarray(phi, dtype=np.float64)
        c = float(np.linalg.norm(phi, axis=-1).max())
        c = max(c, 1.0)  # never scale features up: ‖φ‖ ≤ 1 already holds
        return cls(
            phi=phi / c,
            nu=np.asarray(nu, dtype=np.float64) * c,
            theta=np.asarray(theta, dtype=np.float64) * c,
            d1=d1,
            scale=c,
            recipe=dict(recipe or {}),
        )

    @classmethod
    def qiao_wang(
        cls, instance: int = 0, *, horizon: int = HORIZON, n_actions: int = N_ACTIONS
    ) -> LinearMDP:
        """The Qiao & Wang instance ``instance``: α, u, r drawn from ``default_rng(instance)``."""
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        rng = np.random.default_rng(int(instance))
        H, d = int(horizon), CODE_BITS + 2
        alpha = rng.random((H, 2))  # α_{h,1}, α_{h,2} ~ U[0,1]
        u = rng.random((H, CODE_BITS))  # u_h ~ U[0,1]^8
        r = rng.random(H)  # r_h ~ U[0,1]
        nu = np.zeros((H, N_STATES, d))
        nu[:, 0, -2:] = alpha  # ν_h(0) = (0,…,0, α_{h,1}, α_{h,2})
        nu[:, 1, -2:] = 1.0 - alpha  # ν_h(1) = (0,…,0, 1−α_{h,1}, 1−α_{h,2})
        theta = np.concatenate([u / 16.0, r[:, None] / 2.0, (1.0 - r[:, None]) / 2.0], axis=1)
        recipe = {
            "generator": "qiao_wang",
            "instance": int(instance),
            "horizon": H,
            "n_actions": int(n_actions),
        }
        return cls.rescaled(
            raw_features(n_actions), nu, theta, np.full(N_STATES, 0.5), recipe=recipe
        )

    # ---- shape -------------------------------------------------------------------------

    @property
    def H(self) -> int:
        return int(self.nu.shape[0])

    @property
    def S(self) -> int:
        return int(self.phi.shape[0])

    @property
    def A(self) -> int:
        return int(self.phi.shape[1])

    @property
    def d(self) -> int:
        return int(self.phi.shape[2])

    def __repr__(self) -> str:
        return f"LinearMDP(H={self.H}, S={self.S}, A={self.A}, d={self.d}, recipe={self.recipe})"

    # ---- the model ---------------------------------------------------------------------

    def transitions(self) -> FloatArray:
        """``P [H, S, A, S]``, ``P_h(s'|s,a) = ⟨φ(s,a), ν_h(s')⟩``."""
        return np.einsum("sad,htd->hsat", self.phi, self.nu)

    def rewards(self) -> FloatArray:
        """``R [H, S, A]``, ``r_h(s,a) = ⟨φ(s,a), θ_h⟩``."""
        return np.einsum("sad,hd->hsa", self.phi, self.theta)

    def tabular(self) -> TabularMDP:
        """The equivalent TabularMDP (cached): exact v*, exact policy values, sampling."""
        cached = object.__getattribute__(self, "_tabular")
        if cached is None:
            P = self.transitions()
            R = self.rewards()
            # Clean rounding only: P, R are exact to ~1e-16; clip keeps the tabular checks happy.
            P = np.clip(P, 0.0, 1.0)
            R = np.clip(R, 0.0, 1.0)
            cached = TabularMDP(P, R, self.d1)
            object.__setattr__(self, "_tabular", cached)
        return cached

    def behaviour_policy(self, p0: float = BEHAVIOUR_ACTION0) -> FloatArray:
        """μ ``[H, S, A]``: action 0 w.p. ``p0``, every other action ``(1 − p0)/(A − 1)``."""
        if not 0 < p0 < 1:
            raise ValueError(f"p0 must be in (0, 1), got {p0}")
        mu = np.full((self.H, self.S, self.A), (1.0 - p0) / (self.A - 1))
        mu[..., 0] = p0
        return mu

    def optimal_value(self) -> float:
        """``v* = d1 · V*_1`` (exact)."""
        return self.tabular().optimal_value()

    def suboptimality(self, policy: npt.ArrayLike) -> FloatArray:
        """Exact ``v* − v^π`` of a policy stack (``[..., H, S]`` ints or ``[..., H, S, A]``)."""
        return self.tabular().suboptimality(policy)

    # ---- data --------------------------------------------------------------------------

    def metadata_extra(self) -> dict[str, Any]:
        """What a sampled dataset records so a trainer can recover φ: the recipe, the
        rescaling factor and the SHA-256 of the (rescaled) feature table."""
        return {
            METADATA_KEY: {
                **self.recipe,
                "feature_scale": self.scale,
                "feature_sha256": feature_table_sha256(self.phi),
                "dim": self.d,
            }
        }

    def sample(
        self,
        n_episodes: int,
        *,
        rng: np.random.Generator | int | None,
        policy: npt.ArrayLike | None = None,
    ) -> TrajectoryDataset:
        """``n_episodes`` episodes of length H under ``policy`` (default μ), vectorised over
        episodes; behaviour probabilities recorded; the instance recipe in metadata.extra."""
        mu = self.behaviour_policy() if policy is None else policy
        env_id = ENV_ID if self.recipe.get("generator") == "qiao_wang" else None
        return self.tabular().sample(
            mu, n_episodes, rng=rng, env_id=env_id, extra=self.metadata_extra()
        )


def linear_mdp_from_metadata(extra: dict[str, Any]) -> LinearMDP | None:
    """Rebuild the instance a dataset was sampled from (None if it records no recipe).

    Raises ValueError if the recipe does not reproduce the recorded feature table.
    """
    info = extra.get(METADATA_KEY)
    if not isinstance(info, dict) or info.get("generator") != "qiao_wang":
        return None
    mdp = LinearMDP.qiao_wang(
        int(info["instance"]), horizon=int(info["horizon"]), n_actions=int(info["n_actions"])
    )
    want = info.get("feature_sha256")
    if want is not None and want != feature_table_sha256(mdp.phi):
        raise ValueError(
            "the dataset's linear-MDP recipe does not reproduce its recorded feature table "
            "(written by another privrl version?); pass the features explicitly"
        )
    return mdp


# --------------------------------------------------------------------------------------------
# Gymnasium
# --------------------------------------------------------------------------------------------


def make_linear_mdp_env(
    instance: int = 0,
    horizon: int = HORIZON,
    n_actions: int = N_ACTIONS,
    render_mode: str | None = None,
) -> TabularMDPEnv:
    """Entry point of ``privrl/LinearMDP-v0``: the Qiao & Wang instance as a Gymnasium env
    (observation = state index; truncation at H; ``env.unwrapped.mdp`` is the tabular form)."""
    mdp = LinearMDP.qiao_wang(instance, horizon=horizon, n_actions=n_actions)
    return TabularMDPEnv(mdp.tabular(), render_mode=render_mode)


def register_envs() -> None:
    """Register ``privrl/LinearMDP-v0`` with Gymnasium (idempotent)."""
    if ENV_ID in gym.registry:
        return
    gym.register(id=ENV_ID, entry_point=f"{__name__}:make_linear_mdp_env")
