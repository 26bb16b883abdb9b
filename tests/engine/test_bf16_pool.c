/*
 * test_bf16_pool.c - the CPU backend's pooling kernels on values stored
 * bf16 (mixed_bfloat16: node->bf16_in / bf16_out), and its Dropout draws.
 *
 * Pools: MaxPool2D (the tiling 2x2/2 path and an overlapping padded 3x3/2
 * window), AvgPool2D (3x3/2 padded, the padding not counted) and
 * GlobalAvgPool, with 5 channels and with 300 (more than one block of the
 * bf16 output's channels, the last partial), x drawn, rounded to bf16 here
 * from the format's definition (round to nearest even at 8 significant
 * bits). Each kernel run with x and/or y stored bf16 must give what the
 * float32 kernel gives on the rounded x: a max exactly (it is one of the
 * bf16 values), an average rounded once to bf16 (the same float32 sum);
 * and the averages must lie within bf16's unit roundoff (2^-8 relative) plus
 * float32 summation error of the exact mean computed here in double.
 * MaxPool2D's backward on a bf16 x must route dy exactly as the float32
 * kernel does on the rounded x (ties included: rounding makes many),
 * overwriting and adding.
 *
 * Dropout (plain, noise_shape-free; SpatialDropout; GaussianDropout): the
 * forward and backward kernels must multiply by exactly the factors the
 * engine's counter-based RNG defines (rt__rng_u64(seed, RT__STREAM_DROPOUT
 * + node id, step << 36 | element), 24 bits against the rate), element by
 * element over a batch that spans several of the kernel's chunks: the
 * masks a checkpoint resume or a chunked fit redraws.
 */
#include "../engine/rt_test.h"
#include "cpu/rt_kern_bf16.h"
#include "cpu/rt_kern_conv.h"
#include "cpu/rt_kern_cpu.h"

#define RT_TESTRNG_SEED 0x6a09e667f3bcc909ull
#include "../lib/rt_testrng.h"
#include "rt_testbf16.h"


enum { B = 3, H = 7, W = 6 };

typedef struct {
    rt__node nd;
    rt__run r;
    int nt;
} pool_case;

/* a pool node over (B, H, W, C): window k, stride s, padding pad */
static void pool_node(pool_case *t, const rt__op_def *op, int64_t C, int64_t k, int64_t s,
                      int64_t pad)
{
    memset(t, 0, sizeof *t);
    t->nd.op = op;
    t->nt = rt_kern_conv_threads();
    t->nd.kdata = &t->nt;
    t->r.n = B;
    t->r.training = 1;
    if (op == &rt__op_globalavgpool) {
        t->nd.p.gap = (rt__gap_params){.HW = H * W, .C = C};
        return;
    }
    rt__conv_params *p = &t->nd.p.conv;
    p->H = H, p->W = W, p->C = p->OC = C;
    p->KH = p->KW = k, p->SH = p->SW = s, p->DH = p->DW = 1;
    p->PT = p->PL = pad;
    p->OH = (H + 2 * pad - k) / s + 1;
    p->OW = (W + 2 * pad - k) / s + 1;
}

static int64_t out_per(const pool_case *t)
{
    const rt__conv_params *p = &t->nd.p.conv;
    return t->nd.op == &rt__op_globalavgpool ? t->nd.p.gap.C : p->OH * p->OW * p->C;
}

/* y of the forward (x float32 or bf16 by bx, y by by) as floats */
static void run_fwd(pool_case *t, const rt__kernel *k, int bx, int by, const float *xf,
                    const uint16_t *xb, float *y)
{
    static uint16_t yb[B * 300 * 42];
    rt__node nd = t->nd;
    nd.bf16_in = bx ? 1u : 0u;
    nd.bf16_out = by;
    rt__kargs a = {.nd = &nd, .r = &t->r};
    a.x[0] = bx ? (float *)(void *)xb : (float *)xf;
    a.y = by ? (float *)(void *)yb : y;
    k->fwd(&a);
    if (by)
        for (int64_t i = 0; i < B * out_per(t); i++)
            y[i] = widen(yb[i]);
}

