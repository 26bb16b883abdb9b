/* rt_example.c - tf.train.Example / SequenceExample records into a dataset. */
#include "rt_example.h"
#include "rt_errf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "rt_inflate.h"
#include "rt_stream.h"
#include "tf_example.pb-c.h"

static const char *const kind_names[] = {"int64", "float", "jpeg", "png", "image"};

static int is_image(rt_feat_kind k) { return k >= RT_FEAT_JPEG && k <= RT_FEAT_IMAGE; }

/* Values a feature holds per record. */
static int64_t feat_numel(const rt_example_spec *s, const rt_feat_spec *f)
{
    if (is_image(f->kind))
        return (int64_t)s->img.h * s->img.w * s->img.c;
    int64_t n = 1;
    for (int d = 0; d < f->ndim; d++)
        n *= f->dims[d];
    return n;
}

int rt_example_spec_check(const rt_example_spec *s, char *err, size_t errlen)
{
    if (s->n < 1 || s->n > RT_SPEC_MAX_FEATURES)
        return rt_errf(err, errlen, RT_EINVAL, "a feature spec has 1..%d keys, got %d",
                       RT_SPEC_MAX_FEATURES, s->n);
    int labels = 0, feats = 0, images = 0;
    for (int i = 0; i < s->n; i++) {
        const rt_feat_spec *f = &s->f[i];
        if (!f->key[0] || memchr(f->key, 0, RT_SPEC_KEY_MAX) == NULL)
            return rt_errf(err, errlen, RT_EINVAL, "feature spec entry %d has no key", i);
        if ((int)f->kind < 0 || f->kind > RT_FEAT_IMAGE)
            return rt_errf(err, errlen, RT_EINVAL, "feature '%s' has unknown kind %d", f->key,
                           (int)f->kind);
        for (int j = 0; j < i; j++)
            if (strcmp(s->f[j].key, f->key) == 0)
                return rt_errf(err, errlen, RT_EINVAL, "feature '%s' is in the spec twice", f->key);
        if (f->sequence && !s->sequence_example)
            return rt_errf(err, errlen, RT_EINVAL,
                           "feature '%s' reads a feature list but records are Examples", f->key);
        if (f->sequence && (is_image(f->kind) || f->ndim != 2))
            return rt_errf(err, errlen, RT_EINVAL,
                           "feature list '%s' needs a numeric kind and a shape (steps, values)",
                           f->key);
        if (f->ndim < 0 || f->ndim > 2)
            return rt_errf(err, errlen, RT_EINVAL, "feature '%s' has %d dims (0..2 allowed)",
                           f->key, f->ndim);
        for (int d = 0; d < f->ndim; d++)
            if (f->dims[d] < 1 || f->dims[d] > (1 << 24))
                return rt_errf(err, errlen, RT_EINVAL, "feature '%s' dim %d is %lld", f->key, d,
                               (long long)f->dims[d]);
        if (f->label) {
            if (is_image(f->kind))
                return rt_errf(err, errlen, RT_EINVAL, "label '%s' cannot be an image", f->key);
            labels++;
        } else {
            feats++;
        }
        images += is_image(f->kind) && !f->label;
    }
    if (labels > 1)
        return rt_errf(err, errlen, RT_EINVAL, "the spec names %d labels; at most one", labels);
    if (feats < 1)
        return rt_errf(err, errlen, RT_EINVAL, "the spec has no feature besides the label");
    if (images) {
        const rt_image_spec *m = &s->img;
        if (m->h < 1 || m->w < 1 || m->h > 8192 || m->w > 8192)
            return rt_errf(err, errlen, RT_EINVAL,
                           "images need an input size (height, width in 1..8192), got %d x %d",
                           m->h, m->w);
        if (m->c != 1 && m->c != 3)
            return rt_errf(err, errlen, RT_EINVAL, "images have 1 or 3 channels, not %d", m->c);
        if (images > 1 && rt_image_spec_augments(m))
            return rt_errf(err, errlen, RT_EINVAL, "augmentation needs exactly one image feature");
        if (m->crop_pad < 0 || m->crop_pad > m->h || m->crop_pad > m->w || m->brightness < 0 ||
            m->brightness > 1 || m->contrast < 0 || m->contrast > 1 || !isfinite(m->brightness) ||
            !isfinite(m->contrast))
            return rt_errf(
                err, errlen, RT_EINVAL,
                "augmentation out of range (crop_pad <= size, brightness and contrast in [0, 1])");
        for (int ch = 0; ch < m->c; ch++)
            if (!isfinite(m->mean[ch]) || !isfinite(m->std[ch]) || m->std[ch] < 0)
                return rt_errf(err, errlen, RT_EINVAL, "image mean/std must be finite, std >= 0");
    }
    return 0;
}

