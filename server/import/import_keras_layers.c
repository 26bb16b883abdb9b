/*
 * import_keras_layers.c - the Keras layers beyond the core set of
 * import_keras.c: merging (Add, Subtract, Multiply, Average, Maximum,
 * Minimum), shape (ZeroPadding1D/2D, Cropping1D/2D, UpSampling1D/2D,
 * Permute, RepeatVector), convolution (Conv1D, DepthwiseConv2D,
 * SeparableConv2D, Conv2DTranspose), pooling (MaxPooling1D,
 * AveragePooling1D, GlobalMax/GlobalAveragePooling1D (the average of the
 * kept steps under a step mask, as Keras), GlobalMaxPooling2D),
 * LayerNormalization, the activation layers (LeakyReLU, PReLU, ELU, ReLU,
 * Softmax, ThresholdedReLU), the train-time noise layers (SpatialDropout1D/
 * 2D, GaussianNoise, GaussianDropout), Identity, Normalization and the
 * activation names beyond relu/sigmoid/tanh/softmax.
 *
 * Weights keep Keras' names and layouts so get/set weights interoperate:
 *   Conv1D             kernel (k, cin/groups, filters), bias (filters)
 *   DepthwiseConv2D    depthwise_kernel (kh, kw, cin, mult), bias (cin*mult)
 *   SeparableConv2D    depthwise_kernel (kh, kw, cin, mult), pointwise_kernel
 *                      (1, 1, cin*mult, filters), bias (filters)
 *   Conv2DTranspose    kernel (kh, kw, filters, cin), bias (filters)
 *   LayerNormalization gamma, beta (last axis)
 *   PReLU              alpha: the input's per-sample shape, shared axes 1
 * A kernel whose engine shape differs (Conv1D's and the depthwise ones)
 * goes through a Reshape node "<layer>/<weight>_4d": same memory order.
 * 1-D layers run as their 2-D op on (B, T, 1, C) between two Reshapes.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "import_keras.h"
#include "rt_act.h"
#include "rt_engine_impl.h"

/* ---------------------------------------------------------------- helpers */

