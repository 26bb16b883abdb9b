/*
 * import_keras_image.c - Keras' random image preprocessing layers:
 * RandomFlip, RandomRotation, RandomTranslation, RandomZoom,
 * RandomContrast, RandomBrightness, RandomCrop, each one node of the
 * engine op of the same name (server/engine/op_image.c): the input
 * unchanged outside training (RandomCrop: Keras' smart_resize to its
 * height and width), a random transform per sample in training.
 *
 * The settings as Keras reads them (Keras 2.15,
 * keras/layers/preprocessing/image_preprocessing.py; Keras 3,
 * keras/src/layers/preprocessing/image_preprocessing/random_*.py, whose
 * saved configs hold the same numbers):
 *   factor a number f   RandomRotation, RandomBrightness: [-|f|, |f|];
 *                       RandomTranslation, RandomZoom: [-f, f];
 *                       RandomContrast: lower = upper = f
 *   factor [a, b]       the bounds as given (Brightness sorts them)
 *   value_range [a, b]  RandomBrightness, RandomContrast (Keras 3): the
 *                       clip, default [0, 255] (Keras 2's RandomContrast
 *                       always clips to [0, 255])
 * Keras 3.6+'s RandomFlip flips both ways on one draw, Keras 2's on one
 * draw each (the op's joint). Keras 2's RandomContrast draws one factor per
 * batch, Keras 3's one per image; the op draws one per image.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "import_keras.h"

/* factor key as (lo, hi): a number through sym (1: [-|f|, |f|], 2:
 * [-f, f], 0: [f, f]), a list of two numbers as given (sorted when sort);
 * *present 0 when absent or null (lo = hi = 0) */
static int ki_factor(rt_keras_ctx *c, const char *key, int sym, int sort, double *lo, double *hi,
                     int *present)
{
    json_object *v = rt_keras_cfg_get(c, key);
    *lo = *hi = 0;
    *present = v != NULL;
    if (!v)
        return 0;
    if (json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)) {
        const double f = json_object_get_double(v);
        *lo = sym == 1 ? -fabs(f) : sym == 2 ? -f : f;
        *hi = sym == 1 ? fabs(f) : f;
    } else if (json_object_is_type(v, json_type_array) && json_object_array_length(v) == 2) {
        json_object *a = json_object_array_get_idx(v, 0), *b = json_object_array_get_idx(v, 1);
        if (!(json_object_is_type(a, json_type_double) || json_object_is_type(a, json_type_int)) ||
            !(json_object_is_type(b, json_type_double) || json_object_is_type(b, json_type_int)))
            return rt_keras_fail(c, RT_EINVAL, "%s must be a number or two numbers", key);
        *lo = json_object_get_double(a);
        *hi = json_object_get_double(b);
        if (sort && *hi < *lo) {
            const double t = *lo;
            *lo = *hi;
            *hi = t;
        }
    } else {
        return rt_keras_fail(c, RT_EINVAL, "%s must be a number or two numbers", key);
    }
    if (!isfinite(*lo) || !isfinite(*hi))
        return rt_keras_fail(c, RT_EINVAL, "%s must be finite", key);
    return 0;
}

/* the image input (H, W, C), channels last (the import transposes a
 * channels_first layer's input before it, as for the other layers) */
static int ki_image(rt_keras_ctx *c)
{
    int rc = rt_keras_channels_last(c);
    if (rc < 0)
        return rc;
    if (c->in[0].ndim != 3)
        return rt_keras_fail(c, RT_ESHAPE, "%s needs images (height, width, channels), got rank %d",
                             c->class_name, c->in[0].ndim);
    return 0;
}

