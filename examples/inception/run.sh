#!/usr/bin/env bash
# run.sh [options] - Inception v3 trained as its paper trained it: from gzip
# TFRecord shards of JPEGs (Fashion-MNIST resized to the model's input,
# make_shards.py) on a preemptible host. rtraind runs with --state-dir; a
# seeded schedule SIGKILLs it KILLS times and restarts it on the same
# directory and port, the CLI fit reattaches and resumes (durable mode,
# docs/operations.md), and the final weights are compared with an
# uninterrupted run's: the script exits 0 only if they are bit-identical.
#
#   --build DIR      rtrain's build folder (default ./build)
#   --model keras|onnx  Keras' InceptionV3 JSON (gen_keras_inception_v3.py)
#                    or torchvision's inception_v3 in ONNX
#                    (export_torch_inception_v3.py; default keras)
#   --count N        training images (default 256; the full run: 60000)
#   --epochs E       (default 2)       --batch B   (default 32)
#   --size S         the input, >= 75 (default 75; the paper's: 299)
#   --kills K        SIGKILLs (default 3)
#   --seed N         the kill schedule's seed (default 1)
#   --jitter-ms MS   each kill lands MS ms at most (seeded) after the daemon
#                    passed the step chosen for it, inside the next step
#                    (default 1000; 0: at the step boundary)
#   --workdir DIR    keep shards, logs and weights there (default a
#                    temporary folder, removed at the end)
# Full run: run.sh --count 60000 --epochs 10 --kills 20
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$src/build model=keras count=256 epochs=2 batch=32 size=75 kills=3 seed=1
jitter=1000 work=""
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2 ;; --model) model=$2 ;; --count) count=$2 ;;
    --epochs) epochs=$2 ;; --batch) batch=$2 ;; --size) size=$2 ;;
    --kills) kills=$2 ;; --seed) seed=$2 ;; --jitter-ms) jitter=$2 ;;
    --workdir) work=$2 ;;
    *) echo "run.sh: unknown option $1 (see the head of $0)" >&2; exit 2 ;;
  esac
  shift 2 || { echo "run.sh: $1 needs a value" >&2; exit 2; }
done
rtraind=$build/server/rpc/rtraind rtrain=$build/client/cli/rtrain
for b in "$rtraind" "$rtrain"; do
  [ -x "$b" ] || { echo "run.sh: $b not built (--build DIR)" >&2; exit 2; }
done
if [ -z "$work" ]; then
  work=$(mktemp -d) && trap 'kill -9 $dpid 2>/dev/null; rm -rf "$work"' EXIT
else
  mkdir -p "$work" && trap 'kill -9 $dpid 2>/dev/null' EXIT
fi
dpid=""
RANDOM=$seed
here=$src/examples/inception
py=/usr/bin/python3

"$py" "$here/make_shards.py" "$work/shards" --count "$count" --shards 4 --size "$size" || exit 1
case $model in
  keras) m=$work/inception_v3.json
         "$py" "$here/gen_keras_inception_v3.py" "$m" "$size" 10 || exit 1
         MODEL=(--model "$m" --loss sparse_categorical_crossentropy) ;;
  onnx)  m=$work/inception_v3.onnx
         "$py" "$here/export_torch_inception_v3.py" "$m" "$size" 10 1 2>"$work/export.err" ||
           { cat "$work/export.err"; exit 1; }
         # torchvision's model is NCHW and returns logits; the shards' JPEGs
         # decode to NHWC
         MODEL=(--model "$m" --data-layout NHWC --loss cross_entropy) ;;
  *) echo "run.sh: --model keras or onnx" >&2; exit 2 ;;
esac
steps_epoch=$(( (count + batch - 1) / batch ))
total=$((steps_epoch * epochs))
# shellcheck disable=SC2054 # the commas are inside option values (a feature list)
FIT=(fit "${MODEL[@]}" --data "$work/shards/train-*.tfrecord.gz"
     --features image/encoded:jpeg,image/class/label:int64 --label image/class/label
     --image-size "${size}x$size" --channels 3 --optimizer adam --lr 0.001
     --batch-size "$batch" --epochs "$epochs" --seed 1 --steps-per-call 1 --no-progress)
