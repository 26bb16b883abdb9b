/*
 * rt_backend_cpu.c - the CPU backend: its kernels (the float32 table in
 * rt_kern_table.c, the bf16 ones in rt_kern_bf16.c), its memory (the
 * host's: host() is the identity, so the engine's views cost nothing) and
 * the rest of the step, and the rt__backend the daemon registers.
 *
 * A second backend copies this file's shape: its own kernels, its own
 * table and its own rt__backend; no op file changes.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "cpu/rt_kern_bf16.h"
#include "cpu/rt_kern_conv.h"
#include "cpu/rt_kern_cpu.h"

static const rt__kernel *rt__cpu_kernel(void *ctx, const rt__op_def *op, const rt__op_def *fused)
{
    (void)ctx;
    return rt_kern_cpu_f32_kernel(op, fused);
}

/* mixed bfloat16: Dense, MatMul, Conv2D (rt_kern_bf16.c) where the CPU
 * has bf16 instructions */
static int rt__cpu_precision(void *ctx, int prec, char *err, size_t errlen)
{
    (void)ctx;
    return prec == RT_PREC_BF16 ? rt_kern_bf16_supported(err, errlen) : 0;
}
static const rt__kernel *rt__cpu_kernel_bf16(void *ctx, const rt__node *nd, const rt__op_def *fused)
{
    (void)ctx;
    return rt_kern_bf16_kernel(nd, fused);
}

static unsigned rt__cpu_bf16_io(void *ctx, const rt__node *nd)
{
    (void)ctx;
    return rt_kern_bf16_io(nd);
}

static int rt__cpu_supports(void *ctx, const rt__node *nd)
{
    /* every CPU kernel handles every shape its op's infer accepts */
    return rt__cpu_kernel(ctx, nd->op, NULL) != NULL;
}

/* kernels in order on the calling thread; they start OpenMP teams */
static void rt__cpu_run(void *ctx, const rt__call *calls, const rt__kargs *args, int n)
{
    (void)ctx;
    for (int i = 0; i < n; i++)
        calls[i].fn(&args[i]);
}

/* ------------------------------------------------------------- memory */

static void *rt__cpu_alloc(void *ctx, size_t n)
{
    (void)ctx;
    return rt__aligned_alloc(n);
}
static void rt__cpu_release(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}
static void rt__cpu_copy(void *ctx, void *dst, const void *src, size_t n)
{
    (void)ctx;
    if (dst != src && n)
        memcpy(dst, src, n);
}
static void *rt__cpu_host(void *ctx, void *p)
{
    (void)ctx;
    return p;
}

/* --------------------------------------------------------------- step */

/* The batch's images over the copied rows: the host's augmentation
 * (rt_aug_apply, which the data pipeline's streamed rows use too, so a
 * streamed and an in-memory set train on the same floats), one image a
 * thread. */
static void rt__cpu_augment(const rt__gather_args *g)
{
    const rt_augment *a = g->aug;
    if (!a)
        return;
    const int64_t ib = (int64_t)a->h * a->w * a->c, nb = g->nb;
#pragma omp parallel for schedule(static) if (nb * ib >= 65536)
    for (int64_t i = 0; i < nb; i++) {
        const int64_t r = g->idx ? g->idx[i] : g->start + i;
        rt_aug_apply(a, &g->draw[i], a->img + r * ib, g->xb + i * g->in + a->off);
    }
}

/* A row of n 4-byte values. Rows of up to 8 (W-A's 4 features and its
 * label) are copied with a move of their constant size: a libc memcpy
 * call per row cost W-A about as much as its whole optimizer update. */
static inline void rt__cpu_row(void *restrict d, const void *restrict s, int64_t n)
{
#define RT__ROW(k) \
    case k: memcpy(d, s, 4 * k); return
    switch (n) {
        RT__ROW(1);
        RT__ROW(2);
        RT__ROW(3);
        RT__ROW(4);
        RT__ROW(5);
        RT__ROW(6);
        RT__ROW(7);
        RT__ROW(8);
    default: memcpy(d, s, 4 * (size_t)n);
    }
#undef RT__ROW
}

