"""What a system gives the run layer: a config type, a plan made from public facts, a loader
for the private data and `run(config, data, rng) -> Result`.

The split is the privacy rule made structural:

- `plan(config, header)` sees the config and the dataset's *header* only (metadata, sizes,
  content fingerprint). It resolves every public parameter and states the planned
  `PrivacyReport`, which the ledger checks. It also says what config.json publishes beyond the
  config itself. Nothing it returns can depend on the episodes: it never sees them.
- `load(config, source, plan)` reads the private episodes (or samples them from a built-in
  domain); the layer calls it only inside the ledger transaction.
- `run(config, data, rng, ctx)` computes; it knows nothing of files or the command line. Its
  `Result` carries the metrics, the curve, the final `PrivacyReport`, artefacts and plots,
  which the layer writes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from privrl.algorithm import Plan
from privrl.config import RunConfig
from privrl.privacy.noise import NoiseSource
from privrl.privacy.report import PrivacyReport

__all__ = ["Plan", "PlotSpec", "Result", "RunContext", "Series", "System"]

DataUse = Literal["required", "optional", "none"]


@dataclass(frozen=True)
class Series:
    """One line of a plot, optionally with a band (e.g. a 95% interval)."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    low: Sequence[float] | None = None
    high: Sequence[float] | None = None
    style: str = "-"


@dataclass(frozen=True)
class PlotSpec:
    """A line plot the layer draws to `plots/<name>.png` (see `privrl.runs.plots`)."""

    name: str
    title: str
    xlabel: str
    ylabel: str
    series: Sequence[Series]
    hlines: Sequence[tuple[str, float]] = ()
    logx: bool = False
    logy: bool = False
    xticks: Sequence[tuple[float, str]] = ()  # labelled x positions (categories), if any


# An artefact is an array (saved .npy), a JSON-able mapping (.json), bytes, or a callable
# that writes the file at the path it is given.
Artifact = np.ndarray | Mapping[str, Any] | bytes | Callable[[Path], None]
Plot = PlotSpec | Callable[[Path], None]


@dataclass
class Result:
    """What one run produced; the layer writes it as the run directory.

    Attributes:
        metrics: metrics.json (final figures; standard keys where they apply).
        privacy: privacy.json, the final report (its releases, ε and δ).
        curve: metrics.csv rows (learning curves), if any.
        artifacts: file name → artefact (see `Artifact`).
        plots: file stem → plot (a `PlotSpec` or a callable writing a PNG at the path).
        summary: console lines printed after the privacy report.
    """

    metrics: dict[str, Any]
    privacy: PrivacyReport
    curve: list[dict[str, Any]] = field(default_factory=list)
    artifacts: dict[str, Artifact] = field(default_factory=dict)
    plots: dict[str, Plot] = field(default_factory=dict)
    summary: list[str] = field(default_factory=list)
    discard: list[str] = field(default_factory=list)
    """Checkpoint files (names under `RunContext.checkpoint_dir`) the layer deletes once the
    run directory is written and the ledger has recorded the spend (e.g. a pending release
    kept until then so that a crash before the record can resume without a second spend)."""


@dataclass
class RunContext:
    """How a run talks to its surroundings without knowing them.

    Attributes:
        progress: `progress(label, done, total)`; a no-op when quiet.
        checkpoint_dir: where a long run may keep resumable state (None: no resume).
        resume: whether to continue from the state in `checkpoint_dir`.
        seed: the run's seed (for systems that seed torch as well as numpy). It governs
            everything but privacy noise: initialisation, environments, public tuning,
            evaluation.
        noise: where the run's privacy noise and secret sampling come from (a
            `privrl.privacy.NoiseSource`: secure unless the run opted in to insecure
            reproducible noise). Never derived from `seed`.
        plan: the run's `Plan` (its public parameters and facts).
        notice: `notice(text)` tells the user something about the run itself (e.g. "resuming
            from epoch 3"): stderr on the command line; a no-op when quiet. Never data.
    """

    progress: Callable[[str, int, int], None] = lambda label, done, total: None
    checkpoint_dir: Path | None = None
    resume: bool = False
    seed: int = 0
    plan: Plan | None = None
    notice: Callable[[str], None] = lambda text: None
    noise: NoiseSource = field(default_factory=NoiseSource.secure)
    secret_dir: Path | None = None
    """Where a resumable run keeps state that must never be published (a noise generator's
    state, raw statistics): beside the dataset, never in the run directory (`secret_state_dir`).
    None: no such place (the run keeps no secret state, or has no dataset)."""


class System:
    """Base of a system's entry in the run layer (subclass and register it).

    Class attributes:
        name: the system's id (`privrl run`/`sweep` use it; the CLI command name by default).
        Config: its `RunConfig` subclass.
        data: whether a run needs `--data` ("required"), may take it ("optional": otherwise
            the system samples from a built-in domain or interacts with an environment), or
            never reads a dataset ("none").
        summary: one line of help (the CLI command's help starts with it).
        help: the CLI command's full help, when it says more than `summary` (kept beside
            the system it describes; "" means the summary alone).
        resumable: whether a run keeps resumable state in `RunContext.checkpoint_dir`.
        checkpoint_subdir: that directory, relative to the run directory ("" is the run
            directory itself, for systems whose checkpoint files predate the layer).
        auto_resume: the system resumes by itself when the checkpoint is of the same config
            (and refuses one of another); `--resume` then only insists that there is one
            (`RunContext.resume`), and is off by default.
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type[RunConfig]] = RunConfig
    data: ClassVar[DataUse] = "none"
    summary: ClassVar[str] = ""
    help: ClassVar[str] = ""
    resumable: ClassVar[bool] = False
    checkpoint_subdir: ClassVar[str] = "checkpoint"
    auto_resume: ClassVar[bool] = False
    # True: `plan` takes a keyword `seed` (the run's seed), for public randomised work done
    # before the ledger check, e.g. tuning on a public sample drawn from a simulator.
    plan_uses_seed: ClassVar[bool] = False

    def plan(self, config: Any, header: Any | None) -> Plan:
        """Resolve the public parameters and state the planned report; `header` is the
        dataset's `DatasetHeader` (None without --data). Must not read the episodes."""
        raise NotImplementedError

    def load(self, config: Any, source: Path | None, plan: Plan, rng: np.random.Generator) -> Any:
        """The private data (read from `source`, or sampled when there is none). Called inside
        the ledger transaction, after the reservation. Default: the dataset at `source` (None
        without one)."""
        if source is None:
            return None
        from privrl.data.io import load_hdf5

        return load_hdf5(source)

    def run(self, config: Any, data: Any, rng: np.random.Generator, ctx: RunContext) -> Result:
        raise NotImplementedError

    def failure(self, config: Any, result: Result) -> str | None:
        """Why a finished run failed (e.g. an audit whose bound exceeds the claimed ε), or None.
        The generated command reports it as one `error:` line with exit code 1, after the run
        directory is written and the ledger has recorded the spend. Default: never."""
        return None
