#!/usr/bin/env bash
# Static checks of what cannot run here (no container engine, no cluster): deploy/Dockerfile and
# deploy/k8s/. The Dockerfile's build stage installs the same package list as scripts/setup.sh
# (each one's own extraction of scripts/packages.txt, run and compared); its runtime stage's
# packages (deploy/runtime-packages.sh) cover every library of this build's binary; its shape
# (bookworm-slim stages, non-root user, port 8080, no download); the manifests against the
# Kubernetes API's types (check_k8s_schema.py, python3-kubernetes) and with each other (check_k8s.py); the
# memory formula of deploy/k8s/resources.sh against an independent computation and against the
# resident memory of a running server. A Dockerfile linter runs if one is installed (hadolint is not
# packaged in Debian: then a note, not a failure).
# Usage: test_static.sh SPECDEC_BINARY SOURCE_DIR      (exit 77: skipped)
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
[ -x $PY ] && $PY -c 'import yaml' 2>/dev/null || skip_all "needs $PY with python3-yaml (scripts/setup.sh installs it)"
$PY -c 'import kubernetes.client.models' 2>/dev/null || skip_all "needs python3-kubernetes, the API's types for the manifests' schema check (scripts/setup.sh installs it)"
for f in models/stories260K/stories260K.bin models/stories260K/tok512.bin models/stories-draft/stories-draft.bin; do
  [ -f "$SHARED/$f" ] || skip_all "needs shared test data $SHARED/$f"
