/*
 * rt_kern_conv_dnnl.c - Conv2D through oneDNN's convolution primitives
 * (forward, backward-data, backward-weights), for the shapes where they beat
 * im2col + GEMM (rt_kern_conv2d_prepare chooses; bench/conv measures both).
 *
 * Activations stay NHWC, the engine's layout, which oneDNN's AVX-512
 * convolutions (brgconv, jit) read and write directly: no reorder of any
 * activation. Only the weights change layout: Keras' (KH,KW,C,OC) is
 * reordered into the blocked layout each primitive prefers once per call
 * (a few MB at most, against GFLOPs of convolution), and the weight
 * gradient comes back from the blocked layout in the same reorder, adding
 * into dW when the gradient accumulates. The optimizer and the checkpoint
 * keep seeing Keras' layout.
 *
 * Primitives are built once per (shape, batch) and kept in a process-wide
 * table: a plan's own batch at compile, a smaller last batch on its first
 * call. oneDNN's scratchpad is user-managed and lives in the node's
 * scratch, so a call allocates nothing; primitives are only read at
 * execution, so sessions on other threads share them.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include "cpu/rt_kern_conv.h"
#include "cpu/rt_kern_cpu.h"
#include "cpu/rt_kern_dnnl.h"

typedef rt_kern_dnnl_conv_key rt__dconv_key;

struct rt_kern_dconv {
    rt__dconv_key key;
    int ok; /* 0: oneDNN refused a descriptor; the caller uses im2col */
    dnnl_primitive_t fwd, bwd_d, bwd_w;
    dnnl_primitive_t w_fwd, w_bwd_d; /* hwio -> the primitive's layout, or NULL */
    dnnl_primitive_t dw_set, dw_add; /* diff weights -> hwio, = and += */
    dnnl_memory_desc_t src, dst, bias, hwio, wf, wd, dwd; /* wf/wd/dwd: preferred */
    dnnl_memory_desc_t sp_fwd, sp_bwd_d, sp_bwd_w, sp_rf, sp_rd, sp_ws, sp_wa;
    int64_t wbuf_floats; /* largest preferred weight tensor */
    int64_t sp_floats;   /* largest scratchpad */
};

/* Below this many multiply-adds a convolution runs on the calling thread
 * (as rt_kern_conv.c's RT__PAR_MACS): a team costs more than it saves,
 * and on a loaded machine a team member that is not scheduled stalls the
 * call for a scheduler slice. oneDNN's kernels fix their thread count
 * when the primitive is built, so such primitives are built serial, and
 * their calls run with a one-thread default too. */
#define RT__DCONV_PAR_MACS (INT64_C(1) << 24)

/* the table of built primitives; entries live as long as the process */
static rt_kern_dnnl_cache rt__dtab = RT_KERN_DNNL_CACHE_INIT;

int rt_kern_conv_impl = RT_KERN_CONV_AUTO;

static void rt__dconv_free(rt_kern_dconv *d)
{
    dnnl_primitive_t *ps[] = {&d->fwd,     &d->bwd_d,  &d->bwd_w, &d->w_fwd,
                              &d->w_bwd_d, &d->dw_set, &d->dw_add};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        if (*ps[i])
            dnnl_primitive_destroy(*ps[i]);
    free(d);
}

