/* rt_h_upload.c - UploadDataset (the stream: header, chunks placed and
 * hashed, the lane of a large upload, what a broken one leaves in the
 * upload store) and FindDataset. The end of an upload is rt_ingest.h's. */
#include "rt_handlers.h"

/* ----------------------------------------------------------------- Upload */
/* Where a stream's bytes go: the dataset's final buffer, filled once, and
 * the hashes of what arrived, advanced as it arrives. What a broken stream
 * leaves behind when it is kept for a resume (rt_upload_kept). */
typedef struct up_data {
    uint8_t *buf;
    rt_data_cursor cur; /* where the next stream bytes go */
    uint64_t received;  /* stream bytes placed */
    uint64_t hashed;    /* stream bytes hashed (the lane's position) */
    XXH64_state_t *x64; /* NULL under no_checksum */
    XXH3_state_t *x3;
    XXH3_state_t *xs; /* the sample (rt_sample_run) */
} up_data;

static void up_data_free(void *p)
{
    up_data *d = p;
    if (!d)
        return;
    rt_bufpool_put(d->buf);
    if (d->x64)
        XXH64_freeState(d->x64);
    if (d->x3)
        XXH3_freeState(d->x3);
    if (d->xs)
        XXH3_freeState(d->xs);
    free(d);
}

typedef struct upload_st {
    int have_header;
    int done; /* the last chunk arrived and checked */
    int bad;  /* a chunk was refused: nothing is kept */
    char name[64];
    rt_data_part parts[RT_DATA_MAX_PARTS];
    int n_parts;
    rt_example_spec spec;  /* TFRecord parts point here */
    uint64_t stream_total; /* bytes in the stream: parts not held */
    int any_held;
    uint8_t content_hash_given[16];
    int has_content_hash;
    int hash_later; /* the content hash comes in a chunk */
    uint8_t sample_given[16];
    int has_sample;
    int no_checksum;
    uint8_t key[16]; /* rt_data_key: what a kept stream is found by */
    uint64_t total;
    uint64_t resumed; /* stream bytes taken from a kept broken upload */
    up_data *d;
    rt_srv *srv;
    rt_principal *who;    /* holds one RT_Q_UPLOADS and reserved bytes */
    uint64_t reserved;    /* RT_Q_UPLOAD_BYTES (up_reserve) */
    int cut_short;        /* its reservation could not grow */
    int busy;             /* counted in rt_bufpool_busy */
    struct up_lane *lane; /* large uploads: hashing and placing off the cq thread */
    int sum_later;        /* the lane's XXH64 is checked by upload_work */
    uint64_t sum_given;   /* the last chunk's checksum, then */
} upload_st;

/* A large upload's lane: the cq thread hands each chunk's received
 * slices (the byte buffer itself, no copy) to a thread of the upload's
 * own, which hashes, places and checks them in order, and goes back to
 * reading the socket: receiving and the one pass over the data overlap
 * instead of taking turns on one thread. Each chunk handed over holds
 * the stream's next receive (rt_call_recv_hold) until the lane takes it
 * up, so the next chunk is received while this one is hashed, at most one
 * waits, and no cq thread ever waits for the lane: it serves other calls
 * meanwhile, and HTTP/2 flow control slows the uploader. Everything that
 * reads what the lane writes drains it first (up_drain). */
#define RT__LANE_DEPTH 2
#define RT__LANE_MIN (8u << 20) /* smaller uploads place inline */
typedef struct up_item {
    grpc_byte_buffer *bb;
    rt_wire_span *sp;
    size_t n;
} up_item;

typedef struct up_lane {
    pthread_t t;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    up_item q[RT__LANE_DEPTH];
    int head, count, working, stop;
    rt_call *held; /* a call whose receive the lane resumes */
    upload_st *u;
} up_lane;

/* The upload's quotas go back before its status (finish): a client that
 * has its answer may start the next upload at once. A stream that broke
 * (cancelled, cut short, stalled) after sending some of a dataset whose
 * content hash it declared leaves its bytes, hashes and byte charge for
 * --upload-keep-s, so the same upload resumes where it stopped. */
static void up_drain(upload_st *u);
static void up_lane_stop(upload_st *u);

