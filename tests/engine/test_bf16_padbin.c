/*
 * test_bf16_padbin.c - the CPU backend's Pad and binary (Add, Sub, Mul,
 * Div, Max, Min) kernels on values stored bf16 (mixed_bfloat16:
 * node->bf16_in / bf16_out), the kernels the bf16 table picks for them.
 *
 * Inputs are drawn and rounded to bf16 here from the format's definition
 * (round to nearest even at 8 significant bits). Each bf16 kernel, with
 * every mix of its batched inputs and its output stored bf16, must give
 * bit for bit what the float32 kernel gives on the rounded inputs: Pad's
 * copies exactly (its fill value rounded where y is bf16), a binary's
 * float32 result rounded once where y is bf16. The backwards (float32 dy
 * into float32 dx, overwriting and adding) must equal the float32
 * kernel's bit for bit: the binaries' read x widened. Each shape runs
 * small (one thread) and large (more than the kernels' 65536-value
 * threshold: the samples over the threads). Broadcasts: a per-channel
 * (B,1,1,C) operand, a (B,H,1,1) one, an operand broadcast along the
 * last dim, an unbatched (float32) operand whose gradient sums over the
 * batch, and the flat case (both of the output's shape).
 *
 * BatchNorm with a Relu, a Clip or Keras' ReLU(max_value) fused: against
 * the unfused pair bit for bit (bf16 and float32 storage), bf16 against
 * float32 storage of the rounded values, and the fused clip's gradient
 * against central differences.
 */
#include "../engine/rt_test.h"
#include "cpu/rt_kern_bf16.h"
#include "cpu/rt_kern_cpu.h"

#define RT_TESTRNG_SEED 0x3c6ef372fe94f82bull
#include "../lib/rt_testrng.h"
#include "rt_testbf16.h"


#define CAP (1 << 19)
static float xr[2][CAP], y32[CAP], yv[CAP], dy[CAP], dxa[CAP], dxb[CAP];
static uint16_t xb[2][CAP], yb[CAP];

/* the outputs of a bf16 kernel (yb where by, else yv) that differ in
 * their bits from the float32 kernel's y32 (rounded where by) */
static int64_t ydiff(int by, int64_t ny)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < ny; i++) {
        const float want = by ? bf(y32[i]) : y32[i], got = by ? widen(yb[i]) : yv[i];
        bad += memcmp(&want, &got, sizeof want) != 0;
    }
    return bad;
}

/* ------------------------------------------------------------------ Pad */

/* Pad of (n, H, W, C) by (pt, pb, pl, pr) on H and W (negative: crops),
 * fill value v, the parameters as ONNX Pad's inference sets them */
