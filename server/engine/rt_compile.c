/*
 * rt_compile.c - graph -> plan: validate, infer shapes, fuse, derive the
 * backward pass, plan memory, select kernels.
 *
 * The backward "graph" is a list of backward kernel calls in reverse
 * topological order of the nodes that need a gradient. Each call writes the
 * gradients of its inputs; the first call that reaches a gradient buffer
 * overwrites it and later ones add (rt__call.accum), so no buffer is ever
 * zeroed in a step.
 *
 * Memory plan: every activation, gradient and scratch buffer gets an
 * interval [first write, last read] on the step timeline (0 = batch gather,
 * then forward calls, the loss, backward calls). Buffers are placed largest
 * first at the lowest offset that does not collide with a placed buffer
 * whose interval overlaps (intervals are inclusive, so a call never reads
 * and writes the same memory).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

#include "rt_engine_impl.h"
#include "cpu/rt_kern_conv.h"

struct rt__cc {
    rt_plan *p;
    char *err;
    size_t errlen;
    int64_t B;
};

static uint64_t rt__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int rt__cerr(rt__cc *cc, const rt__node *nd, int code, const char *fmt, ...)
{
    char msg[RT__ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (cc->errlen) {
        if (nd) snprintf(cc->err, cc->errlen, "node '%s': %s", nd->name, msg);
        else snprintf(cc->err, cc->errlen, "%s", msg);
    }
    return code;
}

int64_t rt__cc_batch(const rt__cc *cc) { return cc->B; }

const rt_attr *rt__attr(const rt__node *nd, const char *name)
{
    for (int i = 0; i < nd->n_attr; i++)
        if (strcmp(nd->attrs[i].name, name) == 0) return &nd->attrs[i];
    return NULL;
}

static const char *rt__attr_kind_name(rt_attr_kind k)
{
    static const char *n[] = {"int", "float", "string", "ints", "floats"};
    return (unsigned)k < 5 ? n[k] : "?";
}

static const rt_attr *rt__attr_of(rt__cc *cc, const rt__node *nd,
                                  const char *name, rt_attr_kind want,
                                  rt_attr_kind alt, int *ok)
{
    const rt_attr *a = rt__attr(nd, name);
    if (a && a->kind != want && a->kind != alt) {
        rt__cerr(cc, nd, RT_EINVAL, "attribute '%s' is %s, expects %s", name,
                 rt__attr_kind_name(a->kind), rt__attr_kind_name(want));
        *ok = 0;
        return NULL;
    }
    return a;
}

int64_t rt__attr_int(rt__cc *cc, const rt__node *nd, const char *name,
                     int64_t def, int *ok)
{
    const rt_attr *a = rt__attr_of(cc, nd, name, RT_ATTR_INT, RT_ATTR_INT, ok);
    return a ? a->i : def;
}

double rt__attr_float(rt__cc *cc, const rt__node *nd, const char *name,
                      double def, int *ok)
{
    const rt_attr *a = rt__attr_of(cc, nd, name, RT_ATTR_FLOAT, RT_ATTR_INT, ok);
    if (!a) return def;
    return a->kind == RT_ATTR_INT ? (double)a->i : a->f;
}

const char *rt__attr_str(rt__cc *cc, const rt__node *nd, const char *name,
                         const char *def, int *ok)
{
    const rt_attr *a = rt__attr_of(cc, nd, name, RT_ATTR_STR, RT_ATTR_STR, ok);
    return a ? a->s : def;
}

int rt__attr_ints(rt__cc *cc, const rt__node *nd, const char *name,
                  int64_t *out, int max, int *ok)
{
    const rt_attr *a = rt__attr_of(cc, nd, name, RT_ATTR_INTS, RT_ATTR_INT, ok);
    if (!a) return -1;
    if (a->kind == RT_ATTR_INT) {
        if (max > 0) out[0] = a->i;
        return 1;
    }
    for (int i = 0; i < a->n && i < max; i++) out[i] = a->ints[i];
    return a->n;
}

/* ------------------------------------------------------------ name lookup */

typedef struct rt__names {
    const char **key;
    int *val;
    uint64_t mask;
} rt__names;

static int rt__names_init(rt__names *m, rt__arena *A, int n)
{
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2) cap *= 2;
    m->key = rt__arena_alloc(A, sizeof(char *) * cap);
    m->val = rt__arena_alloc(A, sizeof(int) * cap);
    m->mask = cap - 1;
    return m->key && m->val ? 0 : RT_ENOMEM;
}

/* returns the existing value, or inserts v and returns -1 */
static int rt__names_put(rt__names *m, const char *k, int v)
{
    uint64_t h = XXH3_64bits(k, strlen(k)) & m->mask;
    while (m->key[h]) {
        if (strcmp(m->key[h], k) == 0) return m->val[h];
        h = (h + 1) & m->mask;
    }
    m->key[h] = k;
    m->val[h] = v;
    return -1;
}

static int rt__names_get(const rt__names *m, const char *k)
{
    uint64_t h = XXH3_64bits(k, strlen(k)) & m->mask;
    while (m->key[h]) {
        if (strcmp(m->key[h], k) == 0) return m->val[h];
        h = (h + 1) & m->mask;
    }
    return -1;
}

/* ------------------------------------------------------------ config check */

