"""The public side of the expert-level systems (`privrl.systems.expert`), from the dataset's
header and the command's settings only — nothing here reads an episode or an expert's policy.

- the public parameters m (number of experts), |A| (number of actions) and δ, resolved through
  `PublicParameters` (flag > declared metadata > default; never counted in the data);
- the expert set the dataset's metadata name (``extra["experts_dir"]``);
- the planned spend a ledger checks before the data are read;
- the evaluation set-up in the dataset's (public) environment;
- `Reference`: R_rand and R_np of the normalised score, possibly read from an earlier run
  directory (the non-private twin).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from privrl.config import ConfigError

CARTPOLE_EVAL_HORIZON = 1000
MAX_EXPERTS = 10**9
MAX_ACTIONS = 10**6

REFERENCE_NOTE = (
    "metrics.json's normalised_score uses R_np, the return of a non-private twin trained on "
    "the same private data (--reference): R_np and the score are evaluation-only and NOT "
    "covered by this guarantee (reference_return_outside_guarantee: true); publish "
    "return_mean, or a score against a reference from separate data"
)


# ---------------------------------------------------------------------------------------------
# public parameters
# ---------------------------------------------------------------------------------------------


def _declared_experts(meta: Any) -> tuple[Any, str]:
    """(m, metadata key) as the data holder declared it: ``extra["n_experts"]``, the number
    of units declared at import (``privrl data import --unit ... --units K`` records
    ``n_users`` for a unit column, ``n_trajectories`` for ``--unit episode``: the unit is the
    expert), or the ``experts-*`` recipes' ``extra["recipe"]["n_experts"]``."""
    extra = meta.extra if isinstance(meta.extra, dict) else {}
    if extra.get("n_experts") is not None:
        return extra["n_experts"], "n_experts"
    unit_key = "n_trajectories" if extra.get("unit") == "episode" else "n_users"
    if extra.get(unit_key) is not None:
        return extra[unit_key], unit_key
    recipe = extra.get("recipe")
    if isinstance(recipe, dict) and recipe.get("n_experts") is not None:
        return recipe["n_experts"], "recipe.n_experts"
    return None, "n_experts"


def resolve_experts(params: Any, flag: int | None, meta: Any) -> int:
    """m, the number of experts: ``--n-experts`` or the metadata's declaration, never the
    number of distinct ids in the data (under add/remove-one-expert it differs between
    neighbours)."""
    value, key = _declared_experts(meta)
    m = params.resolve(
        "number of experts m",
        flag=flag,
        metadata={key: value, "extra": meta.extra},
        key=key,
        fix="pass --n-experts M, the number of experts the data holder declares",
        detail="sets the sampling rate q = b/m and the default δ = 1/m",
    )
    if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= MAX_EXPERTS:
        raise ValueError(
            f"the dataset's metadata declare {key} = {m!r}, not a number of experts in "
            f"[1, {MAX_EXPERTS}]; pass --n-experts M"
        )
    return m


def resolve_actions(params: Any, flag: int | None, meta: Any) -> int:
    """|A|: ``--actions`` or the metadata's declared Discrete action space (not one the
    metadata mark as inferred from the data: the largest action index is private)."""
    from gymnasium import spaces

    from privrl.privacy.public import inferred_fields

    space = meta.action_space
    declared = None
    if space is not None:
        if not isinstance(space, spaces.Discrete):
            raise ValueError(
                f"CQL/BCQ need discrete actions; the dataset's action space is {space}"
            )
        if int(space.start) != 0:
            raise ValueError(f"the action space must start at 0, got {space}")
        declared = int(space.n)
    a = params.resolve(
        "number of actions |A|",
        flag=flag,
        metadata={"action_space": declared, "extra": meta.extra},
        key="action_space",
        fix="pass --actions A, the size of the public action space",
        detail="the network's output size; the consensus count's g = 1 − (|A|−1)·p_min",
    )
    if (
        flag is not None
        and declared is not None
        and "action_space" not in inferred_fields(meta)
        and flag != declared
    ):
        raise ConfigError(
            "actions",
            f"{flag} contradicts the dataset's declared action space Discrete({declared}); "
            "drop --actions or fix the dataset's metadata",
        )
    if not 2 <= int(a) <= MAX_ACTIONS:
        raise ValueError(f"need between 2 and {MAX_ACTIONS} actions, the dataset declares {a}")
    return int(a)


def resolve_delta(params: Any, flag: float | None, m: int) -> float:
    """δ: ``--delta``, else 1/m (the paper's choice)."""
    if flag is not None:
        return float(params.resolve("δ", flag=flag, fix="pass --delta"))
    delta = params.derive("δ", 1.0 / m, "1/m (the paper's choice; --delta overrides)")
    if not 0 < delta < 1:
        raise ValueError(f"the default δ = 1/m needs m >= 2 experts, got m = {m}; pass --delta")
    return float(delta)


