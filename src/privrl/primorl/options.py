"""The settings of a policy stage (SAC in a pessimistic model), shared by `PrimorlConfig` and
`MOPOConfig`: the uncertainty penalty u and its weight λ in r̃ = r̂ − λ·u, the model rollout
length h, the rollouts started per epoch, SAC's epochs, updates per epoch and target entropy,
torch threads, the torch device (``--device``: the dynamics ensemble, DP-FedAvg and SAC run
there), the reward scale and the public facts of a task without a preset (horizon, action
bounds, reward range). `None` means the task's default (its preset)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from privrl.config import Config, ConfigError, check, option
from privrl.nn.device import DEVICE_HELP, check_device

__all__ = [
    "MAX_EPOCHS",
    "MAX_LAM",
    "MAX_MODEL_BUFFER",
    "StageOptions",
    "parse_target_entropy",
    "plain",
    "settle",
    "within",
]

# Limits of the settings (checked before anything is read or allocated).
MAX_EPOCHS = 100_000
MAX_STEPS_PER_EPOCH = 1_000_000
MAX_ROLLOUT_LENGTH = 10_000
MAX_ROLLOUT_BATCH = 10_000_000
MAX_LAM = 1e6
MAX_MODEL_BUFFER = 10_000_000  # transitions kept from the model's rollouts (memory)
MAX_HORIZON = 1_000_000  # episode length of a task without a preset


def parse_target_entropy(value: float | str | None) -> float | None:
    """A target entropy: a number, or 'action-dim' (or None) for SAC's default −|A| (None)."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in ("action-dim", "-|a|", "auto"):
        return None
    try:
        x = float(value)
    except ValueError:
        raise ConfigError(
            "target_entropy", f"must be a number or 'action-dim' (−|A|), got {value!r}"
        ) from None
    if not math.isfinite(x):
        raise ConfigError("target_entropy", f"must be finite, got {value!r}")
    return x


def _interval(value: tuple[float, ...] | None) -> bool:
    """Whether `value` is unset or two finite numbers, low < high."""
    if value is None:
        return True
    return len(value) == 2 and all(map(math.isfinite, value)) and value[0] < value[1]


def within(value: float | None, low: float, high: float) -> bool:
    """Whether `value` is unset (None) or a finite number in [low, high]."""
    return value is None or (math.isfinite(value) and low <= value <= high)


