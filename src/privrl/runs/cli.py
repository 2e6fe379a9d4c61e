"""Command-line commands generated from a system's config.

    add_command(train_app, "dp-apvi")          # `privrl train dp-apvi --data ... --epsilon ...`

Each config field becomes an option with the field's flags, default and help; the run-level
options `--data` (when the system reads data), `--out` and `--seed` are added. The command
builds the config (whose validation is the only validation), then calls `layer.execute`. A
`ConfigError` is shown naming the flag, as one `error:` line with exit code 2; a finished run
that the system judges failed (`System.failure`) is one `error:` line with exit code 1.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import typer

from privrl.config import ConfigError, RunConfig, allows_nan, coerce, flags_of
from privrl.runs import registry
from privrl.runs.console import CliError, note_output
from privrl.runs.layer import RunSpec, execute
from privrl.runs.system import Result
from privrl.runs.wording import in_command_words

RUN_OPTIONS = {
    "data": ("--data", "Dataset file (privrl HDF5) to learn from."),
    "out": ("--out", "Run directory to write (config.json, metrics, privacy.json, plots/)."),
    "seed": (
        "--seed",
        "Seed of the run's public random choices (initialisation, environments, public "
        "tuning, evaluation); >= 0. Privacy noise never comes from it.",
    ),
    "insecure_noise": (
        "--insecure-reproducible-noise",
        "Draw the privacy noise from --seed, for simulations and tests only: anyone who "
        "knows the seed can remove the noise, so the run is NOT CERTIFIED (ε = ∞) and no "
        "ledger accepts it.",
    ),
}


def add_command(
    app: typer.Typer,
    system_name: str,
    *,
    name: str | None = None,
    help: str | None = None,
    data_help: str | None = None,
    epilog: str | None = None,
    out_default: Path | None = None,
) -> None:
    """Register the generated command of `system_name` on `app` (`out_default`: the
    command's default --out, where it has one; otherwise --out is required)."""
    system = registry.get(system_name)
    command = make_command(system_name, data_help=data_help, out_default=out_default)
    command.__doc__ = help or system.help or system.summary
    app.command(name or system.name, no_args_is_help=True, epilog=epilog)(command)


def make_command(
    system_name: str, *, data_help: str | None = None, out_default: Path | None = None
) -> Any:
    """A typer-ready function whose options are the config's fields plus --data/--out/--seed."""
    system = registry.get(system_name)
    config_cls = system.Config
    params: list[inspect.Parameter] = []
    for f in _cli_fields(config_cls):
        params.append(_parameter(f, typing.get_type_hints(config_cls)[f.name]))
    if system.data != "none":
        flag, text = RUN_OPTIONS["data"]
        default = ... if system.data == "required" else None
        params.append(
            _param("data", Path | None, typer.Option(default, flag, help=data_help or text))
        )
    params.append(
        _param(
            "out",
            Path,
            typer.Option(
                ... if out_default is None else out_default,
                RUN_OPTIONS["out"][0],
                "-o",
                help=RUN_OPTIONS["out"][1],
            ),
        )
    )
    params.append(
        _param("seed", int, typer.Option(0, RUN_OPTIONS["seed"][0], help=RUN_OPTIONS["seed"][1]))
    )
    flag, text = RUN_OPTIONS["insecure_noise"]
    params.append(_param("insecure_noise", bool, typer.Option(False, flag, help=text)))
    if system.resumable and system.auto_resume:
        params.append(
            _param(
                "resume",
                bool,
                typer.Option(
                    False,
                    "--resume",
                    help="Insist on continuing the checkpoint in --out (an error if there is "
                    "none); a rerun with the same settings and --out resumes anyway.",
                ),
            )
        )
    elif system.resumable:
        params.append(
            _param(
                "resume",
                bool,
                typer.Option(
                    True,
                    "--resume/--no-resume",
                    help="Continue from the run directory's checkpoint when its config matches.",
                ),
            )
        )

    def command(**kwargs: Any) -> None:
        run_cli(system_name, kwargs)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__name__ = system_name.replace("-", "_")
    return command


def run_cli(system_name: str, kwargs: dict[str, Any]) -> None:
    """Build the spec from parsed options and execute it; errors name the flags."""
    system = registry.get(system_name)
    config_cls = system.Config
    fields = config_cls.field_map()
    hints = typing.get_type_hints(config_cls)
    values: dict[str, Any] = {}
    if kwargs.get("seed", 0) < 0:  # a run-level option: checked before the config's values
        raise CliError(f"--seed must be >= 0, got {kwargs['seed']}")
    try:
        with in_command_words(config_cls):  # the library's `field` references, as flags
            for key, value in kwargs.items():
                if key in fields:
                    allow_nan = allows_nan(fields[key])
                    values[key] = _from_cli(value, hints[key], key, allow_nan=allow_nan)
            config = config_cls(**values)
    except ConfigError as exc:
        raise CliError(exc.message_for(_flag(fields, exc.key))) from None
    spec = RunSpec(
        system.name,
        config,
        Path(kwargs["out"]),
        kwargs.get("data"),
        kwargs["seed"],
        insecure_noise=bool(kwargs.get("insecure_noise", False)),
    )
    note_output(spec.out)  # (a default --out too: an interruption says what it kept)
    try:
        with in_command_words(config_cls):
            execute_cli(spec, resume=bool(kwargs.get("resume", False)))
    except ConfigError as exc:
        raise CliError(exc.message_for(_flag(fields, exc.key))) from None


def execute_cli(spec: RunSpec, *, resume: bool = False) -> Result:
    """`layer.execute` for a command (generated or `privrl run`), then the system's verdict: a
    run that failed (`System.failure`) is one `error:` line and exit code 1, after its run
    directory is written."""
    result = execute(spec, resume=resume)
    failure = registry.get(spec.system).failure(spec.config, result)
    if failure is not None:
        typer.echo(f"error: {failure}", err=True)
        raise typer.Exit(1)
    return result


def _flag(fields: dict[str, dataclasses.Field[Any]], key: str) -> str:
    if key in fields:
        return flags_of(fields[key])[0].split("/")[0]
    if key in RUN_OPTIONS:
        return RUN_OPTIONS[key][0]
    return key


def _cli_fields(config_cls: type[RunConfig]) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(config_cls) if f.metadata.get("cli", True)]


