#!/usr/bin/env bash
# CLI contract: --help for every subcommand, exit codes (0 ok, 1 runtime error, 2 usage),
# one-line "error: ..." messages, and a real generation when ../shared is present.
# Usage: test_cli.sh SPECDEC_BINARY SOURCE_DIR
set -u
BIN=$1
SRC=$2
SHARED=${SPECDEC_SHARED:-$SRC/../shared}
pass=0; fail=0; skip=0
# A check that needs shared test data it lacks: skipped with the reason, failed under
# SPECDEC_REQUIRE_SHARED=1 (CI), like every test's missing data.
skip_data() {
  if [ "${SPECDEC_REQUIRE_SHARED:-0}" = 1 ]; then echo "FAIL $1 (SPECDEC_REQUIRE_SHARED=1)"; fail=$((fail+1))
  else echo "SKIP $1"; skip=$((skip+1)); fi
}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

check() { # name expected_rc stderr_pattern -- cmd...
  local name=$1 want=$2 pat=$3; shift 4
  "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
  if [ "$rc" != "$want" ]; then
    echo "FAIL $name: exit $rc, expected $want"; sed 's/^/  /' "$TMP/err" | head -5; fail=$((fail+1)); return
  fi
  if [ -n "$pat" ] && ! grep -qE -e "$pat" "$TMP/err" "$TMP/out"; then
    echo "FAIL $name: output lacks /$pat/"; sed 's/^/  /' "$TMP/err" | head -5; fail=$((fail+1)); return
  fi
  if [ "$want" != 0 ] && [ "$(grep -c '^error: ' "$TMP/err")" != 1 ]; then
    echo "FAIL $name: expected exactly one 'error: ' line on stderr"; cat "$TMP/err"; fail=$((fail+1)); return
  fi
  echo "ok   $name"; pass=$((pass+1))
}

# name expected_stdout -- cmd...: exit 0 and stdout exactly as given
check_out() {
  local name=$1 want=$2; shift 3
  local got; got=$("$@" 2>"$TMP/err"); local rc=$?
  if [ "$rc" != 0 ] || [ "$got" != "$want" ]; then
    echo "FAIL $name: exit $rc, stdout:"; printf '%s\n' "$got" | head -5 | sed 's/^/  /'; echo "  expected:"
    printf '%s\n' "$want" | head -5 | sed 's/^/  /'; sed 's/^/  /' "$TMP/err" | head -3; fail=$((fail+1)); return
  fi
  echo "ok   $name"; pass=$((pass+1))
}

check "top-level help"        0 "commands:"          -- "$BIN" --help
# the kernel path: named by --version; SPECDEC_ISA forces one, or stops every command when it
# names no path (one this CPU cannot run: tests/isa/qemu_cpus.sh, on emulated CPUs)
check "--version"             0 "^kernels: (avx512|avx2|portable) \((the best this CPU runs|SPECDEC_ISA)" -- "$BIN" --version
check "SPECDEC_ISA=portable"  0 "^kernels: portable \(SPECDEC_ISA" -- env SPECDEC_ISA=portable "$BIN" --version
check "SPECDEC_ISA=avx3"      1 "^error: SPECDEC_ISA=avx3 names no kernel path: avx512, avx2 or portable$" -- env SPECDEC_ISA=avx3 "$BIN" --version
check "SPECDEC_ISA=avx3 info" 1 "^error: SPECDEC_ISA=avx3 names no kernel path" -- env SPECDEC_ISA=avx3 "$BIN" info /nonexistent.gguf
check "no command"            2 "unknown command|usage" -- "$BIN" bogus
# the README's first command without the test data: one error before anything is set up or built
check "demo without test data" 1 "^error: demo: the trained stories pair is not under /nonexistent/models \(stories260K/stories260K\.bin, stories-draft/stories-draft\.bin\): run from a checkout beside \.\./shared, or set SPECDEC_SHARED$" -- env SPECDEC_SHARED=/nonexistent "$SRC/scripts/demo.sh"
# the server benchmark refuses a bad option by name before it builds or starts anything
check "bench_serve --help"       0 "^ +\[--clients LIST\] \[--warmup N\]" -- "$SRC/scripts/bench_serve.sh" --help
check "bench_serve --clients 3"  2 "^error: bench_serve: --clients takes 1, 2, 4 or 8, got '3'$" -- "$SRC/scripts/bench_serve.sh" --clients 3
check "bench_serve --clients ,"  2 "^error: bench_serve: --clients is empty$" -- "$SRC/scripts/bench_serve.sh" --clients ,
check "bench_serve --warmup x"   2 "^error: bench_serve: --warmup takes a number, got 'x'$" -- "$SRC/scripts/bench_serve.sh" --warmup x
check "bench_serve --warmup"     2 "^error: bench_serve: --warmup needs a value$" -- "$SRC/scripts/bench_serve.sh" --warmup
check "bench_serve --per-client 0" 2 "^error: bench_serve: --per-client must be at least 1, got 0$" -- "$SRC/scripts/bench_serve.sh" --per-client 0
check "bench_serve -n 0"         2 "^error: bench_serve: -n and --reps must be at least 1, got -n 0 --reps 3$" -- "$SRC/scripts/bench_serve.sh" -n 0
check "bench_serve --bogus"      2 "^error: bench_serve: unknown argument '--bogus' \(see --help\)$" -- "$SRC/scripts/bench_serve.sh" --bogus
for c in generate info bench-decode bench mkmodel convert tokenize serve; do
  check "$c --help"           0 "usage: specdec $c"  -- "$BIN" $c --help
