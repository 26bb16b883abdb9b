#!/usr/bin/env bash
# durable_e2e.sh RTRAIND RTRAIN SRC [SEED] - durable training end to end:
# a CLI fit against `rtraind --state-dir` survives 20 SIGKILLs and 20
# SIGTERMs of the daemon at seeded random moments (restarted each time on
# the same port and directory) with weights bit-identical to an
# uninterrupted run and equal per-epoch metrics, with RunSteps calls and
# with the Fit stream (20 + 20 more); a fit's own checkpoint interval
# (--checkpoint-every-steps) writes that many; a full disk stops the fit
# with a clear error and leaves the previous checkpoints intact; a pulled
# state resumes bit-identically on a daemon with an empty disk.
# Stops per run: 20 (scripts/test.sh asks for 8 under ASan, where each
# stop and restart costs seconds).
KILLS=${RT_DURABLE_KILLS:-20}
rtraind=$1 rtrain=$2 src=$3 seed=${4:-14}
ex=$src/examples/iris
. "$src/tests/lib/e2e.sh"
[ -n "$DURABLE_ONLY" ] && trap 'kill $dpid 2>/dev/null' EXIT
RANDOM=$seed
EPOCHS=150
FIT=(fit --model "$ex/model.json" --data "$ex/train_shuffled.csv" --val "$ex/val_shuffled.csv"
     --loss sparse_categorical_crossentropy --optimizer adam --lr 0.02 --batch-size 20
     --seed 1 --steps-per-call 2 --no-progress)

# metrics columns of a --csv-log from epoch row $2 on (the epoch column
# left out: a resumed fit numbers its own epochs)
metrics() { tail -n +"$((${2:-1} + 1))" "$1" | cut -d, -f2-; }

# --- the reference: no state dir, never interrupted
start_daemon "$tmp/ref.log" --log-level warn || exit 1
expect_rc 0 "reference fit ($EPOCHS epochs)" -- "$rtrain" "${FIT[@]}" --server "$addr" \
  --epochs $EPOCHS --save-weights "$tmp/w-ref.bin" --csv-log "$tmp/ref.csv"
expect_rc 0 "info without --state-dir" -- "$rtrain" info --server "$addr"
has "$tmp/out" "state       memory" "info says the state is in memory"

# Restarts reuse the port, so it comes from below the kernel's ephemeral
# range (32768-60999): a client connection's local port cannot take it
# while the daemon is down; and from SRANDOM, not the seeded RANDOM, so
# that two runs at once (two checkouts' suites) do not share it.
# restart LOG [flags]: on $port, retried while the port is briefly held.
low_port() { echo $((20000 + SRANDOM % 12000)); }
WRAP=()  # a command prefix for the daemon (the full-disk test's ulimit)
restart() {
  local log=$1 n r; shift
  for ((r = 0; r < 50; r++)); do
    "${WRAP[@]}" "$rtraind" --listen "$port" "$@" >"$log" 2>&1 &
    dpid=$!
    # until it listens or exits (a slow start under a sanitizer or load is
    # waited for, up to a minute)
    for ((n = 0; n < 6000; n++)); do
      log_has "$log" "rtraind listening*" && return 0
      kill -0 "$dpid" 2>/dev/null || break
      nap 0.01
    done
    kill -0 "$dpid" 2>/dev/null && { echo "rtraind did not listen within 60 s"; cat "$log"; return 1; }
    wait "$dpid" 2>/dev/null
    grep -q "already in use" "$log" || { echo "rtraind did not start"; cat "$log"; return 1; }
    sleep 0.05
  done
  return 1
}

# wait_paused DPID CPID: until the daemon stopped itself (--pause-at-step:
# state T in /proc) - returns 1 if the daemon or the client ended first
paused() { local st; { read -r _ _ st _ <"/proc/$1/stat"; } 2>/dev/null && [ "$st" = T ]; }
wait_paused() {
  until paused "$1"; do
    kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null || return 1
    nap 0.01
  done
}

