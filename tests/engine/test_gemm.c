/*
 * test_gemm.c - rt_kern_gemm against a double-precision reference for all
 * four transpose combinations, beta 0 and 1, shapes that take every path
 * (the small kernels' lanes over N, M or K, masked tails, the scratch
 * transposes) and shapes above the threshold (oneDNN). Also: the same call
 * twice gives the same bits.
 * Tolerance: |c - ref| <= 1e-5 * (1 + sum_k |a||b|).
 */
#include <stdint.h>

#include "cpu/rt_kern_cpu.h"
#include "rt_test.h"

static float scratch[RT_KERN_GEMM_SCRATCH];

static void check(int ta, int tb, int M, int N, int K, float beta)
{
    const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
    float *A = malloc(sizeof(float) * (size_t)(ta ? K : M) * lda);
    float *B = malloc(sizeof(float) * (size_t)(tb ? N : K) * ldb);
    float *C = malloc(sizeof(float) * (size_t)M * ldc);
    float *C2 = malloc(sizeof(float) * (size_t)M * ldc);
    float *C0 = malloc(sizeof(float) * (size_t)M * ldc);
    uint32_t s = 2463534242u ^ (uint32_t)(M * 131 + N * 7 + K);
#define RND() (s ^= s << 13, s ^= s >> 17, s ^= s << 5, (float)(s % 2001) / 1000.0f - 1.0f)
    for (int i = 0; i < (ta ? K : M) * lda; i++) A[i] = RND();
    for (int i = 0; i < (tb ? N : K) * ldb; i++) B[i] = RND();
    for (int i = 0; i < M * ldc; i++) C0[i] = C[i] = C2[i] = RND();
    rt__run r = {.gemm_scratch = scratch, .gemm_scratch_floats = RT_KERN_GEMM_SCRATCH};
    rt_kern_gemm(&r, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    rt_kern_gemm(&r, ta, tb, M, N, K, A, lda, B, ldb, beta, C2, ldc);
    int bad = 0;
    for (int i = 0; i < M && !bad; i++) {
        for (int j = 0; j < N; j++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[k * lda + i] : A[i * lda + k];
                double b = tb ? B[j * ldb + k] : B[k * ldb + j];
                ref += a * b;
                mag += fabs(a * b);
            }
            double c0 = C0[i * ldc + j];
            ref += beta * c0;
            mag += fabs(beta * c0);
            if (fabs(C[i * ldc + j] - ref) > 1e-5 * (1 + mag) ||
                memcmp(&C[i * ldc + j], &C2[i * ldc + j], 4)) {
                fprintf(stderr, "%c%c M=%d N=%d K=%d beta=%g: C[%d,%d] = %.7g, want %.7g\n",
                        ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, (double)beta, i, j,
                        (double)C[i * ldc + j], ref);
                bad = 1;
                rt_test_failures++;
                break;
            }
        }
    }
    free(A);
    free(B);
    free(C);
    free(C2);
    free(C0);
}

int main(void)
{
    static const int shapes[][3] = {
        {20, 32, 4}, {20, 3, 32}, {4, 32, 20}, {32, 3, 20}, {20, 32, 3}, {1, 1, 1},
        {7, 5, 3},   {17, 33, 19}, {64, 64, 8}, {3, 70, 9}, {70, 2, 17}, {16, 16, 16},
        {128, 10, 512}, {200, 130, 60}, /* above the threshold: oneDNN */
    };
    int n = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int b = 0; b < 2; b++, n++)
                    check(ta, tb, shapes[i][0], shapes[i][1], shapes[i][2], b ? 1.0f : 0.0f);
    printf("%d products checked\n", n);
    return rt_test_done("test_gemm");
}