static void check_pad(int64_t n, int64_t H, int64_t W, int64_t C, int64_t pt, int64_t pb,
                      int64_t pl, int64_t pr, float v)
{
    const int64_t OH = H + pt + pb, OW = W + pl + pr;
    rt__shape xs = {.ndim = 3, .batched = 1, .d = {H, W, C}};
    rt__node nd = {.op = &rt__op_pad, .n_in = 1};
    nd.in_shape[0] = &xs;
    nd.out = (rt__shape){.ndim = 3, .batched = 1, .d = {OH, OW, C}};
    rt__map_params *p = &nd.p.map;
    p->R = 3;
    const int64_t d[3] = {H, W, C}, os[3] = {OW * C, C, 1}, b[3] = {pt, pl, 0},
                  e[3] = {pb, pr, 0};
    for (int i = 0; i < 3; i++) {
        p->d[i] = d[i], p->os[i] = os[i];
        p->lo[i] = b[i] < 0 ? -b[i] : 0;
        p->hi[i] = e[i] < 0 ? d[i] + e[i] : d[i];
        p->base += b[i] * os[i];
        p->fill |= b[i] > 0 || e[i] > 0;
    }
    p->in_numel = H * W * C, p->out_numel = OH * OW * C, p->value = v;
    const int64_t nx = n * p->in_numel, ny = n * p->out_numel;
    REQUIRE(nx <= CAP && ny <= CAP);
    const rt__run r = {.n = n, .training = 1};
    const rt__kernel *k32 = rt_kern_cpu_f32_kernel(&rt__op_pad, NULL);
    const rt__kernel *k16 = rt_kern_bf16_kernel(&nd, NULL);
    REQUIRE(k32 && k16);
    for (int64_t i = 0; i < nx; i++)
        xr[0][i] = bf(normal()), xb[0][i] = bits(xr[0][i]);
    rt__kargs a = {.nd = &nd, .r = &r, .y = y32};
    a.x[0] = xr[0];
    for (int64_t i = 0; i < ny; i++)
        y32[i] = NAN; /* the kernel writes every output */
    k32->fwd(&a);
    for (int v3 = 1; v3 < 4; v3++) {
        const int bx = v3 & 1, by = v3 >> 1;
        rt__node n2 = nd;
        n2.bf16_in = (unsigned)bx, n2.bf16_out = by;
        rt__kargs c = {.nd = &n2, .r = &r};
        c.x[0] = bx ? (float *)(void *)xb[0] : xr[0];
        c.y = by ? (float *)(void *)yb : yv;
        for (int64_t i = 0; i < ny; i++)
            yb[i] = 0x7fc1, yv[i] = NAN;
        k16->fwd(&c);
        const int64_t bad = ydiff(by, ny);
        CHECKF(bad == 0, "Pad %lldx%lldx%lldx%lld bx=%d by=%d: %lld of %lld outputs differ",
               (long long)n, (long long)H, (long long)W, (long long)C, bx, by, (long long)bad,
               (long long)ny);
    }
    /* the backward: dx (+)= dy's landing values */
    for (int64_t i = 0; i < ny; i++)
        dy[i] = normal();
    for (int add = 0; add < 2; add++) {
        for (int v2 = 0; v2 < 2; v2++) {
            float *dx = v2 ? dxb : dxa;
            for (int64_t i = 0; i < nx; i++)
                dx[i] = add ? (float)i * 0.001f : -7.0f;
            rt__node n2 = nd;
            n2.bf16_in = (unsigned)v2, n2.bf16_out = v2;
            rt__kargs c = {.nd = &n2, .r = &r, .dy = dy, .accum = add ? 1u : 0u};
            c.x[0] = v2 ? (float *)(void *)xb[0] : xr[0];
            c.dx[0] = dx;
            (v2 ? k16 : k32)->bwd(&c);
        }
        CHECKF(!memcmp(dxa, dxb, sizeof(float) * (size_t)nx), "Pad backward n=%lld add=%d",
               (long long)n, add);
    }
    printf("Pad %lldx%lldx%lldx%lld by (%lld,%lld,%lld,%lld) fill %g: bf16 as float32\n",
           (long long)n, (long long)H, (long long)W, (long long)C, (long long)pt, (long long)pb,
           (long long)pl, (long long)pr, (double)v);
}

/* ------------------------------------------------------------- binaries */

/* numpy broadcasting of two shapes (rank R counting the batch, dims
 * right-aligned, 1 broadcast) as strides over the output's dims: the
 * parameters of op_eltwise.c's inference, derived here from the rule */
static void bcast(rt__node *nd, const rt__shape *s0, const rt__shape *s1)
{
    rt__bcast_params *p = &nd->p.bcast;
    const rt__shape *s[2] = {s0, s1};
    const int R = nd->out.ndim + 1;
    p->R = R, p->batched = 1;
    p->d[0] = -1;
    for (int i = 1; i < R; i++)
        p->d[i] = nd->out.d[i - 1];
    for (int k = 0; k < 2; k++) {
        int64_t *st = k ? p->sb : p->sa, stride = 1;
        const int r = s[k]->ndim + s[k]->batched;
        p->full[k] = r == R && s[k]->batched;
        for (int i = R - 1; i >= 0; i--) {
            const int j = i - (R - r);
            const int64_t dim = j < 0                       ? 1
                                : s[k]->batched && j == 0   ? -1
                                : s[k]->batched             ? s[k]->d[j - 1]
                                                            : s[k]->d[j];
            st[i] = dim == 1 && p->d[i] != 1 ? 0 : stride;
            if (dim == 1 && p->d[i] != 1)
                p->full[k] = 0;
            if (dim != -1)
                stride *= dim;
        }
    }
    p->flat = p->full[0] && p->full[1];
}

