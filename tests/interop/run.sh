#!/usr/bin/env bash
# Node interop tests: runs interop.js (or --script NAME.js) with node against
# the rtraind given as the next argument. The npm packages of
# package-lock.json (@grpc/grpc-js, @grpc/proto-loader and grpc-health-check,
# the upstream health.proto; puppeteer-core for the dashboard's browser test,
# uplot for scripts/vendor-uplot.sh, @tensorflow/tfjs for
# tests/keras_import/keras_tfjs_format.sh) are found through NODE_PATH in a folder outside
# the source tree, one per lock file:
#   ${RT_NODE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rtrain/node-<lock hash>}
# A test never installs anything (no network during ctest):
#   tests/interop/run.sh --install     what scripts/deps.sh --test runs
# installs them there. Exit 77 (ctest: skipped, reason on stderr) when node
# or npm or these packages are missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
lock=$here/package-lock.json
hash=$(sha256sum "$lock" | cut -c1-16)
dir=${RT_NODE_DIR:-${XDG_CACHE_HOME:-${HOME:?}/.cache}/rtrain/node-$hash}
have() { [ -f "$1/node_modules/@grpc/grpc-js/package.json" ] &&
         [ -f "$1/node_modules/@grpc/proto-loader/package.json" ] &&
         [ -f "$1/node_modules/grpc-health-check/package.json" ] &&
         [ -f "$1/node_modules/puppeteer-core/package.json" ] &&
         [ -f "$1/node_modules/uplot/package.json" ] &&
         [ -f "$1/node_modules/@tensorflow/tfjs/package.json" ]; }

if [ "${1:-}" = --dir ]; then # where the packages are (scripts/vendor-uplot.sh)
  echo "$dir"
  exit
fi
if [ "${1:-}" = --install ]; then
  have "$dir" && exit 0
  # npm ci into a folder of this process's own, renamed into place when
  # complete: a killed install leaves only that folder (removed by the next
  # install), never a half-filled one or a lock that others wait on; of two
  # installs at once the second rename finds the first one's folder.
  mkdir -p "$(dirname "$dir")"
  for old in "$dir".part.*; do
    [ -d "$old" ] && ! kill -0 "${old##*.}" 2>/dev/null && rm -rf "$old"
  done
  part=$dir.part.$$
  rm -rf "$part" && mkdir "$part"
  cp "$here/package.json" "$lock" "$part/"
  (cd "$part" && npm ci --no-audit --no-fund --loglevel=error)
  have "$part" || { echo "npm ci in $part did not install the packages" >&2; exit 1; }
  mv -T "$part" "$dir" 2>/dev/null || { have "$dir" && rm -rf "$part"; }
  have "$dir"
  exit
fi

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "node/npm not installed (scripts/deps.sh --test installs them); skipping" >&2
  exit 77
fi
if ! have "$dir"; then
  echo "the npm packages of $lock are not in $dir (scripts/deps.sh --test installs them); skipping" >&2
  exit 77
fi
script=interop.js
if [ "${1:-}" = --script ]; then
  script=$2
  shift 2
fi
export NODE_PATH=$dir/node_modules
exec node "$here/$script" "$@"