@dataclass(frozen=True)
class StageOptions(Config):
    """The settings of a policy stage, shared by MOPO and PRIMORL (`None`: the task's default).

    Symbols: u ``penalty``, λ ``lam``, h ``rollout_length``, E ``epochs`` of
    ``steps_per_epoch`` SAC updates, H̄ ``target_entropy`` (SAC's α is tuned towards it).
    """

    penalty: str | None = option(
        None, "--penalty", help="Uncertainty u: ma | ma-frobenius | mpd (default: per task)."
    )
    lam: float | None = option(
        None, "--lam", "--lambda", help="Penalty coefficient λ in r̃ = r̂ − λu (default: per task)."
    )
    rollout_length: int | None = option(
        None, "--rollout-length", "-H", help="Model rollout length h (default: per task)."
    )
    rollout_batch_size: int | None = option(
        None, "--rollout-batch-size", help="Rollouts started per epoch (default: per task)."
    )
    epochs: int | None = option(
        None, "--epochs", help="SAC epochs of --steps-per-epoch updates (default: per task)."
    )
    steps_per_epoch: int = option(1000, "--steps-per-epoch", help="SAC updates per epoch.")
    target_entropy: float | str = option(
        -3.0, "--target-entropy", help="SAC's target entropy: a number, or 'action-dim' (−|A|)."
    )
    threads: int = option(
        1,
        "--threads",
        help="torch threads (1 is fastest for SAC's 256-row batches, and on a shared machine).",
    )
    # Where the dynamics ensemble, DP-FedAvg and SAC run; out of the identity at its default
    # (added after runs were cached; a checkpoint is device-free, so a run resumes anywhere).
    device: str = option("auto", "--device", help=DEVICE_HELP, keyless_default=True)
    horizon: int | None = option(
        None,
        "--horizon",
        help="Episode length H of a task without a preset (default: the dataset's declared "
        "horizon, else the env's time limit).",
        keyless_default=True,
    )
    action_bounds: tuple[float, float] | None = option(
        None,
        "--action-bounds",
        metavar="LOW,HIGH",
        help="Action box of a task without a preset, every dimension (default: the dataset's "
        "declared action space, else the env's).",
        keyless_default=True,
    )
    reward_range: tuple[float, float] | None = option(
        None,
        "--reward-range",
        metavar="LOW,HIGH",
        help="Per-step reward range of a task without a preset; it holds model rollouts "
        "(default: the dataset's metadata extra reward_range, else unbounded).",
        keyless_default=True,
    )
    reward_transform: str | None = option(
        None,
        "--reward-transform",
        help="Reward scale to learn and evaluate in: none (the raw rewards of the standard "
        "Gymnasium id, e.g. Pendulum-v1's −cost) | privrl (the task's privrl id, e.g. "
        "privrl/Pendulum-v0's r' = 1 + r/c_max ∈ [0, 1]). Default: the dataset's own scale.",
        keyless_default=True,  # None: the dataset's own scale
    )

    def validate(self) -> None:
        from privrl.envs.control import REWARD_TRANSFORMS
        from privrl.primorl.pessimism import PENALTIES

        check(
            self.reward_transform is None or self.reward_transform in REWARD_TRANSFORMS,
            "reward_transform",
            f"must be one of {', '.join(REWARD_TRANSFORMS)}, got {self.reward_transform!r}",
        )
        check(
            self.penalty is None or self.penalty in PENALTIES,
            "penalty",
            f"must be one of {', '.join(PENALTIES)}, got {self.penalty!r}",
        )
        check(
            within(self.lam, 0, MAX_LAM),
            "lam",
            f"must be in [0, {MAX_LAM:g}], got λ = {self.lam}",
        )
        for key, high in (
            ("epochs", MAX_EPOCHS),
            ("rollout_length", MAX_ROLLOUT_LENGTH),
            ("rollout_batch_size", MAX_ROLLOUT_BATCH),
            ("steps_per_epoch", MAX_STEPS_PER_EPOCH),
        ):
            value = getattr(self, key)
            check(within(value, 1, high), key, f"must be in [1, {high}], got {value}")
        cores = os.cpu_count() or 1
        check(
            1 <= self.threads <= cores,
            "threads",
            f"must be in [1, {cores}] (this machine's cores), got {self.threads}",
        )
        parse_target_entropy(self.target_entropy)
        problem = check_device(self.device)
        check(problem is None, "device", problem or "")
        check(
            within(self.horizon, 1, MAX_HORIZON),
            "horizon",
            f"must be in [1, {MAX_HORIZON}], got {self.horizon}",
        )
        for key in ("action_bounds", "reward_range"):
            value = getattr(self, key)
            check(_interval(value), key, f"must be LOW,HIGH with finite LOW < HIGH, got {value}")

    def torch_device(self) -> Any:
        """The `torch.device` that ``device`` names on this machine (`ConfigError` naming
        the field for an absent GPU)."""
        from privrl.nn.device import config_device

        return config_device(self.device)

    def task_facts(self) -> Any:
        """The declared facts of a task without a preset (`privrl.primorl.tasks.TaskFacts`)."""
        from privrl.primorl.tasks import TaskFacts

        return TaskFacts(self.horizon, self.action_bounds, self.reward_range)

    def fill(self, defaults: dict[str, Any]) -> None:
        """Set every field still None to its value in `defaults` (a task preset), in place:
        for `__post_init__`, before `validate`, so the config holds what will run."""
        for name, value in defaults.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)


def settle(config: Any) -> None:
    """A config read from plain values (a file, config.json): the task and the dynamics
    model back as their types; hidden sizes as a tuple."""
    from privrl.primorl.dynamics import DynamicsConfig
    from privrl.primorl.tasks import task_from_facts

    if isinstance(config.task, Mapping):
        object.__setattr__(config, "task", task_from_facts(config.task))
    if isinstance(config.dynamics, Mapping):
        object.__setattr__(config, "dynamics", DynamicsConfig.from_dict(config.dynamics))
    object.__setattr__(config, "sac_hidden", tuple(int(h) for h in config.sac_hidden))


def plain(config: Any, d: dict[str, Any]) -> dict[str, Any]:
    """`Config.to_dict` with the task and the dynamics model as plain values."""
    from privrl.envs.control import ControlTask
    from privrl.primorl.tasks import task_facts

    if isinstance(config.task, ControlTask):
        d["task"] = task_facts(config.task)
    if config.dynamics is not None:
        d["dynamics"] = config.dynamics.to_dict()
    return d
