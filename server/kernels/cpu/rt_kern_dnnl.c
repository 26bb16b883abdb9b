/*
 * rt_kern_dnnl.c - the oneDNN plumbing the CPU backend's float32 and bf16
 * kernels share (rt_kern_dnnl.h).
 */
#include <string.h>

#include <omp.h>

#include "cpu/rt_kern_cpu.h"
#include "cpu/rt_kern_dnnl.h"

static dnnl_engine_t rt__eng;
static pthread_once_t rt__eng_once = PTHREAD_ONCE_INIT;

static void rt__eng_init(void)
{
    if (dnnl_engine_create(&rt__eng, dnnl_cpu, 0) != dnnl_success)
        rt__eng = NULL;
}

dnnl_engine_t rt_kern_dnnl_engine(void)
{
    pthread_once(&rt__eng_once, rt__eng_init);
    return rt__eng;
}

int64_t rt_kern_dnnl_floats(const dnnl_memory_desc_t *md)
{
    return (int64_t)((dnnl_memory_desc_get_size(md) + 63) / 64 * 16);
}

int rt_kern_dnnl_pd(const void *desc, const_dnnl_post_ops_t po, const_dnnl_primitive_desc_t hint,
                    int no_ref, dnnl_primitive_desc_t *pd)
{
    *pd = NULL;
    dnnl_primitive_attr_t at;
    if (dnnl_primitive_attr_create(&at) != dnnl_success)
        return -1;
    dnnl_primitive_attr_set_scratchpad_mode(at, dnnl_scratchpad_mode_user);
    if (po)
        dnnl_primitive_attr_set_post_ops(at, po);
    const dnnl_status_t st = dnnl_primitive_desc_create(pd, desc, at, rt_kern_dnnl_engine(), hint);
    dnnl_primitive_attr_destroy(at);
    if (st != dnnl_success)
        return -1;
    const char *impl = NULL;
    if (no_ref &&
        dnnl_primitive_desc_query(*pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
        impl && !strncmp(impl, "ref", 3)) {
        dnnl_primitive_desc_destroy(*pd);
        *pd = NULL;
        return -1;
    }
    return 0;
}

int rt_kern_dnnl_prim(dnnl_primitive_desc_t pd, dnnl_primitive_t *p, dnnl_memory_desc_t *sp)
{
    *sp = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    const dnnl_status_t st = dnnl_primitive_create(p, pd);
    dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success)
        *p = NULL;
    return st == dnnl_success ? 0 : -1;
}

int rt_kern_dnnl_reorder(const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst, int sum,
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
    dnnl_post_ops_t po = sum ? rt_kern_dnnl_act_po(RT__ACT_NONE, 1) : NULL;
    if (po)
        dnnl_primitive_attr_set_post_ops(at, po);
    dnnl_primitive_desc_t pd;
    const dnnl_engine_t e = rt_kern_dnnl_engine();
    const dnnl_status_t st = dnnl_reorder_primitive_desc_create(&pd, src, e, dst, e, at);
    dnnl_primitive_attr_destroy(at);
    if (po)
        dnnl_post_ops_destroy(po);
    if (st != dnnl_success)
        return -1;
    return rt_kern_dnnl_prim(pd, p, sp);
}

dnnl_post_ops_t rt_kern_dnnl_act_po(int act, int sum)
{
    if (act == RT__ACT_NONE && !sum)
        return NULL;
    dnnl_post_ops_t po;
    if (dnnl_post_ops_create(&po) != dnnl_success)
        return NULL;
    if (sum)
        dnnl_post_ops_append_sum(po, 1.0f);
    if (act != RT__ACT_NONE)
        dnnl_post_ops_append_eltwise(po, 1.0f,
                                     act == RT__ACT_RELU      ? dnnl_eltwise_relu
                                     : act == RT__ACT_SIGMOID ? dnnl_eltwise_logistic
                                                              : dnnl_eltwise_tanh,
                                     0.0f, 0.0f);
    return po;
}

void rt_kern_dnnl_arg(rt_kern_dnnl_args *g, int arg, const dnnl_memory_desc_t *md, const void *ptr)
{
    RT_ASSERT(g->n < (int)(sizeof g->a / sizeof g->a[0]));
    dnnl_memory_t m;
    const dnnl_status_t st = dnnl_memory_create(&m, md, rt_kern_dnnl_engine(), (void *)ptr);
    RT_ASSERT(st == dnnl_success);
    g->m[g->n] = m;
    g->a[g->n].arg = arg;
    g->a[g->n].memory = m;
    g->n++;
}