static void upload_st_done(void *p)
{
    upload_st *u = p;
    up_drain(u); /* a kept upload's bytes and hashes are all placed */
    if (u->who && u->have_header && !u->done && !u->bad && u->has_content_hash && !u->any_held &&
        u->d && u->d->received > 0 && u->srv->cfg.upload_keep_ms) {
        rt_upload_kept *k = calloc(1, sizeof *k);
        if (k) {
            k->who = u->who;
            memcpy(k->key, u->key, 16);
            k->offset = u->d->received;
            k->bytes = u->reserved;
            if (u->has_sample) {
                rt_data_key(u->sample_given, u->parts, u->n_parts, k->probe);
                k->has_probe = 1;
            }
            k->st = u->d;
            k->st_free = up_data_free;
            u->d = NULL;
            u->reserved = 0;
            RT_LOG(RT_LOG_INFO,
                   "upload %02x%02x%02x%02x.. broke at %llu of %llu bytes: kept "
                   "for %llu s",
                   u->key[0], u->key[1], u->key[2], u->key[3], (unsigned long long)k->offset,
                   (unsigned long long)u->stream_total,
                   (unsigned long long)(u->srv->cfg.upload_keep_ms / 1000));
            rt_upload_store_put(&u->srv->upstore, k);
        }
    }
    if (u->busy) {
        u->busy = 0;
        rt_bufpool_busy(-1);
    }
    if (u->who) { /* once: upload_st_free comes here again */
        rt_principal_unreserve(u->who, RT_Q_UPLOAD_BYTES, u->reserved);
        rt_principal_unreserve(u->who, RT_Q_UPLOADS, 1);
    }
    u->who = NULL;
    u->reserved = 0;
}

static void upload_st_free(void *p)
{
    upload_st *u = p;
    upload_st_done(u);
    up_lane_stop(u);
    up_data_free(u->d);
    free(u);
}

static int parts_from_header(rt_call *c, const Rtrain__V1__DatasetHeader *h, rt_data_part *parts,
                             int *n_parts, uint64_t *total, rt_example_spec *spec)
{
    int tfr = h->n_parts >= 1 && h->parts[0]->format == RTRAIN__V1__DATA_FORMAT__FORMAT_TFRECORD;
    if (tfr) {
        char err[200];
        if (h->n_parts > RT_DATA_MAX_PARTS)
            return rt_call_fail(c, RT_EDATA, "a TFRecord dataset has 1..%d shards; got %zu",
                                RT_DATA_MAX_PARTS, h->n_parts);
        if (rt_example_spec_from_pb(h->example_spec, spec, err, sizeof err) < 0)
            return rt_call_fail(c, RT_EINVAL, "example_spec: %s", err);
    } else if (h->n_parts < 1 || h->n_parts > 3)
        return rt_call_fail(c, RT_EDATA,
                            "a dataset has 1 to 3 parts (features [+ labels] [+ sample weights]); "
                            "got %zu",
                            h->n_parts);
    uint64_t sum = 0;
    for (size_t i = 0; i < h->n_parts; i++) {
        const Rtrain__V1__DataPart *p = h->parts[i];
        rt_data_part *d = &parts[i];
        memset(d, 0, sizeof *d);
        d->role = (rt_data_role)p->role;
        d->format = (rt_data_format)p->format;
        d->length = p->length;
        d->dtype = (rt_dtype)p->dtype;
        if (p->n_shape > RT_MAX_DIMS)
            return rt_call_fail(c, RT_EDATA, "part %zu shape has more than %d dims", i,
                                RT_MAX_DIMS);
        d->ndim = (int)p->n_shape;
        if (p->n_shape) /* shape is NULL when empty (CSV/NPY/IDX parts): memcpy(NULL) is UB */
            memcpy(d->dims, p->shape, sizeof(int64_t) * p->n_shape);
        d->label_column = p->label_column;
        d->csv_header = p->csv_header;
        d->normalize = p->normalize;
        d->compression = (rt_tfr_compression)p->compression;
        d->spec = tfr ? spec : NULL;
        if ((int)p->storage < 0 || (int)p->storage > 2)
            return rt_call_fail(c, RT_EINVAL, "part %zu has unknown storage %d", i,
                                (int)p->storage);
        if ((p->storage || p->shuffle_buffer) && tfr)
            return rt_call_fail(c, RT_EINVAL,
                                "part %zu: a TFRecord set takes storage from example_spec", i);
        if ((p->storage || p->shuffle_buffer) && p->role != RTRAIN__V1__DATA_ROLE__ROLE_FEATURES &&
            p->role != RTRAIN__V1__DATA_ROLE__ROLE_BOTH)
            return rt_call_fail(
                c, RT_EINVAL, "part %zu: storage and shuffle_buffer are for the features part", i);
        if (p->shuffle_buffer > RT_DATA_MAX_SHUFFLE)
            return rt_call_fail(c, RT_EINVAL, "part %zu: shuffle_buffer %llu is too large", i,
                                (unsigned long long)p->shuffle_buffer);
        d->storage = (int)p->storage;
        d->shuffle_buffer = (int64_t)p->shuffle_buffer;
        if (p->shard_hash.len || p->held) {
            if (!tfr || p->shard_hash.len != 16)
                return rt_call_fail(
                    c, RT_EINVAL, "part %zu: shard_hash (16 bytes, XXH3-128) is for TFRecord parts",
                    i);
            memcpy(d->shard_hash, p->shard_hash.data, 16);
            d->has_shard_hash = 1;
            d->held = p->held;
        }
        if (p->length > UINT64_MAX - sum)
            return rt_call_fail(c, RT_EDATA, "part lengths overflow");
        sum += p->length;
    }
    if (h->total_bytes && h->total_bytes != sum)
        return rt_call_fail(c, RT_EDATA, "total_bytes %llu is not the sum of part lengths %llu",
                            (unsigned long long)h->total_bytes, (unsigned long long)sum);
    *n_parts = (int)h->n_parts;
    *total = sum;
    return 0;
}

