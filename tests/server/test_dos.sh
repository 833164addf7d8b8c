#!/usr/bin/env bash
# specdec serve under hostile load (issue 27's goal): 200 uploads stalled in their bodies (each
# announcing 4 MiB and holding 256 KiB) and 5 clients sending 3.8 MiB prompts back to back, while
# /health is polled, the server's RSS sampled and a normal completion timed. The server must answer
# /health within 100 ms (90% of the polls; the rest within 500 ms: the machine is shared), stay
# under 200 MB of RSS, and finish the completion (median of 5) within 2x its unloaded median (the
# larger of the medians before and after the load; the timing goals get one second try).
# The attackers run at nice 19: they share this machine's CPUs with the server, which a remote
# attacker's sockets do not. Then the same 5 clients against Qwen2's tokenizer with a 32768-token
# context, where their prompts (letters, digits, words) are tokenized before being refused for
# the context, and /health under the same rule. Loopback only; every loop is bounded. In a sanitizer build
# (SPECDEC_SANITIZED=1) the same load runs, for the sanitizers' sake, and the figures are reported
# but not held to: ASan's quarantine alone holds 256 MB, and its checks change every time.
# Usage: test_dos.sh SPECDEC_BINARY SOURCE_DIR      (exit 77: skipped)
set -u
BIN=$1
SRC=$2
skip() {
  if [ "${SPECDEC_REQUIRE_SHARED:-0}" = 1 ]; then echo "FAIL: $1 (SPECDEC_REQUIRE_SHARED=1)"; exit 1; fi
  echo "SKIP: $1"; exit 77
}
for tool in curl python3; do command -v $tool >/dev/null || skip "needs $tool"; done
PY=$(command -v /usr/bin/python3 || command -v python3)
TMP=$(mktemp -d)
SPID= ST= BG=
cleanup() { for p in $BG $ST $SPID; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT
ulimit -n 4096 2>/dev/null || ulimit -n "$(ulimit -Hn)"
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

# a model that takes a visible time per token (77 MB of F32 weights), so that the completion's time
# is the engine's and not the HTTP round trip's
"$BIN" mkmodel "$TMP/m.gguf" --dim 512 --layers 6 --heads 8 --hidden 1536 --vocab 512 --ctx 4096 2>/dev/null
# LOG ARGS...: specdec serve started and healthy (SPID, PORT, U set), or the test stops
serve() {
  local log=$1; shift
  "$BIN" serve "$@" --port 0 2>"$log" &
  SPID=$!
  PORT=
  for _ in $(seq 1200); do
    PORT=$(sed -n 's|^serve: listening on http://[^ ]*:\([0-9][0-9]*\) .*|\1|p' "$log" | head -1)
    [ -n "$PORT" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] && break
    PORT=
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.05
  done
  [ -n "$PORT" ] || { echo "FAIL: the server did not start: $*"; cat "$log"; exit 1; }
  U=http://127.0.0.1:$PORT
}
# The /health goal over $TMP/health ("seconds status" lines): n_ok, slowest and health_ok set
health_verdict() {
  n_ok=$(awk '$2 == 200 && $1 < 0.1' "$TMP/health" | wc -l)
  slowest=$(sort -n "$TMP/health" | tail -n 1 | cut -d' ' -f1)
  health_ok=0
  [ "$n_ok" -ge 27 ] && awk -v s="$slowest" 'BEGIN {exit !(s < 0.5)}' && ! grep -qv ' 200$' "$TMP/health" && health_ok=1
}
serve "$TMP/log" -m "$TMP/m.gguf" -c 512 -np 2 -t 1
cmpl() { curl -s -m 60 -o /dev/null -w '%{time_total}\n' "$U/v1/completions" -d '{"prompt": "a b c", "max_tokens": 64, "temperature": 0, "ignore_eos": true}'; }
median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
rss() { awk '/^VmRSS/ {print int($2 / 1024)}' "/proc/$SPID/status"; }

cmpl >/dev/null # warm
rss0=$(rss)
echo "unloaded: RSS $rss0 MB"
nice -n 19 "$PY" "$SRC/tests/server/dos_load.py" stall "$PORT" 200 262144 >"$TMP/stall" & ST=$!
for _ in $(seq 300); do grep -q ready "$TMP/stall" && break; sleep 0.1; done
grep -q "ready 200" "$TMP/stall" || bad "200 stalled uploads: $(cat "$TMP/stall")"
peak=$(rss)

# One measurement: the completion's unloaded median before and after the prompt clients (the
# larger is the base: this machine is shared, its load drifts), and under them /health 30 times,
# the completion 5 times, the RSS throughout. The timing goals get a second try when the first
# misses them (a neighbour's burst); the RSS goal none.
measure() {
  local b1 b2
  b1=$(for _ in 1 2 3 4 5; do cmpl; done | median)
  nice -n 19 "$PY" "$SRC/tests/server/dos_load.py" big "$PORT" 5 3.8 15 >"$TMP/big" & BG=$!
  sleep 1
  : >"$TMP/health"
  : >"$TMP/cmpl"
  for i in $(seq 30); do
    curl -s -m 5 -o /dev/null -w '%{time_total} %{http_code}\n' "$U/health" >>"$TMP/health"
    r=$(rss); [ "$r" -gt "$peak" ] && peak=$r
    if [ $((i % 6)) = 0 ]; then cmpl >>"$TMP/cmpl"; fi
    sleep 0.1
  done
  loaded=$(median <"$TMP/cmpl")
  wait "$BG"; BG=
  b2=$(for _ in 1 2 3 4 5; do cmpl; done | median)
  base=$(awk -v a="$b1" -v b="$b2" 'BEGIN {print (a > b ? a : b)}')
  echo "5 clients with 3.8 MiB prompts got: $(cat "$TMP/big") (400: refused by their length before tokenizing; 503: past the body budget)"
  echo "the server: $(curl -s "$U/metrics" | grep -E '^specdec:(connections|request_bytes_buffered) ' | tr '\n' ' ')"
  echo "completion: unloaded medians $b1 s before and $b2 s after, $loaded s under load ($(tr '\n' ' ' <"$TMP/cmpl"))"
  health_verdict
  cmpl_ok=0; awk -v l="$loaded" -v b="$base" 'BEGIN {exit !(l <= 2 * b)}' && cmpl_ok=1
}
measure
if [ "${SPECDEC_SANITIZED:-0}" = 1 ]; then
  echo "sanitizer build: /health $n_ok of 30 within 100 ms, RSS at most $peak MB, completion median $loaded s against $base s (not held to)"
  [ "$(grep -c ' 200$' "$TMP/health")" = 30 ] && [ -n "$loaded" ] && ok "under load: /health and completions answered" || bad "under load: $(cat "$TMP/health")"
  kill "$ST"; ST=
  kill -TERM "$SPID"; wait "$SPID"; rc=$?; SPID=
  [ "$rc" = 0 ] && ok "SIGTERM exits 0" || bad "exit $rc after SIGTERM: $(tail -n 5 "$TMP/log")"
  exit $fail
fi
if [ "$health_ok$cmpl_ok" != 11 ]; then echo "(a goal missed: measuring once more)"; measure; fi
if [ "$health_ok" = 1 ]; then ok "/health under load: $n_ok of 30 within 100 ms, the slowest $slowest s"
else bad "/health under load: $n_ok of 30 within 100 ms, the slowest $slowest s: $(sort -n "$TMP/health" | tail -n 5 | tr '\n' ' ')"; fi
[ "$peak" -lt 200 ] && ok "RSS under load: at most $peak MB (from $rss0)" || bad "RSS under load: $peak MB"
if [ "$cmpl_ok" = 1 ]; then ok "a normal completion under load: median $loaded s against $base s unloaded"
else bad "a normal completion under load: median $loaded s against $base s unloaded: $(tr '\n' ' ' <"$TMP/cmpl")"; fi
kill "$ST"; ST=
kill -TERM "$SPID"; wait "$SPID"; rc=$?; SPID=
[ "$rc" = 0 ] && ok "SIGTERM exits 0" || bad "exit $rc after SIGTERM: $(tail -n 5 "$TMP/log")"

# Prompts that are tokenized: above, every 3.8 MiB prompt is refused by its byte length, which a
# 512-token context allows. Qwen2's tokenizer (152k pieces) with a 32768-token context lets them
# through to the tokenizer (off the HTTP thread), where digit runs were quadratic (11 minutes for
# 4 MB): 5 clients send runs of letters, digits and words while /health is polled, under the same
# 100 ms rule. (A sanitizer build has left above.)
ZOO=${SPECDEC_SHARED:-$SRC/../shared}/models/arch-zoo/zoo-qwen2.gguf
if [ ! -f "$ZOO" ]; then
  if [ "${SPECDEC_REQUIRE_SHARED:-0}" = 1 ]; then bad "tokenized prompts: no $ZOO (SPECDEC_REQUIRE_SHARED=1)"
  else echo "skip tokenized prompts: no $ZOO"; fi
  exit $fail
fi
serve "$TMP/log2" -m "$ZOO" -c 32768 -np 2 -t 1
health_under() { # UNIT: /health 30 times under 5 clients sending 3.8 MiB of UNIT repeated, for 8 s
  nice -n 19 "$PY" "$SRC/tests/server/dos_load.py" big "$PORT" 5 3.8 8 "$1" >"$TMP/big" & BG=$!
  sleep 1
  : >"$TMP/health"
  for _ in $(seq 30); do
    curl -s -m 5 -o /dev/null -w '%{time_total} %{http_code}\n' "$U/health" >>"$TMP/health"
    sleep 0.1
  done
  wait "$BG"; BG=
  health_verdict
}
for unit in a 1234567890 "hello world "; do
  health_under "$unit"
  [ "$health_ok" = 1 ] || health_under "$unit" # one second try, as above
  got=$(cat "$TMP/big")
  # tokenized: refused for the context (400 context_length_exceeded), never by the byte bound
  case $got in
    *400:*) ;;
    *) bad "tokenized prompts of '$unit': answers $got" ;;
  esac
  "$PY" -c 'import json, sys; print(json.dumps({"prompt": sys.argv[1] * (600000 // len(sys.argv[1])), "max_tokens": 1}))' "$unit" >"$TMP/body"
  grep -q '"code":"context_length_exceeded"' <(curl -s -m 60 "$U/v1/completions" --data-binary @"$TMP/body") ||
    bad "a 600 KB prompt of '$unit' was not tokenized and refused for the context"
  if [ "$health_ok" = 1 ]; then ok "/health while 5 clients' '$unit' prompts are tokenized ($got): $n_ok of 30 within 100 ms, the slowest $slowest s"
  else bad "/health while '$unit' prompts are tokenized ($got): $n_ok of 30 within 100 ms, the slowest $slowest s"; fi
done
kill -TERM "$SPID"; wait "$SPID"; rc=$?; SPID=
[ "$rc" = 0 ] && ok "SIGTERM exits 0 (Qwen2 server)" || bad "exit $rc after SIGTERM: $(tail -n 5 "$TMP/log2")"
exit $fail
