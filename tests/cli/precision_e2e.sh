#!/usr/bin/env bash
# precision_e2e.sh - `rtrain fit --precision bf16` (Keras' mixed_bfloat16)
# against a real rtraind: the fit trains, and the program line says which
# ops multiply in bf16 (the iris model's two Dense layers; its Softmax, a
# Dense activation fused into neither, stays float32). A daemon whose
# oneDNN is capped below bf16 (ONEDNN_MAX_CPU_ISA=AVX512_CORE, read by
# oneDNN itself) refuses with a message saying so and keeps serving.
# A CPU without bf16 instructions must refuse on the plain daemon too.
set -uo pipefail
rtraind=$1 rtrain=$2 src=$3
ex=$src/examples/iris
. "$src/tests/lib/e2e.sh"
start_daemon "$tmp/daemon.log" --log-level warn || exit 1
FIT=(fit --server "$addr" --model "$ex/model.json" --data "$ex/train_shuffled.csv"
     --val "$ex/val_shuffled.csv" --loss sparse_categorical_crossentropy
     --optimizer adam --lr 0.02 --batch-size 20 --epochs 30 --seed 1)

if grep -qw avx512_bf16 /proc/cpuinfo; then
  expect_rc 0 "fit --precision bf16" -- "$rtrain" "${FIT[@]}" --precision bf16
  # the op count and names are the backend's (cpu fuses Dense+Relu, ref does not)
  has "$tmp/err" "precision: 2 of [0-9]* ops mixed_bfloat16: dense (Dense[+A-Za-z]*), dense_1 (Dense)" \
    "program line names the bf16 ops"
  acc=$(sed -n 's/.*val_accuracy \([0-9.]*\).*/\1/p' "$tmp/err" "$tmp/out" | tail -n 1)
  ge "$acc" 0.9 && ok "bf16 val_accuracy $acc >= 0.9" || bad "bf16 val_accuracy '$acc' < 0.9"
else
  expect_rc 4 "fit --precision bf16 without bf16 instructions" -- "$rtrain" "${FIT[@]}" --precision bf16
  has "$tmp/err" "no bf16 instructions" "the refusal says why"
fi
expect_rc 0 "fit --precision float32" -- "$rtrain" "${FIT[@]}" --precision float32 --epochs 2
grep -q "precision:" "$tmp/err" && bad "float32 fit printed a precision line" || ok "float32: no precision line"
expect_rc 2 "--precision fp16 is a usage error" -- "$rtrain" "${FIT[@]}" --precision fp16
has "$tmp/err" "float32|bf16|mixed_bfloat16" "usage error lists the choices"

# oneDNN capped below bf16: refused, FAILED_PRECONDITION, daemon unharmed.
# The ref backend emulates bf16 in plain C (no instruction, no oneDNN):
# capped or not, it trains the policy.
kill "$dpid" && wait "$dpid" 2>/dev/null
ONEDNN_MAX_CPU_ISA=AVX512_CORE start_daemon "$tmp/daemon2.log" --log-level warn || exit 1
FIT[2]=$addr
if "$rtrain" info --server "$addr" 2>&1 | grep -Eq "^ *backend +ref\b"; then
  expect_rc 0 "ref under the cap still trains bf16" -- "$rtrain" "${FIT[@]}" --precision bf16 --epochs 2
  has "$tmp/err" "precision: 2 of [0-9]* ops mixed_bfloat16" "ref: the program line names the bf16 ops"
else
  expect_rc 4 "capped daemon refuses bf16" -- "$rtrain" "${FIT[@]}" --precision bf16
  has "$tmp/err" "no bf16 instructions" "the refusal names the missing instructions"
  has "$tmp/err" "use precision float32" "and the fix"
fi
expect_rc 0 "capped daemon still trains float32" -- "$rtrain" "${FIT[@]}" --epochs 2
echo "$((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
