/*
 * import_keras_rnn.c - Keras' Embedding, SimpleRNN, LSTM, GRU, Keras 2's
 * CuDNNLSTM and CuDNNGRU (k_cudnn_cfg), Bidirectional and Masking layers
 * -> the engine's Embedding / SimpleRNN / LSTM / GRU / SequenceMask /
 * Masking ops (server/engine/op_rnn.c).
 * import_keras.c lists these functions in its layer table.
 *
 * Step masks: Masking(mask_value) and Embedding(mask_zero) make one (a
 * SequenceMask node "<layer>/mask", set as the output's mask); a recurrent
 * layer reading a masked value takes it as its step mask (masked steps
 * carry the state, as Keras), and passes it on when it returns sequences;
 * zero_output_for_mask is read (Keras 3 writes it) and, as Keras does,
 * forced to return_sequences inside Bidirectional. Where else a mask may
 * go is import_keras.c's pass_mask.
 *
 * Weights keep Keras' names and layout, so get/set weights interoperate
 * with a Keras model's: "<layer>/embeddings"; "<layer>/kernel" (in, G*units),
 * "<layer>/recurrent_kernel" (units, G*units), "<layer>/bias" (G*units,
 * or (2, 3*units) for GRU reset_after, (2*G*units) for CuDNN's); gates
 * LSTM i,f,c,o and GRU z,r,h.
 * Bidirectional's halves are "<layer>/forward_<inner>/..." and
 * "<layer>/backward_<inner>/...", as in Keras' weight paths.
 *
 * Nothing is dropped silently: every config field is implemented, or on
 * the list of fields that do not change training (k_inert: names, dtype,
 * shape hints, unroll and implementation, which only choose how Keras
 * computes the same values), or an error naming it. dropout and
 * recurrent_dropout are the ops' (op_rnn.c: one input mask and one state
 * mask per sample and batch, shared by the gates, as Keras 3 and Keras 2's
 * default implementation 2 draw them); Keras 1's Embedding dropout is the
 * Embedding op's (whole rows of the matrix per step). stateful: the node's "stateful"
 * attribute is the model's fixed batch size (the first batch_input_shape
 * or batch_shape that has one; without one Keras refuses it, and so does
 * this). return_state: the node outputs its rows and the final states as
 * one value, sliced into the layer's outputs (k_rows); initial_state: the
 * layer's inputs after the sequence (Keras 2's inbound node, Keras 3's
 * argument; import_keras.c reads both) are the node's state inputs.
 * Bidirectional's halves take their initializers, regularizers and
 * constraints from their own configs (k_rnn_build_cfg).
 * A half's activity_regularizer is an ActivityReg node on its output.
 * Errors: rates outside [0, 1), time_major, Embedding sparse
 * and lora_rank, an activity regularizer of a Bidirectional half with
 * return_state,
 * initial_state on a stateful layer, and any field not known here.
 */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import_keras.h"
#include "rt_engine_impl.h"

/* a setting that must be absent, null, false or 0 */
static int k_reject_set(rt_keras_ctx *c, const char *key, const char *why)
{
    json_object *v = NULL;
    if (!c->cfg || !json_object_object_get_ex(c->cfg, key, &v) || !v)
        return 0;
    if (json_object_is_type(v, json_type_boolean) && !json_object_get_boolean(v))
        return 0;
    if ((json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)) &&
        json_object_get_double(v) == 0.0)
        return 0;
    return rt_keras_fail(c, RT_EUNIMPLEMENTED, "%s '%s' is not supported%s%s", c->class_name, key,
                         why ? ": " : "", why ? why : "");
}