# stop_paused SIG: the paused daemon gets SIG and is reaped. A SIGTERM is
# sent once it runs again (SIGCONT first): sent to a stopped process, no
# thread takes it until they run, and then any thread may, one blocked
# where a sanitizer defers its handler for as long as it stays blocked
# (seen under TSan as a daemon that never stopped). The few steps it runs
# meanwhile are where its exit checkpoint lands, which the checks read
# from its log.
stop_paused() {
  [ "$1" = KILL ] || kill -CONT "$dpid"
  kill -"$1" "$dpid"
  wait "$dpid" 2>/dev/null
}

# plan_next N: plan_r = a number in 0..N-1 from the stop plan's own
# seeded generator, so that other uses of RANDOM do not move where the
# stops land
plan_state=$seed
plan_next() {
  plan_state=$(( (plan_state * 1103515245 + 12345) % 2147483648 ))
  plan_r=$(( (plan_state / 65536) % $1 ))
}

# killed_fit SIG NAME KILLS [daemon flags...]: the fit, with the daemon
# stopped by SIG KILLS times and restarted on the same port and directory
# each time. The test chooses each step: the daemon runs with
# --pause-at-step S, stops itself there (SIGSTOP), and only then gets SIG,
# so every stop lands inside the fit however fast or slow the machine is.
# The steps are seeded random points in the fit's first half (SPE steps an
# epoch): mid-epoch and at epoch ends, mid-call and between calls.
killed_fit() {
  local sig=$1 name=$2 kills=$3 ref=${REF:-ref} epochs=${EP:-$EPOCHS}; shift 3
  local dir=$tmp/st-$name spe=${SPE:-6}
  local total=$((epochs * spe))
  local gap=$((total / 2 / kills)) at=$((3 * spe)) k=0
  plan_next "$gap"; at=$((at + 1 + plan_r))
  port=127.0.0.1:$(low_port)
  until restart "$tmp/$name-0.log" --state-dir "$dir" --pause-at-step "$at" "$@"; do
    port=127.0.0.1:$(low_port); done
  addr=$port
  "$rtrain" "${FIT[@]}" --server "$addr" --epochs "$epochs" --save-weights "$tmp/w-$name.bin" \
    --csv-log "$tmp/$name.csv" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  local cpid=$!
  while [ "$k" -lt "$kills" ]; do
    wait_paused "$dpid" "$cpid" || break
    stop_paused "$sig"
    k=$((k + 1))
    local pause=()
    if [ "$k" -lt "$kills" ]; then
      plan_next "$gap"; at=$((at + 1 + plan_r)); pause=(--pause-at-step "$at"); fi
    restart "$tmp/$name-$k.log" --state-dir "$dir" "${pause[@]}" "$@" || break
    # the next stop only once the client has seen this one (and, with
    # WAIT_LOG, once the new daemon has logged it: the CLI's message comes
    # before its resent call reaches the daemon)
    until log_count "$tmp/$name.err" "daemon restarted*" && [ "$log_n" -ge "$k" ] &&
          { [ -z "${WAIT_LOG:-}" ] || log_has "$tmp/$name-$k.log" "*$WAIT_LOG*"; }; do
      kill -0 "$cpid" 2>/dev/null || break
      nap 0.01
    done
  done
  wait "$cpid"; local rc=$?
  [ "$rc" -eq 0 ] && ok "$name: the fit finished (exit $rc)" || {
    bad "$name: fit exit $rc"; tail -5 "$tmp/$name.err"; }
  [ "$k" -ge "$kills" ] && ok "$name: daemon stopped $k times during the fit" ||
    bad "$name: only $k of $kills stops landed during the fit"
  local re
  re=$(grep -c "^daemon restarted; resuming at epoch [0-9]* step [0-9]*" "$tmp/$name.err")
  [ "$re" -eq "$k" ] && ok "$name: the CLI reattached after every stop ($re)" ||
    bad "$name: $re reattach messages for $k stops"
  cmp -s "$tmp/w-$ref.bin" "$tmp/w-$name.bin" &&
    ok "$name: final weights bit-identical to the uninterrupted run" ||
    bad "$name: final weights differ from the uninterrupted run"
  diff <(metrics "$tmp/$ref.csv") <(metrics "$tmp/$name.csv") >/dev/null &&
    ok "$name: per-epoch metrics equal, $epochs epochs, none twice or missing" ||
    bad "$name: per-epoch metrics differ"
}

