"""Reproduction of Qiao & Wang's Figure 1: PEVI, VAPVI and DP-VAPVI on the linear MDP.

* ``fig1a``: suboptimality ``v* − v^π̂`` vs K ∈ {5, …, 1000} of PEVI, VAPVI and DP-VAPVI (ρ = 1);
* ``fig1b``: DP-VAPVI at ρ ∈ {0.5, 1, 5, 10, 50} vs K, with VAPVI as the reference.

Protocol (specs/qiao_wang.md): two instances of the linear MDP (`LinearMDP.qiao_wang(0)`,
`(1)`); per (instance, seed) one dataset of K_max episodes from μ, and the dataset for K is its
first K episodes, shared by every algorithm (common random numbers); DP-VAPVI's noise for
(instance, seed, K) comes from one seed shared by every ρ and C. Suboptimality is exact
(backward induction on the equivalent tabular MDP). The common bonus multiplier
C ∈ {0.1, 0.5, 1} is applied to all three algorithms alike (VAPVI/DP-VAPVI: C·√d; PEVI: C·dH√ζ,
its theory coefficient); every C is reported, none is tuned. Matrix noise is ``strict``; λ = 1;
no additive D/K bonus; no data split. Mean ± standard error over seeds.

Besides the paper's curves, ``fig1a`` runs pre-registered diagnostics that explain the
results: DP-VAPVI with only its PD shift E/2 (no noise) and with only its noise (no shift);
PEVI with VAPVI's coefficient C√d (separates the variance weighting from the bonus size);
and K beyond the paper's range, to see whether DP-VAPVI converges to VAPVI.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privrl.envs.linear import LinearMDP
from privrl.experiments.claims import Claim, count_verdict, write_claims
from privrl.experiments.rundir import RunDir
from privrl.offline.pevi import pevi, pevi_beta
from privrl.offline.vapvi import (
    FeatureTable,
    GaussianReleaser,
    LinearEpisodes,
    LinearGreedyPolicy,
    NonPrivateReleaser,
    dp_vapvi,
    gram_shift,
    vapvi,
    variance_aware_pvi,
)
from privrl.privacy.accounting import zcdp_to_dp

__all__ = ["fig1a", "fig1b"]

K_GRID = (5, 10, 20, 50, 100, 200, 500, 1000)
K_EXTENDED = (2000, 5000, 10000, 20000)
INSTANCES = (0, 1)
BONUS_SCALES = (0.1, 0.5, 1.0)
RHO_A = 1.0
RHOS_B = (0.5, 1.0, 5.0, 10.0, 50.0)
DEFAULT_SEEDS = 30
DELTA = 1e-5  # privacy δ at which ε is quoted
FAILURE_PROB = 0.05  # utility failure probability in E
PEVI_XI = 0.05

HORIZON = 20
EXTENDED_ALGORITHMS = ("PEVI", "VAPVI", "DP-VAPVI", "diag: DP-VAPVI shift only")
BLOCK = 1000  # episodes per sampling block (see _nested_episodes)

QUICK_K = (5, 100, 1000)
QUICK_SEEDS = 2
QUICK_SCALES = (1.0,)


@dataclass(frozen=True)
class _Setup:
    ks: tuple[int, ...]
    k_extended: tuple[int, ...]
    seeds: int
    scales: tuple[float, ...]
    base_seed: int
    quick: bool


def _setup(seeds: int | None, seed: int, quick: bool, extended: bool) -> _Setup:
    if quick:
        return _Setup(QUICK_K, (), seeds or QUICK_SEEDS, QUICK_SCALES, seed, True)
    return _Setup(
        K_GRID, K_EXTENDED if extended else (), seeds or DEFAULT_SEEDS, BONUS_SCALES, seed, False
    )


# --------------------------------------------------------------------------------------------
# running
# --------------------------------------------------------------------------------------------

Runner = Callable[[LinearEpisodes, FeatureTable, float, int], LinearGreedyPolicy]


def _dp_runner(rho: float) -> Runner:
    def run(
        data: LinearEpisodes, table: FeatureTable, scale: float, noise_seed: int
    ) -> LinearGreedyPolicy:
        return dp_vapvi(
            data, table, rho=rho, rng=noise_seed, bonus_scale=scale, delta=DELTA,
            failure_prob=FAILURE_PROB,
        ).policy  # fmt: skip

    return run


def _vapvi_runner(
    data: LinearEpisodes, table: FeatureTable, scale: float, noise_seed: int
) -> LinearGreedyPolicy:
    return vapvi(data, table, bonus_scale=scale).policy


def _pevi_runner(
    data: LinearEpisodes, table: FeatureTable, scale: float, noise_seed: int
) -> LinearGreedyPolicy:
    return pevi(data, table, bonus_scale=scale, xi=PEVI_XI).policy


def _pevi_matched_runner(
    data: LinearEpisodes, table: FeatureTable, scale: float, noise_seed: int
) -> LinearGreedyPolicy:
    """PEVI with VAPVI's coefficient C·√d instead of C·dH√ζ (diagnostic)."""
    beta = pevi_beta(table.d, data.H, data.K, PEVI_XI)
    return pevi(data, table, bonus_scale=scale * math.sqrt(table.d) / beta, xi=PEVI_XI).policy


class _ShiftOnly(NonPrivateReleaser):
    """Diagnostic (not private): DP-VAPVI's PD shift E/2 with no noise."""

    def __init__(self, shift: float) -> None:
        self.shift = shift


