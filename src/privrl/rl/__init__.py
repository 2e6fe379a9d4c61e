"""Reusable, non-private learners and post-processing shared by the private systems."""
