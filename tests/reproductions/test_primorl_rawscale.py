"""The PRIMORL / MOPO reports' raw-scale column: a return R' of privrl/Pendulum-v0 (per-step
r' = 1 + r/c_max, 200 steps) is R = c_max·(R' − 200) on Gymnasium Pendulum-v1's scale, the
cartpoles' returns are their own, and every report's raw column is that map of its return."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from privrl.envs.control import PENDULUM_MAX_COST
from reproductions.primorl import ablation as A
from reproductions.primorl import fig3 as F
from reproductions.primorl import mopo_report as M
from reproductions.primorl import table1 as T
from reproductions.primorl import table1_report as R
from reproductions.primorl.sweeps import Scale, raw_map

PENDULUM = "privrl/Pendulum-v0"


def _inverse(ret: float) -> float:
    return PENDULUM_MAX_COST * (ret - 200.0)


def test_raw_map_is_the_inverse_transform_over_the_horizon() -> None:
    a, b = raw_map(PENDULUM)
    assert b == pytest.approx(PENDULUM_MAX_COST)
    assert a + b * 200.0 == pytest.approx(0.0)  # every step at zero cost
    assert a + b * 0.0 == pytest.approx(-200.0 * PENDULUM_MAX_COST)  # every step at c_max
    for env_id in ("privrl/CartpoleBalance-v0", "privrl/CartpoleSwingup-v0", "Pendulum-v1"):
        assert raw_map(env_id) == (0.0, 1.0)  # already on its source's scale


def test_raw_map_matches_the_two_simulators_episode_for_episode() -> None:
    """The same actions from the same seed: Pendulum-v1's return is the map of
    privrl/Pendulum-v0's (so the map is the one the simulators apply, not a guess)."""
    import gymnasium as gym

    from privrl.envs.control import make_env

    rng = np.random.default_rng(3)
    actions = rng.uniform(-2.0, 2.0, size=(200, 1)).astype(np.float32)
    returns = []
    for env in (make_env(PENDULUM), gym.make("Pendulum-v1")):
        env.reset(seed=11)
        total, steps, done = 0.0, 0, False
        while not done:
            _, r, terminated, truncated, _ = env.step(actions[steps])
            total, steps, done = total + float(r), steps + 1, terminated or truncated
        assert steps == 200
        returns.append(total)
        env.close()
    a, b = raw_map(PENDULUM)
    assert a + b * returns[0] == pytest.approx(returns[1], rel=1e-5, abs=1e-3)