class _NoiseOnly(GaussianReleaser):
    """Diagnostic: DP-VAPVI's noise without the PD shift (eigenvalues clipped at λ)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.shift = 0.0


def _diag_runner(kind: str, rho: float) -> Runner:
    def run(
        data: LinearEpisodes, table: FeatureTable, scale: float, noise_seed: int
    ) -> LinearGreedyPolicy:
        if kind == "shift":
            releaser: Any = _ShiftOnly(gram_shift(data.H, table.d, rho, FAILURE_PROB) / 2.0)
        else:
            # Same noise stream as dp_vapvi(rng=noise_seed): its second spawned child.
            noise_rng = np.random.default_rng(noise_seed).spawn(2)[1]
            releaser = _NoiseOnly(
                rho=rho, H=data.H, d=table.d, rng=noise_rng, failure_prob=FAILURE_PROB
            )
        q, *_ = variance_aware_pvi(data, data, table, releaser=releaser, bonus_scale=scale)
        return _q_policy(q, table.d, f"diag-{kind}")

    return run


def _raw(table: FeatureTable) -> FeatureTable:
    return FeatureTable(phi=table.phi * table.scale, scale=1.0, source="raw, unscaled")


def _vapvi_unscaled(
    data: LinearEpisodes, table: FeatureTable, scale: float, noise_seed: int
) -> LinearGreedyPolicy:
    """Diagnostic: VAPVI on the raw features (‖φ‖ up to √7), as the paper may have run it."""
    return vapvi(data, _raw(table), bonus_scale=scale).policy


def _dp_unscaled(rho: float) -> Runner:
    """Diagnostic: DP-VAPVI's code and noise on the raw features. Its sensitivity bounds need
    ‖φ‖ ≤ 1, so this is NOT private (dp_vapvi refuses such a table; the loop is called
    directly with the same releaser and noise stream)."""

    def run(
        data: LinearEpisodes, table: FeatureTable, scale: float, noise_seed: int
    ) -> LinearGreedyPolicy:
        raw = _raw(table)
        noise_rng = np.random.default_rng(noise_seed).spawn(2)[1]
        releaser = GaussianReleaser(
            rho=rho, H=data.H, d=raw.d, rng=noise_rng, failure_prob=FAILURE_PROB
        )
        q, *_ = variance_aware_pvi(data, data, raw, releaser=releaser, bonus_scale=scale)
        return _q_policy(q, raw.d, "diag-dp-unscaled")

    return run


def _q_policy(q: np.ndarray, d: int, name: str) -> LinearGreedyPolicy:
    H = q.shape[0]
    return LinearGreedyPolicy(
        q, weights=np.zeros((H, d)), lambdas=np.zeros((H, d, d)), bonus_coef=0.0,
        additive=np.zeros(H), algorithm=name,
    )  # fmt: skip


def _nested_episodes(
    mdp: LinearMDP, k_max: int, base_seed: int, instance: int, seed: int
) -> LinearEpisodes:
    """The first k_max episodes of one infinite stream per (instance, seed), sampled in blocks
    of BLOCK episodes with a seed per block, so that the dataset for K is the same in every
    figure and mode (quick or full), whatever k_max is."""
    n_blocks = -(-k_max // BLOCK)
    parts = []
    for b in range(n_blocks):
        seq = np.random.SeedSequence([base_seed, instance, seed, 0, b])
        ds = mdp.sample(BLOCK, rng=np.random.default_rng(seq))
        parts.append(LinearEpisodes.from_dataset(ds, n_states=mdp.S, n_actions=mdp.A))
    fields = ("states", "actions", "rewards", "next_states", "valid", "absorbing")
    joined = LinearEpisodes(*(np.concatenate([getattr(p, f) for p in parts]) for f in fields))
    return joined.subset(np.arange(k_max))


def _run_grid(
    setup: _Setup,
    algorithms: dict[str, Runner],
    *,
    extended_algorithms: Sequence[str] = (),
    progress: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every (instance, seed, K, C, algorithm); returns one row per run with the exact
    suboptimality and the fraction of Q̂ entries clipped at 0."""
    rows: list[dict[str, Any]] = []
    k_all = tuple(sorted({*setup.ks, *setup.k_extended}))
    k_max = max(k_all)
    cap = (HORIZON - np.arange(HORIZON))[:, None, None]  # Q̂_h ≤ H − h + 1 (1-based h)
    for instance in INSTANCES:
        mdp = LinearMDP.qiao_wang(instance)
        # φ is already divided by mdp.scale (= √7); record the factor for the unscaled diagnostic.
        table = FeatureTable(phi=mdp.phi, scale=mdp.scale, source=f"linear-mdp:{instance}")
        for s in range(setup.seeds):
            episodes = _nested_episodes(mdp, k_max, setup.base_seed, instance, s)
            policies: list[np.ndarray] = []
            meta: list[dict[str, Any]] = []
            for K in k_all:
                data = episodes.subset(np.arange(K))  # nested datasets: first K episodes
                noise_seed = int(
                    np.random.SeedSequence([setup.base_seed, instance, s, K, 1]).generate_state(1)[
                        0
                    ]
                )
                names = algorithms if K in setup.ks else extended_algorithms
                for name in names:
                    for scale in setup.scales:
                        policy = algorithms[name](data, table, scale, noise_seed)
                        policies.append(policy.actions)
                        meta.append(
                            {
                                "algorithm": name,
                                "instance": instance,
                                "seed": s,
                                "K": K,
                                "C": scale,
                                "zero_q": float(np.mean(policy.q == 0.0)),
                                "cap_q": float(np.mean(np.isclose(policy.q, cap))),
                                "v_hat": float(mdp.d1 @ policy.q[0].max(axis=1)),
                            }
                        )
            subopt = mdp.suboptimality(np.stack(policies))  # exact, one vectorised evaluation
            for m, value in zip(meta, subopt, strict=True):
                rows.append({**m, "suboptimality": float(value)})
            if progress is not None:
                progress()
    return rows


def _run_with_progress(
    label: str,
    setup: _Setup,
    algorithms: dict[str, Runner],
    extended_algorithms: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """`_run_grid` with a progress bar (one tick per instance × seed) on stderr."""
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=len(INSTANCES) * setup.seeds)
        return _run_grid(
            setup,
            algorithms,
            extended_algorithms=extended_algorithms,
            progress=lambda: bar.advance(task),
        )


def _aggregate(rows: list[dict[str, Any]], key: str = "suboptimality") -> dict[tuple, dict]:
    """(algorithm, instance, C, K) → mean, standard error, n."""
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        groups.setdefault((r["algorithm"], r["instance"], r["C"], r["K"]), []).append(r[key])
    out = {}
    for k, vals in groups.items():
        x = np.asarray(vals)
        se = float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else float("nan")
        out[k] = {"mean": float(x.mean()), "se": se, "n": int(x.size)}
    return out


# --------------------------------------------------------------------------------------------
# claims
# --------------------------------------------------------------------------------------------


def _mean(agg: dict, alg: str, inst: int, c: float, k: int) -> float:
    return agg[(alg, inst, c, k)]["mean"]


def _fmt(agg: dict, alg: str, inst: int, c: float, k: int) -> str:
    cell = agg.get((alg, inst, c, k))
    if cell is None:
        return "–"
    se = "" if math.isnan(cell["se"]) else f" ± {cell['se']:.3f}"
    return f"{cell['mean']:.3f}{se}"


