"""Bad input that used to get through some path: one ε range for every way a budget enters
(a flag, a `privrl run` file, a sweep cell, an audit, a ledger), config files whose values have
the wrong type, damaged policy and array files, impossible sweep grids, an unreachable Ray
cluster, `--resume` where nothing resumes, binary TOML files. Every refusal is the bad-input
contract: exit code 2 and one stderr line starting `error:` that names the problem (no
traceback), before any work starts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from privrl.cli.main import main
from privrl.envs.tabular import TabularMDP, behaviour_policy_full_support
from privrl.offline.apvi import FiniteHorizonPolicy

H, S, A = 4, 5, 3


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_bad_input(code: int, err: str, *fragments: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert code == 2, (code, err)
    assert len(lines) == 1, err
    assert lines[0].startswith("error:"), err
    assert "internal error" not in lines[0], err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    mdp = TabularMDP.random(S, A, H, seed=3)
    mu = behaviour_policy_full_support(4, H, S, A, 0.1)
    return mdp.sample(mu, 300, rng=5).save(tmp_path / "d.h5")


def write_toml(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def apvi_toml(tmp_path: Path, data: Path, out: str, extra: str) -> Path:
    text = f'system = "dp-apvi"\ndata = "{data}"\nout = "{tmp_path / out}"\n'
    return write_toml(tmp_path / f"{out}.toml", text + "privatize_rewards = true\n" + extra)


# --------------------------------------------------------------------------------------------
# one ε range for every path
# --------------------------------------------------------------------------------------------


def test_run_file_accepts_the_epsilon_the_flag_accepts(
    tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: the same file at ε = 1 runs (so the refusals below are about ε)."""
    code, _, err = run(["run", str(apvi_toml(tmp_path, data, "ok", "epsilon = 1.0\n"))], capsys)
    assert code == 0, err
    assert (tmp_path / "ok" / "privacy.json").is_file()


@pytest.mark.parametrize("epsilon", ["1000.0", "1e300", "1e-9"])
def test_run_file_refuses_an_epsilon_the_flag_refuses(
    tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str], epsilon: str
) -> None:
    toml = apvi_toml(tmp_path, data, "big", f"epsilon = {epsilon}\n")
    code, _, flag_err = run(
        ["train", "dp-apvi", "--data", str(data), "--out", str(tmp_path / "flag"),
         "--privatize-rewards", "--epsilon", epsilon],
        capsys,
    )  # fmt: skip
    flag_line = assert_bad_input(code, flag_err, "--epsilon")
    code, _, file_err = run(["run", str(toml)], capsys)
    file_line = assert_bad_input(code, file_err, str(toml), "epsilon")
    # the same check: the same problem text after the name of the flag / key
    assert flag_line.split("--epsilon ", 1)[1] == file_line.split("epsilon ", 1)[1]
    assert not (tmp_path / "big").exists() and not (tmp_path / "flag").exists()


def test_every_system_holds_epsilon_to_the_library_range() -> None:
    """Every registered system with an ε refuses ε = 1000 and 1e-9 by the one range of
    `privrl.privacy.limits`, before its own checks (so no system can drift)."""
    from privrl.config import ConfigError
    from privrl.privacy.limits import epsilon_problem
    from privrl.runs import catalog, registry

    catalog.load()
    with_epsilon = [
        name
        for name in registry.names()
        if "epsilon" in {f.name for f in dataclasses.fields(registry.get(name).Config)}
    ]
    assert len(with_epsilon) >= 15, with_epsilon  # the audits, OPE, tabular, online, deep
    for name in with_epsilon:
        for bad in (1000.0, 1e-9, float("nan"), float("inf")):
            with pytest.raises(ConfigError) as info:
                registry.get(name).Config.from_dict({"epsilon": bad})
            assert info.value.key == "epsilon", (name, bad, str(info.value))
            if bad == bad:  # (a NaN may be refused on conversion, as "not a number")
                assert info.value.problem == epsilon_problem(bad), (name, bad)


