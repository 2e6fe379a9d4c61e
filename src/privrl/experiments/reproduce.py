"""Registry of `privrl reproduce ID` targets.

Each entry names the module and function that regenerate one figure or table of a paper at a
documented scale, writing a markdown report with our numbers beside the paper's. Modules are
imported lazily so `privrl --help` stays fast.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Reproduction:
    id: str
    paper: str
    what: str
    target: str  # "module:function"; the function takes (out: Path, *, seeds, quick, ...)

    def load(self) -> Callable[..., object]:
        module, func = self.target.split(":")
        return getattr(importlib.import_module(module), func)


REPRODUCTIONS: dict[str, Reproduction] = {
    r.id: r
    for r in (
        Reproduction(
            "qiao-wang-fig1a",
            "Qiao & Wang, Offline RL with Differential Privacy",
            "Figure 1(a): suboptimality vs K of PEVI, VAPVI and DP-VAPVI on the linear MDP",
            "privrl.experiments.qiao_wang:fig1a",
        ),
        Reproduction(
            "qiao-wang-fig1b",
            "Qiao & Wang, Offline RL with Differential Privacy",
            "Figure 1(b): DP-VAPVI at ρ ∈ {0.5, 1, 5, 10, 50} vs K on the linear MDP",
            "privrl.experiments.qiao_wang:fig1b",
        ),
        Reproduction(
            "dp-apvi-tabular",
            "Qiao & Wang, Offline RL with Differential Privacy",
            "our study: APVI vs DP-APVI (Gaussian/Laplace, Bernstein/Hoeffding) vs n, random MDPs",
            "privrl.experiments.dp_apvi_tabular:run",
        ),
    )
}
