#!/bin/sh
# Fashion-MNIST through the CLI against a fresh local rtraind (docs/fashion-mnist.md).
#   bench/conv/fashion_mnist.sh [BUILD_DIR] [EPOCHS]
# Needs `apt-get install dataset-fashion-mnist`. Prints the fit log, the
# client's /usr/bin/time summary and the daemon's peak RSS (VmHWM).
set -eu
B=${1:-build-conv}
EPOCHS=${2:-5}
D=/usr/share/datasets/fashion-mnist
OUT=$(mktemp -d)
"$B/server/rpc/rtraind" --listen 127.0.0.1:0 --log-level warn >"$OUT/daemon.out" 2>"$OUT/daemon.err" &
DPID=$!
trap 'kill $DPID 2>/dev/null || true' EXIT
for _ in 1 2 3 4 5 6 7 8 9 10; do
  grep -q listening "$OUT/daemon.out" && break
  sleep 0.5
done
PORT=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$OUT/daemon.out")
echo "daemon on 127.0.0.1:$PORT, $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$B/bench/conv/bench_conv" --plan bench/conv/fashion_cnn.json 128 || true
/usr/bin/time -v "$B/client/cli/rtrain" fit --server "127.0.0.1:$PORT" \
  --model bench/conv/fashion_cnn.json \
  --data $D/train-images-idx3-ubyte.gz --labels $D/train-labels-idx1-ubyte.gz \
  --val $D/t10k-images-idx3-ubyte.gz --val-labels $D/t10k-labels-idx1-ubyte.gz \
  --epochs "$EPOCHS" --batch-size 128 --optimizer adam --lr 0.001 \
  --loss sparse_categorical_crossentropy --seed 1 --no-progress --timings \
  2>"$OUT/time.txt"
grep -E "Elapsed|Maximum resident" "$OUT/time.txt" | sed 's/^\t*/client: /'
grep -E "VmHWM|VmRSS" /proc/$DPID/status | sed 's/^/daemon: /'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
