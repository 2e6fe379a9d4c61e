"""The off-policy evaluation domains of the GPOPE paper: Mountain Car and the HIV simulator.

``get_domain(name, seed=...)`` returns an :class:`OpeDomain`: discount, feature map, the policy
to evaluate (``target_policy``), the policy that generates the data (``behaviour_policy``), and
``sample(policy, m, seed=...)``, a vectorised simulation of ``m`` trajectories recorded as a
``TrajectoryDataset`` with behaviour probabilities. All of it is simulator-side, i.e. public:
nothing here looks at private data.

Policies (decisions, following the paper §7 and our resolution of its gaps):

* **Mountain Car** (γ = 0.99, horizon 1000, order-5 Fourier basis, 36 features). A linear Q is
  learned by Sarsa(λ) = Q(λ) with the Fourier basis (greedy with optimistic init; see
  ``privrl.rl.linear_q``). The learned policy with 10% exploration, ε-greedy(Q, 0.1), is
  the *behaviour* policy. ``mode="off-policy"`` (default): target = uniform random (paper
  Fig. 3b); ε-greedy covers it, per-step ratios ρ ∈ [1/(3(1 − 2ε/3)), 1/ε] = [0.36, 10].
  ``mode="on-policy"``: target = behaviour (paper Fig. 2a, ρ ≡ 1).
* **HIV** (γ = 0.98, horizon 200 steps of 5 days, ``hiv-log`` features, 7 with the bias). A Q
  is learned by fitted Q iteration with a small MLP. Target = greedy w.r.t. that Q (the policy
  "obtained using Q-learning", paper §7). Behaviour = softmax over the same Q (paper: "softmax
  w.r.t. the optimal Q function"), on the log-value scale the net is fitted on (values span
  decades across states; see ``SoftmaxQPolicy``), with the temperature calibrated so that the
  behaviour takes the greedy action with mean probability ``behaviour_greedy_prob`` (0.8) along
  the target's trajectory. Softmax gives the greedy action the largest probability, ≥ 1/4, so
  the greedy target is covered and ρ ∈ {0} ∪ [1, 4].

Learned Q-functions are trained once per (domain, seed) and cached at
``cache_dir()/ope/<domain>-<seed>.npz`` (a suffix is added for non-default training
configurations); a missing or stale cache is retrained (reported to the `progress` callback).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.data.paths import cache_dir
from privrl.envs import hiv as hiv_env
from privrl.envs import mountain_car as mc_env
from privrl.policies import Policy, UniformRandomPolicy
from privrl.progress import Progress
from privrl.rl.features import FeatureMap, make_features
from privrl.rl.linear_q import (
    MLPQ,
    BatchSimulator,
    FQIConfig,
    GreedyQPolicy,
    LinearQ,
    SarsaLambdaConfig,
    SoftmaxQPolicy,
    discounted_returns,
    epsilon_greedy_q,
    fitted_q_iteration,
    q_from_arrays,
    sarsa_lambda,
    simulate,
    simulate_dataset,
)

__all__ = [
    "DOMAINS",
    "OpeDomain",
    "calibrate_temperature",
    "domain_cache_path",
    "get_domain",
    "policy_from_spec",
]

DOMAINS = ("mountain-car", "hiv")
CACHE_VERSION = 2  # bump whenever training code changes what a seed produces
SeedLike = int | np.random.SeedSequence

MC_GAMMA, HIV_GAMMA = 0.99, 0.98  # GPOPE paper §7 (HIV: Ernst et al. 2006)
MC_TRAIN = SarsaLambdaConfig(episodes=300, alpha=0.005, lam=0.9, gamma=1.0, max_steps=1000)
HIV_TRAIN = FQIConfig()


@dataclass(frozen=True, eq=False)
class OpeDomain:
    """An OPE problem: simulator, features, discount, target and behaviour policies."""

    name: str
    gamma: float
    observation_space: spaces.Box
    n_actions: int
    features: FeatureMap
    target_policy: Any  # StochasticPolicy: act(obs, rng) and action_probs(obs)
    behaviour_policy: Any
    horizon: int
    simulator: BatchSimulator
    q_function: LinearQ | MLPQ
    mode: str
    seed: int
    env_id: str
    softmax_scale: str  # scale of "softmax:TEMP" temperatures ("value" or "log")
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def action_space(self) -> spaces.Discrete:
        return spaces.Discrete(self.n_actions)

    def _policy_name(self, policy: Policy) -> str:
        if policy is self.target_policy and policy is self.behaviour_policy:
            return "target=behaviour"
        if policy is self.target_policy:
            return "target"
        if policy is self.behaviour_policy:
            return "behaviour"
        return getattr(policy, "spec", type(policy).__name__)

    def sample(
        self, policy: Policy, m: int, *, seed: SeedLike, horizon: int | None = None
    ) -> TrajectoryDataset:
        """``m`` independent trajectories of ``policy`` (vectorised), behaviour_probs recorded.

        Same seed, same data. Start states and action draws use separate streams spawned from
        ``seed``. Episodes that reach the horizon are ``truncated``.
        """
        if int(m) < 1:
            raise ValueError(f"m must be >= 1, got {m}")
        ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
        init_ss, act_ss = ss.spawn(2)
        H = int(self.horizon if horizon is None else horizon)
        meta = DatasetMetadata(
            observation_space=self.observation_space,
            action_space=self.action_space,
            env_id=self.env_id,
            discount=self.gamma,
            horizon=H,
            extra={
                "domain": self.name,
                "domain_seed": self.seed,
                "mode": self.mode,
                "policy": self._policy_name(policy),
                "sample_seed": int(seed) if isinstance(seed, int | np.integer) else None,
            },
        )
        return simulate_dataset(
            self.simulator,
            policy,
            int(m),
            np.random.default_rng(act_ss),
            init_rng=np.random.default_rng(init_ss),
            horizon=H,
            metadata=meta,
        )

    def iter_samples(
        self, policy: Policy, m: int, *, seed: int, chunk_size: int = 10_000
    ) -> Iterator[TrajectoryDataset]:
        """``m`` trajectories in chunks (bounded memory, e.g. for ≥ 1e5-trajectory MSPBE
        references); chunk k uses the k-th child of ``SeedSequence(seed)``."""
        sizes = [chunk_size] * (int(m) // chunk_size)
        if int(m) % chunk_size:
            sizes.append(int(m) % chunk_size)
        for size, child in zip(sizes, np.random.SeedSequence(seed).spawn(len(sizes)), strict=True):
            yield self.sample(policy, size, seed=child)


# ------------------------------------------------------------------------------------------
# training and cache


def _config_tag(config: Any) -> str:
    return json.dumps(config.to_dict(), sort_keys=True)


def domain_cache_path(name: str, seed: int, config: Any | None = None) -> Path:
    """``cache_dir()/ope/<name>-<seed>.npz``; non-default training configs get a hash suffix."""
    default = {"mountain-car": MC_TRAIN, "hiv": HIV_TRAIN}[name]
    stem = f"{name}-{int(seed)}"
    if config is not None and _config_tag(config) != _config_tag(default):
        stem += "-" + hashlib.sha256(_config_tag(config).encode()).hexdigest()[:10]
    return cache_dir() / "ope" / f"{stem}.npz"


def _save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Atomic write (write to a temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, path)


def _load_npz(path: Path, tag: str) -> dict[str, np.ndarray] | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, KeyError):
        return None
    if int(arrays.get("version", -1)) != CACHE_VERSION or str(arrays.get("config")) != tag:
        return None
    return arrays


def _trained(
    name: str,
    seed: int,
    config: Any,
    train: Callable[[], tuple[dict[str, np.ndarray], dict[str, Any]]],
    use_cache: bool,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Load the cached training result or train (and cache) it."""
    tag = _config_tag(config)
    path = domain_cache_path(name, seed, config)
    arrays = _load_npz(path, tag) if use_cache else None
    if arrays is None:
        t0 = time.perf_counter()
        arrays, info = train()
        info["train_seconds"] = round(time.perf_counter() - t0, 2)
        arrays = {
            **arrays,
            "version": np.array(CACHE_VERSION),
            "config": np.array(tag),
            "info": np.array(json.dumps(info)),
        }
        if use_cache:
            _save_npz(path, arrays)
    info = json.loads(str(arrays["info"]))
    info["cache_path"] = str(path) if use_cache else None
    return arrays, info


