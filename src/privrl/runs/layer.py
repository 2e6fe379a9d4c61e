"""The run layer: one path from a config to a finished run directory, for every system.

    spec = RunSpec.from_mapping({"system": "dp-apvi", "data": "d.h5", "epsilon": 1.0,
                                 "out": "runs/a", "seed": 0})
    result = execute(spec)

Order of work (the privacy rules of docs/privacy.md), the same for every system:

1. the config is validated (it validated itself on construction) and `--out` is checked;
2. with a dataset, only its header is read; the system's `plan` resolves the public parameters
   and states the planned report;
3. the run is a ledger transaction (`ledger_transaction`): the dataset's ledger reserves the
   planned spend (a pending entry that counts) before any episode is read, or refuses the run
   (a run that opted in to insecure reproducible noise is uncertified, so a ledger refuses it);
4. inside it: the system loads the private data, runs, and the layer writes the whole run
   directory (config.json from the config and the plan only, metrics.json, metrics.csv,
   privacy.json, artefacts, plots/*.png) into a hidden staging folder beside `--out`; it is
   published with one rename and the reservation is then completed with the final report. A
   failure or interruption publishes nothing and leaves the reservation counted;
5. the console summary is printed last.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tomllib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privrl.config import ConfigError, RunConfig
from privrl.privacy.noise import NoiseSource
from privrl.privacy.report import json_safe
from privrl.runs import registry
from privrl.runs.plots import draw
from privrl.runs.rundir import RunDir, check_out_dir, crash_point, ledger_transaction
from privrl.runs.system import Plan, PlotSpec, Result, RunContext, System

RESERVED = ("system", "data", "out", "seed", "insecure_reproducible_noise")
INSECURE_KEY = "insecure_reproducible_noise"
# A value of `Plan.public` that removes the spec's key of that name from config.json (for a
# system that publishes it elsewhere, e.g. the dataset path inside a "source" record).
OMIT: Any = type("Omit", (), {"__repr__": lambda self: "OMIT"})()


@dataclass(frozen=True)
class RunSpec:
    """One run: a system, its config, and the run-level choices (data, out, seed).

    `insecure_noise` opts in to noise drawn from the seed (`NoiseSource.insecure`): for
    simulation studies and tests only; the run is then uncertified (ε = ∞) and no ledger
    accepts it.
    """

    system: str
    config: RunConfig
    out: Path
    data: Path | None = None
    seed: int = 0
    insecure_noise: bool = False

    def noise(self) -> NoiseSource:
        """The run's source of privacy noise: secure unless `insecure_noise`."""
        return NoiseSource.insecure(self.seed) if self.insecure_noise else NoiseSource.secure()

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], *, out: str | Path | None = None) -> RunSpec:
        """From a flat mapping (a TOML file, a sweep cell): `system`, `data`, `out`, `seed`
        and the system's own settings side by side."""
        values = dict(values)
        if "system" not in values:
            raise ConfigError("system", f"is required (one of: {', '.join(registry.names())})")
        try:
            system = registry.get(str(values.pop("system")))
        except ValueError as exc:
            raise ConfigError("system", str(exc).removeprefix("unknown system ")) from None
        data = values.pop("data", None)
        if data is not None and not isinstance(data, (str, Path)):
            raise ConfigError("data", f"must be a path (a quoted string), not {data!r}")
        target = out if out is not None else values.pop("out", None)
        values.pop("out", None)
        if target is None:
            raise ConfigError("out", "is required (the run directory to write)")
        if not isinstance(target, (str, Path)):
            raise ConfigError("out", f"must be a path (a quoted string), not {target!r}")
        seed = values.pop("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError("seed", f"must be an integer >= 0, not {seed!r}")
        insecure = values.pop(INSECURE_KEY, False)
        if not isinstance(insecure, bool):
            raise ConfigError(INSECURE_KEY, f"must be true or false, not {insecure!r}")
        config = system.Config.from_dict(values)
        data_path = None if data is None else Path(data)
        return cls(system.name, config, Path(target), data_path, seed, insecure)

    def _run_level(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "system": self.system,
            "data": None if self.data is None else str(self.data),
            "seed": self.seed,
        }
        if self.insecure_noise:  # said only when set: a certified run's config is unchanged
            out[INSECURE_KEY] = True
        return out

    def to_dict(self) -> dict[str, Any]:
        return {**self._run_level(), **self.config.to_dict()}

    def identity(self) -> dict[str, Any]:
        """`to_dict` with the config's identity (`RunConfig.identity`): a sweep cell's key."""
        return {**self._run_level(), **self.config.identity()}


def load_toml(path: str | Path) -> dict[str, Any]:
    """A TOML file as a dict; a ConfigError names the file and the syntax problem."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(str(path), "does not exist") from None
    except IsADirectoryError:
        raise ConfigError(str(path), "is a directory; give a TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), f"is not valid TOML ({exc})") from None
    except UnicodeDecodeError as exc:  # a binary file: TOML is UTF-8 text
        raise ConfigError(
            str(path),
            f"is not valid TOML: it is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at "
            f"offset {exc.start}); give a TOML text file",
        ) from None


def settings_template(system: System) -> str:
    """A system's settings with their defaults and help, as a commented TOML template (what
    `privrl run --show SYSTEM` prints)."""
    import dataclasses

    lines = [f'system = "{system.name}"']
    if system.data != "none":
        lines.append(f'data = "DATA.h5"{"" if system.data == "required" else "  # optional"}')
    lines += ['out = "runs/NAME"', "seed = 0"]
    for f in dataclasses.fields(system.Config):
        default = f.default
        if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        text = f.metadata.get("help", "")
        if default is ... or default is None:
            lines.append(f"# {f.name} = ...  # {text}")
        else:
            lines.append(f"{f.name} = {_toml_value(default)}  # {text}")
    return "\n".join(lines)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if value == value and abs(value) != float("inf") else f'"{value}"'
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return f'"{value}"'


def config_json(spec: RunSpec, plan: Plan) -> dict[str, Any]:
    """config.json: the spec, then the plan's public values (resolved before the data); a
    public value `OMIT` drops the key."""
    merged = {**spec.to_dict(), **dict(plan.public)}
    return {key: value for key, value in merged.items() if value is not OMIT}


def execute(
    spec: RunSpec,
    *,
    quiet: bool = False,
    resume: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
) -> Result:
    """Run `spec` end to end under the privacy rules; return its `Result`.

    Raises `ConfigError` for a config that does not fit the system, the ledger's errors when
    the budget is short, and the system's own errors.
    """
    system = registry.get(spec.system)
    _check_data_use(system, spec.data)
    fresh = not Path(spec.out).exists()
    out = check_out_dir(spec.out)
    if fresh:  # a run refused before the guard leaves no empty directory (the guard remakes it)
        out.rmdir()
    header = None
    if spec.data is not None:
        from privrl.data.io import read_header

        header = read_header(spec.data)
    noise = spec.noise()
    plan = plan_of(system, spec, header)
    if not noise.certified:  # the ledger then refuses the run before any data is read
        plan = dataclasses.replace(plan, report=noise.certify(plan.report))
    with _progress(quiet, progress) as report_progress:
        ctx = RunContext(
            progress=report_progress,
            checkpoint_dir=out / system.checkpoint_subdir if system.resumable else None,
            secret_dir=secret_state_dir(spec, out) if system.resumable else None,
            resume=resume,
            seed=spec.seed,
            plan=plan,
            notice=(lambda text: None) if quiet else _notice,
            noise=noise,
        )
        with ledger_transaction(
            spec.data, plan.report, label=system.name, out=out, resumable=system.resumable
        ) as txn:
            crash_point("reserved")
            rng = np.random.default_rng(spec.seed)
            data = system.load(spec.config, spec.data, plan, rng)
            result = system.run(spec.config, data, rng, ctx)
            result.privacy = noise.certify(result.privacy)
            if not result.privacy.public_parameters and plan.report.public_parameters:
                result.privacy.public_parameters = list(plan.report.public_parameters)
            write_run(txn.staging, config_json(spec, plan), result)
            txn.reports.append(result.privacy)
            crash_point("staged")
    crash_point("completed")
    for where in (ctx.checkpoint_dir, ctx.secret_dir):
        for name in result.discard if where is not None else ():  # completed: done with
            (where / name).unlink(missing_ok=True)
    if ctx.secret_dir is not None and ctx.secret_dir.is_dir() and not any(ctx.secret_dir.iterdir()):
        ctx.secret_dir.rmdir()
    if not quiet:
        print_summary(out, result)
    return result


SECRET_DIR = ".privrl-secret"


def secret_state_dir(spec: RunSpec, out: Path) -> Path | None:
    """Where a resumable run of `spec` keeps its secret state: `.privrl-secret/KEY/` beside
    the dataset (the data holder's side, never the run directory), KEY a digest of the run's
    identity and `--out`, so that a rerun of the same run resumes and another run (another
    config, seed or --out) never takes over its state. None without a dataset."""
    import hashlib

    if spec.data is None:
        return None
    where = {"data": str(Path(spec.data).resolve()), "out": str(Path(out).resolve())}
    key = json.dumps(json_safe({**spec.identity(), **where}), sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    return Path(spec.data).resolve().parent / SECRET_DIR / digest


def _notice(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def plan_of(system: System, spec: RunSpec, header: Any) -> Plan:
    """The system's plan. A system whose plan does public randomised work before the ledger
    check (tuning on a public sample drawn from a simulator) sets `plan_uses_seed` and is given
    the run's seed."""
    if system.plan_uses_seed:
        return system.plan(spec.config, header, seed=spec.seed)  # type: ignore[call-arg]
    return system.plan(spec.config, header)


def _check_data_use(system: System, data: Path | None) -> None:
    if system.data == "required" and data is None:
        raise ConfigError("data", f"is required: {system.name} learns from a dataset file")
    if system.data == "none" and data is not None:
        raise ConfigError("data", f"is not used by {system.name} (it interacts with a simulator)")
    if data is not None and Path(data).is_dir():
        raise ConfigError("data", f"{data} is a directory; give the dataset file (.h5)")
    if data is not None and not Path(data).is_file():
        raise ConfigError("data", f"file not found: {data}")


def write_run(out: Path, config: Mapping[str, Any], result: Result) -> RunDir:
    """Write the run directory contract from a config dict and a `Result`."""
    run = RunDir(out)
    run.write_config(config)
    run.write_metrics(result.metrics)
    if result.curve:
        run.write_curve(result.curve)
    run.write_privacy(result.privacy)
    for name, artifact in result.artifacts.items():
        _write_artifact(run.artifact(name), artifact)
    for name, plot in result.plots.items():
        path = run.plot_path(name)
        if isinstance(plot, PlotSpec):
            draw(plot, path)
        else:
            plot(path)
    return run


def _write_artifact(path: Path, artifact: Any) -> None:
    if isinstance(artifact, np.ndarray):
        with open(path, "wb") as fh:
            np.save(fh, artifact)
    elif isinstance(artifact, bytes):
        path.write_bytes(artifact)
    elif isinstance(artifact, Mapping):
        path.write_text(json.dumps(json_safe(dict(artifact)), indent=2) + "\n")
    elif callable(artifact):
        artifact(path)
    else:
        raise TypeError(f"artefact {path.name}: cannot write a {type(artifact).__name__}")


def print_summary(out: Path, result: Result) -> None:
    from rich.console import Console

    console = Console()
    result.privacy.print(console)
    for line in result.summary:
        console.print(line, highlight=False)
    console.print(f"run directory: {out}", highlight=False)


@contextmanager
def _progress(
    quiet: bool, callback: Callable[[str, int, int], None] | None
) -> Iterator[Callable[[str, int, int], None]]:
    """A `progress(label, done, total)` function: the caller's, rich bars, or a no-op."""
    if callback is not None:
        yield callback
        return
    from privrl.runs.progress import progress_bars

    with progress_bars(not quiet) as update:
        yield update
