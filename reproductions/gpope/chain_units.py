"""The units of the chain figures (1a, 1b) and of the accounting study, as function cells.

Each unit is a top-level function of plain JSON arguments (the run's `_Cfg` as a dict and the
point's own parameters) returning `{"facts": ..., "rows": [...]}`: the point's public facts
and its per-trial rows, in the order the in-process loop added them. `run_chain_units` runs a
figure's units on the sweep runner (`privrl.runs.units`: local pool or Ray) and caches each
result in `$PRIVRL_CACHE/reproduce/gpope-FIG/{quick,full}/NAME-HASH.json` (`keyed_unit`), so
an interrupted figure resumes and a rerun rebuilds its report."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from privrl.runs.units import keyed_unit, log_progress, run_units
from reproductions.gpope.common import _Acc, _Cfg

ME = f"{__name__}:"
# The name the units' results are cached under (`keyed_unit`'s key), kept so that cached
# results are found wherever this module lives.
CACHE_KEY = "privrl.experiments.gpope.chain_units:"


def cfg_json(cfg: _Cfg) -> dict[str, Any]:
    return json.loads(json.dumps(asdict(cfg)))


def _cfg_of(cfg: dict[str, Any]) -> _Cfg:
    orders = cfg["orders"]
    return _Cfg(
        quick=bool(cfg["quick"]),
        trials=int(cfg["trials"]),
        base=int(cfg["base"]),
        orders=None if orders is None else tuple(orders),
    )


def _plain(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with numpy scalars (0-d arrays) as Python floats (JSON)."""
    return [
        {k: float(v) if isinstance(v, (np.floating, np.ndarray)) else v for k, v in r.items()}
        for r in rows
    ]


def unit_point(cfg: dict[str, Any], m: int, fig: int, **kwargs: Any) -> dict[str, Any]:
    """`_chain_point` at one m (tuning on public data, the trials, the baselines)."""
    from reproductions.gpope.chain import _Chain, _chain_point

    acc = _Acc([])
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.items()}
    _, facts = _chain_point(_Chain(), _cfg_of(cfg), m, fig, acc, **kwargs)
    return {"facts": facts, "rows": _plain(acc.rows)}


def unit_minibatch(cfg: dict[str, Any], m: int, epsilon: float) -> dict[str, Any]:
    """One (m, ε) point of minibatch GPOPE (`minibatch_chain.minibatch_point`)."""
    from reproductions.gpope import minibatch_chain as mb
    from reproductions.gpope.chain import _Chain

    acc = _Acc([])
    facts = mb.minibatch_point(_Chain(), _cfg_of(cfg), m, epsilon, acc)
    return {"facts": facts, "rows": _plain(acc.rows)}


def unit_lstd_op(cfg: dict[str, Any], m: int) -> dict[str, Any]:
    """LSTD-OP at one m, every ε (`lstd_op_chain.lstd_op_points`)."""
    from reproductions.gpope import lstd_op_chain as op
    from reproductions.gpope.chain import _Chain

    acc = _Acc([])
    facts = op.lstd_op_points(_Chain(), _cfg_of(cfg), [m], acc)
    return {"facts": facts, "rows": _plain(acc.rows)}


def unit_fig1b_gp(cfg: dict[str, Any], m: int, etas: list[float]) -> dict[str, Any]:
    """Figure 1(b)'s GP trials at every step size (`chain.fig1b_gp`)."""
    from reproductions.gpope.chain import _Chain, fig1b_gp

    acc = _Acc([])
    facts = fig1b_gp(_Chain(), _cfg_of(cfg), m, tuple(etas), acc)
    return {"facts": facts, "rows": _plain(acc.rows)}


def unit_fig1b_refs(cfg: dict[str, Any], m: int) -> dict[str, Any]:
    """Figure 1(b)'s references (V1, LSTD) on the first trial datasets."""
    from reproductions.gpope.chain import _Chain, _fig1b_references

    acc = _Acc([])
    _fig1b_references(_Chain(), _cfg_of(cfg), m, acc)
    return {"facts": None, "rows": _plain(acc.rows)}


def run_chain_units(
    figure: str,
    quick: bool,
    specs: Sequence[tuple[str, str, dict[str, Any]]],
    *,
    backend: str = "local",
    workers: int | None = None,
) -> list[dict[str, Any]]:
    """Run (or read back) a figure's units; their results in the order of `specs`."""
    from privrl.data import cache_dir

    root = cache_dir() / "reproduce" / f"gpope-{figure}" / ("quick" if quick else "full")
    units = [
        keyed_unit(root, name, ME + function, kwargs, key=CACHE_KEY + function)
        for name, function, kwargs in specs
    ]
    progress = log_progress(f"gpope {figure}")
    return run_units(units, backend=backend, workers=workers, progress=progress)
