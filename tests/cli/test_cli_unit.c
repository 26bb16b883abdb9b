/* test_cli_unit.c - unit tests of the client side that need no daemon:
 * CLI parsing and exit codes, data-kind detection, statistics, the progress
 * display (rt_progress), .npy and weights files (round trip and damage), the trace JSON
 * (parsed back with json-c), the SVG plot, the graph builder's encoding, and
 * the library's fast failure against a port nobody listens on.
 *
 * usage: test_cli_unit TMPDIR */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <json-c/json.h>

#include "bench_cli.h" /* cli.h, and the bench's SVG plot and waterfall */
#include "rt_client_impl.h"
#include "rt_progress.h"

#include "../lib/rt_check.h"

static const char *tmpdir;
static char *tpath(const char *name)
{
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static int parse(cli_opts *o, char *err, ...)
{
    char *argv[64];
    int argc = 0;
    va_list ap;
    va_start(ap, err);
    argv[argc++] = "rtrain";
    for (char *a; (a = va_arg(ap, char *)) != NULL;)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    return cli_parse(argc, argv, o, err, 256);
}

static void test_parse(void)
{
    cli_opts o;
    char err[256];
    CHECK(parse(&o, err, "fit", "--model", "m.json", "--data", "t.csv", "--val", "v.csv",
                "--epochs", "20", "--batch-size", "20", "--steps-per-call", "4",
                "--loss", "logcosh", "--optimizer", "adam", "--lr", "0.1",
                "--label-column", "4", "--csv-header", "--seed", "7", "--no-shuffle",
                "--save-weights", "w.bin", "--timings", "--trace", "t.json",
                "--server", "127.0.0.1:9", "--timeout", "2.5", NULL) == 0);
    CHECK(o.cmd == CLI_FIT);
    CHECK(!strcmp(o.model, "m.json") && !strcmp(o.data, "t.csv") && !strcmp(o.val, "v.csv"));
    CHECK(o.epochs == 20 && o.batch_size == 20 && o.steps_per_call == 4);
    CHECK(!strcmp(o.loss, "logcosh") && !strcmp(o.optimizer, "adam"));
    CHECK(fabs(o.lr - 0.1) < 1e-12 && o.label_column == 4 && o.csv_header);
    CHECK(o.seed == 7 && o.no_shuffle && o.timings && !strcmp(o.trace, "t.json"));
    CHECK(!strcmp(o.save_weights, "w.bin") && !strcmp(o.server, "127.0.0.1:9"));
    CHECK(fabs(o.timeout_s - 2.5) < 1e-12);
    CHECK(parse(&o, err, "ping", "--tls-ca", "ca.pem", "--tls-cert", "c.pem", "--tls-key",
                "c.key", "--token-file", "tok", NULL) == 0);
    CHECK(!strcmp(o.tls_ca, "ca.pem") && !strcmp(o.tls_cert, "c.pem") &&
          !strcmp(o.tls_key, "c.key") && !strcmp(o.token_file, "tok"));

    /* Defaults. */
    CHECK(parse(&o, err, "fit", "--model", "m", "--data", "d.csv", "--loss", "mse", NULL) == 0);
    CHECK(o.label_column == -1 && o.epochs == 1 && o.steps_per_call == CLI_SPC_AUTO);
    CHECK(o.early_stopping == -1 && !o.checkpoint && !o.csv_log);
    CHECK(o.lr < 0 && o.seed < 0 && o.timeout_s < 0 && o.progress == -1 && !o.server);

    /* Steps per call: auto, and the calls in flight. */
    CHECK(parse(&o, err, "fit", "--model", "m", "--data", "d.csv", "--steps-per-call",
                "auto", "--in-flight", "3", "--loss", "mse", NULL) == 0);
    CHECK(o.steps_per_call == CLI_SPC_AUTO && o.in_flight == 3);
    /* The Fit stream: "stream", or 0 as before pipelined calls were the
     * default. */
    CHECK(parse(&o, err, "fit", "--model", "m", "--data", "d.csv", "--steps-per-call",
                "stream", "--loss", "mse", NULL) == 0);
    CHECK(o.steps_per_call == 0);
    CHECK(parse(&o, err, "fit", "--model", "m", "--data", "d.csv", "--steps-per-call", "0",
                "--loss", "mse", NULL) == 0);
    CHECK(o.steps_per_call == 0);
    CHECK(parse(&o, err, "fit", "--model", "m", "--data", "d.csv", "--steps-per-call", "-2",
                NULL) < 0);
    CHECK(strstr(err, "'stream'") != NULL);
    CHECK(parse(&o, err, "fit", "--model", "m", "--data", "d.csv", "--steps-per-call",
                "automatic", NULL) < 0);
    CHECK(strstr(err, "'auto'") != NULL);
    CHECK(parse(&o, err, "fit", "--model", "m", "--data", "d.csv", "--in-flight", "0",
                NULL) < 0);
    CHECK(strstr(err, "--in-flight") != NULL);
    CHECK(parse(&o, err, "fit", "--model", "m", "--data", "d.csv", "--in-flight", "65",
                NULL) < 0);
    CHECK(parse(&o, err, "eval", "--model", "m", "--weights", "w", "--data", "d.csv",
                "--in-flight", "2", NULL) < 0);

    /* Usage errors name the problem. */
    CHECK(parse(&o, err, "fit", "--model", "m", NULL) < 0);
    CHECK(strstr(err, "--data") != NULL);
    CHECK(parse(&o, err, "fit", "--model", "m", "--data", "d.csv", "--epochs", "0", NULL) < 0);
    CHECK(strstr(err, "--epochs") != NULL);
    CHECK(parse(&o, err, "fit", "--model", "m", "--data", "d.csv", "--epochs", "3x", NULL) < 0);
    CHECK(parse(&o, err, "fit", "--model", "m", "--data", "d.csv", "--lr", "-1", NULL) < 0);
    CHECK(parse(&o, err, "fit", "--model", "m", "--data", "d.csv", "--bogus", NULL) < 0);
    CHECK(strstr(err, "--bogus") != NULL);
    CHECK(parse(&o, err, "fit", "--model", "m", "--data", "d.csv", "--epochs", NULL) < 0);
    CHECK(strstr(err, "needs a value") != NULL);
    CHECK(parse(&o, err, "fit", "--model", "m", "--data", "d.txt", NULL) < 0);
    CHECK(strstr(err, "format") != NULL);
    CHECK(parse(&o, err, "fit", "--model", "m", "--data", "x.npy", NULL) < 0);
    CHECK(strstr(err, "--labels") != NULL);
    CHECK(parse(&o, err, "fit", "--model", "m", "--data", "x.npy", "--labels", "y.npy",
                "--loss", "mse", NULL) == 0);
    CHECK(parse(&o, err, "fit", "--model", "m", "--data", "d.csv", "extra", NULL) < 0);
    CHECK(parse(&o, err, "ping", "--plot", "p.svg", NULL) < 0);
    CHECK(strstr(err, "does not apply") != NULL);
    CHECK(parse(&o, err, "frobnicate", NULL) < 0);
    CHECK(parse(&o, err, "bench", NULL) < 0);
    CHECK(parse(&o, err, "bench", "nope", NULL) < 0);
    CHECK(parse(&o, err, NULL) < 0);

    CHECK(parse(&o, err, "bench", "overhead", "--max-k", "8", "--reps", "3", "--csv",
                "o.csv", "--plot", "o.svg", NULL) == 0);
    CHECK(o.cmd == CLI_BENCH_OVERHEAD && o.max_k == 8 && o.reps == 3);
    CHECK(!strcmp(o.csv, "o.csv") && !strcmp(o.plot, "o.svg"));
    CHECK(parse(&o, err, "bench", "story", "--reps", "2", NULL) == 0 && o.cmd == CLI_BENCH_STORY);
    CHECK(!o.explain);
    CHECK(parse(&o, err, "bench", "story", "--explain", NULL) == 0 && o.explain);
    CHECK(parse(&o, err, "bench", "overhead", "--explain", NULL) < 0); /* story's only */
    CHECK(parse(&o, err, "ping", "--size", "65536", "--count", "10", NULL) == 0);
    CHECK(o.cmd == CLI_PING && o.size == 65536 && o.count == 10);
    CHECK(parse(&o, err, "predict", "--model", "m", "--weights", "w", "--data", "x.npy",
                "--out", "p.npy", NULL) == 0);
    CHECK(parse(&o, err, "eval", "--model", "m", "--data", "d.csv", NULL) < 0);
    CHECK(parse(&o, err, "--help", NULL) == 0 && o.cmd == CLI_HELP);
    CHECK(parse(&o, err, "info", "--help", NULL) == 0 && o.cmd == CLI_HELP);
    CHECK(o.help_cmd == CLI_INFO);
    CHECK(parse(&o, err, "fit", "--help", NULL) == 0 && o.help_cmd == CLI_FIT);

    /* --loss never defaults (fit, eval); predict needs none. */
    CHECK(parse(&o, err, "fit", "--model", "m", "--data", "d.csv", NULL) < 0);
    CHECK(strstr(err, "--loss is required") != NULL);
    CHECK(parse(&o, err, "eval", "--model", "m", "--weights", "w", "--data", "d.csv",
                NULL) < 0);
    CHECK(strstr(err, "--loss") != NULL);

    /* Global options before the command, with a value or =value. */
    CHECK(parse(&o, err, "--server", "h:1", "--timings", "info", NULL) == 0);
    CHECK(o.cmd == CLI_INFO && !strcmp(o.server, "h:1") && o.timings);
    CHECK(parse(&o, err, "--server=h:2", "--timeout", "3", "bench", "overhead", "--reps",
                "2", NULL) == 0);
    CHECK(o.cmd == CLI_BENCH_OVERHEAD && !strcmp(o.server, "h:2") && o.reps == 2);
    CHECK(fabs(o.timeout_s - 3) < 1e-12);
    CHECK(parse(&o, err, "--server", "h:1", "--help", NULL) == 0 && o.cmd == CLI_HELP);
    CHECK(parse(&o, err, "--bogus", "info", NULL) < 0 && strstr(err, "--bogus"));
    CHECK(parse(&o, err, "--epochs", "3", "info", NULL) < 0);
    CHECK(strstr(err, "--epochs does not apply") != NULL);
    CHECK(parse(&o, err, "--server", "h:1", NULL) < 0 && strstr(err, "no command"));

    /* The fit callbacks. */
    CHECK(parse(&o, err, "fit", "--model", "-", "--data", "d.csv", "--loss", "mse",
                "--early-stopping", "4", "--checkpoint", "c.bin", "--csv-log", "l.csv",
                NULL) == 0);
    CHECK(o.early_stopping == 4 && !strcmp(o.checkpoint, "c.bin") &&
          !strcmp(o.csv_log, "l.csv") && !strcmp(o.model, "-"));
    CHECK(parse(&o, err, "fit", "--model", "m", "--data", "d.csv", "--loss", "mse",
                "--early-stopping", "x", NULL) < 0 && strstr(err, "--early-stopping"));
    CHECK(parse(&o, err, "eval", "--model", "m", "--weights", "w", "--data", "d.csv",
                "--loss", "mse", "--early-stopping", "2", NULL) < 0);
}

static void test_exit_codes(void)
{
    CHECK(cli_exit_code(0) == 0);
    CHECK(cli_exit_code(RT_EUNAVAILABLE) == 3);
    CHECK(cli_exit_code(RT_EINVAL) == 4);
    CHECK(cli_exit_code(RT_EGRAPH) == 4);
    CHECK(cli_exit_code(RT_EJSON) == 4);
    CHECK(cli_exit_code(RT_ENOTFOUND) == 5);
    CHECK(cli_exit_code(RT_EINTERNAL) == 6);
    CHECK(cli_exit_code(RT_ETIMEDOUT) == 6);
    CHECK(cli_exit_code(RT_ECANCELLED) == 130);
}

static void test_kinds_and_stats(void)
{
    CHECK(cli_data_kind_of("a/b/train.csv") == CLI_DATA_CSV);
    CHECK(cli_data_kind_of("x.NPY") == CLI_DATA_NPY);
    CHECK(cli_data_kind_of("train-images-idx3-ubyte.gz") == CLI_DATA_IDX);
    CHECK(cli_data_kind_of("labels.idx") == CLI_DATA_IDX);
    CHECK(cli_data_kind_of("d.csv.gz") == CLI_DATA_CSV);
    CHECK(cli_data_kind_of("model.json") == CLI_DATA_UNKNOWN);
    CHECK(cli_data_kind_of(NULL) == CLI_DATA_UNKNOWN);

    double v[] = {5, 1, 4, 2, 3, 10, 9, 8, 7, 6};
    CHECK(cli_percentile(v, 10, 50) == 5);
    CHECK(cli_percentile(v, 10, 99) == 10);
    CHECK(cli_percentile(v, 10, 0) == 1);
    CHECK(cli_percentile(v, 10, 90) == 9);
    double one[] = {42};
    CHECK(cli_percentile(one, 1, 50) == 42);
    CHECK(cli_percentile(NULL, 0, 50) == 0);
}

/* rt_progress output, collected in memory. */
typedef struct sink {
    char buf[8192];
    size_t n;
    int fail_after; /* writes allowed before failing; -1 = never */
} sink;

static int sink_write(void *user, const char *text)
{
    sink *k = user;
    if (k->fail_after == 0)
        return -1;
    if (k->fail_after > 0)
        k->fail_after--;
    size_t m = strlen(text);
    if (k->n + m >= sizeof k->buf)
        m = sizeof k->buf - 1 - k->n;
    memcpy(k->buf + k->n, text, m);
    k->n += m;
    k->buf[k->n] = 0;
    return 0;
}

static size_t count(const char *s, const char *what)
{
    size_t n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

static void test_progress(void)
{
    char b[512];
    rt_progress_format(b, sizeof b, 6, 6, 30, 0.000072, 0, 0.12344, 0.95, "accuracy",
                       1, 0.5, 0.25);
    CHECK(!strcmp(b, "6/6 [==============================] - 0s 12us/step - loss: 0.1234"
                     " - accuracy: 0.9500 - val_loss: 0.5000 - val_accuracy: 0.2500"));
    rt_progress_format(b, sizeof b, 3, 6, 10, 1.0, 1.0, 0.5, NAN, "accuracy", 0, NAN, NAN);
    CHECK(!strcmp(b, "3/6 [====>.....] - ETA: 1s - loss: 0.5000"));
    rt_progress_format(b, sizeof b, 12, 120, 0, 3.0, 75.0, 1.0, 0.5, "accuracy", 0,
                       NAN, NAN);
    CHECK(!strcmp(b, " 12/120 - ETA: 1:15 - loss: 1.0000 - accuracy: 0.5000"));
    /* The metric goes by the name given; none: no metric columns. */
    rt_progress_format(b, sizeof b, 6, 6, 0, 1.0, 0, 1.0, 0.5, "acc", 1, 2.0, 0.25);
    CHECK(strstr(b, " - acc: 0.5000 - val_loss: 2.0000 - val_acc: 0.2500") != NULL);
    rt_progress_format(b, sizeof b, 6, 6, 0, 1.0, 0, 1.0, 0.5, NULL, 1, 2.0, 0.25);
    CHECK(!strstr(b, "acc") && strstr(b, "val_loss: 2.0000"));
    /* Tiny buffers truncate, never overflow. */
    char small[8];
    rt_progress_format(small, sizeof small, 6, 6, 30, 1, 0, 1, 1, NULL, 0, NAN, NAN);
    CHECK(strlen(small) == 7);

    /* Lines: one line per epoch, numbered within the run, no '\r'. */
    rt_client_epoch e;
    memset(&e, 0, sizeof e);
    e.train.loss = 0.5;
    e.train.accuracy = 0.75;
    e.has_val = 1;
    e.val.loss = 0.25;
    e.val.accuracy = 1;
    e.epoch = 41; /* the daemon's count for the program: not shown */
    sink k = {.fail_after = -1};
    rt_progress p;
    rt_progress_init(&p, RT_PROGRESS_LINES, 3, 6, "accuracy", sink_write, &k);
    CHECK(rt_progress_begin(&p) == 0);
    for (uint64_t s = 1; s <= 6; s++)
        CHECK(rt_progress_step(&p, s, 0.5, 0.75) == 0);
    CHECK(rt_progress_epoch_end(&p, &e) == 0);
    CHECK(rt_progress_epoch_end(&p, &e) == 0);
    CHECK(rt_progress_finish(&p) == 0);
    CHECK(!strchr(k.buf, '\r'));
    CHECK(count(k.buf, "\n") == 2);
    CHECK(!strncmp(k.buf, "Epoch 1/3 - 6/6 - ", 18));
    CHECK(strstr(k.buf, "\nEpoch 2/3 - 6/6 - ") != NULL);
    CHECK(strstr(k.buf, "- loss: 0.5000 - accuracy: 0.7500 - val_loss: 0.2500 - "
                        "val_accuracy: 1.0000\n") != NULL);

    /* Bar: header, bar redrawn with '\r', a final line, the next header;
     * finish ends a bar left half drawn. */
    memset(&k, 0, sizeof k);
    k.fail_after = -1;
    rt_progress_init(&p, RT_PROGRESS_BAR, 2, 4, "accuracy", sink_write, &k);
    CHECK(rt_progress_begin(&p) == 0);
    CHECK(rt_progress_step(&p, 1, 0.5, NAN) == 0);
    CHECK(rt_progress_epoch_end(&p, &e) == 0);
    CHECK(rt_progress_step(&p, 2, 0.5, NAN) == 0);
    CHECK(rt_progress_finish(&p) == 0);
    CHECK(strstr(k.buf, "Epoch 1/2\n\r1/4 [======>......") == k.buf);
    CHECK(strstr(k.buf, "\r4/4 [==============================] - ") != NULL);
    CHECK(strstr(k.buf, "val_accuracy: 1.0000\nEpoch 2/2\n\r2/4 [") != NULL);
    CHECK(k.n && k.buf[k.n - 1] == '\n' && count(k.buf, "\n") == 4);
    /* No header after the last epoch. */
    CHECK(rt_progress_epoch_end(&p, &e) == 0);
    CHECK(!strstr(k.buf, "Epoch 3/2"));

    /* A failed write stops all output. */
    memset(&k, 0, sizeof k);
    k.fail_after = 1;
    rt_progress_init(&p, RT_PROGRESS_BAR, 2, 4, NULL, sink_write, &k);
    CHECK(rt_progress_begin(&p) == 0);
    CHECK(rt_progress_step(&p, 1, 0.5, NAN) < 0);
    CHECK(rt_progress_epoch_end(&p, &e) < 0);
    CHECK(!strcmp(k.buf, "Epoch 1/2\n"));
}

/* The .npy header reader that checks cli_npy_write's output (numpy reads
 * the files too: see cli_e2e.sh). */
static int npy_parse_header(const uint8_t *buf, size_t len, rt_client_dtype *dt,
                            int *ndim, int64_t shape[RT_CLIENT_MAX_DIMS],
                            size_t *data_offset)
{
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
        return RT_EDATA;
    size_t hlen, off;
    if (buf[6] == 1) {
        hlen = buf[8] | (size_t)buf[9] << 8;
        off = 10;
    } else if (buf[6] == 2 || buf[6] == 3) {
        if (len < 12)
            return RT_EDATA;
        hlen = buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        off = 12;
    } else {
        return RT_EDATA;
    }
    if (hlen > 65536 || len < off + hlen)
        return RT_EDATA;
    char h[65537];
    memcpy(h, buf + off, hlen);
    h[hlen] = 0;
    const char *d = strstr(h, "'descr'");
    const char *fo = strstr(h, "'fortran_order'");
    const char *sh = strstr(h, "'shape'");
    if (!d || !fo || !sh)
        return RT_EDATA;
    d = strchr(d + 7, '\'');
    if (!d)
        return RT_EDATA;
    d++;
    if (!strncmp(d, "<f4'", 4)) *dt = RT_DTYPE_F32;
    else if (!strncmp(d, "<i4'", 4)) *dt = RT_DTYPE_I32;
    else if (!strncmp(d, "<i8'", 4)) *dt = RT_DTYPE_I64;
    else if (!strncmp(d, "|u1'", 4) || !strncmp(d, "<u1'", 4)) *dt = RT_DTYPE_U8;
    else return RT_EDTYPE;
    const char *fv = fo + 15;
    while (*fv == ':' || *fv == ' ')
        fv++;
    if (strncmp(fv, "False", 5) != 0)
        return RT_EDATA; /* Fortran order is not supported */
    const char *p = strchr(sh, '(');
    if (!p)
        return RT_EDATA;
    p++;
    int nd = 0;
    for (;;) {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == ')')
            break;
        if (nd == RT_CLIENT_MAX_DIMS)
            return RT_ESHAPE;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0)
            return RT_EDATA;
        shape[nd++] = v;
        p = end;
        if (*p == 'L')
            p++;
        if (*p != ',' && *p != ')' && *p != ' ')
            return RT_EDATA;
    }
    *ndim = nd;
    *data_offset = off + hlen;
    return 0;
}

