"""Expert-level private offline RL (Sharma et al.) on the run layer: `expert-dp` (consensus
filter + Selective DP-SGD, `expert_dp`) and `dp-sgd` (expert-level DP-SGD alone, the paper's
baseline; ``non_private`` runs its non-private twin, the reference of the normalised score;
`dp_sgd`).

The algorithms, their configs and their plans live in `privrl.expert` (`ExpertDP`, `DPSGD`);
these adapters add what only a command has: the dataset and expert-set files, the twin's run
directory (``--reference``), the recipe's evaluation environment, the run directory's files
and the command's wording of errors (flags instead of fields).

Certification: ``dp-sgd --sampling shuffle`` and ``expert-dp --accounting paper`` (0 < p < 1)
run the paper's procedure, which no accountant here certifies: their reports say ε = ∞, a
ledger refuses them before the data are read, and the paper's ε is kept only as metrics.json's
``epsilon_paper_accounting``. A twin trained on the same private data without a mechanism is
not covered by the run's guarantee: a score against it is labelled evaluation-only
(``reference_return_outside_guarantee: true`` and a note in privacy.json).
"""

from privrl.expert.api import obs_transform
from privrl.expert.config import ExpertTrainingConfig
from privrl.systems.expert.dp_sgd import DpSgd, DpSgdConfig
from privrl.systems.expert.expert_dp import ExpertDp, ExpertDpConfig

ExpertConfig = ExpertTrainingConfig
"""The settings both systems share (the library's `ExpertTrainingConfig`)."""

__all__ = ["DpSgd", "DpSgdConfig", "ExpertConfig", "ExpertDp", "ExpertDpConfig", "obs_transform"]
