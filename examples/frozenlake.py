"""Learning a private policy from a Gymnasium toy-text environment's logs (FrozenLake-v1 by
default; any toy-text id with a transition table ``env.unwrapped.P`` works).

What it does, for each n in ``--ns``:

1. **Logs.** n episodes of the environment (``is_slippery`` as the environment defines it;
   FrozenLake-v1's default is slippery) from an ε-greedy *behaviour policy*: with probability
   1 − ε the action of an optimal policy, otherwise a uniform action. The optimal policy is
   computed by dynamic programming on the environment's public transition table (a data
   holder's logging policy would be a hand-written or earlier-learned one; any decent policy
   plays the same role). Episodes end as Gymnasium ends them: ``terminated`` in a hole or at
   the goal, ``truncated`` at the environment's time limit (100 steps for FrozenLake). Steps
   are drawn from the same table ``env.unwrapped.P`` that ``env.step`` uses.
2. **Import.** The episodes are written as a CSV of transitions and imported with
   ``privrl data import`` (spaces declared, not inferred).
3. **Learning.** ``privrl train apvi`` (non-private) and ``privrl train dp-apvi`` at each ρ
   in ``--rhos`` (zCDP, reward sums released privately), on the declared horizon H
   (``--horizon``, default 30: longer episodes are truncated, terminated shorter ones padded
   with an absorbing state) with a stationary model (``--stationary``: FrozenLake's dynamics
   do not depend on the step).
4. **Bonus scale on public data.** The pessimism bonus's scale (``--bonus-scale``) is chosen
   from ``--bonus-grid`` on a *separate simulated* set of n episodes (another seed of the same
   simulator and behaviour policy, which a data holder can generate without touching the
   private logs): the scale whose policy has the highest exact value there. The private logs
   are then used once per (method, ρ) with that scale.
5. **Evaluation.** The learned policy's exact value over H steps from the start distribution,
   by dynamic programming on the simulator's table, beside the behaviour policy's and the
   optimal one's; and its mean return over ``--eval-episodes`` plays of at most H steps in the
   Gymnasium environment itself (``privrl.rl.evaluation.evaluate_policy``, which maps the
   learner's absorbing state away).

Rewards stay on the environment's own scale in the logs, the learning and the values. The
public range ``--reward-range LOW HIGH`` is given to the learners (``reward_range``: the privacy
bound of the private reward sums, and the scale of the pessimism bonus); FrozenLake's is [0, 1],
CliffWalking-v1's is [-100, 0] (its optimal return from the start is −13).

Run::

    python examples/frozenlake.py --out runs/frozenlake \
        --plot docs/own-data-learning/frozenlake.png

It prints the markdown table of docs/own-data-learning.md; the run directories and
results.json are under ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_NS = (2000, 10_000, 50_000)
DEFAULT_RHOS = (0.1, 1.0, 10.0)
DEFAULT_GRID = (0.0, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0)


# ------------------------------------------------------------------------ the simulator


@dataclass(frozen=True)
class ToyText:
    """A toy-text environment's public tabular model: P [S, A, S], the reward R [S, A, S]
    (the environment's own), ``done`` [S, A, S] (the transition terminates), the start
    distribution d0 [S] and the environment's time limit."""

    env_id: str
    P: np.ndarray
    R: np.ndarray
    done: np.ndarray
    d0: np.ndarray
    time_limit: int

    @property
    def S(self) -> int:
        return int(self.P.shape[0])

    @property
    def A(self) -> int:
        return int(self.P.shape[1])


def load_env(env_id: str, **kwargs: Any) -> ToyText:
    """The tabular model of a Gymnasium toy-text environment (its ``unwrapped.P`` table)."""
    import gymnasium as gym

    env = gym.make(env_id, **kwargs)
    u = env.unwrapped
    table = getattr(u, "P", None)
    if not isinstance(table, dict):
        raise ValueError(
            f"{env_id} has no tabular model env.unwrapped.P (a toy-text env is needed)"
        )
    S, A = int(env.observation_space.n), int(env.action_space.n)
    P = np.zeros((S, A, S))
    R = np.zeros((S, A, S))
    done = np.zeros((S, A, S), dtype=bool)
    for s in range(S):
        for a in range(A):
            for p, s2, r, d in table[s][a]:
                P[s, a, s2] += p
                R[s, a, s2] = r
                done[s, a, s2] = bool(d)
    d0 = np.asarray(getattr(u, "initial_state_distrib", np.eye(S)[0]), dtype=np.float64)
    limit = env.spec.max_episode_steps if env.spec and env.spec.max_episode_steps else 100
    env.close()
    return ToyText(env_id, P, R, done, d0 / d0.sum(), int(limit))


def q_values(
    env: ToyText, H: int, policy: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Finite-horizon Q [H, S, A] and V [H+1, S] by backward induction: of `policy` (action
    probabilities [H, S, A] or [S, A]) or, with None, of the optimal policy. A terminating
    transition is worth its reward only."""
    r_sa = (env.P * env.R).sum(axis=2)
    cont = env.P * ~env.done  # continuation mass
    V = np.zeros((H + 1, env.S))
    Q = np.zeros((H, env.S, env.A))
    for h in range(H - 1, -1, -1):
        Q[h] = r_sa + cont @ V[h + 1]
        if policy is None:
            V[h] = Q[h].max(axis=1)
        else:
            pi = policy[h] if policy.ndim == 3 else policy
            V[h] = (pi * Q[h]).sum(axis=1)
    return Q, V


def value(env: ToyText, H: int, policy: np.ndarray) -> float:
    """Exact value over H steps from d0 of a policy: actions [H, S] or probabilities."""
    if policy.ndim == 2 and np.issubdtype(policy.dtype, np.integer):
        policy = np.eye(env.A)[policy]  # [H, S, A] one-hot
    return float(env.d0 @ q_values(env, H, policy)[1][0])


def behaviour(env: ToyText, epsilon: float) -> np.ndarray:
    """ε-greedy [S, A] around a stationary optimal policy (the long-horizon optimum's first
    step, computed on the public simulator)."""
    Q, _ = q_values(env, max(env.time_limit, 1))
    greedy = np.eye(env.A)[Q[0].argmax(axis=1)]
    return (1 - epsilon) * greedy + epsilon / env.A


def simulate(env: ToyText, mu: np.ndarray, n: int, seed: int) -> dict[str, np.ndarray]:
    """n episodes of `mu` (stationary [S, A]) as transition rows, vectorised over episodes;
    episodes end at a terminating transition or at the time limit (truncated)."""
    rng = np.random.default_rng(seed)
    s = rng.choice(env.S, size=n, p=env.d0)
    alive = np.ones(n, dtype=bool)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("episode", "timestep", "obs", "action")}
    cols.update({k: [] for k in ("reward", "next_obs", "terminated", "truncated")})
    cum_mu = mu.cumsum(axis=1)
    cum_P = env.P.cumsum(axis=2)
    for t in range(env.time_limit):
        k = np.flatnonzero(alive)
        if k.size == 0:
            break
        sk = s[k]
        a = np.minimum((rng.random(k.size)[:, None] > cum_mu[sk]).sum(axis=1), env.A - 1)
        s2 = np.minimum((rng.random(k.size)[:, None] > cum_P[sk, a]).sum(axis=1), env.S - 1)
        term = env.done[sk, a, s2]
        trunc = ~term & (t == env.time_limit - 1)
        for key, val in (
            ("episode", k),
            ("timestep", np.full(k.size, t)),
            ("obs", sk),
            ("action", a),
            ("reward", env.R[sk, a, s2]),
            ("next_obs", s2),
            ("terminated", term),
            ("truncated", trunc),
        ):
            cols[key].append(val)
        s[k] = s2
        alive[k[term | trunc]] = False
    rows = {key: np.concatenate(v) for key, v in cols.items()}
    order = np.lexsort((rows["timestep"], rows["episode"]))
    return {key: v[order] for key, v in rows.items()}


def write_csv(rows: dict[str, np.ndarray], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = list(rows)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(keys)
        for i in range(len(rows["episode"])):
            w.writerow([int(rows[k][i]) if k != "reward" else float(rows[k][i]) for k in keys])
    return path


def import_csv(csv_path: Path, env: ToyText) -> Path:
    """``privrl data import`` of the CSV, with the spaces declared."""
    from privrl.cli.main import main

    h5 = csv_path.with_suffix(".h5")
    h5.unlink(missing_ok=True)
    code = main(
        [
            "data",
            "import",
            str(csv_path),
            "--out",
            str(h5),
            "-c",
            "episode=episode,timestep=timestep,obs=obs,action=action,reward=reward,"
            "next_obs=next_obs,terminated=terminated,truncated=truncated",
            "--observation-space",
            f"discrete:{env.S}",
            "--action-space",
            f"discrete:{env.A}",
            "--env-id",
            env.env_id,
        ]
    )
    if code:
        raise RuntimeError(f"privrl data import failed (exit {code})")
    return h5


# ------------------------------------------------------------------------ learning


def train(
    h5: Path,
    out: Path,
    *,
    system: str,
    H: int,
    bonus_scale: float,
    rho: float | None,
    seed: int,
    reward_range: tuple[float, float] = (0.0, 1.0),
) -> np.ndarray:
    """One ``privrl train apvi|dp-apvi`` run on the run layer, with the public reward range;
    returns the policy's actions [H, S] (the learner's absorbing state dropped)."""
    from privrl.offline.apvi import FiniteHorizonPolicy
    from privrl.runs.layer import RunSpec, execute

    settings: dict[str, Any] = {
        "system": system,
        "data": str(h5),
        "out": str(out),
        "seed": seed,
        "horizon": H,
        "stationary": True,
        "bonus_scale": bonus_scale,
        "reward_range": list(reward_range),  # public: the environment's reward range
    }
    if rho is not None:
        settings.update(rho=rho, privatize_rewards=True)
    execute(RunSpec.from_mapping(settings), quiet=True)
    return FiniteHorizonPolicy.load(out / "policy.npz").actions


def play(
    run_dir: Path,
    env_id: str,
    env_kwargs: dict[str, Any] | None,
    H: int,
    episodes: int,
    seed: int,
) -> Any:
    """The saved policy's returns over `episodes` plays of at most H steps in the Gymnasium
    environment (``evaluate_policy``; the learner's absorbing state is mapped away)."""
    import gymnasium as gym

    from privrl.rl.evaluation import evaluate_policy

    with gym.make(env_id, **(env_kwargs or {})) as env:
        return evaluate_policy(
            run_dir / "policy.npz", env, episodes=episodes, max_steps=H, seed=seed
        )


def run_metrics(out: Path) -> dict[str, Any]:
    """metrics.json of a finished run (E and the known fraction are released quantities)."""
    return json.loads((out / "metrics.json").read_text())


def choose_scale(
    env: ToyText,
    public_h5: Path,
    out: Path,
    *,
    system: str,
    H: int,
    rho: float | None,
    grid: tuple[float, ...],
    seed: int,
    reward_range: tuple[float, float],
) -> tuple[float, dict[str, float]]:
    """The bonus scale from `grid` with the best exact value on the public simulated set."""
    scores = {}
    for b in grid:
        tag = f"{system}-rho{rho}-b{b}"
        actions = train(
            public_h5,
            out / tag,
            system=system,
            H=H,
            bonus_scale=b,
            rho=rho,
            seed=seed,
            reward_range=reward_range,
        )
        scores[str(b)] = value(env, H, actions)
    best = max(grid, key=lambda b: (scores[str(b)], -b))  # ties: the smaller scale
    return best, scores


def run(
    out: Path,
    *,
    env_id: str = "FrozenLake-v1",
    ns: tuple[int, ...] = DEFAULT_NS,
    rhos: tuple[float, ...] = DEFAULT_RHOS,
    grid: tuple[float, ...] = DEFAULT_GRID,
    H: int = 30,
    epsilon: float = 0.5,
    seed: int = 0,
    reward_range: tuple[float, float] = (0.0, 1.0),
    env_kwargs: dict[str, Any] | None = None,
    eval_episodes: int = 1000,
) -> dict[str, Any]:
    env = load_env(env_id, **(env_kwargs or {}))
    mu = behaviour(env, epsilon)
    opt_actions = q_values(env, H)[0].argmax(axis=2)
    results: dict[str, Any] = {
        "env_id": env_id,
        "env_kwargs": env_kwargs or {},
        "horizon": H,
        "time_limit": env.time_limit,
        "behaviour_epsilon": epsilon,
        "reward_range": list(reward_range),
        "eval_episodes": eval_episodes,
        "optimal_value": value(env, H, opt_actions),
        "behaviour_value": value(env, H, np.broadcast_to(mu, (H, env.S, env.A))),
        "bonus_grid": list(grid),
        "rows": [],
    }
    methods: list[tuple[str, float | None]] = [("apvi", None)] + [("dp-apvi", r) for r in rhos]
    for i, n in enumerate(ns):
        private = import_csv(
            write_csv(simulate(env, mu, n, seed=10 * i + 1), out / f"n{n}" / "logs.csv"), env
        )
        public = import_csv(
            write_csv(simulate(env, mu, n, seed=10 * i + 2), out / f"n{n}" / "public.csv"), env
        )
        for system, rho in methods:
            scale, scores = choose_scale(
                env,
                public,
                out / f"n{n}" / "tune",
                system=system,
                H=H,
                rho=rho,
                grid=grid,
                seed=seed,
                reward_range=reward_range,
            )
            tag = system if rho is None else f"{system}-rho{rho:g}"
            actions = train(
                private,
                out / f"n{n}" / tag,
                system=system,
                H=H,
                bonus_scale=scale,
                rho=rho,
                seed=seed + 1,
                reward_range=reward_range,
            )
            played = play(out / f"n{n}" / tag, env_id, env_kwargs, H, eval_episodes, seed)
            metrics = run_metrics(out / f"n{n}" / tag)
            results["rows"].append(
                {
                    "n": n,
                    "method": system,
                    "rho": rho,
                    "bonus_scale": scale,
                    "public_scores": scores,
                    "value": value(env, H, actions),
                    "return_mean": played.mean,
                    "return_stderr": played.stderr,
                    "E": metrics["E"],
                    "known_fraction": metrics["known_fraction"],
                }
            )
            row = results["rows"][-1]
            print(
                f"n={n} {tag}: bonus scale {scale:g}, value {row['value']:.4f}, "
                f"return {row['return_mean']:.4f} ± {row['return_stderr']:.4f}",
                file=sys.stderr,
            )
    (out / "results.json").write_text(json.dumps(results, indent=2))
    return results


# ------------------------------------------------------------------------ report


def markdown(results: dict[str, Any]) -> str:
    ns = sorted({r["n"] for r in results["rows"]})
    tags = []
    for r in results["rows"]:
        tag = "APVI (non-private)" if r["rho"] is None else f"DP-APVI ρ = {r['rho']:g}"
        if tag not in tags:
            tags.append(tag)
    cell: dict[tuple[str, int], str] = {}
    for r in results["rows"]:
        tag = "APVI (non-private)" if r["rho"] is None else f"DP-APVI ρ = {r['rho']:g}"
        cell[(tag, r["n"])] = f"{r['value']:.3f} (b = {r['bonus_scale']:g})"
    head = "| method | " + " | ".join(f"n = {n:,}" for n in ns) + " |"
    lines = [head, "|---" * (len(ns) + 1) + "|"]
    for tag in tags:
        lines.append(f"| {tag} | " + " | ".join(cell.get((tag, n), "") for n in ns) + " |")
    lines.append(
        f"| behaviour policy (ε = {results['behaviour_epsilon']:g}) | "
        + " | ".join(f"{results['behaviour_value']:.3f}" for _ in ns)
        + " |"
    )
    lines.append(
        "| optimal policy | " + " | ".join(f"{results['optimal_value']:.3f}" for _ in ns) + " |"
    )
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    groups: dict[str, list[tuple[int, float]]] = {}
    for r in results["rows"]:
        tag = "APVI (non-private)" if r["rho"] is None else f"DP-APVI ρ={r['rho']:g}"
        groups.setdefault(tag, []).append((r["n"], r["value"]))
    for tag, pts in groups.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=tag)
    ax.axhline(results["optimal_value"], color="k", ls="--", lw=1, label="optimal")
    ax.axhline(results["behaviour_value"], color="gray", ls=":", lw=1.5, label="behaviour")
    ax.set_xscale("log")
    ns = sorted({r["n"] for r in results["rows"]})
    ax.set_xticks(ns, [f"{n:,}" for n in ns])
    ax.minorticks_off()
    ax.set_xlabel("episodes n")
    ax.set_ylabel(f"exact value over H = {results['horizon']} steps")
    ax.set_title(f"{results['env_id']}: learned policies from ε-greedy logs")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="FrozenLake-v1", help="Gymnasium toy-text id.")
    parser.add_argument("--ns", type=int, nargs="+", default=list(DEFAULT_NS))
    parser.add_argument("--rhos", type=float, nargs="+", default=list(DEFAULT_RHOS))
    parser.add_argument("--bonus-grid", type=float, nargs="+", default=list(DEFAULT_GRID))
    parser.add_argument("--horizon", type=int, default=30)
    parser.add_argument("--epsilon", type=float, default=0.5, help="Behaviour ε-greedy ε.")
    parser.add_argument(
        "--reward-range",
        type=float,
        nargs=2,
        default=[0.0, 1.0],
        metavar=("LOW", "HIGH"),
        help="The environment's public reward range (CliffWalking-v1: -100 0).",
    )
    parser.add_argument(
        "--eval-episodes", type=int, default=1000, help="Plays of each learned policy."
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/frozenlake"))
    parser.add_argument("--plot", type=Path, default=None, help="Where to write the PNG.")
    args = parser.parse_args(argv)
    results = run(
        args.out,
        env_id=args.env,
        ns=tuple(args.ns),
        rhos=tuple(args.rhos),
        grid=tuple(args.bonus_grid),
        H=args.horizon,
        epsilon=args.epsilon,
        seed=args.seed,
        reward_range=tuple(args.reward_range),
        eval_episodes=args.eval_episodes,
    )
    plot(results, args.plot or args.out / "frozenlake.png")
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
