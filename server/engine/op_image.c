/*
 * op_image.c - Keras' random image layers as ops: RandomFlip,
 * RandomRotation, RandomTranslation, RandomZoom, RandomContrast,
 * RandomBrightness, RandomCrop on (B, H, W, C). Shape inference, typed parameters
 * (rt__image_params) and FLOP counts; the kernels, which both backends
 * run, are rt_imgaug.c.
 *
 * Attributes (floats unless said; the ranges as Keras' layers check them,
 * keras/layers/preprocessing/image_preprocessing.py in Keras 2.15):
 *   RandomFlip        mode (string): horizontal, vertical,
 *                     horizontal_and_vertical (the default); joint (int,
 *                     0): 1 flips both ways on one draw (Keras 3.6+),
 *                     0 on one draw each (Keras 2)
 *   RandomRotation    lower <= upper (turns: fractions of 2 pi)
 *   RandomTranslation height_lower <= height_upper, width_lower <=
 *                     width_upper, all in [-1, 1] (fractions of H, W)
 *   RandomZoom        height_lower, height_upper in [-1, 1]; width_lower,
 *                     width_upper >= -1 (absent: the height's zoom)
 *   the four above    fill_mode (reflect (default), wrap, constant,
 *                     nearest), interpolation (bilinear (default),
 *                     nearest), fill_value (0)
 *   RandomContrast    lower in [0, 1], upper >= 0: factor in
 *                     [1 - lower, 1 + upper]; value_min < value_max
 *                     (0, 255): the clip
 *   RandomBrightness  lower <= upper in [-1, 1]; value_min < value_max
 *                     (0, 255)
 *   RandomCrop        height, width (ints >= 1): the output (B, height,
 *                     width, C). As Keras 2.6+'s RandomCrop: in training,
 *                     when the input is at least that large, a window at
 *                     a random offset (drawn per sample; Keras draws one
 *                     per batch); otherwise (inference, or a smaller
 *                     input) Keras' smart_resize (keras/utils/
 *                     image_utils.py): the centred box of the output's
 *                     aspect ratio, resized as tf.image.resize bilinear
 *                     (half-pixel centres, no antialias)
 */
#include <math.h>
#include <string.h>

#include "rt_engine_impl.h"

static int rt__img_range(rt__cc *cc, rt__node *nd, const char *lo_name, const char *hi_name,
                         double dlo, double dhi, double min, double max, double *lo, double *hi,
                         int *ok)
{
    *lo = rt__attr_float(cc, nd, lo_name, dlo, ok);
    *hi = rt__attr_float(cc, nd, hi_name, dhi, ok);
    if (!*ok)
        return RT_EINVAL;
    if (!(*lo >= min && *lo <= max && *hi >= min && *hi <= max))
        return rt__cerr(cc, nd, RT_EINVAL, "%s %g and %s %g must lie in [%g, %g]", lo_name, *lo,
                        hi_name, *hi, min, max);
    if (*hi < *lo)
        return rt__cerr(cc, nd, RT_EINVAL, "%s %g is below %s %g", hi_name, *hi, lo_name, *lo);
    return 0;
}

static int rt__img_fill(rt__cc *cc, rt__node *nd, rt__image_params *p, int *ok)
{
    static const char *const modes[] = {"reflect", "wrap", "constant", "nearest"};
    const char *fm = rt__attr_str(cc, nd, "fill_mode", "reflect", ok);
    const char *in = rt__attr_str(cc, nd, "interpolation", "bilinear", ok);
    p->fill_value = rt__attr_float(cc, nd, "fill_value", 0.0, ok);
    if (!*ok)
        return RT_EINVAL;
    p->fill = -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(fm, modes[i]) == 0)
            p->fill = i;
    if (p->fill < 0)
        return rt__cerr(cc, nd, RT_EINVAL,
                        "fill_mode '%.20s' is not reflect, wrap, constant or nearest", fm);
    if (strcmp(in, "bilinear") != 0 && strcmp(in, "nearest") != 0)
        return rt__cerr(cc, nd, RT_EINVAL, "interpolation '%.20s' is not bilinear or nearest", in);
    p->bilinear = strcmp(in, "bilinear") == 0;
    if (!isfinite(p->fill_value))
        return rt__cerr(cc, nd, RT_EINVAL, "fill_value must be finite");
    return 0;
}