static int kl_node(rt_keras_ctx *c, const char *name, const char *op, int n_in, const char **in,
                   int n_attr, const rt_attr *at)
{
    int rc = rt_graph_add_node(c->g, name, op, n_in, in, n_attr, at);
    if (rc < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    return 0;
}

static int kl_param(rt_keras_ctx *c, const char *name, int nd, const int64_t *d, rt_init init,
                    int trainable)
{
    int rc = rt_graph_add_param(c->g, name, nd, d, init, trainable, NULL);
    if (rc < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    return 0;
}

/* c->out = (name, dims) */
static void kl_out(rt_keras_ctx *c, const char *name, int nd, const int64_t *d)
{
    snprintf(c->out.name, sizeof c->out.name, "%s", name);
    c->out.ndim = nd;
    for (int i = 0; i < nd; i++)
        c->out.dims[i] = d[i];
}

/* a one-input node named name on input in, output dims d */
static int kl_unary(rt_keras_ctx *c, const char *name, const char *op, const char *in, int n_attr,
                    const rt_attr *at, int nd, const int64_t *d)
{
    int rc = kl_node(c, name, op, 1, &in, n_attr, at);
    if (rc < 0)
        return rc;
    kl_out(c, name, nd, d);
    return 0;
}

static int kl_reshape(rt_keras_ctx *c, const char *name, const char *in, int nd, const int64_t *d)
{
    rt_attr a = {.name = "shape", .kind = RT_ATTR_INTS, .n = nd, .ints = d};
    return kl_node(c, name, "Reshape", 1, &in, 1, &a);
}

static int kl_channels_last(rt_keras_ctx *c, int rank)
{
    int rc = rt_keras_channels_last(c);
    if (rc < 0)
        return rc;
    if (rank && c->in[0].ndim != rank)
        return rt_keras_fail(c, RT_ESHAPE, "%s needs inputs of rank %d (batch excluded), got %d",
                             c->class_name, rank, c->in[0].ndim);
    return 0;
}

/* n integers (an int is repeated), each in lo..RT__MAX_WINDOW; def when
 * absent or null */
static int kl_tuple(rt_keras_ctx *c, const char *key, int n, const int64_t *def, int64_t lo,
                    int64_t *out)
{
    int64_t v[4];
    int k = rt_keras_cfg_ints(c, key, v, 4);
    if (k < 0)
        return k;
    for (int i = 0; i < n; i++)
        out[i] = k == 0 ? def[i] : k == 1 ? v[0] : v[i];
    if (k > 1 && k != n)
        return rt_keras_fail(c, RT_EINVAL, "'%s' needs %d values, got %d", key, n, k);
    for (int i = 0; i < n; i++)
        if (out[i] < lo || out[i] > RT__MAX_WINDOW)
            return rt_keras_fail(c, RT_EINVAL, "'%s' value %lld is outside %lld..1048576", key,
                                 (long long)out[i], (long long)lo);
    return 0;
}

/* padding "valid", "same" or (causal_ok) "causal": 0, 1, 2 */
static int kl_padding(rt_keras_ctx *c, int causal_ok, int *mode)
{
    const char *p;
    int rc = rt_keras_cfg_str(c, "padding", "valid", &p);
    if (rc < 0)
        return rc;
    if (!strcmp(p, "valid"))
        *mode = 0;
    else if (!strcmp(p, "same"))
        *mode = 1;
    else if (causal_ok && !strcmp(p, "causal"))
        *mode = 2;
    else
        return rt_keras_fail(c, RT_EINVAL, "padding '%.20s' is not supported", p);
    return 0;
}

/* Keras' padding/cropping amounts: for dims == 1 an int n or [a, b]; for
 * dims == 2 an int, [a, b] (symmetric per dim) or [[t, b], [l, r]].
 * out[i][0] before, out[i][1] after, each >= 0. */
static int kl_amounts(rt_keras_ctx *c, const char *key, int dims, int64_t def, int64_t out[2][2])
{
    for (int i = 0; i < dims; i++)
        out[i][0] = out[i][1] = def;
    json_object *v = rt_keras_cfg_get(c, key);
    if (!v)
        return 0;
    if (json_object_is_type(v, json_type_int)) {
        for (int i = 0; i < dims; i++)
            out[i][0] = out[i][1] = json_object_get_int64(v);
    } else if (json_object_is_type(v, json_type_array) && json_object_array_length(v) == 2) {
        for (int i = 0; i < 2; i++) {
            json_object *e = json_object_array_get_idx(v, (size_t)i);
            if (e && json_object_is_type(e, json_type_int)) {
                if (dims == 1)
                    out[0][i] = json_object_get_int64(e);
                else
                    out[i][0] = out[i][1] = json_object_get_int64(e);
            } else if (dims == 2 && e && json_object_is_type(e, json_type_array) &&
                       json_object_array_length(e) == 2) {
                for (int j = 0; j < 2; j++) {
                    json_object *f = json_object_array_get_idx(e, (size_t)j);
                    if (!f || !json_object_is_type(f, json_type_int))
                        return rt_keras_fail(c, RT_EINVAL, "'%s' must hold integers", key);
                    out[i][j] = json_object_get_int64(f);
                }
            } else {
                return rt_keras_fail(c, RT_EINVAL, "'%s' must hold integers or pairs", key);
            }
        }
    } else {
        return rt_keras_fail(c, RT_EINVAL, "'%s' must be an integer or %s", key,
                             dims == 1 ? "a pair" : "two pairs");
    }
    for (int i = 0; i < dims; i++)
        for (int j = 0; j < 2; j++)
            if (out[i][j] < 0 || out[i][j] > RT__MAX_WINDOW)
                return rt_keras_fail(c, RT_EINVAL, "'%s' value %lld is outside 0..1048576", key,
                                     (long long)out[i][j]);
    return 0;
}

/* -------------------------------------------------------------- activations */

/* Keras' selu constants (keras.activations.selu) */
#define KL_SELU_ALPHA 1.67326324235437728481704
#define KL_SELU_SCALE 1.05070098735548049341933

int rt_keras_layers_activation(rt_keras_ctx *c, const char *act, const char *node_name)
{
    static const struct {
        const char *keras, *op;
        const char *a1;
        double v1;
        const char *a2;
        double v2;
    } acts[] = {
        {"elu", "Elu", "alpha", 1.0, NULL, 0},
        {"selu", "Selu", "alpha", KL_SELU_ALPHA, "gamma", KL_SELU_SCALE},
        {"gelu", "Gelu", NULL, 0, NULL, 0},
        {"swish", "Swish", "alpha", 1.0, NULL, 0},
        {"silu", "Swish", "alpha", 1.0, NULL, 0},
        {"softplus", "Softplus", NULL, 0, NULL, 0},
        {"softsign", "Softsign", NULL, 0, NULL, 0},
        /* Keras 2's hard_sigmoid: clip(0.2 x + 0.5, 0, 1) */
        {"hard_sigmoid", "HardSigmoid", "alpha", 0.2, "beta", 0.5},
        {"relu6", "Clip", "min", 0.0, "max", 6.0},
        {"exponential", "Exp", NULL, 0, NULL, 0},
        {"leaky_relu", "LeakyRelu", "alpha", 0.2, NULL, 0},
        /* Keras 3's: x relu6(x + 3) / 6 */
        {"hard_silu", "HardSwish", "alpha", 1.0 / 6.0, "beta", 0.5},
        {"hard_swish", "HardSwish", "alpha", 1.0 / 6.0, "beta", 0.5},
        {"mish", "Mish", NULL, 0, NULL, 0},
        {"log_sigmoid", "LogSigmoid", NULL, 0, NULL, 0},
    };
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        if (strcmp(act, acts[i].keras) != 0)
            continue;
        char name[RT_KERAS_NAME];
        int rc;
        if (node_name)
            snprintf(name, sizeof name, "%s", node_name);
        else if ((rc = rt_keras_name(c, name, act)) < 0)
            return rc;
        rt_attr at[2];
        int na = 0;
        if (acts[i].a1)
            at[na++] = (rt_attr){.name = acts[i].a1, .kind = RT_ATTR_FLOAT, .f = acts[i].v1};
        if (acts[i].a2)
            at[na++] = (rt_attr){.name = acts[i].a2, .kind = RT_ATTR_FLOAT, .f = acts[i].v2};
        const char *in = c->out.name;
        if ((rc = kl_node(c, name, acts[i].op, 1, &in, na, at)) < 0)
            return rc;
        snprintf(c->out.name, sizeof c->out.name, "%s", name);
        return 0;
    }
    return 1;
}

/* the layer's "activation" after its node (c->out) */
static int kl_activation(rt_keras_ctx *c, const char *act)
{
    return rt_keras_add_activation(c, act);
}

/* ------------------------------------------------------------------ merging */

typedef enum { KL_ADD, KL_SUB, KL_MUL, KL_AVG, KL_MAX, KL_MIN } kl_merge;

static int kl_merge_layer(rt_keras_ctx *c, kl_merge kind)
{
    static const char *ops[] = {"Add", "Sub", "Mul", "Add", "Max", "Min"};
    if (c->n_in < 2)
        return rt_keras_fail(c, RT_EINVAL, "%s needs at least 2 inputs, got %d", c->class_name,
                             c->n_in);
    if (kind == KL_SUB && c->n_in != 2)
        return rt_keras_fail(c, RT_EINVAL, "Subtract takes exactly 2 inputs, got %d", c->n_in);
    /* same rank; each dim equal or 1 (broadcast), as Keras' merge layers */
    rt_keras_tensor o = c->in[0];
    for (int i = 1; i < c->n_in; i++) {
        if (c->in[i].ndim != o.ndim)
            return rt_keras_fail(c, RT_ESHAPE, "%s inputs have ranks %d and %d", c->class_name,
                                 o.ndim, c->in[i].ndim);
        for (int j = 0; j < o.ndim; j++) {
            const int64_t a = o.dims[j], b = c->in[i].dims[j];
            if (a != b && a != 1 && b != 1)
                return rt_keras_fail(c, RT_ESHAPE,
                                     "%s input %d has dim %d = %lld, input 0 has %lld",
                                     c->class_name, i, j + 1, (long long)b, (long long)a);
            o.dims[j] = a == 1 ? b : a;
        }
    }
    char prev[RT_KERAS_NAME], name[RT_KERAS_NAME];
    snprintf(prev, sizeof prev, "%s", c->in[0].name);
    int rc;
    for (int i = 1; i < c->n_in; i++) {
        const int last = i == c->n_in - 1 && kind != KL_AVG;
        if (last) {
            if ((rc = rt_keras_name(c, name, NULL)) < 0)
                return rc;
        } else {
            char sfx[16];
            snprintf(sfx, sizeof sfx, "%s%d", kind == KL_AVG ? "sum" : "acc", i);
            if ((rc = rt_keras_name(c, name, sfx)) < 0)
                return rc;
        }
        const char *in[2] = {prev, c->in[i].name};
        if ((rc = kl_node(c, name, ops[kind], 2, in, 0, NULL)) < 0)
            return rc;
        snprintf(prev, sizeof prev, "%s", name);
    }
    if (kind == KL_AVG) {
        rt_attr a = {.name = "alpha", .kind = RT_ATTR_FLOAT, .f = 1.0 / c->n_in};
        if ((rc = rt_keras_name(c, name, NULL)) < 0)
            return rc;
        const char *in = prev;
        if ((rc = kl_node(c, name, "Scale", 1, &in, 1, &a)) < 0)
            return rc;
    }
    kl_out(c, name, o.ndim, o.dims);
    return 0;
}

static int k_add(rt_keras_ctx *c) { return kl_merge_layer(c, KL_ADD); }
static int k_subtract(rt_keras_ctx *c) { return kl_merge_layer(c, KL_SUB); }
static int k_multiply(rt_keras_ctx *c) { return kl_merge_layer(c, KL_MUL); }
static int k_average(rt_keras_ctx *c) { return kl_merge_layer(c, KL_AVG); }
static int k_maximum(rt_keras_ctx *c) { return kl_merge_layer(c, KL_MAX); }
static int k_minimum(rt_keras_ctx *c) { return kl_merge_layer(c, KL_MIN); }

/* -------------------------------------------------------------------- shape */

/* ZeroPadding1D/2D (sign 1) and Cropping1D/2D (sign -1) as Pad over the
 * spatial dims of (T, C) or (H, W, C) */
static int kl_pad_layer(rt_keras_ctx *c, int dims, int sign)
{
    int rc;
    if ((rc = kl_channels_last(c, dims + 1)) < 0)
        return rc;
    int64_t amt[2][2];
    const char *key = sign > 0 ? "padding" : "cropping";
    /* Keras' defaults: padding 1; cropping 1 in 1-D, 0 in 2-D */
    if ((rc = kl_amounts(c, key, dims, sign > 0 || dims == 1 ? 1 : 0, amt)) < 0)
        return rc;
    const int r = dims + 2; /* batch, spatial dims, channels */
    int64_t pads[8] = {0}, od[RT_MAX_DIMS];
    for (int i = 0; i < c->in[0].ndim; i++)
        od[i] = c->in[0].dims[i];
    for (int i = 0; i < dims; i++) {
        pads[1 + i] = sign * amt[i][0];
        pads[r + 1 + i] = sign * amt[i][1];
        od[i] += sign * (amt[i][0] + amt[i][1]);
        if (od[i] < 1)
            return rt_keras_fail(c, RT_ESHAPE, "%s leaves dim %d of %lld empty", c->class_name,
                                 i + 1, (long long)c->in[0].dims[i]);
    }
    rt_attr a = {.name = "pads", .kind = RT_ATTR_INTS, .n = 2 * r, .ints = pads};
    return kl_unary(c, c->layer, "Pad", c->in[0].name, 1, &a, dims + 1, od);
}

static int k_zeropad1d(rt_keras_ctx *c) { return kl_pad_layer(c, 1, 1); }
static int k_zeropad2d(rt_keras_ctx *c) { return kl_pad_layer(c, 2, 1); }
static int k_crop1d(rt_keras_ctx *c) { return kl_pad_layer(c, 1, -1); }
static int k_crop2d(rt_keras_ctx *c) { return kl_pad_layer(c, 2, -1); }

static int k_upsample2d(rt_keras_ctx *c)
{
    int rc;
    int64_t s[2];
    const char *interp;
    static const int64_t two[2] = {2, 2};
    if ((rc = kl_channels_last(c, 3)) < 0 || (rc = kl_tuple(c, "size", 2, two, 1, s)) < 0 ||
        (rc = rt_keras_cfg_str(c, "interpolation", "nearest", &interp)) < 0)
        return rc;
    if (strcmp(interp, "nearest") != 0 && strcmp(interp, "bilinear") != 0)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "interpolation '%.20s' is not supported (nearest, bilinear)", interp);
    const rt_keras_tensor *x = &c->in[0];
    int64_t od[3] = {x->dims[0] * s[0], x->dims[1] * s[1], x->dims[2]};
    rt_attr a[2] = {{.name = "scales", .kind = RT_ATTR_INTS, .n = 2, .ints = s},
                    {.name = "mode", .kind = RT_ATTR_STR, .s = interp}};
    return kl_unary(c, c->layer, "Upsample", x->name, 2, a, 3, od);
}

