/*
 * import_keras_tfop.c - tf.keras' TFOpLambda: a TensorFlow function that
 * Python code called on a Keras tensor in a Functional model, which tf.keras
 * 2.4-2.15 records as a layer (keras/layers/core/tf_op_layer.py) with
 * config.function the function's name under tf ("math.not_equal" for
 * tf.math.not_equal) and the call's other arguments as the inbound node's
 * keyword arguments (keras/engine/node.py serialize: {"y": 0, "name":
 * null}; a tensor argument as [layer, node, tensor]). import_keras.c reads
 * that node (its first argument one tensor, the entry itself) and lists
 * this function in its layer table.
 *
 * Imported:
 *   - math.not_equal(x, number) on a (time,) value: the step mask
 *     Embedding(mask_zero) makes, passed to a recurrent layer's mask
 *     (the NotEqual of Keras 3, rt_keras_step_mask_op);
 *   - element-wise add, subtract, multiply, divide, maximum and minimum
 *     (math.add, math.subtract, math.multiply, math.truediv, math.divide,
 *     math.maximum, math.minimum and the __operators__ spellings x + y
 *     records) of two tensors or a tensor and a constant (a number or a
 *     nested list), with TensorFlow's broadcasting: the Add/Sub/Mul/Div/
 *     Max/Min ops, the constant a frozen parameter "<layer>/y" (or "/x").
 *   - a constant first argument (1 - x), which keras/engine/node.py saves
 *     as ["_CONSTANT_VALUE", -1, value, kwargs] (import_keras.c passes the
 *     value as the keyword "x").
 * Any other function or argument is refused naming the function.
 * Also TF 2.2-2.3's TensorFlowOpLayer (rt_keras_tf_op_layer, below).
 */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import_keras.h"
#include "rt_engine_impl.h"

static const struct {
    const char *fn, *op;
} k_binary[] = {
    {"math.add", "Add"},          {"__operators__.add", "Add"},     {"math.subtract", "Sub"},
    {"__operators__.sub", "Sub"}, {"math.multiply", "Mul"},         {"__operators__.mul", "Mul"},
    {"math.truediv", "Div"},      {"__operators__.truediv", "Div"}, {"math.divide", "Div"},
    {"math.maximum", "Max"},      {"math.minimum", "Min"},
};

/* the shape of a nested list of numbers (rank 0: a number); -1 when
 * ragged or not numbers */
static int k_const_shape(json_object *v, int64_t *dims, int depth)
{
    if (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double))
        return 0;
    if (!json_object_is_type(v, json_type_array) || depth >= RT_MAX_DIMS)
        return -1;
    const size_t n = json_object_array_length(v);
    if (n == 0)
        return -1;
    dims[0] = (int64_t)n;
    int r = -1;
    for (size_t i = 0; i < n; i++) {
        int64_t d[RT_MAX_DIMS];
        int ri = k_const_shape(json_object_array_get_idx(v, i), d, depth + 1);
        if (ri < 0 || (i && (ri != r || memcmp(d, dims + 1, sizeof(int64_t) * (size_t)ri))))
            return -1;
        if (!i)
            memcpy(dims + 1, d, sizeof(int64_t) * (size_t)ri);
        r = ri;
    }
    return r + 1;
}

static void k_const_fill(json_object *v, float *out, size_t *k)
{
    if (!json_object_is_type(v, json_type_array)) {
        out[(*k)++] = (float)json_object_get_double(v);
        return;
    }
    for (size_t i = 0; i < json_object_array_length(v); i++)
        k_const_fill(json_object_array_get_idx(v, i), out, k);
}

/* TensorFlow's broadcast of (batch, a...) and (batch, b...) or a constant
 * b (no batch dim): right-aligned, a 1 takes the other's size */