static void test_npy(void)
{
    float x[6] = {1, 2, 3, 4, 5, 6.5f};
    int64_t shape[2] = {2, 3};
    CHECK(cli_npy_write(tpath("a.npy"), RT_DTYPE_F32, 2, shape, x) == 0);
    size_t len;
    char *buf = cli_read_file(tpath("a.npy"), &len);
    CHECK(buf != NULL);
    if (!buf)
        return;
    rt_client_dtype dt;
    int nd;
    int64_t sh[RT_CLIENT_MAX_DIMS];
    size_t off;
    CHECK(npy_parse_header((uint8_t *)buf, len, &dt, &nd, sh, &off) == 0);
    CHECK(dt == RT_DTYPE_F32 && nd == 2 && sh[0] == 2 && sh[1] == 3);
    CHECK(off % 64 == 0 && len == off + sizeof x);
    CHECK(memcmp(buf + off, x, sizeof x) == 0);
    free(buf);

    int32_t y[3] = {0, 1, 2};
    int64_t s1[1] = {3};
    CHECK(cli_npy_write(tpath("b.npy"), RT_DTYPE_I32, 1, s1, y) == 0);
    buf = cli_read_file(tpath("b.npy"), &len);
    CHECK(buf && npy_parse_header((uint8_t *)buf, len, &dt, &nd, sh, &off) == 0);
    CHECK(dt == RT_DTYPE_I32 && nd == 1 && sh[0] == 3);
    CHECK(buf && strstr(buf + 10, "(3,)") != NULL); /* numpy's 1-tuple spelling */
    free(buf);

    /* Headers numpy writes (verbatim), and broken ones. */
    const char hdr[] = "\x93NUMPY\x01\x00\x76\x00{'descr': '<i8', 'fortran_order': False, "
                       "'shape': (4, 1, 2), }";
    uint8_t h2[10 + 0x76];
    memset(h2, ' ', sizeof h2);
    memcpy(h2, hdr, sizeof hdr - 1);
    h2[sizeof h2 - 1] = '\n';
    CHECK(npy_parse_header(h2, sizeof h2, &dt, &nd, sh, &off) == 0);
    CHECK(dt == RT_DTYPE_I64 && nd == 3 && sh[0] == 4 && sh[2] == 2 && off == sizeof h2);
    CHECK(npy_parse_header((const uint8_t *)"NUMPY", 5, &dt, &nd, sh, &off) < 0);
    memcpy(h2 + 10 + 11, "<c8", 3);
    CHECK(npy_parse_header(h2, sizeof h2, &dt, &nd, sh, &off) == RT_EDTYPE);
    const char fort[] = "\x93NUMPY\x01\x00\x40\x00{'descr': '<f4', 'fortran_order': True, "
                        "'shape': (2, 2), }   \n";
    CHECK(npy_parse_header((const uint8_t *)fort, sizeof fort - 1, &dt, &nd, sh, &off) < 0);
    CHECK(npy_parse_header(h2, 40, &dt, &nd, sh, &off) < 0); /* truncated */
}

