/* rt_ingest.c - the end of an upload (rt_ingest.h). */
#include "rt_ingest.h"
#include "rt_errf.h"

#include <stdio.h>
#include <string.h>

#include <xxhash.h>

#include "rt_clock.h"
#include "rt_log.h"
#include "rt_obs.h"
#include "rt_stream.h"

/* Charge a parsed dataset to its uploader's stored-bytes quota. Over the
 * quota, the uploader's own least recently used datasets that no call is
 * using make room; nobody else's are touched. */
static int charge_store(const rt_ingest *in, rt_dataset *ds, char *err, size_t errlen)
{
    uint64_t bytes = rt_dataset_bytes(ds);
    for (;;) {
        int rc = rt_principal_reserve(in->who, RT_Q_STORE_BYTES, bytes, err, errlen);
        if (rc == 0) {
            rt_dataset_set_owner(ds, in->who, bytes);
            return 0;
        }
        uint64_t used = rt_principal_used(in->who, RT_Q_STORE_BYTES),
                 lim = rt_principal_limit(in->who, RT_Q_STORE_BYTES);
        int over_quota = bytes > lim || used > lim - bytes;
        if (!over_quota || !rt_data_store_evict_one(in->data, in->who))
            return rc;
    }
}

void rt_dataset_info(const rt_dataset *ds, rt_data_info *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->id, sizeof out->id, "%s", ds->id);
    out->n = ds->n;
    out->x_ndim = ds->x_ndim;
    memcpy(out->x_dims, ds->x_dims, sizeof out->x_dims);
    out->has_labels = ds->y != NULL;
    out->y_dtype = ds->y_dtype;
    out->y_ndim = ds->y_ndim;
    memcpy(out->y_dims, ds->y_dims, sizeof out->y_dims);
    out->bytes = rt_dataset_bytes(ds);
    if (ds->stream) {
        out->streamed = 1;
        out->spool_bytes = rt_stream_file_bytes(ds->stream);
    }
    out->skipped = ds->skipped;
    if (ds->skipped)
        snprintf(out->skip_msg, sizeof out->skip_msg, "%s", ds->skip_msg);
}

/* The dataset stored (retained) in *out; *dedup when it was there
 * already. */
