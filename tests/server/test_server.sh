#!/usr/bin/env bash
# specdec serve, driven with curl (and tests/server/http_probe.py for raw sockets) on a free
# loopback port: completions and chat, streamed and not; greedy output equal to specdec generate;
# 8 concurrent clients on 4 slots each getting what it gets alone; a client that leaves (a reset)
# frees its slot, one that half-closes is served; every bad input and limit answered in OpenAI's
# error shape while the server keeps serving, with keep-alive kept; the endpoints (/v1/models/ID,
# /tokenize, /detokenize, /props, CORS); deadlines, the connection cap and the body budget; a load
# run of 200 requests from 16 clients with no failure; SIGTERM drains (8 streams finish) and exits 0
# (under ASan: with no leak); tool calls (server T): a named or required tool_choice gives calls valid
# against the schema, streamed alike as delta.tool_calls, drafting or not; auto (its text free, a strict function's calls constrained), none, a tool's result.
# Usage: test_server.sh SPECDEC_BINARY SOURCE_DIR      (exit 77: skipped)
set -u
BIN=$1
SRC=$2
SHARED=${SPECDEC_SHARED:-$SRC/../shared}
pass=0; fail=0
TMP=$(mktemp -d)
SPID=
cleanup() { [ -n "$SPID" ] && kill -9 "$SPID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT

skip_all() {
  if [ "${SPECDEC_REQUIRE_SHARED:-0}" = 1 ]; then echo "FAIL: $1 (SPECDEC_REQUIRE_SHARED=1)"; exit 1; fi
  echo "SKIP: $1"; exit 77
}
for tool in curl jq python3; do command -v $tool >/dev/null || skip_all "needs $tool (scripts/setup.sh installs it)"; done
PROBE="python3 $SRC/tests/server/http_probe.py"
for f in models/stories260K/stories260K.bin models/stories260K/tok512.bin models/stories-draft/stories-draft.bin; do
  [ -f "$SHARED/$f" ] || skip_all "needs shared test data $SHARED/$f"
done
export SPECDEC_MODEL_PATH="$SHARED/models"
ulimit -n 4096 2>/dev/null || ulimit -n "$(ulimit -Hn)"

ok() { echo "ok   $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | head -c 2500 | sed 's/^/  /'; echo; fail=$((fail+1)); }
expect() { # name got want
  if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "got:  $(printf '%s' "$2" | head -c 300)
want: $(printf '%s' "$3" | head -c 300)"; fi
}

# start_server NAME ARGS...: waits for the "listening" line (the port) and then for /health 200;
# NOWAIT=1 returns as soon as it listens.
start_server() {
  local name=$1; shift
  LOG=$TMP/$name.log
  "$BIN" serve --port 0 -t 1 "$@" 2>"$LOG" &
  SPID=$!
  PORT=
  for _ in $(seq 1200); do
    PORT=$(sed -n 's|^serve: listening on http://[^ ]*:\([0-9][0-9]*\) .*|\1|p' "$LOG" | head -1)
    [ -n "$PORT" ] && break
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.05
  done
  [ -n "$PORT" ] || { bad "$name: server did not start" "$(cat "$LOG")"; exit 1; }
  U=http://127.0.0.1:$PORT
  [ "${NOWAIT:-0}" = 1 ] && return
  for _ in $(seq 1200); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$U/health")" = 200 ] && return
    sleep 0.05
  done
  bad "$name: not ready" "$(cat "$LOG")"; exit 1
}

# stop_server NAME: SIGTERM, exit status 0 (ASan: LeakSanitizer would make it fail).
stop_server() {
  kill -TERM "$SPID"; wait "$SPID"; local rc=$?; SPID=
  if [ "$rc" = 0 ] && grep -q "^serve: stopped$" "$LOG"; then ok "$1: SIGTERM exits 0"
  else bad "$1: exit $rc after SIGTERM" "$(tail -n 30 "$LOG")"; fi
}

post() { curl -s -m 60 "$U$1" -H 'Content-Type: application/json' -d "$2"; }
# status ROUTE BODY [curl args...]: the HTTP status, the body in $TMP/body
status() { local r=$1 b=$2; shift 2; curl -s -m 60 -o "$TMP/body" -w '%{http_code}' "$U$r" -d "$b" "$@"; }
# check_err NAME STATUS PATTERN ROUTE BODY [curl args]: status and an OpenAI error naming it
check_err() {
  local name=$1 want=$2 pat=$3; shift 3
  local got; got=$(status "$@")
  if [ "$got" = "$want" ] && jq -e '.error.message and .error.type and (.error | has("param")) and (.error | has("code"))' "$TMP/body" >/dev/null 2>&1 &&
     jq -r .error.message "$TMP/body" | grep -qE -e "$pat"; then ok "$name ($want)"
  else bad "$name: HTTP $got, want $want and /$pat/" "$(head -c 400 "$TMP/body")"; fi
}
# SSE: the text of every chunk of a stream (completion .text or chat .delta.content), joined
sse_text() { sed -n 's/^data: //p' "$1" | grep -v '^\[DONE\]$' | jq -j '.choices[0]? | (.text // .delta.content // "")'; }
metric() { curl -s "$U/metrics" | sed -n "s/^specdec:$1 //p"; }

GEN=(-m stories260K -md stories-draft -k 4 --draft-fixed -c 256)

# ---- server A: the real pair, 4 slots, drafting fixed at 4 so every round drafts -------------
start_server A "${GEN[@]}" -np 4
expect "health" "$(curl -s "$U/health")" '{"status":"ok"}'
expect "models" "$(curl -s "$U/v1/models" | jq -r '.object + " " + .data[0].id')" "list stories260K"
expect "a model by id" "$(curl -s "$U/v1/models/stories260K" | jq -r '.object + " " + .id')" "model stories260K"
code=$(curl -s -o "$TMP/body" -w '%{http_code}' "$U/v1/models/gpt-4")
expect "an unknown model id (404)" "$code $(jq -r '.error.code + " " + .error.message' "$TMP/body")" "404 model_not_found The model 'gpt-4' does not exist"
expect "props" "$(curl -s "$U/props" | jq -c '[.model, .total_slots, .default_generation_settings.n_ctx, .chat_format, .speculative.draft, .speculative.draft_mode, .speculative.n_max]')" \
  '["stories260K",4,256,"chatml","model","fixed",4]'
# /tokenize and /detokenize, llama-server's shapes
expect "tokenize" "$(post /tokenize '{"content": "Once upon a time", "add_special": true}' | jq -c .)" '{"tokens":[1,403,407,261,378]}'
expect "tokenize with pieces" "$(post /tokenize '{"content": "Once upon", "with_pieces": true}' | jq -c .)" \
  '{"tokens":[{"id":403,"piece":" Once"},{"id":407,"piece":" upon"}]}'
expect "detokenize" "$(post /detokenize '{"tokens": [403, 407, 261, 378]}' | jq -c .)" '{"content":"Once upon a time"}'
check_err "tokenize, unknown field" 400 "^request: request.text is not supported$" /tokenize '{"text": "a"}'

gen=$("$BIN" generate "${GEN[@]}" -t 1 -p "Once upon a time" -n 48 --no-stream 2>/dev/null)
post /v1/completions '{"model": "x", "prompt": "Once upon a time", "max_tokens": 48, "temperature": 0}' >"$TMP/c.json"
text=$(jq -r '.choices[0].text' "$TMP/c.json")
expect "completion equals generate (greedy)" "Once upon a time$text" "$gen"
expect "completion fields" "$(jq -r '[.object, .choices[0].finish_reason, .usage.prompt_tokens, .usage.completion_tokens, .usage.total_tokens, .usage.prompt_tokens_details.cached_tokens, .model] | join(" ")' "$TMP/c.json")" \
  "text_completion length 5 48 53 0 stories260K"
# ids are OpenAI's shape and never repeat (they restarted at 1 with every server)
id1=$(jq -r .id "$TMP/c.json"); id2=$(post /v1/completions '{"prompt": "Once", "max_tokens": 1}' | jq -r .id)
if [[ $id1 =~ ^cmpl-[A-Za-z0-9]{24}$ ]] && [[ $id2 =~ ^cmpl-[A-Za-z0-9]{24}$ ]] && [ "$id1" != "$id2" ]; then ok "ids: $id1 $id2"
else bad "ids" "$id1 $id2"; fi
if jq -e '.timings.draft_n > 0 and .timings.draft_n_accepted > 0 and .timings.verify_n > 0 and .timings.mean_accepted_length > 1 and .timings.predicted_n == 48 and (.timings | has("predicted_per_second") and has("prompt_n") and has("cache_n"))' "$TMP/c.json" >/dev/null; then
  ok "timings: $(jq -c '.timings | {draft_n, draft_n_accepted, verify_n, mean_accepted_length}' "$TMP/c.json")"
else bad "timings" "$(cat "$TMP/c.json")"; fi

gen=$("$BIN" generate "${GEN[@]}" -t 1 --chat -p "Tell me a story." -n 40 --no-stream 2>/dev/null)
post /v1/chat/completions '{"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 40, "temperature": 0}' >"$TMP/chat.json"
expect "chat equals generate --chat (greedy)" "$(jq -r '.choices[0].message.content' "$TMP/chat.json")" "$gen"
expect "chat fields" "$(jq -r '[.object, .choices[0].message.role, .choices[0].finish_reason, .usage.completion_tokens] | join(" ")' "$TMP/chat.json")" \
  "chat.completion assistant length 40"
# content parts and "developer" render as a plain string and "system" would
post /v1/chat/completions '{"messages": [{"role": "developer", "content": "Be kind."}, {"role": "user", "content": [{"type": "text", "text": "Tell me "}, {"type": "text", "text": "a story."}]}], "max_tokens": 12, "temperature": 0}' >"$TMP/parts.json"
post /v1/chat/completions '{"messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Tell me a story."}], "max_tokens": 12, "temperature": 0}' >"$TMP/plain.json"
expect "text parts and developer role" "$(jq -r '.usage.prompt_tokens, .choices[0].message.content' "$TMP/parts.json")" \
  "$(jq -r '.usage.prompt_tokens, .choices[0].message.content' "$TMP/plain.json")"

# streams: the chunks' text joined is the whole response's; a last chunk with finish_reason, usage
# and timings, then [DONE]
curl -sN -m 60 "$U/v1/completions" -d '{"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0, "stream": true}' >"$TMP/s.txt"
expect "stream text equals the response" "$(sse_text "$TMP/s.txt")" "$text"
expect "stream ends with [DONE]" "$(tail -n 2 "$TMP/s.txt" | head -n 1)" "data: [DONE]"
# usage only where OpenAI puts it: in the usage chunk of include_usage, nowhere without it
expect "stream last chunk" "$(sed -n 's/^data: {/{/p' "$TMP/s.txt" | tail -n 1 | jq -r '[.object, .choices[0].finish_reason, (has("usage") | not), (.timings.draft_n > 0)] | join(" ")')" \
  "text_completion length true true"
expect "stream chunks are events" "$(grep -cv '^data: \|^$' "$TMP/s.txt")" "0"
curl -sN -m 60 "$U/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 40, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}' >"$TMP/cs.txt"
expect "chat stream text" "$(sse_text "$TMP/cs.txt")" "$(jq -r '.choices[0].message.content' "$TMP/chat.json")"
expect "chat stream first chunk" "$(sed -n 's/^data: {/{/p' "$TMP/cs.txt" | head -n 1 | jq -r '.object + " " + .choices[0].delta.role')" "chat.completion.chunk assistant"
expect "chat stream usage chunk" "$(sed -n 's/^data: {/{/p' "$TMP/cs.txt" | tail -n 1 | jq -c '[(.choices | length), .usage.completion_tokens]')" "[0,40]"
expect "chat stream usage once" "$(sed -n 's/^data: {/{/p' "$TMP/cs.txt" | jq -s -c '[([.[] | select(.usage != null)] | length), ([.[] | select(has("usage") | not)] | length)]')" "[1,0]"

# coupled sampling: a seeded request gives plain decoding's text (the CLI without a drafter),
# streamed or not, alone or beside 7 other requests, drafting or not (speculative.n_max 0)
plain=$("$BIN" generate -m stories260K -t 1 -p "Once upon a time" -n 40 --temp 0.9 --top-p 0.95 --seed 123 \
  --spec-sampling coupled --ignore-eos --no-stream 2>/dev/null)
SEEDED='{"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0.9, "top_p": 0.95, "seed": 123, "spec_sampling": "coupled", "ignore_eos": true'
post /v1/completions "$SEEDED}" >"$TMP/seed1.json"
expect "coupled: seeded completion equals plain generate" "Once upon a time$(jq -r '.choices[0].text' "$TMP/seed1.json")" "$plain"
curl -sN -m 60 "$U/v1/completions" -d "$SEEDED, \"stream\": true}" >"$TMP/seed_s.txt"
expect "coupled: streamed alike" "Once upon a time$(sse_text "$TMP/seed_s.txt")" "$plain"
post /v1/completions "$SEEDED, \"speculative.n_max\": 0}" >"$TMP/seed0.json"
expect "coupled: without drafting alike" "Once upon a time$(jq -r '.choices[0].text' "$TMP/seed0.json")" "$plain"
# 7 seeded requests in the background, their pids in $pids: OUT_PREFIX PROMPT_WORD STREAM(true|false)
others7() {
  pids=()
  for i in 1 2 3 4 5 6 7; do
    curl -sN -o "$TMP/$1$i.out" -m 120 "$U/v1/completions" -d "{\"prompt\": \"The $2 $i\", \"max_tokens\": 40, \"temperature\": 1.0, \"seed\": $i, \"ignore_eos\": true, \"stream\": $3}" &
    pids+=($!)
  done
}
others7 other dog false
curl -sN -m 120 "$U/v1/completions" -d "$SEEDED, \"stream\": true}" >"$TMP/seed8.txt"
wait "${pids[@]}"
got8=$(sse_text "$TMP/seed8.txt")
expect "coupled: beside 7 other requests alike" "Once upon a time$got8" "$plain"
expect "the 7 others completed" "$(cat "$TMP"/other?.out | jq -r '.choices[0].finish_reason' | sort | uniq -c | tr -s ' ')" " 7 length"
# the server's default mode (no spec_sampling field) is the same promise: streamed alone, and not
# streamed beside 7 other requests
DEFSEED='{"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0.9, "top_p": 0.95, "seed": 123, "ignore_eos": true'
curl -sN -m 60 "$U/v1/completions" -d "$DEFSEED, \"stream\": true}" >"$TMP/seedd_s.txt"
expect "default mode: seeded stream equals plain generate" "Once upon a time$(sse_text "$TMP/seedd_s.txt")" "$plain"
others7 otherd cat true
post /v1/completions "$DEFSEED}" >"$TMP/seedd8.json"
wait "${pids[@]}"
expect "default mode: not streamed, beside 7 other requests alike" "Once upon a time$(jq -r '.choices[0].text' "$TMP/seedd8.json")" "$plain"
expect "the 7 other streams ended" "$(grep -l '^data: \[DONE\]' "$TMP"/otherd?.out | wc -l)" "7"

# llama-server's draft fields act (server A drafts 4 per round, fixed): n_max caps each round,
# p_min stops drafting (fewer drafts than without it), n_min drops chains shorter than it (every
# verified round then holds at least n_min drafts); the text stays plain decoding's (coupled)
DR='{"prompt": "Once upon a time", "max_tokens": 60, "temperature": 0.9, "seed": 5, "ignore_eos": true'
post /v1/completions "$DR}" >"$TMP/dr0.json"
post /v1/completions "$DR, \"speculative.n_max\": 1}" >"$TMP/dr1.json"
post /v1/completions "$DR, \"speculative.p_min\": 0.9}" >"$TMP/dr2.json"
post /v1/completions "$DR, \"speculative.p_min\": 0.5}" >"$TMP/dr3.json"
post /v1/completions "$DR, \"speculative.p_min\": 0.5, \"speculative.n_min\": 3}" >"$TMP/dr4.json"
tim() { jq -c '[.timings.draft_max, .timings.draft_n, .timings.verify_n]' "$TMP/$1.json"; }
if jq -e '.timings.draft_max == 1 and .timings.draft_n > 0 and .timings.draft_n <= .timings.verify_n' "$TMP/dr1.json" >/dev/null &&
   [ "$(jq .timings.draft_n "$TMP/dr2.json")" -lt "$(jq .timings.draft_n "$TMP/dr0.json")" ] &&
   jq -e '.timings.verify_n > 0 and .timings.draft_n >= 3 * .timings.verify_n' "$TMP/dr4.json" >/dev/null &&
   jq -e '.timings.draft_n < 3 * .timings.verify_n' "$TMP/dr3.json" >/dev/null; then
  ok "speculative.n_max, p_min, n_min act: [draft_max, draft_n, verify_n] $(tim dr0) $(tim dr1) $(tim dr2) $(tim dr3) $(tim dr4)"
else bad "speculative.n_max, p_min, n_min" "$(tim dr0) $(tim dr1) $(tim dr2) $(tim dr3) $(tim dr4)"; fi
expect "draft fields: the same text" "$(jq -c '.choices[0].text' "$TMP"/dr?.json | sort -u | wc -l)" "1"

# penalties and min-p: a seeded coupled request gives generate's text with the same flags (which
# differs from the text without them: they act)
PEN=(--min-p 0.05 --presence-penalty 0.6 --frequency-penalty 0.4 --repeat-penalty 1.3)
plainp=$("$BIN" generate -m stories260K -t 1 -p "Once upon a time" -n 40 --temp 0.9 --top-p 0.95 --seed 123 "${PEN[@]}" \
  --spec-sampling coupled --ignore-eos --no-stream 2>/dev/null)
post /v1/completions "$SEEDED, \"min_p\": 0.05, \"presence_penalty\": 0.6, \"frequency_penalty\": 0.4, \"repeat_penalty\": 1.3}" >"$TMP/pen.json"
expect "penalties: seeded completion equals generate's" "Once upon a time$(jq -r '.choices[0].text' "$TMP/pen.json")" "$plainp"
[ "$plainp" != "$plain" ] && ok "penalties: they change the text" || bad "penalties: the same text as without them" "$plainp"
post /v1/completions "$SEEDED, \"repetition_penalty\": 1.3, \"penalty_last_n\": -1, \"speculative.n_max\": 0}" >"$TMP/pen0.json"
post /v1/completions "$SEEDED, \"repetition_penalty\": 1.3}" >"$TMP/pen1.json"
expect "penalties: drafting or not, the same text" "$(jq -r '.choices[0].text' "$TMP/pen1.json")" "$(jq -r '.choices[0].text' "$TMP/pen0.json")"

# n choices: run in as many slots, the prompt prefilled once; greedy, every choice is the greedy
# text; seeded with coupled sampling, choice i is generate's text for seed + i; streamed, each
# choice's chunks carry its index and add up to its text
post /v1/completions '{"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0, "n": 3}' >"$TMP/n3.json"
expect "n = 3, greedy: three choices of the greedy text" "$(jq -r '[.choices[] | "\(.index) \(.finish_reason) \(.text == $t)"] | join(",")' --arg t "$text" "$TMP/n3.json")" \
  "0 length true,1 length true,2 length true"
expect "n = 3: usage counts the prompt once and every choice" "$(jq -c '[.usage.prompt_tokens, .usage.completion_tokens]' "$TMP/n3.json")" "[5,144]"
plain2=$("$BIN" generate -m stories260K -t 1 -p "Once upon a time" -n 40 --temp 0.9 --top-p 0.95 --seed 124 \
  --spec-sampling coupled --ignore-eos --no-stream 2>/dev/null)
post /v1/completions "$SEEDED, \"n\": 2}" >"$TMP/n2.json"
expect "n = 2, coupled: choice i is generate's text for seed + i" \
  "Once upon a time$(jq -r '.choices[0].text' "$TMP/n2.json")|Once upon a time$(jq -r '.choices[1].text' "$TMP/n2.json")" "$plain|$plain2"
curl -sN -m 60 "$U/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 30, "seed": 5, "n": 2, "stream": true, "stream_options": {"include_usage": true}}' >"$TMP/n2s.txt"
sed -n 's/^data: {/{/p' "$TMP/n2s.txt" >"$TMP/n2s.jsonl"
got=$(python3 - "$TMP/n2s.jsonl" <<'PY'
import json, sys
chunks = [json.loads(l) for l in open(sys.argv[1])]
text, roles, finish, usage = {0: "", 1: ""}, {0: 0, 1: 0}, {}, []
for c in chunks:
    if c.get("usage"): usage.append(c["usage"]["completion_tokens"])
    for ch in c["choices"]:
        i = ch["index"]; d = ch["delta"]
        roles[i] += d.get("role") == "assistant"
        text[i] += d.get("content") or ""
        if ch["finish_reason"]: finish[i] = finish.get(i, "") + ch["finish_reason"]
print(roles[0], roles[1], finish.get(0), finish.get(1), usage, len(text[0]) > 0 and len(text[1]) > 0)
PY
)
expect "n = 2, streamed: a role, text and one finish per index, usage once" "$got" "1 1 length length [60] True"
SEEDEDC='{"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 30, "temperature": 0.9, "seed": 77, "n": 2, "spec_sampling": "coupled"'
post /v1/chat/completions "$SEEDEDC}" >"$TMP/n2c.json"
curl -sN -m 60 "$U/v1/chat/completions" -d "$SEEDEDC, \"stream\": true}" >"$TMP/n2cs.txt"
for i in 0 1; do
  expect "n = 2, coupled chat: choice $i streamed alike" \
    "$(sed -n 's/^data: {/{/p' "$TMP/n2cs.txt" | jq -j --argjson i $i '.choices[] | select(.index == $i) | .delta.content // ""')" \
    "$(jq -r --argjson i $i '.choices[$i].message.content' "$TMP/n2c.json")"
done
check_err "n past the slots"      400 "^n: 5 choices need as many slots at once, and this server has 4" /v1/completions '{"prompt": "a", "n": 5}'

# log-probabilities: the target's, the same drafted or not (speculative.n_max 0); greedy, each
# chosen token is the likeliest; the tokens make up the text, their offsets count characters; a
# stop string drops the tokens inside it; chat's form streamed alike
LP='{"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "logprobs": 3'
post /v1/completions "$LP}" >"$TMP/lp.json"
post /v1/completions "$LP, \"speculative.n_max\": 0}" >"$TMP/lp0.json"
post /v1/completions "$LP, \"stop\": \" the\"}" >"$TMP/lps.json"
got=$(python3 - "$TMP/lp.json" "$TMP/lp0.json" "$TMP/lps.json" <<'PY'
import json, sys
a, b, st = (json.load(open(f))["choices"][0] for f in sys.argv[1:])
la, lb = a["logprobs"], b["logprobs"]
out = []
out.append("joined" if "".join(la["tokens"]) == a["text"] else "tokens %r text %r" % (la["tokens"], a["text"]))
out.append("count %d" % len(la["tokens"]))
same = la["tokens"] == lb["tokens"] and all(abs(x - y) < 1e-4 for x, y in zip(la["token_logprobs"], lb["token_logprobs"]))
out.append("drafted-alike" if same else "differ %r %r" % (la["token_logprobs"][:5], lb["token_logprobs"][:5]))
top = all(len(d) >= 3 and abs(max(d.values()) - x) < 1e-5 and x <= 0 for d, x in zip(la["top_logprobs"], la["token_logprobs"]))
out.append("argmax" if top else "not-argmax")
offs = [0]
for t in la["tokens"][:-1]: offs.append(offs[-1] + len(t))
out.append("offsets" if offs == la["text_offset"] else "offsets %r" % la["text_offset"])
ls = st["logprobs"]
j = "".join(ls["tokens"])
out.append("stop-cut" if st["finish_reason"] == "stop" and j.startswith(st["text"]) and len(j) - len(st["text"]) < len(ls["tokens"][-1]) + 1
           and len(ls["tokens"]) < len(la["tokens"]) else "stop %r %r" % (st["text"], ls["tokens"]))
print(" ".join(out))
PY
)
expect "logprobs (completions)" "$got" "joined count 40 drafted-alike argmax offsets stop-cut"
LPC='{"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 24, "temperature": 0, "logprobs": true, "top_logprobs": 2'
post /v1/chat/completions "$LPC}" >"$TMP/lpc.json"
curl -sN -m 60 "$U/v1/chat/completions" -d "$LPC, \"stream\": true}" | sed -n 's/^data: {/{/p' >"$TMP/lpcs.jsonl"
got=$(python3 - "$TMP/lpc.json" "$TMP/lpcs.jsonl" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["choices"][0]
content = c["logprobs"]["content"]
streamed = [e for l in open(sys.argv[2]) for ch in json.loads(l)["choices"] if ch.get("logprobs") for e in ch["logprobs"]["content"]]
ok = "".join(e["token"] for e in content) == c["message"]["content"] and len(content) == 24
ok = ok and all(len(e["top_logprobs"]) == 2 and bytes(e["bytes"]).decode("utf-8", "replace") == e["token"] for e in content)
print("ok" if ok else "bad %r" % content[:3], "streamed-alike" if streamed == content else "streamed %d entries" % len(streamed))
PY
)
expect "logprobs (chat), streamed alike" "$got" "ok streamed-alike"

# constrained output: a JSON Schema (llama-server's json_schema, OpenAI's response_format) gives
# generate --json-schema's text for a seed, valid against the schema, streamed alike; a GBNF grammar
SCHEMA='{"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer", "minimum": 1, "maximum": 99}}, "required": ["name", "age"], "additionalProperties": false}'
printf '%s' "$SCHEMA" >"$TMP/schema.json"
valid_person() { jq -e '(keys == ["age", "name"]) and (.name | type == "string" and length <= 10) and (.age | type == "number" and . >= 1 and . <= 99 and floor == .)' >/dev/null 2>&1; }
for seed in 5 6; do
  plainj=$("$BIN" generate -m stories260K -t 1 -p "Once upon a time" -n 80 --temp 0.9 --seed $seed --json-schema "$TMP/schema.json" \
    --spec-sampling coupled --no-stream 2>/dev/null)
  post /v1/completions "{\"prompt\": \"Once upon a time\", \"max_tokens\": 80, \"temperature\": 0.9, \"seed\": $seed, \"spec_sampling\": \"coupled\", \"json_schema\": $SCHEMA}" >"$TMP/js.json"
  jtext=$(jq -r '.choices[0].text' "$TMP/js.json")
  expect "json_schema, seed $seed: generate's text" "Once upon a time$jtext" "$plainj"
  if printf '%s' "$jtext" | valid_person && [ "$(jq -r '.choices[0].finish_reason' "$TMP/js.json")" = stop ]; then ok "json_schema, seed $seed: valid, finish_reason stop"
  else bad "json_schema, seed $seed: not valid" "$(cat "$TMP/js.json")"; fi
done
# the bytes the schema forces (property names, punctuation) are drafted ahead of the draft model's
# (server D, --no-grammar-drafts, draft none: the same text)
JSREQ="{\"prompt\": \"Once\", \"max_tokens\": 60, \"temperature\": 0, \"json_schema\": $SCHEMA}"
post /v1/completions "$JSREQ" >"$TMP/jsg.json"
gdrafts=$(jq '[.timings.sources[] | select(.name == "grammar") | .drafted] | add' "$TMP/jsg.json")
if [ "${gdrafts:-0}" -gt 0 ] 2>/dev/null; then ok "json_schema: $gdrafts forced drafts"; else bad "json_schema: no forced drafts" "$(cat "$TMP/jsg.json")"; fi
RF="{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"person\", \"strict\": true, \"schema\": $SCHEMA}}"
CHATJ="{\"messages\": [{\"role\": \"user\", \"content\": \"Who is she?\"}], \"max_tokens\": 80, \"temperature\": 1, \"seed\": 9, \"spec_sampling\": \"coupled\", \"response_format\": $RF"
post /v1/chat/completions "$CHATJ}" >"$TMP/rf.json"
jq -r '.choices[0].message.content' "$TMP/rf.json" >"$TMP/rf.txt"
valid_person <"$TMP/rf.txt" && ok "response_format json_schema: valid" || bad "response_format json_schema: not valid" "$(cat "$TMP/rf.json")"
curl -sN -m 60 "$U/v1/chat/completions" -d "$CHATJ, \"stream\": true}" >"$TMP/rf_s.txt"
expect "response_format json_schema: streamed alike" "$(sse_text "$TMP/rf_s.txt")" "$(cat "$TMP/rf.txt")"
post /v1/chat/completions "$CHATJ, \"speculative.n_max\": 0}" >"$TMP/rf0.json"
expect "response_format json_schema: without drafting alike" "$(jq -r '.choices[0].message.content' "$TMP/rf0.json")" "$(cat "$TMP/rf.txt")"
for seed in 1 2 3; do
  post /v1/completions "{\"prompt\": \"Is it?\", \"max_tokens\": 8, \"seed\": $seed, \"grammar\": \"root ::= (\\\"yes\\\" | \\\"no\\\") \\\".\\\"\"}" >"$TMP/g.json"
  got=$(jq -r '.choices[0].finish_reason + " " + .choices[0].text' "$TMP/g.json")
  case $got in "stop yes." | "stop no.") ok "grammar, seed $seed: $got" ;; *) bad "grammar, seed $seed" "$(cat "$TMP/g.json")" ;; esac
