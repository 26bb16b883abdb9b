/*
 * cli.h - internals of the `rtrain` command: option parsing, output helpers
 * (timing table, CSV, .npy, SVG plot), and the commands.
 *
 * Parsing and the writers are pure functions so tests/cli/test_cli_unit.c can
 * check them without a daemon:
 *
 *     cli_opts o;
 *     char err[256];
 *     if (cli_parse(argc, argv, &o, err, sizeof err) < 0) -> usage error, exit 2
 *     o.cmd == CLI_FIT, o.epochs, o.data, ...
 */
#ifndef RTRAIN_CLI_H
#define RTRAIN_CLI_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rt_errf.h"
#include "rtrain/rtrain.h"

/* An option's parse error: the message in err, returns -1 (rt_errf, the
 * one formatter; cli_args.c and cli_data.c). */
#define perr(err, len, ...) rt_errf((err), (len), -1, __VA_ARGS__)

/* Exit codes; documented in `rtrain --help`. */
enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_USAGE = 2,
    CLI_EXIT_CONNECT = 3,
    CLI_EXIT_INVALID = 4,
    CLI_EXIT_NOTFOUND = 5,
    CLI_EXIT_OTHER = 6,
    CLI_EXIT_INTERRUPTED = 130,
};

#define CLI_SPC_AUTO (-1L)

typedef enum cli_cmd {
    CLI_NONE = 0,
    CLI_HELP,
    CLI_VERSION,
    CLI_INFO,
    CLI_PING,
    CLI_FIT,
    CLI_EVAL,
    CLI_PREDICT,
    CLI_BENCH_OVERHEAD,
    CLI_BENCH_STORY,
    CLI_EXPORT,
    CLI_CKPT_PULL,
    CLI_CKPT_PUSH,
} cli_cmd;

typedef enum cli_data_kind {
    CLI_DATA_UNKNOWN = 0,
    CLI_DATA_CSV,
    CLI_DATA_NPY,
    CLI_DATA_IDX,
    CLI_DATA_TFRECORD, /* *.tfrecord[.gz|.zlib], or a glob of shards */
    CLI_DATA_IMAGES,   /* a directory of class folders */
} cli_data_kind;

#define CLI_MAX_WEIGHTS 4096 /* --class-weight, --pos-weight values */

typedef struct cli_opts {
    cli_cmd cmd;
    const char *server;                                   /* NULL = $RTRAIN_SERVER or the default */
    const char *tls_ca, *tls_cert, *tls_key, *token_file; /* NULL: environment */
    double timeout_s;                                     /* < 0: not given */
    const char *model, *weights, *save_weights;
    const char *data, *labels, *val, *val_labels;
    const char *out; /* predict: .csv or .npy */
    long epochs, batch_size, steps_per_epoch;
    long steps_per_call; /* CLI_SPC_AUTO (the default): auto; 0: Fit stream */
    long in_flight;      /* 0: the library's default */
    const char *loss, *optimizer;
    const char *metrics;          /* --metrics: comma-separated Keras names, or NULL */
    double lr;                    /* < 0: not given */
    long label_column;            /* CSV; -1 = last */
    long label_first, label_last; /* --label-columns A:B (inclusive); first -1 = unset */
    int input_ndim;               /* --input-shape D1xD2...: per-sample dims; 0 = unset */
    int64_t input_shape[8];
    long csv_features; /* predict: CSV columns that are all features (set by the command) */
    int csv_header;
    long long seed;
    int no_shuffle;
    int sync_batchnorm;
    const char *precision; /* --precision: float32, bf16 or mixed_bfloat16 */
    int no_normalize;      /* IDX: keep raw 0..255 */
    int timings;
    const char *trace;
    long size, count; /* ping */
    long max_k, reps; /* bench */
    int explain;      /* bench story: the cold run as a waterfall */
    const char *csv, *plot;
    int progress; /* 1 force bar, 0 force lines, -1 auto (TTY) */
    /* TFRecord and image folders (cli_data.c) */
    const char *features, *label_key, *image_size, *resize, *mean, *std, *augment;
    const char *on_bad_record;
    const char *storage; /* auto|memory|stream */
    long shuffle_buffer; /* 0 = the daemon's */
    long channels;
    cli_cmd help_cmd;           /* CLI_HELP: the command asked about, or CLI_NONE */
    long early_stopping;        /* fit: patience in epochs; -1 = off */
    const char *checkpoint;     /* fit: weights after every epoch */
    const char *csv_log;        /* fit: one CSV row per epoch */
    const char *tensorboard;    /* fit: TensorBoard event files (rtrain_tb.h) */
    const char *load_weights;   /* fit: initial weights */
    const char *sample_weights; /* fit: .npy of one loss weight per --data sample */
    const char *onnx_out;       /* fit, export: write the trained ONNX model */
    const char *tfjs_out;       /* fit, export: the TF.js layers format into this folder */
    const char *onnx_output;    /* an ONNX model's output to train (NULL: the only one) */
    int relay;                  /* bench through the latency relay (--rtt ...) */
    uint64_t rtt_us, jitter_us, bandwidth_Bps;
    /* durability (cli_ckpt.c) */
    double reattach_s;     /* fit: < 0 = the library's default */
    long ckpt_every_steps; /* fit: per-fit checkpoint interval, 0 = the daemon's */
    long ckpt_every_s;
    const char *save_state, *load_state; /* fit */
    const char *program, *session_token; /* checkpoint pull */
    /* the model's output and PyTorch's losses */
    int from_logits;
    const char *data_layout; /* NULL: the daemon's default (the model's own) */
    int no_loss_check;
    const char *reduction;
    double label_smoothing, loss_beta; /* < 0: not given */
    int has_ignore_index;
    long ignore_index;
    const float *class_weight, *pos_weight;
    int n_class_weight, n_pos_weight;
    const char *pos[2]; /* checkpoint: SESSION PATH / PATH */
} cli_opts;