def _claims_a(agg: dict, setup: _Setup, vstar: dict[int, float]) -> list[dict[str, Any]]:
    """Per (C, instance): DP-VAPVI worse than VAPVI, converging; both beat PEVI in most K."""
    out = []
    ks = setup.ks
    for c in setup.scales:
        for inst in INSTANCES:
            gaps = [
                _mean(agg, "DP-VAPVI", inst, c, k) - _mean(agg, "VAPVI", inst, c, k) for k in ks
            ]
            worse = sum(g > 0 for g in gaps)
            gmax = max(gaps)
            last = gaps[-1]
            converges = last <= 0.5 * max(gmax, 0.0) and last <= 0.05 * vstar[inst]
            beat_v = sum(
                _mean(agg, "VAPVI", inst, c, k) < _mean(agg, "PEVI", inst, c, k) for k in ks
            )
            beat_dp = sum(
                _mean(agg, "DP-VAPVI", inst, c, k) < _mean(agg, "PEVI", inst, c, k) for k in ks
            )
            out.append(
                {
                    "C": c,
                    "instance": inst,
                    "gaps": gaps,
                    "dp_worse_count": worse,
                    "dp_worse_holds": worse >= math.ceil(0.75 * len(ks)),
                    "gap_at_kmax": last,
                    "gap_max": gmax,
                    "gap_at_kmax_rel_vstar": last / vstar[inst],
                    "converges_holds": bool(converges),
                    "vapvi_beats_pevi": beat_v,
                    "dp_beats_pevi": beat_dp,
                    "beat_pevi_holds": beat_v > len(ks) / 2 and beat_dp > len(ks) / 2,
                }
            )
    return out


def _claims_b(agg: dict, setup: _Setup, rhos: Sequence[float]) -> list[dict[str, Any]]:
    """Per (C, instance): mean over K of |DP-VAPVI(ρ) − VAPVI| decreasing in ρ."""
    out = []
    for c in setup.scales:
        for inst in INSTANCES:
            dist = [
                float(
                    np.mean(
                        [
                            abs(
                                _mean(agg, _rho_name(r), inst, c, k)
                                - _mean(agg, "VAPVI", inst, c, k)
                            )
                            for k in setup.ks
                        ]
                    )
                )
                for r in rhos
            ]
            monotone = all(b < a for a, b in itertools.pairwise(dist))
            pairs = sum(b < a for a, b in itertools.pairwise(dist))
            out.append(
                {
                    "C": c,
                    "instance": inst,
                    "mean_abs_gap_by_rho": dist,
                    "decreasing_pairs": pairs,
                    "holds": bool(monotone),
                }
            )
    return out


PAPER_FIGURE_ONLY = "Section 5, figure only (no numbers)"


def gallery_claims_a(claims: Sequence[dict[str, Any]], plot: str) -> list[Claim]:
    """The gallery rows of Figure 1(a): the paper's three claims, from `_claims_a`'s cases
    (per (C, instance)) as the report's verdict table states them."""
    total = len(claims)
    n = len(claims[0]["gaps"])
    cases = "(C, instance) cases"

    def counts(key: str) -> str:
        return ", ".join(f"{c[key]}/{n}" for c in claims)

    held = [sum(bool(c[k]) for c in claims) for k in _CLAIM_KEYS]
    gap = [c["gap_at_kmax"] for c in claims]
    rel = [100 * c["gap_at_kmax_rel_vstar"] for c in claims]
    return [
        Claim(
            "DP-VAPVI performs slightly worse than VAPVI",
            PAPER_FIGURE_ONLY,
            f"{held[0]} of {total} {cases}; DP worse at {counts('dp_worse_count')} K",
            count_verdict(held[0], total),
            plot,
        ),
        Claim(
            "as K grows, DP-VAPVI converges to VAPVI",
            PAPER_FIGURE_ONLY,
            f"{held[1]} of {total} {cases}; gap at K_max {min(gap):+.3f} to {max(gap):+.3f} "
            f"({min(rel):.1f}%–{max(rel):.1f}% of v*)",
            count_verdict(held[1], total),
            plot,
        ),
        Claim(
            "DP-VAPVI (and VAPVI) outperform PEVI in most cases",
            PAPER_FIGURE_ONLY,
            f"{held[2]} of {total} {cases}; VAPVI<PEVI at {counts('vapvi_beats_pevi')} K, "
            f"DP<PEVI at {counts('dp_beats_pevi')} K",
            count_verdict(held[2], total),
            plot,
        ),
    ]


_CLAIM_KEYS = ("dp_worse_holds", "converges_holds", "beat_pevi_holds")


def gallery_claims_b(
    claims: Sequence[dict[str, Any]], rhos: Sequence[float], plot: str
) -> list[Claim]:
    """The gallery row of Figure 1(b), from `_claims_b`'s cases as the report states them."""
    held = sum(bool(c["holds"]) for c in claims)
    first = claims[0]
    d = first["mean_abs_gap_by_rho"]
    return [
        Claim(
            "a larger ρ brings DP-VAPVI closer to VAPVI",
            PAPER_FIGURE_ONLY,
            f"mean |gap| strictly decreasing along ρ = {rhos[0]:g} … {rhos[-1]:g} in {held} of "
            f"{len(claims)} (C, instance) cases (e.g. C = {first['C']:g}, instance "
            f"{first['instance']}: {d[0]:.3f} → {d[-1]:.3f})",
            count_verdict(held, len(claims)),
            plot,
        )
    ]


def _rho_name(rho: float) -> str:
    return f"DP-VAPVI ρ={rho:g}"


# --------------------------------------------------------------------------------------------
# plots and files
# --------------------------------------------------------------------------------------------


def _plot(
    path: Path,
    agg: dict,
    setup: _Setup,
    c: float,
    lines: Sequence[tuple[str, str, dict[str, Any]]],
    title: str,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(INSTANCES), figsize=(5.2 * len(INSTANCES), 3.8), sharey=False)
    for ax, inst in zip(np.atleast_1d(axes), INSTANCES, strict=True):
        for alg, label, style in lines:
            ks = [k for k in setup.ks if (alg, inst, c, k) in agg]
            if not ks:
                continue
            mean = np.array([agg[(alg, inst, c, k)]["mean"] for k in ks])
            se = np.nan_to_num(np.array([agg[(alg, inst, c, k)]["se"] for k in ks]))
            ax.errorbar(ks, mean, yerr=se, capsize=3, label=label, **style)
        ax.set_xscale("log")
        ax.set_xlabel("number of episodes K")
        ax.set_ylabel("suboptimality v* − v^π̂")
        ax.set_title(f"instance {inst}, H = 20")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _table(agg: dict, setup: _Setup, c: float, inst: int, algs: Sequence[str]) -> list[str]:
    head = "| K | " + " | ".join(algs) + " |"
    sep = "|---:|" + "---:|" * len(algs)
    lines = [head, sep]
    for k in sorted({k for (a, i, cc, k) in agg if i == inst and cc == c and a in algs}):
        lines.append(f"| {k} | " + " | ".join(_fmt(agg, a, inst, c, k) for a in algs) + " |")
    return lines


