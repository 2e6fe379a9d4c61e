"""Reproductions of Xie, Thomas & Miklau (2019), "Privacy Preserving Off-Policy Evaluation".

* ``fig1a`` — chain, MSPBE vs m ∈ {100, …, 5000}: GPOPE (tuned step, 0.1×, 10×), DP-LSW (V1),
  DP-LSL (V2), with non-private LSTD and the trivial θ = 0 as references; ε = 0.1. Beyond the
  paper: minibatch GPOPE (`privrl.ope.minibatch`) at ε ∈ {0.1, 1} against the targets of a
  GPOPE that learns (`minibatch_chain`), and output-perturbed ridge LSTD (`privrl.ope.lstd_op`)
  at the same (m, ε) (`lstd_op_chain`).
* ``fig1b`` — chain, MSPBE vs step size at fixed m.
* ``fig2a`` — Mountain Car on-policy: GPOPE at ε ∈ {0.1, 1, 5} and non-private vs V1
  (state aggregation, approximate) vs LSTD, at the N where non-private GTD2 has converged.
* ``fig3b`` — Mountain Car off-policy (target uniform): GPOPE at several ε vs off-policy LSTD.
* ``fig4`` — HIV off-policy: relative MSPBE = MSPBE / r̄² (r̄: the evaluated policy's mean
  reward per step, estimated on the public model sample).
* ``accounting`` — a figure the paper lacks: GPOPE with `paper` vs `rigorous` accounting at
  equal nominal ε (the σ each needs, the true ε of the paper's σ under each neighbouring
  relation, and the MSPBE).

Every figure shows θ = 0 and LSTD as references and its verdicts compare GP with θ = 0 first
(a comparison that holds only because GP is no better than θ = 0 is reported as vacuous).
Modules: `common` (trials, tuning, tables, claims, the standard plot), `plots` (the panel
plot of the chain figures: log y from the best curve to θ = 0, off-scale arrows, reference
lines, legend outside), `chain` (1a, 1b; rebuildable from their per-trial results), its
`chain_claims` and `chain_report`, `minibatch_chain`, `lstd_op_chain`, `accounting_study`,
`continuous` (2a, 3b, 4 from one `FigureSpec` each) and its `continuous_report`.

Protocol (common to all): δ = 1e-5; the privacy unit is one trajectory under replace-one; σ
is calibrated by the rigorous accountant unless stated; every hyper-parameter (clip bound h,
step size η, DP-LSL's c) is chosen on an independent PUBLIC sample of the same size from the
same simulator (`tune_on_public`), never on the evaluation data; each trial draws a fresh
dataset and fresh noise from a recorded seed (SeedSequence([base, figure, ...])). MSPBE is
exact for the chain and uses a cached 10⁵-trajectory public sample for the continuous domains.
Each function writes ``report.md`` (tables, the paper's claims checked), ``plots/*.png`` and the
run-directory files into `out` and returns the report path.
"""

from reproductions.gpope.accounting_study import _accounting_claims, accounting
from reproductions.gpope.chain import fig1a, fig1b
from reproductions.gpope.common import _Acc, _Claims
from reproductions.gpope.continuous import fig2a, fig3b, fig4
from reproductions.gpope.continuous_report import RATIO_CLAIMS, _ratio_claims

__all__ = [
    "RATIO_CLAIMS",
    "_Acc",
    "_Claims",
    "_accounting_claims",
    "_ratio_claims",
    "accounting",
    "fig1a",
    "fig1b",
    "fig2a",
    "fig3b",
    "fig4",
]