static int k_bcast(rt_keras_ctx *c, const char *fn, const rt_keras_tensor *a, const int64_t *bd,
                   int bn, rt_keras_tensor *out)
{
    const int n = a->ndim > bn ? a->ndim : bn;
    for (int i = 0; i < n; i++) {
        const int ia = i - (n - a->ndim), ib = i - (n - bn);
        const int64_t x = ia >= 0 ? a->dims[ia] : 1, y = ib >= 0 ? bd[ib] : 1;
        if (x != y && x != 1 && y != 1)
            return rt_keras_fail(c, RT_ESHAPE,
                                 "%.40s: shapes do not broadcast (dim %d: %lld and %lld)", fn, i,
                                 (long long)x, (long long)y);
        out->dims[i] = x == 1 ? y : x;
    }
    out->ndim = n;
    return 0;
}

/* a constant operand (a number or a nested list) as the frozen parameter
 * "<layer>/<sfx>", its per-sample dims in pd/pn (TensorFlow's leading 1s
 * beyond the tensor's rank r are the batch dim) */
static int k_const_param(rt_keras_ctx *c, const char *fn, json_object *v, int r, const char *sfx,
                         char *cname, int64_t *pd, int *pn)
{
    int64_t d[RT_MAX_DIMS] = {0};
    int rv = k_const_shape(v, d, 0), rc, lead = 0;
    if (rv < 0)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "%.40s: a constant operand must be a number or a nested list", fn);
    while (rv - lead > r && d[lead] == 1)
        lead++;
    int64_t numel = 1;
    for (int i = 0; i < rv; i++)
        numel *= d[i];
    if (rv - lead > r || numel > (1 << 24))
        return rt_keras_fail(c, RT_ESHAPE,
                             "%.40s: a constant of rank %d does not broadcast over a value of "
                             "rank %d",
                             fn, rv, r + 1);
    *pn = rv - lead;
    memcpy(pd, d + lead, sizeof(int64_t) * (size_t)*pn);
    if (*pn == 0)
        pd[(*pn)++] = 1;
    if ((rc = rt_keras_name(c, cname, sfx)) < 0)
        return rc;
    float *vals = malloc(sizeof(float) * (size_t)numel);
    if (!vals)
        return rt_keras_fail(c, RT_ENOMEM, "out of memory");
    size_t k = 0;
    k_const_fill(v, vals, &k);
    rc = rt_graph_add_param(c->g, cname, *pn, pd, RT_INIT_ZEROS, 0, vals);
    free(vals);
    if (rc < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    return 0;
}

/* op(a, b), operand i the constant cst[i] (a number or a nested list) or,
 * where that is NULL, the next tensor of c->in: two tensors, or a tensor
 * and a constant on either side (1 - x), with TensorFlow's broadcasting */