def _curve_rows(agg: dict, extra: dict[tuple, dict] | None = None) -> list[dict[str, Any]]:
    rows = []
    for (alg, inst, c, k), cell in sorted(agg.items(), key=lambda kv: (kv[0][0], *kv[0][1:])):
        row = {"algorithm": alg, "instance": inst, "C": c, "K": k, **cell}
        if extra is not None and (alg, inst, c, k) in extra:
            row["zero_q_fraction"] = extra[(alg, inst, c, k)]["mean"]
        rows.append(row)
    return rows


def _agg_json(agg: dict) -> list[dict[str, Any]]:
    return [
        {"algorithm": a, "instance": i, "C": c, "K": k, **cell}
        for (a, i, c, k), cell in sorted(agg.items(), key=lambda kv: (kv[0][0], *kv[0][1:]))
    ]


def _privacy_facts(rhos: Sequence[float]) -> list[dict[str, float]]:
    facts = []
    for r in rhos:
        facts.append(
            {
                "rho": r,
                "epsilon_bun_steinke": zcdp_to_dp(r, DELTA),
                "delta": DELTA,
                "E_strict": gram_shift(20, 10, r, FAILURE_PROB, "strict"),
            }
        )
    return facts


def _representative_report(rho: float) -> Any:
    """The privacy report every DP-VAPVI run at this ρ has (it depends on ρ, H, d only)."""
    mdp = LinearMDP.qiao_wang(0)
    data = mdp.sample(5, rng=0)
    return dp_vapvi(
        data, FeatureTable(phi=mdp.phi, scale=mdp.scale), rho=rho, rng=0, delta=DELTA,
        failure_prob=FAILURE_PROB,
    ).report  # fmt: skip


def _vstar() -> dict[int, float]:
    return {i: LinearMDP.qiao_wang(i).optimal_value() for i in INSTANCES}


def _setup_lines(setup: _Setup, seconds: float, vstar: dict[int, float]) -> list[str]:
    return [
        "## Setup",
        "",
        "- Environment: the linear MDP of the spec (S = {0,1}, A = 100 actions with 8-bit codes, "
        "d = 10, H = 20, ‖φ‖ ≤ 1 after rescaling by √7 with ν, θ compensated), instances 0 and "
        f"1 (`LinearMDP.qiao_wang(i)`); v* = {vstar[0]:.4f} (instance 0), {vstar[1]:.4f} "
        "(instance 1). Behaviour μ: action 0 w.p. 0.6, others uniform; d1 uniform.",
        f"- K ∈ {{{', '.join(map(str, setup.ks))}}}; {setup.seeds} seeds per instance (base seed "
        f"{setup.base_seed}); common random numbers: per (instance, seed) one dataset of "
        "K_max episodes, the dataset for K is its first K episodes and is shared by every "
        "algorithm; DP-VAPVI's noise seed per (instance, seed, K) is shared by every ρ and C.",
        "- Metric: exact suboptimality v* − v^π̂ (backward induction on the equivalent tabular "
        "MDP), mean ± standard error over seeds.",
        f"- Bonus multiplier C ∈ {{{', '.join(f'{c:g}' for c in setup.scales)}}}, the same C "
        "for all algorithms: VAPVI/DP-VAPVI Γ = C·√d·‖φ‖_{Λ̃⁻¹}; PEVI Γ = C·dH√(log(2dHK/ξ))·"
        f"‖φ‖_{{Λ⁻¹}} (ξ = {PEVI_XI}). Every C is reported; none was tuned.",
        f"- DP-VAPVI: matrix noise **strict** (s² = 1/(2ρ0); the report is exactly ρ-zCDP under "
        f"replace-one), φ1 variance 2H⁴/ρ0, E from the spec formula with failure probability "
        f"{FAILURE_PROB}, λ = 1, additive D/K bonus off (VAPVI's 2H³√d/K off too), no data split "
        f"(D' = D). ε is quoted at δ = {DELTA:g}.",
        f"- Wall time: {seconds:.0f} s"
        + (" (quick mode: numbers are not final)." if setup.quick else "."),
        "",
    ]


# --------------------------------------------------------------------------------------------
# Figure 1(a)
# --------------------------------------------------------------------------------------------


def fig1a(out: Path, *, seeds: int | None = None, seed: int = 0, quick: bool = False) -> Path:
    """Figure 1(a): PEVI, VAPVI and DP-VAPVI (ρ = 1) vs K; writes report.md and returns it."""
    run = RunDir(out)
    setup = _setup(seeds, seed, quick, extended=True)
    algorithms: dict[str, Runner] = {
        "PEVI": _pevi_runner,
        "VAPVI": _vapvi_runner,
        "DP-VAPVI": _dp_runner(RHO_A),
        "diag: DP-VAPVI shift only": _diag_runner("shift", RHO_A),
        "diag: DP-VAPVI noise only": _diag_runner("noise", RHO_A),
        "diag: PEVI β=C√d": _pevi_matched_runner,
        "diag: VAPVI unscaled φ": _vapvi_unscaled,
        "diag: DP-VAPVI unscaled φ": _dp_unscaled(RHO_A),
    }
    t0 = time.perf_counter()
    rows = _run_with_progress(
        "qiao-wang-fig1a", setup, algorithms, extended_algorithms=EXTENDED_ALGORITHMS
    )
    seconds = time.perf_counter() - t0
    agg = _aggregate(rows)
    zero = _aggregate(rows, "zero_q")
    extras = {
        "zero_q": zero,
        "cap_q": _aggregate(rows, "cap_q"),
        "v_hat": _aggregate(rows, "v_hat"),
    }
    vstar = _vstar()
    claims = _claims_a(agg, setup, vstar)
    report_priv = _representative_report(RHO_A)

    config = {
        "reproduction": "qiao-wang-fig1a",
        "K": list(setup.ks),
        "K_extended": list(setup.k_extended),
        "instances": list(INSTANCES),
        "seeds": setup.seeds,
        "base_seed": setup.base_seed,
        "bonus_scales": list(setup.scales),
        "rho": RHO_A,
        "matrix_noise": "strict",
        "delta": DELTA,
        "failure_prob": FAILURE_PROB,
        "lambda": 1.0,
        "additive_bonus": 0.0,
        "split": False,
        "pevi_xi": PEVI_XI,
        "quick": setup.quick,
    }
    run.write_config(config)
    main_c = setup.scales[-1]
    kmax = setup.ks[-1]
    run.write_metrics(
        {
            "suboptimality": {
                alg: {str(i): _mean(agg, alg, i, main_c, kmax) for i in INSTANCES}
                for alg in ("PEVI", "VAPVI", "DP-VAPVI")
            },
            "suboptimality_note": f"at K = {kmax}, C = {main_c:g}; all cells in 'cells'",
            "v_star": {str(i): v for i, v in vstar.items()},
            "claims": claims,
            "cells": _agg_json(agg),
            "zero_q_fraction": _agg_json(zero),
            "cap_q_fraction": _agg_json(extras["cap_q"]),
            "pessimistic_value_estimate": _agg_json(extras["v_hat"]),
            "privacy": _privacy_facts([RHO_A]),
            "wall_seconds": seconds,
        }
    )
    run.write_curve(_curve_rows(agg, zero))
    run.write_privacy(report_priv)
    lines = [("PEVI", "PEVI", {"marker": "s"}), ("VAPVI", "VAPVI", {"marker": "o"}),
             ("DP-VAPVI", f"DP-VAPVI (ρ={RHO_A:g})", {"marker": "^"})]  # fmt: skip
    plots = []
    for c in setup.scales:
        p = run.plot_path(f"fig1a_C{c:g}")
        _plot(p, agg, setup, c, lines, f"Figure 1(a) reproduction, C = {c:g}")
        plots.append(p)
    diag_lines = [
        ("VAPVI", "VAPVI", {"marker": "o"}),
        ("DP-VAPVI", "DP-VAPVI (ρ=1)", {"marker": "^"}),
        ("diag: DP-VAPVI shift only", "shift E/2 only, no noise", {"ls": "--"}),
        ("diag: DP-VAPVI noise only", "noise only, no shift", {"ls": ":"}),
        ("diag: PEVI β=C√d", "PEVI with β = C√d", {"ls": "-."}),
    ]
    diag_plot = run.plot_path(f"fig1a_diagnostics_C{main_c:g}")
    _plot(diag_plot, agg, setup, main_c, diag_lines, f"Diagnostics, C = {main_c:g}")
    plots.append(diag_plot)

    md = _report_a(
        setup, agg, extras, claims, vstar, seconds, plots=plots, root=run.path, priv=report_priv
    )
    target = run.artifact("report.md")
    target.write_text(md)
    write_claims(run.path, gallery_claims_a(claims, f"plots/fig1a_C{setup.scales[0]:g}.png"))
    return target


