/*
 * rt_data.h - datasets on the daemon: formats (RAW, NPY, CSV, IDX with
 * optional gzip), assembly from parts, and a content-addressed store.
 *
 * An upload carries one or more parts (features, labels, or one CSV with
 * both) back to back. rt_data_parse_take turns those bytes into a dataset whose
 * features are f32 (n, x_dims...) and whose labels are f32 or i32 as parsed.
 * Non-finite values are rejected with the sample and column that hold them.
 *
 *     rt_data_part p[2] = {{.role = RT_ROLE_FEATURES, .format = RT_FMT_NPY, .length = n1},
 *                          {.role = RT_ROLE_LABELS,   .format = RT_FMT_NPY, .length = n2}};
 *     rt_dataset *ds; char err[256];
 *     if (rt_data_parse_take(p, 2, &bytes, n1 + n2, max_bytes, 0, 1, &ds, err, sizeof err) < 0) ...
 *     rt_data_key(content_hash, p, 2, key);          // content + how it is parsed
 *     rt_dataset_set_key(ds, key);                   // and a random id
 *     rt_dataset_set_owner(ds, who, ds->bytes);      // who reserved STORE_BYTES
 *     rt_dataset *kept; int dedup;
 *     if (rt_data_store_put(store, ds, &kept, &dedup) < 0) ...  // takes ds
 *     ...
 *     rt_dataset_release(kept);
 *
 * Ownership: every stored dataset belongs to the principal that uploaded
 * it. Lookups name the principal asking; another principal's dataset is not
 * found, so deduplication and FindDataset say nothing about what others
 * uploaded. Ids are random (128 bits), not derived from the content.
 *
 * Threads: a dataset is immutable once stored except for its converted-label
 * cache, which is filled once under the dataset's mutex. The store is
 * guarded by its own mutex.
 */
#ifndef RTRAIN_DATA_H
#define RTRAIN_DATA_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "rt_engine.h"
#include "rt_image.h"
#include "rt_shards.h"
#include "rt_tfrecord.h"
#include "rt_principal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Values match proto DataFormat / DataRole. */
typedef enum rt_data_format {
    RT_FMT_RAW = 0,
    RT_FMT_NPY = 1,
    RT_FMT_CSV = 2,
    RT_FMT_IDX = 3,
    RT_FMT_TFRECORD = 4 /* role BOTH; every part one shard (rt_example.h) */
} rt_data_format;

/* The largest shuffle buffer an upload may ask for (samples). */
#define RT_DATA_MAX_SHUFFLE (INT64_C(1) << 28)

/* Parts in one upload: features [+ labels], or TFRecord shards. */
#define RT_DATA_MAX_PARTS 256

struct rt_example_spec;
typedef enum rt_data_role {
    RT_ROLE_FEATURES = 0,
    RT_ROLE_LABELS = 1,
    RT_ROLE_BOTH = 2,
    RT_ROLE_SAMPLE_WEIGHTS = 3 /* one finite weight >= 0 per sample (n,) */
} rt_data_role;

typedef struct rt_data_part {
    rt_data_role role;
    rt_data_format format;
    uint64_t length; /* bytes of this part, in stream order */
    rt_dtype dtype;  /* RAW */
    int ndim;        /* RAW: full shape, first dim = samples */
    int64_t dims[RT_MAX_DIMS];
    int label_column;               /* CSV with role BOTH: index, -1 = last */
    int csv_header;                 /* CSV: skip the first line */
    int normalize;                  /* u8 features: / 255 */
    rt_tfr_compression compression; /* TFRECORD */
    uint8_t shard_hash[16];         /* TFRECORD: XXH3-128 of the part's bytes */
    int has_shard_hash;
    int held;                           /* the bytes are not in the upload stream: the
                                  daemon's shard cache holds them */
    const struct rt_example_spec *spec; /* TFRECORD: the same for every part */
    int storage;                        /* features part of RAW/NPY/CSV/IDX: rt_storage
                                  (rt_example.h); TFRecord: spec->storage */
    int64_t shuffle_buffer;             /* streamed: samples; 0 = the daemon's default */
    int finite_checked;                 /* RAW f32: rt_data_place saw every value and all
                                  were finite (to_features skips its pass) */
} rt_data_part;

