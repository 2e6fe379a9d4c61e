"""PRIMORL's private core: TDP model-ensemble training, i.e. DP-FedAvg with trajectories as users.

The PRIMORL paper's Algorithm 1 = Appendix K, Algorithm 2 (TDP MODEL ENSEMBLE TRAINING) and
Algorithm 3 (ENSEMBLECLIP). One function per box:

``plan_dp_fedavg``       every public parameter (q, z, C, T_max, K, B, E, η, clip mode, δ) with
                         its source (q by default min(1, m/K) from the declared K); z
                         calibrated for a target (ε, δ) at the fixed T_max; the event
                         ``SelfComposed(PoissonSampled(q, Gaussian(z)), T)``; warnings when
                         the declared K is too small for the noise (public facts only).
``sample_clients``       U_t: Poisson sampling of the units with rate q (may be empty; line 5).
``local_displacements``  for every k ∈ U_t at once: local SGD from θ(t) over τ_k's minibatches
                         (B = 16, E = 1, shuffled, last partial batch kept), the cumulative
                         displacement clipped after every step (lines 7–16).
``noisy_update``         Δ̃(t) = (Σ_k Δ_k + N(0, (zC)² I)) / (qK) (lines 18–19).
``server_step``          θ(t+1) = θ(t) + Δ̃(t) (line 19; ``aggregate``), or with server
                         momentum β and step η_s, θ(t) + η_s·m(t), m(t) = β·m(t−1) + Δ̃(t),
                         or FedAdam (Reddi et al. 2021) with Δ̃(t) as the pseudo-gradient.
``dp_fedsgd``            DP-FedSGD (McMahan et al. 2018) as a named configuration of the
                         same round: one full-trajectory SGD step of η = 1 per client.
``dp_fedavg_round``      the steps above.
``train_dp_fedavg``      T_max rounds fixed in advance, early stopping on the public split,
                         the privacy report for the T rounds actually run.

Privacy. Unit: one trajectory, or with ``unit="user"`` all trajectories of one user (one
client per user: Poisson sampling over users, sensitivity per user). Relation: add/remove
one unit. A client's update Δ_k = θ_k − θ(t) of the whole ensemble is clipped after every
local step: flat, member i to C/√N; per-layer, tensor ℓ of member i to C/√(N·L), L = number
of trainable tensors per member (``privrl.privacy.clipping.ensemble_clip``). Either way
‖Δ_k‖₂ ≤ C jointly over the ensemble, and a unit's whole contribution to one round is its one
Δ_k, so adding or removing a unit moves Σ_{k∈U_t} Δ_k by at most C. Each round releases
(Σ + N(0, (zC)² I))/(qK): a Gaussian mechanism with noise multiplier z on a Poisson-sampled
sum (McMahan et al. 2018, Thm 1; the paper's Thm 4.2); the public rescaling by 1/(qK) is
post-processing, which is why the std of the noise on θ is zC/(qK). T rounds compose to
``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), T)``, accounted by
dp-accounting (PLD by default, RDP beside it). Every trainable parameter of the ensemble —
the learnable log-variance bounds included — is in Δ_k and gets the noise; frozen parameters
never change and are not released as a function of the data.

Decisions (spec) and departures:

* K, the number of units in the denominator qK, is a declared public value (a flag, or
  ``metadata.extra["n_trajectories"]`` / ``["n_users"]``), never counted from the private
  data: under add/remove the true count differs between neighbours, and dividing by it would
  make the update (and a published config) depend on it. The guarantee does not depend on K
  (the sensitivity C/(qK) and the noise zC/(qK) scale together); a wrong K only rescales the
  step.
* The default sampling rate comes from the declared K: q = min(1, m/K), m = 30 expected
  units per round (the paper's Pendulum and cartpole setting, q = 10⁻³ at K = 30,000; a task
  preset may set another m, e.g. HalfCheetah's 20 = 10⁻² × 2,000). A fixed q would give a
  small dataset a fraction of a unit per round: K = 50 at q = 10⁻³ samples 0.05 per round.
  The plan warns (`DpFedAvgPlan.small_data_warnings`, also in the report's notes) when qK < 1
  or when the noise std per coordinate of the averaged update, zC/(qK), reaches C; it warns
  rather than refuses, since such a run is still private and its model may be post-processed
  by a user who knows what they are doing. Only public values enter: K declared, q, z, C.
* T_max is fixed in advance (its ε is the a-priori guarantee); early stopping looks only at
  the declared-public split; the report states ε for the T rounds actually run.
* Normalisers come from the public split or from known bounds (the model's), elites are
  chosen on the public split, or all members are kept.
* A client whose local training produces a non-finite displacement contributes zero (the
  clip's ``nonfinite="zero"``) instead of stopping the run: an error that happens only for
  some data would itself leak.
* Local optimiser: SGD (paper); Adam reset for every client is an option (spec).

Vectorisation. The sampled clients are stacked as copies of the ensemble,
``[copies, members, ...]``, every trainable tensor of a member a view of one flat buffer
``[copies, members, P]``; each local step is one batched forward/backward (``baddbmm`` over
copies × members), one in-place SGD update, one in-place clip (``ensemble_clip_``), with the
weight-decay gradient d·W added directly. Clients are sorted by their number of local steps,
so the clients still active at step j are a prefix of the stack (finished ones cost nothing);
the last partial batch is a row mask. Full-size buffers are preallocated per chunk: fresh
multi-megabyte tensors every step cost page faults that made the step several times slower.
Copies are processed in chunks of at most ``CHUNK_ELEMENTS`` stacked parameters
(`auto_chunk_copies`): Pendulum's 30 sampled clients (3 × 2×64) fit in one chunk; at
HalfCheetah sizes (7 × 4×200, 0.93M parameters per client) the step is bound by the
per-client matmuls and memory traffic, and stacking all 30 clients (111 MB per buffer) is
slower than chunks of 2. Measured ratios: benchmarks/bench_primorl_step.py. Local Adam's step
is one fused pass over the flat buffers where torch has it (`privrl.primorl.fast_local`;
1.2–1.4× per round, benchmarks/bench_primorl_cpu_wins.py).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from dp_accounting import dp_event

from privrl.config import ConfigError
from privrl.data.dataset import TrajectoryDataset, Transitions
from privrl.nn.ensemble import GaussianEnsemble
from privrl.nn.normalizer import Normalizer
from privrl.primorl import fast_local
from privrl.primorl.dynamics import DynamicsModel, holdout_mse, select_elites
from privrl.privacy.accounting import (
    calibrate_noise_multiplier,
    sampled_gaussian_event,
)
from privrl.privacy.accounting import epsilon as accountant_epsilon
from privrl.privacy.clipping import ensemble_clip, ensemble_clip_
from privrl.privacy.mechanisms import privatize_sum_torch
from privrl.privacy.noise import NoiseSource
from privrl.privacy.public import PublicParameterError, PublicParameters
from privrl.privacy.release import Release
from privrl.privacy.report import PrivacyReport
from privrl.privacy.sampling import poisson_sample
from privrl.privacy.units import NeighbourRelation, PrivacyUnit

__all__ = [
    "DEFAULTS",
    "FIELDS",
    "NOISE_TO_CLIP_WARNING",
    "RELATION",
    "Clients",
    "DpFedAvgConfig",
    "DpFedAvgPlan",
    "DpFedAvgResult",
    "EnsembleLayout",
    "MissingPublicParameter",
    "SmallDataWarning",
    "aggregate",
    "auto_chunk_copies",
    "client_batches",
    "default_rate",
    "dp_fedavg_round",
    "dp_fedsgd",
    "local_displacements",
    "local_displacements_loop",
    "noisy_update",
    "plan_dp_fedavg",
    "sample_clients",
    "server_buffer",
    "server_step",
    "train_dp_fedavg",
]

RELATION = NeighbourRelation.ADD_REMOVE
ClipMode = Literal["flat", "per_layer"]
Unit = Literal["trajectory", "user"]
Backend = Literal["pld", "rdp"]
LocalOptimizer = Literal["sgd", "adam"]
ServerOptimizer = Literal["sgd", "adam"]

# Spec / paper values (Table 8, "TDP ensemble training"): public defaults. The sampling rate
# has no fixed default: q = min(1, m/K) with m expected units per round (`default_rate`).
DEFAULTS: dict[str, Any] = {
    "delta": 1e-5,
    "units_per_round": 30,
    "clip_mode": "flat",
    "local_batch": 16,
    "local_epochs": 1,
    "local_lr": 1e-3,
}

# Float32 elements of one chunk's stacked parameters (copies × members × params), chosen
# from benchmarks/bench_primorl_step.py: see `auto_chunk_copies`.
CHUNK_ELEMENTS = 2_000_000

# Public metadata key (in ``metadata.extra``) that may declare K, per unit.
_K_KEY = {"trajectory": "n_trajectories", "user": "n_users"}
_PLURAL = {"trajectory": "trajectories", "user": "users"}
# The config field each public parameter comes from: errors name it (the command line maps a
# field to its flag). `plan_dp_fedavg`'s `fields` renames them for a caller's own config.
FIELDS: dict[str, str] = {
    "delta": "delta",
    "sampling_rate": "sampling_rate",
    "clip_norm": "clip_norm",
    "clip_mode": "clip_mode",
    "max_rounds": "max_rounds",
    "n_units": "n_units",
    "local_batch": "local_batch",
    "local_epochs": "local_epochs",
    "local_lr": "local_lr",
    "target_epsilon": "target_epsilon",
    "noise_multiplier": "noise_multiplier",
    "accountant": "accountant",
}


class MissingPublicParameter(ConfigError, PublicParameterError):
    """A public parameter of DP-FedAvg that nothing public gives: the `ConfigError` names the
    config field that supplies it."""


class SmallDataWarning(UserWarning):
    """A private run whose public parameters (K declared, q, z, C) say its model will learn
    little: fewer than one expected unit per round, or noise that dwarfs the clip."""


# A run is warned (`DpFedAvgPlan.small_data_warnings`) when the noise std per coordinate of
# the averaged update, zC/(qK), reaches this multiple of C, the bound on a whole unit's update.
NOISE_TO_CLIP_WARNING = 1.0

_ADAM_BETAS = (0.9, 0.999)
_STATE_FORMAT = "privrl.primorl.dp_fedavg/state-2"  # 2: numpy NoiseGenerator noise
_clock = time.monotonic  # the checkpoint timer (tests replace it)
_ADAM_EPS = 1e-8


# ---------------------------------------------------------------------------------------------
# configuration and planning (public parameters, calibration, the event)
# ---------------------------------------------------------------------------------------------


def _clip_mode(mode: str) -> ClipMode:
    m = str(mode).replace("-", "_")
    if m not in ("flat", "per_layer"):
        raise ValueError(f"clip mode must be 'flat' or 'per-layer', got {mode!r}")
    return m  # type: ignore[return-value]


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{what} must be an integer >= 1, got {value!r}")
    return int(value)


def _real(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{what} must be a number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class DpFedAvgConfig:
    """TDP ensemble training as the user asked for it (``None`` = not given).

    Symbols (PRIMORL, Algorithm 2): q ``sampling_rate``, z ``noise_multiplier``, C
    ``clip_norm``, T_max ``max_rounds``, K ``n_units``, B ``local_batch``, E ``local_epochs``,
    η ``local_lr``. Give z, or a ``target_epsilon`` for which z is calibrated at T_max (with
    δ). C, T_max and K have no default: they must be given (K may also be declared in the
    dataset's public metadata, ``extra["n_trajectories"]`` or ``["n_users"]``); δ, B, E, η
    and the clip mode default to the paper's values (`DEFAULTS`), q to min(1, m/K) with m = 30
    expected units per round (`default_rate`; the paper's q = 10⁻³ at its K = 30,000
    trajectories). ``clip_norm=math.inf``
    with z = 0 is the paper's NO CLIP variant, z = 0 with a finite C its NO NOISE / NO PRIVACY
    variant; both are non-private (ε = ∞). ``plan_dp_fedavg`` resolves the values with their
    sources.

    ``unit``: "trajectory" (TDP) or "user" (all trajectories of one user form one client).
    ``accountant``: backend of the reported ε and of the calibration ("pld" default; the other
    is reported beside it). ``eval_every``/``patience``/``min_improvement``: early stopping on
    the public split (an evaluation improves when some member's MSE drops by more than
    ``min_improvement``, relative; stop after ``patience`` evaluations without improvement).
    ``chunk_copies``: clients stacked per batched computation (None: from the model size).
    ``server_momentum`` β and ``server_lr`` η_s: the server's step on the noisy mean update
    Δ̃(t), m(t) = β·m(t−1) + Δ̃(t), θ(t+1) = θ(t) + η_s·m(t) (server momentum, as in
    McMahan et al. 2018's DP-FedAvg); β = 0, η_s = 1 is the paper's FedAvg step. A function of
    the noisy updates alone: post-processing, the event and ε do not change.
    ``server_optimizer``: "sgd" (the step above) or "adam", FedAdam (Reddi et al. 2021,
    Algorithm 2, no bias correction): m(t) = β₁·m(t−1) + (1−β₁)·Δ̃(t), v(t) = β₂·v(t−1) +
    (1−β₂)·Δ̃(t)², θ(t+1) = θ(t) + η_s·m(t)/(√v(t) + τ), with β₁ = ``server_momentum``,
    β₂ = ``server_beta2`` and τ = ``server_tau``; also post-processing of Δ̃.
    ``server_ema`` γ > 0: the public-split evaluations, the kept snapshots and the release use
    the exponential moving average of the server's iterates, θ̄(t) = a(t)/(1 − γᵗ) with
    a(t) = γ·a(t−1) + (1 − γ)·θ(t), a(0) = 0 (bias-corrected as Adam's moments), instead of
    θ(t); θ itself steps as above. Averaging the iterates averages the noise each round adds
    (as in De et al. 2022's DP-SGD); a function of θ(1..t) only: post-processing.
    """

    noise_multiplier: float | None = None
    target_epsilon: float | None = None
    delta: float | None = None
    sampling_rate: float | None = None
    clip_norm: float | None = None
    clip_mode: str | None = None
    max_rounds: int | None = None
    n_units: int | None = None
    local_batch: int | None = None
    local_epochs: int | None = None
    local_lr: float | None = None
    local_optimizer: LocalOptimizer = "sgd"
    unit: Unit = "trajectory"
    accountant: Backend = "pld"
    eval_every: int = 50
    patience: int = 10
    min_improvement: float = 0.01
    chunk_copies: int | None = None
    server_momentum: float = 0.0
    server_lr: float = 1.0
    server_optimizer: ServerOptimizer = "sgd"
    server_beta2: float = 0.99
    server_tau: float = 1e-3
    server_ema: float = 0.0

    def __post_init__(self) -> None:
        z, eps = self.noise_multiplier, self.target_epsilon
        if z is not None and eps is not None:
            raise ValueError("give a noise multiplier z or a target ε, not both")
        if z is not None and not (math.isfinite(_real(z, "noise multiplier")) and z >= 0):
            raise ValueError(f"noise multiplier z must be finite and >= 0, got {z!r}")
        if eps is not None and not (math.isfinite(_real(eps, "target ε")) and eps > 0):
            raise ValueError(f"target ε must be finite and > 0, got {eps!r}")
        if self.delta is not None and not 0 < _real(self.delta, "δ") < 1:
            raise ValueError(f"δ must be in (0, 1), got {self.delta!r}")
        if self.sampling_rate is not None and not 0 < _real(self.sampling_rate, "q") <= 1:
            raise ValueError(f"sampling rate q must be in (0, 1], got {self.sampling_rate!r}")
        c = self.clip_norm
        if c is not None and not (_real(c, "clip norm C") > 0 and not math.isnan(c)):
            raise ValueError(f"clip norm C must be > 0 (math.inf: no clipping), got {c!r}")
        if c is not None and math.isinf(c):
            if eps is not None:
                raise ValueError("cannot calibrate noise without clipping: give a finite C")
            if z is not None and z > 0:
                raise ValueError(
                    "noise std zC is infinite without clipping; the NO CLIP variant uses z = 0"
                )
        if self.clip_mode is not None:
            _clip_mode(self.clip_mode)
        for name in ("max_rounds", "n_units", "local_batch", "local_epochs"):
            value = getattr(self, name)
            if value is not None:
                _positive_int(value, name)
        if self.local_lr is not None and not (
            math.isfinite(_real(self.local_lr, "η")) and self.local_lr > 0
        ):
            raise ValueError(f"local learning rate η must be finite and > 0, got {self.local_lr}")
        if self.local_optimizer not in ("sgd", "adam"):
            raise ValueError(f"local optimizer must be 'sgd' or 'adam': {self.local_optimizer!r}")
        if self.unit not in ("trajectory", "user"):
            raise ValueError(f"unit must be 'trajectory' or 'user', got {self.unit!r}")
        if self.accountant not in ("pld", "rdp"):
            raise ValueError(f"accountant must be 'pld' or 'rdp', got {self.accountant!r}")
        _positive_int(self.eval_every, "eval_every")
        _positive_int(self.patience, "patience")
        if not self.min_improvement >= 0:
            raise ValueError(f"min_improvement must be >= 0, got {self.min_improvement}")
        if self.chunk_copies is not None:
            _positive_int(self.chunk_copies, "chunk_copies")
        if not 0 <= _real(self.server_momentum, "server momentum β") < 1:
            raise ValueError(f"server momentum β must be in [0, 1), got {self.server_momentum!r}")
        if not (math.isfinite(_real(self.server_lr, "η_s")) and self.server_lr > 0):
            raise ValueError(f"server learning rate η_s must be finite and > 0: {self.server_lr}")
        if self.server_optimizer not in ("sgd", "adam"):
            raise ValueError(f"server optimizer must be 'sgd' or 'adam': {self.server_optimizer!r}")
        if not 0 <= _real(self.server_beta2, "server β₂") < 1:
            raise ValueError(f"server β₂ must be in [0, 1), got {self.server_beta2!r}")
        if not (math.isfinite(_real(self.server_tau, "server τ")) and self.server_tau > 0):
            raise ValueError(f"server τ must be finite and > 0, got {self.server_tau!r}")
        if not 0 <= _real(self.server_ema, "server EMA γ") < 1:
            raise ValueError(f"server EMA γ must be in [0, 1), got {self.server_ema!r}")


def dp_fedsgd(config: DpFedAvgConfig, *, batch: int, lr: float = 1.0) -> DpFedAvgConfig:
    """DP-FedSGD (McMahan et al. 2018) as DP-FedAvg with one local step per client.

    With E = 1, plain SGD and a public batch size B at least a trajectory's length, a
    client's local training is one step from θ(t) on the mean loss over all its transitions,
    so its displacement is Δ_k = −η·∇ℓ_k(θ(t)) (η = 1: minus its gradient), clipped to C; the
    server then sums, adds N(0, (zC)² I), divides by qK and applies its optimizer. A longer
    trajectory takes ⌈n_k/B⌉ steps (a fixed public-size minibatch per step). The round, the
    sensitivity C and the event are DP-FedAvg's: no second copy of the mechanism.
    """
    return dataclasses.replace(
        config,
        local_optimizer="sgd",
        local_epochs=1,
        local_batch=_positive_int(batch, "local_batch"),
        local_lr=float(lr),
    )


_NO_DEFAULT: Any = object()


def _default_kw(value: Any, detail: str) -> dict[str, Any]:
    """``default=``/``detail=`` keywords for `PublicParameters.resolve` (none when absent)."""
    return {} if value is _NO_DEFAULT else {"default": value, "detail": detail}


@functools.lru_cache(maxsize=256)
def _epsilon_cached(z: float, q: float, rounds: int, delta: float, backend: str) -> float:
    event = sampled_gaussian_event(z, rounds, sampling_probability=q)
    if backend == "pld":
        # a tiny z (Table 11's 1e-3, 1e-4) has a privacy loss whose PLD grid does not fit in
        # memory: refuse with the fix instead of failing to allocate it (public: z, q, T)
        from privrl.privacy.calculator import pld_too_large, rdp_epsilon

        if reason := pld_too_large(rdp_epsilon(event, delta, RELATION), fix="choose rdp"):
            raise ConfigError("accountant", f"pld: {reason}")
    return float(accountant_epsilon(event, delta, relation=RELATION, backend=backend))  # type: ignore[arg-type]


@dataclass(frozen=True)
class DpFedAvgPlan:
    """The resolved public parameters of a run and the event they define.

    ``params`` lists each value with its source (privacy.json's ``public_parameters``).
    ``private`` is False for z = 0 or C = ∞ (no guarantee: ε = ∞).
    """

    z: float
    q: float
    C: float
    clip_mode: ClipMode
    T_max: int
    K: int
    B: int
    E: int
    lr: float
    delta: float
    unit: Unit
    accountant: Backend
    local_optimizer: LocalOptimizer
    target_epsilon: float | None
    params: PublicParameters
    eval_every: int = 50
    patience: int = 10
    min_improvement: float = 0.01
    chunk_copies: int | None = None
    server_momentum: float = 0.0
    server_lr: float = 1.0
    server_optimizer: ServerOptimizer = "sgd"
    server_beta2: float = 0.99
    server_tau: float = 1e-3
    server_ema: float = 0.0

    @property
    def fedavg_step(self) -> bool:
        """Whether the server's step is FedAvg's θ + Δ̃ (no momentum, η_s = 1)."""
        return self.server_optimizer == "sgd" and self.server_momentum == 0 and self.server_lr == 1

    @property
    def private(self) -> bool:
        return self.z > 0 and math.isfinite(self.C)

    @property
    def denominator(self) -> float:
        """qK, the fixed divisor of the summed updates (Algorithm 1, line 8)."""
        return self.q * self.K

    @property
    def noise_std(self) -> float:
        """Std of the noise added to θ per round: zC/(qK) (0 without noise)."""
        return 0.0 if self.z == 0 else self.z * self.C / self.denominator

    @property
    def privacy_unit(self) -> PrivacyUnit:
        return PrivacyUnit.USER if self.unit == "user" else PrivacyUnit.TRAJECTORY

    def small_data_warnings(self) -> list[str]:
        """Why this private run will learn little, from its public parameters alone (K
        declared, q, z, C): fewer than one expected unit per round (qK < 1), or a noise std
        per coordinate of the averaged update, zC/(qK), of at least `NOISE_TO_CLIP_WARNING`
        times C, the bound on a whole unit's update. Empty for a non-private run."""
        if not self.private:
            return []
        out = []
        unit, qk = self.unit, self.denominator
        units = _PLURAL[unit]
        if qk < 1:
            out.append(
                f"q·K = {qk:.3g} < 1 expected {unit} per round (q = {self.q:g}, K = {self.K}): "
                "most rounds add noise to nothing; raise sampling_rate (default "
                "min(1, 30/K)) or use more data"
            )
        if self.noise_std >= NOISE_TO_CLIP_WARNING * self.C:
            out.append(
                f"the noise std per coordinate of the averaged update, zC/(qK) = "
                f"{self.noise_std:.3g}, is {self.noise_std / self.C:.3g} times the clip C = "
                f"{self.C:g} that bounds a whole {unit}'s update (z = {self.z:.3g}, "
                f"q·K = {qk:.3g}): the model will learn little; more {units} (K), a larger q·K, "
                "fewer rounds (steps) or a larger epsilon lower it"
            )
        return out

    def event(self, rounds: int) -> dp_event.DpEvent:
        """``SelfComposed(PoissonSampled(q, Gaussian(z)), rounds)`` (z > 0 only)."""
        if not self.private:
            raise ValueError("a run without noise or without clipping has no DP event")
        return sampled_gaussian_event(self.z, int(rounds), sampling_probability=self.q)

    def epsilon(self, rounds: int, backend: Backend | None = None) -> float:
        """ε at δ after ``rounds`` rounds (∞ when not private; 0 for zero rounds)."""
        if not self.private:
            return math.inf
        if rounds <= 0:
            return 0.0
        return _epsilon_cached(self.z, self.q, int(rounds), self.delta, backend or self.accountant)

    def _beside(self, rounds: int, backend: Backend) -> str:
        """ε under the other accountant, for the notes ("not computed" where its PLD grid
        would not fit in memory: a tiny z)."""
        try:
            return f"{self.epsilon(rounds, backend):.4g}"
        except ValueError:
            return "not computed (its grid would not fit in memory)"

    def release(self, rounds: int, n_params: int) -> Release:
        """The one release of a run: the ensemble's parameters after ``rounds`` rounds."""
        extra: dict[str, Any] = {
            "algorithm": "PRIMORL TDP model-ensemble training (DP-FedAvg, PRIMORL's Algorithm 1)",
            "sampling": "poisson",
            "sampling_probability": self.q,
            "unit": self.privacy_unit.value,
            "clients": "one per user" if self.unit == "user" else "one per trajectory",
            "clip_mode": self.clip_mode,
            "clipped": "cumulative local displacement, after every local step",
            "divide_by": "fixed qK (declared K), not the sampled count",
            "K": self.K,
            "rounds_max": self.T_max,
            "local_batch": self.B,
            "local_epochs": self.E,
            "local_lr": self.lr,
            "local_optimizer": self.local_optimizer,
        }
        if self.server_optimizer == "adam":
            extra["server_step"] = (
                f"FedAdam β1 = {self.server_momentum:g}, β2 = {self.server_beta2:g}, "
                f"τ = {self.server_tau:g}, η_s = {self.server_lr:g} on the noisy mean updates "
                "(post-processing)"
            )
        elif not self.fedavg_step:
            extra["server_step"] = (
                f"momentum β = {self.server_momentum:g}, η_s = {self.server_lr:g} on the noisy "
                "mean updates (post-processing)"
            )
        if self.server_ema > 0:
            extra["released_iterate"] = (
                f"bias-corrected moving average of θ(t), γ = {self.server_ema:g} "
                "(post-processing of the noisy iterates)"
            )
        if not self.private:
            why = "no noise (z = 0)" if self.z == 0 else "no clipping (C = ∞)"
            return Release(
                name="dynamics ensemble parameters after T DP-FedAvg rounds",
                mechanism="none",
                sensitivity=math.inf if math.isinf(self.C) else self.C / self.denominator,
                norm="l2",
                noise={"sigma": self.noise_std, "noise_multiplier": self.z},
                count=int(rounds),
                size=int(n_params),
                event=None,
                extra={**extra, "non_private": True, "why": why},
            )
        return Release(
            name="dynamics ensemble parameters after T DP-FedAvg rounds",
            mechanism="poisson_subsampled_gaussian",
            sensitivity=self.C / self.denominator,
            norm="l2",
            noise={"sigma": self.noise_std, "noise_multiplier": self.z},
            count=int(rounds),
            size=int(n_params),
            event=self.event(rounds),
            extra=extra,
        )

    def report(
        self,
        rounds: int,
        n_params: int,
        *,
        public: Sequence[str] = (),
        notes: Sequence[str] = (),
    ) -> PrivacyReport:
        """The run's `PrivacyReport`: one release, ε for the rounds run, T_max's ε in notes."""
        release = self.release(rounds, n_params)
        notes = [*notes, *(f"warning: {w}" for w in self.small_data_warnings())]
        if self.private:
            other: Backend = "rdp" if self.accountant == "pld" else "pld"
            notes.append(
                f"ε for the T = {rounds} rounds run: {self.epsilon(rounds):.4g} "
                f"({self.accountant.upper()}), {self._beside(rounds, other)} "
                f"({other.upper()}) at δ = {self.delta:g}"
            )
            notes.append(
                f"a-priori guarantee for T_max = {self.T_max} rounds (fixed in advance): "
                f"ε = {self.epsilon(self.T_max):.4g} ({self.accountant.upper()}), "
                f"{self._beside(self.T_max, other)} ({other.upper()})"
            )
        report = PrivacyReport.build(
            self.privacy_unit,
            RELATION,
            [release],
            self.delta,
            backend=self.accountant,
            system="primorl",
            public=public,
            notes=notes,
        )
        return report.with_public_parameters(self.params)


def default_rate(units_per_round: float, K: int) -> float:
    """The default sampling rate q = min(1, m/K): m expected units per round out of the
    declared K (both public), every unit in every round when K ≤ m."""
    return min(1.0, float(units_per_round) / int(K))


def plan_dp_fedavg(
    config: DpFedAvgConfig,
    *,
    metadata: Any = None,
    defaults: Mapping[str, Any] | None = None,
    defaults_detail: str = "",
    fields: Mapping[str, str] | None = None,
) -> DpFedAvgPlan:
    """Resolve every public parameter of ``config`` (flag > public metadata > default) and
    calibrate z when a target ε is given (at T_max, with the configured accountant).

    ``metadata``: the dataset's public metadata (``DatasetMetadata`` or its dict); only K is
    read from it (``extra["n_trajectories"]``, or ``["n_users"]`` for user-level privacy,
    unless marked inferred from the data). ``defaults``: public defaults that replace
    `DEFAULTS` and may also give ``clip_norm`` and ``max_rounds`` (a task preset; recorded
    with source "default" and ``defaults_detail``). Without a sampling rate, q = min(1, m/K)
    (`default_rate`) with m = ``defaults["units_per_round"]`` expected units per round,
    recorded as derived from K. Missing C, T_max or K, or neither z nor a target ε, is refused
    with a `ConfigError` naming the field (``fields`` maps `DpFedAvgConfig`'s field names to
    the caller's config, see `FIELDS`).
    """
    p = PublicParameters()
    dflt = {**DEFAULTS, **(defaults or {})}
    names = {**FIELDS, **(fields or {})}

    def _d(key: str) -> Any:
        return dflt[key] if key in dflt else _NO_DEFAULT

    def _det(key: str) -> str:
        given = getattr(config, key, None) is not None
        return defaults_detail if defaults and key in defaults and not given else ""

    def resolved(name: str, label: str, fix: str = "set it", **kw: Any) -> Any:
        """`PublicParameters.resolve`, refused with a `ConfigError` naming `name`'s field."""
        try:
            return p.resolve(label, fix=fix, **kw)
        except PublicParameterError as exc:
            raise MissingPublicParameter(names[name], f"is required: {exc}") from None

    def setting(label: str, key: str) -> Any:
        """Its field, else the preset's or `DEFAULTS`' value if there is one, else refused."""
        return resolved(key, label, flag=getattr(config, key), **_default_kw(_d(key), _det(key)))

    delta = setting("δ", "delta")
    C = setting("C (clip norm, joint over the ensemble)", "clip_norm")
    mode = _clip_mode(
        p.resolve(
            "clip mode",
            flag=None if config.clip_mode is None else _clip_mode(config.clip_mode),
            default=_clip_mode(_d("clip_mode")),
            fix="",
            detail=_det("clip_mode"),
        )
    )
    T_max = setting("T_max (rounds, fixed in advance)", "max_rounds")
    K = _positive_int(
        resolved(
            "n_units",
            "K (declared number of units)",
            f"set it, the declared number of {_PLURAL[config.unit]}, or declare "
            f"{_K_KEY[config.unit]} in the dataset's public metadata",
            flag=config.n_units,
            metadata=metadata,
            key=_K_KEY[config.unit],
            detail="denominator qK",
        ),
        "K",
    )
    if config.sampling_rate is None and "sampling_rate" not in dflt:
        m = dflt["units_per_round"]
        q = p.derive(
            "q (sampling rate)",
            default_rate(m, K),
            f"default min(1, m/K) with m = {m:g} expected units per round",
        )
    else:
        q = setting("q (sampling rate)", "sampling_rate")
    B = setting("B (local batch size)", "local_batch")
    E = setting("E (local epochs)", "local_epochs")
    lr = setting("η (local learning rate)", "local_lr")
    if config.noise_multiplier is not None:
        z = float(p.resolve("z (noise multiplier)", flag=config.noise_multiplier, fix=""))
        target = None
    else:
        if config.target_epsilon is None:
            raise MissingPublicParameter(
                names["target_epsilon"],
                "is required: give a target ε (z is calibrated for it), or a noise multiplier "
                "z instead",
            )
        target = float(p.resolve("target ε", flag=config.target_epsilon, fix=""))
        z = calibrate_noise_multiplier(
            target,
            delta,
            T_max,
            sampling_probability=q,
            relation=RELATION,
            backend=config.accountant,
        )
        p.derive(
            "z (noise multiplier)",
            z,
            f"calibrated ({config.accountant.upper()}): smallest z with ε(T_max = {T_max}) ≤ "
            f"{target:g} at δ = {delta:g}, q = {q:g}",
        )
    p.derive("qK", q * K, "q·K")
    if z > 0 and math.isfinite(C):
        p.derive("noise std on θ", z * C / (q * K), "zC/(qK)")
    return DpFedAvgPlan(
        z=z,
        q=float(q),
        C=float(C),
        clip_mode=mode,
        T_max=int(T_max),
        K=K,
        B=int(B),
        E=int(E),
        lr=float(lr),
        delta=float(delta),
        unit=config.unit,
        accountant=config.accountant,
        local_optimizer=config.local_optimizer,
        target_epsilon=target,
        params=p,
        eval_every=config.eval_every,
        patience=config.patience,
        min_improvement=config.min_improvement,
        chunk_copies=config.chunk_copies,
        server_momentum=float(config.server_momentum),
        server_lr=float(config.server_lr),
        server_optimizer=config.server_optimizer,
        server_beta2=float(config.server_beta2),
        server_tau=float(config.server_tau),
        server_ema=float(config.server_ema),
    )


# ---------------------------------------------------------------------------------------------
# the ensemble as one flat buffer per copy-member
# ---------------------------------------------------------------------------------------------


class EnsembleLayout:
    """The trainable tensors of a `GaussianEnsemble` laid out in one buffer ``[C, N, P]``.

    ``names`` are the parameters with ``requires_grad`` (frozen log-variance bounds are
    excluded: they never move and are not released); L = ``len(names)`` is the tensor count
    of per-layer clipping. ``flatten`` concatenates a member's tensors; ``views`` splits a
    buffer back into tensors ``[C, N, ...]`` (views, so gradients flow to the buffer).
    """

    def __init__(self, ensemble: GaussianEnsemble) -> None:
        params = ensemble.parameters_dict()
        self.names = tuple(k for k in ensemble.param_names if params[k].requires_grad)
        if not self.names:
            raise ValueError("the ensemble has no trainable parameters")
        self.frozen = tuple(k for k in ensemble.param_names if k not in self.names)
        self.shapes = {k: tuple(params[k].shape[2:]) for k in self.names}
        self.sizes = [math.prod(self.shapes[k]) for k in self.names]
        self.members = ensemble.members
        self.size = int(sum(self.sizes))

    @property
    def n_tensors(self) -> int:
        return len(self.names)

    def flatten(self, params: Mapping[str, torch.Tensor]) -> torch.Tensor:
        c, n = params[self.names[0]].shape[:2]
        return torch.cat([params[k].detach().reshape(c, n, -1) for k in self.names], dim=-1)

    def views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        c, n = flat.shape[:2]
        parts = torch.split(flat, self.sizes, dim=-1)
        return {k: v.view(c, n, *self.shapes[k]) for k, v in zip(self.names, parts, strict=True)}

    def split(self, flat: torch.Tensor) -> list[torch.Tensor]:
        return list(torch.split(flat, self.sizes, dim=-1))

    def decays(self, ensemble: GaussianEnsemble) -> dict[str, float]:
        """Weight-decay coefficient of every trainable weight matrix (biases have none)."""
        wd = {f"w{i}": d for i, d in enumerate(ensemble.weight_decays)}
        return {k: wd[k] for k in self.names if k in wd}

    def frozen_params(self, ensemble: GaussianEnsemble) -> dict[str, torch.Tensor]:
        params = ensemble.parameters_dict()
        return {k: params[k].detach()[:1] for k in self.frozen}

    @torch.no_grad()
    def load(self, ensemble: GaussianEnsemble, flat: torch.Tensor) -> None:
        """Write a ``[1 or C, N, P]`` buffer into the ensemble's trainable parameters."""
        current = ensemble.parameters_dict()
        values = {k: v.detach() for k, v in current.items()}
        values.update(self.views(flat))
        ensemble.load_parameters_dict(values)


def auto_chunk_copies(layout: EnsembleLayout, n_clients: int) -> int:
    """Clients per batched chunk: as many as fit ``CHUNK_ELEMENTS`` stacked parameters.

    Pendulum (3 × 2×64, 15k parameters per copy) → 133 copies, i.e. all sampled clients at
    once; cartpole (5 × 2×128, 95k) → 21; HalfCheetah (7 × 4×200, 0.93M) → 2 per chunk.
    Larger stacks leave the cache; the limit comes from benchmarks/bench_primorl_step.py.
    """
    per_copy = layout.members * layout.size
    return max(1, min(max(n_clients, 1), CHUNK_ELEMENTS // per_copy))


# ---------------------------------------------------------------------------------------------
# clients: the private training data grouped by unit
# ---------------------------------------------------------------------------------------------


class Clients:
    """The private training transitions grouped into DP-FedAvg clients (private data).

    Rows are reordered so client k owns ``x[starts[k] : starts[k] + counts[k]]``. A client is
    one trajectory (``unit="trajectory"``) or all trajectories of one user (``unit="user"``,
    from the dataset's ``unit_ids``). ``x`` are the model's normalised inputs, ``y`` its
    training targets (both float32).
    """

    def __init__(
        self, x: torch.Tensor, y: torch.Tensor, counts: np.ndarray, unit: Unit = "trajectory"
    ) -> None:
        counts = np.asarray(counts, dtype=np.int64)
        if counts.ndim != 1 or np.any(counts < 0) or int(counts.sum()) != x.shape[0]:
            raise ValueError("counts must be >= 0 and add up to the number of rows")
        if y.shape[0] != x.shape[0]:
            raise ValueError(f"x has {x.shape[0]} rows but y has {y.shape[0]}")
        self.x, self.y = x.contiguous(), y.contiguous()
        self.counts = counts
        self.starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
        self.unit: Unit = unit

    @property
    def n_clients(self) -> int:
        return int(self.counts.shape[0])

    @classmethod
    def from_dataset(
        cls, model: DynamicsModel, dataset: TrajectoryDataset, unit: Unit = "trajectory"
    ) -> Clients:
        """Group ``dataset``'s transitions by trajectory or by user (``dataset.unit_ids``)."""
        t = dataset.transitions()
        x = model.inputs(t.observations, t.actions)
        y = model.targets(t.observations, t.rewards, t.next_observations)
        if unit == "trajectory":
            return cls(x, y, dataset.episode_lengths.copy(), unit)
        if unit != "user":
            raise ValueError(f"unit must be 'trajectory' or 'user', got {unit!r}")
        if dataset.unit_ids is None:
            raise ValueError(
                "user-level privacy needs the user of every trajectory, but the dataset has no "
                "unit ids; import it with the column of its users as the unit column"
            )
        _, client_of_episode = np.unique(dataset.unit_ids, return_inverse=True)
        client_of_row = np.repeat(client_of_episode.reshape(-1), dataset.episode_lengths)
        order = torch.from_numpy(np.argsort(client_of_row, kind="stable")).to(x.device)
        counts = np.bincount(client_of_row, minlength=int(client_of_episode.max()) + 1)
        return cls(x[order], y[order], counts, unit)


def sample_clients(n_clients: int, q: float, rng: np.random.Generator) -> np.ndarray:
    """U_t (Algorithm 2, line 5): each client joins independently with probability q."""
    return poisson_sample(n_clients, q, rng)


def client_batches(
    counts: np.ndarray, batch_size: int, epochs: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Local minibatches of every client, vectorised: ``(positions [c, S, B], steps [c])``.

    Client k's E epochs are E fresh permutations of its ``counts[k]`` rows, each cut into
    ⌈counts[k]/B⌉ consecutive batches, the last partial one kept (Algorithm 2, line 10);
    ``steps[k] = E·⌈counts[k]/B⌉``. Positions are row offsets within the client, −1 marks
    padding (rows of a partial batch, steps after the client's last).
    """
    counts = np.asarray(counts, dtype=np.int64)
    c, b, e = counts.shape[0], int(batch_size), int(epochs)
    n_max = int(counts.max()) if c else 0
    nb = -(-counts // b)  # ⌈n/B⌉ batches per epoch
    steps = e * nb
    s_max = int(steps.max()) if c else 0
    if c == 0 or s_max == 0:
        return np.full((c, 0, b), -1, dtype=np.int64), steps
    nb_max = int(nb.max())
    # a random permutation of 0..n_k−1 per client and epoch: argsort of uniform keys, padding
    # keys (≥ n_k) pushed past every real one
    keys = rng.random((c, e, n_max))
    pos = np.arange(n_max)
    keys[np.broadcast_to(pos >= counts[:, None, None], keys.shape)] = 2.0
    perm = np.argsort(keys, axis=-1)
    padded = np.full((c, e, nb_max * b), -1, dtype=np.int64)
    padded[..., :n_max] = np.where(pos < counts[:, None, None], perm, -1)
    batches = padded.reshape(c, e, nb_max, b)
    s = np.arange(s_max)
    nb_safe = np.maximum(nb, 1)[:, None]
    epoch_of, batch_of = s // nb_safe, s % nb_safe  # [c, S]
    out = batches[np.arange(c)[:, None], np.minimum(epoch_of, e - 1), batch_of]
    out[s[None, :] >= steps[:, None]] = -1
    return out, steps


# ---------------------------------------------------------------------------------------------
# local training of the sampled clients (vectorised over clients × members)
# ---------------------------------------------------------------------------------------------


def _masked_loss(
    ensemble: GaussianEnsemble,
    params: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    mask: torch.Tensor | None,
    n_valid: torch.Tensor,
) -> torch.Tensor:
    """Per-client loss ``[a]`` without weight decay: ``GaussianEnsemble.loss``'s mean NLL over
    each client's real rows (``mask``) summed over members, + the log-variance bound penalty.
    (Weight decay's gradient d·W is added directly by the caller.)"""
    mean, logvar = GaussianEnsemble.functional_forward(params, x)  # [a, N, B, out]
    err = ((mean - y).square() * torch.exp(-logvar) + logvar).sum(-1)  # [a, N, B]
    if mask is not None:
        zero = torch.zeros((), dtype=err.dtype, device=err.device)
        err = torch.where(mask[:, None, :], err, zero)
    nll = err.sum(-1) / (n_valid[:, None] * mean.shape[-1])
    return nll.sum(1) + ensemble.logvar_bound_penalty(params)


def _clip_(disp: torch.Tensor, views: Sequence[torch.Tensor], plan: DpFedAvgPlan) -> None:
    """EnsembleClip (Algorithm 3) in place on displacements ``[a, N, P]`` (``views``: its
    per-tensor views); a client whose displacement is not finite is set to 0."""
    if math.isinf(plan.C):  # NO CLIP variant (not private): only the non-finite rule
        bad = ~torch.isfinite(disp).all(dim=2).all(dim=1)
        if bool(bad.any()):
            disp.masked_fill_(bad[:, None, None], 0.0)
    elif plan.clip_mode == "flat":
        ensemble_clip_([disp], plan.C, "flat", nonfinite="zero")
    else:
        ensemble_clip_(list(views), plan.C, "per_layer", nonfinite="zero")


def _chunk_displacements(
    ensemble: GaussianEnsemble,
    layout: EnsembleLayout,
    start: torch.Tensor,
    frozen: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    mask: torch.Tensor,
    steps: np.ndarray,
    plan: DpFedAvgPlan,
    weight_decay: bool,
) -> torch.Tensor:
    """ENSCLIPGD for a chunk of clients sorted by ``steps`` (descending): Δ ``[c, N, P]``.

    ``x`` ``[c, S, B, in]``, ``y`` ``[c, S, B, out]``, ``mask`` ``[c, S, B]``. The clients
    active at step j are the prefix of those with more than j steps; each step is one
    batched forward/backward, an SGD (or Adam) step, and the clip of the cumulative
    displacement (Algorithm 2, lines 12–13). The displacement itself is the state, so the
    contributed Δ_k is exactly the clipped vector. Every full-size operation writes into
    preallocated buffers (fresh multi-megabyte tensors per step cost page faults).
    """
    c, n = x.shape[0], layout.members
    disp = torch.zeros(c, n, layout.size, dtype=start.dtype, device=start.device)
    theta = torch.empty_like(disp)  # θ_k = θ(t) + Δ_k, the point where gradients are taken
    d_views, t_views = layout.views(disp), layout.views(theta)
    names = layout.names
    decays = layout.decays(ensemble) if weight_decay else {}
    adam = plan.local_optimizer == "adam"
    grad: torch.Tensor | None = None  # the flat gradient buffer of the fused Adam step
    if adam:
        m1, m2 = torch.zeros_like(disp), torch.zeros_like(disp)
        m1_views, m2_views = layout.views(m1), layout.views(m2)
        if fast_local.use_fused_adam(disp.device):  # one pass over flat buffers
            grad = torch.empty_like(disp)
    full = mask.all(dim=-1)  # [c, S]
    n_valid = mask.sum(dim=-1).to(start.dtype)  # [c, S]
    for j in range(int(steps[0]) if c else 0):
        a = int(np.count_nonzero(steps > j))  # active clients: a prefix (sorted by steps)
        torch.add(start, disp[:a], out=theta[:a])
        leaves = [t_views[k][:a].detach().requires_grad_(True) for k in names]
        params = {**dict(zip(names, leaves, strict=True)), **frozen}
        step_mask = None if bool(full[:a, j].all()) else mask[:a, j]
        loss = _masked_loss(
            ensemble, params, x[:a, j, None], y[:a, j, None], step_mask, n_valid[:a, j]
        )
        grads = list(torch.autograd.grad(loss.sum(), leaves))
        with torch.no_grad():
            for i, k in enumerate(names):
                if k in decays:  # ∇ d·½‖W‖² = d·W (GaussianEnsemble.weight_decay_penalty)
                    grads[i].add_(leaves[i], alpha=decays[k])
            dv = [d_views[k][:a] for k in names]
            if grad is not None:  # the same Adam step, fused (fast_local.adam_step_)
                torch.cat([g.reshape(a, n, -1) for g in grads], dim=-1, out=grad[:a])
                fast_local.adam_step_(
                    disp[:a],
                    grad[:a],
                    m1[:a],
                    m2[:a],
                    step=j + 1,
                    lr=plan.lr,
                    betas=_ADAM_BETAS,
                    eps=_ADAM_EPS,
                )
            elif adam:  # Adam reset for every client (its state starts at zero each round)
                b1, b2 = _ADAM_BETAS
                t = j + 1
                v1 = [m1_views[k][:a] for k in names]
                v2 = [m2_views[k][:a] for k in names]
                torch._foreach_mul_(v1, b1)
                torch._foreach_add_(v1, grads, alpha=1 - b1)
                torch._foreach_mul_(v2, b2)
                torch._foreach_addcmul_(v2, grads, grads, value=1 - b2)
                denom = torch._foreach_div(v2, 1 - b2**t)
                torch._foreach_sqrt_(denom)
                torch._foreach_add_(denom, _ADAM_EPS)
                torch._foreach_addcdiv_(dv, v1, denom, value=-plan.lr / (1 - b1**t))
            else:
                torch._foreach_add_(dv, grads, alpha=-plan.lr)
            _clip_(disp[:a], dv, plan)
    return disp


def _gather(
    clients: Clients, sampled: np.ndarray, positions: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x, y, mask of the sampled clients' local batches (``positions`` [c, S, B]), on the
    clients' device."""
    mask = positions >= 0
    rows = clients.starts[sampled][:, None, None] + np.where(mask, positions, 0)
    on = clients.x.device
    rows_t = torch.from_numpy(rows).to(on)
    return clients.x[rows_t], clients.y[rows_t], torch.from_numpy(mask).to(on)


def local_displacements(
    ensemble: GaussianEnsemble,
    start: torch.Tensor,
    clients: Clients,
    sampled: np.ndarray,
    plan: DpFedAvgPlan,
    rng: np.random.Generator,
    *,
    weight_decay: bool = True,
    reduce: Literal["sum", "none"] = "sum",
    chunk_copies: int | None = None,
) -> torch.Tensor:
    """Clipped local updates Δ_k of the sampled clients (Algorithm 2, lines 6–16).

    ``start`` is θ(t) as a ``[1, N, P]`` buffer of ``EnsembleLayout(ensemble)``; ``ensemble``
    supplies the architecture, the penalties and the frozen parameters. Returns Σ_k Δ_k
    ``[1, N, P]`` (``reduce="sum"``) or every Δ_k ``[|U_t|, N, P]`` in the order of
    ``sampled`` (``"none"``; private — for tests). ``rng`` shuffles the local batches.
    """
    layout = EnsembleLayout(ensemble)
    sampled = np.asarray(sampled, dtype=np.int64)
    n = sampled.shape[0]
    if reduce not in ("sum", "none"):
        raise ValueError(f"reduce must be 'sum' or 'none', got {reduce!r}")
    shape = (1 if reduce == "sum" else n, layout.members, layout.size)
    out = torch.zeros(shape, dtype=start.dtype, device=start.device)
    if n == 0:
        return out
    positions, steps = client_batches(clients.counts[sampled], plan.B, plan.E, rng)
    order = np.argsort(-steps, kind="stable")  # most local steps first: active = prefix
    chunk = chunk_copies or plan.chunk_copies or auto_chunk_copies(layout, n)
    frozen = layout.frozen_params(ensemble)
    for s in range(0, n, chunk):  # chunks by model size (see the module docstring)
        idx = order[s : s + chunk]
        if steps[idx[0]] == 0:
            break  # this and the later clients have no data: Δ = 0
        x, y, mask = _gather(clients, sampled[idx], positions[idx, : steps[idx[0]]])
        disp = _chunk_displacements(
            ensemble,
            layout,
            start,
            frozen,
            x,
            y,
            mask=mask,
            steps=steps[idx],
            plan=plan,
            weight_decay=weight_decay,
        )
        if reduce == "sum":
            out += disp.sum(dim=0, keepdim=True)
        else:
            out[torch.from_numpy(idx).to(out.device)] = disp
    return out


def local_displacements_loop(
    ensemble: GaussianEnsemble,
    start: torch.Tensor,
    clients: Clients,
    sampled: np.ndarray,
    plan: DpFedAvgPlan,
    rng: np.random.Generator,
    *,
    weight_decay: bool = True,
) -> torch.Tensor:
    """Reference: the same clipped updates, written the ordinary way — a Python loop over
    clients, each a one-copy ensemble trained with ``GaussianEnsemble.loss`` and autograd on
    its own batches, clipped with ``ensemble_clip`` after every step. Returns every Δ_k
    ``[|U_t|, N, P]`` (for tests and benchmarks; not used for training).
    """
    layout = EnsembleLayout(ensemble)
    sampled = np.asarray(sampled, dtype=np.int64)
    positions, steps = client_batches(clients.counts[sampled], plan.B, plan.E, rng)
    base = {k: v.detach()[:1] for k, v in ensemble.parameters_dict().items()}
    base.update({k: v for k, v in layout.views(start).items()})
    out = torch.zeros(
        sampled.shape[0], layout.members, layout.size, dtype=start.dtype, device=start.device
    )
    for i, k in enumerate(sampled):
        local = ensemble.select_copies(0)
        local.load_parameters_dict(base)
        trainable = [getattr(local, name) for name in layout.names]
        m1 = [torch.zeros_like(p) for p in trainable]
        m2 = [torch.zeros_like(p) for p in trainable]
        for j in range(int(steps[i])):
            pos = positions[i, j]
            rows = torch.from_numpy(clients.starts[k] + pos[pos >= 0]).to(clients.x.device)
            loss = local.loss(clients.x[rows], clients.y[rows], weight_decay=weight_decay).sum()
            grads = torch.autograd.grad(loss, trainable)
            with torch.no_grad():
                for p, g, a, b in zip(trainable, grads, m1, m2, strict=True):
                    if plan.local_optimizer == "adam":
                        b1, b2 = _ADAM_BETAS
                        a.mul_(b1).add_(g, alpha=1 - b1)
                        b.mul_(b2).addcmul_(g, g, value=1 - b2)
                        t = j + 1
                        den = (b / (1 - b2**t)).sqrt_().add_(_ADAM_EPS)
                        p.sub_(plan.lr / (1 - b1**t) * a / den)
                    else:
                        p.sub_(plan.lr * g)
                disp = [p - base[name] for p, name in zip(trainable, layout.names, strict=True)]
                if math.isfinite(plan.C):
                    disp = ensemble_clip(disp, plan.C, plan.clip_mode, nonfinite="zero")
                for p, d, name in zip(trainable, disp, layout.names, strict=True):
                    p.copy_(base[name] + d)
        out[i] = layout.flatten(local.parameters_dict())[0] - start[0]
    return out


# ---------------------------------------------------------------------------------------------
# aggregation with noise, and one round
# ---------------------------------------------------------------------------------------------


def noisy_update(
    summed: torch.Tensor, plan: DpFedAvgPlan, generator: np.random.Generator
) -> torch.Tensor:
    """Δ̃(t) = (Σ_k Δ_k + N(0, (zC)² I)) / (qK) (Algorithm 2, lines 18–19).

    One Gaussian draw for the whole ensemble, made by ``privrl.privacy.privatize_sum_torch``
    from the run's secret `NoiseGenerator` (float64, cast to θ's dtype and device);
    the fixed denominator qK (declared K), not |U_t|, which is private. An empty U_t
    (``summed`` = 0) adds noise only. z = 0 (non-private variants) adds none.
    """
    if plan.z > 0:
        noisy, _ = privatize_sum_torch(
            summed,
            clip_norm=plan.C,
            noise_multiplier=plan.z,
            generator=generator,
            name="Σ_k Δ_k (one DP-FedAvg round)",
        )
    else:
        noisy = summed
    assert isinstance(noisy, torch.Tensor)
    return noisy / plan.denominator


def aggregate(
    start: torch.Tensor, summed: torch.Tensor, plan: DpFedAvgPlan, generator: np.random.Generator
) -> torch.Tensor:
    """FedAvg's step θ(t+1) = θ(t) + Δ̃(t) (:func:`noisy_update`)."""
    return start + noisy_update(summed, plan, generator)


def server_buffer(theta: torch.Tensor, plan: DpFedAvgPlan) -> torch.Tensor | None:
    """The server optimizer's state at t = 0: None for FedAvg's step, m = 0 for momentum,
    (m, v) = 0 stacked as ``[2, *θ.shape]`` for FedAdam. A function of released Δ̃ only."""
    if plan.server_optimizer == "adam":
        return torch.zeros((2, *theta.shape), dtype=theta.dtype, device=theta.device)
    return None if plan.fedavg_step else torch.zeros_like(theta)


def _fedadam_step(
    theta: torch.Tensor, update: torch.Tensor, plan: DpFedAvgPlan, state: torch.Tensor
) -> torch.Tensor:
    """FedAdam (Reddi et al. 2021, Algorithm 2) with the pseudo-gradient Δ̃(t)."""
    m, v = state[0], state[1]
    b1, b2 = plan.server_momentum, plan.server_beta2
    m.mul_(b1).add_(update, alpha=1 - b1)  # m(t) = β₁m(t−1) + (1−β₁)Δ̃(t)
    v.mul_(b2).addcmul_(update, update, value=1 - b2)  # v(t) = β₂v(t−1) + (1−β₂)Δ̃(t)²
    return theta + plan.server_lr * m / (v.sqrt() + plan.server_tau)  # θ + η_s m/(√v + τ)


def server_step(
    theta: torch.Tensor,
    update: torch.Tensor,
    plan: DpFedAvgPlan,
    momentum: torch.Tensor | None,
) -> torch.Tensor:
    """θ(t+1) = θ(t) + η_s·m(t), m(t) = β·m(t−1) + Δ̃(t) (``momentum`` holds m and is updated
    in place); FedAvg's θ(t) + Δ̃(t) when β = 0 and η_s = 1; FedAdam's step for
    ``server_optimizer="adam"`` (``momentum`` holds (m, v), see `server_buffer`).
    Post-processing of Δ̃."""
    if plan.fedavg_step:
        return theta + update
    if momentum is None:
        raise ValueError("a server step with state needs its buffer (`server_buffer` at t = 0)")
    if plan.server_optimizer == "adam":
        return _fedadam_step(theta, update, plan, momentum)
    momentum.mul_(plan.server_momentum).add_(update)
    return theta + plan.server_lr * momentum


def dp_fedavg_round(
    ensemble: GaussianEnsemble,
    theta: torch.Tensor,
    clients: Clients,
    plan: DpFedAvgPlan,
    *,
    sample_rng: np.random.Generator,
    batch_rng: np.random.Generator,
    generator: np.random.Generator,
    weight_decay: bool = True,
    momentum: torch.Tensor | None = None,
) -> torch.Tensor:
    """One round of TDP model-ensemble training: θ(t) ``[1, N, P]`` → θ(t+1). ``momentum``:
    the server's m (updated in place) when the plan has a server momentum or η_s ≠ 1."""
    sampled = sample_clients(clients.n_clients, plan.q, sample_rng)
    summed = local_displacements(
        ensemble, theta, clients, sampled, plan, batch_rng, weight_decay=weight_decay
    )
    return server_step(theta, noisy_update(summed, plan, generator), plan, momentum)


# ---------------------------------------------------------------------------------------------
# the training loop
# ---------------------------------------------------------------------------------------------


@dataclass
class DpFedAvgResult:
    """Outcome of :func:`train_dp_fedavg`. Everything in it is public: the noisy iterates
    evaluated on the public split, and the rounds run (decided on that split). No statistic of
    the private data is kept (no training loss, sampled count, clip fraction or wall time).
    """

    rounds: int  # T actually run
    max_rounds: int  # T_max, fixed in advance
    stopped_early: bool
    eval_rounds: np.ndarray  # [n_evals] rounds at which the public split was evaluated
    holdout_mse: np.ndarray  # [n_evals, N] public-split MSE of each member
    best_holdout_mse: np.ndarray  # [N] of the kept snapshot (NaN without a public split)
    best_round: np.ndarray  # [N] round of the kept snapshot
    elites: tuple[int, ...]
    elites_source: str
    normalizer_source: str
    report: PrivacyReport
    epsilon_max: float  # a-priori ε for T_max (plan's accountant)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def epsilon(self) -> float:
        return float(self.report.epsilon)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "max_rounds": self.max_rounds,
            "stopped_early": self.stopped_early,
            "eval_rounds": self.eval_rounds.tolist(),
            "holdout_mse": self.holdout_mse.tolist(),
            "best_holdout_mse": self.best_holdout_mse.tolist(),
            "best_round": self.best_round.tolist(),
            "elites": list(self.elites),
            "elites_source": self.elites_source,
            "normalizer_source": self.normalizer_source,
            "epsilon": self.epsilon,
            "epsilon_max": self.epsilon_max,
            **self.extra,
        }


def _streams(
    seed: int | np.random.SeedSequence, noise: NoiseSource
) -> tuple[np.random.Generator, np.random.Generator, np.random.Generator]:
    """(client sampling, local batches, noise): the Poisson sample U_t and the noise are
    secret and come from `noise`; the local batch order (any order gives the same
    sensitivity) comes from the seed."""
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    _, batch_ss, _ = ss.spawn(3)
    return (
        noise.generator("dp-fedavg client sampling"),
        np.random.default_rng(batch_ss),
        noise.generator("dp-fedavg noise"),
    )


SECRET_STATE = ("sample_rng", "noise_gen")  # the secure streams' states in a checkpoint


def public_checkpoint(state: Mapping[str, Any]) -> dict[str, Any]:
    """A DP-FedAvg checkpoint without the secure streams' states (`SECRET_STATE`): θ(t), the
    kept snapshots, momentum and the early-stopping record are releases and post-processing
    of public-split evaluations, so this may be published. Resuming from it draws fresh
    client-sampling and noise generators from the `NoiseSource`: the mechanism and ε (from
    the public T) are unchanged; the run is not bit-identical to an uninterrupted one."""
    return {k: (None if k in SECRET_STATE else v) for k, v in state.items()}


def _server_step(plan: DpFedAvgPlan) -> dict[str, Any]:
    """The server optimizer a checkpoint was made with (public: the plan's settings)."""
    return {k: getattr(plan, k) for k in _SERVER_FIELDS}


_SERVER_FIELDS = ("server_optimizer", "server_momentum", "server_lr", "server_beta2", "server_tau")


def _check_server_step(
    resume: Mapping[str, Any], plan: DpFedAvgPlan, buffer: torch.Tensor | None
) -> None:
    """Refuse to continue a checkpoint with another server optimizer than it was made with (its
    state would be misread: FedAdam keeps (m, v), momentum SGD one buffer, FedAvg none)."""
    made = resume.get("server")
    saved = resume.get("momentum")
    if made is None:  # a checkpoint of before the server step was recorded: the buffer's shape
        same = (saved is None) == (buffer is None) and (
            buffer is None or tuple(saved.shape) == tuple(buffer.shape)
        )
        made = "another server optimizer (its state has another shape)"
    else:
        same = all(made.get(k) == getattr(plan, k) for k in _SERVER_FIELDS)
    if not same:
        raise ValueError(
            f"the DP-FedAvg checkpoint was made with {made}, not this run's "
            f"{_server_step(plan)}; resume with the same server optimizer or use a new output "
            "directory"
        )


def train_dp_fedavg(
    model: DynamicsModel,
    private: TrajectoryDataset,
    plan: DpFedAvgPlan,
    *,
    public_split: Transitions | None = None,
    normalizer: Literal["public_split", "model"] = "public_split",
    seed: int | np.random.SeedSequence = 0,
    noise: NoiseSource | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    resume: Mapping[str, Any] | None = None,
    on_checkpoint: Callable[[dict[str, Any]], None] | None = None,
    checkpoint_every: int = 0,
    checkpoint_seconds: float | None = None,
) -> DpFedAvgResult:
    """Train ``model``'s ensemble with T_max DP-FedAvg rounds (fewer if early-stopped), on the
    model's device: θ, the clients' tensors, the local updates and their clipping (the noise is
    drawn on the CPU from the secure generator and moved; the client sampling stays there).

    ``private``: the private training episodes (never read for anything but the clipped local
    updates). ``public_split``: the declared-public holdout (early stopping every
    ``plan.eval_every`` rounds with patience ``plan.patience``, per-member best snapshots,
    elites, and with ``normalizer="public_split"`` the input normaliser, and the target one if
    the model normalises targets). ``normalizer="model"`` keeps the model's normalisers (set
    from known bounds, or identity). The kept snapshots are noisy iterates chosen on public
    data: post-processing. ``progress`` receives each evaluation's public record.

    ``seed`` drives the local batch order; the client sampling and the noise come from
    ``noise`` (default: a secure `NoiseSource`; tests pass `NoiseSource.insecure(seed)`).

    Resumable: every ``checkpoint_every`` rounds (0: never), and after any round that ends
    ``checkpoint_seconds`` or more after the last checkpoint (None: by rounds only; large
    models' rounds are long), ``on_checkpoint`` receives the loop's full state (round
    counter, θ(t), the kept snapshots, the early-stopping record and every generator's state;
    tensors on the CPU, so it resumes on any device); passing that dict back as ``resume``
    (same model initialisation, data, plan and seed) continues exactly where it stopped,
    wherever the checkpoint was taken. The accountant needs nothing from it: ε is re-derived
    from the public T. The state is SECRET — it holds the noise generator's state, which would
    let a reader subtract the noise — so it must never be published and should be deleted once
    training ends.
    """
    if normalizer == "public_split":
        if public_split is None or len(public_split.observations) == 0:
            raise ValueError(
                "normalizer='public_split' needs a non-empty public split; pass one, or set "
                "the model's normalisers from known bounds and use normalizer='model'"
            )
        n = len(public_split.observations)
        x_pub = np.concatenate(
            [
                np.asarray(public_split.observations, dtype=np.float64).reshape(n, -1),
                np.asarray(public_split.actions, dtype=np.float64).reshape(n, -1),
            ],
            axis=1,
        )
        model.input_normalizer = Normalizer.fit(x_pub, source="public split")
        if model.config.normalize_targets:
            y_pub = model.raw_targets(
                public_split.observations, public_split.rewards, public_split.next_observations
            )
            model.target_normalizer = Normalizer.fit(y_pub, source="public split")
    elif normalizer != "model":
        raise ValueError(f"normalizer must be 'public_split' or 'model', got {normalizer!r}")

    ens = model.ensemble
    layout = EnsembleLayout(ens)
    clients = Clients.from_dataset(model, private, plan.unit)
    noise = noise or NoiseSource.secure()
    sample_rng, batch_rng, noise_gen = _streams(seed, noise)
    weight_decay = model.config.weight_decay
    theta = layout.flatten(ens.parameters_dict())

    has_public = public_split is not None and len(public_split.observations) > 0
    n_members = ens.members
    best = np.full(n_members, np.inf)
    best_round = np.zeros(n_members, dtype=np.int64)
    snapshot = theta.clone()
    eval_rounds: list[int] = []
    mses: list[np.ndarray] = []
    since, rounds, stopped = 0, 0, False
    first = 1
    momentum = server_buffer(theta, plan)  # the server optimizer's state
    gamma = plan.server_ema
    ema = torch.zeros_like(theta) if gamma > 0 else None  # a(t) of θ̄(t) = a(t)/(1 − γᵗ)
    if resume is not None:
        if resume.get("format") != _STATE_FORMAT or int(resume["T_max"]) != plan.T_max:
            raise ValueError("the DP-FedAvg checkpoint belongs to another run (format or T_max)")
        _check_server_step(resume, plan, momentum)
        if float(resume.get("server_ema", 0.0)) != gamma:
            raise ValueError(
                f"the DP-FedAvg checkpoint was made with server EMA γ = "
                f"{resume.get('server_ema', 0.0)}, not this run's {gamma:g}; resume with the "
                "same γ or use a new output directory"
            )
        on = theta.device  # the state is saved on the CPU: it resumes on any device
        theta = resume["theta"].to(on).clone()
        snapshot = resume["snapshot"].to(on).clone()
        best = np.asarray(resume["best"], dtype=np.float64).copy()
        best_round = np.asarray(resume["best_round"], dtype=np.int64).copy()
        eval_rounds = [int(r) for r in resume["eval_rounds"]]
        mses = [np.asarray(m, dtype=np.float64) for m in resume["mses"]]
        since, rounds, stopped = (
            int(resume["since"]),
            int(resume["rounds"]),
            bool(resume["stopped"]),
        )
        batch_rng.bit_generator.state = resume["batch_rng"]
        # a public checkpoint (`public_checkpoint`) has no secret stream: the fresh ones from
        # `noise` serve (each round's Poisson sample and noise are independent draws)
        if resume.get("sample_rng") is not None:
            sample_rng.bit_generator.state = resume["sample_rng"]
        if resume.get("noise_gen") is not None:
            noise_gen.bit_generator.state = resume["noise_gen"]
        if momentum is not None:
            if resume.get("momentum") is None:
                raise ValueError(
                    "the DP-FedAvg checkpoint has no server momentum; use a new output directory"
                )
            momentum = resume["momentum"].to(on).clone()
        if ema is not None:
            ema = resume["ema"].to(on).clone()
        first = plan.T_max + 1 if stopped else rounds + 1

    def evaluated() -> torch.Tensor:
        """θ(t), or with a server EMA its bias-corrected average θ̄(t): what is evaluated on
        the public split, kept as a snapshot and released."""
        if ema is None or rounds == 0:
            return theta
        return ema / (1.0 - gamma**rounds)

    def _state() -> dict[str, Any]:
        return {
            "format": _STATE_FORMAT,
            "T_max": plan.T_max,
            "rounds": rounds,
            "stopped": stopped,
            "theta": theta.cpu().clone(),
            "snapshot": snapshot.cpu().clone(),
            "best": best.tolist(),
            "best_round": best_round.tolist(),
            "eval_rounds": list(eval_rounds),
            "mses": [m.tolist() for m in mses],
            "since": since,
            "sample_rng": sample_rng.bit_generator.state,
            "batch_rng": batch_rng.bit_generator.state,
            "noise_gen": noise_gen.bit_generator.state,
            "momentum": None if momentum is None else momentum.cpu().clone(),
            "server": _server_step(plan),
            "server_ema": gamma,
            "ema": None if ema is None else ema.cpu().clone(),
        }

    clock = _clock
    saved_at = clock()
    for t in range(first, plan.T_max + 1):
        theta = dp_fedavg_round(
            ens,
            theta,
            clients,
            plan,
            sample_rng=sample_rng,
            batch_rng=batch_rng,
            generator=noise_gen,
            weight_decay=weight_decay,
            momentum=momentum,
        )
        rounds = t
        if ema is not None:  # a(t) = γ·a(t−1) + (1 − γ)·θ(t)
            ema.mul_(gamma).add_(theta, alpha=1.0 - gamma)
        if has_public and (t % plan.eval_every == 0 or t == plan.T_max):
            assert public_split is not None
            current = evaluated()
            layout.load(ens, current)
            cur = holdout_mse(model, public_split).astype(np.float64)
            cur = np.where(np.isfinite(cur), cur, np.inf)
            eval_rounds.append(t)
            mses.append(cur)
            rel = (best - cur) / np.where(np.isinf(best), 1.0, best)
            improved = (np.isinf(best) & np.isfinite(cur)) | (rel > plan.min_improvement)
            if improved.any():
                keep = torch.from_numpy(improved)[None, :, None].to(theta.device)
                snapshot = torch.where(keep, current, snapshot)
                best = np.where(improved, cur, best)
                best_round[improved] = t
                since = 0
            else:
                since += 1
            if progress is not None:
                progress({"round": t, "holdout_mse": cur.tolist()})
            if since >= plan.patience:
                stopped = True
        if on_checkpoint is not None and (
            stopped
            or t == plan.T_max
            or (checkpoint_every > 0 and t % checkpoint_every == 0)
            or (checkpoint_seconds is not None and clock() - saved_at >= checkpoint_seconds)
        ):
            on_checkpoint(_state())
            saved_at = clock()
        if stopped:
            break
    if has_public and np.isfinite(best).any():
        layout.load(ens, snapshot)
        elites = select_elites(best, model.config.n_elites)
        elites_source = "lowest MSE on the public split"
    else:
        layout.load(ens, evaluated())
        best = np.full(n_members, np.nan)
        best_round[:] = rounds
        elites = tuple(range(n_members))
        elites_source = "all members (no public split)"
    model.elites = elites

    public = [
        f"input normaliser: {model.input_normalizer.source}",
        f"elites: {elites_source}",
    ]
    if has_public:
        public.append("public split (declared public holdout episodes): early stopping")
    report = noise.certify(plan.report(rounds, n_members * layout.size, public=public))
    return DpFedAvgResult(
        rounds=rounds,
        max_rounds=plan.T_max,
        stopped_early=stopped,
        eval_rounds=np.asarray(eval_rounds, dtype=np.int64),
        holdout_mse=np.asarray(mses, dtype=np.float64).reshape(len(mses), n_members),
        best_holdout_mse=best.astype(np.float64),
        best_round=best_round,
        elites=elites,
        elites_source=elites_source,
        normalizer_source=model.input_normalizer.source,
        report=report,
        epsilon_max=plan.epsilon(plan.T_max),
    )