/* Parse argv (argv[0] is the program). Returns 0, or -1 with a message in
 * err for a usage error. Pointers in *o point into argv. */
int cli_parse(int argc, char **argv, cli_opts *o, char *err, size_t errlen);
const char *cli_cmd_name(cli_cmd c);
void cli_usage(FILE *f);
/* `rtrain CMD --help`: the command's options with their defaults. */
void cli_usage_cmd(FILE *f, cli_cmd c);

/* Map a library error code to a CLI exit code. */
int cli_exit_code(int rt_err);

/* The data kind of a path by its name: .csv, .npy, .idx/-ubyte (optionally
 * .gz). */
cli_data_kind cli_data_kind_of(const char *path);

/* cli_data.c: TFRecord files and image folders. */
struct rt_client_image_opts;
int cli_is_glob(const char *p);
int cli_is_dir(const char *p);
/* Images: --image-size and --channels, else the compiled model's input
 * (cli_set_model_input), else 256x256x3. */
int cli_image_opts(const cli_opts *o, struct rt_client_image_opts *im, char *err, size_t errlen);
/* the compiled model's per-sample input (nchw: the program takes NCHW) */
void cli_set_model_input(const int64_t *shape, int ndim, int nchw);
/* Check the TFRecord/image options for data of kind k; -1 with a message. */
int cli_data_check(const cli_opts *o, cli_data_kind k, char *err, size_t errlen);
int cli_upload_tf(rt_client *c, const char *sid, const char *name, const char *data,
                  const cli_opts *o, rt_client_dataset *out);

/* Statistics: sorts v in place; p in [0, 100], nearest-rank. 0 for n == 0. */
double cli_percentile(double *v, size_t n, double p);

/* Print one row per call (and a header) of the timing breakdown, in us. */
void cli_print_timings(FILE *f, const rt_client_timings *calls, size_t n);

/* A .npy (v1.0) writer for f32/i32/i64/u8 (predict's .npy output). */
int cli_npy_write(const char *path, rt_client_dtype dt, int ndim, const int64_t *shape,
                  const void *data);

/* Keras' HDF5 weights layouts (cli_h5.c): a path ending in .h5/.hdf5 is
 * one. Save writes Keras 2's layout, w's parameters grouped by layer (the
 * text before the first '/': "mha/query/kernel" in layer "mha"); load reads
 * Keras 2's (the file's layers with weights matched to prog's by order, as
 * Keras' load_weights) or Keras 3's .weights.h5 (layers/<class>/vars/0..,
 * placed by the layers of the model JSON at model_path; NULL: not read),
 * and fills *out with prog's names (free with rt_client_weights_free).
 * errbuf receives a message. */
