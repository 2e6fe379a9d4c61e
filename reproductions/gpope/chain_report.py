"""The report of the chain figures, GPOPE Figure 1(a) and 1(b): plot, tables, setup text, claims
and the run-directory files. A full run (`chain.fig1a`, `chain.fig1b`) and a rebuild from the
committed per-trial results (`chain.fig1a_from_results`, `chain.fig1b_from_results`) write
through the same functions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from privrl.runs.rundir import RunDir
from reproductions.gpope import lstd_op_chain as op
from reproductions.gpope import minibatch_chain as mb
from reproductions.gpope.chain_claims import fig1a_claims, fig1b_claims, lstd_op_verdict
from reproductions.gpope.common import (
    CHAIN_EPS,
    DELTA,
    ETAS,
    ITER_PER_TRAJ,
    LSL_C,
    PAPER,
    _Acc,
    _Cfg,
    _finish,
    _fmt,
    _setup_lines,
)
from reproductions.gpope.plots import Panel, mspbe_panels
from reproductions.templates import beside
from reproductions.templates import table as tpl_table

if TYPE_CHECKING:
    from reproductions.gpope.chain import _Chain

TEXT = beside(__file__, "chain_report.md.tmpl")


def _chain_notes(chain: _Chain) -> list[str]:
    V = chain.mdp.true_values()[:-1]
    theta_star = chain.system.theta_star()
    return [
        f"MSPBE(θ = 0) = {chain.system.mspbe(np.zeros(V.size)):.4g} (the trivial estimator, "
        "a reference every private estimate should beat).",
        "θ* = A⁻¹b of the per-trajectory-averaged statistics (2.1) is NOT the true V on the "
        f"chain: max |θ* − V| = {np.max(np.abs(theta_star - V)):.3g}, MSPBE(V) = "
        f"{chain.system.mspbe(V):.3g} (the 1/τ weighting under-weights self-transitions; see "
        "`privrl.envs.chain`). LSTD (pooled transitions) targets V, so its MSPBE does not go "
        "to 0; the per-trajectory empirical saddle point (what non-private GTD2 converges to) "
        "does.",
    ]


FIG1A_METHODS = (
    "GP (1× step)",
    "GP (0.1× step)",
    "GP (10× step)",
    "V1 (DP-LSW)",
    "V2 (DP-LSL)",
    "LSTD (non-private)",
    "empirical saddle point (non-private)",
)


def _fig1a_plot(path: Path, table: dict, ms: Sequence[int], zero: float) -> None:
    refs = {"LSTD (non-private)": [table[(m, "LSTD (non-private)")]["mean"] for m in ms]}

    def col(k: str) -> list[dict[str, float]]:
        return [table[(m, k)] for m in ms]

    left = Panel(
        x=ms,
        series={
            **{k: col(k) for k in ("GP (1× step)", "GP (0.1× step)", "GP (10× step)")},
            mb.method(0.1): col(mb.method(0.1)),
            op.method(0.1): col(op.method(0.1)),
            "V1 (DP-LSW)": col("V1 (DP-LSW)"),
            "V2 (DP-LSL)": col("V2 (DP-LSL)"),
        },
        zero=zero,
        title=f"ε = {CHAIN_EPS}: paper-mode GP (3 steps), V1, V2; minibatch GP, LSTD-OP",
        xlabel="m (trajectories)",
        references=refs,
        off_scale=("V1 (DP-LSW)", "V2 (DP-LSL)"),
        arrow_at=(0.02, 0.6),
    )
    right = Panel(
        x=ms,
        series={mb.method(1.0): col(mb.method(1.0)), op.method(1.0): col(op.method(1.0))},
        zero=zero,
        title="ε = 1 (beyond the paper): minibatch GP, LSTD-OP",
        xlabel="m (trajectories)",
        references=refs,
    )
    mspbe_panels(
        path,
        [left, right],
        suptitle=f"GPOPE Fig. 1(a), chain, δ = {DELTA:g}: MSPBE vs m (mean ± std over trials)",
    )


@dataclass(frozen=True)
class Fig1aInputs:
    """What Figure 1(a)'s report is written from: the chain, the run's settings and per-trial
    results, the public facts of each series and the wall time. `rebuilt_in`: the LSTD-OP
    series' wall time when the rest comes from committed rows (None for a full run)."""

    chain: _Chain
    cfg: _Cfg
    acc: _Acc
    ms: Sequence[int]
    facts: Sequence[dict[str, Any]]
    mb_facts: Sequence[dict[str, Any]]
    op_facts: Sequence[dict[str, Any]]
    seconds: float
    factors: Sequence[float]
    rebuilt_in: float | None = None


OP_RIDGE = tuple(f"ridge LSTD, no noise (λ of ε={e:g})" for e in op.EPSILONS)


