/*
 * rt_engine.h - rtrain's training engine: graph IR, compile, execute.
 *
 * The engine turns a model graph plus a training configuration into a plan
 * (an immutable, shareable compiled program: validated graph, inferred
 * shapes, backward graph, loss, optimizer update, memory plan, chosen
 * kernels), and runs it through an exec (one model instance: parameters,
 * optimizer state, the arena, the data cursor). The daemon caches plans by
 * rt_plan_key() and gives every Compile call its own exec.
 *
 *     rt_graph *g = rt_graph_create();
 *     int64_t in[] = {RT_BATCH, 4}, w1[] = {4, 32}, b1[] = {32};
 *     rt_graph_add_input(g, "x", RT_F32, 2, in);
 *     rt_graph_add_param(g, "d1/kernel", 2, w1, RT_INIT_GLOROT_UNIFORM, 1, NULL);
 *     rt_graph_add_param(g, "d1/bias", 1, b1, RT_INIT_ZEROS, 1, NULL);
 *     const char *d1_in[] = {"x", "d1/kernel", "d1/bias"};
 *     rt_graph_add_node(g, "d1", "Dense", 3, d1_in, 0, NULL);
 *     ...
 *     rt_graph_set_output(g, "probs");
 *
 *     rt_train_config cfg;
 *     rt_train_config_init(&cfg);            // Keras defaults
 *     cfg.loss = RT_LOSS_LOGCOSH; cfg.opt = RT_OPT_ADAM; cfg.lr = 0.1f;
 *     cfg.batch_size = 20; cfg.seed = 1;
 *
 *     rt_plan *p; rt_compile_report rep; char err[256];
 *     if (rt_plan_compile(g, &cfg, &p, &rep, err, sizeof err) < 0) ...
 *     rt_exec *e;
 *     rt_exec_create(p, &e);
 *     rt_data d = {.x = xs, .y = ys, .y_dtype = RT_I32, .n = 105};
 *     rt_train_result r;
 *     rt_exec_train(e, &d, 120, &r, NULL, NULL, NULL);
 *     rt_exec_destroy(e);
 *     rt_plan_release(p);
 *     rt_graph_destroy(g);
 *
 * Threads: a plan is immutable after compile and may be shared by threads
 * (refcounted, atomically). An exec is used by one thread at a time.
 * Nothing here blocks on I/O. A training step allocates nothing.
 */
#ifndef RTRAIN_ENGINE_H
#define RTRAIN_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "rtrain/rt_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RT_ENGINE_VERSION 1
#define RT_MAX_DIMS 8
#define RT_BATCH (-1) /* symbolic batch dimension in input shapes */

/* Values match proto DType. */
typedef enum rt_dtype { RT_F32 = 1, RT_I32 = 2, RT_I64 = 3, RT_U8 = 4 } rt_dtype;

size_t rt_dtype_size(rt_dtype dt); /* 0 for an unknown dtype */

/* Values match proto Initializer. */
typedef enum rt_init {
    RT_INIT_DEFAULT = 0, /* glorot_uniform for rank >= 2, zeros otherwise */
    RT_INIT_ZEROS = 1,
    RT_INIT_ONES = 2,
    RT_INIT_GLOROT_UNIFORM = 3,
    RT_INIT_GLOROT_NORMAL = 4,
    RT_INIT_HE_NORMAL = 5,
    RT_INIT_HE_UNIFORM = 6,
    /* Keras' parameterised initializers: only through rt_param_opts.init
     * (they are not in the proto's Initializer) */
    RT_INIT_VARIANCE_SCALING = 7,
    RT_INIT_UNIFORM = 8,           /* [a, b) */
    RT_INIT_NORMAL = 9,            /* mean a, stddev b */
    RT_INIT_TRUNCATED_NORMAL = 10, /* mean a, stddev b, redrawn outside 2 stddev */
    RT_INIT_CONSTANT = 11,         /* scale */
    RT_INIT_ORTHOGONAL = 12,       /* gain scale */
    RT_INIT_IDENTITY = 13,         /* gain scale, rank-2 parameters */
} rt_init;

/* ------------------------------------------------------------------ graph */

/* A graph under construction. All of its memory (names, nodes, attributes,
 * explicit parameter values) lives in one arena freed by rt_graph_destroy.
 * Builder calls copy their arguments. Builder calls only record; rt_plan_compile
 * validates (so a bad graph is reported with the node's name at compile). The
 * builder itself rejects only what it cannot record: NULL or empty names,
 * ndim outside 0..RT_MAX_DIMS, n_in/n_attr < 0; those return RT_EINVAL. */
typedef struct rt_graph rt_graph;

rt_graph *rt_graph_create(void);    /* NULL on out of memory */
void rt_graph_destroy(rt_graph *g); /* NULL is a no-op */
/* The last builder error, "" if none. Owned by g. */
const char *rt_graph_errmsg(const rt_graph *g);

/* The data input. dims[0] may be RT_BATCH. */
int rt_graph_add_input(rt_graph *g, const char *name, rt_dtype dt, int ndim, const int64_t *dims);

/* A parameter. value, if not NULL, holds product(dims) floats copied now and
 * used instead of init. Non-trainable parameters get no gradient and no
 * optimizer update (BatchNorm moving statistics are such parameters). */
int rt_graph_add_param(rt_graph *g, const char *name, int ndim, const int64_t *dims, rt_init init,
                       int trainable, const float *value);

/* VarianceScaling's fan and distribution (Keras' mode and distribution). */
typedef enum rt_fan_mode { RT_FAN_IN = 0, RT_FAN_OUT, RT_FAN_AVG } rt_fan_mode;
typedef enum rt_init_dist {
    RT_DIST_TRUNCATED_NORMAL = 0, /* stddev sqrt(scale / fan) / 0.8796... */
    RT_DIST_UNTRUNCATED_NORMAL,   /* stddev sqrt(scale / fan) */
    RT_DIST_UNIFORM,              /* limit sqrt(3 scale / fan) */
} rt_init_dist;

typedef enum rt_constraint_kind {
    RT_CONSTRAINT_NONE = 0,
    RT_CONSTRAINT_MAX_NORM,     /* w *= clip(norm, 0, max) / (eps + norm) */
    RT_CONSTRAINT_NON_NEG,      /* w = max(w, 0) */
    RT_CONSTRAINT_UNIT_NORM,    /* w /= eps + norm */
    RT_CONSTRAINT_MIN_MAX_NORM, /* w *= (rate clip(norm, min, max) + (1 - rate) norm) / (eps + norm) */
} rt_constraint_kind;

/* What Keras attaches to a weight besides its shape: a parameterised
 * initializer, an L1/L2 regularizer (the step's mean loss gains
 * l1 sum|w| + l2 sum w^2, and the gradient its derivative) and a constraint
 * applied after every optimizer update. Norms of a constraint run over the
 * dims whose bit is set in axes (Keras' axis; bit 0 is the first dim). */
