"""How long library work reports how far it is: a `Progress` callback.

`progress(label, done, total)` is called as work advances (`label` names the task, e.g.
"collecting CartPole-v1"; `done` of `total` units are finished). Library code only calls it;
the application layer draws bars from it (`privrl.runs.progress.progress_bars`).
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str, int, int], None]
"""`progress(label, done, total)`: how long work reports how far it is."""


def no_progress(label: str, done: int, total: int) -> None:
    """The default `Progress`: report nothing."""
