"""UCB-VI (Azar et al. 2017) and DP-UCBVI (Qiao & Wang 2023) with the central (JDP) and local
(LDP) privatizers — the baselines of the SDP-PE paper's Figure 4. One code path: UCB-VI is
DP-UCBVI with the identity privatizer (E = 0).

Before every episode k the privatizer's running counts (episodes 1..k−1) give
P̃_h(s'|s,a) = ñ_h(s,a,s')/ñ_h(s,a), r̃_h(s,a) = clip(r̃_sum/ñ, 0, 1), and optimistic value
iteration with upper and lower values (Ṽ, V̲), h = H−1..0:

    Γ_h(s,a) = C·[√(Var·ι/ñ) + H·S·E·ι/ñ + H²·S·ι/ñ],   Var = Var_{P̃}(Ṽ_{h+1}) + r̃(1 − r̃),
    γ_h(s,a) = C·P̃_h(Ṽ_{h+1} − V̲_{h+1})/H,
    Q̃_h = min(H − h, r̃ + P̃_h Ṽ_{h+1} + Γ + γ),   Q̲_h = max(0, r̃ + P̃_h V̲_{h+1} − Γ − γ),

π_h = argmax_a Q̃_h (ties → smallest action). γ is the correction that lets the bonus use
Var(Ṽ) in place of Var(V*) (Var(V*) ≤ Var(Ṽ) + 2H·P̃(Ṽ − V̲), then AM–GM, which is also where
the H²Sι/ñ term comes from). ι = ln(2HSAK/β); C = ``bonus_scale``.

Vectorised over independent runs (seeds): every random draw of run r comes from run r's own
generators in fixed blocks, so a run gives the same result alone or batched with others.
Regret is exact: each episode's greedy policy is evaluated on the true MDP.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import numpy.typing as npt

from privrl.arrays import FloatArray, IntArray
from privrl.config import option
from privrl.envs.tabular import TabularMDP, policy_evaluation
from privrl.online.common import (
    Counts,
    OnlineLearnerConfig,
    OnlineResult,
    Progress,
    check_at_least,
    check_choice,
)
from privrl.online.privatizers import (
    CentralPrivatizer,
    IdentityPrivatizer,
    LocalPrivatizer,
    PrivateCounts,
    Privatizer,
    RowFilter,
)
from privrl.online.resume import LoopCheckpoint, fingerprint
from privrl.privacy.noise import NoiseSource

__all__ = ["DPUCBVIConfig", "UCBVIConfig", "dp_ucbvi", "optimistic_plan", "ucbvi", "unusable_rows"]

_BLOCK = 1024  # episodes per block of pre-drawn uniforms and of regret evaluation


@dataclass(frozen=True)
class UCBVIConfig(OnlineLearnerConfig):
    """UCB-VI: optimistic value iteration on raw counts, not private.

    Symbols (module docstring): C = `bonus_scale` (the constant of Γ and γ), β = `beta` (the
    utility failure probability in ι = ln(2HSAK/β) and in a privatizer's E), K = `episodes`.
    The environment (S, A, H) is not a setting: it is what the learner is given.
    """

    system: ClassVar[str] = "ucbvi"
    # The constants recorded as "config" in a run's config.json.
    CONSTANTS: ClassVar[tuple[str, ...]] = ("bonus_scale", "beta")

    bonus_scale: float = option(1.0, help="Bonus constant C.")

    def validate(self) -> None:
        check_at_least(self, "bonus_scale", 0)
        super().validate()


@dataclass(frozen=True)
class DPUCBVIConfig(UCBVIConfig):
    """DP-UCBVI (Qiao & Wang 2023): UCB-VI on private running counts, pure ε-DP for one user.

    Adds ε = `epsilon` and the trust model `privatizer`: "central" (a trusted server releases
    the running counts with the binary-tree mechanism: ε-JDP) or "local" (each user adds
    Laplace noise to their own counts: ε-LDP).
    """

    system: ClassVar[str] = "dp-ucbvi"
    epsilon: float = option(..., "--epsilon", help="Privacy budget ε (1e-6 to 100).")
    privatizer: Literal["central", "local"] = option(
        "central", help="central (ε-JDP, trusted server) or local (ε-LDP)."
    )

    def validate(self) -> None:
        check_choice(self, "privatizer", ("central", "local"))
        super().validate()


def optimistic_plan(priv: PrivateCounts, iota: float, scale: float) -> IntArray:
    """Greedy policy ``[R, H, S]`` of the optimistic value iteration (module docstring) on the
    private counts ``[R, H, S, A(, S)]`` of R runs."""
    n = priv.n_sa
    R, H, S, A = n.shape
    n_safe = np.maximum(n, 1e-12)  # ñ = 0 (no data, non-private): the bonus caps Q at H − h
    P = (priv.n_sas / n_safe[..., None]).reshape(R, H, S * A, S)
    r = np.clip(priv.r_sum / n_safe, 0.0, 1.0).reshape(R, H, S * A)
    r_var = r * (1.0 - r)
    inv = (1.0 / n_safe).reshape(R, H, S * A)
    iota_inv = iota * inv
    lower_order = scale * (H * S * priv.E * iota + H * H * S * iota) * inv
    if np.all(lower_order >= H):
        # Γ ≥ H ≥ H − h everywhere: Q̃_h = H − h for every (s, a), ties → action 0 (exactly
        # what the loop below returns; a fast path for private runs still in their burn-in)
        return np.zeros((R, H, S), dtype=np.int64)
    pi = np.empty((R, H, S), dtype=np.int64)
    M = np.zeros((R, S, 3))  # columns: Ṽ_{h+1}, Ṽ²_{h+1}, V̲_{h+1}
    base = (np.arange(R)[:, None] * S + np.arange(S)[None, :]) * A  # flat (r, s, a=0)
    for h in range(H - 1, -1, -1):
        PM = P[:, h] @ M  # [R, S·A, 3]
        pv, pvl = PM[..., 0], PM[..., 2]
        var = np.maximum(PM[..., 1] - pv * pv, 0.0) + r_var[:, h]
        bonus = scale * (np.sqrt(var * iota_inv[:, h]) + (pv - pvl) / H) + lower_order[:, h]
        q_up = np.minimum(r[:, h] + pv + bonus, H - h)
        q_lo = np.maximum(r[:, h] + pvl - bonus, 0.0)
        a = np.argmax(q_up.reshape(R, S, A), axis=-1)
        pi[:, h] = a
        flat = base + a
        M[..., 0] = q_up.reshape(-1)[flat]
        M[..., 1] = M[..., 0] * M[..., 0]
        M[..., 2] = q_lo.reshape(-1)[flat]
    return pi


def unusable_rows(iota: float, scale: float, H: int, S: int) -> RowFilter:
    """Row filter for `consistent_counts`: a row needs post-processing only if its bonus can be
    below H. If C·(H·S·E·ι + H²·S·ι)/ñ⁺ ≥ H with ñ⁺ ≥ ñ, then Γ ≥ H for that (h, s, a) and
    Q̃ = H − h, Q̲ = 0 whatever P̃ and r̃ are, so the plan is the same without projecting it."""

    def rows(upper: FloatArray, E: float) -> npt.NDArray[np.bool_]:
        return scale * (H * S * E * iota + H * H * S * iota) < H * upper

    return rows


def _one_hot(R: int, size: int, index: IntArray, values: FloatArray | float = 1.0) -> FloatArray:
    out = np.zeros(R * size)
    out[(np.arange(R)[:, None] * size + index).ravel()] = np.ravel(values)
    return out.reshape(R, size)


def dp_ucbvi(
    mdp: TabularMDP,
    episodes: int,
    privatizer: Privatizer,
    *,
    rngs: Sequence[np.random.Generator],
    config: UCBVIConfig | None = None,
    progress: Progress | None = None,
    system: str = "dp-ucbvi",
    checkpoint: str | Path | None = None,
    checkpoint_every: float = 300.0,
) -> list[OnlineResult]:
    """Run DP-UCBVI for ``episodes`` episodes, one run per generator in ``rngs`` (vectorised
    over runs). ``privatizer`` is a streaming privatizer with ``len(rngs)`` runs.
    ``checkpoint``: a directory where the loop's state is saved every ``checkpoint_every``
    seconds and from which a run cut off continues, with the same numbers (`online.resume`);
    it is removed when the run finishes."""
    cfg = config or UCBVIConfig()
    if not privatizer.cumulative:
        raise ValueError("DP-UCBVI updates every episode: give a streaming privatizer")
    K = int(episodes)
    if K < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    H, S, A = mdp.H, mdp.S, mdp.A
    R = len(rngs)
    iota = math.log(2.0 * H * S * A * K / cfg.beta)
    P_cdf = np.cumsum(mdp.P, axis=-1)
    P_cdf[..., -1] = 1.0
    d1_cdf = np.cumsum(mdp.d1)
    d1_cdf[-1] = 1.0
    mean_r = np.asarray(mdp.R)
    _, V_star, _ = mdp.backward_induction()
    regret = np.zeros((R, K))
    rows = unusable_rows(iota, cfg.bonus_scale, H, S)
    runs = np.arange(R)
    priv = PrivateCounts(
        np.zeros((R, H, S, A)), np.zeros((R, H, S, A, S)), np.zeros((R, H, S, A)), 0.0
    )
    start, ckpt = 0, None
    pis = np.zeros((1, R, H, S), dtype=np.int64)  # the last block's policies (set below)
    if checkpoint is not None:
        key = fingerprint(system, K, cfg, mdp.P, mdp.R, mdp.d1, privatizer, rngs)
        ckpt = LoopCheckpoint(checkpoint, key, every_s=checkpoint_every)
        if (saved := ckpt.load()) is not None:
            start, (priv, privatizer, rngs), done = saved
            regret[:, :start] = done
            if progress is not None:
                progress(start)
    for b0 in range(start, K, _BLOCK):
        nb = min(_BLOCK, K - b0)
        u = np.stack([g.random((_BLOCK, 1 + 2 * H)) for g in rngs], axis=1)[:nb]  # [nb, R, .]
        pis = np.empty((nb, R, H, S), dtype=np.int64)
        starts = np.empty((nb, R), dtype=np.int64)
        for i in range(nb):
            pi = optimistic_plan(priv, iota, cfg.bonus_scale)
            s = (d1_cdf[None, :] <= u[i, :, :1]).sum(axis=1)
            starts[i] = s
            sa = np.empty((R, H), dtype=np.int64)
            nxt = np.empty((R, H), dtype=np.int64)
            rew = np.empty((R, H))
            for h in range(H):
                a = pi[runs, h, s]
                sa[:, h] = (h * S + s) * A + a
                rew[:, h] = u[i, :, 1 + h] < mean_r[h, s, a]
                s = (P_cdf[h, s, a] <= u[i, :, 1 + H + h][:, None]).sum(axis=1)
                nxt[:, h] = s
            pis[i] = pi
            inc = Counts(
                _one_hot(R, H * S * A, sa).reshape(R, H, S, A),
                _one_hot(R, H * S * A * S, sa * S + nxt).reshape(R, H, S, A, S),
                _one_hot(R, H * S * A, sa, rew).reshape(R, H, S, A),
            )
            priv = privatizer.release(inc, rows=rows)
        values = (
            policy_evaluation(mdp.P, mdp.R, pis.reshape(nb * R, H, S), return_q=False)
            .V[:, 0, :]
            .reshape(nb, R, S)
        )
        v_pi = np.take_along_axis(values, starts[..., None], axis=2)[..., 0]
        regret[:, b0 : b0 + nb] = (V_star[0][starts] - v_pi).T
        if progress is not None:
            progress(nb)
        if ckpt is not None and ckpt.due() and b0 + nb < K:  # a block boundary: exact resume
            ckpt.save(b0 + nb, (priv, privatizer, rngs), regret)
    if ckpt is not None:
        ckpt.clear()
    report = privatizer.report(system=system)
    info = {"config": cfg.constants(), "iota": iota, "privatizer": privatizer.describe()}
    return [
        OnlineResult(system, np.maximum(regret[r], 0.0), report, [], dict(info), policy=pis[-1, r])
        for r in range(R)
    ]


def _run_rngs(
    seeds: Sequence[int], noise: NoiseSource
) -> tuple[list[np.random.Generator], list[np.random.Generator]]:
    """Per run: an environment generator from the run's seed and a privacy-noise generator
    from `noise` (never from the seed)."""
    env = [np.random.default_rng(np.random.SeedSequence(int(seed)).spawn(2)[0]) for seed in seeds]
    return env, [noise.generator(f"dp-ucbvi run {r}") for r in range(len(seeds))]


def ucbvi(
    mdp: TabularMDP,
    episodes: int,
    *,
    seeds: Sequence[int],
    privatizer: str = "none",
    epsilon: float | None = None,
    config: UCBVIConfig | None = None,
    progress: Progress | None = None,
    checkpoint: str | Path | None = None,
    checkpoint_every: float = 300.0,
    noise: NoiseSource | None = None,
) -> list[OnlineResult]:
    """UCB-VI (``privatizer="none"``) or DP-UCBVI with ``"central"`` (ε-JDP) or ``"local"``
    (ε-LDP), one run per seed, vectorised over the seeds (``checkpoint``: see `dp_ucbvi`).
    The seeds drive the users; the privacy noise comes from ``noise`` (default: secure)."""
    cfg = config or UCBVIConfig()
    noise = noise or NoiseSource.secure()
    env_rngs, noise_rngs = _run_rngs(seeds, noise)
    H, S, A = mdp.H, mdp.S, mdp.A
    priv: Privatizer
    if privatizer == "none":
        priv = IdentityPrivatizer(cumulative=True)
        system = "ucbvi"
    elif privatizer in ("central", "local"):
        if epsilon is None:
            raise ValueError(f"the {privatizer} privatizer needs epsilon")
        cls = CentralPrivatizer if privatizer == "central" else LocalPrivatizer
        priv = cls(H, S, A, epsilon=epsilon, episodes=episodes, rngs=noise_rngs, beta=cfg.beta)
        system = f"dp-ucbvi-{privatizer}"
    else:
        raise ValueError(f"privatizer must be 'none', 'central' or 'local', got {privatizer!r}")
    results = dp_ucbvi(
        mdp,
        episodes,
        priv,
        rngs=env_rngs,
        config=cfg,
        progress=progress,
        system=system,
        checkpoint=checkpoint,
        checkpoint_every=checkpoint_every,
    )
    for result in results:
        result.report = noise.certify(result.report)
    return results
