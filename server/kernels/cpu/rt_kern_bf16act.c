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
 * Concat copies rows (2-byte values where both sides are bf16). The
 * binaries (Add, Sub, Mul, Div, Max, Min), broadcasting or not, widen
 * their bf16 inputs and round their bf16 output in registers as the loop
 * reads and writes them (the samples over the threads); the backwards of
 * Mul, Div, Max and Min read x widened the same way. Pad
 * (rt_kern_shape.c), MaxPool2D, AvgPool2D and GlobalAvgPool
 * (rt_kern_pool.c) read and write bf16 in their own kernels.
 */
#include <string.h>

#include <omp.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

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

/* -------------------------------------------------------------- Concat */

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

/* value i of an operand, widened where it is stored bf16 */
static inline float rt__ld1(const void *p, int bf, int64_t i)
{
    return bf ? rt_kern_bf16_widen(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

#if defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__)
#define RT__BIN_VEC 1
/* the values i .. i+16 of an operand (those in mask k; the rest zero):
 * widened in the register from bf16 or loaded float32; stride 0: its one
 * value in every lane */
static inline __m512 rt__vld(const void *p, int bf, int64_t s, int64_t i, __mmask16 k)
{
    if (!s)
        return _mm512_set1_ps(rt__ld1(p, bf, 0));
    if (bf) {
        const __m256i h = _mm256_maskz_loadu_epi16(k, (const uint16_t *)p + i);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    return _mm512_maskz_loadu_ps(k, (const float *)p + i);
}
#endif

/* y[j] = op(x0[j * s0], x1[j * s1]) for j < m, each operand bf16 or
 * float32 (b0, b1), y rounded to bf16 where by: the float32 arithmetic of
 * rt_kern_bin on the widened values, rounded once (vcvtneps2bf16: nearest
 * even, as rt_kern_to_bf16). Strides 0 and 1 (a contiguous input's last
 * dim) run 16 values a register. */
static void rt__bin_run(int op, const void *x0, int b0, int64_t s0, const void *x1, int b1,
                        int64_t s1, void *y, int by, int64_t m)
{
#ifdef RT__BIN_VEC
    if ((s0 == 0 || s0 == 1) && (s1 == 0 || s1 == 1)) {
        for (int64_t j = 0; j < m; j += 16) {
            const __mmask16 k = m - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (m - j)) - 1u);
            const __m512 u = rt__vld(x0, b0, s0, j, k), v = rt__vld(x1, b1, s1, j, k);
            __m512 r;
            switch (op) {
            case RT_KERN_ADD: r = _mm512_add_ps(u, v); break;
            case RT_KERN_SUB: r = _mm512_sub_ps(u, v); break;
            case RT_KERN_MUL: r = _mm512_mul_ps(u, v); break;
            case RT_KERN_DIV: r = _mm512_div_ps(u, v); break;
            /* u >= v ? u : v, u <= v ? u : v (a NaN compares false) */
            case RT_KERN_MAX:
                r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(u, v, _CMP_GE_OQ), v, u);
                break;
            default: r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(u, v, _CMP_LE_OQ), v, u); break;
            }
            if (by)
                _mm256_mask_storeu_epi16((uint16_t *)y + j, k, (__m256i)_mm512_cvtneps_pbh(r));
            else
                _mm512_mask_storeu_ps((float *)y + j, k, r);
        }
        return;
    }
#endif
    for (int64_t j = 0; j < m; j++) {
        const float r = rt_kern_bin(op, rt__ld1(x0, b0, j * s0), rt__ld1(x1, b1, j * s1));
        if (by)
            ((uint16_t *)y)[j] = rt_kern_bf16_round(r);
        else
            ((float *)y)[j] = r;
    }
}

/* an element of stored type bf (2 or 4 bytes) at element offset o */
static inline const void *rt__at(const void *p, int bf, int64_t o)
{
    return (const char *)p + o * (bf ? 2 : 4);
}

/* Visits the output of sample s of a broadcasting binary (rt__bcast_params,
 * dim 0 the batch) in order, one run of its last dim at a time: the body sees
 * o (the run's output offset), oa, ob (the inputs' offsets), inner (the
 * run's length) and ia, ib (the inputs' strides along it), as
 * rt_kern_eltwise.c's loop visits the whole batch. */
#define RT__BC_SAMPLE(p, s, pout, ...)                                                      \
    do {                                                                                    \
        const int R_ = (p)->R;                                                              \
        const int64_t inner = R_ > 1 ? (p)->d[R_ - 1] : 1;                                  \
        const int64_t ia = R_ > 1 ? (p)->sa[R_ - 1] : 0, ib = R_ > 1 ? (p)->sb[R_ - 1] : 0; \
        int64_t idx_[RT__BC_MAXR] = {0}, oa = (s) * (p)->sa[0], ob = (s) * (p)->sb[0];      \
        for (int64_t o = (s) * (pout); o < ((s) + 1) * (pout); o += inner) {                \
            __VA_ARGS__;                                                                    \
            for (int d_ = R_ - 2; d_ >= 1; d_--) {                                          \
                idx_[d_]++;                                                                 \
                oa += (p)->sa[d_];                                                          \
                ob += (p)->sb[d_];                                                          \
                if (idx_[d_] < (p)->d[d_])                                                  \
                    break;                                                                  \
                oa -= (p)->sa[d_] * (p)->d[d_];                                             \
                ob -= (p)->sb[d_] * (p)->d[d_];                                             \
                idx_[d_] = 0;                                                               \
            }                                                                               \
        }                                                                                   \
    } while (0)

