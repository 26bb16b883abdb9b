/*
 * rt_compile.c - graph -> plan, as named passes run in order from one
 * table (rt__passes below). Each pass is a function over the compile state
 * (rt__cc) with its contract above it; the report gives each pass's time.
 *
 *   validate        config, names, the data input, parameters, ops, arity,
 *                   inputs, topological order (cycles)
 *   infer_shapes    per-op shape inference and typed parameters, overflow
 *                   checks; the output and the nodes it needs
 *   fuse            a zero Pad into the Conv2D reading it (padding),
 *                   then the backend's fusion rules (Dense+activation,
 *                   Conv2D+MaxPool2D, Softmax+crossentropy); the loss
 *   backward        which values need gradients; forward calls in
 *                   topological order, backward calls in reverse, each
 *                   gradient overwritten by its first writer and
 *                   accumulated by the rest (rt__call.accum)
 *   choose_kernels  the backend's kernel per call, and the kernel's derived
 *                   sizes (scratch), computed once
 *   plan_memory     liveness on the step timeline and one arena
 *   report          parameter counts, FLOPs, bytes
 *
 * Fusion runs before the backward pass, so a fused pair gets one backward
 * call; kernels are chosen before memory is planned, because a kernel's
 * scratch is part of the plan.
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

#include "rt_clock.h"
#include "rt_engine_impl.h"

/* Per-entry compile state */
typedef struct rt__ent {
    int node;  /* index into the topological node array, -1 if none */
    int alias; /* entry this one reads through after fusion */
    int needed;
    int rg;                /* requires grad */
    int param;             /* index into p->params, -1 */
    int val_buf, grad_buf; /* rt__buf index, -1 */
    int grad_written;
    int consumers;
} rt__ent;

typedef struct rt__names {
    const char **key;
    int *val;
    uint64_t mask;
} rt__names;

typedef struct rt__buf {
    uint64_t size; /* bytes, aligned */
    int t0, t1;    /* live interval, inclusive */
    uint64_t off;
} rt__buf;

/* The compile state the passes share; each pass's contract says which
 * fields it reads and which it sets. */
struct rt__cc {
    rt_plan *p;
    const rt_graph *g;
    const rt_train_config *cfg;
    char *err;
    size_t errlen;
    int64_t B;
    rt__arena *A;
    int n;            /* graph entries */
    rt__ent *E;       /* per entry */
    rt__shape *shape; /* per entry: the value's shape */
    rt__names names;  /* entry name -> index */
    int input;        /* the data input's entry */
    int n_graph_nodes;
    int out;           /* the output entry, as named */
    int out_e, loss_e; /* what the output and the loss read after fusion */
    /* each output's loss mask entry (rt_graph_set_loss_masks; [0] for
     * one output), or -1 */
    int mask_e[RT_MAX_HEADS];
    unsigned *need_dx; /* per plan node: inputs that get a gradient */
    uint64_t flops;
    /* plan_memory */
    rt__buf *bufs;
    int nb;
    int *scr_buf; /* per call: its scratch buffer or -1 */
    int *ws_buf;  /* per node: its workspace buffer or -1 */
    uint64_t naive;
};

int64_t rt__cc_batch(const rt__cc *cc) { return cc->B; }

int rt__cerr(rt__cc *cc, const rt__node *nd, int code, const char *fmt, ...)
{
    char msg[RT__ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (cc->errlen) {
        if (nd)
            snprintf(cc->err, cc->errlen, "node '%s': %s", nd->name, msg);
        else
            snprintf(cc->err, cc->errlen, "%s", msg);
    }
    return code;
}

const rt_attr *rt__attr(const rt__node *nd, const char *name)
{
    for (int i = 0; i < nd->n_attr; i++)
        if (strcmp(nd->attrs[i].name, name) == 0)
            return &nd->attrs[i];
    return NULL;
}

static const char *rt__attr_kind_name(rt_attr_kind k)
{
    static const char *n[] = {"int", "float", "string", "ints", "floats"};
    return (unsigned)k < 5 ? n[k] : "?";
}

static const rt_attr *rt__attr_of(rt__cc *cc, const rt__node *nd, const char *name,
                                  rt_attr_kind want, rt_attr_kind alt, int *ok)
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

int64_t rt__attr_int(rt__cc *cc, const rt__node *nd, const char *name, int64_t def, int *ok)
{
    const rt_attr *a = rt__attr_of(cc, nd, name, RT_ATTR_INT, RT_ATTR_INT, ok);
    return a ? a->i : def;
}

double rt__attr_float(rt__cc *cc, const rt__node *nd, const char *name, double def, int *ok)
{
    const rt_attr *a = rt__attr_of(cc, nd, name, RT_ATTR_FLOAT, RT_ATTR_INT, ok);
    if (!a)
        return def;
    return a->kind == RT_ATTR_INT ? (double)a->i : a->f;
}

const char *rt__attr_str(rt__cc *cc, const rt__node *nd, const char *name, const char *def, int *ok)
{
    const rt_attr *a = rt__attr_of(cc, nd, name, RT_ATTR_STR, RT_ATTR_STR, ok);
    return a ? a->s : def;
}

int rt__attr_ints(rt__cc *cc, const rt__node *nd, const char *name, int64_t *out, int max, int *ok)
{
    const rt_attr *a = rt__attr_of(cc, nd, name, RT_ATTR_INTS, RT_ATTR_INT, ok);
    if (!a)
        return -1;
    if (a->kind == RT_ATTR_INT) {
        if (max > 0)
            out[0] = a->i;
        return 1;
    }
    for (int i = 0; i < a->n && i < max; i++)
        out[i] = a->ints[i];
    return a->n;
}

/* ------------------------------------------------------------ name lookup */

static int rt__names_init(rt__names *m, rt__arena *A, int n)
{
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2)
        cap *= 2;
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
        if (strcmp(m->key[h], k) == 0)
            return m->val[h];
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
        if (strcmp(m->key[h], k) == 0)
            return m->val[h];
        h = (h + 1) & m->mask;
    }
    return -1;
}

/* ------------------------------------------------------------ config check */

static int rt__check_config(rt__cc *cc, const rt_train_config *c)
{
    if (c->batch_size < 1 || c->batch_size > RT__MAX_BATCH)
        return rt__cerr(cc, NULL, RT_EINVAL, "batch_size %d outside 1..%d", c->batch_size,
                        RT__MAX_BATCH);
    if (c->loss < RT_LOSS_SPARSE_CE || c->loss > RT_LOSS_LAST)
        return rt__cerr(cc, NULL, RT_EINVAL, "unknown loss %d", (int)c->loss);
    if ((unsigned)c->precision > RT_PREC_BF16)
        return rt__cerr(cc, NULL, RT_EINVAL, "unknown precision %d", c->precision);
    if ((unsigned)c->reduction > RT_REDUCE_SUM)
        return rt__cerr(cc, NULL, RT_EINVAL, "unknown reduction %d", (int)c->reduction);
    if (!(c->label_smoothing >= 0 && c->label_smoothing <= 1))
        return rt__cerr(cc, NULL, RT_EINVAL, "label_smoothing %g outside [0, 1]",
                        (double)c->label_smoothing);
    if (!(c->loss_beta >= 0) || isinf(c->loss_beta) ||
        (c->loss == RT_LOSS_HUBER && c->loss_beta == 0))
        return rt__cerr(cc, NULL, RT_EINVAL, "%s %g must be finite and > 0",
                        c->loss == RT_LOSS_HUBER ? "huber delta" : "loss beta",
                        (double)c->loss_beta);
    if (c->n_class_weight < 0 || (c->n_class_weight && !c->class_weight) || c->n_pos_weight < 0 ||
        (c->n_pos_weight && !c->pos_weight))
        return rt__cerr(cc, NULL, RT_EINVAL, "class_weight or pos_weight without values");
    for (int i = 0; i < c->n_class_weight; i++)
        if (!(c->class_weight[i] >= 0) || isinf(c->class_weight[i]))
            return rt__cerr(cc, NULL, RT_EINVAL, "class_weight[%d] = %g must be finite and >= 0", i,
                            (double)c->class_weight[i]);
    for (int i = 0; i < c->n_pos_weight; i++)
        if (!(c->pos_weight[i] >= 0) || isinf(c->pos_weight[i]))
            return rt__cerr(cc, NULL, RT_EINVAL, "pos_weight[%d] = %g must be finite and >= 0", i,
                            (double)c->pos_weight[i]);
    if (!RT_LOSS_IS_TORCH(c->loss) && (c->reduction != RT_REDUCE_MEAN || c->label_smoothing > 0 ||
                                       c->n_class_weight || c->n_pos_weight))
        return rt__cerr(cc, NULL, RT_EINVAL,
                        "reduction, label_smoothing, class_weight and "
                        "pos_weight go with PyTorch's losses; %s is Keras'",
                        rt_loss_name(c->loss));
    if (c->n_class_weight && c->loss != RT_LOSS_CROSS_ENTROPY && c->loss != RT_LOSS_NLL)
        return rt__cerr(cc, NULL, RT_EINVAL, "class_weight goes with cross_entropy and nll_loss");
    if (c->label_smoothing > 0 && c->loss != RT_LOSS_CROSS_ENTROPY)
        return rt__cerr(cc, NULL, RT_EINVAL, "label_smoothing goes with cross_entropy");
    if (c->n_pos_weight && c->loss != RT_LOSS_BCE_LOGITS)
        return rt__cerr(cc, NULL, RT_EINVAL, "pos_weight goes with bce_with_logits");
    if (c->opt < RT_OPT_SGD || c->opt > RT_OPT_LAST)
        return rt__cerr(cc, NULL, RT_EINVAL, "unknown optimizer %d", (int)c->opt);
    if ((unsigned)c->sched > RT_SCHED_EXP)
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
    if (c->opt == RT_OPT_FTRL &&
        (!(c->ftrl_power <= 0 && c->ftrl_power > -1e6f) || !(c->ftrl_init >= 0) ||
         !(c->ftrl_l1 >= 0) || !(c->ftrl_l2 >= 0) || !(c->ftrl_shrink >= 0) ||
         !(c->ftrl_beta >= 0) || isinf(c->ftrl_init) || isinf(c->ftrl_l1) || isinf(c->ftrl_l2) ||
         isinf(c->ftrl_shrink) || isinf(c->ftrl_beta)))
        return rt__cerr(cc, NULL, RT_EINVAL,
                        "ftrl: learning_rate_power must be <= 0, "
                        "initial_accumulator_value, l1, l2, l2_shrinkage and beta finite and "
                        ">= 0");
    if (c->opt == RT_OPT_FTRL && !(c->lr > 0))
        return rt__cerr(cc, NULL, RT_EINVAL, "ftrl needs a learning rate > 0");
    if (!(c->clip_norm >= 0) || !isfinite(c->clip_norm))
        return rt__cerr(cc, NULL, RT_EINVAL, "clip_norm %g invalid", c->clip_norm);
    if (!(c->weight_decay >= 0) || !isfinite(c->weight_decay))
        return rt__cerr(cc, NULL, RT_EINVAL, "weight_decay %g invalid", c->weight_decay);
    if (!(c->l2_decay >= 0) || !isfinite(c->l2_decay))
        return rt__cerr(cc, NULL, RT_EINVAL, "l2 weight decay %g invalid", c->l2_decay);
    if (!(c->dampening >= 0 && c->dampening <= 1))
        return rt__cerr(cc, NULL, RT_EINVAL, "dampening %g outside [0, 1]", c->dampening);
    if (c->dampening > 0 && c->nesterov)
        return rt__cerr(cc, NULL, RT_EINVAL, "nesterov momentum needs dampening 0 (as torch)");
    if ((c->sched == RT_SCHED_STEP || c->sched == RT_SCHED_EXP) &&
        (c->step_size == 0 || !(c->gamma > 0)))
        return rt__cerr(cc, NULL, RT_EINVAL, "%s schedule needs step_size > 0, gamma > 0",
                        c->sched == RT_SCHED_EXP ? "exponential" : "step");
    if ((c->sched == RT_SCHED_COSINE || c->sched == RT_SCHED_WARMUP_COSINE) && c->total_steps == 0)
        return rt__cerr(cc, NULL, RT_EINVAL, "cosine schedule needs total_steps > 0");
    if ((c->sched == RT_SCHED_LINEAR_WARMUP || c->sched == RT_SCHED_WARMUP_COSINE) &&
        c->warmup_steps == 0)
        return rt__cerr(cc, NULL, RT_EINVAL, "warmup schedule needs warmup_steps > 0");
    if (c->sched == RT_SCHED_WARMUP_COSINE && c->warmup_steps >= c->total_steps)
        return rt__cerr(cc, NULL, RT_EINVAL, "warmup_steps must be < total_steps");
    if (c->label_dtype != RT_I32 && c->label_dtype != RT_F32)
        return rt__cerr(cc, NULL, RT_EDTYPE, "label dtype must be i32 or f32");
    if (c->label_ndim < 0 || c->label_ndim > RT_MAX_DIMS)
        return rt__cerr(cc, NULL, RT_EINVAL, "label rank %d outside 0..%d", c->label_ndim,
                        RT_MAX_DIMS);
    for (int i = 0; i < c->label_ndim; i++)
        if (c->label_dims[i] <= 0 || c->label_dims[i] > RT__MAX_NUMEL)
            return rt__cerr(cc, NULL, RT_ESHAPE, "label dim %d is %lld", i,
                            (long long)c->label_dims[i]);
    return 0;
}

