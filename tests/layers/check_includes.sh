#!/usr/bin/env bash
# The module layering as a test: each src/ module may include the public headers (specdec/), its
# own headers and those of the modules below it in this table, nothing else. The server, the CLI
# and the bench reach the engine only through include/specdec; the kernels know no model.
# Usage: check_includes.sh SOURCE_DIR
set -euo pipefail
src="${1:?usage: check_includes.sh SOURCE_DIR}/src"

# module: the private include folders it may use besides specdec/ and its own
declare -A allowed=(
    [core]=""
    [kernels]="core"
    [kv]="core"
    [verify]=""
    [draft]=""
    [sample]="kernels"
    [target]="kernels"
    [model]="core kernels"
    [tokenizer]="core"
    [chat]="core"
    [grammar]="core"
    [engine]="core draft"
    [bench]="core kernels"
    [server]="core"
    [cli]="core server"
)

fail=0
for dir in "$src"/*/; do
    mod=$(basename "$dir")
    if [[ -z "${allowed[$mod]+set}" ]]; then
        echo "layers: src/$mod/ is not in this script's table: add it with the folders it may include"
        fail=1
        continue
    fi
    ok=" specdec $mod ${allowed[$mod]} "
    while IFS= read -r line; do
        file=${line%%:*}
        inc=$(sed -E 's/.*#include "([^"]*)".*/\1/' <<<"$line")
        [[ "$inc" == */* ]] || continue # a header beside the file
        top=${inc%%/*}
        if [[ "$ok" != *" $top "* ]]; then
            echo "layers: ${file#"$src"/} includes \"$inc\": src/$mod may include only specdec/, $mod/${allowed[$mod]:+ and ${allowed[$mod]// /, }}"
            fail=1
        fi
    done < <(grep -H '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$dir"*.[ch] 2>/dev/null || true)
done
[[ $fail == 0 ]] && echo "layers: every src/ module includes only what its row allows (${#allowed[@]} modules)"
exit $fail
