/* test_tfrecord.c - CRC32C, TFRecord framing and compression, Example /
 * SequenceExample parsing under a feature spec, JPEG/PNG decoding,
 * resizing and augmentation, and every kind of bad input.
 *
 * Usage: test_tfrecord GENERATED_DIR FIXTURE_DIR
 * (GENERATED_DIR is written by gen_tfrecord.py; FIXTURE_DIR holds the
 * TFRecord files written by TensorFlow, see fixtures/SOURCES.md) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_crc32c.h"
#include "rt_example.h"
#include "rt_image.h"
#include "rt_inflate.h"
#include "rt_tfrecord.h"
#include "rtrain/rt_error.h"
#include "tf_example.pb-c.h"

#include "../lib/rt_check.h"

#include <zlib.h>

static const char *gen_dir, *fix_dir;

static uint8_t *slurp(const char *dir, const char *name, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    REQUIRE(b && fread(b, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* ------------------------------------------------------------------ crc */
static void test_crc(void)
{
    /* RFC 3720 (iSCSI) B.4 vectors and the standard check value */
    uint8_t z[32], ff[32], inc[32], dec[32];
    memset(z, 0, 32);
    memset(ff, 0xff, 32);
    for (int i = 0; i < 32; i++) {
        inc[i] = (uint8_t)i;
        dec[i] = (uint8_t)(31 - i);
    }
    uint32_t (*fns[2])(uint32_t, const void *, size_t) = {rt_crc32c_sw, rt_crc32c};
    for (int k = 0; k < 2; k++) {
        CHECK(fns[k](0, "123456789", 9) == 0xE3069283u);
        CHECK(fns[k](0, z, 32) == 0x8A9136AAu);
        CHECK(fns[k](0, ff, 32) == 0x62A8AB43u);
        CHECK(fns[k](0, inc, 32) == 0x46DD794Eu);
        CHECK(fns[k](0, dec, 32) == 0x113FDB5Cu);
        CHECK(fns[k](0, NULL, 0) == 0);
        /* streaming equals one shot */
        CHECK(fns[k](fns[k](0, "1234", 4), "56789", 5) == 0xE3069283u);
    }
    printf("crc32c: hardware %s\n", rt_crc32c_has_hw() ? "SSE4.2" : "absent (table only)");
    if (rt_crc32c_has_hw()) {
        /* hardware and table agree at every length and alignment */
        uint8_t buf[600];
        uint64_t s = 88172645463325252ull;
        for (size_t i = 0; i < sizeof buf; i++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            buf[i] = (uint8_t)s;
        }
        for (size_t off = 0; off < 9; off++)
            for (size_t n = 0; n + off <= sizeof buf; n += (n < 40 ? 1 : 37))
                CHECK(rt_crc32c_hw(7, buf + off, n) == rt_crc32c_sw(7, buf + off, n));
    }
    for (uint32_t v = 0; v < 5000000; v += 9973)
        CHECK(rt_crc32c_unmask(rt_crc32c_mask(v)) == v);
    /* a framed record reads back */
    uint8_t fr[64];
    size_t n = rt_tfr_frame("hello", 5, fr);
    CHECK(n == 21);
    rt_tfr_reader r;
    rt_tfr_reader_init(&r, fr, n);
    const uint8_t *rec;
    size_t rl;
    char err[256];
    CHECK(rt_tfr_next(&r, &rec, &rl, err, sizeof err) == 1 && rl == 5 && !memcmp(rec, "hello", 5));
    CHECK(rt_tfr_next(&r, &rec, &rl, err, sizeof err) == 0);
}

/* ------------------------------------------------------------- framing */
static int count_records(const uint8_t *b, size_t n, char *err, size_t errlen, int *fatal)
{
    rt_tfr_reader r;
    rt_tfr_reader_init(&r, b, n);
    const uint8_t *rec;
    size_t rl;
    int rc, cnt = 0;
    while ((rc = rt_tfr_next(&r, &rec, &rl, err, errlen)) > 0)
        cnt++;
    *fatal = r.fatal;
    return rc < 0 ? rc : cnt;
}

/* A whole shard through the daemon's inflater, as rt_example_build takes it. */
static int tfr_inflate(const uint8_t *in, size_t len, rt_zfmt fmt, uint64_t max, uint8_t **out,
                       size_t *out_len, char *err, size_t errlen)
{
    const rt_zlimits lim = {max, "dataset limit", "--max-dataset-bytes", 0};
    const rt_zspan sp = {in, len};
    return rt_inflate_all(fmt, &sp, 1, &lim, "shard 0", NULL, NULL, out, out_len, err, errlen);
}

