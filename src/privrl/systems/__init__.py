"""The systems privrl ships, as run-layer entries (config + plan/load/run); see privrl.runs."""
