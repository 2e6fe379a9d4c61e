"""The consensus filter of Sharma et al.: PrefixQuery (Algorithm 1) and DataRelease (Algorithm 2).

DataRelease draws T trajectories (an expert uniformly at random, then an unused trajectory of
theirs). For each one it releases the longest prefix that the noisy consensus test calls
stable. The released prefixes form D_stable, which the learner may use without noise. Everything
else, meaning the tails and the trajectories never drawn, forms D_unst, which only DP-SGD may
touch.

Consensus count (Section 4), with the p_min-modified experts of `privrl.expert.base`:

    count_τ(Π) = Σ_i Π_{j≤|τ|} π_i(a_j|s_j) = Σ_i g^{M_i}·p_min^{|τ|−M_i},  g = 1 − (|A|−1)·p_min,

where M_i is the number of steps of τ at which expert i's greedy action is the logged action.
Removing or adding one expert moves the count by at most 1, since each term is a probability.
`prefix_log_counts` computes ln count of every prefix of many trajectories from a single batched
`greedy_actions` call per block of states. The work is a running mismatch count
D_i = (prefix length) − M_i per expert, then

    ln count = k·ln g + R·ln r + ln Σ_i r^{D_i − R},   r = p_min/g ≤ 1,

a log-sum-exp over experts. The reference R ≤ min_i D_i is reset to the minimum every few
steps, so the largest term stays ≥ e^-100 and nothing underflows. D_i − R is an exact
integer. The result is exact in float64 except for one clamp: terms below e^-700 of the
reference are raised to e^-700 so that they never become subnormal, which would slow the
loop. That changes the sum by < m·e^-600 relative. The loop runs over time steps only and is
vectorised over experts × trajectories. Memory is bounded by chunking over
trajectories and step blocks (`max_chunk_bytes`). The protocol has no way to query a subset
of the experts, so a single step of a chunk always holds all m experts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from dp_accounting import dp_event
from gymnasium import spaces

from privrl.data.dataset import TrajectoryDataset, _gather_index
from privrl.expert.base import ExpertSet
from privrl.privacy.noise import noise_generator
from privrl.privacy.release import Release
from privrl.privacy.threshold import (
    DataReleaseCalibration,
    first_failing_prefix,
    noisy_threshold,
    prefix_query_noise,
    sample_release_trajectories,
)

__all__ = [
    "DataReleaseResult",
    "PrefixLogCounts",
    "data_release",
    "prefix_log_counts",
    "prefix_query",
    "resolve_max_len",
]

_BYTES_PER_PAIR = 16  # int64 greedy action + bool mismatch + room for the expert's own scratch
_SLICE_PAIRS = 1 << 18  # experts × trajectories per time step (keeps one step's arrays in cache)
_MIN_LOG_TERM = 700.0  # terms r^e are clamped at e^-700 (float64 stays normal down to e^-708)


# ---------------------------------------------------------------------------------------------
# Input checks
# ---------------------------------------------------------------------------------------------


def _check_experts(experts: Any, p_min: float) -> tuple[int, int, int, float, float]:
    """(m, |A|, obs_dim, ln g, ln r) of a valid ExpertSet and admissible p_min."""
    if not isinstance(experts, ExpertSet):
        raise ValueError(
            f"experts must implement privrl.expert.base.ExpertSet (n_experts, n_actions, "
            f"obs_dim, greedy_actions), got {type(experts).__name__}"
        )
    m, n_act, obs_dim = int(experts.n_experts), int(experts.n_actions), int(experts.obs_dim)
    if m < 1 or n_act < 1 or obs_dim < 1:
        raise ValueError(
            f"experts: n_experts, n_actions and obs_dim must be >= 1, got {m}, {n_act}, {obs_dim}"
        )
    pm = float(p_min)
    if not (math.isfinite(pm) and 0.0 < pm * n_act <= 1.0):
        raise ValueError(
            f"p_min = {p_min!r} is not admissible for {n_act} actions (need 0 < p_min <= "
            f"1/|A| = {1 / n_act:.4g})"
        )
    g = 1.0 - (n_act - 1) * pm
    return m, n_act, obs_dim, math.log(g), math.log(pm) - math.log(g)


def _check_discrete_actions(actions: np.ndarray, n_actions: int, where: str) -> np.ndarray:
    if actions.ndim != 1 or not np.issubdtype(actions.dtype, np.integer):
        raise ValueError(
            f"{where}: actions must be discrete (one integer index per step); got dtype "
            f"{actions.dtype} and shape {actions.shape}. The consensus filter needs a discrete "
            "action space (Assumption 3.4)"
        )
    if actions.size:
        lo, hi = int(actions.min()), int(actions.max())
        if lo < 0 or hi >= n_actions:
            raise ValueError(
                f"{where}: actions take values in [{lo}, {hi}] but the experts have "
                f"n_actions = {n_actions} (indices 0..{n_actions - 1})"
            )
    return actions


def _check_obs(obs: np.ndarray, obs_dim: int, where: str) -> None:
    if obs.ndim != 2 or obs.shape[1] != obs_dim:
        raise ValueError(
            f"{where}: observations have shape {obs.shape} but the experts expect "
            f"[n, obs_dim = {obs_dim}] (flat observation vectors)"
        )


def _dataset_arrays(
    dataset: TrajectoryDataset, n_actions: int, obs_dim: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(observations, action indices, transition offsets, observation offsets) of a dataset."""
    space = dataset.metadata.action_space
    actions = np.asarray(dataset.actions)
    if space is not None:
        if not isinstance(space, spaces.Discrete):
            raise ValueError(
                f"dataset: action space {space} is not Discrete; the consensus filter needs a "
                "discrete action space (Assumption 3.4)"
            )
        if int(space.n) != n_actions:
            raise ValueError(
                f"dataset: action space {space} has {int(space.n)} actions but the experts "
                f"have n_actions = {n_actions}"
            )
        if int(space.start) != 0 and np.issubdtype(actions.dtype, np.integer):
            actions = actions - int(space.start)  # experts index actions from 0
    actions = _check_discrete_actions(actions, n_actions, "dataset")
    _check_obs(np.asarray(dataset.observations), obs_dim, "dataset")
    return (
        np.asarray(dataset.observations),
        actions,
        np.asarray(dataset.episode_offsets),
        np.asarray(dataset.observation_offsets),
    )