static void test_framing(void)
{
    char err[256];
    int fatal;
    size_t n, gn, zn;
    uint8_t *raw = slurp(gen_dir, "num.tfrecord", &n);
    CHECK(count_records(raw, n, err, sizeof err, &fatal) == 100);

    uint8_t *gz = slurp(gen_dir, "num.tfrecord.gz", &gn);
    uint8_t *zl = slurp(gen_dir, "num.tfrecord.zlib", &zn);
    uint8_t *out;
    size_t on;
    CHECK(tfr_inflate(gz, gn, RT_Z_GZIP, 1 << 20, &out, &on, err, sizeof err) == 0);
    CHECK(on == n && memcmp(out, raw, n) == 0);
    free(out);
    CHECK(tfr_inflate(zl, zn, RT_Z_ZLIB, 1 << 20, &out, &on, err, sizeof err) == 0);
    CHECK(on == n && memcmp(out, raw, n) == 0);
    free(out);
    /* inflating past the cap stops before allocating more */
    CHECK(tfr_inflate(gz, gn, RT_Z_GZIP, 1000, &out, &on, err, sizeof err) == RT_ETOOBIG);
    CHECK(strstr(err, "dataset limit of 1000 bytes (--max-dataset-bytes)") != NULL);
    /* the wrong container, truncation, corruption */
    CHECK(tfr_inflate(gz, gn, RT_Z_ZLIB, 1 << 20, &out, &on, err, sizeof err) == RT_EDATA);
    CHECK(tfr_inflate(gz, gn / 2, RT_Z_GZIP, 1 << 20, &out, &on, err, sizeof err) == RT_EDATA);
    CHECK(strstr(err, "truncated") != NULL);
    zl[zn / 2] ^= 0x55;
    CHECK(tfr_inflate(zl, zn, RT_Z_ZLIB, 1 << 20, &out, &on, err, sizeof err) == RT_EDATA);
    /* two gzip members back to back are one file */
    uint8_t *two = malloc(2 * gn);
    memcpy(two, gz, gn);
    memcpy(two + gn, gz, gn);
    CHECK(tfr_inflate(two, 2 * gn, RT_Z_GZIP, 1 << 20, &out, &on, err, sizeof err) == 0);
    CHECK(on == 2 * n && count_records(out, on, err, sizeof err, &fatal) == 200);
    free(out);
    free(two);

    size_t bn;
    uint8_t *b = slurp(gen_dir, "bad_datacrc.tfrecord", &bn);
    CHECK(count_records(b, bn, err, sizeof err, &fatal) == RT_ECHECKSUM && !fatal);
    CHECK(strstr(err, "record 3") && strstr(err, "data CRC"));
    free(b);
    b = slurp(gen_dir, "bad_lencrc.tfrecord", &bn);
    CHECK(count_records(b, bn, err, sizeof err, &fatal) == RT_ECHECKSUM && fatal);
    CHECK(strstr(err, "record 3") && strstr(err, "length CRC"));
    free(b);
    b = slurp(gen_dir, "bad_truncated.tfrecord", &bn);
    CHECK(count_records(b, bn, err, sizeof err, &fatal) == RT_ETRUNCATED && fatal);
    CHECK(strstr(err, "record 3") != NULL);
    /* every truncation point of a file is an error or a clean end, never a crash */
    for (size_t cut = 0; cut < bn; cut++) {
        int c = count_records(b, cut, err, sizeof err, &fatal);
        CHECK(c >= 0 || c == RT_ETRUNCATED);
    }
    free(b);
    free(raw);
    free(gz);
    free(zl);
}

/* --------------------------------------------------------------- dataset */
static rt_example_spec num_spec(void)
{
    rt_example_spec s;
    memset(&s, 0, sizeof s);
    s.n = 2;
    s.f[0] = (rt_feat_spec){.key = "x", .kind = RT_FEAT_FLOAT, .ndim = 1, .dims = {4}};
    s.f[1] = (rt_feat_spec){.key = "label", .kind = RT_FEAT_INT64, .label = 1};
    return s;
}

static rt_dataset *new_ds(void)
{
    rt_dataset *ds = calloc(1, sizeof *ds);
    pthread_mutex_init(&ds->mu, NULL);
    ds->refs = 1;
    return ds;
}

static int build(const rt_example_spec *s, const char *dir, const char *name,
                 rt_tfr_compression c, rt_dataset **out, char *err, size_t errlen)
{
    size_t n;
    uint8_t *b = slurp(dir, name, &n);
    rt_tfr_shard sh = {.data = b, .len = n, .compression = c};
    rt_dataset *ds = new_ds();
    int rc = rt_example_build(s, &sh, 1, 1 << 28, ds, err, errlen);
    free(b);
    if (rc < 0) {
        rt_dataset_release(ds);
        ds = NULL;
    }
    *out = ds;
    return rc;
}

