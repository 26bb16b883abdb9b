/* test_stream_rows.c - RAW, NPY, CSV and IDX (plain and gzip'ed) datasets
 * streamed from the spool (rt_stream.h rows): the batches hold, bit for
 * bit, the rows of the same upload parsed into memory, in file order
 * without shuffling and in the shuffle buffer's order with it; labels and
 * sample weights follow the rows; bad values fail with the in-memory
 * path's message; the same whether the spool is read by workers or from a
 * mapping; AUTO streams above --stream-above only; the store key tells the
 * storages apart.
 *
 * Usage: test_stream_rows SPOOL_DIR */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "rt_data.h"
#include "rt_example.h"
#include "rt_stream.h"
#include "rtrain/rt_error.h"

#include "../lib/rt_check.h"

static const char *spool_dir;
static int want_mapped; /* the streams of this pass are mapped */

/* a growable byte buffer */
typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        REQUIRE(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void put_be32(buf *b, uint32_t v)
{
    uint8_t q[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    put(b, q, 4);
}

/* IDX of type t with dims; values written big-endian by the caller */
static void idx_header(buf *b, uint8_t t, int nd, const uint32_t *dims)
{
    uint8_t h[4] = {0, 0, t, (uint8_t)nd};
    put(b, h, 4);
    for (int i = 0; i < nd; i++)
        put_be32(b, dims[i]);
}

static buf gzip(const buf *in)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    buf out = {0};
    out.cap = deflateBound(&z, in->n) + 64;
    out.p = malloc(out.cap);
    REQUIRE(out.p);
    z.next_in = in->p;
    z.avail_in = (uInt)in->n;
    z.next_out = out.p;
    z.avail_out = (uInt)out.cap;
    REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
    out.n = out.cap - z.avail_out;
    deflateEnd(&z);
    return out;
}

static void npy(buf *b, const char *descr, int64_t n, int64_t per)
{
    char h[128];
    int hl = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': (%lld, %lld), }",
                      descr, (long long)n, (long long)per);
    int total = 10 + hl + 1;
    int pad = (64 - total % 64) % 64;
    uint8_t pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (uint8_t)(hl + pad + 1),
                       (uint8_t)((hl + pad + 1) >> 8)};
    put(b, pre, 10);
    put(b, h, (size_t)hl);
    for (int i = 0; i < pad; i++)
        put(b, " ", 1);
    put(b, "\n", 1);
}

/* Parse the parts (bytes back to back in data) with the features part's
 * storage set to st. */
static int parse(rt_data_part *parts, int np, const buf *data, int st, int64_t shuffle,
                 rt_dataset **out, char *err, size_t errlen)
{
    for (int i = 0; i < np; i++)
        if (parts[i].role == RT_ROLE_FEATURES || parts[i].role == RT_ROLE_BOTH) {
            parts[i].storage = st;
            parts[i].shuffle_buffer = shuffle;
        }
    uint8_t *copy = malloc(data->n);
    REQUIRE(copy);
    memcpy(copy, data->p, data->n);
    int rc = rt_data_parse_take(parts, np, &copy, data->n, UINT64_C(1) << 32, 0, NULL, out, err,
                                errlen);
    free(copy);
    return rc;
}

static int64_t per_of(const rt_dataset *ds) { return rt_data_numel(ds->x_ndim, ds->x_dims); }

/* Every epoch read through the stream equals the in-memory rows in the
 * stream's order; labels and weights follow. */
