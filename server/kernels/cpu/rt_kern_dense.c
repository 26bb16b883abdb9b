/* rt_kern_dense.c - Dense (x W + b, optional fused activation) and MatMul. */
#include <string.h>

#include "cpu/rt_kern_cpu.h"

/* Element-wise passes over at least this many floats are split over the
 * OpenMP threads oneDNN runs on (W-C's 128x512 activations); below it,
 * (W-A) a parallel region costs more than the loop. Splits are by rows or
 * by columns, never inside a sum, so results do not depend on them. The
 * serial branch is explicit: "omp parallel if (0)" still enters libgomp,
 * which cost W-A 1.5 us per step. */
#define RT__PAR_MIN 65536

/* the activation applied to the output: Dense's own or a fused one */
int rt_kern_dense_act(const rt__node *nd)
{
    const int own = rt__dense_cp(nd)->act;
    if (own || !nd->fused)
        return own;
    return nd->fused == &rt__op_relu      ? RT__ACT_RELU
           : nd->fused == &rt__op_sigmoid ? RT__ACT_SIGMOID
                                          : RT__ACT_TANH;
}

int rt_kern_dense_can_fuse_act(const rt__node *dense, const rt__node *act)
{
    (void)act;
    return rt__dense_cp(dense)->act == RT__ACT_NONE;
}

int rt_kern_dense_prepare(rt__node *nd, int64_t B, rt__arena *A)
{
    (void)A;
    nd->scratch_floats = rt_kern_dense_act(nd) ? rt__numel_n(&nd->out, B) : 0;
    return 0;
}

/* x is (R,K), W is (K,N), b is (N), y is (R,N); R = batch rows */
void rt_kern_dense_fwd(const rt__kargs *a)
{
    const rt__node *nd = a->nd;
    const int64_t K = rt__dense_cp(nd)->K, N = rt__dense_cp(nd)->N;
    const int act = rt_kern_dense_act(nd);
    const int64_t R = rt__rows(nd->in_shape[0], a->r->n);
    float *y = a->y;
    rt_kern_gemm(a->r, 0, 0, R, N, K, a->x[0], K, a->x[1], N, 0.0f, y, N);
    const float *b = nd->n_in > 2 ? a->x[2] : NULL;
    if (!b && !act)
        return;
        /* bias and activation in one pass over y */
#define RT__BIAS_ACT_ROW(i)                 \
    do {                                    \
        float *restrict yr = y + (i)*N;     \
        if (b)                              \
            for (int64_t j = 0; j < N; j++) \
                yr[j] += b[j];              \
        if (act)                            \
            rt_kern_act_fwd(act, yr, N);    \
    } while (0)
    if (R * N >= RT__PAR_MIN) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < R; i++)
            RT__BIAS_ACT_ROW(i);
    } else {
        for (int64_t i = 0; i < R; i++)
            RT__BIAS_ACT_ROW(i);
    }
#undef RT__BIAS_ACT_ROW
}

/* dz = dy * act'(y) (scratch, when an activation is fused), then
 * db = sum_rows dz, dW = x^T dz, dx = dz W^T */
void rt_kern_dense_bwd(const rt__kargs *a)
{
    const rt__node *nd = a->nd;
    const int64_t K = rt__dense_cp(nd)->K, N = rt__dense_cp(nd)->N;
    const int act = rt_kern_dense_act(nd);
    const int64_t R = rt__rows(nd->in_shape[0], a->r->n);
    const int par = R * N >= RT__PAR_MIN;
    const float *dz = a->dy;
    if (act) {
        float *s = a->scratch;
        const float *dy = a->dy, *y = a->y;
        if (par) {
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < R; i++)
                rt_kern_act_bwd(act, s + i * N, dy + i * N, y + i * N, N);
        } else {
            rt_kern_act_bwd(act, s, dy, y, R * N);
        }
        dz = s;
    }
    if (nd->n_in > 2 && a->dx[2]) {
        float *db = a->dx[2];
        const int accum = (a->accum & 4u) != 0;
        /* column blocks: each sum runs over the rows in order */
#define RT__COLSUM(j0_, j1_)                               \
    do {                                                   \
        float *restrict d = db + (j0_);                    \
        const int64_t w = (j1_) - (j0_);                   \
        if (!accum)                                        \
            memset(d, 0, sizeof(float) * (size_t)w);       \
        for (int64_t i = 0; i < R; i++) {                  \
            const float *restrict zr = dz + i * N + (j0_); \
            for (int64_t j = 0; j < w; j++)                \
                d[j] += zr[j];                             \
        }                                                  \
    } while (0)
        const int64_t nblk = (N + 63) / 64;
        if (par && nblk > 1) {
#pragma omp parallel for schedule(static)
            for (int64_t blk = 0; blk < nblk; blk++)
                RT__COLSUM(blk * 64, blk * 64 + 64 < N ? blk * 64 + 64 : N);
        } else {
            RT__COLSUM(0, N);
        }
#undef RT__COLSUM
    }
    if (a->dx[1])
        rt_kern_gemm(a->r, 1, 0, K, N, R, a->x[0], K, dz, N, (a->accum & 2u) ? 1.0f : 0.0f,
                     a->dx[1], N);
    if (a->dx[0])
        rt_kern_gemm(a->r, 0, 1, R, K, N, dz, N, a->x[1], N, (a->accum & 1u) ? 1.0f : 0.0f,
                     a->dx[0], K);
}