static void test_examples(void)
{
    char err[256];
    rt_example_spec s = num_spec();
    rt_dataset *a, *g, *z;
    REQUIRE(build(&s, gen_dir, "num.tfrecord", RT_TFR_NONE, &a, err, sizeof err) == 0);
    CHECK(a->n == 100 && a->x_ndim == 1 && a->x_dims[0] == 4 && a->y_dtype == RT_I32);
    CHECK(a->y_ndim == 0 && a->skipped == 0);
    for (int64_t i = 0; i < a->n; i++) {
        const float *x = a->x + i * 4;
        int am = 0;
        for (int k = 1; k < 4; k++)
            if (x[k] > x[am])
                am = k;
        CHECK(((int32_t *)a->y)[i] == am);
    }
    CHECK(build(&s, gen_dir, "num.tfrecord.gz", RT_TFR_GZIP, &g, err, sizeof err) == 0);
    CHECK(build(&s, gen_dir, "num.tfrecord.zlib", RT_TFR_ZLIB, &z, err, sizeof err) == 0);
    CHECK(g && g->n == 100 && !memcmp(g->x, a->x, 400 * sizeof(float)));
    CHECK(z && z->n == 100 && !memcmp(z->x, a->x, 400 * sizeof(float)));
    rt_dataset_release(g);
    rt_dataset_release(z);

    /* two shards equal the single file */
    size_t n0, n1;
    uint8_t *b0 = slurp(gen_dir, "num-00000-of-00002.tfrecord", &n0);
    uint8_t *b1 = slurp(gen_dir, "num-00001-of-00002.tfrecord", &n1);
    rt_tfr_shard sh[2] = {{b0, n0, RT_TFR_NONE}, {b1, n1, RT_TFR_NONE}};
    rt_dataset *two = new_ds();
    CHECK(rt_example_build(&s, sh, 2, 1 << 28, two, err, sizeof err) == 0);
    CHECK(two->n == 100 && !memcmp(two->x, a->x, 400 * sizeof(float)) &&
          !memcmp(two->y, a->y, 400));
    rt_dataset_release(two);
    /* the decoded size is checked before allocating */
    two = new_ds();
    CHECK(rt_example_build(&s, sh, 2, 1000, two, err, sizeof err) == RT_ETOOBIG);
    CHECK(strstr(err, "100 records decode to 2000 bytes") != NULL);
    rt_dataset_release(two);
    free(b0);
    free(b1);

    /* float label, features flattened and concatenated */
    rt_example_spec s2 = num_spec();
    s2.n = 2;
    s2.f[0] = (rt_feat_spec){.key = "label", .kind = RT_FEAT_INT64};
    s2.f[1] = (rt_feat_spec){.key = "x", .kind = RT_FEAT_FLOAT, .ndim = 1, .dims = {4}};
    rt_dataset *c;
    CHECK(build(&s2, gen_dir, "num.tfrecord", RT_TFR_NONE, &c, err, sizeof err) == 0);
    CHECK(c && c->x_ndim == 1 && c->x_dims[0] == 5 && c->y == NULL);
    CHECK(c && c->x[0] == (float)((int32_t *)a->y)[0] && c->x[1] == a->x[0]);
    rt_dataset_release(c);
    rt_dataset_release(a);

    /* bad records: fail names the record and the feature; skip counts */
    static const struct { const char *file; int rc; const char *msg; int64_t kept; } bad[] = {
        {"bad_datacrc.tfrecord", RT_ECHECKSUM, "record 3 at byte", 5},
        {"bad_lencrc.tfrecord", RT_ECHECKSUM, "length CRC", 3},
        {"bad_truncated.tfrecord", RT_ETRUNCATED, "record 3", 3},
        {"bad_type.tfrecord", RT_EDTYPE, "record 3: feature 'x' is int64, the spec says float", 5},
        {"bad_count.tfrecord", RT_ESHAPE, "record 3: feature 'x' has 2 values, the spec says 4", 5},
        {"bad_missing.tfrecord", RT_EDATA, "record 3: feature 'label' is missing", 5},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rt_dataset *d;
        s.skip_bad = 0;
        int rc = build(&s, gen_dir, bad[i].file, RT_TFR_NONE, &d, err, sizeof err);
        if (rc != bad[i].rc || !strstr(err, bad[i].msg))
            fprintf(stderr, "%s: rc %d, err '%s'\n", bad[i].file, rc, err);
        CHECK(rc == bad[i].rc && strstr(err, bad[i].msg));
        CHECK(strstr(err, "shard 0") != NULL);
        s.skip_bad = 1;
        rc = build(&s, gen_dir, bad[i].file, RT_TFR_NONE, &d, err, sizeof err);
        CHECK(rc == 0 && d && d->n == bad[i].kept && d->skipped == 1);
        CHECK(d && strstr(d->skip_msg, bad[i].msg));
        rt_dataset_release(d);
    }
    /* spec mistakes */
    rt_example_spec e = num_spec();
    e.f[1].label = 0;
    e.f[0].label = 1;
    e.n = 1;
    CHECK(rt_example_spec_check(&e, err, sizeof err) == RT_EINVAL); /* only a label */
    e = num_spec();
    strcpy(e.f[1].key, "x");
    CHECK(rt_example_spec_check(&e, err, sizeof err) == RT_EINVAL && strstr(err, "twice"));
    e = num_spec();
    e.f[0].kind = RT_FEAT_JPEG;
    CHECK(rt_example_spec_check(&e, err, sizeof err) == RT_EINVAL && strstr(err, "input size"));
    /* SequenceExamples read as Examples find no features */
    rt_dataset *d;
    CHECK(build(&s, gen_dir, "seq.tfrecord", RT_TFR_NONE, &d, err, sizeof err) == RT_EDATA);
}

