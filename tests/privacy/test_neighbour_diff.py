"""Neighbour-diff test: every private command publishes, outside its declared noisy releases,
exactly the same thing for two neighbouring datasets.

Property checked (DESIGN.md, "Public parameters"): for D and a neighbour D′ under the command's
own relation, run with the same seed and flags, config.json, privacy.json, metrics.json minus the
keys the command declares as releases (or as evaluations outside the guarantee), the console
(stdout/stderr) minus the lines that print such a release, the columns and length of
metrics.csv, and the file names of the run directory are identical after removing timestamps,
versions and the two directories' paths. A field that differs is an unprotected function of
the private data. Both runs refusing with the same error message is no difference (a refusal
that depends on public inputs only leaks nothing).

The allow-lists below are per command, minimal and commented: a new metrics.json key or console
line that depends on the data makes the test fail until it is justified here.

Neighbours are extreme on purpose: the longest trajectory, the highest reward, a state no other
trajectory visits, the expert with the longest trajectory, a bandit row with a reward far outside
the declared range and the smallest propensity. Relations: replace-one trajectory (tabular and
linear MDPs, OPE, bandit OPE), add/remove one trajectory (PRIMORL), add/remove one expert with
all their trajectories and their policy (expert-level systems), replace one user's episode with
the same seed (online).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

from privrl.data.dataset import DatasetMetadata
from tests.neighbours import (
    Outcome,
    Pair,
    PublishedDifference,
    assert_same_publication,
    dataset,
    episode,
    extreme_tabular_episode,
    import_table_pair,
    published_differences,
    random_tabular_episodes,
    run_side,
    tabular_metadata,
)

torch.set_num_threads(1)


@dataclass(frozen=True)
class Case:
    """One private command on one pair of neighbours."""

    id: str
    build: Callable[[Pair], None]
    argv: tuple[str, ...]
    released_metrics: frozenset[str] = frozenset()
    released_lines: tuple[str, ...] = ()
    must_run: bool = True  # False: refusing on both (same message) is the fixed behaviour
    # online: D′ is D with one user's episode replaced (a context manager that counts its calls)
    neighbour_patch: Callable[[dict[str, int]], Any] | None = None
    marks: tuple[Any, ...] = field(default=())


# ---------------------------------------------------------------------------------------------
# tabular MDP (DP-APVI): replace-one trajectory, equal-length episodes of declared H
# ---------------------------------------------------------------------------------------------

H_TAB, S_TAB, A_TAB = 4, 5, 3
RARE = S_TAB - 1  # no trajectory of D visits it


def _tabular(
    pair: Pair,
    *,
    long_neighbour: bool = False,
    unit_ids: bool = False,
    imported: bool = False,
) -> None:
    """D: 30 trajectories of H steps that never visit RARE. D′: the first one replaced by a
    trajectory that sits in RARE with reward 1 at every step (``long_neighbour``: H + 2 steps,
    longer than the declared H). ``unit_ids``: one user per trajectory in D, while D′'s new
    trajectory belongs to the user of the second one. ``imported``: both go through
    ``privrl data import`` without declared spaces."""
    eps = random_tabular_episodes(30, H_TAB, S_TAB, A_TAB, seed=1, avoid_state=RARE)
    T = H_TAB + 2 if long_neighbour else H_TAB
    neighbour = [extreme_tabular_episode(T, RARE, A_TAB - 1), *eps[1:]]
    if unit_ids:
        for i, ep in enumerate(eps):
            ep["unit_id"] = i
        neighbour = [{**neighbour[0], "unit_id": 1}, *eps[1:]]
    reward = np.random.default_rng(2).uniform(0, 1, size=(H_TAB, S_TAB, A_TAB))
    np.save(pair.root / "reward.npy", reward)  # public reward table, one file for both runs
    if imported:
        import_table_pair(pair, eps, neighbour)
        return
    meta = tabular_metadata(S_TAB, A_TAB, horizon=H_TAB)
    pair.save(dataset(eps, meta), dataset(neighbour, meta))


DP_APVI_RELEASED = frozenset(
    {
        # post-processing of the noisy counts (the policy's pessimistic values)
        "known_fraction",
        "all_values_zero",
        "pessimistic_value_mean_V1",
        # wall-clock times: differ between any two runs; a timing channel outside the guarantee
        "timings_seconds",
    }
)
DP_APVI_LINES = (
    r"^known \(h,s,a\)",  # coverage of the noisy counts
    r"^mean Ṽ_1",  # pessimistic value (post-processing)
    r"^warning: every pessimistic value is 0",  # printed from the noisy values
)
DP_APVI = ("train", "dp-apvi", "--data", "{data}", "--horizon", str(H_TAB), "--out", "{out}")

# ---------------------------------------------------------------------------------------------
# linear MDP (DP-VAPVI): replace-one trajectory, episodes may end early
# ---------------------------------------------------------------------------------------------

H_LIN, S_LIN, A_LIN = 3, 4, 2


def _linear(
    pair: Pair, *, horizon_meta: int | None, neighbour_len: int, unit_ids: bool = False
) -> None:
    """D: 30 trajectories of 2..H steps that never visit the last state. D′: the first one
    replaced by the longest trajectory (``neighbour_len`` steps) in that state, reward 1."""
    lengths = np.random.default_rng(3).integers(2, H_LIN + 1, size=30)
    eps = random_tabular_episodes(30, lengths, S_LIN, A_LIN, seed=4, avoid_state=S_LIN - 1)
    neighbour = [extreme_tabular_episode(neighbour_len, S_LIN - 1, A_LIN - 1), *eps[1:]]
    if unit_ids:  # one user per trajectory in D; D′'s new one belongs to the second's user
        for i, ep in enumerate(eps):
            ep["unit_id"] = i
        neighbour = [{**neighbour[0], "unit_id": 1}, *eps[1:]]
    meta = tabular_metadata(S_LIN, A_LIN, horizon=horizon_meta)
    pair.save(dataset(eps, meta), dataset(neighbour, meta))
    phi = np.eye(S_LIN * A_LIN).reshape(S_LIN, A_LIN, S_LIN * A_LIN)  # one-hot, ‖φ‖ = 1
    np.save(pair.root / "phi.npy", phi)


DP_VAPVI = (
    "train", "dp-vapvi", "--data", "{data}", "--features", "{root}/phi.npy", "--rho", "1",
    "--reward-range", "0,1", "--out", "{out}", "--seed", "5",
)  # fmt: skip
DP_VAPVI_RELEASED = frozenset({"pessimistic_value_per_state"})  # Ṽ_1: post-processing

# ---------------------------------------------------------------------------------------------
# off-policy evaluation (GPOPE, DP-LSW, DP-LSL): replace-one trajectory
# ---------------------------------------------------------------------------------------------

S_OPE, A_OPE, GAMMA = 6, 2, 0.9


def _ope(pair: Pair, *, imported: bool = False) -> None:
    """D: 30 trajectories of 3..6 steps from the common start state 0, never in the last
    state. D′: the first one replaced by the longest trajectory (10 steps), reward 1, in the
    last state: the start state's first-visit count drops by one and the last state's rises
    from 0. ``imported``: both go through ``privrl data import`` without declared spaces."""
    lengths = np.random.default_rng(6).integers(3, 7, size=30)
    eps = random_tabular_episodes(
        30, lengths, S_OPE, A_OPE, seed=7, avoid_state=S_OPE - 1, with_probs=True
    )
    for ep in eps:
        ep["observations"][0] = 0
    neighbour = [extreme_tabular_episode(10, S_OPE - 1, 1, with_probs=True, A=A_OPE), *eps[1:]]
    if imported:
        import_table_pair(pair, eps, neighbour, "--discount", str(GAMMA))
        return
    meta = tabular_metadata(S_OPE, A_OPE, horizon=None, discount=GAMMA)
    pair.save(dataset(eps, meta), dataset(neighbour, meta))


GPOPE = (
    "ope", "gpope", "--data", "{data}", "--features", "onehot", "--target-policy", "uniform",
    "--clip", "1", "--step-size", "0.05", "--iterations", "60", "--epsilon", "1",
    "--out", "{out}", "--seed", "1",
)  # fmt: skip
# GPOPE's only release is θ (theta.npy, metrics.csv); with --data no MSPBE is computed, so
# no metrics.json key is allow-listed.
GPOPE_ON_POLICY = (
    "ope", "gpope", "--data", "{data}", "--features", "onehot", "--clip", "1",
    "--step-size", "0.05", "--iterations", "60", "--epsilon", "1", "--out", "{out}",
)  # fmt: skip
BASELINE_DATA = ("--data", "{data}", "--features", "onehot", "--reward-range", "1")
BASELINE = (*BASELINE_DATA, "--epsilon", "1", "--out", "{out}", "--seed", "1")
LSTD_OP = (
    "--data", "{data}", "--features", "onehot", "--reward-bound", "1", "--ridge", "0.5",
    "--declared-trajectories", "30", "--epsilon", "1", "--out", "{out}", "--seed", "1",
)  # fmt: skip

# ---------------------------------------------------------------------------------------------
# expert-level systems: add/remove one expert with all their trajectories and their policy
# ---------------------------------------------------------------------------------------------

M = 6  # experts in D; D′ lacks the last one
L_DECLARED = 12  # the public maximum length, ≥ every trajectory of D and D′


def _expert_episode(rng: np.random.Generator, K: np.ndarray, T: int, uid: int) -> dict:
    obs = rng.normal(size=(T + 1, 4))
    greedy = (obs[:-1] @ K < 0).astype(np.int64)
    flip = rng.random(T) < 0.1
    return episode(obs, np.where(flip, 1 - greedy, greedy), np.ones(T), unit_id=uid)


def _experts(
    pair: Pair,
    *,
    horizon_meta: int | None = L_DECLARED,
    longest: int = L_DECLARED - 1,
    rare_action: bool = False,
) -> None:
    """D: M experts (CartPole-like LQR policies), 2 trajectories each; the last expert owns
    the longest trajectory (``longest`` steps). D′: D without the last expert — neither their
    trajectories nor their policy (the expert set of D′ has M − 1 experts). ``rare_action``:
    the last expert alone takes a third action and the metadata declares no action space."""
    from privrl.expert.experts import CartPoleLQRExperts, save_experts

    rng = np.random.default_rng(8)
    K = rng.normal(size=(M, 4))
    eps = []
    for i in range(M):
        for j in range(2):
            T = longest if (i == M - 1 and j == 0) else int(rng.integers(4, 8))
            ep = _expert_episode(rng, K[i], T, i)
            if rare_action and i == M - 1:
                ep["actions"][:] = 2
            eps.append(ep)
    meta = DatasetMetadata(
        observation_space=spaces.Box(-np.inf, np.inf, shape=(4,)),
        action_space=None if rare_action else spaces.Discrete(2),
        env_id="CartPole-v1",
        horizon=horizon_meta,
        extra={"n_experts": M},  # the data holder's declared number of experts
    )
    pair.save(dataset(eps, meta), dataset(eps[: 2 * (M - 1)], meta))
    save_experts(CartPoleLQRExperts({"K": K}), pair.a / "experts")
    save_experts(CartPoleLQRExperts({"K": K[: M - 1]}), pair.b / "experts")


EXPERT_FAST = (
    "--data", "{data}", "--epsilon", "10", "--delta", "1e-3", "--batch-size", "2",
    "--noise-multiplier", "5", "--hidden", "8", "--steps", "2", "--no-eval",
    "--out", "{out}", "--seed", "0",
)  # fmt: skip
EXPERT_DP = ("train", "expert-dp", "--experts", "{dir}/experts", "--filter-rounds", "3")
EXPERT_DP_RELEASED = frozenset(
    {
        # sizes of D_stable, which the consensus filter released (post-processing)
        "stable_size",
        "released_trajectories",
        "released_transitions",
    }
)
DP_SGD = ("train", "dp-sgd")

# ---------------------------------------------------------------------------------------------
# online (SDP-PE, DP-UCBVI): the same seed with one user's episode replaced
# ---------------------------------------------------------------------------------------------


@contextmanager
def _replace_first_sampled_user(calls: dict[str, int]) -> Iterator[None]:
    """SDP-PE's neighbour: the first simulated user reports a trajectory of their own (the
    last state and action at every step, reward 1) instead of the simulator's; the start state
    is kept, so the environment's random stream is consumed identically."""
    from privrl.envs.tabular import TabularMDP

    original = TabularMDP.sample_arrays

    def sample_arrays(self: TabularMDP, *args: Any, **kwargs: Any) -> Any:
        ep = original(self, *args, **kwargs)
        if calls["n"] == 0 and ep.actions.shape[0] > 0:
            states, actions, rewards = ep.states.copy(), ep.actions.copy(), ep.rewards.copy()
            states[0, 1:] = self.S - 1
            actions[0] = self.A - 1
            rewards[0] = 1.0
            ep = ep._replace(states=states, actions=actions, rewards=rewards)
        calls["n"] += 1
        return ep

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TabularMDP, "sample_arrays", sample_arrays)
        yield


