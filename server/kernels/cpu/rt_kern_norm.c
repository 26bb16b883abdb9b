/*
 * rt_kern_norm.c - BatchNorm over the last axis (channels, NHWC) and
 * Concat.
 *
 * BatchNorm follows Keras: training mode normalises with the batch's mean
 * and biased variance and, in a training step (run.update_stats; not in
 * rt_exec_compute_grads), moves moving_mean/moving_var towards them
 * (moving = momentum * moving + (1 - momentum) * batch); inference mode,
 * and a frozen layer (trainable=False) always, uses the moving statistics.
 * Per-channel sums are accumulated in double: a channel of a large batch
 * sums hundreds of thousands of values. A training forward keeps the
 * batch's row count, mean and variance in the node's workspace (which
 * lives from its forward call to its backward call), and the backward
 * reads them there: the same bits it would compute again from the same
 * x, without two more passes over x.
 *
 * Synchronised (MPI replicas, rt__run.bn_sum; the node's synchronized attr
 * or the config's sync_bn): the per-channel sums of the forward's two
 * statistics passes are summed over the replicas, so every replica
 * normalises (and its backward differentiates) with the
 * global batch's mean and variance; in the backward pass the sums of dy
 * and dy (x - mean), scaled by the replica's share of the batch (the
 * replica's gradients are of its own rows' mean loss), are summed too.
 * The gamma and beta gradients stay the replica's own: the reduce that
 * follows sums them.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <omp.h>

#include "cpu/rt_kern_bf16.h"
#include "cpu/rt_kern_conv.h"
#include "cpu/rt_kern_cpu.h"

/* Smaller tensors run on one thread (a parallel region's cost dominates) */
#define RT__PAR_ELEMS (INT64_C(1) << 18)

/* Row range of thread t of T over R rows */
#define RT__RANGE(R, t, T, r0, r1) const int64_t r0 = (R) * (t) / (T), r1 = (R) * ((t) + 1) / (T)

/* v[0..n) summed over the replicas; after a failure the step's later sums
 * are skipped (the step fails) */
static void rt__bn_allsum(const rt__run *r, double *v, int n)
{
    if (r->bn_err[0])
        return;
    if (r->bn_sum(r->bn_ctx, v, n, r->bn_err, r->bn_errlen) < 0 && !r->bn_err[0])
        snprintf(r->bn_err, r->bn_errlen, "synchronised BatchNorm: the replicas' sum failed");
}

static inline int rt__bn_synced(const rt__kargs *a)
{
    return a->r->bn_sum && (rt__bn_cp(a->nd)->sync || a->r->bn_sync_all);
}

/* mean[c] and biased var[c] over R rows of x (R, C), two passes; each
 * thread sums its block of rows into part (nt x C doubles), and the
 * blocks are added in thread order (same thread count, same bits).
 * sync: over every replica's rows (var must follow mean: mean[C] holds
 * the row count while it is summed). Returns the row count. */