static void test_sequence(void)
{
    char err[256];
    rt_example_spec s;
    memset(&s, 0, sizeof s);
    s.sequence_example = 1;
    s.n = 2;
    s.f[0] = (rt_feat_spec){.key = "frames", .kind = RT_FEAT_FLOAT, .sequence = 1, .ndim = 2,
                            .dims = {5, 2}};
    s.f[1] = (rt_feat_spec){.key = "label", .kind = RT_FEAT_INT64, .label = 1};
    rt_dataset *d;
    REQUIRE(build(&s, gen_dir, "seq.tfrecord", RT_TFR_NONE, &d, err, sizeof err) == 0);
    CHECK(d->n == 20 && d->x_ndim == 2 && d->x_dims[0] == 5 && d->x_dims[1] == 2);
    for (int i = 0; i < 20; i++) {
        CHECK(((int32_t *)d->y)[i] == i % 3);
        for (int t = 0; t < 5; t++) {
            CHECK(d->x[i * 10 + t * 2] == (float)(i + t));
            CHECK(d->x[i * 10 + t * 2 + 1] == (float)-t);
        }
    }
    rt_dataset_release(d);
    s.f[0].dims[0] = 6;
    CHECK(build(&s, gen_dir, "seq.tfrecord", RT_TFR_NONE, &d, err, sizeof err) == RT_ESHAPE);
    CHECK(strstr(err, "record 0: feature list 'frames' has 5 steps, the spec says 6") != NULL);
}

