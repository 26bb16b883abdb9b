/*
 * import_keras.h - Keras model JSON (model.to_json()) -> rt_graph.
 *
 * Sequential and Functional ("Functional"/"Model") models, Keras 2 JSON
 * (batch_input_shape, nested inbound_nodes lists) and Keras 3 JSON
 * (batch_shape, inbound_nodes with args/keras_history) alike.
 *
 *     rt_graph *g; char err[256];
 *     if (rt_keras_import(json, strlen(json), &g, err, sizeof err) < 0)
 *         ... err says which layer and why ...
 *     rt_plan_compile(g, &cfg, ...);
 *     rt_graph_destroy(g);
 *
 * Naming: the input is named after the InputLayer ("input" when the first
 * layer carries the shape itself); a layer's node has the layer's name; its
 * parameters are "<layer>/kernel", "<layer>/bias"; a fused activation is a
 * separate node "<layer>/<activation>".
 *
 * Adding a layer = one rt_keras_layer_fn in import_keras.c plus one entry in
 * its layer table. A layer function reads c->cfg with the rt_keras_cfg_*
 * helpers, adds params and nodes to c->g, and sets c->out (tensor name and
 * per-sample shape) so later layers can infer their parameter shapes.
 */
#ifndef RTRAIN_IMPORT_KERAS_H
#define RTRAIN_IMPORT_KERAS_H

#include <stddef.h>
#include <stdint.h>

#include "rt_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bounds on what a model's JSON may cost to parse (docs/security.md):
 * nested at most RT_KERAS_MAX_DEPTH arrays and objects deep (RT_EJSON
 * beyond), and json-c's tree of it at most RT_KERAS_PARSE_BUDGET(len)
 * bytes as estimated before parsing (RT_ETOOBIG beyond). json-c 0.16
 * spends ~790 bytes on an object, ~150 on an array, 30-70 on a scalar:
 * real models take 14-18 x their size, "{}," repeated 264 x. */
#define RT_KERAS_MAX_DEPTH 64
#define RT_KERAS_PARSE_BUDGET(len) ((uint64_t)(len)*32 + ((uint64_t)16 << 20))
#define RT_KERAS_PARSE_MAX ((uint64_t)512 << 20)

/* Parse json (len bytes, need not be NUL-terminated) into a new graph owned
 * by the caller (*out, rt_graph_destroy). Returns 0 or RT_EJSON (not JSON /
 * not a model), RT_EUNKNOWN_LAYER ("unknown Keras layer 'Foo' (layer
 * 'foo_1')"), RT_EINVAL/RT_ESHAPE (an unsupported setting or shape), with a
 * message (< errlen) in err. */
int rt_keras_import(const char *json, size_t len, rt_graph **out, char *err, size_t errlen);

/* How an import treated one config field of one layer: read by the layer
 * (USED), known not to change training (INERT, docs/keras-fields.md), or
 * not supported (the import fails naming it). */
typedef enum rt_keras_field_kind {
    RT_KERAS_FIELD_USED = 0,
    RT_KERAS_FIELD_INERT,
    RT_KERAS_FIELD_UNSUPPORTED,
} rt_keras_field_kind;
typedef void (*rt_keras_field_cb)(void *ud, const char *class_name, const char *key,
                                  rt_keras_field_kind kind);

/* rt_keras_import, telling cb (if not NULL) about every config field of
 * every layer placed. */
int rt_keras_import_ex(const char *json, size_t len, rt_graph **out, char *err, size_t errlen,
                       rt_keras_field_cb cb, void *ud);

/* rt_keras_import_ex with the per-sample dims of every model input bound:
 * dims[i] fills a null (variable) dim i and must equal a fixed one (0 =
 * keep the model's). A null dim left unbound is RT_EINVAL naming the
 * input. dims may be NULL (n_dims 0). */
int rt_keras_import_dims(const char *json, size_t len, const int64_t *dims, int n_dims,
                         rt_graph **out, char *err, size_t errlen, rt_keras_field_cb cb, void *ud);

/* rt_keras_import_dims; with no dims (n_dims 0) and values > 0, an input
 * with exactly one null dim binds it to values / (the product of its
 * fixed dims), which must divide values (RT_EINVAL naming the input
 * otherwise): the data's per-sample value count, e.g. a CSV row's. */
