/* cli_train.c - `rtrain fit`, `rtrain eval`, `rtrain predict`, and the
 * uploads they share (connecting, errors and SIGINT are cli_conn.c's). */
#include "cli.h"
#include "rtrain/rtrain_tb.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_progress.h"
#include "rt_wire.h" /* rt_now_ns */

/* Input files are checked before connecting, so a typo is exit code 4 with
 * the file's name, not an I/O error halfway through. */
static int named_as_file(const char *path)
{
    static const char *const suffixes[] = {".csv",      ".npy",   ".idx",  ".idx1",
                                           ".idx3",     "-ubyte", ".gz",   ".zlib",
                                           ".tfrecord", ".tfrec", ".json", ".bin"};
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        size_t m = strlen(suffixes[i]);
        if (n >= m && strncasecmp(path + n - m, suffixes[i], m) == 0)
            return 1;
    }
    return 0;
}

static int check_inputs(const cli_opts *o)
{
    const char *files[] = {o->model, o->weights,    o->data,        o->labels,
                           o->val,   o->val_labels, o->load_weights};
    const char *flags[] = {"--model", "--weights",    "--data",        "--labels",
                           "--val",   "--val-labels", "--load-weights"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        if (!files[i] || cli_is_glob(files[i]) || (files[i] == o->model && !strcmp(files[i], "-")))
            continue;
        struct stat st;
        if (access(files[i], R_OK) != 0) {
            fprintf(stderr, "rtrain: %s: cannot read %s: %s\n", flags[i], files[i],
                    strerror(errno));
            return errno == ENOENT && (files[i] == o->weights || files[i] == o->load_weights)
                       ? CLI_EXIT_NOTFOUND
                       : CLI_EXIT_INVALID;
        }
        /* A directory is an image folder as --data or --val, unless its
         * name says it is a file (x.csv/). */
        int folder_ok = (files[i] == o->data || files[i] == o->val) && !named_as_file(files[i]);
        if (!folder_ok && stat(files[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            fprintf(stderr, "rtrain: %s: %s is a directory, not a file\n", flags[i], files[i]);
            return CLI_EXIT_INVALID;
        }
    }
    if (o->out && strcmp(o->out, "-") != 0) {
        struct stat st;
        if (stat(o->out, &st) == 0 && S_ISDIR(st.st_mode)) {
            fprintf(stderr, "rtrain: --out: %s is a directory, not a file\n", o->out);
            return CLI_EXIT_INVALID;
        }
    }
    return 0;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* A numeric CSV read here and uploaded as arrays: columns first..last are
 * (n, k) f32 labels (--label-columns), or, with first < 0, every column is
 * a feature (predict on features-only data). */
static int csv_upload_split(rt_client *c, const char *sid, const char *name, const char *path,
                            int header, long first, long last, rt_client_dataset *out)
{
    cli_csv a;
    int rc = cli_csv_read(path, header, first, last, &a);
    if (rc < 0)
        return rc;
    rt_client_array xa = {.data = a.x, .dtype = RT_DTYPE_F32, .ndim = 2, .shape = {a.rows, a.nx}};
    rt_client_array ya = {.data = a.y, .dtype = RT_DTYPE_F32, .ndim = 2, .shape = {a.rows, a.ny}};
    rc = rt_client_upload(c, sid, name, &xa, a.ny ? &ya : NULL, out);
    cli_csv_free(&a);
    return rc;
}

/* labels that go with data as a file of their own (.npy and IDX) */
static const char *own_labels(const char *data, const char *labels)
{
    const cli_data_kind k = cli_data_kind_of(data);
    return k == CLI_DATA_NPY || k == CLI_DATA_IDX ? labels : NULL;
}

static int upload_kind(rt_client *c, const char *sid, const char *name, const char *data,
                       const char *labels, const cli_opts *o, rt_client_dataset *out);

int cli_upload(rt_client *c, const char *sid, const char *name, const char *data,
               const char *labels, const cli_opts *o, rt_client_dataset *out)
{
    int storage = !o->storage || !strcmp(o->storage, "auto") ? 0
                  : !strcmp(o->storage, "memory")            ? 1
                                                             : 2;
    const cli_data_kind kind = cli_data_kind_of(data);
    if (kind == CLI_DATA_TFRECORD || kind == CLI_DATA_IMAGES)
        return cli_upload_tf(c, sid, name, data, o, out);
    rt_client_next_upload_storage(c, storage, (uint64_t)o->shuffle_buffer);
    int rc = upload_kind(c, sid, name, data, labels, o, out);
    if (rc == 0 && out->streamed)
        fprintf(stderr, "rtrain: %s: %llu samples, streamed from the daemon's disk\n", name,
                (unsigned long long)out->samples);
    return rc;
}

static int upload_kind(rt_client *c, const char *sid, const char *name, const char *data,
                       const char *labels, const cli_opts *o, rt_client_dataset *out)
{
    if (cli_rows_needed(data, own_labels(data, labels), NULL))
        return cli_rows_upload(c, sid, name, o, data, own_labels(data, labels), NULL, out);
    switch (cli_data_kind_of(data)) {
    case CLI_DATA_CSV:
        if (o->label_first >= 0)
            return csv_upload_split(c, sid, name, data, o->csv_header, o->label_first,
                                    o->label_last, out);
        if (o->csv_features)
            return csv_upload_split(c, sid, name, data, o->csv_header, -1, -1, out);
        return rt_client_upload_csv(c, sid, name, data, (int)o->label_column, o->csv_header, out);
    case CLI_DATA_NPY: return rt_client_upload_npy(c, sid, name, data, labels, out);
    case CLI_DATA_IDX:
        return rt_client_upload_idx(c, sid, name, data, labels, !o->no_normalize, out);
    case CLI_DATA_TFRECORD:
    case CLI_DATA_IMAGES: return cli_upload_tf(c, sid, name, data, o, out);
    default: return RT_EINVAL;
    }
}

/* "accuracy" plus --metrics split at commas (static storage: one set of
 * options per process). Unlisted, the accuracy is librtrain's default
 * (its own string: only outputs whose loss classifies get it); listed, it
 * is asked for, for every output. */
static const char *cli_metric_list[RT_CLIENT_MAX_METRICS + 1];
static char cli_metric_buf[512];

void cli_train_opts(const cli_opts *o, rt_train_opts *t)
{
    rt_train_opts_init(t);
    if (o->metrics) {
        int n = 0;
        cli_metric_list[n++] = t->metrics[0];
        snprintf(cli_metric_buf, sizeof cli_metric_buf, "%s", o->metrics);
        for (char *tok = strtok(cli_metric_buf, ","); tok && n <= RT_CLIENT_MAX_METRICS;
             tok = strtok(NULL, ","))
            if (!strcmp(tok, "accuracy"))
                cli_metric_list[0] = "accuracy";
            else if (*tok)
                cli_metric_list[n++] = tok;
        t->metrics = cli_metric_list;
        t->n_metrics = n;
    }
    if (o->loss)
        t->loss = o->loss;
    if (o->optimizer)
        t->optimizer = o->optimizer;
    if (o->lr > 0)
        t->lr = (float)o->lr;
    if (o->batch_size > 0)
        t->batch_size = (uint32_t)o->batch_size;
    if (o->seed >= 0)
        t->seed = (uint64_t)o->seed;
    t->no_shuffle = o->no_shuffle;
    t->sync_batchnorm = o->sync_batchnorm;
    t->precision = o->precision;
    t->from_logits = o->from_logits;
    t->data_layout = o->data_layout;
    /* predict and export train nothing: what the loss reads does not matter */
    t->no_loss_check = o->no_loss_check || o->cmd == CLI_PREDICT || o->cmd == CLI_EXPORT;
    t->reduction = o->reduction;
    if (o->label_smoothing >= 0)
        t->label_smoothing = (float)o->label_smoothing;
    if (o->loss_beta >= 0) {
        t->has_loss_beta = 1;
        t->loss_beta = (float)o->loss_beta;
    }
    t->has_ignore_index = o->has_ignore_index;
    t->ignore_index = o->ignore_index;
    t->class_weight = o->class_weight;
    t->n_class_weight = o->n_class_weight;
    t->pos_weight = o->pos_weight;
    t->n_pos_weight = o->n_pos_weight;
}

/* The value of key in a .npy header (read into h, NULs made spaces), or
 * NULL when path is no .npy. */
static const char *npy_header_key(const char *path, char *h, size_t hlen, const char *key)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t n = fread(h, 1, hlen - 1, f);
    fclose(f);
    h[n] = 0;
    for (size_t i = 0; i < n; i++)
        if (!h[i])
            h[i] = ' ';
    const char *s = n > 10 && !memcmp(h, "\x93NUMPY", 6) ? strstr(h, key) : NULL;
    return s ? s + strlen(key) : NULL;
}

/* The shape in a .npy header ("'shape': (n, k)"); returns ndim, or -1. */
static int npy_shape(const char *path, int64_t *dims, int max)
{
    char h[1024];
    const char *s = npy_header_key(path, h, sizeof h, "'shape':");
    if (!s || !(s = strchr(s, '(')))
        return -1;
    int nd = 0;
    for (s++; *s && *s != ')' && nd < max;) {
        char *e;
        long long v = strtoll(s, &e, 10);
        if (e == s)
            break;
        dims[nd++] = v;
        s = e;
        while (*s == ',' || *s == ' ' || *s == 'L')
            s++;
    }
    return nd;
}

/* --data (and --val) larger than one upload holds (GetInfo's
 * max_upload_bytes), in a kind cli_rows.c reads: read here, for
 * rt_client_fit_rows to send in chunks (*chunked 1; tr, and va with
 * --val in such a kind, set). Otherwise nothing is read (*chunked 0). */
static int over_one_upload(rt_client *c, const cli_opts *o, cli_rows **tr, rt_client_rows *trr,
                           cli_rows **va, rt_client_rows *var, int *chunked)
{
    *chunked = 0;
    const char *dl = own_labels(o->data, o->labels), *sw = o->sample_weights;
    const char *vl = o->val ? own_labels(o->val, o->val_labels) : NULL;
    const uint64_t dbytes = cli_rows_bytes(o, o->data, dl, sw);
    const uint64_t vbytes = o->val ? cli_rows_bytes(o, o->val, vl, NULL) : 0;
    if (!dbytes)
        return 0;
    uint64_t lim = 0;
    int rc = rt_client_upload_limit(c, &lim);
    if (rc < 0)
        return rc;
    if (!lim || (dbytes <= lim && vbytes <= lim))
        return 0;
    if ((rc = cli_rows_open(c, o, o->data, dl, sw, tr, trr)) < 0 ||
        (vbytes && (rc = cli_rows_open(c, o, o->val, vl, NULL, va, var)) < 0))
        return rc;
    if (dbytes > lim)
        fprintf(stderr,
                "rtrain: --data is %llu bytes, over the daemon's %llu for one upload: sent in "
                "chunks of whole batches%s\n",
                (unsigned long long)dbytes, (unsigned long long)lim,
                o->no_shuffle ? "" : ", shuffled over all rows each epoch");
    if (vbytes > lim)
        fprintf(stderr,
                "rtrain: --val is %llu bytes, over the daemon's %llu for one upload: evaluated "
                "in chunks, its metrics combined\n",
                (unsigned long long)vbytes, (unsigned long long)lim);
    *chunked = 1;
    return 0;
}

/* The values in the first data row of a CSV (skipping the header line
 * when header), or -1. */
static long csv_row_values(const char *path, int header)
{
    size_t len;
    char *text = cli_read_data(path, &len);
    if (!text)
        return -1;
    long cols = -1;
    char *save = NULL;
    int line_no = 0;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line_no++ == 0 && header)
            continue;
        if (strspn(line, " \t\r") == strlen(line))
            continue;
        cols = 1;
        for (char *q = line; *q; q++)
            cols += *q == ',';
        break;
    }
    free(text);
    return cols;
}

