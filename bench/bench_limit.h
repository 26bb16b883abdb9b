/*
 * bench_limit.h - the compute limit every benchmark sets its workloads
 * against, measured one way: warm, in a tight loop, at the thread count
 * the step uses.
 *
 *   float32: dnnl_sgemm, square 1024^3 and 2048^3, row-major N/N
 *   bf16:    oneDNN matmul with bf16 inputs and f32 accumulation and
 *            output (AVX512_BF16 / AMX where the CPU has them), 2048^3
 *
 * Each rate is the median over rounds of back-to-back calls, after
 * warm-up calls; a single cold call measures page faults and thread
 * start-up, not the machine, and reads a third low here. "The float32
 * limit" is the larger of the two float32 sizes.
 */
#ifndef RTRAIN_BENCH_LIMIT_H
#define RTRAIN_BENCH_LIMIT_H

typedef struct rt_bench_limit {
    int threads;     /* OpenMP threads the rates were measured at */
    double f32_1024; /* GFLOP/s */
    double f32_2048;
    double f32;      /* max of the two: the float32 limit */
    double bf16;     /* GFLOP/s; 0 where oneDNN has no bf16 matmul here */
    const char *bf16_impl; /* oneDNN's implementation name, or "none" */
} rt_bench_limit;

/* Measures at `threads` (<= 0: omp_get_max_threads()); restores the
 * caller's OpenMP default afterwards. Takes about a second. */
void rt_bench_limit_measure(rt_bench_limit *l, int threads);

/* one line: "limit (2 threads, warm loop): f32 sgemm 1024^3 ... GFLOP/s" */
void rt_bench_limit_print(const rt_bench_limit *l);

/* "X% of the f32 limit N" into buf, for a rate in GFLOP/s */
const char *rt_bench_limit_share(const rt_bench_limit *l, double gflops, char *buf,
                                 int len);

#endif
