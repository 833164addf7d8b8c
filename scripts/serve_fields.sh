#!/bin/sh
# Rewrites docs/serve.md's table of server request fields from src/server/api.c's srv_fields (what
# tests/test_server.c holds that page to). Run after changing that table: scripts/serve_fields.sh [build dir]
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
cmake --build "$build" --target test_server >/dev/null
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
SD_PRINT_FIELDS=1 "$build/test_server" test_fields_doc 2>/dev/null | grep '^| `' >"$rows" || true
[ -s "$rows" ] || { echo "serve_fields: $build/test_server printed no rows" >&2; exit 1; }
/usr/bin/python3 - "$rows" <<'PY'
import sys
rows = open(sys.argv[1]).read()
text = open("docs/serve.md").read()
a = text.index("<!-- fields:")
head_end = text.index("|---|---|---|\n", a) + len("|---|---|---|\n")
z = text.index("<!-- end of fields -->", head_end)
open("docs/serve.md", "w").write(text[:head_end] + rows + text[z:])
PY
echo "docs/serve.md: $(wc -l <"$rows") rows of fields"
