/*
 * rt_kern_bf16.c - mixed bfloat16 Dense, MatMul and Conv2D on oneDNN's
 * bf16 primitives (AVX512_BF16, AMX where oneDNN finds it), float32
 * accumulation and float32 results.
 *
 * What is bf16: the inputs of the products. The forward call rounds x
 * (unless compile stored it bf16: node->bf16_in, rt_kern_bf16act.c) and
 * the weights to bf16 into the node's workspace (the weights once per
 * step: the backward call multiplies by the same copy; a Dense, MatMul or
 * 1x1 Conv2D whose backward computes no dx rounds them into its forward
 * call's scratch, which no later call keeps), the backward call rounds
 * the output gradient. dx, dW and db are float32, so the optimizer
 * sees the float32 values Keras' mixed_bfloat16 would cast back up; y is
 * float32, or bf16 where compile stores it so (node->bf16_out: every
 * reader reads bf16, as BatchNorm and Relu do), then the primitive itself
 * rounds its float32 accumulator as it writes y (dst bf16, no separate
 * pass). Bias and the
 * activation run on the float32 accumulator (a post-op). Conv2D with the
 * MaxPool2D that reads it runs fused (no pre-pool tensor in the arena;
 * the same numbers as the two apart), see "Conv2D + MaxPool2D" below.
 *
 * Primitives are built at compile for the plan's batch B and kept in a
 * process-wide table (per shape), as rt_kern_conv_dnnl.c does. A smaller
 * last batch runs the same primitives: the bf16 copies' rows past the
 * batch are zeros, so they add nothing to dW and db, and the rows they
 * produce in y and dx lie in the buffers' B-row extent, which no reader
 * looks at. Where oneDNN has no primitive, or only its reference one,
 * prepare hands the node back to the float32 kernel and the compile report
 * says float32 for it. A Conv2D + MaxPool2D with few products a sum (an
 * RGB first layer) multiplies its bf16 values on the float32 fused kernel
 * instead (still bf16 numbers; "Conv2D + MaxPool2D with few products a
 * sum" below).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "cpu/rt_kern_bf16.h"
#include "cpu/rt_kern_conv.h"
#include "cpu/rt_kern_cpu.h"
#include "cpu/rt_kern_dnnl.h"

#define RT__BF_PAR 65536 /* conversions over fewer values run serial */

int rt_kern_bf16_conv_min_c = 1;

int rt_kern_bf16_supported(char *err, size_t errlen)
{
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if (((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) ==
        (unsigned)dnnl_cpu_isa_avx512_core_bf16)
        return 0;
    snprintf(err, errlen,
             "mixed_bfloat16: this CPU has no bf16 instructions (oneDNN runs %s); "
             "use precision float32",
             dnnl_cpu_isa2str(isa));
    return RT_ESTATE;
}

/* ---------------------------------------------------------- conversion */

void rt_kern_from_bf16_serial(float *restrict d, const uint16_t *restrict s, int64_t n)
{
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
        const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + i)));
        _mm512_storeu_ps(d + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
#endif
    for (; i < n; i++) {
        const uint32_t u = (uint32_t)s[i] << 16;
        memcpy(d + i, &u, sizeof u);
    }
}

void rt_kern_to_bf16_serial(uint16_t *restrict d, const float *restrict s, int64_t n)
{
    int64_t i = 0;
#if defined(__AVX512BF16__) && defined(__AVX512F__)
    /* vcvtneps2bf16: the same rounding (nearest even) as rt__bf16 */
    for (; i + 16 <= n; i += 16) {
        const __m256bh v = _mm512_cvtneps_pbh(_mm512_loadu_ps(s + i));
        _mm256_storeu_si256((__m256i *)(d + i), (__m256i)v);
    }
#endif
    for (; i < n; i++)
        d[i] = rt_kern_bf16_round(s[i]);
}

/* d[i] = s[i] rounded to bf16 (nearest even) and widened back */
static void rt__bround_serial(float *restrict d, const float *restrict s, int64_t n)
{
    int64_t i = 0;
#if defined(__AVX512BF16__) && defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
        const __m256bh v = _mm512_cvtneps_pbh(_mm512_loadu_ps(s + i));
        const __m512i w = _mm512_cvtepu16_epi32((__m256i)v);
        _mm512_storeu_ps(d + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
#endif
    for (; i < n; i++) {
        const uint32_t u = (uint32_t)rt_kern_bf16_round(s[i]) << 16;
        memcpy(d + i, &u, sizeof u);
    }
}

void rt_kern_to_bf16(uint16_t *dst, const float *src, int64_t n)
{
    if (n < RT__BF_PAR) {
        rt_kern_to_bf16_serial(dst, src, n);
        return;
    }
    const int nt = omp_get_max_threads() < 1 ? 1 : omp_get_max_threads();
    const int64_t cs = ((n + nt - 1) / nt + 15) & ~(int64_t)15;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        const int64_t i0 = cs * t, m = n - i0 < cs ? n - i0 : cs;
        if (m > 0)
            rt_kern_to_bf16_serial(dst + i0, src + i0, m);
    }
}

void rt_kern_from_bf16(float *dst, const uint16_t *src, int64_t n)
{
    const int64_t bs = 16384, nb = (n + bs - 1) / bs;
#pragma omp parallel for schedule(static) if (n >= RT__BF_PAR)
    for (int64_t b = 0; b < nb; b++)
        rt_kern_from_bf16_serial(dst + b * bs, src + b * bs, n - b * bs < bs ? n - b * bs : bs);
}

/* the first n values of a bf16 copy of rows*per values converted, the rest
 * zeroed (the padded rows of a smaller last batch) */
static void rt__to_bf16_pad(uint16_t *dst, const float *src, int64_t n, int64_t cap)
{
    rt_kern_to_bf16(dst, src, n);
    if (cap > n)
        memset(dst + n, 0, sizeof(uint16_t) * (size_t)(cap - n));
}

/* bf16 values -> floats of storage, each part starting on 64 bytes */
static int64_t rt__hf(int64_t bf16s) { return ((bf16s + 1) / 2 + 15) & ~(int64_t)15; }
static int64_t rt__ff(int64_t floats) { return (floats + 15) & ~(int64_t)15; }

/* A product's x in bf16, n of cap values (the plan's batch) used: the
 * value itself where it is stored bf16 (the forward zeroes its rows past
 * the batch: stale arena bytes there could read as NaN), else its copy at
 * the workspace's start, which the forward makes; rt__bx_floats: the
 * floats of workspace that copy takes */
static uint16_t *rt__bx(const rt__kargs *a, int fwd, int64_t n, int64_t cap)
{
    if (a->nd->bf16_in & 1u) {
        uint16_t *x = (uint16_t *)a->x[0];
        if (fwd && cap > n)
            memset(x + n, 0, sizeof(uint16_t) * (size_t)(cap - n));
        return x;
    }
    uint16_t *xb = (uint16_t *)a->ws;
    if (fwd)
        rt__to_bf16_pad(xb, a->x[0], n, cap);
    return xb;
}
static int64_t rt__bx_floats(const rt__node *nd, int64_t cap)
{
    return nd->bf16_in & 1u ? 0 : rt__hf(cap);
}

/* ----------------------------------------------------------- primitives */

/* a += b over n floats */
static void rt__badd(float *restrict a, const float *restrict b, int64_t n)
{
#pragma omp parallel for schedule(static) if (n >= (INT64_C(1) << 18))
    for (int64_t i = 0; i < n; i++)
        a[i] += b[i];
}

/* threads the dz pass sums db over at most (its partials' scratch) */
#define RT__BDZ_NT 16

/* floats of the dz pass's partial sums for cols columns */
static int64_t rt__bdz_part(int64_t cols) { return RT__BDZ_NT * rt__ff(cols); }

/* One pass over the output gradient: dz = dy * act'(y) (y unread without
 * an activation; stored bf16 when yb) rounded to bf16 into dzb, its rows
 * from `rows` to `cap` zeroed (or, with dzf, rounded and widened back into
 * dzf, no rows past); with db the float32 sums of dz's columns too, the
 * bias gradient of the definition (rt_ref_bf16.c): per thread over a
 * fixed split of the rows (in part), then added in thread order, over db
 * (dbadd) or not. */
static void rt__bdz(int act, uint16_t *dzb, float *dzf, float *db, int dbadd, const float *dy,
                    const void *y, int yb, int64_t rows, int64_t cols, int64_t cap, float *part)
{
    int nt = omp_get_max_threads() < 1 ? 1 : omp_get_max_threads();
    if (nt > RT__BDZ_NT)
        nt = RT__BDZ_NT;
    if (rows * cols < RT__BF_PAR)
        nt = 1;
    int team = 1;
#pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num(), T = omp_get_num_threads();
        if (t == 0)
            team = T;
        const int64_t r0 = rows * t / T, r1 = rows * (t + 1) / T;
        float *restrict pd = part + t * rt__ff(cols);
        float g[256], yt[256];
        if (db)
            memset(pd, 0, sizeof(float) * (size_t)cols);
        for (int64_t r = r0; r < r1; r++)
            for (int64_t c0 = 0; c0 < cols; c0 += 256) {
                const int64_t m = cols - c0 < 256 ? cols - c0 : 256, o = r * cols + c0;
                const float *v = dy + o;
                if (act) {
                    rt_kern_act_bwd(act, g, dy + o, rt_kern_bf16_ld(y, yb, o, m, yt), m);
                    v = g;
                }
                if (dzf)
                    rt__bround_serial(dzf + o, v, m);
                else
                    rt_kern_to_bf16_serial(dzb + o, v, m);
                if (db)
                    for (int64_t j = 0; j < m; j++)
                        pd[c0 + j] += v[j];
            }
    }
    if (!dzf && cap > rows)
        memset(dzb + rows * cols, 0, sizeof(uint16_t) * (size_t)((cap - rows) * cols));
    if (db) {
        if (!dbadd)
            memset(db, 0, sizeof(float) * (size_t)cols);
        for (int t = 0; t < team; t++)
            rt__badd(db, part + t * rt__ff(cols), cols);
    }
}

/* a node oneDNN cannot run in bf16 goes back to float32, and says so */
static int rt__bf32(rt__node *nd, int64_t B, rt__arena *A)
{
    nd->kern = rt_kern_cpu_f32_kernel(nd->op, nd->fused);
    RT_ASSERT(nd->kern);
    nd->prec = RT_PREC_F32;
    return nd->kern->prepare ? nd->kern->prepare(nd, B, A) : 0;
}