static int k_reject_all(rt_keras_ctx *c, const char *const *keys, int n)
{
    for (int i = 0; i < n; i++) {
        int rc = k_reject_set(c, keys[i], NULL);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Fields of every layer that do not change what is trained: names, the
 * dtype policy, input shape hints; RNN: unroll/implementation (how Keras
 * computes the same values), seed (Keras' dropout seed: the masks here
 * are drawn from the training seed). */
static const char *const k_inert[] = {
    "name",
    "trainable",
    "dtype",
    "batch_input_shape",
    "batch_shape",
    "input_shape",
    "input_length",
    "unroll",
    "implementation",
    "seed",
    /* Keras 3: whether to use cuDNN's kernel (the same values) */
    "use_cudnn",
    /* Keras 1: the input dtype, an RNN's input_dim shape hint, and how it
     * computes (consume_less) */
    "input_dtype",
    "input_dim",
    "consume_less",
};

/* Keras 1 configs use other names for the same settings (LSTM(output_dim,
 * init, inner_init, inner_activation, W_regularizer, dropout_W, ...),
 * Embedding(init, W_regularizer, W_constraint)). k_keras1 gives a copy of
 * c->cfg under Keras 2 names (NULL when it is not Keras 1, or on no
 * memory: *rc). Its GRU is Keras 2's reset_after=false, and
 * forget_bias_init "one"/"zero" is unit_forget_bias. */
static json_object *k_keras1(rt_keras_ctx *c, int embedding, int gru, int *rc)
{
    json_object *v;
    *rc = 0;
    if (!c->cfg || !json_object_is_type(c->cfg, json_type_object))
        return NULL;
    const int k1 = embedding ? json_object_object_get_ex(c->cfg, "init", &v) ||
                                   json_object_object_get_ex(c->cfg, "W_regularizer", &v)
                             : json_object_object_get_ex(c->cfg, "output_dim", &v) &&
                                   !json_object_object_get_ex(c->cfg, "units", &v);
    if (!k1)
        return NULL;
    static const struct {
        const char *k1, *k2, *emb;
    } map[] = {
        {"output_dim", "units", "output_dim"},
        {"init", "kernel_initializer", "embeddings_initializer"},
        {"inner_init", "recurrent_initializer", NULL},
        {"inner_activation", "recurrent_activation", NULL},
        {"W_regularizer", "kernel_regularizer", "embeddings_regularizer"},
        {"U_regularizer", "recurrent_regularizer", NULL},
        {"b_regularizer", "bias_regularizer", NULL},
        {"W_constraint", "kernel_constraint", "embeddings_constraint"},
        {"U_constraint", "recurrent_constraint", NULL},
        {"b_constraint", "bias_constraint", NULL},
        {"dropout_W", "dropout", NULL},
        {"dropout_U", "recurrent_dropout", NULL},
    };
    json_object *t = json_object_new_object();
    if (!t) {
        *rc = RT_ENOMEM;
        return NULL;
    }
    json_object_object_foreach(c->cfg, key, val)
    {
        const char *to = key;
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
            if (!strcmp(key, map[i].k1))
                to = embedding && map[i].emb ? map[i].emb : map[i].k2;
        if (!strcmp(key, "forget_bias_init") && !embedding) {
            const char *fb =
                json_object_is_type(val, json_type_string) ? json_object_get_string(val) : "";
            if (strcmp(fb, "one") != 0 && strcmp(fb, "zero") != 0) {
                json_object_put(t);
                *rc = rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                    "%s forget_bias_init '%.20s' (one or zero only)", c->class_name,
                                    fb);
                return NULL;
            }
            json_object_object_add(t, "unit_forget_bias",
                                   json_object_new_boolean(!strcmp(fb, "one")));
            continue;
        }
        json_object_object_add(t, to, json_object_get(val));
    }
    if (gru && !json_object_object_get_ex(t, "reset_after", &v))
        json_object_object_add(t, "reset_after", json_object_new_boolean(0));
    /* Keras 1's initializers then (orthogonal's scale 1.1) */
    c->keras1 = 1;
    return t;
}

/* every key of c->cfg is in known[], more[] or k_inert[] or null (as the
 * importer's generic check: Keras 3.6's "quantization_config": null), else
 * an error naming it */
static int k_known_fields2(rt_keras_ctx *c, const char *const *known, int n,
                           const char *const *more, int n_more)
{
    c->fields_checked = 1; /* the importer's generic field check defers to this one */
    if (!c->cfg || !json_object_is_type(c->cfg, json_type_object))
        return 0;
    json_object_object_foreach(c->cfg, key, val)
    {
        int ok = val == NULL;
        for (int i = 0; i < n && !ok; i++)
            ok = !strcmp(key, known[i]);
        for (int i = 0; i < n_more && !ok; i++)
            ok = !strcmp(key, more[i]);
        for (size_t i = 0; i < sizeof k_inert / sizeof k_inert[0] && !ok; i++)
            ok = !strcmp(key, k_inert[i]);
        if (!ok)
            return rt_keras_fail(c, RT_EUNIMPLEMENTED, "%s setting '%.40s' is not supported",
                                 c->class_name, key);
    }
    return 0;
}

static int k_known_fields(rt_keras_ctx *c, const char *const *known, int n)
{
    return k_known_fields2(c, known, n, NULL, 0);
}

/* Keras 3 writes initializers as {"module": ..., "class_name": ...}; its
 * hard_sigmoid is relu6(x + 3) / 6, Keras 1/2's clip(0.2 x + 0.5, 0, 1) */
static int k_is_keras3(rt_keras_ctx *c)
{
    json_object *ki = NULL, *m = NULL;
    return c->cfg && json_object_object_get_ex(c->cfg, "kernel_initializer", &ki) && ki &&
           json_object_is_type(ki, json_type_object) && json_object_object_get_ex(ki, "module", &m);
}

static int k_rnn_act(rt_keras_ctx *c, const char *key, const char *def, const char **out)
{
    const char *s;
    int rc = rt_keras_cfg_str(c, key, def, &s);
    if (rc < 0)
        return rc;
    static const char *ok[] = {"tanh", "sigmoid", "relu", "linear", "hard_sigmoid", "elu"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (!strcmp(s, ok[i])) {
            *out = !strcmp(s, "hard_sigmoid") && k_is_keras3(c) ? "hard_sigmoid_v3" : s;
            return 0;
        }
    return rt_keras_fail(
        c, RT_EUNIMPLEMENTED,
        "%s %s '%.40s' is not supported (tanh, sigmoid, relu, linear, hard_sigmoid, elu)",
        c->class_name, key, s);
}

static int k_name(rt_keras_ctx *c, char *dst, const char *base, const char *sfx)
{
    int n = snprintf(dst, RT_KERAS_NAME, "%s/%s", base, sfx);
    if (n < 0 || n >= RT_KERAS_NAME)
        return rt_keras_fail(c, RT_EINVAL, "layer name is too long");
    return 0;
}

static int k_embedding(rt_keras_ctx *c)
{
    /* embeddings_regularizer/_constraint are attached by the importer
     * after the layer (import_keras.c, param_opts_of) */
    /* activity_regularizer: after the layer too (import_keras.c) */
    static const char *const unsupported[] = {"sparse", "lora_rank"};
    int mask_zero;
    static const char *const known[] = {"input_dim",
                                        "output_dim",
                                        "embeddings_initializer",
                                        "embeddings_regularizer",
                                        "activity_regularizer",
                                        "embeddings_constraint",
                                        "mask_zero",
                                        "sparse",
                                        "lora_rank",
                                        "dropout" /* Keras 1 */,
                                        "lora_alpha" /* used only with lora_rank */};
    int64_t V, D;
    int trainable, rc;
    rt_init init;
    double drop;
    if ((rc = k_known_fields(c, known, sizeof known / sizeof known[0])) < 0 ||
        (rc = rt_keras_cfg_bool(c, "mask_zero", 0, &mask_zero)) < 0 ||
        (rc = k_reject_all(c, unsupported, 2)) < 0 ||
        (rc = rt_keras_cfg_float(c, "dropout", 0.0, &drop)) < 0 ||
        (rc = rt_keras_cfg_int(c, "input_dim", 0, &V)) < 0 ||
        (rc = rt_keras_cfg_int(c, "output_dim", 0, &D)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "trainable", 1, &trainable)) < 0 ||
        (rc = rt_keras_cfg_init(c, "embeddings_initializer", RT_INIT_UNIFORM, &init)) < 0)
        return rc;
    if (V <= 0 || D <= 0 || V > RT__MAX_NUMEL || D > RT__MAX_NUMEL)
        return rt_keras_fail(c, RT_EINVAL, "Embedding needs input_dim > 0 and output_dim > 0");
    /* Keras 1's Embedding(dropout): whole rows of the matrix, the op's
     * "dropout" (op_rnn.c); a rate outside [0, 1) is refused, as the
     * recurrent layers' rates are */
    if (!(drop >= 0 && drop < 1))
        return rt_keras_fail(c, RT_EINVAL, "Embedding dropout %g is outside [0, 1)", drop);
    const rt_keras_tensor *x = &c->in[0];
    if (x->ndim + 1 >= RT_MAX_DIMS)
        return rt_keras_fail(c, RT_ESHAPE, "Embedding input has rank %d", x->ndim);
    char w[RT_KERAS_NAME];
    if ((rc = k_name(c, w, c->layer, "embeddings")) < 0)
        return rc;
    int64_t wd[2] = {V, D};
    if ((rc = rt_graph_add_param(c->g, w, 2, wd, init, trainable, NULL)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    const char *in[2] = {x->name, w};
    const rt_attr da = {.name = "dropout", .kind = RT_ATTR_FLOAT, .f = drop};
    if ((rc = rt_graph_add_node(c->g, c->layer, "Embedding", 2, in, drop > 0, &da)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    snprintf(c->out.name, sizeof c->out.name, "%s", c->layer);
    c->out.ndim = x->ndim + 1;
    memcpy(c->out.dims, x->dims, sizeof c->out.dims);
    c->out.dims[x->ndim] = D;
    c->mask_set = 1;
    c->out.mask[0] = 0;
    if (mask_zero) {
        /* Keras: the steps whose index is 0 */
        if (x->ndim != 1)
            return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                 "Embedding mask_zero needs (time,) indices, got rank %d", x->ndim);
        if ((rc = k_name(c, c->out.mask, c->layer, "mask")) < 0)
            return rc;
        const rt_attr mv = {.name = "mask_value", .kind = RT_ATTR_FLOAT, .f = 0.0};
        const char *min = x->name;
        if ((rc = rt_graph_add_node(c->g, c->out.mask, "SequenceMask", 1, &min, 1, &mv)) < 0)
            return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    }
    return 0;
}

/* Masking(mask_value): x with the steps whose values all equal mask_value
 * zeroed, and that step mask */
int rt_keras_masking(rt_keras_ctx *c)
{
    static const char *const known[] = {"mask_value"};
    double v;
    int rc;
    if ((rc = k_known_fields(c, known, 1)) < 0 ||
        (rc = rt_keras_cfg_float(c, "mask_value", 0.0, &v)) < 0)
        return rc;
    const rt_keras_tensor *x = &c->in[0];
    if (x->ndim != 2)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "Masking needs (time, features) inputs, got rank %d", x->ndim);
    c->out = *x;
    c->mask_set = 1;
    if ((rc = k_name(c, c->out.mask, c->layer, "mask")) < 0)
        return rc;
    const rt_attr mv = {.name = "mask_value", .kind = RT_ATTR_FLOAT, .f = v};
    const char *in = x->name;
    if ((rc = rt_graph_add_node(c->g, c->out.mask, "SequenceMask", 1, &in, 1, &mv)) < 0 ||
        (rc = rt_graph_add_node(c->g, c->layer, "Masking", 1, &in, 1, &mv)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    snprintf(c->out.name, sizeof c->out.name, "%s", c->layer);
    return 0;
}

int rt_keras_embedding(rt_keras_ctx *c)
{
    int rc;
    json_object *k1 = k_keras1(c, 1, 0, &rc);
    if (rc < 0 || !k1)
        return rc < 0 ? rc : k_embedding(c);
    json_object *orig = c->cfg;
    c->cfg = k1;
    rc = k_embedding(c);
    c->cfg = orig;
    json_object_put(k1);
    return rc;
}

/* Keras 3's recorded keras.ops NotEqual (keras/src/ops/numpy.py NotEqual:
 * not_equal(x1, x2), element-wise, a bool tensor), as Keras 3 records
 * Embedding(mask_zero=True)'s mask (`inputs != 0`) where a Functional model
 * passes it to a recurrent layer's `mask`: one (time,) value against a
 * number, the recorded call's constant argument. Its (batch, time) result,
 * 1 where x differs from the number, is the SequenceMask op's. NotEqual of
 * two tensors, or on values of another rank, is refused. */
int rt_keras_not_equal(rt_keras_ctx *c)
{
    int rc;
    if ((rc = k_known_fields(c, NULL, 0)) < 0)
        return rc;
    json_object *args = NULL, *num = NULL;
    if (c->call_kwargs && json_object_object_get_ex(c->call_kwargs, "args", &args) &&
        json_object_is_type(args, json_type_array))
        for (size_t i = 0; i < json_object_array_length(args); i++) {
            json_object *a = json_object_array_get_idx(args, i);
            if (json_object_is_type(a, json_type_int) || json_object_is_type(a, json_type_double))
                num = a;
        }
    return rt_keras_step_mask_op(c, num, "NotEqual");
}

/* A recorded not-equal of c->in[0] and the number num (NULL: not a
 * number) named what in errors: the step mask of rt_keras_not_equal. */
int rt_keras_step_mask_op(rt_keras_ctx *c, json_object *num, const char *what)
{
    int rc;
    if (c->n_in != 1 || !num)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "the recorded operation %s is supported between one tensor "
                             "and a number (a mask_zero Embedding's `inputs != 0`), not %d "
                             "tensors",
                             what, c->n_in);
    const rt_keras_tensor *x = &c->in[0];
    if (x->ndim != 1)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "the recorded operation %s is supported on (time,) values (a "
                             "step mask), got rank %d",
                             what, x->ndim);
    const rt_attr mv = {
        .name = "mask_value", .kind = RT_ATTR_FLOAT, .f = json_object_get_double(num)};
    const char *in = x->name;
    if ((rc = rt_graph_add_node(c->g, c->layer, "SequenceMask", 1, &in, 1, &mv)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    snprintf(c->out.name, sizeof c->out.name, "%s", c->layer);
    c->out.ndim = 1;
    c->out.dims[0] = x->dims[0];
    c->mask_set = 1;
    c->out.mask[0] = 0;
    return 0;
}

/* K_CUDNN: Keras 2's CuDNNLSTM/CuDNNGRU (an or-ed flag on K_LSTM/K_GRU) */
enum { K_SIMPLE, K_LSTM, K_GRU, K_CELL = 3, K_CUDNN = 4 };

/* rows [r0, r0 + nr) of the (R, U) value packed as the graph value name
 * (squeeze: one row, as (U)) */
static int k_rows(rt_keras_ctx *c, const char *packed, const char *name, int64_t r0, int64_t nr,
                  int64_t R, int64_t U, int squeeze, rt_keras_tensor *t)
{
    char row[RT_KERAS_NAME];
    int rc, n = snprintf(row, sizeof row, "%s:rows", name);
    if (n < 0 || n >= (int)sizeof row)
        return rt_keras_fail(c, RT_EINVAL, "layer name is too long");
    const int64_t pads[6] = {0, -r0, 0, 0, -(R - r0 - nr), 0};
    const rt_attr a = {.name = "pads", .kind = RT_ATTR_INTS, .n = 6, .ints = pads};
    const int64_t shape[1] = {U};
    const rt_attr sh = {.name = "shape", .kind = RT_ATTR_INTS, .n = 1, .ints = shape};
    const char *in = row;
    if ((rc = rt_graph_add_node(c->g, squeeze ? row : name, "Pad", 1, &packed, 1, &a)) < 0 ||
        (squeeze && (rc = rt_graph_add_node(c->g, name, "Reshape", 1, &in, 1, &sh)) < 0))
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = squeeze ? 1 : 2;
    t->dims[0] = squeeze ? U : nr;
    t->dims[1] = U;
    return 0;
}

/* One recurrent layer from c->cfg as node name, reading c->in[0] and
 * starting from the nst states st (Keras' initial_state: h, and LSTM's c;
 * nst 0: zeros). flip: run in the other direction than go_backwards says;
 * rev_out: a sequence output in reverse step order (Bidirectional's
 * backward half). Its output in *out; with return_state also its final
 * states (h, and LSTM's c) in states[], their count in *n_states. */
static int k_rnn_build_cfg(rt_keras_ctx *c, int cell, const char *name, int flip, int rev_out,
                           const rt_keras_tensor *st, int nst, rt_keras_tensor *out,
                           rt_keras_tensor *states, int *n_states)
{
    /* kernel/recurrent/bias initializers, regularizers and constraints are
     * attached after the layer (import_keras_cfg.c rt_keras_param_opts):
     * by the importer for a layer of its own, here for a Bidirectional
     * half (below, from the half's config); the activity regularizer
     * is an ActivityReg node on the layer's output (import_keras.c), and
     * on a half's output (below, as Keras' nested call adds it) */
    static const char *const unsupported[] = {"time_major"};
    const int cudnn = cell & K_CUDNN;
    cell &= K_CELL;
    const int half = strcmp(name, c->layer) != 0;
    const int n_unsupported = 1;
    const int first = c->g->n;
    static const char *const known[] = {"units",
                                        "activation",
                                        "use_bias",
                                        "kernel_initializer",
                                        "recurrent_initializer",
                                        "bias_initializer",
                                        "dropout",
                                        "recurrent_dropout",
                                        "return_sequences",
                                        "go_backwards",
                                        "kernel_regularizer",
                                        "recurrent_regularizer",
                                        "bias_regularizer",
                                        "activity_regularizer",
                                        "kernel_constraint",
                                        "recurrent_constraint",
                                        "bias_constraint",
                                        "return_state",
                                        "stateful",
                                        "time_major",
                                        "zero_output_for_mask"};
    static const char *const lstm_known[] = {"recurrent_activation", "unit_forget_bias"};
    static const char *const gru_known[] = {"recurrent_activation", "reset_after"};
    static const char *const ops[] = {"SimpleRNN", "LSTM", "GRU"};
    static const int gates[] = {1, 4, 3};
    int64_t units;
    double drop, rdrop;
    int use_bias, seq, back, trainable, ufb = 0, reset_after = 0, zero_out, stateful, ret_state, rc;
    const char *act, *ract = "sigmoid";
    rt_init kinit, rinit, binit;
    if ((rc = k_known_fields2(c, known, sizeof known / sizeof known[0],
                              cell == K_LSTM ? lstm_known : gru_known, cell == K_SIMPLE ? 0 : 2)) <
            0 ||
        (rc = k_reject_all(c, unsupported, n_unsupported)) < 0 ||
        (rc = rt_keras_cfg_int(c, "units", 0, &units)) < 0 ||
        (rc = rt_keras_cfg_float(c, "dropout", 0, &drop)) < 0 ||
        (rc = rt_keras_cfg_float(c, "recurrent_dropout", 0, &rdrop)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "use_bias", 1, &use_bias)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "return_sequences", 0, &seq)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "go_backwards", 0, &back)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "zero_output_for_mask", 0, &zero_out)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "stateful", 0, &stateful)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "return_state", 0, &ret_state)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "trainable", 1, &trainable)) < 0 ||
        (rc = k_rnn_act(c, "activation", "tanh", &act)) < 0 ||
        (cell != K_SIMPLE && (rc = k_rnn_act(c, "recurrent_activation", "sigmoid", &ract)) < 0) ||
        (cell == K_LSTM && (rc = rt_keras_cfg_bool(c, "unit_forget_bias", 1, &ufb)) < 0) ||
        (cell == K_GRU && (rc = rt_keras_cfg_bool(c, "reset_after", 1, &reset_after)) < 0) ||
        (rc = rt_keras_cfg_init(c, "kernel_initializer", RT_INIT_GLOROT_UNIFORM, &kinit)) < 0 ||
        (rc = rt_keras_cfg_init(c, "recurrent_initializer", RT_INIT_ORTHOGONAL, &rinit)) < 0 ||
        (rc = rt_keras_cfg_init(c, "bias_initializer", RT_INIT_ZEROS, &binit)) < 0)
        return rc;
    if (units <= 0 || units > (1 << 20))
        return rt_keras_fail(c, RT_EINVAL, "%s needs units in 1..2^20", c->class_name);
    if (!(drop >= 0 && drop < 1) || !(rdrop >= 0 && rdrop < 1))
        return rt_keras_fail(c, RT_EINVAL, "%s dropout %g / recurrent_dropout %g outside [0, 1)",
                             c->class_name, drop, rdrop);
    /* Keras: a stateful RNN needs to know its batch size */
    if (stateful && c->batch <= 0)
        return rt_keras_fail(c, RT_EINVAL,
                             "stateful %s needs a fixed batch size: give the first layer a "
                             "batch_input_shape (an Input a batch_shape) with one",
                             ops[cell]);
    const rt_keras_tensor *x = &c->in[0];
    if (x->ndim != 2)
        return rt_keras_fail(c, RT_ESHAPE, "%s needs (time, features) inputs, got rank %d",
                             c->class_name, x->ndim);
    /* Keras' initial_state: one state, LSTM's two (h, c), each (units,) */
    const int S = cell == K_LSTM ? 2 : 1;
    if (nst && nst != S)
        return rt_keras_fail(c, RT_EINVAL, "%s takes %d initial state%s (%s), got %d",
                             c->class_name, S, S > 1 ? "s" : "", S > 1 ? "h, c" : "h", nst);
    for (int k = 0; k < nst; k++)
        if (st[k].ndim != 1 || st[k].dims[0] != units)
            return rt_keras_fail(
                c, RT_ESHAPE, "%s initial state %d must be (units,) = (%lld,), got %s%lld%s",
                c->class_name, k, (long long)units, st[k].ndim == 1 ? "(" : "rank ",
                st[k].ndim == 1 ? (long long)st[k].dims[0] : (long long)st[k].ndim,
                st[k].ndim == 1 ? ",)" : "");
    if (nst && stateful)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "%s initial_state on a stateful layer is not supported; drop "
                             "stateful or the initial state",
                             c->class_name);
    const int64_t GU = gates[cell] * units;
    char kn[RT_KERAS_NAME], rn[RT_KERAS_NAME], bn[RT_KERAS_NAME];
    if ((rc = k_name(c, kn, name, "kernel")) < 0 ||
        (rc = k_name(c, rn, name, "recurrent_kernel")) < 0 ||
        (rc = k_name(c, bn, name, "bias")) < 0)
        return rc;
    int64_t kd[2] = {x->dims[1], GU}, rd[2] = {units, GU}, bd[2] = {2, GU};
    if ((rc = rt_graph_add_param(c->g, kn, 2, kd, kinit, trainable, NULL)) < 0 ||
        (rc = rt_graph_add_param(c->g, rn, 2, rd, rinit, trainable, NULL)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    if (use_bias) {
        /* Keras' unit_forget_bias: the forget gate's bias starts at 1 */
        float *ones = NULL;
        if (ufb) {
            if (binit != RT_INIT_ZEROS)
                return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                     "unit_forget_bias with a bias_initializer other than zeros");
            ones = calloc((size_t)GU, sizeof(float));
            if (!ones)
                return RT_ENOMEM;
            for (int64_t j = units; j < 2 * units; j++)
                ones[j] = 1.0f;
        }
        /* CuDNN's (2*G*units,) bias, as Keras keeps it: the input biases,
         * then the recurrent ones (its forget gate's 1 in the second), fed
         * to the op as (2, G*units): LSTM's two rows added, GRU's
         * reset_after rows (cudnn_recurrent.py) */
        const int64_t GU2 = 2 * GU;
        if (cudnn && ones) {
            float *two = calloc((size_t)GU2, sizeof(float));
            if (!two) {
                free(ones);
                return RT_ENOMEM;
            }
            memcpy(two + GU, ones, sizeof(float) * (size_t)GU);
            free(ones);
            ones = two;
        }
        rc = cudnn         ? rt_graph_add_param(c->g, bn, 1, &GU2, binit, trainable, ones)
             : reset_after ? rt_graph_add_param(c->g, bn, 2, bd, binit, trainable, NULL)
                           : rt_graph_add_param(c->g, bn, 1, &GU, binit, trainable, ones);
        free(ones);
        if (rc < 0)
            return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    }
    /* a half's weight settings are in its own config, not the wrapper's */
    if (half && (rc = rt_keras_param_opts(c, first)) < 0)
        return rc;
    /* Bidirectional forces zero_output_for_mask to return_sequences */
    if (half)
        zero_out = seq;
    const int masked = x->mask[0] != 0;
    rt_attr at[13] = {
        {.name = "initial_state", .kind = RT_ATTR_INT, .i = nst > 0},
        {.name = "return_state", .kind = RT_ATTR_INT, .i = ret_state},
        {.name = "stateful", .kind = RT_ATTR_INT, .i = stateful ? c->batch : 0},
        {.name = "masked", .kind = RT_ATTR_INT, .i = masked},
        {.name = "zero_output_for_mask", .kind = RT_ATTR_INT, .i = zero_out},
        {.name = "dropout", .kind = RT_ATTR_FLOAT, .f = drop},
        {.name = "recurrent_dropout", .kind = RT_ATTR_FLOAT, .f = rdrop},
        {.name = "activation", .kind = RT_ATTR_STR, .s = act},
        {.name = "return_sequences", .kind = RT_ATTR_INT, .i = seq},
        {.name = "go_backwards", .kind = RT_ATTR_INT, .i = back ^ flip},
        {.name = "reverse_output", .kind = RT_ATTR_INT, .i = rev_out && seq},
        {.name = "recurrent_activation", .kind = RT_ATTR_STR, .s = ract},
        {.name = "reset_after", .kind = RT_ATTR_INT, .i = reset_after},
    };
    const int nat = cell == K_GRU ? 13 : cell == K_LSTM ? 12 : 11;
    /* x, kernel, recurrent kernel, [bias], [initial states], [mask] */
    const char *in[7] = {x->name, kn, rn};
    int n_in = 3;
    char b2[RT_KERAS_NAME];
    if (use_bias && cudnn) {
        const char *bin = bn;
        const rt_attr sh = {.name = "shape", .kind = RT_ATTR_INTS, .n = 2, .ints = bd};
        if ((rc = k_name(c, b2, name, "bias:2")) < 0)
            return rc;
        if ((rc = rt_graph_add_node(c->g, b2, "Reshape", 1, &bin, 1, &sh)) < 0)
            return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
        in[n_in++] = b2;
    } else if (use_bias) {
        in[n_in++] = bn;
    }
    for (int k = 0; k < nst; k++)
        in[n_in++] = st[k].name;
    if (masked)
        in[n_in++] = x->mask;
    /* return_state: one (R + S, units) value, R the output's rows, sliced
     * apart into the output and the states */
    char packed[RT_KERAS_NAME];
    if (ret_state && (rc = k_name(c, packed, name, "all")) < 0)
        return rc;
    if ((rc = rt_graph_add_node(c->g, ret_state ? packed : name, ops[cell], n_in, in, nat, at)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    *n_states = 0;
    const int64_t R = seq ? x->dims[0] : 1;
    if (ret_state) {
        static const char *const sn[2] = {"state_h", "state_c"};
        char hn[RT_KERAS_NAME];
        if ((rc = k_rows(c, packed, name, 0, R, R + S, units, !seq, out)) < 0)
            return rc;
        for (int k = 0; k < S; k++)
            if ((rc = k_name(c, hn, name, sn[k])) < 0 ||
                (rc = k_rows(c, packed, hn, R + k, 1, R + S, units, 1, &states[k])) < 0)
                return rc;
        *n_states = S;
    }
    snprintf(out->name, sizeof out->name, "%s", name);
    /* a sequence output keeps the step mask (Keras' compute_mask); the
     * states have none */
    if (seq)
        snprintf(out->mask, sizeof out->mask, "%s", x->mask);
    else
        out->mask[0] = 0;
    out->ndim = seq ? 2 : 1;
    out->dims[0] = seq ? x->dims[0] : units;
    out->dims[1] = units;
    /* a half's activity_regularizer: Keras' nested call adds it on the
     * half's output (the backward half's in reverse step order, the same
     * sum); with return_state Keras' covers the states too: refused */
    json_object *ar = NULL;
    if (half && json_object_object_get_ex(c->cfg, "activity_regularizer", &ar) && ar) {
        if (ret_state)
            return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                 "%s activity_regularizer with return_state inside Bidirectional "
                                 "is not supported",
                                 c->class_name);
        rt_keras_ctx hc = *c;
        hc.layer = name;
        hc.out = *out;
        if ((rc = rt_keras_activity_reg(&hc)) < 0)
            return rc;
        snprintf(out->name, sizeof out->name, "%s", hc.out.name);
    }
    return 0;
}

/* Keras 2's CuDNNLSTM and CuDNNGRU (keras/layers/cudnn_recurrent.py):
 * cuDNN's LSTM and GRU, which are Keras' with tanh and sigmoid, no dropout,
 * no mask ("Masking is not supported for CuDNN RNNs"), and two biases: the
 * GRU's reset gate applied after the recurrent matmul and its bias
 * (Keras' reset_after = True, which Keras made to load CuDNNGRU weights).
 * k_cudnn_cfg refuses the LSTM/GRU fields they do not have, and gives a
 * copy of the config with those activations set (NULL: *rc). */
static json_object *k_cudnn_cfg(rt_keras_ctx *c, int cell, int *rc)
{
    /* the fields of Keras' LSTM/GRU that cuDNN's layers do not have (its
     * from_config would refuse them as unknown keywords); other unknown
     * fields are refused by k_rnn_build_cfg */
    static const char *const not_cudnn[] = {"activation", "recurrent_activation", "use_bias",
                                            "dropout",    "recurrent_dropout",    "reset_after",
                                            "time_major", "zero_output_for_mask"};
    json_object *v;
    *rc = 0;
    for (size_t i = 0; i < sizeof not_cudnn / sizeof not_cudnn[0]; i++)
        if (json_object_object_get_ex(c->cfg, not_cudnn[i], &v)) {
            *rc = rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                "%s has no setting '%s' (cuDNN's layer: tanh, sigmoid, two "
                                "biases, no dropout)",
                                c->class_name, not_cudnn[i]);
            return NULL;
        }
    if ((cell & K_CELL) == K_GRU && json_object_object_get_ex(c->cfg, "unit_forget_bias", &v)) {
        *rc = rt_keras_fail(c, RT_EUNIMPLEMENTED, "%s has no setting 'unit_forget_bias'",
                            c->class_name);
        return NULL;
    }
    if (c->in[0].mask[0]) {
        *rc = rt_keras_fail(c, RT_EUNIMPLEMENTED,
                            "%s takes no mask (Keras: masking is not supported for CuDNN "
                            "RNNs); use LSTM or GRU",
                            c->class_name);
        return NULL;
    }
    json_object *t = json_object_new_object();
    if (!t) {
        *rc = rt_keras_fail(c, RT_ENOMEM, "out of memory");
        return NULL;
    }
    json_object_object_foreach(c->cfg, key, val)
    {
        json_object_object_add(t, key, json_object_get(val));
    }
    json_object_object_add(t, "activation", json_object_new_string("tanh"));
    json_object_object_add(t, "recurrent_activation", json_object_new_string("sigmoid"));
    if ((cell & K_CELL) == K_GRU)
        json_object_object_add(t, "reset_after", json_object_new_boolean(1));
    return t;
}

