"""Systems on the run layer: one typed config and one `System` per command (see privrl.runs)."""
