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

typedef struct rt__dconv_key {
    int64_t n, H, W, C, OH, OW, OC, KH, KW, SH, SW, DH, DW, PT, PL;
    int64_t bias, act;
} rt__dconv_key;

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
#define RT__DCONV_MAX 256
static rt_kern_dconv *rt__dtab[RT__DCONV_MAX];
static int rt__dtab_n;
static pthread_mutex_t rt__dtab_mu = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t rt__deng;
static pthread_once_t rt__deng_once = PTHREAD_ONCE_INIT;

int rt_kern_conv_impl = RT_KERN_CONV_AUTO;

static void rt__deng_init(void)
{
    if (dnnl_engine_create(&rt__deng, dnnl_cpu, 0) != dnnl_success)
        rt__deng = NULL;
}

static rt__dconv_key rt__key(const rt__conv_params *cv, int64_t n)
{
    rt__dconv_key k;
    memset(&k, 0, sizeof k); /* compared with memcmp */
    k.n = n;
    k.H = cv->H, k.W = cv->W, k.C = cv->C, k.OH = cv->OH, k.OW = cv->OW, k.OC = cv->OC;
    k.KH = cv->KH, k.KW = cv->KW, k.SH = cv->SH, k.SW = cv->SW, k.DH = cv->DH, k.DW = cv->DW;
    k.PT = cv->PT, k.PL = cv->PL, k.bias = cv->bias, k.act = cv->act;
    return k;
}

static int64_t rt__floats(const dnnl_memory_desc_t *md)
{
    return (int64_t)((dnnl_memory_desc_get_size(md) + 63) / 64 * 16);
}

/* a primitive from its descriptor, user scratchpad, optional post-ops;
 * its preferred memory descriptors are read by the caller from *pd */
static int rt__pd(const void *desc, const_dnnl_post_ops_t po, const_dnnl_primitive_desc_t hint,
                  dnnl_primitive_desc_t *pd)
{
    dnnl_primitive_attr_t at;
    if (dnnl_primitive_attr_create(&at) != dnnl_success)
        return -1;
    dnnl_primitive_attr_set_scratchpad_mode(at, dnnl_scratchpad_mode_user);
    if (po)
        dnnl_primitive_attr_set_post_ops(at, po);
    const dnnl_status_t st = dnnl_primitive_desc_create(pd, desc, at, rt__deng, hint);
    dnnl_primitive_attr_destroy(at);
    return st == dnnl_success ? 0 : -1;
}

/* a reorder src -> dst (dst += reordered src when sum); NULL when the
 * layouts are the same and no sum is asked */
