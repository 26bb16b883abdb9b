/* rt_kern_bmm.c - BatchMatMul: one GEMM per leading index; BandMask. */
#include <omp.h>

#include "cpu/rt_kern_cpu.h"

/* C[g] = op(A[g]) op(B[g]) (+ C[g] when acc) for g < cnt, matrices
 * stored contiguously (sa, sb, sc floats apart). Tiny products run one
 * after another on the hand-written kernel (it shares one scratch);
 * larger ones split the products over the threads, each a serial
 * oneDNN call, so every product is computed whole by one thread and the
 * result does not depend on the split. */
static void rt__bmm_run(const rt__run *r, int64_t cnt, int ta, int tb, int64_t M, int64_t N,
                        int64_t K, const float *A, int64_t lda, int64_t sa, const float *B,
                        int64_t ldb, int64_t sb, int acc, float *C, int64_t sc)
{
    const float beta = acc ? 1.0f : 0.0f;
    if (cnt == 1 || M * N * K < RT_KERN_SMALL_GEMM) {
        for (int64_t g = 0; g < cnt; g++)
            rt_kern_gemm(r, ta, tb, M, N, K, A + g * sa, lda, B + g * sb, ldb, beta, C + g * sc, N);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < cnt; g++)
        rt_kern_dnnl_sgemm(1, ta, tb, M, N, K, A + g * sa, lda, B + g * sb, ldb, beta, C + g * sc,
                           N);
}

void rt_kern_bmm_fwd(const rt__kargs *a)
{
    const rt__bmm_params *p = rt__bmm_cp(a->nd);
    const int64_t cnt = p->G * (a->nd->in_shape[0]->batched ? a->r->n : 1);
    const int64_t M = p->M, N = p->N, K = p->K;
    rt__bmm_run(a->r, cnt, p->ta, p->tb, M, N, K, a->x[0], p->ta ? M : K, M * K, a->x[1],
                p->tb ? K : N, K * N, 0, a->y, M * N);
}

/* dA = dC op(B)^T (stored as A is), dB = op(A)^T dC (stored as B is) */
void rt_kern_bmm_bwd(const rt__kargs *a)
{
    const rt__bmm_params *p = rt__bmm_cp(a->nd);
    const int64_t cnt = p->G * (a->nd->in_shape[0]->batched ? a->r->n : 1);
    const int64_t M = p->M, N = p->N, K = p->K;
    const float *A = a->x[0], *B = a->x[1], *dC = a->dy;
    const int64_t lda = p->ta ? M : K, ldb = p->tb ? K : N;
    if (a->dx[0]) {
        const int acc = (a->accum & 1u) != 0;
        if (!p->ta) /* dA (M,K) = dC (M,N) op(B)^T */
            rt__bmm_run(a->r, cnt, 0, !p->tb, M, K, N, dC, N, M * N, B, ldb, K * N, acc, a->dx[0],
                        M * K);
        else /* dA^T (K,M) = op(B) (K,N) dC^T */
            rt__bmm_run(a->r, cnt, p->tb, 1, K, M, N, B, ldb, K * N, dC, N, M * N, acc, a->dx[0],
                        M * K);
    }
    if (a->dx[1]) {
        const int acc = (a->accum & 2u) != 0;
        if (!p->tb) /* dB (K,N) = op(A)^T (K,M) dC */
            rt__bmm_run(a->r, cnt, !p->ta, 0, K, N, M, A, lda, M * K, dC, N, M * N, acc, a->dx[1],
                        K * N);
        else /* dB^T (N,K) = dC^T (N,M) op(A) */
            rt__bmm_run(a->r, cnt, 1, p->ta, N, K, M, dC, N, M * N, A, lda, M * K, acc, a->dx[1],
                        K * N);
    }
}

/* BandMask: y = x where kept, -1e9 elsewhere; dx = dy where kept */
void rt_kern_band_fwd(const rt__kargs *a)
{
    const rt__band_params *p = rt__band_cp(a->nd);
    const int64_t mats = rt__numel_n(&a->nd->out, a->r->n) / (p->T * p->S);
    const float *restrict x = a->x[0];
    float *restrict y = a->y;
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < p->T; i++)
            for (int64_t j = 0; j < p->S; j++) {
                const int64_t k = (m * p->T + i) * p->S + j;
                y[k] = rt__band_keep(p, i, j) ? x[k] : -1e9f;
            }
}

void rt_kern_band_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const rt__band_params *p = rt__band_cp(a->nd);
    const int64_t mats = rt__numel_n(&a->nd->out, a->r->n) / (p->T * p->S);
    const float *restrict dy = a->dy;
    float *restrict dx = a->dx[0];
    const int accum = a->accum & 1u;
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < p->T; i++)
            for (int64_t j = 0; j < p->S; j++) {
                const int64_t k = (m * p->T + i) * p->S + j;
                const float g = rt__band_keep(p, i, j) ? dy[k] : 0.0f;
                dx[k] = accum ? dx[k] + g : g;
            }
}