static double rt__bn_stats(const float *x, int bx, float *rows, int64_t R, int64_t C, int nt,
                           double *part, double *mean, double *var, const rt__run *sync)
{
    int team = 1;
#pragma omp parallel num_threads(nt) if (R * C >= RT__PAR_ELEMS)
    {
        const int T = omp_get_num_threads(), t = omp_get_thread_num();
        if (t == 0)
            team = T;
        double *restrict s = part + (int64_t)t * C;
        RT__RANGE(R, t, T, r0, r1);
        for (int64_t c = 0; c < C; c++)
            s[c] = 0.0;
        if (bx) {
            /* widened as read (a call a row costs more than the row
             * where C is small) */
            for (int64_t r = r0; r < r1; r++) {
                const uint16_t *restrict v = (const uint16_t *)x + r * C;
                for (int64_t c = 0; c < C; c++)
                    s[c] += rt_kern_bf16_widen(v[c]);
            }
        } else {
            for (int64_t r = r0; r < r1; r++) {
                const float *restrict v = rt_kern_bf16_ld(x, bx, r * C, C, rows + 2 * t * C);
                for (int64_t c = 0; c < C; c++)
                    s[c] += v[c];
            }
        }
    }
    double Rg = (double)R;
    for (int64_t c = 0; c < C; c++) {
        double m = 0.0;
        for (int t = 0; t < team; t++)
            m += part[(int64_t)t * C + c];
        mean[c] = m;
    }
    if (sync) {
        mean[C] = Rg; /* var[0] */
        rt__bn_allsum(sync, mean, (int)C + 1);
        Rg = mean[C];
    }
    for (int64_t c = 0; c < C; c++)
        mean[c] /= Rg;
#pragma omp parallel num_threads(nt) if (R * C >= RT__PAR_ELEMS)
    {
        const int T = omp_get_num_threads(), t = omp_get_thread_num();
        double *restrict s = part + (int64_t)t * C;
        RT__RANGE(R, t, T, r0, r1);
        for (int64_t c = 0; c < C; c++)
            s[c] = 0.0;
        if (bx) {
            for (int64_t r = r0; r < r1; r++) {
                const uint16_t *restrict v = (const uint16_t *)x + r * C;
                for (int64_t c = 0; c < C; c++) {
                    const double d = (double)rt_kern_bf16_widen(v[c]) - mean[c];
                    s[c] += d * d;
                }
            }
        } else {
            for (int64_t r = r0; r < r1; r++) {
                const float *restrict v = rt_kern_bf16_ld(x, bx, r * C, C, rows + 2 * t * C);
                for (int64_t c = 0; c < C; c++) {
                    const double d = (double)v[c] - mean[c];
                    s[c] += d * d;
                }
            }
        }
    }
    for (int64_t c = 0; c < C; c++) {
        double v = 0.0;
        for (int t = 0; t < team; t++)
            v += part[(int64_t)t * C + c];
        var[c] = v;
    }
    if (sync)
        rt__bn_allsum(sync, var, (int)C);
    for (int64_t c = 0; c < C; c++)
        var[c] /= Rg;
    return Rg;
}

static inline int rt__bn_batch_mode(const rt__kargs *a)
{
    return a->r->training && !rt__bn_cp(a->nd)->frozen;
}

/* per-thread partial sums (2 doubles per channel each), 4 doubles (mean,
 * var/inv, sums) and 3 floats per channel */
int rt_kern_batchnorm_prepare(rt__node *nd, int64_t B, rt__arena *A)
{
    int *nt = rt__arena_alloc(A, sizeof *nt);
    if (!nt)
        return RT_ENOMEM;
    *nt = rt_kern_conv_threads();
    const int64_t C = rt__bn_cp(nd)->C;
    nd->kdata = nt;
    nd->scratch_floats = 4 * C * *nt + 8 * C + 3 * C + 16;
    /* the forward's batch statistics for the backward: the row count,
     * then mean and var (C doubles each) */
    nd->ws_floats = 2 + 4 * C + 2;
    /* bf16 storage (rt_kern_bf16act.c) or a fused clip's forward: a row
     * of x and of y a thread; a fused activation's backward: a row of its
     * dx (2 rows a thread after those: the x and y rows' stride) */
    if (nd->bf16_in || nd->bf16_out || nd->fused)
        nd->scratch_floats += 2 * C * *nt;
    if (nd->fused)
        nd->scratch_floats += 2 * C * *nt;
    return 0;
}

/* scratch: part (2 nt C doubles), mean, var, sdy, sdyx (C doubles each),
 * then 3 C floats, then with bf16 storage two rows of C floats a thread
 * (at f + 3 C) */
#define RT__BN_SCRATCH(a, C, nt, part, mean, var, sdy, sdyx, f)                              \
    double *part = (double *)(a)->scratch, *mean = part + 2 * (nt) * (C), *var = mean + (C), \
           *sdy = var + (C), *sdyx = sdy + (C);                                              \
    float *f = (float *)(sdyx + (C))

/* The activation fused into a BatchNorm (the bf16 table's BatchNorm +
 * Relu, + Clip and + KerasRelu): RT__BN_RELU, or RT__BN_CLIP, a clip to
 * [lo, hi] (Clip(min, max); Keras' ReLU(max_value) without a slope or
 * threshold: [0, max_value]) computed by the unfused op's own map
 * (rt_kern_unary_map), whose gradient, dy where lo < x < hi, is read off
 * y: lo < y < hi exactly there (lo < hi, both bf16 values where y is
 * stored bf16: rt_kern_bn_can_fuse_clip). */