/* k_rnn_build_cfg on c->cfg, or on its Keras 2 names when it is Keras 1,
 * or on a CuDNN layer's as the LSTM/GRU it is */
static int k_rnn_build(rt_keras_ctx *c, int cell, const char *name, int flip, int rev_out,
                       const rt_keras_tensor *st, int nst, rt_keras_tensor *out,
                       rt_keras_tensor *states, int *n_states)
{
    int rc;
    json_object *k1 =
        cell & K_CUDNN ? k_cudnn_cfg(c, cell, &rc) : k_keras1(c, 0, cell == K_GRU, &rc);
    if (rc < 0 || !k1)
        return rc < 0
                   ? rc
                   : k_rnn_build_cfg(c, cell, name, flip, rev_out, st, nst, out, states, n_states);
    json_object *orig = c->cfg;
    c->cfg = k1;
    rc = k_rnn_build_cfg(c, cell, name, flip, rev_out, st, nst, out, states, n_states);
    c->cfg = orig;
    json_object_put(k1);
    return rc;
}

/* A recurrent layer: the sequence, then the initial states (Keras 2 lists
 * them after it, Keras 3's initial_state argument); with return_state its
 * final states are the outputs after the first */
static int k_rnn_layer(rt_keras_ctx *c, int cell)
{
    c->mask_set = 1;
    return k_rnn_build(c, cell, c->layer, 0, 0, c->in + 1, c->n_in - 1, &c->out, c->more,
                       &c->n_more);
}

