#!/usr/bin/env bash
# End-to-end tests of the `rtrain` CLI against a real rtraind on a loopback
# port: fit (both drivers, accuracy, history, weights, timings, trace), eval,
# predict (.npy and .csv), bench overhead and bench story (one smoke call
# each: the shape of their CSV, SVG and table, never a time; rtrain-bench
# run by rtrain, and rtrain without it), exit
# codes (usage 2, daemon down 3, invalid 4, not found 5, other 6) and SIGINT during
# fit (130, daemon unharmed).
#   usage: cli_e2e.sh RTRAIND RTRAIN SOURCE_DIR
set -uo pipefail
rtraind=$1 rtrain=$2 src=$3
ex=$src/examples/iris
py=/usr/bin/python3
. "$src/tests/lib/e2e.sh"
start_daemon "$tmp/daemon.log" --log-level warn || exit 1
echo "daemon at $addr"
S=(--server "$addr")
FIT=(fit "${S[@]}" --model "$ex/model.json" --data "$ex/train_shuffled.csv"
     --val "$ex/val_shuffled.csv" --loss sparse_categorical_crossentropy
     --optimizer adam --lr 0.02 --batch-size 20 --epochs 60 --seed 1)

# --- info, ping
expect_rc 0 "info" -- "$rtrain" info "${S[@]}"
grep -q "Dense" "$tmp/out" && ok "info lists ops" || bad "info lists no Dense op"
expect_rc 0 "ping" -- "$rtrain" ping "${S[@]}" --count 50 --size 1024
grep -q "p50" "$tmp/out" && ok "ping prints p50" || bad "ping output"

# --- fit through the Fit stream, with weights, timings and trace
expect_rc 0 "fit (Fit stream)" -- "$rtrain" "${FIT[@]}" --steps-per-call stream \
  --save-weights "$tmp/w.bin" --timings --trace "$tmp/trace.json"
grep -q "steps/epoch, one Fit stream$" "$tmp/err" && ok "--steps-per-call stream: one Fit stream" \
  || bad "stream: '$(grep '^train:' "$tmp/err")'"
cp "$tmp/out" "$tmp/fit1.out"
cp "$tmp/err" "$tmp/fit1.err"
acc1=$(sed -n 's/^final:.* val_accuracy \([0-9.]*\).*/\1/p' "$tmp/fit1.out")
ge "$acc1" 0.9 && ok "fit val_accuracy $acc1 >= 0.9" || bad "fit val_accuracy '$acc1' < 0.9"
n_epochs=$(grep -c '^Epoch [0-9]*/60 - ' "$tmp/fit1.err")
[ "$n_epochs" -eq 60 ] && ok "history: 60 epoch lines" || bad "history: $n_epochs epoch lines"
grep -q "^Fit " "$tmp/fit1.out" && grep -q "round trip" "$tmp/fit1.out" \
  && ok "--timings table" || bad "--timings table missing"
[ -s "$tmp/w.bin" ] && [ "$(head -c 8 "$tmp/w.bin")" = "RTWTS001" ] \
  && ok "weights file" || bad "weights file"
if $py - "$tmp/trace.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
xs = [e for e in ev if e["ph"] == "X"]
assert xs, "no complete events"
for e in xs:
    for k in ("name", "ph", "ts", "dur", "pid", "tid"):
        assert k in e, (k, e)
    assert e["dur"] >= 0
assert {e["tid"] for e in xs} >= {0, 1, 2}
assert any(e["name"] == "Fit" for e in xs)
EOF
then ok "trace is trace-event JSON"; else bad "trace JSON"; fi

# --- the same training through RunSteps, 7 steps per call: same result
expect_rc 0 "fit (RunSteps K=7)" -- "$rtrain" "${FIT[@]}" --steps-per-call 7
acc2=$(sed -n 's/^final:.* val_accuracy \([0-9.]*\).*/\1/p' "$tmp/out")
[ "$acc1" = "$acc2" ] && ok "RunSteps gives the same val_accuracy ($acc2)" \
  || bad "RunSteps val_accuracy '$acc2' != Fit '$acc1'"
! grep -q $'\r' "$tmp/err" && [ "$(grep -c '^Epoch [0-9]*/60 - ' "$tmp/err")" -eq 60 ] \
  && ok "RunSteps, not a TTY: one line per epoch, no CR" || bad "RunSteps progress lines"
# one call at a time, and auto K (printed): still the same training
expect_rc 0 "fit (RunSteps K=7, one in flight)" -- "$rtrain" "${FIT[@]}" --steps-per-call 7 \
  --in-flight 1