def test_sweep_refuses_a_grid_with_an_out_of_range_cell_before_any_cell_runs(
    tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sw"
    grid = write_toml(
        tmp_path / "grid.toml",
        f'system = "dp-apvi"\ndata = "{data}"\nout = "{out}"\nprivatize_rewards = true\n'
        "[grid]\nepsilon = [1.0, 1000.0]\n",
    )
    code, _, err = run(["sweep", str(grid), "--backend", "local", "-j", "1"], capsys)
    assert_bad_input(code, err, "cell 2", "epsilon=1000", "at most 100")
    assert not list(out.glob("cells/*")), "a cell ran before the grid was refused"


def test_audit_refuses_an_epsilon_out_of_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "audit"
    code, _, err = run(["audit", "dp-apvi", "--epsilon", "1000", "--out", str(out)], capsys)
    assert_bad_input(code, err, "--epsilon", "at most 100")
    assert not out.exists()


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--epsilon", "1e300", "--delta", "1e-5"], "at most 100"),
        (["--epsilon", "1e-9", "--delta", "1e-5"], "at least 1e-06"),
        (["--epsilon", "1", "--delta", "1"], "(0, 1)"),
    ],
)
def test_ledger_init_holds_the_budget_to_the_same_range(
    data: Path, capsys: pytest.CaptureFixture[str], flags: list[str], fragment: str
) -> None:
    from privrl.privacy.ledger import LedgerError, ledgered

    code, _, err = run(["ledger", "init", str(data), *flags], capsys)
    assert_bad_input(code, err, flags[0] if fragment != "(0, 1)" else "--delta", fragment)
    assert ledgered(data) is None
    from privrl.privacy.ledger import BudgetLedger

    eps, delta = float(flags[1]), float(flags[3])
    with pytest.raises(LedgerError, match="total"):
        BudgetLedger.init(data, epsilon=eps, delta=delta, unit="trajectory", relation="add_remove")
    assert ledgered(data) is None


# --------------------------------------------------------------------------------------------
# config values of the wrong type, damaged files
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("line", ["data = 123", "data = true", "out = 5"])
def test_run_file_with_a_non_path_data_or_out_is_bad_input(
    tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str], line: str
) -> None:
    key = line.split(" ")[0]
    values = {"data": f'"{data}"', "out": f'"{tmp_path / "r"}"'}
    values[key] = line.split(" = ")[1]
    toml = write_toml(
        tmp_path / "t.toml",
        f'system = "dp-apvi"\ndata = {values["data"]}\nout = {values["out"]}\nepsilon = 1.0\n',
    )
    code, _, err = run(["run", str(toml)], capsys)
    assert_bad_input(code, err, str(toml), f"{key} must be a path")


