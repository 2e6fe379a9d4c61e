"""Privatizers: the Assumption (|ñ − n| ≤ E, ñ(s,a) ≥ n(s,a), consistency, ñ(s,a,s') > 0)
holds empirically w.p. ≥ 1 − β; the post-shift never underestimates; LDP / central scales; the
reports state the model and the budget."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privrl.online.common import Counts, make_env, rollout_counts
from privrl.online.privatizers import (
    CentralPrivatizer,
    IdentityPrivatizer,
    LocalPrivatizer,
    PrivateCounts,
    ShufflePrivatizer,
    consistent_counts,
)
from privrl.privacy.tree import tree_levels
from tests.noise import noise_rng

H, S, A = 3, 3, 2


def batch_counts(n: int, seed: int = 0) -> Counts:
    mdp = make_env("random-tabular", states=S, actions=A, horizon=H, seed=seed)
    rng = noise_rng(seed)
    policies = rng.integers(0, A, size=(4, H, S))
    counts, _ = rollout_counts(mdp, policies, rng.integers(0, 4, size=n), rng)
    return counts


def assumption_holds(priv: PrivateCounts, truth: Counts, *, tol: float = 1e-9) -> bool:
    E = priv.E
    ok = np.all(np.abs(priv.n_sa - truth.n_sa) <= E + tol)
    ok &= np.all(np.abs(priv.n_sas - truth.n_sas) <= E + tol)
    ok &= np.all(np.abs(priv.r_sum - truth.r_sum) <= E + tol)
    ok &= np.all(priv.n_sa >= truth.n_sa - tol)
    ok &= np.all(priv.n_sas > 0)
    ok &= np.allclose(priv.n_sas.sum(axis=-1), priv.n_sa)
    return bool(ok)


@pytest.mark.parametrize("mode", ["tight", "theory"])
def test_shuffle_error_bound_holds_with_probability_one_minus_beta(mode: str) -> None:
    """Property: over repeated releases, the Assumption fails in at most a β fraction."""
    truth = batch_counts(300)
    beta, reps = 0.2, 120
    priv = ShufflePrivatizer(
        H, S, A, epsilon=2.0, delta=1e-5, rng=noise_rng(1), calibration=mode, beta=beta
    )  # type: ignore[arg-type]
    fails = sum(not assumption_holds(priv.release(truth, n_users=300), truth) for _ in range(reps))
    assert fails / reps <= beta
    cal = priv.calibration(300)
    assert cal.epsilon == pytest.approx(2.0 / (6 * H)) and cal.delta == pytest.approx(
        1e-5 / (6 * H)
    )


def test_shuffle_layer_release_and_report() -> None:
    """A crude batch releases layer h only (no rewards); the report is one batch's releases:
    3 families × 2H counters at (ε/(6H), δ_exact) ⇒ ε ≤ target at δ."""
    truth = batch_counts(400)
    priv = ShufflePrivatizer(H, S, A, epsilon=1.0, delta=1e-5, rng=noise_rng(2))
    out = priv.release(truth, n_users=400, layers=[1], rewards=False)
    assert np.all(out.n_sa[[0, 2]] == 0) and np.all(out.r_sum == 0) and np.any(out.n_sa[1] > 0)
    priv.release(truth, n_users=400)
    report = priv.report(system="sdp-pe")
    assert report.model == "shuffle" and report.delta == 1e-5
    assert report.epsilon <= 1.0 + 1e-9
    assert report.unit.value == "user" and report.relation.value == "replace_one"
    assert len(report.releases) == 3
    for rel in report.releases:
        assert rel.event.count == 2 * H  # type: ignore[union-attr]
        assert rel.extra["calibration"] == "tight"
        assert rel.noise["epsilon_counter"] == pytest.approx(1.0 / (6 * H))
    assert len(report.releases[0].extra["batches"]) == 2


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    E=st.floats(0.5, 200.0),
    scale=st.floats(0.0, 50.0),
)
def test_post_shift_never_underestimates(seed: int, E: float, scale: float) -> None:
    """Property: whatever the raw noise (adversarial, |noise| ≤ E/4 per counter), the
    projected-and-shifted counts satisfy the Assumption with E."""
    rng = noise_rng(seed)
    n_sas = np.floor(rng.random((5, 4)) * scale) * (rng.random((5, 4)) < 0.7)
    n_sa = n_sas.sum(axis=-1)
    raw_sas = n_sas + rng.uniform(-E / 4, E / 4, size=n_sas.shape)
    raw_sa = n_sa + rng.choice([-E / 4, E / 4], size=n_sa.shape) * rng.random(n_sa.shape)
    out_sa, out_sas = consistent_counts(raw_sa, raw_sas, E)
    tol = 1e-7 * (1 + E + scale)
    assert np.all(out_sa >= n_sa - tol)
    assert np.all(np.abs(out_sa - n_sa) <= E + tol)
    assert np.all(np.abs(out_sas - n_sas) <= E + tol)
    assert np.all(out_sas > 0)
    np.testing.assert_allclose(out_sas.sum(axis=-1), out_sa, atol=tol)


def test_row_filter_keeps_filtered_rows_consistent_and_above_truth() -> None:
    rng = noise_rng(0)
    n_sas = rng.integers(0, 30, size=(6, 3)).astype(float)
    n_sa = n_sas.sum(-1)
    E = 20.0
    raw_sas = n_sas + rng.uniform(-5, 5, size=n_sas.shape)
    raw_sa = n_sa + rng.uniform(-5, 5, size=n_sa.shape)
    full_sa, full_sas = consistent_counts(raw_sa, raw_sas, E)
    mask = np.array([True, False, True, False, True, False])
    part_sa, part_sas = consistent_counts(raw_sa, raw_sas, E, rows=lambda up, e: mask)
    np.testing.assert_allclose(part_sa[mask], full_sa[mask])
    np.testing.assert_allclose(part_sas[mask], full_sas[mask])
    assert np.all(part_sa >= full_sa - 1e-9)
    assert np.all(part_sa >= n_sa) and np.allclose(part_sas.sum(-1), part_sa)


def episode_stream(T: int, runs: int, seed: int = 0) -> list[Counts]:
    mdp = make_env("random-tabular", states=S, actions=A, horizon=H, seed=seed)
    rng = noise_rng(seed)
    out = []
    for _ in range(T):
        per_run = [
            rollout_counts(mdp, rng.integers(0, A, size=(1, H, S)), np.zeros(1, int), rng)[0]
            for _ in range(runs)
        ]
        out.append(
            Counts(
                *(np.stack([getattr(c, f) for c in per_run]) for f in ("n_sa", "n_sas", "r_sum"))
            )
        )
    return out


@pytest.mark.parametrize("cls", [CentralPrivatizer, LocalPrivatizer])
def test_streaming_privatizers_error_bound_and_report(cls: type) -> None:
    """Property: the running private counts satisfy the Assumption at every step (β = 0.05
    union bound); the report is pure ε-DP in the right model, ε/3 per family."""
    T, runs = 60, 3
    stream = episode_stream(T, runs)
    rngs = [noise_rng(10 + r) for r in range(runs)]
    priv = cls(H, S, A, epsilon=1.0, episodes=T, rngs=rngs, beta=0.05)
    total = None
    for inc in stream:
        total = inc if total is None else total + inc
        out = priv.release(inc)
        assert assumption_holds(out, total)
    report = priv.report(system="dp-ucbvi")
    assert report.epsilon == pytest.approx(1.0) and report.delta == 0.0
    assert report.model == ("central" if cls is CentralPrivatizer else "local")
    assert [r.event.epsilon for r in report.releases] == pytest.approx([1 / 3] * 3)  # type: ignore[union-attr]


def test_local_and_central_noise_scales() -> None:
    """LDP: each user's indicators get Laplace(2H/(ε/3)) = Laplace(6H/ε); central: tree nodes
    get Laplace(L·6H/ε), L = ⌊log₂ K⌋ + 1."""
    rngs = [noise_rng(0)]
    local = LocalPrivatizer(H, S, A, epsilon=2.0, episodes=100, rngs=rngs)
    assert local.scale == pytest.approx(6 * H / 2.0)
    central = CentralPrivatizer(H, S, A, epsilon=2.0, episodes=100, rngs=rngs)
    assert central.tree.scale == pytest.approx(tree_levels(100) * 6 * H / 2.0)
    zero = Counts.zeros(H, S, A, (1,))
    first = local.release(zero)  # one user's message noise: Laplace(6H/ε) on every counter
    assert first.e_raw == pytest.approx(local.scale * math.log(local.beta_counter**-1))


def test_identity_privatizer() -> None:
    truth = batch_counts(50)
    out = IdentityPrivatizer().release(truth)
    assert out.E == 0 and np.array_equal(out.n_sas, truth.n_sas)
    cum = IdentityPrivatizer(cumulative=True)
    cum.release(truth)
    assert np.array_equal(cum.release(truth).n_sa, 2 * truth.n_sa)
    assert not cum.report(system="pe").private


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda: ShufflePrivatizer(H, S, A, epsilon=0.0, delta=1e-5, rng=_rng()), "epsilon"),
        (lambda: ShufflePrivatizer(H, S, A, epsilon=1.0, delta=1.0, rng=_rng()), "delta"),
        (lambda: ShufflePrivatizer(H, S, A, epsilon=1.0, delta=1e-5, rng=_rng(), beta=1), "beta"),
        (lambda: CentralPrivatizer(H, S, A, epsilon=math.inf, episodes=2, rngs=[_rng()]), "eps"),
        (lambda: LocalPrivatizer(H, S, A, epsilon=1.0, episodes=2, rngs=[_rng()], beta=0), "beta"),
    ],
)
def test_every_privatizer_refuses_a_budget_outside_its_range(make: Any, problem: str) -> None:
    """Noise scale: ε finite and > 0, δ (shuffle) and β in (0, 1), checked before any noise
    is calibrated, by every privatizer alike."""
    with pytest.raises(ValueError, match=f"^{problem}"):
        make()


def _rng() -> np.random.Generator:
    return noise_rng(0)
