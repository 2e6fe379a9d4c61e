"""The audit reproduction: empirical ε lower bounds of every private system at two budgets, and
their non-private twins (`report`)."""
