"""The report of ``primorl-table11`` (`reproductions.primorl.table11` runs the sweep):
the rows beside the paper's Table 11 with our ε, the claims, the ε-vs-z plot (always) and the
learning curves (when cells ran), and the scale: measured costs, the chosen T and epochs, their
projected core-hours and what did not fit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from privrl.runs.sweep import BUDGET_ENV
from reproductions.primorl import sweeps as shared
from reproductions.primorl.sweeps import Scale
from reproductions.primorl.table11 import (
    BUDGET_CORE_HOURS,
    BUILD_MINUTES,
    BUSY,
    CALIBRATED_Z,
    CLIP,
    DELTA,
    EPOCHS,
    ID,
    LABELS,
    LOCAL_OPTIMIZER,
    MEASURED,
    MOPO_LEARNED,
    MOPO_MODEL_EPOCHS,
    N_PARAMS,
    PAPER,
    PLOT_EPSILON,
    PLOT_RETURNS,
    ROUNDS,
    ROWS,
    TARGET_EPSILON,
    K,
    Q,
    _paper_share,
    accounting,
    claims,
    projected_cost,
    return_text,
    rounds,
    row_of,
    summarise,
)

__all__ = ["write_report"]

# Why the PRIMORL rows' policies do not learn at this scale: runs made beside the sweep, on the
# recipe data (which we simulate) and on the released models (post-processing), seed 0, each
# with the command that repeats it (CELL: a finished cell's directory in the sweep's cache).
INVESTIGATED = (
    "- Investigated, the policy stage's length: the table first ran 20 SAC epochs per row. "
    "There MOPO returned 1873 (normalised 26.9); its 60-epoch run was at ≈ 3,500 at epoch 20 "
    "and 5,600–7,100 in epochs 52–60. So 20 epochs were too few for MOPO itself, and the "
    "table now runs 60: each 60-epoch cell continued its 20-epoch cell from its checkpoints "
    "(PRIMORL from its released model: no second DP-FedAvg, no new spend; tested to equal a "
    "fresh cell bit for bit). The PRIMORL rows from 20 to 60 epochs: NO CLIP −859 → 47, NO "
    "NOISE −444 → −218, z = 1e-4 −483 → −242, z = 1e-3 −161 → −291. More epochs do not make "
    "them learn.",
    "- Investigated, rollout starts: the NO NOISE row's released model with rollouts started "
    "from the public split (`privrl train primorl --model CELL/run/model.pt --start-states "
    "public-split --epochs 20`, post-processing: no data, no spend) returns −393 ± 203 "
    "(initial starts, 20 epochs: −444). In those rollouts the model predicts ≈ 5 reward per "
    "step, as MOPO's model does for MOPO's policy, which earns ≈ 3.5 per real step; the real "
    "return is negative. The policy exploits the released model's error (public-split MSE "
    "0.89 against MOPO's 0.23) wherever its rollouts start.",
    "- Investigated, the server's step: DP-FedAvg with server momentum β = 0.9 "
    "(`--server-momentum 0.9`, η_s = 1; post-processing, ε unchanged) at the NO NOISE row's "
    "settings diverges first: public-split MSE 82–2,825 per member at round 50 and 5.9–27 at "
    "round 100, against FedAvg's 1.19–1.34 and 1.18–1.59. The table keeps FedAvg's step.",
    "- The ε = 10 row's release (z = 0.469): its public-split MSE was ≈ 2e12 at every "
    "evaluation (rounds 50–250; MOPO's model: 0.23), so the noise drowned the model, as "
    "expected from the noise's scale above, and SAC trained in it reached non-finite "
    "parameters within its first 20 epochs (and, in the 60-epoch run, after its first "
    "epoch): *model diverged*, no policy.",
    "- So the model limits the PRIMORL rows at T = 250, not the policy stage: the NO NOISE "
    "model's MSE fell from 1.27 at round 50 to 0.89 at round 250 and was still falling. The "
    'paper\'s "tens of thousands" of rounds (≈ 2.6 h per 1000 rounds on one core here) is '
    "the lever, and it does not fit (see Scale).",
)


def write_report(
    out: Path,
    rows: Sequence[Mapping[str, Any]],
    scale: Scale,
    *,
    data: Path | None,
    wall: float,
    missing: str = "",
) -> Path:
    """report.md, claims.json, config.json, metrics.json and plots/ (the ε plot always; the
    learning curves when cells ran)."""
    T = rounds(scale)
    summary = summarise(rows)
    pending = _pending(rows)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    acc = accounting(T)
    _plot_epsilon(acc, T, out / PLOT_EPSILON)
    if summary:
        _plot_returns(summary, out / PLOT_RETURNS)
    found = claims(summary, quick=scale.quick, T=T, pending=bool(pending))
    cost = projected_cost(seeds=scale.seeds, epochs=EPOCHS if scale.quick else scale.epochs)
    metrics = {
        "rows": {k: {n: v for n, v in s.items() if n != "curves"} for k, s in summary.items()},
        "accounting": acc,
        "measured_seconds": MEASURED,
        "projected": cost,
        "not_run": missing or None,
        "pending_cells": len(pending),
        "complete": data is not None and not pending,
    }
    config = {
        "reproduction": ID,
        "data": None if data is None else data.name,
        **dataclasses.asdict(scale),
        "rounds": T,
        "sampling_rate": Q,
        "clip_norm": CLIP,
        "target_epsilon": TARGET_EPSILON,
        "mopo_model_epochs": 1 if scale.quick else MOPO_MODEL_EPOCHS,
    }
    text = _markdown(
        summary, found, acc, cost, scale, data=data, missing=missing, wall=wall, rows=rows
    )
    return shared.write_outputs(out, found, config, metrics, text)


def _pending(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The cells left unfinished (a time budget stopped the sweep before them): neither a
    result nor a tolerated outcome (a diverged model)."""
    return [r for r in rows if r.get("status") not in ("ok", "failed")]


