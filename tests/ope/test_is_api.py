"""Private IPS / SNIPS / DR from Python (`privrl.ope.IPS`, ...): the object on a small log,
the same plan and release as the command line, the ledger transaction, reproducible insecure
noise, every accepted kind of target policy, and errors that name config fields."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from privrl.cli.main import main
from privrl.config import ConfigError
from privrl.data.io import header_of, load_hdf5, read_header, save_hdf5
from privrl.ope import DR, IPS, SNIPS, DRConfig, Estimated, IPSConfig, SNIPSConfig
from privrl.ope import importance as imp
from privrl.policies import TabularPolicy
from privrl.privacy.ledger import BudgetLedger, LedgerError
from privrl.privacy.noise import NoiseSource
from privrl.runs import registry
from privrl.runs.wording import command_detail
from privrl.systems.ips import DrConfig, IpsConfig, SnipsConfig
from tests.ope.test_importance import MU, PI, TRUE_VALUE, synthetic

BOUNDS = dict(weight_clip=float(np.max(PI / MU)), reward_range=(0.0, 1.0), max_horizon=1)
OBJECTS = {"ips": (IPS, IPSConfig), "snips": (SNIPS, SNIPSConfig), "dr": (DR, DRConfig)}
RUN_CONFIGS = {"ips": IpsConfig, "snips": SnipsConfig, "dr": DrConfig}


def make(name: str, **settings: object):
    cls, config = OBJECTS[name]
    return cls(config(**{**BOUNDS, "epsilon": 1.0, **settings}))


def without_time(report) -> dict:
    d = report.to_dict()
    d.pop("created", None)
    return d


@pytest.fixture(scope="module")
def log() -> object:
    return synthetic(2000, np.random.default_rng(0))


@pytest.fixture(scope="module")
def log_file(tmp_path_factory: pytest.TempPathFactory, log) -> Path:
    return save_hdf5(log, tmp_path_factory.mktemp("log") / "log.h5")


@pytest.mark.parametrize("name", ["ips", "snips", "dr"])
def test_estimate_from_python(name: str, log) -> None:
    """`X(config).estimate(dataset, table)` returns the value, its interval (holding the
    known value at ε = 5 for this log), the final report (ε ≤ target, one release per sum,
    the public parameters listed) and the metrics the command writes."""
    est = make(name, epsilon=5.0).estimate(log, PI)
    assert isinstance(est, Estimated)
    low, high = est.interval
    assert low <= TRUE_VALUE <= high
    assert est.report.epsilon <= 5.0 + 1e-9
    assert len(est.report.releases) == (2 if name == "snips" else 1)
    names = {p["name"] for p in est.report.public_parameters}
    assert {"weight clip W", "reward range", "horizon H", "target policy π"} <= names
    assert est.metrics["value"] == est.value
    assert est.metrics["value_ci_low"] == low and est.metrics["value_ci_high"] == high


@pytest.mark.parametrize("name", ["ips", "snips", "dr"])
def test_the_cli_and_python_plan_and_release_the_same(
    name: str, log_file: Path, tmp_path: Path, capsys
) -> None:
    """The command's plan (its config, the file's header) and the library's plan (the same
    settings, the header of the dataset in memory) state the same public parameters and
    report (the library's details name fields, the command's the same fields as flags); with
    the same insecure seed the command's metrics equal the library's."""
    settings = dict(BOUNDS, epsilon=1.0)
    cli_plan = registry.get(name).plan(
        RUN_CONFIGS[name](target_policy="uniform", **settings), read_header(log_file)
    )
    data = load_hdf5(log_file)
    obj = make(name)
    py_plan = obj.plan(header_of(data), "uniform")
    library = without_time(py_plan.report)
    details = [p.get("detail") for p in library["public_parameters"]]
    assert "epsilon" in details and "--epsilon" not in details
    for p in library["public_parameters"]:
        if p.get("detail"):
            p["detail"] = command_detail(p["detail"], RUN_CONFIGS[name])
    command = without_time(cli_plan.report)
    assert "--epsilon" in [p.get("detail") for p in command["public_parameters"]]
    assert command == library
    assert dict(cli_plan.public) == dict(py_plan.public)

    out = tmp_path / "run"
    argv = [
        "ope", name, "--data", str(log_file), "--target-policy", "uniform", "--reward-range",
        "0,1", "--weight-clip", str(BOUNDS["weight_clip"]), "--max-horizon", "1",
        "--epsilon", "1", "--seed", "7", "--insecure-reproducible-noise", "--out", str(out),
    ]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())
    est = obj.estimate(data, "uniform", noise=NoiseSource.insecure(7))
    assert metrics["value"] == pytest.approx(est.value, rel=0, abs=0)
    assert [metrics["value_ci_low"], metrics["value_ci_high"]] == list(est.interval)
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["releases"] == [r.to_dict() for r in est.report.releases]


def test_insecure_noise_repeats_and_secure_noise_does_not(log) -> None:
    """Two calls with `NoiseSource.insecure(seed)` give the same release; the default
    (secure) noise gives different ones; the insecure report is uncertified."""
    obj = make("snips")
    a = obj.estimate(log, PI, noise=NoiseSource.insecure(3))
    b = obj.estimate(log, PI, noise=NoiseSource.insecure(3))
    assert (a.value, a.interval) == (b.value, b.interval)
    assert [r.to_dict() for r in a.report.releases] == [r.to_dict() for r in b.report.releases]
    c, d = obj.estimate(log, PI), obj.estimate(log, PI)
    assert c.interval != d.interval  # SNIPS's interval is post-processing of the noisy sums
    assert a.report.insecure_noise and a.report.epsilon == float("inf")
    assert not c.report.insecure_noise and c.report.epsilon <= 1.0 + 1e-9


def test_non_private_is_the_same_estimator_without_noise(log) -> None:
    """`non_private` is the private code with the noise off: its value is the mean of the
    clipped terms, with no release."""
    obj = make("ips")
    meta = log.metadata
    uniform = imp.load_target_policy("uniform", meta.action_space, meta.observation_space)
    t = imp.terms(log, uniform, imp.Bounds(BOUNDS["weight_clip"], (0.0, 1.0), 1, 1.0))
    est = obj.non_private(log, "uniform")
    assert est.value == pytest.approx(float(np.mean(t.weights * t.returns)))
    assert est.releases == [] and est.noise_std == [0.0]


def test_every_kind_of_policy_gives_the_same_release(log) -> None:
    """A table array, a `Policy` object, a callable, a spec file and a `TargetPolicy` for the
    same π give the same release under the same insecure seed."""
    obj = make("ips")

    def values(policy: object) -> tuple[float, tuple[float, float] | None]:
        est = obj.estimate(log, policy, noise=NoiseSource.insecure(11))
        return est.value, est.interval

    table = values(PI)
    assert values(TabularPolicy(PI)) == table
    assert values(lambda obs: PI[np.asarray(obs, dtype=np.int64).reshape(-1)]) == table
    meta = log.metadata
    target = imp.load_target_policy("uniform", meta.action_space, meta.observation_space)
    assert values(target) == values("uniform")
    assert values("uniform") != table


def test_a_policy_object_is_described_by_name_not_values(log) -> None:
    """The report names a Python policy by public facts (its shape or qualified name)."""
    est = make("ips").estimate(log, PI)
    target = next(p for p in est.report.public_parameters if p["name"] == "target policy π")
    assert target["value"] == "array of shape (3, 3)"
    est = make("ips").estimate(log, TabularPolicy(PI))
    target = next(p for p in est.report.public_parameters if p["name"] == "target policy π")
    assert "TabularPolicy.action_probs" in target["value"]
    assert "uniform distribution" in target["detail"]  # code: the public fallback is stated


def test_dr_takes_a_reward_model_table_from_python(log) -> None:
    """DR's q̂ as an array replaces the config's spec; its range enters the sensitivity
    (q_hi − q_lo) + W (R + q_hi − q_lo)."""
    q = np.array([[0.2, 0.5, 0.9], [0.7, 0.1, 0.3], [0.4, 0.8, 0.6]])
    est = make("dr").estimate(log, PI, reward_model=q)
    W = BOUNDS["weight_clip"]
    (release,) = est.report.releases
    assert release.sensitivity == pytest.approx((0.9 - 0.1) + W * (1.0 + 0.9 - 0.1))
    with pytest.raises(ConfigError) as err:
        make("ips").estimate(log, PI, reward_model=q)
    assert err.value.key == "reward_model"


# ------------------------------------------------------------------------ ledger


def test_a_ledger_records_exactly_the_report(log_file: Path, tmp_path: Path) -> None:
    """`estimate(..., ledger=)` leaves one completed entry whose ε is the report's."""
    path = tmp_path / "log.h5"
    path.write_bytes(log_file.read_bytes())
    ledger = BudgetLedger.init(
        path, epsilon=3.0, delta=1e-5, unit="trajectory", relation="replace_one"
    )
    est = make("ips").estimate(load_hdf5(path), PI, ledger=ledger)
    (entry,) = ledger.entries
    assert entry.status == "complete"
    assert ledger.spent() == pytest.approx(est.report.epsilon)


