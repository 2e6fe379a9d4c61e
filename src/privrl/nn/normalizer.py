"""Feature normaliser ``(x − mean) / std`` for network inputs and targets.

**Fit only on data that may be used**: the public split, or known bounds of the environment
(``from_bounds``). A normaliser fitted on private data leaks it (its mean and std are exact
statistics of the data) and bypasses the privacy mechanism; privrl's private pipelines
therefore take a normaliser built from declared-public information and record its ``source``
in the privacy report.

Statistics are kept in float64 numpy arrays; ``transform``/``inverse`` accept numpy arrays or
torch tensors and return the same kind and dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Normalizer"]


def _is_torch(x: Any) -> bool:
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


class Normalizer:
    """Per-dimension standardisation with an epsilon floor on the scale.

    ``eps`` floors the scale: a dimension whose std is below ``eps`` is treated as constant and
    gets std 1 (MOPO's ``StandardScaler`` rule), so a later deviation in that dimension is not
    amplified by ``1/eps``. ``source`` says where the statistics came from (for reports).
    """

    def __init__(
        self,
        mean: Any,
        std: Any,
        *,
        eps: float = 1e-6,
        source: str = "given",
    ) -> None:
        m = np.asarray(mean, dtype=np.float64).reshape(-1)
        s = np.asarray(std, dtype=np.float64).reshape(-1)
        if m.shape != s.shape:
            raise ValueError(f"mean has shape {m.shape} but std has shape {s.shape}")
        if not (np.all(np.isfinite(m)) and np.all(np.isfinite(s))) or np.any(s < 0):
            raise ValueError("mean and std must be finite and std non-negative")
        self.eps = float(eps)
        self.mean = m
        self.std = np.where(s < self.eps, 1.0, s)
        self.source = str(source)

    @property
    def dim(self) -> int:
        return int(self.mean.shape[0])

    @classmethod
    def identity(cls, dim: int) -> Normalizer:
        """Mean 0, std 1: no normalisation."""
        return cls(np.zeros(dim), np.ones(dim), source="identity")

    @classmethod
    def fit(cls, x: Any, *, eps: float = 1e-6, source: str = "fit") -> Normalizer:
        """Mean and (population) std of the rows of ``x`` ``[n, d]``.

        Call only on data that may be used (a public split; see the module docstring) and name
        it in ``source``.
        """
        a = x.detach().cpu().numpy() if _is_torch(x) else np.asarray(x)
        if a.shape[0] == 0:
            raise ValueError("cannot fit a normaliser on zero rows")
        a = a.astype(np.float64).reshape(a.shape[0], -1)
        return cls(a.mean(axis=0), a.std(axis=0), eps=eps, source=source)

    @classmethod
    def from_bounds(cls, low: Any, high: Any, *, source: str = "bounds") -> Normalizer:
        """Map the box ``[low, high]`` onto ``[−1, 1]``: mean = midpoint, std = half-width.

        Uses public knowledge only (e.g. the environment's observation and action spaces).
        Every bound must be finite.
        """
        lo = np.asarray(low, dtype=np.float64).reshape(-1)
        hi = np.asarray(high, dtype=np.float64).reshape(-1)
        if lo.shape != hi.shape:
            raise ValueError(f"low has shape {lo.shape} but high has shape {hi.shape}")
        bad = np.flatnonzero(~(np.isfinite(lo) & np.isfinite(hi)) | (hi < lo))
        if bad.size:
            raise ValueError(
                f"from_bounds needs finite bounds with low <= high; dimensions {bad.tolist()} are "
                "not (fit on a public split instead, or pass bounds for them)"
            )
        return cls((lo + hi) / 2.0, (hi - lo) / 2.0, source=source)

    def _stats(self, x: Any) -> tuple[Any, Any]:
        if x.shape[-1] != self.dim:
            raise ValueError(f"normaliser has dimension {self.dim}, input has shape {x.shape}")
        if _is_torch(x):
            import torch

            dt = x.dtype if x.is_floating_point() else torch.float32
            return (
                torch.as_tensor(self.mean, dtype=dt, device=x.device),
                torch.as_tensor(self.std, dtype=dt, device=x.device),
            )
        dt = x.dtype if np.issubdtype(x.dtype, np.floating) else np.float64
        return self.mean.astype(dt), self.std.astype(dt)

    def transform(self, x: Any) -> Any:
        """``(x − mean) / std`` over the last dimension."""
        x = x if _is_torch(x) else np.asarray(x)
        m, s = self._stats(x)
        return (x - m) / s

    def inverse(self, y: Any) -> Any:
        """``y · std + mean`` (undo :meth:`transform`)."""
        y = y if _is_torch(y) else np.asarray(y)
        m, s = self._stats(y)
        return y * s + m

    def state_dict(self) -> dict[str, Any]:
        return {
            "mean": self.mean.tolist(),
            "std": self.std.tolist(),
            "eps": self.eps,
            "source": self.source,
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Normalizer:
        return cls(state["mean"], state["std"], eps=state["eps"], source=state["source"])

    def __repr__(self) -> str:
        return f"Normalizer(dim={self.dim}, source={self.source!r})"
