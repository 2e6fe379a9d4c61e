"""A deterministic time-dependent tabular policy π_h(s): what value iteration on a finite-horizon
tabular MDP returns (APVI, DP-APVI), saved as ``policy.npz`` and reloaded by `privrl eval`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from privrl.arrays import IntArray


class GreedyTableActions:
    """``act``/``action_probs`` of a deterministic time-dependent tabular policy: the class
    provides ``actions [H, S]`` (int64) and ``n_actions``."""

    actions: npt.NDArray[np.int64]
    n_actions: int

    def act(
        self, obs: npt.ArrayLike, rng: np.random.Generator | None = None, *, h: int
    ) -> npt.NDArray[np.int64]:
        """Actions ``π_h(s)`` for a batch of integer states (deterministic: rng unused)."""
        return self.actions[h, np.asarray(obs, dtype=np.int64)]

    def action_probs(self, obs: npt.ArrayLike, *, h: int) -> npt.NDArray[np.float64]:
        """One-hot ``π_h(·|s)`` ``[batch, A]``."""
        a = self.act(obs, h=h)
        return (a[:, None] == np.arange(self.n_actions)).astype(np.float64)


class FiniteHorizonPolicy(GreedyTableActions):
    """A deterministic time-dependent tabular policy π_h(s) ``[H, S]`` over A actions.

    Saved as ``.npz`` with a ``kind`` field, so a run's policy can be reloaded and checked:
    ``FiniteHorizonPolicy.load(run_dir / "policy.npz")``.
    """

    KIND = "privrl.finite_horizon_tabular_policy"
    VERSION = 1

    def __init__(
        self, actions: npt.ArrayLike, n_actions: int, info: dict[str, Any] | None = None
    ) -> None:
        table = np.asarray(actions)
        if table.ndim != 2 or not np.issubdtype(table.dtype, np.integer):
            raise ValueError(
                f"actions must be an integer array [H, S], got {table.dtype} {table.shape}"
            )
        if n_actions < 1 or (table.size and (table.min() < 0 or table.max() >= n_actions)):
            raise ValueError(f"actions must be in [0, {n_actions})")
        self.actions: IntArray = table.astype(np.int64)
        self.actions.flags.writeable = False
        self.n_actions = int(n_actions)
        self.info: dict[str, Any] = dict(info or {})

    @property
    def H(self) -> int:
        return int(self.actions.shape[0])

    @property
    def S(self) -> int:
        return int(self.actions.shape[1])

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        np.savez(
            path,
            kind=np.array(self.KIND),
            version=np.array(self.VERSION),
            actions=self.actions,
            n_actions=np.array(self.n_actions),
            info=np.array(json.dumps(self.info)),
        )
        return path if path.suffix == ".npz" else path.with_name(path.name + ".npz")

    @classmethod
    def load(cls, path: str | Path) -> FiniteHorizonPolicy:
        from privrl.data.files import UnreadableFileError, read_npz

        f = read_npz(path, "policy")
        kind = str(f["kind"]) if "kind" in f else None
        if kind != cls.KIND:
            raise ValueError(f"{path} is not a finite-horizon tabular policy (kind={kind!r})")
        try:
            return cls(f["actions"], int(f["n_actions"]), json.loads(str(f["info"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise UnreadableFileError(f"policy {path}: a damaged policy file ({exc})") from None
