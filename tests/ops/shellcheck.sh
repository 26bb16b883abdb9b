#!/usr/bin/env bash
# Usage: shellcheck.sh SRC. Runs shellcheck over every tracked shell script
# of the tree (*.sh, and files whose first line is a sh or bash shebang:
# .ci/run, the Debian maintainer scripts, the Slurm script). Settings:
# SRC/.shellcheckrc; a check left off for one line says why on that line.
set -euo pipefail
src=${1:?usage: shellcheck.sh SRC}
cd "$src"
command -v shellcheck >/dev/null ||
  { echo "FAIL shellcheck is not installed (scripts/deps.sh --test installs it)"; exit 1; }
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t all < <(git ls-files)
else # a source tree without git: every file but build output
  mapfile -t all < <(find . -path './build*' -prune -o -path ./.git -prune -o -type f -print |
                     sed 's|^\./||')
fi
# *.sh, and any file whose first line is a sh or bash shebang: one awk over
# them all (a head and a grep per file took most of this test's time).
present=()
for f in "${all[@]}"; do [ -f "$f" ] && present+=("$f"); done
mapfile -t scripts < <({
  printf '%s\n' "${present[@]}" | grep -E '\.sh$' || true
  # shellcheck disable=SC2016 # $0 is awk's, in awk's program
  printf '%s\0' "${present[@]}" | xargs -0 awk 'FNR == 1 {
      if ($0 ~ /^#!.*[\/ ](ba)?sh( |$)/) print FILENAME
      nextfile }'
} | sort -u)
# The tree has about 30; far fewer means the listing went wrong.
[ ${#scripts[@]} -ge 10 ] || { echo "FAIL only ${#scripts[@]} shell scripts found"; exit 1; }
if shellcheck -f gcc "${scripts[@]}"; then
  echo "ok   shellcheck: ${#scripts[@]} scripts, no findings"
else
  echo "FAIL shellcheck found the above in ${#scripts[@]} scripts"
  exit 1
fi
