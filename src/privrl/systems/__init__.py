"""The systems privrl ships on the run layer: one typed config and one `System` per command."""
