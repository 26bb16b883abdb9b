#!/usr/bin/env bash
# cpack's .debs (cmake/rt_package.cmake), installed into a scratch root with
# dpkg -x: their fields and contents, the maintainer scripts, the packaged
# systemd unit (systemd-analyze verify), then the installed programs at
# work: the installed rtraind, run with the packaged rtraind.env's options
# (paths and ports moved to scratch ones), trains iris for the installed
# rtrain CLI; a C program builds against the installed headers and
# rtrain.pc and calls the daemon through the installed librtrain; pip
# builds the Python client against the installed librtrain into a venv and
# trains iris. Then deploy/Containerfile is checked against the packages
# (check_containerfile.py). Prints each package's size.
#   usage: packages_deb.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1 src=$2
. "$src/tests/lib/e2e.sh"
# RT_SANITIZE builds: the runtimes for programs that load librtrain
# uninstrumented (CMakeLists.txt)
san=()
[ -z "${RT_SAN_LD_PRELOAD:-}" ] || san=(LD_PRELOAD="$RT_SAN_LD_PRELOAD" ASAN_OPTIONS="$RT_SAN_ASAN_OPTIONS")
pk=$tmp/pk root=$tmp/root
ver=$(sed -n 's/^#define RT_VERSION_STRING "\(.*\)"$/\1/p' "$build/gen/rt_version.h")
arch=$(dpkg --print-architecture)
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
cpack --config "$build/CPackConfig.cmake" -B "$pk" >"$tmp/cpack.log" 2>&1 \
  && ok "cpack" || { bad "cpack"; tail -20 "$tmp/cpack.log"; exit 1; }
d=$pk/rtraind_${ver}_${arch}.deb c=$pk/rtrain_${ver}_${arch}.deb
for f in "$d" "$c"; do
  [ -f "$f" ] && ok "made $(basename "$f"): $(stat -c %s "$f") bytes, installed $(dpkg-deb -f "$f" Installed-Size) KiB" \
    || { bad "no $(basename "$f") in: $(ls "$pk")"; exit 1; }
done

# ---- fields
[ "$(dpkg-deb -f "$d" Package)" = rtraind ] && [ "$(dpkg-deb -f "$c" Package)" = rtrain ] \
  && ok "package names" || bad "package names"
dep=$(dpkg-deb -f "$d" Depends)
for p in passwd libgrpc29 libprotobuf-c1 libuv1; do
  grep -qE "(^|, )$p( |,|$)" <<<"$dep" && ok "rtraind depends on $p" || bad "rtraind Depends: $dep"
done
# oneDNN only with the native CPU backend: a -DRT_NATIVE=OFF daemon runs on
# the portable ref backend (docs/backends.md) and needs none
if grep -q '^RT_NATIVE:BOOL=ON$' "$build/CMakeCache.txt"; then
  grep -qE "(^|, )libdnnl2( |,|$)" <<<"$dep" && ok "rtraind depends on libdnnl2" \
    || bad "rtraind Depends: $dep"
else
  grep -q libdnnl <<<"$dep" && bad "a ref-only rtraind depends on oneDNN: $dep" \
    || ok "a ref-only rtraind does not depend on oneDNN"
fi
cdep=$(dpkg-deb -f "$c" Depends)
for p in libgrpc29 libprotobuf-c1; do
  grep -qE "(^|, )$p( |,|$)" <<<"$cdep" && ok "rtrain depends on $p" || bad "rtrain Depends: $cdep"
done

# ---- contents
dpkg-deb -c "$d" | awk '{print $6}' >"$tmp/d.list"
dpkg-deb -c "$c" | awk '{print $6}' >"$tmp/c.list"
for f in ./usr/sbin/rtraind ./lib/systemd/system/rtraind.service ./etc/rtrain/rtraind.env \
         ./usr/share/doc/rtraind/operations.md ./usr/share/doc/rtraind/packages.md; do
  grep -qx -- "$f" "$tmp/d.list" && ok "rtraind has $f" || bad "rtraind lacks $f"
done
for f in ./usr/bin/rtrain ./usr/bin/rtrain-bench ./usr/lib/$ma/librtrain.so.$ver ./usr/lib/$ma/librtrain.so.0 \
         ./usr/lib/$ma/librtrain.so ./usr/lib/$ma/pkgconfig/rtrain.pc \
         ./usr/include/rtrain/rtrain.h ./usr/include/rtrain/rtrain_data.h \
         ./usr/include/rtrain/rtrain_tb.h ./usr/include/rtrain/rt_error.h; do
  grep -qx -- "$f" "$tmp/c.list" && ok "rtrain has $f" || bad "rtrain lacks $f"