typedef struct rt_dataset {
    char id[40]; /* "d-" + 32 random hex digits */
    uint8_t key[16];
    int64_t n;  /* samples */
    int x_ndim; /* per-sample shape of x */
    int64_t x_dims[RT_MAX_DIMS];
    float *x;         /* n * prod(x_dims) */
    rt_dtype y_dtype; /* 0 when the dataset has no labels */
    int y_ndim;       /* per-sample label shape; 0 = scalar */
    int64_t y_dims[RT_MAX_DIMS];
    void *y;
    float *sw;          /* per-sample loss weights (n), or NULL */
    uint64_t bytes;     /* bytes held (x, y, converted labels);
                                  grows after publication: read it with
                                  rt_dataset_bytes() */
    int64_t skipped;    /* TFRecord: bad records left out */
    char skip_msg[160]; /* the first one's error */
    uint8_t *img;       /* TFRecord with augmentation: n resized
                                  (h, w, c) images, 8-bit */
    rt_image_spec img_spec;
    int64_t img_off;          /* the image's first float in a sample of x */
    struct rt_stream *stream; /* streamed (rt_stream.h): x is NULL, the
                                  records are on disk, y is in memory */
    struct rt_held *held;     /* held by MPI replicas (rt_data_hold): x is
                                  NULL, its rows are spread over the ranks,
                                  y and sw are in memory */
    rt_principal *owner;      /* NULL: no owner (tools, tests) */
    uint64_t charged;         /* RT_Q_STORE_BYTES given back when freed */

    /* private */
    void *x_owner;          /* an adopted upload buffer that x points into */
    void (*x_free)(void *); /* how x_owner goes back; NULL = free() */
    pthread_mutex_t mu;
    void *y_conv; /* labels converted to y_conv_dtype, cached */
    rt_dtype y_conv_dtype;
    int refs;
} rt_dataset;

/* A data set's inputs held across MPI replicas (server/mpi,
 * --shard-data): at upload rank 0 hands every replica its block of rows
 * and keeps only its own. rows copies rows [start, start + nb) in order
 * into x (evaluation and prediction, on rank 0; training batches come
 * through the replicas' own exchange); release is called once, when the
 * data set is freed. */
typedef struct rt_held {
    int (*rows)(struct rt_held *h, int64_t start, int64_t nb, float *x, char *err, size_t errlen);
    void (*release)(struct rt_held *h);
} rt_held;
/* The holder, set once at start before any upload (server/mpi's
 * rt_dist_hold): given the n rows of per floats at x (bytes: the whole
 * set's) it leaves them (0, *out NULL) or hands them to the replicas and
 * returns their handle in *out (0), or fails (negative, with err). */
typedef int (*rt_data_holder)(const float *x, int64_t n, int64_t per, int64_t bytes, rt_held **out,
                              char *err, size_t errlen);
void rt_data_set_holder(rt_data_holder h);
/* The holder on ds, when one is set: 0 (left whole), 1 (held) or a
 * negative code. Called between parsing and publishing (uploads, restores). */
int rt_data_hold(rt_dataset *ds, char *err, size_t errlen);

/* Parse parts (back to back in *bufp, len = sum of lengths) into a new
 * dataset (refcount 1, key and id not set). max_bytes bounds what parsing
 * may allocate (gzip bombs). With take_free (not NULL) the dataset may
 * adopt *bufp for its f32 features instead of copying them, and gives it
 * back with take_free when it is freed; then *bufp is set to NULL and the
 * caller must not free it. A gzip'ed part (IDX, TFRecord shards) inflates
 * through rt_inflate.h's inflater, to at most max_bytes and
 * rt_inflate_cap(its size, max_inflate_ratio) (0 = no ratio cap); IDX
 * declares its size in its header, which is checked against both before
 * anything is inflated or allocated. */
int rt_data_parse_take(const rt_data_part *parts, int n_parts, uint8_t **bufp, size_t len,
                       uint64_t max_bytes, uint32_t max_inflate_ratio, void (*take_free)(void *),
                       rt_dataset **out, char *err, size_t errlen);

/* With augmentation (ds->img set): all n samples of x into out (n * per
 * floats), each image augmented with values drawn from (seed, epoch,
 * sample), the other features copied, on the host: what a training step's
 * gather makes of them (rt_view_epoch). Returns 0, or RT_EINVAL when ds
 * has nothing to augment. */
int rt_dataset_augment(const rt_dataset *ds, uint64_t seed, uint64_t epoch, float *out);

/* How the daemon streams TFRecord datasets (spool dir, threshold, workers,
 * prefetch, shuffle buffer); set once at start, before any upload. The
 * strings are copied. */
struct rt_stream_config;
void rt_data_set_stream_config(const struct rt_stream_config *c);
const struct rt_stream_config *rt_data_stream_config(void);

/* The store key: XXH3-128 over the content hash and how the parts are parsed,
 * so the same bytes read another way are another dataset. */
void rt_data_key(const uint8_t content_hash[16], const rt_data_part *parts, int n_parts,
                 uint8_t key[16]);
/* Set ds->key and give ds a random id. RT_EIO if the system has no random
 * bytes. */
int rt_dataset_set_key(rt_dataset *ds, const uint8_t key[16]);
/* ds belongs to owner, who reserved charged bytes of RT_Q_STORE_BYTES for
 * it; they are given back when ds is freed. */
void rt_dataset_set_owner(rt_dataset *ds, rt_principal *owner, uint64_t charged);

/* ds->bytes, read atomically: a program converting the labels adds to it
 * (under ds's lock) while calls and the store read it. */
uint64_t rt_dataset_bytes(const rt_dataset *ds);

void rt_dataset_retain(rt_dataset *ds);
void rt_dataset_release(rt_dataset *ds); /* NULL is a no-op */

