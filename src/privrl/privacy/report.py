"""The privacy report: what a run released, and the guarantee the accountant derives from it.

A `PrivacyReport` is the single source of truth for a run's privacy claim. It lists every
release (mechanism, sensitivity, noise, count and the exact `DpEvent`), composes the events
with the accountant, and states the result as (ε, δ) (and ρ where the run is zCDP) for a named
privacy unit under a named neighbouring relation. It serialises to JSON (`privacy.json` in a
run directory, entries of a `BudgetLedger`) and prints as a table.

Releases without a `DpEvent` must say why, in `Release.extra`:

* ``{"public": True}`` — computed only from data declared public; not accounted (ε unchanged).
* ``{"non_private": True}`` — computed from private data without a mechanism; the report is
  then not private (ε = ∞), because one unprotected release voids the whole guarantee.

Any other release with ``event=None`` is rejected, so a forgotten mechanism cannot silently
drop out of the accounting.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dp_accounting import dp_event

from privrl.privacy import accounting
from privrl.privacy.noise import INSECURE_NOTE
from privrl.privacy.release import Release
from privrl.privacy.units import NeighbourRelation, PrivacyUnit, parse_relation, parse_unit

if TYPE_CHECKING:  # rich draws tables only; importing the privacy core does not load it
    from rich.console import Console
    from rich.table import Table

SCHEMA_VERSION = 1

# JSON has no infinities or NaN; they are written as these strings (and only these).
_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}

_RELATION_PHRASE = {
    NeighbourRelation.ADD_REMOVE: "add/remove-one neighbouring",
    NeighbourRelation.REPLACE_ONE: "replace-one neighbouring",
}


def utc_now() -> str:
    """Current UTC time as an ISO 8601 string (second resolution, explicit +00:00)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def _privrl_version() -> str:
    # Read from the installed metadata: privrl.privacy imports nothing else from privrl.
    try:
        return metadata.version("privrl")
    except metadata.PackageNotFoundError:
        return "unknown"