/* ---------------------------------------------------------------- images */
static void test_images(void)
{
    char err[256];
    size_t n;
    uint8_t *png = slurp(gen_dir, "gradient.png", &n);
    uint8_t *px;
    int w, h;
    REQUIRE(rt_image_decode(png, n, RT_IMG_ANY, 3, 1 << 20, &px, &w, &h, err, sizeof err) == 0);
    CHECK(w == 8 && h == 4);
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 8; x++) {
            const uint8_t *p = px + (y * 8 + x) * 3;
            CHECK(p[0] == x * 32 && p[1] == y * 64 && p[2] == 255 - x * 32);
        }
    /* area down by 2 is the 2x2 block mean; bilinear at scale 1 is exact */
    uint8_t half[4 * 2 * 3];
    rt_image_resize(px, 8, 4, 3, half, 4, 2, RT_RESIZE_AREA);
    for (int y = 0; y < 2; y++)
        for (int x = 0; x < 4; x++)
            for (int c = 0; c < 3; c++) {
                int s = 0;
                for (int dy = 0; dy < 2; dy++)
                    for (int dx = 0; dx < 2; dx++)
                        s += px[((2 * y + dy) * 8 + 2 * x + dx) * 3 + c];
                CHECK(half[(y * 4 + x) * 3 + c] == (int)floor(s / 4.0 + 0.5));
            }
    /* bilinear up by 2 with half-pixel centres: output 2k+1 sits 3/4 of
     * the way from source k to k+1 */
    uint8_t row[2] = {0, 200}, up[4];
    rt_image_resize(row, 2, 1, 1, up, 4, 1, RT_RESIZE_BILINEAR);
    CHECK(up[0] == 0 && up[1] == 50 && up[2] == 150 && up[3] == 200);
    /* gray conversion */
    uint8_t *g;
    CHECK(rt_image_decode(png, n, RT_IMG_PNG, 1, 1 << 20, &g, &w, &h, err, sizeof err) == 0);
    free(g);
    /* a PNG is not a JPEG */
    CHECK(rt_image_decode(png, n, RT_IMG_JPEG, 3, 1 << 20, &g, &w, &h, err, sizeof err) == RT_EDATA);
    free(png);

    uint8_t *jpg = slurp(gen_dir, "gradient.jpg", &n);
    uint8_t *jx;
    REQUIRE(rt_image_decode(jpg, n, RT_IMG_ANY, 3, 1 << 20, &jx, &w, &h, err, sizeof err) == 0);
    int maxd = 0;
    for (int i = 0; i < 8 * 4 * 3; i++)
        maxd = abs(jx[i] - px[i]) > maxd ? abs(jx[i] - px[i]) : maxd;
    CHECK(maxd <= 8); /* quality 100, 4:4:4 */
    /* truncated JPEG: an error, not grey pixels */
    CHECK(rt_image_decode(jpg, n / 2, RT_IMG_ANY, 3, 1 << 20, &g, &w, &h, err, sizeof err) == RT_EDATA);
    free(jx);
    free(jpg);
    free(px);

    /* bombs are refused from the header */
    uint8_t *bomb = slurp(gen_dir, "bomb.png", &n);
    CHECK(rt_image_decode(bomb, n, RT_IMG_ANY, 3, RT_IMAGE_MAX_VALUES, &g, &w, &h, err,
                          sizeof err) == RT_ETOOBIG);
    CHECK(strstr(err, "100000 x 100000") != NULL && g == NULL);
    free(bomb);
    bomb = slurp(gen_dir, "bomb.jpg", &n);
    CHECK(rt_image_decode(bomb, n, RT_IMG_ANY, 3, RT_IMAGE_MAX_VALUES, &g, &w, &h, err,
                          sizeof err) == RT_ETOOBIG);
    CHECK(strstr(err, "65500 x 65500") != NULL);
    free(bomb);
    /* garbage of every length up to a header: an error, never a crash */
    uint8_t junk[64];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 37 + 11);
    junk[0] = 0xFF, junk[1] = 0xD8, junk[2] = 0xFF;
    for (size_t k = 0; k <= sizeof junk; k++)
        CHECK(rt_image_decode(junk, k, RT_IMG_ANY, 3, 1 << 20, &g, &w, &h, err, sizeof err) < 0);

    /* an image dataset: 16x16 JPEG and PNG records resized to 8x8 */
    rt_example_spec s;
    memset(&s, 0, sizeof s);
    s.n = 2;
    s.f[0] = (rt_feat_spec){.key = "image", .kind = RT_FEAT_IMAGE};
    s.f[1] = (rt_feat_spec){.key = "label", .kind = RT_FEAT_INT64, .label = 1};
    s.img = (rt_image_spec){.h = 8, .w = 8, .c = 3, .mean = {0.5f, 0.5f, 0.5f},
                            .std = {0.25f, 0.25f, 0.25f}};
    rt_dataset *d;
    REQUIRE(build(&s, gen_dir, "img.tfrecord", RT_TFR_NONE, &d, err, sizeof err) == 0);
    CHECK(d->n == 60 && d->x_ndim == 3 && d->x_dims[0] == 8 && d->x_dims[2] == 3);
    CHECK(d->img == NULL); /* no augmentation: nothing extra kept */
    for (int64_t i = 0; i < d->n * 192; i++)
        CHECK(d->x[i] >= -2.0f && d->x[i] <= 2.0f);
    rt_dataset_release(d);

    /* augmentation: reproducible per (seed, epoch), different across epochs */
    s.img.flip = 1;
    s.img.crop_pad = 2;
    s.img.brightness = 0.2f;
    s.img.contrast = 0.3f;
    REQUIRE(build(&s, gen_dir, "img.tfrecord", RT_TFR_NONE, &d, err, sizeof err) == 0);
    REQUIRE(d->img != NULL);
    size_t fl = (size_t)d->n * 192;
    float *e1 = malloc(fl * 4), *e1b = malloc(fl * 4), *e2 = malloc(fl * 4);
    CHECK(rt_dataset_augment(d, 42, 1, e1) == 0);
    CHECK(rt_dataset_augment(d, 42, 1, e1b) == 0);
    CHECK(rt_dataset_augment(d, 42, 2, e2) == 0);
    CHECK(memcmp(e1, e1b, fl * 4) == 0);
    CHECK(memcmp(e1, e2, fl * 4) != 0);
    int flips = 0;
    for (int64_t i = 0; i < d->n; i++) {
        rt_image_aug a;
        rt_image_aug_draw(&d->img_spec, 42, 1, (uint64_t)i, &a);
        flips += a.flip;
        CHECK(a.dx >= -2 && a.dx <= 2 && a.dy >= -2 && a.dy <= 2);
        CHECK(fabsf(a.bright) <= 0.2f && a.contrast >= 0.7f && a.contrast <= 1.3f);
    }
    CHECK(flips > 10 && flips < 50);
    /* a flip alone mirrors the stored image exactly */
    rt_image_spec only_flip = d->img_spec;
    only_flip.crop_pad = 0;
    only_flip.brightness = only_flip.contrast = 0;
    rt_image_aug fa = {.flip = 1, .contrast = 1.0f};
    float plain[192], mir[192];
    rt_image_to_input(&only_flip, d->img, plain, NULL);
    rt_image_to_input(&only_flip, d->img, mir, &fa);
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 8; x++)
            for (int c = 0; c < 3; c++)
                CHECK(mir[(y * 8 + x) * 3 + c] == plain[(y * 8 + 7 - x) * 3 + c]);
    free(e1);
    free(e1b);
    free(e2);
    rt_dataset_release(d);

    /* bad images */
    s.img.flip = 0, s.img.crop_pad = 0, s.img.brightness = s.img.contrast = 0;
    static const struct { const char *file; int rc; const char *msg; } bad[] = {
        {"bad_jpeg_truncated.tfrecord", RT_EDATA, "record 3: feature 'image': JPEG"},
        {"bad_jpeg_junk.tfrecord", RT_EDATA, "record 3: feature 'image': JPEG"},
        {"bad_bomb.tfrecord", RT_ETOOBIG, "record 3: feature 'image': PNG declares 100000 x 100000"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s.skip_bad = 0;
        int rc = build(&s, gen_dir, bad[i].file, RT_TFR_NONE, &d, err, sizeof err);
        if (rc != bad[i].rc || !strstr(err, bad[i].msg))
            fprintf(stderr, "%s: rc %d, err '%s'\n", bad[i].file, rc, err);
        CHECK(rc == bad[i].rc && strstr(err, bad[i].msg));
        s.skip_bad = 1;
        rc = build(&s, gen_dir, bad[i].file, RT_TFR_NONE, &d, err, sizeof err);
        CHECK(rc == 0 && d && d->n == 5 && d->skipped == 1);
        rt_dataset_release(d);
    }
    /* an image key that holds int64 */
    s.skip_bad = 0;
    strcpy(s.f[0].key, "label");
    strcpy(s.f[1].key, "image");
    s.f[1].kind = RT_FEAT_INT64;
    CHECK(build(&s, gen_dir, "img.tfrecord", RT_TFR_NONE, &d, err, sizeof err) == RT_EDTYPE);
    CHECK(strstr(err, "record 0: feature 'label' is int64, the spec says image") != NULL);
}