static int rt__check_config(rt__cc *cc, const rt_train_config *c)
{
    if (c->batch_size < 1 || c->batch_size > RT__MAX_BATCH)
        return rt__cerr(cc, NULL, RT_EINVAL, "batch_size %d outside 1..%d",
                        c->batch_size, RT__MAX_BATCH);
    if (c->loss < RT_LOSS_SPARSE_CE || c->loss > RT_LOSS_LOGCOSH)
        return rt__cerr(cc, NULL, RT_EINVAL, "unknown loss %d", (int)c->loss);
    if (c->opt < RT_OPT_SGD || c->opt > RT_OPT_RMSPROP)
        return rt__cerr(cc, NULL, RT_EINVAL, "unknown optimizer %d", (int)c->opt);
    if ((unsigned)c->sched > RT_SCHED_WARMUP_COSINE)
        return rt__cerr(cc, NULL, RT_EINVAL, "unknown lr schedule %d", (int)c->sched);
    if (!isfinite(c->lr) || c->lr < 0)
        return rt__cerr(cc, NULL, RT_EINVAL, "learning rate %g invalid", c->lr);
    if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1))
        return rt__cerr(cc, NULL, RT_EINVAL, "beta1/beta2 must be in [0, 1)");
    if (!(c->eps > 0) || !isfinite(c->eps))
        return rt__cerr(cc, NULL, RT_EINVAL, "epsilon %g must be > 0", c->eps);
    if (!(c->momentum >= 0 && c->momentum < 1))
        return rt__cerr(cc, NULL, RT_EINVAL, "momentum %g outside [0, 1)", c->momentum);
    if (!(c->rho >= 0 && c->rho < 1))
        return rt__cerr(cc, NULL, RT_EINVAL, "rho %g outside [0, 1)", c->rho);
    if (!(c->clip_norm >= 0) || !isfinite(c->clip_norm))
        return rt__cerr(cc, NULL, RT_EINVAL, "clip_norm %g invalid", c->clip_norm);
    if (!(c->weight_decay >= 0) || !isfinite(c->weight_decay))
        return rt__cerr(cc, NULL, RT_EINVAL, "weight_decay %g invalid", c->weight_decay);
    if (c->sched == RT_SCHED_STEP && (c->step_size == 0 || !(c->gamma > 0)))
        return rt__cerr(cc, NULL, RT_EINVAL, "step schedule needs step_size > 0, gamma > 0");
    if ((c->sched == RT_SCHED_COSINE || c->sched == RT_SCHED_WARMUP_COSINE) &&
        c->total_steps == 0)
        return rt__cerr(cc, NULL, RT_EINVAL, "cosine schedule needs total_steps > 0");
    if ((c->sched == RT_SCHED_LINEAR_WARMUP || c->sched == RT_SCHED_WARMUP_COSINE) &&
        c->warmup_steps == 0)
        return rt__cerr(cc, NULL, RT_EINVAL, "warmup schedule needs warmup_steps > 0");
    if (c->sched == RT_SCHED_WARMUP_COSINE && c->warmup_steps >= c->total_steps)
        return rt__cerr(cc, NULL, RT_EINVAL, "warmup_steps must be < total_steps");
    if (c->label_dtype != RT_I32 && c->label_dtype != RT_F32)
        return rt__cerr(cc, NULL, RT_EDTYPE, "label dtype must be i32 or f32");
    if (c->label_ndim < 0 || c->label_ndim > RT_MAX_DIMS)
        return rt__cerr(cc, NULL, RT_EINVAL, "label rank %d outside 0..%d",
                        c->label_ndim, RT_MAX_DIMS);
    for (int i = 0; i < c->label_ndim; i++)
        if (c->label_dims[i] <= 0 || c->label_dims[i] > RT__MAX_NUMEL)
            return rt__cerr(cc, NULL, RT_ESHAPE, "label dim %d is %lld", i,
                            (long long)c->label_dims[i]);
    return 0;
}

/* ----------------------------------------------------------- memory plan */

typedef struct rt__buf {
    uint64_t size;   /* bytes, aligned */
    int t0, t1;      /* live interval, inclusive */
    uint64_t off;
    int placed;
} rt__buf;

static int rt__buf_cmp(const void *a, const void *b)
{
    const rt__buf *x = *(rt__buf *const *)a, *y = *(rt__buf *const *)b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return x->t0 - y->t0;
}

static int rt__off_cmp(const void *a, const void *b)
{
    const rt__buf *x = *(rt__buf *const *)a, *y = *(rt__buf *const *)b;
    return x->off < y->off ? -1 : x->off > y->off;
}

static uint64_t rt__plan_memory(rt__buf *bufs, int n, uint64_t *naive,
                                rt__buf **order, rt__buf **live)
{
    uint64_t peak = 0;
    *naive = 0;
    for (int i = 0; i < n; i++) {
        order[i] = &bufs[i];
        *naive += bufs[i].size;
    }
    qsort(order, (size_t)n, sizeof *order, rt__buf_cmp);
    for (int i = 0; i < n; i++) {
        rt__buf *b = order[i];
        int nl = 0;
        for (int j = 0; j < i; j++) {
            rt__buf *o = order[j];
            if (o->t0 <= b->t1 && b->t0 <= o->t1) live[nl++] = o;
        }
        qsort(live, (size_t)nl, sizeof *live, rt__off_cmp);
        uint64_t off = 0;
        for (int j = 0; j < nl; j++) {
            if (live[j]->off >= off + b->size) break;
            if (live[j]->off + live[j]->size > off) off = live[j]->off + live[j]->size;
        }
        b->off = off;
        b->placed = 1;
        if (off + b->size > peak) peak = off + b->size;
    }
    return peak;
}

/* ---------------------------------------------------------------- compile */

static const char *rt__dtype_name(rt_dtype dt)
{
    switch (dt) {
    case RT_F32: return "f32";
    case RT_I32: return "i32";
    case RT_I64: return "i64";
    case RT_U8: return "u8";
    }
    return "?";
}

static uint64_t rt__align_bytes(uint64_t n)
{
    return (n + RT__ALIGN - 1) & ~(uint64_t)(RT__ALIGN - 1);
}

