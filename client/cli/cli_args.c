/* cli_args.c - `rtrain` command line: commands, options, usage, exit codes.
 * One option table (CLI_OPTIONS): a row names the option, the commands it
 * applies to (a misplaced option is a usage error rather than silently
 * ignored), how its value is read into cli_opts, and its --help line. The
 * getopt table, the parser's switch, `rtrain CMD --help` and the common
 * options of `rtrain --help` are generated from it. */
#include "cli.h"

#include "rt_units.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define B(c) (1u << (c))
#define CLI_STR_(x) #x
#define CLI_STR(x) CLI_STR_(x)
#define FIT B(CLI_FIT)
#define EVAL B(CLI_EVAL)
#define PREDICT B(CLI_PREDICT)
#define EXPORT B(CLI_EXPORT)
#define PING B(CLI_PING)
#define OVERHEAD B(CLI_BENCH_OVERHEAD)
#define STORY B(CLI_BENCH_STORY)
#define PULL B(CLI_CKPT_PULL)
#define TRAIN (FIT | EVAL | PREDICT | EXPORT)
#define BENCH (OVERHEAD | STORY)
#define CKPT (PULL | B(CLI_CKPT_PUSH))
#define NET (B(CLI_INFO) | PING | TRAIN | BENCH | CKPT)
#define ALL (~0u)

/* X(ID, "name", commands, how it is read, "ARG" or NULL, "help")
 *
 * how:  STR(field)             the text, kept (points into argv)
 *       SET(field, v)          no value: field = v
 *       LONG(field, lo, hi)    a whole number in lo..hi
 *       DOUBLE(field, lo, hi)  a finite number in [lo, hi]
 *       WORD(field, "a|b")     one of the words, kept
 *       INDEX(field, "a|b")    one of the words, its index kept
 *       FN(function)           function(o, name, value, err, errlen): 0 or -1
 *       HELP                   this command's --help
 * help: what `rtrain CMD --help` prints after the flag, defaults included. */
