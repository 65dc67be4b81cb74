#!/usr/bin/env bash
# The main job on this machine, with no account and nothing running beforehand: validate the bundled example
# configs, then fine-tune the tiny local Qwen3 model through the embedded backend (started in the background by
# `train`) and list the resulting fine-tuned model. Data goes to ~/.synth-ai (or $SYNTH_AI_HOME).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
bin=.venv/bin/synth-ai
started_here=0
"$bin" backend status >/dev/null 2>&1 || started_here=1
cleanup() { if [ "$started_here" = 1 ]; then "$bin" backend stop >/dev/null 2>&1 || true; fi; }
trap cleanup EXIT

echo "== synth-ai config validate examples/configs/*.toml"
"$bin" config validate --allow-experimental examples/configs/*.toml
echo
echo "== synth-ai train --config examples/configs/sft_tiny_local.toml   (SFT on the embedded backend)"
"$bin" train --config examples/configs/sft_tiny_local.toml --poll-interval 1
echo
echo "== synth-ai models list --family Qwen3   (base models, and the fine-tuned one just made)"
"$bin" models list --family Qwen3 --mode sft
