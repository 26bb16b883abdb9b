#!/usr/bin/env bash
# onnx_cli.sh - the CLI with an ONNX model against a real rtraind: fit
# --model m.onnx --onnx out.onnx, export of saved weights giving the same
# file, predict, and the errors (unsupported operators listed, --onnx with a
# JSON model).
#   onnx_cli.sh RTRAIND RTRAIN SRC
rtraind=$1 rtrain=$2 src=$3
. "$src/tests/lib/e2e.sh"
fix=$src/tests/onnx/fixtures
iris=$src/tests/fixtures/iris.csv
start_daemon "$tmp/daemon.log" --log-level warn || exit 1
S=(--server "$addr")
FIT=(fit "${S[@]}" --data "$iris" --csv-header --loss sparse_categorical_crossentropy
     --epochs 2 --batch-size 10 --no-progress)

expect_rc 0 "fit --model wa.onnx --onnx" -- "$rtrain" "${FIT[@]}" --model "$fix/wa.onnx" \
  --save-weights "$tmp/w.bin" --onnx "$tmp/fit.onnx"
has "$tmp/err" "onnx: $tmp/fit.onnx" "fit wrote the trained ONNX model"
if cmp -s "$fix/wa.onnx" "$tmp/fit.onnx"; then bad "the trained model equals the initial one"
else ok "the trained model's initializers changed"; fi
expect_rc 0 "export --weights" -- "$rtrain" export "${S[@]}" --model "$fix/wa.onnx" \
  --weights "$tmp/w.bin" --onnx "$tmp/exp.onnx"
if cmp -s "$tmp/fit.onnx" "$tmp/exp.onnx"; then ok "export of the saved weights = fit --onnx"
else bad "export of the saved weights differs from fit --onnx"; fi
expect_rc 0 "predict with the ONNX model" -- "$rtrain" predict "${S[@]}" --model "$fix/wa.onnx" \
  --weights "$tmp/w.bin" --data "$iris" --csv-header --out "$tmp/p.csv"
rows=$(wc -l < "$tmp/p.csv")
ge "$rows" 150 && ok "150 predictions" || bad "predictions: $rows rows"
# a model trained from its own file: the exported model imports and trains again
expect_rc 0 "fit of the exported model" -- "$rtrain" "${FIT[@]}" --model "$tmp/exp.onnx"

expect_rc 4 "unsupported operators" -- "$rtrain" "${FIT[@]}" \
  --model "$src/tests/fuzz/onnx/bad_unsupported.onnx"
has "$tmp/err" "Celu (node 'act1'), Hardmax (node 'hm')" "every unsupported operator named"
expect_rc 4 "malformed bytes" -- "$rtrain" "${FIT[@]}" --model "$src/tests/fuzz/onnx/bad_garbage.onnx"
has "$tmp/err" "not a serialized ONNX ModelProto" "malformed bytes named"
expect_rc 2 "--onnx with a JSON model" -- "$rtrain" "${FIT[@]}" \
  --model "$src/tests/data/dense4.json" --onnx "$tmp/x.onnx"
expect_rc 0 "the daemon still serves" -- "$rtrain" info "${S[@]}"
echo "$((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
