"""A team's own CartPole-v1 logs, from a CSV to a private deep policy and its evaluation.

What it does (docs/own-data-learning.md, "Deep policies from your own logs"):

1. **Logs.** ``--episodes`` episodes of Gymnasium's CartPole-v1 with raw rewards (1 per step),
   from a behaviour policy a team might run: a hand-written balancing rule (push the cart
   towards the side the pole falls to, ``θ + 0.5·θ̇ > 0``) that takes a uniform random action
   with probability ``--epsilon``. Episodes end as Gymnasium ends them (``terminated`` when
   the pole falls, ``truncated`` at 500 steps). They are written as a CSV of transitions, one
   row per step, as a logging system would export them.
2. **Import.** ``privrl data import`` with the spaces declared (not inferred from the data),
   the environment id, one privacy unit per episode (``--unit episode``) and the declared
   number of units (``--units``, the count the data holder publishes).
3. **Learning.** ``privrl train dp-sgd --non-private`` (no expert ids or budget needed) and
   ``privrl train dp-sgd --epsilon E`` (expert-level DP-SGD where each episode is its own
   expert: (ε, δ)-DP for one episode under add/remove).
4. **Evaluation.** ``privrl eval`` rolls each saved ``learner.pt`` out in CartPole-v1.

Every step is a privrl command; the script prints each one before it runs it (in-process,
through ``privrl.cli.main.main``) and stops at the first that fails. Run::

    python examples/cartpole_own_logs.py --out runs/cartpole

``--episodes``, ``--steps``, ``--private-steps`` and ``--eval-episodes`` set the size;
``tests/examples/test_cartpole_own_logs.py`` runs it tiny.
"""

from __future__ import annotations

import argparse
import csv
import shlex
import sys
from pathlib import Path

import numpy as np

OBS = ("x", "x_dot", "theta", "theta_dot")
COLUMNS = (
    "episode=episode,timestep=timestep,obs=" + "|".join(OBS) + ",action=action,reward=reward,"
    "next_obs=" + "|".join(f"next_{c}" for c in OBS) + ",terminated=terminated,"
    "truncated=truncated"
)


def write_logs(path: Path, episodes: int, epsilon: float, seed: int) -> dict[str, float]:
    """Roll the ε-perturbed balancing rule out in CartPole-v1 and write one CSV row per step;
    returns the behaviour policy's mean return and length (what the team's logs show)."""
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(seed)
    returns = []
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["episode", "timestep", *OBS, "action", "reward",
                      *(f"next_{c}" for c in OBS), "terminated", "truncated"])  # fmt: skip
        for ep in range(episodes):
            obs, _ = env.reset(seed=int(rng.integers(2**31)))
            total, t = 0.0, 0
            while True:
                if rng.random() < epsilon:
                    action = int(rng.integers(2))
                else:
                    action = int(obs[2] + 0.5 * obs[3] > 0)
                nxt, reward, terminated, truncated, _ = env.step(action)
                out.writerow([ep, t, *(f"{v:.6g}" for v in obs), action, f"{reward:g}",
                              *(f"{v:.6g}" for v in nxt), terminated, truncated])  # fmt: skip
                total += float(reward)
                t += 1
                obs = nxt
                if terminated or truncated:
                    break
            returns.append(total)
    env.close()
    return {"return_mean": float(np.mean(returns)), "episodes": episodes}


def commands(
    out: Path,
    *,
    episodes: int,
    steps: int,
    private_steps: int,
    epsilon: float,
    batch_size: int,
    hidden: str,
    eval_episodes: int,
    train_eval: bool,
) -> list[list[str]]:
    """The privrl commands of the walkthrough, in order (paths under `out`)."""
    logs, data = out / "logs.csv", out / "logs.h5"
    evals = ["--evals", "1", "--eval-episodes", str(eval_episodes)] if train_eval else ["--no-eval"]
    common = ["--data", str(data), "--hidden", hidden, "--batch-size", str(batch_size)]
    return [
        ["data", "import", str(logs), "--out", str(data), "--columns", COLUMNS,
         "--observation-space", "box:-4.8:4.8:4", "--action-space", "discrete:2",
         "--env-id", "CartPole-v1", "--unit", "episode", "--units", str(episodes)],
        ["data", "info", str(data)],
        ["train", "dp-sgd", *common, "--non-private", "--steps", str(steps), *evals,
         "--out", str(out / "dp-sgd-non-private")],
        ["train", "dp-sgd", *common, "--epsilon", str(epsilon), "--steps", str(private_steps),
         *evals, "--out", str(out / "dp-sgd")],
        ["eval", str(out / "dp-sgd-non-private" / "learner.pt"), "--env", "CartPole-v1",
         "--episodes", str(eval_episodes), "--out", str(out / "eval-non-private")],
        ["eval", str(out / "dp-sgd" / "learner.pt"), "--env", "CartPole-v1",
         "--episodes", str(eval_episodes), "--out", str(out / "eval-private")],
    ]  # fmt: skip


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/cartpole"))
    parser.add_argument("--episodes", type=int, default=500)
    parser.add_argument("--behaviour-epsilon", type=float, default=0.3)
    parser.add_argument("--steps", type=int, default=1500, help="non-private training steps")
    parser.add_argument("--private-steps", type=int, default=1500)
    parser.add_argument("--epsilon", type=float, default=5.0, help="privacy budget ε")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--hidden", default="64,64")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument(
        "--train-eval", action="store_true", help="also evaluate during training (slower)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from privrl.cli.main import main as privrl

    args.out.mkdir(parents=True, exist_ok=True)
    logs = args.out / "logs.csv"
    behaviour = write_logs(logs, args.episodes, args.behaviour_epsilon, args.seed)
    print(
        f"wrote {logs}: {args.episodes} episodes; behaviour policy's mean return "
        f"{behaviour['return_mean']:.1f}",
        flush=True,
    )
    for cmd in commands(
        args.out,
        episodes=args.episodes,
        steps=args.steps,
        private_steps=args.private_steps,
        epsilon=args.epsilon,
        batch_size=args.batch_size,
        hidden=args.hidden,
        eval_episodes=args.eval_episodes,
        train_eval=args.train_eval,
    ):
        print("$ privrl " + shlex.join(cmd), flush=True)
        code = privrl(cmd)
        if code != 0:
            print(f"privrl exited with code {code}", file=sys.stderr)
            return code
    return 0


if __name__ == "__main__":
    raise SystemExit(run())
