/* test_robust_data.c - the limits of the daemon's parsers and its log
 * escaping, on their own: shape products that overflow, float64 values
 * outside float32's range (CSV, NPY, features and labels), and gzip'ed IDX
 * checked from its header before anything is inflated (declared size over
 * the limit, over the inflate ratio, more data than declared, a header
 * cut short). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "itest_unit.h"
#include "itest_data.h"
#include "rt_obs.h"

static rt_data_part P(rt_data_role role, rt_data_format fmt, size_t len)
{
    rt_data_part p;
    memset(&p, 0, sizeof p);
    p.role = role;
    p.format = fmt;
    p.length = len;
    return p;
}

static void test_numel(void)
{
    int64_t ok[3] = {2, 3, 4}, big[4] = {1ll << 31, 1ll << 31, 1ll << 31, 4}, neg[2] = {3, -1};
    CHECK(rt_data_numel(3, ok) == 24, "2x3x4");
    CHECK(rt_data_numel(0, ok) == 1, "scalar");
    CHECK(rt_data_numel(4, big) == -1, "overflow is -1, not UB");
    CHECK(rt_data_numel(2, neg) == -1, "a negative dim is -1");
}

/* An NPY v1 file of n little-endian f64 values, shape (n, 1). */
static size_t npy_f64(uint8_t *out, const double *v, int n)
{
    memset(out, ' ', 128);
    memcpy(out, "\x93NUMPY\x01\x00\x76\x00", 10);
    char h[100];
    int hl = snprintf(h, sizeof h, "{'descr': '<f8', 'fortran_order': False, 'shape': (%d, 1), }",
                      n);
    memcpy(out + 10, h, (size_t)hl);
    out[127] = '\n';
    memcpy(out + 128, v, sizeof(double) * (size_t)n);
    return 128 + sizeof(double) * (size_t)n;
}

static void test_f64_range(void)
{
    rt_dataset *ds = NULL;
    char err[256] = "";
    const char *csv = "1,2,0\n3,1e300,1\n";
    rt_data_part p = P(RT_ROLE_BOTH, RT_FMT_CSV, strlen(csv));
    p.label_column = -1;
    int rc = itest_parse(&p, 1, (const uint8_t *)csv, p.length, 1 << 20, &ds, err, sizeof err);
    CHECK(rc == RT_ENAN && strstr(err, "outside float32") && strstr(err, "sample 1, column 1"),
          "CSV feature 1e300: %d %s", rc, err);
    const char *lab = "1,2,0\n3,4,-1e39\n";
    p = P(RT_ROLE_BOTH, RT_FMT_CSV, strlen(lab));
    p.label_column = -1;
    rc = itest_parse(&p, 1, (const uint8_t *)lab, p.length, 1 << 20, &ds, err, sizeof err);
    CHECK(rc == RT_ENAN && strstr(err, "labels") && strstr(err, "outside float32"),
          "CSV label -1e39: %d %s", rc, err);
    /* The largest float32 itself is fine, also as the 9-digit decimal
     * that is a bit above it as a double but rounds to it. */
    char fine[64];
    snprintf(fine, sizeof fine, "1,%.9g,0\n3,4,1\n", (double)FLT_MAX);
    p = P(RT_ROLE_BOTH, RT_FMT_CSV, strlen(fine));
    p.label_column = -1;
    rc = itest_parse(&p, 1, (const uint8_t *)fine, p.length, 1 << 20, &ds, err, sizeof err);
    CHECK(rc == 0, "CSV FLT_MAX: %d %s", rc, err);
    rt_dataset_release(ds);
    ds = NULL;
    uint8_t npy[256];
    double v[3] = {0.5, 3.5e38, 2};
    size_t n = npy_f64(npy, v, 3);
    p = P(RT_ROLE_FEATURES, RT_FMT_NPY, n);
    rc = itest_parse(&p, 1, npy, n, 1 << 20, &ds, err, sizeof err);
    CHECK(rc == RT_ENAN && strstr(err, "outside float32") && strstr(err, "sample 1"),
          "NPY 3.5e38: %d %s", rc, err);
}

/* gzip of an IDX u8 file: header declaring dims, then body bytes. */
static uint8_t *idx_gz(const uint32_t *dims, int nd, const uint8_t *body, size_t blen,
                       size_t *gl)
{
    uint8_t hdr[4 + 4 * 8] = {0, 0, 0x08, (uint8_t)nd};
    for (int i = 0; i < nd; i++) {
        hdr[4 + 4 * i] = (uint8_t)(dims[i] >> 24);
        hdr[5 + 4 * i] = (uint8_t)(dims[i] >> 16);
        hdr[6 + 4 * i] = (uint8_t)(dims[i] >> 8);
        hdr[7 + 4 * i] = (uint8_t)dims[i];
    }
    size_t hl = 4 + 4 * (size_t)nd, cap = blen + hl + 4096;
    uint8_t *raw = malloc(hl + blen), *gz = malloc(cap);
    memcpy(raw, hdr, hl);
    if (blen)
        memcpy(raw + hl, body, blen);
    z_stream z;
    memset(&z, 0, sizeof z);
    deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    z.next_in = raw;
    z.avail_in = (uInt)(hl + blen);
    z.next_out = gz;
    z.avail_out = (uInt)cap;
    deflate(&z, Z_FINISH);
    *gl = cap - z.avail_out;
    deflateEnd(&z);
    free(raw);
    return gz;
}

