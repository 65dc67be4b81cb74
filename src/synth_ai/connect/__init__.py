"""Reaching a backend from a command: the embedded backend found or started (and stopped again when the command
started it for nothing), the API opened on it, and a task app's key shared with it.

A flow: the client below speaks HTTP to a backend it is given and never imports the backend; what starts one lives
here, used by `train`, `eval`, the demo and `synth-ai backend start`.
"""