# (600 epochs: a few ms each, they must outlast 20 stops however slow)
expect_rc 0 "reference fit (600 epochs)" -- "$rtrain" "${FIT[@]}" --server "$addr" \
  --epochs 600 --save-weights "$tmp/w-ref600.bin" --csv-log "$tmp/ref600.csv"
kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""
REF=ref600 EP=600 killed_fit KILL sigkill "$KILLS" --log-level warn --checkpoint-every-steps 4
kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""
[ "$DURABLE_ONLY" = sigkill ] && { echo "kept $tmp"; exit 0; }

# SIGTERM: checkpoints only at epoch ends and at exit; one step per call,
# one call in flight, so a stop mostly lands mid-epoch. Each daemon's last
# step (on disk at exit) must be where the client resumes: no step lost.
FIT_TERM=("${FIT[@]}")
FIT=("${FIT[@]}" --steps-per-call 1 --in-flight 1)
start_daemon "$tmp/ref1.log" --log-level warn || exit 1
# (longer: without checkpoints between epoch ends this fit is fast)
expect_rc 0 "reference fit (600 epochs, K=1)" -- "$rtrain" "${FIT[@]}" --server "$addr" \
  --epochs 600 --save-weights "$tmp/w-ref1.bin" --csv-log "$tmp/ref1.csv"
kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""
term_resumes() { # NAME: each stopped daemon's step on disk at exit = where the CLI resumed
  local name=$1 exits="" written=0 k
  for k in $(seq 0 $((KILLS - 1))); do
    s=$(sed -n 's/.*on disk at exit, step \([0-9]*\).*/\1/p' "$tmp/$name-$k.log")
    exits="$exits${s:-none} "
    grep -q "(checkpoint at exit)" "$tmp/$name-$k.log" && written=$((written + 1))
  done
  resumed=$(sed -n 's/^daemon restarted; resuming at epoch [0-9]* step \([0-9]*\)/\1/p' \
            "$tmp/$name.err" | tr '\n' ' ')
  [ "$exits" = "$resumed" ] &&
    ok "$name: each resume is at the stopped daemon's last step ($written mid-epoch exit checkpoints)" ||
    bad "$name: stopped at [$exits], resumed at [$resumed]"
  [ "$written" -ge 1 ] && ok "$name: exit checkpoints were written ($written)" ||
    bad "$name: no stop landed mid-epoch"
}
REF=ref1 EP=600 killed_fit TERM sigterm "$KILLS" --log-level info --checkpoint-every-steps 0 --checkpoint-every-s 0
kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""
FIT=("${FIT_TERM[@]}")
term_resumes sigterm

# --- the Fit stream (one streamed call, --steps-per-call 0; the default
# is RunSteps): the same stops. The CLI sends the fit again with its id and the
# epochs it has; the daemon continues from its restored state (between two
# steps: the interval checkpoints, a SIGTERM's exit checkpoint) and sends
# only the epoch ends the CLI lacks.
FIT_RS=("${FIT[@]}")
stream_fit() { # the FIT array with batch size $1, one Fit stream
  FIT=(fit --model "$ex/model.json" --data "$ex/train_shuffled.csv" --val "$ex/val_shuffled.csv"
       --loss sparse_categorical_crossentropy --optimizer adam --lr 0.02 --batch-size "$1"
       --seed 1 --steps-per-call 0 --no-progress)
}
stream_fit 20
start_daemon "$tmp/fref.log" --log-level warn || exit 1
expect_rc 0 "reference Fit stream (600 epochs)" -- "$rtrain" "${FIT[@]}" --server "$addr" \
  --epochs 600 --save-weights "$tmp/w-fref.bin" --csv-log "$tmp/fref.csv"
has "$tmp/err" "Fit stream" "the reference fit is one Fit stream"
kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""
WAIT_LOG="resumed at epoch" REF=fref EP=600 killed_fit KILL fit-sigkill "$KILLS" --log-level info --checkpoint-every-steps 4
kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""
n=$(cat "$tmp"/fit-sigkill-*.log | grep -c "resumed at epoch")
[ "$n" -ge "$KILLS" ] && ok "fit-sigkill: the daemon continued the fit $n times" ||
  bad "fit-sigkill: $n resumes in the daemon logs"
