/* rt_client_upload.c - data set uploads.
 *
 * A data set is a list of parts (memory or files) streamed back to back as
 * one byte sequence. First FindDataset with the XXH3-128 hash of those bytes
 * (canonical, big-endian 16 bytes): when the daemon already holds them the
 * upload costs one round trip. Otherwise the UploadDataset client stream
 * sends RT_UPLOAD_CHUNK-byte chunks with offsets; the first chunk carries the
 * header (with the content hash, which checks the data: no_checksum), the
 * last one last = true, so the gRPC message limit never limits a data set's
 * size. Each chunk is framed by hand into one slice with its data copied
 * (or read) straight into place, while the previous chunk goes out. Files
 * are read in chunks, never whole, and the daemon parses their formats.
 *
 * Resume: when a stream broke, the daemon keeps what it received for a
 * while, and FindDataset says how much (resume_offset); the next upload of
 * the same data sends only the rest.
 *
 * Hashing while sending: a large upload of memory first asks FindDataset
 * with a probe instead of the content hash, the XXH3-128 of its sample
 * (RT_SAMPLE_BYTES of every RT_SAMPLE_EVERY bytes, a 256th of the data).
 * When the daemon holds nothing with that sample and those parts, the data
 * is new (or nearly so): the stream starts at once with hash_later, a
 * thread hashes it all meanwhile, and the first chunk made after the hash
 * is known carries it (the last chunk waits for it). When the daemon holds
 * something of that sample (the same data again, or a broken upload of it),
 * the upload hashes everything first and asks again, as above: nothing is
 * sent for a dataset already stored, only the rest for a broken one. */
#include "rt_client_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#if defined(__x86_64__) || defined(__i386__)
/* libxxhash's XXH3 with a run-time choice of SSE2/AVX2/AVX-512 (the
 * plain entry points are SSE2): same hashes, about twice the speed */
#include <xxh_x86dispatch.h>
#endif

/* Uploads of memory from this size on hash while they send. */
#define RT__OVERLAP_MIN (8u << 20)

typedef struct src {
    const rt_client_upload_part *p;
    FILE *f;
    uint64_t len;
} src;

static void close_srcs(src *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i].f)
            fclose(s[i].f);
}

static int open_srcs(rt_client *c, const rt_client_upload_part *parts, size_t n, src *s,
                     uint64_t *total)
{
    *total = 0;
    for (size_t i = 0; i < n; i++) {
        const rt_client_upload_part *p = &parts[i];
        s[i].p = p;
        if ((int)p->role < RT_ROLE_FEATURES || p->role > RT_ROLE_SAMPLE_WEIGHTS)
            return rt__err(c, RT_EINVAL, "upload part %zu: bad role %d", i, (int)p->role);
        if ((int)p->format < RT_FORMAT_RAW || p->format > RT_FORMAT_TFRECORD)
            return rt__err(c, RT_EINVAL, "upload part %zu: bad format %d", i, (int)p->format);
        if (p->path) {
            s[i].f = fopen(p->path, "rb");
            if (!s[i].f)
                return rt__err(c, RT_EIO, "cannot open %s: %s", p->path, strerror(errno));
            struct stat st;
            if (fstat(fileno(s[i].f), &st) < 0 || !S_ISREG(st.st_mode))
                return rt__err(c, RT_EIO, "%s is not a regular file", p->path);
            s[i].len = (uint64_t)st.st_size;
            if (s[i].len == 0)
                return rt__err(c, RT_EDATA, "%s is empty", p->path);
        } else {
            if (p->nbytes && !p->data)
                return rt__err(c, RT_EINVAL, "upload part %zu: data is NULL", i);
            s[i].len = p->nbytes;
        }
        if (p->format == RT_FORMAT_RAW) {
            if (!rt_client_dtype_size(p->dtype))
                return rt__err(c, RT_EDTYPE, "upload part %zu: RAW needs a dtype", i);
            if (p->ndim < 1 || p->ndim > RT_CLIENT_MAX_DIMS)
                return rt__err(c, RT_ESHAPE,
                               "upload part %zu: RAW needs a shape "
                               "(1..%d dims)",
                               i, RT_CLIENT_MAX_DIMS);
            uint64_t want = rt_client_dtype_size(p->dtype);
            for (int d = 0; d < p->ndim; d++) {
                if (p->shape[d] < 0)
                    return rt__err(c, RT_ESHAPE, "upload part %zu: negative dim", i);
                want *= (uint64_t)p->shape[d];
            }
            if (want != s[i].len)
                return rt__err(c, RT_ESHAPE,
                               "upload part %zu: shape needs %llu "
                               "bytes, got %llu",
                               i, (unsigned long long)want, (unsigned long long)s[i].len);
        }
        *total += s[i].len;
    }
    return 0;
}

