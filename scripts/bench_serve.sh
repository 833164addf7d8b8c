#!/usr/bin/env bash
# Benchmark of specdec serve (not a test): aggregate generated tokens/s of the same 8 greedy
# requests sent by 1, 2, 4 and 8 concurrent clients, to a speculative server and to a plain one
# (both --parallel 8, alive side by side, idle while the other runs), in alternating rounds, both
# started afresh for each round (the one started first alternating, as is which one runs first);
# the 1-client run is "the same requests served one at a time". Reports medians and ranges, the
# ratios to one plain stream and to plain batched serving, the share of rounds that drafted, and
# whether every output equals the plain one-at-a-time output.
#
# Usage: scripts/bench_serve.sh [--pair twins|self-q8_0] [-n TOKENS] [--reps R] [-k K] [-t THREADS]
#                               [--clients LIST] [--warmup N] [--per-client R] [--draft-fixed] [--out FILE]
#   --clients LIST  the client counts, a space- or comma-separated subset of 1 2 4 8 (default: all);
#                   the ratios to one plain stream need 1 among them
#   --per-client R  each of the 8 requests is sent R times (8 x R requests, the clients taking the
#                   next as soon as one ends: a sustained load, whose run ends once rather than
#                   after every 8; default 1)
#   --warmup N      after each start, both servers serve the round's sweep of client counts (then
#                   8 clients) with N-token requests, unmeasured (default 32; 0: one short request
#                   per slot)
#   -k K       the speculative server's --draft-max (default: the server's own default)
#   twins      stories260K's cost twin at the stories110M shape (343 MB F32, memory-bound) drafted by
#              stories-draft's twin at the stories15M shape (the demo's pair; default)
#   self-q8_0  the same target drafting with its own Q8_0 copy (--draft-type q8_0)
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "error: bench_serve: $*" >&2; exit 2; }
val() { [ $# -ge 2 ] || die "$1 needs a value"; } # OPTION "$@"
num() { [[ $2 =~ ^[0-9]+$ ]] || die "$1 takes a number, got '$2'"; }
pair=twins n=128 reps=3 k= threads=$(nproc) out= fixed=() clients="1 2 4 8" warmup=32 per=1
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --pair) val "$@"; pair=$2; shift 2 ;;
    -n) val "$@"; num -n "$2"; n=$2; shift 2 ;;
    --reps) val "$@"; num --reps "$2"; reps=$2; shift 2 ;;
    -k) val "$@"; num -k "$2"; k=$2; shift 2 ;;
    -t) val "$@"; num -t "$2"; threads=$2; shift 2 ;;
    --draft-fixed) fixed=(--draft-fixed); shift ;;
    --clients) val "$@"; clients=${2//,/ }; shift 2 ;;
    --warmup) val "$@"; num --warmup "$2"; warmup=$2; shift 2 ;;
    --per-client) val "$@"; num --per-client "$2"; per=$2; shift 2 ;;
    --out) val "$@"; out=$2; shift 2 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
for c in $clients; do
  case $c in 1|2|4|8) ;; *) die "--clients takes 1, 2, 4 or 8, got '$c'" ;; esac
done
[ -n "${clients// /}" ] || die "--clients is empty"
[ "$n" -ge 1 ] && [ "$reps" -ge 1 ] || die "-n and --reps must be at least 1, got -n $n --reps $reps"
[ "$per" -ge 1 ] || die "--per-client must be at least 1, got $per"
n_req=$((8 * per))
for tool in curl jq; do command -v $tool >/dev/null || { echo "error: bench_serve needs $tool" >&2; exit 1; }; done
BIN=build/specdec
[ -x "$BIN" ] || scripts/setup.sh build

cache=${SPECDEC_CACHE:-.cache/models}
shared=${SPECDEC_SHARED:-../shared}
target="$cache/twin-stories260K-stories110M-d768-l12-h12-kv12-f2048-f32-s1.gguf"
draft="$cache/twin-stories-draft-ztok512.bin-stories15M-d288-l6-h6-kv6-f768-f32-s1.gguf"
mkdir -p "$cache"
[ -s "$target" ] || "$BIN" mkmodel "$target" --twin stories260K --shape stories110M --seed 1 >&2
[ -s "$draft" ] || "$BIN" mkmodel "$draft" --twin stories-draft -z "$shared/models/stories260K/tok512.bin" --shape stories15M --seed 1 >&2
case $pair in
  twins) spec_args=(-md "$draft") ;;
  self-q8_0) spec_args=(--draft-type q8_0) ;;
  *) echo "error: bench_serve: --pair must be twins or self-q8_0, got '$pair'" >&2; exit 2 ;;
esac
common=(-m "$target" -c 512 -np 8 -t "$threads" --port 0 --queue 64)

