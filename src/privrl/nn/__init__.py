"""Neural-network building blocks: batched Gaussian MLP ensembles whose parameters are stacked
tensors ``[copies, members, ...]`` (so many copies — trajectories × members — train in one
batched step), normalisers, and per-example gradient helpers."""