static const rt__op_def *const ops[6] = {&rt__op_add, &rt__op_sub, &rt__op_mul,
                                         &rt__op_div, &rt__op_max, &rt__op_min};

static void check_bin(int64_t n, rt__shape s0, rt__shape s1, rt__shape out)
{
    rt__shape sh[2] = {s0, s1};
    int64_t nx[2];
    for (int k = 0; k < 2; k++) {
        nx[k] = rt__numel_n(&sh[k], n);
        REQUIRE(nx[k] <= CAP);
        for (int64_t i = 0; i < nx[k]; i++) {
            /* values away from 0 (Div's divisor); few distinct values
             * after rounding: ties for Max and Min */
            float v = normal() * 2.0f;
            v += v < 0 ? -0.25f : 0.25f;
            xr[k][i] = bf(k ? v : v * 0.5f), xb[k][i] = bits(xr[k][i]);
        }
    }
    const int64_t ny = rt__numel_n(&out, n);
    REQUIRE(ny <= CAP);
    for (int64_t i = 0; i < ny; i++)
        dy[i] = normal();
    const rt__run r = {.n = n, .training = 1};
    const unsigned inm = (s0.batched ? 1u : 0u) | (s1.batched ? 2u : 0u);
    for (int o = 0; o < 6; o++) {
        rt__node nd = {.op = ops[o], .n_in = 2, .out = out};
        nd.in_shape[0] = &sh[0], nd.in_shape[1] = &sh[1];
        bcast(&nd, &sh[0], &sh[1]);
        const rt__kernel *k32 = rt_kern_cpu_f32_kernel(ops[o], NULL);
        const rt__kernel *k16 = rt_kern_bf16_kernel(&nd, NULL);
        REQUIRE(k32 && k16);
        rt__kargs a = {.nd = &nd, .r = &r, .y = y32};
        a.x[0] = xr[0], a.x[1] = xr[1];
        k32->fwd(&a);
        /* every mix of the batched inputs and y stored bf16 */
        for (unsigned v = 1; v < 8; v++) {
            const unsigned bi = v & 3u & inm;
            const int by = (v >> 2) & 1;
            if (bi != (v & 3u))
                continue;
            rt__node n2 = nd;
            n2.bf16_in = bi, n2.bf16_out = by;
            rt__kargs c = {.nd = &n2, .r = &r};
            for (int k = 0; k < 2; k++)
                c.x[k] = bi >> k & 1u ? (float *)(void *)xb[k] : xr[k];
            c.y = by ? (float *)(void *)yb : yv;
            for (int64_t i = 0; i < ny; i++)
                yb[i] = 0x7fc1, yv[i] = NAN;
            k16->fwd(&c);
            const int64_t bad = ydiff(by, ny);
            CHECKF(bad == 0, "%s flat=%d n=%lld in=%u by=%d: %lld of %lld outputs differ",
                   ops[o]->name, nd.p.bcast.flat, (long long)n, bi, by, (long long)bad,
                   (long long)ny);
        }
        /* the backward, x bf16 where it may be, each input's gradient
         * overwritten and added */
        for (int add = 0; add < 2; add++) {
            for (int k = 0; k < 2; k++) {
                for (int v2 = 0; v2 < 2; v2++) {
                    float *dx = v2 ? dxb : dxa;
                    for (int64_t i = 0; i < nx[k]; i++)
                        dx[i] = add ? (float)i * 0.001f : -7.0f;
                    rt__node n2 = nd;
                    n2.bf16_in = v2 ? inm : 0u, n2.bf16_out = v2;
                    rt__kargs c = {.nd = &n2, .r = &r, .dy = dy, .accum = add ? 3u : 0u};
                    for (int j = 0; j < 2; j++)
                        c.x[j] = v2 && (inm >> j & 1u) ? (float *)(void *)xb[j] : xr[j];
                    c.dx[k] = dx;
                    (v2 ? k16 : k32)->bwd(&c);
                }
                CHECKF(!memcmp(dxa, dxb, sizeof(float) * (size_t)nx[k]),
                       "%s backward flat=%d n=%lld dx%d add=%d", ops[o]->name,
                       nd.p.bcast.flat, (long long)n, k, add);
            }
        }
    }
    printf("binaries n=%lld, (%lld,%lld,%lld) and (%lld,%lld,%lld)%s: bf16 as float32\n",
           (long long)n, (long long)s0.d[0], (long long)s0.d[1], (long long)s0.d[2],
           (long long)s1.d[0], (long long)s1.d[1], (long long)s1.d[2],
           s1.batched ? "" : " unbatched");
}