/* Copy up to cap bytes of the concatenated parts from position part/off. */
static int read_at(rt_client *c, src *s, size_t n, size_t *part, uint64_t *off, uint8_t *buf,
                   size_t cap, size_t *got)
{
    *got = 0;
    while (*got < cap && *part < n) {
        src *x = &s[*part];
        uint64_t left = x->len - *off;
        if (left == 0) {
            (*part)++;
            *off = 0;
            if (*part < n && s[*part].f)
                rewind(s[*part].f);
            continue;
        }
        size_t take = cap - *got < left ? cap - *got : (size_t)left;
        if (x->f) {
            if (*off == 0)
                rewind(x->f);
            size_t r = fread(buf + *got, 1, take, x->f);
            if (r != take)
                return rt__err(c, RT_EIO, "reading %s: %s", x->p->path,
                               ferror(x->f) ? strerror(errno) : "file shrank");
        } else {
            memcpy(buf + *got, (const uint8_t *)x->p->data + *off, take);
        }
        *got += take;
        *off += take;
    }
    return 0;
}

/* Position part/off at stream byte pos. */
static int seek_to(rt_client *c, src *s, size_t n, uint64_t pos, size_t *part, uint64_t *off)
{
    *part = 0;
    while (*part < n && pos >= s[*part].len) {
        pos -= s[*part].len;
        (*part)++;
    }
    *off = pos;
    if (*part < n && s[*part].f && pos && fseeko(s[*part].f, (off_t)pos, SEEK_SET) != 0)
        return rt__err(c, RT_EIO, "seeking in %s: %s", s[*part].p->path, strerror(errno));
    return 0;
}

static int hash_all(rt_client *c, src *s, size_t n, uint8_t *buf, uint8_t out[16])
{
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return rt__err(c, RT_ENOMEM, "out of memory");
    XXH3_128bits_reset(st);
    size_t part = 0;
    uint64_t off = 0;
    int rc = 0;
    for (;;) {
        size_t got;
        if (part < n && !s[part].f) { /* memory: hashed where it lies */
            XXH3_128bits_update(st, s[part].p->data, s[part].len);
            part++;
            off = 0;
            if (part < n && s[part].f)
                rewind(s[part].f);
            continue;
        }
        rc = read_at(c, s, n, &part, &off, buf, RT_UPLOAD_CHUNK, &got);
        if (rc < 0 || got == 0)
            break;
        XXH3_128bits_update(st, buf, got);
    }
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(st));
    memcpy(out, canon.digest, 16);
    XXH3_freeState(st);
    return rc;
}

/* XXH3-128 of the concatenated memory parts on a thread of its own. */
typedef struct hasher {
    const src *s;
    size_t n;
    pthread_t t;
    int started;
    int done; /* atomic: hash is final */
    uint8_t hash[16];
} hasher;

static void hash_mem(const src *s, size_t n, uint8_t out[16])
{
    XXH3_state_t st;
    XXH3_INITSTATE(&st);
    XXH3_128bits_reset(&st);
    for (size_t i = 0; i < n; i++)
        XXH3_128bits_update(&st, s[i].p->data, s[i].len);
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(&st));
    memcpy(out, canon.digest, 16);
}

