/* rt_inflate.c - the daemon's one bounded inflater (rt_inflate.h). */
#include "rt_inflate.h"
#include "rt_errf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rtrain/rt_error.h"

/* zlib counts in uInt: input and output go to it in pieces of at most this. */
#define RT__Z_PIECE ((size_t)1 << 30)

static const char *fmt_name(rt_zfmt f)
{
    return f == RT_Z_GZIP ? "gzip" : f == RT_Z_ZLIB ? "zlib" : "deflate";
}

int rt_inflate_begin(rt_inflater *f, rt_zfmt fmt, uint64_t in_len, const rt_zlimits *lim,
                     const char *what, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    int wbits;
    switch (fmt) {
    case RT_Z_DEFLATE: wbits = -MAX_WBITS; break;
    case RT_Z_ZLIB: wbits = MAX_WBITS; break;
    case RT_Z_GZIP: wbits = 16 + MAX_WBITS; break;
    default: return rt_errf(err, errlen, RT_EINVAL, "compression %d is unknown", (int)fmt);
    }
    f->fmt = fmt;
    f->what = what;
    f->in_len = in_len;
    if (lim)
        f->lim = *lim;
    uint64_t rcap = rt_inflate_cap(in_len > SIZE_MAX ? SIZE_MAX : (size_t)in_len, f->lim.ratio);
    f->cap = f->lim.max_bytes ? f->lim.max_bytes : UINT64_MAX;
    if (rcap < f->cap) {
        f->cap = rcap;
        f->by_ratio = 1;
    }
    if (inflateInit2(&f->z, wbits) != Z_OK)
        return rt_errf(err, errlen, RT_ENOMEM, "out of memory inflating %s", what);
    f->live = 1;
    return 0;
}

void rt_inflate_input(rt_inflater *f, const void *p, size_t n)
{
    f->in_next = p;
    f->in_left = n;
}

/* past the bound (declared: a size the input declares, need) */
static int over(const rt_inflater *f, int declared, uint64_t need, char *err, size_t errlen)
{
    char head[160];
    if (declared)
        snprintf(head, sizeof head, "%s declares %llu bytes inflated", f->what,
                 (unsigned long long)need);
    else if (f->by_ratio)
        snprintf(head, sizeof head, "%s inflates past %llu bytes", f->what,
                 (unsigned long long)f->cap);
    else
        snprintf(head, sizeof head, "%s inflates past", f->what);
    if (f->by_ratio)
        return rt_errf(err, errlen, RT_ETOOBIG,
                       "%s from %llu: over the inflate ratio limit of %u (--max-inflate-ratio)",
                       head, (unsigned long long)f->in_len, f->lim.ratio);
    return rt_errf(err, errlen, RT_ETOOBIG, "%s%s the %s of %llu bytes%s%s%s", head,
                   declared ? ": over" : "", f->lim.max_name ? f->lim.max_name : "limit",
                   (unsigned long long)f->cap, f->lim.max_flag ? " (" : "",
                   f->lim.max_flag ? f->lim.max_flag : "", f->lim.max_flag ? ")" : "");
}

int rt_inflate_admit(const rt_inflater *f, uint64_t need, char *err, size_t errlen)
{
    return need > f->cap ? over(f, 1, need, err, errlen) : 0;
}

/* Input pending: in zlib's hands or not yet given to it. */
static int pending(const rt_inflater *f) { return f->z.avail_in || f->in_left; }