void rt_kern_dnnl_exec(dnnl_primitive_t p, rt_kern_dnnl_args *g, const dnnl_memory_desc_t *sp,
                       float *spb, int serial)
{
    /* omp_set_num_threads sets this thread's default only: oneDNN reads it
     * for the team of this execution */
    const int outer = serial && !omp_in_parallel() ? omp_get_max_threads() : 0;
    if (outer > 1)
        omp_set_num_threads(1);
    if (dnnl_memory_desc_get_size(sp) > 0)
        rt_kern_dnnl_arg(g, DNNL_ARG_SCRATCHPAD, sp, spb);
    dnnl_stream_t st;
    dnnl_status_t s = dnnl_stream_create(&st, rt_kern_dnnl_engine(), dnnl_stream_default_flags);
    RT_ASSERT(s == dnnl_success);
    s = dnnl_primitive_execute(p, st, g->n, g->a);
    RT_ASSERT(s == dnnl_success); /* the shapes were fixed when it was built */
    dnnl_stream_wait(st);
    dnnl_stream_destroy(st);
    for (int i = 0; i < g->n; i++)
        dnnl_memory_destroy(g->m[i]);
    g->n = 0;
    if (outer > 1)
        omp_set_num_threads(outer);
}

void rt_kern_dnnl_reord(dnnl_primitive_t r, const dnnl_memory_desc_t *smd, const void *src,
                        const dnnl_memory_desc_t *dmd, void *dst, const dnnl_memory_desc_t *sp,
                        float *spb, int serial)
{
    if (!r) {
        memcpy(dst, src, dnnl_memory_desc_get_size(dmd));
        return;
    }
    rt_kern_dnnl_args g = {0};
    rt_kern_dnnl_arg(&g, DNNL_ARG_FROM, smd, src);
    rt_kern_dnnl_arg(&g, DNNL_ARG_TO, dmd, dst);
    rt_kern_dnnl_exec(r, &g, sp, spb, serial);
}

rt_kern_dnnl_conv_key rt_kern_dnnl_conv_key_of(const rt__conv_params *cv, int64_t n)
{
    rt_kern_dnnl_conv_key k;
    memset(&k, 0, sizeof k); /* compared with memcmp */
    k.n = n;
    k.H = cv->H, k.W = cv->W, k.C = cv->C, k.OH = cv->OH, k.OW = cv->OW, k.OC = cv->OC;
    k.KH = cv->KH, k.KW = cv->KW, k.SH = cv->SH, k.SW = cv->SW, k.DH = cv->DH, k.DW = cv->DW;
    k.PT = cv->PT, k.PL = cv->PL, k.bias = cv->bias, k.act = cv->act;
    k.G = cv->G > 1 ? cv->G : 1;
    return k;
}

void rt_kern_dnnl_conv_wmd(const rt_kern_dnnl_conv_key *k, dnnl_data_type_t dt,
                           dnnl_memory_desc_t *md)
{
    if (k->G <= 1) {
        dnnl_dims_t wd = {k->OC, k->C, k->KH, k->KW};
        dnnl_memory_desc_init_by_tag(md, 4, wd, dt, dnnl_hwio);
        return;
    }
    /* (kh, kw, i, g * OC/G + o): o fastest, then g, i, kw, kh */
    const int64_t og = k->OC / k->G, ig = k->C / k->G;
    dnnl_dims_t wd = {k->G, og, ig, k->KH, k->KW};
    dnnl_dims_t st = {og, 1, k->OC, k->KW * ig * k->OC, ig * k->OC};
    dnnl_memory_desc_init_by_strides(md, 5, wd, dt, st);
}

/* the geometry of convolution k in oneDNN's terms */
typedef struct {
    dnnl_dims_t sd, dd, wd, bd, str, dil, pl, pr;
    int wnd; /* wd's dimensions: 4, or 5 with groups */
} rt__cgeo;

static rt__cgeo rt__cgeo_of(const rt_kern_dnnl_conv_key *k)
{
    /* oneDNN's right padding makes its output size formula land on ours;
     * a 'valid' window that leaves input columns unread needs none */
    const int64_t rb = (k->OH - 1) * k->SH + (k->KH - 1) * k->DH + 1 - k->H - k->PT;
    const int64_t rr = (k->OW - 1) * k->SW + (k->KW - 1) * k->DW + 1 - k->W - k->PL;
    rt__cgeo g = {.sd = {k->n, k->C, k->H, k->W},
                  .dd = {k->n, k->OC, k->OH, k->OW},
                  .wd = {k->OC, k->C, k->KH, k->KW},
                  .bd = {k->OC},
                  .str = {k->SH, k->SW},
                  .dil = {k->DH - 1, k->DW - 1},
                  .pl = {k->PT, k->PL},
                  .pr = {rb > 0 ? rb : 0, rr > 0 ? rr : 0},
                  .wnd = 4};
    if (k->G > 1) {
        const int64_t w5[5] = {k->G, k->OC / k->G, k->C / k->G, k->KH, k->KW};
        memcpy(g.wd, w5, sizeof w5);
        g.wnd = 5;
    }
    return g;
}

