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
# One clang-format for all the files (a process per file took 20 s of the
# suite); --dry-run -Werror reports each difference as "FILE:L:C: error:".
if out=$("$cf" --dry-run -Werror --style=file "${files[@]}" 2>&1); then
  exit 0
fi
listed=$(printf '%s\n' "$out" | sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: .*/\1/p' | sort -u)
[ -n "$listed" ] || { printf '%s\n' "$out" >&2; exit 2; } # not a difference: say what
printf '%s\n' "$listed"
exit 1
