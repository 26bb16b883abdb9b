/* rt_client_shards.c - TFRecord shards and image folders as uploads
 * (rtrain_data.h). The daemon parses and decodes; this file only names the
 * files, says how to read them, and for an image folder frames the image
 * files, untouched, as TFRecord records in memory. */
#include "rt_client_impl.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <zlib.h>

#include "rt_crc32c.h"
#include "rt_errf.h"
#include "rtrain/rtrain_data.h"

#define MAX_FEATURES RT__SPEC_MAX_FEATURES
#define MAX_SHARDS 256

/* a bad spec: the message in err, RT_EINVAL (rt_errf, the one formatter) */
#define perr(err, errlen, ...) rt_errf((err), (errlen), RT_EINVAL, __VA_ARGS__)

static rt_client_example_spec *spec_new(void)
{
    rt_client_example_spec *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    rtrain__v1__example_spec__init(&s->pb);
    rtrain__v1__image_spec__init(&s->img);
    s->pb.features = s->fp;
    return s;
}

static void spec_add(rt_client_example_spec *s, const char *key, Rtrain__V1__FeatureKind kind,
                     int ndim, const int64_t *dims, int seq)
{
    size_t i = s->pb.n_features++;
    Rtrain__V1__FeatureSpec *f = &s->f[i];
    rtrain__v1__feature_spec__init(f);
    snprintf(s->key[i], sizeof s->key[i], "%s", key);
    f->key = s->key[i];
    f->kind = kind;
    f->sequence = seq;
    for (int d = 0; d < ndim; d++)
        s->shape[i][d] = dims[d];
    f->n_shape = (size_t)ndim;
    f->shape = ndim ? s->shape[i] : NULL;
    s->fp[i] = f;
    if (seq)
        s->pb.sequence_example = 1;
}

int rt_client_example_spec_parse(const char *features, const char *label_key,
                                 rt_client_example_spec **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!features || !*features)
        return perr(err, errlen, "the feature spec is empty");
    rt_client_example_spec *s = spec_new();
    if (!s)
        return perr(err, errlen, "out of memory");
    const char *p = features;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char ent[128];
        if (n == 0 || n >= sizeof ent) {
            rt_client_example_spec_free(s);
            return perr(err, errlen, "feature spec entry '%.*s' is %s", (int)(n < 40 ? n : 40), p,
                        n ? "too long" : "empty");
        }
        memcpy(ent, p, n);
        ent[n] = 0;
        p += n + (end ? 1 : 0);
        char *colon = strchr(ent, ':');
        if (!colon || colon == ent) {
            rt_client_example_spec_free(s);
            return perr(err, errlen, "feature spec entry '%s' is not key:kind", ent);
        }
        *colon = 0;
        char *key = ent, *kind = colon + 1;
        int seq = key[0] == '@';
        if (seq)
            key++;
        int64_t dims[2];
        int ndim = 0;
        char *br = strchr(kind, '[');
        if (br) {
            char *q = br + 1;
            *br = 0;
            while (ndim < 2) {
                char *e;
                long long v = strtoll(q, &e, 10);
                if (e == q || v < 1) {
                    rt_client_example_spec_free(s);
                    return perr(err, errlen, "feature '%s': bad shape", key);
                }
                dims[ndim++] = v;
                q = e;
                if (*q == 'x') {
                    q++;
                    continue;
                }
                break;
            }
            if (strcmp(q, "]") != 0) {
                rt_client_example_spec_free(s);
                return perr(err, errlen, "feature '%s': shape is [N] or [NxM]", key);
            }
        }
        static const struct {
            const char *n;
            Rtrain__V1__FeatureKind k;
        } kinds[] = {
            {"int64", RTRAIN__V1__FEATURE_KIND__FEATURE_INT64},
            {"float", RTRAIN__V1__FEATURE_KIND__FEATURE_FLOAT},
            {"jpeg", RTRAIN__V1__FEATURE_KIND__FEATURE_JPEG},
            {"png", RTRAIN__V1__FEATURE_KIND__FEATURE_PNG},
            {"image", RTRAIN__V1__FEATURE_KIND__FEATURE_IMAGE},
        };
        int found = -1;
        for (int k = 0; k < 5; k++)
            if (strcmp(kind, kinds[k].n) == 0)
                found = k;
        if (found < 0 || s->pb.n_features == MAX_FEATURES || !*key || strlen(key) >= 64) {
            rt_client_example_spec_free(s);
            return perr(err, errlen,
                        found < 0 ? "feature '%s': kind is int64, float, jpeg, png or image"
                                  : "feature '%s': too many features or a bad key",
                        key);
        }
        spec_add(s, key, kinds[found].k, ndim, dims, seq);
    }
    /* Without label_key, the label is the key named "label" or ending in
     * "/label" (tf.train.Example's image/class/label); two such keys are
     * ambiguous and named, never guessed between. */
    const char *lk = label_key;
    if (!lk) {
        int cand = -1;
        for (size_t i = 0; i < s->pb.n_features; i++) {
            const char *k = s->key[i];
            const size_t kl = strlen(k);
            if (strcmp(k, "label") != 0 && !(kl > 6 && strcmp(k + kl - 6, "/label") == 0))
                continue;
            if (cand >= 0) {
                char a[64], b[64];
                snprintf(a, sizeof a, "%s", s->key[cand]);
                snprintf(b, sizeof b, "%s", k);
                rt_client_example_spec_free(s);
                return perr(err, errlen,
                            "the label is ambiguous: '%s' and '%s' both look like "
                            "one; name it (--label KEY)",
                            a, b);
            }
            cand = (int)i;
        }
        if (cand >= 0)
            lk = s->key[cand];
    }
    if (lk) {
        int hit = 0;
        for (size_t i = 0; i < s->pb.n_features; i++)
            if (strcmp(s->key[i], lk) == 0)
                s->f[i].label = hit = 1;
        if (!hit) {
            rt_client_example_spec_free(s);
            return perr(err, errlen, "the label '%s' is not in the feature spec", lk);
        }
    }
    *out = s;
    return 0;
}

