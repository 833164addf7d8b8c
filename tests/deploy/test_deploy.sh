#!/usr/bin/env bash
# Three `specdec serve` replicas (the stories pair, one thread each) behind HAProxy, started by
# scripts/serve_cluster.sh on free loopback ports, under the load of tests/deploy/load.py (greedy
# completions and chats, half of them streamed, each answer compared with `specdec generate`):
#   1. 300 requests from 16 clients: no failure, every output equal to generate's;
#   2. affinity: a 10-turn conversation with X-Session-Id (and one with the body's user field)
#      stays on one replica, whose slot holds the whole previous turn; without them it spreads;
#   3. a rolling restart under load (each replica SIGTERMed, drained, started again): no failed
#      request, no stream cut;
#   4. a replica kill -9ed in the middle of the load: no failed request that had not started
#      streaming (HAProxy retries them elsewhere), streams running on it cut and counted (the client
#      sees the chunked body end without its last chunk), the replica marked down within 5 s and
#      sent nothing after.
# Also: deploy/haproxy.cfg and the configurations generated for 1..5 replicas pass haproxy -c.
# Usage: test_deploy.sh SPECDEC_BINARY SOURCE_DIR      (exit 77: skipped)
set -u
BIN=$1
SRC=$2
SHARED=${SPECDEC_SHARED:-$SRC/../shared}
PY=/usr/bin/python3
pass=0; fail=0
skip_all() {
  if [ "${SPECDEC_REQUIRE_SHARED:-0}" = 1 ]; then echo "FAIL: $1 (SPECDEC_REQUIRE_SHARED=1)"; exit 1; fi
  echo "SKIP: $1"; exit 77
}
command -v haproxy >/dev/null || skip_all "needs haproxy (scripts/setup.sh installs it: apt-get install haproxy)"
for tool in curl jq; do command -v $tool >/dev/null || skip_all "needs $tool (scripts/setup.sh installs it)"; done
[ -x $PY ] || skip_all "needs $PY (apt-get install python3)"
for f in models/stories260K/stories260K.bin models/stories260K/tok512.bin models/stories-draft/stories-draft.bin; do
  [ -f "$SHARED/$f" ] || skip_all "needs shared test data $SHARED/$f"
