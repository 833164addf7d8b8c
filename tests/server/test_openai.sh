#!/usr/bin/env bash
# The official OpenAI client (npm "openai", installed by this script into .cache/npm-openai, which
# git ignores) against specdec serve: a streamed chat, a completion, and errors. Skipped (exit 77)
# with a message when node/npm are absent or the package cannot be installed (offline).
# Usage: test_openai.sh SPECDEC_BINARY SOURCE_DIR        OPENAI_NPM=openai@7 picks the version.
set -u
BIN=$1
SRC=$2
SHARED=${SPECDEC_SHARED:-$SRC/../shared}
skip() { echo "SKIP: $1"; exit 77; }
command -v node >/dev/null && command -v npm >/dev/null || skip "needs node and npm for the openai package"
for f in models/stories260K/stories260K.bin models/stories-draft/stories-draft.bin; do
  if [ ! -f "$SHARED/$f" ]; then
    [ "${SPECDEC_REQUIRE_SHARED:-0}" = 1 ] && { echo "FAIL: needs shared test data $SHARED/$f"; exit 1; }
    skip "needs shared test data $SHARED/$f"
  fi
done
DIR=${SPECDEC_NPM_DIR:-$SRC/.cache/npm-openai}
PKG=${OPENAI_NPM:-openai@7}
if [ ! -f "$DIR/node_modules/openai/package.json" ] || [ "$(cat "$DIR/.pkg" 2>/dev/null)" != "$PKG" ]; then
  mkdir -p "$DIR" && [ -f "$DIR/package.json" ] || echo '{"private": true}' >"$DIR/package.json"
  timeout 300 npm install --prefix "$DIR" --no-audit --no-fund --silent "$PKG" >"$DIR/install.log" 2>&1 ||
    skip "npm install $PKG failed (offline?): $(tail -n 1 "$DIR/install.log")"
  echo "$PKG" >"$DIR/.pkg"
fi
echo "openai package $(sed -n 's/.*"version": *"\([^"]*\)".*/\1/p' "$DIR/node_modules/openai/package.json" | head -1), node $(node --version)"
export SPECDEC_MODEL_PATH="$SHARED/models"
TMP=$(mktemp -d)
SPID=
trap '[ -n "$SPID" ] && kill -9 $SPID 2>/dev/null; rm -rf "$TMP"' EXIT
GEN=(-m stories260K -md stories-draft -c 256 -t 1)
expected=$("$BIN" generate "${GEN[@]}" -p "Once upon a time" -n 32 --no-stream 2>/dev/null)
expected=${expected#Once upon a time}
"$BIN" serve "${GEN[@]}" --port 0 --alias stories260K --api-key test-key 2>"$TMP/log" &
SPID=$!
PORT=
for _ in $(seq 1200); do
  PORT=$(sed -n 's|^serve: listening on http://[^ ]*:\([0-9][0-9]*\) .*|\1|p' "$TMP/log" | head -1)
  [ -n "$PORT" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] && break
  kill -0 $SPID 2>/dev/null || break
  sleep 0.05
done
[ -n "$PORT" ] || { echo "FAIL: the server did not start"; cat "$TMP/log"; exit 1; }
# the script is copied beside the package so that node resolves "openai" from there
cp "$SRC/tests/server/openai_client.mjs" "$DIR/client.mjs"
node "$DIR/client.mjs" "http://127.0.0.1:$PORT/v1" test-key "$expected"; rc=$?
kill -TERM $SPID; wait $SPID; src=$?; SPID=
[ "$src" = 0 ] || { echo "FAIL: server exit $src after SIGTERM"; tail -n 20 "$TMP/log"; exit 1; }
exit $rc