def _report_a(
    setup: _Setup,
    agg: dict,
    extras: dict[str, dict],
    claims: list[dict[str, Any]],
    vstar: dict[int, float],
    seconds: float,
    *,
    plots: list[Path],
    root: Path,
    priv: Any,
) -> str:
    main = ("PEVI", "VAPVI", "DP-VAPVI")
    md = [
        "# Qiao & Wang, Figure 1(a): PEVI vs VAPVI vs DP-VAPVI on the linear MDP",
        "",
        "Generated by `privrl reproduce qiao-wang-fig1a`"
        + (" --quick" if setup.quick else "")
        + ". The paper gives this figure with no numbers; its claims (Section 5) are:",
        "",
        "1. DP-VAPVI performs slightly worse than VAPVI;",
        "2. as K grows, DP-VAPVI converges to VAPVI;",
        "3. in most cases DP-VAPVI (and VAPVI) outperform PEVI.",
        "",
        *_setup_lines(setup, seconds, vstar),
        f"Privacy of every DP-VAPVI run: {priv.summary()}; Bun–Steinke closed form "
        f"ε = {zcdp_to_dp(RHO_A, DELTA):.3f} at δ = {DELTA:g}.",
        "",
        "## Verdicts",
        "",
        "Criteria (fixed before looking at the numbers): claim 1 holds if mean DP-VAPVI > mean "
        "VAPVI at ≥ 75% of the K values; claim 2 if the gap at the largest K is at most half the "
        "largest gap and at most 5% of v*; claim 3 if both VAPVI and DP-VAPVI have a lower "
        "mean than PEVI at more than half of the K values.",
        "",
        "| C | instance | 1: DP worse (K count) | 2: gap at K_max (max gap) | holds? | "
        "3: VAPVI<PEVI, DP<PEVI (K count) | holds? |",
        "|---:|---:|---|---|---|---|---|",
    ]
    n = len(setup.ks)
    for c in claims:
        md.append(
            f"| {c['C']:g} | {c['instance']} | {c['dp_worse_count']}/{n} "
            f"({'holds' if c['dp_worse_holds'] else 'does not hold'}) | "
            f"{c['gap_at_kmax']:+.3f} ({c['gap_max']:+.3f}; "
            f"{100 * c['gap_at_kmax_rel_vstar']:.1f}% of v*) | "
            f"{'yes' if c['converges_holds'] else 'no'} | {c['vapvi_beats_pevi']}/{n}, "
            f"{c['dp_beats_pevi']}/{n} | {'yes' if c['beat_pevi_holds'] else 'no'} |"
        )
    total = len(claims)
    md.append("")
    for label, key in (
        ("Claim 1 (DP-VAPVI worse than VAPVI)", "dp_worse_holds"),
        (
            "Claim 2 (DP-VAPVI converges to VAPVI by K = " + str(setup.ks[-1]) + ")",
            "converges_holds",
        ),
        ("Claim 3 (VAPVI and DP-VAPVI beat PEVI)", "beat_pevi_holds"),
    ):
        held = [f"C = {c['C']:g}/instance {c['instance']}" for c in claims if c[key]]
        md.append(
            f"- {label}: holds in {len(held)} of {total} (C, instance) cases"
            + (f" ({', '.join(held)})." if held and len(held) < total else ".")
        )
    md += ["", "## Suboptimality (mean ± s.e.)", ""]
    for c in setup.scales:
        for inst in INSTANCES:
            md += [f"### C = {c:g}, instance {inst}", ""]
            md += _table(agg, setup, c, inst, main)
            md.append("")
    md += [f"![Figure 1(a), C = {c:g}]({p.relative_to(root).as_posix()})" for c, p in
           zip(setup.scales, plots, strict=False)]  # fmt: skip
    md.append("")
    md += _investigation_a(setup, agg, extras, vstar, plots[-1], root)
    return "\n".join(md) + "\n"


class _Recorder(NonPrivateReleaser):
    """Records the norm of every statistic VAPVI computes (for the signal-to-noise table)."""

    def __init__(self) -> None:
        self.norms: dict[str, list[float]] = {}

    def vector(self, value: np.ndarray, *, kind: str, h: int) -> np.ndarray:
        self.norms.setdefault(kind, []).append(float(np.linalg.norm(value)))
        return value

    def gram(self, value: np.ndarray, *, kind: str, h: int) -> np.ndarray:
        self.norms.setdefault(kind, []).append(float(np.linalg.norm(value)))
        return value


_KIND_LABELS = {
    "gram": "Σφ̄φ̄ᵀ",
    "v2": "Σφ̄Ṽ²",
    "v1": "Σφ̄Ṽ",
    "gram_weighted": "Σφφᵀ/σ̃²",
    "target": "Σφ(r+Ṽ)/σ̃²",
}


