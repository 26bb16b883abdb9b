#!/usr/bin/env bash
# What an open dashboard costs a training call: K=1 RunSteps (W-A, the
# story's model) against a bare Ping, with the daemon's dashboard closed and
# open in headless Chromium, in interleaved rounds on one daemon.
#   bench/dash/run.sh BUILD_DIR [ROUNDS] [REPS]
# Needs what `scripts/deps.sh --test` installs (chromium, puppeteer-core).
# Prints one line per round and state, then the medians; asserts nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR [ROUNDS] [REPS]}" && pwd)
rounds=${2:-5}
reps=${3:-50000}
rtraind=$(find "$build/server" -name rtraind -type f | head -1)
rtrain=$build/client/cli/rtrain
NODE_PATH=$("$root/tests/interop/run.sh" --dir)/node_modules
export NODE_PATH
work=$(mktemp -d)
dpid=''
ppid_=''
cleanup() {
  [ -n "$ppid_" ] && kill "$ppid_" 2>/dev/null
  [ -n "$dpid" ] && kill "$dpid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

"$rtraind" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --log-level warn > "$work/d.out" &
dpid=$!
for _ in $(seq 100); do
  grep -q 'metrics on' "$work/d.out" && grep -q 'listening on' "$work/d.out" && break
  sleep 0.1
done
addr=$(sed -n 's/^rtraind listening on \([^ ]*\).*/\1/p' "$work/d.out")
http=$(sed -n 's|^rtraind metrics on http://\([^/]*\)/metrics.*|\1|p' "$work/d.out")

measure() { # state round: one `bench overhead` run, its K=1 and Ping medians
  "$rtrain" bench overhead --server "$addr" --max-k 1 --reps "$reps" --csv "$work/$1-$2.csv" \
    > "$work/$1-$2.txt" 2>&1
}
open_page() {
  mkfifo "$work/in"
  node "$here/open_page.js" "http://$http" < "$work/in" > "$work/page-$1.out" 2>&1 &
  ppid_=$!
  exec 9> "$work/in"
  for _ in $(seq 300); do grep -q '^open' "$work/page-$1.out" && return; sleep 0.1; done
  echo "the page did not open:"; cat "$work/page-$1.out"; exit 1
}
close_page() { exec 9>&-; wait "$ppid_"; ppid_=''; rm -f "$work/in"; }

for r in $(seq "$rounds"); do
  measure closed "$r"
  open_page "$r"
  measure open "$r"
  close_page
done
/usr/bin/python3 - "$work" "$rounds" <<'PY'
import csv, os, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
res = {"closed": [], "open": []}
print(f"{'round':>5} {'dashboard':>9} {'K=1 rtt p50 us':>15} {'Ping p50 us':>12} {'K=1/Ping':>9}")
for r in range(1, rounds + 1):
    for state in ("closed", "open"):
        row = next(csv.DictReader(open(os.path.join(work, f"{state}-{r}.csv"))))
        rtt, ping = float(row["rtt_p50_us"]), float(row["ping_p50_us"])
        res[state].append((rtt, ping))
        print(f"{r:>5} {state:>9} {rtt:>15.1f} {ping:>12.1f} {rtt / ping:>9.3f}")
m = {s: statistics.median(x[0] for x in v) for s, v in res.items()}
q = {s: statistics.median(x[0] / x[1] for x in v) for s, v in res.items()}
print(f"median K=1 round trip: closed {m['closed']:.1f} us, open {m['open']:.1f} us, "
      f"open/closed {m['open'] / m['closed']:.3f}; K=1/Ping closed {q['closed']:.3f}, open {q['open']:.3f}")
PY
for r in $(seq "$rounds"); do
  echo "round $r, page: $(grep -h '^renders' "$work/page-$r.out")"
done
