#!/usr/bin/env bash
# Measures replicas behind HAProxy (scripts/serve_cluster.sh) with tests/deploy/load.py and prints a
# markdown report: throughput with 1, 2 and 3 replicas (16 clients, greedy requests not streamed),
# the latency HAProxy adds (one client, short requests, alternating direct and through HAProxy),
# and the time HAProxy takes to mark a kill -9ed replica down, idle (health checks alone) and
# under load (a refused connection from real traffic).
# Usage: scripts/bench_cluster.sh [-- SERVE_ARGS...]   (default: the stories pair, -t 1 per replica)
# Environment: BENCH_REQUESTS (600), BENCH_LAT (1000: requests each way), BENCH_REPS (3), BENCH_PORT (first
# of 5 ports, 38080), BENCH_PARTS (which parts: "throughput latency down")
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ "${1:-}" = -- ] && shift
ARGS=("$@")
[ ${#ARGS[@]} -gt 0 ] || ARGS=(-m stories260K -md stories-draft -t 1)
export SPECDEC_MODEL_PATH=${SPECDEC_MODEL_PATH:-$ROOT/../shared/models}
PARTS=${BENCH_PARTS:-throughput latency down}
REQ=${BENCH_REQUESTS:-600} LAT=${BENCH_LAT:-1000} REPS=${BENCH_REPS:-3} P=${BENCH_PORT:-38080}
BIN=$ROOT/build/specdec
PY=/usr/bin/python3
LOAD=("$PY" "$ROOT/tests/deploy/load.py")
TMP=$(mktemp -d)
DIR=$TMP/cluster
trap '"$ROOT/scripts/serve_cluster.sh" stop --dir "$DIR" >/dev/null 2>&1; rm -rf "$TMP"' EXIT
cluster() { "$ROOT/scripts/serve_cluster.sh" "$1" --dir "$DIR" "${@:2}"; }
start() { cluster start -n "$1" --port "$P" --stats-port $((P + 1)) --base-port $((P + 2)) --bin "$BIN" -- "${ARGS[@]}" >/dev/null; }
med() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

"${LOAD[@]}" refs --bin "$BIN" --out "$TMP/refs.json" -- "${ARGS[@]}"
"${LOAD[@]}" refs --bin "$BIN" --out "$TMP/short.json" --max-tokens 8 -- "${ARGS[@]}"
echo "specdec $(git -C "$ROOT" rev-parse --short HEAD), $(haproxy -v | head -1 | cut -d' ' -f1-3), $(nproc) vCPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "replica arguments: ${ARGS[*]} (4 slots each)"
part() { [[ " $PARTS " == *" $1 "* ]]; }
if part throughput; then
echo
echo "| replicas | requests/s | tokens/s | latency median (ms) | p99 (ms) | failed | runs |"
echo "|---|---|---|---|---|---|---|"
for n in 1 2 3; do
  start "$n"
  for r in $(seq "$REPS"); do
    "${LOAD[@]}" run --url "http://127.0.0.1:$P" --refs "$TMP/refs.json" --requests "$REQ" --clients 16 --stream-every 0 --out "$TMP/t$n.$r.json" >/dev/null
  done
  cluster stop >/dev/null
  rps=$(for r in $(seq "$REPS"); do jq .summary.requests_per_s "$TMP/t$n.$r.json"; done | med)
  tps=$(for r in $(seq "$REPS"); do jq .summary.tokens_per_s_not_streamed "$TMP/t$n.$r.json"; done | med)
  lm=$(for r in $(seq "$REPS"); do jq .summary.latency_ms_url0.median "$TMP/t$n.$r.json"; done | med)
  lp=$(for r in $(seq "$REPS"); do jq .summary.latency_ms_url0.p99 "$TMP/t$n.$r.json"; done | med)
  fl=$(for r in $(seq "$REPS"); do jq .summary.failed "$TMP/t$n.$r.json"; done | awk '{ s += $1 } END { print s }')
  echo "| $n | $rps | $tps | $lm | $lp | $fl | $REPS x $REQ requests, 16 clients; medians of the runs |"
done
fi
if part latency; then
echo
start 1
"${LOAD[@]}" run --url "http://127.0.0.1:$P" --url "http://127.0.0.1:$((P + 2))" --refs "$TMP/short.json" --requests $((2 * LAT)) --clients 1 \
  --stream-every 0 --out "$TMP/lat.json" >/dev/null
cluster stop >/dev/null
echo "Added latency: one client, $LAT requests of 8 tokens each way, alternating through HAProxy and direct to the replica:"
echo
echo "| path | median (ms) | p99 (ms) |"
echo "|---|---|---|"
echo "| through HAProxy | $(jq .summary.latency_ms_url0.median "$TMP/lat.json") | $(jq .summary.latency_ms_url0.p99 "$TMP/lat.json") |"
echo "| direct | $(jq .summary.latency_ms_url1.median "$TMP/lat.json") | $(jq .summary.latency_ms_url1.p99 "$TMP/lat.json") |"
echo "| added, per pair of requests (the same prompt each way, one after the other) | $(jq .summary.latency_ms_added.median "$TMP/lat.json") | $(jq .summary.latency_ms_added.p99 "$TMP/lat.json") |"
fi
if part down; then
echo
# marked down: idle, the health checks alone (inter 1s, fall 2); under load, the first refused connection
start 3
idle=() busy=()
for r in $(seq 5); do
  pid=$(cat "$DIR/r2.pid")
  sleep 1.$((RANDOM % 10))   # a random phase against the checks' period
  kill -9 "$pid"; t0=$(date +%s.%N)
  for _ in $(seq 500); do
    [[ $(curl -s "http://127.0.0.1:$((P + 1))/stats;csv") == *$'\n'replicas,r2,*DOWN* ]] && break
    sleep 0.01
  done
  idle+=("$(awk -v t="$t0" -v n="$(date +%s.%N)" 'BEGIN { print n - t }')")
  cluster restart >/dev/null
  "${LOAD[@]}" run --url "http://127.0.0.1:$P" --refs "$TMP/refs.json" --requests 300 --clients 16 --kill "$(cat "$DIR/r2.pid")" --kill-replica r2 \
    --stats "http://127.0.0.1:$((P + 1))/stats" --out "$TMP/k$r.json" >/dev/null
  busy+=("$(jq '.summary.down_after_s' "$TMP/k$r.json")")
  cluster restart >/dev/null
done
cluster stop >/dev/null
echo "Time from kill -9 to HAProxy marking the replica DOWN (5 kills each; its stats polled every 10-20 ms):"
echo
echo "| | times (s) | median (s) |"
echo "|---|---|---|"
echo "| idle (health checks: every 1 s, 2 failures) | $(printf '%.2f ' "${idle[@]}") | $(printf '%s\n' "${idle[@]}" | med | xargs printf '%.2f') |"
echo "| under load (16 clients; a refused connection marks it down, the request retried elsewhere) | $(printf '%.3f ' "${busy[@]}") | $(printf '%s\n' "${busy[@]}" | med | xargs printf '%.3f') |"
echo
echo "Cut streams in those 5 loaded kills: $(for r in $(seq 5); do jq .summary.cut_streams "$TMP/k$r.json"; done | paste -sd' '); failed requests: $(for r in $(seq 5); do jq .summary.failed "$TMP/k$r.json"; done | awk '{ s += $1 } END { print s }')"
fi