static int ingest(const rt_ingest *in, rt_dataset **out, int *dedup, char *err, size_t errlen)
{
    uint8_t hash[16];
    if (in->any_held) {
        /* the stream hash covers the sent parts only: hash the whole */
        int miss = rt_data_fill_held(rt_data_store_shards(in->data), rt_principal_name(in->who),
                                     in->parts, in->n_parts, *in->buf);
        if (miss >= 0)
            return rt_errf(err, errlen, RT_ENOTFOUND,
                           "shard %d is no longer held by the daemon; send it again", miss);
        XXH128_canonical_t h;
        XXH128_canonicalFromHash(&h, XXH3_128bits(*in->buf, in->total));
        memcpy(hash, h.digest, 16);
    } else {
        memcpy(hash, in->stream_hash, 16);
    }
    if (in->content_given && memcmp(hash, in->content_given, 16) != 0)
        return rt_errf(err, errlen, RT_ECHECKSUM,
                       "content_hash does not match the data's XXH3-128");
    uint8_t key[16];
    rt_data_key(hash, in->parts, in->n_parts, key);
    if (!in->any_held) {
        /* the sample the stream held: checked against the header's, and
         * left for FindDataset's probe */
        if (in->sample_given && memcmp(in->sample_hash, in->sample_given, 16) != 0)
            return rt_errf(err, errlen, RT_ECHECKSUM,
                           "sample_hash does not match the data's sample");
        uint8_t probe[16];
        rt_data_key(in->sample_hash, in->parts, in->n_parts, probe);
        rt_upload_store_probe_put(in->uploads, probe, key);
    }
    rt_dataset *kept = rt_data_store_find_key(in->data, in->who, key);
    *dedup = kept != NULL;
    if (!kept) {
        rt_dataset *ds;
        char e[256];
        int on_disk = 0, rc;
        if (in->state) {
            /* fsync'd before the upload is acknowledged */
            uint64_t t0 = rt_now_ns();
            rc = rt_state_dataset_put(in->state, key, hash, in->parts, in->n_parts, *in->buf,
                                      in->total, &on_disk, e, sizeof e);
            if (in->durable_ns)
                *in->durable_ns += rt_now_ns() - t0;
            if (rc < 0)
                return rt_errf(err, errlen, rc, "cannot keep the dataset: %s", e);
        }
        rt_data_place_finite(in->parts, in->n_parts, in->cur);
        rc = rt_data_parse_take(in->parts, in->n_parts, in->buf, in->total, in->max_dataset_bytes,
                                in->max_inflate_ratio, in->buf_free, &ds, e, sizeof e);
        if (rc < 0)
            return rt_errf(err, errlen, rc, "%s", e);
        if (*in->buf)
            rt_data_keep_shards(rt_data_store_shards(in->data), rt_principal_name(in->who),
                                in->parts, in->n_parts, *in->buf);
        /* MPI replicas with --shard-data: each keeps its block of rows */
        if ((rc = rt_data_hold(ds, e, sizeof e)) < 0) {
            rt_dataset_release(ds);
            return rt_errf(err, errlen, rc, "%s", e);
        }
        if ((rc = rt_dataset_set_key(ds, key)) < 0) {
            rt_dataset_release(ds);
            return rt_errf(err, errlen, rc, "no random bytes for a dataset id");
        }
        if ((rc = charge_store(in, ds, e, sizeof e)) < 0) {
            rt_dataset_release(ds);
            return rt_errf(err, errlen, rc, "%s", e);
        }
        if ((rc = rt_data_store_put(in->data, ds, &kept, dedup)) < 0)
            return rt_errf(err, errlen, rc,
                           "dataset store full (--max-store-bytes %llu) with "
                           "datasets still in use",
                           (unsigned long long)in->max_store_bytes);
        uint64_t t1 = on_disk ? rt_now_ns() : 0;
        rc = on_disk ? rt_state_dataset_owner(in->state, kept, rt_principal_name(in->who), in->name,
                                              e, sizeof e)
                     : 0;
        if (on_disk && in->durable_ns)
            *in->durable_ns += rt_now_ns() - t1;
        if (rc < 0) {
            rt_dataset_release(kept);
            return rt_errf(err, errlen, rc, "cannot keep the dataset: %s", e);
        }
        char did[16], name[80];
        RT_LOG(RT_LOG_INFO, "dataset %s of %s: %lld samples, %llu bytes (\"%s\")",
               rt_log_id(kept->id, did), rt_principal_name(in->who), (long long)kept->n,
               (unsigned long long)rt_dataset_bytes(kept), rt_log_esc(in->name, name, sizeof name));
    }
    *out = kept;
    return 0;
}

int rt_ingest_upload(const rt_ingest *in, rt_data_info *out, char *err, size_t errlen)
{
    rt_dataset *kept = NULL;
    int dedup = 0;
    int rc = ingest(in, &kept, &dedup, err, errlen);
    /* parsed (or adopted: then NULL); the raw bytes are not kept */
    if (*in->buf) {
        in->buf_free(*in->buf);
        *in->buf = NULL;
    }
    /* the upload's charges: a stored dataset has its own (charge_store) */
    rt_principal_unreserve(in->upload_who, RT_Q_UPLOAD_BYTES, in->upload_bytes);
    rt_principal_unreserve(in->upload_who, RT_Q_UPLOADS, 1);
    if (rc < 0)
        return rc;
    rt_dataset_info(kept, out);
    out->dedup = dedup;
    rt_dataset_release(kept);
    return 0;
}
