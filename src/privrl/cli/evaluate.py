"""`privrl eval POLICY --env ID`: evaluate a policy in a Gymnasium environment.

A thin command over `privrl.systems.evaluate` (pure post-processing: no dataset, no ledger),
generated from `EvalConfig`: POLICY is the config's ``policy`` field, every other field is an
option with its flags, default and help. With `--out DIR` the run layer writes the run
directory (config.json, metrics.json with `return_mean` / `return_std`, metrics.csv with one
row per episode, privacy.json carrying the policy's own report over, plots/returns.png);
without it the summary is printed and nothing is written.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from pathlib import Path
from typing import Any

import typer

from privrl.config import ConfigError, flags_of
from privrl.runs.console import CliError
from privrl.systems.evaluate import EvalConfig, EvalSystem

HELP = """Evaluate a policy in a Gymnasium environment: mean and std of the return.

POLICY is a saved privrl policy.npz (train apvi | dp-apvi), policy.pt (mopo | primorl) or
learner.pt[:greedy|:epsilon=E|:imitation] (expert-dp | dp-sgd), a table FILE.npy (π(a|s) as
[S, A], [H, S, A] or [A]) or module:function (returning π(a|s) for a batch of observations as an (n, A)
array). A tabular
policy over S + 1 states on an environment with S states (the last an absorbing state of
padded episodes) drops that state.

Post-processing: the evaluation spends nothing and carries over the policy's own privacy
report (the privacy.json of the run directory a saved policy sits in, or --report); a policy
without one is not certified (ε = ∞).

Example: privrl eval runs/fl/policy.npz --env FrozenLake-v1 --episodes 1000
"""


def _fields() -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(EvalConfig) if f.metadata.get("cli", True)]


def _parameters() -> list[inspect.Parameter]:
    """POLICY, one option per other config field, then --seed and --out."""
    hints = typing.get_type_hints(EvalConfig)
    params = []
    for f in _fields():
        text = f.metadata.get("help", "")
        if f.name == "policy":
            default: Any = typer.Argument(..., help=text, metavar="POLICY", show_default=False)
        else:
            value = None if f.default is dataclasses.MISSING else f.default
            default = typer.Option(value, *flags_of(f), help=text, show_default=value not in
                                   (None, ...))  # fmt: skip
        params.append(_keyword(f.name, hints[f.name], default))
    seed = typer.Option(0, "--seed", help="Seed of the environment (and the policy).")
    out = typer.Option(None, "--out", "-o", help="Run directory to write (optional).")
    return [*params, _keyword("seed", int, seed), _keyword("out", Path | None, out)]


def _keyword(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=annotation)  # fmt: skip


def _config(values: dict[str, Any]) -> EvalConfig:
    """The config from parsed values; a bad value is one `error:` line naming its flag."""
    fields = {f.name: f for f in _fields()}
    try:
        return EvalConfig(**{k: v for k, v in values.items() if k in fields})
    except ConfigError as exc:
        raise CliError(exc.message_for(_flag(exc.key))) from None


def _flag(key: str) -> str:
    if key == "policy":
        return "POLICY"
    fields = {f.name: f for f in _fields()}
    return flags_of(fields[key])[0] if key in fields else f"--{key.replace('_', '-')}"


def eval_cmd(**values: Any) -> None:
    seed, out = values.pop("seed"), values.pop("out")
    if seed < 0:
        raise CliError(f"--seed must be >= 0, got {seed}")
    config = _config(values)
    try:
        _evaluate(config, seed, out)
    except ConfigError as exc:
        raise CliError(exc.message_for(_flag(exc.key))) from None


def _evaluate(config: EvalConfig, seed: int, out: Path | None) -> None:
    if out is not None:
        from privrl.runs.layer import RunSpec, execute

        execute(RunSpec(system="eval", config=config, out=out, seed=seed))
        return
    import numpy as np
    from rich.console import Console

    from privrl.runs.system import RunContext

    system = EvalSystem()
    plan = system.plan(config, None)
    result = system.run(config, None, np.random.default_rng(seed), RunContext(seed=seed, plan=plan))
    console = Console()
    for line in result.summary:
        console.print(line, highlight=False)
    console.print(
        f"privacy (the policy's own, carried over): {result.privacy.summary()}", highlight=False
    )


eval_cmd.__signature__ = inspect.Signature(_parameters())  # type: ignore[attr-defined]
eval_cmd.__annotations__ = {p.name: p.annotation for p in _parameters()}
eval_cmd.__doc__ = HELP
