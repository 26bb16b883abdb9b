/*
 * bench_limit.c - the float32 and bf16 compute limits (bench_limit.h).
 */
#include "bench_limit.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#define RT_BENCH_NAME "bench_limit"
#include "bench_util.h"

/* the clock of bench_util.h's now_s (RT_BENCH_CLOCK=cpu: CPU time) */
#define RT__ROUNDS 7

/* median over rounds of `calls` back-to-back runs of fn, in GFLOP/s */
static double rt__loop_rate(void (*fn)(void *), void *ctx, double flops, int calls)
{
    double r[RT__ROUNDS];
    for (int i = 0; i < 3; i++) fn(ctx); /* warm: pages, packing buffers, the team */
    for (int k = 0; k < RT__ROUNDS; k++) {
        const double t0 = now_s();
        for (int i = 0; i < calls; i++) fn(ctx);
        r[k] = flops * calls / (now_s() - t0) * 1e-9;
    }
    return median(r, RT__ROUNDS);
}

typedef struct {
    int64_t n;
    float *a, *b, *c;
} rt__sg;

static void rt__sgemm_call(void *p)
{
    rt__sg *s = p;
    dnnl_sgemm('N', 'N', s->n, s->n, s->n, 1.0f, s->a, s->n, s->b, s->n, 0.0f, s->c, s->n);
}

static double rt__sgemm_rate(int64_t n, int calls)
{
    rt__sg s = {.n = n};
    const size_t bytes = sizeof(float) * (size_t)(n * n);
    s.a = aligned_alloc(64, bytes);
    s.b = aligned_alloc(64, bytes);
    s.c = aligned_alloc(64, bytes);
    if (!s.a || !s.b || !s.c) die("sgemm operands", "out of memory");
    for (int64_t i = 0; i < n * n; i++) s.a[i] = s.b[i] = 0.001f * (float)(i % 97);
    const double r = rt__loop_rate(rt__sgemm_call, &s, 2.0 * (double)n * n * n, calls);
    free(s.a);
    free(s.b);
    free(s.c);
    return r;
}

typedef struct {
    dnnl_primitive_t p;
    dnnl_stream_t st;
    dnnl_exec_arg_t args[3];
} rt__mm;

static void rt__mm_call(void *p)
{
    rt__mm *m = p;
    dnnl_primitive_execute(m->p, m->st, 3, m->args);
    dnnl_stream_wait(m->st);
}

/* oneDNN matmul, bf16 x bf16 -> f32 (f32 accumulation), plain row-major
 * operands as the engine would hold them */
static double rt__bf16_rate(int64_t n, int calls, const char **impl)
{
    double rate = 0;
    dnnl_engine_t eng = NULL;
    dnnl_stream_t st = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_memory_t m[3] = {NULL, NULL, NULL};
    void *buf[3] = {NULL, NULL, NULL};
    *impl = "none";
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) return 0;
    if (dnnl_stream_create(&st, eng, dnnl_stream_default_flags) != dnnl_success) goto out;
    dnnl_memory_desc_t a, b, c;
    dnnl_dims_t d = {n, n};
    dnnl_memory_desc_init_by_tag(&a, 2, d, dnnl_bf16, dnnl_ab);
    dnnl_memory_desc_init_by_tag(&b, 2, d, dnnl_bf16, dnnl_ab);
    dnnl_memory_desc_init_by_tag(&c, 2, d, dnnl_f32, dnnl_ab);
    dnnl_matmul_desc_t md;
    if (dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL) != dnnl_success) {
        pd = NULL;
        goto out;
    }
    const char *name = "?";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name);
    /* a reference implementation is not the hardware's bf16 rate */
    if (strstr(name, "ref")) goto out;
    if (dnnl_primitive_create(&prim, pd) != dnnl_success) {
        prim = NULL;
        goto out;
    }
    const dnnl_memory_desc_t *mds[3] = {&a, &b, &c};
    for (int i = 0; i < 3; i++) {
        const size_t sz = dnnl_memory_desc_get_size(mds[i]);
        buf[i] = aligned_alloc(64, (sz + 63) & ~(size_t)63);
        if (!buf[i]) goto out;
        /* small bf16 values: 0x3c00-0x3cff patterns are finite, ~0.008 */
        for (size_t j = 0; j + 2 <= sz; j += 2) {
            const uint16_t v = (uint16_t)(0x3c00u | (j & 0xffu));
            memcpy((char *)buf[i] + j, &v, 2);
        }
        if (dnnl_memory_create(&m[i], mds[i], eng, buf[i]) != dnnl_success) {
            m[i] = NULL;
            goto out;
        }
    }
    rt__mm mm = {.p = prim, .st = st,
                 .args = {{DNNL_ARG_SRC, m[0]}, {DNNL_ARG_WEIGHTS, m[1]}, {DNNL_ARG_DST, m[2]}}};
    rate = rt__loop_rate(rt__mm_call, &mm, 2.0 * (double)n * n * n, calls);
    *impl = name;
out:
    for (int i = 0; i < 3; i++) {
        if (m[i]) dnnl_memory_destroy(m[i]);
        free(buf[i]);
    }
    if (prim) dnnl_primitive_destroy(prim);
    /* impl points into pd: keep pd (one small object per process) */
    if (pd && rate == 0) dnnl_primitive_desc_destroy(pd);
    if (st) dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    return rate;
}

void rt_bench_limit_measure(rt_bench_limit *l, int threads)
{
    const int outer = omp_get_max_threads();
    if (threads <= 0) threads = outer;
    omp_set_num_threads(threads);
    memset(l, 0, sizeof *l);
    l->threads = threads;
    l->f32_1024 = rt__sgemm_rate(1024, 8);
    l->f32_2048 = rt__sgemm_rate(2048, 2);
    l->f32 = l->f32_1024 > l->f32_2048 ? l->f32_1024 : l->f32_2048;
    l->bf16 = rt__bf16_rate(2048, 3, &l->bf16_impl);
    omp_set_num_threads(outer);
}

void rt_bench_limit_print(const rt_bench_limit *l)
{
    printf("limit (%d thread%s, warm tight loop, medians of %d rounds): f32 sgemm "
           "1024^3 %.0f GFLOP/s, 2048^3 %.0f GFLOP/s (f32 limit %.0f); bf16 matmul 2048^3 "
           "(f32 accumulation) %.0f GFLOP/s (%s)\n",
           l->threads, l->threads == 1 ? "" : "s", RT__ROUNDS, l->f32_1024, l->f32_2048,
           l->f32, l->bf16, l->bf16_impl);
}

const char *rt_bench_limit_share(const rt_bench_limit *l, double gflops, char *buf, int len)
{
    snprintf(buf, (size_t)len, "%.0f%% of the f32 limit %.0f (bf16 %.0f)",
             l->f32 > 0 ? 100.0 * gflops / l->f32 : 0.0, l->f32, l->bf16);
    return buf;
}