enum { RT__BN_NONE, RT__BN_RELU, RT__BN_CLIP };
static inline int rt__bn_act(const rt__node *nd, float *lo, float *hi)
{
    if (nd->fused == &rt__op_relu)
        return RT__BN_RELU;
    if (nd->fused != &rt__op_clip && nd->fused != &rt__op_kerasrelu)
        return RT__BN_NONE;
    const rt__unary_params *u = &nd->fused_p->unary;
    *lo = u->kind == RT__U_CLIP ? u->alpha : 0.0f;
    *hi = u->kind == RT__U_CLIP ? u->beta : u->gamma;
    return RT__BN_CLIP;
}

/* a bound a bf16 y holds exactly (infinite: none) */
static int rt__bn_bf16_exact(float v)
{
    return isinf(v) || rt_kern_bf16_widen(rt_kern_bf16_round(v)) == v;
}

int rt_kern_bn_can_fuse_clip(const rt__node *nd, const rt__node *reader)
{
    (void)nd;
    const rt__unary_params *u = rt__unary_cp(reader);
    float lo, hi;
    if (u->kind == RT__U_CLIP)
        lo = u->alpha, hi = u->beta;
    else if (u->kind == RT__U_KRELU && u->alpha == 0.0f && u->beta == 0.0f)
        lo = 0.0f, hi = u->gamma;
    else
        return 0;
    return lo < hi && rt__bn_bf16_exact(lo) && rt__bn_bf16_exact(hi);
}

/* y = gamma (x - mean) / sqrt(var + eps) + beta, x and y (R, C), each
 * float32 or stored bf16 (nd->bf16_in, bf16_out): the statistics and y
 * are computed in float32 / double either way. With a Relu fused (the
 * bf16 table's BatchNorm + Relu) y = max(y, 0) in the same pass, with a
 * clip its map on the row. */
void rt_kern_batchnorm_fwd(const rt__kargs *a)
{
    const rt__node *nd = a->nd;
    const int64_t C = rt__bn_cp(nd)->C;
    const int nt = *(const int *)nd->kdata;
    const int64_t R = rt__rows(nd->in_shape[0], a->r->n);
    const double mom = rt__bn_cp(nd)->momentum, eps = rt__bn_cp(nd)->eps;
    const float *gamma = a->x[1], *beta = a->x[2];
    float *mm = a->x[3], *mv = a->x[4];
    RT__BN_SCRATCH(a, C, nt, part, mean, var, sdy, sdyx, f);
    (void)sdy;
    (void)sdyx;
    float *scale = f, *shift = f + C, *rows = f + 3 * C;
    const int bx = (nd->bf16_in & 1u) != 0, by = nd->bf16_out;
    float lo = 0.0f, hi = 0.0f;
    const int act = rt__bn_act(nd, &lo, &hi);
    if (rt__bn_batch_mode(a)) {
        const double Rg = rt__bn_stats(a->x[0], bx, rows, R, C, nt, part, mean, var,
                                       rt__bn_synced(a) ? a->r : NULL);
        double *ws = (double *)a->ws;
        ws[0] = Rg;
        memcpy(ws + 2, mean, sizeof(double) * (size_t)C);
        memcpy(ws + 2 + C, var, sizeof(double) * (size_t)C);
        /* PyTorch moves the variance towards the unbiased estimate */
        const double vs = rt__bn_cp(nd)->unbiased && Rg > 1 ? Rg / (Rg - 1) : 1.0;
        for (int64_t c = 0; c < C && a->r->update_stats; c++) {
            mm[c] = (float)(mom * mm[c] + (1.0 - mom) * mean[c]);
            mv[c] = (float)(mom * mv[c] + (1.0 - mom) * var[c] * vs);
        }
    } else {
        for (int64_t c = 0; c < C; c++) {
            mean[c] = mm[c];
            var[c] = mv[c];
        }
    }
    for (int64_t c = 0; c < C; c++) {
        const double s = (double)gamma[c] / sqrt(var[c] + eps);
        scale[c] = (float)s;
        shift[c] = (float)((double)beta[c] - mean[c] * s);
    }
    const float *x = a->x[0];
    float *y = a->y;
#pragma omp parallel for num_threads(nt) schedule(static) if (R * C >= RT__PAR_ELEMS)
    for (int64_t r = 0; r < R; r++) {
        float *tx = rows + 2 * omp_get_thread_num() * C, *ty = tx + C;
        const float *restrict v = rt_kern_bf16_ld(x, bx, r * C, C, tx);
        float *restrict o = by || act == RT__BN_CLIP ? ty : y + r * C;
        for (int64_t c = 0; c < C; c++)
            o[c] = v[c] * scale[c] + shift[c];
        if (act == RT__BN_RELU)
            rt_kern_act_fwd(RT__ACT_RELU, o, C);
        float *w = o;             /* the row to store */
        if (act == RT__BN_CLIP) { /* ty into tx (x's row is read) or y */
            w = by ? tx : y + r * C;
            rt_kern_unary_map(&nd->fused_p->unary, w, ty, C);
        }
        if (by)
            rt_kern_to_bf16_serial((uint16_t *)y + r * C, w, C);
    }
}