/* ---------------------------------------------------------------- Dense */

typedef struct {
    int64_t M, K, N, bias, act; /* M: rows at the plan's batch */
    int64_t yb;                 /* y stored bf16 (node->bf16_out) */
} rt__bmm_key;

typedef struct {
    rt__bmm_key key; /* first: the table compares it */
    int ok;
    dnnl_primitive_t fwd, dw_set, dw_add, dx_set, dx_add;
    dnnl_memory_desc_t xb, wb, y, bias, xbT, dzb, dw, wbT, dx;
    dnnl_memory_desc_t sp[5];
    int64_t sp_floats;
} rt__bmm;

static int rt__bmm_one(const dnnl_memory_desc_t *s, const dnnl_memory_desc_t *w,
                       const dnnl_memory_desc_t *b, const dnnl_memory_desc_t *d,
                       const_dnnl_post_ops_t po, dnnl_primitive_t *p, dnnl_memory_desc_t *sp)
{
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    if (dnnl_matmul_desc_init(&md, s, w, b, d) != dnnl_success ||
        rt_kern_dnnl_pd(&md, po, NULL, 1, &pd) < 0)
        return -1;
    return rt_kern_dnnl_prim(pd, p, sp);
}

static void *rt__bmm_build(const void *kp)
{
    const rt__bmm_key *k = kp;
    rt__bmm *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->key = *k;
    if (!rt_kern_dnnl_engine())
        return d; /* ok 0 */
    const int64_t M = k->M, K = k->K, N = k->N;
    dnnl_dims_t mk = {M, K}, kn = {K, N}, mn = {M, N}, b1 = {1, N}, km = {K, M}, nk = {N, K};
    dnnl_dims_t s_km = {1, K}, s_nk = {1, N};
    dnnl_memory_desc_init_by_tag(&d->xb, 2, mk, dnnl_bf16, dnnl_ab);
    dnnl_memory_desc_init_by_tag(&d->wb, 2, kn, dnnl_bf16, dnnl_ab);
    /* y bf16: oneDNN rounds the float32 accumulator (after bias and
     * activation) as it writes it */
    dnnl_memory_desc_init_by_tag(&d->y, 2, mn, k->yb ? dnnl_bf16 : dnnl_f32, dnnl_ab);
    dnnl_memory_desc_init_by_tag(&d->bias, 2, b1, dnnl_f32, dnnl_ab);
    dnnl_memory_desc_init_by_strides(&d->xbT, 2, km, dnnl_bf16, s_km); /* x^T: (K,M) view */
    dnnl_memory_desc_init_by_tag(&d->dzb, 2, mn, dnnl_bf16, dnnl_ab);
    dnnl_memory_desc_init_by_tag(&d->dw, 2, kn, dnnl_f32, dnnl_ab);
    dnnl_memory_desc_init_by_strides(&d->wbT, 2, nk, dnnl_bf16, s_nk); /* W^T: (N,K) view */
    dnnl_memory_desc_init_by_tag(&d->dx, 2, mk, dnnl_f32, dnnl_ab);
    dnnl_post_ops_t pa = rt_kern_dnnl_act_po((int)k->act, 0),
                    ps = rt_kern_dnnl_act_po(RT__ACT_NONE, 1);
    const int rc =
        rt__bmm_one(&d->xb, &d->wb, k->bias ? &d->bias : NULL, &d->y, pa, &d->fwd, &d->sp[0]) ||
        rt__bmm_one(&d->xbT, &d->dzb, NULL, &d->dw, NULL, &d->dw_set, &d->sp[1]) ||
        rt__bmm_one(&d->xbT, &d->dzb, NULL, &d->dw, ps, &d->dw_add, &d->sp[2]) ||
        rt__bmm_one(&d->dzb, &d->wbT, NULL, &d->dx, NULL, &d->dx_set, &d->sp[3]) ||
        rt__bmm_one(&d->dzb, &d->wbT, NULL, &d->dx, ps, &d->dx_add, &d->sp[4]);
    if (pa)
        dnnl_post_ops_destroy(pa);
    if (ps)
        dnnl_post_ops_destroy(ps);
    if (rc)
        return d; /* ok 0: remembered as refused (its primitives leak once) */
    for (int i = 0; i < 5; i++)
        if (rt_kern_dnnl_floats(&d->sp[i]) > d->sp_floats)
            d->sp_floats = rt_kern_dnnl_floats(&d->sp[i]);
    d->ok = 1;
    return d;
}

static rt_kern_dnnl_cache rt__bmm_tab = RT_KERN_DNNL_CACHE_INIT;

/* where a bf16 product's forward puts its W copy in its scratch (where
 * the workspace does not keep it): past dz in bf16, db's partial sums and
 * the scratchpad */
static int64_t rt__bmm_wb_off(const rt__bmm *d)
{
    return rt__hf(d->key.M * d->key.N) + rt__bdz_part(d->key.N) + d->sp_floats;
}

/* whether the workspace keeps W's bf16 copy for the backward's dx */
static int rt__bmm_wkeep(const rt__node *nd) { return (nd->bwd_dx & 1u) != 0; }

/* W's bf16 copy: in the workspace after x's, or in the forward's scratch */
static uint16_t *rt__bmm_wb(const rt__kargs *a, const rt__bmm *d)
{
    if (rt__bmm_wkeep(a->nd))
        return (uint16_t *)(a->ws + rt__bx_floats(a->nd, d->key.M * d->key.K));
    return (uint16_t *)(a->scratch + rt__bmm_wb_off(d));
}

/* a bf16 product x (rows of K) * W (K x N, row-major) + bias, activation
 * act: Dense, MatMul and the 1x1 Conv2D that is one (rt__bconv_mm) */
static int rt__bmm_prepare(rt__node *nd, int64_t B, rt__arena *A, int64_t K, int64_t N, int act)
{
    rt__bmm_key k;
    memset(&k, 0, sizeof k);
    k.M = rt__rows(nd->in_shape[0], B), k.K = K, k.N = N;
    k.bias = nd->n_in > 2, k.act = act, k.yb = nd->bf16_out != 0;
    const rt__bmm *d = rt_kern_dnnl_cache_get(&rt__bmm_tab, &k, sizeof k, rt__bmm_build);
    if (!d || !d->ok)
        return rt__bf32(nd, B, A);
    nd->kdata = (void *)d;
    /* workspace, from the forward call to the backward: x in bf16 (where
     * it is stored float32; dW multiplies dz by it), W in bf16 where the
     * backward computes dx from it. A node whose backward computes no dx
     * (a first layer) rounds W into the forward's scratch instead, which
     * the arena frees after the call (W-C's first Dense: 0.77 MiB). */
    const int64_t wf = rt__hf(k.K * k.N);
    nd->ws_floats = rt__bx_floats(nd, k.M * k.K) + (rt__bmm_wkeep(nd) ? wf : 0);
    /* scratch: dz in bf16, db's partial sums, the scratchpad (and W) */
    nd->scratch_floats = rt__bmm_wb_off(d) + (rt__bmm_wkeep(nd) ? 0 : wf);
    return 0;
}

static int rt__bdense_prepare(rt__node *nd, int64_t B, rt__arena *A)
{
    const rt__dense_params *dp = rt__dense_cp(nd);
    return rt__bmm_prepare(nd, B, A, dp->K, dp->N, rt_kern_dense_act(nd));
}

static void rt__bdense_fwd(const rt__kargs *a)
{
    const rt__node *nd = a->nd;
    const rt__bmm *d = nd->kdata;
    const int64_t M = rt__rows(nd->in_shape[0], a->r->n), MB = d->key.M;
    const int64_t K = d->key.K, N = d->key.N;
    uint16_t *xb = rt__bx(a, 1, M * K, MB * K);
    uint16_t *wb = rt__bmm_wb(a, d);
    float *sp = a->scratch + rt__hf(MB * N) + rt__bdz_part(N); /* as the backward's */
    rt_kern_to_bf16(wb, a->x[1], K * N);
    rt_kern_dnnl_args g = {0};
    rt_kern_dnnl_arg(&g, DNNL_ARG_SRC, &d->xb, xb);
    rt_kern_dnnl_arg(&g, DNNL_ARG_WEIGHTS, &d->wb, wb);
    if (d->key.bias)
        rt_kern_dnnl_arg(&g, DNNL_ARG_BIAS, &d->bias, a->x[2]);
    rt_kern_dnnl_arg(&g, DNNL_ARG_DST, &d->y, a->y);
    rt_kern_dnnl_exec(d->fwd, &g, &d->sp[0], sp, 0);
}

static void rt__bdense_bwd(const rt__kargs *a)
{
    const rt__node *nd = a->nd;
    const rt__bmm *d = nd->kdata;
    const int64_t M = rt__rows(nd->in_shape[0], a->r->n), MB = d->key.M;
    const int64_t K = d->key.K, N = d->key.N;
    const uint16_t *xb = rt__bx(a, 0, M * K, MB * K);
    uint16_t *dzb = (uint16_t *)a->scratch;
    float *part = a->scratch + rt__hf(MB * N), *sp = part + rt__bdz_part(N);
    rt__bdz((int)d->key.act, dzb, NULL, d->key.bias ? a->dx[2] : NULL, (a->accum & 4u) != 0, a->dy,
            a->y, (int)d->key.yb, M, N, MB, part);
    if (a->dx[1]) {
        const int add = (a->accum & 2u) != 0;
        rt_kern_dnnl_args g = {0};
        rt_kern_dnnl_arg(&g, DNNL_ARG_SRC, &d->xbT, xb);
        rt_kern_dnnl_arg(&g, DNNL_ARG_WEIGHTS, &d->dzb, dzb);
        rt_kern_dnnl_arg(&g, DNNL_ARG_DST, &d->dw, a->dx[1]);
        rt_kern_dnnl_exec(add ? d->dw_add : d->dw_set, &g, &d->sp[add ? 2 : 1], sp, 0);
    }
    if (a->dx[0]) {
        const int add = (a->accum & 1u) != 0;
        RT_ASSERT(rt__bmm_wkeep(nd)); /* the forward's copy */
        const uint16_t *wb = rt__bmm_wb(a, d);
        rt_kern_dnnl_args g = {0};
        rt_kern_dnnl_arg(&g, DNNL_ARG_SRC, &d->dzb, dzb);
        rt_kern_dnnl_arg(&g, DNNL_ARG_WEIGHTS, &d->wbT, wb);
        rt_kern_dnnl_arg(&g, DNNL_ARG_DST, &d->dx, a->dx[0]);
        rt_kern_dnnl_exec(add ? d->dx_add : d->dx_set, &g, &d->sp[add ? 4 : 3], sp, 0);
    }
}

