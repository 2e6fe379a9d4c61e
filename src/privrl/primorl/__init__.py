"""PRIMORL (trajectory-level DP model-based offline RL) and its non-private baseline, MOPO:
ensemble dynamics models, pessimistic model MDPs and SAC on model rollouts."""
