/* rt_image.c - JPEG/PNG decoding, resampling, normalisation, augmentation. */
#include "rt_image.h"
#include "rt_errf.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>
#include <turbojpeg.h>

#include "rt_engine.h"
#include "rtrain/rt_error.h"

int rt_image_spec_augments(const rt_image_spec *s)
{
    return s->crop_pad > 0 || s->flip || s->brightness > 0 || s->contrast > 0;
}

static int size_ok(int w, int h, int c, uint64_t max_pixels, const char *what, char *err,
                   size_t errlen)
{
    if (w <= 0 || h <= 0)
        return rt_errf(err, errlen, RT_EDATA, "%s declares %d x %d pixels", what, w, h);
    uint64_t n = (uint64_t)w * (uint64_t)h * (uint64_t)c;
    if (n > max_pixels)
        return rt_errf(err, errlen, RT_ETOOBIG,
                       "%s declares %d x %d pixels, over the limit of %llu values", what, w, h,
                       (unsigned long long)max_pixels);
    return 0;
}

/* ------------------------------------------------------------------- JPEG */
/* One TurboJPEG handle per thread: creating one allocates a few KiB of
 * decoder state, too much to repeat per image. */
static pthread_key_t tj_key;
static pthread_once_t tj_once = PTHREAD_ONCE_INIT;
static void tj_free(void *h) { tjDestroy(h); }
static void tj_key_init(void) { pthread_key_create(&tj_key, tj_free); }

/* After a failed decode a handle can keep its error state (a warning
 * seen under TJFLAG_STOPONWARNING sticks), so it is dropped. */
static void tj_drop(void)
{
    tjhandle h = pthread_getspecific(tj_key);
    if (h) {
        tjDestroy(h);
        pthread_setspecific(tj_key, NULL);
    }
}

static tjhandle tj_handle(void)
{
    pthread_once(&tj_once, tj_key_init);
    tjhandle h = pthread_getspecific(tj_key);
    if (!h && (h = tjInitDecompress()) != NULL)
        pthread_setspecific(tj_key, h);
    return h;
}

static int decode_jpeg(const uint8_t *b, size_t n, int channels, uint64_t max_pixels, int min_w,
                       int min_h, uint8_t **px, int *w, int *h, char *err, size_t errlen)
{
    tjhandle tj = tj_handle();
    if (!tj)
        return rt_errf(err, errlen, RT_ENOMEM, "cannot create a JPEG decoder");
    int sub, cs;
    if (n > (unsigned long)-1 ||
        tjDecompressHeader3(tj, b, (unsigned long)n, w, h, &sub, &cs) < 0) {
        int rc = rt_errf(err, errlen, RT_EDATA, "JPEG header: %s", tjGetErrorStr2(tj));
        tj_drop();
        return rc;
    }
    int rc = size_ok(*w, *h, channels, max_pixels, "JPEG", err, errlen);
    if (rc < 0)
        return rc;
    if (min_w > 0 && min_h > 0) {
        /* the smallest scale that still covers the target */
        int nsf;
        tjscalingfactor *sf = tjGetScalingFactors(&nsf);
        int bw = *w, bh = *h;
        for (int i = 0; sf && i < nsf; i++) {
            if (sf[i].num > sf[i].denom)
                continue;
            int sw = TJSCALED(*w, sf[i]), sh = TJSCALED(*h, sf[i]);
            if (sw >= min_w && sh >= min_h && sw < bw)
                bw = sw, bh = sh;
        }
        *w = bw;
        *h = bh;
    }
    uint8_t *p = malloc((size_t)*w * (size_t)*h * (size_t)channels);
    if (!p)
        return rt_errf(err, errlen, RT_ENOMEM, "out of memory for a %d x %d JPEG", *w, *h);
    /* Stop on warnings: libjpeg fills a truncated scan with grey and only
     * warns; progressive scans are capped (a small file can otherwise ask
     * for unbounded work). */
    if (tjDecompress2(tj, b, (unsigned long)n, p, *w, 0, *h, channels == 1 ? TJPF_GRAY : TJPF_RGB,
                      TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) < 0) {
        free(p);
        int rc = rt_errf(err, errlen, RT_EDATA, "JPEG: %s", tjGetErrorStr2(tj));
        tj_drop();
        return rc;
    }
    *px = p;
    return 0;
}

