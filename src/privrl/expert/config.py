"""The configs of the expert-level learners (Sharma et al.): one frozen `privrl.config.Config`
per algorithm, every hyper-parameter with its default and help, one validator.

- `ExpertTrainingConfig`: what both learners share — the offline RL learner (CQL or BCQ), the
  budget (ε, δ), the public sizes m and |A|, DP-SGD's b, σ, C and step count, the network,
  the greedy evaluation in the dataset's (public) environment and the normalised score's
  references R_np and R_rand.
- `ExpertDPConfig`: the consensus filter (Algorithm 2: T rounds, L, p_min, calibration) and
  Selective DP-SGD (Algorithm 3: the private-step probability p), with the budget split
  (ε1, δ1) + (ε2, δ2) = (ε, δ).
- `DPSGDConfig`: expert-level DP-SGD alone (Algorithm 4), or its non-private twin.

A setting left at None takes a public default when the algorithm plans (m and |A| from the
dataset's declared metadata, b = 128, σ = 20, C = 1, p = 0.8 for CQL and 0.5 for BCQ, ...);
the plan records the source of each (`privrl.privacy.public.PublicParameters`). Errors name
the field (`ConfigError.key`); a message that refers to another setting writes it as
```field``` or ```field=VALUE```.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from privrl.config import Config, check, option
from privrl.nn.device import DEVICE_HELP, check_device

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_CLIP",
    "DEFAULT_LR",
    "DEFAULT_NOISE",
    "DEFAULT_P_MIN",
    "DEFAULT_ROUNDS",
    "DEFAULT_STEPS_CAP",
    "EVAL_SEED_STEP",
    "DPSGDConfig",
    "ExpertDPConfig",
    "ExpertTrainingConfig",
]

# Limits of the settings, checked before anything is read or allocated: beyond them a run
# would exhaust memory (a step array of `steps` entries), overflow the accountant (noise
# multipliers far from 1) or never end. (ε's range is `privrl.privacy.limits`, checked by
# `Config` for every algorithm.)
NOISE_RANGE = (0.1, 1e4)
MAX_CLIP = 1e6
MAX_LR = 1.0
MAX_STEPS = 10**7
MAX_WIDTH, MAX_LAYERS = 8192, 16
MAX_EVAL_EPISODES = 10_000
MAX_EVAL_HORIZON = 10**6
MAX_EVALS = 10_000
MAX_ROUNDS = 10_000  # the paper uses T <= 100; the PLD's discretisation error grows with T
MAX_LEN = 10**7
MAX_EXPERTS = 10**9
MAX_ACTIONS = 10**6
MAX_SEED = 2**63 - 1  # numpy's SeedSequence takes any non-negative int; keep it in int64
DEFAULT_BATCH, DEFAULT_NOISE, DEFAULT_CLIP, DEFAULT_STEPS_CAP = 128, 20.0, 1.0, 100_000
DEFAULT_ROUNDS, DEFAULT_P_MIN, DEFAULT_LR = 25, 0.02, 3e-4
EVAL_SEED_STEP = 7919  # evaluation k resets from seed + k·step by default


def _in_range(
    key: str, value: float | None, lo: float, hi: float, *, lo_open: bool = False
) -> None:
    if value is None:
        return
    v = float(value)
    ok = math.isfinite(v) and (v > lo if lo_open else v >= lo) and v <= hi
    left = "(" if lo_open else "["
    check(ok, key, f"must be in {left}{lo:g}, {hi:g}], got {value}")


def _int_in(key: str, value: int | None, lo: int, hi: int) -> None:
    if value is None:
        return
    check(value >= lo, key, f"must be >= {lo}, got {value}")
    check(value <= hi, key, f"must be at most {hi}, got {value}")


@dataclass(frozen=True)
class ExpertTrainingConfig(Config):
    """Settings shared by `ExpertDP` and `DPSGD`: the learner, DP-SGD, evaluation and score.

    Symbols (Sharma et al.): m experts (``n_experts``), |A| actions, expected batch size b
    (sampling rate q = b/m), noise multiplier σ (noise std σ·C), clipping norm C, δ = 1/m by
    default. The normalised score is (R − R_rand)/(R_np − R_rand).
    """

    algo: Literal["cql", "bcq"] = option("cql", "--algo", help="Offline RL learner: cql or bcq.")
    epsilon: float | None = option(
        None, "--epsilon", help="Total privacy budget ε of the run.", allow_nan=True
    )
    delta: float | None = option(
        None, "--delta", help="δ of the run (default 1/m, m = number of experts).", allow_nan=True
    )
    n_experts: int | None = option(
        None,
        "--n-experts",
        help=(
            "m, the number of experts (public; default: the dataset's declared "
            "extra['n_experts'] or extra['recipe']['n_experts']; never counted in the data)."
        ),
    )
    actions: int | None = option(
        None,
        "--actions",
        help=(
            "|A|, the number of discrete actions (public; default: the dataset's declared "
            "action space, unless its metadata mark it as inferred from the data)."
        ),
    )
    batch_size: int | None = option(
        None,
        "--batch-size",
        "-b",
        help=f"Expected batch size b (rate b/m; default {DEFAULT_BATCH}).",
    )
    noise_multiplier: float | None = option(
        None,
        "--noise-multiplier",
        "-z",
        help=f"DP-SGD noise multiplier σ (noise std / C; default {DEFAULT_NOISE:g}).",
        allow_nan=True,
    )
    clip_norm: float | None = option(
        None,
        "--clip-norm",
        help=f"Per-expert gradient clipping norm C (default {DEFAULT_CLIP:g}).",
        allow_nan=True,
    )
    lr: float | None = option(
        None, "--lr", help="Adam learning rate (default 3e-4).", allow_nan=True
    )
    steps_cap: int | None = option(
        None,
        "--steps-cap",
        help=f"Most training steps (the budget may allow more; default {DEFAULT_STEPS_CAP}).",
    )
    steps: int | None = option(
        None, "--steps", help="Explicit step count (its ε is reported; refused above the budget)."
    )
    hidden: tuple[int, ...] | None = option(
        None, "--hidden", help="Hidden layer sizes, e.g. 256,256 (default; HIV: 512)."
    )
    eval_episodes: int = option(10, "--eval-episodes", help="Episodes per evaluation.")
    eval_horizon: int | None = option(
        None, "--eval-horizon", help="Evaluation episode length (CartPole 1000; else data horizon)."
    )
    evals: int = option(10, "--evals", help="Evaluations over the last --eval-window steps.")
    eval_window: int = option(10_000, "--eval-window", help="Steps over which evaluations spread.")
    no_eval: bool = option(False, "--no-eval/", help="Skip evaluation (no return metrics).")
    eval_seed: int | None = option(
        None,
        "--eval-seed",
        help="Seed of the first evaluation's environments (default: the run's --seed).",
    )
    eval_seed_step: int = option(
        EVAL_SEED_STEP,
        "--eval-seed-step",
        help="Evaluation k uses seed --eval-seed + k * this (public; no privacy effect).",
    )
    reference_return: float | None = option(
        None,
        "--reference-return",
        help="R_np of the normalised score, given as a number.",
        allow_nan=True,  # refused by validate as "must be finite"
    )
    random_return: float | None = option(
        None,
        "--random-return",
        help="R_rand of the normalised score (default: the dataset's recorded random return).",
        allow_nan=True,
    )
    device: str = option("auto", "--device", help=DEVICE_HELP, keyless_default=True)

    def validate(self) -> None:
        if self.delta is not None:
            ok = math.isfinite(self.delta) and 0 < self.delta < 1
            check(ok, "delta", f"must be in (0, 1), got {self.delta}")
        _in_range("batch_size", self.batch_size, 1, MAX_EXPERTS)
        _in_range("noise_multiplier", self.noise_multiplier, *NOISE_RANGE)
        _in_range("clip_norm", self.clip_norm, 0.0, MAX_CLIP, lo_open=True)
        _in_range("lr", self.lr, 0.0, MAX_LR, lo_open=True)
        _in_range("steps", self.steps, 0, MAX_STEPS)
        _in_range("steps_cap", self.steps_cap, 1, MAX_STEPS)
        _int_in("n_experts", self.n_experts, 1, MAX_EXPERTS)
        _in_range("actions", self.actions, 2, MAX_ACTIONS)
        if self.hidden is not None:
            sizes = self.hidden
            check(bool(sizes) and min(sizes) >= 1, "hidden", f"must be positive sizes, got {sizes}")
            check(
                max(sizes) <= MAX_WIDTH and len(sizes) <= MAX_LAYERS,
                "hidden",
                f"allows at most {MAX_LAYERS} layers of at most {MAX_WIDTH} units, got {sizes}",
            )
        _int_in("eval_episodes", self.eval_episodes, 1, MAX_EVAL_EPISODES)
        _in_range("eval_horizon", self.eval_horizon, 1, MAX_EVAL_HORIZON)
        _in_range("evals", self.evals, 1, MAX_EVALS)
        _in_range("eval_window", self.eval_window, 1, MAX_STEPS)
        _in_range("eval_seed", self.eval_seed, 0, MAX_SEED)
        _int_in("eval_seed_step", self.eval_seed_step, 1, MAX_SEED)
        for key in ("reference_return", "random_return"):
            value = getattr(self, key)
            check(value is None or math.isfinite(value), key, f"must be finite, got {value}")
        problem = check_device(self.device)
        check(problem is None, "device", problem or "")


@dataclass(frozen=True)
class ExpertDPConfig(ExpertTrainingConfig):
    """Consensus filter + Selective DP-SGD (Sharma et al., Algorithms 2 and 3).

    The filter spends (ε1, δ1) over T rounds (``filter_rounds``) on trajectories of length at
    most L (``max_len``), with experts whose actions have probability at least p_min; the
    training spends (ε2, δ2) on private DP-SGD steps taken with probability p. By default
    ε1 = 3ε/4, ε2 = ε/4, δ1 = 9δ/10, δ2 = δ/10, and the filter is skipped below ε = 5.
    """

    system = "expert-dp"
    epsilon: float = option(
        ..., "--epsilon", help="Total privacy budget ε of the run.", allow_nan=True
    )
    p: float | None = option(
        None,
        "--p",
        help="Probability of a private step on D_unst (default CQL 0.8, BCQ 0.5).",
        allow_nan=True,
    )
    filter_rounds: int | None = option(
        None,
        "--filter-rounds",
        "-T",
        help=f"Rounds T of the consensus filter (0 = no filter; default {DEFAULT_ROUNDS}).",
    )
    max_len: int | None = option(
        None,
        "--max-len",
        help=(
            "L, the longest trajectory the filter queries (public; default: the dataset's "
            "declared metadata.horizon; longer trajectories are truncated to L for the filter)."
        ),
    )
    p_min: float | None = option(
        None,
        "--p-min",
        help=f"Smallest action probability of experts (default {DEFAULT_P_MIN:g}).",
        allow_nan=True,
    )
    filter_calibration: Literal["paper", "tight", "pld"] = option(
        "paper",
        "--filter-calibration",
        help=(
            "paper (ε' = ε1/sqrt(32·T·ln(2/δ1))), tight (largest ε' within the exact "
            "advanced-composition bound) or pld (largest ε' within the PLD composition)."
        ),
    )
    filter_below: float = option(
        5.0,
        "--filter-below",
        help="Skip the filter (ε1 = 0) when ε is below this.",
        allow_nan=True,  # refused by validate as "must be finite"
    )
    eps1_fraction: float = option(0.75, "--eps1-fraction", help="ε1 / ε (filter).")
    eps2_fraction: float | None = option(
        None, "--eps2-fraction", help="ε2 / ε (DP-SGD); must add up to 1 with --eps1-fraction."
    )
    delta1_fraction: float = option(0.9, "--delta1-fraction", help="δ1 / δ (filter).")
    delta2_fraction: float | None = option(
        None, "--delta2-fraction", help="δ2 / δ; must add up to 1 with --delta1-fraction."
    )
    accounting: Literal["exact", "paper"] = option(
        "exact",
        "--accounting",
        help=(
            "exact (coins conditioned on, certified) or paper (q = p·b/m, NOT certified: the "
            "report says ε = ∞ and a ledger refuses it; the paper's ε is a comparison field)."
        ),
    )
    dp_sgd_budget: Literal["split", "joint"] = option(
        "split",
        "--dp-sgd-budget",
        help=(
            "split (the paper: DP-SGD's steps fit (ε2, δ2) alone) or joint (they fit the total "
            "(ε, δ) composed with the filter's rounds by the PLD accountant, so DP-SGD also "
            "gets the part of ε1 that the composition does not use)."
        ),
    )

    def validate(self) -> None:
        super().validate()
        if self.p is not None:
            ok = math.isfinite(self.p) and 0.0 <= self.p <= 1.0
            check(ok, "p", f"must be in [0, 1], got {self.p}")
        _in_range("filter_rounds", self.filter_rounds, 0, MAX_ROUNDS)
        _in_range("max_len", self.max_len, 1, MAX_LEN)
        _in_range("p_min", self.p_min, 0.0, 0.5, lo_open=True)
        check(
            math.isfinite(self.filter_below),
            "filter_below",
            f"must be finite, got {self.filter_below}",
        )


@dataclass(frozen=True)
class DPSGDConfig(ExpertTrainingConfig):
    """Expert-level DP-SGD (Sharma et al., Algorithm 4), or its non-private twin.

    Each step Poisson-samples experts at rate q = b/m, clips one transition's gradient per
    sampled expert to C, adds N(0, σ²C²) and divides by b; N steps, the largest count within
    (ε, δ) (PLD accountant) or ``steps``.
    """

    system = "dp-sgd"
    epsilon: float | None = option(
        None,
        "--epsilon",
        help="Privacy budget ε of the run (not with --non-private).",
        allow_nan=True,
    )
    sampling: Literal["poisson", "shuffle"] = option(
        "poisson",
        "--sampling",
        help=(
            "poisson (certified) or shuffle (the paper's batches, NOT certified: the report "
            "says ε = ∞ and a ledger refuses it; the paper's ε is a comparison field)."
        ),
    )
    non_private: bool = option(
        False, "--non-private/", help="Train the non-private twin (ordinary minibatches)."
    )

    def validate(self) -> None:
        check(
            self.epsilon is not None or self.non_private,
            "epsilon",
            "is required (or `non_private=True` for the non-private twin)",
        )
        check(
            self.epsilon is None or not self.non_private,
            "non_private",
            "takes no `epsilon`: the twin is not private",
        )
        super().validate()