@contextmanager
def _replace_first_streamed_user(calls: dict[str, int]) -> Iterator[None]:
    """DP-UCBVI's neighbour: user 1's counts, as the privatizer receives them, are those of
    a trajectory in the last state with the last action and reward 1 at every step."""
    from privrl.online.common import Counts
    from privrl.online.privatizers import CentralPrivatizer, LocalPrivatizer

    def patched(cls: type) -> Callable[..., Any]:
        original = cls.release

        def release(self: Any, counts: Counts, *args: Any, **kwargs: Any) -> Any:
            if calls["n"] == 0:
                n_sa = np.zeros_like(counts.n_sa)
                n_sas = np.zeros_like(counts.n_sas)
                n_sa[..., self.S - 1, self.A - 1] = 1.0
                n_sas[..., self.S - 1, self.A - 1, self.S - 1] = 1.0
                counts = Counts(n_sa, n_sas, n_sa.copy())
            calls["n"] += 1
            return original(self, counts, *args, **kwargs)

        return release

    with pytest.MonkeyPatch.context() as mp:
        for cls in (CentralPrivatizer, LocalPrivatizer):
            mp.setattr(cls, "release", patched(cls))
        yield


ONLINE_ENV = (
    "--env", "random-tabular", "--states", "2", "--actions", "2", "--horizon", "2",
    "--out", "{out}", "--seed", "0",
)  # fmt: skip
DP_UCBVI_RUN = ("--episodes", "50", "--epsilon", "1")
ONLINE_RELEASED = frozenset(
    {
        # exact regret of the played policies on the simulator: an evaluation outside the
        # guarantee (it depends on the users' start states and the policies played)
        "regret",
        "regret_per_episode_last_10pct",
        # wall-clock time of the run
        "wall_time_s",
    }
)
ONLINE_LINES = (r"^cumulative regret", r"^regret / episode", r"^wall time")
SDP_PE_RELEASED = ONLINE_RELEASED | {
    "stages",  # per-stage log: policy counts and gaps after elimination on the noisy counts
}