def flag_or_default(params: Any, name: str, flag: Any, default: Any) -> Any:
    return params.resolve(name, flag=flag, default=default, fix="")


def check_batch(b: int, m: int) -> None:
    if b > m:
        raise ConfigError("batch_size", f"{b} exceeds the number of experts m = {m}")


def planned_spend(epsilon: float, delta: float, system: str) -> Any:
    """The spend checked against a ledger before the data are read: the run's target (ε, δ)
    under the expert unit (the run never exceeds it; the certified report is recorded)."""
    from privrl.expert.dpsgd import BACKEND, RELATION, UNIT
    from privrl.privacy.events import ApproxDpEvent
    from privrl.privacy.release import Release
    from privrl.privacy.report import PrivacyReport

    planned = Release(
        name="planned spend: the run's target budget (ε, δ)",
        mechanism="approx_dp",
        sensitivity=0.0,
        norm="l2",
        noise={},
        event=ApproxDpEvent(epsilon=float(epsilon), delta=float(delta)),
    )
    # stated directly, not re-accounted: the target is the (ε, δ) the run is calibrated to
    return PrivacyReport(
        unit=UNIT,
        relation=RELATION,
        releases=[planned],
        delta=float(delta),
        epsilon=float(epsilon),
        rho=None,
        accountant="planned: the run's target (ε, δ)",
        backend=BACKEND,
        system=f"{system} (planned)",
    )


def experts_from_metadata(data: Path, meta: Any) -> Path:
    """The expert set named by the dataset's metadata (``extra["experts_dir"]``, relative to
    the dataset file), for ``--experts`` left out. Uses the header's metadata only."""
    extra = meta.extra if isinstance(meta.extra, dict) else {}
    rel = extra.get("experts_dir")
    if not isinstance(rel, str) or not rel:
        raise ConfigError(
            "experts",
            "is required: the dataset's metadata name no expert set "
            '(extra["experts_dir"]); pass --experts DIR',
        )
    path = Path(rel)
    path = path if path.is_absolute() else data.parent / path
    if not path.exists():
        raise ConfigError(
            "experts",
            f"left out, and the dataset's expert set {path} (metadata experts_dir = {rel!r}) "
            "does not exist; pass --experts DIR or rebuild the dataset's recipe",
        )
    return path


def expert_set_path(given: Path | None, data: Path, meta: Any) -> Path:
    """``--experts`` (checked to be a directory), or the one the metadata name."""
    if given is None:
        return experts_from_metadata(data, meta)
    if not given.exists():
        raise ConfigError("experts", f"not found: {given}")
    if not given.is_dir():
        raise ConfigError("experts", f"{given} is not a directory; give an expert set's directory")
    return given


# ---------------------------------------------------------------------------------------------
# evaluation in the dataset's public environment
# ---------------------------------------------------------------------------------------------


def eval_setup(meta: Any, *, episodes: int, horizon: int | None, no_eval: bool) -> dict[str, Any]:
    """What the evaluation will be (published in config.json), from the metadata only."""
    if no_eval:
        return {"evaluation": "skipped (--no-eval)"}
    import gymnasium as gym

    from privrl.envs import register_envs

    env_id = meta.env_id
    if env_id is None:
        raise ValueError(
            "cannot evaluate: the dataset's metadata name no environment (env_id); pass --no-eval"
        )
    register_envs()
    if env_id not in gym.registry:
        raise ValueError(f"cannot evaluate: unknown environment {env_id!r}; pass --no-eval")
    if horizon is None:
        horizon = CARTPOLE_EVAL_HORIZON if env_id.startswith("CartPole") else meta.horizon
    return {"env_id": env_id, "eval_horizon": horizon, "eval_episodes": episodes}


EVAL_SEED_STEP = 7919  # evaluation k resets from seed + k·step by default


def evaluator(
    meta: Any, info: dict[str, Any], seed: int, *, step: int = EVAL_SEED_STEP
) -> Callable[[Any], np.ndarray] | None:
    """Greedy evaluation as `eval_setup` planned it (None when skipped); evaluation k resets
    its environments from seed ``seed + k·step``."""
    if "eval_horizon" not in info:
        return None
    from privrl.envs import eval_env_factory
    from privrl.rl.discrete_common import evaluate_greedy

    make = eval_env_factory(meta, info["eval_horizon"])  # with the recipe's env_kwargs (HIV)
    counter = iter(range(10**9))
    episodes = info["eval_episodes"]

    def evaluate(learner: Any) -> np.ndarray:
        return evaluate_greedy(learner, make, episodes=episodes, seed=seed + step * next(counter))

    return evaluate