void rt_client_example_spec_free(rt_client_example_spec *s) { free(s); }

void rt_client_example_spec_set_image(rt_client_example_spec *s, const rt_client_image_opts *o)
{
    if (!s || !o)
        return;
    rtrain__v1__image_spec__init(&s->img);
    s->img.height = (uint32_t)(o->height > 0 ? o->height : 0);
    s->img.width = (uint32_t)(o->width > 0 ? o->width : 0);
    s->img.channels = (uint32_t)(o->channels > 0 ? o->channels : 0);
    s->img.resize = (Rtrain__V1__ResizeMethod)o->resize;
    int nm = o->n_mean < 0 ? 0 : o->n_mean > 3 ? 3 : o->n_mean;
    int ns = o->n_std < 0 ? 0 : o->n_std > 3 ? 3 : o->n_std;
    memcpy(s->mean, o->mean, sizeof s->mean);
    memcpy(s->std, o->std, sizeof s->std);
    s->img.n_mean = (size_t)nm;
    s->img.mean = nm ? s->mean : NULL;
    s->img.n_std = (size_t)ns;
    s->img.std = ns ? s->std : NULL;
    s->img.crop_pad = (uint32_t)(o->crop_pad > 0 ? o->crop_pad : 0);
    s->img.flip = o->flip != 0;
    s->img.brightness = o->brightness;
    s->img.contrast = o->contrast;
    s->pb.image = &s->img;
}

int rt_client_example_spec_set_storage(rt_client_example_spec *s, int storage,
                                       uint64_t shuffle_buffer)
{
    if (!s || storage < RT_STORAGE_AUTO || storage > RT_STORAGE_STREAM)
        return RT_EINVAL;
    s->pb.storage = (Rtrain__V1__Storage)storage;
    s->pb.shuffle_buffer = shuffle_buffer;
    return 0;
}

void rt_client_example_spec_set_skip_bad(rt_client_example_spec *s, int skip)
{
    if (s)
        s->pb.on_bad_record = skip ? RTRAIN__V1__BAD_RECORD_POLICY__BAD_RECORD_SKIP
                                   : RTRAIN__V1__BAD_RECORD_POLICY__BAD_RECORD_FAIL;
}

