"""Supervised fine-tuning (`run_sft`, called by the job worker for SFT jobs).

Modules: `sft_settings` (the job payload read into Settings), `data` (records rendered, tokenized, masked and
batched), `token_loss` (the loss over labelled tokens), `fsdp` (sharding under torchrun), `trainer` (the run).
"""

from synth_ai.backend.trainers.sft.trainer import run_sft

__all__ = ["run_sft"]
