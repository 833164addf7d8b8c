#!/usr/bin/env bash
# Every object of a build holds only the instructions of its path: no VEX or EVEX instruction
# (AVX and later) outside the vector paths' files, no EVEX one (AVX-512) outside the AVX-512
# files. This is what lets one binary run on an AVX2-only CPU, and its portable path on any
# x86-64-v2 CPU: an inlined helper or an auto-vectorised loop compiled with another file's flags
# would put instructions there that only the CPUID check of cpu.c was meant to guard.
# Usage: check_objects.sh BUILD_DIR          (x86-64 builds; prints what it found where)
set -u
BUILD=$1
command -v objdump >/dev/null || { echo "FAIL: needs objdump (binutils)"; exit 1; }
[ "$(uname -m)" = x86_64 ] || { echo "SKIP: the vector paths exist on x86-64 only"; exit 77; }
# the objects the libraries and programs are made of (link.txt: what each target links or
# archives), not whatever else lies under CMakeFiles (objects of files since removed)
mapfile -t objs < <(cd "$BUILD" && grep -oh 'CMakeFiles/[^ ]*\.o' CMakeFiles/*/link.txt | sort -u | sed "s|^|$BUILD/|")
[ ${#objs[@]} -gt 0 ] || { echo "FAIL: no objects in $BUILD/CMakeFiles/*/link.txt"; exit 1; }
fail=0 vector=0
for o in "${objs[@]}"; do
  case "$o" in
    *_avx512.c.o) continue ;;           # anything AVX-512 and below
    *_avx2.c.o) allowed=vex ;;          # AVX, AVX2, FMA, F16C: VEX only
    *) allowed=none ;;                  # the x86-64-v2 baseline
  esac
  # The first opcode byte of each instruction, after segment and address-size prefixes: in
  # 64-bit mode c4/c5 always start a VEX instruction and 62 an EVEX one.
  found=$(objdump -d "$o" 2>/dev/null | awk -F'\t' -v allowed="$allowed" '
    NF >= 3 && $1 ~ /^ *[0-9a-f]+:$/ {
      n = split($2, b, " "); i = 1
      while (i <= n && b[i] ~ /^(2e|36|3e|26|64|65|67)$/) i++
      if (b[i] == "62" || (allowed == "none" && (b[i] == "c4" || b[i] == "c5"))) { print $3; exit }
    }')
  if [ -n "$found" ]; then
    echo "FAIL: $o holds '$found', beyond its path's instruction sets ($allowed)"
    fail=1
  fi
  [ "$allowed" = vex ] && vector=$((vector + 1))
done
for f in kernels_avx2 quant_avx2 sampling_avx2 kernels_avx512 quant_avx512 sampling_avx512; do
  printf '%s\n' "${objs[@]}" | grep -q "/$f\.c\.o$" || { echo "FAIL: no $f object: the vector paths were not built"; fail=1; }
done
[ $fail = 0 ] && echo "ok: ${#objs[@]} objects; VEX/EVEX instructions only in the AVX2 ($vector) and AVX-512 files"
exit $fail
