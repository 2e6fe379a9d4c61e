"""Per-trajectory statistics of GTD2's saddle point (Xie et al. 2019, eq. 2.2), batched.

For trajectory i with τ_i transitions (s_t, a_t, R_t, s_{t+1}):

    Â_i = (1/τ_i) Σ_t ρ_t φ_t (φ_t − γ φ_{t+1})ᵀ,   b̂_i = (1/τ_i) Σ_t ρ_t φ_t R_t,
    Ĉ_i = (1/τ_i) Σ_t φ_t φ_tᵀ,                    ρ_t = π(a_t|s_t) / π_b(a_t|s_t)     (2.2)

computed ONCE per dataset as arrays [m, n, n], [m, n], [m, n, n], so that a GPOPE iteration is
a gather and a few small matrix-vector products.

Conventions (documented decisions):

* ρ_t is the per-step ratio (not a product over the trajectory), as in (2.1). With no target
  policy the data are on-policy and ρ_t = 1; with one, the dataset must carry the behaviour
  probabilities π_b(a_t|s_t) (`behaviour_probs`), otherwise `DatasetError` names that field.
* "divide by the actual count": τ_i is the trajectory's own number of transitions.
  ``normalisation="sum"`` drops the 1/τ_i (un-normalised per-trajectory sums; see
  `privrl.envs.chain` for why the two weightings have different fixed points).
* φ(terminal) = 0: on a step that ends with ``terminated`` the next feature vector is zero.
  A trajectory that ends ``truncated`` (time limit) — or with neither flag (data cut at
  collection end) — bootstraps from its stored final observation: φ_{τ} = φ(s_τ), as for any
  other non-terminal next state. Both are the standard semi-gradient TD conventions.

`mean_system` computes the dataset-level averages (A, b, C) = mean_i (Â_i, b̂_i, Ĉ_i) directly
with one chunked matrix product, without materialising [m, n, n] (used for the large-sample
MSPBE model of continuous domains). Value features different from the row features give the
cross system used to score a value function living in another feature space.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from privrl.data.dataset import DatasetError, TrajectoryDataset

__all__ = [
    "FeatureFn",
    "Normalisation",
    "TrajectoryStats",
    "importance_ratios",
    "mean_system",
    "trajectory_stats",
]

FeatureFn = Callable[[np.ndarray], np.ndarray]
Normalisation = Literal["length", "sum"]

_CHUNK_ROWS = 1 << 15  # transitions per chunk of per-trajectory statistics
_GROUP = 64  # episodes per padded batched matrix product
_MEAN_CHUNK_ROWS = 1 << 17  # transitions per chunk of the dataset-level products


@dataclass(frozen=True)
class TrajectoryStats:
    """Per-trajectory Â_i [m, n, n], b̂_i [m, n], Ĉ_i [m, n, n] and lengths τ_i [m]."""

    A: np.ndarray
    b: np.ndarray
    C: np.ndarray
    lengths: np.ndarray
    gamma: float
    normalisation: Normalisation = "length"

    @property
    def m(self) -> int:
        return int(self.A.shape[0])

    @property
    def n(self) -> int:
        return int(self.A.shape[1])

    def mean(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The empirical (A, b, C): averages over trajectories (the dataset's saddle point)."""
        return self.A.mean(axis=0), self.b.mean(axis=0), self.C.mean(axis=0)

    def subset(self, idx: Any) -> TrajectoryStats:
        idx = np.asarray(idx)
        return TrajectoryStats(
            self.A[idx],
            self.b[idx],
            self.C[idx],
            self.lengths[idx],
            self.gamma,
            self.normalisation,
        )

    def gradient(self, j: int, theta: np.ndarray, w: np.ndarray) -> np.ndarray:
        """B_j(θ, w) = [−Â_jᵀ w ; Â_j θ + Ĉ_j w − b̂_j]  (4.1)."""
        A = self.A[j]
        return np.concatenate((-A.T @ w, A @ theta + self.C[j] @ w - self.b[j]))