int rt_keras_import_bind(const char *json, size_t len, const int64_t *dims, int n_dims,
                         int64_t values, rt_graph **out, char *err, size_t errlen,
                         rt_keras_field_cb cb, void *ud);

/* Entry i of the list of inert fields (NULL past the end); *when is NULL
 * (any value) or "true"/"false" (only that value). */
const char *rt_keras_inert_field(int i, const char **when);

/* The training settings saved with a model: Keras 3's "compile_config"
 * (beside "config" in model.to_json()), Keras 2's "training_config" (HDF5
 * attributes, TF.js modelTopology). Strings are "" and numbers 0 when the
 * model does not say. */
typedef struct rt_keras_compile {
    char loss[64];
    int from_logits;
    char optimizer[32];
    double lr, beta1, beta2, eps, momentum, rho, weight_decay;
    int nesterov;
    int n_metrics;
    char metrics[8][48];
    /* Ftrl's numbers as saved (has_ftrl[i]: number i was there): power,
     * initial accumulator, l1, l2, l2 shrinkage, beta */
    double ftrl[6];
    int has_ftrl[6];
} rt_keras_compile;

/* Fill out from json. Returns 1 when the model carries training settings,
 * 0 when it has none, or RT_EJSON. Metric names are copied as written
 * ("accuracy", "mae", ...); a loss object gives its class ("CategoricalCrossentropy")
 * and from_logits. */
int rt_keras_compile_config(const char *json, size_t len, rt_keras_compile *out);

/* A Functional model with several outputs: cfg's heads from the saved
 * compile settings (loss and loss_weights as a list in output_layers'
 * order or a dict by output name; a single loss applies to every output,
 * cfg->loss unless saved), labels f32; each output's metrics from the
 * saved "metrics" (one list for every output, or a dict by output name /
 * a list of lists; none: none). Returns the number of outputs, 0
 * for a model with one (cfg untouched), or a negative error. */
int rt_keras_heads(const char *json, size_t len, rt_train_config *cfg, char *err, size_t errlen);

/* ------------------------------------------------- for layer functions */
struct json_object;

#define RT_KERAS_NAME 128
#define RT_KERAS_MAX_IN 8
#define RT_KERAS_MAX_USED 64
#define RT_KERAS_KEY_MAX 64
#define RT_KERAS_MAX_OUT 5 /* Bidirectional(LSTM, return_state): output, 4 states */

typedef struct rt_keras_tensor {
    char name[RT_KERAS_NAME]; /* graph value name */
    int ndim;                 /* per-sample shape (batch dropped) */
    int64_t dims[RT_MAX_DIMS];
    int poisoned;             /* made by a layer that failed: shape unknown */
    char mask[RT_KERAS_NAME]; /* its Keras step mask (B,T) as a graph value
                                 * (Masking, Embedding mask_zero), or "" */
    /* How the engine holds it; dims are always the engine's.
     * RT_KERAS_PLAIN  in Keras' order;
     * RT_KERAS_CF     a channels_first value, Keras (C, S1..Sk), held
     *                 channels-last (S1..Sk, C), the engine's layout;
     * RT_KERAS_FLAT   the flatten of such a value: Keras' order is
     *                 (C, S1..Sk) flattened, the engine holds (S1..Sk, C)
     *                 flattened; cf[0..ncf) are (C, S1..Sk).
     * Layer functions see the engine's channels-last dims; run_layer
     * converts, or folds the order into a following weight. */
    int layout;
    int ncf;
    int64_t cf[RT_MAX_DIMS];
} rt_keras_tensor;

enum { RT_KERAS_PLAIN = 0, RT_KERAS_CF, RT_KERAS_FLAT };

