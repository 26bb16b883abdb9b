/* cli_args.c - `rtrain` command line: commands, options, usage, exit codes.
 * One option table; each option lists the commands it applies to, so a
 * misplaced option is a usage error rather than silently ignored. */
#include "cli.h"

#include "rt_relay.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define B(c) (1u << (c))
#define CLI_STR_(x) #x
#define CLI_STR(x) CLI_STR_(x)
#define TRAIN (B(CLI_FIT) | B(CLI_EVAL) | B(CLI_PREDICT) | B(CLI_EXPORT))
#define CKPT (B(CLI_CKPT_PULL) | B(CLI_CKPT_PUSH))
#define NET (B(CLI_INFO) | B(CLI_PING) | TRAIN | B(CLI_BENCH_OVERHEAD) | B(CLI_BENCH_STORY) | CKPT)

enum {
    O_SERVER = 1000, O_TIMEOUT, O_MODEL, O_WEIGHTS, O_SAVE_WEIGHTS, O_DATA,
    O_LABELS, O_VAL, O_VAL_LABELS, O_OUT, O_EPOCHS, O_BATCH, O_SPC, O_SPE,
    O_LOSS, O_OPT, O_LR, O_LABEL_COL, O_CSV_HEADER, O_SEED, O_NO_SHUFFLE, O_SYNC_BN,
    O_NO_NORMALIZE, O_TIMINGS, O_TRACE, O_SIZE, O_COUNT, O_MAX_K, O_REPS,
    O_CSV, O_PLOT, O_PROGRESS, O_NO_PROGRESS, O_IN_FLIGHT, O_HELP,
    O_FEATURES, O_LABEL_KEY, O_IMAGE_SIZE, O_CHANNELS, O_RESIZE, O_MEAN, O_STD, O_AUGMENT,
    O_ON_BAD, O_STORAGE, O_SHUFFLE_BUF,
    O_TLS_CA, O_TLS_CERT, O_TLS_KEY, O_TOKEN_FILE,
    O_EARLY_STOP, O_CHECKPOINT, O_CSV_LOG, O_LOAD_WEIGHTS, O_SAMPLE_WEIGHTS,
    O_RTT, O_JITTER, O_BANDWIDTH, O_METRICS, O_LABEL_COLS, O_ONNX, O_ONNX_OUTPUT,
    O_REATTACH, O_SAVE_STATE, O_LOAD_STATE, O_PROGRAM, O_SESSION_TOKEN,
    O_INPUT_SHAPE, O_CKPT_STEPS, O_CKPT_S,
    O_FROM_LOGITS, O_DATA_LAYOUT, O_LOSS_CHECK, O_REDUCTION, O_LABEL_SMOOTHING,
    O_IGNORE_INDEX, O_CLASS_WEIGHT, O_POS_WEIGHT, O_LOSS_BETA, O_EXPLAIN,
};

typedef struct opt_def {
    const char *name;
    int has_arg;
    int id;
    unsigned cmds;
} opt_def;

static const opt_def defs[] = {
    {"server", 1, O_SERVER, NET},
    {"timeout", 1, O_TIMEOUT, NET},
    {"tls-ca", 1, O_TLS_CA, NET},
    {"tls-cert", 1, O_TLS_CERT, NET},
    {"tls-key", 1, O_TLS_KEY, NET},
    {"token-file", 1, O_TOKEN_FILE, NET},
    {"model", 1, O_MODEL, TRAIN},
    {"weights", 1, O_WEIGHTS, B(CLI_EVAL) | B(CLI_PREDICT) | B(CLI_EXPORT)},
    {"onnx", 1, O_ONNX, B(CLI_FIT) | B(CLI_EXPORT)},
    {"onnx-output", 1, O_ONNX_OUTPUT, TRAIN},
    {"save-weights", 1, O_SAVE_WEIGHTS, B(CLI_FIT)},
    {"data", 1, O_DATA, TRAIN | B(CLI_BENCH_STORY)},
    {"labels", 1, O_LABELS, TRAIN},
    {"val", 1, O_VAL, B(CLI_FIT) | B(CLI_BENCH_STORY)},
    {"val-labels", 1, O_VAL_LABELS, B(CLI_FIT)},
    {"out", 1, O_OUT, B(CLI_PREDICT)},
    {"epochs", 1, O_EPOCHS, B(CLI_FIT) | B(CLI_BENCH_STORY)},
    {"batch-size", 1, O_BATCH, TRAIN},
    {"steps-per-call", 1, O_SPC, B(CLI_FIT)},
    {"steps-per-epoch", 1, O_SPE, B(CLI_FIT)},
    {"in-flight", 1, O_IN_FLIGHT, B(CLI_FIT)},
    {"loss", 1, O_LOSS, TRAIN},
    {"metrics", 1, O_METRICS, TRAIN},
    {"optimizer", 1, O_OPT, TRAIN},
    {"lr", 1, O_LR, TRAIN},
    {"label-column", 1, O_LABEL_COL, TRAIN},
    {"label-columns", 1, O_LABEL_COLS, TRAIN},
    {"input-shape", 1, O_INPUT_SHAPE, TRAIN},
    {"csv-header", 0, O_CSV_HEADER, TRAIN},
    {"seed", 1, O_SEED, TRAIN},
    {"no-shuffle", 0, O_NO_SHUFFLE, TRAIN},
    {"sync-batchnorm", 0, O_SYNC_BN, TRAIN},
    {"no-normalize", 0, O_NO_NORMALIZE, TRAIN},
    {"timings", 0, O_TIMINGS, NET},
    {"trace", 1, O_TRACE, B(CLI_FIT) | B(CLI_EVAL) | B(CLI_PREDICT) |
                          B(CLI_BENCH_OVERHEAD) | B(CLI_BENCH_STORY) | B(CLI_PING)},
    {"size", 1, O_SIZE, B(CLI_PING)},
    {"count", 1, O_COUNT, B(CLI_PING)},
    {"max-k", 1, O_MAX_K, B(CLI_BENCH_OVERHEAD)},
    {"reps", 1, O_REPS, B(CLI_BENCH_OVERHEAD) | B(CLI_BENCH_STORY)},
    {"csv", 1, O_CSV, B(CLI_BENCH_OVERHEAD) | B(CLI_BENCH_STORY)},
    {"plot", 1, O_PLOT, B(CLI_BENCH_OVERHEAD)},
    {"explain", 0, O_EXPLAIN, B(CLI_BENCH_STORY)},
    {"progress", 0, O_PROGRESS, B(CLI_FIT)},
    {"no-progress", 0, O_NO_PROGRESS, B(CLI_FIT)},
    {"help", 0, O_HELP, ~0u},
    {"features", 1, O_FEATURES, TRAIN},
    {"label", 1, O_LABEL_KEY, TRAIN},
    {"image-size", 1, O_IMAGE_SIZE, TRAIN},
    {"channels", 1, O_CHANNELS, TRAIN},
    {"resize", 1, O_RESIZE, TRAIN},
    {"mean", 1, O_MEAN, TRAIN},
    {"std", 1, O_STD, TRAIN},
    {"augment", 1, O_AUGMENT, B(CLI_FIT)},
    {"on-bad-record", 1, O_ON_BAD, TRAIN},
    {"storage", 1, O_STORAGE, TRAIN},
    {"shuffle-buffer", 1, O_SHUFFLE_BUF, TRAIN},
    {"early-stopping", 1, O_EARLY_STOP, B(CLI_FIT)},
    {"checkpoint", 1, O_CHECKPOINT, B(CLI_FIT)},
    {"csv-log", 1, O_CSV_LOG, B(CLI_FIT)},
    {"load-weights", 1, O_LOAD_WEIGHTS, B(CLI_FIT)},
    {"sample-weights", 1, O_SAMPLE_WEIGHTS, B(CLI_FIT)},
    {"rtt", 1, O_RTT, B(CLI_BENCH_OVERHEAD) | B(CLI_BENCH_STORY)},
    {"jitter", 1, O_JITTER, B(CLI_BENCH_OVERHEAD) | B(CLI_BENCH_STORY)},
    {"bandwidth", 1, O_BANDWIDTH, B(CLI_BENCH_OVERHEAD) | B(CLI_BENCH_STORY)},
    {"reattach-s", 1, O_REATTACH, B(CLI_FIT)},
    {"checkpoint-every-steps", 1, O_CKPT_STEPS, B(CLI_FIT)},
    {"checkpoint-every-s", 1, O_CKPT_S, B(CLI_FIT)},
    {"save-state", 1, O_SAVE_STATE, B(CLI_FIT)},
    {"load-state", 1, O_LOAD_STATE, B(CLI_FIT)},
    {"program", 1, O_PROGRAM, B(CLI_CKPT_PULL)},
    {"session-token", 1, O_SESSION_TOKEN, B(CLI_CKPT_PULL)},
    {"from-logits", 0, O_FROM_LOGITS, TRAIN},
    {"data-layout", 1, O_DATA_LAYOUT, TRAIN},
    {"loss-check", 1, O_LOSS_CHECK, TRAIN},
    {"reduction", 1, O_REDUCTION, TRAIN},
    {"label-smoothing", 1, O_LABEL_SMOOTHING, TRAIN},
    {"ignore-index", 1, O_IGNORE_INDEX, TRAIN},
    {"class-weight", 1, O_CLASS_WEIGHT, TRAIN},
    {"pos-weight", 1, O_POS_WEIGHT, TRAIN},
    {"loss-beta", 1, O_LOSS_BETA, TRAIN},
};
#define N_DEFS (sizeof defs / sizeof defs[0])