done

# stop strings: the text ends before the first occurrence, finish_reason stop, streamed alike
full=$(jq -r '.choices[0].text' "$TMP/c.json")
want=${full%%.*}
post /v1/completions '{"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0, "stop": [".", "zzz"]}' >"$TMP/stop.json"
expect "stop string" "$(jq -r '.choices[0].finish_reason + "|" + .choices[0].text' "$TMP/stop.json")" "stop|$want"
# a stop string across tokens, streamed: what could be its start is held back, never sent
curl -sN -m 60 "$U/v1/completions" -d '{"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0, "stop": "park. One", "stream": true}' >"$TMP/ss.txt"
want=${full%%park. One*}
[ "$want" != "$full" ] || bad "the greedy text has no 'park. One' to stop at"
expect "stop string across tokens, streamed" "$(sse_text "$TMP/ss.txt")|$(sed -n 's/^data: {/{/p' "$TMP/ss.txt" | tail -n 1 | jq -r '.choices[0].finish_reason')" "$want|stop"
# sampled: the same seed gives the same text
s1=$(post /v1/completions '{"prompt": "Once", "max_tokens": 24, "temperature": 0.9, "top_p": 0.95, "seed": 7}' | jq -r '.choices[0].text')
s2=$(post /v1/completions '{"prompt": "Once", "max_tokens": 24, "temperature": 0.9, "top_p": 0.95, "seed": 7}' | jq -r '.choices[0].text')
expect "sampled, same seed, same text" "$s2" "$s1"
# prompt as token ids; a follow-up that extends a slot's cache reuses it
ids=$(post /v1/completions '{"prompt": [1, 403, 407, 261, 378], "max_tokens": 48, "temperature": 0}' | jq -r '.choices[0].text')
expect "prompt as token ids" "$ids" "$text"
post /v1/completions "$(jq -n --arg p "Once upon a time$text" '{prompt: $p, max_tokens: 4, temperature: 0}')" >"$TMP/re.json"
if jq -e '.timings.cache_n > 40 and .usage.prompt_tokens_details.cached_tokens == .timings.cache_n' "$TMP/re.json" >/dev/null; then
  ok "prompt reuse: $(jq -c '[.timings.cache_n, .usage.prompt_tokens_details]' "$TMP/re.json")"
