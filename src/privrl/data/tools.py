"""The dataset operations behind `privrl data`: inspect (`describe`), import, export and collect.

Each checks its public input (paths, sizes, the machine's memory) before it reads or writes a
byte, and raises a ValueError (`InputError`, `DatasetError`, `LedgerError`) whose message names
the problem and the fix (with the command-line flag that carries the value).

`describe` shows exact statistics of a dataset, for its owner: it is not a private release, and
no private command calls it.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces
from rich.table import Table

from privrl.data.dataset import TrajectoryDataset
from privrl.experiments.checks import (
    InputError,
    check_input_file,
    check_int,
    check_memory,
    check_number,
    check_output_file,
    format_bytes,
    machine_memory,
)

FORMATS = ("parquet", "csv", "minari", "hdf5")

# Collection keeps every transition in memory until the dataset is written: per transition
# two observations (recorded and next), the action, reward, flags, episode and time indices
# (~50 bytes), twice over while the lists are concatenated and sorted.
_COLLECT_OVERHEAD_BYTES = 50
MAX_NUM_ENVS = 1024  # each sub-environment is a Python object stepped in one process


def parse_space(text: str | None) -> spaces.Space | None:
    """Parse `discrete:N`, `box:LOW:HIGH:DIM[xDIM...]` or a JSON space description."""
    if text is None:
        return None
    from privrl.data.spaces import space_from_json

    spec = text.strip()
    if spec.startswith("{"):
        return space_from_json(spec)
    parts = spec.split(":")
    try:
        if parts[0] == "discrete" and len(parts) == 2:
            return spaces.Discrete(int(parts[1]))
        if parts[0] == "box" and len(parts) == 4:
            low, high = float(parts[1]), float(parts[2])
            shape = tuple(int(d) for d in parts[3].split("x"))
            return spaces.Box(low, high, shape=shape, dtype=np.float64)
    except ValueError:
        pass
    raise InputError(
        f"cannot parse space {text!r}; use discrete:N, box:LOW:HIGH:DIM (e.g. box:-inf:inf:4) "
        "or a JSON description"
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
    raise InputError(f"cannot tell the format of {source!r}; pass --format parquet|csv|minari")


def refuse_ledgered_out(out: Path) -> None:
    """Refuse to overwrite a dataset whose privacy budget is bound to a ledger: replacing its
    episodes would leave the ledger bound to data that no longer exist (or lose the mark)."""
    from privrl.privacy.ledger import ledgered

    reason = ledgered(out)
    if reason is not None:
        raise InputError(
            f"refusing to overwrite {out}: {reason}; write the new dataset to another file (--out)"
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
        check_output_file(plot, "--plot")
    ds = load_file(path)
    summary = ds.summary()
    if plot is not None:
        plot_returns(ds.returns(1.0), plot, title=path.name)
    return summary


def summary_table(summary: dict[str, Any], title: str) -> Table:
    """`describe`'s summary as a two-column table, labelled as exact statistics."""
    table = Table(title=f"{title} (exact statistics — not a private release)", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for key, value in summary.items():
        if isinstance(value, dict) and key != "extra":
            value = ", ".join(f"{k} {v:.4g}" for k, v in value.items())
        elif key == "extra":
            value = json.dumps(value, default=str)[:200]
        table.add_row(key, str(value))
    return table


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
) -> TrajectoryDataset:
    """Import a Parquet/CSV table of transitions (`columns`: the column mapping), a local Minari
    dataset or a privrl HDF5 file, and write it to `out` (never over a ledgered dataset)."""
    from privrl.data.io import import_table, save_hdf5

    check_output_file(out, "--out")
    refuse_ledgered_out(out)
    if discount is not None:
        check_number(discount, "--discount", ge=0, le=1)
    kind = format if format is not None else guess_format(source)
    if kind in ("parquet", "csv") and Path(source).exists():
        check_input_file(Path(source), what="table file")
    if kind == "minari":
        from privrl.data.minari_io import import_minari

        ds = import_minari(source)
    elif kind == "hdf5":
        ds = load_file(Path(source))
    else:
        if columns is None:
            raise InputError("--columns is required to import a table (e.g. episode=id,obs=s,...)")
        if not Path(source).is_file():
            raise InputError(f"table file not found: {source}")
        ds = import_table(
            source,
            columns,
            format=kind,
            observation_space=parse_space(observation_space),
            action_space=parse_space(action_space),
            discount=discount,
            env_id=env_id,
        )
    save_hdf5(ds, out)
    return ds