#define CLI_OPTIONS(X)                                                                             \
    X(SERVER, "server", NET, STR(server), "HOST:PORT",                                             \
      "the daemon (default $RTRAIN_SERVER or " RT_DEFAULT_SERVER ")")                              \
    X(TIMEOUT, "timeout", NET, DOUBLE(timeout_s, 0.001, 1e7), "SECONDS",                           \
      "deadline of each call (default 60; fit's training calls: none)")                            \
    X(TLS_CA, "tls-ca", NET, STR(tls_ca), "FILE",                                                  \
      "talk TLS, trusting the daemon's certificate if this PEM CA signed it "                      \
      "(default $RTRAIN_TLS_CA)")                                                                  \
    X(TLS_CERT, "tls-cert", NET, STR(tls_cert), "FILE",                                            \
      "PEM client certificate for mTLS (default $RTRAIN_TLS_CERT)")                                \
    X(TLS_KEY, "tls-key", NET, STR(tls_key), "FILE",                                               \
      "its PEM private key (default $RTRAIN_TLS_KEY)")                                             \
    X(TOKEN_FILE, "token-file", NET, STR(token_file), "FILE",                                      \
      "bearer token on the file's first line (default $RTRAIN_TOKEN, the token itself, "           \
      "or $RTRAIN_TOKEN_FILE)")                                                                    \
    X(MODEL, "model", TRAIN, STR(model), "M.json|M.onnx",                                          \
      "Keras model JSON (model.to_json()), or an ONNX model (*.onnx, torch.onnx.export); "         \
      "- reads stdin")                                                                             \
    X(WEIGHTS, "weights", EVAL | PREDICT | EXPORT, STR(weights), "W.bin|W.h5",                     \
      "weights to load (RTWTS001, or Keras' HDF5 layout)")                                         \
    X(ONNX, "onnx", FIT | EXPORT, STR(onnx_out), "OUT.onnx",                                       \
      "write the --model ONNX file back with the trained weights")                                 \
    X(TFJS, "tfjs", FIT | EXPORT, STR(tfjs_out), "DIR",                                            \
      "write the Keras --model and its trained weights in the TF.js layers format "                \
      "(DIR/model.json and a weights shard)")                                                      \
    X(ONNX_OUTPUT, "onnx-output", TRAIN, STR(onnx_output), "NAME",                                 \
      "the ONNX graph output to train (default: its only one)")                                    \
    X(SAVE_WEIGHTS, "save-weights", FIT, STR(save_weights), "W.bin|W.h5",                          \
      "write the trained weights (RTWTS001, or Keras' HDF5 layout by the .h5 name)")               \
    X(DATA, "data", TRAIN | STORY, STR(data), "D",                                                 \
      "data set: .csv, .npy or IDX (with --labels), .tfrecord (with --features), a "               \
      "folder of class folders of images")                                                         \
    X(LABELS, "labels", TRAIN, STR(labels), "L", "labels of .npy or IDX --data")                   \
    X(VAL, "val", FIT | STORY, STR(val), "V", "validation data, evaluated after every epoch")      \
    X(VAL_LABELS, "val-labels", FIT, STR(val_labels), "L", "labels of .npy or IDX --val")          \
    X(OUT, "out", PREDICT, STR(out), "P.csv|P.npy|-", "predictions; - writes CSV to stdout")       \
    X(EPOCHS, "epochs", FIT | STORY, LONG(epochs, 1, 1000000), "N", "epochs (default 1)")          \
    X(BATCH_SIZE, "batch-size", TRAIN, LONG(batch_size, 1, 1 << 24), "B",                          \
      "samples per step (default 32)")                                                             \
    X(STEPS_PER_CALL, "steps-per-call", FIT, FN(opt_steps_per_call), "K|auto|stream",              \
      "RunSteps calls of K steps, pipelined (default auto: K from the round trip and "             \
      "step time; stream or 0: one Fit stream)")                                                   \
    X(STEPS_PER_EPOCH, "steps-per-epoch", FIT, LONG(steps_per_epoch, 1, 1L << 30), "S",            \
      "steps per epoch (default ceil(samples / B))")                                               \
    X(IN_FLIGHT, "in-flight", FIT, LONG(in_flight, 1, RT_TRAIN_MAX_WINDOW), "W",                   \
      "RunSteps calls in flight (default " CLI_STR(RT_TRAIN_WINDOW) ")")                           \
    X(LOSS, "loss", TRAIN, STR(loss), "L",                                                         \
      "loss (required unless the model JSON saved one): Keras' "                                   \
      "sparse_categorical_crossentropy, mse, ... or PyTorch's cross_entropy, nll_loss, "           \
      "bce_with_logits, binary_cross_entropy, mse_loss, l1_loss, smooth_l1_loss, "                 \
      "huber_loss")                                                                                \
    X(METRICS, "metrics", TRAIN, STR(metrics), "M,M",                                              \
      "Keras metrics besides accuracy, e.g. auc,precision,recall,mae (accuracy: "                  \
      "listed, for every output; else where the loss classifies)")                                 \
    X(OPTIMIZER, "optimizer", TRAIN, STR(optimizer), "O",                                          \
      "sgd, adam, adamw, rmsprop, adagrad, adadelta, adamax, nadam or ftrl (default adam)")        \
    X(LR, "lr", TRAIN, DOUBLE(lr, 1e-12, 1e6), "X",                                                \
      "learning rate (default: the optimizer's, Keras')")                                          \
    X(LABEL_COLUMN, "label-column", TRAIN, LONG(label_column, -1, 1 << 20), "C",                   \
      "CSV label column (default -1 = last)")                                                      \
    X(LABEL_COLUMNS, "label-columns", TRAIN, FN(opt_label_columns), "A:B",                         \
      "CSV label columns A..B (0-based, inclusive): (n, k) labels")                                \
    X(INPUT_SHAPE, "input-shape", TRAIN, FN(opt_input_shape), "D1xD2..",                           \
      "per-sample input dims for a Keras model's null dims (default: the .npy features' "          \
      "shape, or for one null dim a CSV row's feature count)")                                     \
    X(CSV_HEADER, "csv-header", TRAIN, SET(csv_header, 1), NULL, "skip the CSV's first line")      \
    X(SEED, "seed", TRAIN, LONG(seed, 0, LONG_MAX), "S",                                           \
      "initialisation and shuffling seed (default 0)")                                             \
    X(NO_SHUFFLE, "no-shuffle", TRAIN, SET(no_shuffle, 1), NULL,                                   \
      "keep the data order (default: shuffle every epoch)")                                        \
    X(SYNC_BATCHNORM, "sync-batchnorm", TRAIN, SET(sync_batchnorm, 1), NULL,                       \
      "MPI replicas: BatchNorm uses the global batch's statistics")                                \
    X(PRECISION, "precision", TRAIN, WORD(precision, "float32|bf16|mixed_bfloat16"),               \
      "float32|bf16",                                                                              \
      "bf16 (Keras' mixed_bfloat16): Dense and Conv2D multiply in bf16, "                          \
      "float32 elsewhere; refused where the CPU has no bf16 (default: the model's policies)")      \
    X(NO_NORMALIZE, "no-normalize", TRAIN, SET(no_normalize, 1), NULL,                             \
      "IDX: keep 0..255 (default: divide by 255)")                                                 \
    X(TIMINGS, "timings", NET, SET(timings, 1), NULL,                                              \
      "print each call's time breakdown (us): queue, decode, compile, execute, encode, "           \
      "server total, client encode, round trip, client decode, wire+framework = round "            \
      "trip - server total, unattributed")                                                         \
    X(TRACE, "trace", FIT | EVAL | PREDICT | BENCH | PING, STR(trace), "FILE",                     \
      "write the calls as Chrome trace-event JSON")                                                \
    X(SIZE, "size", PING, LONG(size, 0, 1L << 30), "N", "payload bytes each way (default 0)")      \
    X(COUNT, "count", PING, LONG(count, 1, 10000000), "N", "round trips (default 100)")            \
    X(MAX_K, "max-k", OVERHEAD, LONG(max_k, 1, 1 << 20), "K",                                      \
      "largest steps per call (default 1024)")                                                     \
    X(REPS, "reps", BENCH, LONG(reps, 1, 100000), "N", "repetitions")                              \
    X(CSV, "csv", BENCH, STR(csv), "FILE", "results as CSV")                                       \
    X(PLOT, "plot", OVERHEAD, STR(plot), "FILE", "an SVG plot")                                    \
    X(EXPLAIN, "explain", STORY, SET(explain, 1), NULL,                                            \
      "print a cold run (first, before the reps) and a median warm run of \"one call for "         \
      "the run\" as a waterfall of phases: client, wire and server time each (with "               \
      "--trace, also in the trace)")                                                               \
    X(PROGRESS, "progress", FIT, SET(progress, 1), NULL,                                           \
      "force the progress bar on stderr (default: on a TTY)")                                      \
    X(NO_PROGRESS, "no-progress", FIT, SET(progress, 0), NULL, "one line per epoch on stderr")     \
    X(HELP, "help", ALL, HELP, NULL, "this text")                                                  \
    X(FEATURES, "features", TRAIN, STR(features), "KEY:KIND[SHAPE],..",                            \
      "TFRecord: the tf.train.Example features read as x (KIND int64, float, jpeg, png "           \
      "or image; SHAPE [N] or [NxM]; @KEY: a SequenceExample feature list)")                       \
    X(LABEL, "label", TRAIN, STR(label_key), "KEY",                                                \
      "TFRecord: the label feature (default: the key 'label' or '.../label')")                     \
    X(IMAGE_SIZE, "image-size", TRAIN, STR(image_size), "HxW",                                     \
      "images: the size they are resized to (default: the model's input, else 256x256)")           \
    X(CHANNELS, "channels", TRAIN, FN(opt_channels), "1|3",                                        \
      "images: gray or RGB (default: the model's input, else 3)")                                  \
    X(RESIZE, "resize", TRAIN, STR(resize), "auto|bilinear|area",                                  \
      "images: the resize filter (default auto: area when both sides shrink, else "                \
      "bilinear)")                                                                                 \
    X(MEAN, "mean", TRAIN, STR(mean), "M[,M,M]",                                                   \
      "images: (pixel / 255 - mean) / std per channel (default 0)")                                \
    X(STD, "std", TRAIN, STR(std), "S[,S,S]", "images: see --mean (default 1)")                    \
    X(AUGMENT, "augment", FIT, STR(augment), "flip,crop=P,..",                                     \
      "training images: random flip, crop=PIXELS, brightness=X, contrast=X (default "              \
      "none)")                                                                                     \
    X(ON_BAD_RECORD, "on-bad-record", TRAIN, STR(on_bad_record), "fail|skip",                      \
      "TFRecord and images: a bad record fails the upload, naming it, or is left out and "         \
      "counted (default fail)")                                                                    \
    X(STORAGE, "storage", TRAIN, WORD(storage, "auto|memory|stream"), "auto|memory|stream",        \
      "the daemon keeps the data in memory, or on its disk decoded per batch (stream); "           \
      "auto streams past the daemon's --stream-above (default auto)")                              \
    X(SHUFFLE_BUFFER, "shuffle-buffer", TRAIN, LONG(shuffle_buffer, 1, 1L << 31), "N",             \
      "streamed data: samples in the shuffle buffer, as tf.data's shuffle(N) (default: "           \
      "the daemon's)")                                                                             \
    X(EARLY_STOPPING, "early-stopping", FIT, LONG(early_stopping, 0, 1000000), "PATIENCE",         \
      "stop after PATIENCE epochs without a lower val_loss (loss without --val), Keras' "          \
      "EarlyStopping")                                                                             \
    X(CHECKPOINT, "checkpoint", FIT, STR(checkpoint), "W.bin|W.h5",                                \
      "write the weights after every epoch")                                                       \
    X(CSV_LOG, "csv-log", FIT, STR(csv_log), "FILE",                                               \
      "one CSV row per epoch (Keras' CSVLogger columns)")                                          \
    X(TENSORBOARD, "tensorboard", FIT, STR(tensorboard), "DIR",                                    \
      "TensorBoard event files in DIR/train and DIR/validation: Keras' epoch_* scalars "           \
      "and each call's timing/* (ms)")                                                             \
    X(LOAD_WEIGHTS, "load-weights", FIT, STR(load_weights), "W.bin|W.h5",                          \
      "start from these weights (RTWTS001 or Keras' HDF5)")                                        \
    X(SAMPLE_WEIGHTS, "sample-weights", FIT, STR(sample_weights), "W.npy",                         \
      "one loss weight >= 0 per --data sample (Keras' sample_weight; default: none)")              \
    X(RTT, "rtt", BENCH, FN(opt_relay), "D",                                                       \
      "run through a relay on loopback adding D/2 each way (2ms, 10ms, 50ms)")                     \
    X(JITTER, "jitter", BENCH, FN(opt_relay), "D", "with --rtt: each chunk's delay varies by +-D") \
    X(BANDWIDTH, "bandwidth", BENCH, FN(opt_relay), "R",                                           \
      "with --rtt: cap each direction at R (100mbit, 1gbit)")                                      \
    X(REATTACH_S, "reattach-s", FIT, DOUBLE(reattach_s, 0, 1e7), "S",                              \
      "when the daemon is unavailable, retry with backoff for up to S s, then resume "             \
      "exactly (default 300; 0 = off)")                                                            \
    X(CKPT_STEPS, "checkpoint-every-steps", FIT, LONG(ckpt_every_steps, 1, 1L << 30), "N",         \
      "durable daemon: a checkpoint every N steps of this fit (default: the daemon's; "            \
      "without a K, one Fit stream)")                                                              \
    X(CKPT_S, "checkpoint-every-s", FIT, LONG(ckpt_every_s, 1, 1L << 30), "T",                     \
      "durable daemon: a checkpoint every T s of this fit (default: the daemon's)")                \
    X(SAVE_STATE, "save-state", FIT, STR(save_state), "FILE",                                      \
      "after training, the full training state (weights, optimizer, cursor) into FILE")            \
    X(LOAD_STATE, "load-state", FIT, STR(load_state), "FILE",                                      \
      "resume from a saved state (any daemon) instead of fresh weights")                           \
    X(PROGRAM, "program", PULL, STR(program), "P", "the program whose state to pull")              \
    X(SESSION_TOKEN, "session-token", PULL, STR(session_token), "T",                               \
      "the session's token (printed by fit and checkpoint push)")                                  \
    X(FROM_LOGITS, "from-logits", TRAIN, SET(from_logits, 1), NULL,                                \
      "the model outputs logits: Keras' crossentropy losses read them (from_logits=True)")         \
    X(DATA_LAYOUT, "data-layout", TRAIN, FN(opt_data_layout), "NCHW|NHWC",                         \
      "an ONNX 4-D input's data layout (default NCHW, the model's own; never guessed "             \
      "from the shape)")                                                                           \
    X(LOSS_CHECK, "loss-check", TRAIN, INDEX(no_loss_check, "on|off"), "on|off",                   \
      "refuse a loss that does not fit the model's output, e.g. probabilities read from "          \
      "a LogSoftmax (default on)")                                                                 \
    X(REDUCTION, "reduction", TRAIN, WORD(reduction, "mean|sum"), "mean|sum",                      \
      "PyTorch losses: the batch loss is the mean or the sum (default mean)")                      \
    X(LABEL_SMOOTHING, "label-smoothing", TRAIN, DOUBLE(label_smoothing, 0, 1), "X",               \
      "cross_entropy: label smoothing in [0, 1] (default 0)")                                      \
    X(IGNORE_INDEX, "ignore-index", TRAIN, FN(opt_ignore_index), "N",                              \
      "cross_entropy, nll_loss: targets of class N are left out (default -100)")                   \
    X(CLASS_WEIGHT, "class-weight", TRAIN, FN(opt_weights), "W,W,..",                              \
      "cross_entropy, nll_loss: one weight per class (default none)")                              \
    X(POS_WEIGHT, "pos-weight", TRAIN, FN(opt_weights), "W,W,..",                                  \
      "bce_with_logits: positive-class weight, one per class or one (default none)")               \
    X(LOSS_BETA, "loss-beta", TRAIN, DOUBLE(loss_beta, 0, 1e30), "X",                              \
      "smooth_l1_loss beta, huber_loss delta (default 1)")