else bad "prompt reuse" "$(jq -c '[.timings, .usage]' "$TMP/re.json")"; fi

# 8 concurrent clients on 4 slots: each gets what it gets alone
prompts=("Once upon a time" "The little dog" "Lily and Tom went to the park" "One day, a big fish" "The sun was hot" "Tim had a red ball" "There was a tree" "Mom said to Sue")
for i in "${!prompts[@]}"; do
  post /v1/completions "$(jq -n --arg p "${prompts[$i]}" '{prompt: $p, max_tokens: 100, temperature: 0, ignore_eos: true}')" | jq -r '.choices[0].text' >"$TMP/alone$i"
done
r0=$(metric rounds_total); t0=$(metric generation_tokens_total)
p0=$(metric pass_tokens_total); d0=$(metric spec_decode_num_draft_tokens_total)
# one curl starts the 8 transfers at once (8 background curls started milliseconds apart, and
# a tiny model finishes a request in about as long, so they often did not overlap)
cargs=(-s --no-progress-meter -Z --parallel-immediate --parallel-max 8)
for i in "${!prompts[@]}"; do
  [ "$i" -gt 0 ] && cargs+=(--next)
  cargs+=(-m 60 -H 'Content-Type: application/json' -o "$TMP/conc$i.json" -d
          "$(jq -n --arg p "${prompts[$i]}" '{prompt: $p, max_tokens: 100, temperature: 0, ignore_eos: true}')" "$U/v1/completions")
