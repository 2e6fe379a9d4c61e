"""The reproductions are written on privrl's public Python API, the way d3rlpy's reproductions
and Opacus's examples are written on theirs.

Every privrl name a module of `reproductions/` imports (at the top or inside a function) must be
public: exported by privrl, one of its family packages or a top-level module (its `__all__`),
or part of the run layer (`privrl.runs`: run directories, sweeps, units, plots, recipes), which
the reproductions sit on as an application does. An internal name is allowed only when
`INTERNAL` lists it under the reason the public API does not serve: the list is what the public
API still lacks for the reproductions. A public name imported through the module that defines
it (the same object by a longer path) is listed in `LONG_PATHS`.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPRODUCTIONS = ROOT / "reproductions"

# reason -> the internal names (`module:name`) it allows, in any reproduction
INTERNAL: dict[str, tuple[str, ...]] = {
    # -- SDP-PE (Figure 4): analysis from public quantities, no run
    "Figure 4's calibration table and burn-in analysis evaluate the shuffle binary summation's "
    "calibration and error bound E at (ε, δ, n) chosen by the study, from public sizes only; "
    "a learner's plan states only the calibration of its own run": (
        "privrl.privacy.shuffle:binary_sum_error_bound",
        "privrl.privacy.shuffle:calibrate_binary_sum",
    ),
    "DP-UCBVI's burn-in is computed from public quantities: the binary tree's Laplace-sum error "
    "bound at every episode t and its depth, which no learner's plan states": (
        "privrl.privacy.tree:laplace_sum_bound",
        "privrl.privacy.tree:tree_levels",
    ),
    # -- GPOPE: simulation studies of many trials on shared per-trajectory statistics
    "the GPOPE studies run hundreds of trials x step sizes in lock step on per-trajectory "
    "statistics (one noise stream per memory-bounded batch) and record one representative "
    "report; `GPOPE.estimate` runs one dataset at a time, with another noise draw order": (
        "privrl.ope.gpope:gpope_replicas",
        "privrl.ope.gpope:gpope_report",
    ),
    "the output-perturbation baselines (DP-LSW, DP-LSL) of the GPOPE studies run per trial on "
    "first-visit returns computed once per trial and shared by every ε and constant c; "
    "`DPLSW` / `DPLSL` estimate one dataset from its trajectories": (
        "privrl.ope.baselines:FirstVisit",
        "privrl.ope.baselines:lsl_estimate",
        "privrl.ope.baselines:lsl_sigma",
        "privrl.ope.baselines:lsw_estimate",
        "privrl.ope.baselines:lsw_sigma",
    ),
    "the non-private references of the GPOPE studies (LSTD's fixed point θ*, the linear solve "
    "behind the MSPBE) are computed on each trial's statistics, not on a dataset": (
        "privrl.ope.lstd:lstd",
        "privrl.ope.lstd:solve_linear",
    ),
    "the LSTD-OP series of Figure 1(a) tunes the ridge on a public sample and releases once "
    "per trial on that trial's statistics (the steps `LSTDOP.estimate` runs on one dataset)": (
        "privrl.ope.lstd_op:LstdOpConfig",
        "privrl.ope.lstd_op:lstd_op_noise_multiplier",
        "privrl.ope.lstd_op:lstd_op_release",
        "privrl.ope.lstd_op:lstd_op_statistics",
    ),
    "the minibatch GPOPE series of Figure 1(a) runs minibatch GTD2 per trial on statistics "
    "shared with the other series, tuned on a public sample": (
        "privrl.ope.minibatch:MinibatchConfig",
        "privrl.ope.minibatch:minibatch_gtd2",
        "privrl.ope.minibatch:minibatch_report",
        "privrl.ope.minibatch:replace_one_epsilon",
        "privrl.ope.minibatch:tune_minibatch_on_public",
    ),
    "the accounting study compares GPOPE's rigorous calibration with the paper's Lemma 1 "
    "(σ and ε of both), which the estimators use but do not export": (
        "privrl.ope.accounting:COARSE_ORDERS",
        "privrl.ope.accounting:paper_sigma",
        "privrl.ope.accounting:rigorous_epsilon",
        "privrl.ope.accounting:rigorous_sigma",
    ),
    "the chain, Mountain Car and HIV domains and their state-aggregation features, which the "
    "studies sample trials from (the estimators build them from a dataset's header)": (
        "privrl.envs.chain:ChainDomain",
        "privrl.ope.domains:get_domain",
        "privrl.rl.features:make_features",
    ),
    # -- expert-level DP (Sharma et al.)
    "the expert reproductions name each cell's settings before any run: the consensus filter's "
    "event, for the joint calibration of z (`ExpertDP.plan` calibrates it from a dataset's "
    "header at run time)": ("privrl.privacy.threshold:DataReleaseCalibration",),
    "the paper's normalised score, (return − random) / (expert − random), of the discrete "
    "learners' evaluations": ("privrl.rl.discrete_common:normalised_score",),
    # -- PRIMORL and MOPO
    "the PRIMORL reports and the ablation describe the paper's per-task rows (z of LOW and "
    "HIGH, q, T_max, C) for rows that did not run, from the task presets": (
        "privrl.primorl.primorl:PRESETS",
    ),
    "Table 11's report evaluates the RDP ε of rows too noisy for a PLD grid "
    "(`table11.rdp_epsilon` states the same with privrl.privacy's accountant)": (
        "privrl.primorl.dp_fedavg:_epsilon_cached",
    ),
    "the MOPO report's planned privacy statement (non-private: ε = ∞) for a config": (
        "privrl.primorl.mopo:mopo_privacy_report",
    ),
    "the control tasks behind a dataset's env id and their public reward maps (Pendulum's raw "
    "scale, the recipe's transform), which `ControlTask` holds but privrl.envs does not "
    "export (it would load the simulators on `import privrl.envs`)": (
        "privrl.envs.control:PENDULUM_MAX_COST",
        "privrl.envs.control:control_task",
        "privrl.envs.control:reward_map",
        "privrl.envs.control:task_for_env_id",
        "privrl.envs.control:with_reward_transform",
    ),
    "the name of a PRIMORL run directory's unfinished release, which a resumed sweep cell "
    "copies in (a run-directory file of the primorl system)": ("privrl.systems.primorl:PENDING",),
    "a dataset path as reports print it ($PRIVRL_CACHE/…, ~/…), not naming the machine": (
        "privrl.data.paths:portable_path",
    ),
    # -- DP-APVI (tabular) and DP-VAPVI (linear): studies of the learners' steps
    "the DP-APVI study draws many private models from one dataset's counts (one count table "
    "for every budget, bonus and scale at a size n), with one noise stream per (seed, n, "
    "mechanism) shared by every budget (common random numbers), records the private model's "
    "known set and ñ's bias, and ablates the threshold without noise: DP-APVI's steps, which "
    "`DPAPVI.fit` runs once per dataset, counting it and drawing from its own stream": (
        "privrl.envs.tabular:Episodes",
        "privrl.offline.apvi:C2",
        "privrl.offline.apvi:NoisePlan",
        "privrl.offline.apvi:PrivacyConfig",
        "privrl.offline.apvi:dp_apvi_from_counts",
        "privrl.offline.apvi:empirical_counts",
        "privrl.offline.apvi:noise_plan",
        "privrl.offline.apvi:pessimistic_value_iteration",
        "privrl.offline.apvi:private_model",
    ),
    "Qiao & Wang's Figure 1 samples the linear MDP and runs diagnostic variants beyond what "
    "the objects expose: releasers with only the PD shift or only the noise, VAPVI on the "
    "unscaled table, PEVI with VAPVI's coefficient (β), the theory D/K term and Gram shift "
    "E in the text, and a representative DP-VAPVI report": (
        "privrl.envs.linear:LinearMDP",
        "privrl.offline.pevi:pevi_beta",
        "privrl.offline.vapvi:GaussianReleaser",
        "privrl.offline.vapvi:LinearEpisodes",
        "privrl.offline.vapvi:NonPrivateReleaser",
        "privrl.offline.vapvi:dp_vapvi",
        "privrl.offline.vapvi:gram_shift",
        "privrl.offline.vapvi:theory_additive_bonus",
        "privrl.offline.vapvi:vapvi",
        "privrl.offline.vapvi:variance_aware_pvi",
    ),
    "Qiao & Wang's grid runs the DPVAPVI, VAPVI and PEVI objects on a simulator's episodes "
    "(nested prefixes of one sample, no dataset file): each object's plan comes from the "
    "simulation's public sizes (the feature table, H and K), which `fit` reads from a "
    "dataset's header": (
        "privrl.offline.linear:LinearPublic",
        "privrl.privacy.public:PublicParameters",
    ),
    # -- `privrl reproduce`'s entry point
    "`reproductions.reproduce` is the command's implementation: it shares the command's seed "
    "limit and its one-line input errors": (
        "privrl.cli.reproduce:MAX_SEEDS",
        "privrl.privacy.limits:InputError",
        "privrl.privacy.limits:check_int",
    ),
}

# public names imported through the module that defines them (same object, longer path)
LONG_PATHS: tuple[str, ...] = (
    "privrl.data.paths:cache_dir",
    "privrl.online.common:make_env",
    "privrl.online.common:policy_set",
    "privrl.online.sdp_pe:stage_schedule",
    "privrl.primorl.mopo:MOPOConfig",
    "privrl.privacy.report:PrivacyReport",
)


def names_imported(source: str) -> set[str]:
    """The privrl names `source` imports anywhere (top level or in a function): `module:name`
    for `from module import name`, `module` for `import module`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "privrl" or node.module.startswith("privrl."):
                found.update(f"{node.module}:{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(
                alias.name
                for alias in node.names
                if alias.name == "privrl" or alias.name.startswith("privrl.")
            )
    return found


