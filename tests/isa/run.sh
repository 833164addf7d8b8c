#!/usr/bin/env bash
# Runs a test program on one kernel path (SPECDEC_ISA=PATH), or skips it (exit 77) saying what
# this CPU lacks for that path: the one place a test may skip for the CPU. The refusal comes
# from the library's own check (specdec --version under SPECDEC_ISA), so this script and the
# kernels cannot disagree about what the CPU runs.
# Usage: run.sh PATH SPECDEC_BINARY PROGRAM [ARGS...]
set -u
isa=$1 cli=$2
shift 2
if ! why=$(SPECDEC_ISA=$isa "$cli" --version 2>&1 >/dev/null); then
  case "$why" in
    *"this CPU cannot run that path"*) echo "SKIP: the $isa kernel path: ${why#error: }"; exit 77 ;;
    *) echo "FAIL: $cli --version under SPECDEC_ISA=$isa: $why"; exit 1 ;;
  esac
fi
SPECDEC_ISA=$isa exec "$@"
