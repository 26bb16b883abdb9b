/* test_fuzz.c - mutation fuzzing of the data decoders: TFRecord framing,
 * GZIP inflation, tf.train.Example parsing under a spec, JPEG and PNG
 * decoding. Each iteration flips, inserts or truncates bytes of a valid
 * input; every outcome must be a clean result or an error code, never a
 * crash, a hang or (under ASan) a bad access or leak.
 *
 * Usage: test_fuzz GENERATED_DIR ITERATIONS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_example.h"
#include "rt_image.h"
#include "rt_inflate.h"
#include "rt_tfrecord.h"
#include "rtrain/rt_error.h"

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
    uint8_t *b = malloc((size_t)n);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n)
        exit(1);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A mutated copy of src (malloc'ed), length in *n. */
static uint8_t *mutate(const uint8_t *src, size_t len, size_t *n)
{
    uint8_t *b = malloc(len + 64);
    memcpy(b, src, len);
    *n = len;
    int edits = 1 + (int)(next() % 4);
    for (int e = 0; e < edits && *n; e++) {
        size_t at = next() % *n;
        switch (next() % 4) {
        case 0: b[at] ^= (uint8_t)(1u << (next() % 8)); break;
        case 1: b[at] = (uint8_t)next(); break;
        case 2: *n = at; break;                       /* truncate */
        case 3:                                        /* insert a byte */
            if (*n < len + 63) {
                memmove(b + at + 1, b + at, *n - at);
                b[at] = (uint8_t)next();
                (*n)++;
            }
            break;
        }
    }
    return b;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s GENERATED_DIR ITERATIONS\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    long iters = atol(argv[2]);
    size_t n_img, n_num, n_gz, n_png, n_jpg;
    uint8_t *img = slurp(dir, "img.tfrecord", &n_img);
    uint8_t *num = slurp(dir, "num.tfrecord", &n_num);
    uint8_t *gz = slurp(dir, "num.tfrecord.gz", &n_gz);
    uint8_t *png = slurp(dir, "gradient.png", &n_png);
    uint8_t *jpg = slurp(dir, "gradient.jpg", &n_jpg);

    rt_example_spec is;
    memset(&is, 0, sizeof is);
    is.n = 2;
    is.skip_bad = 1;
    is.f[0] = (rt_feat_spec){.key = "image", .kind = RT_FEAT_IMAGE};
    is.f[1] = (rt_feat_spec){.key = "label", .kind = RT_FEAT_INT64, .label = 1};
    is.img = (rt_image_spec){.h = 8, .w = 8, .c = 3, .std = {1, 1, 1}, .flip = 1};
    rt_example_spec ns;
    memset(&ns, 0, sizeof ns);
    ns.n = 2;
    ns.f[0] = (rt_feat_spec){.key = "x", .kind = RT_FEAT_FLOAT, .ndim = 1, .dims = {4}};
    ns.f[1] = (rt_feat_spec){.key = "label", .kind = RT_FEAT_INT64, .label = 1};

    long ok = 0, errs = 0;
    char err[256];
    for (long it = 0; it < iters; it++) {
        size_t n;
        uint8_t *b;
        int rc;
        switch (it % 5) {
        case 0: /* image records, skipping the bad ones */
        case 1: { /* numeric records, failing on the first bad one */
            int im = it % 5 == 0;
            b = mutate(im ? img : num, im ? n_img : n_num, &n);
            rt_tfr_shard sh = {.data = b, .len = n};
            rt_dataset *ds = calloc(1, sizeof *ds);
            pthread_mutex_init(&ds->mu, NULL);
            ds->refs = 1;
            ns.skip_bad = (int)(it / 5 % 2);
            rc = rt_example_build(im ? &is : &ns, &sh, 1, 1 << 24, ds, err, sizeof err);
            if (rc == 0 && ds->img) {
                float *x = malloc(sizeof(float) * (size_t)ds->n * 192);
                rt_dataset_augment(ds, 1, 2, x);
                free(x);
            }
            rt_dataset_release(ds);
            break;
        }
        case 2: { /* gzip */
            b = mutate(gz, n_gz, &n);
            uint8_t *out;
            size_t on;
            const rt_zlimits lim = {1 << 20, "dataset limit", "--max-dataset-bytes", 100};
            const rt_zspan sp = {b, n};
            rc = rt_inflate_all(RT_Z_GZIP, &sp, 1, &lim, "shard 0", NULL, NULL, &out, &on, err,
                                sizeof err);
            if (rc == 0)
                free(out);
            break;
        }
        default: { /* images */
            int p = it % 5 == 3;
            b = mutate(p ? png : jpg, p ? n_png : n_jpg, &n);
            uint8_t *px;
            int w, h;
            rc = rt_image_decode(b, n, RT_IMG_ANY, 1 + 2 * (int)(it / 5 % 2), 1 << 22, &px, &w,
                                 &h, err, sizeof err);
            if (rc == 0) {
                uint8_t small[5 * 7 * 3];
                rt_image_resize(px, w, h, 1 + 2 * (int)(it / 5 % 2), small, 7, 5, RT_RESIZE_AUTO);
                free(px);
            }
            break;
        }
        }
        free(b);
        if (rc == 0)
            ok++;
        else if (rc < 0 && rc >= RT_EGRPC)
            errs++;
        else {
            fprintf(stderr, "iteration %ld: unexpected return %d\n", it, rc);
            return 1;
        }
    }
    free(img);
    free(num);
    free(gz);
    free(png);
    free(jpg);
    printf("data fuzz: %ld iterations, %ld decoded, %ld rejected cleanly\n", iters, ok, errs);
    return 0;
}