static void check_pool(const rt__op_def *op, int64_t C, int64_t kw, int64_t s, int64_t pad)
{
    static float x[B * H * W * 300], xr[B * H * W * 300], y32[B * 300 * 42], yv[B * 300 * 42];
    static uint16_t xb[B * H * W * 300];
    pool_case t;
    pool_node(&t, op, C, kw, s, pad);
    const rt__kernel *k = rt_kern_cpu_f32_kernel(op, NULL);
    REQUIRE(k);
    const int64_t nx = B * H * W * C, ny = B * out_per(&t);
    for (int64_t i = 0; i < nx; i++) {
        /* few distinct values after rounding in a window: ties */
        x[i] = normal() * 2.0f;
        xr[i] = bf(x[i]);
        xb[i] = bits(xr[i]);
        CHECK(widen(xb[i]) == xr[i]);
    }
    run_fwd(&t, k, 0, 0, xr, NULL, y32);
    const int is_max = op == &rt__op_maxpool2d;
    for (int v = 1; v < 4; v++) {
        const int bx = v & 1, by = (v >> 1) & 1;
        run_fwd(&t, k, bx, by, bx ? NULL : xr, xb, yv);
        int64_t bad = 0;
        for (int64_t i = 0; i < ny; i++)
            bad += yv[i] != (by ? bf(y32[i]) : y32[i]);
        CHECKF(bad == 0, "%s C=%lld k=%lld bx=%d by=%d: %lld of %lld outputs differ", op->name,
               (long long)C, (long long)kw, bx, by, (long long)bad, (long long)ny);
    }
    /* the averages against the exact mean of the rounded x */
    if (!is_max) {
        run_fwd(&t, k, 1, 1, NULL, xb, yv);
        const rt__conv_params *p = &t.nd.p.conv;
        double worst = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t o = 0; o < out_per(&t) / C; o++)
                for (int64_t c = 0; c < C; c++) {
                    double sum = 0, mag = 0;
                    int64_t cnt = 0;
                    for (int64_t h = 0; h < H; h++)
                        for (int64_t w = 0; w < W; w++) {
                            if (op == &rt__op_avgpool2d) {
                                const int64_t oh = o / p->OW, ow = o % p->OW;
                                const int64_t h0 = oh * s - pad, w0 = ow * s - pad;
                                if (h < h0 || h >= h0 + kw || w < w0 || w >= w0 + kw)
                                    continue;
                            }
                            const double e = xr[((b * H + h) * W + w) * C + c];
                            sum += e, mag += fabs(e), cnt++;
                        }
                    const double mean = sum / (double)cnt, got = yv[(b * (ny / B)) + o * C + c];
                    /* bf16's unit roundoff 2^-8, float32's sum of cnt terms */
                    const double tol =
                        ldexp(fabs(mean), -8) + (double)(cnt + 2) * 0x1p-24 * mag / (double)cnt;
                    worst = fmax(worst, fabs(got - mean) / tol);
                }
        CHECKF(worst <= 1.0, "%s C=%lld: %.3g of the bf16 tolerance", op->name, (long long)C,
               worst);
    }
    if (!is_max)
        return;
    /* the backward: dx from dy routed by x's first maximum */
    static float dy[B * 300 * 42], dx32[B * H * W * 300], dxb[B * H * W * 300];
    static float scratch[2 * 300 * 64];
    REQUIRE(2 * C * t.nt <= (int64_t)(sizeof scratch / sizeof scratch[0]));
    for (int64_t i = 0; i < ny; i++)
        dy[i] = normal();
    for (int add = 0; add < 2; add++) {
        for (int v = 0; v < 2; v++) {
            float *dx = v ? dxb : dx32;
            for (int64_t i = 0; i < nx; i++)
                dx[i] = add ? (float)i * 0.001f : -7.0f;
            rt__node nd = t.nd;
            nd.bf16_in = (unsigned)v;
            rt__kargs a = {.nd = &nd, .r = &t.r, .dy = dy, .scratch = scratch};
            a.x[0] = v ? (float *)(void *)xb : xr;
            a.dx[0] = dx;
            a.accum = add ? 1u : 0u;
            k->bwd(&a);
        }
        CHECKF(!memcmp(dx32, dxb, sizeof(float) * (size_t)nx),
               "MaxPool2D backward on bf16 x, C=%lld k=%lld add=%d", (long long)C, (long long)kw,
               add);
    }
    printf("%s C=%lld window %lld stride %lld pad %lld: bf16 as float32 on rounded x\n", op->name,
           (long long)C, (long long)kw, (long long)s, (long long)pad);
}

