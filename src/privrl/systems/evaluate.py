"""`privrl eval POLICY --env ID`: roll a saved privrl policy out in a Gymnasium environment.

Pure post-processing: the policy is the output of a finished run (a private run's policy is a
function of its noisy releases), and the environment is a public simulator, so evaluation
reads no dataset, checks no ledger and spends nothing. Its returns are exactly as private as
the policy, so its privacy.json is the policy's own report carried over (`policy_report`):
the training run's ε, δ, ρ, unit, relation, accountant and releases, its public information
and notes, and ``derived_from`` naming the policy file (with its SHA-256), the run directory
and what that run published about its data (its system, ``data`` / ``source`` / ``env``).

The policy's report is the ``privacy.json`` of the run directory the file sits in (beside
its ``config.json``; where every training command writes its policy). A policy with no
report there (a file moved out of its run directory, a policy written by other code) or
with an unreadable one is not certified: ε = ∞ and a note says why. A non-private run's
policy (`privrl train apvi`, ε = ∞) stays non-private. The report is the one beside the
file: a policy copied into another run's directory would take that run's report, so keep
policies in the directories their runs wrote.

Formats read (what the training commands write; see docs/data.md):

* ``policy.npz`` with ``kind = "privrl.finite_horizon_tabular_policy"`` — a deterministic
  time-dependent tabular policy π_h(s) ``[H, S]`` (`privrl train apvi | dp-apvi`). The
  environment needs ``Discrete(S)`` observations and ``Discrete(A)`` actions of the policy's
  sizes. Episodes last at most H steps by default (the horizon the policy was learned for);
  with a longer ``--max-steps`` step h ≥ H uses π_{H-1}.
* ``policy.pt`` — a SAC or TD3 agent's state (`privrl train mopo | primorl`; the file records
  its kind, sizes, action bounds and config). Acts with its deterministic (mean) action.
* ``learner.pt`` — a discrete-action learner's state (`privrl train expert-dp | dp-sgd`:
  discrete CQL or BCQ; the file records its config). Acts greedily. The same loader gives the
  OPE commands' ``--target-policy DIR/learner.pt`` (`privrl.ope.targets`) its π(a|s) for a
  batch of observations: ``LoadedPolicy.probs`` (the greedy action as a one-hot) and, for
  BCQ, ``LoadedPolicy.imitation`` (the softmax of its behaviour-cloning classifier's logits).

Not policies, refused with a message that says so: PRIMORL's ``model.pt`` (a released dynamics
model), the linear systems' ``policy.npz`` (``kind = "privrl.linear_greedy_q"``: it needs the
feature map it was trained with; evaluate it with `privrl train vapvi ... --env`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privrl.config import RunConfig, check, option
from privrl.privacy.report import PrivacyReport
from privrl.privacy.units import NeighbourRelation, PrivacyUnit
from privrl.rl.policy_files import LoadedPolicy, load_policy
from privrl.runs.system import Plan, PlotSpec, Result, RunContext, Series, System

__all__ = [
    "EvalConfig",
    "EvalSystem",
    "LoadedPolicy",
    "evaluate_policy",
    "load_policy",
    "policy_report",
]

MAX_EPISODES = 1_000_000
MAX_STEPS = 1_000_000


@dataclass(frozen=True)
class EvalConfig(RunConfig):
    """What to evaluate and where: a saved policy, a Gymnasium id, the number of episodes."""

    system = "eval"
    policy: Path = option(  # noqa: RUF009 - option() builds a field
        ..., "--policy", help="Saved privrl policy: policy.npz, policy.pt or learner.pt."
    )
    env: str = option(..., "--env", help="Gymnasium environment id, e.g. FrozenLake-v1.")
    episodes: int = option(100, "--episodes", "-n", help="Episodes to roll out.")
    max_steps: int | None = option(
        None,
        "--max-steps",
        help="Step limit per episode (default: a tabular policy's horizon H, else the "
        "environment's time limit).",
    )

    def validate(self) -> None:
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
# evaluation
# ---------------------------------------------------------------------------------------------


def make_env(env_id: str) -> Any:
    """``gymnasium.make(env_id)``; ValueError naming the id when Gymnasium does not know it."""
    import gymnasium as gym

    try:
        return gym.make(env_id)
    except gym.error.Error as exc:
        raise ValueError(f"unknown --env {env_id!r}: {exc}") from None
    except ModuleNotFoundError as exc:
        raise ValueError(
            f"--env {env_id!r} needs a package that is not installed ({exc})"
        ) from None


def check_fits(policy: LoadedPolicy, env: Any, env_id: str) -> None:
    """Refuse a policy whose spaces do not match the environment's."""
    from gymnasium import spaces

    obs_sp, act_sp = env.observation_space, env.action_space
    if policy.kind == "tabular":
        if not (isinstance(obs_sp, spaces.Discrete) and isinstance(act_sp, spaces.Discrete)):
            raise ValueError(
                f"a tabular policy needs Discrete observations and actions; {env_id} has "
                f"{obs_sp} and {act_sp}"
            )
        if int(obs_sp.n) != policy.n_states or int(act_sp.n) != policy.n_actions:
            raise ValueError(
                f"the policy is for S = {policy.n_states} states and A = {policy.n_actions} "
                f"actions; {env_id} has {int(obs_sp.n)} and {int(act_sp.n)}"
            )
        return
    obs_dim = int(np.prod(obs_sp.shape)) if obs_sp.shape else 1
    if policy.obs_dim is not None and obs_dim != policy.obs_dim:
        raise ValueError(
            f"the policy takes {policy.obs_dim}-dim observations; {env_id} gives {obs_dim}"
        )
    if policy.act_dim is not None:
        if not isinstance(act_sp, spaces.Box) or int(np.prod(act_sp.shape)) != policy.act_dim:
            raise ValueError(
                f"the policy acts in a {policy.act_dim}-dim box; {env_id}'s actions are {act_sp}"
            )
    elif policy.n_actions is not None:
        if not isinstance(act_sp, spaces.Discrete) or int(act_sp.n) != policy.n_actions:
            raise ValueError(
                f"the policy has {policy.n_actions} discrete actions; {env_id}'s are {act_sp}"
            )