void rt_client_example_spec_set_sequence(rt_client_example_spec *s, int on)
{
    if (s)
        s->pb.sequence_example = on != 0;
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcasecmp(s + a - b, suf) == 0;
}

int rt_client_upload_tfrecord(rt_client *c, const char *session, const char *name,
                              const char *const *paths, size_t n_paths,
                              const rt_client_example_spec *spec, rt_client_dataset *out)
{
    if (!c || !out || !spec)
        return RT_EINVAL;
    if (!paths || n_paths == 0 || n_paths > MAX_SHARDS) {
        rt__call_begin(c, RT__M_FIND_DATASET);
        return rt__call_end(
            c, rt__err(c, RT_EINVAL, "upload: 1..%d TFRecord files, got %zu", MAX_SHARDS, n_paths));
    }
    rt_client_upload_part *p = calloc(n_paths, sizeof *p);
    if (!p)
        return RT_ENOMEM;
    for (size_t i = 0; i < n_paths; i++) {
        p[i].role = RT_ROLE_BOTH;
        p[i].format = RT_FORMAT_TFRECORD;
        p[i].path = paths[i];
        p[i].compression = ends_with(paths[i], ".gz") ? 1 : ends_with(paths[i], ".zlib") ? 2 : 0;
        p[i].spec = spec;
    }
    int rc = rt_client_upload_parts(c, session, name, p, n_paths, out);
    free(p);
    return rc;
}

int rt_client_upload_tfrecord_glob(rt_client *c, const char *session, const char *name,
                                   const char *pattern, const rt_client_example_spec *spec,
                                   rt_client_dataset *out)
{
    if (!c || !pattern || !out)
        return RT_EINVAL;
    glob_t g;
    int gr = glob(pattern, 0, NULL, &g); /* sorted by name */
    if (gr != 0) {
        if (gr != GLOB_NOMATCH)
            globfree(&g);
        rt__call_begin(c, RT__M_FIND_DATASET);
        return rt__call_end(c, rt__err(c, RT_EIO, "no file matches %s", pattern));
    }
    int rc = rt_client_upload_tfrecord(c, session, name, (const char *const *)g.gl_pathv,
                                       g.gl_pathc, spec, out);
    globfree(&g);
    return rc;
}

/* ------------------------------------------------------- image folders */
typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static int buf_room(buf *b, size_t more)
{
    if (b->n + more <= b->cap)
        return 0;
    size_t nc = b->cap ? b->cap : 1 << 16;
    while (nc < b->n + more)
        nc *= 2;
    uint8_t *np = realloc(b->p, nc);
    if (!np)
        return -1;
    b->p = np;
    b->cap = nc;
    return 0;
}

/* tf.train.Example {features {feature {key: "image" value {bytes_list
 * {value: img}}} feature {key: "label" value {int64_list {value:
 * label}}}}}, framed as a TFRecord record, appended to b. */
