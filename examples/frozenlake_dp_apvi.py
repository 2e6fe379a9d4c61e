"""FrozenLake episodes → DP-APVI → the learned policy's return, on privrl's Python API.

A uniform-random policy logs FrozenLake-v1 episodes into `--out` with a budget ledger; DP-APVI
learns under ρ-zCDP for one episode (replace-one), the spend recorded on the ledger, and its
policy then plays (`evaluate_policy`). FrozenLake's public reward range is [0, 1] (the goal
pays 1). Bonus scale 0: choose it on public data, never on the logs. Run:
`python examples/frozenlake_dp_apvi.py --episodes 20000 --rho 1 --out runs/frozenlake-dp`.
"""

import argparse
from pathlib import Path

import gymnasium as gym

from privrl.data import collect, load_hdf5, save_hdf5
from privrl.offline import DPAPVI
from privrl.policies import UniformRandomPolicy
from privrl.privacy.ledger import BudgetLedger
from privrl.privacy.units import NeighbourRelation, PrivacyUnit
from privrl.rl.evaluation import evaluate_policy

ENV = "FrozenLake-v1"


def main(argv: list[str] | None = None) -> float:
    p = argparse.ArgumentParser(description="DP-APVI on FrozenLake logs.")
    p.add_argument("--episodes", type=int, default=20_000)
    p.add_argument("--rho", type=float, default=1.0, help="zCDP budget ρ.")
    p.add_argument("--horizon", type=int, default=30, help="Steps H of a logged episode.")
    p.add_argument("--out", type=Path, default=Path("runs/frozenlake-dp"))
    args = p.parse_args(argv)
    path = args.out / "frozenlake.h5"
    if not path.exists():  # log once; the ledger holds ε = 20 at δ = 1e-5 for every run on them
        uniform = UniformRandomPolicy(gym.make(ENV).action_space)
        logs = collect(ENV, uniform, n_episodes=args.episodes, seed=0, max_steps=args.horizon)
        unit, relation = PrivacyUnit.TRAJECTORY, NeighbourRelation.REPLACE_ONE
        save_hdf5(logs, path)
        BudgetLedger.init(path, epsilon=20, delta=1e-5, unit=unit, relation=relation)
    ledger, logs = BudgetLedger.for_dataset(path), load_hdf5(path)
    learner = DPAPVI(
        rho=args.rho, privatize_rewards=True, stationary=True, bonus_scale=0.0, reward_range=(0, 1)
    )
    fit = learner.fit(logs, ledger=ledger)
    print(fit.report.summary())
    value = evaluate_policy(fit.policy, ENV, episodes=500, seed=1).mean  # H steps at most
    behaviour = logs.rewards.sum() / logs.n_episodes
    print(f"DP-APVI return {value:.3f}, behaviour {behaviour:.3f}; ledger ε {ledger.spent():.3f}")
    return value


if __name__ == "__main__":
    main()