/* ------------------------------------------- BatchNorm + Relu / Clip */

/* an activation the bf16 table fuses into BatchNorm: the reader's op and
 * parameters (op_act.c's: Clip alpha = min, beta = max; KerasRelu alpha =
 * negative_slope, beta = threshold, gamma = max_value) */
typedef struct {
    const char *name;
    const rt__op_def *op;
    rt__unary_params u;
} bnact;

static float zf[CAP], dzf[CAP];
static uint16_t zh[2][CAP];
static float gam[256], bet[256], mm[256], mv[256];

/* a BatchNorm node's call: forward, or backward of dy d into dx, dg, db
 * (accum's bits); x (xb[0] or xr[0]) and y stored bf16 where v */
typedef struct {
    const rt__kernel *k;
    rt__node nd;
    float *scratch, *ws;
} bncall;

static void bn_open(bncall *b, const rt__kernel *k, const rt__node *nd, int64_t n, int v)
{
    REQUIRE(k && k->prepare);
    static rt__arena A;
    b->k = k, b->nd = *nd;
    b->nd.bf16_in = (unsigned)v, b->nd.bf16_out = v;
    REQUIRE(k->prepare(&b->nd, n, &A) == 0);
    b->scratch = calloc((size_t)b->nd.scratch_floats, sizeof(float));
    b->ws = calloc((size_t)b->nd.ws_floats, sizeof(float));
    REQUIRE(b->scratch && b->ws);
}

static void bn_run(bncall *b, const rt__run *r, int v, void *y, float *d, float *dx,
                   float *dg, float *db, unsigned accum)
{
    rt__kargs a = {.nd = &b->nd, .r = r, .scratch = b->scratch, .ws = b->ws, .y = y};
    a.x[0] = v ? (float *)(void *)xb[0] : xr[0];
    a.x[1] = gam, a.x[2] = bet, a.x[3] = mm, a.x[4] = mv;
    if (!d) {
        b->k->fwd(&a);
        return;
    }
    a.dy = d, a.accum = accum;
    a.dx[0] = dx, a.dx[1] = dg, a.dx[2] = db;
    b->k->bwd(&a);
}

static void bn_close(bncall *b)
{
    free(b->scratch);
    free(b->ws);
}

/* a BatchNorm node over xs (channels last) with ac fused (its
 * parameters in fp) */
static rt__node bn_node(rt__shape *xs, rt__op_params *fp, const bnact *ac)
{
    memset(fp, 0, sizeof *fp);
    fp->unary = ac->u;
    rt__node nd = {.op = &rt__op_batchnorm, .n_in = 5, .fused = ac->op, .out = *xs};
    nd.in_shape[0] = xs;
    nd.fused_p = fp;
    nd.p.bn = (rt__bn_params){.C = xs->d[2], .momentum = 0.99, .eps = 1e-3};
    return nd;
}

/* the backward's outputs before a call: overwritten or added to */
static void bn_fill(float *dx, float *dg, float *db, int64_t nx, int64_t C, int add)
{
    for (int64_t i = 0; i < nx; i++)
        dx[i] = add ? (float)i * 0.001f : -7.0f;
    for (int64_t c = 0; c < C; c++)
        dg[c] = db[c] = add ? 0.5f : -7.0f;
}

/* The bf16 table's BatchNorm + activation (Relu, Clip, Keras' ReLU), one
 * node: with x and y stored bf16 and with both float32, against the
 * unfused pair (BatchNorm, then the activation's own kernel: the bf16
 * table's on bf16 storage, the float32 table's on float32), forward y and
 * backward dx, dgamma, dbeta bit for bit, overwriting (dx's rows hold the
 * masked dy between its passes) and adding; and the bf16 node against
 * itself with float32 storage holding the rounded x and the bf16 y
 * widened (y rounded once, the backward bit for bit). */