/* Per-entry compile state */
typedef struct rt__ent {
    int node;        /* index into the topological node array, -1 if none */
    int alias;       /* entry this one reads through after fusion */
    int needed;
    int rg;          /* requires grad */
    int param;       /* index into p->params, -1 */
    int val_buf, grad_buf; /* rt__buf index, -1 */
    int grad_written;
    int consumers;
} rt__ent;

static int rt__compile(const rt_graph *g, const rt_train_config *cfg,
                       rt_plan *p, rt__cc *cc)
{
    rt__arena *A = &p->arena;
    const int n = g->n;
    const int64_t B = cfg->batch_size;
    int rc;

    if ((rc = rt__check_config(cc, cfg)) < 0) return rc;
    if (n == 0) return rt__cerr(cc, NULL, RT_EGRAPH, "graph is empty");
    /* entry indices key the initializer RNG streams (RT__STREAM_INIT + i) */
    if (n > (1 << 20))
        return rt__cerr(cc, NULL, RT_ETOOBIG, "graph has %d entries, max %d", n, 1 << 20);

    rt__ent *E = rt__arena_alloc(A, sizeof *E * (size_t)n);
    rt__shape *shape = rt__arena_alloc(A, sizeof *shape * (size_t)n);
    p->entry_name = rt__arena_alloc(A, sizeof(char *) * (size_t)n);
    rt__names names;
    if (!E || !shape || !p->entry_name || rt__names_init(&names, A, n) < 0)
        return RT_ENOMEM;
    p->n_entries = n;

    /* names: unique across inputs, params and nodes */
    int input = -1, n_inputs = 0, n_nodes = 0, n_params = 0;
    for (int i = 0; i < n; i++) {
        const rt__entry *e = &g->e[i];
        if (!(p->entry_name[i] = rt__arena_strdup(A, e->name))) return RT_ENOMEM;
        if (rt__names_put(&names, p->entry_name[i], i) >= 0)
            return rt__cerr(cc, NULL, RT_EGRAPH, "duplicate name '%s'", e->name);
        E[i].node = E[i].param = E[i].val_buf = E[i].grad_buf = -1;
        E[i].alias = i;
        if (e->kind == RT__T_INPUT) {
            n_inputs++;
            input = i;
        } else if (e->kind == RT__T_NODE) {
            n_nodes++;
        } else {
            n_params++;
        }
    }
    if (n_inputs != 1)
        return rt__cerr(cc, NULL, RT_EGRAPH, "graph has %d data inputs; exactly one is supported",
                        n_inputs);

    /* the data input: dims[0] is the batch */
    {
        const rt__entry *e = &g->e[input];
        if (e->dt != RT_F32)
            return rt__cerr(cc, NULL, RT_EDTYPE, "input '%s' is %s; the data input must be f32",
                            e->name, rt__dtype_name(e->dt));
        if (e->shape.ndim < 1)
            return rt__cerr(cc, NULL, RT_ESHAPE, "input '%s' needs a batch dim", e->name);
        if (e->shape.d[0] != RT_BATCH && e->shape.d[0] != B)
            return rt__cerr(cc, NULL, RT_ESHAPE,
                            "input '%s': batch dim %lld is neither RT_BATCH nor batch_size %lld",
                            e->name, (long long)e->shape.d[0], (long long)B);
        rt__shape s = {.ndim = e->shape.ndim - 1, .batched = 1};
        int64_t numel = B;
        for (int i = 1; i < e->shape.ndim; i++) {
            s.d[i - 1] = e->shape.d[i];
            if (e->shape.d[i] <= 0)
                return rt__cerr(cc, NULL, RT_ESHAPE, "input '%s': dim %d is %lld",
                                e->name, i, (long long)e->shape.d[i]);
            if (__builtin_mul_overflow(numel, e->shape.d[i], &numel) ||
                numel > RT__MAX_NUMEL)
                return rt__cerr(cc, NULL, RT_EOVERFLOW, "input '%s': batch of %lld is too large",
                                e->name, (long long)B);
        }
        shape[input] = s;
        p->in_shape = s;
        p->in_numel = rt__shape_numel(&s);
    }

    /* parameters: trainable first so their gradients form one flat block */
    p->params = rt__arena_alloc(A, sizeof(rt__param) * (size_t)(n_params ? n_params : 1));
    if (!p->params) return RT_ENOMEM;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n; i++) {
            const rt__entry *e = &g->e[i];
            if (e->kind != RT__T_PARAM || e->trainable != (pass == 0)) continue;
            rt__param *pr = &p->params[p->n_params];
            int64_t numel = 1;
            for (int d = 0; d < e->shape.ndim; d++) {
                if (e->shape.d[d] <= 0)
                    return rt__cerr(cc, NULL, RT_ESHAPE, "param '%s': dim %d is %lld",
                                    e->name, d, (long long)e->shape.d[d]);
                if (__builtin_mul_overflow(numel, e->shape.d[d], &numel) ||
                    numel > RT__MAX_NUMEL)
                    return rt__cerr(cc, NULL, RT_EOVERFLOW, "param '%s': more than %lld elements",
                                    e->name, (long long)RT__MAX_NUMEL);
            }
            pr->name = p->entry_name[i];
            pr->shape = e->shape;
            pr->shape.batched = 0;
            pr->numel = rt__shape_numel(&pr->shape);
            pr->trainable = e->trainable;
            pr->init = e->init;
            pr->entry = i;
            if (e->init < RT_INIT_DEFAULT || e->init > RT_INIT_HE_UNIFORM)
                return rt__cerr(cc, NULL, RT_EINVAL, "param '%s': unknown initializer %d",
                                e->name, (int)e->init);
            if (e->value) {
                pr->value = rt__arena_memdup(A, e->value, sizeof(float) * (size_t)pr->numel);
                if (!pr->value) return RT_ENOMEM;
            }
            /* 16-float alignment keeps every parameter on its own lines */
            int64_t sz = (pr->numel + 15) & ~(int64_t)15;
            pr->off = p->param_floats;
            if (pr->trainable) {
                pr->goff = p->train_floats;
                p->train_floats += sz;
            } else {
                pr->goff = -1;
            }
            p->param_floats += sz;
            if (p->param_floats > RT__MAX_NUMEL)
                return rt__cerr(cc, NULL, RT_EOVERFLOW, "parameters exceed %lld floats",
                                (long long)RT__MAX_NUMEL);
            E[i].param = p->n_params;
            shape[i] = pr->shape;
            p->n_params++;
        }
    }

    /* nodes: op, arity, inputs resolve */
    rt__node *tmp = rt__arena_alloc(A, sizeof(rt__node) * (size_t)(n_nodes ? n_nodes : 1));
    int *tmp_of = rt__arena_alloc(A, sizeof(int) * (size_t)n);
    if (!tmp || !tmp_of) return RT_ENOMEM;
    int k = 0;
    for (int i = 0; i < n; i++) {
        const rt__entry *e = &g->e[i];
        tmp_of[i] = -1;
        if (e->kind != RT__T_NODE) continue;
        rt__node *nd = &tmp[k];
        tmp_of[i] = k++;
        nd->name = p->entry_name[i];
        nd->id = i;
        nd->op = rt__op_find(e->op);
        if (!nd->op)
            return rt__cerr(cc, nd, RT_EUNKNOWN_OP, "unknown op '%s'", e->op);
        if (e->n_in < nd->op->min_in || e->n_in > nd->op->max_in || e->n_in > RT__MAX_IN)
            return rt__cerr(cc, nd, RT_EGRAPH, "%s takes %d..%d inputs, got %d",
                            nd->op->name, nd->op->min_in, nd->op->max_in, e->n_in);
        nd->n_in = e->n_in;
        for (int j = 0; j < e->n_in; j++) {
            int src = rt__names_get(&names, e->in[j]);
            if (src < 0)
                return rt__cerr(cc, nd, RT_EGRAPH, "input '%s' is not defined", e->in[j]);
            if (src == i)
                return rt__cerr(cc, nd, RT_ECYCLE, "node reads its own output");
            nd->in[j] = src;
            nd->in_name[j] = p->entry_name[src];
        }
        nd->n_attr = e->n_attr;
        nd->attrs = e->attrs; /* copied below */
        rt_attr *at = rt__arena_alloc(A, sizeof(rt_attr) * (size_t)(e->n_attr ? e->n_attr : 1));
        if (!at) return RT_ENOMEM;
        for (int j = 0; j < e->n_attr; j++) {
            at[j] = e->attrs[j];
            at[j].name = rt__arena_strdup(A, e->attrs[j].name);
            if (!at[j].name) return RT_ENOMEM;
            if (at[j].kind == RT_ATTR_STR && !(at[j].s = rt__arena_strdup(A, e->attrs[j].s)))
                return RT_ENOMEM;
            if (at[j].kind == RT_ATTR_INTS && at[j].n &&
                !(at[j].ints = rt__arena_memdup(A, e->attrs[j].ints, sizeof(int64_t) * (size_t)at[j].n)))
                return RT_ENOMEM;
            if (at[j].kind == RT_ATTR_FLOATS && at[j].n &&
                !(at[j].floats = rt__arena_memdup(A, e->attrs[j].floats, sizeof(float) * (size_t)at[j].n)))
                return RT_ENOMEM;
        }
        nd->attrs = at;
    }

    /* topological order by iterative DFS; a grey node met again is a cycle */
    p->nodes = rt__arena_alloc(A, sizeof(rt__node) * (size_t)(n_nodes ? n_nodes : 1));
    unsigned char *color = rt__arena_alloc(A, (size_t)n);
    int *stack = rt__arena_alloc(A, sizeof(int) * (size_t)n * 2);
    if (!p->nodes || !color || !stack) return RT_ENOMEM;
    int n_topo = 0;
    for (int s = 0; s < n; s++) {
        if (tmp_of[s] < 0 || color[s]) continue;
        int sp = 0;
        stack[sp++] = s;
        stack[sp++] = 0;
        color[s] = 1;
        while (sp) {
            int v = stack[sp - 2], j = stack[sp - 1];
            const rt__node *nd = &tmp[tmp_of[v]];
            if (j < nd->n_in) {
                stack[sp - 1]++;
                int u = nd->in[j];
                if (tmp_of[u] < 0) continue;
                if (color[u] == 1)
                    return rt__cerr(cc, nd, RT_ECYCLE, "cycle through '%s'",
                                    p->entry_name[u]);
                if (color[u] == 0) {
                    color[u] = 1;
                    stack[sp++] = u;
                    stack[sp++] = 0;
                }
            } else {
                color[v] = 2;
                E[v].node = n_topo;
                p->nodes[n_topo++] = *nd;
                sp -= 2;
            }
        }
    }
    p->n_nodes = n_topo;

    /* shape and dtype inference in order; every node is checked, needed or not */
    for (int i = 0; i < n_topo; i++) {
        rt__node *nd = &p->nodes[i];
        for (int j = 0; j < nd->n_in; j++) {
            const rt__entry *src = &g->e[nd->in[j]];
            nd->in_dt[j] = src->dt;
            if (src->dt != RT_F32)
                return rt__cerr(cc, nd, RT_EDTYPE, "input '%s' is %s, expects f32",
                                nd->in_name[j], rt__dtype_name(src->dt));
            nd->in_shape[j] = &shape[nd->in[j]];
        }
        if ((rc = nd->op->infer(cc, nd)) < 0) return rc;
        if (!p->backend->supports_op(nd->op, nd))
            return rt__cerr(cc, nd, RT_EUNIMPLEMENTED, "%s has no %s kernel",
                            nd->op->name, p->backend->name);
        int64_t numel = nd->out.batched ? B : 1;
        for (int d = 0; d < nd->out.ndim; d++) {
            if (nd->out.d[d] <= 0)
                return rt__cerr(cc, nd, RT_ESHAPE, "output dim %d is %lld", d,
                                (long long)nd->out.d[d]);
            if (__builtin_mul_overflow(numel, nd->out.d[d], &numel) || numel > RT__MAX_NUMEL)
                return rt__cerr(cc, nd, RT_EOVERFLOW, "output is larger than %lld elements",
                                (long long)RT__MAX_NUMEL);
        }
        shape[nd->id] = nd->out;
    }

    /* the output */
    int out = -1;
    if (g->output) {
        out = rt__names_get(&names, g->output);
        if (out < 0)
            return rt__cerr(cc, NULL, RT_EGRAPH, "output '%s' is not defined", g->output);
        if (E[out].node < 0)
            return rt__cerr(cc, NULL, RT_EGRAPH, "output '%s' is not a node", g->output);
    } else {
        for (int i = n - 1; i >= 0 && out < 0; i--)
            if (E[i].node >= 0) out = i;
        if (out < 0) return rt__cerr(cc, NULL, RT_EGRAPH, "graph has no nodes");
    }
    if (!shape[out].batched)
        return rt__cerr(cc, &p->nodes[E[out].node], RT_ESHAPE,
                        "the output does not depend on the batch");

    /* which nodes the output needs */
    for (int i = n_topo - 1; i >= 0; i--) {
        const rt__node *nd = &p->nodes[i];
        if (nd->id == out) E[nd->id].needed = 1;
        if (!E[nd->id].needed) continue;
        for (int j = 0; j < nd->n_in; j++) {
            E[nd->in[j]].needed = 1;
            E[nd->in[j]].consumers++;
        }
    }

    /* fusion: Dense -> Relu/Sigmoid/Tanh when the Dense output has no other
     * reader; the activation then runs inside the GEMM's output loop */
    for (int i = 0; i < n_topo; i++) {
        rt__node *nd = &p->nodes[i];
        if (!E[nd->id].needed || nd->n_in != 1) continue;
        int act = nd->op == &rt__op_relu ? RT__ACT_RELU
                  : nd->op == &rt__op_sigmoid ? RT__ACT_SIGMOID
                  : nd->op == &rt__op_tanh ? RT__ACT_TANH : 0;
        int src = nd->in[0];
        if (nd->op == &rt__op_maxpool2d && E[src].node >= 0 && E[src].consumers == 1 &&
            src != out && p->nodes[E[src].node].op == &rt__op_conv2d &&
            rt_kern_conv2d_fuse_maxpool(&p->nodes[E[src].node], nd)) {
            /* Conv2D -> MaxPool2D (non-overlapping): the convolution pools
             * its output chunk by chunk (rt_kern_conv.h) */
            shape[src] = p->nodes[E[src].node].out;
            E[nd->id].alias = src;
            E[nd->id].needed = 0;
            continue;
        }
        if (!act || E[src].node < 0 || E[src].consumers != 1 || src == out) continue;
        rt__node *dn = &p->nodes[E[src].node];
        if (dn->op != &rt__op_dense || dn->act) continue;
        dn->act = act;
        dn->scratch_per_sample = dn->out.batched ? rt__shape_numel(&dn->out) : 0;
        dn->scratch_fixed = dn->out.batched ? 0 : rt__shape_numel(&dn->out);
        E[nd->id].alias = src;
        E[nd->id].needed = 0;
        /* the Dense node now produces the activation's value under its name */
    }
    int out_e = E[out].alias;
    for (int i = 0; i < n_topo; i++) {
        rt__node *nd = &p->nodes[i];
        for (int j = 0; j < nd->n_in; j++) {
            nd->in[j] = E[nd->in[j]].alias;
            nd->in_shape[j] = &shape[nd->in[j]];
        }
    }

    /* compact to the needed nodes */
    int m = 0;
    for (int i = 0; i < n_topo; i++) {
        if (!E[p->nodes[i].id].needed) continue;
        p->nodes[m] = p->nodes[i];
        E[p->nodes[m].id].node = m;
        m++;
    }
    for (int i = 0; i < n_topo; i++)
        if (!E[p->nodes[i].id].needed) E[p->nodes[i].id].node = -1;
    /* entries of dropped nodes must not be found again */
    for (int i = 0; i < n; i++)
        if (g->e[i].kind == RT__T_NODE && !E[i].needed) E[i].node = -1;
    for (int i = 0; i < m; i++) E[p->nodes[i].id].node = i;
    p->n_nodes = m;
    p->out_shape = shape[out_e];

    /* (Sparse) CE on a Softmax's probabilities: Keras computes it from the
     * Softmax's input (its TF backend finds the logits behind a Softmax),
     * which is exact where clipping probabilities is not, and it lets the
     * loss write the logits' gradient directly (softmax + loss backward in
     * one pass). The Softmax still runs: predictions are probabilities. */
    int sm_in = -1;
    {
        const rt__node *on = &p->nodes[E[out_e].node];
        if (on->op == &rt__op_softmax && !cfg->from_logits &&
            (cfg->loss == RT_LOSS_SPARSE_CE || cfg->loss == RT_LOSS_CE))
            sm_in = on->in[0];
    }

    /* the loss against the output */
    rt__lossinfo *L = &p->loss;
    L->kind = cfg->loss;
    L->from_logits = cfg->from_logits != 0 || sm_in >= 0;
    L->softmax_fused = sm_in >= 0;
    L->out_numel = rt__shape_numel(&p->out_shape);
    L->classes = p->out_shape.ndim ? p->out_shape.d[p->out_shape.ndim - 1] : 1;
    L->rows = L->out_numel / L->classes;
    L->lab_numel = 1;
    for (int i = 0; i < cfg->label_ndim; i++) L->lab_numel *= cfg->label_dims[i];
    L->lab_dt = cfg->label_dtype;
    L->acc = (cfg->metrics & RT_METRIC_ACCURACY) != 0;
    if ((rc = rt__loss_check(L, cfg, cc->err, cc->errlen)) < 0) return rc;
    if (__builtin_mul_overflow(L->lab_numel, B, &(int64_t){0}) || L->lab_numel * B > RT__MAX_NUMEL)
        return rt__cerr(cc, NULL, RT_EOVERFLOW, "labels too large");

    /* requires-grad */
    for (int i = 0; i < n; i++)
        if (E[i].param >= 0) E[i].rg = p->params[E[i].param].trainable;
    for (int i = 0; i < m; i++) {
        rt__node *nd = &p->nodes[i];
        for (int j = 0; j < nd->n_in; j++)
            if (E[nd->in[j]].rg && !((nd->op->no_grad_in >> j) & 1u)) E[nd->id].rg = 1;
    }

    /* buffers and calls */
    int max_bufs = 2 + 4 * m + 2;
    rt__buf *bufs = rt__arena_alloc(A, sizeof *bufs * (size_t)max_bufs);
    p->calls = rt__arena_alloc(A, sizeof(rt__call) * (size_t)(2 * m + 1));
    rt__buf **order = rt__arena_alloc(A, sizeof *order * (size_t)max_bufs * 2);
    if (!bufs || !p->calls || !order) return RT_ENOMEM;
    int nb = 0;
    const int t_loss = 1 + m;