void rt_example_spec_hash(const rt_example_spec *s, uint8_t out[16])
{
    /* field by field: padding and unused keys must not enter the hash */
    XXH3_state_t *st = XXH3_createState();
    XXH3_128bits_reset(st);
    /* storage and shuffle buffer: 0 for AUTO with the default, as before
     * they existed, so those keys stay the same */
    int64_t h[4] = {s->n, s->sequence_example, s->skip_bad,
                    (int64_t)s->storage + 4 * s->shuffle_buffer};
    XXH3_128bits_update(st, h, sizeof h);
    for (int i = 0; i < s->n; i++) {
        const rt_feat_spec *f = &s->f[i];
        XXH3_128bits_update(st, f->key, strnlen(f->key, RT_SPEC_KEY_MAX) + 1);
        int64_t v[6] = {f->kind,
                        f->label,
                        f->sequence,
                        f->ndim,
                        f->ndim > 0 ? f->dims[0] : 0,
                        f->ndim > 1 ? f->dims[1] : 0};
        XXH3_128bits_update(st, v, sizeof v);
    }
    const rt_image_spec *m = &s->img;
    int64_t iv[6] = {m->h, m->w, m->c, m->resize, m->crop_pad, m->flip};
    float fv[8] = {m->mean[0], m->mean[1], m->mean[2],    m->std[0],
                   m->std[1],  m->std[2],  m->brightness, m->contrast};
    XXH3_128bits_update(st, iv, sizeof iv);
    XXH3_128bits_update(st, fv, sizeof fv);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
    XXH3_freeState(st);
    memcpy(out, c.digest, 16);
}

/* ---------------------------------------------------------------- records */
static Tensorflow__Feature *find_feature(const Tensorflow__Features *fs, const char *key)
{
    if (!fs)
        return NULL;
    for (size_t i = 0; i < fs->n_feature; i++)
        if (fs->feature[i]->key && strcmp(fs->feature[i]->key, key) == 0)
            return fs->feature[i]->value;
    return NULL;
}

static Tensorflow__FeatureList *find_list(const Tensorflow__FeatureLists *fl, const char *key)
{
    if (!fl)
        return NULL;
    for (size_t i = 0; i < fl->n_feature_list; i++)
        if (fl->feature_list[i]->key && strcmp(fl->feature_list[i]->key, key) == 0)
            return fl->feature_list[i]->value;
    return NULL;
}

static const char *feature_kind_str(const Tensorflow__Feature *f)
{
    switch (f ? f->kind_case : TENSORFLOW__FEATURE__KIND__NOT_SET) {
    case TENSORFLOW__FEATURE__KIND_BYTES_LIST: return "bytes";
    case TENSORFLOW__FEATURE__KIND_FLOAT_LIST: return "float";
    case TENSORFLOW__FEATURE__KIND_INT64_LIST: return "int64";
    default: return "empty";
    }
}