/* ------------------------- Conv2D + MaxPool2D with few products a sum */

/* A Conv2D + MaxPool2D with fewer than rt_kern_bf16_f32_k products a sum
 * (KH*KW*C: an RGB or grey first layer) multiplies bf16 values on the
 * float32 fused kernel (rt_kern_conv.c): x and W rounded to bf16 and
 * widened back into scratch, dz rounded the same way, the products
 * exact in float32 and summed in float32 as oneDNN's bf16 primitives sum
 * them, y rounded to bf16 where it is stored so. The numbers are the bf16
 * op's (the definition, rt_ref_bf16.c), up to the order of float32 sums;
 * only the instructions differ. With 27 products a sum and 3 input
 * channels oneDNN 2.6's bf16 kernels (a chunk of samples per thread, as
 * the fused pair runs them) took 1.4x (forward) and 3x (backward-weights)
 * the float32 kernel's time on W-B's stem, which the float32 kernel reads
 * in place (rt__mk_dw_x9): a bf16 dot product pairs values along C, and 3
 * channels leave it nothing to pair. An unfused Conv2D stays on oneDNN's
 * whole-batch primitives, which ran Fashion's 1-channel stem faster than
 * the float32 kernel does (bench/bf16/README.md, stop 13). Relu or no
 * activation, ungrouped, pool windows that do not overlap: there dz
 * rounded is the pooled gradient rounded and routed, so the float32
 * kernel's dz from a rounded dy is the definition's. db sums the float32
 * dz, as the definition. */
int rt_kern_bf16_f32_k = 32;

typedef struct {
    rt__node f;          /* the node as the float32 kernel sees it */
    const rt__kernel *k; /* the float32 kernel */
    int64_t per, yper, wn, B;
    int64_t cb; /* samples a chunk (rt_kern_bf16_f32_chunk) */
    /* scratch offsets, past the float32 kernel's, each a chunk's: x
     * widened; W widened; y float32 (forward) or dy rounded (backward); y
     * widened for a backward that reads it (or -1); db's partials */
    int64_t xr, wr, yr, yw, part;
} rt__bcf;

int rt_kern_bf16_f32_chunk = 1 << 20;

static int rt__bcf_fits(const rt__node *nd)
{
    const rt__conv_params *cv = rt__conv_cp(nd);
    if (nd->fused != &rt__op_maxpool2d || cv->G > 1 ||
        cv->KH * cv->KW * cv->C >= rt_kern_bf16_f32_k ||
        (cv->act != RT__ACT_NONE && cv->act != RT__ACT_RELU))
        return 0;
    const rt__conv_params *pc = &nd->fused_p->conv;
    return pc->SH >= pc->KH && pc->SW >= pc->KW;
}

/* x (bf16 when bx, else float32) as bf16 values in float32, over the
 * threads where n is large */
static void rt__bcf_widen(float *d, const void *s, int bx, int64_t n)
{
    const int nt = n < RT__BF_PAR || omp_get_max_threads() < 1 ? 1 : omp_get_max_threads();
    const int64_t cs = ((n + nt - 1) / nt + 15) & ~(int64_t)15;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        const int64_t i0 = cs * t, m = n - i0 < cs ? n - i0 : cs;
        if (m <= 0)
            continue;
        if (bx)
            rt_kern_from_bf16_serial(d + i0, (const uint16_t *)s + i0, m);
        else
            rt__bround_serial(d + i0, (const float *)s + i0, m);
    }
}

static int rt__bcf_prepare(rt__node *nd, int64_t B, rt__arena *A);
static void rt__bcf_fwd(const rt__kargs *a);
static void rt__bcf_bwd(const rt__kargs *a);
static const rt__kernel rt__bcf_pool_kern = {
    &rt__op_conv2d, &rt__op_maxpool2d, rt__bcf_fwd, rt__bcf_bwd, NULL, NULL};

static int rt__bcf_prepare(rt__node *nd, int64_t B, rt__arena *A)
{
    const rt__conv_params *cv = rt__conv_cp(nd);
    rt__bcf *d = rt__arena_alloc(A, sizeof *d);
    if (!d)
        return RT_ENOMEM;
    memset(d, 0, sizeof *d);
    d->k = rt_kern_cpu_f32_kernel(nd->op, nd->fused);
    RT_ASSERT(d->k);
    d->f = *nd;
    d->f.kern = d->k;
    d->f.prec = RT_PREC_F32;
    d->f.bf16_in = 0;
    d->f.bf16_out = 0;
    d->f.kdata = NULL;
    d->f.ws_floats = d->f.scratch_floats = 0;
    if (d->k->prepare) {
        const int rc = d->k->prepare(&d->f, B, A);
        if (rc < 0)
            return rc;
    }
    const rt__conv_params *pc = &nd->fused_p->conv;
    d->per = cv->H * cv->W * cv->C;
    d->yper = pc->OH * pc->OW * cv->OC;
    d->wn = cv->KH * cv->KW * cv->C * cv->OC;
    d->B = B;
    /* Only bf16 activations live from the forward call to the backward:
     * x and W widen again in the backward (cheap next to the products),
     * the float32 y is the forward's scratch, rounded into the bf16
     * output. Relu's backward reads the bf16 y (rt__bdz), as the oneDNN
     * path and the definition do; the float32 kernel's own mask (the
     * argmax marks a window dead where its float32 maximum is not above
     * 0) passes the same gradient, as a bf16 y above 0 is a float32 one
     * above 0. Only where the float32 kernel reads y for the mask (channels
     * past the last 16, windows of 255 cells or more) does the backward
     * widen the bf16 y into its scratch. */
    const int64_t pk = pc->KH * pc->KW;
    const int yw = nd->bf16_out && cv->act == RT__ACT_RELU && (cv->OC % 16 != 0 || pk >= 255);
    /* chunks of about equal size, a multiple of 16 samples */
    const int64_t unit = d->per + (yw ? 2 : 1) * d->yper;
    const int64_t nch = (B * unit + rt_kern_bf16_f32_chunk - 1) / rt_kern_bf16_f32_chunk;
    d->cb = ((B + nch - 1) / nch + 15) & ~(int64_t)15;
    const int64_t c = B < d->cb ? B : d->cb;
    d->xr = rt__ff(d->f.scratch_floats);
    d->wr = d->xr + rt__ff(c * d->per);
    d->yr = d->wr + rt__ff(d->wn);
    d->yw = yw ? d->yr + rt__ff(c * d->yper) : -1;
    d->part = (yw ? d->yw : d->yr) + rt__ff(c * d->yper);
    nd->kern = &rt__bcf_pool_kern;
    nd->kdata = d;
    /* workspace: the float32 kernel's (the argmax, one byte a pooled value) */
    nd->ws_floats = d->f.ws_floats;
    nd->scratch_floats = d->part + rt__bdz_part(cv->OC);
    return 0;
}

/* x from sample s0 on, as it is stored (bf16 or float32) */
static const void *rt__bcf_x(const rt__kargs *a, const rt__bcf *d, int64_t s0)
{
    if (a->nd->bf16_in & 1u)
        return (const uint16_t *)a->x[0] + s0 * d->per;
    return a->x[0] + s0 * d->per;
}

/* chunk by chunk of d->cb samples: x widened, the float32 kernel, y
 * rounded into the bf16 output */
static void rt__bcf_fwd(const rt__kargs *a)
{
    const rt__bcf *d = a->nd->kdata;
    const int64_t n = a->r->n;
    const int by = a->nd->bf16_out;
    rt__bcf_widen(a->scratch + d->wr, a->x[1], 0, d->wn);
    rt__run r = *a->r;
    rt__kargs f = *a;
    f.nd = &d->f;
    f.r = &r;
    f.x[0] = a->scratch + d->xr;
    f.x[1] = a->scratch + d->wr;
    for (int64_t s0 = 0; s0 < n; s0 += d->cb) {
        const int64_t nb = n - s0 < d->cb ? n - s0 : d->cb, yo = s0 * d->yper;
        r.n = nb;
        rt__bcf_widen(a->scratch + d->xr, rt__bcf_x(a, d, s0), (a->nd->bf16_in & 1u) != 0,
                      nb * d->per);
        f.y = by ? a->scratch + d->yr : a->y + yo;
        f.ws = a->ws + yo / 4; /* the chunk's argmax bytes */
        d->k->fwd(&f);
        if (by)
            rt_kern_to_bf16((uint16_t *)a->y + yo, f.y, nb * d->yper);
    }
}

/* Chunk by chunk of d->cb samples, so that the scratch the backward adds
 * (x, dy and, where read, y widened) stays small next to the
 * activations: dz rounded (Relu's mask from y as stored: the float32
 * kernel's own mask, the argmax's dead marks, passes the same), db from
 * the float32 values, then the float32 kernel's backward on the chunk, dW
 * added over the chunks. */
static void rt__bcf_bwd(const rt__kargs *a)
{
    const rt__bcf *d = a->nd->kdata;
    const rt__conv_params *cv = rt__conv_cp(a->nd);
    const int64_t n = a->r->n, OC = cv->OC, per = d->per, yper = d->yper;
    const int by = a->nd->bf16_out, bx = (a->nd->bf16_in & 1u) != 0;
    float *dyr = a->scratch + d->yr;
    const int grads = a->dx[0] || a->dx[1];
    if (grads)
        rt__bcf_widen(a->scratch + d->wr, a->x[1], 0, d->wn);
    rt__run r = *a->r;
    rt__kargs f = *a;
    f.nd = &d->f;
    f.r = &r;
    f.x[1] = a->scratch + d->wr;
    f.x[0] = a->scratch + d->xr;
    f.dy = dyr;
    f.dx[2] = NULL; /* db from the float32 dz, in rt__bdz */
    unsigned acc = a->accum;
    for (int64_t s0 = 0; s0 < n; s0 += d->cb) {
        const int64_t nb = n - s0 < d->cb ? n - s0 : d->cb, rows = nb * yper / OC;
        const int64_t yo = s0 * yper;
        const void *y = by ? (const void *)((const uint16_t *)a->y + yo) : a->y + yo;
        rt__bdz(cv->act, NULL, dyr, cv->bias ? a->dx[2] : NULL, (acc & 4u) != 0, a->dy + yo, y, by,
                rows, OC, rows, a->scratch + d->part);
        if (!grads) {
            acc |= 4u;
            continue;
        }
        r.n = nb;
        if (a->dx[1])
            rt__bcf_widen(a->scratch + d->xr, rt__bcf_x(a, d, s0), bx, nb * per);
        if (a->dx[0])
            f.dx[0] = a->dx[0] + s0 * per;
        /* the chunk's argmax bytes: s0 is a multiple of 16 */
        f.ws = a->ws + s0 * yper / 4;
        if (d->yw >= 0)
            rt_kern_from_bf16(a->scratch + d->yw, (const uint16_t *)y, nb * yper);
        /* Relu's y: the widened copy, or unread (without Relu, or with the
         * argmax's dead marks alone) */
        f.y = d->yw >= 0 ? a->scratch + d->yw : by ? dyr : a->y + yo;
        f.accum = (acc & ~4u) | (s0 > 0 ? 2u : 0u);
        d->k->bwd(&f);
        acc |= 4u;
    }
}