done
grep -q "/usr/local" "$tmp/d.list" "$tmp/c.list" && bad "a file under /usr/local" \
  || ok "nothing under /usr/local"

# ---- maintainer scripts
mkdir "$tmp/ctl"
dpkg-deb -e "$d" "$tmp/ctl"
for s in postinst prerm postrm; do
  [ -x "$tmp/ctl/$s" ] && sh -n "$tmp/ctl/$s" && ok "$s is an executable sh script" \
    || bad "$s missing or not sh"
done
grep -q "useradd --system" "$tmp/ctl/postinst" && grep -q "getent passwd rtrain" "$tmp/ctl/postinst" \
  && ok "postinst makes the rtrain system user once" || bad "postinst: no useradd --system"
[ "$(cat "$tmp/ctl/conffiles")" = /etc/rtrain/rtraind.env ] && ok "conffiles: rtraind.env" \
  || bad "conffiles: $(cat "$tmp/ctl/conffiles")"

# ---- unpacked
dpkg -x "$d" "$root" && dpkg -x "$c" "$root" && ok "dpkg -x both" || { bad "dpkg -x"; exit 1; }
unit=$root/lib/systemd/system/rtraind.service
grep -qx "ExecStart=/usr/sbin/rtraind \$RTRAIND_OPTS" "$unit" && ok "unit runs /usr/sbin/rtraind" \
  || bad "unit ExecStart: $(grep ExecStart= "$unit")"
grep -qx "User=rtrain" "$unit" && ! grep -q "^DynamicUser" "$unit" && ok "unit: User=rtrain" \
  || bad "unit user"
# every setting of deploy/rtraind.service but the ones the package changes
# is in the packaged unit, unchanged: the hardening comes along
miss=$(grep -vE '^(#|$|ExecStart=|Documentation=|DynamicUser=)' "$src/deploy/rtraind.service" \
       | grep -vxFf "$unit")
[ -z "$miss" ] && ok "unit keeps every other setting of deploy/rtraind.service" \
  || bad "unit lost: $miss"
sed "s|^ExecStart=/usr/sbin/rtraind|ExecStart=$root/usr/sbin/rtraind|" "$unit" >"$tmp/rtraind.service"
systemd-analyze verify "$tmp/rtraind.service" >"$tmp/verify" 2>&1 && ok "systemd-analyze verify" \
  || { bad "systemd-analyze verify"; cat "$tmp/verify"; }
for b in usr/sbin/rtraind usr/bin/rtrain usr/lib/$ma/librtrain.so.0; do
  if ldd "$root/$b" | grep -qE "not found|$build"; then bad "$b links: $(ldd "$root/$b" | grep -E "not found|$build")"
  else ok "$b links only system libraries"; fi
done

# ---- the installed daemon with the packaged configuration
eval "$(grep '^RTRAIND_OPTS=' "$root/etc/rtrain/rtraind.env" | sed 's/^RTRAIND_OPTS=/opts=(/; s/$/)/')"
run=()
# shellcheck disable=SC2154 # opts is set by the eval above
for ((i = 0; i < ${#opts[@]}; i++)); do
  case ${opts[i]} in
    --listen) i=$((i + 1)) ;;                                  # start_daemon's
    --state-dir) run+=(--state-dir "$tmp/state"); i=$((i + 1)) ;;
    --metrics-listen) run+=(--metrics-listen 127.0.0.1:0); i=$((i + 1)) ;;
    *) run+=("${opts[i]}") ;;
  esac
