"""`privrl ope suggest-clip`: the weight clip that clips no weight (`privrl.runs.weight_clip`)."""

from __future__ import annotations

from pathlib import Path

import typer

from privrl.runs.weight_clip import HELP as H


def suggest_clip(
    *,
    target_policy: str = typer.Option(..., "--target-policy", help=H["target_policy"]),
    min_propensity: float = typer.Option(..., "--min-propensity", help=H["min_propensity"]),
    data: Path = typer.Option(None, "--data", help=H["data"]),
    observation_space: str = typer.Option(None, help=H["observation_space"]),
    action_space: str = typer.Option(None, help=H["action_space"]),
    max_horizon: int = typer.Option(None, help=H["max_horizon"]),
    epsilon: float = typer.Option(None, "--epsilon", "-e", help=H["epsilon"]),
    delta: float = typer.Option(1e-5, "--delta", "-d", help=H["delta"]),
    reward_range: str = typer.Option("0,1", help=H["reward_range"]),
    trajectories: int = typer.Option(None, help=H["trajectories"]),
    as_json: bool = typer.Option(False, "--json", help=H["json"]),
) -> None:
    """Suggest --weight-clip for ips, snips and dr: the largest weight the target can reach,
    max π(a|s) / p_min per step over the horizon, from public inputs only. That W clips no
    weight; a smaller one lowers the noise in proportion and biases the estimate.

    Example: privrl ope suggest-clip --data logs.h5 --target-policy pi.npy --min-propensity 0.1
    """
    from privrl.runs.weight_clip import NoiseQuestion, suggest_clip_text

    noise = None if epsilon is None else NoiseQuestion(epsilon, delta, reward_range, trajectories)
    given = {"data": data, "horizon": max_horizon, "noise": noise, "as_json": as_json}
    spaces = (observation_space, action_space)
    typer.echo(suggest_clip_text(target_policy, min_propensity, spaces_given=spaces, **given))
