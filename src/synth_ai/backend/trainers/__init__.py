"""Trainers run inside job worker processes: they import torch, transformers and peft (the CLI never does)."""