done
[ ${#run[@]} -gt 6 ] && ok "rtraind.env: ${#opts[@]} words of options" || bad "rtraind.env options: ${opts[*]}"
mkdir -m 700 "$tmp/state"
rtraind=$root/usr/sbin/rtraind
start_daemon "$tmp/daemon.log" "${run[@]}" || exit 1
ok "installed rtraind listening on $addr"
ex=$src/examples/iris
expect_rc 0 "installed rtrain fit" -- "$root/usr/bin/rtrain" fit --server "$addr" \
  --model "$ex/model.json" --data "$ex/train_shuffled.csv" --val "$ex/val_shuffled.csv" \
  --loss sparse_categorical_crossentropy --optimizer adam --lr 0.02 --batch-size 20 \
  --epochs 60 --seed 1 --tensorboard "$tmp/tb"
acc=$(sed -n 's/^final:.* val_accuracy \([0-9.]*\).*/\1/p' "$tmp/out")
ge "$acc" 0.9 && ok "val_accuracy $acc >= 0.9" || bad "val_accuracy '$acc'"
ls "$tmp/tb/train"/events.out.tfevents.* >/dev/null 2>&1 && ok "--tensorboard wrote train/" \
  || bad "no event file"

# ---- a C program against the installed headers, rtrain.pc and librtrain
pc=$root/usr/lib/$ma/pkgconfig
flags=$(PKG_CONFIG_PATH=$pc pkg-config --cflags --libs rtrain)
# relocatable: the prefix is found from the .pc file's own place
inc=$(PKG_CONFIG_PATH=$pc pkg-config --cflags-only-I rtrain | sed 's/^-I//; s/ *$//')
libd=$(PKG_CONFIG_PATH=$pc pkg-config --libs-only-L rtrain | sed 's/^-L//; s/ *$//')
[ "$(realpath "$inc")" = "$(realpath "$root/usr/include")" ] \
  && [ "$(realpath "$libd")" = "$(realpath "$root/usr/lib/$ma")" ] \
  && ok "rtrain.pc points into the unpacked root" || bad "pkg-config: '$flags'"
cat >"$tmp/ping.c" <<'C'
#include <rtrain/rtrain.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    rt_client *c;
    uint64_t rtt = 0;
    if (rt_client_create(argv[1], &c) < 0)
        return 1;
    int rc = rt_client_ping(c, 64, &rtt);
    printf("ping %d rtt %llu\n", rc, (unsigned long long)rtt);
    rt_client_destroy(c);
    return rc < 0 ? 2 : 0;
}
C
# shellcheck disable=SC2086
cc -Wall -Werror -o "$tmp/ping" "$tmp/ping.c" $flags && ok "cc against rtrain.pc" \
  || bad "cc against rtrain.pc"
# grep reads all of ldd's output: grep -q would stop at the match, and
# under pipefail ldd's SIGPIPE then failed the check now and then
LD_LIBRARY_PATH=$root/usr/lib/$ma ldd "$tmp/ping" | grep "librtrain.so.0 => $root/usr/lib/$ma/" \
  >/dev/null && ok "it loads the installed librtrain" || bad "ldd: $(LD_LIBRARY_PATH=$root/usr/lib/$ma ldd "$tmp/ping")"
expect_rc 0 "ping through the installed librtrain" -- env "${san[@]}" \
  LD_LIBRARY_PATH="$root/usr/lib/$ma" "$tmp/ping" "$addr"

# ---- pip against the installed librtrain (as a user with the rtrain .deb)
mkdir -p "$tmp/src/client"
cp -r "$src/client/python" "$src/client/lib" "$tmp/src/client/"
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv" && ok "venv" || bad "venv"
(cd "$tmp/src" && PKG_CONFIG_PATH=$pc "$tmp/venv/bin/pip" install --no-index \
   --no-build-isolation ./client/python) >"$tmp/pip.log" 2>&1 \
  && ok "pip install ./client/python against the package" || { bad "pip"; tail -20 "$tmp/pip.log"; }
(cd "$tmp" && env "${san[@]}" LD_LIBRARY_PATH="$root/usr/lib/$ma" "$tmp/venv/bin/python" \
   "$src/tests/packages/train_iris.py" "$addr" "$tmp/venv" "$root/usr/lib/$ma") >"$tmp/out" 2>&1 \
  && ok "$(tail -1 "$tmp/out")" || { bad "train iris through the venv"; tail -20 "$tmp/out"; }

# ---- the daemon stops cleanly (SIGTERM: drain, grace, exit 0)
kill -TERM "$dpid"
wait "$dpid"
rc=$?
dpid=""
[ "$rc" -eq 0 ] && ok "installed rtraind exits 0 on SIGTERM" || bad "rtraind exit $rc"

# ---- deploy/Containerfile against these packages
/usr/bin/python3 "$src/tests/packages/check_containerfile.py" "$src" "$pk" "$root" >"$tmp/cf" 2>&1 \
  && ok "Containerfile: $(tail -1 "$tmp/cf")" || { bad "Containerfile"; grep -v '^ok' "$tmp/cf"; }

echo "$((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
