/*
 * rt_exec.c - a model instance: parameters, optimizer state, the arena, the
 * data cursor; training, evaluation, prediction.
 *
 * A training step: gather the batch (rows of the epoch's permutation) into
 * the arena, run the forward calls, the loss (which also writes the output
 * gradient), the backward calls, clip, update. Everything it touches was
 * allocated at rt_exec_create (the permutation when a data set is first
 * seen), so a step allocates nothing.
 *
 * Tensor memory (the arena, the parameter block, the scratch) is the plan's
 * backend's: this file adds offsets to its pointers and passes them to the
 * backend's step functions (rt__backend), and reads or writes values only
 * through upload/download or the backend's host view (rt__hv).
 *
 * Determinism: initial values, permutations and dropout masks are pure
 * functions of (seed, what, counter), and the cursor (epoch, position)
 * lives here, so K calls of one step equal one call of K steps.
 */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sys/mman.h>
#include <unistd.h>

#include "rt_clock.h"
#include "rt_engine_impl.h"
#include "rt_errf.h"

struct rt_exec {
    rt_plan *p;
    const rt__backend *be; /* the plan's */
    char err[RT__ERRLEN];
    /* backend memory (rt__backend.alloc) */
    float *block; /* w | g | s1 | s2 */
    float *w, *g, *s1, *s2;
    unsigned char *arena;
    float *gemm_scratch;
    float *loss_scratch; /* 2 * batch * output floats */
    rt__kargs *k;        /* n_fwd + n_bwd resolved calls */
    rt__run run;
    double act_pen; /* the last forward's activity loss (ActivityReg) */
    float *xb, *out;
    float *lin, *lgrad; /* the loss's input and its gradient */
    void *lb;
    /* a batch that fill() writes on the host: xb/lb's host view, or (a
     * backend without one) staging uploaded after the fill */
    float *xb_h;
    void *lb_h;
    float *stage;       /* that staging, or NULL */
    int64_t step;       /* global step */
    int64_t epoch, pos; /* 0-based epoch, next batch in it */
    const void *dx;     /* the data set the cursor refers to */
    int64_t dn;
    int restored;           /* cursor loaded from a checkpoint */
    const void *checked_y;  /* labels already range-checked (daemon data */
    int64_t checked_n;      /* sets are immutable); saves O(n) per call */
    int y_ignored;          /* those labels hold PyTorch's ignore_index */
    const float *checked_x; /* inputs already checked as Embedding indices */
    int64_t checked_xn;
    int64_t *perm;
    int64_t perm_cap, perm_epoch;
    double ep_loss, ep_acc;
    int64_t ep_samples;
    /* > 0: rt_exec_set_lr's rate replaces the config's. Atomic
     * (__atomic_load/__atomic_store): the daemon's Control call sets it
     * from another thread while a training runs, and each step reads it
     * once at its start, so a change applies at the next step boundary. */
    float lr_set;
    float *swb; /* the batch's sample weights (batch_size floats) */
    /* per-step loss masks (rt_plan.has_loss_mask): one output's, or each
     * head's (mk[k], NULL for an unmasked head). The loss runs part by
     * part (the output, or each head): a masked part's kept rows of the
     * loss input and labels, an unmasked head's samples, packed (backend
     * memory, host-visible), their gradient and sample weights, and how
     * many (mk_n, the last part's); mk_L[k] is part k's loss over them (a
     * masked part's: one row a sample) */
    const float *mk[RT_MAX_HEADS];
    float *mk_y, *mk_dy, *mk_sw;
    void *mk_lab;
    int64_t mk_n;
    rt__lossinfo mk_L[RT_MAX_HEADS];
    rt_aug_draw *augd;       /* the batch's augmentation draws (batch_size) */
    const float *checked_sw; /* sample weights already checked, as checked_y */
    int64_t checked_sw_n;
    rt__macc ep_macc; /* the epoch's metrics beyond loss and accuracy */
    /* several outputs: each output's sums for this step, the epoch, this
     * call and an evaluation (one block; NULL for one output) */
    rt__hacc *step_h, *ep_h, *call_h, *eval_h;
    rt_replica rep;   /* size 0: a single process */
    float *gh;        /* the gradient block's host view (replicas) */
    float *rep_slots; /* deterministic mode: k shard gradients */
    double *rep_st;   /* 2 per local shard */
    float *rep_x;     /* a streamed step's batch, rows at their places: */
    void *rep_y;      /* inputs, labels and sample weights (one block */
    float *rep_w;     /* from rep_x, allocated by the first such step) */
    int *rep_ready;   /* overlap: each bucket's last backward call */
    int *rep_order;   /* the buckets by that call, last bucket first */
    int rep_nb;
    uint64_t edits;       /* rt_exec_state_edits (atomic: see lr_set) */
    int64_t sh_lo, sh_hi; /* rt_exec_shard_slots: the slots kept, hi 0 all */
    int sh_whole;         /* sharded, the whole slots held for now: 1
                                * fetched for a read, 2 loaded or copied (the
                                * replicas get it at the next training call) */
    int torn;             /* rt_exec_set_torn: the state cannot be saved */
    /* stateful RNNs: their carried states (rt__kargs.state), zeros at
     * first; a reset asked (rt_exec_reset_states, atomic: another thread
     * may ask while training runs) zeroes them before the next forward */
    struct rt__stnode {
        const rt__node *nd;
        float *p;
        int64_t n;
        int reset;
    } * stn;
    int n_stn;
    int64_t st_batch;        /* their batch size: every batch must be whole */
    char bn_err[RT__ERRLEN]; /* a synchronised BatchNorm's failed sum */
};

/* The daemon's pause hook (rt_exec_set_pause_hook): set once before the
 * first call is served and only read after, so no lock. */
static void (*pause_hook)(void);

/* A long host pass over a data set (the label and index checks, the
 * epoch's order) calls the pause hook every RT__PAUSE_EVERY elements: at
 * 10^7 rows such a pass takes most of a second, all before the first step
 * of a data set (or of an epoch), and the daemon's time slices must reach
 * inside it. */
#define RT__PAUSE_EVERY 16384
static inline void rt__pause_at(const rt_exec *e, int64_t i)
{
    (void)e;
    if ((i & (RT__PAUSE_EVERY - 1)) == 0 && i && pause_hook)
        pause_hook();
}

void rt_exec_set_pause_hook(void (*fn)(void)) { pause_hook = fn; }

static int rt__check_sw(rt_exec *e, const rt_data *d);
static void rt__release_slots(rt_exec *e);
static int rt__slots_whole(const rt_exec *e);
static void rt__gather_sw(rt_exec *e, const float *sw, const int64_t *idx, int64_t start,
                          int64_t nb);

/* d's augmentation for a training step's gather, or NULL */
static const rt_augment *rt__aug(const rt_data *d)
{
    return d->aug.img && !d->fill ? &d->aug : NULL;
}

/* The host address of backend memory p, or NULL (no host view). */
static void *rt__hv(const rt_exec *e, const void *p)
{
    return e->be->host(e->be->context, (void *)p);
}
static void rt__up(const rt_exec *e, void *dst, const void *src, size_t n)
{
    e->be->upload(e->be->context, dst, src, n);
}
static void rt__down(const rt_exec *e, void *dst, const void *src, size_t n)
{
    e->be->download(e->be->context, dst, src, n);
}

/* Around each engine call, on the calling thread: the backend's mode for
 * it (the CPU backend flushes denormals to zero), restored on return. */
static uint64_t rt__enter(const rt_exec *e)
{
    return e && e->be->enter ? e->be->enter(e->be->context) : 0;
}
static void rt__leave(const rt_exec *e, uint64_t saved)
{
    if (e && e->be->leave)
        e->be->leave(e->be->context, saved);
}

/* the message in e->err, returns code (rt_errf, the one formatter) */
#define rt__eerr(e, code, ...) rt_errf((e)->err, sizeof(e)->err, (code), __VA_ARGS__)

/* ------------------------------------------------------------ initializers */

static float rt__normal(uint64_t seed, uint64_t stream, uint64_t ctr)
{
    /* Box-Muller on two uniforms; 1 - u keeps log's argument in (0, 1] */
    float u1 = 1.0f - rt__rng_unit(seed, stream, 2 * ctr);
    float u2 = rt__rng_unit(seed, stream, 2 * ctr + 1);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958648f * u2);
}

/* Keras' truncated_normal: redraw outside 2 stddev */
static float rt__trunc_normal(uint64_t seed, uint64_t stream, uint64_t i)
{
    for (uint64_t a = 0; a < 64; a++) {
        float z = rt__normal(seed, stream, i * 64 + a);
        if (z >= -2.0f && z <= 2.0f)
            return z;
    }
    return 0.0f; /* 64 misses in a row: p < 1e-80 */
}

static void rt__view_perm(const rt__param *pr, float *usr, float *eng, int to_user);

/* Keras' Orthogonal: the (rows = prod(dims[:-1]), cols = dims[-1]) matrix
 * is Q of the QR of a normal matrix with R's diagonal made positive, which
 * is what Gram-Schmidt on the columns of the taller orientation gives;
 * transposed when rows < cols, times gain. dims are the declared ones (a
 * view's: MultiHeadAttention's (dim, heads, key_dim) kernel is orthogonal
 * as (dim * heads, key_dim), not as the engine's (dim, heads * key_dim)),
 * drawn in the caller's order and then put in the engine's. */
static void rt__init_orthogonal(const rt__param *pr, uint64_t seed, uint64_t st, float *w)
{
    const int viewed = pr->view.n && pr->view.user.ndim > 0;
    const rt__shape *s = viewed ? &pr->view.user : &pr->shape;
    float *u = w;
    if (viewed && !(u = malloc(sizeof(float) * (size_t)pr->numel))) {
        memset(w, 0, sizeof(float) * (size_t)pr->numel);
        return;
    }
    const int64_t cols = s->d[s->ndim - 1], rows = pr->numel / cols;
    const int64_t R = rows > cols ? rows : cols, C = rows > cols ? cols : rows;
    /* A is (R, C) column-major in double: a[j * R + i] */
    double *a = malloc(sizeof(double) * (size_t)(R * C));
    if (!a) {
        memset(w, 0, sizeof(float) * (size_t)pr->numel);
        if (u != w)
            free(u);
        return;
    }
    for (int64_t i = 0; i < R * C; i++)
        a[i] = rt__normal(seed, st, (uint64_t)i);
    for (int64_t j = 0; j < C; j++) {
        double *q = a + j * R;
        for (int pass = 0; pass < 2; pass++) /* twice: stays orthogonal in float */
            for (int64_t k = 0; k < j; k++) {
                const double *p = a + k * R;
                double d = 0;
                for (int64_t i = 0; i < R; i++)
                    d += p[i] * q[i];
                for (int64_t i = 0; i < R; i++)
                    q[i] -= d * p[i];
            }
        double nrm = 0;
        for (int64_t i = 0; i < R; i++)
            nrm += q[i] * q[i];
        nrm = sqrt(nrm);
        for (int64_t i = 0; i < R; i++)
            q[i] = nrm > 0 ? q[i] / nrm : 0;
    }
    const double gain = pr->opts.scale;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            u[r * cols + c] = (float)(gain * (rows >= cols ? a[c * R + r] : a[r * R + c]));
    free(a);
    if (u != w) {
        rt__view_perm(pr, u, w, 0);
        free(u);
    }
}

