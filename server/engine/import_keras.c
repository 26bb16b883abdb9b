/* import_keras.c - Keras model JSON -> rt_graph (see import_keras.h). */
#include "import_keras.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "rt_engine_impl.h"

int rt_keras_fail(rt_keras_ctx *c, int code, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->err && c->errlen)
        snprintf(c->err, c->errlen, "%s (layer '%.64s')", msg,
                 c->layer ? c->layer : "?");
    return code;
}

static json_object *cfg_get(rt_keras_ctx *c, const char *key)
{
    json_object *v = NULL;
    if (!c->cfg || !json_object_object_get_ex(c->cfg, key, &v))
        return NULL;
    return v; /* JSON null comes back as NULL too: treated as missing */
}

int rt_keras_cfg_int(rt_keras_ctx *c, const char *key, int64_t def, int64_t *out)
{
    json_object *v = cfg_get(c, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_object_is_type(v, json_type_int))
        return rt_keras_fail(c, RT_EINVAL, "'%s' must be an integer", key);
    *out = json_object_get_int64(v);
    return 0;
}

int rt_keras_cfg_float(rt_keras_ctx *c, const char *key, double def, double *out)
{
    json_object *v = cfg_get(c, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_object_is_type(v, json_type_double) &&
        !json_object_is_type(v, json_type_int))
        return rt_keras_fail(c, RT_EINVAL, "'%s' must be a number", key);
    *out = json_object_get_double(v);
    /* json-c reads NaN, Infinity and 1e999; no Keras setting means them */
    if (!isfinite(*out))
        return rt_keras_fail(c, RT_EINVAL, "'%s' must be a finite number", key);
    return 0;
}

int rt_keras_cfg_bool(rt_keras_ctx *c, const char *key, int def, int *out)
{
    json_object *v = cfg_get(c, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_object_is_type(v, json_type_boolean))
        return rt_keras_fail(c, RT_EINVAL, "'%s' must be true or false", key);
    *out = json_object_get_boolean(v);
    return 0;
}

int rt_keras_cfg_str(rt_keras_ctx *c, const char *key, const char *def,
                     const char **out)
{
    json_object *v = cfg_get(c, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_object_is_type(v, json_type_string))
        return rt_keras_fail(c, RT_EINVAL, "'%s' must be a string", key);
    *out = json_object_get_string(v);
    return 0;
}

int rt_keras_cfg_ints(rt_keras_ctx *c, const char *key, int64_t *out, int max)
{
    json_object *v = cfg_get(c, key);
    if (!v)
        return 0;
    if (json_object_is_type(v, json_type_int)) {
        out[0] = json_object_get_int64(v);
        return 1;
    }
    if (!json_object_is_type(v, json_type_array))
        return rt_keras_fail(c, RT_EINVAL, "'%s' must be a list of integers", key);
    int n = (int)json_object_array_length(v);
    if (n > max)
        return rt_keras_fail(c, RT_EINVAL, "'%s' has more than %d entries", key, max);
    for (int i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(v, (size_t)i);
        if (!e || !json_object_is_type(e, json_type_int))
            return rt_keras_fail(c, RT_EINVAL, "'%s'[%d] must be an integer", key, i);
        out[i] = json_object_get_int64(e);
    }
    return n;
}

/* "GlorotUniform", "glorot_uniform" and "he_normal" all compare equal. */
static int name_eq(const char *a, const char *b)
{
    for (;;) {
        while (*a == '_') a++;
        while (*b == '_') b++;
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return 0;
        if (!*a)
            return 1;
        a++;
        b++;
    }
}

int rt_keras_cfg_init(rt_keras_ctx *c, const char *key, rt_init def,
                      rt_init *out)
{
    json_object *v = cfg_get(c, key);
    *out = def;
    if (!v)
        return 0;
    const char *name = NULL;
    if (json_object_is_type(v, json_type_string)) {
        name = json_object_get_string(v);
    } else if (json_object_is_type(v, json_type_object)) {
        json_object *cn;
        if (json_object_object_get_ex(v, "class_name", &cn) &&
            json_object_is_type(cn, json_type_string))
            name = json_object_get_string(cn);
    }
    if (!name)
        return rt_keras_fail(c, RT_EINVAL, "'%s' is not an initializer", key);
    static const struct { const char *n; rt_init i; } inits[] = {
        {"GlorotUniform", RT_INIT_GLOROT_UNIFORM}, {"GlorotNormal", RT_INIT_GLOROT_NORMAL},
        {"HeNormal", RT_INIT_HE_NORMAL}, {"HeUniform", RT_INIT_HE_UNIFORM},
        {"Zeros", RT_INIT_ZEROS}, {"Ones", RT_INIT_ONES},
        {"Zero", RT_INIT_ZEROS}, {"One", RT_INIT_ONES},
    };
    for (size_t i = 0; i < sizeof inits / sizeof inits[0]; i++)
        if (name_eq(name, inits[i].n)) {
            *out = inits[i].i;
            return 0;
        }
    return rt_keras_fail(c, RT_EINVAL, "unsupported initializer '%.40s' in '%s'", name, key);
}

/* Names made of the layer name and a suffix, checked for length. */
static int join_name(rt_keras_ctx *c, char *dst, const char *suffix)
{
    int n = snprintf(dst, RT_KERAS_NAME, "%s%s%s", c->layer, suffix ? "/" : "",
                     suffix ? suffix : "");
    if (n < 0 || n >= RT_KERAS_NAME)
        return rt_keras_fail(c, RT_EINVAL, "layer name is too long");
    return 0;
}

