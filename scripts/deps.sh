#!/usr/bin/env bash
# Install the Debian packages rtrain builds, tests and benchmarks with.
# Usage: scripts/deps.sh [--test] [--bench]
#   --test   adds what the test suite needs (pytest, Jupyter, node/npm and the
#            interop tests' npm packages, chromium for the dashboard's
#            browser test, rsvg, clang-14 + libFuzzer for
#            scripts/fuzz.sh, Prometheus for the metrics scrape test,
#            python3-yaml and systemd-analyze for deploy/, python3-venv for
#            the package tests, shellcheck and clang-format)
#   --bench  adds the benchmarks' peers and fixture generators (python3-torch,
#            python3-grpcio)
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
pkgs=(build-essential cmake ninja-build pkg-config
      libgrpc-dev libabsl-dev libprotobuf-c-dev protobuf-c-compiler libuv1-dev
      libdnnl-dev libjson-c-dev libxxhash-dev zlib1g-dev libssl-dev openssl
      libonnx-dev
      libturbojpeg0-dev libpng-dev libhdf5-dev libmicrohttpd-dev
      libopenmpi-dev openmpi-bin
      python3-dev python3-numpy python3-sklearn python3-h5py
      dpkg-dev file)  # cpack's .debs: dpkg-shlibdeps, file (docs/packages.md)
want_test=0 want_bench=0
for a in "$@"; do
  case $a in
    --test) want_test=1 ;;
    --bench) want_bench=1 ;;
    *) echo "usage: scripts/deps.sh [--test] [--bench]" >&2; exit 2 ;;
  esac
done
# OpenBLAS (pthread build) is what docs/workloads.md measured PyTorch with;
# without it Debian's torch falls back to the netlib reference BLAS.
[ $want_bench -eq 0 ] || pkgs+=(python3-torch libopenblas0-pthread)
# bench/data/stream_bench.py: the real Fashion-MNIST IDX files, and PIL for
# its TFRecord and JPEG folders
[ $want_bench -eq 0 ] || pkgs+=(dataset-fashion-mnist python3-pil)
# bench/first_call.py: grpcio's first call, beside rtrain's (bench/story.py)
[ $want_bench -eq 0 ] || pkgs+=(python3-grpcio)
if [ $want_test -eq 1 ]; then
  pkgs+=(python3-pil python3-pytest jupyter-nbconvert python3-ipykernel
         python3-matplotlib librsvg2-bin prometheus python3-yaml systemd)
  # ONNX: the export-back check loads rtrain's export into PyTorch
  # (tests/onnx); onnx reads it back in the Python tests; torchvision
  # builds resnet18 and mobilenet_v2 for onnx_torchvision.
  pkgs+=(python3-torch python3-torchvision python3-onnx libopenblas0-pthread)
  # examples/inception's test (inception_preempt) builds its shards from it
  pkgs+=(dataset-fashion-mnist)
  # scripts/fuzz.sh: libFuzzer harnesses (tests/fuzz) built with clang.
  pkgs+=(clang-14 libfuzzer-14-dev)
  # ops_shellcheck: shellcheck over every shell script; scripts/format.sh:
  # clang-format (Debian's is version 14)
  pkgs+=(shellcheck clang-format)
  # tests/mpi/netns.sh: ip netns, the MPI tests across network namespaces
  pkgs+=(iproute2)
  # scripts/test.sh: ps walks the background build's processes (renice
  # is bsdutils, essential); procps is not in a minimal Debian image
  pkgs+=(procps)
  # pip install ./client/python into a venv (tests/packages)
  pkgs+=(python3-venv python3-pip python3-setuptools)
  # The interop test needs node and npm; this machine kind ships them
  # (nodesource's nodejs bundles npm), a bare Debian gets Debian's.
  command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
  # The dashboard's browser test (tests/interop/dash.js): headless Chromium,
  # driven by puppeteer-core (an npm package below).
  pkgs+=(chromium)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y "${missing[@]}"
fi
# The interop tests' npm packages (tests/interop/package-lock.json), into a
# folder outside the source tree that tests/interop/run.sh finds; the tests
# themselves never install anything.
if [ $want_test -eq 1 ]; then
  "$(dirname "$0")/../tests/interop/run.sh" --install
fi
