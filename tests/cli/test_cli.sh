#!/usr/bin/env bash
# CLI contract: --help for every subcommand, exit codes (0 ok, 1 runtime error, 2 usage),
# one-line "error: ..." messages, and a real generation when ../shared is present.
# Usage: test_cli.sh SPECDEC_BINARY SOURCE_DIR
set -u
BIN=$1
SRC=$2
SHARED=${SPECDEC_SHARED:-$SRC/../shared}
pass=0; fail=0; skip=0
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

check "top-level help"        0 "commands:"          -- "$BIN" --help
check "no command"            2 "unknown command|usage" -- "$BIN" bogus
for c in generate info bench-decode bench mkmodel convert; do
  check "$c --help"           0 "usage: specdec $c"  -- "$BIN" $c --help
done
check "generate needs -m"     2 "-m MODEL is required" -- "$BIN" generate
check "unknown option"        2 "unknown option '--frobnicate'" -- "$BIN" generate -m x --frobnicate
check "missing model"         1 "model '/nonexistent.gguf' not found" -- "$BIN" generate -m /nonexistent.gguf
check "bad -n"                2 "-n expects an integer" -- "$BIN" generate -m x -n lots
check "k = 0"                 2 "--draft-max expects an integer in 1..32" -- "$BIN" generate -m x --draft-max 0
check "negative temperature"  2 "--temp expects a number" -- "$BIN" generate -m x --temp -1
check "top-p outside (0,1]"   2 "--top-p" -- "$BIN" generate -m x --top-p 1.5
check "threads < 1"           2 "--threads expects an integer in 1" -- "$BIN" generate -m x --threads 0
check "compare without draft" 2 "--compare needs a draft" -- "$BIN" generate -m x --compare

# A tiny random model made by the tool itself: generation, info, context errors.
"$BIN" mkmodel "$TMP/tiny.gguf" --dim 32 --layers 1 --heads 4 --kv-heads 2 --hidden 64 --vocab 300 --ctx 32 2>/dev/null
check "info tiny"             0 "grouped-query"      -- "$BIN" info "$TMP/tiny.gguf"
check "generate tiny"         0 "decode:"            -- "$BIN" generate -m "$TMP/tiny.gguf" -n 8
check "prompt too long"       2 "does not fit the context of 32" -- "$BIN" generate -m "$TMP/tiny.gguf" -p "$(printf 'a b c d e f g h i j k l m n o p q r s t u v w x y z %.0s' 1 2)"
check "n too large"           2 "cannot generate 100 tokens" -- "$BIN" generate -m "$TMP/tiny.gguf" -n 100
check "spec tiny self-draft"  0 "acceptance rate: +100.0%" -- "$BIN" generate -m "$TMP/tiny.gguf" -md "$TMP/tiny.gguf" -n 12 --ignore-eos
check "stats json"            0 ""                   -- "$BIN" generate -m "$TMP/tiny.gguf" -md "$TMP/tiny.gguf" -n 8 --stats-json "$TMP/s.json"
grep -q '"acceptance_rate"' "$TMP/s.json" && { echo "ok   stats json content"; pass=$((pass+1)); } || { echo "FAIL stats json content"; fail=$((fail+1)); }

# Quantised models: mkmodel --type, convert (usage errors, fallback note, result loads), a
# self-draft quantised in memory.
check "convert needs files"   2 "IN and OUT.gguf are required" -- "$BIN" convert "$TMP/tiny.gguf"
check "convert bad type"      2 "--type must be f32, f16, bf16" -- "$BIN" convert "$TMP/tiny.gguf" "$TMP/x.gguf" --type q3_k
check "mkmodel bad type"      2 "--type must be f32, f16, bf16" -- "$BIN" mkmodel "$TMP/x.gguf" --type q2_k
check "draft-type bad"        2 "--draft-type must be" -- "$BIN" generate -m x --draft-type q7
check "mkmodel q4_0"          0 "wrote"              -- "$BIN" mkmodel "$TMP/q4.gguf" --dim 64 --layers 1 --heads 4 --hidden 96 --vocab 300 --ctx 32 --type q4_0
check "info q4_0"             0 "q4_0"               -- "$BIN" info "$TMP/q4.gguf"
"$BIN" mkmodel "$TMP/odd.gguf" --dim 32 --layers 1 --heads 4 --kv-heads 2 --hidden 80 --vocab 300 --ctx 32 2>/dev/null
check "convert to q8_0"       0 "blk.0.ffn_down.weight stays f16: its rows do not divide into q8_0 blocks of 32" -- "$BIN" convert "$TMP/odd.gguf" "$TMP/tiny-q8.gguf" --type q8_0
check "converted generates"   0 "decode:"            -- "$BIN" generate -m "$TMP/tiny-q8.gguf" -n 8
check "quantised self-draft"  0 "greedy outputs identical: yes" -- "$BIN" generate -m "$TMP/tiny.gguf" --draft-type q8_0 -n 12 --compare --ignore-eos
check "kv-type bad"           2 "--kv-type must be f32 or f16, got 'f8'" -- "$BIN" generate -m x --kv-type f8
check "f16 cache, head_dim 8" 1 "f16 KV cache needs head_dim >= 16" -- "$BIN" generate -m "$TMP/odd.gguf" --kv-type f16 -n 4
# portable builds (no AVX-512 kernels) refuse f16 caches: the self-draft check is for native ones
if ! "$BIN" generate -m "$TMP/q4.gguf" --kv-type f16 -n 1 2>&1 | grep -q "AVX-512 build"; then
  check "f16 cache self-draft" 0 "greedy outputs identical: yes" -- "$BIN" generate -m "$TMP/q4.gguf" --draft-type q8_0 --kv-type f16 -n 12 --compare --ignore-eos
else
  echo "skip f16 cache self-draft: this build has no AVX-512 kernels"; skip=$((skip+1))
fi

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
if [ "$rc" = 130 ] && grep -q "stopped: interrupted" "$TMP/int.err"; then
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
  # stories-draft's cost twin drafts exactly as stories-draft does: the same acceptance.
  check "twin of stories-draft" 0 "cost twin of stories-draft" -- "$BIN" mkmodel "$TMP/d15.gguf" --twin stories-draft -z "$SHARED/models/stories260K/tok512.bin" --shape stories15M
  "$BIN" generate -m stories260K -md stories-draft -n 64 --no-stream 2>&1 >/dev/null | grep "^acceptance rate" >"$TMP/acc.small"
  "$BIN" generate -m stories260K -md "$TMP/d15.gguf" -n 64 --no-stream 2>&1 >/dev/null | grep "^acceptance rate" >"$TMP/acc.twin"
  [ -s "$TMP/acc.small" ] && cmp -s "$TMP/acc.small" "$TMP/acc.twin" && { echo "ok   twin draft accepts as stories-draft: $(cat "$TMP/acc.twin")"; pass=$((pass+1)); } || { echo "FAIL twin draft acceptance: $(cat "$TMP/acc.small") vs $(cat "$TMP/acc.twin")"; fail=$((fail+1)); }
  # Same vocabulary size (512), different pieces: the pair check must refuse it.
  "$BIN" mkmodel "$TMP/other512.gguf" --dim 32 --layers 1 --heads 4 --hidden 64 --vocab 512 --ctx 64 2>/dev/null
  check "incompatible pair"    1 "differ at id [0-9]+" -- "$BIN" generate -m stories260K -md "$TMP/other512.gguf"
else
  echo "SKIP real pair checks: needs $SHARED/models/stories260K and stories-draft"; skip=$((skip+1))
fi

echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" = 0 ]
