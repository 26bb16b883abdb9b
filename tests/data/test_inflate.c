/* test_inflate.c - the daemon's one bounded inflater (server/data/rt_inflate.h)
 * against zlib's own deflate: what zlib compressed comes back byte for
 * byte (gzip, zlib, raw deflate; input in pieces down to one byte; output
 * read in pieces; gzip members back to back), and every bound holds
 * exactly: output of exactly the bound is taken, one byte more is refused
 * naming the bound and its flag, for the message and dataset limits and for
 * --max-inflate-ratio, before the buffer grows past the bound; a grow
 * callback is asked for every byte the buffer takes. Corrupt, truncated
 * and trailing input is refused. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "rt_inflate.h"
#include "rtrain/rt_error.h"

#include "../lib/rt_check.h"

/* zlib's deflate of in: wbits as deflateInit2 takes them. */
static uint8_t *deflated(const uint8_t *in, size_t n, int wbits, size_t *out_len)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, wbits, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    size_t cap = deflateBound(&z, (uLong)n) + 64;
    uint8_t *out = malloc(cap);
    REQUIRE(out);
    z.next_in = (Bytef *)in;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
    *out_len = cap - z.avail_out;
    deflateEnd(&z);
    return out;
}

/* Pseudo-random text-like bytes: compressible, but not trivially. */
static uint8_t *sample(size_t n)
{
    uint8_t *b = malloc(n);
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        b[i] = (uint8_t)("abcdefgh \n0123"[(x >> 16) % 14]);
    }
    return b;
}

static const rt_zlimits no_limits = {0, NULL, NULL, 0};

static int all1(rt_zfmt f, const uint8_t *in, size_t n, const rt_zlimits *lim, uint8_t **out,
                size_t *on, char *err)
{
    const rt_zspan sp = {in, n};
    return rt_inflate_all(f, &sp, 1, lim, "test input", NULL, NULL, out, on, err, 300);
}