/* `rtrain CMD --help`: what each option takes and its default. Every
 * option has an entry (tests/cli/help_flags.sh checks the help text). */
static const struct {
    const char *name, *arg, *help;
} helps[] = {
    {"server", "HOST:PORT", "the daemon (default $RTRAIN_SERVER or " RT_DEFAULT_SERVER ")"},
    {"timeout", "SECONDS", "deadline of each call (default 60; fit's training calls: none)"},
    {"tls-ca", "FILE", "talk TLS, trusting the daemon's certificate if this PEM CA signed it "
                       "(default $RTRAIN_TLS_CA)"},
    {"tls-cert", "FILE", "PEM client certificate for mTLS (default $RTRAIN_TLS_CERT)"},
    {"tls-key", "FILE", "its PEM private key (default $RTRAIN_TLS_KEY)"},
    {"token-file", "FILE", "bearer token on the file's first line (default $RTRAIN_TOKEN, the "
                           "token itself, or $RTRAIN_TOKEN_FILE)"},
    {"model", "M.json|M.onnx", "Keras model JSON (model.to_json()), or an ONNX model "
                              "(*.onnx, torch.onnx.export); - reads stdin"},
    {"onnx", "OUT.onnx", "write the --model ONNX file back with the trained weights"},
    {"onnx-output", "NAME", "the ONNX graph output to train (default: its only one)"},
    {"weights", "W.bin|W.h5", "weights to load (RTWTS001, or Keras' HDF5 layout)"},
    {"save-weights", "W.bin|W.h5", "write the trained weights (RTWTS001, or Keras' HDF5 "
                                   "layout by the .h5 name)"},
    {"load-weights", "W.bin|W.h5", "start from these weights (RTWTS001 or Keras' HDF5)"},
    {"data", "D", "data set: .csv, .npy or IDX (with --labels), .tfrecord (with --features), "
                  "a folder of class folders of images"},
    {"labels", "L", "labels of .npy or IDX --data"},
    {"val", "V", "validation data, evaluated after every epoch"},
    {"val-labels", "L", "labels of .npy or IDX --val"},
    {"out", "P.csv|P.npy|-", "predictions; - writes CSV to stdout"},
    {"epochs", "N", "epochs (default 1)"},
    {"batch-size", "B", "samples per step (default 32)"},
    {"steps-per-call", "K|auto|stream", "RunSteps calls of K steps, pipelined (default auto: "
                                        "K from the round trip and step time; stream or 0: "
                                        "one Fit stream)"},
    {"steps-per-epoch", "S", "steps per epoch (default ceil(samples / B))"},
    {"in-flight", "W", "RunSteps calls in flight (default " CLI_STR(RT_TRAIN_WINDOW) ")"},
    {"loss", "L", "loss (required unless the model JSON saved one): Keras' "
                  "sparse_categorical_crossentropy, mse, ... or PyTorch's cross_entropy, "
                  "nll_loss, bce_with_logits, binary_cross_entropy, mse_loss, l1_loss, "
                  "smooth_l1_loss, huber_loss"},
    {"metrics", "M,M", "Keras metrics besides accuracy, e.g. auc,precision,recall,mae"},
    {"optimizer", "O", "sgd, adam, adamw or rmsprop (default adam)"},
    {"lr", "X", "learning rate (default: the optimizer's, Keras')"},
    {"label-column", "C", "CSV label column (default -1 = last)"},
    {"label-columns", "A:B", "CSV label columns A..B (0-based, inclusive): (n, k) labels"},
    {"input-shape", "D1xD2..", "per-sample input dims for a Keras model's null dims "
                               "(default: the .npy features' shape, or for one null dim "
                               "a CSV row's feature count)"},
    {"csv-header", NULL, "skip the CSV's first line"},
    {"seed", "S", "initialisation and shuffling seed (default 0)"},
    {"no-shuffle", NULL, "keep the data order (default: shuffle every epoch)"},
    {"sync-batchnorm", NULL, "MPI replicas: BatchNorm uses the global batch's statistics"},
    {"no-normalize", NULL, "IDX: keep 0..255 (default: divide by 255)"},
    {"timings", NULL, "print each call's time breakdown (us)"},
    {"trace", "FILE", "write the calls as Chrome trace-event JSON"},
    {"size", "N", "payload bytes each way (default 0)"},
    {"count", "N", "round trips (default 100)"},
    {"max-k", "K", "largest steps per call (default 1024)"},
    {"reps", "N", "repetitions"},
    {"csv", "FILE", "results as CSV"},
    {"plot", "FILE", "an SVG plot"},
    {"explain", NULL, "print a cold run (first, before the reps) and a median warm run of "
                      "\"one call for the run\" as a waterfall of phases: client, wire and "
                      "server time each (with --trace, also in the trace)"},
    {"progress", NULL, "force the progress bar on stderr (default: on a TTY)"},
    {"no-progress", NULL, "one line per epoch on stderr"},
    {"early-stopping", "PATIENCE", "stop after PATIENCE epochs without a lower val_loss "
                                   "(loss without --val), Keras' EarlyStopping"},
    {"checkpoint", "W.bin|W.h5", "write the weights after every epoch"},
    {"csv-log", "FILE", "one CSV row per epoch (Keras' CSVLogger columns)"},
    {"sample-weights", "W.npy", "one loss weight >= 0 per --data sample (Keras' "
                                "sample_weight; default: none)"},
    {"reattach-s", "S", "when the daemon is unavailable, retry with backoff for up to S s, "
                        "then resume exactly (default 300; 0 = off)"},
    {"checkpoint-every-steps", "N", "durable daemon: a checkpoint every N steps of this fit "
                                    "(default: the daemon's; without a K, one Fit stream)"},
    {"checkpoint-every-s", "T", "durable daemon: a checkpoint every T s of this fit "
                                "(default: the daemon's)"},
    {"save-state", "FILE", "after training, the full training state (weights, optimizer, "
                           "cursor) into FILE"},
    {"load-state", "FILE", "resume from a saved state (any daemon) instead of fresh weights"},
    {"features", "KEY:KIND[SHAPE],..", "TFRecord: the tf.train.Example features read as x "
                                       "(KIND int64, float, jpeg, png or image; SHAPE [N] or "
                                       "[NxM]; @KEY: a SequenceExample feature list)"},
    {"label", "KEY", "TFRecord: the label feature (default 'label')"},
    {"image-size", "HxW", "images: the size they are resized to (default 256x256)"},
    {"channels", "1|3", "images: gray or RGB (default 3)"},
    {"resize", "auto|bilinear|area", "images: the resize filter (default auto: area when both "
                                     "sides shrink, else bilinear)"},
    {"mean", "M[,M,M]", "images: (pixel / 255 - mean) / std per channel (default 0)"},
    {"std", "S[,S,S]", "images: see --mean (default 1)"},
    {"augment", "flip,crop=P,..", "training images: random flip, crop=PIXELS, brightness=X, "
                                  "contrast=X (default none)"},
    {"on-bad-record", "fail|skip", "TFRecord and images: a bad record fails the upload, naming "
                                   "it, or is left out and counted (default fail)"},
    {"storage", "auto|memory|stream", "the daemon keeps the data in memory, or on its disk "
                                      "decoded per batch (stream); auto streams past the "
                                      "daemon's --stream-above (default auto)"},
    {"shuffle-buffer", "N", "streamed data: samples in the shuffle buffer, as tf.data's "
                            "shuffle(N) (default: the daemon's)"},
    {"rtt", "D", "run through a relay on loopback adding D/2 each way (2ms, 10ms, 50ms)"},
    {"jitter", "D", "with --rtt: each chunk's delay varies by +-D"},
    {"bandwidth", "R", "with --rtt: cap each direction at R (100mbit, 1gbit)"},
    {"program", "P", "the program whose state to pull"},
    {"session-token", "T", "the session's token (printed by fit and checkpoint push)"},
    {"from-logits", NULL, "the model outputs logits: Keras' crossentropy losses read them "
                          "(from_logits=True)"},
    {"data-layout", "NCHW|NHWC", "an ONNX 4-D input's data layout (default NCHW, the "
                                 "model's own; never guessed from the shape)"},
    {"loss-check", "on|off", "refuse a loss that does not fit the model's output, e.g. "
                             "probabilities read from a LogSoftmax (default on)"},
    {"reduction", "mean|sum", "PyTorch losses: the batch loss is the mean or the sum "
                              "(default mean)"},
    {"label-smoothing", "X", "cross_entropy: label smoothing in [0, 1] (default 0)"},
    {"ignore-index", "N", "cross_entropy, nll_loss: targets of class N are left out "
                          "(default -100)"},
    {"class-weight", "W,W,..", "cross_entropy, nll_loss: one weight per class (default "
                               "none)"},
    {"pos-weight", "W,W,..", "bce_with_logits: positive-class weight, one per class or "
                             "one (default none)"},
    {"loss-beta", "X", "smooth_l1_loss beta, huber_loss delta (default 1)"},
    {"help", NULL, "this text"},
};