#define RT__NEWBUF(bytes, t)                                                  \
    (bufs[nb] = (rt__buf){.size = rt__align_bytes(bytes), .t0 = (t), .t1 = (t)}, nb++)
    int x_buf = RT__NEWBUF((uint64_t)B * (uint64_t)p->in_numel * 4, 0);
    int lab_buf = RT__NEWBUF((uint64_t)B * (uint64_t)L->lab_numel * 4, 0);
    bufs[lab_buf].t1 = t_loss;
    E[input].val_buf = x_buf;
    int *scr_buf = rt__arena_alloc(A, sizeof(int) * (size_t)(2 * m + 1));
    if (!scr_buf) return RT_ENOMEM;

    uint64_t flops = 0;
    for (int i = 0; i < m; i++) {
        rt__node *nd = &p->nodes[i];
        const int t = 1 + i;
        uint64_t bytes = (uint64_t)rt__numel_n(&nd->out, B) * 4;
        E[nd->id].val_buf = RT__NEWBUF(bytes, t);
        for (int j = 0; j < nd->n_in; j++) {
            int vb = E[nd->in[j]].val_buf;
            if (vb >= 0 && bufs[vb].t1 < t) bufs[vb].t1 = t;
        }
        scr_buf[i] = -1;
        int64_t scr = nd->scratch_per_sample * B + nd->scratch_fixed;
        if (scr > 0) scr_buf[i] = RT__NEWBUF((uint64_t)scr * 4, t);
        rt__call *c = &p->calls[i];
        c->nd = nd;
        p->backend->kernels(nd->op, nd, &c->fn, &(rt__kfn){0});
    }
    bufs[E[out_e].val_buf].t1 = t_loss;
    const int loss_e = sm_in >= 0 ? sm_in : out_e; /* the value the loss reads */
    if (bufs[E[loss_e].val_buf].t1 < t_loss) bufs[E[loss_e].val_buf].t1 = t_loss;
    p->n_fwd = m;

    /* backward, reverse topological order */
    int nbwd = 0;
    if (E[loss_e].rg) {
        E[loss_e].grad_buf = RT__NEWBUF(bufs[E[loss_e].val_buf].size, t_loss);
        E[loss_e].grad_written = 1;
    }
    for (int i = m - 1; i >= 0; i--) {
        rt__node *nd = &p->nodes[i];
        rt__ent *en = &E[nd->id];
        unsigned need_dx = 0;
        for (int j = 0; j < nd->n_in; j++)
            if (E[nd->in[j]].rg && !((nd->op->no_grad_in >> j) & 1u)) need_dx |= 1u << j;
        flops += nd->op->flops(nd, B, en->rg && en->grad_written ? need_dx : 0);
        if (!en->rg || !en->grad_written) continue;
        const int t = 2 + m + nbwd;
        rt__call *c = &p->calls[m + nbwd];
        c->nd = nd;
        c->bwd = 1;
        rt__kfn fwd_unused;
        p->backend->kernels(nd->op, nd, &fwd_unused, &c->fn);
        bufs[en->grad_buf].t1 = t;
        int needs_out = nd->op->bwd_needs_out || nd->act;
        if (needs_out) bufs[en->val_buf].t1 = t;
        for (int j = 0; j < nd->n_in; j++) {
            rt__ent *src = &E[nd->in[j]];
            if (((nd->op->bwd_needs_in >> j) & 1u) && src->val_buf >= 0 &&
                bufs[src->val_buf].t1 < t)
                bufs[src->val_buf].t1 = t;
            if (!((need_dx >> j) & 1u)) continue;
            if (src->grad_written) c->accum |= 1u << j;
            src->grad_written = 1;
            if (src->param < 0 && src->grad_buf < 0) {
                uint64_t bytes = (uint64_t)rt__numel_n(&shape[nd->in[j]], B) * 4;
                src->grad_buf = RT__NEWBUF(bytes, t);
            }
        }
        scr_buf[m + nbwd] = -1;
        int64_t scr = nd->scratch_per_sample * B + nd->scratch_fixed;
        if (scr > 0) scr_buf[m + nbwd] = RT__NEWBUF((uint64_t)scr * 4, t);
        nbwd++;
    }
    p->n_bwd = nbwd;
    RT_ASSERT(nb <= max_bufs);
