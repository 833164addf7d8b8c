#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (ctest). Test data comes from ../shared or
# $SPECDEC_SHARED; tests that need a missing file skip with a message.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build -DSPECDEC_WERROR=ON
cd build
ctest --output-on-failure -j2 --timeout 900