done
curl "${cargs[@]}"
for i in "${!prompts[@]}"; do jq -r '.choices[0].text' "$TMP/conc$i.json" >"$TMP/conc$i" 2>/dev/null; done
same=0
for i in "${!prompts[@]}"; do cmp -s "$TMP/alone$i" "$TMP/conc$i" && [ -s "$TMP/conc$i" ] && same=$((same+1)); done
rounds=$(( $(metric rounds_total) - r0 )); toks=$(( $(metric generation_tokens_total) - t0 ))
# every busy slot puts one last token into its round's pass, besides its drafts: slot-rounds
# over rounds is the mean number of slots each pass carried (1 if nothing were batched)
slot_rounds=$(( $(metric pass_tokens_total) - p0 - ($(metric spec_decode_num_draft_tokens_total) - d0) ))
expect "8 concurrent clients on 4 slots: outputs equal alone" "$same" 8
# (how many overlap depends on when the HTTP threads hand the requests over: 3.6 slots a pass
# on average in most runs here, 1.6 in the worst; unbatched would be exactly 1)
if [ "$toks" = 800 ] && [ "$rounds" -gt 0 ] && [ "$slot_rounds" -gt "$rounds" ]; then
  ok "batched: 800 tokens in $rounds rounds, $slot_rounds slot-rounds"
else bad "batched rounds" "$toks tokens in $rounds rounds, $slot_rounds slot-rounds"; fi

