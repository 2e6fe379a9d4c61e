"""Control with function approximation for the OPE domains: learn the policies GPOPE evaluates.

* :func:`sarsa_lambda` — Sarsa(λ) with a linear Q on a feature map, step size scaled per Fourier
  frequency (α_c = α/‖c‖, Konidaris, Osentoski & Thomas 2011). With the default ε = 0 and
  zero-initialised (optimistic: rewards are −1) weights every action is greedy, so Sarsa(λ)
  and Watkins' Q(λ) coincide: this is the "Q-learning with the Fourier basis" of the GPOPE paper.
* :func:`fitted_q_iteration` — fitted Q iteration (Ernst et al. 2005/2006) with a small MLP on
  features, data gathered in rounds (uniform first, then ε-greedy w.r.t. the current Q), for
  the HIV simulator. Extra-trees (Ernst's regressor) is not available; targets span seven
  decades, so the net regresses symlog(y/unit) (exact for deterministic dynamics, where the
  Bellman target of a state-action pair has no noise).
* Q-function objects (:class:`LinearQ`, :class:`MLPQ`) with ``values(obs) -> [n, A]``,
  policies derived from them, and :func:`simulate`, a vectorised batch rollout.

Both learners are seeded (same seed, same Q) and never touch global RNG state.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from privrl.arrays import FloatArray
from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.policies import EpsilonGreedy, Policy, UniformRandomPolicy, sample_from_probs
from privrl.progress import Progress, no_progress
from privrl.rl.features import FeatureMap, one_hot

__all__ = [
    "MLPQ",
    "BatchRollout",
    "BatchSimulator",
    "FQIConfig",
    "GreedyQPolicy",
    "LinearQ",
    "QFunction",
    "SarsaLambdaConfig",
    "SoftmaxQPolicy",
    "discounted_returns",
    "epsilon_greedy_q",
    "fitted_q_iteration",
    "sarsa_lambda",
    "simulate",
    "simulate_dataset",
]

SeedLike = int | np.random.Generator | np.random.SeedSequence


def _rng(seed: SeedLike) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


# ------------------------------------------------------------------------------------------
# simulators and rollouts


@runtime_checkable
class BatchSimulator(Protocol):
    """Many episodes stepped together (``MountainCarBatch``, ``HIVBatch``)."""

    n_actions: int
    horizon: int
    observation_space: spaces.Space
    action_space: spaces.Space

    def reset(self, n: int, rng: np.random.Generator) -> FloatArray: ...

    def step(
        self, obs: np.ndarray, actions: np.ndarray
    ) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]: ...


class BatchRollout(NamedTuple):
    """Time-major arrays of a batch rollout; ``alive[t, i]`` marks real transitions.

    Episode i has ``lengths[i]`` transitions (rows t < lengths[i]); ``observations[t, i]`` for
    t ≤ lengths[i] are its states (the last one final). T is the longest episode's length;
    entries past an episode's end are zero.
    """

    observations: FloatArray  # [T + 1, n, *obs_shape]
    actions: npt.NDArray[np.int64]  # [T, n]
    rewards: FloatArray  # [T, n]
    probs: FloatArray | None  # [T, n] probability of the taken action, if the policy has them
    alive: npt.NDArray[np.bool_]  # [T, n]
    lengths: npt.NDArray[np.int64]  # [n]
    terminated: npt.NDArray[np.bool_]  # [n] whether the episode ended in a terminal state


class _Records(NamedTuple):
    """Transitions in the order they were simulated (time-major), alive episodes only."""

    obs0: FloatArray  # [n, ...] start states
    episode: npt.NDArray[np.int64]  # [N]
    step: npt.NDArray[np.int64]  # [N]
    actions: npt.NDArray[np.int64]  # [N]
    rewards: FloatArray  # [N]
    probs: FloatArray | None  # [N]
    next_obs: FloatArray  # [N, ...]
    lengths: npt.NDArray[np.int64]  # [n]
    terminated: npt.NDArray[np.bool_]  # [n]


def _simulate_records(
    sim: BatchSimulator,
    policy: Policy,
    n: int,
    rng: SeedLike,
    horizon: int | None,
    init_rng: SeedLike | None,
) -> _Records:
    """The one rollout loop (over time; vectorised over the still-running episodes).

    Memory is proportional to the transitions actually simulated, not to n × horizon.
    """
    rng = _rng(rng)
    init = rng if init_rng is None else _rng(init_rng)
    H = int(sim.horizon if horizon is None else horizon)
    if H < 1 or int(n) < 1:
        raise ValueError(f"need n >= 1 and horizon >= 1, got n={n}, horizon={H}")
    obs0 = np.asarray(sim.reset(int(n), init), dtype=np.float64)
    has_probs = hasattr(policy, "action_probs")
    rec: dict[str, list[np.ndarray]] = {k: [] for k in ("ep", "t", "a", "r", "p", "nxt")}
    lengths = np.full(n, H, dtype=np.int64)
    terminated = np.zeros(n, dtype=bool)
    idx = np.arange(n)
    cur = obs0
    for t in range(H):
        if idx.size == 0:
            break
        if has_probs:
            p = np.asarray(policy.action_probs(cur), dtype=np.float64)  # type: ignore[attr-defined]
            a = sample_from_probs(p, rng)
            rec["p"].append(p[np.arange(idx.size), a])
        else:
            a = np.asarray(policy.act(cur, rng), dtype=np.int64)
        nxt, r, term = sim.step(cur, a)
        rec["ep"].append(idx)
        rec["t"].append(np.full(idx.size, t, dtype=np.int64))
        rec["a"].append(a)
        rec["r"].append(np.asarray(r, dtype=np.float64))
        rec["nxt"].append(nxt)
        if term.any():
            ended = idx[term]
            lengths[ended] = t + 1
            terminated[ended] = True
            keep = ~term
            idx, cur = idx[keep], nxt[keep]
        else:
            cur = nxt
    return _Records(
        obs0=obs0,
        episode=np.concatenate(rec["ep"]),
        step=np.concatenate(rec["t"]),
        actions=np.concatenate(rec["a"]).astype(np.int64),
        rewards=np.concatenate(rec["r"]),
        probs=np.concatenate(rec["p"]) if has_probs else None,
        next_obs=np.concatenate(rec["nxt"]),
        lengths=lengths,
        terminated=terminated,
    )


def simulate(
    sim: BatchSimulator,
    policy: Policy,
    n: int,
    rng: SeedLike,
    *,
    horizon: int | None = None,
    init_rng: SeedLike | None = None,
) -> BatchRollout:
    """Roll ``policy`` out for ``n`` episodes of ``sim`` at once (vectorised over episodes).

    Only episodes still running are stepped. Start states come from ``init_rng`` (default:
    ``rng``); actions are drawn from ``policy.action_probs`` when it has them (recording the
    taken action's probability), else from ``policy.act``.
    """
    rec = _simulate_records(sim, policy, n, rng, horizon, init_rng)
    T = int(rec.lengths.max())
    obs = np.zeros((T + 1, *rec.obs0.shape))
    obs[0] = rec.obs0
    obs[rec.step + 1, rec.episode] = rec.next_obs
    actions = np.zeros((T, n), dtype=np.int64)
    rewards = np.zeros((T, n))
    alive = np.zeros((T, n), dtype=bool)
    actions[rec.step, rec.episode] = rec.actions
    rewards[rec.step, rec.episode] = rec.rewards
    alive[rec.step, rec.episode] = True
    probs = None
    if rec.probs is not None:
        probs = np.ones((T, n))
        probs[rec.step, rec.episode] = rec.probs
    return BatchRollout(obs, actions, rewards, probs, alive, rec.lengths, rec.terminated)


def simulate_dataset(
    sim: BatchSimulator,
    policy: Policy,
    n: int,
    rng: SeedLike,
    *,
    horizon: int | None = None,
    init_rng: SeedLike | None = None,
    metadata: DatasetMetadata | None = None,
) -> TrajectoryDataset:
    """Like :func:`simulate`, recorded straight into a ``TrajectoryDataset`` (episode-major,
    final observations included, ``behaviour_probs`` when the policy has ``action_probs``).

    An episode that reaches a terminal state is ``terminated``; every other one ran to the
    horizon and is ``truncated``.
    """
    rec = _simulate_records(sim, policy, n, rng, horizon, init_rng)
    order = np.argsort(rec.episode, kind="stable")  # episode-major, time order kept
    ep, step = rec.episode[order], rec.step[order]
    offsets = np.concatenate([[0], np.cumsum(rec.lengths)]).astype(np.int64)
    obs_offsets = offsets[:-1] + np.arange(n)
    obs = np.empty((offsets[-1] + n, *rec.obs0.shape[1:]))
    obs[obs_offsets] = rec.obs0
    obs[obs_offsets[ep] + step + 1] = rec.next_obs[order]
    last = step == rec.lengths[ep] - 1
    return TrajectoryDataset(
        observations=obs,
        actions=rec.actions[order],
        rewards=rec.rewards[order],
        terminated=last & rec.terminated[ep],
        truncated=last & ~rec.terminated[ep],
        episode_offsets=offsets,
        behaviour_probs=None if rec.probs is None else rec.probs[order],
        metadata=metadata,
    )


def discounted_returns(rollout: BatchRollout, gamma: float) -> FloatArray:
    """Σ_t γ^t r_t per episode."""
    T = rollout.rewards.shape[0]
    disc = float(gamma) ** np.arange(T)
    return (rollout.rewards * rollout.alive * disc[:, None]).sum(axis=0)


# ------------------------------------------------------------------------------------------
# Q-functions and their policies


@runtime_checkable
class QFunction(Protocol):
    """Action values for a batch of observations: ``values(obs) -> [n, n_actions]``."""

    n_actions: int

    def values(self, obs: np.ndarray) -> FloatArray: ...


class LinearQ:
    """Q(s, a) = w_a · φ(s); ``weights`` [n_actions, dim]."""

    kind = "linear"

    def __init__(self, features: FeatureMap, weights: np.ndarray) -> None:
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim != 2 or w.shape[1] != features.dim:
            raise ValueError(f"weights must be [n_actions, {features.dim}], got {w.shape}")
        self.features = features
        self.weights = w
        self.n_actions = int(w.shape[0])

    def values(self, obs: np.ndarray) -> FloatArray:
        return self.features(obs) @ self.weights.T

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"kind": np.array("linear"), "weights": self.weights}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], features: FeatureMap) -> LinearQ:
        return cls(features, arrays["weights"])


def _symlog(y: np.ndarray) -> np.ndarray:
    return np.sign(y) * np.log1p(np.abs(y))


def _symexp(u: np.ndarray) -> np.ndarray:
    return np.sign(u) * np.expm1(np.abs(u))


class MLPQ:
    """Q(s, ·) = unit · symexp(MLP((φ(s) − μ)/σ)), ReLU hidden layers, float64 inference.

    ``layers`` is a list of (W [out, in], b [out]); μ, σ standardise the network input (computed
    on the simulator data the net was trained on).
    """

    kind = "mlp"

    def __init__(
        self,
        features: FeatureMap,
        layers: list[tuple[np.ndarray, np.ndarray]],
        in_mean: np.ndarray,
        in_std: np.ndarray,
        unit: float,
    ) -> None:
        self.features = features
        self.layers = [
            (np.asarray(w, dtype=np.float64), np.asarray(b, dtype=np.float64)) for w, b in layers
        ]
        self.in_mean = np.asarray(in_mean, dtype=np.float64)
        self.in_std = np.asarray(in_std, dtype=np.float64)
        self.unit = float(unit)
        self.n_actions = int(self.layers[-1][0].shape[0])

    def raw(self, obs: np.ndarray) -> FloatArray:
        """The network output (symlog units)."""
        h = (self.features(obs) - self.in_mean) / self.in_std
        for i, (w, b) in enumerate(self.layers):
            h = h @ w.T + b
            if i < len(self.layers) - 1:
                h = np.maximum(h, 0.0)
        return h

    def values(self, obs: np.ndarray) -> FloatArray:
        return self.unit * _symexp(self.raw(obs))

    def to_arrays(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {
            "kind": np.array("mlp"),
            "n_layers": np.array(len(self.layers)),
            "in_mean": self.in_mean,
            "in_std": self.in_std,
            "unit": np.array(self.unit),
        }
        for i, (w, b) in enumerate(self.layers):
            out[f"w{i}"], out[f"b{i}"] = w, b
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], features: FeatureMap) -> MLPQ:
        n = int(arrays["n_layers"])
        layers = [(arrays[f"w{i}"], arrays[f"b{i}"]) for i in range(n)]
        return cls(features, layers, arrays["in_mean"], arrays["in_std"], float(arrays["unit"]))


def q_from_arrays(arrays: dict[str, np.ndarray], features: FeatureMap) -> LinearQ | MLPQ:
    """Rebuild a Q-function saved with ``to_arrays`` (the feature map is passed in)."""
    kind = str(arrays["kind"])
    if kind == "linear":
        return LinearQ.from_arrays(arrays, features)
    if kind == "mlp":
        return MLPQ.from_arrays(arrays, features)
    raise ValueError(f"unknown Q-function kind {kind!r}")


class GreedyQPolicy:
    """argmax_a Q(s, a) (ties to the lowest index); deterministic, so ``act`` uses no randomness."""

    def __init__(self, q: QFunction) -> None:
        self.q = q
        self.n_actions = int(q.n_actions)

    def act(self, obs: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        return np.argmax(self.q.values(obs), axis=1).astype(np.int64)

    def action_probs(self, obs: np.ndarray) -> FloatArray:
        return one_hot(self.act(obs), self.n_actions)


class SoftmaxQPolicy:
    """π(a|s) ∝ exp(P(s, a)/temperature), with preferences P on one of two scales.

    ``scale="value"``: P = Q, temperature in reward units (Mountain Car). ``scale="log"``:
    P = symlog(Q/unit) = sign(Q)·ln(1 + |Q|/unit), the scale an :class:`MLPQ` is fitted on, so
    temperature is a *relative* value gap (0.01 ≈ a 1% difference in Q gives odds e). The log
    scale suits HIV, whose values span decades across states, so that one temperature means
    the same stochasticity everywhere.
    """

    def __init__(self, q: QFunction, temperature: float, *, scale: str = "value") -> None:
        if not float(temperature) > 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        if scale not in ("value", "log"):
            raise ValueError(f"scale must be 'value' or 'log', got {scale!r}")
        self.q = q
        self.temperature = float(temperature)
        self.scale = scale
        self.n_actions = int(q.n_actions)

    def preferences(self, obs: np.ndarray) -> FloatArray:
        if self.scale == "value":
            return self.q.values(obs)
        raw = getattr(self.q, "raw", None)
        if raw is not None:  # MLPQ: already symlog(Q/unit), avoid the round trip
            return raw(obs)
        return _symlog(self.q.values(obs) / float(getattr(self.q, "unit", 1.0)))

    def action_probs(self, obs: np.ndarray) -> FloatArray:
        z = self.preferences(obs) / self.temperature
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)

    def act(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return sample_from_probs(self.action_probs(obs), rng)


def epsilon_greedy_q(q: QFunction, epsilon: float) -> EpsilonGreedy:
    """(1 − ε)·greedy(Q) + ε·uniform."""
    return EpsilonGreedy(GreedyQPolicy(q), int(q.n_actions), float(epsilon))


# ------------------------------------------------------------------------------------------
# progress


@contextlib.contextmanager
def _progress(progress: Progress | None, total: int, label: str) -> Iterator[Any]:
    """Yields ``advance(k=1)``, which reports ``done`` of ``total`` to ``progress`` (if any)."""
    report = progress or no_progress
    done = 0

    def advance(k: int = 1) -> None:
        nonlocal done
        done += k
        report(label, done, total)

    yield advance


# ------------------------------------------------------------------------------------------
# Sarsa(λ) with a linear Q


@dataclass(frozen=True)
class SarsaLambdaConfig:
    """Sarsa(λ) settings; defaults solve Mountain Car with the order-5 Fourier basis."""

    episodes: int = 200
    alpha: float = 0.01  # base step, divided by ‖c‖ per Fourier feature (α_0 = α)
    lam: float = 0.9
    gamma: float = 1.0
    epsilon: float = 0.0  # exploration comes from optimistic (zero) initial weights
    max_steps: int = 1000  # training episodes are cut here (bootstrapped, not terminal)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _per_feature_alpha(features: FeatureMap, alpha: float) -> FloatArray:
    coeffs = getattr(features, "coefficients", None)
    if coeffs is None:
        return np.full(features.dim, alpha)
    norm = np.linalg.norm(np.asarray(coeffs, dtype=np.float64), axis=1)
    return alpha / np.where(norm > 0, norm, 1.0)  # Konidaris et al. 2011, §4


def sarsa_lambda(
    sim: BatchSimulator,
    features: FeatureMap,
    *,
    config: SarsaLambdaConfig | None = None,
    seed: SeedLike = 0,
    progress: Progress | None = None,
) -> tuple[LinearQ, npt.NDArray[np.int64]]:
    """Learn a linear Q by Sarsa(λ) with accumulating traces; returns (Q, episode lengths).

    Online and sequential by nature (each step updates the weights the next action uses), so
    this is the one loop over time steps; each step is a handful of small vector operations.
    """
    cfg = config or SarsaLambdaConfig()
    rng = _rng(seed)
    A, d = int(sim.n_actions), int(features.dim)
    w = np.zeros((A, d))
    alpha = _per_feature_alpha(features, cfg.alpha)
    gl = cfg.gamma * cfg.lam
    lengths = np.zeros(cfg.episodes, dtype=np.int64)

    def choose(q: FloatArray) -> int:
        if cfg.epsilon > 0 and rng.random() < cfg.epsilon:
            return int(rng.integers(A))
        return int(np.argmax(q))

    with _progress(progress, cfg.episodes, "Sarsa(λ)") as advance:
        for ep in range(cfg.episodes):
            obs = sim.reset(1, rng)
            phi = features(obs)[0]
            q = w @ phi
            a = choose(q)
            z = np.zeros((A, d))
            t = 0
            while True:
                nxt, r, term = sim.step(obs, np.array([a]))
                t += 1
                z *= gl
                z[a] += phi
                if term[0]:
                    w += (float(r[0]) - q[a]) * alpha * z
                    break
                phi2 = features(nxt)[0]
                q2 = w @ phi2
                a2 = choose(q2)
                w += (float(r[0]) + cfg.gamma * q2[a2] - q[a]) * alpha * z
                if t >= cfg.max_steps:
                    break
                obs, phi, a = nxt, phi2, a2
                q = w @ phi
            lengths[ep] = t
            advance()
    return LinearQ(features, w), lengths


# ------------------------------------------------------------------------------------------
# fitted Q iteration with an MLP


@dataclass(frozen=True)
class FQIConfig:
    """Fitted Q iteration settings (defaults for the HIV simulator, ≈ 2–4 min on 2 cores)."""

    rounds: int = 5  # data-collection rounds
    episodes_per_round: int = 30
    iterations: int = 15  # FQI iterations after each round
    gradient_steps: int = 150  # Adam steps per iteration (warm-started net)
    batch_size: int = 512
    hidden: tuple[int, ...] = (64, 64)
    lr: float = 1e-3
    gamma: float = 0.98
    epsilon: float = 0.15  # exploration in rounds ≥ 1 (Ernst et al. 2006 used 0.15)
    unit: float = 1e3  # targets are regressed as symlog(y / unit)
    horizon: int | None = None  # training episode length (None: the simulator's horizon)
    # Optionally clip Bellman targets to [r_lo, r_hi]/(1 − γ). Off by default: on HIV the
    # unclipped net over-estimates unseen high-immunity states, an optimism that drives the
    # ε-greedy rounds there; clipping (a priori or data bounds) gave 2–5× worse policies.
    reward_bounds: tuple[float, float] | None = None
    threads: int = 1

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["hidden"] = list(self.hidden)
        d["reward_bounds"] = None if self.reward_bounds is None else list(self.reward_bounds)
        return d


@dataclass
class FQIInfo:
    """Per-round diagnostics of :func:`fitted_q_iteration`."""

    greedy_returns: list[float] = field(default_factory=list)  # one greedy episode per round
    best_round: int = -1
    n_transitions: int = 0


def fitted_q_iteration(
    sim: BatchSimulator,
    features: FeatureMap,
    *,
    config: FQIConfig | None = None,
    seed: int = 0,
    progress: Progress | None = None,
) -> tuple[MLPQ, FQIInfo]:
    """FQI: collect episodes in rounds, regress Q on r + γ max_a' Q(s', a') repeatedly.

    Round 0 uses the uniformly random policy, later rounds ε-greedy w.r.t. the current Q. After
    each round, ``iterations`` FQI iterations run on all data so far, each fitting the
    (warm-started) net for ``gradient_steps`` minibatch Adam steps on targets from a frozen copy.
    Episode ends by the time limit are bootstrapped (no terminal states in HIV). Returns the
    Q of the round whose greedy policy had the best return on the simulator (policy selection
    on public simulator runs: later rounds of neural FQI can degrade, as FQI is not monotone).
    """
    import torch

    cfg = config or FQIConfig()
    ss = np.random.SeedSequence(seed)
    data_ss, torch_ss = ss.spawn(2)
    rng = np.random.default_rng(data_ss)
    gen = torch.Generator().manual_seed(int(torch_ss.generate_state(1, dtype=np.uint64)[0] >> 1))
    A = int(sim.n_actions)
    old_threads = torch.get_num_threads()
    torch.set_num_threads(int(cfg.threads))
    try:
        sizes = [features.dim, *cfg.hidden, A]
        params: list[torch.Tensor] = []
        for fan_in, fan_out in itertools.pairwise(sizes):
            bound = 1.0 / np.sqrt(fan_in)  # PyTorch's default Linear init, from our generator
            w = (torch.rand(fan_out, fan_in, generator=gen, dtype=torch.float64) * 2 - 1) * bound
            b = (torch.rand(fan_out, generator=gen, dtype=torch.float64) * 2 - 1) * bound
            params += [w.requires_grad_(), b.requires_grad_()]
        # Adam (Kingma & Ba 2015, Alg. 1, β = (0.9, 0.999)) written out: constructing
        # torch.optim.Adam imports torch._dynamo and sympy (≈ 2 s), more than the training.
        adam_m = [torch.zeros_like(p) for p in params]
        adam_v = [torch.zeros_like(p) for p in params]
        adam_t = 0

        def adam_step() -> None:
            nonlocal adam_t
            adam_t += 1
            c1, c2 = 1.0 - 0.9**adam_t, 1.0 - 0.999**adam_t
            with torch.no_grad():
                for p, m1, m2 in zip(params, adam_m, adam_v, strict=True):
                    g = p.grad
                    m1.mul_(0.9).add_(g, alpha=0.1)
                    m2.mul_(0.999).addcmul_(g, g, value=0.001)
                    p.sub_(cfg.lr * (m1 / c1) / ((m2 / c2).sqrt() + 1e-8))
                    p.grad = None

        def net(x: torch.Tensor, ps: list[torch.Tensor]) -> torch.Tensor:
            for i in range(0, len(ps), 2):
                x = x @ ps[i].T + ps[i + 1]
                if i < len(ps) - 2:
                    x = torch.relu(x)
            return x

        def snapshot(mu: np.ndarray, sd: np.ndarray) -> MLPQ:
            arrs = [p.detach().numpy().copy() for p in params]
            layers = [(arrs[i], arrs[i + 1]) for i in range(0, len(arrs), 2)]
            return MLPQ(features, layers, mu, sd, cfg.unit)

        obs_l: list[np.ndarray] = []
        act_l: list[np.ndarray] = []
        rew_l: list[np.ndarray] = []
        nxt_l: list[np.ndarray] = []
        info = FQIInfo()
        q: MLPQ | None = None
        best: tuple[float, MLPQ] | None = None
        mu = np.zeros(features.dim)
        sd = np.ones(features.dim)
        total = cfg.rounds * (cfg.iterations + 1)
        with _progress(progress, total, "fitted Q iteration") as advance:
            for rnd in range(cfg.rounds):
                policy: Policy
                if q is None:
                    policy = UniformRandomPolicy(spaces.Discrete(A))
                else:
                    policy = epsilon_greedy_q(q, cfg.epsilon)
                ro = simulate(sim, policy, cfg.episodes_per_round, rng, horizon=cfg.horizon)
                m = ro.alive
                obs_l.append(ro.observations[:-1][m])
                nxt_l.append(ro.observations[1:][m])
                act_l.append(ro.actions[m])
                rew_l.append(ro.rewards[m])
                advance()
                phi = features(np.concatenate(obs_l))
                phi2 = features(np.concatenate(nxt_l))
                acts = torch.from_numpy(np.concatenate(act_l))
                rews = np.concatenate(rew_l) / cfg.unit
                # input standardisation, from simulator data only (kept fixed after round 0)
                if rnd == 0:
                    mu, sd = phi.mean(axis=0), phi.std(axis=0)
                    sd = np.where(sd > 1e-8, sd, 1.0)
                q_lo, q_hi = -np.inf, np.inf
                if cfg.reward_bounds is not None:
                    q_lo = min(cfg.reward_bounds[0] / cfg.unit, 0.0) / (1.0 - cfg.gamma)
                    q_hi = max(cfg.reward_bounds[1] / cfg.unit, 0.0) / (1.0 - cfg.gamma)
                x = torch.from_numpy((phi - mu) / sd)
                x2 = torch.from_numpy((phi2 - mu) / sd)
                n = x.shape[0]
                for _ in range(cfg.iterations):
                    with torch.no_grad():  # targets from the current (then frozen) net
                        out = net(x2, params)
                        q_next = torch.sign(out) * torch.expm1(out.abs())
                        y = torch.from_numpy(rews) + cfg.gamma * q_next.max(dim=1).values
                        if cfg.reward_bounds is not None:
                            y = y.clamp(q_lo, q_hi)
                        target = torch.sign(y) * torch.log1p(y.abs())
                    for _ in range(cfg.gradient_steps):
                        bi = torch.randint(n, (min(cfg.batch_size, n),), generator=gen)
                        pred = net(x[bi], params).gather(1, acts[bi, None])[:, 0]
                        loss = torch.mean((pred - target[bi]) ** 2)
                        loss.backward()
                        adam_step()
                    advance()
                q = snapshot(mu, sd)
                ro = simulate(sim, GreedyQPolicy(q), 1, rng, horizon=cfg.horizon)
                ret = float(discounted_returns(ro, cfg.gamma)[0])
                info.greedy_returns.append(ret)
                if best is None or ret > best[0]:
                    best = (ret, q)
                    info.best_round = rnd
                info.n_transitions = n
    finally:
        torch.set_num_threads(old_threads)
    assert best is not None
    return best[1], info