def privrl_imports() -> dict[str, set[str]]:
    """Per module of `reproductions/` (its path from the repository root), the privrl names it
    imports."""
    return {
        path.relative_to(ROOT).as_posix(): names_imported(path.read_text(encoding="utf-8"))
        for path in sorted(REPRODUCTIONS.rglob("*.py"))
    }


def exports(module: str) -> tuple[str, ...]:
    return tuple(getattr(importlib.import_module(module), "__all__", ()))


def is_public(ref: str) -> bool:
    """True when `ref` (`module:name` or `module`) is privrl's public API: the run layer, a
    family package or top-level module, or a name in the `__all__` of privrl, a family package
    or a top-level module (`privrl.ope:GPOPE`, not `privrl.ope.gpope:gpope_replicas`)."""
    module, _, name = ref.partition(":")
    if module == "privrl.runs" or module.startswith("privrl.runs."):
        return True
    if module.count(".") > 1:
        return False
    if not name:
        return True  # `import privrl` or `import privrl.<family>`
    if module == "privrl" and importlib.util.find_spec(f"privrl.{name}") is not None:
        return True  # `from privrl import ope`
    return name in exports(module)


def allowed_internal() -> dict[str, str]:
    return {ref: reason for reason, refs in INTERNAL.items() for ref in refs}


