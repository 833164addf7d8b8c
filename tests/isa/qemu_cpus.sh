#!/usr/bin/env bash
# The one build on CPUs this machine is not: QEMU's user-mode emulation of an AVX2-only Haswell
# and of a Nehalem without AVX (QEMU 7.2 emulates no AVX-512, so a stray AVX-512 instruction is a
# SIGILL here, as on an AVX2-only CPU). On each, specdec --version must name the path the CPU
# has, SPECDEC_ISA=avx512 must be refused with the missing features named, and the kernel and
# forward-pass tests must pass on the path picked by CPUID.
# Usage: qemu_cpus.sh BUILD_DIR                       (needs qemu-user; scripts/setup.sh installs it)
set -u
BUILD=$1
[ "$(uname -m)" = x86_64 ] || { echo "SKIP: the vector paths exist on x86-64 only"; exit 77; }
if ! command -v qemu-x86_64 >/dev/null; then
  [ "${SPECDEC_REQUIRE_SHARED:-0}" = 1 ] && { echo "FAIL: needs qemu-x86_64 (Debian qemu-user)"; exit 1; }
  echo "SKIP: needs qemu-x86_64 (Debian qemu-user) to emulate CPUs without AVX-512"
  exit 77
fi
# specdec re-executes itself to set GOMP_SPINCOUNT, which would leave the emulator: set it here.
export GOMP_SPINCOUNT=1000 OMP_NUM_THREADS=2
fail=0
for spec in Haswell-v1:avx2 Nehalem-v1:portable; do
  cpu=${spec%%:*} want=${spec#*:}
  # OpenBLAS picks its kernels by the CPU's model number, which user-mode QEMU passes through from
  # the host: name its core type, or its sgemm runs AVX-512 on the emulated CPU.
  export OPENBLAS_CORETYPE=${cpu%-v1}
  got=$(qemu-x86_64 -cpu "$cpu" "$BUILD/specdec" --version 2>&1 | sed -n 's/^kernels: \([a-z0-9]*\) .*/\1/p')
  [ "$got" = "$want" ] || { echo "FAIL: $cpu: specdec runs '$got', expected $want"; fail=1; }
  why=$(SPECDEC_ISA=avx512 qemu-x86_64 -cpu "$cpu" "$BUILD/specdec" --version 2>&1 | grep -v '^qemu-x86_64: warning')
  case "$why" in
    *"cannot run that path (it lacks"*avx512f*) echo "ok   $cpu: $got; SPECDEC_ISA=avx512 refused: ${why#error: }" ;;
    *) echo "FAIL: $cpu: SPECDEC_ISA=avx512 was not refused as expected: $why"; fail=1 ;;
  esac
  for t in test_kernels test_model test_quant; do
    out=$(qemu-x86_64 -cpu "$cpu" "$BUILD/$t" 2>&1); rc=$?
    if [ $rc != 0 ]; then
      echo "FAIL: $cpu: $t exited $rc"; echo "$out" | grep -E 'FAILED|ERROR|Illegal|error' | head -5; fail=1
    else
      echo "ok   $cpu: $t ($(echo "$out" | grep -c '^\[       OK \]') passed on $want)"
    fi
  done
done
exit $fail
