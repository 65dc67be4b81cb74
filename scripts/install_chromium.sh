#!/usr/bin/env bash
# Install Debian's chromium for the dashboard's browser test (Playwright drives it; its own browser downloads are
# not used). A no-op when a chromium is already on PATH. Without apt-get it says so and exits 0: the test then
# skips with that reason, except where SYNTH_REQUIRE_BROWSER=1 (CI), where it fails.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_chromium: no apt-get here; install a chromium yourself (or set SYNTH_CHROMIUM) to run the" \
       "dashboard browser test" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install_chromium: not root and no sudo; cannot apt-get install chromium" >&2; exit 0
  fi
fi
# The downloaded .deb files are kept in the set-up cache outside the clone (scripts/setup_cache.py), so a machine
# that lost its chromium reinstalls it without downloading it again (apt's own archive is often cleaned).
archives="${SYNTH_CACHE_DIR:-$HOME/.cache/synth-ai}/apt-archives"
mkdir -p "$archives/partial"
apt_install() { $SUDO apt-get -o Dir::Cache::Archives="$archives" install -y --no-install-recommends chromium; }
echo "install_chromium: apt-get install chromium (for the dashboard browser test; about a minute the first time)" >&2
apt_install >/dev/null 2>&1 || { $SUDO apt-get update >/dev/null && apt_install >/dev/null; }
command -v chromium >/dev/null 2>&1 || { echo "install_chromium: chromium did not install" >&2; exit 1; }