/* (B, T, C) -> (B, T, 1, C) -> Upsample (s, 1) -> (B, T*s, C); RepeatVector
 * is the same on (B, 1, 1, F) with (n, 1) */
static int kl_up1d(rt_keras_ctx *c, int64_t T, int64_t C, int64_t s)
{
    char r1[RT_KERAS_NAME], up[RT_KERAS_NAME];
    int rc;
    if ((rc = rt_keras_name(c, r1, "4d")) < 0 || (rc = rt_keras_name(c, up, "up")) < 0)
        return rc;
    const int64_t d4[3] = {T, 1, C}, sc[2] = {s, 1}, od[2] = {T * s, C};
    rt_attr a = {.name = "scales", .kind = RT_ATTR_INTS, .n = 2, .ints = sc};
    const char *in = r1;
    if ((rc = kl_reshape(c, r1, c->in[0].name, 3, d4)) < 0 ||
        (rc = kl_node(c, up, "Upsample", 1, &in, 1, &a)) < 0 ||
        (rc = kl_reshape(c, c->layer, up, 2, od)) < 0)
        return rc;
    kl_out(c, c->layer, 2, od);
    return 0;
}

static int k_upsample1d(rt_keras_ctx *c)
{
    int rc;
    int64_t s;
    static const int64_t two[1] = {2};
    if ((rc = kl_tuple(c, "size", 1, two, 1, &s)) < 0)
        return rc;
    if (c->in[0].ndim != 2)
        return rt_keras_fail(c, RT_ESHAPE, "UpSampling1D needs (steps, features) inputs");
    return kl_up1d(c, c->in[0].dims[0], c->in[0].dims[1], s);
}

static int k_repeatvector(rt_keras_ctx *c)
{
    int64_t n;
    int rc = rt_keras_cfg_int(c, "n", 0, &n);
    if (rc < 0)
        return rc;
    if (n < 1 || n > RT__MAX_WINDOW)
        return rt_keras_fail(c, RT_EINVAL, "RepeatVector needs n in 1..1048576");
    if (c->in[0].ndim != 1)
        return rt_keras_fail(c, RT_ESHAPE, "RepeatVector needs (features) inputs, got rank %d",
                             c->in[0].ndim);
    return kl_up1d(c, 1, c->in[0].dims[0], n);
}

static int k_permute(rt_keras_ctx *c)
{
    int64_t dims[RT_MAX_DIMS], perm[RT_MAX_DIMS + 1] = {0}, od[RT_MAX_DIMS];
    const int nd = c->in[0].ndim;
    int n = rt_keras_cfg_ints(c, "dims", dims, RT_MAX_DIMS);
    if (n < 0)
        return n;
    if (n != nd)
        return rt_keras_fail(c, RT_EINVAL, "Permute dims has %d entries, the input rank is %d", n,
                             nd);
    int seen[RT_MAX_DIMS + 1] = {0};
    for (int i = 0; i < n; i++) {
        if (dims[i] < 1 || dims[i] > nd || seen[dims[i]]++)
            return rt_keras_fail(c, RT_EINVAL, "Permute dims is not a permutation of 1..%d", nd);
        perm[i + 1] = dims[i];
        od[i] = c->in[0].dims[dims[i] - 1];
    }
    rt_attr a = {.name = "perm", .kind = RT_ATTR_INTS, .n = n + 1, .ints = perm};
    return kl_unary(c, c->layer, "Transpose", c->in[0].name, 1, &a, nd, od);
}

/* -------------------------------------------------------------- convolution */

typedef struct kl_conv {
    int64_t filters, mult, groups, k[2], s[2], d[2], op[2];
    int pad, use_bias, trainable, has_op;
    const char *act;
    rt_init kinit, binit, pinit;
} kl_conv;

/* the settings every convolution reads; dims 1 or 2 */
static int kl_conv_cfg(rt_keras_ctx *c, int dims, kl_conv *v, int causal_ok)
{
    int rc;
    static const int64_t one[2] = {1, 1}, zero[2] = {0, 0};
    memset(v, 0, sizeof *v);
    if ((rc = kl_channels_last(c, dims + 1)) < 0 ||
        (rc = kl_tuple(c, "kernel_size", dims, zero, 1, v->k)) < 0 ||
        (rc = kl_tuple(c, "strides", dims, one, 1, v->s)) < 0 ||
        (rc = kl_tuple(c, "dilation_rate", dims, one, 1, v->d)) < 0 ||
        (rc = kl_padding(c, causal_ok, &v->pad)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "use_bias", 1, &v->use_bias)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "trainable", 1, &v->trainable)) < 0 ||
        (rc = rt_keras_cfg_str(c, "activation", "linear", &v->act)) < 0 ||
        (rc = rt_keras_cfg_int(c, "filters", 0, &v->filters)) < 0 ||
        (rc = rt_keras_cfg_int(c, "depth_multiplier", 1, &v->mult)) < 0 ||
        (rc = rt_keras_cfg_int(c, "groups", 1, &v->groups)) < 0 ||
        (rc = rt_keras_cfg_init(c, "bias_initializer", RT_INIT_ZEROS, &v->binit)) < 0)
        return rc;
    if (dims == 1) {
        v->k[1] = v->s[1] = v->d[1] = 1;
    }
    if (v->mult < 1 || v->mult > RT__MAX_WINDOW)
        return rt_keras_fail(c, RT_EINVAL, "depth_multiplier must be >= 1");
    if (v->groups < 1)
        return rt_keras_fail(c, RT_EINVAL, "groups must be >= 1");
    if ((v->s[0] > 1 || v->s[1] > 1) && (v->d[0] > 1 || v->d[1] > 1))
        return rt_keras_fail(c, RT_EINVAL, "strides > 1 with dilation_rate > 1 is not allowed");
    return 0;
}

/* Conv2D node: x, kernel value (engine layout), bias name or NULL */
static int kl_conv2d_node(rt_keras_ctx *c, const char *name, const char *x, const char *w,
                          const char *b, const kl_conv *v, int group, int same, const char *act)
{
    rt_attr at[5] = {
        {.name = "strides", .kind = RT_ATTR_INTS, .n = 2, .ints = v->s},
        {.name = "dilations", .kind = RT_ATTR_INTS, .n = 2, .ints = v->d},
        {.name = "padding", .kind = RT_ATTR_STR, .s = same ? "same" : "valid"},
        {.name = "group", .kind = RT_ATTR_INT, .i = group},
        {.name = "activation", .kind = RT_ATTR_STR, .s = act},
    };
    const char *in[3] = {x, w, b};
    return kl_node(c, name, "Conv2D", b ? 3 : 2, in, 5, at);
}

/* relu/sigmoid/tanh run inside Conv2D's output loop */
static int kl_fusable(const char *act)
{
    return !strcmp(act, "relu") || !strcmp(act, "sigmoid") || !strcmp(act, "tanh");
}

/* Conv1D: (T, C) -> (T, 1, C) -> Conv2D (k, 1) -> (OT, F). 'causal' pads
 * (k - 1) * d steps before, then runs 'valid'. */
