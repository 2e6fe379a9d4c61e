"""Per-decision importance sampling (privrl.ope.pdis): hand-computed PDIS and WPDIS on tiny
episodes, the sensitivity of both released sums against worst-case replace-one neighbours
(longer than H, rewards far outside the range, tiny propensities) and its tightness, the
chunked computation, unbiasedness and the variance gain over trajectory IPS on a 30-step
random MDP, the noise scale, the coverage of the private interval, and the objects and
commands (`PDIS`, `WPDIS`, `privrl ope pdis|wpdis`)."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from gymnasium import spaces

from privrl.cli.main import main
from privrl.data.io import save_hdf5
from privrl.envs.tabular import TabularMDP
from privrl.ope import PDIS, WPDIS, PDISConfig, WPDISConfig, pdis
from privrl.ope import importance as imp
from privrl.ope.targets import as_target_policy
from privrl.privacy.report import PrivacyReport
from tests.noise import noise_rng
from tests.ope.test_importance import UNIFORM, episodes

S, A = 3, 3


# ------------------------------------------------------------------------ hand-computed values


def test_two_episodes_by_hand() -> None:
    """Uniform target (π = 1/3). Episode 1: propensities 1/2, 1/6, rewards 1, 1 → cumulative
    weights 2/3, 4/3 → P = 2/3 + γ·4/3; episode 2: one step, propensity 1/3, reward 0.5 →
    P = 0.5. W = 10, γ = 0.5: PDIS = (4/3 + 0.5)/2; the trajectory weights are 4/3 and 1, so
    WPDIS = (4/3 + 0.5)/(7/3), while trajectory IPS = (4/3·1.5 + 0.5)/2."""
    d = episodes([([0, 1, 2], [0, 1], [1.0, 1.0], [0.5, 1 / 6]), ([1, 2], [2], [0.5], [1 / 3])])
    b = imp.Bounds(10.0, (0.0, 1.0), 2, 0.5)
    t = pdis.terms(d, UNIFORM, b)
    np.testing.assert_allclose(t.per_decision, [2 / 3 + 0.5 * 4 / 3, 0.5])
    np.testing.assert_allclose(t.weights, [4 / 3, 1.0])
    np.testing.assert_allclose(t.returns, [1.5, 0.5])
    assert pdis.pdis(t, b).value == pytest.approx((4 / 3 + 0.5) / 2)
    assert pdis.wpdis(t, b).value == pytest.approx((4 / 3 + 0.5) / (7 / 3))
    assert imp.ips(imp.terms(d, UNIFORM, b), b).value == pytest.approx((4 / 3 * 1.5 + 0.5) / 2)


def test_the_clip_applies_to_each_cumulative_weight() -> None:
    """Propensities 1/6 at every step: cumulative weights 2, 4, 8 clipped at W = 5 give
    2, 4, 5 (not the per-step ratios 2, 2, 2 clipped); rewards past H = 3 are dropped."""
    d = episodes([([0] * 5, [0] * 4, [1.0] * 4, [1 / 6] * 4)])
    b = imp.Bounds(5.0, (0.0, 1.0), 3, 1.0)
    t = pdis.terms(d, UNIFORM, b)
    assert t.per_decision[0] == pytest.approx(2 + 4 + 5)
    assert t.weights[0] == pytest.approx(5.0)


def test_a_zero_probability_action_ends_the_weight() -> None:
    """π(a) = 0 at step 1: the weight is 0 from there on (log-space −∞ stays finite-safe),
    and the other episodes are unaffected."""
    pi = np.array([[0.5, 0.5, 0.0]] * S)
    target = as_target_policy(pi, spaces.Discrete(A), spaces.Discrete(S), horizon=3)
    d = episodes(
        [([0, 1, 2, 0], [0, 2, 0], [1.0, 1.0, 1.0], [0.5] * 3), ([0, 1], [1], [1.0], [0.25])]
    )
    b = imp.Bounds(10.0, (0.0, 1.0), 3, 1.0)
    t = pdis.terms(d, target, b)
    np.testing.assert_allclose(t.per_decision, [1.0, 2.0])
    np.testing.assert_allclose(t.weights, [0.0, 2.0])


def test_chunks_give_the_same_terms(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cumulative-weight table is built in chunks of trajectories; a chunk of 1 row (a
    tiny CHUNK_CELLS) gives exactly the terms of one chunk for all."""
    mdp = TabularMDP.random(4, 3, 6, seed=0)
    data = mdp.sample(np.full((6, 4, 3), 1 / 3), 50, rng=np.random.default_rng(1))
    policy = imp.load_target_policy("uniform", spaces.Discrete(3), spaces.Discrete(4))
    b = imp.Bounds(3.0, (0.0, 1.0), 6, 0.9)
    whole = pdis.terms(data, policy, b)
    monkeypatch.setattr(pdis, "CHUNK_CELLS", 6)
    chunked = pdis.terms(data, policy, b)
    np.testing.assert_array_equal(whole.per_decision, chunked.per_decision)
    np.testing.assert_array_equal(whole.weights, chunked.weights)


