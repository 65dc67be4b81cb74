"""The whole loop on one machine: `synth-ai demo` (see flow.py)."""