void rt__init_param(const rt__param *pr, int index, uint64_t seed, float *w)
{
    (void)index;
    const int64_t n = pr->numel;
    if (pr->value) {
        memcpy(w, pr->value, sizeof(float) * (size_t)n);
        return;
    }
    /* the fans of the shape the caller declared (a view's: Keras'
     * MultiHeadAttention kernel (dim, heads, key_dim), held 2-D) */
    const rt__shape *s = pr->view.n ? &pr->view.user : &pr->shape;
    double fan_in = 1, fan_out = 1;
    if (s->ndim == 1) {
        fan_in = fan_out = (double)s->d[0];
    } else if (s->ndim >= 2) {
        /* Keras: the receptive field multiplies both fans (conv kernels) */
        double rf = 1;
        for (int i = 0; i + 2 < s->ndim; i++)
            rf *= (double)s->d[i];
        fan_in = (double)s->d[s->ndim - 2] * rf;
        fan_out = (double)s->d[s->ndim - 1] * rf;
    }
    rt_init init = pr->init;
    if (init == RT_INIT_DEFAULT)
        init = pr->shape.ndim >= 2 ? RT_INIT_GLOROT_UNIFORM : RT_INIT_ZEROS;
    /* one stream per parameter, keyed by its position in the graph */
    const uint64_t st = RT__STREAM_INIT + (uint64_t)pr->entry;
    switch (init) {
    case RT_INIT_ZEROS:
    case RT_INIT_DEFAULT: memset(w, 0, sizeof(float) * (size_t)n); break;
    case RT_INIT_ONES:
        for (int64_t i = 0; i < n; i++)
            w[i] = 1.0f;
        break;
    case RT_INIT_GLOROT_UNIFORM:
    case RT_INIT_HE_UNIFORM: {
        double lim =
            init == RT_INIT_GLOROT_UNIFORM ? sqrt(6.0 / (fan_in + fan_out)) : sqrt(6.0 / fan_in);
        for (int64_t i = 0; i < n; i++)
            w[i] = (float)((2.0 * rt__rng_unit(seed, st, (uint64_t)i) - 1.0) * lim);
        break;
    }
    case RT_INIT_VARIANCE_SCALING: {
        const rt_param_opts *o = &pr->opts;
        double fan = o->mode == RT_FAN_IN    ? fan_in
                     : o->mode == RT_FAN_OUT ? fan_out
                                             : (fan_in + fan_out) / 2;
        double var = o->scale / (fan > 1 ? fan : 1);
        if (o->dist == RT_DIST_UNIFORM) {
            double lim = sqrt(3.0 * var);
            for (int64_t i = 0; i < n; i++)
                w[i] = (float)((2.0 * rt__rng_unit(seed, st, (uint64_t)i) - 1.0) * lim);
        } else if (o->dist == RT_DIST_UNTRUNCATED_NORMAL) {
            for (int64_t i = 0; i < n; i++)
                w[i] = (float)(sqrt(var) * rt__normal(seed, st, (uint64_t)i));
        } else {
            double sd = sqrt(var) / 0.87962566103423978;
            for (int64_t i = 0; i < n; i++)
                w[i] = (float)(sd * rt__trunc_normal(seed, st, (uint64_t)i));
        }
        break;
    }
    case RT_INIT_UNIFORM:
        for (int64_t i = 0; i < n; i++)
            w[i] = (float)(pr->opts.a +
                           (pr->opts.b - pr->opts.a) * rt__rng_unit(seed, st, (uint64_t)i));
        break;
    case RT_INIT_NORMAL:
    case RT_INIT_TRUNCATED_NORMAL:
        for (int64_t i = 0; i < n; i++) {
            float z = init == RT_INIT_NORMAL ? rt__normal(seed, st, (uint64_t)i)
                                             : rt__trunc_normal(seed, st, (uint64_t)i);
            w[i] = (float)(pr->opts.a + pr->opts.b * z);
        }
        break;
    case RT_INIT_CONSTANT:
        for (int64_t i = 0; i < n; i++)
            w[i] = (float)pr->opts.scale;
        break;
    case RT_INIT_IDENTITY:
        memset(w, 0, sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < pr->shape.d[0] && i < pr->shape.d[1]; i++)
            w[i * pr->shape.d[1] + i] = (float)pr->opts.scale;
        break;
    case RT_INIT_ORTHOGONAL: rt__init_orthogonal(pr, seed, st, w); break;
    case RT_INIT_GLOROT_NORMAL:
    case RT_INIT_HE_NORMAL: {
        /* Keras: truncated normal, stddev = sqrt(scale / fan) / .8796...,
         * the std of a unit normal truncated at +-2 */
        double var = init == RT_INIT_GLOROT_NORMAL ? 2.0 / (fan_in + fan_out) : 2.0 / fan_in;
        double sd = sqrt(var) / 0.87962566103423978;
        for (int64_t i = 0; i < n; i++)
            w[i] = (float)(sd * rt__trunc_normal(seed, st, (uint64_t)i));
        break;
    }
    }
}

/* ---------------------------------------------------------------- create */

/* backend pointers: offsets only, never dereferenced here */
static float *rt__resolve(rt_exec *e, rt__ref r)
{
    switch (r.space) {
    case RT__SP_ARENA: return (float *)(e->arena + r.off);
    case RT__SP_PARAM: return e->w + r.off;
    case RT__SP_GRAD: return e->g + r.off;
    default: return NULL;
    }
}

/* The stateful RNNs' states (host memory: the kernels of every backend
 * read them through rt__kargs.state) */
static int rt__exec_states(rt_exec *e)
{
    const rt_plan *p = e->p;
    int64_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
        int k = 0;
        for (int i = 0; i < p->n_fwd; i++) {
            const rt__node *nd = p->calls[i].nd;
            if (nd->op->params != RT__P_RNN || !rt__rnn_cp(nd)->stateful)
                continue;
            const rt__rnn_params *rp = rt__rnn_cp(nd);
            const int64_t n = (rp->cell == RT__RNN_LSTM ? 2 : 1) * rp->stateful * rp->U;
            if (pass) {
                e->stn[k] = (struct rt__stnode){.nd = nd, .p = e->stn[0].p + total, .n = n};
                e->k[i].state = e->stn[k].p;
                e->st_batch = rp->stateful;
            }
            total += n;
            k++;
        }
        if (!pass) {
            if (!k)
                return 0;
            e->stn = calloc((size_t)k, sizeof *e->stn);
            float *blk = calloc((size_t)total, sizeof(float));
            if (!e->stn || !blk) {
                free(blk);
                return RT_ENOMEM;
            }
            e->stn[0].p = blk;
            e->n_stn = k;
            total = 0;
        }
    }
    return 0;
}

int rt_exec_reset_states(rt_exec *e, const char *layer)
{
    if (!e)
        return RT_EINVAL;
    const size_t ln = layer ? strlen(layer) : 0;
    int n = 0;
    for (int i = 0; i < e->n_stn; i++) {
        const char *nm = e->stn[i].nd->name;
        /* the layer's node, or a node of it (a Bidirectional's halves) */
        if (ln && (strncmp(nm, layer, ln) != 0 || (nm[ln] && nm[ln] != '/')))
            continue;
        __atomic_store_n(&e->stn[i].reset, 1, __ATOMIC_RELEASE);
        n++;
    }
    return n;
}

int64_t rt_exec_stateful_batch(const rt_exec *e) { return e && e->n_stn ? e->st_batch : 0; }

/* the resets asked since the last forward */
static void rt__apply_resets(rt_exec *e)
{
    for (int i = 0; i < e->n_stn; i++)
        if (__atomic_exchange_n(&e->stn[i].reset, 0, __ATOMIC_ACQ_REL))
            memset(e->stn[i].p, 0, sizeof(float) * (size_t)e->stn[i].n);
}

/* Keras refuses a stateful model's data of a size the batch does not
 * divide: a last, smaller batch has no states to carry */
int rt_exec_check_stateful_n(rt_exec *e, int64_t n)
{
    if (e->n_stn && n % e->st_batch)
        return rt__eerr(e, RT_EINVAL,
                        "In a stateful network, you should only pass inputs with a number of "
                        "samples that can be divided by the batch size %lld. Found: %lld samples",
                        (long long)e->st_batch, (long long)n);
    return 0;
}

/* the loss parts under loss masks (rt__masked_loss): the one output, or
 * each head */
static int rt__mk_parts(const rt_plan *p) { return p->loss.n_heads ? p->loss.n_heads : 1; }

int rt_exec_create(rt_plan *p, rt_exec **out)
{
    if (!out)
        return RT_EINVAL;
    *out = NULL;
    if (!p)
        return RT_EINVAL;
    rt_exec *e = calloc(1, sizeof *e);
    if (!e)
        return RT_ENOMEM;
    e->p = p;
    e->be = p->backend;
    rt_plan_retain(p);
    const rt__backend *be = e->be;
    void *bc = be->context;
    const int64_t P = p->param_floats, T = p->train_floats;
    e->block = be->alloc(bc, sizeof(float) * (size_t)(P + 3 * T));
    e->arena = be->alloc(bc, (size_t)p->arena_bytes);
    e->gemm_scratch = be->alloc(bc, sizeof(float) * (size_t)p->gemm_scratch_floats);
    /* several outputs gather each head: 4 outputs' and the labels' floats */
    const int64_t lsn =
        p->loss.n_heads ? 4 * p->loss.out_numel + p->loss.lab_numel : 2 * p->loss.out_numel;
    e->loss_scratch = be->alloc(bc, sizeof(float) * (size_t)p->cfg.batch_size * (size_t)lsn);
    if (p->loss.n_heads && (e->step_h = calloc(4, sizeof *e->step_h))) {
        e->ep_h = e->step_h + 1;
        e->call_h = e->step_h + 2;
        e->eval_h = e->step_h + 3;
    }
    int nc = p->n_fwd + p->n_bwd;
    e->k = calloc((size_t)(nc ? nc : 1), sizeof *e->k);
    e->swb = malloc(sizeof(float) * (size_t)p->cfg.batch_size);
    e->augd = malloc(sizeof *e->augd * (size_t)p->cfg.batch_size);
    if (p->has_loss_mask) {
        const int64_t B = p->cfg.batch_size;
        int64_t rows = 1;
        for (int k = 0; k < rt__mk_parts(p); k++) {
            const rt__lossinfo *H = p->loss.n_heads ? &p->loss.head[k] : &p->loss;
            rt__lossinfo *P = &e->mk_L[k];
            *P = *H;
            if (!(p->has_loss_mask >> k & 1))
                continue;
            P->rows = 1;
            P->out_numel = H->classes;
            P->lab_numel = H->lab_numel / H->rows;
            rows = H->rows > rows ? H->rows : rows;
        }
        e->mk_y = be->alloc(bc, sizeof(float) * (size_t)(B * p->loss.out_numel));
        e->mk_dy = be->alloc(bc, sizeof(float) * (size_t)(B * p->loss.out_numel));
        e->mk_lab = be->alloc(bc, 4 * (size_t)(B * p->loss.lab_numel));
        e->mk_sw = malloc(sizeof(float) * (size_t)(B * rows));
    }
    if (!e->block || !e->arena || !e->gemm_scratch || !e->loss_scratch || !e->k || !e->swb ||
        !e->augd || (p->loss.n_heads && !e->step_h) ||
        (p->has_loss_mask && (!e->mk_y || !e->mk_dy || !e->mk_lab || !e->mk_sw))) {
        rt_exec_destroy(e);
        return RT_ENOMEM;
    }
    e->w = e->block;
    e->g = e->w + P;
    e->s1 = e->g + T;
    e->s2 = e->s1 + T;
    /* initial values: in place through the host view, else staged */
    float *wh = rt__hv(e, e->w), *wt = NULL;
    if (!wh && P > 0 && !(wh = wt = malloc(sizeof(float) * (size_t)P))) {
        rt_exec_destroy(e);
        return RT_ENOMEM;
    }
    for (int i = 0; i < p->n_params; i++)
        rt__init_param(&p->params[i], i, p->cfg.seed, wh + p->params[i].off);
    if (wt) {
        rt__up(e, e->w, wt, sizeof(float) * (size_t)P);
        free(wt);
    }
    e->run.seed = p->cfg.seed;
    e->run.gemm_scratch = e->gemm_scratch;
    e->run.gemm_scratch_floats = p->gemm_scratch_floats;
    for (int i = 0; i < nc; i++) {
        const rt__call *c = &p->calls[i];
        rt__kargs *a = &e->k[i];
        a->nd = c->nd;
        a->r = &e->run;
        a->y = rt__resolve(e, c->y);
        a->dy = rt__resolve(e, c->dy);
        a->scratch = rt__resolve(e, c->scratch);
        a->ws = rt__resolve(e, c->ws);
        for (int j = 0; j < c->nd->n_in; j++) {
            a->x[j] = rt__resolve(e, c->x[j]);
            a->dx[j] = rt__resolve(e, c->dx[j]);
        }
        a->accum = c->accum;
    }
    if (rt__exec_states(e) < 0) {
        rt_exec_destroy(e);
        return RT_ENOMEM;
    }
    e->xb = rt__resolve(e, p->x_buf);
    e->lb = rt__resolve(e, p->lab_buf);
    e->out = rt__resolve(e, p->out_val);
    e->lin = rt__resolve(e, p->loss_in);
    e->lgrad = rt__resolve(e, p->loss_grad);
    int mk_host = 1;
    for (int k = 0; k < RT_MAX_HEADS; k++)
        if (p->has_loss_mask >> k & 1)
            mk_host &= (e->mk[k] = rt__resolve(e, p->loss_mask[k])) && rt__hv(e, e->mk[k]);
    if (p->has_loss_mask) {
        /* the packing reads and writes in place */
        if (!mk_host || !rt__hv(e, e->lin) || !rt__hv(e, e->lb) ||
            (e->lgrad && !rt__hv(e, e->lgrad)) || !rt__hv(e, e->mk_y) || !rt__hv(e, e->mk_dy) ||
            !rt__hv(e, e->mk_lab)) {
            rt_exec_destroy(e);
            return RT_EUNIMPLEMENTED;
        }
    }
    e->xb_h = rt__hv(e, e->xb);
    e->lb_h = rt__hv(e, e->lb);
    if (!e->xb_h || !e->lb_h) {
        /* x | labels of a full batch, as the arena holds them */
        const size_t xs = sizeof(float) * (size_t)(p->cfg.batch_size * p->in_numel);
        e->stage = malloc(xs + 4 * (size_t)(p->cfg.batch_size * p->loss.lab_numel) + 4);
        if (!e->stage) {
            rt_exec_destroy(e);
            return RT_ENOMEM;
        }
        e->xb_h = e->stage;
        e->lb_h = (char *)e->stage + xs;
    }
    e->perm_epoch = -1;
    *out = e;
    return 0;
}

