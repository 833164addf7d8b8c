#!/bin/sh
# Rewrites docs/serve.md's table of server request fields, and README's table of their names by what
# the server does with them, from src/server/api.c's srv_fields (what tests/test_server.c holds
# those pages to). Run after changing that table: scripts/serve_fields.sh [build dir]
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
cmake --build "$build" --target test_server >/dev/null
rows=$(mktemp) names=$(mktemp)
trap 'rm -f "$rows" "$names"' EXIT
SD_PRINT_FIELDS=docs "$build/test_server" test_fields_doc 2>/dev/null | grep '^| `' >"$rows" || true
SD_PRINT_FIELDS=readme "$build/test_server" test_fields_doc 2>/dev/null | grep '^| `' >"$names" || true
[ -s "$rows" ] && [ -s "$names" ] || { echo "serve_fields: $build/test_server printed no rows" >&2; exit 1; }
/usr/bin/python3 - "$rows" docs/serve.md "<!-- fields:" "<!-- end of fields -->" "$names" README.md "<!-- field names:" "<!-- end of field names -->" <<'PY'
import sys
args = sys.argv[1:]
for rows_file, page, open_mark, close_mark in (args[0:4], args[4:8]):
    rows = open(rows_file).read()
    text = open(page).read()
    a = text.index(open_mark)
    sep = text.index("|---|", a)
    head_end = text.index("\n", sep) + 1
    z = text.index(close_mark, head_end)
    open(page, "w").write(text[:head_end] + rows + text[z:])
PY
echo "docs/serve.md: $(wc -l <"$rows") rows of fields; README.md: $(wc -l <"$names") rows of their names"