typedef struct rt_keras_ctx {
    rt_graph *g;
    struct json_object *cfg; /* the layer's "config" object */
    const char *layer;       /* layer name */
    const char *class_name;
    int n_in;
    rt_keras_tensor in[RT_KERAS_MAX_IN];
    /* the keyword each input was passed as (MultiHeadAttention's "value",
     * "key", "attention_mask"), NULL for a positional one; and the call's
     * keyword arguments (NULL: none read) */
    const char *in_kw[RT_KERAS_MAX_IN];
    struct json_object *call_kwargs;
    rt_keras_tensor out; /* set by the layer function */
    /* a layer with several outputs (a recurrent layer's return_state):
     * outputs 1..n_more are more[0..n_more) (Keras' tensor index) */
    int n_more;
    rt_keras_tensor more[RT_KERAS_MAX_OUT - 1];
    char *err;
    size_t errlen;
    /* config keys the layer read through rt_keras_cfg_*: after the layer
     * function, any other key must be on the list of fields that do not
     * change training (docs/keras-fields.md), or the import fails. The
     * names are copies: a layer may read a config it built and freed (a
     * Keras 1 or CuDNN layer's translation), and no Keras field name is
     * RT_KERAS_KEY_MAX long (a longer key is never marked: refused). */
    char used[RT_KERAS_MAX_USED][RT_KERAS_KEY_MAX];
    int n_used;
    int keras1; /* the config was translated from Keras 1 */
    int keras3; /* a Keras 3 layer (its JSON names a module) */
    /* the model's fixed batch size (the first batch_input_shape /
     * batch_shape with one), 0 when none: a stateful RNN's */
    int64_t batch;
    /* set by a layer function that classified every config field itself
     * (and failed on the unsupported ones): the generic check is skipped */
    int fields_checked;
    /* set by a layer function that made or consumed a step mask: it set
     * out.mask itself (else run_layer passes the input's mask through
     * the layers Keras passes it through, and refuses the others) */
    int mask_set;
    /* parameterised initializers read by rt_keras_cfg_init, by key, for
     * weights whose settings are not in c->cfg after the layer function
     * (a wrapper's inner layer) */
    struct {
        const char *key;
        rt_param_opts o;
    } inits[8];
    int n_inits;
} rt_keras_ctx;

typedef int (*rt_keras_layer_fn)(rt_keras_ctx *c);

