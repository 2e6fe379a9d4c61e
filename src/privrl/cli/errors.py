"""Errors the CLI turns into a one-line `error:` message with exit code 2. The checks every
command shares live in the library (`privrl.experiments.checks`, re-exported here): they refuse
bad public input before any work starts, and their `InputError` is a ValueError."""

from __future__ import annotations

from privrl.experiments.checks import (  # noqa: F401  (the commands import them from here)
    MAX_EPSILON,
    MIN_EPSILON,
    InputError,
    check_delta,
    check_epsilon,
    check_input_file,
    check_int,
    check_memory,
    check_number,
    check_out_dir,
    check_output_file,
    format_bytes,
    machine_memory,
)


class CliError(Exception):
    """Bad input found by the CLI itself; the message names the problem and the fix."""


def known_errors() -> tuple[type[BaseException], ...]:
    """Library exceptions that signal bad input (not bugs), imported lazily."""
    from privrl.data.dataset import DatasetError
    from privrl.privacy.accounting import AccountingError
    from privrl.privacy.ledger import LedgerError

    # ValueError last: the library raises it for invalid parameters (sigma <= 0, delta outside
    # (0, 1), ...), which on the command line is bad input, not a bug.
    return (DatasetError, AccountingError, LedgerError, ValueError)
