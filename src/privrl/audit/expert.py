"""Auditing expert-dp's consensus filter (Sharma et al., Algorithms 1–2) with a canary expert.

The audited release is one round of DataRelease (Algorithm 2 with T = 1, lines 8–14): the
length k of the stable prefix released from a trajectory τ, computed with the system's own
code — the consensus counts of every prefix (`privrl.expert.consensus.prefix_log_counts`,
the p_min-modified experts), the calibration (`DataReleaseCalibration.from_budget`: ε', δ',
θ + (4/ε')·ln(1/δ')), the noisy threshold θ̂ = θ_shifted + Lap(2/ε')
(`privrl.privacy.threshold.noisy_threshold`) and a fresh Lap(4/ε') per prefix query
(`privrl.privacy.threshold.prefix_query_noise`). Unit: one expert, add/remove; D = Π₀ and
D' = Π₀ ∪ {canary expert}. The claimed ε is the report expert-dp would write for the filter
(`DataReleaseCalibration.release` through `expert.dpsgd.build_report`, PLD at δ1).

Trials are vectorised: the counts of τ's prefixes under Π₀ and under Π₀ ∪ {canary} are
computed once (they do not depend on the noise), and a batch of trials is one threshold draw
of `size` = batch and one query-noise draw of batch × L; "k = the number of leading ⊤" is the
rule of `first_failing_prefix` applied row by row (a test checks the two agree draw for draw).
The trajectory draw of Algorithm 2 (A_1, an expert then one of their trajectories) is fixed to
τ, a trajectory of a background expert: the adversary's best case is the round that queries
the counts the canary moves, and the draw does not depend on the consensus counts.

Canary ``worst``: an expert whose greedy action is τ's action at every step, so it adds
g^k ≈ 1 to the count of every prefix (the most one expert can add: each term is a
probability). Π₀ holds `agree` experts that also follow τ, with `agree` chosen from the
public calibration so that the first prefix's count sits just below θ_shifted without the
canary and at or above it with the canary: the queries are decided near the threshold, where
one expert matters most. ``random``: a canary expert with uniformly random greedy actions.
Score: k (a longer stable prefix ⇒ guess "canary in").

The non-private twin is the same rule with the noise off (θ̂ = θ_shifted, no query noise):
k is a deterministic function of the counts and tells Π₀ from Π₀ ∪ {canary} every time.

The private half of selective DP-SGD is audited in ONE run (`audit_expert_dp_sgd_one_run`,
Steinke, Nasr & Jagielski 2023): `privrl.expert.dpsgd.expert_dp_sgd` itself (Algorithm 4:
Poisson sampling of experts, one transition per sampled expert, per-expert clipping, the
Gaussian of `privatize_sum_torch`, Adam) trains a discrete CQL learner on background experts
and m canary experts, each included with probability ½; canary j's transition reads an input
coordinate no other expert's data touch (its gradient lives in a direction no other expert
uses), and the score is how much the released learner lowered canary j's loss.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from privrl.audit.attacks import AuditTrials, Canary, _check_trials, _trial_batches
from privrl.config import ConfigError
from privrl.privacy.noise import NoiseSource
from privrl.privacy.report import PrivacyReport

if TYPE_CHECKING:
    import torch

__all__ = [
    "ConsensusFilterAuditSettings",
    "ExpertDPSGDAuditSettings",
    "TableExperts",
    "audit_consensus_filter",
    "audit_expert_dp_sgd_one_run",
    "expert_dp_sgd_claimed",
    "filter_calibration",
    "filter_claimed",
    "stable_prefix_lengths",
]

Progress = Callable[[int, int], None] | None


class TableExperts:
    """m deterministic experts on integer states: ``greedy[i, s]`` is expert i's action at
    state s (observation = the state index, obs_dim 1). An `ExpertSet`."""

    def __init__(self, greedy: np.ndarray, n_actions: int) -> None:
        self.greedy = np.asarray(greedy, dtype=np.int64)
        if self.greedy.ndim != 2 or self.greedy.shape[0] < 1:
            raise ValueError(f"greedy must be [m >= 1, S], got {self.greedy.shape}")
        self._n_actions = int(n_actions)

    @property
    def n_experts(self) -> int:
        return int(self.greedy.shape[0])

    @property
    def n_actions(self) -> int:
        return self._n_actions

    @property
    def obs_dim(self) -> int:
        return 1

    def greedy_actions(self, obs: np.ndarray) -> np.ndarray:
        return self.greedy[:, np.asarray(obs).reshape(-1).astype(np.int64)]


def filter_calibration(
    epsilon: float, delta: float, max_len: int, p_min: float, calibration: str = "pld"
) -> Any:
    """DataRelease's constants for one round (T = 1) of trajectories of at most L steps."""
    from privrl.privacy.threshold import DataReleaseCalibration

    return DataReleaseCalibration.from_budget(
        epsilon,
        delta,
        1,
        max_len,
        p_min,
        calibration=calibration,  # type: ignore[arg-type]
    )