static int parse_gz(const uint8_t *gz, size_t gl, uint64_t max, uint32_t ratio, rt_dataset **ds,
                    char *err)
{
    rt_data_part p = P(RT_ROLE_FEATURES, RT_FMT_IDX, gl);
    uint8_t *buf = malloc(gl);
    memcpy(buf, gz, gl);
    int rc = rt_data_parse_take(&p, 1, &buf, gl, max, ratio, 0, ds, err, 256);
    free(buf);
    return rc;
}

static void test_idx_gz(void)
{
    char err[256] = "";
    rt_dataset *ds = NULL;
    size_t gl;
    /* 4096 x 1024 zeros (4 MiB) in a few KB, but the header says so. */
    static uint8_t zeros[4096 * 1024];
    uint32_t d[2] = {4096, 1024};
    uint8_t *gz = idx_gz(d, 2, zeros, sizeof zeros, &gl);
    int rc = parse_gz(gz, gl, 1 << 20, 0, &ds, err);
    CHECK(rc == RT_ETOOBIG && strstr(err, "declares 4194316 bytes") &&
              strstr(err, "dataset limit of 1048576"),
          "declared size over the limit: %d %s", rc, err);
    rc = parse_gz(gz, gl, 64 << 20, 100, &ds, err);
    CHECK(rc == RT_ETOOBIG && strstr(err, "inflate ratio limit of 100"), "ratio: %d %s", rc, err);
    rc = parse_gz(gz, gl, 64 << 20, 0, &ds, err);
    CHECK(rc == 0 && ds && ds->n == 4096 && ds->x_dims[0] == 1024, "within limits: %d %s", rc, err);
    rt_dataset_release(ds);
    ds = NULL;
    free(gz);
    /* The header declares 10 bytes, the stream holds 20. */
    uint8_t body[20] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
    uint32_t d10[1] = {10};
    gz = idx_gz(d10, 1, body, 20, &gl);
    rc = parse_gz(gz, gl, 1 << 20, 100, &ds, err);
    CHECK(rc == RT_EDATA && strstr(err, "past the 18 bytes"), "more than declared: %d %s", rc, err);
    free(gz);
    /* ... and 5 (the stream ends early). */
    gz = idx_gz(d10, 1, body, 5, &gl);
    rc = parse_gz(gz, gl, 1 << 20, 100, &ds, err);
    CHECK(rc == RT_EDATA, "less than declared: %d %s", rc, err);
    free(gz);
    /* A gzip stream that ends inside the IDX header. */
    uint8_t tiny[3] = {0, 0, 8};
    z_stream z;
    memset(&z, 0, sizeof z);
    uint8_t out[64];
    deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    z.next_in = tiny;
    z.avail_in = 3;
    z.next_out = out;
    z.avail_out = sizeof out;
    deflate(&z, Z_FINISH);
    size_t tl = sizeof out - z.avail_out;
    deflateEnd(&z);
    rc = parse_gz(out, tl, 1 << 20, 100, &ds, err);
    CHECK(rc == RT_EDATA && strstr(err, "IDX header"), "header cut short: %d %s", rc, err);
    /* Dims whose product overflows. */
    uint32_t huge[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
    gz = idx_gz(huge, 4, NULL, 0, &gl);
    rc = parse_gz(gz, gl, 1 << 20, 100, &ds, err);
    CHECK(rc == RT_EDATA && strstr(err, "overflows"), "dims overflow: %d %s", rc, err);
    free(gz);
}

static void test_escape(void)
{
    char out[64];
    rt_obs_escape("a\nb\r\tc\\d\x1b[0m\x7f", out, sizeof out);
    CHECK(strcmp(out, "a\\nb\\r\\tc\\\\d\\x1b[0m\\x7f") == 0, "escaped: %s", out);
    rt_obs_escape("caf\xc3\xa9", out, sizeof out);
    CHECK(strcmp(out, "caf\xc3\xa9") == 0, "UTF-8 kept: %s", out);
    char small[5];
    size_t n = rt_obs_escape("ab\ncd", small, sizeof small);
    CHECK(n == 4 && strcmp(small, "ab\\n") == 0, "cut whole escapes: %s", small);
    n = rt_obs_escape("abc\n", small, sizeof small);
    CHECK(n == 3 && strcmp(small, "abc") == 0, "an escape that does not fit is dropped: %s",
          small);
}

int main(void)
{
    RUN(test_numel);
    RUN(test_f64_range);
    RUN(test_idx_gz);
    RUN(test_escape);
    return itest_summary();
}
