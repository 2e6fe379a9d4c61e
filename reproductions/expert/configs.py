"""One run of an expert reproduction: its configuration (`RunConfig`), the dataset and its
JSON cache, the invocation context, the noise calibration and the builders of private runs."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from reproductions.expert.paper import ENVS, Scale

# ---------------------------------------------------------------------------------------------
# run configuration
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines one run (one run directory)."""

    env: str
    algo: str  # cql | bcq
    method: str  # nonprivate | dp-sgd | ours
    seed: int
    lr: float
    steps: int
    batch_size: int
    hidden: tuple[int, ...]
    eval_episodes: int
    eval_horizon: int | None
    n_evals: int
    eval_window: int
    dataset: str  # dataset file name (its id is in the cache)
    m: int  # experts used (public)
    subset_seed: int | None = None  # experts subsampled (Figure 4) with this public seed
    epsilon: float | None = None
    delta: float | None = None
    p: float | None = None
    epsilon1: float = 0.0
    delta1: float = 0.0
    epsilon2: float = 0.0
    delta2: float = 0.0
    rounds: int = 0
    calibration: str = "paper"  # filter calibration
    accounting: str = "exact"  # Selective DP-SGD accounting
    dpsgd_budget: str = "split"  # split: DP-SGD fits (ε2, δ2); joint: the total with the filter
    noise_multiplier: float | None = None
    explicit_steps: bool = False  # quick scale: exactly N steps at a fixed z
    # "budget" (the paper's protocol): z fixed, as many steps as the budget allows, at most N
    protocol: str = "calibrated"
    role: str = "main"  # main | reference | search

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["hidden"] = list(self.hidden)
        if self.dpsgd_budget == "split":  # the default; left out so earlier runs keep their ids
            del d["dpsgd_budget"]
        if self.protocol == "calibrated":  # likewise
            del d["protocol"]
        return d

    def digest(self) -> str:
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:8]

    def key(self) -> str:
        parts = [self.env, self.algo, self.method]
        if self.epsilon is not None:
            parts.append(f"eps{self.epsilon:g}")
        if self.method == "ours":
            parts.append(f"p{self.p:g}")
            if self.epsilon1 > 0 and self.epsilon2 > 0 and self.epsilon is not None:
                parts.append(f"e1-{self.epsilon1 / self.epsilon:.2f}")
            if self.calibration != "paper":
                parts.append(self.calibration)
            if self.accounting != "exact":
                parts.append(f"{self.accounting}-acct")
            if self.dpsgd_budget != "split":
                parts.append(f"{self.dpsgd_budget}-budget")
        if self.subset_seed is not None:
            parts.append(f"m{self.m}")
        parts.append(f"lr{self.lr:g}")
        parts.append(self.digest())
        parts.append(f"seed{self.seed}")
        return "-".join(parts)


# ---------------------------------------------------------------------------------------------
# data and the per-dataset cache
# ---------------------------------------------------------------------------------------------


def dataset_path(env: str, quick: bool) -> Path:
    """Where ``privrl data collect --recipe experts-<env> [--quick]`` writes the dataset."""
    from privrl.data import data_dir

    stem = ENVS[env].recipe + ("-quick" if quick else "")
    return data_dir() / stem / f"{stem}.h5"


def build_command(env: str, quick: bool) -> str:
    return f"privrl data collect --recipe {ENVS[env].recipe}" + (" --quick" if quick else "")


