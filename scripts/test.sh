#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite twice: the optimised build (warnings are
# errors) and an AddressSanitizer + UndefinedBehaviorSanitizer build. Each build carries every
# kernel path (AVX-512, AVX2, portable); the tests that run kernels run once per path this CPU
# has (NAME@PATH; a path it lacks is skipped with what it lacks), and the release build's
# objects are checked to hold no instruction beyond their path's, and run on emulated CPUs
# without AVX-512 and without AVX (tests/isa/). Test data comes from ../shared or
# $SPECDEC_SHARED; tests needing a missing file skip with a message (fail under
# SPECDEC_REQUIRE_SHARED=1). SPECDEC_SKIP_SANITIZE=1 skips the second build.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== release build: tests"
scripts/setup.sh build -DSPECDEC_WERROR=ON
(cd build && ctest --output-on-failure -j2 --timeout 900)

if [ "${SPECDEC_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== ASan + UBSan build: tests"
  scripts/setup.sh build-asan -DSPECDEC_WERROR=ON -DSPECDEC_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
  # the emulated CPUs run the release build's programs; under ASan they would only be slower
  (cd build-asan && ctest --output-on-failure -j2 --timeout 1800 -E '^isa_qemu_cpus$')
fi