/* ----------------------------------------------------------- memory plan */

/* Up to this many buffers the placement is the exact greedy one (each
 * buffer scans the placed ones in offset order: quadratic, ~10 ms here).
 * Deeper graphs (a few thousand layers up) use rt__place_sweep, linear. */
#define RT__PLACE_EXACT_MAX 8192

static int rt__buf_cmp(const void *a, const void *b)
{
    const rt__buf *x = *(rt__buf *const *)a, *y = *(rt__buf *const *)b;
    if (x->size != y->size)
        return x->size < y->size ? 1 : -1;
    return x->t0 - y->t0;
}

/* Largest first, each at the lowest offset where no placed buffer whose
 * interval overlaps collides. placed[] is kept sorted by offset, so the
 * first gap is found in one scan. Returns the peak. */
static uint64_t rt__place_greedy(rt__buf *bufs, int n, rt__buf **order, rt__buf **placed)
{
    uint64_t peak = 0;
    for (int i = 0; i < n; i++)
        order[i] = &bufs[i];
    qsort(order, (size_t)n, sizeof *order, rt__buf_cmp);
    for (int i = 0; i < n; i++) {
        rt__buf *b = order[i];
        uint64_t off = 0;
        for (int j = 0; j < i; j++) {
            const rt__buf *o = placed[j];
            if (o->t0 > b->t1 || b->t0 > o->t1)
                continue;
            if (o->off >= off + b->size)
                break;
            if (o->off + o->size > off)
                off = o->off + o->size;
        }
        b->off = off;
        int k = i;
        while (k > 0 && placed[k - 1]->off > off) {
            placed[k] = placed[k - 1];
            k--;
        }
        placed[k] = b;
        if (off + b->size > peak)
            peak = off + b->size;
    }
    return peak;
}

/* Linear: walk the timeline; a buffer whose interval ended is free, and a
 * new buffer takes the most recently freed block of its exact size, or
 * the top of the arena. Deep graphs repeat a few sizes, so the blocks are
 * reused as the greedy placement would. idx: 3 n ints of scratch. */
static uint64_t rt__place_sweep(rt__buf *bufs, int n, int T, int *idx)
{
    int *by_t0 = idx, *by_t1 = idx + n, *next = idx + 2 * n;
    int *cnt = calloc((size_t)T + 2, sizeof *cnt);
    /* free blocks: size -> stack of buffers, open addressing */
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2)
        cap *= 2;
    uint64_t *hk = calloc(cap, sizeof *hk);
    int *hv = malloc(cap * sizeof *hv);
    if (!cnt || !hk || !hv) {
        free(cnt), free(hk), free(hv);
        return UINT64_MAX;
    }
    /* counting sorts by t0 and by t1, stable */
    for (int pass = 0; pass < 2; pass++) {
        int *out = pass ? by_t1 : by_t0;
        memset(cnt, 0, sizeof *cnt * ((size_t)T + 2));
        for (int i = 0; i < n; i++)
            cnt[(pass ? bufs[i].t1 : bufs[i].t0) + 1]++;
        for (int t = 0; t <= T; t++)
            cnt[t + 1] += cnt[t];
        for (int i = 0; i < n; i++)
            out[cnt[pass ? bufs[i].t1 : bufs[i].t0]++] = i;
    }
    uint64_t top = 0;
    int f = 0;
    for (int a = 0; a < n; a++) {
        rt__buf *b = &bufs[by_t0[a]];
        /* free everything whose interval ended before b starts */
        for (; f < n && bufs[by_t1[f]].t1 < b->t0; f++) {
            const int i = by_t1[f];
            uint64_t h = (bufs[i].size * 0x9e3779b97f4a7c15ull) & (cap - 1);
            while (hk[h] && hk[h] != bufs[i].size)
                h = (h + 1) & (cap - 1);
            if (!hk[h]) {
                hk[h] = bufs[i].size;
                hv[h] = -1;
            }
            next[i] = hv[h];
            hv[h] = i;
        }
        uint64_t h = (b->size * 0x9e3779b97f4a7c15ull) & (cap - 1);
        while (hk[h] && hk[h] != b->size)
            h = (h + 1) & (cap - 1);
        if (hk[h] && hv[h] >= 0) {
            b->off = bufs[hv[h]].off;
            hv[h] = next[hv[h]];
        } else {
            b->off = top;
            top += b->size;
        }
    }
    free(cnt);
    free(hk);
    free(hv);
    return top;
}

/* ------------------------------------------------------------------ passes */

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

/* names unique across inputs, params and nodes; exactly one data input */
static int rt__validate_names(rt__cc *cc, int *n_params)
{
    rt_plan *p = cc->p;
    int n_inputs = 0;
    *n_params = 0;
    for (int i = 0; i < cc->n; i++) {
        const rt__entry *e = &cc->g->e[i];
        if (!(p->entry_name[i] = rt__arena_strdup(cc->A, e->name)))
            return RT_ENOMEM;
        if (rt__names_put(&cc->names, p->entry_name[i], i) >= 0)
            return rt__cerr(cc, NULL, RT_EGRAPH, "duplicate name '%s'", e->name);
        rt__ent *E = &cc->E[i];
        E->node = E->param = E->val_buf = E->grad_buf = -1;
        E->alias = i;
        if (e->kind == RT__T_INPUT) {
            n_inputs++;
            cc->input = i;
        } else if (e->kind == RT__T_NODE) {
            cc->n_graph_nodes++;
        } else {
            (*n_params)++;
        }
    }
    if (n_inputs != 1)
        return rt__cerr(cc, NULL, RT_EGRAPH, "graph has %d data inputs; exactly one is supported",
                        n_inputs);
    return 0;
}

/* the data input: f32, dims[0] is the batch */
static int rt__validate_input(rt__cc *cc)
{
    const rt__entry *e = &cc->g->e[cc->input];
    const int64_t B = cc->B;
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
            return rt__cerr(cc, NULL, RT_ESHAPE, "input '%s': dim %d is %lld", e->name, i,
                            (long long)e->shape.d[i]);
        if (__builtin_mul_overflow(numel, e->shape.d[i], &numel) || numel > RT__MAX_NUMEL)
            return rt__cerr(cc, NULL, RT_EOVERFLOW, "input '%s': batch of %lld is too large",
                            e->name, (long long)B);
    }
    cc->shape[cc->input] = s;
    cc->p->in_shape = s;
    cc->p->input_entry = cc->input;
    cc->p->in_numel = rt__shape_numel(&s);
    return 0;
}

/* rt_param_opts: a known initializer with usable numbers, regularizer
 * coefficients >= 0, a constraint whose axes name the parameter's dims */
static int rt__validate_param_opts(rt__cc *cc, const rt__entry *e)
{
    const rt_param_opts *o = &e->opts;
    const double f[8] = {o->scale, o->a, o->b, o->l1, o->l2, o->c_min, o->c_max, o->c_rate};
    for (int i = 0; i < 8; i++)
        if (!isfinite(f[i]))
            return rt__cerr(cc, NULL, RT_EINVAL, "param '%s': a non-finite option", e->name);
    if (o->init < RT_INIT_DEFAULT || o->init > RT_INIT_IDENTITY || (unsigned)o->mode > RT_FAN_AVG ||
        (unsigned)o->dist > RT_DIST_UNIFORM)
        return rt__cerr(cc, NULL, RT_EINVAL, "param '%s': unknown initializer %d", e->name,
                        (int)o->init);
    if ((o->init == RT_INIT_VARIANCE_SCALING && !(o->scale > 0)) ||
        (o->init == RT_INIT_UNIFORM && !(o->a <= o->b)) ||
        ((o->init == RT_INIT_NORMAL || o->init == RT_INIT_TRUNCATED_NORMAL) && !(o->b >= 0)))
        return rt__cerr(cc, NULL, RT_EINVAL, "param '%s': bad initializer settings", e->name);
    if (o->init == RT_INIT_IDENTITY && e->shape.ndim != 2)
        return rt__cerr(cc, NULL, RT_EINVAL, "param '%s': Identity needs a rank-2 parameter",
                        e->name);
    if (o->init == RT_INIT_ORTHOGONAL && e->shape.ndim < 2)
        return rt__cerr(cc, NULL, RT_EINVAL, "param '%s': Orthogonal needs rank >= 2", e->name);
    if (!(o->l1 >= 0) || !(o->l2 >= 0))
        return rt__cerr(cc, NULL, RT_EINVAL, "param '%s': negative regularizer", e->name);
    if ((unsigned)o->constraint > RT_CONSTRAINT_MIN_MAX_NORM)
        return rt__cerr(cc, NULL, RT_EINVAL, "param '%s': unknown constraint %d", e->name,
                        (int)o->constraint);
    if (o->constraint != RT_CONSTRAINT_NONE && o->constraint != RT_CONSTRAINT_NON_NEG &&
        (o->c_axes >> e->shape.ndim) != 0)
        return rt__cerr(cc, NULL, RT_EINVAL, "param '%s': constraint axis outside its %d dims",
                        e->name, e->shape.ndim);
    if ((o->constraint == RT_CONSTRAINT_MAX_NORM && !(o->c_max >= 0)) ||
        (o->constraint == RT_CONSTRAINT_MIN_MAX_NORM &&
         !(o->c_min >= 0 && o->c_min <= o->c_max && o->c_rate >= 0 && o->c_rate <= 1)))
        return rt__cerr(cc, NULL, RT_EINVAL, "param '%s': bad constraint bounds", e->name);
    return 0;
}