acc3=$(sed -n 's/^final:.* val_accuracy \([0-9.]*\).*/\1/p' "$tmp/out")
[ "$acc1" = "$acc3" ] && ok "one in flight: same val_accuracy" || bad "one in flight: '$acc3'"
# the default: pipelined RunSteps with auto K
expect_rc 0 "fit (the default: RunSteps auto)" -- "$rtrain" "${FIT[@]}" --timings
grep -q "steps/epoch, RunSteps, auto steps per call, up to [0-9]* in flight$" "$tmp/err" \
  && ok "the default is pipelined RunSteps, auto K" || bad "default: '$(grep '^train:' "$tmp/err")'"
[ "$(grep -c '^Fit ' "$tmp/out")" -eq 0 ] && ok "the default opens no Fit stream" \
  || bad "the default used a Fit stream"
acc4=$(sed -n 's/^final:.* val_accuracy \([0-9.]*\).*/\1/p' "$tmp/out")
[ "$acc1" = "$acc4" ] && ok "auto: same val_accuracy" || bad "auto: val_accuracy '$acc4'"
k=$(sed -n 's/^steps per call: auto K = \([0-9]*\) (fixed cost .* per step)$/\1/p' "$tmp/err" | head -1)
[ -n "$k" ] && [ "$k" -ge 1 ] && [ "$k" -le 6 ] && ok "auto K printed ($k)" \
  || bad "auto K: '$(grep 'steps per call' "$tmp/err")'"
[ "$(grep -c '^Evaluate ' "$tmp/out")" -eq 0 ] && [ "$(grep -c '^RunSteps ' "$tmp/out")" -ge 60 ] && ok "auto: validation inside the epochs' last calls" \
  || bad "auto: $(grep -c '^Evaluate ' "$tmp/out") Evaluate calls"
# a checkpoint every N steps without a K: the stream, which checkpoints
# between steps (a RunSteps call only at its end)
expect_rc 0 "fit --checkpoint-every-steps 4" -- "$rtrain" "${FIT[@]}" --epochs 2 \
  --checkpoint-every-steps 4
grep -q "steps/epoch, one Fit stream (--checkpoint-every-steps)$" "$tmp/err" \
  && ok "--checkpoint-every-steps without a K: one Fit stream" \
  || bad "checkpoint interval: '$(grep '^train:' "$tmp/err")'"

# --- eval and predict with the saved weights
expect_rc 0 "eval" -- "$rtrain" eval "${S[@]}" --model "$ex/model.json" \
  --weights "$tmp/w.bin" --data "$ex/val_shuffled.csv" --loss sparse_categorical_crossentropy
eacc=$(sed -n 's/.*accuracy: \([0-9.]*\).*/\1/p' "$tmp/out")
[ "$eacc" = "$acc1" ] && ok "eval accuracy $eacc = fit's" || bad "eval accuracy '$eacc' != '$acc1'"
expect_rc 0 "predict .npy" -- "$rtrain" predict "${S[@]}" --model "$ex/model.json" \
  --weights "$tmp/w.bin" --data "$ex/val_shuffled.csv" --out "$tmp/p.npy"
if $py - "$tmp/p.npy" "$ex/val_shuffled.csv" "$eacc" <<'EOF'
import sys, numpy as np
p = np.load(sys.argv[1])
y = np.loadtxt(sys.argv[2], delimiter=",")[:, -1].astype(int)
assert p.shape == (45, 3) and p.dtype == np.float32, (p.shape, p.dtype)
assert np.allclose(p.sum(1), 1, atol=1e-4)
assert abs((p.argmax(1) == y).mean() - float(sys.argv[3])) < 1e-4  # eval prints 4 decimals
EOF
then ok "predictions match eval"; else bad "predictions .npy"; fi
expect_rc 0 "predict .csv" -- "$rtrain" predict "${S[@]}" --model "$ex/model.json" \
  --weights "$tmp/w.bin" --data "$ex/val_shuffled.csv" --out "$tmp/p.csv"
[ "$(wc -l <"$tmp/p.csv")" -eq 45 ] && [ "$(head -1 "$tmp/p.csv" | tr ',' '\n' | wc -l)" -eq 3 ] \
  && ok "predict CSV 45x3" || bad "predict CSV shape"

# --- bench overhead, one smoke call (one rep): one CSV row per K, an SVG plot
expect_rc 0 "bench overhead" -- "$rtrain" bench overhead "${S[@]}" --max-k 8 --reps 1 \
  --csv "$tmp/o.csv" --plot "$tmp/o.svg" --trace "$tmp/o.json"