def _lines(found: Mapping[str, Iterable[str]]) -> str:
    return "\n".join(f"  {module}: {ref}" for module, refs in found.items() for ref in refs)


def test_every_privrl_import_of_a_reproduction_is_public_or_listed() -> None:
    allowed = set(allowed_internal()) | set(LONG_PATHS)
    offenders = {
        module: sorted(ref for ref in refs if not is_public(ref) and ref not in allowed)
        for module, refs in privrl_imports().items()
    }
    offenders = {module: refs for module, refs in offenders.items() if refs}
    assert not offenders, (
        "reproductions import internal privrl names; use the family's public API (its "
        "`__init__`), or list the name in INTERNAL with the reason the public API does not "
        "serve:\n" + _lines(offenders)
    )


def test_the_lists_hold_what_is_imported_and_nothing_public() -> None:
    imported = set().union(*privrl_imports().values())
    listed = [ref for refs in INTERNAL.values() for ref in refs]
    assert len(listed) == len(set(listed)), "a name is listed under two reasons"
    assert not set(listed) & set(LONG_PATHS)
    stale = sorted((set(listed) | set(LONG_PATHS)) - imported)
    assert not stale, f"listed but imported by no reproduction (drop them): {stale}"
    public = sorted(ref for ref in listed if is_public(ref))
    assert not public, f"listed as internal but public: {public}"
    for reason in INTERNAL:
        assert len(reason.split()) >= 8, f"say why the public API does not serve: {reason!r}"


