#!/usr/bin/env bash
# The main job: set up, build, then a speculative generation with a plain-decoding comparison
# run on the cost-twin pair: stories260K's twin at the stories110M shape as the target,
# stories-draft's twin at the stories15M shape as the draft (made once into the model cache,
# $SPECDEC_CACHE or .cache/models, with the names the bench configs use).
# --tiny runs the tiny trained pair itself (stories260K + stories-draft) instead.
# Other arguments go to `specdec generate` (e.g. -p "The little dog" -n 256 --temp 0.8).
set -euo pipefail
cd "$(dirname "$0")/.."

tiny=0
args=()
for a in "$@"; do
  if [ "$a" = --tiny ]; then tiny=1; else args+=("$a"); fi
done

# before setting up: without the models nothing can run (and the test of this message builds nothing)
shared=${SPECDEC_SHARED:-../shared}
if [ ! -s "$shared/models/stories260K/stories260K.bin" ] || [ ! -s "$shared/models/stories-draft/stories-draft.bin" ]; then
  echo "error: demo: the trained stories pair is not under $shared/models (stories260K/stories260K.bin," \
       "stories-draft/stories-draft.bin): run from a checkout beside ../shared, or set SPECDEC_SHARED" >&2
  exit 1
fi
# model names (stories260K, stories-draft) resolve through $SPECDEC_MODEL_PATH first
export SPECDEC_MODEL_PATH="$shared/models${SPECDEC_MODEL_PATH:+:$SPECDEC_MODEL_PATH}"

scripts/setup.sh build

if [ "$tiny" = 1 ]; then
  exec build/specdec generate -m stories260K -md stories-draft -n 256 --compare ${args[@]+"${args[@]}"}
fi

cache=${SPECDEC_CACHE:-.cache/models}
target="$cache/twin-stories260K-stories110M-d768-l12-h12-kv12-f2048-f32-s1.gguf"
draft="$cache/twin-stories-draft-ztok512.bin-stories15M-d288-l6-h6-kv6-f768-f32-s1.gguf"
if [ ! -s "$target" ] || [ ! -s "$draft" ]; then
  echo "generating cost twins (once, a few seconds) into $cache" >&2
  mkdir -p "$cache"
  # written under a temporary name and renamed, so an interrupted run leaves no half file
  # (a failing command before && does not stop a set -e script: each is checked)
  build/specdec mkmodel "$target.tmp$$" --twin stories260K --shape stories110M --seed 1 || exit 1
  mv "$target.tmp$$" "$target"
  build/specdec mkmodel "$draft.tmp$$" --twin stories-draft -z "$shared/models/stories260K/tok512.bin" \
    --shape stories15M --seed 1 || exit 1
  mv "$draft.tmp$$" "$draft"
fi
echo "cost twins: stories260K and stories-draft (1 MB and 0.3 MB, trained) rebuilt at the stories110M and" \
     "stories15M shapes (343 MB and 25 MB): the same predictions at the decode cost of the large models" \
     "(specdec mkmodel --twin; scripts/demo.sh --tiny runs the tiny pair itself)" >&2
exec build/specdec generate -m "$target" -md "$draft" -n 200 --compare ${args[@]+"${args[@]}"}