#undef RT__NEWBUF

    uint64_t naive = 0;
    p->arena_bytes = rt__plan_memory(bufs, nb, &naive, order, order + nb);

    /* resolve refs */
#define RT__AREF(bi) ((rt__ref){.space = RT__SP_ARENA, .off = bufs[bi].off})
    p->x_buf = RT__AREF(x_buf);
    p->lab_buf = RT__AREF(lab_buf);
    p->out_val = RT__AREF(E[out_e].val_buf);
    p->out_grad = E[out_e].grad_buf >= 0 ? RT__AREF(E[out_e].grad_buf) : (rt__ref){0};
    p->loss_in = RT__AREF(E[loss_e].val_buf);
    p->loss_grad = E[loss_e].grad_written && E[loss_e].grad_buf >= 0
                       ? RT__AREF(E[loss_e].grad_buf) : (rt__ref){0};
    for (int ci = 0; ci < m + nbwd; ci++) {
        rt__call *c = &p->calls[ci];
        const rt__node *nd = c->nd;
        const rt__ent *en = &E[nd->id];
        c->y = RT__AREF(en->val_buf);
        if (c->bwd) c->dy = RT__AREF(en->grad_buf);
        if (scr_buf[ci] >= 0) c->scratch = RT__AREF(scr_buf[ci]);
        for (int j = 0; j < nd->n_in; j++) {
            const rt__ent *src = &E[nd->in[j]];
            if (src->param >= 0) {
                const rt__param *pr = &p->params[src->param];
                c->x[j] = (rt__ref){.space = RT__SP_PARAM, .off = (uint64_t)pr->off};
                if (c->bwd && pr->trainable && !((nd->op->no_grad_in >> j) & 1u))
                    c->dx[j] = (rt__ref){.space = RT__SP_GRAD, .off = (uint64_t)pr->goff};
            } else {
                c->x[j] = RT__AREF(src->val_buf);
                if (c->bwd && src->rg && !((nd->op->no_grad_in >> j) & 1u))
                    c->dx[j] = RT__AREF(src->grad_buf);
            }
        }
    }