static int k_conv1d(rt_keras_ctx *c)
{
    kl_conv v;
    int rc;
    if ((rc = kl_conv_cfg(c, 1, &v, 1)) < 0 ||
        (rc = rt_keras_cfg_init(c, "kernel_initializer", RT_INIT_GLOROT_UNIFORM, &v.kinit)) < 0)
        return rc;
    const int64_t T = c->in[0].dims[0], C = c->in[0].dims[1];
    if (v.filters <= 0)
        return rt_keras_fail(c, RT_EINVAL, "Conv1D needs filters > 0");
    if (C % v.groups || v.filters % v.groups)
        return rt_keras_fail(c, RT_EINVAL, "groups %lld must divide %lld channels and %lld filters",
                             (long long)v.groups, (long long)C, (long long)v.filters);
    char kname[RT_KERAS_NAME], k4[RT_KERAS_NAME], bname[RT_KERAS_NAME], x4[RT_KERAS_NAME],
        cv[RT_KERAS_NAME];
    if ((rc = rt_keras_name(c, kname, "kernel")) < 0 ||
        (rc = rt_keras_name(c, k4, "kernel_4d")) < 0 ||
        (rc = rt_keras_name(c, bname, "bias")) < 0 || (rc = rt_keras_name(c, x4, "4d")) < 0 ||
        (rc = rt_keras_name(c, cv, "conv")) < 0)
        return rc;
    const int64_t kd[3] = {v.k[0], C / v.groups, v.filters};
    const int64_t kd4[4] = {v.k[0], 1, C / v.groups, v.filters};
    if ((rc = kl_param(c, kname, 3, kd, v.kinit, v.trainable)) < 0 ||
        (v.use_bias && (rc = kl_param(c, bname, 1, &v.filters, v.binit, v.trainable)) < 0) ||
        (rc = kl_reshape(c, k4, kname, 4, kd4)) < 0)
        return rc;
    int64_t Tin = T;
    const int64_t xd4[3] = {T, 1, C};
    if ((rc = kl_reshape(c, x4, c->in[0].name, 3, xd4)) < 0)
        return rc;
    const char *xin = x4;
    char padn[RT_KERAS_NAME];
    if (v.pad == 2) {
        const int64_t before = (v.k[0] - 1) * v.d[0];
        int64_t pads[8] = {0, before, 0, 0, 0, 0, 0, 0};
        rt_attr a = {.name = "pads", .kind = RT_ATTR_INTS, .n = 8, .ints = pads};
        if ((rc = rt_keras_name(c, padn, "causal_pad")) < 0 ||
            (rc = kl_node(c, padn, "Pad", 1, &xin, 1, &a)) < 0)
            return rc;
        xin = padn;
        Tin += before;
    }
    int64_t OT;
    if ((rc = rt_keras_window_out(c, Tin, v.k[0], v.s[0], v.d[0], v.pad == 1, &OT)) < 0)
        return rc;
    const int fuse = kl_fusable(v.act);
    if ((rc = kl_conv2d_node(c, cv, xin, k4, v.use_bias ? bname : NULL, &v, (int)v.groups,
                             v.pad == 1, fuse ? v.act : "linear")) < 0)
        return rc;
    const int64_t od[2] = {OT, v.filters};
    if ((rc = kl_reshape(c, c->layer, cv, 2, od)) < 0)
        return rc;
    kl_out(c, c->layer, 2, od);
    return fuse ? 0 : kl_activation(c, v.act);
}

/* DepthwiseConv2D and SeparableConv2D's first half: kernel (kh, kw, C,
 * mult) as a grouped Conv2D (group C). Parameters first (Keras' weight
 * order is the caller's), then dw_node adds the Reshape and the Conv2D. */
static int kl_dw_param(rt_keras_ctx *c, const kl_conv *v, char *kname)
{
    int rc;
    const int64_t C = c->in[0].dims[2];
    const int64_t kd[4] = {v->k[0], v->k[1], C, v->mult};
    if ((rc = rt_keras_name(c, kname, "depthwise_kernel")) < 0)
        return rc;
    return kl_param(c, kname, 4, kd, v->kinit, v->trainable);
}

static int kl_dw_node(rt_keras_ctx *c, const kl_conv *v, const char *kname, const char *node,
                      const char *bias, const char *act, int64_t *oh, int64_t *ow)
{
    int rc;
    const rt_keras_tensor *x = &c->in[0];
    const int64_t C = x->dims[2];
    char k4[RT_KERAS_NAME];
    const int64_t kd4[4] = {v->k[0], v->k[1], 1, C * v->mult};
    if ((rc = rt_keras_name(c, k4, "depthwise_kernel_4d")) < 0 ||
        (rc = kl_reshape(c, k4, kname, 4, kd4)) < 0)
        return rc;
    if ((rc = rt_keras_window_out(c, x->dims[0], v->k[0], v->s[0], v->d[0], v->pad == 1, oh)) < 0 ||
        (rc = rt_keras_window_out(c, x->dims[1], v->k[1], v->s[1], v->d[1], v->pad == 1, ow)) < 0)
        return rc;
    return kl_conv2d_node(c, node, x->name, k4, bias, v, (int)C, v->pad == 1, act);
}

static int k_depthwise2d(rt_keras_ctx *c)
{
    kl_conv v;
    int rc;
    if ((rc = kl_conv_cfg(c, 2, &v, 0)) < 0 ||
        (rc = rt_keras_cfg_init(c, "depthwise_initializer", RT_INIT_GLOROT_UNIFORM, &v.kinit)) < 0)
        return rc;
    const int64_t OC = c->in[0].dims[2] * v.mult;
    char kname[RT_KERAS_NAME], bname[RT_KERAS_NAME];
    if ((rc = rt_keras_name(c, bname, "bias")) < 0 || (rc = kl_dw_param(c, &v, kname)) < 0 ||
        (v.use_bias && (rc = kl_param(c, bname, 1, &OC, v.binit, v.trainable)) < 0))
        return rc;
    int64_t oh, ow;
    const int fuse = kl_fusable(v.act);
    if ((rc = kl_dw_node(c, &v, kname, c->layer, v.use_bias ? bname : NULL, fuse ? v.act : "linear",
                         &oh, &ow)) < 0)
        return rc;
    const int64_t od[3] = {oh, ow, OC};
    kl_out(c, c->layer, 3, od);
    return fuse ? 0 : kl_activation(c, v.act);
}

/* SeparableConv2D: depthwise (strides, dilation, padding), then a 1x1
 * pointwise Conv2D with the bias and the activation */
static int k_separable2d(rt_keras_ctx *c)
{
    kl_conv v;
    int rc;
    rt_init pinit;
    if ((rc = kl_conv_cfg(c, 2, &v, 0)) < 0 ||
        (rc = rt_keras_cfg_init(c, "depthwise_initializer", RT_INIT_GLOROT_UNIFORM, &v.kinit)) <
            0 ||
        (rc = rt_keras_cfg_init(c, "pointwise_initializer", RT_INIT_GLOROT_UNIFORM, &pinit)) < 0)
        return rc;
    if (v.filters <= 0)
        return rt_keras_fail(c, RT_EINVAL, "SeparableConv2D needs filters > 0");
    /* Keras 2 writes its Conv base's kernel_* settings too; the layer has
     * no "kernel" weight and never uses them */
    rt_keras_cfg_unused(c, "kernel_initializer");
    rt_keras_cfg_unused(c, "kernel_regularizer");
    rt_keras_cfg_unused(c, "kernel_constraint");
    const int64_t M = c->in[0].dims[2] * v.mult;
    char kname[RT_KERAS_NAME], pname[RT_KERAS_NAME], bname[RT_KERAS_NAME], dw[RT_KERAS_NAME];
    const int64_t pd[4] = {1, 1, M, v.filters};
    if ((rc = rt_keras_name(c, pname, "pointwise_kernel")) < 0 ||
        (rc = rt_keras_name(c, bname, "bias")) < 0 ||
        (rc = rt_keras_name(c, dw, "depthwise")) < 0 || (rc = kl_dw_param(c, &v, kname)) < 0 ||
        (rc = kl_param(c, pname, 4, pd, pinit, v.trainable)) < 0 ||
        (v.use_bias && (rc = kl_param(c, bname, 1, &v.filters, v.binit, v.trainable)) < 0))
        return rc;
    int64_t oh, ow;
    if ((rc = kl_dw_node(c, &v, kname, dw, NULL, "linear", &oh, &ow)) < 0)
        return rc;
    kl_conv pw = v;
    pw.s[0] = pw.s[1] = pw.d[0] = pw.d[1] = 1;
    const int fuse = kl_fusable(v.act);
    if ((rc = kl_conv2d_node(c, c->layer, dw, pname, v.use_bias ? bname : NULL, &pw, 1, 0,
                             fuse ? v.act : "linear")) < 0)
        return rc;
    const int64_t od[3] = {oh, ow, v.filters};
    kl_out(c, c->layer, 3, od);
    return fuse ? 0 : kl_activation(c, v.act);
}