typedef struct rt_param_opts {
    rt_init init;      /* RT_INIT_DEFAULT: keep the rt_graph_add_param one */
    rt_fan_mode mode;  /* VARIANCE_SCALING */
    rt_init_dist dist; /* VARIANCE_SCALING */
    double scale;      /* VARIANCE_SCALING scale, CONSTANT value, gain */
    double a, b;       /* UNIFORM bounds; (TRUNCATED_)NORMAL mean, stddev */
    double l1, l2;
    rt_constraint_kind constraint;
    double c_min, c_max, c_rate;
    uint32_t c_axes;
} rt_param_opts;

/* Attach opts (copied) to the parameter name added before. RT_EINVAL if
 * no parameter has that name; bad values are reported by compile. */
int rt_graph_set_param_opts(rt_graph *g, const char *name, const rt_param_opts *opts);

/* The order callers see a parameter in (rt_plan_param_info's dims,
 * rt_exec_get_param, rt_exec_set_param, rt_exec_get_grad) when the engine
 * stores it in another: the caller's array, of shape user_dims (user_ndim),
 * read as a tensor of dims vd (vn of them, the same element count) and
 * transposed by perm (engine dim k is vd[perm[k]]) is the engine's array
 * in its declared dims. An importer folds a layout change into a weight
 * with it (a Dense kernel after the flatten of a channels-first value)
 * while the weight keeps the layout its framework saves. Explicit values
 * given to rt_graph_add_param are in the engine's order. RT_EINVAL if no
 * parameter has that name; bad views are reported by compile. */
int rt_graph_set_param_view(rt_graph *g, const char *name, int user_ndim, const int64_t *user_dims,
                            int vn, const int64_t *vd, const int *perm);

typedef enum rt_attr_kind {
    RT_ATTR_INT,
    RT_ATTR_FLOAT,
    RT_ATTR_STR,
    RT_ATTR_INTS,
    RT_ATTR_FLOATS
} rt_attr_kind;

typedef struct rt_attr {
    const char *name;
    rt_attr_kind kind;
    int64_t i;
    double f;
    const char *s;
    int n; /* INTS, FLOATS */
    const int64_t *ints;
    const float *floats;
} rt_attr;

/* A node computing op over inputs (names of inputs, params or other nodes).
 * Its single output is named name. See the op list below. */
int rt_graph_add_node(rt_graph *g, const char *name, const char *op, int n_in,
                      const char *const *inputs, int n_attr, const rt_attr *attrs);

int rt_graph_set_output(rt_graph *g, const char *name);

/* A per-step loss mask (Keras' mask reaching the model's output: a
 * TimeDistributed or sequence output of a masked recurrent layer): name is
 * a node's (B, rows) value, 1 keeping a row of the output (its last axis)
 * and 0 dropping it. The loss and its gradient then count only the kept
 * rows, as Keras masks a loss: sum(w l m) / sum(m) over the batch, w the
 * sample weight (keras/src/losses/loss.py apply_mask); the metrics are
 * taken over the kept rows too. A PyTorch loss (PyTorch has no implicit
 * mask; a Keras model's can meet one compiled by name) runs its elementwise
 * form over the kept rows: "mean" divides by the kept rows' values, "sum"
 * sums them; cross_entropy and nll_loss, whose classes are dim 1, are
 * refused. Several outputs: rt_graph_set_loss_masks. */
int rt_graph_set_loss_mask(rt_graph *g, const char *name);

/* Several outputs (Keras multi-output models): the graph's output becomes
 * the named nodes flattened and concatenated, in this order, per sample
 * ("outputs"); each is a head with its own loss (rt_train_config.heads).
 * 2 <= n <= RT_MAX_HEADS. */
#define RT_MAX_HEADS 8
int rt_graph_set_outputs(rt_graph *g, const char *const *names, int n);
/* The outputs' names as the model calls them (Keras' output layers, where
 * the node is the layer's activation "cls/softmax"), n as set_outputs';
 * rt_plan_head_name and the per-output metrics carry them. Default: the
 * nodes' names. */
int rt_graph_name_outputs(rt_graph *g, const char *const *names, int n);
/* Each output's own loss mask (Keras masks each output's loss with that
 * output's mask, keras/src/trainers/compile_utils.py CompileLoss): names[k]
 * is output k's (B, rows) mask as rt_graph_set_loss_mask's, or NULL (or
 * "") for an output whose loss is not masked; n is the outputs' count
 * (rt_graph_set_outputs), or 1 for a graph of one output (the same as
 * rt_graph_set_loss_mask). Each masked output's loss is its mean over its
 * own kept rows; the loss weights then sum the outputs' losses. */
int rt_graph_set_loss_masks(rt_graph *g, const char *const *names, int n);

/*
 * Ops (names are case-sensitive; rt_engine_op_names lists them):
 *   Dense(x, W[in,out], b[out]?)      x (B,...,in) -> (B,...,out)
 *   MatMul(a, b)                      2-D matrix product
 *   BatchMatMul(a (..., M, K), b (..., K, N)) attrs transpose_a, transpose_b:
 *                                    a product per leading index of two
 *                                    activations (op_bmm.c)
 *   BandMask(x (..., T, S)) attrs causal, window: -1e9 outside the band
 *                                    (attention's causal / sliding-window
 *                                    masks)
 *   Add, Sub, Mul(a, b)               numpy broadcasting
 *   Relu, Sigmoid, Tanh(x)
 *   Softmax, LogSoftmax(x)            over the last axis
 *   Reshape(x) attr shape (ints, per sample; one -1 allowed)
 *   Flatten(x)                        (B, ...) -> (B, prod)
 *   Dropout(x) attr rate (float)      training only; identity in eval;
 *                                    noise_shape (ints, Keras')
 *   Identity(x)
 * Issue 5 adds, NHWC:
 *   Conv2D(x, W[kh,kw,cin,cout], b?) attrs strides (ints 2), padding ("same"|"valid"),
 *                                    dilations (ints 2), activation (as Dense's,
 *                                    fused)
 *   MaxPool2D, AvgPool2D(x)          attrs pool (ints 2, default 2x2), strides
 *                                    (ints 2, default the pool), padding; AvgPool
 *                                    does not count padding (as Keras)
 *   GlobalAvgPool(x)                 (B,H,W,C) -> (B,C); attr keepdims -> (B,1,1,C)
 *   BatchNorm(x, gamma, beta, moving_mean, moving_var) attrs momentum (0.99),
 *                                    epsilon (1e-3), frozen (int: inference mode
 *                                    while training too); over the last axis.
 *                                    The moving statistics are non-trainable
 *                                    params that a training step updates
 *                                    (Keras: m * moving + (1 - m) * batch, biased
 *                                    variance); rt_exec_compute_grads does not.
 *   Concat(a, b, ...) attr axis (int, default -1; counts the batch as axis 0)
 * Recurrent (op_rnn.c; Keras' weight layout and gate order):
 *   SimpleRNN, LSTM, GRU(x (B,T,F), kernel (F,G*U), recurrent_kernel (U,G*U),
 *                                    bias?) G = 1, 4 (i,f,c,o), 3 (z,r,h); GRU's
 *                                    bias is (2,3U) with reset_after (default 1).
 *                                    attrs activation, recurrent_activation,
 *                                    return_sequences, go_backwards,
 *                                    reverse_output, reset_after
 *   Embedding(x, W[V,D])             x holds integral indices in [0, V) as f32;
 *                                    (B,...) -> (B,...,D)
 *   ActivityReg(x) attrs l1, l2 >= 0, batch_mean 0/1 (default 1): y = x;
 *                                    the loss gains l1 sum|y| + l2 sum y^2
 *                                    over the batch (/ batch size when
 *                                    batch_mean), Keras' activity regularizer
 */