/* n numeric values of f into out (f32; labels may go to i32 instead). */
static int read_numeric(const rt_feat_spec *fs, const Tensorflow__Feature *f, int64_t want,
                        float *out_f, int32_t *out_i, char *err, size_t errlen)
{
    size_t n;
    if (fs->kind == RT_FEAT_INT64) {
        if (!f || f->kind_case != TENSORFLOW__FEATURE__KIND_INT64_LIST)
            return rt_errf(err, errlen, RT_EDTYPE, "is %s, the spec says int64",
                           feature_kind_str(f));
        n = f->int64_list->n_value;
    } else {
        if (!f || f->kind_case != TENSORFLOW__FEATURE__KIND_FLOAT_LIST)
            return rt_errf(err, errlen, RT_EDTYPE, "is %s, the spec says float",
                           feature_kind_str(f));
        n = f->float_list->n_value;
    }
    if ((int64_t)n != want)
        return rt_errf(err, errlen, RT_ESHAPE, "has %zu values, the spec says %lld", n,
                       (long long)want);
    for (size_t i = 0; i < n; i++) {
        if (fs->kind == RT_FEAT_INT64) {
            int64_t v = f->int64_list->value[i];
            if (out_i) {
                if (v < INT32_MIN || v > INT32_MAX)
                    return rt_errf(err, errlen, RT_EDATA, "value %lld does not fit in int32",
                                   (long long)v);
                out_i[i] = (int32_t)v;
            } else {
                out_f[i] = (float)v;
            }
        } else {
            float v = f->float_list->value[i];
            if (!isfinite(v))
                return rt_errf(err, errlen, RT_ENAN, "value %zu is %s", i,
                               isnan(v) ? "NaN" : "Inf");
            out_f[i] = v;
        }
    }
    return 0;
}