int rt_inflate_read(rt_inflater *f, uint8_t *out, size_t room, size_t *got, char *err,
                    size_t errlen)
{
    *got = 0;
    for (;;) {
        if (f->ended) {
            if (!pending(f))
                return 1;
            /* gzip members follow one another; anything after a deflate
             * or zlib stream is not part of it */
            if (f->fmt != RT_Z_GZIP)
                return rt_errf(err, errlen, RT_EDATA, "%s has %llu bytes after its %s stream",
                               f->what, (unsigned long long)(f->z.avail_in + f->in_left),
                               fmt_name(f->fmt));
            inflateReset(&f->z);
            f->ended = 0;
        }
        if (!f->z.avail_in && f->in_left) {
            size_t take = f->in_left < RT__Z_PIECE ? f->in_left : RT__Z_PIECE;
            f->z.next_in = (Bytef *)f->in_next;
            f->z.avail_in = (uInt)take;
            f->in_next += take;
            f->in_left -= take;
        }
        /* zlib may hold output that needs no more input (a match being
         * copied): it is asked even when the input is all taken */
        uint8_t probe;
        size_t allow = f->cap - f->out < RT__Z_PIECE ? (size_t)(f->cap - f->out) : RT__Z_PIECE;
        /* At the bound: one more byte out of zlib means past it. */
        int at_bound = allow == 0;
        if (!at_bound && room == 0)
            return 0;
        size_t want = at_bound ? 1 : room < allow ? room : allow;
        f->z.next_out = at_bound ? &probe : out;
        f->z.avail_out = (uInt)want;
        int zr = inflate(&f->z, Z_NO_FLUSH);
        size_t n = want - f->z.avail_out;
        if (at_bound && n)
            return over(f, 0, 0, err, errlen);
        if (!at_bound) {
            out += n;
            room -= n;
            *got += n;
            f->out += n;
        }
        if (zr == Z_STREAM_END) {
            f->ended = 1;
            continue;
        }
        if (zr == Z_OK)
            continue;
        if (zr == Z_BUF_ERROR && !pending(f))
            return 0; /* no progress without more input */
        if (zr == Z_MEM_ERROR)
            return rt_errf(err, errlen, RT_ENOMEM, "out of memory inflating %s", f->what);
        return rt_errf(err, errlen, RT_EDATA, "%s is corrupt %s data (%s)", f->what,
                       fmt_name(f->fmt), f->z.msg ? f->z.msg : "inflate failed");
    }
}

int rt_inflate_finish(const rt_inflater *f, char *err, size_t errlen)
{
    if (f->ended && !pending(f))
        return 0;
    return rt_errf(err, errlen, RT_EDATA, "%s is truncated: its %s stream ends after %llu bytes",
                   f->what, fmt_name(f->fmt), (unsigned long long)f->out);
}

void rt_inflate_end(rt_inflater *f)
{
    if (f->live)
        inflateEnd(&f->z);
    f->live = 0;
}

int rt_inflate_all(rt_zfmt fmt, const rt_zspan *in, size_t n_in, const rt_zlimits *lim,
                   const char *what, rt_zgrow_fn grow, void *ud, uint8_t **out, size_t *out_len,
                   char *err, size_t errlen)
{
    *out = NULL;
    *out_len = 0;
    uint64_t in_len = 0;
    for (size_t i = 0; i < n_in; i++)
        in_len += in[i].n;
    rt_inflater f;
    int rc = rt_inflate_begin(&f, fmt, in_len, lim, what, err, errlen);
    if (rc < 0)
        return rc;
    /* The first guess: 4 x the input (real data rarely inflates more),
     * at least 64 KiB, never past the bound. */
    uint64_t first = in_len < ((uint64_t)1 << 28) ? in_len * 4 + 4096 : in_len;
    if (first < 65536)
        first = 65536;
    uint8_t *buf = NULL;
    size_t cap = 0, n = 0;
    for (size_t i = 0; i < n_in && rc >= 0; i++) {
        rt_inflate_input(&f, in[i].p, in[i].n);
        for (;;) {
            if (n == cap && cap < f.cap) {
                uint64_t nc = cap ? (uint64_t)cap * 2 : first;
                if (nc > f.cap)
                    nc = f.cap;
                if (nc > SIZE_MAX / 2) {
                    rc = rt_errf(err, errlen, RT_ENOMEM, "out of memory inflating %s", what);
                    break;
                }
                if (grow && (rc = grow(ud, (size_t)nc - cap, err, errlen)) < 0)
                    break;
                uint8_t *nb = realloc(buf, (size_t)nc);
                if (!nb) {
                    rc = rt_errf(err, errlen, RT_ENOMEM, "out of memory inflating %s", what);
                    break;
                }
                buf = nb;
                cap = (size_t)nc;
            }
            /* a full buffer at the bound (room 0): rt_inflate_read probes
             * for one byte more, and returns 0 only when it wants input */
            size_t got, room = cap - n;
            rc = rt_inflate_read(&f, buf + n, room, &got, err, errlen);
            n += got;
            if (rc != 0 || got < room || room == 0)
                break; /* ended, failed, or it wants the next piece */
        }
    }
    if (rc >= 0)
        rc = rt_inflate_finish(&f, err, errlen);
    rt_inflate_end(&f);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    *out = buf ? buf : malloc(1);
    if (!*out)
        return rt_errf(err, errlen, RT_ENOMEM, "out of memory inflating %s", what);
    *out_len = n;
    return 0;
}