/* NULL-terminated list of supported op names; static. */
const char *const *rt_engine_op_names(void);

/* Backends (server/kernels/NAME, docs/backends.md): the program registers
 * those it links; every plan compiles for the selected one. Select by name
 * (RT_ENOTFOUND when none of that name is registered); without a call, the
 * environment's RT_BACKEND, else the registered one of highest rank.
 * Select before compiling: plans keep the backend they were compiled for. */
int rt_backend_select(const char *name);
const char *rt_backend_name(void);     /* the selected one's, "" when none */
const char *rt_backend_describe(void); /* e.g. "cpu+onednn-3.0" */
/* the registered backends' names, comma-separated, in rank order */
const char *rt_backend_list(void);

/* ------------------------------------------------------------ training config */

typedef enum rt_loss_kind {
    RT_LOSS_SPARSE_CE = 1, /* sparse_categorical_crossentropy */
    RT_LOSS_CE,            /* categorical_crossentropy (one-hot f32 labels) */
    RT_LOSS_BCE,           /* binary_crossentropy */
    RT_LOSS_MSE,
    RT_LOSS_MAE,
    RT_LOSS_LOGCOSH, /* Keras semantics (W-A: int labels broadcast per row) */
    /* PyTorch's losses, with PyTorch's semantics (rt_loss_torch.c): the
     * batch loss is the mean (or, RT_REDUCE_SUM, the sum) over every
     * element, or over every position for the class losses, whose class
     * axis is the first per-sample dim (PyTorch's dim 1) */
    RT_LOSS_CROSS_ENTROPY, /* F.cross_entropy: logits; class-index (i32) or
                                probability (f32, the output's shape) targets;
                                label_smoothing, ignore_index, class_weight */
    RT_LOSS_NLL,           /* F.nll_loss: log-probabilities, class indices */
    RT_LOSS_BCE_LOGITS,    /* F.binary_cross_entropy_with_logits, pos_weight */
    RT_LOSS_BCE_TORCH,     /* F.binary_cross_entropy: probabilities */
    RT_LOSS_MSE_TORCH,     /* F.mse_loss */
    RT_LOSS_L1,            /* F.l1_loss */
    RT_LOSS_SMOOTH_L1,     /* F.smooth_l1_loss, beta (loss_beta) */
    RT_LOSS_HUBER,         /* F.huber_loss, delta (loss_beta) */
    /* Keras 3's (keras/src/losses/losses.py), the mean over the last axis
     * (KLD: the sum) of: */
    RT_LOSS_HINGE,         /* max(1 - y p, 0), y of {0,1} batches as 2y-1 */
    RT_LOSS_SQUARED_HINGE, /* max(1 - y p, 0)^2, the same labels */
    RT_LOSS_POISSON,       /* p - y log(p + 1e-7) */
    RT_LOSS_KLD,           /* kl_divergence: y, p clipped to [1e-7, 1], y log(y/p) */
    RT_LOSS_HUBER_KERAS,   /* huber: e = p - y, e^2/2 within delta (loss_beta,
                                default 1), else delta |e| - delta^2/2 */
} rt_loss_kind;
#define RT_LOSS_LAST RT_LOSS_HUBER_KERAS
/* a PyTorch loss (reduction, class_weight, ... apply) */
#define RT_LOSS_IS_TORCH(k) ((k) >= RT_LOSS_CROSS_ENTROPY && (k) <= RT_LOSS_HUBER)

typedef enum rt_reduction { RT_REDUCE_MEAN = 0, RT_REDUCE_SUM = 1 } rt_reduction;

typedef enum rt_opt_kind {
    RT_OPT_SGD = 1,
    RT_OPT_ADAM,
    RT_OPT_ADAMW,
    RT_OPT_RMSPROP,
    /* Keras 3's (keras/src/optimizers/<name>.py): Adagrad's accumulator
     * starts at 0.1 (initial_accumulator_value), eps inside the sqrt;
     * Adadelta's rho (Keras' default 0.95: give it) and eps; Adamax's and
     * Nadam's beta1, beta2, eps */
    RT_OPT_ADAGRAD,
    RT_OPT_ADADELTA,
    RT_OPT_ADAMAX,
    RT_OPT_NADAM,
    /* keras/src/optimizers/ftrl.py: accumulator n (from ftrl_init) and
     * linear z; n' = n + g^2, z += g + 2 shrink w - (n'^-p - n^-p)/lr w,
     * w = (clip(z, -l1, l1) - z) / (n'^-p / lr + 2 (l2 + beta/(2 lr))) */
    RT_OPT_FTRL,
} rt_opt_kind;
#define RT_OPT_LAST RT_OPT_FTRL

typedef enum rt_sched_kind {
    RT_SCHED_CONSTANT = 0,
    RT_SCHED_STEP,          /* lr * gamma^(floor(step / step_size)) */
    RT_SCHED_COSINE,        /* min_lr + (lr-min_lr)*(1+cos(pi*min(step,total)/total))/2 */
    RT_SCHED_LINEAR_WARMUP, /* lr * min(1, (step+1)/warmup) */
    RT_SCHED_WARMUP_COSINE, /* linear warmup, then cosine over total-warmup */
    RT_SCHED_EXP,           /* lr * gamma^(step / step_size): Keras'
                               ExponentialDecay (staircase: RT_SCHED_STEP) */
} rt_sched_kind;

#define RT_METRIC_ACCURACY 1u /* Keras' "accuracy": the one the loss implies */
/* Keras metrics computed over the epoch (or the evaluated data) exactly as
 * Keras' metric objects accumulate them; values in rt_metrics.values */
