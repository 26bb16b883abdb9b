# shellcheck shell=bash
# e2e.sh - what the shell end-to-end tests share; sourced, never run.
# Sets tmp (removed at exit, with the daemon stopped), counts checks with
# ok/bad, and starts rtraind on a free loopback port.
#   . "$src/tests/lib/e2e.sh"
#   start_daemon "$tmp/daemon.log" --log-level warn || exit 1   # sets dpid, addr
#   expect_rc 0 "info" -- "$rtrain" info --server "$addr"
#   echo "$((checks - fails))/$checks checks passed"; [ "$fails" -eq 0 ]
tmp=$(mktemp -d)
fails=0 checks=0
dpid=""
cleanup() {
  [ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

# Poll loops fork nothing: nap sleeps in read's timeout on a FIFO that no
# one writes, log_has and log_count read a log with read. A fork and exec
# of sleep and grep every 10 ms took more CPU than the daemon being waited
# for (durable_e2e: about 45% of its CPU time was its own polling).
# (opened a call at a time, read-write so that the open does not block:
# an fd kept open would be inherited by every daemon a test starts)
mkfifo "$tmp/.nap"
nap() { read -r -t "$1" _ <>"$tmp/.nap" || :; }
# log_has FILE GLOB: whether a line of FILE matches GLOB (a whole-line
# shell pattern: "rtraind listening*"); a missing file has none
log_has() {
  local l
  [ -r "$1" ] || return 1
  while IFS= read -r l || [ -n "$l" ]; do
    # shellcheck disable=SC2053 # $2 is a pattern
    [[ $l == $2 ]] && return 0
  done <"$1"
  return 1
}
# log_count FILE GLOB: log_n = the number of FILE's lines that match GLOB
# (a variable, not output: $(...) would fork)
log_count() {
  local l
  log_n=0
  if [ -r "$1" ]; then
    while IFS= read -r l || [ -n "$l" ]; do
      # shellcheck disable=SC2053 # $2 is a pattern
      [[ $l == $2 ]] && log_n=$((log_n + 1))
    done <"$1"
  fi
  return 0
}

ok()  { checks=$((checks + 1)); echo "ok   $*"; }
bad() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL $*"; }
expect_rc() { # expect_rc WANT NAME -- command...
  local want=$1 name=$2; shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -eq "$want" ]; then ok "$name (exit $rc)"; else
    bad "$name: exit $rc, want $want"; sed 's/^/     /' "$tmp/out" "$tmp/err" | tail -20; fi
}
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "" && a + 0 >= b + 0) }'; }
has() { grep -q -- "$2" "$1" && ok "$3" || { bad "$3: no '$2' in"; sed 's/^/     /' "$1" | tail -5; }; }

# start_daemon LOG [rtraind flags...]: rtraind on 127.0.0.1:0 in the
# background; dpid and addr are set once it prints its listening line.
# Returns 1 (the log shown) if it does not within 10 s.
start_daemon() {
  local log=$1; shift
  # shellcheck disable=SC2154 # rtraind is set by the test that sources this
  "$rtraind" --listen 127.0.0.1:0 "$@" >"$log" 2>&1 &
  dpid=$!
  addr=""
  for _ in $(seq 1 100); do
    addr=$(sed -n 's/^rtraind listening on \([^ ]*\).*/\1/p' "$log" | head -n 1)
    [ -n "$addr" ] && return 0
    sleep 0.1
  done
  echo "rtraind did not start"; cat "$log"
  return 1
}
