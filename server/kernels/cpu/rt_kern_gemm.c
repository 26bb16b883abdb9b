/*
 * rt_kern_gemm.c - row-major SGEMM: oneDNN for real sizes, a hand-written
 * kernel for tiny ones. dnnl_sgemm costs a few microseconds per call in
 * argument checks and threading even for a 20x4x32 product (W-A), which
 * is more than the whole step budget; below RT_KERN_SMALL_GEMM
 * multiply-adds the loops below (vectorised over N by -O3 -march=native)
 * win. bench/engine measures both sides of the threshold.
 */
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "rt_engine_impl.h"

/* C (M,N) (+)= A (M,K) B (K,N) */
static void rt__sgemm_nn(int64_t M, int64_t N, int64_t K,
                         const float *restrict A, int64_t lda,
                         const float *restrict B, int64_t ldb, float beta,
                         float *restrict C, int64_t ldc)
{
    for (int64_t i = 0; i < M; i++) {
        float *restrict c = C + i * ldc;
        if (beta == 0.0f)
            for (int64_t j = 0; j < N; j++) c[j] = 0.0f;
        const float *restrict a = A + i * lda;
        for (int64_t k = 0; k < K; k++) {
            const float ak = a[k];
            const float *restrict b = B + k * ldb;
            for (int64_t j = 0; j < N; j++) c[j] += ak * b[j];
        }
    }
}

/* C (M,N) (+)= A^T B with A stored (K,M) */
static void rt__sgemm_tn(int64_t M, int64_t N, int64_t K,
                         const float *restrict A, int64_t lda,
                         const float *restrict B, int64_t ldb, float beta,
                         float *restrict C, int64_t ldc)
{
    if (beta == 0.0f)
        for (int64_t i = 0; i < M; i++) memset(C + i * ldc, 0, sizeof(float) * (size_t)N);
    for (int64_t k = 0; k < K; k++) {
        const float *restrict a = A + k * lda;
        const float *restrict b = B + k * ldb;
        for (int64_t i = 0; i < M; i++) {
            const float ai = a[i];
            float *restrict c = C + i * ldc;
            for (int64_t j = 0; j < N; j++) c[j] += ai * b[j];
        }
    }
}

void rt_kern_gemm(const rt__run *r, int ta, int tb, int64_t M, int64_t N,
                  int64_t K, const float *A, int64_t lda, const float *B,
                  int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (M == 0 || N == 0) return;
    if (K == 0) {
        if (beta == 0.0f)
            for (int64_t i = 0; i < M; i++) memset(C + i * ldc, 0, sizeof(float) * (size_t)N);
        return;
    }
    if (M * N * K <= RT_KERN_SMALL_GEMM && !ta) {
        if (!tb) {
            rt__sgemm_nn(M, N, K, A, lda, B, ldb, beta, C, ldc);
            return;
        }
        if (K * N <= r->gemm_scratch_floats) {
            /* B is stored (N,K): transpose it once so the inner loop runs
             * contiguously over N */
            float *restrict bt = r->gemm_scratch;
            for (int64_t j = 0; j < N; j++)
                for (int64_t k = 0; k < K; k++) bt[k * N + j] = B[j * ldb + k];
            rt__sgemm_nn(M, N, K, A, lda, bt, N, beta, C, ldc);
            return;
        }
    } else if (M * N * K <= RT_KERN_SMALL_GEMM && ta && !tb) {
        rt__sgemm_tn(M, N, K, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K,
                                  1.0f, A, lda, B, ldb, beta, C, ldc);
    RT_ASSERT(st == dnnl_success); /* shapes were validated at compile */
}
