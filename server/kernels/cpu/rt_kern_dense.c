/* rt_kern_dense.c - Dense (x W + b, optional fused activation) and MatMul. */
#include <string.h>

#include "cpu/rt_kern_cpu.h"

/* x is (R,K), W is (K,N), b is (N), y is (R,N); R = batch rows */
void rt_kern_dense_fwd(const rt__kargs *a)
{
    const rt__node *nd = a->nd;
    const int64_t K = nd->ia[0], N = nd->ia[1];
    const int64_t R = rt__rows(nd->in_shape[0], a->r->n);
    float *restrict y = a->y;
    rt_kern_gemm(a->r, 0, 0, R, N, K, a->x[0], K, a->x[1], N, 0.0f, y, N);
    if (nd->n_in > 2) {
        const float *restrict b = a->x[2];
        for (int64_t i = 0; i < R; i++) {
            float *restrict yr = y + i * N;
            for (int64_t j = 0; j < N; j++) yr[j] += b[j];
        }
    }
    if (nd->act) rt_kern_act_fwd(nd->act, y, R * N);
}

/* dz = dy * act'(y) (scratch, when an activation is fused), then
 * db = sum_rows dz, dW = x^T dz, dx = dz W^T */
void rt_kern_dense_bwd(const rt__kargs *a)
{
    const rt__node *nd = a->nd;
    const int64_t K = nd->ia[0], N = nd->ia[1];
    const int64_t R = rt__rows(nd->in_shape[0], a->r->n);
    const float *dz = a->dy;
    if (nd->act) {
        rt_kern_act_bwd(nd->act, a->scratch, a->dy, a->y, R * N);
        dz = a->scratch;
    }
    if (nd->n_in > 2 && a->dx[2]) {
        float *restrict db = a->dx[2];
        if (!(a->accum & 4u)) memset(db, 0, sizeof(float) * (size_t)N);
        for (int64_t i = 0; i < R; i++) {
            const float *restrict d = dz + i * N;
            for (int64_t j = 0; j < N; j++) db[j] += d[j];
        }
    }
    if (a->dx[1])
        rt_kern_gemm(a->r, 1, 0, K, N, R, a->x[0], K, dz, N,
                     (a->accum & 2u) ? 1.0f : 0.0f, a->dx[1], N);
    if (a->dx[0])
        rt_kern_gemm(a->r, 0, 1, R, K, N, dz, N, a->x[1], N,
                     (a->accum & 1u) ? 1.0f : 0.0f, a->dx[0], K);
}
