# shellcheck shell=bash
# chunked_lib.sh - what the tests of data over one upload share
# (chunked_formats_e2e.sh, chunked_more_e2e.sh); sourced after
# tests/lib/e2e.sh, never run.

# dense IN UNITS ACTIVATION [HxW]: a Sequential of Dense(8, relu) and
# Dense(UNITS, ACTIVATION) on IN values, or on HxW images flattened
dense() {
  local inp="\"batch_input_shape\": [null, $1]" fl=""
  if [ -n "${4:-}" ]; then
    fl="{\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\", \"batch_input_shape\": [null, $4]}},"
    inp=""
  fi
  echo "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": [$fl
 {\"class_name\": \"Dense\", \"config\": {\"name\": \"d1\", \"units\": 8, \"activation\": \"relu\"${inp:+, $inp}}},
 {\"class_name\": \"Dense\", \"config\": {\"name\": \"d2\", \"units\": $2, \"activation\": \"$3\"}}]}}"
}

# two_daemons LIMIT: rtraind with --max-upload-bytes LIMIT (small,
# small_pid) and a plain one (addr, dpid), both stopped at exit
# shellcheck disable=SC2154,SC2034 # tmp, addr, dpid: e2e.sh's; small: the test's
two_daemons() {
  start_daemon "$tmp/small.log" --log-level warn --max-upload-bytes "$1" || exit 1
  small=$addr small_pid=$dpid
  start_daemon "$tmp/daemon.log" --log-level warn || { kill "$small_pid"; exit 1; }
  trap 'kill "$small_pid" 2>/dev/null; wait "$small_pid" 2>/dev/null; cleanup' EXIT
}