/* PyTorch's losses that take class indices (and cross_entropy also
 * probabilities) */
static int is_class_index_loss(const char *loss)
{
    static const char *const names[] = {"cross_entropy", "CrossEntropyLoss", "nll_loss", "NLLLoss"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcasecmp(loss, names[i]))
            return 1;
    return 0;
}

/* The kind of a .npy's elements ('f', 'i', 'u', 'b'), or 0. */
static int npy_kind(const char *path)
{
    char h[1024];
    const char *s = npy_header_key(path, h, sizeof h, "'descr':");
    if (!s || !(s = strchr(s, '\'')))
        return 0;
    const char k = s[1] == '<' || s[1] == '>' || s[1] == '|' || s[1] == '=' ? s[2] : s[1];
    return k == 'f' || k == 'i' || k == 'u' || k == 'b' ? k : 0;
}

/* --model's bytes (the caller frees them), or NULL after saying why. */
static char *read_model(const cli_opts *o, size_t *len)
{
    char *model = cli_read_file(o->model, len);
    if (!model)
        fprintf(stderr, "rtrain: --model: cannot read %s: %s\n", o->model, strerror(errno));
    return model;
}

/* Session + compile of --model; on failure prints and returns an exit code. */
static int setup(rt_client *c, const cli_opts *o, const char *what, char *sid,
                 rt_client_compile_result *prog)
{
    int rc = rt_client_session_create(c, what, sid);
    if (rc < 0)
        return cli_fail(c, "CreateSession", rc);
    size_t len;
    char *model = read_model(o, &len);
    if (!model)
        return CLI_EXIT_INVALID;
    rt_train_opts t;
    cli_train_opts(o, &t);
    /* (n, k, ...) labels in a .npy: the per-sample label shape is (k, ...)
     * (one-hot, multi-label, multi-output regression) */
    int64_t ld[RT_CLIENT_MAX_DIMS + 1];
    int lnd = o->labels && cli_data_kind_of(o->labels) == CLI_DATA_NPY
                  ? npy_shape(o->labels, ld, RT_CLIENT_MAX_DIMS + 1)
                  : -1;
    if (lnd >= 2) {
        t.label_ndim = lnd - 1;
        memcpy(t.label_shape, ld + 1, sizeof(int64_t) * (size_t)(lnd - 1));
        /* cross_entropy reads integer targets as class indices and float
         * ones as probabilities, as PyTorch does by their dtype */
        int k = o->loss && is_class_index_loss(o->loss) ? npy_kind(o->labels) : 0;
        if (k)
            t.label_dtype = k == 'f' ? RT_DTYPE_F32 : RT_DTYPE_I32;
    }
    if (o->label_first >= 0) {
        t.label_ndim = 1;
        t.label_shape[0] = o->label_last - o->label_first + 1;
        t.label_dtype = RT_DTYPE_F32;
    }
    if (o->input_ndim) {
        t.input_ndim = o->input_ndim;
        memcpy(t.input_shape, o->input_shape, sizeof(int64_t) * (size_t)o->input_ndim);
    }
    /* a CSV's features per row bind a Keras input's one null dim: the
     * columns less the label columns (none with a separate --labels) */
    long csv_cols = -1;
    if (!o->input_ndim && o->data && cli_data_kind_of(o->data) == CLI_DATA_CSV &&
        (csv_cols = csv_row_values(o->data, o->csv_header)) > 0) {
        const long nlab = o->labels             ? 0
                          : o->label_first >= 0 ? o->label_last - o->label_first + 1
                                                : 1;
        if (csv_cols > nlab)
            t.input_values = csv_cols - nlab;
    }
    if (cli_is_onnx(o->model)) {
        rc = rt_client_compile_onnx(c, sid, model, len, o->onnx_output, &t, prog);
    } else {
        rc = rt_client_compile_keras(c, sid, model, &t, prog);
        /* a model input with a null dim (a sequence of any length) takes
         * the .npy features' per-sample shape */
        int64_t fd[RT_CLIENT_MAX_DIMS + 1];
        int fnd;
        if (rc == RT_EINVAL && !o->input_ndim && o->data &&
            strstr(rt_client_errmsg(c), "has a variable dimension") &&
            cli_data_kind_of(o->data) == CLI_DATA_NPY &&
            (fnd = npy_shape(o->data, fd, RT_CLIENT_MAX_DIMS + 1)) >= 2) {
            t.input_ndim = fnd - 1;
            memcpy(t.input_shape, fd + 1, sizeof(int64_t) * (size_t)(fnd - 1));
            rc = rt_client_compile_keras(c, sid, model, &t, prog);
        }
        /* predict on features-only rows: every column is a feature */
        if (rc == RT_EINVAL && t.input_values && !o->labels && o->label_first < 0 &&
            !strcmp(what, "rtrain predict") && csv_cols > 0 &&
            strstr(rt_client_errmsg(c), "values per sample are not a multiple")) {
            t.input_values = csv_cols;
            rc = rt_client_compile_keras(c, sid, model, &t, prog);
        }
    }
    /* a TF.js model.json: its weights manifest's shards are the weights */
    const int tfjs = rc >= 0 && !cli_is_onnx(o->model) && rt_client_tfjs_is_model(model);
    free(model);
    if (rc < 0)
        return cli_fail(c, "Compile", rc);
    if (tfjs) {
        rt_client_weights w;
        char err[512];
        if ((rc = rt_client_tfjs_load(o->model, NULL, &w, err, sizeof err)) < 0) {
            fprintf(stderr, "rtrain: --model: %s\n", err);
            return cli_exit_code(rc);
        }
        rc = rt_client_set_weights(c, sid, prog->program_id, w.t, w.n);
        rt_client_weights_free(&w);
        if (rc < 0)
            return cli_fail(c, "SetWeights", rc);
    }
    if (o->timings && prog->n_passes) {
        printf("compile passes (us)%s:", prog->cache_hit ? ", the original compile's" : "");
        for (int i = 0; i < prog->n_passes; i++)
            printf(" %s %.1f", prog->pass_name[i], prog->pass_ns[i] / 1e3);
        printf("\n");
    }
    cli_set_model_input(prog->input_shape, prog->input_ndim, !strcmp(prog->data_layout, "NCHW"));
    return 0;
}