@pytest.mark.parametrize("ref", LONG_PATHS)
def test_a_long_path_names_a_public_object(ref: str) -> None:
    """Each `LONG_PATHS` name is exported by its family (or privrl.privacy) as the same
    object: the import only takes a longer path to it."""
    module, name = ref.split(":")
    family = ".".join(module.split(".")[:2])
    assert not is_public(ref) and name in exports(family), ref
    assert getattr(importlib.import_module(module), name) is getattr(
        importlib.import_module(family), name
    )


def test_the_runners_moved_to_the_public_api_stay_there() -> None:
    """The runners of the SDP-PE, GPOPE, expert, PRIMORL, DP-APVI and Qiao & Wang
    reproductions import public names through their family packages (no long paths), and the
    SDP-PE jobs reach the UCB-VI family through the learner objects only."""
    runners = [
        *(f"reproductions/sdp_pe/{m}.py" for m in ("__init__", "jobs", "analysis", "burn_in")),
        *(
            f"reproductions/gpope/{m}.py"
            for m in (
                "accounting_study",
                "chain",
                "chain_units",
                "common",
                "continuous",
                "continuous_units",
                "lstd_op_chain",
                "minibatch_chain",
            )
        ),
        *(f"reproductions/expert/{m}.py" for m in ("configs", "runs", "paper")),
        *(
            f"reproductions/primorl/{m}.py"
            for m in ("table1", "table11", "fig3", "mopo", "sweeps", "seeding")
        ),
        *(f"reproductions/dp_apvi_tabular/{m}.py" for m in ("__init__", "study", "summary")),
        *(
            f"reproductions/qiao_wang/{m}.py"
            for m in ("__init__", "grid", "tuning", "investigation", "report")
        ),
    ]
    found = privrl_imports()
    long = {m: sorted(set(found[m]) & set(LONG_PATHS)) for m in runners}
    assert not {m: refs for m, refs in long.items() if refs}, long
    jobs = found["reproductions/sdp_pe/jobs.py"]
    assert "privrl.online:DPUCBVI" in jobs and "privrl.online:UCBVI" in jobs
    assert not any(ref.startswith("privrl.online.") for ref in jobs), jobs
    # the application layer above the run layer: only a run-directory file name
    above = {
        m: sorted(r for r in found[m] if r.startswith(("privrl.systems", "privrl.cli")))
        for m in runners
    }
    assert {m: refs for m, refs in above.items() if refs} == {
        "reproductions/primorl/seeding.py": ["privrl.systems.primorl:PENDING"]
    }


def test_the_collector_sees_every_form_of_import() -> None:
    source = (
        "from privrl.ope import GPOPE, IPS as ips\n"
        "import privrl.online.ucbvi\n"
        "import numpy as np\n"
        "from . import sibling\n"
        "from reproductions.claims import Claim\n"
        "def run():\n"
        "    from privrl.ope.gpope import gpope_replicas\n"
        "    import privrl.privacy.tree as tree\n"
        "    if True:\n"
        "        from privrl import online\n"
    )
    assert names_imported(source) == {
        "privrl.ope:GPOPE",
        "privrl.ope:IPS",
        "privrl.online.ucbvi",
        "privrl.ope.gpope:gpope_replicas",
        "privrl.privacy.tree",
        "privrl:online",
    }


@pytest.mark.parametrize(
    ("ref", "public"),
    [
        ("privrl.ope:GPOPE", True),
        ("privrl.online:UCBVI", True),
        ("privrl.privacy:NoiseSource", True),
        ("privrl.runs.sweep:run_sweep", True),
        ("privrl:online", True),
        ("privrl.ope", True),
        ("privrl.ope.gpope:gpope_replicas", False),
        ("privrl.ope.gpope:StepSize", False),  # public, but by the defining module's path
        ("privrl.online.ucbvi", False),
        ("privrl.systems.mopo:MopoRunConfig", False),
        ("privrl.ope:gpope_replicas", False),  # not exported by the family
    ],
)
def test_public_means_exported_by_a_family_or_the_run_layer(ref: str, public: bool) -> None:
    assert is_public(ref) is public