mid=$(cat "$tmp"/fit-sigkill-*.log | sed -n 's/.*resumed at epoch [0-9]* step \([0-9]*\).*/\1/p' |
      awk '$1 % 6' | wc -l)
[ "$mid" -ge 1 ] && ok "fit-sigkill: $mid resumes inside an epoch (interval checkpoints)" ||
  bad "fit-sigkill: no resume inside an epoch"

# SIGTERM: only the fit's start, its epoch ends and the exit are on disk.
# Epochs of 3,150 steps (the data 30 times over, batches of 1) and no
# fsync, so a stop mostly lands between steps: the fit stops there, the
# exit checkpoint holds that step and the CLI resumes at it.
for _ in $(seq 1 30); do cat "$ex/train_shuffled.csv"; done >"$tmp/train30.csv"
stream_fit 1
FIT[4]=$tmp/train30.csv
start_daemon "$tmp/fref1.log" --log-level warn || exit 1
expect_rc 0 "reference Fit stream (300 epochs of 3,150 steps)" -- "$rtrain" "${FIT[@]}" \
  --server "$addr" --epochs 300 --save-weights "$tmp/w-fref1.bin" --csv-log "$tmp/fref1.csv"
kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""
REF=fref1 EP=300 SPE=3150 killed_fit TERM fit-sigterm "$KILLS" --log-level info --checkpoint-every-steps 0 \
  --checkpoint-every-s 0 --checkpoint-no-fsync
kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""
FIT=("${FIT_RS[@]}")
term_resumes fit-sigterm

