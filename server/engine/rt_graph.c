/* rt_graph.c - the graph builder, the arena, the RNG and name tables. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_engine_impl.h"
#include "rt_errf.h"

void rt__assert_fail(const char *cond, const char *file, int line)
{
    fprintf(stderr, "%s:%d: assertion failed: %s\n", file, line, cond);
    abort();
}

/* ------------------------------------------------------------------ arena */

struct rt__chunk {
    rt__chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *rt__arena_alloc(rt__arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    rt__chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        /* growing chunks: a big graph makes few calls to malloc */
        if (a->next_cap < 16384)
            a->next_cap = 16384;
        size_t cap = n > a->next_cap ? n : a->next_cap;
        if (a->next_cap < ((size_t)1 << 20))
            a->next_cap *= 2;
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *rt__arena_strdup(rt__arena *a, const char *s)
{
    return rt__arena_memdup(a, s, strlen(s) + 1);
}

void *rt__arena_memdup(rt__arena *a, const void *p, size_t n)
{
    void *q = rt__arena_alloc(a, n);
    if (q && n)
        memcpy(q, p, n);
    return q;
}

void rt__arena_free(rt__arena *a)
{
    rt__chunk *c = a->head;
    while (c) {
        rt__chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->next_cap = 0;
}

void *rt__aligned_alloc(size_t n)
{
    n = (n + RT__ALIGN - 1) & ~(size_t)(RT__ALIGN - 1);
    if (n == 0)
        n = RT__ALIGN;
    void *p = aligned_alloc(RT__ALIGN, n);
    if (p)
        memset(p, 0, n);
    return p;
}

/* -------------------------------------------------------------------- rng */

uint64_t rt__rng_u64(uint64_t seed, uint64_t stream, uint64_t counter)
{
    return rt__rng_at(rt__rng_key(seed, stream), counter);
}

uint64_t rt_rng_u64(uint64_t seed, uint64_t stream, uint64_t counter)
{
    return rt__rng_u64(seed, stream, counter);
}

/* ------------------------------------------------------------------ misc */

size_t rt_dtype_size(rt_dtype dt)
{
    switch (dt) {
    case RT_F32:
    case RT_I32: return 4;
    case RT_I64: return 8;
    case RT_U8: return 1;
    }
    return 0;
}

int64_t rt__shape_numel(const rt__shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++)
        n *= s->d[i];
    return n;
}

static const rt__op_def *const rt__ops[] = {
#define RT__OP_PTR(def) &def,
    RT__OP_LIST(RT__OP_PTR)
#undef RT__OP_PTR
};
#define RT__N_OPS (sizeof rt__ops / sizeof rt__ops[0])

static const char *rt__op_name_tab[RT__N_OPS + 1];
static pthread_once_t rt__op_names_once = PTHREAD_ONCE_INIT;

static void rt__op_names_fill(void)
{
    /* the names live in the op definitions (other translation units, not
     * constant expressions here), so the list is built on first use */
    for (size_t i = 0; i < RT__N_OPS; i++)
        rt__op_name_tab[i] = rt__ops[i]->name;
    rt__op_name_tab[RT__N_OPS] = NULL;
}

const char *const *rt_engine_op_names(void)
{
    pthread_once(&rt__op_names_once, rt__op_names_fill);
    return rt__op_name_tab;
}

const rt__op_def *rt__op_find(const char *name)
{
    for (size_t i = 0; i < RT__N_OPS; i++)
        if (strcmp(rt__ops[i]->name, name) == 0)
            return rt__ops[i];
    return NULL;
}

/* ------------------------------------------------------------------ graph */

rt_graph *rt_graph_create(void)
{
    rt_graph *g = calloc(1, sizeof *g);
    return g;
}

void rt_graph_destroy(rt_graph *g)
{
    if (!g)
        return;
    rt__arena_free(&g->arena);
    free(g);
}

const char *rt_graph_errmsg(const rt_graph *g) { return g ? g->err : "graph is NULL"; }

/* the message in g->err, returns code (rt_errf, the one formatter) */
#define rt__gerr(g, code, ...) rt_errf((g)->err, sizeof(g)->err, (code), __VA_ARGS__)

static rt__entry *rt__graph_new_entry(rt_graph *g, rt__tkind kind, const char *name)
{
    if (g->n == g->cap) {
        /* Old arrays stay in the arena until destroy: a graph is built once,
         * so the doubling wastes at most as much as it keeps. */
        int cap = g->cap ? 2 * g->cap : 16;
        rt__entry *e = rt__arena_alloc(&g->arena, sizeof *e * (size_t)cap);
        if (!e)
            return NULL;
        if (g->n)
            memcpy(e, g->e, sizeof *e * (size_t)g->n);
        g->e = e;
        g->cap = cap;
    }
    rt__entry *e = &g->e[g->n];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->name = rt__arena_strdup(&g->arena, name);
    if (!e->name)
        return NULL;
    g->n++;
    return e;
}

static int rt__check_name(rt_graph *g, const char *name, const char *what)
{
    if (!g)
        return RT_EINVAL;
    if (!name || !name[0])
        return rt__gerr(g, RT_EINVAL, "%s: empty name", what);
    if (strlen(name) > 128)
        return rt__gerr(g, RT_EINVAL, "%s: name longer than 128 bytes", what);
    return 0;
}

static int rt__copy_dims(rt_graph *g, rt__shape *s, int ndim, const int64_t *dims, const char *name)
{
    if (ndim < 0 || ndim > RT_MAX_DIMS)
        return rt__gerr(g, RT_EINVAL, "'%s': rank %d outside 0..%d", name, ndim, RT_MAX_DIMS);
    if (ndim > 0 && !dims)
        return rt__gerr(g, RT_EINVAL, "'%s': dims is NULL", name);
    s->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        s->d[i] = dims[i];
    return 0;
}

/* A new input's or param's name (what it is, for the message) and its dims
 * into *s. */
static int rt__name_dims(rt_graph *g, const char *name, const char *what, int ndim,
                         const int64_t *dims, rt__shape *s)
{
    int rc = rt__check_name(g, name, what);
    return rc < 0 ? rc : rt__copy_dims(g, s, ndim, dims, name);
}

int rt_graph_add_input(rt_graph *g, const char *name, rt_dtype dt, int ndim, const int64_t *dims)
{
    rt__shape s = {0};
    int rc = rt__name_dims(g, name, "input", ndim, dims, &s);
    if (rc < 0)
        return rc;
    rt__entry *e = rt__graph_new_entry(g, RT__T_INPUT, name);
    if (!e)
        return rt__gerr(g, RT_ENOMEM, "out of memory");
    e->dt = dt;
    e->shape = s;
    return 0;
}

int rt_graph_add_param(rt_graph *g, const char *name, int ndim, const int64_t *dims, rt_init init,
                       int trainable, const float *value)
{
    rt__shape s = {0};
    int rc = rt__name_dims(g, name, "param", ndim, dims, &s);
    if (rc < 0)
        return rc;
    /* Bad dims are recorded and reported by rt_plan_compile, except when
     * values come with them: their size is needed to copy them now. */
    int64_t numel = 1;
    for (int i = 0; value && i < ndim; i++) {
        if (s.d[i] <= 0 || s.d[i] > RT__MAX_NUMEL ||
            __builtin_mul_overflow(numel, s.d[i], &numel) || numel > RT__MAX_NUMEL)
            return rt__gerr(g, RT_EINVAL, "param '%s': values for bad dim %lld", name,
                            (long long)s.d[i]);
    }
    rt__entry *e = rt__graph_new_entry(g, RT__T_PARAM, name);
    if (!e)
        return rt__gerr(g, RT_ENOMEM, "out of memory");
    e->dt = RT_F32;
    e->shape = s;
    e->init = init;
    e->trainable = trainable != 0;
    if (value) {
        e->value = rt__arena_memdup(&g->arena, value, (size_t)numel * sizeof(float));
        if (!e->value)
            return rt__gerr(g, RT_ENOMEM, "out of memory");
    }
    return 0;
}

int rt_graph_set_param_opts(rt_graph *g, const char *name, const rt_param_opts *opts)
{
    if (!g || !name || !opts)
        return RT_EINVAL;
    /* the parameter was usually added just before: search from the end */
    for (int i = g->n - 1; i >= 0; i--) {
        rt__entry *e = &g->e[i];
        if (e->kind == RT__T_PARAM && strcmp(e->name, name) == 0) {
            e->has_opts = 1;
            e->opts = *opts;
            return 0;
        }
    }
    return rt__gerr(g, RT_EINVAL, "no param '%s'", name);
}

int rt_graph_set_param_view(rt_graph *g, const char *name, int user_ndim, const int64_t *user_dims,
                            int vn, const int64_t *vd, const int *perm)
{
    if (!g || !name || user_ndim < 0 || user_ndim > RT_MAX_DIMS || vn < 1 || vn > RT_MAX_DIMS ||
        (user_ndim && !user_dims) || !vd || !perm)
        return RT_EINVAL;
    for (int i = g->n - 1; i >= 0; i--) {
        rt__entry *e = &g->e[i];
        if (e->kind != RT__T_PARAM || strcmp(e->name, name) != 0)
            continue;
        rt__view *v = &e->view;
        memset(v, 0, sizeof *v);
        v->n = vn;
        for (int k = 0; k < vn; k++) {
            v->d[k] = vd[k];
            v->perm[k] = perm[k];
        }
        v->user.ndim = user_ndim;
        for (int k = 0; k < user_ndim; k++)
            v->user.d[k] = user_dims[k];
        return 0;
    }
    return rt__gerr(g, RT_EINVAL, "no param '%s'", name);
}

int rt_graph_add_node(rt_graph *g, const char *name, const char *op, int n_in,
                      const char *const *inputs, int n_attr, const rt_attr *attrs)
{
    int rc = rt__check_name(g, name, "node");
    if (rc < 0)
        return rc;
    if (!op || !op[0])
        return rt__gerr(g, RT_EINVAL, "node '%s': empty op", name);
    if (n_in < 0 || n_attr < 0 || (n_in && !inputs) || (n_attr && !attrs))
        return rt__gerr(g, RT_EINVAL, "node '%s': bad input/attr count", name);
    for (int i = 0; i < n_in; i++)
        if (!inputs[i])
            return rt__gerr(g, RT_EINVAL, "node '%s': input %d is NULL", name, i);
    for (int i = 0; i < n_attr; i++) {
        const rt_attr *a = &attrs[i];
        if (!a->name || a->n < 0 || (a->kind == RT_ATTR_STR && !a->s) ||
            (a->kind == RT_ATTR_INTS && a->n && !a->ints) ||
            (a->kind == RT_ATTR_FLOATS && a->n && !a->floats))
            return rt__gerr(g, RT_EINVAL, "node '%s': attribute %d malformed", name, i);
    }
    rt__entry *e = rt__graph_new_entry(g, RT__T_NODE, name);
    if (!e)
        return rt__gerr(g, RT_ENOMEM, "out of memory");
    rt__arena *A = &g->arena;
    e->dt = RT_F32;
    e->op = rt__arena_strdup(A, op);
    e->n_in = n_in;
    e->in = rt__arena_alloc(A, sizeof(char *) * (size_t)(n_in ? n_in : 1));
    if (!e->op || !e->in)
        goto oom;
    for (int i = 0; i < n_in; i++)
        if (!(e->in[i] = rt__arena_strdup(A, inputs[i])))
            goto oom;
    e->n_attr = n_attr;
    e->attrs = rt__arena_alloc(A, sizeof(rt_attr) * (size_t)(n_attr ? n_attr : 1));
    if (!e->attrs)
        goto oom;
    for (int i = 0; i < n_attr; i++) {
        rt_attr a = attrs[i];
        a.name = rt__arena_strdup(A, attrs[i].name);
        if (!a.name)
            goto oom;
        if (a.kind == RT_ATTR_STR && !(a.s = rt__arena_strdup(A, attrs[i].s)))
            goto oom;
        if (a.kind == RT_ATTR_INTS && a.n &&
            !(a.ints = rt__arena_memdup(A, attrs[i].ints, sizeof(int64_t) * (size_t)a.n)))
            goto oom;
        if (a.kind == RT_ATTR_FLOATS && a.n &&
            !(a.floats = rt__arena_memdup(A, attrs[i].floats, sizeof(float) * (size_t)a.n)))
            goto oom;
        e->attrs[i] = a;
    }
    return 0;
oom:
    g->n--;
    return rt__gerr(g, RT_ENOMEM, "out of memory");
}

/* *slot = a copy of the checked name (what says which, for the error) */
static int rt__set_name(rt_graph *g, const char **slot, const char *name, const char *what)
{
    int rc = rt__check_name(g, name, what);
    if (rc < 0)
        return rc;
    *slot = rt__arena_strdup(&g->arena, name);
    return *slot ? 0 : rt__gerr(g, RT_ENOMEM, "out of memory");
}

int rt_graph_set_output(rt_graph *g, const char *name)
{
    return g ? rt__set_name(g, &g->output, name, "output") : RT_EINVAL;
}

int rt_graph_set_loss_mask(rt_graph *g, const char *name)
{
    return rt_graph_set_loss_masks(g, &name, 1);
}

int rt_graph_set_loss_masks(rt_graph *g, const char *const *names, int n)
{
    if (!g)
        return RT_EINVAL;
    if (!names || n < 1 || n > RT_MAX_HEADS)
        return rt__gerr(g, RT_EINVAL, "loss masks: 1 to %d names", RT_MAX_HEADS);
    const char *kept[RT_MAX_HEADS] = {0};
    for (int k = 0; k < n; k++) {
        int rc;
        if (names[k] && *names[k] && (rc = rt__set_name(g, &kept[k], names[k], "loss mask")) < 0)
            return rc;
    }
    memcpy(g->loss_mask, kept, sizeof kept);
    g->n_masks = n;
    return 0;
}

int rt_graph_set_outputs(rt_graph *g, const char *const *names, int n)
{
    if (!g || !names || n < 2 || n > RT_MAX_HEADS)
        return g ? rt__gerr(g, RT_EINVAL, "outputs: 2 to %d names", RT_MAX_HEADS) : RT_EINVAL;
    char flat[RT_MAX_HEADS][160];
    const char *cat[RT_MAX_HEADS];
    int rc;
    for (int k = 0; k < n; k++) {
        if ((rc = rt__check_name(g, names[k], "output")) < 0)
            return rc;
        for (int j = 0; j < k; j++)
            if (!strcmp(names[j], names[k]))
                return rt__gerr(g, RT_EINVAL, "output '%s' named twice", names[k]);
        if (snprintf(flat[k], sizeof flat[k], "%s:flat", names[k]) >= (int)sizeof flat[k])
            return rt__gerr(g, RT_EINVAL, "output name '%.40s...' too long", names[k]);
        if ((rc = rt_graph_add_node(g, flat[k], "Flatten", 1, &names[k], 0, NULL)) < 0)
            return rc;
        cat[k] = flat[k];
        g->heads[k] = rt__arena_strdup(&g->arena, names[k]);
        if (!g->heads[k])
            return rt__gerr(g, RT_ENOMEM, "out of memory");
    }
    rt_attr ax = {.name = "axis", .kind = RT_ATTR_INT, .i = -1};
    if ((rc = rt_graph_add_node(g, "outputs", "Concat", n, cat, 1, &ax)) < 0)
        return rc;
    g->n_heads = n;
    return rt_graph_set_output(g, "outputs");
}

int rt_graph_name_outputs(rt_graph *g, const char *const *names, int n)
{
    if (!g)
        return RT_EINVAL;
    if (n != g->n_heads || n < 2)
        return rt__gerr(g, RT_EINVAL, "%d output names for %d outputs", n, g->n_heads);
    for (int k = 0; k < n; k++)
        if (!names[k] || !*names[k] || !(g->head_label[k] = rt__arena_strdup(&g->arena, names[k])))
            return rt__gerr(g, names[k] && *names[k] ? RT_ENOMEM : RT_EINVAL,
                            "output %d has no name", k);
    return 0;
}

/* ------------------------------------------------------------ config/names */

void rt_train_config_init(rt_train_config *c)
{
    memset(c, 0, sizeof *c);
    c->loss = RT_LOSS_SPARSE_CE;
    c->opt = RT_OPT_ADAM;
    c->lr = 1e-3f;
    c->momentum = 0.0f;
    c->beta1 = 0.9f;
    c->beta2 = 0.999f;
    c->eps = 1e-7f;
    c->weight_decay = 0.004f;
    c->rho = 0.9f;
    c->ftrl_power = -0.5f;
    c->ftrl_init = 0.1f;
    c->sched = RT_SCHED_CONSTANT;
    c->gamma = 0.1f;
    c->metrics = RT_METRIC_ACCURACY;
    c->batch_size = 32;
    c->seed = 0;
    c->shuffle = 1;
    c->label_dtype = RT_I32;
    c->label_ndim = 0;
    c->reduction = RT_REDUCE_MEAN;
    c->ignore_index = -100;
    c->loss_beta = 1.0f;
    c->loss_check = 1;
}

typedef struct {
    const char *name;
    int val;
} rt__name_val;

static const rt__name_val rt__loss_tab[] = {
    {"sparse_categorical_crossentropy", RT_LOSS_SPARSE_CE},
    {"categorical_crossentropy", RT_LOSS_CE},
    {"binary_crossentropy", RT_LOSS_BCE},
    {"mean_squared_error", RT_LOSS_MSE},
    {"mean_absolute_error", RT_LOSS_MAE},
    {"logcosh", RT_LOSS_LOGCOSH},
    {"mse", RT_LOSS_MSE},
    {"mae", RT_LOSS_MAE},
    {"log_cosh", RT_LOSS_LOGCOSH},
    {"hinge", RT_LOSS_HINGE},
    {"squared_hinge", RT_LOSS_SQUARED_HINGE},
    {"poisson", RT_LOSS_POISSON},
    {"kl_divergence", RT_LOSS_KLD},
    {"kld", RT_LOSS_KLD},
    {"kullback_leibler_divergence", RT_LOSS_KLD},
    {"huber", RT_LOSS_HUBER_KERAS},
    {"sparse_ce", RT_LOSS_SPARSE_CE},
    {"bce", RT_LOSS_BCE},
    /* PyTorch: torch.nn.functional's names, then torch.nn's modules */
    {"cross_entropy", RT_LOSS_CROSS_ENTROPY},
    {"nll_loss", RT_LOSS_NLL},
    {"bce_with_logits", RT_LOSS_BCE_LOGITS},
    {"binary_cross_entropy_with_logits", RT_LOSS_BCE_LOGITS},
    {"binary_cross_entropy", RT_LOSS_BCE_TORCH},
    {"mse_loss", RT_LOSS_MSE_TORCH},
    {"l1_loss", RT_LOSS_L1},
    {"smooth_l1_loss", RT_LOSS_SMOOTH_L1},
    {"huber_loss", RT_LOSS_HUBER},
    {"CrossEntropyLoss", RT_LOSS_CROSS_ENTROPY},
    {"NLLLoss", RT_LOSS_NLL},
    {"BCEWithLogitsLoss", RT_LOSS_BCE_LOGITS},
    {"BCELoss", RT_LOSS_BCE_TORCH},
    {"MSELoss", RT_LOSS_MSE_TORCH},
    {"L1Loss", RT_LOSS_L1},
    {"SmoothL1Loss", RT_LOSS_SMOOTH_L1},
    {"HuberLoss", RT_LOSS_HUBER},
    {NULL, 0}};
static const rt__name_val rt__opt_tab[] = {
    {"sgd", RT_OPT_SGD},         {"adam", RT_OPT_ADAM},
    {"adamw", RT_OPT_ADAMW},     {"rmsprop", RT_OPT_RMSPROP},
    {"adagrad", RT_OPT_ADAGRAD}, {"adadelta", RT_OPT_ADADELTA},
    {"adamax", RT_OPT_ADAMAX},   {"nadam", RT_OPT_NADAM},
    {"ftrl", RT_OPT_FTRL},       {NULL, 0}};
static const rt__name_val rt__sched_tab[] = {{"constant", RT_SCHED_CONSTANT},
                                             {"step", RT_SCHED_STEP},
                                             {"step_decay", RT_SCHED_STEP},
                                             {"cosine", RT_SCHED_COSINE},
                                             {"exponential", RT_SCHED_EXP},
                                             {"exponential_decay", RT_SCHED_EXP},
                                             {"cosine_decay", RT_SCHED_COSINE},
                                             {"linear_warmup", RT_SCHED_LINEAR_WARMUP},
                                             {"warmup", RT_SCHED_LINEAR_WARMUP},
                                             {"warmup_cosine", RT_SCHED_WARMUP_COSINE},
                                             {NULL, 0}};

static int rt__lookup(const rt__name_val *t, const char *name, int *out)
{
    if (!name)
        return RT_EINVAL;
    for (; t->name; t++) {
        if (strcasecmp(t->name, name) == 0) {
            *out = t->val;
            return 0;
        }
    }
    return RT_EINVAL;
}

int rt_loss_from_name(const char *name, rt_loss_kind *out)
{
    int v, rc = rt__lookup(rt__loss_tab, name, &v);
    if (rc == 0)
        *out = (rt_loss_kind)v;
    return rc;
}

/* The losses' names, indexed by rt_loss_kind (0 is none), NULL-terminated
 * for rt_engine_loss_names. */
static const char *const loss_names[] = {"",
                                         "sparse_categorical_crossentropy",
                                         "categorical_crossentropy",
                                         "binary_crossentropy",
                                         "mean_squared_error",
                                         "mean_absolute_error",
                                         "logcosh",
                                         "cross_entropy",
                                         "nll_loss",
                                         "bce_with_logits",
                                         "binary_cross_entropy",
                                         "mse_loss",
                                         "l1_loss",
                                         "smooth_l1_loss",
                                         "huber_loss",
                                         "hinge",
                                         "squared_hinge",
                                         "poisson",
                                         "kl_divergence",
                                         "huber",
                                         NULL};

const char *rt_loss_name(rt_loss_kind k)
{
    return k >= RT_LOSS_SPARSE_CE && k <= RT_LOSS_LAST ? loss_names[k] : NULL;
}

const char *rt_precision_name(int prec)
{
    return prec == RT_PREC_F32 ? "float32" : prec == RT_PREC_BF16 ? "mixed_bfloat16" : NULL;
}

int rt_precision_from_name(const char *name, int *prec)
{
    if (!name)
        return RT_EINVAL;
    if (!strcmp(name, "float32") || !strcmp(name, "f32") || !strcmp(name, "fp32"))
        *prec = RT_PREC_F32;
    else if (!strcmp(name, "mixed_bfloat16") || !strcmp(name, "bf16"))
        *prec = RT_PREC_BF16;
    else
        return RT_EINVAL;
    return 0;
}

int rt_reduction_from_name(const char *name, rt_reduction *out)
{
    if (!name)
        return RT_EINVAL;
    if (!strcmp(name, "mean"))
        *out = RT_REDUCE_MEAN;
    else if (!strcmp(name, "sum"))
        *out = RT_REDUCE_SUM;
    else
        return RT_EINVAL;
    return 0;
}

int rt_opt_from_name(const char *name, rt_opt_kind *out)
{
    int v, rc = rt__lookup(rt__opt_tab, name, &v);
    if (rc == 0)
        *out = (rt_opt_kind)v;
    return rc;
}

int rt_sched_from_name(const char *name, rt_sched_kind *out)
{
    int v, rc = rt__lookup(rt__sched_tab, name, &v);
    if (rc == 0)
        *out = (rt_sched_kind)v;
    return rc;
}

const char *const *rt_engine_loss_names(void) { return loss_names + 1; }

const char *const *rt_engine_optimizer_names(void)
{
    static const char *const names[] = {"sgd",      "adam",   "adamw", "rmsprop", "adagrad",
                                        "adadelta", "adamax", "nadam", "ftrl",    NULL};
    return names;
}
