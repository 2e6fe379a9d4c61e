"""The units of the continuous-domain GPOPE figures (2a, 3b, 4), as function cells.

A run's units (the public tuning of every (m, ε) and the references, then GP's trials at every
(m, ε) and non-private GTD2's) are top-level functions of the run's key `ctx` (the JSON
configuration that names its cache folder) and their own arguments, so that `run_units`
(`privrl.runs.units`) runs them in any process, local pool or Ray, and skips those whose JSON
result is in the cache folder. A unit rebuilds the domain and its public MSPBE model once per
process (`_setup`) and keeps trial datasets' statistics for the next unit of the same m."""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privrl.ope import (
    StepSize,
    TrajectoryStats,
    first_visit_returns,
    model_system,
    trajectory_stats,
    tune_on_public,
)
from privrl.ope.baselines import lsw_estimate, lsw_sigma
from privrl.ope.lstd import lstd
from privrl.runs.units import Unit, log_progress, pending, run_units
from reproductions.gpope.common import DELTA, _gp_trials, _log, _lsw_noisy, _rng, _ss


@dataclass(frozen=True)
class _Cont:
    """Scale of a continuous-domain reproduction (chosen to fit ~15 min on 2 cores)."""

    ms: tuple[int, ...]
    trials: int
    model_trajectories: int
    iter_per_traj: int
    etas: tuple[float, ...]
    repeats: int
    clip_mults: tuple[float, ...] = (1.0, 10.0, 100.0)


def _domain(name: str, mode: str) -> Any:
    from privrl.ope.domains import get_domain

    # The learned policies are fixed, public objects (domain seed 0).
    return get_domain(name, seed=0, mode=mode, progress=False)


def _mean_reward(domain: Any, policy: Any, seed: int, n: int = 500) -> float:
    """r̄: the evaluated policy's mean reward per step, on a public simulator sample."""
    data = domain.sample(policy, n, seed=_ss(seed, 99))
    return float(np.mean(data.rewards))


def _v1_view(domain: Any, public: Any, bins: int) -> tuple[Any, np.ndarray, np.ndarray]:
    """State aggregation for DP-LSW on a continuous domain: (aggregation map, Φ = I, ρ).
    ρ = the cells' visit frequencies in a PUBLIC sample (data-independent weights)."""
    from privrl.rl.features import make_features

    agg = make_features(f"aggregation:{bins}", public.metadata.observation_space)
    rows = np.arange(public.n_transitions) + public.transition_episode_index
    cells = agg.cell(np.asarray(public.observations)[rows])
    rho = np.bincount(cells, minlength=agg.dim).astype(np.float64)
    return agg, np.eye(agg.dim), rho / rho.sum()