static int k_binop(rt_keras_ctx *c, const char *fn, const char *op, json_object *const cst[2])
{
    const int want = !cst[0] + !cst[1];
    if (want == 0 || c->n_in != want)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "%.40s needs two tensors, or a tensor and a constant (a number or "
                             "a nested list); got %d tensor%s and %d constant%s",
                             fn, c->n_in, c->n_in == 1 ? "" : "s", 2 - want,
                             2 - want == 1 ? "" : "s");
    const char *in[2];
    char cname[RT_KERAS_NAME];
    int rc;
    const rt_keras_tensor *x = &c->in[0];
    if (want == 2) {
        in[0] = c->in[0].name;
        in[1] = c->in[1].name;
        if ((rc = k_bcast(c, fn, x, c->in[1].dims, c->in[1].ndim, &c->out)) < 0)
            return rc;
    } else {
        const int ci = cst[0] ? 0 : 1;
        int64_t pd[RT_MAX_DIMS] = {0};
        int pn = 0;
        if ((rc = k_const_param(c, fn, cst[ci], x->ndim, ci ? "y" : "x", cname, pd, &pn)) < 0 ||
            (rc = k_bcast(c, fn, x, pd, pn, &c->out)) < 0)
            return rc;
        in[ci] = cname;
        in[1 - ci] = x->name;
    }
    if ((rc = rt_graph_add_node(c->g, c->layer, op, 2, in, 0, NULL)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    snprintf(c->out.name, sizeof c->out.name, "%s", c->layer);
    c->out.mask[0] = 0;
    return 0;
}

int rt_keras_tfop_lambda(rt_keras_ctx *c)
{
    const char *fn;
    int rc;
    if ((rc = rt_keras_cfg_str(c, "function", NULL, &fn)) < 0)
        return rc;
    if (!fn)
        return rt_keras_fail(c, RT_EINVAL, "TFOpLambda has no 'function'");
    const char *op = NULL;
    const int ne = !strcmp(fn, "math.not_equal") || !strcmp(fn, "__operators__.ne");
    for (size_t i = 0; i < sizeof k_binary / sizeof k_binary[0]; i++)
        if (!strcmp(fn, k_binary[i].fn))
            op = k_binary[i].op;
    if (!ne && !op)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "TFOpLambda '%.48s' (a TensorFlow function recorded by tf.keras) is "
                             "not supported: not_equal and element-wise add, subtract, multiply, "
                             "divide, maximum and minimum are",
                             fn);
    /* the call's arguments after the first: y (a number, a list or a
     * tensor), and name (TensorFlow's op name, which changes nothing); x:
     * a constant first argument (import_keras.c reads tf.keras'
     * "_CONSTANT_VALUE" entry into it) */
    json_object *y = NULL, *x = NULL;
    int y_tensor = 0;
    if (c->call_kwargs && json_object_is_type(c->call_kwargs, json_type_object)) {
        json_object_object_foreach(c->call_kwargs, k, v)
        {
            if (strcmp(k, "name") == 0 || !v)
                continue;
            if (strcmp(k, "y") != 0 && strcmp(k, "x") != 0)
                return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                     "TFOpLambda %.40s argument '%.32s' is not supported", fn, k);
            /* a tensor is one of the layer's inputs, not a constant */
            const int tensor =
                json_object_is_type(v, json_type_array) && json_object_array_length(v) >= 1 &&
                json_object_is_type(json_object_array_get_idx(v, 0), json_type_string);
            if (k[0] == 'y' && tensor)
                y_tensor = 1;
            else if (k[0] == 'y')
                y = v;
            else if (tensor)
                return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                     "TFOpLambda %.40s: a tensor 'x' keyword is not supported", fn);
            else
                x = v;
        }
    }
    /* two tensors: the second is the keyword y */
    if (!x && c->n_in == 2 && (!y_tensor || !c->in_kw[1] || strcmp(c->in_kw[1], "y") != 0))
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "TFOpLambda %.40s takes its second tensor as 'y'", fn);
    if (ne && x)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "TFOpLambda %.40s with a constant first argument is not supported",
                             fn);
    if (ne) {
        json_object *num =
            y && (json_object_is_type(y, json_type_int) || json_object_is_type(y, json_type_double))
                ? y
                : NULL;
        return rt_keras_step_mask_op(c, num, fn);
    }
    json_object *const cst[2] = {x, y};
    return k_binop(c, fn, op, cst);
}

/* a constant of whole numbers (a number or a flat list) into v[<= max];
 * the count, or -1 when it is something else */
static int k_const_ints(json_object *j, int64_t *v, int max)
{
    const int list = json_object_is_type(j, json_type_array);
    const int n = list ? (int)json_object_array_length(j) : 1;
    if (n > max)
        return -1;
    for (int i = 0; i < n; i++) {
        json_object *e = list ? json_object_array_get_idx(j, (size_t)i) : j;
        if (json_object_is_type(e, json_type_int))
            v[i] = json_object_get_int64(e);
        else if (json_object_is_type(e, json_type_double) &&
                 json_object_get_double(e) == (double)(int64_t)json_object_get_double(e))
            v[i] = (int64_t)json_object_get_double(e);
        else
            return -1;
    }
    return n;
}

/* one graph node "<layer>" (or "<layer>/<sfx>") of op on in[], the layer's
 * output of per-sample dims od[nd] when it is the layer's own */
