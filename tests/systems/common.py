"""Helpers shared by the systems' tests: a config as TOML text, a run file without its timestamp."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def toml_text(values: dict[str, Any]) -> str:
    """`values` as TOML `key = value` lines (bools, strings, numbers, lists)."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(v) if isinstance(v, str) else repr(v)

    return "\n".join(f"{k} = {value(v)}" for k, v in values.items()) + "\n"


def run_json(path: Path) -> dict[str, Any]:
    """A run file's JSON without `created` (privacy.json's timestamp: the only key two
    identical runs differ in)."""
    data = json.loads(path.read_text())
    data.pop("created", None)
    return data
