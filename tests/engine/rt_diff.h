/*
 * rt_diff.h - one program on two backends (docs/backends.md): compile the
 * same graph and config for "cpu" and "ref", then compare the forward pass
 * (predict before training), the first step's gradients and, after each
 * training step, the step's loss and every parameter. The first value
 * beyond tolerance is reported. Shared by test_backend_diff.c and the
 * differential fuzzer (tests/fuzz/fuzz_backend_diff.c).
 *
 * A value v (ref) against c (cpu) agrees when |c - v| <= abs + rel |v|;
 * test_backend_diff.c derives the numbers.
 *
 * Adaptive optimizers (Adam, AdamW, RMSprop) divide by the gradient's own
 * size: an element whose gradient is rounding noise (exactly 0 in exact
 * arithmetic, e.g. a bias a following BatchNorm subtracts away; below
 * grad_abs on either side) moves by up to lr in a direction the noise
 * picks, differently on each backend. Such an element, once seen, is held
 * to lr per step since; every other one to the tolerance.
 */
#ifndef RTRAIN_DIFF_H
#define RTRAIN_DIFF_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_engine.h"

typedef struct rt_diff_tol {
    double fwd_abs, fwd_rel;   /* outputs before training */
    double grad_abs, grad_rel; /* the first step's gradients */
    double loss_abs, loss_rel; /* each step's loss */
    double w_abs, w_rel;       /* parameters after each step */
} rt_diff_tol;

typedef struct rt_diff_stats {
    double fwd, grad, loss, w;  /* the worst |c - v| / (abs + rel |v|) seen */
} rt_diff_stats;

static inline int rt_diff_near(double c, double v, double abs, double rel, double *worst)
{
    const double lim = abs + rel * fabs(v), d = fabs(c - v);
    if (isnan(c) || isnan(v)) return isnan(c) && isnan(v);
    if (isinf(c) || isinf(v)) return c == v;
    if (d / lim > *worst) *worst = d / lim;
    return d <= lim;
}

/* Compile g for backend be: 0, or a message in why. */
static inline int rt_diff_exec(const char *be, const rt_graph *g, const rt_train_config *cfg,
                               rt_exec **e, char *why, size_t whylen)
{
    rt_plan *p = NULL;
    char err[256];
    *e = NULL;
    if (rt_backend_select(be) < 0) {
        snprintf(why, whylen, "no backend %s", be);
        return -1;
    }
    int rc = rt_plan_compile(g, cfg, &p, NULL, err, sizeof err);
    if (rc < 0) {
        snprintf(why, whylen, "%s compile: %.200s", be, err);
        return rc;
    }
    rc = rt_exec_create(p, e);
    rt_plan_release(p);
    if (rc < 0) snprintf(why, whylen, "%s: exec create failed", be);
    return rc;
}

/* 1: agree; 0: disagree (why says where); -1: a side failed to compile or
 * run (why says which; *skip_ref set when only ref refused the plan). */
