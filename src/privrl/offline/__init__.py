"""Offline RL with differential privacy in tabular and linear MDPs (Qiao & Wang)."""
