"""The linear-feature estimators from Python (`privrl.ope.GPOPE`, `DPLSW`, `DPLSL`, `LSTD`,
`LSTDOP`): a config and an object, the same plan as the command line's, a library call as a
ledger transaction, repeatable insecure noise, and errors that name config fields."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from privrl.config import ConfigError
from privrl.data.io import header_of, load_hdf5, read_header, save_hdf5
from privrl.envs.chain import ChainDomain, ChainMDP
from privrl.ope import (
    DPLSL,
    DPLSW,
    GPOPE,
    LSTD,
    LSTDOP,
    Estimated,
    GPOPEConfig,
    PublicTuningConfig,
    tune_on_public,
)
from privrl.ope import gpope as gpope_mod
from privrl.ope.linear import estimator as estimator_mod
from privrl.privacy.ledger import BudgetLedger, LedgerError
from privrl.privacy.noise import NoiseSource
from privrl.privacy.units import NeighbourRelation, PrivacyUnit

M, N = 100, 200
SIGMA_REF = 2.84  # meets ε = 1, δ = 1e-5 for (M, N): checked in tests/ope/test_gpope.py
FIXED = dict(features="onehot", clip=1.0, step_size=0.1, iterations=N, start_states="uniform")


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_hdf5(ChainMDP().sample(M, seed=0), tmp_path_factory.mktemp("d") / "chain.h5")


@pytest.fixture(scope="module")
def public(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("p") / "public.h5"
    return save_hdf5(ChainMDP().sample(M, seed=9), path)


def new_ledger(path: Path, epsilon: float) -> BudgetLedger:
    """A ledger for one trajectory under replace-one (GPOPE's relation)."""
    return BudgetLedger.init(
        path,
        epsilon=epsilon,
        delta=1e-5,
        unit=PrivacyUnit.TRAJECTORY,
        relation=NeighbourRelation.REPLACE_ONE,
    )


@pytest.fixture(autouse=True)
def fast_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    """Skip the slow calibration for the one GPOPE configuration used here (as in
    tests/cli/test_ope_cli.py); every report's ε is still computed by the accountant."""
    real = gpope_mod._cached_sigma

    def cached(eps: float, delta: float, m: int, n: int, mode: str, *orders: object) -> float:
        if (eps, delta, m, n, mode, *orders) == (1.0, 1e-5, M, N, "rigorous"):
            return SIGMA_REF
        return real(eps, delta, m, n, mode, *orders)

    monkeypatch.setattr(gpope_mod, "_cached_sigma", cached)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the reads of the private episodes (`prepare` is the first thing that reads)."""
    calls: list[int] = []
    real = estimator_mod.prepare

    def prepare(problem, data):
        calls.append(1)
        return real(problem, data)

    monkeypatch.setattr(estimator_mod, "prepare", prepare)
    return calls


def test_gpope_from_python_gives_a_value_an_interval_and_a_report(
    stored: Path, public: Path
) -> None:
    """The object on a small dataset: a finite value inside its interval (measured on public
    replicas), the released θ, a certified (ε, δ) report with the public parameters listed."""
    gp = GPOPE(epsilon=1.0, features="onehot", iterations=N, start_states="uniform",
               public=load_hdf5(public))  # fmt: skip
    data = load_hdf5(stored)
    result = gp.estimate(data)
    assert isinstance(result, Estimated) and np.isfinite(result.value)
    assert result.interval is not None and result.interval[0] <= result.value
    assert result.value <= result.interval[1]
    assert result.details.theta.shape == (data.metadata.observation_space.n,)  # one-hot
    assert 0.5 < result.report.epsilon <= 1.0
    names = {p["name"]: p for p in result.report.public_parameters}
    assert names["clip bound h"]["source"] == "public split"  # tuned on the public dataset
    assert names["iterations N"]["detail"] == "iterations"  # a field, not a flag


def test_the_command_line_and_python_plan_the_same(stored: Path) -> None:
    """The same settings through the run layer's adapter and through `GPOPE.plan` resolve the
    same public parameters (the command line names flags where Python names fields) and the
    same planned report."""
    from privrl.systems.ope import Gpope, GpopeConfig

    cli_plan = Gpope().plan(GpopeConfig(epsilon=1.0, **FIXED), read_header(stored), seed=0)
    py_plan = GPOPE(GPOPEConfig(epsilon=1.0, **FIXED)).plan(header_of(load_hdf5(stored)))
    cli = {p["name"]: p for p in cli_plan.report.public_parameters}
    py = {p["name"]: p for p in py_plan.report.public_parameters}
    assert set(cli) == set(py)
    for name in cli:
        assert (cli[name]["value"], cli[name]["source"]) == (py[name]["value"], py[name]["source"])
    assert cli["iterations N"]["detail"] == "--iterations"
    assert py["iterations N"]["detail"] == "iterations"
    assert cli_plan.report.epsilon == py_plan.report.epsilon
    assert [r.to_dict() for r in cli_plan.report.releases] == [
        r.to_dict() for r in py_plan.report.releases
    ]
    shared = {k for k in cli_plan.public if k != "data"}
    assert {k: cli_plan.public[k] for k in shared} == {k: py_plan.public[k] for k in shared}


def test_an_estimate_with_a_ledger_records_one_completed_spend(
    stored: Path, tmp_path: Path, counted: list[int]
) -> None:
    path = save_hdf5(load_hdf5(stored), tmp_path / "d.h5")
    ledger = new_ledger(path, epsilon=5.0)
    result = GPOPE(epsilon=1.0, **FIXED).estimate(load_hdf5(path), ledger=ledger)
    (entry,) = ledger.entries
    assert entry.status == "complete" and entry.label == "gpope"
    assert ledger.spent() == pytest.approx(result.report.epsilon)
    assert counted == [1]


def test_an_overspend_is_refused_before_the_episodes_are_read(
    stored: Path, tmp_path: Path, counted: list[int]
) -> None:
    path = save_hdf5(load_hdf5(stored), tmp_path / "d.h5")
    ledger = new_ledger(path, epsilon=0.5)
    with pytest.raises(LedgerError):
        GPOPE(epsilon=1.0, **FIXED).estimate(load_hdf5(path), ledger=ledger)
    assert counted == [] and ledger.entries == ()


def test_a_ledger_refuses_an_insecure_estimate_before_the_episodes_are_read(
    stored: Path, tmp_path: Path, counted: list[int]
) -> None:
    path = save_hdf5(load_hdf5(stored), tmp_path / "d.h5")
    ledger = new_ledger(path, epsilon=5.0)
    with pytest.raises(LedgerError):
        DPLSW(epsilon=1.0, features="onehot", reward_range=1.0).estimate(
            load_hdf5(path), ledger=ledger, noise=NoiseSource.insecure(0)
        )
    assert counted == [] and ledger.entries == ()


def test_insecure_noise_repeats_and_secure_noise_does_not(stored: Path) -> None:
    data = load_hdf5(stored)
    gp = GPOPE(epsilon=1.0, **FIXED)
    a = gp.estimate(data, noise=NoiseSource.insecure(3))
    b = gp.estimate(data, noise=NoiseSource.insecure(3))
    assert np.array_equal(a.details.theta, b.details.theta) and a.value == b.value
    assert a.report.epsilon == float("inf")  # an insecure simulation is uncertified
    c, d = gp.estimate(data), gp.estimate(data)
    assert not np.array_equal(c.details.theta, d.details.theta)


def test_minibatch_mode_from_python(stored: Path) -> None:
    mb = GPOPE(epsilon=1.0, mode="minibatch", features="onehot", clip=0.01, step_size=3.0,
               steps=20, sampling_rate=1.0, declared_trajectories=M,
               start_states="uniform")  # fmt: skip
    a = mb.estimate(load_hdf5(stored), noise=NoiseSource.insecure(1))
    b = mb.estimate(load_hdf5(stored), noise=NoiseSource.insecure(1))
    assert a.report.relation.value == "add_remove" and a.value == b.value
    assert a.report.epsilon == float("inf")  # insecure noise: uncertified in every mode
    names = {p["name"] for p in a.report.public_parameters}
    assert "trajectories m" not in names  # the count is not public under add/remove
    assert "declared trajectories m̄" in names


def test_a_simulator_is_public_information(stored: Path) -> None:
    """With the chain's simulator, h and η are tuned on its own sample, the MSPBE is reported
    and the start distribution is the domain's."""
    result = GPOPE(epsilon=1.0, iterations=N, simulator=ChainDomain()).estimate(
        load_hdf5(stored), noise=NoiseSource.insecure(0)
    )
    assert np.isfinite(result.metrics["mspbe"]) and np.isfinite(result.value)
    assert "simulator" in result.report.public[0]


def test_the_baselines_and_lstd_from_python(stored: Path) -> None:
    data = load_hdf5(stored)
    common = dict(features="onehot", start_states="uniform")
    lsw = DPLSW(epsilon=1.0, reward_range=1.0, **common).estimate(data)
    lsl = DPLSL(epsilon=1.0, reward_range=1.0, c=50.0, **common).estimate(data)
    op = LSTDOP(epsilon=1.0, reward_bound=1.0, declared_trajectories=M, **common).estimate(data)
    ref = LSTD(**common).estimate(data)
    for r in (lsw, lsl, op):
        assert np.isfinite(r.value) and r.interval is not None
        assert r.report.epsilon == pytest.approx(1.0, rel=0.05)
    assert op.report.relation.value == "add_remove"
    assert ref.report.epsilon == float("inf") and ref.interval is None


def test_errors_name_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        GPOPE(epsilon=1.0, clip=-1.0)
    assert err.value.key == "clip" and "--" not in str(err.value)
    with pytest.raises(ConfigError) as err:
        GPOPE(epsilon=1.0, steps=10)
    assert err.value.key == "steps" and "`mode=minibatch`" in str(err.value)
    assert "--" not in str(err.value)


def test_plan_errors_name_fields_not_flags(stored: Path) -> None:
    data = load_hdf5(stored)
    with pytest.raises(ValueError) as err:
        GPOPE(epsilon=1.0, features="onehot").estimate(data)  # no h, η nor public data
    assert "`clip`" in str(err.value) and "`step_size`" in str(err.value)
    assert "--" not in str(err.value)
    with pytest.raises(ConfigError) as cerr:
        DPLSW(epsilon=1.0, features="onehot", reward_range=1.0).estimate(data, "uniform")
    assert cerr.value.key == "target_policy" and "--" not in str(cerr.value)
    with pytest.raises(ConfigError) as cerr:
        GPOPE(epsilon=1.0, **FIXED).estimate(data, "no-such-policy")
    assert cerr.value.key == "target_policy"
    with pytest.raises(ConfigError) as cerr:
        GPOPE(epsilon=1.0, **FIXED, public=data).estimate(data)
    assert cerr.value.key == "public" and "same episodes" in str(cerr.value)
    minibatch = dict(mode="minibatch", features="onehot", clip=0.01, step_size=3.0)
    with pytest.raises(ConfigError) as cerr:  # add/remove: the header's count is not public
        GPOPE(epsilon=1.0, **minibatch, simulator=ChainDomain()).estimate(data)
    assert cerr.value.key == "simulator"
    with pytest.raises(ValueError) as err:  # nor is it m̄: declared, or refused
        GPOPE(epsilon=1.0, **minibatch).estimate(data)
    assert "`declared_trajectories=M`" in str(err.value)


def test_public_tuning_takes_a_config_or_its_keywords() -> None:
    from privrl.ope.mspbe import LinearSystem
    from privrl.ope.stats import trajectory_stats

    c = ChainMDP(n_states=8)
    public = trajectory_stats(c.sample(40, seed=5), c.features(), c.gamma)
    system = LinearSystem(*c.linear_system())
    config = PublicTuningConfig(
        m=40, epsilon=1.0, iterations=100, etas=(1e-2, 1e-1), repeats=2, seed=3,
        orders=(2.0, 4.0, 8.0, 16.0, 32.0),
    )  # fmt: skip
    by_config = tune_on_public(public, system, config)
    by_keywords = tune_on_public(public, system, **config.__dict__)
    assert by_config.step == by_keywords.step and by_config.clip == by_keywords.clip
    changed = tune_on_public(public, system, config, etas=(1e-2,))
    assert changed.step.eta == 1e-2
    with pytest.raises(ValueError, match="repeats"):
        PublicTuningConfig(m=40, epsilon=1.0, iterations=10, repeats=0)


def test_the_command_line_names_the_fields_as_flags() -> None:
    """The run layer's adapter turns the library's field references into flags, so the
    command line's messages and privacy.json keep naming flags."""
    from privrl.runs.wording import command_detail
    from privrl.systems.ope import GpopeConfig, cli_text

    text = "applies to `mode=paper` only (minibatch takes `steps` T); pass `max_horizon=H`"
    assert cli_text(text, GpopeConfig) == (
        "applies to --mode paper only (minibatch takes --steps T); pass --max-horizon H"
    )
    assert cli_text("`iterations=N` or a public dataset (`public=`)", GpopeConfig) == (
        "--iterations N or --public-data FILE"
    )
    assert command_detail("step_size, schedule, k", GpopeConfig) == "--step-size, --schedule, --k"
    assert command_detail("10·m", GpopeConfig) == "10·m"  # not a list of fields: unchanged
    with pytest.raises(ConfigError) as err:
        GpopeConfig(epsilon=1.0, steps=10)
    assert "--mode minibatch" in str(err.value) and "`" not in str(err.value)


def test_the_library_loads_no_application_module() -> None:
    """`privrl.ope` (the estimators from Python) imports no command-line, plotting or run-layer
    module: the layers point downwards."""
    import subprocess
    import sys

    code = (
        "import sys, privrl.ope, privrl.ope.linear; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'matplotlib', 'ray') "
        "or m.startswith(('privrl.runs', 'privrl.systems', 'privrl.cli', 'reproductions'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_docs_from_python_section_runs_as_printed(
    stored: Path, public: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """docs/ope.md's "From Python" example, on a chain dataset and an independent public one."""
    import re
    import shutil

    docs = Path(__file__).resolve().parents[2] / "docs" / "ope.md"
    section = docs.read_text().split("## From Python: GPOPE", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    shutil.copy(stored, tmp_path / "logs.h5")
    shutil.copy(public, tmp_path / "public.h5")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(code.group(1), str(docs), "exec"), namespace)
    assert np.isfinite(namespace["result"].value)  # type: ignore[attr-defined]
    assert namespace["theta"].shape == (load_hdf5(stored).metadata.observation_space.n,)  # type: ignore[attr-defined]
    assert "ε" in capsys.readouterr().out