int cli_is_onnx(const char *path)
{
    size_t n = strlen(path);
    return n > 5 && strcasecmp(path + n - 5, ".onnx") == 0;
}

const char *cli_cmd_name(cli_cmd c)
{
    switch (c) {
    case CLI_INFO: return "info";
    case CLI_PING: return "ping";
    case CLI_FIT: return "fit";
    case CLI_EVAL: return "eval";
    case CLI_PREDICT: return "predict";
    case CLI_EXPORT: return "export";
    case CLI_BENCH_OVERHEAD: return "bench overhead";
    case CLI_BENCH_STORY: return "bench story";
    case CLI_CKPT_PULL: return "checkpoint pull";
    case CLI_CKPT_PUSH: return "checkpoint push";
    case CLI_HELP: return "help";
    case CLI_VERSION: return "version";
    case CLI_NONE: break;
    }
    return "?";
}

void cli_usage(FILE *f)
{
    fputs(
"usage: rtrain [global options] COMMAND [options]; rtrain COMMAND --help\n"
"       lists a command's options with their defaults\n"
"\n"
"Commands:\n"
"  info                      the daemon's version, device, limits, ops\n"
"  ping [--size N] [--count N]\n"
"                            round trips with N-byte payloads; p50/p99\n"
"  fit --model M.json --data D [--val V] --epochs N --batch-size B\n"
"      [--steps-per-call K|auto|stream] [--in-flight W] [--steps-per-epoch S]\n"
"      [--loss L] [--optimizer O] [--lr X] [--label-column C] [--csv-header]\n"
"      [--label-columns A:B] [--metrics M,M] [--input-shape D1xD2..]\n"
"      [--seed S] [--no-shuffle] [--sync-batchnorm] [--save-weights W.bin]\n"
"      [--timings]\n"
"      [--trace out.json] [--early-stopping PATIENCE] [--checkpoint W.bin]\n"
"      [--csv-log log.csv] [--reattach-s S] [--save-state F] [--load-state F]\n"
"      [--checkpoint-every-steps N] [--checkpoint-every-s T]\n"
"                            train in RunSteps calls of K steps (never\n"
"                            across an epoch end), up to W calls in flight\n"
"                            (default " CLI_STR(RT_TRAIN_WINDOW) "), run in order; K = auto (the\n"
"                            default) picks K from the measured round trip\n"
"                            and step time (fixed cost <= 5%) and prints it;\n"
"                            K = stream (or 0): one Fit stream instead.\n"
"                            An epoch is ceil(samples / B) steps, or S\n"
"                            with --steps-per-epoch\n"
"                            --loss is required unless the model saved one\n"
"                            (compile_config); defaults: --epochs 1,\n"
"                            --batch-size 32, --optimizer adam\n"
"                            Callbacks: --early-stopping P, --checkpoint W,\n"
"                            --csv-log F; --sample-weights W.npy weighs each\n"
"                            sample's loss (Keras' sample_weight)\n"
"  eval --model M.json --weights W.bin --data D [--labels L] [--loss L]\n"
"  predict --model M.json --weights W.bin --data D --out P.csv|P.npy|-\n"
"  export --model M.onnx --weights W.bin --onnx OUT.onnx [--onnx-output NAME]\n"
"                            the ONNX model with these weights as its\n"
"                            initializers (fit --onnx OUT.onnx does it after\n"
"                            training); --model M.onnx: PyTorch's export,\n"
"                            trained from its own initial weights\n"
"  bench overhead [--max-k 1024] [--reps N] [--csv out.csv] [--plot out.svg]\n"
"                            per-call overhead of W-A vs steps per call K\n"
"  bench story [--reps N] [--epochs 20] [--data train.csv --val val.csv]\n"
"              [--explain]   the remote-TPU story's four configurations\n"
"                            (data: examples/iris/ from the current\n"
"                            directory); bench/story.py runs it beside\n"
"                            PyTorch eager\n"
"  checkpoint pull SESSION PATH --program P --session-token T\n"
"                            the program's full training state into PATH\n"
"  checkpoint push PATH      resume a pulled state on this daemon (a new\n"
"                            session); prints the session, token, program\n"
"  bench ... --rtt D [--jitter D] [--bandwidth R]\n"
"                            run the bench through a relay on loopback that\n"
"                            adds D/2 each way (2ms, 10ms, 50ms), +-jitter,\n"
"                            and caps each direction at R (100mbit, 1gbit)\n"
"\n"
"Data (--data, --labels, --val, --val-labels) by file name:\n"
"  *.csv                     numeric CSV; the label is --label-column C\n"
"                            (default -1 = last), --csv-header skips line 1\n"
"  *.npy                     features; labels in --labels y.npy\n"
"  *.idx, *-ubyte (.gz)      IDX images (divided by 255 unless\n"
"                            --no-normalize) and IDX labels in --labels\n"
"  *.tfrecord (.gz, .zlib), 'train-*.tfrecord' (shards by a glob)\n"
"                            tf.train.Example records read under\n"
"                            --features KEY:KIND[SHAPE],... (KIND int64,\n"
"                            float, jpeg, png or image; SHAPE [N] or [NxM];\n"
"                            @KEY: a SequenceExample feature list); the label\n"
"                            is --label KEY or the key 'label'\n"
"  DIR/                      JPEG/PNG files in class folders (Keras\n"
"                            image_dataset_from_directory layout)\n"
"  Images: --image-size HxW (default 256x256) --channels 1|3 --resize\n"
"  auto|bilinear|area --mean M[,M,M] --std S[,S,S]; training augmentation\n"
"  --augment flip,crop=PIXELS,brightness=X,contrast=X; --on-bad-record\n"
"  fail|skip (skip: bad records are left out and counted)\n"
"  Any data: --storage auto|memory|stream (stream: the daemon keeps the\n"
"  records or rows on its disk and decodes batches on worker threads; auto\n"
"  streams past its --stream-above)\n"
"  --shuffle-buffer N (streamed: samples in the shuffle buffer, as tf.data)\n"
"\n"
"Common options (before or after the command):\n"
"  --server HOST:PORT        default $RTRAIN_SERVER or " RT_DEFAULT_SERVER "\n"
"  --timeout SECONDS         deadline of each call (default 60; fit's Fit\n"
"                            stream and RunSteps calls have none unless\n"
"                            given)\n"
"  --tls-ca FILE             talk TLS, trusting the daemon's certificate if\n"
"                            this PEM CA signed it (default $RTRAIN_TLS_CA)\n"
"  --tls-cert FILE           client certificate for mTLS ($RTRAIN_TLS_CERT)\n"
"  --tls-key FILE            its private key ($RTRAIN_TLS_KEY)\n"
"  --token-file FILE         bearer token on the file's first line (default\n"
"                            $RTRAIN_TOKEN, the token itself, or\n"
"                            $RTRAIN_TOKEN_FILE)\n"
"  --timings                 print each call's time breakdown (us): queue,\n"
"                            decode, compile, execute, encode, server total,\n"
"                            client encode, round trip, client decode,\n"
"                            wire+framework = round trip - server total,\n"
"                            unattributed\n"
"  --trace FILE              write the calls as Chrome trace-event JSON\n"
"  --progress/--no-progress  force the progress bar on or off (default: on a\n"
"                            TTY); progress goes to stderr, results to stdout\n"
"  -                         as --model: stdin; as --out: stdout\n"
"\n"
"Weights files (--save-weights, --weights, --load-weights, --checkpoint):\n"
"  magic RTWTS001 (see rtrain.h), or Keras 2's HDF5 layout for a name ending\n"
"  in .h5 (what Keras' save_weights writes and load_weights reads)\n"
"\n"
"Exit codes:\n"
"  0 ok, 2 usage error, 3 cannot connect to the daemon, 4 invalid input or\n"
"  rejected by the daemon, 5 not found, 6 internal or other error,\n"
"  130 interrupted (SIGINT cancels a running fit at a step boundary)\n",
        f);
}