def _cache_root(figure: str, quick: bool, key: dict[str, Any]) -> Path:
    """The folder of a run's finished units (JSON files) in the project cache, named by its
    configuration: an interrupted run resumes where it stopped and a finished one rebuilds
    its report without recomputing."""
    from privrl.data import cache_dir

    text = json.dumps(key, sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    root = cache_dir() / "reproduce" / f"gpope-{figure}" / ("quick" if quick else "full") / digest
    root.mkdir(parents=True, exist_ok=True)
    (root / "key.json").write_text(text + "\n")
    return root


# ------------------------------------------------------------------------ units
# Each unit is a top-level function of the run's key (`ctx`: the JSON configuration that names
# its cache folder) and its own arguments, so that it runs in any process (`run_units`).


@dataclass
class _Setup:
    """What every unit of a figure rebuilds from public inputs: the domain, its features, the
    public MSPBE model and the evaluated policy's mean reward (the relative scale)."""

    domain: Any
    target: Any
    features: Any
    gamma: float
    system: Any
    scale: float
    r_bar: float


@functools.lru_cache(maxsize=2)
def _setup_of(
    domain_name: str, off_policy: bool, model_n: int, base: int, relative: bool
) -> _Setup:
    # On-policy statistics do not involve the domain's target policy (ρ ≡ 1): the domain is
    # loaded in its default mode either way and the evaluated policy is passed explicitly.
    domain = _domain(domain_name, "off-policy")
    target = domain.target_policy if off_policy else None
    features = domain.features
    system = model_system(
        domain, target_policy=target, features=features, n_trajectories=model_n, seed=12345
    )
    r_bar = _mean_reward(
        domain, domain.target_policy if off_policy else domain.behaviour_policy, base
    )
    return _Setup(
        domain, target, features, float(domain.gamma), system, r_bar**2 if relative else 1.0, r_bar
    )


def _setup(ctx: dict[str, Any]) -> _Setup:
    return _setup_of(
        ctx["domain"],
        bool(ctx["off_policy"]),
        int(ctx["scale"]["model_trajectories"]),
        int(ctx["base"]),
        bool(ctx["relative"]),
    )


def _cont_of(ctx: dict[str, Any]) -> _Cont:
    return _Cont(**{k: tuple(v) if isinstance(v, list) else v for k, v in ctx["scale"].items()})


def _orders(ctx: dict[str, Any]) -> tuple[float, ...] | None:
    return None if ctx["orders"] is None else tuple(ctx["orders"])


def _public(s: _Setup, ctx: dict[str, Any], m: int) -> Any:
    return s.domain.sample(s.domain.behaviour_policy, m, seed=_ss(ctx["base"], ctx["fig_no"], 0, m))


def _trial_data(s: _Setup, ctx: dict[str, Any], m: int, t: int) -> Any:
    return s.domain.sample(
        s.domain.behaviour_policy, m, seed=_ss(ctx["base"], ctx["fig_no"], 1, m, t)
    )


_STATS: dict[str, dict[int, TrajectoryStats]] = {}


def _make_stats(ctx: dict[str, Any], m: int) -> Callable[[int], TrajectoryStats]:
    """Trial t's statistics, kept for the next unit of the same run and m in this process
    (the trials of every ε use the same datasets) when they fit in memory."""
    s = _setup(ctx)
    ident = json.dumps([ctx, m], sort_keys=True, default=str)
    keep = ctx["trials"] * m * s.features.dim**2 * 16 < 1.5e9
    if ident not in _STATS:
        _STATS.clear()
        _STATS[ident] = {}
    cache = _STATS[ident]

    def make(t: int) -> TrajectoryStats:
        if t in cache:
            return cache[t]
        st = trajectory_stats(
            _trial_data(s, ctx, m, t), s.features, s.gamma, target_policy=s.target
        )
        if keep:
            cache[t] = st
        return st

    return make


def unit_tune(ctx: dict[str, Any], m: int, eps: float) -> dict[str, Any]:
    """The public tuning of (m, ε): clip h, step η, σ, and the non-private step."""
    s, cont = _setup(ctx), _cont_of(ctx)
    n_iter = cont.iter_per_traj * m
    _log(f"{ctx['figure']} m={m} N={n_iter} ε={eps}: tuning on public data")
    pub_stats = trajectory_stats(_public(s, ctx, m), s.features, s.gamma, target_policy=s.target)
    # h's base (the public quantile along the best non-private run) is the same for every ε:
    # the non-private sweep uses the same public data and seed each time
    tun = tune_on_public(
        pub_stats,
        s.system,
        m=m,
        epsilon=eps,
        delta=DELTA,
        iterations=n_iter,
        etas=cont.etas,
        repeats=cont.repeats,
        seed=ctx["base"] * 1000 + ctx["fig_no"],
        source=f"sampled from the {ctx['domain']} simulator with its own seed",
        orders=_orders(ctx),
        clip_multipliers=cont.clip_mults,
        batched=True,
    )
    assert tun.nonprivate_step is not None
    return {
        "m": m,
        "N": n_iter,
        "epsilon": eps,
        "h": tun.clip,
        "h_multiplier": tun.clip_multiplier,
        "eta": tun.step.eta,
        "sigma": tun.sigma,
        "public_clipped_fraction": tun.clipped_fraction,
        "nonprivate_eta": tun.nonprivate_step.eta,
    }


def _lstd_name(off_policy: bool) -> str:
    return "off-policy LSTD (non-private)" if off_policy else "LSTD (non-private)"


def unit_refs(ctx: dict[str, Any], m: int) -> list[dict[str, Any]]:
    """The references on every trial's dataset: LSTD, and V1 (DP-LSW on a 10×10 state
    aggregation) at every ε when the figure has it."""
    s = _setup(ctx)
    v1 = None
    if ctx["v1"]:
        agg, Phi_v, rho_v = _v1_view(s.domain, _public(s, ctx, m), 10)
        cross = model_system(
            s.domain,
            target_policy=None,
            features=s.features,
            value_features=agg,
            n_trajectories=int(ctx["scale"]["model_trajectories"]),
            seed=12345,
        )
        v1 = (agg, Phi_v, rho_v, cross)
    _log(f"{ctx['figure']} m={m}: references (LSTD{', V1' if v1 is not None else ''})")
    rows: list[dict[str, Any]] = []
    base, fig_no = ctx["base"], ctx["fig_no"]
    for t in range(ctx["trials"]):
        data = _trial_data(s, ctx, m, t)
        th = lstd(data, s.features, s.gamma, target_policy=s.target)
        mspbe = float(s.system.mspbe(th)) / s.scale
        rows.append({"m": m, "method": _lstd_name(ctx["off_policy"]), "trial": t, "mspbe": mspbe})
        if v1 is None:
            continue
        agg, Phi_v, rho_v, cross = v1
        fv = first_visit_returns(data, agg.cell, agg.dim, s.gamma)
        rr = 1.0 / (1.0 - s.gamma)  # rewards −1: return range 1/(1−γ)
        for eps in ctx["eps"]:
            s1 = lsw_sigma(Phi_v, rho_v, fv.counts, epsilon=eps, delta=DELTA, return_range=rr)
            th1 = _lsw_noisy(
                lsw_estimate(Phi_v, rho_v, fv),
                s1,
                _rng(base, fig_no, 3, m, t, int(eps * 100)),
                "DP-LSW",
            )
            rows.append(
                {
                    "m": m,
                    "method": f"V1 ε={eps:g} (approx.)",
                    "trial": t,
                    "epsilon": eps,
                    "mspbe": float(cross.mspbe(th1)) / s.scale,
                }
            )
    return rows


def unit_trials(
    ctx: dict[str, Any], m: int, eta: float, clip: float | None, eps: float | None,
    k_eps: int | None,
) -> list[float]:  # fmt: skip
    """MSPBE of GP's trials at (m, ε) with the tuned (η, h), or of non-private GTD2
    (`eps` None: σ = 0, no clipping) at the tuned non-private η."""
    s, cont = _setup(ctx), _cont_of(ctx)
    n_iter = cont.iter_per_traj * m
    base, fig_no = ctx["base"], ctx["fig_no"]
    if eps is None:
        _log(f"{ctx['figure']} m={m} N={n_iter}: non-private GTD2, {ctx['trials']} trials")
        seed, orders = _ss(base, fig_no, 4, m), None
    else:
        _log(f"{ctx['figure']} m={m} N={n_iter} ε={eps}: {ctx['trials']} trials")
        seed, orders = _ss(base, fig_no, 2, m, k_eps), _orders(ctx)
    theta, *_ = _gp_trials(
        _make_stats(ctx, m),
        ctx["trials"],
        [StepSize(eta=float(eta))],
        clip=math.inf if clip is None else float(clip),
        epsilon=eps,
        iterations=n_iter,
        seed=seed,
        orders=orders,
    )
    return [float(v) / s.scale for v in np.asarray(s.system.mspbe(theta[:, 0]))]


def _stages(ctx: dict[str, Any], root: Path, tuned: dict | None = None) -> list[Unit]:
    """Stage 1 (tuned None): the tuning of every (m, ε) and the references; stage 2: the
    trials of every (m, ε) and the non-private GTD2 trials, from the tuned facts."""
    me = f"{__name__}:"
    units = []
    for m in _cont_of(ctx).ms:
        if tuned is None:
            units += [
                Unit(
                    root / f"tune-m{m}-eps{e:g}.json",
                    me + "unit_tune",
                    {"ctx": ctx, "m": m, "eps": e},
                )
                for e in ctx["eps"]
            ]
            units.append(Unit(root / f"refs-m{m}.json", me + "unit_refs", {"ctx": ctx, "m": m}))
            continue
        for k_eps, e in enumerate(ctx["eps"]):
            fact = tuned[m, e]
            args = {"eta": fact["eta"], "clip": fact["h"], "eps": e, "k_eps": k_eps}
            units.append(
                Unit(
                    root / f"gp-m{m}-eps{e:g}.json",
                    me + "unit_trials",
                    {"ctx": ctx, "m": m, **args},
                )
            )
        np_eta = tuned[m, ctx["eps"][0]]["nonprivate_eta"]
        args = {"eta": np_eta, "clip": None, "eps": None, "k_eps": None}
        units.append(Unit(root / f"np-m{m}.json", me + "unit_trials", {"ctx": ctx, "m": m, **args}))
    return units


def run_units_of(
    ctx: dict[str, Any], root: Path, *, backend: str, workers: int | None, dry: bool = False
) -> Any:
    """Run the two stages; with `dry`, only count the units that would be computed (stage 2
    is known only once stage 1 is: its missing units count as all of stage 2)."""
    first = _stages(ctx, root)
    if dry:
        if pending(first):
            return len(pending(first)) + len(_cont_of(ctx).ms) * (len(ctx["eps"]) + 1)
        return len(pending(_stages(ctx, root, _tuned(ctx, run_units(first)))))
    progress = log_progress(f"gpope {ctx['figure']}")
    done = run_units(first, backend=backend, workers=workers, progress=progress)
    tuned = _tuned(ctx, done)
    second = run_units(
        _stages(ctx, root, tuned), backend=backend, workers=workers, progress=progress
    )
    return done, tuned, second


def _tuned(ctx: dict[str, Any], first: list[Any]) -> dict[tuple[int, float], dict[str, Any]]:
    per_m = len(ctx["eps"]) + 1
    out = {}
    for i, m in enumerate(_cont_of(ctx).ms):
        for j, e in enumerate(ctx["eps"]):
            out[m, e] = first[i * per_m + j]
    return out