def _plot_epsilon(acc: Mapping[str, Mapping[str, Any]], T: int, path: Path) -> None:
    from privrl.primorl.dp_fedavg import _epsilon_cached
    from privrl.runs.plots import draw
    from privrl.runs.system import PlotSpec, Series

    zs = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.2, 0.3, 0.45, 0.7, 1.0]
    eps = [_epsilon_cached(z, Q, T, DELTA, "rdp") for z in zs]
    marks = [Series(LABELS[r], [a["z"]], [a["rdp"]], style="o") for r, a in acc.items()]
    draw(
        PlotSpec(
            "epsilon",
            f"PRIMORL HalfCheetah: ε (RDP, δ = 1e-5) vs z, q = {Q:g}, T = {T}",
            "noise multiplier z",
            "ε",
            [Series("ε (RDP)", zs, eps), *marks],
            hlines=[(f"ε = {TARGET_EPSILON:g}", TARGET_EPSILON)],
            logx=True,
            logy=True,
        ),
        path,
    )


def _plot_returns(summary: Mapping[str, Mapping[str, Any]], path: Path) -> None:
    from privrl.runs.plots import draw
    from privrl.runs.system import PlotSpec

    series = [shared.curve_series(LABELS[n], s["curves"]) for n, s in summary.items()]
    draw(
        PlotSpec(
            "returns",
            "PRIMORL Table 11, HalfCheetah: return in the real simulator",
            "SAC epoch",
            "return (10 episodes)",
            [s for s in series if s is not None],
        ),
        path,
    )


def _eps_cell(row: str, acc: Mapping[str, Mapping[str, Any]], s: Mapping[str, Any] | None) -> str:
    """A row's ε: ∞ (not private); RDP for the tiny-z rows (no PLD); PLD (RDP) for the eps row."""
    if row in ("mopo", "no-clip", "no-noise"):
        return "∞"
    a = acc.get(row)
    if s is not None and row == "eps" and "epsilon" in s:
        return f"{s['epsilon']:.2f} (PLD)" + (f"; RDP {a['rdp']:.2f}" if a else "")
    if a is None:
        return f"{TARGET_EPSILON:g} (PLD target)" if row == "eps" else "—"
    if a["pld"] is None:
        return f"{a['rdp']:.3g} (RDP; no meaningful ε)"
    return f"{a['pld']:.2f} (PLD, z = {a['z']:.3f}); RDP {a['rdp']:.2f}"