/* ------------------------------------------- files written by TensorFlow */

/* The 42 records of the tutorial file, decoded by a reader written apart
 * from rtrain (Python, struct and a varint loop): feature0 and feature1 of
 * each record in order, and feature3's first four floats' bits. */
static const char TUT_F0[] = "011000110101111101100000110111010111110110";
static const char TUT_F1[] = "243100110122304324223041411424332011232031";
static const uint32_t TUT_F3_BITS[4] = {0xbf8fd70f, 0x3f65eda3, 0x3eda22e8, 0xbe83a032};
/* TensorFlow's tutorial writes feature2 = strings[feature1] */
static const char *const TUT_NAMES[5] = {"cat", "dog", "chicken", "horse", "goat"};

/* the feature of an Example by key, NULL if absent */
static Tensorflow__Feature *feature(Tensorflow__Example *ex, const char *key)
{
    for (size_t i = 0; ex->features && i < ex->features->n_feature; i++)
        if (!strcmp(ex->features->feature[i]->key, key))
            return ex->features->feature[i]->value;
    return NULL;
}

static void test_tensorflow_files(void)
{
    char err[256];
    /* TensorFlow's TFRecord tutorial data: feature0 int64 (bool), feature1
     * int64 in [0, 5), feature2 bytes, feature3 float; 42 records */
    rt_example_spec s;
    memset(&s, 0, sizeof s);
    s.n = 3;
    s.f[0] = (rt_feat_spec){.key = "feature0", .kind = RT_FEAT_INT64};
    s.f[1] = (rt_feat_spec){.key = "feature3", .kind = RT_FEAT_FLOAT};
    s.f[2] = (rt_feat_spec){.key = "feature1", .kind = RT_FEAT_INT64, .label = 1};
    rt_dataset *d;
    REQUIRE(build(&s, fix_dir, "tf_tutorial.tfrecord", RT_TFR_NONE, &d, err, sizeof err) == 0);
    REQUIRE(d->n == 42 && d->x_dims[0] == 2);
    /* Each record against the known values, and against protobuf-c's
     * decode of the same record (tf_example.proto): the data set holds
     * record i's feature0 and feature3 as x[i] and feature1 as y[i], and
     * every record keeps the tutorial's feature2 = strings[feature1]. */
    size_t n;
    uint8_t *b = slurp(fix_dir, "tf_tutorial.tfrecord", &n);
    rt_tfr_reader r;
    rt_tfr_reader_init(&r, b, n);
    const uint8_t *rec;
    size_t rl;
    int64_t i = 0, same = 0, names_ok = 0;
    while (i < d->n && rt_tfr_next(&r, &rec, &rl, err, sizeof err) > 0) {
        Tensorflow__Example *ex = tensorflow__example__unpack(NULL, rl, rec);
        REQUIRE(ex);
        Tensorflow__Feature *f0 = feature(ex, "feature0"), *f1 = feature(ex, "feature1"),
                            *f2 = feature(ex, "feature2"), *f3 = feature(ex, "feature3");
        REQUIRE(f0 && f0->int64_list && f0->int64_list->n_value == 1 && f1 && f1->int64_list &&
                f1->int64_list->n_value == 1 && f2 && f2->bytes_list &&
                f2->bytes_list->n_value == 1 && f3 && f3->float_list &&
                f3->float_list->n_value == 1);
        const int64_t v0 = f0->int64_list->value[0], v1 = f1->int64_list->value[0];
        const float v3 = f3->float_list->value[0];
        const int32_t label = ((int32_t *)d->y)[i];
        CHECK(v0 == TUT_F0[i] - '0' && v1 == TUT_F1[i] - '0');
        same += d->x[i * 2] == (float)v0 && memcmp(&d->x[i * 2 + 1], &v3, 4) == 0 && label == v1;
        if (i < 4) {
            uint32_t bits;
            memcpy(&bits, &d->x[i * 2 + 1], 4);
            CHECK(bits == TUT_F3_BITS[i]);
        }
        const ProtobufCBinaryData *nm = &f2->bytes_list->value[0];
        names_ok += v1 >= 0 && v1 < 5 && nm->len == strlen(TUT_NAMES[v1]) &&
                    memcmp(nm->data, TUT_NAMES[v1], nm->len) == 0;
        tensorflow__example__free_unpacked(ex, NULL);
        i++;
    }
    CHECK(i == 42 && same == 42 && names_ok == 42 && r.off == n);
    free(b);
    rt_dataset_release(d);
    /* feature2 is bytes, not int64 */
    s.f[0].key[7] = '2';
    CHECK(build(&s, fix_dir, "tf_tutorial.tfrecord", RT_TFR_NONE, &d, err, sizeof err) == RT_EDTYPE);
    CHECK(strstr(err, "record 0: feature 'feature2' is bytes, the spec says int64") != NULL);

    /* The two JPEG records: height, width, depth and label as known (read
     * apart with PIL: 213x320 RGB label 0, 239x194 grayscale label 1), the
     * image decodes to its record's size, and its mean pixel per channel
     * is PIL's to within 0.5 (libjpeg versions may differ by a unit). */
    static const struct {
        int h, w, depth, label;
        double mean[3];
    } known[2] = {
        {213, 320, 3, 0, {166.0133, 169.0607, 173.8699}},
        {239, 194, 1, 1, {166.7764, 166.7764, 166.7764}},
    };
    b = slurp(fix_dir, "tf_images.tfrecord", &n);
    rt_tfr_reader_init(&r, b, n);
    int cnt = 0;
    while (rt_tfr_next(&r, &rec, &rl, err, sizeof err) > 0) {
        Tensorflow__Example *ex = tensorflow__example__unpack(NULL, rl, rec);
        REQUIRE(ex && ex->features && cnt < 2);
        Tensorflow__Feature *fh = feature(ex, "height"), *fw = feature(ex, "width"),
                            *fd = feature(ex, "depth"), *fl = feature(ex, "label"),
                            *fi = feature(ex, "image_raw");
        REQUIRE(fh && fh->int64_list && fw && fw->int64_list && fd && fd->int64_list && fl &&
                fl->int64_list && fi && fi->bytes_list && fi->bytes_list->n_value == 1);
        CHECK(fh->int64_list->value[0] == known[cnt].h && fw->int64_list->value[0] == known[cnt].w &&
              fd->int64_list->value[0] == known[cnt].depth &&
              fl->int64_list->value[0] == known[cnt].label);
        const ProtobufCBinaryData *img = &fi->bytes_list->value[0];
        uint8_t *px;
        int w, h;
        CHECK(rt_image_decode(img->data, img->len, RT_IMG_JPEG, 3, RT_IMAGE_MAX_VALUES, &px, &w,
                              &h, err, sizeof err) == 0);
        CHECK(w == known[cnt].w && h == known[cnt].h);
        for (int c = 0; c < 3 && w == known[cnt].w && h == known[cnt].h; c++) {
            double sum = 0;
            for (int64_t p = 0; p < (int64_t)w * h; p++)
                sum += px[p * 3 + c];
            const double mean = sum / ((double)w * h);
            if (fabs(mean - known[cnt].mean[c]) > 0.5) {
                fprintf(stderr, "image %d channel %d: mean %.4f, PIL %.4f\n", cnt, c, mean,
                        known[cnt].mean[c]);
                failures++;
            }
        }
        free(px);
        tensorflow__example__free_unpacked(ex, NULL);
        cnt++;
    }
    CHECK(cnt == 2 && r.off == n);
    free(b);
    /* the same records as a data set: their labels, in order */
    memset(&s, 0, sizeof s);
    s.n = 2;
    s.f[0] = (rt_feat_spec){.key = "image_raw", .kind = RT_FEAT_JPEG};
    s.f[1] = (rt_feat_spec){.key = "label", .kind = RT_FEAT_INT64, .label = 1};
    s.img = (rt_image_spec){.h = 32, .w = 32, .c = 3, .std = {1, 1, 1}};
    CHECK(build(&s, fix_dir, "tf_images.tfrecord", RT_TFR_NONE, &d, err, sizeof err) == 0);
    CHECK(d && d->n == 2 && ((int32_t *)d->y)[0] == 0 && ((int32_t *)d->y)[1] == 1);
    rt_dataset_release(d);
    printf("tensorflow files: 42 tutorial records and 2 JPEG records as known\n");
}