static void rt__cpu_gather(void *ctx, const rt__gather_args *g)
{
    (void)ctx;
    const int64_t in = g->in, ln = g->ln, nb = g->nb;
    float *restrict xb = g->xb;
    char *restrict yb = g->yb;
    const float *x = g->x;
    const char *y = g->y;
    const int64_t *idx = g->idx;
    if (!idx) {
        memcpy(xb, x + g->start * in, sizeof(float) * (size_t)(nb * in));
        if (y)
            memcpy(yb, y + g->start * ln * 4, (size_t)(nb * ln * 4));
    } else if (nb * in >= 65536) {
        /* big batches (W-C: 128 rows of 784) copy on oneDNN's threads */
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < nb; i++) {
            memcpy(xb + i * in, x + idx[i] * in, sizeof(float) * (size_t)in);
            if (y)
                memcpy(yb + i * ln * 4, y + idx[i] * ln * 4, (size_t)(ln * 4));
        }
    } else if (y) {
        for (int64_t i = 0; i < nb; i++) {
            const int64_t r = idx[i];
            rt__cpu_row(xb + i * in, x + r * in, in);
            rt__cpu_row(yb + i * ln * 4, y + r * ln * 4, ln);
        }
    } else {
        for (int64_t i = 0; i < nb; i++)
            rt__cpu_row(xb + i * in, x + idx[i] * in, in);
    }
    if (g->aug)
        rt__cpu_augment(g);
}

/* Keras' weighted loss (SUM_OVER_BATCH_SIZE): sum(w_i * l_i) / nb. Each
 * sample's loss and gradient come from the loss alone over that sample (a
 * batch of one: gradient scaled 1/rows), scaled by w_i / nb; a sample's
 * loss and gradient depend on no other sample, so this is the batch loss
 * weighted per sample, for every loss kind. Accuracy is unweighted.
 * Kept out of line: inlined, its vector loop gave every unweighted call
 * its frame (a 64-byte aligned stack, six saved registers). */
__attribute__((noinline)) static void
rt__cpu_loss_weighted(const rt__lossinfo *L, const float *y, const void *lab, int64_t nb,
                      const float *sw, float *dy, double *loss_sum, double *acc_sum, float *scratch)
{
    const int64_t on = L->out_numel, ln = L->lab_numel;
    for (int64_t i = 0; i < nb; i++) {
        double l = 0;
        float *d = dy ? dy + i * on : NULL;
        rt__loss_run(L, y + i * on, (const char *)lab + i * ln * 4, 1, d, &l, acc_sum, scratch);
        const float w = sw[i];
        *loss_sum += (double)w * l;
        if (d) {
            const float s = w / (float)nb;
            for (int64_t j = 0; j < on; j++)
                d[j] *= s;
        }
    }
}

static void rt__cpu_loss(void *ctx, const rt__lossinfo *L, const float *y, const void *lab,
                         int64_t nb, const float *sw, float *dy, double *loss_sum, double *acc_sum,
                         float *scratch)
{
    (void)ctx;
    if (sw)
        rt__cpu_loss_weighted(L, y, lab, nb, sw, dy, loss_sum, acc_sum, scratch);
    else
        rt__loss_run(L, y, lab, nb, dy, loss_sum, acc_sum, scratch);
}

static void rt__cpu_metrics(void *ctx, const rt__lossinfo *L, uint32_t metrics, const float *y,
                            const void *lab, int64_t n, rt__macc *a)
{
    (void)ctx;
    rt__metrics_update(L, metrics, y, lab, n, a);
}
/* each output's part gathered (as the loss does), then its loss without
 * gradient, accuracy and metrics as for one output */
