/* fuzz_inflate.c - the daemon's one bounded inflater (server/data/rt_inflate.c).
 * Byte 0 picks the format (bits 0-1: deflate, zlib, gzip, gzip), the output
 * bound (bits 2-3: 4 KiB, 64 KiB, 256 KiB, 1 MiB) and --max-inflate-ratio
 * (bits 4-5: none, 1, 100, 1000); byte 1 the size of the pieces the input
 * is cut into (1..256 bytes, as a gRPC message's slices); the rest is the
 * compressed input. Checks: a success never exceeds the bound; the whole
 * input inflated in pieces (rt_inflate_all) and read in 1000-byte steps
 * (rt_inflate_read) agree on the outcome and the bytes; a failure has a
 * known code and a message that fits its buffer; and, for zlib, a success
 * gives what zlib's own inflate gives. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "rt_inflate.h"
#include "rtrain/rt_error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const rt_zfmt fmts[4] = {RT_Z_DEFLATE, RT_Z_ZLIB, RT_Z_GZIP, RT_Z_GZIP};
    const uint64_t maxes[4] = {4096, 65536, 256u << 10, 1u << 20};
    const uint32_t ratios[4] = {0, 1, 100, 1000};
    const rt_zfmt fmt = fmts[data[0] & 3];
    const rt_zlimits lim = {maxes[(data[0] >> 2) & 3], "message limit", "--max-message-bytes",
                            ratios[(data[0] >> 4) & 3]};
    const size_t piece = (size_t)data[1] + 1;
    const uint8_t *in = data + 2;
    const size_t n = size - 2;

    size_t ns = n ? (n + piece - 1) / piece : 0;
    rt_zspan *sp = calloc(ns ? ns : 1, sizeof *sp);
    for (size_t i = 0; i < ns; i++)
        sp[i] = (rt_zspan){in + i * piece, n - i * piece < piece ? n - i * piece : piece};
    char err[300];
    memset(err, 'x', sizeof err);
    uint8_t *out = NULL;
    size_t on = 0;
    int rc = rt_inflate_all(fmt, sp, ns, &lim, "fuzz input", NULL, NULL, &out, &on, err,
                            sizeof err);
    free(sp);
    const uint64_t cap = lim.max_bytes < rt_inflate_cap(n, lim.ratio)
                             ? lim.max_bytes
                             : rt_inflate_cap(n, lim.ratio);
    if (rc == 0 && on > cap)
        abort();
    if (rc < 0 && ((rc != RT_ETOOBIG && rc != RT_EDATA && rc != RT_ENOMEM) ||
                   !memchr(err, 0, sizeof err)))
        abort();

    /* the same input read in steps */
    rt_inflater f;
    if (rt_inflate_begin(&f, fmt, n, &lim, "fuzz input", err, sizeof err) < 0)
        abort();
    rt_inflate_input(&f, in, n);
    uint8_t *back = malloc(cap + 1000);
    size_t have = 0, got;
    int rr;
    while ((rr = rt_inflate_read(&f, back + have, 1000, &got, err, sizeof err)) == 0 && got == 1000)
        have += got;
    if (rr >= 0) {
        have += got;
        rr = rt_inflate_finish(&f, err, sizeof err);
    }
    rt_inflate_end(&f);
    if ((rc == 0) != (rr == 0) || (rc < 0 && rc != rr) ||
        (rc == 0 && (have != on || memcmp(back, out, on) != 0)))
        abort();

    /* zlib's own inflate agrees on what a zlib stream holds */
    if (rc == 0 && fmt == RT_Z_ZLIB) {
        uLongf rl = (uLongf)on + 1;
        uint8_t *ref = malloc(rl);
        if (uncompress(ref, &rl, in, (uLong)n) != Z_OK || rl != on || memcmp(ref, out, on) != 0)
            abort();
        free(ref);
    }
    free(back);
    free(out);
    return 0;
}
