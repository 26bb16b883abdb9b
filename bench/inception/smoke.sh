#!/bin/sh
# smoke.sh BENCH_INCEPTION [--peer] - the bench's output, not its speed:
# one step at batch 2 in rtrain, and with --peer in torchvision too
# (float32 and bf16 autocast: 1-2 minutes on 2 shared cores, too long for
# the suite, which runs without it); every row's epoch time and cost follow
# from its images/s (1000 images at $2.50 an hour). Asserts nothing about
# time.
set -u
peer=--no-peer rows="rtrain float32"
# rtrain's bf16 row is a row where the CPU has bf16 instructions, else says why
bf16=0
grep -qw avx512_bf16 /proc/cpuinfo && bf16=1 rows="$rows,rtrain bf16"
[ "${2:-}" = --peer ] && peer="" rows="$rows,torchvision float32,torchvision bf16 autocast"
# shellcheck disable=SC2086 # $peer: no flag or one
out=$("$1" $peer --steps 1 --batch 2 --epoch-images 1000 --price-per-hour 2.5) || {
  echo "FAIL bench_inception exited $?"; exit 1; }
echo "$out"
echo "$out" | grep -q -F "cost: \$2.50 per hour, an epoch of 1000 images" ||
  { echo "FAIL no cost header"; exit 1; }
if [ "$bf16" = 0 ]; then
  echo "$out" | grep -q '^rtrain bf16  *n/a (.*no bf16 instructions' ||
    { echo "FAIL the rtrain bf16 row does not say why it is missing"; exit 1; }
fi
if [ -n "$peer" ]; then
  [ "$(echo "$out" | grep -c '^torchvision .*(no peer)$')" -eq 2 ] ||
    { echo "FAIL the torchvision rows do not say the peer was left out"; exit 1; }
fi
IFS=,
for row in $rows; do
  echo "$out" | awk -v row="$row" '
    index($0, row) == 1 {
      n = split(substr($0, length(row) + 1), f, " ")
      # IPS img/s first step S s epoch E s $C/epoch
      ips = f[1]; first = f[5]; ep = f[8]; c = f[10]; sub(/^\$/, "", c); sub(/\/epoch$/, "", c)
      if (n != 10 || f[2] != "img/s" || ips <= 0 || first <= 0) { bad = 1; print "FAIL " row ": " $0; exit 1 }
      # images/s is printed to 0.01: the epoch agrees within that rounding
      tol = 0.05 + ep * (0.006 / ips + 2e-3)
      if (ep - 1000 / ips > tol || 1000 / ips - ep > tol) {
        bad = 1; print "FAIL " row ": epoch " ep " s is not 1000 / " ips; exit 1 }
      if (c - ep / 3600 * 2.5 > 1e-4 + c * 1e-3 || ep / 3600 * 2.5 - c > 1e-4 + c * 1e-3) {
        bad = 1; print "FAIL " row ": $" c " is not " ep " s at $2.50/h"; exit 1 }
      found = 1
    }
    END { if (!bad && !found) { print "FAIL no row " row; exit 1 } }' || exit 1
done
echo "PASS bench_inception output"