def _write_fig1a(out: Path, inputs: Fig1aInputs) -> Path:
    """Figure 1(a)'s plot, report, claims and run-directory files in `out`."""
    ms = inputs.ms
    methods = [
        *FIG1A_METHODS,
        *(mb.method(e) for e in mb.EPSILONS),
        *(op.method(e) for e in op.EPSILONS),
        *OP_RIDGE,
    ]
    table = {(m, k): inputs.acc.stats(m=m, method=k) for m in ms for k in methods}
    zero = inputs.chain.zero_mspbe()
    run = RunDir(out)
    _fig1a_plot(run.plot_path("fig1a"), table, ms, zero)
    claims = fig1a_claims(table, ms, zero)
    md = TEXT.fill("fig1a", _fig1a_fields(inputs, table, zero), claims="\n".join(claims.rows))
    return _finish(
        run,
        md.split("\n"),
        inputs.acc,
        _fig1a_config(inputs),
        {
            "mspbe": table[(ms[-1], "GP (1× step)")]["mean"],
            "mspbe_minibatch_eps1": table[(ms[-1], mb.method(1.0))]["mean"],
            "mspbe_lstd_op_eps1": table[(ms[-1], op.method(1.0))]["mean"],
            "mspbe_theta_zero": zero,
            "mspbe_v1": table[(ms[-1], "V1 (DP-LSW)")]["mean"],
            "mspbe_v2": table[(ms[-1], "V2 (DP-LSL)")]["mean"],
        },
        inputs.facts[-1],
        orders=inputs.cfg.orders,
        claims=claims.items,
    )


def _fig1a_config(inputs: Fig1aInputs) -> dict[str, Any]:
    cfg, rebuilt_in = inputs.cfg, inputs.rebuilt_in
    return {
        "figure": "fig1a",
        "ms": list(inputs.ms),
        "trials": cfg.trials,
        "epsilon": CHAIN_EPS,
        "delta": DELTA,
        "base_seed": cfg.base,
        "iterations_per_trajectory": ITER_PER_TRAJ,
        "step_factors": list(inputs.factors),
        "facts": list(inputs.facts),
        "minibatch_facts": list(inputs.mb_facts),
        "lstd_op_facts": list(inputs.op_facts),
        "wall_time_s": round(inputs.seconds),
        **({"lstd_op_wall_time_s": round(rebuilt_in)} if rebuilt_in is not None else {}),
    }


def _mspbe_grid(table: dict, ms: Sequence[int], cols: Sequence[str], zero: str) -> str:
    """MSPBE per m (rows) and method (columns), then a θ = 0 column."""
    rows = [[m, *(_fmt(table[(m, k)]) for k in cols), zero] for m in ms]
    return tpl_table(["m", *cols, "θ = 0"], rows)


def _fig1a_fields(inputs: Fig1aInputs, table: dict, zero: float) -> dict[str, str]:
    ms, op_facts = inputs.ms, inputs.op_facts
    big = max(ms)
    lam_big = next(f["ridge"] for f in op_facts if f["m"] == big and f["epsilon"] == 1.0)
    bias_big = table[(big, "ridge LSTD, no noise (λ of ε=1)")]["mean"]
    v_sig = [r["sigma"] for r in inputs.acc.rows if r["method"] == "V1 (DP-LSW)"]
    mb_cols = [mb.method(e) for e in mb.EPSILONS]
    op_cols = [*(op.method(e) for e in op.EPSILONS), *OP_RIDGE, *mb_cols]
    return {
        "paper": PAPER,
        "epsilon": str(CHAIN_EPS),
        "iterations_per_trajectory": str(ITER_PER_TRAJ),
        "etas": ", ".join(f"{e:.2g}" for e in ETAS),
        "lsl_c": str(LSL_C),
        "setup": "\n".join(_fig1a_setup(inputs)),
        "results_table": tpl_table(
            ["m", "N", *FIG1A_METHODS],
            [
                [m, f["N"], *(_fmt(table[(m, k)]) for k in FIG1A_METHODS)]
                for m, f in zip(ms, inputs.facts, strict=True)
            ],
        ),
        "facts_table": tpl_table(
            ["m", "N", "σ (rigorous)", "h", "η", "public clipped fraction", "DP-LSL c"],
            [
                [
                    f["m"],
                    f["N"],
                    f"{f['sigma']:.3g}",
                    f"{f['h']:.3g}",
                    f"{f['eta']:.3g}",
                    f"{f['public_clipped_fraction']:.3f}",
                    f.get("lsl_c", "—"),
                ]
                for f in inputs.facts
            ],
        ),
        "batch": str(mb.BATCH),
        "iterations": str(mb.ITERATIONS),
        "mb_trials": str(mb.TRIALS),
        "minibatch_table": _mspbe_grid(table, ms, [*mb_cols, "LSTD (non-private)"], f"{zero:.4g}"),
        "minibatch_facts": "\n".join(mb.facts_section(inputs.mb_facts)),
        "ridges": ", ".join(f"{x:g}" for x in op.RIDGES),
        "op_repeats": str(op.REPEATS),
        "op_trials": str(op.TRIALS),
        "lstd_op_table": _mspbe_grid(table, ms, op_cols, f"{zero:.4g}"),
        "lstd_op_facts": "\n".join(op.fact_lines(op_facts)),
        "big": str(big),
        "op_vs": ", ".join(
            f"ε = {e:g}: LSTD-OP {table[(big, op.method(e))]['mean']:.3g} vs minibatch GP "
            f"{table[(big, mb.method(e))]['mean']:.3g}"
            for e in op.EPSILONS
        ),
        "op_verdict": lstd_op_verdict(table, ms, zero),
        "lam_big": f"{lam_big:g}",
        "bias_vs_zero": f"{bias_big / zero:.2g}",
        "bias_vs_minibatch": f"{bias_big / table[(big, mb.method(1.0))]['mean']:.3g}",
        "notes": "\n".join(f"- {x}" for x in _chain_notes(inputs.chain)),
        "v_sigma_lo": f"{min(v_sig):.3g}",
        "v_sigma_hi": f"{max(v_sig):.3g}",
    }