def evaluate_policy(
    policy: LoadedPolicy, env: Any, *, episodes: int, max_steps: int, seed: int
) -> dict[str, np.ndarray]:
    """Undiscounted returns and lengths of `episodes` rollouts of at most `max_steps` steps
    (the environment's own time limit may end them earlier). The environment is seeded once
    with `seed`; the policy's randomness (if any) comes from its own stream."""
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    returns = np.zeros(episodes)
    lengths = np.zeros(episodes, dtype=np.int64)
    for i in range(episodes):
        obs, _ = env.reset(seed=seed if i == 0 else None)
        for t in range(max_steps):
            obs, r, terminated, truncated, _ = env.step(policy.act(obs, t, rng))
            returns[i] += float(r)
            lengths[i] = t + 1
            if terminated or truncated:
                break
    return {"returns": returns, "lengths": lengths}


def policy_report(path: Path, env_id: str) -> PrivacyReport:
    """The evaluation's privacy report: the report of the run that wrote the policy at `path`,
    carried over by post-processing, or a non-private one (ε = ∞) saying why there is none."""
    from privrl.privacy.ledger import fingerprint

    path = Path(path)
    run = path.parent
    public = [f"the environment {env_id} (a public simulator)"]
    spent = (
        f"evaluating the policy in {env_id} spends nothing (post-processing of the released "
        "policy in a public simulator: no dataset is read, no release is made)"
    )
    origin: dict[str, Any] = {"policy": str(path), "policy_sha256": fingerprint(path)}
    own, why = _run_report(run)
    if own is None:
        return PrivacyReport.non_private(
            PrivacyUnit.TRAJECTORY,
            NeighbourRelation.REPLACE_ONE,
            system=EvalSystem.name,
            public=public,
            notes=[
                f"not certified: {why}, so nothing states how the policy was trained; its "
                "evaluation certifies nothing (ε = ∞)",
                spent,
            ],
            accountant="none (the policy has no privacy report)",
        ).post_processing(system=EvalSystem.name, derived_from={**origin, "run": None})
    origin.update(run=str(run), **_published_source(run))
    notes = [spent]
    if not own.private:
        notes.insert(0, "not certified: the policy's own run is not private (ε = ∞)")
    return own.post_processing(
        system=EvalSystem.name, derived_from=origin, public=public, notes=notes
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
    import json

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


class EvalSystem(System):
    name = "eval"
    Config = EvalConfig
    data = "none"
    summary = "Evaluate a saved privrl policy in a Gymnasium environment (post-processing)."

    def plan(self, config: Any, header: Any) -> Plan:
        policy = load_policy(config.policy)
        env = make_env(config.env)
        check_fits(policy, env, config.env)
        limit = env.spec.max_episode_steps if env.spec is not None else None
        env.close()
        if config.max_steps is not None:
            max_steps = int(config.max_steps)
        elif policy.horizon is not None:
            max_steps = policy.horizon
        else:
            max_steps = int(limit) if limit else 1000
        report = policy_report(config.policy, config.env)
        public = {
            "policy": str(config.policy),
            "policy_kind": policy.kind,
            "env": config.env,
            "episodes": config.episodes,
            "max_steps": max_steps,
        }
        return Plan(report=report, public=public, facts={"policy": policy, "max_steps": max_steps})

    def run(self, config: Any, data: Any, rng: np.random.Generator, ctx: RunContext) -> Result:
        assert ctx.plan is not None
        policy, max_steps = ctx.plan.facts["policy"], ctx.plan.facts["max_steps"]
        env = make_env(config.env)
        try:
            out = evaluate_policy(
                policy, env, episodes=config.episodes, max_steps=max_steps, seed=ctx.seed
            )
        finally:
            env.close()
        returns, lengths = out["returns"], out["lengths"]
        n = len(returns)
        std = float(returns.std(ddof=1)) if n > 1 else 0.0
        metrics = {
            "return_mean": float(returns.mean()),
            "return_std": std,
            "return_stderr": std / math.sqrt(n),
            "episodes": n,
            "length_mean": float(lengths.mean()),
            "max_steps": max_steps,
            "policy_kind": policy.kind,
        }
        curve = [
            {"episode": i + 1, "return": float(r), "length": int(k)}
            for i, (r, k) in enumerate(zip(returns, lengths, strict=True))
        ]
        running = np.cumsum(returns) / np.arange(1, n + 1)
        plot = PlotSpec(
            name="returns",
            title=f"{config.env}: {policy.kind} policy",
            xlabel="episode",
            ylabel="return",
            series=[
                Series("return", list(range(1, n + 1)), returns.tolist(), style="."),
                Series("running mean", list(range(1, n + 1)), running.tolist()),
            ],
        )
        summary = [
            f"{config.env}: {policy.kind} policy {config.policy}",
            f"return: {metrics['return_mean']:.4f} ± {std:.4f} (std) over {n} episodes "
            f"(± {metrics['return_stderr']:.4f} standard error); mean length "
            f"{metrics['length_mean']:.1f} of at most {max_steps} steps",
        ]
        return Result(
            metrics=metrics,
            privacy=ctx.plan.report,
            curve=curve,
            plots={"returns": plot},
            summary=summary,
        )
