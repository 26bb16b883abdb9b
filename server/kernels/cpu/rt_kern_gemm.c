/*
 * rt_kern_gemm.c - row-major SGEMM: oneDNN for real sizes, a hand-written
 * kernel for tiny ones. dnnl_sgemm costs a few microseconds per call in
 * argument checks and threading even for a 20x4x32 product (W-A), which
 * is more than the whole step budget; below RT_KERN_SMALL_GEMM
 * multiply-adds the loops below (vectorised over N by -O3 -march=native)
 * win. bench/engine measures both sides of the threshold.
 *
 * Between that and RT__GEMM_PAR_MACS oneDNN runs on the calling thread
 * only: its OpenMP team costs more than it saves there, and on a loaded
 * machine a team member that is not scheduled stalls the product for a
 * scheduler slice (W-D's Dense layers: 3-20 s instead of 0.4 s).
 */
#include <string.h>

#include <omp.h>

#include <oneapi/dnnl/dnnl.h>

#include "cpu/rt_kern_cpu.h"

/* Below this many multiply-adds oneDNN runs single-threaded. Measured
 * with dnnl_sgemm on this 2-vCPU host, one thread against two: on an idle
 * machine two threads save at most a few microseconds up to 1M (W-D's
 * Dense products, 32x64x512 and its dW/dx: 15 us against 11-16 us; 64^3
 * is 1.6x faster serial), from 128^3 (2M, 0.8x) they pay; with another
 * process on the cores the serial product is 2-5x faster up to 1M and a
 * W-D run 10x. W-C's big products (33M, 51M) keep the team. */
#ifndef RT__GEMM_PAR_MACS /* -D for before/after measurements */
#define RT__GEMM_PAR_MACS (INT64_C(1) << 21)
#endif
/* ... and whose operands together hold fewer floats than this. W-C's last
 * layer (128x10x512, dW 512x10x128, dx 128x512x10: 72K floats, 0.66M
 * multiply-adds) made the quiet W-C step 2.5% slower serial (1.90 ms
 * against 1.85 ms, medians of 9), reading the 256 KB activation that the
 * team had just written from both cores; W-D's Dense products touch 51K. */
#ifndef RT__GEMM_PAR_FLOATS
#define RT__GEMM_PAR_FLOATS (INT64_C(1) << 16)
#endif

#ifndef __AVX512F__
/* C (M,N) (+)= A (M,K) B (K,N) */
static void rt__sgemm_nn(int64_t M, int64_t N, int64_t K, const float *restrict A, int64_t lda,
                         const float *restrict B, int64_t ldb, float beta, float *restrict C,
                         int64_t ldc)
{
    for (int64_t i = 0; i < M; i++) {
        float *restrict c = C + i * ldc;
        if (beta == 0.0f)
            for (int64_t j = 0; j < N; j++)
                c[j] = 0.0f;
        const float *restrict a = A + i * lda;
        for (int64_t k = 0; k < K; k++) {
            const float ak = a[k];
            const float *restrict b = B + k * ldb;
            for (int64_t j = 0; j < N; j++)
                c[j] += ak * b[j];
        }
    }
}

/* C (M,N) (+)= A^T B with A stored (K,M) */
static void rt__sgemm_tn(int64_t M, int64_t N, int64_t K, const float *restrict A, int64_t lda,
                         const float *restrict B, int64_t ldb, float beta, float *restrict C,
                         int64_t ldc)
{
    if (beta == 0.0f)
        for (int64_t i = 0; i < M; i++)
            memset(C + i * ldc, 0, sizeof(float) * (size_t)N);
    for (int64_t k = 0; k < K; k++) {
        const float *restrict a = A + k * lda;
        const float *restrict b = B + k * ldb;
        for (int64_t i = 0; i < M; i++) {
            const float ai = a[i];
            float *restrict c = C + i * ldc;
            for (int64_t j = 0; j < N; j++)
                c[j] += ai * b[j];
        }
    }
}

#endif

#ifdef __AVX512F__
#include <immintrin.h>

/* The AVX-512 small kernels. Which dimension goes into the vector lanes is
 * chosen per call, so that W-A's (20,4)x(4,32), (20,32)x(32,3),
 * (32,20)^T x(20,3) all run on full or nearly full vectors:
 *   vj: lanes over N (C's rows are contiguous), A broadcast; for N < 16
 *       the lanes are masked, which measured faster than dot products
 *       over K with horizontal sums (20x3x32: 200 ns against 270 ns)
 *   vi: lanes over M (needs A stored K x M, i.e. transposed), B broadcast,
 *       for A^T B with few columns (W-A's dW2, 32x3) */
static inline __mmask16 rt__tail(int64_t r)
{
    return r >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << r) - 1u);
}