class _Data:
    """A recipe dataset's header (its public metadata: m, R_random, sizes) and the
    reproduction's small JSON cache beside it (``<stem>.expert-repro.json``). The episodes are
    read by the runs (inside the run layer's ledger transaction), here only to write Figure 4's
    public subsets of experts."""

    def __init__(self, env: str, path: Path) -> None:
        from privrl.data import read_header

        self.env, self.path = env, path
        header = read_header(path)
        extra = header.metadata.extra
        self.experts_dir = path.parent / extra.get("experts_dir", "experts")
        self.m = int(extra["recipe"]["n_experts"])  # declared by the recipe (public)
        self.random_return = float(extra["reference_returns"]["random"])
        ident = json.dumps(
            {
                "recipe": extra.get("recipe"),
                "episodes": header.n_episodes,
                "transitions": header.n_transitions,
            },
            sort_keys=True,
            default=str,
        )
        self.id = hashlib.sha256(ident.encode()).hexdigest()[:12]
        self.cache_path = path.with_name(path.stem + ".expert-repro.json")

    def path_for(self, m: int, subset_seed: int | None) -> Path:
        """The dataset file of m experts drawn with the public seed ``subset_seed`` and their
        trajectories (all experts: the recipe's file), written once under ``subsets/``."""
        if subset_seed is None or m >= self.m:
            return self.path
        from privrl.privacy import BudgetLedger

        if BudgetLedger.for_dataset(self.path) is not None:
            # a subset is another file, hence another ledger: its runs would not be charged
            raise ValueError(
                f"{self.path.name} has a privacy ledger, and runs on a subset of its experts "
                "would not be charged to it; reproduce Figure 4 on a copy without a ledger"
            )
        stem = f"{self.path.stem}-m{m}-subset{subset_seed}"
        target = self.path.parent / "subsets" / stem / f"{stem}.h5"
        if not target.is_file():
            from privrl.data import load_hdf5, save_hdf5
            from privrl.expert import load_experts, save_experts

            dataset, experts = load_hdf5(self.path), load_experts(self.experts_dir)
            ids = np.sort(np.random.default_rng(subset_seed).permutation(self.m)[:m])
            episodes = np.flatnonzero(np.isin(dataset.unit_ids, ids))
            save_experts(experts.subset(ids), target.parent / "experts")
            tmp = target.with_name(f".{target.name}.tmp")
            save_hdf5(dataset.subset(episodes), tmp)
            tmp.replace(target)  # last: its presence marks the subset complete
        return target

    # -- cache --------------------------------------------------------------------------------

    def read_cache(self) -> dict[str, Any]:
        if not self.cache_path.is_file():
            return {}
        try:
            data = json.loads(self.cache_path.read_text())
        except ValueError:
            return {}
        return data if data.get("dataset_id") == self.id else {}

    def update_cache(self, section: str, key: str, value: Any) -> None:
        data = self.read_cache()
        data["dataset_id"] = self.id
        data.setdefault(section, {})[key] = value
        tmp = self.cache_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        tmp.replace(self.cache_path)


class _Context:
    """State of one reproduction invocation: scale, output, loaded data, time budget, log."""

    def __init__(
        self,
        out: Path,
        scale: Scale,
        deadline: float | None,
        *,
        backend: str = "local",
        workers: int | None = None,
    ) -> None:
        self.out = Path(out)
        self.backend, self.workers = backend, workers
        self.scale = scale
        self.deadline = deadline
        self.data: dict[str, _Data] = {}
        self.missing: dict[str, str] = {}
        self.failed: dict[str, str] = {}
        self.stopped = False
        self.started = time.perf_counter()
        self.n_run = 0  # runs trained by this invocation (not the reused ones)

    def load(self, env: str) -> _Data | None:
        if env in self.data:
            return self.data[env]
        if env in self.missing:
            return None
        path = dataset_path(env, self.scale.is_quick)
        if not path.is_file():
            self.missing[env] = build_command(env, self.scale.is_quick)
            _log(f"{env}: dataset missing ({path.name}); build it with `{self.missing[env]}`")
            return None
        _log(f"{env}: {path.name}")
        self.data[env] = _Data(env, path)
        return self.data[env]

    def out_of_time(self) -> bool:
        if self.deadline is not None and time.monotonic() > self.deadline:
            if not self.stopped:
                _log("time budget reached: no new runs are started (rerun to continue)")
            self.stopped = True
        return self.stopped


