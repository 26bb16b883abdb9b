#!/usr/bin/env bash
# Run a Node interop test: installs @grpc/grpc-js, @grpc/proto-loader and
# grpc-health-check (the upstream health.proto) into tests/interop/node_modules
# when they are missing, then runs interop.js (or --script NAME.js) against
# the rtraind given as the next argument. Exit 77 (ctest: skipped) only
# when node/npm are not installed at all.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "node/npm not installed (scripts/deps.sh --test installs them); skipping" >&2
  exit 77
fi
script=interop.js
if [ "${1:-}" = --script ]; then
  script=$2
  shift 2
fi
# The daemon path may be relative to the caller's directory.
args=("$@")
if [ ${#args[@]} -gt 0 ] && [ -e "${args[0]}" ]; then
  args[0]="$(cd "$(dirname "${args[0]}")" && pwd)/$(basename "${args[0]}")"
fi
cd "$here"
have() { [ -f node_modules/@grpc/grpc-js/package.json ] && [ -f node_modules/@grpc/proto-loader/package.json ] &&
          [ -f node_modules/grpc-health-check/package.json ]; }
if ! have; then
  # A lock directory keeps two configurations' test runs from installing at once.
  until mkdir .npm-install.lock 2>/dev/null; do sleep 1; done
  trap 'rmdir "$here/.npm-install.lock" 2>/dev/null || true' EXIT
  if ! have; then
    if [ -f package-lock.json ]; then
      npm ci --no-audit --no-fund --loglevel=error
    else
      npm install --no-audit --no-fund --loglevel=error
    fi
  fi
  rmdir .npm-install.lock
  trap - EXIT
fi
exec node "$here/$script" "${args[@]}"
