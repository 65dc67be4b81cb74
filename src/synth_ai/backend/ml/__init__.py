"""Machine-learning helpers shared by the embedded backend's trainers and inference engine.

Everything under this package imports torch/transformers lazily (inside functions), except modules that only job
workers and the inference engine import. The CLI never imports this package at `--help` time.
"""