# bad input: each answered with its status and OpenAI's error shape; the server keeps serving
check_err "truncated JSON"        400 "not valid JSON \(at byte" /v1/completions '{"prompt": "abc"'
check_err "not JSON"              400 "not valid JSON" /v1/completions 'hello'
check_err "not an object"        400 "must be a JSON object, got an array" /v1/completions '[1, 2]'
check_err "empty body"            400 "not valid JSON" /v1/completions ''
check_err "prompt missing"        400 "^prompt: is required" /v1/completions '{"max_tokens": 3}'
check_err "messages missing"      400 "^messages: is required" /v1/chat/completions '{"max_tokens": 3}'
check_err "max_tokens a string"   400 "^max_tokens: must be an integer, got a string" /v1/completions '{"prompt": "a", "max_tokens": "10"}'
check_err "max_tokens fraction"   400 "^max_tokens: must be an integer, got 1.5" /v1/completions '{"prompt": "a", "max_tokens": 1.5}'
check_err "max_tokens negative"   400 "^max_tokens: must be an integer in 1..2147483647, got -5" /v1/completions '{"prompt": "a", "max_tokens": -5}'
check_err "max_tokens zero"       400 "^max_tokens: must be an integer in 1..2147483647, got 0" /v1/completions '{"prompt": "a", "max_tokens": 0}'
check_err "max_tokens huge"       400 "^max_tokens: must be an integer in 1..2147483647, got 1000000000000" /v1/completions '{"prompt": "a", "max_tokens": 1e12}'
check_err "max_tokens past ctx"   400 "^max_tokens: 100000 tokens do not fit the context of 256 tokens per slot: the prompt takes 2, leaving 254$" /v1/completions '{"prompt": "a", "max_tokens": 100000}'
check_err "temperature a string"  400 "^temperature: must be a number, got a string" /v1/completions '{"prompt": "a", "temperature": "hot"}'
check_err "temperature range"     400 "^temperature: must be in \[0, 2\], got 3" /v1/completions '{"prompt": "a", "temperature": 3}'
check_err "top_p zero"            400 "^top_p: must be in \(0, 1\], got 0" /v1/completions '{"prompt": "a", "top_p": 0}'
check_err "stream not a boolean"  400 "^stream: must be a boolean, got a string" /v1/completions '{"prompt": "a", "stream": "yes"}'
check_err "stop a number"         400 "^stop: must be a string or an array of strings, got a number" /v1/completions '{"prompt": "a", "stop": 5}'
check_err "stop empty"            400 "^stop: stop\[1\] must have 1..256 bytes, got 0" /v1/completions '{"prompt": "a", "stop": ["x", ""]}'
check_err "messages a string"     400 "^messages: must be an array of messages, got a string" /v1/chat/completions '{"messages": "hi"}'
check_err "messages empty"        400 "^messages: must hold at least one message" /v1/chat/completions '{"messages": []}'
check_err "role function"         400 "messages\[0\].role 'function' is not supported" /v1/chat/completions '{"messages": [{"role": "function", "content": "x"}]}'
check_err "image part"            400 "messages\[0\].content\[0\] must be a text part" /v1/chat/completions '{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}'
check_err "seed a string"         400 "^seed: must be an integer, got a string" /v1/completions '{"prompt": "a", "seed": "x"}'
check_err "prompt array of many"  400 "^prompt: one prompt per request" /v1/completions '{"prompt": ["a", "b"]}'
check_err "prompt bad token id"   400 "^prompt: prompt\[1\] must be a token id in 0..511" /v1/completions '{"prompt": [1, 9999]}'
check_err "logit_bias"            400 "^logit_bias: logit biases are not supported" /v1/completions '{"prompt": "a", "logit_bias": {"1": 5}}'
# tool calling's errors, each named (the calls themselves: server T below)
TM='"messages": [{"role": "user", "content": "a"}]'
check_err "tools on a completion" 400 "^tools: not a field of completion requests" /v1/completions '{"prompt": "a", "tools": [{"type": "function", "function": {"name": "f"}}]}'
check_err "tools: a bad schema"   400 "^tools: tools\[0\].function.parameters.properties.a.type: expected " /v1/chat/completions "{$TM, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"properties\": {\"a\": {\"type\": 5}}}}}]}"
check_err "tools: a keyword the grammar cannot honour" 400 "^tools: tools\[0\].function.parameters.properties.n.multipleOf: unsupported keyword" /v1/chat/completions "{$TM, \"tool_choice\": \"required\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"properties\": {\"n\": {\"multipleOf\": 2}}}}}]}"
check_err "tools: a bad name"     400 "^tools: tools\[0\].function.name must be 1 to 64 letters" /v1/chat/completions "{$TM, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f(x)\"}}]}"
check_err "tools with response_format" 400 "^response_format: cannot be given with tools" /v1/chat/completions "{$TM, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"response_format\": {\"type\": \"json_object\"}}"
check_err "tool_choice: not a tool" 400 "^tool_choice: names the function 'g', which is not one of the tools$" /v1/chat/completions "{$TM, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}}"
check_err "tool without its id"   400 "^messages: messages\[1\].tool_call_id is required with role 'tool'" /v1/chat/completions '{"messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "22 C"}]}'
check_err "a call's arguments"    400 "^messages: messages\[1\].tool_calls\[0\].function.arguments must be JSON text" /v1/chat/completions '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{x"}}]}]}'
check_err "penalty out of range"  400 "^presence_penalty: must be in \[-2, 2\], got 2.5$" /v1/completions '{"prompt": "a", "presence_penalty": 2.5}'
check_err "penalty window"        400 "^penalty_last_n: only -1" /v1/completions '{"prompt": "a", "penalty_last_n": 64}'
check_err "NUL escape"            400 "^prompt: text may not contain NUL \(the escape .u0000 at byte 13\)$" /v1/completions '{"prompt": "a\u0000b"}'
check_err "NUL in a message"      400 "^messages\[0\].content: text may not contain NUL" /v1/chat/completions '{"messages": [{"role": "user", "content": "a\u0000b"}]}'
check_err "trailing garbage"      400 "^request body must be one JSON value with nothing after it" /v1/completions '{"prompt": "a"} x'
check_err "two objects"           400 "^request body must be one JSON value with nothing after it" /v1/completions '{"prompt": "a"}{"prompt": "b"}'
check_err "a key twice"           400 "^max_tokens: given twice$" /v1/completions '{"prompt": "a", "max_tokens": 2, "max_tokens": 3}'
check_err "unknown field"         400 "^frobnicate: not a field of completion requests" /v1/completions '{"prompt": "a", "frobnicate": 1}'
check_err "grammar"               400 "^grammar: line 1, column 10: " /v1/completions '{"prompt": "a", "grammar": "root ::= x"}'
check_err "schema"                400 "^json_schema: schema: .properties.a.type: " /v1/completions '{"prompt": "a", "json_schema": {"properties": {"a": {"type": 5}}}}'
check_err "two constraints"       400 "^response_format: give one of grammar, json_schema, guided_json and response_format, not grammar too$" /v1/chat/completions '{"messages": [{"role": "user", "content": "a"}], "grammar": "root ::= \"x\"", "response_format": {"type": "json_object"}}'
check_err "speculative.n_max"     400 "^speculative.n_max: 8 exceeds this server's draft length of 4" /v1/completions '{"prompt": "a", "speculative.n_max": 8}'
printf '{"prompt": "a\xff\xfeb"}' >"$TMP/bad-utf8.json"
check_err "invalid UTF-8"         400 "not valid UTF-8 \(byte 13\)" /v1/completions "@$TMP/bad-utf8.json"
printf '{"prompt": "a\xed\xa0\x80"}' >"$TMP/surrogate.json"
check_err "UTF-8 surrogate"       400 "not valid UTF-8 \(byte 13\)" /v1/completions "@$TMP/surrogate.json"
long=$(printf 'The cat sat on the mat and the dog ran in the park. %.0s' $(seq 30))
check_err "prompt past the context" 400 "^prompt of [0-9]+ tokens does not fit the context of 256 tokens per slot \(at most 255 prompt tokens\)$" /v1/completions "{\"prompt\": \"$long\"}"
head -c 5000000 /dev/zero | tr '\0' 'a' >"$TMP/big.txt"
check_err "body over the cap"     413 "^request body of 5000000 bytes exceeds the limit of 4194304 bytes$" /v1/completions "@$TMP/big.txt" -H 'Expect:'
check_err "body over the cap, 100-continue" 413 "^request body of 5000000 bytes exceeds the limit of 4194304 bytes$" /v1/completions "@$TMP/big.txt" -H 'Expect: 100-continue'
check_err "chunked body over the cap" 413 "^request body exceeds the limit of 4194304 bytes$" /v1/completions "@$TMP/big.txt" -H 'Transfer-Encoding: chunked'
code=$(curl -s -o "$TMP/body" -w '%{http_code}' "$U/v1/nothing")
[ "$code" = 404 ] && jq -e '.error.code == "not_found"' "$TMP/body" >/dev/null && ok "unknown route (404)" || bad "unknown route: $code" "$(cat "$TMP/body")"
hdrs=$(curl -s -D - -o "$TMP/body" "$U/v1/completions")
if printf '%s' "$hdrs" | grep -q '^HTTP/1.1 405' && printf '%s' "$hdrs" | grep -qi '^Allow: POST' &&
   jq -e '.error.message == "/v1/completions does not take GET"' "$TMP/body" >/dev/null; then ok "wrong method (405, Allow: POST)"
else bad "wrong method" "$hdrs"; fi
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$U/health")
expect "POST /health (405)" "$code" 405
# fields ignored on purpose, and refused ones at the value that changes nothing, pass
code=$(status /v1/completions '{"prompt": "Once", "max_tokens": 2, "user": "u1", "metadata": {"a": 1}, "store": false, "cache_prompt": true, "logit_bias": {}, "n": 1, "min_p": 0, "typical_p": 1, "grammar": null}')
expect "fields ignored on purpose and neutral values (200)" "$code" 200
# errors libmicrohttpd would answer in HTML of its own come in OpenAI's shape
mhd_err() { # NAME STATUS HEX-REQUEST [later]
  $PROBE raw "$PORT" "$3" ${4:-} >"$TMP/raw"
  if head -n 1 "$TMP/raw" | grep -q "^HTTP/1.1 $2 " && grep -qi '^Content-Type: application/json' "$TMP/raw" &&
     tail -n +3 "$TMP/raw" | jq -e '.error.message and .error.type' >/dev/null 2>&1; then ok "$1 ($2, JSON): $(tail -n +3 "$TMP/raw" | jq -r .error.message)"
  else bad "$1" "$(cat "$TMP/raw")"; fi
}
mhd_err "HTTP/2.0"                  505 "$(printf 'GET /health HTTP/2.0\r\nHost: x\r\n\r\n' | xxd -p | tr -d '\n')"
mhd_err "absurd Content-Length"     413 "$(printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n' | xxd -p | tr -d '\n')"
# a NUL in the head would reach the routes cut (/health\0x as /health, a key cut short)
mhd_err "NUL in the request line"   400 "$(printf 'GET /health\000x HTTP/1.1\r\nHost: x\r\n\r\n' | xxd -p | tr -d '\n')"
mhd_err "NUL in a header"           400 "$(printf 'GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\000junk\r\n\r\n' | xxd -p | tr -d '\n')"
mhd_err "headers too large"         431 "$(printf 'GET /health HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n' "$(head -c 20000 /dev/zero | tr '\0' 'a')" | xxd -p | tr -d '\n')"
# ... and on a kept-alive connection's later requests as on its first (the door reads every head;
# libmicrohttpd alone answered these in HTML, cut the NULs, took a 20 kB head and dropped a bad line)
big() { printf 'GET /health HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n' "$(head -c "$1" /dev/zero | tr '\0' 'a')" | xxd -p | tr -d '\n'; }
mhd_err "later: HTTP/2.0"                505 "$(printf 'GET /health HTTP/2.0\r\nHost: x\r\n\r\n' | xxd -p | tr -d '\n')" later
mhd_err "later: absurd Content-Length"   413 "$(printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n' | xxd -p | tr -d '\n')" later
mhd_err "later: NUL in the request line" 400 "$(printf 'GET /health\000x HTTP/1.1\r\nHost: x\r\n\r\n' | xxd -p | tr -d '\n')" later
mhd_err "later: NUL in a header"         400 "$(printf 'GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\000junk\r\n\r\n' | xxd -p | tr -d '\n')" later
mhd_err "later: headers too large"       431 "$(big 20000)" later
mhd_err "later: headers past libmicrohttpd's own pool" 431 "$(big 40000)" later
mhd_err "later: not a request line"      400 "$(printf 'GARBAGE\r\nHost: x\r\n\r\n' | xxd -p | tr -d '\n')" later
mhd_err "a transfer coding other than chunked" 400 "$(printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n' | xxd -p | tr -d '\n')"
mhd_err "both Transfer-Encoding and Content-Length" 400 "$(printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n' | xxd -p | tr -d '\n')"
mhd_err "a chunk size that is not hexadecimal" 400 "$(printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n' | xxd -p | tr -d '\n')"
# the door follows bodies as libmicrohttpd does: a chunked body, and a body holding a blank line and
# request-like text, then the next request
expect "chunked body, a body with a blank line in it, then a GET: all answered" "$($PROBE frames "$PORT" | tr '\n' ' ')" "200 200 200 "
# keep-alive survives every answer, errors included, and pipelined requests are all answered
expect "pipelined: 200 404 405 200, kept open" "$($PROBE pipeline "$PORT" | tr '\n' ' ')" "200 keep-alive 404 keep-alive 405 keep-alive 200 keep-alive open "
curl -sv -o /dev/null "$U/health" -o /dev/null "$U/nothing" -o /dev/null "$U/v1/models" 2>"$TMP/ka"
expect "keep-alive across GET, 404 and GET" "$(grep -c 'Re-using existing connection' "$TMP/ka") $(grep -ci '^< Connection: close' "$TMP/ka")" "2 0"
# a client that half-closes after its request still reads all of it
n=$($PROBE halfclose "$PORT" '{"prompt": "Once upon a time", "max_tokens": 32, "temperature": 0, "stream": true}' | sed -n 's/^data: {/{/p' | jq -s '[.[] | .choices[0].text] | join("")' | wc -c)
$PROBE halfclose "$PORT" '{"prompt": "Once upon a time", "max_tokens": 32, "temperature": 0}' >"$TMP/half.json"
expect "half-closed client served" "$(jq -r '.choices[0].finish_reason + " " + (.usage.completion_tokens | tostring)' "$TMP/half.json") $([ "$n" -gt 20 ] && echo streamed)" "length 32 streamed"
code=$(curl -s -o /dev/null -w '%{http_code}' -X OPTIONS "$U/v1/completions")
expect "OPTIONS without --cors (405)" "$code" 405
# still serving, and the error counts are in the metrics
expect "still serving after bad input" "$(post /v1/completions '{"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0}' | jq -r '.choices[0].text')" "$text"
m=$(curl -s "$U/metrics")
if printf '%s' "$m" | grep -qE '^specdec:spec_decode_num_drafts_total [1-9]' &&
   printf '%s' "$m" | grep -qE '^specdec:spec_decode_num_draft_tokens_total [1-9]' &&
   printf '%s' "$m" | grep -qE '^specdec:spec_decode_num_accepted_tokens_total [1-9]' &&
   printf '%s' "$m" | grep -qE '^specdec:spec_decode_num_accepted_tokens_per_pos_total\{position="3"\} [0-9]' &&
   printf '%s' "$m" | grep -qE '^specdec:http_responses_total\{code="413"\} 5$' &&
   printf '%s' "$m" | grep -qE '^specdec:queue_length 0$' && printf '%s' "$m" | grep -qE '^specdec:slots_busy 0$' &&
   printf '%s' "$m" | grep -qE '^specdec:tokens_per_second [0-9.e+-]+$' && printf '%s' "$m" | grep -qE '^specdec:draining 0$' &&
   printf '%s' "$m" | grep -qE '^# TYPE specdec:generation_tokens_per_second gauge$'; then ok "metrics"