rows=$(tail -n +2 "$tmp/o.csv" | wc -l)
ks=$(tail -n +2 "$tmp/o.csv" | cut -d, -f1 | tr '\n' ' ')
[ "$rows" -eq 4 ] && [ "$ks" = "1 2 4 8 " ] && ok "overhead CSV rows K=$ks" \
  || bad "overhead CSV: $rows rows, K=$ks"
head -1 "$tmp/o.csv" | grep -q '^k,reps,rtt_p50_us' && ok "overhead CSV header" || bad "CSV header"
if $py - "$tmp/o.svg" <<'EOF'
import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
assert r.tag.endswith("svg")
ns = "{http://www.w3.org/2000/svg}"
assert len(r.findall(ns + "polyline")) == 3
EOF
then ok "plot is an SVG with 3 series"; else bad "plot SVG"; fi
$py -c "import json,sys; json.load(open(sys.argv[1]))" "$tmp/o.json" \
  && ok "bench trace parses" || bad "bench trace"

# --- bench story, one smoke call (one rep of 2 epochs): rtrain's side from
# the product, with the iris splits found from the current directory. Its
# PyTorch peer (bench/story.py) is a benchmark, not part of the suite.
expect_rc 0 "bench story" -- env -C "$src" "$rtrain" bench story "${S[@]}" --reps 1 --epochs 2 \
  --csv "$tmp/s.csv"
for cfg in "one call per step" "one call per epoch" "one call for the run" "auto steps per call"; do
  grep -q "$cfg" "$tmp/out" && ok "story row: $cfg" || bad "story row missing: $cfg"
done
[ "$(head -1 "$tmp/s.csv")" = "configuration,rtrain_p50_s,rep1_s,calls,val_loss,val_accuracy,story_reported" ] \
  && [ "$(wc -l <"$tmp/s.csv")" -eq 5 ] && ok "story CSV" || bad "story CSV: $(cat "$tmp/s.csv")"
# --explain: the cold run and a warm one as waterfalls; in the trace each
# phase's client + wire + server + unattributed account for its wall time
expect_rc 0 "bench story --explain" -- env -C "$src" "$rtrain" bench story "${S[@]}" \
  --reps 2 --epochs 3 --explain --trace "$tmp/st.json"
for ph in "The cold run" "A warm run" "connect" "TCP + HTTP/2 handshake" "CreateSession" \
          "Compile" "plan cache" "upload iris-train" "upload iris-val" "Fit (3 epochs)" \
          "validation (daemon)" "CloseSession" "first call on a new channel"; do
  has "$tmp/out" "$ph" "explain: $ph"
done
# a feature that is off costs nothing and is not shown
grep -q -e "token checks" -e "state synced" "$tmp/out" && bad "explain: feature rows without the features" \
  || ok "explain: no token or disk rows on a plain daemon"
if $py - "$tmp/st.json" <<'EOF'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
tracks = {e["args"]["name"]: e["tid"] for e in ev if e.get("name") == "thread_name"}
assert "phases: cold run" in tracks and "phases: median warm run" in tracks, tracks
ph = [e for e in ev if e.get("cat") == "phase"]
top = [e for e in ph if e["tid"] in (tracks["phases: cold run"],
                                     tracks["phases: median warm run"])]
names = [e["name"] for e in top]
for want in ("connect", "CreateSession", "Compile", "upload iris-train", "upload iris-val",
             "Fit (3 epochs)", "CloseSession"):
    assert names.count(want) == 2, (want, names)
for e in top:
    a = e["args"]
    parts = [a["client_us"], a["wire_us"], a["server_us"] or 0, a["unattributed_us"]]
    assert min(parts) >= 0, e
    assert sum(parts) >= e["dur"] - 0.01, e
    assert (a["server_us"] is None) == (e["name"] == "connect"), e
assert any(e["name"] == "TCP + HTTP/2 handshake" for e in ph)
assert sum(1 for e in ev if e.get("cat") == "call" and e["name"] == "Fit") >= 2 * 4
EOF
then ok "explain trace: phases account for their wall time"; else bad "explain trace"; fi
# ... and with --tokens and --state-dir the waterfall shows what each costs
tok=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s bench\n' "$(printf %s "$tok" | sha256sum | cut -c1-64)" >"$tmp/tokens"
printf '%s\n' "$tok" >"$tmp/token" && chmod 600 "$tmp/token"
plain_pid=$dpid plain_addr=$addr
if start_daemon "$tmp/daemon2.log" --log-level warn --tokens "$tmp/tokens" \
     --state-dir "$tmp/state"; then
  expect_rc 0 "bench story --explain, --tokens and --state-dir" -- env -C "$src" "$rtrain" \
    bench story --server "$addr" --token-file "$tmp/token" --reps 1 --epochs 2 --explain
  has "$tmp/out" "token checks (--tokens)" "explain: the token checks' row"
  has "$tmp/out" "state synced (--state-dir)" "explain: the synced state's row"
  has "$tmp/out" "(token [0-9.]*, disk [0-9.]*)" "explain: a call's token and disk time"
  kill "$dpid" && wait "$dpid"