void cli_usage_cmd(FILE *f, cli_cmd c)
{
    fprintf(f, "usage: rtrain %s [options]\n\nOptions:\n", cli_cmd_name(c));
    for (size_t i = 0; i < N_DEFS; i++) {
        if (!(defs[i].cmds & B(c)))
            continue;
        const char *arg = NULL, *help = "";
        for (size_t j = 0; j < sizeof helps / sizeof helps[0]; j++)
            if (!strcmp(helps[j].name, defs[i].name)) {
                arg = helps[j].arg;
                help = helps[j].help;
            }
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", defs[i].name, arg ? " " : "", arg ? arg : "");
        fprintf(f, "  %-28s %s\n", left, help);
    }
    fputs("\nGlobal options (--server, --timeout, --timings) may also come before the\n"
          "command. Exit codes: 0 ok, 2 usage, 3 cannot connect, 4 invalid input,\n"
          "5 not found, 6 other, 130 interrupted. Progress goes to stderr, results\n"
          "to stdout.\n", f);
}

static int perr(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return -1;
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    if (!s || !*s)
        return -1;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
    if (!s || !*s)
        return -1;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static void defaults(cli_opts *o)
{
    memset(o, 0, sizeof *o);
    o->timeout_s = -1;
    o->lr = -1;
    o->label_column = -1;
    o->label_first = o->label_last = -1;
    o->seed = -1;
    o->batch_size = -1;
    o->epochs = -1;
    o->size = 0;
    o->count = 100;
    o->max_k = 1024;
    o->reps = -1;
    o->progress = -1;
    o->early_stopping = -1;
    o->reattach_s = -1;
    o->steps_per_call = CLI_SPC_AUTO; /* pipelined RunSteps, K chosen as it runs */
    o->label_smoothing = -1;
    o->loss_beta = -1;
}

/* --class-weight/--pos-weight W,W,...: finite values >= 0 into out */
static int parse_floats(const char *s, float *out, int max)
{
    int n = 0;
    while (s && *s) {
        if (n == max)
            return -1;
        errno = 0;
        char *end;
        double v = strtod(s, &end);
        if (end == s || errno || !isfinite(v) || v < 0 || v > 3.4e38)
            return -1;
        out[n++] = (float)v;
        if (*end == ',')
            end++;
        else if (*end)
            return -1;
        s = end;
    }
    return n;
}

/* Whether the model file saved its loss (Keras 3 compile_config, Keras 2
 * training_config), which the daemon then uses. */
static int model_has_loss(const char *path)
{
    size_t len;
    char *js = path ? cli_read_file(path, &len) : NULL;
    if (!js)
        return 0;
    const char *cc = strstr(js, "\"compile_config\"");
    if (!cc)
        cc = strstr(js, "\"training_config\"");
    int has = cc && strstr(cc, "\"loss\"") != NULL;
    free(js);
    return has;
}

static int parse_ordered(int argc, char **argv, cli_opts *o, char *err, size_t errlen)
{
    defaults(o);
    if (errlen)
        err[0] = 0;
    if (argc < 2)
        return perr(err, errlen, "no command given (try rtrain --help)");
    const char *c = argv[1];
    int first = 2;
    if (!strcmp(c, "--help") || !strcmp(c, "-h") || !strcmp(c, "help")) {
        o->cmd = CLI_HELP;
        return 0;
    }
    if (!strcmp(c, "--version") || !strcmp(c, "version")) {
        o->cmd = CLI_VERSION;
        return 0;
    }
    if (!strcmp(c, "info")) o->cmd = CLI_INFO;
    else if (!strcmp(c, "ping")) o->cmd = CLI_PING;
    else if (!strcmp(c, "fit")) o->cmd = CLI_FIT;
    else if (!strcmp(c, "eval") || !strcmp(c, "evaluate")) o->cmd = CLI_EVAL;
    else if (!strcmp(c, "predict")) o->cmd = CLI_PREDICT;
    else if (!strcmp(c, "export")) o->cmd = CLI_EXPORT;
    else if (!strcmp(c, "bench")) {
        if (argc < 3)
            return perr(err, errlen, "bench: which one? overhead or story");
        if (!strcmp(argv[2], "overhead")) o->cmd = CLI_BENCH_OVERHEAD;
        else if (!strcmp(argv[2], "story")) o->cmd = CLI_BENCH_STORY;
        else return perr(err, errlen, "bench: unknown benchmark '%s' "
                         "(overhead or story)", argv[2]);
        first = 3;
    } else if (!strcmp(c, "checkpoint")) {
        if (argc < 3 || (strcmp(argv[2], "pull") && strcmp(argv[2], "push")))
            return perr(err, errlen, "checkpoint: pull or push?");
        o->cmd = !strcmp(argv[2], "pull") ? CLI_CKPT_PULL : CLI_CKPT_PUSH;
        first = 3;
    } else {
        return perr(err, errlen, "unknown command '%s' (try rtrain --help)", c);
    }

    struct option lopts[N_DEFS + 1];
    for (size_t i = 0; i < N_DEFS; i++) {
        lopts[i].name = defs[i].name;
        lopts[i].has_arg = defs[i].has_arg ? required_argument : no_argument;
        lopts[i].flag = NULL;
        lopts[i].val = defs[i].id;
    }
    memset(&lopts[N_DEFS], 0, sizeof lopts[N_DEFS]);

    /* getopt_long over the options after the command words. optind = 0
     * makes glibc reinitialise, so cli_parse can run many times (tests). */
    int sub_argc = argc - first + 1;
    char **sub_argv = argv + first - 1;
    optind = 0;
    opterr = 0;
    /* checkpoint's SESSION PATH may come before or after the options */
    int npos = o->cmd == CLI_CKPT_PULL ? 2 : o->cmd == CLI_CKPT_PUSH ? 1 : 0;
    for (;;) {
        int li = -1;
        int id = getopt_long(sub_argc, sub_argv, npos ? "" : "+", lopts, &li);
        if (id == -1)
            break;
        if (id == '?' || id == ':') {
            const char *bad = sub_argv[optind - 1];
            if (optopt >= O_SERVER)
                return perr(err, errlen, "%s: option '%s' needs a value",
                            cli_cmd_name(o->cmd), bad);
            return perr(err, errlen, "%s: unknown option '%s'", cli_cmd_name(o->cmd), bad);
        }
        const opt_def *d = NULL;
        for (size_t i = 0; i < N_DEFS; i++)
            if (defs[i].id == id)
                d = &defs[i];
        if (!d)
            return perr(err, errlen, "internal: option %d", id);
        if (!(d->cmds & B(o->cmd)))
            return perr(err, errlen, "%s: option --%s does not apply to this command",
                        cli_cmd_name(o->cmd), d->name);
        const char *a = optarg;
        long lv;
        double dv;
        switch (id) {
        case O_SERVER: o->server = a; break;
        case O_TLS_CA: o->tls_ca = a; break;
        case O_TLS_CERT: o->tls_cert = a; break;
        case O_TLS_KEY: o->tls_key = a; break;
        case O_TOKEN_FILE: o->token_file = a; break;
        case O_TIMEOUT:
            if (parse_double(a, 0.001, 1e7, &o->timeout_s) < 0)
                return perr(err, errlen, "--timeout: expected seconds > 0, got '%s'", a);
            break;
        case O_MODEL: o->model = a; break;
        case O_WEIGHTS: o->weights = a; break;
        case O_SAVE_WEIGHTS: o->save_weights = a; break;
        case O_DATA: o->data = a; break;
        case O_LABELS: o->labels = a; break;
        case O_VAL: o->val = a; break;
        case O_VAL_LABELS: o->val_labels = a; break;
        case O_OUT: o->out = a; break;
        case O_EPOCHS:
            if (parse_long(a, 1, 1000000, &o->epochs) < 0)
                return perr(err, errlen, "--epochs: expected an integer >= 1, got '%s'", a);
            break;
        case O_BATCH:
            if (parse_long(a, 1, 1 << 24, &o->batch_size) < 0)
                return perr(err, errlen, "--batch-size: expected an integer >= 1, got '%s'", a);
            break;
        case O_SPC:
            if (a && !strcmp(a, "auto"))
                o->steps_per_call = CLI_SPC_AUTO;
            else if (a && !strcmp(a, "stream"))
                o->steps_per_call = 0;
            else if (parse_long(a, 0, 1L << 30, &o->steps_per_call) < 0)
                return perr(err, errlen, "--steps-per-call: expected an integer >= 1, 'auto' "
                            "or 'stream', got '%s'", a);
            break;
        case O_IN_FLIGHT:
            if (parse_long(a, 1, RT_TRAIN_MAX_WINDOW, &o->in_flight) < 0)
                return perr(err, errlen, "--in-flight: expected an integer in 1..%d, "
                            "got '%s'", RT_TRAIN_MAX_WINDOW, a);
            break;
        case O_SPE:
            if (parse_long(a, 1, 1L << 30, &o->steps_per_epoch) < 0)
                return perr(err, errlen, "--steps-per-epoch: expected an integer >= 1, got '%s'", a);
            break;
        case O_LOSS: o->loss = a; break;
        case O_METRICS: o->metrics = a; break;
        case O_LABEL_COLS: {
            char *end;
            o->label_first = strtol(a, &end, 10);
            if (end == a || *end != ':' || o->label_first < 0)
                return perr(err, errlen, "--label-columns: want A:B, got '%s'", a);
            const char *b = end + 1;
            o->label_last = strtol(b, &end, 10);
            if (end == b || *end || o->label_last < o->label_first || o->label_last > (1 << 20))
                return perr(err, errlen, "--label-columns: want A:B with A <= B, got '%s'", a);
            break;
        }
        case O_INPUT_SHAPE: {
            const char *q = a;
            o->input_ndim = 0;
            for (;;) {
                char *end;
                long long v = strtoll(q, &end, 10);
                if (end == q || v < 1 || v > (1LL << 32) || o->input_ndim == 8 ||
                    (*end && *end != 'x'))
                    return perr(err, errlen, "--input-shape: want D1xD2... (dims >= 1, at "
                                "most 8), got '%s'", a);
                o->input_shape[o->input_ndim++] = v;
                if (!*end)
                    break;
                q = end + 1;
            }
            break;
        }
        case O_OPT: o->optimizer = a; break;
        case O_LR:
            if (parse_double(a, 1e-12, 1e6, &o->lr) < 0)
                return perr(err, errlen, "--lr: expected a number > 0, got '%s'", a);
            break;
        case O_LABEL_COL:
            if (parse_long(a, -1, 1 << 20, &o->label_column) < 0)
                return perr(err, errlen, "--label-column: expected an index >= 0 "
                            "or -1 (last), got '%s'", a);
            break;
        case O_CSV_HEADER: o->csv_header = 1; break;
        case O_SEED:
            if (parse_long(a, 0, __LONG_MAX__, &lv) < 0)
                return perr(err, errlen, "--seed: expected an integer >= 0, got '%s'", a);
            o->seed = lv;
            break;
        case O_NO_SHUFFLE: o->no_shuffle = 1; break;
        case O_SYNC_BN: o->sync_batchnorm = 1; break;
        case O_FROM_LOGITS: o->from_logits = 1; break;
        case O_DATA_LAYOUT:
            if (strcasecmp(a, "NCHW") && strcasecmp(a, "NHWC"))
                return perr(err, errlen, "--data-layout: NCHW or NHWC, got '%s'", a);
            o->data_layout = a;
            break;
        case O_LOSS_CHECK:
            if (strcmp(a, "on") && strcmp(a, "off"))
                return perr(err, errlen, "--loss-check: on or off, got '%s'", a);
            o->no_loss_check = !strcmp(a, "off");
            break;
        case O_REDUCTION:
            if (strcmp(a, "mean") && strcmp(a, "sum"))
                return perr(err, errlen, "--reduction: mean or sum, got '%s'", a);
            o->reduction = a;
            break;
        case O_LABEL_SMOOTHING:
            if (parse_double(a, 0, 1, &o->label_smoothing) < 0)
                return perr(err, errlen, "--label-smoothing: a number in [0, 1], got '%s'", a);
            break;
        case O_LOSS_BETA:
            if (parse_double(a, 0, 1e30, &o->loss_beta) < 0)
                return perr(err, errlen, "--loss-beta: a number >= 0, got '%s'", a);
            break;
        case O_IGNORE_INDEX: {
            long v;
            if (parse_long(a, -2147483647L, 2147483647L, &v) < 0)
                return perr(err, errlen, "--ignore-index: an integer, got '%s'", a);
            o->has_ignore_index = 1;
            o->ignore_index = v;
            break;
        }
        case O_CLASS_WEIGHT:
        case O_POS_WEIGHT: {
            static float cw[CLI_MAX_WEIGHTS], pw[CLI_MAX_WEIGHTS];
            const int cls = id == O_CLASS_WEIGHT;
            int n = parse_floats(a, cls ? cw : pw, CLI_MAX_WEIGHTS);
            if (n <= 0)
                return perr(err, errlen, "--%s: up to %d numbers >= 0, comma-separated, got "
                            "'%.40s'", cls ? "class-weight" : "pos-weight", CLI_MAX_WEIGHTS, a);
            if (cls) {
                o->class_weight = cw;
                o->n_class_weight = n;
            } else {
                o->pos_weight = pw;
                o->n_pos_weight = n;
            }
            break;
        }
        case O_NO_NORMALIZE: o->no_normalize = 1; break;
        case O_TIMINGS: o->timings = 1; break;
        case O_TRACE: o->trace = a; break;
        case O_SIZE:
            if (parse_long(a, 0, 1L << 30, &o->size) < 0)
                return perr(err, errlen, "--size: expected bytes >= 0, got '%s'", a);
            break;
        case O_COUNT:
            if (parse_long(a, 1, 10000000, &o->count) < 0)
                return perr(err, errlen, "--count: expected an integer >= 1, got '%s'", a);
            break;
        case O_MAX_K:
            if (parse_long(a, 1, 1 << 20, &o->max_k) < 0)
                return perr(err, errlen, "--max-k: expected an integer >= 1, got '%s'", a);
            break;
        case O_REPS:
            if (parse_long(a, 1, 100000, &o->reps) < 0)
                return perr(err, errlen, "--reps: expected an integer >= 1, got '%s'", a);
            break;
        case O_CSV: o->csv = a; break;
        case O_PLOT: o->plot = a; break;
        case O_EXPLAIN: o->explain = 1; break;
        case O_PROGRESS: o->progress = 1; break;
        case O_NO_PROGRESS: o->progress = 0; break;
        case O_FEATURES: o->features = a; break;
        case O_LABEL_KEY: o->label_key = a; break;
        case O_IMAGE_SIZE: o->image_size = a; break;
        case O_CHANNELS:
            if (parse_long(a, 1, 3, &o->channels) < 0 || o->channels == 2)
                return perr(err, errlen, "--channels: 1 or 3, got '%s'", a);
            break;
        case O_RESIZE: o->resize = a; break;
        case O_MEAN: o->mean = a; break;
        case O_STD: o->std = a; break;
        case O_AUGMENT: o->augment = a; break;
        case O_ON_BAD: o->on_bad_record = a; break;
        case O_STORAGE:
            if (strcmp(a, "auto") && strcmp(a, "memory") && strcmp(a, "stream"))
                return perr(err, errlen, "--storage: auto, memory or stream, not '%s'", a);
            o->storage = a;
            break;
        case O_SHUFFLE_BUF:
            if (parse_long(a, 1, 1L << 31, &o->shuffle_buffer) < 0)
                return perr(err, errlen, "--shuffle-buffer: 1..2^31 samples, got '%s'", a);
            break;
        case O_HELP:
            o->help_cmd = o->cmd;
            o->cmd = CLI_HELP;
            return 0;
        case O_EARLY_STOP:
            if (parse_long(a, 0, 1000000, &o->early_stopping) < 0)
                return perr(err, errlen, "--early-stopping: expected a patience in epochs "
                            ">= 0, got '%s'", a);
            break;
        case O_CHECKPOINT: o->checkpoint = a; break;
        case O_CSV_LOG: o->csv_log = a; break;
        case O_LOAD_WEIGHTS: o->load_weights = a; break;
        case O_SAMPLE_WEIGHTS: o->sample_weights = a; break;
        case O_REATTACH:
            if (parse_double(a, 0, 1e7, &o->reattach_s) < 0)
                return perr(err, errlen, "--reattach-s: expected seconds >= 0, got '%s'", a);
            break;
        case O_CKPT_STEPS:
            if (parse_long(a, 1, 1L << 30, &o->ckpt_every_steps) < 0)
                return perr(err, errlen, "--checkpoint-every-steps: expected an integer >= 1, "
                            "got '%s'", a);
            break;
        case O_CKPT_S:
            if (parse_long(a, 1, 1L << 30, &o->ckpt_every_s) < 0)
                return perr(err, errlen, "--checkpoint-every-s: expected an integer >= 1, "
                            "got '%s'", a);
            break;
        case O_SAVE_STATE: o->save_state = a; break;
        case O_LOAD_STATE: o->load_state = a; break;
        case O_PROGRAM: o->program = a; break;
        case O_SESSION_TOKEN: o->session_token = a; break;
        case O_ONNX: o->onnx_out = a; break;
        case O_ONNX_OUTPUT: o->onnx_output = a; break;
        case O_RTT:
        case O_JITTER:
            if (rt_relay_parse_duration(a, id == O_RTT ? &o->rtt_us : &o->jitter_us) < 0)
                return perr(err, errlen, "--%s: expected a duration like 10ms, got '%s'",
                            id == O_RTT ? "rtt" : "jitter", a);
            o->relay = 1;
            break;
        case O_BANDWIDTH:
            if (rt_relay_parse_rate(a, &o->bandwidth_Bps) < 0)
                return perr(err, errlen, "--bandwidth: expected a rate like 100mbit, got '%s'",
                            a);
            o->relay = 1;
            break;
        }
        (void)dv;
    }
    /* checkpoint pull SESSION PATH, checkpoint push PATH */
    for (int k = 0; k < npos; k++) {
        if (optind >= sub_argc)
            return perr(err, errlen, "%s: expected %s", cli_cmd_name(o->cmd),
                        npos == 2 ? "SESSION PATH" : "PATH");
        o->pos[k] = sub_argv[optind++];
    }
    if (optind < sub_argc)
        return perr(err, errlen, "%s: unexpected argument '%s'", cli_cmd_name(o->cmd),
                    sub_argv[optind]);
    if (o->cmd == CLI_CKPT_PULL && (!o->program || !o->session_token))
        return perr(err, errlen, "checkpoint pull: --program and --session-token are required");

    /* Per-command requirements. */
    switch (o->cmd) {
    case CLI_FIT:
        if (!o->model || !o->data)
            return perr(err, errlen, "fit: --model and --data are required");
        if (o->epochs < 0)
            o->epochs = 1;
        break;
    case CLI_EVAL:
        if (!o->model || !o->weights || !o->data)
            return perr(err, errlen, "eval: --model, --weights and --data are required");
        break;
    case CLI_PREDICT:
        if (!o->model || !o->weights || !o->data || !o->out)
            return perr(err, errlen, "predict: --model, --weights, --data and --out "
                        "are required");
        break;
    case CLI_EXPORT:
        if (!o->model || !o->weights || !o->onnx_out)
            return perr(err, errlen, "export: --model M.onnx, --weights W.bin and --onnx "
                        "OUT.onnx are required");
        break;
    default:
        break;
    }
    if ((o->cmd == CLI_FIT || o->cmd == CLI_EVAL || o->cmd == CLI_PREDICT)) {
        cli_data_kind k = cli_data_kind_of(o->data);
        if (k == CLI_DATA_UNKNOWN)
            return perr(err, errlen, "%s: cannot tell the format of '%s' (expected "
                        ".csv, .npy, .idx or -ubyte, optionally .gz)",
                        cli_cmd_name(o->cmd), o->data);
        int tf = k == CLI_DATA_TFRECORD || k == CLI_DATA_IMAGES;
        if (tf && o->sample_weights)
            return perr(err, errlen, "fit: --sample-weights goes with .csv, .npy or IDX "
                        "--data, not %s", k == CLI_DATA_TFRECORD ? "TFRecord" : "an image folder");
        if (tf && cli_data_check(o, k, err, errlen) < 0)
            return -1;
        if (k != CLI_DATA_CSV && !tf && !o->labels && o->cmd != CLI_PREDICT)
            return perr(err, errlen, "%s: %s data needs --labels", cli_cmd_name(o->cmd),
                        k == CLI_DATA_NPY ? ".npy" : "IDX");
        if (o->val) {
            cli_data_kind vk = cli_data_kind_of(o->val);
            if (vk == CLI_DATA_UNKNOWN)
                return perr(err, errlen, "fit: cannot tell the format of '%s'", o->val);
            if (vk == CLI_DATA_TFRECORD || vk == CLI_DATA_IMAGES) {
                if (cli_data_check(o, vk, err, errlen) < 0)
                    return -1;
            } else if (vk != CLI_DATA_CSV && !o->val_labels)
                return perr(err, errlen, "fit: --val %s needs --val-labels", o->val);
        }
    }
    if (o->onnx_out && (!o->model || !cli_is_onnx(o->model)))
        return perr(err, errlen, "%s: --onnx needs an ONNX --model (*.onnx)",
                    cli_cmd_name(o->cmd));
    if (o->onnx_output && (!o->model || !cli_is_onnx(o->model)))
        return perr(err, errlen, "%s: --onnx-output needs an ONNX --model (*.onnx)",
                    cli_cmd_name(o->cmd));
    /* No silent default: the loss defines what fit optimises and what eval
     * reports, and a model JSON does not carry it. */
    if ((o->cmd == CLI_FIT || o->cmd == CLI_EVAL) && !o->loss && !model_has_loss(o->model))
        return perr(err, errlen, "%s: --loss is required (the model JSON carries no "
                    "compile_config or training_config), e.g. --loss "
                    "sparse_categorical_crossentropy", cli_cmd_name(o->cmd));
    return 0;
}

static const opt_def *find_def(const char *arg)
{
    if (strncmp(arg, "--", 2) != 0)
        return NULL;
    const char *name = arg + 2, *eq = strchr(name, '=');
    size_t n = eq ? (size_t)(eq - name) : strlen(name);
    for (size_t i = 0; i < N_DEFS; i++)
        if (strlen(defs[i].name) == n && !strncmp(defs[i].name, name, n))
            return &defs[i];
    return NULL;
}

/* Options before the command (`rtrain --server H:P info`) are moved after
 * the command words, where the table checks that they apply to it. */
int cli_parse(int argc, char **argv, cli_opts *o, char *err, size_t errlen)
{
    int i = 1;
    while (i < argc && argv[i][0] == '-' && strcmp(argv[i], "--help") != 0 &&
           strcmp(argv[i], "-h") != 0 && strcmp(argv[i], "--version") != 0) {
        const opt_def *d = find_def(argv[i]);
        if (!d) {
            defaults(o);
            return perr(err, errlen, "unknown option '%s' (try rtrain --help)", argv[i]);
        }
        i += d->has_arg && !strchr(argv[i], '=') ? 2 : 1;
    }
    if (i == 1 || i >= argc)
        return parse_ordered(i >= argc ? 1 : argc, argv, o, err, errlen);
    int words = (!strcmp(argv[i], "bench") || !strcmp(argv[i], "checkpoint")) && i + 1 < argc
                    ? 2 : 1;
    char **av = malloc(sizeof *av * (size_t)(argc + 1));
    if (!av)
        return perr(err, errlen, "out of memory");
    int n = 0;
    av[n++] = argv[0];
    for (int k = 0; k < words; k++)
        av[n++] = argv[i + k];
    for (int k = 1; k < i; k++)
        av[n++] = argv[k];
    for (int k = i + words; k < argc; k++)
        av[n++] = argv[k];
    av[n] = NULL;
    int rc = parse_ordered(argc, av, o, err, errlen);
    free(av);
    return rc;
}

int cli_exit_code(int rc)
{
    switch (rc) {
    case 0:
        return CLI_EXIT_OK;
    case RT_EUNAVAILABLE:
        return CLI_EXIT_CONNECT;
    case RT_ENOTFOUND:
        return CLI_EXIT_NOTFOUND;
    case RT_ECANCELLED:
        return CLI_EXIT_INTERRUPTED;
    case RT_EINVAL: case RT_EGRAPH: case RT_EUNKNOWN_OP: case RT_ECYCLE:
    case RT_ESHAPE: case RT_EDTYPE: case RT_EOVERFLOW: case RT_EDATA:
    case RT_ECHECKSUM: case RT_ETOOBIG: case RT_EEXIST: case RT_ESTATE:
    case RT_EAUTH: case RT_EUNKNOWN_LAYER: case RT_EJSON: case RT_ENAN:
    case RT_ETRUNCATED: case RT_EUNIMPLEMENTED:
        return CLI_EXIT_INVALID;
    default:
        return CLI_EXIT_OTHER;
    }
}

static int ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcasecmp(s + n - m, suf) == 0;
}

cli_data_kind cli_data_kind_of(const char *path)
{
    if (!path || !*path)
        return CLI_DATA_UNKNOWN;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    if (cli_is_dir(path))
        return CLI_DATA_IMAGES;
    if (ends_with(tmp, ".zlib"))
        tmp[strlen(tmp) - 5] = 0;
    if (ends_with(tmp, ".tfrecord") || ends_with(tmp, ".tfrec") || cli_is_glob(tmp))
        return CLI_DATA_TFRECORD;
    if (ends_with(tmp, ".gz"))
        tmp[strlen(tmp) - 3] = 0;
    if (ends_with(tmp, ".tfrecord") || ends_with(tmp, ".tfrec"))
        return CLI_DATA_TFRECORD;
    if (ends_with(tmp, ".csv"))
        return CLI_DATA_CSV;
    if (ends_with(tmp, ".npy"))
        return CLI_DATA_NPY;
    if (ends_with(tmp, ".idx") || ends_with(tmp, "-ubyte") || ends_with(tmp, ".idx1") ||
        ends_with(tmp, ".idx3") || strstr(tmp, "-idx1-") || strstr(tmp, "-idx3-"))
        return CLI_DATA_IDX;
    return CLI_DATA_UNKNOWN;
}
