#!/usr/bin/env bash
# End-to-end: datasets streamed from the daemon's disk (--storage stream,
# --spool-dir), in two parts (two ctest tests).
# PART stream (data_stream_e2e): a streamed image folder without shuffling
# trains to the same bit-identical weights as the in-memory one
# (augmentation included: both draw from (seed, epoch, sample)); with the
# shuffle buffer, two runs and a daemon with one decode worker and one
# prefetch batch give the same weights; the CNN reaches val accuracy >= 0.9
# streamed.
# PART limit (data_stream_limit): a daemon under `prlimit --as` below the
# decoded size of a 224x224 JPEG dataset (over 4x its address space)
# streams it automatically and trains an epoch, its peak RSS well under the
# decoded size; then the same with an IDX.gz pair whose u8 rows alone
# exceed the address space. Not in a sanitizer build, whose shadow memory
# needs terabytes of address space (tests/data/CMakeLists.txt registers it
# skipped there).
#   usage: stream_e2e.sh RTRAIND RTRAIN SOURCE_DIR stream|limit
set -uo pipefail
rtraind=$1 rtrain=$2 src=$3 part=${4:-}
here=$src/tests/data
py=/usr/bin/python3
. "$src/tests/lib/e2e.sh"
mkdir -p "$tmp/spool"

if [ "$part" = stream ]; then
  start_daemon "$tmp/daemon.log" --log-level info --spool-dir "$tmp/spool" || exit 1
  S=(--server "$addr")
  $py "$here/gen_images.py" "$tmp/imgs" 100 30 || { echo "gen_images.py failed"; exit 1; }

  # shellcheck disable=SC2054 # the commas are inside option values (comma lists)
  CNN=(fit "${S[@]}" --model "$here/cnn16.json" --data "$tmp/imgs/train" --val "$tmp/imgs/val"
       --loss sparse_categorical_crossentropy
       --image-size 16x16 --mean 0.5 --std 0.5 --augment flip,crop=2,brightness=0.1,contrast=0.2
       --epochs 12 --batch-size 32 --lr 0.01 --no-progress --seed 3)
  expect_rc 0 "in memory, no shuffle" -- "$rtrain" "${CNN[@]}" --no-shuffle --storage memory \
    --save-weights "$tmp/m.bin"
  expect_rc 0 "streamed, no shuffle" -- "$rtrain" "${CNN[@]}" --no-shuffle --storage stream \
    --save-weights "$tmp/s.bin"
  has "$tmp/err" "300 samples.*streamed from the daemon's disk" "the CLI reports the set streamed"
  cmp -s "$tmp/m.bin" "$tmp/s.bin" && ok "streamed = in memory, bit for bit (augmented)" \
    || bad "streamed weights differ from in-memory ones"
  expect_rc 0 "streamed, shuffle buffer 64" -- "$rtrain" "${CNN[@]}" --storage stream \
    --shuffle-buffer 64 --save-weights "$tmp/s1.bin"
  acc=$(sed -n 's/^final:.* val_accuracy \([0-9.]*\).*/\1/p' "$tmp/out")
  ge "$acc" 0.9 && ok "streamed CNN val_accuracy $acc >= 0.9" || bad "streamed val_accuracy '$acc'"
  expect_rc 0 "streamed again" -- "$rtrain" "${CNN[@]}" --storage stream --shuffle-buffer 64 \
    --save-weights "$tmp/s2.bin"
  cmp -s "$tmp/s1.bin" "$tmp/s2.bin" && ok "same seed streamed: bit-identical" \
    || bad "same seed streamed: weights differ"
  cmp -s "$tmp/s1.bin" "$tmp/s.bin" && bad "the shuffle buffer did not change the order" \
    || ok "the shuffle buffer reorders"
  expect_rc 0 "streamed, RunSteps 5 per call" -- "$rtrain" "${CNN[@]}" --storage stream \
    --shuffle-buffer 64 --steps-per-call 5 --save-weights "$tmp/s3.bin"
  cmp -s "$tmp/s1.bin" "$tmp/s3.bin" && ok "streamed RunSteps in 5-step calls = Fit" \
    || bad "streamed RunSteps weights differ from Fit"
  [ -z "$(ls -A "$tmp/spool")" ] && ok "spool files are unlinked" || bad "spool dir not empty"
  kill -TERM "$dpid"; wait "$dpid"; dpid=""

  start_daemon "$tmp/daemon1.log" --spool-dir "$tmp/spool" --decode-threads 1 --prefetch 1 \
    --map-spool-below 0 || exit 1
  S=(--server "$addr")
  CNN[1]=--server CNN[2]=$addr
  expect_rc 0 "one decode worker (pread, not mapped), one batch ahead" -- "$rtrain" "${CNN[@]}" --storage stream \
    --shuffle-buffer 64 --save-weights "$tmp/s4.bin"
  cmp -s "$tmp/s1.bin" "$tmp/s4.bin" && ok "weights do not depend on mapping, workers or prefetch" \
    || bad "weights depend on the decode workers"
  kill -TERM "$dpid"; wait "$dpid"; dpid=""
  grep -q "Sanitizer" "$tmp"/daemon*.log && bad "sanitizer report" || ok "no sanitizer report"
  echo "stream_e2e stream: $((checks - fails))/$checks checks passed"
  [ "$fails" -eq 0 ]
  exit