#undef RT__AREF

    /* the report */
    rt_compile_report *r = &p->rep;
    for (int i = 0; i < p->n_params; i++) {
        r->param_count += (uint64_t)p->params[i].numel;
        if (p->params[i].trainable) r->trainable_param_count += (uint64_t)p->params[i].numel;
    }
    uint64_t per_param = cfg->opt == RT_OPT_SGD ? 4 : cfg->opt == RT_OPT_RMSPROP ? 6 : 12;
    flops += per_param * r->trainable_param_count;
    flops += 8ull * (uint64_t)L->out_numel * (uint64_t)B; /* loss fwd+bwd */
    r->flops_per_step = flops;
    r->arena_bytes = p->arena_bytes;
    r->naive_bytes = naive;
    int nstate = cfg->opt == RT_OPT_SGD ? (cfg->momentum > 0 ? 1 : 0)
                 : cfg->opt == RT_OPT_RMSPROP ? 1 : 2;
    r->param_bytes = 4ull * ((uint64_t)p->param_floats + (uint64_t)p->train_floats * (1 + nstate));
    r->n_nodes = (uint32_t)n_nodes;
    r->n_kernels = (uint32_t)(m + nbwd + 3); /* + gather, loss, optimizer */
    p->gemm_scratch_floats = RT_KERN_GEMM_SCRATCH;
    return 0;
}

