"""The pessimistic model MDP M̃ = (S, A, P̂, r̃, γ, ρ0) of MOPO and PRIMORL.

r̃(s, a) = r̂(s, a) − λ · u(s, a)   (MOPO eq. 4; PRIMORL §4.3.3), with the uncertainty u one of

* ``"ma"``            u_MA = max_i ‖σ_i(s, a)‖₂        (MOPO's code: max aleatoric std norm)
* ``"ma-frobenius"``  u_MA = max_i ‖Σ_i(s, a)‖_F        (the paper's form, Σ_i = diag(σ_i²))
* ``"mpd"``           u_MPD = max_{i,j} ‖μ_i − μ_j‖₂    (max pairwise discrepancy of the means)

computed over all ensemble members from the ``means``/``stds`` a
:class:`privrl.primorl.dynamics.DynamicsModel` returns (the penalty functions live next to the
model, in :mod:`privrl.primorl.dynamics`). MA norms include the reward output (MOPO); MPD uses
the state dimensions only unless ``mpd_include_reward``.

The penalised model is a post-processing of the released model: it reads the model only, never
data, so a private model gives a private M̃ (PRIMORL Theorem 4.5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import torch

from privrl.primorl.dynamics import u_ma, u_ma_frobenius, u_mpd

__all__ = ["PENALTIES", "ModelStep", "PenalizedModel", "Penalty", "uncertainty"]

Penalty = Literal["ma", "ma-frobenius", "mpd"]
PENALTIES: tuple[str, ...] = ("ma", "ma-frobenius", "mpd")


class _Model(Protocol):
    """What the pessimistic MDP needs from a dynamics model."""

    obs_dim: int
    act_dim: int

    def predict(
        self, obs: Any, act: Any, generator: Any = None, deterministic: bool = False
    ) -> tuple[Any, Any, dict[str, Any]]: ...


def uncertainty(
    info: dict[str, Any], penalty: str, *, mpd_include_reward: bool = False
) -> np.ndarray:
    """u(s, a) ``[B]`` from a model step's ``info`` (per-member ``means``/``stds``
    ``[N, B, obs_dim + 1]``, reward last; numpy arrays or tensors on any device, reduced where
    they live so only the ``[B]`` result is moved)."""
    if penalty == "ma":
        u = u_ma(_array(info["stds"]))
    elif penalty == "ma-frobenius":
        u = u_ma_frobenius(_array(info["stds"]))
    elif penalty == "mpd":
        u = u_mpd(_array(info["means"]), include_reward=mpd_include_reward)
    else:
        raise ValueError(f"unknown penalty {penalty!r}; choose one of {', '.join(PENALTIES)}")
    return _host(u)


def _array(x: Any) -> Any:
    """A tensor as it is (on its device), anything else as a numpy array."""
    return x if isinstance(x, torch.Tensor) else np.asarray(x)


def _host(x: Any) -> np.ndarray:
    """A float64 numpy array of ``x`` (a tensor is moved to the CPU once)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


@dataclass
class ModelStep:
    """One batched step of M̃: next states, penalised reward r̃ = r̂ − λu, and its parts."""

    next_obs: np.ndarray  # [B, obs_dim]
    reward: np.ndarray  # [B] r̃
    model_reward: np.ndarray  # [B] r̂
    uncertainty: np.ndarray  # [B] u(s, a)


@dataclass(frozen=True)
class PenalizedModel:
    """The released dynamics model with its pessimism: (model, penalty, λ).

    ``step`` samples s' and r̂ from a random elite member (MOPO) and subtracts λ·u(s, a).
    Model rollouts are never terminal (the control tasks have no terminal states).
    """

    model: Any  # DynamicsModel (see _Model)
    penalty: str = "ma"
    lam: float = 1.0
    mpd_include_reward: bool = False

    def __post_init__(self) -> None:
        if self.penalty not in PENALTIES:
            raise ValueError(
                f"unknown penalty {self.penalty!r}; choose one of {', '.join(PENALTIES)}"
            )
        if not (math.isfinite(self.lam) and self.lam >= 0):
            raise ValueError(f"the penalty coefficient λ must be finite and >= 0, got {self.lam}")

    @property
    def obs_dim(self) -> int:
        return int(self.model.obs_dim)

    @property
    def act_dim(self) -> int:
        return int(self.model.act_dim)

    def step(self, obs: np.ndarray, act: np.ndarray, generator: Any) -> ModelStep:
        """s' ~ P̂(·|s, a), r̃ = r̂(s, a) − λ·u(s, a) for a batch ``[B, ·]``.

        The model is stepped with tensors, so the per-member ``[N, B, ·]`` means and stds stay
        on the model's device and u is reduced there; only s', r̂ and u come back."""
        obs_t, act_t = torch.as_tensor(np.asarray(obs)), torch.as_tensor(np.asarray(act))
        next_obs, reward, info = self.model.predict(obs_t, act_t, generator, deterministic=False)
        u = uncertainty(info, self.penalty, mpd_include_reward=self.mpd_include_reward)
        r_hat = _host(reward).reshape(-1)
        return ModelStep(
            next_obs=_host(next_obs),
            reward=r_hat - self.lam * u,
            model_reward=r_hat,
            uncertainty=u,
        )

    def describe(self) -> dict[str, Any]:
        """The pessimism settings, for configs and reports."""
        return {
            "penalty": self.penalty,
            "lambda": self.lam,
            "mpd_include_reward": self.mpd_include_reward,
        }