def importance_ratios(data: TrajectoryDataset, target_policy: Any | None) -> np.ndarray:
    """ρ_t = π(a_t|s_t)/π_b(a_t|s_t) per transition; all ones when `target_policy` is None."""
    n = data.n_transitions
    if target_policy is None:
        return np.ones(n, dtype=np.float64)
    probs_b = data.behaviour_probs
    if probs_b is None:
        raise DatasetError(
            "off-policy evaluation needs the behaviour policy's action probabilities, but the "
            "dataset has no 'behaviour_probs' field; record them when collecting the data (or "
            "evaluate the behaviour policy itself, on-policy)",
            field="behaviour_probs",
        )
    obs = _transition_observations(data)
    actions = np.asarray(data.actions)
    if actions.ndim != 1 or not np.issubdtype(actions.dtype, np.integer):
        raise DatasetError(
            "off-policy evaluation with action probabilities needs discrete (integer) actions",
            field="actions",
        )
    if getattr(target_policy, "time_indexed", False):  # π_h(a|s) [H, S, A]: step h too
        steps = np.asarray(data.transition_steps)
        probs_pi = np.asarray(target_policy.action_probs(obs, steps), dtype=np.float64)
    else:
        probs_pi = np.asarray(target_policy.action_probs(obs), dtype=np.float64)
    if probs_pi.ndim != 2 or probs_pi.shape[0] != n:
        raise ValueError(
            f"target_policy.action_probs returned shape {probs_pi.shape}, expected ({n}, A)"
        )
    if actions.size and actions.max() >= probs_pi.shape[1]:
        raise DatasetError(
            f"action {int(actions.max())} is outside the target policy's "
            f"{probs_pi.shape[1]} actions",
            field="actions",
        )
    pi = probs_pi[np.arange(n), actions]
    return pi / np.asarray(probs_b, dtype=np.float64)


def _transition_observations(data: TrajectoryDataset) -> np.ndarray:
    rows = np.arange(data.n_transitions) + data.transition_episode_index
    return np.asarray(data.observations)[rows]


