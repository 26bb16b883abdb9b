# shellcheck shell=bash
# rtraind_start.sh - sourced, never run (bench/durable/stress.sh,
# examples/inception/run.sh).
# rtraind_start RTRAIND LOG ADDR [flags...]: rtraind on ADDR in the
# background; sets dpid and bound (the listening address). A port briefly
# held (a connection's local port, after a kill) is tried again. Exits the
# script, the log shown, if it does not start.
rtraind_start() {
  local bin=$1 log=$2 addr=$3; shift 3
  for _ in $(seq 1 50); do
    "$bin" --listen "$addr" "$@" >"$log" 2>&1 &
    dpid=$!
    bound=""
    for _ in $(seq 1 6000); do
      bound=$(sed -n 's/^rtraind listening on \([^ ]*\).*/\1/p' "$log" 2>/dev/null | head -n 1)
      [ -n "$bound" ] && return 0
      kill -0 "$dpid" 2>/dev/null || break
      sleep 0.01
    done
    wait "$dpid" 2>/dev/null
    grep -q "already in use" "$log" || break
    sleep 0.05
  done
  echo "$(basename "$0"): rtraind did not start" >&2; cat "$log" >&2; exit 1
}