static int append_record(buf *b, const uint8_t *img, size_t n, int64_t label)
{
    /* innermost first: sizes of each nested message */
    size_t bl = 1 + rt_varint_size(n) + n;                     /* BytesList */
    size_t fimg = 1 + rt_varint_size(bl) + bl;                 /* Feature */
    size_t eimg = 1 + 1 + 5 + 1 + rt_varint_size(fimg) + fimg; /* entry "image" */
    size_t lv = rt_varint_size((uint64_t)label);
    size_t il = 1 + rt_varint_size(lv) + lv; /* Int64List (packed) */
    size_t flab = 1 + rt_varint_size(il) + il;
    size_t elab = 1 + 1 + 5 + 1 + rt_varint_size(flab) + flab; /* entry "label" */
    size_t feats = 1 + rt_varint_size(eimg) + eimg + 1 + rt_varint_size(elab) + elab;
    size_t ex = 1 + rt_varint_size(feats) + feats; /* Example */
    if (buf_room(b, ex + 16) < 0)
        return -1;
    uint8_t *o = b->p + b->n + 12, *s = o;
    *o++ = 0x0a, o += rt_varint_put(o, feats); /* Example.features */
    *o++ = 0x0a, o += rt_varint_put(o, eimg);  /* Features.feature entry */
    *o++ = 0x0a, *o++ = 5, memcpy(o, "image", 5), o += 5;
    *o++ = 0x12, o += rt_varint_put(o, fimg);
    *o++ = 0x0a, o += rt_varint_put(o, bl); /* Feature.bytes_list */
    *o++ = 0x0a, o += rt_varint_put(o, n), memcpy(o, img, n), o += n;
    *o++ = 0x0a, o += rt_varint_put(o, elab);
    *o++ = 0x0a, *o++ = 5, memcpy(o, "label", 5), o += 5;
    *o++ = 0x12, o += rt_varint_put(o, flab);
    *o++ = 0x1a, o += rt_varint_put(o, il); /* Feature.int64_list */
    *o++ = 0x0a, o += rt_varint_put(o, lv), o += rt_varint_put(o, (uint64_t)label);
    size_t len = (size_t)(o - s);
    uint8_t *h = b->p + b->n;
    for (int i = 0; i < 8; i++)
        h[i] = (uint8_t)((uint64_t)len >> (8 * i));
    uint32_t lc = rt_crc32c_mask(rt_crc32c(0, h, 8)), dc = rt_crc32c_mask(rt_crc32c(0, s, len));
    for (int i = 0; i < 4; i++) {
        h[8 + i] = (uint8_t)(lc >> (8 * i));
        o[i] = (uint8_t)(dc >> (8 * i));
    }
    b->n += len + 16;
    return 0;
}

static int is_image_name(const char *n)
{
    return ends_with(n, ".jpg") || ends_with(n, ".jpeg") || ends_with(n, ".png");
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names in dir that pass keep (NULL: subdirectories). */
static int list_dir(rt_client *c, const char *dir, int want_dirs, char ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return rt__err(c, RT_EIO, "cannot open %s: %s", dir, strerror(errno));
    char **v = NULL;
    size_t cap = 0, k = 0;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        const int pn = snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (pn < 0 || (size_t)pn >= sizeof path)
            continue; /* a path past PATH_MAX cannot be opened either */
        struct stat st;
        if (stat(path, &st) < 0)
            continue;
        if (want_dirs ? !S_ISDIR(st.st_mode) : (!S_ISREG(st.st_mode) || !is_image_name(e->d_name)))
            continue;
        if (k == cap) {
            cap = cap ? cap * 2 : 64;
            char **nv = realloc(v, cap * sizeof *nv);
            if (!nv) {
                rc = rt__err(c, RT_ENOMEM, "out of memory listing %s", dir);
                break;
            }
            v = nv;
        }
        if (!(v[k] = strdup(e->d_name))) {
            rc = rt__err(c, RT_ENOMEM, "out of memory listing %s", dir);
            break;
        }
        k++;
    }
    closedir(d);
    if (rc < 0) {
        for (size_t i = 0; i < k; i++)
            free(v[i]);
        free(v);
        return rc;
    }
    if (k)
        qsort(v, k, sizeof *v, cmp_str);
    *out = v;
    *n = k;
    return 0;
}

