"""UCB-VI / DP-UCBVI: the optimistic planner, the exact row-filter shortcut, vectorised runs
equal single runs, a run cut off resumes to the same numbers, and the privacy reports of the
three privatizers."""

from __future__ import annotations

import numpy as np
import pytest

from privrl.envs.riverswim import riverswim
from privrl.online.common import make_env
from privrl.online.privatizers import PrivateCounts, consistent_counts
from privrl.online.ucbvi import UCBVIConfig, optimistic_plan, ucbvi, unusable_rows
from tests.noise import noise_rng, noise_source


def test_plan_with_exact_model_and_huge_counts_is_optimal() -> None:
    """With counts n·P (n → ∞) the bonus vanishes and the plan is π* (backward induction)."""
    mdp = make_env("random-tabular", states=4, actions=3, horizon=4, seed=2)
    n = 1e14
    priv = PrivateCounts(np.full((1, 4, 4, 3), n), (n * mdp.P)[None], (n * mdp.R)[None], 0.0)
    pi = optimistic_plan(priv, iota=5.0, scale=1.0)
    Q, _, pi_star = mdp.backward_induction()
    top = np.sort(Q, axis=-1)
    clear = top[..., -1] - top[..., -2] > 1e-6  # no near-ties
    assert np.array_equal(pi[0][clear], pi_star[clear])


def test_no_data_caps_every_value_and_picks_action_zero() -> None:
    zero = PrivateCounts(
        np.zeros((2, 3, 2, 2)), np.zeros((2, 3, 2, 2, 2)), np.zeros((2, 3, 2, 2)), 0.0
    )
    assert np.all(optimistic_plan(zero, iota=3.0, scale=1.0) == 0)


def test_row_filter_gives_the_same_plan_as_full_projection() -> None:
    """Rows skipped by `unusable_rows` have Γ ≥ H, so the plan is unchanged (exact shortcut)."""
    rng = noise_rng(0)
    R, H, S, A = 4, 4, 3, 2
    n_sas = rng.integers(0, 4000, size=(R, H, S, A, S)) * (rng.random((R, H, S, A, 1)) < 0.5)
    n_sa = n_sas.sum(-1)
    r_sum = rng.random((R, H, S, A)) * n_sa
    E, iota = 300.0, 6.0
    raw_sas = n_sas + rng.uniform(-E / 4, E / 4, size=n_sas.shape)
    raw_sa = n_sa + rng.uniform(-E / 4, E / 4, size=n_sa.shape)
    rows = unusable_rows(iota, 0.3, H, S)
    full = consistent_counts(raw_sa, raw_sas, E)
    lazy = consistent_counts(raw_sa, raw_sas, E, rows)
    mask = rows(np.maximum(raw_sa, 0) + 0.75 * E, E)
    assert mask.any() and not mask.all()
    a = optimistic_plan(PrivateCounts(full[0], full[1], r_sum, E), iota, 0.3)
    b = optimistic_plan(PrivateCounts(lazy[0], lazy[1], r_sum, E), iota, 0.3)
    assert np.array_equal(a, b)


@pytest.mark.parametrize("privatizer", ["none", "central", "local"])
def test_vectorised_runs_equal_single_runs(privatizer: str) -> None:
    mdp = riverswim(4, 3)
    eps = None if privatizer == "none" else 5.0
    group = ucbvi(
        mdp, 1500, seeds=[3, 8], noise=noise_source([3, 8]), privatizer=privatizer, epsilon=eps
    )
    alone = ucbvi(mdp, 1500, seeds=[8], noise=noise_source([8]), privatizer=privatizer, epsilon=eps)
    np.testing.assert_allclose(group[1].regret, alone[0].regret)
    assert group[0].regret.shape == (1500,) and np.all(group[0].regret >= 0)


class _CutOff(Exception):
    """Stands for a killed process."""


def _killed_after(blocks: int):
    """A progress callback that kills the run once `blocks` blocks of 1024 episodes are done
    (before the last of them is saved)."""
    seen: list[int] = []

    def progress(n: int) -> None:
        seen.append(n)
        if sum(seen) >= blocks * 1024:
            raise _CutOff

    return progress