#define RT_METRIC_BINARY_ACCURACY (1u << 1)      /* y_pred > 0.5 equals y_true */
#define RT_METRIC_CATEGORICAL_ACCURACY (1u << 2) /* argmax y_true == argmax y_pred */
#define RT_METRIC_SPARSE_CATEGORICAL_ACCURACY (1u << 3)
#define RT_METRIC_TOP_K (1u << 4)        /* top_k_categorical_accuracy, k 5 */
#define RT_METRIC_SPARSE_TOP_K (1u << 5) /* sparse_top_k_categorical_accuracy */
#define RT_METRIC_MAE (1u << 6)
#define RT_METRIC_MSE (1u << 7)
#define RT_METRIC_RMSE (1u << 8)       /* sqrt(sum sq err / elements) */
#define RT_METRIC_AUC (1u << 9)        /* ROC, 200 thresholds, interpolation */
#define RT_METRIC_PRECISION (1u << 10) /* threshold 0.5 */
#define RT_METRIC_RECALL (1u << 11)
#define RT_METRIC_MAX 12
/* rt_metrics.value_bit of an output's own loss (several outputs: Keras'
 * "out1_loss"); RT_METRIC_ACCURACY there is that output's accuracy */
#define RT_METRIC_HEAD_LOSS (1u << 30)
/* rt_metrics.values holds at most this many (compile refuses more) */
#define RT_METRIC_VALUES 48

/* A metric's bit from its Keras name or alias ("auc", "AUC", "mae",
 * "top_k_categorical_accuracy", ...; "accuracy" is RT_METRIC_ACCURACY):
 * 0 or RT_EINVAL. rt_metric_name: the Keras name of one bit, or NULL. */
int rt_metric_from_name(const char *name, uint32_t *bit);
const char *rt_metric_name(uint32_t bit);

/* Compute precision. RT_PREC_BF16 is Keras' mixed_bfloat16: a node's
 * matmul/convolution inputs are rounded to bfloat16 and multiplied with
 * float32 accumulation; its output, the weights, the loss, the optimizer
 * and every op without a bf16 kernel stay float32. A graph node's string
 * attribute "precision" ("bf16"/"mixed_bfloat16" or "f32"/"float32")
 * sets it per node. Compile refuses bf16 where the backend (or the CPU)
 * has none. */
typedef enum rt_precision { RT_PREC_DEFAULT = 0, RT_PREC_F32 = 1, RT_PREC_BF16 = 2 } rt_precision;
/* "float32" / "mixed_bfloat16" (NULL outside the enum); and back from
 * Keras' names and the short ones ("f32", "bf16"); RT_EINVAL otherwise */
const char *rt_precision_name(int prec);
int rt_precision_from_name(const char *name, int *prec);

typedef struct rt_train_config {
    rt_loss_kind loss;
    int from_logits; /* CE/BCE: the output is logits, not probabilities */
    rt_opt_kind opt;
    float lr;
    float momentum;          /* SGD */
    int nesterov;            /* SGD */
    float beta1, beta2, eps; /* Adam(W): 0.9, 0.999, 1e-7 (Keras) */
    int adam_eps_vhat;       /* Adam(W): eps added to sqrt(v_hat), as
                                 torch.optim.Adam (ONNX models from PyTorch);
                                 0: to sqrt(v), as Keras */
    float weight_decay;      /* AdamW decoupled decay (Keras default 0.004) */
    float rho;               /* RMSprop: 0.9 */
    /* Ftrl (Keras' defaults): learning_rate_power -0.5 (<= 0),
     * initial_accumulator_value 0.1, l1/l2/l2_shrinkage regularization
     * strengths 0, beta 0 (all >= 0) */
    float ftrl_power, ftrl_init, ftrl_l1, ftrl_l2, ftrl_shrink, ftrl_beta;
    float clip_norm; /* > 0: clip gradients by global norm */
    rt_sched_kind sched;
    uint32_t step_size;
    float gamma;
    uint32_t warmup_steps;
    uint32_t total_steps;
    float min_lr;
    uint32_t metrics;     /* RT_METRIC_* bits */
    int batch_size;       /* the largest batch; the last one may be smaller */
    uint64_t seed;        /* initializers, shuffling, dropout */
    int shuffle;          /* reshuffle every epoch (default 1) */
    rt_dtype label_dtype; /* RT_I32 for sparse losses, else RT_F32 */
    int label_ndim;       /* per-sample label rank */
    int64_t label_dims[RT_MAX_DIMS];
    int sync_bn; /* replicas: every BatchNorm's statistics global */
    /* RT_PREC_*: the precision of the nodes whose graph entry has no
     * "precision" attribute (Keras' global policy); RT_PREC_F32 also
     * overrides the attribute (every node float32) */
    int precision;
    /* PyTorch losses (RT_LOSS_IS_TORCH) */
    rt_reduction reduction;    /* mean (default) or sum over the batch */
    float label_smoothing;     /* cross_entropy, in [0, 1] */
    int64_t ignore_index;      /* cross_entropy, nll_loss: targets of this class
                                 are left out (default -100, as PyTorch) */
    float loss_beta;           /* smooth_l1_loss beta, huber_loss delta (default 1) */
    const float *class_weight; /* cross_entropy, nll_loss: one weight per class, */
    int n_class_weight;        /* or NULL/0; copied by compile */
    const float *pos_weight;   /* bce_with_logits: one per class (last dim), or */
    int n_pos_weight;          /* one for all; NULL/0: none */
    /* torch.optim's weight decay (SGD, Adam, RMSprop): g += l2_decay * w
     * before the update (AdamW's decoupled decay is weight_decay) */
    float l2_decay;
    /* torch.optim.SGD's dampening: buf = momentum buf + (1 - dampening) g
     * (the first step's buf = g), w -= lr buf; 0: the Keras form above */
    float dampening;
    /* 1 (default): compile refuses a loss that does not fit what the output
     * ends in (a probability loss on a LogSoftmax or raw output, a logits
     * loss on a Softmax or Sigmoid output), naming the loss that fits;
     * 0: trust the caller */
    int loss_check;
    /* A graph with several outputs (rt_graph_set_outputs): one Keras loss
     * per head, weighted (Keras' loss_weights, default 1); the loss is
     * sum_k weight_k loss_k, each the batch mean as for one output. The
     * labels are f32, per sample each head's in turn: one class index per
     * row for sparse_categorical_crossentropy, else the head's shape (or
     * one value per row, broadcast). loss, from_logits and the accuracy
     * metric are not used then; n_heads 0: one output. */
    int n_heads;
    struct rt_loss_head {
        rt_loss_kind loss;
        int from_logits;
        float weight;
        uint32_t metrics; /* RT_METRIC_* bits of this output (Keras' per-output
                             metrics: out1_accuracy, out2_mae, ...) */
    } heads[RT_MAX_HEADS];
} rt_train_config;

