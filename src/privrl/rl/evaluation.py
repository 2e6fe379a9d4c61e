"""Evaluating a policy by rolling it out in a Gymnasium environment: mean and spread of the
undiscounted return, and the privacy report the returns inherit.

    from privrl.rl.evaluation import Evaluate, EvalConfig, evaluate_policy

    result = Evaluate(EvalConfig(policy="runs/fl/policy.npz", env="FrozenLake-v1")).estimate()
    result.value, result.metrics["return_std"], result.report.summary()

    evaluate_policy(fit.policy, "FrozenLake-v1", episodes=1000, seed=0).mean   # any object

Every policy form of `privrl.rl.policy_files.load_any_policy` is accepted (a saved
``policy.npz`` / ``policy.pt`` / ``learner.pt[:mode]``, a table ``.npy`` ``[S, A]`` /
``[H, S, A]`` / ``[A]``, ``module:function``), on any registered Gymnasium id (or an env
object, or a factory), checked against the environment's spaces before any rollout
(`bind`):

* a tabular policy needs ``Discrete`` observations and actions of its sizes; one over S + 1
  states on an environment with S states is a policy learned on episodes padded with an
  absorbing state (index S, the state after termination): that row is dropped, since the
  environment never enters it (its episodes end instead). Any other S is refused;
* a context-free table ``[A]`` and user code need ``Discrete`` actions; code is checked on
  each call (shape ``(1, A)``, a distribution);
* a network needs observations of its input size (flattened) and actions of its kind.

Episodes last at most `max_steps` steps: by default a time-indexed policy's horizon H (the
horizon it was learned for), else the environment's time limit, else 1000; with a longer
limit, step h ≥ H uses π_{H-1}.

Privacy: evaluation is post-processing. The policy is the output of a finished run and the
environment a public simulator, so the rollouts read no dataset and spend nothing; their
returns are exactly as private as the policy. The report (`policy_report`) is the policy's
own, carried over: the ``privacy.json`` of the run directory a saved privrl policy file sits
in (beside its ``config.json``), or the report the caller names (`EvalConfig.report`), which
is refused if it records the SHA-256 of another policy file. A policy with no such report (a
``.npy`` table, ``module:function`` code, a file moved out of its run directory) is not
certified: ε = ∞ and a note says why.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from privrl.algorithm import Algorithm, Estimated, Plan
from privrl.config import Config, ConfigError, check, option
from privrl.privacy.report import PrivacyReport
from privrl.privacy.units import NeighbourRelation, PrivacyUnit
from privrl.progress import Progress, no_progress
from privrl.rl.policy_files import (
    LoadedPolicy,
    function_policy,
    load_any_policy,
    table_policy,
    uniform_probs,
)

__all__ = [
    "DEFAULT_MAX_STEPS",
    "EvalConfig",
    "Evaluate",
    "Returns",
    "bind",
    "default_max_steps",
    "evaluate_policy",
    "make_env",
    "policy_report",
]

MAX_EPISODES = 1_000_000
MAX_STEPS = 1_000_000
#: Step limit of an environment with no time limit, for a policy with no horizon.
DEFAULT_MAX_STEPS = 1000
#: The files privrl's training commands write into their run directories: only these take
#: the report beside them (a table or code the user made is nobody's run output).
RUN_OUTPUTS = ("tabular", "sac", "td3", "cql", "bcq")


@dataclass(frozen=True)
class EvalConfig(Config):
    """What to evaluate and where: a policy, a Gymnasium id, the number of episodes."""

    system = "eval"
    policy: str = option(
        ...,
        "--policy",
        help="The policy: policy.npz, policy.pt, learner.pt[:greedy|:epsilon=E|:imitation], a "
        "table FILE.npy (π(a|s) as [S, A], [H, S, A] or [A]), module:function or uniform.",
    )
    env: str = option(..., "--env", help="Gymnasium environment id, e.g. FrozenLake-v1.")
    episodes: int = option(100, "--episodes", "-n", help="Episodes to roll out.")
    max_steps: int | None = option(
        None,
        "--max-steps",
        help="Step limit per episode (default: a tabular policy's horizon H, else the "
        "environment's time limit).",
    )
    report: Path | None = option(  # noqa: RUF009 - option() builds a field
        None,
        "--report",
        help="The privacy.json (or run directory) of the run the policy came from, for a "
        "policy outside its run directory (e.g. a .npy table made from a run's policy); "
        "refused if it records another policy file's SHA-256. Default: the privacy.json "
        "beside a saved privrl policy file, else none (not certified).",
    )

    def validate(self) -> None:
        check(bool(str(self.policy).strip()), "policy", "is required")
        check(bool(str(self.env).strip()), "env", "is required")
        check(
            1 <= self.episodes <= MAX_EPISODES,
            "episodes",
            f"must be in [1, {MAX_EPISODES}], got {self.episodes}",
        )
        check(
            self.max_steps is None or 1 <= self.max_steps <= MAX_STEPS,
            "max_steps",
            f"must be in [1, {MAX_STEPS}], got {self.max_steps}",
        )


# ---------------------------------------------------------------------------------------------
# the environment and the policy on it
# ---------------------------------------------------------------------------------------------

EnvLike = Any  # a Gymnasium id, a gymnasium.Env, or a factory returning one


def make_env(env: EnvLike) -> Any:
    """The environment: ``gymnasium.make(id)`` (privrl's own ``privrl/…`` ids registered
    first), an env object as it is, or a factory's env. `ConfigError` on ``env`` for an id
    Gymnasium does not know or whose package is not installed."""
    if not isinstance(env, str):
        return env() if callable(env) and not hasattr(env, "step") else env
    import gymnasium as gym

    if env.startswith("privrl/"):
        from privrl.envs import register_envs

        register_envs()
    try:
        return gym.make(env)
    except gym.error.Error as exc:
        raise ConfigError(
            "env", f"{env!r} is unknown: not a registered Gymnasium id ({exc})"
        ) from None
    except ModuleNotFoundError as exc:
        raise ConfigError("env", f"{env!r} needs a package that is not installed ({exc})") from None


def env_name(env: EnvLike, made: Any) -> str:
    """The environment's id for messages and reports."""
    if isinstance(env, str):
        return env
    spec = getattr(made, "spec", None)
    return str(spec.id) if spec is not None else type(getattr(made, "unwrapped", made)).__name__