def _param(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


def _parameter(f: dataclasses.Field[Any], hint: Any) -> inspect.Parameter:
    """The typer option of a config field."""
    default = f.default if f.default is not dataclasses.MISSING else None
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        default = f.default_factory()  # type: ignore[misc]
    cli_type, shown = _cli_type(hint)
    flags = list(flags_of(f))
    if cli_type is bool and not any("/" in flag for flag in flags):
        # (flags spelled in click's "--on/--off" form, or "--switch/" for a switch with no
        # negative, are kept as given)
        long = flags[0].removeprefix("--")
        flags = [f"--{long}/--no-{long}", *flags[1:]]
    text = f.metadata.get("help", "")
    if shown:  # (rich would read square brackets as markup)
        text = f"{text} ({shown})" if text else shown
    if isinstance(default, tuple):
        default = ",".join(map(str, default))
    option = typer.Option(
        default,
        *flags,
        help=text,
        metavar=f.metadata.get("metavar"),
        show_default=default is not None and default is not ...,
    )
    return _param(f.name, cli_type | None if default is None else cli_type, option)


def _cli_type(hint: Any) -> tuple[Any, str]:
    """The type typer parses a field as, and the choices to show in the help."""
    origin = get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        return _cli_type(args[0]) if len(args) == 1 else (str, "")
    if origin is Literal:
        return str, "one of: " + "|".join(map(str, get_args(hint)))
    if origin in (tuple, list):
        return str, "comma-separated"
    if hint in (bool, int, float, str, Path):
        return hint, ""
    return str, ""


def _from_cli(value: Any, hint: Any, key: str, *, allow_nan: bool = False) -> Any:
    """A parsed option value as the field's type (comma lists become tuples)."""
    if value is None:
        return None
    origin = get_origin(hint)
    args = [a for a in get_args(hint) if a is not type(None)]
    inner = args[0] if origin in (typing.Union, types.UnionType) and len(args) == 1 else hint
    if get_origin(inner) in (tuple, list) and isinstance(value, str):
        parts = [p.strip() for p in value.split(",") if p.strip()]
        item = get_args(inner)[0] if get_args(inner) else str
        parsed = []
        for p in parts:
            try:
                parsed.append(item(p) if item in (int, float) else p)
            except ValueError:
                raise ConfigError(
                    key, f"must be a comma-separated list of {item.__name__}s, not {value!r}"
                ) from None
        return coerce(parsed, inner, key)
    return coerce(value, hint, key, allow_nan=allow_nan)