static void *hasher_main(void *arg)
{
    hasher *h = arg;
    hash_mem(h->s, h->n, h->hash);
    __atomic_store_n(&h->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Start hashing; without a thread, hash here (the stream then starts
 * after it, as without the overlap). */
static void hasher_start(hasher *h, const src *s, size_t n)
{
    h->s = s;
    h->n = n;
    h->done = 0;
    h->started = pthread_create(&h->t, NULL, hasher_main, h) == 0;
    if (!h->started)
        hasher_main(h);
}

/* The hash once known: when wait, after waiting for it; else NULL while
 * the thread still runs. */
static const uint8_t *hasher_get(hasher *h, int wait)
{
    if (!__atomic_load_n(&h->done, __ATOMIC_ACQUIRE) && !wait)
        return NULL;
    if (h->started) {
        pthread_join(h->t, NULL);
        h->started = 0;
    }
    return h->hash;
}

/* XXH3-128 of the memory parts' sample (rt_sample_run). */
static void sample_mem(const src *s, size_t n, uint8_t out[16])
{
    XXH3_state_t st;
    XXH3_INITSTATE(&st);
    XXH3_128bits_reset(&st);
    uint64_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = s[i].p->data;
        size_t len = (size_t)s[i].len, at, run;
        for (size_t o = 0; o < len && (run = rt_sample_run(pos + o, len - o, &at)); o += at + run)
            XXH3_128bits_update(&st, p + o + at, run);
        pos += len;
    }
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(&st));
    memcpy(out, canon.digest, 16);
}

static int dataset_from_pb(rt_client *c, const Rtrain__V1__DatasetInfo *d, rt_client_dataset *out)
{
    if (!d)
        return rt__err(c, RT_EPROTO, "the response has no dataset info");
    int rc = rt__copy_id(c, out->id, d->dataset_id);
    if (rc == 0 && !out->id[0])
        rc = rt__err(c, RT_EPROTO, "the daemon sent an empty dataset id");
    if (rc == 0)
        rc = rt__shape_from_pb(c, "x shape", d->n_x_shape, d->x_shape, &out->x_ndim, out->x_shape);
    if (rc == 0)
        rc = rt__shape_from_pb(c, "y shape", d->n_y_shape, d->y_shape, &out->y_ndim, out->y_shape);
    out->samples = d->samples;
    out->y_dtype = (rt_client_dtype)d->y_dtype;
    out->bytes = d->bytes;
    out->deduplicated = d->deduplicated;
    out->records_skipped = d->records_skipped;
    out->streamed = d->streamed;
    out->spool_bytes = d->spool_bytes;
    snprintf(out->first_skipped, sizeof out->first_skipped, "%s",
             d->first_skipped ? d->first_skipped : "");
    return rc;
}

/* Slices that point into the caller's arrays (zero copy): each one's
 * destroy callback counts down, and the upload returns only once gRPC has
 * let go of every one, since the caller may free its memory after that. */
typedef struct zc_refs {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t live;
} zc_refs;

static void zc_unref(void *ud)
{
    zc_refs *z = ud;
    pthread_mutex_lock(&z->mu);
    if (--z->live == 0)
        pthread_cond_broadcast(&z->cv);
    pthread_mutex_unlock(&z->mu);
}

static void zc_wait(zc_refs *z)
{
    pthread_mutex_lock(&z->mu);
    while (z->live)
        pthread_cond_wait(&z->cv, &z->mu);
    pthread_mutex_unlock(&z->mu);
}

#define RT__ZC_SLICES 8 /* prefix, up to 6 pieces of data, last */

/* want bytes from part/off on lie in at most RT__ZC_SLICES - 2 memory
 * parts: the chunk's data slices reference them where they lie. */
static int in_memory(const src *s, size_t n, size_t part, uint64_t off, size_t want)
{
    size_t pieces = 0;
    while (want && part < n) {
        if (s[part].f)
            return 0;
        uint64_t left = s[part].len - off;
        if (left) {
            want -= want < left ? want : (size_t)left;
            pieces++;
        }
        part++;
        off = 0;
    }
    return want == 0 && pieces <= RT__ZC_SLICES - 2;
}

/* One UploadChunk framed by hand: header (the first), offset, the content
 * hash (hash_later, when hash), data, last. Field numbers and wire types
 * are the .proto's: 1 header, 2 offset, 410 content_hash, 3 data, 4 last.
 * Data in memory goes by reference (slices over the caller's array,
 * counted in z); file data is read straight into place in one slice. */
