"""privrl: differentially private reinforcement learning."""

__version__ = "0.1.0"