@pytest.mark.parametrize("privatizer", ["none", "central", "local"])
def test_a_run_cut_off_continues_from_its_checkpoint_to_the_same_numbers(
    tmp_path, privatizer: str
) -> None:
    """Killed in its third block (state saved after each block), rerun with the same
    checkpoint: it continues at episode 2048 (the last save) and ends with exactly the regret
    and report of an uninterrupted run; the finished run removes its checkpoint. C = 0.03,
    ε = 100 leave the all-left burn-in inside the run, so the resumed part plans from counts."""
    mdp = riverswim(3, 4)
    K = 3 * 1024 + 100  # whole blocks and a partial last one
    eps = None if privatizer == "none" else 100.0
    kw = {"seeds": [0, 1], "privatizer": privatizer, "epsilon": eps, "config": UCBVIConfig(0.03)}
    ckpt = tmp_path / "ckpt"
    with pytest.raises(_CutOff):
        ucbvi(
            mdp, K, progress=_killed_after(3), checkpoint=ckpt, checkpoint_every=0,
            noise=noise_source([0, 1]), **kw,
        )  # fmt: skip
    assert (ckpt / "state.pkl").is_file()
    done: list[int] = []
    resumed = ucbvi(
        mdp, K, progress=done.append, checkpoint=ckpt, checkpoint_every=0,
        noise=noise_source([0, 1]), **kw,
    )  # fmt: skip
    assert done[0] == 2 * 1024 and sum(done) == K
    whole = ucbvi(mdp, K, noise=noise_source([0, 1]), **kw)
    for a, b in zip(whole, resumed, strict=True):
        np.testing.assert_array_equal(a.regret, b.regret)
        reports = [{**r.report.to_dict(), "created": None} for r in (a, b)]
        assert reports[0] == reports[1]
    assert any(np.any(r.regret[2048:] != r.regret[0]) for r in whole)  # resumed part planned
    assert not ckpt.exists()


def test_a_checkpoint_of_another_run_is_not_used(tmp_path) -> None:
    """Other seeds (another fingerprint) start over from episode 0 and give their own
    uninterrupted numbers; a truncated state file is discarded the same way."""
    mdp = riverswim(3, 4)
    kw = {"privatizer": "central", "epsilon": 100.0, "config": UCBVIConfig(0.03)}
    ckpt = tmp_path / "ckpt"
    K = 2 * 1024 + 10
    with pytest.raises(_CutOff):
        ucbvi(
            mdp,
            K,
            seeds=[0],
            noise=noise_source([0]),
            progress=_killed_after(2),
            checkpoint=ckpt,
            checkpoint_every=0,
            **kw,
        )
    assert (ckpt / "state.pkl").is_file()
    done: list[int] = []
    other = ucbvi(
        mdp, K, seeds=[5], noise=noise_source([5]), progress=done.append, checkpoint=ckpt, **kw
    )
    assert done[0] == 1024  # no resume
    np.testing.assert_array_equal(
        other[0].regret, ucbvi(mdp, K, seeds=[5], noise=noise_source([5]), **kw)[0].regret
    )
    assert not ckpt.exists()
    with pytest.raises(_CutOff):
        ucbvi(
            mdp,
            K,
            seeds=[0],
            noise=noise_source([0]),
            progress=_killed_after(2),
            checkpoint=ckpt,
            checkpoint_every=0,
            **kw,
        )
    state = ckpt / "state.pkl"
    state.write_bytes(state.read_bytes()[:50])
    done.clear()
    ucbvi(mdp, K, seeds=[0], noise=noise_source([0]), progress=done.append, checkpoint=ckpt, **kw)
    assert done[0] == 1024


def test_ucbvi_learns_and_reports() -> None:
    """Non-private UCB-VI on a short RiverSwim (H = 3) stops paying regret; reports are
    non-private / ε-JDP (central) / ε-LDP (local)."""
    mdp = riverswim(3, 3)
    res = ucbvi(mdp, 6000, seeds=[0], noise=noise_source([0]))[0]
    assert res.regret[-1000:].mean() < 0.25 * res.regret[:1000].mean()
    assert not res.report.private
    jdp = ucbvi(mdp, 50, seeds=[0], noise=noise_source([0]), privatizer="central", epsilon=2.0)[
        0
    ].report
    ldp = ucbvi(mdp, 50, seeds=[0], noise=noise_source([0]), privatizer="local", epsilon=2.0)[
        0
    ].report
    assert (jdp.model, ldp.model) == ("central", "local")
    assert jdp.epsilon == pytest.approx(2.0) and ldp.epsilon == pytest.approx(2.0)
    with pytest.raises(ValueError, match="epsilon"):
        ucbvi(mdp, 10, seeds=[0], noise=noise_source([0]), privatizer="central")
    with pytest.raises(ValueError, match="privatizer"):
        ucbvi(mdp, 10, seeds=[0], noise=noise_source([0]), privatizer="shuffle")