static void compare(const char *what, rt_data_part *parts, int np, const buf *data)
{
    char err[256];
    rt_dataset *mem = NULL, *str = NULL;
    int rc = parse(parts, np, data, RT_STORAGE_MEMORY, 0, &mem, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "%s: memory: %s\n", what, err);
    REQUIRE(rc == 0);
    rc = parse(parts, np, data, RT_STORAGE_STREAM, 7, &str, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "%s: stream: %s\n", what, err);
    REQUIRE(rc == 0);
    CHECK(!mem->stream && mem->x);
    CHECK(str->stream && !str->x);
    CHECK(rt_stream_mapped(str->stream) == want_mapped);
    CHECK(str->n == mem->n);
    CHECK(str->x_ndim == mem->x_ndim);
    CHECK(memcmp(str->x_dims, mem->x_dims, sizeof mem->x_dims) == 0);
    CHECK(str->y_dtype == mem->y_dtype && str->y_ndim == mem->y_ndim);
    const int64_t n = mem->n, per = per_of(mem), lab = rt_data_numel(mem->y_ndim, mem->y_dims);
    if (mem->y)
        CHECK(memcmp(str->y, mem->y, (size_t)(n * lab) * 4) == 0);
    CHECK((mem->sw == NULL) == (str->sw == NULL));
    CHECK(rt_stream_shuffle_buffer(str->stream) == 7);
    const int64_t B = 5;
    float *x = malloc(sizeof(float) * (size_t)(B * per));
    int32_t *y = malloc(4 * (size_t)(B * (lab > 0 ? lab : 1)));
    float *w = malloc(sizeof(float) * (size_t)B);
    int64_t *order = malloc(sizeof(int64_t) * (size_t)n);
    REQUIRE(x && y && w && order);
    /* eval, then training without and with shuffling, two epochs each */
    for (int mode = 0; mode < 5; mode++) {
        const int shuffle = mode >= 3;
        const int64_t epoch = mode == 0 ? RT_EPOCH_EVAL : (mode - 1) % 2;
        rt_stream_use u = {.st = str->stream, .seed = 11, .batch = B, .shuffle = shuffle,
                           .y = str->y, .lab_per = lab, .sw = str->sw};
        if (shuffle)
            REQUIRE(rt_stream_order(n, 7, 11, epoch, order) == 0);
        else
            for (int64_t k = 0; k < n; k++)
                order[k] = k;
        int bad = 0;
        for (int64_t pos = 0; pos * B < n; pos++) {
            int64_t nb = n - pos * B < B ? n - pos * B : B;
            rc = rt_stream_fill(&u, epoch, pos, nb, x, str->y ? y : NULL, str->sw ? w : NULL, err,
                                sizeof err);
            if (rc < 0)
                fprintf(stderr, "%s: fill: %s\n", what, err);
            REQUIRE(rc == 0);
            for (int64_t r = 0; r < nb; r++) {
                const int64_t s = order[pos * B + r];
                bad += memcmp(x + r * per, mem->x + s * per, sizeof(float) * (size_t)per) != 0;
                if (mem->y)
                    bad += memcmp((char *)y + r * lab * 4, (char *)mem->y + s * lab * 4,
                                  (size_t)lab * 4) != 0;
                if (mem->sw)
                    bad += memcmp(&w[r], &mem->sw[s], 4) != 0;
            }
        }
        if (bad)
            fprintf(stderr, "%s: mode %d: %d rows differ\n", what, mode, bad);
        CHECK(bad == 0);
    }
    /* the shuffle buffer moves samples: an epoch is not the file order */
    if (n > 8) {
        int same = 1;
        for (int64_t k = 0; k < n; k++)
            same &= order[k] == k;
        CHECK(!same);
    }
    free(x);
    free(y);
    free(w);
    free(order);
    rt_dataset_release(mem);
    rt_dataset_release(str);
}