static int k_node(rt_keras_ctx *c, const char *sfx, const char *op, int n_in, const char **in,
                  int n_attr, const rt_attr *at, char *name)
{
    int rc = rt_keras_name(c, name, sfx);
    if (rc < 0)
        return rc;
    if ((rc = rt_graph_add_node(c->g, name, op, n_in, in, n_attr, n_attr ? at : NULL)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    return 0;
}

static void k_out(rt_keras_ctx *c, int nd, const int64_t *od)
{
    snprintf(c->out.name, sizeof c->out.name, "%s", c->layer);
    c->out.ndim = nd;
    if (od != c->out.dims)
        memcpy(c->out.dims, od, sizeof(int64_t) * (size_t)nd);
    c->out.mask[0] = 0;
}

/* Mean, Sum, Max, Min, Prod (math_ops.cc: input, reduction_indices; attr
 * keep_dims): the
 * axes count the batch, negative from the end, repeats allowed; the batch
 * axis is never reduced (the engine keeps it) */
static int k_tf_reduce(rt_keras_ctx *c, const char *op, const char *eop, json_object *idx, int keep)
{
    const rt_keras_tensor *x = &c->in[0];
    const int r = x->ndim + 1;
    int64_t ax[RT_MAX_DIMS + 1];
    int n = idx ? k_const_ints(idx, ax, RT_MAX_DIMS + 1) : -1;
    if (n < 0)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "TensorFlowOpLayer %.40s needs constant whole-number "
                             "reduction_indices (input 1)",
                             op);
    int red[RT_MAX_DIMS + 1] = {0}, m = 0;
    for (int i = 0; i < n; i++) {
        const int64_t a = ax[i] < 0 ? ax[i] + r : ax[i];
        if (a < 0 || a >= r)
            return rt_keras_fail(c, RT_EINVAL,
                                 "TensorFlowOpLayer %.40s: axis %lld is outside [-%d, %d)", op,
                                 (long long)ax[i], r, r);
        if (a == 0)
            return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                 "TensorFlowOpLayer %.40s reduces axis 0, the batch: not "
                                 "supported (reduce the other axes)",
                                 op);
        red[a] = 1;
    }
    int64_t axes[RT_MAX_DIMS], od[RT_MAX_DIMS];
    int ond = 0;
    for (int a = 1; a < r; a++) {
        if (red[a])
            axes[m++] = a;
        if (!red[a] || keep)
            od[ond++] = red[a] ? 1 : x->dims[a - 1];
    }
    char name[RT_KERAS_NAME];
    const char *in = x->name;
    int rc;
    if (m == 0) /* no axis: TensorFlow returns the input */
        rc = k_node(c, NULL, "Identity", 1, &in, 0, NULL, name);
    else {
        const rt_attr at[2] = {{.name = "axes", .kind = RT_ATTR_INTS, .n = m, .ints = axes},
                               {.name = "keepdims", .kind = RT_ATTR_INT, .i = keep}};
        rc = k_node(c, NULL, eop, 1, &in, 2, at, name);
    }
    if (rc < 0)
        return rc;
    if (ond == 0) /* a scalar per sample: the engine's (1,) */
        od[ond++] = 1;
    k_out(c, ond, od);
    return 0;
}

/* Reshape (array_ops.cc: tensor, shape): shape a constant whose first
 * entry is -1, the batch, and the rest the per-sample dims, which must hold
 * the sample's values (a shape that moves values between samples is
 * refused) */
static int k_tf_reshape(rt_keras_ctx *c, json_object *shape)
{
    int64_t t[RT_MAX_DIMS + 1];
    const int n = shape && json_object_is_type(shape, json_type_array)
                      ? k_const_ints(shape, t, RT_MAX_DIMS + 1)
                      : -1;
    if (n < 1)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "TensorFlowOpLayer Reshape needs a constant shape (input 1), a list "
                             "of whole numbers");
    if (t[0] != -1)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "TensorFlowOpLayer Reshape: shape[0] is %lld; only -1 (the batch "
                             "kept) is supported",
                             (long long)t[0]);
    int64_t in_n = 1, known = 1;
    for (int i = 0; i < c->in[0].ndim; i++)
        in_n *= c->in[0].dims[i];
    for (int i = 1; i < n; i++)
        if (t[i] <= 0 || __builtin_mul_overflow(known, t[i], &known))
            return rt_keras_fail(c, RT_EINVAL,
                                 "TensorFlowOpLayer Reshape: shape[%d] = %lld (one -1 is allowed, "
                                 "the batch's; the other dims must be positive)",
                                 i, (long long)t[i]);
    if (known != in_n)
        return rt_keras_fail(c, RT_ESHAPE,
                             "TensorFlowOpLayer Reshape: the shape holds %lld values per sample "
                             "but the input has %lld (the batch dim must be kept)",
                             (long long)known, (long long)in_n);
    int64_t *od = t + 1;
    int ond = n - 1;
    if (ond == 0) /* (batch,): the engine's (1,) per sample */
        od[ond++] = 1;
    const rt_attr a = {.name = "shape", .kind = RT_ATTR_INTS, .n = ond, .ints = od};
    char name[RT_KERAS_NAME];
    const char *in = c->in[0].name;
    int rc = k_node(c, NULL, "Reshape", 1, &in, 1, &a, name);
    if (rc < 0)
        return rc;
    k_out(c, ond, od);
    return 0;
}