fi
[ "$part" = limit ] || { echo "stream_e2e.sh: PART is stream or limit, not '$part'"; exit 2; }

# --- larger than memory: 3000 224x224 RGB JPEGs decode to 1.8 GB of f32;
# the daemon gets 420 MB of address space
$py "$here/gen_images.py" "$tmp/big" 1000 0 224 || { echo "gen_images.py failed"; exit 1; }
decoded=$((3000 * 224 * 224 * 3 * 4))
as=$((420 * 1024 * 1024))
[ "$decoded" -gt $((4 * as)) ] && ok "decoded size $decoded > 4 x address space $as" \
  || bad "the dataset is not 4x the limit"
# the daemon starts under the limit, so its memory budget (and the size
# above which it streams) follows from it
printf '#!/bin/sh\nMALLOC_ARENA_MAX=1 exec prlimit --as=%s %s "$@"\n' "$as" "$rtraind" >"$tmp/limited"
chmod +x "$tmp/limited"
daemon=$rtraind rtraind=$tmp/limited
start_daemon "$tmp/daemon2.log" --log-level info --spool-dir "$tmp/spool" --threads 1 \
  --decode-threads 2 || exit 1
rtraind=$daemon
lim=$(sed -n 's/^Max address space *\([0-9]*\).*/\1/p' "/proc/$dpid/limits")
[ "$lim" = "$as" ] && ok "the daemon runs under --as $as" || bad "address space limit '$lim'"
expect_rc 0 "an epoch on 3000 224x224 images" -- "$rtrain" fit --server "$addr" \
  --model "$here/pool224.json" --data "$tmp/big/train" --image-size 224x224 \
  --loss sparse_categorical_crossentropy --epochs 1 --batch-size 50 --lr 0.01 --no-progress \
  --augment flip,brightness=0.1
has "$tmp/err" "3000 samples.*streamed from the daemon's disk" "streamed without being asked"
hwm=$(sed -n 's/^VmHWM:[^0-9]*\([0-9]*\) kB/\1/p' "/proc/$dpid/status")
hwm=$((hwm * 1024))
[ "$hwm" -gt 0 ] && [ "$hwm" -lt $((decoded / 8)) ] \
  && ok "peak RSS $hwm < decoded/8 ($((decoded / 8)))" || bad "peak RSS $hwm"
kill -0 "$dpid" 2>/dev/null && ok "daemon alive" || bad "daemon died"
kill -TERM "$dpid"; wait "$dpid"; drc=$?; dpid=""
[ "$drc" -eq 0 ] && ok "daemon stopped cleanly" || bad "daemon exit status $drc"

# --- a fresh daemon under the same limit, an IDX.gz pair: 150000 rows of
# 3072 u8 values, 1.8 GB as f32 and 461 MB even as u8 (over its whole
# address space); 13 MB gzip'ed, inflated into the spool chunk by chunk
daemon=$rtraind rtraind=$tmp/limited
start_daemon "$tmp/daemon3.log" --log-level info --spool-dir "$tmp/spool" --threads 1 \
  --decode-threads 2 || exit 1
rtraind=$daemon
$py "$here/gen_idx_big.py" "$tmp/idx" 150000 || { echo "gen_idx_big.py failed"; exit 1; }
decoded=$((150000 * 3072 * 4))
[ "$decoded" -gt $((4 * as)) ] && [ $((decoded / 4)) -gt "$as" ] \
  && ok "IDX: decoded $decoded > 4 x address space, u8 rows over it" || bad "IDX set too small"
expect_rc 0 "an epoch on a 150000 x 3072 IDX.gz" -- "$rtrain" fit --server "$addr" \
  --model "$here/dense3072.json" --data "$tmp/idx/big-images-idx2-ubyte.gz" \
  --labels "$tmp/idx/big-labels-idx1-ubyte.gz" --loss sparse_categorical_crossentropy \
  --epochs 1 --batch-size 1000 --lr 0.01 --no-progress
has "$tmp/err" "150000 samples, streamed from the daemon's disk" "IDX streamed without being asked"
acc=$(sed -n 's/^final:.* accuracy \([0-9.]*\).*/\1/p' "$tmp/out")
ge "$acc" 0.9 && ok "IDX accuracy $acc >= 0.9 (the classes are separable)" \
  || bad "IDX accuracy '$acc'"
hwm=$(sed -n 's/^VmHWM:[^0-9]*\([0-9]*\) kB/\1/p' "/proc/$dpid/status")
hwm=$((hwm * 1024))
[ "$hwm" -gt 0 ] && [ "$hwm" -lt $((decoded / 8)) ] \
  && ok "peak RSS $hwm < IDX decoded/8 ($((decoded / 8)))" || bad "peak RSS $hwm"
kill -0 "$dpid" 2>/dev/null && ok "daemon alive" || bad "daemon died"
kill -TERM "$dpid"; wait "$dpid"; drc=$?; dpid=""
[ "$drc" -eq 0 ] && ok "daemon stopped cleanly" || bad "daemon exit status $drc"
grep -q "Sanitizer" "$tmp"/daemon*.log && bad "sanitizer report" || ok "no sanitizer report"

echo "stream_e2e limit: $((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
