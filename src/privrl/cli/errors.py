"""Errors the CLI turns into a one-line `error:` message with exit code 2. The checks every
command shares live in the library and are re-exported here (`privrl.privacy.limits`: numbers,
budgets, memory; `privrl.data.files`: file paths; `privrl.runs.rundir`: a run directory): they
refuse bad public input before any work starts, and their `InputError` is a ValueError."""

from __future__ import annotations

from privrl.data.files import check_input_file, check_output_file  # noqa: F401  (re-exported)
from privrl.privacy.limits import (  # noqa: F401  (the commands import them from here)
    MAX_EPSILON,
    MIN_EPSILON,
    InputError,
    check_delta,
    check_epsilon,
    check_int,
    check_memory,
    check_number,
    format_bytes,
    machine_memory,
)
from privrl.runs.console import CliError  # noqa: F401  (re-exported)
from privrl.runs.rundir import check_out_dir  # noqa: F401  (re-exported)


def known_errors() -> tuple[type[BaseException], ...]:
    """Library exceptions that signal bad input (not bugs), imported lazily."""
    from privrl.data.dataset import DatasetError
    from privrl.privacy.accounting import AccountingError
    from privrl.privacy.ledger import LedgerError

    # ValueError last: the library raises it for invalid parameters (sigma <= 0, delta outside
    # (0, 1), ...), which on the command line is bad input, not a bug.
    return (DatasetError, AccountingError, LedgerError, ValueError)
