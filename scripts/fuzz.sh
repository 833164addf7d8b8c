#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan, build-fuzz/) and runs each for a bounded
# time over a corpus seeded from the project's own writers and, when present, ../shared files
# (copied into the build directory at run time, never into the tree); prints executions and
# coverage per target. A crash leaves its reproducer in build-fuzz/artifacts/TARGET/.
# Usage: scripts/fuzz.sh [TARGET|all] [SECONDS]     (default: all, 60 s per target)
#   TARGET: gguf model_gguf llama2c tokenizer tokenizer_file config safetensors hf_tokenizer chat tool_calls hf_config gbnf schema http_frames
#   env: SPECDEC_SHARED (../shared), SPECDEC_FUZZ_BUILD (build-fuzz), SPECDEC_FUZZ_RSS_MB (2048),
#        SPECDEC_FUZZ_ARGS (extra libFuzzer flags, e.g. "-jobs=2 -workers=2")
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WHICH=${1:-all}
SECS=${2:-60}
BUILD=${SPECDEC_FUZZ_BUILD:-build-fuzz}
SHARED=${SPECDEC_SHARED:-$ROOT/../shared}
RSS=${SPECDEC_FUZZ_RSS_MB:-2048}
TARGETS=(gguf model_gguf llama2c tokenizer tokenizer_file config safetensors hf_tokenizer chat tool_calls hf_config gbnf schema http_frames)

if [ "$WHICH" != all ] && [[ ! " ${TARGETS[*]} " == *" $WHICH "* ]]; then
  echo "fuzz: unknown target '$WHICH' (known: ${TARGETS[*]} all)" >&2
  exit 2
fi
[ "$WHICH" = all ] || TARGETS=("$WHICH")

