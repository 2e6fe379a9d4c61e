"""The public side of the expert-level learners, from a dataset's header and the config only —
nothing here reads an episode or an expert's policy.

- the public parameters m (number of experts), |A| (number of actions) and δ, resolved through
  `PublicParameters` (setting > declared metadata > default; never counted in the data);
- the evaluation set-up in the dataset's (public) environment, and the greedy evaluator;
- `Reference`: R_rand and R_np of the normalised score.

Messages refer to the settings of `privrl.expert.config` as ```field=VALUE```.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from privrl.config import ConfigError
from privrl.expert.config import EVAL_SEED_STEP, MAX_ACTIONS, MAX_EXPERTS
from privrl.privacy.public import PublicParameters

if TYPE_CHECKING:
    from privrl.data.dataset import DatasetMetadata
    from privrl.rl.discrete_common import DiscreteLearner

CARTPOLE_EVAL_HORIZON = 1000

# the score's references without what they need (the command line has one more way to give R_np)
NEEDS_EVALUATION = "the normalised score's references need an evaluation (drop `no_eval=True`)"
NEEDS_NONPRIVATE = "needs R_np too: pass `reference_return=R_np`"

Evaluate = Callable[["DiscreteLearner"], np.ndarray]
EnvFactory = Callable[[], Any]


# ---------------------------------------------------------------------------------------------
# public parameters
# ---------------------------------------------------------------------------------------------


def _declared_experts(meta: DatasetMetadata) -> tuple[Any, str]:
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


def resolve_experts(params: PublicParameters, given: int | None, meta: DatasetMetadata) -> int:
    """m, the number of experts: ``n_experts`` or the metadata's declaration, never the
    number of distinct ids in the data (under add/remove-one-expert it differs between
    neighbours)."""
    value, key = _declared_experts(meta)
    m = params.resolve(
        "number of experts m",
        flag=given,
        metadata={key: value, "extra": meta.extra},
        key=key,
        fix="pass `n_experts=M`, the number of experts the data holder declares",
        detail="sets the sampling rate q = b/m and the default δ = 1/m",
    )
    if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= MAX_EXPERTS:
        raise ValueError(
            f"the dataset's metadata declare {key} = {m!r}, not a number of experts in "
            f"[1, {MAX_EXPERTS}]; pass `n_experts=M`"
        )
    return m


def resolve_actions(params: PublicParameters, given: int | None, meta: DatasetMetadata) -> int:
    """|A|: ``actions`` or the metadata's declared Discrete action space (not one the
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
        flag=given,
        metadata={"action_space": declared, "extra": meta.extra},
        key="action_space",
        fix="pass `actions=A`, the size of the public action space",
        detail="the network's output size; the consensus count's g = 1 − (|A|−1)·p_min",
    )
    if (
        given is not None
        and declared is not None
        and "action_space" not in inferred_fields(meta)
        and given != declared
    ):
        raise ConfigError(
            "actions",
            f"{given} contradicts the dataset's declared action space Discrete({declared}); "
            "drop `actions` or fix the dataset's metadata",
        )
    if not 2 <= int(a) <= MAX_ACTIONS:
        raise ValueError(f"need between 2 and {MAX_ACTIONS} actions, the dataset declares {a}")
    return int(a)


def resolve_delta(params: PublicParameters, given: float | None, m: int) -> float:
    """δ: ``delta``, else 1/m (the paper's choice)."""
    if given is not None:
        return float(params.resolve("δ", flag=given, fix="pass `delta`"))
    delta = params.derive("δ", 1.0 / m, "1/m (the paper's choice; `delta` overrides)")
    if not 0 < delta < 1:
        raise ValueError(f"the default δ = 1/m needs m >= 2 experts, got m = {m}; pass `delta`")
    return float(delta)


def flag_or_default(params: PublicParameters, name: str, given: Any, default: Any) -> Any:
    """A setting given in the config (source "flag"), else the library's default."""
    return params.resolve(name, flag=given, default=default, fix="")


def check_batch(b: int, m: int) -> None:
    if b > m:
        raise ConfigError("batch_size", f"{b} exceeds the number of experts m = {m}")


# ---------------------------------------------------------------------------------------------
# evaluation in the dataset's public environment
# ---------------------------------------------------------------------------------------------


def eval_setup(
    meta: DatasetMetadata, *, episodes: int, horizon: int | None, no_eval: bool
) -> dict[str, Any]:
    """What the evaluation will be (published beside the config), from the metadata only."""
    if no_eval:
        return {"evaluation": "skipped (`no_eval`)"}
    import gymnasium as gym

    from privrl.envs import register_envs

    env_id = meta.env_id
    if env_id is None:
        raise ValueError(
            "cannot evaluate: the dataset's metadata name no environment (env_id); "
            "pass `no_eval=True`"
        )
    register_envs()
    if env_id not in gym.registry:
        raise ValueError(f"cannot evaluate: unknown environment {env_id!r}; pass `no_eval=True`")
    if horizon is None:
        horizon = CARTPOLE_EVAL_HORIZON if env_id.startswith("CartPole") else meta.horizon
    return {"env_id": env_id, "eval_horizon": horizon, "eval_episodes": episodes}


def default_env_factory(meta: DatasetMetadata, horizon: int | None) -> EnvFactory:
    """The dataset's environment ``metadata.env_id`` as registered, truncated at ``horizon``."""
    import gymnasium as gym

    from privrl.envs import register_envs

    register_envs()
    kwargs: dict[str, Any] = {} if horizon is None else {"max_episode_steps": int(horizon)}
    env_id = meta.env_id

    def make() -> Any:
        return gym.make(env_id, **kwargs)

    return make


def greedy_evaluator(
    info: dict[str, Any], make: EnvFactory, seed: int, *, step: int = EVAL_SEED_STEP
) -> Evaluate | None:
    """Greedy evaluation as `eval_setup` planned it (None when skipped): evaluation k runs
    ``eval_episodes`` episodes of environments from ``make``, reset from seed
    ``seed + k·step``."""
    if "eval_horizon" not in info:
        return None
    from privrl.rl.discrete_common import evaluate_greedy

    counter = iter(range(10**9))
    episodes = info["eval_episodes"]

    def evaluate(learner: DiscreteLearner) -> np.ndarray:
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
    twin: bool = False  # R_np is the return of a twin trained on this dataset
    note: str = ""  # what the report says when the score is outside the guarantee

    @classmethod
    def given(cls, reference_return: float | None, random_return: float | None) -> Reference:
        """The references a config gives as numbers (``reference_return``, ``random_return``)."""
        if reference_return is not None:
            return cls(reference_return, random_return, "reference_return", explicit=True)
        return cls(random=random_return, explicit=random_return is not None)

    @property
    def outside_guarantee(self) -> bool:
        """The score uses a twin trained on the same private data without a mechanism: it is
        evaluation-only, not covered by the run's guarantee."""
        return self.twin and self.nonprivate is not None and self.random is not None

    def resolve(self, meta: DatasetMetadata, eval_info: dict[str, Any]) -> Reference:
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
            raise ValueError(NEEDS_EVALUATION)
        if r_np is None:
            raise ConfigError("random_return", NEEDS_NONPRIVATE)
        if r_rand is None:
            raise ValueError(
                "the dataset records no random-policy return (extra['reference_returns']"
                "['random']) for the normalised score; pass `random_return=R`"
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
            # false: R_np was given as a public number (a setting or the dataset's metadata)
            "reference_return_outside_guarantee": self.outside_guarantee,
        }