/* --------------------------------------------------------------- Conv2D */

typedef rt_kern_dnnl_conv_key rt__bcv_key;

/* a table's key: the convolution, whether y is stored bf16 and the
 * samples of an im2col chunk (rt__bcv_cols; 0: none) */
typedef struct {
    rt__bcv_key key;
    int64_t yb, cs;
} rt__bcv_tkey;

typedef struct {
    rt__bcv_key key; /* first, then yb and cs: the table compares them */
    int64_t yb;      /* the forward writes y bf16 (dsty is dstb) */
    int64_t cs;      /* the key's cs */
    int ok;
    dnnl_primitive_t fwd, bwd_d, bwd_w;
    /* w_f: hwio f32 -> the forward's bf16 layout (once a step, into the
     * workspace); w_d: that bf16 copy -> backward-data's layout (bf16 to
     * bf16: half the bytes of a second f32 read, and the same values) */
    dnnl_primitive_t w_f, w_d;
    dnnl_primitive_t dw_set, dw_add; /* diff weights -> hwio f32, = and += */
    /* wround: the forward's copy is W rounded to bf16 in Keras' layout
     * (hwiob, wh_floats at the scratch's start) then w_h to wf's layout */
    dnnl_primitive_t w_h;
    int wround;
    dnnl_memory_desc_t srcb, dstf, dstb, srcf, hwio, hwiob, wf, wd, dwd, bias, dsty;
    dnnl_memory_desc_t sp[8]; /* fwd, bwd_d, bwd_w, w_f, w_d, dw_set, dw_add, w_h */
    int64_t sp_floats, wf_floats, wd_floats, dwd_floats, wh_floats;
    /* small images (rt__bcv_small): fwd NULL, the forward runs in the
     * layouts oneDNN picks (fwd_b), x_b takes x's bf16 NHWC copy to its
     * input's, y_b its output to y (NHWC, dsty); wf is fwd_b's weights */
    dnnl_primitive_t fwd_b, x_b, y_b;
    dnnl_memory_desc_t srcbb, dstfb, spb[3];
    int64_t xbb_floats, yb_floats;
    /* small outputs (rt__bcv_cols): backward-weights as products of the
     * bf16 im2col of cm_cs samples (cm) and the last, shorter chunk
     * (cm_rem, or NULL) with dz, straight into dW's Keras layout */
    const rt__bmm *cm, *cm_rem;
    int64_t cm_cs, col_floats;
    /* the kernel taps the im2col holds (rt__bcv_taps): rows kh0..kh1-1,
     * columns kw0..kw1-1 of the window */
    int64_t kh0, kh1, kw0, kw1;
} rt__bcv;

/* Output images of 2x2 to 7x7: oneDNN 2.6's bf16 forward on NHWC
 * (brgconv) runs 0.5-0.65x the rate of its blocked-layout kernel there
 * (ResNet-18's 4x4x512 layers, Inception's 7x7 and 3x3 blocks, one
 * thread), and converting x and y costs a few percent of the product at
 * these sizes. From 8x8 up NHWC is as fast or faster; a 1x1 image loses
 * to the conversions. Backward-data and backward-weights stay NHWC (no
 * gain measured). */
static int rt__bcv_small(const rt__bcv_key *k)
{
    return k->G == 1 && k->OH >= 2 && k->OW >= 2 && k->OH * k->OW <= 49;
}

/* Backward-weights of a convolution with a small output image (at most
 * 8x8) and wide layers: oneDNN 2.6's bf16 kernel (jit_bf16, NHWC or
 * blocked alike) runs 230-250 GFLOP/s there, one thread, where the
 * bf16 matmul of the im2col'd input with dz runs 320-420 (ResNet-18's
 * 4x4x512 layers 19 -> 14 ms, the stride-2 8x8x256 -> 4x4x512 one
 * 14.7 -> 7.1 ms, 16x16x128 -> 8x8x256 10.4 -> 7.8 ms; 8x8x256 even),
 * and dW comes out in Keras' layout, without the f32 reorder. Larger
 * images (16x16x128, 32x32x64) and narrow layers stay on jit_bf16,
 * which is as fast or faster there (bench/bf16/README.md, stop 10). */
int rt_kern_bf16_col_oc = 256;
int rt_kern_bf16_col_rows = 1024;
int rt_kern_bf16_col_px = 64;

/* The forward's bf16 weights: rounded in Keras' layout first (one
 * vectorised pass over the float32 values, the same rounding), then
 * reordered bf16 to bf16 into the primitive's layout. oneDNN 2.6's
 * f32 -> bf16 reorder (jit:uni) into the blocked layouts is slow on large
 * kernels: 2.1-2.6 ms for ResNet-18's 3x3x512x512 at two threads, the
 * bf16 -> bf16 one 1.1 ms (3x3x256x512: 3.1 -> 0.6 ms). 0: the one
 * f32 -> bf16 reorder, as before (bench/bf16/README.md, stop 14). */
int rt_kern_bf16_w_round = 1;

static int rt__bcv_cols(const rt__bcv_key *k)
{
    const int64_t oc = rt_kern_bf16_col_oc;
    return k->G == 1 && k->OH * k->OW <= rt_kern_bf16_col_px && k->OC >= oc &&
           k->KH * k->KW * k->C >= 4 * oc;
}

/* the samples of k's im2col chunks (0: jit_bf16's backward-weights):
 * at least rt_kern_bf16_col_rows rows (the matmul's reduction; fewer ran
 * slower) */
static int64_t rt__bcv_cols_cs(const rt__bcv_key *k)
{
    if (!rt__bcv_cols(k))
        return 0;
    const int64_t rows = k->OH * k->OW;
    const int64_t cs = (rt_kern_bf16_col_rows + rows - 1) / rows;
    return cs > k->n ? k->n : cs < 1 ? 1 : cs;
}

/* the taps [t0, t1) of a kernel of kn taps, stride s, dilation dl and
 * leading padding p over an input of n with on outputs that read the
 * input for some output: the others only ever meet padding */
static void rt__taps_1d(int64_t kn, int64_t s, int64_t dl, int64_t p, int64_t n, int64_t on,
                        int64_t *t0, int64_t *t1)
{
    *t0 = kn, *t1 = 0;
    for (int64_t t = 0; t < kn; t++)
        for (int64_t o = 0; o < on; o++) {
            const int64_t i = o * s - p + t * dl;
            if (i >= 0 && i < n) {
                *t0 = t < *t0 ? t : *t0;
                *t1 = t + 1;
                break;
            }
        }
    if (*t1 <= *t0)
        *t0 = 0, *t1 = kn;
}

/* The im2col backward-weights' taps: a window row or column that lies in
 * the padding at every output position contributes nothing to any
 * product (its columns would be all zeros), so the im2col leaves it out
 * and its dW rows are zeros. Small images with 'same' padding have such
 * taps: a 1x7 kernel on a 3x3 image reads 5 of its 7 columns, a 3x3 or
 * 1x3 kernel on a 1x1 image its centre alone (Inception's 3x3 and 1x1
 * blocks at 75x75). The kept taps are one run of dW's rows (a single
 * window row, or whole rows), else all are kept. */
static void rt__bcv_taps(rt__bcv *d, const rt__bcv_key *k)
{
    rt__taps_1d(k->KH, k->SH, k->DH, k->PT, k->H, k->OH, &d->kh0, &d->kh1);
    rt__taps_1d(k->KW, k->SW, k->DW, k->PL, k->W, k->OW, &d->kw0, &d->kw1);
    if (d->kh1 - d->kh0 > 1 && d->kw1 - d->kw0 < k->KW)
        d->kw0 = 0, d->kw1 = k->KW;
}

/* the im2col products of k, chunks of cs samples, into d */
static void rt__bcv_colmm(rt__bcv *d, const rt__bcv_key *k, int64_t cs)
{
    rt__bcv_taps(d, k);
    const int64_t rows = k->OH * k->OW, K = (d->kh1 - d->kh0) * (d->kw1 - d->kw0) * k->C;
    rt__bmm_key mk = {cs * rows, K, k->OC, 0, RT__ACT_NONE, 0};
    const rt__bmm *m = rt_kern_dnnl_cache_get(&rt__bmm_tab, &mk, sizeof mk, rt__bmm_build);
    const rt__bmm *r = NULL;
    if (k->n % cs) {
        mk.M = (k->n % cs) * rows;
        r = rt_kern_dnnl_cache_get(&rt__bmm_tab, &mk, sizeof mk, rt__bmm_build);
        if (!r || !r->ok)
            return;
    }
    if (!m || !m->ok)
        return;
    d->cm = m, d->cm_rem = r, d->cm_cs = cs;
    d->col_floats = rt__hf(cs * rows * K);
}

/* rows of samples s0 .. s0+ns of x (bf16 NHWC) as d's im2col: a row per
 * output pixel, (kh, kw, c) its columns (Keras' kernel order) over d's
 * taps, zeros where the window is in the padding */
