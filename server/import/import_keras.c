/* import_keras.c - Keras model JSON -> rt_graph (see import_keras.h). */
#include "import_keras.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "rt_act.h"
#include "rt_engine_impl.h"
#include "rt_errf.h"

/* The layer's own node becomes its output; helpers for single-op layers. */
static int add_simple(rt_keras_ctx *c, const char *op, int n_attr, const rt_attr *attrs)
{
    const char *in[1] = {c->in[0].name};
    int rc = rt_graph_add_node(c->g, c->layer, op, 1, in, n_attr, attrs);
    if (rc < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    snprintf(c->out.name, sizeof c->out.name, "%s", c->layer);
    return 0;
}

/* ------------------------------------------------------------------ layers */

/* An ActivityReg node after the layer's output: Keras adds
 * regularizer(output) to the loss, divided by the batch size in Keras 2
 * (base_layer's mean_activity_loss), undivided in Keras 3. */
static int add_actreg(rt_keras_ctx *c, double l1, double l2)
{
    char name[RT_KERAS_NAME];
    if (snprintf(name, sizeof name, "%s/activity_reg", c->layer) >= (int)sizeof name)
        return rt_keras_fail(c, RT_EINVAL, "layer name too long");
    const char *in[1] = {c->out.name};
    const rt_attr a[3] = {
        {.name = "l1", .kind = RT_ATTR_FLOAT, .f = l1},
        {.name = "l2", .kind = RT_ATTR_FLOAT, .f = l2},
        {.name = "batch_mean", .kind = RT_ATTR_INT, .i = c->keras3 ? 0 : 1},
    };
    int rc = rt_graph_add_node(c->g, name, "ActivityReg", 1, in, 3, a);
    if (rc < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    snprintf(c->out.name, sizeof c->out.name, "%s", name);
    return 0;
}

/* A layer's activity_regularizer (after its function set c->out; also a
 * Bidirectional half's, import_keras_rnn.c). */
int rt_keras_activity_reg(rt_keras_ctx *c)
{
    json_object *v = NULL;
    if (!c->cfg || !json_object_object_get_ex(c->cfg, "activity_regularizer", &v))
        return 0;
    rt_keras_cfg_unused(c, "activity_regularizer");
    if (!v)
        return 0;
    rt_param_opts o;
    memset(&o, 0, sizeof o);
    int rc = rt_keras_cfg_reg(c, "activity_regularizer", v, &o);
    if (rc < 0)
        return rc;
    return add_actreg(c, o.l1, o.l2);
}

/* ActivityRegularization(l1, l2): the penalty on its input, passed through */
static int k_actreg(rt_keras_ctx *c)
{
    double l1, l2;
    int rc;
    if ((rc = rt_keras_cfg_float(c, "l1", 0.0, &l1)) < 0 ||
        (rc = rt_keras_cfg_float(c, "l2", 0.0, &l2)) < 0)
        return rc;
    if (!(l1 >= 0) || !(l2 >= 0))
        return rt_keras_fail(c, RT_EINVAL, "ActivityRegularization needs l1, l2 >= 0");
    /* Keras 3 serializes the layer's own regularizer too: l1/l2 define it */
    rt_keras_cfg_unused(c, "activity_regularizer");
    c->out = c->in[0];
    return add_actreg(c, l1, l2);
}

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
    if ((rc = rt_keras_name(c, kname, "kernel")) < 0 || (rc = rt_keras_name(c, bname, "bias")) < 0)
        return rc;
    int64_t kd[2] = {fan_in, units};
    /* trainable=false (transfer learning): frozen, no gradient or update */
    if ((rc = rt_graph_add_param(c->g, kname, 2, kd, kinit, trainable, NULL)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    if (use_bias && (rc = rt_graph_add_param(c->g, bname, 1, &units, binit, trainable, NULL)) < 0)
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
    const char *op = rt_act_op(act);
    if (op)
        return add_simple(c, op, 0, NULL);
    int ext = rt_keras_layers_activation(c, act, c->layer);
    if (ext <= 0)
        return ext;
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
    rt_attr a[2] = {{.name = "rate", .kind = RT_ATTR_FLOAT, .f = rate},
                    {.name = "noise_shape", .kind = RT_ATTR_INTS}};
    /* noise_shape (Keras' order, the batch first; null entries: the
     * input's size): one draw per mask element, shared along its 1s */
    int64_t ns[RT_MAX_DIMS + 1];
    json_object *v = rt_keras_cfg_get(c, "noise_shape");
    if (v) {
        const int r = c->in[0].ndim + 1;
        if (!json_object_is_type(v, json_type_array) || (int)json_object_array_length(v) != r)
            return rt_keras_fail(c, RT_EINVAL, "noise_shape must be a list of %d entries", r);
        for (int i = 0; i < r; i++) {
            json_object *e = json_object_array_get_idx(v, (size_t)i);
            if (e && !json_object_is_type(e, json_type_int))
                return rt_keras_fail(c, RT_EINVAL, "noise_shape entry %d is not an int or null", i);
            ns[i] = e ? json_object_get_int64(e) : -1;
        }
        if (c->in[0].layout == RT_KERAS_CF && r > 2) {
            /* Keras (B, C, S1..Sk) held (B, S1..Sk, C) */
            const int64_t ch = ns[1];
            memmove(ns + 1, ns + 2, sizeof(int64_t) * (size_t)(r - 2));
            ns[r - 1] = ch;
        }
        a[1].n = r;
        a[1].ints = ns;
    }
    return add_simple(c, "Dropout", v ? 2 : 1, a);
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
    /* channels_first flattens in another order than the engine's NHWC */
    if (rc < 0 || (rc = rt_keras_channels_last(c)) < 0)
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
    int rc = rt_keras_channels_last(c);
    if (rc < 0)
        return rc;
    if (c->in[0].ndim != 3)
        return rt_keras_fail(c, RT_ESHAPE, "%s needs (H, W, C) inputs, got rank %d", c->class_name,
                             c->in[0].ndim);
    return 0;
}

/* A pair setting ("kernel_size": [3, 3] or 3) into out[2]; def when absent
 * (or null, as Keras writes "strides": null for pools). */
static int k_pair(rt_keras_ctx *c, const char *key, int64_t def0, int64_t def1, int64_t out[2])
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
    if ((rc = k_channels_last(c)) < 0 || (rc = rt_keras_cfg_int(c, "filters", 0, &filters)) < 0 ||
        (rc = rt_keras_cfg_int(c, "groups", 1, &groups)) < 0 ||
        (rc = k_pair(c, "kernel_size", 0, 0, k)) < 0 || (rc = k_pair(c, "strides", 1, 1, s)) < 0 ||
        (rc = k_pair(c, "dilation_rate", 1, 1, d)) < 0 || (rc = k_padding(c, &pad, &same)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "use_bias", 1, &use_bias)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "trainable", 1, &trainable)) < 0 ||
        (rc = rt_keras_cfg_str(c, "activation", "linear", &act)) < 0 ||
        (rc = rt_keras_cfg_init(c, "kernel_initializer", RT_INIT_GLOROT_UNIFORM, &kinit)) < 0 ||
        (rc = rt_keras_cfg_init(c, "bias_initializer", RT_INIT_ZEROS, &binit)) < 0)
        return rc;
    if (filters <= 0)
        return rt_keras_fail(c, RT_EINVAL, "Conv2D needs filters > 0");
    const rt_keras_tensor *x = &c->in[0];
    if (groups < 1 || x->dims[2] % groups || filters % groups)
        return rt_keras_fail(c, RT_EINVAL, "groups %lld must divide %lld channels and %lld filters",
                             (long long)groups, (long long)x->dims[2], (long long)filters);
    int64_t oh = 0, ow = 0;
    if ((rc = rt_keras_window_out(c, x->dims[0], k[0], s[0], d[0], same, &oh)) < 0 ||
        (rc = rt_keras_window_out(c, x->dims[1], k[1], s[1], d[1], same, &ow)) < 0)
        return rc;
    char kname[RT_KERAS_NAME], bname[RT_KERAS_NAME];
    int n1 = snprintf(kname, sizeof kname, "%s/kernel", c->layer);
    int n2 = snprintf(bname, sizeof bname, "%s/bias", c->layer);
    if (n1 < 0 || n1 >= RT_KERAS_NAME || n2 < 0 || n2 >= RT_KERAS_NAME)
        return rt_keras_fail(c, RT_EINVAL, "layer name is too long");
    int64_t kd[4] = {k[0], k[1], x->dims[2] / groups, filters};
    if ((rc = rt_graph_add_param(c->g, kname, 4, kd, kinit, trainable, NULL)) < 0 ||
        (use_bias &&
         (rc = rt_graph_add_param(c->g, bname, 1, &filters, binit, trainable, NULL)) < 0))
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    /* relu/sigmoid/tanh run inside the convolution's output loop */
    int fuse = strcmp(act, "relu") == 0 || strcmp(act, "sigmoid") == 0 || strcmp(act, "tanh") == 0;
    rt_attr at[5] = {
        {.name = "strides", .kind = RT_ATTR_INTS, .n = 2, .ints = s},
        {.name = "dilations", .kind = RT_ATTR_INTS, .n = 2, .ints = d},
        {.name = "padding", .kind = RT_ATTR_STR, .s = pad},
        {.name = "activation", .kind = RT_ATTR_STR, .s = fuse ? act : "linear"},
        {.name = "group", .kind = RT_ATTR_INT, .i = groups},
    };
    const char *in[3] = {x->name, kname, bname};
    if ((rc = rt_graph_add_node(c->g, c->layer, "Conv2D", use_bias ? 3 : 2, in, 5, at)) < 0)
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
    if ((rc = rt_keras_window_out(c, x->dims[0], k[0], s[0], 1, same, &oh)) < 0 ||
        (rc = rt_keras_window_out(c, x->dims[1], k[1], s[1], 1, same, &ow)) < 0)
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

/* TimeDistributed(Dense): the engine's Dense maps the last axis of any
 * (B, ..., in) input, which is TimeDistributed's result for a Dense; the
 * inner config becomes the layer's (its weights take the wrapper's name).
 * Other inner layers are refused. */
static int k_timedistributed(rt_keras_ctx *c)
{
    json_object *inner = NULL, *icfg = NULL, *cls = NULL;
    rt_keras_cfg_unused(c, "layer");
    if (!json_object_object_get_ex(c->cfg, "layer", &inner) || !inner ||
        !json_object_object_get_ex(inner, "class_name", &cls) ||
        !json_object_is_type(cls, json_type_string) ||
        !json_object_object_get_ex(inner, "config", &icfg) ||
        !json_object_is_type(icfg, json_type_object))
        return rt_keras_fail(c, RT_EINVAL, "TimeDistributed needs a layer with a config");
    const char *name = json_object_get_string(cls);
    if (strcmp(name, "Dense") != 0)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "TimeDistributed over '%.40s' is not supported (Dense only)", name);
    if (c->in[0].ndim < 2)
        return rt_keras_fail(c, RT_ESHAPE, "TimeDistributed needs an input (B, T, ...)");
    /* the wrapper's own fields: only inert ones */
    json_object_object_foreach(c->cfg, k, v)
    {
        if (strcmp(k, "layer") == 0 || strcmp(k, "name") == 0 || strcmp(k, "trainable") == 0 ||
            strcmp(k, "dtype") == 0 || !v)
            continue;
        return rt_keras_fail(c, RT_EUNIMPLEMENTED, "TimeDistributed: unsupported setting '%.40s'",
                             k);
    }
    json_object *ar = NULL;
    if (json_object_object_get_ex(icfg, "activity_regularizer", &ar) && ar)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "activity_regularizer inside TimeDistributed is not supported");
    /* the wrapper's trainable freezes the inner layer as Keras does */
    json_object *tr = NULL;
    int frozen = json_object_object_get_ex(c->cfg, "trainable", &tr) && tr &&
                 json_object_is_type(tr, json_type_boolean) && !json_object_get_boolean(tr);
    c->cfg = icfg;
    c->n_used = 0;
    int rc = k_dense(c);
    if (rc == 0 && frozen)
        for (int k = 0; k < c->g->n; k++)
            if (c->g->e[k].kind == RT__T_PARAM &&
                strncmp(c->g->e[k].name, c->layer, strlen(c->layer)) == 0 &&
                c->g->e[k].name[strlen(c->layer)] == '/')
                c->g->e[k].trainable = 0;
    return rc;
}

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
    int center, scale, trainable, sync, rc;
    rt_init ginit, binit, minit, vinit;
    if ((rc = rt_keras_cfg_float(c, "momentum", 0.99, &mom)) < 0 ||
        (rc = rt_keras_cfg_float(c, "epsilon", 1e-3, &eps)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "center", 1, &center)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "scale", 1, &scale)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "trainable", 1, &trainable)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "synchronized", 0, &sync)) < 0 ||
        (rc = rt_keras_cfg_init(c, "gamma_initializer", RT_INIT_ONES, &ginit)) < 0 ||
        (rc = rt_keras_cfg_init(c, "beta_initializer", RT_INIT_ZEROS, &binit)) < 0 ||
        (rc = rt_keras_cfg_init(c, "moving_mean_initializer", RT_INIT_ZEROS, &minit)) < 0 ||
        (rc = rt_keras_cfg_init(c, "moving_variance_initializer", RT_INIT_ONES, &vinit)) < 0)
        return rc;
    const rt_keras_tensor *x = &c->in[0];
    if (x->ndim < 1)
        return rt_keras_fail(c, RT_ESHAPE, "BatchNormalization needs a channel axis");
    if ((rc = rt_keras_last_axis(c, "BatchNormalization", 2)) < 0)
        return rc;
    if (!(mom >= 0 && mom <= 1) || !(eps > 0))
        return rt_keras_fail(c, RT_EINVAL, "momentum must be in [0, 1] and epsilon > 0");
    const int64_t C = x->dims[x->ndim - 1];
    static const char *sfx[4] = {"gamma", "beta", "moving_mean", "moving_variance"};
    char names[4][RT_KERAS_NAME];
    const rt_init inits[4] = {scale ? ginit : RT_INIT_ONES, center ? binit : RT_INIT_ZEROS, minit,
                              vinit};
    const int train[4] = {trainable && scale, trainable && center, 0, 0};
    for (int i = 0; i < 4; i++) {
        int n = snprintf(names[i], RT_KERAS_NAME, "%s/%s", c->layer, sfx[i]);
        if (n < 0 || n >= RT_KERAS_NAME)
            return rt_keras_fail(c, RT_EINVAL, "layer name is too long");
        if ((rc = rt_graph_add_param(c->g, names[i], 1, &C, inits[i], train[i], NULL)) < 0)
            return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    }
    /* Keras 2's SyncBatchNormalization class is BatchNormalization with
     * synchronized=True (Keras 3, tf.keras >= 2.12) */
    sync = sync || !strcmp(c->class_name, "SyncBatchNormalization");
    rt_attr at[4] = {
        {.name = "momentum", .kind = RT_ATTR_FLOAT, .f = mom},
        {.name = "epsilon", .kind = RT_ATTR_FLOAT, .f = eps},
        {.name = "frozen", .kind = RT_ATTR_INT, .i = !trainable},
        {.name = "synchronized", .kind = RT_ATTR_INT, .i = sync},
    };
    const char *in[5] = {x->name, names[0], names[1], names[2], names[3]};
    if ((rc = rt_graph_add_node(c->g, c->layer, "BatchNorm", 5, in, 4, at)) < 0)
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
                return rt_keras_fail(
                    c, RT_ESHAPE, "Concatenate input %d has dim %d = %lld, expected %lld", i, j + 1,
                    (long long)c->in[i].dims[j], (long long)c->in[0].dims[j]);
        c->out.dims[ax - 1] += c->in[i].dims[ax - 1];
        in[i] = c->in[i].name;
    }
    rt_attr at = {.name = "axis", .kind = RT_ATTR_INT, .i = ax};
    if ((rc = rt_graph_add_node(c->g, c->layer, "Concat", c->n_in, in, 1, &at)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    snprintf(c->out.name, sizeof c->out.name, "%s", c->layer);
    return 0;
}

/* Rescaling: x * scale + offset, each a number or one per channel, as
 * constant (non-trainable) parameters broadcast over the input. */
static int k_rescaling(rt_keras_ctx *c)
{
    float sv[4096], ov[4096];
    int64_t ns = 1, no = 1;
    const char *keys[2] = {"scale", "offset"};
    float *vals[2] = {sv, ov};
    int64_t *cnt[2] = {&ns, &no};
    const double defs[2] = {1.0, 0.0};
    for (int k = 0; k < 2; k++) {
        json_object *v = rt_keras_cfg_get(c, keys[k]);
        if (!v) {
            vals[k][0] = (float)defs[k];
        } else if (json_object_is_type(v, json_type_double) ||
                   json_object_is_type(v, json_type_int)) {
            vals[k][0] = (float)json_object_get_double(v);
        } else if (json_object_is_type(v, json_type_array) && json_object_array_length(v) >= 1 &&
                   json_object_array_length(v) <= 4096) {
            *cnt[k] = (int64_t)json_object_array_length(v);
            for (int64_t i = 0; i < *cnt[k]; i++)
                vals[k][i] = (float)json_object_get_double(json_object_array_get_idx(v, (size_t)i));
        } else {
            return rt_keras_fail(c, RT_EINVAL, "'%s' must be a number or a list", keys[k]);
        }
        for (int64_t i = 0; i < *cnt[k]; i++)
            if (!isfinite(vals[k][i]))
                return rt_keras_fail(c, RT_EINVAL, "'%s' must be finite", keys[k]);
        const int64_t ch = c->in[0].ndim ? c->in[0].dims[c->in[0].ndim - 1] : 1;
        if (*cnt[k] != 1 && *cnt[k] != ch)
            return rt_keras_fail(c, RT_ESHAPE, "'%s' has %lld values for %lld channels", keys[k],
                                 (long long)*cnt[k], (long long)ch);
    }
    c->out = c->in[0];
    const char *x = c->in[0].name;
    char pn[RT_KERAS_NAME], mn[RT_KERAS_NAME];
    int rc;
    const int add = !(no == 1 && ov[0] == 0.0f);
    if ((rc = rt_keras_name(c, pn, "scale")) < 0 ||
        (rc = rt_keras_name(c, mn, add ? "mul" : NULL)) < 0)
        return rc;
    if ((rc = rt_graph_add_param(c->g, pn, 1, &ns, RT_INIT_DEFAULT, 0, sv)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    const char *in[2] = {x, pn};
    if ((rc = rt_graph_add_node(c->g, mn, "Mul", 2, in, 0, NULL)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    snprintf(c->out.name, sizeof c->out.name, "%s", mn);
    if (!add)
        return 0;
    if ((rc = rt_keras_name(c, pn, "offset")) < 0)
        return rc;
    if ((rc = rt_graph_add_param(c->g, pn, 1, &no, RT_INIT_DEFAULT, 0, ov)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    const char *in2[2] = {mn, pn};
    if ((rc = rt_graph_add_node(c->g, c->layer, "Add", 2, in2, 0, NULL)) < 0)
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
    {"ActivityRegularization", k_actreg, 1},
    {"TimeDistributed", k_timedistributed, 1},
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
    {"SyncBatchNormalization", k_batchnorm, 1},
    {"Concatenate", k_concatenate, 0},
    /* import_keras_rnn.c */
    {"Embedding", rt_keras_embedding, 1},
    /* the sequence, then initial states (they check the count) */
    {"SimpleRNN", rt_keras_simplernn, 0},
    {"LSTM", rt_keras_lstm, 0},
    {"GRU", rt_keras_gru, 0},
    {"CuDNNLSTM", rt_keras_cudnn_lstm, 0},
    {"CuDNNGRU", rt_keras_cudnn_gru, 0},
    {"Bidirectional", rt_keras_bidirectional, 0},
    {"Masking", rt_keras_masking, 1},
    /* Keras 3's recorded keras.ops NotEqual (a mask_zero step mask) */
    {"NotEqual", rt_keras_not_equal, 0},
    /* tf.keras' recorded TensorFlow functions (import_keras_tfop.c) */
    {"TFOpLambda", rt_keras_tfop_lambda, 0},
    /* TF 2.2-2.3's recorded TensorFlow op (import_keras_tfop.c) */
    {"TensorFlowOpLayer", rt_keras_tf_op_layer, 0},
    {"Rescaling", k_rescaling, 1},
};

/* ---------------------------------------------------------------- walking */

/* Problems are collected over the whole model and reported in one message
 * of at most this many bytes (a gRPC trailer holds ~16 KiB). */
#define RT_KERAS_PROBLEMS 3800

typedef struct imp {
    rt_graph *g;
    char *err;
    size_t errlen;
    int n_prob, n_shown, code; /* layer problems so far; the first one's code */
    size_t prob_len;
    char prob[RT_KERAS_PROBLEMS];
    json_object *owned; /* translated Keras 1 configs, freed at the end */
    rt_keras_field_cb cb;
    void *ud;
    int depth;           /* nested models */
    const int64_t *bind; /* input dims from the compile request, 0 = the model's */
    int n_bind;
    int64_t bind_values; /* the data's values per sample, 0 = not given */
    /* a top-level Functional model with several inputs reads them from one
     * packed graph input: input k is values [in_off[k], + its size) */
    int n_packed;
    int64_t in_off[RT_KERAS_MAX_IN], in_total;
    /* ... and with several outputs */
    int n_outs;
    rt_keras_tensor outs[RT_MAX_HEADS];
    char out_layer[RT_MAX_HEADS][RT_KERAS_NAME]; /* the output layers' names */
    int any_mixed;                               /* a layer's dtype policy is mixed_bfloat16 */
    /* placing a shared layer's second or later call: appended to the names
     * of everything it adds (its weights then merged into the first call's,
     * dedupe_call) */
    char call_tag[64];
    int n_tags;
    int64_t batch; /* the first fixed batch size of a batch_input_shape / batch_shape */
    /* the call arguments of the layer run_layer places (place_flayer) */
    json_object *call_kwargs;
    const char *const *in_kw;
    /* the outputs after the first of the layers that have several (a
     * recurrent layer's return_state states), flayer.more_at on */
    rt_keras_tensor *more;
    int n_more, more_cap;
} imp;

/* the message in m->err, returns code (rt_errf, the one formatter) */
#define ifail(m, code, ...) rt_errf((m)->err, (m)->errlen, (code), __VA_ARGS__)

static void add_problem(imp *m, int code, const char *msg)
{
    if (m->n_prob++ == 0)
        m->code = code;
    size_t n = strlen(msg);
    if (m->prob_len + n + 3 >= sizeof m->prob)
        return;
    if (m->prob_len) {
        memcpy(m->prob + m->prob_len, "; ", 2);
        m->prob_len += 2;
    }
    memcpy(m->prob + m->prob_len, msg, n + 1);
    m->prob_len += n;
    m->n_shown++;
}

static int report_problems(imp *m)
{
    if (m->n_prob == 1)
        return ifail(m, m->code, "%s", m->prob);
    if (m->n_shown == m->n_prob)
        return ifail(m, m->code, "%d problems: %s", m->n_prob, m->prob);
    return ifail(m, m->code, "%d problems: %s; and %d more", m->n_prob, m->prob,
                 m->n_prob - m->n_shown);
}

static const char *jstr(json_object *o, const char *key)
{
    json_object *v;
    if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
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

/* ------------------------------------------------ fields that change nothing */

/* Config fields a layer may carry that do not change what is trained; the
 * list in docs/keras-fields.md is this table. when: NULL = any value,
 * "false" / "true" = only that value. A null value always means Keras'
 * default and needs no entry. */
static const struct {
    const char *key, *when, *why;
} inert_fields[] = {
    {"name", NULL, "the layer's name"},
    {"dtype", NULL, "float32 or mixed_bfloat16: the layer's precision"},
    {"dtype_policy", NULL, "float32 or mixed_bfloat16: the layer's precision"},
    {"autocast", NULL, "rtrain computes in float32"},
    {"batch_input_shape", NULL, "the input shape, read by the model walker"},
    {"batch_shape", NULL, "the input shape, read by the model walker"},
    {"input_shape", NULL, "the input shape, read by the model walker"},
    {"input_dim", NULL, "Keras 1/2 input size, equal to the input's last dim"},
    {"input_dtype", NULL, "Keras 1 input dtype; data is float32"},
    {"seed", NULL, "random draws come from the training seed"},
    {"implementation", NULL, "RNN kernel choice, same result"},
    {"unroll", NULL, "RNN loop unrolling, same result"},
    {"use_cudnn", NULL, "kernel choice, same result"},
    {"fused", NULL, "BatchNormalization kernel choice, same result"},
    {"trainable", "true", "trainable layers are the default"},
    {"renorm", "false", "off"},
    {"synchronized", "false", "off"},
    {"stateful", "false", "off"},
    {"sparse", "false", "off"},
    {"ragged", "false", "off"},
    {"optional", "false", "off"},
    {"return_state", "false", "off"},
    {"time_major", "false", "off"},
};

const char *rt_keras_inert_field(int i, const char **when)
{
    if (i < 0 || i >= (int)(sizeof inert_fields / sizeof inert_fields[0]))
        return NULL;
    if (when)
        *when = inert_fields[i].when;
    return inert_fields[i].key;
}

static int field_inert(const char *key, json_object *v)
{
    for (size_t i = 0; i < sizeof inert_fields / sizeof inert_fields[0]; i++) {
        if (strcmp(key, inert_fields[i].key) != 0)
            continue;
        const char *w = inert_fields[i].when;
        if (!w)
            return 1;
        return json_object_is_type(v, json_type_boolean) &&
               json_object_get_boolean(v) == (strcmp(w, "true") == 0);
    }
    return 0;
}

/* Every config field of a layer that was placed: read by its function,
 * null, or inert; trainable=false also counts as read when the layer has
 * no weights. Others are listed in one problem. */
static void check_fields(imp *m, rt_keras_ctx *c, int has_params)
{
    char bad[400];
    size_t bl = 0;
    int nbad = 0;
    if (!c->cfg)
        return;
    if (c->fields_checked) {
        if (m->cb) {
            json_object_object_foreach(c->cfg, k, v)
            {
                (void)v;
                m->cb(m->ud, c->class_name, k, RT_KERAS_FIELD_USED);
            }
        }
        return;
    }
    json_object_object_foreach(c->cfg, k, v)
    {
        int used = 0;
        for (int i = 0; i < c->n_used && !used; i++)
            used = strcmp(c->used[i], k) == 0;
        rt_keras_field_kind kind = used ? RT_KERAS_FIELD_USED : RT_KERAS_FIELD_INERT;
        if (!used && v && !field_inert(k, v) && !(strcmp(k, "trainable") == 0 && !has_params))
            kind = RT_KERAS_FIELD_UNSUPPORTED;
        if (m->cb)
            m->cb(m->ud, c->class_name, k, kind);
        if (kind != RT_KERAS_FIELD_UNSUPPORTED)
            continue;
        nbad++;
        int n = snprintf(bad + bl, sizeof bad - bl, "%s'%.40s'", bl ? ", " : "", k);
        if (n > 0 && (size_t)n < sizeof bad - bl)
            bl += (size_t)n;
    }
    if (nbad) {
        char msg[520];
        snprintf(msg, sizeof msg, "%s: unsupported setting%s %s (layer '%.64s')", c->class_name,
                 nbad > 1 ? "s" : "", bad, c->layer);
        add_problem(m, RT_EUNIMPLEMENTED, msg);
    }
}

/* ------------------------------------------------------------ Keras 1 */

/* Keras 1 spellings of Keras 2 settings; a layer that has any of the
 * Keras-1-only keys is translated before its function runs. */
static const struct {
    const char *from, *to;
} k1_keys[] = {
    {"nb_filter", "filters"},
    {"border_mode", "padding"},
    {"subsample", "strides"},
    {"init", "kernel_initializer"},
    {"W_regularizer", "kernel_regularizer"},
    {"b_regularizer", "bias_regularizer"},
    {"W_constraint", "kernel_constraint"},
    {"b_constraint", "bias_constraint"},
    {"bias", "use_bias"},
    {"p", "rate"},
    {"sigma", "stddev"}, /* GaussianNoise */
    {"atrous_rate", "dilation_rate"},
    {"subsample_length", "strides"},
    {"filter_length", "kernel_size"},
    {"pool_length", "pool_size"},
    {"stride", "strides"},
    {"inner_init", "recurrent_initializer"},
    {"U_regularizer", "recurrent_regularizer"},
    {"U_constraint", "recurrent_constraint"},
    {"inner_activation", "recurrent_activation"},
    {"dropout_W", "dropout"},
    {"dropout_U", "recurrent_dropout"},
    {"gamma_init", "gamma_initializer"},
    {"beta_init", "beta_initializer"},
};

static const struct {
    const char *from, *to;
} k1_classes[] = {
    {"Convolution2D", "Conv2D"},
    {"Convolution1D", "Conv1D"},
    {"AtrousConvolution2D", "Conv2D"},
    {"Deconvolution2D", "Conv2DTranspose"},
    {"SeparableConvolution2D", "SeparableConv2D"},
};

static int k1_layer(const char *cls, json_object *cfg)
{
    static const char *const only1[] = {"nb_filter",     "border_mode",   "subsample",   "init",
                                        "W_regularizer", "dim_ordering",  "nb_row",      "p",
                                        "output_dim",    "filter_length", "pool_length", "mode",
                                        "sigma"};
    /* the recurrent layers (import_keras_rnn.c) translate their own */
    static const char *const own[] = {"Embedding", "SimpleRNN", "GRU", "LSTM", "Bidirectional"};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (strcmp(cls, own[i]) == 0)
            return 0;
    if (!cfg)
        return 0;
    for (size_t i = 0; i < sizeof k1_classes / sizeof k1_classes[0]; i++)
        if (strcmp(cls, k1_classes[i].from) == 0)
            return 1;
    if (strcmp(cls, "Merge") == 0)
        return 1;
    for (size_t i = 0; i < sizeof only1 / sizeof only1[0]; i++) {
        json_object *v;
        if (!json_object_object_get_ex(cfg, only1[i], &v))
            continue;
        /* Embedding keeps output_dim in Keras 2; BatchNormalization's mode is
         * Keras 1 only, Merge's is handled by its class */
        if (strcmp(only1[i], "output_dim") == 0 && strcmp(cls, "Embedding") == 0)
            continue;
        return 1;
    }
    return 0;
}

/* A Keras 2 config (a new object, kept in m->owned) for a Keras 1 layer,
 * and its Keras 2 class. A problem (returned as RT_EUNIMPLEMENTED with msg)
 * for Keras 1 settings with no Keras 2 meaning. */
static int k1_translate(imp *m, const char **cls, json_object *cfg, json_object **out, char *msg,
                        size_t msglen)
{
    json_object *n = json_object_new_object();
    if (!n)
        return RT_ENOMEM;
    json_object_array_add(m->owned, n);
    *out = n;
    for (size_t i = 0; i < sizeof k1_classes / sizeof k1_classes[0]; i++)
        if (strcmp(*cls, k1_classes[i].from) == 0)
            *cls = k1_classes[i].to;
    int dense_like = strcmp(*cls, "Dense") == 0 || strcmp(*cls, "SimpleRNN") == 0 ||
                     strcmp(*cls, "GRU") == 0 || strcmp(*cls, "LSTM") == 0;
    json_object *row = NULL, *col = NULL;
    json_object_object_foreach(cfg, k, v)
    {
        const char *to = k;
        for (size_t i = 0; i < sizeof k1_keys / sizeof k1_keys[0]; i++)
            if (strcmp(k, k1_keys[i].from) == 0)
                to = k1_keys[i].to;
        if (dense_like && strcmp(k, "output_dim") == 0)
            to = "units";
        /* Keras 1 PReLU's weight is alpha */
        if (strcmp(*cls, "PReLU") == 0 && strcmp(k, "init") == 0)
            to = "alpha_initializer";
        if (strcmp(k, "nb_row") == 0) {
            row = v;
            continue;
        }
        if (strcmp(k, "nb_col") == 0) {
            col = v;
            continue;
        }
        if (strcmp(k, "dim_ordering") == 0) {
            const char *d = json_object_get_string(v);
            if (d && strcmp(d, "th") == 0)
                json_object_object_add(n, "data_format", json_object_new_string("channels_first"));
            continue;
        }
        if (strcmp(*cls, "BatchNormalization") == 0 && strcmp(k, "mode") == 0) {
            if (json_object_get_int(v) != 0) {
                snprintf(msg, msglen, "Keras 1 BatchNormalization mode %d is not supported",
                         json_object_get_int(v));
                return RT_EUNIMPLEMENTED;
            }
            continue;
        }
        json_object_object_add(n, to, json_object_get(v));
    }
    if (row || col) {
        json_object *ks = json_object_new_array();
        json_object_array_add(ks, json_object_get(row));
        json_object_array_add(ks, json_object_get(col ? col : row));
        json_object_object_add(n, "kernel_size", ks);
    }
    if (strcmp(*cls, "Merge") == 0) {
        /* Keras 1 Merge(mode=...): the Keras 2 merge layer of that mode */
        static const struct {
            const char *mode, *cls;
        } modes[] = {
            {"sum", "Add"},     {"mul", "Multiply"},       {"ave", "Average"},
            {"max", "Maximum"}, {"concat", "Concatenate"},
        };
        const char *mode = jstr(cfg, "mode");
        const char *to = NULL;
        for (size_t i = 0; mode && i < sizeof modes / sizeof modes[0]; i++)
            if (strcmp(mode, modes[i].mode) == 0)
                to = modes[i].cls;
        if (!to) {
            snprintf(msg, msglen, "Keras 1 Merge mode '%.20s' is not supported",
                     mode ? mode : "(a Python function)");
            return RT_EUNIMPLEMENTED;
        }
        *cls = to;
        json_object *ax;
        json_object *m2 = json_object_new_object();
        json_object_array_add(m->owned, m2);
        json_object_object_add(m2, "name", json_object_get(json_object_object_get(cfg, "name")));
        if (strcmp(to, "Concatenate") == 0 && json_object_object_get_ex(cfg, "concat_axis", &ax))
            json_object_object_add(m2, "axis", json_object_get(ax));
        *out = m2;
    }
    return 0;
}

/* --------------------------------------------------------------- models */

static int walk_sequential(imp *m, json_object *layers, json_object *model_cfg,
                           const rt_keras_tensor *given, rt_keras_tensor *out);
static int walk_functional(imp *m, json_object *cfg, const rt_keras_tensor *given, int n_given,
                           rt_keras_tensor *out);

/* The per-sample shape from batch_input_shape / batch_shape / input_shape. */
static int shape_from_list(imp *m, const char *lname, json_object *s, int skip, rt_keras_tensor *t);

static int layer_input_shape(imp *m, const char *lname, json_object *cfg, rt_keras_tensor *t,
                             int *found)
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
    /* a fixed batch size (stateful RNNs need it, Keras' rule) */
    json_object *b0 = skip ? json_object_array_get_idx(s, 0) : NULL;
    if (!m->batch && b0 && json_object_is_type(b0, json_type_int) && json_object_get_int64(b0) > 0)
        m->batch = json_object_get_int64(b0);
    return shape_from_list(m, lname, s, skip, t);
}

/* A nested model's InputLayer of shape decl reads the value v: same rank,
 * and every declared dim equal to v's, a null (-1) one taking any size (a
 * fully convolutional block, pix2pix's nested Sequentials of
 * [null, null, null, C]) as Keras' input spec does. */
static int input_takes(const rt_keras_tensor *decl, const rt_keras_tensor *v)
{
    if (decl->ndim != v->ndim)
        return 0;
    for (int i = 0; i < decl->ndim; i++)
        if (decl->dims[i] != -1 && decl->dims[i] != v->dims[i])
            return 0;
    return 1;
}

/* A shape list ([null, 4] with skip = 1 for the batch entry) -> t. */
static int shape_from_list(imp *m, const char *lname, json_object *s, int skip, rt_keras_tensor *t)
{
    int n = (int)json_object_array_length(s) - skip;
    if (n < 0 || n > RT_MAX_DIMS - 1)
        return ifail(m, RT_ESHAPE, "input shape of layer '%.64s' has %d dims", lname, n);
    t->ndim = n;
    int64_t numel = 1;
    for (int i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(s, (size_t)(i + skip));
        if (!e) {
            /* null: a variable dim, bound (or refused) by add_input */
            t->dims[i] = -1;
            continue;
        }
        if (!json_object_is_type(e, json_type_int) || json_object_get_int64(e) <= 0)
            return ifail(m, RT_ESHAPE, "input shape of layer '%.64s' has an unknown or bad dim %d",
                         lname, i + 1);
        t->dims[i] = json_object_get_int64(e);
        if (__builtin_mul_overflow(numel, t->dims[i], &numel) || numel > RT__MAX_NUMEL)
            return ifail(m, RT_EOVERFLOW, "input shape of layer '%.64s' has more than 2^32 values",
                         lname);
    }
    return 0;
}

/* Input k of a model with several inputs: its values of the packed graph
 * input "inputs" (Pad with negative pads takes them), in its shape */
static int add_packed_input(imp *m, int k, const char *name, rt_keras_tensor *t)
{
    int64_t numel = 1;
    for (int i = 0; i < t->ndim; i++)
        numel *= t->dims[i];
    const int64_t pads[4] = {0, -m->in_off[k], 0, -(m->in_total - m->in_off[k] - numel)};
    char slice[RT_KERAS_NAME + 8];
    snprintf(slice, sizeof slice, "%.100s:slice", name);
    const char *src = "inputs";
    rt_attr a = {.name = "pads", .kind = RT_ATTR_INTS, .n = 4, .ints = pads};
    int rc = rt_graph_add_node(m->g, t->ndim > 1 ? slice : name, "Pad", 1, &src, 1, &a);
    if (rc == 0 && t->ndim > 1) {
        const char *in = slice;
        rt_attr sh = {.name = "shape", .kind = RT_ATTR_INTS, .n = t->ndim, .ints = t->dims};
        rc = rt_graph_add_node(m->g, name, "Reshape", 1, &in, 1, &sh);
    }
    if (rc < 0)
        return ifail(m, rc, "input '%.64s': %s", name, rt_graph_errmsg(m->g));
    snprintf(t->name, sizeof t->name, "%s", name);
    return 0;
}

/* A model with several inputs: their shapes, in input_layers' order, make
 * the packed graph input (fixed dims only: the data gives no split) */
static int add_packed_inputs(imp *m, json_object *layers, const char *const *names, int n)
{
    m->in_total = 0;
    for (int k = 0; k < n; k++) {
        json_object *cfg = NULL;
        for (size_t i = 0; i < json_object_array_length(layers) && !cfg; i++) {
            json_object *l = json_object_array_get_idx(layers, i);
            json_object *c = jget(l, "config", json_type_object);
            const char *ln = jstr(l, "name") ? jstr(l, "name") : jstr(c, "name");
            if (ln && !strcmp(ln, names[k]))
                cfg = c;
        }
        rt_keras_tensor t;
        int found = 0, rc;
        memset(&t, 0, sizeof t);
        if (!cfg)
            return ifail(m, RT_EINVAL, "input layer '%.64s' is not in the model", names[k]);
        if ((rc = layer_input_shape(m, names[k], cfg, &t, &found)) < 0)
            return rc;
        if (!found)
            return ifail(m, RT_ESHAPE, "InputLayer '%.64s' has no shape", names[k]);
        int64_t numel = 1;
        for (int i = 0; i < t.ndim; i++) {
            if (t.dims[i] < 0)
                return ifail(m, RT_EINVAL,
                             "input '%.64s' has a variable dimension; a model "
                             "with several inputs needs every input's dims",
                             names[k]);
            numel *= t.dims[i];
        }
        m->in_off[k] = m->in_total;
        if (__builtin_add_overflow(m->in_total, numel, &m->in_total) || m->in_total > RT__MAX_NUMEL)
            return ifail(m, RT_EOVERFLOW, "the inputs have more than 2^32 values");
    }
    const int64_t d[2] = {RT_BATCH, m->in_total};
    int rc = rt_graph_add_input(m->g, "inputs", RT_F32, 2, d);
    if (rc < 0)
        return ifail(m, rc, "inputs: %s", rt_graph_errmsg(m->g));
    m->n_packed = n;
    return 0;
}

static int add_input(imp *m, const char *name, rt_keras_tensor *t)
{
    if (m->n_bind && m->n_bind != t->ndim)
        return ifail(m, RT_EINVAL,
                     "input '%.64s' has %d dims per sample; the input dims "
                     "given have %d",
                     name, t->ndim, m->n_bind);
    for (int i = 0; i < m->n_bind; i++) {
        if (m->bind[i] < 0)
            return ifail(m, RT_EINVAL, "input '%.64s': input dim %d is negative", name, i + 1);
        if (m->bind[i] == 0)
            continue;
        if (t->dims[i] >= 0 && t->dims[i] != m->bind[i])
            return ifail(m, RT_EINVAL,
                         "input '%.64s' has dim %d = %lld; the input dims "
                         "given say %lld",
                         name, i + 1, (long long)t->dims[i], (long long)m->bind[i]);
        t->dims[i] = m->bind[i];
    }
    if (m->bind_values > 0) {
        /* one null dim: the data's values per sample over the fixed dims */
        int nulls = 0, at = -1;
        int64_t fixed = 1;
        for (int i = 0; i < t->ndim; i++) {
            if (t->dims[i] < 0)
                nulls++, at = i;
            else if (__builtin_mul_overflow(fixed, t->dims[i], &fixed))
                return ifail(m, RT_EOVERFLOW, "input '%.64s' has more than 2^32 values", name);
        }
        if (nulls == 1) {
            if (m->bind_values % fixed)
                return ifail(m, RT_EINVAL,
                             "input '%.64s': the data's %lld values per sample "
                             "are not a multiple of its fixed dims' %lld",
                             name, (long long)m->bind_values, (long long)fixed);
            t->dims[at] = m->bind_values / fixed;
        }
    }
    int64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->dims[i] < 0)
            return ifail(m, RT_EINVAL,
                         "input '%.64s' has a variable dimension; give input "
                         "dims (CLI --input-shape, Python compile(input_shape=...)) or "
                         "compile with data",
                         name);
        if (__builtin_mul_overflow(numel, t->dims[i], &numel) || numel > RT__MAX_NUMEL)
            return ifail(m, RT_EOVERFLOW, "input '%.64s' has more than 2^32 values", name);
    }
    int64_t d[RT_MAX_DIMS];
    d[0] = RT_BATCH;
    memcpy(d + 1, t->dims, sizeof(int64_t) * (size_t)t->ndim);
    int rc = rt_graph_add_input(m->g, name, RT_F32, t->ndim + 1, d);
    if (rc < 0)
        return ifail(m, rc, "input '%.64s': %s", name, rt_graph_errmsg(m->g));
    snprintf(t->name, sizeof t->name, "%s", name);
    return 0;
}

/* a Keras 3 operation (keras.ops: NotEqual, Cast, ...) that Keras records
 * in a Functional model where Python code called it on a tensor */
static int is_keras_op(json_object *layer)
{
    const char *mod = jstr(layer, "module");
    return mod && (strncmp(mod, "keras.src.ops", 13) == 0 || strncmp(mod, "keras.ops", 9) == 0);
}

/* tf.keras' record of a TensorFlow function called on a Keras tensor in a
 * Functional model (keras/layers/core/tf_op_layer.py TFOpLambda) */
static int is_tf_op(json_object *layer)
{
    const char *cls = jstr(layer, "class_name");
    return cls && strcmp(cls, "TFOpLambda") == 0;
}

/* Why a class that is not in the table cannot be imported. */
static void why_unknown(imp *m, json_object *layer, const char *cls, const char *lname,
                        json_object *cfg)
{
    char msg[300];
    const char *mod = jstr(layer, "module"), *reg = jstr(layer, "registered_name");
    if (strcmp(cls, "Lambda") == 0)
        snprintf(msg, sizeof msg,
                 "Lambda layer '%.64s' holds Python code, which a JSON model cannot carry", lname);
    else if (strcmp(cls, "TFOpLambda") == 0 || strcmp(cls, "SlicingOpLambda") == 0)
        snprintf(msg, sizeof msg,
                 "layer '%.64s' is the TensorFlow operation '%.40s' recorded by Keras, "
                 "not a Keras layer",
                 lname, jstr(cfg, "function") ? jstr(cfg, "function") : "?");
    else if (is_keras_op(layer))
        snprintf(msg, sizeof msg,
                 "layer '%.64s' is the Keras operation '%.40s' (%.40s) recorded in the model, "
                 "not a Keras layer: recorded operations are not supported",
                 lname, cls, mod);
    else if ((reg && strchr(reg, '>')) || (mod && strncmp(mod, "keras", 5) != 0))
        snprintf(msg, sizeof msg,
                 "layer '%.64s' is the custom class '%.48s' (%.48s): its Python code is "
                 "not in the JSON",
                 lname, cls, reg ? reg : mod);
    else
        snprintf(msg, sizeof msg, "unknown Keras layer '%.48s' (layer '%.64s')", cls, lname);
    add_problem(m, RT_EUNKNOWN_LAYER, msg);
}

/* A step mask reaching a layer that did not handle it (c->mask_set): the
 * layers Keras passes a mask through unchanged (supports_masking without
 * using it) pass it on; any other layer would use it in Keras (pooling,
 * Softmax, BatchNormalization in Keras 3, merging, the loss ...) or drop
 * it, so it is a problem naming both layers, not a silently dropped mask.
 * Returns -1 after adding the problem. */
static int pass_mask(imp *m, rt_keras_ctx *c)
{
    static const char *const through[] = {
        "Dropout", "SpatialDropout1D", "GaussianNoise", "GaussianDropout", "AlphaDropout",
        "ActivityRegularization", "Activation", "Dense", "LeakyReLU", "ReLU", "ELU", "PReLU",
        "ThresholdedReLU", "LayerNormalization",
        /* Dense only (k_timedistributed) */
        "TimeDistributed"};
    const char *mask = NULL;
    for (int i = 0; i < c->n_in && !mask; i++)
        if (c->in[i].mask[0])
            mask = c->in[i].mask;
    c->out.mask[0] = 0;
    if (!mask)
        return 0;
    for (size_t i = 0; i < sizeof through / sizeof through[0]; i++)
        if (strcmp(c->class_name, through[i]) == 0 && c->n_in == 1) {
            snprintf(c->out.mask, sizeof c->out.mask, "%s", mask);
            return 0;
        }
    char msg[480];
    snprintf(msg, sizeof msg,
             "layer '%.64s' (%.40s) receives the step mask '%.64s', which Keras would apply "
             "there: masks are supported into SimpleRNN, LSTM, GRU, Bidirectional and "
             "GlobalAveragePooling1D, and through Dropout, Dense, activations and "
             "LayerNormalization",
             c->layer, c->class_name, mask);
    add_problem(m, RT_EUNIMPLEMENTED, msg);
    return -1;
}

/* ---------------------------------------------------- channels_first */

/* Keras' channels_first (data_format, Keras 1's dim_ordering "th",
 * BatchNormalization over axis 1): the data comes in the layout the model
 * declares, (C, H, W); the engine computes channels-last, so a value is
 * transposed once where it enters a channels_first layer and stays
 * channels-last (RT_KERAS_CF) through the layers that read it in either
 * order; a Flatten of it (RT_KERAS_FLAT) is folded into the next Dense's
 * kernel (rt_graph_set_param_view: the weight keeps Keras' row order for
 * get/set weights), as the ONNX importer folds NCHW; a value reaching any
 * other layer, or the model's output, is put back in Keras' order. */

/* the engine dims of Keras' (C, S1..Sk): (S1..Sk, C) */
static int lay_transpose(imp *m, const char *lname, const char *what, int i, rt_keras_tensor *t,
                         int to_cf)
{
    char name[RT_KERAS_NAME];
    int n = snprintf(name, sizeof name, "%s/%s%d", lname, what, i);
    if (n < 0 || n >= (int)sizeof name)
        return ifail(m, RT_EINVAL, "layer name '%.64s' is too long", lname);
    const int r = t->ndim;
    int64_t perm[RT_MAX_DIMS + 1], d[RT_MAX_DIMS];
    perm[0] = 0;
    for (int k = 0; k < r; k++) {
        /* to channels-last: engine k takes Keras k+1 (the last takes C) */
        perm[k + 1] = to_cf ? (k == r - 1 ? 1 : k + 2) : (k == 0 ? r : k);
        d[k] = t->dims[perm[k + 1] - 1];
    }
    rt_attr a = {.name = "perm", .kind = RT_ATTR_INTS, .n = r + 1, .ints = perm};
    const char *in[1] = {t->name};
    int rc = rt_graph_add_node(m->g, name, "Transpose", 1, in, 1, &a);
    if (rc < 0)
        return ifail(m, rc, "%s", rt_graph_errmsg(m->g));
    snprintf(t->name, sizeof t->name, "%s", name);
    memcpy(t->dims, d, sizeof(int64_t) * (size_t)r);
    t->layout = to_cf ? RT_KERAS_CF : RT_KERAS_PLAIN;
    return 0;
}

static int lay_reshape(imp *m, const char *name, rt_keras_tensor *t, int nd, const int64_t *d)
{
    rt_attr a = {.name = "shape", .kind = RT_ATTR_INTS, .n = nd, .ints = d};
    const char *in[1] = {t->name};
    int rc = rt_graph_add_node(m->g, name, "Reshape", 1, in, 1, &a);
    if (rc < 0)
        return ifail(m, rc, "%s", rt_graph_errmsg(m->g));
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = nd;
    memcpy(t->dims, d, sizeof(int64_t) * (size_t)nd);
    return 0;
}

/* t in Keras' own order (nodes named after the layer reading it) */
static int lay_to_plain(imp *m, const char *lname, int i, rt_keras_tensor *t)
{
    if (t->layout == RT_KERAS_CF)
        return lay_transpose(m, lname, "keras_order", i, t, 0);
    if (t->layout != RT_KERAS_FLAT)
        return 0;
    /* unflatten to (S1..Sk, C), transpose, flatten */
    char name[RT_KERAS_NAME];
    int64_t d[RT_MAX_DIMS], n = t->dims[0];
    const int k = t->ncf;
    for (int j = 1; j < k; j++)
        d[j - 1] = t->cf[j];
    d[k - 1] = t->cf[0];
    int rc, w = snprintf(name, sizeof name, "%s/unflatten%d", lname, i);
    if (w < 0 || w >= (int)sizeof name)
        return ifail(m, RT_EINVAL, "layer name '%.64s' is too long", lname);
    if ((rc = lay_reshape(m, name, t, k, d)) < 0)
        return rc;
    t->layout = RT_KERAS_CF;
    if ((rc = lay_transpose(m, lname, "keras_order", i, t, 0)) < 0)
        return rc;
    snprintf(name, sizeof name, "%s/flatten%d", lname, i);
    return lay_reshape(m, name, t, 1, &n);
}

enum {
    LAY_PLAIN = 0,
    LAY_PASS,
    LAY_CF_OUT,
    LAY_FLATTEN_CF,
    LAY_DENSE_FLAT,
    LAY_PARAMS_FLAT,
    LAY_PRELU_CF
};

/* c->cfg as a copy the importer may change (the document's object can be
 * read again by a shared layer) */
static json_object *lay_cfg_copy(imp *m, rt_keras_ctx *c)
{
    json_object *n = json_object_new_object();
    if (!n)
        return NULL;
    json_object_array_add(m->owned, n);
    json_object_object_foreach(c->cfg, k, v) json_object_object_add(n, k, json_object_get(v));
    c->cfg = n;
    return n;
}

static int is_channels_first(json_object *cfg)
{
    const char *f = jstr(cfg, "data_format");
    return f && strcmp(f, "channels_first") == 0;
}

/* BatchNormalization's axis as one number (Keras 2 writes 1 or [1]) */
static int bn_axis(json_object *cfg, int64_t *a)
{
    json_object *v = NULL;
    *a = -1;
    if (!cfg || !json_object_object_get_ex(cfg, "axis", &v) || !v)
        return 0;
    if (json_object_is_type(v, json_type_array) && json_object_array_length(v) == 1)
        v = json_object_array_get_idx(v, 0);
    if (!json_object_is_type(v, json_type_int))
        return 0;
    *a = json_object_get_int64(v);
    return 1;
}

/* Before a layer function: convert its inputs or adapt its config to how
 * they are held; *mode says what layer_finish does after it. */
static int layout_prepare(imp *m, rt_keras_ctx *c, int *mode)
{
    static const char *const pass[] = {
        "Dropout",   "AlphaDropout", "GaussianNoise", "GaussianDropout", "ActivityRegularization",
        "ReLU",      "LeakyReLU",    "ELU",           "ThresholdedReLU", "Identity",
        "Activation"};
    static const char *const merge[] = {"Add",     "Subtract", "Multiply",
                                        "Average", "Maximum",  "Minimum"};
    const char *cls = c->class_name;
    int any = 0, rc;
    *mode = LAY_PLAIN;
    for (int i = 0; i < c->n_in; i++)
        any |= c->in[i].layout != RT_KERAS_PLAIN;
    rt_keras_tensor *x = &c->in[0];
    if (!c->cfg)
        goto plain;
    if (strcmp(cls, "Flatten") == 0) {
        const int cf = is_channels_first(c->cfg);
        if (x->layout == RT_KERAS_FLAT || x->ndim < 2) {
            *mode = LAY_PASS;
            goto unformat;
        }
        if (!cf && x->layout == RT_KERAS_CF) {
            *mode = LAY_FLATTEN_CF;
            return 0;
        }
        /* Keras' channels_first Flatten moves the channels last first */
        if (cf && x->layout == RT_KERAS_PLAIN &&
            (rc = lay_transpose(m, c->layer, "channels_last", 0, x, 1)) < 0)
            return rc;
        goto unformat;
    }
    int64_t ax;
    const int bn =
        strcmp(cls, "BatchNormalization") == 0 || strcmp(cls, "SyncBatchNormalization") == 0;
    const int bn_first = bn && bn_axis(c->cfg, &ax) && ax == 1 && x->ndim >= 2;
    if (is_channels_first(c->cfg) || bn_first) {
        for (int i = 0; i < c->n_in; i++) {
            if (c->in[i].layout == RT_KERAS_FLAT &&
                (rc = lay_to_plain(m, c->layer, i, &c->in[i])) < 0)
                return rc;
            if (c->in[i].layout == RT_KERAS_PLAIN && c->in[i].ndim >= 2 &&
                (rc = lay_transpose(m, c->layer, "channels_last", i, &c->in[i], 1)) < 0)
                return rc;
        }
        if (!lay_cfg_copy(m, c))
            return ifail(m, RT_ENOMEM, "out of memory");
        if (bn_first)
            json_object_object_add(c->cfg, "axis", json_object_new_int(-1));
        *mode = LAY_CF_OUT;
        goto unformat;
    }
    if (!any)
        return 0;
    int npass = (int)(sizeof pass / sizeof pass[0]);
    for (int i = 0; i < npass && c->n_in == 1; i++)
        if (strcmp(cls, pass[i]) == 0) {
            const char *act = jstr(c->cfg, "activation");
            /* a softmax runs over the last axis, which is another one */
            if (i == npass - 1 && act && strstr(act, "softmax"))
                break;
            *mode = LAY_PASS;
            return 0;
        }
    for (size_t i = 0; i < sizeof merge / sizeof merge[0]; i++) {
        if (strcmp(cls, merge[i]) != 0)
            continue;
        int same = 1;
        for (int j = 1; j < c->n_in; j++)
            same &= c->in[j].layout == x->layout && c->in[j].ndim == x->ndim &&
                    !memcmp(c->in[j].dims, x->dims, sizeof(int64_t) * (size_t)x->ndim) &&
                    (x->layout != RT_KERAS_FLAT ||
                     (c->in[j].ncf == x->ncf &&
                      !memcmp(c->in[j].cf, x->cf, sizeof(int64_t) * (size_t)x->ncf)));
        if (same) {
            *mode = LAY_PASS;
            return 0;
        }
    }
    if (strcmp(cls, "Concatenate") == 0) {
        int all = 1;
        for (int j = 0; j < c->n_in; j++)
            all &= c->in[j].layout == RT_KERAS_CF && c->in[j].ndim == x->ndim;
        int64_t a;
        if (all && (rc = rt_keras_cfg_int(c, "axis", -1, &a)) == 0) {
            const int64_t r = x->ndim + 1;
            a = a < 0 ? a + r : a;
            if (a >= 1 && a < r) {
                if (!lay_cfg_copy(m, c))
                    return ifail(m, RT_ENOMEM, "out of memory");
                json_object_object_add(c->cfg, "axis", json_object_new_int64(a == 1 ? -1 : a - 1));
                c->n_used = 0;
                *mode = LAY_CF_OUT;
                return 0;
            }
        }
        c->n_used = 0;
    }
    if (c->n_in == 1 && x->layout == RT_KERAS_FLAT && x->ncf >= 2 &&
        (strcmp(cls, "Dense") == 0 || strcmp(cls, "PReLU") == 0 || (bn && x->ndim == 1))) {
        *mode = strcmp(cls, "Dense") == 0 ? LAY_DENSE_FLAT : LAY_PARAMS_FLAT;
        return 0;
    }
    if (c->n_in == 1 && x->layout == RT_KERAS_CF && strcmp(cls, "PReLU") == 0) {
        /* shared_axes are Keras' (C first): the engine's, C last */
        int64_t sh[RT_MAX_DIMS];
        int ns = rt_keras_cfg_ints(c, "shared_axes", sh, RT_MAX_DIMS);
        c->n_used = 0;
        if (ns >= 0) {
            if (!lay_cfg_copy(m, c))
                return ifail(m, RT_ENOMEM, "out of memory");
            if (ns > 0) {
                json_object *l = json_object_new_array();
                for (int i = 0; i < ns; i++)
                    json_object_array_add(l,
                                          json_object_new_int64(sh[i] == 1 ? x->ndim : sh[i] - 1));
                json_object_object_add(c->cfg, "shared_axes", l);
            }
            *mode = LAY_PRELU_CF;
            return 0;
        }
    }
plain:
    for (int i = 0; i < c->n_in; i++)
        if ((rc = lay_to_plain(m, c->layer, i, &c->in[i])) < 0)
            return rc;
    return 0;
unformat:
    /* the layer function computes channels-last on the engine's dims */
    if (jstr(c->cfg, "data_format") && strcmp(jstr(c->cfg, "data_format"), "channels_last")) {
        if (c->cfg && !lay_cfg_copy(m, c))
            return ifail(m, RT_ENOMEM, "out of memory");
        json_object_object_add(c->cfg, "data_format", json_object_new_string("channels_last"));
    }
    return 0;
}

/* the parameter entry named name among the ones the layer added */
static rt__entry *lay_param(imp *m, int first, const char *name)
{
    for (int k = first; k < m->g->n; k++)
        if (m->g->e[k].kind == RT__T_PARAM && strcmp(m->g->e[k].name, name) == 0)
            return &m->g->e[k];
    return NULL;
}

static int lay_view(imp *m, rt_keras_ctx *c, const rt__entry *e, int un, const int64_t *ud, int vn,
                    const int64_t *vd, const int *perm)
{
    int rc = rt_graph_set_param_view(m->g, e->name, un, ud, vn, vd, perm);
    if (rc < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(m->g));
    return 0;
}

/* After the layer function: the output's layout, and the weights that
 * take the input's order into them. */
static int layout_finish(imp *m, rt_keras_ctx *c, int mode, int first)
{
    const rt_keras_tensor *x = &c->in[0];
    rt_keras_tensor *o = &c->out;
    int perm[RT_MAX_DIMS];
    int64_t vd[RT_MAX_DIMS];
    o->layout = RT_KERAS_PLAIN;
    switch (mode) {
    case LAY_PASS:
        o->layout = x->layout;
        o->ncf = x->ncf;
        memcpy(o->cf, x->cf, sizeof o->cf);
        return 0;
    case LAY_CF_OUT: o->layout = o->ndim >= 2 ? RT_KERAS_CF : RT_KERAS_PLAIN; return 0;
    case LAY_FLATTEN_CF:
        o->layout = RT_KERAS_FLAT;
        o->ncf = x->ndim;
        o->cf[0] = x->dims[x->ndim - 1];
        for (int k = 1; k < x->ndim; k++)
            o->cf[k] = x->dims[k - 1];
        return 0;
    case LAY_DENSE_FLAT: {
        /* kernel rows: Keras' (C, S..) order for the caller, the flatten's
         * (S.., C) in the engine */
        char kn[RT_KERAS_NAME + 8];
        snprintf(kn, sizeof kn, "%s/kernel", c->layer);
        rt__entry *e = lay_param(m, first, kn);
        if (!e || e->shape.ndim != 2)
            return rt_keras_fail(c, RT_EINVAL, "no kernel to take the channels_first order");
        const int k = x->ncf;
        memcpy(vd, x->cf, sizeof(int64_t) * (size_t)k);
        vd[k] = e->shape.d[1];
        for (int j = 0; j < k - 1; j++)
            perm[j] = j + 1;
        perm[k - 1] = 0;
        perm[k] = k;
        return lay_view(m, c, e, 2, e->shape.d, k + 1, vd, perm);
    }
    case LAY_PARAMS_FLAT: {
        const int k = x->ncf;
        for (int j = 0; j < k - 1; j++)
            perm[j] = j + 1;
        perm[k - 1] = 0;
        for (int i = first; i < m->g->n; i++) {
            rt__entry *e = &m->g->e[i];
            if (e->kind != RT__T_PARAM || e->shape.ndim != 1 || e->shape.d[0] != x->dims[0])
                continue;
            int rc = lay_view(m, c, e, 1, e->shape.d, k, x->cf, perm);
            if (rc < 0)
                return rc;
        }
        o->layout = RT_KERAS_FLAT;
        o->ncf = x->ncf;
        memcpy(o->cf, x->cf, sizeof o->cf);
        return 0;
    }
    case LAY_PRELU_CF: {
        char an[RT_KERAS_NAME + 8];
        snprintf(an, sizeof an, "%s/alpha", c->layer);
        rt__entry *e = lay_param(m, first, an);
        o->layout = RT_KERAS_CF;
        if (!e)
            return 0;
        /* alpha is held (S.., C) like its input; Keras' (C, S..) */
        const int r = e->shape.ndim;
        vd[0] = e->shape.d[r - 1];
        for (int j = 1; j < r; j++)
            vd[j] = e->shape.d[j - 1];
        for (int j = 0; j < r - 1; j++)
            perm[j] = j + 1;
        perm[r - 1] = 0;
        return lay_view(m, c, e, r, vd, r, vd, perm);
    }
    }
    return 0;
}

/* ------------------------------------------- Keras 3 serialized objects */

/* An activation saved as an object where Keras 2 wrote a name: Keras 3's
 * {"class_name": "function", "config": "relu", "module": ...} and an
 * activation layer given as the activation ({"class_name": "LeakyReLU",
 * "config": {...}}), as the equal name in a copy of the config; msg says
 * why one cannot be (returns -1). */
static double obj_cfg_num(json_object *cfg, const char *k, double def)
{
    json_object *v;
    if (!cfg || !json_object_object_get_ex(cfg, k, &v) || !v ||
        !(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
        return def;
    return json_object_get_double(v);
}

static int activation_objects(imp *m, rt_keras_ctx *c, char *msg, size_t ml)
{
    static const char *const keys[] = {"activation", "recurrent_activation"};
    for (size_t i = 0; i < 2 && c->cfg; i++) {
        json_object *v = NULL;
        if (!json_object_object_get_ex(c->cfg, keys[i], &v) ||
            !json_object_is_type(v, json_type_object))
            continue;
        const char *cls = jstr(v, "class_name"), *mod = jstr(v, "module"),
                   *reg = jstr(v, "registered_name");
        json_object *oc = NULL;
        json_object_object_get_ex(v, "config", &oc);
        const char *name = NULL;
        char slope[64] = "";
        if (!cls) {
            name = NULL;
        } else if (reg && strchr(reg, '>')) {
            snprintf(msg, ml,
                     "'%s' is the custom function '%.48s': its Python code is not in "
                     "the JSON (layer '%.64s')",
                     keys[i], reg, c->layer);
            return -1;
        } else if (strcmp(cls, "function") == 0 && json_object_is_type(oc, json_type_string) &&
                   (!mod || strncmp(mod, "keras", 5) == 0)) {
            name = json_object_get_string(oc);
        } else if (strcmp(cls, "Activation") == 0 && jstr(oc, "activation")) {
            name = jstr(oc, "activation");
        } else if (strcmp(cls, "ReLU") == 0) {
            json_object *mx = NULL;
            if (oc)
                json_object_object_get_ex(oc, "max_value", &mx);
            if (!mx && obj_cfg_num(oc, "negative_slope", 0) == 0 &&
                obj_cfg_num(oc, "threshold", 0) == 0)
                name = "relu";
        } else if (strcmp(cls, "LeakyReLU") == 0) {
            /* Keras 3 negative_slope, Keras 2 alpha (default 0.3 in both
             * layers; the "leaky_relu" function's is 0.2) */
            double a = obj_cfg_num(oc, "negative_slope", obj_cfg_num(oc, "alpha", 0.3));
            if (fabs(a - 0.2) < 1e-7)
                name = "leaky_relu";
            else
                snprintf(slope, sizeof slope, " with negative_slope %g", a);
        } else if (strcmp(cls, "ELU") == 0) {
            if (obj_cfg_num(oc, "alpha", 1.0) == 1.0)
                name = "elu";
        } else if (strcmp(cls, "Softmax") == 0) {
            if (obj_cfg_num(oc, "axis", -1) == -1)
                name = "softmax";
        }
        if (!name) {
            snprintf(msg, ml,
                     "'%s' is a %.40s object%s, which has no activation name: use a "
                     "%.40s layer after it (layer '%.64s')",
                     keys[i], cls ? cls : "?", slope, cls ? cls : "activation", c->layer);
            return -1;
        }
        if (!lay_cfg_copy(m, c))
            return ifail(m, RT_ENOMEM, "out of memory");
        json_object_object_add(c->cfg, keys[i], json_object_new_string(name));
    }
    return 0;
}

/* The layer's dtype policy (Keras 3's DTypePolicy object, Keras 2's
 * "Policy", or the name) into *prec: RT_PREC_F32, RT_PREC_BF16 for
 * mixed_bfloat16, 0 when the layer names none. Other 16-bit policies
 * compute another way and are refused. */
static int dtype_policy(rt_keras_ctx *c, int *prec, char *msg, size_t ml)
{
    static const char *const keys[] = {"dtype", "dtype_policy"};
    *prec = 0;
    for (size_t i = 0; i < 2 && c->cfg; i++) {
        json_object *v = NULL;
        if (!json_object_object_get_ex(c->cfg, keys[i], &v) || !v)
            continue;
        const char *name = NULL;
        if (json_object_is_type(v, json_type_string)) {
            name = json_object_get_string(v);
        } else if (json_object_is_type(v, json_type_object)) {
            json_object *oc = NULL;
            json_object_object_get_ex(v, "config", &oc);
            name = jstr(oc, "name");
            if (!name) {
                snprintf(msg, ml, "'%s' is a %.40s without a name (layer '%.64s')", keys[i],
                         jstr(v, "class_name") ? jstr(v, "class_name") : "policy", c->layer);
                return -1;
            }
        }
        if (!name)
            continue;
        if (strcmp(name, "mixed_bfloat16") == 0) {
            *prec = RT_PREC_BF16;
        } else if (strcmp(name, "float32") == 0) {
            if (!*prec)
                *prec = RT_PREC_F32;
        } else if (strncmp(name, "mixed_", 6) == 0 || strcmp(name, "float16") == 0 ||
                   strcmp(name, "bfloat16") == 0 || strcmp(name, "half") == 0) {
            snprintf(msg, ml,
                     "dtype policy '%.32s' is not supported: rtrain computes float32 or "
                     "mixed_bfloat16 (layer '%.64s')",
                     name, c->layer);
            return -1;
        }
    }
    return 0;
}

/* The layer's policy on every node it added (entries first..): the
 * engine's "precision" attribute, appended last */
static int mark_precision(imp *m, int first, int prec)
{
    for (int k = first; k < m->g->n; k++) {
        rt__entry *e = &m->g->e[k];
        if (e->kind != RT__T_NODE)
            continue;
        rt_attr *at = rt__arena_alloc(&m->g->arena, sizeof(rt_attr) * (size_t)(e->n_attr + 1));
        if (!at)
            return ifail(m, RT_ENOMEM, "out of memory");
        if (e->n_attr)
            memcpy(at, e->attrs, sizeof(rt_attr) * (size_t)e->n_attr);
        at[e->n_attr] =
            (rt_attr){.name = "precision", .kind = RT_ATTR_STR, .s = rt_precision_name(prec)};
        e->attrs = at;
        e->n_attr++;
    }
    m->any_mixed |= prec == RT_PREC_BF16;
    return 0;
}

/* A model without a mixed_bfloat16 layer: its float32 policies are
 * Keras' default, which the request's precision (the global policy)
 * replaces; their attributes go. */
static void unmark_precision(imp *m)
{
    for (int k = 0; k < m->g->n && !m->any_mixed; k++) {
        rt__entry *e = &m->g->e[k];
        if (e->kind == RT__T_NODE && e->n_attr &&
            strcmp(e->attrs[e->n_attr - 1].name, "precision") == 0)
            e->n_attr--;
    }
}

static int is_model_class(const char *cls)
{
    return strcmp(cls, "Sequential") == 0 || strcmp(cls, "Functional") == 0 ||
           strcmp(cls, "Model") == 0;
}

/* Run one non-input layer on its inputs; records its output. A problem
 * with the layer is collected, and its output becomes a poisoned copy of
 * its first input so the walk goes on and finds the others; a layer reading
 * a poisoned value reports no shape problems (they follow from the first).
 * Only malformed JSON stops the walk (negative return). */
static int run_layer(imp *m, json_object *layer, const rt_keras_tensor *ins, int n_in,
                     rt_keras_tensor *out, rt_keras_tensor *more, int *n_more)
{
    if (n_more)
        *n_more = 0;
    const char *cls = jstr(layer, "class_name");
    json_object *cfg = jget(layer, "config", json_type_object);
    const char *lname = jstr(cfg, "name");
    if (!lname)
        lname = jstr(layer, "name");
    if (!lname && cls && strcmp(cls, "Sequential") == 0 && jget(layer, "config", json_type_array))
        lname = "sequential";
    if (!cls || !lname)
        return ifail(m, RT_EJSON, "a layer lacks class_name or config.name");
    char tagged[RT_KERAS_NAME];
    if (m->call_tag[0]) {
        int tn = snprintf(tagged, sizeof tagged, "%s%s", lname, m->call_tag);
        if (tn < 0 || tn >= (int)sizeof tagged)
            return ifail(m, RT_EINVAL, "layer name '%.64s' is too long", lname);
        lname = tagged;
    }
    int poisoned = 0;
    for (int i = 0; i < n_in; i++)
        poisoned |= ins[i].poisoned;
    *out = ins[0];
    out->poisoned = 1;
    char lerr[400];
    rt_keras_ctx c;
    memset(&c, 0, sizeof c);
    c.g = m->g;
    c.cfg = cfg;
    c.layer = lname;
    c.class_name = cls;
    c.err = lerr;
    c.errlen = sizeof lerr;
    lerr[0] = 0;
    c.keras3 = jstr(layer, "module") != NULL || jstr(layer, "registered_name") != NULL;
    c.batch = m->batch;
    if (n_in > RT_KERAS_MAX_IN) {
        rt_keras_fail(&c, RT_EINVAL, "too many inputs (%d)", n_in);
        add_problem(m, RT_EINVAL, lerr);
        return 0;
    }
    if (is_model_class(cls)) {
        /* its layers have call arguments of their own */
        m->call_kwargs = NULL;
        m->in_kw = NULL;
        /* a nested model reads its inputs in Keras' order */
        rt_keras_tensor nin[RT_KERAS_MAX_IN];
        for (int i = 0; i < n_in; i++) {
            nin[i] = ins[i];
            int lrc = lay_to_plain(m, lname, i, &nin[i]);
            if (lrc < 0)
                return lrc;
        }
        ins = nin;
        json_object *list = jget(layer, "config", json_type_array);
        if (list && strcmp(cls, "Sequential") == 0) {
            if (++m->depth > 32)
                return ifail(m, RT_EINVAL, "models nested more than 32 deep");
            int rc = walk_sequential(m, list, NULL, ins, out);
            m->depth--;
            return rc;
        }
        if (!cfg)
            return ifail(m, RT_EJSON, "nested model '%.64s' has no config", lname);
        if (++m->depth > 32)
            return ifail(m, RT_EINVAL, "models nested more than 32 deep at '%.64s'", lname);
        int rc;
        const int first = m->g->n;
        if (strcmp(cls, "Sequential") == 0) {
            json_object *ly = jget(cfg, "layers", json_type_array);
            rc = ly ? walk_sequential(m, ly, cfg, ins, out)
                    : ifail(m, RT_EJSON, "nested Sequential '%.64s' has no layers", lname);
        } else {
            rc = walk_functional(m, cfg, ins, n_in, out);
        }
        m->depth--;
        /* a frozen backbone (base_model.trainable = False): every weight
         * inside is frozen, whatever its own layer says */
        json_object *tr = jget(cfg, "trainable", json_type_boolean);
        if (rc == 0 && tr && !json_object_get_boolean(tr))
            for (int k = first; k < m->g->n; k++)
                if (m->g->e[k].kind == RT__T_PARAM)
                    m->g->e[k].trainable = 0;
        if (rc == 0 && m->cb) {
            json_object_object_foreach(cfg, k, v)
            {
                (void)v;
                m->cb(m->ud, cls, k, RT_KERAS_FIELD_USED);
            }
        }
        return rc;
    }
    if (k1_layer(cls, cfg)) {
        json_object *n = NULL;
        int rc = k1_translate(m, &cls, cfg, &n, lerr, sizeof lerr);
        if (rc == RT_ENOMEM)
            return ifail(m, rc, "out of memory");
        if (rc < 0) {
            size_t l = strlen(lerr);
            snprintf(lerr + l, sizeof lerr - l, " (layer '%.64s')", lname);
            add_problem(m, rc, lerr);
            return 0;
        }
        c.cfg = n;
        c.class_name = cls;
        c.keras1 = 1;
    }
    c.n_in = n_in;
    for (int i = 0; i < n_in; i++) {
        c.in[i] = ins[i];
        c.in_kw[i] = m->in_kw ? m->in_kw[i] : NULL;
    }
    c.call_kwargs = m->call_kwargs;
    /* this file's table, then import_keras_layers.c's; a custom class (a
     * registered_name with a package, a module outside Keras) is not the
     * built-in layer of the same name */
    rt_keras_layer_fn lfn = NULL;
    int lwant = 0;
    const char *lmod = jstr(layer, "module"), *lreg = jstr(layer, "registered_name");
    const int custom = (lreg && strchr(lreg, '>')) ||
                       (lmod && strncmp(lmod, "keras", 5) != 0 &&
                        strncmp(lmod, "tf_keras", 8) != 0 && strncmp(lmod, "tensorflow", 10) != 0);
    for (size_t i = 0; i < sizeof layer_table / sizeof layer_table[0] && !lfn && !custom; i++)
        if (strcmp(layer_table[i].class_name, cls) == 0)
            lfn = layer_table[i].fn, lwant = layer_table[i].n_in;
    if (lfn || (!custom && rt_keras_layers_find(cls, &lfn, &lwant))) {
        int rc = 0;
        if (lwant && n_in != lwant)
            rc = rt_keras_fail(&c, RT_EINVAL, "%s takes %d input(s), got %d", cls, lwant, n_in);
        const int first = m->g->n;
        int lmode = LAY_PLAIN, lprec = 0;
        if (rc == 0 && (dtype_policy(&c, &lprec, lerr, sizeof lerr) < 0 ||
                        activation_objects(m, &c, lerr, sizeof lerr) < 0)) {
            add_problem(m, RT_EUNIMPLEMENTED, lerr);
            return 0;
        }
        if (rc == 0 && !poisoned) {
            rc = layout_prepare(m, &c, &lmode);
            if (rc < 0 && rc != RT_EINVAL && rc != RT_ESHAPE)
                return rc;
            if (rc < 0) {
                add_problem(m, rc, m->err ? m->err : rt_strerror(rc));
                return 0;
            }
        }
        if (rc == 0)
            rc = lfn(&c);
        if (rc == 0)
            rc = rt_keras_param_opts(&c, first);
        if (rc == 0)
            rc = layout_finish(m, &c, lmode, first);
        if (rc == 0 && strcmp(cls, "ActivityRegularization") != 0)
            rc = rt_keras_activity_reg(&c);
        if (rc == 0 && lprec)
            rc = mark_precision(m, first, lprec);
        if (rc < 0) {
            int cascade = poisoned && (rc == RT_ESHAPE || rc == RT_EOVERFLOW || rc == RT_EGRAPH);
            if (!cascade)
                add_problem(m, rc, lerr[0] ? lerr : rt_strerror(rc));
            return 0;
        }
        /* trainable=false is inert on a layer whose weights are all frozen
         * anyway (Rescaling's constants, Normalization's statistics) */
        int has_params = 0;
        for (int k = first; k < m->g->n; k++)
            has_params |= m->g->e[k].kind == RT__T_PARAM && m->g->e[k].trainable;
        check_fields(m, &c, has_params);
        if (!c.mask_set && pass_mask(m, &c) < 0)
            return 0;
        *out = c.out;
        out->poisoned = poisoned;
        if (c.n_more && !n_more) {
            rt_keras_fail(&c, RT_EINVAL,
                          "%s has %d outputs (return_state); a Sequential model takes layers "
                          "of one output, as Keras does: use a Functional model",
                          cls, c.n_more + 1);
            add_problem(m, RT_EINVAL, lerr);
            return 0;
        }
        for (int k = 0; k < c.n_more && n_more; k++) {
            more[k] = c.more[k];
            more[k].poisoned = poisoned;
        }
        if (n_more)
            *n_more = c.n_more;
        return 0;
    }
    why_unknown(m, layer, cls, lname, cfg);
    return 0;
}

static int io_names(json_object *v, const char **names, int max);

/* The input shape a nested model (the first layer of a Sequential without
 * an InputLayer) declares: its InputLayer's or first layer's, recursively. */
static int nested_input_shape(imp *m, json_object *model, rt_keras_tensor *t, int *found)
{
    *found = 0;
    for (int depth = 0; depth < 32 && model; depth++) {
        json_object *cfg = jget(model, "config", json_type_object);
        json_object *layers = jget(model, "config", json_type_array);
        if (!layers)
            layers = jget(cfg, "layers", json_type_array);
        if (!layers || json_object_array_length(layers) == 0)
            return 0;
        json_object *first = NULL;
        const char *in_name = NULL;
        const char *names[1];
        json_object *il = NULL;
        if (cfg && json_object_object_get_ex(cfg, "input_layers", &il) &&
            io_names(il, names, 1) == 1)
            in_name = names[0];
        for (size_t i = 0; i < json_object_array_length(layers); i++) {
            json_object *l = json_object_array_get_idx(layers, i);
            const char *n = jstr(l, "name");
            if (!n)
                n = jstr(jget(l, "config", json_type_object), "name");
            if (!in_name || (n && strcmp(n, in_name) == 0)) {
                first = l;
                break;
            }
        }
        if (!first)
            return 0;
        const char *fc = jstr(first, "class_name");
        json_object *fcfg = jget(first, "config", json_type_object);
        int rc = layer_input_shape(m, fc ? fc : "?", fcfg, t, found);
        if (rc < 0 || *found)
            return rc;
        if (!fc || !is_model_class(fc))
            return 0;
        model = first;
    }
    return 0;
}

/* A Keras 2 Sequential whose first layer carries the shape, or one with an
 * InputLayer, or a built Keras 3 one with build_input_shape. given: the
 * value a nested model reads (NULL at the top, where the graph input is
 * made). */
static int walk_sequential(imp *m, json_object *layers, json_object *model_cfg,
                           const rt_keras_tensor *given, rt_keras_tensor *out)
{
    int n = (int)json_object_array_length(layers);
    if (n == 0)
        return ifail(m, RT_EJSON, "Sequential model has no layers");
    rt_keras_tensor cur;
    memset(&cur, 0, sizeof cur);
    int have = 0;
    if (given) {
        cur = *given;
        have = 1;
    }
    for (int i = 0; i < n; i++) {
        json_object *layer = json_object_array_get_idx(layers, (size_t)i);
        const char *cls = jstr(layer, "class_name");
        json_object *cfg = jget(layer, "config", json_type_object);
        const char *lname = jstr(cfg, "name");
        /* Keras 2.0-2.1 nested a Sequential as {"config": [layers]}, unnamed */
        if (cls && !lname && strcmp(cls, "Sequential") == 0 &&
            jget(layer, "config", json_type_array))
            lname = "sequential";
        if (!cls || !lname)
            return ifail(m, RT_EJSON, "layer %d lacks class_name or config.name", i);
        if (strcmp(cls, "InputLayer") == 0) {
            if (i != 0)
                return ifail(m, RT_EINVAL, "InputLayer '%.64s' is not first", lname);
            rt_keras_tensor t;
            memset(&t, 0, sizeof t);
            int found, rc = layer_input_shape(m, lname, cfg, &t, &found);
            if (rc < 0)
                return rc;
            if (!found)
                return ifail(m, RT_ESHAPE, "InputLayer '%.64s' has no shape", lname);
            if (given) {
                if (!given->poisoned && !input_takes(&t, given))
                    return ifail(m, RT_ESHAPE,
                                 "nested model input '%.64s' has another shape "
                                 "than the value it reads",
                                 lname);
                continue;
            }
            cur = t;
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
                json_object *l =
                    model_cfg ? jget(model_cfg, "build_input_shape", json_type_array) : NULL;
                if (!l)
                    l = jget(bc, "input_shape", json_type_array);
                if (l) {
                    if ((rc = shape_from_list(m, lname, l, 1, &cur)) < 0)
                        return rc;
                    found = 1;
                }
            }
            if (!found && is_model_class(cls) &&
                (rc = nested_input_shape(m, layer, &cur, &found)) < 0)
                return rc;
            if (!found)
                return ifail(m, RT_ESHAPE,
                             "the model's input shape is unknown: first layer '%.64s' "
                             "has no batch_input_shape and there is no InputLayer",
                             lname);
            if ((rc = add_input(m, "input", &cur)) < 0)
                return rc;
            have = 1;
        }
        rt_keras_tensor o;
        int rc = run_layer(m, layer, &cur, 1, &o, NULL, NULL);
        if (rc < 0)
            return rc;
        cur = o;
    }
    *out = cur;
    return 0;
}

/* An inbound reference [name, node, tensor, ...]: its node index into
 * *node and its tensor index (which output of a layer with several) into
 * *tix, both checked against the source layer when it is placed. Absent:
 * 0. */
static int inbound_index(imp *m, const char *lname, const char *src, json_object *ref,
                         int64_t *node, int *tix)
{
    *node = 0;
    *tix = 0;
    for (int k = 0; k < 2; k++) {
        json_object *v = json_object_array_get_idx(ref, (size_t)k + 1);
        if (!v)
            continue;
        if (!json_object_is_type(v, json_type_int))
            return ifail(m, RT_EJSON, "layer '%.64s' has a malformed inbound node", lname);
        int64_t i = json_object_get_int64(v);
        if (k == 0)
            *node = i;
        else if (i < 0 || i >= RT_KERAS_MAX_OUT)
            return ifail(m, RT_EINVAL, "layer '%.64s' reads output %lld of layer '%.64s'", lname,
                         (long long)i, src);
        else
            *tix = (int)i;
    }
    return 0;
}

/* The recurrent layers: Keras 2 lists a call's initial_state tensors after
 * the sequence in its inbound node (RNN.__call__ passes [inputs] +
 * initial_state); Keras 3 keeps them as the call's second argument
 * (RNN.call(sequences, initial_state, ...)), positional or keyword. */
static int takes_initial_state(json_object *layer)
{
    static const char *const rnn[] = {"SimpleRNN", "LSTM",     "GRU",
                                      "CuDNNLSTM", "CuDNNGRU", "Bidirectional"};
    const char *cls = jstr(layer, "class_name");
    for (size_t i = 0; cls && i < sizeof rnn / sizeof rnn[0]; i++)
        if (strcmp(cls, rnn[i]) == 0)
            return 1;
    return 0;
}

/* Layers whose call takes tensors as keyword arguments (Keras passes
 * MultiHeadAttention's value, key and attention_mask so, and Softmax's
 * mask): those become
 * inputs after the positional ones, named by kw[]. Any other layer's
 * keyword arguments are not read. */
static int takes_tensor_kwargs(json_object *layer)
{
    const char *cls = jstr(layer, "class_name");
    return cls && (strcmp(cls, "MultiHeadAttention") == 0 || strcmp(cls, "Attention") == 0 ||
                   strcmp(cls, "Softmax") == 0);
}

/* The tensor kwargs of an inbound node (Keras 2: [name, node, tensor];
 * Keras 3: {"class_name": "__keras_tensor__", "config": {keras_history}})
 * appended to names from n on. */
/* the [name, node, tensor] reference of one tensor argument (Keras 2's
 * list, Keras 3's __keras_tensor__ object), or NULL */
static json_object *tensor_ref(json_object *v)
{
    if (json_object_is_type(v, json_type_array) && json_object_array_length(v) >= 1 &&
        json_object_is_type(json_object_array_get_idx(v, 0), json_type_string))
        return v;
    if (json_object_is_type(v, json_type_object))
        return jget(jget(v, "config", json_type_object), "keras_history", json_type_array);
    return NULL;
}

/* The tensor kwargs of an inbound node, appended to names from n on; a
 * list of tensors (a recurrent layer's initial_state) gives each. only:
 * the one keyword read (the others must not hold tensors), or NULL for
 * every keyword. */
static int inbound_kwargs(imp *m, const char *lname, json_object *kwargs, const char **names,
                          int64_t *node_of, int *tix, const char **kw, int n, int max,
                          const char *only, const char *also)
{
    if (!kwargs || !json_object_is_type(kwargs, json_type_object))
        return n;
    json_object_object_foreach(kwargs, k, v)
    {
        json_object *one = tensor_ref(v);
        const int list = !one && json_object_is_type(v, json_type_array);
        const int cnt = list ? (int)json_object_array_length(v) : one ? 1 : 0;
        for (int j = 0; j < cnt; j++) {
            json_object *ref = list ? tensor_ref(json_object_array_get_idx(v, (size_t)j)) : one;
            if (!ref)
                break; /* a list of numbers, not tensors */
            if (only && strcmp(k, only) != 0 && !(also && strcmp(k, also) == 0))
                return ifail(m, RT_EUNIMPLEMENTED,
                             "layer '%.64s' is called with a tensor '%.32s' argument, which is "
                             "not supported: pass only %s (a mask comes from a Masking layer "
                             "or Embedding mask_zero)",
                             lname, k, only);
            json_object *nm = json_object_array_get_idx(ref, 0);
            if (!nm || !json_object_is_type(nm, json_type_string))
                return ifail(m, RT_EJSON, "layer '%.64s' has a malformed '%.32s' argument", lname,
                             k);
            if (n >= max)
                return ifail(m, RT_EINVAL, "layer '%.64s' reads more than %d tensors", lname, max);
            int rc = inbound_index(m, lname, json_object_get_string(nm), ref, &node_of[n], &tix[n]);
            if (rc < 0)
                return rc;
            kw[n] = k;
            names[n++] = json_object_get_string(nm);
        }
    }
    return n;
}

/* The source layer names of a Functional layer's inbound node `which`
 * (a shared layer has one per call), for
 * both the Keras 2 ([[["name", 0, 0, {}], ...]]) and the Keras 3
 * ([{"args": [tensor or [tensors]], "kwargs": {}}]) encodings;
 * for MultiHeadAttention also its tensor keyword arguments (kw[], and the
 * whole keyword object in *kwargs). */
static int inbound_names(imp *m, const char *lname, json_object *layer, int which,
                         const char **names, int64_t *node_of, int *tix, const char **kw,
                         json_object **kwargs, int max)
{
    *kwargs = NULL;
    json_object *nodes = jget(layer, "inbound_nodes", json_type_array);
    if (!nodes || json_object_array_length(nodes) <= (size_t)which)
        return 0;
    json_object *node = json_object_array_get_idx(nodes, (size_t)which);
    int n = 0;
    if (json_object_is_type(node, json_type_array)) {
        int k = (int)json_object_array_length(node);
        /* tf.keras' TFOpLambda keeps its first argument's structure: one
         * tensor is the entry itself ([name, node, tensor, kwargs]) */
        const int tfop = is_tf_op(layer);
        const int single =
            tfop && k >= 1 &&
            json_object_is_type(json_object_array_get_idx(node, 0), json_type_string);
        if (single)
            k = 1;
        /* a constant first argument (1 - x): tf.keras' node.py saves it as
         * ["_CONSTANT_VALUE", -1, value, kwargs]; the function reads it as
         * its keyword "x", beside the call's other arguments */
        if (single && !strcmp(json_object_get_string(json_object_array_get_idx(node, 0)),
                              "_CONSTANT_VALUE")) {
            json_object *kwc = json_object_array_get_idx(node, 3), *all = json_object_new_object();
            if (!all)
                return ifail(m, RT_ENOMEM, "out of memory");
            json_object_array_add(m->owned, all);
            if (kwc && json_object_is_type(kwc, json_type_object)) {
                json_object_object_foreach(kwc, ck, cv)
                {
                    json_object_object_add(all, ck, json_object_get(cv));
                }
            }
            json_object_object_add(all, "x", json_object_get(json_object_array_get_idx(node, 2)));
            *kwargs = all;
            return inbound_kwargs(m, lname, all, names, node_of, tix, kw, 0, max, NULL, NULL);
        }
        json_object *kw0 = NULL;
        for (int i = 0; i < k && n < max; i++) {
            json_object *ref = single ? node : json_object_array_get_idx(node, (size_t)i);
            json_object *nm = json_object_is_type(ref, json_type_array)
                                  ? json_object_array_get_idx(ref, 0)
                                  : NULL;
            if (!nm || !json_object_is_type(nm, json_type_string))
                return ifail(m, RT_EJSON, "layer '%.64s' has a malformed inbound node", lname);
            int rc = inbound_index(m, lname, json_object_get_string(nm), ref, &node_of[n], &tix[n]);
            if (rc < 0)
                return rc;
            names[n++] = json_object_get_string(nm);
            if (i == 0)
                kw0 = json_object_array_get_idx(ref, 3);
        }
        if (kw0 && (takes_tensor_kwargs(layer) || tfop)) {
            /* a TFOpLambda's function reads its constant arguments there */
            *kwargs = kw0;
            n = inbound_kwargs(m, lname, kw0, names, node_of, tix, kw, n, max, NULL, NULL);
        } else if (kw0 && takes_initial_state(layer)) {
            /* a recurrent layer called with mask= (tf.keras records
             * Embedding(mask_zero)'s mask as a TFOpLambda math.not_equal) */
            n = inbound_kwargs(m, lname, kw0, names, node_of, tix, kw, n, max, "initial_state",
                               "mask");
        }
        return n;
    }
    json_object *args = jget(node, "args", json_type_array);
    if (!args)
        return ifail(m, RT_EJSON, "layer '%.64s' has a malformed inbound node", lname);
    /* args is [tensor] or [[tensor, tensor, ...]]; a recurrent layer's
     * [sequence, initial_state (a tensor or a list of them)] */
    const int rnn = takes_initial_state(layer);
    json_object *list = args;
    if (json_object_array_length(args) == 1 &&
        json_object_is_type(json_object_array_get_idx(args, 0), json_type_array))
        list = json_object_array_get_idx(args, 0);
    int k = (int)json_object_array_length(list);
    for (int i = 0; i < k && n < max; i++) {
        json_object *t = json_object_array_get_idx(list, (size_t)i);
        const int many = rnn && i == 1 && json_object_is_type(t, json_type_array);
        if (rnn && i >= 2 && tensor_ref(t))
            return ifail(m, RT_EUNIMPLEMENTED,
                         "layer '%.64s' is called with a tensor mask argument, which is not "
                         "supported; mask with a Masking layer or Embedding mask_zero",
                         lname);
        if (rnn && i >= 1 && !t)
            continue; /* initial_state=None */
        const int cnt = many ? (int)json_object_array_length(t) : rnn && i >= 2 ? 0 : 1;
        for (int j = 0; j < cnt && n < max; j++) {
            json_object *h = tensor_ref(many ? json_object_array_get_idx(t, (size_t)j) : t);
            json_object *nm = h ? json_object_array_get_idx(h, 0) : NULL;
            /* a recorded operation's constant argument (NotEqual(x, 0)):
             * its function reads it from the node (c->call_kwargs) */
            if (!h && is_keras_op(layer) && t &&
                (json_object_is_type(t, json_type_int) || json_object_is_type(t, json_type_double)))
                continue;
            if ((!nm || !json_object_is_type(nm, json_type_string)) && is_keras_op(layer))
                return ifail(m, RT_EUNKNOWN_LAYER,
                             "layer '%.64s' is the Keras operation '%.40s' (%.40s) recorded in "
                             "the model, not a Keras layer: recorded operations are not supported",
                             lname, jstr(layer, "class_name") ? jstr(layer, "class_name") : "?",
                             jstr(layer, "module"));
            if (!nm || !json_object_is_type(nm, json_type_string))
                return ifail(m, RT_EJSON, "layer '%.64s' has a malformed inbound tensor", lname);
            int rc = inbound_index(m, lname, json_object_get_string(nm), h, &node_of[n], &tix[n]);
            if (rc < 0)
                return rc;
            names[n++] = json_object_get_string(nm);
        }
    }
    if (takes_tensor_kwargs(layer) || rnn) {
        *kwargs = jget(node, "kwargs", json_type_object);
        n = inbound_kwargs(m, lname, *kwargs, names, node_of, tix, kw, n, max,
                           rnn ? "initial_state" : NULL, rnn ? "mask" : NULL);
        if (rnn)
            *kwargs = NULL; /* read here; the layer takes the states as inputs */
    }
    if (is_keras_op(layer))
        *kwargs = node; /* the operation's whole call: its constant arguments */
    return n;
}

/* the node (k 1) or tensor (k 2) index of ["name", node, tensor] (0 when
 * absent or malformed) */
static int64_t io_node(json_object *ref, int k)
{
    json_object *v = json_object_array_get_idx(ref, (size_t)k);
    return v && json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : 0;
}

/* ["name", 0, 0] or [["name", 0, 0], ...] -> names and, if nodes is not
 * NULL, their node indices (an output may be a shared layer's later call)
 * and tensor indices (a recurrent layer's state). Keras 2.10+ writes the
 * outputs (or inputs) a model was built with as a dict, {"key": ["name",
 * 0, 0], ...}: Keras flattens it (tf.nest.flatten) in the order of its
 * keys, sorted, and so does this. */
static int io_refs(json_object *v, const char **names, int64_t *nodes, int64_t *tensors, int max)
{
    if (v && json_object_is_type(v, json_type_object)) {
        const char *keys[RT_MAX_HEADS + RT_KERAS_MAX_IN + 2];
        json_object *refs[RT_MAX_HEADS + RT_KERAS_MAX_IN + 2];
        int n = 0;
        const int cap =
            max < (int)(sizeof keys / sizeof keys[0]) ? max : (int)(sizeof keys / sizeof keys[0]);
        json_object_object_foreach(v, key, ref)
        {
            if (n == cap)
                break;
            int at = n++;
            for (; at > 0 && strcmp(keys[at - 1], key) > 0; at--) {
                keys[at] = keys[at - 1];
                refs[at] = refs[at - 1];
            }
            keys[at] = key;
            refs[at] = ref;
        }
        for (int i = 0; i < n; i++) {
            json_object *nm = json_object_is_type(refs[i], json_type_array)
                                  ? json_object_array_get_idx(refs[i], 0)
                                  : NULL;
            if (!nm || !json_object_is_type(nm, json_type_string))
                return -1;
            if (nodes)
                nodes[i] = io_node(refs[i], 1), tensors[i] = io_node(refs[i], 2);
            names[i] = json_object_get_string(nm);
        }
        return n;
    }
    if (!v || !json_object_is_type(v, json_type_array) || json_object_array_length(v) == 0)
        return 0;
    json_object *first = json_object_array_get_idx(v, 0);
    if (json_object_is_type(first, json_type_string)) {
        names[0] = json_object_get_string(first);
        if (nodes)
            nodes[0] = io_node(v, 1), tensors[0] = io_node(v, 2);
        return 1;
    }
    int n = 0;
    for (size_t i = 0; i < json_object_array_length(v) && n < max; i++) {
        json_object *e = json_object_array_get_idx(v, i);
        json_object *nm =
            json_object_is_type(e, json_type_array) ? json_object_array_get_idx(e, 0) : NULL;
        if (!nm || !json_object_is_type(nm, json_type_string))
            return -1;
        if (nodes)
            nodes[n] = io_node(e, 1), tensors[n] = io_node(e, 2);
        names[n++] = json_object_get_string(nm);
    }
    return n;
}

static int io_names(json_object *v, const char **names, int max)
{
    return io_refs(v, names, NULL, NULL, max);
}

/* One call of a Functional model's layer (a shared layer has one per
 * inbound node, next to each other), with the calls it reads */
typedef struct flayer {
    const char *cls, *name;
    json_object *obj, *cfg;
    int call, n_calls; /* this call's index among the layer's n_calls */
    int node_off;      /* Keras' node index of call 0 (1: a nested model's) */
    int prev_done;     /* DFS: call-1 placed first (weights come from call 0) */
    const char *src[RT_KERAS_MAX_IN];
    int64_t src_node[RT_KERAS_MAX_IN];   /* the node of src each reads */
    int src_t[RT_KERAS_MAX_IN];          /* and which of its outputs */
    int src_i[RT_KERAS_MAX_IN];          /* the flayer of that node, -1 none */
    const char *src_kw[RT_KERAS_MAX_IN]; /* the keyword src is passed as, or NULL */
    json_object *kwargs;                 /* the call's keyword arguments (some layers) */
    int n_src;
    int next;            /* DFS: the next input to visit */
    unsigned char state; /* 0 unseen, 1 on the DFS stack, 2 placed */
    rt_keras_tensor out;
    int more_at, n_more; /* its outputs after out: imp.more[more_at..] */
} flayer;

/* Layer names -> index, open addressing (FNV-1a); a linear scan per lookup
 * made a 20,000-layer import take seconds. */
typedef struct lmap {
    int *slot; /* layer index + 1, 0 = empty */
    size_t mask;
} lmap;

static size_t lmap_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)h;
}

/* the slot holding name, or the empty slot where it would go */
static int *lmap_slot(const lmap *lm, const flayer *L, const char *name)
{
    size_t h = lmap_hash(name) & lm->mask;
    while (lm->slot[h] && strcmp(L[lm->slot[h] - 1].name, name) != 0)
        h = (h + 1) & lm->mask;
    return &lm->slot[h];
}

static int lmap_get(const lmap *lm, const flayer *L, const char *name)
{
    return *lmap_slot(lm, L, name) - 1;
}

/* Calls (flayers) of a layers list: one per inbound node, at least one. */
static int count_calls(json_object *layers)
{
    int n = 0;
    for (size_t i = 0; i < json_object_array_length(layers); i++) {
        json_object *nodes =
            jget(json_object_array_get_idx(layers, i), "inbound_nodes", json_type_array);
        size_t k = nodes ? json_object_array_length(nodes) : 0;
        n += k > 1 ? (int)k : 1;
    }
    return n;
}

/* The call of layer call 0 at L[k] that Keras' node index node names, or
 * -1: a model called once is node 0 or 1 (Keras 2 numbers the calls of a
 * nested model from 1 and Keras 3 from 0) */
static int64_t call_of(const flayer *L, int k, int64_t node)
{
    int64_t c = node - L[k].node_off;
    if (L[k].n_calls == 1 && is_model_class(L[k].cls) && (node == 0 || node == 1))
        c = 0;
    return c >= 0 && c < L[k].n_calls ? c : -1;
}

/* Read every layer's class, name and the inbound layers of each of its
 * calls; map the names to their first call. */
static int read_flayers(imp *m, json_object *layers, flayer *L, int n, lmap *lm,
                        const char *const *out_names, const int64_t *out_nodes, int n_out)
{
    int nl = 0;
    for (int i = 0; i < n; i++) {
        flayer *f = &L[nl];
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
        *slot = nl + 1;
        json_object *nodes = jget(f->obj, "inbound_nodes", json_type_array);
        int calls =
            nodes && json_object_array_length(nodes) > 1 ? (int)json_object_array_length(nodes) : 1;
        if (strcmp(f->cls, "InputLayer") == 0)
            calls = 1;
        for (int c = 0; c < calls; c++) {
            flayer *g = &L[nl++];
            if (c > 0) {
                g->obj = f->obj;
                g->cls = f->cls;
                g->cfg = f->cfg;
                g->name = f->name;
            }
            g->call = c;
            g->n_calls = calls;
            if (strcmp(g->cls, "InputLayer") == 0)
                continue;
            g->n_src = inbound_names(m, g->name, g->obj, c, g->src, g->src_node, g->src_t,
                                     g->src_kw, &g->kwargs, RT_KERAS_MAX_IN);
            if (g->n_src < 0)
                return g->n_src;
            if (g->n_src == 0)
                return ifail(m, RT_EINVAL, "layer '%.64s' has no inbound node", g->name);
        }
    }
    /* A nested model's calls may count from 1: Keras 2 gives node 0 to the
     * model's own graph and the calls in the outer model 1, 2, ... */
    for (int i = 0; i < nl; i++)
        for (int j = 0; j < L[i].n_src; j++) {
            int k = lmap_get(lm, L, L[i].src[j]);
            if (k >= 0 && is_model_class(L[k].cls) && L[i].src_node[j] == L[k].n_calls)
                for (int c = 0; c < L[k].n_calls; c++)
                    L[k + c].node_off = 1;
        }
    for (int j = 0; j < n_out; j++) {
        int k = lmap_get(lm, L, out_names[j]);
        if (k >= 0 && is_model_class(L[k].cls) && out_nodes[j] == L[k].n_calls)
            for (int c = 0; c < L[k].n_calls; c++)
                L[k + c].node_off = 1;
    }
    for (int i = 0; i < nl; i++)
        for (int j = 0; j < L[i].n_src; j++) {
            int k = lmap_get(lm, L, L[i].src[j]);
            L[i].src_i[j] = -1;
            if (k < 0)
                continue;
            int64_t c = call_of(L, k, L[i].src_node[j]);
            if (c < 0)
                return ifail(m, RT_EINVAL,
                             "layer '%.64s' reads node %lld of layer '%.64s', "
                             "which is called %d time%s",
                             L[i].name, (long long)L[i].src_node[j], L[k].name, L[k].n_calls,
                             L[k].n_calls == 1 ? "" : "s");
            L[i].src_i[j] = k + (int)c;
        }
    return nl;
}

/* the param named name, or NULL */
static rt__entry *find_param(rt_graph *g, const char *name, int below)
{
    for (int i = 0; i < below; i++)
        if (g->e[i].kind == RT__T_PARAM && strcmp(g->e[i].name, name) == 0)
            return &g->e[i];
    return NULL;
}

/* After a later call of a shared layer (entries first..): every weight it
 * added ("<layer>@k/kernel") is dropped and its readers read the first
 * call's ("<layer>/kernel"), so one set of weights serves every call and
 * the engine sums their gradients into it (a value with several readers);
 * weight files keep one entry per layer, as Keras does. Constants that
 * differ between calls (built from the input's shape) stay the call's own. */
static int dedupe_call(imp *m, const char *lname, int first)
{
    rt_graph *g = m->g;
    const size_t tl = strlen(m->call_tag);
    int w = first;
    for (int i = first; i < g->n; i++) {
        rt__entry *e = &g->e[i];
        if (e->kind == RT__T_NODE && strcmp(e->op, "BatchNorm") == 0) {
            int frozen = 0;
            for (int a = 0; a < e->n_attr; a++)
                if (strcmp(e->attrs[a].name, "frozen") == 0)
                    frozen = (int)e->attrs[a].i;
            if (!frozen) {
                char msg[320];
                snprintf(msg, sizeof msg,
                         "layer '%.64s' is called more than once and holds a trainable "
                         "BatchNormalization (shared moving statistics are not supported; "
                         "freeze it or call it once)",
                         lname);
                add_problem(m, RT_EINVAL, msg);
                return 0;
            }
        }
        if (e->kind != RT__T_PARAM) {
            g->e[w++] = *e;
            continue;
        }
        /* the name without this call's tag */
        char orig[2 * RT_KERAS_NAME];
        const char *t = strstr(e->name, m->call_tag);
        while (t && t[tl] != '/' && t[tl] != 0)
            t = strstr(t + 1, m->call_tag);
        rt__entry *o = NULL;
        if (t) {
            snprintf(orig, sizeof orig, "%.*s%s", (int)(t - e->name), e->name, t + tl);
            o = find_param(g, orig, first);
        }
        int same = o && o->shape.ndim == e->shape.ndim &&
                   !memcmp(o->shape.d, e->shape.d, sizeof(int64_t) * (size_t)e->shape.ndim);
        if (same && (o->value || e->value)) {
            int64_t nv = rt__shape_numel(&e->shape);
            same = o->value && e->value && !memcmp(o->value, e->value, sizeof(float) * (size_t)nv);
            if (!same) { /* a constant of this call's own */
                g->e[w++] = *e;
                continue;
            }
        }
        if (same && (o->view.n != e->view.n ||
                     (e->view.n && memcmp(o->view.perm, e->view.perm, sizeof o->view.perm))))
            return ifail(m, RT_EINVAL,
                         "shared layer '%.64s' reads its input in another layout in one "
                         "of its calls (a Flatten of channels_first data); not supported",
                         lname);
        if (!same) {
            if (m->n_prob)
                return 0; /* the first call failed; its problem is reported */
            return ifail(m, RT_ESHAPE,
                         "shared layer '%.64s' needs weight '%.64s' of another shape in one of "
                         "its calls (its inputs differ in size)",
                         lname, e->name);
        }
        /* readers of e (all added by this call) read o */
        for (int j = i + 1; j < g->n; j++)
            for (int k = 0; g->e[j].kind == RT__T_NODE && k < g->e[j].n_in; k++)
                if (strcmp(g->e[j].in[k], e->name) == 0)
                    g->e[j].in[k] = o->name;
    }
    g->n = w;
    return 0;
}

/* A Functional model's inputs: names, and the values they are bound to
 * when the model is nested (given NULL at the top). */
typedef struct fio {
    const char *names[RT_KERAS_MAX_IN];
    int n;
    const rt_keras_tensor *given;
} fio;

/* Output tix of the placed layer call f (read by who) into *t: its
 * first, or one of those after (a recurrent layer's states); a layer that
 * failed gives its poisoned first output, its problem already reported */
static int flayer_output(imp *m, const char *who, const flayer *f, int64_t tix, rt_keras_tensor *t)
{
    if (tix == 0 || (f->out.poisoned && tix > f->n_more)) {
        *t = f->out;
        return 0;
    }
    if (tix < 0 || tix > f->n_more)
        return ifail(m, RT_EINVAL,
                     "%.80s reads output %lld of layer '%.64s', which has %d output%s", who,
                     (long long)tix, f->name, f->n_more + 1, f->n_more ? "s" : "");
    *t = m->more[f->more_at + tix - 1];
    return 0;
}

/* A recurrent layer called with a tensor `mask` (Keras 3 records
 * Embedding(mask_zero)'s mask as a NotEqual operation passed so): the
 * tensor becomes the sequence's step mask, as Keras' RNN.call takes it over
 * the one its input carries, and leaves the inputs. Keras casts it to bool:
 * a SequenceMask node (1 where the value is not 0) named
 * "<layer>[@k]/call_mask" makes that the engine's 0/1 step mask. */
static int rnn_mask_arg(imp *m, const char *lname, rt_keras_tensor *ins, const char **kw, int *n_in)
{
    int j = -1;
    for (int i = 1; i < *n_in; i++)
        if (kw[i] && strcmp(kw[i], "mask") == 0)
            j = i;
    if (j < 0)
        return 0;
    const rt_keras_tensor *mt = &ins[j];
    if (!ins[0].poisoned && !mt->poisoned &&
        (ins[0].ndim != 2 || mt->ndim != 1 || mt->dims[0] != ins[0].dims[0]))
        return ifail(m, RT_ESHAPE,
                     "layer '%.64s' is called with a mask of %d dims for a sequence of %d: the "
                     "mask must be (batch, time) with the sequence's %lld steps",
                     lname, mt->ndim + 1, ins[0].ndim + 1,
                     ins[0].ndim >= 1 ? (long long)ins[0].dims[0] : 0LL);
    char name[RT_KERAS_NAME];
    int k = snprintf(name, sizeof name, "%s%s/call_mask", lname, m->call_tag);
    if (k < 0 || k >= (int)sizeof name)
        return ifail(m, RT_EINVAL, "layer name '%.64s' is too long", lname);
    const rt_attr mv = {.name = "mask_value", .kind = RT_ATTR_FLOAT, .f = 0.0};
    const char *in = mt->name;
    int rc = rt_graph_add_node(m->g, name, "SequenceMask", 1, &in, 1, &mv);
    if (rc < 0)
        return ifail(m, rc, "layer '%.64s': %s", lname, rt_graph_errmsg(m->g));
    snprintf(ins[0].mask, sizeof ins[0].mask, "%s", name);
    for (int i = j; i + 1 < *n_in; i++)
        ins[i] = ins[i + 1], kw[i] = kw[i + 1];
    (*n_in)--;
    return 0;
}

/* Add one layer whose inputs are all placed. */
static int place_flayer(imp *m, flayer *L, const lmap *lm, flayer *f, const fio *io)
{
    if (strcmp(f->cls, "InputLayer") == 0) {
        int found, rc, k = -1;
        memset(&f->out, 0, sizeof f->out);
        if ((rc = layer_input_shape(m, f->name, f->cfg, &f->out, &found)) < 0)
            return rc;
        if (!found)
            return ifail(m, RT_ESHAPE, "InputLayer '%.64s' has no shape", f->name);
        for (int i = 0; i < io->n; i++)
            if (strcmp(f->name, io->names[i]) == 0)
                k = i;
        if (k < 0)
            return ifail(m, RT_EINVAL, "InputLayer '%.64s' is not a model input", f->name);
        if (!io->given)
            return m->n_packed ? add_packed_input(m, k, f->name, &f->out)
                               : add_input(m, f->name, &f->out);
        const rt_keras_tensor *g = &io->given[k];
        if (!g->poisoned && !input_takes(&f->out, g))
            return ifail(m, RT_ESHAPE,
                         "nested model input '%.64s' has another shape than "
                         "the value it reads",
                         f->name);
        f->out = *g;
        return 0;
    }
    (void)lm;
    rt_keras_tensor ins[RT_KERAS_MAX_IN];
    char who[RT_KERAS_NAME + 16];
    snprintf(who, sizeof who, "layer '%.64s'", f->name);
    for (int j = 0; j < f->n_src; j++) {
        int rc = flayer_output(m, who, &L[f->src_i[j]], f->src_t[j], &ins[j]);
        if (rc < 0)
            return rc;
    }
    const char *kw[RT_KERAS_MAX_IN];
    int n_src = f->n_src;
    memcpy(kw, f->src_kw, sizeof kw);
    m->call_kwargs = f->kwargs;
    m->in_kw = kw;
    /* a later call of a shared layer: its names tagged "@k", then its
     * weights replaced by the first call's */
    char saved[sizeof m->call_tag];
    memcpy(saved, m->call_tag, sizeof saved);
    int rc = 0;
    if (f->call > 0) {
        size_t l = strlen(m->call_tag);
        int k = snprintf(m->call_tag + l, sizeof m->call_tag - l, "@%d", ++m->n_tags);
        if (k < 0 || (size_t)k >= sizeof m->call_tag - l)
            rc = ifail(m, RT_EINVAL, "shared layers nested too deep at '%.64s'", f->name);
    }
    if (rc == 0 && takes_initial_state(f->obj))
        rc = rnn_mask_arg(m, f->name, ins, kw, &n_src);
    const int first = m->g->n;
    rt_keras_tensor more[RT_KERAS_MAX_OUT - 1];
    if (rc == 0)
        rc = run_layer(m, f->obj, ins, n_src, &f->out, more, &f->n_more);
    if (rc == 0 && f->n_more) {
        if (m->n_more + f->n_more > m->more_cap) {
            int cap = m->more_cap ? 2 * m->more_cap : 16;
            while (cap < m->n_more + f->n_more)
                cap *= 2;
            rt_keras_tensor *nm = realloc(m->more, sizeof *nm * (size_t)cap);
            if (!nm)
                return ifail(m, RT_ENOMEM, "out of memory");
            m->more = nm;
            m->more_cap = cap;
        }
        f->more_at = m->n_more;
        memcpy(m->more + m->n_more, more, sizeof *more * (size_t)f->n_more);
        m->n_more += f->n_more;
    }
    if (rc == 0 && f->call > 0)
        rc = dedupe_call(m, f->name, first);
    memcpy(m->call_tag, saved, sizeof saved);
    m->call_kwargs = NULL;
    m->in_kw = NULL;
    return rc;
}

/* Place layer i after everything it reads, depth first without recursion:
 * Keras lists layers in topological order, so a real file places each
 * layer as it is met, but a hand-edited one may not. stack: n ints. */
static int place_from(imp *m, flayer *L, const lmap *lm, int i, int *stack, const fio *io)
{
    int sp = 0, rc;
    stack[sp++] = i;
    L[i].state = 1;
    while (sp) {
        flayer *f = &L[stack[sp - 1]];
        /* a shared layer's calls in order: call 0 adds the weights */
        if (f->call > 0 && !f->prev_done) {
            f->prev_done = 1;
            flayer *p = f - 1;
            if (p->state == 0) {
                p->state = 1;
                stack[sp++] = (int)(p - L);
            }
            continue;
        }
        if (f->next < f->n_src) {
            const char *src = f->src[f->next];
            int j = f->src_i[f->next++];
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
        if ((rc = place_flayer(m, L, lm, f, io)) < 0)
            return rc;
        f->state = 2;
        sp--;
    }
    return 0;
}

/* A Functional model; nested (given != NULL) it reads given[0..n_given). */
static int walk_functional(imp *m, json_object *cfg, const rt_keras_tensor *given, int n_given,
                           rt_keras_tensor *out)
{
    json_object *layers = jget(cfg, "layers", json_type_array);
    if (!layers)
        return ifail(m, RT_EJSON, "Functional model has no layers list");
    const char *out_names[RT_MAX_HEADS + 1];
    int64_t out_nodes[RT_MAX_HEADS + 1], out_t[RT_MAX_HEADS + 1];
    fio io = {.given = given};
    json_object *il = NULL, *ol = NULL;
    json_object_object_get_ex(cfg, "input_layers", &il);
    json_object_object_get_ex(cfg, "output_layers", &ol);
    io.n = io_names(il, io.names, RT_KERAS_MAX_IN);
    int n_out = io_refs(ol, out_names, out_nodes, out_t, RT_MAX_HEADS + 1);
    if (!given && (io.n < 1 || io.n > RT_KERAS_MAX_IN))
        return ifail(m, RT_EINVAL, "Functional model needs 1 to %d inputs (got %d)",
                     RT_KERAS_MAX_IN, io.n);
    if (given && io.n != n_given)
        return ifail(m, RT_EINVAL, "nested model '%.64s' has %d inputs but reads %d values",
                     jstr(cfg, "name") ? jstr(cfg, "name") : "?", io.n, n_given);
    if (given ? n_out != 1 : (n_out < 1 || n_out > RT_MAX_HEADS))
        return ifail(m, RT_EINVAL,
                     given ? "nested model '%.64s' needs exactly one output "
                             "(got %d)"
                           : "Functional model '%.64s' needs 1 to 8 outputs (got %d)",
                     jstr(cfg, "name") ? jstr(cfg, "name") : "?", n_out);
    int rc0;
    if (!given && io.n > 1 && (rc0 = add_packed_inputs(m, layers, io.names, io.n)) < 0)
        return rc0;
    const int n = (int)json_object_array_length(layers);
    const int nc = count_calls(layers);
    lmap lm = {.mask = 15};
    while (lm.mask + 1 < (size_t)n * 2)
        lm.mask = lm.mask * 2 + 1;
    flayer *L = calloc((size_t)nc + 1, sizeof *L);
    int *stack = calloc((size_t)nc + 1, sizeof *stack);
    lm.slot = calloc(lm.mask + 1, sizeof *lm.slot);
    int rc = !L || !stack || !lm.slot
                 ? RT_ENOMEM
                 : read_flayers(m, layers, L, n, &lm, out_names, out_nodes, n_out);
    const int nl = rc;
    if (rc > 0)
        rc = 0;
    for (int i = 0; i < nl && rc == 0; i++)
        if (L[i].state == 0)
            rc = place_from(m, L, &lm, i, stack, &io);
    for (int k = 0; k < n_out && rc == 0; k++) {
        int o = lmap_get(&lm, L, out_names[k]);
        int64_t c = o < 0 ? 0 : call_of(L, o, out_nodes[k]);
        if (o < 0)
            rc = ifail(m, RT_EINVAL, "output layer '%.64s' is not in the model", out_names[k]);
        else if (c < 0)
            rc = ifail(m, RT_EINVAL, "output '%.64s' is node %lld of a layer called %d time%s",
                       out_names[k], (long long)out_nodes[k], L[o].n_calls,
                       L[o].n_calls == 1 ? "" : "s");
        if (rc < 0)
            break;
        o += (int)c;
        rt_keras_tensor ot;
        if ((rc = flayer_output(m, "the model's output", &L[o], out_t[k], &ot)) < 0)
            break;
        if (k == 0)
            *out = ot;
        if (rc == 0 && n_out > 1) {
            m->outs[k] = ot;
            /* the output's name in History ("cls_loss"), not its node's */
            snprintf(m->out_layer[k], sizeof m->out_layer[k], "%s", out_names[k]);
        }
    }
    if (rc == 0 && n_out > 1)
        m->n_outs = n_out;
    free(L);
    free(stack);
    free(lm.slot);
    return rc;
}

/* The Keras model object inside what users upload: model.to_json() itself,
 * an HDF5 attribute's {"model_config": ...}, or TF.js' model.json
 * {"modelTopology": {"model_config": ...}, "weightsManifest": [...]} (the
 * weights manifest names binary shards, which training from scratch does
 * not read). */
static json_object *model_root(json_object *root)
{
    for (int i = 0; i < 3 && root; i++) {
        json_object *v;
        if (json_object_object_get_ex(root, "modelTopology", &v) &&
            json_object_is_type(v, json_type_object))
            root = v;
        else if (json_object_object_get_ex(root, "model_config", &v) &&
                 json_object_is_type(v, json_type_object))
            root = v;
        else
            break;
    }
    return root;
}

int rt_keras_import(const char *json, size_t len, rt_graph **out, char *err, size_t errlen)
{
    return rt_keras_import_ex(json, len, out, err, errlen, NULL, NULL);
}

int rt_keras_import_ex(const char *json, size_t len, rt_graph **out, char *err, size_t errlen,
                       rt_keras_field_cb cb, void *ud)
{
    return rt_keras_import_dims(json, len, NULL, 0, out, err, errlen, cb, ud);
}

int rt_keras_import_dims(const char *json, size_t len, const int64_t *dims, int n_dims,
                         rt_graph **out, char *err, size_t errlen, rt_keras_field_cb cb, void *ud)
{
    return rt_keras_import_bind(json, len, dims, n_dims, 0, out, err, errlen, cb, ud);
}

/* One pass over the JSON text before json-c sees it: how deep its arrays
 * and objects nest (json-c's tree is freed, and walked here, by
 * recursion) and what json-c will allocate for it, estimated from its
 * containers and separators (per-value costs measured on json-c 0.16,
 * rounded up). Malformed text is json-c's to report. */
static int json_prescan(const char *s, size_t len, char *err, size_t errlen)
{
    uint64_t objs = 0, arrs = 0, seps = 0;
    int depth = 0, in_str = 0;
    for (size_t i = 0; i < len; i++) {
        const char ch = s[i];
        if (in_str) {
            if (ch == '\\')
                i++;
            else if (ch == '"')
                in_str = 0;
            continue;
        }
        switch (ch) {
        case '"': in_str = 1; break;
        case '{': objs++; /* fall through */
        case '[':
            arrs += ch == '[';
            if (++depth > RT_KERAS_MAX_DEPTH) {
                snprintf(err, errlen,
                         "Keras JSON is nested more than %d levels deep (the "
                         "limit) at byte %zu",
                         RT_KERAS_MAX_DEPTH, i);
                return RT_EJSON;
            }
            break;
        case '}':
        case ']': depth -= depth > 0; break;
        case ',':
        case ':': seps++; break;
        default: break;
        }
    }
    const uint64_t est = 800 * objs + 160 * arrs + 96 * seps + len;
    const uint64_t cap = RT_KERAS_PARSE_BUDGET(len) < RT_KERAS_PARSE_MAX
                             ? RT_KERAS_PARSE_BUDGET(len)
                             : RT_KERAS_PARSE_MAX;
    if (est > cap) {
        snprintf(err, errlen,
                 "Keras JSON of %zu bytes would take ~%llu MiB to parse (%llu "
                 "objects, %llu arrays); the limit is %llu MiB",
                 len, (unsigned long long)(est >> 20), (unsigned long long)objs,
                 (unsigned long long)arrs, (unsigned long long)(cap >> 20));
        return RT_ETOOBIG;
    }
    return 0;
}

int rt_keras_import_bind(const char *json, size_t len, const int64_t *dims, int n_dims,
                         int64_t values, rt_graph **out, char *err, size_t errlen,
                         rt_keras_field_cb cb, void *ud)
{
    *out = NULL;
    if (err && errlen)
        err[0] = 0;
    imp *mp = calloc(1, sizeof *mp);
    if (!mp)
        return RT_ENOMEM;
    imp *m = mp;
    m->err = err;
    m->errlen = errlen;
    m->cb = cb;
    m->ud = ud;
    m->bind = dims;
    m->n_bind = dims ? n_dims : 0;
    m->bind_values = m->n_bind ? 0 : values;
    int rc = 0;
    json_object *doc = NULL;
    char *inner = NULL;
    size_t inner_len = 0;
    if (n_dims < 0 || n_dims > RT_MAX_DIMS - 1) {
        rc = ifail(m, RT_EINVAL, "%d input dims given; at most %d", n_dims, RT_MAX_DIMS - 1);
        goto out;
    }
    if (!json || len == 0) {
        rc = ifail(m, RT_EJSON, "empty Keras JSON");
        goto out;
    }
    if (len > (size_t)INT32_MAX) {
        rc = ifail(m, RT_ETOOBIG, "Keras JSON is too large");
        goto out;
    }
    char perr[200];
    if ((rc = json_prescan(json, len, perr, sizeof perr)) < 0) {
        rc = ifail(m, rc, "%s", perr);
        goto out;
    }
    json_tokener *tok = json_tokener_new_ex(RT_KERAS_MAX_DEPTH);
    if (!tok) {
        rc = RT_ENOMEM;
        goto out;
    }
    doc = json_tokener_parse_ex(tok, json, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t used = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (!doc || jerr != json_tokener_success) {
        rc = ifail(m, RT_EJSON, "Keras JSON does not parse: %s at byte %zu",
                   json_tokener_error_desc(jerr), used);
        goto out;
    }
    /* json-c stops at the end of the first document; one model is one
     * document, and anything after it but whitespace is an error */
    for (size_t i = used; i < len; i++)
        if (!isspace((unsigned char)json[i])) {
            rc = ifail(m, RT_EJSON, "trailing data after the Keras JSON at byte %zu", i);
            goto out;
        }
    /* json.dump(model.to_json()) writes the model JSON as one JSON
     * string: its text is the model (unwrapped once, an object inside) */
    if (json_object_is_type(doc, json_type_string)) {
        const char *s = json_object_get_string(doc);
        size_t sl = (size_t)json_object_get_string_len(doc), i = 0;
        while (i < sl && isspace((unsigned char)s[i]))
            i++;
        if (i < sl && s[i] == '{' && (inner = malloc(sl + 1))) {
            memcpy(inner, s, sl + 1);
            inner_len = sl;
            goto out;
        }
    }
    json_object *root = model_root(doc);
    const char *cls = jstr(root, "class_name");
    json_object *cfg = NULL;
    json_object_object_get_ex(root, "config", &cfg);
    if (!cls || !cfg) {
        rc = ifail(m, RT_EJSON, "not a Keras model: no class_name/config at the top");
        goto out;
    }
    m->g = rt_graph_create();
    m->owned = json_object_new_array();
    if (!m->g || !m->owned) {
        rc = RT_ENOMEM;
        goto out;
    }
    rt_keras_tensor res;
    memset(&res, 0, sizeof res);
    if (strcmp(cls, "Sequential") == 0) {
        /* Keras 1 and 2.0-2.1 wrote the layer list as the config itself. */
        json_object *layers =
            json_object_is_type(cfg, json_type_array) ? cfg : jget(cfg, "layers", json_type_array);
        rc = layers ? walk_sequential(m, layers,
                                      json_object_is_type(cfg, json_type_object) ? cfg : NULL, NULL,
                                      &res)
                    : ifail(m, RT_EJSON, "Sequential model has no layers list");
    } else if (strcmp(cls, "Functional") == 0 || strcmp(cls, "Model") == 0) {
        rc = json_object_is_type(cfg, json_type_object)
                 ? walk_functional(m, cfg, NULL, 0, &res)
                 : ifail(m, RT_EJSON, "Functional model config is not an object");
    } else {
        rc = ifail(m, RT_EUNKNOWN_LAYER,
                   "unknown Keras model class '%.48s' (Sequential, Functional or Model)", cls);
    }
    if (rc == 0 && !m->n_outs)
        m->outs[0] = res;
    const int n_outs = m->n_outs ? m->n_outs : 1;
    if (rc == 0 && m->n_prob)
        rc = report_problems(m);
    if (rc == 0)
        unmark_precision(m);
    /* predictions and labels in Keras' order */
    const char *heads[RT_MAX_HEADS];
    for (int k = 0; k < n_outs && rc == 0; k++) {
        rc = lay_to_plain(m, m->outs[k].name, k, &m->outs[k]);
        heads[k] = m->outs[k].name;
    }
    /* a step mask reaching an output: Keras masks that output's loss per
     * step with it (rt_graph_set_loss_masks, each output its own) */
    const char *labels[RT_MAX_HEADS], *masks[RT_MAX_HEADS];
    int n_masks = 0;
    for (int k = 0; k < n_outs; k++) {
        labels[k] = m->out_layer[k];
        masks[k] = m->outs[k].mask[0] ? m->outs[k].mask : NULL;
        n_masks += masks[k] != NULL;
    }
    if (rc == 0 && ((n_outs > 1 ? rt_graph_set_outputs(m->g, heads, n_outs) < 0 ||
                                      rt_graph_name_outputs(m->g, labels, n_outs) < 0
                                : rt_graph_set_output(m->g, m->outs[0].name) < 0) ||
                    (n_masks && rt_graph_set_loss_masks(m->g, masks, n_outs) < 0)))
        rc = ifail(m, RT_EGRAPH, "%s", rt_graph_errmsg(m->g));
out:
    json_object_put(doc);
    json_object_put(m->owned);
    free(m->more);
    if (inner) {
        free(mp);
        /* its text starts with '{': a string again fails to parse as one */
        rc = rt_keras_import_bind(inner, inner_len, dims, n_dims, values, out, err, errlen, cb, ud);
        free(inner);
        return rc;
    }
    if (rc < 0) {
        rt_graph_destroy(m->g);
        free(mp);
        return rc;
    }
    *out = m->g;
    free(mp);
    return 0;
}

/* ------------------------------------------------------ compile_config */

static double jnum(json_object *o, const char *key)
{
    json_object *v;
    if (!o || !json_object_object_get_ex(o, key, &v) ||
        !(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
        return 0;
    double d = json_object_get_double(v);
    return isfinite(d) && d > 0 ? d : 0;
}

static void jcopy(char *dst, size_t n, const char *src) { snprintf(dst, n, "%s", src ? src : ""); }

static void add_metric(rt_keras_compile *o, json_object *m)
{
    if (json_object_is_type(m, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(m); i++)
            add_metric(o, json_object_array_get_idx(m, i));
        return;
    }
    json_object *mc;
    const char *name = rt_keras_obj_name(m, &mc);
    if (name && o->n_metrics < 8)
        jcopy(o->metrics[o->n_metrics++], sizeof o->metrics[0], name);
}

/* A saved loss (a name, a Keras 3 function or loss object, a Keras 2.12
 * class string) in Keras' function spelling ("categorical_crossentropy";
 * "MSE" stays "mse"), and its from_logits */
static void loss_spelling(json_object *loss, char *out, size_t outn, int *from_logits)
{
    json_object *lc = NULL;
    const char *ln = rt_keras_obj_name(loss, &lc);
    /* Keras 3 saves a loss function as {"class_name": "function",
     * "config": "binary_crossentropy", "module": "builtins"} */
    if (ln && strcmp(ln, "function") == 0 && lc == NULL) {
        json_object *fc = NULL;
        if (json_object_object_get_ex(loss, "config", &fc) &&
            json_object_is_type(fc, json_type_string))
            ln = json_object_get_string(fc);
    }
    size_t k = 0;
    const char *q0 = ln ? ln : "";
    for (const char *q = q0; *q && k + 2 < outn; q++) {
        const int up = isupper((unsigned char)*q);
        if (up && q > q0 &&
            (islower((unsigned char)q[-1]) || isdigit((unsigned char)q[-1]) ||
             (isupper((unsigned char)q[-1]) && islower((unsigned char)q[1]))))
            out[k++] = '_';
        out[k++] = (char)tolower((unsigned char)*q);
    }
    out[k] = 0;
    json_object *fl;
    if (lc && json_object_object_get_ex(lc, "from_logits", &fl) &&
        json_object_is_type(fl, json_type_boolean))
        *from_logits = json_object_get_boolean(fl);
}

/* The document of a model file for its settings: *doc, or an error */
static int settings_doc(const char *json, size_t len, json_object **doc)
{
    *doc = NULL;
    if (!json || len == 0 || len > (size_t)INT32_MAX)
        return RT_EJSON;
    char perr[200];
    if (json_prescan(json, len, perr, sizeof perr) < 0)
        return RT_EJSON;
    json_tokener *tok = json_tokener_new_ex(RT_KERAS_MAX_DEPTH);
    if (!tok)
        return RT_ENOMEM;
    *doc = json_tokener_parse_ex(tok, json, (int)len);
    int ok = *doc && json_tokener_get_error(tok) == json_tokener_success;
    json_tokener_free(tok);
    if (!ok) {
        json_object_put(*doc);
        *doc = NULL;
        return RT_EJSON;
    }
    return 0;
}

/* where the training settings live: the document, TF.js' modelTopology,
 * or the model object itself; NULL when none */
static json_object *training_settings(json_object *doc)
{
    json_object *tc = NULL, *at = doc;
    for (int i = 0; i < 3 && at && !tc; i++) {
        tc = jget(at, "compile_config", json_type_object);
        if (!tc)
            tc = jget(at, "training_config", json_type_object);
        json_object *next = jget(at, "modelTopology", json_type_object);
        at = next ? next : jget(at, "model_config", json_type_object);
    }
    return tc;
}

int rt_keras_compile_config(const char *json, size_t len, rt_keras_compile *o)
{
    memset(o, 0, sizeof *o);
    json_object *doc;
    int rc = settings_doc(json, len, &doc);
    if (rc < 0)
        return rc;
    json_object *tc = training_settings(doc);
    if (!tc) {
        json_object_put(doc);
        return 0;
    }
    json_object *loss = NULL, *lc;
    json_object_object_get_ex(tc, "loss", &loss);
    if (loss && json_object_is_type(loss, json_type_object) &&
        !json_object_object_get_ex(loss, "class_name", &lc)) {
        /* {"output_name": loss}: one output, one loss */
        json_object_object_foreach(loss, k, v)
        {
            (void)k;
            loss = v;
            break;
        }
    }
    if (loss && json_object_is_type(loss, json_type_array) && json_object_array_length(loss) == 1)
        loss = json_object_array_get_idx(loss, 0);
    if (loss)
        loss_spelling(loss, o->loss, sizeof o->loss, &o->from_logits);
    json_object *opt = NULL;
    if (!json_object_object_get_ex(tc, "optimizer", &opt))
        json_object_object_get_ex(tc, "optimizer_config", &opt);
    if (opt) {
        json_object *oc = NULL;
        const char *on = rt_keras_obj_name(opt, &oc);
        jcopy(o->optimizer, sizeof o->optimizer, on);
        /* Keras 2 wrote "lr", Keras 3 "learning_rate" (a schedule object
         * gives none) */
        o->lr = jnum(oc, "learning_rate");
        if (!o->lr)
            o->lr = jnum(oc, "lr");
        o->beta1 = jnum(oc, "beta_1");
        o->beta2 = jnum(oc, "beta_2");
        o->eps = jnum(oc, "epsilon");
        o->momentum = jnum(oc, "momentum");
        o->rho = jnum(oc, "rho");
        o->weight_decay = jnum(oc, "weight_decay");
        /* Ftrl's (keras/src/optimizers/ftrl.py get_config): 0 is a value */
        static const char *const fk[6] = {"learning_rate_power",
                                          "initial_accumulator_value",
                                          "l1_regularization_strength",
                                          "l2_regularization_strength",
                                          "l2_shrinkage_regularization_strength",
                                          "beta"};
        for (int i = 0; i < 6; i++) {
            json_object *fv;
            if (oc && json_object_object_get_ex(oc, fk[i], &fv) &&
                (json_object_is_type(fv, json_type_double) ||
                 json_object_is_type(fv, json_type_int))) {
                o->ftrl[i] = json_object_get_double(fv);
                o->has_ftrl[i] = 1;
            }
        }
        json_object *nv;
        if (oc && json_object_object_get_ex(oc, "nesterov", &nv) &&
            json_object_is_type(nv, json_type_boolean))
            o->nesterov = json_object_get_boolean(nv);
    }
    json_object *mets = NULL;
    if (json_object_object_get_ex(tc, "metrics", &mets) && mets)
        add_metric(o, mets);
    json_object_put(doc);
    return 1;
}

/* ------------------------------------------------------ several outputs */

/* entry k of a loss or loss_weights given per output: a list in
 * output_layers' order, or a dict by output name; NULL where not given */
static json_object *per_output(json_object *v, int k, const char *name)
{
    json_object *e = NULL;
    if (json_object_is_type(v, json_type_array))
        return k < (int)json_object_array_length(v) ? json_object_array_get_idx(v, k) : NULL;
    if (json_object_is_type(v, json_type_object) && !json_object_object_get_ex(v, "class_name", &e))
        return json_object_object_get_ex(v, name, &e) ? e : NULL;
    return NULL;
}

/* a saved metric (a name, a Keras 2 or 3 object) added to *bits:
 * "accuracy" (or "acc") is the one the output's loss implies, as Keras';
 * a named kind ("sparse_categorical_accuracy") is that metric, in History
 * under its name; names the engine does not compute are reports, skipped
 * as for one output */
static void head_metric(json_object *m, uint32_t *bits)
{
    if (json_object_is_type(m, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(m); i++)
            head_metric(json_object_array_get_idx(m, i), bits);
        return;
    }
    char nm[64];
    int fl = 0;
    loss_spelling(m, nm, sizeof nm, &fl);
    uint32_t bit;
    if (rt_metric_from_name(nm, &bit) == 0)
        *bits |= bit;
}

/* whether saved metrics name each output's own (a dict by output name, a
 * list of lists), not one list for every output */
static int metrics_per_output(json_object *m)
{
    json_object *e;
    if (json_object_is_type(m, json_type_object))
        return !json_object_object_get_ex(m, "class_name", &e);
    if (!json_object_is_type(m, json_type_array) || !json_object_array_length(m))
        return 0;
    for (size_t i = 0; i < json_object_array_length(m); i++) {
        json_object *x = json_object_array_get_idx(m, i);
        if (!json_object_is_type(x, json_type_array) && !json_object_is_type(x, json_type_null))
            return 0;
    }
    return 1;
}

int rt_keras_heads(const char *json, size_t len, rt_train_config *cfg, char *err, size_t errlen)
{
    json_object *doc;
    int rc = settings_doc(json, len, &doc);
    if (rc < 0)
        return rc;
    json_object *ol = NULL, *mc = jget(model_root(doc), "config", json_type_object);
    const char *names[RT_MAX_HEADS + 1];
    int n = mc && json_object_object_get_ex(mc, "output_layers", &ol)
                ? io_names(ol, names, RT_MAX_HEADS + 1)
                : 0;
    if (n <= 1 || n > RT_MAX_HEADS) {
        json_object_put(doc);
        return 0;
    }
    json_object *tc = training_settings(doc), *loss = NULL, *lw = NULL, *mets = NULL;
    if (tc) {
        json_object_object_get_ex(tc, "loss", &loss);
        json_object_object_get_ex(tc, "loss_weights", &lw);
        json_object_object_get_ex(tc, "metrics", &mets);
    }
    /* Keras: one list of metrics applies to every output; a dict or a list
     * of lists gives each its own */
    const int per_out = mets && metrics_per_output(mets);
    uint32_t every = 0;
    if (mets && !per_out)
        head_metric(mets, &every);
    for (int k = 0; k < n && rc == 0; k++) {
        struct rt_loss_head *h = &cfg->heads[k];
        /* one loss (the request's or the saved one) applies to every output,
         * as Keras' compile(loss="mse") does */
        h->loss = cfg->loss;
        h->from_logits = cfg->from_logits;
        h->weight = 1.0f;
        json_object *l = per_output(loss, k, names[k]);
        if (l && !json_object_is_type(l, json_type_null)) {
            char nm[64];
            int fl = 0;
            loss_spelling(l, nm, sizeof nm, &fl);
            if (rt_loss_from_name(nm, &h->loss) < 0 || RT_LOSS_IS_TORCH(h->loss))
                rc = rt_errf(err, errlen, RT_EINVAL,
                             "output '%.64s': the saved loss '%.48s' is not supported", names[k],
                             nm);
            h->from_logits = fl;
        } else if (json_object_is_type(loss, json_type_array) ||
                   (json_object_is_type(loss, json_type_object) && !jstr(loss, "class_name"))) {
            rc = rt_errf(err, errlen, RT_EINVAL,
                         "output '%.64s' has no loss (Keras leaves such an output untrained, "
                         "which is not supported)",
                         names[k]);
        }
        h->metrics = every;
        json_object *hm = per_out ? per_output(mets, k, names[k]) : NULL;
        if (hm)
            head_metric(hm, &h->metrics);
        json_object *w = per_output(lw, k, names[k]);
        if (w &&
            (json_object_is_type(w, json_type_double) || json_object_is_type(w, json_type_int)))
            h->weight = (float)json_object_get_double(w);
    }
    json_object_put(doc);
    if (rc < 0)
        return rc;
    cfg->n_heads = n;
    cfg->label_dtype = RT_F32;
    cfg->label_ndim = 0;
    return n;
}
