"""Audits of DP-VAPVI, DP-LSW, SDP-PE and DP-SGD: each private system stays below its claimed ε
under its worst-case canary, each non-private twin is caught with few trials, and a
deliberately broken mechanism (noise 10× smaller than the report says) is caught."""

from __future__ import annotations

import math

import numpy
import pytest

from privrl.audit.bounds import epsilon_lower_bound
from privrl.audit.dpsgd import (
    DPSGDAuditSettings,
    audit_dp_sgd,
    audit_dp_sgd_one_run,
    dp_sgd_claimed,
)
from privrl.audit.releases import (
    audit_dp_lsw,
    audit_dp_vapvi,
    audit_sdp_pe,
    calibrate,
    vapvi_claimed,
)
from tests.noise import noise_rng

DELTA = 1e-5
Z_EPS1 = 3.73  # DP-SGD noise multiplier with ε ≈ 1 at δ = 1e-5 (q = 1, N = 1; PLD)


def _bound(result) -> float:
    return epsilon_lower_bound(result.scores, result.labels, result.delta).epsilon


def _vapvi(eps: float | None, trials: int, seed: int = 0, canary: str = "worst"):
    rho = None
    if eps is not None:
        rho = calibrate(lambda r: float(vapvi_claimed(r, DELTA).epsilon), eps)
    return audit_dp_vapvi(rho=rho, delta=DELTA, trials=trials, canary=canary, rng=noise_rng(seed))


def _sgd(z: float | None, trials: int, seed: int = 0, canary: str = "worst", **kw):
    return audit_dp_sgd(
        DPSGDAuditSettings(noise_multiplier=z, delta=DELTA, **kw),
        trials=trials,
        canary=canary,
        rng=noise_rng(seed),
    )


# ---------------------------------------------------------------------------- private: ≤ claim


@pytest.mark.parametrize("eps", [1.0, 4.0])
def test_dp_vapvi_bound_stays_below_claimed_epsilon(eps: float) -> None:
    """Privacy property: DP-VAPVI's 3H vector releases, worst-case replace-one canary (every
    vector moved by its sensitivity), give an empirical ε (95%) ≤ the planned report's ε."""
    r = _vapvi(eps, 100_000)
    assert r.epsilon_claimed <= eps * (1 + 1e-9)
    assert 0.15 * eps < _bound(r) <= r.epsilon_claimed


@pytest.mark.parametrize("eps", [1.0, 8.0])
def test_dp_lsw_bound_stays_below_claimed_epsilon(eps: float) -> None:
    """Privacy property: DP-LSW's released θ (smooth sensitivity, S = m = 1: the bound is
    exact on the canary) has an empirical ε ≤ its (ε, δ)."""
    r = audit_dp_lsw(epsilon=eps, delta=DELTA, trials=100_000, rng=noise_rng(0))
    assert r.epsilon_claimed == eps
    assert _bound(r) <= eps


def test_dp_lsw_worst_canary_exercises_the_data_dependent_noise_scale() -> None:
    """Structural rule: with S ≥ 2 states the worst canary is the only trajectory visiting
    state 0 (counts [0, m] → [1, m − 1]), so its mean return there moves by the whole range
    and the system's smooth noise scale differs between D and D'. The audit then shows more
    than an equal-count canary can (≈ 0 at m = 10) and stays below the claim."""
    from privrl.audit.releases import lsw_neighbours
    from privrl.ope.baselines import dp_lsw

    d0, d1 = lsw_neighbours(2, 10, 1.0, "worst", noise_rng(0))
    assert d0.counts.tolist() == [0, 10] and d1.counts.tolist() == [1, 9]
    assert d1.mean_returns[0] - d0.mean_returns[0] == 1.0
    Phi, w = numpy.eye(2), numpy.full(2, 0.5)
    sigmas = [
        dp_lsw(
            fv, Phi, w, epsilon=4.0, delta=DELTA, return_range=1.0, rng=noise_rng(0)
        ).private_sigma
        for fv in (d0, d1)
    ]
    assert sigmas[1] > sigmas[0]
    kw = {"epsilon": 4.0, "delta": DELTA, "states": 2, "trajectories": 10, "trials": 100_000}
    r = audit_dp_lsw(**kw, rng=noise_rng(0))
    assert r.params["visit_counts"] == {"D": [0.0, 10.0], "D'": [1.0, 9.0]}
    assert 0.1 < _bound(r) <= r.epsilon_claimed


def test_dp_lsl_is_audited_with_the_same_canary_and_its_twin_leaks() -> None:
    """DP-LSL (ridge weights that move with the counts, λ = 2·m^0.4): its own release and
    plan's claim, the rare-state canary; the bound stays below ε = 4 and the non-private LSL
    is told apart in every one of 2000 trials."""
    kw = {"delta": DELTA, "states": 2, "trajectories": 2, "algorithm": "dp-lsl"}
    r = audit_dp_lsw(epsilon=4.0, trials=50_000, **kw, rng=noise_rng(0))
    assert r.system == "dp-lsl" and r.epsilon_claimed == 4.0
    assert r.params["lambda"] == pytest.approx(2.0 * 2**0.4)
    assert _bound(r) <= r.epsilon_claimed
    twin = audit_dp_lsw(epsilon=None, trials=2000, **kw, rng=noise_rng(0))
    assert twin.system == "lsl" and _bound(twin) > 4.0


