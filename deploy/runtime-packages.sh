#!/usr/bin/env bash
# Prints the Debian packages that hold the shared libraries BINARY loads (ldd, then dpkg -S on each
# library's real path), one per line: what deploy/Dockerfile's runtime stage installs, so the image
# carries the binary and its libraries only. Fails naming a library ldd cannot find or dpkg does
# not own.
# Usage: deploy/runtime-packages.sh BINARY
set -euo pipefail
if [ $# != 1 ] || [ ! -x "$1" ]; then echo "usage: $0 BINARY (an executable)" >&2; exit 2; fi
ldd "$1" | awk '/ => not found/ { print "runtime-packages: ldd cannot find " $1 > "/dev/stderr"; bad = 1 }
                / => \// { print $3 } END { exit bad }' |
while read -r lib; do
  # /lib is a link to /usr/lib on bookworm (merged /usr); dpkg knows each file by one of the two names
  real=$(readlink -f "$lib")
  pkg=$(dpkg -S "$real" 2>/dev/null || dpkg -S "${real#/usr}" 2>/dev/null || dpkg -S "/usr$real" 2>/dev/null) ||
    { echo "runtime-packages: no Debian package owns $lib ($real)" >&2; exit 1; }
  echo "${pkg%%:*}"
done | sort -u
