"""`privrl ope suggest-clip`: the public weight clip W that clips no weight, from the target
policy and a declared minimum logging propensity (`privrl.ope.weight_clip`); with --data only
the file's header (spaces, horizon, number of trajectories) is read, never its episodes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from privrl.cli.errors import InputError, check_delta, check_epsilon, check_int

if TYPE_CHECKING:
    from privrl.ope.weight_clip import WeightClipSuggestion


def suggest_clip(
    *,
    target_policy: str = typer.Option(
        ...,
        "--target-policy",
        help="The policy to evaluate, in any form `privrl ope ips` takes (uniform, FILE.npy, "
        "policy.npz, learner.pt, module:function).",
    ),
    min_propensity: float = typer.Option(
        ...,
        "--min-propensity",
        help="Declared (public) lower bound on the logging policy's propensities: a fact of "
        "the logging design (1/A for a uniform logger, an exploration floor), never the "
        "smallest propensity in the log.",
    ),
    data: Path = typer.Option(
        None,
        "--data",
        help="Dataset file whose header gives the spaces, horizon and number of trajectories "
        "(no episode is read).",
    ),
    observation_space: str = typer.Option(
        None, "--observation-space", help="Declared observation space, without --data."
    ),
    action_space: str = typer.Option(
        None, "--action-space", help="Declared action space (discrete:A), without --data."
    ),
    max_horizon: int = typer.Option(
        None, "--max-horizon", help="Steps that count (default: the metadata's, else 1)."
    ),
    epsilon: float = typer.Option(
        None, "--epsilon", "-e", help="Also print IPS's noise std on the value at this ε."
    ),
    delta: float = typer.Option(1e-5, "--delta", "-d", help="δ for the noise std."),
    reward_range: str = typer.Option(
        "0,1", "--reward-range", help="Public reward range LOW,HIGH for the noise std."
    ),
    trajectories: int = typer.Option(
        None, "--trajectories", help="Number of trajectories m for the noise std (or --data)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the suggestion as JSON."),
) -> None:
    """Suggest --weight-clip for ips, snips and dr: the largest weight the target can reach,
    max π(a|s) / p_min (per step, over the horizon), from public inputs only.

    W at that value clips no weight (no clipping bias); a smaller W lowers the noise in
    proportion and biases the estimate (the weight-clip guide measures the trade-off).

    Examples:
      privrl ope suggest-clip --data logs.h5 --target-policy pi.npy \\
          --min-propensity 0.0125
      privrl ope suggest-clip --target-policy uniform --min-propensity 0.05 \\
          --action-space discrete:20 -e 1 --trajectories 10000
    """
    from privrl.ope import weight_clip as wc

    m = trajectories
    if data is not None:
        if observation_space is not None or action_space is not None:
            raise InputError("give --data or the declared spaces, not both")
        from privrl.cli.errors import check_input_file
        from privrl.data.io import read_header

        check_input_file(data, "--data", what="dataset file")
        header = read_header(data)
        suggestion = wc.suggest_for_header(
            header, target_policy, min_propensity, horizon=max_horizon
        )
        m = header.n_episodes if m is None else m
    else:
        suggestion = _from_spaces(
            target_policy, min_propensity, observation_space, action_space, max_horizon or 1
        )
    out = {
        "weight_clip": suggestion.weight_clip,
        "max_probability": list(suggestion.max_probability),
        "min_propensity": suggestion.min_propensity,
        "horizon": suggestion.horizon,
        "exact": suggestion.exact,
    }
    lines = [f"suggested --weight-clip {suggestion.weight_clip:.6g}", suggestion.explain()]
    if epsilon is not None:
        out["noise_std"] = _noise_line(suggestion, epsilon, delta, reward_range, m, lines)
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    for line in lines:
        typer.echo(line)


def _from_spaces(
    policy: str,
    min_propensity: float,
    observation_space: str | None,
    action_space: str | None,
    horizon: int = 1,
) -> WeightClipSuggestion:
    from privrl.data.tools import parse_space
    from privrl.ope import weight_clip as wc

    if action_space is None:
        raise InputError("give --data FILE or --action-space discrete:A (and --observation-space)")
    return wc.suggest_weight_clip(
        policy,
        min_propensity,
        action_space=parse_space(action_space),
        observation_space=parse_space(observation_space or "discrete:1"),
        horizon=horizon,
    )


def _noise_line(
    suggestion: WeightClipSuggestion,
    epsilon: float,
    delta: float,
    reward_range: str,
    m: int | None,
    lines: list[str],
) -> float:
    """IPS's noise std on the value at the suggested W (public), appended to `lines`."""
    from privrl.ope import weight_clip as wc

    check_epsilon(epsilon)
    check_delta(delta)
    if m is None:
        raise InputError(
            "--epsilon needs the number of trajectories: --data FILE or --trajectories M"
        )
    check_int(m, "--trajectories", minimum=1)
    try:
        lo, hi = (float(x) for x in reward_range.split(","))
    except ValueError:
        raise InputError(f"--reward-range takes LOW,HIGH, got {reward_range!r}") from None
    std = wc.ips_noise_std(suggestion.weight_clip, (lo, hi), m, epsilon, delta, suggestion.horizon)
    lines.append(
        f"at ε = {epsilon:g}, δ = {delta:g}, m = {m}: IPS noise std on the value {std:.4g} at "
        "this W (it scales with W; a smaller W clips the weights above it, a bias)"
    )
    return std
