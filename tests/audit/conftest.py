"""Fixtures of the audit tests."""

from __future__ import annotations

import pytest

import privrl.offline.apvi as apvi_module
import privrl.ope.gpope as gpope_module
from privrl.privacy import mechanisms


@pytest.fixture
def broken_gaussian(monkeypatch: pytest.MonkeyPatch):
    """A test-only fault: the Gaussian mechanism draws noise 10× smaller than its record (and
    the system's report) says. Patched where the systems look it up."""

    def weak(value, *, sensitivity, sigma=None, noise_multiplier=None, rng, name):
        if sigma is None:
            sigma = noise_multiplier * sensitivity
        noisy, release = mechanisms.gaussian_mechanism(
            value, sensitivity=sensitivity, sigma=sigma / 10.0, rng=rng, name=name
        )
        return noisy, release

    monkeypatch.setattr(apvi_module, "gaussian_mechanism", weak)
    monkeypatch.setattr(gpope_module, "gaussian_mechanism", weak)