static int rt__reorder(const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst, int sum,
                       dnnl_primitive_t *p, dnnl_memory_desc_t *sp)
{
    *p = NULL;
    memset(sp, 0, sizeof *sp);
    if (!sum && dnnl_memory_desc_equal(src, dst))
        return 0;
    dnnl_primitive_attr_t at;
    if (dnnl_primitive_attr_create(&at) != dnnl_success)
        return -1;
    dnnl_primitive_attr_set_scratchpad_mode(at, dnnl_scratchpad_mode_user);
    dnnl_post_ops_t po = NULL;
    if (sum) {
        dnnl_post_ops_create(&po);
        dnnl_post_ops_append_sum(po, 1.0f);
        dnnl_primitive_attr_set_post_ops(at, po);
    }
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_reorder_primitive_desc_create(&pd, src, rt__deng, dst, rt__deng, at);
    dnnl_primitive_attr_destroy(at);
    if (po)
        dnnl_post_ops_destroy(po);
    if (st != dnnl_success)
        return -1;
    *sp = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    st = dnnl_primitive_create(p, pd);
    dnnl_primitive_desc_destroy(pd);
    return st == dnnl_success ? 0 : -1;
}

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
    pthread_once(&rt__deng_once, rt__deng_init);
    if (!rt__deng)
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
    /* oneDNN's right padding makes its output size formula land on ours;
     * a 'valid' window that leaves input columns unread needs none */
    const int64_t rb = (k->OH - 1) * k->SH + (k->KH - 1) * k->DH + 1 - k->H - k->PT;
    const int64_t rr = (k->OW - 1) * k->SW + (k->KW - 1) * k->DW + 1 - k->W - k->PL;
    dnnl_dims_t sd = {k->n, k->C, k->H, k->W}, dd = {k->n, k->OC, k->OH, k->OW};
    dnnl_dims_t wd = {k->OC, k->C, k->KH, k->KW}, bd = {k->OC};
    dnnl_dims_t str = {k->SH, k->SW}, dil = {k->DH - 1, k->DW - 1};
    dnnl_dims_t pl = {k->PT, k->PL}, pr = {rb > 0 ? rb : 0, rr > 0 ? rr : 0};
    dnnl_memory_desc_t wany, bias;
    dnnl_memory_desc_init_by_tag(&d->src, 4, sd, dnnl_f32, dnnl_nhwc);
    dnnl_memory_desc_init_by_tag(&d->dst, 4, dd, dnnl_f32, dnnl_nhwc);
    dnnl_memory_desc_init_by_tag(&d->hwio, 4, wd, dnnl_f32, dnnl_hwio);
    dnnl_memory_desc_init_by_tag(&wany, 4, wd, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&bias, 1, bd, dnnl_f32, dnnl_x);
    d->bias = bias;
    const dnnl_memory_desc_t *bp = k->bias ? &bias : NULL;
    dnnl_convolution_desc_t fdesc, ddesc, wdesc;
    dnnl_primitive_desc_t fpd = NULL, dpd = NULL, wpd = NULL;
    dnnl_post_ops_t po = NULL;
    if (k->act != RT__ACT_NONE) {
        dnnl_post_ops_create(&po);
        dnnl_post_ops_append_eltwise(po, 1.0f,
                                     k->act == RT__ACT_RELU      ? dnnl_eltwise_relu
                                     : k->act == RT__ACT_SIGMOID ? dnnl_eltwise_logistic
                                                                 : dnnl_eltwise_tanh,
                                     0.0f, 0.0f);
    }
    int rc = -1;
    if (dnnl_dilated_convolution_forward_desc_init(&fdesc, dnnl_forward_training,
                                                   dnnl_convolution_direct, &d->src, &wany, bp,
                                                   &d->dst, str, dil, pl, pr) != dnnl_success ||
        rt__pd(&fdesc, po, NULL, &fpd) < 0)
        goto out;
    if (dnnl_dilated_convolution_backward_data_desc_init(&ddesc, dnnl_convolution_direct, &d->src,
                                                         &wany, &d->dst, str, dil, pl,
                                                         pr) != dnnl_success ||
        rt__pd(&ddesc, NULL, fpd, &dpd) < 0)
        goto out;
    if (dnnl_dilated_convolution_backward_weights_desc_init(&wdesc, dnnl_convolution_direct,
                                                            &d->src, &wany, bp, &d->dst, str, dil,
                                                            pl, pr) != dnnl_success ||
        rt__pd(&wdesc, NULL, fpd, &wpd) < 0)
        goto out;
    /* NHWC in and out as asked: a primitive that wanted its own activation
     * layout would have been refused above (format tags were fixed) */
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
    if (rt__reorder(&d->hwio, &d->wf, 0, &d->w_fwd, &d->sp_rf) < 0 ||
        rt__reorder(&d->hwio, &d->wd, 0, &d->w_bwd_d, &d->sp_rd) < 0 ||
        rt__reorder(&d->dwd, &d->hwio, 0, &d->dw_set, &d->sp_ws) < 0 ||
        rt__reorder(&d->dwd, &d->hwio, 1, &d->dw_add, &d->sp_wa) < 0)
        goto out;
    const dnnl_memory_desc_t *ws[3] = {&d->wf, &d->wd, &d->dwd};
    const dnnl_memory_desc_t *sps[7] = {&d->sp_fwd, &d->sp_bwd_d, &d->sp_bwd_w, &d->sp_rf,
                                        &d->sp_rd,  &d->sp_ws,    &d->sp_wa};
    for (int i = 0; i < 3; i++)
        if (rt__floats(ws[i]) > d->wbuf_floats)
            d->wbuf_floats = rt__floats(ws[i]);
    for (int i = 0; i < 7; i++)
        if (rt__floats(sps[i]) > d->sp_floats)
            d->sp_floats = rt__floats(sps[i]);
    d->ok = 1;
    rc = 0;
out:
    if (outer > 1)
        omp_set_num_threads(outer);
    if (po)
        dnnl_post_ops_destroy(po);
    if (fpd)
        dnnl_primitive_desc_destroy(fpd);
    if (dpd)
        dnnl_primitive_desc_destroy(dpd);
    if (wpd)
        dnnl_primitive_desc_destroy(wpd);
    if (rc < 0) {
        rt__dconv_free(d);
        return NULL;
    }
    return d;
}

/* the primitives of a shape at batch n: from the table, or built and added.
 * A refused shape is remembered too (ok = 0). NULL only when the table is
 * full and building failed or could not be kept. */
