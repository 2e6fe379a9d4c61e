"""The replay attack: a reader of everything a run publishes cannot recompute its noise.

If a release's noise were a function of published inputs (config.json carries the seed), a
reader would rerun the command with the published settings and recover the noise, and with it
the exact statistic (or tell neighbours apart: the neighbour-diff test runs both sides with one
seed, so it cannot see this). Here each private command runs twice on the SAME data with the
SAME seed and flags: every published file outside config.json and privacy.json must be
reproducible only up to the fresh noise, so at least one released file differs. With
`--insecure-reproducible-noise` the two runs agree exactly, and the run says it is uncertified.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import pytest

from tests.neighbours import Pair, run_side
from tests.privacy.test_neighbour_diff import CASES, Case, _expand_root

# DP-UCBVI's release is its sequence of policies; at these sizes every run stays in its burn-in
# (the all-left plan), so its published regret does not move with the noise: checked below on
# the noise itself instead.
BURN_IN = {"dp-ucbvi-central", "dp-ucbvi-local"}
REPLAYED = [c for c in CASES if c.must_run and not c.marks and c.id not in BURN_IN]
# One case per system in the default suite; every case under `-m slow`.
FAST = {"dp-apvi-rho", "dp-vapvi-horizon", "gpope", "dp-lsw", "lstd-op", "dp-sgd-declared-m"}
FAST |= {"expert-dp-declared-L", "ips", "primorl", "sdp-pe"}
INSECURE = ("dp-apvi-rho", "gpope", "lstd-op", "ips", "dp-ucbvi-central")


def _published(run: Path) -> dict[str, str]:
    """Digest of every published file but config.json / privacy.json / plots (which follow)."""
    out = {}
    for path in sorted(run.rglob("*")):
        rel = path.relative_to(run).as_posix()
        if path.is_file() and rel not in ("config.json", "privacy.json") and "plots/" not in rel:
            data = path.read_bytes()
            if rel == "metrics.json":  # run times are no release
                metrics = json.loads(data)
                metrics = {
                    k: v for k, v in metrics.items() if "second" not in k and "time" not in k
                }
                data = json.dumps(metrics, sort_keys=True).encode()
            out[rel] = hashlib.sha256(data).hexdigest()
    return out


def _twice(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str):
    pair = Pair(tmp_path)
    case.build(pair)
    if pair.a.exists():  # the same data (and experts, tables) on both sides
        shutil.rmtree(pair.b)
        shutil.copytree(pair.a, pair.b)
    argv = [*_expand_root(case.argv, tmp_path), *extra]
    a = run_side(argv, pair.a, capsys)
    b = run_side(argv, pair.b, capsys)
    assert a.code == 0 and b.code == 0, f"{case.id}: {a.stderr.strip()} {b.stderr.strip()}"
    return pair, a, b


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=c.id, marks=() if c.id in FAST else (pytest.mark.slow,)) for c in REPLAYED],
)
def test_a_rerun_with_the_published_seed_does_not_reproduce_the_noise(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    pair, a, b = _twice(case, tmp_path, capsys)
    ja, jb = a.json["config.json"], b.json["config.json"]
    assert ja["seed"] == jb["seed"]  # the seed is published, and the same
    pa, pb = _published(pair.a / "run"), _published(pair.b / "run")
    assert pa.keys() == pb.keys()
    assert pa != pb, f"{case.id}: a rerun with the published seed reproduced every release"
    for side in (a, b):
        privacy = side.json["privacy.json"]
        assert privacy["certified"] is True
        assert privacy["private"] is True and math.isfinite(float(privacy["epsilon"]))


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES if c.id in INSECURE])
def test_insecure_reproducible_noise_repeats_and_is_not_certified(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    pair, a, _ = _twice(case, tmp_path, capsys, "--insecure-reproducible-noise")
    assert _published(pair.a / "run") == _published(pair.b / "run")
    privacy = a.json["privacy.json"]
    assert privacy["certified"] is False and privacy["private"] is False
    assert privacy["epsilon"] == "inf" and privacy["nominal_epsilon"] is not None
    assert a.json["config.json"]["insecure_reproducible_noise"] is True
    assert "NOT CERTIFIED" in a.stdout


def test_dp_ucbvi_draws_its_noise_from_the_secure_source_not_the_seeds() -> None:
    from privrl.online.ucbvi import _run_rngs
    from privrl.privacy.noise import NoiseSource

    env_a, noise_a = _run_rngs([0, 1], NoiseSource.secure())
    env_b, noise_b = _run_rngs([0, 1], NoiseSource.secure())
    assert all(g.secure for g in (*noise_a, *noise_b))
    # the users repeat from the seeds, the noise does not
    assert env_a[0].integers(1 << 60) == env_b[0].integers(1 << 60)
    assert noise_a[0].integers(1 << 60) != noise_b[0].integers(1 << 60)


def test_a_ledger_refuses_an_insecure_run_before_reading_the_data(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from privrl.cli.main import main
    from privrl.data import io

    monkeypatch.setenv("PRIVRL_LEDGER_REGISTRY", str(tmp_path / "registry"))
    (case,) = [c for c in CASES if c.id == "dp-apvi-rho"]
    pair = Pair(tmp_path)
    case.build(pair)
    data = pair.a / "data.h5"
    relation = ("--relation", "replace_one")
    assert main(["ledger", "init", str(data), "-e", "50", "-d", "1e-3", *relation]) == 0

    def no_reads(*args: object, **kwargs: object) -> None:
        raise AssertionError("the episodes were read")

    monkeypatch.setattr(io, "load_hdf5", no_reads)
    argv = [*_expand_root(case.argv, tmp_path), "--insecure-reproducible-noise"]
    capsys.readouterr()
    out = run_side(argv, pair.a, capsys)
    assert out.code == 2 and "ledger refuses" in out.stderr
    assert not (pair.a / "run" / "privacy.json").exists()
