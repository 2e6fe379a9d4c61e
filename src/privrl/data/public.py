"""Episodes declared public: a public split chosen by declaration, never by content.

A private run may use some episodes in the clear (a normaliser, early stopping, elite selection,
rollout start states) only when the data holder has declared them public. Two declarations
exist, both public by construction because neither is computed from the private episodes:

* a separate dataset file the holder declares public (``--public-data`` of the commands that
  take it; :func:`check_public_compatible` checks it describes the same task), or
* episodes of the private file listed in its metadata, decided when the file was built:
  ``extra["public_episodes"]`` (0-based episode positions in the file) or
  ``extra["public_unit_ids"]`` (unit ids, every episode of a listed unit is public). A recipe
  that declares them draws them from its own public seed, not from the episodes' content.

The guarantee of a run then covers every other episode (unit) of the file; the declared
public episodes are neither covered nor protected, and the report says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from privrl.data.dataset import DatasetError, DatasetMetadata, TrajectoryDataset
from privrl.data.spaces import space_to_dict, spaces_equal

__all__ = [
    "PUBLIC_EPISODES",
    "PUBLIC_UNIT_IDS",
    "PublicDeclaration",
    "check_public_compatible",
    "declare_public_episodes",
    "declared_public",
    "episodes_sha256",
    "not_public_because",
    "rewrite_metadata",
    "split_declared",
    "write_declaration",
]

PUBLIC_EPISODES = "public_episodes"
PUBLIC_UNIT_IDS = "public_unit_ids"


@dataclass(frozen=True)
class PublicDeclaration:
    """The episodes a file's metadata declares public: ``key`` names the list, ``ids`` holds
    episode positions (``public_episodes``) or unit ids (``public_unit_ids``)."""

    key: str
    ids: tuple[int, ...]

    def describe(self) -> str:
        what = "episodes" if self.key == PUBLIC_EPISODES else "units"
        return f"{len(self.ids)} {what} declared public in the dataset's metadata ({self.key})"


def _int_list(value: Any, key: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise DatasetError(f"metadata: extra[{key!r}] must be a list of integers")
    ids = tuple(int(v) for v in value)
    if len(set(ids)) != len(ids):
        raise DatasetError(f"metadata: extra[{key!r}] lists an id twice")
    return ids


def declared_public(metadata: DatasetMetadata, n_episodes: int) -> PublicDeclaration | None:
    """The public declaration of a file's metadata (None: none, or an empty list), checked
    against its header's episode count. Reads the metadata only, never an episode."""
    extra = metadata.extra
    given = [k for k in (PUBLIC_EPISODES, PUBLIC_UNIT_IDS) if extra.get(k) is not None]
    if not given:
        return None
    if len(given) == 2:
        raise DatasetError(
            f"metadata: declare public episodes by {PUBLIC_EPISODES} or by {PUBLIC_UNIT_IDS}, "
            "not both"
        )
    key = given[0]
    ids = _int_list(extra[key], key)
    if key == PUBLIC_EPISODES and any(not 0 <= i < n_episodes for i in ids):
        raise DatasetError(f"metadata: extra[{key!r}] lists an episode outside 0..{n_episodes - 1}")
    return PublicDeclaration(key, ids) if ids else None


def split_declared(
    dataset: TrajectoryDataset, declaration: PublicDeclaration | None
) -> tuple[TrajectoryDataset, TrajectoryDataset]:
    """``(private, public)`` episodes of ``dataset`` by ``declaration`` (everything private
    without one). Both parts drop the declaration from their metadata (its positions refer to
    the whole file)."""
    if declaration is None:
        is_public = np.zeros(dataset.n_episodes, dtype=bool)
    elif declaration.key == PUBLIC_EPISODES:
        is_public = np.zeros(dataset.n_episodes, dtype=bool)
        is_public[list(declaration.ids)] = True
    else:
        if dataset.unit_ids is None:
            raise DatasetError(
                f"metadata: extra[{PUBLIC_UNIT_IDS!r}] needs unit ids; the file has none "
                f"(declare episodes with {PUBLIC_EPISODES})"
            )
        is_public = np.isin(dataset.episode_unit_ids, np.asarray(declaration.ids, np.int64))
    keys = (PUBLIC_EPISODES, PUBLIC_UNIT_IDS)
    extra = {k: v for k, v in dataset.metadata.extra.items() if k not in keys}
    meta = dataset.metadata.replace(extra=extra)
    private = dataset.subset(np.flatnonzero(~is_public)).with_metadata(meta, validate=False)
    public = dataset.subset(np.flatnonzero(is_public)).with_metadata(meta, validate=False)
    return private, public


