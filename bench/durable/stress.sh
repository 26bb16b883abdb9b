#!/usr/bin/env bash
# stress.sh RTRAIND RTRAIN [KILLS] [SEED] [K] - a small CNN (Conv/BatchNorm/
# MaxPool/Dropout/Dense, Adam: bench/durable/stress_cnn.json, bench/conv's
# Fashion-MNIST CNN made smaller) on the first 512 Fashion-MNIST test images,
# fitted against `rtraind --state-dir` while the daemon is SIGKILLed KILLS
# times (default 200) at seeded random moments (0-200 ms apart once the
# client is back) and restarted on the same port and directory. K = 0 (the
# default) fits with the CLI's Fit stream, K > 0 with RunSteps calls of K
# steps. Reports the kills, the client's reattaches, the restore times and
# whether the final weights and per-epoch metrics equal an uninterrupted
# run's (peer: the same fit, never killed, timed alike). With 200 kills it
# takes a few minutes.
set -u
rtraind=$1 rtrain=$2 kills=${3:-200} seed=${4:-1} k_call=${5:-0}
src=$(cd "$(dirname "$0")/../.." && pwd)
data=/usr/share/datasets/fashion-mnist
[ -r "$data/t10k-images-idx3-ubyte.gz" ] || {
  echo "stress: needs Debian's dataset-fashion-mnist ($data)"; exit 77; }
tmp=$(mktemp -d)
dpid=""
trap '[ -n "$dpid" ] && kill -9 $dpid 2>/dev/null; rm -rf "$tmp"' EXIT
RANDOM=$seed
# the first 512 images and labels (IDX: a header of dims, then the bytes)
/usr/bin/python3 - "$data" "$tmp" <<'PY' || exit 1
import gzip, struct, sys
src, dst = sys.argv[1:3]
for name, row in (("t10k-images-idx3-ubyte", 28 * 28), ("t10k-labels-idx1-ubyte", 1)):
    b = gzip.open("%s/%s.gz" % (src, name)).read()
    nd = b[3]
    dims = list(struct.unpack(">%dI" % nd, b[4:4 + 4 * nd]))
    dims[0] = 512
    open("%s/%s" % (dst, name), "wb").write(
        b[:4] + struct.pack(">%dI" % nd, *dims) + b[4 + 4 * nd:4 + 4 * nd + 512 * row])
PY
# 16 steps an epoch (512 / 32): the Fit stream's epochs are the data set's,
# so it resumes between steps (checkpoints every 4 steps)
FIT=(fit --model "$src/bench/durable/stress_cnn.json" --data "$tmp/t10k-images-idx3-ubyte"
     --labels "$tmp/t10k-labels-idx1-ubyte" --loss sparse_categorical_crossentropy
     --optimizer adam --lr 0.001 --batch-size 32 --seed 1 --steps-per-call "$k_call"
     --no-progress)
# epochs: enough for every kill to land mid-fit
epochs=$((kills * 3 / 2 + 20))

. "$src/bench/durable/rtraind_start.sh"
start() { rtraind_start "$rtraind" "$@" --log-level info; }

t0=$(date +%s.%N)
start "$tmp/ref.log" 127.0.0.1:0
addr=$bound
"$rtrain" "${FIT[@]}" --server "$addr" --epochs $epochs --save-weights "$tmp/w-ref.bin" \
  --csv-log "$tmp/ref.csv" >/dev/null 2>"$tmp/ref.err" || { cat "$tmp/ref.err"; exit 1; }
kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""
t_ref=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { print a - b }')

t0=$(date +%s.%N)
# (a port below the kernel's ephemeral range: no connection's local port
# takes it while the daemon is down)
start "$tmp/d-0.log" "127.0.0.1:$((20000 + SRANDOM % 12000))" --state-dir "$tmp/st" \
  --checkpoint-every-steps 4
port=$bound
"$rtrain" "${FIT[@]}" --server "$port" --epochs $epochs --save-weights "$tmp/w-k.bin" \
  --csv-log "$tmp/k.csv" >/dev/null 2>"$tmp/k.err" &
cpid=$!
# stops only once training runs (upload and compile do not reattach)
until grep -q "^Epoch 1/" "$tmp/k.err" || ! kill -0 "$cpid" 2>/dev/null; do sleep 0.05; done
k=0
while [ "$k" -lt "$kills" ] && kill -0 "$cpid" 2>/dev/null; do
  sleep "0.$(printf %03d $((RANDOM % 200)))"
  kill -0 "$cpid" 2>/dev/null || break
  kill -9 "$dpid"; wait "$dpid" 2>/dev/null
  k=$((k + 1))
  start "$tmp/d-$k.log" "$port" --state-dir "$tmp/st" --checkpoint-every-steps 4
  # the next kill once the client is back
  for _ in $(seq 1 3000); do
    [ "$(grep -c '^daemon restarted' "$tmp/k.err")" -ge "$k" ] && break
    kill -0 "$cpid" 2>/dev/null || break
    sleep 0.01
  done
done
wait "$cpid"; rc=$?
kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""
t_k=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { print a - b }')

re=$(grep -c '^daemon restarted' "$tmp/k.err")
restores=$(cat "$tmp"/d-*.log | sed -n 's/.*restored .* in \([0-9.]*\) ms.*/\1/p' | sort -n)
n=$(echo "$restores" | grep -c .)
med=$(echo "$restores" | awk -v n="$n" 'NR == int((n + 1) / 2) { print }')
p99=$(echo "$restores" | awk -v n="$n" 'NR == int(n * 0.99 + 0.999) { print }')
same_w=no; cmp -s "$tmp/w-ref.bin" "$tmp/w-k.bin" && same_w=yes
same_m=no; diff <(cut -d, -f2- "$tmp/ref.csv") <(cut -d, -f2- "$tmp/k.csv") >/dev/null && same_m=yes
mode="Fit stream"; [ "$k_call" -gt 0 ] && mode="RunSteps K=$k_call"
mid=$(cat "$tmp"/d-*.log | sed -n 's/.*resumed at epoch [0-9]* step \([0-9]*\).*/\1/p' | awk '$1 % 16' | wc -l)
printf '%-40s %s\n' "workload" "small Fashion-MNIST CNN (BatchNorm, Dropout), $mode, $epochs epochs x 16 steps"
printf '%-40s %s\n' "SIGKILLs during the fit" "$k"
printf '%-40s %s\n' "client reattaches" "$re"
[ "$k_call" -eq 0 ] && printf '%-40s %s\n' "fit resumed inside an epoch" "$mid"
printf '%-40s %s\n' "fit exit status" "$rc"
printf '%-40s %s ms median, %s ms p99 (%s starts)\n' "restore at start (sessions, data, compile)" "$med" "$p99" "$n"
printf '%-40s %.1f s (peer, never killed: %.1f s; ratio %.2f)\n' "wall" "$t_k" "$t_ref" \
  "$(awk -v a="$t_k" -v b="$t_ref" 'BEGIN { print a / b }')"
printf '%-40s %s\n' "final weights bit-identical" "$same_w"
printf '%-40s %s\n' "per-epoch metrics equal" "$same_m"
[ "$rc" -eq 0 ] && [ "$same_w" = yes ] && [ "$same_m" = yes ]