/* a(i,k) = A[i*sai + k*sak]; b(k, j..) contiguous: Bk[k*ldb + j].
 * Up to 32 columns, 4 rows run together (8 accumulators), so the FMA
 * chains over k interleave instead of waiting on each other's latency. */
/* rows r0.. of C, RB at a time, one or two 16-lane column blocks */
static inline __attribute__((always_inline)) int64_t
rt__gemm_vj_rows(const int RB, int64_t M, int64_t N, int64_t K, const float *A, int64_t sai,
                 int64_t sak, const float *Bk, int64_t ldb, float beta, float *C, int64_t ldc)
{
    const __mmask16 m0 = rt__tail(N), m1 = N > 16 ? rt__tail(N - 16) : 0;
    const int two = N > 16;
    int64_t i = 0;
    for (; i + RB <= M; i += RB) {
        __m512 a0[8], a1[8];
        for (int r = 0; r < RB; r++) {
            float *c = C + (i + r) * ldc;
            a0[r] = beta == 0.0f
                        ? _mm512_setzero_ps()
                        : _mm512_mul_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(m0, c));
            a1[r] = beta == 0.0f || !two
                        ? _mm512_setzero_ps()
                        : _mm512_mul_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(m1, c + 16));
        }
        const float *a = A + i * sai;
        for (int64_t k = 0; k < K; k++) {
            const float *bk = Bk + k * ldb;
            const __m512 b0 = _mm512_maskz_loadu_ps(m0, bk);
            const __m512 b1 = two ? _mm512_maskz_loadu_ps(m1, bk + 16) : _mm512_setzero_ps();
            for (int r = 0; r < RB; r++) {
                const __m512 av = _mm512_set1_ps(a[r * sai + k * sak]);
                a0[r] = _mm512_fmadd_ps(av, b0, a0[r]);
                if (two)
                    a1[r] = _mm512_fmadd_ps(av, b1, a1[r]);
            }
        }
        for (int r = 0; r < RB; r++) {
            float *c = C + (i + r) * ldc;
            _mm512_mask_storeu_ps(c, m0, a0[r]);
            if (two)
                _mm512_mask_storeu_ps(c + 16, m1, a1[r]);
        }
    }
    return i;
}

/* a(i,k) = A[i*sai + k*sak]; b(k, j..) contiguous: Bk[k*ldb + j].
 * Up to 32 columns, 8 or 4 rows run together, so the FMA chains over k
 * interleave instead of waiting on each other's latency. */
static void rt__gemm_vj(int64_t M, int64_t N, int64_t K, const float *A, int64_t sai, int64_t sak,
                        const float *Bk, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (N <= 32) {
        int64_t i = N <= 16 ? rt__gemm_vj_rows(8, M, N, K, A, sai, sak, Bk, ldb, beta, C, ldc) : 0;
        i += rt__gemm_vj_rows(4, M - i, N, K, A + i * sai, sai, sak, Bk, ldb, beta, C + i * ldc,
                              ldc);
        if (i < M)
            rt__gemm_vj_rows(1, M - i, N, K, A + i * sai, sai, sak, Bk, ldb, beta, C + i * ldc,
                             ldc);
        return;
    }
    for (int64_t j0 = 0; j0 < N; j0 += 64) {
        const int64_t nb_ = (N - j0 + 15) / 16, nb = nb_ > 4 ? 4 : nb_;
        __mmask16 m[4];
        for (int b = 0; b < 4; b++)
            m[b] = b < nb ? rt__tail(N - j0 - 16 * b) : 0;
        for (int64_t i = 0; i < M; i++) {
            float *c = C + i * ldc + j0;
            __m512 acc[4];
            for (int b = 0; b < 4; b++)
                acc[b] = beta == 0.0f ? _mm512_setzero_ps()
                                      : _mm512_mul_ps(_mm512_set1_ps(beta),
                                                      _mm512_maskz_loadu_ps(m[b], c + 16 * b));
            const float *a = A + i * sai;
            for (int64_t k = 0; k < K; k++) {
                const __m512 av = _mm512_set1_ps(a[k * sak]);
                const float *bk = Bk + k * ldb + j0;
                for (int b = 0; b < 4; b++)
                    if (b < nb)
                        acc[b] =
                            _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m[b], bk + 16 * b), acc[b]);
            }
            for (int b = 0; b < 4; b++)
                if (b < nb)
                    _mm512_mask_storeu_ps(c + 16 * b, m[b], acc[b]);
        }
    }
}