done
check "generate needs -m"     2 "-m MODEL is required" -- "$BIN" generate
check "serve needs -m"        2 "^error: serve: -m MODEL is required \(see specdec serve --help\)$" -- "$BIN" serve
check "serve has no trees"    2 "^error: serve: unknown option '--draft-tree'" -- "$BIN" serve -m x --draft-tree 4
check "serve bad port"        2 "^error: --port expects an integer in 0..65535, got '70000'$" -- "$BIN" serve -m x --port 70000
check "serve bad timeout"     2 "^error: --timeout expects an integer in 1..86400, got '0'$" -- "$BIN" serve -m x --timeout 0
check "serve bad host"        1 "^error: serve: --host no.such.host.invalid: " -- "$BIN" serve -m x --host no.such.host.invalid
check "serve missing model"   1 "^error: model '/nonexistent.gguf' not found" -- "$BIN" serve -m /nonexistent.gguf --port 0
check "unknown option"        2 "unknown option '--frobnicate'" -- "$BIN" generate -m x --frobnicate
check "missing model"         1 "model '/nonexistent.gguf' not found" -- "$BIN" generate -m /nonexistent.gguf
check "bad -n"                2 "-n expects an integer" -- "$BIN" generate -m x -n lots
check "k = 33"                2 "--draft-max expects an integer in 0..32" -- "$BIN" generate -m x --draft-max 33
check "negative temperature"  2 "--temp expects a number" -- "$BIN" generate -m x --temp -1
check "top-p outside (0,1]"   2 "--top-p" -- "$BIN" generate -m x --top-p 1.5
check "threads < 1"           2 "--threads expects an integer in 1" -- "$BIN" generate -m x --threads 0
check "compare without draft" 2 "--compare needs a draft" -- "$BIN" generate -m x --compare
# One option table: each command takes its own flags only, names the value it expected, and
# its --help lists what it takes.
check "generate positional"   2 "^error: generate: unexpected argument 'x' \(see specdec generate --help\)$" -- "$BIN" generate -m y x
check "flag of another cmd"   2 "^error: info: unknown option '--temp' \(see specdec info --help\)$" -- "$BIN" info x --temp 1
check "value missing"         2 "^error: --top-k needs a value$" -- "$BIN" generate -m x --top-k
check "top-p zero"            2 "^error: --top-p expects a number in \(0, 1\], got '0'$" -- "$BIN" generate -m x --top-p 0
check "kv-type bad"           2 "^error: --kv-type must be f32 or f16, got 'f8'$" -- "$BIN" bench-decode -m x --kv-type f8
check "fixed and p-min"       2 "give --draft-fixed or --draft-p-min, not both" -- "$BIN" generate -m x --draft-fixed --draft-p-min 0.5
check "bad chat template"     2 "--chat-template must be one of chatml, .*, got 'nope'" -- "$BIN" generate -m x --chat --chat-template nope
check "convert three files"   2 "^error: convert: unexpected argument 'c' after 'b'" -- "$BIN" convert a b c
check "prompt file missing"   1 "^error: cannot open $TMP/none.txt: No such file or directory$" -- "$BIN" generate -m x -f "$TMP/none.txt"
"$BIN" generate --help >"$TMP/gh"; "$BIN" info --help >"$TMP/ih"
if grep -q -- "--draft-tree N" "$TMP/gh" && grep -q -- "--chat-template NAME.*chatml" "$TMP/gh" && ! grep -q -- "--temp" "$TMP/ih" && grep -q -- "--tokenizer" "$TMP/ih"; then
  echo "ok   help lists each command's own options"; pass=$((pass+1))
else echo "FAIL help lists each command's own options"; fail=$((fail+1)); fi

