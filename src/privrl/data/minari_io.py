"""Minari interop: export a dataset as a *local* Minari dataset and import local ones.

Nothing here downloads: import reads from ``$MINARI_DATASETS_PATH`` (Minari's own setting) or
from an explicit directory. Minari is an optional extra and is imported lazily.

Minari episodes store ``observations`` (T + 1, final observation included), ``actions``,
``rewards``, ``terminations`` and ``truncations`` (T each), which is exactly privrl's layout.
What Minari has no field for travels as follows, so that an export/import round trip is
lossless:

* the dataset metadata (spaces, env id, discount, horizon, extra) as JSON in the Minari
  dataset metadata key ``privrl_metadata``;
* behaviour probabilities as the episode info ``behaviour_prob`` with T + 1 entries, aligned
  with observations (entry t belongs to the action taken at observation t; the entry for the
  final observation, which has no action, is NaN);
* unit ids as the episode metadata attribute ``unit_id``.

A dataset recorded elsewhere can name its privacy unit at import (``unit_column``): an episode
metadata attribute, or a per-step ``infos`` key that is constant within each episode (Minari's
DataCollector stores infos with T + 1 entries). Labels that are not integers are mapped to
0..k-1 in sorted order.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from privrl.data.dataset import DatasetError, DatasetMetadata, TrajectoryDataset

__all__ = ["export_minari", "import_minari"]

_META_KEY = "privrl_metadata"
_PROB_KEY = "behaviour_prob"


def _minari() -> Any:
    try:
        import minari
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise DatasetError(
            "Minari support needs the optional 'minari' extra: pip install 'privrl[minari]'"
        ) from exc
    return minari


def export_minari(
    ds: TrajectoryDataset,
    dataset_id: str,
    *,
    author: str = "privrl",
    description: str | None = None,
    algorithm_name: str = "privrl collect",
) -> Path:
    """Create the local Minari dataset ``dataset_id`` (e.g. ``"privrl/cartpole/random-v0"``).

    Refuses to overwrite an existing one (Minari's rule). Spaces must be set in the metadata.
    Returns the dataset's directory.
    """
    minari = _minari()
    from minari.data_collector.episode_buffer import EpisodeBuffer

    md = ds.metadata
    if md.observation_space is None or md.action_space is None:
        raise DatasetError("export_minari: metadata must define observation and action spaces")
    episodes = []
    for ep in ds.iter_episodes():
        infos = None
        if ep.behaviour_probs is not None:
            infos = {_PROB_KEY: np.append(ep.behaviour_probs, np.nan)}
        episodes.append(
            EpisodeBuffer(
                observations=np.asarray(ep.observations),
                actions=np.asarray(ep.actions),
                rewards=np.asarray(ep.rewards),
                terminations=np.asarray(ep.terminated),
                truncations=np.asarray(ep.truncated),
                infos=infos,
            )
        )
    with warnings.catch_warnings():
        # Minari warns about every unset optional field (code permalink, eval env, ...).
        warnings.simplefilter("ignore", UserWarning)
        mds = minari.create_dataset_from_buffers(
            dataset_id=dataset_id,
            buffer=episodes,
            observation_space=md.observation_space,
            action_space=md.action_space,
            algorithm_name=algorithm_name,
            author=author,
            author_email="",
            code_permalink="",
            description=description or f"exported by privrl ({ds.n_episodes} episodes)",
            data_format="hdf5",
        )
    storage = mds.storage
    storage.update_metadata({_META_KEY: json.dumps(md.to_dict(), allow_nan=False)})
    if ds.unit_ids is not None:
        storage.update_episode_metadata([{"unit_id": int(u)} for u in ds.unit_ids])
    return Path(storage.data_path).parent


def _open(minari: Any, source: str | os.PathLike[str]) -> Any:
    path = Path(source)
    if path.is_dir():
        data = path / "data" if (path / "data").is_dir() else path
        return minari.MinariDataset(str(data))
    try:
        return minari.load_dataset(str(source), download=False)
    except FileNotFoundError as exc:
        raise DatasetError(
            f"no local Minari dataset {str(source)!r} (looked in $MINARI_DATASETS_PATH or "
            "~/.minari/datasets; privrl never downloads)"
        ) from exc


def import_minari(
    source: str | os.PathLike[str],
    *,
    metadata: DatasetMetadata | None = None,
    unit: str | None = None,
    validate: bool = True,
) -> TrajectoryDataset:
    """Load a local Minari dataset (by id or directory) into a ``TrajectoryDataset``.

    ``unit``: None keeps the unit ids privrl exported (if any); ``"episode"`` makes every
    episode its own unit; ``"column=KEY"`` names the episode metadata attribute or the per-step
    info key holding each episode's unit (its absence is an error).

    Metadata written by :func:`export_minari` is restored; for other datasets spaces come from
    Minari and the env id from its env spec. Dict/Tuple/Text spaces are not supported.
    """
    minari = _minari()
    mds = _open(minari, source)
    storage = mds.storage
    raw_meta = storage.metadata
    n_ep = int(mds.total_episodes)
    if n_ep == 0:
        raise DatasetError(f"Minari dataset {str(source)!r} has no episodes")
    eps = list(storage.get_episodes(range(n_ep)))
    for i, ep in enumerate(eps):
        for key in ("observations", "actions"):
            if not isinstance(ep[key], np.ndarray):
                raise DatasetError(
                    f"episode {i}, step 0, field '{key}': Minari stores a "
                    f"{type(ep[key]).__name__}; privrl supports flat array spaces only"
                )
    lengths = np.array([len(ep["rewards"]) for ep in eps], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)

    has_probs = all(ep.get("infos") and _PROB_KEY in ep["infos"] for ep in eps)
    probs = None
    if has_probs:
        probs = np.concatenate([np.asarray(ep["infos"][_PROB_KEY])[:-1] for ep in eps])
    ep_meta = list(storage.get_episode_metadata(range(n_ep)))
    unit_ids = None
    if unit is None and all("unit_id" in m for m in ep_meta):
        unit_ids = np.array([int(m["unit_id"]) for m in ep_meta], dtype=np.int64)
    elif unit is not None and unit != "episode":
        kind, _, key = unit.partition("=")
        if kind != "column" or not key:
            raise DatasetError(f"unit {unit!r}: use 'episode' or 'column=KEY'")
        unit_ids = _unit_ids(source, key, eps, ep_meta)

    if metadata is None:
        if _META_KEY in raw_meta:
            metadata = DatasetMetadata.from_dict(json.loads(raw_meta[_META_KEY]))
        else:
            spec = mds.env_spec
            metadata = DatasetMetadata(
                observation_space=mds.observation_space,
                action_space=mds.action_space,
                env_id=None if spec is None else spec.id,
                extra={"source": {"format": "minari", "dataset_id": str(raw_meta["dataset_id"])}},
            )
    if unit is not None:
        facts = (
            {"unit": "episode"} if unit == "episode" else {"unit_column": unit.partition("=")[2]}
        )
        extra = {k: v for k, v in metadata.extra.items() if k not in ("unit", "unit_column")}
        metadata = metadata.replace(extra={**extra, **facts})
    return TrajectoryDataset(
        observations=np.concatenate([ep["observations"] for ep in eps], axis=0),
        actions=np.concatenate([ep["actions"] for ep in eps], axis=0),
        rewards=np.concatenate([ep["rewards"] for ep in eps]),
        terminated=np.concatenate([ep["terminations"] for ep in eps]).astype(np.bool_),
        # both flags (Gymnasium allows it): terminated, as for tables (privrl.data.io)
        truncated=np.concatenate(
            [
                np.asarray(ep["truncations"], bool) & ~np.asarray(ep["terminations"], bool)
                for ep in eps
            ]
        ),
        episode_offsets=offsets,
        behaviour_probs=probs,
        unit_ids=unit_ids,
        metadata=metadata,
        validate=validate,
    )


def _unit_ids(
    source: str | os.PathLike[str], key: str, eps: list[Any], ep_meta: list[Any]
) -> np.ndarray:
    """Each episode's unit from the episode metadata attribute or the per-step info ``key``."""
    if all(key in m for m in ep_meta):
        labels = [np.asarray(m[key]).reshape(-1)[0].item() for m in ep_meta]
    elif all(ep.get("infos") and key in ep["infos"] for ep in eps):
        labels = []
        for i, ep in enumerate(eps):
            values = np.asarray(ep["infos"][key]).reshape(-1)
            if values.size and np.any(values != values[0]):
                raise DatasetError(
                    f"episode {i}, step 0, field 'unit': the info {key!r} changes inside the "
                    "episode; an episode belongs to one unit",
                    episode=i,
                    step=0,
                    field="unit",
                )
            labels.append(values[0].item())
    else:
        raise DatasetError(
            f"Minari dataset {str(source)!r} has no episode metadata attribute or info key "
            f"{key!r} for every episode; give the unit as column=KEY (the key that holds it) "
            "or as episode (each episode its own unit)"
        )
    arr = np.asarray(labels)
    if np.issubdtype(arr.dtype, np.integer):
        return arr.astype(np.int64)
    _, codes = np.unique(arr.astype(str), return_inverse=True)
    return codes.reshape(-1).astype(np.int64)