# ---------------------------------------------------------------------------------------------
# bandit OPE (IPS, SNIPS, DR): replace-one row
# ---------------------------------------------------------------------------------------------


def _bandit(pair: Pair) -> None:
    """D: 40 one-step rows; D′: the first row replaced by an extreme one (a reward 10⁶ far
    outside the declared [0, 1], the smallest propensity, the last context and action)."""
    rng = np.random.default_rng(4)
    meta = DatasetMetadata(observation_space=spaces.Discrete(3), action_space=spaces.Discrete(3))
    rows = [
        episode([int(s), int(s)], [int(a)], [float(r)], behaviour_probs=[float(p)])
        for s, a, r, p in zip(
            rng.integers(0, 3, 40),
            rng.integers(0, 3, 40),
            rng.random(40),
            rng.uniform(0.2, 1, 40),
            strict=True,
        )
    ]
    extreme = episode([2, 2], [2], [1e6], behaviour_probs=[1e-6])
    pair.save(dataset(rows, meta), dataset([extreme, *rows[1:]], meta))


def _multistep(pair: Pair) -> None:
    """D: 30 episodes of 1-4 steps; D′: the first replaced by a 12-step extreme one (rewards
    10⁶, the smallest propensities), longer than the declared horizon 4 (PDIS, WPDIS)."""
    rng = np.random.default_rng(5)
    meta = DatasetMetadata(observation_space=spaces.Discrete(3), action_space=spaces.Discrete(3))
    rows = []
    for _ in range(30):
        T = int(rng.integers(1, 5))
        rows.append(
            episode(
                [int(s) for s in rng.integers(0, 3, T + 1)],
                [int(a) for a in rng.integers(0, 3, T)],
                [float(r) for r in rng.random(T)],
                behaviour_probs=[float(p) for p in rng.uniform(0.2, 1, T)],
            )
        )
    extreme = episode([2] * 13, [2] * 12, [1e6] * 12, behaviour_probs=[1e-6] * 12)
    pair.save(dataset(rows, meta), dataset([extreme, *rows[1:]], meta))


