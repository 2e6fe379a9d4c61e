"""The dataset operations behind `privrl data`: inspect (`describe`), import and export (collection
from an environment or a recipe is `privrl.runs.collect`).

Each checks its public input (paths, sizes, the machine's memory) before it reads or writes a
byte, and raises a ValueError (`InputError`, `DatasetError`, `LedgerError`) whose message names
the problem and the fix, naming a setting by its parameter (`` `unit` ``, `` `format=csv` ``);
the command line writes those as its flags (`privrl.runs.wording.in_data_words`).

`describe` shows exact statistics of a dataset, for its owner: it is not a private release, and
no private command calls it.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from privrl.data.dataset import TrajectoryDataset
from privrl.data.files import check_input_file, check_output_file, read_npz
from privrl.privacy.limits import (
    InputError,
    check_int,
    check_number,
)

if TYPE_CHECKING:  # rich draws the summary table only; importing the data layer does not load it
    from rich.table import Table

FORMATS = ("parquet", "csv", "minari", "hdf5")


_SPACE_FORMS = (
    "discrete:N (codes 0..N-1), discrete:N:START (codes START..START+N-1), "
    "multidiscrete:N1,N2,… (integer codes), box:LOW:HIGH:DIM (e.g. "
    "box:-inf:inf:4), box:LOW,HIGH (one bound for every column), box:FILE.json or box:FILE.npz "
    "(per-column arrays low and high) or a JSON description"
)


def parse_space(text: str | None, dim: int | None = None) -> spaces.Space | None:
    """Parse a declared space: `discrete:N` (or `discrete:N:START`, codes from START),
    `multidiscrete:N1,N2,…`, `box:LOW:HIGH:DIM[xDIM…]`,
    `box:LOW,HIGH` (shape `(dim,)`: `dim` is the number of mapped columns), `box:FILE.json` /
    `box:FILE.npz` (arrays `low` and `high`, one entry per column) or a JSON description."""
    if text is None:
        return None
    from privrl.data.spaces import SpaceSerialisationError, space_from_json

    spec = text.strip()
    if spec.startswith("{"):
        try:
            return space_from_json(spec)
        except (SpaceSerialisationError, ValueError) as exc:
            raise InputError(f"cannot parse space {text!r} ({exc}); use {_SPACE_FORMS}") from None
    kind, _, rest = spec.partition(":")
    kind = kind.lower()
    parts = rest.split(":") if rest else []
    try:
        if kind == "discrete" and len(parts) in (1, 2):
            start = int(parts[1]) if len(parts) == 2 else 0
            return spaces.Discrete(_positive(parts[0], text), start=start)
        if kind == "multidiscrete" and len(parts) == 1:
            nvec = [_positive(n, text) for n in parts[0].split(",")]
            return spaces.MultiDiscrete(np.asarray(nvec, dtype=np.int64))
        if kind == "box" and len(parts) == 3:
            low, high = float(parts[0]), float(parts[1])
            shape = tuple(_positive(d, text) for d in parts[2].split("x"))
            return _box(np.full(shape, low), np.full(shape, high), text)
        if kind == "box" and len(parts) == 1 and parts[0].lower().endswith((".json", ".npz")):
            low, high = _bounds_file(Path(parts[0]), text)
            return _box(low, high, text)
        if kind == "box" and len(parts) == 1 and parts[0].count(",") == 1:
            low, high = (float(x) for x in parts[0].split(","))
            if dim is None:
                raise InputError(
                    f"space {text!r}: the number of columns is unknown here; use box:LOW:HIGH:DIM"
                )
            return _box(np.full(dim, low), np.full(dim, high), text)
    except ValueError as exc:
        if isinstance(exc, InputError):
            raise
    raise InputError(f"cannot parse space {text!r}; use {_SPACE_FORMS}")


def _positive(text: str, spec: str) -> int:
    value = int(text)
    if value < 1:
        raise InputError(f"space {spec!r}: sizes must be positive integers, got {value}")
    return value


def _box(low: np.ndarray, high: np.ndarray, spec: str) -> spaces.Box:
    low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
    if low.shape != high.shape or low.ndim == 0 or low.size == 0:
        raise InputError(
            f"space {spec!r}: low and high need the same non-empty shape, got {low.shape} and "
            f"{high.shape}"
        )
    if np.isnan(low).any() or np.isnan(high).any() or np.any(low > high):
        raise InputError(f"space {spec!r}: every bound must be a number with low <= high")
    return spaces.Box(low, high, shape=low.shape, dtype=np.float64)


def _bounds_file(path: Path, spec: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-column bounds `low`, `high` from a JSON object or an .npz archive (public files)."""
    if not path.is_file():
        raise InputError(f"space {spec!r}: bounds file not found: {path}")
    try:
        if path.suffix.lower() == ".json":
            with open(path, encoding="utf-8") as fh:
                d = json.load(fh)
            low, high = d["low"], d["high"]
        else:
            z = read_npz(path, f"space {spec!r}: bounds file")
            low, high = z["low"], z["high"]
        return np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(
            f"space {spec!r}: cannot read bounds from {path} ({type(exc).__name__}: {exc}); it "
            "must hold arrays 'low' and 'high', one entry per column"
        ) from None