static void check_bn_act(int64_t n, int64_t H, int64_t W, int64_t C, const bnact *ac)
{
    rt__shape xs = {.ndim = 3, .batched = 1, .d = {H, W, C}};
    rt__op_params fp;
    const rt__node nd = bn_node(&xs, &fp, ac);
    rt__node plain = nd, act = {.op = ac->op, .n_in = 1, .out = xs};
    plain.fused = NULL, plain.fused_p = NULL;
    act.in_shape[0] = &xs;
    act.p.unary = ac->u;
    const rt__kernel *k = rt_kern_bf16_kernel(&nd, ac->op);
    REQUIRE(k && (!k->can_fuse || k->can_fuse(&plain, &act)));
    const int64_t nx = n * H * W * C;
    REQUIRE(nx <= CAP && C <= 256);
    /* gamma up to about 4: some outputs past 6 */
    for (int64_t c = 0; c < C; c++)
        gam[c] = 1.0f + 1.5f * fabsf(normal()), bet[c] = 0.5f * normal(), mm[c] = 0, mv[c] = 1;
    for (int64_t i = 0; i < nx; i++)
        xr[0][i] = bf(normal() * 1.5f + 0.3f), xb[0][i] = bits(xr[0][i]), dy[i] = normal();
    const rt__run r = {.n = n, .training = 1};
    static float dg[3][256], db[3][256];
    const float hi = ac->op == &rt__op_clip ? ac->u.beta : ac->u.gamma;
    int64_t clipped = 0; /* outputs at the upper bound */
    for (int v = 0; v < 2; v++) {
        /* fused and unfused */
        bncall f, u;
        bn_open(&f, k, &nd, n, v);
        bn_open(&u, v ? rt_kern_bf16_kernel(&plain, NULL) : rt_kern_cpu_f32_kernel(plain.op, NULL),
                &plain, n, v);
        rt__node an = act;
        an.bf16_in = (unsigned)v, an.bf16_out = v;
        const rt__kernel *ka = v ? rt_kern_bf16_kernel(&an, NULL) : rt_kern_cpu_f32_kernel(an.op, NULL);
        REQUIRE(ka);
        void *yf = v ? (void *)yb : (void *)y32, *yu = v ? (void *)zh[0] : (void *)yv;
        void *z = v ? (void *)zh[1] : (void *)zf; /* BatchNorm's own y, unfused */
        bn_run(&f, &r, v, yf, NULL, NULL, NULL, NULL, 0);
        bn_run(&u, &r, v, z, NULL, NULL, NULL, NULL, 0);
        rt__kargs aa = {.nd = &an, .r = &r, .y = yu};
        aa.x[0] = z;
        ka->fwd(&aa);
        CHECKF(!memcmp(yf, yu, (size_t)nx * (v ? 2 : 4)),
               "BatchNorm+%s C=%lld v=%d forward: fused differs from unfused", ac->name,
               (long long)C, v);
        for (int64_t i = 0; i < nx; i++)
            clipped += ac->op != &rt__op_relu && (v ? widen(yb[i]) : y32[i]) == hi;
        for (int add = 0; add < 2; add++) {
            bn_fill(dxa, dg[0], db[0], nx, C, add);
            bn_fill(dxb, dg[1], db[1], nx, C, add);
            bn_run(&f, &r, v, yf, dy, dxa, dg[0], db[0], add ? 7u : 0u);
            aa.dy = dy, aa.dx[0] = dzf, aa.accum = 0;
            ka->bwd(&aa);
            bn_run(&u, &r, v, z, dzf, dxb, dg[1], db[1], add ? 7u : 0u);
            CHECKF(!memcmp(dxa, dxb, sizeof(float) * (size_t)nx) &&
                       !memcmp(dg[0], dg[1], sizeof(float) * (size_t)C) &&
                       !memcmp(db[0], db[1], sizeof(float) * (size_t)C),
                   "BatchNorm+%s C=%lld v=%d backward add=%d: fused differs from unfused",
                   ac->name, (long long)C, v, add);
        }
        bn_close(&f);
        bn_close(&u);
    }
    /* bf16 storage against float32 storage of the rounded values */
    bncall b[2];
    for (int v = 0; v < 2; v++) {
        bn_open(&b[v], k, &nd, n, v);
        bn_run(&b[v], &r, v, v ? (void *)yb : (void *)y32, NULL, NULL, NULL, NULL, 0);
    }
    int64_t bad = 0;
    for (int64_t i = 0; i < nx; i++) {
        const float want = bf(y32[i]);
        bad += bits(want) != yb[i] || want != widen(yb[i]);
        yv[i] = widen(yb[i]);
    }
    CHECKF(bad == 0, "BatchNorm+%s C=%lld forward: %lld of %lld y differ", ac->name,
           (long long)C, (long long)bad, (long long)nx);
    for (int add = 0; add < 2; add++) {
        for (int v = 0; v < 2; v++) {
            bn_fill(v ? dxb : dxa, dg[v], db[v], nx, C, add);
            bn_run(&b[v], &r, v, v ? (void *)yb : (void *)yv, dy, v ? dxb : dxa, dg[v], db[v],
                   add ? 7u : 0u);
        }
        CHECKF(!memcmp(dxa, dxb, sizeof(float) * (size_t)nx) &&
                   !memcmp(dg[0], dg[1], sizeof(float) * (size_t)C) &&
                   !memcmp(db[0], db[1], sizeof(float) * (size_t)C),
               "BatchNorm+%s C=%lld backward add=%d", ac->name, (long long)C, add);
    }
    bn_close(&b[0]);
    bn_close(&b[1]);
    CHECK(ac->op == &rt__op_relu || nx < 1000 || clipped > 0);
    printf("BatchNorm+%s %lldx%lldx%lldx%lld (%lld outputs at the upper bound): fused as "
           "unfused, bf16 as float32\n",
           ac->name, (long long)n, (long long)H, (long long)W, (long long)C, (long long)clipped);
}