int rt_example_decode(const rt_example_layout *b, const uint8_t *rec, size_t len, float *x, void *y,
                      uint8_t *img, char *err, size_t errlen)
{
    const rt_example_spec *s = b->s;
    Tensorflow__Example *ex = NULL;
    Tensorflow__SequenceExample *sx = NULL;
    const Tensorflow__Features *feats;
    const Tensorflow__FeatureLists *lists = NULL;
    if (s->sequence_example) {
        sx = tensorflow__sequence_example__unpack(NULL, len, rec);
        if (!sx)
            return rt_errf(err, errlen, RT_EDATA, "not a tf.train.SequenceExample");
        feats = sx->context;
        lists = sx->feature_lists;
    } else {
        ex = tensorflow__example__unpack(NULL, len, rec);
        if (!ex)
            return rt_errf(err, errlen, RT_EDATA, "not a tf.train.Example");
        feats = ex->features;
    }
    int rc = 0;
    int64_t off = 0;
    char sub[200];
    for (int i = 0; i < s->n && rc == 0; i++) {
        const rt_feat_spec *fs = &s->f[i];
        int64_t numel = feat_numel(s, fs);
        if (fs->sequence) {
            const Tensorflow__FeatureList *fl = find_list(lists, fs->key);
            if (!fl) {
                rc = rt_errf(err, errlen, RT_EDATA, "feature list '%s' is missing", fs->key);
                break;
            }
            if ((int64_t)fl->n_feature != fs->dims[0]) {
                rc = rt_errf(err, errlen, RT_ESHAPE,
                             "feature list '%s' has %zu steps, the spec says %lld", fs->key,
                             fl->n_feature, (long long)fs->dims[0]);
                break;
            }
            for (size_t t = 0; t < fl->n_feature && rc == 0; t++) {
                float *of = fs->label ? (b->label_i32 ? NULL : (float *)y + t * fs->dims[1])
                                      : x + off + (int64_t)t * fs->dims[1];
                int32_t *oi = fs->label && b->label_i32 ? (int32_t *)y + t * fs->dims[1] : NULL;
                if ((rc = read_numeric(fs, fl->feature[t], fs->dims[1], of, oi, sub, sizeof sub)) <
                    0)
                    rt_errf(err, errlen, rc, "feature list '%s' step %zu %s", fs->key, t, sub);
            }
        } else {
            const Tensorflow__Feature *f = find_feature(feats, fs->key);
            if (!f) {
                rc = rt_errf(err, errlen, RT_EDATA, "feature '%s' is missing", fs->key);
                break;
            }
            if (is_image(fs->kind)) {
                if (f->kind_case != TENSORFLOW__FEATURE__KIND_BYTES_LIST) {
                    rc = rt_errf(err, errlen, RT_EDTYPE, "feature '%s' is %s, the spec says %s",
                                 fs->key, feature_kind_str(f), kind_names[fs->kind]);
                    break;
                }
                if (f->bytes_list->n_value != 1) {
                    rc = rt_errf(err, errlen, RT_ESHAPE, "feature '%s' holds %zu images, not 1",
                                 fs->key, f->bytes_list->n_value);
                    break;
                }
                const ProtobufCBinaryData *bd = &f->bytes_list->value[0];
                const rt_image_spec *m = &s->img;
                uint8_t *px;
                int w, h;
                rc = rt_image_decode_for(bd->data, bd->len,
                                         fs->kind == RT_FEAT_JPEG  ? RT_IMG_JPEG
                                         : fs->kind == RT_FEAT_PNG ? RT_IMG_PNG
                                                                   : RT_IMG_ANY,
                                         m->c, RT_IMAGE_MAX_VALUES, m->w, m->h, &px, &w, &h, sub,
                                         sizeof sub);
                if (rc < 0) {
                    rt_errf(err, errlen, rc, "feature '%s': %s", fs->key, sub);
                    break;
                }
                uint8_t small_buf[4096];
                size_t need = (size_t)m->h * m->w * m->c;
                uint8_t *small = i == b->img_feat           ? img
                                 : need <= sizeof small_buf ? small_buf
                                                            : malloc(need);
                if (!small) {
                    free(px);
                    rc = rt_errf(err, errlen, RT_ENOMEM, "out of memory resizing '%s'", fs->key);
                    break;
                }
                rt_image_resize(px, w, h, m->c, small, m->w, m->h, m->resize);
                free(px);
                rt_image_to_input(m, small, x + off, NULL);
                if (small != img && small != small_buf)
                    free(small);
            } else if (fs->label) {
                rc = read_numeric(fs, f, numel, b->label_i32 ? NULL : y, b->label_i32 ? y : NULL,
                                  sub, sizeof sub);
                if (rc < 0)
                    rt_errf(err, errlen, rc, "feature '%s' %s", fs->key, sub);
            } else {
                rc = read_numeric(fs, f, numel, x + off, NULL, sub, sizeof sub);
                if (rc < 0)
                    rt_errf(err, errlen, rc, "feature '%s' %s", fs->key, sub);
            }
        }
        if (!fs->label)
            off += numel;
    }
    if (ex)
        tensorflow__example__free_unpacked(ex, NULL);
    if (sx)
        tensorflow__sequence_example__free_unpacked(sx, NULL);
    return rc;
}

typedef struct rec_ref {
    const uint8_t *p;
    size_t len;
    int shard;
    int64_t index; /* record index in its shard */
    int bad;       /* framing error: p is NULL, msg in errs */
} rec_ref;

static void note_skip(rt_dataset *ds, const char *msg)
{
    if (ds->skipped++ == 0)
        snprintf(ds->skip_msg, sizeof ds->skip_msg, "%.159s", msg);
}

void rt_example_layout_init(const rt_example_spec *s, rt_example_layout *L)
{
    *L = (rt_example_layout){.s = s, .img_feat = -1, .lab = -1};
    for (int i = 0; i < s->n; i++) {
        if (s->f[i].label) {
            L->lab = i;
            L->lab_per = feat_numel(s, &s->f[i]);
            L->label_i32 = s->f[i].kind == RT_FEAT_INT64;
            continue;
        }
        if (is_image(s->f[i].kind) && rt_image_spec_augments(&s->img)) {
            L->img_feat = i;
            L->img_off = L->per;
        }
        L->per += feat_numel(s, &s->f[i]);
    }
}

