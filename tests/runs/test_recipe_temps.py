"""Recipe builds leave no stale temporaries: a build killed hard (SIGKILL, power cut) never
reaches its atomic writers' cleanup, so the next build, holding the build lock, removes them
when it starts (resumes) and when it finishes; two builds of one recipe never interleave."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from privrl.cli.main import main
from privrl.data.io import load_hdf5
from privrl.runs.recipes import RecipeBusyError, build_lock, remove_stale_temps
from privrl.runs.recipes import expert as rx
from privrl.runs.recipes import primorl as rp
from privrl.runs.recipes.common import build_stem


def _plant(directory: Path, name: str, size: int = 1 << 20) -> Path:
    """A temporary as an atomic writer names it, as a killed build leaves it."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(b"\0" * size)
    return path


def test_remove_stale_temps_takes_only_temporaries(tmp_path: Path) -> None:
    stage = tmp_path / "stage"
    temps = [
        _plant(stage, ".agent-0.partial.pt.k2j3h4.tmp"),
        _plant(stage / "expert_chunks", ".chunk-0001.h5.abcd.tmp", 10),
    ]
    mkdtemp_dir = stage / ".experts.x8y7z6"
    (mkdtemp_dir / "inner").mkdir(parents=True)
    (mkdtemp_dir / "inner" / "experts.npz").write_bytes(b"x")
    keep = [
        _plant(stage, "agent-0.pt", 10),
        _plant(stage, "agent-0.partial.pt", 10),  # a resumable snapshot, not a temporary
        _plant(stage, ".hidden-config", 10),
        _plant(stage, "reference.json.tmp", 10),  # not hidden: not an atomic writer's temp
    ]
    with build_lock(stage, "test"):
        removed = remove_stale_temps(stage)
    assert sorted(removed) == sorted([*temps, mkdtemp_dir])
    assert not any(p.exists() for p in [*temps, mkdtemp_dir])
    assert all(p.exists() for p in keep)
    assert (stage / ".build.lock").exists()


def test_second_build_of_a_recipe_is_refused_while_one_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stage = tmp_path / build_stem(rp.recipe_spec("pendulum", True).name, 0, True)
    with build_lock(stage, "primorl-pendulum"):
        with pytest.raises(RecipeBusyError, match="another build of primorl-pendulum"):
            with build_lock(stage, "primorl-pendulum"):
                pass
        code = main(
            [
                "data",
                "collect",
                "--recipe",
                "primorl-pendulum",
                "--quick",
                "--data-dir",
                str(tmp_path),
            ]
        )
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.startswith("error: another build of primorl-pendulum")
    with build_lock(stage, "primorl-pendulum"):  # released: the next build may run
        pass


def test_finished_primorl_recipe_removes_a_killed_builds_temporaries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = rp.recipe_spec("pendulum", True)
    stem = build_stem(spec.name, 0, True)
    dataset = _plant(tmp_path, f"{stem}.h5", 100)  # the finished dataset (contents irrelevant)
    stale = [
        _plant(tmp_path, f".{stem}.h5.tmpa1b2.tmp"),  # the 105 MB case: the final write
        _plant(tmp_path / stem, ".agent-1.partial.pt.zz9.tmp"),
        _plant(tmp_path / stem, ".shard-00003.npz.q1.tmp"),
    ]
    other = _plant(tmp_path, ".other-recipe.h5.a1.tmp", 10)  # another recipe's: not ours
    code = main(
        ["data", "collect", "--recipe", "primorl-pendulum", "--quick", "--data-dir", str(tmp_path)]
    )
    assert code == 0, capsys.readouterr().err
    assert not any(p.exists() for p in stale)
    assert other.exists() and dataset.read_bytes() == b"\0" * 100


def test_resumed_expert_recipe_ends_without_temporaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = dataclasses.replace(
        rx.SPECS["cartpole"], n_experts=6, trajectories=3, experts_per_shard=4
    )
    whole = load_hdf5(rx.build_recipe(spec, tmp_path / "whole", progress=False))

    real, calls = rx._collect, {"n": 0}

    def killed_on_second_shard(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(rx, "_collect", killed_on_second_shard)
    with pytest.raises(KeyboardInterrupt):
        rx.build_recipe(spec, tmp_path / "resumed", progress=False)
    stage = tmp_path / "resumed" / "experts-cartpole"
    # what a SIGKILL at that moment would have left besides the finished stages
    stale = [
        _plant(stage, ".shard-0001.h5.k1l2.tmp"),
        _plant(stage, ".experts-cartpole.h5.m3n4.tmp"),
    ]
    monkeypatch.setattr(rx, "_collect", real)
    resumed = load_hdf5(rx.build_recipe(spec, tmp_path / "resumed", progress=False))
    assert resumed.equals(whole, check_metadata=False)
    assert not any(p.exists() for p in stale)
    assert not [p for p in stage.rglob(".*") if p.name != ".build.lock"]


def test_recipe_copy_to_out_is_atomic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = rp.recipe_spec("pendulum", True)
    stem = build_stem(spec.name, 0, True)
    _plant(tmp_path / "cache", f"{stem}.h5", 1000)
    out = tmp_path / "mine" / "pendulum.h5"
    code = main(
        [
            "data",
            "collect",
            "--recipe",
            "primorl-pendulum",
            "--quick",
            "--data-dir",
            str(tmp_path / "cache"),
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert out.read_bytes() == b"\0" * 1000
    assert [p.name for p in out.parent.iterdir()] == ["pendulum.h5"]  # no temporary left
