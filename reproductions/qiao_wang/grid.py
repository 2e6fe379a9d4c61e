"""Figure 1's grid: setup, algorithms (and diagnostic variants), runs over the grid."""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privrl.envs.linear import LinearMDP
from privrl.offline import DPVAPVI, PEVI, VAPVI, FeatureTable, LinearGreedyPolicy
from privrl.offline.linear import LinearPublic
from privrl.offline.pevi import pevi_beta
from privrl.offline.vapvi import (
    GaussianReleaser,
    LinearEpisodes,
    NonPrivateReleaser,
    gram_shift,
    theory_additive_bonus,
    vapvi,
    variance_aware_pvi,
)
from privrl.privacy import NoiseSource
from privrl.privacy.public import PublicParameters
from privrl.runs.units import Unit, pending, run_units

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
DK_ON = "DP-VAPVI + D/K"  # DP-VAPVI with the additive D/K term on, at the tuned constant
EXTENDED_ALGORITHMS = ("PEVI", "VAPVI", "DP-VAPVI", DK_ON, "diag: DP-VAPVI shift only")
# The unit of the D/K numerator: 2H³√d, the part of the theory's D that VAPVI has too (DP-VAPVI's
# D adds privacy terms to it). The numerator is D = c·2H³√d with c chosen on public instances.
DK_UNIT = theory_additive_bonus(HORIZON, 10)
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
    instances: tuple[int, ...] = INSTANCES


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


def _noise(noise_seed: int) -> np.random.Generator:
    """DP-VAPVI's noise in this simulation study (synthetic data): repeatable from the recorded
    seed, so these runs are uncertified."""
    return NoiseSource.insecure(noise_seed).generator("dp-vapvi")


def _learned(
    learner: DPVAPVI | VAPVI | PEVI, data: LinearEpisodes, table: FeatureTable, noise_seed: int
) -> LinearGreedyPolicy:
    """`learner`'s computation on the simulator's episodes: its plan from the public sizes
    (the table, H and K of the simulation), then its learner with `_noise(noise_seed)` (the
    stream its `fit` draws from `NoiseSource.insecure(noise_seed)`)."""
    params = PublicParameters()
    public = LinearPublic(features=table, mdp=None, H=data.H, K=data.K)
    plan = learner.sized_plan(learner.resolve(params), public, params)
    noise = _noise(noise_seed) if learner.private else None
    return learner.learn(data, plan, np.random.default_rng(noise_seed), noise).policy


def _dp_dk_runner(rho: float, multipliers: Mapping[float, float]) -> Runner:
    """DP-VAPVI with the additive D/K term on: D = c·2H³√d, c = ``multipliers[C]`` (a public
    hyper-parameter). Same noise seed as `_dp_runner`, so c = 0 is DP-VAPVI exactly."""

    def run(
        data: LinearEpisodes, table: FeatureTable, scale: float, noise_seed: int
    ) -> LinearGreedyPolicy:
        learner = DPVAPVI(
            rho=rho, bonus_scale=scale, delta=DELTA, failure_prob=FAILURE_PROB,
            additive_bonus=multipliers[scale] * DK_UNIT,
        )  # fmt: skip
        return _learned(learner, data, table, noise_seed)

    return run


def _dp_runner(rho: float) -> Runner:
    def run(
        data: LinearEpisodes, table: FeatureTable, scale: float, noise_seed: int
    ) -> LinearGreedyPolicy:
        learner = DPVAPVI(rho=rho, bonus_scale=scale, delta=DELTA, failure_prob=FAILURE_PROB)
        return _learned(learner, data, table, noise_seed)

    return run


def _vapvi_runner(
    data: LinearEpisodes, table: FeatureTable, scale: float, noise_seed: int
) -> LinearGreedyPolicy:
    return _learned(VAPVI(bonus_scale=scale), data, table, noise_seed)


def _pevi_runner(
    data: LinearEpisodes, table: FeatureTable, scale: float, noise_seed: int
) -> LinearGreedyPolicy:
    return _learned(PEVI(bonus_scale=scale, xi=PEVI_XI), data, table, noise_seed)


def _pevi_matched_runner(
    data: LinearEpisodes, table: FeatureTable, scale: float, noise_seed: int
) -> LinearGreedyPolicy:
    """PEVI with VAPVI's coefficient C·√d instead of C·dH√ζ (diagnostic)."""
    beta = pevi_beta(table.d, data.H, data.K, PEVI_XI)
    learner = PEVI(bonus_scale=scale * math.sqrt(table.d) / beta, xi=PEVI_XI)
    return _learned(learner, data, table, noise_seed)


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
            noise_rng = _noise(noise_seed)  # the same noise stream as dp_vapvi's
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
        noise_rng = _noise(noise_seed)
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


def runner_of(spec: Sequence[Any]) -> Runner:
    """The runner an algorithm spec names (a JSON list, so that a unit can carry it):
    ["pevi"], ["vapvi"], ["dp", ρ], ["dp-dk", ρ, [[C, c], ...]], ["diag", "shift"|"noise", ρ],
    ["pevi-matched"], ["vapvi-unscaled"], ["dp-unscaled", ρ]."""
    kind, *args = spec
    if kind == "dp-dk":
        return _dp_dk_runner(float(args[0]), {float(c): float(m) for c, m in args[1]})
    makers: dict[str, Callable[..., Runner]] = {
        "pevi": lambda: _pevi_runner,
        "vapvi": lambda: _vapvi_runner,
        "dp": _dp_runner,
        "diag": _diag_runner,
        "pevi-matched": lambda: _pevi_matched_runner,
        "vapvi-unscaled": lambda: _vapvi_unscaled,
        "dp-unscaled": _dp_unscaled,
    }
    return makers[kind](*args)