/* Shapes: one feature keeps its own, several are flattened. */
static void set_shapes(const rt_example_layout *b, rt_dataset *ds)
{
    const rt_example_spec *s = b->s;
    const int lab = b->lab;
    int nf = 0, only = -1;
    for (int i = 0; i < s->n; i++)
        if (!s->f[i].label) {
            nf++;
            only = i;
        }
    if (nf == 1 && is_image(s->f[only].kind)) {
        ds->x_ndim = 3;
        ds->x_dims[0] = s->img.h;
        ds->x_dims[1] = s->img.w;
        ds->x_dims[2] = s->img.c;
    } else if (nf == 1 && s->f[only].ndim > 0) {
        ds->x_ndim = s->f[only].ndim;
        memcpy(ds->x_dims, s->f[only].dims, sizeof(int64_t) * (size_t)ds->x_ndim);
    } else {
        ds->x_ndim = 1;
        ds->x_dims[0] = b->per;
    }
    if (lab >= 0) {
        ds->y_dtype = b->label_i32 ? RT_I32 : RT_F32;
        ds->y_ndim = s->f[lab].ndim;
        memcpy(ds->y_dims, s->f[lab].dims, sizeof(int64_t) * (size_t)ds->y_ndim);
    }
}

/* The streamed dataset: every record is decoded once here, a chunk of
 * records at a time on all cores, into its row of the spool
 * (rt_stream.h): the first image feature as its resized 8-bit image (so
 * augmentation and normalisation happen per batch, as in memory), every
 * other value as f32. Bad records are reported or skipped in record order
 * exactly as in memory; only the labels stay in memory. */