/* one parameter: dims, initializer, its place in the parameter block */
static int rt__validate_param(rt__cc *cc, int i)
{
    rt_plan *p = cc->p;
    const rt__entry *e = &cc->g->e[i];
    rt__param *pr = &p->params[p->n_params];
    int64_t numel = 1;
    for (int d = 0; d < e->shape.ndim; d++) {
        if (e->shape.d[d] <= 0)
            return rt__cerr(cc, NULL, RT_ESHAPE, "param '%s': dim %d is %lld", e->name, d,
                            (long long)e->shape.d[d]);
        if (__builtin_mul_overflow(numel, e->shape.d[d], &numel) || numel > RT__MAX_NUMEL)
            return rt__cerr(cc, NULL, RT_EOVERFLOW, "param '%s': more than %lld elements", e->name,
                            (long long)RT__MAX_NUMEL);
    }
    pr->name = p->entry_name[i];
    pr->shape = e->shape;
    pr->shape.batched = 0;
    pr->numel = rt__shape_numel(&pr->shape);
    pr->trainable = e->trainable;
    pr->init = e->init;
    pr->entry = i;
    if (e->init < RT_INIT_DEFAULT || e->init > RT_INIT_HE_UNIFORM)
        return rt__cerr(cc, NULL, RT_EINVAL, "param '%s': unknown initializer %d", e->name,
                        (int)e->init);
    if (e->has_opts) {
        int rc = rt__validate_param_opts(cc, e);
        if (rc < 0)
            return rc;
        pr->opts = e->opts;
        if (e->opts.init != RT_INIT_DEFAULT)
            pr->init = e->opts.init;
    }
    if (e->view.n) {
        const rt__view *v = &e->view;
        int64_t un = 1, vnum = 1;
        unsigned seen = 0;
        for (int k = 0; k < v->user.ndim; k++) {
            if (v->user.d[k] <= 0 || __builtin_mul_overflow(un, v->user.d[k], &un))
                un = -1;
            if (un < 0)
                break;
        }
        for (int k = 0; k < v->n; k++) {
            if (v->d[k] <= 0 || __builtin_mul_overflow(vnum, v->d[k], &vnum))
                vnum = -1;
            if (v->perm[k] < 0 || v->perm[k] >= v->n || (seen >> v->perm[k]) & 1)
                vnum = -1;
            if (vnum < 0)
                break;
            seen |= 1u << v->perm[k];
        }
        if (un != pr->numel || vnum != pr->numel)
            return rt__cerr(cc, NULL, RT_EINVAL,
                            "param '%s': its view does not hold its %lld "
                            "elements in a permutation",
                            e->name, (long long)pr->numel);
        pr->view = *v;
    }
    if (e->value) {
        pr->value = rt__arena_memdup(cc->A, e->value, sizeof(float) * (size_t)pr->numel);
        if (!pr->value)
            return RT_ENOMEM;
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
    cc->E[i].param = p->n_params;
    cc->shape[i] = pr->shape;
    p->n_params++;
    return 0;
}

/* a copy of the entry's attributes in the plan's arena */
static int rt__copy_attrs(rt__cc *cc, rt__node *nd, const rt__entry *e)
{
    rt_attr *at = rt__arena_alloc(cc->A, sizeof(rt_attr) * (size_t)(e->n_attr ? e->n_attr : 1));
    if (!at)
        return RT_ENOMEM;
    for (int j = 0; j < e->n_attr; j++) {
        const rt_attr *s = &e->attrs[j];
        at[j] = *s;
        if (!(at[j].name = rt__arena_strdup(cc->A, s->name)))
            return RT_ENOMEM;
        if (s->kind == RT_ATTR_STR && !(at[j].s = rt__arena_strdup(cc->A, s->s)))
            return RT_ENOMEM;
        if (s->kind == RT_ATTR_INTS && s->n &&
            !(at[j].ints = rt__arena_memdup(cc->A, s->ints, sizeof(int64_t) * (size_t)s->n)))
            return RT_ENOMEM;
        if (s->kind == RT_ATTR_FLOATS && s->n &&
            !(at[j].floats = rt__arena_memdup(cc->A, s->floats, sizeof(float) * (size_t)s->n)))
            return RT_ENOMEM;
    }
    nd->n_attr = e->n_attr;
    nd->attrs = at;
    return 0;
}

/* The nodes' inputs as entry indices, CSR: entry i's at in[off[i]..) */
typedef struct rt__edges {
    const rt__op_def **op; /* per entry: the node's op */
    int *off, *in;
} rt__edges;

/* one node: known op, arity, inputs that exist; appends its inputs */
static int rt__validate_node(rt__cc *cc, int i, rt__edges *ed, int *n_edges)
{
    const rt__entry *e = &cc->g->e[i];
    const rt__node at = {.name = cc->p->entry_name[i]}; /* for messages */
    const rt__op_def *op = rt__op_find(e->op);
    if (!op)
        return rt__cerr(cc, &at, RT_EUNKNOWN_OP, "unknown op '%s'", e->op);
    if (e->n_in < op->min_in || e->n_in > op->max_in || e->n_in > RT__MAX_IN)
        return rt__cerr(cc, &at, RT_EGRAPH, "%s takes %d..%d inputs, got %d", op->name, op->min_in,
                        op->max_in, e->n_in);
    ed->op[i] = op;
    ed->off[i] = *n_edges;
    for (int j = 0; j < e->n_in; j++) {
        int src = rt__names_get(&cc->names, e->in[j]);
        if (src < 0)
            return rt__cerr(cc, &at, RT_EGRAPH, "input '%s' is not defined", e->in[j]);
        if (src == i)
            return rt__cerr(cc, &at, RT_ECYCLE, "node reads its own output");
        ed->in[(*n_edges)++] = src;
    }
    return 0;
}

/* the plan node of entry v, its attributes copied into the plan's arena */
static int rt__make_node(rt__cc *cc, const rt__edges *ed, int v, rt__node *nd)
{
    const rt__entry *e = &cc->g->e[v];
    nd->name = cc->p->entry_name[v];
    nd->id = v;
    nd->op = ed->op[v];
    nd->n_in = e->n_in;
    for (int j = 0; j < e->n_in; j++) {
        nd->in[j] = ed->in[ed->off[v] + j];
        nd->in_name[j] = cc->p->entry_name[nd->in[j]];
    }
    return rt__copy_attrs(cc, nd, e);
}

/* p->nodes in topological order, by iterative DFS over the edges; a grey
 * node met again is a cycle */
static int rt__topo_order(rt__cc *cc, const rt__edges *ed)
{
    rt_plan *p = cc->p;
    const int n = cc->n;
    unsigned char *color = rt__arena_alloc(cc->A, (size_t)n);
    int *stack = rt__arena_alloc(cc->A, sizeof(int) * (size_t)n * 2);
    if (!color || !stack)
        return RT_ENOMEM;
    int n_topo = 0, rc;
    for (int s = 0; s < n; s++) {
        if (!ed->op[s] || color[s])
            continue;
        int sp = 0;
        stack[sp++] = s;
        stack[sp++] = 0;
        color[s] = 1;
        while (sp) {
            int v = stack[sp - 2], j = stack[sp - 1];
            if (j < cc->g->e[v].n_in) {
                stack[sp - 1]++;
                int u = ed->in[ed->off[v] + j];
                if (!ed->op[u])
                    continue;
                if (color[u] == 1) {
                    const rt__node at = {.name = p->entry_name[v]};
                    return rt__cerr(cc, &at, RT_ECYCLE, "cycle through '%s'", p->entry_name[u]);
                }
                if (color[u] == 0) {
                    color[u] = 1;
                    stack[sp++] = u;
                    stack[sp++] = 0;
                }
            } else {
                color[v] = 2;
                cc->E[v].node = n_topo;
                if ((rc = rt__make_node(cc, ed, v, &p->nodes[n_topo++])) < 0)
                    return rc;
                sp -= 2;
            }
        }
    }
    p->n_nodes = n_topo;
    return 0;
}

/* validate: the config is in range; the graph is non-empty and at most
 * 2^20 entries (they key the initializer RNG streams); names are unique;
 * one f32 data input with a batch dim; parameter dims > 0 and under
 * RT__MAX_NUMEL; every node has a known op, its arity, defined inputs;
 * no cycles. Sets: names, E, p->entry_name, p->in_shape, p->params
 * (trainable first, so their gradients form one flat block), p->nodes in
 * topological order with attributes copied into the plan's arena. */
static int rt__pass_validate(rt__cc *cc)
{
    rt_plan *p = cc->p;
    const int n = cc->g->n;
    int rc, n_params;
    if ((rc = rt__check_config(cc, cc->cfg)) < 0)
        return rc;
    if (n == 0)
        return rt__cerr(cc, NULL, RT_EGRAPH, "graph is empty");
    if (n > (1 << 20))
        return rt__cerr(cc, NULL, RT_ETOOBIG, "graph has %d entries, max %d", n, 1 << 20);
    cc->n = n;
    cc->E = rt__arena_alloc(cc->A, sizeof *cc->E * (size_t)n);
    cc->shape = rt__arena_alloc(cc->A, sizeof *cc->shape * (size_t)n);
    p->entry_name = rt__arena_alloc(cc->A, sizeof(char *) * (size_t)n);
    if (!cc->E || !cc->shape || !p->entry_name || rt__names_init(&cc->names, cc->A, n) < 0)
        return RT_ENOMEM;
    p->n_entries = n;
    if ((rc = rt__validate_names(cc, &n_params)) < 0 || (rc = rt__validate_input(cc)) < 0)
        return rc;
    p->params = rt__arena_alloc(cc->A, sizeof(rt__param) * (size_t)(n_params ? n_params : 1));
    if (!p->params)
        return RT_ENOMEM;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++)
            if (cc->g->e[i].kind == RT__T_PARAM && cc->g->e[i].trainable == (pass == 0) &&
                (rc = rt__validate_param(cc, i)) < 0)
                return rc;
    int64_t max_edges = 0;
    for (int i = 0; i < n; i++)
        if (cc->g->e[i].kind == RT__T_NODE)
            max_edges += cc->g->e[i].n_in < RT__MAX_IN ? cc->g->e[i].n_in : RT__MAX_IN;
    rt__edges ed = {
        .op = rt__arena_alloc(cc->A, sizeof *ed.op * (size_t)n),
        .off = rt__arena_alloc(cc->A, sizeof *ed.off * (size_t)n),
        .in = rt__arena_alloc(cc->A, sizeof *ed.in * (size_t)(max_edges + 1)),
    };
    p->nodes = rt__arena_alloc(cc->A, sizeof(rt__node) *
                                          (size_t)(cc->n_graph_nodes ? cc->n_graph_nodes : 1));
    if (!ed.op || !ed.off || !ed.in || !p->nodes)
        return RT_ENOMEM;
    int n_edges = 0;
    for (int i = 0; i < n; i++)
        if (cc->g->e[i].kind == RT__T_NODE && (rc = rt__validate_node(cc, i, &ed, &n_edges)) < 0)
            return rc;
    return rt__topo_order(cc, &ed);
}

