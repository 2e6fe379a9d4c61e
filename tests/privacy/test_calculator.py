"""`privrl.privacy.calculator`: the Python face of `privrl account` / `privrl calibrate`."""

from __future__ import annotations

import pytest

from privrl.privacy import accounting as acc
from privrl.privacy import calculator
from privrl.privacy.limits import InputError


def test_account_reports_the_accountants_epsilon_for_the_event_it_builds() -> None:
    result = calculator.account(
        "gaussian", noise_multiplier=1.0, steps=100, sampling_rate=0.01, backend="rdp"
    )
    event = acc.sampled_gaussian_event(1.0, 100, sampling="poisson", sampling_probability=0.01)
    assert result["results"] == [
        {"accountant": acc.describe_backend("rdp"), "epsilon": acc.epsilon(event, 1e-5)}
    ]
    assert result["event"]["type"] == "SelfComposedDpEvent" and result["event"]["count"] == 100


def test_account_adds_the_closed_forms_that_apply() -> None:
    result = calculator.account("pure", epsilon0=0.1, steps=10, backend="rdp")
    closed = {row["accountant"]: row["epsilon"] for row in result["results"][1:]}
    assert closed["closed form: basic composition (k·ε0)"] == pytest.approx(1.0)
    assert any("advanced composition" in name for name in closed)


def test_a_parameter_of_another_mechanism_is_refused_not_ignored() -> None:
    with pytest.raises(InputError, match="`rho` does not apply to `mechanism=gaussian`"):
        calculator.account("gaussian", noise_multiplier=1.0, rho=0.5)


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: calculator.account(noise_multiplier=-1.0), "`noise_multiplier` must be"),
        (lambda: calculator.account(noise_multiplier=1.0, steps=0), "`steps` must be >= 1"),
        (lambda: calculator.account(noise_multiplier=1.0, delta=2.0), "`delta` must be"),
        (lambda: calculator.account("zcdp"), "`rho` must be given and > 0 for `mechanism=zcdp`"),
        (
            lambda: calculator.account(noise_multiplier=1.0, dataset_size=5),
            "give both `dataset_size` and `sample_size`",
        ),
        (lambda: calculator.calibrate(-1.0, steps=10), "`epsilon` must be"),
        (lambda: calculator.calibrate(1.0), "give exactly one of `steps` (find z) or"),
        (lambda: calculator.calibrate(1.0, steps=10, backend="all"), "`backend` must be rdp"),
        (
            lambda: calculator.calibrate(1.0, noise_multiplier=1e-6),
            "use `noise_multiplier` >= ",
        ),
    ],
)
def test_messages_name_the_functions_parameters_not_flags(call: object, words: str) -> None:
    """The library names its own parameters; only the command line writes them as flags."""
    with pytest.raises(InputError) as err:
        call()  # type: ignore[operator]
    assert words in str(err.value)
    assert "--" not in str(err.value)


def test_a_pld_skipped_side_by_side_is_explained_in_parameters() -> None:
    result = calculator.account(noise_multiplier=0.1, steps=20)
    notes = [row["note"] for row in result["results"] if row.get("note")]
    assert notes and "`backend=pld` forces it" in notes[0]


def test_calibrate_meets_the_target_and_max_steps_stays_within_it() -> None:
    out, text = calculator.calibrate(2.0, delta=1e-5, steps=50, sampling_rate=0.05)
    assert out["epsilon"] <= 2.0 + 1e-9 and "noise multiplier z =" in text
    z = out["noise_multiplier"]
    out, _ = calculator.calibrate(2.0, delta=1e-5, noise_multiplier=z, sampling_rate=0.05)
    assert out["steps"] >= 50
    event = acc.sampled_gaussian_event(
        z, out["steps"], sampling="poisson", sampling_probability=0.05
    )
    assert acc.epsilon(event, 1e-5) <= 2.0 + 1e-9