int rt_keras_simplernn(rt_keras_ctx *c) { return k_rnn_layer(c, K_SIMPLE); }
int rt_keras_lstm(rt_keras_ctx *c) { return k_rnn_layer(c, K_LSTM); }
int rt_keras_gru(rt_keras_ctx *c) { return k_rnn_layer(c, K_GRU); }
int rt_keras_cudnn_lstm(rt_keras_ctx *c) { return k_rnn_layer(c, K_LSTM | K_CUDNN); }
int rt_keras_cudnn_gru(rt_keras_ctx *c) { return k_rnn_layer(c, K_GRU | K_CUDNN); }

/* A wrapped recurrent layer ({"class_name", "config"}): its cell kind
 * (K_*), config and name; -1 with the error set otherwise. */
static int k_inner(rt_keras_ctx *c, json_object *o, const char *what, json_object **cfg,
                   const char **cls, const char **name)
{
    json_object *icls = NULL, *iname = NULL;
    if (!o || !json_object_object_get_ex(o, "class_name", &icls) ||
        !json_object_is_type(icls, json_type_string) ||
        !json_object_object_get_ex(o, "config", cfg) ||
        !json_object_is_type(*cfg, json_type_object))
        return rt_keras_fail(c, RT_EINVAL, "Bidirectional '%s' needs class_name and config", what);
    *cls = json_object_get_string(icls);
    *name = json_object_object_get_ex(*cfg, "name", &iname) &&
                    json_object_is_type(iname, json_type_string)
                ? json_object_get_string(iname)
                : *cls;
    int cell = !strcmp(*cls, "SimpleRNN")   ? K_SIMPLE
               : !strcmp(*cls, "LSTM")      ? K_LSTM
               : !strcmp(*cls, "GRU")       ? K_GRU
               : !strcmp(*cls, "CuDNNLSTM") ? K_LSTM | K_CUDNN
               : !strcmp(*cls, "CuDNNGRU")  ? K_GRU | K_CUDNN
                                            : -1;
    if (cell < 0)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "Bidirectional over '%.40s' (SimpleRNN, LSTM, GRU, CuDNNLSTM or "
                             "CuDNNGRU only)",
                             *cls);
    return cell;
}

