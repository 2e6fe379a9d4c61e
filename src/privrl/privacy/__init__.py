"""privrl.privacy — the trusted core.

Every random draw that protects privacy happens in this package, and it imports nothing else
from privrl, so it is all a reviewer has to read to trust a guarantee:

- `units`: what is protected (`PrivacyUnit`) and how neighbours differ (`NeighbourRelation`);
- `noise`: `NoiseSource`, the one source of privacy noise and secret sampling (secure ChaCha20
  keyed by OS entropy; deterministic only behind an explicit, uncertified opt-in);
- `mechanisms`, `discrete`: Gaussian (vector, symmetric matrix), Laplace, exact discrete
  Gaussian / Laplace, binomial noise; each returns its output and a `Release` record;
- `clipping`: per-row, per-group (per unit) and ensemble clipping, numpy and torch;
- `accounting`: one facade over dp-accounting (RDP and PLD), calibration, composition;
- `events`: privrl's own `DpEvent`s for mechanisms dp-accounting cannot describe;
- `report`: the `PrivacyReport` every private run writes; `ledger`: the `BudgetLedger` of a
  dataset's episodes (keyed by their content fingerprint, tamper-evident).
"""

from privrl.privacy.accounting import (
    DENSE_RDP_ORDERS,
    Accountant,
    AccountingError,
    advanced_composition,
    calibrate_noise_multiplier,
    describe_backend,
    epsilon,
    max_steps,
    sampled_gaussian_event,
    zcdp_rho,
    zcdp_to_dp,
)
from privrl.privacy.clipping import clip_groups, clip_rows, ensemble_clip, group_sum
from privrl.privacy.events import ApproxDpEvent, PureDpEvent
from privrl.privacy.ledger import (
    BudgetExceededError,
    BudgetLedger,
    LedgerError,
    content_fingerprint,
    dataset_identity,
    ledgered,
    registry_dir,
)
from privrl.privacy.mechanisms import (
    binomial_delta,
    binomial_mechanism,
    discrete_gaussian_mechanism,
    discrete_laplace_mechanism,
    gaussian_mechanism,
    gaussian_noise_like,
    gaussian_symmetric_matrix,
    laplace_mechanism,
    privatize_sum_torch,
)
from privrl.privacy.noise import NoiseGenerator, NoiseSource
from privrl.privacy.release import Release
from privrl.privacy.report import PrivacyReport
from privrl.privacy.units import NeighbourRelation, PrivacyUnit, parse_relation, parse_unit

__all__ = [
    "DENSE_RDP_ORDERS",
    "Accountant",
    "AccountingError",
    "ApproxDpEvent",
    "BudgetExceededError",
    "BudgetLedger",
    "LedgerError",
    "NeighbourRelation",
    "NoiseGenerator",
    "NoiseSource",
    "PrivacyReport",
    "PrivacyUnit",
    "PureDpEvent",
    "Release",
    "advanced_composition",
    "binomial_delta",
    "binomial_mechanism",
    "calibrate_noise_multiplier",
    "clip_groups",
    "clip_rows",
    "content_fingerprint",
    "dataset_identity",
    "describe_backend",
    "discrete_gaussian_mechanism",
    "discrete_laplace_mechanism",
    "ensemble_clip",
    "epsilon",
    "gaussian_mechanism",
    "gaussian_noise_like",
    "gaussian_symmetric_matrix",
    "group_sum",
    "laplace_mechanism",
    "ledgered",
    "max_steps",
    "parse_relation",
    "parse_unit",
    "privatize_sum_torch",
    "registry_dir",
    "sampled_gaussian_event",
    "zcdp_rho",
    "zcdp_to_dp",
]