def fmt_number(x: float, digits: int = 3) -> str:
    """Compact human formatting of a privacy parameter (∞ for infinity)."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    return f"{x:.{digits}g}"


def is_public(release: Release) -> bool:
    """True if the release is declared to use public data only (no accounting needed)."""
    return release.event is None and bool(release.extra.get("public", False))


def is_non_private(release: Release) -> bool:
    """True if the release touches private data without a mechanism."""
    if isinstance(release.event, dp_event.NonPrivateDpEvent):
        return True
    return release.event is None and bool(release.extra.get("non_private", False))


# ---------------------------------------------------------------------------------------------
# JSON helpers: non-finite floats <-> "inf"/"-inf"/"nan" strings at known numeric positions.


def json_safe(value: Any) -> Any:
    """Recursively convert to strict-JSON types; non-finite floats become "inf"/"-inf"/"nan"."""
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if hasattr(value, "tolist"):  # numpy scalar or array
        return json_safe(value.tolist())
    raise TypeError(f"cannot serialise value of type {type(value).__name__} to JSON")


def _decode_numbers(value: Any) -> Any:
    """Inverse of `json_safe` for a subtree whose strings "inf"/"-inf"/"nan" are numbers."""
    if isinstance(value, str) and value in _NONFINITE:
        return _NONFINITE[value]
    if isinstance(value, dict):
        return {k: _decode_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode_numbers(v) for v in value]
    return value


def _decode_event(data: Any) -> Any:
    """Decode non-finite numbers inside a serialised DpEvent (its "type" tags stay strings)."""
    if isinstance(data, dict):
        return {k: (v if k == "type" else _decode_event(v)) for k, v in data.items()}
    if isinstance(data, list):
        return [_decode_event(v) for v in data]
    return _decode_numbers(data)


def _float(value: Any, name: str) -> float:
    if isinstance(value, str):
        if value not in _NONFINITE:
            raise ValueError(f"privacy report field {name!r} must be a number, got {value!r}")
        return _NONFINITE[value]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"privacy report field {name!r} must be a number, got {value!r}")
    return float(value)


def _release_from_json(data: dict[str, Any]) -> Release:
    data = dict(data)
    if data.get("event") is not None:
        data["event"] = _decode_event(data["event"])
    data["extra"] = _decode_numbers(data.get("extra", {}))
    return Release.from_dict(data)


# ---------------------------------------------------------------------------------------------


@dataclass
class PrivacyReport:
    """A run's privacy guarantee and the releases it is derived from.

    Attributes:
        unit: what one individual contributes (the protected unit).
        relation: how neighbouring datasets differ by one unit.
        releases: every release of the run, in order.
        delta: the δ at which `epsilon` is stated.
        epsilon: the accountant's ε at `delta` for the composition of all release events
            (∞ for a non-private run).
        rho: total zCDP ρ when every accounted event is Gaussian/zCDP, else None.
        accountant: human description of the accountant (backend and its parameters).
        backend: accountant backend id ("rdp", "pld"; "none" for a non-private baseline).
        model: trust model ("central", "shuffle", "local").
        public: public information the run used, named as public.
        notes: free-form remarks (decisions, caveats) for a reader of the report.
        system: the privrl system that produced the run (e.g. "dp-apvi").
        created: UTC ISO timestamp of the report.
        privrl_version: version of privrl that produced it.
        private: False for a non-private baseline (or a run with a non-private release); also
            forced False whenever `epsilon` is not finite, since ε = ∞ certifies nothing.
        public_parameters: every quantity that set a sensitivity, a noise scale, a sampling
            rate, δ or a number of releases, with its public source (see `privacy.public`).
        derived_from: for a report of post-processing (`post_processing`), what it was
            computed from: the released output (e.g. a policy file and its SHA-256) and the
            run that released it, as that run published it (its system, its data source);
            None for a run that read data itself.
        insecure_noise: True when the run's noise was not secret (insecure reproducible noise
            from a published seed, see `privacy.noise`): then ε = ∞ and `nominal_epsilon`
            keeps the ε the releases would give with secret noise, for simulation studies.
        nominal_epsilon: see `insecure_noise` (None otherwise).

    privacy.json also states ``certified`` (the property of that name): whether the report
    certifies a guarantee — `private` (a finite ε over accounted releases) and secret noise.
    """

    unit: PrivacyUnit
    relation: NeighbourRelation
    releases: list[Release]
    delta: float
    epsilon: float
    rho: float | None
    accountant: str
    backend: str
    model: str = "central"
    public: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    system: str = ""
    created: str = field(default_factory=utc_now)
    privrl_version: str = field(default_factory=_privrl_version)
    private: bool = True
    public_parameters: list[dict[str, Any]] = field(default_factory=list)
    derived_from: dict[str, Any] | None = None
    insecure_noise: bool = False
    nominal_epsilon: float | None = None

    def __post_init__(self) -> None:
        # An infinite (or undefined) ε is no guarantee: such a run is never reported private,
        # so no ledger can accept it.
        if not math.isfinite(float(self.epsilon)):
            self.private = False
        if self.insecure_noise:
            self.private = False

    def claim(self) -> PrivacyReport:
        """The guarantee these releases claim with secret noise: this report when certified;
        for one built on insecure reproducible noise, the same with its `nominal_epsilon`. For
        audits and simulation studies, which test or plot the claim while drawing repeatable
        noise; never publish it as a run's guarantee."""
        if not self.insecure_noise:
            return self
        eps = math.inf if self.nominal_epsilon is None else float(self.nominal_epsilon)
        return dataclasses.replace(
            self,
            epsilon=eps,
            private=math.isfinite(eps),
            insecure_noise=False,
            nominal_epsilon=None,
            notes=[*self.notes, "the claim of these releases with secret noise (audited)"],
        )

    @property
    def certified(self) -> bool:
        """Whether the report certifies a guarantee: private, with secret noise."""
        return bool(self.private and not self.insecure_noise)

    def uncertified(self, reason: str) -> PrivacyReport:
        """This report with its guarantee withdrawn (ε = ∞, not private, not certified): the
        noise was not secret. The ε the releases would give with secret noise is kept as
        `nominal_epsilon`, for simulation studies. Idempotent."""
        if self.insecure_noise:
            return self
        nominal = float(self.epsilon) if self.private else None
        return dataclasses.replace(
            self,
            epsilon=math.inf,
            rho=None,
            private=False,
            insecure_noise=True,
            nominal_epsilon=nominal,
            notes=[*self.notes, reason],
        )

    def with_public_parameters(self, params: Any) -> PrivacyReport:
        """Attach the run's public parameters (a `PublicParameters` or a list of dicts)."""
        items = params.to_list() if hasattr(params, "to_list") else list(params)
        self.public_parameters = [dict(p) for p in items]
        return self

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        unit: PrivacyUnit | str,
        relation: NeighbourRelation | str,
        releases: Iterable[Release],
        delta: float,
        *,
        backend: accounting.Backend = "rdp",
        system: str,
        model: str = "central",
        public: Sequence[str] = (),
        notes: Sequence[str] = (),
    ) -> PrivacyReport:
        """Compose the releases' events with the accountant and state the guarantee.

        Raises ValueError for a release with no event that is not flagged public or
        non-private, and `accounting.AccountingError` if the backend cannot account an event.
        A release flagged non-private makes the whole report non-private (ε = ∞).
        """
        unit = parse_unit(unit)
        relation = parse_relation(relation)
        releases = list(releases)
        delta = float(delta)
        if not 0.0 <= delta < 1.0:
            raise ValueError(f"delta must be in [0, 1), got {delta}")
        for release in releases:
            if not isinstance(release, Release):
                raise TypeError(f"expected Release, got {type(release).__name__}")
            if release.event is None and not (is_public(release) or is_non_private(release)):
                raise ValueError(
                    f"release {release.name!r} has no DpEvent; give it the event of its "
                    "mechanism, or mark it extra={'public': True} if it is computed only from "
                    "public data, or extra={'non_private': True} for a non-private baseline"
                )
        unprotected = [r.name for r in releases if is_non_private(r)]
        if unprotected:
            names = ", ".join(repr(n) for n in unprotected)
            return cls.non_private(
                unit,
                relation,
                releases,
                delta=delta,
                system=system,
                model=model,
                public=public,
                notes=[*notes, f"not private: release(s) {names} use private data unprotected"],
            )
        event = _compose(releases)
        eps = float(accounting.epsilon(event, delta, relation=relation, backend=backend))
        rho = accounting.zcdp_rho(event)
        report = cls(
            unit=unit,
            relation=relation,
            releases=releases,
            delta=delta,
            epsilon=eps,
            rho=None if rho is None else float(rho),
            accountant=accounting.describe_backend(backend, None),
            backend=backend,
            model=model,
            public=list(public),
            notes=list(notes),
            system=system,
        )
        insecure = [r.name for r in releases if r.extra.get("insecure_noise")]
        if insecure:
            return report.uncertified(
                f"{INSECURE_NOTE} (release(s) {', '.join(repr(n) for n in insecure)})"
            )
        return report

    @classmethod
    def non_private(
        cls,
        unit: PrivacyUnit | str,
        relation: NeighbourRelation | str,
        releases: Iterable[Release] = (),
        *,
        system: str,
        delta: float = 0.0,
        model: str = "central",
        public: Sequence[str] = (),
        notes: Sequence[str] = (),
        accountant: str = "none (non-private)",
    ) -> PrivacyReport:
        """A report for a non-private baseline: ε = ∞, no accountant, labelled as such.

        The unit and relation say what a private version of the run would protect, so that
        baselines and private runs stay comparable side by side. ``accountant`` says why no
        accountant certifies the run (a private run whose sampling none matches is reported
        this way too).
        """
        return cls(
            unit=parse_unit(unit),
            relation=parse_relation(relation),
            releases=list(releases),
            delta=float(delta),
            epsilon=math.inf,
            rho=None,
            accountant=accountant,
            backend="none",
            model=model,
            public=list(public),
            notes=list(notes),
            system=system,
            private=False,
        )

    def post_processing(
        self,
        *,
        system: str,
        derived_from: Mapping[str, Any],
        public: Sequence[str] = (),
        notes: Sequence[str] = (),
    ) -> PrivacyReport:
        """The report of a computation whose only inputs are this run's released output and
        public information (e.g. rolling a released policy out in a public simulator).

        By the post-processing property of differential privacy such a computation keeps the
        run's guarantee and spends nothing: the result states the same unit, relation, ε, δ, ρ,
        accountant and releases (a non-private run stays non-private, ε = ∞). `derived_from`
        says what it was computed from; `public` and `notes` are added to the run's own.
        """
        return replace(
            self,
            releases=list(self.releases),
            public=[*self.public, *public],
            notes=[*self.notes, *notes],
            system=system,
            created=utc_now(),
            privrl_version=_privrl_version(),
            public_parameters=[dict(p) for p in self.public_parameters],
            derived_from=dict(derived_from),
        )

    # -- the guarantee ----------------------------------------------------------------------

    @property
    def event(self) -> dp_event.DpEvent:
        """The composed DpEvent of the run (NonPrivateDpEvent for a non-private run)."""
        if not self.private:
            return dp_event.NonPrivateDpEvent()
        return _compose(self.releases)

    def summary(self) -> str:
        """One sentence stating the guarantee: (ε, δ), unit, relation and accountant."""
        who = self.unit.describe()
        rel = _RELATION_PHRASE[self.relation]
        if self.insecure_noise:
            nominal = ""
            if self.nominal_epsilon is not None:
                nominal = (
                    f"; with secret noise its releases would give "
                    f"ε={fmt_number(self.nominal_epsilon)}, δ={fmt_number(self.delta)}"
                )
            return (
                f"NOT CERTIFIED (ε=∞): insecure reproducible noise, no protection for {who}"
                f"{nominal}"
            )
        if not self.private:
            return (
                f"NOT differentially private (ε=∞): non-private run, no protection for {who} "
                f"(a private version would use {rel})"
            )
        where = "" if self.model == "central" else f" in the {self.model} model"
        acc = {"rdp": "RDP accountant", "pld": "PLD accountant"}.get(
            self.backend, f"{self.backend} accountant"
        )
        rho = "" if self.rho is None else f", ρ={fmt_number(self.rho)}-zCDP"
        return (
            f"(ε={fmt_number(self.epsilon)}, δ={fmt_number(self.delta)})-DP{where} for {who} "
            f"under {rel} ({acc}{rho})"
        )

    # -- serialisation ----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Strict-JSON dict (run-directory contract keys first); inverse of `from_dict`."""
        out = {
            "unit": self.unit.value,
            "relation": self.relation.value,
            "epsilon": float(self.epsilon),
            "delta": float(self.delta),
            "rho": None if self.rho is None else float(self.rho),
            "accountant": self.accountant,
            "releases": [r.to_dict() for r in self.releases],
            "backend": self.backend,
            "private": bool(self.private),
            "certified": self.certified,
            "model": self.model,
            "system": self.system,
            "public": list(self.public),
            "public_parameters": [dict(p) for p in self.public_parameters],
            "insecure_noise": bool(self.insecure_noise),
            "nominal_epsilon": self.nominal_epsilon,
            "notes": list(self.notes),
            "created": self.created,
            "privrl_version": self.privrl_version,
            "schema_version": SCHEMA_VERSION,
        }
        if self.derived_from is not None:
            out["derived_from"] = dict(self.derived_from)
        return json_safe(out)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrivacyReport:
        """Rebuild a report from `to_dict` output (accepts real floats or "inf" strings)."""
        try:
            version = int(data.get("schema_version", SCHEMA_VERSION))
            if version > SCHEMA_VERSION:
                raise ValueError(
                    f"privacy report schema version {version} is newer than this privrl "
                    f"supports ({SCHEMA_VERSION}); upgrade privrl"
                )
            eps = _float(data["epsilon"], "epsilon")
            rho = data.get("rho")
            return cls(
                unit=parse_unit(data["unit"]),
                relation=parse_relation(data["relation"]),
                releases=[_release_from_json(r) for r in data["releases"]],
                delta=_float(data["delta"], "delta"),
                epsilon=eps,
                rho=None if rho is None else _float(rho, "rho"),
                accountant=str(data["accountant"]),
                backend=str(data.get("backend", "rdp")),
                model=str(data.get("model", "central")),
                public=[str(p) for p in data.get("public", [])],
                notes=[str(n) for n in data.get("notes", [])],
                system=str(data.get("system", "")),
                created=str(data.get("created", "")),
                privrl_version=str(data.get("privrl_version", "unknown")),
                private=bool(data.get("private", math.isfinite(eps))),
                public_parameters=[dict(p) for p in data.get("public_parameters", [])],
                derived_from=_derived_from(data.get("derived_from")),
                insecure_noise=bool(data.get("insecure_noise", False)),
                nominal_epsilon=(
                    None
                    if data.get("nominal_epsilon") is None
                    else _float(data["nominal_epsilon"], "nominal_epsilon")
                ),
            )
        except KeyError as exc:
            raise ValueError(f"privacy report is missing the field {exc.args[0]!r}") from None

    def to_json(self, path: str | os.PathLike[str]) -> None:
        """Write the report as strict JSON (no NaN/Infinity literals)."""
        text = json.dumps(self.to_dict(), indent=2, allow_nan=False, ensure_ascii=False)
        Path(path).write_text(text + "\n", encoding="utf-8")

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> PrivacyReport:
        """Read a report written by `to_json`."""
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    # -- display ----------------------------------------------------------------------------

    def to_table(self) -> Table:
        """A rich table: the one-sentence guarantee as title, one row per release."""
        from rich.table import Table
        from rich.text import Text

        # Text objects throughout: names like "Q[h]" must not be parsed as rich markup.
        table = Table(title=Text(self.summary()), title_justify="left")
        # At 80 columns the release's name wraps; no number is cut (one noise parameter a line).
        table.add_column("release", ratio=1)
        table.add_column("mechanism")
        table.add_column("sensitivity", justify="right")
        table.add_column("noise", no_wrap=True)
        table.add_column("count", justify="right", no_wrap=True)
        for r in self.releases:
            sensitivity = Text(f"{fmt_number(r.sensitivity, 4)} ({r.norm})")
            if math.isnan(r.sensitivity):  # data-dependent (smooth sensitivity): withheld
                sensitivity = Text(f"withheld, data-dependent ({r.norm})")
            if is_public(r):
                noise, sensitivity = Text("none (public data)"), Text("-")
            elif is_non_private(r):
                noise = Text("none (NOT PRIVATE)", style="bold red")
            else:
                parts = [f"{k}={fmt_number(v, 4)}" for k, v in r.noise.items()]
                noise = Text("\n".join(parts) or "-")
            table.add_row(Text(r.name), Text(r.mechanism), sensitivity, noise, str(r.count))
        lines = [f"accountant: {self.accountant}; trust model: {self.model}"]
        if self.public:
            lines.append("public information: " + "; ".join(self.public))
        if self.public_parameters:
            params = ", ".join(
                f"{p['name']}={p['value']} ({p['source']})" for p in self.public_parameters
            )
            lines.append(f"public parameters: {params}")
        if self.derived_from is not None:
            origin = ", ".join(f"{k}={v}" for k, v in self.derived_from.items() if v is not None)
            lines.append(f"post-processing of: {origin}")
        lines.extend(f"note: {n}" for n in self.notes)
        lines.append(f"{self.system or 'privrl'} · privrl {self.privrl_version} · {self.created}")
        table.caption = Text("\n".join(lines))
        table.caption_justify = "left"
        return table

    def print(self, console: Console | None = None) -> None:
        """Print the report table (to a fresh console unless one is given)."""
        from rich.console import Console

        (console or Console()).print(self.to_table())


def _derived_from(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"privacy report field 'derived_from' must be an object, got {value!r}")
    return dict(value)


def _compose(releases: Sequence[Release]) -> dp_event.ComposedDpEvent:
    """ComposedDpEvent of every accounted release (public releases carry no event)."""
    return dp_event.ComposedDpEvent([r.event for r in releases if r.event is not None])