void rt_exec_destroy(rt_exec *e)
{
    if (!e)
        return;
    if (e->rep.on_destroy)
        e->rep.on_destroy(e->rep.ctx, e);
    free(e->rep_slots);
    free(e->rep_st);
    free(e->rep_x);
    free(e->rep_ready);
    free(e->rep_order);
    void *bc = e->be->context;
    e->be->release(bc, e->block);
    e->be->release(bc, e->arena);
    e->be->release(bc, e->gemm_scratch);
    e->be->release(bc, e->loss_scratch);
    if (e->mk_y)
        e->be->release(bc, e->mk_y);
    if (e->mk_dy)
        e->be->release(bc, e->mk_dy);
    if (e->mk_lab)
        e->be->release(bc, e->mk_lab);
    free(e->mk_sw);
    free(e->stage);
    free(e->k);
    free(e->step_h);
    free(e->swb);
    free(e->augd);
    free(e->perm);
    if (e->stn)
        free(e->stn[0].p);
    free(e->stn);
    rt_plan_release(e->p);
    free(e);
}

const char *rt_exec_errmsg(const rt_exec *e) { return e ? e->err : "exec is NULL"; }
rt_plan *rt_exec_plan(const rt_exec *e) { return e ? e->p : NULL; }
int64_t rt_exec_global_step(const rt_exec *e) { return e ? e->step : RT_EINVAL; }

/* ------------------------------------------------------------------ data */

/* An Embedding reading the data input takes its values as indices: each
 * must be integral and in [0, vocabulary). rt__check_indices: once per
 * (x, n), as labels are; a streamed set's batches (batch 1: rows named by
 * their place in the batch) each time. */
static int rt__scan_indices(rt_exec *e, const float *x, int64_t n, int batch)
{
    const rt_plan *p = e->p;
    for (int k = 0; k < p->n_nodes; k++) {
        const rt__node *nd = &p->nodes[k];
        if (nd->op != &rt__op_embedding || nd->in[0] != p->input_entry)
            continue;
        const int64_t V = rt__embed_cp(nd)->V, m = p->in_numel;
        for (int64_t i = 0; i < n * m; i++) {
            rt__pause_at(e, i);
            const float v = x[i];
            if (!(v >= 0.0f && v < (float)V) || v != floorf(v))
                return rt__eerr(e, RT_EDATA,
                                "%s %lld: value %g at position %lld is not an index in "
                                "[0, %lld) for Embedding '%.64s'",
                                batch ? "a streamed batch's row" : "sample", (long long)(i / m),
                                (double)v, (long long)(i % m), (long long)V, nd->name);
        }
    }
    return 0;
}

/* the same, once per data set */
static int rt__check_indices(rt_exec *e, const float *x, int64_t n)
{
    if (x == e->checked_x && n == e->checked_xn)
        return 0;
    int rc = rt__scan_indices(e, x, n, 0);
    if (rc < 0)
        return rc;
    e->checked_x = x;
    e->checked_xn = n;
    return 0;
}

int rt_exec_check_rows(rt_exec *e, const float *x, int64_t n)
{
    if (!e || (!x && n > 0))
        return RT_EINVAL;
    e->err[0] = '\0';
    return rt__scan_indices(e, x, n, 1);
}

/* x: the inputs, or a streamed set's fill_id (not read: its rows are
 * decoded batch by batch) */
static int rt__check_x(rt_exec *e, const float *x, int64_t n, int streamed)
{
    if (!x)
        return rt__eerr(e, RT_EDATA, "no input data");
    if (n <= 0)
        return rt__eerr(e, RT_EDATA, "data set has %lld samples", (long long)n);
    if (n > (INT64_C(1) << 31))
        return rt__eerr(e, RT_ETOOBIG, "data set has %lld samples, max 2^31", (long long)n);
    return streamed ? 0 : rt__check_indices(e, x, n);
}

/* sample weights reach the batches (a streamed replica's through fill) */
static int rt__has_sw(const rt_data *d) { return d->sw != NULL || (d->fill && d->fill_sw); }

/* d's augmented images lie inside each row */
static int rt__check_aug(rt_exec *e, const rt_data *d)
{
    const rt_augment *a = rt__aug(d);
    if (a && (a->h < 1 || a->w < 1 || (a->c != 1 && a->c != 3) || a->crop_pad < 0 ||
              a->crop_pad > a->h || a->crop_pad > a->w || a->off < 0 ||
              a->off > e->p->in_numel - (int64_t)a->h * a->w * a->c))
        return rt__eerr(e, RT_EINVAL,
                        "augmented %dx%dx%d images (crop %d) at float %lld do "
                        "not fit the input's %lld floats",
                        a->h, a->w, a->c, a->crop_pad, (long long)a->off,
                        (long long)e->p->in_numel);
    return 0;
}

int rt_exec_check_data(rt_exec *e, const rt_data *d)
{
    if (!e)
        return RT_EINVAL;
    e->err[0] = '\0';
    if (!d)
        return rt__eerr(e, RT_EINVAL, "data is NULL");
    int rc = rt__check_x(e, d->fill ? (const float *)d->fill_id : d->x, d->n, d->fill != NULL);
    if (rc < 0)
        return rc;
    if (!d->y && !d->fill)
        return rt__eerr(e, RT_EDATA, "no labels");
    if ((rc = rt_exec_check_stateful_n(e, d->n)) < 0)
        return rc;
    if ((rc = rt__check_sw(e, d)) < 0)
        return rc;
    if ((rc = rt__check_aug(e, d)) < 0)
        return rc;
    const rt__lossinfo *L = &e->p->loss;
    if (d->y_dtype != L->lab_dt)
        return rt__eerr(e, RT_EDTYPE, "labels are %s, the program expects %s",
                        d->y_dtype == RT_I32   ? "i32"
                        : d->y_dtype == RT_F32 ? "f32"
                                               : "?",
                        L->lab_dt == RT_I32 ? "i32" : "f32");
    if (RT_LOSS_IS_TORCH(L->kind) && rt__has_sw(d))
        return rt__eerr(e, RT_EINVAL,
                        "PyTorch's losses take no sample weights (%s: use its "
                        "class weight)",
                        rt_loss_name(L->kind));
    /* class indices: in range, or (PyTorch's) ignore_index */
    const int idx =
        L->n_heads
            ? 0
            : L->kind == RT_LOSS_SPARSE_CE ||
                  ((L->kind == RT_LOSS_CROSS_ENTROPY || L->kind == RT_LOSS_NLL) && !L->prob_target);
    const int torch = RT_LOSS_IS_TORCH(L->kind);
    if (idx && d->y && (d->y != e->checked_y || d->n != e->checked_n)) {
        const int64_t cnt = d->n * L->lab_numel, C = L->classes;
        int ignored = 0;
        for (int64_t i = 0; i < cnt; i++) {
            rt__pause_at(e, i);
            double v = d->y_dtype == RT_I32 ? (double)((const int32_t *)d->y)[i]
                                            : (double)((const float *)d->y)[i];
            if (torch && v == (double)L->ignore_index) {
                ignored = 1;
                continue;
            }
            if (!(v >= 0 && v < (double)C) || v != floor(v))
                return rt__eerr(e, RT_EDATA, "label %g at sample %lld outside [0, %lld)%s", v,
                                (long long)(i / L->lab_numel), (long long)C,
                                torch ? " and not the ignore_index" : "");
        }
        e->checked_y = d->y;
        e->checked_n = d->n;
        e->y_ignored = ignored;
    }
    /* several outputs: the sparse heads' class indices */
    if (L->n_heads && d->y && (d->y != e->checked_y || d->n != e->checked_n)) {
        const float *y = d->y;
        for (int k = 0; k < L->n_heads; k++) {
            const rt__lossinfo *H = &L->head[k];
            if (H->kind != RT_LOSS_SPARSE_CE)
                continue;
            for (int64_t i = 0; i < d->n; i++) {
                rt__pause_at(e, i);
                for (int64_t r = 0; r < H->lab_numel; r++) {
                    const double v = y[i * L->lab_numel + L->lab_off[k] + r];
                    if (!(v >= 0 && v < (double)H->classes) || v != floor(v))
                        return rt__eerr(e, RT_EDATA,
                                        "output %d: label %g at sample %lld "
                                        "outside [0, %lld)",
                                        k + 1, v, (long long)i, (long long)H->classes);
                }
            }
        }
        e->checked_y = d->y;
        e->checked_n = d->n;
        e->y_ignored = 0;
    }
    return 0;
}