else bad "metrics" "$m"; fi

# load: 200 requests from 16 concurrent clients, no failure
load_one() {
  curl -s -m 120 -o "$TMP/load.$1" -w '%{http_code}\n' "$U/v1/completions" \
    -d "{\"prompt\": \"Once upon a time $1\", \"max_tokens\": 16, \"temperature\": 0.7, \"seed\": $1, \"stream\": $([ $(($1 % 2)) = 0 ] && echo true || echo false)}"
}
export -f load_one; export U TMP
seq 200 | xargs -P 16 -I{} bash -c 'load_one {}' >"$TMP/codes"
tps=$(metric tokens_per_second) # at once: it covers the last 10 s
n200=$(grep -c '^200$' "$TMP/codes")
complete=0
for i in $(seq 200); do
  if [ $((i % 2)) = 0 ]; then tail -n 2 "$TMP/load.$i" | head -n 1 | grep -q '^data: \[DONE\]$' && complete=$((complete+1))
  else jq -e '.choices[0].finish_reason' "$TMP/load.$i" >/dev/null 2>&1 && complete=$((complete+1)); fi
done
expect "load: 200 requests from 16 clients, all 200 and complete" "$n200 $complete" "200 200"
expect "load: metrics count them" "$(metric 'requests_finished_total{reason="error"}') $(metric 'requests_finished_total{reason="cancelled"}')" "0 0"
if awk -v t="$tps" 'BEGIN {exit !(t > 0)}'; then ok "tokens per second over the last 10 s: $tps"
else bad "tokens per second: $tps"; fi

# another server cannot take the port
"$BIN" serve -m stories260K --port "$PORT" -t 1 >/dev/null 2>"$TMP/busy.err"; rc=$?
if [ "$rc" = 1 ] && grep -q "^error: serve: cannot listen on 127.0.0.1 port $PORT: Address already in use$" "$TMP/busy.err"; then ok "port in use: exit 1"
else bad "port in use: exit $rc" "$(cat "$TMP/busy.err")"; fi
stop_server A

# ---- server T: tool calls. stories260K has no chat template: ChatML, whose tool calls are written
# in Qwen's (Hermes) form; the tools' instructions take ~600 of its tokens, hence the context -------
start_server T -m stories260K -md stories-draft -k 4 --draft-fixed -c 1024 -np 2
TOOLS='[{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city"], "additionalProperties": false}}}, {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}}]'
valid_weather() { jq -e '((keys - ["city", "days"]) == []) and (.city | type == "string" and length <= 12) and ((has("days") | not) or (.days | type == "number" and floor == . and . >= 1 and . <= 7))' >/dev/null 2>&1; }
valid_time() { jq -e '(keys == ["zone"]) and (.zone == "UTC" or .zone == "CET")' >/dev/null 2>&1; }
# the calls of a stream put together as a client does: by index, name and arguments joined
sse_calls() { sed -n 's/^data: //p' "$1" | grep -v '^\[DONE\]$' | jq -sc '[.[] | .choices[0]?.delta.tool_calls? // [] | .[]] | group_by(.index) | map({name: (map(.function.name // "") | add), arguments: (map(.function.arguments // "") | add)})'; }
sse_finish() { sed -n 's/^data: //p' "$1" | grep -v '^\[DONE\]$' | jq -rs '[.[] | .choices[0]?.finish_reason // empty] | join(",")'; }
ASK='"messages": [{"role": "user", "content": "What is the weather in Paris?"}]'
for seed in 1 2 3; do
  REQ="{$ASK, \"tools\": $TOOLS, \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}, \"max_tokens\": 300, \"temperature\": 1, \"seed\": $seed, \"spec_sampling\": \"coupled\""
  post /v1/chat/completions "$REQ}" >"$TMP/t.json"
  if jq -e '.choices[0] | .finish_reason == "tool_calls" and .message.content == null and (.message.tool_calls | length == 1) and .message.tool_calls[0].type == "function" and (.message.tool_calls[0].id | test("^call_[A-Za-z0-9]{24}$")) and .message.tool_calls[0].function.name == "get_weather"' "$TMP/t.json" >/dev/null &&
     jq -r '.choices[0].message.tool_calls[0].function.arguments' "$TMP/t.json" | valid_weather; then
    ok "named tool_choice, seed $seed: finish_reason tool_calls, arguments valid: $(jq -r '.choices[0].message.tool_calls[0].function.arguments' "$TMP/t.json" | tr -d '\n')"
  else bad "named tool_choice, seed $seed" "$(cat "$TMP/t.json")"; fi
  calls=$(jq -c '[.choices[0].message.tool_calls[] | {name: .function.name, arguments: .function.arguments}]' "$TMP/t.json")
  curl -sN -m 60 "$U/v1/chat/completions" -d "$REQ, \"stream\": true}" >"$TMP/t_s.txt"
  expect "named tool_choice, seed $seed: streamed alike as delta.tool_calls" "$(sse_calls "$TMP/t_s.txt") $(sse_finish "$TMP/t_s.txt")" "$calls tool_calls"
  post /v1/chat/completions "$REQ, \"speculative.n_max\": 0}" >"$TMP/t0.json"
  expect "named tool_choice, seed $seed: without drafting alike" "$(jq -c '[.choices[0].message.tool_calls[] | {name: .function.name, arguments: .function.arguments}]' "$TMP/t0.json")" "$calls"
done
# the first chunk of a call: index, id, type and name, arguments ""; then only arguments
if sed -n 's/^data: //p' "$TMP/t_s.txt" | grep -v '^\[DONE\]$' | jq -se '[.[] | .choices[0]?.delta.tool_calls? // [] | .[]] | (.[0] | .index == 0 and (.id | startswith("call_")) and .type == "function" and .function.name == "get_weather" and .function.arguments == "") and (.[1:] | length > 0 and all(has("id") | not) and all(.function | has("name") | not))' >/dev/null
then ok "a streamed call: id, type and name first, then arguments"; else bad "a streamed call's chunks" "$(head -c 1500 "$TMP/t_s.txt")"; fi
# required, one call: either function, its arguments valid
for seed in 4 5 6; do
  post /v1/chat/completions "{$ASK, \"tools\": $TOOLS, \"tool_choice\": \"required\", \"parallel_tool_calls\": false, \"max_tokens\": 300, \"seed\": $seed}" >"$TMP/r.json"
  name=$(jq -r '.choices[0].message.tool_calls[0].function.name' "$TMP/r.json")
  args=$(jq -r '.choices[0].message.tool_calls[0].function.arguments' "$TMP/r.json")
  if jq -e '.choices[0].finish_reason == "tool_calls" and (.choices[0].message.tool_calls | length == 1)' "$TMP/r.json" >/dev/null &&
     { { [ "$name" = get_weather ] && printf '%s' "$args" | valid_weather; } || { [ "$name" = get_time ] && printf '%s' "$args" | valid_time; }; }
  then ok "required tool_choice, seed $seed: $name $(printf '%s' "$args" | tr -d '\n')"; else bad "required tool_choice, seed $seed" "$(cat "$TMP/r.json")"; fi
