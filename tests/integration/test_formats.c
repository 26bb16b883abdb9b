/* test_formats.c - the daemon's dataset parsers on their own (server/data):
 * values, shapes, dtypes and error messages for RAW, NPY (v1/v2), CSV and
 * IDX (plain and gzipped), the converted-label cache and the store key. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "itest_unit.h"
#include "itest_data.h"

static rt_data_part P(rt_data_role role, rt_data_format fmt, size_t len)
{
    rt_data_part p;
    memset(&p, 0, sizeof p);
    p.role = role;
    p.format = fmt;
    p.length = len;
    return p;
}

static int parse1(rt_data_part p, const void *buf, rt_dataset **ds, char *err)
{
    return itest_parse(&p, 1, buf, p.length, 1 << 20, ds, err, 256);
}

static void test_csv(void)
{
    const char *csv = "a,label,b\n1, 0 ,2\n3,1,4\r\n\n5,2,6\n";
    rt_data_part p = P(RT_ROLE_BOTH, RT_FMT_CSV, strlen(csv));
    p.label_column = 1;
    p.csv_header = 1;
    rt_dataset *ds;
    char err[256] = "";
    CHECK(parse1(p, csv, &ds, err) == 0, "csv: %s", err);
    if (!ds)
        return;
    CHECK(ds->n == 3 && ds->x_ndim == 1 && ds->x_dims[0] == 2, "shape");
    CHECK(ds->x[0] == 1 && ds->x[1] == 2 && ds->x[4] == 5 && ds->x[5] == 6, "skips the label column");
    CHECK(ds->y_dtype == RT_F32 && ((float *)ds->y)[2] == 2.0f, "labels f32");
    const void *yi, *yi2;
    CHECK(rt_dataset_labels_as(ds, RT_I32, &yi, err, sizeof err) == 0 &&
              ((const int32_t *)yi)[1] == 1, "to i32");
    CHECK(rt_dataset_labels_as(ds, RT_I32, &yi2, err, sizeof err) == 0 && yi2 == yi,
          "the conversion is cached, not redone");
    rt_dataset_release(ds);

    const char *frac = "1,0.5\n2,1\n";
    p = P(RT_ROLE_BOTH, RT_FMT_CSV, strlen(frac));
    p.label_column = -1;
    CHECK(parse1(p, frac, &ds, err) == 0, "frac: %s", err);
    CHECK(rt_dataset_labels_as(ds, RT_I32, &yi, err, sizeof err) == RT_EDTYPE &&
              strstr(err, "0.5"), "fractional -> i32 refused: %s", err);
    rt_dataset_release(ds);

    const char *ragged = "1,2,3\n4,5\n";
    p = P(RT_ROLE_FEATURES, RT_FMT_CSV, strlen(ragged));
    CHECK(parse1(p, ragged, &ds, err) == RT_EDATA && strstr(err, "line 2 has 2 columns, expected 3"),
          "ragged: %s", err);
    const char *inf = "1,2\n3,-inf\n";
    p = P(RT_ROLE_FEATURES, RT_FMT_CSV, strlen(inf));
    CHECK(parse1(p, inf, &ds, err) == RT_ENAN && strstr(err, "Inf at sample 1, column 1"), "inf: %s", err);
    p = P(RT_ROLE_FEATURES, RT_FMT_CSV, 1);
    CHECK(parse1(p, "\n", &ds, err) == RT_EDATA && strstr(err, "no rows"), "empty: %s", err);
    const char *two = "1,2\n";
    p = P(RT_ROLE_BOTH, RT_FMT_CSV, strlen(two));
    p.label_column = 5;
    CHECK(parse1(p, two, &ds, err) == RT_EDATA && strstr(err, "label_column 5"), "bad column: %s", err);
}

static size_t npy_hdr(uint8_t *b, int ver, const char *dict)
{
    size_t dl = strlen(dict), pre = ver == 1 ? 10 : 12;
    size_t total = pre + dl + 1, pad = (64 - total % 64) % 64, hl = dl + pad + 1;
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (uint8_t)ver;
    b[7] = 0;
    if (ver == 1) {
        b[8] = (uint8_t)hl;
        b[9] = (uint8_t)(hl >> 8);
    } else {
        b[8] = (uint8_t)hl;
        b[9] = (uint8_t)(hl >> 8);
        b[10] = b[11] = 0;
    }
    memcpy(b + pre, dict, dl);
    memset(b + pre + dl, ' ', pad);
    b[pre + hl - 1] = '\n';
    return pre + hl;
}

static void test_npy(void)
{
    uint8_t b[512];
    size_t o = npy_hdr(b, 2, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }");
    double v[6] = {1, 2, 3, 4, 5, 6.5};
    memcpy(b + o, v, sizeof v);
    rt_data_part p = P(RT_ROLE_FEATURES, RT_FMT_NPY, o + sizeof v);
    rt_dataset *ds;
    char err[256] = "";
    CHECK(parse1(p, b, &ds, err) == 0, "npy v2 f8: %s", err);
    if (ds) {
        CHECK(ds->n == 2 && ds->x_dims[0] == 3 && ds->x[5] == 6.5f, "f8 -> f32 values");
        rt_dataset_release(ds);
    }
    /* uint8 images (2, 2, 2), normalized. */
    o = npy_hdr(b, 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2, 2), }");
    uint8_t px[8] = {0, 255, 128, 1, 2, 3, 4, 5};
    memcpy(b + o, px, 8);
    p = P(RT_ROLE_FEATURES, RT_FMT_NPY, o + 8);
    p.normalize = 1;
    CHECK(parse1(p, b, &ds, err) == 0, "npy u1: %s", err);
    if (ds) {
        CHECK(ds->x_ndim == 2 && ds->x_dims[0] == 2 && ds->x_dims[1] == 2, "per-sample (2, 2)");
        CHECK(ds->x[1] == 1.0f && ds->x[2] == 128.0f / 255.0f, "u8 / 255 exactly (%.9g)",
              (double)ds->x[2]);
        rt_dataset_release(ds);
    }
    o = npy_hdr(b, 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }");
    p = P(RT_ROLE_FEATURES, RT_FMT_NPY, o + 8);
    CHECK(parse1(p, b, &ds, err) == RT_EDATA && strstr(err, "'>f4'"), "big-endian refused: %s", err);
    o = npy_hdr(b, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }");
    p = P(RT_ROLE_FEATURES, RT_FMT_NPY, o + 8);
    CHECK(parse1(p, b, &ds, err) == RT_EDATA && strstr(err, "need 12"), "short data: %s", err);
    p = P(RT_ROLE_FEATURES, RT_FMT_NPY, 5);
    CHECK(parse1(p, "hello", &ds, err) == RT_EDATA && strstr(err, "magic"), "not npy: %s", err);
}

