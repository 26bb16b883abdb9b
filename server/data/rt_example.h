/*
 * rt_example.h - tf.train.Example / SequenceExample records into a dataset,
 * under a feature spec like tf.io.parse_single_example's.
 *
 * The spec names the keys to read, their kind (int64, float, or an encoded
 * JPEG/PNG image held as one bytes value), their per-record shape, and which
 * one is the label. Features are laid out per sample in spec order: one
 * feature keeps its shape ((h, w, c) for an image), several are flattened
 * and concatenated. A label is i32 (from int64) or f32 (from float).
 *
 *     rt_example_spec s = {.n = 2, .img = {.h = 32, .w = 32, .c = 3}};
 *     s.f[0] = (rt_feat_spec){.key = "image", .kind = RT_FEAT_IMAGE};
 *     s.f[1] = (rt_feat_spec){.key = "label", .kind = RT_FEAT_INT64, .label = 1};
 *     rt_tfr_shard sh = {.data = file, .len = n, .compression = RT_TFR_NONE};
 *     rc = rt_example_build(&s, &sh, 1, max_bytes, ds, err, sizeof err);
 *
 * Bad records (CRC mismatch, missing key, wrong kind or count, an image that
 * does not decode or is too large) fail the whole build with a message
 * naming the shard, record and feature, or with skip_bad are left out and
 * counted in ds->skipped (the first message kept in ds->skip_msg). A file
 * whose framing is lost (length CRC, truncation) loses the rest of that
 * shard: with skip_bad that counts as one skipped record.
 */
#ifndef RTRAIN_EXAMPLE_H
#define RTRAIN_EXAMPLE_H

#include "rt_data.h"
#include "rt_image.h"
#include "rt_tfrecord.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RT_SPEC_MAX_FEATURES 16
#define RT_SPEC_KEY_MAX 64
/* Images larger than this many decoded values (w * h * c) are refused from
 * their header: 64 Mi, a 4730 x 4730 RGB photo. */
#define RT_IMAGE_MAX_VALUES (UINT64_C(1) << 26)

/* Values match proto FeatureKind. IMAGE is JPEG or PNG by magic bytes. */
typedef enum rt_feat_kind {
    RT_FEAT_INT64 = 0,
    RT_FEAT_FLOAT = 1,
    RT_FEAT_JPEG = 2,
    RT_FEAT_PNG = 3,
    RT_FEAT_IMAGE = 4
} rt_feat_kind;

typedef struct rt_feat_spec {
    char key[RT_SPEC_KEY_MAX];
    rt_feat_kind kind;
    int label;    /* this key is the label (at most one) */
    int sequence; /* SequenceExample: feature_lists[key], shape (steps, values) */
    int ndim;     /* numeric: per-record shape; 0 = one value */
    int64_t dims[2];
} rt_feat_spec;

/* Values match proto Storage. */
typedef enum rt_storage {
    RT_STORAGE_AUTO = 0,   /* streamed when the decoded size is over the daemon's threshold */
    RT_STORAGE_MEMORY = 1, /* decoded in memory, under the dataset cap */
    RT_STORAGE_STREAM = 2  /* records on disk, decoded per batch (rt_stream.h) */
} rt_storage;

typedef struct rt_example_spec {
    int n;
    rt_feat_spec f[RT_SPEC_MAX_FEATURES];
    int sequence_example; /* records are SequenceExamples */
    rt_image_spec img;    /* for every image feature */
    int skip_bad;         /* skip and count bad records instead of failing */
    rt_storage storage;
    int64_t shuffle_buffer; /* streamed: samples in the shuffle buffer; 0 = default */
} rt_example_spec;

/* Where a spec puts each feature of a record, derived once
 * (rt_example_layout_init). */
typedef struct rt_example_layout {
    const rt_example_spec *s;
    int64_t per, lab_per; /* floats per sample, labels per sample */
    int label_i32;
    int lab;         /* spec index of the label, -1 */
    int img_feat;    /* spec index of the augmented image, -1 */
    int64_t img_off; /* its first float in a sample */
} rt_example_layout;

void rt_example_layout_init(const rt_example_spec *s, rt_example_layout *L);
/* One record into sample slot x (L->per floats), y (L->lab_per values, or
 * NULL) and, with augmentation, img (the resized 8-bit image). Returns 0
 * or an error whose message starts with the feature. Thread-safe. */
int rt_example_decode(const rt_example_layout *L, const uint8_t *rec, size_t len, float *x, void *y,
                      uint8_t *img, char *err, size_t errlen);

/* How the daemon streams (rt_data_set_stream_config). */
typedef struct rt_stream_config {
    const char *spool_dir;    /* where streamed records are written; NULL: RT_SPOOL_DIR_DEFAULT */
    uint64_t stream_above;    /* AUTO streams when the decoded size exceeds this; 0: never */
    int threads;              /* decode workers per streamed dataset; 0 = the CPUs */
    int prefetch;             /* batches decoded ahead; 0 = 4 */
    int64_t shuffle_buffer;   /* default shuffle buffer in samples; 0 = 10000 */
    uint64_t max_spool_bytes; /* all spool files together; 0 = only the disk's room */
    uint64_t map_max;         /* spool files up to this size are mapped and read by the
                                  step itself; larger ones by the workers; 0 = none */
} rt_stream_config;

typedef struct rt_tfr_shard {
    const uint8_t *data;
    size_t len;
    rt_tfr_compression compression;
    uint32_t ratio; /* inflates to at most rt_inflate_cap(len, ratio); 0 = no cap */
} rt_tfr_shard;

/* Check a spec: keys non-empty and distinct, one label at most, at least
 * one feature, shapes positive, an image size when an image is read. */
int rt_example_spec_check(const rt_example_spec *s, char *err, size_t errlen);

/* Fill ds (zeroed apart from its mutex and refcount, as rt_data_parse_take
 * makes it) with the records of all shards in order. Decoded sizes are
 * checked against max_bytes before anything is allocated. With image
 * augmentation in the spec the resized 8-bit images are kept too, for
 * rt_dataset_augment. */
int rt_example_build(const rt_example_spec *s, const rt_tfr_shard *shards, int n_shards,
                     uint64_t max_bytes, rt_dataset *ds, char *err, size_t errlen);
/* The same with a stream config (NULL: in memory only). A dataset that is
 * streamed (forced by s->storage, or AUTO over sc->stream_above) is checked
 * record by record as above, the good records are written to an unlinked
 * file in sc->spool_dir and ds->stream reads them back (ds->x is NULL, the
 * labels stay in memory). max_bytes then caps the file's bytes. */
int rt_example_build_ex(const rt_example_spec *s, const rt_tfr_shard *shards, int n_shards,
                        uint64_t max_bytes, const rt_stream_config *sc, rt_dataset *ds, char *err,
                        size_t errlen);

/* The wire ExampleSpec (Rtrain__V1__ExampleSpec) into s, checked
 * (rt_example_pb.c). RT_EINVAL with a message. */
struct Rtrain__V1__ExampleSpec;
int rt_example_spec_from_pb(const struct Rtrain__V1__ExampleSpec *p, rt_example_spec *s, char *err,
                            size_t errlen);

/* 16 bytes that identify the spec's meaning, for the store key. */
void rt_example_spec_hash(const rt_example_spec *s, uint8_t out[16]);

#ifdef __cplusplus
}
#endif
#endif