# ------------------------------------------------------------------------ sensitivity


def _sums(d, b: imp.Bounds) -> np.ndarray:
    t = pdis.terms(d, UNIFORM, b)
    return np.array([np.sum(t.per_decision), np.sum(t.weights)])


def test_every_sum_moves_by_at_most_its_sensitivity() -> None:
    """Property: for D (6 episodes of 1-3 steps) and every replace-one neighbour D′ whose
    first episode is swapped for an extreme one — 1 to 8 steps (longer than H = 3), rewards
    from −10⁶ to 10⁶ against the declared [−1, 2], propensities 1e-9 or 1, any action —
    |S(D) − S(D′)| ≤ Δ for the PDIS sum (W (R_hi − R_lo)) and the WPDIS denominator (W);
    and some neighbour attains each Δ (the bound is tight, not just safe)."""
    b = imp.Bounds(4.0, (-1.0, 2.0), 3, 0.9)
    rng = noise_rng(0)
    base = []
    for _ in range(6):
        T = int(rng.integers(1, 4))
        base.append(
            (
                list(rng.integers(0, S, T + 1)),
                list(rng.integers(0, A, T)),
                list(rng.uniform(-1, 2, T)),
                list(rng.uniform(0.2, 1.0, T)),
            )
        )
    s0 = _sums(episodes(base), b)
    delta = np.array([imp.ips_sensitivity(b), imp.snips_sensitivities(b)[1]])
    lo, hi = b.return_range
    assert delta[0] == pytest.approx(b.weight_clip * (hi - lo)) and delta[1] == b.weight_clip
    assert [r.sensitivity for r in imp.planned_releases("wpdis", b, _noise("wpdis"))] == list(delta)
    worst = np.zeros(2)
    for T, a, r, p in itertools.product([1, 3, 8], range(A), [-1e6, -1.0, 2.0, 1e6], [1e-9, 1.0]):
        ep = ([a % S] * (T + 1), [a] * T, [r] * T, [p] * T)
        s1 = _sums(episodes([ep, *base[1:]]), b)
        worst = np.maximum(worst, np.abs(s1 - s0))
    assert np.all(worst <= delta + 1e-9), (worst, delta)
    # tightness: two neighbours of each other whose sums differ by exactly Δ
    top = ([0] * 4, [0] * 3, [1e6] * 3, [1e-9] * 3)  # every weight clipped at W, rewards r_max
    bottom = ([0] * 4, [0] * 3, [-1e6] * 3, [1e-9] * 3)
    gap = _sums(episodes([top, *base[1:]]), b) - _sums(episodes([bottom, *base[1:]]), b)
    assert gap[0] == pytest.approx(delta[0])
    small = ([0] * 9, [0] * 8, [0.0] * 8, [1.0] * 8)  # weight (1/3)^3 at H = 3: near 0
    far = _sums(episodes([top, *base[1:]]), b) - _sums(episodes([small, *base[1:]]), b)
    assert far[1] == pytest.approx(b.weight_clip - 1 / 27)


def _noise(estimator: str, eps: float = 1.0, mechanism: str = "gaussian") -> imp.NoiseSpec:
    return imp.noise_spec(estimator, mechanism, eps, 1e-5)  # type: ignore[arg-type]