static void test_idx(void)
{
    /* idx1 of big-endian int32 labels, and idx3 of f32 features. */
    uint8_t lab[8 + 12] = {0, 0, 0x0c, 1, 0, 0, 0, 3, 0, 0, 0, 7, 0, 0, 1, 0, 0xff, 0xff, 0xff, 0xfe};
    uint8_t img[12 + 8] = {0, 0, 0x0d, 2, 0, 0, 0, 2, 0, 0, 0, 1, 0x3f, 0x80, 0, 0, 0xc0, 0, 0, 0};
    uint8_t all[64];
    memcpy(all, img, sizeof img);
    memcpy(all + sizeof img, lab, sizeof lab);
    rt_data_part p[2] = {P(RT_ROLE_FEATURES, RT_FMT_IDX, sizeof img),
                         P(RT_ROLE_LABELS, RT_FMT_IDX, sizeof lab)};
    rt_dataset *ds;
    char err[256] = "";
    int rc = itest_parse(p, 2, all, sizeof img + sizeof lab, 1 << 20, &ds, err, sizeof err);
    CHECK(rc == RT_EDATA && strstr(err, "2 samples but labels have 3"), "count mismatch: %s", err);
    lab[7] = 2;
    memcpy(all + sizeof img, lab, sizeof lab);
    p[1].length = sizeof lab - 4;
    rc = itest_parse(p, 2, all, sizeof img + sizeof lab - 4, 1 << 20, &ds, err, sizeof err);
    CHECK(rc == 0, "idx f32 + i32: %s", err);
    if (ds) {
        CHECK(ds->x[0] == 1.0f && ds->x[1] == -2.0f, "big-endian f32");
        CHECK(ds->y_dtype == RT_I32 && ((int32_t *)ds->y)[0] == 7 && ((int32_t *)ds->y)[1] == 256,
              "big-endian i32");
        rt_dataset_release(ds);
    }
    /* A gzip bomb is stopped at max_bytes. */
    size_t big = 4u << 20;
    uint8_t *raw = calloc(1, big), *gz = malloc(big);
    memcpy(raw, "\x00\x00\x08\x01", 4);
    raw[4] = (uint8_t)((big - 8) >> 24);
    raw[5] = (uint8_t)((big - 8) >> 16);
    raw[6] = (uint8_t)((big - 8) >> 8);
    raw[7] = (uint8_t)(big - 8);
    z_stream z;
    memset(&z, 0, sizeof z);
    deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    z.next_in = raw;
    z.avail_in = (uInt)big;
    z.next_out = gz;
    z.avail_out = (uInt)big;
    deflate(&z, Z_FINISH);
    size_t gl = big - z.avail_out;
    deflateEnd(&z);
    rt_data_part g = P(RT_ROLE_FEATURES, RT_FMT_IDX, gl);
    rc = itest_parse(&g, 1, gz, gl, 1 << 20, &ds, err, sizeof err);
    CHECK(rc == RT_ETOOBIG && strstr(err, "over the dataset limit"), "gzip bomb: %d %s", rc, err);
    rc = itest_parse(&g, 1, gz, gl, 8u << 20, &ds, err, sizeof err);
    CHECK(rc == 0 && ds && ds->n == (int64_t)(big - 8), "gzip within the limit: %s", err);
    rt_dataset_release(ds);
    free(raw);
    free(gz);
}