enum {
    O__BASE = 999, /* past every char: getopt_long returns '?' for an unknown option */
#define CLI__ENUM(id, ...) O_##id,
    CLI_OPTIONS(CLI__ENUM)
#undef CLI__ENUM
};

/* whether a kind of row takes a value */
#define CLI__ARG_STR(...) 1
#define CLI__ARG_SET(...) 0
#define CLI__ARG_LONG(...) 1
#define CLI__ARG_DOUBLE(...) 1
#define CLI__ARG_WORD(...) 1
#define CLI__ARG_INDEX(...) 1
#define CLI__ARG_FN(...) 1
#define CLI__ARG_HELP 0

typedef struct opt_def {
    const char *name;
    int has_arg;
    int id;
    unsigned cmds;
    const char *arg, *help; /* `rtrain CMD --help` */
} opt_def;

static const opt_def defs[] = {
#define CLI__DEF(id, nm, cmds, how, arg, help) {nm, CLI__ARG_##how, O_##id, cmds, arg, help},
    CLI_OPTIONS(CLI__DEF)
#undef CLI__DEF
};
#define N_DEFS (sizeof defs / sizeof defs[0])

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

static void usage_line(FILE *f, const opt_def *d)
{
    char left[64];
    snprintf(left, sizeof left, "--%s%s%s", d->name, d->arg ? " " : "", d->arg ? d->arg : "");
    fprintf(f, "  %-28s %s\n", left, d->help);
}