@pytest.mark.parametrize("estimator", ["pdis", "wpdis"])
def test_noise_scale_and_accounting(estimator: str) -> None:
    """σ = z·Δ for each Gaussian release (z calibrated over the estimator's releases), the
    composed releases meet (ε, δ) under replace-one, Laplace b = Δ/ε_each with ε_each ≤ ε/k."""
    b = imp.Bounds(10.0, (0.0, 1.0), 30, 0.95)
    noise = _noise(estimator)
    releases = imp.planned_releases(estimator, b, noise)
    assert len(releases) == imp.N_RELEASES[estimator] == (1 if estimator == "pdis" else 2)
    for r in releases:
        assert r.noise["sigma"] == pytest.approx(noise.noise_multiplier * r.sensitivity)
    report = PrivacyReport.build(imp.UNIT, imp.RELATION, releases, 1e-5, system=estimator)
    assert 0.99 <= report.epsilon <= 1.0 + 1e-9
    lap = _noise(estimator, mechanism="laplace")
    for r in imp.planned_releases(estimator, b, lap):
        assert r.noise["scale"] == pytest.approx(r.sensitivity / lap.epsilon_each)
        assert lap.epsilon_each <= 1.0 / len(releases)


def test_the_noise_drawn_has_the_stated_scale() -> None:
    """3000 private PDIS releases on one log: the std of m·value − S is σ = z·Δ within 6%."""
    d = episodes([([0, 1, 2], [0, 1], [1.0, 1.0], [0.5, 1 / 6]), ([1, 2], [2], [0.5], [1 / 3])])
    b = imp.Bounds(10.0, (0.0, 1.0), 2, 0.5)
    t = pdis.terms(d, UNIFORM, b)
    noise, rng = _noise("pdis"), noise_rng(2)
    s = float(np.sum(t.per_decision))
    draws = np.array([pdis.pdis(t, b, noise=noise, rng=rng).value * t.m - s for _ in range(3000)])
    assert np.std(draws) == pytest.approx(noise.noise_multiplier * imp.ips_sensitivity(b), rel=0.06)


# ------------------------------------------------------------------------ statistics

H_LONG = 30


def long_horizon(m: int, seed: int) -> tuple[object, np.ndarray, float]:
    """A 30-step random MDP (S = 5, A = 3, rewards in [0, 1]); behaviour 0.8·π + 0.2·uniform
    for a near-deterministic target π, logged with its propensities; (data, π, true value)."""
    mdp = TabularMDP.random(5, 3, H_LONG, seed=3, stationary=True)
    greedy = np.random.default_rng(4).integers(0, 3, 5)
    pi = np.full((5, 3), 0.05)
    pi[np.arange(5), greedy] = 0.9
    mu = 0.8 * pi + 0.2 / 3
    data = mdp.sample(np.broadcast_to(mu, (H_LONG, 5, 3)), m, rng=np.random.default_rng(seed))
    truth = float(mdp.value(np.broadcast_to(pi, (H_LONG, 5, 3))))
    return data, pi, truth


def test_pdis_is_unbiased_and_beats_trajectory_ips_on_30_steps() -> None:
    """Non-private, W above every weight reached (no clipping): PDIS is within 4 standard
    errors of the exact value, and its summands' std is far below trajectory IPS's (the
    per-decision weights only carry the ratios of the decisions before each reward)."""
    data, pi, truth = long_horizon(4000, 5)
    policy = as_target_policy(pi, spaces.Discrete(3), spaces.Discrete(5), horizon=H_LONG)
    b = imp.Bounds(1e6, (0.0, 1.0), H_LONG, 1.0)  # above every weight (at most 57)
    t = pdis.terms(data, policy, b)
    ti = imp.terms(data, policy, b)
    se = np.std(t.per_decision) / math.sqrt(t.m)
    assert abs(pdis.pdis(t, b).value - truth) < 4 * se
    assert np.std(t.per_decision) < 0.5 * np.std(ti.weights * ti.returns)


@pytest.mark.parametrize("estimator", ["pdis", "wpdis"])
def test_private_interval_covers_the_truth(estimator: str) -> None:
    """Coverage on the 30-step MDP at ε = 1 with W = 20 (clipping bias small for PDIS):
    over 30 logs of 3000 episodes the auto interval holds the exact value ≥ 27 times."""
    b = imp.Bounds(20.0, (0.0, 1.0), H_LONG, 1.0)
    noise, rng = _noise(estimator), noise_rng(9)
    covered = 0
    for seed in range(30):
        data, pi, truth = long_horizon(3000, 100 + seed)
        policy = as_target_policy(pi, spaces.Discrete(3), spaces.Discrete(5), horizon=H_LONG)
        t = pdis.terms(data, policy, b)
        est = getattr(pdis, estimator)(t, b, noise=noise, rng=rng, interval="auto")
        assert est.interval_method == "bhatia-davis"
        covered += est.ci_low <= truth <= est.ci_high
    assert covered >= 27, covered