# --- a fit's own checkpoint interval (--checkpoint-every-steps N) in place
# of the daemon's (none here: no steps, no seconds): 6 steps an epoch, so
# N = 4 adds one checkpoint inside each epoch (at its 4th step) and N = 2
# two (2nd, 4th) to each epoch end's. Counted by the daemon's
# rtrain_checkpoints_total (1 more: Compile's).
interval_fit() { # NAME WANT [fit flags...]: 10 epochs, the checkpoints written
  local name=$1 want=$2; shift 2
  start_daemon "$tmp/$name.log" --log-level warn --state-dir "$tmp/st-$name" \
    --checkpoint-every-s 0 --metrics-listen 127.0.0.1:0 || exit 1
  local murl
  murl=$(sed -n 's/^rtraind metrics on \(http:[^ ]*\).*/\1/p' "$tmp/$name.log" | head -n 1)
  expect_rc 0 "$name: fit" -- "$rtrain" "${FIT[@]}" --server "$addr" --epochs 10 "$@"
  local n
  n=$(/usr/bin/python3 -c 'import sys, urllib.request
for l in urllib.request.urlopen(sys.argv[1]).read().decode().splitlines():
    if l.startswith("rtrain_checkpoints_total{result=\"ok\"}"): print(l.split()[1])' "$murl")
  kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""
  [ "$n" = "$want" ] && ok "$name: $n checkpoints" || bad "$name: $n checkpoints, want $want"
}
stream_fit 20
interval_fit every-epoch 11
interval_fit every-4-steps 21 --checkpoint-every-steps 4
interval_fit every-2-steps 31 --checkpoint-every-steps 2
interval_fit runsteps-every-4-steps 21 --steps-per-call 2 --checkpoint-every-steps 4

# --- a corrupted newest checkpoint: the one before it is used, with a warning
dir=$tmp/st-corrupt
port=127.0.0.1:$(low_port)
# The daemon stops itself at a step inside epoch 21 that is not the
# epoch's first: one step per call, one in flight, a checkpoint after each
# call, so the newest checkpoint holds the step before (not at an epoch
# end) and the one before it is in the same epoch (an epoch the client
# reported is never taken back).
spe=6
plan_next $((spe - 1)); at=$((20 * spe + 2 + plan_r))
until restart "$tmp/corrupt-0.log" --state-dir "$dir" --checkpoint-every-steps 1 \
  --pause-at-step "$at"; do port=127.0.0.1:$(low_port); done
addr=$port
"$rtrain" "${FIT[@]}" --server "$addr" --epochs 40 --steps-per-call 1 --in-flight 1 \
  --save-weights "$tmp/w-corrupt.bin" --csv-log "$tmp/corrupt.csv" \
  >"$tmp/corrupt.out" 2>"$tmp/corrupt.err" &
cpid=$!
ckpt_step() { # the global step in a checkpoint (rt_ckpt.c's layout)
  /usr/bin/python3 -c 'import struct,sys
b=open(sys.argv[1],"rb").read(); o=8
for _ in range(2): n,=struct.unpack_from("<Q",b,o); o+=8+n
print(struct.unpack_from("<q",b,o+8+32)[0])' "$1"
}
wait_paused "$dpid" "$cpid" && ok "corrupt: the daemon paused at step $at" ||
  bad "corrupt: the daemon did not pause at step $at"
newest=$(printf '%s\n' "$dir"/sessions/*/*/ckpt-*.rtck | sort | tail -n 1)
ns=$(ckpt_step "$newest")
[ "$ns" -eq $((at - 1)) ] && ok "corrupt: the newest checkpoint is step $ns, inside an epoch" ||
  bad "corrupt: the newest checkpoint is step $ns, want $((at - 1))"
stop_paused KILL
printf 'XXXXXXXX' | dd of="$newest" bs=1 seek=200 conv=notrunc 2>/dev/null
restart "$tmp/corrupt-1.log" --state-dir "$dir"
wait "$cpid" && ok "corrupt: the fit finished" || { bad "corrupt: fit failed"; tail -3 "$tmp/corrupt.err"; }
has "$tmp/corrupt-1.log" "checksum mismatch" "corrupt: the torn newest checkpoint is detected"
has "$tmp/corrupt-1.log" "using the previous one" "corrupt: the previous checkpoint is used, with a warning"
kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""
start_daemon "$tmp/ref40.log" --log-level warn || exit 1
expect_rc 0 "reference fit (40 epochs, K=1)" -- "$rtrain" "${FIT[@]}" --server "$addr" \
  --epochs 40 --steps-per-call 1 --in-flight 1 --save-weights "$tmp/w-ref40.bin" \
  --csv-log "$tmp/ref40.csv"
kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""
cmp -s "$tmp/w-ref40.bin" "$tmp/w-corrupt.bin" &&
  ok "corrupt: weights bit-identical after resuming from the older checkpoint" ||
  bad "corrupt: weights differ"
diff <(metrics "$tmp/ref40.csv") <(metrics "$tmp/corrupt.csv") >/dev/null &&
  ok "corrupt: per-epoch metrics equal" || bad "corrupt: per-epoch metrics differ"

# --- a full disk (RLIMIT_FSIZE below a checkpoint's size): the fit stops
# with a clear error, the previous checkpoints stay as they were
dir=$tmp/st-full
port=127.0.0.1:$(low_port)
plan_next 6
until restart "$tmp/full-0.log" --state-dir "$dir" --checkpoint-every-steps 2 \
  --pause-at-step $((5 * 6 + 1 + plan_r)); do port=127.0.0.1:$(low_port); done
addr=$port
expect_rc 0 "info with --state-dir" -- "$rtrain" info --server "$addr"
has "$tmp/out" "state       disk" "info says the state is on disk"
"$rtrain" "${FIT[@]}" --server "$addr" --epochs $EPOCHS --save-weights "$tmp/w-full.bin" \
  >"$tmp/full.out" 2>"$tmp/full.err" &
cpid=$!
wait_paused "$dpid" "$cpid" || bad "full: the daemon did not pause"
stop_paused KILL
# (a temporary file the killed daemon left is the next write's to replace)
before=$(cd "$dir" && find . -type f ! -name '*.tmp' | sort | xargs sha256sum)
WRAP=(sh -c 'ulimit -f 5 && exec "$@"' sh)
restart "$tmp/full-1.log" --state-dir "$dir" --log-level warn
wait "$cpid"; rc=$?
[ "$rc" -ne 0 ] && ok "full: the fit stopped (exit $rc)" || bad "full: the fit did not stop"
has "$tmp/full.err" "RESOURCE_EXHAUSTED" "full: the client gets RESOURCE_EXHAUSTED"
has "$tmp/full.err" "checkpoint failed, training stopped at step" "full: the error says the checkpoint failed"
has "$tmp/full.err" "disk full" "full: the error says the disk is full"
has "$tmp/full.err" "session .* kept: rtrain checkpoint pull" "full: the CLI keeps the session for a pull"
after=$(cd "$dir" && find . -type f ! -name '*.tmp' | sort | xargs sha256sum)
[ "$before" = "$after" ] && [ -z "$(find "$dir" -name '*.tmp')" ] && ok "full: the previous checkpoints are intact, no temporary file left" ||
  bad "full: the state directory changed"
expect_rc 0 "full: the daemon keeps serving" -- "$rtrain" info --server "$port"
kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""
# --checkpoint-fail continue: logged, training goes on to the same weights
restart "$tmp/full-2.log" --state-dir "$tmp/st-full2" --log-level warn \
  --checkpoint-fail continue --checkpoint-every-steps 2
WRAP=()
expect_rc 0 "full, --checkpoint-fail continue: the fit finishes" -- "$rtrain" "${FIT[@]}" \
  --server "$port" --epochs $EPOCHS --save-weights "$tmp/w-full2.bin"
cmp -s "$tmp/w-ref.bin" "$tmp/w-full2.bin" && ok "full, continue: weights as the reference" ||
  bad "full, continue: weights differ"
has "$tmp/full-2.log" "training goes on" "full, continue: each failed checkpoint is logged"
kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""

# --- moving to another host: pull the state, push it to an empty daemon.
# RunSteps calls of 2 steps as the reference ($tmp/ref.csv): a Fit stream
# (the FIT of the sections above) reports each epoch's loss from the
# daemon's accumulator, the calls from their means' sum, and the two round
# differently (1 ulp in some epochs on ref) while the weights are the same.
FIT=("${FIT_RS[@]}")
start_daemon "$tmp/a.log" --log-level warn || exit 1
expect_rc 0 "pull: fit 60 epochs, then --save-state" -- "$rtrain" "${FIT[@]}" --server "$addr" \
  --epochs 60 --save-state "$tmp/s60.rtck"
kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""
start_daemon "$tmp/b.log" --log-level warn --state-dir "$tmp/st-empty" || exit 1
expect_rc 0 "push: --load-state and 90 more epochs on an empty daemon" -- "$rtrain" \
  "${FIT[@]}" --server "$addr" --epochs 90 --load-state "$tmp/s60.rtck" \
  --save-weights "$tmp/w-moved.bin" --csv-log "$tmp/moved.csv"
cmp -s "$tmp/w-ref.bin" "$tmp/w-moved.bin" &&
  ok "push: the continuation is bit-identical to the uninterrupted run" ||
  bad "push: the continuation differs"
diff <(metrics "$tmp/ref.csv" 61) <(metrics "$tmp/moved.csv") >"$tmp/mdiff" &&
  ok "push: epochs 61..150 have the reference's metrics" ||
  { bad "push: metrics differ"; head -8 "$tmp/mdiff"; }
expect_rc 0 "checkpoint push" -- "$rtrain" checkpoint push "$tmp/s60.rtck" --server "$addr"
sid=$(sed -n 's/^session //p' "$tmp/out") tok=$(sed -n 's/^token //p' "$tmp/out")
pid=$(sed -n 's/^program //p' "$tmp/out")
expect_rc 0 "checkpoint pull" -- "$rtrain" checkpoint pull "$sid" "$tmp/again.rtck" \
  --server "$addr" --program "$pid" --session-token "$tok"
cmp -s <(tail -c +9 "$tmp/s60.rtck" | head -c 100) <(tail -c +9 "$tmp/again.rtck" | head -c 100) &&
  ok "pull after push: the same model record" || bad "pull after push differs"
expect_rc 4 "checkpoint pull with a wrong token" -- "$rtrain" checkpoint pull "$sid" \
  "$tmp/x.rtck" --server "$addr" --program "$pid" --session-token t-0000
has "$tmp/err" "wrong session_token" "a wrong token is refused, naming the problem"
printf 'RTCKPT1\0garbage' >"$tmp/bad.rtck"
expect_rc 4 "checkpoint push of a corrupt file" -- "$rtrain" checkpoint push "$tmp/bad.rtck" \
  --server "$addr"
has "$tmp/err" "checkpoint" "a corrupt state is refused, naming the problem"
expect_rc 0 "the daemon keeps serving" -- "$rtrain" info --server "$addr"

echo "$((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