/* every primitive of one (shape, batch); NULL when oneDNN refuses one */
static rt_kern_dconv *rt__dconv_build(const rt__dconv_key *k)
{
    if (!rt_kern_dnnl_engine())
        return NULL;
    if (k->act != RT__ACT_NONE && k->act != RT__ACT_RELU && k->act != RT__ACT_SIGMOID &&
        k->act != RT__ACT_TANH)
        return NULL;
    rt_kern_dconv *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->key = *k;
    const int serial = k->n * k->OH * k->OW * k->OC * k->KH * k->KW * k->C < RT__DCONV_PAR_MACS;
    const int outer = serial && !omp_in_parallel() ? omp_get_max_threads() : 0;
    if (outer > 1)
        omp_set_num_threads(1);
    dnnl_dims_t wd = {k->OC, k->C, k->KH, k->KW}, bd = {k->OC};
    dnnl_memory_desc_init_by_tag(&d->hwio, 4, wd, dnnl_f32, dnnl_hwio);
    dnnl_memory_desc_init_by_tag(&d->bias, 1, bd, dnnl_f32, dnnl_x);
    static const dnnl_data_type_t f32[RT_KERN_DNNL_NDT] = {dnnl_f32, dnnl_f32, dnnl_f32,
                                                           dnnl_f32, dnnl_f32, dnnl_f32};
    dnnl_primitive_desc_t pd[3];
    int rc = -1;
    if (rt_kern_dnnl_conv_pds(k, f32, 0, pd) < 0)
        goto out;
    dnnl_primitive_desc_t fpd = pd[0], dpd = pd[1], wpd = pd[2];
    d->src = *dnnl_primitive_desc_query_md(fpd, dnnl_query_src_md, 0);
    d->dst = *dnnl_primitive_desc_query_md(fpd, dnnl_query_dst_md, 0);
    d->wf = *dnnl_primitive_desc_query_md(fpd, dnnl_query_weights_md, 0);
    d->wd = *dnnl_primitive_desc_query_md(dpd, dnnl_query_weights_md, 0);
    d->dwd = *dnnl_primitive_desc_query_md(wpd, dnnl_query_diff_weights_md, 0);
    d->sp_fwd = *dnnl_primitive_desc_query_md(fpd, dnnl_query_scratchpad_md, 0);
    d->sp_bwd_d = *dnnl_primitive_desc_query_md(dpd, dnnl_query_scratchpad_md, 0);
    d->sp_bwd_w = *dnnl_primitive_desc_query_md(wpd, dnnl_query_scratchpad_md, 0);
    if (dnnl_primitive_create(&d->fwd, fpd) != dnnl_success)
        d->fwd = NULL;
    if (dnnl_primitive_create(&d->bwd_d, dpd) != dnnl_success)
        d->bwd_d = NULL;
    if (dnnl_primitive_create(&d->bwd_w, wpd) != dnnl_success)
        d->bwd_w = NULL;
    if (!d->fwd || !d->bwd_d || !d->bwd_w)
        goto out;
    if (rt_kern_dnnl_reorder(&d->hwio, &d->wf, 0, &d->w_fwd, &d->sp_rf) < 0 ||
        rt_kern_dnnl_reorder(&d->hwio, &d->wd, 0, &d->w_bwd_d, &d->sp_rd) < 0 ||
        rt_kern_dnnl_reorder(&d->dwd, &d->hwio, 0, &d->dw_set, &d->sp_ws) < 0 ||
        rt_kern_dnnl_reorder(&d->dwd, &d->hwio, 1, &d->dw_add, &d->sp_wa) < 0)
        goto out;
    const dnnl_memory_desc_t *ws[3] = {&d->wf, &d->wd, &d->dwd};
    const dnnl_memory_desc_t *sps[7] = {&d->sp_fwd, &d->sp_bwd_d, &d->sp_bwd_w, &d->sp_rf,
                                        &d->sp_rd,  &d->sp_ws,    &d->sp_wa};
    for (int i = 0; i < 3; i++)
        if (rt_kern_dnnl_floats(ws[i]) > d->wbuf_floats)
            d->wbuf_floats = rt_kern_dnnl_floats(ws[i]);
    for (int i = 0; i < 7; i++)
        if (rt_kern_dnnl_floats(sps[i]) > d->sp_floats)
            d->sp_floats = rt_kern_dnnl_floats(sps[i]);
    d->ok = 1;
    rc = 0;
out:
    if (outer > 1)
        omp_set_num_threads(outer);
    for (int i = 0; i < 3; i++)
        if (pd[i])
            dnnl_primitive_desc_destroy(pd[i]);
    if (rc < 0) {
        rt__dconv_free(d);
        return NULL;
    }
    return d;
}

/* a built entry, or a refused one (ok = 0): refusals are remembered too */
static void *rt__dconv_make(const void *kp)
{
    rt_kern_dconv *d = rt__dconv_build(kp);
    if (!d && (d = calloc(1, sizeof *d)))
        d->key = *(const rt__dconv_key *)kp;
    return d;
}