static void free_list(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static int read_file(rt_client *c, const char *path, buf *tmp)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return rt__err(c, RT_EIO, "cannot open %s: %s", path, strerror(errno));
    tmp->n = 0;
    for (;;) {
        if (buf_room(tmp, 1 << 16) < 0) {
            fclose(f);
            return rt__err(c, RT_ENOMEM, "out of memory reading %s", path);
        }
        size_t r = fread(tmp->p + tmp->n, 1, tmp->cap - tmp->n, f);
        tmp->n += r;
        if (r == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    return bad ? rt__err(c, RT_EIO, "reading %s failed", path) : 0;
}

/* b inflated: a gzip stream of any number of members (as gzip and
 * TensorFlow write them) or a zlib stream; 0 or an RT_ code, the message
 * in err */
static int inflate_buf(buf *b, const char *path, char *err, size_t errlen)
{
    buf out = {0};
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 15 + 32) != Z_OK) /* +32: a gzip or zlib header */
        return rt_errf(err, errlen, RT_ENOMEM, "out of memory inflating %s", path);
    z.next_in = b->p;
    z.avail_in = (uInt)b->n;
    int rc = 0;
    for (;;) {
        if (buf_room(&out, 1 << 20) < 0) {
            rc = rt_errf(err, errlen, RT_ENOMEM, "out of memory inflating %s", path);
            break;
        }
        z.next_out = out.p + out.n;
        z.avail_out = (uInt)(out.cap - out.n);
        const int zr = inflate(&z, Z_NO_FLUSH);
        out.n = (size_t)(z.next_out - out.p);
        if (zr == Z_STREAM_END) {
            if (z.avail_in == 0)
                break;
            inflateReset(&z); /* the next member */
        } else if (zr == Z_BUF_ERROR && z.avail_in == 0) {
            rc = rt_errf(err, errlen, RT_EDATA, "%s: the compressed data is truncated", path);
            break;
        } else if (zr != Z_OK && zr != Z_BUF_ERROR) {
            rc = rt_errf(err, errlen, RT_EDATA, "%s: not gzip or zlib data (%s)", path,
                         z.msg ? z.msg : "inflate failed");
            break;
        }
    }
    inflateEnd(&z);
    if (rc < 0) {
        free(out.p);
        return rc;
    }
    free(b->p);
    *b = out;
    return 0;
}

static int compressed_name(const char *path)
{
    return ends_with(path, ".gz") || ends_with(path, ".zlib");
}

int rt_client_read_data_file(const char *path, void **data, size_t *len, char *err, size_t errlen)
{
    if (!path || !data || !len)
        return RT_EINVAL;
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return rt_errf(err, errlen, RT_EIO, "cannot open %s: %s", path, strerror(errno));
    buf b = {0};
    int rc = 0;
    for (;;) {
        if (buf_room(&b, 1 << 16) < 0) {
            rc = rt_errf(err, errlen, RT_ENOMEM, "out of memory reading %s", path);
            break;
        }
        size_t r = fread(b.p + b.n, 1, b.cap - b.n, f);
        b.n += r;
        if (r == 0)
            break;
    }
    if (rc == 0 && ferror(f))
        rc = rt_errf(err, errlen, RT_EIO, "reading %s failed", path);
    fclose(f);
    const int gzip = b.n >= 2 && b.p[0] == 0x1f && b.p[1] == 0x8b;
    if (rc == 0 && (gzip || compressed_name(path)))
        rc = inflate_buf(&b, path, err, errlen);
    if (rc < 0) {
        free(b.p);
        return rc;
    }
    *data = b.p;
    *len = b.n;
    return 0;
}

/* A chunked fit's rows (rt_client_fit_rows): TFRecord records, framed,
 * one after another in all; a chunk is the asked-for records as one
 * TFRecord part in memory, which the daemon reads as it reads the files. */
struct rt_client_record_rows {
    buf all, out;
    uint64_t *off; /* each record's frame in all */
    size_t n, cap;
    rt_client_example_spec *own; /* an image folder's */
    const rt_client_example_spec *spec;
};

static int note_record(rt_client_record_rows *r, uint64_t off)
{
    if (r->n == r->cap) {
        size_t nc = r->cap ? 2 * r->cap : 1024;
        uint64_t *o = realloc(r->off, (nc + 1) * sizeof *o);
        if (!o)
            return -1;
        r->off = o;
        r->cap = nc;
    }
    r->off[r->n++] = off;
    r->off[r->n] = r->all.n;
    return 0;
}

/* dir's class folders framed as records into rec (and noted in idx, when
 * not NULL) */
