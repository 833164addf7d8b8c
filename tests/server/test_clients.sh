#!/usr/bin/env bash
# Three clients nobody here wrote against specdec serve: the official OpenAI client (npm "openai"),
# the AI SDK ("ai" with "@ai-sdk/openai-compatible") and LangChain ("@langchain/openai"), installed
# by this script with npm into .cache/npm-clients (git ignores it; reinstalled when the package
# list changes). Each client checks the fields it reads (tests/server/*_client.mjs). Without node
# and npm, or when npm cannot install (offline), the test is skipped (exit 77) with the reason;
# under SPECDEC_REQUIRE_SHARED=1 (CI) it fails instead.
# Usage: test_clients.sh SPECDEC_BINARY SOURCE_DIR     SPECDEC_NPM_DIR=DIR installs elsewhere.
set -u
BIN=$1
SRC=$2
SHARED=${SPECDEC_SHARED:-$SRC/../shared}
skip() {
  if [ "${SPECDEC_REQUIRE_SHARED:-0}" = 1 ]; then echo "FAIL: $1 (SPECDEC_REQUIRE_SHARED=1)"; exit 1; fi
  echo "SKIP: $1"; exit 77
}
command -v node >/dev/null && command -v npm >/dev/null || skip "needs node and npm for the client packages (apt-get install nodejs npm)"
for f in models/stories260K/stories260K.bin models/stories-draft/stories-draft.bin; do
  [ -f "$SHARED/$f" ] || skip "needs shared test data $SHARED/$f"
done
DIR=${SPECDEC_NPM_DIR:-$SRC/.cache/npm-clients}
PKGS="openai@7 ai@6 @ai-sdk/openai-compatible@2 @langchain/openai@1 @langchain/core@1 zod@4"
if [ "$(cat "$DIR/.pkgs" 2>/dev/null)" != "$PKGS" ]; then
  rm -rf "$DIR" && mkdir -p "$DIR" && echo '{"private": true}' >"$DIR/package.json"
  # shellcheck disable=SC2086
  timeout 600 npm install --prefix "$DIR" --no-audit --no-fund --silent $PKGS >"$DIR/install.log" 2>&1 ||
    skip "npm install $PKGS failed (offline?): $(tail -n 1 "$DIR/install.log")"
  echo "$PKGS" >"$DIR/.pkgs"
fi
ver() { node -p "require('$DIR/node_modules/$1/package.json').version"; }
echo "node $(node --version); openai $(ver openai), ai $(ver ai), @ai-sdk/openai-compatible $(ver @ai-sdk/openai-compatible), @langchain/openai $(ver @langchain/openai), zod $(ver zod)"
export SPECDEC_MODEL_PATH="$SHARED/models"
TMP=$(mktemp -d)
SPID=
trap '[ -n "$SPID" ] && kill -9 $SPID 2>/dev/null; rm -rf "$TMP"' EXIT  # SPID: the servers' pids
# the context: the tools' instructions take ~600 of stories260K's tokens
GEN=(-m stories260K -md stories-draft -c 2048 -t 1)
expected=$("$BIN" generate "${GEN[@]}" -p "Once upon a time" -n 32 --no-stream 2>/dev/null)
expected=${expected#Once upon a time}
# start NAME ARGS...: a server on a free port; sets PORT_NAME and PID_NAME
start() {
  local name=$1 port=; shift
  "$BIN" serve "$@" --port 0 --api-key test-key 2>"$TMP/$name.log" &
  local pid=$!
  SPID="$SPID $pid"
  for _ in $(seq 1200); do
    port=$(sed -n 's|^serve: listening on http://[^ ]*:\([0-9][0-9]*\) .*|\1|p' "$TMP/$name.log" | head -1)
    [ -n "$port" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.05
  done
  [ -n "$port" ] || { echo "FAIL: the server ($name) did not start"; cat "$TMP/$name.log"; exit 1; }
  printf -v "PORT_$name" %s "$port"
  printf -v "PID_$name" %s "$pid"
}
start main "${GEN[@]}"
# a random-weight Qwen2 (its own chat template), whose JSON objects close: LangChain's jsonMode parses one
ZOO="$SHARED/models/arch-zoo/zoo-qwen2.gguf"
[ -f "$ZOO" ] || { [ "${SPECDEC_REQUIRE_SHARED:-0}" = 1 ] && { echo "FAIL: needs $ZOO"; exit 1; }; ZOO=; }
[ -n "$ZOO" ] && start zoo -m "$ZOO" -md "$SHARED/models/arch-zoo/zoo-qwen2-draft.gguf" -c 1024 -t 1
PORT=$PORT_main
rc=0
# the scripts are copied beside the packages so that node resolves them from there
for c in openai aisdk langchain; do
  cp "$SRC/tests/server/${c}_client.mjs" "$DIR/"
  node "$DIR/${c}_client.mjs" "http://127.0.0.1:$PORT/v1" test-key "$expected" ${ZOO:+"http://127.0.0.1:$PORT_zoo/v1"} || rc=1
done
[ -n "$ZOO" ] || echo "SKIP: LangChain jsonMode on a model whose objects close: no $SHARED/models/arch-zoo/zoo-qwen2.gguf"
for name in main ${ZOO:+zoo}; do
  pid_var=PID_$name
  kill -TERM "${!pid_var}"; wait "${!pid_var}"; src=$?
  [ "$src" = 0 ] || { echo "FAIL: server ($name) exit $src after SIGTERM"; tail -n 20 "$TMP/$name.log"; exit 1; }
done
SPID=
exit $rc
