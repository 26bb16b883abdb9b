/*
 * rt_regular.c - Keras weight regularizers and constraints (rt_param_opts).
 *
 * A regularizer adds l1 sum|w| + l2 sum w^2 to the step's mean loss, as
 * Keras adds layer.losses to the compiled loss; its gradient l1 sign(w) +
 * 2 l2 w joins the parameter's gradient before clipping and the update. A
 * constraint runs on the new weights after each update, as Keras' optimizer
 * applies variable.constraint after assigning.
 */
#include <math.h>

#include "cpu/rt_kern_cpu.h"

double rt__reg_apply(const rt_plan *p, const float *w, float *g)
{
    double pen = 0;
    for (int i = 0; i < p->n_params; i++) {
        const rt__param *pr = &p->params[i];
        const double l1 = pr->opts.l1, l2 = pr->opts.l2;
        if (!(l1 > 0) && !(l2 > 0))
            continue;
        const float *x = w + pr->off;
        double s1 = 0, s2 = 0;
        for (int64_t j = 0; j < pr->numel; j++) {
            s1 += fabs((double)x[j]);
            s2 += (double)x[j] * x[j];
        }
        pen += l1 * s1 + l2 * s2;
        if (!g || !pr->trainable)
            continue;
        float *dx = g + pr->goff;
        const float a = (float)l1, b = (float)(2.0 * l2);
        for (int64_t j = 0; j < pr->numel; j++)
            dx[j] += a * (float)((x[j] > 0) - (x[j] < 0)) + b * x[j];
    }
    return pen;
}

/* The norm of every slice that varies only along the axes in mask, and the
 * Keras rescaling of that slice. Slices are enumerated by the kept
 * coordinates; a slice's elements are visited by the reduced ones. */
static void rt__constrain_norms(const rt__param *pr, float *w)
{
    const rt_param_opts *o = &pr->opts;
    const rt__shape *s = &pr->shape;
    int64_t stride[RT_MAX_DIMS], st = 1;
    for (int d = s->ndim - 1; d >= 0; d--) {
        stride[d] = st;
        st *= s->d[d];
    }
    int64_t kept = 1, red = 1;
    for (int d = 0; d < s->ndim; d++) {
        if (o->c_axes >> d & 1)
            red *= s->d[d];
        else
            kept *= s->d[d];
    }
    for (int64_t k = 0; k < kept; k++) {
        /* base offset of slice k: its kept coordinates, last dim fastest */
        int64_t base = 0, r = k;
        for (int d = s->ndim - 1; d >= 0; d--)
            if (!(o->c_axes >> d & 1)) {
                base += (r % s->d[d]) * stride[d];
                r /= s->d[d];
            }
        double ss = 0;
        for (int pass = 0; pass < 2; pass++) {
            double scale = 1;
            if (pass == 1) {
                const double nrm = sqrt(ss), eps = 1e-7;
                double want = nrm;
                switch (o->constraint) {
                case RT_CONSTRAINT_MAX_NORM: want = nrm < o->c_max ? nrm : o->c_max; break;
                case RT_CONSTRAINT_UNIT_NORM: want = 1; break;
                case RT_CONSTRAINT_MIN_MAX_NORM: {
                    double c = nrm < o->c_min ? o->c_min : nrm > o->c_max ? o->c_max : nrm;
                    want = o->c_rate * c + (1 - o->c_rate) * nrm;
                    break;
                }
                default: break;
                }
                /* UnitNorm divides by eps + norm; the others multiply by
                 * desired / (eps + norm), both as Keras */
                scale = want / (eps + nrm);
            }
            for (int64_t j = 0; j < red; j++) {
                int64_t off = base, q = j;
                for (int d = s->ndim - 1; d >= 0; d--)
                    if (o->c_axes >> d & 1) {
                        off += (q % s->d[d]) * stride[d];
                        q /= s->d[d];
                    }
                if (pass == 0)
                    ss += (double)w[off] * w[off];
                else
                    w[off] = (float)(w[off] * scale);
            }
        }
    }
}

void rt__constrain(const rt_plan *p, float *w)
{
    for (int i = 0; i < p->n_params; i++) {
        const rt__param *pr = &p->params[i];
        if (!pr->trainable || pr->opts.constraint == RT_CONSTRAINT_NONE)
            continue;
        float *x = w + pr->off;
        if (pr->opts.constraint == RT_CONSTRAINT_NON_NEG) {
            for (int64_t j = 0; j < pr->numel; j++)
                x[j] = x[j] < 0 ? 0.0f : x[j];
            continue;
        }
        rt__constrain_norms(pr, x);
    }
}