/* The fused clip's gradient against central differences of L = sum w y
 * (float32 storage, the kernel's own forward): dx and dgamma, each
 * coordinate whose perturbation moves no output across a bound */
static void check_bn_fd(const bnact *ac)
{
    const int64_t n = 2, H = 3, W = 5, C = 4, nx = n * H * W * C;
    rt__shape xs = {.ndim = 3, .batched = 1, .d = {H, W, C}};
    rt__op_params fp;
    const rt__node nd = bn_node(&xs, &fp, ac);
    bncall b;
    bn_open(&b, rt_kern_bf16_kernel(&nd, ac->op), &nd, n, 0);
    for (int64_t c = 0; c < C; c++)
        gam[c] = 2.0f + fabsf(normal()), bet[c] = 1.0f + normal(), mm[c] = 0, mv[c] = 1;
    for (int64_t i = 0; i < nx; i++)
        xr[0][i] = normal() * 1.5f, dy[i] = normal();
    const rt__run r = {.n = n, .training = 1};
    static float dg[256], db[256];
    bn_run(&b, &r, 0, y32, NULL, NULL, NULL, NULL, 0);
    bn_run(&b, &r, 0, y32, dy, dxa, dg, db, 0);
    const float lo = ac->op == &rt__op_clip ? ac->u.alpha : 0.0f;
    const float hi = ac->op == &rt__op_clip ? ac->u.beta : ac->u.gamma;
    int64_t inside = 0;
    for (int64_t i = 0; i < nx; i++)
        inside += y32[i] > lo && y32[i] < hi;
    double big = 0, err = 0;
    int checked = 0;
    const double h = 1e-2;
    for (int64_t j = 0; j < nx + C; j++) {
        float *p = j < nx ? &xr[0][j] : &gam[j - nx];
        const float p0 = *p;
        double L[2];
        int crossed = 0;
        for (int s = 0; s < 2; s++) {
            *p = (float)(p0 + (s ? h : -h));
            bn_run(&b, &r, 0, yv, NULL, NULL, NULL, NULL, 0);
            L[s] = 0;
            for (int64_t i = 0; i < nx; i++) {
                L[s] += (double)dy[i] * yv[i];
                crossed |= (y32[i] > lo && y32[i] < hi) != (yv[i] > lo && yv[i] < hi);
            }
        }
        *p = p0;
        if (crossed)
            continue;
        const double fd = (L[1] - L[0]) / (2 * h), an = j < nx ? dxa[j] : dg[j - nx];
        big = fmax(big, fabs(an));
        err = fmax(err, fabs(fd - an));
        checked++;
    }
    bn_close(&b);
    printf("BatchNorm+%s gradient vs central differences: %d of %lld checked, %lld outputs "
           "inside (%g, %g), max error %.3g of %.3g\n",
           ac->name, checked, (long long)(nx + C), (long long)inside, (double)lo, (double)hi, err,
           big);
    CHECK(checked > (nx + C) / 2 && inside > nx / 4 && inside < nx * 3 / 4);
    CHECK(err <= 2e-3 * big);
}