# ---------------------------------------------------------------------------------------------
# the normalised score's references
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """R_rand and R_np of the normalised score (R − R_rand)/(R_np − R_rand). ``explicit``: asked
    for by the user, so a score that cannot be computed is an error before training."""

    nonprivate: float | None = None
    random: float | None = None
    source: str | None = None
    explicit: bool = False
    eval_horizon: int | None = None  # of the twin run, when R_np comes from one
    twin: bool = False  # R_np is the return of a twin trained on this dataset (--reference)

    @property
    def outside_guarantee(self) -> bool:
        """The score uses a twin trained on the same private data without a mechanism: it is
        evaluation-only, not covered by the run's guarantee."""
        return self.twin and self.nonprivate is not None and self.random is not None

    def resolve(self, meta: Any, eval_info: dict[str, Any]) -> Reference:
        """Fill in what the dataset's (public) metadata record; check the score is defined."""
        refs = meta.extra.get("reference_returns")
        refs = refs if isinstance(refs, dict) else {}
        r_np, source = self.nonprivate, self.source
        if r_np is None and refs.get("nonprivate") is not None:
            r_np, source = float(refs["nonprivate"]), "dataset metadata"
        r_rand = self.random if self.random is not None else refs.get("random")
        if not self.explicit:
            ok = r_np is not None and r_rand is not None and r_np != r_rand
            return replace(self, nonprivate=r_np, random=r_rand, source=source) if ok else self
        if "eval_horizon" not in eval_info:
            raise ValueError("--reference/--reference-return need an evaluation (drop --no-eval)")
        if self.eval_horizon is not None and self.eval_horizon != eval_info["eval_horizon"]:
            raise ConfigError(
                "reference",
                f"(the twin) was evaluated over {self.eval_horizon} steps, this run over "
                f"{eval_info['eval_horizon']}; pass the same --eval-horizon",
            )
        if r_np is None:
            raise ConfigError(
                "random_return", "needs R_np too: pass --reference RUN_DIR or --reference-return"
            )
        if r_rand is None:
            raise ValueError(
                "the dataset records no random-policy return (extra['reference_returns']"
                "['random']) for the normalised score; pass --random-return"
            )
        if r_np == float(r_rand):
            raise ValueError(
                f"the reference return R_np = {r_np:g} equals the random return: the normalised "
                "score is undefined"
            )
        return replace(self, nonprivate=r_np, random=float(r_rand), source=source)

    def score(self, ret: float) -> dict[str, Any]:
        """``normalised_score`` and the references it used (nothing when they are unknown)."""
        if self.nonprivate is None or self.random is None:
            return {}
        from privrl.rl.discrete_common import normalised_score

        refs = {"random": self.random, "nonprivate": self.nonprivate, "source": self.source}
        if self.eval_horizon is not None:
            refs["eval_horizon"] = self.eval_horizon
        return {
            "normalised_score": normalised_score(ret, self.random, self.nonprivate),
            "reference_returns": refs,
            # true: R_np comes from a non-private twin on the same data (evaluation-only);
            # false: R_np was given as a public number (flag or the dataset's metadata)
            "reference_return_outside_guarantee": self.outside_guarantee,
        }


def reference_from(
    reference: Path | None,
    reference_return: float | None,
    random_return: float | None,
    *,
    algo: str,
    data: Path,
) -> Reference:
    """Read ``--reference RUN_DIR`` (a non-private twin of the same data and learner) or take
    ``--reference-return``; before the data are read."""
    if reference_return is not None:
        return Reference(reference_return, random_return, "--reference-return", explicit=True)
    if reference is None:
        return Reference(random=random_return, explicit=random_return is not None)
    from privrl.runs.rundir import read_run

    found = read_run(reference)
    if found is None:
        raise ConfigError(
            "reference",
            f"{reference}: not a readable run directory (needs config.json and metrics.json, "
            "as every privrl train command writes)",
        )
    config, metrics = found
    if config.get("command") != "privrl train dp-sgd" or not config.get("non_private"):
        raise ConfigError(
            "reference",
            f"{reference}: not a non-private twin (privrl train dp-sgd --non-private); its "
            "return is not the normalised score's 1",
        )
    if config.get("algo") != algo:
        raise ConfigError(
            "reference", f"{reference}: trained --algo {config.get('algo')}, this run {algo}"
        )
    if not _same_file(Path(str(config.get("data"))), data):
        raise ConfigError(
            "reference", f"{reference}: trained on {config.get('data')}, this run on {data}"
        )
    if "return_mean" not in metrics:
        raise ConfigError("reference", f"{reference}: the twin was not evaluated (--no-eval)")
    horizon = config.get("eval_horizon")
    return Reference(
        float(metrics["return_mean"]),
        random_return,
        str(reference),
        explicit=True,
        eval_horizon=int(horizon) if isinstance(horizon, int) else None,
        twin=True,
    )


def _same_file(recorded: Path, data: Path) -> bool:
    """The twin's recorded data path names this dataset (the same file where both exist, else
    the same file name: the twin may have been run from another directory)."""
    if recorded.exists() and data.exists():
        return os.path.samefile(recorded, data)
    return recorded.name == data.name
