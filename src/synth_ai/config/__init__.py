"""The config layer: schemas and rules for RL, SFT, eval and filter configs.

Light by design: pydantic and the standard library only (no fastapi, torch or transformers), so validating a
config is fast and works in a bare install.
"""
