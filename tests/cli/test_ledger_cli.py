"""`privrl ledger` and the ledger as private runs see it, through the CLI: one budget per
episodes (copies refused once spent), a dataset whose ledger is lost refused, tampered ledgers
refused, ledgered datasets never overwritten, and the bad-input contract (exit 2, one `error:`
line, no traceback)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import pytest
from dp_accounting import dp_event

from privrl.cli.main import main
from privrl.envs.tabular import TabularMDP, behaviour_policy_full_support
from privrl.privacy.ledger import BudgetLedger
from privrl.privacy.release import Release
from privrl.privacy.report import PrivacyReport

H, S, A = 4, 5, 3
# ρ = 1 needs ε ≈ 7.8 at δ = 1e-6 under replace-one: a budget of 10 admits exactly one run.
TRAIN = ["train", "dp-apvi", "--horizon", str(H), "--rho", "1", "--privatize-rewards"]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_bad_input(code: int, err: str, *fragments: str) -> None:
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error:"), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture
def data(tmp_path: Path) -> Path:
    mdp = TabularMDP.random(S, A, H, seed=3)
    mu = behaviour_policy_full_support(4, H, S, A, 0.1)
    return mdp.sample(mu, 300, rng=5).save(tmp_path / "a.h5")


def init(data: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> None:
    argv = ["ledger", "init", str(data), "-e", "10", "-d", "1e-6", "--relation", "replace_one"]
    code, _, err = run([*argv, *extra], capsys)
    assert code == 0, err


def train(data: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    return run([*TRAIN, "--data", str(data), "--out", str(out)], capsys)


def small_spend(ledger: BudgetLedger) -> PrivacyReport:
    event = dp_event.GaussianDpEvent(50.0)
    release = Release("counts", "gaussian", 1.0, "l2", {"noise_multiplier": 50.0}, event=event)
    report = PrivacyReport.build(ledger.unit, ledger.relation, [release], 1e-6, system="test")
    ledger.record(report, label="small")
    return report


def test_init_show_and_json_list_the_files_of_the_episodes(data, tmp_path, capsys):
    """`ledger show` names the ledger's budget and every file known to hold the episodes
    (init's file, and files whose runs were resolved through the registry)."""
    init(data, capsys)
    copy = tmp_path / "copy.h5"
    shutil.copyfile(data, copy)
    code, out, err = run(["ledger", "show", str(copy), "--json"], capsys)
    assert code == 0, err
    shown = json.loads(out)
    assert shown["budget"] == {"epsilon": 10.0, "delta": 1e-6}
    assert shown["spent"]["epsilon"] == 0.0 and shown["schema_version"] == 2
    assert shown["files"] == [str(data.resolve()), str(copy.resolve())]
    code, out, err = run(["ledger", "show", str(data)], capsys)
    assert code == 0, err
    assert "copy.h5" in out.replace("\n", "") and "ε_total=10" in out
    code, out, err = run(["ledger", "verify", str(copy)], capsys)
    assert code == 0 and out.startswith("ok:"), err


def test_private_run_on_a_copy_of_a_spent_dataset_is_refused(data, tmp_path, capsys):
    """Finding 1: `cp a.h5 b.h5` does not escape the budget — after a run spends a.h5's
    budget, the same run on b.h5 (or on a renamed copy elsewhere) is refused, with the
    remaining budget in the message, and b.h5's run is not recorded."""
    init(data, capsys)
    code, _, err = train(data, tmp_path / "r1", capsys)
    assert code == 0, err
    copy = tmp_path / "b.h5"
    shutil.copyfile(data, copy)
    code, _, err = train(copy, tmp_path / "r2", capsys)
    assert_bad_input(code, err, "ε_total=10", "composed with the 1 recorded run")
    assert not (tmp_path / "r2" / "privacy.json").exists()
    moved = tmp_path / "elsewhere" / "renamed.h5"
    moved.parent.mkdir()
    shutil.copyfile(data, moved)
    code, _, err = train(moved, tmp_path / "r3", capsys)
    assert_bad_input(code, err, "ε_total=10")
    ledger = BudgetLedger.for_dataset(data)
    assert ledger is not None and len(ledger.entries) == 1


def test_run_on_a_ledgered_dataset_whose_ledger_is_gone_is_refused(
    data, tmp_path, capsys, monkeypatch
):
    """Finding 2: a dataset marked as ledgered whose ledger was deleted — or a copy taken to
    a machine whose registry does not know it — is refused before the data are read."""
    init(data, capsys)
    (data.parent / "a.h5.ledger.json").unlink()
    code, _, err = train(data, tmp_path / "r1", capsys)
    assert_bad_input(code, err, "this dataset is bound to a privacy ledger", "restore")
    assert not (tmp_path / "r1" / "privacy.json").exists()

    init(data, capsys, "--force")  # a new budget, by explicit choice
    elsewhere = tmp_path / "machine2"
    elsewhere.mkdir()
    shutil.copyfile(data, elsewhere / "a.h5")
    monkeypatch.setenv("PRIVRL_LEDGER_REGISTRY", str(tmp_path / "registry2"))
    code, _, err = train(elsewhere / "a.h5", tmp_path / "r2", capsys)
    assert_bad_input(code, err, "this dataset is bound to a privacy ledger")
    assert not (tmp_path / "r2" / "privacy.json").exists()


def _set(path: Path, *keys_and_value) -> None:
    data = json.loads(path.read_text())
    *keys, last, value = keys_and_value
    target = data
    for key in keys:
        target = target[key]
    target[last] = value
    path.write_text(json.dumps(data, indent=1))


@pytest.mark.parametrize(
    ("tamper", "fragment"),
    [
        (lambda p: _set(p, "budget", "epsilon", float("inf")), "Infinity"),
        (lambda p: _set(p, "budget", "epsilon", 100.0), "modified outside privrl"),
        (lambda p: _set(p, "entries", []), "modified outside privrl"),
        (lambda p: _set(p, "entries", 0, "report", "epsilon", 1e-9), "modified outside privrl"),
    ],
    ids=["budget-infinity", "budget-raised", "entries-emptied", "spend-edited"],
)
def test_tampered_ledgers_are_refused(data, tmp_path, capsys, tamper, fragment):
    """Finding 3: a ledger whose budget was set to Infinity or raised, whose entries were
    emptied or whose recorded spend was edited is refused with one clean error line; the run
    is not executed."""
    init(data, capsys)
    ledger = BudgetLedger.for_dataset(data)
    assert ledger is not None
    small_spend(ledger)
    tamper(ledger.path)
    code, _, err = train(data, tmp_path / "r", capsys)
    assert_bad_input(code, err, fragment)
    assert not (tmp_path / "r" / "privacy.json").exists()
    code, _, err = run(["ledger", "show", str(data)], capsys)
    assert_bad_input(code, err, fragment)


def test_data_import_and_collect_refuse_to_overwrite_a_ledgered_dataset(data, tmp_path, capsys):
    """Finding 4: `data import --out X` and `data collect --out X` refuse to replace a dataset
    that has a ledger next to it, carries the ledger mark (a copy) or is known to the
    registry (a re-export); the file is left untouched. Unledgered files are still replaced."""
    other = tmp_path / "other.h5"
    shutil.copyfile(data, other)  # before init: an unmarked, but registered, copy
    fresh = TabularMDP.random(S, A, H, seed=4).sample(
        behaviour_policy_full_support(4, H, S, A, 0.1), 20, rng=1
    )
    source = fresh.save(tmp_path / "source.h5")
    init(data, capsys)
    marked = tmp_path / "marked.h5"
    shutil.copyfile(data, marked)
    for target, fragment in [
        (data, "has a privacy ledger"),
        (marked, "bound to the privacy ledger"),
        (other, "registry"),
    ]:
        before = target.read_bytes()
        code, _, err = run(["data", "import", str(source), "--out", str(target)], capsys)
        assert_bad_input(code, err, "refusing to overwrite", fragment, "another file (--out)")
        argv = ["data", "collect", "--env", "CartPole-v1", "-n", "1", "--out", str(target)]
        code, _, err = run(argv, capsys)
        assert_bad_input(code, err, "refusing to overwrite", "another file (--out)")
        assert target.read_bytes() == before
    plain = TabularMDP.random(S, A, H, seed=5).sample(
        behaviour_policy_full_support(4, H, S, A, 0.1), 5, rng=2
    )
    unledgered = plain.save(tmp_path / "plain.h5")
    code, _, err = run(["data", "import", str(source), "--out", str(unledgered)], capsys)
    assert code == 0, err


def test_init_refuses_a_file_that_is_not_a_dataset(tmp_path, capsys):
    """Finding 5: `ledger init` on a file that is not a privrl dataset is a clean error and
    writes no ledger."""
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    code, _, err = run(["ledger", "init", str(notes), "-e", "1", "-d", "1e-6"], capsys)
    assert_bad_input(code, err, "not a privrl dataset")
    assert not (tmp_path / "notes.txt.ledger.json").exists()


def test_directories_in_place_of_the_ledger_or_its_lock(data, tmp_path, capsys):
    """Finding 5: a ledger path or its `.lock` that is a directory is one `error:` line, not
    an IsADirectoryError traceback."""
    ledger_dir = data.parent / "a.h5.ledger.json"
    ledger_dir.mkdir()
    code, _, err = train(data, tmp_path / "r", capsys)
    assert_bad_input(code, err, "is a directory")
    code, _, err = run(["ledger", "init", str(data), "-e", "1", "-d", "1e-6"], capsys)
    assert_bad_input(code, err, "directory")
    ledger_dir.rmdir()
    (data.parent / "a.h5.ledger.json.lock").mkdir()
    code, _, err = run(["ledger", "init", str(data), "-e", "1", "-d", "1e-6"], capsys)
    assert_bad_input(code, err, "directory")


def test_verify_re_hashes_the_episodes(data, tmp_path, capsys):
    """`ledger verify` recomputes the fingerprint: episodes edited in place (the stored
    fingerprint left as it was) are reported, although a run's fast check trusts the stored
    one."""
    init(data, capsys)
    with h5py.File(data, "r+") as f:
        f["rewards"][0] = 1.0 - f["rewards"][0]
    code, _, err = run(["ledger", "verify", str(data)], capsys)
    assert_bad_input(code, err, "do not match its stored fingerprint")