done
# auto: stories260K answers in text; none: the tools are not shown (a shorter prompt)
post /v1/chat/completions "{$ASK, \"tools\": $TOOLS, \"max_tokens\": 16, \"temperature\": 0}" >"$TMP/a.json"
post /v1/chat/completions "{$ASK, \"tools\": $TOOLS, \"tool_choice\": \"none\", \"max_tokens\": 16, \"temperature\": 0}" >"$TMP/n.json"
post /v1/chat/completions "{$ASK, \"max_tokens\": 16, \"temperature\": 0}" >"$TMP/p.json"
if jq -e '.choices[0] | (.message.content | type == "string" and length > 0) and (.message | has("tool_calls") | not) and .finish_reason == "length"' "$TMP/a.json" >/dev/null &&
   [ "$(jq .usage.prompt_tokens "$TMP/a.json")" -gt 500 ]; then ok "auto tool_choice: a text reply, $(jq .usage.prompt_tokens "$TMP/a.json") prompt tokens with the tools"
else bad "auto tool_choice" "$(cat "$TMP/a.json")"; fi
# auto with a strict function: the calls the model may start are constrained (a lazy grammar), its
# text is not: stories260K still answers in text; so a strict function's schema must be one the
# grammar honours (the same one not strict is only read by the model)
STRICT=$(printf '%s' "$TOOLS" | jq -c '.[0].function.strict = true')
post /v1/chat/completions "{$ASK, \"tools\": $STRICT, \"max_tokens\": 16, \"temperature\": 0}" >"$TMP/as.json"
if jq -e '.choices[0] | (.message.content | type == "string" and length > 0) and (.message | has("tool_calls") | not) and .finish_reason == "length"' "$TMP/as.json" >/dev/null
then ok "auto tool_choice, a strict function: still a text reply: $(jq -c .choices[0].message.content "$TMP/as.json")"
else bad "auto tool_choice, a strict function" "$(cat "$TMP/as.json")"; fi
ODD='[{"type": "function", "function": {"name": "count", "strict": STRICT, "parameters": {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}}}}]'
check_err "auto, a strict function whose schema the grammar cannot honour" 400 "^tools: tools\[0\].function.parameters.properties.n.multipleOf: unsupported keyword" /v1/chat/completions "{$ASK, \"tools\": ${ODD/STRICT/true}, \"max_tokens\": 4}"
expect "auto, the same function not strict: read by the model only" "$(status /v1/chat/completions "{$ASK, \"tools\": ${ODD/STRICT/false}, \"max_tokens\": 4}")" 200
expect "none tool_choice: the prompt and reply without tools" "$(jq -c '[.usage.prompt_tokens, .choices[0].message.content]' "$TMP/n.json")" "$(jq -c '[.usage.prompt_tokens, .choices[0].message.content]' "$TMP/p.json")"
# a tool's result given back, after the assistant's call
RES="{\"messages\": [{\"role\": \"user\", \"content\": \"Weather in Paris?\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"22 C and sunny\"}], \"tools\": $TOOLS, \"max_tokens\": 8, \"temperature\": 0}"
code=$(status /v1/chat/completions "$RES")
if [ "$code" = 200 ] && jq -e '.choices[0].message.content | type == "string"' "$TMP/body" >/dev/null; then ok "a tool result message is taken: $(jq -c '[.usage.prompt_tokens, .choices[0].message.content]' "$TMP/body")"
else bad "a tool result message: HTTP $code" "$(cat "$TMP/body")"; fi
stop_server T

# ---- server B: a slower random model, one slot, a queue of one, 2-second timeouts -----------
"$BIN" mkmodel "$TMP/slow.gguf" --dim 512 --layers 6 --heads 8 --hidden 1536 --vocab 512 --ctx 4096 2>/dev/null
start_server B -m "$TMP/slow.gguf" -c 2048 -np 1 --queue 1 --timeout 2 --request-timeout 4 --health-busy --shutdown-timeout 0
expect "model id: the file's name" "$(curl -s "$U/v1/models" | jq -r '.data[0].id')" "slow"
long_stream() { curl -sN -m 120 "$U/v1/completions" -d '{"prompt": "a b c", "stream": true, "ignore_eos": true}' >"$1" & }
wait_data() { for _ in $(seq 400); do grep -q '^data: {' "$1" 2>/dev/null && return 0; sleep 0.05; done; return 1; }

# a client that leaves mid-stream frees its slot: the writes fail at once
long_stream "$TMP/leave.txt"; cpid=$!
wait_data "$TMP/leave.txt" || bad "stream did not start"
kill "$cpid"; wait "$cpid" 2>/dev/null
code=$(curl -s -m 15 -o "$TMP/body" -w '%{http_code}' "$U/v1/completions" -d '{"prompt": "x", "max_tokens": 3}')
expect "a client that leaves frees its slot (the next request is served)" "$code $(metric 'requests_finished_total{reason="cancelled"}')" "200 1"
gen_left=$(metric generation_tokens_total)
[ "$gen_left" -lt 1500 ] && ok "its sequence stopped ($gen_left tokens generated in all)" || bad "its sequence ran on: $gen_left tokens"

# queue full: one running, one waiting, the next gets 429 with Retry-After
long_stream "$TMP/run.txt"; cpid=$!
wait_data "$TMP/run.txt"
curl -s -m 60 -o "$TMP/queued.json" "$U/v1/completions" -d '{"prompt": "y", "max_tokens": 3}' & qpid=$!
for _ in $(seq 100); do [ "$(metric queue_length)" = 1 ] && break; sleep 0.05; done
hdrs=$(curl -s -D - -o "$TMP/body" "$U/v1/completions" -d '{"prompt": "z", "max_tokens": 3}')
if printf '%s' "$hdrs" | grep -q '^HTTP/1.1 429' && printf '%s' "$hdrs" | grep -qi '^Retry-After: 1' &&
   jq -e '.error.code == "queue_full"' "$TMP/body" >/dev/null; then ok "queue full: 429 with Retry-After"
else bad "queue full" "$hdrs $(cat "$TMP/body")"; fi
code=$(curl -s -o "$TMP/body" -w '%{http_code}' "$U/health")
expect "health busy (--health-busy)" "$code $(jq -r .status "$TMP/body")" "503 busy"
# the waiting client leaves (its socket closed: the server's probe, a 102, meets a reset): its
# place in the queue frees at the next rounds
c0=$(metric 'requests_finished_total{reason="cancelled"}')
kill "$qpid"; wait "$qpid" 2>/dev/null
for _ in $(seq 100); do [ "$(metric queue_length)" = 0 ] && break; sleep 0.05; done
expect "a waiting client that leaves frees its place" "$(metric queue_length) $(( $(metric 'requests_finished_total{reason="cancelled"}') - c0 ))" "0 1"
# ... and one that resets its connection
$PROBE reset "$PORT" '{"prompt": "y", "max_tokens": 3}' 0.5 &
qpid=$!
for _ in $(seq 100); do [ "$(metric queue_length)" = 1 ] && break; sleep 0.05; done
wait "$qpid"
for _ in $(seq 100); do [ "$(metric queue_length)" = 0 ] && break; sleep 0.05; done
expect "a waiting client that resets frees its place" "$(metric queue_length) $(( $(metric 'requests_finished_total{reason="cancelled"}') - c0 ))" "0 2"
# (greedy, EOS ignored: a sampled token of this random model may be its EOS)
curl -s -m 60 -o "$TMP/queued.json" "$U/v1/completions" -d '{"prompt": "y", "max_tokens": 3, "temperature": 0, "ignore_eos": true}' & qpid=$!
for _ in $(seq 100); do [ "$(metric queue_length)" = 1 ] && break; sleep 0.05; done
kill "$cpid"; wait "$cpid" 2>/dev/null
wait "$qpid"
expect "the waiting request is served once the slot frees" "$(jq -r '.usage.completion_tokens' "$TMP/queued.json")" 3

# slow and stalled clients are cut off after the timeout
stalled() { # NAME REQUEST-BYTES: the server closes the connection within the timeout (2 s) + slack
  exec 3<>"/dev/tcp/127.0.0.1/$PORT"
  printf "$2" >&3
  local t0=$SECONDS
  timeout 20 cat <&3 >/dev/null; local rc=$?
  exec 3>&-
  if [ "$rc" = 0 ] && [ $((SECONDS - t0)) -le 8 ]; then ok "$1: closed after $((SECONDS - t0)) s"; else bad "$1: rc $rc after $((SECONDS - t0)) s"; fi
}
stalled "stalled in the headers" 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le'
stalled "stalled in the body" 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"prompt": "a'
stalled "idle keep-alive" ''
# a request that never stalls long enough for --timeout still has --request-timeout to arrive
t=$($PROBE trickle "$PORT" 20)
if [ "$t" -ge 3 ] && [ "$t" -le 8 ]; then ok "trickled body cut off after $t s (--request-timeout 4)"; else bad "trickled body: closed after $t s"; fi

# 1000 idle connections: the server still serves
fds=()
for _ in $(seq 1000); do exec {fd}<>"/dev/tcp/127.0.0.1/$PORT" || break; fds+=("$fd"); done
code=$(curl -s -m 20 -o /dev/null -w '%{http_code}' "$U/v1/completions" -d '{"prompt": "x", "max_tokens": 3}')
expect "1000 idle connections: still serving" "${#fds[@]} $code" "1000 200"
for fd in "${fds[@]}"; do exec {fd}>&-; done