# A tiny random model made by the tool itself: generation, info, context errors.
"$BIN" mkmodel "$TMP/tiny.gguf" --dim 32 --layers 1 --heads 4 --kv-heads 2 --hidden 64 --vocab 300 --ctx 32 2>/dev/null
check "info tiny"             0 "grouped-query"      -- "$BIN" info "$TMP/tiny.gguf"
check "generate tiny"         0 "decode:"            -- "$BIN" generate -m "$TMP/tiny.gguf" -n 8
check "-z beside a GGUF tokenizer" 1 "carries its own tokenizer .tokenizer.ggml.model., so the tokenizer file /x/tok.bin would not be used" -- "$BIN" generate -m "$TMP/tiny.gguf" -z /x/tok.bin -n 1
# An F16 model's prompt of more than 33 tokens goes through OpenBLAS's sgemm, which hung for good
# when OpenMP gave it fewer threads than it was told to use (timeout: 124).
"$BIN" mkmodel "$TMP/tiny16.gguf" --dim 64 --layers 1 --heads 4 --kv-heads 2 --hidden 128 --vocab 300 --ctx 128 --type f16 2>/dev/null
long_prompt=$(printf 'a b c d e f g h i j k l m n o p q r s t u v w x y z %.0s' 1 2)
check "OMP_THREAD_LIMIT=1"    0 "decode:"            -- env OMP_THREAD_LIMIT=1 timeout 60 "$BIN" generate -m "$TMP/tiny16.gguf" -n 4 -p "$long_prompt"
check "OMP_DYNAMIC=true"      0 "decode:"            -- env OMP_DYNAMIC=true timeout 60 "$BIN" generate -m "$TMP/tiny16.gguf" -n 4 -t 2 -p "$long_prompt"
check "prompt too long"       2 "does not fit the context of 32" -- "$BIN" generate -m "$TMP/tiny.gguf" -p "$(printf 'a b c d e f g h i j k l m n o p q r s t u v w x y z %.0s' 1 2)"
check "n too large"           2 "cannot generate 100 tokens" -- "$BIN" generate -m "$TMP/tiny.gguf" -n 100
check "spec tiny self-draft"  0 "acceptance rate: +100.0%" -- "$BIN" generate -m "$TMP/tiny.gguf" -md "$TMP/tiny.gguf" -n 12 --ignore-eos --draft-fixed
check "draft kind bad"        2 "--draft must be ngram \(a draft model is given with -md\), got 'lookup'" -- "$BIN" generate -m x --draft lookup
check "ngram sizes"           2 "--ngram-min 5 exceeds --ngram-max 4" -- "$BIN" generate -m x --draft ngram --ngram-min 5
check "ngram alone"           0 "greedy outputs identical: yes" -- "$BIN" generate -m "$TMP/tiny.gguf" --draft ngram -n 12 --compare --ignore-eos --draft-fixed
check "compare: pass cost"   0 "^target pass: +[0-9.]+ ms \([0-9.]+ tokens on average\) = [0-9.]+ plain decode steps of [0-9.]+ ms$" -- "$BIN" generate -m "$TMP/tiny.gguf" -md "$TMP/tiny.gguf" -n 12 --compare --ignore-eos --draft-fixed
check "tree needs a model"    2 "--draft-tree needs a draft model" -- "$BIN" generate -m x --draft-tree 8
check "tree too big"          2 "--draft-tree expects an integer in 1..32, got '40'" -- "$BIN" generate -m x -md x --draft-tree 40
check "tree tiny self-draft"  0 "greedy outputs identical: yes" -- "$BIN" generate -m "$TMP/tiny.gguf" -md "$TMP/tiny.gguf" --draft-tree 8 -n 12 --compare --ignore-eos
check "tree with p-min"       2 "--draft-p-min judges each draft of a chain; a --draft-tree" -- "$BIN" generate -m x -md x --draft-tree 8 --draft-p-min 0.5
check "p-min out of range"    2 "--draft-p-min expects a number in \[0, 1\], got '1.5'" -- "$BIN" generate -m x --draft-p-min 1.5
check "stats json"            0 ""                   -- "$BIN" generate -m "$TMP/tiny.gguf" -md "$TMP/tiny.gguf" -n 8 --draft-fixed --stats-json "$TMP/s.json"
# the one serialiser's figures (stats.h): 8 tokens, stopped by length, every token from a pass
jq -e '.speculative | .predicted_n == 8 and .stop_reason == "length" and .acceptance_rate == 1 and
  (.tokens_per_pass - 8 / (.verify_n + .target_steps_n) | fabs) < 1e-9 and .num_draft_tokens == .draft_n' "$TMP/s.json" >/dev/null \
  && { echo "ok   stats json content"; pass=$((pass+1)); } || { echo "FAIL stats json content"; cat "$TMP/s.json"; fail=$((fail+1)); }

# Quantised models: mkmodel --type, convert (usage errors, fallback note, result loads), a
# self-draft quantised in memory.
check "convert needs files"   2 "IN and OUT.gguf are required" -- "$BIN" convert "$TMP/tiny.gguf"
check "convert bad type"      2 "--type must be f32, f16, bf16" -- "$BIN" convert "$TMP/tiny.gguf" "$TMP/x.gguf" --type q3_k
check "mkmodel bad type"      2 "--type must be f32, f16, bf16" -- "$BIN" mkmodel "$TMP/x.gguf" --type q2_k
check "draft-type bad"        2 "--draft-type must be" -- "$BIN" generate -m x --draft-type q7
check "mkmodel q4_0"          0 "wrote"              -- "$BIN" mkmodel "$TMP/q4.gguf" --dim 64 --layers 1 --heads 4 --hidden 96 --vocab 300 --ctx 32 --type q4_0
check "info q4_0"             0 "q4_0"               -- "$BIN" info "$TMP/q4.gguf"
check "bench-decode reads"    0 "^reads: .* MB of weights, .* MB of KV cache \(21 positions, f32\)$" -- "$BIN" bench-decode -m "$TMP/q4.gguf" --pos 20 --prefill 8 --reps 1 --bw-mib 64 --no-batch
check "bench-decode order"    0 "^            (monotonic: no dip|not monotonic)$" -- "$BIN" bench-decode -m "$TMP/q4.gguf" --pos 20 --prefill 8 --reps 3 --bw-mib 64 --no-batch
"$BIN" mkmodel "$TMP/odd.gguf" --dim 32 --layers 1 --heads 4 --kv-heads 2 --hidden 80 --vocab 300 --ctx 32 2>/dev/null
check "convert to q8_0"       0 "blk.0.ffn_down.weight stays f16: its rows do not divide into q8_0 blocks of 32" -- "$BIN" convert "$TMP/odd.gguf" "$TMP/tiny-q8.gguf" --type q8_0
check "converted generates"   0 "decode:"            -- "$BIN" generate -m "$TMP/tiny-q8.gguf" -n 8
check "quantised self-draft"  0 "greedy outputs identical: yes" -- "$BIN" generate -m "$TMP/tiny.gguf" --draft-type q8_0 -n 12 --compare --ignore-eos --draft-fixed
check "kv-type bad"           2 "--kv-type must be f32 or f16, got 'f8'" -- "$BIN" generate -m x --kv-type f8
check "f16 cache, head_dim 8" 1 "^error: .*odd.gguf: an f16 KV cache needs head_dim >= 16 \(head_dim 8\)$" -- "$BIN" generate -m "$TMP/odd.gguf" --kv-type f16 -n 4
check "f16 cache self-draft" 0 "greedy outputs identical: yes" -- "$BIN" generate -m "$TMP/q4.gguf" --draft-type q8_0 --kv-type f16 -n 12 --compare --ignore-eos

