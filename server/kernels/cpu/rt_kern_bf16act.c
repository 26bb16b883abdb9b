/*
 * rt_kern_bf16act.c - bf16 activation storage (Keras' mixed_bfloat16: a
 * layer's outputs are bf16, its arithmetic float32): which bf16 nodes read
 * and write values stored bf16 in the arena (rt_kern_bf16_io, the CPU
 * backend's bf16_io), and the elementwise kernels that do.
 *
 * Relu and the activations of op_act.c (Clip, Keras' ReLU(max_value), ...)
 * run on chunks of RT__CH values: widened from bf16 (or read float32)
 * into a buffer on the stack, computed in float32 as the float32 kernels
 * compute them, rounded to bf16 (or written float32). Their gradients are
 * float32. BatchNorm reads and writes bf16 in its own kernels
 * (rt_kern_norm.c; statistics in double, as in float32); Dense, MatMul
 * and Conv2D read a bf16 input directly and write a bf16 output from
 * their primitives (rt_kern_bf16.c).
 *
 * Concat copies rows (2-byte values where both sides are bf16) and Add
 * (of two tensors of the output's shape) adds chunks widened on the stack.
 * Pad runs its float32 kernel a sample at a time (rt_kern_bf16_smp_*):
 * each thread widens its sample's bf16 input into its scratch, runs the
 * float32 kernel on that one sample, and rounds the sample's output into
 * y, in cache; its backward reads dy only. MaxPool2D, AvgPool2D and
 * GlobalAvgPool read and write bf16 in their own kernels (rt_kern_pool.c).
 */
#include <string.h>

#include <omp.h>

#include "cpu/rt_kern_bf16.h"
#include "cpu/rt_kern_conv.h"
#include "cpu/rt_kern_cpu.h"

#define RT__CH 1024                   /* values a chunk */
#define RT__CH_PAR (INT64_C(1) << 16) /* fewer values run on one thread */

int rt_kern_bf16_act_store = 1;

unsigned rt_kern_bf16_io(const rt__node *nd)
{
    const rt__op_def *op = nd->op;
    const int smp = rt__bf16_sample_op(nd);
    if (!rt_kern_bf16_act_store)
        return op == &rt__op_batchnorm || op == &rt__op_relu || op == &rt__op_clip ||
                       op == &rt__op_kerasrelu || rt_kern_bf16_dropout_kind(op) || smp
                   ? RT__BF16_STORE_ONLY
                   : 0u;
    if (smp)
        return rt__bf16_sample_in(nd) | RT__BF16_OUT | RT__BF16_STORE_ONLY;
    /* the products write y bf16 from their primitive (dst bf16) */
    if (op == &rt__op_dense || op == &rt__op_matmul)
        return RT__BF16_IN(0) | RT__BF16_OUT;
    /* a Conv2D + MaxPool2D reads x bf16 chunk by chunk and rounds each
     * chunk's pooled values into y where its backward reads y only for
     * the sign (no activation, or Relu: rounding keeps it) */
    if (op == &rt__op_conv2d && nd->fused) {
        const int act = rt__conv_cp(nd)->act;
        return RT__BF16_IN(0) | (act == RT__ACT_NONE || act == RT__ACT_RELU ? RT__BF16_OUT : 0u);
    }
    if (op == &rt__op_conv2d)
        return RT__BF16_IN(0) | RT__BF16_OUT;
    if (op == &rt__op_batchnorm || op == &rt__op_relu || op == &rt__op_clip ||
        op == &rt__op_kerasrelu || rt_kern_bf16_dropout_kind(op))
        return RT__BF16_IN(0) | RT__BF16_OUT | RT__BF16_STORE_ONLY;
    return 0;
}

int rt_kern_bf16_dropout_kind(const rt__op_def *op)
{
    return op == &rt__op_dropout || op == &rt__op_spatialdropout || op == &rt__op_gaussiannoise ||
           op == &rt__op_gaussiandropout;
}

/* The chunks of n values, each thread its own: x (float32 or bf16 by bit 0
 * of nd->bf16_in) widened into tx, the result into ty and stored (bf16 by
 * nd->bf16_out); CHUNK_BODY computes on them. */
#define RT__CHUNKS(n, CHUNK_BODY)                                                               \
    do {                                                                                        \
        const int64_t nc_ = ((n) + RT__CH - 1) / RT__CH;                                        \
        _Pragma("omp parallel for schedule(static) if ((n) > RT__CH_PAR)") for (int64_t c_ = 0; \
                                                                                c_ < nc_; c_++) \
        {                                                                                       \
            float tx[RT__CH], ty[RT__CH];                                                       \
            const int64_t i0 = c_ * RT__CH, m = (n)-i0 < RT__CH ? (n)-i0 : RT__CH;              \
            CHUNK_BODY;                                                                         \
        }                                                                                       \
    } while (0)