@dataclass(frozen=True)
class Bound:
    """A policy fitted to an environment's spaces: `act(obs, h, rng)` returns the env's own
    action; `absorbing_dropped` when a tabular policy's extra absorbing state was dropped."""

    policy: LoadedPolicy
    act: Callable[[Any, int, np.random.Generator], Any]
    absorbing_dropped: bool = False
    notes: tuple[str, ...] = ()


def bind(policy: LoadedPolicy, env: Any, name: str) -> Bound:
    """Check `policy` against the spaces of `env` (see the module docstring) and fit it to
    them (index offsets of Discrete spaces, the absorbing state); ValueError otherwise."""
    from gymnasium import spaces

    obs_sp, act_sp = env.observation_space, env.action_space
    if policy.kind in ("tabular", "table", "function", "uniform"):
        if not isinstance(act_sp, spaces.Discrete):
            raise ValueError(
                f"a {_form(policy)} needs Discrete actions; {name}'s actions are {act_sp}"
            )
        A, a0 = int(act_sp.n), int(act_sp.start)
        if policy.kind == "uniform":
            policy = replace(
                function_policy("uniform", uniform_probs(A), n_actions=A), kind="uniform"
            )
        elif policy.kind == "function":
            policy = function_policy(policy.spec, _probs(policy), n_actions=A)
        elif policy.n_states is None:
            if policy.n_actions != A:
                raise ValueError(
                    f"the policy is a context-free table over {policy.n_actions} actions; "
                    f"{name} has {A}"
                )
        else:
            return _bind_tabular(policy, obs_sp, A, a0, name)
        inner = policy.act
        return Bound(policy, lambda obs, h, rng: a0 + inner(obs, h, rng))
    _check_network(policy, obs_sp, act_sp, name)
    if isinstance(act_sp, spaces.Discrete) and int(act_sp.start):
        inner, a0 = policy.act, int(act_sp.start)
        return Bound(policy, lambda obs, h, rng: a0 + inner(obs, h, rng))
    return Bound(policy, policy.act)