def dk_spec(rho: float, multipliers: Mapping[float, float]) -> list[Any]:
    """The spec of `_dp_dk_runner(rho, multipliers)`."""
    return ["dp-dk", rho, [[c, m] for c, m in multipliers.items()]]


def _grid_cell(
    setup: _Setup,
    algorithms: Mapping[str, Runner],
    extended_algorithms: Sequence[str],
    instance: int,
    s: int,
) -> list[dict[str, Any]]:
    """Every (K, C, algorithm) of one (instance, seed): one row per run with the exact
    suboptimality and the fraction of Q̂ entries clipped at 0."""
    k_all = tuple(sorted({*setup.ks, *setup.k_extended}))
    cap = (HORIZON - np.arange(HORIZON))[:, None, None]  # Q̂_h ≤ H − h + 1 (1-based h)
    mdp = LinearMDP.qiao_wang(instance)
    # φ is already divided by mdp.scale (= √7); record the factor for the unscaled diagnostic.
    table = FeatureTable(phi=mdp.phi, scale=mdp.scale, source=f"linear-mdp:{instance}")
    cpu0 = time.process_time()
    episodes = _nested_episodes(mdp, max(k_all), setup.base_seed, instance, s)
    policies: list[np.ndarray] = []
    meta: list[dict[str, Any]] = []
    for K in k_all:
        data = episodes.subset(np.arange(K))  # nested datasets: first K episodes
        noise_seed = int(
            np.random.SeedSequence([setup.base_seed, instance, s, K, 1]).generate_state(1)[0]
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
    cpu = time.process_time() - cpu0  # this (instance, seed)'s CPU time, all K
    return [
        {**m, "suboptimality": float(v), "cell_cpu_seconds": cpu}
        for m, v in zip(meta, subopt, strict=True)
    ]


def grid_unit(
    setup: dict[str, Any],
    algorithms: dict[str, list[Any]],
    extended: list[str],
    instance: int,
    seed: int,
) -> list[dict[str, Any]]:
    """One (instance, seed) of a grid as a function cell (`privrl.runs.units`)."""
    plain = {k: tuple(v) if isinstance(v, list) else v for k, v in setup.items()}
    runners = {name: runner_of(spec) for name, spec in algorithms.items()}
    return _grid_cell(_Setup(**plain), runners, extended, instance, seed)


def _run_grid(
    setup: _Setup,
    algorithms: Mapping[str, Sequence[Any]],
    *,
    extended_algorithms: Sequence[str] = (),
    cache: Path | None = None,
    label: str | None = None,
    backend: str = "local",
    workers: int | None = None,
    progress: Callable[[Unit, dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every (instance, seed, K, C, algorithm) (`algorithms`: name → spec, see
    `runner_of`); one (instance, seed) is a function cell run on the sweep runner's `backend`.

    With ``cache`` (a directory named by `grid_cache`), each (instance, seed) is stored there
    as it finishes and read back instead of recomputed: an interrupted run resumes (without,
    the cells go to a temporary directory). `label`: a progress bar on stderr."""
    import tempfile
    from contextlib import nullcontext

    from rich.console import Console
    from rich.progress import Progress

    args = {
        "setup": json.loads(json.dumps(asdict(setup))),
        "algorithms": {name: list(spec) for name, spec in algorithms.items()},
        "extended": list(extended_algorithms),
    }
    with tempfile.TemporaryDirectory() if cache is None else nullcontext(cache) as where:
        units = [
            Unit(
                Path(where) / f"instance{i}-seed{s}.json",
                f"{__name__}:grid_unit",
                {**args, "instance": i, "seed": s},
            )
            for i in setup.instances
            for s in range(setup.seeds)
        ]
        with Progress(console=Console(stderr=True), transient=True, disable=not label) as bar:
            done = len(units) - len(pending(units))
            task = bar.add_task(label or "", total=len(units), completed=done)

            def tick(unit: Unit, record: dict[str, Any]) -> None:
                bar.advance(task)
                if progress is not None:
                    progress(unit, record)

            results = run_units(units, backend=backend, workers=workers, progress=tick)
    return [row for cell in results for row in cell]


def grid_cache(label: str, setup: _Setup, algorithms: Sequence[str], **extra: Any) -> Path:
    """The cache directory of one grid: ``$PRIVRL_CACHE/reproduce/qiao-wang/<label>-<key>``,
    the key a hash of what a cell's rows depend on (the K, the C, the base seed, the algorithm
    names and ``extra``, e.g. tuned constants), so a changed grid never reads another grid's
    rows. The number of seeds and the instances are not in the key: a cell is one (instance,
    seed), so runs with more seeds or other instances share the cells they have in common."""
    from privrl.data import cache_dir

    cell = {k: v for k, v in asdict(setup).items() if k not in ("seeds", "instances")}
    spec = {"setup": cell, "algorithms": list(algorithms), "extra": extra, "v": 1}
    key = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()
    path = cache_dir() / "reproduce" / "qiao-wang" / f"{label}-{key[:16]}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cell_cpu_seconds(rows: list[dict[str, Any]]) -> float:
    """Mean CPU time of one (instance, seed) of a grid (all its K, C and algorithms)."""
    per = {(r["instance"], r["seed"]): r.get("cell_cpu_seconds", math.nan) for r in rows}
    return float(np.mean(list(per.values())))


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