def _check(data: TrajectoryDataset, gamma: float, normalisation: str) -> np.ndarray:
    if normalisation not in ("length", "sum"):
        raise ValueError(f"normalisation must be 'length' or 'sum', got {normalisation!r}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if data.n_episodes == 0:
        raise DatasetError("the dataset has no episodes")
    lengths = np.asarray(data.episode_lengths, dtype=np.int64)
    if np.any(lengths == 0):
        i = int(np.flatnonzero(lengths == 0)[0])
        raise DatasetError(f"episode {i} has no transitions", episode=i)
    return lengths


@dataclass(frozen=True)
class _Chunk:
    """Prepared arrays of the transitions of episodes [e0, e1)."""

    e0: int
    e1: int
    episode: np.ndarray  # [T_c] episode index relative to e0
    starts: np.ndarray  # [e1 - e0] first transition of each episode, relative to the chunk
    phi: np.ndarray  # φ_t [T_c, n]
    dpsi: np.ndarray  # ψ_t − γψ_{t+1} [T_c, n_ψ] (ψ = φ unless value features are given)
    rho: np.ndarray  # ρ_t [T_c]
    weight: np.ndarray  # 1/τ_i (or 1) per transition [T_c]
    reward: np.ndarray  # R_t [T_c]


def _chunks(
    data: TrajectoryDataset,
    features: FeatureFn,
    gamma: float,
    target_policy: Any | None,
    normalisation: Normalisation,
    value_features: FeatureFn | None,
    *,
    rows: int,
) -> Iterator[_Chunk]:
    """Episode chunks of about `rows` transitions, features evaluated per chunk."""
    lengths = _check(data, gamma, normalisation)
    rho_all = importance_ratios(data, target_policy)
    offsets = np.asarray(data.episode_offsets, dtype=np.int64)
    obs_all = np.asarray(data.observations)
    terminated = np.asarray(data.terminated, dtype=bool)
    rewards = np.asarray(data.rewards, dtype=np.float64)
    for e0, e1 in _episode_chunks(offsets, rows):
        t0, t1 = int(offsets[e0]), int(offsets[e1])
        obs = obs_all[t0 + e0 : t1 + e1]  # this chunk's observation rows (final ones included)
        lens = lengths[e0:e1]
        episode = np.repeat(np.arange(e1 - e0), lens)
        local_rows = np.arange(t1 - t0) + episode  # observation row of each transition
        phi_obs = np.asarray(features(obs), dtype=np.float64)
        if phi_obs.ndim != 2 or phi_obs.shape[0] != obs.shape[0]:
            raise ValueError(
                f"features returned shape {phi_obs.shape}; expected ({obs.shape[0]}, n)"
            )
        psi_obs = phi_obs if value_features is None else np.asarray(value_features(obs), float)
        psi_next = psi_obs[local_rows + 1]
        psi_next[terminated[t0:t1]] = 0.0  # φ(terminal) = 0; truncated: bootstrap
        weight = (1.0 / lens if normalisation == "length" else np.ones(e1 - e0))[episode]
        yield _Chunk(
            e0=e0,
            e1=e1,
            episode=episode,
            starts=offsets[e0:e1] - t0,
            phi=phi_obs[local_rows],
            dpsi=psi_obs[local_rows] - gamma * psi_next,
            rho=rho_all[t0:t1],
            weight=weight,
            reward=rewards[t0:t1],
        )


def trajectory_stats(
    data: TrajectoryDataset,
    features: FeatureFn,
    gamma: float,
    *,
    target_policy: Any | None = None,
    normalisation: Normalisation = "length",
) -> TrajectoryStats:
    """Â_i, b̂_i, Ĉ_i of (2.2) for every trajectory, batched (chunks of episodes; padded
    batched matrix products within a chunk)."""
    lengths = _check(data, gamma, normalisation)
    m = data.n_episodes
    A = C = b = None
    for ch in _chunks(data, features, gamma, target_policy, normalisation, None, rows=_CHUNK_ROWS):
        if A is None:
            n = ch.phi.shape[1]
            A, C, b = np.zeros((m, n, n)), np.zeros((m, n, n)), np.zeros((m, n))
        x = ch.phi * (ch.rho * ch.weight)[:, None]  # ρ_t φ_t / τ_i
        xc = ch.phi * ch.weight[:, None]  # φ_t / τ_i
        sl = slice(ch.e0, ch.e1)
        lens = lengths[sl]
        A[sl] = _segment_outer(x, ch.dpsi, ch.starts, lens)
        C[sl] = _segment_outer(xc, ch.phi, ch.starts, lens)
        b[sl] = np.add.reduceat(x * ch.reward[:, None], ch.starts, axis=0)
    assert A is not None and b is not None and C is not None
    return TrajectoryStats(A, b, C, lengths, float(gamma), normalisation)


def _segment_outer(
    x: np.ndarray, y: np.ndarray, starts: np.ndarray, lens: np.ndarray
) -> np.ndarray:
    """Per-episode Σ_t x_t y_tᵀ [e, n_x, n_y] for consecutive episodes (rows `starts`,
    lengths `lens`): episodes sorted by length in groups of `_GROUP`, zero-padded to the
    group's longest, one batched matrix product per group (BLAS, little padding waste)."""
    T = x.shape[0]
    xe = np.vstack([x, np.zeros((1, x.shape[1]))])  # row T is the zero padding row
    ye = np.vstack([y, np.zeros((1, y.shape[1]))])
    out = np.empty((lens.size, x.shape[1], y.shape[1]))
    order = np.argsort(lens, kind="stable")
    for g in range(0, lens.size, _GROUP):
        idx = order[g : g + _GROUP]
        steps = np.arange(int(lens[idx].max()))
        rows = np.where(steps[None, :] < lens[idx, None], starts[idx, None] + steps[None, :], T)
        out[idx] = np.matmul(xe[rows].transpose(0, 2, 1), ye[rows])
    return out


def _episode_chunks(offsets: np.ndarray, rows: int) -> list[tuple[int, int]]:
    """[e0, e1) episode ranges with about `rows` transitions each (at least one episode)."""
    m = offsets.shape[0] - 1
    out: list[tuple[int, int]] = []
    e0 = 0
    while e0 < m:
        e1 = int(np.searchsorted(offsets, offsets[e0] + rows, side="right")) - 1
        e1 = min(max(e1, e0 + 1), m)
        out.append((e0, e1))
        e0 = e1
    return out


def mean_system(
    data: TrajectoryDataset,
    features: FeatureFn,
    gamma: float,
    *,
    target_policy: Any | None = None,
    normalisation: Normalisation = "length",
    value_features: FeatureFn | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A, b, C) = mean over trajectories of (Â_i, b̂_i, Ĉ_i), by weighted matrix products.

    With `value_features` ψ, A is the cross matrix mean_i (1/τ_i) Σ ρ_t φ_t (ψ_t − γψ_{t+1})ᵀ
    [n_φ, n_ψ], so that b − Aϑ is the expected TD update of the value function ϑᵀψ projected
    on the φ features (MSPBE of a value function outside span(φ)).
    """
    m = data.n_episodes
    A = b = C = None
    for ch in _chunks(
        data, features, gamma, target_policy, normalisation, value_features, rows=_MEAN_CHUNK_ROWS
    ):
        x = ch.phi * (ch.rho * ch.weight / m)[:, None]
        parts = (x.T @ ch.dpsi, x.T @ ch.reward, (ch.phi * (ch.weight / m)[:, None]).T @ ch.phi)
        if A is None:
            A, b, C = parts
        else:
            A, b, C = A + parts[0], b + parts[1], C + parts[2]
    assert A is not None and b is not None and C is not None
    return A, b, C
