/*
 * rt_engine_impl.h - the engine's internals, shared by the sources in
 * server/engine/ and the kernels in server/kernels/cpu/. Nothing outside the
 * engine includes this file; the public API is rt_engine.h.
 *
 * Life of a model:
 *   rt_graph (builder records, rt_graph.c)
 *     -> rt_plan_compile (rt_compile.c), seven named passes: validate
 *        (copy into the plan's arena, resolve names, topological order),
 *        infer_shapes (rt__op_def.infer: shapes and typed parameters), fuse
 *        (the backend's rules), backward (which values need gradients, in
 *        which order kernels run, which gradient writes overwrite and which
 *        add), choose_kernels (the backend's table), plan_memory
 *        (liveness-based, one arena), report. The result is a flat array
 *        of rt__call with buffer offsets.
 *     -> rt_exec (rt_exec.c): resolves offsets to pointers once, then each
 *        step is: gather batch, forward calls, loss, backward calls,
 *        optimizer, each through the backend (rt__backend below).
 *        Nothing is allocated per step.
 *
 * Adding an op: write server/engine/op_<name>.c defining
 *     const rt__op_def rt__op_<name> = {.name = "Name", .infer = ..., ...};
 * add one line X(rt__op_<name>) to RT__OP_LIST below, and give each backend
 * its kernels and one line in its table (server/kernels/cpu/
 * rt_backend_cpu.c). docs/architecture.md walks through it.
 */
#ifndef RTRAIN_ENGINE_IMPL_H
#define RTRAIN_ENGINE_IMPL_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "rt_engine.h"
#include "rt_op_params.h"

#define RT__ERRLEN 200                   /* error messages stay short (gRPC trailers) */
#define RT__MAX_NUMEL (INT64_C(1) << 32) /* elements in one tensor at full batch */
#define RT__MAX_BATCH (1 << 24)
#define RT__MAX_WINDOW (1 << 20) /* conv/pool window, stride, dilation */
#define RT__ALIGN 64             /* arena buffers and parameters: one cache line */

