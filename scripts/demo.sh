#!/usr/bin/env bash
# The main job: set up, build, then a speculative generation on the default pair
# (target stories260K, draft stories-draft) with a plain-decoding comparison run.
# Extra arguments go to `specdec generate` (e.g. -p "The little dog" -n 256 --temp 0.8).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
exec build/specdec generate -m stories260K -md stories-draft -n 256 --compare "$@"
