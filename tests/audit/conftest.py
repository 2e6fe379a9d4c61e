"""Fixtures of the audit tests."""

from __future__ import annotations

import dataclasses
import math

import pytest

import privrl.offline.apvi as apvi_module
import privrl.offline.vapvi as vapvi_module
import privrl.online.privatizers as privatizers_module
import privrl.ope.baselines as baselines_module
import privrl.ope.gpope as gpope_module
from privrl.privacy import mechanisms


@pytest.fixture
def broken_gaussian(monkeypatch: pytest.MonkeyPatch):
    """A test-only fault: the Gaussian mechanism draws noise 10× smaller than its record (and
    the system's report) says. Patched where the systems look it up (DP-APVI, GPOPE, DP-VAPVI,
    DP-LSW; DP-APVI's counts on the discrete Gaussian; `gaussian_noise_like`, the draw of
    DP-SGD's `privatize_sum_torch`)."""

    def weak(value, *, sensitivity, sigma=None, noise_multiplier=None, rng, name):
        if sigma is None:
            sigma = noise_multiplier * sensitivity
        noisy, release = mechanisms.gaussian_mechanism(
            value, sensitivity=sensitivity, sigma=sigma / 10.0, rng=rng, name=name
        )
        return noisy, release

    def weak_discrete(counts, *, sensitivity, sigma, rng, name):
        return mechanisms.discrete_gaussian_mechanism(
            counts, sensitivity=sensitivity, sigma=sigma / 10.0, rng=rng, name=name
        )

    real_like = mechanisms.gaussian_noise_like

    def weak_like(tensor, *, sigma, generator):
        return real_like(tensor, sigma=sigma / 10.0, generator=generator)

    for module in (apvi_module, gpope_module, vapvi_module, baselines_module):
        monkeypatch.setattr(module, "gaussian_mechanism", weak)
    monkeypatch.setattr(apvi_module, "discrete_gaussian_mechanism", weak_discrete)
    monkeypatch.setattr(mechanisms, "gaussian_noise_like", weak_like)


@pytest.fixture
def broken_shuffle(monkeypatch: pytest.MonkeyPatch):
    """A test-only fault: SDP-PE's shuffle binary sums draw their noise bits with a p whose
    binomial variance is 100× smaller than the calibration's (and the report's): noise with a
    10× smaller standard deviation."""
    real = privatizers_module.aggregate_binary_sum

    def weak(sums, calibration, rng, *, name, coordinates_changed):
        v = calibration.p * (1.0 - calibration.p) / 100.0
        fewer = dataclasses.replace(calibration, p=(1.0 - math.sqrt(1.0 - 4.0 * v)) / 2.0)
        return real(sums, fewer, rng, name=name, coordinates_changed=coordinates_changed)

    monkeypatch.setattr(privatizers_module, "aggregate_binary_sum", weak)


@pytest.fixture
def broken_laplace(monkeypatch: pytest.MonkeyPatch):
    """A test-only fault: the consensus filter's Laplace draws (the noisy threshold and every
    prefix query's noise) are 10× smaller than its calibration (and report) says. Patched where
    the audit and the filter look them up (`privrl.privacy.threshold`)."""
    from privrl.privacy import threshold

    real_threshold, real_query = threshold.noisy_threshold, threshold.prefix_query_noise

    def weak_threshold(theta, scale, rng, size=None):
        return real_threshold(theta, scale / 10.0, rng, size=size)

    def weak_query(n, scale, rng):
        return real_query(n, scale / 10.0, rng)

    monkeypatch.setattr(threshold, "noisy_threshold", weak_threshold)
    monkeypatch.setattr(threshold, "prefix_query_noise", weak_query)