def parse_unit(text: str | None) -> tuple[str, str | None] | None:
    """`episode` → ("episode", None); `column=NAME` → ("column", NAME)."""
    if text is None:
        return None
    spec = text.strip()
    if spec == "episode":
        return ("episode", None)
    key, sep, name = spec.partition("=")
    if key.strip() == "column" and sep and name.strip():
        return ("column", name.strip())
    raise InputError(
        f"`unit` {text!r} is not understood; use `unit=episode` (each episode its own unit) or "
        "`unit=column=NAME` (the column holding each episode's user)"
    )


def guess_format(source: str) -> str:
    """The format of a table file or Minari dataset from its name (no suffix: Minari)."""
    suffix = Path(source).suffix.lower()
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if suffix in (".csv", ".tsv"):
        return "csv"
    if suffix in (".h5", ".hdf5"):
        return "hdf5"
    if not suffix:
        return "minari"
    raise InputError(f"cannot tell the format of {source!r}; pass `format=parquet|csv|minari`")


def refuse_ledgered_out(out: Path) -> None:
    """Refuse to overwrite a dataset whose privacy budget is bound to a ledger: replacing its
    episodes would leave the ledger bound to data that no longer exist (or lose the mark)."""
    from privrl.privacy.ledger import ledgered

    reason = ledgered(out)
    if reason is not None:
        raise InputError(
            f"refusing to overwrite {out}: {reason}; write the new dataset to another file (`out`)"
        )


def load_file(path: Path, flag: str = "") -> TrajectoryDataset:
    """A privrl HDF5 dataset file, checked (exists, a readable non-empty file) before reading."""
    from privrl.data.io import load_hdf5

    if not path.exists():
        raise InputError(f"dataset file not found: {path}")
    check_input_file(path, flag, what="dataset file")
    return load_hdf5(path)


# -- inspect ---------------------------------------------------------------------------------


def describe(path: Path, plot: Path | None = None) -> dict[str, Any]:
    """`TrajectoryDataset.summary()` of a dataset file (exact statistics, not a private release),
    and a histogram of its undiscounted episode returns written to `plot` if given."""
    if plot is not None:
        check_output_file(plot, "`plot`")
    ds = load_file(path)
    summary = ds.summary()
    if plot is not None:
        plot_returns(ds.returns(1.0), plot, title=path.name)
    return summary