/* -------------------------------------------------------------------- PNG */
static int decode_png(const uint8_t *b, size_t n, int channels, uint64_t max_pixels, uint8_t **px,
                      int *w, int *h, char *err, size_t errlen)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&im, b, n)) {
        int rc = rt_errf(err, errlen, RT_EDATA, "PNG header: %s", im.message);
        png_image_free(&im);
        return rc;
    }
    *w = (int)im.width;
    *h = (int)im.height;
    if (im.width > 0x7fffffffu || im.height > 0x7fffffffu) {
        png_image_free(&im);
        return rt_errf(err, errlen, RT_ETOOBIG, "PNG declares %u x %u pixels", im.width, im.height);
    }
    int rc = size_ok(*w, *h, channels, max_pixels, "PNG", err, errlen);
    if (rc < 0) {
        png_image_free(&im);
        return rc;
    }
    im.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    uint8_t *p = malloc(PNG_IMAGE_SIZE(im));
    if (!p) {
        png_image_free(&im);
        return rt_errf(err, errlen, RT_ENOMEM, "out of memory for a %d x %d PNG", *w, *h);
    }
    /* Transparent pixels are composited on black. */
    if (!png_image_finish_read(&im, NULL, p, 0, NULL)) {
        rc = rt_errf(err, errlen, RT_EDATA, "PNG: %s", im.message);
        png_image_free(&im);
        free(p);
        return rc;
    }
    *px = p;
    return 0;
}

int rt_image_decode(const uint8_t *b, size_t n, rt_image_fmt fmt, int channels, uint64_t max_pixels,
                    uint8_t **px, int *w, int *h, char *err, size_t errlen)
{
    return rt_image_decode_for(b, n, fmt, channels, max_pixels, 0, 0, px, w, h, err, errlen);
}

int rt_image_decode_for(const uint8_t *b, size_t n, rt_image_fmt fmt, int channels,
                        uint64_t max_pixels, int min_w, int min_h, uint8_t **px, int *w, int *h,
                        char *err, size_t errlen)
{
    *px = NULL;
    *w = *h = 0;
    if (channels != 1 && channels != 3)
        return rt_errf(err, errlen, RT_EINVAL, "images decode to 1 or 3 channels, not %d",
                       channels);
    int is_jpeg = n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF;
    int is_png = n >= 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0;
    if (fmt == RT_IMG_ANY)
        fmt = is_jpeg ? RT_IMG_JPEG : is_png ? RT_IMG_PNG : RT_IMG_ANY;
    if (fmt == RT_IMG_JPEG && is_jpeg)
        return decode_jpeg(b, n, channels, max_pixels, min_w, min_h, px, w, h, err, errlen);
    if (fmt == RT_IMG_PNG && is_png)
        return decode_png(b, n, channels, max_pixels, px, w, h, err, errlen);
    if (n == 0)
        return rt_errf(err, errlen, RT_EDATA, "image is empty");
    return rt_errf(err, errlen, RT_EDATA, "not a %s image (starts %02x %02x)",
                   fmt == RT_IMG_JPEG  ? "JPEG"
                   : fmt == RT_IMG_PNG ? "PNG"
                                       : "JPEG or PNG",
                   b[0], n > 1 ? b[1] : 0);
}

/* ----------------------------------------------------------------- resize */
/* One axis of a separable resampler: output i takes n[i] taps from source
 * index first[i] on, with weights w[i * maxt ...] summing to 1. */
typedef struct taps {
    int *first, *n;
    float *w;
    int maxt;
} taps;