/* ------------------------------------------------------------ dropout */

static float unit(uint64_t seed, int id, int64_t step, int64_t i)
{
    const uint64_t u = rt__rng_u64(seed, RT__STREAM_DROPOUT + (uint64_t)id,
                                   ((uint64_t)step << 36) | (uint64_t)i);
    return (float)(u >> 40) * (1.0f / 16777216.0f);
}

static void check_dropout(int mode)
{
    enum { N = 5, PER = 24 * 1000 + 7, CH = 7 }; /* 120035 values: 8 chunks */
    static float x[N * PER], y[N * PER], dy[N * PER], dx[N * PER];
    const rt__op_def *op = mode == RT__DROP_SPATIAL ? &rt__op_spatialdropout
                           : mode == RT__DROP_GAUSS ? &rt__op_gaussiandropout
                                                    : &rt__op_dropout;
    const float rate = 0.3f;
    rt__node nd = {.op = op, .id = 11};
    nd.out = (rt__shape){.ndim = 1, .batched = 1, .d = {PER}};
    nd.p.dropout = (rt__dropout_params){.rate = rate, .mode = mode, .C = CH, .per = PER};
    const rt__run r = {.n = N, .step = 1234567, .seed = 0x5eedull, .training = 1};
    for (int64_t i = 0; i < N * PER; i++)
        x[i] = normal(), dy[i] = normal();
    rt__kargs a = {.nd = &nd, .r = &r, .y = y, .dy = dy};
    a.x[0] = x;
    a.dx[0] = dx;
    const rt__kernel *k = rt_kern_cpu_f32_kernel(op, NULL);
    REQUIRE(k);
    k->fwd(&a);
    k->bwd(&a);
    int64_t bad = 0, kept = 0;
    for (int64_t i = 0; i < N * PER; i++) {
        float f;
        if (mode == RT__DROP_GAUSS) {
            const float u1 = unit(r.seed, nd.id, r.step, 2 * i);
            const float u2 = unit(r.seed, nd.id, r.step, 2 * i + 1);
            f = 1.0f + sqrtf(rate / (1.0f - rate)) * (sqrtf(-2.0f * logf(1.0f - u1)) *
                                                      cosf(6.28318530717958648f * u2));
            /* the kernel may fuse 1 + s * n into one rounding (FMA) */
            const float tf = 1e-6f * (1.0f + fabsf(f));
            bad += fabsf(y[i] - x[i] * f) > tf * fabsf(x[i]) ||
                   fabsf(dx[i] - dy[i] * f) > tf * fabsf(dy[i]);
            continue;
        }
        const int64_t key = mode == RT__DROP_SPATIAL ? (i / PER) * CH + i % CH : i;
        f = unit(r.seed, nd.id, r.step, key) >= rate ? 1.0f / (1.0f - rate) : 0.0f;
        kept += f != 0.0f;
        bad += y[i] != x[i] * f || dx[i] != dy[i] * f;
    }
    CHECKF(bad == 0, "%s: %lld of %d values are not the RNG's draws", op->name, (long long)bad,
           N * PER);
    if (mode == RT__DROP_PLAIN) {
        const double share = (double)kept / (N * PER);
        printf("Dropout(0.3): %.4f kept\n", share);
        CHECK(fabs(share - 0.7) < 0.01);
    }
}

int main(void)
{
    static const int64_t cs[2] = {5, 300};
    for (int i = 0; i < 2; i++) {
        check_pool(&rt__op_maxpool2d, cs[i], 2, 2, 0);
        check_pool(&rt__op_maxpool2d, cs[i], 3, 2, 1);
        check_pool(&rt__op_avgpool2d, cs[i], 3, 2, 1);
        check_pool(&rt__op_globalavgpool, cs[i], 0, 0, 0);
    }
    check_dropout(RT__DROP_PLAIN);
    check_dropout(RT__DROP_SPATIAL);
    check_dropout(RT__DROP_GAUSS);
    if (rt_test_failures)
        fprintf(stderr, "%d check(s) failed\n", rt_test_failures);
    return rt_test_failures ? 1 : 0;
}
