"""Off-policy evaluation with linear features on the run layer: GPOPE (Xie et al. 2019), the
output-perturbation baselines DP-LSW and DP-LSL (Balle et al. 2016) and non-private LSTD.

    privrl ope gpope  --env chain --trajectories 1000 --epsilon 0.1 --out runs/gp
    privrl ope dp-lsw --data data.h5 --features onehot --epsilon 1 --reward-range 1 --out runs/v1

The estimators are `privrl.ope.linear` (GPOPE, DPLSW, DPLSL, LSTD: a config and an object
each, with the public-parameter resolution); these modules adapt them to the run layer, one
per system (`gpope`, `baselines`, `lstd`, and `common` for what they share). A run takes
`--data FILE` or `--env chain|mountain-car|hiv` (the episodes are then sampled from a built-in
domain, and the MSPBE of the output is reported). It writes config.json, metrics.json (`mspbe`
when the model is known, i.e. with --env; the value v = E_{d₀}[φ(s₀)]ᵀθ over a public start
distribution with its interval for the privacy noise, `privrl.ope.value`), metrics.csv
(GPOPE's MSPBE curve with --env, else θ), privacy.json, theta.npy and plots/*.png.

Order of work (the privacy rules of docs/privacy.md): `plan` sees the config and, with --data,
the file's header only (metadata and the number of trajectories m). Every quantity that sets
the noise — ε, δ, m, N, h, the step size, the reward range, γ — is resolved from public sources
(`privrl.privacy.public.PublicParameters`) and listed in privacy.json; GPOPE's h and step size,
when not given, are tuned on a PUBLIC sample (an independent dataset, or the simulator with an
independent seed). The dataset's ledger checks the planned report before `load` reads (or
samples) the episodes.

Privacy unit and relation: one trajectory under REPLACE-ONE neighbours, so the number of
trajectories m is the same for every neighbour, hence public, and read from the header.
`gpope --mode minibatch` (`privrl.ope.linear.minibatch`) is under ADD/REMOVE neighbours.

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
    reward_bounds,
    tabular_view,
)
from privrl.systems.ope.common import *  # noqa: F403
from privrl.systems.ope.common import __all__ as _common
from privrl.systems.ope.gpope import *  # noqa: F403
from privrl.systems.ope.gpope import __all__ as _gpope
from privrl.systems.ope.lstd import Lstd, LstdConfig

__all__ = [
    "BaselineConfig",
    "DpLsl",
    "DpLslConfig",
    "DpLsw",
    "DpLswConfig",
    "Lstd",
    "LstdConfig",
    "reward_bounds",
    "tabular_view",
    *_common,
    *_gpope,
]
