#!/usr/bin/env bash
# pip install ./client/python into a fresh virtualenv, offline, against
# Debian's setuptools and numpy (--system-site-packages: numpy is only there
# offline), building the extension against the build tree's librtrain
# (PKG_CONFIG_PATH=<build>/pkgconfig: rtrain-uninstalled.pc), then trains
# iris through it against a real rtraind (train_iris.py).
#   usage: pip_venv.sh RTRAIND BUILD_DIR SOURCE_DIR
set -uo pipefail
rtraind=$1 build=$2 src=$3
. "$src/tests/lib/e2e.sh"
# RT_SANITIZE builds: the runtimes for programs that load librtrain
# uninstrumented (CMakeLists.txt)
san=()
[ -z "${RT_SAN_LD_PRELOAD:-}" ] || san=(LD_PRELOAD="$RT_SAN_LD_PRELOAD" ASAN_OPTIONS="$RT_SAN_ASAN_OPTIONS")
# A copy of the client sources, as a user's checkout: the build writes into
# the tree it builds (build/, *.egg-info), not into this one.
mkdir -p "$tmp/src/client"
cp -r "$src/client/python" "$src/client/lib" "$tmp/src/client/"
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv" \
  && ok "venv" || { bad "venv (python3-venv: scripts/deps.sh --test)"; exit 1; }
(cd "$tmp/src" && PKG_CONFIG_PATH="$build/pkgconfig" "$tmp/venv/bin/pip" install \
   --no-index --no-build-isolation ./client/python) >"$tmp/pip.log" 2>&1 \
  && ok "pip install --no-index --no-build-isolation ./client/python" \
  || { bad "pip install"; tail -30 "$tmp/pip.log"; exit 1; }
grep -q "Successfully installed rtrain-" "$tmp/pip.log" && ok "pip installed rtrain" \
  || bad "pip: no 'Successfully installed rtrain-'"
start_daemon "$tmp/daemon.log" --log-level warn || exit 1
# run from a folder with no rtrain package beside it
(cd "$tmp" && env "${san[@]}" "$tmp/venv/bin/python" "$src/tests/packages/train_iris.py" "$addr" \
   "$tmp/venv" "$build/client/lib") >"$tmp/out" 2>&1 \
  && ok "$(tail -1 "$tmp/out")" || { bad "train iris through the venv"; tail -20 "$tmp/out"; }
echo "$((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
