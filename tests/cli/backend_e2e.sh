#!/usr/bin/env bash
# The backend a daemon runs on (docs/backends.md): rtraind --backend NAME
# picks it, an unknown name is refused at start, and the one in use shows
# in `rtrain info`, in Prometheus (rtrain_backend_info), in the log and in
# the compile report the fit prints; a model trains on each built backend
# to the same accuracy.
#   usage: backend_e2e.sh RTRAIND RTRAIN SOURCE_DIR
set -uo pipefail
rtraind=$1 rtrain=$2 src=$3
ex=$src/examples/iris
. "$src/tests/lib/e2e.sh"

expect_rc 2 "--backend nope refused" -- "$rtraind" --listen 127.0.0.1:0 --backend nope
has "$tmp/err" "no backend 'nope' in this build (built: " "the refusal names the built ones"
built=$(sed -n "s/.*(built: \(.*\))$/\1/p" "$tmp/err")
echo "built: $built"

accs=()
for be in ${built//,/ }; do
  start_daemon "$tmp/d-$be.log" --log-level info --backend "$be" --metrics-listen 127.0.0.1:0 || exit 1
  expect_rc 0 "info ($be)" -- "$rtrain" info --server "$addr"
  if [ "$be" = cpu ]; then want="(cpu, cpu+onednn-"; else want="(cpu, $be)"; fi
  has "$tmp/out" "$want" "info shows backend $be"
  has "$tmp/out" "^backend  *$be" "info's backend line names $be"
  murl=$(sed -n 's/^rtraind metrics on \(http:[^ ]*\)$/\1/p' "$tmp/d-$be.log" | head -n 1)
  curl -s "$murl" >"$tmp/metrics" && has "$tmp/metrics" "rtrain_backend_info{backend=\"$be\"," \
    "Prometheus shows backend $be"
  has "$tmp/d-$be.log" "backend $be" "the log names backend $be"
  expect_rc 0 "fit on $be" -- "$rtrain" fit --server "$addr" --model "$ex/model.json" \
    --data "$ex/train_shuffled.csv" --val "$ex/val_shuffled.csv" \
    --loss sparse_categorical_crossentropy --optimizer adam --lr 0.02 --batch-size 20 \
    --epochs 30 --seed 1 --no-progress
  has "$tmp/err" "^program: .*, backend $be" "the fit's compile report names backend $be"
  acc=$(sed -n 's/^final:.* val_accuracy \([0-9.]*\).*/\1/p' "$tmp/out")
  ge "$acc" 0.9 && ok "$be: val_accuracy $acc >= 0.9" || bad "$be: val_accuracy '$acc' < 0.9"
  accs+=("$acc")
  kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""
done
# the same data, seed and arithmetic up to rounding: the same predictions
# on 30 validation rows (an accuracy step is 1/30, far above rounding)
[ "${#accs[@]}" -lt 2 ] || [ "${accs[0]}" = "${accs[1]}" ] \
  && ok "the backends agree on val_accuracy (${accs[*]})" \
  || bad "val_accuracy differs between backends: ${accs[*]}"
echo "$((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