else
  bad "daemon with --tokens and --state-dir did not start"
fi
dpid=$plain_pid addr=$plain_addr
expect_rc 4 "bench story without the iris splits" -- env -C "$tmp" "$rtrain" bench story \
  "${S[@]}" --reps 1
grep -q "give --data and --val" "$tmp/err" && ok "story: missing data named" \
  || bad "story: missing data message: $(cat "$tmp/err")"

# --- the benchmarks are rtrain-bench's: rtrain links none of their code,
# runs the rtrain-bench beside it, and says so when there is none
if nm "$rtrain" >"$tmp/nm" 2>&1 && grep -q ' T main$' "$tmp/nm"; then
  grep -qE ' [Tt] (cli_cmd_bench_overhead|cli_with_relay|rt_relay_start)$' "$tmp/nm" \
    && bad "rtrain links benchmark code" || ok "rtrain links no benchmark code"
else
  bad "nm cannot read $rtrain: $(head -c 200 "$tmp/nm")"
fi
expect_rc 0 "rtrain-bench --help" -- "$(dirname "$rtrain")/rtrain-bench" --help
grep -q -- "--max-k" "$tmp/out" && ok "rtrain-bench --help: overhead's options" \
  || bad "rtrain-bench --help: $(head -3 "$tmp/out")"
mkdir -p "$tmp/alone" && cp "$rtrain" "$tmp/alone/rtrain"
expect_rc 6 "bench without rtrain-bench" -- env PATH=/usr/bin:/bin "$tmp/alone/rtrain" bench \
  overhead "${S[@]}" --max-k 1 --reps 1
grep -q "rtrain-bench, which is neither next to rtrain nor on PATH" "$tmp/err" \
  && ok "bench: a missing rtrain-bench named" || bad "bench without rtrain-bench: $(cat "$tmp/err")"
expect_rc 0 "bench/story.py" -- "$py" "$src/bench/story.py" --rtrain "$rtrain" \
  --server "$addr" --reps 1 --epochs 3 --explain --json "$tmp/story.json" --first-calls 3
for cfg in "one call per step" "one call per epoch" "one call for the run" \
           "auto steps per call" "PyTorch eager" "Keras, laptop CPU"; do
  grep -q "^$cfg" "$tmp/out" && ok "story.py row: $cfg" || bad "story.py row missing: $cfg"
done
has "$tmp/out" "K=1 RunSteps vs a bare Ping" "story.py: K=1 against Ping"
has "$tmp/out" "The cold run" "story.py: the waterfall"
if $py - "$tmp/story.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
names = [c["configuration"] for c in d["configurations"]]
assert names == ["one call per step", "one call per epoch", "one call for the run",
                 "auto steps per call"], names
assert all(c["p50_ms"] > 0 and c["calls"] > 0 for c in d["configurations"])
k1 = d["runsteps_k1_vs_ping"]
assert k1["ping_p50_us"] > 0 and abs(k1["ratio"] - k1["runsteps_k1_rtt_p50_us"] / k1["ping_p50_us"]) < 1e-9
assert d["first_call"]["rtrain"]["p50_us"] > 0
cold = [p["name"] for p in d["explain"]["phases: cold run"]]
assert cold[0] == "connect" and "CloseSession" in cold, cold
EOF
then ok "story.py --json"; else bad "story.py --json"; fi

# --- exit codes
expect_rc 2 "usage error" -- "$rtrain" fit --model x.json
expect_rc 2 "unknown command" -- "$rtrain" frobnicate
dead=$($py -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1]); s.close()")
expect_rc 3 "daemon down" -- "$rtrain" info --server "127.0.0.1:$dead"
grep -q "cannot connect to 127.0.0.1:$dead" "$tmp/err" && ok "down: message names the address" \
  || bad "down: message: $(cat "$tmp/err")"
expect_rc 3 "daemon down (fit)" -- "$rtrain" "${FIT[@]/$addr/127.0.0.1:$dead}"
expect_rc 4 "missing data file" -- "$rtrain" fit "${S[@]}" --model "$ex/model.json" \
  --data "$tmp/none.csv" --loss mse
printf '{"class_name": "Sequential", "config": {"layers": [{"class_name": "Bogus", "config": {"name": "b", "batch_input_shape": [null, 4]}}]}}' \
  >"$tmp/bad.json"
