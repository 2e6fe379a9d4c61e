"""The ensemble dynamics model of MOPO and PRIMORL, and its non-private training (MOPO).

Model (as the PRIMORL paper and MOPO specify it): N Gaussian MLPs (SWISH, per-layer weight decay,
learnable log-variance bounds) on ``concat(s, a)`` → mean and log-variance of ``[s' − s, r]``
(diagonal covariance, Gaussian NLL). Non-private training (MOPO) lets all members see the same
batch, diversity coming from initialisation only; bootstrap or independent shuffles are
options. Early stopping and elite selection use the holdout split, the input normaliser is
fitted only on the arrays the caller passes as usable (``fit_normalizer_on``) — for PRIMORL the
public split, or known bounds via :meth:`privrl.nn.normalizer.Normalizer.from_bounds`.

Pessimism: :func:`u_ma`, :func:`u_ma_frobenius`, :func:`u_mpd`
take the per-member means/stds that :meth:`DynamicsModel.predict` returns in ``info``.

Elites default (MOPO): all members when N ≤ 5, else 5 (MOPO uses 5 of 7).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from privrl.data.dataset import TrajectoryDataset, Transitions
from privrl.nn.ensemble import GaussianEnsemble
from privrl.nn.normalizer import Normalizer

__all__ = [
    "DYNAMICS_PRESETS",
    "DynamicsConfig",
    "DynamicsModel",
    "TrainResult",
    "TransitionArrays",
    "dynamics_config",
    "holdout_mse",
    "select_elites",
    "split_episode_indices",
    "split_episodes",
    "train_dynamics",
    "u_ma",
    "u_ma_frobenius",
    "u_mpd",
]

# Flat transition arrays (obs, actions, rewards, next_obs, terminated, truncated).
TransitionArrays = Transitions

Sampling = Literal["shared", "bootstrap", "independent"]


@dataclass(frozen=True)
class DynamicsConfig:
    """Architecture and (non-private) training settings of the dynamics ensemble.

    ``elites=None`` means the default: all members for N ≤ 5, else 5 (MOPO). ``steps_per_epoch
    =None`` is one pass over the training transitions per epoch (MOPO); set it for very large
    datasets. Early stopping (MOPO): an epoch improves a member when its holdout MSE drops by
    more than ``min_improvement`` (relative); training stops after ``patience`` epochs in a row
    without any member improving, and each member keeps its best-epoch snapshot.
    ``sampling``: "shared" (spec: every member sees the same batch), "bootstrap" (each member a
    bootstrap resample of the training rows, PETS) or "independent" (each member its own
    shuffle).
    """

    hidden: tuple[int, ...] = (200, 200, 200, 200)
    members: int = 7
    elites: int | None = None
    lr: float = 1e-3
    batch_size: int = 256
    weight_decay: bool = True
    weight_decays: tuple[float, ...] | None = None  # None: privrl.nn.default_weight_decays
    learn_logvar_bounds: bool = True
    logvar_bound_coef: float = 0.01
    normalize_targets: bool = False
    holdout_fraction: float = 0.1
    max_holdout: int | None = None  # cap on holdout rows used per evaluation (random subset)
    max_epochs: int = 100
    steps_per_epoch: int | None = None
    patience: int = 5
    min_improvement: float = 0.01
    sampling: Sampling = "shared"
    eval_batch_size: int = 8192

    def __post_init__(self) -> None:
        if self.members <= 0:
            raise ValueError(f"members must be positive, got {self.members}")
        if self.elites is not None and not 1 <= self.elites <= self.members:
            raise ValueError(f"elites must be in [1, members={self.members}], got {self.elites}")
        if self.sampling not in ("shared", "bootstrap", "independent"):
            raise ValueError(f"sampling must be shared/bootstrap/independent: {self.sampling!r}")
        if not 0.0 <= self.holdout_fraction < 1.0:
            raise ValueError(f"holdout_fraction must be in [0, 1), got {self.holdout_fraction}")
        if self.batch_size <= 0 or self.max_epochs <= 0 or self.patience <= 0:
            raise ValueError("batch_size, max_epochs and patience must be positive")

    @property
    def n_elites(self) -> int:
        if self.elites is not None:
            return int(self.elites)
        return self.members if self.members <= 5 else 5

    def replace(self, **changes: Any) -> DynamicsConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["hidden"] = list(self.hidden)
        d["weight_decays"] = None if self.weight_decays is None else list(self.weight_decays)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DynamicsConfig:
        d = dict(d)
        d["hidden"] = tuple(d["hidden"])
        if d.get("weight_decays") is not None:
            d["weight_decays"] = tuple(d["weight_decays"])
        return cls(**d)


# The papers' ensemble sizes per task and holdout shares.
DYNAMICS_PRESETS: dict[str, DynamicsConfig] = {
    "pendulum": DynamicsConfig(hidden=(64, 64), members=3, holdout_fraction=0.01),
    "balance": DynamicsConfig(hidden=(128, 128), members=5, holdout_fraction=0.01),
    "swingup": DynamicsConfig(hidden=(128, 128), members=5, holdout_fraction=0.01),
    "halfcheetah": DynamicsConfig(hidden=(200, 200, 200, 200), members=7, holdout_fraction=0.1),
}


def dynamics_config(task: str, **overrides: Any) -> DynamicsConfig:
    """The preset for ``task`` (pendulum, balance, swingup, halfcheetah) with overrides."""
    if task not in DYNAMICS_PRESETS:
        raise ValueError(f"unknown task {task!r}; known: {sorted(DYNAMICS_PRESETS)}")
    return DYNAMICS_PRESETS[task].replace(**overrides)


# ----------------------------------------------------------------------------- helpers


def _as_tensor(x: Any) -> torch.Tensor:
    """float32 tensor; numpy input is copied when read-only (dataset arrays are)."""
    if isinstance(x, torch.Tensor):
        return x if x.dtype == torch.float32 else x.float()
    a = np.asarray(x, dtype=np.float32)
    return torch.from_numpy(a if a.flags.writeable else a.copy())


def _flat(x: Any, n: int) -> torch.Tensor:
    return _as_tensor(x).reshape(n, -1)


def _torch_generator(g: Any) -> torch.Generator:
    if isinstance(g, torch.Generator):
        return g
    if isinstance(g, np.random.Generator):
        return torch.Generator().manual_seed(int(g.integers(0, 2**63 - 1)))
    if isinstance(g, int | np.integer):
        return torch.Generator().manual_seed(int(g))
    raise TypeError(
        f"sampling needs a seed, numpy Generator or torch.Generator (no global RNG), got {g!r}"
    )


# ----------------------------------------------------------------------------- model


class DynamicsModel:
    """Gaussian ensemble over ``[s' − s, r]`` with its normalisers and elite members.

    ``input_normalizer`` standardises ``concat(s, a)``; ``target_normalizer`` (if
    ``config.normalize_targets``) standardises the targets. Both default to identity until
    :func:`train_dynamics` fits them on the arrays it is explicitly allowed to use, or the
    caller sets them from public information. ``elites`` are all members until training picks
    them on the holdout. ``device``: where the ensemble lives (initialised on the CPU from
    ``seed``, then moved); inputs are moved there, and `state_dict` is on the CPU.
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        config: DynamicsConfig | None = None,
        *,
        input_normalizer: Normalizer | None = None,
        target_normalizer: Normalizer | None = None,
        seed: int = 0,
        device: torch.device | str = "cpu",
    ) -> None:
        self.obs_dim, self.act_dim = int(obs_dim), int(act_dim)
        self.config = config if config is not None else DynamicsConfig()
        cfg = self.config
        self.ensemble = GaussianEnsemble(
            self.in_dim,
            self.out_dim,
            cfg.hidden,
            cfg.members,
            1,
            weight_decays=cfg.weight_decays,
            logvar_bound_coef=cfg.logvar_bound_coef,
            seed=seed,
        ).to(device)  # initialised on the CPU from the seed, then moved: the same weights
        if not cfg.learn_logvar_bounds:
            self.ensemble.max_logvar.requires_grad_(False)
            self.ensemble.min_logvar.requires_grad_(False)
        self.input_normalizer = input_normalizer or Normalizer.identity(self.in_dim)
        self.target_normalizer = target_normalizer or Normalizer.identity(self.out_dim)
        for name, norm, dim in (
            ("input_normalizer", self.input_normalizer, self.in_dim),
            ("target_normalizer", self.target_normalizer, self.out_dim),
        ):
            if norm.dim != dim:
                raise ValueError(f"{name} has dimension {norm.dim}, expected {dim}")
        self.elites: tuple[int, ...] = tuple(range(cfg.members))

    @property
    def in_dim(self) -> int:
        return self.obs_dim + self.act_dim

    @property
    def out_dim(self) -> int:
        return self.obs_dim + 1

    @property
    def members(self) -> int:
        return self.config.members

    @property
    def device(self) -> torch.device:
        """Where the ensemble's parameters (and every tensor it computes) are."""
        return self.ensemble.max_logvar.device

    def to(self, device: torch.device | str) -> DynamicsModel:
        """Move the ensemble to ``device`` (in place; the normalisers are numpy)."""
        self.ensemble.to(device)
        return self

    # -------------------------------------------------------------- data → tensors
    def inputs(self, obs: Any, act: Any) -> torch.Tensor:
        """Normalised network inputs ``[B, obs_dim + act_dim]`` (float32)."""
        n, on = len(obs), self.device
        x = torch.cat([_flat(obs, n).to(on), _flat(act, n).to(on)], dim=1)
        return self.input_normalizer.transform(x)

    def raw_targets(self, obs: Any, rew: Any, next_obs: Any) -> torch.Tensor:
        """``[s' − s, r]`` ``[B, obs_dim + 1]`` in data units (float32)."""
        n, on = len(obs), self.device
        delta = _flat(next_obs, n).to(on) - _flat(obs, n).to(on)
        return torch.cat([delta, _flat(rew, n).to(on)], dim=1)

    def targets(self, obs: Any, rew: Any, next_obs: Any) -> torch.Tensor:
        """Training targets: :meth:`raw_targets`, normalised if ``normalize_targets``."""
        return self.target_normalizer.transform(self.raw_targets(obs, rew, next_obs))

    # -------------------------------------------------------------- prediction
    def distribution(self, obs: Any, act: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-member mean and std of ``[s' − s, r]`` in data units, each ``[N, B, out]``."""
        mean, logvar = self.ensemble(self.inputs(obs, act))
        mean, std = mean[0], torch.exp(0.5 * logvar[0])
        tn = self.target_normalizer
        scale = torch.as_tensor(tn.std, dtype=mean.dtype, device=mean.device)
        return tn.inverse(mean), std * scale

    @torch.no_grad()
    def predict(
        self,
        obs: Any,
        act: Any,
        generator: torch.Generator | np.random.Generator | int | None = None,
        deterministic: bool = False,
    ) -> tuple[Any, Any, dict[str, Any]]:
        """One model step: ``(next_obs [B, obs_dim], reward [B], info)``.

        Stochastic (MOPO): each row picks one elite member uniformly and samples from its
        Gaussian. ``deterministic=True`` returns the average of the elite members' means (no
        randomness; MOPO's deterministic mode instead keeps a random member's mean).
        ``info``: ``means``/``stds`` ``[N, B, obs_dim + 1]`` of **all** members in data units
        (what MOPO's penalties use), ``members`` ``[B]`` (−1 when deterministic), ``elites``.
        Numpy inputs give numpy outputs, tensors give tensors (on the model's device). The draws
        come from the CPU ``generator`` and are moved: the same on every device.
        """
        as_numpy = not isinstance(obs, torch.Tensor)
        on = self.device
        obs_t = _flat(obs, len(obs)).to(on)
        means, stds = self.distribution(obs_t, act)
        b = obs_t.shape[0]
        elites = torch.as_tensor(self.elites, dtype=torch.long)
        if deterministic:
            pred = means[elites.to(on)].mean(dim=0)
            members = torch.full((b,), -1, dtype=torch.long)
        else:
            if generator is None:
                raise ValueError("predict needs a generator (or seed) unless deterministic=True")
            gen = _torch_generator(generator)
            members = elites[torch.randint(len(self.elites), (b,), generator=gen)]
            rows = torch.arange(b)
            noise = torch.randn(b, self.out_dim, generator=gen).to(on)
            pick = (members.to(on), rows.to(on))
            pred = means[pick] + stds[pick] * noise
        next_obs = obs_t + pred[:, : self.obs_dim]
        reward = pred[:, self.obs_dim]
        info: dict[str, Any] = {"means": means, "stds": stds, "members": members.to(on)}
        if as_numpy:
            next_obs, reward = next_obs.cpu().numpy(), reward.cpu().numpy()
            info = {k: v.cpu().numpy() for k, v in info.items()}
        info["elites"] = self.elites
        return next_obs, reward, info

    # -------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to rebuild the model (``torch.save``-able, weights-only safe; the
        tensors on the CPU, so a checkpoint loads on any device)."""
        return {
            "obs_dim": self.obs_dim,
            "act_dim": self.act_dim,
            "config": self.config.to_dict(),
            "ensemble": {
                k: v.detach().cpu().clone() for k, v in self.ensemble.state_dict().items()
            },
            "input_normalizer": self.input_normalizer.state_dict(),
            "target_normalizer": self.target_normalizer.state_dict(),
            "elites": list(self.elites),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if (state["obs_dim"], state["act_dim"]) != (self.obs_dim, self.act_dim):
            raise ValueError(
                f"checkpoint is for obs_dim={state['obs_dim']}, act_dim={state['act_dim']}; "
                f"this model has {self.obs_dim}, {self.act_dim}"
            )
        if DynamicsConfig.from_dict(state["config"]).hidden != self.config.hidden:
            raise ValueError("checkpoint has a different architecture (hidden sizes)")
        self.ensemble.load_state_dict(state["ensemble"])
        self.input_normalizer = Normalizer.from_state_dict(state["input_normalizer"])
        self.target_normalizer = Normalizer.from_state_dict(state["target_normalizer"])
        self.elites = tuple(int(i) for i in state["elites"])

    @classmethod
    def from_state_dict(
        cls, state: Mapping[str, Any], device: torch.device | str = "cpu"
    ) -> DynamicsModel:
        """The model of `state_dict` (read with ``map_location="cpu"``) on ``device``."""
        config = DynamicsConfig.from_dict(state["config"])
        model = cls(state["obs_dim"], state["act_dim"], config, device=device)
        model.load_state_dict(state)
        return model


# ----------------------------------------------------------------------------- penalties


def _as_torch_pair(x: Any) -> tuple[torch.Tensor, bool]:
    if isinstance(x, torch.Tensor):
        return x, False
    return torch.as_tensor(np.asarray(x)), True


def u_ma(stds: Any, include_reward: bool = True) -> Any:
    """MOPO's max aleatoric uncertainty ``max_i ‖σ_i(s, a)‖₂`` → ``[B]``.

    ``stds`` ``[N, B, obs_dim + 1]`` (reward last); MOPO takes the norm over all outputs,
    reward included.
    """
    s, np_out = _as_torch_pair(stds)
    if not include_reward:
        s = s[..., :-1]
    u = torch.linalg.vector_norm(s, dim=-1).amax(dim=0)
    return u.numpy() if np_out else u


def u_ma_frobenius(stds: Any, include_reward: bool = True) -> Any:
    """The paper's form ``max_i ‖Σ_i(s, a)‖_F`` with ``Σ_i = diag(σ_i²)`` → ``[B]``."""
    s, np_out = _as_torch_pair(stds)
    if not include_reward:
        s = s[..., :-1]
    u = torch.linalg.vector_norm(s.square(), dim=-1).amax(dim=0)
    return u.numpy() if np_out else u


def u_mpd(means: Any, include_reward: bool = False) -> Any:
    """Max pairwise discrepancy ``max_{i,j} ‖μ_i(s, a) − μ_j(s, a)‖₂`` → ``[B]``.

    ``means`` ``[N, B, obs_dim + 1]`` (reward last); state dimensions only unless
    ``include_reward``. All pairs at once by broadcasting (N is small).
    """
    m, np_out = _as_torch_pair(means)
    if not include_reward:
        m = m[..., :-1]
    diff = m[:, None] - m[None, :]  # [N, N, B, d]
    u = torch.linalg.vector_norm(diff, dim=-1).amax(dim=(0, 1))
    return u.numpy() if np_out else u


# ----------------------------------------------------------------------------- splits


def split_episode_indices(
    dataset: TrajectoryDataset,
    holdout_fraction: float,
    seed: int | np.random.Generator,
    by: Literal["episode", "unit"] = "episode",
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted episode indices ``(train, holdout)`` of a random split by episode (or unit).

    ``round(fraction · count)`` episodes (units) go to the holdout, at least one when the
    fraction is positive and there are two or more. ``by="unit"`` keeps all episodes of a unit
    on one side (needed when one user contributes several episodes).
    """
    if not 0.0 <= holdout_fraction < 1.0:
        raise ValueError(f"holdout_fraction must be in [0, 1), got {holdout_fraction}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    if by == "episode":
        keys = np.arange(dataset.n_episodes)
    elif by == "unit":
        keys = dataset.episode_unit_ids
    else:
        raise ValueError(f"by must be 'episode' or 'unit', got {by!r}")
    uniq, inverse = np.unique(keys, return_inverse=True)
    n = uniq.shape[0]
    k = round(holdout_fraction * n)
    if holdout_fraction > 0 and n >= 2:
        k = min(max(k, 1), n - 1)
    held = np.zeros(n, dtype=np.bool_)
    held[rng.permutation(n)[:k]] = True
    in_holdout = held[inverse]
    return np.flatnonzero(~in_holdout), np.flatnonzero(in_holdout)


def split_episodes(
    dataset: TrajectoryDataset,
    holdout_fraction: float,
    seed: int | np.random.Generator,
    by: Literal["episode", "unit"] = "episode",
) -> tuple[TransitionArrays, TransitionArrays]:
    """Transition arrays ``(train, holdout)`` of :func:`split_episode_indices`'s split."""
    tr, ho = split_episode_indices(dataset, holdout_fraction, seed, by)
    return dataset.subset(tr).transitions(), dataset.subset(ho).transitions()


# ----------------------------------------------------------------------------- training


@dataclass
class TrainResult:
    """Outcome of :func:`train_dynamics` (histories are per epoch)."""

    epochs: int
    steps: int
    train_loss: np.ndarray  # [epochs] mean training loss (Σ_members NLL + penalties)
    holdout_mse: np.ndarray  # [epochs, N] holdout MSE of [s' − s, r] in data units
    best_holdout_mse: np.ndarray  # [N] of the kept snapshot (NaN without a holdout)
    best_epoch: np.ndarray  # [N] epoch (1-based) of the kept snapshot
    elites: tuple[int, ...]
    stopped_early: bool
    seconds: float
    normalizer_source: str
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "epochs": self.epochs,
            "steps": self.steps,
            "train_loss": self.train_loss.tolist(),
            "holdout_mse": self.holdout_mse.tolist(),
            "best_holdout_mse": self.best_holdout_mse.tolist(),
            "best_epoch": self.best_epoch.tolist(),
            "elites": list(self.elites),
            "stopped_early": self.stopped_early,
            "seconds": self.seconds,
            "normalizer_source": self.normalizer_source,
            **self.extra,
        }


@torch.no_grad()
def _mse_tensors(
    model: DynamicsModel, x: torch.Tensor, y_raw: torch.Tensor, chunk: int
) -> torch.Tensor:
    """Per-member MSE ``[N]`` of the mean prediction in data units."""
    total = torch.zeros(model.members, dtype=torch.float64, device=x.device)
    tn = model.target_normalizer
    for s in range(0, x.shape[0], chunk):  # bounded memory; few chunks
        mean, _ = model.ensemble(x[s : s + chunk])
        err = tn.inverse(mean[0]) - y_raw[s : s + chunk]
        total += err.double().square().sum(dim=(1, 2))
    return (total / (x.shape[0] * y_raw.shape[1])).float()


def holdout_mse(model: DynamicsModel, data: TransitionArrays, chunk: int = 8192) -> np.ndarray:
    """Per-member MSE ``[N]`` of ``[s' − s, r]`` on ``data`` (means, data units)."""
    x = model.inputs(data.observations, data.actions)
    y = model.raw_targets(data.observations, data.rewards, data.next_observations)
    return _mse_tensors(model, x, y, chunk).cpu().numpy()


def select_elites(errors: Any, n_elites: int) -> tuple[int, ...]:
    """Indices (ascending) of the ``n_elites`` members with the lowest error (stable ties)."""
    e = np.asarray(errors, dtype=np.float64)
    order = np.argsort(e, kind="stable")[: int(n_elites)]
    return tuple(sorted(int(i) for i in order))


def _epoch_indices(
    rng: np.random.Generator,
    n: int,
    n_members: int,
    sampling: Sampling,
    n_rows: int,
    boot: np.ndarray | None,
) -> np.ndarray:
    """Row indices ``[1 or N, n_rows]`` for one epoch (concatenated shuffles)."""
    reps = math.ceil(n_rows / n)
    if sampling == "shared":
        return np.concatenate([rng.permutation(n) for _ in range(reps)])[None, :n_rows]
    perm = np.concatenate([np.argsort(rng.random((n_members, n)), axis=1) for _ in range(reps)], 1)
    perm = perm[:, :n_rows]
    if sampling == "bootstrap":
        assert boot is not None
        return np.take_along_axis(boot, perm, axis=1)
    return perm


def train_dynamics(
    model: DynamicsModel,
    train: TransitionArrays,
    holdout: TransitionArrays | None = None,
    config: DynamicsConfig | None = None,
    seed: int = 0,
    progress: Callable[[dict[str, Any]], None] | None = None,
    *,
    fit_normalizer_on: TransitionArrays | None = None,
    normalizer_source: str = "fit_normalizer_on",
) -> TrainResult:
    """Non-private ensemble training (MOPO) with holdout early stopping and elites.

    ``fit_normalizer_on``: the arrays the input (and, with ``normalize_targets``, target)
    normaliser may be fitted on — MOPO passes ``train``; PRIMORL passes the public split or
    leaves it ``None`` after setting a bounds-based normaliser. ``None`` keeps the model's
    normalisers untouched; the holdout is never used for them. The holdout (declared public in
    PRIMORL) drives early stopping, best-snapshot selection and elites only. ``config``
    overrides the training settings of ``model.config`` (architecture comes from the model).
    ``progress``: called with each epoch's record (``epoch``, ``train_loss``, and
    ``holdout_mse`` with a holdout); the application layer draws any bar from it.
    """
    cfg = config if config is not None else model.config
    t0 = time.perf_counter()
    if fit_normalizer_on is not None:
        src = fit_normalizer_on
        n_src = len(src.observations)
        x_src = torch.cat([_flat(src.observations, n_src), _flat(src.actions, n_src)], dim=1)
        model.input_normalizer = Normalizer.fit(x_src, source=normalizer_source)
        if cfg.normalize_targets:
            y_src = model.raw_targets(src.observations, src.rewards, src.next_observations)
            model.target_normalizer = Normalizer.fit(y_src, source=normalizer_source)
    x_tr = model.inputs(train.observations, train.actions).contiguous()
    y_tr = model.targets(train.observations, train.rewards, train.next_observations).contiguous()
    n = x_tr.shape[0]
    if n == 0:
        raise ValueError("train_dynamics: the training set is empty")
    rng, ho_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    has_holdout = holdout is not None and len(holdout.observations) > 0
    if has_holdout:
        assert holdout is not None
        ho_rows = np.arange(len(holdout.observations))
        if cfg.max_holdout is not None and ho_rows.size > cfg.max_holdout:
            ho_rows = np.sort(ho_rng.choice(ho_rows.size, cfg.max_holdout, replace=False))
        x_ho = model.inputs(holdout.observations[ho_rows], holdout.actions[ho_rows])
        y_ho = model.raw_targets(
            holdout.observations[ho_rows],
            holdout.rewards[ho_rows],
            holdout.next_observations[ho_rows],
        )
    ens, n_members = model.ensemble, model.members
    params = [p for p in ens.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=cfg.lr, foreach=True)  # one kernel per op, not per tensor
    bs = min(cfg.batch_size, n)
    n_rows = n if cfg.steps_per_epoch is None else cfg.steps_per_epoch * bs
    boot = rng.integers(0, n, size=(n_members, n)) if cfg.sampling == "bootstrap" else None

    best = np.full(n_members, np.inf)
    best_epoch = np.zeros(n_members, dtype=np.int64)
    snapshot = {k: v.detach().clone() for k, v in ens.parameters_dict().items()}
    losses: list[float] = []
    mses: list[np.ndarray] = []
    since, steps, stopped_early = 0, 0, False
    report = progress if progress is not None else (lambda record: None)
    for epoch in range(1, cfg.max_epochs + 1):
        idx = torch.from_numpy(_epoch_indices(rng, n, n_members, cfg.sampling, n_rows, boot))
        idx = idx.to(x_tr.device)
        ens.train()
        total, count = 0.0, 0
        for s in range(0, n_rows, bs):
            rows = idx[:, s : s + bs]
            loss = ens.loss(x_tr[rows], y_tr[rows], weight_decay=cfg.weight_decay).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach())
            count += 1
        steps += count
        losses.append(total / count)
        record: dict[str, Any] = {"epoch": epoch, "train_loss": losses[-1]}
        if has_holdout:
            cur = _mse_tensors(model, x_ho, y_ho, cfg.eval_batch_size).double().cpu().numpy()
            mses.append(cur)
            improved = (best - cur) / np.where(np.isinf(best), 1.0, best) > cfg.min_improvement
            improved |= np.isinf(best)
            if improved.any():
                mask = torch.from_numpy(improved).to(x_tr.device)
                with torch.no_grad():
                    for k, v in ens.parameters_dict().items():
                        m = mask.view(1, -1, *([1] * (v.dim() - 2)))
                        snapshot[k] = torch.where(m, v.detach(), snapshot[k])
                best = np.where(improved, cur, best)
                best_epoch[improved] = epoch
                since = 0
            else:
                since += 1
            record["holdout_mse"] = cur.tolist()
        report(record)
        if has_holdout and since >= cfg.patience:
            stopped_early = True
            break
    if has_holdout:
        ens.load_parameters_dict(snapshot)
        elites = select_elites(best, cfg.n_elites)
        elites_source = "lowest holdout MSE"
    else:
        best = np.full(n_members, np.nan)
        best_epoch[:] = len(losses)
        elites = tuple(range(n_members))
        elites_source = "all members (no holdout)"
    model.elites = elites
    return TrainResult(
        epochs=len(losses),
        steps=steps,
        train_loss=np.asarray(losses),
        holdout_mse=np.asarray(mses).reshape(len(mses), n_members),
        best_holdout_mse=best.astype(np.float64),
        best_epoch=best_epoch,
        elites=elites,
        stopped_early=stopped_early,
        seconds=time.perf_counter() - t0,
        normalizer_source=model.input_normalizer.source,
        extra={"elites_source": elites_source, "sampling": cfg.sampling},
    )
