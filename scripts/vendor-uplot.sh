#!/usr/bin/env bash
# Vendor uPlot (MIT, https://github.com/leeoniya/uPlot) into the dashboard's
# files (server/obs/dash), which the build embeds in rtraind: the daemon
# never fetches anything at run time. The package is the one pinned in
# tests/interop/package-lock.json, installed by scripts/deps.sh --test
# (tests/interop/run.sh --install). Copies the minified build, its CSS and
# its licence, and writes which version it was.
#   scripts/vendor-uplot.sh           copy
#   scripts/vendor-uplot.sh --check   exit 1 if the vendored copy differs
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$("$root/tests/interop/run.sh" --dir)/node_modules/uplot"
dst=$root/server/obs/dash
if [ ! -f "$dir/package.json" ]; then
  echo "uplot is not installed in $dir: run scripts/deps.sh --test" >&2
  exit 1
fi
ver=$(sed -n 's/^ *"version": "\(.*\)",$/\1/p' "$dir/package.json" | head -n 1)
if [ "${1:-}" = --check ]; then
  cmp -s "$dir/dist/uPlot.iife.min.js" "$dst/uPlot.iife.min.js" &&
    cmp -s "$dir/dist/uPlot.min.css" "$dst/uPlot.min.css" &&
    cmp -s "$dir/LICENSE" "$dst/uPlot.LICENSE" &&
    grep -qx "uplot $ver" "$dst/VENDORED" || {
      echo "server/obs/dash differs from uplot $ver: run scripts/vendor-uplot.sh" >&2
      exit 1
    }
  echo "uplot $ver vendored"
  exit 0
fi
cp "$dir/dist/uPlot.iife.min.js" "$dir/dist/uPlot.min.css" "$dst/"
cp "$dir/LICENSE" "$dst/uPlot.LICENSE"
echo "uplot $ver" >"$dst/VENDORED"
echo "vendored uplot $ver into $dst"
