/*
 * rt_augment.c - image augmentation's draws (the engine's, one process's)
 * and its host application to one image, which the CPU backend's batch
 * gather and the data pipeline's streamed rows share (rt_engine.h).
 */
#include <string.h>

#include "rt_engine.h"

static float rt__unit(uint64_t seed, uint64_t ctr)
{
    return (float)(rt_rng_u64(seed, RT_RNG_STREAM_AUGMENT, ctr) >> 40) * (1.0f / 16777216.0f);
}

void rt_aug_draws(const rt_augment *a, uint64_t seed, uint64_t sample, rt_aug_draw *d)
{
    memset(d, 0, sizeof *d);
    d->contrast = 1.0f;
    /* 8 counters per (epoch, row id); epochs in the high 24 bits; a
     * chunk's row ids are its whole set's (row0) */
    const uint64_t base = ((a->epoch << 40) ^ (sample + a->row0)) * 8;
    if (a->crop_pad > 0) {
        const int span = 2 * a->crop_pad + 1;
        d->dx = (int)(rt__unit(seed, base + 0) * (float)span) - a->crop_pad;
        d->dy = (int)(rt__unit(seed, base + 1) * (float)span) - a->crop_pad;
        if (d->dx > a->crop_pad)
            d->dx = a->crop_pad;
        if (d->dy > a->crop_pad)
            d->dy = a->crop_pad;
    }
    if (a->flip)
        d->flip = rt__unit(seed, base + 2) < 0.5f;
    if (a->brightness > 0)
        d->bright = (2.0f * rt__unit(seed, base + 3) - 1.0f) * a->brightness;
    if (a->contrast > 0)
        d->contrast = 1.0f + (2.0f * rt__unit(seed, base + 4) - 1.0f) * a->contrast;
}

/* Every step after the crop and flip is a per-channel function of the
 * 8-bit value (contrast around the channel mean, brightness, clip,
 * normalisation), so it is a 256-entry table per channel; a padded pixel
 * is value 0. */
void rt_aug_apply(const rt_augment *a, const rt_aug_draw *d, const uint8_t *px, float *x)
{
    const int H = a->h, W = a->w, C = a->c;
    const float k = 1.0f / 255.0f, cf = d->contrast, br = d->bright;
    const int dx = d->dx, dy = d->dy, flip = d->flip;
    /* the crop's source window: output (y, x) reads (y + dy, x' + dx) */
    const int y0 = dy < 0 ? -dy : 0, y1 = H - (dy > 0 ? dy : 0);
    const int x0 = dx < 0 ? -dx : 0, x1 = W - (dx > 0 ? dx : 0);
    double mean_img[3] = {0, 0, 0};
    if (cf != 1.0f) {
        /* each channel's mean over the cropped image, pads included */
        uint64_t sum[3] = {0, 0, 0};
        for (int y = y0; y < y1; y++) {
            const uint8_t *row = px + (size_t)(y + dy) * W * C;
            for (int xx = x0 + dx; xx < x1 + dx; xx++)
                for (int ch = 0; ch < C; ch++)
                    sum[ch] += row[(size_t)xx * C + ch];
        }
        for (int ch = 0; ch < C; ch++)
            mean_img[ch] = (double)sum[ch] * k / ((double)H * W);
    }
    float lut[3][256];
    for (int ch = 0; ch < C; ch++) {
        const float inv = a->std[ch] != 0 ? 1.0f / a->std[ch] : 1.0f, m = (float)mean_img[ch];
        for (int v = 0; v < 256; v++) {
            float f = (float)v * k;
            if (cf != 1.0f)
                f = (f - m) * cf + m;
            f += br;
            f = f < 0 ? 0 : f > 1 ? 1 : f;
            lut[ch][v] = (f - a->mean[ch]) * inv;
        }
    }
    for (int y = 0; y < H; y++) {
        float *o = x + (size_t)y * W * C;
        if (y < y0 || y >= y1) {
            for (int i = 0; i < W * C; i++)
                o[i] = lut[i % C][0];
            continue;
        }
        const uint8_t *row = px + (size_t)(y + dy) * W * C;
        for (int xx = 0; xx < W; xx++) {
            const int sx = (flip ? W - 1 - xx : xx) + dx;
            float *op = o + (size_t)xx * C;
            if (sx < 0 || sx >= W) {
                for (int ch = 0; ch < C; ch++)
                    op[ch] = lut[ch][0];
            } else {
                const uint8_t *p = row + (size_t)sx * C;
                for (int ch = 0; ch < C; ch++)
                    op[ch] = lut[ch][p[ch]];
            }
        }
    }
}
