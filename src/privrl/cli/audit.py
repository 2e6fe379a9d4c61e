"""Audit a private system: attack its release, bound ε from below (exit 1 above its claimed ε)."""

import typer

from privrl.runs.cli import add_command

audit_app = typer.Typer(help=__doc__, no_args_is_help=True)  # generated: privrl.systems.audit
add_command(audit_app, "audit-dp-apvi", name="dp-apvi")
add_command(audit_app, "audit-gpope", name="gpope")
add_command(audit_app, "audit-dp-vapvi", name="dp-vapvi")
add_command(audit_app, "audit-dp-lsw", name="dp-lsw")
add_command(audit_app, "audit-sdp-pe", name="sdp-pe")
add_command(audit_app, "audit-dp-sgd", name="dp-sgd")
add_command(audit_app, "audit-expert-dp", name="expert-dp")
add_command(audit_app, "audit-expert-dp-sgd", name="expert-dp-sgd")
add_command(audit_app, "audit-primorl", name="primorl")
