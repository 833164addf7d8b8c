#!/usr/bin/env bash
# Installs the Debian packages specdec needs (scripts/packages.txt, when missing), then configures
# and builds.
# Usage: scripts/setup.sh [BUILD_DIR] [extra cmake args...]   (default BUILD_DIR: build)
set -euo pipefail
cd "$(dirname "$0")/.."

mapfile -t PKGS < <(sed 's/#.*//' scripts/packages.txt | tr -s ' \t' '\n' | grep .)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "setup: missing packages: ${missing[*]}" >&2
    echo "setup: run as root:  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

BUILD=${1:-build}
shift || true
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null || { echo "setup: cmake could not configure $BUILD" >&2; exit 1; }
# The progress lines are filtered out; the build's own status decides (pipefail), so a file that
# no longer compiles fails the script instead of leaving the last good binaries to be tested.
cmake --build "$BUILD" -j"$(nproc)" 2>&1 | { grep -vE '^\[ *[0-9]+%\]|^-- ' || true; } ||
  { echo "setup: the build of $BUILD failed" >&2; exit 1; }