void rt_exec_epoch_order(const rt_exec *e, int64_t n, int64_t epoch, int64_t *perm)
{
    /* in pieces (the first touch of a fresh perm is part of the cost) */
    for (int64_t i0 = 0; i0 < n; i0 += RT__PAUSE_EVERY) {
        rt__pause_at(e, i0);
        const int64_t i1 = n - i0 < RT__PAUSE_EVERY ? n : i0 + RT__PAUSE_EVERY;
        for (int64_t i = i0; i < i1; i++)
            perm[i] = i;
    }
    if (e->p->cfg.shuffle) {
        /* Fisher-Yates; j from a 64-bit draw by multiply-shift (Lemire) */
        for (int64_t i = n - 1; i > 0; i--) {
            rt__pause_at(e, i);
            uint64_t r = rt__rng_u64(e->p->cfg.seed, RT__STREAM_SHUFFLE,
                                     ((uint64_t)epoch << 32) | (uint64_t)i);
            int64_t j = (int64_t)(((unsigned __int128)r * (uint64_t)(i + 1)) >> 64);
            int64_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
    }
}

static void rt__gen_perm(rt_exec *e)
{
    rt_exec_epoch_order(e, e->dn, e->epoch, e->perm);
    e->perm_epoch = e->epoch;
}

/* rows idx[0..nb) (or start..start+nb when idx is NULL) of host x and y
 * into the arena, by the backend; with aug (not NULL) the rows' images
 * augmented, with the draws made here (one process's, whatever the
 * backend or the replica) */
static void rt__gather(rt_exec *e, const float *x, const void *y, const rt_augment *aug,
                       const int64_t *idx, int64_t start, int64_t nb)
{
    if (aug)
        for (int64_t i = 0; i < nb; i++)
            rt_aug_draws(aug, e->p->cfg.seed, (uint64_t)(idx ? idx[i] : start + i), &e->augd[i]);
    const rt__gather_args g = {.xb = e->xb,
                               .yb = e->lb,
                               .x = x,
                               .y = y,
                               .idx = idx,
                               .start = start,
                               .nb = nb,
                               .in = e->p->in_numel,
                               .ln = e->p->loss.lab_numel,
                               .aug = aug,
                               .draw = aug ? e->augd : NULL};
    e->be->gather(e->be->context, &g);
}

int rt_exec_rows(rt_exec *e, const rt_data *d, const int64_t *idx, int64_t nb, float *x, void *y)
{
    if (!e || !d || !d->x || !idx || !x || nb < 0 || nb > e->p->cfg.batch_size)
        return RT_EINVAL;
    int rc = rt__check_aug(e, d);
    if (rc < 0)
        return rc;
    if (!d->y)
        y = NULL;
    rt__gather(e, d->x, y ? d->y : NULL, rt__aug(d), idx, 0, nb);
    rt__down(e, x, e->xb, sizeof(float) * (size_t)(nb * e->p->in_numel));
    if (y)
        rt__down(e, y, e->lb, 4 * (size_t)(nb * e->p->loss.lab_numel));
    return 0;
}

/* d->fill's batch of nb rows: written on the host (xb_h, lb_h), uploaded
 * where that is staging, its indices checked */
static int rt__fill(rt_exec *e, const rt_data *d, int64_t epoch, int64_t pos, int64_t nb, float *sw)
{
    int rc = d->fill(d->fill_ud, epoch, pos, nb, e->xb_h, e->lb_h, sw, e->err, sizeof e->err);
    if (rc < 0)
        return rc;
    if (e->stage) {
        rt__up(e, e->xb, e->xb_h, sizeof(float) * (size_t)(nb * e->p->in_numel));
        rt__up(e, e->lb, e->lb_h, 4 * (size_t)(nb * e->p->loss.lab_numel));
    }
    return rt__scan_indices(e, e->xb_h, nb, 1);
}

/* Per-step loss masks: Keras' masked loss (keras/src/losses/loss.py,
 * apply_mask with reduction "sum_over_batch_size": the mask scaled by
 * total / valid, so the batch loss is sum(w l m) / sum(m), w the sample
 * weight; Keras 2's weighted_masked_objective divides by mean(m) + eps
 * likewise), per output: Keras' CompileLoss runs each output's loss with
 * that output's own mask, then sums them times the loss weights
 * (keras/src/trainers/compile_utils.py). The loss runs part by part, the
 * one output or each head: rt__mk_move packs a masked part's kept rows as
 * samples of one row (mk_L[k]), an unmasked head's samples whole, and the
 * loss's mean over them is the part's batch loss; its gradient
 * d/dy (w dl / valid) is scattered back times the head's weight, 0 on the
 * masked rows. A part with no kept row has loss 0 and no gradient, as
 * Keras' 0 / eps. The sums are per sample of the batch (nb times the
 * batch's value), as the unmasked loss adds them. */

/* g NULL: part k of the batch packed into mk_y, mk_lab and mk_sw; else
 * its gradient (mk_dy) times w scattered back into g. The rows it moves. */
static int64_t rt__mk_move(rt_exec *e, int k, int64_t nb, int weighted, float *g, float w)
{
    const rt__lossinfo *L = &e->p->loss, *H = L->n_heads ? &L->head[k] : L;
    const int64_t O = L->out_numel, LN = L->lab_numel;
    const int64_t off = L->n_heads ? L->out_off[k] : 0, loff = L->n_heads ? L->lab_off[k] : 0;
    const float *y = rt__hv(e, e->lin), *cd = rt__hv(e, e->mk_dy);
    const char *lab = rt__hv(e, e->lb);
    float *cy = rt__hv(e, e->mk_y);
    char *cl = rt__hv(e, e->mk_lab);
    const float *m = e->mk[k];
    /* an unmasked head: a sample is a row of all its values */
    const int64_t R = m ? H->rows : 1, C = m ? H->classes : H->out_numel,
                  lr = m ? e->mk_L[k].lab_numel : H->lab_numel;
    int64_t v = 0;
    for (int64_t r = 0; r < nb * R; r++) {
        if (m && m[r] == 0.0f)
            continue;
        const int64_t i = r / R, at = i * O + off + (r % R) * C;
        if (g) {
            for (int64_t j = 0; j < C; j++)
                g[at + j] = w * cd[v * C + j];
            v++;
            continue;
        }
        memcpy(cy + v * C, y + at, sizeof(float) * (size_t)C);
        memcpy(cl + 4 * v * lr, lab + 4 * (i * LN + loff + (r % R) * lr), 4 * (size_t)lr);
        e->mk_sw[v++] = weighted ? e->swb[i] : 1.0f;
    }
    return v;
}

static void rt__masked_loss(rt_exec *e, int64_t nb, int weighted, double *loss_sum, double *acc_sum,
                            int grad)
{
    const rt__lossinfo *L = &e->p->loss;
    float *g = grad && e->lgrad ? rt__hv(e, e->lgrad) : NULL;
    if (g)
        memset(g, 0, sizeof(float) * (size_t)(nb * L->out_numel));
    for (int k = 0; k < rt__mk_parts(e->p); k++) {
        const int64_t v = e->mk_n = rt__mk_move(e, k, nb, weighted, NULL, 0);
        if (v == 0)
            continue;
        double ls = 0, as = 0;
        e->be->loss(e->be->context, &e->mk_L[k], e->mk_y, e->mk_lab, v, weighted ? e->mk_sw : NULL,
                    g ? e->mk_dy : NULL, &ls, &as, e->loss_scratch);
        const float w = L->n_heads ? L->weight[k] : 1.0f;
        *loss_sum += (double)w * (double)nb * ls / (double)v;
        if (!L->n_heads)
            *acc_sum += (double)nb * as / (double)v;
        if (g)
            rt__mk_move(e, k, nb, weighted, g, w);
    }
}

/* the batch's metrics beyond loss and accuracy into a (under a loss mask:
 * over the kept rows rt__masked_loss packed, as Keras weighs a metric by
 * the mask) */
static void rt__metrics(rt_exec *e, uint32_t mets, int64_t nb, rt__macc *a)
{
    if (!e->p->has_loss_mask)
        e->be->metrics(e->be->context, &e->p->loss, mets, e->lin, e->lb, nb, a);
    else if (e->mk_n > 0)
        e->be->metrics(e->be->context, &e->mk_L[0], mets, e->mk_y, e->mk_lab, e->mk_n, a);
}

/* the batch's loss: plain, or weighted by the batch's sample weights (swb) */
static void rt__loss(rt_exec *e, int64_t nb, int weighted, double *loss_sum, double *acc_sum,
                     int grad)
{
    if (e->p->has_loss_mask) {
        rt__masked_loss(e, nb, weighted, loss_sum, acc_sum, grad);
        return;
    }
    e->be->loss(e->be->context, &e->p->loss, e->lin, e->lb, nb, weighted ? e->swb : NULL,
                grad ? e->lgrad : NULL, loss_sum, acc_sum, e->loss_scratch);
}

/* several outputs: the batch's per-output sums into h (added) */
static void rt__heads(rt_exec *e, int64_t nb, int weighted, rt__hacc *h)
{
    const rt_plan *p = e->p;
    uint32_t mets[RT_MAX_HEADS];
    for (int k = 0; k < p->loss.n_heads; k++)
        mets[k] = p->cfg.heads[k].metrics;
    /* under loss masks each head as its loss runs (rt__masked_loss): a
     * masked head's loss, accuracy and metrics over its kept rows */
    for (int k = 0; p->has_loss_mask && k < p->loss.n_heads; k++) {
        const int64_t v = rt__mk_move(e, k, nb, weighted, NULL, 0);
        if (v == 0)
            continue;
        double ls = 0, as = 0;
        e->be->loss(e->be->context, &e->mk_L[k], e->mk_y, e->mk_lab, v, weighted ? e->mk_sw : NULL,
                    NULL, &ls, &as, e->loss_scratch);
        h->loss[k] += (double)nb * ls / (double)v;
        h->acc[k] += (double)nb * as / (double)v;
        if (mets[k] & ~RT_METRIC_ACCURACY)
            e->be->metrics(e->be->context, &e->mk_L[k], mets[k], e->mk_y, e->mk_lab, v, &h->m[k]);
    }
    if (p->has_loss_mask)
        return;
    e->be->heads(e->be->context, &p->loss, mets, e->lin, e->lb, nb, weighted ? e->swb : NULL, h,
                 e->loss_scratch);
}

/* the doubles of an rt__hacc before each accumulator's count */
static void rt__hacc_add(rt__hacc *d, const rt__hacc *a, int n_heads)
{
    for (int k = 0; k < n_heads; k++) {
        d->loss[k] += a->loss[k];
        d->acc[k] += a->acc[k];
        double *x = (double *)&d->m[k];
        const double *y = (const double *)&a->m[k];
        for (size_t i = 0; i < offsetof(rt__macc, n) / sizeof(double); i++)
            x[i] += y[i];
        d->m[k].n += a->m[k].n;
    }
}

static void rt__hacc_zero(rt__hacc *h)
{
    if (h)
        memset(h, 0, sizeof *h);
}

/* The cursor to the next epoch's first batch, its sums from zero. */
/* mets 0: the step asked for no metric, so the 4 KB of sums are zeroed
 * only if something was added to them */
static void rt__next_epoch(rt_exec *e, int mets)
{
    e->epoch++;
    e->pos = 0;
    e->ep_loss = e->ep_acc = 0;
    e->ep_samples = 0;
    if (mets || e->ep_macc.n)
        memset(&e->ep_macc, 0, sizeof e->ep_macc);
    rt__hacc_zero(e->ep_h);
}

/* update_stats: training mode also moves BatchNorm's moving statistics
 * (a training step does, rt_exec_compute_grads must not) */
static void rt__forward(rt_exec *e, int64_t nb, int training, int update_stats)
{
    rt__apply_resets(e);
    e->run.n = nb;
    e->run.training = training;
    e->run.update_stats = training && update_stats;
    /* rt_exec_compute_grads's forward (training, no statistics) leaves
     * the carried states as they are */
    e->run.carry = !training || update_stats;
    e->run.step = e->step;
    e->act_pen = 0;
    e->run.act_pen = &e->act_pen;
    const rt_plan *p = e->p;
    p->backend->run(p->backend->context, p->calls, e->k, p->n_fwd);
}

static void rt__backward(rt_exec *e)
{
    const rt_plan *p = e->p;
    p->backend->run(p->backend->context, p->calls + p->n_fwd, e->k + p->n_fwd, p->n_bwd);
}

/* The rate of the step starting now: the override (read once, atomically;
 * see lr_set) or the schedule's. */
static float rt__lr_now(const rt_exec *e)
{
    float o;
    __atomic_load(&e->lr_set, &o, __ATOMIC_ACQUIRE);
    return o > 0 ? o : rt__sched_lr(&e->p->cfg, e->step);
}

/* --------------------------------------------------------------- training */

/* whether a BatchNorm of p asks for the global batch's statistics */
static int rt__has_sync_bn(const rt_plan *p)
{
    for (int i = 0; i < p->n_nodes; i++)
        if (p->nodes[i].op == &rt__op_batchnorm && rt__bn_cp(&p->nodes[i])->sync)
            return 1;
    return 0;
}

/* A streamed set on a replica: a batch's rows at their places in
 * rep_x/rep_y/rep_w (allocated by the first training call that needs
 * them, not by a step). */
static int rt__replica_rows(rt_exec *e)
{
    if (e->rep_x)
        return 0;
    const rt_plan *p = e->p;
    const int64_t B = p->cfg.batch_size, in = p->in_numel, ln = p->loss.lab_numel;
    /* x | y | w, each 64-byte aligned */
    const size_t xs = ((sizeof(float) * (size_t)(B * in)) + 63) & ~(size_t)63,
                 ys = ((size_t)(B * ln * 4) + 63) & ~(size_t)63;
    e->rep_x = rt__aligned_alloc(xs + ys + sizeof(float) * (size_t)B);
    if (!e->rep_x)
        return rt__eerr(e, RT_ENOMEM, "out of memory for a streamed batch of %lld rows",
                        (long long)B);
    e->rep_y = (char *)e->rep_x + xs;
    e->rep_w = (float *)((char *)e->rep_x + xs + ys);
    return 0;
}

/* The backward pass in segments (run 0: only the buckets, a replica
 * without rows): after the call that finishes a bucket, the bucket, scaled
 * by s as the whole gradient is without overlap, goes to the replica's
 * start, in rep_order (the same on every replica). Returns 0 or the first
 * failed start's code (its message in err); the pass still runs to its end
 * and no bucket is started after a failure. */
static int rt__backward_overlap(rt_exec *e, float s, int run, char *err, size_t errlen)
{
    const rt_plan *p = e->p;
    const rt_replica *R = &e->rep;
    const rt__call *calls = p->calls + p->n_fwd;
    const rt__kargs *args = e->k + p->n_fwd;
    const int64_t T = p->train_floats, B = R->bucket;
    int from = 0, rc = 0;
    for (int q = 0; q < e->rep_nb; q++) {
        const int b = e->rep_order[q], to = e->rep_ready[b] + 1;
        if (run && to > from) {
            p->backend->run(p->backend->context, calls + from, args + from, to - from);
            from = to;
        }
        const int64_t off = (int64_t)b * B, n = T - off < B ? T - off : B;
        if (run)
            p->backend->scale(p->backend->context, e->g + off, e->g + off, n, s);
        /* the bucket: a range of the gradient block, read through its host view */
        if (rc == 0)
            rc = R->start(R->ctx, e->gh + off, n, err, errlen);
    }
    if (run && from < p->n_bwd)
        p->backend->run(p->backend->context, calls + from, args + from, p->n_bwd - from);
    return rc;
}

int rt_plan_bucket_ready(const rt_plan *p, int64_t bucket, int *ready, int n_ready)
{
    if (!p || bucket <= 0 || n_ready < 0 || (n_ready && !ready))
        return RT_EINVAL;
    const int64_t T = p->train_floats, nb = (T + bucket - 1) / bucket;
    if (nb > n_ready)
        return RT_EINVAL;
    for (int64_t b = 0; b < nb; b++)
        ready[b] = -1;
    /* calls run in index order: the last that writes a float finishes it */
    for (int c = 0; c < p->n_bwd; c++) {
        const rt__call *call = &p->calls[p->n_fwd + c];
        for (int j = 0; j < RT__MAX_IN; j++) {
            if (call->dx[j].space != RT__SP_GRAD)
                continue;
            const int64_t lo = (int64_t)call->dx[j].off;
            /* the parameter the gradient belongs to, to its end (an offset
             * no parameter holds: the rest of the gradient) */
            int64_t hi = T;
            for (int i = 0; i < p->n_params; i++) {
                const rt__param *pr = &p->params[i];
                if (pr->trainable && lo >= pr->goff && lo < pr->goff + pr->numel) {
                    hi = pr->goff + pr->numel;
                    break;
                }
            }
            for (int64_t b = lo / bucket; b < nb && b * bucket < hi; b++)
                ready[b] = c;
        }
    }
    return (int)nb;
}

/* One step's gradient as a replica (rt_replica): this replica's shards of
 * the global batch of nb rows at perm[start] (a streamed set: as fill
 * gives them), then reduce. */
static int rt__replica_step(rt_exec *e, const rt_data *d, int64_t start, int64_t nb, double *bl,
                            double *ba, rt__macc *call_macc)
{
    const rt_plan *p = e->p;
    const rt_replica *R = &e->rep;
    const int sw = rt__has_sw(d);
    const uint32_t mets = p->cfg.metrics & ~RT_METRIC_ACCURACY;
    rt__macc sm; /* this step's metrics, the replica's rows, then all */
    memset(&sm, 0, sizeof sm);
    const int64_t T = p->train_floats;
    const int M = R->micro > 0 ? R->micro : R->size, k = M / R->size;
    /* synchronised BatchNorm (not with micro-shards, whose statistics are
     * each shard's): every replica runs the same collectives in its
     * forward and backward passes, so each needs rows */
    const int sync_bn = R->micro == 0 && R->size > 1;
    if (sync_bn && nb < M && (p->cfg.sync_bn || rt__has_sync_bn(p)))
        return rt__eerr(e, RT_EINVAL,
                        "synchronised BatchNorm: a batch of %lld rows over %d "
                        "replicas leaves one without rows; choose a batch size (and data "
                        "size) that gives every replica at least one row",
                        (long long)nb, R->size);
    if (d->fill) {
        /* the whole batch (only this replica's rows need arrive: rt_data.fill) */
        int frc = d->fill(d->fill_ud, e->epoch, e->pos, nb, e->rep_x, e->rep_y,
                          sw ? e->rep_w : NULL, e->err, sizeof e->err);
        if (frc < 0)
            return frc;
    }
    /* every replica asks, also one without rows: all take the same path */
    const int ov = e->rep_order && R->overlap(R->ctx);
    char err[RT__ERRLEN] = "";
    e->bn_err[0] = 0;
    int orc = 0;
    rt__hacc_zero(e->step_h);
    for (int j = 0; j < k; j++) {
        const int64_t m = (int64_t)R->rank * k + j;
        const int64_t lo = nb * m / M, nl = nb * (m + 1) / M - lo;
        float *gj = R->micro > 0 ? e->rep_slots + (int64_t)j * T : e->gh;
        double l = 0, a = 0;
        if (nl > 0) {
            if (d->fill) {
                rt__gather(e, e->rep_x, e->rep_y, NULL, NULL, lo, nl);
                if (sw)
                    rt__gather_sw(e, e->rep_w, NULL, lo, nl);
                /* rank 0 checked the whole batch before scattering it */
                int irc = rt__scan_indices(e, e->rep_x + lo * p->in_numel, nl, 1);
                if (irc < 0)
                    return irc;
            } else {
                rt__gather(e, d->x, d->y, rt__aug(d), e->perm + start + lo, 0, nl);
                if (sw)
                    rt__gather_sw(e, d->sw, e->perm + start + lo, 0, nl);
            }
            if (sync_bn) {
                e->bn_err[0] = 0;
                e->run.bn_sum = R->sum;
                e->run.bn_ctx = R->ctx;
                e->run.bn_sync_all = p->cfg.sync_bn;
                e->run.bn_share = (double)nl / (double)nb;
                e->run.bn_err = e->bn_err;
                e->run.bn_errlen = sizeof e->bn_err;
            }
            rt__forward(e, nl, 1, j == 0);
            rt__loss(e, nl, sw, &l, &a, 1);
            if (mets)
                rt__metrics(e, p->cfg.metrics, nl, &sm);
            if (e->step_h)
                rt__heads(e, nl, sw, e->step_h);
            /* the shard's mean gradient, as its share of the batch mean */
            const float s = (float)nl / (float)nb;
            if (ov) {
                orc = rt__backward_overlap(e, s, 1, err, sizeof err);
            } else {
                rt__backward(e);
                p->backend->scale(p->backend->context, gj, e->g, T, s);
            }
            e->run.bn_sum = NULL;
            l += (double)nl * e->act_pen;
        } else {
            memset(gj, 0, sizeof(float) * (size_t)T);
            if (ov)
                orc = rt__backward_overlap(e, 0.0f, 0, err, sizeof err);
        }
        e->rep_st[2 * j] = l;
        e->rep_st[2 * j + 1] = a;
    }
    int rc;
    if (ov) {
        /* the started buckets end before anything else reads g */
        char ferr[RT__ERRLEN] = "";
        rc = R->finish(R->ctx, e->rep_st, ferr, sizeof ferr);
        if (orc < 0)
            rc = orc;
        else if (rc < 0)
            snprintf(err, sizeof err, "%s", ferr);
    } else {
        rc = R->reduce(R->ctx, e->gh, T, R->micro > 0 ? e->rep_slots : NULL, k, e->rep_st, err,
                       sizeof err);
    }
    if (e->bn_err[0] && rc == 0)
        return rt__eerr(e, RT_EUNAVAILABLE, "%s", e->bn_err);
    if (rc == 0 && mets) {
        /* every field but n is a sum of doubles */
        rc = R->sum(R->ctx, (double *)&sm, (int)(offsetof(rt__macc, n) / sizeof(double)), err,
                    sizeof err);
        sm.n = nb;
        double *a = (double *)&e->ep_macc, *c = (double *)call_macc;
        const double *v = (const double *)&sm;
        for (size_t i = 0; i < offsetof(rt__macc, n) / sizeof(double); i++) {
            a[i] += v[i];
            c[i] += v[i];
        }
        e->ep_macc.n += nb;
        call_macc->n += nb;
    }
    if (rc == 0 && e->step_h) {
        /* each output's loss and accuracy sums, then its metrics' (the
         * same calls on every replica: one plan) */
        rt__hacc *h = e->step_h;
        const int nh = p->loss.n_heads;
        rc = R->sum(R->ctx, (double *)h, 2 * RT_MAX_HEADS, err, sizeof err); /* loss, acc */
        for (int q = 0; q < nh && rc == 0; q++) {
            if (!(p->cfg.heads[q].metrics & ~RT_METRIC_ACCURACY))
                continue;
            rc = R->sum(R->ctx, (double *)&h->m[q], (int)(offsetof(rt__macc, n) / sizeof(double)),
                        err, sizeof err);
            h->m[q].n = nb;
        }
        if (rc == 0) {
            rt__hacc_add(e->ep_h, h, nh);
            rt__hacc_add(e->call_h, h, nh);
        }
    }
    if (rc < 0)
        return rt__eerr(e, rc, "%s", err[0] ? err : "replica reduce failed");
    *bl = e->rep_st[0];
    *ba = e->rep_st[1];
    return 0;
}

int rt_exec_set_replica(rt_exec *e, const rt_replica *r)
{
    if (!e)
        return RT_EINVAL;
    free(e->rep_slots);
    free(e->rep_st);
    free(e->rep_x);
    e->rep_slots = NULL;
    e->rep_st = NULL;
    e->rep_x = NULL;
    free(e->rep_ready);
    free(e->rep_order);
    e->rep_ready = e->rep_order = NULL;
    e->rep_nb = 0;
    memset(&e->rep, 0, sizeof e->rep);
    if (!r)
        return 0;
    /* the all-reduce reads the gradient block's buckets on the host */
    e->gh = rt__hv(e, e->g);
    if (!e->gh)
        return rt__eerr(e, RT_EUNIMPLEMENTED,
                        "backend %s has no host view of its memory; "
                        "MPI replicas need one",
                        e->be->name);
    if (e->n_stn)
        return rt__eerr(e, RT_EUNIMPLEMENTED,
                        "stateful RNN '%.64s' on MPI replicas: each sample's states would "
                        "have to follow it across replicas",
                        e->stn[0].nd->name);
    if (r->size < 1 || r->rank < 0 || r->rank >= r->size || r->micro < 0 || !r->reduce || !r->sum ||
        (r->micro > 0 && r->micro % r->size))
        return rt__eerr(e, RT_EINVAL,
                        "replica %d of %d with %d micro-shards: the replica "
                        "count must divide the micro-shard count",
                        r->rank, r->size, r->micro);
    /* a shard's gradient is its mean scaled by its rows: exact for a loss
     * whose batch loss is the mean over rows, not for a sum or a mean
     * over class weights (nor one over labels not ignored, rt__exec_train) */
    const rt__lossinfo *L = &e->p->loss;
    if (RT_LOSS_IS_TORCH(L->kind) && (L->reduction == RT_REDUCE_SUM || L->cw))
        return rt__eerr(e, RT_EINVAL, "%s with %s is not supported on MPI replicas",
                        rt_loss_name(L->kind), L->cw ? "class weights" : "reduction sum");
    if (r->micro > 0 && e->p->cfg.sync_bn)
        return rt__eerr(e, RT_EINVAL,
                        "sync_batchnorm and --deterministic-reduce do not go "
                        "together: BatchNorm statistics are each micro-shard's there");
    const int k = r->micro > 0 ? r->micro / r->size : 1;
    if (r->micro == 0 && r->bucket > 0 && r->overlap && r->start && r->finish &&
        e->p->train_floats > 0) {
        const int64_t nb = (e->p->train_floats + r->bucket - 1) / r->bucket;
        if (nb > INT_MAX / 2)
            return rt__eerr(e, RT_EINVAL, "%lld buckets", (long long)nb);
        e->rep_ready = malloc(sizeof(int) * (size_t)nb);
        e->rep_order = malloc(sizeof(int) * (size_t)nb);
        if (!e->rep_ready || !e->rep_order) {
            free(e->rep_ready);
            free(e->rep_order);
            e->rep_ready = e->rep_order = NULL;
            return rt__eerr(e, RT_ENOMEM, "out of memory for %lld buckets", (long long)nb);
        }
        e->rep_nb = rt_plan_bucket_ready(e->p, r->bucket, e->rep_ready, (int)nb);
        /* by ready call, then the later bucket first (a stable order that
         * every replica computes alike from the same plan) */
        for (int b = 0; b < e->rep_nb; b++) {
            int q = b;
            while (q > 0) {
                const int o = e->rep_order[q - 1];
                if (e->rep_ready[o] < e->rep_ready[b] ||
                    (e->rep_ready[o] == e->rep_ready[b] && o > b))
                    break;
                e->rep_order[q] = o;
                q--;
            }
            e->rep_order[q] = b;
        }
    }
    e->rep_st = calloc((size_t)(2 * k), sizeof(double));
    if (r->micro > 0)
        e->rep_slots = rt__aligned_alloc(sizeof(float) * (size_t)k *
                                         (size_t)(e->p->train_floats ? e->p->train_floats : 1));
    if (!e->rep_st || (r->micro > 0 && !e->rep_slots)) {
        free(e->rep_st);
        free(e->rep_slots);
        free(e->rep_ready);
        free(e->rep_order);
        e->rep_st = NULL;
        e->rep_slots = NULL;
        e->rep_ready = e->rep_order = NULL;
        return rt__eerr(e, RT_ENOMEM, "out of memory for %d micro-shard gradients", k);
    }
    e->rep = *r;
    return 0;
}

static int rt__exec_train(rt_exec *e, const rt_data *d, int64_t steps, rt_train_result *res,
                          rt_step_cb cb, void *ud, float *step_losses)
{
    if (!e)
        return RT_EINVAL;
    if (steps < 0)
        return rt__eerr(e, RT_EINVAL, "steps %lld < 0", (long long)steps);
    int rc = rt_exec_check_data(e, d);
    if (rc < 0)
        return rc;
    const uint64_t t0 = rt_now_ns();
    rt_plan *p = e->p;
    const rt__backend *be = e->be;
    void *bc = be->context;
    const rt_train_config *cfg = &p->cfg;
    const int64_t B = cfg->batch_size;

    const void *id = d->fill ? d->fill_id : (const void *)d->x;
    if (id != e->dx || d->n != e->dn) {
        if (!d->fill && d->n > e->perm_cap) {
            int64_t *np = realloc(e->perm, sizeof(int64_t) * (size_t)d->n);
            if (!np)
                return rt__eerr(e, RT_ENOMEM, "out of memory for %lld samples", (long long)d->n);
            e->perm = np;
            e->perm_cap = d->n;
        }
        if (e->dx && !e->restored && e->pos > 0) {
            /* another data set: start a new epoch at its first batch */
            rt__next_epoch(e, 1);
        }
        /* a restored cursor past this data set's epoch (n >= 1; a product
         * with a loaded pos could overflow) starts at its first batch */
        if (e->restored && e->pos > (d->n - 1) / B)
            e->pos = 0;
        e->restored = 0;
        e->dx = id;
        e->dn = d->n;
        e->perm_epoch = -1;
    }
    if (e->rep.size > 0 && d->fill && (rc = rt__replica_rows(e)) < 0)
        return rc;
    if (e->rep.size > 0 && e->y_ignored && d->y == e->checked_y)
        return rt__eerr(e, RT_EINVAL,
                        "labels equal to ignore_index are not supported on MPI "
                        "replicas");
    const int64_t n = d->n, spe = (n + B - 1) / B;
    double sum_loss = 0, sum_acc = 0;
    int64_t sum_n = 0;
    rt_train_result r = {0};
    const int acc = p->loss.acc;
    const double nan = NAN;
    /* this call's steps, for r.mean. Zeroed only where metrics add to it:
     * without any, nothing reads its sums (rt__metrics_values reads those
     * of the metrics asked for), and zeroing its 4 KB cost a one-step call
     * about 30 ns. The same for the epoch's at each epoch end. */
    const int mets = (cfg->metrics & ~RT_METRIC_ACCURACY) != 0;
    rt__macc call_macc;
    if (mets)
        memset(&call_macc, 0, sizeof call_macc);
    else
        call_macc.n = 0;
    rt__hacc_zero(e->call_h);
    const int nh = p->loss.n_heads;
    int64_t last_nb = 0;

    for (int64_t s = 0; s < steps; s++) {
        const int64_t start = e->pos * B;
        const int64_t nb = n - start < B ? n - start : B;
        const float lr = rt__lr_now(e);
        double bl = 0, ba = 0;
        if (e->rep.size > 0) {
            if (!d->fill && e->perm_epoch != e->epoch)
                rt__gen_perm(e);
            if ((rc = rt__replica_step(e, d, start, nb, &bl, &ba, &call_macc)) < 0)
                return rc;
        } else {
            if (d->fill) {
                /* the source orders a streamed set (its shuffle buffer) */
                if ((rc = rt__fill(e, d, e->epoch, e->pos, nb, rt__has_sw(d) ? e->swb : NULL)) < 0)
                    return rc;
            } else {
                if (e->perm_epoch != e->epoch)
                    rt__gen_perm(e);
                rt__gather(e, d->x, d->y, rt__aug(d), e->perm + start, 0, nb);
                if (d->sw)
                    rt__gather_sw(e, d->sw, e->perm + start, 0, nb);
            }
            rt__forward(e, nb, 1, 1);
            rt__loss(e, nb, rt__has_sw(d), &bl, &ba, 1);
            if (mets) {
                rt__metrics(e, cfg->metrics, nb, &e->ep_macc);
                rt__metrics(e, cfg->metrics, nb, &call_macc);
            }
            if (nh) {
                rt__hacc_zero(e->step_h);
                rt__heads(e, nb, rt__has_sw(d), e->step_h);
                rt__hacc_add(e->ep_h, e->step_h, nh);
                rt__hacc_add(e->call_h, e->step_h, nh);
            }
            rt__backward(e);
            bl += (double)nb * e->act_pen;
        }
        if (p->rep.n_regularized)
            bl += (double)nb * be->regularize(bc, p, e->w, e->g);
        if (p->train_floats) {
            if (cfg->clip_norm > 0)
                be->clip(bc, e->g, p->train_floats, cfg->clip_norm);
            /* ZeRO stage 1 (server/mpi): this replica's slice, then the
             * whole weights from every replica's */
            const int sh = e->rep.gather != NULL;
            /* a sharded state held whole (fetched, loaded): the replicas
             * have it, and from here only the slice stays current */
            if (sh && e->sh_whole && e->rep.fetch)
                rt__release_slots(e);
            const int64_t lo = sh ? e->rep.shard_lo : 0,
                          hi = sh ? e->rep.shard_hi : p->train_floats;
            be->update(bc, cfg, lr, e->step + 1, e->w + lo, e->g + lo, e->s1 + lo, e->s2 + lo,
                       hi - lo);
            if (sh) {
                /* replicas need a host view (rt_exec_set_replicas) */
                char gerr[RT__ERRLEN] = "";
                if ((rc = e->rep.gather(e->rep.ctx, rt__hv(e, e->w), p->train_floats, gerr,
                                        sizeof gerr)) < 0)
                    return rt__eerr(e, rc, "%s", gerr[0] ? gerr : "weight gather failed");
            }
            if (p->rep.n_constrained)
                be->constrain(bc, p, e->w);
        }
        e->step++;
        e->pos++;
        e->ep_loss += bl;
        e->ep_acc += ba;
        e->ep_samples += nb;
        sum_loss += bl;
        sum_acc += ba;
        sum_n += nb;
        const float step_loss = (float)(bl / (double)nb);
        if (step_losses)
            step_losses[s] = step_loss;
        r.steps_run++;
        r.last.loss = bl / (double)nb;
        r.last.acc = acc ? ba / (double)nb : nan;
        r.last.samples = nb;
        last_nb = nb;
        const int epoch_end = e->pos == spe;
        int stop = 0;
        if (cb) {
            rt_step_info info = {
                .step = e->step,
                .epoch = e->epoch + 1,
                .step_in_epoch = e->pos,
                .steps_per_epoch = spe,
                .loss = step_loss,
                .acc = acc ? (float)(ba / (double)nb) : (float)nan,
                .epoch_end = epoch_end,
                .lr = lr,
                .epoch_metrics = {.loss = e->ep_loss / (double)e->ep_samples,
                                  .acc = acc ? e->ep_acc / (double)e->ep_samples : nan,
                                  .samples = e->ep_samples},
            };
            rt__metrics_values(cfg->metrics, &e->ep_macc, &info.epoch_metrics);
            if (nh)
                rt__metrics_heads(p, e->ep_h, e->ep_samples, &info.epoch_metrics);
            stop = cb(ud, &info);
        }
        if (epoch_end) {
            rt__next_epoch(e, mets);
        }
        if (stop) {
            r.stopped = 1;
            break;
        }
    }
    r.global_step = e->step;
    if (sum_n) {
        rt__metrics_values(cfg->metrics, &call_macc, &r.mean);
        if (nh) {
            rt__metrics_heads(p, e->call_h, sum_n, &r.mean);
            rt__metrics_heads(p, e->step_h, last_nb, &r.last); /* the last step's */
        }
        r.mean.loss = sum_loss / (double)sum_n;
        r.mean.acc = acc ? sum_acc / (double)sum_n : nan;
        r.mean.samples = sum_n;
    } else {
        r.mean.acc = r.last.acc = nan;
    }
    r.execute_ns = rt_now_ns() - t0;
    if (res)
        *res = r;
    return 0;
}

static int rt__exec_evaluate(rt_exec *e, const rt_data *d, rt_metrics *out)
{
    if (!e)
        return RT_EINVAL;
    int rc = rt_exec_check_data(e, d);
    if (rc < 0)
        return rc;
    const int64_t B = e->p->cfg.batch_size;
    const uint32_t mets = e->p->cfg.metrics;
    double ls = 0, as = 0;
    rt__macc macc;
    memset(&macc, 0, sizeof macc);
    rt__hacc_zero(e->eval_h);
    for (int64_t start = 0; start < d->n; start += B) {
        const int64_t nb = d->n - start < B ? d->n - start : B;
        if (d->fill) {
            if ((rc = rt__fill(e, d, RT_EPOCH_EVAL, start / B, nb, d->sw ? e->swb : NULL)) < 0)
                return rc;
        } else {
            rt__gather(e, d->x, d->y, NULL, NULL, start, nb);
            if (d->sw)
                rt__gather_sw(e, d->sw, NULL, start, nb);
        }
        rt__forward(e, nb, 0, 0);
        rt__loss(e, nb, d->sw != NULL, &ls, &as, 0);
        if (mets & ~RT_METRIC_ACCURACY)
            rt__metrics(e, mets, nb, &macc);
        if (e->eval_h)
            rt__heads(e, nb, d->sw != NULL, e->eval_h);
        ls += (double)nb * e->act_pen;
    }
    /* Keras' evaluate reports the loss with the regularization terms */
    if (e->p->rep.n_regularized)
        ls += (double)d->n * e->be->regularize(e->be->context, e->p, e->w, NULL);
    if (out) {
        memset(out, 0, sizeof *out);
        rt__metrics_values(mets, &macc, out);
        if (e->eval_h)
            rt__metrics_heads(e->p, e->eval_h, d->n, out);
        out->loss = ls / (double)d->n;
        out->acc = e->p->loss.acc ? as / (double)d->n : NAN;
        out->samples = d->n;
    }
    return 0;
}

static int rt__exec_predict(rt_exec *e, const float *x, int64_t n, float *out)
{
    if (!e)
        return RT_EINVAL;
    e->err[0] = '\0';
    int rc = rt__check_x(e, x, n, 0);
    if (rc < 0)
        return rc;
    if (!out)
        return rt__eerr(e, RT_EINVAL, "no output buffer");
    if ((rc = rt_exec_check_stateful_n(e, n)) < 0)
        return rc;
    const int64_t B = e->p->cfg.batch_size, on = e->p->loss.out_numel;
    for (int64_t start = 0; start < n; start += B) {
        const int64_t nb = n - start < B ? n - start : B;
        rt__gather(e, x, NULL, NULL, NULL, start, nb);
        rt__forward(e, nb, 0, 0);
        rt__down(e, out + start * on, e->out, sizeof(float) * (size_t)(nb * on));
    }
    return 0;
}

static int rt__exec_compute_grads(rt_exec *e, const rt_data *d, int64_t n, double *loss)
{
    if (!e)
        return RT_EINVAL;
    int rc = rt_exec_check_data(e, d);
    if (rc < 0)
        return rc;
    if (n < 1 || n > d->n || n > e->p->cfg.batch_size)
        return rt__eerr(e, RT_EINVAL, "n %lld outside 1..min(%lld, batch_size)", (long long)n,
                        (long long)d->n);
    if (d->fill) {
        if ((rc = rt__fill(e, d, RT_EPOCH_EVAL, 0, n, d->sw ? e->swb : NULL)) < 0)
            return rc;
    } else {
        rt__gather(e, d->x, d->y, NULL, NULL, 0, n);
        if (d->sw)
            rt__gather_sw(e, d->sw, NULL, 0, n);
    }
    rt__forward(e, n, 1, 0);
    double ls = 0, as = 0;
    rt__loss(e, n, d->sw != NULL, &ls, &as, 1);
    rt__backward(e);
    ls += (double)n * e->act_pen;
    if (e->p->rep.n_regularized)
        ls += (double)n * e->be->regularize(e->be->context, e->p, e->w, e->g);
    if (loss)
        *loss = ls / (double)n;
    return 0;
}

int rt_exec_train(rt_exec *e, const rt_data *d, int64_t steps, rt_train_result *res, rt_step_cb cb,
                  void *ud, float *step_losses)
{
    const uint64_t st = rt__enter(e);
    int rc = rt__exec_train(e, d, steps, res, cb, ud, step_losses);
    rt__leave(e, st);
    return rc;
}

int rt_exec_evaluate(rt_exec *e, const rt_data *d, rt_metrics *out)
{
    const uint64_t st = rt__enter(e);
    int rc = rt__exec_evaluate(e, d, out);
    rt__leave(e, st);
    return rc;
}

int rt_exec_predict(rt_exec *e, const float *x, int64_t n, float *out)
{
    const uint64_t st = rt__enter(e);
    int rc = rt__exec_predict(e, x, n, out);
    rt__leave(e, st);
    return rc;
}

int rt_exec_compute_grads(rt_exec *e, const rt_data *d, int64_t n, double *loss)
{
    const uint64_t st = rt__enter(e);
    int rc = rt__exec_compute_grads(e, d, n, loss);
    rt__leave(e, st);
    return rc;
}

/* ---------------------------------------------------------------- params */

/* A parameter between the engine's order (eng) and its callers' (usr):
 * the engine's elements in order, each with its place in the caller's
 * array (rt__view). to_user: usr[...] = eng[...], else the other way. */
static void rt__view_perm(const rt__param *pr, float *usr, float *eng, int to_user)
{
    const rt__view *v = &pr->view;
    int64_t ustride[RT_MAX_DIMS], ed[RT_MAX_DIMS], es[RT_MAX_DIMS], idx[RT_MAX_DIMS] = {0};
    int64_t s = 1;
    for (int k = v->n - 1; k >= 0; k--) {
        ustride[k] = s;
        s *= v->d[k];
    }
    for (int k = 0; k < v->n; k++) {
        ed[k] = v->d[v->perm[k]];
        es[k] = ustride[v->perm[k]];
    }
    int64_t u = 0;
    for (int64_t j = 0; j < pr->numel; j++) {
        if (to_user)
            usr[u] = eng[j];
        else
            eng[j] = usr[u];
        for (int k = v->n - 1; k >= 0; k--) {
            u += es[k];
            if (++idx[k] < ed[k])
                break;
            u -= es[k] * ed[k];
            idx[k] = 0;
        }
    }
}

/* the same with eng in backend memory: in place where the backend has a
 * host view, else staged through a host copy */
static int rt__view_copy(const rt_exec *e, const rt__param *pr, float *usr, float *eng, int to_user)
{
    const size_t b = sizeof(float) * (size_t)pr->numel;
    if (!pr->view.n) {
        if (to_user)
            rt__down(e, usr, eng, b);
        else
            rt__up(e, eng, usr, b);
        return 0;
    }
    float *h = rt__hv(e, eng);
    if (h) {
        rt__view_perm(pr, usr, h, to_user);
        return 0;
    }
    if (!(h = malloc(b)))
        return RT_ENOMEM;
    if (to_user)
        rt__down(e, h, eng, b);
    rt__view_perm(pr, usr, h, to_user);
    if (!to_user)
        rt__up(e, eng, h, b);
    free(h);
    return 0;
}

int rt_exec_get_param(const rt_exec *e, int i, float *dst)
{
    if (!e || !dst || i < 0 || i >= e->p->n_params)
        return RT_EINVAL;
    const rt__param *pr = &e->p->params[i];
    return rt__view_copy(e, pr, dst, e->w + pr->off, 1);
}

int rt_exec_set_param(rt_exec *e, int i, const float *src)
{
    if (!e || !src || i < 0 || i >= e->p->n_params)
        return RT_EINVAL;
    const rt__param *pr = &e->p->params[i];
    const int rc = rt__view_copy(e, pr, (float *)src, e->w + pr->off, 0);
    if (rc < 0)
        return rc;
    __atomic_add_fetch(&e->edits, 1, __ATOMIC_RELEASE);
    return 0;
}

int rt_exec_get_grad(const rt_exec *e, int i, float *dst)
{
    if (!e || !dst || i < 0 || i >= e->p->n_params)
        return RT_EINVAL;
    const rt__param *pr = &e->p->params[i];
    if (pr->trainable)
        return rt__view_copy(e, pr, dst, e->g + pr->goff, 1);
    memset(dst, 0, sizeof(float) * (size_t)pr->numel);
    return 0;
}

/* ------------------------------------------------------------ checkpoints */

typedef struct rt__state_hdr {
    char magic[8]; /* "RTEXEC\0\0" */
    uint32_t version, n_params;
    int64_t param_floats, train_floats;
    int64_t step, epoch, pos, ep_samples;
    double ep_loss, ep_acc;
    uint64_t seed;
    float lr_set; /* rt_exec_set_lr's rate, 0 if none (version 2) */
    uint32_t reserved;
    /* the unfinished epoch's metric accumulators (AUC, top-k, ...), so a
     * resume in mid-epoch reports the same epoch metrics (version 3) */
    rt__macc ep_macc;
} rt__state_hdr;

#define RT__STATE_VERSION 3u

/* Several outputs: the header is followed by the epoch's per-output sums
 * (an rt__hacc), so a resume in mid-epoch reports the same out1_loss, ... */
static size_t rt__state_ext(const rt_exec *e) { return e->ep_h ? sizeof(rt__hacc) : 0; }

/* the stateful RNNs' states: one block, after the optimizer slots in the
 * state blob */
static int64_t rt__st_floats(const rt_exec *e)
{
    int64_t n = 0;
    for (int i = 0; i < e->n_stn; i++)
        n += e->stn[i].n;
    return n;
}

size_t rt_exec_state_size(const rt_exec *e)
{
    if (!e)
        return 0;
    return sizeof(rt__state_hdr) + rt__state_ext(e) +
           sizeof(float) * (size_t)(e->p->param_floats + 2 * e->p->train_floats + rt__st_floats(e));
}

_Static_assert(sizeof(rt__state_hdr) + sizeof(rt__hacc) <= RT_EXEC_STATE_HDR,
               "RT_EXEC_STATE_HDR too small");

/* The state's header of a whole, untorn exec: RT_EUNAVAILABLE when a
 * failed step tore it, an error when its slots are not whole. */
static int rt__state_header(const rt_exec *e, rt__state_hdr *hp);

int rt_exec_state_spans(const rt_exec *e, unsigned char hdr[RT_EXEC_STATE_HDR], rt_exec_span sp[4])
{
    if (!e || !hdr || !sp)
        return RT_EINVAL;
    rt__state_hdr h;
    int rc = rt__state_header(e, &h);
    if (rc < 0)
        return rc;
    memcpy(hdr, &h, sizeof h);
    if (e->ep_h)
        memcpy(hdr + sizeof h, e->ep_h, sizeof *e->ep_h);
    sp[0].p = hdr;
    sp[0].n = sizeof h + rt__state_ext(e);
    /* the parameter block's host view: the checkpoint writes it in place */
    sp[1].p = rt__hv(e, e->w);
    sp[1].n = sizeof(float) * (size_t)h.param_floats;
    sp[2].p = rt__hv(e, e->s1); /* s1 and s2 are adjacent in the block */
    if (!sp[1].p || !sp[2].p)
        return RT_EUNIMPLEMENTED;
    sp[2].n = sizeof(float) * (size_t)(2 * h.train_floats);
    sp[3].p = e->n_stn ? e->stn[0].p : NULL;
    sp[3].n = sizeof(float) * (size_t)rt__st_floats(e);
    return 0;
}

void rt_exec_cursor(const rt_exec *e, int64_t *epoch, int64_t *pos)
{
    *epoch = e->epoch;
    *pos = e->pos;
}

int rt_exec_save_state(const rt_exec *e, void *buf, size_t len)
{
    if (!e || !buf || len < rt_exec_state_size(e))
        return RT_EINVAL;
    rt__state_hdr h;
    int rc = rt__state_header(e, &h);
    if (rc < 0)
        return rc;
    char *o = buf;
    memcpy(o, &h, sizeof h);
    o += sizeof h;
    if (e->ep_h) {
        memcpy(o, e->ep_h, sizeof *e->ep_h);
        o += sizeof *e->ep_h;
    }
    rt__down(e, o, e->w, sizeof(float) * (size_t)h.param_floats);
    o += sizeof(float) * (size_t)h.param_floats;
    rt__down(e, o, e->s1, sizeof(float) * (size_t)(2 * h.train_floats));
    o += sizeof(float) * (size_t)(2 * h.train_floats);
    if (e->n_stn)
        memcpy(o, e->stn[0].p, sizeof(float) * (size_t)rt__st_floats(e));
    return 0;
}

static int rt__state_header(const rt_exec *e, rt__state_hdr *hp)
{
    if (e->torn)
        return RT_EUNAVAILABLE;
    int rc = rt__slots_whole(e);
    if (rc < 0)
        return rc;
    rt__state_hdr h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, "RTEXEC", 6);
    h.version = RT__STATE_VERSION;
    h.n_params = (uint32_t)e->p->n_params;
    h.param_floats = e->p->param_floats;
    h.train_floats = e->p->train_floats;
    h.step = e->step;
    h.epoch = e->epoch;
    h.pos = e->pos;
    h.ep_samples = e->ep_samples;
    h.ep_loss = e->ep_loss;
    h.ep_acc = e->ep_acc;
    h.seed = e->p->cfg.seed;
    __atomic_load(&e->lr_set, &h.lr_set, __ATOMIC_ACQUIRE);
    h.ep_macc = e->ep_macc;
    *hp = h;
    return 0;
}

