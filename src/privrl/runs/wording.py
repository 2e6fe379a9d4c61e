"""The command line's wording of library messages.

Library code names a setting by its config field, written `` `field` `` or
`` `field=VALUE` `` in a message (`ConfigError.key` names the field an error is about). An
adapter that runs library code for a command re-raises its errors with those references
written as the command's flags (``--field``, ``--field VALUE``; a switch's ``=True`` is the
flag alone), so the user reads the flag to change. Names that are not fields of the config
are left as they are. `privrl.runs.cli` does this for every generated command (building the
config and running it); an adapter may also wrap its own calls, and give the command's own
words for a whole message (`special`) or for a phrase of the library's (`phrases`, e.g. "a
public dataset (`public=`)", which the command line takes as a file flag).

The public parameters a report lists say where a value came from; a detail that lists fields
(`step_size, schedule, k`) is written as their flags too (`command_parameters`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from privrl.config import Config, ConfigError, flags_of
from privrl.privacy.public import PublicParameter, PublicParameters

# a setting as the library's messages write it: `field` or `field=VALUE`
SETTING = re.compile(r"`([a-z][a-z0-9_]*)(?:=([^`]*))?`")

Phrases = Sequence[tuple[str, str]]


def flag_of(config_cls: type[Config], name: str) -> str | None:
    """The flag that sets field `name` of `config_cls` (its first spelling; a switch's
    ``--x/--no-x`` as ``--x``), None when `name` is not one of its fields."""
    field = config_cls.field_map().get(name)
    return None if field is None else flags_of(field)[0].split("/")[0]


def command_words(
    text: str,
    config_cls: type[Config],
    special: Mapping[str, str] | None = None,
    phrases: Phrases = (),
) -> str:
    """``text`` with every `field` / `field=VALUE` of ``config_cls`` written as its flag;
    `special` maps whole messages to the command's own wording (where the command has a way
    the library does not), `phrases` (library phrase, command's phrase) pairs are replaced
    first, in order."""
    if special and text in special:
        return special[text]
    for phrase, words in phrases:
        text = text.replace(phrase, words)

    def flag(match: re.Match[str]) -> str:
        name, value = match.group(1), match.group(2)
        spelled = flag_of(config_cls, name)
        if spelled is None:
            return match.group(0)
        return spelled if value in (None, "True") else f"{spelled} {value}"

    return SETTING.sub(flag, text)


def command_detail(detail: str, config_cls: type[Config]) -> str:
    """A public parameter's detail that lists fields (`iterations`, `step_size, schedule, k`,
    `target_policy; ...`) with them written as flags; any other detail as it is."""
    head, sep, rest = detail.partition("; ")
    flags = [flag_of(config_cls, name) for name in head.split(", ")]
    if not all(flags):
        return detail
    return ", ".join(f for f in flags if f) + sep + rest


def command_parameters(params: PublicParameters, config_cls: type[Config]) -> PublicParameters:
    """`params` with each detail naming flags (`command_detail`), as a command's privacy.json
    lists them."""
    out = PublicParameters()
    for p in params:
        out.add(PublicParameter(p.name, p.value, p.source, command_detail(p.detail, config_cls)))
    return out


@contextmanager
def in_command_words(
    config_cls: type[Config],
    special: Mapping[str, str] | None = None,
    phrases: Phrases = (),
) -> Iterator[None]:
    """Re-raise the library's `ConfigError`s and `ValueError`s with their settings written as
    the command's flags (`command_words`). A `ConfigError` keeps its field; another
    `ValueError` is the same exception (type, attributes) with its message rewritten, and its
    ``detail`` too where it has one (`privrl.data.dataset.DatasetError`)."""
    try:
        yield
    except ConfigError as exc:
        problem = command_words(exc.problem, config_cls, special, phrases)
        raise ConfigError(exc.key, problem) from None
    except ValueError as exc:
        if exc.args and isinstance(exc.args[0], str):
            first = command_words(exc.args[0], config_cls, special, phrases)
            exc.args = (first, *exc.args[1:])
            detail = getattr(exc, "detail", None)
            if isinstance(detail, str):
                exc.detail = command_words(detail, config_cls, special, phrases)  # type: ignore[attr-defined]
        raise


# -- library functions that take plain parameters -------------------------------------------


def mapped_words(
    text: str, flags: Mapping[str, str], phrases: Phrases = (), bare: Phrases = ()
) -> str:
    """``text`` with every `name` / `name=VALUE` that ``flags`` maps (parameter → flag) written
    as its flag (``--flag``, ``--flag VALUE``; ``=True`` is the flag alone): the
    `command_words` of a library function that takes plain parameters instead of a config.
    The (library phrase, command's phrase) pairs of ``phrases`` are replaced before, those of
    ``bare`` (names a message writes without backquotes) after."""
    for phrase, words in phrases:
        text = text.replace(phrase, words)

    def flag(match: re.Match[str]) -> str:
        spelled, value = flags.get(match.group(1)), match.group(2)
        if spelled is None:
            return match.group(0)
        return spelled if value in (None, "True") else f"{spelled} {value}"

    text = SETTING.sub(flag, text)
    for phrase, words in bare:
        text = text.replace(phrase, words)
    return text


@contextmanager
def in_mapped_words(
    flags: Mapping[str, str], phrases: Phrases = (), bare: Phrases = ()
) -> Iterator[None]:
    """Re-raise the library's `ValueError`s (an `InputError`, a `DatasetError`, ...) with their
    parameters written as the command's flags (`mapped_words`): the same exception (type,
    attributes) with its message rewritten, and its ``detail`` too where it has one."""
    try:
        yield
    except ValueError as exc:
        if exc.args and isinstance(exc.args[0], str):
            exc.args = (mapped_words(exc.args[0], flags, phrases, bare), *exc.args[1:])
            detail = getattr(exc, "detail", None)
            if isinstance(detail, str):
                exc.detail = mapped_words(detail, flags, phrases, bare)  # type: ignore[attr-defined]
        raise


# `privrl account` / `privrl calibrate`: the flag of each `privrl.privacy.calculator` parameter
CALCULATOR_FLAGS = {
    name: "--" + name.replace("_", "-")
    for name in (
        "mechanism",
        "noise_multiplier",
        "steps",
        "sampling_rate",
        "dataset_size",
        "sample_size",
        "rho",
        "epsilon0",
        "delta0",
        "epsilon",
        "delta",
        "relation",
        "backend",
    )
}
# the command's short flag where its fix names a bound on the noise multiplier
CALCULATOR_PHRASES = (("use `noise_multiplier` >=", "use -z >="),)


def in_calculator_words() -> AbstractContextManager[None]:
    """`in_mapped_words` for the calculator's messages, as `privrl account|calibrate` says them."""
    return in_mapped_words(CALCULATOR_FLAGS, CALCULATOR_PHRASES)


