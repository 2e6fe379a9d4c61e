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

from privrl.cli.errors import CliError

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


def _load(path: Path):
    from privrl.data.io import load_hdf5

    if not path.exists():
        raise CliError(f"dataset file not found: {path}")
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

    _refuse_ledgered_out(out)
    kind = fmt.value if fmt is not None else _guess_format(source)
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
    ds = _load(path)
    kind = fmt.value if fmt is not None else _guess_format(out)
    if kind == "minari":
        from privrl.data.minari_io import export_minari

        where = export_minari(ds, out)
        typer.echo(f"wrote Minari dataset {out} at {where}")
        return
    if kind == "hdf5":
        raise CliError("the dataset is already HDF5; export to parquet, csv or minari")
    from privrl.data.io import export_table

    mapping = export_table(ds, out, format=kind)
    typer.echo(f'wrote {out}; re-import with --columns "{mapping.to_string()}"')


@data_app.command("collect")
def collect_(
    env: str = typer.Option(
        None, "--env", help="Gymnasium environment id (e.g. CartPole-v1, privrl/RandomTabular-v0)."
    ),
    recipe: str = typer.Option(
        None,
        "--recipe",
        help=(
            "Build a named paper dataset instead (trains what it needs, resumable); "
            "`--recipe list` shows them. Writes into --data-dir."
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
    episodes: int = typer.Option(100, "--episodes", "-n", help="Number of episodes."),
    seed: int = typer.Option(0, "--seed", help="Seed for the environments and the policy."),
    num_envs: int = typer.Option(8, "--num-envs", help="Environments stepped together."),
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
    if out is not None:
        _refuse_ledgered_out(out)
    if recipe is not None:
        _collect_recipe(recipe, data_dir, seed=seed, quick=quick, out=out)
        return
    import gymnasium as gym

    from privrl.data.collect import collect
    from privrl.data.io import save_hdf5
    from privrl.envs import register_envs
    from privrl.policies import UniformRandomPolicy

    register_envs()
    if env is None:
        raise CliError("--env or --recipe is required (e.g. --env CartPole-v1)")
    if out is None:
        raise CliError("--out is required with --env (the dataset file to write, e.g. data.h5)")
    if episodes < 1:
        raise CliError(f"--episodes must be >= 1, got {episodes}")
    if policy != "uniform":
        raise CliError(f"unknown --policy {policy!r}; available: uniform")
    try:
        spec_env = gym.make(env)
    except gym.error.Error as exc:
        raise CliError(f"unknown environment {env!r} ({exc})") from None
    action_space = spec_env.action_space
    spec_env.close()
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


def _collect_recipe(name: str, data_dir: Path | None, *, seed: int, quick: bool, out) -> None:
    import shutil
    import time

    from privrl.experiments.recipes import RECIPES, default_data_dir

    if name == "list":
        for r in RECIPES.values():
            typer.echo(f"{r.name:22s} {r.what}")
        return
    if name not in RECIPES:
        raise CliError(f"unknown recipe {name!r}; available: {', '.join(RECIPES)}")
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    root.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    path = RECIPES[name].load()(root, seed=seed, quick=quick, progress=True)
    elapsed = time.perf_counter() - start
    if out is not None and Path(out) != Path(path):
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, out)
        path = out
    typer.echo(f"wrote {path} (recipe {name}, {elapsed:.0f} s this invocation)")