static void rt__bim2col(uint16_t *col, const uint16_t *x, const rt__bcv *d, int64_t s0, int64_t ns)
{
    const rt__bcv_key *k = &d->key;
    const int64_t rows = k->OH * k->OW, C = k->C;
    const int64_t K = (d->kh1 - d->kh0) * (d->kw1 - d->kw0) * C;
#pragma omp parallel for schedule(static) if (ns * rows * K >= RT__BF_PAR)
    for (int64_t r = 0; r < ns * rows; r++) {
        const int64_t b = s0 + r / rows, oh = r % rows / k->OW, ow = r % k->OW;
        uint16_t *dst = col + r * K;
        for (int64_t kh = d->kh0; kh < d->kh1; kh++) {
            const int64_t ih = oh * k->SH - k->PT + kh * k->DH;
            for (int64_t kw = d->kw0; kw < d->kw1; kw++, dst += C) {
                const int64_t iw = ow * k->SW - k->PL + kw * k->DW;
                if (ih < 0 || ih >= k->H || iw < 0 || iw >= k->W)
                    memset(dst, 0, sizeof(uint16_t) * (size_t)C);
                else
                    memcpy(dst, x + ((b * k->H + ih) * k->W + iw) * C,
                           sizeof(uint16_t) * (size_t)C);
            }
        }
    }
}

/* the blocked forward of k into d (d->wf its weights' layout); -1 (d
 * untouched) when oneDNN gives none or picks NHWC anyway */
static int rt__bcv_blocked(rt__bcv *d, const rt__bcv_key *k)
{
    dnnl_primitive_desc_t bpd;
    if (rt_kern_dnnl_conv_fwd_any(k, dnnl_bf16, dnnl_bf16, d->yb ? dnnl_bf16 : dnnl_f32, &bpd) < 0)
        return -1;
    const dnnl_memory_desc_t src = *dnnl_primitive_desc_query_md(bpd, dnnl_query_src_md, 0);
    const dnnl_memory_desc_t dst = *dnnl_primitive_desc_query_md(bpd, dnnl_query_dst_md, 0);
    const dnnl_memory_desc_t wei = *dnnl_primitive_desc_query_md(bpd, dnnl_query_weights_md, 0);
    if (dnnl_memory_desc_equal(&src, &d->srcb) && dnnl_memory_desc_equal(&dst, &d->dsty)) {
        dnnl_primitive_desc_destroy(bpd);
        return -1;
    }
    dnnl_primitive_t f, x, y;
    dnnl_memory_desc_t sp[3];
    if (rt_kern_dnnl_prim(bpd, &f, &sp[0]) < 0)
        return -1;
    if (rt_kern_dnnl_reorder(&d->srcb, &src, 0, &x, &sp[1]) < 0 ||
        rt_kern_dnnl_reorder(&dst, &d->dsty, 0, &y, &sp[2]) < 0) {
        dnnl_primitive_destroy(f);
        return -1; /* a reorder built before the other leaks once */
    }
    d->fwd_b = f, d->x_b = x, d->y_b = y;
    memcpy(d->spb, sp, sizeof sp);
    d->srcbb = src, d->dstfb = dst, d->wf = wei;
    d->xbb_floats = rt_kern_dnnl_floats(&src);
    d->yb_floats = rt_kern_dnnl_floats(&dst);
    return 0;
}

/* blocked: the forward may take oneDNN's own layouts (the unfused
 * Conv2D's table; a Conv2D + MaxPool2D chunk pools NHWC) */
static void *rt__bcv_make(const void *kp, int blocked)
{
    const rt__bcv_tkey *tk = kp;
    const rt__bcv_key *k = &tk->key;
    rt__bcv *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->key = *k;
    d->yb = tk->yb;
    d->cs = tk->cs;
    if (!rt_kern_dnnl_engine())
        return d;
    dnnl_dims_t sd = {k->n, k->C, k->H, k->W}, dd = {k->n, k->OC, k->OH, k->OW};
    dnnl_dims_t bd = {k->OC};
    dnnl_memory_desc_init_by_tag(&d->srcb, 4, sd, dnnl_bf16, dnnl_nhwc);
    dnnl_memory_desc_init_by_tag(&d->srcf, 4, sd, dnnl_f32, dnnl_nhwc);
    dnnl_memory_desc_init_by_tag(&d->dstf, 4, dd, dnnl_f32, dnnl_nhwc);
    dnnl_memory_desc_init_by_tag(&d->dstb, 4, dd, dnnl_bf16, dnnl_nhwc);
    d->dsty = d->yb ? d->dstb : d->dstf;
    rt_kern_dnnl_conv_wmd(k, dnnl_f32, &d->hwio);
    dnnl_memory_desc_init_by_tag(&d->bias, 1, bd, dnnl_f32, dnnl_x);
    /* bf16 products: x, W and dz in bf16; dx and dW float32; y float32,
     * or bf16 where it is stored so (rounded from the float32 accumulator
     * after bias and activation, in the primitive) */
    const dnnl_data_type_t dt[RT_KERN_DNNL_NDT] = {
        dnnl_bf16, dnnl_bf16, d->yb ? dnnl_bf16 : dnnl_f32, dnnl_f32, dnnl_bf16, dnnl_f32};
    dnnl_primitive_desc_t pd[3];
    if (rt_kern_dnnl_conv_pds(k, dt, 1, pd) < 0)
        return d;
    dnnl_primitive_desc_t fpd = pd[0], dpd = pd[1], wpd = pd[2];
    d->wf = *dnnl_primitive_desc_query_md(fpd, dnnl_query_weights_md, 0);
    d->wd = *dnnl_primitive_desc_query_md(dpd, dnnl_query_weights_md, 0);
    d->dwd = *dnnl_primitive_desc_query_md(wpd, dnnl_query_diff_weights_md, 0);
    if (blocked && rt__bcv_small(k))
        (void)rt__bcv_blocked(d, k); /* else the NHWC forward */
    if (blocked && tk->cs)
        rt__bcv_colmm(d, k, tk->cs); /* else jit_bf16's backward-weights */
    if (d->fwd_b)
        dnnl_primitive_desc_destroy(fpd);
    /* rt_kern_dnnl_prim destroys the descriptors */
    if ((!d->fwd_b && rt_kern_dnnl_prim(fpd, &d->fwd, &d->sp[0]) < 0) ||
        rt_kern_dnnl_prim(dpd, &d->bwd_d, &d->sp[1]) < 0 ||
        rt_kern_dnnl_prim(wpd, &d->bwd_w, &d->sp[2]) < 0)
        return d; /* ok 0: remembered as refused (its primitives leak once) */
    /* the weights' casts: f32 Keras layout -> bf16 in each primitive's */
    if (rt_kern_dnnl_reorder(&d->hwio, &d->wf, 0, &d->w_f, &d->sp[3]) < 0 ||
        rt_kern_dnnl_reorder(&d->wf, &d->wd, 0, &d->w_d, &d->sp[4]) < 0 ||
        rt_kern_dnnl_reorder(&d->dwd, &d->hwio, 0, &d->dw_set, &d->sp[5]) < 0 ||
        rt_kern_dnnl_reorder(&d->dwd, &d->hwio, 1, &d->dw_add, &d->sp[6]) < 0)
        return d;
    if (rt_kern_bf16_w_round) {
        rt_kern_dnnl_conv_wmd(k, dnnl_bf16, &d->hwiob);
        if (rt_kern_dnnl_reorder(&d->hwiob, &d->wf, 0, &d->w_h, &d->sp[7]) == 0) {
            d->wround = 1;
            d->wh_floats = rt__hf(k->KH * k->KW * (k->C / k->G) * k->OC);
        }
    }
    for (int i = 0; i < 11; i++) {
        const dnnl_memory_desc_t *m = i < 8 ? &d->sp[i] : &d->spb[i - 8];
        if (rt_kern_dnnl_floats(m) > d->sp_floats)
            d->sp_floats = rt_kern_dnnl_floats(m);
    }
    for (int i = 0; i < 2; i++) {
        const rt__bmm *m = i ? d->cm_rem : d->cm;
        if (m && m->sp_floats > d->sp_floats)
            d->sp_floats = m->sp_floats;
    }
    d->wf_floats = rt_kern_dnnl_floats(&d->wf);
    d->wd_floats = rt_kern_dnnl_floats(&d->wd);
    d->dwd_floats = rt_kern_dnnl_floats(&d->dwd);
    d->ok = 1;
    return d;
}

static void *rt__bcv_build(const void *kp) { return rt__bcv_make(kp, 1); }

static rt_kern_dnnl_cache rt__bcv_tab = RT_KERN_DNNL_CACHE_INIT;

/* the scratch's parts: dz in bf16, db's partial sums, W in bwd_d's bf16
 * layout, dW in bwd_w's layout, a dx or db to add from, scratchpad */
typedef struct {
    uint16_t *dzb, *wd, *col;
    float *part, *dw, *tmp, *sp;
} rt__bcv_parts;

static int64_t rt__bcv_tmp(const rt__bcv_key *k)
{
    const int64_t in = k->n * k->H * k->W * k->C;
    return rt__ff(in > k->OC ? in : k->OC);
}

static rt__bcv_parts rt__bcv_split(const rt__bcv *d, float *s)
{
    const rt__bcv_key *k = &d->key;
    const int64_t out = k->n * k->OH * k->OW * k->OC;
    rt__bcv_parts p;
    p.dzb = (uint16_t *)s;
    s += rt__hf(out);
    p.part = s;
    s += rt__bdz_part(k->OC);
    p.wd = (uint16_t *)s;
    s += d->wd_floats;
    p.dw = s;
    s += d->dwd_floats;
    p.tmp = s;
    s += rt__bcv_tmp(k);
    p.col = (uint16_t *)s; /* the im2col chunk (rt__bcv_colmm) */
    s += d->col_floats;
    p.sp = s;
    return p;
}

/* the forward's bf16 copy wf of the float32 weights w (Keras' layout),
 * first thing in a forward call: the rounded copy and its reorder's
 * scratchpad take the start of the node's scratch, which the forward
 * writes only after (sp: the scratchpad of the one f32 -> bf16 reorder) */
static void rt__bcv_wcast(const rt__bcv *d, const float *w, uint16_t *wf, float *scratch, float *sp)
{
    if (!d->wround) {
        rt_kern_dnnl_reord(d->w_f, &d->hwio, w, &d->wf, wf, &d->sp[3], sp, 0);
        return;
    }
    const rt__bcv_key *k = &d->key;
    const int64_t n = k->KH * k->KW * (k->C / k->G) * k->OC;
    if (!d->w_h) { /* the primitive takes Keras' layout */
        rt_kern_to_bf16(wf, w, n);
        return;
    }
    uint16_t *wh = (uint16_t *)scratch;
    rt_kern_to_bf16(wh, w, n);
    rt_kern_dnnl_reord(d->w_h, &d->hwiob, wh, &d->wf, wf, &d->sp[7], scratch + d->wh_floats, 0);
}

