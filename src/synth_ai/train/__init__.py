"""Training flows: validate, plan, submit and follow SFT and RL jobs."""
