"""`privrl.privacy.noise`: the secure source of privacy noise, its insecure opt-in, and the
guard that makes every mechanism refuse a generator it did not issue."""

from __future__ import annotations

import ast
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from privrl.privacy import mechanisms as mech
from privrl.privacy import sampling, shuffle, threshold
from privrl.privacy.ledger import BudgetLedger, LedgerError
from privrl.privacy.noise import (
    NoiseGenerator,
    NoiseSource,
    noise_generator,
    require_noise_generator,
    torch_normal,
)
from privrl.privacy.report import PrivacyReport
from privrl.privacy.tree import BinaryTreeMechanism

SRC = Path(__file__).resolve().parents[2] / "src" / "privrl"


def test_secure_generators_are_chacha20_keyed_afresh_each_time() -> None:
    src = NoiseSource.secure()
    a, b = src.generator("x"), src.generator("x")
    assert a.secure and b.secure and src.certified
    state = a.bit_generator.state
    assert state["bit_generator"].endswith("ChaCha") and state["state"]["rounds"] == 20
    # 256-bit keys from OS entropy: two generators (or two sources) never repeat each other
    assert not np.array_equal(a.standard_normal(8), b.standard_normal(8))
    other = NoiseSource.secure().generator("x")
    assert not np.array_equal(src.generator("x").integers(0, 2**63, 4), other.integers(0, 2**63, 4))


def test_insecure_noise_repeats_from_its_seed_and_is_marked() -> None:
    a, b = NoiseSource.insecure(7), NoiseSource.insecure(7)
    assert not a.certified
    x, y = a.generator("s").standard_normal(5), b.generator("s").standard_normal(5)
    np.testing.assert_array_equal(x, y)
    # streams and successive generators of a stream are distinct
    assert not np.array_equal(a.generator("s").standard_normal(5), x)
    assert not np.array_equal(NoiseSource.insecure(7).generator("t").standard_normal(5), x)
    assert not NoiseSource.insecure(7).generator().secure
    # the default stream is numpy's own seeded one (simulations keep their numbers)
    np.testing.assert_array_equal(
        NoiseSource.insecure(7).generator().standard_normal(5),
        np.random.default_rng(7).standard_normal(5),
    )


@pytest.mark.parametrize("secure", [True, False])
def test_state_and_pickle_resume_bit_exactly(secure: bool) -> None:
    src = NoiseSource.secure() if secure else NoiseSource.insecure(3)
    g = src.generator()
    g.standard_normal(17)
    saved, pickled = g.state, pickle.dumps(g)
    ahead = g.standard_normal(6)
    for back in (NoiseGenerator.from_state(saved), pickle.loads(pickled)):
        assert isinstance(back, NoiseGenerator) and back.secure is secure
        np.testing.assert_array_equal(back.standard_normal(6), ahead)


def test_a_plain_numpy_generator_is_refused_everywhere() -> None:
    """The guard: noise drawn from a caller's generator could be recomputed from its seed."""
    plain = np.random.default_rng(0)
    calls = [
        lambda: mech.gaussian_mechanism(1.0, sensitivity=1, sigma=1, rng=plain, name="x"),
        lambda: mech.laplace_mechanism(1.0, sensitivity=1, scale=1, rng=plain, name="x"),
        lambda: mech.gaussian_symmetric_matrix(np.eye(2), sensitivity=1, s=1, rng=plain, name="x"),
        lambda: mech.binomial_mechanism(3, trials=10, p=0.5, rng=plain, name="x", epsilon=1.0),
        lambda: mech.discrete_gaussian_mechanism(3, sensitivity=1, sigma=1, rng=plain, name="x"),
        lambda: mech.discrete_laplace_mechanism(3, sensitivity=1, scale=1, rng=plain, name="x"),
        lambda: mech.gaussian_noise_like(torch.zeros(3), sigma=1.0, generator=plain),
        lambda: mech.privatize_sum_torch(
            torch.zeros(3), clip_norm=1, noise_multiplier=1, generator=torch.Generator(), name="x"
        ),
        lambda: sampling.poisson_sample(10, 0.5, plain),
        lambda: sampling.poisson_subset(10, 0.5, plain),
        lambda: threshold.noisy_threshold(1.0, 1.0, plain),
        lambda: threshold.prefix_query_noise(3, 1.0, plain),
        lambda: shuffle.LaplaceRandomizer(1.0, 1.0).noise((2,), plain),
        lambda: shuffle.shuffler(np.zeros((3, 3), np.int64), plain),
        lambda: BinaryTreeMechanism((2,), 8, l1_sensitivity=1.0, rngs=plain, epsilon=1.0),
        lambda: torch_normal((2,), std=1.0, like=torch.zeros(1), rng=plain),  # type: ignore[arg-type]
        lambda: noise_generator(0),
    ]
    for call in calls:
        with pytest.raises(TypeError, match="NoiseGenerator"):
            call()
    assert noise_generator(None).secure
    g = NoiseSource.secure().generator()
    assert require_noise_generator(g) is g


