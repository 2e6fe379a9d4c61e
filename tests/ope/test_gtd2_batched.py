"""The GTD2 loop's block-drawn noise and batched runs change no result.

`gtd2_saddle_point` draws its Gaussian noise in blocks of iterations and can run several
independent runs (`NoiseGroup`s: own clip, noise std and generator) as one array loop;
`tune_on_public(batched=True)` uses that to run its whole (h, η) grid at once. These tests
check the property that makes that safe: every run sees exactly the values it would see alone
with one `gaussian_mechanism` call per step.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from privrl.envs.chain import ChainMDP
from privrl.ope.gpope import NoiseGroup, gtd2_saddle_point, tune_on_public
from privrl.ope.mspbe import LinearSystem
from privrl.ope.stats import trajectory_stats
from privrl.privacy.mechanisms import gaussian_mechanism
from tests.noise import noise_rng


def _problem(m: int = 20, n: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(m, n, n)) * 0.3 + np.eye(n)
    b = rng.normal(size=(m, n))
    C = np.stack([np.eye(n)] * m)
    return A, b, C


def _per_step_reference(A, b, C, index, beta, clip, noise_std, rng):
    """Algorithm 1 written plainly: one clip and one `gaussian_mechanism` call per step."""
    N, R = index.shape
    n = A.shape[1]
    x = np.zeros((R, 2 * n))
    for i in range(N):
        gs = []
        for r in range(R):
            j = index[i, r]
            th, w = x[r, :n], x[r, n:]
            g = np.concatenate((-(A[j].T @ w), A[j] @ th + C[j] @ w - b[j]))
            norm = float(np.sqrt(g @ g))
            gs.append(g * (clip / norm) if norm > clip else g)
        g_all = np.stack(gs)
        if noise_std > 0:
            g_all, _ = gaussian_mechanism(
                g_all, sensitivity=2 * clip, sigma=noise_std, rng=rng, name="ref"
            )
        x = x - beta * g_all
    return x


@pytest.mark.parametrize("R", [1, 3])
@pytest.mark.parametrize("clip,noise_std", [(math.inf, 0.0), (1.5, 0.7)])
def test_block_noise_equals_one_draw_per_step(R: int, clip: float, noise_std: float) -> None:
    """Property: drawing the noise of many iterations in one block gives the final iterate of
    a run that draws it step by step (same generator, same order), to float rounding."""
    A, b, C = _problem()
    N = 700  # spans several noise blocks when the block is made small below
    index = np.random.default_rng(1).integers(0, A.shape[0], size=(N, R))
    import privrl.ope.gpope as gp

    old = gp.NOISE_BLOCK_BYTES
    gp.NOISE_BLOCK_BYTES = 64 * R * 2 * A.shape[1] * 8  # blocks of 64 iterations
    try:
        got = gtd2_saddle_point(
            A, b, C, index, np.full(N, 0.05), clip=clip, noise_std=noise_std,
            rng=noise_rng(3),
        )  # fmt: skip
    finally:
        gp.NOISE_BLOCK_BYTES = old
    ref = _per_step_reference(A, b, C, index, 0.05, clip, noise_std, noise_rng(3))
    assert np.allclose(got.x, ref, rtol=1e-10, atol=1e-12)
    if noise_std > 0:  # the noise matters: another generator gives another iterate
        other = gtd2_saddle_point(
            A, b, C, index, np.full(N, 0.05), clip=clip, noise_std=noise_std,
            rng=noise_rng(4),
        )  # fmt: skip
        assert not np.allclose(other.x, got.x)


def test_groups_run_as_if_alone() -> None:
    """Property: two runs with different (h, noise std, generator) batched as groups end
    where each ends when run alone."""
    A, b, C = _problem()
    N = 400
    idx = np.random.default_rng(2).integers(0, A.shape[0], size=(N, 4))
    betas = np.full(N, 0.05)
    alone = [
        gtd2_saddle_point(
            A, b, C, idx[:, 2 * k : 2 * k + 2], betas, clip=h, noise_std=s,
            rng=noise_rng(10 + k),
        ).x
        for k, (h, s) in enumerate([(1.0, 0.5), (3.0, 2.0)])
    ]  # fmt: skip
    together = gtd2_saddle_point(
        A, b, C, idx, betas, clip=math.inf, noise_std=0.0, rng=None,
        groups=[
            NoiseGroup(2, noise_rng(10), 0.5, 1.0),
            NoiseGroup(2, noise_rng(11), 2.0, 3.0),
        ],
    )  # fmt: skip
    assert np.allclose(together.x, np.concatenate(alone), rtol=1e-10, atol=1e-12)


def test_groups_are_checked() -> None:
    A, b, C = _problem()
    idx = np.zeros((5, 3), dtype=int)
    kw = dict(clip=math.inf, noise_std=0.0, rng=None)
    with pytest.raises(ValueError, match="cover 2 replicas"):
        gtd2_saddle_point(A, b, C, idx, np.ones(5), groups=[NoiseGroup(2, None, 0.0, 1.0)], **kw)
    with pytest.raises(ValueError, match="clipped and unclipped"):
        gtd2_saddle_point(
            A, b, C, idx, np.ones(5),
            groups=[NoiseGroup(2, None, 0.0, 1.0), NoiseGroup(1, None, 0.0, math.inf)], **kw,
        )  # fmt: skip
    with pytest.raises(ValueError, match="unbounded sensitivity"):
        gtd2_saddle_point(
            A, b, C, idx, np.ones(5),
            groups=[NoiseGroup(3, noise_rng(0), 1.0, math.inf)], **kw,
        )  # fmt: skip


def test_batched_tuning_makes_the_same_choice() -> None:
    """Property: `tune_on_public(batched=True)` runs the same (h, η) grid with the same
    draws as the one-run-at-a-time path, so it picks the same h and η and reports the same
    grid (MSPBEs equal to float rounding)."""
    c = ChainMDP(n_states=8)
    public = trajectory_stats(c.sample(40, seed=5), c.features(), c.gamma)
    system = LinearSystem(*c.linear_system())
    kw = dict(
        m=40, epsilon=1.0, delta=1e-5, iterations=300, etas=(1e-2, 1e-1, 1.0), repeats=2,
        seed=3, orders=(2.0, 4.0, 8.0, 16.0, 32.0), clip_multipliers=(1.0, 10.0),
    )  # fmt: skip
    seq = tune_on_public(public, system, **kw)  # type: ignore[arg-type]
    bat = tune_on_public(public, system, batched=True, **kw)  # type: ignore[arg-type]
    assert bat.step == seq.step and bat.clip_multiplier == seq.clip_multiplier
    assert bat.clip == pytest.approx(seq.clip, rel=1e-9)
    assert bat.nonprivate_step == seq.nonprivate_step
    assert [g["eta"] for g in bat.grid] == [g["eta"] for g in seq.grid]
    assert np.allclose([g["mspbe"] for g in bat.grid], [g["mspbe"] for g in seq.grid], rtol=1e-8)
    assert [g["clipped_fraction"] for g in bat.grid] == [g["clipped_fraction"] for g in seq.grid]