# Cost twins: a twin of the tiny model says what it is and generates the tiny model's text;
# every flag a twin cannot take, and every shape it cannot have, is refused by name.
check "mkmodel twin"          0 "wrote .*: cost twin of .*tiny.gguf \(dim 32 -> 64, 1 -> 2 layers, 4 -> 4 heads, 2 -> 4 kv heads, hidden 64 -> 128; vocab 300\)" -- "$BIN" mkmodel "$TMP/twin.gguf" --twin "$TMP/tiny.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 4 --hidden 128
check "info twin"             0 "^twin: +cost twin of .*tiny.gguf \(dim 32, 1 layers, 4 heads, 2 kv heads, hidden 64\) at dim 64, 2 layers" -- "$BIN" info "$TMP/twin.gguf"
"$BIN" generate -m "$TMP/tiny.gguf" -n 12 --ignore-eos --no-stream 2>/dev/null >"$TMP/tiny.txt"
"$BIN" generate -m "$TMP/twin.gguf" -n 12 --ignore-eos --no-stream 2>/dev/null >"$TMP/twin.txt"
[ -s "$TMP/tiny.txt" ] && cmp -s "$TMP/tiny.txt" "$TMP/twin.txt" && { echo "ok   twin generates the tiny model's text"; pass=$((pass+1)); } || { echo "FAIL twin text differs from the tiny model's"; fail=$((fail+1)); }
check "mkmodel --help twin"   0 "--twin SMALL \[-z TOKENIZER\]" -- "$BIN" mkmodel --help
check "twin needs a shape"    2 "--twin needs the large shape: --shape NAME, or --dim/--layers/--heads/--hidden" -- "$BIN" mkmodel "$TMP/x.gguf" --twin "$TMP/tiny.gguf"
check "twin with --vocab"     2 "--vocab cannot be used with --twin \(a twin keeps SMALL's vocabulary, context and separate classifier\)" -- "$BIN" mkmodel "$TMP/x.gguf" --twin "$TMP/tiny.gguf" --shape stories15M --vocab 512
check "twin with --tied"      2 "--tied cannot be used with --twin" -- "$BIN" mkmodel "$TMP/x.gguf" --twin "$TMP/tiny.gguf" --shape stories15M --tied
check "-z without twin"       2 "-z goes with --twin" -- "$BIN" mkmodel "$TMP/x.gguf" -z tok.bin
check "twin smaller shape"    1 "twin: dim 16 is smaller than .*tiny.gguf's 32 \(a twin is at least the small model in every size\)" -- "$BIN" mkmodel "$TMP/x.gguf" --twin "$TMP/tiny.gguf" --dim 16 --heads 2 --kv-heads 2
check "twin head size"        1 "twin: head size 12 \(dim 48 / 4 heads\) is not a multiple of .*tiny.gguf's head size 8" -- "$BIN" mkmodel "$TMP/x.gguf" --twin "$TMP/tiny.gguf" --dim 48 --heads 4 --kv-heads 4
check "twin GQA groups"       1 "twin: kv_heads 2 does not fit .*tiny.gguf's grouped-query attention" -- "$BIN" mkmodel "$TMP/x.gguf" --twin "$TMP/tiny.gguf" --dim 96 --heads 12 --kv-heads 2 --layers 1 --hidden 64
check "twin missing small"    1 "model '/nonexistent.bin' not found" -- "$BIN" mkmodel "$TMP/x.gguf" --twin /nonexistent.bin --shape stories15M

# specdec bench: config errors name file and JSON path; a tiny generated pair runs end to end.
printf '{"target": {"model": "x"}, "draft": {"model": "y"}, "prompts": {"text": ["a"]}, "sweep": {"k": [1, "four"]}}' >"$TMP/bad.json"
check "bench bad config"      2 "bad.json: .sweep.k\[1\]: expected an integer in 1..32, got \"four\"" -- "$BIN" bench "$TMP/bad.json"
check "bench needs config"    2 "CONFIG is required" -- "$BIN" bench
cat >"$TMP/tinybench.json" <<'EOF'
{"target": {"generate": {"shape": "stories260K", "dim": 32, "layers": 1, "heads": 4, "kv_heads": 2, "hidden": 64, "vocab": 300, "ctx": 64}},
 "draft": {"generate": {"shape": "stories260K", "dim": 32, "layers": 1, "heads": 4, "kv_heads": 2, "hidden": 64, "vocab": 300, "ctx": 64}},
 "prompts": {"text": ["a b", "c d", "e f"]}, "n_predict": 8, "sweep": {"k": [1, 2]}, "repetitions": 2}
