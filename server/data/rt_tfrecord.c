/* rt_tfrecord.c - TFRecord framing and whole-file GZIP/ZLIB inflation. */
#include "rt_tfrecord.h"
#include "rt_errf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "rt_crc32c.h"
#include "rtrain/rt_error.h"

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int rt_tfr_inflate(const uint8_t *in, size_t len, rt_tfr_compression c, uint64_t max_bytes,
                   uint8_t **out, size_t *out_len, char *err, size_t errlen)
{
    *out = NULL;
    *out_len = 0;
    if (c != RT_TFR_GZIP && c != RT_TFR_ZLIB)
        return rt_errf(err, errlen, RT_EINVAL, "compression %d is not GZIP or ZLIB", (int)c);
    const char *what = c == RT_TFR_GZIP ? "GZIP" : "ZLIB";
    const int wbits = c == RT_TFR_GZIP ? 16 + MAX_WBITS : MAX_WBITS;
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, wbits) != Z_OK)
        return rt_errf(err, errlen, RT_ENOMEM, "zlib init failed");
    size_t cap = len < ((size_t)1 << 28) ? len * 4 + 4096 : len, n = 0;
    if (max_bytes && cap > max_bytes)
        cap = (size_t)max_bytes;
    if (cap == 0)
        cap = 1;
    uint8_t *buf = malloc(cap);
    int rc = 0;
    if (!buf) {
        rc = rt_errf(err, errlen, RT_ENOMEM, "out of memory inflating %s", what);
        goto out;
    }
    z.next_in = (Bytef *)in;
    size_t in_left = len;
    for (;;) {
        if (z.avail_in == 0 && in_left) {
            uInt take = in_left > (1u << 30) ? (1u << 30) : (uInt)in_left;
            z.avail_in = take;
            in_left -= take;
        }
        if (n == cap) {
            if (max_bytes && cap >= max_bytes) {
                rc = rt_errf(err, errlen, RT_ETOOBIG, "%s data inflates past %llu bytes", what,
                             (unsigned long long)max_bytes);
                goto out;
            }
            size_t nc = cap * 2;
            if (max_bytes && nc > max_bytes)
                nc = (size_t)max_bytes;
            uint8_t *nb = realloc(buf, nc);
            if (!nb) {
                rc = rt_errf(err, errlen, RT_ENOMEM, "out of memory inflating %s", what);
                goto out;
            }
            buf = nb;
            cap = nc;
        }
        size_t room = cap - n > (1u << 30) ? (1u << 30) : cap - n;
        z.next_out = buf + n;
        z.avail_out = (uInt)room;
        int zr = inflate(&z, Z_NO_FLUSH);
        n += room - z.avail_out;
        if (zr == Z_STREAM_END) {
            /* gzip allows members back to back; anything else after a
             * ZLIB stream is junk */
            if (z.avail_in == 0 && in_left == 0)
                break;
            if (c == RT_TFR_ZLIB) {
                rc = rt_errf(err, errlen, RT_EDATA, "ZLIB stream has %zu bytes after its end",
                             (size_t)z.avail_in + in_left);
                goto out;
            }
            inflateReset(&z);
            continue;
        }
        if (zr == Z_OK || (zr == Z_BUF_ERROR && z.avail_out == 0))
            continue;
        if (zr == Z_BUF_ERROR && z.avail_in == 0 && in_left == 0) {
            rc = rt_errf(err, errlen, RT_EDATA, "%s data is truncated after %zu bytes", what, n);
            goto out;
        }
        rc = rt_errf(err, errlen, RT_EDATA, "corrupt %s data (%s)", what,
                     z.msg ? z.msg : "inflate failed");
        goto out;
    }
out:
    inflateEnd(&z);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    *out = buf;
    *out_len = n;
    return 0;
}

void rt_tfr_reader_init(rt_tfr_reader *r, const uint8_t *buf, size_t len)
{
    memset(r, 0, sizeof *r);
    r->buf = buf;
    r->len = len;
}

int rt_tfr_next(rt_tfr_reader *r, const uint8_t **rec, size_t *len, char *err, size_t errlen)
{
    *rec = NULL;
    *len = 0;
    if (r->fatal)
        return rt_errf(err, errlen, RT_EDATA, "record %lld: the file is unreadable past byte %zu",
                       (long long)r->index, r->off);
    size_t left = r->len - r->off;
    if (left == 0)
        return 0;
    const uint8_t *p = r->buf + r->off;
    if (left < 12) {
        r->fatal = 1;
        return rt_errf(err, errlen, RT_ETRUNCATED,
                       "record %lld at byte %zu: truncated header (%zu of 12 bytes)",
                       (long long)r->index, r->off, left);
    }
    if (rt_crc32c_mask(rt_crc32c(0, p, 8)) != le32(p + 8)) {
        r->fatal = 1;
        return rt_errf(err, errlen, RT_ECHECKSUM, "record %lld at byte %zu: length CRC mismatch",
                       (long long)r->index, r->off);
    }
    uint64_t n = le64(p);
    if (n > left - 12 || left - 12 - n < 4) {
        r->fatal = 1;
        return rt_errf(err, errlen, RT_ETRUNCATED,
                       "record %lld at byte %zu: %llu data bytes declared, %zu left",
                       (long long)r->index, r->off, (unsigned long long)n,
                       left - 12 >= 4 ? left - 16 : 0);
    }
    const uint8_t *d = p + 12;
    uint32_t want = le32(d + n);
    int64_t idx = r->index++;
    size_t at = r->off;
    r->off += 16 + (size_t)n;
    if (rt_crc32c_mask(rt_crc32c(0, d, (size_t)n)) != want)
        return rt_errf(err, errlen, RT_ECHECKSUM, "record %lld at byte %zu: data CRC mismatch",
                       (long long)idx, at);
    *rec = d;
    *len = (size_t)n;
    return 1;
}

size_t rt_tfr_frame(const void *data, size_t n, uint8_t *out)
{
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)((uint64_t)n >> (8 * i));
    put32(out + 8, rt_crc32c_mask(rt_crc32c(0, out, 8)));
    if (n)
        memcpy(out + 12, data, n);
    put32(out + 12 + n, rt_crc32c_mask(rt_crc32c(0, data, n)));
    return n + 16;
}