/* Bidirectional(layer, merge_mode, backward_layer?): the layer, and a
 * second layer running the other way, its sequence output reversed back
 * (as Keras does); merged by concat (last axis), sum, mul or ave. Keras 2
 * writes only "layer" (the backward half is a copy with go_backwards
 * flipped); Keras 3 writes both halves, named forward_<x> and backward_<x>
 * already. Parameters: "<layer>/forward_<x>/...", "<layer>/backward_<x>/...". */
int rt_keras_bidirectional(rt_keras_ctx *c)
{
    json_object *inner = NULL, *back = NULL, *icfg = NULL, *bcfg = NULL;
    static const char *const known[] = {"layer", "merge_mode", "backward_layer"};
    const char *cls, *name, *bcls, *bname;
    int rc;
    if ((rc = k_known_fields(c, known, 3)) < 0)
        return rc;
    c->mask_set = 1;
    json_object_object_get_ex(c->cfg, "layer", &inner);
    const int cell = k_inner(c, inner, "layer", &icfg, &cls, &name);
    if (cell < 0)
        return cell;
    int bcell = cell;
    if (json_object_object_get_ex(c->cfg, "backward_layer", &back) && back) {
        if ((bcell = k_inner(c, back, "backward_layer", &bcfg, &bcls, &bname)) < 0)
            return bcell;
        if (bcell != cell)
            return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                 "Bidirectional halves of different kinds (%.20s, %.20s)", cls,
                                 bcls);
    }
    json_object *mm = NULL;
    if (json_object_object_get_ex(c->cfg, "merge_mode", &mm) && !mm)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "Bidirectional merge_mode null (two outputs) is not supported");
    const char *mode;
    if ((rc = rt_keras_cfg_str(c, "merge_mode", "concat", &mode)) < 0)
        return rc;
    const char *op = !strcmp(mode, "concat") ? "Concat"
                     : !strcmp(mode, "sum")  ? "Add"
                     : !strcmp(mode, "mul")  ? "Mul"
                     : !strcmp(mode, "ave")  ? "Add"
                                             : NULL;
    if (!op)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "Bidirectional merge_mode '%.20s' (concat, sum, mul or ave)", mode);
    /* the halves' names: Keras 3's own, or forward_/backward_ + the layer's */
    const char *base = !strncmp(name, "forward_", 8) ? name + 8 : name;
    char fw[RT_KERAS_NAME], bw[RT_KERAS_NAME];
    int n1 = snprintf(fw, sizeof fw, "%s/forward_%s", c->layer, base);
    int n2 = bcfg && !strncmp(bname, "backward_", 9)
                 ? snprintf(bw, sizeof bw, "%s/%s", c->layer, bname)
                 : snprintf(bw, sizeof bw, "%s/backward_%s", c->layer, base);
    if (n1 < 0 || n1 >= RT_KERAS_NAME || n2 < 0 || n2 >= RT_KERAS_NAME || !strcmp(fw, bw))
        return rt_keras_fail(c, RT_EINVAL, "Bidirectional halves need distinct, short names");
    /* the halves' settings, errors still naming the Bidirectional */
    rt_keras_ctx ic = *c;
    ic.cfg = icfg;
    ic.class_name = cls;
    rt_keras_tensor fo, bo, fs[2], bs[2];
    /* initial_state: the forward half's states, then the backward half's
     * (Keras' Bidirectional splits the list in two) */
    const int nst = c->n_in - 1;
    if (nst % 2)
        return rt_keras_fail(c, RT_EINVAL,
                             "Bidirectional takes the initial states of both halves (an even "
                             "count), got %d",
                             nst);
    int nfs = 0, nbs = 0;
    if ((rc = k_rnn_build(&ic, cell, fw, 0, 0, c->in + 1, nst / 2, &fo, fs, &nfs)) < 0)
        return rc;
    if (bcfg) {
        /* Keras runs the given backward layer as configured: its own
         * settings, not the forward half's defaults */
        ic.cfg = bcfg;
        ic.n_inits = c->n_inits;
        rc = k_rnn_build(&ic, bcell, bw, 0, 1, c->in + 1 + nst / 2, nst / 2, &bo, bs, &nbs);
    } else {
        rc = k_rnn_build(&ic, cell, bw, 1, 1, c->in + 1 + nst / 2, nst / 2, &bo, bs, &nbs);
    }
    if (rc < 0)
        return rc;
    if (nfs != nbs)
        return rt_keras_fail(c, RT_EINVAL,
                             "Bidirectional halves differ in return_state; give both the same");
    /* return_state: the merged output, then the forward half's states and
     * the backward half's, as Keras' Bidirectional returns them */
    c->n_more = nfs + nbs;
    for (int k = 0; k < nfs; k++) {
        c->more[k] = fs[k];
        c->more[nfs + k] = bs[k];
    }
    if (fo.ndim != bo.ndim || memcmp(fo.dims, bo.dims, sizeof(int64_t) * (size_t)fo.ndim))
        return rt_keras_fail(c, RT_ESHAPE, "Bidirectional halves have different output shapes");
    c->out = fo;
    const char *in[2] = {fo.name, bo.name};
    const char *merged = c->layer;
    char sum[RT_KERAS_NAME];
    const int ave = !strcmp(mode, "ave");
    if (ave && (rc = k_name(c, sum, c->layer, "sum")) < 0)
        return rc;
    rt_attr axis = {.name = "axis", .kind = RT_ATTR_INT, .i = fo.ndim};
    const int concat = !strcmp(op, "Concat");
    if ((rc = rt_graph_add_node(c->g, ave ? sum : merged, op, 2, in, concat, &axis)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    if (ave) {
        char half[RT_KERAS_NAME];
        if ((rc = k_name(c, half, c->layer, "half")) < 0)
            return rc;
        const int64_t one = 1;
        const float h = 0.5f;
        if ((rc = rt_graph_add_param(c->g, half, 1, &one, RT_INIT_ZEROS, 0, &h)) < 0)
            return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
        const char *min[2] = {sum, half};
        if ((rc = rt_graph_add_node(c->g, merged, "Mul", 2, min, 0, NULL)) < 0)
            return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    }
    snprintf(c->out.name, sizeof c->out.name, "%s", merged);
    if (concat)
        c->out.dims[c->out.ndim - 1] *= 2;
    return 0;
}