EOF
check "bench tiny self-draft" 0 "identical to plain decoding in all 4 runs" -- env SPECDEC_CACHE="$TMP/cache" "$BIN" bench "$TMP/tinybench.json" --quick --out "$TMP/res" -t 1
{ [ -s "$TMP/res/tinybench.json" ] && grep -q '</svg>' "$TMP/res/tinybench.svg"; } && { echo "ok   bench report files"; pass=$((pass+1)); } || { echo "FAIL bench report files"; fail=$((fail+1)); }

# A bench pair of cost twins (of the tiny model, made on first use): real acceptance, so not
# labelled cost only.
cat >"$TMP/twinbench.json" <<EOF
{"target": {"twin": {"of": "$TMP/tiny.gguf", "shape": "stories260K", "dim": 64, "layers": 2, "heads": 4, "kv_heads": 4, "hidden": 128}},
 "draft": {"twin": {"of": "$TMP/tiny.gguf", "shape": "stories260K", "dim": 64, "layers": 2, "heads": 4, "kv_heads": 4, "hidden": 128, "type": "q8_0"}},
 "prompts": {"text": ["a b"]}, "n_predict": 8, "sweep": {"k": [2]}, "repetitions": 1}
EOF
check "bench twin pair"       0 "target: cost twin of .*tiny.gguf at the stories260K shape \(f32, seed 1\), cached under" -- env SPECDEC_CACHE="$TMP/cache" "$BIN" bench "$TMP/twinbench.json" --quick --out "$TMP/twres" -t 1
grep -q '"cost_only":.*false' "$TMP/twres/twinbench.json" && grep -q 'tiny.gguf twin (stories260K shape, q8_0)' "$TMP/twres/twinbench.svg" && { echo "ok   twin bench is not cost only, labelled as twins"; pass=$((pass+1)); } || { echo "FAIL twin bench report"; fail=$((fail+1)); }

# Ctrl-C during a long generation: stops at the next token, prints statistics, exits 130.
"$BIN" mkmodel "$TMP/slow.gguf" --dim 256 --layers 6 --heads 8 --hidden 768 --vocab 300 --ctx 8192 2>/dev/null
"$BIN" generate -m "$TMP/slow.gguf" -md "$TMP/slow.gguf" -n 8000 --ignore-eos >"$TMP/int.out" 2>"$TMP/int.err" &
gpid=$!
sleep 1
kill -INT $gpid
wait $gpid; rc=$?
if [ "$rc" = 130 ] && grep -q "stopped: cancelled" "$TMP/int.err"; then
  echo "ok   SIGINT stops with statistics and exit 130"; pass=$((pass+1))
else
  echo "FAIL SIGINT: exit $rc"; tail -3 "$TMP/int.err"; fail=$((fail+1))
fi

# KV cache larger than the machine's memory: refused before allocating, with the bytes needed.
"$BIN" mkmodel "$TMP/kvbig.gguf" --dim 256 --layers 8 --heads 4 --hidden 256 --vocab 300 --ctx 64 2>/dev/null
check "kv cache too large"    1 "kv cache: 8 layers x 16777216 positions x 256 floats \(K and V\) need 274877906944 bytes, more than the machine's [0-9]+ bytes of memory" -- "$BIN" generate -m "$TMP/kvbig.gguf" -c 16777216

# Ctrl-C during specdec bench: stops at the next token, prints what finished, exits 130.
cat >"$TMP/slowbench.json" <<'EOF'
{"target": {"generate": {"shape": "stories260K", "dim": 64, "layers": 2, "heads": 4, "kv_heads": 4, "hidden": 128, "vocab": 300, "ctx": 1024}},
 "draft": {"generate": {"shape": "stories260K", "dim": 64, "layers": 2, "heads": 4, "kv_heads": 4, "hidden": 128, "vocab": 300, "ctx": 1024}},
 "prompts": {"text": ["a b"]}, "n_predict": 1000, "ignore_eos": true, "sweep": {"k": [1, 2, 3, 4]}, "repetitions": 100}
EOF
SPECDEC_CACHE="$TMP/cache" "$BIN" bench "$TMP/slowbench.json" --out "$TMP/slowres" -t 1 >"$TMP/bint.out" 2>"$TMP/bint.err" &
bpid=$!
sleep 2
kill -INT $bpid
wait $bpid; rc=$?
if [ "$rc" = 130 ] && grep -q "^partial results" "$TMP/bint.out" && grep -q "interrupted: no report written" "$TMP/bint.err"; then
  echo "ok   bench SIGINT prints partial results and exits 130"; pass=$((pass+1))
else
  echo "FAIL bench SIGINT: exit $rc"; tail -n 3 "$TMP/bint.out" "$TMP/bint.err"; fail=$((fail+1))
fi

