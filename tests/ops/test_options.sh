#!/usr/bin/env bash
# test_options.sh - rtraind's option table against the built daemon:
#  - `rtraind --help` lists exactly the table's flags (rtraind_optdoc names);
#  - docs/operations.md and deploy/rtraind.env hold what the table generates;
#  - environment variables set options (a string, an int with a range, a
#    choice, a flag), the command line wins over them, and a misspelt one is
#    named in a warning;
#  - a bad value, on the command line or in the environment, exits 2 with a
#    line naming the flag or variable, the value and what it may be.
#   usage: test_options.sh RTRAIND RTRAIND_OPTDOC SOURCE_DIR
set -uo pipefail
rtraind=$1 optdoc=$2 src=$3
. "$src/tests/lib/e2e.sh"
# Only this test's variables reach the daemons it starts.
for v in $(env | sed -n 's/^\(RTRAIND_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done

# ---- --help against the table
"$rtraind" --help >"$tmp/help" 2>&1 && ok "rtraind --help" || bad "rtraind --help: exit $?"
sed -n 's/^  --\([a-z0-9-]*\).*/\1/p' "$tmp/help" | sort >"$tmp/help.flags"
"$optdoc" names | sort >"$tmp/table.flags"
[ "$(wc -l <"$tmp/table.flags")" -ge 60 ] && ok "the table has $(wc -l <"$tmp/table.flags") flags" \
  || bad "only $(wc -l <"$tmp/table.flags") flags in the table"
if cmp -s "$tmp/help.flags" "$tmp/table.flags"; then ok "--help lists exactly the table's flags"
else bad "--help and the table differ:"; diff "$tmp/help.flags" "$tmp/table.flags" | head; fi
[ "$(sort -u "$tmp/help.flags" | wc -l)" -eq "$(wc -l <"$tmp/help.flags")" ] \
  && ok "each flag once in --help" || bad "a flag twice in --help"

# ---- the generated docs
if "$src/scripts/options_docs.sh" --check "$optdoc" "$src" >"$tmp/docs" 2>&1; then
  ok "docs/operations.md and deploy/rtraind.env match the table"
else bad "generated docs:"; cat "$tmp/docs"; fi
# every setting's variable is in the docs table, every flag in the env file
while read -r f; do
  grep -q -- "^| \`--$f\`" "$src/docs/operations.md" || grep -q "old name: \`--$f\`" \
    "$src/docs/operations.md" || bad "docs/operations.md: no row for --$f"
  case $f in help|version) continue ;; esac
  grep -q -- "^#   --${f}[ ,:]" "$src/deploy/rtraind.env" || bad "rtraind.env: --$f not documented"
done <"$tmp/table.flags"
ok "every flag has its docs row and env file entry"
grep -q "\`RTRAIND_MAX_SESSIONS\`" "$src/docs/operations.md" && ok "docs name the variables" \
  || bad "docs/operations.md: no RTRAIND_MAX_SESSIONS"

# ---- bad values: exit 2 and a line that says what is wrong
# bad_value NAME WANT_TEXT [VAR=VALUE ...] -- rtraind args...
bad_value() {
  local name=$1 want=$2; shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$rtraind" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -eq 2 ] && grep -qF -- "$want" "$tmp/err"; then ok "$name: exit 2, '$want'"
  else bad "$name: exit $rc, want 2 and '$want' in:"; sed 's/^/     /' "$tmp/err" | head -5; fi
}
bad_value "--threads 0" "rtraind: --threads 0: out of range: 1..64" -- --threads 0
bad_value "--threads zero" "--threads zero: not a whole number (1..64)" -- --threads zero
bad_value "RTRAIND_THREADS=65" "RTRAIND_THREADS=65 (--threads): out of range: 1..64" \
  RTRAIND_THREADS=65 --
bad_value "RTRAIND_GRACE_MS=-1" "RTRAIND_GRACE_MS=-1 (--grace-ms): not a whole number (0..3600000)" \
  RTRAIND_GRACE_MS=-1 --
bad_value "RTRAIND_LOG_LEVEL=chatty" "(--log-level): not one of error|warn|info|debug" \
  RTRAIND_LOG_LEVEL=chatty --
bad_value "RTRAIND_INSECURE=maybe" "RTRAIND_INSECURE=maybe (--insecure): not one of" \
  RTRAIND_INSECURE=maybe --
bad_value "RTRAIND_MAX_MEMORY_BYTES=lots" "(--max-memory-bytes): not a size" \
  RTRAIND_MAX_MEMORY_BYTES=lots --
