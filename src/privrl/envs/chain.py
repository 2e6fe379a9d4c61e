"""The 40-state chain of Xie, Thomas & Miklau (2019, §7) and Balle et al. (2016).

States 0..S-1 with S = 40; state S-1 is absorbing (the episode terminates on entering it).
An episode starts uniformly in one of the S-1 non-absorbing states; in every state the agent
stays with probability ``p_stay`` = 0.5 and advances one state to the right otherwise. The
reward is 1 on the transition that enters the absorbing state and 0 otherwise; γ = 0.99. There
is a single action (the evaluated policy is the only policy: on-policy evaluation, ρ_t = 1).

Everything about the chain is known exactly, so this module gives the exact model (P, r, start
distribution), the exact value function, the exact linear system (A, b, C) of GTD2's saddle
point (2.1) for linear features, vectorised sampling of m trajectories into a
`TrajectoryDataset`, and a Gymnasium env ``privrl/Chain-v0``.

Features. ``ChainOneHot`` is the tabular representation: a one-hot vector over the S-1
non-absorbing states (dimension 39), and φ = 0 in the absorbing state. The absorbing state is
terminal, so it never appears as φ_t and the convention φ(terminal) = 0 applies to it anyway; a
40-th one-hot coordinate would only add a zero row and column to A and C (singular matrices)
without changing any value estimate.

**The state weighting behind A, b, C (derivation).** The paper's statistics (2.2) average over
the transitions of a trajectory: Â_i = (1/τ_i) Σ_t ρ_t φ_t (φ_t − γφ_{t+1})ᵀ, and A = E[Â_i]
over trajectories (2.1). So A, b, C are sums over transitions (s, s') weighted by the
*per-trajectory-averaged transition occupancy*

    D(s, s') = E[(1/τ) Σ_t 1{s_t = s, s_{t+1} = s'}],     d(s) = Σ_{s'} D(s, s'),

giving A = Φᵀ(diag(d) − γD)Φ, b = Φᵀ (D ⊙ R) 1, C = Φᵀ diag(d) Φ. This is *not*
d(s)·P(s, s'): the length τ depends on the future of the trajectory, so under the 1/τ weight
the next state is not distributed as P(s, ·). On the chain, an episode started in s₀ visits
each of the L = S-1-s₀ states j ≥ s₀ a Geometric(1-p_stay) number of times G_j (i.i.d.),
τ = Σ_j G_j, and each visited state is left to the right exactly once. Hence, given s₀,

    d(j) = E[G_j/τ] = 1/L   (exchangeability of the G_j),
    D(j, j+1) = E[1/τ],     D(j, j) = 1/L − E[1/τ],

where τ is a sum of L geometrics, i.e. L + NegativeBinomial(L, 1-p_stay); E[1/τ] is summed
from the negative binomial pmf (tail below 1e-18). Averaging over the uniform start gives D.
Because E[1/τ] > 1/(L·E[G]) (Jensen), the 1/τ weighting under-weights self-transitions, so
θ* = A⁻¹b is the value function of a *distorted* chain with P̃(s, s') = D(s, s')/d(s), not the
true V. ``linear_system(normalisation="sum")`` gives the system of un-normalised per-trajectory
sums (D(s, s') = E[#visits to s]·P(s, s')), whose solution is exactly the true V; the paper's
per-trajectory average ("length", the default everywhere) is what GPOPE's iterates converge to.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from scipy import stats

from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.envs.tabular import start_state

__all__ = [
    "ENV_ID",
    "ChainDomain",
    "ChainEnv",
    "ChainMDP",
    "ChainOneHot",
    "SingleActionPolicy",
    "register_env",
]

ENV_ID = "privrl/Chain-v0"

Normalisation = Literal["length", "sum"]


class ChainOneHot:
    """One-hot features over the non-absorbing states of a chain; φ(absorbing) = 0."""

    def __init__(self, n_states: int = 40) -> None:
        if n_states < 2:
            raise ValueError(f"a chain needs at least 2 states, got {n_states}")
        self.n_states = int(n_states)
        self.dim = self.n_states - 1
        self.spec = "onehot"

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        s = np.asarray(obs).reshape(-1).astype(np.int64)
        if s.size and (s.min() < 0 or s.max() >= self.n_states):
            raise ValueError(
                f"chain states must be in [0, {self.n_states}), got {s.min()}..{s.max()}"
            )
        out = np.zeros((s.shape[0], self.n_states), dtype=np.float64)
        out[np.arange(s.shape[0]), s] = 1.0
        return out[:, : self.dim]

    def __repr__(self) -> str:
        return f"ChainOneHot(n_states={self.n_states})"


class SingleActionPolicy:
    """The chain's only policy: always action 0 (probability 1)."""

    n_actions = 1

    def act(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return np.zeros(len(obs), dtype=np.int64)

    def action_probs(self, obs: np.ndarray) -> np.ndarray:
        return np.ones((len(obs), 1), dtype=np.float64)


def _mean_inverse_length(L: int, q: float, tail: float = 1e-18) -> float:
    """E[1/τ] for τ = sum of L i.i.d. Geometric(q) variables on {1, 2, ...}."""
    nb = stats.nbinom(L, q)  # failures before the L-th success
    k_max = int(nb.isf(tail)) + 2
    k = np.arange(k_max + 1)
    return float(np.sum(nb.pmf(k) / (L + k)))


@dataclass(frozen=True)
class ChainMDP:
    """The chain's exact model. State ``n_states - 1`` is absorbing."""

    n_states: int = 40
    p_stay: float = 0.5
    gamma: float = 0.99

    def __post_init__(self) -> None:
        if self.n_states < 2:
            raise ValueError(f"n_states must be >= 2, got {self.n_states}")
        if not 0.0 <= self.p_stay < 1.0:
            raise ValueError(f"p_stay must be in [0, 1), got {self.p_stay}")
        if not 0.0 <= self.gamma < 1.0:
            raise ValueError(f"gamma must be in [0, 1), got {self.gamma}")

    # ---------------------------------------------------------------- model
    @property
    def absorbing(self) -> int:
        return self.n_states - 1

    @property
    def n_actions(self) -> int:
        return 1

    @cached_property
    def transition_matrix(self) -> np.ndarray:
        """P[s, s'] (the absorbing state loops on itself)."""
        S = self.n_states
        P = np.zeros((S, S))
        idx = np.arange(S - 1)
        P[idx, idx] = self.p_stay
        P[idx, idx + 1] = 1.0 - self.p_stay
        P[S - 1, S - 1] = 1.0
        return P

    @cached_property
    def reward_matrix(self) -> np.ndarray:
        """R[s, s']: 1 on entering the absorbing state from outside it, else 0."""
        S = self.n_states
        R = np.zeros((S, S))
        R[S - 2, S - 1] = 1.0
        return R

    @property
    def expected_reward(self) -> np.ndarray:
        """r(s) = Σ_{s'} P(s, s') R(s, s')."""
        return (self.transition_matrix * self.reward_matrix).sum(axis=1)

    @property
    def start_distribution(self) -> np.ndarray:
        """Uniform over the non-absorbing states."""
        d0 = np.full(self.n_states, 1.0 / (self.n_states - 1))
        d0[-1] = 0.0
        return d0

    @property
    def r_max(self) -> float:
        return 1.0

    def true_values(self) -> np.ndarray:
        """V(s) = E[Σ γ^t R_t | s₀ = s]; V(absorbing) = 0."""
        S = self.n_states
        P = self.transition_matrix[: S - 1, : S - 1]
        v = np.linalg.solve(np.eye(S - 1) - self.gamma * P, self.expected_reward[: S - 1])
        return np.append(v, 0.0)

    def features(self) -> ChainOneHot:
        return ChainOneHot(self.n_states)

    # ---------------------------------------------------------------- occupancies
    def transition_occupancy(self, normalisation: Normalisation = "length") -> np.ndarray:
        """D[s, s'] = E[w(τ) Σ_t 1{s_t = s, s_{t+1} = s'}], w = 1/τ ("length") or 1 ("sum").

        Exact (see the module docstring for the derivation).
        """
        S, p = self.n_states, self.p_stay
        q = 1.0 - p
        D = np.zeros((S, S))
        starts = np.arange(S - 1)
        if normalisation == "length":
            for s0 in starts:  # S-1 = 39 closed-form terms, not a data loop
                L = S - 1 - s0
                inv = _mean_inverse_length(L, q)
                j = np.arange(s0, S - 1)
                D[j, j] += 1.0 / L - inv
                D[j, j + 1] += inv
        elif normalisation == "sum":
            visited = (starts + 1) / (S - 1)  # P(state j is visited) = (j + 1)/(S - 1)
            D[starts, starts] = visited * p / q  # E[G_j - 1] = p/q
            D[starts, starts + 1] = visited  # left exactly once
            return D
        else:
            raise ValueError(f"normalisation must be 'length' or 'sum', got {normalisation!r}")
        return D / (S - 1)

    def state_occupancy(self, normalisation: Normalisation = "length") -> np.ndarray:
        """d(s) = Σ_{s'} D(s, s')."""
        return self.transition_occupancy(normalisation).sum(axis=1)

    def linear_system(
        self, features: Any = None, normalisation: Normalisation = "length"
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Exact (A, b, C) of (2.1) for `features` (default: `ChainOneHot`), on-policy.

        A = Φᵀ(diag(d) − γD)Φ, b = Φᵀ(D ⊙ R)1, C = Φᵀ diag(d)Φ, with φ(absorbing) = 0.
        """
        feats = self.features() if features is None else features
        Phi = np.asarray(feats(np.arange(self.n_states)), dtype=np.float64).copy()
        Phi[self.absorbing] = 0.0  # φ(terminal) = 0
        D = self.transition_occupancy(normalisation)
        d = D.sum(axis=1)
        A = Phi.T @ (np.diag(d) - self.gamma * D) @ Phi
        b = Phi.T @ (D * self.reward_matrix).sum(axis=1)
        C = Phi.T @ (d[:, None] * Phi)
        return A, b, C

    # ---------------------------------------------------------------- sampling
    def sample(
        self, m: int, *, seed: int | np.random.Generator | np.random.SeedSequence | None = None
    ) -> TrajectoryDataset:
        """m independent episodes (vectorised): start uniform, geometric stays, terminate.

        Actions are all 0 and ``behaviour_probs`` are 1 (the single action).
        """
        if m < 1:
            raise ValueError(f"m must be >= 1, got {m}")
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        S = self.n_states
        s0 = rng.integers(0, S - 1, size=m)
        n_visit = S - s0  # states s0..S-1 (the absorbing one included, once)
        ep_of_visit = np.repeat(np.arange(m), n_visit)
        first = np.concatenate(([0], np.cumsum(n_visit)[:-1]))
        state = s0[ep_of_visit] + (np.arange(ep_of_visit.size) - first[ep_of_visit])
        stays = rng.geometric(1.0 - self.p_stay, size=state.size)  # visits per state ≥ 1
        stays[state == S - 1] = 1  # the final observation
        obs = np.repeat(state, stays)
        lengths = np.bincount(ep_of_visit, weights=stays, minlength=m).astype(np.int64) - 1
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        # Observation rows of episode i: offsets[i] + i ... offsets[i+1] + i (inclusive).
        ep_of_trans = np.repeat(np.arange(m), lengths)
        obs_row = np.arange(offsets[-1]) + ep_of_trans
        next_obs = obs[obs_row + 1]
        n_trans = int(offsets[-1])
        terminated = np.zeros(n_trans, dtype=bool)
        terminated[offsets[1:] - 1] = True
        meta = DatasetMetadata(
            observation_space=gym.spaces.Discrete(S),
            action_space=gym.spaces.Discrete(1),
            env_id=ENV_ID,
            discount=self.gamma,
            extra={
                "n_states": S,
                "p_stay": self.p_stay,
                "source": "privrl.envs.chain",
                "reward_range": [0.0, 1.0],  # reward 1 on reaching the goal, else 0
            },
        )
        return TrajectoryDataset(
            observations=obs.astype(np.int64),
            actions=np.zeros(n_trans, dtype=np.int64),
            rewards=(next_obs == S - 1).astype(np.float64),
            terminated=terminated,
            truncated=np.zeros(n_trans, dtype=bool),
            episode_offsets=offsets,
            behaviour_probs=np.ones(n_trans, dtype=np.float64),
            metadata=meta,
        )


class ChainDomain:
    """The chain as an off-policy-evaluation domain (same attributes as
    `privrl.ope.domains.OpeDomain`): on-policy, one action, exact model available."""

    name = "chain"

    def __init__(self, mdp: ChainMDP | None = None) -> None:
        self.mdp = mdp or ChainMDP()
        self.gamma = self.mdp.gamma
        self.features = self.mdp.features()
        self.target_policy = SingleActionPolicy()
        self.behaviour_policy = self.target_policy
        self.n_actions = 1
        self.horizon: int | None = None  # episodes end in the absorbing state
        self.observation_space = gym.spaces.Discrete(self.mdp.n_states)
        self.r_max = self.mdp.r_max

    def sample(
        self,
        policy: Any,
        m: int,
        *,
        seed: int | np.random.Generator | np.random.SeedSequence | None = None,
    ) -> TrajectoryDataset:
        """m episodes; `policy` must be the chain's single-action policy."""
        if not isinstance(policy, SingleActionPolicy):
            raise ValueError("the chain has a single action: sample with its only policy")
        return self.mdp.sample(m, seed=seed)

    def linear_system(
        self, features: Any = None, normalisation: Normalisation = "length"
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Exact (A, b, C) (see `ChainMDP.linear_system`)."""
        return self.mdp.linear_system(features, normalisation)


class ChainEnv(gym.Env):
    """Gymnasium view of `ChainMDP`: observation = state index, one action, terminates on
    entering the absorbing state."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium convention)

    def __init__(
        self,
        n_states: int = 40,
        p_stay: float = 0.5,
        gamma: float = 0.99,
        render_mode: str | None = None,
    ) -> None:
        if render_mode is not None:
            raise ValueError("ChainEnv does not render")
        self.mdp = ChainMDP(n_states=n_states, p_stay=p_stay, gamma=gamma)
        self.observation_space = gym.spaces.Discrete(n_states)
        self.action_space = gym.spaces.Discrete(1)
        self.render_mode = None
        self._s: int | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        super().reset(seed=seed)
        s = start_state(options, self.mdp.absorbing, "is not a non-absorbing state")
        self._s = int(self.np_random.integers(0, self.mdp.absorbing)) if s is None else s
        return self._s, {}

    def step(self, action: Any) -> tuple[int, float, bool, bool, dict[str, Any]]:
        if self._s is None:
            raise RuntimeError("call reset() before step()")
        if self._s == self.mdp.absorbing:
            raise RuntimeError("the episode has terminated; call reset()")
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        if self.np_random.random() >= self.mdp.p_stay:
            self._s += 1
        terminated = self._s == self.mdp.absorbing
        return self._s, float(terminated), terminated, False, {}


def register_env() -> None:
    """Register ``privrl/Chain-v0`` with Gymnasium (idempotent)."""
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point=f"{__name__}:ChainEnv")


register_env()