/* A 1x1 Conv2D with stride 1 and no padding is a product of the NHWC
 * input's rows (B*H*W of C) with the (1,1,C,OC) kernel, which is C x OC
 * row-major: the Dense kernels run it (oneDNN's bf16 matmul). Its
 * backward-weights is one x^T dz product written (or added) straight into
 * dW in Keras' layout, where oneDNN's bf16 1x1 convolution runs about the
 * float32 rate on small images (Inception's 17x17 to 1x1 blocks) and
 * needs a weights reorder each way. */
static const rt__kernel rt__bconv_mm = {&rt__op_conv2d, NULL, rt__bdense_fwd,
                                        rt__bdense_bwd, NULL, NULL};

static int rt__bconv_is_mm(const rt__conv_params *cv)
{
    return cv->KH == 1 && cv->KW == 1 && cv->SH == 1 && cv->SW == 1 && cv->PT == 0 && cv->PL == 0 &&
           cv->OH == cv->H && cv->OW == cv->W && cv->G <= 1;
}

static int rt__bconv_prepare(rt__node *nd, int64_t B, rt__arena *A)
{
    const rt__conv_params *cv = rt__conv_cp(nd);
    if (nd->fused)
        return rt__bf32(nd, B, A);
    rt__bcv_tkey tk;
    memset(&tk, 0, sizeof tk);
    tk.key = rt_kern_dnnl_conv_key_of(cv, B);
    tk.yb = nd->bf16_out != 0;
    tk.cs = rt__bcv_cols_cs(&tk.key);
    const rt__bcv_key k = tk.key;
    if (k.act != RT__ACT_NONE && k.act != RT__ACT_RELU && k.act != RT__ACT_SIGMOID &&
        k.act != RT__ACT_TANH)
        return rt__bf32(nd, B, A);
    if (rt__bconv_is_mm(cv)) {
        nd->kern = &rt__bconv_mm;
        return rt__bmm_prepare(nd, B, A, cv->C, cv->OC, cv->act);
    }
    const rt__bcv *d = rt_kern_dnnl_cache_get(&rt__bcv_tab, &tk, sizeof tk, rt__bcv_build);
    if (!d || !d->ok)
        return rt__bf32(nd, B, A);
    nd->kdata = (void *)d;
    /* workspace: x in bf16 NHWC and W in the forward's bf16 layout */
    nd->ws_floats = rt__bx_floats(nd, B * k.H * k.W * k.C) + d->wf_floats;
    const int64_t out = B * k.OH * k.OW * k.OC;
    nd->scratch_floats = rt__hf(out) + rt__bdz_part(k.OC) + d->wd_floats + d->dwd_floats +
                         rt__bcv_tmp(&k) + d->col_floats + d->sp_floats;
    /* the blocked forward's: x and y in its layouts, the scratchpad */
    if (d->fwd_b && d->xbb_floats + d->yb_floats + d->sp_floats > nd->scratch_floats)
        nd->scratch_floats = d->xbb_floats + d->yb_floats + d->sp_floats;
    /* the rounded weights and their reorder's scratchpad */
    if (d->wh_floats + d->sp_floats > nd->scratch_floats)
        nd->scratch_floats = d->wh_floats + d->sp_floats;
    return 0;
}

static void rt__bconv_fwd(const rt__kargs *a)
{
    const rt__bcv *d = a->nd->kdata;
    const rt__bcv_key *k = &d->key;
    const int64_t per = k->H * k->W * k->C;
    uint16_t *xb = rt__bx(a, 1, a->r->n * per, k->n * per);
    uint16_t *wf = (uint16_t *)(a->ws + rt__bx_floats(a->nd, k->n * per));
    const rt__bcv_parts p = rt__bcv_split(d, a->scratch);
    if (d->fwd_b) {
        uint16_t *xbb = (uint16_t *)a->scratch;
        float *yb = a->scratch + d->xbb_floats, *sp = yb + d->yb_floats;
        rt__bcv_wcast(d, a->x[1], wf, a->scratch, sp);
        rt_kern_dnnl_reord(d->x_b, &d->srcb, xb, &d->srcbb, xbb, &d->spb[1], sp, 0);
        rt_kern_dnnl_args g = {0};
        rt_kern_dnnl_arg(&g, DNNL_ARG_SRC, &d->srcbb, xbb);
        rt_kern_dnnl_arg(&g, DNNL_ARG_WEIGHTS, &d->wf, wf);
        if (k->bias)
            rt_kern_dnnl_arg(&g, DNNL_ARG_BIAS, &d->bias, a->x[2]);
        rt_kern_dnnl_arg(&g, DNNL_ARG_DST, &d->dstfb, yb);
        rt_kern_dnnl_exec(d->fwd_b, &g, &d->spb[0], sp, 0);
        rt_kern_dnnl_reord(d->y_b, &d->dstfb, yb, &d->dsty, a->y, &d->spb[2], sp, 0);
        return;
    }
    rt__bcv_wcast(d, a->x[1], wf, a->scratch, p.sp);
    rt_kern_dnnl_args g = {0};
    rt_kern_dnnl_arg(&g, DNNL_ARG_SRC, &d->srcb, xb);
    rt_kern_dnnl_arg(&g, DNNL_ARG_WEIGHTS, &d->wf, wf);
    if (k->bias)
        rt_kern_dnnl_arg(&g, DNNL_ARG_BIAS, &d->bias, a->x[2]);
    rt_kern_dnnl_arg(&g, DNNL_ARG_DST, &d->dsty, a->y);
    rt_kern_dnnl_exec(d->fwd, &g, &d->sp[0], p.sp, 0);
}

/* dW, db and dx from the bf16 input xb and the bf16 output gradient in
 * p->dzb, through the batch's backward primitives d; wb: a bf16 copy of W
 * in layout wmd (the forward's), used when backward-data wants that one */
static void rt__bconv_grads(const rt__kargs *a, const rt__bcv *d, const uint16_t *xb,
                            const dnnl_memory_desc_t *wmd, const uint16_t *wb,
                            const rt__bcv_parts *p)
{
    const rt__bcv_key *k = &d->key;
    const int64_t per = k->H * k->W * k->C, n = a->r->n;
    float *dx = a->dx[0], *dw = a->dx[1];
    if (dw && d->cm) {
        /* chunks up to the batch's last sample: dz's rows past it are zero */
        const int64_t rows = k->OH * k->OW, cs = d->cm_cs;
        /* the kept taps' run of dW rows; the others' rows stay 0 */
        const int64_t r0 = (d->kh0 * k->KW + d->kw0) * k->C * k->OC;
        const int64_t rn = (d->kh1 - d->kh0) * (d->kw1 - d->kw0) * k->C * k->OC;
        const int64_t all = k->KH * k->KW * k->C * k->OC;
        if (!(a->accum & 2u) && rn < all) {
            memset(dw, 0, sizeof(float) * (size_t)r0);
            memset(dw + r0 + rn, 0, sizeof(float) * (size_t)(all - r0 - rn));
        }
        for (int64_t s0 = 0; s0 < n; s0 += cs) {
            const int64_t ns = k->n - s0 < cs ? k->n - s0 : cs;
            const rt__bmm *m = ns == cs ? d->cm : d->cm_rem;
            const int add = s0 > 0 || (a->accum & 2u);
            rt__bim2col(p->col, xb, d, s0, ns);
            rt_kern_dnnl_args g = {0};
            rt_kern_dnnl_arg(&g, DNNL_ARG_SRC, &m->xbT, p->col);
            rt_kern_dnnl_arg(&g, DNNL_ARG_WEIGHTS, &m->dzb, p->dzb + s0 * rows * k->OC);
            rt_kern_dnnl_arg(&g, DNNL_ARG_DST, &m->dw, dw + r0);
            rt_kern_dnnl_exec(add ? m->dw_add : m->dw_set, &g, &m->sp[add ? 2 : 1], p->sp, 0);
        }
    } else if (dw) {
        float *dwb = dw && !(a->accum & 2u) && !d->dw_set ? dw : p->dw;
        rt_kern_dnnl_args g = {0};
        rt_kern_dnnl_arg(&g, DNNL_ARG_SRC, &d->srcb, xb);
        rt_kern_dnnl_arg(&g, DNNL_ARG_DIFF_DST, &d->dstb, p->dzb);
        rt_kern_dnnl_arg(&g, DNNL_ARG_DIFF_WEIGHTS, &d->dwd, dwb);
        if (k->bias) /* the primitive's own, from the bf16 dz: unused */
            rt_kern_dnnl_arg(&g, DNNL_ARG_DIFF_BIAS, &d->bias, p->tmp);
        rt_kern_dnnl_exec(d->bwd_w, &g, &d->sp[2], p->sp, 0);
        if (dw && (a->accum & 2u))
            rt_kern_dnnl_reord(d->dw_add, &d->dwd, dwb, &d->hwio, dw, &d->sp[6], p->sp, 0);
        else if (dw && d->dw_set)
            rt_kern_dnnl_reord(d->dw_set, &d->dwd, dwb, &d->hwio, dw, &d->sp[5], p->sp, 0);
    }
    if (dx) {
        /* the forward's bf16 copy when both want the same layout */
        const uint16_t *w = wb;
        if (!dnnl_memory_desc_equal(wmd, &d->wd)) {
            rt_kern_dnnl_reord(d->w_d, wmd, wb, &d->wd, p->wd, &d->sp[4], p->sp, 0);
            w = p->wd;
        }
        const int add = (a->accum & 1u) != 0;
        rt_kern_dnnl_args g = {0};
        rt_kern_dnnl_arg(&g, DNNL_ARG_DIFF_DST, &d->dstb, p->dzb);
        rt_kern_dnnl_arg(&g, DNNL_ARG_WEIGHTS, &d->wd, w);
        rt_kern_dnnl_arg(&g, DNNL_ARG_DIFF_SRC, &d->srcf, add ? p->tmp : dx);
        rt_kern_dnnl_exec(d->bwd_d, &g, &d->sp[1], p->sp, 0);
        if (add)
            rt__badd(dx, p->tmp, n * per);
    }
}

static void rt__bconv_bwd(const rt__kargs *a)
{
    const rt__bcv *d = a->nd->kdata;
    const rt__bcv_key *k = &d->key;
    const int64_t per = k->H * k->W * k->C, n = a->r->n;
    const uint16_t *xb = rt__bx(a, 0, n * per, k->n * per);
    const uint16_t *wf = (uint16_t *)(a->ws + rt__bx_floats(a->nd, k->n * per));
    const rt__bcv_parts p = rt__bcv_split(d, a->scratch);
    float *db = k->bias ? a->dx[2] : NULL;
    rt__bdz((int)k->act, p.dzb, NULL, db, (a->accum & 4u) != 0, a->dy, a->y, (int)d->yb,
            n * k->OH * k->OW, k->OC, k->n * k->OH * k->OW, p.part);
    rt__bconv_grads(a, d, xb, &d->wf, wf, &p);
}