expect_rc 4 "model rejected by the daemon" -- "$rtrain" fit "${S[@]}" --model "$tmp/bad.json" \
  --data "$ex/train.csv" --loss mse
grep -qi "bogus" "$tmp/err" && ok "rejection names the layer" || bad "rejection message: $(cat "$tmp/err")"
expect_rc 5 "weights file not found" -- "$rtrain" eval "${S[@]}" --model "$ex/model.json" \
  --weights "$tmp/none.bin" --data "$ex/val.csv" --loss mse
expect_rc 6 "write error (predict --out /dev/full)" -- "$rtrain" predict "${S[@]}" \
  --model "$ex/model.json" --weights "$tmp/w.bin" --data "$ex/val_shuffled.csv" --out /dev/full
has "$tmp/err" "cannot write /dev/full" "the write error names the file"
# Weights are written beside the target and renamed over it: a FIFO (or a
# device) there is refused, not replaced.
mkfifo "$tmp/fifo"
for f in w.bin w.h5; do
  ln -s "$tmp/fifo" "$tmp/fifo_$f"
  expect_rc 4 "--save-weights onto a FIFO ($f)" -- "$rtrain" "${FIT[@]}" --epochs 1 \
    --save-weights "$tmp/fifo_$f"
  has "$tmp/err" "not a regular file" "the refusal says why ($f)"
done
[ -p "$tmp/fifo" ] && ok "the FIFO is left alone" || bad "--save-weights replaced a FIFO"

# --- SIGINT during fit: exit 130, the daemon keeps serving
"$rtrain" fit "${S[@]}" --model "$ex/model.json" --data "$ex/train_shuffled.csv" \
  --loss sparse_categorical_crossentropy --epochs 1000000 --no-progress \
  >"$tmp/long.out" 2>"$tmp/long.err" &
fpid=$!
for _ in $(seq 1 200); do
  grep -q '^Epoch 2/' "$tmp/long.err" && break
  sleep 0.05
done
kill -INT "$fpid"
wait "$fpid"
rc=$?
[ "$rc" -eq 130 ] && ok "SIGINT during fit: exit 130" || { bad "SIGINT: exit $rc"; cat "$tmp/long.err"; }
grep -q "interrupted" "$tmp/long.err" && ok "SIGINT message" || bad "SIGINT message: $(cat "$tmp/long.err")"
last=$(grep -c '^Epoch ' "$tmp/long.err")
[ "$last" -lt 1000000 ] && ok "fit stopped early ($last epochs)" || bad "fit ran to the end"
expect_rc 0 "daemon still serves after SIGINT" -- "$rtrain" ping "${S[@]}" --count 3

# --- conventions: global options before the command, per-command help with
# defaults, `-` for stdin/stdout, flags named in errors, progress on stderr
expect_rc 0 "global option before the command" -- "$rtrain" --server "$addr" info
grep -q "^server *$addr" "$tmp/out" && ok "info reached $addr" || bad "info: $(cat "$tmp/out")"
expect_rc 0 "global options with = before the command" -- "$rtrain" --server="$addr" --timeout 5 \
  ping --count 2
expect_rc 2 "unknown option before the command" -- "$rtrain" --frob info
expect_rc 2 "an option before a command it does not apply to" -- "$rtrain" --epochs 3 info
grep -q -- "--epochs does not apply" "$tmp/err" && ok "misplaced option named" \
  || bad "misplaced option: $(cat "$tmp/err")"
expect_rc 0 "fit --help" -- "$rtrain" fit --help
grep -q "^usage: rtrain fit" "$tmp/out" && ! grep -q "^Commands:" "$tmp/out" \
  && ok "fit --help is fit's page" || bad "fit --help: $(head -3 "$tmp/out")"
grep -q -- "--epochs N .*(default 1)" "$tmp/out" && grep -q -- "--batch-size B .*(default 32)" "$tmp/out" \
  && grep -q -- "--loss L .*required" "$tmp/out" && grep -q -- "--early-stopping PATIENCE" "$tmp/out" \
  && ok "fit --help lists defaults" || bad "fit --help defaults: $(cat "$tmp/out")"
expect_rc 0 "predict --help" -- "$rtrain" predict --help
grep -q -- "--out P.csv|P.npy|- " "$tmp/out" && ! grep -q -- "--epochs" "$tmp/out" \
  && ok "predict --help lists predict's options" || bad "predict --help: $(cat "$tmp/out")"
expect_rc 2 "fit without --loss" -- "$rtrain" fit "${S[@]}" --model "$ex/model.json" \
  --data "$ex/train.csv"