bad_value "RTRAIND_QUOTA_SESSIONS=0" "RTRAIND_QUOTA_SESSIONS=0 (--quota-sessions): out of range: 1..unlimited" \
  RTRAIND_QUOTA_SESSIONS=0 --
bad_value "RTRAIND_LISTEN port" "--listen 127.0.0.1:99999: the port must be 0..65535" \
  RTRAIND_LISTEN=127.0.0.1:99999 --
# the command line wins: a bad variable under a flag is not read (the run
# goes on to the next check, the port)
bad_value "--threads 2 over RTRAIND_THREADS=65" "the port must be" RTRAIND_THREADS=65 -- \
  --threads 2 --listen 127.0.0.1:99999
grep -q RTRAIND_THREADS "$tmp/err" && bad "RTRAIND_THREADS read under --threads" || ok "RTRAIND_THREADS not read"

# ---- a flag from the environment: --insecure lets a non-loopback address
# without TLS through to the bind, which fails (192.0.2.1 is TEST-NET-1,
# on no interface here: nothing is sent anywhere)
"$rtraind" --new-token alice >"$tmp/tokens" 2>/dev/null
bad_value "non-loopback, RTRAIND_INSECURE=0" "give --tls-cert" RTRAIND_INSECURE=0 -- \
  --listen 192.0.2.1:7070 --tokens "$tmp/tokens"
env RTRAIND_INSECURE=1 "$rtraind" --listen 192.0.2.1:7070 --tokens "$tmp/tokens" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 1 ] && ! grep -q "tls-cert" "$tmp/err" && ok "RTRAIND_INSECURE=1 passes the TLS check (exit 1 at the bind)" \
  || { bad "RTRAIND_INSECURE=1: exit $rc"; head -3 "$tmp/err"; }

# ---- a daemon configured by the environment alone
# run_daemon NAME [VAR=VALUE ...] -- rtraind args: waits for its start log
# line (the log is written after the listening line), stops it, exit 0
run_daemon() {
  local name=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  # emptied here, not by the background job's redirections: those run
  # after this shell goes on, and the loop below read the last daemon's
  # start line (then SIGTERM reached the new one before its main())
  : >"$tmp/d.out"
  : >"$tmp/d.err"
  env "${envs[@]}" "$rtraind" "$@" >"$tmp/d.out" 2>"$tmp/d.err" &
  dpid=$!
  for _ in $(seq 1 100); do
    grep -q "cq threads" "$tmp/d.err" && break
    kill -0 "$dpid" 2>/dev/null || break
    sleep 0.1
  done
  if grep -q "cq threads" "$tmp/d.err"; then ok "$name: started"
  else bad "$name: no start line"; sed 's/^/     /' "$tmp/d.out" "$tmp/d.err" | tail -5; fi
}
stop_daemon() {
  kill -TERM "$dpid" 2>/dev/null
  wait "$dpid"
  local rc=$?
  dpid=""
  [ "$rc" -eq 0 ] && ok "$1: SIGTERM, exit 0" || bad "$1: exit $rc"
}
run_daemon "env only" RTRAIND_LISTEN=127.0.0.1:0 RTRAIND_THREADS=3 RTRAIND_LOG_FORMAT=json \
  RTRAIND_HTTP_LISTEN=127.0.0.1:0 RTRAIND_LISTN=127.0.0.1:1 --
has "$tmp/d.out" '^rtraind listening on 127\.0\.0\.1:[1-9]' "RTRAIND_LISTEN: a free loopback port"
has "$tmp/d.out" '^rtraind metrics on http://127\.0\.0\.1:[1-9][0-9]*/metrics' \
  "RTRAIND_HTTP_LISTEN: the metrics endpoint"
has "$tmp/d.err" '^{.*(3 cq threads' "RTRAIND_THREADS=3 and RTRAIND_LOG_FORMAT=json"
has "$tmp/d.err" 'warning: RTRAIND_LISTN sets no option' "a misspelt variable is named"
stop_daemon "env only"

# the command line over the environment; --http-listen by its new name
run_daemon "flags over env" RTRAIND_LISTEN=127.0.0.1:99999 RTRAIND_THREADS=3 \
  RTRAIND_HTTP_LISTEN=no-such-host:x RTRAIND_LOG_FORMAT=json -- \
  --listen 127.0.0.1:0 --threads 2 --http-listen 127.0.0.1:0 --log-format text
has "$tmp/d.out" '^rtraind metrics on http://127\.0\.0\.1:' "--http-listen over RTRAIND_HTTP_LISTEN"
has "$tmp/d.err" '^[0-9].*(2 cq threads' "--threads 2 over RTRAIND_THREADS=3, text log over json"
stop_daemon "flags over env"

echo "$((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