/* y = op(x0, x1), x0, x1 and y each bf16 or float32 (an unbatched input
 * is float32): of the output's shape in chunks over the threads;
 * broadcasting, the samples over the threads */
void rt_kern_bf16_bin_fwd(const rt__kargs *a)
{
    const rt__bcast_params *p = rt__bcast_cp(a->nd);
    const int op = rt__bop(a->nd->op);
    const int b0 = (a->nd->bf16_in & 1u) != 0, b1 = (a->nd->bf16_in & 2u) != 0;
    const int by = a->nd->bf16_out != 0;
    if (p->flat) {
        const int64_t n = rt__numel_n(&a->nd->out, a->r->n), nc = (n + RT__CH - 1) / RT__CH;
#pragma omp parallel for schedule(static) if (n > RT__CH_PAR)
        for (int64_t c = 0; c < nc; c++) {
            const int64_t i0 = c * RT__CH, m = n - i0 < RT__CH ? n - i0 : RT__CH;
            rt__bin_run(op, rt__at(a->x[0], b0, i0), b0, 1, rt__at(a->x[1], b1, i0), b1, 1,
                        (void *)rt__at(a->y, by, i0), by, m);
        }
        return;
    }
    RT_ASSERT(p->batched);
    const int64_t n = a->r->n, pout = rt__numel_n(&a->nd->out, 1);
#pragma omp parallel for schedule(static) if (n * pout > RT__CH_PAR)
    for (int64_t s = 0; s < n; s++)
        RT__BC_SAMPLE(p, s, pout, {
            rt__bin_run(op, rt__at(a->x[0], b0, oa), b0, ia, rt__at(a->x[1], b1, ob), b1, ib,
                        (void *)rt__at(a->y, by, o), by, inner);
        });
}

/* sample s's part of dx_k += d op / d x_k * dy, broadcasting (x widened
 * as read; dx and dy float32): rt_kern_eltwise.c's accumulation, in its
 * order, on the sample's runs */
static void rt__bin_bwd_smp(const rt__kargs *a, int op, int k, int64_t s)
{
    const rt__bcast_params *p = rt__bcast_cp(a->nd);
    const int b0 = (a->nd->bf16_in & 1u) != 0, b1 = (a->nd->bf16_in & 2u) != 0;
    const int64_t pout = rt__numel_n(&a->nd->out, 1);
    const void *x0 = a->x[0], *x1 = a->x[1];
    RT__BC_SAMPLE(p, s, pout, {
        const float *restrict dy = a->dy + o;
        float *restrict dx = a->dx[k] + (k ? ob : oa);
        const int64_t sk = k ? ib : ia;
        if (op == RT_KERN_MUL) {
            /* the float32 kernel's expression, so a compiler contracts
             * (FMA) both alike */
            const void *ot = k ? x0 : x1;
            const int bo = k ? b0 : b1;
            const int64_t oo = k ? oa : ob, so = k ? ia : ib;
            for (int64_t j = 0; j < inner; j++)
                dx[j * sk] += dy[j] * rt__ld1(ot, bo, oo + j * so);
        } else {
            for (int64_t j = 0; j < inner; j++)
                dx[j * sk] += rt_kern_bin_d(op, k, rt__ld1(x0, b0, oa + j * ia),
                                            rt__ld1(x1, b1, ob + j * ib), dy[j]);
        }
    });
}

/* dx_k (+)= d op / d x_k * dy: Add and Sub (which read only dy) their
 * float32 kernel over the batch; the others on widened chunks, or
 * broadcasting on values widened as the loop reads them: a batched
 * input's gradient the samples over the threads, an unbatched one's
 * summed over the samples in order (the float32 kernel's order) */
void rt_kern_bf16_bin_bwd(const rt__kargs *a)
{
    const rt__node *nd = a->nd;
    const int op = rt__bop(nd->op);
    if (op == RT_KERN_ADD || op == RT_KERN_SUB) {
        /* no x read (the binaries' float32 kernels keep no node data) */
        rt_kern_cpu_f32_kernel(nd->op, NULL)->bwd(a);
        return;
    }
    const rt__bcast_params *bp = rt__bcast_cp(nd);
    if (!bp->flat) {
        RT_ASSERT(bp->batched);
        const int64_t n = a->r->n, pout = rt__numel_n(&nd->out, 1);
        for (int k = 0; k < 2; k++) {
            if (!a->dx[k])
                continue;
            const int64_t per = rt__numel_n(nd->in_shape[k], 1);
            if (!nd->in_shape[k]->batched) {
                if (!((a->accum >> k) & 1u))
                    memset(a->dx[k], 0, sizeof(float) * (size_t)per);
                for (int64_t s = 0; s < n; s++)
                    rt__bin_bwd_smp(a, op, k, s);
                continue;
            }
#pragma omp parallel for schedule(static) if (n * pout > RT__CH_PAR)
            for (int64_t s = 0; s < n; s++) {
                if (!((a->accum >> k) & 1u))
                    memset(a->dx[k] + s * per, 0, sizeof(float) * (size_t)per);
                rt__bin_bwd_smp(a, op, k, s);
            }
        }
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
            /* Mul: the float32 kernel's expression (contracted alike) */
            const float *ot = k ? x0 : x1;
            if (add && op == RT_KERN_MUL)
                for (int64_t i = 0; i < m; i++)
                    o[i] += dy[i0 + i] * ot[i];
            else if (add)
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