static int make_chunk(rt_client *c, const uint8_t *hdr, size_t hdr_len, uint64_t offset,
                      const uint8_t *hash, src *s, size_t n, size_t *part, uint64_t *off,
                      size_t want, int last, zc_refs *z, grpc_byte_buffer **out)
{
    *out = NULL;
    int zc = z && in_memory(s, n, *part, *off, want);
    size_t cap =
        (hdr ? 1 + 10 + hdr_len : 0) + 11 + (hash ? 2 + 1 + 16 : 0) + 11 + (zc ? 0 : want) + 2;
    grpc_slice sl = grpc_slice_malloc(cap);
    uint8_t *p = GRPC_SLICE_START_PTR(sl), *q = p;
    if (hdr) {
        *q++ = (1 << 3) | 2;
        q += rt_varint_put(q, hdr_len);
        memcpy(q, hdr, hdr_len);
        q += hdr_len;
    }
    *q++ = (2 << 3) | 0;
    q += rt_varint_put(q, offset);
    if (hash) { /* 410: content_hash, after hash_later */
        q += rt_varint_put(q, (410 << 3) | 2);
        *q++ = 16;
        memcpy(q, hash, 16);
        q += 16;
    }
    *q++ = (3 << 3) | 2;
    q += rt_varint_put(q, want);
    if (zc) {
        grpc_slice v[RT__ZC_SLICES];
        size_t nv = 0;
        v[nv++] = grpc_slice_sub(sl, 0, (size_t)(q - p));
        for (size_t left = want; left && nv < RT__ZC_SLICES - 1;) {
            src *x = &s[*part];
            uint64_t room = x->len - *off;
            if (room == 0) {
                (*part)++;
                *off = 0;
                continue;
            }
            size_t take = left < room ? left : (size_t)room;
            pthread_mutex_lock(&z->mu);
            z->live++;
            pthread_mutex_unlock(&z->mu);
            v[nv++] =
                grpc_slice_new_with_user_data((uint8_t *)x->p->data + *off, take, zc_unref, z);
            *off += take;
            left -= take;
        }
        if (last) {
            uint8_t *t = p + (q - p);
            t[0] = (4 << 3) | 0;
            t[1] = 1;
            v[nv++] = grpc_slice_sub(sl, (size_t)(q - p), (size_t)(q - p) + 2);
        }
        grpc_slice_unref(sl);
        *out = grpc_raw_byte_buffer_create(v, nv);
        for (size_t i = 0; i < nv; i++)
            grpc_slice_unref(v[i]);
        return *out ? 0 : rt__err(c, RT_ENOMEM, "UploadDataset: out of memory");
    }
    size_t got = 0;
    int rc = read_at(c, s, n, part, off, q, want, &got);
    if (rc == 0 && got != want)
        rc = rt__err(c, RT_EIO, "upload: the data ended %zu bytes early", want - got);
    if (rc < 0) {
        grpc_slice_unref(sl);
        return rc;
    }
    q += got;
    if (last) {
        *q++ = (4 << 3) | 0;
        *q++ = 1;
    }
    grpc_slice used = grpc_slice_sub(sl, 0, (size_t)(q - p));
    grpc_slice_unref(sl);
    *out = grpc_raw_byte_buffer_create(&used, 1);
    grpc_slice_unref(used);
    return *out ? 0 : rt__err(c, RT_ENOMEM, "UploadDataset: out of memory");
}

/* The UploadDataset client stream, from stream byte start (a resume: the
 * daemon kept the bytes before it). With hz, the header says hash_later and
 * the content hash goes in the first chunk made once hz has it. */
