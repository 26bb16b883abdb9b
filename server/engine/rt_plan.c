/*
 * rt_plan.c - the compiled plan's public side: reference counts, shapes and
 * parameter info, and the cache key (rt_plan_key). Compile itself is in
 * rt_compile.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "rt_engine_impl.h"

void rt_plan_retain(rt_plan *p)
{
    if (p)
        atomic_fetch_add(&p->refs, 1);
}

void rt_plan_release(rt_plan *p)
{
    if (!p)
        return;
    if (atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    rt__arena_free(&p->arena);
    free(p);
}

const rt_compile_report *rt_plan_report(const rt_plan *p) { return p ? &p->rep : NULL; }
const rt_train_config *rt_plan_config(const rt_plan *p) { return p ? &p->cfg : NULL; }

static int rt__copy_shape(const rt__shape *s, int64_t dims[RT_MAX_DIMS])
{
    for (int i = 0; i < s->ndim; i++)
        dims[i] = s->d[i];
    return s->ndim;
}

int rt_plan_input_shape(const rt_plan *p, int64_t dims[RT_MAX_DIMS])
{
    return p ? rt__copy_shape(&p->in_shape, dims) : RT_EINVAL;
}

int rt_plan_output_shape(const rt_plan *p, int64_t dims[RT_MAX_DIMS])
{
    return p ? rt__copy_shape(&p->out_shape, dims) : RT_EINVAL;
}

int rt_plan_label_shape(const rt_plan *p, int64_t dims[RT_MAX_DIMS])
{
    if (!p)
        return RT_EINVAL;
    for (int i = 0; i < p->cfg.label_ndim; i++)
        dims[i] = p->cfg.label_dims[i];
    return p->cfg.label_ndim;
}

int rt_plan_n_heads(const rt_plan *p) { return p ? p->loss.n_heads : RT_EINVAL; }

int rt_plan_head_shape(const rt_plan *p, int k, int64_t dims[RT_MAX_DIMS], int64_t *lab_numel)
{
    if (!p || k < 0 || k >= p->loss.n_heads)
        return RT_EINVAL;
    const rt__shape *s = &p->head_shape[k];
    for (int i = 0; i < s->ndim; i++)
        dims[i] = s->d[i];
    if (lab_numel)
        *lab_numel = p->loss.head[k].lab_numel;
    return s->ndim;
}

const char *rt_plan_head_name(const rt_plan *p, int k)
{
    return p && k >= 0 && k < p->loss.n_heads ? p->head_name[k] : NULL;
}

int rt_plan_n_params(const rt_plan *p) { return p ? p->n_params : RT_EINVAL; }

int rt_plan_n_nodes(const rt_plan *p) { return p ? p->n_nodes : RT_EINVAL; }

int rt_plan_node_info(const rt_plan *p, int i, const char **name, char *op, size_t oplen, int *prec)
{
    if (!p || i < 0 || i >= p->n_nodes)
        return RT_EINVAL;
    const rt__node *nd = &p->nodes[i];
    if (name)
        *name = nd->name;
    /* a folded Pad leads, as the op it was: "Pad+Conv2D" */
    const int folded = nd->pad_fold[0] || nd->pad_fold[1] || nd->pad_fold[2] || nd->pad_fold[3];
    if (op && oplen)
        snprintf(op, oplen, "%s%s%s%s", folded ? "Pad+" : "", nd->op->name, nd->fused ? "+" : "",
                 nd->fused ? nd->fused->name : "");
    if (prec)
        *prec = nd->prec == RT_PREC_BF16 ? RT_PREC_BF16 : RT_PREC_F32;
    return 0;
}