grep -q -- "--loss is required" "$tmp/err" && ok "missing --loss named" || bad "no --loss: $(cat "$tmp/err")"
expect_rc 2 "eval without --loss" -- "$rtrain" eval "${S[@]}" --model "$ex/model.json" \
  --weights "$tmp/w.bin" --data "$ex/val.csv"
mkdir -p "$tmp/dir.csv"
expect_rc 4 "a directory named x.csv" -- "$rtrain" fit "${S[@]}" --model "$ex/model.json" \
  --data "$tmp/dir.csv" --loss mse
grep -q -- "--data: .*dir.csv is a directory" "$tmp/err" && ok "directory named with its flag" \
  || bad "directory message: $(cat "$tmp/err")"
expect_rc 4 "--out is a directory" -- "$rtrain" predict "${S[@]}" --model "$ex/model.json" \
  --weights "$tmp/w.bin" --data "$ex/val.csv" --out "$tmp/dir.csv"
printf 'f1,f2,f3,f4,label\n5.1,3.5,1.4,0.2,0\n6.2,2.9,4.3,1.3,1\n' >"$tmp/hdr.csv"
expect_rc 4 "CSV with a header line" -- "$rtrain" fit "${S[@]}" --model "$ex/model.json" \
  --data "$tmp/hdr.csv" --loss sparse_categorical_crossentropy
grep -q -- "give --csv-header" "$tmp/err" && ! grep -q "csv_header" "$tmp/err" \
  && ok "header error names --csv-header" || bad "header message: $(cat "$tmp/err")"
expect_rc 0 "CSV with --csv-header" -- "$rtrain" fit "${S[@]}" --model "$ex/model.json" \
  --data "$tmp/hdr.csv" --loss sparse_categorical_crossentropy --csv-header --batch-size 2
"$rtrain" predict "${S[@]}" --model - --weights "$tmp/w.bin" --data "$ex/val_shuffled.csv" \
  --out - <"$ex/model.json" 2>"$tmp/err" | head -3 >"$tmp/head.out"
prc=${PIPESTATUS[0]}
[ "$prc" -eq 0 ] && [ "$(wc -l <"$tmp/head.out")" -eq 3 ] \
  && [ "$(head -1 "$tmp/head.out" | tr ',' '\n' | wc -l)" -eq 3 ] \
  && ok "predict --model - --out - | head" || bad "predict to a pipe: exit $prc, $(cat "$tmp/head.out" "$tmp/err")"
grep -q "^predictions: stdout (45 x 3)" "$tmp/err" && ok "predict's note on stderr" \
  || bad "predict note: $(cat "$tmp/err")"
"$rtrain" predict "${S[@]}" --model "$ex/model.json" --weights "$tmp/w.bin" \
  --data "$ex/val_shuffled.csv" --out - >"$tmp/all.csv" 2>/dev/null
cmp -s "$tmp/all.csv" "$tmp/p.csv" && ok "--out - equals the CSV file" || bad "--out - differs"
expect_rc 0 "fit: results on stdout, progress on stderr" -- "$rtrain" "${FIT[@]}" --epochs 3 --progress
[ "$(wc -l <"$tmp/out")" -eq 1 ] && grep -q "^final: " "$tmp/out" && grep -q $'\r' "$tmp/err" \
  && grep -q "^program: " "$tmp/err" && ok "stdout holds the result line only" \
  || bad "fit streams: $(cat "$tmp/out")"

# --- callbacks: --early-stopping (Keras' arithmetic, checked from the CSV
# log), --csv-log, --checkpoint
expect_rc 0 "fit --early-stopping 3 --csv-log --checkpoint" -- "$rtrain" fit "${S[@]}" \
  --model "$ex/model.json" --data "$ex/train_shuffled.csv" --val "$ex/val_shuffled.csv" \
  --loss sparse_categorical_crossentropy --optimizer adam --lr 0.05 --epochs 300 --seed 1 \
  --early-stopping 3 --csv-log "$tmp/log.csv" --checkpoint "$tmp/ck.bin" \
  --save-weights "$tmp/last.bin"
if $py - "$tmp/log.csv" "$tmp/err" "$tmp/out" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert list(rows[0]) == ["epoch", "accuracy", "loss", "val_accuracy", "val_loss"], list(rows[0])
assert [int(r["epoch"]) for r in rows] == list(range(len(rows)))
# Keras' EarlyStopping: mode min, min_delta 0, patience 3, no baseline.
best, wait, stop = float("inf"), 0, None
for r in rows:
    ep, cur = int(r["epoch"]), float(r["val_loss"])
    wait += 1
    if cur < best:
        best, wait = cur, 0
        continue  # keras/src/callbacks/early_stopping.py: no stop on an improvement
    if wait >= 3 and ep > 0:
        stop = ep
        break