class _Constant:
    """Always action ``a`` (a baseline treatment schedule)."""

    def __init__(self, a: int, n_actions: int) -> None:
        self.a, self.n_actions = int(a), int(n_actions)

    def action_probs(self, obs: np.ndarray) -> np.ndarray:
        p = np.zeros((len(obs), self.n_actions))
        p[:, self.a] = 1.0
        return p

    def act(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return np.full(len(obs), self.a, dtype=np.int64)


def _train_mountain_car(
    seed: int, config: SarsaLambdaConfig, progress: Progress | None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    sim = mc_env.MountainCarBatch(horizon=config.max_steps)
    feats = make_features("fourier:5", sim.observation_space)
    q, lengths = sarsa_lambda(sim, feats, config=config, seed=seed, progress=progress)
    info: dict[str, Any] = {"train_episode_lengths_last20": float(lengths[-20:].mean())}
    for label, pol in (
        ("greedy", GreedyQPolicy(q)),
        ("epsilon_greedy_0.1", epsilon_greedy_q(q, 0.1)),
        ("uniform", UniformRandomPolicy(spaces.Discrete(3))),
    ):
        ro = simulate(sim, pol, 300, np.random.default_rng([seed, 1]))
        info[f"{label}_steps_mean"] = float(ro.lengths.mean())
        info[f"{label}_success_rate"] = float(ro.terminated.mean())
        info[f"{label}_return"] = float(discounted_returns(ro, MC_GAMMA).mean())
    return q.to_arrays(), info


def _train_hiv(
    seed: int, config: FQIConfig, progress: Progress | None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    sim = hiv_env.HIVBatch(horizon=config.horizon or hiv_env.DEFAULT_HORIZON)
    feats = make_features("hiv-log", sim.observation_space)
    q, fqi = fitted_q_iteration(sim, feats, config=config, seed=seed, progress=progress)
    greedy = simulate(sim, GreedyQPolicy(q), 1, np.random.default_rng(0))
    info: dict[str, Any] = {
        "fqi_greedy_returns_per_round": fqi.greedy_returns,
        "fqi_best_round": fqi.best_round,
        "greedy_return": float(discounted_returns(greedy, config.gamma)[0]),
        "greedy_final_state": greedy.observations[-1, 0].tolist(),
    }
    for label, pol in (("never_treat", _Constant(0, 4)), ("always_treat", _Constant(3, 4))):
        ro = simulate(sim, pol, 1, np.random.default_rng(0))
        info[f"{label}_return"] = float(discounted_returns(ro, config.gamma)[0])
    ro = simulate(sim, UniformRandomPolicy(spaces.Discrete(4)), 20, np.random.default_rng(seed))
    info["uniform_return"] = float(discounted_returns(ro, config.gamma).mean())
    # states of the target's (deterministic) trajectory, for calibrating the behaviour softmax
    return {**q.to_arrays(), "target_states": greedy.observations[:-1, 0]}, info


def calibrate_temperature(
    q: MLPQ | LinearQ, states: np.ndarray, greedy_prob: float, scale: str
) -> float:
    """Temperature at which the softmax picks the greedy action with mean probability
    ``greedy_prob`` over ``states`` (bisection on log temperature; the map is monotone)."""
    n_a = int(q.n_actions)
    if not 1.0 / n_a < greedy_prob < 1.0:
        raise ValueError(f"greedy probability must be in (1/{n_a}, 1), got {greedy_prob}")

    def mean_greedy(log_t: float) -> float:
        return float(
            SoftmaxQPolicy(q, np.exp(log_t), scale=scale).action_probs(states).max(1).mean()
        )

    lo, hi = np.log(1e-8), np.log(1e8)
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if mean_greedy(mid) > greedy_prob:
            lo = mid
        else:
            hi = mid
    return float(np.exp(0.5 * (lo + hi)))


# ------------------------------------------------------------------------------------------
# registry

_COMMON = {"mode", "horizon", "gamma", "features", "progress", "train", "cache"}
_ALLOWED = {
    "mountain-car": _COMMON | {"epsilon"},
    "hiv": _COMMON | {"behaviour_greedy_prob", "temperature", "params", "reward", "init_log_std"},
}


def get_domain(name: str, *, seed: int = 0, **overrides: Any) -> OpeDomain:
    """Build the OPE domain ``name`` ("mountain-car" or "hiv"), training its Q once per seed.

    Overrides (all optional): ``mode`` ("off-policy" default, or "on-policy": target =
    behaviour), ``horizon``, ``gamma``, ``features`` (spec for the OPE features, e.g.
    "aggregation:10"), ``progress`` (a `privrl.progress.Progress` callback told how training
    goes; default none), ``train`` (a
    ``SarsaLambdaConfig``/``FQIConfig``; small ones make tests fast), ``cache`` (default True).
    Mountain Car: ``epsilon`` (behaviour exploration, 0.1). HIV: ``behaviour_greedy_prob``
    (0.8) or an explicit log-scale ``temperature``; ``params`` (``HIVParams``, may be
    per-episode), ``reward`` (``RewardWeights``), ``init_log_std`` — these change the sampling
    simulator only; the Q is always trained on the nominal simulator.
    """
    key = str(name).strip().lower()
    if key not in DOMAINS:
        raise ValueError(f"unknown OPE domain {name!r}; choose one of {', '.join(DOMAINS)}")
    bad = sorted(set(overrides) - _ALLOWED[key])
    if bad:
        raise ValueError(
            f"unknown override(s) {bad} for domain {key!r}; allowed: {sorted(_ALLOWED[key])}"
        )
    mode = overrides.get("mode", "off-policy")
    if mode not in ("off-policy", "on-policy"):
        raise ValueError(f"mode must be 'off-policy' or 'on-policy', got {mode!r}")
    progress = overrides.get("progress")
    progress = progress if callable(progress) else None  # (False, or not given: none)
    use_cache = bool(overrides.get("cache", True))
    seed = int(seed)
    if key == "mountain-car":
        return _mountain_car(seed, mode, progress, use_cache, overrides)
    return _hiv(seed, mode, progress, use_cache, overrides)


def _mountain_car(
    seed: int, mode: str, progress: Progress | None, use_cache: bool, ov: dict[str, Any]
) -> OpeDomain:
    gamma = float(ov.get("gamma", MC_GAMMA))
    config = ov.get("train", MC_TRAIN)
    if not isinstance(config, SarsaLambdaConfig):
        raise ValueError("train must be a SarsaLambdaConfig for mountain-car")
    horizon = int(ov.get("horizon", mc_env.DEFAULT_HORIZON))
    sim = mc_env.MountainCarBatch(horizon=horizon)
    arrays, info = _trained(
        "mountain-car",
        seed,
        config,
        lambda: _train_mountain_car(seed, config, progress),
        use_cache,
    )
    q = q_from_arrays(arrays, make_features("fourier:5", sim.observation_space))
    eps = float(ov.get("epsilon", 0.1))
    if not 0.0 < eps <= 1.0:
        raise ValueError(
            f"epsilon must be in (0, 1] so that the behaviour covers every action, got {eps}"
        )
    behaviour = epsilon_greedy_q(q, eps)
    target = UniformRandomPolicy(spaces.Discrete(3)) if mode == "off-policy" else behaviour
    info = {
        **info,
        "behaviour": f"epsilon-greedy:{eps}",
        "target": "uniform" if mode == "off-policy" else f"epsilon-greedy:{eps}",
    }
    return OpeDomain(
        name="mountain-car",
        gamma=gamma,
        observation_space=sim.observation_space,
        n_actions=3,
        features=make_features(ov.get("features", "fourier:5"), sim.observation_space),
        target_policy=target,
        behaviour_policy=behaviour,
        horizon=horizon,
        simulator=sim,
        q_function=q,
        mode=mode,
        seed=seed,
        env_id=mc_env.ENV_ID,
        softmax_scale="value",
        info=info,
    )


def _hiv(
    seed: int, mode: str, progress: Progress | None, use_cache: bool, ov: dict[str, Any]
) -> OpeDomain:
    config = ov.get("train", HIV_TRAIN)
    if not isinstance(config, FQIConfig):
        raise ValueError("train must be an FQIConfig for hiv")
    gamma = float(ov.get("gamma", HIV_GAMMA))
    horizon = int(ov.get("horizon", hiv_env.DEFAULT_HORIZON))
    sim = hiv_env.HIVBatch(
        ov.get("params"),
        horizon=horizon,
        reward=ov.get("reward"),
        init_log_std=float(ov.get("init_log_std", 0.0)),
    )
    arrays, info = _trained(
        "hiv", seed, config, lambda: _train_hiv(seed, config, progress), use_cache
    )
    q = q_from_arrays(arrays, make_features("hiv-log", sim.observation_space))
    if "temperature" in ov:
        temperature = float(ov["temperature"])
        calibration = "given"
    else:
        p = float(ov.get("behaviour_greedy_prob", 0.8))
        temperature = calibrate_temperature(q, arrays["target_states"], p, "log")
        calibration = f"mean greedy-action probability {p} on the target's trajectory"
    behaviour = SoftmaxQPolicy(q, temperature, scale="log")
    target = GreedyQPolicy(q) if mode == "off-policy" else behaviour
    info = {
        **info,
        "behaviour": f"softmax:{temperature:.6g} (log-value scale; {calibration})",
        "target": "greedy" if mode == "off-policy" else "behaviour",
    }
    return OpeDomain(
        name="hiv",
        gamma=gamma,
        observation_space=sim.observation_space,
        n_actions=4,
        features=make_features(ov.get("features", "hiv-log"), sim.observation_space),
        target_policy=target,
        behaviour_policy=behaviour,
        horizon=horizon,
        simulator=sim,
        q_function=q,
        mode=mode,
        seed=seed,
        env_id=hiv_env.ENV_ID,
        softmax_scale="log",
        info=info,
    )


_POLICY_SPECS = "'uniform', 'target', 'behaviour', 'greedy', 'softmax:TEMP' or 'epsilon-greedy:EPS'"


def policy_from_spec(domain: OpeDomain, spec: str) -> Any:
    """A policy over ``domain``'s actions from a CLI string.

    ``uniform``, ``target``, ``behaviour``, ``greedy`` (w.r.t. the domain's learned Q),
    ``softmax:TEMP`` (temperature on the domain's ``softmax_scale``: reward units for
    Mountain Car, log-value units for HIV) and ``epsilon-greedy:EPS``.
    """
    s = str(spec).strip().lower()
    name, _, arg = s.partition(":")
    q = domain.q_function
    if name in ("uniform", "target", "behaviour", "behavior", "greedy") and arg:
        raise ValueError(f"policy spec {spec!r}: {name!r} takes no argument")
    if name == "uniform":
        return UniformRandomPolicy(spaces.Discrete(domain.n_actions))
    if name == "target":
        return domain.target_policy
    if name in ("behaviour", "behavior"):
        return domain.behaviour_policy
    if name == "greedy":
        return GreedyQPolicy(q)
    if name in ("softmax", "epsilon-greedy"):
        try:
            value = float(arg)
        except ValueError:
            raise ValueError(
                f"policy spec {spec!r}: give a number after ':', e.g. '{name}:0.1'"
            ) from None
        if name == "softmax":
            if not value > 0:
                raise ValueError(f"policy spec {spec!r}: the temperature must be positive")
            return SoftmaxQPolicy(q, value, scale=domain.softmax_scale)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"policy spec {spec!r}: epsilon must be in [0, 1]")
        return epsilon_greedy_q(q, value)
    raise ValueError(f"unknown policy spec {spec!r}; use {_POLICY_SPECS}")