static int rt__img_values(rt__cc *cc, rt__node *nd, rt__image_params *p, int *ok)
{
    p->v0 = rt__attr_float(cc, nd, "value_min", 0.0, ok);
    p->v1 = rt__attr_float(cc, nd, "value_max", 255.0, ok);
    if (!*ok)
        return RT_EINVAL;
    if (!(p->v0 < p->v1) || !isfinite(p->v0) || !isfinite(p->v1))
        return rt__cerr(cc, nd, RT_EINVAL, "value range [%g, %g] is empty", p->v0, p->v1);
    return 0;
}

static int rt__img_infer(rt__cc *cc, rt__node *nd, int kind)
{
    const rt__shape *x = nd->in_shape[0];
    if (!x->batched || x->ndim != 3)
        return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' must be images (B, H, W, C)",
                        nd->in_name[0]);
    rt__image_params *p = rt__image_p(nd);
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->H = x->d[0];
    p->W = x->d[1];
    p->C = x->d[2];
    nd->out = *x;
    int ok = 1, rc = 0;
    switch (kind) {
    case RT__IMG_FLIP: {
        const char *mode = rt__attr_str(cc, nd, "mode", "horizontal_and_vertical", &ok);
        const int64_t joint = rt__attr_int(cc, nd, "joint", 0, &ok);
        if (!ok)
            return RT_EINVAL;
        if (joint != 0 && joint != 1)
            return rt__cerr(cc, nd, RT_EINVAL, "joint %lld must be 0 or 1", (long long)joint);
        p->joint = (int)joint;
        p->flip_h = strcmp(mode, "horizontal") == 0 || strcmp(mode, "horizontal_and_vertical") == 0;
        p->flip_v = strcmp(mode, "vertical") == 0 || strcmp(mode, "horizontal_and_vertical") == 0;
        if (!p->flip_h && !p->flip_v)
            return rt__cerr(cc, nd, RT_EINVAL,
                            "mode '%.30s' is not horizontal, vertical or horizontal_and_vertical",
                            mode);
        return 0;
    }
    case RT__IMG_ROTATE:
        if ((rc = rt__img_range(cc, nd, "lower", "upper", 0, 0, -1e6, 1e6, &p->lo[0], &p->hi[0],
                                &ok)) < 0)
            return rc;
        return rt__img_fill(cc, nd, p, &ok);
    case RT__IMG_TRANSLATE:
        if ((rc = rt__img_range(cc, nd, "height_lower", "height_upper", 0, 0, -1, 1, &p->lo[0],
                                &p->hi[0], &ok)) < 0 ||
            (rc = rt__img_range(cc, nd, "width_lower", "width_upper", 0, 0, -1, 1, &p->lo[1],
                                &p->hi[1], &ok)) < 0)
            return rc;
        return rt__img_fill(cc, nd, p, &ok);
    case RT__IMG_ZOOM:
        /* Keras checks |height| <= 1 and width >= -1 only, and takes
         * the bounds as given (uniform draws between them) */
        p->lo[0] = rt__attr_float(cc, nd, "height_lower", 0, &ok);
        p->hi[0] = rt__attr_float(cc, nd, "height_upper", 0, &ok);
        p->same = !rt__attr(nd, "width_lower") && !rt__attr(nd, "width_upper");
        p->lo[1] = rt__attr_float(cc, nd, "width_lower", p->lo[0], &ok);
        p->hi[1] = rt__attr_float(cc, nd, "width_upper", p->hi[0], &ok);
        if (!ok)
            return RT_EINVAL;
        if (!(fabs(p->lo[0]) <= 1 && fabs(p->hi[0]) <= 1))
            return rt__cerr(cc, nd, RT_EINVAL, "height factors %g, %g must lie in [-1, 1]",
                            p->lo[0], p->hi[0]);
        if (!(p->lo[1] >= -1 && p->hi[1] >= -1 && p->lo[1] < 1e6 && p->hi[1] < 1e6))
            return rt__cerr(cc, nd, RT_EINVAL, "width factors %g, %g must be >= -1", p->lo[1],
                            p->hi[1]);
        return rt__img_fill(cc, nd, p, &ok);
    case RT__IMG_CROP: {
        p->oH = rt__attr_int(cc, nd, "height", 0, &ok);
        p->oW = rt__attr_int(cc, nd, "width", 0, &ok);
        if (!ok)
            return RT_EINVAL;
        if (p->oH < 1 || p->oW < 1 || p->oH > (1 << 20) || p->oW > (1 << 20))
            return rt__cerr(cc, nd, RT_EINVAL,
                            "height %lld and width %lld must be given, >= 1 and <= 2^20",
                            (long long)p->oH, (long long)p->oW);
        nd->out.d[0] = p->oH;
        nd->out.d[1] = p->oW;
        p->rnd = p->H >= p->oH && p->W >= p->oW;
        /* smart_resize's box: float32 arithmetic truncated to int32 as
         * its tf.cast calls (keras/utils/image_utils.py) */
        const int64_t ch = (int64_t)((float)(p->W * p->oH) / (float)p->oW);
        const int64_t cw = (int64_t)((float)(p->H * p->oW) / (float)p->oH);
        /* at least 1 (Keras 3's max(..., 1); Keras 2 fails there) */
        p->ch = ch < 1 ? 1 : ch < p->H ? ch : p->H;
        p->cw = cw < 1 ? 1 : cw < p->W ? cw : p->W;
        p->h0 = (int64_t)((float)(p->H - p->ch) / 2.0f);
        p->w0 = (int64_t)((float)(p->W - p->cw) / 2.0f);
        return 0;
    }
    case RT__IMG_CONTRAST:
        p->lo[0] = rt__attr_float(cc, nd, "lower", 0, &ok);
        p->hi[0] = rt__attr_float(cc, nd, "upper", 0, &ok);
        if (!ok)
            return RT_EINVAL;
        if (!(p->lo[0] >= 0 && p->lo[0] <= 1 && p->hi[0] >= 0 && p->hi[0] < 1e6))
            return rt__cerr(cc, nd, RT_EINVAL, "lower %g must lie in [0, 1] and upper %g be >= 0",
                            p->lo[0], p->hi[0]);
        return rt__img_values(cc, nd, p, &ok);
    default:
        if ((rc = rt__img_range(cc, nd, "lower", "upper", 0, 0, -1, 1, &p->lo[0], &p->hi[0], &ok)) <
            0)
            return rc;
        return rt__img_values(cc, nd, p, &ok);
    }
}