static int stream_upload(rt_client *c, Rtrain__V1__DatasetHeader *hdr, src *s, size_t n,
                         uint64_t total, uint64_t start, hasher *hz, rt_client_dataset *out)
{
    hdr->no_checksum = 1; /* the content hash checks the data */
    hdr->resume_offset = start;
    hdr->hash_later = hz != NULL;
    size_t hdr_len = protobuf_c_message_get_packed_size(&hdr->base);
    uint8_t *hp = malloc(hdr_len ? hdr_len : 1);
    if (!hp)
        return rt__err(c, RT_ENOMEM, "out of memory");
    protobuf_c_message_pack(&hdr->base, hp);
    rt__call k;
    int rc = rt__stream_open(c, &k, RT__M_UPLOAD, NULL);
    if (rc < 0) {
        free(hp);
        return rc;
    }
    zc_refs z = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .live = 0};
    uint64_t local = 0, sent = start, off = 0;
    size_t part = 0;
    grpc_byte_buffer *inflight = NULL;
    rc = seek_to(c, s, n, start, &part, &off);
    for (int first = 1; rc == 0; first = 0) {
        uint64_t l0 = rt_now_ns();
        size_t want = total - sent < RT_UPLOAD_CHUNK ? (size_t)(total - sent) : RT_UPLOAD_CHUNK;
        int last = sent + want >= total;
        const uint8_t *hash = hz ? hasher_get(hz, last) : NULL;
        if (hash)
            hz = NULL; /* sent once */
        grpc_byte_buffer *bb;
        rc = make_chunk(c, first ? hp : NULL, hdr_len, sent, hash, s, n, &part, &off, want, last,
                        &z, &bb);
        local += rt_now_ns() - l0;
        /* The previous chunk went out while this one was made. */
        int ok = 1;
        if (inflight) {
            ok = rt__stream_send_wait(&k);
            grpc_byte_buffer_destroy(inflight);
            inflight = NULL;
        }
        if (rc < 0 || !ok) {
            if (bb)
                grpc_byte_buffer_destroy(bb);
            if (rc < 0)
                rt__stream_cancel(&k);
            break; /* !ok: the daemon ended the call, the status says why */
        }
        if (!rt__stream_send_start(&k, bb, last)) {
            grpc_byte_buffer_destroy(bb);
            break;
        }
        inflight = bb;
        sent += want;
        if (last)
            break;
    }
    if (inflight) {
        rt__stream_send_wait(&k);
        grpc_byte_buffer_destroy(inflight);
    }
    free(hp);
    grpc_byte_buffer *recv;
    rt__stream_recv(&k, &recv);
    int src_rc = rt__stream_close(&k);
    zc_wait(&z); /* the call is gone: gRPC holds none of the caller's memory now */
    pthread_mutex_destroy(&z.mu);
    pthread_cond_destroy(&z.cv);
    /* Reading and framing chunks overlaps the daemon receiving the
     * previous ones: it is in-stream client time, inside the round trip. */
    c->cur.client_stream_ns = local;
    c->t_response = rt_now_ns();
    out->bytes_sent = sent - start;
    if (rc == 0)
        rc = src_rc;
    if (rc == 0) {
        Rtrain__V1__UploadResponse *r = (Rtrain__V1__UploadResponse *)rt_wire_unpack(
            recv, &rtrain__v1__upload_response__descriptor, NULL);
        if (!r) {
            rc = rt__err(c, RT_EPROTO, "UploadDataset: malformed response");
        } else {
            rt__take_timings(c, r->timings, 0);
            rc = dataset_from_pb(c, r->dataset, out);
            /* a dataset found by the content hash sent later is answered
             * before the stream's end */
            if (rc == 0 && !out->deduplicated && r->bytes_received != total)
                rc = rt__err(c, RT_ETRUNCATED,
                             "UploadDataset: the daemon received "
                             "%llu of %llu bytes",
                             (unsigned long long)r->bytes_received, (unsigned long long)total);
            out->bytes_resumed = r->bytes_resumed;
            protobuf_c_message_free_unpacked(&r->base, NULL);
        }
    }
    if (recv)
        grpc_byte_buffer_destroy(recv);
    return rc;
}

int rt_client_next_upload_storage(rt_client *c, int storage, uint64_t shuffle_buffer)
{
    if (!c || storage < 0 || storage > 2)
        return RT_EINVAL;
    c->next_storage = storage;
    c->next_shuffle_buffer = shuffle_buffer;
    return 0;
}

static int upload_parts(rt_client *c, const char *session, const char *name,
                        const rt_client_upload_part *parts, size_t n_parts, rt_client_dataset *out);

Rtrain__V1__ExampleSpec *rt__example_spec_pb(const struct rt_client_example_spec *s)
{
    return s ? (Rtrain__V1__ExampleSpec *)&s->pb : NULL;
}

int rt_client_upload_parts(rt_client *c, const char *session, const char *name,
                           const rt_client_upload_part *parts, size_t n_parts,
                           rt_client_dataset *out)
{
    int rc = upload_parts(c, session, name, parts, n_parts, out);
    if (c) {
        c->next_storage = 0;
        c->next_shuffle_buffer = 0;
    }
    return rc;
}