def _form(policy: LoadedPolicy) -> str:
    forms = {"function": "module:function policy", "table": "table π(a|s)"}
    return forms.get(policy.kind, f"{policy.kind} policy")


def _probs(policy: LoadedPolicy) -> Callable[[np.ndarray], np.ndarray]:
    assert policy.probs is not None
    return policy.probs


def _bind_tabular(policy: LoadedPolicy, obs_sp: Any, A: int, a0: int, name: str) -> Bound:
    """A per-state table on Discrete(S) observations: S states, or S + 1 with the absorbing
    state of padded episodes last (dropped: the environment never enters it)."""
    from gymnasium import spaces

    if not isinstance(obs_sp, spaces.Discrete):
        raise ValueError(
            f"a {_form(policy)} needs Discrete observations and actions; {name} has {obs_sp}"
        )
    S, s0 = int(obs_sp.n), int(obs_sp.start)
    n = int(policy.n_states or 0)
    if n not in (S, S + 1) or policy.n_actions != A:
        raise ValueError(
            f"the policy is for S = {n} states and A = {policy.n_actions} actions; {name} has "
            f"{S} and {A} (a policy over S + 1 states, the last an absorbing state of padded "
            "episodes, is accepted too)"
        )
    notes: tuple[str, ...] = ()
    dropped = n == S + 1
    if dropped:
        assert policy.table is not None
        policy = replace(policy, n_states=S, table=policy.table[..., :S, :])
        notes = (
            f"the policy has S + 1 = {n} states on {name}'s {S}: its last state (index {S}, "
            "the absorbing state of padded episodes) is dropped; the environment never enters "
            "it",
        )
    if policy.kind == "table":
        assert policy.table is not None
        policy = replace(table_policy(policy.spec, policy.table), spec=policy.spec)
    inner = policy.act
    return Bound(policy, lambda obs, h, rng: a0 + inner(int(obs) - s0, h, rng), dropped, notes)


def _check_network(policy: LoadedPolicy, obs_sp: Any, act_sp: Any, name: str) -> None:
    """A network's input size and action kind against the environment's spaces."""
    from gymnasium import spaces

    obs_dim = int(np.prod(obs_sp.shape)) if obs_sp.shape else 1
    if policy.obs_dim is not None and obs_dim != policy.obs_dim:
        raise ValueError(
            f"the policy takes {policy.obs_dim}-dim observations; {name} gives {obs_dim}"
        )
    if policy.act_dim is not None:
        if not isinstance(act_sp, spaces.Box) or int(np.prod(act_sp.shape)) != policy.act_dim:
            raise ValueError(
                f"the policy acts in a {policy.act_dim}-dim box; {name}'s actions are {act_sp}"
            )
    elif policy.n_actions is not None:
        if not isinstance(act_sp, spaces.Discrete) or int(act_sp.n) != policy.n_actions:
            raise ValueError(
                f"the policy has {policy.n_actions} discrete actions; {name}'s are {act_sp}"
            )


def as_loaded(policy: Any) -> LoadedPolicy:
    """What `evaluate_policy` takes as a policy: a spec (str or Path, any form), a
    `LoadedPolicy`, a `FiniteHorizonPolicy`, a table π(a|s) as an array, or any object with
    the batched ``act(obs [n, ...], rng)`` of `privrl.policies.Policy`."""
    from privrl.rl.policy_files import table_problem
    from privrl.rl.tabular_policy import FiniteHorizonPolicy

    if isinstance(policy, LoadedPolicy):
        return policy
    if isinstance(policy, (str, Path)):
        return load_any_policy(policy)
    if isinstance(policy, FiniteHorizonPolicy):
        table = np.eye(policy.n_actions)[policy.actions]
        return replace(table_policy("FiniteHorizonPolicy", table), kind="tabular")
    if isinstance(policy, (np.ndarray, list, tuple)):
        table = np.asarray(policy, dtype=np.float64)
        problem = table_problem(table) if table.ndim in (1, 2, 3) else "has another shape"
        if problem is not None:
            raise ValueError(f"policy array of shape {table.shape}: {problem}")
        return table_policy(f"array of shape {table.shape}", table)
    if callable(getattr(policy, "act", None)):

        def act(obs: Any, h: int, rng: np.random.Generator) -> Any:
            return np.asarray(policy.act(np.asarray(obs)[None], rng))[0]

        return LoadedPolicy("policy", act, None, spec=type(policy).__name__)
    raise TypeError(f"cannot evaluate a {type(policy).__name__}: give a policy spec or object")


