"""Expert-level DP offline RL (Sharma et al.): the consensus filter (PrefixQuery, DataRelease),
expert-level DP-SGD and Selective DP-SGD. The privacy unit is the expert: neighbouring datasets
add or remove one expert with all of their trajectories."""
