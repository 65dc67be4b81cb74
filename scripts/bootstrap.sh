#!/usr/bin/env bash
# Create .venv and install synth-ai with everything the demo and the tests need. Idempotent: re-running only
# reinstalls when pyproject.toml changed. torch is pinned in the same pip command so pip takes the CPU build
# (unpinned, the train extra's dependencies pull the CUDA build and gigabytes of packages).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${SYNTH_VENV:-.venv}"
TORCH_SPEC="${SYNTH_TORCH_SPEC:-torch==2.13.0}"
stamp="$VENV/.synth-ai-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $TORCH_SPEC"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$VENV/bin/python" -c "import synth_ai" 2>/dev/null; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
echo "bootstrap: installing synth-ai and its dependencies into $VENV (first run takes a minute or two)" >&2
"$VENV/bin/python" -m pip install --quiet "$TORCH_SPEC" -e ".[train,modal,crafter,dev]" 2>&1 \
  | grep -v -e "^WARNING: Location" -e "is ignored: it is neither a file nor a directory" >&2 || true
"$VENV/bin/python" -c "import synth_ai, torch, transformers, peft, fastapi, uvicorn, crafter, modal" \
  || { echo "bootstrap: installation failed" >&2; exit 1; }
echo "$want" > "$stamp"
