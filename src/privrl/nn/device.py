"""Where torch work runs: one spelling of a device for every learner, config and command.

A device is named ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (the first CUDA device when one is
present, else the CPU). Every torch path of privrl takes its ``device`` through `resolve_device`,
so a config holds the user's words and a run records the device it actually used.

Privacy noise does not depend on the device: it is always drawn in float64 on the CPU from the
secure `privrl.privacy.NoiseGenerator` and then moved (`privrl.privacy.noise.torch_normal`), so
a CUDA run's noise has the same source, and for a fixed draw the same values, as a CPU run's.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = [
    "DEVICE_CHOICES",
    "DEVICE_HELP",
    "check_device",
    "config_device",
    "describe_device",
    "resolve_device",
    "to_cpu",
]

DEVICE_CHOICES = ("cpu", "cuda", "cuda:N", "auto")
DEVICE_HELP = (
    "Where torch work runs: cpu, cuda, cuda:N or auto (the first GPU when one is present, "
    "else the CPU). Privacy noise is drawn on the CPU from the secure generator either way."
)
_SPELLING = re.compile(r"^(cpu|auto|cuda(:\d+)?)$")


def check_device(spec: str) -> str | None:
    """The problem with a device name (None when it is spelled right). Availability is checked
    later, by `resolve_device`, so a config written on one machine loads on another."""
    if not isinstance(spec, str) or not _SPELLING.match(spec.strip().lower()):
        return f"must be one of cpu, cuda, cuda:N or auto, got {spec!r}"
    return None


def resolve_device(spec: str | torch.device | None = "auto") -> torch.device:
    """The `torch.device` that ``spec`` names on this machine.

    ``None`` and ``"auto"`` give ``cuda`` when a GPU is present, else ``cpu``. A CUDA device
    that is absent is refused, naming what is present, rather than silently run on the CPU.
    """
    import torch

    if isinstance(spec, torch.device):
        spec = str(spec)
    name = "auto" if spec is None else spec.strip().lower()
    problem = check_device(name)
    if problem is not None:
        raise ValueError(f"device {problem}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(
                f"device {spec!r} needs a CUDA GPU, and torch sees none here; use cpu or auto"
            )
        if device.index is not None and device.index >= count:
            raise ValueError(
                f"device {spec!r} is not present: torch sees {count} GPU(s), cuda:0 to "
                f"cuda:{count - 1}"
            )
    return device


def config_device(spec: str | torch.device | None, key: str = "device") -> torch.device:
    """`resolve_device` for a config field: an absent GPU (or a misspelt name) is a
    `privrl.config.ConfigError` naming the field ``key``, so the command reports it in one
    line before any work."""
    from privrl.config import ConfigError

    try:
        return resolve_device(spec)
    except ValueError as err:
        raise ConfigError(key, str(err).removeprefix("device ")) from None


def to_cpu(state: Any) -> Any:
    """``state`` (nested dicts, lists and tuples of tensors) with every tensor detached and
    on the CPU: a checkpoint written on any device loads on any other."""
    import torch

    if isinstance(state, torch.Tensor):
        return state.detach().cpu()
    if isinstance(state, dict):
        return {k: to_cpu(v) for k, v in state.items()}
    if isinstance(state, list | tuple):
        return type(state)(to_cpu(v) for v in state)
    return state


def describe_device(device: torch.device) -> str:
    """A short public description of a resolved device for a run's metrics (``cpu``, or
    ``cuda:0 (NVIDIA A100)``)."""
    import torch

    if device.type != "cuda":
        return str(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