/* the primitives of a shape at batch n: from the table, or built and added.
 * NULL only when the table is full and building failed or could not be
 * kept. */
static rt_kern_dconv *rt__dconv_get(const rt__conv_params *cv, int64_t n)
{
    const rt__dconv_key k = rt_kern_dnnl_conv_key_of(cv, n);
    return rt_kern_dnnl_cache_get(&rt__dtab, &k, sizeof k, rt__dconv_make);
}

rt_kern_dconv *rt_kern_dconv_prepare(const rt__conv_params *cv, int64_t B)
{
    rt_kern_dconv *d = rt__dconv_get(cv, B);
    return d && d->ok ? d : NULL;
}

/* scratch floats a call at the plan's batch needs: the reordered weights,
 * oneDNN's scratchpad, dz (with an activation) and a dx or db to add from */
int64_t rt_kern_dconv_scratch(const rt_kern_dconv *d, const rt__conv_params *cv, int64_t B)
{
    const int64_t in = B * cv->H * cv->W * cv->C, out = B * cv->OH * cv->OW * cv->OC;
    const int64_t tmp = in > cv->OC ? in : cv->OC;
    return d->wbuf_floats + d->sp_floats + (cv->act ? (out + 15) & ~(int64_t)15 : 0) +
           ((tmp + 15) & ~(int64_t)15);
}

/* the scratch's parts, in the order rt_kern_dconv_scratch counts them */
typedef struct {
    float *wbuf, *sp, *dz, *tmp;
} rt__dparts;

static rt__dparts rt__parts(const rt_kern_dconv *d, const rt__conv_params *cv, int64_t B, float *s)
{
    rt__dparts p;
    p.wbuf = s;
    p.sp = p.wbuf + d->wbuf_floats;
    p.dz = p.sp + d->sp_floats;
    const int64_t out = B * cv->OH * cv->OW * cv->OC;
    p.tmp = p.dz + (cv->act ? (out + 15) & ~(int64_t)15 : 0);
    return p;
}

/* a += b over n floats, threads over chunks */
static void rt__add(float *restrict a, const float *restrict b, int64_t n)
{
    const int nt = n < (INT64_C(1) << 18) ? 1 : rt_kern_conv_threads();
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < n; i++)
        a[i] += b[i];
}

/* the plan's batch and the primitives for the call's: NULL when this batch's
 * primitives could not be built or need more scratch than the plan has */
static const rt_kern_dconv *rt__for_call(const rt__kargs *a, const rt_kern_dconv *d0, int64_t B)
{
    const rt__conv_params *cv = rt__conv_cp(a->nd);
    const int64_t n = a->r->n;
    if (n == B)
        return d0;
    const rt_kern_dconv *d = rt__dconv_get(cv, n);
    if (!d || !d->ok)
        return NULL;
    if (d->wbuf_floats > d0->wbuf_floats || d->sp_floats > d0->sp_floats)
        return NULL;
    return d;
}

int rt_kern_dconv_fwd(const rt__kargs *a, const rt_kern_dconv *d0, int64_t B)
{
    const rt_kern_dconv *d = rt__for_call(a, d0, B);
    if (!d)
        return -1;
    const rt__conv_params *cv = rt__conv_cp(a->nd);
    const rt__dparts p = rt__parts(d0, cv, B, a->scratch);
    const int serial =
        a->r->n * cv->OH * cv->OW * cv->OC * cv->KH * cv->KW * cv->C < RT__DCONV_PAR_MACS;
    const float *w = a->x[1];
    if (d->w_fwd) {
        rt_kern_dnnl_reord(d->w_fwd, &d->hwio, a->x[1], &d->wf, p.wbuf, &d->sp_rf, p.sp, serial);
        w = p.wbuf;
    }
    rt_kern_dnnl_args g = {0};
    rt_kern_dnnl_arg(&g, DNNL_ARG_SRC, &d->src, a->x[0]);
    rt_kern_dnnl_arg(&g, DNNL_ARG_WEIGHTS, &d->wf, w);
    if (cv->bias)
        rt_kern_dnnl_arg(&g, DNNL_ARG_BIAS, &d->bias, a->x[2]);
    rt_kern_dnnl_arg(&g, DNNL_ARG_DST, &d->dst, a->y);
    rt_kern_dnnl_exec(d->fwd, &g, &d->sp_fwd, p.sp, serial);
    return 0;
}

