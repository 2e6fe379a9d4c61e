"""The `privrl` command line.

Bad input exits with code 2 and one line on stderr starting `error:`; no traceback.
"""

from __future__ import annotations

import sys
from functools import cache
from typing import Any

import typer

try:  # typer >= 0.2x vendors click; older releases depend on it
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover
    from click import exceptions as click_exceptions  # type: ignore[no-redef]

from privrl import __version__
from privrl.cli.account import account, calibrate
from privrl.cli.data import data_app
from privrl.cli.demo import demo
from privrl.cli.errors import CliError, known_errors
from privrl.cli.helptext import reflow_tree
from privrl.cli.ledger import ledger_app
from privrl.cli.online import online_app
from privrl.cli.ope import ope_app
from privrl.cli.reproduce import reproduce
from privrl.cli.train import train_app

app = typer.Typer(
    name="privrl",
    help=(
        "Differentially private reinforcement learning.\n\n"
        "Learn a policy from logged interaction data, evaluate a policy on it, or learn online, "
        "with a formal privacy guarantee and an honest report of what it is.\n\n"
        "Start with `privrl demo`. Account for a mechanism with `privrl account`, find the noise "
        "for a target budget with `privrl calibrate`, inspect or import data with `privrl data`, "
        "and bind a total privacy budget to a dataset with `privrl ledger init`."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"privrl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """privrl: differentially private reinforcement learning."""


app.command(no_args_is_help=True)(account)
app.command(no_args_is_help=True)(calibrate)
app.command()(demo)
app.add_typer(data_app, name="data")
app.add_typer(ledger_app, name="ledger")
app.add_typer(train_app, name="train")
app.add_typer(ope_app, name="ope")
app.add_typer(online_app, name="online")
app.command()(reproduce)


@cache
def _command() -> Any:
    """The click command tree of `app`, with help texts reflowed for the terminal."""
    return reflow_tree(typer.main.get_command(app))


def _fail(message: str) -> int:
    first = " ".join(str(message).strip().splitlines()) or "unknown error"
    if not first.startswith("error:"):
        first = f"error: {first}"
    print(first, file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the process exit code."""
    try:
        result = _command()(args=argv, standalone_mode=False, prog_name="privrl")
    except click_exceptions.NoArgsIsHelpError as exc:
        typer.echo(exc.ctx.get_help())
        return 0
    except click_exceptions.UsageError as exc:
        hint = ""
        if exc.ctx is not None:
            hint = f" (see '{exc.ctx.command_path} --help')"
        return _fail(f"{exc.format_message()}{hint}")
    except click_exceptions.ClickException as exc:
        return _fail(exc.format_message())
    except typer.Abort:
        return _fail("aborted")
    except typer.Exit as exc:
        return int(exc.exit_code)
    except CliError as exc:
        return _fail(str(exc))
    except known_errors() as exc:  # bad input detected below the CLI
        return _fail(str(exc))
    except FileNotFoundError as exc:
        name = exc.filename or str(exc)
        return _fail(f"file not found: {name}")
    except KeyboardInterrupt:
        return _fail("interrupted")
    return int(result) if isinstance(result, int) else 0


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
