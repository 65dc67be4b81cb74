#!/usr/bin/env bash
# The GPU kit in one command: install the carried wheels, then measure (bench/gpu/README.md).
#
#   bench/gpu/run.sh --out DIR            # on a GPU machine: about 8 minutes, the wheels' install included
#   bench/gpu/run.sh --smoke --out DIR    # the same code path on the CPU with tiny shapes (CI runs it)
#
# Wheels: when bench/gpu/wheels/ holds any (bench/gpu/prepare_wheels.sh), they are installed into a private folder
# put first on PYTHONPATH, with pip offline and without dependencies, and the machine's own torch, transformers
# and peft are used. --smoke skips them unless --wheels is given. Interpreter: $PYTHON, else the repository's
# .venv, else python3. Every other argument goes to bench/gpu/gpu_kit.py.
set -euo pipefail
export KIT_STARTED="${KIT_STARTED:-$(date +%s.%N)}"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
if [ -n "${PYTHON:-}" ]; then
  py="$PYTHON"
elif [ -x .venv/bin/python ]; then
  py=.venv/bin/python
else
  py=python3
fi
smoke=0
wheels=0
args=()
for arg in "$@"; do
  case "$arg" in
    --smoke) smoke=1; args+=("$arg") ;;
    --wheels) wheels=1 ;;
    *) args+=("$arg") ;;
  esac
done
if [ "$smoke" = 0 ]; then
  wheels=1
fi
shopt -s nullglob
found=(bench/gpu/wheels/*.whl)
if [ "$wheels" = 1 ] && [ "${#found[@]}" -gt 0 ]; then
  site="${KIT_SITE:-${TMPDIR:-/tmp}/synth-gpu-kit-site}"
  if "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
      "${found[@]}" >"$site.log" 2>&1; then
    echo "run.sh: ${#found[@]} carried wheels installed into $site" >&2
  else  # the kit still runs: what needs a missing package becomes an error row
    cat "$site.log" >&2
    echo "run.sh: installing the carried wheels failed; going on with what is installed" >&2
  fi
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
elif [ "$wheels" = 1 ]; then
  echo "run.sh: no wheels in bench/gpu/wheels (run bench/gpu/prepare_wheels.sh); using what is installed" >&2
fi
export PYTHONPATH="$repo/src${PYTHONPATH:+:$PYTHONPATH}"
exec "$py" bench/gpu/gpu_kit.py "${args[@]}"