# Inception's ONNX (87 MB of weights) is over gRPC's default 64 MiB
DFLAGS=(--max-message-bytes 268435456 --log-level info)

. "$src/bench/durable/rtraind_start.sh"
start() { rtraind_start "$rtraind" "$@" "${DFLAGS[@]}"; }
paused() { [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = T ]; }

echo "== uninterrupted: $total steps ($epochs epochs of $steps_epoch, batch $batch)"
start "$work/ref.log" 127.0.0.1:0
"$rtrain" "${FIT[@]}" --server "$bound" --save-weights "$work/w-ref.bin" \
  >"$work/ref.out" 2>&1 || { cat "$work/ref.out"; exit 1; }
tail -n 1 "$work/ref.out"
kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""

# The kill schedule: daemon start i stops itself (--pause-at-step) at a
# seeded step past the last, is let go, and is SIGKILLed up to --jitter-ms
# later. Checkpoints every step, so a restart resumes at most one step back.
# (The port is below the kernel's ephemeral range: no connection's local
# port takes it while the daemon is down. It comes from SRANDOM, not the
# seeded RANDOM: two runs with the same seed at once, such as two
# checkouts' suites, would share it, and one's client reach the other's
# daemon.)
port=127.0.0.1:$((20000 + SRANDOM % 12000))
gap=$(( total / (kills + 1) )); [ "$gap" -ge 1 ] || gap=1
at=0
next_pause() { at=$((at + 1 + RANDOM % gap)); [ "$at" -lt "$total" ]; }
echo "== preempted: $kills SIGKILLs of rtraind --state-dir"
k=0
PAUSE=(); next_pause && [ "$kills" -gt 0 ] && PAUSE=(--pause-at-step "$at")
start "$work/d-0.log" "$port" --state-dir "$work/state" --checkpoint-every-steps 1 "${PAUSE[@]}"
"$rtrain" "${FIT[@]}" --server "$port" --save-weights "$work/w-kill.bin" \
  >"$work/kill.out" 2>&1 &
cpid=$!
while [ "${#PAUSE[@]}" -gt 0 ]; do
  until paused "$dpid"; do
    kill -0 "$cpid" 2>/dev/null || break 2
    sleep 0.01
  done
  ms=0; [ "$jitter" -gt 0 ] && ms=$((RANDOM % (jitter + 1)))
  if [ "$ms" -gt 0 ]; then
    kill -CONT "$dpid"; sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
  fi
  kill -9 "$dpid"; wait "$dpid" 2>/dev/null
  k=$((k + 1))
  echo "kill $k: after global step $at (+$ms ms)"
  PAUSE=(); [ "$k" -lt "$kills" ] && next_pause && PAUSE=(--pause-at-step "$at")
  start "$work/d-$k.log" "$port" --state-dir "$work/state" --checkpoint-every-steps 1 \
    "${PAUSE[@]}"
done
wait "$cpid"; rc=$?
kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""
grep '^daemon restarted' "$work/kill.out"
tail -n 1 "$work/kill.out"
[ "$rc" -eq 0 ] || { echo "run.sh: the preempted fit failed ($rc)"; cat "$work/kill.out"; exit 1; }
re=$(grep -c '^daemon restarted' "$work/kill.out")
echo "SIGKILLs: $k, client reattaches: $re"
if cmp -s "$work/w-ref.bin" "$work/w-kill.bin"; then
  echo "final weights: bit-identical to the uninterrupted run's"
else
  echo "final weights: DIFFER from the uninterrupted run's"; exit 1
fi
[ "$k" -eq "$kills" ] || { echo "run.sh: only $k of $kills kills landed before the fit ended"; exit 1; }
