"""`privrl data`: inspect, import, export and collect trajectory datasets."""

from __future__ import annotations

import json
import math
from enum import StrEnum
from pathlib import Path

import numpy as np
import typer
from gymnasium import spaces
from rich.console import Console
from rich.table import Table

from privrl.cli.errors import (
    CliError,
    check_input_file,
    check_int,
    check_memory,
    check_number,
    check_output_file,
    format_bytes,
    machine_memory,
)

data_app = typer.Typer(
    help=(
        "Trajectory datasets: `info` to inspect one, `import` a Parquet/CSV table of transitions "
        "or a local Minari dataset, `export` to Parquet/CSV/Minari, `collect` by rolling out a "
        "policy in a Gymnasium environment. The native format is one HDF5 file (.h5)."
    ),
    no_args_is_help=True,
)


class TableFormat(StrEnum):
    parquet = "parquet"
    csv = "csv"
    minari = "minari"
    hdf5 = "hdf5"


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
    raise CliError(
        f"cannot parse space {text!r}; use discrete:N, box:LOW:HIGH:DIM (e.g. box:-inf:inf:4) "
        "or a JSON description"
    )


def _refuse_ledgered_out(out: Path) -> None:
    """Refuse to overwrite a dataset whose privacy budget is bound to a ledger: replacing its
    episodes would leave the ledger bound to data that no longer exist (or lose the mark)."""
    from privrl.privacy.ledger import ledgered

    reason = ledgered(out)
    if reason is not None:
        raise CliError(
            f"refusing to overwrite {out}: {reason}; write the new dataset to another file (--out)"
        )


def _load(path: Path, flag: str = ""):
    from privrl.data.io import load_hdf5

    if not path.exists():
        raise CliError(f"dataset file not found: {path}")
    check_input_file(path, flag, what="dataset file")
    return load_hdf5(path)


