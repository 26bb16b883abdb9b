/* rt_model.c - the native graph builder. The model is kept directly as a
 * heap-allocated proto Graph (every member from malloc), so compile sends it
 * as is and destroy is one protobuf_c_message_free_unpacked. */
#include "rt_client_impl.h"
#include "rt_act.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rt_model {
    Rtrain__V1__Graph *g;
    char **names; /* strings handed out by rt_model_dense */
    size_t n_names;
};

rt_model *rt_model_create(void)
{
    rt_model *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->g = malloc(sizeof *m->g);
    if (!m->g) {
        free(m);
        return NULL;
    }
    rtrain__v1__graph__init(m->g);
    m->g->output = rt__strdup("");
    if (!m->g->output) {
        free(m->g);
        free(m);
        return NULL;
    }
    return m;
}

void rt_model_destroy(rt_model *m)
{
    if (!m)
        return;
    if (m->g)
        protobuf_c_message_free_unpacked(&m->g->base, NULL);
    for (size_t i = 0; i < m->n_names; i++)
        free(m->names[i]);
    free(m->names);
    free(m);
}

Rtrain__V1__Graph *rt__model_graph(const rt_model *m) { return m ? m->g : NULL; }

/* Grow a pointer array by one slot. */
static int push(void ***arr, size_t *n, void *item)
{
    void **na = realloc(*arr, (*n + 1) * sizeof *na);
    if (!na)
        return RT_ENOMEM;
    na[(*n)++] = item;
    *arr = na;
    return 0;
}

static int64_t *copy_dims(int ndim, const int64_t *shape)
{
    int64_t *d = malloc((size_t)(ndim ? ndim : 1) * sizeof *d);
    if (d && ndim)
        memcpy(d, shape, (size_t)ndim * sizeof *d);
    return d;
}

int rt_model_add_input(rt_model *m, const char *name, rt_client_dtype dt, int ndim,
                       const int64_t *shape)
{
    if (!m || !name || !*name || ndim < 0 || ndim > RT_CLIENT_MAX_DIMS || (ndim && !shape) ||
        !rt_client_dtype_size(dt))
        return RT_EINVAL;
    Rtrain__V1__ValueInfo *v = malloc(sizeof *v);
    if (!v)
        return RT_ENOMEM;
    rtrain__v1__value_info__init(v);
    v->name = rt__strdup(name);
    v->dtype = (Rtrain__V1__DType)dt;
    v->n_shape = (size_t)ndim;
    v->shape = copy_dims(ndim, shape);
    if (!v->name || !v->shape || push((void ***)&m->g->inputs, &m->g->n_inputs, v) < 0) {
        protobuf_c_message_free_unpacked(&v->base, NULL);
        return RT_ENOMEM;
    }
    return 0;
}

int rt_model_add_param(rt_model *m, const char *name, int ndim, const int64_t *shape,
                       rt_model_init init, int trainable, const float *value)
{
    if (!m || !name || !*name || ndim < 0 || ndim > RT_CLIENT_MAX_DIMS || (ndim && !shape) ||
        (int)init < 0 || init > RT_MODEL_INIT_HE_UNIFORM)
        return RT_EINVAL;
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return RT_EINVAL;
        numel *= (size_t)shape[i];
    }
    Rtrain__V1__Param *p = malloc(sizeof *p);
    if (!p)
        return RT_ENOMEM;
    rtrain__v1__param__init(p);
    p->name = rt__strdup(name);
    p->n_shape = (size_t)ndim;
    p->shape = copy_dims(ndim, shape);
    p->init = (Rtrain__V1__Initializer)init;
    p->trainable = trainable != 0;
    int ok = p->name && p->shape;
    if (ok && value) {
        Rtrain__V1__Tensor *t = malloc(sizeof *t);
        p->value = t;
        ok = t != NULL;
        if (ok) {
            rtrain__v1__tensor__init(t);
            t->name = rt__strdup(name);
            t->dtype = RTRAIN__V1__DTYPE__F32;
            t->n_shape = (size_t)ndim;
            t->shape = copy_dims(ndim, shape);
            t->data.len = numel * sizeof(float);
            t->data.data = malloc(t->data.len ? t->data.len : 1);
            ok = t->name && t->shape && t->data.data;
            if (ok)
                memcpy(t->data.data, value, t->data.len);
        }
    }
    if (!ok || push((void ***)&m->g->params, &m->g->n_params, p) < 0) {
        protobuf_c_message_free_unpacked(&p->base, NULL);
        return RT_ENOMEM;
    }
    return 0;
}