/* A gzip shard of a valid file followed by 64 MiB of zeros (~64 KB
 * compressed): under --max-inflate-ratio 100 the daemon's parse refuses
 * it once it inflates past 100 x its size, naming the ratio, not at the
 * dataset limit (it used to inflate 1 MB to 512 MiB first). */
static void test_inflate_ratio(void)
{
    size_t n;
    uint8_t *raw = slurp(gen_dir, "num.tfrecord", &n);
    const size_t zeros = (size_t)64 << 20;
    uint8_t *in = calloc(1, n + zeros), *gz = malloc(n + zeros / 512 + 4096);
    memcpy(in, raw, n);
    z_stream z;
    memset(&z, 0, sizeof z);
    REQUIRE(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY) == Z_OK);
    z.next_in = in;
    z.avail_in = (uInt)(n + zeros);
    z.next_out = gz;
    z.avail_out = (uInt)(n + zeros / 512 + 4096);
    REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
    const size_t gn = z.total_out;
    deflateEnd(&z);
    free(in);
    CHECK(gn < (size_t)1 << 20);
    rt_example_spec s = num_spec();
    rt_data_part part = {.role = RT_ROLE_BOTH, .format = RT_FMT_TFRECORD, .length = gn,
                         .compression = RT_TFR_GZIP, .spec = &s};
    char err[300];
    rt_dataset *ds = NULL;
    uint8_t *b = gz;
    int rc = rt_data_parse_take(&part, 1, &b, gn, (uint64_t)1 << 30, 100, NULL, &ds, err,
                                sizeof err);
    CHECK(rc == RT_ETOOBIG && !ds);
    if (!strstr(err, "over the inflate ratio limit of 100 (--max-inflate-ratio)"))
        fprintf(stderr, "ratio: %s\n", err);
    CHECK(strstr(err, "over the inflate ratio limit of 100 (--max-inflate-ratio)") != NULL);
    /* without the ratio the same shard stops only at the dataset limit */
    rc = rt_data_parse_take(&part, 1, &b, gn, (uint64_t)32 << 20, 0, NULL, &ds, err,
                            sizeof err);
    if (!strstr(err, "inflates past the dataset limit of 33554432 bytes (--max-dataset-bytes)"))
        fprintf(stderr, "no ratio: %s\n", err);
    CHECK(rc == RT_ETOOBIG &&
          strstr(err, "inflates past the dataset limit of 33554432 bytes (--max-dataset-bytes)"));
    /* a real gzip shard is well inside the ratio */
    size_t ln;
    uint8_t *lg = slurp(gen_dir, "num.tfrecord.gz", &ln);
    part.length = ln;
    b = lg;
    REQUIRE(rt_data_parse_take(&part, 1, &b, ln, (uint64_t)1 << 30, 100, NULL, &ds, err,
                               sizeof err) == 0);
    CHECK(ds->n == 100);
    rt_dataset_release(ds);
    free(lg);
    free(gz);
    free(raw);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s GENERATED_DIR FIXTURE_DIR\n", argv[0]);
        return 2;
    }
    gen_dir = argv[1];
    fix_dir = argv[2];
    test_crc();
    test_framing();
    test_examples();
    test_sequence();
    test_images();
    test_tensorflow_files();
    test_inflate_ratio();
    if (failures) {
        fprintf(stderr, "test_tfrecord: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_tfrecord: ok\n");
    return 0;
}