static void test_formats(void)
{
    const int64_t n = 23; /* 5 batches of 5, the last short */
    /* IDX u8 images (n, 3, 4) and u8 labels, normalised, plain and gzip'ed */
    buf xi = {0}, yi = {0};
    uint32_t dx[3] = {(uint32_t)n, 3, 4}, dy[1] = {(uint32_t)n};
    idx_header(&xi, 0x08, 3, dx);
    idx_header(&yi, 0x08, 1, dy);
    for (int64_t i = 0; i < n * 12; i++) {
        uint8_t v = (uint8_t)(i * 37 + 11);
        put(&xi, &v, 1);
    }
    for (int64_t i = 0; i < n; i++) {
        uint8_t v = (uint8_t)(i % 10);
        put(&yi, &v, 1);
    }
    for (int gz = 0; gz < 2; gz++) {
        buf a = gz ? gzip(&xi) : xi, b = gz ? gzip(&yi) : yi, all = {0};
        put(&all, a.p, a.n);
        put(&all, b.p, b.n);
        for (int norm = 0; norm < 2; norm++) {
            rt_data_part p[2] = {
                {.role = RT_ROLE_FEATURES, .format = RT_FMT_IDX, .length = a.n, .normalize = norm},
                {.role = RT_ROLE_LABELS, .format = RT_FMT_IDX, .length = b.n}};
            compare(gz ? "IDX.gz u8" : "IDX u8", p, 2, &all);
        }
        if (gz) {
            free(a.p);
            free(b.p);
        }
        free(all.p);
    }
    /* IDX i16 and f64, big-endian, gzip'ed: converted to f32 rows */
    for (int t = 0; t < 2; t++) {
        buf x = {0};
        uint32_t d2[2] = {(uint32_t)n, 6};
        idx_header(&x, t ? 0x0E : 0x0B, 2, d2);
        for (int64_t i = 0; i < n * 6; i++) {
            if (t) {
                double v = (double)(i - 40) / 3.0;
                uint64_t u;
                memcpy(&u, &v, 8);
                put_be32(&x, (uint32_t)(u >> 32));
                put_be32(&x, (uint32_t)u);
            } else {
                int16_t v = (int16_t)(i * 911 - 20000);
                uint8_t q[2] = {(uint8_t)((uint16_t)v >> 8), (uint8_t)v};
                put(&x, q, 2);
            }
        }
        buf g = gzip(&x), all = {0};
        put(&all, g.p, g.n);
        put(&all, yi.p, yi.n);
        rt_data_part p[2] = {{.role = RT_ROLE_FEATURES, .format = RT_FMT_IDX, .length = g.n},
                             {.role = RT_ROLE_LABELS, .format = RT_FMT_IDX, .length = yi.n}};
        compare(t ? "IDX.gz f64" : "IDX.gz i16", p, 2, &all);
        free(x.p);
        free(g.p);
        free(all.p);
    }
    /* NPY f32 and f64 features, f32 labels (n, 2) */
    for (int t = 0; t < 2; t++) {
        buf x = {0}, y = {0}, all = {0};
        npy(&x, t ? "<f8" : "<f4", n, 7);
        for (int64_t i = 0; i < n * 7; i++) {
            double v = sin((double)i) * 1e3;
            if (t) {
                put(&x, &v, 8);
            } else {
                float f = (float)v;
                put(&x, &f, 4);
            }
        }
        npy(&y, "<f4", n, 2);
        for (int64_t i = 0; i < n * 2; i++) {
            float f = (float)i / 8;
            put(&y, &f, 4);
        }
        put(&all, x.p, x.n);
        put(&all, y.p, y.n);
        rt_data_part p[2] = {{.role = RT_ROLE_FEATURES, .format = RT_FMT_NPY, .length = x.n},
                             {.role = RT_ROLE_LABELS, .format = RT_FMT_NPY, .length = y.n}};
        compare(t ? "NPY f64" : "NPY f32", p, 2, &all);
        free(x.p);
        free(y.p);
        free(all.p);
    }
    /* RAW i32 features with int labels and sample weights */
    {
        buf all = {0};
        for (int64_t i = 0; i < n * 3; i++) {
            int32_t v = (int32_t)(i * 7919 - 100000);
            put(&all, &v, 4);
        }
        for (int64_t i = 0; i < n; i++) {
            int32_t v = (int32_t)(i % 3);
            put(&all, &v, 4);
        }
        for (int64_t i = 0; i < n; i++) {
            float v = 0.25f * (float)(i % 5);
            put(&all, &v, 4);
        }
        rt_data_part p[3] = {
            {.role = RT_ROLE_FEATURES, .format = RT_FMT_RAW, .length = (uint64_t)n * 12,
             .dtype = RT_I32, .ndim = 2, .dims = {n, 3}},
            {.role = RT_ROLE_LABELS, .format = RT_FMT_RAW, .length = (uint64_t)n * 4,
             .dtype = RT_I32, .ndim = 1, .dims = {n}},
            {.role = RT_ROLE_SAMPLE_WEIGHTS, .format = RT_FMT_RAW, .length = (uint64_t)n * 4,
             .dtype = RT_F32, .ndim = 1, .dims = {n}}};
        compare("RAW i32 + weights", p, 3, &all);
        free(all.p);
    }
    /* CSV with the label in the middle column, a header, blank lines */
    {
        buf all = {0};
        const char *h = "a,b,label,c\n";
        put(&all, h, strlen(h));
        for (int64_t i = 0; i < n; i++) {
            char line[128];
            int k = snprintf(line, sizeof line, "%.9g, %lld ,%lld,%g\r\n%s", 0.1 * (double)i,
                             (long long)(i * i), (long long)(i % 4), -1.5e-3 * (double)i,
                             i == 4 ? "\n" : "");
            put(&all, line, (size_t)k);
        }
        rt_data_part p[1] = {{.role = RT_ROLE_BOTH, .format = RT_FMT_CSV, .length = all.n,
                              .label_column = 2, .csv_header = 1}};
        compare("CSV both", p, 1, &all);
        rt_data_part q[1] = {{.role = RT_ROLE_FEATURES, .format = RT_FMT_CSV, .length = all.n,
                              .csv_header = 1}};
        compare("CSV features", q, 1, &all);
        free(all.p);
    }
    free(xi.p);
    free(yi.p);
}