/* Keras defaults: adam, lr 1e-3, beta 0.9/0.999, eps 1e-7, rho 0.9,
 * sparse CE, accuracy, batch 32, seed 0, shuffle 1, label i32 scalar;
 * PyTorch's loss defaults: reduction mean, ignore_index -100, beta 1;
 * loss_check 1. */
void rt_train_config_init(rt_train_config *cfg);

/* Name lookups (Keras spellings and common aliases, e.g. "adam", "sgd",
 * "sparse_categorical_crossentropy", "mse"/"mean_squared_error"; PyTorch's
 * functional and module names, e.g. "cross_entropy"/"CrossEntropyLoss",
 * "nll_loss", "bce_with_logits", "mse_loss"). Keras' names keep Keras'
 * semantics ("mse", "bce" are Keras'). Return 0 or RT_EINVAL for an
 * unknown name. rt_loss_name: the canonical name of a kind. */
int rt_loss_from_name(const char *name, rt_loss_kind *out);
const char *rt_loss_name(rt_loss_kind k);
int rt_reduction_from_name(const char *name, rt_reduction *out); /* "mean", "sum" */
int rt_opt_from_name(const char *name, rt_opt_kind *out);
int rt_sched_from_name(const char *name, rt_sched_kind *out);
const char *const *rt_engine_loss_names(void);      /* NULL-terminated */
const char *const *rt_engine_optimizer_names(void); /* NULL-terminated */

/* The engine's counter-based RNG, for modules outside the engine that must
 * draw reproducibly from a training seed (data augmentation): a pure
 * function of (seed, stream, counter). Streams below 0x10000000 belong to
 * the engine; RT_RNG_STREAM_AUGMENT is the input pipeline's. */
#define RT_RNG_STREAM_AUGMENT 0x10000000ull
uint64_t rt_rng_u64(uint64_t seed, uint64_t stream, uint64_t counter);

/* Image augmentation of a training set's stored 8-bit images (rt_data.aug;
 * server/data/rt_image.h reads the same for one image): a random crop of
 * the image zero-padded by crop_pad pixels on each side, a horizontal flip
 * with probability 1/2, a brightness delta uniform in [-brightness,
 * brightness] and a contrast factor uniform in [1 - contrast, 1 +
 * contrast] around each channel's mean, then (v / 255 - mean) / std per
 * channel. The backend's batch gather applies it; the draws are the
 * engine's (rt_aug_draw), pure functions of (seed, epoch, sample) on the
 * RT_RNG_STREAM_AUGMENT stream, so every backend, replica and resumed run
 * sees one process's images. */
typedef struct rt_augment {
    const uint8_t *img;    /* n images (h, w, c), row-major; NULL: none */
    int h, w, c;           /* c: 1 or 3 */
    int64_t off;           /* the image's first float in a row of x */
    float mean[3], std[3]; /* std 0 is taken as 1 */
    int crop_pad, flip;
    float brightness, contrast;
    uint64_t epoch; /* the draws' epoch */
    uint64_t row0;  /* the id of the data set's first row (a chunk's in its whole) */
} rt_augment;

/* One sample's draws. */
typedef struct rt_aug_draw {
    int dx, dy; /* crop offset in [-crop_pad, crop_pad] */
    int flip;
    float bright, contrast; /* delta, factor */
} rt_aug_draw;

void rt_aug_draws(const rt_augment *a, uint64_t seed, uint64_t sample, rt_aug_draw *d);
/* One stored (h, w, c) image px into h * w * c floats x with draws d, on
 * the host: the CPU backend's gather and the data pipeline's streamed
 * rows (rt_image_to_input) share it, so the two agree bit for bit. */
void rt_aug_apply(const rt_augment *a, const rt_aug_draw *d, const uint8_t *px, float *x);

/* ------------------------------------------------------------------- plan */

typedef struct rt_plan rt_plan;

/* Compile runs these passes in order; rt_compile_report.pass_ns[i] is the
 * time of pass i, named by rt_compile_pass_name(i): "validate",
 * "infer_shapes", "fuse", "backward", "choose_kernels", "plan_memory",
 * "report". */
#define RT_COMPILE_PASSES 7
const char *rt_compile_pass_name(int i); /* NULL outside 0..RT_COMPILE_PASSES-1 */

typedef struct rt_compile_report {
    uint64_t param_count;
    uint64_t trainable_param_count;
    uint64_t flops_per_step; /* forward + backward + update, at full batch */
    uint64_t arena_bytes;    /* planned peak of activations/gradients/scratch */
    uint64_t naive_bytes;    /* sum of the same buffers without reuse */
    uint64_t param_bytes;    /* parameters + gradients + optimizer state */
    uint64_t compile_ns;
    uint32_t n_nodes;
    uint32_t n_kernels;                  /* kernel calls per training step */
    uint64_t pass_ns[RT_COMPILE_PASSES]; /* each pass's time, in order */
    uint32_t n_regularized;              /* parameters with an L1/L2 regularizer */
    uint32_t n_constrained;              /* parameters with a constraint */
    char backend[16];                    /* the backend the plan runs on */
    uint32_t n_bf16;                     /* nodes whose kernels compute in bf16 */
} rt_compile_report;

/* A 128-bit cache key over (canonical graph, training config, batch size,
 * device, RT_ENGINE_VERSION). Equal graphs built in the same order get equal
 * keys. Returns 0 or a negative code. */
int rt_plan_key(const rt_graph *g, const rt_train_config *cfg, uint8_t key[16]);

/* Compile. On success *out holds a plan with refcount 1 and rep (if not NULL)
 * is filled. On failure returns a negative code and writes a short message
 * naming the node/field into err (always NUL-terminated, at most errlen). */
int rt_plan_compile(const rt_graph *g, const rt_train_config *cfg, rt_plan **out,
                    rt_compile_report *rep, char *err, size_t errlen);
/* The same, stopping between passes once *cancel (read atomically) is
 * non-zero: RT_ECANCELLED naming the last pass run, and nothing is kept.
 * Each pass is linear in the graph's size, so a budget is kept to about one
 * pass. cancel NULL: never cancelled. */
int rt_plan_compile_cancellable(const rt_graph *g, const rt_train_config *cfg, const int *cancel,
                                rt_plan **out, rt_compile_report *rep, char *err, size_t errlen);
void rt_plan_retain(rt_plan *p);
void rt_plan_release(rt_plan *p); /* NULL is a no-op */

