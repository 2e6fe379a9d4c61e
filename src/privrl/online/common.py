"""Shared pieces of the online systems: environments, counts of a batch of episodes, the
deduplicated policy set, exact regret, and the result object.

Regret (paper eq. 1) is measured exactly on the true MDP: episode k with start state s_1^k and
deterministic policy π^k costs V*_1(s_1^k) − V^{π^k}_1(s_1^k), both from backward induction
(a mixture is sampled once per episode, so π^k is always deterministic).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from privrl.arrays import FloatArray, IntArray
from privrl.config import Config, check, option
from privrl.envs.riverswim import riverswim
from privrl.envs.tabular import TabularMDP, counts
from privrl.privacy.report import PrivacyReport

__all__ = [
    "ENVS",
    "Counts",
    "OnlineLearnerConfig",
    "OnlineResult",
    "Progress",
    "check_at_least",
    "check_beta",
    "check_choice",
    "check_episodes",
    "checkpoints",
    "make_env",
    "policy_set",
    "policy_start_gaps",
    "reachable_states",
    "rollout_counts",
    "sample_counts",
]

Progress = Callable[[int], None]  # called with the number of episodes just completed

ENVS = ("riverswim", "random-tabular")


# --------------------------------------------------------------------------------------------
# config checks (shared by the learners' configs; errors name the field)
# --------------------------------------------------------------------------------------------


def check_at_least(config: Config, key: str, low: float) -> None:
    """The field `key` of `config` is a finite number >= `low`."""
    value = getattr(config, key)
    ok = isinstance(value, (int, float)) and math.isfinite(value) and value >= low
    check(ok, key, f"must be a finite number >= {low:g}, got {value!r}")


def check_beta(value: float) -> None:
    """β, the utility failure probability (not a privacy parameter), is in (0, 1)."""
    ok = isinstance(value, (int, float)) and math.isfinite(value) and 0 < value < 1
    check(ok, "beta", f"must be a finite number in (0, 1), got {value!r}")


def check_choice(config: Config, key: str, choices: tuple[str, ...]) -> None:
    """The field `key` of `config` is one of `choices` (the text a config file gets too)."""
    value = getattr(config, key)
    check(value in choices, key, f"must be one of {', '.join(choices)}, not {value!r}")


def check_episodes(value: int) -> None:
    """K, the number of episodes (users), is an integer >= 1."""
    check(int(value) >= 1, "episodes", f"must be >= 1, got {value}")


def make_env(
    name: str,
    *,
    states: int | None = None,
    actions: int | None = None,
    horizon: int | None = None,
    seed: int = 0,
) -> TabularMDP:
    """An online environment with Bernoulli rewards (binary, as the shuffle summation needs).

    ``riverswim``: S = 4, H = 5 by default (A = 2). ``random-tabular``: Dirichlet(1)
    transitions, U[0, 1] reward means, uniform start; S = 3, A = 2, H = 4 by default (small, so
    that the full policy set A^{HS} of SDP-PE stays enumerable); ``seed`` picks the instance.
    """
    for value, what in ((states, "states"), (actions, "actions"), (horizon, "horizon")):
        if value is not None and (isinstance(value, bool) or int(value) != value or value < 1):
            raise ValueError(f"{what} must be an integer >= 1, got {value!r}")
    if name == "riverswim":
        if actions not in (None, 2):
            raise ValueError("riverswim has exactly 2 actions")
        return riverswim(4 if states is None else states, 5 if horizon is None else horizon)
    if name == "random-tabular":
        return TabularMDP.random(
            3 if states is None else states,
            2 if actions is None else actions,
            4 if horizon is None else horizon,
            seed=seed,
            reward_kind="bernoulli",
        )
    raise ValueError(f"unknown environment {name!r}; expected one of: {', '.join(ENVS)}")


@dataclass(frozen=True, kw_only=True)
class OnlineLearnerConfig(Config):
    """What every online learner's config has: K = `episodes`, the number of users (one
    episode each), and β = `beta`, the utility failure probability in ι and in a privatizer's
    error bound E (not a privacy parameter). Keyword-only, so that a learner's own constants
    come first (`UCBVIConfig(0.5)` is C = 0.5)."""

    # The constants a run's config.json lists as "config" (`constants`).
    CONSTANTS: ClassVar[tuple[str, ...]] = ()

    episodes: int = option(
        100_000, "--episodes", "-K", help="Number of episodes (users) K (must fit in memory)."
    )
    beta: float = option(
        0.1, help="Utility failure probability β in ι and E (not a privacy parameter)."
    )

    def validate(self) -> None:
        check_episodes(self.episodes)
        check_beta(self.beta)
        super().validate()

    def constants(self) -> dict[str, Any]:
        """The algorithm's constants (`CONSTANTS`), as a run's config.json lists them."""
        return {key: getattr(self, key) for key in self.CONSTANTS}


@dataclass(frozen=True)
class Counts:
    """Statistics of a set of episodes: visits n_h(s,a) [..., H, S, A], transitions
    n_h(s,a,s') [..., H, S, A, S] and reward sums Σ r_h(s,a) [..., H, S, A] (binary rewards).
    Leading axes, if any, index independent runs."""

    n_sa: FloatArray
    n_sas: FloatArray
    r_sum: FloatArray

    def __add__(self, other: Counts) -> Counts:
        return Counts(self.n_sa + other.n_sa, self.n_sas + other.n_sas, self.r_sum + other.r_sum)

    @classmethod
    def zeros(cls, H: int, S: int, A: int, lead: tuple[int, ...] = ()) -> Counts:
        return cls(
            np.zeros((*lead, H, S, A)), np.zeros((*lead, H, S, A, S)), np.zeros((*lead, H, S, A))
        )

    def layer(self, h: int) -> Counts:
        """Only step h (other steps zero): what a crude-exploration batch releases."""
        out = Counts(np.zeros_like(self.n_sa), np.zeros_like(self.n_sas), np.zeros_like(self.r_sum))
        out.n_sa[..., h, :, :] = self.n_sa[..., h, :, :]
        out.n_sas[..., h, :, :, :] = self.n_sas[..., h, :, :, :]
        out.r_sum[..., h, :, :] = self.r_sum[..., h, :, :]
        return out


@dataclass
class OnlineResult:
    """One online run: per-episode exact regret, the privacy report, a log of the run and the
    learned policy (SDP-PE / PE: the policies still active, [N, H, S]; UCB-VI: the greedy policy
    of the last episode, [H, S])."""

    algorithm: str
    regret: FloatArray  # [K] per-episode regret V*_1(s_1^k) − V^{π^k}_1(s_1^k)
    report: PrivacyReport
    log: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    policy: IntArray | None = None  # what was learned: the final policy (or policy set)

    @property
    def episodes(self) -> int:
        return int(self.regret.shape[0])

    @property
    def cumulative_regret(self) -> FloatArray:
        return np.cumsum(self.regret)

    @property
    def total_regret(self) -> float:
        return float(math.fsum(self.regret))


def checkpoints(episodes: int, points: int = 1000) -> IntArray:
    """Episode counts k (1-based, increasing, the last = ``episodes``) at which a regret curve
    is recorded: ``points`` evenly spaced values."""
    grid = np.unique(np.linspace(1, episodes, min(points, episodes)).round().astype(np.int64))
    return grid


# --------------------------------------------------------------------------------------------
# rollouts
# --------------------------------------------------------------------------------------------

_ROLLOUT_CHUNK = 1 << 16  # episodes per vectorised block (bounded memory)


def rollout_counts(
    mdp: TabularMDP,
    policies: IntArray,
    index: IntArray,
    rng: np.random.Generator,
) -> tuple[Counts, IntArray]:
    """Run episode i with the deterministic policy ``policies[index[i]]`` for every i, all
    episodes of a block at once (`TabularMDP.sample_arrays` with per-episode policies).

    Returns the batch's counts and the start state of every episode (for the regret).
    """
    H, S, A = mdp.H, mdp.S, mdp.A
    total = Counts.zeros(H, S, A)
    starts = np.empty(index.shape[0], dtype=np.int64)
    for c0 in range(0, index.shape[0], _ROLLOUT_CHUNK):
        idx = index[c0 : c0 + _ROLLOUT_CHUNK]
        ep = mdp.sample_arrays(policies[idx], idx.shape[0], rng=rng, record_probs=False)
        n_sa, n_sas = counts(ep.states, ep.actions, S=S, A=A)
        h = np.broadcast_to(np.arange(H), ep.actions.shape)
        flat = ((h * S + ep.states[:, :-1]) * A + ep.actions).ravel()
        r_sum = np.bincount(flat, weights=ep.rewards.ravel(), minlength=H * S * A)
        total = total + Counts(
            n_sa.astype(np.float64), n_sas.astype(np.float64), r_sum.reshape(H, S, A)
        )
        starts[c0 : c0 + idx.shape[0]] = ep.states[:, 0]
    return total, starts


def sample_counts(
    mdp: TabularMDP,
    policies: IntArray,
    index: IntArray,
    rng: np.random.Generator,
) -> tuple[Counts, IntArray]:
    """`rollout_counts`' result drawn from its exact law without simulating the episodes one by
    one: the start states are drawn per episode (d1), then, for every distinct (policy, start)
    group, layer by layer, the number of its episodes in each state moves on as
    Multinomial(n_h(s), P_h(·|s, π_h(s))) and earns Binomial(n_h(s), R_h(s, π_h(s))) rewards
    (Bernoulli rewards; the mean times the count for deterministic ones).

    Episodes are independent given their policies, and a batch's counts are sums over its
    episodes, so the counts of the episodes of one group given its starts are these sequential
    multinomial draws (a Markov chain's occupancy counts): equal in law to the batch simulation
    (tests/online/test_rollout_law.py checks it against the stepping loop). The cost is
    O(episodes) for the starts plus O(groups·H·S²), instead of O(episodes·H) array work.
    """
    H, S, A = mdp.H, mdp.S, mdp.A
    index = np.asarray(index, dtype=np.int64)
    n = int(index.shape[0])
    d1_cdf = np.cumsum(mdp.d1)
    d1_cdf[-1] = 1.0
    starts = (
        np.zeros(n, dtype=np.int64)
        if mdp.d1[0] == 1.0
        else np.searchsorted(d1_cdf, rng.random(n), side="right").astype(np.int64)
    )
    total = Counts.zeros(H, S, A)
    if n == 0:
        return total, starts
    table = np.bincount(index * S + starts, minlength=policies.shape[0] * S)
    table = table.reshape(policies.shape[0], S)
    uniq = np.flatnonzero(table.any(axis=1))  # the policies this batch runs
    U = uniq.size
    cur = table[uniq].astype(np.int64)  # [U, S] episodes of each policy in each start state
    pol = policies[uniq]  # [U, H, S]
    R = np.asarray(mdp.R)
    bern = mdp.reward_kind == "bernoulli"
    s_idx = np.broadcast_to(np.arange(S), (U, S))
    for h in range(H):
        a = pol[:, h, :]  # [U, S]
        p = mdp.P[h][s_idx, a]  # [U, S, S']
        nxt = rng.multinomial(cur, p)  # [U, S, S']
        mean = R[h][s_idx, a]  # [U, S]
        rew = rng.binomial(cur, mean) if bern else cur * mean
        flat = (s_idx * A + a).ravel()
        total.n_sa[h] += np.bincount(flat, weights=cur.ravel(), minlength=S * A).reshape(S, A)
        total.r_sum[h] += np.bincount(flat, weights=np.ravel(rew), minlength=S * A).reshape(S, A)
        for s2 in range(S):
            total.n_sas[h, :, :, s2] += np.bincount(
                flat, weights=nxt[..., s2].ravel(), minlength=S * A
            ).reshape(S, A)
        cur = nxt.sum(axis=1)
    return total, starts


# --------------------------------------------------------------------------------------------
# policy set
# --------------------------------------------------------------------------------------------


def reachable_states(mdp: TabularMDP) -> npt.NDArray[np.bool_]:
    """[H, S] mask of (h, s) reachable from the support of d1 under some policy (the support of
    P is public structure: e.g. RiverSwim moves at most one state per step)."""
    H, S = mdp.H, mdp.S
    reach = np.zeros((H, S), dtype=bool)
    reach[0] = mdp.d1 > 0
    for h in range(H - 1):
        nxt = (mdp.P[h][reach[h]] > 0).any(axis=(0, 1))  # any action from any reachable state
        reach[h + 1] = nxt
    return reach


def policy_set(mdp: TabularMDP, *, max_policies: int = 1 << 18) -> IntArray:
    """φ¹: all deterministic policies ``[N, H, S]``, deduplicated on unreachable (h, s) (action
    0 there): N = A^{#reachable (h,s)} (RiverSwim S = 4, H = 5: 2^14)."""
    reach = reachable_states(mdp)
    cells = np.flatnonzero(reach.ravel())
    A = mdp.A
    n = A ** int(cells.size)
    if n > max_policies:
        raise ValueError(
            f"the policy set has A^(reachable h,s) = {A}^{cells.size} = {n} policies, more than "
            f"max_policies = {max_policies}; use a smaller environment (S, A, H)"
        )
    idx = np.arange(n, dtype=np.int64)
    digits = (idx[:, None] // A ** np.arange(cells.size, dtype=np.int64)) % A
    out = np.zeros((n, mdp.H * mdp.S), dtype=np.int64)
    out[:, cells] = digits
    return out.reshape(n, mdp.H, mdp.S)


def policy_start_gaps(mdp: TabularMDP, policies: IntArray) -> FloatArray:
    """[N, S]: V*_1(s) − V^π_1(s) for every policy and start state (exact)."""
    _, V_star, _ = mdp.backward_induction()
    V = mdp.evaluate(policies, return_q=False).V[..., 0, :]
    return np.maximum(V_star[0] - V, 0.0)