static int upload_parts(rt_client *c, const char *session, const char *name,
                        const rt_client_upload_part *parts, size_t n_parts, rt_client_dataset *out)
{
    if (!c || !out)
        return RT_EINVAL;
    memset(out, 0, sizeof *out);
    rt__call_begin(c, RT__M_FIND_DATASET);
    int rc = rt__check_id(c, "session", session);
    size_t max_parts = parts && n_parts && parts[0].format == RT_FORMAT_TFRECORD ? 256 : 16;
    if (rc == 0 && (!parts || n_parts == 0 || n_parts > max_parts))
        rc = rt__err(c, RT_EINVAL, "upload: 1..%zu parts needed, got %zu", max_parts, n_parts);
    if (rc < 0)
        return rt__call_end(c, rc);

    src *s = calloc(n_parts, sizeof *s);
    Rtrain__V1__DataPart *dp = calloc(n_parts, sizeof *dp);
    Rtrain__V1__DataPart **dpp = calloc(n_parts, sizeof *dpp);
    uint8_t *buf = malloc(RT_UPLOAD_CHUNK);
    uint8_t hash[16];
    uint64_t total = 0;
    /* TFRecord shards are also named by their own hash, so the daemon can
     * say which it holds and only the others are sent */
    int shards = parts && parts[0].format == RT_FORMAT_TFRECORD;
    uint8_t(*ph)[16] = shards ? calloc(n_parts, 16) : NULL;
    src *sent = shards ? calloc(n_parts, sizeof *sent) : NULL;
    if (!s || !dp || !dpp || !buf || (shards && (!ph || !sent))) {
        rc = rt__err(c, RT_ENOMEM, "upload: out of memory");
        goto done;
    }
    uint64_t t0 = rt_now_ns();
    rc = open_srcs(c, parts, n_parts, s, &total);
    if (rc == 0 && total == 0)
        rc = rt__err(c, RT_EDATA, "upload: the data set is empty");
    for (size_t i = 0; shards && rc == 0 && i < n_parts; i++)
        rc = hash_all(c, &s[i], 1, buf, ph[i]);
    if (rc < 0)
        goto done;
    /* Memory parts of a large set: probe first, and maybe hash while
     * sending (the file comment). */
    int overlap = !shards && total >= RT__OVERLAP_MIN;
    for (size_t i = 0; i < n_parts; i++)
        overlap &= !s[i].f;
    uint8_t sample[16];
    if (overlap)
        sample_mem(s, n_parts, sample);
    for (size_t i = 0; i < n_parts; i++) {
        const rt_client_upload_part *p = &parts[i];
        rtrain__v1__data_part__init(&dp[i]);
        dp[i].role = (Rtrain__V1__DataRole)p->role;
        dp[i].format = (Rtrain__V1__DataFormat)p->format;
        dp[i].length = s[i].len;
        if (p->format == RT_FORMAT_RAW) {
            dp[i].dtype = (Rtrain__V1__DType)p->dtype;
            dp[i].n_shape = (size_t)p->ndim;
            dp[i].shape = (int64_t *)p->shape;
        }
        dp[i].label_column = p->label_column;
        dp[i].csv_header = p->csv_header != 0;
        dp[i].normalize = p->normalize != 0;
        dp[i].compression = (Rtrain__V1__Compression)p->compression;
        if (!shards && (p->role == RT_ROLE_FEATURES || p->role == RT_ROLE_BOTH)) {
            int st = p->storage ? p->storage : c->next_storage;
            dp[i].storage = (Rtrain__V1__Storage)st;
            dp[i].shuffle_buffer = p->shuffle_buffer ? p->shuffle_buffer : c->next_shuffle_buffer;
        }
        if (shards) {
            dp[i].shard_hash.data = ph[i];
            dp[i].shard_hash.len = 16;
        }
        dpp[i] = &dp[i];
    }
    Rtrain__V1__DatasetHeader hdr = RTRAIN__V1__DATASET_HEADER__INIT;
    hdr.session_id = (char *)session;
    hdr.name = (char *)(name ? name : "");
    hdr.n_parts = n_parts;
    hdr.parts = dpp;
    hdr.total_bytes = total;
    if (parts[0].format == RT_FORMAT_TFRECORD)
        hdr.example_spec = rt__example_spec_pb(parts[0].spec);
    Rtrain__V1__FindDatasetRequest freq = RTRAIN__V1__FIND_DATASET_REQUEST__INIT;
    freq.session_id = (char *)session;
    freq.header = &hdr;
    Rtrain__V1__FindDatasetResponse *fr;
    if (overlap) {
        /* The probe: its encode includes hashing the sample. */
        hdr.sample_hash.data = sample;
        hdr.sample_hash.len = 16;
        freq.sample_hash = hdr.sample_hash;
        uint64_t sample_ns = rt_now_ns() - t0;
        rc = rt__unary(c, RT__M_FIND_DATASET, &freq.base,
                       &rtrain__v1__find_dataset_response__descriptor, (ProtobufCMessage **)&fr);
        c->cur.client_encode_ns += sample_ns;
        if (rc == 0) {
            rt__take_timings(c, fr->timings, 0);
            overlap = !fr->probable;
            protobuf_c_message_free_unpacked(&fr->base, NULL);
        } else if (rc == RT_EINVAL || rc == RT_EUNIMPLEMENTED) {
            /* a daemon from before the probe wants the content hash, one
             * without FindDataset takes the upload as it is */
            overlap = 0;
            hdr.sample_hash.len = 0;
            rc = 0;
        } else {
            goto done;
        }
        if (overlap) {
            rt__call_end(c, 0);
            rt__call_begin(c, RT__M_UPLOAD);
            hasher hz;
            hasher_start(&hz, s, n_parts);
            rc = stream_upload(c, &hdr, s, n_parts, total, 0, &hz, out);
            hasher_get(&hz, 1); /* the stream may have ended first */
            goto done;
        }
        rt__call_end(c, 0);
        rt__call_begin(c, RT__M_FIND_DATASET);
        t0 = rt_now_ns();
    }
    if (rc == 0)
        rc = hash_all(c, s, n_parts, buf, hash);
    if (rc < 0)
        goto done;
    hdr.content_hash.data = hash;
    hdr.content_hash.len = 16;

    /* FindDataset: its encode includes reading and hashing the data. */
    freq.content_hash.data = hash;
    freq.content_hash.len = 16;
    freq.sample_hash.len = 0;
    uint64_t hash_ns = rt_now_ns() - t0;
    rc = rt__unary(c, RT__M_FIND_DATASET, &freq.base,
                   &rtrain__v1__find_dataset_response__descriptor, (ProtobufCMessage **)&fr);
    c->cur.client_encode_ns += hash_ns;
    if (rc == RT_EUNIMPLEMENTED) {
        rc = 0; /* a daemon without FindDataset: just upload */
        fr = NULL;
    }
    if (rc < 0)
        goto done;
    int found = 0;
    uint64_t resume = 0;
    if (fr) {
        rt__take_timings(c, fr->timings, 0);
        resume = fr->resume_offset < total ? fr->resume_offset : 0;
        if (fr->found) {
            found = 1;
            rc = dataset_from_pb(c, fr->dataset, out);
            out->deduplicated = 1;
        } else if (shards && fr->n_shard_held == n_parts) {
            for (size_t i = 0; i < n_parts; i++)
                dp[i].held = fr->shard_held[i];
        }
        protobuf_c_message_free_unpacked(&fr->base, NULL);
    }
    if (found || rc < 0)
        goto done;
    rt__call_end(c, 0);

    rt__call_begin(c, RT__M_UPLOAD);
    if (shards) {
        size_t ns = 0;
        uint64_t stream_total = 0;
        for (size_t i = 0; i < n_parts; i++)
            if (!dp[i].held) {
                sent[ns++] = s[i];
                stream_total += s[i].len;
            }
        rc = stream_upload(c, &hdr, sent, ns, stream_total, ns == n_parts ? resume : 0, NULL, out);
        if (rc == RT_ENOTFOUND && ns < n_parts) {
            /* a held shard was dropped from the daemon's cache meanwhile */
            for (size_t i = 0; i < n_parts; i++)
                dp[i].held = 0;
            rt__call_end(c, rc);
            rt__call_begin(c, RT__M_UPLOAD);
            rc = stream_upload(c, &hdr, s, n_parts, total, 0, NULL, out);
        }
    } else {
        rc = stream_upload(c, &hdr, s, n_parts, total, resume, NULL, out);
    }
    if (rc == RT_ENOTFOUND && resume) {
        /* the kept bytes went (expired, or room for other uploads) */
        rt__call_end(c, rc);
        rt__call_begin(c, RT__M_UPLOAD);
        rc = stream_upload(c, &hdr, s, n_parts, total, 0, NULL, out);
    }
done:
    free(ph);
    free(sent);
    close_srcs(s, s ? n_parts : 0);
    free(s);
    free(dp);
    free(dpp);
    free(buf);
    return rt__call_end(c, rc);
}