def filter_claimed(calib: Any | None, delta: float) -> PrivacyReport:
    """The filter's report as expert-dp states it (unit expert, add/remove, PLD at δ1);
    non-private for the twin (calib None)."""
    from privrl.expert.dpsgd import RELATION, UNIT, build_report

    if calib is None:
        return PrivacyReport.non_private(
            UNIT, RELATION, system="consensus filter (no noise)", delta=float(delta)
        )
    release = calib.release(
        name="consensus filter (Sharma et al. Algorithm 2): stable prefixes of T trajectories",
        extra={"p_min": calib.p_min, "max_len_source": "given"},
    )
    return build_report([release], float(delta), system="expert-dp consensus filter")


def _log_counts(greedy: np.ndarray, n_actions: int, actions: np.ndarray, p_min: float) -> Any:
    """ln count_τ(Π) of every prefix of τ (states 0..L−1, `actions`) — the system's code."""
    from privrl.expert.consensus import prefix_log_counts

    L = actions.shape[0]
    states = np.arange(L, dtype=np.float64).reshape(L, 1)
    offsets = np.array([0, L], dtype=np.int64)
    experts = TableExperts(greedy, n_actions)
    return np.asarray(prefix_log_counts((states, actions, offsets), experts, p_min)[0])


def stable_prefix_lengths(
    counts: np.ndarray, calib: Any, rng: np.random.Generator, non_private: bool = False
) -> np.ndarray:
    """k for each row of `counts` [n, L] (count_τ of each prefix): n independent rounds of
    Algorithm 2, lines 8–14 — θ̂ = θ_shifted + Lap(2/ε') per round, then ⊤ iff count + Lap(4/ε')
    > θ̂ per prefix, k = the number of leading ⊤ (`first_failing_prefix`'s rule). The draws
    are the system's own (`privrl.privacy.threshold`, looked up at call time so a test can
    weaken them): one threshold draw of size n, one query-noise draw of n·L, so a row with
    n = 1 consumes the generator exactly as `noisy_threshold` + `first_failing_prefix` do.
    `non_private`: the same rule with the noise off (θ̂ = θ_shifted, no query noise)."""
    from privrl.privacy import threshold

    n, L = counts.shape
    if non_private:
        theta_hat = np.full(n, calib.theta_shifted)
        noise = np.zeros((n, L))
    else:
        theta_hat = np.asarray(
            threshold.noisy_threshold(calib.theta_shifted, calib.threshold_scale, rng, size=n)
        )
        noise = threshold.prefix_query_noise(n * L, calib.query_scale, rng).reshape(n, L)
    passed = counts + noise > theta_hat[:, None]  # A_PQ, Algorithm 1 line 3
    return np.where(passed.all(1), L, np.argmin(passed, axis=1)).astype(np.float64)


@dataclass(frozen=True)
class ConsensusFilterAuditSettings:
    """The audited round of DataRelease (`audit_consensus_filter`).

    Attributes:
        epsilon, delta: the filter's budget (ε1, δ1).
        non_private: run the same rule without noise (the threshold of that budget kept).
        max_len: the public L (τ's length).
        actions: the number of actions |A|.
        p_min: the experts' action floor.
        calibration: "paper", "tight" or "pld" (`DataReleaseCalibration.from_budget`).
        agree: the experts of Π₀ that follow τ (default: chosen from the public calibration so
            that the first prefix's count sits just below θ_shifted without the canary).
    """

    epsilon: float
    non_private: bool = False
    delta: float = 1e-5
    max_len: int = 5
    actions: int = 2
    p_min: float = 0.01
    calibration: str = "pld"
    agree: int | None = None