const rt_compile_report *rt_plan_report(const rt_plan *p);
const rt_train_config *rt_plan_config(const rt_plan *p);
/* Per-sample shapes (batch dimension dropped). */
int rt_plan_input_shape(const rt_plan *p, int64_t dims[RT_MAX_DIMS]);  /* returns ndim */
int rt_plan_output_shape(const rt_plan *p, int64_t dims[RT_MAX_DIMS]); /* returns ndim */
int rt_plan_label_shape(const rt_plan *p, int64_t dims[RT_MAX_DIMS]);  /* returns ndim */
/* Several outputs: how many (0 for one), and head k's per-sample shape
 * (returns ndim, or RT_EINVAL) and label values per sample. */
int rt_plan_n_heads(const rt_plan *p);
int rt_plan_head_shape(const rt_plan *p, int k, int64_t dims[RT_MAX_DIMS], int64_t *lab_numel);
/* output k's name (the graph's node: Keras' output layer), or NULL */
const char *rt_plan_head_name(const rt_plan *p, int k);
int rt_plan_n_params(const rt_plan *p);
/* The plan's nodes (after fusion, topological order): node i's name, op
 * (a fused reader's as "Conv2D+MaxPool2D", a Conv2D that took a zero Pad
 * into its padding as "Pad+Conv2D", into buf) and the precision its
 * kernel computes in (RT_PREC_F32 or RT_PREC_BF16). Returns 0 or RT_EINVAL. */
int rt_plan_n_nodes(const rt_plan *p);
int rt_plan_node_info(const rt_plan *p, int i, const char **name, char *op, size_t oplen,
                      int *prec);
/* Parameter i: name (owned by p), shape. Returns ndim, or RT_EINVAL. */
int rt_plan_param_info(const rt_plan *p, int i, const char **name, int64_t dims[RT_MAX_DIMS],
                       int *trainable);

/* ------------------------------------------------------------------- exec */

typedef struct rt_exec rt_exec;

/* A data set in memory, not owned. x holds n samples of the plan's input
 * shape (f32, row-major); y holds n labels of the plan's label shape in
 * y_dtype (RT_I32 or RT_F32), or is NULL for prediction. */
/* Fills the nb rows of batch pos of an epoch (RT_EPOCH_EVAL: the samples
 * in order, as evaluation reads them) into x (nb * input floats), y (nb
 * * label values, 4 bytes each) and, when not NULL, w (the nb samples'
 * weights from the data set's sw). Returns 0, or a negative RT_E* code
 * with a message in err. */
#define RT_EPOCH_EVAL (-1)
typedef int (*rt_batch_fill)(void *ud, int64_t epoch, int64_t pos, int64_t nb, float *x, void *y,
                             float *w, char *err, size_t errlen);

typedef struct rt_data {
    const float *x;
    const void *y;
    rt_dtype y_dtype;
    int64_t n;
    /* Per-sample loss weights (n floats, finite, >= 0), or NULL for 1 each:
     * Keras' sample_weight (class_weight maps to it). A batch's loss is
     * sum(w_i * l_i) / batch (SUM_OVER_BATCH_SIZE), and so its gradient;
     * accuracy stays unweighted, as Keras' compile(metrics=...). */
    const float *sw;
    /* A streamed data set: x is NULL and batches come from fill, in the
     * order fill chooses (the exec keeps no permutation). fill_id stands
     * for the data set across calls, as x does for an in-memory one (it is
     * compared, never read). y still holds all n labels (they are
     * range-checked once), or is NULL on a replica fed by another (rank
     * 0 of an MPI job, which checked them): its fill delivers the rows'
     * labels, and their sample weights when fill_sw is set. With a replica
     * set (rt_exec_set_replica) fill is called for the step's whole batch
     * and need only fill the rows of this replica's shards, at their
     * places in the batch. */
    rt_batch_fill fill;
    void *fill_ud;
    const void *fill_id;
    int fill_sw;
    /* Image augmentation of a training step's rows (aug.img NULL: none;
     * evaluation, prediction and fill ignore it): row r's floats from
     * aug.off on become image r augmented with the draws of (the plan's
     * seed, aug.epoch, r), by the backend's gather. */
    rt_augment aug;
} rt_data;

typedef struct rt_metrics {
    double loss;
    double acc; /* NaN when accuracy is not a metric */
    int64_t samples;
    /* the config's other metrics, in bit order: value i is metric
     * value_bit[i] (rt_metric_name); 0 of them where not computed.
     * Several outputs: for each output k in turn (value_head[i] = k, else
     * -1), its loss (RT_METRIC_HEAD_LOSS: unweighted, as Keras' out1_loss),
     * its accuracy (RT_METRIC_ACCURACY) when asked, then its other metrics;
     * rt_metric_value_name spells Keras' name ("out1_loss"). */
    int n_values;
    uint32_t value_bit[RT_METRIC_VALUES];
    int8_t value_head[RT_METRIC_VALUES];
    double values[RT_METRIC_VALUES];
} rt_metrics;

/* Keras' name of value i of m: "auc" (one output), "out1_loss",
 * "out2_accuracy" (several: the output's name from rt_plan_head_name).
 * Returns the length written (snprintf's), or RT_EINVAL. */
int rt_metric_value_name(const rt_plan *p, const rt_metrics *m, int i, char *out, size_t n);

/* Passed to the step callback after every step. */
typedef struct rt_step_info {
    int64_t step;          /* global step count after this step */
    int64_t epoch;         /* 1-based epoch this step belongs to */
    int64_t step_in_epoch; /* 1-based */
    int64_t steps_per_epoch;
    float loss;               /* this step's mean loss */
    float acc;                /* this step's accuracy (NaN if not a metric) */
    int epoch_end;            /* this step completed an epoch */
    rt_metrics epoch_metrics; /* running (or, at epoch_end, final) epoch metrics;
                                 (was a second member named epoch, which
                                 does not compile) */
    float lr;                 /* the learning rate this step used */
} rt_step_info;

/* Return nonzero to stop after this step (cancellation). */
typedef int (*rt_step_cb)(void *ud, const rt_step_info *info);

typedef struct rt_train_result {
    int64_t steps_run;
    int64_t global_step;
    rt_metrics last; /* the last step */
    rt_metrics mean; /* over the steps of this call, sample-weighted */
    int stopped;     /* the callback asked to stop */
    uint64_t execute_ns;
} rt_train_result;

/* A fresh model instance: the arena, parameters initialised from the
 * config's seed, optimizer state zeroed, step 0. */
int rt_exec_create(rt_plan *p, rt_exec **out); /* retains p */
void rt_exec_destroy(rt_exec *e);              /* NULL is a no-op */
const char *rt_exec_errmsg(const rt_exec *e);  /* last error, "" if none */
rt_plan *rt_exec_plan(const rt_exec *e);
int64_t rt_exec_global_step(const rt_exec *e);