/* Float i of a blob's bytes (a byte string from outside: maybe unaligned). */
static float rt__blob_f(const unsigned char *b, int64_t i)
{
    float f;
    memcpy(&f, b + 4 * i, 4);
    return f;
}

/* The first non-finite float of v[0..n), or -1. */
static int64_t rt__nonfinite(const unsigned char *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(rt__blob_f(v, i)))
            return i;
    return -1;
}

/* metric sums finite; counts (and RMSE's squares) never negative */
static int rt__macc_ok(const rt__macc *m)
{
    const double *md = (const double *)m;
    for (size_t i = 0; i < offsetof(rt__macc, n) / sizeof(double); i++)
        if (!isfinite(md[i]))
            return 0;
    if (m->sq < 0 || m->elems < 0 || m->tp < 0 || m->fp < 0 || m->fn < 0 || m->pos < 0 ||
        m->neg < 0 || m->n < 0 || m->n > RT_EXEC_MAX_STEP)
        return 0;
    for (int i = 0; i < RT__AUC_T; i++)
        if (m->auc_tp[i] < 0 || m->auc_fp[i] < 0)
            return 0;
    return 1;
}

/* Where a blob's weights and slots would go, checked before anything is
 * copied: a refused blob leaves the exec as it was. A blob is untrusted
 * (a pushed checkpoint, a file in the state directory that anyone with
 * access could have written, its XXH3 recomputed): every counter is
 * bounded so that the training loop's arithmetic on it cannot overflow,
 * and what a step reads (trainable weights, optimizer moments, the epoch's
 * sums) must be finite, so a restored state never turns a loss into NaN. */