def _log(message: str) -> None:
    print(f"[expert-repro] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# noise calibration
# ---------------------------------------------------------------------------------------------


def _calibrated_noise(
    data: _Data, epsilon: float, delta: float, steps: int, q: float, prior: Any = None
) -> float:
    """Smallest z (PLD, 1% relative tolerance, safe side) whose ``steps`` Poisson(q)-subsampled
    Gaussian steps spend (ε, δ) — after the event ``prior`` when given (joint budget); cached
    per (ε, δ, steps, q, prior)."""
    from privrl.privacy import calibrate_noise_multiplier

    key = f"eps={epsilon!r},delta={delta!r},steps={steps},q={q!r}"
    if prior is not None:
        key += f",prior={prior!r}"
    cached = data.read_cache().get("noise", {}).get(key)
    if cached is not None:
        return float(cached)
    z = calibrate_noise_multiplier(
        epsilon, delta, steps, sampling_probability=q, backend="pld", tolerance=1e-2, prior=prior
    )
    data.update_cache("noise", key, float(z))
    return float(z)


def _with_noise(cfg: RunConfig, data: _Data, scale: Scale) -> RunConfig:
    """Fill in the noise multiplier of a private run (fixed at quick scale, else calibrated)."""
    if cfg.method == "nonprivate" or (cfg.method == "ours" and cfg.p == 0.0):
        return cfg
    if scale.is_regime:  # the paper's protocol: z fixed, the budget sets the step count
        assert scale.fixed_noise is not None
        return replace(cfg, noise_multiplier=scale.fixed_noise, protocol="budget")
    if scale.fixed_noise is not None:
        return replace(cfg, noise_multiplier=scale.fixed_noise, explicit_steps=True)
    q = cfg.batch_size / cfg.m
    if cfg.method == "dp-sgd":
        eps, delta, k = cfg.epsilon, cfg.delta, cfg.steps
    elif cfg.accounting == "exact":  # K ≈ p·N private steps at rate b/m
        eps, delta, k = cfg.epsilon2, cfg.delta2, max(1, round(float(cfg.p) * cfg.steps))
    else:  # the paper's accounting: N steps at q = p·b/m
        eps, delta, k = cfg.epsilon2, cfg.delta2, cfg.steps
        q = float(cfg.p) * q
    prior = None
    if cfg.method == "ours" and cfg.dpsgd_budget == "joint":  # total (ε, δ) after the filter
        eps, delta, prior = cfg.epsilon, cfg.delta, _filter_event(cfg)
    assert eps is not None and delta is not None
    return replace(cfg, noise_multiplier=_calibrated_noise(data, eps, delta, k, q, prior))


def _filter_event(cfg: RunConfig) -> Any:
    """The consensus filter's T-round event of a run (it depends on ε1, δ1, T and the
    calibration only, not on the data)."""
    from privrl.privacy.threshold import DataReleaseCalibration

    cal = DataReleaseCalibration.from_budget(
        cfg.epsilon1,
        cfg.delta1,
        cfg.rounds,
        max_len=1,
        p_min=0.02,
        calibration=cfg.calibration,  # type: ignore[arg-type]
    )
    return cal.event()


# ---------------------------------------------------------------------------------------------
# building run configurations
# ---------------------------------------------------------------------------------------------


def _rounds(env: str, epsilon: float) -> int:
    table = ENVS[env].rounds
    return table[min(table, key=lambda e: (abs(e - epsilon), -e))]


def _base(
    env: str, algo: str, method: str, seed: int, lr: float, data: _Data, *, scale: Scale, m: int
) -> RunConfig:
    setup = ENVS[env]
    horizon = setup.eval_horizon
    if scale.eval_horizon_cap is not None:
        horizon = min(horizon or scale.eval_horizon_cap, scale.eval_horizon_cap)
    return RunConfig(
        env=env,
        algo=algo,
        method=method,
        seed=int(seed),
        lr=float(lr),
        steps=scale.steps,
        batch_size=min(scale.batch_size, m),
        hidden=scale.hidden or setup.hidden,
        eval_episodes=scale.eval_episodes,
        eval_horizon=horizon,
        n_evals=scale.n_evals,
        eval_window=min(scale.eval_window, 10_000),
        dataset=data.path.name,
        m=int(m),
    )


def _private(
    base: RunConfig,
    *,
    epsilon: float,
    p: float,
    eps1_fraction: float | None = None,
    calibration: str = "paper",
    accounting: str = "exact",
    dpsgd_budget: str = "split",
) -> RunConfig:
    """A private run at (ε, δ = 1/m): DP-SGD when p = 1 or no filter budget, else ours.

    ``eps1_fraction`` forces ε1 = fraction·ε (the filter runs even below ε = 5, Table 2b);
    by default the paper's split rules (`split_budget`)."""
    from privrl.expert import split_budget

    delta = 1.0 / base.m
    if eps1_fraction is None:
        split = split_budget(epsilon, delta, p)
    else:
        split = split_budget(epsilon, delta, p, filter_below=0.0, eps1_fraction=eps1_fraction)
    if split.epsilon1 == 0.0:  # plain DP-SGD (Algorithm 4) on all data
        return replace(base, method="dp-sgd", epsilon=float(epsilon), delta=delta)
    return replace(
        base,
        method="ours",
        epsilon=float(epsilon),
        delta=delta,
        p=float(p),
        epsilon1=split.epsilon1,
        delta1=split.delta1,
        epsilon2=split.epsilon2,
        delta2=split.delta2,
        rounds=_rounds(base.env, epsilon),
        calibration=calibration,
        accounting=accounting if 0.0 < p < 1.0 else "exact",
        dpsgd_budget=dpsgd_budget if 0.0 < p < 1.0 else "split",
    )