/* Check that d fits the plan: x/y present, label dtype and, for sparse
 * losses, label values in [0, classes). Returns 0 or RT_EDATA/RT_ESHAPE/
 * RT_EDTYPE with a message in rt_exec_errmsg. rt_exec_train/evaluate call it.
 * Label values are scanned once per (y pointer, n) and the result is
 * remembered: labels rewritten in place afterwards are not rescanned (an
 * out-of-range one is then clamped, never read out of bounds). Sample
 * weights (finite, >= 0) are checked once per (sw pointer, n) likewise.
 * A streamed set's inputs are checked batch by batch, as fill gives them. */
int rt_exec_check_data(rt_exec *e, const rt_data *d);
/* A pass over a whole data set on the host (those checks, and each epoch's
 * order of an in-memory set: O(n), most of a second at 10^7 rows) calls
 * fn() every 16384 rows, on the thread that runs the pass; fn may let other
 * work use the device meanwhile (the exec is not touched then).
 * rt_exec_train's first step of a data set or of an epoch thus pauses like
 * its steps do. Process-wide, set once before any exec runs; NULL: no
 * pauses. */
void rt_exec_set_pause_hook(void (*fn)(void));
/* n rows of inputs x as the program takes them: an Embedding fed by the
 * input needs whole indices in range. Returns 0 or RT_EDATA with a message
 * in rt_exec_errmsg. For a batch that others will train on (rt_dist checks
 * a streamed batch before it scatters it). */
int rt_exec_check_rows(rt_exec *e, const float *x, int64_t n);

/*
 * Run steps training steps over d. Batches of batch_size are taken in order
 * of a per-epoch permutation (seeded by (seed, epoch) when shuffling); an
 * epoch is ceil(n / batch_size) steps and its last batch may be smaller. The
 * data cursor (epoch, position) lives in the exec, so K calls of one step
 * give bit-identical weights to one call of K steps. Passing a different
 * data set (another x pointer or n) starts a new epoch at its first batch.
 * step_losses, if not NULL, receives steps floats.
 */
int rt_exec_train(rt_exec *e, const rt_data *d, int64_t steps, rt_train_result *res, rt_step_cb cb,
                  void *ud, float *step_losses);

/* Forward pass in inference mode over all of d in batches. */
int rt_exec_evaluate(rt_exec *e, const rt_data *d, rt_metrics *out);

/* Outputs for n samples into out (n * product(output shape) floats). */
int rt_exec_predict(rt_exec *e, const float *x, int64_t n, float *out);

/* Parameter i's values (product(dims) floats). */
int rt_exec_get_param(const rt_exec *e, int i, float *dst);
int rt_exec_set_param(rt_exec *e, int i, const float *src);

/* ------------------------------------------------- additions (engine v1) */

/* Gradients without an update, for gradient checks and reference tests:
 * forward (training mode; dropout keyed by the current global step) and
 * backward over the first n samples of d in order (1 <= n <= batch_size).
 * *loss gets the mean loss. Parameters (BatchNorm's moving statistics
 * included), optimizer state, the step counter and the data cursor are
 * unchanged. */
int rt_exec_compute_grads(rt_exec *e, const rt_data *d, int64_t n, double *loss);
/* Parameter i's gradient from the last step or rt_exec_compute_grads
 * (product(dims) floats; zeros for a non-trainable parameter). */
int rt_exec_get_grad(const rt_exec *e, int i, float *dst);

/* Checkpoints: the exec's whole training state (weights, optimizer state,
 * step counter, learning-rate override, data cursor: epoch and position;
 * the RNG is counter-based,
 * so nothing else is needed) as one versioned blob. A restored exec
 * continues bit-identically: the first data set passed after a load is
 * taken as the one the cursor refers to. */
size_t rt_exec_state_size(const rt_exec *e);
/* Writes rt_exec_state_size(e) bytes into buf (len must be >= that). */
int rt_exec_save_state(const rt_exec *e, void *buf, size_t len);
/* The blob is checked against e's plan before anything is copied (a
 * refused blob leaves e as it was): RT_EDATA with a message for a blob of
 * another plan, version or seed, counters outside 0..RT_EXEC_MAX_STEP or
 * a cursor past its step count; RT_ENAN for a non-finite trainable weight
 * or optimizer slot. */
#define RT_EXEC_MAX_STEP (INT64_C(1) << 53) /* steps, samples in an epoch */
int rt_exec_load_state(rt_exec *e, const void *buf, size_t len);
/* The same blob as rt_exec_save_state, as four spans to write one after
 * the other without a copy (a checkpoint of a large model must not double
 * the daemon's memory): the header, written into hdr (RT_EXEC_STATE_HDR
 * bytes), then the weights, the optimizer slots and the stateful RNNs'
 * carried states (0 bytes without one), which point into e and stay valid
 * until e trains, loads or is destroyed. */
/* the header holds the epoch's metric sums (and each output's, several) */
#define RT_EXEC_STATE_HDR 32768
typedef struct rt_exec_span {
    const void *p;
    size_t n;
} rt_exec_span;
int rt_exec_state_spans(const rt_exec *e, unsigned char hdr[RT_EXEC_STATE_HDR], rt_exec_span sp[4]);
/* The cursor as the engine counts it: epoch (0-based) and the next batch. */
void rt_exec_cursor(const rt_exec *e, int64_t *epoch, int64_t *pos);

/* Keras' reset_states: the carried states of the stateful RNNs (every
 * one, or layer's: the node of that name and the nodes named layer/...)
 * are zeroed before the next forward. Like rt_exec_set_lr, another thread
 * may call it while a training runs: it applies at the next step. Returns
 * how many stateful nodes it reset (0: none matched). The state blob
 * (rt_exec_save_state, checkpoints) keeps the states. */
int rt_exec_reset_states(rt_exec *e, const char *layer);
/* a stateful RNN's fixed batch size (every data set's size a multiple of
 * it), 0 when there is none */
int64_t rt_exec_stateful_batch(const rt_exec *e);
/* RT_EINVAL with Keras' message when e has a stateful RNN and its batch
 * size does not divide n (train, evaluate and predict check it; a caller
 * that predicts in pieces checks the whole first) */
int rt_exec_check_stateful_n(rt_exec *e, int64_t n);

/* The learning rate from the next step on: lr > 0 replaces the config's
 * rate and its schedule (Keras' LearningRateScheduler and
 * ReduceLROnPlateau setting optimizer.learning_rate); lr == 0 goes back to
 * the config's. Optimizer state and step are untouched. RT_EINVAL for a
 * negative or non-finite lr. The checkpoint blob holds it. The one exec
 * call that another thread may make while rt_exec_train runs: each step
 * reads the rate once at its start (rt_step_info.lr says which it used). */
int rt_exec_set_lr(rt_exec *e, float lr);
/* The rate the next step uses (the override, or the schedule's at the
 * current step). */
