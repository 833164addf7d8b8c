#!/usr/bin/env bash
# N `specdec serve` replicas on loopback ports behind HAProxy (deploy/haproxy.cfg, rewritten for N):
# start, stop, status, a rolling restart, and the configuration alone. Processes are tracked by
# the PID files in the state directory and stopped by those PIDs only.
#
#   scripts/serve_cluster.sh start [OPTIONS] -- SERVE_ARGS...   e.g. -- -m TARGET -md DRAFT -t 1
#   scripts/serve_cluster.sh stop|status|restart [--dir DIR]    restart: each replica in turn
#   scripts/serve_cluster.sh config [OPTIONS]                   print the HAProxy configuration
# OPTIONS: -n N replicas (3); --port P for HAProxy (8080); --base-port B: replica i listens on
# B+i-1 (8081); --stats-port S: HAProxy's stats page and metrics (8404); --dir DIR: state, logs and
# the generated configuration ($SPECDEC_CLUSTER_DIR, else .cache/cluster); --bin PATH (build/specdec);
# --wait S: how long a replica may take to load (300).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "serve_cluster: $*" >&2; exit 1; }
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

[ $# -ge 1 ] || usage
CMD=$1; shift
N=3 PORT=8080 BASE=8081 STATS=8404 WAIT=300
DIR=${SPECDEC_CLUSTER_DIR:-$ROOT/.cache/cluster}
BIN=$ROOT/build/specdec
num() { [[ $2 =~ ^[0-9]+$ ]] || die "$1 must be a number, got '$2'"; }
while [ $# -gt 0 ]; do
  case $1 in
    -n) num -n "${2-}"; N=$2; shift 2 ;;
    --port) num --port "${2-}"; PORT=$2; shift 2 ;;
    --base-port) num --base-port "${2-}"; BASE=$2; shift 2 ;;
    --stats-port) num --stats-port "${2-}"; STATS=$2; shift 2 ;;
    --wait) num --wait "${2-}"; WAIT=$2; shift 2 ;;
    --dir) DIR=${2:?--dir needs a directory}; shift 2 ;;
    --bin) BIN=${2:?--bin needs a path}; shift 2 ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) die "unknown option '$1' (the server's arguments go after --)" ;;
  esac
done
SERVE_ARGS=("$@")
{ [ "$N" -ge 1 ] && [ "$N" -le 64 ]; } || die "-n must be in 1..64, got $N"

# config: deploy/haproxy.cfg with the lines marked "cluster:" rewritten for N replicas
config() {
  awk -v n="$N" -v port="$PORT" -v base="$BASE" -v stats="$STATS" -v sock="$DIR/haproxy.sock" '
    /# cluster: frontend/ { sub(/bind [^ ]+/, "bind 127.0.0.1:" port) }
    /# cluster: stats/    { sub(/bind [^ ]+/, "bind 127.0.0.1:" stats) }
    /# cluster: runtime API/ { sub(/stats socket [^ ]+/, "stats socket " sock) }
    /# cluster: replica/ {
      if (!r) for (i = 1; i <= n; i++) printf "    server r%d 127.0.0.1:%d check   # cluster: replica\n", i, base + i - 1
      r = 1; next }
    /# cluster: tracked/ {
      if (!t) for (i = 1; i <= n; i++) printf "    server r%d 127.0.0.1:%d track replicas/r%d   # cluster: tracked\n", i, base + i - 1, i
      t = 1; next }
    { print }' "$ROOT/deploy/haproxy.cfg"
}

