"""Private off-policy evaluation on the Open Bandit Dataset (OBD) samples: privrl's IPS, SNIPS
and DR at ε ∈ {0.5, 1, 5} against the logs' own on-policy click rates.

    python examples/obp_acceptance.py --out runs/obp [--obp-python PYTHON] [--seed 0]

Data: the two OBD samples shipped inside the obp 0.4.1 wheel (campaign ``all``): 10,000
impressions logged by a uniform-random policy and 10,000 by Bernoulli Thompson sampling (BTS),
80 items, 3 positions, with click and propensity. They are read at run time from an
importable ``obp`` (located without importing it), else from the wheel
(``pip download obp==0.4.1 --no-deps`` into ``$PRIVRL_CACHE``, default ~/.cache/privrl);
nothing of the data is committed.

Two questions, as in the OBD paper (Saito et al. 2021):

* the uniform-random policy's value estimated from the BTS log; ground truth: the random
  log's mean click rate;
* the BTS policy's value estimated from the random log; the target's action probabilities
  π(a | position) come from the BTS policy with obp's ZOZOTOWN prior, computed here by the
  same Monte-Carlo simulation as obp's ``BernoulliTS.compute_batch_action_dist`` from the
  prior's α, β read from the wheel (obp itself is not installed beside privrl);
  ground truth: the BTS log's mean click rate.

Each log goes through ``privrl data import --bandit`` as published (one impression = one
one-step episode: the observation is the position, 1..3 in ``discrete:3:1``, the action the
item, the reward the click, ``behaviour_prob`` the logged propensity; nothing reshaped by
hand) and the ``privrl ope ips | snips | dr`` systems on the run layer (one run directory per
estimator and ε). The coverage study re-draws the privacy noise with
the library entry points (`privrl.ope.importance`) on the plan the system made.

Privacy unit: one impression (one row), replace-one; the guarantee is per impression, not per
user. Every bound is public and chosen from the design without reading the logs: reward range
[0, 1] (a click), horizon 1, γ = 1, the weight clip W from `design_weight_clip` (the target
and the logging policy as designed, the prior's click rates), DR's reward model q̂ = the
prior's mean click rate α/(α+β) per item.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privrl.privacy.noise import NoiseSource

OBP_VERSION = "0.4.1"
N_ACTIONS = 80  # OBD's published design: 80 items ...
LEN_LIST = 3  # ... shown at 3 positions per impression
CAMPAIGN = "all"
EPSILONS = (0.5, 1.0, 5.0)
ESTIMATORS = ("ips", "snips", "dr")
DELTA = 1e-5
MAX_REL_BIAS = 0.05  # the public clipping-bias budget of `design_weight_clip`
N_SIM = 100_000  # Monte-Carlo draws for BTS's action probabilities (obp's default)
BTS_SEED = 12345  # public seed of that simulation
LOGS = ("random", "bts")
MEMBERS = (
    {f"{log}_csv": f"obp/dataset/obd/{log}/{CAMPAIGN}/all.csv" for log in LOGS}
    | {f"{log}_items": f"obp/dataset/obd/{log}/{CAMPAIGN}/item_context.csv" for log in LOGS}
    | {"prior": "obp/policy/conf/prior_bts.yaml"}
)


# ------------------------------------------------------------------------ fetching the data


@dataclass(frozen=True)
class ObdFiles:
    """Paths of the OBD sample files and where they came from."""

    random_csv: Path
    bts_csv: Path
    prior: Path
    source: str

    @property
    def obd_dir(self) -> Path:
        """The folder holding ``{random,bts}/all/all.csv`` (obp's ``data_path`` layout)."""
        return self.random_csv.parents[2]


def cache_dir() -> Path:
    return Path(os.environ.get("PRIVRL_CACHE", Path.home() / ".cache" / "privrl"))


def fetch_obd(cache: Path | None = None) -> ObdFiles:
    """The OBD samples from an importable obp (found, not imported), else from the obp wheel
    downloaded into the cache (once)."""
    spec = importlib.util.find_spec("obp")
    if spec is not None and spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations))).parent
        paths = {k: root / member for k, member in MEMBERS.items()}
        if all(p.is_file() for p in paths.values()):
            return ObdFiles(
                paths["random_csv"], paths["bts_csv"], paths["prior"], "installed obp package"
            )
    cache = (cache or cache_dir()) / "obp"
    target = cache / f"obp-{OBP_VERSION}"
    paths = {k: target / member for k, member in MEMBERS.items()}
    if not all(p.is_file() for p in paths.values()):
        wheel = cache / f"obp-{OBP_VERSION}-py3-none-any.whl"
        if not wheel.is_file():
            cache.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, "-m", "pip", "download", f"obp=={OBP_VERSION}"]
            done = subprocess.run(
                [*cmd, "--no-deps", "--only-binary", ":all:", "-d", str(cache)],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0 or not wheel.is_file():
                raise SystemExit(
                    f"error: could not download the obp {OBP_VERSION} wheel "
                    f"({done.stderr.strip().splitlines()[-1:] or 'no output'}); put "
                    f"{wheel.name} into {cache} and run again"
                )
        with zipfile.ZipFile(wheel) as zf:
            for member in MEMBERS.values():
                zf.extract(member, target)
    return ObdFiles(
        paths["random_csv"], paths["bts_csv"], paths["prior"], f"obp {OBP_VERSION} wheel"
    )


def read_prior(path: Path, campaign: str = CAMPAIGN) -> tuple[np.ndarray, np.ndarray]:
    """α and β of obp's ZOZOTOWN prior for BTS (``prior_bts.yaml``: campaign → alpha/beta
    lists), read with a minimal reader of that file's layout (no YAML dependency)."""
    table: dict[str, dict[str, list[float]]] = {}
    section = key = None
    for raw in path.read_text().splitlines():
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        text = line.strip()
        if text.startswith("- ") and section is not None and key is not None:
            table[section][key].append(float(text[2:]))
        elif text.endswith(":") and indent == 0:
            section, key = text[:-1], None
            table[section] = {}
        elif text.endswith(":") and section is not None:
            key = text[:-1]
            table[section][key] = []
    alpha = np.asarray(table[campaign]["alpha"], dtype=np.float64)
    beta = np.asarray(table[campaign]["beta"], dtype=np.float64)
    if alpha.shape != beta.shape or alpha.ndim != 1:
        raise ValueError(f"{path}: alpha and beta of {campaign!r} must be lists of one length")
    return alpha, beta


# ------------------------------------------------------------------------ the public design


def bts_action_dist(
    alpha: np.ndarray,
    beta: np.ndarray,
    len_list: int = LEN_LIST,
    n_sim: int = N_SIM,
    seed: int = BTS_SEED,
) -> np.ndarray:
    """π(a | position) of Bernoulli TS with prior Beta(α, β), as [len_list, A]: the frequency
    with which item a is ranked at each position when the items are sorted by one draw of
    Beta(α_a, β_a) each, over n_sim draws — obp's ``compute_batch_action_dist`` (select_action
    ranks the sampled click rates, highest first), vectorised. Public: a function of the
    published prior and a fixed seed."""
    rng = np.random.default_rng(seed)
    A = alpha.shape[0]
    counts = np.zeros((len_list, A))
    for chunk in np.array_split(np.arange(n_sim), max(1, n_sim // 20_000)):
        draws = rng.beta(alpha, beta, size=(chunk.size, A))
        top = np.argsort(-draws, axis=1)[:, :len_list]
        for pos in range(len_list):
            counts[pos] += np.bincount(top[:, pos], minlength=A)
    return counts / n_sim


def clipping_bias(W: float, target: np.ndarray, logging: np.ndarray, q: np.ndarray) -> float:
    """Relative bias of clipping the weight w = π/μ at W, under the public reward model q̂:
    Σ π q̂ (1 − W/w)_+ / Σ π q̂, positions equally likely (each impression shows all three).
    A logging probability 0 counts as an unbounded weight."""
    with np.errstate(divide="ignore"):
        w = np.where(logging > 0, target / np.where(logging > 0, logging, 1.0), np.inf)
    lost = np.where(w > W, 1.0 - W / w, 0.0)
    mass = target * q[None, :]
    return float(np.sum(mass * lost) / np.sum(mass))


def design_weight_clip(
    target: np.ndarray, logging: np.ndarray, q: np.ndarray, max_rel_bias: float = MAX_REL_BIAS
) -> float:
    """The public weight clip W: the smallest W (two significant digits, rounded up) whose
    clipping bias under the designed target π, the designed logging policy μ and the public
    q̂ is at most `max_rel_bias`; W = the largest designed weight when that is smaller. Only
    public tables enter: no log is read."""
    finite = target[logging > 0] / logging[logging > 0]
    w_max = float(finite.max()) if np.all(logging[target > 0] > 0) else math.inf
    lo, hi = 1.0, w_max if math.isfinite(w_max) else 1e6
    if clipping_bias(lo, target, logging, q) <= max_rel_bias:
        return lo
    for _ in range(60):  # clipping_bias decreases in W
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if clipping_bias(mid, target, logging, q) <= max_rel_bias else (mid, hi)
    digits = 1 - math.floor(math.log10(hi))
    return float(min(math.ceil(hi * 10**digits) / 10**digits, w_max))


@dataclass(frozen=True)
class Question:
    """One off-policy question: evaluate `target` from the `log`; truth from `truth_log`."""

    name: str
    log: str
    target: str
    truth_log: str
    weight_clip: float


def public_design(
    alpha: np.ndarray, beta: np.ndarray, n_sim: int = N_SIM, seed: int = BTS_SEED
) -> dict[str, Any]:
    """Everything that sets a bound, from the published design only (the prior, the number of
    items and positions, the uniform-random logging policy): the BTS table, q̂ and the two
    questions with their W. Takes no log: nothing here can depend on the private rows."""
    A = alpha.shape[0]
    bts = bts_action_dist(alpha, beta, LEN_LIST, n_sim, seed)
    uniform = np.full((LEN_LIST, A), 1.0 / A)
    q = alpha / (alpha + beta)  # the prior's mean click rate per item
    return {
        "bts": bts,
        "q": q,
        "questions": [
            Question(
                "uniform-random policy from the BTS log",
                "bts",
                "uniform",
                "random",
                design_weight_clip(uniform, bts, q),
            ),
            Question(
                "BTS policy from the uniform-random log",
                "random",
                "bts",
                "bts",
                design_weight_clip(bts, uniform, q),
            ),
        ],
    }


# ------------------------------------------------------------------------ import


def read_log(csv: Path) -> dict[str, np.ndarray]:
    """The OBD columns used here (item_id, position, click, propensity_score)."""
    from pyarrow import csv as pacsv

    cols = ["item_id", "position", "click", "propensity_score"]
    table = pacsv.read_csv(csv, convert_options=pacsv.ConvertOptions(include_columns=cols))
    return {c: table.column(c).to_numpy() for c in cols}


def import_log(csv: Path, h5: Path, n_actions: int = N_ACTIONS) -> Path:
    """``privrl data import --bandit`` of one OBD log as it is published (spaces declared, not
    inferred): one impression = one one-step episode, the position 1..3 the observation
    (``discrete:3:1``: OBD numbers positions from 1), the item the action, the click the
    reward, the logged propensity ``behaviour_prob``. Positions or items outside the declared
    spaces are refused by the import (a format error of the file), never clipped."""
    from privrl.data.tools import import_dataset

    h5.parent.mkdir(parents=True, exist_ok=True)
    h5.unlink(missing_ok=True)
    import_dataset(
        str(csv),
        h5,
        columns="position=position,action=item_id,reward=click,behaviour_prob=propensity_score",
        format="csv",
        observation_space=f"discrete:{LEN_LIST}:1",
        action_space=f"discrete:{n_actions}",
        bandit=True,
    )
    return h5


# ------------------------------------------------------------------------ estimates


def run_spec(
    estimator: str,
    question: Question,
    h5: Path,
    files: dict[str, Path],
    *,
    epsilon: float,
    out: Path,
    seed: int,
) -> Any:
    """The `privrl ope <estimator>` run of one cell, as the CLI would build it."""
    from privrl.runs.layer import RunSpec

    settings: dict[str, Any] = {
        "system": estimator,
        "data": str(h5),
        "out": str(out),
        "seed": seed,
        "target_policy": "uniform" if question.target == "uniform" else str(files["bts"]),
        "weight_clip": question.weight_clip,
        "reward_range": [0.0, 1.0],
        "max_horizon": 1,
        "gamma": 1.0,
        "epsilon": epsilon,
        "delta": DELTA,
        "interval": "bhatia-davis",
    }
    if estimator == "dr":
        settings["reward_model"] = str(files["q"])
    return RunSpec.from_mapping(settings)


def _resample(t: Any, idx: np.ndarray) -> Any:
    from privrl.ope.importance import Terms

    pick = lambda a: None if a is None else a[idx]  # noqa: E731
    return Terms(t.weights[idx], t.returns[idx], pick(t.baseline), pick(t.q_taken))


INTERVALS = ("popoviciu", "bhatia-davis")


def _estimate(estimator: str, t: Any, facts: Any, **kw: Any) -> Any:
    from privrl.ope import importance as imp

    if estimator == "ips":
        return imp.ips(t, facts["bounds"], **kw)
    if estimator == "snips":
        return imp.snips(t, facts["bounds"], **kw)
    return imp.dr(t, facts["bounds"], facts["reward_model"].q_range, **kw)


def _both(estimator: str, t: Any, facts: Any, noise: Any, seed: Any) -> dict[str, Any]:
    """One estimate with each interval, on the same noise draw (the interval is
    post-processing of the same release). A simulation study: the noise repeats from the seed
    (insecure reproducible noise, so these estimates carry no certified guarantee)."""
    out = {}
    for interval in INTERVALS:
        rng = NoiseSource.insecure(seed).generator()
        kw = {"noise": noise, "rng": rng} if noise is not None else {}
        out[interval] = _estimate(estimator, t, facts, interval=interval, **kw)
    return out


def _coverage(estimates: list[dict[str, Any]], truth: float, tag: str) -> dict[str, float]:
    row = {}
    for interval, short in zip(INTERVALS, ("pop", "bd"), strict=True):
        lo = np.array([e[interval].ci_low for e in estimates])
        hi = np.array([e[interval].ci_high for e in estimates])
        row[f"coverage_{tag}_{short}"] = float(np.mean((lo <= truth) & (truth <= hi)))
        row[f"width_{tag}_{short}"] = float(np.mean(hi - lo))
    return row


def evaluate_question(
    question: Question,
    h5: Path,
    truth: float,
    files: dict[str, Path],
    out: Path,
    *,
    epsilons: tuple[float, ...] = EPSILONS,
    estimators: tuple[str, ...] = ESTIMATORS,
    n_noise: int = 500,
    n_resample: int = 200,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Rows of the results table for one question: per estimator, the non-private estimate
    and, per ε, the private run (its value and score interval, from the run directory); for
    both intervals (score = Bhatia–Davis, and Popoviciu) their coverage and mean width:

    * `_noise_`: over `n_noise` fresh noise draws on the log as it is, coverage of `truth`
      (conditional on this log: its sampling error is fixed);
    * `_resample_`: over `n_resample` bootstrap resamples of the impressions, each with fresh
      noise, coverage of the bootstrap world's true value — the full log's non-private
      estimate with the same W (`value_np`), the estimand when the log is the population. It
      checks that the interval accounts for sampling and noise together; it says nothing of
      the clipping bias or of a target that differs from the logging policy of `truth`.
    """
    from privrl.data.io import read_header
    from privrl.ope import importance as imp
    from privrl.runs import registry
    from privrl.runs.layer import execute, plan_of

    rows = []
    header = read_header(h5)
    for k, estimator in enumerate(estimators):
        for epsilon in (None, *epsilons):
            cell = f"{estimator}-eps{epsilon:g}" if epsilon is not None else f"{estimator}-np"
            # the non-private cell plans with ε = 1 only to get the same bounds; it draws no noise
            spec = run_spec(
                estimator, question, h5, files, epsilon=epsilon or 1.0, out=out / cell, seed=seed
            )
            system = registry.get(estimator)
            plan = plan_of(system, spec, header)  # the system's own bounds and noise
            facts = plan.facts
            data = system.load(spec.config, h5, plan, np.random.default_rng(seed))
            t = imp.terms(data, facts["policy"], facts["bounds"], facts["reward_model"])
            noise = None if epsilon is None else facts["noise"]
            row: dict[str, Any] = {
                "question": question.name,
                "estimator": estimator,
                "epsilon": epsilon,
                "weight_clip": question.weight_clip,
                "truth": truth,
            }
            # the estimate with both intervals, on one reproducible noise draw
            both = _both(estimator, t, facts, noise, [seed, 5])
            bd, pop = both["bhatia-davis"], both["popoviciu"]
            value_np = _estimate(estimator, t, facts).value  # the bootstrap world's truth
            row |= {
                "value_np": value_np,
                "value": bd.value,
                "ci_low": bd.ci_low,
                "ci_high": bd.ci_high,
                "ci_low_pop": pop.ci_low,
                "ci_high_pop": pop.ci_high,
            }
            if epsilon is not None:
                result = execute(spec, quiet=True)  # the run directory of this cell
                m = result.metrics
                # the run's noise is secret (a fresh draw, not the one above); its mechanism is
                # the library's: the same noise scale
                assert np.allclose(m["noise_std"], bd.noise_std), "not the library's mechanism"
                row |= {
                    # the (first) released sum's noise sd, on the scale of a mean
                    "noise_std_of_mean": float(m["noise_std"][0]) / t.m,
                    "epsilon_reported": m["epsilon"],
                    "run_dir": cell,
                }
                seeds = np.random.SeedSequence([seed, 16, k, len(rows), 0]).spawn(n_noise)
                draws = [_both(estimator, t, facts, noise, s) for s in seeds]
                values = np.array([d["bhatia-davis"].value for d in draws])
                row |= _coverage(draws, truth, "noise") | {
                    "sd_noise": float(values.std()),
                    "rmse_noise": float(np.sqrt(np.mean((values - truth) ** 2))),
                }
            boot_rng = np.random.default_rng([seed, 16, k, len(rows), 1])
            seeds = np.random.SeedSequence([seed, 16, k, len(rows), 2]).spawn(n_resample)
            boots = [
                _both(estimator, _resample(t, boot_rng.integers(0, t.m, size=t.m)), facts, noise, s)
                for s in seeds
            ]
            row |= _coverage(boots, value_np, "resample")
            rows.append(row)
    return rows


def mean_click(csv: Path) -> tuple[float, float]:
    """A log's on-policy value (its mean click rate) and that mean's standard error."""
    clicks = read_log(csv)["click"].astype(np.float64)
    p = float(clicks.mean())
    return p, math.sqrt(p * (1 - p) / clicks.size)


# ------------------------------------------------------------------------ the peer: obp itself

PEER = r'''
"""obp's own non-private IPW, SNIPW and DR on the OBD samples (run in an environment with obp)."""
import json, sys
from pathlib import Path
import numpy as np
from obp.dataset import OpenBanditDataset
from obp.ope import (DoublyRobust, InverseProbabilityWeighting, OffPolicyEvaluation,
                     RegressionModel, SelfNormalizedInverseProbabilityWeighting)
from obp.policy import BernoulliTS
from sklearn.linear_model import LogisticRegression

args = json.loads(sys.argv[1])
ours = np.load(args["bts"])  # [len_list, A], privrl's Monte-Carlo table
out = {"obp_version": __import__("obp").__version__, "questions": {}}
for name, log, target in args["questions"]:
    ds = OpenBanditDataset(behavior_policy=log, campaign="all", data_path=Path(args["obd_dir"]))
    fb = ds.obtain_batch_bandit_feedback()
    n = fb["n_rounds"]
    if target == "uniform":
        dist = np.full((n, ds.n_actions, ds.len_list), 1.0 / ds.n_actions)
    else:
        policy = BernoulliTS(n_actions=ds.n_actions, len_list=ds.len_list,
                             is_zozotown_prior=True, campaign="all",
                             random_state=args["seed"])
        dist = policy.compute_batch_action_dist(n_rounds=n, n_sim=args["n_sim"])
        out["bts_max_abs_diff"] = float(np.abs(dist[0].T - ours).max())
    reg = RegressionModel(n_actions=ds.n_actions, len_list=ds.len_list,
                          action_context=ds.action_context,
                          base_model=LogisticRegression(max_iter=1000, C=100,
                                                        random_state=args["seed"]))
    q = reg.fit_predict(context=fb["context"], action=fb["action"], reward=fb["reward"],
                        position=fb["position"], pscore=fb["pscore"], action_dist=dist,
                        n_folds=3, random_state=args["seed"])
    ope = OffPolicyEvaluation(bandit_feedback=fb, ope_estimators=[
        InverseProbabilityWeighting(), SelfNormalizedInverseProbabilityWeighting(),
        DoublyRobust()])
    point = ope.estimate_policy_values(action_dist=dist, estimated_rewards_by_reg_model=q)
    ci = ope.estimate_intervals(action_dist=dist, estimated_rewards_by_reg_model=q,
                                n_bootstrap_samples=args["n_boot"], alpha=0.05,
                                random_state=args["seed"])
    out["questions"][name] = {
        est: {"value": float(point[est]), "ci_low": float(v["95.0% CI (lower)"]),
              "ci_high": float(v["95.0% CI (upper)"])}
        for est, v in ci.items()
    }
print(json.dumps(out))
'''

PEER_NAMES = {"ipw": "ips", "snipw": "snips", "dr": "dr"}


def run_peer(
    python: str | None, obd: ObdFiles, questions: list[Question], bts: Path, seed: int
) -> dict[str, Any]:
    """obp's IPW / SNIPW / DR (non-private, bootstrap 95% intervals) in `python`, an
    interpreter with obp 0.4.1 installed; without it, a record that says why it was not run."""
    if python is None:
        return {
            "run": False,
            "why": f"obp {OBP_VERSION} is not installed beside privrl: its dataset loader "
            "calls DataFrame.drop(col, 1), removed in pandas 2, so it needs pandas<2 and "
            "hence numpy<2, and privrl's environment is built on numpy 2; pass --obp-python "
            "with an interpreter that has obp installed (pandas<2, numpy<2)",
        }
    args = {
        "obd_dir": str(obd.obd_dir),
        "bts": str(bts),
        "seed": seed,
        "n_sim": N_SIM,
        "n_boot": 200,
        "questions": [(q.name, q.log, q.target) for q in questions],
    }
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "obp_peer.py"
        script.write_text(PEER)
        done = subprocess.run(
            [python, str(script), json.dumps(args)], capture_output=True, text=True
        )
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        return {"run": False, "why": f"the peer script failed: {tail[0]}"}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {"run": True, **result}


# ------------------------------------------------------------------------ report


def _fmt(x: float | None, digits: int = 4) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


def markdown_tables(results: dict[str, Any]) -> str:
    """One table per question: estimator × ε, with the interval and its coverage."""
    lines = []
    peer = results["peer"]
    for q in results["questions"]:
        name = q["name"]
        lines += [
            f"### {name[0].upper()}{name[1:]}",
            "",
            f"Ground truth {q['truth']:.4f} (the {q['truth_log']} log's mean click rate, "
            f"standard error {q['truth_se']:.4f}); weight clip W = {q['weight_clip']:g}; "
            f"{q['m']} impressions.",
            "",
            "| estimator | ε | estimate | 95% CI (score) | coverage: noise | coverage: noise + "
            "resampling | mean width | 95% CI (Popoviciu) | its coverage: noise / noise + "
            "resampling | noise sd of the mean | RMSE over noise draws |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in (r for r in results["rows"] if r["question"] == name):
            eps = "∞ (non-private)" if r["epsilon"] is None else f"{r['epsilon']:g}"
            lines.append(
                f"| {r['estimator']} | {eps} | {_fmt(r['value'])} | "
                f"[{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}] | "
                f"{_pct(r.get('coverage_noise_bd'))} | {_pct(r['coverage_resample_bd'])} | "
                f"{_fmt(r['width_resample_bd'])} | "
                f"[{_fmt(r['ci_low_pop'])}, {_fmt(r['ci_high_pop'])}] | "
                f"{_pct(r.get('coverage_noise_pop'))} / {_pct(r['coverage_resample_pop'])} | "
                f"{_fmt(r.get('noise_std_of_mean'))} | {_fmt(r.get('rmse_noise'))} |"
            )
        if peer.get("run"):
            for est, v in peer["questions"][name].items():
                lines.append(
                    f"| obp {est} (peer) | ∞ (non-private) | {_fmt(v['value'])} | "
                    f"[{_fmt(v['ci_low'])}, {_fmt(v['ci_high'])}] (bootstrap) | — | — | "
                    f"{_fmt(v['ci_high'] - v['ci_low'])} | — | — | — | — |"
                )
        lines.append("")
    if not peer.get("run"):
        lines += [f"**Peer not run:** {peer['why']}.", ""]
    elif "bts_max_abs_diff" in peer:
        lines += [
            "obp's own `BernoulliTS(...).compute_batch_action_dist(n_sim="
            f"{results['settings']['n_sim']})` differs from privrl's Monte-Carlo table by at "
            f"most {peer['bts_max_abs_diff']:.4f} in any π(a | position) (simulation error; "
            "the peer uses obp's table, privrl its own).",
            "",
        ]
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    """Estimates with their 95% intervals per estimator and ε, against the ground truth."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    questions = results["questions"]
    fig, axes = plt.subplots(1, len(questions), figsize=(6.5 * len(questions), 4.2))
    axes = np.atleast_1d(axes)
    colours = {"ips": "tab:blue", "snips": "tab:orange", "dr": "tab:green"}
    for ax, q in zip(axes, questions, strict=True):
        rows = [r for r in results["rows"] if r["question"] == q["name"]]
        labels = ["non-private", *[f"ε = {e:g}" for e in results["settings"]["epsilons"]]]
        for j, est in enumerate(results["settings"]["estimators"]):
            mine = [r for r in rows if r["estimator"] == est]
            x = np.arange(len(mine)) + (j - 1) * 0.22
            v = np.array([r["value"] for r in mine])
            lo = np.array([r["ci_low"] for r in mine])
            hi = np.array([r["ci_high"] for r in mine])
            ax.errorbar(
                x,
                v,
                yerr=[v - np.minimum(lo, v), np.maximum(hi, v) - v],
                fmt="o",
                color=colours.get(est),
                capsize=3,
                label=f"privrl {est}",
            )
            noise = 1.96 * np.array([r.get("noise_std_of_mean") or 0.0 for r in mine])
            ax.errorbar(
                x,
                v,
                yerr=noise,
                fmt="none",
                color=colours.get(est),
                lw=5,
                alpha=0.35,
                label="±1.96 noise sd" if j == 0 else None,
            )
        peer = results["peer"]
        if peer.get("run"):
            for j, val in enumerate(peer["questions"][q["name"]].values()):
                ax.errorbar(
                    -0.45 + 0.1 * j,
                    val["value"],
                    yerr=[[val["value"] - val["ci_low"]], [val["ci_high"] - val["value"]]],
                    fmt="s",
                    color="grey",
                    capsize=2,
                    ms=4,
                    label="obp (peer)" if j == 0 else None,
                )
        ax.axhline(q["truth"], color="k", lw=1, ls="--", label="ground truth")
        ax.set_xticks(np.arange(len(labels)), labels)
        ax.set_yscale("symlog", linthresh=0.01)
        ax.set_ylim(-0.002, 1.0)
        ax.set_ylabel("value (click rate); symlog scale")
        ax.set_title(q["name"], fontsize=10)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle("Open Bandit Dataset: private OPE estimates with 95% intervals", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------ main


def run(
    obd: ObdFiles,
    out: Path,
    *,
    seed: int = 0,
    n_noise: int = 500,
    n_resample: int = 200,
    n_sim: int = N_SIM,
    epsilons: tuple[float, ...] = EPSILONS,
    estimators: tuple[str, ...] = ESTIMATORS,
    obp_python: str | None = None,
    n_actions: int = N_ACTIONS,
) -> dict[str, Any]:
    """The whole study; writes out/results.json, out/results.md, out/obp_acceptance.png."""
    out.mkdir(parents=True, exist_ok=True)
    alpha, beta = read_prior(obd.prior)
    if alpha.shape[0] != n_actions:
        raise SystemExit(
            f"error: {obd.prior}: the prior has {alpha.shape[0]} items, not {n_actions}"
        )
    design = public_design(alpha, beta, n_sim=n_sim)
    files = {"bts": out / "bts_policy.npy", "q": out / "prior_click_rate.npy"}
    np.save(files["bts"], design["bts"])  # [position, item] = π_BTS(item | position)
    np.save(files["q"], design["q"])
    logs = {"random": obd.random_csv, "bts": obd.bts_csv}
    shutil.rmtree(out / "runs", ignore_errors=True)
    results: dict[str, Any] = {
        "data": obd.source,
        "settings": {
            "epsilons": list(epsilons),
            "estimators": list(estimators),
            "delta": DELTA,
            "n_noise": n_noise,
            "n_resample": n_resample,
            "n_sim": n_sim,
            "bts_seed": BTS_SEED,
            "max_rel_bias": MAX_REL_BIAS,
            "seed": seed,
        },
        "questions": [],
        "rows": [],
    }
    for i, q in enumerate(design["questions"]):
        h5 = import_log(logs[q.log], out / "data" / f"{q.log}.h5", n_actions)
        truth, se = mean_click(logs[q.truth_log])
        m = read_log(logs[q.log])["click"].size
        results["questions"].append(asdict(q) | {"truth": truth, "truth_se": se, "m": m})
        results["rows"] += evaluate_question(
            q,
            h5,
            truth,
            files,
            out / "runs" / f"q{i}-{q.target}-from-{q.log}",
            epsilons=epsilons,
            estimators=estimators,
            n_noise=n_noise,
            n_resample=n_resample,
            seed=seed,
        )
    results["peer"] = run_peer(obp_python, obd, design["questions"], files["bts"], seed)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "results.md").write_text(markdown_tables(results))
    plot(results, out / "obp_acceptance.png")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-noise", type=int, default=500, help="noise draws for coverage")
    parser.add_argument("--n-resample", type=int, default=200, help="bootstrap resamples")
    parser.add_argument(
        "--obp-python", default=None, help="a Python interpreter with obp 0.4.1 (the peer)"
    )
    args = parser.parse_args(argv)
    obd = fetch_obd()
    results = run(
        obd,
        args.out,
        seed=args.seed,
        n_noise=args.n_noise,
        n_resample=args.n_resample,
        obp_python=args.obp_python,
    )
    print(markdown_tables(results))
    print(f"written: {args.out / 'results.json'}, results.md, obp_acceptance.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
