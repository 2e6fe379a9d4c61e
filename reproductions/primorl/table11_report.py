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
    EARLIER,
    EARLIER_ROUNDS,
    EPOCHS,
    HIDDEN,
    ID,
    INVESTIGATION,
    LABELS,
    LOCAL_OPTIMIZER,
    MEASURED,
    MOPO_LEARNED,
    MOPO_MODEL_EPOCHS,
    N_PARAMS,
    PAPER,
    PAPER_DP_ROUND,
    PLOT_EPSILON,
    PLOT_RETURNS,
    ROUNDS,
    ROWS,
    SERVER_EMA,
    TARGET_EPSILON,
    K,
    Q,
    _paper_share,
    accounting,
    claims,
    model_flags,
    projected_cost,
    return_text,
    rounds,
    row_of,
    summarise,
)
from reproductions.templates import beside

__all__ = ["write_report"]

TEXT = beside(__file__, "table11_report.md.tmpl")


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
        "dynamics_hidden": list(HIDDEN),
        "server_ema": SERVER_EMA,
        "local_optimizer": LOCAL_OPTIMIZER,
        "clip_norm": CLIP,
        "target_epsilon": TARGET_EPSILON,
        "mopo_model_epochs": 1 if scale.quick else MOPO_MODEL_EPOCHS,
    }
    text = _markdown(
        summary,
        found,
        acc,
        cost,
        scale,
        data=data,
        missing=missing,
        wall=wall,
        rows=rows,
        earlier=earlier_summary(out),
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
            mse = "—" if s.get("model_mse") is None else f"{s['model_mse']:.3g}"
            ours = (f"model diverged ({s['diverged']} seed(s))", "—", "—", "—", mse)
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


def _scale_text(cost: Mapping[str, Any], scale: Scale) -> str:
    """The section on the scale: the measured costs, the chosen T and epochs with their
    projected core-hours, and the paper's scale, which did not fit."""
    m = MEASURED
    paper_T = 10_000
    paper_run_h = (paper_T * PAPER_DP_ROUND + 200 * m["primorl_policy_epoch"]) / 3600
    return TEXT.fill(
        "scale",
        investigation=INVESTIGATION,
        load=f"{m['load_average']:.1f}",
        hidden=_hidden(),
        qk=f"{Q * K:g}",
        q=f"{Q:g}",
        dp_round=f"{m['dp_round']:.1f}",
        policy_epoch=f"{m['primorl_policy_epoch']:.0f}",
        policy_epoch_busy=f"{BUSY['primorl_policy_epoch']:.0f}",
        mopo_dynamics=f"{m['mopo_dynamics_epoch']:.0f}",
        mopo_dynamics_busy=f"{BUSY['mopo_dynamics_epoch']:.0f}",
        mopo_policy=f"{m['mopo_policy_epoch']:.0f}",
        mopo_policy_busy=f"{BUSY['mopo_policy_epoch']:.0f}",
        rounds=ROUNDS,
        epochs=EPOCHS,
        mopo_model_epochs=MOPO_MODEL_EPOCHS,
        primorl_hours=f"{cost['primorl_run_hours']:.2f}",
        mopo_hours=f"{cost['mopo_run_hours']:.2f}",
        seeds=cost["seeds"],
        core_hours=f"{cost['core_hours']:.1f}",
        wall_hours=f"{cost['wall_hours_on_2_cores']:.1f}",
        core_hours_busy=f"{cost['core_hours_busy']:.1f}",
        budget=f"{BUDGET_CORE_HOURS:g}",
        paper_dp_round=f"{PAPER_DP_ROUND:.1f}",
        paper_rounds=f"{paper_T:,}",
        paper_run_hours=f"{paper_run_h:.0f}",
        paper_days=f"{5 * paper_run_h / 24:.0f}",
        trajectories=f"{ROUNDS * Q * K:,.0f}",
        passes=f"{ROUNDS * Q * K / 1800:.1f}",
    )


def _hidden() -> str:
    return (
        "×".join(str(w) for w in HIDDEN) if len(set(HIDDEN)) > 1 else f"{len(HIDDEN)}×{HIDDEN[0]}"
    )


def _differences() -> str:
    """The table of what differs from the paper."""
    return TEXT.fill(
        "differences",
        q=f"{Q:g}",
        qk=f"{Q * K:g}",
        rounds=ROUNDS,
        hidden=_hidden(),
        ema=f"{SERVER_EMA:g}",
        calibrated_z=str(CALIBRATED_Z),
        target=f"{TARGET_EPSILON:g}",
        epochs=EPOCHS,
    )


def earlier_summary(out: Path) -> dict[str, dict[str, Any]]:
    """The earlier run's rows (the paper's configuration, `EARLIER` beside the report): its
    metrics.json's, or none when the record is absent."""
    import json

    try:
        metrics = json.loads((out / EARLIER / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return dict(metrics.get("rows") or {})


def _earlier(summary: Mapping[str, Mapping[str, Any]], earlier: Mapping[str, Any]) -> str:
    """The rows of this table beside the earlier run's in the paper's configuration."""
    if not earlier:
        return f"(The earlier run's record, `{EARLIER}/`, is not beside this report.)"

    def cells(s: Mapping[str, Any] | None) -> tuple[str, str, str]:
        if not s:
            return "—", "—", "—"
        mse = "—" if s.get("model_mse") is None else f"{s['model_mse']:.3g}"
        if "return" not in s:
            return mse, "model diverged" if s.get("diverged") else "—", "—"
        share = "—" if s.get("share") is None else f"{s['share']:.1f}%"
        return mse, f"{s['return']:.0f}", share

    lines = []
    for row in ROWS:
        then, now = cells(earlier.get(row)), cells(summary.get(row))
        pairs = " | ".join(f"{a} | {b}" for a, b in zip(then, now, strict=True))
        lines.append(f"| {LABELS[row]} | {pairs} |")
    return TEXT.fill(
        "earlier", earlier_rounds=EARLIER_ROUNDS, earlier_dir=EARLIER, earlier_rows="\n".join(lines)
    )


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
    earlier: Mapping[str, Any],
) -> str:
    left = _pending(rows)
    warn = shared.mopo_not_learned(summary.get("mopo"), MOPO_LEARNED) if summary else []
    fields = {
        "id": ID,
        "seeds": scale.seeds,
        "target": f"{TARGET_EPSILON:g}",
        "clip": f"{CLIP:g}",
        "q": f"{Q:g}",
        "rounds": rounds(scale),
        "model_flags": model_flags(),
        "hidden": _hidden(),
        "epochs": scale.epochs,
        "smoke": "\n".join(shared.smoke_lines(scale)),
        "where": _where(scale, data=data, missing=missing, wall=wall, rows=rows),
        "incomplete": _incomplete(left, rows),
        "rows_table": "\n".join(_table(summary, acc, {row_of(r) for r in left})),
        "verdicts": "\n".join(shared.verdict_lines(found)),
        "warning": "\n".join(warn) + "\n" if warn else "",
        "returns_plot": f"![returns]({PLOT_RETURNS})\n" if summary else "",
        "plot_epsilon": PLOT_EPSILON,
        "scale": _scale_text(cost, scale),
        "differences": _differences(),
        "earlier": _earlier(summary, earlier),
        "earlier_dir": EARLIER,
        **_noise_fields(),
    }
    return TEXT.fill("report", fields) + "\n"


def _where(
    scale: Scale, *, data: Path | None, missing: str, wall: float, rows: Sequence[Mapping[str, Any]]
) -> str:
    """The dataset the cells ran on and their time, or why nothing ran."""
    if data is None:
        return TEXT.fill(
            "absent",
            why=missing,
            build_minutes=BUILD_MINUTES,
            id=ID,
            rows=len(ROWS),
            seeds=scale.seeds,
            cells=len(ROWS) * scale.seeds,
        )
    return TEXT.fill(
        "ran",
        data=data.name,
        cell_minutes=f"{shared.cell_seconds(rows) / 60:.1f}",
        wall_minutes=f"{wall / 60:.1f}",
    )


def _incomplete(left: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]) -> str:
    """The paragraph on the cells a time budget left unfinished ("" when none is)."""
    if not left:
        return ""
    text = TEXT.fill("incomplete", left=len(left), cells=len(rows), budget_env=BUDGET_ENV, id=ID)
    return text + "\n"


def _noise_fields() -> dict[str, str]:
    """What a round's noise is against the update (public sizes only), for the notes."""
    std = {r: z * CLIP / (Q * K) for r, z in (("eps", CALIBRATED_Z), ("z-1e-3", 1e-3))}
    return {
        "n_params": f"{N_PARAMS:,}",
        "qk": f"{Q * K:g}",
        "std_eps": f"{std['eps']:.3g}",
        "calibrated_z": str(CALIBRATED_Z),
        "norm_eps": f"{std['eps'] * N_PARAMS**0.5:.0f}",
        "std_z3": f"{std['z-1e-3']:.1e}",
        "norm_z3": f"{std['z-1e-3'] * N_PARAMS**0.5:.2f}",
        "ema_span": f"{1 / (1 - SERVER_EMA):.0f}",
    }