def calculator_notes(result: dict[str, Any]) -> dict[str, Any]:
    """`privrl.privacy.calculator.account`'s result with each accountant's note (why a PLD was
    left out) naming the command's flags."""
    for row in result["results"]:
        if isinstance(row.get("note"), str):
            row["note"] = mapped_words(row["note"], CALCULATOR_FLAGS, CALCULATOR_PHRASES)
    return result


#: The parameters of `privrl.data.tools` (`import_dataset`, `export_dataset`, `describe`) as
#: `privrl data import|export|info` spell them.
DATA_FLAGS = {
    name: "--" + name.replace("_", "-")
    for name in (
        "out",
        "columns",
        "format",
        "observation_space",
        "action_space",
        "clip_out_of_space",
        "bandit",
        "discount",
        "env_id",
        "unit",
        "units",
        "keep_columns",
        "plot",
    )
}

#: Options the table import's own messages name bare (not as `name`), written as flags.
DATA_PHRASES = (
    ("clip_out_of_space=True", "--clip-out-of-space"),
    ("keep_columns", "--keep-columns"),
)


def in_data_words() -> AbstractContextManager[None]:
    """`in_mapped_words` for `privrl data import|export|info`."""
    return in_mapped_words(DATA_FLAGS, bare=DATA_PHRASES)