def _signal_to_noise(setup: _Setup, ks: Sequence[int], scale: float) -> dict[int, dict[str, float]]:
    """Median over steps h (instance 0, first seed) of ‖statistic‖ / E‖noise‖ at ρ = 1, with
    VAPVI's own Ṽ and σ̃ (no noise): how large each release is next to the noise DP-VAPVI adds.
    E‖noise‖ ≈ σ√d for a vector and s·√(d(d+1)) (Frobenius) for a Gram matrix."""
    mdp = LinearMDP.qiao_wang(INSTANCES[0])
    table = FeatureTable(phi=mdp.phi, scale=mdp.scale)
    episodes = _nested_episodes(mdp, max(ks), setup.base_seed, INSTANCES[0], 0)
    ref = GaussianReleaser(rho=RHO_A, H=mdp.H, d=mdp.d, rng=np.random.default_rng(0))
    d = mdp.d
    noise = {
        "gram": ref.s * math.sqrt(d * (d + 1)),
        "gram_weighted": ref.s * math.sqrt(d * (d + 1)),
        "v2": ref.sigma("v2") * math.sqrt(d),
        "v1": ref.sigma("v1") * math.sqrt(d),
        "target": ref.sigma("target") * math.sqrt(d),
    }
    out = {}
    for k in ks:
        rec = _Recorder()
        data = episodes.subset(np.arange(k))
        variance_aware_pvi(data, data, table, releaser=rec, bonus_scale=scale)
        out[k] = {kind: float(np.median(rec.norms[kind]) / noise[kind]) for kind in _KIND_LABELS}
    return out


def _capped_values(
    setup: _Setup, capped: dict, vhat: dict, vstar: dict[int, float], c: float
) -> list[str]:
    """Fraction of Q̂ at the cap H−h+1 and the value estimate d1·Ṽ_1, for the shift diagnosis."""
    algs = ("VAPVI", "DP-VAPVI", "diag: DP-VAPVI shift only", "diag: DP-VAPVI noise only")
    ks = [
        k
        for k in (100, setup.ks[-1], *setup.k_extended[-1:])
        if k in (*setup.ks, *setup.k_extended)
    ]
    md = [
        "**Over-estimated, capped values.** A pessimistic algorithm should under-estimate. "
        "Below, for each algorithm and K: the fraction of Q̂ entries at the cap H−h+1 and the "
        "algorithm's own value estimate d1·Ṽ_1 (mean over seeds), beside v*. Where many "
        "entries sit at the cap, the saturated actions tie and the greedy step takes the "
        "lowest index among them, whatever their true value:",
        "",
    ]
    for inst in INSTANCES:
        md += [
            f"Instance {inst} (v* = {vstar[inst]:.3f}), C = {c:g}; cells: capped fraction / "
            "d1·Ṽ_1:",
            "",
            "| algorithm | " + " | ".join(f"K = {k}" for k in ks) + " |",
            "|---|" + "---:|" * len(ks),
        ]
        for alg in algs:
            cells = []
            for k in ks:
                key = (alg, inst, c, k)
                if key in capped:
                    cells.append(f"{capped[key]['mean']:.3f} / {vhat[key]['mean']:.2f}")
                else:
                    cells.append("–")
            md.append(f"| {alg} | " + " | ".join(cells) + " |")
        md.append("")
    k_last = ks[-1]

    def over(alg: str) -> list[float]:
        return [vhat[(alg, i, c, k_last)]["mean"] - vstar[i] for i in INSTANCES]

    dp_over = over("DP-VAPVI")
    md.append(
        f"At K = {k_last}, d1·Ṽ_1 − v* is "
        + ", ".join(f"{x:+.2f}" for x in dp_over)
        + " for DP-VAPVI and "
        + ", ".join(f"{x:+.2f}" for x in over("VAPVI"))
        + " for VAPVI (instances "
        + ", ".join(str(i) for i in INSTANCES)
        + "). "
        + (
            "DP-VAPVI over-estimates: its bonus does not cover the error that the shift and "
            "the noise introduce (the additive D/K term the theory adds for it is off by the "
            "spec's decision, since it exceeds H here and would zero every Q)."
            if max(dp_over) > 0
            else "DP-VAPVI under-estimates at this K, as pessimism intends: its loss is in "
            "which action it prefers, not in the level of its values."
        )
    )
    md.append("")
    return md


def _max_conditional_variance(mdp: LinearMDP) -> float:
    """max over (h, s, a) of Var_{P_h}(V*_{h+1})(s, a), from the exact model."""
    tab = mdp.tabular()
    _, v_star, _ = tab.backward_induction()
    second = np.einsum("hsat,ht->hsa", tab.P, v_star[1:] ** 2)
    first = np.einsum("hsat,ht->hsa", tab.P, v_star[1:])
    return float((second - first**2).max())