def summary_table(summary: dict[str, Any], title: str) -> Table:
    """`describe`'s summary as a two-column table, labelled as exact statistics."""
    from rich.table import Table

    table = Table(title=f"{title} (exact statistics — not a private release)", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for key, value in summary.items():
        if isinstance(value, dict) and key != "extra":
            value = ", ".join(f"{k} {v:.4g}" for k, v in value.items())
        elif key == "extra":
            value = _extra_line(value)
        table.add_row(key, str(value))
    return table


def _extra_line(extra: dict[str, Any]) -> str:
    """The metadata's extra as `key=value` items; nested values are left to `--json`."""
    items = [
        f"{k} (see --json)" if isinstance(v, (dict, list, tuple)) else f"{k}={v}"
        for k, v in extra.items()
    ]
    return ", ".join(items) or "-"


def plot_returns(returns: np.ndarray, path: Path, title: str) -> None:
    """A histogram of episode returns as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    bins = max(10, min(60, int(math.sqrt(max(len(returns), 1)))))
    ax.hist(returns, bins=bins, color="tab:blue", alpha=0.8)
    ax.set_xlabel("episode return (undiscounted)")
    ax.set_ylabel("episodes")
    ax.set_title(f"{title}: {len(returns)} episodes")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- import / export -------------------------------------------------------------------------


def import_dataset(
    source: str,
    out: Path,
    *,
    columns: str | None = None,
    format: str | None = None,
    observation_space: str | None = None,
    action_space: str | None = None,
    discount: float | None = None,
    env_id: str | None = None,
    unit: str | None = None,
    units: int | None = None,
    keep_columns: str | None = None,
    clip_out_of_space: bool = False,
    bandit: bool = False,
    notes: list[str] | None = None,
) -> TrajectoryDataset:
    """Import a Parquet/CSV table of transitions (`columns`: the column mapping), a local Minari
    dataset or a privrl HDF5 file, and write it to `out` (never over a ledgered dataset).

    `unit` (`episode` or `column=NAME`) sets the privacy unit: the named column (a table
    column, or a Minari episode metadata/info key) becomes the dataset's unit ids. `units` is
    the declared (public) number of units, recorded as `n_users` (or `n_trajectories` with
    `unit="episode"`) in the metadata; the import never counts it from the data. `keep_columns`
    (comma-separated) keeps those numeric table columns per transition. Discrete observation
    and action codes outside a declared space are refused unless `clip_out_of_space` (a Box's
    bounds always clip; see `privrl.data.io.fit_observations`). `bandit` reads a table as a
    contextual-bandit log (`columns` in the form of `privrl.data.bandit_log`: one row per
    impression, each a one-step episode, horizon 1 declared). With `notes` a list,
    the import's warnings (and any library's) are appended to it as text instead of being
    raised, so the command line prints them as plain lines.
    """
    with _warnings_as_notes(notes):
        import dataclasses

        from privrl.data.bandit_log import BanditColumns, parse_bandit_columns
        from privrl.data.io import import_table, parse_column_mapping, save_hdf5

        check_output_file(out, "`out`")
        refuse_ledgered_out(out)
        if discount is not None:
            check_number(discount, "`discount`", ge=0, le=1)
        unit_spec = parse_unit(unit)
        if units is not None:
            check_int(units, "`units`", minimum=1)
            if unit_spec is None:
                raise InputError(
                    "`units=K` goes with `unit=episode|column=NAME` (the unit it counts)"
                )
        keep = [c.strip() for c in keep_columns.split(",")] if keep_columns else []
        kind = format if format is not None else guess_format(source)
        if kind in ("parquet", "csv") and Path(source).exists():
            check_input_file(Path(source), what="table file")
        if keep and kind in ("minari", "hdf5"):
            raise InputError("`keep_columns` applies to Parquet/CSV tables only")
        if bandit and kind in ("minari", "hdf5"):
            raise InputError("`bandit` applies to Parquet/CSV tables only (one row per impression)")
        if action_space is not None and kind in ("minari", "hdf5"):
            raise InputError(
                "`action_space` applies to Parquet/CSV tables; a Minari or HDF5 dataset keeps "
                "its own action space"
            )
        if kind == "minari":
            from privrl.data.minari_io import import_minari

            minari_unit = None
            if unit_spec is not None:
                minari_unit = "episode" if unit_spec[0] == "episode" else f"column={unit_spec[1]}"
            ds = import_minari(source, unit=minari_unit)
            declared = parse_space(observation_space, _flat_dim(ds.metadata.observation_space))
            if declared is not None:
                ds = _declare_observation_space(ds, declared, source, clip_out_of_space)
        elif kind == "hdf5":
            if unit_spec is not None or observation_space is not None:
                raise InputError(
                    "`unit` and `observation_space` apply to tables and Minari datasets; an HDF5 "
                    "dataset keeps its own"
                )
            ds = load_file(Path(source))
        else:
            if columns is None:
                example = "action=item,reward=click,..." if bandit else "episode=id,obs=s,..."
                raise InputError(f"`columns` is required to import a table (e.g. {example})")
            if not Path(source).is_file():
                raise InputError(f"table file not found: {source}")
            mapping = parse_bandit_columns(columns) if bandit else parse_column_mapping(columns)
            if unit_spec is not None:
                given = mapping.unit
                wanted = unit_spec[1]
                if given is not None and given != wanted:
                    raise InputError(
                        f"`unit` {unit} conflicts with unit={given} in `columns`; "
                        "give the unit once"
                    )
                mapping = dataclasses.replace(mapping, unit=wanted)
            cols = mapping.columns()
            n_obs = (
                len(mapping.context_columns())
                if isinstance(mapping, BanditColumns)
                else len(cols["obs"])
            )
            ds = import_table(
                source,
                mapping,
                format=kind,
                observation_space=parse_space(observation_space, n_obs),
                action_space=parse_space(action_space, len(cols["action"])),
                discount=discount,
                env_id=env_id,
                keep_columns=keep,
                clip_out_of_space=clip_out_of_space,
                bandit=bandit,
            )
            if unit_spec is not None and unit_spec[0] == "episode":
                ds = ds.with_metadata(ds.metadata.with_extra(unit="episode"), validate=False)
        if discount is not None and kind == "minari":
            ds = ds.with_metadata(ds.metadata.replace(discount=discount), validate=False)
        if env_id is not None and kind == "minari":
            ds = ds.with_metadata(ds.metadata.replace(env_id=env_id), validate=False)
        if units is not None:
            per_episode = unit_spec is not None and unit_spec[0] == "episode"
            key = "n_trajectories" if per_episode else "n_users"
            ds = ds.with_metadata(ds.metadata.with_extra(**{key: int(units)}), validate=False)
        save_hdf5(ds, out)
        return ds


@contextmanager
def _warnings_as_notes(notes: list[str] | None) -> Iterator[None]:
    """With `notes` a list, record the warnings raised inside (once each, on one line) into it
    instead of raising them; with None, leave warnings alone."""
    if notes is None:
        yield
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        text = " ".join(str(w.message).split())
        if text not in notes:
            notes.append(text)


def _declare_observation_space(
    ds: TrajectoryDataset, declared: spaces.Space, source: str, clip: bool = False
) -> TrajectoryDataset:
    """`ds` with a declared observation space, its observations fitted into it
    (`privrl.data.io.fit_observations`: a Box clips, discrete codes outside are refused unless
    `clip`)."""
    from privrl.data.io import CLIPPING_NOTE, clips, fit_observations

    fields = ds._fields()
    extra = {**ds.metadata.extra}
    obs = np.asarray(ds.observations)
    shape = tuple(declared.shape or ())
    if obs.reshape(obs.shape[0], -1).shape[1] != int(np.prod(shape, dtype=np.int64)):
        raise InputError(
            f"`observation_space` {declared} does not fit the dataset's observations of shape "
            f"{obs.shape[1:]}"
        )
    obs = obs.reshape((obs.shape[0], *shape)).astype(declared.dtype, copy=False)
    if clips(declared):
        obs, clipping = fit_observations(obs, declared, [], source=source, clip=clip)
        if clipping:
            extra["observation_clipping"] = CLIPPING_NOTE
    fields["observations"] = obs
    return TrajectoryDataset(
        **fields, metadata=ds.metadata.replace(observation_space=declared, extra=extra)
    )


def _flat_dim(space: spaces.Space | None) -> int | None:
    try:
        return None if space is None else int(spaces.flatdim(space))
    except (NotImplementedError, TypeError, ValueError):
        return None


def export_dataset(path: Path, out: str, format: str | None = None) -> str:
    """Export a dataset file to a Parquet/CSV table or a local Minari dataset; returns what was
    written, as a sentence."""
    kind = format if format is not None else guess_format(out)
    if kind == "hdf5":
        raise InputError("the dataset is already HDF5; export to parquet, csv or minari")
    if kind in ("parquet", "csv"):
        check_output_file(out, "`out`")
    ds = load_file(path)
    if kind == "minari":
        from privrl.data.minari_io import export_minari

        where = export_minari(ds, out)
        return f"wrote Minari dataset {out} at {where}"
    from privrl.data.io import export_table

    mapping = export_table(ds, out, format=kind)
    keep = f" --keep-columns {','.join(ds.extra_columns)}" if ds.extra_columns else ""
    return f'wrote {out}; re-import with --columns "{mapping.to_string()}"{keep}'