static void test_weights_file(void)
{
    float k[8] = {1, -2, 3.25f, 4, 5, 6, 7, 8}, b[2] = {0.5f, -0.5f};
    rt_client_tensor t[2];
    memset(t, 0, sizeof t);
    t[0].name = "dense/kernel";
    t[0].dtype = RT_DTYPE_F32;
    t[0].ndim = 2;
    t[0].shape[0] = 4;
    t[0].shape[1] = 2;
    t[0].data = k;
    t[0].nbytes = sizeof k;
    t[1].name = "dense/bias";
    t[1].dtype = RT_DTYPE_F32;
    t[1].ndim = 1;
    t[1].shape[0] = 2;
    t[1].data = b;
    t[1].nbytes = sizeof b;
    rt_client_weights w = {t, 2, 123};
    char err[256];
    CHECK(rt_client_weights_save(&w, tpath("w.bin"), err, sizeof err) == 0);
    rt_client_weights r;
    CHECK(rt_client_weights_load(&r, tpath("w.bin"), err, sizeof err) == 0);
    CHECK(r.n == 2 && r.global_step == 123);
    if (r.n == 2) {
        CHECK(!strcmp(r.t[0].name, "dense/kernel") && r.t[0].ndim == 2 &&
              r.t[0].shape[1] == 2 && r.t[0].nbytes == sizeof k &&
              !memcmp(r.t[0].data, k, sizeof k));
        CHECK(!strcmp(r.t[1].name, "dense/bias") && !memcmp(r.t[1].data, b, sizeof b));
        CHECK(rt_client_tensor_numel(&r.t[0]) == 8);
        CHECK(!strcmp(rt_client_dtype_name(r.t[0].dtype), "f32"));
    }
    CHECK(!strcmp(rt_client_dtype_name(RT_DTYPE_U8), "u8") &&
          !strcmp(rt_client_dtype_name((rt_client_dtype)99), "?"));
    rt_client_weights_free(&r);
    rt_client_weights_free(&r); /* a zeroed struct is a no-op */
    rt_client_weights_free(NULL);

    /* Damage: one flipped byte, truncation, wrong magic, missing file. */
    size_t len;
    char *buf = cli_read_file(tpath("w.bin"), &len);
    CHECK(buf != NULL);
    if (!buf)
        return;
    FILE *f = fopen(tpath("bad.bin"), "wb");
    buf[40] ^= 1;
    fwrite(buf, 1, len, f);
    fclose(f);
    CHECK(rt_client_weights_load(&r, tpath("bad.bin"), err, sizeof err) == RT_ECHECKSUM);
    CHECK(strstr(err, "checksum") != NULL && r.n == 0 && r.t == NULL);
    buf[40] ^= 1;
    f = fopen(tpath("short.bin"), "wb");
    fwrite(buf, 1, len / 2, f);
    fclose(f);
    CHECK(rt_client_weights_load(&r, tpath("short.bin"), err, sizeof err) < 0);
    f = fopen(tpath("magic.bin"), "wb");
    fwrite("NOTWEIGH", 1, 8, f);
    fwrite(buf + 8, 1, len - 8, f);
    fclose(f);
    CHECK(rt_client_weights_load(&r, tpath("magic.bin"), err, sizeof err) == RT_EDATA);
    CHECK(rt_client_weights_load(&r, tpath("missing.bin"), err, sizeof err) == RT_ENOTFOUND);
    free(buf);
}

