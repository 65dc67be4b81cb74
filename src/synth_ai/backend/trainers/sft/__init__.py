"""Supervised fine-tuning (`run_sft`, called by the job worker for SFT jobs).

Modules: `sft_settings` (the job payload read into Settings), `data` (records rendered, tokenized, masked and
batched), `token_loss` (the loss over labelled tokens), `fsdp` (sharding under torchrun), and the stages of a run:
`runtime` (device, dtype, threads), `inputs` (tokenizer and data read), `plan` (the steps), `model_setup` (model,
loss, optimizer, schedule), `run_checkpoints` (resume and save), `steps` (the loop), `validation`, `final_model`
(save, register, result), `run_state` (what the stages share) and `trainer` (`run_sft`, the stages in order).
"""

from synth_ai.backend.trainers.sft.trainer import run_sft

__all__ = ["run_sft"]