int rt_client_upload(rt_client *c, const char *session, const char *name, const rt_client_array *x,
                     const rt_client_array *y, rt_client_dataset *out)
{
    return rt_client_upload_weighted(c, session, name, x, y, NULL, out);
}

/* Array a as one raw part of an upload (what names it in errors); a
 * labels or weights part (x not NULL) needs x's row count. */
static int raw_part(rt_client *c, const char *what, rt_client_role role, const rt_client_array *a,
                    const rt_client_array *x, rt_client_upload_part *p)
{
    size_t nb;
    int rc = rt__array_nbytes(c, what, a, &nb);
    if (rc == 0 && x && a->shape[0] != x->shape[0])
        rc = rt__err(c, RT_ESHAPE, "upload: %lld feature rows but %lld %s", (long long)x->shape[0],
                     (long long)a->shape[0], what);
    if (rc < 0)
        return rc;
    p->role = role;
    p->format = RT_FORMAT_RAW;
    p->data = a->data;
    p->nbytes = nb;
    p->dtype = a->dtype;
    p->ndim = a->ndim;
    memcpy(p->shape, a->shape, sizeof p->shape);
    return 0;
}

int rt_client_upload_weighted(rt_client *c, const char *session, const char *name,
                              const rt_client_array *x, const rt_client_array *y,
                              const rt_client_array *sw, rt_client_dataset *out)
{
    if (!c || !x || !out || (sw && !y))
        return RT_EINVAL;
    rt_client_upload_part p[3];
    memset(p, 0, sizeof p);
    rt__call_begin(c, RT__M_FIND_DATASET);
    int rc = raw_part(c, "features", RT_ROLE_FEATURES, x, NULL, &p[0]);
    if (rc == 0 && y)
        rc = raw_part(c, "labels", RT_ROLE_LABELS, y, x, &p[1]);
    if (rc == 0 && sw)
        rc = raw_part(c, "sample weights", RT_ROLE_SAMPLE_WEIGHTS, sw, x, &p[2]);
    if (rc < 0)
        return rt__call_end(c, rc);
    return rt_client_upload_parts(c, session, name, p, sw ? 3 : y ? 2 : 1, out);
}

