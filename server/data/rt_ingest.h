/*
 * rt_ingest.h - ingestion, the end of an upload: its bytes become a stored
 * dataset, and the answer's facts about it.
 *
 * The transport has placed the stream's bytes in one buffer (the parts
 * back to back) and hashed them as they came; rt_ingest_upload does the
 * rest, in order: held shards filled in from the shard cache, the content
 * hash checked (and the sample hash, which is left in the probe table),
 * the dataset found by content or parsed, written to the state directory
 * (durable mode, before the answer), charged to its owner's store quota
 * (the owner's least recently used unused datasets make room) and stored;
 * then the upload's own charges go back and the dataset's facts are
 * returned as plain values. The caller makes this one call and keeps
 * nothing of the upload: no reference, no buffer, no charge.
 *
 *     rt_ingest in = {.data = store, .state = st, .uploads = &upstore, .who = who,
 *                     .name = "train", .parts = parts, .n_parts = n, .buf = &buf,
 *                     .total = total, .cur = &cur, .buf_free = rt_bufpool_put,
 *                     .upload_who = who, .upload_bytes = reserved, ...};
 *     rt_data_info info; char err[512];
 *     if ((rc = rt_ingest_upload(&in, &info, err, sizeof err)) < 0) -> fail(rc, err)
 *
 * Threads: any thread; the store, the probe table and the state directory
 * have their own locks.
 */
#ifndef RTRAIN_INGEST_H
#define RTRAIN_INGEST_H

#include <stddef.h>
#include <stdint.h>

#include "rt_data.h"
#include "rt_principal.h"
#include "rt_state.h"
#include "rt_upload_store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_ingest {
    rt_data_store *data;
    rt_state *state;          /* NULL: not durable */
    rt_upload_store *uploads; /* the probe table */
    rt_principal *who;
    const char *name; /* the header's, for the state dir and the log */
    rt_data_part *parts;
    int n_parts;
    int any_held;  /* parts the stream did not carry */
    uint8_t **buf; /* the bytes: taken by the parse, or freed (buf_free); NULL after */
    uint64_t total;
    rt_data_cursor *cur;
    void (*buf_free)(void *); /* how *buf is freed */
    /* XXH3-128 of the stream and of its sample (rt_sample_run), canonical;
     * ignored with any_held (the whole buffer is hashed) */
    uint8_t stream_hash[16], sample_hash[16];
    const uint8_t *content_given; /* the client's content hash, or NULL */
    const uint8_t *sample_given;  /* the client's sample hash, or NULL */
    uint64_t max_dataset_bytes;
    uint32_t max_inflate_ratio;
    uint64_t max_store_bytes; /* for the message when the store is full */
    uint64_t *durable_ns;     /* with state: += the time writing it (or NULL) */
    /* The upload's own charges, upload_who's: one RT_Q_UPLOADS and
     * upload_bytes of RT_Q_UPLOAD_BYTES. Held while it is parsed (the upload
     * and the dataset it becomes are both charged then), given back when
     * rt_ingest_upload returns, either way. NULL: none. */
    rt_principal *upload_who;
    uint64_t upload_bytes;
} rt_ingest;

/* What an answer says of a stored dataset, as plain values (no reference
 * is held): its id, shapes, the bytes it holds (and its spool file's,
 * streamed), the records a TFRecord parse left out. */
typedef struct rt_data_info {
    char id[40];
    int64_t n;
    int x_ndim;
    int64_t x_dims[RT_MAX_DIMS];
    int has_labels;
    rt_dtype y_dtype;
    int y_ndim;
    int64_t y_dims[RT_MAX_DIMS];
    uint64_t bytes;
    int streamed;
    uint64_t spool_bytes;
    int64_t skipped;
    char skip_msg[160];
    int dedup; /* rt_ingest_upload: the dataset was stored already */
} rt_data_info;

/* ds's facts (dedup 0). */
void rt_dataset_info(const rt_dataset *ds, rt_data_info *out);

/* The stored dataset's facts in *out (out->dedup when it was there
 * already; the store holds it, the caller holds nothing). An RT_ code with
 * a message in err otherwise. Either way *in->buf is consumed and the
 * upload's charges are given back. */
int rt_ingest_upload(const rt_ingest *in, rt_data_info *out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