@pytest.mark.parametrize("eps", [1.0, 8.0])
def test_sdp_pe_bound_stays_below_claimed_epsilon(eps: float) -> None:
    """Privacy property: one SDP-PE batch's shuffle binary-sum counters (2H per family moved by
    the replaced user) have an empirical ε ≤ the privatizer's report."""
    r = audit_sdp_pe(epsilon=eps, delta=DELTA, trials=50_000, rng=noise_rng(0))
    assert r.epsilon_claimed == pytest.approx(eps)
    assert 0.0 < _bound(r) <= r.epsilon_claimed


def test_dp_sgd_bound_stays_below_claimed_epsilon() -> None:
    """Privacy property: the production trainer with a worst-case gradient canary (q = 1,
    N = 1: one Gaussian of sensitivity C) has an empirical ε ≤ its own PLD report's."""
    r = _sgd(Z_EPS1, 20_000)
    assert r.epsilon_claimed == pytest.approx(1.0, abs=0.02)
    assert 0.2 * r.epsilon_claimed <= _bound(r) <= r.epsilon_claimed


@pytest.mark.slow
def test_dp_sgd_bound_stays_below_claimed_epsilon_and_is_tight() -> None:
    """Privacy property: as above with 200,000 trials, and the bound reaches half the claim."""
    r = _sgd(Z_EPS1, 200_000)
    assert r.epsilon_claimed == pytest.approx(1.0, abs=0.02)
    assert 0.5 * r.epsilon_claimed <= _bound(r) <= r.epsilon_claimed


def test_dp_sgd_subsampled_many_steps_stays_below_claimed_epsilon() -> None:
    r = _sgd(2.0, 5_000, rate=0.5, steps=4, canary="random")
    assert _bound(r) <= r.epsilon_claimed


def test_random_canaries_stay_below_claimed_epsilon() -> None:
    rng = noise_rng(3)
    for r in (
        _vapvi(2.0, 20_000, canary="random"),
        audit_dp_lsw(
            epsilon=2.0, states=3, trajectories=4, trials=20_000, canary="random", rng=rng
        ),
        audit_sdp_pe(epsilon=2.0, H=2, trials=20_000, canary="random", rng=rng),
    ):
        assert _bound(r) <= r.epsilon_claimed, r.system


# ---------------------------------------------------------------------------- twins leak


def test_non_private_twins_leak() -> None:
    """Every non-private twin (the same code with the noise off) is told apart in every one of
    2000 trials: bound > 4 (the most 2000 trials show is ≈ 5.4) and a claimed ε = ∞."""
    rng = noise_rng(0)
    twins = [
        _vapvi(None, 2000),
        audit_dp_lsw(epsilon=None, delta=DELTA, trials=2000, rng=rng),
        audit_sdp_pe(epsilon=None, delta=DELTA, trials=2000, rng=rng),
        _sgd(None, 2000),
    ]
    assert [t.system for t in twins] == ["vapvi", "lsw", "pe", "sgd"]
    for t in twins:
        assert math.isinf(t.epsilon_claimed)
        assert _bound(t) > 4.0, t.system


# ---------------------------------------------------------------------------- broken: caught


def test_broken_dp_vapvi_noise_is_caught(broken_gaussian) -> None:
    r = _vapvi(1.0, 20_000)
    assert _bound(r) > r.epsilon_claimed


def test_broken_dp_lsw_noise_is_caught(broken_gaussian) -> None:
    """DP-LSW's smooth-sensitivity calibration (α = 5√(2 ln(2/δ))/ε) is 15–25× more noise than a
    Gaussian of the same (ε, δ) needs, so 10× less noise shows only where the claim is not far
    below the broken release's true ε: at ε = 4, δ = 10⁻² the broken θ has μ ≈ 2.5 (true
    ε ≈ 8.6); at δ = 10⁻⁵ it is caught too, by a thinner margin (4.49 > 4, seed 0)."""
    r = audit_dp_lsw(epsilon=4.0, delta=1e-2, trials=400_000, rng=noise_rng(0))
    assert _bound(r) > r.epsilon_claimed


def test_broken_sdp_pe_noise_is_caught(broken_shuffle) -> None:
    r = audit_sdp_pe(epsilon=1.0, delta=DELTA, trials=50_000, rng=noise_rng(0))
    assert _bound(r) > r.epsilon_claimed


def test_broken_dp_sgd_noise_is_caught(broken_gaussian) -> None:
    r = _sgd(Z_EPS1, 5_000)
    assert _bound(r) > r.epsilon_claimed


