"""Test doubles for privacy noise.

`noise_rng(seed)` is a `NoiseGenerator` on PCG64 seeded exactly as `numpy.random.default_rng(seed)`
(so a test keeps the numbers it had), which reports itself secure. It exists only here, for
unit tests of mechanisms, accounting and algorithms that need repeatable draws and a certified
report; the library never builds one (tests/privacy/test_noise_source.py checks that no module
outside `privrl.privacy` constructs a `NoiseGenerator`). Tests of the insecure opt-in itself use
`NoiseSource.insecure`, which is uncertified."""

from __future__ import annotations

from typing import Any

import numpy as np

from privrl.privacy.noise import NoiseGenerator, NoiseSource


def noise_rng(seed: Any = None) -> NoiseGenerator:
    """The stream of `numpy.random.default_rng(seed)`, as a (test-only) NoiseGenerator."""
    if isinstance(seed, np.random.Generator):
        return NoiseGenerator(seed.bit_generator, secure=True)
    return NoiseGenerator(np.random.PCG64(seed), secure=True)


def secure_rng() -> NoiseGenerator:
    """A real secure generator (fresh OS entropy)."""
    return NoiseSource.secure().generator()


class TestNoiseSource(NoiseSource):
    """A `NoiseSource` whose generators repeat from `seed` and report themselves secure (the
    test double of `noise_rng` for library calls that take a source)."""

    __test__ = False  # not a pytest class

    def __init__(self, seed: Any = 0) -> None:
        super().__init__(insecure_seed=seed)

    @property
    def certified(self) -> bool:
        return True

    def generator(self, stream: str = "noise") -> NoiseGenerator:
        g = super().generator(stream)
        g.secure = True
        return g


def noise_source(seed: Any = 0) -> NoiseSource:
    return TestNoiseSource(seed)
