"""One-run auditing of PRIMORL's TDP model-ensemble training (Steinke, Nasr & Jagielski 2023).

The audited mechanism is PRIMORL's private core as `privrl.primorl.dp_fedavg` runs it (paper
000, Algorithm 2): every round Poisson-samples the trajectories at rate q
(`sample_clients`), trains each sampled one locally from θ(t) with its cumulative
displacement clipped to C after every local step (`local_displacements`), and adds
N(0, (zC)² I) to the sum before dividing by qK (`aggregate`, noise drawn by
`privrl.privacy.mechanisms.privatize_sum_torch`) — the production trainer
`train_dp_fedavg` itself (T rounds of `dp_fedavg_round`), without a public split (identity
normalisers, every member an elite). Unit: one trajectory, add/remove; the claimed ε is the
report that trainer's own accountant call wrote for those T rounds.

Training thousands of ensembles for a many-run audit is out of reach on a small machine, so
the audit runs ONCE: m canary trajectories, each included independently with probability ½
in the training set, then one guess per canary from the released ensemble (abstaining on the
middle). Steinke et al. 2023 (Thm. 3.3, `privrl.audit.bounds.one_run_epsilon`) turn the
number of correct guesses into an ε lower bound at the run's δ.

Canaries. The model's inputs are (s, a) with s ∈ R^(m + d): the background's `d` coordinates
are a random walk, its first m coordinates are always 0. Canary j is a one-step trajectory
whose state is `scale`·e_j and whose reward is `reward` (far from the background's). A weight
of the first layer is moved by a client only through its input coordinate, so the row of w0
that reads coordinate j is moved by canary j alone (weight decay off: its gradient d·W would
move every row): the canary's update dominates a direction no other unit uses, and a large
`scale` puts most of its clipped norm there. Two membership statistics on the released θ_T:

* ``loss`` — the released ensemble's loss (the Gaussian NLL it is trained on, summed over
  members) on the canary's own transition; lower loss ⇒ guess "in" (Carlini et al. 2022 use
  the same signal against models).
* ``gradient`` — the projection of θ_T − θ_0 on the canary's own clipped update at θ_0,
  restricted to its private row of w0 (the auditor recomputes that update with
  `local_displacements`: it knows the canary and θ_0, both public here); larger ⇒ "in". This
  is the gradient canary of Nasr et al. 2021, driven through the system's own local training.

The non-private twin is the same training with z = 0 (the paper's NO NOISE variant, C kept):
its report says ε = ∞ and both statistics separate the canaries. At small m the one-run bound
is loose by design: r guesses, all correct, show at most a fixed ε (3.47 for r = 100 of
m = 1000 at δ = 10⁻⁵, 2.55 for 40 of 200), so it cannot tell how tight a large claim is; it
is a bound on the whole T-round release, not on one round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from privrl.audit.dpsgd import OneRunAudit
from privrl.config import ConfigError
from privrl.privacy.noise import NoiseSource

__all__ = ["PrimorlAuditSetup", "audit_primorl_one_run", "n_params", "primorl_plan"]

Statistic = Literal["loss", "gradient"]


@dataclass(frozen=True)
class PrimorlAuditSetup:
    """The audit's public scale: m canaries, `background` trajectories of `length` steps in
    `dim` coordinates, the ensemble (`members` × one hidden layer of `hidden` units), the canary
    state's `scale` and `reward`; `canary` ``worst`` (one step from `scale`·e_j), ``random``
    (drawn like a background trajectory, `_random_canaries`) or ``file`` with `file` the m
    trajectories of ``--canary FILE`` (`privrl.audit.canary.load_one_run_canaries`, one
    episode each, 1 + `dim` inputs), each placed on its own coordinate j as ``worst``'s."""

    canaries: int = 200
    background: int = 50
    length: int = 8
    dim: int = 2
    members: int = 2
    hidden: int = 16
    scale: float = 100.0
    reward: float = 5.0
    canary: str = "worst"
    file: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.file is not None:
            if self.canary != "file" or len(self.file) != self.canaries:
                raise ConfigError(
                    "canaries",
                    f"is {self.canaries}: a file canary holds that many trajectories "
                    "(canary='file')",
                )
        elif self.canary not in ("worst", "random"):
            raise ConfigError("canary", f"must be 'worst' or 'random', got {self.canary!r}")
        for name in ("canaries", "length", "dim", "members", "hidden"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.canaries < 2:
            raise ValueError(f"canaries must be >= 2, got {self.canaries}")
        if self.background < 0:
            raise ValueError(f"background must be >= 0, got {self.background}")
        for name in ("scale", "reward"):
            v = float(getattr(self, name))
            if not math.isfinite(v):
                raise ValueError(f"{name} must be finite, got {v}")

    @property
    def units(self) -> int:
        """K: the declared number of trajectories (background plus every canary)."""
        return self.background + self.canaries


def primorl_plan(
    *,
    noise_multiplier: float | None,
    target_epsilon: float | None,
    delta: float,
    rate: float,
    clip: float,
    rounds: int,
    units: int,
    local_lr: float,
    local_batch: int = 16,
) -> Any:
    """PRIMORL's `DpFedAvgPlan` for the audit (every value a flag of the audit: public);
    `noise_multiplier` 0 is the non-private twin (NO NOISE)."""
    from privrl.primorl.dp_fedavg import DpFedAvgConfig, plan_dp_fedavg

    config = DpFedAvgConfig(
        noise_multiplier=noise_multiplier,
        target_epsilon=target_epsilon,
        delta=delta,
        sampling_rate=rate,
        clip_norm=clip,
        max_rounds=rounds,
        n_units=units,
        local_batch=local_batch,
        local_epochs=1,
        local_lr=local_lr,
    )
    return plan_dp_fedavg(config)


def _random_canaries(setup: PrimorlAuditSetup, rng: np.random.Generator) -> list[Any]:
    """``random`` canary trajectories, drawn from the background's public generator: a random
    walk of `length` steps in the last `dim` coordinates, uniform actions, reward −s₀²."""
    m, d = setup.canaries, setup.dim
    out = []
    for _ in range(m):
        s = np.zeros((setup.length + 1, m + d), np.float32)
        s[:, m:] = np.cumsum(rng.normal(0.0, 0.3, size=(setup.length + 1, d)), axis=0)
        a = rng.uniform(-1.0, 1.0, size=(setup.length, 1)).astype(np.float32)
        out.append((s, a, -np.square(s[:-1, m])))
    return out


def _file_canaries(setup: PrimorlAuditSetup) -> list[Any]:
    """``file`` canaries as (states [T + 1, m + dim], actions [T, 1], rewards [T]): canary j's
    first input on its own coordinate j, the rest on the background's `dim` coordinates."""
    from privrl.audit.canary import place_on_own_coordinate

    out = []
    for j, (ep,) in enumerate(setup.file):
        s = place_on_own_coordinate(ep, j, setup.canaries)
        out.append((s, ep.actions.astype(np.float32), ep.rewards.astype(np.float32)))
    return out


def _episodes(
    setup: PrimorlAuditSetup,
    included: np.ndarray,
    rng: np.random.Generator,
    drawn: list[Any] | None = None,
) -> Any:
    """The training set: the included canaries (one step each, or their `drawn` trajectories),
    then the background."""
    from privrl.audit.canary import background_walk, synthetic_episode
    from privrl.data.dataset import TrajectoryDataset

    m, d = setup.canaries, setup.dim
    p = m + d
    episodes = []
    for j in np.flatnonzero(included):  # a few hundred short episodes (set-up, not a hot path)
        if drawn is not None:
            episodes.append(synthetic_episode(*drawn[j]))
            continue
        s = np.zeros((2, p), np.float32)
        s[:, j] = setup.scale
        episodes.append(synthetic_episode(s, np.zeros((1, 1), np.float32), setup.reward))
    for _ in range(setup.background):
        s = background_walk(setup.length, m, d, rng)
        a = rng.uniform(-1.0, 1.0, size=(setup.length, 1)).astype(np.float32)
        episodes.append(synthetic_episode(s, a, -np.square(s[:-1, m])))
    return TrajectoryDataset.from_episodes(episodes)


def _canary_inputs(
    model: Any, setup: PrimorlAuditSetup, drawn: list[Any] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every canary's transitions as the model's inputs and targets, canary-major: [m, in] and
    [m, out] for ``worst`` (one transition each), [m·length, ·] for `drawn` canaries."""
    m, p = setup.canaries, setup.canaries + setup.dim
    if drawn is not None:
        obs = np.concatenate([s[:-1] for s, _, _ in drawn])
        nxt = np.concatenate([s[1:] for s, _, _ in drawn])
        act = np.concatenate([a for _, a, _ in drawn])
        rew = np.concatenate([r for _, _, r in drawn]).astype(np.float32)
        return model.inputs(obs, act), model.targets(obs, rew, nxt)
    obs = np.zeros((m, p), np.float32)
    obs[np.arange(m), np.arange(m)] = setup.scale
    act = np.zeros((m, 1), np.float32)
    rew = np.full(m, setup.reward, np.float32)
    return model.inputs(obs, act), model.targets(obs, rew, obs)


def audit_primorl_one_run(
    *,
    plan: Any,
    setup: PrimorlAuditSetup,
    guesses: int,
    statistic: Statistic = "loss",
    confidence: float = 0.95,
    rng: np.random.Generator,
) -> OneRunAudit:
    """ONE PRIMORL training (`train_dp_fedavg`, T = `plan.T_max` rounds) with `setup.canaries`
    canaries each included with probability ½; `guesses`/2 "in" guesses on the best scores and
    `guesses`/2 "out" guesses on the worst; the one-run bound at the plan's δ."""
    from privrl.primorl import dp_fedavg as fed
    from privrl.primorl.dynamics import DynamicsConfig, DynamicsModel

    if statistic not in ("loss", "gradient"):
        raise ConfigError("statistic", f"must be 'loss' or 'gradient', got {statistic!r}")
    m, r = setup.canaries, int(guesses)
    if not (2 <= r <= m) or r % 2:
        raise ConfigError("guesses", f"must be even and in [2, canaries = {m}], got {r}")
    if plan.K != setup.units:
        raise ValueError(f"the plan's K = {plan.K} must be the audit's {setup.units} trajectories")
    seeds = rng.spawn(4)
    config = DynamicsConfig(hidden=(setup.hidden,), members=setup.members, weight_decay=False)
    model = DynamicsModel(
        m + setup.dim, 1, config, seed=int(seeds[0].integers(0, 2**31 - 1))
    )  # identity normalisers: the audit's data are public and bounded by construction
    ens = model.ensemble
    layout = fed.EnsembleLayout(ens)
    theta0 = layout.flatten(ens.parameters_dict())

    included = rng.integers(0, 2, size=m).astype(bool)
    drawn = _random_canaries(setup, rng.spawn(1)[0]) if setup.canary == "random" else None
    if drawn is not None and statistic == "gradient":
        raise ConfigError(
            "statistic", "gradient needs canary='worst' (its own row of w0), not 'random'"
        )
    if setup.canary == "file":
        drawn = _file_canaries(setup)
    counts = (
        np.ones(m, np.int64)
        if drawn is None
        else np.array([a.shape[0] for _, a, _ in drawn], np.int64)
    )  # transitions of each canary, canary-major
    # the production trainer: T rounds of Algorithm 2 and its own accountant call (no public
    # split: the model's identity normalisers, all members as elites)
    trained = fed.train_dp_fedavg(
        model,
        _episodes(setup, included, seeds[1], drawn),
        plan,
        normalizer="model",
        seed=np.random.SeedSequence(int(seeds[2].integers(0, 2**63 - 1))),
        noise=NoiseSource.insecure(seeds[2]),  # synthetic canaries: repeatable from the seed
    )
    theta = layout.flatten(ens.parameters_dict())  # the released ensemble θ_T
    x, y = _canary_inputs(model, setup, drawn)
    if statistic == "loss":
        # calibrated by the public θ_0 (Watson et al. 2022): how much the release lowered the
        # canary's loss, so the canaries' different starting losses do not mask the signal
        gain = _canary_nll(ens, layout, theta0, x, y) - _canary_nll(ens, layout, theta, x, y)
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        scores = np.add.reduceat(gain, starts)  # summed over each canary's transitions
        layout.load(ens, theta0)
    else:
        own = fed.Clients(x, y, counts, "trajectory")
        deltas = fed.local_displacements(
            ens, theta0, own, np.arange(m), plan, seeds[1], weight_decay=False, reduce="none"
        )  # [m, N, P]: each canary's clipped update at θ_0, as the auditor computes it
        rows = _w0_rows(layout, m)  # [m, N·hidden] flat indices of canary j's row of w0
        disp = (theta - theta0)[0].reshape(-1)
        d = deltas.reshape(m, -1)
        own_rows = torch.gather(d, 1, rows)
        norms = own_rows.norm(dim=1).clamp_min(1e-30)
        scores = ((disp[rows] * own_rows).sum(1) / norms).double().numpy()
    report = trained.report.claim()
    return OneRunAudit.from_guesses(
        scores,
        included,
        guesses=r,
        confidence=confidence,
        report=report,
        delta=plan.delta,
        params={
            "system": "primorl" if plan.private else "primorl (no noise)",
            "confidence": confidence,
            "statistic": statistic,
            "canary": setup.canary,
            "noise_multiplier": plan.z,
            "sampling_rate": plan.q,
            "rounds": plan.T_max,
            "clip": plan.C,
            "audited_release": "the dynamics ensemble's parameters after T DP-FedAvg rounds",
        },
    )


def _canary_nll(
    ens: Any, layout: Any, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> np.ndarray:
    """Each canary's Gaussian NLL of its own transition under the ensemble θ, summed over
    members ([m]; the loss PRIMORL trains on, without the penalties)."""
    layout.load(ens, theta)
    with torch.no_grad():
        mean, logvar = ens.functional_forward(ens.parameters_dict(), x)  # [1, N, m, out]
        nll = ((mean - y).square() * torch.exp(-logvar) + logvar).sum(-1)
    return nll.reshape(ens.members, -1).sum(0).double().numpy()


def _w0_rows(layout: Any, m: int) -> torch.Tensor:
    """Flat indices (member-major, [N·P]) of the w0 entries that read input coordinate j."""
    if layout.names[0] != "w0":
        raise ValueError("expected w0 first in the ensemble layout")
    hidden = layout.shapes["w0"][1]
    members, size = layout.members, layout.size
    j = torch.arange(m)[:, None, None]
    member = torch.arange(members)[None, :, None]
    col = torch.arange(hidden)[None, None, :]
    return (member * size + j * hidden + col).reshape(m, members * hidden)


def n_params(setup: PrimorlAuditSetup) -> int:
    """The released ensemble's trainable parameter count (public: from the set-up's sizes)."""
    layout = _layout(setup)
    return layout.members * layout.size


def _layout(setup: PrimorlAuditSetup) -> Any:
    from privrl.primorl.dp_fedavg import EnsembleLayout
    from privrl.primorl.dynamics import DynamicsConfig, DynamicsModel

    config = DynamicsConfig(hidden=(setup.hidden,), members=setup.members, weight_decay=False)
    return EnsembleLayout(DynamicsModel(setup.canaries + setup.dim, 1, config).ensemble)