static int taps_make(int sn, int dn, int area, taps *t)
{
    double scale = (double)sn / dn;
    t->maxt = area ? (int)ceil(scale) + 1 : 2;
    t->first = malloc(sizeof(int) * (size_t)dn);
    t->n = malloc(sizeof(int) * (size_t)dn);
    t->w = calloc((size_t)dn * (size_t)t->maxt, sizeof(float));
    if (!t->first || !t->n || !t->w)
        return -1;
    for (int i = 0; i < dn; i++) {
        float *w = t->w + (size_t)i * t->maxt;
        if (area) {
            /* exact overlap of [i, i+1) * scale with each source pixel */
            double a = i * scale, b = (i + 1) * scale;
            int s0 = (int)floor(a), s1 = (int)ceil(b);
            if (s1 > sn)
                s1 = sn;
            int k = 0;
            for (int s = s0; s < s1 && k < t->maxt; s++, k++) {
                double lo = s > a ? s : a, hi = s + 1 < b ? s + 1 : b;
                w[k] = (float)((hi - lo) / scale);
            }
            t->first[i] = s0;
            t->n[i] = k;
        } else {
            double x = (i + 0.5) * scale - 0.5;
            if (x < 0)
                x = 0;
            int x0 = (int)floor(x);
            if (x0 > sn - 1)
                x0 = sn - 1;
            int x1 = x0 + 1 < sn ? x0 + 1 : sn - 1;
            float f = (float)(x - x0);
            t->first[i] = x0;
            t->n[i] = x1 > x0 ? 2 : 1;
            w[0] = x1 > x0 ? 1.0f - f : 1.0f;
            w[1] = x1 > x0 ? f : 0.0f;
        }
    }
    return 0;
}

static void taps_free(taps *t)
{
    free(t->first);
    free(t->n);
    free(t->w);
}

/* Per-thread scratch for the resampler's intermediate rows: a fresh
 * megabyte per image costs more in page faults than the resampling. */
typedef struct scratch {
    float *p;
    size_t cap;
} scratch;
static pthread_key_t scr_key;
static pthread_once_t scr_once = PTHREAD_ONCE_INIT;
static void scr_free(void *v)
{
    scratch *sc = v;
    free(sc->p);
    free(sc);
}
static void scr_key_init(void) { pthread_key_create(&scr_key, scr_free); }

static float *scratch_get(size_t n)
{
    pthread_once(&scr_once, scr_key_init);
    scratch *sc = pthread_getspecific(scr_key);
    if (!sc) {
        if (!(sc = calloc(1, sizeof *sc)))
            return NULL;
        pthread_setspecific(scr_key, sc);
    }
    if (sc->cap < n) {
        float *np = realloc(sc->p, n * sizeof(float));
        if (!np)
            return NULL;
        sc->p = np;
        sc->cap = n;
    }
    return sc->p;
}

void rt_image_resize(const uint8_t *src, int sw, int sh, int c, uint8_t *dst, int dw, int dh,
                     rt_resize method)
{
    if (sw == dw && sh == dh) {
        memcpy(dst, src, (size_t)sw * (size_t)sh * (size_t)c);
        return;
    }
    int area = method == RT_RESIZE_AREA || (method == RT_RESIZE_AUTO && dw <= sw && dh <= sh);
    taps tx = {0}, ty = {0};
    const size_t tmp_n = (size_t)sh * (size_t)dw * (size_t)c;
    float *tmp = scratch_get(tmp_n + (size_t)dw * (size_t)c);
    /* An area filter that enlarges is a nearest-pixel box; use bilinear
     * on an axis that grows. */
    if (!tmp || taps_make(sw, dw, area && dw <= sw, &tx) < 0 ||
        taps_make(sh, dh, area && dh <= sh, &ty) < 0) {
        /* resize has no error path: allocation failure means a tiny
         * fallback, nearest-neighbour, which needs no memory */
        for (int y = 0; y < dh; y++)
            for (int x = 0; x < dw; x++)
                memcpy(dst + ((size_t)y * dw + x) * c,
                       src + ((size_t)(y * sh / dh) * sw + (size_t)(x * sw / dw)) * c, (size_t)c);
        goto out;
    }
    /* Only the source rows some output row reads are resampled across. */
    int y_lo = ty.first[0], y_hi = ty.first[dh - 1] + ty.n[dh - 1];
    for (int y = y_lo; y < y_hi; y++) {
        const uint8_t *row = src + (size_t)y * sw * c;
        float *o = tmp + (size_t)y * dw * c;
        for (int x = 0; x < dw; x++) {
            const float *w = tx.w + (size_t)x * tx.maxt;
            const uint8_t *p = row + (size_t)tx.first[x] * c;
            if (c == 3 && tx.n[x] == 2) {
                o[3 * x + 0] = w[0] * p[0] + w[1] * p[3];
                o[3 * x + 1] = w[0] * p[1] + w[1] * p[4];
                o[3 * x + 2] = w[0] * p[2] + w[1] * p[5];
                continue;
            }
            for (int ch = 0; ch < c; ch++) {
                float acc = 0;
                for (int k = 0; k < tx.n[x]; k++)
                    acc += w[k] * p[(size_t)k * c + ch];
                o[(size_t)x * c + ch] = acc;
            }
        }
    }
    const int rl = dw * c;
    float *acc = tmp + tmp_n;
    for (int y = 0; y < dh; y++) {
        const float *w = ty.w + (size_t)y * ty.maxt;
        const float *r0 = tmp + (size_t)ty.first[y] * rl;
        uint8_t *o = dst + (size_t)y * rl;
        /* row-wise axpy: vectorises, unlike a tap loop per value */
        for (int i = 0; i < rl; i++)
            acc[i] = w[0] * r0[i];
        for (int k = 1; k < ty.n[y]; k++) {
            const float *rk = r0 + (size_t)k * rl, wk = w[k];
            for (int i = 0; i < rl; i++)
                acc[i] += wk * rk[i];
        }
        for (int i = 0; i < rl; i++) {
            float v = acc[i] + 0.5f;
            o[i] = (uint8_t)(v < 0 ? 0 : v >= 255.0f ? 255 : (int)v);
        }
    }
out:
    taps_free(&tx);
    taps_free(&ty);
}

