#!/usr/bin/env bash
# stream_augment_e2e.sh - an augmented fit (flip, crop, brightness,
# contrast) draws the same images wherever its rows live: one upload kept
# in memory, one upload streamed (--storage stream: the stream's workers
# draw), and the same set sent in chunks (a daemon with --max-upload-bytes
# 64 KiB: each chunk's Fit carries its rows_before and the whole set's
# steps per epoch), streamed or in memory. Unshuffled, all train on the same
# batches from the same initial weights (same seed): the weights files must
# be identical, byte for byte (a draw keyed on another epoch or row id
# changes them), and the run without augmentation must differ (the draws
# are made). Shuffled chunks are permuted here (rt_client_fit_rows): the
# same seed repeats the weights.
set -uo pipefail
rtraind=$1 rtrain=$2 src=$3
. "$src/tests/lib/e2e.sh"
/usr/bin/python3 "$src/tests/data/gen_images.py" "$tmp/imgs" 100 1 >/dev/null || exit 1
# four daemons: whole uploads or 64 KiB ones, each with spool files mapped
# (read by the training step) or never (read by the decode workers)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; cleanup' EXIT
daemon() { # daemon LOG FLAGS...: its address in $addr
  start_daemon "$tmp/$1.log" --log-level warn "${@:2}" || exit 1
  pids+=("$dpid")
  dpid=""
}
daemon small --max-upload-bytes 65536
small=$addr
daemon smallw --max-upload-bytes 65536 --map-spool-below 0
smallw=$addr
daemon whole-w --map-spool-below 0
wholew=$addr
daemon whole

# 300 16x16 RGB images, about 170 KB as files: chunks of at most 32 KiB
FIT=(fit --model "$src/tests/data/cnn16.json" --image-size 16x16 --data "$tmp/imgs/train"
     --loss sparse_categorical_crossentropy --optimizer sgd --lr 0.05 --batch-size 8
     --epochs 2 --seed 11 --no-progress)
AUG=(--augment "flip,crop=2,brightness=0.2,contrast=0.3")
run() { # run NAME OUT ARGS...
  local name=$1 out=$2; shift 2
  expect_rc 0 "$name" -- "$rtrain" "${FIT[@]}" "$@" --save-weights "$tmp/$out.bin"
}
run "in memory, one upload" mem "${AUG[@]}" --no-shuffle --storage memory --server "$addr"
run "streamed, one upload" str "${AUG[@]}" --no-shuffle --storage stream --server "$addr"
run "streamed, one upload, read by workers" strw "${AUG[@]}" --no-shuffle --storage stream \
  --server "$wholew"
run "streamed, in chunks" strc "${AUG[@]}" --no-shuffle --storage stream --server "$small"
has "$tmp/err" "sent in chunks of whole batches" "the streamed fit goes in chunks"
run "streamed, in chunks, read by workers" strcw "${AUG[@]}" --no-shuffle --storage stream \
  --server "$smallw"
run "in memory, in chunks" memc "${AUG[@]}" --no-shuffle --storage memory --server "$small"
run "not augmented" plain --no-shuffle --storage stream --server "$addr"
same() { # same A B WHAT
  cmp -s "$tmp/$1.bin" "$tmp/$2.bin" && ok "$3" || bad "$3: the weights differ"
}
same mem str "streamed = in memory, byte for byte"
same mem strw "streamed, read by workers = in memory, byte for byte"
same mem strc "streamed in chunks = one upload, byte for byte"
same mem strcw "streamed in chunks, read by workers = one upload, byte for byte"
same mem memc "in memory in chunks = one upload, byte for byte"
cmp -s "$tmp/mem.bin" "$tmp/plain.bin" && bad "augmented = not augmented: no draws were made" ||
  ok "the draws change the weights"

# shuffled in chunks: the rows permuted over the whole set each epoch; the
# same seed gives the same weights (the stream's shuffle buffer orders the
# rows within a chunk, not the in-memory permutation: no twin to compare)
run "shuffled, streamed in chunks" sa "${AUG[@]}" --storage stream --server "$small"
has "$tmp/err" "shuffled over all rows each epoch" "the fit shuffles over all rows"
run "shuffled, streamed in chunks, again" sb "${AUG[@]}" --storage stream --server "$smallw"
same sa sb "shuffled chunks: the same seed, the same weights"
echo "$((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