MULTISTEP = (
    "--data", "{data}", "--target-policy", "uniform", "--reward-range", "0,1",
    "--weight-clip", "10", "--max-horizon", "4", "--gamma", "0.9", "--epsilon", "1",
    "--out", "{out}", "--seed", "1",
)  # fmt: skip


BANDIT = (
    "--data", "{data}", "--target-policy", "uniform", "--reward-range", "0,1",
    "--weight-clip", "10", "--max-horizon", "1", "--epsilon", "1", "--out", "{out}",
    "--seed", "1",
)  # fmt: skip
# the released value and its interval: functions of the noisy sums and public parameters
BANDIT_RELEASED = frozenset({"value", "value_ci_low", "value_ci_high"})
# the second: printed when the noisy value falls outside its interval (post-processing of the
# release, so it moves with the noise)
BANDIT_LINES = (r"value of uniform: .* CI \[", r"^the value is the unbiased noisy release")

# ---------------------------------------------------------------------------------------------
# PRIMORL: add/remove one trajectory (a private one: the declared-public split is the same)
# ---------------------------------------------------------------------------------------------


def _primorl(pair: Pair) -> None:
    """D: 30 Pendulum-like trajectories (K = 30 declared), the first 6 declared public in the
    metadata; D′: D without one private trajectory (the same declaration: the public episodes
    keep their positions)."""
    from tests.primorl.test_primorl import pendulum_data

    d = pendulum_data(
        30, seed=5, extra={"n_trajectories": 30, "public_episodes": [0, 1, 2, 3, 4, 5]}
    )
    pair.save(d, d.subset(np.delete(np.arange(30), 17)))