static int build_streamed(const rt_example_layout *b, const rec_ref *recs, int64_t n,
                          const rt_stream_config *sc, rt_dataset *ds, char *err, size_t errlen)
{
    const rt_example_spec *s = b->s;
    /* the layout with the 8-bit image kept whether or not it augments */
    rt_example_layout L = *b;
    L.img_feat = -1;
    L.img_off = 0;
    rt_stream_rows R = {.per = b->per};
    for (int i = 0, off = 0; i < s->n; i++) {
        if (s->f[i].label)
            continue;
        if (is_image(s->f[i].kind)) {
            L.img_feat = i;
            L.img_off = off;
            R.u8_off = off;
            R.u8_len = (int64_t)s->img.h * s->img.w * s->img.c;
            R.u8_kind = RT_ROWS_U8_IMAGE;
            R.img = s->img;
            break;
        }
        off += (int)feat_numel(s, &s->f[i]);
    }
    const uint64_t rb = rt_stream_row_bytes(&R);
    int64_t good = 0;
    for (int64_t i = 0; i < n; i++)
        good += !recs[i].bad;
    if (good == 0)
        return rt_errf(err, errlen, RT_EDATA, "every record was bad; first: %s", ds->skip_msg);
    int64_t ch = (int64_t)((16u << 20) / rb);
    ch = ch < 16 ? 16 : ch > 1024 ? 1024 : ch;
    ds->y = b->lab >= 0 ? malloc((size_t)n * (size_t)b->lab_per * 4) : NULL;
    uint8_t *rows = malloc((size_t)(ch * (int64_t)rb));
    int *status = malloc(sizeof(int) * (size_t)ch);
    char(*msgs)[200] = malloc(sizeof *msgs * (size_t)ch);
    int rc = 0;
    if ((b->lab >= 0 && !ds->y) || !rows || !status || !msgs) {
        rc = rt_errf(err, errlen, RT_ENOMEM, "out of memory for %lld labels", (long long)n);
        goto out;
    }
    if ((rc = rt_stream_begin(&R, good, s->shuffle_buffer, sc, &ds->stream, err, errlen)) < 0)
        goto out;
    int64_t kept = 0;
    for (int64_t c0 = 0; c0 < n && rc == 0; c0 += ch) {
        const int64_t cn = n - c0 < ch ? n - c0 : ch;
        int nomem = 0;
#pragma omp parallel
        {
            float *x = malloc(sizeof(float) * (size_t)b->per);
            if (!x)
                __atomic_store_n(&nomem, 1, __ATOMIC_RELAXED);
#pragma omp for schedule(dynamic, 4)
            for (int64_t k = 0; k < cn; k++) {
                const int64_t i = c0 + k;
                uint8_t *row = rows + k * (int64_t)rb;
                status[k] = 0;
                if (recs[i].bad || !x)
                    continue;
                status[k] = rt_example_decode(&L, recs[i].p, recs[i].len, x,
                                              ds->y ? (char *)ds->y + i * b->lab_per * 4 : NULL,
                                              R.u8_len ? row : NULL, msgs[k], sizeof msgs[k]);
                if (status[k] == 0) {
                    uint8_t *f = row + R.u8_len;
                    memcpy(f, x, sizeof(float) * (size_t)R.u8_off);
                    memcpy(f + 4 * R.u8_off, x + R.u8_off + R.u8_len,
                           sizeof(float) * (size_t)(R.per - R.u8_off - R.u8_len));
                }
            }
            free(x);
        }
        if (nomem) {
            rc = rt_errf(err, errlen, RT_ENOMEM, "out of memory for decode scratch");
            break;
        }
        /* in record order: report or skip the bad, write the good */
        int64_t run = -1; /* the first row of a run of good ones */
        for (int64_t k = 0; k <= cn && rc == 0; k++) {
            const int64_t i = c0 + k;
            const int ok = k < cn && !recs[i].bad && status[k] == 0;
            if (ok && run < 0)
                run = k;
            if (!ok && run >= 0) {
                rc = rt_stream_write(ds->stream, rows + run * (int64_t)rb,
                                     (size_t)((k - run) * (int64_t)rb), err, errlen);
                run = -1;
            }
            if (k == cn || recs[i].bad)
                continue;
            if (!ok) {
                char m[260];
                snprintf(m, sizeof m, "shard %d record %lld: %s", recs[i].shard,
                         (long long)recs[i].index, msgs[k]);
                if (!s->skip_bad) {
                    rc = rt_errf(err, errlen, status[k], "%s", m);
                    break;
                }
                note_skip(ds, m);
                continue;
            }
            if (ds->y && kept != i)
                memmove((char *)ds->y + kept * b->lab_per * 4, (char *)ds->y + i * b->lab_per * 4,
                        (size_t)b->lab_per * 4);
            kept++;
        }
    }
    if (rc < 0)
        goto out;
    if (kept == 0) {
        rc = rt_errf(err, errlen, RT_EDATA, "every record was bad; first: %s", ds->skip_msg);
        goto out;
    }
    if ((rc = rt_stream_end(ds->stream, err, errlen)) < 0)
        goto out;
    ds->n = kept;
    set_shapes(b, ds);
    ds->bytes = (uint64_t)kept * (uint64_t)b->lab_per * 4;
out:
    free(rows);
    free(status);
    free(msgs);
    return rc;
}

int rt_example_build(const rt_example_spec *s, const rt_tfr_shard *shards, int n_shards,
                     uint64_t max_bytes, rt_dataset *ds, char *err, size_t errlen)
{
    return rt_example_build_ex(s, shards, n_shards, max_bytes, NULL, ds, err, errlen);
}