TMP=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT
start() { # NAME ARGS...: the server's URL into $URL
  local name=$1 log=$TMP/$1.log; shift
  "$BIN" serve "$@" >/dev/null 2>"$log" &
  pids+=($!)
  local port=
  for _ in $(seq 2400); do
    port=$(sed -n 's|^serve: listening on http://[^ ]*:\([0-9][0-9]*\) .*|\1|p' "$log" | head -1)
    [ -n "$port" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ] && break
    sleep 0.05
  done
  [ -n "$port" ] || { echo "error: bench_serve: the $name server did not start:" >&2; cat "$log" >&2; exit 1; }
  URL="http://127.0.0.1:$port"
}
kopt=(); [ -z "$k" ] || kopt=(-k "$k")
# Both servers start afresh for every round, the one started first alternating: two identical plain
# servers started one after the other ran 0.98x each other at 8 clients over 12 rounds (their
# passes 2.7% apart), and the second one's place in memory stayed with it for the whole run.
launch() { # REP
  local p
  for p in ${pids[@]+"${pids[@]}"}; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null || true; done
  pids=()
  if [ $(( $1 % 2 )) = 1 ]; then
    start plain "${common[@]}"; PLAIN=$URL
    start spec "${common[@]}" "${spec_args[@]}" ${kopt[@]+"${kopt[@]}"} ${fixed[@]+"${fixed[@]}"}; SPEC=$URL
  else
    start spec "${common[@]}" "${spec_args[@]}" ${kopt[@]+"${kopt[@]}"} ${fixed[@]+"${fixed[@]}"}; SPEC=$URL
    start plain "${common[@]}"; PLAIN=$URL
  fi
  # warm up: the round's sweep of client counts with the same prompts and shorter requests, so that
  # the rounds measure a server whose batch switch has met each batch size (a fresh one measures
  # both modes at each first: at 8 clients on the cost twins, that learning cost about 3% of a
  # 128-token run), every slot has taken a request (the adaptive policy measures its pass costs on
  # a slot's first one) and the weights have been read once. --warmup 0: only that last, with 8
  # short requests (8 copies of "Once", whose drafts at 8 slots are all accepted: a switch that
  # learned from them drafted at 8 slots for the next 40 rounds)
  local u c
  for u in "$PLAIN" "$SPEC"; do
    if [ "$warmup" -gt 0 ]; then
      for c in $clients 8; do seq 0 7 | xargs -P "$c" -I{} curl -s -m 1200 "$u/v1/completions" -d "@$TMP/warm.{}" -o /dev/null; done
    else
      seq 0 7 | xargs -P 8 -I{} curl -s -m 600 "$u/v1/completions" -d '{"prompt": "Once", "max_tokens": 8}' -o /dev/null
    fi
  done
}

prompts=("Once upon a time, there was a little girl named Lily." "Tom and his dog went to the park to play."
         "One day, a big bird flew over the tall tree." "Sue had a red ball that she loved very much."
         "The sun was hot, so Ben went to the lake." "There was a small cat who lived in a box."
         "Mom and Dad took Amy to see the big boat." "A little fish swam in the blue sea all day.")
# the request bodies are written once: a client's only work while timed is curl
for i in $(seq 0 $((n_req - 1))); do
  jq -n --arg p "${prompts[$((i % 8))]}" --argjson n "$n" '{prompt: $p, max_tokens: $n, temperature: 0, ignore_eos: true}' >"$TMP/body.$i"
done
for i in $(seq 0 7); do
  jq -n --arg p "${prompts[$i]}" --argjson n "$warmup" '{prompt: $p, max_tokens: $n, temperature: 0, ignore_eos: true}' >"$TMP/warm.$i"
