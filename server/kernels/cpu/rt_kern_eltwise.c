/* rt_kern_eltwise.c - activations, broadcasting binaries, copies, dropout. */
#include <math.h>
#include <string.h>

#include "cpu/rt_kern_cpu.h"

/* ------------------------------------------------------------ activations */

static inline float rt__sigmoidf(float x)
{
    /* the two branches keep exp's argument <= 0, so nothing overflows */
    if (x >= 0.0f)
        return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

void rt_kern_act_fwd(int act, float *restrict y, int64_t n)
{
    switch (act) {
    case RT__ACT_RELU:
        for (int64_t i = 0; i < n; i++)
            y[i] = y[i] > 0.0f ? y[i] : 0.0f;
        break;
    case RT__ACT_SIGMOID:
        for (int64_t i = 0; i < n; i++)
            y[i] = rt__sigmoidf(y[i]);
        break;
    case RT__ACT_TANH:
        for (int64_t i = 0; i < n; i++)
            y[i] = tanhf(y[i]);
        break;
    default: break;
    }
}

void rt_kern_act_bwd(int act, float *restrict dz, const float *restrict dy, const float *restrict y,
                     int64_t n)
{
    switch (act) {
    case RT__ACT_RELU:
        for (int64_t i = 0; i < n; i++)
            dz[i] = y[i] > 0.0f ? dy[i] : 0.0f;
        break;
    case RT__ACT_SIGMOID:
        for (int64_t i = 0; i < n; i++)
            dz[i] = dy[i] * y[i] * (1.0f - y[i]);
        break;
    case RT__ACT_TANH:
        for (int64_t i = 0; i < n; i++)
            dz[i] = dy[i] * (1.0f - y[i] * y[i]);
        break;
    default: memcpy(dz, dy, sizeof(float) * (size_t)n); break;
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
    if (!a->dx[0])
        return;
    if (!(a->accum & 1u)) {
        rt_kern_act_bwd(act, a->dx[0], a->dy, a->y, n);
        return;
    }
    float *restrict dx = a->dx[0];
    const float *restrict dy = a->dy, *restrict y = a->y;
    switch (act) {
    case RT__ACT_RELU:
        for (int64_t i = 0; i < n; i++)
            dx[i] += y[i] > 0.0f ? dy[i] : 0.0f;
        break;
    case RT__ACT_SIGMOID:
        for (int64_t i = 0; i < n; i++)
            dx[i] += dy[i] * y[i] * (1.0f - y[i]);
        break;
    case RT__ACT_TANH:
        for (int64_t i = 0; i < n; i++)
            dx[i] += dy[i] * (1.0f - y[i] * y[i]);
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

/* Add/Sub/Mul walk the output with the strides op_eltwise.c derived
 * (rt__bcast_params); the op (RT_KERN_ADD ...) is a compile-time constant
 * of each wrapper */

static void rt__bc_dims(const rt__kargs *a, int64_t *dims, int64_t *total)
{
    const rt__bcast_params *p = rt__bcast_cp(a->nd);
    const int R = p->R;
    int64_t t = 1;
    for (int i = 0; i < R; i++) {
        dims[i] = p->d[i];
        if (i == 0 && p->batched)
            dims[i] = a->r->n;
        t *= dims[i];
    }
    *total = t;
}

/* Visits every output element in order with its offsets into a and b. The
 * innermost dim runs as a plain loop so the common cases vectorise. */
#define RT__BC_LOOP(a_, ...)                                  \
    do {                                                      \
        const rt__bcast_params *bp_ = rt__bcast_cp((a_)->nd); \
        const int R_ = bp_->R;                                \
        int64_t dims_[RT__BC_MAXR] = {0}, tot_;               \
        rt__bc_dims((a_), dims_, &tot_);                      \
        const int64_t *sa_ = bp_->sa, *sb_ = bp_->sb;         \
        const int64_t inner = dims_[R_ - 1];                  \
        const int64_t ia1 = sa_[R_ - 1], ib1 = sb_[R_ - 1];   \
        int64_t idx_[RT__BC_MAXR] = {0}, oa = 0, ob = 0;      \
        for (int64_t o = 0; o < tot_; o += inner) {           \
            __VA_ARGS__;                                      \
            for (int d_ = R_ - 2; d_ >= 0; d_--) {            \
                idx_[d_]++;                                   \
                oa += sa_[d_];                                \
                ob += sb_[d_];                                \
                if (idx_[d_] < dims_[d_])                     \
                    break;                                    \
                oa -= sa_[d_] * dims_[d_];                    \
                ob -= sb_[d_] * dims_[d_];                    \
                idx_[d_] = 0;                                 \
            }                                                 \
        }                                                     \
    } while (0)

static void rt__bin_fwd(const rt__kargs *a, int op)
{
    const float *restrict A = a->x[0], *restrict B = a->x[1];
    float *restrict Y = a->y;
    if (rt__bcast_cp(a->nd)->flat) {
        int64_t n = rt__numel_n(&a->nd->out, a->r->n);
        switch (op) {
        case RT_KERN_ADD:
            for (int64_t i = 0; i < n; i++)
                Y[i] = A[i] + B[i];
            break;
        case RT_KERN_SUB:
            for (int64_t i = 0; i < n; i++)
                Y[i] = A[i] - B[i];
            break;
        case RT_KERN_MUL:
            for (int64_t i = 0; i < n; i++)
                Y[i] = A[i] * B[i];
            break;
        default:
            for (int64_t i = 0; i < n; i++)
                Y[i] = rt_kern_bin(op, A[i], B[i]);
            break;
        }
        return;
    }
    if (op > RT_KERN_MUL) {
        RT__BC_LOOP(a, {
            const float *restrict pa = A + oa, *restrict pb = B + ob;
            float *restrict py = Y + o;
            for (int64_t j = 0; j < inner; j++)
                py[j] = rt_kern_bin(op, pa[j * ia1], pb[j * ib1]);
        });
        return;
    }
    RT__BC_LOOP(a, {
        const float *restrict pa = A + oa, *restrict pb = B + ob;
        float *restrict py = Y + o;
        switch (op) {
        case RT_KERN_ADD:
            for (int64_t j = 0; j < inner; j++)
                py[j] = pa[j * ia1] + pb[j * ib1];
            break;
        case RT_KERN_SUB:
            for (int64_t j = 0; j < inner; j++)
                py[j] = pa[j * ia1] - pb[j * ib1];
            break;
        default:
            for (int64_t j = 0; j < inner; j++)
                py[j] = pa[j * ia1] * pb[j * ib1];
            break;
        }
    });
}

/* dA (+)= reduce(dY * f), f = +1, -1 or the other operand, summed over the
 * dims A was broadcast along (fixed order: output order). */
static void rt__bin_bwd_one(const rt__kargs *a, int k, int op)
{
    float *restrict dX = a->dx[k];
    if (!dX)
        return;
    const float *restrict dY = a->dy;
    const float *restrict other = a->x[1 - k];
    const float sign = (op == RT_KERN_SUB && k == 1) ? -1.0f : 1.0f;
    const int accum = (a->accum >> k) & 1u;
    const rt__node *nd = a->nd;
    const rt__bcast_params *bp = rt__bcast_cp(nd);
    if (op > RT_KERN_MUL) {
        const float *restrict A = a->x[0], *restrict Bv = a->x[1];
        if (bp->flat) {
            int64_t n = rt__numel_n(&nd->out, a->r->n);
            if (accum)
                for (int64_t i = 0; i < n; i++)
                    dX[i] += rt_kern_bin_d(op, k, A[i], Bv[i], dY[i]);
            else
                for (int64_t i = 0; i < n; i++)
                    dX[i] = rt_kern_bin_d(op, k, A[i], Bv[i], dY[i]);
            return;
        }
        if (!accum)
            memset(dX, 0, sizeof(float) * (size_t)rt__numel_n(nd->in_shape[k], a->r->n));
        RT__BC_LOOP(a, {
            const float *restrict pa = A + oa, *restrict pb = Bv + ob;
            const float *restrict dy = dY + o;
            float *restrict dx = dX + (k ? ob : oa);
            const int64_t sk = k ? ib1 : ia1;
            for (int64_t j = 0; j < inner; j++)
                dx[j * sk] += rt_kern_bin_d(op, k, pa[j * ia1], pb[j * ib1], dy[j]);
        });
        return;
    }
    if (bp->full[k] && (op != RT_KERN_MUL || bp->flat)) {
        int64_t n = rt__numel_n(&nd->out, a->r->n);
        if (op == RT_KERN_MUL) {
            if (accum)
                for (int64_t i = 0; i < n; i++)
                    dX[i] += dY[i] * other[i];
            else
                for (int64_t i = 0; i < n; i++)
                    dX[i] = dY[i] * other[i];
        } else {
            if (accum)
                for (int64_t i = 0; i < n; i++)
                    dX[i] += sign * dY[i];
            else
                for (int64_t i = 0; i < n; i++)
                    dX[i] = sign * dY[i];
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
            for (int64_t j = 0; j < inner; j++)
                dx[j * sk] += dy[j] * ot[j * so];
        } else {
            for (int64_t j = 0; j < inner; j++)
                dx[j * sk] += sign * dy[j];
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

#define RT__BIN_KERNELS(nm, OP)                                         \
    void rt_kern_##nm##_fwd(const rt__kargs *a) { rt__bin_fwd(a, OP); } \
    void rt_kern_##nm##_bwd(const rt__kargs *a)                         \
    {                                                                   \
        rt__bin_bwd_one(a, 0, OP);                                      \
        rt__bin_bwd_one(a, 1, OP);                                      \
    }
RT__BIN_KERNELS(div, RT_KERN_DIV)
RT__BIN_KERNELS(max, RT_KERN_MAX)
RT__BIN_KERNELS(min, RT_KERN_MIN)
RT__BIN_KERNELS(prelu, RT_KERN_PRELU)

/* ------------------------------------------------------------------ copies */

/* Copies of a megabyte or more run in 256 KiB pieces over the threads
 * (one core does not reach the memory's bandwidth: W-B's Flatten moves
 * 14.7 MB each way a step) */
#define RT__COPY_PIECE ((size_t)1 << 18)
void rt_kern_par_memcpy(void *dst, const void *src, size_t bytes)
{
    const int64_t np = (int64_t)((bytes + RT__COPY_PIECE - 1) / RT__COPY_PIECE);
#pragma omp parallel for schedule(static) if (np >= 4)
    for (int64_t k = 0; k < np; k++) {
        const size_t o = (size_t)k * RT__COPY_PIECE;
        memcpy((char *)dst + o, (const char *)src + o,
               bytes - o < RT__COPY_PIECE ? bytes - o : RT__COPY_PIECE);
    }
}

void rt_kern_copy_fwd(const rt__kargs *a)
{
    int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    rt_kern_par_memcpy(a->y, a->x[0], sizeof(float) * (size_t)n);
}

void rt_kern_copy_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    float *restrict dx = a->dx[0];
    const float *restrict dy = a->dy;
    if (a->accum & 1u) {
#pragma omp parallel for schedule(static) if (n >= (int64_t)RT__COPY_PIECE)
        for (int64_t i = 0; i < n; i++)
            dx[i] += dy[i];
    } else {
        rt_kern_par_memcpy(dx, dy, sizeof(float) * (size_t)n);
    }
}

/* ----------------------------------------------------------------- dropout */

/* A dropout's draws this step: the engine's counter-based RNG on the
 * node's stream (rt__rng_u64(seed, RT__STREAM_DROPOUT + id, counter)),
 * its key computed once a call; the counter is the step in the high bits,
 * the element in the low 36 (RT__MAX_NUMEL) */
typedef struct {
    uint64_t key, hi;
} rt__drng;

static inline rt__drng rt__drop_rng(const rt__kargs *a)
{
    const rt__drng g = {rt__rng_key(a->r->seed, RT__STREAM_DROPOUT + (uint64_t)a->nd->id),
                        (uint64_t)a->r->step << 36};
    return g;
}

/* rt__rng_unit's value for element i: 24 random bits, exact as a float
 * (through int32, which vectorises, and is the same value) */
static inline float rt__drop_unit(const rt__drng *g, int64_t i)
{
    return (float)(int32_t)(rt__rng_at(g->key, g->hi | (uint64_t)i) >> 40) * (1.0f / 16777216.0f);
}

/* a standard normal for element i: Box-Muller on two counters (2i, 2i+1) */
static inline float rt__drop_normal(const rt__drng *g, int64_t i)
{
    const float u1 = rt__drop_unit(g, 2 * i), u2 = rt__drop_unit(g, 2 * i + 1);
    return sqrtf(-2.0f * logf(1.0f - u1)) * cosf(6.28318530717958648f * u2);
}

/* the factor element i of the batch is multiplied by (Dropout, Spatial,
 * GaussianDropout), or its added noise (GaussianNoise) */
static inline float rt__drop_factor(const rt__drng *g, const rt__dropout_params *p, int64_t i)
{
    const float rate = (float)p->rate;
    switch (p->mode) {
    case RT__DROP_SPATIAL: {
        const int64_t key = (i / p->per) * p->C + i % p->C; /* (sample, channel) */
        return rt__drop_unit(g, key) >= rate ? 1.0f / (1.0f - rate) : 0.0f;
    }
    case RT__DROP_NOISE: return rate * rt__drop_normal(g, i);
    case RT__DROP_GAUSS: return 1.0f + sqrtf(rate / (1.0f - rate)) * rt__drop_normal(g, i);
    default: return rt__drop_unit(g, rt__drop_key(p, i)) >= rate ? 1.0f / (1.0f - rate) : 0.0f;
    }
}

/* plain Dropout (no noise_shape): one draw an element, in a loop the
 * compiler vectorises (the draws and the products of the scalar path) */
static inline int rt__drop_plain(const rt__dropout_params *p)
{
    return p->mode == RT__DROP_PLAIN && !p->R;
}

void rt_kern_dropout_map(const rt__kargs *a, float *restrict y, const float *restrict x, int64_t i0,
                         int64_t m)
{
    const rt__dropout_params *p = rt__dropout_cp(a->nd);
    if (!a->r->training || p->rate == 0.0) {
        memcpy(y, x, sizeof(float) * (size_t)m);
        return;
    }
    const rt__drng g = rt__drop_rng(a);
    if (rt__drop_plain(p)) {
        const float rate = (float)p->rate, keep = 1.0f / (1.0f - rate);
        for (int64_t i = 0; i < m; i++)
            y[i] = x[i] * (rt__drop_unit(&g, i0 + i) >= rate ? keep : 0.0f);
    } else if (p->mode == RT__DROP_NOISE) {
        for (int64_t i = 0; i < m; i++)
            y[i] = x[i] + rt__drop_factor(&g, p, i0 + i);
    } else {
        for (int64_t i = 0; i < m; i++)
            y[i] = x[i] * rt__drop_factor(&g, p, i0 + i);
    }
}

/* chunks of this many values run over the threads (each chunk draws its
 * own elements' counters: the same values on any split) */
#define RT__DROP_CH INT64_C(16384)

void rt_kern_dropout_fwd(const rt__kargs *a)
{
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n), nc = (n + RT__DROP_CH - 1) / RT__DROP_CH;
#pragma omp parallel for schedule(static) if (nc > 4)
    for (int64_t c = 0; c < nc; c++) {
        const int64_t i0 = c * RT__DROP_CH, m = n - i0 < RT__DROP_CH ? n - i0 : RT__DROP_CH;
        rt_kern_dropout_map(a, a->y + i0, a->x[0] + i0, i0, m);
    }
}

/* dx (+)= dy * the forward's factor, drawn again */
static void rt__dropout_bwd_chunk(const rt__kargs *a, int64_t i0, int64_t m)
{
    const rt__dropout_params *p = rt__dropout_cp(a->nd);
    const int ident = p->rate == 0.0 || p->mode == RT__DROP_NOISE || !a->r->training;
    const float *restrict dy = a->dy + i0;
    float *restrict dx = a->dx[0] + i0;
    const int accum = a->accum & 1u;
    const rt__drng g = rt__drop_rng(a);
    if (!ident && rt__drop_plain(p)) {
        const float rate = (float)p->rate, keep = 1.0f / (1.0f - rate);
        if (accum)
            for (int64_t i = 0; i < m; i++)
                dx[i] += dy[i] * (rt__drop_unit(&g, i0 + i) >= rate ? keep : 0.0f);
        else
            for (int64_t i = 0; i < m; i++)
                dx[i] = dy[i] * (rt__drop_unit(&g, i0 + i) >= rate ? keep : 0.0f);
        return;
    }
    for (int64_t i = 0; i < m; i++) {
        float gr = ident ? dy[i] : dy[i] * rt__drop_factor(&g, p, i0 + i);
        dx[i] = accum ? dx[i] + gr : gr;
    }
}

void rt_kern_dropout_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n), nc = (n + RT__DROP_CH - 1) / RT__DROP_CH;
#pragma omp parallel for schedule(static) if (nc > 4)
    for (int64_t c = 0; c < nc; c++) {
        const int64_t i0 = c * RT__DROP_CH;
        rt__dropout_bwd_chunk(a, i0, n - i0 < RT__DROP_CH ? n - i0 : RT__DROP_CH);
    }
}

/* ActivityReg: y = x, the penalty into r->act_pen (a forward may run
 * without one: predict) */
void rt_kern_actreg_fwd(const rt__kargs *a)
{
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    const rt__actreg_params *p = rt__actreg_cp(a->nd);
    const float *restrict x = a->x[0];
    if (a->y != x)
        memcpy(a->y, x, sizeof(float) * (size_t)n);
    if (!a->r->act_pen)
        return;
    double s1 = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        s1 += fabs((double)x[i]);
        s2 += (double)x[i] * x[i];
    }
    const double pen = p->l1 * s1 + p->l2 * s2;
    *a->r->act_pen += p->batch_mean ? pen / (double)a->r->n : pen;
}

void rt_kern_actreg_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    const rt__actreg_params *p = rt__actreg_cp(a->nd);
    const double k = p->batch_mean ? 1.0 / (double)a->r->n : 1.0;
    const float c1 = (float)(p->l1 * k), c2 = (float)(2.0 * p->l2 * k);
    const float *restrict y = a->y, *restrict dy = a->dy;
    float *restrict dx = a->dx[0];
    const int accum = a->accum & 1u;
    for (int64_t i = 0; i < n; i++) {
        const float g = dy[i] + c1 * (float)((y[i] > 0) - (y[i] < 0)) + c2 * y[i];
        dx[i] = accum ? dx[i] + g : g;
    }
}