/* Place one run of stream bytes and hash it, a cache-sized block at a
 * time: the hash reads a block from memory and the copy into the final
 * buffer reads it again from cache (a slice can be megabytes: hashing it
 * whole, then copying it, would read it from memory twice). */
#define RT__UP_BLOCK (64u << 10)
static void up_place(upload_st *u, const uint8_t *p, size_t n)
{
    up_data *d = u->d;
    while (n) {
        size_t b = n < RT__UP_BLOCK ? n : RT__UP_BLOCK;
        XXH3_128bits_update(d->x3, p, b);
        size_t at, run;
        for (size_t o = 0; o < b && (run = rt_sample_run(d->hashed + o, b - o, &at)); o += at + run)
            XXH3_128bits_update(d->xs, p + o + at, run);
        d->hashed += b;
        if (d->x64)
            XXH64_update(d->x64, p, b);
        rt_data_place(u->parts, u->n_parts, &d->cur, d->buf, p, b);
        p += b;
        n -= b;
    }
}

static void *up_lane_main(void *arg)
{
    up_lane *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->count && !l->stop)
            pthread_cond_wait(&l->cv, &l->mu);
        if (!l->count)
            break;
        up_item it = l->q[l->head];
        l->head = (l->head + 1) % RT__LANE_DEPTH;
        l->count--;
        l->working = 1;
        rt_call *held = l->held;
        l->held = NULL;
        pthread_mutex_unlock(&l->mu);
        if (held) /* while working: up_drain waits for this too */
            rt_call_recv_resume(held);
        for (size_t i = 0; i < it.n; i++)
            up_place(l->u, it.sp[i].p, it.sp[i].n);
        grpc_byte_buffer_destroy(it.bb);
        free(it.sp);
        pthread_mutex_lock(&l->mu);
        l->working = 0;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* A lane for a large upload; none (everything inline) if no thread. */
static void up_lane_start(upload_st *u)
{
    if (u->stream_total < RT__LANE_MIN)
        return;
    up_lane *l = calloc(1, sizeof *l);
    if (!l)
        return;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->u = u;
    if (pthread_create(&l->t, NULL, up_lane_main, l) != 0) {
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->cv);
        free(l);
        return;
    }
    u->lane = l;
}

/* Hand one chunk's slices to the lane: it owns bb and sp from here. c's
 * next receive is held until the lane takes the chunk up (the hold comes
 * before the lane can take it, so the resume is never lost). */
