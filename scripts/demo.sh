#!/usr/bin/env bash
# The main job on this machine, with no account and nothing running beforehand: validate every bundled example
# config and show the exact requests `train` would send for an SFT and an RL job to the embedded backend.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
bin=.venv/bin/synth-ai
echo "== synth-ai config validate examples/configs/*.toml"
"$bin" config validate --allow-experimental examples/configs/*.toml
echo
echo "== synth-ai train --dry-run (SFT, Qwen3-VL LoRA)"
"$bin" train --dry-run --config examples/configs/sft_lora_qwen3_vl_2b.toml
echo
echo "== synth-ai train --dry-run (RL, Qwen3-4B on the math task app)"
"$bin" train --dry-run --config examples/configs/rl_text_qwen3_4b.toml
