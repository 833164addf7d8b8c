#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite twice: the optimised build (warnings are
# errors) and an AddressSanitizer + UndefinedBehaviorSanitizer build. Then the tests of the
# kernels and the forward pass on the instruction-set paths the native build does not take:
# the AVX2 kernels (a -march=x86-64-v3 build, where the CPU also has AVX-512) and the portable
# scalar code; a CPU without AVX-512 compiles the AVX-512 kernels without running them. Test
# data comes from ../shared or $SPECDEC_SHARED; tests needing a missing file skip with a
# message. SPECDEC_SKIP_SANITIZE=1 skips the second pass, SPECDEC_SKIP_PATHS=1 the others.
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

# A native build runs one set of kernels (AVX-512, else AVX2, else portable); each set keeps the
# invariants on its own, so the others are built for this CPU too and run the tests that reach
# every kernel: matmuls per type and batch, attention, contexts, the forward pass, speculation.
PATH_TESTS=(test_kernels test_quant test_context test_model test_spec test_verify test_draft test_kv)
path_pass() { # NAME BUILD_DIR CMAKE_ARGS...
  local name=$1 dir=$2
  shift 2
  echo "== $name build: kernel and forward-pass tests"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DSPECDEC_WERROR=ON -DSPECDEC_NATIVE=OFF "$@" >/dev/null
  cmake --build "$dir" -j"$(nproc)" --target "${PATH_TESTS[@]}" 2>&1 | { grep -vE '^\[ *[0-9]+%\]|^-- ' || true; } ||
    { echo "test: the $name build failed" >&2; exit 1; }
  local re
  re="^($(IFS='|'; echo "${PATH_TESTS[*]}"))\$"
  (cd "$dir" && ctest --output-on-failure -j2 --timeout 900 -R "$re")
}
if [ "${SPECDEC_SKIP_PATHS:-0}" != 1 ]; then
  if grep -qw avx512f /proc/cpuinfo && grep -qw avx2 /proc/cpuinfo && grep -qw f16c /proc/cpuinfo; then
    path_pass "AVX2 (x86-64-v3)" build-avx2 "-DCMAKE_C_FLAGS=-march=x86-64-v3"
  else # a CPU without AVX-512 cannot run those kernels, but they must still compile
    echo "== AVX-512 build (icelake-server): compile only, this CPU cannot run it"
    cmake -S . -B build-avx512 -DCMAKE_BUILD_TYPE=Release -DSPECDEC_WERROR=ON -DSPECDEC_NATIVE=OFF \
      "-DCMAKE_C_FLAGS=-march=icelake-server" >/dev/null
    cmake --build build-avx512 -j"$(nproc)" --target specdec specdec_tools 2>&1 | { grep -vE '^\[ *[0-9]+%\]|^-- ' || true; } ||
      { echo "test: the AVX-512 build failed" >&2; exit 1; }
  fi
  path_pass "portable" build-portable
fi