/* ConcatV2 (array_ops.cc: values..., axis): the layer's tensors, then a
 * constant axis counting the batch (negative from the end) */
static int k_tf_concat(rt_keras_ctx *c, json_object *axis)
{
    int64_t ax;
    if (!axis || k_const_ints(axis, &ax, 1) != 1 || json_object_is_type(axis, json_type_array))
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "TensorFlowOpLayer ConcatV2 needs a constant whole-number axis (its "
                             "last input)");
    const int nd = c->in[0].ndim, r = nd + 1;
    const int64_t a = ax < 0 ? ax + r : ax;
    if (a < 1 || a >= r)
        return rt_keras_fail(c, a == 0 ? RT_EUNIMPLEMENTED : RT_EINVAL,
                             "TensorFlowOpLayer ConcatV2: axis %lld is %s", (long long)ax,
                             a == 0 ? "the batch: not supported" : "outside the input's rank");
    int64_t od[RT_MAX_DIMS];
    memcpy(od, c->in[0].dims, sizeof(int64_t) * (size_t)nd);
    od[a - 1] = 0;
    const char *in[RT_KERAS_MAX_IN];
    for (int i = 0; i < c->n_in; i++) {
        if (c->in[i].ndim != nd)
            return rt_keras_fail(c, RT_ESHAPE, "TensorFlowOpLayer ConcatV2: inputs differ in rank");
        for (int j = 0; j < nd; j++)
            if (j != a - 1 && c->in[i].dims[j] != c->in[0].dims[j])
                return rt_keras_fail(c, RT_ESHAPE,
                                     "TensorFlowOpLayer ConcatV2: input %d has dim %d = %lld, "
                                     "expected %lld",
                                     i, j + 1, (long long)c->in[i].dims[j],
                                     (long long)c->in[0].dims[j]);
        od[a - 1] += c->in[i].dims[a - 1];
        in[i] = c->in[i].name;
    }
    const rt_attr at = {.name = "axis", .kind = RT_ATTR_INT, .i = a};
    char name[RT_KERAS_NAME];
    int rc = k_node(c, NULL, "Concat", c->n_in, in, 1, &at, name);
    if (rc < 0)
        return rc;
    k_out(c, nd, od);
    return 0;
}

/* the unary ops that are not Keras activations: LeakyRelu (attr alpha,
 * TensorFlow's default 0.2), Square (x * x), Sqrt, Rsqrt (1 / sqrt(x)),
 * Neg, Abs and Log */