static int rt__check_state(rt_exec *e, const rt__state_hdr *h, const unsigned char *w,
                           const unsigned char *s1, const unsigned char *s2)
{
    const rt_plan *p = e->p;
    const int64_t B = p->cfg.batch_size;
    if (h->step < 0 || h->epoch < 0 || h->pos < 0 || h->ep_samples < 0 || h->ep_macc.n < 0)
        return rt__eerr(e, RT_EDATA, "state blob has a negative counter");
    if (h->step > RT_EXEC_MAX_STEP || h->ep_samples > RT_EXEC_MAX_STEP ||
        h->ep_macc.n > RT_EXEC_MAX_STEP)
        return rt__eerr(e, RT_EDATA, "state blob's counters are over the limit of 2^53 steps");
    /* every epoch and every step of the current one took a step: epoch +
     * pos <= step (rt__exec_train, rt_exec_copy_state keep it) */
    int64_t used, rows;
    if (__builtin_add_overflow(h->epoch, h->pos, &used) || used > h->step)
        return rt__eerr(e, RT_EDATA,
                        "state blob's cursor (epoch %lld, batch %lld) is past its "
                        "step %lld",
                        (long long)h->epoch, (long long)h->pos, (long long)h->step);
    if (__builtin_mul_overflow(h->pos, B, &rows))
        return rt__eerr(e, RT_EDATA, "state blob's batch position %lld overflows",
                        (long long)h->pos);
    if (h->seed != p->cfg.seed)
        return rt__eerr(e, RT_EDATA,
                        "state blob belongs to another program (seed %llu, not "
                        "%llu)",
                        (unsigned long long)h->seed, (unsigned long long)p->cfg.seed);
    if (!(h->lr_set >= 0.0f) || isinf(h->lr_set))
        return rt__eerr(e, RT_EDATA, "state blob has a bad learning rate");
    if (!isfinite(h->ep_loss) || !isfinite(h->ep_acc) || h->ep_acc < 0)
        return rt__eerr(e, RT_EDATA, "state blob's epoch loss or accuracy is not finite");
    if (!rt__macc_ok(&h->ep_macc))
        return rt__eerr(e, RT_EDATA,
                        "state blob's epoch metric sums are not finite or "
                        "their counts negative");
    /* Trainable weights and the optimizer's slots must be finite and the
     * second moments (Adam's v, RMSprop's mean square) not negative, or
     * the first step is NaN. Constants (non-trainable parameters) hold
     * whatever the model gave them: an ONNX mask may be -inf. */
    for (int i = 0; i < p->n_params; i++) {
        const rt__param *pr = &p->params[i];
        if (!pr->trainable)
            continue;
        int64_t k = rt__nonfinite(w + 4 * pr->off, pr->numel);
        if (k >= 0)
            return rt__eerr(e, RT_ENAN, "state blob: parameter '%.64s' holds %g at %lld", pr->name,
                            (double)rt__blob_f(w, pr->off + k), (long long)k);
    }
    const int64_t tf = p->train_floats;
    int64_t k1 = rt__nonfinite(s1, tf), k2 = rt__nonfinite(s2, tf);
    if (k1 >= 0 || k2 >= 0)
        return rt__eerr(e, RT_ENAN, "state blob: optimizer slot %d holds %g at %lld",
                        k1 >= 0 ? 1 : 2,
                        (double)(k1 >= 0 ? rt__blob_f(s1, k1) : rt__blob_f(s2, k2)),
                        (long long)(k1 >= 0 ? k1 : k2));
    const rt_opt_kind ok = p->cfg.opt;
    const unsigned char *sq =
        ok == RT_OPT_RMSPROP || ok == RT_OPT_ADAGRAD || ok == RT_OPT_ADADELTA || ok == RT_OPT_FTRL
            ? s1
        : ok == RT_OPT_ADAM || ok == RT_OPT_ADAMW || ok == RT_OPT_ADAMAX || ok == RT_OPT_NADAM
            ? s2
            : NULL;
    for (int64_t i = 0; sq && i < tf; i++)
        if (rt__blob_f(sq, i) < 0)
            return rt__eerr(e, RT_EDATA,
                            "state blob: the optimizer's mean square is %g at %lld "
                            "(never negative)",
                            (double)rt__blob_f(sq, i), (long long)i);
    return 0;
}

