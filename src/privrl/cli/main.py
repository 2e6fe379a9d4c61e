"""The `privrl` command line.

Bad input exits with code 2 and one line on stderr starting `error:`; no traceback. An
interrupted run (Ctrl-C, exit code 130; SIGTERM, 143) says so in one `error:` line and what it
kept (the files in its output, by name). Warnings print as one `warning: …` line each, without
Python source lines. Errors of the operating system on the user's paths (a directory where a
file is expected, permission denied, disk full) and running out of memory are one `error:` line
too. A run that ends without its result for a reason of its own (PRIMORL's policy diverging
in a model the noise drowned) is one `error:` line with exit code 1. Anything else is a bug:
one
`error: internal error …` line and exit code 1 (set PRIVRL_DEBUG=1 to see the traceback).
The console conventions (warning lines, SIGTERM, OS-error messages) are `privrl.runs.console`.
"""

from __future__ import annotations

import os
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
from privrl.cli.audit import audit_app
from privrl.cli.data import data_app
from privrl.cli.demo import demo
from privrl.cli.errors import CliError, known_errors
from privrl.cli.evaluate import eval_cmd
from privrl.cli.helptext import reflow_tree
from privrl.cli.ledger import ledger_app
from privrl.cli.online import online_app
from privrl.cli.ope import ope_app
from privrl.cli.reproduce import reproduce
from privrl.cli.run import run
from privrl.cli.sweep import sweep
from privrl.cli.topics import help_topic
from privrl.cli.train import train_app
from privrl.runs.console import (
    LEDGER_HINT,
    Terminated,
    console_conventions,
    forget_outputs,
    kept_message,
    one_line,
    os_error,
)
from privrl.runs.helppanel import use_options_panel

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
app.add_typer(audit_app, name="audit")
app.command("eval", no_args_is_help=True)(eval_cmd)
app.command()(reproduce)
app.command()(run)
app.command()(sweep)
app.command("help")(help_topic)


class _Interrupted(BaseException):
    """Ctrl-C or SIGTERM, carried past typer (which turns KeyboardInterrupt into a silent
    exit code 130) to `main`, which says what was kept."""

    def __init__(self, original: KeyboardInterrupt) -> None:
        super().__init__(original)
        self.original = original


@cache
def _command() -> Any:
    """The click command tree of `app`, with help texts reflowed for the terminal (and option
    panels whose names are never cut)."""
    use_options_panel()
    command = reflow_tree(typer.main.get_command(app))
    invoke = command.invoke

    def invoke_guarded(ctx: Any) -> Any:
        try:
            return invoke(ctx)
        except KeyboardInterrupt as exc:
            raise _Interrupted(exc) from exc

    command.invoke = invoke_guarded
    return command


def _fail(message: str, code: int = 2) -> int:
    first = one_line(message) or "unknown error"
    if not first.startswith("error:"):
        first = f"error: {first}"
    print(first, file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the process exit code."""
    forget_outputs()
    with console_conventions():
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
        except OSError as exc:  # the user's paths: a directory for a file, permissions, disk
            return _fail(os_error(exc))
        except MemoryError as exc:
            detail = f" ({one_line(exc)})" if str(exc) else ""
            return _fail(
                f"out of memory{detail}; reduce the sizes (episodes, steps, horizon, states, "
                "batch) or run on a machine with more memory"
            )
        except (_Interrupted, KeyboardInterrupt) as exc:
            original = exc.original if isinstance(exc, _Interrupted) else exc
            kept = kept_message(list(sys.argv[1:] if argv is None else argv))
            if isinstance(original, Terminated):
                return _fail(f"terminated (SIGTERM); {kept}", 143)
            return _fail(f"interrupted (Ctrl-C); {kept}", 130)
        except _run_outcomes() as exc:  # the run ended without a result; not a bug
            hint = (
                f"; {LEDGER_HINT}" if "--data" in (sys.argv[1:] if argv is None else argv) else ""
            )
            return _fail(f"{exc}; no policy was trained and the run published nothing{hint}", 1)
        except Exception as exc:  # a bug: one line, not a traceback (PRIVRL_DEBUG=1 shows it)
            return _internal(exc)
    return int(result) if isinstance(result, int) else 0


def _run_outcomes() -> tuple[type[BaseException], ...]:
    """Exceptions that end a run without its result for a reason of the run itself (a model
    the noise drowned drives the policy to non-finite values), imported lazily."""
    from privrl.primorl.policy_stage import ModelDiverged

    return (ModelDiverged,)


def _internal(exc: BaseException) -> int:
    if os.environ.get("PRIVRL_DEBUG"):
        raise exc
    return _fail(
        f"internal error: {type(exc).__name__}: {one_line(exc)[:300]}; this is a bug in "
        "privrl, please report it with the command line (PRIVRL_DEBUG=1 shows the traceback)",
        1,
    )


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