int rt_client_upload_csv(rt_client *c, const char *session, const char *name, const char *path,
                         int label_column, int header, rt_client_dataset *out)
{
    if (!c || !path || !out)
        return RT_EINVAL;
    rt_client_upload_part p;
    memset(&p, 0, sizeof p);
    p.role = RT_ROLE_BOTH;
    p.format = RT_FORMAT_CSV;
    p.path = path;
    p.label_column = label_column;
    p.csv_header = header;
    return rt_client_upload_parts(c, session, name, &p, 1, out);
}

/* Features (and labels, when y_path is set) from two files of one format. */
static int upload_files(rt_client *c, const char *session, const char *name,
                        rt_client_format format, const char *x_path, const char *y_path,
                        int normalize, rt_client_dataset *out)
{
    if (!c || !x_path || !out)
        return RT_EINVAL;
    rt_client_upload_part p[2];
    memset(p, 0, sizeof p);
    p[0].role = RT_ROLE_FEATURES;
    p[0].format = format;
    p[0].path = x_path;
    p[0].normalize = normalize;
    p[1].role = RT_ROLE_LABELS;
    p[1].format = format;
    p[1].path = y_path;
    return rt_client_upload_parts(c, session, name, p, y_path ? 2 : 1, out);
}

int rt_client_upload_npy(rt_client *c, const char *session, const char *name, const char *x_path,
                         const char *y_path, rt_client_dataset *out)
{
    return upload_files(c, session, name, RT_FORMAT_NPY, x_path, y_path, 0, out);
}

int rt_client_upload_idx(rt_client *c, const char *session, const char *name,
                         const char *images_path, const char *labels_path, int normalize,
                         rt_client_dataset *out)
{
    return upload_files(c, session, name, RT_FORMAT_IDX, images_path, labels_path, normalize, out);
}