def test_broken_dp_sgd_is_caught_in_one_run(broken_gaussian) -> None:
    """One run, 1000 canaries, 100 guesses: DP-SGD drawing 10× less noise than its report
    (claimed ε ≈ 1; each canary then sees a Gaussian of μ ≈ 2.7) is caught by one run."""
    broken = audit_dp_sgd_one_run(
        DPSGDAuditSettings(noise_multiplier=Z_EPS1, delta=DELTA), rng=noise_rng(0), canaries=1000
    )
    assert broken.metrics()["violated"]


# ---------------------------------------------------------------------------- one run


def test_one_run_dp_sgd_bound_is_valid_and_twin_leaks() -> None:
    """Privacy property: the one-run bound (Steinke et al. 2023) of DP-SGD at claimed ε ≈ 1
    stays below it; the trainer's non-private twin (minibatches drawn with replacement, so a
    canary can miss the step) gets ≥ 95 of the 100 guesses right (bound > 2.5)."""
    rng = noise_rng(0)
    private = audit_dp_sgd_one_run(
        DPSGDAuditSettings(noise_multiplier=Z_EPS1, delta=DELTA), rng=rng
    )
    m = private.metrics()
    assert m["mode"] == "one-run" and m["canaries"] == 1000 and m["guesses"] == 100
    assert m["epsilon_lower_bound"] <= m["epsilon_claimed"]
    twin = audit_dp_sgd_one_run(DPSGDAuditSettings(noise_multiplier=None, delta=DELTA), rng=rng)
    assert twin.correct >= 95 and twin.epsilon_lower_bound > 2.5


def test_dp_sgd_audit_runs_the_trainer_and_claims_its_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Structural rule: the audit's run is the production trainer — its clipping call and its
    accountant call are the ones that run: the claim is the trainer's report (its release, at
    the audit's rate), a clip widened inside the trainer moves the scores, and a rate the
    trainer misreports to its accountant moves the claim."""
    import privrl.expert.dpsgd as trainer

    kw = {"z": 2.0, "rate": 0.5, "trials": 400}
    r = _sgd(**kw)
    (release,) = r.report.releases
    assert release.name == "expert-level DP-SGD: clipped per-expert gradient sums"
    assert release.extra["sampling_probability"] == 0.5
    assert r.epsilon_claimed == pytest.approx(
        dp_sgd_claimed(noise_multiplier=2.0, rate=0.5, steps=1, delta=DELTA, params=3).epsilon
    )
    real_clip, real_event = trainer.clipped_grad_sum, trainer.sampled_gaussian_event
    monkeypatch.setattr(
        trainer, "clipped_grad_sum", lambda f, p, b, c, **k: real_clip(f, p, b, 10 * c, **k)
    )

    def gap(result) -> float:  # mean score with the canary minus without: its contribution
        return float(
            result.scores[result.labels == 1].mean() - result.scores[result.labels == 0].mean()
        )

    assert gap(_sgd(**kw)) > 5 * gap(r) > 0
    monkeypatch.setattr(
        trainer,
        "sampled_gaussian_event",
        lambda z, n, *, sampling_probability: real_event(z, n, sampling_probability=0.1),
    )
    assert _sgd(**kw).epsilon_claimed < 0.5 * r.epsilon_claimed


def test_dp_sgd_claim_is_the_systems_pld_report() -> None:
    rep = dp_sgd_claimed(noise_multiplier=Z_EPS1, rate=1.0, steps=1, delta=DELTA, params=3)
    assert rep.private and rep.epsilon == pytest.approx(1.0, abs=0.02)


def test_bad_inputs_are_refused() -> None:
    rng = noise_rng(0)
    with pytest.raises(ValueError, match="rate"):
        _sgd(1.0, 10, rate=0.0)
    with pytest.raises(ValueError, match="guesses"):
        audit_dp_sgd_one_run(
            DPSGDAuditSettings(noise_multiplier=1.0), canaries=10, guesses=11, rng=rng
        )
    with pytest.raises(ValueError, match="S >= 2"):
        audit_sdp_pe(epsilon=1.0, S=1, trials=10, rng=rng)
    with pytest.raises(ValueError, match="canary"):
        audit_dp_lsw(epsilon=1.0, trials=10, canary="best", rng=rng)  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("eps", [1.0, 4.0, 8.0])
def test_dp_sgd_and_gpope_audits_are_tight(eps: float) -> None:
    """Tightness: the worst-case audits of DP-SGD (gradient canary, q = 1, N = 1; 200,000
    trials of the production trainer, about 1 ms each: 4.54 at ε = 8) and GPOPE (m = 1, N = 1;
    10⁶ trials) reach at least half the claimed ε at ε = 1, 4, 8."""
    from privrl.audit.attacks import GPOPEAuditSettings, audit_gpope
    from privrl.audit.dpsgd import dp_sgd_noise_multiplier

    z = dp_sgd_noise_multiplier(eps, DELTA, 1.0, 1)
    for r in (
        _sgd(z, 200_000),
        audit_gpope(
            GPOPEAuditSettings(epsilon=eps, delta=DELTA), trials=1_000_000, rng=noise_rng(0)
        ),
    ):
        assert 0.5 * r.epsilon_claimed <= _bound(r) <= r.epsilon_claimed, r.system
