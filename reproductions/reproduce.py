"""Registry of `privrl reproduce ID` targets.

Each entry names the module and function that regenerate one figure or table of a paper at a
documented scale, writing a markdown report with our numbers beside the paper's. Modules are
imported lazily so `privrl --help` stays fast.

Reports go to this checkout's ``docs/reproductions/ID`` (`REPORTS`), wherever the command is
run from.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from privrl.cli.reproduce import MAX_SEEDS

# The checkout's reports: docs/reproductions beside this package, not the working directory.
REPORTS = Path(__file__).resolve().parents[1] / "docs" / "reproductions"


@dataclass(frozen=True)
class Reproduction:
    id: str
    paper: str
    what: str
    target: str  # "module:function"; the function takes (out: Path, *, seeds, quick, ...)
    sweep: bool = False  # runs on the sweep runner (system or function cells): backend=, workers=
    tasks: bool = False  # runs a subset of its tasks on request: tasks= (`--tasks`)

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
            "reproductions.qiao_wang:fig1a",
            sweep=True,
        ),
        Reproduction(
            "qiao-wang-fig1b",
            "Qiao & Wang, Offline RL with Differential Privacy",
            "Figure 1(b): DP-VAPVI at ρ ∈ {0.5, 1, 5, 10, 50} vs K on the linear MDP",
            "reproductions.qiao_wang:fig1b",
            sweep=True,
        ),
        Reproduction(
            "dp-apvi-tabular",
            "Qiao & Wang, Offline RL with Differential Privacy",
            "our study: APVI vs DP-APVI (Gaussian/Laplace, Bernstein/Hoeffding) vs n, random MDPs",
            "reproductions.dp_apvi_tabular:run",
            sweep=True,
        ),
        Reproduction(
            "gpope-fig1a",
            "Xie, Thomas & Miklau, Privacy Preserving Off-Policy Evaluation",
            "Figure 1(a): chain, MSPBE vs m for GPOPE, DP-LSW, DP-LSL",
            "reproductions.gpope:fig1a",
            sweep=True,
        ),
        Reproduction(
            "gpope-fig1b",
            "Xie, Thomas & Miklau, Privacy Preserving Off-Policy Evaluation",
            "Figure 1(b): chain, MSPBE vs step size at fixed m",
            "reproductions.gpope:fig1b",
            sweep=True,
        ),
        Reproduction(
            "gpope-fig2a",
            "Xie, Thomas & Miklau, Privacy Preserving Off-Policy Evaluation",
            "Figure 2(a): Mountain Car on-policy, GPOPE vs DP-LSW vs LSTD",
            "reproductions.gpope:fig2a",
            sweep=True,
        ),
        Reproduction(
            "gpope-fig3b",
            "Xie, Thomas & Miklau, Privacy Preserving Off-Policy Evaluation",
            "Figure 3(b): Mountain Car off-policy, GPOPE at several ε vs LSTD(0)",
            "reproductions.gpope:fig3b",
            sweep=True,
        ),
        Reproduction(
            "gpope-fig4",
            "Xie, Thomas & Miklau, Privacy Preserving Off-Policy Evaluation",
            "Figure 4: HIV treatment, relative MSPBE",
            "reproductions.gpope:fig4",
            sweep=True,
        ),
        Reproduction(
            "gpope-accounting",
            "Xie, Thomas & Miklau, Privacy Preserving Off-Policy Evaluation",
            "ours: GPOPE with the paper's Lemma 1 vs rigorous accounting",
            "reproductions.gpope:accounting",
            sweep=True,
        ),
        Reproduction(
            "sdp-pe-fig4",
            "Secure RL via Shuffle Privacy Model",
            "Figure 4: RiverSwim regret of SDP-PE, PE, UCB-VI, DP-UCBVI (JDP, LDP)",
            "reproductions.sdp_pe:fig4",
            sweep=True,
        ),
        Reproduction(
            "mopo-table1",
            "Differentially Private Deep Model-Based RL (PRIMORL); baseline MOPO (Yu et al.)",
            "Table 1, MOPO row: Pendulum (5 seeds), cartpole Balance and Swingup (3 seeds)",
            "reproductions.primorl.mopo:table1",
            sweep=True,
        ),
        Reproduction(
            "primorl-table1",
            "Differentially Private Deep Model-Based RL (PRIMORL)",
            "Table 1: MOPO, NO PRIVACY, LOW and HIGH on Pendulum, and on Balance and Swingup "
            "once their datasets are built (run seed by seed, resumable), a sweep over seeds",
            "reproductions.primorl.table1:table1",
            sweep=True,
            tasks=True,
        ),
        Reproduction(
            "primorl-ablation",
            "Differentially Private Deep Model-Based RL (PRIMORL)",
            "Table 10: penalty u_MA vs u_MPD × flat vs per-layer clipping at the paper's two z",
            "reproductions.primorl.ablation:ablation",
            sweep=True,
        ),
        Reproduction(
            "primorl-fig3",
            "Differentially Private Deep Model-Based RL (PRIMORL)",
            "Figure 3: Pendulum return vs ε (1 to 100, z calibrated under PLD) beside MOPO",
            "reproductions.primorl.fig3:fig3",
            sweep=True,
        ),
        Reproduction(
            "primorl-table11",
            "Differentially Private Deep Model-Based RL (PRIMORL)",
            "Table 11, HalfCheetah at this machine's scale: MOPO, NO CLIP, NO NOISE, z = 1e-4, "
            "z = 1e-3 and ε = 10 (ours), T and SAC epochs chosen from measured costs",
            "reproductions.primorl.table11:table11",
            sweep=True,
        ),
        Reproduction(
            "expert-table2a",
            "Sharma et al., Preserving Expert-Level Privacy in Offline RL",
            "Table 2a: mixing rate p at ε = 10 (CartPole, LunarLander; CQL, BCQ) vs DP-SGD",
            "reproductions.expert:table2a",
            sweep=True,
        ),
        Reproduction(
            "expert-table2b",
            "Sharma et al., Preserving Expert-Level Privacy in Offline RL",
            "Table 2b: low ε, filter on (ε1 = 3ε/4) vs off (ε1 = 0), Acrobot and CartPole BCQ",
            "reproductions.expert:table2b",
            sweep=True,
        ),
        Reproduction(
            "expert-fig3",
            "Sharma et al., Preserving Expert-Level Privacy in Offline RL",
            "Figure 3: normalised score vs ε, ours vs DP-SGD, four environments, CQL and BCQ",
            "reproductions.expert:fig3",
            sweep=True,
        ),
        Reproduction(
            "expert-fig3/regime",
            "Sharma et al., Preserving Expert-Level Privacy in Offline RL",
            "Figure 3 at ε = 10 in the paper's noise regime (z = 10, steps from the budget, "
            "capped): CartPole and LunarLander, ours vs DP-SGD vs ours with PLD + joint budget",
            "reproductions.expert:fig3_regime",
            sweep=True,
        ),
        Reproduction(
            "expert-fig4",
            "Sharma et al., Preserving Expert-Level Privacy in Offline RL",
            "Figure 4: Acrobot ε = 10 CQL, ours vs DP-SGD as the number of experts m grows",
            "reproductions.expert:fig4",
            sweep=True,
        ),
        Reproduction(
            "audit",
            "privrl audit (Jagielski et al. 2020; Nasr et al. 2021; Steinke et al. 2023)",
            "empirical ε lower bounds of every private system at two budgets, and their twins",
            "reproductions.audit.report:run",
            sweep=True,
        ),
    )
}


def reproductions_table() -> Table:
    """The registry as a table: id, paper, what."""
    table = Table(title="privrl reproduce ID")
    for col in ("id", "paper", "what"):
        table.add_column(col)
    for r in REPRODUCTIONS.values():
        table.add_row(r.id, r.paper, r.what)
    return table


def reproduce(
    target: str,
    out: Path | None = None,
    *,
    seeds: int | None = None,
    seed: int = 0,
    quick: bool = False,
    backend: str = "local",
    workers: int | None = None,
    address: str | None = None,
    tasks: str | None = None,
) -> object:
    """Regenerate reproduction `target` into `out` (default `REPORTS`/ID) with `seeds`
    seeds (default: the report's) from base seed `seed`; returns the report's path.

    `target` "all" regenerates every reproduction in turn (into docs/reproductions/ID), then
    the gallery. `backend` ("local" | "ray") and `workers` say where the reproduction's cells
    run: every reproduction runs on the sweep runner (system cells, or function cells for the
    Monte-Carlo studies, `privrl.runs.units`), so `reproduce("all", backend="ray")` regenerates
    every report on Ray. `address` (Ray only) is the cluster every Ray start of the process
    then connects to (it sets $PRIVRL_RAY_ADDRESS) instead of a local instance. `tasks`
    (comma-separated) runs only those tasks of a reproduction that has several
    (`Reproduction.tasks`: primorl-table1)."""
    from privrl.privacy.limits import InputError, check_int
    from privrl.runs.rundir import check_out_dir

    if address is not None:
        if backend != "ray":
            raise InputError("--address is for the Ray backend; add --backend ray")
        from privrl.runs.sweep import RAY_ADDRESS_ENV

        os.environ[RAY_ADDRESS_ENV] = address  # every sweep and unit batch of the run
    known = REPRODUCTIONS.get(target)
    if tasks is not None and (target == "all" or (known is not None and not known.tasks)):
        which = ", ".join(r.id for r in REPRODUCTIONS.values() if r.tasks)
        raise InputError(f"--tasks is for one reproduction with several tasks ({which})")
    if target == "all":
        if out is not None:
            raise InputError("reproduce all writes docs/reproductions/ID; drop --out")
        for name in REPRODUCTIONS:
            reproduce(name, seeds=seeds, seed=seed, quick=quick, backend=backend, workers=workers)
        return write_index()
    if target not in REPRODUCTIONS:
        known = ", ".join(REPRODUCTIONS)
        raise InputError(f"unknown reproduction {target!r}; available: all, {known}")
    if backend not in ("local", "ray"):
        raise InputError(f"--backend must be local or ray, got {backend!r}")
    if workers is not None:
        check_int(workers, "--workers", minimum=1, maximum=1024)
    if seeds is not None:
        check_int(seeds, "--seeds", minimum=1, maximum=MAX_SEEDS, why="every seed is a full run")
    check_int(seed, "--seed", minimum=0)
    out = check_out_dir(out or REPORTS / target)
    entry = REPRODUCTIONS[target]
    extra = {"backend": backend, "workers": workers} if entry.sweep else {}
    if tasks is not None:
        extra["tasks"] = tasks
    return entry.load()(out, seeds=seeds, seed=seed, quick=quick, **extra)


def write_index(root: Path | None = None) -> Path:
    """Regenerate the gallery `root`/index.md (default `REPORTS`) from every
    `root`/*/claims.json; refuses a root that is not an existing directory."""
    from privrl.privacy.limits import InputError
    from reproductions.gallery import write_index as _write_index

    root = root or REPORTS
    if not root.is_dir():
        raise InputError(f"--out {root}: not a directory of reproductions; give docs/reproductions")
    return _write_index(root)
