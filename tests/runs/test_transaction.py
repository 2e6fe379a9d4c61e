"""A private run is a ledger transaction, end to end through `privrl train dp-apvi`: a crash
(SIGKILL) at any moment never leaves a published run directory without a counted spend; a
refused run (a concurrent run took the budget) leaves no file; an exception or Ctrl-C after
the data were read publishes nothing and leaves the reservation counted; `privrl ledger
settle` settles a reservation whose run died."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from privrl.cli.main import main
from privrl.envs.tabular import TabularMDP, behaviour_policy_full_support
from privrl.privacy.ledger import BudgetLedger

H, S, A = 4, 5, 3
# what a dp-apvi run publishes (any one of them on disk is a release)
RELEASE_FILES = ("config.json", "metrics.json", "metrics.csv", "privacy.json", "policy.npz")


@pytest.fixture
def ledgered(tmp_path: Path) -> tuple[Path, Path]:
    """A small tabular dataset with a ledger of ε = 50 (δ = 1e-6), and its reward table."""
    mdp = TabularMDP.random(S, A, H, seed=3)
    ds = mdp.sample(behaviour_policy_full_support(4, H, S, A, 0.1), 300, rng=5)
    data = tmp_path / "data.h5"
    ds.save(data)
    reward = tmp_path / "reward.npy"
    np.save(reward, np.asarray(mdp.R))
    BudgetLedger.init(data, epsilon=50.0, delta=1e-6, unit="trajectory", relation="replace_one")
    return data, reward


def _argv(data: Path, reward: Path, out: Path, rho: float = 0.01) -> list[str]:
    return [
        "train", "dp-apvi", "--data", str(data), "--horizon", str(H), "--rho", str(rho),
        "--reward-table", str(reward), "--out", str(out),
    ]  # fmt: skip


def _published(out: Path) -> list[str]:
    """The release files of `out` (none if it does not exist)."""
    return sorted(n for n in RELEASE_FILES if (out / n).exists())


def _leftovers(root: Path, out: Path) -> list[str]:
    """Every file or folder a run of `out` left: in `out` and hidden beside it."""
    found = [str(p.relative_to(root)) for p in out.rglob("*")] if out.exists() else []
    found += [p.name for p in root.iterdir() if p.name.startswith(f".{out.name}.")]
    return sorted(found + ([out.name] if out.exists() else []))


def _lost_spends(ledger: BudgetLedger, outs: list[Path]) -> list[Path]:
    """Published run directories without a counted spend (complete or reserved) naming them."""
    counted = {e.out for e in ledger.entries if e.status in ("complete", "reserved")}
    return [out for out in outs if _published(out) and str(out.resolve()) not in counted]


def _subprocess_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **extra}


def _cli(argv: list[str], **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "privrl.cli.main", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_subprocess_env(**env),
    )


# -- (a) SIGKILL: 0 lost spends ---------------------------------------------------------------


@pytest.mark.parametrize("point", ["reserved", "staged", "published", "completed"])
def test_sigkill_at_each_point_of_a_run_loses_no_spend(
    ledgered: tuple[Path, Path], tmp_path: Path, point: str
) -> None:
    """Property (fail closed): a run SIGKILLed at a fixed point (after the reservation, after
    staging, right after the files appear, after the completion) leaves either nothing
    published or a published directory whose spend is counted; before publication nothing is
    published."""
    data, reward = ledgered
    out = tmp_path / "run"
    proc = _cli(_argv(data, reward, out), PRIVRL_TEST_KILL_AT=point)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, err
    ledger = BudgetLedger.for_dataset(data)
    assert ledger is not None
    (entry,) = ledger.entries  # the data were read: the spend counts in every case
    assert entry.status == ("complete" if point == "completed" else "reserved")
    assert entry.out == str(out.resolve())
    if point in ("reserved", "staged"):
        assert _published(out) == []
    else:
        assert _published(out) == sorted(RELEASE_FILES)
    assert _lost_spends(ledger, [out]) == []


def _started(proc: subprocess.Popen[str], out: Path) -> float:
    """Wait until the run has reached its ledger step (its --out appears, just before the
    reservation; interpreter start-up and imports come first); the time it took."""
    start = time.monotonic()
    while proc.poll() is None and not out.exists():
        time.sleep(0.001)
    return time.monotonic() - start


@pytest.mark.slow
def test_sigkill_at_random_moments_never_loses_a_spend(
    ledgered: tuple[Path, Path], tmp_path: Path
) -> None:
    """Property: over 30 runs SIGKILLed at random moments (uniform over the run's work from its
    ledger step to its end, measured first, and a little beyond), every published run
    directory has a counted spend: 0 lost spends."""
    data, reward = ledgered
    proc = _cli(_argv(data, reward, tmp_path / "timing"))
    _started(proc, tmp_path / "timing")
    start = time.monotonic()
    assert proc.wait(timeout=300) == 0
    work = time.monotonic() - start
    rng = random.Random(20261201)
    outs = []
    for trial in range(30):
        out = tmp_path / f"run{trial}"
        outs.append(out)
        proc = _cli(_argv(data, reward, out))
        _started(proc, out)
        time.sleep(rng.uniform(0.0, 1.2 * work))
        proc.kill()
        proc.wait(timeout=60)
    ledger = BudgetLedger.for_dataset(data)
    assert ledger is not None
    assert _lost_spends(ledger, outs) == []
    assert any(_published(out) for out in outs)  # the kills hit after publication too


# -- (b) a refused run leaves no file ---------------------------------------------------------


def test_the_refused_one_of_two_concurrent_runs_leaves_no_file(
    ledgered: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Property: two runs against a budget that fits one: the second starts while the first
    is reading its data; exactly one is refused, and it leaves 0 files (nothing in or beside
    its --out); the other is published with one counted spend."""
    data, reward = ledgered
    ledger = BudgetLedger.for_dataset(data)
    assert ledger is not None
    BudgetLedger.init(
        data, epsilon=0.75, delta=1e-6, unit="trajectory", relation="replace_one", overwrite=True
    )  # ρ = 0.01 spends ε ≈ 0.62 (RDP), two runs ≈ 0.9: one run fits, two do not
    from privrl.runs import registry

    system = type(registry.get("dp-apvi"))
    load = system.load
    second: list[int] = []
    started: list[bool] = []

    def load_then_race(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not started:  # the first run is inside its transaction: start the second
            started.append(True)
            second.append(main(_argv(data, reward, tmp_path / "b")))
        return load(self, *args, **kwargs)

    monkeypatch.setattr(system, "load", load_then_race)
    first = main(_argv(data, reward, tmp_path / "a"))
    err = capsys.readouterr().err
    codes = {"a": first, "b": second[0]}
    assert sorted(codes.values()) == [0, 2], err
    refused = next(name for name, code in codes.items() if code == 2)
    winner = "a" if refused == "b" else "b"
    assert "refuses this run" in err
    assert _leftovers(tmp_path, tmp_path / refused) == []  # before: policy.npz, metrics.csv, plots
    assert _published(tmp_path / winner) == sorted(RELEASE_FILES)
    final = BudgetLedger.for_dataset(data)
    assert final is not None
    assert [(e.status, e.out) for e in final.entries] == [
        ("complete", str((tmp_path / winner).resolve()))
    ]


# -- (c) an exception or Ctrl-C after the data were read -------------------------------------


@pytest.mark.parametrize("where", ["run", "artefacts"])
@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_an_interrupted_run_publishes_nothing_and_keeps_its_spend_counted(
    ledgered: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    where: str,
    error: type[BaseException],
) -> None:
    """Property (fail closed): an exception or Ctrl-C raised after the data were read (in the
    system's run, or while the run directory is being written: its artefacts) leaves 0 files in
    or beside --out and one reservation, still counted."""
    data, reward = ledgered
    from privrl.runs import layer, registry

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise error("stop")

    if where == "run":
        monkeypatch.setattr(type(registry.get("dp-apvi")), "run", boom)
    else:
        monkeypatch.setattr(layer, "_write_artifact", boom)
    out = tmp_path / "run"
    code = main(_argv(data, reward, out))
    err = capsys.readouterr().err
    assert code == (130 if error is KeyboardInterrupt else 1), err
    assert _leftovers(tmp_path, out) == []  # before: config, metrics, privacy.json, policy.npz
    ledger = BudgetLedger.for_dataset(data)
    assert ledger is not None
    (entry,) = ledger.entries
    assert entry.status == "reserved" and ledger.spent() > 0


# -- settling a reservation whose run died -----------------------------------------------------


def test_ledger_settle_keeps_or_releases_a_dead_run_s_reservation(
    ledgered: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`ledger show` lists a killed run as "reserved, outcome unknown"; `settle --release` is
    refused while the run directory exists and needs a reason; `--complete` keeps the spend."""
    data, reward = ledgered
    ids = []
    for name, point in (("kept", "published"), ("gone", "reserved")):
        proc = _cli(_argv(data, reward, tmp_path / name), PRIVRL_TEST_KILL_AT=point)
        proc.communicate(timeout=300)
        ledger = BudgetLedger.for_dataset(data)
        assert ledger is not None
        ids.append(ledger.entries[-1].run_id)
    kept, gone = ids
    monkeypatch.setenv("COLUMNS", "400")  # one table row per line
    assert main(["ledger", "show", str(data)]) == 0
    shown = capsys.readouterr().out
    assert shown.count("reserved, outcome unknown") == 2 and "ledger settle" in shown
    code = main(["ledger", "settle", str(data), kept, "--release", "--reason", "not published"])
    assert code == 2 and "may have published" in capsys.readouterr().err
    assert main(["ledger", "settle", str(data), gone, "--release"]) == 2
    assert "--reason" in capsys.readouterr().err
    assert main(["ledger", "settle", str(data), kept, "--complete"]) == 0
    reason = "killed before it wrote anything"
    # the killed run left its (unpublished) staging folder: refused until the holder deletes it
    assert main(["ledger", "settle", str(data), gone, "--release", "--reason", reason]) == 2
    (staging,) = [p for p in tmp_path.iterdir() if p.name.startswith(".gone.")]
    assert "may have published" in capsys.readouterr().err
    shutil.rmtree(staging)
    assert main(["ledger", "settle", str(data), gone, "--release", "--reason", reason]) == 0
    ledger = BudgetLedger.for_dataset(data)
    assert ledger is not None
    assert [e.status for e in ledger.entries] == ["complete", "released"]
    assert main(["ledger", "settle", str(data), gone, "--complete"]) == 2
    assert "not a pending reservation" in capsys.readouterr().err