/* the output entry: as named, or the last node */
static int rt__find_output(rt__cc *cc)
{
    const rt__ent *E = cc->E;
    int out = -1;
    if (cc->g->output) {
        out = rt__names_get(&cc->names, cc->g->output);
        if (out < 0)
            return rt__cerr(cc, NULL, RT_EGRAPH, "output '%s' is not defined", cc->g->output);
        if (E[out].node < 0)
            return rt__cerr(cc, NULL, RT_EGRAPH, "output '%s' is not a node", cc->g->output);
    } else {
        for (int i = cc->n - 1; i >= 0 && out < 0; i--)
            if (E[i].node >= 0)
                out = i;
        if (out < 0)
            return rt__cerr(cc, NULL, RT_EGRAPH, "graph has no nodes");
    }
    if (!cc->shape[out].batched)
        return rt__cerr(cc, &cc->p->nodes[E[out].node], RT_ESHAPE,
                        "the output does not depend on the batch");
    cc->out = out;
    return 0;
}

/* infer_shapes: in topological order, every node (needed or not) gets its
 * inputs' dtypes (f32 only) and shapes, runs its op's infer (output shape
 * and typed parameters), must be supported by the backend, and has dims
 * > 0 whose product at full batch neither overflows nor passes
 * RT__MAX_NUMEL. Then the output is resolved and the nodes it needs are
 * marked, with each value's reader count (E.needed, E.consumers). */
/* the precision node nd asks for: float32 when the config says so, else
 * its "precision" attribute (a Keras layer's dtype policy), else the
 * config's (the global policy) */
static int rt__node_prec(rt__cc *cc, rt__node *nd)
{
    nd->prec = RT_PREC_F32;
    if (cc->cfg->precision == RT_PREC_F32)
        return 0;
    int ok = 1;
    const char *s = rt__attr_str(cc, nd, "precision", NULL, &ok);
    if (!ok)
        return RT_EINVAL;
    if (s && rt_precision_from_name(s, &nd->prec) < 0)
        return rt__cerr(cc, nd, RT_EINVAL, "precision '%s' is not float32 or mixed_bfloat16", s);
    if (!s && cc->cfg->precision == RT_PREC_BF16)
        nd->prec = RT_PREC_BF16;
    return 0;
}

/* bf16 asked anywhere: the backend must compute it (never float32 while
 * the report says bf16) */
static int rt__check_prec(rt__cc *cc)
{
    const rt_plan *p = cc->p;
    const rt__backend *be = p->backend;
    const rt__node *at = NULL;
    for (int i = 0; i < p->n_nodes && !at; i++)
        if (p->nodes[i].prec == RT_PREC_BF16)
            at = &p->nodes[i];
    if (!at)
        return 0;
    if (!be->precision || !be->kernel_bf16)
        return rt__cerr(cc, at, RT_ESTATE,
                        "mixed_bfloat16: backend '%s' computes float32 only; "
                        "use precision float32",
                        be->name);
    char msg[RT__ERRLEN];
    const int rc = be->precision(be->context, RT_PREC_BF16, msg, sizeof msg);
    if (rc < 0)
        return rt__cerr(cc, at, rc, "%s", msg);
    return 0;
}

/* the kernel entry of nd (absorbing a reader of op fused, or NULL): the
 * backend's bf16 one for a bf16 node whose op has bf16 kernels, else the
 * float32 one */
static const rt__kernel *rt__kern_for(const rt__backend *be, const rt__node *nd,
                                      const rt__op_def *fused, int *bf16)
{
    *bf16 = 0;
    if (nd->prec == RT_PREC_BF16 && be->kernel_bf16 && be->kernel_bf16(be->context, nd, NULL)) {
        *bf16 = 1;
        return be->kernel_bf16(be->context, nd, fused);
    }
    return be->kernel(be->context, nd->op, fused);
}

static int rt__pass_infer_shapes(rt__cc *cc)
{
    rt_plan *p = cc->p;
    const rt__backend *be = p->backend;
    int rc;
    for (int i = 0; i < p->n_nodes; i++) {
        rt__node *nd = &p->nodes[i];
        for (int j = 0; j < nd->n_in; j++) {
            const rt__entry *src = &cc->g->e[nd->in[j]];
            nd->in_dt[j] = src->dt;
            if (src->dt != RT_F32)
                return rt__cerr(cc, nd, RT_EDTYPE, "input '%s' is %s, expects f32", nd->in_name[j],
                                rt__dtype_name(src->dt));
            nd->in_shape[j] = &cc->shape[nd->in[j]];
        }
        nd->bwd_needs_out = nd->op->bwd_needs_out;
        if ((rc = nd->op->infer(cc, nd)) < 0 || (rc = rt__node_prec(cc, nd)) < 0)
            return rc;
        if (!be->supports_op(be->context, nd))
            return rt__cerr(cc, nd, RT_EUNIMPLEMENTED, "%s has no %s kernel", nd->op->name,
                            be->name);
        int64_t numel = nd->out.batched ? cc->B : 1;
        for (int d = 0; d < nd->out.ndim; d++) {
            if (nd->out.d[d] <= 0)
                return rt__cerr(cc, nd, RT_ESHAPE, "output dim %d is %lld", d,
                                (long long)nd->out.d[d]);
            if (__builtin_mul_overflow(numel, nd->out.d[d], &numel) || numel > RT__MAX_NUMEL)
                return rt__cerr(cc, nd, RT_EOVERFLOW, "output is larger than %lld elements",
                                (long long)RT__MAX_NUMEL);
        }
        cc->shape[nd->id] = nd->out;
    }
    if ((rc = rt__check_prec(cc)) < 0 || (rc = rt__find_output(cc)) < 0)
        return rc;
    const int nout = cc->g->n_heads ? cc->g->n_heads : 1;
    if (cc->g->n_masks > nout)
        return rt__cerr(cc, NULL, RT_EGRAPH, "%d loss masks for a model of %d output%s",
                        cc->g->n_masks, nout, nout > 1 ? "s" : "");
    for (int k = 0; k < RT_MAX_HEADS; k++) {
        const char *mn = k < cc->g->n_masks ? cc->g->loss_mask[k] : NULL;
        cc->mask_e[k] = -1;
        if (!mn)
            continue;
        if (cc->g->n_masks != nout)
            return rt__cerr(cc, NULL, RT_EGRAPH,
                            "%d loss mask%s for a model of %d outputs: give one per output "
                            "(rt_graph_set_loss_masks, NULL where unmasked)",
                            cc->g->n_masks, cc->g->n_masks > 1 ? "s" : "", nout);
        const int me = rt__names_get(&cc->names, mn);
        if (me < 0 || cc->E[me].node < 0)
            return rt__cerr(cc, NULL, RT_EGRAPH, "loss mask '%s' is not a node", mn);
        cc->mask_e[k] = me;
        cc->E[me].needed = 1;
    }
    for (int i = p->n_nodes - 1; i >= 0; i--) {
        const rt__node *nd = &p->nodes[i];
        if (nd->id == cc->out)
            cc->E[nd->id].needed = 1;
        if (!cc->E[nd->id].needed)
            continue;
        for (int j = 0; j < nd->n_in; j++) {
            cc->E[nd->in[j]].needed = 1;
            cc->E[nd->in[j]].consumers++;
        }
    }
    return 0;
}

/* PyTorch's losses: where the classes are, which targets, the weights
 * (copied into the plan's arena, so the plan's config owns them) */
static int rt__setup_torch_loss(rt__cc *cc)
{
    rt_plan *p = cc->p;
    rt_train_config *cfg = &p->cfg;
    rt__lossinfo *L = &p->loss;
    const char *nm = rt_loss_name(cfg->loss);
    L->reduction = cfg->reduction;
    L->smoothing = cfg->label_smoothing;
    L->beta = cfg->loss_beta;
    L->ignore_index = cfg->ignore_index;
    const int cls = cfg->loss == RT_LOSS_CROSS_ENTROPY || cfg->loss == RT_LOSS_NLL;
    if (cls) {
        if (p->out_shape.ndim < 1)
            return rt__cerr(cc, NULL, RT_ESHAPE,
                            "%s needs an output of (N, C) or (N, C, d1, "
                            "...); this one has one value per sample",
                            nm);
        /* PyTorch's class axis: dim 1, the first per-sample dim */
        L->classes = p->out_shape.d[0];
        L->inner = L->out_numel / L->classes;
        L->rows = L->inner;
        L->prob_target = cfg->loss == RT_LOSS_CROSS_ENTROPY && cfg->label_dtype == RT_F32;
        if (cfg->loss == RT_LOSS_NLL && cfg->label_dtype != RT_I32)
            return rt__cerr(cc, NULL, RT_EDTYPE, "nll_loss takes class indices (integers)");
        if (L->inner > 1 && (cfg->metrics & ~RT_METRIC_ACCURACY))
            return rt__cerr(cc, NULL, RT_EUNIMPLEMENTED,
                            "%s on (N, C, d1, ...) outputs: "
                            "only the accuracy metric is computed",
                            nm);
    }
    /* targets of the output's shape when none was given: every loss but
     * the class-index ones, as PyTorch's target = input.shape */
    if ((!cls || L->prob_target) && cfg->label_ndim == 0 && L->out_numel > 1) {
        cfg->label_ndim = p->out_shape.ndim;
        for (int i = 0; i < p->out_shape.ndim; i++)
            cfg->label_dims[i] = p->out_shape.d[i];
    }
    if (cfg->n_class_weight) {
        if (cfg->n_class_weight != L->classes)
            return rt__cerr(cc, NULL, RT_ESHAPE,
                            "class_weight has %d values; the output has "
                            "%lld classes",
                            cfg->n_class_weight, (long long)L->classes);
        float *w =
            rt__arena_memdup(cc->A, cfg->class_weight, sizeof(float) * (size_t)cfg->n_class_weight);
        if (!w)
            return RT_ENOMEM;
        cfg->class_weight = L->cw = w;
    } else {
        cfg->class_weight = NULL;
    }
    if (cfg->n_pos_weight) {
        if (cfg->n_pos_weight != 1 && cfg->n_pos_weight != L->classes)
            return rt__cerr(cc, NULL, RT_ESHAPE,
                            "pos_weight has %d values; it needs 1 or one "
                            "per class of the last dim (%lld)",
                            cfg->n_pos_weight, (long long)L->classes);
        float *w =
            rt__arena_memdup(cc->A, cfg->pos_weight, sizeof(float) * (size_t)cfg->n_pos_weight);
        if (!w)
            return RT_ENOMEM;
        cfg->pos_weight = L->pw = w;
        L->n_pw = cfg->n_pos_weight;
    } else {
        cfg->pos_weight = NULL;
    }
    return 0;
}

/* several outputs: one Keras loss per head over its part of the packed
 * output and labels (rt_graph_set_outputs), and each head's own metrics
 * (heads[k].metrics; the config's metrics are not used) */