if [ -f "$SHARED/models/stories260K/stories260K.bin" ] && [ -f "$SHARED/models/stories-draft/stories-draft.bin" ]; then
  export SPECDEC_MODEL_PATH="$SHARED/models"
  check "real pair --compare"  0 "greedy outputs identical: yes" -- "$BIN" generate -m stories260K -md stories-draft -n 64 --compare
  check "real pair stdout"     0 "Once upon a time, there was a little girl named Lily" -- "$BIN" generate -m stories260K -md stories-draft -n 32
  # stories-draft's cost twin drafts exactly as stories-draft does: the same acceptance at a fixed k
  # (the adaptive default drafts less for the costlier twin).
  check "twin of stories-draft" 0 "cost twin of stories-draft" -- "$BIN" mkmodel "$TMP/d15.gguf" --twin stories-draft -z "$SHARED/models/stories260K/tok512.bin" --shape stories15M
  "$BIN" generate -m stories260K -md stories-draft -n 64 --draft-fixed --no-stream 2>&1 >/dev/null | grep "^acceptance rate" >"$TMP/acc.small"
  "$BIN" generate -m stories260K -md "$TMP/d15.gguf" -n 64 --draft-fixed --no-stream 2>&1 >/dev/null | grep "^acceptance rate" >"$TMP/acc.twin"
  [ -s "$TMP/acc.small" ] && cmp -s "$TMP/acc.small" "$TMP/acc.twin" && { echo "ok   twin draft accepts as stories-draft: $(cat "$TMP/acc.twin")"; pass=$((pass+1)); } || { echo "FAIL twin draft acceptance: $(cat "$TMP/acc.small") vs $(cat "$TMP/acc.twin")"; fail=$((fail+1)); }
  # Coupled sampling: the same seed gives plain decoding's text with any drafter (a draft model,
  # prompt lookup, both, a tree), and --compare says so; rejection sampling promises no such thing.
  COUPLED=(-m stories260K -n 48 --temp 1.0 --top-p 0.9 --seed 7 --spec-sampling coupled --no-stream --ignore-eos)
  want=$("$BIN" generate "${COUPLED[@]}" 2>/dev/null)
  for d in "-md stories-draft" "-md stories-draft --draft-fixed -k 6" "--draft ngram" "-md stories-draft --draft ngram" \
           "-md stories-draft --draft-tree 8"; do
    # shellcheck disable=SC2086
    got=$("$BIN" generate "${COUPLED[@]}" $d 2>/dev/null)
    [ -n "$want" ] && [ "$got" = "$want" ] && { echo "ok   coupled sampling, $d: plain decoding's text"; pass=$((pass+1)); } \
      || { echo "FAIL coupled sampling, $d: $got"; echo "  plain: $want"; fail=$((fail+1)); }
  done
  check "coupled --compare" 0 "coupled sampling outputs identical: yes" -- "$BIN" generate "${COUPLED[@]}" -md stories-draft --compare
  check "--spec-sampling bad" 2 "--spec-sampling must be coupled or rejection, got 'x'" -- "$BIN" generate -m stories260K --spec-sampling x
  check "--draft-min biased"  1 "draft_min 3 with rejection sampling and adaptive drafting would drop sampled drafts" -- \
    "$BIN" generate -m stories260K -md stories-draft --temp 1 --spec-sampling rejection --draft-min 3
  # Same vocabulary size (512), different pieces: the pair check must refuse it.
  "$BIN" mkmodel "$TMP/other512.gguf" --dim 32 --layers 1 --heads 4 --hidden 64 --vocab 512 --ctx 64 2>/dev/null
  check "incompatible pair"    1 "differ at id [0-9]+" -- "$BIN" generate -m stories260K -md "$TMP/other512.gguf"
else
  skip_data "real pair checks: needs $SHARED/models/stories260K and stories-draft"
fi