def test_an_overspend_is_refused_before_the_data_is_read(
    log_file: Path, tmp_path: Path, monkeypatch
) -> None:
    """Structural: with too small a budget the call is refused and the per-trajectory terms
    (the first read of the episodes) are never computed; nothing is recorded."""
    path = tmp_path / "log.h5"
    path.write_bytes(log_file.read_bytes())
    ledger = BudgetLedger.init(
        path, epsilon=0.5, delta=1e-5, unit="trajectory", relation="replace_one"
    )
    data = load_hdf5(path)

    def read(*args: object, **kwargs: object) -> None:
        raise AssertionError("the episodes were read")

    monkeypatch.setattr(imp, "terms", read)
    with pytest.raises(LedgerError):
        make("ips", epsilon=1.0).estimate(data, PI, ledger=ledger)
    assert ledger.entries == ()


# ------------------------------------------------------------------------ errors


def test_config_errors_name_the_field() -> None:
    for bad, key in [
        (dict(weight_clip=0.0), "weight_clip"),
        (dict(reward_range=(1.0, 0.0)), "reward_range"),
        (dict(gamma=1.5), "gamma"),
        (dict(delta=2.0), "delta"),
        (dict(epsilon=0.0), "epsilon"),
        (dict(confidence=1.0), "confidence"),
    ]:
        with pytest.raises(ConfigError) as err:
            make("ips", **bad)
        assert err.value.key == key and "--" not in str(err.value), str(err.value)


