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
 *     Max/Min ops, the constant a frozen parameter "<layer>/y".
 * Any other function, argument or form (a constant first argument) is
 * refused naming the function.
 */
#include <json-c/json.h>
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

/* fn(x, y): y the tensor c->in[1] or the constant in the call's "y" */
static int k_binary_op(rt_keras_ctx *c, const char *fn, const char *op, json_object *y)
{
    const rt_keras_tensor *x = &c->in[0];
    const char *in[2] = {x->name, NULL};
    char cname[RT_KERAS_NAME];
    int rc;
    if (c->n_in == 2) {
        if (y || !c->in_kw[1] || strcmp(c->in_kw[1], "y") != 0)
            return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                 "TFOpLambda %.40s takes its second tensor as 'y'", fn);
        in[1] = c->in[1].name;
        if ((rc = k_bcast(c, fn, x, c->in[1].dims, c->in[1].ndim, &c->out)) < 0)
            return rc;
    } else {
        int64_t d[RT_MAX_DIMS];
        int r = y ? k_const_shape(y, d, 0) : -1;
        if (c->n_in != 1 || r < 0)
            return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                 "TFOpLambda %.40s needs a tensor and a second tensor or a "
                                 "constant (a number or a nested list) as 'y'",
                                 fn);
        /* a leading 1 beyond the tensor's rank is TensorFlow's batch dim */
        int lead = 0;
        while (r - lead > x->ndim && d[lead] == 1)
            lead++;
        int64_t numel = 1;
        for (int i = 0; i < r; i++)
            numel *= d[i];
        if (r - lead > x->ndim || numel > (1 << 24))
            return rt_keras_fail(c, RT_ESHAPE,
                                 "TFOpLambda %.40s: the constant 'y' (rank %d) does not broadcast "
                                 "over a value of rank %d",
                                 fn, r, x->ndim + 1);
        int64_t pd[RT_MAX_DIMS];
        int pn = r - lead;
        memcpy(pd, d + lead, sizeof(int64_t) * (size_t)pn);
        if (pn == 0)
            pd[pn++] = 1;
        if ((rc = k_bcast(c, fn, x, pd, pn, &c->out)) < 0 ||
            (rc = rt_keras_name(c, cname, "y")) < 0)
            return rc;
        float *v = malloc(sizeof(float) * (size_t)numel);
        if (!v)
            return rt_keras_fail(c, RT_ENOMEM, "out of memory");
        size_t k = 0;
        k_const_fill(y, v, &k);
        rc = rt_graph_add_param(c->g, cname, pn, pd, RT_INIT_ZEROS, 0, v);
        free(v);
        if (rc < 0)
            return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
        in[1] = cname;
    }
    if ((rc = rt_graph_add_node(c->g, c->layer, op, 2, in, 0, NULL)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    snprintf(c->out.name, sizeof c->out.name, "%s", c->layer);
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
     * tensor), and name (TensorFlow's op name, which changes nothing) */
    json_object *y = NULL;
    if (c->call_kwargs && json_object_is_type(c->call_kwargs, json_type_object)) {
        json_object_object_foreach(c->call_kwargs, k, v)
        {
            if (strcmp(k, "name") == 0 || !v)
                continue;
            if (strcmp(k, "y") != 0)
                return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                     "TFOpLambda %.40s argument '%.32s' is not supported", fn, k);
            y = v;
        }
    }
    /* a tensor y is one of the layer's inputs, not a constant */
    if (y && json_object_is_type(y, json_type_array) && json_object_array_length(y) >= 1 &&
        json_object_is_type(json_object_array_get_idx(y, 0), json_type_string))
        y = NULL;
    if (ne) {
        json_object *num =
            y && (json_object_is_type(y, json_type_int) || json_object_is_type(y, json_type_double))
                ? y
                : NULL;
        return rt_keras_step_mask_op(c, num, fn);
    }
    return k_binary_op(c, fn, op, y);
}
