/* import_graph.c - rtrain.v1.Graph -> rt_graph (import_graph.h). */
#include "import_graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_errf.h"

static void *heap_alloc(void *ud, size_t n) { return malloc(n); }
static void heap_free(void *ud, void *p) { free(p); }
static ProtobufCAllocator heap = {heap_alloc, heap_free, NULL};

/* The allocator said no: RT_ENOMEM with err empty (the caller knows why). */
static int no_mem(char *err, size_t errlen)
{
    if (errlen)
        err[0] = '\0';
    return RT_ENOMEM;
}

static int add_inputs(const Rtrain__V1__Graph *pg, rt_graph *g, char *err, size_t errlen)
{
    for (size_t i = 0; i < pg->n_inputs; i++) {
        const Rtrain__V1__ValueInfo *v = pg->inputs[i];
        if (v->n_shape > RT_MAX_DIMS)
            return rt_errf(err, errlen, RT_EINVAL, "input '%.64s' has %zu dims (max %d)", v->name,
                           v->n_shape, RT_MAX_DIMS);
        rt_dtype dt = v->dtype == 0 ? RT_F32 : (rt_dtype)v->dtype;
        int rc = rt_graph_add_input(g, v->name, dt, (int)v->n_shape, v->shape);
        if (rc < 0)
            return rt_errf(err, errlen, rc, "input '%.64s': %s", v->name, rt_graph_errmsg(g));
    }
    return 0;
}

static int add_param(const Rtrain__V1__Param *p, ProtobufCAllocator *al, rt_graph *g, char *err,
                     size_t errlen)
{
    if (p->n_shape > RT_MAX_DIMS)
        return rt_errf(err, errlen, RT_EINVAL, "param '%.64s' has %zu dims (max %d)", p->name,
                       p->n_shape, RT_MAX_DIMS);
    int64_t n = 1;
    for (size_t k = 0; k < p->n_shape; k++) {
        if (p->shape[k] <= 0 || p->shape[k] > RT_MAX_DIM_LIMIT)
            return rt_errf(err, errlen, RT_EINVAL, "param '%.64s' dim %zu is %lld", p->name, k,
                           (long long)p->shape[k]);
        n *= p->shape[k];
        if ((uint64_t)n > RT_MAX_PARAMS_LIMIT)
            return rt_errf(err, errlen, RT_ETOOBIG, "param '%.64s' is over the size limit",
                           p->name);
    }
    float *val = NULL;
    if (p->value && p->value->data.len) {
        if (p->value->dtype != RTRAIN__V1__DTYPE__F32 || p->value->data.len != (size_t)n * 4)
            return rt_errf(err, errlen, RT_EINVAL,
                           "param '%.64s' value must be %lld f32 values (%zu bytes given)", p->name,
                           (long long)n, p->value->data.len);
        if (!(val = al->alloc(al->allocator_data, (size_t)n * 4)))
            return no_mem(err, errlen);
        memcpy(val, p->value->data.data, (size_t)n * 4); /* alignment */
        /* a NaN or Inf start trains to NaN from the first step */
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(val[i])) {
                int rc = rt_errf(err, errlen, RT_ENAN,
                                 "param '%.64s' value %lld is %s: initial "
                                 "values must be finite",
                                 p->name, (long long)i, isnan(val[i]) ? "NaN" : "infinite");
                al->free(al->allocator_data, val);
                return rc;
            }
    }
    int rc = rt_graph_add_param(g, p->name, (int)p->n_shape, p->shape, (rt_init)p->init,
                                p->trainable, val);
    if (val)
        al->free(al->allocator_data, val);
    if (rc < 0)
        return rt_errf(err, errlen, rc, "param '%.64s': %s", p->name, rt_graph_errmsg(g));
    return 0;
}

/* The node's attributes as the builder takes them, into a (n_attrs). */
static int attrs_from_pb(const Rtrain__V1__Node *nd, rt_attr *a, char *err, size_t errlen)
{
    for (size_t k = 0; k < nd->n_attrs; k++) {
        const Rtrain__V1__Attr *pa = nd->attrs[k];
        a[k].name = pa->name;
        switch (pa->value_case) {
        case RTRAIN__V1__ATTR__VALUE_I:
            a[k].kind = RT_ATTR_INT;
            a[k].i = pa->i;
            break;
        case RTRAIN__V1__ATTR__VALUE_F:
            a[k].kind = RT_ATTR_FLOAT;
            a[k].f = pa->f;
            break;
        case RTRAIN__V1__ATTR__VALUE_S:
            a[k].kind = RT_ATTR_STR;
            a[k].s = pa->s;
            break;
        case RTRAIN__V1__ATTR__VALUE_INTS:
            a[k].kind = RT_ATTR_INTS;
            a[k].n = (int)pa->ints->n_v;
            a[k].ints = pa->ints->v;
            break;
        case RTRAIN__V1__ATTR__VALUE_FLOATS:
            a[k].kind = RT_ATTR_FLOATS;
            a[k].n = (int)pa->floats->n_v;
            a[k].floats = pa->floats->v;
            break;
        default:
            return rt_errf(err, errlen, RT_EINVAL, "node '%.64s' attr '%.32s' has no value",
                           nd->name, pa->name);
        }
    }
    return 0;
}

static int add_node(const Rtrain__V1__Node *nd, ProtobufCAllocator *al, rt_graph *g, char *err,
                    size_t errlen)
{
    size_t sz = sizeof(rt_attr) * (nd->n_attrs ? nd->n_attrs : 1);
    rt_attr *a = al->alloc(al->allocator_data, sz);
    if (!a)
        return no_mem(err, errlen);
    memset(a, 0, sz);
    int rc = attrs_from_pb(nd, a, err, errlen);
    if (rc == 0 &&
        (rc = rt_graph_add_node(g, nd->name, nd->op, (int)nd->n_inputs,
                                (const char *const *)nd->inputs, (int)nd->n_attrs, a)) < 0)
        rt_errf(err, errlen, rc, "node '%.64s': %s", nd->name, rt_graph_errmsg(g));
    al->free(al->allocator_data, a);
    return rc;
}

int rt_graph_import_pb(const Rtrain__V1__Graph *pg, ProtobufCAllocator *alloc, rt_graph *g,
                       char *err, size_t errlen)
{
    ProtobufCAllocator *al = alloc ? alloc : &heap;
    int rc = add_inputs(pg, g, err, errlen);
    for (size_t i = 0; rc == 0 && i < pg->n_params; i++)
        rc = add_param(pg->params[i], al, g, err, errlen);
    for (size_t i = 0; rc == 0 && i < pg->n_nodes; i++)
        rc = add_node(pg->nodes[i], al, g, err, errlen);
    if (rc == 0 && pg->output && *pg->output && (rc = rt_graph_set_output(g, pg->output)) < 0)
        rt_errf(err, errlen, rc, "output: %s", rt_graph_errmsg(g));
    return rc;
}