static void test_trace(void)
{
    rt_client_timings c[2];
    memset(c, 0, sizeof c);
    c[0].method = "Compile";
    c[0].start_ns = 1000000;
    c[0].client_encode_ns = 2000;
    c[0].round_trip_ns = 50000;
    c[0].client_decode_ns = 1000;
    c[0].client_total_ns = 55000;
    c[0].has_server = 1;
    c[0].decode_ns = 1000;
    c[0].compile_ns = 30000;
    c[0].encode_ns = 500;
    c[0].server_other_ns = 500;
    c[0].server_total_ns = 32000;
    c[0].wire_ns = 18000;
    c[1] = c[0];
    c[1].method = "RunSteps";
    c[1].start_ns = 2000000;
    c[1].compile_ns = 0;
    c[1].execute_ns = 30000;
    CHECK(rt_client_trace_write_calls(c, 2, tpath("trace.json")) == 0);
    json_object *root = json_object_from_file(tpath("trace.json"));
    CHECK(root != NULL);
    if (!root)
        return;
    json_object *evs;
    CHECK(json_object_object_get_ex(root, "traceEvents", &evs) &&
          json_object_is_type(evs, json_type_array));
    size_t n = json_object_array_length(evs);
    int x_events = 0, names_ok = 1, inside = 1;
    double rtt_start[2] = {0}, rtt_end[2] = {0};
    int call = -1;
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(evs, i), *v;
        if (!json_object_object_get_ex(e, "ph", &v))
            names_ok = 0;
        if (strcmp(json_object_get_string(v), "X") != 0)
            continue;
        x_events++;
        const char *keys[] = {"name", "ts", "dur", "pid", "tid"};
        for (int k = 0; k < 5; k++)
            if (!json_object_object_get_ex(e, keys[k], &v))
                names_ok = 0;
        json_object_object_get_ex(e, "name", &v);
        const char *nm = json_object_get_string(v);
        json_object *ts, *dur, *tid;
        json_object_object_get_ex(e, "ts", &ts);
        json_object_object_get_ex(e, "dur", &dur);
        json_object_object_get_ex(e, "tid", &tid);
        double s = json_object_get_double(ts), d = json_object_get_double(dur);
        if (!strcmp(nm, "Compile")) call = 0;
        if (!strcmp(nm, "RunSteps")) call = 1;
        if (!strcmp(nm, "round trip")) {
            rtt_start[call] = s;
            rtt_end[call] = s + d;
            CHECK(json_object_get_int(tid) == 1);
        }
        if (json_object_get_int(tid) == 2 &&
            (s < rtt_start[call] - 1e-6 || s + d > rtt_end[call] + 1e-6))
            inside = 0;
    }
    CHECK(names_ok);
    CHECK(inside); /* server phases lie inside the client's round trip */
    CHECK(x_events == 2 * 4 + 2 * 5); /* call + 3 client phases; total + 4 phases */
    CHECK(fabs(rtt_end[0] - rtt_start[0] - 50.0) < 1e-6);
    json_object_put(root);
    CHECK(rt_client_trace_write_calls(c, 2, "/nonexistent/dir/t.json") == RT_EIO);
}