/* With xh = (x - mean) * inv, inv = 1/sqrt(var + eps):
 *   dbeta = sum dy, dgamma = sum dy * xh,
 *   batch mode:     dx = gamma inv (dy - dbeta/R - xh dgamma/R)
 *   inference mode: dx = gamma inv dy (the statistics are constants)
 * With an activation fused, dy there is its dx: with a Relu dy where
 * y > 0, else 0; with a clip dy * (lo < y < hi ? 1 : 0), the unfused
 * op's expression (y the fused output, widened a row at a time where
 * stored bf16), computed in the sums pass into dx's rows where dx is
 * overwritten, and read back from there by the dx pass. */

/* the fused activation's gradient mask on dy (d) at output value y */
#define RT__BN_RELU_D(y, d) ((y) > 0.0f ? (d) : 0.0f)
#define RT__BN_CLIP_D(y, d) ((d) * ((y) > lo && (y) < hi ? 1.0f : 0.0f))

/* row r of dy, through the fused activation's mask where there is one
 * (into dz: C floats) */
static inline const float *rt__bn_dy(const rt__kargs *a, int act, float lo, float hi, int by,
                                     int64_t r, int64_t C, float *ty, float *dz)
{
    const float *d = a->dy + r * C;
    if (act == RT__BN_NONE)
        return d;
    const float *restrict y = rt_kern_bf16_ld(a->y, by, r * C, C, ty);
    if (act == RT__BN_RELU)
        for (int64_t c = 0; c < C; c++)
            dz[c] = RT__BN_RELU_D(y[c], d[c]);
    else
        for (int64_t c = 0; c < C; c++)
            dz[c] = RT__BN_CLIP_D(y[c], d[c]);
    return dz;
}

/* rows r0..r1 of the sums pass with x and y stored bf16 and an activation
 * fused: x and y widened as the one loop reads them (the same sums, in
 * the same order), the masked dy into dx's rows where kept, else into
 * the thread's row tz */
#define RT__BN_SUMS_BF16(MASK)                                                                  \
    for (int64_t r = r0; r < r1; r++) {                                                         \
        const uint16_t *restrict xv = (const uint16_t *)x + r * C, *restrict yv =               \
                                                                       (const uint16_t *)a->y + \
                                                                       r * C;                   \
        const float *restrict dr = a->dy + r * C;                                               \
        float *restrict kz = keep ? a->dx[0] + r * C : tz;                                      \
        for (int64_t c = 0; c < C; c++) {                                                       \
            const float d = MASK(rt_kern_bf16_widen(yv[c]), dr[c]);                             \
            kz[c] = d;                                                                          \
            s1[c] += d;                                                                         \
            s2[c] += (double)d * ((double)rt_kern_bf16_widen(xv[c]) - mean[c]);                 \
        }                                                                                       \
    }