def _investigation_a(
    setup: _Setup,
    agg: dict,
    extras: dict[str, dict],
    vstar: dict[int, float],
    diag_plot: Path,
    root: Path,
) -> list[str]:
    zero, capped, vhat = extras["zero_q"], extras["cap_q"], extras["v_hat"]
    c = setup.scales[-1]
    ks = setup.ks
    kmax = ks[-1]
    d, H = 10, 20
    E = gram_shift(H, d, RHO_A, FAILURE_PROB, "strict")
    betas = [pevi_beta(d, H, k, PEVI_XI, cc) for cc in setup.scales for k in (ks[0], kmax)]
    pevi_zero = [
        zero[("PEVI", i, cc, k)]["mean"] for i in INSTANCES for cc in setup.scales for k in ks
    ]
    vap_zero_small = {
        cc: [zero[("VAPVI", i, cc, ks[0])]["mean"] for i in INSTANCES] for cc in setup.scales
    }
    always0 = {i: float(LinearMDP.qiao_wang(i).suboptimality(np.zeros((H, 2), dtype=np.int64)))
               for i in INSTANCES}  # fmt: skip

    def m(alg: str, inst: int, k: int, cc: float = c) -> float:
        return _mean(agg, alg, inst, cc, k)

    md = [
        "## Investigation (diagnostics on the same data and noise seeds)",
        "",
        "Everything in this section is computed by the reproduction itself; the diagnostics are "
        "fixed variants of the same code, not tuned algorithms.",
        "",
        "**PEVI's theory bonus.** PEVI's coefficient β = C·dH·√(log(2dHK/ξ)) is "
        f"{min(betas):.0f}–{max(betas):.0f} over the C and K used, against Q-values ≤ H = 20. "
        f"The fraction of PEVI's Q̂ entries clipped to 0 is {min(pevi_zero):.3f}–"
        f"{max(pevi_zero):.3f} over all (instance, C, K). With Q̂ ≡ 0 every action ties and the "
        "greedy policy takes the first one (action 0) everywhere, whose suboptimality is "
        + ", ".join(f"{always0[i]:.3f} (instance {i})" for i in INSTANCES)
        + (
            ". PEVI's Q̂ is identically 0 in every cell, so claim 3 is decided by the size of "
            "PEVI's theory coefficient. The "
            if min(pevi_zero) == 1.0
            else ". The "
        )
        + "diagnostic *PEVI with β = C√d* (VAPVI's coefficient, unweighted regression) separates "
        "the variance weighting from the bonus size:",
        "",
    ]
    for inst in INSTANCES:
        md += [f"Instance {inst}, C = {c:g}:", ""]
        md += _table(agg, setup, c, inst, ("VAPVI", "DP-VAPVI", "diag: PEVI β=C√d"))
        md.append("")
    same = sum(
        abs(m("diag: PEVI β=C√d", i, k, cc) - m("VAPVI", i, k, cc)) < 1e-9
        for i in INSTANCES
        for k in ks
        for cc in setup.scales
    )
    max_var = max(_max_conditional_variance(LinearMDP.qiao_wang(i)) for i in INSTANCES)
    md += [
        f"PEVI with β = C√d has the same mean as VAPVI in {same} of "
        f"{len(INSTANCES) * len(ks) * len(setup.scales)} (instance, K, C) cells. The "
        f"conditional variance of the optimal values is tiny here (max over h, s, a of "
        f"Var_{{P_h}}(V*_{{h+1}})(s, a) = {max_var:.4f}), so VAPVI's weights "
        "σ̃² = max{1, Var̃} are 1 wherever its variance estimate is accurate"
        + (
            ", and VAPVI reduces to unweighted LSVI: on this instance the variance weighting, "
            "which the paper credits for beating PEVI, has nothing to act on."
            if same == len(INSTANCES) * len(ks) * len(setup.scales)
            else "."
        ),
        "",
    ]
    md += [
        "**VAPVI's bonus at small K.** Fraction of VAPVI's Q̂ entries at 0 for K = "
        f"{ks[0]}: "
        + "; ".join(
            f"C = {cc:g}: " + ", ".join(f"{z:.3f}" for z in vap_zero_small[cc])
            for cc in setup.scales
        )
        + " (instances "
        + ", ".join(str(i) for i in INSTANCES)
        + "). Where VAPVI's Q̂ is all zero it falls back to action 0, while DP-VAPVI's bonus "
        "is shrunk by the PD shift (‖φ‖_{Λ̃⁻¹} ≤ 1/√(λ + E/2)). K values where DP-VAPVI's mean "
        "is below VAPVI's: "
        + "; ".join(
            f"C = {cc:g}, instance {i}: "
            + (
                ", ".join(str(k) for k in ks if m("DP-VAPVI", i, k, cc) < m("VAPVI", i, k, cc))
                or "none"
            )
            for cc in setup.scales
            for i in INSTANCES
        )
        + ".",
        "",
        f"**The PD shift and the noise.** At ρ = 1, H = 20, d = 10 the strict shift is "
        f"E = {E:.1f}, so E/2 = {E / 2:.1f} is added to both Gram matrices. The diagnostics run "
        "DP-VAPVI's code with only one ingredient: the shift without noise, or the noise "
        "(same stream) without the shift (then eigenvalues are clipped at λ):",
        "",
    ]
    for inst in INSTANCES:
        md += [f"Instance {inst}, C = {c:g}:", ""]
        md += _table(
            agg, setup, c, inst,
            ("VAPVI", "DP-VAPVI", "diag: DP-VAPVI shift only", "diag: DP-VAPVI noise only"),
        )  # fmt: skip
        md.append("")
    md += [
        f"At K = {kmax}, C = {c:g}: VAPVI "
        + ", ".join(f"{m('VAPVI', i, kmax):.3f}" for i in INSTANCES)
        + "; shift only "
        + ", ".join(f"{m('diag: DP-VAPVI shift only', i, kmax):.3f}" for i in INSTANCES)
        + "; noise only "
        + ", ".join(f"{m('diag: DP-VAPVI noise only', i, kmax):.3f}" for i in INSTANCES)
        + "; DP-VAPVI "
        + ", ".join(f"{m('DP-VAPVI', i, kmax):.3f}" for i in INSTANCES)
        + " (instances "
        + ", ".join(str(i) for i in INSTANCES)
        + ").",
        "",
    ]
    md += _capped_values(setup, capped, vhat, vstar, c)
    snr_ks = tuple(k for k in (100, kmax, *setup.k_extended) if k <= max(ks + setup.k_extended))
    snr = _signal_to_noise(setup, sorted(set(snr_ks)), c)
    md += [
        "Signal-to-noise of the releases: median over h of ‖statistic‖ / E‖noise‖ at ρ = 1 "
        "(instance 0, first seed, computed with VAPVI's Ṽ and σ̃; E‖noise‖ = σ√d for vectors, "
        "s·√(d(d+1)) for Gram matrices). A ratio below 1 means the release is mostly noise:",
        "",
        "| K | " + " | ".join(_KIND_LABELS.values()) + " |",
        "|---:|" + "---:|" * len(_KIND_LABELS),
    ]
    for k, row in snr.items():
        md.append(f"| {k} | " + " | ".join(f"{row[kind]:.2f}" for kind in _KIND_LABELS) + " |")
    md.append("")
    md += [
        "**Does the rescaling of φ explain the gap?** The guarantee needs ‖φ‖ ≤ 1, so φ is "
        "divided by √7 (ν, θ compensated: the same MDP), while the noise stays the same. The "
        "diagnostic runs both algorithms on the raw features (‖φ‖ up to √7) — for DP-VAPVI the "
        "sensitivity bounds then fail, so it is **not** private and is shown only to test the "
        "explanation:",
        "",
    ]
    for inst in INSTANCES:
        md += [f"Instance {inst}, C = {c:g}:", ""]
        md += _table(
            agg, setup, c, inst,
            ("VAPVI", "DP-VAPVI", "diag: VAPVI unscaled φ", "diag: DP-VAPVI unscaled φ"),
        )  # fmt: skip
        md.append("")
    better = sum(
        m("diag: DP-VAPVI unscaled φ", i, k) < m("DP-VAPVI", i, k) for i in INSTANCES for k in ks
    )
    md += [
        f"Unscaled DP-VAPVI has a lower mean than DP-VAPVI in {better} of "
        f"{len(INSTANCES) * len(ks)} (instance, K) cells at C = {c:g}.",
        "",
    ]
    if setup.k_extended:
        md += [
            "**Beyond the paper's range.** Does DP-VAPVI converge to VAPVI as K grows? Same "
            f"protocol, K up to {setup.k_extended[-1]}:",
            "",
        ]
        for inst in INSTANCES:
            md += [f"Instance {inst}, C = {c:g}:", ""]
            md += _table(agg, setup, c, inst, ("PEVI", "VAPVI", "DP-VAPVI"))
            md.append("")
        md += [
            "Gap DP-VAPVI − VAPVI at C = "
            f"{c:g}: "
            + "; ".join(
                f"instance {i}: "
                + ", ".join(
                    f"K={k}: {m('DP-VAPVI', i, k) - m('VAPVI', i, k):+.3f}"
                    for k in (kmax, *setup.k_extended)
                )
                for i in INSTANCES
            )
            + ".",
            "",
        ]
    md += [f"![diagnostics]({diag_plot.relative_to(root).as_posix()})", ""]
    return md