/* bench story --explain: a phase's wall time splits into client, wire and
 * server from its calls' accounts, the rest unattributed; the spans carry
 * the same numbers into the trace. */
static void test_waterfall(void)
{
    rt_client_timings c[3];
    memset(c, 0, sizeof c);
    c[0].method = "FindDataset";
    c[0].start_ns = 1000000;
    c[0].round_trip_ns = 40000;
    c[0].client_total_ns = 52000;  /* 12 us of client around the round trip */
    c[0].has_server = 1;
    c[0].server_total_ns = 5000;
    c[0].server_other_ns = 1000;   /* the daemon's own unattributed part */
    c[1] = c[0];
    c[1].method = "UploadDataset";
    c[1].start_ns = 1060000;
    c[1].client_stream_ns = 3000;  /* inside the round trip: client, not wire */
    c[1].server_stream_wait_ns = 400; /* of its other: the stream's, so wire */
    c[2] = c[0];
    c[2].start_ns = 3000000;       /* outside the phase */
    cli_waterfall w;
    memset(&w, 0, sizeof w);
    w.t0 = 900000;
    cli_phase *p = cli_wf_calls(&w, "upload", 1000000, 1200000, c, 3, 2000);
    CHECK(p != NULL && w.n == 1);
    if (!p)
        return;
    CHECK(p->server_ns == 8000);                 /* 2 x (5 - 1) */
    CHECK(p->client_ns == 12000 + 15000 + 2000); /* around, around + stream, extra */
    CHECK(p->wire_ns == 35000 + 32000 + 400);    /* rtt - server - stream + wait */
    CHECK(p->unattr_ns == 200000 - 8000 - 29000 - 67400);
    CHECK(p->has_server);
    /* A phase with no measured server (connect) and one fully spent. */
    cli_phase *q = cli_wf_add(&w, "connect", 0, 900000, 100000);
    q->client_ns = 60000;
    q->wire_ns = 50000; /* overlap: the sum is over the wall time */
    cli_wf_close(q);
    CHECK(q->unattr_ns == 0 && !q->has_server);
    CHECK(cli_wf_add(&w, "part", 1, 900000, 10) != NULL && w.n == 3);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cli_wf_print(f, &w, "title");
    fclose(f);
    CHECK(buf && strstr(buf, "upload") && strstr(buf, "  part") && strstr(buf, "total"));
    CHECK(buf && !strstr(buf, "preempted")); /* none counted: no line */
    free(buf);
    w.preempted = 3;
    f = open_memstream(&buf, &len);
    cli_wf_print(f, &w, "title");
    fclose(f);
    CHECK(buf && strstr(buf, "preempted 3 times"));
    free(buf);
    w.preempted = 0;
    rt_client_trace_span sp[4];
    size_t ns = cli_wf_spans(&w, "phases", "parts", sp, 4);
    CHECK(ns == 3 && !strcmp(sp[2].track, "parts") && sp[0].server_ns == 8000);
    CHECK(rt_client_trace_write_spans(c, 2, sp, ns, tpath("spans.json")) == 0);
    json_object *root = json_object_from_file(tpath("spans.json")), *evs, *v, *a;
    CHECK(root && json_object_object_get_ex(root, "traceEvents", &evs));
    int phases = 0, nulls = 0, tracks = 0;
    for (size_t i = 0; root && i < json_object_array_length(evs); i++) {
        json_object *e = json_object_array_get_idx(evs, i);
        if (json_object_object_get_ex(e, "name", &v) &&
            !strcmp(json_object_get_string(v), "thread_name") &&
            json_object_object_get_ex(e, "tid", &v) && json_object_get_int(v) >= 3)
            tracks++;
        if (!json_object_object_get_ex(e, "cat", &v) ||
            strcmp(json_object_get_string(v), "phase") != 0)
            continue;
        phases++;
        CHECK(json_object_object_get_ex(e, "args", &a));
        CHECK(json_object_object_get_ex(a, "server_us", &v));
        if (json_object_is_type(v, json_type_null))
            nulls++;
        else if (json_object_object_get_ex(e, "name", &v) &&
                 !strcmp(json_object_get_string(v), "upload")) {
            json_object_object_get_ex(a, "server_us", &v);
            CHECK(fabs(json_object_get_double(v) - 8.0) < 1e-9);
            json_object_object_get_ex(a, "unattributed_us", &v);
            CHECK(fabs(json_object_get_double(v) - 95.6) < 1e-9);
        }
    }
    CHECK(phases == 3 && nulls == 2 && tracks == 2);
    json_object_put(root);
}