def default_max_steps(policy: LoadedPolicy, env: Any, max_steps: int | None = None) -> int:
    """`max_steps` if given, else the policy's horizon H, else the env's time limit, else
    `DEFAULT_MAX_STEPS`."""
    if max_steps is not None:
        return int(max_steps)
    if policy.horizon is not None:
        return int(policy.horizon)
    spec = getattr(env, "spec", None)
    limit = spec.max_episode_steps if spec is not None else None
    return int(limit) if limit else DEFAULT_MAX_STEPS


# ---------------------------------------------------------------------------------------------
# rollouts
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Returns:
    """Undiscounted returns and lengths of the episodes rolled out, with their summary."""

    returns: np.ndarray
    lengths: np.ndarray
    max_steps: int
    absorbing_dropped: bool = False
    notes: tuple[str, ...] = field(default=())

    @property
    def episodes(self) -> int:
        return len(self.returns)

    @property
    def mean(self) -> float:
        return float(self.returns.mean())

    @property
    def std(self) -> float:
        """Sample standard deviation (ddof = 1; 0 for one episode)."""
        return float(self.returns.std(ddof=1)) if self.episodes > 1 else 0.0

    @property
    def stderr(self) -> float:
        return self.std / math.sqrt(self.episodes)

    def metrics(self) -> dict[str, Any]:
        return {
            "return_mean": self.mean,
            "return_std": self.std,
            "return_stderr": self.stderr,
            "episodes": self.episodes,
            "length_mean": float(self.lengths.mean()),
            "max_steps": self.max_steps,
        }


def rollouts(
    act: Callable[[Any, int, np.random.Generator], Any],
    env: Any,
    *,
    episodes: int,
    max_steps: int,
    seed: int,
    progress: Progress = no_progress,
) -> tuple[np.ndarray, np.ndarray]:
    """Returns and lengths of `episodes` rollouts of at most `max_steps` steps (the env's own
    time limit may end them earlier). The env is seeded once with `seed`; the policy's draws
    come from a stream of its own spawned from `seed`. `progress` hears of each episode."""
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    returns = np.zeros(episodes)
    lengths = np.zeros(episodes, dtype=np.int64)
    for i in range(episodes):
        obs, _ = env.reset(seed=seed if i == 0 else None)
        for t in range(max_steps):
            obs, r, terminated, truncated, _ = env.step(act(obs, t, rng))
            returns[i] += float(r)
            lengths[i] = t + 1
            if terminated or truncated:
                break
        progress("rolling out", i + 1, episodes)
    return returns, lengths


def evaluate_policy(
    policy: Any,
    env: EnvLike,
    *,
    episodes: int = 100,
    max_steps: int | None = None,
    seed: int = 0,
) -> Returns:
    """Roll `policy` (any form `as_loaded` takes) out in `env` (a Gymnasium id, an env or a
    factory) for `episodes` episodes of at most `max_steps` steps (default: the policy's
    horizon, else the env's time limit); its returns and lengths. No privacy report: for that,
    `Evaluate`."""
    check(episodes >= 1, "episodes", f"must be >= 1, got {episodes}")
    check(seed >= 0, "seed", f"must be >= 0, got {seed}")
    loaded = as_loaded(policy)
    made = make_env(env)
    try:
        bound = bind(loaded, made, env_name(env, made))
        steps = default_max_steps(loaded, made, max_steps)
        check(steps >= 1, "max_steps", f"must be >= 1, got {steps}")
        returns, lengths = rollouts(bound.act, made, episodes=episodes, max_steps=steps, seed=seed)
    finally:
        if made is not env:
            made.close()
    return Returns(returns, lengths, steps, bound.absorbing_dropped, bound.notes)