static void finish_outputs(rt_client *c, const cli_opts *o)
{
    size_t n;
    const rt_client_timings *calls = rt_client_trace_calls(c, &n);
    if (o->timings) {
        fflush(stderr);
        printf("\n");
        cli_print_timings(stdout, calls, n);
    }
    if (o->trace) {
        if (rt_client_trace_write(c, o->trace) < 0)
            fprintf(stderr, "rtrain: --trace: cannot write %s\n", o->trace);
        else
            fprintf(stderr, "trace: %s (%zu calls)\n", o->trace, n);
    }
}

/* ------------------------------------------------------------- fit */

static int out_write(void *user, const char *text)
{
    FILE *f = user;
    if (fputs(text, f) < 0)
        return -1;
    fflush(f);
    return 0;
}

typedef struct fit_view {
    rt_progress bar;
    rt_client_epoch last;
    int have_last;
    uint32_t epochs;    /* of the whole fit */
    int one_per_call;   /* a call per epoch (--early-stopping, --checkpoint) */
    uint32_t done;      /* epochs completed */
    FILE *csv;          /* --csv-log */
    rt_tb_log *tb;      /* --tensorboard */
    int tb_err;         /* its first error, reported once */
    const char *metric; /* "accuracy", or NULL when the model has none */
    /* --early-stopping: Keras' EarlyStopping (mode min, min_delta 0, no
     * baseline) on val_loss, or loss without --val. */
    long patience; /* -1: off */
    double best;
    long wait;
    int stop;
    uint32_t stopped_epoch; /* 1-based, 0 = none */
} fit_view;