/* a(i.., k) contiguous: Ak[k*lda + i]; b(k,j) = B[k*sbk + j*sbj] */
static void rt__gemm_vi(int64_t M, int64_t N, int64_t K, const float *Ak, int64_t lda,
                        const float *B, int64_t sbk, int64_t sbj, float beta, float *C, int64_t ldc)
{
    for (int64_t i0 = 0; i0 < M; i0 += 64) {
        const int64_t nb_ = (M - i0 + 15) / 16, nb = nb_ > 4 ? 4 : nb_;
        const int64_t rows = M - i0 < 64 ? M - i0 : 64;
        __mmask16 m[4];
        for (int b = 0; b < 4; b++)
            m[b] = b < nb ? rt__tail(M - i0 - 16 * b) : 0;
        for (int64_t j = 0; j < N; j++) {
            __m512 acc[4];
            for (int b = 0; b < 4; b++)
                acc[b] = _mm512_setzero_ps();
            for (int64_t k = 0; k < K; k++) {
                const __m512 bv = _mm512_set1_ps(B[k * sbk + j * sbj]);
                const float *ak = Ak + k * lda + i0;
                for (int b = 0; b < 4; b++)
                    if (b < nb)
                        acc[b] =
                            _mm512_fmadd_ps(bv, _mm512_maskz_loadu_ps(m[b], ak + 16 * b), acc[b]);
            }
            float t[64];
            for (int b = 0; b < 4; b++)
                if (b < nb)
                    _mm512_storeu_ps(t + 16 * b, acc[b]);
            float *c = C + i0 * ldc + j;
            if (beta == 0.0f)
                for (int64_t i = 0; i < rows; i++)
                    c[i * ldc] = t[i];
            else
                for (int64_t i = 0; i < rows; i++)
                    c[i * ldc] = beta * c[i * ldc] + t[i];
        }
    }
}

static void rt__transpose(const float *restrict B, int64_t rows, int64_t cols, int64_t ld,
                          float *restrict T)
{
    /* T (cols x rows) = B (rows x cols, leading dim ld)^T */
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            T[c * rows + r] = B[r * ld + c];
}

/* Returns 0 if it handled the product. */
static int rt__gemm_small(const rt__run *r, int ta, int tb, int64_t M, int64_t N, int64_t K,
                          const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                          float *C, int64_t ldc)
{
    const int64_t sai = ta ? 1 : lda, sak = ta ? lda : 1;
    if (N >= 16 || !ta) {
        if (!tb) {
            rt__gemm_vj(M, N, K, A, sai, sak, B, ldb, beta, C, ldc);
            return 0;
        }
        if (K * N > r->gemm_scratch_floats)
            return -1;
        rt__transpose(B, N, K, ldb, r->gemm_scratch); /* B is N x K */
        rt__gemm_vj(M, N, K, A, sai, sak, r->gemm_scratch, N, beta, C, ldc);
        return 0;
    }
    rt__gemm_vi(M, N, K, A, lda, B, tb ? 1 : ldb, tb ? ldb : 1, beta, C, ldc);
    return 0;
}
#endif

void rt_kern_gemm(const rt__run *r, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (M == 0 || N == 0)
        return;
    if (K == 0) {
        if (beta == 0.0f)
            for (int64_t i = 0; i < M; i++)
                memset(C + i * ldc, 0, sizeof(float) * (size_t)N);
        return;
    }
#ifdef __AVX512F__
    /* measured (bench_engine): up to 32 columns the register-blocked
     * kernel beats oneDNN to 32x32x32; wider, only to a quarter of that */
    const int64_t mnk = M * N * K;
    if (mnk <= RT_KERN_SMALL_GEMM && (N <= 32 || mnk <= RT_KERN_SMALL_GEMM / 4) &&
        rt__gemm_small(r, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc) == 0)
        return;
#else
    /* portable loops for hosts without AVX-512 (the build is -march=native) */
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
                for (int64_t k = 0; k < K; k++)
                    bt[k * N + j] = B[j * ldb + k];
            rt__sgemm_nn(M, N, K, A, lda, bt, N, beta, C, ldc);
            return;
        }
    } else if (M * N * K <= RT_KERN_SMALL_GEMM && ta && !tb) {
        rt__sgemm_tn(M, N, K, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#endif
    /* The serial/parallel choice depends on the shape only, so a given
     * product always takes the same path (and rounds the same way).
     * omp_set_num_threads sets this thread's default only, as in
     * rt_kern_conv.c; inside a parallel region oneDNN is serial anyway. */
    const int serial = M * N * K < RT__GEMM_PAR_MACS && M * K + K * N + M * N < RT__GEMM_PAR_FLOATS;
    rt_kern_dnnl_sgemm(serial, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

void rt_kern_dnnl_sgemm(int serial, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                        int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    const int outer = serial && !omp_in_parallel() ? omp_get_max_threads() : 0;
    if (outer > 1)
        omp_set_num_threads(1);
    dnnl_status_t st =
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    if (outer > 1)
        omp_set_num_threads(outer);
    RT_ASSERT(st == dnnl_success); /* shapes were validated at compile */
}