static int frame_folder(rt_client *c, const char *dir, buf *rec, rt_client_record_rows *idx)
{
    char **classes = NULL;
    size_t n_classes = 0;
    buf tmp = {0};
    int rc = list_dir(c, dir, 1, &classes, &n_classes);
    if (rc == 0 && n_classes == 0)
        rc = rt__err(c, RT_EDATA, "%s has no class subdirectories", dir);
    size_t n_images = 0;
    for (size_t k = 0; k < n_classes && rc == 0; k++) {
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", dir, classes[k]);
        char **files;
        size_t nf;
        if ((rc = list_dir(c, sub, 0, &files, &nf)) < 0)
            break;
        for (size_t i = 0; i < nf && rc == 0; i++) {
            char path[8192];
            snprintf(path, sizeof path, "%s/%s", sub, files[i]);
            const uint64_t at = rec->n;
            if ((rc = read_file(c, path, &tmp)) == 0 &&
                (append_record(rec, tmp.p, tmp.n, (int64_t)k) < 0 ||
                 (idx && note_record(idx, at) < 0)))
                rc = rt__err(c, RT_ENOMEM, "out of memory framing %s", path);
            n_images++;
        }
        free_list(files, nf);
    }
    if (rc == 0 && n_images == 0)
        rc = rt__err(c, RT_EDATA, "%s has no .jpg/.jpeg/.png files in its class folders", dir);
    free_list(classes, n_classes);
    free(tmp.p);
    return rc;
}

/* The spec of framed image records: image bytes and an int64 label. */
static int folder_spec(rt_client *c, const rt_client_image_opts *img, int skip_bad,
                       rt_client_example_spec **out)
{
    rt_client_example_spec *spec = *out = spec_new();
    if (!spec)
        return rt__err(c, RT_ENOMEM, "out of memory");
    spec_add(spec, "image", RTRAIN__V1__FEATURE_KIND__FEATURE_IMAGE, 0, NULL, 0);
    spec_add(spec, "label", RTRAIN__V1__FEATURE_KIND__FEATURE_INT64, 0, NULL, 0);
    spec->f[1].label = 1;
    rt_client_example_spec_set_image(spec, img);
    rt_client_example_spec_set_skip_bad(spec, skip_bad);
    if (rt_client_example_spec_set_storage(spec, img->storage, img->shuffle_buffer) < 0)
        return rt__err(c, RT_EINVAL, "storage %d is not auto, memory or stream", img->storage);
    return 0;
}

int rt_client_upload_image_folder(rt_client *c, const char *session, const char *name,
                                  const char *dir, const rt_client_image_opts *img, int skip_bad,
                                  rt_client_dataset *out)
{
    if (!c || !dir || !img || !out)
        return RT_EINVAL;
    buf rec = {0};
    rt_client_example_spec *spec = NULL;
    int rc = frame_folder(c, dir, &rec, NULL);
    if (rc == 0)
        rc = folder_spec(c, img, skip_bad, &spec);
    if (rc == 0) {
        rt_client_upload_part p;
        memset(&p, 0, sizeof p);
        p.role = RT_ROLE_BOTH;
        p.format = RT_FORMAT_TFRECORD;
        p.data = rec.p;
        p.nbytes = rec.n;
        p.spec = spec;
        rc = rt_client_upload_parts(c, session, name, &p, 1, out);
    } else {
        rt__call_begin(c, RT__M_FIND_DATASET);
        rc = rt__call_end(c, rc);
    }
    free(rec.p);
    rt_client_example_spec_free(spec);
    return rc;
}

static int records_upload(rt_client *c, const char *session, const char *name, const uint64_t *rows,
                          uint64_t k, rt_client_dataset *out, void *user)
{
    rt_client_record_rows *r = user;
    r->out.n = 0;
    for (uint64_t i = 0; i < k; i++) {
        const uint64_t a = r->off[rows[i]], len = r->off[rows[i] + 1] - a;
        if (buf_room(&r->out, len) < 0)
            return rt__err(c, RT_ENOMEM, "out of memory gathering records");
        memcpy(r->out.p + r->out.n, r->all.p + a, len);
        r->out.n += len;
    }
    rt_client_upload_part p;
    memset(&p, 0, sizeof p);
    p.role = RT_ROLE_BOTH;
    p.format = RT_FORMAT_TFRECORD;
    p.data = r->out.p;
    p.nbytes = r->out.n;
    p.spec = r->spec;
    return rt_client_upload_parts(c, session, name, &p, 1, out);
}