int rt_plan_compile(const rt_graph *g, const rt_train_config *cfg,
                    rt_plan **out, rt_compile_report *rep, char *err,
                    size_t errlen)
{
    char dummy[RT__ERRLEN];
    if (!err || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = '\0';
    if (out) *out = NULL;
    if (!g || !cfg || !out) {
        snprintf(err, errlen, "graph, config and out must not be NULL");
        return RT_EINVAL;
    }
    uint64_t t0 = rt__now_ns();
    rt_plan *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return RT_ENOMEM;
    }
    atomic_init(&p->refs, 1);
    p->cfg = *cfg;
    p->backend = &rt__backend_cpu;
    rt__cc cc = {.p = p, .err = err, .errlen = errlen, .B = cfg->batch_size};
    int rc = rt__compile(g, cfg, p, &cc);
    if (rc < 0) {
        if (rc == RT_ENOMEM && !err[0]) snprintf(err, errlen, "out of memory");
        rt_plan_release(p);
        return rc;
    }
    p->rep.compile_ns = rt__now_ns() - t0;
    if (rep) *rep = p->rep;
    *out = p;
    return 0;
}

void rt_plan_retain(rt_plan *p)
{
    if (p) atomic_fetch_add(&p->refs, 1);
}

void rt_plan_release(rt_plan *p)
{
    if (!p) return;
    if (atomic_fetch_sub(&p->refs, 1) != 1) return;
    rt__arena_free(&p->arena);
    free(p);
}

