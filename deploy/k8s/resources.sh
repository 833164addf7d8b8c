#!/usr/bin/env bash
# Sizes a replica's Kubernetes resources from its model files (docs/deploy.md, "Resources"):
#   memory = 1.1 x (target file + draft file                       mapped, and read every token
#                   + slots x ctx x (target + draft KV bytes per position)
#                   + --buffer-limit + 256 MiB)                    request bodies; scratch, threads
#   rounded up to 256 MiB; cpu = the threads (-t). Requests equal limits (Guaranteed QoS: a replica
#   is neither throttled below its threads nor evicted first). KV bytes per position come from
#   `specdec info` (f32; halved for --kv-type f16).
# Usage: deploy/k8s/resources.sh [--bin SPECDEC] -m TARGET [-md DRAFT] [-z TOK] [-zd TOK] -c CTX
#        -np SLOTS -t THREADS [--kv-type f32|f16] [--buffer-limit MIB]      prints the YAML block
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$ROOT/build/specdec T='' D='' ZT=() ZD=() C='' NP='' TH='' KV=f32 BUF=64
die() { echo "resources: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --bin) BIN=$2 ;; -m) T=$2 ;; -md) D=$2 ;; -z) ZT=(-z "$2") ;; -zd) ZD=(-z "$2") ;;
    -c) C=$2 ;; -np) NP=$2 ;; -t) TH=$2 ;; --kv-type) KV=$2 ;; --buffer-limit) BUF=$2 ;;
    *) die "unknown option '$1'" ;;
  esac
  [ $# -ge 2 ] || die "$1 needs a value"
  shift 2
done
if [ -z "$T" ] || [ -z "$C" ] || [ -z "$NP" ] || [ -z "$TH" ]; then die "-m, -c, -np and -t are required"; fi
for v in "$C" "$NP" "$TH" "$BUF"; do [[ $v =~ ^[0-9]+$ ]] || die "not a number: '$v'"; done
case $KV in f32) half=1 ;; f16) half=2 ;; *) die "--kv-type must be f32 or f16, got '$KV'" ;; esac
kv() { # MODEL TOKENIZER_ARGS...: KV cache bytes per position (f32)
  local m=$1; shift
  "$BIN" info "$@" "$m" | sed -n 's/^kv cache: *\([0-9][0-9]*\) bytes per token (f32).*/\1/p' | grep . ||
    die "specdec info $m gives no 'kv cache: N bytes per token (f32)' line"
}
size() { [ -f "$1" ] || die "no model file $1 (give a path)"; stat -c %s "$1"; }
ft=$(size "$T"); kt=$(kv "$T" "${ZT[@]}")
fd=0 kd=0
if [ -n "$D" ]; then fd=$(size "$D"); kd=$(kv "$D" "${ZD[@]}"); fi
bytes=$(( (ft + fd + NP * C * (kt + kd) / half + BUF * 1048576 + 268435456) * 11 / 10 ))
mib=$(( (bytes + 268435455) / 268435456 ))   # in blocks of 256 MiB
mib=$(( mib * 256 ))
cat <<YAML
# target $ft bytes, draft $fd bytes, KV $kt + $kd bytes per position (f32) x $NP slots x $C positions ($KV), buffers $BUF MiB
resources:
  requests: {cpu: "$TH", memory: "${mib}Mi"}
  limits: {cpu: "$TH", memory: "${mib}Mi"}
YAML
