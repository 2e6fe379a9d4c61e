"""Typed configurations: one frozen dataclass per algorithm.

An algorithm's config lists every knob with its default and its help text, in one place:

    @dataclass(frozen=True)
    class GpopeConfig(Config):
        epsilon: float = option(..., "--epsilon", "-e", help="Target ε in [1e-6, 100].")
        step_size: float = option(0.01, help="GTD2 step size α.")

        def validate(self) -> None:
            check(0 < self.step_size, "step_size", "must be positive")

The Python API (`privrl.offline.DPAPVI(config)`, ...), the command line (generated from the
fields by `privrl.runs.cli`), `privrl run CONFIG.toml` and `privrl sweep GRID.toml` all build
the same config, so help and validation cannot drift apart. A config holds only what the user
chose: nothing in it is read from the data. Errors name the field (`ConfigError.key`); only
the command line turns a field into a flag (`ConfigError.message_for`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, Self, get_args, get_origin

REQUIRED: Any = dataclasses.MISSING


class ConfigError(ValueError):
    """A config value is invalid. `key` is the field; the message says what to change.

    `str(err)` names the field by its config key; `err.message_for(flag)` names it by the
    command-line flag instead.
    """

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"{key} {problem}")

    def message_for(self, name: str) -> str:
        return f"{name} {self.problem}"


def option(
    default: Any = REQUIRED,
    *flags: str,
    help: str,
    metavar: str | None = None,
    cli: bool = True,
    default_factory: Any = REQUIRED,
    allow_nan: bool = False,
    keyless_default: bool = False,
) -> Any:
    """A config field with its command-line flag(s) and help text.

    `flags` defaults to `--field-name`; the first flag names the field in error messages on the
    command line. `cli=False` keeps a field out of the generated command (config files only).
    `allow_nan=True` lets a NaN reach `validate`, which refuses it with the field's own range
    message (by default a NaN is refused on conversion as "not a number").
    `keyless_default=True` (for an option added after runs were cached) leaves the field out of
    the config's identity while it holds its default, so a sweep's finished cells keep their
    fingerprint; its default must then mean what runs did before the option existed.
    """
    meta = {"flags": tuple(flags), "help": help, "metavar": metavar, "cli": cli}
    if allow_nan:
        meta["allow_nan"] = True
    if keyless_default:
        meta["keyless_default"] = True
    if default_factory is not REQUIRED:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    # A required field defaults to `...` (so it may follow fields with defaults) and is
    # refused on construction when still `...`.
    return dataclasses.field(default=... if default is REQUIRED else default, metadata=meta)


def check(condition: bool, key: str, problem: str) -> None:
    """Raise `ConfigError(key, problem)` unless `condition` holds."""
    if not condition:
        raise ConfigError(key, problem)


def flags_of(f: dataclasses.Field[Any]) -> tuple[str, ...]:
    """The command-line flags of a config field (default `--field-name`)."""
    flags = tuple(f.metadata.get("flags", ()))
    return flags or ("--" + f.name.replace("_", "-"),)


@dataclasses.dataclass(frozen=True)
class Config:
    """Base of every system's config: a frozen dataclass that validates itself.

    Subclasses override `validate` (raise `ConfigError` through `check`); it runs on
    construction, so an invalid config cannot exist. Before it, a field named `epsilon` (a
    privacy budget ε, in every system) is held to the library's one range
    (`privrl.privacy.limits`), so a flag, a config file and a sweep cell accept the same ε.
    """

    system: ClassVar[str] = ""

    def __post_init__(self) -> None:
        check_budget_fields(self)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is ...:
                raise ConfigError(f.name, "is required")
        self.validate()

    def validate(self) -> None:
        """Check the values together; raise `ConfigError` (via `check`) on a bad one."""

    # -- conversion ------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON/TOML values (paths as strings, tuples as lists)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Build from plain values (a TOML table, a config.json), coercing to the field types.

        Unknown keys are refused (a typo must not silently fall back to a default).
        """
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ConfigError(
                unknown[0],
                f"is not a setting of {cls.system or cls.__name__} (known: {', '.join(known)})",
            )
        hints = typing.get_type_hints(cls)
        values = {
            k: coerce(v, hints[k], k, allow_nan=allows_nan(known[k])) for k, v in data.items()
        }
        return cls(**values)

    def replace(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)

    def fingerprint(self) -> str:
        """A stable hash of the system and every value (for sweeps: same config, same cell)."""
        return fingerprint({"system": self.system, "config": self.identity()})

    def identity(self) -> dict[str, Any]:
        """`to_dict` without the `keyless_default` fields that hold their default: what
        makes two runs the same run (see `option`)."""
        values = self.to_dict()
        for f in dataclasses.fields(self):
            if f.metadata.get("keyless_default") and getattr(self, f.name) == f.default:
                del values[f.name]
        return values

    @classmethod
    def field_map(cls) -> dict[str, dataclasses.Field[Any]]:
        return {f.name: f for f in dataclasses.fields(cls)}


RunConfig = Config
"""The run layer's name for `Config` (a system's config is its algorithm's config)."""


def check_budget_fields(config: Config) -> None:
    """The privacy budget ε of `config` (its field `epsilon`, when set) is in the library's
    range (`privrl.privacy.limits.epsilon_problem`)."""
    from privrl.privacy.limits import epsilon_problem

    value = getattr(config, "epsilon", None)
    if value is not None and value is not ...:
        problem = epsilon_problem(value)
        check(problem is None, "epsilon", problem or "")


def allows_nan(f: dataclasses.Field[Any]) -> bool:
    """Whether the field lets a NaN through conversion (see `option`)."""
    return bool(f.metadata.get("allow_nan", False))


def fingerprint(value: Any) -> str:
    """SHA-256 of the canonical JSON of `value`."""
    text = json.dumps(_plain(value), sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value.item()
    if hasattr(value, "value") and isinstance(getattr(value, "value", None), str):  # enums
        return value.value
    return value


def coerce(value: Any, hint: Any, key: str, *, allow_nan: bool = False) -> Any:
    """`value` as the type `hint` (bool, int, float, str, Path, Literal, Optional, tuple);
    `allow_nan` keeps a float NaN (for a `validate` that refuses it with its own message)."""
    origin = get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = get_args(hint)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, key, allow_nan=allow_nan)
            except ConfigError as exc:
                errors.append(exc.problem)
        raise ConfigError(key, errors[0] if errors else f"cannot be {value!r}")
    if origin is Literal:
        choices = get_args(hint)
        if value not in choices:
            raise ConfigError(key, f"must be one of {', '.join(map(str, choices))}, not {value!r}")
        return value
    if origin in (tuple, Sequence, list):
        args = get_args(hint)
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ConfigError(key, f"must be a list, not {value!r}")
        item = args[0] if args else Any
        return tuple(coerce(v, item, key) for v in value)
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(key, f"must be true or false, not {value!r}")
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"must be an integer, not {value!r}")
        if isinstance(value, float) and not value.is_integer():
            raise ConfigError(key, f"must be an integer, not {value!r}")
        return int(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if isinstance(value, str):
                try:
                    return float(value)  # "inf", "1e-5" from a file
                except ValueError:
                    pass
            raise ConfigError(key, f"must be a number, not {value!r}")
        value = float(value)
        if math.isnan(value) and not allow_nan:
            raise ConfigError(key, "must be a number, not nan")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(key, f"must be a string, not {value!r}")
        return value
    if hint is Path:
        if not isinstance(value, (str, Path)):
            raise ConfigError(key, f"must be a path, not {value!r}")
        return Path(value)
    return value