done
TMP=$(mktemp -d)
SPID=
trap '[ -n "$SPID" ] && kill -9 "$SPID" 2>/dev/null; rm -rf "$TMP"' EXIT
ok() { echo "ok   $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | head -c 2000 | sed 's/^/  /'; fail=$((fail+1)); }
DF=$SRC/deploy/Dockerfile

# ---- the package list: the Dockerfile's build stage and setup.sh, each extracting it its own way ----
# the build stage's install line, run with echo in place of apt-get (its paths are the image's /src)
line=$(sed -n '/^FROM .* AS build/,/^FROM /p' "$DF" | grep -E "xargs apt-get install" | head -1)
cmd=$(printf '%s' "$line" | sed -E 's/^ *&& //; s/ *\\$//; s/xargs apt-get install -y --no-install-recommends/xargs echo/; s|/src/|'"$SRC"'/|g')
docker_pkgs=$(bash -c "$cmd" | tr ' ' '\n' | grep . | sort)
setup_pkgs=$(cd "$SRC" && bash -c "$(grep -E '^mapfile -t PKGS' scripts/setup.sh)"'; printf "%s\n" "${PKGS[@]}"' | sort)
if [ -n "$docker_pkgs" ] && [ "$docker_pkgs" = "$setup_pkgs" ] && printf '%s\n' "$setup_pkgs" | grep -qx libmicrohttpd-dev; then
  ok "Dockerfile build stage installs setup.sh's packages: $(printf '%s' "$setup_pkgs" | tr '\n' ' ')"
else bad "package lists differ" "Dockerfile ($cmd): $(printf '%s' "$docker_pkgs" | tr '\n' ' ')
setup.sh: $(printf '%s' "$setup_pkgs" | tr '\n' ' ')"; fi
n_install=$(grep -cE '^ *apt-get install' "$SRC/scripts/setup.sh")
[ "$n_install" = 1 ] && grep -q 'apt-get install -y -qq "${missing\[@\]}"' "$SRC/scripts/setup.sh" &&
  ok "setup.sh installs nothing but the list's missing packages" || bad "setup.sh has another apt-get install ($n_install)"

# ---- the Dockerfile's shape ----------------------------------------------------------------------
froms=$(grep '^FROM ' "$DF" | tr '\n' '|')
[ "$froms" = "FROM debian:bookworm-slim AS build|FROM debian:bookworm-slim|" ] && ok "two stages on debian:bookworm-slim" || bad "stages" "$froms"
runtime=$(sed -n '/^FROM debian:bookworm-slim$/,$p' "$DF")
copies=$(printf '%s\n' "$runtime" | grep '^COPY' | tr '\n' '|')
[ "$copies" = "COPY --from=build /build/runtime-packages.txt /tmp/runtime-packages.txt|COPY --from=build /build/specdec /usr/local/bin/specdec|" ] &&
  ok "runtime stage: the binary and the packages of its libraries only" || bad "runtime stage copies" "$copies"
printf '%s\n' "$runtime" | grep -qE '^USER [1-9][0-9]*:[1-9][0-9]*$' && printf '%s\n' "$runtime" | grep -q 'useradd --system --uid 10001' &&
  ok "runs as a non-root user ($(printf '%s\n' "$runtime" | grep '^USER'))" || bad "user"
grep -q '^EXPOSE 8080$' "$DF" && grep -q '^ENTRYPOINT \["/usr/local/bin/specdec", "serve", "--host", "0.0.0.0", "--port", "8080"\]$' "$DF" &&
  grep -q '^VOLUME \["/models"\]$' "$DF" && ok "serves on 8080, models from the /models volume" || bad "port, entrypoint or volume"
if grep -qx 'build\*/' "$SRC/.dockerignore" && grep -qx '.cache/' "$SRC/.dockerignore"; then ok ".dockerignore keeps build directories and caches out of the context"
else bad ".dockerignore" "$(cat "$SRC/.dockerignore" 2>&1)"; fi
if grep -qE '^ADD |curl |wget ' "$DF"; then bad "the Dockerfile downloads" "$(grep -nE '^ADD |curl |wget ' "$DF")"; else ok "nothing downloaded but Debian packages"; fi
[ "$(grep -c 'apt-get install' "$DF")" = "$(grep -c 'apt-get install -y --no-install-recommends' "$DF")" ] &&
  [ "$(grep -c 'apt-get install' "$DF")" = "$(grep -c 'rm -rf /var/lib/apt/lists/\*' "$DF")" ] &&
  ok "apt-get: no recommends, lists removed" || bad "apt-get lines"
if command -v hadolint >/dev/null; then
  out=$(hadolint "$DF" 2>&1) && ok "hadolint" || bad "hadolint" "$out"
else
  echo "note hadolint: not installed (no Debian package offers it); the checks above stand in"
fi
pk=$("$SRC/deploy/runtime-packages.sh" "$BIN" 2>&1)
rc=$?
missing=""
for p in libc6 libgomp1 libcjson1 libmicrohttpd12; do printf '%s\n' "$pk" | grep -qx "$p" || missing="$missing $p"; done
printf '%s\n' "$pk" | grep -qx 'libopenblas0-\(openmp\|pthread\|serial\)' || missing="$missing libopenblas0-*"
[ "$rc" = 0 ] && [ -z "$missing" ] && ok "runtime-packages.sh on this build: $(printf '%s' "$pk" | tr '\n' ' ')" || bad "runtime-packages.sh (exit $rc; missing$missing)" "$pk"

# ---- the manifests ---------------------------------------------------------------------------------
# the schema: every field a field of its API type, of that type, the required ones present
if out=$($PY "$SRC/tests/deploy/check_k8s_schema.py" "$SRC/deploy/k8s" 2>&1); then ok "deploy/k8s against the API's schema: $(printf '%s\n' "$out" | sed -n 's|^ok   .*: ||p' | paste -sd, | sed 's/,/, /g')"
else bad "deploy/k8s against the API's schema" "$out"; fi
# and the check refuses each kind of mistake in a copy of the Deployment, naming where it is
mutant() { # NAME SED_EXPRESSION EXPECTED_MESSAGE
  sed "$2" "$SRC/deploy/k8s/deployment.yaml" >"$TMP/mutant.yaml"
  if cmp -s "$SRC/deploy/k8s/deployment.yaml" "$TMP/mutant.yaml"; then bad "schema mutant $1: the edit changed nothing"; return; fi
  out=$($PY "$SRC/tests/deploy/check_k8s_schema.py" "$TMP/mutant.yaml" 2>&1)
  if [ $? = 1 ] && printf '%s' "$out" | grep -qF "$3"; then ok "schema check refuses $1"
  else bad "schema check on $1: want \"$3\"" "$out"; fi
}
mutant "a misspelt field" 's/readinessProbe:/readinesProbe:/' "containers[0]: unknown field 'readinesProbe' in V1Container"
mutant "a field in the wrong place" 's/^  replicas: 3$/  replica: 3/' "Deployment.spec: unknown field 'replica'"
mutant "a number given as a string" 's/terminationGracePeriodSeconds: 45/terminationGracePeriodSeconds: "45"/' "terminationGracePeriodSeconds: '45' is not an int"
mutant "a list given as a map" 's/capabilities: {drop: \[ALL\]}/capabilities: {drop: ALL}/' "capabilities.drop: want a list of str"
mutant "a required field left out" 's/^        - name: specdec$/        - stdin: false/' "Invalid value for \`name\`, must not be \`None\`"
if out=$($PY "$SRC/tests/deploy/check_k8s.py" "$SRC" 2>&1); then ok "deploy/k8s ($(printf '%s\n' "$out" | grep -c '^ok') checks)"
else bad "deploy/k8s" "$(printf '%s\n' "$out" | grep -A1 '^FAIL')"; fi
if command -v kubectl >/dev/null; then
  # kubectl cannot validate offline: --dry-run=client still asks an API server to map the kinds
  out=$(kubectl apply --dry-run=client --validate=false --server=http://127.0.0.1:9 -f "$SRC/deploy/k8s/" 2>&1)
  echo "note kubectl apply --dry-run=client without a cluster: $(printf '%s' "$out" | tail -n 1 | cut -c1-160)"
fi

# ---- resources.sh: its formula against one computed here from `specdec info`'s dimensions, and
# the memory it gives against what a server with those arguments holds
export SPECDEC_MODEL_PATH=$SHARED/models
T=$SHARED/models/stories260K/stories260K.bin D=$SHARED/models/stories-draft/stories-draft.bin Z=$SHARED/models/stories260K/tok512.bin
for kvt in f32 f16; do
  got=$("$SRC/deploy/k8s/resources.sh" --bin "$BIN" -m "$T" -md "$D" -zd "$Z" -c 512 -np 256 -t 2 --kv-type $kvt | grep requests)
  want=$($PY - "$BIN" "$T" "$D" "$Z" $kvt <<'EOF'
import math, os, re, subprocess, sys
b, t, d, z, kvt = sys.argv[1:]
def kv(m, *a):  # layers x (K and V) x kv heads x head dim x 4 bytes, from the dimensions
    o = subprocess.run([b, "info", *a, m], capture_output=True, text=True, check=True).stdout
    L = int(re.search(r"^layers: +(\d+)", o, re.M).group(1))
    h = re.search(r"^heads: +\d+ \(kv heads (\d+), head dim (\d+)", o, re.M)
    return L * 2 * int(h.group(1)) * int(h.group(2)) * 4 // (2 if kvt == "f16" else 1)
by = os.path.getsize(t) + os.path.getsize(d) + 256 * 512 * (kv(t) + kv(d, "-z", z)) + 64 * 2**20 + 256 * 2**20
print(f'  requests: {{cpu: "2", memory: "{math.ceil(by * 1.1 / 2**28) * 256}Mi"}}')
EOF
)
  [ "$got" = "$want" ] && ok "resources.sh ($kvt KV): $got" || bad "resources.sh ($kvt KV)" "got:  $got
want: $want"
done
mem=$("$SRC/deploy/k8s/resources.sh" --bin "$BIN" -m "$T" -md "$D" -zd "$Z" -c 512 -np 4 -t 1 | sed -n 's/.*requests: .*memory: "\([0-9]*\)Mi".*/\1/p')
"$BIN" serve -m "$T" -md "$D" -zd "$Z" -c 512 -np 4 -t 1 --port 0 2>"$TMP/log" &
SPID=$!
port=
for _ in $(seq 600); do
  port=$(sed -n 's|^serve: listening on http://[^ ]*:\([0-9][0-9]*\) .*|\1|p' "$TMP/log" | head -1)
  [ -n "$port" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ] && break
  sleep 0.05
done
cpids=()
for _ in 1 2 3 4 5 6 7 8; do
  curl -s -m 60 -o /dev/null "http://127.0.0.1:$port/v1/completions" -d '{"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0, "ignore_eos": true}' &
  cpids+=($!)
done
wait "${cpids[@]}"
rss=$(awk '/^VmHWM/ { print int($2 / 1024) }' "/proc/$SPID/status")
kill -TERM "$SPID"; wait "$SPID"; SPID=
if [ "${SPECDEC_SANITIZED:-0}" = 1 ]; then echo "note peak RSS ${rss} MiB against ${mem} MiB not compared: AddressSanitizer's shadow memory"
elif [ -n "$rss" ] && [ -n "$mem" ] && [ "$rss" -le "$mem" ]; then ok "a server with those arguments peaks at ${rss} MiB resident, within the ${mem} MiB"
else bad "peak RSS ${rss:-?} MiB past the ${mem:-?} MiB of resources.sh"; fi

echo "deploy static: $pass passed, $fail failed"
[ "$fail" = 0 ]