static int rt__setup_heads(rt__cc *cc)
{
    rt_plan *p = cc->p;
    rt_train_config *cfg = &p->cfg;
    rt__lossinfo *L = &p->loss;
    const int n = cfg->n_heads;
    if (n != cc->g->n_heads)
        return rt__cerr(cc, NULL, RT_EINVAL, "%d losses for a model with %d outputs", n,
                        cc->g->n_heads ? cc->g->n_heads : 1);
    if (cfg->label_dtype != RT_F32)
        return rt__cerr(cc, NULL, RT_EDTYPE,
                        "a model with several outputs takes f32 labels "
                        "(class indices as values)");
    L->head = rt__arena_alloc(cc->A, sizeof *L->head * (size_t)n);
    L->out_off = rt__arena_alloc(cc->A, sizeof(int64_t) * (size_t)n);
    L->lab_off = rt__arena_alloc(cc->A, sizeof(int64_t) * (size_t)n);
    L->weight = rt__arena_alloc(cc->A, sizeof(float) * (size_t)n);
    if (!L->head || !L->out_off || !L->lab_off || !L->weight)
        return RT_ENOMEM;
    memset(L->head, 0, sizeof *L->head * (size_t)n);
    int64_t oo = 0, lo = 0;
    int nvals = 0;
    for (int k = 0; k < n; k++) {
        const char *nm = cc->g->heads[k];
        const struct rt_loss_head *h = &cfg->heads[k];
        const int id = rt__names_get(&cc->names, nm);
        if (id < 0)
            return rt__cerr(cc, NULL, RT_EGRAPH, "output '%s' is not defined", nm);
        if (h->loss < RT_LOSS_SPARSE_CE || h->loss > RT_LOSS_LAST || RT_LOSS_IS_TORCH(h->loss))
            return rt__cerr(cc, NULL, RT_EINVAL,
                            "output '%s': several outputs take Keras' "
                            "losses",
                            nm);
        if (!(h->weight >= 0.0f && h->weight < 1e30f))
            return rt__cerr(cc, NULL, RT_EINVAL,
                            "output '%s': loss weight %g (it must be "
                            ">= 0)",
                            nm, (double)h->weight);
        const rt__shape *sh = &cc->shape[id];
        rt__lossinfo *H = &L->head[k];
        p->head_shape[k] = *sh;
        H->kind = h->loss;
        H->from_logits = h->from_logits != 0;
        H->out_numel = rt__shape_numel(sh);
        H->classes = sh->ndim ? sh->d[sh->ndim - 1] : 1;
        H->rows = H->out_numel / H->classes;
        H->lab_numel = h->loss == RT_LOSS_SPARSE_CE ? H->rows : H->out_numel;
        H->lab_dt = RT_F32;
        char e2[200];
        int rc = rt__loss_check(H, cfg, e2, sizeof e2);
        if (rc < 0)
            return rt__cerr(cc, NULL, rc, "output '%s': %s", nm, e2);
        H->acc = (h->metrics & RT_METRIC_ACCURACY) != 0;
        if ((rc = rt__metrics_check(H, h->metrics, e2, sizeof e2)) < 0)
            return rt__cerr(cc, NULL, rc, "output '%s': %s", nm, e2);
        /* its loss, accuracy and metrics among rt_metrics.values */
        nvals += 1 + __builtin_popcount(h->metrics);
        if (nvals > RT_METRIC_VALUES)
            return rt__cerr(cc, NULL, RT_EINVAL,
                            "more than %d metric values over the "
                            "outputs; ask for fewer metrics",
                            RT_METRIC_VALUES);
        const char *label = cc->g->head_label[k] ? cc->g->head_label[k] : nm;
        if (!(p->head_name[k] = rt__arena_strdup(cc->A, label)))
            return RT_ENOMEM;
        L->out_off[k] = oo;
        L->lab_off[k] = lo;
        L->weight[k] = h->weight;
        oo += H->out_numel;
        lo += H->lab_numel;
    }
    if (oo != L->out_numel)
        return rt__cerr(cc, NULL, RT_EGRAPH,
                        "the outputs have %lld values, the graph's "
                        "output %lld",
                        (long long)oo, (long long)L->out_numel);
    L->n_heads = n;
    L->lab_numel = lo;
    L->lab_dt = RT_F32;
    L->acc = 0;
    cfg->metrics = 0;
    cfg->label_ndim = 1;
    cfg->label_dims[0] = lo;
    int64_t lab_total;
    if (__builtin_mul_overflow(lo, cc->B, &lab_total) || lab_total > RT__MAX_NUMEL)
        return rt__cerr(cc, NULL, RT_EOVERFLOW, "labels too large");
    return 0;
}

/* the loss against the output (after fusion) */
static int rt__setup_loss(rt__cc *cc, int softmax_fused)
{
    rt_plan *p = cc->p;
    const rt_train_config *cfg = cc->cfg;
    rt__lossinfo *L = &p->loss;
    L->kind = cfg->loss;
    L->from_logits = cfg->from_logits != 0 || softmax_fused;
    L->softmax_fused = softmax_fused;
    L->out_numel = rt__shape_numel(&p->out_shape);
    L->classes = p->out_shape.ndim ? p->out_shape.d[p->out_shape.ndim - 1] : 1;
    L->rows = L->out_numel / L->classes;
    int rc;
    L->beta = cfg->loss_beta; /* huber's delta */
    if (cfg->n_heads || cc->g->n_heads)
        return rt__setup_heads(cc);
    if (RT_LOSS_IS_TORCH(cfg->loss) && (rc = rt__setup_torch_loss(cc)) < 0)
        return rc;
    /* categorical (and binary) crossentropy with no label shape given: the
     * labels are one-hot (multi-hot) rows of the output's shape, as Keras
     * takes y_true of y_pred's shape (their dtype stays the caller's: f32,
     * which the RPC defaults to for these losses). The plan's config
     * records it, so rt_plan_label_shape and the data checks see it. */
    if ((cfg->loss == RT_LOSS_CE || cfg->loss == RT_LOSS_BCE) && cfg->label_ndim == 0 &&
        L->out_numel > 1) {
        p->cfg.label_ndim = p->out_shape.ndim;
        for (int i = 0; i < p->out_shape.ndim; i++)
            p->cfg.label_dims[i] = p->out_shape.d[i];
    }
    L->lab_numel = 1;
    for (int i = 0; i < cfg->label_ndim; i++)
        if (__builtin_mul_overflow(L->lab_numel, cfg->label_dims[i], &L->lab_numel) ||
            L->lab_numel > RT__MAX_NUMEL)
            return rt__cerr(cc, NULL, RT_EOVERFLOW, "labels have more than %lld values per sample",
                            (long long)RT__MAX_NUMEL);
    L->lab_dt = cfg->label_dtype;
    L->acc = (cfg->metrics & RT_METRIC_ACCURACY) != 0;
    rc = rt__loss_check(L, cfg, cc->err, cc->errlen);
    if (rc < 0)
        return rc;
    if ((rc = rt__metrics_check(L, cfg->metrics, cc->err, cc->errlen)) < 0)
        return rc;
    int64_t lab_total;
    if (__builtin_mul_overflow(L->lab_numel, cc->B, &lab_total) || lab_total > RT__MAX_NUMEL)
        return rt__cerr(cc, NULL, RT_EOVERFLOW, "labels too large");
    return 0;
}

/* What the output ends in, looking through ops that move values without
 * changing them: a Softmax, a LogSoftmax, a Sigmoid (also HardSigmoid and
 * Dense/Conv2D's own sigmoid activation), or nothing (raw scores). *at gets
 * the node. */
enum { RT__OUT_RAW, RT__OUT_PROB, RT__OUT_LOGPROB, RT__OUT_SIGMOID };
static int rt__out_kind(const rt__cc *cc, int e, const rt__node **at, const rt__node **end)
{
    *at = NULL;
    for (int hops = 0; hops < 64 && cc->E[e].node >= 0; hops++) {
        const rt__node *nd = &cc->p->nodes[cc->E[e].node];
        const rt__op_def *op = nd->op;
        if (!*at)
            *at = nd;
        *end = nd;
        if (op == &rt__op_softmax)
            return RT__OUT_PROB;
        if (op == &rt__op_logsoftmax)
            return RT__OUT_LOGPROB;
        if (op == &rt__op_sigmoid || op == &rt__op_hardsigmoid)
            return RT__OUT_SIGMOID;
        if (op == &rt__op_dense)
            return rt__dense_cp(nd)->act == RT__ACT_SIGMOID ? RT__OUT_SIGMOID : RT__OUT_RAW;
        if (op == &rt__op_conv2d)
            return rt__conv_cp(nd)->act == RT__ACT_SIGMOID ? RT__OUT_SIGMOID : RT__OUT_RAW;
        if (op != &rt__op_identity && op != &rt__op_dropout && op != &rt__op_reshape &&
            op != &rt__op_flatten && op != &rt__op_transpose)
            return RT__OUT_RAW;
        e = nd->in[0];
    }
    return RT__OUT_RAW;
}

/* A loss that reads probabilities, log-probabilities or logits must get
 * them: a probability loss on a LogSoftmax or raw output, a logits loss on
 * a Softmax or Sigmoid, trains to chance and says nothing. Refused,
 * naming the loss that fits, unless the config's loss_check is off. */
static int rt__check_loss_fit_one(rt__cc *cc, int out, rt_loss_kind loss, int from_logits,
                                  const char *head)
{
    const rt__node *at, *end = NULL;
    const int k = rt__out_kind(cc, out, &at, &end);
    if (!at)
        return 0;
    static const char *const ends[] = {"raw scores (no Softmax, LogSoftmax or Sigmoid)",
                                       "a Softmax", "a LogSoftmax", "a Sigmoid"};
    char endn[96] = "";
    if (end != at && k != RT__OUT_RAW)
        snprintf(endn, sizeof endn, " '%.64s'", end->name);
    const char *want = NULL, *fit = NULL;
    const int prob = k == RT__OUT_PROB || k == RT__OUT_SIGMOID;
    switch (loss) {
    case RT_LOSS_SPARSE_CE:
    case RT_LOSS_CE:
        if (!from_logits) {
            want = "probabilities";
            fit = k == RT__OUT_LOGPROB ? "nll_loss"
                  : k == RT__OUT_RAW   ? "cross_entropy (or from_logits)"
                                       : NULL;
        } else {
            want = "logits";
            fit = prob ? (loss == RT_LOSS_CE ? "categorical_crossentropy without from_logits"
                                             : "sparse_categorical_crossentropy without "
                                               "from_logits")
                       : NULL;
        }
        break;
    case RT_LOSS_BCE:
        want = from_logits ? "logits" : "probabilities";
        fit = k == RT__OUT_LOGPROB               ? "nll_loss"
              : !from_logits && k == RT__OUT_RAW ? "bce_with_logits (or from_logits)"
              : from_logits && prob              ? "binary_crossentropy without from_logits"
                                                 : NULL;
        break;
    case RT_LOSS_CROSS_ENTROPY:
        want = "logits";
        fit = k == RT__OUT_PROB      ? "sparse_categorical_crossentropy"
              : k == RT__OUT_SIGMOID ? "binary_cross_entropy"
                                     : NULL;
        break;
    case RT_LOSS_NLL:
        want = "log-probabilities";
        fit = k == RT__OUT_RAW       ? "cross_entropy"
              : k == RT__OUT_PROB    ? "sparse_categorical_crossentropy"
              : k == RT__OUT_SIGMOID ? "binary_cross_entropy"
                                     : NULL;
        break;
    case RT_LOSS_BCE_LOGITS:
        want = "logits";
        fit = prob ? "binary_cross_entropy" : k == RT__OUT_LOGPROB ? "nll_loss" : NULL;
        break;
    case RT_LOSS_BCE_TORCH:
        want = "probabilities";
        fit = k == RT__OUT_RAW ? "bce_with_logits" : k == RT__OUT_LOGPROB ? "nll_loss" : NULL;
        break;
    default: break;
    }
    if (!fit)
        return 0;
    return rt__cerr(cc, at, RT_EINVAL,
                    "the output%s%s ends in %s%s; loss %s reads %s. Use %s, "
                    "or turn the loss check off",
                    head ? " " : "", head ? head : "", ends[k], endn, rt_loss_name(loss), want,
                    fit);
}

