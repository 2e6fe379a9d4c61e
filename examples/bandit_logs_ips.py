"""Your own logged bandit data → private IPS and SNIPS values with confidence intervals.

    python examples/bandit_logs_ips.py [--rows 20000] [--epsilon 1]

The arrays have Open Bandit Pipeline's shapes: per logged decision the `reward`, the
`action` taken, its propensity `pscore` under the logging policy, and `action_dist`
[n, n_actions, 1], the target policy's probabilities. Here a synthetic log stands in for
yours (a uniform logging policy over 4 arms, click rates known, so the truth is known).
Public bounds are chosen without reading the log: rewards are clicks in [0, 1], and the
weight clip W = max π/μ = 0.7/0.25 = 2.8 means no weight is clipped. One row is the privacy
unit (replace-one neighbours); each estimate spends ε at δ = 1e-5.
"""

from __future__ import annotations

import argparse

import numpy as np

from privrl.ope import bandit

CLICK = np.array([0.02, 0.04, 0.05, 0.08])  # true click rate of each arm
TARGET = np.array([0.1, 0.1, 0.1, 0.7])  # the policy to evaluate: mostly arm 3


def make_log(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A log of n decisions by a uniform logging policy (stands in for your data)."""
    rng = np.random.default_rng(seed)
    action = rng.integers(0, len(CLICK), size=n)
    return {
        "reward": (rng.random(n) < CLICK[action]).astype(float),
        "action": action,
        "pscore": np.full(n, 1.0 / len(CLICK)),
        "action_dist": np.broadcast_to(TARGET[None, :, None], (n, len(CLICK), 1)),
    }


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args(argv)
    log = make_log(args.rows)
    bounds = dict(weight_clip=2.8, reward_range=(0.0, 1.0), interval="bhatia-davis")
    print(f"true value of the target policy: {TARGET @ CLICK:.4f}")
    results = {}
    for name in ("ips", "snips"):
        est = getattr(bandit, name)(**log, epsilon=args.epsilon, **bounds)
        plain = bandit.non_private(name, **log, **bounds)  # NOT private: for comparison
        (lo, hi), eps = est.interval, est.report.epsilon
        np_lo, np_hi = plain.ci_low, plain.ci_high
        print(f"{name:5s} private {est.value:.4f} [{lo:.4f}, {hi:.4f}] (ε = {eps:.3g}) · "
              f"non-private {plain.value:.4f} [{np_lo:.4f}, {np_hi:.4f}]")  # fmt: skip
        results[name] = {"value": est.value, "low": lo, "high": hi, "epsilon": eps,
                         "non_private": plain.value}  # fmt: skip
    return results


if __name__ == "__main__":
    main()