def test_torch_noise_is_drawn_in_float64_and_cast() -> None:
    a, b = NoiseSource.insecure(1).generator(), NoiseSource.insecure(1).generator()
    like = torch.zeros(4, dtype=torch.float32)
    t = torch_normal((4,), std=2.0, like=like, rng=a)
    assert t.dtype == torch.float32 and t.device == like.device
    np.testing.assert_array_equal(t.numpy(), (b.standard_normal(4) * 2.0).astype(np.float32))


def test_privatize_sum_torch_noise_has_the_stated_scale() -> None:
    """Sensitivity C and noise multiplier z give N(0, (zC)²) per coordinate."""
    g = NoiseSource.insecure(5).generator()
    noisy, release = mech.privatize_sum_torch(
        torch.zeros(200_000, dtype=torch.float64),
        clip_norm=0.5,
        noise_multiplier=3.0,
        generator=g,
        name="x",
    )
    assert release.noise["sigma"] == pytest.approx(1.5) and release.sensitivity == 0.5
    assert float(noisy.std()) == pytest.approx(1.5, rel=0.01)  # type: ignore[union-attr]
    assert abs(float(noisy.mean())) < 0.02  # type: ignore[union-attr]


def _report(rng: np.random.Generator) -> PrivacyReport:
    _, release = mech.gaussian_mechanism(0.0, sensitivity=1.0, sigma=4.0, rng=rng, name="x")
    return PrivacyReport.build("trajectory", "replace-one", [release], 1e-5, system="test")


def test_a_report_from_insecure_noise_is_uncertified() -> None:
    secure = _report(NoiseSource.secure().generator())
    assert secure.certified and secure.private and math.isfinite(secure.epsilon)
    insecure = _report(NoiseSource.insecure(0).generator())
    assert not insecure.certified and not insecure.private
    assert insecure.epsilon == math.inf
    assert insecure.nominal_epsilon == pytest.approx(secure.epsilon)
    assert "NOT CERTIFIED" in insecure.summary()
    back = PrivacyReport.from_dict(insecure.to_dict())
    assert not back.certified and back.epsilon == math.inf
    assert back.nominal_epsilon == pytest.approx(secure.epsilon)
    # an insecure source withdraws a certified report too (a run's own reports)
    assert not NoiseSource.insecure(0).certify(secure).certified
    assert NoiseSource.secure().certify(secure) is secure


def test_a_ledger_refuses_an_uncertified_report(tmp_path: Path) -> None:
    from privrl.data.io import save_hdf5
    from tests.privacy.test_ledger import make_dataset

    data = save_hdf5(make_dataset(), tmp_path / "d.h5")
    ledger = BudgetLedger.init(
        data, epsilon=10.0, delta=1e-3, unit="trajectory", relation="replace-one"
    )
    report = _report(NoiseSource.insecure(0).generator())
    with pytest.raises(LedgerError):
        ledger.check(report)
    ledger.check(_report(NoiseSource.secure().generator()))  # the same release, secret noise


# ---------------------------------------------------------------------------------------------
# static check: only privrl.privacy makes noise generators
# ---------------------------------------------------------------------------------------------

NOISE_CALLS = {
    "gaussian_mechanism",
    "laplace_mechanism",
    "gaussian_symmetric_matrix",
    "binomial_mechanism",
    "discrete_gaussian_mechanism",
    "discrete_laplace_mechanism",
    "gaussian_noise_like",
    "privatize_sum_torch",
    "poisson_sample",
    "poisson_subset",
    "step_coins",
    "one_per_unit",
    "shuffled_batches",
    "noisy_threshold",
    "prefix_query_noise",
    "sample_release_trajectories",
    "shuffle_protocol",
    "aggregate_binary_sum",
    "local_randomizer",
    "shuffler",
}
GENERATOR_MAKERS = {"default_rng", "Generator", "SeedSequence", "manual_seed", "PCG64", "Philox"}


def _called_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        return f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
    return None


def _makes_generator(node: ast.AST) -> bool:
    return any(_called_name(n) in GENERATOR_MAKERS for n in ast.walk(node))


def test_no_module_outside_privacy_makes_a_generator_that_feeds_a_mechanism() -> None:
    """Outside `privrl.privacy`: no `NoiseGenerator(...)` or CSPRNG is constructed, and no
    mechanism or secret sampler is handed a generator built in its own call. (Every other path
    is refused at run time by the mechanisms' guard, tested above.)"""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("privacy/"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            name = _called_name(node)
            if name in {"NoiseGenerator", "ChaCha", "AESCounter"}:
                offenders.append(f"{rel}:{node.lineno} constructs {name}")  # type: ignore[attr-defined]
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] + [getattr(node, "module", "") or ""]
                if any(m.split(".")[0] == "randomgen" for m in mods):
                    offenders.append(f"{rel}:{node.lineno} imports randomgen")
            if name in NOISE_CALLS:
                assert isinstance(node, ast.Call)
                for arg in [*node.args, *(k.value for k in node.keywords)]:
                    if _makes_generator(arg):
                        offenders.append(f"{rel}:{node.lineno} feeds {name} a fresh generator")
    assert not offenders, "\n".join(offenders)
