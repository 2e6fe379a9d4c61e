"""Where privacy noise comes from: a secure generator that no published file can recompute.

A differentially private release is only as private as its noise is secret. If the noise is a
function of a seed that the run publishes (config.json carries `--seed`), a reader subtracts it
and recovers the exact statistic. So every mechanism in `privrl.privacy` draws its noise, and
every secret sampling step (Poisson subsampling, shuffles, randomized response) its coins, from
a `NoiseGenerator` that only a `NoiseSource` issues:

- `NoiseSource.secure()` (the default everywhere): each generator is a numpy `Generator` on the
  ChaCha20 stream cipher (20 rounds; `randomgen.ChaCha`) keyed with 256 bits from the operating
  system's entropy (`secrets.token_bytes`). ChaCha20 is a cryptographically secure
  pseudo-random generator: its outputs reveal nothing usable about its key or about its other
  outputs, and the key is never written anywhere except a resumable run's secret checkpoint.
  It plugs into numpy's `Generator`, so the samplers (Gaussian, Laplace, binomial, uniform) are
  numpy's own, vectorised and well tested, driven by secure bits.
- `NoiseSource.insecure(seed)`: deterministic noise from the seed, for simulation studies and
  tests that need bit-for-bit repeatable noise. It is never certified: a report built from it
  says `certified: false`, ε = ∞, and no ledger accepts it.

A mechanism refuses any other generator (`require_noise_generator`), so a caller cannot hand it
`numpy.random.default_rng(seed)` by mistake: the seed of everything else in a run (model
initialisation, environments, public tuning, evaluation) stays separate from the noise.

Torch noise (DP-SGD, DP-FedAvg) is drawn here in float64 and cast to the tensor's dtype and
device (`torch_normal`); a torch generator is never the source of privacy noise.

Floating point: the continuous samplers draw doubles; like every textbook implementation they
are exposed to the floating-point attacks of Mironov (CCS 2012) on the low-order bits of the
released values. Integer releases avoid this with the exact discrete samplers
(`privrl.privacy.discrete`, `secure=True`), which use OS entropy directly.
"""

from __future__ import annotations

import secrets
import zlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = [
    "INSECURE_NOTE",
    "NoiseGenerator",
    "NoiseSource",
    "noise_generator",
    "require_noise_generator",
    "torch_normal",
]

INSECURE_NOTE = (
    "NOT CERTIFIED: the noise was drawn from a generator seeded by a published seed "
    "(insecure reproducible noise, for simulations and tests); a reader of the seed can "
    "recompute and remove it, so the run carries no privacy guarantee (ε = ∞)"
)
_ROUNDS = 20  # ChaCha20: the standard, cryptographic number of rounds
_INSECURE_TAG = 0x6E6F697365  # "noise": keeps insecure streams apart from the run's own seeds


InsecureSeed = int | Sequence[int] | np.random.SeedSequence | np.random.Generator


def _seed_sequence(seed: Any) -> np.random.SeedSequence:
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if isinstance(seed, np.random.Generator):  # advanced: each call gives new streams
        return np.random.SeedSequence([int(v) for v in seed.integers(0, 2**63, size=4)])
    ints = [seed] if isinstance(seed, int | np.integer) else list(seed)
    if not ints or any(
        isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 0 for v in ints
    ):
        raise ValueError(f"an insecure noise seed must be integers >= 0, not {seed!r}")
    return np.random.SeedSequence([int(v) for v in ints])


class NoiseGenerator(np.random.Generator):
    """A numpy `Generator` issued by a `NoiseSource`: the only kind a mechanism accepts.

    Attributes:
        secure: True when its bits come from ChaCha20 keyed by OS entropy; False for the
            insecure reproducible generator of `NoiseSource.insecure`.
    """

    secure: bool

    def __init__(self, bit_generator: Any, *, secure: bool) -> None:
        super().__init__(bit_generator)
        self.secure = bool(secure)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled into a resumable run's secret checkpoint: keep the class and its flag.
        return (_restore, (self.bit_generator.state, self.secure))

    def __repr__(self) -> str:
        kind = "secure ChaCha20" if self.secure else "INSECURE reproducible"
        return f"NoiseGenerator({kind})"

    def spawn(self, n_children: int) -> list[NoiseGenerator]:  # type: ignore[override]
        """`n_children` independent generators of the same kind: a ChaCha20 one keys each
        child with 256 bits of its own (secret) stream; a seeded one spawns its seed sequence."""
        if type(self.bit_generator).__name__ == "ChaCha":
            import randomgen

            keys = [int.from_bytes(self.bytes(32), "little") for _ in range(int(n_children))]
            return [
                NoiseGenerator(randomgen.ChaCha(key=k, rounds=_ROUNDS), secure=True) for k in keys
            ]
        children = self.bit_generator.spawn(n_children)
        return [NoiseGenerator(b, secure=self.secure) for b in children]

    @property
    def state(self) -> dict[str, Any]:
        """The generator's full state (secret: it determines every later draw)."""
        return {"secure": self.secure, "bit_generator": self.bit_generator.state}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> NoiseGenerator:
        """Rebuild a generator saved with `state` (a resumable run's secret checkpoint)."""
        return _restore(state["bit_generator"], bool(state["secure"]))