void rt_client_record_rows_free(rt_client_record_rows *r)
{
    if (!r)
        return;
    free(r->all.p);
    free(r->out.p);
    free(r->off);
    rt_client_example_spec_free(r->own);
    free(r);
}

static int records_done(rt_client *c, rt_client_record_rows *r, int rc, rt_client_record_rows **out,
                        rt_client_rows *rows)
{
    if (rc == 0 && r->n == 0)
        rc = rt__err(c, RT_EDATA, "no records");
    if (rc < 0) {
        rt_client_record_rows_free(r);
        return rc;
    }
    memset(rows, 0, sizeof *rows);
    rows->n = r->n;
    rows->bytes = r->all.n;
    for (size_t i = 0; i < r->n; i++)
        if (r->off[i + 1] - r->off[i] > rows->row_bytes)
            rows->row_bytes = r->off[i + 1] - r->off[i];
    rows->upload = records_upload;
    rows->user = r;
    *out = r;
    return 0;
}

int rt_client_tfrecord_rows(rt_client *c, const char *pattern, const rt_client_example_spec *spec,
                            rt_client_record_rows **out, rt_client_rows *rows)
{
    if (!c || !pattern || !spec || !out || !rows)
        return RT_EINVAL;
    *out = NULL;
    rt_client_record_rows *r = calloc(1, sizeof *r);
    if (!r)
        return rt__err(c, RT_ENOMEM, "out of memory");
    r->spec = spec;
    glob_t g;
    int gr = glob(pattern, 0, NULL, &g), rc = 0; /* sorted by name, as one upload */
    if (gr != 0) {
        if (gr != GLOB_NOMATCH)
            globfree(&g);
        return records_done(c, r, rt__err(c, RT_EIO, "no file matches %s", pattern), out, rows);
    }
    for (size_t i = 0; i < g.gl_pathc && rc == 0; i++) {
        const char *path = g.gl_pathv[i];
        buf f = {0};
        if (compressed_name(path)) { /* .gz, .zlib: inflated here */
            char err[512];
            void *d;
            size_t dn;
            if ((rc = rt_client_read_data_file(path, &d, &dn, err, sizeof err)) < 0) {
                rc = rt__err(c, rc, "%s", err);
                break;
            }
            f.p = d;
            f.n = f.cap = dn;
        } else if ((rc = read_file(c, path, &f)) < 0) {
            free(f.p);
            break;
        }
        /* each frame: u64 length, its masked CRC, the data, its CRC */
        for (size_t at = 0; at < f.n && rc == 0;) {
            uint64_t len = 0;
            for (int b = 0; b < 8 && at + 8 <= f.n; b++)
                len |= (uint64_t)f.p[at + b] << (8 * b);
            if (at + 8 > f.n || len > f.n - at - 8 || f.n - at - 8 - len < 8) {
                rc = rt__err(c, RT_EDATA,
                             "%s: a truncated record at byte %zu (a fit over one upload "
                             "needs whole records)",
                             path, at);
                break;
            }
            const uint64_t whole = 16 + len;
            if (buf_room(&r->all, whole) < 0 || note_record(r, r->all.n) < 0) {
                rc = rt__err(c, RT_ENOMEM, "out of memory reading %s", path);
                break;
            }
            memcpy(r->all.p + r->all.n, f.p + at, whole);
            r->all.n += whole;
            r->off[r->n] = r->all.n;
            at += whole;
        }
        free(f.p);
    }
    globfree(&g);
    return records_done(c, r, rc, out, rows);
}

int rt_client_image_folder_rows(rt_client *c, const char *dir, const rt_client_image_opts *img,
                                int skip_bad, rt_client_record_rows **out, rt_client_rows *rows)
{
    if (!c || !dir || !img || !out || !rows)
        return RT_EINVAL;
    *out = NULL;
    rt_client_record_rows *r = calloc(1, sizeof *r);
    if (!r)
        return rt__err(c, RT_ENOMEM, "out of memory");
    int rc = frame_folder(c, dir, &r->all, r);
    if (rc == 0)
        rc = folder_spec(c, img, skip_bad, &r->own);
    r->spec = r->own;
    return records_done(c, r, rc, out, rows);
}
