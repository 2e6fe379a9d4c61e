"""Errors the CLI turns into a one-line `error:` message with exit code 2."""

from __future__ import annotations


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