int rt_example_build_ex(const rt_example_spec *s, const rt_tfr_shard *shards, int n_shards,
                        uint64_t max_bytes, const rt_stream_config *sc, rt_dataset *ds, char *err,
                        size_t errlen)
{
    int rc = rt_example_spec_check(s, err, errlen);
    if (rc < 0)
        return rc;
    rt_example_layout b;
    rt_example_layout_init(s, &b);
    const int lab = b.lab;
    uint8_t **inflated = calloc((size_t)n_shards, sizeof *inflated);
    rec_ref *recs = NULL;
    char(*msgs)[200] = NULL;
    int *status = NULL;
    size_t n_recs = 0, cap = 0;
    uint64_t held = 0;
    if (!inflated)
        return rt_errf(err, errlen, RT_ENOMEM, "out of memory");
    /* Pass 1: inflate and frame every shard; records point into the
     * shard bytes. Frame errors are kept as entries so they are reported
     * (or skipped) in record order. */
    for (int sh = 0; sh < n_shards && rc == 0; sh++) {
        const uint8_t *p = shards[sh].data;
        size_t len = shards[sh].len;
        char sub[200];
        if (shards[sh].compression != RT_TFR_NONE) {
            size_t n;
            /* the dataset limit left, and the ratio: a bomb stops at
             * ratio x its size instead of at the dataset limit */
            const rt_zlimits lim = {max_bytes > held ? max_bytes - held : 1,
                                    held ? "dataset limit left" : "dataset limit",
                                    "--max-dataset-bytes", shards[sh].ratio};
            const rt_zspan in = {p, len};
            char what[32];
            snprintf(what, sizeof what, "shard %d", sh);
            const rt_tfr_compression c = shards[sh].compression;
            rc = rt_inflate_all(c == RT_TFR_GZIP   ? RT_Z_GZIP
                                : c == RT_TFR_ZLIB ? RT_Z_ZLIB
                                                   : (rt_zfmt)(100 + (int)c), /* unknown: refused */
                                &in, 1, &lim, what, NULL, NULL, &inflated[sh], &n, err, errlen);
            if (rc < 0)
                break;
            held += n;
            p = inflated[sh];
            len = n;
        }
        rt_tfr_reader r;
        rt_tfr_reader_init(&r, p, len);
        for (;;) {
            const uint8_t *rec;
            size_t rl;
            int64_t idx = r.index;
            int fr = rt_tfr_next(&r, &rec, &rl, sub, sizeof sub);
            if (fr == 0)
                break;
            if (fr < 0 && !s->skip_bad) {
                rc = rt_errf(err, errlen, fr, "shard %d %s", sh, sub);
                break;
            }
            if (n_recs == cap) {
                size_t nc = cap ? cap * 2 : 1024;
                rec_ref *nr = realloc(recs, nc * sizeof *nr);
                if (!nr) {
                    rc = rt_errf(err, errlen, RT_ENOMEM, "out of memory listing records");
                    break;
                }
                recs = nr;
                cap = nc;
            }
            recs[n_recs++] =
                (rec_ref){.p = rec, .len = rl, .shard = sh, .index = idx, .bad = fr < 0};
            if (fr < 0) {
                char m[260];
                snprintf(m, sizeof m, "shard %d %s", sh, sub);
                note_skip(ds, m);
                if (r.fatal)
                    break;
            }
        }
    }
    if (rc < 0)
        goto out;
    /* Quota before the big allocations. */
    int64_t n = (int64_t)n_recs;
    uint64_t img_bytes = b.img_feat >= 0 ? (uint64_t)s->img.h * s->img.w * s->img.c : 0;
    const uint64_t per_rec = (uint64_t)b.per * 4 + (uint64_t)b.lab_per * 4 + img_bytes;
    const int over = n > 0 && (uint64_t)n > UINT64_MAX / per_rec;
    uint64_t need = over ? UINT64_MAX : (uint64_t)n * per_rec;
    if (n == 0) {
        rc = rt_errf(err, errlen, RT_EDATA, "no records%s%s",
                     ds->skipped ? "; first skipped: " : "", ds->skipped ? ds->skip_msg : "");
        goto out;
    }
    const int stream =
        s->storage == RT_STORAGE_STREAM || (s->storage == RT_STORAGE_AUTO && sc &&
                                            sc->stream_above && (over || need > sc->stream_above));
    if (stream) {
        rc = build_streamed(&b, recs, n, sc, ds, err, errlen);
        goto out;
    }
    if (over || need > max_bytes) {
        rc = rt_errf(err, errlen, RT_ETOOBIG,
                     "%lld records decode to %llu bytes, over the limit of %llu", (long long)n,
                     (unsigned long long)need, (unsigned long long)max_bytes);
        goto out;
    }
    ds->x = malloc((size_t)n * (size_t)b.per * sizeof(float));
    ds->y = lab >= 0 ? malloc((size_t)n * (size_t)b.lab_per * 4) : NULL;
    ds->img = img_bytes ? malloc((size_t)n * img_bytes) : NULL;
    msgs = malloc((size_t)n * sizeof *msgs);
    status = calloc((size_t)n, sizeof *status);
    if (!ds->x || (lab >= 0 && !ds->y) || (img_bytes && !ds->img) || !msgs || !status) {
        rc = rt_errf(err, errlen, RT_ENOMEM, "out of memory for %lld records", (long long)n);
        goto out;
    }
    /* Pass 2: decode each record into its own slot, in parallel; then
     * report or compact in record order, so the result does not depend on
     * the threads. */
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t i = 0; i < n; i++) {
        if (recs[i].bad) {
            status[i] = RT_ECHECKSUM;
            continue;
        }
        msgs[i][0] = 0;
        status[i] = rt_example_decode(&b, recs[i].p, recs[i].len, ds->x + i * b.per,
                                      ds->y ? (char *)ds->y + i * b.lab_per * 4 : NULL,
                                      ds->img ? ds->img + (uint64_t)i * img_bytes : NULL, msgs[i],
                                      sizeof msgs[i]);
    }
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        if (recs[i].bad)
            continue; /* counted in pass 1 */
        if (status[i] < 0) {
            char m[260];
            snprintf(m, sizeof m, "shard %d record %lld: %s", recs[i].shard,
                     (long long)recs[i].index, msgs[i]);
            if (!s->skip_bad) {
                rc = rt_errf(err, errlen, status[i], "%s", m);
                goto out;
            }
            note_skip(ds, m);
            continue;
        }
        if (kept != i) {
            memmove(ds->x + kept * b.per, ds->x + i * b.per, sizeof(float) * (size_t)b.per);
            if (ds->y)
                memmove((char *)ds->y + kept * b.lab_per * 4, (char *)ds->y + i * b.lab_per * 4,
                        (size_t)b.lab_per * 4);
            if (ds->img)
                memmove(ds->img + (uint64_t)kept * img_bytes, ds->img + (uint64_t)i * img_bytes,
                        img_bytes);
        }
        kept++;
    }
    if (kept == 0) {
        rc = rt_errf(err, errlen, RT_EDATA, "every record was bad; first: %s", ds->skip_msg);
        goto out;
    }
    ds->n = kept;
    set_shapes(&b, ds);
    if (ds->img) {
        ds->img_spec = s->img;
        ds->img_off = b.img_off;
    }
    ds->bytes = (uint64_t)kept * ((uint64_t)b.per * 4 + (uint64_t)b.lab_per * 4 + img_bytes);
out:
    if (rc < 0) {
        free(ds->x);
        free(ds->y);
        free(ds->img);
        ds->x = NULL;
        ds->y = NULL;
        ds->img = NULL;
    }
    for (int sh = 0; sh < n_shards; sh++)
        free(inflated[sh]);
    free(inflated);
    free(recs);
    free(msgs);
    free(status);
    return rc;
}

int rt_dataset_augment(const rt_dataset *ds, uint64_t seed, uint64_t epoch, float *out)
{
    if (!ds->img)
        return RT_EINVAL;
    const int64_t per = rt_data_numel(ds->x_ndim, ds->x_dims);
    const rt_image_spec *m = &ds->img_spec;
    const int64_t ib = (int64_t)m->h * m->w * m->c;
    memcpy(out, ds->x, sizeof(float) * (size_t)(ds->n * per));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < ds->n; i++) {
        rt_image_aug a;
        rt_image_aug_draw(m, seed, epoch, (uint64_t)i, &a);
        rt_image_to_input(m, ds->img + i * ib, out + i * per + ds->img_off, &a);
    }
    return 0;
}
