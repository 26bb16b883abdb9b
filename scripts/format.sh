#!/usr/bin/env bash
# Format the C sources with .clang-format (clang-format 14, Debian 12's).
# Usage: scripts/format.sh [--check] [PATH...]
#   PATH     folders or files; default: server client common
#   --check  change nothing: list the files that differ, exit 1 if any do
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi
[ $# -gt 0 ] || set -- server client common
cf=$(command -v clang-format-14 || command -v clang-format || true)
[ -n "$cf" ] || { echo "format.sh: no clang-format (scripts/deps.sh --test installs it)" >&2; exit 2; }
mapfile -t files < <(git ls-files -- "$@" | grep -E '\.(c|h)$')
[ ${#files[@]} -gt 0 ] || { echo "format.sh: no C files under $*" >&2; exit 2; }
if [ $check -eq 0 ]; then
  "$cf" -i --style=file "${files[@]}"
  exit 0
fi
differ=0
for f in "${files[@]}"; do
  if ! "$cf" --style=file "$f" | cmp -s - "$f"; then
    echo "$f"
    differ=1
  fi
done
exit $differ