static inline int rt_diff_run(const rt_graph *g, const rt_train_config *cfg, const rt_data *d,
                              int steps, const rt_diff_tol *t, rt_diff_stats *st, char *why,
                              size_t whylen)
{
    rt_exec *c = NULL, *r = NULL;
    int ok = -1;
    float *a = NULL, *b = NULL;
    int64_t *first = NULL; /* each parameter's first element in noisy */
    int *noisy = NULL;     /* per element: steps since its gradient was noise */
    memset(st, 0, sizeof *st);
    if (rt_diff_exec("cpu", g, cfg, &c, why, whylen) < 0 ||
        rt_diff_exec("ref", g, cfg, &r, why, whylen) < 0)
        goto out;
    const rt_plan *p = rt_exec_plan(c);
    int64_t on = 1, dims[RT_MAX_DIMS];
    const int nd = rt_plan_output_shape(p, dims);
    for (int i = 0; i < nd; i++) on *= dims[i];
    int64_t most = on * d->n;
    for (int i = 0; i < rt_plan_n_params(p); i++) {
        const char *name;
        int tr, k = rt_plan_param_info(p, i, &name, dims, &tr);
        int64_t m = 1;
        for (int j = 0; j < k; j++) m *= dims[j];
        if (m > most) most = m;
    }
    a = malloc(sizeof(float) * (size_t)most);
    b = malloc(sizeof(float) * (size_t)most);
    const int adaptive = cfg->opt != RT_OPT_SGD;
    int64_t tot = 0;
    first = calloc((size_t)rt_plan_n_params(p) + 1, sizeof *first);
    if (!first) goto out;
    for (int i = 0; i < rt_plan_n_params(p); i++) {
        const char *name;
        int tr, k = rt_plan_param_info(p, i, &name, dims, &tr);
        int64_t m = 1;
        for (int j = 0; j < k; j++) m *= dims[j];
        first[i] = tot;
        tot += m;
    }
    noisy = calloc((size_t)(tot ? tot : 1), sizeof *noisy);
    if (!a || !b || !noisy) goto out;
    ok = 0;
    /* forward */
    if (rt_exec_predict(c, d->x, d->n, a) < 0 || rt_exec_predict(r, d->x, d->n, b) < 0) {
        snprintf(why, whylen, "predict failed: %s / %s", rt_exec_errmsg(c), rt_exec_errmsg(r));
        ok = -1;
        goto out;
    }
    for (int64_t i = 0; i < on * d->n; i++)
        if (!rt_diff_near(a[i], b[i], t->fwd_abs, t->fwd_rel, &st->fwd)) {
            snprintf(why, whylen, "forward: output[%lld] cpu %.9g ref %.9g", (long long)i,
                     (double)a[i], (double)b[i]);
            goto out;
        }
    for (int s = 0; s < steps; s++) {
        float lc, lr;
        if (rt_exec_train(c, d, 1, NULL, NULL, NULL, &lc) < 0 ||
            rt_exec_train(r, d, 1, NULL, NULL, NULL, &lr) < 0) {
            snprintf(why, whylen, "step %d failed: %s / %s", s, rt_exec_errmsg(c),
                     rt_exec_errmsg(r));
            ok = -1;
            goto out;
        }
        if (!rt_diff_near(lc, lr, t->loss_abs, t->loss_rel, &st->loss)) {
            snprintf(why, whylen, "step %d: loss cpu %.9g ref %.9g", s, (double)lc, (double)lr);
            goto out;
        }
        for (int i = 0; i < rt_plan_n_params(p); i++) {
            const char *name = NULL;
            int tr, k = rt_plan_param_info(p, i, &name, dims, &tr);
            int64_t m = 1;
            for (int j = 0; j < k; j++) m *= dims[j];
            if (s == 0 && tr) {
                /* backward: the first step's gradients, before any update
                 * has made the two runs' weights differ */
                rt_exec_get_grad(c, i, a);
                rt_exec_get_grad(r, i, b);
                for (int64_t j = 0; j < m; j++)
                    if (!rt_diff_near(a[j], b[j], t->grad_abs, t->grad_rel, &st->grad)) {
                        snprintf(why, whylen, "step 0: gradient of %s[%lld] cpu %.9g ref %.9g",
                                 name, (long long)j, (double)a[j], (double)b[j]);
                        goto out;
                    }
            }
            if (adaptive && tr) {
                rt_exec_get_grad(c, i, a);
                rt_exec_get_grad(r, i, b);
                for (int64_t j = 0; j < m; j++)
                    if (noisy[first[i] + j] || (fabs(a[j]) < t->grad_abs && fabs(b[j]) < t->grad_abs))
                        noisy[first[i] + j]++;
            }
            rt_exec_get_param(c, i, a);
            rt_exec_get_param(r, i, b);
            for (int64_t j = 0; j < m; j++) {
                const int nz = adaptive && tr ? noisy[first[i] + j] : 0;
                if (nz && fabs((double)a[j] - b[j]) <= 2.0 * cfg->lr * nz + t->w_abs) continue;
                if (!rt_diff_near(a[j], b[j], t->w_abs, t->w_rel, &st->w)) {
                    /* with the step's gradients there, which the update read */
                    float gc = 0, gr = 0;
                    if (tr) {
                        const double wc = a[j], wr = b[j];
                        rt_exec_get_grad(c, i, a);
                        gc = a[j];
                        rt_exec_get_grad(r, i, b);
                        gr = b[j];
                        a[j] = (float)wc;
                        b[j] = (float)wr;
                    }
                    snprintf(why, whylen, "step %d: %s[%lld] cpu %.9g ref %.9g (gradient cpu %.6g "
                             "ref %.6g)", s, name, (long long)j, (double)a[j], (double)b[j],
                             (double)gc, (double)gr);
                    goto out;
                }
            }
        }
    }
    ok = 1;
out:
    free(first);
    free(noisy);
    free(a);
    free(b);
    rt_exec_destroy(c);
    rt_exec_destroy(r);
    return ok;
}

#endif