/* y's chunk: where the body writes it (ty when stored bf16) and its store */
static inline float *rt__yc(const rt__kargs *a, int64_t i0, float *ty)
{
    return a->nd->bf16_out ? ty : a->y + i0;
}
static inline void rt__yput(const rt__kargs *a, int64_t i0, int64_t m, const float *ty)
{
    if (a->nd->bf16_out)
        rt_kern_to_bf16_serial((uint16_t *)a->y + i0, ty, m);
}

/* A forward of one input, elementwise: on each chunk, x (widened or
 * read) and y (where the body writes it), the body, y's store (n: the
 * name RT__CHUNKS's pragma reads) */
#define RT__MAP_FWD(a, ...)                                              \
    do {                                                                 \
        const int64_t n = rt__numel_n(&(a)->nd->out, (a)->r->n);         \
        const int bx_ = ((a)->nd->bf16_in & 1u) != 0;                    \
        RT__CHUNKS(n, {                                                  \
            const float *x = rt_kern_bf16_ld((a)->x[0], bx_, i0, m, tx); \
            float *y = rt__yc((a), i0, ty);                              \
            __VA_ARGS__;                                                 \
            rt__yput((a), i0, m, ty);                                    \
        });                                                              \
    } while (0)

void rt_kern_bf16_relu_fwd(const rt__kargs *a)
{
    RT__MAP_FWD(a, {
        memcpy(y, x, sizeof(float) * (size_t)m);
        rt_kern_act_fwd(RT__ACT_RELU, y, m);
    });
}

/* dx (+)= dy where y > 0 */
void rt_kern_bf16_relu_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    const int by = a->nd->bf16_out, add = (a->accum & 1u) != 0;
    float *dx = a->dx[0];
    const float *dy = a->dy;
    RT__CHUNKS(n, {
        const float *y = rt_kern_bf16_ld(a->y, by, i0, m, ty);
        if (add) {
            rt_kern_act_bwd(RT__ACT_RELU, tx, dy + i0, y, m);
            for (int64_t i = 0; i < m; i++)
                dx[i0 + i] += tx[i];
        } else {
            rt_kern_act_bwd(RT__ACT_RELU, dx + i0, dy + i0, y, m);
        }
    });
}

void rt_kern_bf16_unary_fwd(const rt__kargs *a)
{
    const rt__unary_params *p = rt__unary_cp(a->nd);
    RT__MAP_FWD(a, rt_kern_unary_map(p, y, x, m));
}

/* Dropout and its relatives: their forward on widened chunks (the mask
 * is a function of each element's index); the backward reads dy only */
void rt_kern_bf16_dropout_fwd(const rt__kargs *a)
{
    RT__MAP_FWD(a, rt_kern_dropout_map(a, y, x, i0, m));
}

/* dx (+)= dy * f'(x) */
void rt_kern_bf16_unary_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const rt__unary_params *p = rt__unary_cp(a->nd);
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    const int bx = (a->nd->bf16_in & 1u) != 0, add = (a->accum & 1u) != 0;
    float *dx = a->dx[0];
    const float *dy = a->dy;
    RT__CHUNKS(n, {
        (void)ty;
        const float *x = rt_kern_bf16_ld(a->x[0], bx, i0, m, tx);
        rt_kern_unary_dmap(p, dx + i0, dy + i0, x, m, add);
    });
}

/* ------------------------------------------------- a sample at a time */

/* the float32 kernel's node data and scratch, the scratch a thread */
typedef struct {
    void *kd;
    int64_t f32s, stride;
    int nt;
} rt__smp;

int rt_kern_bf16_smp_prepare(rt__node *nd, int64_t B, rt__arena *A)
{
    const rt__kernel *k = rt_kern_cpu_f32_kernel(nd->op, NULL);
    RT_ASSERT(k && rt__bf16_sample_op(nd));
    int rc;
    if (k->prepare && (rc = k->prepare(nd, B, A)) < 0)
        return rc;
    rt__smp *s = rt__arena_alloc(A, sizeof *s);
    if (!s)
        return RT_ENOMEM;
    s->kd = nd->kdata;
    s->f32s = (nd->scratch_floats + 15) & ~(int64_t)15;
    s->nt = omp_get_max_threads() < 1 ? 1 : omp_get_max_threads();
    s->stride = s->f32s;
    for (int j = 0; j < nd->n_in; j++)
        if (nd->bf16_in & RT__BF16_IN(j))
            s->stride += (rt__numel_n(nd->in_shape[j], 1) + 15) & ~(int64_t)15;
    if (nd->bf16_out)
        s->stride += (rt__numel_n(&nd->out, 1) + 15) & ~(int64_t)15;
    nd->kdata = s;
    nd->scratch_floats = s->nt * s->stride;
    return 0;
}

