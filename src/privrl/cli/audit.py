"""Audit a private system: attack its release, bound ε from below (exit 1 above its claimed ε)."""

import typer

from privrl.runs.cli import add_command

audit_app = typer.Typer(help=__doc__, no_args_is_help=True)  # generated: privrl.systems.audit
add_command(audit_app, "audit-dp-apvi", name="dp-apvi")
add_command(audit_app, "audit-gpope", name="gpope")
