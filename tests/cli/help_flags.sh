#!/usr/bin/env bash
# help_flags.sh - what --help prints, the tests cover. For every flag that
# `rtraind --help` and `rtrain CMD --help` (every command `rtrain --help`
# lists) print:
#  - its line has a description;
#  - some file under tests/ uses it (a line that is not a comment), or
#    tests/cli/flags_untested.txt names it with the reason no test can.
# An entry of that list for a flag a test now uses, or that no --help
# prints any more, fails too. The help texts are read when the test runs,
# so a flag added to the daemon or the CLI is covered once it is built.
#   usage: help_flags.sh RTRAIND RTRAIN SOURCE_DIR
set -uo pipefail
rtraind=$1 rtrain=$2 src=$3
allow=$src/tests/cli/flags_untested.txt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 checks=0
ok()  { checks=$((checks + 1)); }
bad() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL $*"; }

# flag lines: "  --name [ARG]   description" (a flag's own line, two spaces
# in); prints "name<TAB>description" for each
flag_lines() {
  awk '/^  --[a-z0-9]/ {
    flag = $1; sub(/^--/, "", flag)
    i = 2
    # an argument: upper case first (N, FILE, M.json|M.onnx) or a choice
    # list or pattern (1|3, on|off|auto, flip,crop=P,..)
    if (NF >= 2 && ($2 ~ /^[A-Z0-9]/ || $2 ~ /[|,=]/)) i = 3
    d = ""
    for (k = i; k <= NF; k++) d = d (d == "" ? "" : " ") $k
    printf "%s\t%s\n", flag, d
  }'
}

# --- the help texts
"$rtraind" --help >"$tmp/rtraind.help" 2>&1 && ok || bad "rtraind --help: exit $?"
"$rtrain" --help >"$tmp/rtrain.help" 2>&1 && ok || bad "rtrain --help: exit $?"
# the commands: "  info  ...", "  bench overhead [...", "  checkpoint pull SESSION ..."
awk '/^Commands:/ { on = 1; next } on && /^$/ { exit }
     on && /^  [a-z]/ { c = $1; if ($2 ~ /^[a-z]+$/ && index($0, "  " $1 " " $2) == 1) c = c " " $2; print c }' \
  "$tmp/rtrain.help" | sort -u >"$tmp/cmds0"
# "bench" alone stands for its subcommands
# shellcheck disable=SC2094 # cmds0 is only read (twice); the output is cmds
while read -r c; do
  grep -q "^$c " "$tmp/cmds0" || echo "$c"
done <"$tmp/cmds0" >"$tmp/cmds"
[ "$(wc -l <"$tmp/cmds")" -ge 8 ] && ok || bad "only $(wc -l <"$tmp/cmds") commands in rtrain --help"
flag_lines <"$tmp/rtraind.help" | sed 's/^/rtraind\t/' >"$tmp/flags"
while read -r c; do
  # shellcheck disable=SC2086
  if "$rtrain" $c --help >"$tmp/cmd.help" 2>&1; then ok; else bad "rtrain $c --help: exit $?"; fi
  flag_lines <"$tmp/cmd.help" | sed "s/^/rtrain $c\t/" >>"$tmp/flags"
done <"$tmp/cmds"
n_flags=$(cut -f2 "$tmp/flags" | sort -u | wc -l)
echo "$(wc -l <"$tmp/cmds") rtrain commands; $n_flags flags in the help texts"
[ "$n_flags" -ge 100 ] && ok || bad "only $n_flags flags read from the help texts"

# --- every flag line has a description
while IFS=$'\t' read -r who flag desc; do
  [ -n "$desc" ] && ok || bad "$who --help: --$flag has no description"
done <"$tmp/flags"

# --- every flag is used by a test, or listed with the reason it cannot be
listed() { grep -q -- "^--$1[[:space:]]" "$allow"; }
# Every --word that a line under tests/ (not a comment) holds, read in one
# pass: the tree's 17 MB once rather than once a flag (148 greps of it took
# 30 s at load 8, the test's whole limit). A word is the longest run of
# [a-zA-Z0-9_-] after "--" that follows the line's start or another
# character, so it equals FLAG exactly where the line has --FLAG with no
# such character on either side. (grep reports a binary file's match on
# stderr: those are not counted, as before.)
grep -rhE --exclude=help_flags.sh --exclude=flags_untested.txt -- '(^|[^a-zA-Z0-9_-])--[a-zA-Z0-9_-]' \
    "$src/tests" | grep -vE '^[[:space:]]*(#|//|/\*|\*)' |
  grep -oE -- '(^|[^a-zA-Z0-9_-])--[a-zA-Z0-9_-]+' | sed 's/^[^-]*--//' | sort -u >"$tmp/used"
used() { grep -qxF -- "$1" "$tmp/used"; }
cut -f2 "$tmp/flags" | sort -u >"$tmp/names"
n_used=0
while read -r flag; do
  if used "$flag"; then
    n_used=$((n_used + 1))
    if listed "$flag"; then
      bad "--$flag is used by a test now: remove it from tests/cli/flags_untested.txt"
    else ok; fi
  elif listed "$flag"; then ok
  else bad "--$flag: no test under tests/ uses it (write one, or give the reason in tests/cli/flags_untested.txt)"
  fi
done <"$tmp/names"
# the list holds only flags the help texts print, each with a reason
while read -r flag reason; do
  case $flag in ''|'#'*) continue ;; esac
  grep -qx -- "${flag#--}" "$tmp/names" && ok || bad "flags_untested.txt: $flag is in no --help"
  [ -n "$reason" ] && ok || bad "flags_untested.txt: $flag has no reason"
done <"$allow"
echo "$n_used of $n_flags flags used by tests, $(grep -c '^--' "$allow") listed as untestable"
echo "$((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