def _table(
    summary: Mapping[str, Mapping[str, Any]], acc: Mapping[str, Any], pending: set[str]
) -> list[str]:
    lines = [
        "| method | z | our ε at δ = 1e-5 | paper return | paper % of MOPO | our return ± 95% CI "
        "| % of our MOPO | normalised | per seed | model MSE |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    zs = {"mopo": "—", "no-clip": "0", "no-noise": "0", "z-1e-4": "1e-4", "z-1e-3": "1e-3"}
    for row in ROWS:
        s = summary.get(row)
        z = zs.get(row) or (f"{acc['eps']['z']:.3f}" if "eps" in acc else "calibrated")
        paper = "—", "—"
        if row in PAPER:
            paper = f"{PAPER[row][0]:.0f} ± {PAPER[row][1]:.0f}", f"{_paper_share(row):.1f}%"
        ours = ("pending" if row in pending else "not run", "—", "—", "—", "—")
        if s is not None and "return" not in s:
            ours = (f"model diverged ({s['diverged']} seed(s))", "—", "—", "—", "—")
        elif s is not None:
            share, per_seed = shared.share_texts(s)
            lost = f"; {s['diverged']} diverged" if s.get("diverged") else ""
            ours = (
                return_text(s),
                share,
                _num(s["normalised"]),
                per_seed + lost,
                "—" if s.get("model_mse") is None else f"{s['model_mse']:.3g}",
            )
        lines.append(
            f"| {LABELS[row]} | {z} | {_eps_cell(row, acc, s)} | {' | '.join(paper)} | "
            f"{' | '.join(ours)} |"
        )
    return lines


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def _scale_lines(cost: Mapping[str, Any], scale: Scale) -> list[str]:
    m = MEASURED
    paper_T = 10_000
    paper_run_h = (paper_T * m["dp_round"] + 200 * m["primorl_policy_epoch"]) / 3600
    return [
        "## Scale: measured, chosen, and what did not fit",
        "",
        "Measured on this machine on one thread (`python benchmarks/bench_primorl_table11.py`, "
        "benchmarks/results/bench_primorl_table11.json; 2 cores shared with two other jobs, "
        f"load average ≈ {m['load_average']:.1f}); in brackets the same costs on a busier "
        "machine (the DP round of `bench_primorl_step.py --mode tasks`; the epochs of two "
        "measurement runs made side by side):",
        "",
        f"- one DP-FedAvg round at HalfCheetah sizes (7 members × 4×200, per-layer clipping, "
        f"q·K = 20 sampled trajectories of 1000 steps, 63 local steps each): "
        f"**{m['dp_round']:.1f} s** ({BUSY['dp_round']:.1f} s);",
        f"- one PRIMORL policy-stage epoch (1000 SAC updates, 50,000 model rollouts of 5 steps, "
        f"10 evaluation episodes of 1000 steps): **{m['primorl_policy_epoch']:.0f} s** "
        f"({BUSY['primorl_policy_epoch']:.0f} s);",
        f"- one MOPO dynamics epoch (2000 minibatches of 256): "
        f"**{m['mopo_dynamics_epoch']:.0f} s** ({BUSY['mopo_dynamics_epoch']:.0f} s); one MOPO "
        f"policy epoch: **{m['mopo_policy_epoch']:.0f} s** ({BUSY['mopo_policy_epoch']:.0f} s).",
        "",
        f"Chosen full scale: **T = {ROUNDS} DP-FedAvg rounds** for every PRIMORL row (fixed in "
        f"advance; early stopping on the public split as usual), **{EPOCHS} SAC epochs** for "
        f"every row (the return is the mean of the last 10 epochs' evaluations; the paper "
        f"averages the last 20 of a longer run), MOPO's dynamics capped at "
        f"**{MOPO_MODEL_EPOCHS} epochs** (its preset allows 100 with early stopping). A "
        f"PRIMORL run is ≈ {cost['primorl_run_hours']:.2f} h, MOPO ≈ "
        f"{cost['mopo_run_hours']:.2f} h; the table at {cost['seeds']} seed(s) is "
        f"**≈ {cost['core_hours']:.1f} core-hours** (≈ {cost['wall_hours_on_2_cores']:.1f} h of "
        f"wall time on 2 cores with `--workers 2`), ≈ {cost['core_hours_busy']:.1f} at the "
        f"busier costs; the target was ≈ {BUDGET_CORE_HOURS:g} at one seed. Each extra seed "
        "costs the same again.",
        "",
        "**What did not fit:** the paper's scale. It does not report T for HalfCheetah and says "
        'model training needs "tens of thousands of iterations" there (Section L); at '
        f"T = {paper_T:,} one PRIMORL run would be ≈ {paper_run_h:.0f} h on one thread at the "
        "measured costs "
        f"(with 200 SAC epochs, its preset), ≈ {5 * paper_run_h / 24:.0f} core-days for the "
        f"five PRIMORL rows at one seed. At T = {ROUNDS} the ensemble sees ≈ "
        f"{ROUNDS * 20:,} sampled trajectories in all (≈ {ROUNDS * 20 / 1800:.1f} passes over "
        "the 1,800 private episodes), far from converged; the rows measure what PRIMORL's "
        "model buys at this budget, not the paper's converged model. The paper ran model "
        "training on 16 CPUs and SAC on a GPU (Appendix, Table 7).",
        "",
    ]


def _markdown(
    summary: Mapping[str, Mapping[str, Any]],
    found: Sequence[Mapping[str, str]],
    acc: Mapping[str, Any],
    cost: Mapping[str, Any],
    scale: Scale,
    *,
    data: Path | None,
    missing: str,
    wall: float,
    rows: Sequence[Mapping[str, Any]],
) -> str:
    T = rounds(scale)
    lines = [
        "# PRIMORL Table 11 (HalfCheetah)",
        "",
        f"Regenerated by `privrl reproduce {ID} --seeds {scale.seeds}`: a sweep of `privrl "
        "train mopo` and `privrl train primorl` runs (`--variant no-clip`, `--variant "
        "no-privacy`, `--noise-multiplier 1e-4 --accountant rdp`, `--noise-multiplier 1e-3 "
        f"--accountant rdp`, `--epsilon {TARGET_EPSILON:g}`) on the HalfCheetah recipe dataset, "
        f"the task preset (MA penalty, λ = 1, rollout length 5, per-layer clipping, C = {CLIP:g}, "
        f"q = {Q:g}: paper Section J and Table 8), T = {T} DP-FedAvg rounds with local Adam "
        f"(`--local-optimizer {LOCAL_OPTIMIZER}`, see below), {scale.epochs} SAC epochs, "
        f"{scale.seeds} seed(s).",
        "",
        *shared.smoke_lines(scale),
    ]
    if data is None:
        lines += [
            "## Not run: the dataset is absent",
            "",
            f"Not run: {missing}. Build it with `privrl data collect --recipe "
            f"primorl-halfcheetah` (≈ {BUILD_MINUTES} min on an idle core, × 2–3 on a busy "
            "machine, docs/primorl-data.md; resumable), "
            f"then rerun `privrl reproduce {ID}`. This reproduction does not build datasets. "
            f"It would run {len(ROWS)} rows × {scale.seeds} seed(s) = "
            f"{len(ROWS) * scale.seeds} cells at the cost below; the table states our ε for "
            "every private row (our accountant, public z, q and T) and the paper's numbers.",
            "",
        ]
    else:
        lines += [
            f"On `{data.name}`. The cells ran for {shared.cell_seconds(rows) / 60:.1f} min in all "
            f"(one thread each); this invocation took {wall / 60:.1f} min (finished cells are "
            "skipped).",
            "",
        ]
    left = _pending(rows)
    if left:
        lines += [
            f"**Incomplete**: {len(left)} of {len(rows)} cells have not finished (a time "
            f"budget, `${BUDGET_ENV}`, ended this invocation before them, or another one is "
            f"still running them); their rows are *pending*. Rerun `privrl reproduce {ID}` to "
            "finish: the finished cells are skipped.",
            "",
        ]
    lines += ["## Table 11", "", *_table(summary, acc, {row_of(r) for r in left}), ""]
    lines += [
        "The paper's returns are raw HalfCheetah returns (D4RL medium-expert, K = 2,003; its "
        "± is its reported spread over runs); ours are on the same simulator scale (privrl "
        "does not transform HalfCheetah's reward) but on our own medium-expert-style set "
        "(D4RL is not reachable, docs/primorl-data.md), so compare shares of each side's "
        "MOPO. The ε column is our accountant's at δ = 1e-5 for the row's z, q and T "
        "(trajectory-level, add/remove). At z = 1e-4 and 1e-3 the privacy loss is so large "
        "that a PLD grid for it would need terabytes (`privrl train primorl` refuses PLD there "
        "and names `--accountant rdp`); their RDP ε is astronomically large: no meaningful "
        "ε, as the paper says. The ε row is ours: z calibrated under PLD for "
        f"ε = {TARGET_EPSILON:g} at the same q and T. Model MSE: the members' mean MSE of "
        "[s' − s, r] (data units) on the declared-public split, of the released model "
        "(PRIMORL, after its T rounds: post-processing of the release) or of MOPO's trained "
        "one, the same measure for both: whether the model learned before the policy stage.",
        "",
        *shared.verdict_lines(found),
        "",
    ]
    if summary and (warn := shared.mopo_not_learned(summary.get("mopo"), MOPO_LEARNED)):
        lines += [*warn, ""]
    if summary:
        lines += [f"![returns]({PLOT_RETURNS})", ""]
    lines += [f"![epsilon]({PLOT_EPSILON})", "", *_scale_lines(cost, scale)]
    std = {r: z * CLIP / (Q * K) for r, z in (("eps", CALIBRATED_Z), ("z-1e-3", 1e-3))}
    lines += [
        "## Notes",
        "",
        "- What the noise does (public sizes only): a round adds N(0, (zC/(qK))²) to each of "
        f"the ensemble's {N_PARAMS:,} parameters, qK = {Q * K:g}: a per-coordinate std of "
        f"{std['eps']:.2f} at the ε row's z = {CALIBRATED_Z} (norm ≈ "
        f"{std['eps'] * N_PARAMS**0.5:.0f}) and {std['z-1e-3']:.1e} at z = 1e-3 (norm ≈ "
        f"{std['z-1e-3'] * N_PARAMS**0.5:.2f}), against the averaged update's norm of at "
        f"most ≈ C = {CLIP:g} (Σ‖Δ_k‖/(qK) with |U_t| ≈ qK). At ε = 10 the model is "
        "expected to be mostly noise; a seed whose released model sends every rollout to "
        "non-finite values, or drives the policy trained in it to non-finite parameters, is "
        "reported as *model diverged* (no policy, no return), not as a failed sweep.",
        "- Local optimizer: Adam, reset for every trajectory and round (the spec's option; "
        "the clip bounds each trajectory's update whatever the local steps, so the event and "
        "ε are those of SGD). The paper's local SGD (η = 1e-3) does not train the 4×200 "
        "ensemble within this T: at z = 0, C = ∞ its public-split MSE went 46.6 → 45.6 in "
        "60 rounds and was 45.5 at round 250 (the model predicts little more than the mean; "
        "its policy returned −448), against 5.4 → 1.25 in 60 rounds with local Adam; MOPO's "
        "model, trained with Adam on all the data, reaches 0.22–0.25. Measured on the recipe "
        "data, which we simulate, so choosing the optimizer spends no one's privacy.",
        *INVESTIGATED,
        "- NO CLIP and NO NOISE follow the paper's Table 3: trajectory-level ensemble training "
        "(DP-FedAvg, trajectories as clients) without noise, NO CLIP also without clipping; "
        "neither is private (ε = ∞).",
        "- Model rollouts start from the simulator's initial states (chained), never from "
        "dataset states (docs/primorl.md); MOPO starts from dataset states and mixes 5% real "
        "data, as in its paper.",
        "- The public split is 10% of the episodes (paper Table 8; its text says 20%); the "
        "paper's early-stopping patience for HalfCheetah is 5, ours the default 10 "
        "evaluations (at this T early stopping rarely triggers).",
        "",
    ]
    return "\n".join(lines)