static int rt__flip_infer(rt__cc *cc, rt__node *nd) { return rt__img_infer(cc, nd, RT__IMG_FLIP); }
static int rt__rot_infer(rt__cc *cc, rt__node *nd) { return rt__img_infer(cc, nd, RT__IMG_ROTATE); }
static int rt__trans_infer(rt__cc *cc, rt__node *nd)
{
    return rt__img_infer(cc, nd, RT__IMG_TRANSLATE);
}
static int rt__zoom_infer(rt__cc *cc, rt__node *nd) { return rt__img_infer(cc, nd, RT__IMG_ZOOM); }
static int rt__contrast_infer(rt__cc *cc, rt__node *nd)
{
    return rt__img_infer(cc, nd, RT__IMG_CONTRAST);
}
static int rt__bright_infer(rt__cc *cc, rt__node *nd)
{
    return rt__img_infer(cc, nd, RT__IMG_BRIGHT);
}
static int rt__crop_infer(rt__cc *cc, rt__node *nd) { return rt__img_infer(cc, nd, RT__IMG_CROP); }

/* a sample point's four taps and their weights, per value each way */
static uint64_t rt__img_flops(const rt__node *nd, int64_t B, unsigned need_dx)
{
    const uint64_t n = (uint64_t)(B * rt__shape_numel(&nd->out));
    const uint64_t k = rt__image_cp(nd)->kind == RT__IMG_FLIP ? 0 : 8;
    return n * k + ((need_dx & 1u) ? n * k : 0);
}

#define RT__IMAGE_OP(var, opname, fn, needs_in)       \
    const rt__op_def var = {.name = opname,           \
                            .min_in = 1,              \
                            .max_in = 1,              \
                            .bwd_needs_in = needs_in, \
                            .params = RT__P_IMAGE,    \
                            .infer = fn,              \
                            .flops = rt__img_flops};
RT__IMAGE_OP(rt__op_rndflip, "RandomFlip", rt__flip_infer, 0)
RT__IMAGE_OP(rt__op_rndrotate, "RandomRotation", rt__rot_infer, 0)
RT__IMAGE_OP(rt__op_rndtranslate, "RandomTranslation", rt__trans_infer, 0)
RT__IMAGE_OP(rt__op_rndzoom, "RandomZoom", rt__zoom_infer, 0)
/* the clip (and contrast's channel means) read the input again */
RT__IMAGE_OP(rt__op_rndcontrast, "RandomContrast", rt__contrast_infer, 1)
RT__IMAGE_OP(rt__op_rndbright, "RandomBrightness", rt__bright_infer, 1)
RT__IMAGE_OP(rt__op_rndcrop, "RandomCrop", rt__crop_infer, 0)
#undef RT__IMAGE_OP