/* "  --name ARG   help" with the help wrapped at column 28 */
static void usage_wrapped(FILE *f, const opt_def *d)
{
    char left[64];
    snprintf(left, sizeof left, "--%s%s%s", d->name, d->arg ? " " : "", d->arg ? d->arg : "");
    int col = fprintf(f, "  %-26s", left);
    if (col > 28) {
        fprintf(f, "\n%28s", "");
        col = 28;
    }
    for (const char *p = d->help; *p;) {
        size_t w = strcspn(p, " ");
        if (col > 28 && col + 1 + (int)w > 76) {
            fprintf(f, "\n%28s", "");
            col = 28;
        } else if (col > 28) {
            fputc(' ', f);
            col++;
        }
        col += fprintf(f, "%.*s", (int)w, p);
        p += w;
        p += strspn(p, " ");
    }
    fputc('\n', f);
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
        "      [--csv-log log.csv] [--tensorboard DIR] [--reattach-s S]\n"
        "      [--save-state F] [--load-state F]\n"
        "      [--checkpoint-every-steps N] [--checkpoint-every-s T]\n"
        "                            train in RunSteps calls of K steps (never\n"
        "                            across an epoch end), up to W calls in flight\n"
        "                            (default " CLI_STR(
            RT_TRAIN_WINDOW) "), run in order; K = auto (the\n"
                             "                            default) picks K from the measured round trip\n"
                             "                            and step time (fixed cost <= 5%) and prints it;\n"
                             "                            K = stream (or 0): one Fit stream instead.\n"
                             "                            An epoch is ceil(samples / B) steps, or S\n"
                             "                            with --steps-per-epoch\n"
                             "                            --loss is required unless the model saved one\n"
                             "                            (compile_config); defaults: --epochs 1,\n"
                             "                            --batch-size 32, --optimizer adam\n"
                             "                            Callbacks: --early-stopping P, --checkpoint W,\n"
                             "                            --csv-log F, --tensorboard DIR; --sample-weights\n"
                             "                            W.npy weighs each sample's loss (Keras'\n"
                             "                            sample_weight)\n"
                             "  eval --model M.json --weights W.bin --data D [--labels L] [--loss L]\n"
                             "  predict --model M.json --weights W.bin --data D --out P.csv|P.npy|-\n"
                             "  export --model M.onnx --weights W.bin --onnx OUT.onnx [--onnx-output NAME]\n"
                             "  export --model M.json --weights W.bin --tfjs DIR\n"
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
                             "                            is --label KEY or the key 'label' / '.../label'\n"
                             "  DIR/                      JPEG/PNG files in class folders (Keras\n"
                             "                            image_dataset_from_directory layout)\n"
                             "  Images: --image-size HxW (default: the model's input) --channels 1|3 --resize\n"
                             "  auto|bilinear|area --mean M[,M,M] --std S[,S,S]; training augmentation\n"
                             "  --augment flip,crop=PIXELS,brightness=X,contrast=X; --on-bad-record\n"
                             "  fail|skip (skip: bad records are left out and counted)\n"
                             "  Any data: --storage auto|memory|stream (stream: the daemon keeps the\n"
                             "  records or rows on its disk and decodes batches on worker threads; auto\n"
                             "  streams past its --stream-above)\n"
                             "  --shuffle-buffer N (streamed: samples in the shuffle buffer, as tf.data)\n"
                             "\n"
                             "Common options (before or after the command):\n",
        f);
    for (size_t i = 0; i < N_DEFS; i++)
        if ((defs[i].cmds & NET) == NET && defs[i].id != O_HELP)
            usage_wrapped(f, &defs[i]);
    fputs("  ...                       each command's own: rtrain COMMAND --help\n"
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
    for (size_t i = 0; i < N_DEFS; i++)
        if (defs[i].cmds & B(c))
            usage_line(f, &defs[i]);
    fputs("\nGlobal options (--server, --timeout, --timings) may also come before the\n"
          "command. Exit codes: 0 ok, 2 usage, 3 cannot connect, 4 invalid input,\n"
          "5 not found, 6 other, 130 interrupted. Progress goes to stderr, results\n"
          "to stdout.\n",
          f);
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

/* a TF.js model.json with a weights manifest (its weights come with it) */
static int model_is_tfjs(const char *path)
{
    size_t len;
    char *js = path && strcmp(path, "-") ? cli_read_file(path, &len) : NULL;
    int r = js && rt_client_tfjs_is_model(js);
    free(js);
    return r;
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

/* What each kind of row does with its value a (d: the row). */
#define CLI__DO_STR(f) o->f = a;
#define CLI__DO_SET(f, v) o->f = v;
#define CLI__DO_LONG(f, lo, hi)                           \
    if (parse_long(a, lo, hi, &lv) < 0)                   \
        return bad_long(err, errlen, d->name, lo, hi, a); \
    o->f = lv;
#define CLI__DO_DOUBLE(f, lo, hi)                                                          \
    if (parse_double(a, lo, hi, &dv) < 0)                                                  \
        return perr(err, errlen, "--%s: expected a number in [%g, %g], got '%s'", d->name, \
                    (double)(lo), (double)(hi), a);                                        \
    o->f = dv;
#define CLI__DO_WORD(f, words)                                                    \
    if (one_of(words, a) < 0)                                                     \
        return perr(err, errlen, "--%s: one of %s, got '%s'", d->name, words, a); \
    o->f = a;
#define CLI__DO_INDEX(f, words)                                                   \
    if ((k = one_of(words, a)) < 0)                                               \
        return perr(err, errlen, "--%s: one of %s, got '%s'", d->name, words, a); \
    o->f = k;
#define CLI__DO_FN(fn)                      \
    if (fn(o, d->name, a, err, errlen) < 0) \
        return -1;
#define CLI__DO_HELP      \
    o->help_cmd = o->cmd; \
    o->cmd = CLI_HELP;    \
    return 0;
#define CLI__CASE(id, nm, cmds, how, arg, help) \
    case O_##id: {                              \
        CLI__DO_##how                           \
    } break;

static int bad_long(char *err, size_t errlen, const char *name, long lo, long hi, const char *a)
{
    if (hi == LONG_MAX)
        return perr(err, errlen, "--%s: expected an integer >= %ld, got '%s'", name, lo, a);
    return perr(err, errlen, "--%s: expected an integer in %ld..%ld, got '%s'", name, lo, hi, a);
}

/* The index of word in "a|b|c", or -1. */
static int one_of(const char *words, const char *word)
{
    size_t n = strlen(word);
    int i = 0;
    for (const char *p = words;; i++) {
        size_t len = strcspn(p, "|");
        if (n && len == n && !strncmp(p, word, n))
            return i;
        if (!p[len])
            return -1;
        p += len + 1;
    }
}

static int opt_steps_per_call(cli_opts *o, const char *name, const char *a, char *err,
                              size_t errlen)
{
    if (!strcmp(a, "auto"))
        o->steps_per_call = CLI_SPC_AUTO;
    else if (!strcmp(a, "stream"))
        o->steps_per_call = 0;
    else if (parse_long(a, 0, 1L << 30, &o->steps_per_call) < 0)
        return perr(err, errlen, "--%s: expected an integer >= 1, 'auto' or 'stream', got '%s'",
                    name, a);
    return 0;
}

static int opt_label_columns(cli_opts *o, const char *name, const char *a, char *err, size_t errlen)
{
    char *end;
    o->label_first = strtol(a, &end, 10);
    if (end == a || *end != ':' || o->label_first < 0)
        return perr(err, errlen, "--%s: want A:B, got '%s'", name, a);
    const char *b = end + 1;
    o->label_last = strtol(b, &end, 10);
    if (end == b || *end || o->label_last < o->label_first || o->label_last > (1 << 20))
        return perr(err, errlen, "--%s: want A:B with A <= B, got '%s'", name, a);
    return 0;
}

static int opt_input_shape(cli_opts *o, const char *name, const char *a, char *err, size_t errlen)
{
    const char *q = a;
    o->input_ndim = 0;
    for (;;) {
        char *end;
        long long v = strtoll(q, &end, 10);
        if (end == q || v < 1 || v > (1LL << 32) || o->input_ndim == 8 || (*end && *end != 'x'))
            return perr(err, errlen, "--%s: want D1xD2... (dims >= 1, at most 8), got '%s'", name,
                        a);
        o->input_shape[o->input_ndim++] = v;
        if (!*end)
            return 0;
        q = end + 1;
    }
}

static int opt_channels(cli_opts *o, const char *name, const char *a, char *err, size_t errlen)
{
    if (parse_long(a, 1, 3, &o->channels) < 0 || o->channels == 2)
        return perr(err, errlen, "--%s: 1 or 3, got '%s'", name, a);
    return 0;
}

static int opt_data_layout(cli_opts *o, const char *name, const char *a, char *err, size_t errlen)
{
    if (strcasecmp(a, "NCHW") && strcasecmp(a, "NHWC"))
        return perr(err, errlen, "--%s: NCHW or NHWC, got '%s'", name, a);
    o->data_layout = a;
    return 0;
}

static int opt_ignore_index(cli_opts *o, const char *name, const char *a, char *err, size_t errlen)
{
    if (parse_long(a, -2147483647L, 2147483647L, &o->ignore_index) < 0)
        return perr(err, errlen, "--%s: an integer, got '%s'", name, a);
    o->has_ignore_index = 1;
    return 0;
}

/* --class-weight, --pos-weight W,W,... */
static int opt_weights(cli_opts *o, const char *name, const char *a, char *err, size_t errlen)
{
    static float cw[CLI_MAX_WEIGHTS], pw[CLI_MAX_WEIGHTS];
    const int cls = !strcmp(name, "class-weight");
    int n = parse_floats(a, cls ? cw : pw, CLI_MAX_WEIGHTS);
    if (n <= 0)
        return perr(err, errlen, "--%s: up to %d numbers >= 0, comma-separated, got '%.40s'", name,
                    CLI_MAX_WEIGHTS, a);
    if (cls) {
        o->class_weight = cw;
        o->n_class_weight = n;
    } else {
        o->pos_weight = pw;
        o->n_pos_weight = n;
    }
    return 0;
}

/* --rtt D, --jitter D, --bandwidth R: the bench runs through the relay */
static int opt_relay(cli_opts *o, const char *name, const char *a, char *err, size_t errlen)
{
    if (!strcmp(name, "bandwidth")) {
        if (rt_parse_rate_Bps(a, &o->bandwidth_Bps) < 0)
            return perr(err, errlen, "--%s: expected a rate like 100mbit, got '%s'", name, a);
    } else if (rt_parse_duration_us(a, !strcmp(name, "rtt") ? &o->rtt_us : &o->jitter_us) < 0) {
        return perr(err, errlen, "--%s: expected a duration like 10ms, got '%s'", name, a);
    }
    o->relay = 1;
    return 0;
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
    if (!strcmp(c, "info"))
        o->cmd = CLI_INFO;
    else if (!strcmp(c, "ping"))
        o->cmd = CLI_PING;
    else if (!strcmp(c, "fit"))
        o->cmd = CLI_FIT;
    else if (!strcmp(c, "eval") || !strcmp(c, "evaluate"))
        o->cmd = CLI_EVAL;
    else if (!strcmp(c, "predict"))
        o->cmd = CLI_PREDICT;
    else if (!strcmp(c, "export"))
        o->cmd = CLI_EXPORT;
    else if (!strcmp(c, "bench")) {
        if (argc < 3)
            return perr(err, errlen, "bench: which one? overhead or story");
        if (!strcmp(argv[2], "overhead"))
            o->cmd = CLI_BENCH_OVERHEAD;
        else if (!strcmp(argv[2], "story"))
            o->cmd = CLI_BENCH_STORY;
        else
            return perr(err, errlen,
                        "bench: unknown benchmark '%s' "
                        "(overhead or story)",
                        argv[2]);
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
            if (optopt > O__BASE)
                return perr(err, errlen, "%s: option '%s' needs a value", cli_cmd_name(o->cmd),
                            bad);
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
        int k;
        switch (id) {
            CLI_OPTIONS(CLI__CASE)
        }
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
        if (!o->model || (!o->weights && !model_is_tfjs(o->model)) || !o->data)
            return perr(err, errlen,
                        "eval: --model, --weights (unless a TF.js model.json "
                        "with its weights) and --data are required");
        break;
    case CLI_PREDICT:
        if (!o->model || (!o->weights && !model_is_tfjs(o->model)) || !o->data || !o->out)
            return perr(err, errlen,
                        "predict: --model, --weights (unless a TF.js model.json "
                        "with its weights), --data and --out are required");
        break;
    case CLI_EXPORT:
        if (!o->model || !o->weights || (!o->onnx_out && !o->tfjs_out))
            return perr(err, errlen,
                        "export: --model, --weights W.bin and --onnx OUT.onnx "
                        "(an ONNX model) or --tfjs DIR (a Keras model) are required");
        break;
    default: break;
    }
    if ((o->cmd == CLI_FIT || o->cmd == CLI_EVAL || o->cmd == CLI_PREDICT)) {
        cli_data_kind k = cli_data_kind_of(o->data);
        if (k == CLI_DATA_UNKNOWN)
            return perr(err, errlen,
                        "%s: cannot tell the format of '%s' (expected "
                        ".csv, .npy, .idx or -ubyte, optionally .gz)",
                        cli_cmd_name(o->cmd), o->data);
        int tf = k == CLI_DATA_TFRECORD || k == CLI_DATA_IMAGES;
        if (tf && o->sample_weights)
            return perr(err, errlen,
                        "fit: --sample-weights goes with .csv, .npy or IDX "
                        "--data, not %s",
                        k == CLI_DATA_TFRECORD ? "TFRecord" : "an image folder");
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
    if (o->tfjs_out && (!o->model || cli_is_onnx(o->model)))
        return perr(err, errlen,
                    "%s: --tfjs needs a Keras --model (model JSON or a TF.js "
                    "model.json)",
                    cli_cmd_name(o->cmd));
    if (o->onnx_out && (!o->model || !cli_is_onnx(o->model)))
        return perr(err, errlen, "%s: --onnx needs an ONNX --model (*.onnx)", cli_cmd_name(o->cmd));
    if (o->onnx_output && (!o->model || !cli_is_onnx(o->model)))
        return perr(err, errlen, "%s: --onnx-output needs an ONNX --model (*.onnx)",
                    cli_cmd_name(o->cmd));
    /* No silent default: the loss defines what fit optimises and what eval
     * reports, and a model JSON does not carry it. */
    if ((o->cmd == CLI_FIT || o->cmd == CLI_EVAL) && !o->loss && !model_has_loss(o->model))
        return perr(err, errlen,
                    "%s: --loss is required (the model JSON carries no "
                    "compile_config or training_config), e.g. --loss "
                    "sparse_categorical_crossentropy",
                    cli_cmd_name(o->cmd));
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
    int words =
        (!strcmp(argv[i], "bench") || !strcmp(argv[i], "checkpoint")) && i + 1 < argc ? 2 : 1;
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
    case 0: return CLI_EXIT_OK;
    case RT_EUNAVAILABLE: return CLI_EXIT_CONNECT;
    case RT_ENOTFOUND: return CLI_EXIT_NOTFOUND;
    case RT_ECANCELLED: return CLI_EXIT_INTERRUPTED;
    case RT_EINVAL:
    case RT_EGRAPH:
    case RT_EUNKNOWN_OP:
    case RT_ECYCLE:
    case RT_ESHAPE:
    case RT_EDTYPE:
    case RT_EOVERFLOW:
    case RT_EDATA:
    case RT_ECHECKSUM:
    case RT_ETOOBIG:
    case RT_EEXIST:
    case RT_ESTATE:
    case RT_EAUTH:
    case RT_EUNKNOWN_LAYER:
    case RT_EJSON:
    case RT_ENAN:
    case RT_ETRUNCATED:
    case RT_EUNIMPLEMENTED: return CLI_EXIT_INVALID;
    default: return CLI_EXIT_OTHER;
    }
}
