#!/usr/bin/env bash
# The CLI tells a daemon restart it can survive from one it cannot:
#  - a daemon without --state-dir killed (SIGKILL) during a fit, with
#    RunSteps calls and with the Fit stream: the CLI stops at once with exit
#    3 and says the session is lost (it used to retry for 5 minutes, its
#    reattach limit, for a daemon that cannot come back);
#  - the same, with a new daemon already started on the port: the same;
#  - a daemon with --state-dir killed and started again on the same port and
#    directory: the CLI waits, reattaches ("daemon restarted; resuming") and
#    the fit finishes.
# The bound on the first cases (60 s) is a functional one, far below the
# 300 s the CLI waited before and far above the moment it needs.
#   usage: cli_restart.sh RTRAIND RTRAIN SOURCE_DIR
set -uo pipefail
rtraind=$1 rtrain=$2 src=$3
ex=$src/examples/iris
. "$src/tests/lib/e2e.sh"
FIT=(fit --model "$ex/model.json" --data "$ex/train_shuffled.csv"
     --loss sparse_categorical_crossentropy --optimizer adam --lr 0.02 --batch-size 20
     --seed 1 --no-progress)

# wait_epoch LOG N PID: until the CLI printed epoch N (or ended)
wait_epoch() {
  until log_has "$1" "Epoch $2/*" || ! kill -0 "$3" 2>/dev/null; do nap 0.01; done
}
# wait_exit PID S: the CLI's exit code, or 124 if it still runs after S s
wait_exit() {
  local n
  for ((n = 0; n < $2 * 10; n++)); do
    kill -0 "$1" 2>/dev/null || { wait "$1"; return $?; }
    nap 0.1
  done
  kill "$1"; wait "$1" 2>/dev/null
  return 124
}

# restart LOG ADDR [flags]: rtraind again on ADDR (its port may take a
# moment to be free); sets dpid
restart() {
  local log=$1 a=$2; shift 2
  for _ in $(seq 1 50); do
    "$rtraind" --listen "$a" --log-level warn "$@" >"$log" 2>&1 &
    dpid=$!
    until log_has "$log" "rtraind listening on*" || ! kill -0 "$dpid" 2>/dev/null; do
      nap 0.01
    done
    kill -0 "$dpid" 2>/dev/null && return 0
    wait "$dpid" 2>/dev/null
    sleep 0.1
  done
  return 1
}

# lost NAME RESTART K: a memory-only daemon killed during a fit of K steps
# per call (0 = the Fit stream); with RESTART=1 a new one takes the port
lost() {
  local name=$1 restart=$2 k=$3
  start_daemon "$tmp/$name.log" --log-level warn || return
  local a=$addr
  "$rtrain" "${FIT[@]}" --server "$a" --steps-per-call "$k" --epochs 1000000 \
    >"$tmp/$name.out" 2>"$tmp/$name.err" &
  local cpid=$!
  wait_epoch "$tmp/$name.err" 3 "$cpid"
  kill -9 "$dpid"; wait "$dpid" 2>/dev/null
  dpid=""
  [ "$restart" = 1 ] && restart "$tmp/$name-2.log" "$a"
  wait_exit "$cpid" 60; local rc=$?
  [ "$rc" -eq 3 ] && ok "$name: the CLI stops at once (exit 3)" ||
    { bad "$name: exit $rc (124: still waiting after 60 s)"; tail -3 "$tmp/$name.err"; }
  has "$tmp/$name.err" "kept its state in memory (no --state-dir): the session and its training are lost" \
    "$name: it says the session is lost and why"
  if [ -n "$dpid" ]; then kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""; fi
}

lost runsteps-killed 0 1
lost stream-killed 0 0
lost runsteps-replaced 1 1
lost stream-replaced 1 0

# --- durable: the same kill is survived
start_daemon "$tmp/durable.log" --log-level warn --state-dir "$tmp/state" || exit 1
a=$addr
"$rtrain" "${FIT[@]}" --server "$a" --steps-per-call 1 --epochs 200 \
  >"$tmp/durable.out" 2>"$tmp/durable.err" &
cpid=$!
wait_epoch "$tmp/durable.err" 3 "$cpid"
kill -9 "$dpid"; wait "$dpid" 2>/dev/null
restart "$tmp/durable-2.log" "$a" --state-dir "$tmp/state" || bad "durable: no restart"
wait "$cpid"; rc=$?
[ "$rc" -eq 0 ] && ok "durable: the fit finishes after the restart (exit 0)" ||
  { bad "durable: fit exit $rc"; tail -3 "$tmp/durable.err"; }
has "$tmp/durable.err" "^daemon restarted; resuming at epoch" "durable: the CLI reattached"

echo "$((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