/* one CSVLogger column */
typedef struct csv_col {
    char name[80];
    double v;
} csv_col;

static int csv_col_cmp(const void *a, const void *b)
{
    return strcmp(((const csv_col *)a)->name, ((const csv_col *)b)->name);
}

/* --csv-log: Keras' CSVLogger, epoch (0-based) and the logs' keys sorted
 * (loss, accuracy, every other metric and each output's "out1_loss", and
 * the same with "val_") */
static void csv_row(fit_view *v, uint32_t epoch, const rt_client_epoch *e)
{
    if (!v->csv)
        return;
    csv_col col[2 * (RT_CLIENT_MAX_METRICS + 2)];
    int n = 0;
    for (int s = 0; s < 1 + (e->has_val != 0); s++) {
        const rt_client_metrics *m = s ? &e->val : &e->train;
        const char *pre = s ? "val_" : "";
        snprintf(col[n].name, sizeof col[n].name, "%sloss", pre);
        col[n++].v = m->loss;
        if (!isnan(e->train.accuracy)) {
            snprintf(col[n].name, sizeof col[n].name, "%saccuracy", pre);
            col[n++].v = m->accuracy;
        }
        for (int i = 0; i < m->n_values; i++) {
            snprintf(col[n].name, sizeof col[n].name, "%s%s", pre, m->value_name[i]);
            col[n++].v = m->values[i];
        }
    }
    qsort(col, (size_t)n, sizeof col[0], csv_col_cmp);
    if (epoch == 0) {
        fputs("epoch", v->csv);
        for (int i = 0; i < n; i++)
            fprintf(v->csv, ",%s", col[i].name);
        fputc('\n', v->csv);
    }
    fprintf(v->csv, "%u", epoch);
    for (int i = 0; i < n; i++)
        fprintf(v->csv, ",%.17g", col[i].v);
    fputc('\n', v->csv);
    fflush(v->csv);
}

/* --tensorboard: Keras' TensorBoard callback's epoch scalars (epoch
 * 0-based, as csv_row) and each call's time account. A write error is
 * reported once and ends the fit (exit 4), as --csv-log's cannot-open. */
static void tb_note(fit_view *v, int rc)
{
    if (rc < 0 && !v->tb_err) {
        v->tb_err = rc;
        fprintf(stderr, "rtrain: --tensorboard: %s\n", rt_tb_log_error(v->tb));
    }
}

static void tb_metrics(fit_view *v, uint32_t epoch, const char *pre, const rt_client_metrics *m)
{
    char name[96];
    snprintf(name, sizeof name, "%sloss", pre);
    tb_note(v, rt_tb_log_epoch(v->tb, epoch, name, m->loss));
    if (!isnan(m->accuracy)) {
        snprintf(name, sizeof name, "%saccuracy", pre);
        tb_note(v, rt_tb_log_epoch(v->tb, epoch, name, m->accuracy));
    }
    for (int i = 0; i < m->n_values; i++) {
        snprintf(name, sizeof name, "%s%s", pre, m->value_name[i]);
        tb_note(v, rt_tb_log_epoch(v->tb, epoch, name, m->values[i]));
    }
}

static void tb_epoch(fit_view *v, uint32_t epoch, const rt_client_epoch *e)
{
    if (!v->tb)
        return;
    tb_metrics(v, epoch, "", &e->train);
    if (e->has_val)
        tb_metrics(v, epoch, "val_", &e->val);
}

static void early_stop(fit_view *v, uint32_t epoch, const rt_client_epoch *e)
{
    if (v->patience < 0)
        return;
    double cur = e->has_val ? e->val.loss : e->train.loss;
    v->wait++;
    if (cur < v->best) {
        v->best = cur;
        v->wait = 0;
        return; /* an improving epoch never stops (Keras' early_stopping.py) */
    }
    if (v->wait >= v->patience && epoch > 0) {
        v->stop = 1;
        v->stopped_epoch = epoch + 1;
    }
}

/* Both drivers' events: progress display, the last epoch for the summary,
 * the CSV log and early stopping, Ctrl-C (the handler also cancels the call
 * in flight). */
static int on_fit_event(const rt_client_fit_event *ev, void *user)
{
    fit_view *v = user;
    if (ev->kind == RT_FIT_RESUMED) {
        fprintf(stderr, "daemon restarted; resuming at epoch %llu step %llu\n",
                (unsigned long long)ev->epoch, (unsigned long long)ev->step);
        return cli_interrupted ? 1 : 0;
    }
    if (ev->kind == RT_FIT_EPOCH_END) {
        /* Counted here: a Fit stream numbers epochs from the program's
         * first, a RunSteps loop from its own. */
        uint32_t epoch = v->done++;
        /* One call per epoch: the bar's next header is printed when (and
         * if) the next call starts. */
        if (v->one_per_call && v->bar.mode == RT_PROGRESS_BAR)
            v->bar.epochs = v->bar.epoch;
        rt_progress_event(&v->bar, ev);
        v->bar.epochs = v->epochs;
        v->last = ev->epoch_end;
        v->have_last = 1;
        csv_row(v, epoch, &ev->epoch_end);
        tb_epoch(v, epoch, &ev->epoch_end);
        early_stop(v, epoch, &ev->epoch_end);
    } else {
        rt_progress_event(&v->bar, ev);
    }
    if (v->tb && ev->call)
        tb_note(v, rt_tb_log_call(v->tb, ev->call));
    return cli_interrupted || v->tb_err ? 1 : 0;
}

/* --model for Keras 3's .weights.h5 layout, which names layers by class:
 * a file read a second time (stdin cannot be) */
static const char *h5_model(const cli_opts *o)
{
    return o->model && strcmp(o->model, "-") != 0 ? o->model : NULL;
}

/* --load-weights: an RTWTS file (matched by name) or Keras' HDF5 layout
 * (matched by layer order) into the program. */
static int load_weights(rt_client *c, const char *sid, const rt_client_compile_result *prog,
                        const char *path, const char *model)
{
    rt_client_weights w;
    char err[256];
    int rc = cli_is_h5(path) ? cli_h5_load(path, prog, model, &w, err, sizeof err)
                             : rt_client_weights_load(&w, path, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "rtrain: --load-weights: %s\n", err);
        return cli_exit_code(rc);
    }
    rc = rt_client_set_weights(c, sid, prog->program_id, w.t, w.n);
    rt_client_weights_free(&w);
    return rc < 0 ? cli_fail(c, "SetWeights (--load-weights)", rc) : 0;
}