int rt_plan_param_info(const rt_plan *p, int i, const char **name, int64_t dims[RT_MAX_DIMS],
                       int *trainable)
{
    if (!p || i < 0 || i >= p->n_params)
        return RT_EINVAL;
    const rt__param *pr = &p->params[i];
    if (name)
        *name = pr->name;
    if (trainable)
        *trainable = pr->trainable;
    const rt__shape *sh = pr->view.n ? &pr->view.user : &pr->shape;
    if (dims)
        rt__copy_shape(sh, dims);
    return sh->ndim;
}

/* ------------------------------------------------------------------- key */

static void rt__h(XXH3_state_t *s, const void *p, size_t n) { XXH3_128bits_update(s, p, n); }
static void rt__hi(XXH3_state_t *s, int64_t v) { rt__h(s, &v, sizeof v); }
static void rt__hs(XXH3_state_t *s, const char *str)
{
    /* length-prefixed so ("ab","c") and ("a","bc") differ */
    size_t n = str ? strlen(str) : 0;
    rt__hi(s, (int64_t)n);
    if (n)
        rt__h(s, str, n);
}
static void rt__hf(XXH3_state_t *s, double v) { rt__h(s, &v, sizeof v); }

int rt_plan_key(const rt_graph *g, const rt_train_config *c, uint8_t key[16])
{
    if (!g || !c || !key)
        return RT_EINVAL;
    XXH3_state_t *s = XXH3_createState();
    if (!s)
        return RT_ENOMEM;
    XXH3_128bits_reset(s);
    rt__hs(s, "rtrain-plan");
    rt__hi(s, RT_ENGINE_VERSION);
    rt__hs(s, rt_backend_name()); /* the backend compile will take */
    rt__hi(s, g->n);
    for (int i = 0; i < g->n; i++) {
        const rt__entry *e = &g->e[i];
        rt__hi(s, e->kind);
        rt__hs(s, e->name);
        rt__hi(s, e->dt);
        rt__hi(s, e->shape.ndim);
        for (int d = 0; d < e->shape.ndim; d++)
            rt__hi(s, e->shape.d[d]);
        if (e->kind == RT__T_PARAM) {
            rt__hi(s, e->init);
            rt__hi(s, e->trainable);
            rt__hi(s, e->value != NULL);
            rt__hi(s, e->has_opts);
            if (e->has_opts) {
                const rt_param_opts *o = &e->opts;
                const double f[9] = {o->scale, o->a,     o->b,      o->l1, o->l2,
                                     o->c_min, o->c_max, o->c_rate, 0};
                rt__hi(s, o->init);
                rt__hi(s, o->mode);
                rt__hi(s, o->dist);
                rt__hi(s, o->constraint);
                rt__hi(s, o->c_axes);
                rt__h(s, f, sizeof f);
            }
            rt__hi(s, e->view.n);
            if (e->view.n) {
                rt__h(s, e->view.d, sizeof e->view.d);
                rt__h(s, e->view.perm, sizeof e->view.perm);
                rt__hi(s, e->view.user.ndim);
                rt__h(s, e->view.user.d, sizeof e->view.user.d);
            }
            if (e->value)
                rt__h(s, e->value, sizeof(float) * (size_t)rt__shape_numel(&e->shape));
        }
        if (e->kind == RT__T_NODE) {
            rt__hs(s, e->op);
            rt__hi(s, e->n_in);
            for (int j = 0; j < e->n_in; j++)
                rt__hs(s, e->in[j]);
            rt__hi(s, e->n_attr);
            for (int j = 0; j < e->n_attr; j++) {
                const rt_attr *a = &e->attrs[j];
                rt__hs(s, a->name);
                rt__hi(s, a->kind);
                switch (a->kind) {
                case RT_ATTR_INT: rt__hi(s, a->i); break;
                case RT_ATTR_FLOAT: rt__hf(s, a->f); break;
                case RT_ATTR_STR: rt__hs(s, a->s); break;
                case RT_ATTR_INTS:
                    rt__hi(s, a->n);
                    if (a->n)
                        rt__h(s, a->ints, sizeof(int64_t) * (size_t)a->n);
                    break;
                case RT_ATTR_FLOATS:
                    rt__hi(s, a->n);
                    if (a->n)
                        rt__h(s, a->floats, sizeof(float) * (size_t)a->n);
                    break;
                }
            }
        }
    }
    rt__hs(s, g->output);
    rt__hs(s, g->loss_mask[0] ? g->loss_mask[0] : "");
    for (int k = 1; k < g->n_masks; k++)
        rt__hs(s, g->loss_mask[k] ? g->loss_mask[k] : "");
    rt__hi(s, g->n_heads);
    for (int k = 0; k < g->n_heads; k++)
        rt__hs(s, g->heads[k]);
    for (int k = 0; k < g->n_heads; k++)
        rt__hs(s, g->head_label[k] ? g->head_label[k] : "");
    /* config, field by field (struct padding is not hashed) */
    rt__hi(s, c->loss);
    rt__hi(s, c->from_logits);
    rt__hi(s, c->opt);
    rt__hf(s, c->lr);
    rt__hf(s, c->momentum);
    rt__hi(s, c->nesterov);
    rt__hf(s, c->beta1);
    rt__hf(s, c->beta2);
    rt__hf(s, c->eps);
    rt__hi(s, c->adam_eps_vhat);
    rt__hf(s, c->weight_decay);
    rt__hf(s, c->rho);
    rt__hf(s, c->clip_norm);
    rt__hi(s, c->sched);
    rt__hi(s, c->step_size);
    rt__hf(s, c->gamma);
    rt__hi(s, c->warmup_steps);
    rt__hi(s, c->total_steps);
    rt__hf(s, c->min_lr);
    rt__hi(s, c->metrics);
    rt__hi(s, c->batch_size);
    rt__hi(s, (int64_t)c->seed);
    rt__hi(s, c->shuffle);
    rt__hi(s, c->label_dtype);
    rt__hi(s, c->label_ndim);
    for (int i = 0; i < c->label_ndim && i < RT_MAX_DIMS; i++)
        rt__hi(s, c->label_dims[i]);
    rt__hi(s, c->sync_bn);
    if (c->precision) /* hashed only when set: float32 plans keep their keys */
        rt__hi(s, c->precision);
    rt__hi(s, c->reduction);
    rt__hf(s, c->label_smoothing);
    rt__hi(s, c->ignore_index);
    rt__hf(s, c->loss_beta);
    rt__hi(s, c->loss_check);
    rt__hf(s, c->l2_decay);
    rt__hf(s, c->dampening);
    rt__hi(s, c->n_class_weight);
    if (c->n_class_weight > 0 && c->class_weight)
        rt__h(s, c->class_weight, sizeof(float) * (size_t)c->n_class_weight);
    rt__hi(s, c->n_pos_weight);
    if (c->n_pos_weight > 0 && c->pos_weight)
        rt__h(s, c->pos_weight, sizeof(float) * (size_t)c->n_pos_weight);
    rt__hi(s, c->n_heads);
    for (int k = 0; k < c->n_heads && k < RT_MAX_HEADS; k++) {
        rt__hi(s, c->heads[k].loss);
        rt__hi(s, c->heads[k].from_logits);
        rt__hf(s, c->heads[k].weight);
        rt__hi(s, (int)c->heads[k].metrics);
    }
    if (c->opt == RT_OPT_FTRL) {
        rt__hf(s, c->ftrl_power);
        rt__hf(s, c->ftrl_init);
        rt__hf(s, c->ftrl_l1);
        rt__hf(s, c->ftrl_l2);
        rt__hf(s, c->ftrl_shrink);
        rt__hf(s, c->ftrl_beta);
    }
    XXH128_hash_t h = XXH3_128bits_digest(s);
    XXH3_freeState(s);
    XXH128_canonical_t can;
    XXH128_canonicalFromHash(&can, h);
    memcpy(key, can.digest, 16);
    return 0;
}