static int rt__check_loss_fit(rt__cc *cc)
{
    const rt_train_config *c = cc->cfg;
    if (!c->loss_check)
        return 0;
    if (!c->n_heads)
        return rt__check_loss_fit_one(cc, cc->out, c->loss, c->from_logits, NULL);
    for (int k = 0; k < c->n_heads && k < cc->g->n_heads; k++) {
        const int e = rt__names_get(&cc->names, cc->g->heads[k]);
        int rc;
        if (e >= 0 && (rc = rt__check_loss_fit_one(cc, e, c->heads[k].loss, c->heads[k].from_logits,
                                                   cc->g->heads[k])) < 0)
            return rc;
    }
    return 0;
}

/* rt_compile_pad_fold 0 keeps every Pad a node of its own (the tests'
 * and bench_bf16's unfolded reference); 1 (default) folds as below */
int rt_compile_pad_fold = 1;

/* is entry e an output (the output, a head) or a loss mask? */
static int rt__is_output(const rt__cc *cc, int e)
{
    if (e == cc->out)
        return 1;
    for (int k = 0; k < cc->g->n_heads && k < RT_MAX_HEADS; k++)
        if (rt__names_get(&cc->names, cc->g->heads[k]) == e)
            return 1;
    for (int k = 0; k < RT_MAX_HEADS; k++)
        if (cc->mask_e[k] == e)
            return 1;
    return 0;
}

/* Pad folding (the fuse pass's first step): a needed Pad (constant 0,
 * pads >= 0 on the height and width of an NHWC value only) whose output
 * is read by one Conv2D (dense, grouped or depthwise) as its data input,
 * and nothing else, goes into that convolution's padding: the Conv2D
 * reads the Pad's input, its PT/PL grow by the Pad's top/left and its
 * H/W shrink to the unpadded input's, OH/OW unchanged (so the padding
 * after, (OH-1)*SH + (KH-1)*DH + 1 - H - PT, grows by the Pad's
 * bottom/right, less the rows a stride leaves unread). The same zeros
 * enter every window, so the forward and the weight gradient are the
 * same numbers, and the backward-data's cells that would land in the
 * padding are the ones the Pad's backward dropped. Refused (the Pad
 * stays a node) where the folded padding on a side would reach the
 * dilated window's extent: every kernel then still has each window
 * overlapping the input. The Conv2D keeps the folded pads for the report
 * (rt__node.pad_fold). */
static void rt__fold_pads(rt__cc *cc)
{
    rt_plan *p = cc->p;
    rt__ent *E = cc->E;
    if (!rt_compile_pad_fold)
        return;
    for (int i = 0; i < p->n_nodes; i++) {
        rt__node *cv = &p->nodes[i];
        if (!E[cv->id].needed || cv->op != &rt__op_conv2d)
            continue;
        const int src = cv->in[0];
        if (E[src].node < 0 || E[src].consumers != 1 || rt__is_output(cc, src))
            continue;
        const rt__node *pd = &p->nodes[E[src].node];
        if (pd->op != &rt__op_pad)
            continue;
        const rt__map_params *mp = rt__map_cp(pd);
        const rt__shape *x = pd->in_shape[0];
        if (mp->value != 0.0f || x->ndim != 3 || !x->batched)
            continue;
        int ok = 1;
        int64_t pads[8];
        if (rt__attr_ints(cc, pd, "pads", pads, 8, &ok) != 8 || !ok)
            continue;
        /* (batch, H, W, C) begins, then ends; the batch's are 0 (infer) */
        const int64_t t = pads[1], l = pads[2], b = pads[5], r = pads[6];
        if (pads[3] || pads[7] || t < 0 || l < 0 || b < 0 || r < 0)
            continue;
        rt__conv_params *c = rt__conv_p(cv);
        const int64_t kh = (c->KH - 1) * c->DH + 1, kw = (c->KW - 1) * c->DW + 1;
        const int64_t H = x->d[0], W = x->d[1], PT = c->PT + t, PL = c->PL + l;
        const int64_t PB = (c->OH - 1) * c->SH + kh - H - PT;
        const int64_t PR = (c->OW - 1) * c->SW + kw - W - PL;
        if (PT >= kh || PL >= kw || PB >= kh || PR >= kw)
            continue;
        c->H = H;
        c->W = W;
        c->PT = PT;
        c->PL = PL;
        cv->pad_fold[0] += t;
        cv->pad_fold[1] += l;
        cv->pad_fold[2] += b;
        cv->pad_fold[3] += r;
        cv->in[0] = pd->in[0];
        cv->in_name[0] = pd->in_name[0];
        cv->in_shape[0] = pd->in_shape[0];
        E[src].needed = 0;
        E[src].consumers = 0;
    }
}

/* fuse: each needed node whose only input value comes from a node with no
 * other reader (and that is not the output) is offered to the backend as
 * the pair (producer op, reader op); when the backend has a kernel for the
 * pair and its can_fuse agrees, the producer absorbs the reader (fused,
 * fused_p, out) and the reader's entry reads through to the producer
 * (E.alias). Then the node list is compacted to the needed nodes, inputs
 * are re-pointed through aliases, and the loss is set up: (sparse) CE on
 * a Softmax output reads the logits when the backend has the rule
 * (Softmax, rt__op_crossentropy), as Keras' TF backend does, which is exact
 * where clipping probabilities is not. Sets p->nodes/n_nodes, p->out_shape,
 * p->loss, cc->out_e and cc->loss_e. */
static int rt__pass_fuse(rt__cc *cc)
{
    rt_plan *p = cc->p;
    const rt__backend *be = p->backend;
    rt__ent *E = cc->E;
    int rc0 = rt__check_loss_fit(cc);
    if (rc0 < 0)
        return rc0;
    rt__fold_pads(cc);
    for (int i = 0; i < p->n_nodes; i++) {
        rt__node *nd = &p->nodes[i];
        if (!E[nd->id].needed || nd->n_in != 1)
            continue;
        const int src = nd->in[0];
        if (E[src].node < 0 || E[src].consumers != 1 || src == cc->out)
            continue;
        rt__node *pn = &p->nodes[E[src].node];
        /* a Relu reading a Conv2D without an activation becomes the
         * convolution's activation, as Keras' Conv2D(activation="relu")
         * (an ONNX export's Conv -> Relu): the same numbers, and the
         * convolution can still absorb a MaxPool2D that reads the Relu */
        if (nd->op == &rt__op_relu && pn->op == &rt__op_conv2d && !pn->fused &&
            rt__conv_cp(pn)->act == RT__ACT_NONE) {
            rt__conv_p(pn)->act = RT__ACT_RELU;
            pn->bwd_needs_out = 1;
            E[nd->id].alias = E[src].alias;
            E[nd->id].node = E[src].node;
            E[nd->id].needed = 0;
            continue;
        }
        if (pn->fused)
            continue;
        int bf16;
        const rt__kernel *k = rt__kern_for(be, pn, nd->op, &bf16);
        if (!k || (k->can_fuse && !k->can_fuse(pn, nd)))
            continue;
        if (!(pn->fused_p = rt__arena_memdup(cc->A, &nd->p, sizeof nd->p)))
            return RT_ENOMEM;
        pn->fused = nd->op;
        pn->out = nd->out;
        pn->bwd_needs_out |= nd->op->bwd_needs_out;
        /* a BatchNorm's fused activation (Relu, Clip, KerasRelu) takes
         * its gradient's mask off the fused output: the reader's input
         * (BatchNorm's own output) is not kept */
        if (pn->op == &rt__op_batchnorm)
            pn->bwd_needs_out = 1;
        cc->shape[E[src].alias] = pn->out;
        E[nd->id].alias = E[src].alias;
        E[nd->id].needed = 0;
    }
    cc->out_e = E[cc->out].alias;
    int m = 0;
    for (int i = 0; i < p->n_nodes; i++) {
        rt__node *nd = &p->nodes[i];
        for (int j = 0; j < nd->n_in; j++) {
            nd->in[j] = E[nd->in[j]].alias;
            nd->in_shape[j] = &cc->shape[nd->in[j]];
        }
        E[nd->id].node = -1;
        if (E[nd->id].needed)
            p->nodes[m++] = *nd;
    }
    for (int i = 0; i < m; i++)
        E[p->nodes[i].id].node = i;
    p->n_nodes = m;
    p->out_shape = cc->shape[cc->out_e];
    const rt__node *on = &p->nodes[E[cc->out_e].node];
    const int ce = (cc->cfg->loss == RT_LOSS_SPARSE_CE || cc->cfg->loss == RT_LOSS_CE) &&
                   !cc->cfg->from_logits;
    const int sm = ce && !on->fused && be->kernel(be->context, on->op, &rt__op_crossentropy);
    cc->loss_e = sm ? on->in[0] : cc->out_e;
    int rc = rt__setup_loss(cc, sm);
    if (rc < 0)
        return rc;
    /* the per-step loss masks: a (B, rows) value per masked output, each
     * over its output's rows (a Keras loss; the heads take only those) */
    const rt__lossinfo *L = &p->loss;
    for (int k = 0; k < RT_MAX_HEADS; k++) {
        if (cc->mask_e[k] < 0)
            continue;
        const char *mn = cc->g->loss_mask[k];
        const rt__lossinfo *H = L->n_heads ? &L->head[k] : L;
        /* a PyTorch loss (one output): its elementwise form over the kept
         * rows; the class-index losses read PyTorch's class axis (dim 1),
         * not the rows of the last axis a mask keeps */
        if (L->kind == RT_LOSS_CROSS_ENTROPY || L->kind == RT_LOSS_NLL)
            return rt__cerr(cc, NULL, RT_EUNIMPLEMENTED,
                            "a per-step loss mask ('%s') keeps rows of the output's last axis; "
                            "%s reads its classes on dim 1 (use a Keras loss such as "
                            "sparse_categorical_crossentropy)",
                            mn, rt_loss_name(L->kind));
        cc->mask_e[k] = E[cc->mask_e[k]].alias;
        const rt__shape *ms = &cc->shape[cc->mask_e[k]];
        if (!ms->batched || rt__shape_numel(ms) != H->rows || H->lab_numel % H->rows != 0)
            return rt__cerr(cc, NULL, RT_ESHAPE,
                            "loss mask '%s' has %lld values per sample; the output%s%s%s has "
                            "%lld rows (and the labels %lld values)",
                            mn, (long long)rt__shape_numel(ms), L->n_heads ? " '" : "",
                            L->n_heads ? cc->g->heads[k] : "", L->n_heads ? "'" : "",
                            (long long)H->rows, (long long)H->lab_numel);
        p->has_loss_mask |= 1u << k;
    }
    return 0;
}

/* backward: marks which values require a gradient (trainable parameters
 * and what depends on them, except through an op's no_grad_in), then
 * lists the calls: n_fwd forward calls in topological order, then a
 * backward call for each node in reverse order whose output gradient was
 * written (the loss writes the loss value's). A call's accum bit j says
 * input j's gradient was already written by another reader, so it adds.
 * Sets p->calls (nd, bwd, accum), p->n_fwd, p->n_bwd, cc->need_dx and
 * the forward+backward FLOPs. */
