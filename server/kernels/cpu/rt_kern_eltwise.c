/* rt_kern_eltwise.c - activations, broadcasting binaries, copies, dropout. */
#include <math.h>
#include <string.h>

#include "cpu/rt_kern_cpu.h"

/* ------------------------------------------------------------ activations */

static inline float rt__sigmoidf(float x)
{
    /* the two branches keep exp's argument <= 0, so nothing overflows */
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

void rt_kern_act_fwd(int act, float *restrict y, int64_t n)
{
    switch (act) {
    case RT__ACT_RELU:
        for (int64_t i = 0; i < n; i++) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
        break;
    case RT__ACT_SIGMOID:
        for (int64_t i = 0; i < n; i++) y[i] = rt__sigmoidf(y[i]);
        break;
    case RT__ACT_TANH:
        for (int64_t i = 0; i < n; i++) y[i] = tanhf(y[i]);
        break;
    default:
        break;
    }
}

void rt_kern_act_bwd(int act, float *restrict dz, const float *restrict dy,
                     const float *restrict y, int64_t n)
{
    switch (act) {
    case RT__ACT_RELU:
        for (int64_t i = 0; i < n; i++) dz[i] = y[i] > 0.0f ? dy[i] : 0.0f;
        break;
    case RT__ACT_SIGMOID:
        for (int64_t i = 0; i < n; i++) dz[i] = dy[i] * y[i] * (1.0f - y[i]);
        break;
    case RT__ACT_TANH:
        for (int64_t i = 0; i < n; i++) dz[i] = dy[i] * (1.0f - y[i] * y[i]);
        break;
    default:
        memcpy(dz, dy, sizeof(float) * (size_t)n);
        break;
    }
}

/* y = act(x); dx (+)= dy * act'(y) */
static void rt__unary_fwd(const rt__kargs *a, int act)
{
    int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    memcpy(a->y, a->x[0], sizeof(float) * (size_t)n);
    rt_kern_act_fwd(act, a->y, n);
}

static void rt__unary_bwd(const rt__kargs *a, int act)
{
    int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    if (!a->dx[0]) return;
    if (!(a->accum & 1u)) {
        rt_kern_act_bwd(act, a->dx[0], a->dy, a->y, n);
        return;
    }
    float *restrict dx = a->dx[0];
    const float *restrict dy = a->dy, *restrict y = a->y;
    switch (act) {
    case RT__ACT_RELU:
        for (int64_t i = 0; i < n; i++) dx[i] += y[i] > 0.0f ? dy[i] : 0.0f;
        break;
    case RT__ACT_SIGMOID:
        for (int64_t i = 0; i < n; i++) dx[i] += dy[i] * y[i] * (1.0f - y[i]);
        break;
    case RT__ACT_TANH:
        for (int64_t i = 0; i < n; i++) dx[i] += dy[i] * (1.0f - y[i] * y[i]);
        break;
    }
}

void rt_kern_relu_fwd(const rt__kargs *a) { rt__unary_fwd(a, RT__ACT_RELU); }
void rt_kern_relu_bwd(const rt__kargs *a) { rt__unary_bwd(a, RT__ACT_RELU); }
void rt_kern_sigmoid_fwd(const rt__kargs *a) { rt__unary_fwd(a, RT__ACT_SIGMOID); }
void rt_kern_sigmoid_bwd(const rt__kargs *a) { rt__unary_bwd(a, RT__ACT_SIGMOID); }
void rt_kern_tanh_fwd(const rt__kargs *a) { rt__unary_fwd(a, RT__ACT_TANH); }
void rt_kern_tanh_bwd(const rt__kargs *a) { rt__unary_bwd(a, RT__ACT_TANH); }

/* ------------------------------------------------------------ broadcasting */

/*
 * nd->ia layout for Add/Sub/Mul, set by rt_kern_bcast_setup at compile:
 *   ia[0]       R, rank of the output including the batch dim (>= 1)
 *   ia[1]       1 when dim 0 is the runtime batch
 *   ia[2..9]    output dims (dim 0 replaced by n at runtime when batched)
 *   ia[10..17]  element strides of input 0 per output dim (0 = broadcast)
 *   ia[18..25]  element strides of input 1
 *   ia[26]      both inputs have the output's shape (flat loop)
 *   ia[27..28]  input k has the output's shape
 */
enum { RT__BC_R = 0, RT__BC_B = 1, RT__BC_D = 2, RT__BC_SA = 10, RT__BC_SB = 18,
       RT__BC_FLAT = 26, RT__BC_FULL = 27 };

void rt_kern_bcast_setup(rt__node *nd, int op)
{
    int R = nd->out.ndim + (nd->out.batched ? 1 : 0);
    int64_t *ia = nd->ia;
    ia[RT__BC_B] = nd->out.batched;
    if (R == 0) {
        ia[RT__BC_R] = 1;
        ia[RT__BC_D] = 1;
        ia[RT__BC_SA] = ia[RT__BC_SB] = 0;
        ia[RT__BC_FLAT] = 1;
        ia[RT__BC_FULL] = ia[RT__BC_FULL + 1] = 1;
        return;
    }
    ia[RT__BC_R] = R;
    for (int i = 0; i < R; i++) {
        int oi = nd->out.batched ? i - 1 : i;
        ia[RT__BC_D + i] = oi < 0 ? -1 : nd->out.d[oi];
    }
    for (int k = 0; k < 2; k++) {
        const rt__shape *s = nd->in_shape[k];
        int r = s->ndim + (s->batched ? 1 : 0);
        int64_t *st = ia + (k ? RT__BC_SB : RT__BC_SA);
        int64_t stride = 1;
        int full = r == R && s->batched == nd->out.batched;
        for (int i = R - 1; i >= 0; i--) {
            int j = i - (R - r); /* dim of the input, right-aligned */
            if (j < 0) {
                st[i] = 0;
                continue;
            }
            int64_t dim;
            if (s->batched && j == 0) dim = -1; /* the batch */
            else dim = s->d[s->batched ? j - 1 : j];
            if (dim == 1 && ia[RT__BC_D + i] != 1) {
                st[i] = 0;
                full = 0;
            } else {
                st[i] = stride;
            }
            if (dim != -1) stride *= dim;
            else stride *= 1; /* batch is the outermost; nothing follows */
        }
        ia[RT__BC_FULL + k] = full;
    }
    ia[RT__BC_FLAT] = ia[RT__BC_FULL] && ia[RT__BC_FULL + 1];
    (void)op;
}

static void rt__bc_dims(const rt__kargs *a, int64_t *dims, int64_t *total)
{
    const int64_t *ia = a->nd->ia;
    int R = (int)ia[RT__BC_R];
    int64_t t = 1;
    for (int i = 0; i < R; i++) {
        dims[i] = ia[RT__BC_D + i];
        if (i == 0 && ia[RT__BC_B]) dims[i] = a->r->n;
        t *= dims[i];
    }
    *total = t;
}

/* Visits every output element in order with its offsets into a and b. The
 * innermost dim runs as a plain loop so the common cases vectorise. */
#define RT__BC_LOOP(a_, ...)                                                  \
    do {                                                                      \
        const int64_t *ia_ = (a_)->nd->ia;                                    \
        const int R_ = (int)ia_[RT__BC_R];                                    \
        int64_t dims_[RT_MAX_DIMS + 1] = {0}, tot_;                               \
        rt__bc_dims((a_), dims_, &tot_);                                      \
        const int64_t *sa_ = ia_ + RT__BC_SA, *sb_ = ia_ + RT__BC_SB;         \
        const int64_t inner = dims_[R_ - 1];                                  \
        const int64_t ia1 = sa_[R_ - 1], ib1 = sb_[R_ - 1];                   \
        int64_t idx_[RT_MAX_DIMS + 1] = {0}, oa = 0, ob = 0;                  \
        for (int64_t o = 0; o < tot_; o += inner) {                           \
            __VA_ARGS__;                                                           \
            for (int d_ = R_ - 2; d_ >= 0; d_--) {                            \
                idx_[d_]++;                                                   \
                oa += sa_[d_];                                                \
                ob += sb_[d_];                                                \
                if (idx_[d_] < dims_[d_]) break;                              \
                oa -= sa_[d_] * dims_[d_];                                    \
                ob -= sb_[d_] * dims_[d_];                                    \
                idx_[d_] = 0;                                                 \
            }                                                                 \
        }                                                                     \
    } while (0)

static void rt__bin_fwd(const rt__kargs *a, int op)
{
    const float *restrict A = a->x[0], *restrict B = a->x[1];
    float *restrict Y = a->y;
    if (a->nd->ia[RT__BC_FLAT]) {
        int64_t n = rt__numel_n(&a->nd->out, a->r->n);
        switch (op) {
        case RT_KERN_ADD: for (int64_t i = 0; i < n; i++) Y[i] = A[i] + B[i]; break;
        case RT_KERN_SUB: for (int64_t i = 0; i < n; i++) Y[i] = A[i] - B[i]; break;
        default:          for (int64_t i = 0; i < n; i++) Y[i] = A[i] * B[i]; break;
        }
        return;
    }
    RT__BC_LOOP(a, {
        const float *restrict pa = A + oa, *restrict pb = B + ob;
        float *restrict py = Y + o;
        switch (op) {
        case RT_KERN_ADD:
            for (int64_t j = 0; j < inner; j++) py[j] = pa[j * ia1] + pb[j * ib1];
            break;
        case RT_KERN_SUB:
            for (int64_t j = 0; j < inner; j++) py[j] = pa[j * ia1] - pb[j * ib1];
            break;
        default:
            for (int64_t j = 0; j < inner; j++) py[j] = pa[j * ia1] * pb[j * ib1];
            break;
        }
    });
}

/* dA (+)= reduce(dY * f), f = +1, -1 or the other operand, summed over the
 * dims A was broadcast along (fixed order: output order). */
static void rt__bin_bwd_one(const rt__kargs *a, int k, int op)
{
    float *restrict dX = a->dx[k];
    if (!dX) return;
    const float *restrict dY = a->dy;
    const float *restrict other = a->x[1 - k];
    const float sign = (op == RT_KERN_SUB && k == 1) ? -1.0f : 1.0f;
    const int accum = (a->accum >> k) & 1u;
    const rt__node *nd = a->nd;
    if (nd->ia[RT__BC_FULL + k] && (op != RT_KERN_MUL || nd->ia[RT__BC_FLAT])) {
        int64_t n = rt__numel_n(&nd->out, a->r->n);
        if (op == RT_KERN_MUL) {
            if (accum) for (int64_t i = 0; i < n; i++) dX[i] += dY[i] * other[i];
            else       for (int64_t i = 0; i < n; i++) dX[i] = dY[i] * other[i];
        } else {
            if (accum) for (int64_t i = 0; i < n; i++) dX[i] += sign * dY[i];
            else       for (int64_t i = 0; i < n; i++) dX[i] = sign * dY[i];
        }
        return;
    }
    if (!accum)
        memset(dX, 0, sizeof(float) * (size_t)rt__numel_n(nd->in_shape[k], a->r->n));
    RT__BC_LOOP(a, {
        int64_t offk = k ? ob : oa, offo = k ? oa : ob;
        int64_t sk = k ? ib1 : ia1, so = k ? ia1 : ib1;
        const float *restrict dy = dY + o;
        float *restrict dx = dX + offk;
        if (op == RT_KERN_MUL) {
            const float *restrict ot = other + offo;
            for (int64_t j = 0; j < inner; j++) dx[j * sk] += dy[j] * ot[j * so];
        } else {
            for (int64_t j = 0; j < inner; j++) dx[j * sk] += sign * dy[j];
        }
    });
}

void rt_kern_add_fwd(const rt__kargs *a) { rt__bin_fwd(a, RT_KERN_ADD); }
void rt_kern_sub_fwd(const rt__kargs *a) { rt__bin_fwd(a, RT_KERN_SUB); }
void rt_kern_mul_fwd(const rt__kargs *a) { rt__bin_fwd(a, RT_KERN_MUL); }
void rt_kern_add_bwd(const rt__kargs *a)
{
    rt__bin_bwd_one(a, 0, RT_KERN_ADD);
    rt__bin_bwd_one(a, 1, RT_KERN_ADD);
}
void rt_kern_sub_bwd(const rt__kargs *a)
{
    rt__bin_bwd_one(a, 0, RT_KERN_SUB);
    rt__bin_bwd_one(a, 1, RT_KERN_SUB);
}
void rt_kern_mul_bwd(const rt__kargs *a)
{
    rt__bin_bwd_one(a, 0, RT_KERN_MUL);
    rt__bin_bwd_one(a, 1, RT_KERN_MUL);
}

/* ------------------------------------------------------------------ copies */

void rt_kern_copy_fwd(const rt__kargs *a)
{
    int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    memcpy(a->y, a->x[0], sizeof(float) * (size_t)n);
}

void rt_kern_copy_bwd(const rt__kargs *a)
{
    if (!a->dx[0]) return;
    int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    float *restrict dx = a->dx[0];
    const float *restrict dy = a->dy;
    if (a->accum & 1u)
        for (int64_t i = 0; i < n; i++) dx[i] += dy[i];
    else
        memcpy(dx, dy, sizeof(float) * (size_t)n);
}

/* ----------------------------------------------------------------- dropout */

static inline int rt__keep(const rt__kargs *a, int64_t i, float rate)
{
    /* counter: step in the high bits, element in the low 36 (RT__MAX_NUMEL) */
    uint64_t ctr = ((uint64_t)a->r->step << 36) | (uint64_t)i;
    return rt__rng_unit(a->r->seed, RT__STREAM_DROPOUT + (uint64_t)a->nd->id,
                        ctr) >= rate;
}

void rt_kern_dropout_fwd(const rt__kargs *a)
{
    int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    const float rate = (float)a->nd->fa[0];
    if (!a->r->training || rate == 0.0f) {
        memcpy(a->y, a->x[0], sizeof(float) * (size_t)n);
        return;
    }
    const float scale = 1.0f / (1.0f - rate);
    const float *restrict x = a->x[0];
    float *restrict y = a->y;
    for (int64_t i = 0; i < n; i++) y[i] = rt__keep(a, i, rate) ? x[i] * scale : 0.0f;
}

void rt_kern_dropout_bwd(const rt__kargs *a)
{
    if (!a->dx[0]) return;
    int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    const float rate = (float)a->nd->fa[0];
    const float scale = rate == 0.0f ? 1.0f : 1.0f / (1.0f - rate);
    const float *restrict dy = a->dy;
    float *restrict dx = a->dx[0];
    const int accum = a->accum & 1u;
    for (int64_t i = 0; i < n; i++) {
        float g = (rate == 0.0f || rt__keep(a, i, rate)) ? dy[i] * scale : 0.0f;
        dx[i] = accum ? dx[i] + g : g;
    }
}
