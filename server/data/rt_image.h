/*
 * rt_image.h - encoded images (JPEG through TurboJPEG, PNG through libpng)
 * into model input: decode, resize, normalise, augment.
 *
 * Decoding reads the header first and refuses an image whose declared
 * width x height x channels is over max_pixels (a decompression bomb)
 * before any pixel buffer is allocated.
 *
 *     rt_image_spec s = {.h = 32, .w = 32, .c = 3, .mean = {.5, .5, .5},
 *                        .std = {.5, .5, .5}};
 *     uint8_t *px; int w, h;
 *     if (rt_image_decode(bytes, n, RT_IMG_ANY, 3, 1 << 26, &px, &w, &h,
 *                         err, sizeof err) < 0) ...
 *     uint8_t *small = malloc(32 * 32 * 3);
 *     rt_image_resize(px, w, h, 3, small, 32, 32, RT_RESIZE_AUTO);
 *     free(px);
 *     float x[32 * 32 * 3];
 *     rt_image_to_input(&s, small, x, NULL);                // eval: no augment
 *     rt_image_aug a; rt_image_aug_draw(&s, seed, epoch, sample, &a);
 *     rt_image_to_input(&s, small, x, &a);                  // training
 *
 * Augmentation values are pure functions of (seed, epoch, sample) drawn
 * from the engine's counter-based RNG, so a run is reproducible and a
 * resumed run draws the same values.
 */
#ifndef RTRAIN_IMAGE_H
#define RTRAIN_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "rt_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rt_image_fmt { RT_IMG_ANY = 0, RT_IMG_JPEG = 1, RT_IMG_PNG = 2 } rt_image_fmt;
/* AUTO: area filtering when shrinking both sides, bilinear otherwise. */
typedef enum rt_resize { RT_RESIZE_AUTO = 0, RT_RESIZE_BILINEAR = 1, RT_RESIZE_AREA = 2 } rt_resize;

/* What a stored image becomes: the model's (h, w, c) input, normalised per
 * channel as (pixel / 255 - mean) / std, and the training-time
 * augmentation: a random crop of the image zero-padded by crop_pad pixels
 * on each side, a horizontal flip with probability 1/2, a brightness delta
 * uniform in [-brightness, brightness] and a contrast factor uniform in
 * [1 - contrast, 1 + contrast] around each channel's mean. */
typedef struct rt_image_spec {
    int h, w, c; /* c: 1 (gray) or 3 (RGB) */
    rt_resize resize;
    float mean[3], std[3]; /* std 0 is taken as 1 */
    int crop_pad;
    int flip;
    float brightness, contrast;
} rt_image_spec;

/* 1 when the spec asks for any augmentation. */
int rt_image_spec_augments(const rt_image_spec *s);

/* Decode to 8-bit pixels, row-major (h, w, channels), converting colour to
 * channels (1 or 3; alpha dropped, palettes and 16-bit PNGs reduced). fmt
 * RT_IMG_ANY goes by the magic bytes. *px is malloc'ed, owned by the
 * caller. Errors: RT_EDATA (not an image of that format, corrupt or
 * truncated), RT_ETOOBIG (declared size over max_pixels values),
 * RT_ENOMEM. */
int rt_image_decode(const uint8_t *b, size_t n, rt_image_fmt fmt, int channels, uint64_t max_pixels,
                    uint8_t **px, int *w, int *h, char *err, size_t errlen);

/* Like rt_image_decode, but a JPEG much larger than min_w x min_h is
 * decoded at a reduced DCT scale (1/2 .. 1/8, libjpeg's scaled IDCT) that
 * still covers min_w x min_h, which is several times faster than decoding
 * every pixel and then shrinking. The size limit applies to the declared
 * size. PNGs decode whole. */
int rt_image_decode_for(const uint8_t *b, size_t n, rt_image_fmt fmt, int channels,
                        uint64_t max_pixels, int min_w, int min_h, uint8_t **px, int *w, int *h,
                        char *err, size_t errlen);

/* Resample src (sh, sw, c) into dst (dh, dw, c) with half-pixel centres
 * (TensorFlow's and PIL's convention), rounding to 8 bits. */
void rt_image_resize(const uint8_t *src, int sw, int sh, int c, uint8_t *dst, int dw, int dh,
                     rt_resize method);

/* One sample's draws: the engine's (rt_engine.h), which the backends'
 * batch gather applies to an in-memory set's images alike. */
typedef rt_aug_draw rt_image_aug;

void rt_image_aug_draw(const rt_image_spec *s, uint64_t seed, uint64_t epoch, uint64_t sample,
                       rt_image_aug *a);

/* The per-channel table that maps an 8-bit value to its input float
 * without augmentation, and its application to an (h, w, c) image:
 * rt_image_to_input(s, px, x, NULL) is exactly these two, so a caller
 * converting many images builds the table once. */
void rt_image_plain_lut(const rt_image_spec *s, float lut[3][256]);
void rt_image_lut_apply(const rt_image_spec *s, const float lut[3][256], const uint8_t *px,
                        float *x);

/* One stored (h, w, c) image into h * w * c floats of model input, with
 * augmentation a (NULL: none). */
void rt_image_to_input(const rt_image_spec *s, const uint8_t *px, float *x, const rt_image_aug *a);

#ifdef __cplusplus
}
#endif
#endif