assert stop is not None and stop == len(rows) - 1, (stop, len(rows))
err = open(sys.argv[2]).read()
assert "Epoch %d: early stopping" % (stop + 1) in err, err[-300:]
assert " - epochs %d - " % (stop + 1) in open(sys.argv[3]).read()
EOF
then ok "early stopping where Keras stops"; else bad "early stopping arithmetic"; fi
cmp -s "$tmp/ck.bin" "$tmp/last.bin" && ok "--checkpoint holds the last epoch's weights" \
  || bad "--checkpoint differs from --save-weights"

# --- Keras' HDF5 weights layout: written by fit, read by eval/predict and
# --load-weights, interchangeable with a file in Keras' own layout
expect_rc 0 "fit --save-weights W.h5" -- "$rtrain" "${FIT[@]}" --epochs 5 --save-weights "$tmp/k.h5" \
  --checkpoint "$tmp/k.bin"
if $py - "$tmp/k.h5" <<'EOF'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
dec = lambda v: v.decode() if hasattr(v, "decode") else v
assert dec(f.attrs["backend"]) == "tensorflow" and dec(f.attrs["keras_version"]).startswith("2.")
assert [dec(n) for n in f.attrs["layer_names"]] == ["dense", "dense_1"]
assert [dec(n) for n in f["dense"].attrs["weight_names"]] == ["dense/kernel:0", "dense/bias:0"]
assert f["dense/dense/kernel:0"].shape == (4, 32) and f["dense/dense/kernel:0"].dtype == np.float32
assert f["dense_1/dense_1/bias:0"].shape == (3,)
tl = f["top_level_model_weights"].attrs["weight_names"]  # Keras 2.11: np.asarray([])
assert tl.shape == (0,) and tl.dtype == np.float64, (tl.shape, tl.dtype)
EOF
then ok "W.h5 in Keras' layout"; else bad "W.h5 layout"; fi
# --- --sample-weights: Keras' sample_weight from an .npy. All zeros: the
# loss is 0 and no weight moves (Adam's step is 0 / (0 + eps)).
n_train=$(grep -c . "$ex/train_shuffled.csv")
$py -c "import numpy as np, sys; np.save(sys.argv[1], np.zeros(int(sys.argv[2]), np.float32)); np.save(sys.argv[3], np.ones(3, np.float32))" \
  "$tmp/zero_w.npy" "$n_train" "$tmp/short_w.npy"
expect_rc 0 "fit --sample-weights zeros" -- "$rtrain" "${FIT[@]}" --epochs 2 \
  --load-weights "$tmp/k.h5" --sample-weights "$tmp/zero_w.npy" --save-weights "$tmp/zw.h5"
has "$tmp/out" "final: loss 0.0000 " "zero sample weights: loss 0"
if $py - "$tmp/k.h5" "$tmp/zw.h5" <<'EOF'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
for n in ["dense/dense/kernel:0", "dense/dense/bias:0", "dense_1/dense_1/kernel:0"]:
    assert np.array_equal(a[n][()], b[n][()]), n
EOF
then ok "zero sample weights: no weight moved"; else bad "zero sample weights moved the weights"; fi
expect_rc 4 "--sample-weights of the wrong length" -- "$rtrain" "${FIT[@]}" --epochs 1 \
  --sample-weights "$tmp/short_w.npy"
has "$tmp/err" "sample weights" "the refusal names the sample weights"
mkdir -p "$tmp/imgs"
expect_rc 2 "--sample-weights with an image folder" -- "$rtrain" fit "${S[@]}" \
  --model "$ex/model.json" --data "$tmp/imgs" --loss sparse_categorical_crossentropy \
  --sample-weights "$tmp/zero_w.npy"
has "$tmp/err" "--sample-weights goes with" "the usage error names --sample-weights"
expect_rc 0 "eval --weights W.h5" -- "$rtrain" eval "${S[@]}" --model "$ex/model.json" \
  --weights "$tmp/k.h5" --data "$ex/val_shuffled.csv" --loss sparse_categorical_crossentropy
cp "$tmp/out" "$tmp/eval_h5.out"
expect_rc 0 "eval --weights W.bin (same run)" -- "$rtrain" eval "${S[@]}" --model "$ex/model.json" \
  --weights "$tmp/k.bin" --data "$ex/val_shuffled.csv" --loss sparse_categorical_crossentropy
cmp -s "$tmp/out" "$tmp/eval_h5.out" && ok "h5 and RTWTS weights evaluate the same" \
  || bad "h5 eval '$(cat "$tmp/eval_h5.out")' != '$(cat "$tmp/out")'"
