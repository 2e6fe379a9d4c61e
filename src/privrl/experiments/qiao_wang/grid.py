"""Figure 1's grid: setup, algorithms (and diagnostic variants), runs over the grid."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privrl.envs.linear import LinearMDP
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
