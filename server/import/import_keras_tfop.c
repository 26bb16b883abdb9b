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

/* TF 2.2-2.3's TensorFlowOpLayer (tensorflow/python/keras/engine/
 * base_layer.py): a TensorFlow op that Python code applied to a Keras
 * tensor, saved as config.node_def (the op's NodeDef as JSON: "op", its
 * "input" names, "attr") and config.constants ({"<input index>": value}:
 * the op's inputs that were constants; the layer's tensors fill the other
 * positions in order, as its _make_op inserts them). Imported: the
 * element-wise binary ops (Add, AddV2, Sub, Mul, RealDiv, Div, Maximum,
 * Minimum) of two tensors or a tensor and a constant on either side, and
 * the unary ops Softmax (last axis, as TensorFlow's), Sigmoid, Relu, Relu6,
 * Tanh, Elu, Selu, Softplus, Softsign, Exp and Identity. Any other op, an
 * attr other than the dtype T, or another dtype is refused naming it. */
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
    for (size_t i = 0; i < sizeof bin / sizeof bin[0]; i++)
        if (!strcmp(op, bin[i].tf))
            eop = bin[i].op;
    for (size_t i = 0; i < sizeof un / sizeof un[0]; i++)
        if (!strcmp(op, un[i].tf))
            act = un[i].act;
    if (!eop && !act)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "TensorFlowOpLayer op '%.48s' (a TensorFlow operation recorded by "
                             "tf.keras 2.2-2.3) is not supported: element-wise Add, AddV2, Sub, "
                             "Mul, RealDiv, Div, Maximum, Minimum and Softmax, Sigmoid, Relu, "
                             "Relu6, Tanh, Elu, Selu, Softplus, Softsign, Exp, Identity are",
                             op);
    /* attr: only the dtype T, float32 */
    json_object *attr = NULL;
    if (json_object_object_get_ex(nd, "attr", &attr) && attr &&
        json_object_is_type(attr, json_type_object)) {
        json_object_object_foreach(attr, ak, av)
        {
            json_object *ty = NULL;
            if (strcmp(ak, "T") != 0)
                return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                     "TensorFlowOpLayer %.40s attr '%.32s' is not supported", op,
                                     ak);
            if (!av || !json_object_object_get_ex(av, "type", &ty) ||
                strcmp(json_object_get_string(ty), "DT_FLOAT") != 0)
                return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                     "TensorFlowOpLayer %.40s: only DT_FLOAT values are supported",
                                     op);
        }
    }
    /* the op's inputs: constants at their indices, the tensors elsewhere */
    json_object *ins = NULL;
    const int n_op_in = json_object_object_get_ex(nd, "input", &ins) && ins &&
                                json_object_is_type(ins, json_type_array)
                            ? (int)json_object_array_length(ins)
                            : c->n_in;
    json_object *cst[2] = {NULL, NULL};
    int n_const = 0;
    if (consts && json_object_is_type(consts, json_type_object)) {
        json_object_object_foreach(consts, ck, cv)
        {
            char *end;
            long i = strtol(ck, &end, 10);
            if (*end || i < 0 || i >= n_op_in || i > 1)
                return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                     "TensorFlowOpLayer %.40s: constant input '%.16s' is not "
                                     "supported",
                                     op, ck);
            cst[i] = cv;
            n_const++;
        }
    }
    if (act) {
        if (n_op_in != 1 || n_const || c->n_in != 1)
            return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                 "TensorFlowOpLayer %.40s takes one tensor, got %d inputs", op,
                                 n_op_in);
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
    if (n_op_in != 2 || c->n_in + n_const != 2)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "TensorFlowOpLayer %.40s takes two inputs, got %d tensors and %d "
                             "constants",
                             op, c->n_in, n_const);
    return k_binop(c, op, eop, cst);
}