def _fig1a_setup(inputs: Fig1aInputs) -> list[str]:
    setup = _setup_lines(inputs.cfg, inputs.seconds, [])
    if inputs.rebuilt_in is None:
        return setup
    how = TEXT.fill(
        "fig1a_rebuilt", seconds=f"{inputs.seconds:.0f}", rebuilt_in=f"{inputs.rebuilt_in:.0f}"
    )
    return [s for s in setup if not s.startswith("- wall time")] + [how]


def _write_fig1b(
    out: Path,
    chain: _Chain,
    cfg: _Cfg,
    acc: _Acc,
    conf: dict[str, Any],
    *,
    seconds: float,
    rebuilt_in: float | None = None,
) -> Path:
    m, etas, clip = int(conf["m"]), [float(e) for e in conf["etas"]], float(conf["clip"])
    st = [acc.stats(method="GP", eta=e) for e in etas]
    v1 = acc.stats(method="V1 (DP-LSW)")
    lstd_st = acc.stats(method="LSTD (non-private)")
    zero = chain.zero_mspbe()
    run = RunDir(out)
    mspbe_panels(
        run.plot_path("fig1b"),
        [
            Panel(
                x=etas,
                series={f"GP (m = {m}, h = {clip:.3g})": st, "V1 (DP-LSW)": [v1] * len(etas)},
                zero=zero,
                title=f"Chain, m = {m}, ε = {CHAIN_EPS}, δ = {DELTA:g}: MSPBE vs step size "
                "(mean ± std)",
                xlabel="step size η (constant β = η)",
                references={"LSTD (non-private)": lstd_st["mean"]},
                off_scale=("V1 (DP-LSW)",),
                arrow_at=(0.12,),
                marks=((float(conf["eta_tuned"]), "η tuned on public data"),),
            )
        ],
    )
    means = np.array([s["mean"] for s in st])
    claims, best, span = fig1b_claims(means, etas, v1["mean"], zero, lstd_st["mean"])
    setup = _setup_lines(cfg, seconds, [])
    if rebuilt_in is not None:
        how = TEXT.fill("fig1b_rebuilt", seconds=f"{seconds:.0f}", rebuilt_in=f"{rebuilt_in:.0f}")
        setup = [s for s in setup if not s.startswith("- wall time")] + [how]
    md = TEXT.fill(
        "fig1b",
        paper=PAPER,
        m=m,
        N=conf["N"],
        epsilon=CHAIN_EPS,
        sigma=f"{conf['sigma']:.4g}",
        clip=f"{clip:.4g}",
        eta_tuned=f"{conf['eta_tuned']:.3g}",
        setup="\n".join(setup),
        results_table=tpl_table(
            ["η", "MSPBE mean ± std", "SE"],
            [[f"{e:.3g}", _fmt(s), f"{s['se']:.2g}"] for e, s in zip(etas, st, strict=True)],
        ),
        v1=_fmt(v1),
        v1_n=v1["n"],
        lstd=_fmt(lstd_st),
        lstd_n=lstd_st["n"],
        zero=f"{zero:.4g}",
        claims="\n".join(claims.rows),
        below=int(np.sum(means < 0.9 * zero)),
        n_etas=len(etas),
    ).split("\n")
    fact = {"m": m, "N": int(conf["N"]), "h": clip, "sigma": float(conf["sigma"])}
    report = _finish(
        run,
        md,
        acc,
        {**conf, "wall_time_s": round(seconds)},
        {"mspbe": best, "stable_decades": span},
        fact,
        orders=cfg.orders,
        claims=claims.items,
    )
    return report