# specdec tokenize: usage and file errors, then exact ids from the real tokenizers.
check "tokenize needs a file" 2 "^error: tokenize: MODEL_OR_TOKENIZER is required \(see specdec tokenize --help\)$" -- "$BIN" tokenize
check "tokenize needs text"   2 "^error: tokenize: give the text with -p TEXT or -f FILE$" -- "$BIN" tokenize x
check "tokenize -p and -f"    2 "^error: tokenize: give -p or -f, not both$" -- "$BIN" tokenize x -p a -f b
check "tokenize -p no value"  2 "^error: -p needs a value$" -- "$BIN" tokenize x -p
check "tokenize two sources"  2 "^error: tokenize: unexpected argument 'y' after 'x' \(see specdec tokenize --help\)$" -- "$BIN" tokenize x y -p a
check "tokenize bad option"   2 "^error: tokenize: unknown option '--ids' \(see specdec tokenize --help\)$" -- "$BIN" tokenize x --ids
check "tokenize missing"      1 "^error: model '/nonexistent.gguf' not found" -- "$BIN" tokenize /nonexistent.gguf -p a
printf 'hello' >"$TMP/junk.bin"
check "tokenize not a tokenizer" 1 "^error: $TMP/junk.bin: not a GGUF file, a tokenizer.json or a llama2.c tokenizer.bin \(read as tokenizer.bin: record 0 at offset 4 does not fit the 5-byte file; for a llama2.c checkpoint give its tokenizer.bin\)$" -- "$BIN" tokenize "$TMP/junk.bin" -p a
check "tokenize -f missing"   1 "^error: cannot open $TMP/none.txt: No such file or directory$" -- "$BIN" tokenize "$TMP/tiny.gguf" -f "$TMP/none.txt"
check_out "tokenize tiny gguf"  "1" -- "$BIN" tokenize "$TMP/tiny.gguf" -p ""
if [ -d "$SHARED/tokenizers/qwen3" ] && [ -f "$SHARED/models/arch-zoo/zoo-qwen2.gguf" ] && [ -d "$SHARED/tokenizers/llama3" ]; then
  Z=$SHARED/models/arch-zoo
  # zoo-qwen2 is architecture qwen2: its tokenizer loads whether or not the model would
  check_out "tokenize qwen2 gguf"        "9707 1879" -- "$BIN" tokenize "$Z/zoo-qwen2.gguf" -p "Hello world"
  chat=$(printf '<|im_start|>user\nHi<|im_end|>')
  # special tokens written in the text are recognised by default, as HF's encode and llama-tokenize do
  check_out "tokenize specials"          "151644 872 198 13048 151645" -- "$BIN" tokenize "$SHARED/tokenizers/qwen3" -p "$chat"
  check_out "tokenize --special"         "151644 872 198 13048 151645" -- "$BIN" tokenize "$SHARED/tokenizers/qwen3" -p "$chat" --special
  check_out "tokenize specials as text"  "27 91 318 4906 91 29 872 198 13048 27 91 318 6213 91 29" -- "$BIN" tokenize "$SHARED/tokenizers/qwen3/tokenizer.json" -p "$chat" --no-parse-special
  check "tokenize both"         2 "^error: tokenize: give --special or --no-parse-special, not both$" -- "$BIN" tokenize "$SHARED/tokenizers/qwen3" -p a --special --no-parse-special
  check_out "tokenize llama3 BOS"        "128000 9906 1917" -- "$BIN" tokenize "$SHARED/tokenizers/llama3/tokenizer.json" -p "Hello world"
  check_out "tokenize --no-bos"          "9906 1917" -- "$BIN" tokenize "$Z/zoo-llama3.gguf" -p "Hello world" --no-bos
  check_out "tokenize --pieces"          "$(printf "128000 -> '<|begin_of_text|>'\n  9906 -> 'Hello'\n127365 -> ' \xe4\xb8\x96\xe7\x95\x8c'\n   198 -> '\\\\n'\n    13 -> '.'")" -- "$BIN" tokenize "$Z/zoo-llama3.gguf" -p "$(printf 'Hello \xe4\xb8\x96\xe7\x95\x8c\n.')" --pieces
  printf 'One day' >"$TMP/text.txt"
  check_out "tokenize -f"                "3966 1899" -- "$BIN" tokenize "$Z/zoo-qwen3.gguf" -f "$TMP/text.txt"
else
  skip_data "tokenize with real tokenizers: needs $SHARED/tokenizers and models/arch-zoo"
fi
if [ -f "$SHARED/models/stories260K/tok512.bin" ]; then
  check_out "tokenize tokenizer.bin"     "1 403 407 261 378" -- "$BIN" tokenize "$SHARED/models/stories260K/tok512.bin" -p "Once upon a time"
  check_out "tokenize SPM --special"     "1 1 403 2" -- "$BIN" tokenize "$SHARED/models/stories260K/stories260K.gguf" -p "<s>Once</s>" --special
  check_out "tokenize HF directory"      "1 80 147 201 189 111" -- "$BIN" tokenize "$SHARED/models/tinystories-656k" -p "Once upon"
else
  skip_data "tokenize tokenizer.bin: needs $SHARED/models/stories260K"
fi

