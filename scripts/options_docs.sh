#!/usr/bin/env bash
# options_docs.sh - the parts of docs/operations.md and deploy/rtraind.env
# that rtraind's option table (server/rt_options.h) generates, between their
# markers: --check diffs them against the table (exit 1 on a difference),
# --write rewrites them (cmake --build build --target options_docs).
#   usage: options_docs.sh --check|--write RTRAIND_OPTDOC SOURCE_DIR
set -euo pipefail
mode=$1 tool=$2 src=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

# one FILE KIND BEGIN END: the block between the lines starting with BEGIN
# and END must be `rtraind_optdoc KIND`
one() {
  local file=$src/$1 kind=$2 begin=$3 end=$4
  "$tool" "$kind" >"$tmp/want"
  if [ "$(grep -c "^$begin" "$file")" != 1 ] || [ "$(grep -c "^$end" "$file")" != 1 ]; then
    echo "FAIL $1: needs one line starting '$begin' and one '$end'"
    fails=$((fails + 1))
    return
  fi
  awk -v b="$begin" -v e="$end" 'index($0, e) == 1 { on = 0 } on { print }
                                 index($0, b) == 1 { on = 1 }' "$file" >"$tmp/have"
  if cmp -s "$tmp/want" "$tmp/have"; then
    echo "ok   $1 matches the option table"
  elif [ "$mode" = --write ]; then
    awk -v b="$begin" -v e="$end" -v gen="$tmp/want" '
      index($0, e) == 1 { on = 0 }
      !on { print }
      index($0, b) == 1 { on = 1; while ((getline l < gen) > 0) print l }' "$file" >"$tmp/new"
    cat "$tmp/new" >"$file"
    echo "wrote $1"
  else
    echo "FAIL $1 differs from the option table (fix: cmake --build build --target options_docs)"
    diff -u "$tmp/have" "$tmp/want" | head -40
    fails=$((fails + 1))
  fi
}

one docs/operations.md markdown '<!-- options: generated' '<!-- end of options'
one deploy/rtraind.env env '# --- options: generated' '# --- end of options'
[ "$fails" -eq 0 ]
