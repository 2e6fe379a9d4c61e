"""`privrl eval POLICY --env ID`: a thin command over `privrl.systems.evaluate`, generated
from `EvalConfig` as the run layer generates the other commands (POLICY is its ``policy``)."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from pathlib import Path
from typing import Any

import typer

from privrl.config import ConfigError
from privrl.runs.cli import _flag, _param, _parameter
from privrl.runs.console import CliError
from privrl.systems.evaluate import EvalConfig, evaluate_command

HELP = """Evaluate a policy in a Gymnasium environment: mean and std of the return.

POLICY: a saved privrl policy.npz (train apvi | dp-apvi), policy.pt (mopo | primorl) or
learner.pt[:greedy|:epsilon=E|:imitation] (expert-dp | dp-sgd), a table FILE.npy (π(a|s) as
[S, A], [H, S, A] or [A]), module:function (π(a|s) of a batch of observations as an (n, A)
array) or uniform. A tabular policy over S + 1 states on an environment with S states drops the last
(the absorbing state of padded episodes).

Post-processing: spends nothing and carries over the policy's own privacy report (the
privacy.json of the run directory a saved policy sits in, or --report); a policy without one
is not certified (ε = ∞).

Example: privrl eval runs/fl/policy.npz --env FrozenLake-v1 --episodes 1000
"""
FIELDS = {f.name: f for f in dataclasses.fields(EvalConfig)}


def _parameters() -> list[inspect.Parameter]:
    """POLICY, one option per other config field (the run layer's), --seed and --out."""
    hints = typing.get_type_hints(EvalConfig)
    policy = typer.Argument(..., help=FIELDS["policy"].metadata["help"], metavar="POLICY")
    options = [_parameter(f, hints[name]) for name, f in FIELDS.items() if name != "policy"]
    seed = typer.Option(0, "--seed", help="Seed of the environment (and the policy).")
    out = typer.Option(None, "--out", "-o", help="Run directory to write (optional).")
    return [_param("policy", str, policy), *options, _param("seed", int, seed),
            _param("out", Path | None, out)]  # fmt: skip


def eval_cmd(**values: Any) -> None:
    seed, out = values.pop("seed"), values.pop("out")
    if seed < 0:
        raise CliError(f"--seed must be >= 0, got {seed}")
    try:
        evaluate_command(EvalConfig(**values), seed, out)
    except ConfigError as exc:
        flag = "POLICY" if exc.key == "policy" else _flag(FIELDS, exc.key)
        raise CliError(exc.message_for(flag)) from None


eval_cmd.__signature__ = inspect.Signature(_parameters())  # type: ignore[attr-defined]
eval_cmd.__annotations__ = {p.name: p.annotation for p in _parameters()}
eval_cmd.__doc__ = HELP