/* the whole pages of [a, a + n) back to the system (read as zeros after) */
static void rt__release(float *a, int64_t n)
{
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)a + pg - 1) & ~(pg - 1), hi = (uintptr_t)(a + n) & ~(pg - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* a sharded exec's slots outside [sh_lo, sh_hi) back to the system */
static void rt__release_slots(rt_exec *e)
{
    const int64_t T = e->p->train_floats, lo = e->sh_lo, hi = e->sh_hi;
    float *s1 = rt__hv(e, e->s1), *s2 = rt__hv(e, e->s2);
    rt__release(s1, lo);
    rt__release(s1 + hi, T - hi + lo); /* s2 follows s1 */
    rt__release(s2 + hi, T - hi);
    e->sh_whole = 0;
}

int rt_exec_shard_slots(rt_exec *e, int64_t lo, int64_t hi)
{
    const int64_t T = e ? e->p->train_floats : 0;
    if (!e || lo < 0 || hi <= lo || hi > T)
        return RT_EINVAL;
    /* the pages go back through the host view (replicas need one) */
    float *s1 = rt__hv(e, e->s1), *s2 = rt__hv(e, e->s2);
    if (!s1 || !s2)
        return rt__eerr(e, RT_EUNIMPLEMENTED,
                        "backend %s has no host view of its memory; "
                        "sharded optimizer slots need one",
                        e->be->name);
    e->sh_lo = lo;
    e->sh_hi = hi;
    /* with a fetch (the serving rank) the state it holds now may be one
     * the others have not received yet: kept until its next training call */
    if (e->rep.fetch)
        e->sh_whole = 2;
    else
        rt__release_slots(e);
    return 0;
}

/* the whole slots, fetched from the other replicas when only a slice is
 * held (const: the fetch changes what is held, not the state) */
static int rt__slots_whole(const rt_exec *ce)
{
    rt_exec *e = (rt_exec *)ce;
    if (!e->sh_hi || e->sh_whole)
        return 0;
    if (!e->rep.fetch)
        return rt__eerr(e, RT_EUNAVAILABLE,
                        "this replica holds only its slice of the "
                        "optimizer state");
    char err[200] = "";
    int rc = e->rep.fetch(e->rep.ctx, e, err, sizeof err);
    if (rc < 0)
        return rt__eerr(e, rc, "%s", err);
    e->sh_whole = 1;
    return 0;
}

int rt_exec_slots_held(const rt_exec *e) { return !e || !e->sh_hi || e->sh_whole; }

void rt_exec_state_release(rt_exec *e)
{
    /* a loaded state stays whole until the replicas have it */
    if (e && e->sh_hi && e->sh_whole == 1 && e->rep.fetch)
        rt__release_slots(e);
}

void rt_exec_opt_slots(rt_exec *e, float **s1, float **s2)
{
    *s1 = rt__hv(e, e->s1);
    *s2 = rt__hv(e, e->s2);
}

void rt_exec_set_torn(rt_exec *e) { e->torn = 1; }

int rt_exec_load_state(rt_exec *e, const void *buf, size_t len)
{
    if (!e || !buf)
        return RT_EINVAL;
    rt__state_hdr h;
    if (len < sizeof h)
        return rt__eerr(e, RT_EDATA, "state blob too short");
    memcpy(&h, buf, sizeof h);
    if (memcmp(h.magic, "RTEXEC", 6) || h.version != RT__STATE_VERSION)
        return rt__eerr(e, RT_EDATA, "not an exec state blob of version %u", RT__STATE_VERSION);
    if (h.param_floats != e->p->param_floats || h.train_floats != e->p->train_floats ||
        h.n_params != (uint32_t)e->p->n_params || len != rt_exec_state_size(e))
        return rt__eerr(e, RT_EDATA, "state blob belongs to another program");
    const size_t wb = sizeof(float) * (size_t)h.param_floats,
                 tb = sizeof(float) * (size_t)h.train_floats;
    const unsigned char *s = (const unsigned char *)buf + sizeof h + rt__state_ext(e);
    rt__hacc hx = {0};
    if (e->ep_h)
        memcpy(&hx, (const unsigned char *)buf + sizeof h, sizeof hx);
    int rc = rt__check_state(e, &h, s, s + wb, s + wb + tb);
    const unsigned char *st = s + wb + 2 * tb; /* the RNNs' states */
    const int64_t stf = rt__st_floats(e);
    if (rc == 0 && rt__nonfinite(st, stf) >= 0)
        rc = rt__eerr(e, RT_ENAN, "state blob: a stateful RNN's state is not finite");
    for (int k = 0; rc == 0 && e->ep_h && k < e->p->loss.n_heads; k++)
        if (!isfinite(hx.loss[k]) || !(hx.acc[k] >= 0) || isinf(hx.acc[k]) ||
            !rt__macc_ok(&hx.m[k]))
            rc = rt__eerr(e, RT_EDATA, "state blob's output %d metric sums are bad", k);
    if (rc < 0)
        return rc;
    rt__up(e, e->w, s, wb);
    if (e->sh_hi && !e->rep.fetch) { /* only the slots' kept slice (rt_exec_shard_slots) */
        const size_t o = sizeof(float) * (size_t)e->sh_lo,
                     n = sizeof(float) * (size_t)(e->sh_hi - e->sh_lo);
        rt__up(e, e->s1 + e->sh_lo, s + wb + o, n);
        rt__up(e, e->s2 + e->sh_lo, s + wb + tb + o, n);
    } else {
        rt__up(e, e->s1, s + wb, 2 * tb); /* s1 and s2 are adjacent in the block */
        /* the serving rank: whole until the replicas have it (its next
         * training call sends it them) */
        if (e->sh_hi)
            e->sh_whole = 2;
    }
    if (stf) {
        memcpy(e->stn[0].p, st, sizeof(float) * (size_t)stf);
        for (int i = 0; i < e->n_stn; i++) /* the loaded states, not a reset asked before */
            __atomic_store_n(&e->stn[i].reset, 0, __ATOMIC_RELEASE);
    }
    e->torn = 0;
    e->step = h.step;
    e->epoch = h.epoch;
    e->pos = h.pos;
    e->ep_samples = h.ep_samples;
    e->ep_loss = h.ep_loss;
    e->ep_acc = h.ep_acc;
    e->ep_macc = h.ep_macc;
    if (e->ep_h)
        *e->ep_h = hx;
    __atomic_store(&e->lr_set, &h.lr_set, __ATOMIC_RELEASE);
    e->restored = 1;
    e->perm_epoch = -1;
    e->dx = NULL;
    e->dn = 0;
    __atomic_add_fetch(&e->edits, 1, __ATOMIC_RELEASE);
    return 0;
}

/* ---------------------------------------------- sample weights, lr, state */

/* the batch's sample weights, rows as rt__gather takes them */
static void rt__gather_sw(rt_exec *e, const float *sw, const int64_t *idx, int64_t start,
                          int64_t nb)
{
    for (int64_t i = 0; i < nb; i++)
        e->swb[i] = sw[idx ? idx[i] : start + i];
}

static int rt__check_sw(rt_exec *e, const rt_data *d)
{
    if (!d->sw || (d->sw == e->checked_sw && d->n == e->checked_sw_n))
        return 0;
    for (int64_t i = 0; i < d->n; i++) {
        rt__pause_at(e, i);
        if (!(d->sw[i] >= 0.0f) || isinf(d->sw[i]))
            return rt__eerr(e, RT_EDATA,
                            "sample weight %g at sample %lld: weights must be "
                            "finite and >= 0",
                            (double)d->sw[i], (long long)i);
    }
    e->checked_sw = d->sw;
    e->checked_sw_n = d->n;
    return 0;
}

int rt_exec_set_lr(rt_exec *e, float lr)
{
    if (!e)
        return RT_EINVAL;
    if (!(lr >= 0.0f) || isinf(lr))
        return rt__eerr(e, RT_EINVAL, "learning rate %g: must be finite and > 0", (double)lr);
    __atomic_store(&e->lr_set, &lr, __ATOMIC_RELEASE);
    __atomic_add_fetch(&e->edits, 1, __ATOMIC_RELEASE);
    return 0;
}

float rt_exec_lr(const rt_exec *e)
{
    if (!e)
        return NAN;
    return rt__lr_now(e);
}

float rt_exec_lr_override(const rt_exec *e)
{
    if (!e)
        return 0.0f;
    float lr;
    __atomic_load(&e->lr_set, &lr, __ATOMIC_ACQUIRE);
    return lr;
}

/* n floats from one exec's backend memory to another's: through a host
 * view where one has it, else staged */
static int rt__copy_b(rt_exec *de, float *dst, const rt_exec *se, const float *src, int64_t n)
{
    const size_t b = sizeof(float) * (size_t)n;
    void *h = rt__hv(de, dst);
    if (h) {
        rt__down(se, h, src, b);
        return 0;
    }
    if ((h = rt__hv(se, src))) {
        rt__up(de, dst, h, b);
        return 0;
    }
    if (!(h = malloc(b ? b : 1)))
        return rt__eerr(de, RT_ENOMEM, "out of memory");
    rt__down(se, h, src, b);
    rt__up(de, dst, h, b);
    free(h);
    return 0;
}

int rt_exec_copy_state(rt_exec *dst, const rt_exec *src)
{
    if (!dst || !src)
        return RT_EINVAL;
    const rt_plan *a = dst->p, *b = src->p;
    if (a->n_params != b->n_params)
        return rt__eerr(dst, RT_ESHAPE, "the programs have %d and %d parameters", a->n_params,
                        b->n_params);
    for (int i = 0; i < a->n_params; i++) {
        const rt__param *x = &a->params[i], *y = &b->params[i];
        if (x->numel != y->numel || x->trainable != y->trainable ||
            x->shape.ndim != y->shape.ndim ||
            memcmp(x->shape.d, y->shape.d, sizeof x->shape.d[0] * (size_t)x->shape.ndim) ||
            strcmp(x->name, y->name))
            return rt__eerr(dst, RT_ESHAPE, "parameter %d ('%.64s') differs between the programs",
                            i, x->name);
    }
    if (a->param_floats != b->param_floats || a->train_floats != b->train_floats ||
        a->cfg.opt != b->cfg.opt)
        return rt__eerr(dst, RT_ESHAPE, "the programs' parameter layouts or optimizers differ");
    int rc = rt__slots_whole(src);
    if (rc < 0)
        return rt__eerr(dst, rc, "%s", rt_exec_errmsg(src));
    for (int i = 0; i < a->n_params; i++) {
        const rt__param *x = &a->params[i], *y = &b->params[i];
        if ((rc = rt__copy_b(dst, dst->w + x->off, src, src->w + y->off, x->numel)) < 0)
            return rc;
        if (x->trainable) {
            if ((rc = rt__copy_b(dst, dst->s1 + x->goff, src, src->s1 + y->goff, x->numel)) < 0 ||
                (rc = rt__copy_b(dst, dst->s2 + x->goff, src, src->s2 + y->goff, x->numel)) < 0)
                return rc;
        }
    }
    /* the stateful RNNs' states, where both carry the same ones (a program
     * compiled again at its fixed batch size) */
    if (dst->n_stn && dst->n_stn == src->n_stn && rt__st_floats(dst) == rt__st_floats(src))
        memcpy(dst->stn[0].p, src->stn[0].p, sizeof(float) * (size_t)rt__st_floats(src));
    dst->step = src->step;
    float lr_src;
    __atomic_load(&src->lr_set, &lr_src, __ATOMIC_ACQUIRE);
    __atomic_store(&dst->lr_set, &lr_src, __ATOMIC_RELEASE);
    dst->epoch = src->epoch + (src->pos > 0);
    dst->pos = 0;
    dst->ep_loss = dst->ep_acc = 0;
    dst->ep_samples = 0;
    memset(&dst->ep_macc, 0, sizeof dst->ep_macc);
    rt__hacc_zero(dst->ep_h);
    dst->perm_epoch = -1;
    dst->dx = NULL;
    dst->dn = 0;
    dst->restored = 0;
    if (dst->sh_hi)
        dst->sh_whole = 2; /* as after a load */
    __atomic_add_fetch(&dst->edits, 1, __ATOMIC_RELEASE);
    return 0;
}

uint64_t rt_exec_state_edits(const rt_exec *e)
{
    return e ? __atomic_load_n(&e->edits, __ATOMIC_ACQUIRE) : 0;
}