/* --data with --sample-weights: its parts and an NPY part of one weight
 * per sample (Keras' sample_weight; the daemon checks the count and that
 * each is finite and >= 0). TFRecord data was refused by cli_parse. */
static int upload_weighted(rt_client *c, const char *sid, const cli_opts *o, rt_client_dataset *out)
{
    /* a compressed CSV or .npy, a CSV's --label-columns: the rows read here */
    const char *dl = own_labels(o->data, o->labels);
    if (cli_rows_needed(o->data, dl, o->sample_weights) ||
        (o->label_first >= 0 && cli_data_kind_of(o->data) == CLI_DATA_CSV))
        return cli_rows_upload(c, sid, base_name(o->data), o, o->data, dl, o->sample_weights, out);
    rt_client_upload_part p[3];
    memset(p, 0, sizeof p);
    int n = 0;
    cli_data_kind k = cli_data_kind_of(o->data);
    if (k == CLI_DATA_CSV) {
        p[n].role = RT_ROLE_BOTH;
        p[n].format = RT_FORMAT_CSV;
        p[n].path = o->data;
        p[n].label_column = (int)o->label_column;
        p[n++].csv_header = o->csv_header;
    } else {
        rt_client_format f = k == CLI_DATA_NPY ? RT_FORMAT_NPY : RT_FORMAT_IDX;
        p[n].role = RT_ROLE_FEATURES;
        p[n].format = f;
        p[n].path = o->data;
        p[n++].normalize = f == RT_FORMAT_IDX && !o->no_normalize;
        p[n].role = RT_ROLE_LABELS;
        p[n].format = f;
        p[n++].path = o->labels;
    }
    p[n].role = RT_ROLE_SAMPLE_WEIGHTS;
    p[n].format = RT_FORMAT_NPY;
    p[n++].path = o->sample_weights;
    return rt_client_upload_parts(c, sid, base_name(o->data), p, (size_t)n, out);
}

/* --model (ONNX) written back with the program's weights into o->onnx_out. */
static int export_onnx(rt_client *c, const cli_opts *o, const char *sid, const char *program)
{
    size_t len, outlen;
    char *model = read_model(o, &len);
    if (!model)
        return CLI_EXIT_INVALID;
    uint8_t *out;
    int rc = rt_client_export_onnx(c, sid, program, model, len, o->onnx_output, &out, &outlen);
    free(model);
    if (rc < 0)
        return cli_fail(c, "ExportOnnx", rc);
    FILE *f = fopen(o->onnx_out, "wb");
    int ok = f && fwrite(out, 1, outlen, f) == outlen;
    if (f && fclose(f) != 0)
        ok = 0;
    free(out);
    if (!ok) {
        fprintf(stderr, "rtrain: --onnx: cannot write %s: %s\n", o->onnx_out, strerror(errno));
        return CLI_EXIT_OTHER;
    }
    fprintf(stderr, "onnx: %s (%zu bytes)\n", o->onnx_out, outlen);
    return 0;
}

/* The program's model and weights in the TF.js layers format into
 * o->tfjs_out (--tfjs). */
static int export_tfjs(rt_client *c, const cli_opts *o, const char *sid, const char *program)
{
    size_t len;
    char *model = read_model(o, &len);
    if (!model)
        return CLI_EXIT_INVALID;
    rt_client_weights w;
    int rc = rt_client_get_weights(c, sid, program, &w);
    if (rc < 0) {
        free(model);
        return cli_fail(c, "GetWeights", rc);
    }
    char err[512];
    rc = rt_client_tfjs_save(o->tfjs_out, model, &w, err, sizeof err);
    free(model);
    const size_t n = w.n;
    rt_client_weights_free(&w);
    if (rc < 0) {
        fprintf(stderr, "rtrain: --tfjs: %s\n", err);
        return cli_exit_code(rc);
    }
    fprintf(stderr, "tfjs: %s/model.json (%zu weights)\n", o->tfjs_out, n);
    return 0;
}

/* The weights of the program into path (--checkpoint, --save-weights). */
static int save_weights(rt_client *c, const char *sid, const char *program, const char *path,
                        const char *flag, int quiet)
{
    rt_client_weights w;
    int rc = rt_client_get_weights(c, sid, program, &w);
    if (rc < 0)
        return cli_fail(c, "GetWeights", rc);
    char err[256];
    int ex = 0;
    rc = cli_is_h5(path) ? cli_h5_save(&w, path, err, sizeof err)
                         : rt_client_weights_save(&w, path, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "rtrain: %s: %s\n", flag, err);
        ex = cli_exit_code(rc);
    } else if (!quiet) {
        fprintf(stderr, "weights: %s (%zu tensors, step %llu)\n", path, w.n,
                (unsigned long long)w.global_step);
    }
    rt_client_weights_free(&w);
    return ex;
}