def _halved(path: Path) -> Path:
    raw = path.read_bytes()
    half = path.with_name("half-" + path.name)
    half.write_bytes(raw[: len(raw) // 2])
    return half


@pytest.fixture
def policy_npz(tmp_path: Path) -> Path:
    actions = np.zeros((H, S), dtype=np.int64)
    return FiniteHorizonPolicy(actions, A).save(tmp_path / "policy.npz")


def test_ope_ips_with_a_truncated_policy_npz_names_the_file(
    tmp_path: Path, data: Path, policy_npz: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["ope", "ips", "--data", str(data), "--epsilon", "1", "-W", "10",
            "--reward-range", "0,1", "--out", str(tmp_path / "o")]  # fmt: skip
    code, _, err = run([*argv, "--target-policy", str(policy_npz)], capsys)
    assert code == 0, err  # the intact file is a valid target
    half = _halved(policy_npz)
    code, _, err = run([*argv[:-1], str(tmp_path / "o2"), "--target-policy", str(half)], capsys)
    assert_bad_input(code, err, "--target-policy", str(half), "cannot read")
    assert not (tmp_path / "o2").exists()


@pytest.mark.parametrize("name", ["policy.npz", "learner.pt"])
def test_eval_with_a_truncated_policy_file_names_the_file(
    tmp_path: Path, policy_npz: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    if name == "learner.pt":
        import torch

        torch.save({"kind": "sac", "weights": torch.zeros(4096)}, tmp_path / name)
    half = _halved(tmp_path / name)
    code, _, err = run(["eval", str(half), "--env", "FrozenLake-v1", "-n", "2"], capsys)
    assert_bad_input(code, err, str(half), "cannot read")


@pytest.mark.parametrize("suffix", [".npy", ".npz", ".pt"])
def test_the_safe_loader_turns_any_damage_into_one_error_naming_the_file(
    tmp_path: Path, suffix: str
) -> None:
    import torch

    from privrl.data.files import UnreadableFileError, read_npy, read_npz, read_torch

    path = tmp_path / f"a{suffix}"
    big = np.arange(50_000, dtype=np.float64)
    if suffix == ".npy":
        np.save(path, big)
    elif suffix == ".npz":
        np.savez_compressed(path, a=big, b=big)
    else:
        torch.save({"a": torch.zeros(50_000)}, path)
    reader = {".npy": read_npy, ".npz": read_npz, ".pt": read_torch}[suffix]
    assert reader(path, "--x") is not None
    raw = path.read_bytes()
    damaged = [raw[: len(raw) // 2], raw[:10], b"\xff\xfe not an array" * 10]
    if suffix == ".npz":  # the central directory intact, a member's bytes flipped
        flipped = bytearray(raw)
        flipped[200:2000] = bytes(1800)
        damaged.append(bytes(flipped))
    for i, content in enumerate(damaged):
        bad = tmp_path / f"bad{i}{suffix}"
        bad.write_bytes(content)
        with pytest.raises(UnreadableFileError) as info:
            reader(bad, "--x")
        assert str(bad) in str(info.value) and "--x" in str(info.value), str(info.value)


# --------------------------------------------------------------------------------------------
# sweeps: an impossible grid, an unreachable Ray cluster
# --------------------------------------------------------------------------------------------

SWEEP_TOYS = '[sweep]\nimports = ["tests.runs.sweep_toys"]\n'


def test_count_cells_is_the_number_of_cells_expand_builds(tmp_path: Path) -> None:
    import tests.runs.sweep_toys  # noqa: F401 - registers toy-work
    from privrl.runs.sweep import count_cells, expand

    doc = {
        "system": "toy-work",
        "out": str(tmp_path / "o"),
        "grid": {"epsilon": [0.5, 1.0], "crash": [False], "seeds": 3},
        "systems": {"toy-work": {"grid": {"work": [1, 2]}}},
        "cells": [{"epsilon": 4.0}, {"epsilon": 8.0, "seed": 7}],
    }
    sweep = expand(doc)
    grid = {"epsilon": [0.5, 1.0], "crash": [False]}
    per_system = {"toy-work": ({}, {"work": [1, 2]})}
    n = count_cells({"system": "toy-work"}, grid, [0, 1, 2], doc["cells"], per_system)
    assert n == len(sweep.cells) == 2 * 2 * 3 + 2 * 3 + 2


@pytest.mark.parametrize(
    ("grid", "count"),
    [("seeds = 100000000", "100,000,000"), ("epsilon = [1.0, 2.0]\nwork = RANGE", "120,000")],
)
def test_sweep_refuses_a_grid_beyond_the_cell_cap_with_its_count(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    grid: str,
    count: str,
) -> None:
    from privrl.runs import sweep as sweeps

    grid = grid.replace("RANGE", str(list(range(60_000))))
    out = tmp_path / "big"
    toml = write_toml(
        tmp_path / "big.toml", f'system = "toy-work"\nout = "{out}"\n[grid]\n{grid}\n' + SWEEP_TOYS
    )
    built: list[int] = []
    real_cell = sweeps._cell

    def counted(index: int, *args: object) -> object:
        built.append(index)
        return real_cell(index, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(sweeps, "_cell", counted)
    code, _, err = run(["sweep", str(toml), "--dry-run"], capsys)
    assert_bad_input(code, err, str(toml), f"{count} cells", f"{sweeps.MAX_CELLS:,}")
    assert built == [], "cells were built before the grid was refused"
    assert not out.exists()


def _free_loopback_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_sweep_on_an_unreachable_ray_cluster_is_one_error_before_ray_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ray = pytest.importorskip("ray")

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("ray.init was called for an address nothing answers at")

    monkeypatch.setattr(ray, "init", never)
    address = f"127.0.0.1:{_free_loopback_port()}"
    out = tmp_path / "sw"
    toml = write_toml(
        tmp_path / "g.toml",
        f'system = "toy-work"\nout = "{out}"\nwork = 1\n[grid]\nepsilon = [1.0, 2.0]\n'
        + SWEEP_TOYS,
    )
    code, _, err = run(["sweep", str(toml), "--backend", "ray", "--address", address], capsys)
    assert_bad_input(code, err, f"cannot reach the Ray cluster at {address}", "--backend local")
    assert not out.exists()  # nothing written


def test_an_address_that_never_answers_is_refused_after_the_connect_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    from privrl.runs import sweep as sweeps

    seen: list[float] = []

    def silent(address: tuple[str, int], timeout: float) -> None:
        seen.append(timeout)
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", silent)
    with pytest.raises(sweeps.SweepError, match="no answer within 10 s"):
        sweeps.check_reachable("ray://127.0.0.1:10001")
    assert seen == [sweeps.RAY_CONNECT_TIMEOUT] and sweeps.RAY_CONNECT_TIMEOUT <= 30
    sweeps.check_reachable("auto")  # left to Ray


# --------------------------------------------------------------------------------------------
# `privrl run`: --resume where nothing resumes, binary files
# --------------------------------------------------------------------------------------------


def test_run_resume_of_a_system_that_cannot_resume_is_refused(
    tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from privrl.runs import catalog, registry

    catalog.load()
    assert not registry.get("dp-apvi").resumable
    toml = apvi_toml(tmp_path, data, "ok", "epsilon = 1.0\n")
    code, _, err = run(["run", str(toml), "--resume"], capsys)
    assert_bad_input(code, err, "--resume", "dp-apvi cannot resume", "without --resume")
    assert not (tmp_path / "ok").exists()  # refused before the run


@pytest.mark.parametrize("command", ["run", "sweep"])
@pytest.mark.parametrize("content", [b"\xff\xfe\x00system = 1", bytes(range(256)) * 4])
def test_a_binary_toml_file_is_named_and_called_not_valid_toml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, content: bytes
) -> None:
    path = tmp_path / "binary.toml"
    path.write_bytes(content)
    code, _, err = run([command, str(path)], capsys)
    line = assert_bad_input(code, err, str(path), "is not valid TOML", "not UTF-8")
    assert line.count(str(path)) == 1, line


# --------------------------------------------------------------------------------------------
# `data import`: out-of-space observations
# --------------------------------------------------------------------------------------------


def _one_based_table(tmp_path: Path) -> Path:
    """States coded 1, 2, 3 (1-based) for a space declared discrete:3 (codes 0, 1, 2)."""
    path = tmp_path / "one_based.csv"
    rows = ["ep,state,a,r", "1,1,0,1", "1,2,1,0", "1,3,0,1", "2,3,1,0", "2,2,0,1", "2,1,1,0"]
    path.write_text("\n".join(rows) + "\n")
    return path


def _import(table: Path, out: Path, space: str, *extra: str) -> list[str]:
    return ["data", "import", str(table), "-c", "episode=ep,obs=state,action=a,reward=r",
            "--observation-space", space, "--action-space", "discrete:2", *extra,
            "--out", str(out)]  # fmt: skip


def test_one_based_discrete_codes_are_refused_with_the_count_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table, out = _one_based_table(tmp_path), tmp_path / "d.h5"
    code, _, err = run(_import(table, out, "discrete:3"), capsys)
    assert_bad_input(code, err, "2 observation value(s)", "'state' (2)", "--clip-out-of-space")
    assert not out.exists()  # nothing merged silently


def test_clipping_discrete_codes_needs_the_flag_and_says_how_many(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from privrl.data.io import load_hdf5

    table, out = _one_based_table(tmp_path), tmp_path / "d.h5"
    code, _, err = run(_import(table, out, "discrete:3", "--clip-observations"), capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if "clipped" in line]
    assert len(notes) == 1 and "2 observation value(s)" in notes[0], err
    assert load_hdf5(out).observations.max() == 2
    # a space that fits prints no clipping note, with or without the flag
    for extra in ((), ("--clip-observations",)):
        code, _, err = run(_import(table, tmp_path / "ok.h5", "discrete:4", *extra), capsys)
        assert code == 0 and "clipped" not in err, err


def test_data_import_help_documents_the_clipping_flag(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["data", "import", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--clip-observations" in text and "refused" in text


# --------------------------------------------------------------------------------------------
# what an interrupted run kept
# --------------------------------------------------------------------------------------------


def _interrupted_run(
    tmp_path: Path,
    data: Path,
    out: Path,
    files: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    signal_name: str = "SIGINT",
) -> str:
    """`train dp-apvi` whose run is interrupted after writing `files` into its --out."""
    from privrl.runs import cli as runs_cli
    from privrl.runs.console import Terminated

    def interrupted(spec: object, **kwargs: object) -> None:
        for name, text in files.items():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_text(text)
        raise Terminated() if signal_name == "SIGTERM" else KeyboardInterrupt()

    monkeypatch.setattr(runs_cli, "execute", interrupted)
    argv = ["train", "dp-apvi", "--data", str(data), "--epsilon", "1", "--privatize-rewards",
            "--out", str(out)]  # fmt: skip
    code, _, err = run(argv, capsys)
    assert code == (143 if signal_name == "SIGTERM" else 130), err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_the_kept_line_says_what_this_run_kept(
    tmp_path: Path,
    data: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    secret = "value-7.31415 derived from the data"
    a, b = tmp_path / "a", tmp_path / "b"
    kept_a = _interrupted_run(
        tmp_path, data, a, {"checkpoint.pt": secret, "dynamics.pt": secret}, monkeypatch, capsys
    )
    kept_b = _interrupted_run(tmp_path, data, b, {}, monkeypatch, capsys, "SIGTERM")
    assert kept_a != kept_b
    assert f"in {a}:" in kept_a and "checkpoint.pt" in kept_a and "dynamics.pt" in kept_a
    assert "resume" in kept_a and str(b) not in kept_a
    assert f"nothing ({b} was not created)" in kept_b and "checkpoint" not in kept_b
    assert kept_b.startswith("error: terminated (SIGTERM)")
    assert secret not in kept_a and "7.31415" not in kept_a  # names only, never contents
    assert "ledger show" in kept_a  # a run on a dataset: where its spends are listed


def test_what_was_kept_counts_finished_sweep_cells_by_their_status_files(tmp_path: Path) -> None:
    import json

    from privrl.runs.console import what_was_kept

    out = tmp_path / "sweep"
    for i, status in enumerate(["ok", "failed", "running"]):
        cell = out / "cells" / f"toy-{i}"
        cell.mkdir(parents=True)
        (cell / "cell.json").write_text(json.dumps({"status": status}))
    assert "1 of 3 sweep cells finished" in what_was_kept(out)
    (tmp_path / "empty").mkdir()
    assert what_was_kept(tmp_path / "empty") == f"nothing ({tmp_path / 'empty'} is empty)"


# --------------------------------------------------------------------------------------------
# no test asserts wall-clock time
# --------------------------------------------------------------------------------------------

CLOCKS = {"perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "process_time"}
TIMING_NAMES = {"elapsed", "duration", "took", "t0", "wall", "seconds_taken"}


def wall_clock_asserts(root: Path) -> list[str]:
    """`file:line` of every assert under `root` that compares a clock reading or a timing
    variable (`elapsed`, `duration`, ...) — speed belongs in benchmarks, not tests."""
    import ast

    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assert):
                continue
            for sub in ast.walk(node.test):
                clock = (
                    isinstance(sub, ast.Call)
                    and isinstance(sub.func, ast.Attribute)
                    and sub.func.attr in CLOCKS
                    and isinstance(sub.func.value, ast.Name)
                    and sub.func.value.id == "time"
                )
                timing = isinstance(sub, ast.Name) and sub.id in TIMING_NAMES
                if clock or timing:
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
                    break
    return found


def test_no_test_asserts_wall_clock_time(tmp_path: Path) -> None:
    bad = tmp_path / "t" / "test_x.py"
    bad.parent.mkdir()
    bad.write_text(
        "import time\n"
        "def test_a():\n    t0 = time.perf_counter()\n    assert time.perf_counter() - t0 < 1\n"
        "def test_b(elapsed=0.0):\n    assert elapsed < 1.0\n"
        "def test_c():\n    assert time.monotonic() > 0\n"
    )
    assert wall_clock_asserts(bad.parent) == ["test_x.py:4", "test_x.py:6", "test_x.py:8"]
    assert wall_clock_asserts(Path(__file__).resolve().parents[1]) == []
