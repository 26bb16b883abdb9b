/* rt_tfrecord.c - TFRecord framing. */
#include "rt_tfrecord.h"
#include "rt_errf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