# ---------------------------------------------------------------------------------------------
# the privacy report the returns inherit
# ---------------------------------------------------------------------------------------------


def policy_report(
    policy: LoadedPolicy, spec: str, env_id: str, report: Path | None = None
) -> PrivacyReport:
    """The evaluation's privacy report: the report of the run the policy came from, carried
    over by post-processing (`report` if given, checked; else the privacy.json beside a saved
    privrl policy file), or a non-private one (ε = ∞) saying why there is none."""
    from privrl.privacy.ledger import fingerprint

    path = Path(spec) if policy.kind in RUN_OUTPUTS or spec.endswith(".npy") else None
    if path is not None and not path.is_file():  # learner.pt:epsilon=E names a file + mode
        path = Path(str(spec).rsplit(":", 1)[0])
    sha = fingerprint(path) if path is not None and path.is_file() else None
    public = [f"the environment {env_id} (a public simulator)"]
    spent = (
        f"evaluating the policy in {env_id} spends nothing (post-processing of the released "
        "policy in a public simulator: no dataset is read, no release is made)"
    )
    origin: dict[str, Any] = {"policy": spec, "policy_sha256": sha}
    if report is not None:
        own, run = _given_report(Path(report), spec, sha), _run_of(Path(report))
        notes = [_given_note(run, _recorded(own)), spent]
        origin["report"] = str(report)
    elif policy.kind in RUN_OUTPUTS and path is not None:
        run = path.parent
        found, why = _run_report(run)
        if found is None:
            return _uncertified(f"{why}, so nothing states how the policy was trained", public,
                                spent, origin)  # fmt: skip
        own, notes = found, [spent]
    else:
        return _uncertified(_why_none(policy), public, spent, origin)
    origin.update(run=str(run), **_published_source(run))
    for key, value in (own.derived_from or {}).items():  # a report carried over once already
        if key.startswith("trained_") and origin.get(key) is None:
            origin[key] = value
    if not own.private:
        notes.insert(0, "not certified: the policy's own run is not private (ε = ∞)")
    return own.post_processing(system="eval", derived_from=origin, public=public, notes=notes)


def _why_none(policy: LoadedPolicy) -> str:
    if policy.kind == "table":
        return (
            "a .npy table is not a file privrl's training commands write, so no run's privacy "
            "report is taken for it (give the privacy.json of the run it came from as `report`)"
        )
    if policy.kind == "function":
        return (
            "module:function code has no privacy report (give the privacy.json of the run it "
            "came from as `report`)"
        )
    if policy.kind == "uniform":
        return "the uniform policy was learned from no data, so no run's report applies"
    return "the policy has no privacy report"


def _uncertified(why: str, public: list[str], spent: str, origin: dict[str, Any]) -> PrivacyReport:
    return PrivacyReport.non_private(
        PrivacyUnit.TRAJECTORY,
        NeighbourRelation.REPLACE_ONE,
        system="eval",
        public=public,
        notes=[f"not certified: {why}; its evaluation certifies nothing (ε = ∞)", spent],
        accountant="none (the policy has no privacy report)",
    ).post_processing(system="eval", derived_from={**origin, "run": None})


def _run_of(report: Path) -> Path:
    return report if report.is_dir() else report.parent


def _recorded(report: PrivacyReport) -> str | None:
    """The policy SHA-256 a report records (an evaluation's, in ``derived_from``), if any."""
    value = (report.derived_from or {}).get("policy_sha256")
    return str(value) if value else None


def _given_report(report: Path, spec: str, sha: str | None) -> PrivacyReport:
    """The report the caller names (a privacy.json or its run directory), refused if it is
    not readable or records another policy file's SHA-256."""
    file = report / "privacy.json" if report.is_dir() else report
    if not file.is_file():
        raise ConfigError("report", f"{report}: no such privacy report (give a privacy.json)")
    try:
        own = PrivacyReport.from_json(file)
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise ConfigError("report", f"{file} is not a readable privacy report ({exc})") from None
    recorded = _recorded(own)
    if recorded is not None and recorded != sha:
        raise ConfigError(
            "report",
            f"{file} is the report of the policy with SHA-256 {recorded[:12]}…, not of "
            f"{spec} ({'no file' if sha is None else sha[:12] + '…'}); give the report of the "
            "run this policy came from",
        )
    return own