static rt__shape shp(int batched, int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    rt__shape s = {.ndim = ndim, .batched = batched, .d = {d0, d1, d2}};
    return s;
}

int main(void)
{
    /* small (one thread) and large (over 65536 values: threads) */
    check_pad(2, 5, 4, 3, 1, 2, 2, 1, 0.0f);
    check_pad(3, 6, 5, 7, -1, 2, 1, -2, 0.3f);
    check_pad(4, 20, 20, 64, 1, 1, 1, 1, 0.0f);
    check_pad(4, 21, 19, 48, 2, -1, -3, 1, -1.7f);
    static const int64_t ns[2] = {3, 5};
    for (int i = 0; i < 2; i++) {
        const int64_t n = ns[i], H = i ? 17 : 5, W = i ? 16 : 4, C = i ? 64 : 6;
        const rt__shape full = shp(1, 3, H, W, C);
        /* per channel, either side */
        check_bin(n, full, shp(1, 3, 1, 1, C), full);
        check_bin(n, shp(1, 3, 1, 1, C), full, full);
        /* along the last dim: a stride-0 run */
        check_bin(n, shp(1, 3, H, 1, 1), full, full);
        check_bin(n, full, shp(1, 3, 1, W, 1), full);
        /* an unbatched operand (float32), its gradient summed */
        check_bin(n, full, shp(0, 2, W, C, 0), full);
        /* flat */
        check_bin(n, full, full, full);
    }
    /* Relu, Keras' ReLU(max_value=6), Clip [0, 6] (ReLU6) and [-1, 1.5] */
    const bnact acts[4] = {{"Relu", &rt__op_relu, {0}},
                           {"KerasRelu6", &rt__op_kerasrelu, {RT__U_KRELU, 0.0f, 0.0f, 6.0f}},
                           {"Clip6", &rt__op_clip, {RT__U_CLIP, 0.0f, 6.0f, 0.0f}},
                           {"Clip-1,1.5", &rt__op_clip, {RT__U_CLIP, -1.0f, 1.5f, 0.0f}}};
    for (int i = 0; i < 4; i++) {
        check_bn_act(2, 3, 5, 32, &acts[i]);
        check_bn_act(12, 28, 28, 32, &acts[i]); /* 301056 values: the threads */
    }
    for (int i = 1; i < 4; i++)
        check_bn_fd(&acts[i]);
    /* not fused: a slope or threshold, a bound bf16 does not hold */
    rt__node bn = {.op = &rt__op_batchnorm}, rd = {.op = &rt__op_kerasrelu};
    const rt__kernel *kc = rt_kern_bf16_kernel(&bn, &rt__op_kerasrelu);
    REQUIRE(kc && kc->can_fuse);
    rd.p.unary = (rt__unary_params){RT__U_KRELU, 0.1f, 0.0f, 6.0f};
    CHECK(!kc->can_fuse(&bn, &rd));
    rd.p.unary = (rt__unary_params){RT__U_KRELU, 0.0f, 0.5f, 6.0f};
    CHECK(!kc->can_fuse(&bn, &rd));
    rd.p.unary = (rt__unary_params){RT__U_KRELU, 0.0f, 0.0f, 6.01f};
    CHECK(!kc->can_fuse(&bn, &rd));
    rd.p.unary = (rt__unary_params){RT__U_KRELU, 0.0f, 0.0f, INFINITY};
    CHECK(kc->can_fuse(&bn, &rd));
    rd.op = &rt__op_clip;
    rd.p.unary = (rt__unary_params){RT__U_CLIP, 6.0f, 0.0f, 0.0f};
    CHECK(!kc->can_fuse(&bn, &rd));
    if (rt_test_failures)
        fprintf(stderr, "%d check(s) failed\n", rt_test_failures);
    return rt_test_failures ? 1 : 0;
}
