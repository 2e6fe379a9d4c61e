"""Neural-network building blocks: batched Gaussian MLP ensembles whose parameters are stacked
tensors ``[copies, members, ...]`` (so many copies — trajectories × members — train in one
batched step), normalisers, and per-example gradient helpers."""

from privrl.nn.ensemble import MOPO_WEIGHT_DECAYS, GaussianEnsemble, default_weight_decays
from privrl.nn.normalizer import Normalizer

__all__ = ["MOPO_WEIGHT_DECAYS", "GaussianEnsemble", "Normalizer", "default_weight_decays"]
