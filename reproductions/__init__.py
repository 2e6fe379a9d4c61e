"""The paper reproductions: one sub-package per paper, each regenerating its figures or tables at
a documented scale and writing a markdown report (our numbers beside the paper's) under
``docs/reproductions/ID`` of this checkout.

- `qiao_wang`, `dp_apvi_tabular`: Qiao & Wang, Offline Reinforcement Learning with Differential
  Privacy (the linear-MDP figures, and our tabular study of APVI / DP-APVI).
- `gpope`: Xie, Thomas & Miklau, Privacy Preserving Off-Policy Evaluation.
- `sdp_pe`: shuffle-private policy elimination (Figure 4).
- `primorl`: PRIMORL's tables and figures, and the MOPO row of its Table 1.
- `expert`: Sharma et al.'s expert-level DP (tables 2a/2b, figures 3/4).
- `audit`: empirical ε lower bounds of every private system.
- `claims`, `gallery`: the machine-readable claims of each report and the gallery
  ``docs/reproductions/index.md`` built from them; `reproduce`: the registry of
  ``privrl reproduce ID``.

Not installed with privrl: ``privrl reproduce`` loads this package from the checkout it runs in.
The datasets the reproductions use are built by the installed recipes
(``privrl data collect --recipe``, `privrl.runs.recipes`).
"""