/* --------------------------------------------------- Conv2D + MaxPool2D */

/* The pre-pool tensor never exists whole (W-B's would be 59 MB of float32,
 * written and read four times unfused): each thread runs the forward
 * primitive of a chunk of samples into its own scratch and pools it there,
 * in cache, into y and the argmax (one byte per pooled value, in the
 * workspace), as the float32 fused kernel does. The backward pass works
 * chunk by chunk too: dz from the pooled gradient and the argmax, rounded
 * to bf16, then the chunk's backward-weights (each thread sums its chunks'
 * dW; the threads' sums are added in thread order) and backward-data (the
 * chunk's rows of dx). The numbers are those of Conv2D then MaxPool2D:
 * float32 pre-pool values, the first maximum in scan order, dz rounded
 * once; db sums the float32 dz, as the definition (rt_ref_bf16.c). */

int rt_kern_bf16_pool_chunk = 1 << 18;

typedef struct {
    const rt__bcv *c; /* a chunk's primitives, built serial */
    rt_kern_mpool g;
    int64_t cs;      /* samples per chunk */
    int64_t nt;      /* threads the scratch is sized for */
    int64_t tstride; /* scratch floats a thread (rt__bcp_thread) */
    /* workspace floats of x in bf16: whole chunks, or where x is stored
     * bf16 (node->bf16_in) one chunk, the last one's copy when it runs
     * past the batch (its rows there zeros: stale arena bytes could be
     * NaN, and dW multiplies them by dz's zero rows) */
    int64_t xfloats;
    int64_t dxfloats; /* a chunk's dx, or its pooled y (float32) */
} rt__bcp;

/* chunk primitives run one per thread, so they are built with a
 * one-thread default (oneDNN fixes a kernel's thread split when it is
 * built), in a table of their own */
static rt_kern_dnnl_cache rt__bcv_stab = RT_KERN_DNNL_CACHE_INIT;

static void *rt__bcv_build_serial(const void *kp)
{
    const int outer = omp_in_parallel() ? 0 : omp_get_max_threads();
    if (outer > 1)
        omp_set_num_threads(1);
    void *d = rt__bcv_make(kp, 0);
    if (outer > 1)
        omp_set_num_threads(outer);
    return d;
}

/* thread t's parts: a chunk's pre-pool values or dz (float32), its db,
 * OC floats, the chunk's dz in bf16, the chunk's dW and the thread's sum
 * (backward-weights' layout), the chunk's dx or, where y is stored bf16
 * (node->bf16_out), its pooled y in float32 (the forward's, and the
 * backward's before dx), the scratchpad; after the threads': W in
 * backward-data's layout and a scratchpad for the reorders */
typedef struct {
    float *z, *db, *tmp, *dwc, *dwp, *dx, *y, *sp;
    uint16_t *dzb;
} rt__bcp_tparts;

static rt__bcp_tparts rt__bcp_thread(const rt__bcp *d, float *s, int t)
{
    const rt__bcv_key *k = &d->c->key;
    const int64_t cz = k->n * k->OH * k->OW * k->OC;
    rt__bcp_tparts p;
    s += t * d->tstride;
    p.z = s;
    s += rt__ff(cz);
    p.db = s;
    s += rt__ff(k->OC);
    p.tmp = s;
    s += rt__ff(k->OC);
    p.dzb = (uint16_t *)s;
    s += rt__hf(cz);
    p.dwc = s;
    s += d->c->dwd_floats;
    p.dwp = s;
    s += d->c->dwd_floats;
    p.dx = p.y = s;
    s += d->dxfloats;
    p.sp = s;
    return p;
}

static int rt__bconv_pool_prepare(rt__node *nd, int64_t B, rt__arena *A)
{
    const rt__conv_params *cv = rt__conv_cp(nd), *pc = &nd->fused_p->conv;
    RT_ASSERT(nd->fused == &rt__op_maxpool2d);
    if (rt__bcf_fits(nd))
        return rt__bcf_prepare(nd, B, A);
    if (cv->G > 1 || (cv->act != RT__ACT_NONE && cv->act != RT__ACT_RELU &&
                      cv->act != RT__ACT_SIGMOID && cv->act != RT__ACT_TANH))
        return rt__bf32(nd, B, A);
    const int64_t per = cv->H * cv->W * cv->C, oper = cv->OH * cv->OW * cv->OC;
    const int64_t pp = pc->OH * pc->OW * cv->OC;
    int64_t cs = rt_kern_bf16_pool_chunk / oper;
    cs = cs < 1 ? 1 : cs > B ? B : cs;
    rt__bcv_tkey kc;
    memset(&kc, 0, sizeof kc);
    kc.key = rt_kern_dnnl_conv_key_of(cv, cs); /* pooled y: float32 */
    const rt__bcv *c = rt_kern_dnnl_cache_get(&rt__bcv_stab, &kc, sizeof kc, rt__bcv_build_serial);
    if (!c || !c->ok)
        return rt__bf32(nd, B, A);
    rt__bcp *d = rt__arena_alloc(A, sizeof *d);
    if (!d)
        return RT_ENOMEM;
    d->c = c, d->cs = cs;
    d->nt = omp_get_max_threads() < 1 ? 1 : omp_get_max_threads();
    d->g = rt_kern_mpool_of(cv, pc);
    d->dxfloats = rt__ff(cs * (nd->bf16_out && pp > per ? pp : per));
    d->tstride = rt__ff(cs * oper) + 2 * rt__ff(cv->OC) + rt__hf(cs * oper) + 2 * c->dwd_floats +
                 d->dxfloats + c->sp_floats;
    d->xfloats = nd->bf16_in & 1u ? rt__hf(cs * per) : rt__hf((B + cs - 1) / cs * cs * per);
    nd->kdata = d;
    /* workspace: x in bf16, W in the forward's bf16 layout, argmax */
    nd->ws_floats = d->xfloats + c->wf_floats + rt__ff((B * pp + 3) / 4);
    nd->scratch_floats = d->nt * d->tstride + c->wd_floats + c->sp_floats;
    return 0;
}

/* chunk ch of x in bf16 (n samples): the workspace's copy, or x itself
 * where it is stored bf16 and the chunk lies in the batch */
static const uint16_t *rt__bcp_x(const rt__kargs *a, const rt__bcp *d, int64_t ch, int64_t per)
{
    const uint16_t *xb = (const uint16_t *)a->ws;
    if (!(a->nd->bf16_in & 1u))
        return xb + ch * d->cs * per;
    return a->r->n - ch * d->cs < d->cs ? xb : (const uint16_t *)a->x[0] + ch * d->cs * per;
}

static void rt__bcp_fwd(const rt__kargs *a)
{
    const rt__bcp *d = a->nd->kdata;
    const rt__bcv *c = d->c;
    const rt__bcv_key *k = &c->key;
    const int64_t per = k->H * k->W * k->C;
    const int64_t pp = d->g.PH * d->g.PW * k->OC, n = a->r->n, cs = d->cs;
    const int64_t nch = (n + cs - 1) / cs;
    const int by = a->nd->bf16_out;
    uint16_t *xb = (uint16_t *)a->ws, *wf = (uint16_t *)(a->ws + d->xfloats);
    uint8_t *idx = (uint8_t *)(a->ws + d->xfloats + c->wf_floats);
    float *sp = a->scratch + d->nt * d->tstride + c->wd_floats;
    /* the last chunk's rows past the batch are zeros */
    if (!(a->nd->bf16_in & 1u)) {
        rt__to_bf16_pad(xb, a->x[0], n * per, nch * cs * per);
    } else if (n % cs) {
        const int64_t m = (n % cs) * per;
        memcpy(xb, (const uint16_t *)a->x[0] + (nch - 1) * cs * per, sizeof(uint16_t) * (size_t)m);
        memset(xb + m, 0, sizeof(uint16_t) * (size_t)(cs * per - m));
    }
    rt_kern_dnnl_reord(c->w_f, &c->hwio, a->x[1], &c->wf, wf, &c->sp[3], sp, 0);
    const int nt = nch < d->nt ? (int)nch : (int)d->nt;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t ch = 0; ch < nch; ch++) {
        const rt__bcp_tparts q = rt__bcp_thread(d, a->scratch, omp_get_thread_num());
        rt_kern_dnnl_args g = {0};
        rt_kern_dnnl_arg(&g, DNNL_ARG_SRC, &c->srcb, rt__bcp_x(a, d, ch, per));
        rt_kern_dnnl_arg(&g, DNNL_ARG_WEIGHTS, &c->wf, wf);
        if (k->bias)
            rt_kern_dnnl_arg(&g, DNNL_ARG_BIAS, &c->bias, a->x[2]);
        rt_kern_dnnl_arg(&g, DNNL_ARG_DST, &c->dstf, q.z);
        rt_kern_dnnl_exec(c->fwd, &g, &c->sp[0], q.sp, 1);
        const int64_t nb = n - ch * cs < cs ? n - ch * cs : cs;
        /* stored bf16: pooled in float32, rounded once into y */
        rt_kern_mpool_fwd(&d->g, nb, q.z, by ? q.y : a->y + ch * cs * pp, idx + ch * cs * pp);
        if (by)
            rt_kern_to_bf16_serial((uint16_t *)a->y + ch * cs * pp, q.y, nb * pp);
    }
}