/* Conv2DTranspose: kernel (kh, kw, filters, C); output_padding null or a
 * pair, each < its stride */
static int k_conv2dtranspose(rt_keras_ctx *c)
{
    kl_conv v;
    int rc;
    if ((rc = kl_conv_cfg(c, 2, &v, 0)) < 0 ||
        (rc = rt_keras_cfg_init(c, "kernel_initializer", RT_INIT_GLOROT_UNIFORM, &v.kinit)) < 0)
        return rc;
    if (v.filters <= 0)
        return rt_keras_fail(c, RT_EINVAL, "Conv2DTranspose needs filters > 0");
    if (v.groups != 1)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED, "grouped Conv2DTranspose is not supported");
    int64_t opd[2];
    int nop = rt_keras_cfg_ints(c, "output_padding", opd, 2);
    if (nop < 0)
        return nop;
    if (nop == 1)
        opd[1] = opd[0];
    else if (nop != 0 && nop != 2)
        return rt_keras_fail(c, RT_EINVAL, "'output_padding' needs 2 values");
    for (int i = 0; nop && i < 2; i++)
        if (opd[i] < 0 || opd[i] >= v.s[i])
            return rt_keras_fail(c, RT_EINVAL, "output_padding %lld must be below the stride %lld",
                                 (long long)opd[i], (long long)v.s[i]);
    const rt_keras_tensor *x = &c->in[0];
    char kname[RT_KERAS_NAME], bname[RT_KERAS_NAME];
    const int64_t kd[4] = {v.k[0], v.k[1], v.filters, x->dims[2]};
    if ((rc = rt_keras_name(c, kname, "kernel")) < 0 ||
        (rc = rt_keras_name(c, bname, "bias")) < 0 ||
        (rc = kl_param(c, kname, 4, kd, v.kinit, v.trainable)) < 0 ||
        (v.use_bias && (rc = kl_param(c, bname, 1, &v.filters, v.binit, v.trainable)) < 0))
        return rc;
    rt_attr at[4] = {
        {.name = "strides", .kind = RT_ATTR_INTS, .n = 2, .ints = v.s},
        {.name = "dilations", .kind = RT_ATTR_INTS, .n = 2, .ints = v.d},
        {.name = "padding", .kind = RT_ATTR_STR, .s = v.pad == 1 ? "same" : "valid"},
        {.name = "output_padding", .kind = RT_ATTR_INTS, .n = 2, .ints = opd},
    };
    const char *in[3] = {x->name, kname, bname};
    if ((rc = kl_node(c, c->layer, "ConvTranspose", v.use_bias ? 3 : 2, in, nop ? 4 : 3, at)) < 0)
        return rc;
    /* Keras' deconv_output_length, as the op computes it */
    int64_t od[3] = {0, 0, v.filters};
    for (int i = 0; i < 2; i++) {
        const int64_t keff = (v.k[i] - 1) * v.d[i] + 1, in_ = x->dims[i];
        if (!nop)
            od[i] = v.pad == 1 ? in_ * v.s[i] : in_ * v.s[i] + (keff > v.s[i] ? keff - v.s[i] : 0);
        else
            od[i] = (in_ - 1) * v.s[i] + keff - 2 * (v.pad == 1 ? keff / 2 : 0) + opd[i];
        if (od[i] < 1)
            return rt_keras_fail(c, RT_ESHAPE, "Conv2DTranspose output is empty");
    }
    kl_out(c, c->layer, 3, od);
    return kl_activation(c, v.act);
}

/* ------------------------------------------------------------------ pooling */

/* MaxPooling1D / AveragePooling1D: (T, C) -> (T, 1, C) -> 2-D pool (p, 1) */
static int kl_pool1d(rt_keras_ctx *c, const char *op)
{
    int rc, pad = 0;
    int64_t p, s;
    static const int64_t two[1] = {2};
    if ((rc = kl_channels_last(c, 2)) < 0 || (rc = kl_tuple(c, "pool_size", 1, two, 1, &p)) < 0 ||
        (rc = kl_tuple(c, "strides", 1, &p, 1, &s)) < 0 || (rc = kl_padding(c, 0, &pad)) < 0)
        return rc;
    const int64_t T = c->in[0].dims[0], C = c->in[0].dims[1];
    int64_t OT;
    if ((rc = rt_keras_window_out(c, T, p, s, 1, pad, &OT)) < 0)
        return rc;
    char x4[RT_KERAS_NAME], pl[RT_KERAS_NAME];
    if ((rc = rt_keras_name(c, x4, "4d")) < 0 || (rc = rt_keras_name(c, pl, "pool")) < 0)
        return rc;
    const int64_t xd[3] = {T, 1, C}, k[2] = {p, 1}, st[2] = {s, 1}, od[2] = {OT, C};
    rt_attr at[3] = {
        {.name = "pool", .kind = RT_ATTR_INTS, .n = 2, .ints = k},
        {.name = "strides", .kind = RT_ATTR_INTS, .n = 2, .ints = st},
        {.name = "padding", .kind = RT_ATTR_STR, .s = pad ? "same" : "valid"},
    };
    const char *in = x4;
    if ((rc = kl_reshape(c, x4, c->in[0].name, 3, xd)) < 0 ||
        (rc = kl_node(c, pl, op, 1, &in, 3, at)) < 0 ||
        (rc = kl_reshape(c, c->layer, pl, 2, od)) < 0)
        return rc;
    kl_out(c, c->layer, 2, od);
    return 0;
}

static int k_maxpool1d(rt_keras_ctx *c) { return kl_pool1d(c, "MaxPool2D"); }
static int k_avgpool1d(rt_keras_ctx *c) { return kl_pool1d(c, "AvgPool2D"); }

/* GlobalMaxPooling1D/2D and GlobalAveragePooling1D, keepdims */
static int kl_global(rt_keras_ctx *c, int rank, int max)
{
    int rc, keep;
    if ((rc = kl_channels_last(c, rank)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "keepdims", 0, &keep)) < 0)
        return rc;
    const int64_t C = c->in[0].dims[rank - 1];
    int64_t od[3] = {1, 1, 1};
    od[keep ? rank - 1 : 0] = C;
    const int ond = keep ? rank : 1;
    if (max) {
        rt_attr a = {.name = "keepdims", .kind = RT_ATTR_INT, .i = keep};
        return kl_unary(c, c->layer, "GlobalMaxPool", c->in[0].name, 1, &a, ond, od);
    }
    const int64_t ax[1] = {1};
    rt_attr a[2] = {{.name = "axes", .kind = RT_ATTR_INTS, .n = 1, .ints = ax},
                    {.name = "keepdims", .kind = RT_ATTR_INT, .i = keep}};
    if (rank == 2 && c->in[0].mask[0]) {
        /* a step mask: Keras averages the kept steps, sum(x m) / sum(m)
         * (a sample with every step masked gets 0 / 0, as in Keras) */
        char mr[RT_KERAS_NAME], xm[RT_KERAS_NAME], sum[RT_KERAS_NAME], cnt[RT_KERAS_NAME];
        const int64_t md[2] = {c->in[0].dims[0], 1};
        if ((rc = rt_keras_name(c, mr, "mask")) < 0 || (rc = rt_keras_name(c, xm, "masked")) < 0 ||
            (rc = rt_keras_name(c, sum, "sum")) < 0 || (rc = rt_keras_name(c, cnt, "count")) < 0 ||
            (rc = kl_reshape(c, mr, c->in[0].mask, 2, md)) < 0)
            return rc;
        const char *mul[2] = {c->in[0].name, mr}, *div[2] = {sum, cnt};
        if ((rc = kl_node(c, xm, "Mul", 2, mul, 0, NULL)) < 0 ||
            (rc = kl_node(c, sum, "ReduceSum", 1, (const char *[]){xm}, 2, a)) < 0 ||
            (rc = kl_node(c, cnt, "ReduceSum", 1, (const char *[]){mr}, 2, a)) < 0 ||
            (rc = kl_node(c, c->layer, "Div", 2, div, 0, NULL)) < 0)
            return rc;
        kl_out(c, c->layer, ond, od);
        c->mask_set = 1; /* consumed: no mask after it */
        c->out.mask[0] = 0;
        return 0;
    }
    return kl_unary(c, c->layer, "ReduceMean", c->in[0].name, 2, a, ond, od);
}

