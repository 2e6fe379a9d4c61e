"""dp-accounting's absl log lines at privrl's boundary: the RDP accountant's per-order
non-convergence warnings are dropped while privrl calls it; every other record passes."""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings

import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant

from privrl.privacy import accounting

NON_CONVERGENCE = "_compute_log_a_frac failed to converge"


def _event(noise_multiplier: float) -> dp_event.DpEvent:
    """A small noise multiplier at a large sampling rate: dozens of orders fail to converge."""
    return accounting.sampled_gaussian_event(noise_multiplier, 100, sampling_probability=0.5)


def _non_convergence(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith(NON_CONVERGENCE)]


def test_dp_accounting_itself_logs_the_warnings(caplog: pytest.LogCaptureFixture) -> None:
    """The case is one that logs them when dp-accounting is called directly (no privrl)."""
    acc = rdp_privacy_accountant.RdpAccountant(list(accounting.DENSE_RDP_ORDERS))
    with caplog.at_level(logging.WARNING, logger="absl"):
        acc.compose(_event(0.5001))
    assert len(_non_convergence(caplog)) > 10


def test_privrl_epsilon_drops_them_and_keeps_the_value(caplog: pytest.LogCaptureFixture) -> None:
    event = _event(0.5002)  # a value no other test uses: not served from the curve cache
    with caplog.at_level(logging.WARNING, logger="absl"):
        eps = accounting.epsilon(event, 1e-5, backend="rdp")
    assert _non_convergence(caplog) == []
    # The same number as dp-accounting's own accountant at the same orders: nothing else changed.
    acc = rdp_privacy_accountant.RdpAccountant(list(accounting.DENSE_RDP_ORDERS))
    acc.compose(event)
    assert eps == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)


def test_calibration_drops_them(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="absl"):
        z = accounting.calibrate_noise_multiplier(50.0, 1e-5, 100, sampling_probability=0.5)
    assert z > 0
    assert _non_convergence(caplog) == []


def test_other_records_and_privrl_warnings_pass(caplog: pytest.LogCaptureFixture) -> None:
    absl = logging.getLogger("absl")
    with (
        caplog.at_level(logging.WARNING, logger="absl"),
        accounting.quiet_dp_accounting(),
        pytest.warns(UserWarning, match="privrl's own"),
    ):
        absl.warning("Negative Renyi divergence of %s, probably caused by ...", -1e-312)
        absl.warning("%s failed to converge (a format argument, not the message)", "x")
        warnings.warn("privrl's own warning", UserWarning, stacklevel=1)
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "Negative Renyi divergence of -1e-312, probably caused by ...",
        "x failed to converge (a format argument, not the message)",
    ]


def test_the_filter_is_removed_after_the_last_caller_leaves(
    caplog: pytest.LogCaptureFixture,
) -> None:
    absl = logging.getLogger("absl")
    before = list(absl.filters)
    with accounting.quiet_dp_accounting():
        with accounting.quiet_dp_accounting():
            pass
        assert len(absl.filters) == len(before) + 1  # still inside the outer call
    assert absl.filters == before
    with caplog.at_level(logging.WARNING, logger="absl"):
        absl.warning(NON_CONVERGENCE + " after 1000 iterations")  # outside privrl's calls
    assert len(_non_convergence(caplog)) == 1


def test_a_library_call_prints_nothing_on_stderr() -> None:
    """As a user's script sees it: absl's records go to stderr (Python's last-resort handler)."""
    code = (
        "from privrl.privacy import accounting as a\n"
        "ev = a.sampled_gaussian_event(0.5, 100, sampling_probability=0.5)\n"
        "print(a.epsilon(ev, 1e-5, backend='rdp'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert float(out.stdout) > 0
    assert NON_CONVERGENCE not in out.stderr
    assert out.stderr == ""