static void test_raw_and_key(void)
{
    int64_t y64[3] = {0, 1, 5000000000ll};
    rt_data_part p = P(RT_ROLE_LABELS, RT_FMT_RAW, sizeof y64);
    p.dtype = RT_I64;
    p.ndim = 1;
    p.dims[0] = 3;
    float x[3] = {1, 2, 3};
    rt_data_part parts[2] = {P(RT_ROLE_FEATURES, RT_FMT_RAW, sizeof x), p};
    parts[0].dtype = RT_F32;
    parts[0].ndim = 1;
    parts[0].dims[0] = 3;
    uint8_t buf[64];
    memcpy(buf, x, sizeof x);
    memcpy(buf + sizeof x, y64, sizeof y64);
    rt_dataset *ds;
    char err[256] = "";
    CHECK(itest_parse(parts, 2, buf, sizeof x + sizeof y64, 1 << 20, &ds, err, sizeof err) ==
              RT_EDATA && strstr(err, "does not fit in int32"), "i64 label range: %s", err);
    CHECK(itest_parse(parts, 1, buf, sizeof x, 1 << 20, &ds, err, sizeof err) == 0 &&
              ds->x_ndim == 1 && ds->x_dims[0] == 1 && !ds->y, "rank-1 features: one value per sample");
    rt_dataset_release(ds);
    CHECK(itest_parse(parts, 2, buf, 5, 1 << 20, &ds, err, sizeof err) == RT_EDATA &&
              strstr(err, "add up"), "length mismatch: %s", err);
    rt_data_part two_x[2] = {parts[0], parts[0]};
    CHECK(itest_parse(two_x, 2, buf, 2 * sizeof x, 1 << 20, &ds, err, sizeof err) == RT_EDATA,
          "two feature parts refused");
    /* The key covers content and parse settings. */
    uint8_t h[16] = {1, 2, 3}, k1[16], k2[16], k3[16];
    rt_data_key(h, parts, 2, k1);
    rt_data_key(h, parts, 2, k2);
    parts[1].dtype = RT_I32;
    rt_data_key(h, parts, 2, k3);
    CHECK(memcmp(k1, k2, 16) == 0 && memcmp(k1, k3, 16) != 0, "key: stable, and parse-aware");
}

/* Mutated inputs for every parser (fixed seed): an error code or a
 * dataset, never a crash or a sanitizer report. */
static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void test_fuzz_parsers(void)
{
    uint8_t npyb[256];
    size_t npyl = npy_hdr(npyb, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2), }");
    memset(npyb + npyl, 0x3f, 32);
    npyl += 32;
    uint8_t idx[8 + 6] = {0, 0, 8, 1, 0, 0, 0, 6, 1, 2, 3, 4, 5, 6};
    const char *csv = "a,b,c\n1,2,0\n3.5,-4e3,1\n5,6,2\n";
    struct { const uint8_t *b; size_t n; rt_data_format f; } seeds[] = {
        {npyb, npyl, RT_FMT_NPY}, {idx, sizeof idx, RT_FMT_IDX},
        {(const uint8_t *)csv, strlen(csv), RT_FMT_CSV},
    };
    int ok = 0, errs = 0;
    for (int round = 0; round < 3000; round++) {
        int k = round % 3;
        uint8_t buf[512];
        size_t n = seeds[k].n;
        memcpy(buf, seeds[k].b, n);
        for (int m = 0; m < 1 + (int)(rng() % 3); m++)
            buf[rng() % n] = (uint8_t)rng();
        if (rng() % 4 == 0)
            n = rng() % (n + 1); /* truncated */
        rt_data_part p = P(seeds[k].f == RT_FMT_CSV ? RT_ROLE_BOTH : RT_ROLE_FEATURES, seeds[k].f, n);
        p.label_column = -1;
        p.csv_header = (int)(rng() % 2);
        rt_dataset *ds = NULL;
        char err[256];
        int rc = itest_parse(&p, 1, buf, n, 1 << 16, &ds, err, sizeof err);
        if (rc == 0) {
            ok++;
            CHECK(ds && ds->n > 0 && ds->x, "a parsed dataset has samples");
            rt_dataset_release(ds);
        } else {
            errs++;
            CHECK(ds == NULL && strlen(err) < 300, "an error leaves no dataset");
        }
    }
    CHECK(ok > 0 && errs > 0, "fuzz reached both outcomes (%d ok, %d errors)", ok, errs);
}

int main(void)
{
    RUN(test_csv);
    RUN(test_npy);
    RUN(test_idx);
    RUN(test_raw_and_key);
    RUN(test_fuzz_parsers);
    return itest_summary();
}