/* the float32 kernel over the batch, sample by sample: fwd, or the
 * backward of a broadcasting binary (x widened; dx and dy
 * are float32) into the gradients of the inputs in dxm (RT__BF16_IN
 * bits), the samples in parallel (par) or in order (an unbatched input's
 * gradient sums over the samples: each adds to it after the first) */
static void rt__smp_run(const rt__kargs *a, int fwd, unsigned dxm, int par)
{
    const rt__smp *s = a->nd->kdata;
    const rt__kernel *k = rt_kern_cpu_f32_kernel(a->nd->op, NULL);
    rt__node nd = *a->nd;
    nd.kdata = s->kd;
    rt__run r1 = *a->r;
    r1.n = 1;
    const int64_t n = a->r->n, pout = rt__numel_n(&nd.out, 1);
    const int by = fwd && nd.bf16_out;
#pragma omp parallel for num_threads(s->nt) schedule(static) if (par && n * pout > RT__CH_PAR)
    for (int64_t b = 0; b < n; b++) {
        float *t = a->scratch + omp_get_thread_num() * s->stride, *q = t + s->f32s;
        rt__kargs c = *a;
        c.nd = &nd, c.r = &r1, c.scratch = t;
        c.accum = par || b == 0 ? a->accum : a->accum | dxm;
        for (int j = 0; j < nd.n_in; j++) {
            /* an unbatched input (a binary's broadcast one): all of it */
            const int64_t pin = rt__numel_n(nd.in_shape[j], 1);
            const int64_t off = nd.in_shape[j]->batched ? b * pin : 0;
            if (nd.bf16_in & RT__BF16_IN(j)) {
                rt_kern_from_bf16_serial(q, (const uint16_t *)a->x[j] + off, pin);
                c.x[j] = q;
                q += (pin + 15) & ~(int64_t)15;
            } else {
                c.x[j] = a->x[j] + off;
            }
            c.dx[j] = a->dx[j] && (dxm & RT__BF16_IN(j)) ? a->dx[j] + off : NULL;
        }
        /* a binary's backward reads no y */
        c.y = by ? q : a->y && !nd.bf16_out ? a->y + b * pout : NULL;
        c.dy = a->dy ? a->dy + b * pout : NULL;
        if (fwd) {
            k->fwd(&c);
            if (by)
                rt_kern_to_bf16_serial((uint16_t *)a->y + b * pout, q, pout);
        } else {
            k->bwd(&c);
        }
    }
}

void rt_kern_bf16_smp_fwd(const rt__kargs *a) { rt__smp_run(a, 1, 0, 1); }

/* dx (+)= from dy: the float32 kernel over the batch (y unread) */
void rt_kern_bf16_smp_bwd(const rt__kargs *a)
{
    const rt__smp *s = a->nd->kdata;
    rt__node nd = *a->nd;
    nd.kdata = s->kd;
    rt__kargs c = *a;
    c.nd = &nd;
    rt_kern_cpu_f32_kernel(nd.op, NULL)->bwd(&c);
}

/* --------------------------------------------------- Concat and Add */

/* Concat copies: each input's rows into y's, bf16 to bf16 as 2-byte
 * values, widened or rounded where the sides differ */
void rt_kern_bf16_concat_fwd(const rt__kargs *a)
{
    const rt__concat_params *p = rt__concat_cp(a->nd);
    const int64_t k = p->k, rows = a->r->n * p->outer, inner = p->inner;
    const int by = a->nd->bf16_out;
    int64_t off = 0;
    for (int64_t i = 0; i < k; i++) {
        const int64_t w = p->in_inner[i];
        const int bx = (a->nd->bf16_in & RT__BF16_IN((int)i)) != 0;
        const void *x = a->x[i];
#pragma omp parallel for schedule(static) if (rows * w >= RT__CH_PAR)
        for (int64_t r = 0; r < rows; r++) {
            const int64_t yo = r * inner + off, xo = r * w;
            if (bx && by)
                memcpy((uint16_t *)a->y + yo, (const uint16_t *)x + xo,
                       sizeof(uint16_t) * (size_t)w);
            else if (by)
                rt_kern_to_bf16_serial((uint16_t *)a->y + yo, (const float *)x + xo, w);
            else if (bx)
                rt_kern_from_bf16_serial(a->y + yo, (const uint16_t *)x + xo, w);
            else
                memcpy(a->y + yo, (const float *)x + xo, sizeof(float) * (size_t)w);
        }
        off += w;
    }
}

