"""Every system as a typed config plus plan/load/run on the run layer (`privrl.runs`)."""