# Fuzzing needs clang, its libFuzzer/sanitizer runtimes and LLVM's OpenMP (clang does not use
# GCC's libgomp), on top of the normal build packages; installed here only, on demand.
PKGS=(build-essential cmake pkg-config libopenblas-openmp-dev libcjson-dev libcmocka-dev libmicrohttpd-dev
      clang libclang-rt-14-dev libomp-14-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "fuzz: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "fuzz: missing packages: ${missing[*]} (run as root: sudo apt-get install -y ${missing[*]})" >&2
    exit 1
  fi
fi

echo "== building fuzz targets in $BUILD (clang, libFuzzer + ASan + UBSan)"
CC=clang cmake -S . -B "$BUILD" -DSPECDEC_FUZZ=ON -DSPECDEC_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# A failed build must stop here: fuzzing stale binaries would report on old code.
if ! cmake --build "$BUILD" -j"$(nproc)" >"$BUILD/build.log" 2>&1; then
  grep -E 'error|Error' "$BUILD/build.log" | head -20 >&2
  echo "fuzz: build failed (log: $BUILD/build.log)" >&2
  exit 1
fi

# Seeds: regenerated every run (cheap); the corpus directory keeps what earlier runs found.
SEEDS=$BUILD/seeds
rm -rf "$SEEDS"
"$BUILD/sd_fuzz_seeds" "$SEEDS" "${TARGETS[@]}"
u32() { printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $(($1 & 255)) $((($1 >> 8) & 255)) $((($1 >> 16) & 255)) $((($1 >> 24) & 255)))"; }
have() { [ -r "$SHARED/$1" ]; }
for t in "${TARGETS[@]}"; do
  d=$SEEDS/$t
  mkdir -p "$d"
  case $t in
  gguf)
    for f in models/stories260K/stories260K.gguf models/stories-draft/stories-draft.gguf \
             models/stories260K/llama.cpp-quantized/stories260K-Q4_0-mix.gguf vocab-tests/ggml-vocab-llama-spm.gguf; do
      have "$f" && cp "$SHARED/$f" "$d/shared_$(basename "$f")"
    done ;;
  model_gguf)
    for f in models/stories260K/stories260K.gguf models/stories-draft/stories-draft.gguf \
             models/stories260K/llama.cpp-quantized/stories260K-F16.gguf; do
      have "$f" && cp "$SHARED/$f" "$d/shared_$(basename "$f")"
    done ;;
  llama2c)  # u32 split | checkpoint | tokenizer.bin
    tok=models/stories260K/tok512.bin
    for f in models/stories260K/stories260K.bin models/stories-draft/stories-draft.bin; do
      if have "$f" && have "$tok"; then
        { u32 "$(stat -c %s "$SHARED/$f")"; cat "$SHARED/$f" "$SHARED/$tok"; } > "$d/shared_$(basename "$f")"
      fi
    done ;;
  tokenizer_file)  # u32 vocab size | tokenizer.bin
    have models/stories260K/tok512.bin && { u32 512; cat "$SHARED/models/stories260K/tok512.bin"; } > "$d/shared_tok512.bin"
    have tokenizers/llama2/tokenizer.bin && { u32 32000; cat "$SHARED/tokenizers/llama2/tokenizer.bin"; } > "$d/shared_llama2.bin" ;;
  tokenizer)  # mode byte | text
    for f in "$SHARED"/vocab-tests/*.inp; do
      [ -r "$f" ] && { printf '\004'; head -c 4000 "$f"; } > "$d/shared_$(basename "$f")"
    done
    have corpora/tinystories.txt && { printf '\000'; head -c 2000 "$SHARED/corpora/tinystories.txt"; } > "$d/shared_tinystories" ;;
  config)
    for f in configs/*.json; do [ -r "$f" ] && cp "$f" "$d/project_$(basename "$f")"; done ;;
  schema)  # each schema of the validity test, one file each
    python3 -c 'import json,sys
for i, e in enumerate(json.load(open(sys.argv[1]))): open("%s/project_schema%03d.json" % (sys.argv[2], i), "w").write(json.dumps(e["schema"]))' \
      tests/grammar/schemas.json "$d" 2>/dev/null || true ;;
  hf_tokenizer)  # special-id byte | tokenizer.json
    have models/tinystories-656k/tokenizer.json &&
      { printf '\001'; cat "$SHARED/models/tinystories-656k/tokenizer.json"; } > "$d/shared_tinystories-656k.json" ;;
  chat)  # mode byte | the real templates (extracted from tokenizer_config.json)
    for m in llama3 qwen3; do
      f=$SHARED/tokenizers/$m/tokenizer_config.json
      [ -r "$f" ] && { printf '\020'; python3 -c 'import json,sys; sys.stdout.write(json.load(open(sys.argv[1]))["chat_template"])' "$f" 2>/dev/null; } > "$d/shared_$m.jinja"
    done ;;
  hf_config)
    for m in llama3 qwen3; do have "tokenizers/$m/tokenizer_config.json" && cp "$SHARED/tokenizers/$m/tokenizer_config.json" "$d/shared_$m.json"; done
    have models/tinystories-656k/generation_config.json && cp "$SHARED/models/tinystories-656k/generation_config.json" "$d/shared_generation_config.json" ;;
  safetensors)  # u32 split | config.json | model.safetensors: the real config over the synthetic weights
    cfg=models/tinystories-656k/config.json
    if have "$cfg" && [ -r "$d/seed_llama_f32_tied" ]; then
      n=$(od -An -tu4 -N4 "$d/seed_llama_f32_tied" | tr -d ' ')
      { u32 "$(stat -c %s "$SHARED/$cfg")"; cat "$SHARED/$cfg"; tail -c +$((5 + n)) "$d/seed_llama_f32_tied"; } > "$d/shared_config_synth_weights"
    fi ;;
  esac
done

# Model inputs as large as the real models, so their mutations are explored too; the container
# parser does better with many small inputs (real files are cut to 64 KiB).
max_len() {
  case $1 in
  model_gguf|llama2c) echo 1300000 ;;
  tokenizer_file) echo 500000 ;;
  hf_tokenizer) echo 131072 ;;
  gguf|safetensors) echo 65536 ;;
  *) echo 8192 ;;
  esac
}

export SPECDEC_SHARED="$SHARED" OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
summary=()
failed=0
for t in "${TARGETS[@]}"; do
  corpus=$BUILD/corpus/$t
  art=$BUILD/artifacts/$t/
  log=$BUILD/logs/$t.log
  mkdir -p "$corpus" "$art" "$(dirname "$log")"
  echo "== fuzz_$t: ${SECS}s"
  rc=0
  # shellcheck disable=SC2086
  "$BUILD/fuzz_$t" "$corpus" "$SEEDS/$t" -max_total_time="$SECS" -timeout=5 -rss_limit_mb="$RSS" \
    -max_len="$(max_len "$t")" -use_value_profile=1 -print_final_stats=1 -artifact_prefix="$art" \
    ${SPECDEC_FUZZ_ARGS:-} >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  crashes=$(find "$art" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  status=ok
  if [ "$rc" != 0 ] || [ "$crashes" != 0 ]; then
    status="FAILED (exit $rc; see $log, reproducers in $art)"
    failed=1
    grep -E 'ERROR: |SUMMARY: |fuzz property violated' "$log" | head -5 >&2 || true
  fi
  echo "   executions ${execs:-?}, cov ${cov:-?}, ft ${ft:-?}, corpus $(find "$corpus" -type f | wc -l) files: $status"
  summary+=("$(printf '%-15s %6ss %12s %7s %7s  %s' "$t" "$SECS" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$status")")
done

echo
printf '%-15s %7s %12s %7s %7s  %s\n' target time executions cov ft result
printf '%s\n' "${summary[@]}"
exit $failed