/* ------------------------------------------- binaries, Flatten, Reshape */

static int rt__bop(const rt__op_def *op)
{
    return op == &rt__op_add   ? RT_KERN_ADD
           : op == &rt__op_sub ? RT_KERN_SUB
           : op == &rt__op_mul ? RT_KERN_MUL
           : op == &rt__op_div ? RT_KERN_DIV
           : op == &rt__op_max ? RT_KERN_MAX
                               : RT_KERN_MIN;
}

int rt_kern_bf16_bin_prepare(rt__node *nd, int64_t B, rt__arena *A)
{
    if (rt__bcast_cp(nd)->flat)
        return 0;
    return rt_kern_bf16_smp_prepare(nd, B, A);
}

/* y = op(x0, x1): of the output's shape, in float32 on chunks widened on
 * the stack; broadcasting, the float32 kernel a sample at a time */
void rt_kern_bf16_bin_fwd(const rt__kargs *a)
{
    if (!rt__bcast_cp(a->nd)->flat) {
        rt__smp_run(a, 1, 0, 1);
        return;
    }
    const int op = rt__bop(a->nd->op);
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    const int b0 = (a->nd->bf16_in & 1u) != 0, b1 = (a->nd->bf16_in & 2u) != 0;
    RT__CHUNKS(n, {
        const float *x0 = rt_kern_bf16_ld(a->x[0], b0, i0, m, tx);
        const float *x1 = rt_kern_bf16_ld(a->x[1], b1, i0, m, ty);
        float *y = a->nd->bf16_out ? tx : a->y + i0;
        if (op == RT_KERN_ADD)
            for (int64_t i = 0; i < m; i++)
                y[i] = x0[i] + x1[i];
        else
            for (int64_t i = 0; i < m; i++)
                y[i] = rt_kern_bin(op, x0[i], x1[i]);
        rt__yput(a, i0, m, tx);
    });
}

/* dx_k (+)= d op / d x_k * dy: Add and Sub (which read only dy) their
 * float32 kernel over the batch; the others on widened chunks, or
 * broadcasting a sample at a time on widened x: the batched inputs'
 * gradients in parallel, then an unbatched one's summed over the samples
 * in order (the float32 kernel's order) */
void rt_kern_bf16_bin_bwd(const rt__kargs *a)
{
    const rt__node *nd = a->nd;
    const int op = rt__bop(nd->op);
    if (op == RT_KERN_ADD || op == RT_KERN_SUB) {
        /* no x read (the binaries' float32 kernels keep no node data) */
        rt_kern_cpu_f32_kernel(nd->op, NULL)->bwd(a);
        return;
    }
    if (!rt__bcast_cp(nd)->flat) {
        const unsigned bm = rt__bf16_sample_in(nd), um = ((1u << nd->n_in) - 1u) & ~bm;
        rt__smp_run(a, 0, bm, 1);
        if (um)
            rt__smp_run(a, 0, um, 0);
        return;
    }
    const int64_t n = rt__numel_n(&nd->out, a->r->n);
    const int b0 = (nd->bf16_in & 1u) != 0, b1 = (nd->bf16_in & 2u) != 0;
    for (int k = 0; k < 2; k++) {
        float *dx = a->dx[k];
        if (!dx)
            continue;
        const int add = (a->accum >> k) & 1u;
        const float *dy = a->dy;
        RT__CHUNKS(n, {
            const float *x0 = rt_kern_bf16_ld(a->x[0], b0, i0, m, tx);
            const float *x1 = rt_kern_bf16_ld(a->x[1], b1, i0, m, ty);
            float *o = dx + i0;
            if (add)
                for (int64_t i = 0; i < m; i++)
                    o[i] += rt_kern_bin_d(op, k, x0[i], x1[i], dy[i0 + i]);
            else
                for (int64_t i = 0; i < m; i++)
                    o[i] = rt_kern_bin_d(op, k, x0[i], x1[i], dy[i0 + i]);
        });
    }
}

/* Flatten and Reshape: the values copied, 2 bytes each where both sides
 * are bf16, widened or rounded where they differ */
void rt_kern_bf16_copy_fwd(const rt__kargs *a)
{
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    const int bx = (a->nd->bf16_in & 1u) != 0, by = a->nd->bf16_out;
    if (bx && by)
        rt_kern_par_memcpy(a->y, a->x[0], sizeof(uint16_t) * (size_t)n);
    else if (by)
        rt_kern_to_bf16((uint16_t *)a->y, a->x[0], n);
    else if (bx)
        rt_kern_from_bf16(a->y, (const uint16_t *)a->x[0], n);
    else
        memcpy(a->y, a->x[0], sizeof(float) * (size_t)n);
}
