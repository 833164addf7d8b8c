#!/usr/bin/env bash
# Schema validity: sd_grammar_gen generates under each schema of tests/grammar/schemas.json with a
# random-weight zoo model and stories260K (several seeds and temperatures), then npm "ajv" (with
# "ajv-formats" and "ajv-draft-04", installed by this script into .cache/npm-ajv, which git ignores) validates every
# finished output. With "tools": sd_tool_gen generates tool calls under the grammar of a required or
# named tool_choice, or auto with strict functions (the lazy grammar, after text), each object schema a function's parameters, and validate_tools.mjs reads the
# calls out of the text by itself and validates their arguments. Skips (exit 77) with a reason when
# node/npm, the packages or the models are missing; under SPECDEC_REQUIRE_SHARED=1 those fail instead.
# Usage: test_validity.sh SD_GRAMMAR_GEN|SD_TOOL_GEN SOURCE_DIR [tools]   (SPECDEC_GRAMMAR_BUDGET: tokens per output, 320)
set -u
GEN=$1
SRC=$2
VALIDATOR=validate.mjs
# the control: an output that breaks its schema, which must be reported
CONTROL='{"schema":0,"model":"control","seed":0,"temp":0,"finished":true,"tokens":1,"text":"\"far too long a string\""}'
if [ "${3:-}" = tools ]; then
  VALIDATOR=validate_tools.mjs
  CONTROL='{"schema":0,"model":"control","syntax":"hermes","mode":"required","seed":0,"temp":0,"finished":true,"tokens":1,"text":"<tool_call>\n{\"name\": \"other\", \"arguments\": {\"q\": \"far too long\"}}\n</tool_call>","calls":[{"name":"other","arguments":"{\"q\": \"far too long\"}"}]}'
fi
SHARED=${SPECDEC_SHARED:-$SRC/../shared}
missing() {
  if [ "${SPECDEC_REQUIRE_SHARED:-0}" = 1 ]; then echo "FAIL: $1"; exit 1; fi
  echo "SKIP: $1"; exit 77
}
command -v node >/dev/null && command -v npm >/dev/null || missing "needs node and npm for the ajv validator"
MODELS=("$SHARED/models/arch-zoo/zoo-qwen2.gguf" "$SHARED/models/stories260K/stories260K.bin")
for f in "${MODELS[@]}"; do [ -f "$f" ] || missing "needs shared test data $f"; done
DIR=${SPECDEC_NPM_DIR_AJV:-$SRC/.cache/npm-ajv}
PKGS="ajv@8 ajv-formats@3 ajv-draft-04@1"
if [ ! -f "$DIR/node_modules/ajv-formats/package.json" ] || [ "$(cat "$DIR/.pkg" 2>/dev/null)" != "$PKGS" ]; then
  mkdir -p "$DIR" && [ -f "$DIR/package.json" ] || echo '{"private": true, "type": "module"}' >"$DIR/package.json"
  # shellcheck disable=SC2086
  timeout 300 npm install --prefix "$DIR" --no-audit --no-fund --silent $PKGS >"$DIR/install.log" 2>&1 ||
    missing "npm install $PKGS failed (offline?): $(tail -n 1 "$DIR/install.log")"
  echo "$PKGS" >"$DIR/.pkg"
fi
echo "ajv $(sed -n 's/.*"version": *"\([^"]*\)".*/\1/p' "$DIR/node_modules/ajv/package.json" | head -1)," \
  "ajv-formats $(sed -n 's/.*"version": *"\([^"]*\)".*/\1/p' "$DIR/node_modules/ajv-formats/package.json" | head -1), node $(node --version)"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$GEN" "$SRC/tests/grammar/schemas.json" "$TMP/outputs.jsonl" "${SPECDEC_GRAMMAR_BUDGET:-320}" "${MODELS[@]}" || {
  echo "FAIL: generation under the schemas"; exit 1; }
# the script runs beside the packages so that node resolves them from there
cp "$SRC/tests/grammar/$VALIDATOR" "$DIR/$VALIDATOR"
node "$DIR/$VALIDATOR" "$SRC/tests/grammar/schemas.json" "$TMP/outputs.jsonl"
rc=$?
[ $rc = 0 ] || exit $rc
printf '%s\n' "$CONTROL" >"$TMP/bad.jsonl"
if node "$DIR/$VALIDATOR" "$SRC/tests/grammar/schemas.json" "$TMP/bad.jsonl" >/dev/null; then
  echo "FAIL: the validator accepted an output that breaks its schema"; exit 1
fi
echo "control: an invalid output is reported"