float rt_exec_lr(const rt_exec *e);
/* rt_exec_set_lr's rate, 0 when none is set (the config's schedule). */
float rt_exec_lr_override(const rt_exec *e);

/* Carry src's training state into dst, whose plan has the same parameters
 * (names, shapes, order; e.g. the same model at another batch size):
 * weights, optimizer slots, step counter, learning-rate override and the
 * epoch count (dst starts that epoch's first batch, or the next epoch's if
 * src was inside one). RT_ESHAPE naming the first parameter that differs. */
int rt_exec_copy_state(rt_exec *dst, const rt_exec *src);

/* Data-parallel replicas (server/mpi). With a replica set, a training step
 * splits the global batch (batch_size rows, or the epoch's shorter last
 * batch) into M micro-shards, rows [nb*m/M, nb*(m+1)/M); this replica
 * computes shards [rank*k, (rank+1)*k), k = M/size, each gradient scaled
 * by its rows/nb, and reduce must leave in g (n floats) the sum over all M
 * shards and in st[0..1] the summed loss and accuracy sums. M is micro
 * when > 0 (deterministic mode: slots holds the k shard gradients back to
 * back, st 2 doubles per shard), else size (k = 1, slots NULL, the
 * replica's gradient already in g). A negative return ends the call with
 * that code and err. Every replica must run the same steps on the same
 * data, state and learning rate; BatchNorm statistics are the replica's
 * own (moving statistics from its first shard). */
typedef struct rt_replica {
    int rank, size, micro;
    int (*reduce)(void *ctx, float *g, int64_t n, float *slots, int k, double *st, char *err,
                  size_t errlen);
    /* v[0..n) summed over the replicas in place (metric accumulators) */
    int (*sum)(void *ctx, double *v, int n, char *err, size_t errlen);
    void (*on_destroy)(void *ctx, rt_exec *e); /* from rt_exec_destroy, or NULL */
    void *ctx;
    /* Overlap of the reduce with the backward pass (optional: bucket 0 or
     * a NULL hook leaves it off; never with micro > 0). The gradient splits
     * into buckets [b*bucket, (b+1)*bucket) of g. Before a step's backward
     * pass overlap(ctx) says whether this step overlaps: 1 hands each
     * bucket, scaled by the replica's share, to start(ctx, g + off, cnt)
     * as soon as the backward call that writes its last gradient float has
     * run (rt_plan_bucket_ready), then finish(ctx, st) waits for every
     * bucket started and sums st as reduce does; finish is called once in
     * every step overlap said 1 for, also when a start failed. 0: reduce,
     * as without them.
     * Each bucket is reduced with the same call either way, so the result
     * does not depend on the choice. */
    int64_t bucket;
    int (*overlap)(void *ctx);
    int (*start)(void *ctx, float *g, int64_t n, char *err, size_t errlen);
    int (*finish)(void *ctx, double *st, char *err, size_t errlen);
    /* ZeRO stage 1 (optional, gather NULL: off): the replica updates only
     * the trainable floats [shard_lo, shard_hi) from its reduce's gradient
     * there (the rest of g may be stale: clipping by norm, which reads all
     * of g, needs the whole one), then gather(ctx, w, train_floats) leaves
     * every replica the whole weights. */
    int64_t shard_lo, shard_hi;
    int (*gather)(void *ctx, float *w, int64_t n, char *err, size_t errlen);
    /* The serving replica of a sharded state (optional, server/mpi's
     * rank 0): fills the other replicas' slices into e's slots
     * (rt_exec_opt_slots) when the whole state is read (a checkpoint,
     * rt_exec_save_state, rt_exec_copy_state from e). */
    int (*fetch)(void *ctx, rt_exec *e, char *err, size_t errlen);
} rt_replica;
/* A replica that updates only [lo, hi) keeps only that slice of the
 * optimizer slots: the rest of their pages go back to the system, and
 * rt_exec_load_state writes only the slice. One with a fetch (the serving
 * rank) holds the whole slots only from a fetch, a load or a copy into e
 * until rt_exec_state_release or its next step (by then every replica has
 * the state). */
int rt_exec_shard_slots(rt_exec *e, int64_t lo, int64_t hi);
/* 1 when e holds its whole optimizer slots (not sharded, or held whole
 * for now); 0: a read of the whole state fetches them first */
int rt_exec_slots_held(const rt_exec *e);
/* After the whole state was read (a checkpoint written): a sharded
 * serving replica gives the other slices' pages back, unless it holds
 * them from a load or a copy the replicas have not received yet. No-op
 * otherwise. */
void rt_exec_state_release(rt_exec *e);
/* The optimizer slots s1, s2 (train_floats each: Adam's m and v, RMSprop's
 * and SGD momentum's s1), for server/mpi's gather of the slices:
 * host addresses (the backend's host view; NULL where it has none). */
void rt_exec_opt_slots(rt_exec *e, float **s1, float **s2);
/* e's optimizer state is incomplete (a slice was lost with its replica):
 * rt_exec_save_state and rt_exec_state_spans fail RT_EUNAVAILABLE until a
 * load replaces it. */
void rt_exec_set_torn(rt_exec *e);
/* The order of an in-memory set of n rows in epoch `epoch`, as e's
 * training steps take it (perm: n indices), for server/mpi's feeding of
 * replicas from rank 0's copy. */
void rt_exec_epoch_order(const rt_exec *e, int64_t n, int64_t epoch, int64_t *perm);
/* Rows idx[0..nb) (nb at most the batch size) of in-memory d as a training
 * step reads them, augmented where d->aug asks, by the backend's gather,
 * into host x (nb input rows) and y (nb label rows; NULL: none): rank 0's
 * feed of an augmented set's rows to replicas (server/mpi). 0 or
 * RT_EINVAL. */
int rt_exec_rows(rt_exec *e, const rt_data *d, const int64_t *idx, int64_t nb, float *x, void *y);
/* r NULL: a single process again. RT_EINVAL if size does not divide micro. */
int rt_exec_set_replica(rt_exec *e, const rt_replica *r);
/* For the gradient in buckets of bucket floats: ready[b] (n_ready >= the
 * bucket count) gets the index among the plan's backward calls (0 runs
 * first) after which no call writes into bucket b, -1 when none does.
 * Returns the bucket count, or RT_EINVAL. */
int rt_plan_bucket_ready(const rt_plan *p, int64_t bucket, int *ready, int n_ready);
/* How many times e's state was changed other than by its training steps:
 * rt_exec_set_param, rt_exec_set_lr, rt_exec_load_state and
 * rt_exec_copy_state into e each add one. Replicas that trained in step
 * hold the same state as long as it does not move (server/mpi). */
uint64_t rt_exec_state_edits(const rt_exec *e);

#ifdef __cplusplus
}
#endif
#endif