static int k_gmp1d(rt_keras_ctx *c) { return kl_global(c, 2, 1); }
static int k_gmp2d(rt_keras_ctx *c) { return kl_global(c, 3, 1); }
static int k_gap1d(rt_keras_ctx *c) { return kl_global(c, 2, 0); }

/* ------------------------------------------------------------ normalisation */

static int k_layernorm(rt_keras_ctx *c)
{
    double eps;
    int center, scale, trainable, rms = 0, rc;
    rt_init ginit, binit;
    if ((rc = rt_keras_cfg_float(c, "epsilon", 1e-3, &eps)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "center", 1, &center)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "scale", 1, &scale)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "rms_scaling", 0, &rms)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "trainable", 1, &trainable)) < 0 ||
        (rc = rt_keras_cfg_init(c, "gamma_initializer", RT_INIT_ONES, &ginit)) < 0 ||
        (rc = rt_keras_cfg_init(c, "beta_initializer", RT_INIT_ZEROS, &binit)) < 0)
        return rc;
    const rt_keras_tensor *x = &c->in[0];
    if (x->ndim < 1)
        return rt_keras_fail(c, RT_ESHAPE, "LayerNormalization needs a feature axis");
    if (rms)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED, "rms_scaling is not supported");
    if ((rc = rt_keras_last_axis(c, "LayerNormalization", RT_MAX_DIMS)) < 0)
        return rc;
    if (!(eps > 0) || eps > 1e10)
        return rt_keras_fail(c, RT_EINVAL, "epsilon must be > 0");
    const int64_t C = x->dims[x->ndim - 1];
    char gname[RT_KERAS_NAME], bname[RT_KERAS_NAME];
    if ((rc = rt_keras_name(c, gname, "gamma")) < 0 || (rc = rt_keras_name(c, bname, "beta")) < 0 ||
        (scale && (rc = kl_param(c, gname, 1, &C, ginit, trainable)) < 0) ||
        (center && (rc = kl_param(c, bname, 1, &C, binit, trainable)) < 0))
        return rc;
    const char *in[3] = {x->name};
    int n = 1;
    if (scale)
        in[n++] = gname;
    if (center)
        in[n++] = bname;
    rt_attr at[3] = {
        {.name = "epsilon", .kind = RT_ATTR_FLOAT, .f = eps},
        {.name = "scale", .kind = RT_ATTR_INT, .i = scale},
        {.name = "center", .kind = RT_ATTR_INT, .i = center},
    };
    if ((rc = kl_node(c, c->layer, "LayerNormalization", n, in, 3, at)) < 0)
        return rc;
    kl_out(c, c->layer, x->ndim, x->dims);
    return 0;
}

/* -------------------------------------------------------- activation layers */

static int kl_act1(rt_keras_ctx *c, const char *op, const char *a1, double v1)
{
    rt_attr a = {.name = a1, .kind = RT_ATTR_FLOAT, .f = v1};
    return kl_unary(c, c->layer, op, c->in[0].name, a1 ? 1 : 0, &a, c->in[0].ndim, c->in[0].dims);
}

static int k_leakyrelu(rt_keras_ctx *c)
{
    double alpha, slope;
    int rc;
    /* Keras 2 writes alpha, Keras 3 negative_slope; both default 0.3 */
    if ((rc = rt_keras_cfg_float(c, "alpha", 0.3, &alpha)) < 0 ||
        (rc = rt_keras_cfg_float(c, "negative_slope", alpha, &slope)) < 0)
        return rc;
    if (!isfinite(slope))
        return rt_keras_fail(c, RT_EINVAL, "negative_slope must be finite");
    return kl_act1(c, "LeakyRelu", "alpha", slope);
}

static int k_elu(rt_keras_ctx *c)
{
    double alpha;
    int rc = rt_keras_cfg_float(c, "alpha", 1.0, &alpha);
    if (rc < 0)
        return rc;
    if (!isfinite(alpha))
        return rt_keras_fail(c, RT_EINVAL, "alpha must be finite");
    return kl_act1(c, "Elu", "alpha", alpha);
}

static int k_thresholdedrelu(rt_keras_ctx *c)
{
    double theta;
    int rc = rt_keras_cfg_float(c, "theta", 1.0, &theta);
    if (rc < 0)
        return rc;
    if (!(theta >= 0) || !isfinite(theta))
        return rt_keras_fail(c, RT_EINVAL, "theta must be >= 0");
    return kl_act1(c, "ThresholdedRelu", "alpha", theta);
}

/* ReLU(max_value, negative_slope, threshold) */
static int k_relu(rt_keras_ctx *c)
{
    double maxv, slope, th;
    int rc;
    if ((rc = rt_keras_cfg_float(c, "max_value", INFINITY, &maxv)) < 0 ||
        (rc = rt_keras_cfg_float(c, "negative_slope", 0.0, &slope)) < 0 ||
        (rc = rt_keras_cfg_float(c, "threshold", 0.0, &th)) < 0)
        return rc;
    if (!(maxv >= 0) || !(slope >= 0) || !isfinite(slope) || !isfinite(th))
        return rt_keras_fail(c, RT_EINVAL, "ReLU needs max_value >= 0, negative_slope >= 0");
    if (slope == 0 && th == 0 && isinf(maxv))
        return kl_act1(c, "Relu", NULL, 0);
    rt_attr at[3] = {
        {.name = "negative_slope", .kind = RT_ATTR_FLOAT, .f = slope},
        {.name = "threshold", .kind = RT_ATTR_FLOAT, .f = th},
        {.name = "max_value", .kind = RT_ATTR_FLOAT, .f = maxv},
    };
    return kl_unary(c, c->layer, "KerasRelu", c->in[0].name, 3, at, c->in[0].ndim, c->in[0].dims);
}

/* PReLU: alpha has the input's per-sample shape, 1 along shared_axes
 * (which count the batch as axis 0, as Keras) */
static int k_prelu(rt_keras_ctx *c)
{
    int rc, trainable;
    rt_init ainit;
    if ((rc = rt_keras_cfg_init(c, "alpha_initializer", RT_INIT_ZEROS, &ainit)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "trainable", 1, &trainable)) < 0)
        return rc;
    const rt_keras_tensor *x = &c->in[0];
    int64_t ad[RT_MAX_DIMS], sh[RT_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++)
        ad[i] = x->dims[i];
    int ns = rt_keras_cfg_ints(c, "shared_axes", sh, RT_MAX_DIMS);
    if (ns < 0)
        return ns;
    for (int i = 0; i < ns; i++) {
        if (sh[i] < 1 || sh[i] > x->ndim)
            return rt_keras_fail(c, RT_EINVAL, "shared_axes entry %lld is outside 1..%d",
                                 (long long)sh[i], x->ndim);
        ad[sh[i] - 1] = 1;
    }
    char aname[RT_KERAS_NAME];
    if ((rc = rt_keras_name(c, aname, "alpha")) < 0 ||
        (rc = kl_param(c, aname, x->ndim, ad, ainit, trainable)) < 0)
        return rc;
    const char *in[2] = {x->name, aname};
    if ((rc = kl_node(c, c->layer, "PRelu", 2, in, 0, NULL)) < 0)
        return rc;
    kl_out(c, c->layer, x->ndim, x->dims);
    return 0;
}