static int attr_from(const rt_model_attr *a, Rtrain__V1__Attr **out)
{
    Rtrain__V1__Attr *pa = malloc(sizeof *pa);
    if (!pa)
        return RT_ENOMEM;
    rtrain__v1__attr__init(pa);
    pa->name = rt__strdup(a->name);
    int ok = pa->name != NULL;
    switch (a->kind) {
    case RT_MODEL_ATTR_INT:
        pa->value_case = RTRAIN__V1__ATTR__VALUE_I;
        pa->i = a->i;
        break;
    case RT_MODEL_ATTR_FLOAT:
        pa->value_case = RTRAIN__V1__ATTR__VALUE_F;
        pa->f = a->f;
        break;
    case RT_MODEL_ATTR_STR:
        pa->value_case = RTRAIN__V1__ATTR__VALUE_S;
        pa->s = rt__strdup(a->s);
        ok = ok && pa->s;
        break;
    case RT_MODEL_ATTR_INTS: {
        pa->value_case = RTRAIN__V1__ATTR__VALUE_INTS;
        Rtrain__V1__Attr__Ints *v = malloc(sizeof *v);
        pa->ints = v;
        if (!v) {
            ok = 0;
            break;
        }
        rtrain__v1__attr__ints__init(v);
        v->n_v = (size_t)(a->n > 0 ? a->n : 0);
        v->v = copy_dims(a->n > 0 ? a->n : 0, a->ints);
        ok = ok && v->v;
        break;
    }
    case RT_MODEL_ATTR_FLOATS: {
        pa->value_case = RTRAIN__V1__ATTR__VALUE_FLOATS;
        Rtrain__V1__Attr__Floats *v = malloc(sizeof *v);
        pa->floats = v;
        if (!v) {
            ok = 0;
            break;
        }
        rtrain__v1__attr__floats__init(v);
        v->n_v = (size_t)(a->n > 0 ? a->n : 0);
        v->v = malloc((v->n_v ? v->n_v : 1) * sizeof(float));
        ok = ok && v->v;
        if (v->v && v->n_v)
            memcpy(v->v, a->floats, v->n_v * sizeof(float));
        break;
    }
    default: ok = 0;
    }
    if (!ok) {
        protobuf_c_message_free_unpacked(&pa->base, NULL);
        return RT_EINVAL;
    }
    *out = pa;
    return 0;
}

int rt_model_add_node(rt_model *m, const char *name, const char *op, int n_in,
                      const char *const *inputs, int n_attr, const rt_model_attr *attrs)
{
    if (!m || !name || !*name || !op || !*op || n_in < 0 || n_attr < 0 || (n_in && !inputs) ||
        (n_attr && !attrs))
        return RT_EINVAL;
    for (int i = 0; i < n_in; i++)
        if (!inputs[i] || !*inputs[i])
            return RT_EINVAL;
    for (int i = 0; i < n_attr; i++)
        if (!attrs[i].name || !*attrs[i].name ||
            (attrs[i].kind == RT_MODEL_ATTR_STR && !attrs[i].s) ||
            (attrs[i].kind == RT_MODEL_ATTR_INTS && attrs[i].n > 0 && !attrs[i].ints) ||
            (attrs[i].kind == RT_MODEL_ATTR_FLOATS && attrs[i].n > 0 && !attrs[i].floats))
            return RT_EINVAL;
    Rtrain__V1__Node *nd = malloc(sizeof *nd);
    if (!nd)
        return RT_ENOMEM;
    rtrain__v1__node__init(nd);
    nd->name = rt__strdup(name);
    nd->op = rt__strdup(op);
    nd->inputs = calloc((size_t)(n_in ? n_in : 1), sizeof(char *));
    nd->attrs = calloc((size_t)(n_attr ? n_attr : 1), sizeof(Rtrain__V1__Attr *));
    int rc = (nd->name && nd->op && nd->inputs && nd->attrs) ? 0 : RT_ENOMEM;
    for (int i = 0; rc == 0 && i < n_in; i++) {
        nd->inputs[i] = rt__strdup(inputs[i]);
        if (!nd->inputs[i])
            rc = RT_ENOMEM;
        else
            nd->n_inputs++;
    }
    for (int i = 0; rc == 0 && i < n_attr; i++) {
        rc = attr_from(&attrs[i], &nd->attrs[i]);
        if (rc == 0)
            nd->n_attrs++;
    }
    if (rc == 0)
        rc = push((void ***)&m->g->nodes, &m->g->n_nodes, nd);
    if (rc < 0)
        protobuf_c_message_free_unpacked(&nd->base, NULL);
    return rc;
}

int rt_model_set_output(rt_model *m, const char *name)
{
    if (!m || !name || !*name)
        return RT_EINVAL;
    char *s = rt__strdup(name);
    if (!s)
        return RT_ENOMEM;
    free(m->g->output);
    m->g->output = s;
    return 0;
}

int rt_model_dense(rt_model *m, const char *name, const char *input, int64_t in_features,
                   int64_t units, const char *activation, const char **out_name)
{
    if (!m || !name || !*name || !input || !*input || in_features <= 0 || units <= 0)
        return RT_EINVAL;
    int has_act = activation && *activation && strcmp(activation, "linear") != 0;
    const char *op = has_act ? rt_act_op(activation) : NULL;
    if (has_act && !op)
        return RT_EINVAL;
    size_t ln = strlen(name) + 16;
    char *kname = malloc(ln), *bname = malloc(ln), *aname = malloc(ln);
    int rc = (kname && bname && aname) ? 0 : RT_ENOMEM;
    if (rc == 0) {
        snprintf(kname, ln, "%s/kernel", name);
        snprintf(bname, ln, "%s/bias", name);
        snprintf(aname, ln, "%s/act", name);
        int64_t ks[2] = {in_features, units}, bs[1] = {units};
        rc = rt_model_add_param(m, kname, 2, ks, RT_MODEL_INIT_GLOROT_UNIFORM, 1, NULL);
        if (rc == 0)
            rc = rt_model_add_param(m, bname, 1, bs, RT_MODEL_INIT_ZEROS, 1, NULL);
        const char *in[3] = {input, kname, bname};
        if (rc == 0)
            rc = rt_model_add_node(m, name, "Dense", 3, in, 0, NULL);
        if (rc == 0 && has_act) {
            const char *ain[1] = {name};
            rc = rt_model_add_node(m, aname, op, 1, ain, 0, NULL);
        }
    }
    char *keep = NULL;
    if (rc == 0) {
        keep = rt__strdup(has_act ? aname : name);
        if (!keep || push((void ***)&m->names, &m->n_names, keep) < 0) {
            free(keep);
            keep = NULL;
            rc = RT_ENOMEM;
        }
    }
    free(kname);
    free(bname);
    free(aname);
    if (out_name)
        *out_name = keep;
    return rc;
}