def _given_note(run: Path, sha: str | None) -> str:
    """What the report says of a report the caller named for the policy."""
    checked = (
        "it records the SHA-256 of this policy file"
        if sha is not None
        else "it records no other policy file's SHA-256"
    )
    return (
        f"the report of {run} was named for this policy (`report`): the guarantee stated is "
        f"that run's, as the caller says; privrl checked only that {checked}"
    )


def _run_report(run: Path) -> tuple[PrivacyReport | None, str]:
    """The privacy report of the run directory `run`, or None and why there is none."""
    report, config = run / "privacy.json", run / "config.json"
    if not report.is_file() or not config.is_file():
        missing = "privacy.json" if not report.is_file() else "config.json"
        return None, f"the policy's directory {run} is not a run directory (no {missing})"
    try:
        return PrivacyReport.from_json(report), ""
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        return None, f"its run's {report} is not a readable privacy report ({exc})"


def _published_source(run: Path) -> dict[str, Any]:
    """What the run's config.json published about its system and data (never more)."""
    try:
        config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"trained_by": None}
    if not isinstance(config, dict):
        return {"trained_by": None}
    out: dict[str, Any] = {"trained_by": config.get("system")}
    for key in ("data", "source", "env"):
        if config.get(key) is not None:
            out[f"trained_{key}"] = config[key]
    return out


# ---------------------------------------------------------------------------------------------
# the object
# ---------------------------------------------------------------------------------------------


class Evaluate(Algorithm[EvalConfig]):
    """Roll a policy out in a Gymnasium environment (`EvalConfig`): `plan()` loads the policy,
    checks it against the environment and states the inherited report; `estimate(seed=)`
    returns an `Estimated` whose value is the mean return, with the per-episode `Returns` as
    ``details``. Spends nothing (post-processing), so there is no ledger."""

    Config = EvalConfig

    def plan(self, header: Any = None) -> Plan:
        """Everything public, before any rollout (`header` is unused: there is no dataset)."""
        del header
        c = self.config
        spec = str(c.policy).strip()
        policy = load_any_policy(spec)
        env = make_env(c.env)
        try:
            bound = bind(policy, env, c.env)
            max_steps = default_max_steps(policy, env, c.max_steps)
        finally:
            env.close()
        report = policy_report(policy, spec, c.env, c.report)
        public = {
            "policy": spec,
            "policy_kind": policy.kind,
            "env": c.env,
            "episodes": c.episodes,
            "max_steps": max_steps,
            "absorbing_state_dropped": bound.absorbing_dropped,
        }
        return Plan(report=report, public=public, facts={"bound": bound, "max_steps": max_steps})

    def estimate(
        self, *, seed: int = 0, plan: Plan | None = None, progress: Progress = no_progress
    ) -> Estimated:
        """Roll out `config.episodes` episodes (env seeded with `seed`, the policy's draws
        from a stream spawned from it); `progress` hears of each episode."""
        check(seed >= 0, "seed", f"must be >= 0, got {seed}")
        plan = self.plan() if plan is None else plan
        bound: Bound = plan.facts["bound"]
        env = make_env(self.config.env)
        try:
            returns, lengths = rollouts(
                bound.act,
                env,
                episodes=self.config.episodes,
                max_steps=int(plan.facts["max_steps"]),
                seed=seed,
                progress=progress,
            )
        finally:
            env.close()
        out = Returns(
            returns, lengths, int(plan.facts["max_steps"]), bound.absorbing_dropped, bound.notes
        )
        metrics = {**out.metrics(), "policy_kind": bound.policy.kind}
        metrics["absorbing_state_dropped"] = bound.absorbing_dropped
        return Estimated(value=out.mean, report=plan.report, metrics=metrics, details=out)