static int rt__pass_backward(rt__cc *cc)
{
    rt_plan *p = cc->p;
    rt__ent *E = cc->E;
    const int m = p->n_nodes;
    for (int i = 0; i < cc->n; i++)
        if (E[i].param >= 0)
            E[i].rg = p->params[E[i].param].trainable;
    for (int i = 0; i < m; i++) {
        const rt__node *nd = &p->nodes[i];
        for (int j = 0; j < nd->n_in; j++)
            if (E[nd->in[j]].rg && !((nd->op->no_grad_in >> j) & 1u))
                E[nd->id].rg = 1;
    }
    p->calls = rt__arena_alloc(cc->A, sizeof(rt__call) * (size_t)(2 * m + 1));
    cc->need_dx = rt__arena_alloc(cc->A, sizeof(unsigned) * (size_t)(2 * m + 1));
    if (!p->calls || !cc->need_dx)
        return RT_ENOMEM;
    for (int i = 0; i < m; i++)
        p->calls[i].nd = &p->nodes[i];
    p->n_fwd = m;
    if (E[cc->loss_e].rg)
        E[cc->loss_e].grad_written = 1;
    int nbwd = 0;
    for (int i = m - 1; i >= 0; i--) {
        const rt__node *nd = &p->nodes[i];
        rt__ent *en = &E[nd->id];
        unsigned need_dx = 0;
        for (int j = 0; j < nd->n_in; j++)
            if (E[nd->in[j]].rg && !((nd->op->no_grad_in >> j) & 1u))
                need_dx |= 1u << j;
        const int has_bwd = en->rg && en->grad_written;
        cc->flops += nd->op->flops(nd, cc->B, has_bwd ? need_dx : 0);
        p->nodes[i].bwd_dx = has_bwd ? need_dx : 0u;
        if (!has_bwd)
            continue;
        rt__call *c = &p->calls[m + nbwd];
        c->nd = nd;
        c->bwd = 1;
        cc->need_dx[m + nbwd] = need_dx;
        for (int j = 0; j < nd->n_in; j++) {
            if (!((need_dx >> j) & 1u))
                continue;
            if (E[nd->in[j]].grad_written)
                c->accum |= 1u << j;
            E[nd->in[j]].grad_written = 1;
        }
        nbwd++;
    }
    p->n_bwd = nbwd;
    return 0;
}

int rt__bf16_binary_kind(const rt__op_def *op)
{
    return op == &rt__op_add || op == &rt__op_sub || op == &rt__op_mul || op == &rt__op_div ||
           op == &rt__op_max || op == &rt__op_min;
}

int rt__bf16_sample_kind(const rt__op_def *op)
{
    return op == &rt__op_pad || op == &rt__op_maxpool2d || op == &rt__op_avgpool2d ||
           op == &rt__op_globalavgpool || op == &rt__op_concat || op == &rt__op_flatten ||
           op == &rt__op_reshape || rt__bf16_binary_kind(op);
}

int rt__bf16_sample_op(const rt__node *nd)
{
    const rt__op_def *op = nd->op;
    if (!rt__bf16_sample_kind(op) || nd->fused || nd->n_in > 16 || !nd->out.batched)
        return 0;
    /* a binary broadcasts an unbatched input (a constant, a parameter)
     * over the batch: that input stays float32 (rt__bf16_sample_in) */
    int batched = 0;
    for (int j = 0; j < nd->n_in; j++)
        batched += nd->in_shape[j]->batched;
    return rt__bf16_binary_kind(op) ? batched > 0 : batched == nd->n_in;
}

unsigned rt__bf16_sample_in(const rt__node *nd)
{
    unsigned m = 0;
    for (int j = 0; j < nd->n_in; j++)
        if (nd->in_shape[j]->batched)
            m |= RT__BF16_IN(j);
    return m;
}

/* bf16 activation storage (after the kernels' prepares): a node's output
 * is stored bf16 where the backend's bf16_io lets its producer write it
 * so and every reader read it so, and neither the output nor the loss
 * reads it; those nodes' prepares run again with bf16_in/bf16_out set (a
 * kernel reading a bf16 input needs no bf16 copy of it). A node bf16 only
 * by its storage that stores and reads nothing bf16 goes back to float32. */
static int rt__bf16_storage(rt__cc *cc)
{
    rt_plan *p = cc->p;
    const rt__backend *be = p->backend;
    const rt__ent *E = cc->E;
    const int m = p->n_nodes;
    if (!be->bf16_io)
        return 0;
    unsigned *io = rt__arena_alloc(cc->A, sizeof(unsigned) * (size_t)(m + 1));
    const rt__kernel **k0 = rt__arena_alloc(cc->A, sizeof *k0 * (size_t)(m + 1));
    if (!io || !k0)
        return RT_ENOMEM;
    for (int i = 0; i < m; i++) {
        rt__node *nd = &p->nodes[i];
        io[i] = nd->prec == RT_PREC_BF16 ? be->bf16_io(be->context, nd) : 0;
        /* exec reads the output, the loss's input and the loss masks as
         * float32 */
        int exec_reads = nd->id == cc->out_e || nd->id == cc->loss_e;
        for (int k = 0; k < RT_MAX_HEADS; k++)
            exec_reads |= nd->id == cc->mask_e[k];
        nd->bf16_out = (io[i] & RT__BF16_OUT) && !exec_reads;
        nd->bf16_in = 0;
    }
    for (int i = 0; i < m; i++) {
        const rt__node *nd = &p->nodes[i];
        for (int j = 0; j < nd->n_in; j++) {
            if (E[nd->in[j]].node < 0)
                continue;
            rt__node *pr = &p->nodes[E[nd->in[j]].node];
            /* a Conv2D's output read by a MaxPool2D stays float32: the
             * pair the CPU backend fuses keeps its pre-pool values
             * float32, and a backend that runs them apart (ref) agrees
             * (bf16 rounding there would make ties the pool routes
             * gradients through differently) */
            if (!(io[i] & RT__BF16_IN(j)) ||
                (nd->op == &rt__op_maxpool2d && pr->op == &rt__op_conv2d))
                pr->bf16_out = 0;
        }
    }
    for (int i = 0; i < m; i++) {
        rt__node *nd = &p->nodes[i];
        for (int j = 0; j < nd->n_in; j++)
            if (E[nd->in[j]].node >= 0 && p->nodes[E[nd->in[j]].node].bf16_out)
                nd->bf16_in |= RT__BF16_IN(j);
    }
    for (int i = 0; i < m; i++) {
        rt__node *nd = &p->nodes[i];
        const rt__kernel *k = NULL;
        if ((io[i] & RT__BF16_STORE_ONLY) && !nd->bf16_in && !nd->bf16_out) {
            nd->prec = RT_PREC_F32;
            k = be->kernel(be->context, nd->op, nd->fused);
        } else if (nd->bf16_in || nd->bf16_out) {
            k = be->kernel_bf16(be->context, nd, nd->fused);
        }
        if (!k)
            continue;
        nd->kern = k;
        nd->kdata = NULL;
        nd->scratch_floats = nd->ws_floats = 0;
        int rc;
        if (k->prepare && (rc = k->prepare(nd, cc->B, cc->A)) < 0)
            return rc;
        /* the same shapes as the first prepare: bf16 stays bf16 */
        RT_ASSERT(!(nd->bf16_in || nd->bf16_out) || nd->prec == RT_PREC_BF16);
    }
    return 0;
}

/* whether nd's output takes 2 bytes a value: stored bf16, not emulated */
static int rt__bf16_bytes(const rt__cc *cc, const rt__node *nd)
{
    const rt__backend *be = cc->p->backend;
    return nd->bf16_out && !(be->bf16_io(be->context, nd) & RT__BF16_EMULATED);
}

/* choose_kernels: each node gets the backend's kernel for its op (and the
 * reader it absorbed), whose prepare computes the node's derived sizes
 * (scratch_floats, kdata) once; each call gets the forward or backward
 * function. Sets nd->kern/kdata/scratch_floats, call->fn,
 * p->gemm_scratch_floats. */