# alive PIDFILE NAME: the PID in the file, if that process is still ours (its command names NAME)
# (no `| grep -q` under pipefail: grep's early exit can fail the pipeline with its writer's SIGPIPE)
alive() {
  local pid cmd
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmd == *"$2"* ]] && echo "$pid"
}
health() { curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/health" || true; }
# HAProxy's view of the replicas: "r1 UP", "r2 DOWN", ...
lb_states() { { curl -s -m 2 "http://127.0.0.1:$STATS/stats;csv" 2>/dev/null || true; } | awk -F, '$1 == "replicas" && $2 ~ /^r[0-9]+$/ { print $2, $18 }'; }
load_state() {
  [ -f "$DIR/cluster.env" ] || die "no cluster in $DIR (start one first)"
  # shellcheck disable=SC1091
  . "$DIR/cluster.env"   # declare -g: the start's settings, global though read in a function
}

start_replica() { # I
  local i=$1 port=$((BASE + $1 - 1))
  "$BIN" serve --host 127.0.0.1 --port "$port" "${SERVE_ARGS[@]}" >>"$DIR/r$i.log" 2>&1 </dev/null &
  echo $! >"$DIR/r$i.pid"
}
wait_healthy() { # I: /health 200 within --wait seconds, or the replica died
  local i=$1 port=$((BASE + $1 - 1)) t pid
  pid=$(cat "$DIR/r$i.pid")
  for ((t = 0; t < WAIT * 10; t++)); do
    [ "$(health "$port")" = 200 ] && return 0
    # (not alive(): a child not yet past its exec still has this script's command line)
    gone "$pid" && { tail -n 5 "$DIR/r$i.log" >&2; die "replica r$i exited (log: $DIR/r$i.log)"; }
    sleep 0.1
  done
  die "replica r$i not ready after ${WAIT}s (log: $DIR/r$i.log)"
}
wait_lb() { # I STATE: HAProxy sees replica I in STATE (UP, DOWN), within 30 s
  local t
  for ((t = 0; t < 300; t++)); do
    [[ $'\n'$(lb_states)$'\n' == *$'\n'"r$1 $2"$'\n'* ]] && return 0
    sleep 0.1
  done
  die "HAProxy does not see r$1 $2 after 30 s: $(lb_states | tr '\n' ' ')"
}
# stop_pid PIDFILE NAME SIGNAL GRACE: signal (-: already signalled; a second SIGTERM would make a
# replica skip its drain), wait GRACE seconds, then SIGKILL
stop_pid() {
  local pid t
  pid=$(cat "$1" 2>/dev/null) || return 0
  [ -n "$pid" ] || { rm -f "$1"; return 0; }
  # not ours (or already in its exit, past its command line): never signalled
  alive "$1" "$2" >/dev/null || { for ((t = 0; t < 50; t++)); do gone "$pid" && break; sleep 0.1; done; rm -f "$1"; return 0; }
  [ "$3" = - ] || kill "-$3" "$pid" 2>/dev/null || true
  for ((t = 0; t < $4 * 10; t++)); do gone "$pid" && break; sleep 0.1; done
  gone "$pid" || { echo "serve_cluster: $2 (pid $pid) still running after ${4}s: SIGKILL" >&2; kill -9 "$pid" 2>/dev/null || true; }
  for ((t = 0; t < 50; t++)); do gone "$pid" && break; sleep 0.1; done
  rm -f "$1"
}
# gone PID: exited, as a zombie too (its sockets are closed then; not before: a process in its exit
# has lost its command line before its descriptors, and its port may still be bound)
gone() {
  local st
  st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 0
  [ -z "$st" ] || [ "$st" = Z ] || [ "$st" = X ]
}
# the drain a replica may take: its --shutdown-timeout (30 by default), plus 15 s to send and exit
grace() {
  local i t=30
  for ((i = 0; i < ${#SERVE_ARGS[@]}; i++)); do
    [ "${SERVE_ARGS[$i]}" = --shutdown-timeout ] && t=${SERVE_ARGS[$((i + 1))]:-30}
  done
  echo $((t + 15))
}

case $CMD in
  config) config ;;
  start)
    command -v haproxy >/dev/null || die "needs haproxy (apt-get install haproxy; scripts/setup.sh installs it)"
    [ -x "$BIN" ] || die "no server binary $BIN (build first: scripts/setup.sh)"
    for a in "${SERVE_ARGS[@]}"; do
      case $a in --host|--port) die "$a is set by the cluster (replica i listens on 127.0.0.1:base-port+i-1)" ;; esac
    done
    mkdir -p "$DIR"
    for f in "$DIR"/r*.pid "$DIR/haproxy.pid"; do
      [ -f "$f" ] && alive "$f" "" >/dev/null && die "a cluster is running in $DIR (stop it first)"
    done
    rm -f "$DIR"/r*.pid "$DIR"/r*.log "$DIR/haproxy.pid" "$DIR/haproxy.log"
    declare -p N PORT BASE STATS WAIT BIN SERVE_ARGS | sed 's/^declare /declare -g /' >"$DIR/cluster.env"
    config >"$DIR/haproxy.cfg"
    haproxy -c -q -f "$DIR/haproxy.cfg" || die "the generated $DIR/haproxy.cfg does not check"
    trap 'echo "serve_cluster: start failed; stopping what started" >&2; "$0" stop --dir "$DIR" >&2' EXIT
    for ((i = 1; i <= N; i++)); do start_replica "$i"; done
    for ((i = 1; i <= N; i++)); do wait_healthy "$i"; done
    haproxy -db -f "$DIR/haproxy.cfg" >"$DIR/haproxy.log" 2>&1 </dev/null &
    echo $! >"$DIR/haproxy.pid"
    for ((i = 1; i <= N; i++)); do wait_lb "$i" UP; done
    trap - EXIT
    echo "serve_cluster: $N replicas (127.0.0.1:$BASE-$((BASE + N - 1))) behind http://127.0.0.1:$PORT (stats: http://127.0.0.1:$STATS/stats, state: $DIR)"
    ;;
  stop)
    load_state
    # HAProxy stops taking connections and finishes those it has (SIGUSR1); the replicas drain
    pid=$(alive "$DIR/haproxy.pid" haproxy) && kill -USR1 "$pid" 2>/dev/null
    for ((i = 1; i <= N; i++)); do pid=$(alive "$DIR/r$i.pid" "$BIN") && kill -TERM "$pid"; done
    g=$(grace)
    for ((i = 1; i <= N; i++)); do stop_pid "$DIR/r$i.pid" "$BIN" - "$g"; done
    stop_pid "$DIR/haproxy.pid" haproxy - 10
    echo "serve_cluster: stopped"
    ;;
  status)
    load_state
    rc=0
    states=$(lb_states)
    for ((i = 1; i <= N; i++)); do
      port=$((BASE + i - 1))
      if pid=$(alive "$DIR/r$i.pid" "$BIN"); then h=$(health "$port"); else pid=-; h=-; rc=1; fi
      lb=$(printf '%s\n' "$states" | awk -v r="r$i" '$1 == r { print $2 }')
      printf 'r%d  pid %-7s 127.0.0.1:%-5d /health %-3s  haproxy: %s\n' "$i" "$pid" "$port" "$h" "${lb:--}"
    done
    if pid=$(alive "$DIR/haproxy.pid" haproxy); then echo "haproxy  pid $pid  http://127.0.0.1:$PORT  stats http://127.0.0.1:$STATS/stats"
    else echo "haproxy  not running"; rc=1; fi
    exit $rc
    ;;
  restart)
    load_state
    # one replica at a time: SIGTERM (it drains: /health 503, new requests 503 and retried
    # elsewhere by HAProxy), wait for it to exit, start it, wait until HAProxy sees it UP again
    g=$(grace)
    for ((i = 1; i <= N; i++)); do
      stop_pid "$DIR/r$i.pid" "$BIN" TERM "$g"
      start_replica "$i"
      wait_healthy "$i"
      wait_lb "$i" UP
      echo "serve_cluster: r$i restarted"
    done
    ;;
  *) usage ;;
esac