def audit_consensus_filter(
    settings: ConsensusFilterAuditSettings,
    *,
    trials: int,
    canary: Canary = "worst",
    rng: np.random.Generator,
    progress: Progress = None,
    batch: int | None = None,
    greedy: np.ndarray | None = None,
) -> AuditTrials:
    """Score `trials` rounds of DataRelease on τ with the experts Π₀ (b = 0) or Π₀ ∪ {canary}
    (b = 1), add/remove one expert. `epsilon` is the filter's budget ε1 (with `delta` = δ1);
    `non_private` runs the same rule without noise (the threshold of that budget kept).
    `greedy` [L] (with ``canary="file"``, `privrl.audit.canary.load_expert_canary`) is the
    canary expert's greedy action in each of τ's states. The settings are those of
    `ConsensusFilterAuditSettings`."""
    st = settings
    epsilon, non_private, delta, p_min = st.epsilon, st.non_private, st.delta, st.p_min
    max_len, actions, calibration, agree = st.max_len, st.actions, st.calibration, st.agree
    trials = _check_trials(trials, canary, file=greedy is not None)
    calib = filter_calibration(epsilon, delta, max_len, p_min, calibration)
    L, A = int(max_len), int(actions)
    tau_actions = np.zeros(L, dtype=np.int64)  # τ: state t at step t, action 0 throughout
    g = 1.0 - (A - 1) * p_min
    theta_s = calib.theta_shifted
    if agree is None:  # count(Π₀) = agree·g < θ_shifted ≤ (agree + 1)·g on the first prefix
        agree = max(math.ceil(theta_s / g) - 1, 0)
    if agree < 0:
        raise ValueError(f"agree must be >= 0, got {agree}")
    base = np.zeros((max(agree, 1), L), dtype=np.int64)
    if agree == 0:  # one expert that never follows τ keeps Π₀ non-empty
        base[0] = 1
    if canary == "worst":
        extra = tau_actions[None, :]
    elif canary == "file":
        assert greedy is not None
        extra = np.asarray(greedy, np.int64).reshape(1, L).copy()
        unseen = extra < 0  # states the canary's episodes never visit: a random action
        extra[unseen] = rng.integers(0, A, size=int(unseen.sum()))
    else:
        extra = rng.integers(0, A, size=(1, L))
    lc = np.stack(
        [
            _log_counts(base, A, tau_actions, p_min),
            _log_counts(np.vstack([base, extra]), A, tau_actions, p_min),
        ]
    )  # [2, L]: ln count of every prefix without / with the canary expert
    counts = np.exp(lc)
    labels = rng.integers(0, 2, size=trials)
    scores = np.empty(trials)
    for done, size in _trial_batches(trials, L + 1, batch, progress):
        b = labels[done : done + size]
        scores[done : done + size] = stable_prefix_lengths(counts[b], calib, rng, non_private)
    report = filter_claimed(None if non_private else calib, delta)
    return AuditTrials.from_report(
        "consensus filter (no noise)" if non_private else "expert-dp consensus filter",
        report,
        scores,
        labels,
        delta=delta,
        params={
            "rounds": 1,
            "max_len": L,
            "actions": A,
            "p_min": p_min,
            "calibration": calibration,
            "epsilon_prime": calib.epsilon_prime,
            "theta_shifted": theta_s,
            "agreeing_experts": int(agree),
            "canary": canary,
            "audited_release": "the stable-prefix length of one DataRelease round (Alg. 2)",
        },
    )


# ---------------------------------------------------------------------------------------------
# expert-level DP-SGD (the private half of selective DP-SGD), one run
# ---------------------------------------------------------------------------------------------


def _expert_dataset(
    canaries: int,
    background: int,
    dim: int,
    scale: float,
    included: np.ndarray,
    rng: Any,
    *,
    drawn: tuple[np.ndarray, np.ndarray] | None = None,
    file: list[list[Any]] | None = None,
) -> Any:
    """Canary expert j (if included): one terminal step from state `scale`·e_j, action 0,
    reward 1 (``worst``), or, with `drawn` (``random``, `_random_canaries`), its drawn
    episode, or, with `file` (``--canary FILE``, `privrl.audit.canary.load_one_run_canaries`),
    its own episodes placed on its own coordinate j; background expert: one random-walk
    episode of 8 steps in the last `dim` coordinates (its first m coordinates are 0), random
    actions, reward 0."""
    from privrl.audit.canary import background_walk, place_on_own_coordinate, synthetic_episode
    from privrl.data.dataset import TrajectoryDataset

    p = canaries + dim
    episodes = []
    for j in np.flatnonzero(included):  # a few hundred short episodes (set-up)
        if file is not None:
            for ep in file[j]:
                obs = place_on_own_coordinate(ep, int(j), canaries)
                e = synthetic_episode(obs, ep.actions, 0.0, terminal=ep.terminated, unit=int(j))
                e["rewards"] = ep.rewards.astype(np.float32)
                episodes.append(e)
            continue
        if drawn is not None:
            obs, act = drawn
            episodes.append(synthetic_episode(obs[j], act[j], 0.0, unit=int(j)))
            continue
        s = np.zeros((2, p), np.float32)
        s[:, j] = scale
        episodes.append(
            synthetic_episode(s, np.zeros(1, np.int64), 1.0, terminal=True, unit=int(j))
        )
    for u in range(background):
        s = background_walk(8, canaries, dim, rng)
        a = rng.integers(0, 2, size=8)
        episodes.append(synthetic_episode(s, a, 0.0, unit=canaries + u))
    return TrajectoryDataset.from_episodes(episodes)