void rt_kern_batchnorm_bwd(const rt__kargs *a)
{
    const rt__node *nd = a->nd;
    const int64_t C = rt__bn_cp(nd)->C;
    const int nt = *(const int *)nd->kdata;
    const int64_t R = rt__rows(nd->in_shape[0], a->r->n);
    const double eps = rt__bn_cp(nd)->eps;
    const int batch = rt__bn_batch_mode(a);
    const float *x = a->x[0], *gamma = a->x[1];
    RT__BN_SCRATCH(a, C, nt, part, mean, var, sdy, sdyx, k);
    float *rows = k + 3 * C;
    const int bx = (nd->bf16_in & 1u) != 0, by = nd->bf16_out;
    float lo = 0.0f, hi = 0.0f;
    const int act = rt__bn_act(nd, &lo, &hi);
    const int keep = act != RT__BN_NONE && a->dx[0] && !(a->accum & 1u);
    const int sync = batch && rt__bn_synced(a);
    double Rg = (double)R;
    if (batch) { /* the forward's (rt_kern_batchnorm_fwd) */
        const double *ws = (const double *)a->ws;
        Rg = ws[0];
        memcpy(mean, ws + 2, sizeof(double) * (size_t)C);
        memcpy(var, ws + 2 + C, sizeof(double) * (size_t)C);
    } else {
        for (int64_t c = 0; c < C; c++) {
            mean[c] = a->x[3][c];
            var[c] = a->x[4][c];
        }
    }
    /* var becomes inv from here on */
    for (int64_t c = 0; c < C; c++)
        var[c] = 1.0 / sqrt(var[c] + eps);
    const double *inv = var;
    int team = 1;
#pragma omp parallel num_threads(nt) if (R * C >= RT__PAR_ELEMS)
    {
        const int T = omp_get_num_threads(), t = omp_get_thread_num();
        if (t == 0)
            team = T;
        double *restrict s1 = part + (int64_t)t * 2 * C, *restrict s2 = s1 + C;
        RT__RANGE(R, t, T, r0, r1);
        for (int64_t c = 0; c < C; c++)
            s1[c] = s2[c] = 0.0;
        float *tr = rows + 2 * t * C, *tz = rows + (2 * (int64_t)nt + 2 * t) * C;
        /* x and y stored bf16 with an activation fused */
        if (bx && by && act == RT__BN_RELU) {
            RT__BN_SUMS_BF16(RT__BN_RELU_D)
        } else if (bx && by && act == RT__BN_CLIP) {
            RT__BN_SUMS_BF16(RT__BN_CLIP_D)
        } else {
            for (int64_t r = r0; r < r1; r++) {
                /* the masked dy kept in dx's row for the dx pass */
                const float *restrict v = rt_kern_bf16_ld(x, bx, r * C, C, tr),
                                      *restrict d = rt__bn_dy(a, act, lo, hi, by, r, C, tr + C,
                                                              keep ? a->dx[0] + r * C : tz);
                for (int64_t c = 0; c < C; c++) {
                    s1[c] += d[c];
                    s2[c] += (double)d[c] * ((double)v[c] - mean[c]);
                }
            }
        }
    }
    for (int64_t c = 0; c < C; c++) {
        double u = 0.0, v = 0.0;
        for (int t = 0; t < team; t++) {
            u += part[(int64_t)t * 2 * C + c];
            v += part[(int64_t)t * 2 * C + C + c];
        }
        sdy[c] = u;
        sdyx[c] = v;
    }
    if (a->dx[1]) {
        float *dg = a->dx[1];
        const int add = (a->accum & 2u) != 0;
        for (int64_t c = 0; c < C; c++) {
            const float g = (float)(sdyx[c] * inv[c]);
            dg[c] = add ? dg[c] + g : g;
        }
    }
    if (a->dx[2]) {
        float *dbt = a->dx[2];
        const int add = (a->accum & 4u) != 0;
        for (int64_t c = 0; c < C; c++)
            dbt[c] = add ? dbt[c] + (float)sdy[c] : (float)sdy[c];
    }
    /* sync: every replica sums, whether or not it needs dx */
    double den = Rg;
    if (sync) {
        const double s = a->r->bn_share;
        for (int64_t c = 0; c < C; c++) {
            sdy[c] *= s;
            sdyx[c] *= s;
        }
        rt__bn_allsum(a->r, sdy, 2 * (int)C); /* sdy, sdyx */
        den = s * Rg;
    }
    if (!a->dx[0])
        return;
    /* dx = k1 dy + k2 x + k0 per channel, in float for the row loop */
    float *k1 = k, *k2 = k + C, *k0 = k + 2 * C;
    for (int64_t c = 0; c < C; c++) {
        const double gi = (double)gamma[c] * inv[c];
        if (batch) {
            const double m1 = sdy[c] / den;
            const double m2 = sdyx[c] * inv[c] * inv[c] / den;
            /* gi (dy - m1 - (x - mean) m2) */
            k1[c] = (float)gi;
            k2[c] = (float)(-gi * m2);
            k0[c] = (float)(gi * (-m1 + mean[c] * m2));
        } else {
            k1[c] = (float)gi;
            k2[c] = 0.0f;
            k0[c] = 0.0f;
        }
    }
    float *dx = a->dx[0];
    const int add = (a->accum & 1u) != 0;
#pragma omp parallel for num_threads(nt) schedule(static) if (R * C >= RT__PAR_ELEMS)
    for (int64_t r = 0; r < R; r++) {
        const int t = omp_get_thread_num();
        float *tr = rows + 2 * t * C, *tz = rows + (2 * (int64_t)nt + 2 * t) * C;
        if (keep && bx) { /* the same, x widened as read */
            const uint16_t *restrict xv = (const uint16_t *)x + r * C;
            float *restrict o = dx + r * C;
            for (int64_t c = 0; c < C; c++)
                o[c] = k1[c] * o[c] + k2[c] * rt_kern_bf16_widen(xv[c]) + k0[c];
            continue;
        }
        const float *restrict v = rt_kern_bf16_ld(x, bx, r * C, C, tr);
        if (keep) { /* dx's row holds the masked dy: in place */
            float *o = dx + r * C;
            for (int64_t c = 0; c < C; c++)
                o[c] = k1[c] * o[c] + k2[c] * v[c] + k0[c];
            continue;
        }
        const float *restrict d = rt__bn_dy(a, act, lo, hi, by, r, C, tr + C, tz);
        float *restrict o = dx + r * C;
        if (add)
            for (int64_t c = 0; c < C; c++)
                o[c] += k1[c] * d[c] + k2[c] * v[c] + k0[c];
        else
            for (int64_t c = 0; c < C; c++)
                o[c] = k1[c] * d[c] + k2[c] * v[c] + k0[c];
    }
}