int cli_cmd_fit(const cli_opts *o)
{
    rt_client *c = NULL;
    int ex = check_inputs(o);
    if (ex)
        return ex;
    ex = cli_connect(o, &c);
    if (ex)
        return ex;
    rt_client_trace_enable(c, 1);
    char sid[RT_ID_MAX] = "";
    rt_client_compile_result prog;
    memset(&prog, 0, sizeof prog);
    rt_client_dataset tr, va;
    memset(&va, 0, sizeof va);
    fit_view v;
    memset(&v, 0, sizeof v);
    int keep = 0;
    cli_rows *crt = NULL, *crv = NULL; /* data read here (over one upload) */
    rt_client_rows rtr, rva;
    memset(&rva, 0, sizeof rva);
    uint64_t t0 = rt_now_ns();
    ex = setup(c, o, "rtrain fit", sid, &prog);
    if (ex)
        goto out;
    if (o->load_weights && (ex = load_weights(c, sid, &prog, o->load_weights, h5_model(o))))
        goto out;
    if (o->load_state && (ex = cli_state_push(c, sid, o->load_state, prog.program_id)))
        goto out;
    if (o->reattach_s >= 0)
        rt_client_set_reattach_ms(c, (int64_t)(o->reattach_s * 1000));
    fprintf(stderr, "session: %s (token %s)\n", sid, rt_client_session_token(c, sid));
    int chunked = 0;
    int rc = over_one_upload(c, o, &crt, &rtr, &crv, &rva, &chunked);
    memset(&tr, 0, sizeof tr);
    if (rc == 0 && chunked)
        tr.samples = rtr.n;
    else if (rc == 0)
        rc = o->sample_weights ? upload_weighted(c, sid, o, &tr)
                               : cli_upload(c, sid, base_name(o->data), o->data, o->labels, o, &tr);
    if (rc < 0) {
        ex = cli_fail(c, "upload of --data", rc);
        goto out;
    }
    if (crv) {
        va.samples = rva.n;
    } else if (o->val) {
        rc = cli_upload(c, sid, base_name(o->val), o->val, o->val_labels, o, &va);
        if (rc < 0) {
            ex = cli_fail(c, "upload of --val", rc);
            goto out;
        }
    }
    uint64_t batch = o->batch_size > 0 ? (uint64_t)o->batch_size : 32;
    uint64_t spe =
        o->steps_per_epoch > 0 ? (uint64_t)o->steps_per_epoch : (tr.samples + batch - 1) / batch;
    if (spe == 0)
        spe = 1;
    int bar = o->progress >= 0 ? o->progress : isatty(STDERR_FILENO);
    v.epochs = (uint32_t)o->epochs;
    v.patience = o->early_stopping;
    v.best = INFINITY;
    v.one_per_call = o->early_stopping >= 0 || o->checkpoint;
    rt_progress_init(&v.bar, bar ? RT_PROGRESS_BAR : RT_PROGRESS_LINES, (uint32_t)o->epochs, spe,
                     "accuracy", out_write, stderr);
    if (o->csv_log) {
        v.csv = strcmp(o->csv_log, "-") ? fopen(o->csv_log, "w") : stdout;
        if (!v.csv) {
            fprintf(stderr, "rtrain: --csv-log: cannot write %s: %s\n", o->csv_log,
                    strerror(errno));
            ex = CLI_EXIT_INVALID;
            goto out;
        }
    }
    if (o->tensorboard) {
        char err[512];
        if (rt_tb_log_open(o->tensorboard, &v.tb, err, sizeof err) < 0) {
            fprintf(stderr, "rtrain: --tensorboard: %s\n", err);
            ex = CLI_EXIT_INVALID;
            goto out;
        }
    }
    char mode[96];
    long window = o->in_flight > 0 ? o->in_flight : RT_TRAIN_WINDOW;
    /* --checkpoint-every-steps N wants a checkpoint every N steps, and a
     * RunSteps call is checkpointed at its end: auto K would space them
     * by its calls, so without a K the fit is one Fit stream. */
    long spc = o->steps_per_call == CLI_SPC_AUTO && o->ckpt_every_steps > 0 ? 0 : o->steps_per_call;
    if (chunked && spc != 0 && spc != CLI_SPC_AUTO) {
        fprintf(stderr, "rtrain: --steps-per-call: data over one upload trains by Fit streams\n");
        ex = CLI_EXIT_INVALID;
        goto out;
    }
    if (chunked)
        spc = 0; /* a Fit stream per chunk */
    if (chunked)
        snprintf(mode, sizeof mode, "a Fit stream per chunk");
    else if (spc == 0)
        snprintf(mode, sizeof mode, "one Fit stream%s",
                 o->steps_per_call ? " (--checkpoint-every-steps)" : "");
    else if (spc == CLI_SPC_AUTO)
        snprintf(mode, sizeof mode, "RunSteps, auto steps per call, up to %ld in flight", window);
    else
        snprintf(mode, sizeof mode, "RunSteps of %ld steps, up to %ld in flight", spc, window);
    fprintf(stderr, "train: %llu samples%s%s, %llu steps/epoch, %s\n",
            (unsigned long long)tr.samples, tr.deduplicated ? " (already on the daemon)" : "",
            o->val ? ", with validation" : "", (unsigned long long)spe, mode);
    if (o->val)
        fprintf(stderr, "val: %llu samples%s\n", (unsigned long long)va.samples,
                va.deduplicated ? " (already on the daemon)" : "");
    fprintf(stderr, "program: %s, %llu params, backend %s%s\n", prog.program_id,
            (unsigned long long)prog.param_count, prog.backend[0] ? prog.backend : "?",
            prog.cache_hit ? " (compile cache hit)" : "");
    if (prog.bf16_ops || (o->precision && strcmp(o->precision, "float32"))) {
        /* which ops multiply in bf16: a model that has none says so */
        fprintf(stderr, "precision: %u of %zu ops mixed_bfloat16", prog.bf16_ops, prog.n_ops);
        const char *sep = ":";
        for (size_t i = 0; i < prog.n_ops; i++)
            if (!strcmp(prog.ops[i].precision, "mixed_bfloat16")) {
                fprintf(stderr, "%s %s (%s)", sep, prog.ops[i].name, prog.ops[i].op);
                sep = ",";
            }
        fputc('\n', stderr);
    }
    if (cli_interrupted) {
        ex = CLI_EXIT_INTERRUPTED;
        goto out;
    }

    /* --early-stopping and --checkpoint look at every epoch's end before
     * the next one starts: one call per epoch. */
    uint32_t runs = v.one_per_call ? (uint32_t)o->epochs : 1;
    uint32_t per_run = v.one_per_call ? 1 : (uint32_t)o->epochs;
    rc = 0;
    for (uint32_t r = 0; r < runs && rc == 0 && !v.stop; r++) {
        rt_progress_begin(&v.bar);
        /* A long fit has no deadline unless --timeout asks for one: not
         * the Fit stream, nor a RunSteps call queued behind others. */
        if (o->timeout_s <= 0)
            rt_client_next_timeout_ms(c, 0);
        if (spc == 0) {
            rt_client_fit_params fp = {
                .session = sid,
                .program = prog.program_id,
                .dataset = tr.id,
                .val_dataset = o->val ? va.id : NULL,
                .epochs = per_run,
                .steps_per_epoch = (uint32_t)(o->steps_per_epoch > 0 ? o->steps_per_epoch : 0),
                .progress_every = bar ? 1 : 0,
                .checkpoint_every_steps = (uint32_t)o->ckpt_every_steps,
                .checkpoint_every_s = (uint32_t)o->ckpt_every_s};
            if (chunked) {
                rt_client_fit_rows_params rp = {.fit = fp,
                                                .name = base_name(o->data),
                                                .val_name = o->val ? base_name(o->val) : NULL,
                                                .train = rtr,
                                                .val = rva,
                                                .batch_size = (uint32_t)batch,
                                                .shuffle = !o->no_shuffle,
                                                .seed = o->seed >= 0 ? (uint64_t)o->seed : 0,
                                                .first_epoch = r};
                rc = rt_client_fit_rows(c, &rp, on_fit_event, &v);
            } else {
                rc = rt_client_fit(c, &fp, on_fit_event, &v);
            }
            /* a Fit stream's events carry no call: its account is the
             * stream's, once it ended */
            rt_client_timings ft;
            if (v.tb && rt_client_last_timings(c, &ft) == 0)
                tb_note(&v, rt_tb_log_call(v.tb, &ft));
        } else {
            rt_client_train_params tp = {.session = sid,
                                         .program = prog.program_id,
                                         .dataset = tr.id,
                                         .val_dataset = o->val ? va.id : NULL,
                                         .epochs = per_run,
                                         .steps_per_epoch = spe,
                                         .steps_per_call = spc == CLI_SPC_AUTO ? 0 : (uint64_t)spc,
                                         .window = (uint32_t)o->in_flight,
                                         .checkpoint_every_steps = (uint32_t)o->ckpt_every_steps,
                                         .checkpoint_every_s = (uint32_t)o->ckpt_every_s};
            rc = rt_client_train_steps(c, &tp, on_fit_event, &v);
        }
        if (rc == 0 && o->checkpoint &&
            (ex = save_weights(c, sid, prog.program_id, o->checkpoint, "--checkpoint", 1)))
            goto out;
    }
    rt_progress_finish(&v.bar);
    if (v.tb_err) {
        ex = cli_exit_code(v.tb_err);
        goto out;
    }
    if (rc < 0) {
        /* A durable daemon that could not checkpoint (disk full) still
         * holds the state: the session stays, so it can be pulled. */
        keep = rc == RT_ETOOBIG && strstr(rt_client_errmsg(c), "checkpoint failed") != NULL;
        ex = cli_fail(c, spc ? "fit (RunSteps)" : "Fit", rc);
        if (keep)
            fprintf(stderr,
                    "rtrain: session %s kept: rtrain checkpoint pull %s STATE "
                    "--program %s --session-token %s\n",
                    sid, sid, prog.program_id, rt_client_session_token(c, sid));
        goto out;
    }
    if (v.stopped_epoch)
        fprintf(stderr, "Epoch %u: early stopping\n", v.stopped_epoch);
    double wall = (double)(rt_now_ns() - t0) / 1e9;
    if (v.have_last) {
        printf("final: loss %.4f", v.last.train.loss);
        if (!isnan(v.last.train.accuracy))
            printf(" - accuracy %.4f", v.last.train.accuracy);
        for (int i = 0; i < v.last.train.n_values; i++)
            printf(" - %s %.4f", v.last.train.value_name[i], v.last.train.values[i]);
        if (v.last.has_val) {
            printf(" - val_loss %.4f", v.last.val.loss);
            if (!isnan(v.last.val.accuracy))
                printf(" - val_accuracy %.4f", v.last.val.accuracy);
            for (int i = 0; i < v.last.val.n_values; i++)
                printf(" - val_%s %.4f", v.last.val.value_name[i], v.last.val.values[i]);
        }
        printf(" - steps %llu - epochs %u - wall %.3f s (connect, upload, compile, train)\n",
               (unsigned long long)v.last.steps, v.done, wall);
    } else {
        printf("final: no epoch completed - wall %.3f s\n", wall);
    }
    if (o->save_state && (ex = cli_state_pull(c, sid, prog.program_id, o->save_state)))
        goto out;
    if (o->save_weights)
        ex = save_weights(c, sid, prog.program_id, o->save_weights, "--save-weights", 0);
    if (!ex && o->onnx_out)
        ex = export_onnx(c, o, sid, prog.program_id);
    if (!ex && o->tfjs_out)
        ex = export_tfjs(c, o, sid, prog.program_id);
out:
    cli_rows_free(crt);
    cli_rows_free(crv);
    /* Also after Ctrl-C: the cancel flag is cleared when the next call
     * starts, and a session left open would hold the daemon's memory. */
    if (sid[0] && !keep) {
        rt_client_next_timeout_ms(c, cli_interrupted ? 2000 : 5000);
        rt_client_session_close(c, sid);
    }
    if (c)
        finish_outputs(c, o);
    if (v.csv && v.csv != stdout)
        fclose(v.csv);
    if (v.tb && rt_tb_log_close(v.tb) < 0 && !ex) {
        fprintf(stderr, "rtrain: --tensorboard: cannot close the event files in %s\n",
                o->tensorboard);
        ex = CLI_EXIT_INVALID;
    }
    rt_client_compile_result_free(&prog);
    cli_active_client = NULL;
    rt_client_destroy(c);
    if (cli_interrupted && ex == 0)
        ex = CLI_EXIT_INTERRUPTED;
    return ex;
}