# generate --chat / --system / --chat-template / --special / --ids
check "chat-template bad"     2 "^error: --chat-template must be one of chatml, qwen2.5, qwen3, llama3, llama3.1, llama3.2, llama2, mistral, gemma, phi3, got 'vicuna'$" -- "$BIN" generate -m x --chat --chat-template vicuna
check "system needs chat"     2 "^error: generate: --system needs --chat$" -- "$BIN" generate -m x --system "Be brief."
check "template needs chat"   2 "^error: generate: --chat-template needs --chat$" -- "$BIN" generate -m x --chat-template chatml
check "system value"          2 "^error: --system needs a value$" -- "$BIN" generate -m x --chat --system
"$BIN" mkmodel "$TMP/chat.gguf" --dim 32 --layers 1 --heads 4 --hidden 64 --vocab 300 --ctx 256 2>/dev/null
check "chat, no template"     0 "^warning: $TMP/chat.gguf has no chat template; using chatml \(choose another with --chat-template NAME\)$" -- "$BIN" generate -m "$TMP/chat.gguf" --chat -p "Hi" -n 2
check "ids"                   0 "" -- "$BIN" generate -m "$TMP/tiny.gguf" -n 6 --ids --ignore-eos
if grep -qE '^[0-9]+( [0-9]+){5}$' "$TMP/out"; then echo "ok   ids: one line of 6 ids"; pass=$((pass+1)); else echo "FAIL ids: $(head -c 200 "$TMP/out")"; fail=$((fail+1)); fi
if [ -f "$SHARED/models/arch-zoo/zoo-llama3.gguf" ]; then
  Z=$SHARED/models/arch-zoo
  # <|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n
  check "chat llama3 prompt"    0 "^prompt tokens: +11$" -- "$BIN" generate -m "$Z/zoo-llama3.gguf" --chat -p "Hello" -n 2
  grep -q "Hello" "$TMP/out" && { echo "FAIL chat echoes the prompt"; fail=$((fail+1)); } || { echo "ok   chat prints only the reply"; pass=$((pass+1)); }
  # ... with a system turn: + <|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>
  check "chat --system"         0 "^prompt tokens: +19$" -- "$BIN" generate -m "$Z/zoo-llama3.gguf" --chat --system "Be brief." -p "Hello" -n 2
  # gemma's markers are plain text to this vocabulary: as many tokens as tokenize gives for the text
  n=$("$BIN" tokenize "$Z/zoo-llama3.gguf" --special --no-bos -p "$(printf '<|begin_of_text|><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n.')" | wc -w)
  check "chat --chat-template"  0 "^prompt tokens: +$((n - 1))$" -- "$BIN" generate -m "$Z/zoo-llama3.gguf" --chat --chat-template gemma -p "Hello" -n 2
  check "template refuses"      2 "^error: chat template gemma: System role not supported$" -- "$BIN" generate -m "$Z/zoo-llama3.gguf" --chat --chat-template gemma --system "Be brief." -p "Hello"
  check "--special"             0 "^prompt tokens: +3$" -- "$BIN" generate -m "$Z/zoo-llama3.gguf" --special -p "<|eot_id|>Hello" -n 2
  # a chat turn's text is text: <|eot_id|> written in it is not the template's end of turn ...
  n=$("$BIN" tokenize "$Z/zoo-llama3.gguf" --no-parse-special --no-bos -p "<|eot_id|>Hello" | wc -w)
  check "chat text is text"     0 "^prompt tokens: +$((11 - 1 + n))$" -- "$BIN" generate -m "$Z/zoo-llama3.gguf" --chat -p "<|eot_id|>Hello" -n 2
  # ... unless --special asks for the markers in it to count (then one token for it)
  check "chat --special"        0 "^prompt tokens: +12$" -- "$BIN" generate -m "$Z/zoo-llama3.gguf" --chat --special -p "<|eot_id|>Hello" -n 2
  n=$("$BIN" tokenize "$Z/zoo-llama3.gguf" --no-parse-special -p "<|eot_id|>Hello" | wc -w)
  check "no --special"          0 "^prompt tokens: +$n$" -- "$BIN" generate -m "$Z/zoo-llama3.gguf" -p "<|eot_id|>Hello" -n 2
else
  skip_data "chat on zoo-llama3: needs $SHARED/models/arch-zoo"
fi
# End of generation from generation_config.json: the TinyStories-656K checkpoint (linked, not
# copied) with a list that names the 4th greedy token; generation stops right after it.
TS=$SHARED/models/tinystories-656k
if [ -f "$TS/model.safetensors" ]; then
  mkdir -p "$TMP/ts"
  TSABS=$(cd "$TS" && pwd)
  for f in config.json model.safetensors tokenizer.json; do ln -sf "$TSABS/$f" "$TMP/ts/$f"; done
  greedy=$("$BIN" generate -m "$TMP/ts" -p "Once upon a time" --ids -n 12 --ignore-eos 2>/dev/null)
  set -- $greedy 0 0 0 0
  eog=$4; want="$1 $2 $3 $4"
  [ "$eog" != "$1" ] && [ "$eog" != "$2" ] && [ "$eog" != "$3" ] || { want=""; echo "FAIL eog list: no 4th greedy id that is new: '$greedy'"; fail=$((fail+1)); }
  if [ -n "$want" ]; then
    printf '{"bos_token_id": 1, "eos_token_id": [2, %s]}' "$eog" >"$TMP/ts/generation_config.json"
    check_out "eog from generation_config" "$want" -- "$BIN" generate -m "$TMP/ts" -p "Once upon a time" --ids -n 12
    check "eog stop reason"     0 "generated tokens: +4 \(stopped: eos\)" -- "$BIN" generate -m "$TMP/ts" -p "Once upon a time" --ids -n 12
    check_out "ignore-eos passes it" "$greedy" -- "$BIN" generate -m "$TMP/ts" -p "Once upon a time" --ids -n 12 --ignore-eos
    check "eog stop, speculative" 0 "greedy outputs identical: yes" -- "$BIN" generate -m "$TMP/ts" -md "$TMP/ts" -p "Once upon a time" -n 12 --compare
    grep -q "generated tokens: *4 (stopped: eos)" "$TMP/err" && { echo "ok   both runs stop at it"; pass=$((pass+1)); } || { echo "FAIL speculative run did not stop at the eog id"; fail=$((fail+1)); }
    printf '{"eos_token_id": [2, 4096]}' >"$TMP/ts/generation_config.json"
    check "eog id out of range" 1 "^error: $TMP/ts/generation_config.json: eos_token_id\[1\] = 4096 is not a token id \(vocabulary of 2048\)$" -- "$BIN" generate -m "$TMP/ts" -n 2
  fi
else
  skip_data "eog list: needs $TS"
fi

echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" = 0 ]