/* Labels as dtype (RT_F32 or RT_I32). The first call for a dtype other than
 * the stored one converts and caches the copy in ds (f32 -> i32 only when
 * every label is integral). *out is owned by ds. */
int rt_dataset_labels_as(rt_dataset *ds, rt_dtype dtype, const void **out, char *err,
                         size_t errlen);

/* Product of a shape (1 for ndim 0); -1 if a dim is negative or the
 * product overflows int64 (e.g. IDX (0, 2^31, 2^31, 2^31): no data, huge
 * samples). Inline: the store and the record parsers (rt_example.c) both
 * size with it. */
static inline int64_t rt_data_numel(int ndim, const int64_t *dims)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        if (dims[i] < 0 || __builtin_mul_overflow(n, dims[i], &n))
            return -1;
    return n;
}
/* "(150, 4)"-style text of a shape into buf. */
const char *rt_data_shape_str(int ndim, const int64_t *dims, char *buf, size_t len);

/* ------------------------------------------------------------------ store */
typedef struct rt_data_store rt_data_store;

/* max_bytes caps what the store holds (0 = no cap): past it, the least
 * recently used datasets of the same owner that no call is using are
 * dropped; another owner's datasets never are. */
rt_data_store *rt_data_store_create(uint64_t max_bytes);
void rt_data_store_destroy(rt_data_store *s); /* NULL is a no-op */

/* Insert ds (the store takes the caller's reference). If ds->owner already
 * stored a dataset with the same key, ds is released, *dedup = 1 and *kept
 * is the stored one. *kept is retained for the caller either way. Returns
 * RT_ETOOBIG (ds released, *kept NULL) when the store stays over its cap
 * after dropping what the owner may lose. */
int rt_data_store_put(rt_data_store *s, rt_dataset *ds, rt_dataset **kept, int *dedup);
/* who's dataset by key or id, retained, or NULL. */
rt_dataset *rt_data_store_find_key(rt_data_store *s, const rt_principal *who,
                                   const uint8_t key[16]);
rt_dataset *rt_data_store_find_id(rt_data_store *s, const rt_principal *who, const char *id);
/* A call's dataset id (its field named what, e.g. "dataset_id"): *out
 * retained, or RT_EINVAL (empty) / RT_ENOTFOUND with err naming it. */
int rt_data_store_lookup(rt_data_store *s, const rt_principal *who, const char *id,
                         const char *what, rt_dataset **out, char *err, size_t errlen);
/* Drop who's least recently used dataset that no call is using. Returns 1
 * if one was dropped, 0 if none could be. */
int rt_data_store_evict_one(rt_data_store *s, const rt_principal *who);
size_t rt_data_store_count(rt_data_store *s);
/* Raw TFRecord shards by content (rt_shards.h), capped at a quarter of the
 * store's cap (1 GiB without one). Owned by the store. */
rt_shard_cache *rt_data_store_shards(rt_data_store *s);

/* An upload whose TFRecord parts may be held (rt_data_part.held): the
 * stream carries only the other parts' bytes, in order. rt_data_place puts
 * the next stream bytes where they belong in buf (sum of all lengths),
 * rt_data_fill_held copies the held parts from the cache (returns -1, or
 * the index of a part no longer held), rt_data_keep_shards keeps the sent
 * TFRecord parts in the cache for later uploads (rt_data.c).
 * The cache is shared, but its keys are per owner: a shard is held under
 * rt_data_shard_key(owner, content hash), so one principal can neither
 * learn nor use what another uploaded. */
typedef struct rt_data_cursor {
    int part;
    uint64_t base, off; /* the part's start in buf, bytes filled in it */
    uint32_t nonfinite; /* nonzero once a RAW f32 features value placed was
                             NaN/Inf (rt_data_place checks each block while it
                             is in cache; rt_data_place_finite reads it) */
} rt_data_cursor;
void rt_data_place(const rt_data_part *parts, int n_parts, rt_data_cursor *cur, uint8_t *buf,
                   const uint8_t *d, size_t n);
/* After the whole stream was placed: mark the RAW f32 features part
 * finite_checked when rt_data_place found no NaN/Inf in it, so parsing
 * does not read the whole buffer once more. */
void rt_data_place_finite(rt_data_part *parts, int n_parts, const rt_data_cursor *cur);
void rt_data_shard_key(const char *owner, const uint8_t hash[16], uint8_t key[16]);
int rt_data_fill_held(rt_shard_cache *sc, const char *owner, const rt_data_part *parts, int n_parts,
                      uint8_t *buf);
void rt_data_keep_shards(rt_shard_cache *sc, const char *owner, const rt_data_part *parts,
                         int n_parts, const uint8_t *buf);
uint64_t rt_data_store_bytes(rt_data_store *s);
/* fn(ud, ds) for every stored dataset, under the store's lock (the
 * dashboard copies ids, owners, sizes; fn must not call the store). */
void rt_data_store_each(rt_data_store *s, void (*fn)(void *ud, const rt_dataset *ds), void *ud);

#ifdef __cplusplus
}
#endif
#endif
