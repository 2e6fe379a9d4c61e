"""Off-policy evaluation with linear features on the run layer: GPOPE (Xie et al. 2019), the
output-perturbation baselines DP-LSW and DP-LSL (Balle et al. 2016) and non-private LSTD.

    privrl ope gpope  --env chain --trajectories 1000 --epsilon 0.1 --out runs/gp
    privrl ope dp-lsw --data data.h5 --features onehot --epsilon 1 --reward-range 1 --out runs/v1

A run takes `--data FILE` or `--env chain|mountain-car|hiv` (the episodes are then sampled from
a built-in domain, and the MSPBE of the output is reported). It writes config.json,
metrics.json (`mspbe` when the model is known, i.e. with --env; the value v = E_{d₀}[φ(s₀)]ᵀθ
over a public start distribution with its interval for the privacy noise, `privrl.ope.value`),
metrics.csv (GPOPE's MSPBE curve with --env, else θ), privacy.json, theta.npy and plots/*.png.

With --data, a declared horizon (`--max-horizon`, else the metadata's) truncates every episode
to its first H steps and bounds DP-LSW/DP-LSL's returns over H steps (`privrl.ope.horizon`),
which is what makes γ = 1 possible. Target policies the user supplies (.npy, a saved
policy.npz, module:function) go through `privrl.ope.targets`, shared with ips, snips and dr.

Order of work (the privacy rules of docs/privacy.md): `plan` sees the config and, with --data, the
file's header only (metadata and the number of trajectories m). Every quantity that sets the
noise — ε, δ, m, N, h, the step size, the reward range, γ — is resolved from public sources
(`privrl.privacy.public.PublicParameters`) and listed in privacy.json; GPOPE's h and step size,
when not given, are tuned on a PUBLIC sample (an independent dataset, or the simulator with an
independent seed). The dataset's ledger checks the planned report before `load` reads (or
samples) the episodes.

Privacy unit and relation: one trajectory under REPLACE-ONE neighbours, so the number of
trajectories m is the same for every neighbour, hence public, and read from the header.

`gpope --mode minibatch` (beyond the paper, `privrl.ope.minibatch`): Poisson-sampled minibatch
GTD2 with Polyak averaging, under ADD/REMOVE neighbours (the relation Poisson sampling is
analysed under; the replace-one ε of the same run is listed beside it). Neighbours then differ
in m, so the header's count is neither used nor published: the declared m̄ (--trajectories with
--env; --declared-trajectories or the metadata's n_trajectories with --data) sets the default
q = min(1, 20/m̄) and the step normaliser, and σ is calibrated by the PLD accountant for
(ε, δ, q, T) in the plan. h and η come from flags or a public tuning sample.

Seeds: the episodes are sampled with SeedSequence([seed, 1]) and GPOPE's public tuning sample
with [seed, 2]; GPOPE's public replica runs for the value's interval use [seed, 7]. The privacy
noise and GPOPE's secret trajectory draws never come from the seed: they come from the run's
secure `NoiseSource`.
"""

from privrl.systems.ope.baselines import (
    BaselineConfig,
    DpLsl,
    DpLslConfig,
    DpLsw,
    DpLswConfig,
    _Baseline,
    _check_states,
    _reward_bounds,
    tabular_view,
)
from privrl.systems.ope.common import (
    _UNSET,
    DEFAULT_DELTA,
    DEFAULT_TRAJECTORIES,
    ENVS,
    HEADER_COUNT_DETAIL,
    MAX_FEATURES,
    MAX_ITERATIONS,
    MAX_SAMPLED_TRANSITIONS,
    MAX_STATS_BYTES,
    MAX_TABULAR_STATES,
    MAX_TRAJECTORIES,
    ON_POLICY,
    OpeConfig,
    OpeSystem,
    PrivateOpeConfig,
    Problem,
    _check_dim,
    _facts,
    _fallback_parameter,
    _features,
    _horizon,
    _plot_theta,
    _policy,
    _positive,
    _source,
    _spec_dim,
    check_declared_trajectories,
    check_gamma_confidence,
    check_ledger_relation,
    check_on_policy,
    check_statistics_fit,
    check_target,
    declared_trajectories,
    get_domain,
    ope_result,
    public_problem,
    refuse_inferred_spaces,
    resolve_reward_scale,
    target_delta,
    target_epsilon,
    target_parameters,
    value_metrics,
)
from privrl.systems.ope.gpope import (
    GPOPE_VALUE_REPLICAS,
    MAX_REPLICA_GATHER,
    MAX_REPLICA_WORK,
    MAX_TUNING_GATHER,
    MIN_VALUE_REPLICAS,
    PAPER_ONLY,
    Gpope,
    GpopeConfig,
    _check_gpope_inputs,
    _public_sample,
    _refuse_data_as_public,
    flag_or_tuned,
    measured_on_public,
    minibatch_batch,
    minibatch_value_replicas,
    needs_public_data,
    public_clipping,
    value_replicas,
)
from privrl.systems.ope.lstd import (
    Lstd,
    LstdConfig,
)
from privrl.systems.ope.minibatch import (
    plan_minibatch,
    run_minibatch,
)

__all__ = [
    "DEFAULT_DELTA",
    "DEFAULT_TRAJECTORIES",
    "ENVS",
    "GPOPE_VALUE_REPLICAS",
    "HEADER_COUNT_DETAIL",
    "MAX_FEATURES",
    "MAX_ITERATIONS",
    "MAX_REPLICA_GATHER",
    "MAX_REPLICA_WORK",
    "MAX_SAMPLED_TRANSITIONS",
    "MAX_STATS_BYTES",
    "MAX_TABULAR_STATES",
    "MAX_TRAJECTORIES",
    "MAX_TUNING_GATHER",
    "MIN_VALUE_REPLICAS",
    "ON_POLICY",
    "PAPER_ONLY",
    "_UNSET",
    "BaselineConfig",
    "DpLsl",
    "DpLslConfig",
    "DpLsw",
    "DpLswConfig",
    "Gpope",
    "GpopeConfig",
    "Lstd",
    "LstdConfig",
    "OpeConfig",
    "OpeSystem",
    "PrivateOpeConfig",
    "Problem",
    "_Baseline",
    "_check_dim",
    "_check_gpope_inputs",
    "_check_states",
    "_facts",
    "_fallback_parameter",
    "_features",
    "_horizon",
    "_plot_theta",
    "_policy",
    "_positive",
    "_public_sample",
    "_refuse_data_as_public",
    "_reward_bounds",
    "_source",
    "_spec_dim",
    "check_declared_trajectories",
    "check_gamma_confidence",
    "check_ledger_relation",
    "check_on_policy",
    "check_statistics_fit",
    "check_target",
    "declared_trajectories",
    "flag_or_tuned",
    "get_domain",
    "measured_on_public",
    "minibatch_batch",
    "minibatch_value_replicas",
    "needs_public_data",
    "ope_result",
    "plan_minibatch",
    "public_clipping",
    "public_problem",
    "refuse_inferred_spaces",
    "resolve_reward_scale",
    "run_minibatch",
    "tabular_view",
    "target_delta",
    "target_epsilon",
    "target_parameters",
    "value_metrics",
    "value_replicas",
]