done
metric() { curl -s "$1/metrics" | sed -n "s/^specdec:$2 //p"; }
# one run: the 8 x R requests from c clients; prints "tokens/s drafting% mean_accepted"
run() { # URL C TAG
  local r0 d0 a0 v0 t0 t1
  r0=$(metric "$1" rounds_total); d0=$(metric "$1" rounds_drafting_total)
  a0=$(metric "$1" spec_decode_num_accepted_tokens_total); v0=$(metric "$1" spec_decode_num_drafts_total)
  t0=$(date +%s.%N)
  seq 0 $((n_req - 1)) | xargs -P "$2" -I{} curl -s -m 1200 "$1/v1/completions" -d "@$TMP/body.{}" -o "$TMP/$3.{}.json"
  t1=$(date +%s.%N)
  local toks=0
  for i in $(seq 0 $((n_req - 1))); do toks=$((toks + $(jq -r '.usage.completion_tokens // 0' "$TMP/$3.$i.json"))); done
  local r d a v
  r=$(( $(metric "$1" rounds_total) - r0 )); d=$(( $(metric "$1" rounds_drafting_total) - d0 ))
  a=$(( $(metric "$1" spec_decode_num_accepted_tokens_total) - a0 )); v=$(( $(metric "$1" spec_decode_num_drafts_total) - v0 ))
  awk -v t="$toks" -v t0="$t0" -v t1="$t1" -v r="$r" -v d="$d" -v a="$a" -v v="$v" \
    'BEGIN { printf "%.2f %.1f %.2f %d\n", t / (t1 - t0), r ? 100 * d / r : 0, v ? 1 + a / v : 0, t }'
}
echo "specdec serve benchmark: pair $pair, $n_req requests x $n tokens (greedy, ignore_eos), $reps alternating rounds, -t $threads, k $k ${fixed[*]:-adaptive}" >&2
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for rep in $(seq "$reps"); do
  launch "$rep"
  for c in $clients; do
    # alternate which server goes first, so that drift hits both alike
    if [ $(( (rep + c) % 2 )) = 0 ]; then order="plain spec"; else order="spec plain"; fi
    for mode in $order; do
      u=$PLAIN; [ "$mode" = spec ] && u=$SPEC
      res=$(run "$u" "$c" "$mode-c$c-r$rep")
      echo "$mode $c $rep $res" >>"$TMP/results"
      echo "  round $rep, $c client(s), $mode: $res" >&2
    done
  done
done

# outputs: every run of every request equals the plain output of round 1 with the fewest clients
# (one at a time where 1 is measured)
ref=${clients%% *}
diffs=0 n_out=0
for f in "$TMP"/*-c*-r*.json; do
  i=${f%.json}; i=${i##*.}
  n_out=$((n_out + 1))
  [ "$(jq -r '.choices[0].text' "$f")" = "$(jq -r '.choices[0].text' "$TMP/plain-c$ref-r1.$((i % 8)).json")" ] || diffs=$((diffs + 1))
done

report() {
  echo "## specdec serve: aggregate generated tokens/s"
  echo
  echo "Command: \`scripts/bench_serve.sh --pair $pair -n $n --reps $reps ${kopt[*]:-} -t $threads --clients '$clients' --warmup $warmup --per-client $per ${fixed[*]:-}\`; target \`$(basename "$target")\`;"
  echo "drafter: ${spec_args[*]##*/}; $n_req requests (8 prompts x $per) x $n tokens, greedy; both servers --parallel 8 -c 512. Medians over $reps rounds [min-max]."
  echo "ratio columns are medians of the per-round ratios (runs paired within a round)."
  echo
  echo "| clients | plain tokens/s | speculative tokens/s | spec / plain | spec / one plain stream | plain / one plain stream | rounds drafting | mean accepted length |"
  echo "|---|---|---|---|---|---|---|---|"
  awk -v reps="$reps" -v clients="$clients" '
    function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                   return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    function lo(a, n,   i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] < m) m = a[i]; return m }
    function hi(a, n,   i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] > m) m = a[i]; return m }
    { tps[$1, $2, $3] = $4; dr[$1, $2, $3] = $5; mal[$1, $2, $3] = $6 }
    END {
      nc = split(clients, cs, " ")
      has1 = 0
      for (ci = 1; ci <= nc; ci++) has1 = has1 || cs[ci] == 1
      for (ci = 1; ci <= nc; ci++) {
        c = cs[ci]
        for (r = 1; r <= reps; r++) {
          p[r] = tps["plain", c, r]; s[r] = tps["spec", c, r]; q[r] = s[r] / p[r]
          if (has1) { one[r] = s[r] / tps["plain", 1, r]; pone[r] = p[r] / tps["plain", 1, r] }
          d[r] = dr["spec", c, r]; m[r] = mal["spec", c, r]
        }
        vs1 = has1 ? sprintf("%.2fx [%.2f-%.2f] | %.2fx", med(one, reps), lo(one, reps), hi(one, reps), med(pone, reps)) : "- | -"
        printf "| %d | %.1f [%.1f-%.1f] | %.1f [%.1f-%.1f] | %.2fx [%.2f-%.2f] | %s | %.0f%% | %.2f |\n", c,
          med(p, reps), lo(p, reps), hi(p, reps), med(s, reps), lo(s, reps), hi(s, reps), med(q, reps), lo(q, reps), hi(q, reps),
          vs1, med(d, reps), med(m, reps)
      }
    }' "$TMP/results"
  echo
  echo "outputs: $diffs of $n_out responses differ from the plain output of round 1 at $ref client(s)"
}
if [ -n "$out" ]; then report | tee "$out"; else report; fi
[ "$diffs" = 0 ]