static int k_tf_unary(rt_keras_ctx *c, const char *op, double alpha)
{
    char name[RT_KERAS_NAME], s[RT_KERAS_NAME];
    const char *in[2] = {c->in[0].name, c->in[0].name};
    int rc;
    if (!strcmp(op, "LeakyRelu")) {
        const rt_attr a = {.name = "alpha", .kind = RT_ATTR_FLOAT, .f = alpha};
        rc = k_node(c, NULL, "LeakyRelu", 1, in, 1, &a, name);
    } else if (!strcmp(op, "Square"))
        rc = k_node(c, NULL, "Mul", 2, in, 0, NULL, name);
    else if (!strcmp(op, "Sqrt") || !strcmp(op, "Abs") || !strcmp(op, "Log"))
        rc = k_node(c, NULL, op, 1, in, 0, NULL, name);
    else if (!strcmp(op, "Neg")) {
        const rt_attr a = {.name = "alpha", .kind = RT_ATTR_FLOAT, .f = -1.0};
        rc = k_node(c, NULL, "Scale", 1, in, 1, &a, name);
    } else { /* Rsqrt: 1 / Sqrt(x), the 1 a frozen (1,) parameter */
        const int64_t one_d[1] = {1};
        const float one = 1.0f;
        char cn[RT_KERAS_NAME];
        if ((rc = k_node(c, "sqrt", "Sqrt", 1, in, 0, NULL, s)) < 0 ||
            (rc = rt_keras_name(c, cn, "one")) < 0)
            return rc;
        if ((rc = rt_graph_add_param(c->g, cn, 1, one_d, RT_INIT_ZEROS, 0, &one)) < 0)
            return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
        const char *div[2] = {cn, s};
        rc = k_node(c, NULL, "Div", 2, div, 0, NULL, name);
    }
    if (rc < 0)
        return rc;
    k_out(c, c->in[0].ndim, c->in[0].dims);
    return 0;
}

/* TF 2.2-2.3's TensorFlowOpLayer (tensorflow/python/keras/engine/
 * base_layer.py): a TensorFlow op that Python code applied to a Keras
 * tensor, saved as config.node_def (the op's NodeDef as JSON, json_format.
 * MessageToDict: "op", its "input" names, "attr" values as {"type"}, {"b"},
 * {"f"}, {"i"}) and config.constants ({"<input index>": value}: the op's
 * inputs that were constants; the layer's tensors fill the other positions
 * in order, as its _make_op inserts them). Imported:
 *   - the element-wise binary ops (Add, AddV2, Sub, Mul, RealDiv, Div,
 *     Maximum, Minimum) of two tensors or a tensor and a constant on either
 *     side;
 *   - the unary ops Softmax (last axis, as TensorFlow's), Sigmoid, Relu,
 *     Relu6, Tanh, Elu, Selu, Softplus, Softsign, Exp, Identity, LeakyRelu
 *     (attr alpha), Square, Sqrt, Rsqrt, Neg, Abs and Log;
 *   - the reductions Mean, Sum, Max, Min and Prod over constant
 *     reduction_indices (attr keep_dims), Reshape to a constant shape that
 *     keeps the batch, and ConcatV2 of the layer's tensors along a constant
 *     axis.
 * Any other op, another attr, or a dtype other than float32 (int32/int64
 * for an index input) is refused naming it. */