def test_missing_public_bounds_and_bad_policies_name_the_field(log) -> None:
    """A bound neither the config nor the public metadata gives is refused naming its field;
    a policy that is not understood names `policy`; none of these messages names a flag."""
    cases = [
        (IPS(IPSConfig(weight_clip=2.0, max_horizon=1, epsilon=1.0)), PI, "reward_range"),
        (IPS(IPSConfig(weight_clip=2.0, reward_range=(0, 1), epsilon=1.0)), PI, "max_horizon"),
        (make("ips"), "greedy", "policy"),
        (make("ips"), np.ones((2, 3)), "policy"),
        (make("ips"), lambda obs: np.ones((len(obs), 2)), "policy"),
    ]
    for obj, policy, key in cases:
        with pytest.raises(ConfigError) as err:
            obj.estimate(log, policy)
        assert err.value.key == key and "--" not in err.value.problem, str(err.value)


def test_the_library_does_not_import_the_application_layer() -> None:
    """Layers: importing the estimators and the bandit entry points (and estimating) loads
    nothing from `privrl.systems`, `privrl.runs` or `privrl.cli`."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "from privrl.ope import IPS, IPSConfig, bandit\n"
        "n = 50; a = np.arange(n) % 3\n"
        "bandit.ips(np.ones(n), a, np.full(n, 1 / 3), np.full((n, 3, 1), 1 / 3), epsilon=1.0,\n"
        "           weight_clip=3.0, reward_range=(0, 1))\n"
        "up = [m for m in sys.modules if m.startswith(('privrl.systems', 'privrl.runs',\n"
        "      'privrl.cli'))]\n"
        "print(up)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]", out


# ------------------------------------------------------------------------ non-private reference


@pytest.mark.parametrize("name", ["ips", "snips", "dr"])
def test_the_non_private_reference(name: str, log) -> None:
    """`non_private=True` (no ε): the value and interval of the bare `non_private()` estimator,
    a report with ε = ∞, private False, no releases and a note saying so; metrics say
    `private: false`; no noise is drawn (two calls give the same value)."""
    cls, config = OBJECTS[name]
    obj = cls(config(**BOUNDS, non_private=True))
    est = obj.estimate(log, PI)
    bare = make(name).non_private(log, PI)
    assert est.value == bare.value and est.interval == (bare.ci_low, bare.ci_high)
    assert obj.estimate(log, PI).value == est.value
    assert est.report.private is False and math.isinf(est.report.epsilon)
    assert est.report.releases == [] and est.metrics["private"] is False
    assert any("non-private reference" in note for note in est.report.notes)
    assert est.metrics["noise_std"] == [0.0] * imp.N_RELEASES[name]
    low, high = est.interval
    assert low <= TRUE_VALUE <= high


def test_the_non_private_reference_is_refused_by_a_ledger(log_file: Path, tmp_path: Path) -> None:
    """A dataset's ledger refuses the reference (it would void the budget) before anything is
    recorded, as for every non-private run."""
    path = tmp_path / "log.h5"
    path.write_bytes(log_file.read_bytes())
    ledger = BudgetLedger.init(
        path, epsilon=3.0, delta=1e-5, unit="trajectory", relation="replace_one"
    )
    obj = IPS(IPSConfig(**BOUNDS, non_private=True))
    with pytest.raises(LedgerError, match="not differentially private"):
        obj.estimate(load_hdf5(path), PI, ledger=ledger)
    assert ledger.entries == ()


def test_non_private_and_epsilon_are_one_choice() -> None:
    """Neither ε nor `non_private`: refused naming `epsilon` and pointing to the reference;
    both: refused naming `non_private`; ε = 1000 points to `--non-private`."""
    with pytest.raises(ConfigError) as err:
        IPSConfig(**BOUNDS)
    assert err.value.key == "epsilon" and "non_private=True" in err.value.problem
    with pytest.raises(ConfigError) as err:
        IPSConfig(**BOUNDS, epsilon=1.0, non_private=True)
    assert err.value.key == "non_private"
    with pytest.raises(ConfigError) as err:
        IPSConfig(**BOUNDS, epsilon=1000.0)
    assert err.value.key == "epsilon" and "--non-private" in err.value.problem


def test_the_command_line_reference(log_file: Path, tmp_path: Path, capsys) -> None:
    """`privrl ope ips --non-private`: metrics.json `private: false`, ε = ∞ in privacy.json,
    the console says NOT private; the same value as the library's reference; `--epsilon`
    with `--non-private` is one `error:` line (exit 2)."""
    out = tmp_path / "ref"
    argv = [
        "ope", "ips", "--data", str(log_file), "--target-policy", "uniform",
        "--reward-range", "0,1", "--weight-clip", str(BOUNDS["weight_clip"]),
        "--max-horizon", "1",
    ]  # fmt: skip
    assert main([*argv, "--non-private", "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "NOT private" in shown and "interval: " in shown
    metrics = json.loads((out / "metrics.json").read_text())
    report = json.loads((out / "privacy.json").read_text())
    assert metrics["private"] is False and report["private"] is False
    assert report["epsilon"] == "inf" and report["releases"] == []
    ref = IPS(IPSConfig(**BOUNDS, non_private=True)).estimate(load_hdf5(log_file), "uniform")
    assert metrics["value"] == pytest.approx(ref.value, rel=1e-12)
    assert main([*argv, "--non-private", "--epsilon", "1", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --non-private takes no --epsilon")