/* The same failure, code and message, streamed and in memory. */
static void same_error(const char *what, rt_data_part *parts, int np, const buf *data,
                       const char *needle)
{
    char e1[256] = "", e2[256] = "";
    rt_dataset *a = NULL, *b = NULL;
    int r1 = parse(parts, np, data, RT_STORAGE_MEMORY, 0, &a, e1, sizeof e1);
    int r2 = parse(parts, np, data, RT_STORAGE_STREAM, 0, &b, e2, sizeof e2);
    if (r1 != r2 || strcmp(e1, e2) != 0 || !strstr(e2, needle))
        fprintf(stderr, "%s: memory %d '%s', stream %d '%s'\n", what, r1, e1, r2, e2);
    CHECK(r1 < 0 && r1 == r2);
    CHECK(strcmp(e1, e2) == 0);
    CHECK(strstr(e2, needle) != NULL);
    CHECK(!a && !b);
}

static void test_bad(void)
{
    /* NaN in NPY f32 at sample 3, column 2 */
    buf x = {0};
    npy(&x, "<f4", 6, 4);
    for (int i = 0; i < 24; i++) {
        float f = i == 14 ? NAN : (float)i;
        put(&x, &f, 4);
    }
    rt_data_part p[1] = {{.role = RT_ROLE_FEATURES, .format = RT_FMT_NPY, .length = x.n}};
    same_error("NPY NaN", p, 1, &x, "NaN at sample 3, column 2");
    free(x.p);
    /* a CSV value outside float32's range, and Inf */
    const char *csv = "1,2,0\n3,1e39,1\n";
    buf c = {0};
    put(&c, csv, strlen(csv));
    rt_data_part q[1] = {{.role = RT_ROLE_BOTH, .format = RT_FMT_CSV, .length = c.n,
                          .label_column = -1}};
    same_error("CSV range", q, 1, &c, "outside float32's range");
    free(c.p);
    /* IDX.gz: truncated, and more data than its header declares */
    buf xi = {0};
    uint32_t d[2] = {40, 10};
    idx_header(&xi, 0x08, 2, d);
    for (int i = 0; i < 400; i++) {
        uint8_t v = (uint8_t)(i * 13);
        put(&xi, &v, 1);
    }
    buf g = gzip(&xi);
    buf t = {0};
    put(&t, g.p, g.n / 2);
    rt_data_part r[1] = {{.role = RT_ROLE_FEATURES, .format = RT_FMT_IDX, .length = t.n}};
    char e[256];
    rt_dataset *ds = NULL;
    CHECK(parse(r, 1, &t, RT_STORAGE_STREAM, 0, &ds, e, sizeof e) == RT_EDATA && !ds);
    CHECK(strstr(e, "gzip") != NULL);
    uint8_t extra[16] = {1, 2, 3};
    put(&xi, extra, sizeof extra);
    buf g2 = gzip(&xi);
    r[0].length = g2.n;
    CHECK(parse(r, 1, &g2, RT_STORAGE_STREAM, 0, &ds, e, sizeof e) == RT_EDATA && !ds);
    CHECK(strstr(e, "past the") != NULL);
    free(xi.p);
    free(g.p);
    free(t.p);
    free(g2.p);
}