/* ----------------------------------------------------------- augmentation */
/* The spec's augmentation as the engine reads it (rt_aug_draws, rt_aug_apply). */
static rt_augment rt_image_augment(const rt_image_spec *s, uint64_t epoch)
{
    rt_augment a = {.h = s->h,
                    .w = s->w,
                    .c = s->c,
                    .crop_pad = s->crop_pad,
                    .flip = s->flip,
                    .brightness = s->brightness,
                    .contrast = s->contrast,
                    .epoch = epoch};
    memcpy(a.mean, s->mean, sizeof a.mean);
    memcpy(a.std, s->std, sizeof a.std);
    return a;
}

void rt_image_aug_draw(const rt_image_spec *s, uint64_t seed, uint64_t epoch, uint64_t sample,
                       rt_image_aug *a)
{
    const rt_augment g = rt_image_augment(s, epoch);
    rt_aug_draws(&g, seed, sample, a);
}

/* Without augmentation the input is a per-channel function of the 8-bit
 * value: a 256-entry table per channel. */
void rt_image_plain_lut(const rt_image_spec *s, float lut[3][256])
{
    const float k = 1.0f / 255.0f;
    for (int ch = 0; ch < s->c; ch++) {
        float inv = s->std[ch] != 0 ? 1.0f / s->std[ch] : 1.0f;
        for (int v = 0; v < 256; v++)
            lut[ch][v] = ((float)v * k - s->mean[ch]) * inv;
    }
}

void rt_image_lut_apply(const rt_image_spec *s, const float lut[3][256], const uint8_t *px,
                        float *x)
{
    const size_t n = (size_t)s->h * s->w;
    if (s->c == 3)
        for (size_t i = 0; i < n; i++) {
            x[3 * i + 0] = lut[0][px[3 * i + 0]];
            x[3 * i + 1] = lut[1][px[3 * i + 1]];
            x[3 * i + 2] = lut[2][px[3 * i + 2]];
        }
    else
        for (size_t i = 0; i < n; i++)
            x[i] = lut[0][px[i]];
}

void rt_image_to_input(const rt_image_spec *s, const uint8_t *px, float *x, const rt_image_aug *a)
{
    if (!a) {
        float plain[3][256];
        rt_image_plain_lut(s, plain);
        rt_image_lut_apply(s, plain, px, x);
        return;
    }
    const rt_augment g = rt_image_augment(s, 0);
    rt_aug_apply(&g, a, px, x);
}
