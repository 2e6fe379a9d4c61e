"""What `privrl ope suggest-clip` prints: the weight clip that clips no weight
(`privrl.ope.weight_clip`) for a target policy and a declared minimum propensity, from a
dataset's header (spaces, horizon, number of trajectories; never an episode) or from declared
spaces, and optionally IPS's noise standard deviation on the value at that clip. Every input is
public; bad input is an `InputError` naming the flag."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from privrl.ope import weight_clip as wc
from privrl.privacy.limits import InputError, check_delta, check_epsilon, check_int

#: The options' help texts (the command's flags).
HELP = {
    "target_policy": "The policy to evaluate, in any form `privrl ope ips` takes (uniform, "
    "FILE.npy, policy.npz, learner.pt, module:function).",
    "min_propensity": "Declared (public) lower bound on the logging policy's propensities: a "
    "fact of the logging design (1/A for a uniform logger, an exploration floor), never the "
    "smallest propensity in the log.",
    "data": "Dataset file whose header gives the spaces, horizon and number of trajectories "
    "(no episode is read).",
    "observation_space": "Declared observation space, without --data (default discrete:1).",
    "action_space": "Declared action space (discrete:A), without --data.",
    "max_horizon": "Steps that count (default: the metadata's, else 1).",
    "epsilon": "Also print IPS's noise std on the value at this ε.",
    "delta": "δ for the noise std.",
    "reward_range": "Public reward range LOW,HIGH for the noise std.",
    "trajectories": "Number of trajectories m for the noise std (default: from --data).",
    "json": "Print the suggestion as JSON.",
}


@dataclass(frozen=True)
class NoiseQuestion:
    """The public inputs of the noise line: ε, δ, the reward range text and m (if known)."""

    epsilon: float
    delta: float
    reward_range: str
    trajectories: int | None


def _suggestion(
    policy: str,
    min_propensity: float,
    data: Path | None,
    spaces_given: tuple[str | None, str | None],
    horizon: int | None,
) -> tuple[wc.WeightClipSuggestion, int | None]:
    """The suggestion, and m from the header when `data` is given."""
    from privrl.data.files import check_input_file
    from privrl.data.io import read_header
    from privrl.data.tools import parse_space

    observation_space, action_space = spaces_given
    if data is not None:
        if observation_space is not None or action_space is not None:
            raise InputError("give --data or the declared spaces, not both")
        check_input_file(data, "--data", what="dataset file")
        header = read_header(data)
        return wc.suggest_for_header(header, policy, min_propensity, horizon=horizon), (
            header.n_episodes
        )
    if action_space is None:
        raise InputError("give --data FILE or --action-space discrete:A (and --observation-space)")
    suggestion = wc.suggest_weight_clip(
        policy,
        min_propensity,
        action_space=parse_space(action_space),
        observation_space=parse_space(observation_space or "discrete:1"),
        horizon=horizon or 1,
    )
    return suggestion, None


def _noise_std(
    suggestion: wc.WeightClipSuggestion, question: NoiseQuestion, m: int | None
) -> float:
    """IPS's noise std on the value at the suggested W (public inputs checked first)."""
    check_epsilon(question.epsilon)
    check_delta(question.delta)
    if m is None:
        raise InputError(
            "--epsilon needs the number of trajectories: --data FILE or --trajectories"
        )
    check_int(m, "--trajectories", minimum=1)
    try:
        lo, hi = (float(x) for x in question.reward_range.split(","))
    except ValueError:
        raise InputError(f"--reward-range takes LOW,HIGH, got {question.reward_range!r}") from None
    return wc.ips_noise_std(
        suggestion.weight_clip, (lo, hi), m, question.epsilon, question.delta,
        horizon=suggestion.horizon,
    )  # fmt: skip


def suggest_clip_text(
    policy: str,
    min_propensity: float,
    *,
    data: Path | None = None,
    spaces_given: tuple[str | None, str | None] = (None, None),
    horizon: int | None = None,
    noise: NoiseQuestion | None = None,
    as_json: bool = False,
) -> str:
    """The command's output: the suggested W, how it follows from the inputs and, with
    `noise`, IPS's noise std at it (as lines, or as JSON)."""
    suggestion, m = _suggestion(policy, min_propensity, data, spaces_given, horizon)
    out: dict[str, object] = {
        "weight_clip": suggestion.weight_clip,
        "max_probability": list(suggestion.max_probability),
        "min_propensity": suggestion.min_propensity,
        "horizon": suggestion.horizon,
        "exact": suggestion.exact,
    }
    lines = [f"suggested --weight-clip {suggestion.weight_clip:.6g}", suggestion.explain()]
    if noise is not None:
        m = noise.trajectories if noise.trajectories is not None else m
        std = _noise_std(suggestion, noise, m)
        out["noise_std"] = std
        lines.append(
            f"at ε = {noise.epsilon:g}, δ = {noise.delta:g}, m = {m}: IPS noise std on the value "
            f"{std:.4g} at this W (it scales with W; a smaller W clips the weights above it, "
            "a bias)"
        )
    return json.dumps(out, indent=2) if as_json else "\n".join(lines)