# ------------------------------------------------------------------------ objects and commands


@pytest.fixture(scope="module")
def long_file(tmp_path_factory: pytest.TempPathFactory):
    data, pi, truth = long_horizon(2000, 7)
    root = tmp_path_factory.mktemp("pdis")
    np.save(root / "pi.npy", pi)
    return save_hdf5(data, root / "episodes.h5"), root / "pi.npy", data, pi, truth


@pytest.mark.parametrize("cls", [PDIS, WPDIS])
def test_objects_and_their_non_private_reference(cls, long_file) -> None:
    """`PDIS(PDISConfig(...)).estimate` releases one sum (WPDIS two) at the target ε with the
    public parameters listed; its non-private reference reports ε = ∞ with the same value as
    the bare estimator, and the private value is near it at ε = 5."""
    _, _, data, pi, truth = long_file
    settings = dict(weight_clip=20.0, reward_range=(0.0, 1.0), max_horizon=H_LONG)
    config = PDISConfig if cls is PDIS else WPDISConfig
    est = cls(config(epsilon=5.0, **settings)).estimate(data, pi)
    assert len(est.report.releases) == (1 if cls is PDIS else 2)
    assert est.report.epsilon <= 5.0 + 1e-9 and est.metrics["private"] is True
    names = {p["name"] for p in est.report.public_parameters}
    assert {"weight clip W", "horizon H", "reward range", "trajectories m"} <= names
    ref = cls(config(non_private=True, **settings)).estimate(data, pi)
    assert ref.report.private is False and math.isinf(ref.report.epsilon)
    assert ref.report.releases == [] and ref.metrics["private"] is False
    bare = cls(config(epsilon=1.0, **settings)).non_private(data, pi)
    assert ref.value == bare.value and ref.interval == (bare.ci_low, bare.ci_high)
    assert abs(est.value - ref.value) < 2.0  # noise std z·Δ/m ≈ 1.2·600/2000 at ε = 5
    assert ref.interval[0] <= truth <= ref.interval[1]


@pytest.mark.parametrize("command", ["pdis", "wpdis"])
def test_the_command_writes_value_interval_and_method(command, long_file, tmp_path, capsys):
    """`privrl ope pdis|wpdis` runs on the 30-step episodes: metrics.json holds the value, its
    interval inside the return range [0, 30], interval_method and private; the console says
    which interval was used."""
    path, pi_file, *_ = long_file
    out = tmp_path / "run"
    argv = [
        "ope", command, "--data", str(path), "--target-policy", str(pi_file),
        "--reward-range", "0,1", "--weight-clip", "20", "--max-horizon", str(H_LONG),
        "--epsilon", "1", "--out", str(out),
    ]  # fmt: skip
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    metrics = json.loads((out / "metrics.json").read_text())
    assert 0.0 <= metrics["value_ci_low"] <= metrics["value_ci_high"] <= float(H_LONG)
    assert metrics["interval_method"] == "bhatia-davis" and metrics["private"] is True
    assert f"{command.upper()} value of" in captured.out
    assert "interval: bhatia-davis (auto:" in captured.out


def test_an_interval_outside_the_return_range_is_never_empty() -> None:
    """WPDIS's ratio is not a weighted average of returns (a per-decision weight can exceed
    the trajectory's), so its interval may lie wholly above the return range [0, 30]; IPS's
    too under large noise. The interval then becomes the range's nearest end (low ≤ high),
    never an empty [30, < 30]."""
    b = imp.Bounds(20.0, (0.0, 1.0), 30, 1.0)
    m = 10_000
    t = imp.Terms(weights=np.full(m, 0.5), returns=np.full(m, 30.0), per_decision=np.full(m, 20.0))
    est = pdis.wpdis(t, b, interval="bhatia-davis")  # the ratio's box: about [35, 47]
    assert (est.value, est.ci_low, est.ci_high) == (30.0, 30.0, 30.0)
    est = pdis.wpdis(t, b, interval="popoviciu")  # a wider box, partly inside the range
    assert 0.0 < est.ci_low <= est.ci_high == 30.0
    big = imp.Terms(weights=np.full(m, 20.0), returns=np.full(m, 30.0))
    est = imp.ips(big, b)  # mean 600: the whole interval above the range
    assert est.ci_low == est.ci_high == 30.0 and est.value == pytest.approx(600.0)