static void test_round_trip(void)
{
    const size_t n = 300000;
    uint8_t *raw = sample(n);
    const struct {
        rt_zfmt f;
        int wbits;
    } fmts[3] = {{RT_Z_DEFLATE, -MAX_WBITS}, {RT_Z_ZLIB, MAX_WBITS}, {RT_Z_GZIP, 16 + MAX_WBITS}};
    char err[300];
    for (int k = 0; k < 3; k++) {
        size_t zn;
        uint8_t *z = deflated(raw, n, fmts[k].wbits, &zn);
        uint8_t *out;
        size_t on;
        CHECKF(all1(fmts[k].f, z, zn, &no_limits, &out, &on, err) == 0, "%s", err);
        CHECK(on == n && memcmp(out, raw, n) == 0);
        free(out);
        /* the input in pieces of 1, 7 and 4096 bytes */
        const size_t piece[3] = {1, 7, 4096};
        for (int p = 0; p < 3; p++) {
            size_t ns = (zn + piece[p] - 1) / piece[p];
            rt_zspan *sp = malloc(sizeof *sp * ns);
            for (size_t i = 0; i < ns; i++)
                sp[i] = (rt_zspan){z + i * piece[p],
                                   zn - i * piece[p] < piece[p] ? zn - i * piece[p] : piece[p]};
            CHECKF(rt_inflate_all(fmts[k].f, sp, ns, &no_limits, "test input", NULL, NULL, &out,
                                  &on, err, sizeof err) == 0,
                   "pieces of %zu: %s", piece[p], err);
            CHECK(on == n && memcmp(out, raw, n) == 0);
            free(out);
            free(sp);
        }
        /* read in pieces of 1000 bytes: the same bytes, then 1 (ended) */
        rt_inflater f;
        REQUIRE(rt_inflate_begin(&f, fmts[k].f, zn, &no_limits, "test input", err, sizeof err) ==
                0);
        rt_inflate_input(&f, z, zn);
        uint8_t *back = malloc(n + 1000);
        size_t have = 0, got;
        int rc;
        while ((rc = rt_inflate_read(&f, back + have, 1000, &got, err, sizeof err)) == 0 && got)
            have += got;
        have += rc >= 0 ? got : 0;
        CHECKF(rc == 1 && have == n && memcmp(back, raw, n) == 0, "read: %d %zu %s", rc, have,
               err);
        CHECK(rt_inflate_finish(&f, err, sizeof err) == 0);
        rt_inflate_end(&f);
        free(back);
        /* truncated: refused, saying so */
        CHECK(all1(fmts[k].f, z, zn - 3, &no_limits, &out, &on, err) == RT_EDATA);
        CHECKF(strstr(err, "test input is truncated") != NULL, "%s", err);
        /* corrupt: zlib and gzip carry a checksum (raw deflate need not
         * notice a flipped bit) */
        if (fmts[k].f != RT_Z_DEFLATE) {
            z[zn / 2] ^= 0x5a;
            int crc = all1(fmts[k].f, z, zn, &no_limits, &out, &on, err);
            CHECKF(crc == RT_EDATA, "corrupt %d: %d %s", k, crc, err);
            if (crc == 0)
                free(out);
        }
        free(z);
    }
    /* gzip members back to back are one input; a zlib stream followed by
     * anything is refused */
    size_t gn, zn;
    uint8_t *g = deflated(raw, 1000, 16 + MAX_WBITS, &gn);
    uint8_t *z = deflated(raw, 1000, MAX_WBITS, &zn);
    uint8_t *two = malloc(2 * (gn > zn ? gn : zn));
    memcpy(two, g, gn);
    memcpy(two + gn, g, gn);
    uint8_t *out;
    size_t on;
    /* the second member in a piece of its own, as a gRPC slice may be */
    rt_zspan sp[2] = {{two, gn}, {two + gn, gn}};
    CHECK(rt_inflate_all(RT_Z_GZIP, sp, 2, &no_limits, "t", NULL, NULL, &out, &on, err,
                         sizeof err) == 0);
    CHECK(on == 2000 && memcmp(out, raw, 1000) == 0 && memcmp(out + 1000, raw, 1000) == 0);
    free(out);
    memcpy(two, z, zn);
    memcpy(two + zn, z, zn);
    CHECK(all1(RT_Z_ZLIB, two, 2 * zn, &no_limits, &out, &on, err) == RT_EDATA);
    CHECKF(strstr(err, "after its zlib stream") != NULL, "%s", err);
    /* an unknown format */
    CHECK(all1((rt_zfmt)7, z, zn, &no_limits, &out, &on, err) == RT_EINVAL);
    free(two);
    free(g);
    free(z);
    free(raw);
}

/* What a grow callback was asked for. */
typedef struct grown {
    size_t total, limit;
} grown;

static int grow_cb(void *ud, size_t more, char *err, size_t errlen)
{
    grown *g = ud;
    if (g->total + more > g->limit) {
        snprintf(err, errlen, "quota");
        return RT_ETOOBIG;
    }
    g->total += more;
    return 0;
}