# --------------------------------------------------------------------------------------------
# Figure 1(b)
# --------------------------------------------------------------------------------------------


def fig1b(out: Path, *, seeds: int | None = None, seed: int = 0, quick: bool = False) -> Path:
    """Figure 1(b): DP-VAPVI at ρ ∈ {0.5, 1, 5, 10, 50} vs K (VAPVI as reference)."""
    run = RunDir(out)
    setup = _setup(seeds, seed, quick, extended=False)
    rhos = RHOS_B
    algorithms: dict[str, Runner] = {"VAPVI": _vapvi_runner}
    for r in rhos:
        algorithms[_rho_name(r)] = _dp_runner(r)
    t0 = time.perf_counter()
    rows = _run_with_progress("qiao-wang-fig1b", setup, algorithms)
    seconds = time.perf_counter() - t0
    agg = _aggregate(rows)
    zero = _aggregate(rows, "zero_q")
    vstar = _vstar()
    claims = _claims_b(agg, setup, rhos)
    priv = _representative_report(rhos[0])
    run.write_config(
        {
            "reproduction": "qiao-wang-fig1b",
            "K": list(setup.ks),
            "instances": list(INSTANCES),
            "seeds": setup.seeds,
            "base_seed": setup.base_seed,
            "bonus_scales": list(setup.scales),
            "rhos": list(rhos),
            "matrix_noise": "strict",
            "delta": DELTA,
            "failure_prob": FAILURE_PROB,
            "lambda": 1.0,
            "additive_bonus": 0.0,
            "split": False,
            "quick": setup.quick,
        }
    )
    main_c = setup.scales[-1]
    kmax = setup.ks[-1]
    run.write_metrics(
        {
            "suboptimality": {
                alg: {str(i): _mean(agg, alg, i, main_c, kmax) for i in INSTANCES}
                for alg in algorithms
            },
            "suboptimality_note": f"at K = {kmax}, C = {main_c:g}; all cells in 'cells'",
            "v_star": {str(i): v for i, v in vstar.items()},
            "claims": claims,
            "cells": _agg_json(agg),
            "zero_q_fraction": _agg_json(zero),
            "privacy": _privacy_facts(rhos),
            "privacy_json_note": f"privacy.json is the report of a DP-VAPVI run at ρ = {rhos[0]:g}",
            "wall_seconds": seconds,
        }
    )
    run.write_curve(_curve_rows(agg, zero))
    run.write_privacy(priv)
    lines = [("VAPVI", "VAPVI (non-private)", {"marker": "o", "color": "black", "ls": "--"})]
    lines += [(_rho_name(r), f"DP-VAPVI ρ={r:g}", {"marker": "^"}) for r in rhos]
    plots = []
    for c in setup.scales:
        p = run.plot_path(f"fig1b_C{c:g}")
        _plot(p, agg, setup, c, lines, f"Figure 1(b) reproduction, C = {c:g}")
        plots.append(p)

    n_pairs = len(rhos) - 1
    md = [
        "# Qiao & Wang, Figure 1(b): DP-VAPVI at several privacy budgets",
        "",
        "Generated by `privrl reproduce qiao-wang-fig1b`"
        + (" --quick" if setup.quick else "")
        + ". The paper's claim (Section 5): with a larger privacy budget ρ the noise is "
        "smaller and DP-VAPVI is closer to VAPVI.",
        "",
        *_setup_lines(setup, seconds, vstar),
        "Privacy per ρ (each run is exactly ρ-zCDP, strict matrix noise; ε from the RDP "
        f"accountant at δ = {DELTA:g}, Bun–Steinke closed form beside it; E is the PD shift):",
        "",
        "| ρ | ε (RDP accountant) | ε (Bun–Steinke) | E |",
        "|---:|---:|---:|---:|",
    ]
    for r in rhos:
        rep = _representative_report(r)
        md.append(
            f"| {r:g} | {rep.epsilon:.3f} | {zcdp_to_dp(r, DELTA):.3f} | "
            f"{gram_shift(20, 10, r, FAILURE_PROB):.1f} |"
        )
    md += [
        "",
        "## Verdict",
        "",
        "Criterion (fixed before looking at the numbers): the claim holds if the distance to "
        "VAPVI, mean over K of |DP-VAPVI(ρ) − VAPVI|, strictly decreases along ρ = "
        + ", ".join(f"{r:g}" for r in rhos)
        + ".",
        "",
        "| C | instance | mean |gap| per ρ | decreasing steps | holds? |",
        "|---:|---:|---|---|---|",
    ]
    for c in claims:
        md.append(
            f"| {c['C']:g} | {c['instance']} | "
            + ", ".join(f"{x:.3f}" for x in c["mean_abs_gap_by_rho"])
            + f" | {c['decreasing_pairs']}/{n_pairs} | {'yes' if c['holds'] else 'no'} |"
        )
    held = sum(c["holds"] for c in claims)
    md += ["", f"The claim holds in {held} of {len(claims)} (C, instance) cases."]
    md += ["", "## Suboptimality (mean ± s.e.)", ""]
    algs = ("VAPVI", *(_rho_name(r) for r in rhos))
    for c in setup.scales:
        for inst in INSTANCES:
            md += [f"### C = {c:g}, instance {inst}", ""]
            md += _table(agg, setup, c, inst, algs)
            md.append("")
    md += [f"![Figure 1(b), C = {c:g}]({p.relative_to(run.path).as_posix()})" for c, p in
           zip(setup.scales, plots, strict=True)]  # fmt: skip
    md.append("")
    target = run.artifact("report.md")
    target.write_text("\n".join(md) + "\n")
    write_claims(run.path, gallery_claims_b(claims, rhos, f"plots/fig1b_C{setup.scales[0]:g}.png"))
    return target