const rt_compile_report *rt_plan_report(const rt_plan *p) { return p ? &p->rep : NULL; }
const rt_train_config *rt_plan_config(const rt_plan *p) { return p ? &p->cfg : NULL; }

static int rt__copy_shape(const rt__shape *s, int64_t dims[RT_MAX_DIMS])
{
    for (int i = 0; i < s->ndim; i++) dims[i] = s->d[i];
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
    if (!p) return RT_EINVAL;
    for (int i = 0; i < p->cfg.label_ndim; i++) dims[i] = p->cfg.label_dims[i];
    return p->cfg.label_ndim;
}

int rt_plan_n_params(const rt_plan *p) { return p ? p->n_params : RT_EINVAL; }

int rt_plan_param_info(const rt_plan *p, int i, const char **name,
                       int64_t dims[RT_MAX_DIMS], int *trainable)
{
    if (!p || i < 0 || i >= p->n_params) return RT_EINVAL;
    const rt__param *pr = &p->params[i];
    if (name) *name = pr->name;
    if (trainable) *trainable = pr->trainable;
    if (dims) rt__copy_shape(&pr->shape, dims);
    return pr->shape.ndim;
}

/* ------------------------------------------------------------------- key */

static void rt__h(XXH3_state_t *s, const void *p, size_t n) { XXH3_128bits_update(s, p, n); }
static void rt__hi(XXH3_state_t *s, int64_t v) { rt__h(s, &v, sizeof v); }
static void rt__hs(XXH3_state_t *s, const char *str)
{
    /* length-prefixed so ("ab","c") and ("a","bc") differ */
    size_t n = str ? strlen(str) : 0;
    rt__hi(s, (int64_t)n);
    if (n) rt__h(s, str, n);
}
static void rt__hf(XXH3_state_t *s, double v) { rt__h(s, &v, sizeof v); }

int rt_plan_key(const rt_graph *g, const rt_train_config *c, uint8_t key[16])
{
    if (!g || !c || !key) return RT_EINVAL;
    XXH3_state_t *s = XXH3_createState();
    if (!s) return RT_ENOMEM;
    XXH3_128bits_reset(s);
    rt__hs(s, "rtrain-plan");
    rt__hi(s, RT_ENGINE_VERSION);
    rt__hs(s, rt__backend_cpu.name);
    rt__hi(s, g->n);
    for (int i = 0; i < g->n; i++) {
        const rt__entry *e = &g->e[i];
        rt__hi(s, e->kind);
        rt__hs(s, e->name);
        rt__hi(s, e->dt);
        rt__hi(s, e->shape.ndim);
        for (int d = 0; d < e->shape.ndim; d++) rt__hi(s, e->shape.d[d]);
        if (e->kind == RT__T_PARAM) {
            rt__hi(s, e->init);
            rt__hi(s, e->trainable);
            rt__hi(s, e->value != NULL);
            if (e->value)
                rt__h(s, e->value, sizeof(float) * (size_t)rt__shape_numel(&e->shape));
        }
        if (e->kind == RT__T_NODE) {
            rt__hs(s, e->op);
            rt__hi(s, e->n_in);
            for (int j = 0; j < e->n_in; j++) rt__hs(s, e->in[j]);
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
                    if (a->n) rt__h(s, a->ints, sizeof(int64_t) * (size_t)a->n);
                    break;
                case RT_ATTR_FLOATS:
                    rt__hi(s, a->n);
                    if (a->n) rt__h(s, a->floats, sizeof(float) * (size_t)a->n);
                    break;
                }
            }
        }
    }
    rt__hs(s, g->output);
    /* config, field by field (struct padding is not hashed) */
    rt__hi(s, c->loss); rt__hi(s, c->from_logits); rt__hi(s, c->opt);
    rt__hf(s, c->lr); rt__hf(s, c->momentum); rt__hi(s, c->nesterov);
    rt__hf(s, c->beta1); rt__hf(s, c->beta2); rt__hf(s, c->eps);
    rt__hf(s, c->weight_decay); rt__hf(s, c->rho); rt__hf(s, c->clip_norm);
    rt__hi(s, c->sched); rt__hi(s, c->step_size); rt__hf(s, c->gamma);
    rt__hi(s, c->warmup_steps); rt__hi(s, c->total_steps); rt__hf(s, c->min_lr);
    rt__hi(s, c->metrics); rt__hi(s, c->batch_size); rt__hi(s, (int64_t)c->seed);
    rt__hi(s, c->shuffle); rt__hi(s, c->label_dtype); rt__hi(s, c->label_ndim);
    for (int i = 0; i < c->label_ndim && i < RT_MAX_DIMS; i++) rt__hi(s, c->label_dims[i]);
    XXH128_hash_t h = XXH3_128bits_digest(s);
    XXH3_freeState(s);
    XXH128_canonical_t can;
    XXH128_canonicalFromHash(&can, h);
    memcpy(key, can.digest, 16);
    return 0;
}

/* ---------------------------------------------------------------- backend */

static int rt__cpu_supports(const rt__op_def *op, const rt__node *nd)
{
    (void)nd;
    return op->cpu.fwd != NULL && op->cpu.bwd != NULL;
}

static void rt__cpu_kernels(const rt__op_def *op, const rt__node *nd,
                            rt__kfn *fwd, rt__kfn *bwd)
{
    (void)nd;
    *fwd = op->cpu.fwd;
    *bwd = op->cpu.bwd;
}

static void rt__cpu_run(const rt__call *calls, const rt__kargs *args, int n)
{
    for (int i = 0; i < n; i++) calls[i].fn(&args[i]);
}

const rt__backend rt__backend_cpu = {
    .name = "cpu",
    .supports_op = rt__cpu_supports,
    .kernels = rt__cpu_kernels,
    .run = rt__cpu_run,
};