# SIGTERM with --shutdown-timeout 0 while streaming: the stream ends with an error event (OpenAI's
# shape; never a finish_reason of its own) and [DONE]
long_stream "$TMP/term.txt"; cpid=$!
wait_data "$TMP/term.txt"
stop_server B
wait "$cpid"
expect "SIGTERM: the stream's last event" "$(sed -n 's/^data: {/{/p' "$TMP/term.txt" | tail -n 1 | jq -r '.error.code') $(tail -n 2 "$TMP/term.txt" | head -n 1)" \
  "server_shutdown data: [DONE]"
expect "no finish_reason but stop and length" "$(sed -n 's/^data: {/{/p' "$TMP/term.txt" | jq -r '.choices[0]?.finish_reason // empty' | sort -u | tr '\n' ' ')" ""

# ---- server C: 503 while loading, then API keys ----------------------------------------------
NOWAIT=1 start_server C -m "$TMP/slow.gguf" --draft-type q8_0 -c 256 -np 2 --api-key 's3cret key' --alias 'my "model"' --cors https://app.example
code=$(curl -s -o "$TMP/body" -w '%{http_code}' "$U/health")
if [ "$code" = 503 ] && jq -e '.status == "loading" and .error.message == "loading model"' "$TMP/body" >/dev/null; then ok "health while loading (503 loading)"
else bad "health while loading: $code" "$(cat "$TMP/body")"; fi
for _ in $(seq 1200); do [ "$(curl -s -o /dev/null -w '%{http_code}' "$U/health")" = 200 ] && break; sleep 0.05; done
expect "health once loaded, no key needed (200)" "$(curl -s -w ' %{http_code}' "$U/health")" '{"status":"ok"} 200'
check_err "no API key"            401 "missing or invalid API key" /v1/completions '{"prompt": "a", "max_tokens": 2}'
check_err "wrong API key"         401 "missing or invalid API key" /v1/completions '{"prompt": "a", "max_tokens": 2}' -H 'Authorization: Bearer s3cret'
check_err "metrics need the key"  401 "missing or invalid API key" /metrics '' -G
code=$(status /v1/completions '{"prompt": "a", "max_tokens": 2}' -H 'Authorization: Bearer s3cret key')
expect "right API key (200)" "$code" 200
expect "--alias names the model" "$(curl -s -H 'Authorization: Bearer s3cret key' "$U/v1/models" | jq -r '.data[0].id')|$(jq -r .model "$TMP/body")" \
  'my "model"|my "model"'
# CORS: a preflight needs no key; every answer (errors too) allows the origin
hdrs=$(curl -s -D - -o /dev/null -X OPTIONS "$U/v1/chat/completions" -H 'Origin: https://app.example' -H 'Access-Control-Request-Method: POST' -H 'Access-Control-Request-Headers: authorization, content-type')
if printf '%s' "$hdrs" | grep -q '^HTTP/1.1 204' && printf '%s' "$hdrs" | grep -qi '^Access-Control-Allow-Origin: https://app.example' &&
   printf '%s' "$hdrs" | grep -qi '^Access-Control-Allow-Methods: .*POST' && printf '%s' "$hdrs" | grep -qi '^Access-Control-Allow-Headers: authorization, content-type'; then ok "CORS preflight (204)"
else bad "CORS preflight" "$hdrs"; fi
hdrs=$(curl -s -D - -o /dev/null "$U/v1/models" -H 'Origin: https://app.example')
printf '%s' "$hdrs" | grep -qi '^Access-Control-Allow-Origin: https://app.example' && ok "CORS on a 401" || bad "CORS on a 401" "$hdrs"
# drafting by batch size (rounds of two or more slots; one slot's own controller decides alone):
# two requests at once, then the rates of rounds with both slots busy, drafting allowed so far
pids=()
for i in 1 2; do
  curl -s -o /dev/null -H 'Authorization: Bearer s3cret key' "$U/v1/completions" -d '{"prompt": "a", "max_tokens": 24, "ignore_eos": true}' &
  pids+=($!)
done
wait "${pids[@]}"
if curl -s -H 'Authorization: Bearer s3cret key' "$U/metrics" | grep -qE '^specdec:round_tokens_per_second\{slots="2",drafting="allowed"\} [0-9.e+]+$'; then
  ok "metrics with the key: rates by batch size"
else bad "metrics: no round_tokens_per_second" "$(curl -s -H 'Authorization: Bearer s3cret key' "$U/metrics" | grep round_tokens)"; fi
stop_server C

# ---- server D: the connection cap and the body budget -----------------------------------------
start_server D -m stories260K -c 256 -np 1 --max-connections 20 --buffer-limit 1 --draft-fixed --no-grammar-drafts
post /v1/completions "$JSREQ" >"$TMP/jsd.json"
expect "--no-grammar-drafts: no forced drafts, the same text" "$(jq -c '[.choices[0].text, ([.timings.sources[] | select(.name == "grammar") | .drafted] | add)]' "$TMP/jsd.json")" "$(jq -c '[.choices[0].text, 0]' "$TMP/jsg.json")"
head -c 600000 /dev/zero | tr '\0' 'a' | sed 's/^/{"prompt": "/; s/$/"}/' >"$TMP/600k.json"
$PROBE hold "$PORT" 900000 >"$TMP/hold.out" & hpid=$!
for _ in $(seq 200); do grep -q held "$TMP/hold.out" && break; sleep 0.05; done
hdrs=$(curl -s -D - -o "$TMP/body" "$U/v1/completions" -H 'Content-Type: application/json' --data-binary "@$TMP/600k.json")
if printf '%s' "$hdrs" | grep -q '^HTTP/1.1 503' && printf '%s' "$hdrs" | grep -qi '^Retry-After: 1' && jq -e '.error.code == "server_busy"' "$TMP/body" >/dev/null; then
  ok "a body past the shared budget (503): $(jq -r .error.message "$TMP/body")"
else bad "body budget" "$hdrs $(cat "$TMP/body")"; fi
kill "$hpid"; wait "$hpid" 2>/dev/null
for _ in $(seq 100); do [ "$(metric request_bytes_buffered)" = 0 ] && break; sleep 0.05; done
code=$(curl -s -o "$TMP/body" -w '%{http_code}' "$U/v1/completions" -H 'Content-Type: application/json' --data-binary "@$TMP/600k.json")
expect "the budget back once the holder leaves (refused by its length, before tokenizing)" "$code $(jq -r .error.code "$TMP/body")" "400 context_length_exceeded"
$PROBE idle "$PORT" 20 >"$TMP/idle.out" & ipid=$!
for _ in $(seq 200); do grep -q "open 20" "$TMP/idle.out" && break; sleep 0.05; done
hdrs=$(curl -s -D - -o "$TMP/body" "$U/health")
if printf '%s' "$hdrs" | grep -q '^HTTP/1.1 503' && jq -e '.error.code == "too_many_connections"' "$TMP/body" >/dev/null; then ok "connection 21 of 20 (503, JSON)"
else bad "connection cap" "$hdrs $(cat "$TMP/body")"; fi
kill "$ipid"; wait "$ipid" 2>/dev/null
for _ in $(seq 100); do [ "$(curl -s -o /dev/null -w '%{http_code}' "$U/health")" = 200 ] && break; sleep 0.05; done
expect "served again below the cap" "$(curl -s -o /dev/null -w '%{http_code}' "$U/health")" 200
stop_server D

# ---- server E: SIGTERM drains: 8 streams (4 running, 4 queued) all finish ----------------------
start_server E -m "$TMP/slow.gguf" -c 512 -np 4 --queue 8 --shutdown-timeout 120
cargs=(-s --no-progress-meter -N -Z --parallel-immediate --parallel-max 8)
for i in $(seq 8); do
  [ "$i" -gt 1 ] && cargs+=(--next)
  cargs+=(-m 120 -o "$TMP/drain$i.txt" -d '{"prompt": "a b c", "max_tokens": 120, "temperature": 0, "ignore_eos": true, "stream": true}' "$U/v1/completions")
done
curl "${cargs[@]}" & dpid=$!
for _ in $(seq 400); do [ "$(metric slots_busy)" = 4 ] && [ "$(metric queue_length)" = 4 ] && break; sleep 0.05; done
kill -TERM "$SPID"
for _ in $(seq 100); do [ "$(curl -s -o /dev/null -w '%{http_code}' "$U/health")" = 503 ] && break; sleep 0.02; done
code=$(curl -s -o "$TMP/body" -w '%{http_code}' "$U/health")
expect "draining: /health 503 draining" "$code $(jq -r .status "$TMP/body")" "503 draining"
hdrs=$(curl -s -D - -o "$TMP/body" "$U/v1/completions" -d '{"prompt": "x", "max_tokens": 2}')
if printf '%s' "$hdrs" | grep -q '^HTTP/1.1 503' && printf '%s' "$hdrs" | grep -qi '^Retry-After: 1' &&
   printf '%s' "$hdrs" | grep -qi '^Connection: close' && jq -e '.error.code == "server_draining"' "$TMP/body" >/dev/null; then
  ok "draining: a new request gets 503 with Retry-After"
else bad "draining: a new request" "$hdrs $(cat "$TMP/body")"; fi
wait "$dpid"
wait "$SPID"; rc=$?; SPID=
done_ok=0
for i in $(seq 8); do
  [ "$(sed -n 's/^data: {/{/p' "$TMP/drain$i.txt" | tail -n 1 | jq -r '.choices[0].finish_reason')" = length ] &&
    [ "$(tail -n 2 "$TMP/drain$i.txt" | head -n 1)" = "data: [DONE]" ] && done_ok=$((done_ok+1))
done
expect "SIGTERM during 8 streams: all 8 finish (length), exit 0" "$done_ok $rc $(grep -c '^serve: stopped$' "$LOG")" "8 0 1"

echo "server: $pass passed, $fail failed"
[ "$fail" = 0 ]