def _primorl_no_public(pair: Pair) -> None:
    """D: 30 Pendulum-like trajectories and no public data; D′: D without one."""
    from tests.primorl.test_primorl import pendulum_data

    d = pendulum_data(30, seed=5, extra={"n_trajectories": 30})
    pair.save(d, d.subset(np.arange(1, 30)))


PRIMORL = (
    "train", "primorl", "--data", "{data}", "--out", "{out}", "-z", "2", "--steps", "4",
    "-q", "0.2", "--eval-every", "2", "--patience", "100", "--epochs", "2",
    "--steps-per-epoch", "10", "--rollout-batch-size", "20", "--rollout-length", "5",
)  # fmt: skip
PRIMORL_RELEASED = frozenset(
    {
        # the policy's real-environment return: post-processing of the noisy model
        "return_mean",
        "return_std",
        "normalised_score",
        # the released model's error on the declared-public split, and the elites chosen by it
        "best_holdout_mse",
        "elites",
        # wall-clock time of the policy stage
        "policy_stage_seconds",
    }
)
PRIMORL_LINES = (
    r"^\S* ?[-\d.]+ ± [\d.]+",  # the return line (post-processing)
    # dp-accounting's RDP accountant on the public (q, z, order): printed by the first run in
    # a process only (later runs reuse the cached accounting), whichever side runs first
    r"^warning: _compute_log_a_frac failed to converge .* q=[\d.]+, sigma=[\d.]+, alpha=",
)


def _no_data(pair: Pair) -> None:
    pair.a.mkdir(parents=True)
    pair.b.mkdir(parents=True)


# ---------------------------------------------------------------------------------------------
# the cases
# ---------------------------------------------------------------------------------------------


def _xfail(defect: str) -> tuple[Any, ...]:
    """A neighbour difference that today's code publishes (only a `PublishedDifference`
    counts: a crash or a refusal on D still fails the test)."""
    return (pytest.mark.xfail(strict=True, raises=PublishedDifference, reason=defect),)


