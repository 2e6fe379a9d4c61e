"""`privrl data`: inspect, import, export and collect trajectory datasets; the operations are
`privrl.data.tools` and `privrl.runs.collect`."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path

import typer
from rich.console import Console

from privrl.data import tools
from privrl.runs import collect, import_help
from privrl.runs.wording import in_data_words

data_app = typer.Typer(
    help=(
        "Trajectory datasets: inspect, import, export and collect.\n\n"
        "`info` to inspect one, `import` a Parquet/CSV table of transitions "
        "or a local Minari dataset, `export` to Parquet/CSV/Minari, `collect` by rolling out a "
        "policy in a Gymnasium environment. The native format is one HDF5 file (.h5)."
    ),
    no_args_is_help=True,
)

TableFormat = StrEnum("TableFormat", {name: name for name in tools.FORMATS})


@data_app.command("info")
def info(
    path: Path = typer.Argument(..., help="Dataset file (.h5)."),
    plot: Path = typer.Option(None, "--plot", help="Write a histogram of episode returns (PNG)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Summarise a dataset: sizes, spaces, episode lengths, returns, units, flags.

    The summary shows exact statistics of the data, for its owner: it is not a private release.
    """
    with in_data_words():
        summary = tools.describe(path, plot)
    if as_json:
        typer.echo(json.dumps(summary, indent=2, default=str))
        return
    Console().print(tools.summary_table(summary, str(path)))
    if plot is not None:
        typer.echo(f"wrote {plot}")


@data_app.command("import", epilog=import_help.SUMMARY)
def import_(
    source: str = typer.Argument(..., help=import_help.OPTIONS["source"]),
    *,
    out: Path = typer.Option(..., "--out", "-o", help=import_help.OPTIONS["out"]),
    columns: str = typer.Option(None, "--columns", "-c", help=import_help.OPTIONS["columns"]),
    fmt: TableFormat = typer.Option(None, "--format", "-f", help=import_help.OPTIONS["format"]),
    observation_space: str = typer.Option(
        None, "--observation-space", help=import_help.OPTIONS["observation_space"]
    ),
    clip_out_of_space: bool = typer.Option(
        False, "--clip-out-of-space", help=import_help.OPTIONS["clip_out_of_space"]
    ),
    clip_observations: bool = typer.Option(False, "--clip-observations", hidden=True),
    action_space: str = typer.Option(
        None, "--action-space", help=import_help.OPTIONS["action_space"]
    ),
    bandit: bool = typer.Option(False, "--bandit", help=import_help.OPTIONS["bandit"]),
    discount: float = typer.Option(None, "--discount", help="Discount factor to record."),
    env_id: str = typer.Option(None, "--env-id", help="Environment id to record."),
    unit: str = typer.Option(None, "--unit", help=import_help.OPTIONS["unit"]),
    units: int = typer.Option(None, "--units", help=import_help.OPTIONS["units"]),
    keep_columns: str = typer.Option(
        None, "--keep-columns", help=import_help.OPTIONS["keep_columns"]
    ),
) -> None:
    """Import a Parquet/CSV table of transitions (one row per transition, with an episode-id
    column), a contextual-bandit log (--bandit: one row per impression) or a local Minari
    dataset into privrl's native HDF5 format."""
    notes: list[str] = []
    with in_data_words():
        ds = tools.import_dataset(
            source,
            out,
            columns=columns,
            format=fmt.value if fmt is not None else None,
            observation_space=observation_space,
            action_space=action_space,
            discount=discount,
            env_id=env_id,
            unit=unit,
            units=units,
            keep_columns=keep_columns,
            clip_out_of_space=clip_out_of_space or clip_observations,
            bandit=bandit,
            notes=notes,
        )
    for note in notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(f"wrote {out}: {ds.n_episodes} episodes, {ds.n_transitions} transitions")


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
    with in_data_words():
        typer.echo(tools.export_dataset(path, out, fmt.value if fmt is not None else None))


@data_app.command("collect")
def collect_(
    ctx: typer.Context,
    *,
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
        8, "--num-envs", help=f"Environments stepped together (1 to {collect.MAX_NUM_ENVS})."
    ),
    max_steps: int = typer.Option(None, "--max-steps", help="Cap on steps per episode."),
    out: Path = typer.Option(None, "--out", "-o", help="Dataset file to write (.h5)."),
) -> None:
    """Roll out a policy in a Gymnasium environment into a dataset (behaviour probabilities are
    recorded for discrete actions), or build a named paper dataset with --recipe.

    Examples:
      privrl data collect --env CartPole-v1 --episodes 500 --out cartpole.h5
      privrl data collect --recipe list
      privrl data collect --recipe primorl-pendulum     # rerun to continue
    """
    given = _given_flags(ctx)
    if out is not None:
        with in_data_words():
            tools.refuse_ledgered_out(out)
    if recipe is not None:
        for line in collect.collect_recipe(
            recipe, given, data_dir, seed=seed, quick=quick, out=out
        ):
            typer.echo(line)
        return
    collect.check_env_collect(given, env, out)
    ds = collect.collect_dataset(
        env,
        out,
        policy=policy,
        episodes=episodes,
        seed=seed,
        num_envs=num_envs,
        max_steps=max_steps,
    )
    typer.echo(f"wrote {out}: {ds.n_episodes} episodes, {ds.n_transitions} transitions")


def _given_flags(ctx: typer.Context) -> set[str]:
    """The long flags the user typed (not defaults)."""
    given = set()
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name) if param.name else None
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            given.add(param.opts[0])
    return given


@data_app.command("declare-public")
def declare_public(
    path: Path = typer.Argument(..., help="Dataset file (.h5) to declare episodes of public."),
    episodes: str = typer.Option(
        None, "--episodes", help="Comma-separated 0-based episode positions declared public."
    ),
    units: str = typer.Option(
        None, "--units", help="Comma-separated unit ids declared public (all their episodes)."
    ),
    out: Path = typer.Option(None, "--out", "-o", help="Write a copy (default: in place)."),
) -> None:
    """Declare episodes public in the file's metadata, before any private use: PRIMORL uses
    them in the clear (normaliser, early stopping, elites) and covers only the others. Choose
    them without looking at their content; a file with a budget ledger is refused."""
    from privrl.data.public import write_declaration

    if (episodes is None) == (units is None):
        raise typer.BadParameter("give exactly one of --episodes and --units")
    flag, text = ("--units", units) if episodes is None else ("--episodes", episodes)
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"{flag} takes comma-separated integers, got {text!r}") from None
    write_declaration(path, ids, by_unit=units is not None, out=out)
    typer.echo(f"wrote {out or path}: {len(set(ids))} declared public ({flag[2:]})")
