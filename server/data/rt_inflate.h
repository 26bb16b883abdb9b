/*
 * rt_inflate.h - the daemon's one inflater. Every compressed input it
 * takes goes through here: gRPC messages a client compressed (rt_srv.c),
 * gzip'ed IDX parts (rt_data.c) and GZIP/ZLIB TFRecord shards
 * (rt_example.c). One rule bounds them all: the output stops at
 *
 *     min(max_bytes, rt_inflate_cap(in_len, ratio))
 *
 * where max_bytes is the caller's limit (the message limit, the dataset
 * limit) and ratio is --max-inflate-ratio; in_len is the whole compressed
 * input's size. Past it the inflater fails with RT_ETOOBIG before one more
 * byte is written, naming the bound and the flag that raises it:
 *
 *     shard 0 inflates past 104857600 bytes from 1048576: over the inflate
 *         ratio limit of 100 (--max-inflate-ratio)
 *     compressed UploadChunk inflates past the message limit of 67108864
 *         bytes (--max-message-bytes)
 *
 * Corrupt or truncated input fails with RT_EDATA. GZIP input may be
 * several members back to back (as gzip writes them); a DEFLATE or ZLIB
 * stream must be the whole input.
 *
 * Streaming (output in pieces, input in pieces):
 *
 *     rt_inflater f;
 *     if (rt_inflate_begin(&f, RT_Z_GZIP, len, &lim, "gzip IDX", err, n) < 0) ...
 *     rt_inflate_input(&f, in, len);          // again once f has taken it all
 *     size_t got;
 *     while ((rc = rt_inflate_read(&f, buf, sizeof buf, &got, err, n)) == 0 && got)
 *         use(buf, got);
 *     // rc 1: the stream ended; 0 with got < room: it wants more input
 *     rt_inflate_end(&f);
 *
 * All of it into one malloc'ed buffer: rt_inflate_all.
 */
#ifndef RTRAIN_INFLATE_H
#define RTRAIN_INFLATE_H

#include <stddef.h>
#include <stdint.h>

#include <zlib.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rt_zfmt {
    RT_Z_DEFLATE = 0, /* raw deflate */
    RT_Z_ZLIB = 1,    /* RFC 1950 */
    RT_Z_GZIP = 2     /* RFC 1952, members back to back */
} rt_zfmt;

/* What len compressed bytes may inflate to under ratio (0 = no cap:
 * UINT64_MAX): ratio x len, and at least 1 MiB (small inputs may always
 * inflate that far: the ratio is for bombs). */
static inline uint64_t rt_inflate_cap(size_t len, uint32_t ratio)
{
    if (!ratio)
        return UINT64_MAX;
    uint64_t cap = (uint64_t)len > UINT64_MAX / ratio ? UINT64_MAX : (uint64_t)len * ratio;
    return cap > (1u << 20) ? cap : (1u << 20);
}

typedef struct rt_zlimits {
    uint64_t max_bytes;   /* 0: none */
    const char *max_name; /* what max_bytes is: "dataset limit" */
    const char *max_flag; /* the flag that sets it: "--max-dataset-bytes" */
    uint32_t ratio;       /* --max-inflate-ratio; 0: none */
} rt_zlimits;

typedef struct rt_inflater {
    z_stream z;
    rt_zfmt fmt;
    rt_zlimits lim;
    const char *what;       /* names the input in errors */
    uint64_t in_len;        /* the whole input's compressed size */
    uint64_t cap;           /* the bound on the output */
    uint64_t out;           /* bytes written so far */
    const uint8_t *in_next; /* input not yet handed to zlib */
    size_t in_left;
    int by_ratio; /* the cap is the ratio's, not max_bytes' */
    int ended;    /* the stream (a gzip member) ended */
    int live;     /* inflateInit2 succeeded */
} rt_inflater;

/* Start inflating in_len compressed bytes of fmt under lim; what names the
 * input in errors ("shard 2", "compressed UploadChunk"; kept, not copied).
 * RT_ENOMEM if zlib cannot start, RT_EINVAL for an unknown fmt. */
int rt_inflate_begin(rt_inflater *f, rt_zfmt fmt, uint64_t in_len, const rt_zlimits *lim,
                     const char *what, char *err, size_t errlen);
/* The next n bytes of input, once the previous ones were all taken
 * (rt_inflate_read returned with got < room). */
void rt_inflate_input(rt_inflater *f, const void *p, size_t n);
/* Up to room bytes into out (*got of them). Returns 1 when the stream has
 * ended and no input is left, 0 when out is full or the input ran out
 * (*got < room), or a negative code: RT_ETOOBIG past the bound, RT_EDATA
 * for corrupt input or bytes after a DEFLATE/ZLIB stream's end. */
int rt_inflate_read(rt_inflater *f, uint8_t *out, size_t room, size_t *got, char *err,
                    size_t errlen);
/* A size the input declares for what it inflates to (an IDX header): 0 if
 * the bound allows it, else RT_ETOOBIG naming the bound, before anything
 * is allocated. */
int rt_inflate_admit(const rt_inflater *f, uint64_t need, char *err, size_t errlen);
/* All input given: RT_EDATA unless the stream ended. */
int rt_inflate_finish(const rt_inflater *f, char *err, size_t errlen);
void rt_inflate_end(rt_inflater *f);

/* One piece of input. */
typedef struct rt_zspan {
    const uint8_t *p;
    size_t n;
} rt_zspan;

/* Called before the output buffer grows by more bytes (to charge them to
 * a quota); a negative return (with err set) stops the inflation. */
typedef int (*rt_zgrow_fn)(void *ud, size_t more, char *err, size_t errlen);

/* Inflate the n_in pieces of in (one input, in_len bytes in all) into a
 * malloc'ed buffer (*out, *out_len; at least 1 byte allocated), grown by
 * doubling up to the bound and never past it; grow (may be NULL) is asked
 * first. On failure nothing is returned and the error is rt_inflate_read's,
 * grow's, or RT_ENOMEM. */
int rt_inflate_all(rt_zfmt fmt, const rt_zspan *in, size_t n_in, const rt_zlimits *lim,
                   const char *what, rt_zgrow_fn grow, void *ud, uint8_t **out, size_t *out_len,
                   char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