int cli_is_h5(const char *path);
int cli_h5_save(const rt_client_weights *w, const char *path, char *err, size_t errlen);
int cli_h5_load(const char *path, const rt_client_compile_result *prog, const char *model_path,
                rt_client_weights *out, char *err, size_t errlen);

/* CSV of a 2-D f32 (or 1-D) tensor, %.9g; path "-" is stdout. */
int cli_csv_write_tensor(const char *path, const rt_client_tensor *t);

/* Commands (return an exit code). */
extern volatile sig_atomic_t cli_interrupted;
extern rt_client *volatile cli_active_client;
void cli_install_sigint(void);

int cli_cmd_info(const cli_opts *o);
int cli_cmd_ping(const cli_opts *o);
int cli_cmd_fit(const cli_opts *o);
/* cli_ckpt.c: `rtrain checkpoint pull|push`, and fit's --save-state and
 * --load-state. */
int cli_cmd_checkpoint(const cli_opts *o);
int cli_state_pull(rt_client *c, const char *sid, const char *program, const char *path);
int cli_state_push(rt_client *c, const char *sid, const char *path, char *program_out);
int cli_cmd_eval(const cli_opts *o, int predict);
int cli_cmd_export(const cli_opts *o);
/* --model names an ONNX file (*.onnx) rather than Keras JSON */
int cli_is_onnx(const char *path);

/* Shared by the commands: connect (create + timeout), report an error. */
int cli_connect(const cli_opts *o, rt_client **c);
int cli_fail(rt_client *c, const char *what, int rc);
/* Upload a data set given as --data/--labels style paths. */
int cli_upload(rt_client *c, const char *sid, const char *name, const char *data,
               const char *labels, const cli_opts *o, rt_client_dataset *out);
/* Read a whole text file (NUL-terminated); NULL with errno on failure. */
char *cli_read_file(const char *path, size_t *len);
/* A data file's bytes, inflated when compressed (.gz, .zlib), NUL-
 * terminated (cli_rows.c); NULL after saying why. */
char *cli_read_data(const char *path, size_t *len);
void cli_train_opts(const cli_opts *o, rt_train_opts *t);
/* cli_rows.c: --data/--val as rows for the calls over more than one
 * upload (rt_client_fit_rows, rt_client_evaluate_rows,
 * rt_client_predict_rows). cli_rows_bytes: the bytes of the one upload
 * that cli_upload (or fit's --sample-weights upload) sends for data (with
 * labels, weights: NULL for none) when it is a kind cli_rows reads (.npy
 * or IDX, a CSV with a label column or --label-columns, predict's
 * features-only CSV, TFRecord shards, an image folder; compressed or not),
 * else 0. cli_rows_needed: 1 when only cli_rows reads them (a compressed
 * CSV or .npy, a zlib'ed IDX: the daemon inflates only gzip'ed IDX and
 * TFRecord). cli_rows_open: reading
 * it (RT_E* after saying why). */
typedef struct cli_rows cli_rows;
uint64_t cli_rows_bytes(const cli_opts *o, const char *data, const char *labels,
                        const char *weights);
int cli_rows_needed(const char *data, const char *labels, const char *weights);
int cli_rows_open(rt_client *c, const cli_opts *o, const char *data, const char *labels,
                  const char *weights, cli_rows **out, rt_client_rows *rows);
/* A numeric CSV (inflated when compressed) as f32 arrays: columns
 * first..last are the labels y (rows, ny), the others the features x
 * (rows, nx); first < 0: every column is a feature (ny 0). RT_E* after
 * saying why. */
typedef struct cli_csv {
    float *x, *y;
    int64_t rows, nx, ny;
} cli_csv;
int cli_csv_read(const char *path, int header, long first, long last, cli_csv *out);
void cli_csv_free(cli_csv *a);
void cli_rows_free(cli_rows *r);
/* data (labels, weights) read by cli_rows as one upload, its rows in order */
int cli_rows_upload(rt_client *c, const char *sid, const char *name, const cli_opts *o,
                    const char *data, const char *labels, const char *weights,
                    rt_client_dataset *out);

#endif