def _random_canaries(canaries: int, dim: int, rng: Any) -> tuple[np.ndarray, np.ndarray]:
    """``random`` canary experts, drawn from the background's public generator: one random-walk
    episode of 8 steps in the last `dim` coordinates each, random actions (reward 0)."""
    obs = np.zeros((canaries, 9, canaries + dim), np.float32)
    obs[:, :, canaries:] = np.cumsum(rng.normal(0.0, 0.3, size=(canaries, 9, dim)), axis=1)
    return obs, rng.integers(0, 2, size=(canaries, 8))


def expert_dp_sgd_claimed(
    *,
    noise_multiplier: float | None,
    canaries: int,
    background: int,
    batch_size: int | None,
    steps: int,
    delta: float,
    clip: float,
    hidden: int = 16,
) -> PrivacyReport:
    """The report `expert_dp_sgd` states for the audit's run (the same `dp_sgd_release` and
    `build_report`), from the public sizes only: m + B experts, b per step, N steps, the
    learner's parameter count. Non-private (ε = ∞) for the twin."""
    from privrl.expert.dpsgd import RELATION, UNIT, build_report, dp_sgd_release

    if noise_multiplier is None:
        return PrivacyReport.non_private(
            UNIT, RELATION, system="expert-dp-sgd (non-private twin)", delta=float(delta)
        )
    units = int(canaries) + int(background)
    b = units if batch_size is None else int(batch_size)
    p = int(canaries) + 2
    release = dp_sgd_release(
        noise_multiplier=noise_multiplier,
        clip_norm=clip,
        sampling_probability=b / units,
        steps=int(steps),
        batch_size=b,
        n_units=units,
        n_params=(p + 1) * hidden + (hidden + 1) * 2,  # DiscreteCQL: p → hidden → |A| = 2
    )
    return build_report([release], float(delta), system="expert-dp-sgd")


@dataclass(frozen=True)
class ExpertDPSGDAuditSettings:
    """The audited run of expert-level DP-SGD (`audit_expert_dp_sgd_one_run`).

    Attributes:
        noise_multiplier: z (None: the non-private twin).
        background: the number of background experts B.
        batch_size: the expected batch size b (default: all M = canaries + background
            experts, q = b/M = 1).
        steps: N, the number of steps.
        delta: the δ of the claimed ε.
        clip: the clip norm C.
        lr: the learner's step size.
        hidden: the width of the learner's hidden layer.
        scale: the canary state's coordinate (``worst``).
        device: where the learner trains (`privrl.nn.device.resolve_device`); the noise is
            drawn on the CPU either way.
    """

    noise_multiplier: float | None
    background: int = 50
    batch_size: int | None = None
    steps: int = 5
    delta: float = 1e-5
    clip: float = 1.0
    lr: float = 1e-2
    hidden: int = 16
    scale: float = 10.0
    device: str | torch.device = "cpu"