def check_public_compatible(
    public: DatasetMetadata, private: DatasetMetadata, *, where: str
) -> None:
    """Refuse a public dataset whose declared spaces or env id differ from the private one's
    (``where`` names the public file in the message)."""
    for name in ("observation_space", "action_space"):
        a, b = getattr(public, name), getattr(private, name)
        if a is None or b is None or not spaces_equal(a, b):
            shown = None if a is None else space_to_dict(a)
            raise DatasetError(
                f"{where}: its {name.replace('_', ' ')} ({shown}) is not the private dataset's; "
                "public data must describe the same task with the same spaces"
            )
    if (public.env_id or None) != (private.env_id or None):
        raise DatasetError(
            f"{where}: env id {public.env_id!r} is not the private dataset's "
            f"{private.env_id!r}; public data must come from the same task"
        )


def not_public_because(public: Any, private: Any | None) -> str | None:
    """Why the file ``public`` cannot be declared public beside the private file ``private``
    (None: it can): it has a budget ledger (so it is someone's private data), or it is the
    private file, or a copy of its episodes. Of the private file only the fingerprint its
    header stores is read (never its episodes)."""
    from pathlib import Path

    from privrl.data.io import content_sha256, read_header
    from privrl.privacy.ledger import ledgered

    public = Path(public)
    why = ledgered(public)
    if why is not None:
        return f"{why}, so it is private data"
    if private is None:
        return None
    private = Path(private)
    if public.resolve() == private.resolve():
        return "is the private dataset itself"
    stored = read_header(private).content_sha256
    if stored is not None and content_sha256(public) == stored:
        return "holds the same episodes as the private dataset"
    return None


def rewrite_metadata(path: Any, metadata: DatasetMetadata) -> None:
    """Replace the metadata attribute of the privrl HDF5 file ``path`` in place. The episodes,
    and with them the content fingerprint a ledger is bound to, are untouched."""
    import h5py

    with h5py.File(path, "r+") as f:
        f.attrs["metadata"] = json.dumps(metadata.to_dict(), allow_nan=False)


def write_declaration(
    path: Any, ids: list[int], *, by_unit: bool = False, out: Any = None
) -> DatasetMetadata:
    """Declare the episodes ``ids`` (positions; unit ids with ``by_unit``) of the file ``path``
    public, in its metadata: in place, or in a copy at ``out``. Refused for a file with a
    budget ledger (its episodes were spent on as private; declare before creating a ledger)
    and for a file that already declares public episodes. Returns the new metadata."""
    import shutil
    from pathlib import Path

    from privrl.data.io import read_header
    from privrl.privacy.ledger import ledgered

    path = Path(path)
    header = read_header(path)
    why = ledgered(path)
    if why is not None:
        raise DatasetError(
            f"{path}: {why}; its episodes were budgeted as private, so none can be declared "
            "public now (declare public episodes before creating a ledger)"
        )
    given = [k for k in (PUBLIC_EPISODES, PUBLIC_UNIT_IDS) if header.metadata.extra.get(k)]
    if given:
        raise DatasetError(f"{path}: already declares public episodes ({given[0]})")
    key = PUBLIC_UNIT_IDS if by_unit else PUBLIC_EPISODES
    meta = header.metadata.with_extra(**{key: sorted(int(i) for i in ids)})
    if declared_public(meta, header.n_episodes) is None:
        raise DatasetError("declare at least one episode or unit public")
    if by_unit:
        import h5py

        with h5py.File(path, "r") as f:
            if "unit_ids" not in f:
                raise DatasetError(f"{path} stores no unit ids; declare episodes instead")
    target = path
    if out is not None:
        target = Path(out)
        shutil.copyfile(path, target)
    rewrite_metadata(target, meta)
    return meta


def episodes_sha256(dataset: TrajectoryDataset) -> str:
    """The content fingerprint of ``dataset``'s episodes (the one a file of them carries):
    the identity a run publishes for its public episodes, computed from them alone."""
    from privrl.privacy.ledger import CONTENT_FIELDS, content_fingerprint

    return content_fingerprint({name: getattr(dataset, name, None) for name in CONTENT_FIELDS})


def declare_public_episodes(n_episodes: int, fraction: float, seed: Any) -> list[int]:
    """``round(fraction · n)`` episode positions (at least one when ``fraction > 0`` and
    ``n >= 2``) drawn from ``seed`` alone: what a dataset builder with a public seed declares
    public at build time (:data:`PUBLIC_EPISODES`). Sorted."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"public fraction must be in [0, 1), got {fraction}")
    k = round(fraction * n_episodes)
    if fraction > 0 and n_episodes >= 2:
        k = min(max(k, 1), n_episodes - 1)
    rng = np.random.default_rng(seed)
    return sorted(int(i) for i in rng.permutation(n_episodes)[:k])
