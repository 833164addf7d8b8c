#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite twice: the optimised build (warnings are
# errors) and an AddressSanitizer + UndefinedBehaviorSanitizer build. Test data comes from
# ../shared or $SPECDEC_SHARED; tests needing a missing file skip with a message.
# SPECDEC_SKIP_SANITIZE=1 runs only the first pass.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== release build: tests"
scripts/setup.sh build -DSPECDEC_WERROR=ON
(cd build && ctest --output-on-failure -j2 --timeout 900)

if [ "${SPECDEC_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== ASan + UBSan build: tests"
  scripts/setup.sh build-asan -DSPECDEC_WERROR=ON -DSPECDEC_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
  (cd build-asan && ctest --output-on-failure -j2 --timeout 1800)
fi
