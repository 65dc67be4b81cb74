"""synth-ai: train LLM agents with SFT and RL (GSPO) on Qwen3 and Qwen3-VL from one command line."""

__version__ = "0.1.0"

# The synth-ai release whose CLI interface and wire contract this package mirrors.
COMPATIBLE_WITH = "0.2.17"
