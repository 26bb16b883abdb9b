#!/usr/bin/env bash
# Install the Debian packages rtrain builds, tests and benchmarks with.
# Usage: scripts/deps.sh [--test]   (--test adds the Python/Jupyter test deps)
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
pkgs=(build-essential cmake pkg-config
      libgrpc-dev libprotobuf-c-dev protobuf-c-compiler libuv1-dev
      libdnnl-dev libjson-c-dev libxxhash-dev zlib1g-dev
      python3-dev python3-numpy python3-sklearn)
if [ "${1:-}" = "--test" ]; then
  pkgs+=(python3-pytest python3-torch jupyter-nbconvert python3-ipykernel
         python3-matplotlib librsvg2-bin)
  # The interop test needs node and npm; this machine kind ships them
  # (nodesource's nodejs bundles npm), a bare Debian gets Debian's.
  command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