/* Softmax with a mask, as Keras' Softmax.call (keras/src/layers/
 * activations/softmax.py: where(mask, x, -1e9), the masked positions'
 * probability 0; Keras 2's keras/layers/activation/softmax.py adds
 * (1 - mask) * -1e9, the same probabilities for Keras' boolean masks):
 * x * mask + (mask - 1) * 1e9, exact at both mask values, then the
 * softmax. The mask is the call's `mask` argument (the inputs' shape, as
 * Keras documents it), else the inputs' step mask, which Keras broadcasts
 * against the inputs as NumPy does: a (batch, time) mask fits (time,)
 * values only. The output's mask is the inputs' own, as Keras 3 sets it
 * (Layer.__call__ from the first argument); Keras 2 would carry a mask
 * argument on, onto a value whose loss it then cannot weight with it. */
static int k_softmax_masked(rt_keras_ctx *c)
{
    const rt_keras_tensor *x = &c->in[0];
    const char *mask = x->mask;
    if (c->n_in == 2) {
        const rt_keras_tensor *m = &c->in[1];
        if (!c->in_kw[1] || strcmp(c->in_kw[1], "mask") != 0)
            return rt_keras_fail(c, RT_EINVAL, "Softmax takes one input and a 'mask' argument");
        if (m->ndim != x->ndim || memcmp(m->dims, x->dims, sizeof(int64_t) * (size_t)x->ndim))
            return rt_keras_fail(c, RT_ESHAPE, "Softmax's mask must have the inputs' shape");
        mask = m->name;
    } else if (x->ndim != 1) {
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "Softmax receives the step mask '%.64s' on a value of rank %d: "
                             "Keras broadcasts the (batch, time) mask against the inputs, "
                             "which must then be (batch, time)",
                             x->mask, x->ndim + 1);
    }
    char kept[RT_KERAS_NAME], neg[RT_KERAS_NAME], where[RT_KERAS_NAME];
    int rc;
    if ((rc = rt_keras_name(c, kept, "kept")) < 0 || (rc = rt_keras_name(c, neg, "masked")) < 0 ||
        (rc = rt_keras_name(c, where, "where")) < 0)
        return rc;
    const rt_attr sc[2] = {{.name = "alpha", .kind = RT_ATTR_FLOAT, .f = 1e9},
                           {.name = "beta", .kind = RT_ATTR_FLOAT, .f = -1e9}};
    const char *km[2] = {x->name, mask}, *kn[2] = {kept, neg};
    if ((rc = kl_node(c, kept, "Mul", 2, km, 0, NULL)) < 0 ||
        (rc = kl_node(c, neg, "Scale", 1, &mask, 2, sc)) < 0 ||
        (rc = kl_node(c, where, "Add", 2, kn, 0, NULL)) < 0)
        return rc;
    c->mask_set = 1;
    snprintf(c->out.mask, sizeof c->out.mask, "%s", x->mask);
    return 0;
}

/* Softmax(axis): the last axis directly; another one between two
 * Transposes that swap it with the last; on a masked value
 * k_softmax_masked */
static int k_softmax(rt_keras_ctx *c)
{
    int64_t axis[2];
    const rt_keras_tensor *x = &c->in[0];
    int na = rt_keras_cfg_ints(c, "axis", axis, 2);
    if (na < 0)
        return na;
    if (na == 0)
        axis[0] = -1, na = 1;
    if (na != 1)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED, "Softmax over several axes is not supported");
    if (c->n_in > 2)
        return rt_keras_fail(c, RT_EINVAL, "Softmax takes one input and a 'mask' argument");
    const int r = x->ndim + 1;
    int64_t a = axis[0] < 0 ? axis[0] + r : axis[0];
    if (a < 1 || a >= r)
        return rt_keras_fail(c, RT_EINVAL, "Softmax axis %lld is outside 1..%d", (long long)axis[0],
                             r - 1);
    /* a mask: Softmax on the masked logits */
    const int masked = x->mask[0] || c->n_in > 1;
    char where[RT_KERAS_NAME];
    int rc;
    if (masked && ((rc = k_softmax_masked(c)) < 0 || (rc = rt_keras_name(c, where, "where")) < 0))
        return rc;
    const char *src = masked ? where : x->name;
    if (a == r - 1)
        return kl_unary(c, c->layer, "Softmax", src, 0, NULL, x->ndim, x->dims);
    int64_t perm[RT_MAX_DIMS + 1];
    for (int i = 0; i < r; i++)
        perm[i] = i;
    perm[a] = r - 1;
    perm[r - 1] = a;
    char t1[RT_KERAS_NAME], sm[RT_KERAS_NAME];
    if ((rc = rt_keras_name(c, t1, "to_last")) < 0 || (rc = rt_keras_name(c, sm, "softmax")) < 0)
        return rc;
    rt_attr p = {.name = "perm", .kind = RT_ATTR_INTS, .n = r, .ints = perm};
    const char *in = t1;
    if ((rc = kl_node(c, t1, "Transpose", 1, (const char *[]){src}, 1, &p)) < 0 ||
        (rc = kl_node(c, sm, "Softmax", 1, &in, 0, NULL)) < 0)
        return rc;
    return kl_unary(c, c->layer, "Transpose", sm, 1, &p, x->ndim, x->dims);
}

/* Identity */
static int k_identity(rt_keras_ctx *c)
{
    return kl_unary(c, c->layer, "Identity", c->in[0].name, 0, NULL, c->in[0].ndim, c->in[0].dims);
}

/* Normalization (Keras' preprocessing layer) over the last axis: weights
 * mean, variance (C) and count (), non-trainable, as Keras creates them
 * (zeros, ones, zeros; adapt() or set_weights gives their values); mean
 * and variance given in the config (a number or C numbers) become those
 * weights' initial values. (x - mean) / max(sqrt(variance), 1e-7), or with
 * invert x * max(sqrt(variance), 1e-7) + mean. */
static int kl_norm_values(rt_keras_ctx *c, const char *key, int64_t C, float *v, int *given)
{
    *given = 0;
    json_object *o = rt_keras_cfg_get(c, key);
    if (!o)
        return 0;
    if (json_object_is_type(o, json_type_double) || json_object_is_type(o, json_type_int)) {
        for (int64_t i = 0; i < C; i++)
            v[i] = (float)json_object_get_double(o);
    } else if (json_object_is_type(o, json_type_array) &&
               (int64_t)json_object_array_length(o) == C) {
        for (int64_t i = 0; i < C; i++) {
            json_object *e = json_object_array_get_idx(o, (size_t)i);
            if (!e || !(json_object_is_type(e, json_type_double) ||
                        json_object_is_type(e, json_type_int)))
                return rt_keras_fail(c, RT_EINVAL, "'%s' must hold numbers", key);
            v[i] = (float)json_object_get_double(e);
        }
    } else {
        return rt_keras_fail(c, RT_EINVAL, "'%s' must be a number or %lld numbers", key,
                             (long long)C);
    }
    for (int64_t i = 0; i < C; i++)
        if (!isfinite(v[i]) || (key[0] == 'v' && v[i] < 0))
            return rt_keras_fail(c, RT_EINVAL, "'%s' holds a bad value", key);
    *given = 1;
    return 0;
}