static void rt__bcp_bwd(const rt__kargs *a)
{
    const rt__bcp *d = a->nd->kdata;
    const rt__bcv *c = d->c;
    const rt__bcv_key *k = &c->key;
    const int64_t per = k->H * k->W * k->C, oper = k->OH * k->OW * k->OC;
    const int64_t pp = d->g.PH * d->g.PW * k->OC, n = a->r->n, cs = d->cs;
    const int64_t nch = (n + cs - 1) / cs, dwn = c->dwd_floats;
    const uint16_t *wf = (uint16_t *)(a->ws + d->xfloats);
    const uint8_t *idx = (const uint8_t *)(a->ws + d->xfloats + c->wf_floats);
    float *dx = a->dx[0], *dw = a->dx[1], *db = k->bias ? a->dx[2] : NULL;
    uint16_t *wd = (uint16_t *)(a->scratch + d->nt * d->tstride);
    float *sp = a->scratch + d->nt * d->tstride + c->wd_floats;
    /* backward-data's weights: the forward's copy when it wants that layout */
    const uint16_t *w = wf;
    if (dx && !dnnl_memory_desc_equal(&c->wf, &c->wd)) {
        rt_kern_dnnl_reord(c->w_d, &c->wf, wf, &c->wd, wd, &c->sp[4], sp, 0);
        w = wd;
    }
    const int addx = (a->accum & 1u) != 0;
    const int nt = nch < d->nt ? (int)nch : (int)d->nt;
    int team = 1;
#pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num();
        if (t == 0)
            team = omp_get_num_threads();
        const rt__bcp_tparts q = rt__bcp_thread(d, a->scratch, t);
        memset(q.db, 0, sizeof(float) * (size_t)k->OC);
        memset(q.dwp, 0, sizeof(float) * (size_t)dwn);
#pragma omp for schedule(static)
        for (int64_t ch = 0; ch < nch; ch++) {
            const int64_t nb = n - ch * cs < cs ? n - ch * cs : cs, o = ch * cs * pp;
            /* act'(y) from y (a bf16 y: Relu only, its sign as float32's) */
            const float *y = k->act ? a->y + o : NULL;
            if (y && a->nd->bf16_out) {
                rt_kern_from_bf16_serial(q.y, (const uint16_t *)a->y + o, nb * pp);
                y = q.y;
            }
            rt_kern_mpool_bwd(&d->g, nb, a->dy + o, y, idx + o, q.z, q.tmp, db ? q.db : NULL);
            rt__to_bf16_pad(q.dzb, q.z, nb * oper, cs * oper);
            if (dw || db) {
                rt_kern_dnnl_args g = {0};
                rt_kern_dnnl_arg(&g, DNNL_ARG_SRC, &c->srcb, rt__bcp_x(a, d, ch, per));
                rt_kern_dnnl_arg(&g, DNNL_ARG_DIFF_DST, &c->dstb, q.dzb);
                rt_kern_dnnl_arg(&g, DNNL_ARG_DIFF_WEIGHTS, &c->dwd, q.dwc);
                if (k->bias)
                    rt_kern_dnnl_arg(&g, DNNL_ARG_DIFF_BIAS, &c->bias, q.tmp);
                rt_kern_dnnl_exec(c->bwd_w, &g, &c->sp[2], q.sp, 1);
                for (int64_t i = 0; i < dwn; i++)
                    q.dwp[i] += q.dwc[i];
            }
            if (dx) {
                /* straight into dx unless it adds or the chunk runs past
                 * the batch's rows */
                float *dxc = !addx && nb == cs ? dx + ch * cs * per : q.dx;
                rt_kern_dnnl_args g = {0};
                rt_kern_dnnl_arg(&g, DNNL_ARG_DIFF_DST, &c->dstb, q.dzb);
                rt_kern_dnnl_arg(&g, DNNL_ARG_WEIGHTS, &c->wd, w);
                rt_kern_dnnl_arg(&g, DNNL_ARG_DIFF_SRC, &c->srcf, dxc);
                rt_kern_dnnl_exec(c->bwd_d, &g, &c->sp[1], q.sp, 1);
                float *restrict o = dx + ch * cs * per;
                if (addx)
                    for (int64_t i = 0; i < nb * per; i++)
                        o[i] += q.dx[i];
                else if (dxc == q.dx)
                    memcpy(o, q.dx, sizeof(float) * (size_t)(nb * per));
            }
        }
    }
    if (dw) {
        float *dw0 = rt__bcp_thread(d, a->scratch, 0).dwp;
        for (int t = 1; t < team; t++)
            rt__badd(dw0, rt__bcp_thread(d, a->scratch, t).dwp, dwn);
        if (a->accum & 2u)
            rt_kern_dnnl_reord(c->dw_add, &c->dwd, dw0, &c->hwio, dw, &c->sp[6], sp, 0);
        else
            rt_kern_dnnl_reord(c->dw_set, &c->dwd, dw0, &c->hwio, dw, &c->sp[5], sp, 0);
    }
    if (db) {
        if (!(a->accum & 4u))
            memset(db, 0, sizeof(float) * (size_t)k->OC);
        for (int t = 0; t < team; t++)
            rt__badd(db, rt__bcp_thread(d, a->scratch, t).db, k->OC);
    }
}

/* ---------------------------------------------------------------- table */

static const rt__kernel rt__bf16_table[] = {
    /* {op, fused reader or NULL, forward, backward, can_fuse, prepare} */
    {&rt__op_dense, NULL, rt__bdense_fwd, rt__bdense_bwd, NULL, rt__bdense_prepare},
    {&rt__op_dense, &rt__op_relu, rt__bdense_fwd, rt__bdense_bwd, rt_kern_dense_can_fuse_act,
     rt__bdense_prepare},
    {&rt__op_dense, &rt__op_sigmoid, rt__bdense_fwd, rt__bdense_bwd, rt_kern_dense_can_fuse_act,
     rt__bdense_prepare},
    {&rt__op_dense, &rt__op_tanh, rt__bdense_fwd, rt__bdense_bwd, rt_kern_dense_can_fuse_act,
     rt__bdense_prepare},
    {&rt__op_matmul, NULL, rt__bdense_fwd, rt__bdense_bwd, NULL, rt__bdense_prepare},
    {&rt__op_conv2d, NULL, rt__bconv_fwd, rt__bconv_bwd, NULL, rt__bconv_prepare},
    {&rt__op_conv2d, &rt__op_maxpool2d, rt__bcp_fwd, rt__bcp_bwd, rt_kern_conv2d_can_fuse_maxpool,
     rt__bconv_pool_prepare},
    /* float32 arithmetic on values stored bf16 (rt_kern_bf16act.c): bf16
     * only where compile stores their input or output bf16 */
    {&rt__op_batchnorm, NULL, rt_kern_batchnorm_fwd, rt_kern_batchnorm_bwd, NULL,
     rt_kern_batchnorm_prepare},
    /* BatchNorm + Relu in one pass each way (rt_kern_norm.c) */
    {&rt__op_batchnorm, &rt__op_relu, rt_kern_batchnorm_fwd, rt_kern_batchnorm_bwd, NULL,
     rt_kern_batchnorm_prepare},
    /* BatchNorm + Clip, + Keras' ReLU(max_value) (ReLU6) the same way */
    {&rt__op_batchnorm, &rt__op_clip, rt_kern_batchnorm_fwd, rt_kern_batchnorm_bwd,
     rt_kern_bn_can_fuse_clip, rt_kern_batchnorm_prepare},
    {&rt__op_batchnorm, &rt__op_kerasrelu, rt_kern_batchnorm_fwd, rt_kern_batchnorm_bwd,
     rt_kern_bn_can_fuse_clip, rt_kern_batchnorm_prepare},
    {&rt__op_relu, NULL, rt_kern_bf16_relu_fwd, rt_kern_bf16_relu_bwd, NULL, NULL},
    {&rt__op_clip, NULL, rt_kern_bf16_unary_fwd, rt_kern_bf16_unary_bwd, NULL, NULL},
    {&rt__op_kerasrelu, NULL, rt_kern_bf16_unary_fwd, rt_kern_bf16_unary_bwd, NULL, NULL},
    {&rt__op_pad, NULL, rt_kern_pad_bf16_fwd, rt_kern_pad_bf16_bwd, NULL, NULL},
    /* the pools' own kernels read and write bf16 (rt_kern_pool.c) */
    {&rt__op_maxpool2d, NULL, rt_kern_maxpool2d_fwd, rt_kern_maxpool2d_bwd, NULL,
     rt_kern_pool_prepare},
    {&rt__op_avgpool2d, NULL, rt_kern_avgpool2d_fwd, rt_kern_avgpool2d_bwd, NULL,
     rt_kern_pool_prepare},
    {&rt__op_globalavgpool, NULL, rt_kern_gap_fwd, rt_kern_gap_bwd, NULL, NULL},
    {&rt__op_concat, NULL, rt_kern_bf16_concat_fwd, rt_kern_concat_bwd, NULL, NULL},
    {&rt__op_dropout, NULL, rt_kern_bf16_dropout_fwd, rt_kern_dropout_bwd, NULL, NULL},
    {&rt__op_spatialdropout, NULL, rt_kern_bf16_dropout_fwd, rt_kern_dropout_bwd, NULL, NULL},
    {&rt__op_gaussiannoise, NULL, rt_kern_bf16_dropout_fwd, rt_kern_dropout_bwd, NULL, NULL},
    {&rt__op_gaussiandropout, NULL, rt_kern_bf16_dropout_fwd, rt_kern_dropout_bwd, NULL, NULL},
    {&rt__op_flatten, NULL, rt_kern_bf16_copy_fwd, rt_kern_copy_bwd, NULL, NULL},
    {&rt__op_reshape, NULL, rt_kern_bf16_copy_fwd, rt_kern_copy_bwd, NULL, NULL},
    {&rt__op_add, NULL, rt_kern_bf16_bin_fwd, rt_kern_bf16_bin_bwd, NULL, NULL},
    {&rt__op_sub, NULL, rt_kern_bf16_bin_fwd, rt_kern_bf16_bin_bwd, NULL, NULL},
    {&rt__op_mul, NULL, rt_kern_bf16_bin_fwd, rt_kern_bf16_bin_bwd, NULL, NULL},
    {&rt__op_div, NULL, rt_kern_bf16_bin_fwd, rt_kern_bf16_bin_bwd, NULL, NULL},
    {&rt__op_max, NULL, rt_kern_bf16_bin_fwd, rt_kern_bf16_bin_bwd, NULL, NULL},
    {&rt__op_min, NULL, rt_kern_bf16_bin_fwd, rt_kern_bf16_bin_bwd, NULL, NULL},
};

const rt__kernel *rt_kern_bf16_kernel(const rt__node *nd, const rt__op_def *fused)
{
    const rt__op_def *op = nd->op;
    if (op == &rt__op_conv2d && rt__conv_cp(nd)->C < rt_kern_bf16_conv_min_c)
        return NULL;
    /* a fused one, or one with an unbatched output, stays float32 */
    if (rt__bf16_sample_kind(op) && !rt__bf16_sample_op(nd))
        return NULL;
    return rt__kernel_find(rt__bf16_table, sizeof rt__bf16_table / sizeof rt__bf16_table[0], op,
                           fused);
}
