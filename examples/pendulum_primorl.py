"""PRIMORL from Python: a private policy from logs of Gymnasium's Pendulum-v1.

1. Logs: episodes of a behaviour policy (a noisy swing-up controller), recorded with
   `privrl.data.collect` and saved with their ledger: a total budget ε = 10 on these episodes.
2. PRIMORL: DP-FedAvg trains the dynamics ensemble (z calibrated for ε = 5 at T_max rounds,
   one trajectory the privacy unit), then SAC learns in the pessimistic model without the
   data. `fit` reserves the planned report on the ledger before it reads an episode.

No data is declared public here, so the model's input normaliser comes from the declared
observation and action boxes. Any Gymnasium id with Box spaces works the same way. The sizes
are tiny (a smoke run); the paper's scale is `privrl train primorl --variant high`.

    python examples/pendulum_primorl.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from privrl.data import collect, load_hdf5, save_hdf5
from privrl.primorl import PRIMORL, PrimorlConfig
from privrl.privacy.ledger import BudgetLedger


class SwingUp:
    """Torque along the angular velocity (pumps energy), plus Gaussian noise, in [−2, 2]."""

    def act(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        u = 2.0 * np.sign(obs[:, 2:3]) + rng.normal(0.0, 1.0, (len(obs), 1))
        return np.clip(u, -2.0, 2.0).astype(np.float32)


def main(episodes=60, rounds=30, epochs=3, updates=100, z: float | None = None) -> dict:
    """Collect, fit, print; `z` gives the noise multiplier instead of calibrating it for ε."""
    out = Path(tempfile.mkdtemp())
    logs = collect("Pendulum-v1", SwingUp(), n_episodes=episodes, seed=0, progress=False)
    path = save_hdf5(logs, out / "pendulum.h5")
    ledger = BudgetLedger.init(
        path, epsilon=10.0, delta=1e-5, unit="trajectory", relation="add_remove"
    )
    privacy = {"epsilon": 5.0} if z is None else {"noise_multiplier": z}
    config = PrimorlConfig(
        **privacy, steps=rounds, sampling_rate=0.1, trajectories=episodes,  # K, declared
        epochs=epochs, steps_per_epoch=updates, rollout_batch_size=200, eval_episodes=4,
        final_epochs=1,
    )  # fmt: skip
    result = PRIMORL(config).fit(load_hdf5(path), ledger=ledger, seed=0)
    print(result.report.summary())
    m = result.metrics
    print(f"return {m['return_mean']:.1f} ± {m['return_std']:.1f} (ε = {m['epsilon']:.2f})")
    print(f"ledger: {ledger.remaining():.2f} of ε = 10 left (it composes with RDP)")
    return dict(m)


if __name__ == "__main__":
    main()