/* ------------------------------------------------------------- eval, predict */

/* --weights for eval, predict and export. An RTWTS file is read (and
 * checked) before connecting; Keras' HDF5 layout is matched to the
 * compiled model's parameters by weights_set. Exit code or 0. */
static int weights_read(const cli_opts *o, int h5, rt_client_weights *w)
{
    char err[256];
    memset(w, 0, sizeof *w);
    int rc = h5 ? 0 : rt_client_weights_load(w, o->weights, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "rtrain: --weights: %s\n", err);
        return cli_exit_code(rc);
    }
    return 0;
}

static int weights_set(rt_client *c, const cli_opts *o, int h5, const char *sid,
                       const rt_client_compile_result *prog, rt_client_weights *w)
{
    char err[256];
    int rc;
    if (h5 && (rc = cli_h5_load(o->weights, prog, h5_model(o), w, err, sizeof err)) < 0) {
        fprintf(stderr, "rtrain: --weights: %s\n", err);
        return cli_exit_code(rc);
    }
    rc = rt_client_set_weights(c, sid, prog->program_id, w->t, w->n);
    return rc < 0 ? cli_fail(c, "SetWeights", rc) : 0;
}

int cli_cmd_eval(const cli_opts *o, int predict)
{
    rt_client_weights w;
    int ex = check_inputs(o);
    if (ex)
        return ex;
    int h5 = cli_is_h5(o->weights);
    int rc;
    /* no --weights: a TF.js model.json's own (setup sets them) */
    memset(&w, 0, sizeof w);
    if (o->weights && (ex = weights_read(o, h5, &w)))
        return ex;
    rt_client *c = NULL;
    ex = cli_connect(o, &c);
    if (ex) {
        rt_client_weights_free(&w);
        return ex;
    }
    rt_client_trace_enable(c, 1);
    char sid[RT_ID_MAX] = "";
    rt_client_compile_result prog;
    memset(&prog, 0, sizeof prog);
    cli_rows *cr = NULL; /* --data over one upload, read here */
    ex = setup(c, o, predict ? "rtrain predict" : "rtrain eval", sid, &prog);
    if (ex)
        goto out;
    if (o->weights && (ex = weights_set(c, o, h5, sid, &prog, &w)))
        goto out;
    rt_client_dataset ds;
    cli_opts po = *o;
    if (predict && cli_data_kind_of(o->data) == CLI_DATA_CSV && o->label_first < 0) {
        /* a CSV with exactly the model's input values per row holds no
         * label column: predict reads every column */
        int64_t in = 1;
        for (int i = 0; i < prog.input_ndim; i++)
            in *= prog.input_shape[i];
        size_t len;
        char *text = cli_read_data(o->data, &len);
        if (text) {
            char *line = text;
            if (o->csv_header && strchr(line, '\n'))
                line = strchr(line, '\n') + 1;
            long commas = 0;
            for (char *q = line; *q && *q != '\n'; q++)
                commas += *q == ',';
            po.csv_features = commas + 1 == in;
            free(text);
        }
    }
    /* --data over one upload: evaluated or predicted in chunks */
    const char *dl = own_labels(o->data, o->labels);
    const uint64_t bytes = cli_rows_bytes(&po, o->data, dl, NULL);
    uint64_t lim = 0;
    if (bytes && (rc = rt_client_upload_limit(c, &lim)) < 0) {
        ex = cli_fail(c, "GetInfo", rc);
        goto out;
    }
    const int chunked = lim && bytes > lim;
    rt_client_rows rows;
    if (chunked) {
        fprintf(stderr,
                "rtrain: --data is %llu bytes, over the daemon's %llu for one upload: %s in "
                "chunks%s\n",
                (unsigned long long)bytes, (unsigned long long)lim,
                predict ? "predicted" : "evaluated",
                predict ? ", the outputs in row order" : ", the metrics combined by rows");
        rc = cli_rows_open(c, &po, o->data, dl, NULL, &cr, &rows);
    } else {
        rc = cli_upload(c, sid, base_name(o->data), o->data, o->labels, &po, &ds);
    }
    if (rc < 0) {
        ex = cli_fail(c, "upload of --data", rc);
        goto out;
    }
    const uint32_t batch = o->batch_size > 0 ? (uint32_t)o->batch_size : 32;
    if (!predict) {
        rt_client_metrics m;
        rc = chunked ? rt_client_evaluate_rows(c, sid, prog.program_id, base_name(o->data), &rows,
                                               batch, lim, &m)
                     : rt_client_evaluate(c, sid, prog.program_id, ds.id, &m);
        if (rc < 0) {
            ex = cli_fail(c, "Evaluate", rc);
            goto out;
        }
        printf("loss: %.4f", m.loss);
        if (!isnan(m.accuracy))
            printf(" - accuracy: %.4f", m.accuracy);
        for (int i = 0; i < m.n_values; i++)
            printf(" - %s: %.4f", m.value_name[i], m.values[i]);
        printf(" - samples: %llu\n", (unsigned long long)m.samples);
    } else {
        rt_client_tensor y;
        rc = chunked ? rt_client_predict_rows(c, sid, prog.program_id, base_name(o->data), &rows,
                                              batch, lim, &y)
                     : rt_client_predict_dataset(c, sid, prog.program_id, ds.id, &y);
        if (rc < 0) {
            ex = cli_fail(c, "Predict", rc);
            goto out;
        }
        size_t ol = strlen(o->out);
        int npy = ol > 4 && strcmp(o->out + ol - 4, ".npy") == 0; /* "-": CSV */
        rc = npy ? cli_npy_write(o->out, y.dtype, y.ndim, y.shape, y.data)
                 : cli_csv_write_tensor(o->out, &y);
        if (rc < 0) {
            fprintf(stderr, "rtrain: --out: cannot write %s: %s\n", o->out, rt_strerror(rc));
            ex = cli_exit_code(rc);
        } else {
            fprintf(stderr, "predictions: %s (%lld x %lld)\n",
                    strcmp(o->out, "-") ? o->out : "stdout", (long long)y.shape[0],
                    (long long)(y.ndim > 1 ? y.shape[1] : 1));
        }
        rt_client_tensor_free(&y);
    }
out:
    cli_rows_free(cr);
    if (sid[0]) {
        rt_client_next_timeout_ms(c, 5000);
        rt_client_session_close(c, sid);
    }
    finish_outputs(c, o);
    rt_client_compile_result_free(&prog);
    rt_client_weights_free(&w);
    cli_active_client = NULL;
    rt_client_destroy(c);
    return ex;
}