static void rt__cpu_heads(void *ctx, const rt__lossinfo *L, const uint32_t *mets, const float *y,
                          const void *lab, int64_t n, const float *sw, rt__hacc *h, float *scratch)
{
    (void)ctx;
    const int64_t O = L->out_numel, LN = L->lab_numel;
    const float *lf = lab;
    for (int k = 0; k < L->n_heads; k++) {
        const rt__lossinfo *H = &L->head[k];
        const int64_t on = H->out_numel, ln = H->lab_numel;
        float *yk = scratch, *lk = yk + n * on, *sub = lk + n * ln;
        for (int64_t i = 0; i < n; i++) {
            memcpy(yk + i * on, y + i * O + L->out_off[k], sizeof(float) * (size_t)on);
            memcpy(lk + i * ln, lf + i * LN + L->lab_off[k], sizeof(float) * (size_t)ln);
        }
        if (!sw) {
            rt__loss_run(H, yk, lk, n, NULL, &h->loss[k], &h->acc[k], sub);
        } else {
            for (int64_t i = 0; i < n; i++) {
                double l = 0;
                rt__loss_run(H, yk + i * on, lk + i * ln, 1, NULL, &l, &h->acc[k], sub);
                h->loss[k] += (double)sw[i] * l;
            }
        }
        if (mets[k] & ~RT_METRIC_ACCURACY)
            rt__metrics_update(H, mets[k], yk, lk, n, &h->m[k]);
    }
}
static double rt__cpu_regularize(void *ctx, const rt_plan *p, const float *w, float *g)
{
    (void)ctx;
    return rt__reg_apply(p, w, g);
}
static void rt__cpu_constrain(void *ctx, const rt_plan *p, float *w)
{
    (void)ctx;
    rt__constrain(p, w);
}
static double rt__cpu_clip(void *ctx, float *g, int64_t count, float clip)
{
    (void)ctx;
    return rt__clip_by_norm(g, count, clip);
}
static void rt__cpu_update(void *ctx, const rt_train_config *c, float lr, int64_t t, float *w,
                           float *g, float *s1, float *s2, int64_t count)
{
    (void)ctx;
    rt__opt_update(c, lr, t, w, g, s1, s2, count);
}
static void rt__cpu_scale(void *ctx, float *dst, const float *src, int64_t n, float s)
{
    (void)ctx;
    for (int64_t i = 0; i < n; i++)
        dst[i] = src[i] * s;
}

/* Written once: GetInfo handlers on several threads read it while the
 * daemon's start-up line may (a buffer refilled per call was a data race). */
static char cpu_desc[48];
static pthread_once_t cpu_desc_once = PTHREAD_ONCE_INIT;
static void cpu_desc_fill(void)
{
    const dnnl_version_t *v = dnnl_version();
    snprintf(cpu_desc, sizeof cpu_desc, "cpu+onednn-%d.%d", v->major, v->minor);
}
static const char *rt__cpu_describe(void *ctx)
{
    (void)ctx;
    pthread_once(&cpu_desc_once, cpu_desc_fill);
    return cpu_desc;
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
/* Denormals flush to zero inside engine calls (FTZ and DAZ), as
 * TensorFlow does on CPUs: Adam's second moments of vanishing gradients
 * otherwise turn denormal and every operation on them costs ~100 cycles
 * (W-A ran 5x slower). The caller's mode is restored on return. */
static uint64_t rt__cpu_enter(void *ctx)
{
    (void)ctx;
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u);
    return csr;
}
static void rt__cpu_leave(void *ctx, uint64_t saved)
{
    (void)ctx;
    _mm_setcsr((unsigned)saved);
}
#else
#define rt__cpu_enter NULL
#define rt__cpu_leave NULL
#endif

const rt__backend rt__backend_cpu = {
    .name = "cpu",
    .describe = rt__cpu_describe,
    .rank = 100, /* the default where it is built */
    .context = NULL,
    .shared_scratch_floats = RT_KERN_GEMM_SCRATCH,
    .kernel = rt__cpu_kernel,
    .supports_op = rt__cpu_supports,
    .precision = rt__cpu_precision,
    .kernel_bf16 = rt__cpu_kernel_bf16,
    .bf16_io = rt__cpu_bf16_io,
    .run = rt__cpu_run,
    .alloc = rt__cpu_alloc,
    .release = rt__cpu_release,
    .upload = rt__cpu_copy,
    .download = rt__cpu_copy,
    .host = rt__cpu_host,
    .gather = rt__cpu_gather,
    .loss = rt__cpu_loss,
    .metrics = rt__cpu_metrics,
    .heads = rt__cpu_heads,
    .regularize = rt__cpu_regularize,
    .constrain = rt__cpu_constrain,
    .clip = rt__cpu_clip,
    .update = rt__cpu_update,
    .scale = rt__cpu_scale,
    .enter = rt__cpu_enter,
    .leave = rt__cpu_leave,
};
