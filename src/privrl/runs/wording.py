"""The command line's wording of library messages.

Library code names a setting by its config field, written `` `field` `` or
`` `field=VALUE` `` in a message (`ConfigError.key` names the field an error is about). An
adapter that runs library code for a command re-raises its errors with those references
written as the command's flags (``--field``, ``--field VALUE``; a switch's ``=True`` is the
flag alone), so the user reads the flag to change. Names that are not fields of the config
are left as they are. `privrl.runs.cli` does this for every generated command (building the
config and running it); an adapter may also wrap its own calls.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from privrl.config import Config, ConfigError, flags_of

# a setting as the library's messages write it: `field` or `field=VALUE`
SETTING = re.compile(r"`([a-z][a-z0-9_]*)(?:=([^`]*))?`")


def command_words(
    text: str, config_cls: type[Config], special: Mapping[str, str] | None = None
) -> str:
    """``text`` with every `field` / `field=VALUE` of ``config_cls`` written as its flag;
    `special` maps whole messages to the command's own wording (where the command has a way
    the library does not)."""
    if special and text in special:
        return special[text]
    fields = config_cls.field_map()

    def flag(match: re.Match[str]) -> str:
        name, value = match.group(1), match.group(2)
        if name not in fields:
            return match.group(0)
        spelled = flags_of(fields[name])[0].split("/")[0]
        return spelled if value in (None, "True") else f"{spelled} {value}"

    return SETTING.sub(flag, text)


@contextmanager
def in_command_words(
    config_cls: type[Config], special: Mapping[str, str] | None = None
) -> Iterator[None]:
    """Re-raise the library's `ConfigError`s and `ValueError`s with their settings written as
    the command's flags (`command_words`); the field of a `ConfigError` is kept."""
    try:
        yield
    except ConfigError as exc:
        raise ConfigError(exc.key, command_words(exc.problem, config_cls, special)) from None
    except ValueError as exc:
        text = command_words(str(exc), config_cls, special)
        if text == str(exc):
            raise
        try:
            again = type(exc)(text)
        except Exception:  # an error type with another constructor: keep it as it is
            raise exc from None
        raise again from None