int rt_keras_tf_op_layer(rt_keras_ctx *c)
{
    static const struct {
        const char *tf, *op;
    } bin[] = {
        {"Add", "Add"},     {"AddV2", "Add"}, {"Sub", "Sub"},     {"Mul", "Mul"},
        {"RealDiv", "Div"}, {"Div", "Div"},   {"Maximum", "Max"}, {"Minimum", "Min"},
    };
    /* unary ops as the Keras activation of the same function */
    static const struct {
        const char *tf, *act;
    } un[] = {
        {"Softmax", "softmax"}, {"Sigmoid", "sigmoid"},   {"Relu", "relu"},
        {"Relu6", "relu6"},     {"Tanh", "tanh"},         {"Elu", "elu"},
        {"Selu", "selu"},       {"Softplus", "softplus"}, {"Softsign", "softsign"},
        {"Exp", "exponential"}, {"Identity", "linear"},
    };
    /* the other ops: their kind, and the attrs besides T they may carry */
    enum { K_UNARY = 1, K_REDUCE, K_RESHAPE, K_CONCAT };
    static const struct {
        const char *tf, *eop;
        int kind;
        const char *attrs[3];
    } more[] = {
        {"LeakyRelu", NULL, K_UNARY, {"alpha"}},
        {"Square", NULL, K_UNARY, {NULL}},
        {"Sqrt", NULL, K_UNARY, {NULL}},
        {"Rsqrt", NULL, K_UNARY, {NULL}},
        {"Neg", NULL, K_UNARY, {NULL}},
        {"Abs", NULL, K_UNARY, {NULL}},
        {"Log", NULL, K_UNARY, {NULL}},
        {"Mean", "ReduceMean", K_REDUCE, {"keep_dims", "Tidx"}},
        {"Sum", "ReduceSum", K_REDUCE, {"keep_dims", "Tidx"}},
        {"Max", "ReduceMax", K_REDUCE, {"keep_dims", "Tidx"}},
        {"Min", "ReduceMin", K_REDUCE, {"keep_dims", "Tidx"}},
        {"Prod", "ReduceProd", K_REDUCE, {"keep_dims", "Tidx"}},
        {"Reshape", NULL, K_RESHAPE, {"Tshape"}},
        {"ConcatV2", NULL, K_CONCAT, {"N", "Tidx"}},
    };
    c->fields_checked = 1;
    json_object *nd = NULL, *consts = NULL, *v = NULL;
    json_object_object_foreach(c->cfg, key, val)
    {
        if (!strcmp(key, "node_def"))
            nd = val;
        else if (!strcmp(key, "constants"))
            consts = val;
        else if (strcmp(key, "name") != 0 && strcmp(key, "trainable") != 0 &&
                 strcmp(key, "dtype") != 0 && val)
            return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                 "TensorFlowOpLayer setting '%.40s' is not supported", key);
    }
    const char *op =
        nd && json_object_object_get_ex(nd, "op", &v) && json_object_is_type(v, json_type_string)
            ? json_object_get_string(v)
            : NULL;
    if (!op)
        return rt_keras_fail(c, RT_EJSON, "TensorFlowOpLayer needs node_def.op");
    const char *eop = NULL, *act = NULL;
    int kind = 0;
    const char *const *extra = NULL;
    for (size_t i = 0; i < sizeof bin / sizeof bin[0]; i++)
        if (!strcmp(op, bin[i].tf))
            eop = bin[i].op;
    for (size_t i = 0; i < sizeof un / sizeof un[0]; i++)
        if (!strcmp(op, un[i].tf))
            act = un[i].act;
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        if (!strcmp(op, more[i].tf)) {
            kind = more[i].kind;
            eop = more[i].eop;
            extra = more[i].attrs;
        }
    if (!eop && !act && !kind)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "TensorFlowOpLayer op '%.48s' (a TensorFlow operation recorded by "
                             "tf.keras 2.2-2.3) is not supported: element-wise Add, AddV2, Sub, "
                             "Mul, RealDiv, Div, Maximum, Minimum, Softmax, Sigmoid, Relu, Relu6, "
                             "Tanh, Elu, Selu, Softplus, Softsign, Exp, Identity, LeakyRelu, "
                             "Square, Sqrt, Rsqrt, Neg, Abs, Log, and Mean, Sum, Max, Min, Prod, "
                             "Reshape, ConcatV2 are",
                             op);
    /* attr: the dtype T (float32), and the op's own */
    json_object *attr = NULL;
    int keep = 0;
    double alpha = 0.2; /* nn_ops.cc LeakyRelu's default */
    if (json_object_object_get_ex(nd, "attr", &attr) && attr &&
        json_object_is_type(attr, json_type_object)) {
        json_object_object_foreach(attr, ak, av)
        {
            json_object *ty = NULL;
            int known = !strcmp(ak, "T");
            for (int i = 0; extra && i < 3 && extra[i]; i++)
                known |= !strcmp(ak, extra[i]);
            if (!known)
                return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                     "TensorFlowOpLayer %.40s attr '%.32s' is not supported", op,
                                     ak);
            if (!av || !json_object_is_type(av, json_type_object))
                return rt_keras_fail(c, RT_EJSON,
                                     "TensorFlowOpLayer %.40s attr '%.32s' is not an AttrValue", op,
                                     ak);
            if (!strcmp(ak, "T")) {
                if (!json_object_object_get_ex(av, "type", &ty) ||
                    strcmp(json_object_get_string(ty), "DT_FLOAT") != 0)
                    return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                         "TensorFlowOpLayer %.40s: only DT_FLOAT values are "
                                         "supported",
                                         op);
            } else if (!strcmp(ak, "Tidx") || !strcmp(ak, "Tshape")) {
                const char *t =
                    json_object_object_get_ex(av, "type", &ty) ? json_object_get_string(ty) : "";
                if (strcmp(t, "DT_INT32") != 0 && strcmp(t, "DT_INT64") != 0)
                    return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                         "TensorFlowOpLayer %.40s attr %.8s: DT_INT32 or "
                                         "DT_INT64 only",
                                         op, ak);
            } else if (!strcmp(ak, "keep_dims")) {
                if (json_object_object_get_ex(av, "b", &ty))
                    keep = json_object_get_boolean(ty);
            } else if (!strcmp(ak, "alpha")) {
                if (json_object_object_get_ex(av, "f", &ty))
                    alpha = json_object_get_double(ty);
                if (!isfinite(alpha))
                    return rt_keras_fail(c, RT_EINVAL,
                                         "TensorFlowOpLayer LeakyRelu alpha must be finite");
            } /* N: the count of values, checked against the tensors below */
        }
    }
    /* the op's inputs: constants at their indices, the tensors elsewhere */
    json_object *ins = NULL;
    const int n_op_in = json_object_object_get_ex(nd, "input", &ins) && ins &&
                                json_object_is_type(ins, json_type_array)
                            ? (int)json_object_array_length(ins)
                            : c->n_in;
    json_object *cst[RT_KERAS_MAX_IN + 1] = {NULL};
    int n_const = 0, last_const = -1;
    if (consts && json_object_is_type(consts, json_type_object)) {
        json_object_object_foreach(consts, ck, cv)
        {
            char *end;
            long i = strtol(ck, &end, 10);
            if (*end || end == ck || i < 0 || i >= n_op_in || i > RT_KERAS_MAX_IN || !cv || cst[i])
                return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                     "TensorFlowOpLayer %.40s: constant input '%.16s' is not "
                                     "supported",
                                     op, ck);
            cst[i] = cv;
            n_const++;
            if (i > last_const)
                last_const = (int)i;
        }
    }
    if (c->n_in + n_const != n_op_in)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "TensorFlowOpLayer %.40s: node_def has %d inputs but the layer has "
                             "%d tensors and %d constants",
                             op, n_op_in, c->n_in, n_const);
    if (act || kind == K_UNARY) {
        if (n_op_in != 1 || n_const || c->n_in != 1)
            return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                 "TensorFlowOpLayer %.40s takes one tensor, got %d inputs", op,
                                 n_op_in);
        if (kind == K_UNARY)
            return k_tf_unary(c, op, alpha);
        c->out = c->in[0];
        c->out.mask[0] = 0;
        if (!strcmp(act, "linear")) {
            const char *in = c->in[0].name;
            int rc = rt_graph_add_node(c->g, c->layer, "Identity", 1, &in, 0, NULL);
            if (rc < 0)
                return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
            snprintf(c->out.name, sizeof c->out.name, "%s", c->layer);
            return 0;
        }
        return rt_keras_add_activation(c, act);
    }
    if (kind == K_REDUCE || kind == K_RESHAPE) {
        if (n_op_in != 2 || c->n_in != 1 || !cst[1])
            return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                 "TensorFlowOpLayer %.40s takes one tensor and a constant %s", op,
                                 kind == K_REDUCE ? "reduction_indices" : "shape");
        return kind == K_REDUCE ? k_tf_reduce(c, op, eop, cst[1], keep) : k_tf_reshape(c, cst[1]);
    }
    if (kind == K_CONCAT) {
        if (n_const != 1 || last_const != n_op_in - 1 || c->n_in < 1)
            return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                 "TensorFlowOpLayer ConcatV2 takes the layer's tensors and a "
                                 "constant axis last (a constant among the values is not "
                                 "supported)");
        return k_tf_concat(c, cst[n_op_in - 1]);
    }
    if (n_op_in != 2 || c->n_in + n_const != 2)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "TensorFlowOpLayer %.40s takes two inputs, got %d tensors and %d "
                             "constants",
                             op, c->n_in, n_const);
    json_object *const c2[2] = {cst[0], cst[1]};
    return k_binop(c, op, eop, c2);
}