static int k_normalization(rt_keras_ctx *c)
{
    int rc, invert;
    const rt_keras_tensor *x = &c->in[0];
    if ((rc = rt_keras_cfg_bool(c, "invert", 0, &invert)) < 0)
        return rc;
    if (x->ndim < 1)
        return rt_keras_fail(c, RT_ESHAPE, "Normalization needs a feature axis");
    /* read first: a bad "axis" is reported before a null one */
    int64_t axis[RT_MAX_DIMS];
    int na = rt_keras_cfg_ints(c, "axis", axis, RT_MAX_DIMS);
    if (na < 0)
        return na;
    json_object *ax = NULL;
    if (c->cfg && json_object_object_get_ex(c->cfg, "axis", &ax) && !ax)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED, "Normalization with axis null is not supported");
    if ((rc = rt_keras_last_axis(c, "Normalization", RT_MAX_DIMS)) < 0)
        return rc;
    const int64_t C = x->dims[x->ndim - 1];
    if (C > (1 << 24))
        return rt_keras_fail(c, RT_EINVAL, "Normalization over %lld features", (long long)C);
    float *mean = malloc(sizeof(float) * (size_t)C), *var = malloc(sizeof(float) * (size_t)C);
    if (!mean || !var) {
        free(mean);
        free(var);
        return rt_keras_fail(c, RT_ENOMEM, "out of memory");
    }
    int gm, gv;
    char mn[RT_KERAS_NAME], vn[RT_KERAS_NAME], cn[RT_KERAS_NAME], sd[RT_KERAS_NAME],
        se[RT_KERAS_NAME], ct[RT_KERAS_NAME];
    if ((rc = kl_norm_values(c, "mean", C, mean, &gm)) < 0 ||
        (rc = kl_norm_values(c, "variance", C, var, &gv)) < 0 ||
        (rc = rt_keras_name(c, mn, "mean")) < 0 || (rc = rt_keras_name(c, vn, "variance")) < 0 ||
        (rc = rt_keras_name(c, cn, "count")) < 0 || (rc = rt_keras_name(c, sd, "std")) < 0 ||
        (rc = rt_keras_name(c, se, "std_eps")) < 0 ||
        (rc = rt_keras_name(c, ct, invert ? "scaled" : "centered")) < 0)
        goto out;
    if ((rc = rt_graph_add_param(c->g, mn, 1, &C, RT_INIT_ZEROS, 0, gm ? mean : NULL)) < 0 ||
        (rc = rt_graph_add_param(c->g, vn, 1, &C, RT_INIT_ONES, 0, gv ? var : NULL)) < 0 ||
        (rc = rt_graph_add_param(c->g, cn, 0, NULL, RT_INIT_ZEROS, 0, NULL)) < 0) {
        rc = rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
        goto out;
    }
    rt_attr eps = {.name = "min", .kind = RT_ATTR_FLOAT, .f = 1e-7};
    const char *vin = vn, *sin_ = sd;
    if ((rc = kl_node(c, sd, "Sqrt", 1, &vin, 0, NULL)) < 0 ||
        (rc = kl_node(c, se, "Clip", 1, &sin_, 1, &eps)) < 0)
        goto out;
    if (!invert) {
        const char *a[2] = {x->name, mn}, *b[2] = {ct, se};
        if ((rc = kl_node(c, ct, "Sub", 2, a, 0, NULL)) < 0 ||
            (rc = kl_node(c, c->layer, "Div", 2, b, 0, NULL)) < 0)
            goto out;
    } else {
        const char *a[2] = {x->name, se}, *b[2] = {ct, mn};
        if ((rc = kl_node(c, ct, "Mul", 2, a, 0, NULL)) < 0 ||
            (rc = kl_node(c, c->layer, "Add", 2, b, 0, NULL)) < 0)
            goto out;
    }
    kl_out(c, c->layer, x->ndim, x->dims);
    rc = 0;
out:
    free(mean);
    free(var);
    return rc;
}

/* ------------------------------------------------------------------- noise */

static int kl_noise(rt_keras_ctx *c, const char *op, const char *key, int rank)
{
    double v;
    int rc = rt_keras_cfg_float(c, key, key[0] == 's' ? 0.0 : 0.5, &v);
    if (rc < 0)
        return rc;
    if (rank && c->in[0].ndim != rank)
        return rt_keras_fail(c, RT_ESHAPE, "%s needs inputs of rank %d (batch excluded), got %d",
                             c->class_name, rank, c->in[0].ndim);
    if (rank && (rc = kl_channels_last(c, rank)) < 0)
        return rc;
    if (key[0] == 's' ? !(v >= 0 && v < 1e30) : !(v >= 0 && v < 1))
        return rt_keras_fail(c, RT_EINVAL, "%s %g is out of range", key, v);
    return kl_act1(c, op, key, v);
}

static int k_sdropout1d(rt_keras_ctx *c) { return kl_noise(c, "SpatialDropout", "rate", 2); }
static int k_sdropout2d(rt_keras_ctx *c) { return kl_noise(c, "SpatialDropout", "rate", 3); }
static int k_gnoise(rt_keras_ctx *c) { return kl_noise(c, "GaussianNoise", "stddev", 0); }
static int k_gdropout(rt_keras_ctx *c) { return kl_noise(c, "GaussianDropout", "rate", 0); }

/* ------------------------------------------------------------------- table */

static const struct {
    const char *class_name;
    rt_keras_layer_fn fn;
    int n_in; /* 0: any number */
} kl_table[] = {
    {"Add", k_add, 0},
    {"Subtract", k_subtract, 2},
    {"Multiply", k_multiply, 0},
    {"Average", k_average, 0},
    {"Maximum", k_maximum, 0},
    {"Minimum", k_minimum, 0},
    {"ZeroPadding1D", k_zeropad1d, 1},
    {"ZeroPadding2D", k_zeropad2d, 1},
    {"Cropping1D", k_crop1d, 1},
    {"Cropping2D", k_crop2d, 1},
    {"UpSampling1D", k_upsample1d, 1},
    {"UpSampling2D", k_upsample2d, 1},
    {"Permute", k_permute, 1},
    {"RepeatVector", k_repeatvector, 1},
    {"Conv1D", k_conv1d, 1},
    {"Convolution1D", k_conv1d, 1},
    {"DepthwiseConv2D", k_depthwise2d, 1},
    {"SeparableConv2D", k_separable2d, 1},
    {"SeparableConvolution2D", k_separable2d, 1},
    {"Conv2DTranspose", k_conv2dtranspose, 1},
    {"Convolution2DTranspose", k_conv2dtranspose, 1},
    {"MaxPooling1D", k_maxpool1d, 1},
    {"MaxPool1D", k_maxpool1d, 1},
    {"AveragePooling1D", k_avgpool1d, 1},
    {"AvgPool1D", k_avgpool1d, 1},
    {"GlobalMaxPooling1D", k_gmp1d, 1},
    {"GlobalMaxPool1D", k_gmp1d, 1},
    {"GlobalMaxPooling2D", k_gmp2d, 1},
    {"GlobalMaxPool2D", k_gmp2d, 1},
    {"GlobalAveragePooling1D", k_gap1d, 1},
    {"GlobalAvgPool1D", k_gap1d, 1},
    {"LayerNormalization", k_layernorm, 1},
    {"LeakyReLU", k_leakyrelu, 1},
    {"PReLU", k_prelu, 1},
    {"ELU", k_elu, 1},
    {"ReLU", k_relu, 1},
    /* the inputs, and the call's mask argument (k_softmax_masked) */
    {"Softmax", k_softmax, 0},
    {"ThresholdedReLU", k_thresholdedrelu, 1},
    {"SpatialDropout1D", k_sdropout1d, 1},
    {"SpatialDropout2D", k_sdropout2d, 1},
    {"GaussianNoise", k_gnoise, 1},
    {"GaussianDropout", k_gdropout, 1},
    {"Identity", k_identity, 1},
    {"Normalization", k_normalization, 1},
};

int rt_keras_layers_find(const char *class_name, rt_keras_layer_fn *fn, int *n_in)
{
    for (size_t i = 0; i < sizeof kl_table / sizeof kl_table[0]; i++) {
        if (strcmp(kl_table[i].class_name, class_name) == 0) {
            *fn = kl_table[i].fn;
            *n_in = kl_table[i].n_in;
            return 1;
        }
    }
    if (rt_keras_image_find(class_name, fn, n_in))
        return 1;
    return rt_keras_attn_find(class_name, fn, n_in);
}

/* The activation names of the core layers; the others are
 * rt_keras_layers_activation's. */
int rt_keras_add_activation(rt_keras_ctx *c, const char *act)
{
    if (!act || strcmp(act, "linear") == 0)
        return 0;
    const char *op = rt_act_op(act);
    if (op) {
        char name[RT_KERAS_NAME];
        int rc = rt_keras_name(c, name, act);
        if (rc < 0)
            return rc;
        const char *in[1] = {c->out.name};
        rc = rt_graph_add_node(c->g, name, op, 1, in, 0, NULL);
        if (rc < 0)
            return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
        snprintf(c->out.name, sizeof c->out.name, "%s", name);
        return 0;
    }
    int ext = rt_keras_layers_activation(c, act, NULL);
    if (ext <= 0)
        return ext;
    return rt_keras_fail(c, RT_EINVAL, "unsupported activation '%.40s'", act);
}