/* ---------------------------------------------------------------- concat */

/* y (rows, inner) = [x0 (rows, inner0) | x1 (rows, inner1) | ...] */
void rt_kern_concat_fwd(const rt__kargs *a)
{
    const rt__concat_params *p = rt__concat_cp(a->nd);
    const int64_t k = p->k, rows = a->r->n * p->outer, inner = p->inner;
    int64_t off = 0;
    for (int64_t i = 0; i < k; i++) {
        const int64_t w = p->in_inner[i];
        const float *x = a->x[i];
#pragma omp parallel for schedule(static) if (rows * w >= RT__PAR_ELEMS)
        for (int64_t r = 0; r < rows; r++)
            memcpy(a->y + r * inner + off, x + r * w, sizeof(float) * (size_t)w);
        off += w;
    }
}

void rt_kern_concat_bwd(const rt__kargs *a)
{
    const rt__concat_params *p = rt__concat_cp(a->nd);
    const int64_t k = p->k, rows = a->r->n * p->outer, inner = p->inner;
    int64_t off = 0;
    for (int64_t i = 0; i < k; i++) {
        const int64_t w = p->in_inner[i];
        float *dx = a->dx[i];
        if (dx) {
            const int add = (a->accum >> i) & 1u;
#pragma omp parallel for schedule(static) if (rows * w >= RT__PAR_ELEMS)
            for (int64_t r = 0; r < rows; r++) {
                const float *restrict d = a->dy + r * inner + off;
                float *restrict o = dx + r * w;
                if (add)
                    for (int64_t j = 0; j < w; j++)
                        o[j] += d[j];
                else
                    memcpy(o, d, sizeof(float) * (size_t)w);
            }
        }
        off += w;
    }
}
