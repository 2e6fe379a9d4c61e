"""Reproductions of Sharma et al., "Preserving Expert-Level Privacy in Offline RL" (spec
``expert_consensus.md``): ``expert-table2a`` (p ablation at ε = 10), ``expert-table2b`` (ε1 split
at low ε), ``expert-fig3`` (ours vs expert-level DP-SGD over ε, four environments, CQL and BCQ)
and ``expert-fig4`` (Acrobot, ε = 10, CQL, m ∈ {1000, 2000, 3000} experts).

Methods (one learner per algorithm, the same code with and without privacy):

* **non-private**: CQL / BCQ on all data (`DPSGDSettings(private=False)`), the reference
  R_nonprivate of the normalised score (R − R_random)/(R_nonprivate − R_random); R_random is
  the recipe's uniform-random return (``extra["reference_returns"]["random"]``).
* **DP-SGD**: expert-level DP-SGD on all data (Algorithm 4, `expert_dp_sgd`), all of (ε, δ).
* **ours**: consensus filter (ε1, δ1) + Selective DP-SGD (ε2, δ2) (`train_expert_dp`), budget
  split by `split_budget` (the paper's B.3 rules) unless a table overrides it.

Scale (the paper's runs train "as long as the budget allows" with noise multipliers 10–80, up
to ~10⁶ steps; out of reach on 2 shared cores): every run trains for a fixed number of steps
N (full: 5,000; batch 128) and the noise multiplier z is *calibrated* (PLD) so that the run's
private steps spend exactly its DP-SGD budget: K = N private steps for DP-SGD, K ≈ p·N for
Selective DP-SGD with the exact (certified) accounting, N steps at q = p·b/m for the paper's
(not certified) accounting. Evaluation: the mean return of 10 greedy evaluations (10 episodes
each) spaced over the last min(10,000, N/2) steps; CartPole evaluated for 1000 steps.

The paper's noise regime (``regime=True`` on every entry point, `Scale.regime`): every
private run at the fixed z = 10 (the bottom of the paper's grid) and b = 256, trained as long
as its budget allows (the paper's protocol) up to a cap of 6,000 steps, η fixed; a capped run
spends less than its budget and the report lists the steps and the certified ε of each cell.

Hyper-parameters: b = 128 (the paper's most frequent choice), z calibrated as above, p from
the paper's Table 1 (Tables 2a/2b vary it as the paper does), η searched over {5e-4, 1e-3,
5e-3} (a subset of the paper's grid) per (environment, algorithm, method) at ε = 10 on a search
seed (1000 + base seed) that is not a reporting seed; the search is not privacy-accounted, as in
the paper. Results are cached next to the dataset (``<stem>.expert-repro.json``: references,
search, noise calibrations).

Every run is a cell of a registered system — `dp-sgd` (its ``non_private`` twin for the
references and the non-private search), `expert-dp` for ours — run by the sweep runner
(`privrl.runs.sweep`): one sweep per phase in the cache,
``$PRIVRL_CACHE/reproduce/expert/{full,quick}/{search,reference,runs}/`` (each cell's run
directory, the results table), shared by every expert report, on a local process pool or on Ray
(``backend="ray"``). The run layer checks the dataset's ledger before a cell reads data; a
finished cell is skipped, whichever report ran it (Figure 3's ε = 10 runs are Table 2a's), so
an interrupted reproduction resumes where it stopped. OUT holds the report alone. The driver
reads only the datasets' headers, and Figure 4's public subsets of experts are written once
beside the dataset.

BCQ: linear imitation logits (the `privrl.rl.bcq` default): Fujimoto's final ReLU on the
imitation logits (`imitation_logits="relu"`) can kill an output unit at initialisation when
|A| = 2 (all its pre-activations negative; seed 0 on CartPole), after which π_imit can never
prefer that action and BCQ acts constantly (CartPole return 9). See docs/expert.md.

Modules: `paper` (the paper's settings and numbers, scale, statistics), `configs` (one run's
configuration, data cache, noise calibration), `runs` (a configuration as a sweep cell, the
sweeps, reference and search), `report` (cells, shared report sections, gallery claims, the
entry points' options), `tables` (Tables 2a/2b) and `figures` (Figures 3/4).
"""

from reproductions.expert.configs import RunConfig, dataset_path
from reproductions.expert.figures import fig3, fig3_regime, fig4
from reproductions.expert.paper import (
    ENVS,
    PAPER_TABLE1_P,
    PAPER_TABLE2A,
    PAPER_TABLE2B,
    REGIME_ENVS,
    Scale,
    ci95,
    mean_ci,
    normalised,
    pick_best,
)
from reproductions.expert.tables import table2a, table2b
from reproductions.expert.verdicts import (
    gallery_claims_fig3,
    gallery_claims_fig4,
    gallery_claims_table2a,
    gallery_claims_table2b,
)

__all__ = [
    "ENVS",
    "PAPER_TABLE1_P",
    "PAPER_TABLE2A",
    "PAPER_TABLE2B",
    "REGIME_ENVS",
    "RunConfig",
    "Scale",
    "ci95",
    "dataset_path",
    "fig3",
    "fig3_regime",
    "fig4",
    "gallery_claims_fig3",
    "gallery_claims_fig4",
    "gallery_claims_table2a",
    "gallery_claims_table2b",
    "mean_ci",
    "normalised",
    "pick_best",
    "table2a",
    "table2b",
]
