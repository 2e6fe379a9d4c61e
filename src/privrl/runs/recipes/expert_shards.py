"""The expert recipes' trajectories (stage 3: each expert's p_min-modified policy on the
default environment, one shard of experts per HDF5 file, as a `TrajectoryDataset`) and their
plot (stage 5: paper Figure 2, the experts' returns)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.envs.perturbed import Rollout, lunar_lander_rollout, numpy_rollout
from privrl.expert import experts as ex
from privrl.runs.recipes.common import Bar

if TYPE_CHECKING:
    from privrl.runs.recipes.expert import ExpertRecipeSpec
P_MIN = 0.02  # the experts' behaviour: p_min-modified policies (Sharma et al., B.1)


# ============================================================================ stage 3: shards


def _collect(
    spec: ExpertRecipeSpec,
    experts: ex.ArrayExperts,
    ids: np.ndarray,
    rng: np.random.Generator,
    bar: Bar,
) -> Rollout:
    """``spec.trajectories`` episodes per expert in ``ids`` on the default environment with the
    p_min-modified policy; episode j belongs to expert ``ep_ids[j]``."""
    ep_ids = np.repeat(ids, spec.trajectories)

    def act(obs: np.ndarray, idx: np.ndarray, g: np.random.Generator) -> Any:
        return experts.act(ep_ids[idx], obs, g, P_MIN, return_probs=True)

    if spec.env == "lunarlander":
        seeds = rng.integers(0, 2**31 - 1, size=len(ep_ids))
        return lunar_lander_rollout(
            act, seeds, rng, horizon=spec.data_horizon, record=True, progress=bar.advance
        )
    obs_dtype = np.float64 if spec.env == "hiv" else np.float32
    ro = numpy_rollout(
        _default_sim(spec.env), act, len(ep_ids), spec.data_horizon, rng, obs_dtype=obs_dtype
    )
    bar.advance(len(ep_ids))
    return ro


def rollout_to_dataset(
    ro: Rollout, unit_ids: np.ndarray, metadata: DatasetMetadata | None = None
) -> TrajectoryDataset:
    """Padded rollout arrays to a flat ``TrajectoryDataset``: float observations as recorded,
    uint8 actions, ``terminated`` on the last step of episodes that ended in a terminal state,
    ``truncated`` on the others (they hit the horizon)."""
    lengths = ro.lengths
    h = ro.rewards.shape[1]
    t_mask = np.arange(h)[None, :] < lengths[:, None]
    o_mask = np.arange(h + 1)[None, :] <= lengths[:, None]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    last = offsets[1:] - 1
    term = np.zeros(int(offsets[-1]), dtype=bool)
    trunc = np.zeros(int(offsets[-1]), dtype=bool)
    term[last[ro.terminated]] = True
    trunc[last[~ro.terminated]] = True
    return TrajectoryDataset(
        observations=ro.obs[o_mask],
        actions=ro.actions[t_mask].astype(np.uint8),
        rewards=ro.rewards[t_mask],
        terminated=term,
        truncated=trunc,
        episode_offsets=offsets,
        behaviour_probs=None if ro.probs is None else ro.probs[t_mask],
        unit_ids=np.asarray(unit_ids, dtype=np.int64),
        metadata=metadata,
    )


def _spaces(spec: ExpertRecipeSpec) -> tuple[Any, Any]:
    import gymnasium as gym
    from gymnasium import spaces

    if spec.env == "hiv":
        from privrl.envs.hiv import observation_space

        return observation_space(), spaces.Discrete(4)
    env = gym.make(spec.env_id)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


# ============================================================================ stage 5: plot


def plot_expert_returns(
    panels: list[tuple[str, np.ndarray]], path: Path, title: str, unit_note: str = ""
) -> Path:
    """Figure 2 style: one histogram (with a Gaussian KDE) of the experts' mean returns per
    panel, e.g. greedy on their own physics, greedy on the default environment, and their
    p_min-modified trajectories in the dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy.stats import gaussian_kde

    colours = ("tab:orange", "tab:green", "tab:blue", "tab:purple")
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (label, values), colour in zip(axes[0], panels, colours, strict=False):
        v = np.asarray(values, dtype=np.float64)
        bins = max(10, min(50, int(np.sqrt(max(v.size, 1)))))
        ax.hist(v, bins=bins, density=True, color=colour, alpha=0.6)
        if v.size > 2 and np.ptp(v) > 1e-9 * max(1.0, np.abs(v).max()):
            xs = np.linspace(v.min(), v.max(), 200)
            try:
                ax.plot(xs, gaussian_kde(v)(xs), color=colour)
            except np.linalg.LinAlgError:  # degenerate sample
                pass
        ax.set_xlabel(f"expert mean return{unit_note}")
        ax.set_title(
            f"{label}\nmedian {np.median(v):.4g}, mean {np.mean(v):.4g}, m = {v.size}",
            fontsize=9,
        )
    axes[0, 0].set_ylabel("density")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _default_sim(env: str) -> Any:
    from privrl.envs.perturbed import AcrobotBatch, CartPoleBatch, PerturbedHIVBatch

    return {"cartpole": CartPoleBatch, "acrobot": AcrobotBatch, "hiv": PerturbedHIVBatch}[env]()