static void test_svg(void)
{
    double xs[4] = {1, 2, 4, 8}, a[4] = {100, 50, 25, 12.5}, b[4] = {1, 1, 1, 1},
           p[4] = {40, 20, 10, 5};
    cli_series s[3] = {{"per step", "#1f77b4", 0, a}, {"compute", "#2ca02c", 0, b},
                       {"Ping floor", "#d62728", 1, p}};
    CHECK(cli_svg_plot(tpath("p.svg"), "title", "K", "us", xs, 4, s, 3) == 0);
    size_t len;
    char *svg = cli_read_file(tpath("p.svg"), &len);
    CHECK(svg != NULL);
    if (!svg)
        return;
    CHECK(strstr(svg, "<svg") != NULL && strstr(svg, "</svg>") != NULL);
    int poly = 0;
    for (char *q = svg; (q = strstr(q, "<polyline")); q++)
        poly++;
    CHECK(poly == 3);
    CHECK(strstr(svg, "Ping floor") && strstr(svg, "stroke-dasharray"));
    CHECK(strstr(svg, ">100<") != NULL); /* a decade tick label */
    free(svg);
    double zero[4] = {0, 0, 0, 0};
    cli_series z = {"z", NULL, 0, zero};
    CHECK(cli_svg_plot(tpath("z.svg"), "t", "x", "y", xs, 4, &z, 1) == RT_EINVAL);
}