# ---------------------------------------------------------------------------------------------
# Consensus counts
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrefixLogCounts:
    """ln count_τ of every prefix of some trajectories, stored ragged.

    ``values[offsets[j] + k - 1]`` is ln count(τ_{1:k}) of trajectory j (k = 1..|τ_j|);
    ``episodes[j]`` is its episode index in the input. ``counts[j]`` gives trajectory j's
    log counts as an array.
    """

    values: np.ndarray
    offsets: np.ndarray
    episodes: np.ndarray

    def __len__(self) -> int:
        return int(self.episodes.shape[0])

    def __getitem__(self, j: int) -> np.ndarray:
        return self.values[self.offsets[j] : self.offsets[j + 1]]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def counts(self) -> np.ndarray:
        """exp(values): the counts themselves, flat (float64)."""
        return np.exp(self.values)


def _uint_for(n: int) -> type[np.unsignedinteger]:
    for dt in (np.uint8, np.uint16, np.uint32):
        if n <= np.iinfo(dt).max:
            return dt
    return np.uint64


def prefix_log_counts(
    dataset_or_arrays: TrajectoryDataset | Sequence[Any],
    experts: ExpertSet,
    p_min: float,
    episodes: Any = None,
    *,
    max_chunk_bytes: int = 32 * 2**20,
) -> PrefixLogCounts:
    """ln count_τ(Π) of every prefix τ_{1:k} of the selected trajectories (Section 4).

    ``dataset_or_arrays`` is a `TrajectoryDataset` or a tuple ``(states, actions,
    episode_offsets)`` with one state row per transition (no final observations).
    ``episodes`` (default: all) selects trajectories, in the order given. One batched
    ``experts.greedy_actions`` call covers a block of states of many trajectories. Memory per
    block is about ``max_chunk_bytes``, counting 16 bytes per expert × state including the
    protocol's int64 output. The default of 32 MiB measured faster than larger blocks, which
    get fresh, page-faulting memory on every call. There is no Python loop over experts or
    trajectories.
    """
    m, n_act, obs_dim, log_g, log_r = _check_experts(experts, p_min)
    if isinstance(dataset_or_arrays, TrajectoryDataset):
        obs, actions, offsets, obs_offsets = _dataset_arrays(dataset_or_arrays, n_act, obs_dim)
    else:
        try:
            states, acts, offs = dataset_or_arrays
        except (TypeError, ValueError):
            raise ValueError(
                "dataset_or_arrays must be a TrajectoryDataset or a tuple (states, actions, "
                "episode_offsets)"
            ) from None
        obs = np.asarray(states)
        offsets = np.asarray(offs, dtype=np.int64)
        actions = _check_discrete_actions(np.asarray(acts), n_act, "arrays")
        _check_obs(obs, obs_dim, "arrays")
        if (
            offsets.ndim != 1
            or offsets.shape[0] < 1
            or offsets[0] != 0
            or np.any(np.diff(offsets) < 1)
            or offsets[-1] != actions.shape[0]
            or obs.shape[0] != actions.shape[0]
        ):
            raise ValueError(
                "arrays: episode_offsets must start at 0, increase strictly and end at "
                f"len(actions) = {actions.shape[0]}, and states need one row per action "
                f"(got {obs.shape[0]} states)"
            )
        obs_offsets = offsets
    n_ep = offsets.shape[0] - 1
    sel = np.arange(n_ep, dtype=np.int64) if episodes is None else np.asarray(episodes)
    if sel.ndim != 1 or (sel.size and not np.issubdtype(sel.dtype, np.integer)):
        raise ValueError(f"episodes must be a 1-D array of episode indices, got {sel!r}")
    sel = sel.astype(np.int64)
    if sel.size and (sel.min() < 0 or sel.max() >= n_ep):
        raise ValueError(f"episodes: index out of range for {n_ep} episodes")
    budget = int(max_chunk_bytes)
    if budget < 1:
        raise ValueError(f"max_chunk_bytes must be >= 1, got {max_chunk_bytes!r}")

    lengths = (offsets[1:] - offsets[:-1])[sel]
    out_offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    values = np.empty(int(out_offsets[-1]), dtype=np.float64)
    # Longest first, so that each chunk pads little (padding steps are computed and dropped).
    order = np.argsort(-lengths, kind="stable")
    n_chunks = -(-sel.shape[0] // max(1, _SLICE_PAIRS // m))
    width = max(1, -(-sel.shape[0] // max(1, n_chunks)))  # trajectories per chunk (balanced)
    steps_per_block = max(1, budget // (_BYTES_PER_PAIR * m * width))
    for c0 in range(0, sel.shape[0], width):  # chunks of `width` trajectories
        pos = order[c0 : c0 + width]
        kk, bb, chunk_values = _chunk_log_counts(
            obs,
            actions,
            offsets[sel[pos]],
            obs_offsets[sel[pos]],
            lengths[pos],
            experts,
            log_g=log_g,
            log_r=log_r,
            steps_per_block=steps_per_block,
        )
        values[out_offsets[pos][bb] + kk] = chunk_values
    return PrefixLogCounts(values=values, offsets=out_offsets, episodes=sel)


def _chunk_log_counts(
    obs: np.ndarray,
    actions: np.ndarray,
    t_start: np.ndarray,
    o_start: np.ndarray,
    lens: np.ndarray,
    experts: ExpertSet,
    *,
    log_g: float,
    log_r: float,
    steps_per_block: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Log counts of one chunk of B trajectories: ``(k, b, value)`` for every prefix length
    k + 1 of trajectory b (padding steps dropped)."""
    m = int(experts.n_experts)
    b = lens.shape[0]
    l_max = int(lens.max())
    ks = np.arange(l_max, dtype=np.int64)[:, None]
    step = np.minimum(ks, lens[None, :] - 1)  # [L, B]; padding repeats the last state
    obs_rows, act_rows = o_start[None, :] + step, t_start[None, :] + step
    dt = _uint_for(l_max)
    cap = np.iinfo(dt).max if log_r == 0.0 else min(np.iinfo(dt).max, int(_MIN_LOG_TERM / -log_r))
    # e = D_i − R: each expert's mismatch count relative to a per-trajectory reference R that
    # is reset to min_i D_i every `refresh` steps. Then min_i e ≤ refresh, and the largest
    # term r^e stays ≥ e^-100. Both are exact integers.
    e = np.zeros((m, b), dtype=dt)
    ref = np.zeros(b, dtype=np.float64)
    refresh = max(1, min(32, int(100.0 / -log_r))) if log_r < 0 else l_max
    clamped = np.empty((m, b), dtype=dt)
    w = np.empty((m, b), dtype=np.float64)
    out = np.empty((l_max, b), dtype=np.float64)
    mis_buf = np.empty((min(steps_per_block, l_max), m, b), dtype=bool)
    for k0 in range(0, l_max, steps_per_block):
        k1 = min(l_max, k0 + steps_per_block)
        states = obs[obs_rows[k0:k1].reshape(-1)]
        greedy = np.asarray(experts.greedy_actions(states))
        if greedy.shape != (m, states.shape[0]) or not np.issubdtype(greedy.dtype, np.integer):
            raise ValueError(
                f"experts.greedy_actions returned {greedy.dtype} {greedy.shape}; expected "
                f"integers of shape (n_experts, n_states) = ({m}, {states.shape[0]})"
            )
        # Mismatches laid out [step, expert, trajectory], so that each step's slice is
        # contiguous.
        mis = mis_buf[: k1 - k0]
        np.not_equal(
            greedy.reshape(m, k1 - k0, b).transpose(1, 0, 2),
            actions[act_rows[k0:k1]][:, None, :],
            out=mis,
        )
        mis8 = mis.view(np.uint8)
        for k in range(k0, k1):  # time steps; vectorised over experts × trajectories
            np.add(e, mis8[k - k0], out=e)
            if k % refresh == 0:
                e_min = e.min(axis=0)
                np.subtract(e, e_min, out=e)
                ref += e_min
            src = e
            if k + 1 > cap:  # e <= k + 1, so only long prefixes can need the clamp
                src = np.minimum(e, cap, out=clamped)
            np.multiply(src, log_r, out=w)
            np.exp(w, out=w)
            out[k] = (k + 1) * log_g + ref * log_r + np.log(w.sum(axis=0))
    kk, bb = np.nonzero(ks < lens[None, :])
    return kk, bb, out[kk, bb]


# ---------------------------------------------------------------------------------------------
# Algorithm 1: PrefixQuery
# ---------------------------------------------------------------------------------------------


def prefix_query(
    experts: ExpertSet,
    states: Any,
    actions: Any,
    theta_hat: float,
    epsilon_prime: float,
    *,
    p_min: float = 0.02,
    rng: np.random.Generator,
) -> bool:
    """A_PQ(Π, τ, θ̂, ε'): ⊤ (True) iff count_τ(Π) + Lap(4/ε') > θ̂, with fresh noise.

    ``states`` [k, obs_dim] are s_1..s_k and ``actions`` [k] are a_1..a_k of the prefix τ.
    DataRelease queries all prefixes of a trajectory at once (`first_failing_prefix`); this is
    the single-query box of the paper.
    """
    a = np.asarray(actions)
    s = np.asarray(states)
    eps_p = float(epsilon_prime)
    if not (math.isfinite(eps_p) and eps_p > 0):
        raise ValueError(f"epsilon_prime must be finite and > 0, got {epsilon_prime!r}")
    if a.ndim != 1 or a.shape[0] < 1:
        raise ValueError(f"actions must hold the k >= 1 actions of the prefix, got {a.shape}")
    log_counts = prefix_log_counts((s, a, np.array([0, a.shape[0]])), experts, p_min)
    noise = prefix_query_noise(1, 4.0 / eps_p, rng)[0]
    return bool(math.exp(log_counts.values[-1]) + noise > float(theta_hat))


# ---------------------------------------------------------------------------------------------
# Algorithm 2: DataRelease
# ---------------------------------------------------------------------------------------------


@dataclass
class DataReleaseResult:
    """Output of `data_release`.

    ``stable`` (None if nothing was released) is D_stable. It holds the released prefixes in
    round order, and a cut prefix ends with a timeout (``truncated``). ``unstable`` is D_unst,
    every other transition, with each trajectory or tail kept in dataset order. Both keep each
    trajectory's expert id in ``unit_ids``. ``releases`` and ``event`` describe the privacy
    cost and ``summary`` holds counts and calibration values. Only the calibration values and the
    ``released_*`` counts (post-processing of the filter's output) may be published; the input
    counts (``trajectories``, ``transitions``, ``experts``, ``rounds_run``,
    ``resampled_rounds``, ``unstable_*``) are statistics of the private data. ``selected`` and
    ``stable_lengths`` give the T episode indices drawn and the length of each one's released
    prefix. They exist for diagnostics and tests only and must not be published: which
    trajectories were drawn is part of the filter's secret randomness.
    """

    stable: TrajectoryDataset | None
    unstable: TrajectoryDataset
    releases: list[Release]
    event: dp_event.DpEvent
    summary: dict[str, Any]
    calibration: DataReleaseCalibration
    selected: np.ndarray = field(repr=False)
    stable_lengths: np.ndarray = field(repr=False)


def _segments(
    ds: TrajectoryDataset,
    episodes: np.ndarray,
    starts: np.ndarray,
    stops: np.ndarray,
    cut: np.ndarray,
    part: str,
) -> TrajectoryDataset:
    """Steps [start, stop) of the given episodes (final observation s_{stop+1} included) as a
    dataset. A segment flagged ``cut`` ends in a timeout: its last transition becomes
    truncated and not terminated."""
    lengths = (stops - starts).astype(np.int64)
    t_sel = _gather_index(ds.episode_offsets[episodes] + starts, lengths)
    o_sel = _gather_index(ds.observation_offsets[episodes] + starts, lengths + 1)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    terminated = ds.terminated[t_sel].copy()
    truncated = ds.truncated[t_sel].copy()
    last = offsets[1:][cut] - 1
    terminated[last] = False
    truncated[last] = True
    probs = ds.behaviour_probs
    return TrajectoryDataset(
        observations=ds.observations[o_sel],
        actions=ds.actions[t_sel],
        rewards=ds.rewards[t_sel],
        terminated=terminated,
        truncated=truncated,
        episode_offsets=offsets,
        behaviour_probs=None if probs is None else probs[t_sel],
        unit_ids=ds.unit_ids[episodes],
        metadata=ds.metadata.with_extra(consensus_filter=part),
        validate=False,  # segments of valid episodes, flags set on their last steps only
    )


def resolve_max_len(metadata: Any, max_len: int | None) -> tuple[int, str]:
    """L, the longest trajectory the filter queries, and where it came from: ``max_len`` if
    given, else the metadata's declared ``horizon`` (unless the metadata mark it as inferred
    from the data). L sets δ' = δ1/(2TL) and the threshold shift (4/ε')·ln(1/δ'), so it must be
    public: the paper's L = max |τ| is a statistic of the private data, and is refused here.
    Trajectories longer than L are truncated for the filter (`data_release`)."""
    from privrl.privacy.public import inferred_fields

    if max_len is not None:
        if isinstance(max_len, bool) or not isinstance(max_len, int | np.integer) or max_len < 1:
            raise ValueError(f"max_len must be an integer >= 1, got {max_len!r}")
        return int(max_len), "given"
    horizon = getattr(metadata, "horizon", None)
    if horizon is not None and "horizon" not in inferred_fields(metadata):
        return int(horizon), "metadata.horizon"
    why = "marks its horizon as inferred from the data" if horizon is not None else "declare none"
    raise ValueError(
        "the consensus filter's maximum trajectory length L sets δ' = δ1/(2TL) and the "
        f"threshold shift, so it must be public, but the dataset's metadata {why}; pass "
        "`max_len=L`, the longest trajectory the data may hold (it is never taken "
        "from the private data; longer trajectories are truncated to L for the filter)"
    )


def data_release(
    dataset: TrajectoryDataset,
    experts: ExpertSet,
    *,
    epsilon1: float,
    delta1: float,
    rounds: int,
    p_min: float = 0.02,
    rng: np.random.Generator | None,
    max_len: int | None = None,
    calibration: str = "paper",
) -> DataReleaseResult:
    """A_DR(D, Π, ε1, δ1, p_min, T), Algorithm 2: release stable prefixes of T trajectories.

    Each round draws an expert uniformly at random and an unused trajectory of theirs
    (`sample_release_trajectories`). It then draws θ̂ = θ + (4/ε')·ln(1/δ') + Lap(2/ε') once
    and queries the prefixes τ_{1:i}, i = 1..|τ|, with fresh Lap(4/ε') noise each. On the first
    ⊥ at i it releases τ_{1:i−1} (nothing if i = 1), and if every query answers ⊤ it releases τ.
    A cut prefix (s_1, a_1, …, a_k, s_{k+1}) ends before a_{k+1} and its last transition is
    marked truncated. A fully released trajectory keeps its own end flags. ``max_len`` is L,
    the longest possible trajectory; it must be public: given, or the metadata's declared
    ``horizon`` (`resolve_max_len`; the paper's L = longest trajectory in the data is refused,
    as it would make δ' and the threshold data-dependent). The bound is enforced, not checked:
    the filter queries at most the first L prefixes of a trajectory, so a longer trajectory
    can release at most τ_{1:L} (a cut prefix) and its remaining steps stay in D_unst. If T
    exceeds the number of trajectories, only that many rounds run (the T-round event still
    bounds them). The run is (ε1, δ1)-DP under adding or removing one expert: each round is
    (2ε', δ1/(2T))-DP and the rounds compose by advanced composition (or, for "pld", by the PLD
    accountant). The bound is checked at run time and reported in ``summary``.
    ``calibration``: "paper" (line 3's ε'), "tight" (the largest ε' within the exact
    advanced-composition bound) or "pld" (the largest ε' within the PLD composition);
    `DataReleaseCalibration.from_budget`.
    """
    if not isinstance(dataset, TrajectoryDataset):
        raise ValueError(f"dataset must be a TrajectoryDataset, got {type(dataset).__name__}")
    if dataset.unit_ids is None:
        raise ValueError(
            "dataset has no unit_ids: the consensus filter needs the expert id of every "
            "trajectory (TrajectoryDataset(unit_ids=...)), since the privacy unit is the expert"
        )
    if dataset.n_episodes == 0:
        raise ValueError("dataset has no trajectories")
    m, n_act, obs_dim, _, _ = _check_experts(experts, p_min)
    _dataset_arrays(dataset, n_act, obs_dim)  # discrete actions, shapes (fail before any draw)
    n_units = dataset.n_units
    if n_units != m:
        raise ValueError(
            f"dataset has trajectories of {n_units} experts (distinct unit_ids) but the "
            f"ExpertSet has n_experts = {m}; the filter's analysis needs the experts whose "
            "trajectories are drawn and the experts whose policies are counted to be one set"
        )
    rng = noise_generator(rng, "consensus filter")  # secret: the draws and the noise
    length, length_source = resolve_max_len(dataset.metadata, max_len)
    calib = DataReleaseCalibration.from_budget(
        epsilon1, delta1, rounds, length, p_min, calibration=calibration
    )
    # Fewer rounds than the accounted T when the data hold fewer trajectories: running fewer
    # rounds than the event states is covered by it (no data-dependent error).
    t = min(calib.rounds, dataset.n_episodes)

    # A_1: the T trajectories (independent of the counts, so drawn first), then their counts.
    selected, resampled = sample_release_trajectories(dataset.unit_ids, t, rng)
    log_counts = prefix_log_counts(dataset, experts, p_min, episodes=selected)
    # A_2: one sparse-vector round per trajectory (Algorithm 2, lines 8–14), over at most the
    # first L prefixes (the public bound L is enforced: δ' = δ1/(2TL) covers L queries).
    stable_len = np.empty(t, dtype=np.int64)
    for c in range(t):  # T rounds (tens to hundreds)
        theta_hat = noisy_threshold(calib.theta_shifted, calib.threshold_scale, rng)
        stable_len[c] = first_failing_prefix(
            log_counts[c][:length], theta_hat, calib.query_scale, rng
        )

    ep_len = dataset.episode_lengths
    released = stable_len > 0
    stable = None
    if released.any():
        eps = selected[released]
        stable = _segments(
            dataset,
            eps,
            np.zeros(eps.shape[0], dtype=np.int64),
            stable_len[released],
            stable_len[released] < ep_len[eps],  # cut prefixes end in a timeout
            "stable",
        )
    start = np.zeros(dataset.n_episodes, dtype=np.int64)
    start[selected] = stable_len  # tails start after the released prefix
    keep = np.flatnonzero(start < ep_len)
    unstable = _segments(
        dataset,
        keep,
        start[keep],
        ep_len[keep],
        np.zeros(keep.shape[0], dtype=bool),  # tails keep the episode's own end
        "unstable",
    )

    release = calib.release(
        name="consensus filter (Sharma et al. Algorithm 2): stable prefixes of T trajectories",
        extra={"p_min": calib.p_min, "max_len_source": length_source},
    )
    summary: dict[str, Any] = {
        "rounds": calib.rounds,
        "rounds_run": t,
        "experts": m,
        "trajectories": dataset.n_episodes,
        "transitions": dataset.n_transitions,
        "released_trajectories": int(released.sum()),
        "released_transitions": int(stable_len.sum()),
        "fully_released_trajectories": int(np.sum(stable_len == ep_len[selected])),
        "unstable_trajectories": unstable.n_episodes,
        "unstable_transitions": unstable.n_transitions,
        "resampled_rounds": int(resampled.sum()),
        "max_len": length,
        "max_len_source": length_source,
        "p_min": calib.p_min,
        "epsilon_prime": calib.epsilon_prime,
        "delta_prime": calib.delta_prime,
        "c_min": calib.c_min,
        "theta": calib.theta,
        "theta_shifted": calib.theta_shifted,
        "round_epsilon": calib.round_epsilon,
        "round_delta": calib.round_delta,
        "composition_epsilon": calib.composition_epsilon,
        "composition_delta": calib.composition_delta,
        "accountant_epsilon": float(release.extra["accountant_epsilon"]),
        "epsilon1": calib.epsilon1,
        "delta1": calib.delta1,
        "calibration": calib.calibration,
    }
    return DataReleaseResult(
        stable=stable,
        unstable=unstable,
        releases=[release],
        event=release.event,
        summary=summary,
        calibration=calib,
        selected=selected,
        stable_lengths=stable_len,
    )