@data_app.command("info")
def info(
    path: Path = typer.Argument(..., help="Dataset file (.h5)."),
    plot: Path = typer.Option(None, "--plot", help="Write a histogram of episode returns (PNG)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Summarise a dataset: sizes, spaces, episode lengths, returns, units, flags.

    The summary shows exact statistics of the data, for its owner: it is not a private release.
    """
    if plot is not None:
        check_output_file(plot, "--plot")
    ds = _load(path)
    summary = ds.summary()
    if plot is not None:
        _plot_returns(ds.returns(1.0), plot, title=path.name)
    if as_json:
        typer.echo(json.dumps(summary, indent=2, default=str))
        return
    table = Table(title=f"{path} (exact statistics — not a private release)", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for key, value in summary.items():
        if isinstance(value, dict) and key != "extra":
            value = ", ".join(f"{k} {v:.4g}" for k, v in value.items())
        elif key == "extra":
            value = json.dumps(value, default=str)[:200]
        table.add_row(key, str(value))
    Console().print(table)
    if plot is not None:
        typer.echo(f"wrote {plot}")


def _plot_returns(returns: np.ndarray, path: Path, title: str) -> None:
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


@data_app.command("import")
def import_(
    source: str = typer.Argument(..., help="Table file, or a local Minari dataset id/directory."),
    out: Path = typer.Option(..., "--out", "-o", help="Dataset file to write (.h5)."),
    columns: str = typer.Option(
        None,
        "--columns",
        "-c",
        help=(
            "Column mapping for tables: episode=COL,obs=COL|COL,action=COL,reward=COL "
            "[,next_obs=…,terminated=…,truncated=…,behaviour_prob=…,unit=…,timestep=…]."
        ),
    ),
    fmt: TableFormat = typer.Option(
        None, "--format", "-f", help="parquet, csv or minari (default: from the file name)."
    ),
    observation_space: str = typer.Option(
        None, "--observation-space", help="discrete:N or box:LOW:HIGH:DIM (else inferred)."
    ),
    action_space: str = typer.Option(
        None, "--action-space", help="discrete:N or box:LOW:HIGH:DIM (else inferred)."
    ),
    discount: float = typer.Option(None, "--discount", help="Discount factor to record."),
    env_id: str = typer.Option(None, "--env-id", help="Environment id to record."),
) -> None:
    """Import a Parquet/CSV table of transitions (one row per transition, with an episode-id
    column) or a local Minari dataset into privrl's native HDF5 format.

    Example: privrl data import visits.csv -c "episode=patient,obs=s1|s2,action=dose,reward=y"
    --action-space discrete:4 --out visits.h5
    """
    from privrl.data.io import import_table, save_hdf5

    check_output_file(out, "--out")
    _refuse_ledgered_out(out)
    if discount is not None:
        check_number(discount, "--discount", ge=0, le=1)
    kind = fmt.value if fmt is not None else _guess_format(source)
    if kind in ("parquet", "csv") and Path(source).exists():
        check_input_file(Path(source), what="table file")
    if kind == "minari":
        from privrl.data.minari_io import import_minari

        ds = import_minari(source)
    elif kind == "hdf5":
        ds = _load(Path(source))
    else:
        if columns is None:
            raise CliError("--columns is required to import a table (e.g. episode=id,obs=s,...)")
        if not Path(source).is_file():
            raise CliError(f"table file not found: {source}")
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
    typer.echo(f"wrote {out}: {ds.n_episodes} episodes, {ds.n_transitions} transitions")


def _guess_format(source: str) -> str:
    suffix = Path(source).suffix.lower()
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if suffix in (".csv", ".tsv"):
        return "csv"
    if suffix in (".h5", ".hdf5"):
        return "hdf5"
    if not suffix:
        return "minari"
    raise CliError(f"cannot tell the format of {source!r}; pass --format parquet|csv|minari")


@data_app.command("export")
def export(
    path: Path = typer.Argument(..., help="Dataset file (.h5)."),
    out: str = typer.Option(
        ..., "--out", "-o", help="Output table file, or the Minari dataset id for --format minari."
    ),
    fmt: TableFormat = typer.Option(
        None, "--format", "-f", help="parquet, csv or minari (default: from --out)."
    ),
) -> None:
    """Export a dataset to a Parquet/CSV table of transitions or a local Minari dataset."""
    kind = fmt.value if fmt is not None else _guess_format(out)
    if kind == "hdf5":
        raise CliError("the dataset is already HDF5; export to parquet, csv or minari")
    if kind in ("parquet", "csv"):
        check_output_file(out, "--out")
    ds = _load(path)
    if kind == "minari":
        from privrl.data.minari_io import export_minari

        where = export_minari(ds, out)
        typer.echo(f"wrote Minari dataset {out} at {where}")
        return
    from privrl.data.io import export_table

    mapping = export_table(ds, out, format=kind)
    typer.echo(f'wrote {out}; re-import with --columns "{mapping.to_string()}"')


# Collection keeps every transition in memory until the dataset is written: per transition
# two observations (recorded and next), the action, reward, flags, episode and time indices
# (~50 bytes), twice over while the lists are concatenated and sorted.
_COLLECT_OVERHEAD_BYTES = 50
_MAX_NUM_ENVS = 1024  # each sub-environment is a Python object stepped in one process
_RECIPE_FIXED = ("--env", "--policy", "--episodes", "--num-envs", "--max-steps")


@data_app.command("collect")
def collect_(
    ctx: typer.Context,
    env: str = typer.Option(
        None, "--env", help="Gymnasium environment id (e.g. CartPole-v1, privrl/RandomTabular-v0)."
    ),
    recipe: str = typer.Option(
        None,
        "--recipe",
        help=(
            "Build a named paper dataset instead (trains what it needs, resumable); "
            "`--recipe list` shows them. Writes into --data-dir. A recipe fixes the "
            "environment, policy, episodes and environments: those flags are refused with it."
        ),
    ),
    data_dir: Path = typer.Option(
        None,
        "--data-dir",
        help="Where recipes cache agents, experts and datasets (default $PRIVRL_CACHE/data).",
    ),
    quick: bool = typer.Option(
        False, "--quick", help="Recipes: build a small smoke-test version into a separate file."
    ),
    policy: str = typer.Option("uniform", "--policy", help="Behaviour policy: uniform."),
    episodes: int = typer.Option(
        100, "--episodes", "-n", help="Number of episodes (must fit in memory)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed for the environments and the policy."),
    num_envs: int = typer.Option(
        8, "--num-envs", help=f"Environments stepped together (1 to {_MAX_NUM_ENVS})."
    ),
    max_steps: int = typer.Option(None, "--max-steps", help="Cap on steps per episode."),
    out: Path = typer.Option(None, "--out", "-o", help="Dataset file to write (.h5)."),
) -> None:
    """Roll out a policy in a Gymnasium environment into a dataset (behaviour probabilities are
    recorded for discrete actions), or build a named paper dataset with --recipe.

    Examples:
      privrl data collect --env CartPole-v1 --episodes 500 --seed 1 --out cartpole.h5
      privrl data collect --recipe list
      privrl data collect --recipe primorl-pendulum            # resumable; rerun to continue
    """
    given = _given_flags(ctx)
    if out is not None:
        _refuse_ledgered_out(out)
    if recipe is not None:
        fixed = [f for f in _RECIPE_FIXED if f in given]
        if fixed and recipe != "list":
            raise CliError(
                f"--recipe {recipe} fixes its environment, policy, episodes and environments; "
                f"remove {', '.join(fixed)} (only --data-dir, --quick, --seed and --out apply)"
            )
        if out is not None:
            check_output_file(out, "--out")
        _collect_recipe(recipe, data_dir, seed=seed, quick=quick, out=out)
        return
    for flag in ("--data-dir", "--quick"):
        if flag in given:
            raise CliError(f"{flag} applies to --recipe only; remove it when collecting with --env")
    import gymnasium as gym

    from privrl.data.collect import collect
    from privrl.data.io import save_hdf5
    from privrl.envs import register_envs
    from privrl.policies import UniformRandomPolicy

    if env is None:
        raise CliError("--env or --recipe is required (e.g. --env CartPole-v1)")
    if out is None:
        raise CliError("--out is required with --env (the dataset file to write, e.g. data.h5)")
    check_int(episodes, "--episodes", minimum=1)
    check_int(num_envs, "--num-envs", minimum=1, maximum=_MAX_NUM_ENVS)
    if max_steps is not None:
        check_int(max_steps, "--max-steps", minimum=1)
    if policy != "uniform":
        raise CliError(f"unknown --policy {policy!r}; available: uniform")
    check_output_file(out, "--out")
    register_envs()
    try:
        spec_env = gym.make(env)
    except gym.error.Error as exc:
        raise CliError(f"unknown environment {env!r} ({exc})") from None
    try:
        action_space = spec_env.action_space
        limit = spec_env.spec.max_episode_steps if spec_env.spec is not None else None
        per_step = 2 * (
            2 * _space_bytes(spec_env.observation_space)
            + _space_bytes(action_space)
            + _COLLECT_OVERHEAD_BYTES
        )
    finally:
        spec_env.close()
    # Every episode has at least one transition: refuse what cannot fit even then.
    check_memory("--episodes", episodes, per_step, what="episode of one step")
    caps = [h for h in (max_steps, limit) if h is not None]
    horizon = min(caps) if caps else None
    if horizon is not None and episodes * horizon * per_step > machine_memory():
        import warnings

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
    typer.echo(f"wrote {out}: {ds.n_episodes} episodes, {ds.n_transitions} transitions")


def _given_flags(ctx: typer.Context) -> set[str]:
    """The long flags the user typed (not defaults)."""
    given = set()
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name) if param.name else None
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            given.add(param.opts[0])
    return given


def _space_bytes(space: spaces.Space) -> int:
    """Bytes of one element of `space` as collected (flattened, at least 8 per scalar)."""
    try:
        size = int(spaces.flatdim(space))
    except (NotImplementedError, TypeError, ValueError):
        size = 1
    itemsize = max(8, np.dtype(space.dtype).itemsize if space.dtype is not None else 8)
    return size * itemsize


def _collect_recipe(name: str, data_dir: Path | None, *, seed: int, quick: bool, out) -> None:
    import os
    import shutil
    import tempfile
    import time

    from privrl.experiments.recipes import RECIPES, default_data_dir

    if name == "list":
        for r in RECIPES.values():
            typer.echo(f"{r.name:22s} {r.what}")
        return
    if name not in RECIPES:
        raise CliError(f"unknown recipe {name!r}; available: {', '.join(RECIPES)}")
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    _check_data_dir(root)
    start = time.perf_counter()
    path = RECIPES[name].load()(root, seed=seed, quick=quick, progress=True)
    elapsed = time.perf_counter() - start
    if out is not None and Path(out).resolve() != Path(path).resolve():
        target = Path(out)
        target.parent.mkdir(parents=True, exist_ok=True)
        # Copy atomically: an interrupted copy must not leave a partial dataset under --out.
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        try:
            shutil.copyfile(path, tmp)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        path = target
    typer.echo(f"wrote {path} (recipe {name}, {elapsed:.0f} s this invocation)")


def _check_data_dir(root: Path) -> None:
    """--data-dir must be a writable directory (created if new), checked before any work."""
    import os

    for parent in [root, *root.parents]:
        if parent.exists() and not parent.is_dir():
            where = "is a file" if parent == root else f"is inside the file {parent}"
            raise CliError(f"--data-dir {root} {where}; give a directory")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(
            f"--data-dir {root} cannot be created ({exc.strerror or type(exc).__name__}); "
            "choose a writable directory"
        ) from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise CliError(f"--data-dir {root} is not writable; choose a writable directory")