/* the node, attributes at[0..n), and c->out: the input's shape */
static int ki_node(rt_keras_ctx *c, const char *op, int n, const rt_attr *at)
{
    const char *in[1] = {c->in[0].name};
    int rc = rt_graph_add_node(c->g, c->layer, op, 1, in, n, at);
    if (rc < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    c->out = c->in[0];
    snprintf(c->out.name, sizeof c->out.name, "%s", c->layer);
    c->out.mask[0] = 0;
    return 0;
}

/* fill_mode, interpolation, fill_value into at[*n..] */
static int ki_fill(rt_keras_ctx *c, rt_attr *at, int *n)
{
    const char *fm, *in;
    double fv;
    int rc;
    if ((rc = rt_keras_cfg_str(c, "fill_mode", "reflect", &fm)) < 0 ||
        (rc = rt_keras_cfg_str(c, "interpolation", "bilinear", &in)) < 0 ||
        (rc = rt_keras_cfg_float(c, "fill_value", 0.0, &fv)) < 0)
        return rc;
    at[(*n)++] = (rt_attr){.name = "fill_mode", .kind = RT_ATTR_STR, .s = fm};
    at[(*n)++] = (rt_attr){.name = "interpolation", .kind = RT_ATTR_STR, .s = in};
    at[(*n)++] = (rt_attr){.name = "fill_value", .kind = RT_ATTR_FLOAT, .f = fv};
    return 0;
}

static rt_attr ki_f(const char *name, double v)
{
    return (rt_attr){.name = name, .kind = RT_ATTR_FLOAT, .f = v};
}

/* Keras 3.6 and later flip both ways on one draw and write data_format
 * into RandomFlip's config (image_preprocessing/random_flip.py); Keras 2
 * and Keras 3 up to 3.5 (preprocessing/random_flip.py) draw each flip
 * apart and write no data_format */
static int k_randomflip(rt_keras_ctx *c)
{
    const char *mode;
    const int joint = rt_keras_cfg_get(c, "data_format") != NULL;
    int rc = ki_image(c);
    if (rc < 0 || (rc = rt_keras_cfg_str(c, "mode", "horizontal_and_vertical", &mode)) < 0)
        return rc;
    const rt_attr at[2] = {{.name = "mode", .kind = RT_ATTR_STR, .s = mode},
                           {.name = "joint", .kind = RT_ATTR_INT, .i = joint}};
    return ki_node(c, "RandomFlip", 2, at);
}

static int k_randomrotation(rt_keras_ctx *c)
{
    double lo, hi;
    int rc = ki_image(c), has, n = 2;
    if (rc < 0 || (rc = ki_factor(c, "factor", 2, 0, &lo, &hi, &has)) < 0)
        return rc;
    if (!has)
        return rt_keras_fail(c, RT_EINVAL, "RandomRotation needs a factor");
    rt_attr at[5] = {ki_f("lower", lo), ki_f("upper", hi)};
    if ((rc = ki_fill(c, at, &n)) < 0)
        return rc;
    return ki_node(c, "RandomRotation", n, at);
}

/* RandomTranslation, RandomZoom: height_factor, width_factor */
static int ki_hw(rt_keras_ctx *c, const char *op, int width_optional)
{
    double hl, hh, wl, wh;
    int rc = ki_image(c), hp, wp, n = 2;
    if (rc < 0 || (rc = ki_factor(c, "height_factor", 2, 0, &hl, &hh, &hp)) < 0 ||
        (rc = ki_factor(c, "width_factor", 2, 0, &wl, &wh, &wp)) < 0)
        return rc;
    if (!hp || (!wp && !width_optional))
        return rt_keras_fail(c, RT_EINVAL, "%s needs height_factor%s", op,
                             width_optional ? "" : " and width_factor");
    rt_attr at[7] = {ki_f("height_lower", hl), ki_f("height_upper", hh)};
    if (wp) {
        at[n++] = ki_f("width_lower", wl);
        at[n++] = ki_f("width_upper", wh);
    }
    if ((rc = ki_fill(c, at, &n)) < 0)
        return rc;
    return ki_node(c, op, n, at);
}

static int k_randomtranslation(rt_keras_ctx *c) { return ki_hw(c, "RandomTranslation", 0); }
static int k_randomzoom(rt_keras_ctx *c) { return ki_hw(c, "RandomZoom", 1); }

/* RandomContrast, RandomBrightness: factor and value_range */
static int ki_value(rt_keras_ctx *c, const char *op, int sym)
{
    double lo, hi, v0 = 0, v1 = 255;
    int rc = ki_image(c), has, vp;
    if (rc < 0 || (rc = ki_factor(c, "factor", sym, sym == 1, &lo, &hi, &has)) < 0 ||
        (rc = ki_factor(c, "value_range", 0, 1, &v0, &v1, &vp)) < 0)
        return rc;
    if (!has)
        return rt_keras_fail(c, RT_EINVAL, "%s needs a factor", op);
    if (!vp)
        v0 = 0, v1 = 255;
    const rt_attr at[4] = {ki_f("lower", lo), ki_f("upper", hi), ki_f("value_min", v0),
                           ki_f("value_max", v1)};
    return ki_node(c, op, 4, at);
}

static int k_randomcontrast(rt_keras_ctx *c) { return ki_value(c, "RandomContrast", 0); }
static int k_randombrightness(rt_keras_ctx *c) { return ki_value(c, "RandomBrightness", 1); }

/* RandomCrop: height and width, the output's (in every mode: the op
 * resizes outside training, as Keras 2.6+ and Keras 3) */
static int k_randomcrop(rt_keras_ctx *c)
{
    int64_t h, w;
    int rc = ki_image(c);
    if (rc < 0 || (rc = rt_keras_cfg_int(c, "height", 0, &h)) < 0 ||
        (rc = rt_keras_cfg_int(c, "width", 0, &w)) < 0)
        return rc;
    if (h < 1 || w < 1)
        return rt_keras_fail(c, RT_EINVAL, "RandomCrop needs height and width >= 1, got %lld, %lld",
                             (long long)h, (long long)w);
    const rt_attr at[2] = {{.name = "height", .kind = RT_ATTR_INT, .i = h},
                           {.name = "width", .kind = RT_ATTR_INT, .i = w}};
    if ((rc = ki_node(c, "RandomCrop", 2, at)) < 0)
        return rc;
    c->out.dims[0] = h;
    c->out.dims[1] = w;
    return 0;
}

static const struct {
    const char *class_name;
    rt_keras_layer_fn fn;
} ki_table[] = {
    {"RandomFlip", k_randomflip},
    {"RandomRotation", k_randomrotation},
    {"RandomTranslation", k_randomtranslation},
    {"RandomZoom", k_randomzoom},
    {"RandomContrast", k_randomcontrast},
    {"RandomBrightness", k_randombrightness},
    {"RandomCrop", k_randomcrop},
};

int rt_keras_image_find(const char *class_name, rt_keras_layer_fn *fn, int *n_in)
{
    for (size_t i = 0; i < sizeof ki_table / sizeof ki_table[0]; i++)
        if (strcmp(ki_table[i].class_name, class_name) == 0) {
            *fn = ki_table[i].fn;
            *n_in = 1;
            return 1;
        }
    return 0;
}