def _raw_cells(text: str, header: str) -> list[tuple[float, float, float, float]]:
    """(return, ci, raw return, raw ci) of every table row whose header names `header`."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if header in line)
    cols = [c.strip() for c in lines[head].strip("|").split("|")]
    ours = cols.index(next(c for c in cols if c.startswith("our return ±")))
    raw = cols.index(header)
    out = []
    for line in lines[head + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[ours] in ("not run", "pending"):
            continue
        r, ci = (float(v) for v in re.split(r" ± ", cells[ours]))
        rr, rci = (float(v) for v in re.split(r" ± ", cells[raw]))
        out.append((r, ci, rr, rci))
    return out


def _check(rows: list[tuple[float, float, float, float]], n: int) -> None:
    assert len(rows) == n
    for r, ci, rr, rci in rows:  # printed to 0.1: the map of the printed return, within rounding
        assert rr == pytest.approx(_inverse(r), abs=0.05 * PENDULUM_MAX_COST + 0.06)
        assert rci == pytest.approx(PENDULUM_MAX_COST * ci, abs=0.05 * PENDULUM_MAX_COST + 0.06)
        assert rr <= 0.0


def _cell(system: str, variant: str | None, ret: float, eps: float | None) -> dict:
    return {
        "system": system,
        "variant": variant,
        "status": "ok",
        "env_id": PENDULUM,
        "return_mean": ret,
        "normalised_score": 60.0,
        "privacy_epsilon": eps,
        "curve": [ret - 5, ret],
    }


def test_table1_raw_column_is_the_inverse_map(tmp_path: Path) -> None:
    rows = [
        *(_cell("mopo", None, r, None) for r in (190.0, 192.5)),
        *(_cell("primorl", "no-privacy", r, None) for r in (188.0, 190.0)),
        *(_cell("primorl", "low", r, 20.0) for r in (185.0, 187.0)),
        *(_cell("primorl", "high", r, 4.0) for r in (150.0, 161.0)),
    ]
    summary = T.summarise(rows)
    for s in summary.values():
        assert s["raw_return"] == pytest.approx(_inverse(s["return"]))
        assert s["raw_ci"] == pytest.approx(PENDULUM_MAX_COST * s["ci"])
    text = R.write_report(tmp_path, rows, Scale(seeds=2), data=Path("d.h5"), wall=1.0).read_text()
    _check(_raw_cells(text, "raw Pendulum-v1 return ± 95% CI"), 4)
    assert "R = c_max·(R' − H)" in text and "cannot be mapped" in text
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["high"]["raw_return"] == pytest.approx(_inverse(155.5))


def test_rows_without_an_env_id_have_no_raw_column_value(tmp_path: Path) -> None:
    rows = [{**_cell("mopo", None, r, None), "env_id": ""} for r in (190.0, 191.0)]
    s = T.summarise(rows)["mopo"]
    assert "raw_return" not in s
    text = R.write_report(tmp_path, rows, Scale(seeds=2), data=Path("d.h5"), wall=1.0).read_text()
    assert "| 190.5 ± " in text and "| — |" in text


def test_ablation_and_fig3_raw_columns_are_the_inverse_map(tmp_path: Path) -> None:
    rows = [
        {**_cell("mopo", None, r, None), "task": "pendulum", "seed": s}
        for s, r in enumerate((190.0, 191.0))
    ]
    for s, r in enumerate((170.0, 174.0)):
        rows.append(
            {**_cell("primorl", "low", r, 20.0), "task": "pendulum", "seed": s,
             "penalty": None, "clip_mode": None}
        )  # fmt: skip
    text = A.write_report(
        tmp_path / "a", rows, Scale(seeds=2), datasets={"pendulum": Path("d.h5")},
        missing={}, wall=1.0,
    ).read_text()  # fmt: skip
    _check(_raw_cells(text, "raw-scale return ± 95% CI"), 1)
    assert f"raw scale {_inverse(190.5):.1f} ± " in text  # MOPO's line

    rows = [{**_cell("mopo", None, r, None), "seed": s} for s, r in enumerate((199.0, 201.0))]
    for eps in F.EPSILONS:
        for s, r in enumerate((180.0, 182.0)):
            rows.append(
                {**_cell("primorl", None, r, eps * 0.99), "epsilon": eps, "seed": s,
                 "noise_multiplier": 1.0 / eps}
            )  # fmt: skip
    out = tmp_path / "f"
    out.mkdir()
    text = F.write_report(out, rows, Scale(seeds=2), data=Path("d.h5"), wall=1.0).read_text()
    _check(_raw_cells(text, "raw Pendulum-v1 return ± 95% CI"), 1 + len(F.EPSILONS))


def test_mopo_report_raw_column(tmp_path: Path) -> None:
    runs = []
    for task, env_id, rets in (
        ("pendulum", PENDULUM, (190.0, 194.0)),
        ("balance", "privrl/CartpoleBalance-v0", (950.0, 960.0)),
    ):
        for seed, r in enumerate(rets):
            runs.append(
                {"task": task, "env_id": env_id, "seed": seed, "return_mean": r,
                 "normalised_score": 95.0, "seconds": 60.0, "curve": [r - 1, r]}
            )  # fmt: skip
    datasets = {
        t: {"path": f"{t}.h5", "recipe": f"primorl-{t}", "episodes": 10, "transitions": 2000,
            "reference_returns": {"random": 10.0, "expert": 200.0}}
        for t in ("pendulum", "balance")
    }  # fmt: skip
    report = M._write_table1(
        tmp_path, runs, datasets, ("pendulum", "balance"), 0, quick=True, wall=1.0
    )
    metrics = json.loads((tmp_path / "metrics.json").read_text())["tasks"]
    assert metrics["pendulum"]["raw_return_mean"] == pytest.approx(_inverse(192.0))
    assert metrics["pendulum"]["raw_return_ci95"] == pytest.approx(
        PENDULUM_MAX_COST * metrics["pendulum"]["return_ci95"]
    )
    assert metrics["balance"]["raw_return_mean"] == pytest.approx(955.0)  # identity
    text = report.read_text()
    line = next(x for x in text.splitlines() if x.startswith("| pendulum |"))
    assert f"| {_inverse(192.0):.1f} ± " in line
    assert "| 955.0 ± " in next(x for x in text.splitlines() if x.startswith("| balance |"))