static void up_lane_put(up_lane *l, rt_call *c, grpc_byte_buffer *bb, rt_wire_span *sp, size_t n)
{
    pthread_mutex_lock(&l->mu);
    while (l->count == RT__LANE_DEPTH) /* not reached: one is queued at most */
        pthread_cond_wait(&l->cv, &l->mu);
    l->q[(l->head + l->count) % RT__LANE_DEPTH] = (up_item){bb, sp, n};
    l->count++;
    rt_call_recv_hold(c);
    l->held = c;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

static void up_drain(upload_st *u)
{
    up_lane *l = u->lane;
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    while (l->count || l->working)
        pthread_cond_wait(&l->cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
}

static void up_lane_stop(upload_st *u)
{
    up_lane *l = u->lane;
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->t, NULL); /* it places what is queued first */
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
    u->lane = NULL;
}

/* What an upload reserves (--max-upload-bytes, the principal's upload
 * quota and the memory budget) is what has arrived, plus the bytes of its
 * held shards, plus a window, never more than its declared size: uploads
 * that declare gigabytes and send nothing hold a window each, not their
 * declarations, and cannot starve the others. The window is the server
 * cap's share for twice --max-uploads uploads (at least 1 MiB), so even
 * --max-uploads stalled ones leave half the cap free. Growing past the cap
 * fails the upload (RESOURCE_EXHAUSTED) where it stands; with a
 * content_hash its bytes are kept for a resume. */
static uint64_t up_window(const rt_srv *s)
{
    uint64_t cap = s->cfg.max_upload_bytes ? s->cfg.max_upload_bytes : 2 * s->cfg.max_dataset_bytes;
    uint64_t w = cap / (2 * (uint64_t)(s->cfg.max_uploads > 0 ? s->cfg.max_uploads : 1));
    return w < (1u << 20) ? (1u << 20) : w;
}

/* The least of --max-dataset-bytes, the upload cap, the principal's
 * upload-bytes quota and half the memory budget (an upload and the dataset
 * it becomes are both charged while it is parsed). */
uint64_t rt_h_upload_limit(const rt_call *c)
{
    const rt_srv *s = c->srv;
    uint64_t cap = s->cfg.max_upload_bytes ? s->cfg.max_upload_bytes : 2 * s->cfg.max_dataset_bytes;
    uint64_t lim = s->cfg.max_dataset_bytes < cap ? s->cfg.max_dataset_bytes : cap;
    uint64_t q = rt_principal_limit(c->who, RT_Q_UPLOAD_BYTES);
    uint64_t b = rt_principal_set_budget(s->principals);
    if (q < lim)
        lim = q;
    if (b != RT_QUOTA_UNLIMITED && b / 2 < lim)
        lim = b / 2;
    return lim;
}

/* Cover arrived bytes of the stream: grown by a window once they pass
 * the reservation (at the header, first: at once). */
static int up_reserve(rt_call *c, upload_st *u, uint64_t arrived, int first)
{
    uint64_t want = arrived + (u->total - u->stream_total);
    if (!first && want <= u->reserved && want <= c->up_bytes)
        return 0;
    uint64_t t = want + up_window(c->srv);
    if (t > u->total || t < want)
        t = u->total;
    int rc;
    if (c->up_bytes < t && (rc = rt_srv_upload_reserve(c, t - c->up_bytes)) < 0) {
        u->cut_short = 1;
        return rc;
    }
    if (u->reserved < t) {
        /* over the principal's quota, its own kept uploads make room */
        char err[200];
        while ((rc = rt_principal_reserve(c->who, RT_Q_UPLOAD_BYTES, t - u->reserved, err,
                                          sizeof err)) < 0 &&
               rt_upload_store_drop_one(&c->srv->upstore, c->who))
            ;
        if (rc < 0) {
            u->cut_short = 1;
            return rt_call_fail(c, rc, "%s", err);
        }
        u->reserved = t;
    }
    return 0;
}

/* The header: parts, limits, reservations, and the buffer, fresh or taken
 * back from a kept broken upload (resume_offset). */
static int upload_begin(rt_call *c, upload_st *u, const Rtrain__V1__DatasetHeader *h)
{
    int rc = rt_h_need_session(c, h->session_id);
    if (rc < 0)
        return rc;
    if ((rc = parts_from_header(c, h, u->parts, &u->n_parts, &u->total, &u->spec)) < 0)
        return rc;
    if (u->total > c->srv->cfg.max_dataset_bytes)
        return rt_call_fail(c, RT_ETOOBIG, "dataset of %llu bytes is over the limit of %llu",
                            (unsigned long long)u->total,
                            (unsigned long long)c->srv->cfg.max_dataset_bytes);
    if (h->content_hash.len) {
        if (h->content_hash.len != 16)
            return rt_call_fail(c, RT_EINVAL, "content_hash must be 16 bytes (XXH3-128)");
        memcpy(u->content_hash_given, h->content_hash.data, 16);
        u->has_content_hash = 1;
        rt_data_key(u->content_hash_given, u->parts, u->n_parts, u->key);
    }
    u->no_checksum = h->no_checksum;
    u->hash_later = h->hash_later;
    if (u->hash_later && (u->has_content_hash || h->resume_offset))
        return rt_call_fail(c, RT_EINVAL, "hash_later is for a header without %s",
                            u->has_content_hash ? "content_hash" : "resume_offset");
    if ((u->no_checksum || h->resume_offset) && !u->has_content_hash && !u->hash_later)
        return rt_call_fail(c, RT_EINVAL, "%s needs the header's content_hash (or hash_later)",
                            u->no_checksum ? "no_checksum" : "resume_offset");
    if (h->sample_hash.len) {
        if (h->sample_hash.len != 16)
            return rt_call_fail(c, RT_EINVAL, "sample_hash must be 16 bytes (XXH3-128)");
        memcpy(u->sample_given, h->sample_hash.data, 16);
        u->has_sample = 1;
    }
    snprintf(u->name, sizeof u->name, "%s", h->name);
    u->stream_total = 0;
    for (int i = 0; i < u->n_parts; i++) {
        u->any_held |= u->parts[i].held;
        u->stream_total += u->parts[i].held ? 0 : u->parts[i].length;
    }
    if ((h->resume_offset || u->hash_later || u->has_sample) && u->any_held)
        return rt_call_fail(c, RT_EINVAL, "%s with held shards",
                            h->resume_offset ? "resume_offset"
                            : u->hash_later  ? "hash_later"
                                             : "sample_hash");
    /* What a broken upload of this content left: taken for a resume, or
     * dropped by a fresh start (its bytes would only be held twice). */
    rt_upload_kept *k =
        u->has_content_hash ? rt_upload_store_take(&c->srv->upstore, c->who, u->key) : NULL;
    if (h->resume_offset && (!k || k->offset != h->resume_offset)) {
        uint64_t have = k ? k->offset : 0;
        rt_upload_kept_free(k);
        return rt_call_fail(c, RT_ENOTFOUND,
                            "no broken upload to resume at %llu (the daemon holds %llu bytes of "
                            "it); send it all",
                            (unsigned long long)h->resume_offset, (unsigned long long)have);
    }
    if (k && !h->resume_offset) {
        rt_upload_kept_free(k);
        k = NULL;
    }
    /* The upload's count is charged before its buffer exists, against the
     * principal; its bytes as they come (up_reserve). A resume takes over
     * the kept upload's charge. */
    char err[200];
    if ((rc = rt_principal_reserve(c->who, RT_Q_UPLOADS, 1, err, sizeof err)) < 0) {
        rt_upload_kept_free(k);
        return rt_call_fail(c, rc, "%s", err);
    }
    u->who = c->who;
    u->busy = 1;
    rt_bufpool_busy(1);
    if (k) {
        u->reserved = k->bytes;
        u->d = k->st;
        u->resumed = k->offset;
        free(k); /* its charge and data are the upload's now */
        rt_metrics_upload(0, u->resumed);
        if ((rc = up_reserve(c, u, u->resumed, 1)) < 0)
            return rc;
    } else {
        if ((rc = up_reserve(c, u, 0, 1)) < 0)
            return rc;
        u->d = calloc(1, sizeof *u->d);
        if (u->d) {
            u->d->buf = rt_bufpool_get(u->total);
            u->d->x3 = XXH3_createState();
            u->d->xs = XXH3_createState();
            u->d->x64 = u->no_checksum ? NULL : XXH64_createState();
        }
        if (!u->d || !u->d->buf || !u->d->x3 || !u->d->xs || (!u->no_checksum && !u->d->x64))
            return rt_call_fail(c, RT_ENOMEM, "out of memory for a %llu-byte dataset",
                                (unsigned long long)u->total);
        if (u->d->x64)
            XXH64_reset(u->d->x64, 0);
        XXH3_128bits_reset(u->d->x3);
        XXH3_128bits_reset(u->d->xs);
    }
    u->have_header = 1;
    up_lane_start(u);
    return 0;
}

static Rtrain__V1__DatasetInfo *found_info(rt_call *c, const rt_dataset *ds);

static int check_sum(rt_call *c, up_data *d, uint64_t given)
{
    if (!d->x64)
        return 0;
    uint64_t sum = XXH64_digest(d->x64);
    if (sum != given)
        return rt_call_fail(c, RT_ECHECKSUM,
                            "checksum mismatch: XXH64 of the data is %016llx, the client sent "
                            "%016llx",
                            (unsigned long long)sum, (unsigned long long)given);
    return 0;
}

static int upload_chunk(rt_call *c, upload_st *u)
{
    Rtrain__V1__UploadChunk *q = REQ(c, Rtrain__V1__UploadChunk);
    if (u->done)
        return rt_call_fail(c, RT_EPROTO, "UploadChunk after the last one");
    if (!u->have_header) {
        if (!q->header)
            return rt_call_fail(c, RT_EPROTO, "the first UploadChunk has no header");
        int rc = upload_begin(c, u, q->header);
        if (rc < 0)
            return rc;
    } else if (q->header) {
        return rt_call_fail(c, RT_EPROTO, "UploadChunk header after the first chunk");
    }
    rt_srv_upload_touch(c);
    up_data *d = u->d;
    if (q->content_hash.len) {
        /* hash_later: the client hashed while it sent */
        if (!u->hash_later)
            return rt_call_fail(c, RT_EINVAL,
                                "a chunk's content_hash needs the header's hash_later");
        if (u->has_content_hash)
            return rt_call_fail(c, RT_EPROTO, "content_hash sent twice");
        if (q->content_hash.len != 16)
            return rt_call_fail(c, RT_EINVAL, "content_hash must be 16 bytes (XXH3-128)");
        memcpy(u->content_hash_given, q->content_hash.data, 16);
        u->has_content_hash = 1;
        rt_data_key(u->content_hash_given, u->parts, u->n_parts, u->key);
        /* a fresh start of this content: a broken one's bytes would only
         * be held twice */
        rt_upload_kept_free(rt_upload_store_take(&c->srv->upstore, c->who, u->key));
        /* Stored already (the probe missed it: a restart, or its entry
         * went): answered now, the rest of the stream is not read. */
        rt_dataset *ds = rt_data_store_find_key(c->srv->data, c->who, u->key);
        if (ds) {
            c->ds = ds;
            u->done = 1; /* nothing to keep */
            Rtrain__V1__UploadResponse *r =
                NEW(c, Rtrain__V1__UploadResponse, RTRAIN__V1__UPLOAD_RESPONSE__INIT);
            if (!r || !(r->dataset = found_info(c, ds)))
                return OOM(c);
            r->bytes_received = d->received;
            c->resp = &r->base;
            return 0;
        }
    }
    /* The data: in place in the received slices, or decoded (compressed). */
    size_t len = 0;
    if (c->bulk) {
        for (size_t i = 0; i < c->n_bulk; i++)
            len += c->bulk[i].n;
    } else {
        len = q->data.len;
    }
    if (len) {
        if (q->offset != d->received)
            return rt_call_fail(c, RT_EPROTO, "chunk offset %llu, expected %llu",
                                (unsigned long long)q->offset, (unsigned long long)d->received);
        if (len > u->stream_total - d->received)
            return rt_call_fail(c, RT_EDATA, "chunk at %llu overruns the %llu bytes declared",
                                (unsigned long long)q->offset, (unsigned long long)u->stream_total);
        int rc = up_reserve(c, u, d->received + len, 0);
        if (rc < 0)
            return rc;
        d->received += len;
        if (c->bulk && u->lane) {
            /* the slices go to the lane as they are; the call lets go */
            up_lane_put(u->lane, c, c->payload, c->bulk, c->n_bulk);
            c->payload = NULL;
            c->bulk = NULL;
            c->n_bulk = 0;
        } else if (c->bulk) {
            for (size_t i = 0; i < c->n_bulk; i++)
                up_place(u, c->bulk[i].p, c->bulk[i].n);
        } else {
            up_drain(u); /* in order after what the lane holds */
            up_place(u, q->data.data, q->data.len);
        }
        rt_metrics_upload(len, 0);
    }
    if (q->last) {
        if (u->hash_later && !u->has_content_hash)
            return rt_call_fail(c, RT_EINVAL,
                                "hash_later, but no chunk up to the last had the content_hash");
        if (u->lane) {
            /* The lane may hold chunks still: waiting for it here would
             * hold this cq thread (and every call it serves) for as long
             * as hashing them takes. upload_work ends the lane and checks
             * the sum, on the executor. */
            u->sum_later = 1;
            u->sum_given = q->checksum;
        } else {
            int rc = check_sum(c, d, q->checksum);
            if (rc < 0)
                return rc;
        }
        if (d->received != u->stream_total)
            return rt_call_fail(c, RT_ETRUNCATED, "upload ended at %llu of %llu bytes",
                                (unsigned long long)d->received,
                                (unsigned long long)u->stream_total);
        u->done = 1;
    }
    return 0;
}

int rt_h_upload_chunk(rt_call *c)
{
    upload_st *u = c->st;
    if (!u) {
        u = calloc(1, sizeof *u);
        if (!u)
            return OOM(c);
        u->srv = c->srv;
        c->st = u;
        c->st_free = upload_st_free;
        c->st_done = upload_st_done;
    }
    int rc = upload_chunk(c, u);
    if (rc < 0 && !u->cut_short)
        u->bad = 1; /* refused data is not kept for a resume (an upload
                       cut short by the cap is: its bytes are good) */
    return rc;
}

/* The answer's DatasetInfo from f (in the call's arena: the message points
 * into it). */
static Rtrain__V1__DatasetInfo *dataset_info(rt_call *c, const rt_data_info *f)
{
    Rtrain__V1__DatasetInfo *i = NEW(c, Rtrain__V1__DatasetInfo, RTRAIN__V1__DATASET_INFO__INIT);
    if (!i)
        return NULL;
    i->dataset_id = (char *)f->id;
    i->samples = (uint64_t)f->n;
    i->x_shape = (int64_t *)f->x_dims;
    i->n_x_shape = (size_t)f->x_ndim;
    i->y_dtype =
        f->has_labels ? (Rtrain__V1__DType)f->y_dtype : RTRAIN__V1__DTYPE__DTYPE_UNSPECIFIED;
    i->y_shape = (int64_t *)f->y_dims;
    i->n_y_shape = (size_t)f->y_ndim;
    i->bytes = f->bytes;
    i->streamed = f->streamed;
    i->spool_bytes = f->spool_bytes;
    i->deduplicated = f->dedup;
    i->records_skipped = (uint64_t)f->skipped;
    if (f->skipped)
        i->first_skipped = (char *)f->skip_msg;
    return i;
}

/* A dataset found by its content (deduplicated), held by the call. */
static Rtrain__V1__DatasetInfo *found_info(rt_call *c, const rt_dataset *ds)
{
    rt_data_info *f = rt_call_alloc(c, sizeof *f);
    if (!f)
        return NULL;
    rt_dataset_info(ds, f);
    f->dedup = 1;
    return dataset_info(c, f);
}

/* The end of an upload: the lane's last bytes and the sum, then one call
 * down, rt_ingest_upload, which takes the bytes and the upload's charges
 * either way and returns the stored dataset's facts; the answer is encoded
 * from them. Nothing of the upload is left for the transport to call back
 * (st_done, st_free); its in-flight slot goes back in rt__finish. */
static int upload_work(rt_call *c)
{
    upload_st *u = c->st;
    up_lane_stop(u); /* it places what it holds first */
    up_data *d = u->d;
    if (u->sum_later) {
        int rc = check_sum(c, d, u->sum_given);
        if (rc < 0)
            return rc;
    }
    Rtrain__V1__UploadResponse *r =
        NEW(c, Rtrain__V1__UploadResponse, RTRAIN__V1__UPLOAD_RESPONSE__INIT);
    rt_data_info *f = rt_call_alloc(c, sizeof *f);
    if (!r || !f)
        return OOM(c);
    r->bytes_received = d->received;
    r->bytes_resumed = u->resumed;
    uint8_t *buf = d->buf;
    rt_data_cursor cur = d->cur;
    rt_ingest in = {.data = c->srv->data,
                    .state = c->srv->state,
                    .uploads = &c->srv->upstore,
                    .who = c->who,
                    .name = u->name,
                    .parts = u->parts,
                    .n_parts = u->n_parts,
                    .any_held = u->any_held,
                    .buf = &buf,
                    .total = u->total,
                    .cur = &cur,
                    .buf_free = rt_bufpool_put,
                    .content_given = u->has_content_hash ? u->content_hash_given : NULL,
                    .sample_given = u->has_sample ? u->sample_given : NULL,
                    .max_dataset_bytes = c->srv->cfg.max_dataset_bytes,
                    .max_inflate_ratio = c->srv->cfg.max_inflate_ratio,
                    .max_store_bytes = c->srv->cfg.max_store_bytes,
                    .durable_ns = &c->tm.durable_ns,
                    .upload_who = u->who,
                    .upload_bytes = u->reserved};
    if (!u->any_held) {
        XXH128_canonical_t h;
        XXH128_canonicalFromHash(&h, XXH3_128bits_digest(d->x3));
        memcpy(in.stream_hash, h.digest, 16);
        XXH128_canonicalFromHash(&h, XXH3_128bits_digest(d->xs));
        memcpy(in.sample_hash, h.digest, 16);
    }
    /* The bytes and the charges are the ingestion's now; the hashes are
     * read. */
    d->buf = NULL;
    u->d = NULL;
    up_data_free(d);
    u->who = NULL;
    u->reserved = 0;
    char err[512];
    int rc = rt_ingest_upload(&in, f, err, sizeof err);
    if (u->busy) /* the buffers' work is done: here it is timed (execute), not after */
        rt_bufpool_busy(-1);
    c->st = NULL;
    c->st_done = NULL;
    c->st_free = NULL;
    free(u); /* its lane stopped, its data freed, its charges given back */
    if (rc < 0)
        return rt_call_fail(c, rc, "%s", err);
    if (!(r->dataset = dataset_info(c, f)))
        return OOM(c);
    c->resp = &r->base;
    return 0;
}

int rt_h_upload_end(rt_call *c)
{
    upload_st *u = c->st;
    if (!u || !u->have_header)
        return rt_call_fail(c, RT_ETRUNCATED, "upload ended before its header");
    if (!u->done)
        return rt_call_fail(c, RT_ETRUNCATED,
                            "upload ended without a last chunk (%llu of %llu bytes received)",
                            (unsigned long long)u->d->received, (unsigned long long)u->total);
    c->work = upload_work;
    c->needs_device = 0;
    c->est_ns = u->total * 4; /* parsing ~4 ns/byte: small ones stay inline */
    if (u->parts[0].format == RT_FMT_TFRECORD)
        c->est_ns = u->total * 64; /* JPEG decoding: ~60 ns per compressed byte */
    return 0;
}

int rt_h_find_dataset(rt_call *c)
{
    Rtrain__V1__FindDatasetRequest *q = REQ(c, Rtrain__V1__FindDatasetRequest);
    int rc = rt_h_need_session(c, q->session_id);
    if (rc < 0)
        return rc;
    int probe = q->content_hash.len == 0 && q->sample_hash.len;
    if (probe && q->sample_hash.len != 16)
        return rt_call_fail(c, RT_EINVAL, "sample_hash must be 16 bytes (XXH3-128), got %zu",
                            q->sample_hash.len);
    if (!probe && q->content_hash.len != 16)
        return rt_call_fail(c, RT_EINVAL, "content_hash must be 16 bytes (XXH3-128), got %zu",
                            q->content_hash.len);
    if (!q->header)
        return rt_call_fail(c, RT_EINVAL, "FindDatasetRequest needs the upload's header");
    /* parts_from_header refuses more than RT_DATA_MAX_PARTS; room for what
     * the header has (the arena zeroes what it gives). */
    size_t np =
        q->header->n_parts >= 1 && q->header->n_parts <= RT_DATA_MAX_PARTS ? q->header->n_parts : 1;
    rt_data_part *parts = rt_call_alloc(c, sizeof(rt_data_part) * np);
    rt_example_spec *spec = rt_call_alloc(c, sizeof *spec);
    int n;
    uint64_t total;
    if (!parts || !spec)
        return OOM(c);
    if ((rc = parts_from_header(c, q->header, parts, &n, &total, spec)) < 0)
        return rc;
    uint8_t key[16];
    Rtrain__V1__FindDatasetResponse *r =
        NEW(c, Rtrain__V1__FindDatasetResponse, RTRAIN__V1__FIND_DATASET_RESPONSE__INIT);
    if (!r)
        return OOM(c);
    if (probe) {
        /* Probable: who holds a dataset, or a broken upload, with these
         * parts and this sample. Then the client hashes it all first. */
        rt_data_key(q->sample_hash.data, parts, n, key);
        uint8_t keys[8][16];
        int nk = rt_upload_store_probe_keys(&c->srv->upstore, key, keys, 8);
        r->probable = rt_upload_store_has_probe(&c->srv->upstore, c->who, key);
        for (int i = 0; i < nk && !r->probable; i++) {
            rt_dataset *ds = rt_data_store_find_key(c->srv->data, c->who, keys[i]);
            r->probable = ds != NULL;
            rt_dataset_release(ds);
        }
        c->resp = &r->base;
        return 0;
    }
    rt_data_key(q->content_hash.data, parts, n, key);
    c->ds = rt_data_store_find_key(c->srv->data, c->who, key);
    int shards = 0;
    for (int i = 0; i < n; i++)
        shards += parts[i].has_shard_hash;
    if (!c->ds && shards) {
        r->shard_held = rt_call_alloc(c, sizeof *r->shard_held * (size_t)n);
        if (!r->shard_held)
            return OOM(c);
        r->n_shard_held = (size_t)n;
        for (int i = 0; i < n; i++) {
            uint8_t skey[16];
            rt_data_shard_key(rt_principal_name(c->who), parts[i].shard_hash, skey);
            r->shard_held[i] =
                parts[i].has_shard_hash &&
                rt_shard_cache_has(rt_data_store_shards(c->srv->data), skey, parts[i].length);
        }
    }
    if (c->ds) {
        r->found = 1;
        if (!(r->dataset = found_info(c, c->ds)))
            return OOM(c);
    } else {
        r->resume_offset = rt_upload_store_offset(&c->srv->upstore, c->who, key);
    }
    c->resp = &r->base;
    return 0;
}