int rt_kern_dnnl_conv_fwd_any(const rt_kern_dnnl_conv_key *k, dnnl_data_type_t sdt,
                              dnnl_data_type_t wdt, dnnl_data_type_t ddt, dnnl_primitive_desc_t *pd)
{
    *pd = NULL;
    const rt__cgeo c = rt__cgeo_of(k);
    dnnl_memory_desc_t src, wei, dst, bias;
    dnnl_memory_desc_init_by_tag(&src, 4, c.sd, sdt, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&wei, c.wnd, c.wd, wdt, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&dst, 4, c.dd, ddt, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&bias, 1, c.bd, dnnl_f32, dnnl_x);
    dnnl_convolution_desc_t fdesc;
    dnnl_post_ops_t po = rt_kern_dnnl_act_po((int)k->act, 0);
    const int ok = dnnl_dilated_convolution_forward_desc_init(
                       &fdesc, dnnl_forward_training, dnnl_convolution_direct, &src, &wei,
                       k->bias ? &bias : NULL, &dst, c.str, c.dil, c.pl, c.pr) == dnnl_success &&
                   rt_kern_dnnl_pd(&fdesc, po, NULL, 1, pd) == 0;
    if (po)
        dnnl_post_ops_destroy(po);
    return ok ? 0 : -1;
}

int rt_kern_dnnl_conv_pds(const rt_kern_dnnl_conv_key *k,
                          const dnnl_data_type_t dt[RT_KERN_DNNL_NDT], int no_ref,
                          dnnl_primitive_desc_t pd[3])
{
    pd[0] = pd[1] = pd[2] = NULL;
    const rt__cgeo c = rt__cgeo_of(k);
    const int64_t *sd = c.sd, *dd = c.dd, *wd = c.wd, *bd = c.bd;
    const int64_t *str = c.str, *dil = c.dil, *pl = c.pl, *pr = c.pr;
    dnnl_memory_desc_t src, wei, dst, dsrc, ddst, dwei, bias;
    dnnl_memory_desc_init_by_tag(&src, 4, sd, dt[RT_KERN_DNNL_SRC], dnnl_nhwc);
    dnnl_memory_desc_init_by_tag(&wei, c.wnd, wd, dt[RT_KERN_DNNL_WEI], dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&dst, 4, dd, dt[RT_KERN_DNNL_DST], dnnl_nhwc);
    dnnl_memory_desc_init_by_tag(&dsrc, 4, sd, dt[RT_KERN_DNNL_DSRC], dnnl_nhwc);
    dnnl_memory_desc_init_by_tag(&ddst, 4, dd, dt[RT_KERN_DNNL_DDST], dnnl_nhwc);
    dnnl_memory_desc_init_by_tag(&dwei, c.wnd, wd, dt[RT_KERN_DNNL_DWEI], dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&bias, 1, bd, dnnl_f32, dnnl_x);
    const dnnl_memory_desc_t *bp = k->bias ? &bias : NULL;
    dnnl_convolution_desc_t fdesc, ddesc, wdesc;
    dnnl_post_ops_t po = rt_kern_dnnl_act_po((int)k->act, 0);
    /* NHWC in and out as asked: a primitive that wanted its own activation
     * layout would be refused (the format tags are fixed) */
    const int ok =
        dnnl_dilated_convolution_forward_desc_init(&fdesc, dnnl_forward_training,
                                                   dnnl_convolution_direct, &src, &wei, bp, &dst,
                                                   str, dil, pl, pr) == dnnl_success &&
        rt_kern_dnnl_pd(&fdesc, po, NULL, no_ref, &pd[0]) == 0 &&
        dnnl_dilated_convolution_backward_data_desc_init(&ddesc, dnnl_convolution_direct, &dsrc,
                                                         &wei, &ddst, str, dil, pl,
                                                         pr) == dnnl_success &&
        rt_kern_dnnl_pd(&ddesc, NULL, pd[0], no_ref, &pd[1]) == 0 &&
        dnnl_dilated_convolution_backward_weights_desc_init(&wdesc, dnnl_convolution_direct, &src,
                                                            &dwei, bp, &ddst, str, dil, pl,
                                                            pr) == dnnl_success &&
        rt_kern_dnnl_pd(&wdesc, NULL, pd[0], no_ref, &pd[2]) == 0;
    if (po)
        dnnl_post_ops_destroy(po);
    if (ok)
        return 0;
    for (int i = 0; i < 3; i++)
        if (pd[i])
            dnnl_primitive_desc_destroy(pd[i]);
    pd[0] = pd[1] = pd[2] = NULL;
    return -1;
}

void *rt_kern_dnnl_cache_get(rt_kern_dnnl_cache *t, const void *key, size_t klen,
                             void *(*build)(const void *key))
{
    void *d = NULL;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->n; i++)
        if (!memcmp(t->e[i], key, klen)) {
            d = t->e[i];
            break;
        }
    if (!d && t->n < RT_KERN_DNNL_CACHE_MAX && (d = build(key)))
        t->e[t->n++] = d;
    pthread_mutex_unlock(&t->mu);
    return d;
}