static void test_bounds(void)
{
    /* 16 MiB of zeros: ~16 KB of gzip, a ratio of ~1000 */
    const size_t n = (size_t)16 << 20;
    uint8_t *zeros = calloc(1, n);
    size_t gn;
    uint8_t *g = deflated(zeros, n, 16 + MAX_WBITS, &gn);
    char err[300];
    uint8_t *out = NULL;
    size_t on;
    /* exactly the message limit: taken; one byte under it: refused */
    rt_zlimits lim = {n, "message limit", "--max-message-bytes", 0};
    grown gr = {0, SIZE_MAX};
    const rt_zspan sp = {g, gn};
    CHECKF(rt_inflate_all(RT_Z_GZIP, &sp, 1, &lim, "compressed UploadChunk", grow_cb, &gr, &out,
                          &on, err, sizeof err) == 0,
           "%s", err);
    CHECK(on == n && gr.total == n); /* every byte charged, none more than the bound */
    free(out);
    lim.max_bytes = n - 1;
    gr.total = 0;
    CHECK(rt_inflate_all(RT_Z_GZIP, &sp, 1, &lim, "compressed UploadChunk", grow_cb, &gr, &out,
                         &on, err, sizeof err) == RT_ETOOBIG);
    CHECKF(strcmp(err, "compressed UploadChunk inflates past the message limit of 16777215 bytes "
                       "(--max-message-bytes)") == 0,
           "%s", err);
    CHECK(gr.total <= n - 1 && out == NULL);
    /* the ratio: 16 MiB from ~16 KB is ~1000 x; at 100 x the bound is
     * 100 x the input (over 1 MiB), named with its flag */
    rt_zlimits rl = {(uint64_t)1 << 30, "dataset limit", "--max-dataset-bytes", 100};
    gr.total = 0;
    CHECK(rt_inflate_all(RT_Z_GZIP, &sp, 1, &rl, "shard 3", grow_cb, &gr, &out, &on, err,
                         sizeof err) == RT_ETOOBIG);
    char want[200];
    snprintf(want, sizeof want,
             "shard 3 inflates past %zu bytes from %zu: over the inflate ratio limit of 100 "
             "(--max-inflate-ratio)",
             gn * 100 > (1u << 20) ? gn * 100 : (size_t)1 << 20, gn);
    CHECKF(strcmp(err, want) == 0, "%s", err);
    CHECK(gr.total <= (gn * 100 > (1u << 20) ? gn * 100 : (size_t)1 << 20));
    /* ... and at 2000 x the same input is inside it */
    rl.ratio = 2000;
    CHECK(all1(RT_Z_GZIP, g, gn, &rl, &out, &on, err) == 0 && on == n);
    free(out);
    /* small inputs may always inflate to 1 MiB, whatever the ratio */
    size_t tn;
    uint8_t *t = deflated(zeros, 1 << 20, 16 + MAX_WBITS, &tn);
    rl.ratio = 1;
    CHECKF(all1(RT_Z_GZIP, t, tn, &rl, &out, &on, err) == 0 && on == (1u << 20), "%s", err);
    free(out);
    free(t);
    /* a declared size is admitted or refused the same way */
    rt_inflater f;
    rl.ratio = 100;
    REQUIRE(rt_inflate_begin(&f, RT_Z_GZIP, 10000, &rl, "IDX", err, sizeof err) == 0);
    CHECK(rt_inflate_admit(&f, 1000000, err, sizeof err) == 0);
    CHECK(rt_inflate_admit(&f, (1u << 20) + 1, err, sizeof err) == RT_ETOOBIG);
    CHECKF(strcmp(err, "IDX declares 1048577 bytes inflated from 10000: over the inflate ratio "
                       "limit of 100 (--max-inflate-ratio)") == 0,
           "%s", err);
    rt_inflate_end(&f);
    rt_zlimits dl = {4096, "dataset limit", "--max-dataset-bytes", 0};
    REQUIRE(rt_inflate_begin(&f, RT_Z_GZIP, 10000, &dl, "IDX", err, sizeof err) == 0);
    CHECK(rt_inflate_admit(&f, 4097, err, sizeof err) == RT_ETOOBIG);
    CHECKF(strcmp(err, "IDX declares 4097 bytes inflated: over the dataset limit of 4096 bytes "
                       "(--max-dataset-bytes)") == 0,
           "%s", err);
    rt_inflate_end(&f);
    /* the bound in streaming reads: the reader gets exactly the bound, then
     * the refusal, never a byte past it */
    lim.max_bytes = 100000;
    REQUIRE(rt_inflate_begin(&f, RT_Z_GZIP, gn, &lim, "m", err, sizeof err) == 0);
    rt_inflate_input(&f, g, gn);
    uint8_t buf[65536];
    size_t total = 0, got;
    int rc;
    while ((rc = rt_inflate_read(&f, buf, sizeof buf, &got, err, sizeof err)) == 0 && got)
        total += got;
    CHECKF(rc == RT_ETOOBIG && total + got == 100000, "%d %zu", rc, total);
    rt_inflate_end(&f);
    /* a grow callback that refuses stops the inflation with its error */
    gr = (grown){0, 70000};
    CHECK(rt_inflate_all(RT_Z_GZIP, &sp, 1, &no_limits, "m", grow_cb, &gr, &out, &on, err,
                         sizeof err) == RT_ETOOBIG);
    CHECK(strcmp(err, "quota") == 0 && gr.total <= 70000);
    free(g);
    free(zeros);
}

int main(void)
{
    test_round_trip();
    test_bounds();
    if (failures) {
        fprintf(stderr, "test_inflate: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_inflate: ok\n");
    return 0;
}
