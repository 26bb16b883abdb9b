/*
 * conv_grads.h - two execs of one model compiled two ways (oneDNN's
 * primitives or im2col, the cpu backend or ref) hold the same gradients:
 * shared by test_conv_dnnl_batch.c and test_conv_mk_ref.c. Include after
 * ../engine/rt_test.h.
 */
#ifndef RTRAIN_CONV_GRADS_H
#define RTRAIN_CONV_GRADS_H

/* |a - b| <= 1e-4 * (1 + max |b|) element by element */
static void close_to(const char *what, const float *a, const float *b, int64_t n)
{
    float m = 0;
    for (int64_t i = 0; i < n; i++) m = fabsf(b[i]) > m ? fabsf(b[i]) : m;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += !(fabsf(a[i] - b[i]) <= 1e-4f * (1.0f + m));
    if (bad) fprintf(stderr, "%s: %lld of %lld values differ\n", what, (long long)bad, (long long)n);
    CHECK(bad == 0);
}

/* compute_grads at n samples on both, then the losses and every
 * parameter's gradient compared (p: the plan of ea; gradients of at most
 * cap floats; scratch ga, gb) */
static void grads_match(const char *name, rt_exec *ea, rt_exec *eb, const rt_plan *p,
                        const rt_data *d, int64_t n, float *ga, float *gb, int64_t cap)
{
    double la, lb;
    CHECK_RC(rt_exec_compute_grads(ea, d, n, &la));
    CHECK_RC(rt_exec_compute_grads(eb, d, n, &lb));
    CHECK(fabs(la - lb) <= 1e-5 * (1 + fabs(lb)));
    const int np = rt_plan_n_params(p);
    for (int i = 0; i < np; i++) {
        int64_t dims[RT_MAX_DIMS], m = 1;
        const char *pn;
        int tr;
        const int nd = rt_plan_param_info(p, i, &pn, dims, &tr);
        for (int j = 0; j < nd; j++) m *= dims[j];
        REQUIRE(m <= cap);
        CHECK_RC(rt_exec_get_grad(ea, i, ga));
        CHECK_RC(rt_exec_get_grad(eb, i, gb));
        char what[192];
        snprintf(what, sizeof what, "%s, n=%lld: gradient of %s", name, (long long)n, pn);
        close_to(what, ga, gb, m);
    }
}

#endif
