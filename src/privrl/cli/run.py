"""`privrl run CONFIG.toml`: run any system from a config file.

    # runs/apvi.toml
    system = "dp-apvi"
    data = "data/riverswim.h5"
    out = "runs/apvi"
    seed = 0
    epsilon = 1.0

`system`, `data`, `out` and `seed` choose the run; every other key is a setting of the system,
with the name of its command-line flag (underscores for dashes). `privrl run --list` shows the
systems, `privrl run --show SYSTEM` a system's settings and defaults.
"""

from __future__ import annotations

from pathlib import Path

import typer

from privrl.cli.errors import CliError


def run(
    config: Path = typer.Argument(None, help="TOML file: system, data, out, seed and settings."),
    out: Path = typer.Option(None, "--out", "-o", help="Run directory (overrides the file's)."),
    resume: bool = typer.Option(
        False,
        "--resume",
        help="Continue a resumable run from its checkpoint in --out (refused for a system that "
        "cannot resume).",
    ),
    list_systems: bool = typer.Option(False, "--list", help="List the systems and exit."),
    show: str = typer.Option(None, "--show", help="Print a system's settings as TOML and exit."),
) -> None:
    """Run any system from a TOML config file (the same run as its command)."""
    from privrl.config import ConfigError
    from privrl.runs import catalog, cli, registry
    from privrl.runs.console import note_output
    from privrl.runs.layer import RunSpec, load_toml, settings_template

    catalog.load()
    if list_systems:
        from rich.console import Console

        Console().print(registry.systems_table())
        return
    if show is not None:
        try:
            typer.echo(settings_template(registry.get(show)))
        except ValueError as exc:
            raise CliError(str(exc)) from None
        return
    if config is None:
        raise CliError("give a CONFIG.toml (see `privrl run --help`), or --list / --show SYSTEM")
    try:
        spec = RunSpec.from_mapping(load_toml(config), out=out)
        note_output(spec.out)
        if resume and not registry.get(spec.system).resumable:
            raise CliError(
                f"--resume: {spec.system} cannot resume (it keeps no checkpoint to continue "
                "from); run the file again without --resume"
            )
        cli.execute_cli(spec, resume=resume)  # a failed run (an audit): exit code 1
    except ConfigError as exc:  # (a problem of the file itself already names it)
        text = str(exc)
        raise CliError(text if text.startswith(f"{config} ") else f"{config}: {text}") from None
