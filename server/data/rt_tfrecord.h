/*
 * rt_tfrecord.h - TFRecord files: record framing and the GZIP/ZLIB
 * compression TFRecordWriter can apply to a whole file.
 *
 * A record on disk is
 *
 *     uint64 length            little-endian
 *     uint32 masked_crc32c(length bytes)
 *     byte   data[length]
 *     uint32 masked_crc32c(data)
 *
 * and a file is records back to back. A compressed file is the same bytes
 * through zlib (ZLIB: a zlib stream; GZIP: gzip members), so it is inflated
 * first (rt_inflate.h: RT_Z_ZLIB, RT_Z_GZIP) and then framed.
 *
 *     rt_tfr_reader r;
 *     rt_tfr_reader_init(&r, raw, n);
 *     const uint8_t *rec; size_t rl; int rc;
 *     while ((rc = rt_tfr_next(&r, &rec, &rl, err, sizeof err)) > 0)
 *         use(rec, rl);                 // points into raw
 *     if (rc < 0 && r.fatal) ...        // framing lost: stop this file
 *     free(raw);
 *
 * Errors say which record (0-based, counted from the start of the file) and
 * at which byte offset.
 */
#ifndef RTRAIN_TFRECORD_H
#define RTRAIN_TFRECORD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Values match proto Compression. */
typedef enum rt_tfr_compression {
    RT_TFR_NONE = 0,
    RT_TFR_GZIP = 1,
    RT_TFR_ZLIB = 2
} rt_tfr_compression;

typedef struct rt_tfr_reader {
    const uint8_t *buf;
    size_t len, off; /* off: start of the next record */
    int64_t index;   /* the next record's index */
    int fatal;       /* framing is lost; rt_tfr_next returns the error again */
} rt_tfr_reader;

void rt_tfr_reader_init(rt_tfr_reader *r, const uint8_t *buf, size_t len);

/* The next record: returns 1 with *rec and *len set (pointing into the buffer),
 * 0 at the end of the buffer, or a negative code with a message:
 *   RT_ECHECKSUM, fatal = 0: the data CRC does not match; the reader has
 *       moved past the record, so a caller may skip it and go on;
 *   RT_ECHECKSUM, fatal = 1: the length's CRC does not match;
 *   RT_ETRUNCATED, fatal = 1: the buffer ends inside a record. */
int rt_tfr_next(rt_tfr_reader *r, const uint8_t **rec, size_t *len, char *err, size_t errlen);

/* Append one framed record to out (which must have rt_tfr_framed_size(n)
 * bytes); returns the bytes written. For writers and tests. */
static inline size_t rt_tfr_framed_size(size_t n) { return n + 16; }
size_t rt_tfr_frame(const void *data, size_t n, uint8_t *out);

#ifdef __cplusplus
}
#endif
#endif