CASES = [
    # ---- DP-APVI (replace-one trajectory) ----
    Case(
        "dp-apvi-rho",
        _tabular,
        (*DP_APVI, "--rho", "1", "--reward-table", "{root}/reward.npy"),
        DP_APVI_RELEASED,
        DP_APVI_LINES,
    ),
    Case(
        "dp-apvi-epsilon",
        _tabular,
        (*DP_APVI, "--epsilon", "1", "--privatize-rewards", "--reward-range", "0,1"),
        DP_APVI_RELEASED,
        DP_APVI_LINES,
    ),
    Case(
        "dp-apvi-longer-than-H",
        lambda p: _tabular(p, long_neighbour=True),
        (*DP_APVI, "--rho", "1", "--privatize-rewards", "--reward-range", "0,1"),
        DP_APVI_RELEASED,
        DP_APVI_LINES,
    ),
    Case(
        "dp-apvi-shared-unit",
        lambda p: _tabular(p, unit_ids=True),
        (*DP_APVI, "--rho", "1", "--privatize-rewards", "--reward-range", "0,1"),
        DP_APVI_RELEASED,
        DP_APVI_LINES,
        must_run=False,
    ),
    Case(
        "dp-apvi-imported-spaces",
        lambda p: _tabular(p, imported=True),
        (*DP_APVI, "--rho", "1", "--privatize-rewards", "--reward-range", "0,1"),
        DP_APVI_RELEASED,
        DP_APVI_LINES,
        must_run=False,
    ),
    # ---- DP-VAPVI (replace-one trajectory) ----
    Case(
        "dp-vapvi-horizon",
        lambda p: _linear(p, horizon_meta=None, neighbour_len=H_LIN),
        (*DP_VAPVI, "--horizon", str(H_LIN)),
        DP_VAPVI_RELEASED,
    ),
    Case(
        "dp-vapvi-no-horizon",
        lambda p: _linear(p, horizon_meta=None, neighbour_len=H_LIN + 3),
        DP_VAPVI,
        DP_VAPVI_RELEASED,
        must_run=False,
    ),
    Case(
        "dp-vapvi-longer-than-H",
        lambda p: _linear(p, horizon_meta=H_LIN, neighbour_len=H_LIN + 3),
        DP_VAPVI,
        DP_VAPVI_RELEASED,
    ),
    Case(  # pooled over h: one trajectory adds up to H terms to each statistic
        "dp-vapvi-stationary",
        lambda p: _linear(p, horizon_meta=H_LIN, neighbour_len=H_LIN + 3),
        (*DP_VAPVI, "--stationary"),
        DP_VAPVI_RELEASED,
    ),
    Case(
        "dp-vapvi-shared-unit",
        lambda p: _linear(p, horizon_meta=H_LIN, neighbour_len=H_LIN, unit_ids=True),
        DP_VAPVI,
        DP_VAPVI_RELEASED,
        must_run=False,
    ),
    # ---- GPOPE, DP-LSW, DP-LSL (replace-one trajectory) ----
    Case("gpope", _ope, GPOPE),
    Case(
        "gpope-imported-spaces",
        lambda p: _ope(p, imported=True),
        (*GPOPE_ON_POLICY,),
        must_run=False,
    ),
    Case(
        "dp-lsw",
        _ope,
        ("ope", "dp-lsw", *BASELINE),
    ),
    # LSTD-OP (add/remove; a replaced trajectory is two such steps): m̄ declared, never counted
    Case(
        "lstd-op",
        _ope,
        ("ope", "lstd-op", *LSTD_OP),
    ),
    Case(
        "dp-lsl",
        _ope,
        ("ope", "dp-lsl", *BASELINE),
    ),
    # ---- consensus filter + Selective DP-SGD, expert-level DP-SGD (add/remove one expert) ----
    Case(
        "expert-dp-declared-L",
        _experts,
        (*EXPERT_DP, *EXPERT_FAST),
        EXPERT_DP_RELEASED,
    ),
    Case(
        "expert-dp-no-L",
        lambda p: _experts(p, horizon_meta=None),
        (*EXPERT_DP, *EXPERT_FAST),
        EXPERT_DP_RELEASED,
        must_run=False,
    ),
    Case(
        "expert-dp-longer-than-L",
        lambda p: _experts(p, horizon_meta=8, longest=11),
        (*EXPERT_DP, *EXPERT_FAST),
        EXPERT_DP_RELEASED,
    ),
    Case(
        "expert-dp-rounds-above-trajectories",
        _experts,
        (*EXPERT_DP[:-1], str(2 * M - 1), *EXPERT_FAST),  # T = 11: D has 12 trajectories
        EXPERT_DP_RELEASED,
    ),
    Case(
        "dp-sgd-declared-m",
        _experts,
        (*DP_SGD, "--n-experts", str(M), *EXPERT_FAST),
    ),
    Case(
        "dp-sgd-m-from-data",
        _experts,
        (*DP_SGD, *EXPERT_FAST),
        must_run=False,
    ),
    Case(
        "dp-sgd-more-experts-than-declared",
        _experts,
        (*DP_SGD, "--n-experts", str(M - 1), *EXPERT_FAST),
        must_run=False,
    ),
    Case(
        "dp-sgd-actions-from-data",
        lambda p: _experts(p, rare_action=True),
        (*DP_SGD, "--n-experts", str(M), *EXPERT_FAST),
        must_run=False,
    ),
    # ---- bandit OPE: IPS, SNIPS, DR (replace-one row) ----
    *(
        Case(f"{m}", _bandit, ("ope", m, *BANDIT), BANDIT_RELEASED, BANDIT_LINES)
        for m in ("ips", "snips", "dr")
    ),
    # ---- per-decision OPE: PDIS, WPDIS (replace-one trajectory, longer than H) ----
    *(
        Case(f"{m}-multistep", _multistep, ("ope", m, *MULTISTEP), BANDIT_RELEASED, BANDIT_LINES)
        for m in ("pdis", "wpdis")
    ),
    # ---- PRIMORL (add/remove one trajectory) ----
    Case("primorl", _primorl, PRIMORL, PRIMORL_RELEASED, PRIMORL_LINES),
    # no public data: bounds normaliser, every member an elite, all rounds
    Case("primorl-no-public", _primorl_no_public, PRIMORL, PRIMORL_RELEASED, PRIMORL_LINES),
    # ---- online: one user's episode replaced, same seed ----
    Case(
        "sdp-pe",
        _no_data,
        # the stepped simulation: each user's episode exists, so one can be replaced
        (
            "online",
            "sdp-pe",
            "--episodes",
            "300",
            "--epsilon",
            "5",
            "--simulation",
            "episodes",
            *ONLINE_ENV,
        ),
        SDP_PE_RELEASED,
        ONLINE_LINES,
        neighbour_patch=_replace_first_sampled_user,
    ),
    Case(
        "dp-ucbvi-central",
        _no_data,
        ("online", "dp-ucbvi", *DP_UCBVI_RUN, *ONLINE_ENV),
        ONLINE_RELEASED,
        ONLINE_LINES,
        neighbour_patch=_replace_first_streamed_user,
    ),
    Case(
        "dp-ucbvi-local",
        _no_data,
        ("online", "dp-ucbvi", "--privatizer", "local", *DP_UCBVI_RUN, *ONLINE_ENV),
        ONLINE_RELEASED,
        ONLINE_LINES,
        neighbour_patch=_replace_first_streamed_user,
    ),
]