static int rt__pass_choose_kernels(rt__cc *cc)
{
    rt_plan *p = cc->p;
    const rt__backend *be = p->backend;
    for (int i = 0; i < p->n_nodes; i++) {
        rt__node *nd = &p->nodes[i];
        int bf16;
        nd->kern = rt__kern_for(be, nd, nd->fused, &bf16);
        RT_ASSERT(nd->kern); /* supports_op and the fuse pass asked */
        nd->prec = bf16 ? RT_PREC_BF16 : RT_PREC_F32;
        int rc;
        /* a bf16 prepare may hand the node back to the float32 entry (a
         * shape the backend has no bf16 primitive for): kern and prec */
        if (nd->kern->prepare && (rc = nd->kern->prepare(nd, cc->B, cc->A)) < 0)
            return rc;
    }
    int rc = rt__bf16_storage(cc);
    if (rc < 0)
        return rc;
    for (int i = 0; i < p->n_nodes; i++)
        p->rep.n_bf16 += p->nodes[i].prec == RT_PREC_BF16;
    for (int i = 0; i < p->n_fwd + p->n_bwd; i++) {
        rt__call *c = &p->calls[i];
        c->fn = c->bwd ? c->nd->kern->bwd : c->nd->kern->fwd;
    }
    p->gemm_scratch_floats = be->shared_scratch_floats;
    /* the rest of the step: the backend's loss, optimizer, config */
    if (be->check) {
        const int rc = be->check(be->context, p, cc->err, cc->errlen);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int rt__newbuf(rt__cc *cc, uint64_t bytes, int t)
{
    cc->bufs[cc->nb] = (rt__buf){.size = rt__align_bytes(bytes), .t0 = t, .t1 = t};
    return cc->nb++;
}

static void rt__extend(rt__cc *cc, int b, int t)
{
    if (b >= 0 && cc->bufs[b].t1 < t)
        cc->bufs[b].t1 = t;
}

/* every buffer with its live interval, in the order the calls create them */
static void rt__make_buffers(rt__cc *cc, int *x_buf, int *lab_buf)
{
    rt_plan *p = cc->p;
    rt__ent *E = cc->E;
    const int m = p->n_fwd, t_loss = 1 + m;
    const int64_t B = cc->B;
    *x_buf = rt__newbuf(cc, (uint64_t)B * (uint64_t)p->in_numel * 4, 0);
    *lab_buf = rt__newbuf(cc, (uint64_t)B * (uint64_t)p->loss.lab_numel * 4, 0);
    cc->bufs[*lab_buf].t1 = t_loss;
    E[cc->input].val_buf = *x_buf;
    for (int i = 0; i < m; i++) {
        const rt__node *nd = &p->nodes[i];
        const int t = 1 + i;
        E[nd->id].val_buf = rt__newbuf(
            cc, (uint64_t)rt__numel_n(&nd->out, B) * (rt__bf16_bytes(cc, nd) ? 2 : 4), t);
        for (int j = 0; j < nd->n_in; j++)
            rt__extend(cc, E[nd->in[j]].val_buf, t);
        cc->scr_buf[i] =
            nd->scratch_floats > 0 ? rt__newbuf(cc, (uint64_t)nd->scratch_floats * 4, t) : -1;
        cc->ws_buf[i] = nd->ws_floats > 0 ? rt__newbuf(cc, (uint64_t)nd->ws_floats * 4, t) : -1;
    }
    rt__extend(cc, E[cc->out_e].val_buf, t_loss);
    rt__extend(cc, E[cc->loss_e].val_buf, t_loss);
    for (int k = 0; k < RT_MAX_HEADS; k++)
        if (cc->mask_e[k] >= 0)
            rt__extend(cc, E[cc->mask_e[k]].val_buf, t_loss);
    if (E[cc->loss_e].rg)
        E[cc->loss_e].grad_buf = rt__newbuf(cc, cc->bufs[E[cc->loss_e].val_buf].size, t_loss);
    for (int ci = m; ci < m + p->n_bwd; ci++) {
        const rt__node *nd = p->calls[ci].nd;
        const rt__ent *en = &E[nd->id];
        const int t = 2 + ci;
        rt__extend(cc, en->grad_buf, t);
        if (nd->bwd_needs_out)
            rt__extend(cc, en->val_buf, t);
        rt__extend(cc, cc->ws_buf[nd - p->nodes], t);
        for (int j = 0; j < nd->n_in; j++) {
            rt__ent *src = &E[nd->in[j]];
            if ((nd->op->bwd_needs_in >> j) & 1u)
                rt__extend(cc, src->val_buf, t);
            if (((cc->need_dx[ci] >> j) & 1u) && src->param < 0 && src->grad_buf < 0)
                src->grad_buf =
                    rt__newbuf(cc, (uint64_t)rt__numel_n(&cc->shape[nd->in[j]], B) * 4, t);
        }
        cc->scr_buf[ci] =
            nd->scratch_floats > 0 ? rt__newbuf(cc, (uint64_t)nd->scratch_floats * 4, t) : -1;
    }
}

#define RT__AREF(cc, bi) ((rt__ref){.space = RT__SP_ARENA, .off = (cc)->bufs[bi].off})

/* every call's operands as arena offsets or parameter/gradient blocks */
static void rt__resolve_refs(rt__cc *cc)
{
    rt_plan *p = cc->p;
    const rt__ent *E = cc->E;
    for (int ci = 0; ci < p->n_fwd + p->n_bwd; ci++) {
        rt__call *c = &p->calls[ci];
        const rt__node *nd = c->nd;
        const rt__ent *en = &E[nd->id];
        c->y = RT__AREF(cc, en->val_buf);
        if (c->bwd)
            c->dy = RT__AREF(cc, en->grad_buf);
        if (cc->scr_buf[ci] >= 0)
            c->scratch = RT__AREF(cc, cc->scr_buf[ci]);
        if (cc->ws_buf[nd - p->nodes] >= 0)
            c->ws = RT__AREF(cc, cc->ws_buf[nd - p->nodes]);
        for (int j = 0; j < nd->n_in; j++) {
            const rt__ent *src = &E[nd->in[j]];
            const int grad = c->bwd && !((nd->op->no_grad_in >> j) & 1u);
            if (src->param >= 0) {
                const rt__param *pr = &p->params[src->param];
                c->x[j] = (rt__ref){.space = RT__SP_PARAM, .off = (uint64_t)pr->off};
                if (grad && pr->trainable)
                    c->dx[j] = (rt__ref){.space = RT__SP_GRAD, .off = (uint64_t)pr->goff};
            } else {
                c->x[j] = RT__AREF(cc, src->val_buf);
                if (grad && src->rg)
                    c->dx[j] = RT__AREF(cc, src->grad_buf);
            }
        }
    }
}

/* plan_memory: one buffer per value, gradient and scratch with its live
 * interval on the step timeline (0 gather, 1..m forward, m+1 the loss,
 * then backward calls; a backward call extends the values it reads),
 * placed in one arena (largest first at the lowest free offset; linear
 * for very deep graphs, rt__place_sweep). Sets p->arena_bytes, every
 * call's refs, p->x_buf/lab_buf/out_val/out_grad/loss_in/loss_grad. */
static int rt__pass_plan_memory(rt__cc *cc)
{
    rt_plan *p = cc->p;
    const rt__ent *E = cc->E;
    const int m = p->n_fwd, ncalls = p->n_fwd + p->n_bwd;
    const int max_bufs = 2 + 5 * m + 2;
    cc->bufs = rt__arena_alloc(cc->A, sizeof *cc->bufs * (size_t)max_bufs);
    cc->scr_buf = rt__arena_alloc(cc->A, sizeof(int) * (size_t)(ncalls + 1));
    cc->ws_buf = rt__arena_alloc(cc->A, sizeof(int) * (size_t)(p->n_nodes + 1));
    void *work = rt__arena_alloc(cc->A, sizeof(rt__buf *) * (size_t)max_bufs * 2);
    if (!cc->bufs || !cc->scr_buf || !cc->ws_buf || !work)
        return RT_ENOMEM;
    for (int i = 0; i <= p->n_nodes; i++)
        cc->ws_buf[i] = -1;
    int x_buf, lab_buf;
    rt__make_buffers(cc, &x_buf, &lab_buf);
    RT_ASSERT(cc->nb <= max_bufs);
    for (int i = 0; i < cc->nb; i++)
        cc->naive += cc->bufs[i].size;
    if (cc->nb <= RT__PLACE_EXACT_MAX) {
        rt__buf **order = work;
        p->arena_bytes = rt__place_greedy(cc->bufs, cc->nb, order, order + cc->nb);
    } else {
        p->arena_bytes = rt__place_sweep(cc->bufs, cc->nb, 2 + ncalls + 1, work);
        if (p->arena_bytes == UINT64_MAX)
            return RT_ENOMEM;
    }
    p->x_buf = RT__AREF(cc, x_buf);
    p->lab_buf = RT__AREF(cc, lab_buf);
    p->out_val = RT__AREF(cc, E[cc->out_e].val_buf);
    p->out_grad = E[cc->out_e].grad_buf >= 0 ? RT__AREF(cc, E[cc->out_e].grad_buf) : (rt__ref){0};
    p->loss_in = RT__AREF(cc, E[cc->loss_e].val_buf);
    for (int k = 0; k < RT_MAX_HEADS; k++)
        if (p->has_loss_mask >> k & 1)
            p->loss_mask[k] = RT__AREF(cc, E[cc->mask_e[k]].val_buf);
    p->loss_grad = E[cc->loss_e].grad_written && E[cc->loss_e].grad_buf >= 0
                       ? RT__AREF(cc, E[cc->loss_e].grad_buf)
                       : (rt__ref){0};
    rt__resolve_refs(cc);
    return 0;
}

/* report: parameter counts, FLOPs per step (calls, optimizer, loss),
 * arena and naive bytes, parameter+state bytes, node and kernel counts.
 * Sets p->rep (compile_ns and pass_ns are the driver's). */
static int rt__pass_report(rt__cc *cc)
{
    rt_plan *p = cc->p;
    const rt_train_config *cfg = cc->cfg;
    rt_compile_report *r = &p->rep;
    for (int i = 0; i < p->n_params; i++) {
        r->param_count += (uint64_t)p->params[i].numel;
        if (p->params[i].trainable)
            r->trainable_param_count += (uint64_t)p->params[i].numel;
        if (p->params[i].opts.l1 > 0 || p->params[i].opts.l2 > 0)
            r->n_regularized++;
        if (p->params[i].trainable && p->params[i].opts.constraint != RT_CONSTRAINT_NONE)
            r->n_constrained++;
    }
    uint64_t per_param = cfg->opt == RT_OPT_SGD                                     ? 4
                         : cfg->opt == RT_OPT_RMSPROP || cfg->opt == RT_OPT_ADAGRAD ? 6
                                                                                    : 12;
    r->flops_per_step = cc->flops + per_param * r->trainable_param_count +
                        8ull * (uint64_t)p->loss.out_numel * (uint64_t)cc->B; /* loss */
    r->arena_bytes = p->arena_bytes;
    r->naive_bytes = cc->naive;
    int nstate = cfg->opt == RT_OPT_SGD ? (cfg->momentum > 0 ? 1 : 0)
                 : cfg->opt == RT_OPT_RMSPROP || cfg->opt == RT_OPT_ADAGRAD ? 1
                                                                            : 2;
    r->param_bytes = 4ull * ((uint64_t)p->param_floats + (uint64_t)p->train_floats * (1 + nstate));
    r->n_nodes = (uint32_t)cc->n_graph_nodes;
    r->n_kernels = (uint32_t)(p->n_fwd + p->n_bwd + 3); /* + gather, loss, optimizer */
    return 0;
}

/* ------------------------------------------------------------------ driver */

static const struct {
    const char *name;
    int (*run)(rt__cc *cc);
} rt__passes[RT_COMPILE_PASSES] = {
    {"validate", rt__pass_validate},
    {"infer_shapes", rt__pass_infer_shapes},
    {"fuse", rt__pass_fuse},
    {"backward", rt__pass_backward},
    {"choose_kernels", rt__pass_choose_kernels},
    {"plan_memory", rt__pass_plan_memory},
    {"report", rt__pass_report},
};

const char *rt_compile_pass_name(int i)
{
    return i >= 0 && i < RT_COMPILE_PASSES ? rt__passes[i].name : NULL;
}

int rt_plan_compile(const rt_graph *g, const rt_train_config *cfg, rt_plan **out,
                    rt_compile_report *rep, char *err, size_t errlen)
{
    return rt_plan_compile_cancellable(g, cfg, NULL, out, rep, err, errlen);
}

int rt_plan_compile_cancellable(const rt_graph *g, const rt_train_config *cfg, const int *cancel,
                                rt_plan **out, rt_compile_report *rep, char *err, size_t errlen)
{
    char dummy[RT__ERRLEN];
    if (!err || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = '\0';
    if (out)
        *out = NULL;
    if (!g || !cfg || !out) {
        snprintf(err, errlen, "graph, config and out must not be NULL");
        return RT_EINVAL;
    }
    const uint64_t t0 = rt_now_ns();
    rt_plan *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return RT_ENOMEM;
    }
    atomic_init(&p->refs, 1);
    p->cfg = *cfg;
    p->backend = rt__backend_current();
    if (!p->backend) {
        snprintf(err, errlen, "no backend registered (the program links none)");
        free(p);
        return RT_EINTERNAL;
    }
    snprintf(p->rep.backend, sizeof p->rep.backend, "%s", p->backend->name);
    rt__cc cc = {.p = p,
                 .g = g,
                 .cfg = &p->cfg,
                 .err = err,
                 .errlen = errlen,
                 .B = cfg->batch_size,
                 .A = &p->arena};
    int rc = 0;
    uint64_t t = t0;
    for (int i = 0; i < RT_COMPILE_PASSES && rc >= 0; i++) {
        rc = rt__passes[i].run(&cc);
        const uint64_t now = rt_now_ns();
        p->rep.pass_ns[i] = now - t;
        t = now;
        if (rc >= 0 && cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE) &&
            i + 1 < RT_COMPILE_PASSES) {
            snprintf(err, errlen, "compile cancelled after pass %s", rt__passes[i].name);
            rc = RT_ECANCELLED;
        }
    }
    if (rc < 0) {
        if (rc == RT_ENOMEM && !err[0])
            snprintf(err, errlen, "out of memory");
        rt_plan_release(p);
        return rc;
    }
    p->rep.compile_ns = rt_now_ns() - t0;
    if (rep)
        *rep = p->rep;
    *out = p;
    return 0;
}