int rt_kern_dconv_bwd(const rt__kargs *a, const rt_kern_dconv *d0, int64_t B)
{
    const rt_kern_dconv *d = rt__for_call(a, d0, B);
    if (!d)
        return -1;
    const rt__conv_params *cv = rt__conv_cp(a->nd);
    const rt__dparts p = rt__parts(d0, cv, B, a->scratch);
    const int64_t n = a->r->n, out = n * cv->OH * cv->OW * cv->OC;
    const int serial = out * cv->KH * cv->KW * cv->C < RT__DCONV_PAR_MACS;
    float *dx = a->dx[0], *dw = a->dx[1], *db = cv->bias ? a->dx[2] : NULL;
    const float *dz = a->dy;
    if (cv->act) { /* dz = dy * act'(y), threads over chunks */
        const int nt = out < (INT64_C(1) << 18) ? 1 : rt_kern_conv_threads();
        const int64_t cs = (out + nt - 1) / nt;
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int t = 0; t < nt; t++) {
            const int64_t i0 = cs * t, m = out - i0 < cs ? out - i0 : cs;
            if (m > 0)
                rt_kern_act_bwd(cv->act, p.dz + i0, a->dy + i0, a->y + i0, m);
        }
        dz = p.dz;
    }
    if (dw || db) {
        /* dW in the primitive's layout into wbuf, db into db or tmp */
        const int dbadd = db && (a->accum & 4u);
        /* straight into dW only when it is overwritten and already in
         * Keras' layout; db alone still has the primitive write a dW */
        float *dwb = dw && !(a->accum & 2u) && !d->dw_set ? dw : p.wbuf;
        rt_kern_dnnl_args g = {0};
        rt_kern_dnnl_arg(&g, DNNL_ARG_SRC, &d->src, a->x[0]);
        rt_kern_dnnl_arg(&g, DNNL_ARG_DIFF_DST, &d->dst, dz);
        rt_kern_dnnl_arg(&g, DNNL_ARG_DIFF_WEIGHTS, &d->dwd, dwb);
        if (cv->bias)
            rt_kern_dnnl_arg(&g, DNNL_ARG_DIFF_BIAS, &d->bias, db && !dbadd ? db : p.tmp);
        rt_kern_dnnl_exec(d->bwd_w, &g, &d->sp_bwd_w, p.sp, serial);
        if (dw && (a->accum & 2u))
            rt_kern_dnnl_reord(d->dw_add, &d->dwd, dwb, &d->hwio, dw, &d->sp_wa, p.sp, serial);
        else if (dw && d->dw_set)
            rt_kern_dnnl_reord(d->dw_set, &d->dwd, dwb, &d->hwio, dw, &d->sp_ws, p.sp, serial);
        if (dbadd)
            rt__add(db, p.tmp, cv->OC);
    }
    if (dx) {
        const float *w = a->x[1];
        if (d->w_bwd_d) {
            rt_kern_dnnl_reord(d->w_bwd_d, &d->hwio, a->x[1], &d->wd, p.wbuf, &d->sp_rd, p.sp,
                               serial);
            w = p.wbuf;
        }
        const int add = (a->accum & 1u) != 0;
        rt_kern_dnnl_args g = {0};
        rt_kern_dnnl_arg(&g, DNNL_ARG_DIFF_DST, &d->dst, dz);
        rt_kern_dnnl_arg(&g, DNNL_ARG_WEIGHTS, &d->wd, w);
        rt_kern_dnnl_arg(&g, DNNL_ARG_DIFF_SRC, &d->src, add ? p.tmp : dx);
        rt_kern_dnnl_exec(d->bwd_d, &g, &d->sp_bwd_d, p.sp, serial);
        if (add)
            rt__add(dx, p.tmp, n * cv->H * cv->W * cv->C);
    }
    return 0;
}
