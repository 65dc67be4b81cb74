#!/usr/bin/env bash
# The main job on this machine, with no account and nothing running beforehand: `synth-ai demo` runs the whole
# loop with the tiny local Qwen3 — baseline eval, sampled episodes filtered into SFT data, SFT, RL (GSPO) from the
# SFT model, and an eval after each — then prints the table of held-out scores and stops what it started.
# Extra arguments go to `synth-ai demo` (e.g. --fast, --keep, --json). Data goes to ~/.synth-ai (or $SYNTH_AI_HOME);
# the run folder (configs, data, traces, charts, report.md) to ./demo_runs/.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec .venv/bin/synth-ai demo "$@"