/* Set c->err to "<message> (layer '<name>')" and return code. */
int rt_keras_fail(rt_keras_ctx *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The raw value of key (NULL when absent or null), marked as read: for
 * settings the typed readers below do not cover. */
struct json_object *rt_keras_cfg_get(rt_keras_ctx *c, const char *key);
/* Config readers. Missing keys give def; a wrong JSON type is an error. */
int rt_keras_cfg_int(rt_keras_ctx *c, const char *key, int64_t def, int64_t *out);
int rt_keras_cfg_float(rt_keras_ctx *c, const char *key, double def, double *out);
/* key is a setting Keras itself writes and never uses for this layer
 * (SeparableConv2D's kernel_* from its Conv base): read, nothing applied */
void rt_keras_cfg_unused(rt_keras_ctx *c, const char *key);
int rt_keras_cfg_bool(rt_keras_ctx *c, const char *key, int def, int *out);
/* String value, or def; the pointer is owned by the JSON document. */
int rt_keras_cfg_str(rt_keras_ctx *c, const char *key, const char *def, const char **out);
/* Integer list (e.g. "kernel_size": [3, 3]); returns the count or an error. */
int rt_keras_cfg_ints(rt_keras_ctx *c, const char *key, int64_t *out, int max);
/* An initializer setting (string or {"class_name": ...}) as rt_init; the
 * parameterised ones (VarianceScaling, RandomNormal, ...) come back as
 * RT_INIT_DEFAULT here and are attached to the parameter after the layer
 * function by its name: a parameter "<layer>/<w>" takes "<w>_initializer",
 * "<w>_regularizer" and "<w>_constraint" ("depthwise_kernel" also
 * "depthwise_initializer", and so on), so layer functions need not read
 * them. def is what an absent setting means: RT_INIT_ORTHOGONAL and
 * RT_INIT_UNIFORM stand for Keras' "orthogonal" (gain 1, Keras 1's 1.1) and
 * "uniform" ([-0.05, 0.05]) and are attached the same way. */
int rt_keras_cfg_init(rt_keras_ctx *c, const char *key, rt_init def, rt_init *out);
/* The settings object of an initializer, regularizer, loss, ... (a name,
 * or {"class_name": ..., "config": ...}): its name, and its config in
 * *ocfg (NULL: none). */
const char *rt_keras_obj_name(struct json_object *v, struct json_object **ocfg);
/* A regularizer setting (L1, L2, L1L2) into o's l1 and l2. */
int rt_keras_cfg_reg(rt_keras_ctx *c, const char *key, struct json_object *v, rt_param_opts *o);
/* After a layer function: the initializers, regularizers and constraints
 * of the parameters it added (graph entries first..). */
int rt_keras_param_opts(rt_keras_ctx *c, int first);
/* Keras' "data_format": only channels_last (NHWC, the engine's layout);
 * RT_EUNIMPLEMENTED naming it otherwise. */
int rt_keras_channels_last(rt_keras_ctx *c);
/* The "axis" of a layer that works over the last axis only (absent: -1),
 * at most max values: RT_EUNIMPLEMENTED naming the layer (what) for any
 * other axis. */
int rt_keras_last_axis(rt_keras_ctx *c, const char *what, int max);
/* Output size of one spatial dim in *out: the engine's rule
 * (rt__window_out); RT_ESHAPE when the dilated window does not fit. */
int rt_keras_window_out(rt_keras_ctx *c, int64_t in, int64_t k, int64_t s, int64_t d, int same,
                        int64_t *out);
/* "<layer>/<suffix>" (suffix NULL: the layer's name) into dst
 * (RT_KERAS_NAME), or a failure when too long. */
int rt_keras_name(rt_keras_ctx *c, char *dst, const char *suffix);
/* import_keras_layers.c: append the node for a Keras activation name
 * ("linear" adds nothing) after c->out and update c->out. */
int rt_keras_add_activation(rt_keras_ctx *c, const char *activation);
/* c->cfg's activity_regularizer as an ActivityReg node "<c->layer>/activity_reg"
 * after c->out (none: nothing added) */
int rt_keras_activity_reg(rt_keras_ctx *c);

/* Layer functions of import_keras_rnn.c: Embedding, SimpleRNN, LSTM, GRU,
 * Bidirectional */
int rt_keras_embedding(rt_keras_ctx *c);
int rt_keras_simplernn(rt_keras_ctx *c);
int rt_keras_lstm(rt_keras_ctx *c);
int rt_keras_masking(rt_keras_ctx *c);
int rt_keras_not_equal(rt_keras_ctx *c);
/* NotEqual's step mask: c->in[0] (time,) against the number num */
int rt_keras_step_mask_op(rt_keras_ctx *c, struct json_object *num, const char *what);
/* import_keras_tfop.c: tf.keras' TFOpLambda (math.not_equal as a step
 * mask, element-wise arithmetic) */
int rt_keras_tfop_lambda(rt_keras_ctx *c);
/* TF 2.2-2.3's TensorFlowOpLayer: element-wise ops of node_def */
int rt_keras_tf_op_layer(rt_keras_ctx *c);
int rt_keras_gru(rt_keras_ctx *c);
int rt_keras_cudnn_lstm(rt_keras_ctx *c);
int rt_keras_cudnn_gru(rt_keras_ctx *c);
int rt_keras_bidirectional(rt_keras_ctx *c);

/* import_keras_layers.c: the wider layer set. rt_keras_layers_find gives
 * the function and input count (0: any) of a layer class it knows (returns
 * 1, else 0). rt_keras_layers_activation adds the node for an activation
 * name beyond relu/sigmoid/tanh/softmax (elu, selu, gelu, swish/silu,
 * softplus, softsign, hard_sigmoid, relu6, exponential, leaky_relu, mish,
 * hard_silu/hard_swish, log_sigmoid) on
 * c->out, named node_name or "<layer>/<activation>", and updates c->out;
 * returns 1 for a name it does not know. */
int rt_keras_layers_find(const char *class_name, rt_keras_layer_fn *fn, int *n_in);
/* import_keras_attn.c: MultiHeadAttention and Dot, as rt_keras_layers_find
 * (which falls back to it) */
int rt_keras_attn_find(const char *class_name, rt_keras_layer_fn *fn, int *n_in);
int rt_keras_mha(rt_keras_ctx *c);
int rt_keras_dot(rt_keras_ctx *c);
int rt_keras_attention(rt_keras_ctx *c);
int rt_keras_layers_activation(rt_keras_ctx *c, const char *act, const char *node_name);
/* import_keras_image.c: the random image layers (RandomFlip, RandomRotation,
 * RandomTranslation, RandomZoom, RandomContrast, RandomBrightness), as
 * rt_keras_layers_find (which asks it first) */
int rt_keras_image_find(const char *class_name, rt_keras_layer_fn *fn, int *n_in);

#ifdef __cplusplus
}
#endif
#endif