done
export SPECDEC_MODEL_PATH="$SHARED/models"
TMP=$(mktemp -d)
DIR=$TMP/cluster
LOADPID=
# every process this test started dies with it: the cluster's by their PID files, the load client
cleanup() {
  local f pid
  [ -n "$LOADPID" ] && kill -9 "$LOADPID" 2>/dev/null
  for f in "$DIR"/*.pid; do
    [ -f "$f" ] && pid=$(cat "$f") && [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
  done
  rm -rf "$TMP"
}
trap cleanup EXIT

ok() { echo "ok   $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | head -c 3000 | sed 's/^/  /'; echo; fail=$((fail+1)); }
check() { # NAME JQ_CONDITION FILE: ok when the condition holds on the file's JSON
  if jq -e "$2" "$3" >/dev/null 2>&1; then ok "$1"; else bad "$1" "$(jq -c '.summary // .' "$3" 2>&1 | head -c 2500)"; fi
}
LOAD=("$PY" "$SRC/tests/deploy/load.py")
since() { awk -v t="$1" -v n="$(date +%s.%N)" 'BEGIN { printf "%.1f", n - t }'; }
CLUSTER=("$SRC/scripts/serve_cluster.sh")

# ---- configurations -----------------------------------------------------------------------------
if out=$(haproxy -c -q -f "$SRC/deploy/haproxy.cfg" 2>&1); then ok "deploy/haproxy.cfg checks"; else bad "deploy/haproxy.cfg" "$out"; fi
for n in 1 2 3 5; do
  "${CLUSTER[@]}" config -n $n --port 9000 --base-port 9101 --dir "$TMP/cfg" >"$TMP/cfg$n.cfg"
  got=$(grep -c '^    server r[0-9]* 127.0.0.1:91[0-9]* check ' "$TMP/cfg$n.cfg")/$(grep -c ' track replicas/r' "$TMP/cfg$n.cfg")
  if out=$(haproxy -c -q -f "$TMP/cfg$n.cfg" 2>&1) && [ "$got" = "$n/$n" ] && grep -q 'bind 127.0.0.1:9000 ' "$TMP/cfg$n.cfg"; then ok "generated for $n replicas: checks, $got servers"
  else bad "generated for $n replicas ($got servers)" "$out"; fi
done
if out=$("${CLUSTER[@]}" start --dir "$TMP/cfg" -- -m stories260K --port 1 2>&1); then bad "a --port among the server's arguments: started" "$out"
elif printf '%s' "$out" | grep -q -- '--port is set by the cluster'; then ok "a --port among the server's arguments is refused"
else bad "refusing --port" "$out"; fi

# ---- the cluster: 5 free consecutive loopback ports (HAProxy, its stats, 3 replicas) -------------
BASE=$($PY - <<'EOF'
import random, socket
for _ in range(200):
    b = random.randrange(20000, 60000)
    socks = []
    try:
        for p in range(b, b + 5):
            s = socket.socket(); s.bind(("127.0.0.1", p)); socks.append(s)
        print(b); break
    except OSError:
        pass
    finally:
        for s in socks: s.close()
EOF
)
[ -n "$BASE" ] || { bad "no 5 free consecutive ports"; exit 1; }
LB=http://127.0.0.1:$BASE
STATS=http://127.0.0.1:$((BASE + 1))/stats
# llama2's template: 10 turns of chat fit stories260K's 512 positions (ChatML's markers, text to
# this vocabulary, would not)
GEN=(-m stories260K -md stories-draft -t 1)
"${LOAD[@]}" refs --bin "$BIN" --out "$TMP/refs.json" --chat-template llama2 -- "${GEN[@]}" || { bad "references by specdec generate"; exit 1; }
t0=$(date +%s.%N)
if ! "${CLUSTER[@]}" start -n 3 --port "$BASE" --stats-port $((BASE + 1)) --base-port $((BASE + 2)) --dir "$DIR" --bin "$BIN" \
     -- "${GEN[@]}" --chat-template llama2 --shutdown-timeout 30; then
  bad "serve_cluster.sh start" "$(tail -n 5 "$DIR"/*.log)"; exit 1
fi
ok "3 replicas and HAProxy up in $(since "$t0") s: $("${CLUSTER[@]}" status --dir "$DIR" | tr -s ' ' | tr '\n' ';')"
pids() { cat "$DIR"/r1.pid "$DIR"/r2.pid "$DIR"/r3.pid | tr '\n' ' '; }

# ---- 1. 300 requests from 16 clients -------------------------------------------------------------
"${LOAD[@]}" run --url "$LB" --refs "$TMP/refs.json" --requests 300 --clients 16 --out "$TMP/load1.json" >/dev/null
echo "     $(jq -c '.summary | {requests, streamed, failed, cut_streams, mismatched, by_replica, wall_s}' "$TMP/load1.json")"
check "300 requests, 16 clients, half streamed: none failed, none cut, every output equal to generate's, all 3 replicas used" \
  '.summary | .requests == 300 and .streamed == 150 and .failed == 0 and .cut_streams == 0 and .mismatched == 0 and (.by_replica | length) == 3' "$TMP/load1.json"

# ---- 2. affinity ----------------------------------------------------------------------------------
# With a key, every turn from the 2nd finds the whole previous turn's prompt in the slot
# (cached_tokens >= the previous prompt_tokens); without, leastconn spreads the turns.
"${LOAD[@]}" conv --url "$LB" --turns 10 --max-tokens 4 --header "session-$RANDOM" --tag "Sam said:" --out "$TMP/conv_h.json" >/dev/null
"${LOAD[@]}" conv --url "$LB" --turns 4 --max-tokens 4 --user "user-$RANDOM" --tag "Ann said:" --out "$TMP/conv_u.json" >/dev/null
"${LOAD[@]}" conv --url "$LB" --turns 10 --max-tokens 4 --tag "Bob said:" --out "$TMP/conv_n.json" >/dev/null
# shellcheck disable=SC2016
reuse='[range(1; length) as $t | select(.[$t].cached_tokens > 0 and .[$t].cached_tokens >= .[$t - 1].prompt_tokens)] | length'
for f in conv_h conv_u conv_n; do
  echo "     $f: $(jq -c "[.[] | [.replica, .prompt_tokens, .cached_tokens]] " "$TMP/$f.json")"
done
check "X-Session-Id: 10 turns on one replica, each from the 2nd reusing the whole previous prompt ($(jq -r "$reuse" "$TMP/conv_h.json")/9)" \
  "length == 10 and ([.[].replica] | unique | length) == 1 and ($reuse) == 9" "$TMP/conv_h.json"
check "the body's user field: 4 turns on one replica, each reusing the previous prompt" \
  "length == 4 and ([.[].replica] | unique | length) == 1 and ($reuse) == 3" "$TMP/conv_u.json"
check "no key: leastconn spreads the 10 turns ($(jq -r '[.[].replica] | unique | join(",")' "$TMP/conv_n.json"); whole previous prompt reused in $(jq -r "$reuse" "$TMP/conv_n.json")/9 turns)" \
  '([.[].replica] | unique | length) >= 2' "$TMP/conv_n.json"

# ---- 3. rolling restart under load ----------------------------------------------------------------
before=$(pids)
"${LOAD[@]}" run --url "$LB" --refs "$TMP/refs.json" --requests 100000 --clients 16 --until-file "$TMP/stop" --max-seconds 240 \
  --progress "$TMP/progress" --out "$TMP/load3.json" >/dev/null &
LOADPID=$!
for _ in $(seq 200); do [ -s "$TMP/progress" ] && break; sleep 0.05; done
t0=$(date +%s.%N)
if "${CLUSTER[@]}" restart --dir "$DIR" >"$TMP/restart.out" 2>&1; then ok "rolling restart in $(since "$t0") s: $(tr '\n' ' ' <"$TMP/restart.out")"
else bad "rolling restart" "$(cat "$TMP/restart.out")"; fi
sleep 0.5
# and past 300 requests, however slowly the replicas serve: stopping at a fixed time after the
# restart left 299 under the sanitizers' build on a busy host (the check wants more than 300)
for _ in $(seq 1200); do
  done_n=$(cat "$TMP/progress" 2>/dev/null || true) # empty while the load rewrites it
  [ "${done_n:-0}" -ge 320 ] && break
  sleep 0.1
done
touch "$TMP/stop"
wait "$LOADPID"; LOADPID=
after=$(pids)
drained=0
for i in 1 2 3; do grep -q '^serve: SIGTERM: draining' "$DIR/r$i.log" && grep -q '^serve: stopped$' "$DIR/r$i.log" && drained=$((drained + 1)); done
echo "     $(jq -c '.summary | {requests, streamed, failed, cut_streams, mismatched, by_replica, wall_s}' "$TMP/load3.json")"
if [ "$drained" = 3 ] && [ "$before" != "$after" ]; then ok "each replica drained and stopped (exit logged), then started again (pids $before-> $after)"
else bad "rolling restart: $drained of 3 drained; pids $before-> $after"; fi
check "rolling restart under load: no failed request, no stream cut, every output equal" \
  '.summary | .requests > 300 and .failed == 0 and .cut_streams == 0 and .mismatched == 0' "$TMP/load3.json"

# ---- 4. a replica kill -9ed under load --------------------------------------------------------------
victim=$(cat "$DIR/r2.pid")
"${LOAD[@]}" run --url "$LB" --refs "$TMP/refs.json" --requests 300 --clients 16 --kill "$victim" --kill-replica r2 \
  --stats "$STATS" --out "$TMP/load2.json" >/dev/null
echo "     $(jq -c '.summary | {requests, streamed, failed, cut_streams, cut_seen_by_client, cut_replicas, streams_running_at_kill, down_after_s, mismatched, by_replica}' "$TMP/load2.json")"
# (the load goes on until the kill, at the first moment a stream of the victim is running, and for
# 150 requests after it: at least 300 requests)
check "kill -9 under load ($(jq .summary.requests "$TMP/load2.json") requests): none failed that had not started streaming (retried elsewhere)" \
  '.summary | .requests >= 300 and .failed == 0' "$TMP/load2.json"
check "kill -9: the $(jq -r .summary.cut_streams "$TMP/load2.json") streams running on the victim end cut, the chunked body without its last chunk (IncompleteRead)" \
  '.summary | .cut_streams >= 1 and .streams_running_at_kill >= 1 and .cut_replicas == ["r2"] and .cut_seen_by_client == ["IncompleteRead"]' "$TMP/load2.json"
check "kill -9: every output that completed equal to generate's" '.summary.mismatched == 0' "$TMP/load2.json"
check "kill -9: HAProxy marks the replica down within 5 s ($(jq -r '.summary.down_after_s // "never"' "$TMP/load2.json") s)" \
  '.summary.down_after_s != null and .summary.down_after_s < 5' "$TMP/load2.json"
# HAProxy's log (accept time, client, backend/server, status, retries): from 5 s after the kill,
# no request went to r2 or was retried off it
kt=$(jq -r .summary.kill_time "$TMP/load2.json")
wait_s=$(awk -v k="$kt" -v n="$(date +%s.%N)" 'BEGIN { w = k + 5.2 - n; print (w > 0) ? w : 0 }')
sleep "$wait_s"
"${LOAD[@]}" run --url "$LB" --refs "$TMP/refs.json" --requests 60 --clients 4 --out "$TMP/load2b.json" >/dev/null
late=$(awk -v t="$kt" '$1 + 0 >= t + 5 && ($3 ~ /\/r2$/ || $5 ~ /^\+?[1-9]/)' "$DIR/haproxy.log" | wc -l)
total=$(awk -v t="$kt" '$1 + 0 >= t + 5' "$DIR/haproxy.log" | wc -l)
if [ "$total" -ge 60 ] && [ "$late" = 0 ]; then ok "from 5 s after the kill, none of $total requests tried r2 (HAProxy's log)"
else bad "after the kill: $late of $total requests went to r2 or were retried" "$(awk -v t="$kt" '$1 + 0 >= t + 5' "$DIR/haproxy.log" | head -5)"; fi
check "and they were served: no failure" '.summary | .failed == 0 and .mismatched == 0' "$TMP/load2b.json"
"${CLUSTER[@]}" status --dir "$DIR" >"$TMP/status.out"; rc=$?
if [ "$rc" = 1 ] && grep -q '^r2  pid - .*haproxy: DOWN' "$TMP/status.out"; then ok "status: r2 gone and DOWN (exit 1)"
else bad "status after the kill (exit $rc)" "$(cat "$TMP/status.out")"; fi

# ---- stop: every process gone -----------------------------------------------------------------------
left=$(cat "$DIR"/*.pid)
"${CLUSTER[@]}" stop --dir "$DIR" >/dev/null
alive=0
# (an exited process waits as a zombie until init reaps it: that counts as gone)
for pid in $left; do
  st=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null)
  [ -n "$st" ] && [ "$st" != Z ] && alive=$((alive + 1))
done
if [ "$alive" = 0 ] && ! ls "$DIR"/*.pid >/dev/null 2>&1; then ok "stop: the replicas and HAProxy have exited"
else bad "stop: $alive processes left"; fi

echo "deploy: $pass passed, $fail failed"
[ "$fail" = 0 ]