def _expand_root(argv: tuple[str, ...], root: Path) -> list[str]:
    return [a.replace("{root}", str(root)) for a in argv]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_neighbours_publish_the_same_outside_releases(
    case: Case,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """D and its neighbour D′, same seed and flags: every published field outside the declared
    releases is identical (module docstring)."""
    monkeypatch.setenv("COLUMNS", "400")  # no console line wrapping: compare whole lines
    pair = Pair(tmp_path)
    case.build(pair)
    argv = _expand_root(case.argv, tmp_path)
    a = run_side(argv, pair.a, capsys)
    calls = {"n": 0}
    patch = case.neighbour_patch
    b = run_side(argv, pair.b, capsys, None if patch is None else lambda: patch(calls))
    if patch is not None:
        assert calls["n"] > 0, "the neighbour's user was never simulated"
    if case.must_run:
        assert a.code == 0, f"{case.id} did not run on D: {a.stderr.strip()}"
    for side in (a, b):
        if side.code != 0:  # a refusal is one clean line (the CLI contract)
            assert side.stderr.startswith("error:") and "Traceback" not in side.stderr
    assert_same_publication(
        case.id,
        a,
        b,
        pair.dirs(),
        released_metrics=case.released_metrics,
        released_lines=case.released_lines,
    )


def test_the_comparison_sees_a_published_difference(tmp_path: Path) -> None:
    """The checker itself: a metrics key outside the allow-list, a config value, a console line
    and a file name that differ are each reported with both values; allow-listed keys and
    lines, directories and timestamps are not."""
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    common = {"privacy.json": {"epsilon": 1.0, "created": "t1"}}
    a = Outcome(
        0,
        f"wrote {a_dir}/run\nsigma = 1.5\nvalue 0.1\n",
        "",
        ["config.json", "plots/x.png"],
        {
            "config.json": {"data": f"{a_dir}/data.h5", "H": 3},
            "metrics.json": {"theta": [1.0], "sigma": 1.5},
            **common,
        },
    )
    b = Outcome(
        0,
        f"wrote {b_dir}/run\nsigma = 2.5\nvalue 0.7\n",
        "",
        ["config.json", "plots/y.png"],
        {
            "config.json": {"data": f"{b_dir}/data.h5", "H": 5},
            "metrics.json": {"theta": [2.0], "sigma": 2.5},
            "privacy.json": {"epsilon": 1.0, "created": "t2"},
        },
    )
    diffs = published_differences(
        a, b, (a_dir, b_dir), released_metrics={"theta"}, released_lines=(r"^value",)
    )
    text = "\n".join(diffs)
    assert "config.json.H: 3 (D) != 5 (D')" in text
    assert "metrics.json.sigma: 1.5 (D) != 2.5 (D')" in text
    assert "'sigma = 1.5' (D) != 'sigma = 2.5' (D')" in text
    assert "plots/x.png" in text and "plots/y.png" in text
    assert "theta" not in text and "value" not in text and "created" not in text
    assert "data.h5" not in text and "wrote" not in text
    assert len(diffs) == 4, diffs
    same = published_differences(a, a, (a_dir, b_dir))
    assert same == []
    json.dumps(diffs)  # plain strings


def _ope_reward_outlier(pair: Pair) -> None:
    """D and D′ as in `_ope`, with every reward of D′'s new trajectory set to 10⁶ times the
    declared range (a user whose data break the declared bound)."""
    _ope(pair)
    from privrl.data.io import load_hdf5, save_hdf5

    d = load_hdf5(pair.b / "data.h5")
    rewards = np.asarray(d.rewards, dtype=np.float64).copy()
    first = slice(int(d.episode_offsets[0]), int(d.episode_offsets[1]))
    rewards[first] = 1e6
    save_hdf5(
        type(d)(**{**d._fields(), "rewards": rewards}, metadata=d.metadata), pair.b / "data.h5"
    )


@pytest.mark.parametrize("command", ["dp-lsw", "dp-lsl"])
def test_baselines_enforce_the_declared_reward_range(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Sensitivity rule: the smooth-sensitivity noise of DP-LSW/DP-LSL assumes every reward lies
    in an interval of the declared width R, so the data must be held to it (clipped), not
    trusted. With one-hot features θ_s is a mean of first-visit returns, so a neighbour whose
    rewards are 10⁶·R may move θ by at most the return range R/(1−γ) (10× slack here). ε is
    large so that the (identically seeded) noise hardly differs between the two runs."""
    pair = Pair(tmp_path)
    _ope_reward_outlier(pair)
    argv = ["ope", command, *BASELINE_DATA, "--epsilon", "100", "--out", "{out}", "--seed", "1"]
    thetas = []
    for side in pair.dirs():
        outcome = run_side(argv, side, capsys)
        assert outcome.code == 0, outcome.stderr
        thetas.append(np.load(side / "run" / "theta.npy"))
    bound = 10 * 1.0 / (1 - GAMMA)
    moved = float(np.max(np.abs(thetas[0] - thetas[1])))
    assert moved <= bound, (
        f"{command}: one neighbour with out-of-range rewards moves θ by {moved:.4g} "
        f"(> {bound:g}): θ(D) = {thetas[0].round(2)}, θ(D') = {thetas[1].round(2)}"
    )