static void test_model_encoding(void)
{
    rt_model *m = rt_model_create();
    int64_t in[2] = {-1, 4};
    const char *h, *y;
    CHECK(rt_model_add_input(m, "x", RT_DTYPE_F32, 2, in) == 0);
    CHECK(rt_model_dense(m, "dense", "x", 4, 32, "relu", &h) == 0);
    CHECK(rt_model_dense(m, "dense_1", h, 32, 3, "softmax", &y) == 0);
    CHECK(!strcmp(h, "dense/act") && !strcmp(y, "dense_1/act"));
    CHECK(rt_model_set_output(m, y) == 0);
    int64_t ints[2] = {2, 2};
    rt_model_attr at[2] = {{.name = "pool", .kind = RT_MODEL_ATTR_INTS, .n = 2, .ints = ints},
                           {.name = "padding", .kind = RT_MODEL_ATTR_STR, .s = "same"}};
    const char *pin[1] = {"x"};
    CHECK(rt_model_add_node(m, "pool", "MaxPool2D", 1, pin, 2, at) == 0);
    float val[3] = {1, 2, 3};
    int64_t vs[1] = {3};
    CHECK(rt_model_add_param(m, "p", 1, vs, RT_MODEL_INIT_ZEROS, 0, val) == 0);
    /* Bad input is refused, never recorded. */
    CHECK(rt_model_add_input(m, "", RT_DTYPE_F32, 2, in) == RT_EINVAL);
    CHECK(rt_model_add_input(m, "q", (rt_client_dtype)9, 2, in) == RT_EINVAL);
    CHECK(rt_model_add_node(m, "n", "Relu", 1, NULL, 0, NULL) == RT_EINVAL);
    CHECK(rt_model_dense(m, "d", "x", 4, 3, "swish", NULL) == RT_EINVAL);
    CHECK(rt_model_add_param(m, "q", 9, vs, RT_MODEL_INIT_ZEROS, 1, NULL) == RT_EINVAL);

    /* Pack and unpack: what the daemon will see. */
    Rtrain__V1__Graph *g = rt__model_graph(m);
    size_t len = protobuf_c_message_get_packed_size(&g->base);
    uint8_t *buf = malloc(len);
    protobuf_c_message_pack(&g->base, buf);
    Rtrain__V1__Graph *u = rtrain__v1__graph__unpack(NULL, len, buf);
    CHECK(u != NULL);
    if (u) {
        CHECK(u->n_inputs == 1 && u->inputs[0]->shape[0] == -1 && u->inputs[0]->shape[1] == 4);
        CHECK(u->n_params == 5 && !strcmp(u->params[0]->name, "dense/kernel"));
        CHECK(u->params[0]->shape[0] == 4 && u->params[0]->shape[1] == 32);
        CHECK(u->params[1]->init == RTRAIN__V1__INITIALIZER__INIT_ZEROS);
        CHECK(u->params[4]->value && u->params[4]->value->data.len == 12 && !u->params[4]->trainable);
        CHECK(u->n_nodes == 5 && !strcmp(u->nodes[0]->op, "Dense") && u->nodes[0]->n_inputs == 3);
        CHECK(!strcmp(u->nodes[1]->op, "Relu") && !strcmp(u->nodes[1]->inputs[0], "dense"));
        CHECK(!strcmp(u->nodes[3]->op, "Softmax") && !strcmp(u->output, "dense_1/act"));
        CHECK(u->nodes[4]->n_attrs == 2 && u->nodes[4]->attrs[0]->ints->n_v == 2 &&
              !strcmp(u->nodes[4]->attrs[1]->s, "same"));
        rtrain__v1__graph__free_unpacked(u, NULL);
    }
    free(buf);
    rt_model_destroy(m);
    rt_model_destroy(NULL);
}

/* A port with nobody listening: bind, read the port, close. */
static int dead_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof a;
    bind(s, (struct sockaddr *)&a, sizeof a);
    getsockname(s, (struct sockaddr *)&a, &l);
    close(s);
    return ntohs(a.sin_port);
}