def export_dataset(path: Path, out: str, format: str | None = None) -> str:
    """Export a dataset file to a Parquet/CSV table or a local Minari dataset; returns what was
    written, as a sentence."""
    kind = format if format is not None else guess_format(out)
    if kind == "hdf5":
        raise InputError("the dataset is already HDF5; export to parquet, csv or minari")
    if kind in ("parquet", "csv"):
        check_output_file(out, "--out")
    ds = load_file(path)
    if kind == "minari":
        from privrl.data.minari_io import export_minari

        where = export_minari(ds, out)
        return f"wrote Minari dataset {out} at {where}"
    from privrl.data.io import export_table

    mapping = export_table(ds, out, format=kind)
    return f'wrote {out}; re-import with --columns "{mapping.to_string()}"'


# -- collect ---------------------------------------------------------------------------------


def _space_bytes(space: spaces.Space) -> int:
    """Bytes of one element of `space` as collected (flattened, at least 8 per scalar)."""
    try:
        size = int(spaces.flatdim(space))
    except (NotImplementedError, TypeError, ValueError):
        size = 1
    itemsize = max(8, np.dtype(space.dtype).itemsize if space.dtype is not None else 8)
    return size * itemsize


def _probe_env(env: str) -> tuple[spaces.Space, int | None, int]:
    """The action space, the episode step limit and the bytes per collected step of `env`."""
    import gymnasium as gym

    from privrl.envs import register_envs

    register_envs()
    try:
        spec_env = gym.make(env)
    except gym.error.Error as exc:
        raise InputError(f"unknown environment {env!r} ({exc})") from None
    try:
        limit = spec_env.spec.max_episode_steps if spec_env.spec is not None else None
        per_step = 2 * (
            2 * _space_bytes(spec_env.observation_space)
            + _space_bytes(spec_env.action_space)
            + _COLLECT_OVERHEAD_BYTES
        )
        return spec_env.action_space, limit, per_step
    finally:
        spec_env.close()


def collect_dataset(
    env: str,
    out: Path,
    *,
    policy: str = "uniform",
    episodes: int = 100,
    seed: int = 0,
    num_envs: int = 8,
    max_steps: int | None = None,
) -> TrajectoryDataset:
    """Roll out `policy` in the Gymnasium environment `env` for `episodes` episodes and write
    the dataset to `out`; the sizes are checked against this machine's memory first."""
    from privrl.data.collect import collect
    from privrl.data.io import save_hdf5
    from privrl.policies import UniformRandomPolicy

    check_int(episodes, "--episodes", minimum=1)
    check_int(num_envs, "--num-envs", minimum=1, maximum=MAX_NUM_ENVS)
    if max_steps is not None:
        check_int(max_steps, "--max-steps", minimum=1)
    if policy != "uniform":
        raise InputError(f"unknown --policy {policy!r}; available: uniform")
    check_output_file(out, "--out")
    action_space, limit, per_step = _probe_env(env)
    # Every episode has at least one transition: refuse what cannot fit even then.
    check_memory("--episodes", episodes, per_step, what="episode of one step")
    caps = [h for h in (max_steps, limit) if h is not None]
    horizon = min(caps) if caps else None
    if horizon is not None and episodes * horizon * per_step > machine_memory():
        warnings.warn(
            f"{episodes} episodes of up to {horizon} steps may need up to "
            f"{format_bytes(episodes * horizon * per_step)} of memory, more than this "
            f"machine's {format_bytes(machine_memory())}, if the episodes run long",
            stacklevel=1,
        )
    ds = collect(
        env,
        UniformRandomPolicy(action_space),
        n_episodes=episodes,
        seed=seed,
        num_envs=num_envs,
        max_steps=max_steps,
    )
    save_hdf5(ds, out)
    return ds