def _restore(bit_state: Mapping[str, Any], secure: bool) -> NoiseGenerator:
    kind = str(bit_state.get("bit_generator", ""))
    if kind.endswith("ChaCha"):
        import randomgen

        bits: Any = randomgen.ChaCha(rounds=_ROUNDS)
    elif kind == "PCG64":
        bits = np.random.PCG64()
    else:
        raise ValueError(f"not a privrl noise generator's state (bit generator {kind!r})")
    bits.state = dict(bit_state)
    return NoiseGenerator(bits, secure=secure)


class NoiseSource:
    """Issues the generators that privacy noise and secret sampling are drawn from.

    `NoiseSource.secure()` is what every private run uses unless its caller explicitly opts in
    to `NoiseSource.insecure(seed)`. `generator(stream)` gives an independent generator per
    call; the stream name only matters to an insecure source (it keeps its streams apart and
    repeatable), a secure one keys each generator afresh.
    """

    def __init__(self, *, insecure_seed: InsecureSeed | None = None) -> None:
        self._seed = None if insecure_seed is None else _seed_sequence(insecure_seed)
        self._issued: dict[str, int] = {}

    @classmethod
    def secure(cls) -> NoiseSource:
        """Noise keyed by the operating system's entropy (the default)."""
        return cls()

    @classmethod
    def insecure(cls, seed: InsecureSeed) -> NoiseSource:
        """Deterministic noise from `seed` (an int, ints, a SeedSequence, or a Generator,
        which is advanced): for simulation studies, tests, and computations on public data
        only (e.g. tuning on a public sample); never certified."""
        return cls(insecure_seed=seed)

    @property
    def certified(self) -> bool:
        """Whether the noise it issues is secret (a report may claim a guarantee)."""
        return self._seed is None

    def describe(self) -> str:
        if self.certified:
            return "secure: ChaCha20 (randomgen) keyed by 256 bits of OS entropy per generator"
        return f"INSECURE reproducible noise from seed {self._seed.entropy} (not certified)"

    def generator(self, stream: str = "noise") -> NoiseGenerator:
        """A fresh generator for one mechanism or sampling stream."""
        if not isinstance(stream, str) or not stream:
            raise ValueError("stream must be a non-empty name")
        if self._seed is None:
            import randomgen

            key = int.from_bytes(secrets.token_bytes(32), "little")
            return NoiseGenerator(randomgen.ChaCha(key=key, rounds=_ROUNDS), secure=True)
        # The k-th generator of a stream is repeatable, and distinct from every other one.
        k = self._issued.get(stream, 0)
        self._issued[stream] = k + 1
        base = self._seed
        if stream == "noise" and k == 0:  # numpy's own seeded stream: simulations written
            return NoiseGenerator(np.random.PCG64(base), secure=False)  # on it keep their numbers
        key = (*base.spawn_key, _INSECURE_TAG, zlib.crc32(stream.encode()), k)
        ss = np.random.SeedSequence(base.entropy, spawn_key=key, pool_size=base.pool_size)
        return NoiseGenerator(np.random.PCG64(ss), secure=False)

    def certify(self, report: Any) -> Any:
        """`report` as it stands when this source is secure; uncertified (ε = ∞) otherwise."""
        return report if self.certified else report.uncertified(INSECURE_NOTE)

    def __repr__(self) -> str:
        return f"NoiseSource({self.describe()})"


def require_noise_generator(rng: Any, what: str = "rng") -> NoiseGenerator:
    """`rng` if a `NoiseSource` issued it; otherwise a TypeError that says why."""
    if isinstance(rng, NoiseGenerator):
        return rng
    raise TypeError(
        f"{what} must be a privrl NoiseGenerator (NoiseSource.secure().generator()), got "
        f"{type(rng).__name__}: privacy noise drawn from a caller's generator (e.g. "
        "numpy.random.default_rng(seed)) can be recomputed by anyone who knows the seed"
    )


def noise_generator(rng: Any = None, stream: str = "noise") -> NoiseGenerator:
    """A library entry point's noise: the caller's `NoiseGenerator`, or a fresh secure one
    when it gave none. An int seed or a plain numpy Generator is refused (see
    `require_noise_generator`)."""
    if rng is None:
        return NoiseSource.secure().generator(stream)
    return require_noise_generator(rng)


def torch_normal(
    shape: tuple[int, ...], *, std: float, like: torch.Tensor, rng: NoiseGenerator
) -> torch.Tensor:
    """N(0, std²) noise of `shape`, drawn in float64 from `rng`, cast to `like`'s dtype and
    moved to its device."""
    import torch

    gen = require_noise_generator(rng)
    draw = gen.standard_normal(shape) * float(std)
    return torch.from_numpy(draw).to(dtype=like.dtype, device=like.device)