/* ------------------------------------------------------------- export */

/* export --model M.onnx --weights W.bin --onnx OUT.onnx: compile, load the
 * weights, write the model back with them. */
int cli_cmd_export(const cli_opts *o)
{
    rt_client_weights w;
    int ex = check_inputs(o);
    if (ex)
        return ex;
    if (!o->tfjs_out && !cli_is_onnx(o->model)) {
        fprintf(stderr, "rtrain: export: --onnx needs an ONNX --model (*.onnx); a Keras model "
                        "exports with --tfjs DIR\n");
        return CLI_EXIT_USAGE;
    }
    int h5 = cli_is_h5(o->weights);
    if ((ex = weights_read(o, h5, &w)))
        return ex;
    rt_client *c = NULL;
    ex = cli_connect(o, &c);
    if (ex) {
        rt_client_weights_free(&w);
        return ex;
    }
    char sid[RT_ID_MAX] = "";
    rt_client_compile_result prog;
    memset(&prog, 0, sizeof prog);
    cli_opts oc = *o;
    if (!oc.loss) /* compiling needs one; the export does not depend on it */
        oc.loss = "mse";
    ex = setup(c, &oc, "rtrain export", sid, &prog);
    if (ex)
        goto out;
    if ((ex = weights_set(c, o, h5, sid, &prog, &w)))
        goto out;
    if (o->onnx_out)
        ex = export_onnx(c, o, sid, prog.program_id);
    if (!ex && o->tfjs_out)
        ex = export_tfjs(c, o, sid, prog.program_id);
out:
    if (sid[0]) {
        rt_client_next_timeout_ms(c, 5000);
        rt_client_session_close(c, sid);
    }
    rt_client_compile_result_free(&prog);
    rt_client_weights_free(&w);
    cli_active_client = NULL;
    rt_client_destroy(c);
    return ex;
}