def audit_expert_dp_sgd_one_run(
    settings: ExpertDPSGDAuditSettings,
    *,
    canaries: int = 500,
    guesses: int = 50,
    confidence: float = 0.95,
    canary: str = "worst",
    rng: np.random.Generator,
    units: list[list[Any]] | None = None,
) -> Any:
    """ONE run of expert-level DP-SGD (`privrl.expert.dpsgd.expert_dp_sgd`, Algorithm 4 — the
    private steps of selective DP-SGD) on a discrete CQL learner, with `canaries` canary experts
    each included with probability ½. Canary j's only transition reads input coordinate j, which
    no other expert's data touch, so the column of the first layer that reads it moves only
    with canary j (and the noise). Score: how much the released learner lowered canary j's
    own loss, relative to the public initialisation (the target network is the initial one for
    fewer than 1000 steps); guesses and bound as in `privrl.audit.dpsgd.audit_dp_sgd_one_run`.
    `batch_size` b defaults to all M = canaries + background experts (q = b/M = 1);
    `noise_multiplier` None is the non-private twin (`DPSGDSettings(private=False)`: ordinary
    minibatches, no clipping, no noise). ``canary="random"``: the canary experts are drawn like
    the background's (`_random_canaries`), and canary j's score is the mean over its
    transitions (a much weaker attack: nothing isolates its gradient). `units`: the canary
    experts of a ``--canary FILE`` (`privrl.audit.canary.load_one_run_canaries`, m experts
    with 1 + 2 inputs), each placed on its own coordinate j as ``worst``'s; canary j's score
    is the mean over its transitions. The settings are those of `ExpertDPSGDAuditSettings`."""
    import torch

    from privrl.audit.dpsgd import OneRunAudit
    from privrl.expert.dpsgd import DPSGDSettings, expert_dp_sgd
    from privrl.nn.device import resolve_device
    from privrl.rl.cql import DiscreteCQL
    from privrl.rl.discrete_common import TransitionTable

    st = settings
    noise_multiplier, background, batch_size = st.noise_multiplier, st.background, st.batch_size
    steps, delta, clip, lr, hidden, scale = st.steps, st.delta, st.clip, st.lr, st.hidden, st.scale
    m, r = int(canaries), int(guesses)
    file, units = units, None  # the file's canary experts (`units` is reused for M below)
    if file is not None:
        canary = "file"
        if len(file) != m:
            raise ConfigError("canaries", f"is {m}, but the canary file holds {len(file)} experts")
    elif canary not in ("worst", "random"):
        raise ConfigError("canary", f"must be 'worst' or 'random', got {canary!r}")
    if m < 2 or not (2 <= r <= m) or r % 2:
        raise ValueError(
            f"need canaries >= 2 and an even guesses in [2, canaries], got m={m}, r={r}"
        )
    if steps < 1 or background < 0:
        raise ValueError(f"need steps >= 1 and background >= 0, got {steps}, {background}")
    units = m + int(background)
    b = units if batch_size is None else int(batch_size)
    seeds = rng.spawn(3)
    learner = DiscreteCQL(
        m + 2,
        2,
        hidden=(hidden,),
        lr=lr,
        seed=int(seeds[0].integers(0, 2**31 - 1)),
        device=resolve_device(st.device),
    )
    included = rng.integers(0, 2, size=m).astype(bool)
    drawn = _random_canaries(m, 2, rng.spawn(1)[0]) if canary == "random" else None
    data = _expert_dataset(m, background, 2, scale, included, seeds[1], drawn=drawn, file=file)
    # every canary's transitions, as the auditor builds them (public: the canaries are its own)
    everyone = _expert_dataset(m, 0, 2, scale, np.ones(m, bool), seeds[1], drawn=drawn, file=file)
    table = TransitionTable(everyone, learner.obs_transform, learner.device)
    canary_batch = table.gather(np.arange(len(table)))
    owner = np.asarray(table.unit, dtype=np.int64)  # canary j of each transition
    count = np.bincount(owner, minlength=m).astype(np.float64)

    def per_canary(loss: Any) -> np.ndarray:
        return np.bincount(owner, weights=loss.double().cpu().numpy(), minlength=m) / count

    with torch.no_grad():
        before = per_canary(learner.per_example_loss(learner.params, canary_batch))
    result = expert_dp_sgd(
        DPSGDSettings(
            epsilon=None,
            delta=delta,
            batch_size=b,
            noise_multiplier=noise_multiplier if noise_multiplier is not None else 1.0,
            clip_norm=clip,
            steps=steps,
            n_units=units,
            private=noise_multiplier is not None,
        ),
        learner,
        data,
        rng=seeds[2],
        noise=NoiseSource.insecure(seeds[2]),  # synthetic canaries: repeatable from the seed
    )
    with torch.no_grad():
        after = per_canary(learner.per_example_loss(learner.params, canary_batch))
    scores = before - after  # higher ⇒ the release learned canary j ⇒ guess "in"
    report = result.report.claim()
    return OneRunAudit.from_guesses(
        scores,
        included,
        guesses=r,
        confidence=confidence,
        report=report,
        delta=delta,
        params={
            "system": "expert-dp-sgd" if noise_multiplier is not None else "expert sgd (twin)",
            "confidence": confidence,
            "noise_multiplier": noise_multiplier,
            "sampling_rate": b / units,
            "steps": steps,
            "canary": canary,
        },
    )