/* AUTO streams above the threshold only; the key keeps storages apart. */
static void test_auto_and_key(void)
{
    buf x = {0};
    npy(&x, "|u1", 100, 10); /* 4000 bytes decoded */
    for (int i = 0; i < 1000; i++) {
        uint8_t v = (uint8_t)i;
        put(&x, &v, 1);
    }
    rt_stream_config sc = {.spool_dir = spool_dir, .stream_above = 3999, .threads = 2};
    rt_data_set_stream_config(&sc);
    rt_data_part p[1] = {{.role = RT_ROLE_FEATURES, .format = RT_FMT_NPY, .length = x.n}};
    char e[256];
    rt_dataset *ds = NULL;
    REQUIRE(parse(p, 1, &x, RT_STORAGE_AUTO, 0, &ds, e, sizeof e) == 0);
    CHECK(ds->stream != NULL && rt_stream_file_bytes(ds->stream) == 1000);
    rt_dataset_release(ds);
    sc.stream_above = 4000;
    rt_data_set_stream_config(&sc);
    REQUIRE(parse(p, 1, &x, RT_STORAGE_AUTO, 0, &ds, e, sizeof e) == 0);
    CHECK(ds->stream == NULL && ds->x != NULL);
    rt_dataset_release(ds);
    /* --max-spool-bytes is checked before anything is written */
    sc.max_spool_bytes = 999;
    rt_data_set_stream_config(&sc);
    CHECK(parse(p, 1, &x, RT_STORAGE_STREAM, 0, &ds, e, sizeof e) == RT_ETOOBIG);
    CHECK(strstr(e, "max-spool-bytes") != NULL);
    sc.max_spool_bytes = 0;
    rt_data_set_stream_config(&sc);

    uint8_t h[16] = {1}, k0[16], k1[16], k2[16], k3[16];
    p[0].storage = 0;
    p[0].shuffle_buffer = 0;
    rt_data_key(h, p, 1, k0);
    p[0].storage = RT_STORAGE_STREAM;
    rt_data_key(h, p, 1, k1);
    p[0].shuffle_buffer = 5;
    rt_data_key(h, p, 1, k2);
    p[0].storage = RT_STORAGE_MEMORY;
    p[0].shuffle_buffer = 0;
    rt_data_key(h, p, 1, k3);
    CHECK(memcmp(k0, k1, 16) && memcmp(k1, k2, 16) && memcmp(k0, k3, 16) && memcmp(k1, k3, 16));
    free(x.p);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_stream_rows SPOOL_DIR\n");
        return 2;
    }
    spool_dir = argv[1];
    /* read by workers (1 and 3, pread) and from a mapping by the caller */
    for (int pass = 0; pass < 3; pass++) {
        rt_stream_config sc = {.spool_dir = spool_dir, .threads = pass ? 3 : 1, .prefetch = 2,
                               .map_max = pass == 2 ? UINT64_C(1) << 30 : 0};
        want_mapped = pass == 2;
        rt_data_set_stream_config(&sc);
        test_formats();
    }
    test_bad();
    test_auto_and_key();
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("test_stream_rows: ok\n");
    return 0;
}