# A file as Keras writes it: its own layer names, a layer without weights
# (h5py stores the empty weight_names as an empty float array).
$py - "$tmp/keras.h5" "$tmp/keras_w.npz" <<'EOF'
import sys, h5py, numpy as np
rng = np.random.RandomState(5)
w = [rng.standard_normal(s).astype(np.float32) * 0.5 for s in [(4, 32), (32,), (32, 3), (3,)]]
np.savez(sys.argv[2], *w)
with h5py.File(sys.argv[1], "w") as f:
    f.attrs["backend"] = b"tensorflow"
    f.attrs["keras_version"] = b"2.11.0"
    f.attrs["layer_names"] = np.asarray([b"dense_4", b"dropout", b"dense_5"])
    for name, ws in [("dense_4", w[:2]), ("dropout", []), ("dense_5", w[2:])]:
        g = f.create_group(name)
        names = [("%s/%s:0" % (name, s)).encode() for s in ("kernel", "bias")][:len(ws)]
        g.attrs["weight_names"] = np.asarray(names)
        for n, v in zip(names, ws):
            d = g.create_dataset(n.decode(), v.shape, dtype=v.dtype)
            d[()] = v
EOF
"$rtrain" predict "${S[@]}" --model "$ex/model.json" --weights "$tmp/keras.h5" \
  --data "$ex/val_shuffled.csv" --out - >"$tmp/kp.csv" 2>"$tmp/err"
if $py - "$tmp/kp.csv" "$tmp/keras_w.npz" "$ex/val_shuffled.csv" <<'EOF'
import sys, numpy as np
p = np.loadtxt(sys.argv[1], delimiter=",")
w = np.load(sys.argv[2]); w1, b1, w2, b2 = (w["arr_%d" % i].astype(np.float64) for i in range(4))
x = np.loadtxt(sys.argv[3], delimiter=",")[:, :4]
z = np.maximum(x @ w1 + b1, 0) @ w2 + b2
e = np.exp(z - z.max(1, keepdims=True)); e /= e.sum(1, keepdims=True)
assert p.shape == (45, 3) and np.allclose(p, e, atol=1e-5), np.abs(p - e).max()
EOF
then ok "predict with a Keras-written .h5 matches NumPy"; else bad "Keras .h5 predict: $(cat "$tmp/err")"; fi
expect_rc 0 "fit --load-weights Keras .h5 (lr 1e-12: the weights stay)" -- "$rtrain" fit "${S[@]}" \
  --model "$ex/model.json" --data "$ex/train_shuffled.csv" --loss sparse_categorical_crossentropy \
  --optimizer sgd --lr 1e-12 --epochs 1 --load-weights "$tmp/keras.h5" --save-weights "$tmp/lw.h5"
if $py - "$tmp/lw.h5" "$tmp/keras_w.npz" <<'EOF'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
got = [f["dense/dense/kernel:0"][()], f["dense/dense/bias:0"][()],
       f["dense_1/dense_1/kernel:0"][()], f["dense_1/dense_1/bias:0"][()]]
w = np.load(sys.argv[2])
for i, g in enumerate(got):
    assert np.allclose(g, w["arr_%d" % i], atol=1e-6), i
EOF
then ok "--load-weights took the Keras file"; else bad "--load-weights"; fi
$py - "$tmp/one.h5" <<'EOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f.attrs["layer_names"] = np.asarray([b"dense"])
    g = f.create_group("dense")
    g.attrs["weight_names"] = np.asarray([b"dense/kernel:0", b"dense/bias:0"])
    g.create_dataset("dense/kernel:0", data=np.zeros((4, 32), np.float32))
    g.create_dataset("dense/bias:0", data=np.zeros(32, np.float32))
EOF
expect_rc 4 "an .h5 for another model" -- "$rtrain" eval "${S[@]}" --model "$ex/model.json" \
  --weights "$tmp/one.h5" --data "$ex/val.csv" --loss sparse_categorical_crossentropy
grep -q -- "--weights: .*holds weights for 1 layers but the model has 2" "$tmp/err" \
  && ok "layer count mismatch named" || bad "mismatch message: $(cat "$tmp/err")"
printf 'not hdf5' >"$tmp/fake.h5"
expect_rc 4 "an .h5 that is not HDF5" -- "$rtrain" eval "${S[@]}" --model "$ex/model.json" \
  --weights "$tmp/fake.h5" --data "$ex/val.csv" --loss sparse_categorical_crossentropy
expect_rc 5 "--load-weights file not found" -- "$rtrain" fit "${S[@]}" --model "$ex/model.json" \
  --data "$ex/train.csv" --loss mse --load-weights "$tmp/none.h5"

echo "$checks checks, $fails failed"
[ "$fails" -eq 0 ]