int rt_keras_add_activation(rt_keras_ctx *c, const char *act)
{
    static const struct { const char *keras, *op; } acts[] = {
        {"relu", "Relu"}, {"sigmoid", "Sigmoid"}, {"tanh", "Tanh"},
        {"softmax", "Softmax"}, {"log_softmax", "LogSoftmax"},
    };
    if (!act || strcmp(act, "linear") == 0)
        return 0;
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        if (strcmp(act, acts[i].keras) != 0)
            continue;
        char name[RT_KERAS_NAME];
        int rc = join_name(c, name, act);
        if (rc < 0)
            return rc;
        const char *in[1] = {c->out.name};
        rc = rt_graph_add_node(c->g, name, acts[i].op, 1, in, 0, NULL);
        if (rc < 0)
            return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
        snprintf(c->out.name, sizeof c->out.name, "%s", name);
        return 0;
    }
    return rt_keras_fail(c, RT_EINVAL, "unsupported activation '%.40s'", act);
}

/* The layer's own node becomes its output; helpers for single-op layers. */
static int add_simple(rt_keras_ctx *c, const char *op, int n_attr,
                      const rt_attr *attrs)
{
    const char *in[1] = {c->in[0].name};
    int rc = rt_graph_add_node(c->g, c->layer, op, 1, in, n_attr, attrs);
    if (rc < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    snprintf(c->out.name, sizeof c->out.name, "%s", c->layer);
    return 0;
}

/* ------------------------------------------------------------------ layers */

static int k_dense(rt_keras_ctx *c)
{
    int64_t units;
    int use_bias, trainable, rc;
    const char *act;
    rt_init kinit, binit;
    if ((rc = rt_keras_cfg_int(c, "units", 0, &units)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "use_bias", 1, &use_bias)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "trainable", 1, &trainable)) < 0 ||
        (rc = rt_keras_cfg_str(c, "activation", "linear", &act)) < 0 ||
        (rc = rt_keras_cfg_init(c, "kernel_initializer", RT_INIT_GLOROT_UNIFORM, &kinit)) < 0 ||
        (rc = rt_keras_cfg_init(c, "bias_initializer", RT_INIT_ZEROS, &binit)) < 0)
        return rc;
    if (units <= 0)
        return rt_keras_fail(c, RT_EINVAL, "Dense needs units > 0");
    if (c->in[0].ndim < 1)
        return rt_keras_fail(c, RT_ESHAPE, "Dense needs an input with at least one dim");
    int64_t fan_in = c->in[0].dims[c->in[0].ndim - 1];
    char kname[RT_KERAS_NAME], bname[RT_KERAS_NAME];
    if ((rc = join_name(c, kname, "kernel")) < 0 || (rc = join_name(c, bname, "bias")) < 0)
        return rc;
    int64_t kd[2] = {fan_in, units};
    /* trainable=false (transfer learning): frozen, no gradient or update */
    if ((rc = rt_graph_add_param(c->g, kname, 2, kd, kinit, trainable, NULL)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    if (use_bias &&
        (rc = rt_graph_add_param(c->g, bname, 1, &units, binit, trainable, NULL)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    const char *in[3] = {c->in[0].name, kname, bname};
    if ((rc = rt_graph_add_node(c->g, c->layer, "Dense", use_bias ? 3 : 2, in, 0, NULL)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    snprintf(c->out.name, sizeof c->out.name, "%s", c->layer);
    c->out.ndim = c->in[0].ndim;
    memcpy(c->out.dims, c->in[0].dims, sizeof c->out.dims);
    c->out.dims[c->out.ndim - 1] = units;
    return rt_keras_add_activation(c, act);
}

static int k_activation(rt_keras_ctx *c)
{
    const char *act;
    int rc = rt_keras_cfg_str(c, "activation", NULL, &act);
    if (rc < 0)
        return rc;
    if (!act)
        return rt_keras_fail(c, RT_EINVAL, "Activation needs 'activation'");
    c->out = c->in[0];
    if (strcmp(act, "linear") == 0)
        return add_simple(c, "Identity", 0, NULL);
    /* The layer's node carries the layer's name so Functional references
     * to it resolve. */
    static const struct { const char *keras, *op; } acts[] = {
        {"relu", "Relu"}, {"sigmoid", "Sigmoid"}, {"tanh", "Tanh"},
        {"softmax", "Softmax"}, {"log_softmax", "LogSoftmax"},
    };
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
        if (strcmp(act, acts[i].keras) == 0)
            return add_simple(c, acts[i].op, 0, NULL);
    return rt_keras_fail(c, RT_EINVAL, "unsupported activation '%.40s'", act);
}

static int k_dropout(rt_keras_ctx *c)
{
    double rate;
    int rc = rt_keras_cfg_float(c, "rate", 0.5, &rate);
    if (rc < 0)
        return rc;
    if (!(rate >= 0 && rate < 1))
        return rt_keras_fail(c, RT_EINVAL, "Dropout rate %g is outside [0, 1)", rate);
    c->out = c->in[0];
    rt_attr a = {.name = "rate", .kind = RT_ATTR_FLOAT, .f = rate};
    return add_simple(c, "Dropout", 1, &a);
}

/* values per sample of t; RT_EOVERFLOW past 2^32 (the engine's tensor limit) */
static int k_numel(rt_keras_ctx *c, const rt_keras_tensor *t, int64_t *n)
{
    *n = 1;
    for (int i = 0; i < t->ndim; i++)
        if (__builtin_mul_overflow(*n, t->dims[i], n) || *n > RT__MAX_NUMEL)
            return rt_keras_fail(c, RT_EOVERFLOW, "%s input has more than 2^32 values per sample",
                                 c->class_name);
    return 0;
}

static int k_flatten(rt_keras_ctx *c)
{
    int64_t n;
    int rc = k_numel(c, &c->in[0], &n);
    if (rc < 0)
        return rc;
    c->out.ndim = 1;
    c->out.dims[0] = n;
    return add_simple(c, "Flatten", 0, NULL);
}

static int k_reshape(rt_keras_ctx *c)
{
    int64_t t[RT_MAX_DIMS];
    int n = rt_keras_cfg_ints(c, "target_shape", t, RT_MAX_DIMS - 1);
    if (n < 0)
        return n;
    if (n == 0)
        return rt_keras_fail(c, RT_EINVAL, "Reshape needs 'target_shape'");
    int64_t in_n, known = 1;
    int neg = -1, rc = k_numel(c, &c->in[0], &in_n);
    if (rc < 0)
        return rc;
    for (int i = 0; i < n; i++) {
        if (t[i] == -1 && neg < 0)
            neg = i;
        else if (t[i] <= 0 || __builtin_mul_overflow(known, t[i], &known))
            return rt_keras_fail(c, RT_EINVAL, "Reshape target_shape has a bad dim %lld",
                                 (long long)t[i]);
    }
    if (neg >= 0) {
        if (in_n % known)
            return rt_keras_fail(c, RT_ESHAPE, "Reshape cannot fit %lld values", (long long)in_n);
        t[neg] = in_n / known;
        known = in_n;
    }
    if (known != in_n)
        return rt_keras_fail(c, RT_ESHAPE,
                             "Reshape target_shape holds %lld values but the input has %lld",
                             (long long)known, (long long)in_n);
    c->out.ndim = n;
    memcpy(c->out.dims, t, sizeof(int64_t) * (size_t)n);
    rt_attr a = {.name = "shape", .kind = RT_ATTR_INTS, .n = n, .ints = t};
    return add_simple(c, "Reshape", 1, &a);
}

/* ------------------------------------------------ convolutional layers */

/* Keras' "data_format": only channels_last (NHWC), the engine's layout. */
static int k_channels_last(rt_keras_ctx *c)
{
    const char *fmt;
    int rc = rt_keras_cfg_str(c, "data_format", "channels_last", &fmt);
    if (rc < 0)
        return rc;
    if (strcmp(fmt, "channels_last") != 0)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "data_format '%.20s' is not supported (channels_last only)", fmt);
    if (c->in[0].ndim != 3)
        return rt_keras_fail(c, RT_ESHAPE, "%s needs (H, W, C) inputs, got rank %d",
                             c->class_name, c->in[0].ndim);
    return 0;
}

/* A pair setting ("kernel_size": [3, 3] or 3) into out[2]; def when absent
 * (or null, as Keras writes "strides": null for pools). */
static int k_pair(rt_keras_ctx *c, const char *key, int64_t def0, int64_t def1,
                  int64_t out[2])
{
    int n = rt_keras_cfg_ints(c, key, out, 2);
    if (n < 0)
        return n;
    if (n == 0) {
        out[0] = def0;
        out[1] = def1;
    } else if (n == 1) {
        out[1] = out[0];
    }
    if (out[0] < 1 || out[1] < 1 || out[0] > RT__MAX_WINDOW || out[1] > RT__MAX_WINDOW)
        return rt_keras_fail(c, RT_EINVAL, "'%s' must be in 1..1048576", key);
    return 0;
}

/* Output size of one spatial dim: the engine's rule (rt__window_out). */
static int k_out_dim(rt_keras_ctx *c, int64_t in, int64_t k, int64_t s, int64_t d,
                     int same, int64_t *out)
{
    *out = rt__window_out(in, k, s, d, same, NULL);
    if (*out < 0)
        return rt_keras_fail(c, RT_ESHAPE, "input %lld is smaller than the window %lld",
                             (long long)in, (long long)((k - 1) * d + 1));
    return 0;
}

static int k_padding(rt_keras_ctx *c, const char **pad, int *same)
{
    int rc = rt_keras_cfg_str(c, "padding", "valid", pad);
    if (rc < 0)
        return rc;
    if (strcmp(*pad, "valid") == 0)
        *same = 0;
    else if (strcmp(*pad, "same") == 0)
        *same = 1;
    else
        return rt_keras_fail(c, RT_EINVAL, "padding '%.20s' is not supported", *pad);
    return 0;
}

static int k_conv2d(rt_keras_ctx *c)
{
    int64_t filters, groups, k[2], s[2], d[2];
    int use_bias, trainable, same = 0, rc;
    const char *act, *pad;
    rt_init kinit, binit;
    if ((rc = k_channels_last(c)) < 0 ||
        (rc = rt_keras_cfg_int(c, "filters", 0, &filters)) < 0 ||
        (rc = rt_keras_cfg_int(c, "groups", 1, &groups)) < 0 ||
        (rc = k_pair(c, "kernel_size", 0, 0, k)) < 0 ||
        (rc = k_pair(c, "strides", 1, 1, s)) < 0 ||
        (rc = k_pair(c, "dilation_rate", 1, 1, d)) < 0 ||
        (rc = k_padding(c, &pad, &same)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "use_bias", 1, &use_bias)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "trainable", 1, &trainable)) < 0 ||
        (rc = rt_keras_cfg_str(c, "activation", "linear", &act)) < 0 ||
        (rc = rt_keras_cfg_init(c, "kernel_initializer", RT_INIT_GLOROT_UNIFORM, &kinit)) < 0 ||
        (rc = rt_keras_cfg_init(c, "bias_initializer", RT_INIT_ZEROS, &binit)) < 0)
        return rc;
    if (filters <= 0)
        return rt_keras_fail(c, RT_EINVAL, "Conv2D needs filters > 0");
    if (groups != 1)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED, "grouped convolution is not supported");
    const rt_keras_tensor *x = &c->in[0];
    int64_t oh = 0, ow = 0;
    if ((rc = k_out_dim(c, x->dims[0], k[0], s[0], d[0], same, &oh)) < 0 ||
        (rc = k_out_dim(c, x->dims[1], k[1], s[1], d[1], same, &ow)) < 0)
        return rc;
    char kname[RT_KERAS_NAME], bname[RT_KERAS_NAME];
    int n1 = snprintf(kname, sizeof kname, "%s/kernel", c->layer);
    int n2 = snprintf(bname, sizeof bname, "%s/bias", c->layer);
    if (n1 < 0 || n1 >= RT_KERAS_NAME || n2 < 0 || n2 >= RT_KERAS_NAME)
        return rt_keras_fail(c, RT_EINVAL, "layer name is too long");
    int64_t kd[4] = {k[0], k[1], x->dims[2], filters};
    if ((rc = rt_graph_add_param(c->g, kname, 4, kd, kinit, trainable, NULL)) < 0 ||
        (use_bias &&
         (rc = rt_graph_add_param(c->g, bname, 1, &filters, binit, trainable, NULL)) < 0))
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    /* relu/sigmoid/tanh run inside the convolution's output loop */
    int fuse = strcmp(act, "relu") == 0 || strcmp(act, "sigmoid") == 0 ||
               strcmp(act, "tanh") == 0;
    rt_attr at[4] = {
        {.name = "strides", .kind = RT_ATTR_INTS, .n = 2, .ints = s},
        {.name = "dilations", .kind = RT_ATTR_INTS, .n = 2, .ints = d},
        {.name = "padding", .kind = RT_ATTR_STR, .s = pad},
        {.name = "activation", .kind = RT_ATTR_STR, .s = fuse ? act : "linear"},
    };
    const char *in[3] = {x->name, kname, bname};
    if ((rc = rt_graph_add_node(c->g, c->layer, "Conv2D", use_bias ? 3 : 2, in, 4, at)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    snprintf(c->out.name, sizeof c->out.name, "%s", c->layer);
    c->out.ndim = 3;
    c->out.dims[0] = oh;
    c->out.dims[1] = ow;
    c->out.dims[2] = filters;
    return fuse ? 0 : rt_keras_add_activation(c, act);
}

/* MaxPooling2D / AveragePooling2D */
static int k_pool2d(rt_keras_ctx *c, const char *op)
{
    int64_t k[2], s[2];
    int same = 0, rc;
    const char *pad;
    if ((rc = k_channels_last(c)) < 0 || (rc = k_pair(c, "pool_size", 2, 2, k)) < 0 ||
        (rc = k_pair(c, "strides", k[0], k[1], s)) < 0 || (rc = k_padding(c, &pad, &same)) < 0)
        return rc;
    const rt_keras_tensor *x = &c->in[0];
    int64_t oh = 0, ow = 0;
    if ((rc = k_out_dim(c, x->dims[0], k[0], s[0], 1, same, &oh)) < 0 ||
        (rc = k_out_dim(c, x->dims[1], k[1], s[1], 1, same, &ow)) < 0)
        return rc;
    rt_attr at[3] = {
        {.name = "pool", .kind = RT_ATTR_INTS, .n = 2, .ints = k},
        {.name = "strides", .kind = RT_ATTR_INTS, .n = 2, .ints = s},
        {.name = "padding", .kind = RT_ATTR_STR, .s = pad},
    };
    c->out.ndim = 3;
    c->out.dims[0] = oh;
    c->out.dims[1] = ow;
    c->out.dims[2] = x->dims[2];
    return add_simple(c, op, 3, at);
}

static int k_maxpool2d(rt_keras_ctx *c) { return k_pool2d(c, "MaxPool2D"); }
static int k_avgpool2d(rt_keras_ctx *c) { return k_pool2d(c, "AvgPool2D"); }

static int k_gap2d(rt_keras_ctx *c)
{
    int keep, rc;
    if ((rc = k_channels_last(c)) < 0 || (rc = rt_keras_cfg_bool(c, "keepdims", 0, &keep)) < 0)
        return rc;
    const int64_t C = c->in[0].dims[2];
    rt_attr at = {.name = "keepdims", .kind = RT_ATTR_INT, .i = keep};
    if (keep) {
        c->out.ndim = 3;
        c->out.dims[0] = c->out.dims[1] = 1;
        c->out.dims[2] = C;
    } else {
        c->out.ndim = 1;
        c->out.dims[0] = C;
    }
    return add_simple(c, "GlobalAvgPool", 1, &at);
}

/* BatchNormalization over the last axis. trainable=false freezes gamma and
 * beta and runs the layer in inference mode, as Keras does; center/scale
 * false keep beta at 0 / gamma at 1 (non-trainable). */
static int k_batchnorm(rt_keras_ctx *c)
{
    double mom, eps;
    int center, scale, trainable, rc;
    int64_t axis[2];
    rt_init ginit, binit, minit, vinit;
    if ((rc = rt_keras_cfg_float(c, "momentum", 0.99, &mom)) < 0 ||
        (rc = rt_keras_cfg_float(c, "epsilon", 1e-3, &eps)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "center", 1, &center)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "scale", 1, &scale)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "trainable", 1, &trainable)) < 0 ||
        (rc = rt_keras_cfg_init(c, "gamma_initializer", RT_INIT_ONES, &ginit)) < 0 ||
        (rc = rt_keras_cfg_init(c, "beta_initializer", RT_INIT_ZEROS, &binit)) < 0 ||
        (rc = rt_keras_cfg_init(c, "moving_mean_initializer", RT_INIT_ZEROS, &minit)) < 0 ||
        (rc = rt_keras_cfg_init(c, "moving_variance_initializer", RT_INIT_ONES, &vinit)) < 0)
        return rc;
    const rt_keras_tensor *x = &c->in[0];
    if (x->ndim < 1)
        return rt_keras_fail(c, RT_ESHAPE, "BatchNormalization needs a channel axis");
    int na = rt_keras_cfg_ints(c, "axis", axis, 2);
    if (na < 0)
        return na;
    if (na == 0)
        axis[0] = -1, na = 1;
    if (na != 1 || (axis[0] != -1 && axis[0] != x->ndim))
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "BatchNormalization over axis %lld: only the last axis is supported",
                             (long long)axis[0]);
    if (!(mom >= 0 && mom <= 1) || !(eps > 0))
        return rt_keras_fail(c, RT_EINVAL, "momentum must be in [0, 1] and epsilon > 0");
    const int64_t C = x->dims[x->ndim - 1];
    static const char *sfx[4] = {"gamma", "beta", "moving_mean", "moving_variance"};
    char names[4][RT_KERAS_NAME];
    const rt_init inits[4] = {scale ? ginit : RT_INIT_ONES, center ? binit : RT_INIT_ZEROS,
                              minit, vinit};
    const int train[4] = {trainable && scale, trainable && center, 0, 0};
    for (int i = 0; i < 4; i++) {
        int n = snprintf(names[i], RT_KERAS_NAME, "%s/%s", c->layer, sfx[i]);
        if (n < 0 || n >= RT_KERAS_NAME)
            return rt_keras_fail(c, RT_EINVAL, "layer name is too long");
        if ((rc = rt_graph_add_param(c->g, names[i], 1, &C, inits[i], train[i], NULL)) < 0)
            return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    }
    rt_attr at[3] = {
        {.name = "momentum", .kind = RT_ATTR_FLOAT, .f = mom},
        {.name = "epsilon", .kind = RT_ATTR_FLOAT, .f = eps},
        {.name = "frozen", .kind = RT_ATTR_INT, .i = !trainable},
    };
    const char *in[5] = {x->name, names[0], names[1], names[2], names[3]};
    if ((rc = rt_graph_add_node(c->g, c->layer, "BatchNorm", 5, in, 3, at)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    snprintf(c->out.name, sizeof c->out.name, "%s", c->layer);
    c->out.ndim = x->ndim;
    memcpy(c->out.dims, x->dims, sizeof c->out.dims);
    return 0;
}

/* Concatenate (Functional models): axis counts the batch, default -1 */
static int k_concatenate(rt_keras_ctx *c)
{
    int64_t axis;
    int rc = rt_keras_cfg_int(c, "axis", -1, &axis);
    if (rc < 0)
        return rc;
    const int nd = c->in[0].ndim;
    int64_t ax = axis < 0 ? axis + nd + 1 : axis;
    if (ax < 1 || ax > nd)
        return rt_keras_fail(c, RT_EINVAL, "Concatenate axis %lld is outside 1..%d",
                             (long long)axis, nd);
    c->out = c->in[0];
    c->out.dims[ax - 1] = 0;
    const char *in[RT_KERAS_MAX_IN];
    for (int i = 0; i < c->n_in; i++) {
        if (c->in[i].ndim != nd)
            return rt_keras_fail(c, RT_ESHAPE, "Concatenate inputs have different ranks");
        for (int j = 0; j < nd; j++)
            if (j != ax - 1 && c->in[i].dims[j] != c->in[0].dims[j])
                return rt_keras_fail(c, RT_ESHAPE,
                                     "Concatenate input %d has dim %d = %lld, expected %lld",
                                     i, j + 1, (long long)c->in[i].dims[j],
                                     (long long)c->in[0].dims[j]);
        c->out.dims[ax - 1] += c->in[i].dims[ax - 1];
        in[i] = c->in[i].name;
    }
    rt_attr at = {.name = "axis", .kind = RT_ATTR_INT, .i = ax};
    if ((rc = rt_graph_add_node(c->g, c->layer, "Concat", c->n_in, in, 1, &at)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    snprintf(c->out.name, sizeof c->out.name, "%s", c->layer);
    return 0;
}

/* One entry per supported layer class. InputLayer is handled by the model
 * walkers since it creates the graph input instead of a node. */
static const struct {
    const char *class_name;
    rt_keras_layer_fn fn;
    int n_in; /* inputs it takes; 0 = any number >= 1 */
} layer_table[] = {
    {"Dense", k_dense, 1},
    {"Activation", k_activation, 1},
    {"Dropout", k_dropout, 1},
    {"Flatten", k_flatten, 1},
    {"Reshape", k_reshape, 1},
    {"Conv2D", k_conv2d, 1},
    {"MaxPooling2D", k_maxpool2d, 1},
    {"MaxPool2D", k_maxpool2d, 1},
    {"AveragePooling2D", k_avgpool2d, 1},
    {"AvgPool2D", k_avgpool2d, 1},
    {"GlobalAveragePooling2D", k_gap2d, 1},
    {"GlobalAvgPool2D", k_gap2d, 1},
    {"BatchNormalization", k_batchnorm, 1},
    {"Concatenate", k_concatenate, 0},
    /* import_keras_rnn.c */
    {"Embedding", rt_keras_embedding, 1},
    {"SimpleRNN", rt_keras_simplernn, 1},
    {"LSTM", rt_keras_lstm, 1},
    {"GRU", rt_keras_gru, 1},
    {"Bidirectional", rt_keras_bidirectional, 1},
};

/* ---------------------------------------------------------------- walking */

typedef struct imp {
    rt_graph *g;
    char *err;
    size_t errlen;
} imp;

static int ifail(imp *m, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int ifail(imp *m, int code, const char *fmt, ...)
{
    if (m->err && m->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m->err, m->errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

static const char *jstr(json_object *o, const char *key)
{
    json_object *v;
    if (!o || !json_object_object_get_ex(o, key, &v) ||
        !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

static json_object *jget(json_object *o, const char *key, json_type t)
{
    json_object *v;
    if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, t))
        return NULL;
    return v;
}

/* The per-sample shape from batch_input_shape / batch_shape / input_shape. */
static int shape_from_list(imp *m, const char *lname, json_object *s, int skip,
                           rt_keras_tensor *t);

static int layer_input_shape(imp *m, const char *lname, json_object *cfg,
                             rt_keras_tensor *t, int *found)
{
    json_object *s = jget(cfg, "batch_input_shape", json_type_array);
    int skip = 1;
    if (!s)
        s = jget(cfg, "batch_shape", json_type_array);
    if (!s) {
        s = jget(cfg, "input_shape", json_type_array);
        skip = 0;
    }
    *found = s != NULL;
    if (!s)
        return 0;
    return shape_from_list(m, lname, s, skip, t);
}

/* A shape list ([null, 4] with skip = 1 for the batch entry) -> t. */
static int shape_from_list(imp *m, const char *lname, json_object *s, int skip,
                           rt_keras_tensor *t)
{
    int n = (int)json_object_array_length(s) - skip;
    if (n < 0 || n > RT_MAX_DIMS - 1)
        return ifail(m, RT_ESHAPE, "input shape of layer '%.64s' has %d dims", lname, n);
    t->ndim = n;
    int64_t numel = 1;
    for (int i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(s, (size_t)(i + skip));
        if (!e || !json_object_is_type(e, json_type_int) || json_object_get_int64(e) <= 0)
            return ifail(m, RT_ESHAPE,
                         "input shape of layer '%.64s' has an unknown or bad dim %d",
                         lname, i + 1);
        t->dims[i] = json_object_get_int64(e);
        if (__builtin_mul_overflow(numel, t->dims[i], &numel) || numel > RT__MAX_NUMEL)
            return ifail(m, RT_EOVERFLOW,
                         "input shape of layer '%.64s' has more than 2^32 values", lname);
    }
    return 0;
}

static int add_input(imp *m, const char *name, rt_keras_tensor *t)
{
    int64_t d[RT_MAX_DIMS];
    d[0] = RT_BATCH;
    memcpy(d + 1, t->dims, sizeof(int64_t) * (size_t)t->ndim);
    int rc = rt_graph_add_input(m->g, name, RT_F32, t->ndim + 1, d);
    if (rc < 0)
        return ifail(m, rc, "input '%.64s': %s", name, rt_graph_errmsg(m->g));
    snprintf(t->name, sizeof t->name, "%s", name);
    return 0;
}

/* Run one non-input layer on its inputs; records its output. */
static int run_layer(imp *m, json_object *layer, const rt_keras_tensor *ins,
                     int n_in, rt_keras_tensor *out)
{
    const char *cls = jstr(layer, "class_name");
    json_object *cfg = jget(layer, "config", json_type_object);
    const char *lname = jstr(cfg, "name");
    if (!lname)
        lname = jstr(layer, "name");
    if (!cls || !lname)
        return ifail(m, RT_EJSON, "a layer lacks class_name or config.name");
    rt_keras_ctx c;
    memset(&c, 0, sizeof c);
    c.g = m->g;
    c.cfg = cfg;
    c.layer = lname;
    c.class_name = cls;
    c.err = m->err;
    c.errlen = m->errlen;
    if (n_in > RT_KERAS_MAX_IN)
        return rt_keras_fail(&c, RT_EINVAL, "too many inputs (%d)", n_in);
    c.n_in = n_in;
    for (int i = 0; i < n_in; i++)
        c.in[i] = ins[i];
    for (size_t i = 0; i < sizeof layer_table / sizeof layer_table[0]; i++) {
        if (strcmp(layer_table[i].class_name, cls) != 0)
            continue;
        if (layer_table[i].n_in && n_in != layer_table[i].n_in)
            return rt_keras_fail(&c, RT_EINVAL, "%s takes %d input(s), got %d", cls,
                                 layer_table[i].n_in, n_in);
        int rc = layer_table[i].fn(&c);
        if (rc < 0)
            return rc;
        *out = c.out;
        return 0;
    }
    return ifail(m, RT_EUNKNOWN_LAYER, "unknown Keras layer '%.48s' (layer '%.64s')",
                 cls, lname);
}

static int walk_sequential(imp *m, json_object *layers, json_object *model_cfg)
{
    int n = (int)json_object_array_length(layers);
    if (n == 0)
        return ifail(m, RT_EJSON, "Sequential model has no layers");
    rt_keras_tensor cur;
    memset(&cur, 0, sizeof cur);
    int have = 0;
    for (int i = 0; i < n; i++) {
        json_object *layer = json_object_array_get_idx(layers, (size_t)i);
        const char *cls = jstr(layer, "class_name");
        json_object *cfg = jget(layer, "config", json_type_object);
        const char *lname = jstr(cfg, "name");
        if (!cls || !cfg || !lname)
            return ifail(m, RT_EJSON, "layer %d lacks class_name or config.name", i);
        if (strcmp(cls, "InputLayer") == 0) {
            if (have)
                return ifail(m, RT_EINVAL, "InputLayer '%.64s' is not first", lname);
            int found, rc = layer_input_shape(m, lname, cfg, &cur, &found);
            if (rc < 0)
                return rc;
            if (!found)
                return ifail(m, RT_ESHAPE, "InputLayer '%.64s' has no shape", lname);
            if ((rc = add_input(m, lname, &cur)) < 0)
                return rc;
            have = 1;
            continue;
        }
        if (!have) {
            /* Keras 2 puts the input shape on the first layer itself; a
             * built Keras 3 model without an InputLayer keeps it in the
             * model's build_input_shape or the layer's build_config. */
            int found, rc = layer_input_shape(m, lname, cfg, &cur, &found);
            if (rc < 0)
                return rc;
            if (!found) {
                json_object *bc = jget(layer, "build_config", json_type_object);
                json_object *l = model_cfg ? jget(model_cfg, "build_input_shape", json_type_array)
                                           : NULL;
                if (!l)
                    l = jget(bc, "input_shape", json_type_array);
                if (l) {
                    if ((rc = shape_from_list(m, lname, l, 1, &cur)) < 0)
                        return rc;
                    found = 1;
                }
            }
            if (!found)
                return ifail(m, RT_ESHAPE,
                             "the model's input shape is unknown: first layer '%.64s' "
                             "has no batch_input_shape and there is no InputLayer", lname);
            if ((rc = add_input(m, "input", &cur)) < 0)
                return rc;
            have = 1;
        }
        rt_keras_tensor out;
        int rc = run_layer(m, layer, &cur, 1, &out);
        if (rc < 0)
            return rc;
        cur = out;
    }
    if (rt_graph_set_output(m->g, cur.name) < 0)
        return ifail(m, RT_EGRAPH, "%s", rt_graph_errmsg(m->g));
    return 0;
}

/* The source layer names of a Functional layer's single inbound node, for
 * both the Keras 2 ([[["name", 0, 0, {}], ...]]) and the Keras 3
 * ([{"args": [tensor or [tensors]], "kwargs": {}}]) encodings. */
static int inbound_names(imp *m, const char *lname, json_object *layer,
                         const char **names, int max)
{
    json_object *nodes = jget(layer, "inbound_nodes", json_type_array);
    if (!nodes || json_object_array_length(nodes) == 0)
        return 0;
    if (json_object_array_length(nodes) > 1)
        return ifail(m, RT_EINVAL,
                     "layer '%.64s' is called more than once (shared layers are not supported)",
                     lname);
    json_object *node = json_object_array_get_idx(nodes, 0);
    int n = 0;
    if (json_object_is_type(node, json_type_array)) {
        int k = (int)json_object_array_length(node);
        for (int i = 0; i < k && n < max; i++) {
            json_object *ref = json_object_array_get_idx(node, (size_t)i);
            json_object *nm = json_object_is_type(ref, json_type_array)
                                  ? json_object_array_get_idx(ref, 0) : NULL;
            if (!nm || !json_object_is_type(nm, json_type_string))
                return ifail(m, RT_EJSON, "layer '%.64s' has a malformed inbound node", lname);
            names[n++] = json_object_get_string(nm);
        }
        return n;
    }
    json_object *args = jget(node, "args", json_type_array);
    if (!args)
        return ifail(m, RT_EJSON, "layer '%.64s' has a malformed inbound node", lname);
    /* args is [tensor] or [[tensor, tensor, ...]]. */
    json_object *list = args;
    if (json_object_array_length(args) == 1 &&
        json_object_is_type(json_object_array_get_idx(args, 0), json_type_array))
        list = json_object_array_get_idx(args, 0);
    int k = (int)json_object_array_length(list);
    for (int i = 0; i < k && n < max; i++) {
        json_object *t = json_object_array_get_idx(list, (size_t)i);
        json_object *tc = jget(t, "config", json_type_object);
        json_object *h = jget(tc, "keras_history", json_type_array);
        json_object *nm = h ? json_object_array_get_idx(h, 0) : NULL;
        if (!nm || !json_object_is_type(nm, json_type_string))
            return ifail(m, RT_EJSON, "layer '%.64s' has a malformed inbound tensor", lname);
        names[n++] = json_object_get_string(nm);
    }
    return n;
}

/* ["name", 0, 0] or [["name", 0, 0], ...] -> names. */
static int io_names(json_object *v, const char **names, int max)
{
    if (!v || !json_object_is_type(v, json_type_array) || json_object_array_length(v) == 0)
        return 0;
    json_object *first = json_object_array_get_idx(v, 0);
    if (json_object_is_type(first, json_type_string)) {
        names[0] = json_object_get_string(first);
        return 1;
    }
    int n = 0;
    for (size_t i = 0; i < json_object_array_length(v) && n < max; i++) {
        json_object *e = json_object_array_get_idx(v, i);
        json_object *nm = json_object_is_type(e, json_type_array)
                              ? json_object_array_get_idx(e, 0) : NULL;
        if (!nm || !json_object_is_type(nm, json_type_string))
            return -1;
        names[n++] = json_object_get_string(nm);
    }
    return n;
}

/* A Functional model's layer, with the layers it reads */
typedef struct flayer {
    const char *cls, *name;
    json_object *obj, *cfg;
    const char *src[RT_KERAS_MAX_IN];
    int n_src;
    int next;               /* DFS: the next input to visit */
    unsigned char state;    /* 0 unseen, 1 on the DFS stack, 2 placed */
    rt_keras_tensor out;
} flayer;

/* Layer names -> index, open addressing (FNV-1a); a linear scan per lookup
 * made a 20,000-layer import take seconds. */
typedef struct lmap {
    int *slot;              /* layer index + 1, 0 = empty */
    size_t mask;
} lmap;

static size_t lmap_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)h;
}

/* the slot holding name, or the empty slot where it would go */
static int *lmap_slot(const lmap *lm, const flayer *L, const char *name)
{
    size_t h = lmap_hash(name) & lm->mask;
    while (lm->slot[h] && strcmp(L[lm->slot[h] - 1].name, name) != 0) h = (h + 1) & lm->mask;
    return &lm->slot[h];
}

static int lmap_get(const lmap *lm, const flayer *L, const char *name)
{
    return *lmap_slot(lm, L, name) - 1;
}

/* Read every layer's class, name and inbound layer names; map the names. */
static int read_flayers(imp *m, json_object *layers, flayer *L, int n, lmap *lm)
{
    for (int i = 0; i < n; i++) {
        flayer *f = &L[i];
        f->obj = json_object_array_get_idx(layers, (size_t)i);
        f->cls = jstr(f->obj, "class_name");
        f->cfg = jget(f->obj, "config", json_type_object);
        f->name = jstr(f->obj, "name");
        if (!f->name)
            f->name = jstr(f->cfg, "name");
        if (!f->cls || !f->name)
            return ifail(m, RT_EJSON, "layer %d lacks class_name or name", i);
        int *slot = lmap_slot(lm, L, f->name);
        if (*slot)
            return ifail(m, RT_EINVAL, "two layers are named '%.64s'", f->name);
        *slot = i + 1;
        if (strcmp(f->cls, "InputLayer") == 0)
            continue;
        f->n_src = inbound_names(m, f->name, f->obj, f->src, RT_KERAS_MAX_IN);
        if (f->n_src < 0)
            return f->n_src;
        if (f->n_src == 0)
            return ifail(m, RT_EINVAL, "layer '%.64s' has no inbound node", f->name);
    }
    return 0;
}

/* Add one layer whose inputs are all placed. */
static int place_flayer(imp *m, flayer *L, const lmap *lm, flayer *f, const char *model_in)
{
    if (strcmp(f->cls, "InputLayer") == 0) {
        int found, rc;
        memset(&f->out, 0, sizeof f->out);
        if ((rc = layer_input_shape(m, f->name, f->cfg, &f->out, &found)) < 0)
            return rc;
        if (!found)
            return ifail(m, RT_ESHAPE, "InputLayer '%.64s' has no shape", f->name);
        if (strcmp(f->name, model_in) != 0)
            return ifail(m, RT_EINVAL, "InputLayer '%.64s' is not the model input", f->name);
        return add_input(m, f->name, &f->out);
    }
    rt_keras_tensor ins[RT_KERAS_MAX_IN];
    for (int j = 0; j < f->n_src; j++)
        ins[j] = L[lmap_get(lm, L, f->src[j])].out;
    return run_layer(m, f->obj, ins, f->n_src, &f->out);
}

/* Place layer i after everything it reads, depth first without recursion:
 * Keras lists layers in topological order, so a real file places each
 * layer as it is met, but a hand-edited one may not. stack: n ints. */
static int place_from(imp *m, flayer *L, const lmap *lm, int i, int *stack,
                      const char *model_in)
{
    int sp = 0, rc;
    stack[sp++] = i;
    L[i].state = 1;
    while (sp) {
        flayer *f = &L[stack[sp - 1]];
        if (f->next < f->n_src) {
            const char *src = f->src[f->next++];
            int j = lmap_get(lm, L, src);
            if (j < 0)
                return ifail(m, RT_EINVAL, "layer '%.64s' reads '%.64s', which no layer produces",
                             f->name, src);
            if (L[j].state == 1)
                return ifail(m, RT_EINVAL, "layers form a cycle through '%.64s'", src);
            if (L[j].state == 0) {
                L[j].state = 1;
                stack[sp++] = j;
            }
            continue;
        }
        if ((rc = place_flayer(m, L, lm, f, model_in)) < 0)
            return rc;
        f->state = 2;
        sp--;
    }
    return 0;
}

static int walk_functional(imp *m, json_object *cfg)
{
    json_object *layers = jget(cfg, "layers", json_type_array);
    if (!layers)
        return ifail(m, RT_EJSON, "Functional model has no layers list");
    const char *in_names[4], *out_names[4];
    json_object *il = NULL, *ol = NULL;
    json_object_object_get_ex(cfg, "input_layers", &il);
    json_object_object_get_ex(cfg, "output_layers", &ol);
    int n_in = io_names(il, in_names, 4), n_out = io_names(ol, out_names, 4);
    if (n_in != 1)
        return ifail(m, RT_EINVAL, "Functional model needs exactly one input (got %d)", n_in);
    if (n_out != 1)
        return ifail(m, RT_EINVAL, "Functional model needs exactly one output (got %d)", n_out);
    const int n = (int)json_object_array_length(layers);
    lmap lm = {.mask = 15};
    while (lm.mask + 1 < (size_t)n * 2)
        lm.mask = lm.mask * 2 + 1;
    flayer *L = calloc((size_t)n + 1, sizeof *L);
    int *stack = calloc((size_t)n + 1, sizeof *stack);
    lm.slot = calloc(lm.mask + 1, sizeof *lm.slot);
    int rc = !L || !stack || !lm.slot ? RT_ENOMEM : read_flayers(m, layers, L, n, &lm);
    for (int i = 0; i < n && rc == 0; i++)
        if (L[i].state == 0)
            rc = place_from(m, L, &lm, i, stack, in_names[0]);
    if (rc == 0) {
        int o = lmap_get(&lm, L, out_names[0]);
        if (o < 0)
            rc = ifail(m, RT_EINVAL, "output layer '%.64s' is not in the model", out_names[0]);
        else if (rt_graph_set_output(m->g, L[o].out.name) < 0)
            rc = ifail(m, RT_EGRAPH, "%s", rt_graph_errmsg(m->g));
    }
    free(L);
    free(stack);
    free(lm.slot);
    return rc;
}

int rt_keras_import(const char *json, size_t len, rt_graph **out, char *err,
                    size_t errlen)
{
    *out = NULL;
    if (err && errlen)
        err[0] = 0;
    imp m;
    memset(&m, 0, sizeof m);
    m.err = err;
    m.errlen = errlen;
    if (!json || len == 0)
        return ifail(&m, RT_EJSON, "empty Keras JSON");
    if (len > (size_t)INT32_MAX)
        return ifail(&m, RT_ETOOBIG, "Keras JSON is too large");
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return RT_ENOMEM;
    json_object *root = json_tokener_parse_ex(tok, json, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t used = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (!root || jerr != json_tokener_success) {
        json_object_put(root);
        return ifail(&m, RT_EJSON, "Keras JSON does not parse: %s at byte %zu",
                     json_tokener_error_desc(jerr), used);
    }
    /* json-c stops at the end of the first document; one model is one
     * document, and anything after it but whitespace is an error */
    for (size_t i = used; i < len; i++)
        if (!isspace((unsigned char)json[i])) {
            json_object_put(root);
            return ifail(&m, RT_EJSON, "trailing data after the Keras JSON at byte %zu", i);
        }
    int rc = 0;
    const char *cls = jstr(root, "class_name");
    json_object *cfg = NULL;
    json_object_object_get_ex(root, "config", &cfg);
    if (!cls || !cfg) {
        rc = ifail(&m, RT_EJSON, "not a Keras model: no class_name/config at the top");
        goto out;
    }
    m.g = rt_graph_create();
    if (!m.g) {
        rc = RT_ENOMEM;
        goto out;
    }
    if (strcmp(cls, "Sequential") == 0) {
        /* Keras 2.0-2.1 wrote the layer list as the config itself. */
        json_object *layers = json_object_is_type(cfg, json_type_array)
                                  ? cfg : jget(cfg, "layers", json_type_array);
        rc = layers ? walk_sequential(&m, layers,
                                      json_object_is_type(cfg, json_type_object) ? cfg : NULL)
                    : ifail(&m, RT_EJSON, "Sequential model has no layers list");
    } else if (strcmp(cls, "Functional") == 0 || strcmp(cls, "Model") == 0) {
        rc = walk_functional(&m, cfg);
    } else {
        rc = ifail(&m, RT_EUNKNOWN_LAYER,
                   "unknown Keras model class '%.48s' (Sequential, Functional or Model)", cls);
    }
out:
    json_object_put(root);
    if (rc < 0) {
        rt_graph_destroy(m.g);
        return rc;
    }
    *out = m.g;
    return 0;
}