static rt_kern_dconv *rt__dconv_get(const rt__conv_params *cv, int64_t n)
{
    const rt__dconv_key k = rt__key(cv, n);
    rt_kern_dconv *d = NULL;
    pthread_mutex_lock(&rt__dtab_mu);
    for (int i = 0; i < rt__dtab_n; i++)
        if (!memcmp(&rt__dtab[i]->key, &k, sizeof k)) {
            d = rt__dtab[i];
            break;
        }
    if (!d && rt__dtab_n < RT__DCONV_MAX) {
        d = rt__dconv_build(&k);
        if (!d)
            d = calloc(1, sizeof *d); /* refused: ok = 0 */
        if (d) {
            d->key = k;
            rt__dtab[rt__dtab_n++] = d;
        }
    }
    pthread_mutex_unlock(&rt__dtab_mu);
    return d;
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

typedef struct {
    int n;
    dnnl_exec_arg_t a[6];
    dnnl_memory_t m[6];
} rt__dargs;

static void rt__arg(rt__dargs *g, int arg, const dnnl_memory_desc_t *md, const void *ptr)
{
    dnnl_memory_t m;
    dnnl_status_t st = dnnl_memory_create(&m, md, rt__deng, (void *)ptr);
    RT_ASSERT(st == dnnl_success);
    g->m[g->n] = m;
    g->a[g->n].arg = arg;
    g->a[g->n].memory = m;
    g->n++;
}

static __thread int rt__dserial; /* this call runs on one thread */

/* runs p with the arguments, then releases their memory objects */
static void rt__exec(dnnl_primitive_t p, rt__dargs *g, const dnnl_memory_desc_t *sp, float *spb)
{
    dnnl_stream_t st;
    /* omp_set_num_threads sets this thread's default only: oneDNN reads it
     * for the team of this execution */
    const int outer = rt__dserial && !omp_in_parallel() ? omp_get_max_threads() : 0;
    if (outer > 1)
        omp_set_num_threads(1);
    if (dnnl_memory_desc_get_size(sp) > 0)
        rt__arg(g, DNNL_ARG_SCRATCHPAD, sp, spb);
    dnnl_status_t s = dnnl_stream_create(&st, rt__deng, dnnl_stream_default_flags);
    RT_ASSERT(s == dnnl_success);
    s = dnnl_primitive_execute(p, st, g->n, g->a);
    RT_ASSERT(s == dnnl_success); /* the shapes were checked when it was built */
    dnnl_stream_wait(st);
    dnnl_stream_destroy(st);
    for (int i = 0; i < g->n; i++)
        dnnl_memory_destroy(g->m[i]);
    g->n = 0;
    if (outer > 1)
        omp_set_num_threads(outer);
}

/* dst (layout of dmd) = src (layout of smd), through reorder r (or a copy
 * when r is NULL: same layout) */
static void rt__reord(dnnl_primitive_t r, const dnnl_memory_desc_t *smd, const void *src,
                      const dnnl_memory_desc_t *dmd, void *dst, const dnnl_memory_desc_t *sp,
                      float *spb)
{
    if (!r) {
        memcpy(dst, src, dnnl_memory_desc_get_size(dmd));
        return;
    }
    rt__dargs g = {0};
    rt__arg(&g, DNNL_ARG_FROM, smd, src);
    rt__arg(&g, DNNL_ARG_TO, dmd, dst);
    rt__exec(r, &g, sp, spb);
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
    rt__dserial = a->r->n * cv->OH * cv->OW * cv->OC * cv->KH * cv->KW * cv->C < RT__DCONV_PAR_MACS;
    const float *w = a->x[1];
    if (d->w_fwd) {
        rt__reord(d->w_fwd, &d->hwio, a->x[1], &d->wf, p.wbuf, &d->sp_rf, p.sp);
        w = p.wbuf;
    }
    rt__dargs g = {0};
    rt__arg(&g, DNNL_ARG_SRC, &d->src, a->x[0]);
    rt__arg(&g, DNNL_ARG_WEIGHTS, &d->wf, w);
    if (cv->bias)
        rt__arg(&g, DNNL_ARG_BIAS, &d->bias, a->x[2]);
    rt__arg(&g, DNNL_ARG_DST, &d->dst, a->y);
    rt__exec(d->fwd, &g, &d->sp_fwd, p.sp);
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
    rt__dserial = out * cv->KH * cv->KW * cv->C < RT__DCONV_PAR_MACS;
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
        rt__dargs g = {0};
        rt__arg(&g, DNNL_ARG_SRC, &d->src, a->x[0]);
        rt__arg(&g, DNNL_ARG_DIFF_DST, &d->dst, dz);
        rt__arg(&g, DNNL_ARG_DIFF_WEIGHTS, &d->dwd, dwb);
        if (cv->bias)
            rt__arg(&g, DNNL_ARG_DIFF_BIAS, &d->bias, db && !dbadd ? db : p.tmp);
        rt__exec(d->bwd_w, &g, &d->sp_bwd_w, p.sp);
        if (dw && (a->accum & 2u))
            rt__reord(d->dw_add, &d->dwd, dwb, &d->hwio, dw, &d->sp_wa, p.sp);
        else if (dw && d->dw_set)
            rt__reord(d->dw_set, &d->dwd, dwb, &d->hwio, dw, &d->sp_ws, p.sp);
        if (dbadd)
            rt__add(db, p.tmp, cv->OC);
    }
    if (dx) {
        const float *w = a->x[1];
        if (d->w_bwd_d) {
            rt__reord(d->w_bwd_d, &d->hwio, a->x[1], &d->wd, p.wbuf, &d->sp_rd, p.sp);
            w = p.wbuf;
        }
        const int add = (a->accum & 1u) != 0;
        rt__dargs g = {0};
        rt__arg(&g, DNNL_ARG_DIFF_DST, &d->dst, dz);
        rt__arg(&g, DNNL_ARG_WEIGHTS, &d->wd, w);
        rt__arg(&g, DNNL_ARG_DIFF_SRC, &d->src, add ? p.tmp : dx);
        rt__exec(d->bwd_d, &g, &d->sp_bwd_d, p.sp);
        if (add)
            rt__add(dx, p.tmp, n * cv->H * cv->W * cv->C);
    }
    return 0;
}