#define RT_ASSERT(c)                                 \
    do {                                             \
        if (!(c))                                    \
            rt__assert_fail(#c, __FILE__, __LINE__); \
    } while (0)
void rt__assert_fail(const char *cond, const char *file, int line);

/* ------------------------------------------------------------------ arena */

/* A bump allocator made of chunks; one rt__arena_free releases everything.
 * Allocations are zeroed and 16-byte aligned. */
typedef struct rt__chunk rt__chunk;
typedef struct rt__arena {
    rt__chunk *head;
    size_t next_cap; /* chunks double from 16 KiB to 1 MiB */
} rt__arena;

void *rt__arena_alloc(rt__arena *a, size_t n);
char *rt__arena_strdup(rt__arena *a, const char *s);
void *rt__arena_memdup(rt__arena *a, const void *p, size_t n);
void rt__arena_free(rt__arena *a);

void *rt__aligned_alloc(size_t n); /* zeroed, RT__ALIGN-aligned, free() */

/* -------------------------------------------------------------------- rng */

/* Counter-based: a value is a pure function of (seed, stream, counter), so
 * results never depend on call boundaries or on the order of draws. */
uint64_t rt__rng_u64(uint64_t seed, uint64_t stream, uint64_t counter);
/* Its parts, inline for kernels that draw a value per element: the key of
 * (seed, stream) once, then one mix a counter (rt__rng_at(rt__rng_key(s,
 * t), c) == rt__rng_u64(s, t, c); a loop of rt__rng_at vectorises) */
static inline uint64_t rt__mix64(uint64_t z)
{
    /* splitmix64's finalizer: a bijection with full avalanche */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline uint64_t rt__rng_key(uint64_t seed, uint64_t stream)
{
    return rt__mix64(rt__mix64(seed + 0x9e3779b97f4a7c15ull) ^ (stream * 0xd6e8feb86659fd93ull));
}
static inline uint64_t rt__rng_at(uint64_t key, uint64_t counter)
{
    return rt__mix64(key ^ (counter * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull));
}
static inline float rt__rng_unit(uint64_t seed, uint64_t stream, uint64_t ctr)
{
    /* 24 random bits: uniform in [0, 1) exactly representable as float */
    return (float)(rt__rng_u64(seed, stream, ctr) >> 40) * (1.0f / 16777216.0f);
}
/* RNG streams: keep distinct so initializers, shuffles and dropout never
 * share random numbers. */
#define RT__STREAM_INIT 0x1000000ull /* + param index */
#define RT__STREAM_SHUFFLE 0x2000000ull
#define RT__STREAM_DROPOUT 0x3000000ull /* + node index */

/* The draw element i of a dropout's batch takes: itself, or with a
 * noise_shape the index of its mask element (rt__dropout_params) */
static inline int64_t rt__drop_key(const rt__dropout_params *p, int64_t i)
{
    if (!p->R)
        return i;
    int64_t j = i % p->per, key = (i / p->per) * p->ms[0];
    for (int k = p->R - 1; k >= 1; k--) {
        key += (j % p->d[k]) * p->ms[k];
        j /= p->d[k];
    }
    return key;
}

/* Keras 1's Embedding(dropout=rate) in training: row v of W is kept with
 * probability 1 - rate, one draw per row and step shared by the batch
 * (Keras 1 draws K.random_binomial((input_dim,)) once per call), and the
 * kept rows scale by 1 / (1 - rate): the factor W's row v is multiplied
 * by. Both backends draw it here, so they drop the same rows. */
static inline float rt__embed_row_scale(uint64_t seed, int64_t step, uint64_t node_id, float rate,
                                        int64_t v)
{
    const uint64_t ctr = ((uint64_t)step << 36) | (uint64_t)v;
    return rt__rng_unit(seed, RT__STREAM_DROPOUT + node_id, ctr) >= rate ? 1.0f / (1.0f - rate)
                                                                         : 0.0f;
}

/* BandMask's rule for element (i, j) of a (T, S) matrix */
static inline int rt__band_keep(const rt__band_params *p, int64_t i, int64_t j)
{
    const int64_t d = i > j ? i - j : j - i;
    return (!p->causal || i >= j) && (!p->window || d < p->window);
}

/* ------------------------------------------------------------------ graph */

typedef enum rt__tkind { RT__T_INPUT, RT__T_PARAM, RT__T_NODE } rt__tkind;

/* A shape. batched: d[] are per-sample dims and the batch dimension is an
 * implicit leading dim of runtime size n <= batch_size; otherwise d[] are
 * the full dims. */
typedef struct rt__shape {
    int ndim;
    int batched;
    int64_t d[RT_MAX_DIMS];
} rt__shape;

int64_t rt__shape_numel(const rt__shape *s); /* per sample when batched */

/* The order callers see a parameter in when the engine stores it in
 * another (rt_graph_set_param_view): the user's array of shape user, read
 * as dims d (rank n), transposed by perm, is the engine's. n 0: none. */
typedef struct rt__view {
    int n;
    int64_t d[RT_MAX_DIMS];
    int perm[RT_MAX_DIMS];
    rt__shape user;
} rt__view;

/* One graph entry: the data input, a parameter or a node. */
typedef struct rt__entry {
    rt__tkind kind;
    const char *name;
    rt_dtype dt;
    rt__shape shape;    /* input/param: as declared */
    rt_init init;       /* param */
    int trainable;      /* param */
    const float *value; /* param: explicit values or NULL */
    int has_opts;       /* param: opts set by rt_graph_set_param_opts */
    rt_param_opts opts;
    rt__view view;  /* param: rt_graph_set_param_view */
    const char *op; /* node */
    int n_in;
    const char **in;
    int n_attr;
    rt_attr *attrs;
} rt__entry;

struct rt_graph {
    rt__arena arena;
    rt__entry *e;
    int n, cap;
    const char *output; /* NULL: the last node */
    /* rt_graph_set_loss_mask(s): n_masks names, each a node or NULL */
    const char *loss_mask[RT_MAX_HEADS];
    int n_masks;
    int n_heads; /* rt_graph_set_outputs: the heads' nodes */
    const char *heads[RT_MAX_HEADS];
    const char *head_label[RT_MAX_HEADS]; /* rt_graph_name_outputs, or NULL */
    char err[RT__ERRLEN];
};

/* ---------------------------------------------------------------- kernels */

typedef struct rt__node rt__node;
typedef struct rt__op_def rt__op_def;

/* Per-step state every kernel may read. Lives in the exec. */
typedef struct rt__run {
    int64_t n;    /* samples in this batch, 1..batch_size */
    int64_t step; /* global step (dropout masks are keyed by it) */
    uint64_t seed;
    int training;
    int update_stats;    /* a training forward moves BatchNorm's moving
                         * statistics; not in rt_exec_compute_grads */
    int carry;           /* stateful RNNs keep their final states (every
                          * forward but rt_exec_compute_grads's) */
    float *gemm_scratch; /* small-GEMM transposes */
    int64_t gemm_scratch_floats;
    double *act_pen; /* ActivityReg forwards add their loss term here */
    /* MPI replicas (rt_replica) in a training step, else NULL: BatchNorm
     * nodes with sync (or every one with sync_all) sum their statistics
     * over the replicas with bn_sum; bn_share is this replica's rows over
     * the global batch's; a failed sum leaves its error in bn_err (the
     * later sums of the step are skipped). */
    int (*bn_sum)(void *ctx, double *v, int n, char *err, size_t errlen);
    void *bn_ctx;
    int bn_sync_all;
    double bn_share;
    char *bn_err;
    size_t bn_errlen;
} rt__run;

/* One kernel call with resolved pointers. Forward reads x[] and writes y;
 * backward reads dy (and x[]/y where the op says so) and writes dx[i] for
 * the inputs that need a gradient (NULL otherwise): overwrite, or add when
 * accum bit i is set (the gradient buffer already holds another consumer's
 * contribution). */
typedef struct rt__kargs {
    const rt__node *nd;
    const rt__run *r;
    float *y, *dy;
    float *x[RT__MAX_IN];
    float *dx[RT__MAX_IN];
    float *scratch;
    float *ws; /* the node's workspace (rt__node.ws_floats) */
    /* a stateful RNN's forward: its carried states, h (B,U) then LSTM's c
     * (B,U), read as the initial states and, when run.carry, overwritten
     * by the final ones (the exec owns them); else NULL */
    float *state;
    unsigned accum;
} rt__kargs;

typedef void (*rt__kfn)(const rt__kargs *a);

/* The random image ops' kernels (rt_imgaug.c): the ops' definition, which
 * both backends' tables name */
void rt__imgaug_fwd(const rt__kargs *a);
void rt__imgaug_bwd(const rt__kargs *a);
/* Their rows, the same in every backend's table ({op, fused reader,
 * forward, backward, can_fuse, prepare}); the op objects are declared
 * further down */
/* clang-format off */
#define RT__IMGAUG_ROWS                                                           \
    {&rt__op_rndflip, NULL, rt__imgaug_fwd, rt__imgaug_bwd, NULL, NULL},          \
    {&rt__op_rndrotate, NULL, rt__imgaug_fwd, rt__imgaug_bwd, NULL, NULL},        \
    {&rt__op_rndtranslate, NULL, rt__imgaug_fwd, rt__imgaug_bwd, NULL, NULL},     \
    {&rt__op_rndzoom, NULL, rt__imgaug_fwd, rt__imgaug_bwd, NULL, NULL},          \
    {&rt__op_rndcontrast, NULL, rt__imgaug_fwd, rt__imgaug_bwd, NULL, NULL},      \
    {&rt__op_rndbright, NULL, rt__imgaug_fwd, rt__imgaug_bwd, NULL, NULL},        \
    {&rt__op_rndcrop, NULL, rt__imgaug_fwd, rt__imgaug_bwd, NULL, NULL}
/* clang-format on */

/* ------------------------------------------------------------------- ops */

/* Compile context given to infer(): for errors and attributes. */
typedef struct rt__cc rt__cc;

/* Format "node 'name': ..." into the compile error and return code. */
int rt__cerr(rt__cc *cc, const rt__node *nd, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
const rt_attr *rt__attr(const rt__node *nd, const char *name);
/* the batch size the plan is compiled for */
int64_t rt__cc_batch(const rt__cc *cc);
/* Typed attribute getters: def when absent; RT_EINVAL via rt__cerr when the
 * kind is wrong (then *ok is set to 0). */
int64_t rt__attr_int(rt__cc *cc, const rt__node *nd, const char *name, int64_t def, int *ok);
double rt__attr_float(rt__cc *cc, const rt__node *nd, const char *name, double def, int *ok);
const char *rt__attr_str(rt__cc *cc, const rt__node *nd, const char *name, const char *def,
                         int *ok);
/* ints attribute: returns its count (copies at most max) or -1 when
 * absent; error on kind */
int rt__attr_ints(rt__cc *cc, const rt__node *nd, const char *name, int64_t *out, int max, int *ok);
/* the "activation" attribute (absent, "linear", "relu", "sigmoid", "tanh")
 * as RT__ACT_*; RT_EINVAL via rt__cerr for anything else (op_dense.c) */
int rt__attr_act(rt__cc *cc, const rt__node *nd, int *act);
/* Flops of a layer that is one GEMM of R rows, K inputs, N outputs (Dense,
 * Conv2D as im2col), with a bias and an activation when set, and the
 * backward's products for the inputs need_dx names (bit 0 x, 1 W, 2 b)
 * (op_dense.c) */
uint64_t rt__gemm_flops(uint64_t R, uint64_t K, uint64_t N, int bias, int act, unsigned need_dx);
/* One spatial dim of a convolution or pool (op_conv.c, also the Keras
 * importer's): in cells, window k, stride s, dilation d (k, s, d in
 * 1..RT__MAX_WINDOW, in <= 2^32), TensorFlow padding: "same" gives ceil(in / s)
 * outputs and pads half before, the odd cell after; "valid" uses full
 * windows. Returns the output size, or -1 when the dilated window does
 * not fit 'valid'; *pad (if not NULL) gets the cells before. */
int64_t rt__window_out(int64_t in, int64_t k, int64_t s, int64_t d, int same, int64_t *pad);

/* The loss as a fusion target: a backend rule (Softmax, &rt__op_crossentropy)
 * lets (sparse) categorical crossentropy read a Softmax's logits. It is no
 * graph op (rt__op_find does not know it). Defined in rt_loss.c. */
extern const rt__op_def rt__op_crossentropy;

struct rt__op_def {
    const char *name;
    int min_in, max_in;
    unsigned bwd_needs_in; /* bit i: backward reads input i's value */
    int bwd_needs_out;     /* backward reads the output value */
    unsigned no_grad_in;   /* bit i: input i never gets a gradient */
    rt__pkind params;      /* which member of rt__op_params infer fills */
    /* Validate inputs (nd->in_shape, nd->in_dt) and attributes, set
     * nd->out and the op's typed parameters (nd->p, rt_op_params.h).
     * Returns 0 or rt__cerr(...). */
    int (*infer)(rt__cc *cc, rt__node *nd);
    /* FLOPs at batch B: forward, and backward given which inputs need dx. */
    uint64_t (*flops)(const rt__node *nd, int64_t B, unsigned need_dx);
};

/* The op table. An op is one file defining a const rt__op_def (name,
 * arity, which values its backward reads, typed parameters, infer = shape
 * inference and validation, flops) plus one line here. It names no
 * kernel: each backend maps ops to kernels in its own table
 * (server/kernels/cpu/rt_backend_cpu.c). Compile, autodiff, memory
 * planning and rt_engine_op_names() take everything from the definition;
 * see op_dense.c and docs/architecture.md. */
#define RT__OP_LIST(X)        \
    X(rt__op_dense)           \
    X(rt__op_matmul)          \
    X(rt__op_add)             \
    X(rt__op_sub)             \
    X(rt__op_mul)             \
    X(rt__op_relu)            \
    X(rt__op_sigmoid)         \
    X(rt__op_tanh)            \
    X(rt__op_softmax)         \
    X(rt__op_logsoftmax)      \
    X(rt__op_reshape)         \
    X(rt__op_flatten)         \
    X(rt__op_identity)        \
    X(rt__op_dropout)         \
    X(rt__op_conv2d)          \
    X(rt__op_maxpool2d)       \
    X(rt__op_avgpool2d)       \
    X(rt__op_globalavgpool)   \
    X(rt__op_batchnorm)       \
    X(rt__op_concat)          \
    X(rt__op_div)             \
    X(rt__op_max)             \
    X(rt__op_min)             \
    X(rt__op_prelu)           \
    X(rt__op_elu)             \
    X(rt__op_selu)            \
    X(rt__op_leakyrelu)       \
    X(rt__op_gelu)            \
    X(rt__op_erf)             \
    X(rt__op_softplus)        \
    X(rt__op_softsign)        \
    X(rt__op_hardsigmoid)     \
    X(rt__op_swish)           \
    X(rt__op_clip)            \
    X(rt__op_thresholdedrelu) \
    X(rt__op_kerasrelu)       \
    X(rt__op_exp)             \
    X(rt__op_scale)           \
    X(rt__op_mish)            \
    X(rt__op_hardswish)       \
    X(rt__op_logsigmoid)      \
    X(rt__op_sqrt)            \
    X(rt__op_abs)             \
    X(rt__op_log)             \
    X(rt__op_pad)             \
    X(rt__op_transpose)       \
    X(rt__op_reducemean)      \
    X(rt__op_reducesum)       \
    X(rt__op_reducemax)       \
    X(rt__op_reducemin)       \
    X(rt__op_reduceprod)      \
    X(rt__op_layernorm)       \
    X(rt__op_convtranspose)   \
    X(rt__op_upsample)        \
    X(rt__op_globalmaxpool)   \
    X(rt__op_spatialdropout)  \
    X(rt__op_gaussiannoise)   \
    X(rt__op_gaussiandropout) \
    X(rt__op_simplernn)       \
    X(rt__op_lstm)            \
    X(rt__op_gru)             \
    X(rt__op_embedding)       \
    X(rt__op_actreg)          \
    X(rt__op_seqmask)         \
    X(rt__op_masking)         \
    X(rt__op_batchmatmul)     \
    X(rt__op_bandmask)        \
    X(rt__op_rndflip)         \
    X(rt__op_rndrotate)       \
    X(rt__op_rndtranslate)    \
    X(rt__op_rndzoom)         \
    X(rt__op_rndcontrast)     \
    X(rt__op_rndbright)       \
    X(rt__op_rndcrop)

#define RT__OP_DECL(def) extern const rt__op_def def;
RT__OP_LIST(RT__OP_DECL)
#undef RT__OP_DECL

const rt__op_def *rt__op_find(const char *name);

typedef struct rt__kernel rt__kernel;

/* A node of a compiled plan. */
struct rt__node {
    const char *name;
    const rt__op_def *op;
    int id; /* index of its entry (RNG stream for dropout) */
    int n_in;
    int in[RT__MAX_IN]; /* entry indices */
    const char *in_name[RT__MAX_IN];
    const rt__shape *in_shape[RT__MAX_IN];
    rt_dtype in_dt[RT__MAX_IN];
    int n_attr;
    const rt_attr *attrs;
    rt__shape out;
    rt__op_params p; /* typed, filled by op->infer */
    /* A backend fusion rule let this node absorb its only reader: that
     * op and its parameters (out is then the reader's output) or NULL. */
    const rt__op_def *fused;
    const rt__op_params *fused_p; /* in the plan's arena */
    int bwd_needs_out;            /* op's flag, or a fused reader's */
    /* A Conv2D that took a zero Pad into its padding (the fuse pass's
     * rt__fold_pads): the Pad's top, left, bottom, right; all 0 if none */
    int64_t pad_fold[4];
    /* chosen by the backend (choose-kernels pass) */
    const rt__kernel *kern;
    void *kdata;            /* the kernel's per-node data (plan arena) */
    int64_t scratch_floats; /* the kernel's scratch at the plan's batch */
    /* workspace the forward call fills and the backward call reads (a
     * recurrent op's states over all steps), at the plan's batch; lives
     * from the node's forward call to its backward call */
    int64_t ws_floats;
    /* RT_PREC_*: asked (the attribute or the config) until choose_kernels,
     * then what the chosen kernel computes in: RT_PREC_BF16 only where the
     * backend's kernel_bf16 gave one */
    int prec;
    /* bf16 activation storage (choose_kernels, from the backend's bf16_io):
     * bit i of bf16_in: input i is a value stored bf16 (uint16_t, round
     * to nearest even); bf16_out: this node stores its output bf16. Only
     * on RT_PREC_BF16 nodes; gradients are always float32. */
    unsigned bf16_in;
    int bf16_out;
    /* bit i: the node's backward call computes input i's gradient (the
     * backward pass, before choose_kernels; 0 where it has no backward
     * call), so a prepare can keep in its workspace only what that call
     * reads */
    unsigned bwd_dx;
};

/* Typed parameter accessors: rt__dense_p(nd) (mutable, for infer) and
 * rt__dense_cp(nd) (const, for kernels); same for the other kinds. */
#define RT__PARAM_ACCESSORS(kind, field, type)                     \
    static inline type *rt__##field##_p(rt__node *nd)              \
    {                                                              \
        RT_ASSERT(nd->op->params == (kind));                       \
        return &nd->p.field;                                       \
    }                                                              \
    static inline const type *rt__##field##_cp(const rt__node *nd) \
    {                                                              \
        RT_ASSERT(nd->op->params == (kind));                       \
        return &nd->p.field;                                       \
    }
RT__PARAM_ACCESSORS(RT__P_DENSE, dense, rt__dense_params)
RT__PARAM_ACCESSORS(RT__P_BCAST, bcast, rt__bcast_params)
RT__PARAM_ACCESSORS(RT__P_SOFTMAX, softmax, rt__softmax_params)
RT__PARAM_ACCESSORS(RT__P_DROPOUT, dropout, rt__dropout_params)
RT__PARAM_ACCESSORS(RT__P_ACTREG, actreg, rt__actreg_params)
RT__PARAM_ACCESSORS(RT__P_CONV, conv, rt__conv_params)
RT__PARAM_ACCESSORS(RT__P_GAP, gap, rt__gap_params)
RT__PARAM_ACCESSORS(RT__P_BN, bn, rt__bn_params)
RT__PARAM_ACCESSORS(RT__P_CONCAT, concat, rt__concat_params)
RT__PARAM_ACCESSORS(RT__P_UNARY, unary, rt__unary_params)
RT__PARAM_ACCESSORS(RT__P_MAP, map, rt__map_params)
RT__PARAM_ACCESSORS(RT__P_LN, ln, rt__ln_params)
RT__PARAM_ACCESSORS(RT__P_UPSAMPLE, upsample, rt__upsample_params)
RT__PARAM_ACCESSORS(RT__P_RNN, rnn, rt__rnn_params)
RT__PARAM_ACCESSORS(RT__P_EMBED, embed, rt__embed_params)
RT__PARAM_ACCESSORS(RT__P_SEQMASK, seqmask, rt__seqmask_params)
RT__PARAM_ACCESSORS(RT__P_BMM, bmm, rt__bmm_params)
RT__PARAM_ACCESSORS(RT__P_BAND, band, rt__band_params)
RT__PARAM_ACCESSORS(RT__P_IMAGE, image, rt__image_params)
#undef RT__PARAM_ACCESSORS

/* Rows of a batched-or-not shape at runtime batch n: product of all dims
 * but the last (including the batch). */
static inline int64_t rt__rows(const rt__shape *s, int64_t n)
{
    int64_t r = s->batched ? n : 1;
    for (int i = 0; i + 1 < s->ndim; i++)
        r *= s->d[i];
    if (!s->batched && s->ndim == 0)
        return 1;
    return r;
}
static inline int64_t rt__numel_n(const rt__shape *s, int64_t n)
{
    return s->batched ? n * rt__shape_numel(s) : rt__shape_numel(s);
}

/* ---------------------------------------------------------------- backend */

/* A backend owns tensor memory and runs every part of a step: the op
 * kernels of its table, the batch gather, the loss and its gradient, the
 * metrics, regularizers, clipping and the optimizer update. It is a table
 * of function pointers plus its own context, as ggml's backends; each is a
 * folder server/kernels/NAME/ built as its own library, which the program
 * registers (rt__backend_register; the daemon's rt_backends.c). The engine
 * links none and calls them only through this table (docs/backends.md).
 *
 * Memory. The arena, the parameter block (weights | gradients | optimizer
 * states) and the scratch live in backend memory from alloc. Its pointers
 * are handles the engine adds offsets to but never dereferences, as CUDA
 * device pointers; it reads and writes through upload/download, or through
 * host() where the backend's memory is the host's (the CPU backends: no
 * copy at all). Gradient buckets for the MPI all-reduce are ranges of the
 * gradient block read through host().
 *
 * Kernels. One kernel entry serves one op, or one op with the reader it
 * absorbs (a fusion rule: Dense + Relu, Conv2D + MaxPool2D, Softmax + the
 * crossentropy loss). Compile's fuse pass asks kernel(op, reader op) for
 * every producer whose value has exactly one reader and fuses when the
 * entry exists and its can_fuse agrees. */
typedef struct rt__call rt__call;
struct rt__kernel {
    const rt__op_def *op;
    const rt__op_def *fused; /* the absorbed reader's op, or NULL */
    rt__kfn fwd, bwd;
    /* may prod absorb its only reader cons (NULL: always) */
    int (*can_fuse)(const rt__node *prod, const rt__node *cons);
    /* Derived sizes, computed once at compile: set nd->scratch_floats (and
     * nd->ws_floats) for batch B and nd->kdata (allocated in A). NULL: no
     * scratch, no data.
     * Returns 0 or RT_ENOMEM. */
    int (*prepare)(rt__node *nd, int64_t B, rt__arena *A);
};

/* A backend table's entry for (op, fused), or NULL: the one lookup of
 * every backend's kernel tables. */
static inline const rt__kernel *rt__kernel_find(const rt__kernel *t, size_t n, const rt__op_def *op,
                                                const rt__op_def *fused)
{
    for (size_t i = 0; i < n; i++)
        if (t[i].op == op && t[i].fused == fused)
            return &t[i];
    return NULL;
}

/* The batch gather: rows idx[0..nb) of the host arrays x (in floats a row)
 * and y (ln 4-byte values a row; NULL: no labels), or rows start..start+nb
 * when idx is NULL, into the backend buffers xb and yb. With aug (not
 * NULL) it also augments: batch row i's floats aug->off .. off + h w c
 * become its source row's stored image (aug->img, host, 8-bit) with the
 * engine's draws draw[i] (host), exactly as rt_aug_apply computes them. */
typedef struct rt__gather_args {
    float *xb;
    void *yb;
    const float *x;
    const void *y;
    const int64_t *idx;
    int64_t start, nb, in, ln;
    const rt_augment *aug;
    const rt_aug_draw *draw;
} rt__gather_args;

typedef struct rt__macc rt__macc;
typedef struct rt__lossinfo rt__lossinfo;
typedef struct rt__hacc rt__hacc;

typedef struct rt__backend {
    const char *name;
    /* what rtrain info shows as the device's backend ("cpu+onednn-3.0") */
    const char *(*describe)(void *ctx);
    /* the default backend is the registered one with the highest rank */
    int rank;
    void *context;
    /* floats of scratch every call of a step may share (rt__run.gemm_scratch) */
    int64_t shared_scratch_floats;

    /* ---- kernels */
    /* the entry for op alone (fused NULL) or op absorbing a reader of op
     * fused; NULL when this backend has none */
    const rt__kernel *(*kernel)(void *ctx, const rt__op_def *op, const rt__op_def *fused);
    /* whether this backend runs nd (after infer: its parameters are set) */
    int (*supports_op)(void *ctx, const rt__node *nd);
    /* whether it runs the whole plan (its loss, its config), after the
     * kernels are chosen: 0, or an error code with a message. NULL: yes */
    int (*check)(void *ctx, const rt_plan *p, char *err, size_t errlen);
    /* Mixed bfloat16 (RT_PREC_BF16 nodes). precision: 0 when this backend
     * computes in prec here (the CPU backend asks oneDNN whether the CPU
     * has bf16 instructions), else an error code with a message; NULL:
     * float32 only. kernel_bf16: as kernel, for the bf16 node nd (its
     * parameters are set: the backend may decide by shape); NULL where it
     * has no bf16 kernel for it (the node runs float32, fused by the
     * float32 rules). */
    int (*precision)(void *ctx, int prec, char *err, size_t errlen);
    const rt__kernel *(*kernel_bf16)(void *ctx, const rt__node *nd, const rt__op_def *fused);
    /* bf16 activation storage, for a bf16 node nd after its kernel's
     * prepare: bit i (RT__BF16_IN(i)) when its kernel reads input i stored
     * bf16, RT__BF16_OUT when it can store its output bf16 (its backward
     * then reads it so too), RT__BF16_STORE_ONLY when the node computes in
     * float32 and is bf16 only by what it stores (it reverts to float32
     * and its float32 kernel where it reads and writes float32). Compile
     * stores a value bf16 where its producer and every reader agree and
     * neither the loss nor the output reads it, sets nd->bf16_in/bf16_out
     * and runs the prepare again (RT__BF16_EMULATED: see there). NULL:
     * every value float32. */
    unsigned (*bf16_io)(void *ctx, const rt__node *nd);
    /* run calls[0..n) with their resolved arguments args[0..n) */
    void (*run)(void *ctx, const rt__call *calls, const rt__kargs *args, int n);

    /* ---- memory */
    /* bytes of zeroed backend memory, RT__ALIGN-aligned; NULL when out */
    void *(*alloc)(void *ctx, size_t bytes);
    void (*release)(void *ctx, void *buf);
    void (*upload)(void *ctx, void *dst, const void *src, size_t bytes);
    void (*download)(void *ctx, void *dst, const void *src, size_t bytes);
    /* the host address of backend memory at buf, or NULL where it has none
     * (the engine then stages through upload/download) */
    void *(*host)(void *ctx, void *buf);

    /* ---- the step (every pointer but the rt__macc, the doubles and sw is
     * backend memory) */
    void (*gather)(void *ctx, const rt__gather_args *g);
    /* Loss of one batch: y (n, out_numel), lab (n, lab_numel) i32 or f32.
     * Adds the summed per-sample losses to *loss_sum and accuracies to
     * *acc_sum; when dy is not NULL writes d(mean loss)/dy (overwriting).
     * sw (host, n floats) or NULL: Keras' sample weights, sum(w_i l_i)/n
     * (accuracy unweighted). scratch: 2 * n * out_numel floats. */
    void (*loss)(void *ctx, const rt__lossinfo *L, const float *y, const void *lab, int64_t n,
                 const float *sw, float *dy, double *loss_sum, double *acc_sum, float *scratch);
    /* add a batch to the metric accumulators (y as the loss reads it:
     * logits when the Softmax was fused into the loss) */
    void (*metrics)(void *ctx, const rt__lossinfo *L, uint32_t metrics, const float *y,
                    const void *lab, int64_t n, rt__macc *a);
    /* Several outputs (L->n_heads): each output's own part of a batch, as
     * for one output: adds its unweighted loss sum (sample weights sw as
     * the loss applies them) to h->loss[k], its accuracy sum to h->acc[k]
     * where the head asks for accuracy, and its metrics (L->head[k] and
     * mets[k]) to h->m[k]. scratch: as the loss's. */
    void (*heads)(void *ctx, const rt__lossinfo *L, const uint32_t *mets, const float *y,
                  const void *lab, int64_t n, const float *sw, rt__hacc *h, float *scratch);
    /* the L1/L2 penalty of every regularized parameter (w: the parameter
     * block); when g is not NULL adds its gradient to the trainable ones */
    double (*regularize)(void *ctx, const rt_plan *p, const float *w, float *g);
    /* every trainable parameter's constraint, on w in place */
    void (*constrain)(void *ctx, const rt_plan *p, float *w);
    /* scale g (count floats) so its L2 norm is at most clip; the norm */
    double (*clip)(void *ctx, float *g, int64_t count, float clip);
    /* one update of count floats at 1-based step t with rate lr (the
     * schedule's or the live override, rt_exec.c) */
    void (*update)(void *ctx, const rt_train_config *c, float lr, int64_t t, float *w, float *g,
                   float *s1, float *s2, int64_t count);
    /* dst[i] = src[i] * s (dst may be src): a replica's share of the batch */
    void (*scale)(void *ctx, float *dst, const float *src, int64_t count, float s);

    /* ---- around each engine call (train, evaluate, predict, gradients),
     * on the calling thread: enter sets the backend's mode and returns
     * what leave restores (the CPU backend flushes denormals to zero).
     * NULL: none. */
    uint64_t (*enter)(void *ctx);
    void (*leave)(void *ctx, uint64_t saved);
} rt__backend;

/* rt_backend.c: the registry. A program registers the backends it links
 * (before compiling); the selected one (rt_backend_select, or RT_BACKEND in
 * the environment, else the highest rank) compiles every plan. */
void rt__backend_register(const rt__backend *b);
const rt__backend *rt__backend_current(void);

#define RT__BF16_IN(i) (1u << (i))
#define RT__BF16_OUT (1u << 16)
#define RT__BF16_STORE_ONLY (1u << 17)
/* with RT__BF16_OUT: the backend emulates the storage (an oracle): the
 * value is stored float32, holding the bf16 values the producer rounded
 * its output to, and compile sizes it at 4 bytes */
#define RT__BF16_EMULATED (1u << 18)
/* whether nd moves, picks or combines values sample by sample (Pad,
 * MaxPool2D, AvgPool2D, GlobalAvgPool, Concat, Flatten, Reshape with every
 * input batched; Add, Sub, Mul, Div, Max, Min with at least one, the rest
 * broadcast over the batch; unfused, its output batched): the ops a
 * backend may run on bf16-stored values a sample at a time (rt_compile.c) */
int rt__bf16_sample_op(const rt__node *nd);
/* whether op is one of those kinds (whatever its node): a backend's bf16
 * kernel for one runs only where rt__bf16_sample_op holds */
int rt__bf16_sample_kind(const rt__op_def *op);
/* the binaries among them */
int rt__bf16_binary_kind(const rt__op_def *op);
/* RT__BF16_IN bits of such a node's batched inputs: the ones it may read
 * stored bf16 */
unsigned rt__bf16_sample_in(const rt__node *nd);

/* ------------------------------------------------------------------- plan */

enum { RT__SP_NONE = 0, RT__SP_ARENA, RT__SP_PARAM, RT__SP_GRAD };
/* 8 bytes: a call holds 2 * RT__MAX_IN of them */
typedef struct rt__ref {
    uint64_t space : 2; /* RT__SP_* */
    uint64_t off : 62;  /* bytes in arena; floats in param/grad blocks */
} rt__ref;

struct rt__call {
    rt__kfn fn;
    const rt__node *nd;
    int bwd;
    rt__ref y, dy, scratch, ws;
    rt__ref x[RT__MAX_IN], dx[RT__MAX_IN];
    unsigned accum;
};

typedef struct rt__param {
    const char *name;
    rt__shape shape;
    int64_t numel;
    int trainable;
    rt_init init;
    const float *value; /* explicit initial values (plan arena) or NULL */
    rt_param_opts opts; /* zeroed when the graph set none */
    rt__view view;      /* the order callers see it in (n 0: the engine's) */
    int64_t off;        /* floats into the parameter block */
    int64_t goff;       /* floats into grad/opt blocks (trainable) */
    int entry;
} rt__param;

/* How the loss reads labels against the output. */
struct rt__lossinfo {
    rt_loss_kind kind;
    int from_logits;
    int64_t classes;   /* last dim of the output per row */
    int64_t rows;      /* rows per sample: out numel / classes */
    int64_t out_numel; /* per sample */
    int64_t lab_numel; /* per sample */
    int lab_bcast;     /* one label per row, broadcast over classes */
    rt_dtype lab_dt;
    int acc;           /* accuracy requested */
    int softmax_fused; /* (sparse) CE on a Softmax output, computed from
                               the Softmax's input (logits), as Keras does */
    /* PyTorch losses (rt_loss_torch.c). cross_entropy and nll_loss read
     * the class axis as PyTorch does, the first per-sample dim: classes is
     * out dim 0, rows (= inner) the positions per class, stride inner. */
    int64_t inner;
    int prob_target; /* cross_entropy: f32 probability targets */
    rt_reduction reduction;
    float smoothing, beta;
    int64_t ignore_index;
    const float *cw; /* class weights (classes floats) or NULL */
    const float *pw; /* pos_weight (n_pw floats: 1 or the last dim) or NULL */
    int64_t n_pw;
    /* several outputs: n_heads sub-losses over the packed output; head k
     * reads out_off[k] + its out_numel values of each sample's output and
     * lab_off[k] + its lab_numel labels, weighted by weight[k] */
    int n_heads;
    struct rt__lossinfo *head;
    int64_t *out_off, *lab_off;
    float *weight;
};

struct rt_plan {
    atomic_int refs;
    rt__arena arena; /* everything below points into it */
    rt_train_config cfg;
    rt_compile_report rep;
    const rt__backend *backend;
    int n_entries;
    const char **entry_name;
    rt__shape in_shape; /* per sample */
    int input_entry;    /* the data input's entry index */
    int64_t in_numel;
    rt__node *nodes; /* topological order, only what the output needs */
    int n_nodes;
    rt__shape out_shape;
    rt__shape head_shape[RT_MAX_HEADS];  /* several outputs: each head's */
    const char *head_name[RT_MAX_HEADS]; /* and its name (plan arena) */
    rt__param *params;                   /* trainable first, in graph order */
    int n_params;
    int64_t param_floats; /* parameter block */
    int64_t train_floats; /* gradient and each optimizer-state block */
    rt__call *calls;      /* n_fwd forward calls, then n_bwd backward */
    int n_fwd, n_bwd;
    rt__ref x_buf, lab_buf, out_val, out_grad;
    rt__ref loss_in, loss_grad; /* what the loss reads and writes: the
                                    output, or the logits under a fused Softmax */
    /* rt_graph_set_loss_mask(s): bit k set when output k (0: the one
     * output) has its loss masked by the (B, rows) value at loss_mask[k] */
    unsigned has_loss_mask;
    rt__ref loss_mask[RT_MAX_HEADS];
    uint64_t arena_bytes;
    int64_t gemm_scratch_floats;
    rt__lossinfo loss;
};

/* --------------------------------------------------------------- internals */

/* rt_loss.c: whether the labels serve the loss (RT_ESHAPE, RT_EDTYPE with a
 * message); the backends compute it (rt__backend.loss) */
int rt__loss_check(const rt__lossinfo *L, const rt_train_config *cfg, char *err, size_t errlen);
/* rt_loss_torch.c: the same for PyTorch's losses */
int rt__loss_torch_check(const rt__lossinfo *L, char *err, size_t errlen);

/* rt_optim.c */
float rt__sched_lr(const rt_train_config *c, int64_t step);

/* rt_metrics.c: Keras' metric accumulators over an epoch or an evaluation */
#define RT__AUC_T 200
struct rt__macc {
    double sum[RT_METRIC_MAX]; /* summed per-sample values */
    double sq, elems;          /* RMSE */
    double tp, fp, fn;         /* precision, recall at 0.5 */
    double auc_tp[RT__AUC_T], auc_fp[RT__AUC_T], pos, neg;
    int64_t n;
};
void rt__metrics_values(uint32_t metrics, const rt__macc *a, rt_metrics *out);
/* several outputs: every output's loss, accuracy and metrics sums */
struct rt__hacc {
    double loss[RT_MAX_HEADS], acc[RT_MAX_HEADS];
    rt__macc m[RT_MAX_HEADS];
};
/* appends each output's values (rt_metrics.value_head) over n samples */
void rt__metrics_heads(const rt_plan *p, const rt__hacc *h, int64_t n, rt_metrics *out);
/* a metric the labels cannot serve: RT_ESHAPE with a message */
int rt__metrics_check(const rt__lossinfo *L, uint32_t metrics, char *err, size_t errlen);

/* Keras-style initializers (rt_exec.c) */
void rt__init_param(const rt__param *pr, int index, uint64_t seed, float *w);

#endif