static void test_client_offline(void)
{
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", dead_port());
    rt_client *c = NULL;
    CHECK(rt_client_create(target, &c) == 0 && c);
    if (!c)
        return;
    CHECK(!strcmp(rt_client_target(c), target));
    rt_client_timings t;
    CHECK(rt_client_last_timings(c, &t) == RT_ENOTFOUND);
    rt_client_set_timeout_ms(c, 5000);
    uint64_t rtt = 0;
    int rc = rt_client_ping(c, 0, &rtt);
    CHECK(rc == RT_EUNAVAILABLE);
    CHECK(strstr(rt_client_errmsg(c), target) != NULL);
    CHECK(rt_client_grpc_status(c) == 14);
    CHECK(rt_client_last_timings(c, &t) == 0 && !strcmp(t.method, "Ping") && !t.has_server);

    /* Argument errors come before any I/O, with a message. */
    char sid[RT_ID_MAX];
    rt_client_dataset ds;
    float x[8] = {0};
    int32_t y[3] = {0};
    rt_client_array xa = {x, RT_DTYPE_F32, 2, {2, 4}}, ya = {y, RT_DTYPE_I32, 1, {3}};
    CHECK(rt_client_upload(c, "s-1", "d", &xa, &ya, &ds) == RT_ESHAPE);
    CHECK(strstr(rt_client_errmsg(c), "labels") != NULL);
    CHECK(rt_client_upload_csv(c, "s-1", "d", tpath("nope.csv"), -1, 0, &ds) == RT_EIO);
    CHECK(strstr(rt_client_errmsg(c), "nope.csv") != NULL);
    CHECK(rt_client_upload_csv(c, "", "d", tpath("nope.csv"), -1, 0, &ds) == RT_EINVAL);
    rt_client_steps_params sp = {.session = "s-1", .program = "p-1", .dataset = "d-1", .steps = 0};
    rt_client_steps_result sr;
    CHECK(rt_client_run_steps(c, &sp, &sr) == RT_EINVAL);
    rt_client_fit_params fp = {.session = "s-1", .program = "", .dataset = "d", .epochs = 1};
    CHECK(rt_client_fit(c, &fp, NULL, NULL) == RT_EINVAL);
    CHECK(strstr(rt_client_errmsg(c), "program") != NULL);
    CHECK(rt_client_compile_keras(c, "s-1", "", NULL, NULL) == RT_EINVAL);

    /* The trace records failed calls too. */
    rt_client_trace_enable(c, 1);
    CHECK(rt_client_session_create(c, "x", sid) == RT_EUNAVAILABLE);
    size_t n;
    const rt_client_timings *calls = rt_client_trace_calls(c, &n);
    CHECK(n == 1 && calls && !strcmp(calls[0].method, "CreateSession"));
    rt_client_cancel(c); /* no call in flight: harmless */

    /* DEADLINE_EXCEEDED: gRPC's own text is the client's deadline (the
     * generic hint); a daemon's message names its cause and is kept. */
    rt__call_begin(c, RT__M_COMPILE);
    CHECK(rt__status(c, GRPC_STATUS_DEADLINE_EXCEEDED,
                     grpc_slice_from_static_string("Deadline Exceeded"), NULL) == RT_ETIMEDOUT);
    CHECK(strstr(rt_client_errmsg(c), "did not finish in time") &&
          strstr(rt_client_errmsg(c), "Compile"));
    const char *why = "compile ran past its budget of 2 s (--compile-timeout)";
    CHECK(rt__status(c, GRPC_STATUS_DEADLINE_EXCEEDED, grpc_slice_from_copied_string(why),
                     NULL) == RT_ETIMEDOUT);
    CHECK(strstr(rt_client_errmsg(c), why) && strstr(rt_client_errmsg(c), "DEADLINE_EXCEEDED") &&
          !strstr(rt_client_errmsg(c), "did not finish in time"));
    rt_client_destroy(c);
    rt_client_destroy(NULL);

    CHECK(rt_client_create(NULL, NULL) == RT_EINVAL);
}

/* The option table behind the parser and `rtrain CMD --help`: every option
 * a command's help lists, that command accepts; every other option it
 * refuses as not applying to it. */
static void test_option_table(void)
{
    static const struct { cli_cmd c; const char *w1, *w2; } cmds[] = {
        {CLI_INFO, "info", NULL}, {CLI_PING, "ping", NULL}, {CLI_FIT, "fit", NULL},
        {CLI_EVAL, "eval", NULL}, {CLI_PREDICT, "predict", NULL}, {CLI_EXPORT, "export", NULL},
        {CLI_BENCH_OVERHEAD, "bench", "overhead"}, {CLI_BENCH_STORY, "bench", "story"},
        {CLI_CKPT_PULL, "checkpoint", "pull"}, {CLI_CKPT_PUSH, "checkpoint", "push"},
    };
    enum { NC = sizeof cmds / sizeof cmds[0], MAXF = 128 };
    static char names[NC][MAXF][40];
    static int has_arg[NC][MAXF];
    int n[NC] = {0};
    for (int i = 0; i < NC; i++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        cli_usage_cmd(f, cmds[i].c);
        fclose(f);
        for (char *p = buf; p && *p && n[i] < MAXF; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
            if (!strncmp(p, "  --", 4)) {
                size_t w = strcspn(p + 4, " \n");
                snprintf(names[i][n[i]], sizeof names[i][0], "--%.*s", (int)w, p + 4);
                has_arg[i][n[i]++] = p[4 + w] == ' ' && p[5 + w] != ' ';
            }
        free(buf);
        CHECK(n[i] >= 8);
    }
    cli_opts o;
    char err[256];
    int accepted = 0, refused = 0;
    for (int i = 0; i < NC; i++)
        for (int j = 0; j < NC; j++)
            for (int k = 0; k < n[j]; k++) {
                int listed = 0;
                for (int m = 0; m < n[i]; m++)
                    listed |= !strcmp(names[i][m], names[j][k]);
                err[0] = 0;
                char *argv[6] = {"rtrain", (char *)cmds[i].w1};
                int argc = 2;
                if (cmds[i].w2)
                    argv[argc++] = (char *)cmds[i].w2;
                argv[argc++] = names[j][k];
                if (has_arg[j][k])
                    argv[argc++] = "1";
                argv[argc] = NULL;
                cli_parse(argc, argv, &o, err, sizeof err);
                int not_here = strstr(err, "does not apply") || strstr(err, "unknown option");
                if (listed) {
                    CHECK(!not_here);
                    accepted++;
                } else {
                    CHECK(strstr(err, "does not apply") != NULL);
                    refused++;
                }
                if (listed == not_here)
                    fprintf(stderr, "  rtrain %s %s %s: '%s'\n", cmds[i].w1,
                            cmds[i].w2 ? cmds[i].w2 : "", names[j][k], err);
            }
    CHECK(accepted > 100 && refused > 100);
    /* a range in the table is the range in the message */
    CHECK(parse(&o, err, "fit", "--epochs", "0", NULL) < 0 &&
          strstr(err, "--epochs: expected an integer in 1..1000000, got '0'"));
    CHECK(parse(&o, err, "fit", "--reduction", "max", NULL) < 0 &&
          strstr(err, "--reduction: one of mean|sum"));
    CHECK(parse(&o, err, "fit", "--loss-check", "off", "--model", "m.json", "--data", "t.csv",
                "--loss", "mse", NULL) == 0 && o.no_loss_check == 1);
}

int main(int argc, char **argv)
{
    tmpdir = argc > 1 ? argv[1] : "/tmp";
    test_parse();
    test_option_table();
    test_exit_codes();
    test_kinds_and_stats();
    test_progress();
    test_npy();
    test_weights_file();
    test_trace();
    test_waterfall();
    test_svg();
    test_model_encoding();
    test_client_offline();
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
