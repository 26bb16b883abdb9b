/* import_onnx.c - ONNX ModelProto -> rt_graph and back (see import_onnx.h). */
#include "import_onnx.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "onnx.pb-c.h"
#include "rt_engine_impl.h"
#include "rt_wire.h"

#define SYM_B INT64_MIN /* the batch size inside a folded shape constant */
#define MAXR 6          /* rank of a permuted weight view */

enum { V_NONE = 0, V_ACT, V_CONST, V_ZERO };
/* V_ZERO: zeros of a shape that holds the batch (ConstantOfShape of
 * Shape(x)): only an RNN's initial state */
/* How an activation's ONNX dims map onto the engine tensor:
 * PLAIN  the same dims (batch first);
 * NHWC   ONNX (B,C,H,W) held as (B,H,W,C);
 * FLAT   ONNX (B, C*H*W) held as (B, H*W*C): a Flatten of an NHWC value;
 * RNN    sequence-major, as ONNX's LSTM/GRU read and write them, held
 *        batch-first: rv RV_TBF ONNX (T, B, F) held (B, T, F); RV_TDBH
 *        (T, D, B, H) and RV_TBDH (T, B, D, H) held (B, T, D*H). d is in
 *        ONNX's order, -1 at the batch. */
enum { L_PLAIN = 0, L_NHWC, L_FLAT, L_RNN };
enum { RV_TBF = 1, RV_TDBH, RV_TBDH };

typedef struct oval {
    const char *name; /* ONNX name (the message's) */
    int kind;
    int uses; /* nodes reading it (+2 for a graph output) */
    /* V_ACT */
    const char *en; /* engine tensor name */
    int layout;
    int rank;               /* ONNX rank, batch included */
    int64_t d[RT_MAX_DIMS]; /* ONNX dims; d[0] is the batch (-1) */
    int64_t fc, fh, fw;     /* L_FLAT: the NHWC value flattened */
    int idx;                /* integer data: only Gather's indices */
    int rv;                 /* L_RNN: RV_* */
    /* V_CONST */
    int isf; /* float values (f) or integers (i) */
    int crank;
    int64_t cd[RT_MAX_DIMS];
    int64_t numel;
    float *f;
    int64_t *i;
    Onnx__TensorProto *init; /* a float initializer: trainable weights */
    const char *wname;       /* the parameter's name: the initializer's,
                                   also through Identity */
    int iid;                 /* an initializer's index + 1 */
    int64_t *src;            /* a float constant folded from initializers
                                   (Slice, Concat, Unsqueeze... of weights, as
                                   torch writes an LSTM's): per value, the
                                   initializer value it is (PROV), -1 none */
} oval;

/* where a value of a constant comes from: initializer iid (index + 1),
 * value off */
#define PROV(iid, off) ((int64_t)(iid) << 40 | (int64_t)(off))
#define PROV_IID(p) ((int)((p) >> 40))
#define PROV_OFF(p) ((p) & ((INT64_C(1) << 40) - 1))

/* A parameter made from an ONNX tensor: engine = transpose(reshape(onnx,
 * vd), perm); the export runs it backwards. */
typedef struct pmap {
    const char *pname;
    Onnx__TensorProto *init; /* NULL: a Constant node, not exported */
    int r;
    int64_t vd[MAXR];
    int perm[MAXR];
    int64_t *emap, n; /* else, a parameter gathered from
                                   initializers: value k is emap[k] (PROV) */
} pmap;

typedef struct ictx {
    Onnx__ModelProto *m;
    rt_graph *g;
    int64_t opset;
    oval *tab;
    size_t cap;
    pmap *pm;
    int npm, cap_pm;
    rt__arena ar;
    const Onnx__NodeProto *node;
    size_t k;            /* node's index */
    unsigned char *skip; /* nodes a pattern took over */
    char *err;
    size_t errlen;
    ProtobufCAllocator pb; /* the decode's, counting into pb_used */
    size_t pb_used, pb_budget;
    int data_nhwc; /* the caller feeds a 4-D input NHWC */
    int rnn_ok;    /* the node takes sequence-major values */
    int zero_ok;   /* the node takes V_ZERO inputs */
    int ninit;
    int *iuse;      /* per initializer: 1 + the pmap that holds
                                   it whole, or -1: gathered pmaps read it */
    int32_t **iown; /* per value of an initializer gathered
                                   from: 1 + the pmap holding it */
    int nchw_input; /* out: the data input is taken NCHW */
    /* several data inputs: one packed graph input "inputs" of in_total
     * values per sample, input k's from in_off (as Keras' multi-input) */
    int packed;
    int64_t in_off, in_total;
    int n_outputs; /* out: several outputs, each a head */
} ictx;

static int fail(ictx *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(ictx *c, int code, const char *fmt, ...)
{
    char msg[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!c->err || !c->errlen)
        return code;
    if (c->node)
        snprintf(c->err, c->errlen, "ONNX node '%.64s' (%.32s): %s",
                 c->node->name && *c->node->name ? c->node->name
                 : c->node->n_output             ? c->node->output[0]
                                                 : "?",
                 c->node->op_type ? c->node->op_type : "?", msg);
    else
        snprintf(c->err, c->errlen, "ONNX: %s", msg);
    return code;
}

#define OOM(c) fail((c), RT_ENOMEM, "out of memory")

/* Constants computed at import (ConstantOfShape, Expand, Range... folded)
 * are capped: 16M values, 64 MiB as floats. */
#define RT__ONNX_MAX_FOLD (INT64_C(1) << 24)

static void *alloc(ictx *c, size_t n) { return rt__arena_alloc(&c->ar, n ? n : 1); }

/* ------------------------------------------------------------ value table */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static oval *lookup(ictx *c, const char *name, int create)
{
    if (!name || !*name)
        return NULL;
    for (size_t k = hash_str(name) & (c->cap - 1);; k = (k + 1) & (c->cap - 1)) {
        oval *v = &c->tab[k];
        if (!v->name) {
            if (!create)
                return NULL;
            v->name = name;
            return v;
        }
        if (strcmp(v->name, name) == 0)
            return v;
    }
}

/* ------------------------------------------------------------- attributes */

static const Onnx__AttributeProto *attr(const Onnx__NodeProto *n, const char *name)
{
    for (size_t k = 0; k < n->n_attribute; k++)
        if (n->attribute[k]->name && strcmp(n->attribute[k]->name, name) == 0)
            return n->attribute[k];
    return NULL;
}

static int a_int(ictx *c, const char *name, int64_t def, int64_t *out)
{
    const Onnx__AttributeProto *a = attr(c->node, name);
    *out = def;
    if (!a)
        return 0;
    if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT)
        return fail(c, RT_EINVAL, "attribute '%s' must be an int", name);
    *out = a->i;
    return 0;
}

static int a_float(ictx *c, const char *name, double def, double *out)
{
    const Onnx__AttributeProto *a = attr(c->node, name);
    *out = def;
    if (!a)
        return 0;
    if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT || !isfinite(a->f))
        return fail(c, RT_EINVAL, "attribute '%s' must be a finite float", name);
    *out = a->f;
    return 0;
}

/* ints attribute: *n gets the count (-1 when absent) */
static int a_ints(ictx *c, const char *name, int64_t *out, int max, int *n)
{
    const Onnx__AttributeProto *a = attr(c->node, name);
    *n = -1;
    if (!a)
        return 0;
    if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS)
        return fail(c, RT_EINVAL, "attribute '%s' must be ints", name);
    if (a->n_ints > (size_t)max)
        return fail(c, RT_EINVAL, "attribute '%s' has more than %d values", name, max);
    for (size_t k = 0; k < a->n_ints; k++)
        out[k] = a->ints[k];
    *n = (int)a->n_ints;
    return 0;
}

static int a_str(ictx *c, const char *name, const char *def, char *out, size_t len)
{
    const Onnx__AttributeProto *a = attr(c->node, name);
    snprintf(out, len, "%s", def);
    if (!a)
        return 0;
    if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING)
        return fail(c, RT_EINVAL, "attribute '%s' must be a string", name);
    size_t n = a->s.len < len - 1 ? a->s.len : len - 1;
    if (n)
        memcpy(out, a->s.data, n);
    out[n] = 0;
    return 0;
}

/* ---------------------------------------------------------------- tensors */

static int tensor_dims(ictx *c, const Onnx__TensorProto *t, int *rank, int64_t *d, int64_t *numel)
{
    const char *nm = t->name ? t->name : "";
    if (t->n_dims > RT_MAX_DIMS)
        return fail(c, RT_EINVAL, "tensor '%.64s' has rank %zu (at most %d)", nm, t->n_dims,
                    RT_MAX_DIMS);
    int64_t n = 1;
    for (size_t k = 0; k < t->n_dims; k++) {
        if (t->dims[k] < 0 || __builtin_mul_overflow(n, t->dims[k], &n) || n > RT__MAX_NUMEL)
            return fail(c, RT_EINVAL, "tensor '%.64s' has bad dims", nm);
        d[k] = t->dims[k];
    }
    *rank = (int)t->n_dims;
    *numel = n;
    return 0;
}

/* A TensorProto's values as a constant (floats, or integers). */
static int tensor_load(ictx *c, Onnx__TensorProto *t, oval *v)
{
    const char *nm = t->name ? t->name : "";
    int rc;
    if ((t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) ||
        t->n_external_data)
        return fail(c, RT_EINVAL,
                    "tensor '%.64s' uses external data (save the model "
                    "with its weights inside it)",
                    nm);
    if ((rc = tensor_dims(c, t, &v->crank, v->cd, &v->numel)) < 0)
        return rc;
    const int64_t n = v->numel;
    const size_t raw = t->has_raw_data ? t->raw_data.len : 0;
    const uint8_t *rd = t->raw_data.data;
    v->kind = V_CONST;
    switch (t->data_type) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: {
        const int dbl = t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
        v->isf = 1;
        /* the values present must match the dims before anything is
         * allocated (dims alone may claim gigabytes) */
        if (raw && raw != (size_t)n * (dbl ? 8u : 4u))
            return fail(c, RT_EINVAL, "tensor '%.64s' has %zu bytes for %lld values", nm, raw,
                        (long long)n);
        if (!raw && (dbl ? t->n_double_data : t->n_float_data) != (size_t)n)
            return fail(c, RT_EINVAL, "tensor '%.64s' holds a wrong number of values", nm);
        if (!(v->f = alloc(c, (size_t)n * sizeof(float))))
            return OOM(c);
        if (raw) {
            for (int64_t k = 0; k < n; k++) {
                if (dbl) {
                    double x;
                    memcpy(&x, rd + 8 * k, 8);
                    v->f[k] = (float)x;
                } else {
                    memcpy(&v->f[k], rd + 4 * k, 4);
                }
            }
        } else if (!dbl && t->n_float_data == (size_t)n) {
            if (n)
                memcpy(v->f, t->float_data, (size_t)n * sizeof(float));
        } else if (dbl && t->n_double_data == (size_t)n) {
            for (int64_t k = 0; k < n; k++)
                v->f[k] = (float)t->double_data[k];
        } else {
            return fail(c, RT_EINVAL, "tensor '%.64s' holds a wrong number of values", nm);
        }
        for (int64_t k = 0; k < n; k++)
            if (!isfinite(v->f[k]))
                return fail(c, RT_ENAN, "tensor '%.64s' holds a non-finite value", nm);
        return 0;
    }
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: {
        const int w = t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64   ? 8
                      : t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT32 ? 4
                                                                             : 1;
        v->isf = 0;
        if (raw && raw != (size_t)n * (size_t)w)
            return fail(c, RT_EINVAL, "tensor '%.64s' has %zu bytes for %lld values", nm, raw,
                        (long long)n);
        if (!raw && (w == 8 ? t->n_int64_data : t->n_int32_data) != (size_t)n)
            return fail(c, RT_EINVAL, "tensor '%.64s' holds a wrong number of values", nm);
        if (!(v->i = alloc(c, (size_t)n * sizeof(int64_t))))
            return OOM(c);
        if (raw) {
            for (int64_t k = 0; k < n; k++) {
                if (w == 8)
                    memcpy(&v->i[k], rd + 8 * k, 8);
                else if (w == 4) {
                    int32_t x;
                    memcpy(&x, rd + 4 * k, 4);
                    v->i[k] = x;
                } else
                    v->i[k] = rd[k] != 0;
            }
        } else if (w == 8 && t->n_int64_data == (size_t)n) {
            if (n)
                memcpy(v->i, t->int64_data, (size_t)n * sizeof(int64_t));
        } else if (w != 8 && t->n_int32_data == (size_t)n) {
            for (int64_t k = 0; k < n; k++)
                v->i[k] = t->int32_data[k];
        } else {
            return fail(c, RT_EINVAL, "tensor '%.64s' holds a wrong number of values", nm);
        }
        for (int64_t k = 0; k < n; k++)
            if (v->i[k] == SYM_B)
                v->i[k]++; /* keep the batch marker unforgeable */
        return 0;
    }
    default:
        return fail(c, RT_EDTYPE,
                    "tensor '%.64s' has data type %d (float, double, int32, "
                    "int64 and bool are supported)",
                    nm, (int)t->data_type);
    }
}

/* --------------------------------------------------------------- permutes */

/* dst = transpose(src viewed as vd, perm): dst dims are vd[perm[k]].
 * back: the other way (src from dst). */
static void permute(float *src, float *dst, int r, const int64_t *vd, const int *perm, int back)
{
    int64_t sstr[MAXR], od[MAXR], idx[MAXR] = {0}, n = 1;
    for (int k = r - 1; k >= 0; k--) {
        sstr[k] = n;
        n *= vd[k];
    }
    for (int k = 0; k < r; k++)
        od[k] = vd[perm[k]];
    if (n == 0)
        return;
    int64_t s = 0;
    for (int64_t j = 0; j < n; j++) {
        if (back)
            src[s] = dst[j];
        else
            dst[j] = src[s];
        for (int k = r - 1; k >= 0; k--) {
            s += sstr[perm[k]];
            if (++idx[k] < od[k])
                break;
            s -= sstr[perm[k]] * od[k];
            idx[k] = 0;
        }
    }
}

static const int P_ID[MAXR] = {0, 1, 2, 3, 4, 5};

/* the initializer value that value k of constant v is, or -1 */
static int64_t prov_of(const oval *v, int64_t k)
{
    return v->src ? v->src[k] : v->init && v->iid ? PROV(v->iid, k) : -1;
}

/* y folded from x: y carries provenance when x does (set per value by
 * const_copy) */
static int prov_alloc(ictx *c, oval *y, const oval *x)
{
    if (!x->isf || (!x->src && !x->init))
        return 0;
    if (y->src)
        return 0;
    if (!(y->src = alloc(c, (size_t)y->numel * sizeof(int64_t))))
        return OOM(c);
    for (int64_t k = 0; k < y->numel; k++)
        y->src[k] = -1;
    return 0;
}

static int mk_param_map(ictx *c, oval *v, const int64_t *idx, int64_t n, int orank,
                        const int64_t *od, int trainable, const char **pname);

/* a new parameter map, zeroed */
static int pm_push(ictx *c, pmap **out)
{
    if (c->npm == c->cap_pm) {
        int cap = c->cap_pm ? 2 * c->cap_pm : 32;
        pmap *np = alloc(c, sizeof *np * (size_t)cap);
        if (!np)
            return OOM(c);
        if (c->npm)
            memcpy(np, c->pm, sizeof *np * (size_t)c->npm);
        c->pm = np;
        c->cap_pm = cap;
    }
    *out = &c->pm[c->npm++];
    memset(*out, 0, sizeof **out);
    return 0;
}

/* A constant's element src copied to dst's element (floats or integers),
 * with where it comes from (prov_alloc first). */
static void const_copy(oval *y, int64_t dst, const oval *x, int64_t src)
{
    if (x->isf)
        y->f[dst] = x->f[src];
    else
        y->i[dst] = x->i[src];
    if (y->src)
        y->src[dst] = prov_of(x, src);
}

/* The parameter for constant v as transpose(reshape(v, vd), perm) with
 * engine dims od (rank orank, same count). An initializer used twice in
 * the same layout is one parameter. */
static int mk_param(ictx *c, oval *v, int r, const int64_t *vd, const int *perm, int orank,
                    const int64_t *od, int trainable, const char **pname)
{
    const char *wn = v->wname ? v->wname : v->name;
    if (!v->isf)
        return fail(c, RT_EDTYPE, "'%.64s' must hold floats", wn);
    int64_t n = 1;
    for (int k = 0; k < r; k++)
        n *= vd[k];
    if (n != v->numel)
        return fail(c, RT_ESHAPE, "'%.64s' has %lld values, expected %lld", wn, (long long)v->numel,
                    (long long)n);
    if (v->src) {
        /* folded from initializers: gather by the same permutation */
        float *iota = malloc((size_t)(n ? n : 1) * sizeof(float));
        int64_t *ix = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
        float *pf = malloc((size_t)(n ? n : 1) * sizeof(float));
        int rc = RT_ENOMEM;
        if (iota && ix && pf && n <= (INT64_C(1) << 24)) {
            for (int64_t k = 0; k < n; k++)
                iota[k] = (float)k; /* exact below 2^24 */
            permute(iota, pf, r, vd, perm, 0);
            for (int64_t k = 0; k < n; k++)
                ix[k] = (int64_t)pf[k];
            rc = mk_param_map(c, v, ix, n, orank, od, trainable, pname);
        } else if (iota && ix && pf) {
            rc = fail(c, RT_EINVAL, "'%.64s' is too large to fold", wn);
        } else {
            rc = OOM(c);
        }
        free(iota);
        free(ix);
        free(pf);
        return rc;
    }
    if (v->init && v->iid && c->iuse[v->iid - 1] < 0)
        return fail(c, RT_EINVAL,
                    "initializer '%.64s' is read whole and sliced: two "
                    "parameters would train apart",
                    wn);
    for (int k = 0; k < c->npm; k++) {
        pmap *p = &c->pm[k];
        if (strcmp(p->pname, wn) != 0)
            continue;
        if (p->r != r || memcmp(p->vd, vd, sizeof(int64_t) * (size_t)r) ||
            memcmp(p->perm, perm, sizeof(int) * (size_t)r))
            return fail(c, RT_EINVAL, "initializer '%.64s' is used in two different layouts", wn);
        *pname = p->pname;
        return 0;
    }
    float *buf = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!buf)
        return OOM(c);
    permute(v->f, buf, r, vd, perm, 0);
    int64_t one = 1;
    int rc = rt_graph_add_param(c->g, wn, orank ? orank : 1, orank ? od : &one, RT_INIT_DEFAULT,
                                trainable && v->init, buf);
    free(buf);
    if (rc < 0)
        return fail(c, rc, "%s", rt_graph_errmsg(c->g));
    pmap *p = NULL;
    if ((rc = pm_push(c, &p)) < 0)
        return rc;
    if (v->init && v->iid)
        c->iuse[v->iid - 1] = c->npm; /* this pmap's index + 1 */
    p->pname = wn;
    p->init = v->init;
    p->r = r;
    memcpy(p->vd, vd, sizeof(int64_t) * (size_t)r);
    memcpy(p->perm, perm, sizeof(int) * (size_t)r);
    *pname = p->pname;
    return 0;
}

/* A parameter whose value k is value idx[k] of constant v (engine dims od):
 * the layout changes a permutation cannot make (an LSTM's gate order). When
 * v comes from initializers, the parameter is trainable and the export
 * writes each value back where it came from; a value of an initializer
 * feeds one parameter at most (two would train apart). */
static int mk_param_map(ictx *c, oval *v, const int64_t *idx, int64_t n, int orank,
                        const int64_t *od, int trainable, const char **pname)
{
    const char *wn = v->wname ? v->wname : v->name;
    if (!v->isf)
        return fail(c, RT_EDTYPE, "'%.64s' must hold floats", wn);
    int64_t *em = alloc(c, (size_t)(n ? n : 1) * sizeof(int64_t));
    float *buf = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!em || !buf) {
        free(buf);
        return OOM(c);
    }
    int with = 0, without = 0, iid0 = 0, one = 1;
    for (int64_t k = 0; k < n; k++) {
        buf[k] = v->f[idx[k]];
        em[k] = prov_of(v, idx[k]);
        if (em[k] < 0) {
            without++;
            continue;
        }
        with++;
        if (!iid0)
            iid0 = PROV_IID(em[k]);
        one &= PROV_IID(em[k]) == iid0;
    }
    if (with && without) {
        free(buf);
        return fail(c, RT_EINVAL, "'%.64s' mixes weights with constants", wn);
    }
    /* named as its initializer, or its initializers joined by '+' */
    char nm[256];
    if (with && one) {
        snprintf(nm, sizeof nm, "%s", c->m->graph->initializer[iid0 - 1]->name);
    } else if (with) {
        size_t o = 0;
        nm[0] = 0;
        for (int64_t k = 0; k < n && o < sizeof nm - 1; k++) {
            const int id = PROV_IID(em[k]);
            int seen = 0;
            for (int64_t q = 0; q < k && !seen; q++)
                seen = PROV_IID(em[q]) == id;
            if (seen)
                continue;
            int w = snprintf(nm + o, sizeof nm - o, "%s%s", o ? "+" : "",
                             c->m->graph->initializer[id - 1]->name);
            o += w > 0 ? (size_t)w : 0;
        }
    } else {
        snprintf(nm, sizeof nm, "%s", wn);
    }
    for (int64_t k = 0; k < n && with; k++)
        if (c->iuse[PROV_IID(em[k]) - 1] > 0) {
            free(buf);
            return fail(c, RT_EINVAL,
                        "initializer '%.64s' is read whole and sliced: two "
                        "parameters would train apart",
                        c->m->graph->initializer[PROV_IID(em[k]) - 1]->name);
        }
    for (int k = 0; k < c->npm; k++) {
        pmap *p = &c->pm[k];
        if (strcmp(p->pname, nm) != 0)
            continue;
        free(buf);
        if (!p->emap || p->n != n || memcmp(p->emap, em, sizeof(int64_t) * (size_t)n))
            return fail(c, RT_EINVAL, "'%.64s' is used in two different layouts", nm);
        *pname = p->pname;
        return 0;
    }
    pmap *p = NULL;
    int rc = pm_push(c, &p);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    const int me = c->npm; /* this pmap's index + 1 */
    for (int64_t k = 0; k < n && with; k++) {
        const int id = PROV_IID(em[k]);
        const Onnx__TensorProto *t = c->m->graph->initializer[id - 1];
        if (c->iuse[id - 1] > 0) {
            free(buf);
            return fail(c, RT_EINVAL,
                        "initializer '%.64s' is read whole and sliced: two "
                        "parameters would train apart",
                        t->name);
        }
        c->iuse[id - 1] = -1;
        if (!c->iown[id - 1]) {
            int64_t tn = 1;
            for (size_t q = 0; q < t->n_dims; q++)
                tn *= t->dims[q];
            if (!(c->iown[id - 1] = alloc(c, (size_t)(tn ? tn : 1) * sizeof(int32_t)))) {
                free(buf);
                return OOM(c);
            }
            memset(c->iown[id - 1], 0, (size_t)(tn ? tn : 1) * sizeof(int32_t));
        }
        int32_t *own = &c->iown[id - 1][PROV_OFF(em[k])];
        if (*own && *own != me) {
            free(buf);
            return fail(c, RT_EINVAL,
                        "a value of initializer '%.64s' feeds two parameters "
                        "(they would train apart)",
                        t->name);
        }
        *own = me;
    }
    char *pn = alloc(c, strlen(nm) + 1);
    if (!pn) {
        free(buf);
        return OOM(c);
    }
    memcpy(pn, nm, strlen(nm) + 1);
    int64_t one1 = 1;
    rc = rt_graph_add_param(c->g, pn, orank ? orank : 1, orank ? od : &one1, RT_INIT_DEFAULT,
                            trainable && with, buf);
    free(buf);
    if (rc < 0)
        return fail(c, rc, "%s", rt_graph_errmsg(c->g));
    p->pname = pn;
    p->emap = with ? em : NULL;
    p->n = n;
    *pname = pn;
    return 0;
}

/* ------------------------------------------------------------- node I/O */

static oval *in_opt(ictx *c, size_t k, int *rc)
{
    *rc = 0;
    if (k >= c->node->n_input || !c->node->input[k] || !*c->node->input[k])
        return NULL;
    oval *v = lookup(c, c->node->input[k], 0);
    if (!v || v->kind == V_NONE)
        *rc =
            fail(c, RT_EGRAPH, "input '%.64s' is not defined before this node", c->node->input[k]);
    else if (v->kind == V_ZERO && !c->zero_ok)
        *rc = fail(c, RT_EINVAL,
                   "input '%.64s' is zeros shaped by the batch; only an "
                   "LSTM's or GRU's initial state may be",
                   v->name);
    else if (v->kind == V_ACT && v->layout == L_RNN && !c->rnn_ok)
        *rc = fail(c, RT_EINVAL,
                   "input '%.64s' is sequence-major (seq, batch, ...) as an "
                   "RNN reads and writes it; only Transpose, Squeeze, Reshape and Dropout "
                   "taking it back to batch-first are supported on it",
                   v->name);
    return v;
}

/* Input k, required, of the given kind (V_ACT or V_CONST). */
static int in_kind(ictx *c, size_t k, int kind, oval **out)
{
    int rc;
    oval *v = in_opt(c, k, &rc);
    if (rc < 0)
        return rc;
    if (!v)
        return fail(c, RT_EGRAPH, "input %zu is missing", k);
    if (v->kind == V_ACT && v->idx)
        return fail(c, RT_EDTYPE,
                    "input '%.64s' holds integers; they are only supported as "
                    "the indices of a Gather (nn.Embedding)",
                    v->name);
    if ((int)v->kind != kind)
        return fail(c, RT_EINVAL,
                    kind == V_ACT
                        ? "input '%.64s' is a constant; only activations are supported there"
                        : "input '%.64s' must be an initializer or a constant (computed at import)",
                    v->name);
    *out = v;
    return 0;
}

static int in_act(ictx *c, size_t k, oval **out) { return in_kind(c, k, V_ACT, out); }
static int in_const(ictx *c, size_t k, oval **out) { return in_kind(c, k, V_CONST, out); }

static int out_slot(ictx *c, size_t k, oval **out)
{
    if (k >= c->node->n_output || !c->node->output[k] || !*c->node->output[k])
        return fail(c, RT_EGRAPH, "output %zu is missing", k);
    oval *v = lookup(c, c->node->output[k], 1);
    if (v->kind != V_NONE)
        return fail(c, RT_EGRAPH, "value '%.64s' is defined twice", v->name);
    *out = v;
    return 0;
}

/* Output 0 as an activation computed by an engine node. */
static int def_act(ictx *c, oval **out, int layout, int rank, const int64_t *d)
{
    oval *v = NULL;
    int rc = out_slot(c, 0, &v);
    if (rc < 0)
        return rc;
    /* per-sample sizes stay under the engine's limit, so that products of
     * an activation's dims never overflow */
    int64_t n = 1;
    if (rank < 1 || rank > RT_MAX_DIMS)
        return fail(c, RT_ESHAPE, "value '%.64s' would have rank %d", v->name, rank);
    for (int k = 1; k < rank; k++)
        if (d[k] < 1 || __builtin_mul_overflow(n, d[k], &n) || n > RT__MAX_NUMEL)
            return fail(c, RT_ESHAPE, "value '%.64s' would have %s dims", v->name,
                        d[k] < 1 ? "empty" : "too large");
    v->kind = V_ACT;
    v->en = v->name;
    v->layout = layout;
    v->rank = rank;
    for (int k = 0; k < rank; k++)
        v->d[k] = d[k];
    v->d[0] = -1;
    *out = v;
    return 0;
}

/* output k as a sequence-major value (layout L_RNN, view rv, ONNX dims d
 * with -1 at the batch) held by engine tensor en */
static int def_rnn(ictx *c, size_t k, int rv, int rank, const int64_t *d, const char *en)
{
    oval *y = NULL;
    int rc = out_slot(c, k, &y);
    if (rc < 0)
        return rc;
    y->kind = V_ACT;
    y->en = en ? en : y->name;
    y->layout = L_RNN;
    y->rv = rv;
    y->rank = rank;
    for (int q = 0; q < rank; q++)
        y->d[q] = d[q];
    return 0;
}

static int add_node(ictx *c, const char *name, const char *op, int n_in, const char **in,
                    int n_attr, const rt_attr *attrs)
{
    int rc = rt_graph_add_node(c->g, name, op, n_in, in, n_attr, attrs);
    return rc < 0 ? fail(c, rc, "%s", rt_graph_errmsg(c->g)) : 0;
}

/* the engine's per-sample dims of an activation */
static int engine_dims(const oval *v, int64_t *d)
{
    if (v->layout == L_NHWC) {
        d[0] = v->d[2];
        d[1] = v->d[3];
        d[2] = v->d[1];
        return 3;
    }
    for (int k = 1; k < v->rank; k++)
        d[k - 1] = v->d[k];
    return v->rank - 1;
}

/* NCHW axis -> NHWC axis (batch counted) */
static int nhwc_axis(int a) { return a == 1 ? 3 : a == 0 ? 0 : a - 1; }

static int norm_axis(ictx *c, int64_t a, int rank, int *out)
{
    if (a < -rank || a >= rank)
        return fail(c, RT_EINVAL, "axis %lld is outside rank %d", (long long)a, rank);
    *out = (int)(a < 0 ? a + rank : a);
    return 0;
}

/* --------------------------------------------------------------- handlers */

typedef int (*op_fn)(ictx *c);

static int op_unary(ictx *c, const char *op)
{
    oval *x = NULL, *y = NULL;
    int rc;
    if ((rc = in_act(c, 0, &x)) < 0)
        return rc;
    if ((rc = def_act(c, &y, x->layout, x->rank, x->d)) < 0)
        return rc;
    y->fc = x->fc, y->fh = x->fh, y->fw = x->fw;
    const char *in[1] = {x->en};
    return add_node(c, y->en, op, 1, in, 0, NULL);
}

/* an activation with float attributes copied by name (ONNX's names and
 * defaults are the engine's, op_act.c) */
static int op_unary_attrs(ictx *c, const char *op, int n, const char *const *names)
{
    oval *x = NULL, *y = NULL;
    int rc;
    if ((rc = in_act(c, 0, &x)) < 0)
        return rc;
    rt_attr a[3];
    int na = 0;
    for (int k = 0; k < n; k++) {
        const Onnx__AttributeProto *at = attr(c->node, names[k]);
        if (!at)
            continue;
        double v;
        if ((rc = a_float(c, names[k], 0, &v)) < 0)
            return rc;
        a[na++] = (rt_attr){.name = names[k], .kind = RT_ATTR_FLOAT, .f = v};
    }
    if ((rc = def_act(c, &y, x->layout, x->rank, x->d)) < 0)
        return rc;
    y->fc = x->fc, y->fh = x->fh, y->fw = x->fw;
    const char *in[1] = {x->en};
    return add_node(c, y->en, op, 1, in, na, a);
}

static const char *const A_ALPHA[] = {"alpha"}, *const A_AB[] = {"alpha", "beta"},
                         *const A_SELU[] = {"alpha", "gamma"};
static int op_elu(ictx *c) { return op_unary_attrs(c, "Elu", 1, A_ALPHA); }
static int op_selu(ictx *c) { return op_unary_attrs(c, "Selu", 2, A_SELU); }
static int op_leakyrelu(ictx *c) { return op_unary_attrs(c, "LeakyRelu", 1, A_ALPHA); }
static int op_thresholdedrelu(ictx *c) { return op_unary_attrs(c, "ThresholdedRelu", 1, A_ALPHA); }
static int op_hardsigmoid(ictx *c) { return op_unary_attrs(c, "HardSigmoid", 2, A_AB); }
static int op_erf(ictx *c) { return op_unary(c, "Erf"); }
static int op_softplus(ictx *c) { return op_unary(c, "Softplus"); }
static int op_softsign(ictx *c) { return op_unary(c, "Softsign"); }
static int op_exp(ictx *c) { return op_unary(c, "Exp"); }

/* Clip: min and max are constant inputs from opset 11 */
static int op_clip(ictx *c)
{
    int rc;
    oval *x = NULL, *y = NULL;
    if ((rc = in_act(c, 0, &x)) < 0)
        return rc;
    rt_attr a[2];
    int na = 0;
    static const char *const nm[2] = {"min", "max"};
    for (int k = 0; k < 2; k++) {
        oval *v = in_opt(c, (size_t)k + 1, &rc);
        if (rc < 0)
            return rc;
        if (!v)
            continue;
        if (v->kind != V_CONST || v->numel != 1)
            return fail(c, RT_EINVAL, "%s must be a constant scalar", nm[k]);
        a[na++] = (rt_attr){
            .name = nm[k], .kind = RT_ATTR_FLOAT, .f = v->isf ? v->f[0] : (double)v->i[0]};
    }
    if ((rc = def_act(c, &y, x->layout, x->rank, x->d)) < 0)
        return rc;
    y->fc = x->fc, y->fh = x->fh, y->fw = x->fw;
    const char *in[1] = {x->en};
    return add_node(c, y->en, "Clip", 1, in, na, a);
}

static int op_relu(ictx *c) { return op_unary(c, "Relu"); }
static int op_sigmoid(ictx *c) { return op_unary(c, "Sigmoid"); }
static int op_tanh(ictx *c) { return op_unary(c, "Tanh"); }

/* Identity: the output is another name for the input. */
static int op_identity(ictx *c)
{
    int rc;
    oval *x = in_opt(c, 0, &rc), *y = NULL;
    if (rc < 0)
        return rc;
    if (!x)
        return fail(c, RT_EGRAPH, "input 0 is missing");
    if ((rc = out_slot(c, 0, &y)) < 0)
        return rc;
    const char *nm = y->name;
    const int uses = y->uses;
    *y = *x;
    y->name = nm;
    y->uses = uses;
    /* the same weight under another name (PyTorch writes Identity for a
     * weight used twice): one parameter, named as the initializer */
    if (x->kind == V_CONST && !y->wname)
        y->wname = x->name;
    return 0;
}

static int op_dropout(ictx *c)
{
    int rc;
    double ratio = 0.5;
    if (c->opset < 12) {
        if ((rc = a_float(c, "ratio", 0.5, &ratio)) < 0)
            return rc;
    } else {
        oval *r = in_opt(c, 1, &rc);
        if (rc < 0)
            return rc;
        if (r) {
            if (r->kind != V_CONST || r->numel != 1)
                return fail(c, RT_EINVAL, "ratio must be a constant scalar");
            ratio = r->isf ? r->f[0] : (double)r->i[0];
        }
    }
    if (!(ratio >= 0 && ratio < 1))
        return fail(c, RT_EINVAL, "ratio %g outside [0, 1)", ratio);
    oval *x = NULL, *y = NULL;
    c->rnn_ok = 1;
    rc = in_act(c, 0, &x);
    c->rnn_ok = 0;
    if (rc < 0)
        return rc;
    const char *in[1] = {x->en};
    rt_attr a = {.name = "rate", .kind = RT_ATTR_FLOAT, .f = ratio};
    if (x->layout == L_RNN) { /* element-wise: the layout stays */
        if ((rc = def_rnn(c, 0, x->rv, x->rank, x->d, NULL)) < 0)
            return rc;
        return add_node(c, c->node->output[0], "Dropout", 1, in, 1, &a);
    }
    if ((rc = def_act(c, &y, x->layout, x->rank, x->d)) < 0)
        return rc;
    y->fc = x->fc, y->fh = x->fh, y->fw = x->fw;
    return add_node(c, y->en, "Dropout", 1, in, 1, &a);
}

static int op_softmax_any(ictx *c, const char *op)
{
    oval *x = NULL, *y = NULL;
    int rc, ax = 0;
    if ((rc = in_act(c, 0, &x)) < 0)
        return rc;
    int64_t a;
    if ((rc = a_int(c, "axis", c->opset < 13 ? 1 : -1, &a)) < 0)
        return rc;
    if ((rc = norm_axis(c, a, x->rank, &ax)) < 0)
        return rc;
    int last = x->layout == L_NHWC ? ax == 1 : ax == x->rank - 1;
    if (c->opset < 13 && x->layout == L_PLAIN)
        last = ax == x->rank - 1; /* coerced 2-D */
    if (!last || (c->opset < 13 && x->layout == L_NHWC))
        return fail(c, RT_EINVAL,
                    "softmax over axis %d: only the last (channel) axis "
                    "is supported",
                    ax);
    if ((rc = def_act(c, &y, x->layout, x->rank, x->d)) < 0)
        return rc;
    y->fc = x->fc, y->fh = x->fh, y->fw = x->fw;
    const char *in[1] = {x->en};
    return add_node(c, y->en, op, 1, in, 0, NULL);
}

static int op_softmax(ictx *c) { return op_softmax_any(c, "Softmax"); }
static int op_logsoftmax(ictx *c) { return op_softmax_any(c, "LogSoftmax"); }

/* A constant operand of a broadcasting op against activation x, as an
 * engine parameter in x's layout. */
static int bcast_param(ictx *c, oval *k, const oval *x, const char **pname)
{
    int64_t vd[MAXR], od[MAXR];
    int perm[MAXR];
    if (k->crank > x->rank)
        return fail(c, RT_ESHAPE, "constant '%.64s' has a higher rank than '%.64s'", k->name,
                    x->name);
    if (k->numel == 1) {
        int64_t one = 1;
        return mk_param(c, k, 1, &one, P_ID, 1, &one, 1, pname);
    }
    if (x->layout == L_FLAT) {
        /* (C*H*W) constants follow the flatten's (h,w,c) order */
        const int64_t n = x->fc * x->fh * x->fw;
        if (k->numel != n || (k->crank == 2 && k->cd[0] != 1))
            return fail(c, RT_ESHAPE,
                        "constant '%.64s' does not broadcast against a "
                        "flattened NCHW value",
                        k->name);
        vd[0] = x->fc, vd[1] = x->fh, vd[2] = x->fw;
        perm[0] = 1, perm[1] = 2, perm[2] = 0;
        return mk_param(c, k, 3, vd, perm, 1, &n, 1, pname);
    }
    /* right-align to x's rank */
    int r = x->rank;
    for (int q = 0; q < r; q++) {
        int s = q - (r - k->crank);
        vd[q] = s < 0 ? 1 : k->cd[s];
    }
    if (vd[0] != 1)
        return fail(c, RT_ESHAPE, "constant '%.64s' varies over the batch dimension", k->name);
    if (x->layout == L_NHWC) {
        perm[0] = 0, perm[1] = 2, perm[2] = 3, perm[3] = 1;
    } else {
        for (int q = 0; q < r; q++)
            perm[q] = q;
    }
    if (r > MAXR)
        return fail(c, RT_EINVAL, "rank %d is too high", r);
    /* engine dims: drop the batch's 1 */
    for (int q = 1; q < r; q++)
        od[q - 1] = vd[perm[q]];
    return mk_param(c, k, r, vd, perm, r - 1, od, 1, pname);
}

static int op_binary(ictx *c, const char *op)
{
    int rc;
    oval *a = in_opt(c, 0, &rc);
    if (rc < 0)
        return rc;
    oval *b = in_opt(c, 1, &rc);
    if (rc < 0)
        return rc;
    if (!a || !b)
        return fail(c, RT_EGRAPH, "needs two inputs");
    if (a->kind == V_CONST && b->kind == V_CONST)
        return fail(c, RT_EINVAL, "arithmetic on two constants is not folded");
    const char *in[2];
    const oval *x = a->kind == V_ACT ? a : b;
    if (a->kind == V_ACT && b->kind == V_ACT) {
        if (a->layout != b->layout || a->rank != b->rank ||
            (a->layout == L_FLAT && (a->fc != b->fc || a->fh != b->fh || a->fw != b->fw)))
            return fail(c, RT_ESHAPE, "'%.64s' and '%.64s' have different ranks or layouts",
                        a->name, b->name);
        in[0] = a->en;
        in[1] = b->en;
    } else {
        oval *k = a->kind == V_CONST ? a : b;
        const char *pn;
        if ((rc = bcast_param(c, k, x, &pn)) < 0)
            return rc;
        in[0] = a == k ? pn : a->en;
        in[1] = b == k ? pn : b->en;
    }
    /* the output has the larger of the two shapes per dim */
    int64_t d[RT_MAX_DIMS];
    for (int q = 0; q < x->rank; q++) {
        d[q] = a->kind == V_ACT ? a->d[q] : b->d[q];
        if (a->kind == V_ACT && b->kind == V_ACT && b->d[q] > d[q])
            d[q] = b->d[q];
    }
    oval *y = NULL;
    if ((rc = def_act(c, &y, x->layout, x->rank, d)) < 0)
        return rc;
    y->fc = x->fc, y->fh = x->fh, y->fw = x->fw;
    return add_node(c, y->en, op, 2, in, 0, NULL);
}

static int op_add(ictx *c) { return op_binary(c, "Add"); }
static int op_sub(ictx *c) { return op_binary(c, "Sub"); }
static int op_mul(ictx *c) { return op_binary(c, "Mul"); }
/* ------------------------------------------------------------ Gelu pattern */

/* the node reading value v, when exactly one does and v is no graph output;
 * -1 otherwise */
static long only_reader(ictx *c, const char *v)
{
    const Onnx__GraphProto *gr = c->m->graph;
    oval *o = lookup(c, v, 0);
    if (!o || o->uses != 1)
        return -1;
    /* exporters write a pattern's nodes close together: look a few ahead
     * (which keeps the import linear in the graph's size) */
    for (size_t k = c->k + 1; k < gr->n_node && k <= c->k + 16; k++)
        for (size_t i = 0; i < gr->node[k]->n_input; i++)
            if (gr->node[k]->input[i] && !strcmp(gr->node[k]->input[i], v))
                return (long)k;
    return -1;
}

/* whether value v is a float scalar constant (an initializer or constant
 * defined by now, or a Constant node still ahead); its value into *out */
static int scalar_get(ictx *c, const char *v, double *out)
{
    oval *o = lookup(c, v, 0);
    if (o && o->kind == V_CONST) {
        if (!o->isf || o->numel != 1)
            return 0;
        *out = o->f[0];
        return 1;
    }
    const Onnx__GraphProto *gr = c->m->graph;
    for (size_t k = c->k + 1; k < gr->n_node && k <= c->k + 16; k++) {
        const Onnx__NodeProto *n = gr->node[k];
        if (!n->op_type || strcmp(n->op_type, "Constant") || n->n_output != 1 ||
            strcmp(n->output[0], v) || n->n_attribute != 1)
            continue;
        const Onnx__AttributeProto *a = n->attribute[0];
        if (!a->name)
            return 0;
        if (!strcmp(a->name, "value_float")) {
            *out = a->f;
            return 1;
        }
        if (strcmp(a->name, "value") || !a->t)
            return 0;
        oval t = {0};
        const Onnx__NodeProto *save = c->node;
        c->node = n;
        int rc = tensor_load(c, a->t, &t);
        c->node = save;
        if (c->err && c->errlen)
            c->err[0] = 0;
        if (rc != 0 || !t.isf || t.numel != 1)
            return 0;
        *out = t.f[0];
        return 1;
    }
    return 0;
}

static int scalar_is(ictx *c, const char *v, double want)
{
    double x;
    return scalar_get(c, v, &x) && fabs(x - want) < 1e-6;
}

/* the node at k reads a and a scalar constant of value want (either order) */
static int reads_scalar(ictx *c, long k, const char *a, double want)
{
    const Onnx__NodeProto *n = c->m->graph->node[k];
    if (n->n_input != 2)
        return 0;
    if (!strcmp(n->input[0], a))
        return scalar_is(c, n->input[1], want);
    if (!strcmp(n->input[1], a))
        return scalar_is(c, n->input[0], want);
    return 0;
}

static int is_op(ictx *c, long k, const char *op)
{
    const Onnx__NodeProto *n = c->m->graph->node[k];
    return k >= 0 && n->op_type && !strcmp(n->op_type, op) && n->n_output >= 1 &&
           (!n->domain || !*n->domain);
}

/* PyTorch's exact GELU, as torch.onnx.export writes it at opsets < 20:
 * Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5). At the Div: the engine's
 * Gelu on x, named as the last Mul's output, and the other four nodes
 * skipped. Returns 1 when it took the pattern, 0 when there is none. */
static int gelu_pattern(ictx *c)
{
    const Onnx__NodeProto *d = c->node;
    if (d->n_input != 2 || d->n_output != 1)
        return 0;
    const char *x = d->input[0];
    oval *xv = lookup(c, x, 0);
    if (!xv || xv->kind != V_ACT || xv->layout == L_RNN || xv->idx ||
        !scalar_is(c, d->input[1], 1.4142135623730951))
        return 0;
    long e = only_reader(c, d->output[0]);
    if (e < 0 || !is_op(c, e, "Erf"))
        return 0;
    const char *ev = c->m->graph->node[e]->output[0];
    long a = only_reader(c, ev);
    if (a < 0 || !is_op(c, a, "Add") || !reads_scalar(c, a, ev, 1.0))
        return 0;
    const char *av = c->m->graph->node[a]->output[0];
    long m1 = only_reader(c, av);
    if (m1 < 0 || !is_op(c, m1, "Mul"))
        return 0;
    const Onnx__NodeProto *mn = c->m->graph->node[m1];
    if (mn->n_input != 2 || !((!strcmp(mn->input[0], x) && !strcmp(mn->input[1], av)) ||
                              (!strcmp(mn->input[1], x) && !strcmp(mn->input[0], av))))
        return 0;
    long m2 = only_reader(c, mn->output[0]);
    if (m2 < 0 || !is_op(c, m2, "Mul") || !reads_scalar(c, m2, mn->output[0], 0.5))
        return 0;
    /* the Gelu's output is the last Mul's */
    const Onnx__NodeProto *last = c->m->graph->node[m2];
    oval *y = lookup(c, last->output[0], 1);
    if (y->kind != V_NONE)
        return 0;
    y->kind = V_ACT;
    y->en = y->name;
    y->layout = xv->layout;
    y->rank = xv->rank;
    memcpy(y->d, xv->d, sizeof y->d);
    y->fc = xv->fc, y->fh = xv->fh, y->fw = xv->fw;
    c->skip[e] = c->skip[a] = c->skip[m1] = c->skip[m2] = 1;
    const char *in[1] = {xv->en};
    int rc = add_node(c, y->en, "Gelu", 1, in, 0, NULL);
    return rc < 0 ? rc : 1;
}

static int op_div(ictx *c)
{
    int rc = gelu_pattern(c);
    if (rc)
        return rc < 0 ? rc : 0;
    return op_binary(c, "Div");
}
/* ------------------------------------------------------- LayerNorm pattern */

/* the two nodes reading value v when exactly two do (a few nodes ahead) */
static int two_readers(ictx *c, const char *v, long r[2])
{
    const Onnx__GraphProto *gr = c->m->graph;
    oval *o = lookup(c, v, 0);
    if (!o || o->uses != 2)
        return 0;
    int n = 0;
    for (size_t k = c->k + 1; k < gr->n_node && k <= c->k + 16 && n < 2; k++)
        for (size_t i = 0; i < gr->node[k]->n_input; i++)
            if (gr->node[k]->input[i] && !strcmp(gr->node[k]->input[i], v)) {
                r[n++] = (long)k;
                break;
            }
    return n == 2;
}

/* The axes of a Reduce* node: an attribute, or (ReduceSum from opset 13,
 * the others from 18) an optional integer constant input. *n: -1 when
 * absent. */
static int reduce_axes(ictx *c, int64_t *ax, int *n)
{
    int rc;
    *n = -1;
    if (c->opset < 18 && !(c->opset >= 13 && !strcmp(c->node->op_type, "ReduceSum")))
        return a_ints(c, "axes", ax, RT_MAX_DIMS, n);
    if (attr(c->node, "axes"))
        return fail(c, RT_EINVAL, "attribute 'axes' at opset %lld: axes are an input",
                    (long long)c->opset);
    oval *a = in_opt(c, 1, &rc);
    if (rc < 0 || !a)
        return rc;
    if (a->kind != V_CONST || a->isf || a->numel > RT_MAX_DIMS)
        return fail(c, RT_EINVAL, "axes must be an integer constant");
    for (int64_t q = 0; q < a->numel; q++)
        ax[q] = a->i[q];
    *n = (int)a->numel;
    return 0;
}

/* node k is a ReduceMean over the last of rank axes that keeps it */
static int mean_last(ictx *c, long k, int rank)
{
    if (k < 0 || !is_op(c, k, "ReduceMean"))
        return 0;
    const Onnx__NodeProto *save = c->node;
    c->node = c->m->graph->node[k];
    int64_t ax[RT_MAX_DIMS], keep = 0;
    int n = 0;
    int ok = reduce_axes(c, ax, &n) == 0 && a_int(c, "keepdims", 1, &keep) == 0;
    c->node = save;
    if (c->err && c->errlen)
        c->err[0] = 0;
    return ok && n == 1 && (ax[0] == -1 || ax[0] == rank - 1) && keep == 1;
}

/* node k reads a and b, in this order */
static int reads2(ictx *c, long k, const char *a, const char *b)
{
    const Onnx__NodeProto *n = c->m->graph->node[k];
    return n->n_input == 2 && !strcmp(n->input[0], a) && !strcmp(n->input[1], b);
}

/* the float constant of C values node k applies to value a (either order),
 * or NULL */
static oval *affine_const(ictx *c, long k, const char *a, int64_t C)
{
    const Onnx__NodeProto *n = c->m->graph->node[k];
    if (n->n_input != 2)
        return NULL;
    const char *o = !strcmp(n->input[0], a)   ? n->input[1]
                    : !strcmp(n->input[1], a) ? n->input[0]
                                              : NULL;
    oval *v = o ? lookup(c, o, 0) : NULL;
    return v && v->kind == V_CONST && v->isf && v->numel == C ? v : NULL;
}

/* nn.LayerNorm as torch.onnx.export writes it below opset 17:
 *   m = ReduceMean(x), d = Sub(x, m), v = ReduceMean(Pow(d, 2)),
 *   y = Div(d, Sqrt(Add(v, eps))) * gamma + beta
 * over the last axis. At the first ReduceMean: the engine's one
 * LayerNormalization (gamma and beta parameters named as their
 * initializers), named as the last node's output; the rest skipped.
 * Returns 1 when it took the pattern, 0 when there is none (the nodes then
 * import one by one). */
static int layernorm_pattern(ictx *c)
{
    const Onnx__NodeProto *r1 = c->node, *const *nd =
                                             (const Onnx__NodeProto *const *)c->m->graph->node;
    if (r1->n_input != 1 || r1->n_output != 1)
        return 0;
    const char *x = r1->input[0];
    oval *xv = lookup(c, x, 0);
    if (!xv || xv->kind != V_ACT || xv->layout != L_PLAIN || xv->idx || xv->rank < 2 ||
        !mean_last(c, (long)c->k, xv->rank))
        return 0;
    const int64_t C = xv->d[xv->rank - 1];
    long s = only_reader(c, r1->output[0]), r[2];
    if (s < 0 || !is_op(c, s, "Sub") || !reads2(c, s, x, r1->output[0]))
        return 0;
    const char *d = nd[s]->output[0];
    if (!two_readers(c, d, r))
        return 0;
    const long p = is_op(c, r[0], "Pow") ? r[0] : r[1], dv = p == r[0] ? r[1] : r[0];
    if (!is_op(c, p, "Pow") || !is_op(c, dv, "Div") || !reads_scalar(c, p, d, 2.0) ||
        strcmp(nd[p]->input[0], d))
        return 0;
    long r2 = only_reader(c, nd[p]->output[0]);
    if (!mean_last(c, r2, xv->rank))
        return 0;
    long a = only_reader(c, nd[r2]->output[0]);
    if (a < 0 || !is_op(c, a, "Add") || nd[a]->n_input != 2)
        return 0;
    double eps;
    const int e1 = !strcmp(nd[a]->input[0], nd[r2]->output[0]);
    if (!scalar_get(c, nd[a]->input[e1 ? 1 : 0], &eps) || !(eps > 0))
        return 0;
    long q = only_reader(c, nd[a]->output[0]);
    if (q < 0 || !is_op(c, q, "Sqrt") || !reads2(c, dv, d, nd[q]->output[0]))
        return 0;
    /* the affine part: * gamma (needed), + beta (or no centre) */
    long mu = only_reader(c, nd[dv]->output[0]), ad = -1;
    oval *g = mu >= 0 && is_op(c, mu, "Mul") ? affine_const(c, mu, nd[dv]->output[0], C) : NULL,
         *b = NULL;
    if (!g)
        return 0;
    ad = only_reader(c, nd[mu]->output[0]);
    if (ad >= 0 && is_op(c, ad, "Add"))
        b = affine_const(c, ad, nd[mu]->output[0], C);
    const char *out = b ? nd[ad]->output[0] : nd[mu]->output[0];
    oval *y = lookup(c, out, 1);
    if (y->kind != V_NONE)
        return 0;
    int rc;
    const char *in[3] = {xv->en};
    if ((rc = mk_param(c, g, 1, &C, P_ID, 1, &C, 1, &in[1])) < 0)
        return rc;
    if (b && (rc = mk_param(c, b, 1, &C, P_ID, 1, &C, 1, &in[2])) < 0)
        return rc;
    y->kind = V_ACT;
    y->en = y->name;
    y->layout = L_PLAIN;
    y->rank = xv->rank;
    memcpy(y->d, xv->d, sizeof y->d);
    c->skip[s] = c->skip[p] = c->skip[r2] = c->skip[a] = c->skip[q] = c->skip[dv] = 1;
    c->skip[mu] = 1;
    if (b)
        c->skip[ad] = 1;
    rt_attr at[2] = {{.name = "epsilon", .kind = RT_ATTR_FLOAT, .f = eps},
                     {.name = "center", .kind = RT_ATTR_INT, .i = b != NULL}};
    rc = add_node(c, y->en, "LayerNormalization", b ? 3 : 2, in, 2, at);
    return rc < 0 ? rc : 1;
}

/* Pow with a constant exponent: 2 (x * x), 0.5 (Sqrt) or 1 */
static int op_pow(ictx *c)
{
    double e;
    oval *x = NULL, *y = NULL;
    int rc;
    if ((rc = in_act(c, 0, &x)) < 0)
        return rc;
    if (c->node->n_input != 2 || !scalar_get(c, c->node->input[1], &e))
        return fail(c, RT_EINVAL, "the exponent must be a scalar constant");
    if (e != 2.0 && e != 0.5 && e != 1.0)
        return fail(c, RT_EINVAL, "exponent %g: 0.5, 1 and 2 are supported", e);
    if ((rc = def_act(c, &y, x->layout, x->rank, x->d)) < 0)
        return rc;
    y->fc = x->fc, y->fh = x->fh, y->fw = x->fw;
    const char *in[2] = {x->en, x->en};
    return add_node(c, y->en,
                    e == 2.0   ? "Mul"
                    : e == 0.5 ? "Sqrt"
                               : "Identity",
                    e == 2.0 ? 2 : 1, in, 0, NULL);
}

static int op_sqrt(ictx *c) { return op_unary(c, "Sqrt"); }
static int op_abs(ictx *c) { return op_unary(c, "Abs"); }
static int op_log(ictx *c) { return op_unary(c, "Log"); }

static int op_prelu(ictx *c) { return op_binary(c, "PRelu"); }
static int op_max(ictx *c)
{
    if (c->node->n_input != 2)
        return fail(c, RT_EINVAL, "only two inputs are supported");
    return op_binary(c, "Max");
}
static int op_min(ictx *c)
{
    if (c->node->n_input != 2)
        return fail(c, RT_EINVAL, "only two inputs are supported");
    return op_binary(c, "Min");
}

/* x (B, K) times weight w: Dense. trans: w is (N, K). */
static int dense(ictx *c, oval *x, oval *w, int trans, oval *bias)
{
    int rc;
    if (x->layout == L_NHWC)
        return fail(c, RT_ESHAPE, "'%.64s' is a 4-D (NCHW) value; flatten it first", x->name);
    if (w->crank != 2)
        return fail(c, RT_ESHAPE, "weight '%.64s' must be 2-D", w->name);
    const int64_t K = trans ? w->cd[1] : w->cd[0], N = trans ? w->cd[0] : w->cd[1];
    if (x->d[x->rank - 1] != K)
        return fail(c, RT_ESHAPE, "weight '%.64s' expects %lld inputs, '%.64s' has %lld", w->name,
                    (long long)K, x->name, (long long)x->d[x->rank - 1]);
    const char *in[3];
    int64_t vd[MAXR], od[2] = {K, N};
    int perm[MAXR];
    in[0] = x->en;
    if (x->layout == L_FLAT) {
        /* weight rows in (c,h,w) order -> the engine's (h,w,c) */
        if (trans) {
            vd[0] = N, vd[1] = x->fc, vd[2] = x->fh, vd[3] = x->fw;
            perm[0] = 2, perm[1] = 3, perm[2] = 1, perm[3] = 0;
        } else {
            vd[0] = x->fc, vd[1] = x->fh, vd[2] = x->fw, vd[3] = N;
            perm[0] = 1, perm[1] = 2, perm[2] = 0, perm[3] = 3;
        }
        rc = mk_param(c, w, 4, vd, perm, 2, od, 1, &in[1]);
    } else {
        vd[0] = w->cd[0], vd[1] = w->cd[1];
        perm[0] = trans ? 1 : 0, perm[1] = trans ? 0 : 1;
        rc = mk_param(c, w, 2, vd, perm, 2, od, 1, &in[1]);
    }
    if (rc < 0)
        return rc;
    int n_in = 2;
    if (bias) {
        if (bias->numel != N || (bias->crank == 2 && bias->cd[0] != 1) || bias->crank > 2)
            return fail(c, RT_ESHAPE, "bias '%.64s' must have %lld values (1-D)", bias->name,
                        (long long)N);
        if ((rc = mk_param(c, bias, 1, &N, P_ID, 1, &N, 1, &in[2])) < 0)
            return rc;
        n_in = 3;
    }
    int64_t d[RT_MAX_DIMS];
    memcpy(d, x->d, sizeof d);
    d[x->rank - 1] = N;
    oval *y = NULL;
    if ((rc = def_act(c, &y, L_PLAIN, x->rank, d)) < 0)
        return rc;
    return add_node(c, y->en, "Dense", n_in, in, 0, NULL);
}

static int op_gemm(ictx *c)
{
    int rc;
    int64_t ta, tb;
    double alpha, beta;
    if ((rc = a_int(c, "transA", 0, &ta)) < 0 || (rc = a_int(c, "transB", 0, &tb)) < 0 ||
        (rc = a_float(c, "alpha", 1, &alpha)) < 0 || (rc = a_float(c, "beta", 1, &beta)) < 0)
        return rc;
    if (ta || alpha != 1 || beta != 1)
        return fail(c, RT_EINVAL, "only transA=0, alpha=1, beta=1 are supported");
    oval *x = NULL, *w = NULL, *b = NULL;
    if ((rc = in_act(c, 0, &x)) < 0 || (rc = in_const(c, 1, &w)) < 0)
        return rc;
    if (x->rank != 2)
        return fail(c, RT_ESHAPE, "input A must be 2-D");
    b = in_opt(c, 2, &rc);
    if (rc < 0)
        return rc;
    if (b && b->kind != V_CONST)
        return fail(c, RT_EINVAL, "bias C must be an initializer");
    return dense(c, x, w, tb != 0, b);
}

static int op_matmul(ictx *c)
{
    int rc;
    oval *x = NULL, *w = NULL;
    if ((rc = in_act(c, 0, &x)) < 0 || (rc = in_const(c, 1, &w)) < 0)
        return rc;
    return dense(c, x, w, 0, NULL);
}

/* kernel_shape/strides/dilations/pads of a 2-D window op; pads as ONNX:
 * (top, left, bottom, right) */
typedef struct win {
    int64_t k[2], s[2], dl[2], pads[4];
    int same; /* auto_pad SAME_UPPER: TensorFlow's 'same' */
} win;

static int window(ictx *c, const oval *x, const int64_t *kdef, win *w)
{
    int rc, n;
    int64_t v[4];
    if ((rc = a_ints(c, "kernel_shape", v, 2, &n)) < 0)
        return rc;
    if (n == 2)
        w->k[0] = v[0], w->k[1] = v[1];
    else if (n < 0 && kdef)
        w->k[0] = kdef[0], w->k[1] = kdef[1];
    else
        return fail(c, RT_EINVAL, "kernel_shape must have 2 values (2-D only)");
    w->s[0] = w->s[1] = w->dl[0] = w->dl[1] = 1;
    memset(w->pads, 0, sizeof w->pads);
    if ((rc = a_ints(c, "strides", v, 2, &n)) < 0)
        return rc;
    if (n == 2)
        w->s[0] = v[0], w->s[1] = v[1];
    else if (n >= 0)
        return fail(c, RT_EINVAL, "strides must have 2 values");
    if ((rc = a_ints(c, "dilations", v, 2, &n)) < 0)
        return rc;
    if (n == 2)
        w->dl[0] = v[0], w->dl[1] = v[1];
    else if (n >= 0)
        return fail(c, RT_EINVAL, "dilations must have 2 values");
    if ((rc = a_ints(c, "pads", v, 4, &n)) < 0)
        return rc;
    if (n == 4)
        memcpy(w->pads, v, sizeof w->pads);
    else if (n >= 0)
        return fail(c, RT_EINVAL, "pads must have 4 values");
    for (int q = 0; q < 2; q++)
        if (w->k[q] < 1 || w->s[q] < 1 || w->dl[q] < 1 || w->k[q] > RT__MAX_WINDOW ||
            w->s[q] > RT__MAX_WINDOW || w->dl[q] > RT__MAX_WINDOW)
            return fail(c, RT_EINVAL, "kernel, strides and dilations must be in 1..%d",
                        RT__MAX_WINDOW);
    for (int q = 0; q < 4; q++)
        if (w->pads[q] < 0 || w->pads[q] > RT__MAX_WINDOW)
            return fail(c, RT_EINVAL, "pads must be in 0..%d", RT__MAX_WINDOW);
    char ap[32];
    if ((rc = a_str(c, "auto_pad", "NOTSET", ap, sizeof ap)) < 0)
        return rc;
    w->same = 0;
    if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
        /* total padding as TensorFlow's 'same'; SAME_LOWER puts the odd
         * cell first */
        for (int q = 0; q < 2; q++) {
            const int64_t in = x->d[2 + q], out = (in + w->s[q] - 1) / w->s[q];
            int64_t tot = (out - 1) * w->s[q] + (w->k[q] - 1) * w->dl[q] + 1 - in;
            if (tot < 0)
                tot = 0;
            const int64_t lo = !strcmp(ap, "SAME_UPPER") ? tot / 2 : tot - tot / 2;
            w->pads[q] = lo;
            w->pads[q + 2] = tot - lo;
        }
    } else if (!strcmp(ap, "VALID")) {
        memset(w->pads, 0, sizeof w->pads);
    } else if (strcmp(ap, "NOTSET") != 0) {
        return fail(c, RT_EINVAL, "auto_pad '%s' is not supported", ap);
    }
    return 0;
}

/* output size of one spatial dim */
static int win_out(ictx *c, const win *w, int q, int64_t in, int64_t *out)
{
    const int64_t keff = (w->k[q] - 1) * w->dl[q] + 1, span = in + w->pads[q] + w->pads[q + 2];
    if (span < keff)
        return fail(c, RT_ESHAPE, "the window %lld does not fit the padded input %lld",
                    (long long)keff, (long long)span);
    *out = (span - keff) / w->s[q] + 1;
    return 0;
}

static int win_attrs(const win *w, int conv, rt_attr *a, int64_t *store)
{
    int n = 0;
    memcpy(store, w->k, 2 * sizeof(int64_t));
    memcpy(store + 2, w->s, 2 * sizeof(int64_t));
    memcpy(store + 4, w->dl, 2 * sizeof(int64_t));
    store[6] = w->pads[0], store[7] = w->pads[1], store[8] = w->pads[2], store[9] = w->pads[3];
    if (!conv)
        a[n++] = (rt_attr){.name = "pool", .kind = RT_ATTR_INTS, .n = 2, .ints = store};
    a[n++] = (rt_attr){.name = "strides", .kind = RT_ATTR_INTS, .n = 2, .ints = store + 2};
    if (conv)
        a[n++] = (rt_attr){.name = "dilations", .kind = RT_ATTR_INTS, .n = 2, .ints = store + 4};
    a[n++] = (rt_attr){.name = "pads", .kind = RT_ATTR_INTS, .n = 4, .ints = store + 6};
    return n;
}

static int need_nhwc(ictx *c, const oval *x)
{
    if (x->layout != L_NHWC)
        return fail(c, RT_ESHAPE,
                    "input '%.64s' must be 4-D (N,C,H,W); 1-D and 3-D "
                    "convolutions are not supported",
                    x->name);
    return 0;
}

static int op_conv(ictx *c)
{
    int rc;
    oval *x = NULL, *w = NULL, *b = NULL, *y = NULL;
    if ((rc = in_act(c, 0, &x)) < 0 || (rc = need_nhwc(c, x)) < 0 || (rc = in_const(c, 1, &w)) < 0)
        return rc;
    b = in_opt(c, 2, &rc);
    if (rc < 0)
        return rc;
    if (b && b->kind != V_CONST)
        return fail(c, RT_EINVAL, "bias must be an initializer");
    int64_t group;
    if ((rc = a_int(c, "group", 1, &group)) < 0)
        return rc;
    if (w->crank != 4)
        return fail(c, RT_ESHAPE, "weight '%.64s' must be 4-D", w->name);
    const int64_t OC = w->cd[0], C = x->d[1];
    if (group < 1 || C % group || OC % group)
        return fail(c, RT_EINVAL,
                    "group %lld must divide the %lld input and %lld output "
                    "channels",
                    (long long)group, (long long)C, (long long)OC);
    if (w->cd[1] * group != C)
        return fail(c, RT_ESHAPE, "weight '%.64s' expects %lld input channels, input has %lld",
                    w->name, (long long)(w->cd[1] * group), (long long)C);
    win wn;
    const int64_t kdef[2] = {w->cd[2], w->cd[3]};
    if ((rc = window(c, x, kdef, &wn)) < 0)
        return rc;
    if (wn.k[0] != w->cd[2] || wn.k[1] != w->cd[3])
        return fail(c, RT_ESHAPE, "kernel_shape does not match the weight");
    int64_t d[4] = {-1, OC, 0, 0};
    if ((rc = win_out(c, &wn, 0, x->d[2], &d[2])) < 0 ||
        (rc = win_out(c, &wn, 1, x->d[3], &d[3])) < 0)
        return rc;
    const char *in[3] = {x->en};
    /* (O, I/group, kh, kw) -> (kh, kw, I/group, O) */
    const int perm[4] = {2, 3, 1, 0};
    const int64_t od[4] = {w->cd[2], w->cd[3], w->cd[1], OC};
    if ((rc = mk_param(c, w, 4, w->cd, perm, 4, od, 1, &in[1])) < 0)
        return rc;
    if (b) {
        if (b->numel != OC)
            return fail(c, RT_ESHAPE, "bias must have %lld values", (long long)OC);
        if ((rc = mk_param(c, b, 1, &OC, P_ID, 1, &OC, 1, &in[2])) < 0)
            return rc;
    }
    if ((rc = def_act(c, &y, L_NHWC, 4, d)) < 0)
        return rc;
    rt_attr a[5];
    int64_t store[10];
    int na = win_attrs(&wn, 1, a, store);
    if (group != 1)
        a[na++] = (rt_attr){.name = "group", .kind = RT_ATTR_INT, .i = group};
    return add_node(c, y->en, "Conv2D", b ? 3 : 2, in, na, a);
}

static int pool(ictx *c, const char *op, int avg)
{
    int rc;
    oval *x = NULL, *y = NULL;
    if ((rc = in_act(c, 0, &x)) < 0 || (rc = need_nhwc(c, x)) < 0)
        return rc;
    win wn;
    if ((rc = window(c, x, NULL, &wn)) < 0)
        return rc;
    if (wn.dl[0] != 1 || wn.dl[1] != 1)
        return fail(c, RT_EINVAL, "dilated pooling is not supported");
    int64_t ceil_mode, so, cip;
    if ((rc = a_int(c, "ceil_mode", 0, &ceil_mode)) < 0 ||
        (rc = a_int(c, "storage_order", 0, &so)) < 0 ||
        (rc = a_int(c, "count_include_pad", 0, &cip)) < 0)
        return rc;
    for (int q = 0; q < 4; q++)
        if (wn.pads[q] >= wn.k[q & 1])
            return fail(c, RT_EINVAL, "pads must be smaller than the window");
    int64_t d[4] = {-1, x->d[1], 0, 0};
    if ((rc = win_out(c, &wn, 0, x->d[2], &d[2])) < 0 ||
        (rc = win_out(c, &wn, 1, x->d[3], &d[3])) < 0)
        return rc;
    if (ceil_mode) {
        /* ceil_mode changes nothing when the windows tile exactly */
        for (int q = 0; q < 2; q++) {
            const int64_t span = x->d[2 + q] + wn.pads[q] + wn.pads[q + 2] - wn.k[q];
            if (span % wn.s[q])
                return fail(c, RT_EINVAL,
                            "ceil_mode=1 with a partial last window is not "
                            "supported");
        }
    }
    if (avg && cip && (wn.pads[0] || wn.pads[1] || wn.pads[2] || wn.pads[3]))
        return fail(c, RT_EINVAL, "count_include_pad=1 with padding is not supported");
    if (c->node->n_output > 1 && c->node->output[1] && *c->node->output[1])
        return fail(c, RT_EINVAL, "the Indices output is not supported");
    if ((rc = def_act(c, &y, L_NHWC, 4, d)) < 0)
        return rc;
    rt_attr a[4];
    int64_t store[10];
    int na = win_attrs(&wn, 0, a, store);
    const char *in[1] = {x->en};
    return add_node(c, y->en, op, 1, in, na, a);
}

static int op_maxpool(ictx *c) { return pool(c, "MaxPool2D", 0); }
static int op_avgpool(ictx *c) { return pool(c, "AvgPool2D", 1); }

/* GlobalAveragePool / GlobalMaxPool of an NCHW value: (N, C, 1, 1) */
static int global_pool(ictx *c, const char *op)
{
    int rc;
    oval *x = NULL, *y = NULL;
    if ((rc = in_act(c, 0, &x)) < 0 || (rc = need_nhwc(c, x)) < 0)
        return rc;
    const int64_t d[4] = {-1, x->d[1], 1, 1};
    if ((rc = def_act(c, &y, L_NHWC, 4, d)) < 0)
        return rc;
    const char *in[1] = {x->en};
    rt_attr a = {.name = "keepdims", .kind = RT_ATTR_INT, .i = 1};
    return add_node(c, y->en, op, 1, in, 1, &a);
}

static int op_gap(ictx *c) { return global_pool(c, "GlobalAvgPool"); }
static int op_gmp(ictx *c) { return global_pool(c, "GlobalMaxPool"); }

static int op_batchnorm(ictx *c)
{
    int rc;
    oval *x = NULL, *k[4] = {NULL}, *y = NULL;
    if ((rc = in_act(c, 0, &x)) < 0)
        return rc;
    for (int q = 0; q < 4; q++)
        if ((rc = in_const(c, (size_t)q + 1, &k[q])) < 0)
            return rc;
    if (x->layout == L_FLAT || x->rank < 2 || (x->layout == L_PLAIN && x->rank != 2))
        return fail(c, RT_ESHAPE, "input must be (N,C) or (N,C,H,W)");
    const int64_t C = x->d[1];
    double eps, mom;
    if ((rc = a_float(c, "epsilon", 1e-5, &eps)) < 0 ||
        (rc = a_float(c, "momentum", 0.9, &mom)) < 0)
        return rc;
    const char *in[5] = {x->en};
    for (int q = 0; q < 4; q++) {
        if (k[q]->numel != C)
            return fail(c, RT_ESHAPE, "'%.64s' must have %lld values", k[q]->name, (long long)C);
        /* the running statistics are not trained */
        if ((rc = mk_param(c, k[q], 1, &C, P_ID, 1, &C, q < 2, &in[q + 1])) < 0)
            return rc;
    }
    /* training mode's running_mean/var outputs stay undefined: the engine
     * moves the statistics in place and nothing may read them */
    if ((rc = def_act(c, &y, x->layout, x->rank, x->d)) < 0)
        return rc;
    rt_attr a[3] = {
        {.name = "momentum", .kind = RT_ATTR_FLOAT, .f = mom},
        {.name = "epsilon", .kind = RT_ATTR_FLOAT, .f = eps},
        {.name = "unbiased", .kind = RT_ATTR_INT, .i = 1},
    };
    return add_node(c, y->en, "BatchNorm", 5, in, 3, a);
}

/* (B, ...) -> (B, prod): Flatten at axis 1 of any activation */
static int flatten_to(ictx *c, oval *x)
{
    int rc;
    oval *y = NULL;
    int64_t n = 1;
    for (int q = 1; q < x->rank; q++)
        n *= x->d[q];
    const int64_t d[2] = {-1, n};
    if (x->layout == L_FLAT || x->rank == 2) {
        /* already flat: another name */
        if ((rc = out_slot(c, 0, &y)) < 0)
            return rc;
        const char *nm = y->name;
        const int uses = y->uses;
        *y = *x;
        y->name = nm;
        y->uses = uses;
        return 0;
    }
    if ((rc = def_act(c, &y, L_PLAIN, 2, d)) < 0)
        return rc;
    if (x->layout == L_NHWC && x->d[1] > 1 && x->d[2] * x->d[3] > 1) {
        y->layout = L_FLAT;
        y->fc = x->d[1], y->fh = x->d[2], y->fw = x->d[3];
    }
    const char *in[1] = {x->en};
    return add_node(c, y->en, "Flatten", 1, in, 0, NULL);
}

static int op_flatten(ictx *c)
{
    int rc, ax = 0;
    oval *x = NULL;
    if ((rc = in_act(c, 0, &x)) < 0)
        return rc;
    int64_t a;
    if ((rc = a_int(c, "axis", 1, &a)) < 0)
        return rc;
    if ((rc = norm_axis(c, a, x->rank + 1, &ax)) < 0)
        return rc;
    if (ax != 1)
        return fail(c, RT_EINVAL,
                    "axis %d: only Flatten at axis 1 (keeping the batch) is "
                    "supported",
                    ax);
    return flatten_to(c, x);
}

/* an activation reshaped to ONNX dims d (d[0] the batch) */
static int reshape_to(ictx *c, oval *x, int r, const int64_t *d)
{
    int rc;
    oval *y = NULL;
    if (r == 2 && (x->layout != L_PLAIN || x->rank != 2)) {
        int64_t n = 1;
        for (int q = 1; q < x->rank; q++)
            n *= x->d[q];
        if (d[1] == n)
            return flatten_to(c, x);
    }
    int same = r == x->rank;
    for (int q = 1; same && q < r; q++)
        same = d[q] == x->d[q];
    if (same) { /* a no-op reshape */
        if ((rc = out_slot(c, 0, &y)) < 0)
            return rc;
        const char *nm = y->name;
        const int uses = y->uses;
        *y = *x;
        y->name = nm;
        y->uses = uses;
        return 0;
    }
    if (x->layout == L_NHWC && r == 4 && d[2] * d[3] == 1 && x->d[2] * x->d[3] == 1) {
        /* (B,C,1,1) <-> (B,C',1,1) after a flatten: channels only */
    } else if (x->layout != L_PLAIN) {
        return fail(c, RT_EINVAL,
                    "reshaping the NCHW value '%.64s' other than flattening "
                    "it is not supported",
                    x->name);
    }
    if (r < 1 || r > RT_MAX_DIMS)
        return fail(c, RT_ESHAPE, "bad reshape rank %d", r);
    if ((rc = def_act(c, &y, r == 4 ? L_NHWC : L_PLAIN, r, d)) < 0)
        return rc;
    int64_t ed[RT_MAX_DIMS];
    int en = engine_dims(y, ed);
    const char *in[1] = {x->en};
    rt_attr a = {.name = "shape", .kind = RT_ATTR_INTS, .n = en, .ints = ed};
    if (r == 4 && x->layout == L_PLAIN && !(d[2] * d[3] == 1))
        return fail(c, RT_EINVAL, "reshaping to a 4-D (NCHW) value is not supported");
    return add_node(c, y->en, "Reshape", 1, in, 1, &a);
}

static int fold_reshape(ictx *c, oval *x, const oval *s);
static int fold_transpose(ictx *c, oval *x);

static int op_reshape(ictx *c)
{
    int rc;
    c->rnn_ok = 1;
    oval *x = in_opt(c, 0, &rc), *s = NULL;
    c->rnn_ok = 0;
    if (rc < 0)
        return rc;
    if ((rc = in_const(c, 1, &s)) < 0)
        return rc;
    if (x && x->kind == V_CONST)
        return fold_reshape(c, x, s);
    if (x && x->kind == V_ACT && x->layout == L_RNN) {
        /* a bidirectional Y as (T, B, D, H) merged to (T, B, D*H): the
         * engine holds it so */
        int ok = x->rv == RV_TBDH && !s->isf && s->numel == 3;
        for (int q = 0; ok && q < 3; q++) {
            const int64_t v = s->i[q], want = q == 0 ? x->d[0] : q == 2 ? x->d[2] * x->d[3] : -2;
            ok = v == 0 || v == want || (q == 1 && (v == SYM_B || v == -1)) || (q == 2 && v == -1);
        }
        if (!ok)
            return fail(c, RT_EINVAL,
                        "of the sequence-major '%.64s' only (seq, batch, "
                        "directions, hidden) -> (seq, batch, directions * hidden) is a "
                        "supported reshape",
                        x->name);
        const int64_t d[3] = {x->d[0], -1, x->d[2] * x->d[3]};
        return def_rnn(c, 0, RV_TBF, 3, d, x->en);
    }
    if ((rc = in_act(c, 0, &x)) < 0)
        return rc;
    if (s->isf || s->crank != 1 || s->numel < 1 || s->numel > RT_MAX_DIMS)
        return fail(c, RT_EINVAL, "shape must be a 1-D integer constant of 1..%d values",
                    RT_MAX_DIMS);
    const int r = (int)s->numel;
    int64_t d[RT_MAX_DIMS], total = 1, known = 1;
    int neg = -1;
    for (int q = 1; q < x->rank; q++)
        total *= x->d[q];
    for (int q = 0; q < r; q++) {
        int64_t v = s->i[q];
        if (q == 0) {
            if (v != SYM_B && v != 0 && v != -1)
                return fail(c, RT_EINVAL,
                            "Reshape must keep the batch dimension first "
                            "(shape[0] = %lld)",
                            (long long)v);
            d[0] = -1;
            continue;
        }
        if (v == 0)
            v = q < x->rank ? x->d[q] : -2;
        if (v == -1) {
            if (neg >= 0)
                return fail(c, RT_EINVAL, "two -1 in shape");
            neg = q;
            d[q] = -1;
            continue;
        }
        if (v < 1)
            return fail(c, RT_EINVAL, "shape[%d] = %lld", q, (long long)s->i[q]);
        d[q] = v;
        if (__builtin_mul_overflow(known, v, &known))
            return fail(c, RT_EOVERFLOW, "shape");
    }
    if (neg >= 0) {
        if (total % known)
            return fail(c, RT_ESHAPE, "shape does not divide %lld", (long long)total);
        d[neg] = total / known;
    } else if (known != total) {
        return fail(c, RT_ESHAPE, "reshape of %lld values per sample to %lld", (long long)total,
                    (long long)known);
    }
    return reshape_to(c, x, r, d);
}

/* ------------------------------------------------------- constant folding */

static int def_const(ictx *c, size_t k, int isf, int rank, const int64_t *d, oval **out)
{
    oval *v = NULL;
    int rc = out_slot(c, k, &v);
    if (rc < 0)
        return rc;
    v->kind = V_CONST;
    v->isf = isf;
    v->crank = rank;
    v->numel = 1;
    for (int q = 0; q < rank; q++) {
        v->cd[q] = d[q];
        /* a folded constant is built from a shape the model states, not
         * from bytes it carries: bound it before allocating */
        if (d[q] < 0 || __builtin_mul_overflow(v->numel, d[q], &v->numel) ||
            v->numel > RT__ONNX_MAX_FOLD)
            return fail(c, RT_EINVAL, "a folded constant of more than %lld values",
                        (long long)RT__ONNX_MAX_FOLD);
    }
    if (isf)
        v->f = alloc(c, (size_t)v->numel * sizeof(float));
    else
        v->i = alloc(c, (size_t)v->numel * sizeof(int64_t));
    if (isf ? !v->f : !v->i)
        return OOM(c);
    *out = v;
    return 0;
}

static int op_constant(ictx *c)
{
    int rc;
    oval *v = NULL;
    const Onnx__AttributeProto *a = c->node->n_attribute == 1 ? c->node->attribute[0] : NULL;
    if (!a || !a->name)
        return fail(c, RT_EINVAL, "needs exactly one value attribute");
    if (!strcmp(a->name, "value") && a->t) {
        if ((rc = out_slot(c, 0, &v)) < 0)
            return rc;
        const char *nm = v->name;
        if ((rc = tensor_load(c, a->t, v)) < 0)
            return rc;
        v->name = nm;
        return 0;
    }
    int64_t one = 1, n;
    if (!strcmp(a->name, "value_float") || !strcmp(a->name, "value_int")) {
        int isf = a->name[6] == 'f';
        if (isf && !isfinite(a->f))
            return fail(c, RT_ENAN, "a non-finite constant");
        if ((rc = def_const(c, 0, isf, 0, &one, &v)) < 0)
            return rc;
        if (isf)
            v->f[0] = a->f;
        else
            v->i[0] = a->i == SYM_B ? a->i + 1 : a->i;
        return 0;
    }
    if (!strcmp(a->name, "value_floats") || !strcmp(a->name, "value_ints")) {
        int isf = a->name[6] == 'f';
        n = isf ? (int64_t)a->n_floats : (int64_t)a->n_ints;
        if ((rc = def_const(c, 0, isf, 1, &n, &v)) < 0)
            return rc;
        for (int64_t q = 0; q < n; q++) {
            if (isf && !isfinite(a->floats[q]))
                return fail(c, RT_ENAN, "a non-finite constant");
            if (isf)
                v->f[q] = a->floats[q];
            else
                v->i[q] = a->ints[q] == SYM_B ? a->ints[q] + 1 : a->ints[q];
        }
        return 0;
    }
    return fail(c, RT_EINVAL, "attribute '%.32s' is not supported", a->name);
}

/* Shape of an activation: ONNX dims, the batch symbolic. */
static int op_shape(ictx *c)
{
    int rc;
    c->rnn_ok = 1;
    oval *x = in_opt(c, 0, &rc), *y = NULL;
    c->rnn_ok = 0;
    if (rc < 0)
        return rc;
    if (!x)
        return fail(c, RT_EGRAPH, "input 0 is missing");
    if (attr(c->node, "start") || attr(c->node, "end"))
        return fail(c, RT_EINVAL, "start/end are not supported");
    int64_t r = x->kind == V_ACT ? x->rank : x->crank;
    if ((rc = def_const(c, 0, 0, 1, &r, &y)) < 0)
        return rc;
    for (int q = 0; q < r; q++)
        y->i[q] = x->kind != V_ACT                              ? x->cd[q]
                  : (x->layout == L_RNN ? x->d[q] < 0 : q == 0) ? SYM_B
                                                                : x->d[q];
    return 0;
}

/* nn.Embedding: Gather(weight (V, D), indices) at axis 0 with the indices
 * an activation (the data, as floats) -> (B, ..., D): the engine's
 * Embedding, the weight a parameter */
static int embedding(ictx *c, oval *w, oval *ix, int64_t axis)
{
    int rc;
    oval *y = NULL;
    if (axis != 0 || w->crank != 2)
        return fail(c, RT_EINVAL,
                    "only a gather of rows (axis 0) of a 2-D weight is "
                    "supported (nn.Embedding); axis is %lld, weight rank %d",
                    (long long)axis, w->crank);
    if (ix->layout != L_PLAIN)
        return fail(c, RT_EINVAL, "indices '%.64s' are a 4-D (NCHW) value", ix->name);
    if (ix->rank + 1 > RT_MAX_DIMS || ix->rank + 1 == 4)
        return fail(c, RT_ESHAPE,
                    "indices of rank %d: ranks 1, 2 and 4 (batch counted) "
                    "are supported",
                    ix->rank);
    const char *in[2] = {ix->en};
    if ((rc = mk_param(c, w, 2, w->cd, P_ID, 2, w->cd, 1, &in[1])) < 0)
        return rc;
    int64_t d[RT_MAX_DIMS];
    memcpy(d, ix->d, sizeof d);
    d[ix->rank] = w->cd[1];
    if ((rc = def_act(c, &y, L_PLAIN, ix->rank + 1, d)) < 0)
        return rc;
    return add_node(c, y->en, "Embedding", 2, in, 0, NULL);
}

static int op_gather(ictx *c)
{
    int rc;
    oval *x = NULL, *ix = NULL, *y = NULL;
    int64_t axis;
    if ((rc = a_int(c, "axis", 0, &axis)) < 0)
        return rc;
    if ((rc = in_const(c, 0, &x)) < 0)
        return rc;
    ix = in_opt(c, 1, &rc);
    if (rc < 0)
        return rc;
    if (ix && ix->kind == V_ACT && x->isf)
        return embedding(c, x, ix, axis);
    if ((rc = in_const(c, 1, &ix)) < 0)
        return rc;
    if (x->crank != 1 || axis != 0 || ix->isf || ix->crank > 1)
        return fail(c, RT_EINVAL, "only gathers from a 1-D constant are folded");
    int64_t n = ix->numel;
    if ((rc = def_const(c, 0, x->isf, ix->crank, &n, &y)) < 0 || (rc = prov_alloc(c, y, x)) < 0)
        return rc;
    for (int64_t q = 0; q < n; q++) {
        int64_t k = ix->i[q] < 0 ? ix->i[q] + x->numel : ix->i[q];
        if (k < 0 || k >= x->numel)
            return fail(c, RT_EINVAL, "index %lld out of range", (long long)ix->i[q]);
        const_copy(y, q, x, k);
    }
    return 0;
}

/* the axes of Squeeze/Unsqueeze: an attribute before opset 13, an input after */
static int axes_of(ictx *c, int64_t *ax, int *n)
{
    int rc;
    if (c->opset < 13)
        return a_ints(c, "axes", ax, RT_MAX_DIMS, n);
    oval *a = in_opt(c, 1, &rc);
    *n = -1;
    if (rc < 0)
        return rc;
    if (!a)
        return 0;
    if (a->kind != V_CONST || a->isf || a->numel > RT_MAX_DIMS)
        return fail(c, RT_EINVAL, "axes must be an integer constant");
    for (int64_t q = 0; q < a->numel; q++)
        ax[q] = a->i[q];
    *n = (int)a->numel;
    return 0;
}

/* Squeeze (unsq 0) or Unsqueeze (1) of dims d (rank r) into nd (*nr) */
static int sq_dims(ictx *c, int unsq, int r, const int64_t *d, int64_t *nd, int *nr)
{
    int64_t ax[RT_MAX_DIMS];
    int n, rc, mark[RT_MAX_DIMS + 1] = {0};
    if ((rc = axes_of(c, ax, &n)) < 0)
        return rc;
    if (unsq) {
        if (n < 1)
            return fail(c, RT_EINVAL, "axes are required");
        const int out = r + n;
        if (out > RT_MAX_DIMS)
            return fail(c, RT_EINVAL, "rank above %d", RT_MAX_DIMS);
        for (int q = 0; q < n; q++) {
            int a = 0;
            if ((rc = norm_axis(c, ax[q], out, &a)) < 0)
                return rc;
            if (mark[a])
                return fail(c, RT_EINVAL, "axis %d twice", a);
            mark[a] = 1;
        }
        for (int q = 0, s = 0; q < out; q++)
            nd[q] = mark[q] ? 1 : d[s++];
        *nr = out;
        return 0;
    }
    if (n < 0) {
        for (int q = 0; q < r; q++)
            mark[q] = d[q] == 1;
    } else {
        for (int q = 0; q < n; q++) {
            int a = 0;
            if ((rc = norm_axis(c, ax[q], r, &a)) < 0)
                return rc;
            if (d[a] != 1)
                return fail(c, RT_ESHAPE, "axis %d has size %lld, not 1", a, (long long)d[a]);
            mark[a] = 1;
        }
    }
    *nr = 0;
    for (int q = 0; q < r; q++)
        if (!mark[q])
            nd[(*nr)++] = d[q];
    return 0;
}

static int squeeze_any(ictx *c, int unsq)
{
    int rc;
    c->rnn_ok = 1;
    c->zero_ok = 1;
    oval *x = in_opt(c, 0, &rc), *y = NULL;
    c->rnn_ok = 0;
    c->zero_ok = 0;
    if (rc < 0)
        return rc;
    if (!x)
        return fail(c, RT_EGRAPH, "input 0 is missing");
    if (x->kind == V_ZERO)
        return out_slot(c, 0, &y) < 0 ? RT_EGRAPH : (y->kind = V_ZERO, 0);
    if (x->kind == V_ACT && x->layout == L_RNN) {
        /* an RNN's Y (T, 1, B, H) without its direction axis */
        int64_t ax[RT_MAX_DIMS];
        int n;
        if ((rc = axes_of(c, ax, &n)) < 0)
            return rc;
        if (unsq || x->rv != RV_TDBH || x->d[1] != 1 || n != 1 || (ax[0] != 1 && ax[0] != -3))
            return fail(c, RT_EINVAL,
                        "of the sequence-major '%.64s' only the direction axis "
                        "(1) of a one-direction RNN's Y can be squeezed",
                        x->name);
        const int64_t d[3] = {x->d[0], -1, x->d[3]};
        return def_rnn(c, 0, RV_TBF, 3, d, x->en);
    }
    int64_t nd[RT_MAX_DIMS];
    int nr = 0;
    if (x->kind == V_CONST) {
        if ((rc = sq_dims(c, unsq, x->crank, x->cd, nd, &nr)) < 0)
            return rc;
        if ((rc = def_const(c, 0, x->isf, nr, nd, &y)) < 0 || (rc = prov_alloc(c, y, x)) < 0)
            return rc;
        for (int64_t q = 0; q < x->numel; q++)
            const_copy(y, q, x, q);
        return 0;
    }
    int64_t d[RT_MAX_DIMS];
    memcpy(d, x->d, sizeof d);
    d[0] = 0; /* the batch may be 1: mark it so that it is never squeezed */
    if ((rc = sq_dims(c, unsq, x->rank, d, nd, &nr)) < 0)
        return rc;
    if (nd[0] != 0)
        return fail(c, RT_EINVAL, "the batch dimension must stay first");
    nd[0] = -1;
    return reshape_to(c, x, nr, nd);
}

static int op_squeeze(ictx *c) { return squeeze_any(c, 0); }
static int op_unsqueeze(ictx *c) { return squeeze_any(c, 1); }

static int op_concat(ictx *c)
{
    int rc, ax = 0;
    int64_t a;
    if ((rc = a_int(c, "axis", 0, &a)) < 0)
        return rc;
    const size_t n = c->node->n_input;
    if (n < 1 || n > RT__MAX_IN)
        return fail(c, RT_EINVAL, "needs 1..%d inputs", RT__MAX_IN);
    oval *v[RT__MAX_IN];
    int consts = 0;
    for (size_t q = 0; q < n; q++) {
        if (!(v[q] = in_opt(c, q, &rc)) || rc < 0)
            return rc < 0 ? rc : fail(c, RT_EGRAPH, "input %zu is missing", q);
        consts += v[q]->kind == V_CONST;
    }
    if (consts == (int)n) {
        /* constants (shapes; torch's slices of an LSTM's weights): fold */
        const int isf = v[0]->isf, r = v[0]->crank;
        if (r < 1)
            return fail(c, RT_EINVAL, "concatenating scalars");
        if ((rc = norm_axis(c, a, r, &ax)) < 0)
            return rc;
        int64_t d[RT_MAX_DIMS], outer = 1, inner = 1;
        memcpy(d, v[0]->cd, sizeof d);
        d[ax] = 0;
        for (size_t q = 0; q < n; q++) {
            if (v[q]->crank != r || v[q]->isf != isf)
                return fail(c, RT_EINVAL, "only constants of one rank and type are folded");
            for (int k = 0; k < r; k++)
                if (k != ax && v[q]->cd[k] != v[0]->cd[k])
                    return fail(c, RT_ESHAPE, "inputs differ outside axis %d", ax);
            d[ax] += v[q]->cd[ax];
        }
        for (int k = 0; k < ax; k++)
            outer *= d[k];
        for (int k = ax + 1; k < r; k++)
            inner *= d[k];
        oval *y = NULL;
        if ((rc = def_const(c, 0, isf, r, d, &y)) < 0)
            return rc;
        for (size_t q = 0; q < n; q++)
            if ((rc = prov_alloc(c, y, v[q])) < 0)
                return rc;
        int64_t o = 0;
        for (int64_t b = 0; b < outer; b++)
            for (size_t q = 0; q < n; q++) {
                const int64_t blk = v[q]->cd[ax] * inner;
                for (int64_t k = 0; k < blk; k++)
                    const_copy(y, o++, v[q], b * blk + k);
            }
        return 0;
    }
    if (consts)
        return fail(c, RT_EINVAL,
                    "concatenating constants with activations is "
                    "not supported");
    const oval *x = v[0];
    if ((rc = norm_axis(c, a, x->rank, &ax)) < 0)
        return rc;
    if (ax == 0)
        return fail(c, RT_EINVAL, "concatenation over the batch is not supported");
    int64_t d[RT_MAX_DIMS];
    memcpy(d, x->d, sizeof d);
    d[ax] = 0;
    const char *in[RT__MAX_IN];
    for (size_t q = 0; q < n; q++) {
        if (v[q]->layout != x->layout || v[q]->rank != x->rank || x->layout == L_FLAT)
            return fail(c, RT_ESHAPE, "inputs have different ranks or layouts");
        for (int k = 1; k < x->rank; k++)
            if (k != ax && v[q]->d[k] != x->d[k])
                return fail(c, RT_ESHAPE, "inputs differ outside axis %d", ax);
        d[ax] += v[q]->d[ax];
        in[q] = v[q]->en;
    }
    oval *y = NULL;
    if ((rc = def_act(c, &y, x->layout, x->rank, d)) < 0)
        return rc;
    rt_attr at = {
        .name = "axis", .kind = RT_ATTR_INT, .i = x->layout == L_NHWC ? nhwc_axis(ax) : ax};
    return add_node(c, y->en, "Concat", (int)n, in, 1, &at);
}

static int op_cast(ictx *c)
{
    int rc;
    oval *x = NULL, *y = NULL;
    if ((rc = in_const(c, 0, &x)) < 0)
        return rc;
    int64_t to;
    if ((rc = a_int(c, "to", 0, &to)) < 0)
        return rc;
    int isf;
    if (to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT || to == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE)
        isf = 1;
    else if (to == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 ||
             to == ONNX__TENSOR_PROTO__DATA_TYPE__INT32)
        isf = 0;
    else
        return fail(c, RT_EINVAL, "cast to type %lld is not folded", (long long)to);
    if ((rc = def_const(c, 0, isf, x->crank, x->cd, &y)) < 0)
        return rc;
    if (isf && (rc = prov_alloc(c, y, x)) < 0)
        return rc; /* float to float: the weight */
    for (int64_t q = 0; q < x->numel; q++) {
        if (y->src)
            y->src[q] = prov_of(x, q);
        if (!x->isf && x->i[q] == SYM_B) {
            if (isf)
                return fail(c, RT_EINVAL, "the batch size cannot be cast to float");
            y->i[q] = SYM_B;
        } else if (isf) {
            y->f[q] = x->isf ? x->f[q] : (float)x->i[q];
        } else if (x->isf && !(fabsf(x->f[q]) < 9.2e18f)) {
            return fail(c, RT_EINVAL, "%g does not fit an integer", (double)x->f[q]);
        } else {
            y->i[q] = x->isf ? (int64_t)x->f[q] : x->i[q];
        }
    }
    return 0;
}

/* Slice of a constant: any axes, steps (negative too) */
static int op_slice(ictx *c)
{
    int rc;
    oval *x = NULL, *st = NULL, *en = NULL, *ax = NULL, *sp = NULL, *y = NULL;
    c->zero_ok = 1;
    x = in_opt(c, 0, &rc);
    c->zero_ok = 0;
    if (rc < 0)
        return rc;
    if (x && x->kind == V_ZERO) { /* a layer's part of the zero states */
        if ((rc = out_slot(c, 0, &y)) < 0)
            return rc;
        y->kind = V_ZERO;
        return 0;
    }
    if ((rc = in_const(c, 0, &x)) < 0)
        return rc;
    int64_t s0[RT_MAX_DIMS], e0[RT_MAX_DIMS], a0[RT_MAX_DIMS], p0[RT_MAX_DIMS];
    int n;
    if (c->opset < 10)
        return fail(c, RT_EINVAL, "Slice before opset 10");
    if ((rc = in_const(c, 1, &st)) < 0 || (rc = in_const(c, 2, &en)) < 0)
        return rc;
    if (c->node->n_input > 3 && c->node->input[3][0] && (rc = in_const(c, 3, &ax)) < 0)
        return rc;
    if (c->node->n_input > 4 && c->node->input[4][0] && (rc = in_const(c, 4, &sp)) < 0)
        return rc;
    n = (int)st->numel;
    if (st->isf || en->isf || en->numel != n || n > x->crank ||
        (ax && (ax->isf || ax->numel != n)) || (sp && (sp->isf || sp->numel != n)))
        return fail(c, RT_EINVAL, "starts, ends, axes and steps must be integers of one length");
    int64_t lo[RT_MAX_DIMS], step[RT_MAX_DIMS], d[RT_MAX_DIMS];
    int seen[RT_MAX_DIMS] = {0};
    for (int q = 0; q < x->crank; q++)
        lo[q] = 0, step[q] = 1, d[q] = x->cd[q];
    for (int q = 0; q < n; q++) {
        int a = q;
        s0[q] = st->i[q], e0[q] = en->i[q];
        a0[q] = ax ? ax->i[q] : q;
        p0[q] = sp ? sp->i[q] : 1;
        if ((rc = norm_axis(c, a0[q], x->crank, &a)) < 0)
            return rc;
        if (seen[a]++ || p0[q] == 0 || p0[q] == SYM_B)
            return fail(c, RT_EINVAL, "bad axes or steps");
        const int64_t dim = x->cd[a];
        int64_t b = s0[q], e = e0[q];
        if (b == SYM_B || e == SYM_B)
            return fail(c, RT_EINVAL, "slicing by the batch size");
        if (b < 0)
            b += dim;
        if (e < 0)
            e += dim;
        if (p0[q] > 0) {
            b = b < 0 ? 0 : b > dim ? dim : b;
            e = e < 0 ? 0 : e > dim ? dim : e;
            d[a] = e > b ? (e - b - 1) / p0[q] + 1 : 0;
        } else {
            b = b < 0 ? -1 : b > dim - 1 ? dim - 1 : b;
            e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
            d[a] = b > e ? (b - e - 1) / -p0[q] + 1 : 0;
        }
        lo[a] = b;
        step[a] = p0[q];
    }
    if ((rc = def_const(c, 0, x->isf, x->crank, d, &y)) < 0 || (rc = prov_alloc(c, y, x)) < 0)
        return rc;
    int64_t str[RT_MAX_DIMS], idx[RT_MAX_DIMS] = {0}, t = 1;
    for (int q = x->crank - 1; q >= 0; q--)
        str[q] = t, t *= x->cd[q];
    for (int64_t o = 0; o < y->numel; o++) {
        int64_t src = 0;
        for (int q = 0; q < x->crank; q++)
            src += (lo[q] + idx[q] * step[q]) * str[q];
        const_copy(y, o, x, src);
        for (int q = x->crank - 1; q >= 0; q--) {
            if (++idx[q] < d[q])
                break;
            idx[q] = 0;
        }
    }
    return 0;
}

/* Reshape of a constant */
static int fold_reshape(ictx *c, oval *x, const oval *s)
{
    int rc;
    oval *y = NULL;
    if (s->isf || s->crank != 1 || s->numel > RT_MAX_DIMS)
        return fail(c, RT_EINVAL, "shape must be a 1-D integer constant");
    int64_t d[RT_MAX_DIMS], known = 1;
    int neg = -1;
    for (int q = 0; q < s->numel; q++) {
        int64_t v = s->i[q];
        if (v == 0 && q < x->crank)
            v = x->cd[q];
        if (v == -1 && neg < 0) {
            neg = q;
            d[q] = 1;
            continue;
        }
        if (v < 0 || __builtin_mul_overflow(known, v, &known))
            return fail(c, RT_EINVAL, "bad shape value %lld", (long long)s->i[q]);
        d[q] = v;
    }
    if (neg >= 0) {
        if (!known || x->numel % known)
            return fail(c, RT_ESHAPE, "shape does not divide");
        d[neg] = x->numel / known;
    } else if (known != x->numel) {
        return fail(c, RT_ESHAPE, "reshape of %lld values to %lld", (long long)x->numel,
                    (long long)known);
    }
    if ((rc = def_const(c, 0, x->isf, (int)s->numel, d, &y)) < 0 || (rc = prov_alloc(c, y, x)) < 0)
        return rc;
    for (int64_t q = 0; q < x->numel; q++)
        const_copy(y, q, x, q);
    return 0;
}

/* Transpose of a constant */
static int fold_transpose(ictx *c, oval *x)
{
    int rc, n;
    oval *y = NULL;
    const int r = x->crank;
    int64_t p[RT_MAX_DIMS], d[RT_MAX_DIMS], str[RT_MAX_DIMS], idx[RT_MAX_DIMS] = {0}, t = 1;
    if ((rc = a_ints(c, "perm", p, RT_MAX_DIMS, &n)) < 0)
        return rc;
    if (n < 0) {
        n = r;
        for (int q = 0; q < r; q++)
            p[q] = r - 1 - q;
    }
    int seen[RT_MAX_DIMS] = {0};
    if (n != r)
        return fail(c, RT_EINVAL, "perm has %d entries for rank %d", n, r);
    for (int q = 0; q < r; q++)
        if (p[q] < 0 || p[q] >= r || seen[p[q]]++)
            return fail(c, RT_EINVAL, "perm is not a permutation");
    for (int q = r - 1; q >= 0; q--)
        str[q] = t, t *= x->cd[q];
    for (int q = 0; q < r; q++)
        d[q] = x->cd[p[q]];
    if ((rc = def_const(c, 0, x->isf, r, d, &y)) < 0 || (rc = prov_alloc(c, y, x)) < 0)
        return rc;
    for (int64_t o = 0; o < y->numel; o++) {
        int64_t src = 0;
        for (int q = 0; q < r; q++)
            src += idx[q] * str[p[q]];
        const_copy(y, o, x, src);
        for (int q = r - 1; q >= 0; q--) {
            if (++idx[q] < d[q])
                break;
            idx[q] = 0;
        }
    }
    return 0;
}

/* ConstantOfShape(shape) attr value (a 1-element tensor, float 0) */
static int op_constantofshape(ictx *c)
{
    int rc;
    oval *s = NULL, *y = NULL, v = {0};
    if ((rc = in_const(c, 0, &s)) < 0)
        return rc;
    if (s->isf || s->crank != 1 || s->numel > RT_MAX_DIMS)
        return fail(c, RT_EINVAL, "shape must be a 1-D integer constant");
    int64_t n = 1;
    int batch = 0;
    for (int q = 0; q < s->numel; q++) {
        if (s->i[q] == SYM_B) {
            batch = 1;
            continue;
        }
        if (s->i[q] < 0 || __builtin_mul_overflow(n, s->i[q], &n) || n > (1 << 24))
            return fail(c, RT_EINVAL, "shape must be a small non-negative size");
    }
    const Onnx__AttributeProto *a = attr(c->node, "value");
    v.isf = 1;
    float zero = 0;
    v.f = &zero;
    if (a) {
        if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR || !a->t)
            return fail(c, RT_EINVAL, "value must be a tensor");
        if ((rc = tensor_load(c, a->t, &v)) < 0)
            return rc;
        if (v.numel != 1)
            return fail(c, RT_EINVAL, "value must hold one element");
    }
    if (batch) {
        /* zeros shaped by the batch: torch's initial RNN states */
        if (v.isf ? v.f[0] != 0 : v.i[0] != 0)
            return fail(c, RT_EINVAL,
                        "a shape that holds the batch size is folded only for "
                        "zeros (an RNN's initial state)");
        if ((rc = out_slot(c, 0, &y)) < 0)
            return rc;
        y->kind = V_ZERO;
        return 0;
    }
    if ((rc = def_const(c, 0, v.isf, (int)s->numel, s->i, &y)) < 0)
        return rc;
    for (int64_t q = 0; q < y->numel; q++)
        const_copy(y, q, &v, 0);
    return 0;
}

/* ConvTranspose(x, W (C, OC/group, kh, kw), b?): pads, output_padding, or
 * output_shape (or auto_pad SAME_*) turned into pads as ONNX computes them;
 * group: the engine's grouped ConvTranspose */
static int op_convtranspose(ictx *c)
{
    int rc, n;
    oval *x = NULL, *w = NULL, *b = NULL, *y = NULL;
    if ((rc = in_act(c, 0, &x)) < 0 || (rc = need_nhwc(c, x)) < 0 || (rc = in_const(c, 1, &w)) < 0)
        return rc;
    b = in_opt(c, 2, &rc);
    if (rc < 0)
        return rc;
    if (b && b->kind != V_CONST)
        return fail(c, RT_EINVAL, "bias must be an initializer");
    int64_t group;
    char ap[32];
    if ((rc = a_int(c, "group", 1, &group)) < 0 ||
        (rc = a_str(c, "auto_pad", "NOTSET", ap, sizeof ap)) < 0)
        return rc;
    const int same = !strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER");
    if (strcmp(ap, "NOTSET") && strcmp(ap, "VALID") && !same)
        return fail(c, RT_EINVAL, "auto_pad '%s' is not supported", ap);
    if (w->crank != 4)
        return fail(c, RT_ESHAPE, "weight '%.64s' must be 4-D", w->name);
    const int64_t C = x->d[1], OCg = w->cd[1];
    if (group < 1 || C % group)
        return fail(c, RT_EINVAL, "group %lld must divide the %lld input channels",
                    (long long)group, (long long)C);
    const int64_t OC = OCg * group, Cg = C / group;
    if (w->cd[0] != C)
        return fail(c, RT_ESHAPE, "weight '%.64s' expects %lld input channels, input has %lld",
                    w->name, (long long)w->cd[0], (long long)C);
    win wn;
    const int64_t kdef[2] = {w->cd[2], w->cd[3]};
    if ((rc = window(c, x, kdef, &wn)) < 0)
        return rc;
    if (wn.k[0] != w->cd[2] || wn.k[1] != w->cd[3])
        return fail(c, RT_ESHAPE, "kernel_shape does not match the weight");
    int64_t op[2] = {0, 0}, v[4], os[2] = {0, 0};
    if ((rc = a_ints(c, "output_padding", v, 2, &n)) < 0)
        return rc;
    if (n == 2)
        op[0] = v[0], op[1] = v[1];
    else if (n >= 0)
        return fail(c, RT_EINVAL, "output_padding must have 2 values");
    if ((rc = a_ints(c, "output_shape", v, 4, &n)) < 0)
        return rc;
    if (n == 2 || n == 4)
        os[0] = v[n - 2], os[1] = v[n - 1];
    else if (n >= 0)
        return fail(c, RT_EINVAL, "output_shape must have 2 values (H, W)");
    if (n < 0 && same)
        os[0] = x->d[2] * wn.s[0], os[1] = x->d[3] * wn.s[1];
    if (os[0]) {
        /* ONNX: total = stride (in - 1) + output_padding + (k - 1) d + 1 -
         * output_shape; SAME_UPPER puts the odd cell at the end, else the
         * start; a negative total is more output padding */
        for (int q = 0; q < 2; q++) {
            if (os[q] < 1)
                return fail(c, RT_EINVAL, "output_shape must be positive");
            const int64_t tot =
                wn.s[q] * (x->d[2 + q] - 1) + op[q] + (wn.k[q] - 1) * wn.dl[q] + 1 - os[q];
            if (tot < 0) {
                op[q] -= tot;
                wn.pads[q] = wn.pads[q + 2] = 0;
            } else if (!strcmp(ap, "SAME_UPPER")) {
                wn.pads[q] = tot / 2, wn.pads[q + 2] = tot - tot / 2;
            } else {
                wn.pads[q] = tot - tot / 2, wn.pads[q + 2] = tot / 2;
            }
        }
    }
    for (int q = 0; q < 2; q++)
        if (op[q] < 0 || op[q] >= wn.s[q])
            return fail(c, RT_EINVAL,
                        "output_padding %lld (as output_shape asks) must be in "
                        "0..stride-1",
                        (long long)op[q]);
    int64_t d[4] = {-1, OC, 0, 0};
    for (int q = 0; q < 2; q++) {
        d[2 + q] = (x->d[2 + q] - 1) * wn.s[q] + (wn.k[q] - 1) * wn.dl[q] + 1 - wn.pads[q] -
                   wn.pads[q + 2] + op[q];
        if (d[2 + q] < 1)
            return fail(c, RT_ESHAPE, "the output would be empty");
    }
    const char *in[3] = {x->en};
    /* (C, OC/g, kh, kw) viewed (g, C/g, OC/g, kh, kw) -> (kh, kw, OC, C/g) */
    const int64_t vd[5] = {group, Cg, OCg, w->cd[2], w->cd[3]};
    const int perm[5] = {3, 4, 0, 2, 1};
    const int64_t od[4] = {w->cd[2], w->cd[3], OC, Cg};
    if ((rc = mk_param(c, w, 5, vd, perm, 4, od, 1, &in[1])) < 0)
        return rc;
    if (b) {
        if (b->numel != OC)
            return fail(c, RT_ESHAPE, "bias must have %lld values", (long long)OC);
        if ((rc = mk_param(c, b, 1, &OC, P_ID, 1, &OC, 1, &in[2])) < 0)
            return rc;
    }
    if ((rc = def_act(c, &y, L_NHWC, 4, d)) < 0)
        return rc;
    rt_attr a[6];
    int64_t store[10];
    int na = win_attrs(&wn, 1, a, store);
    a[na++] = (rt_attr){.name = "output_padding", .kind = RT_ATTR_INTS, .n = 2, .ints = op};
    if (group != 1)
        a[na++] = (rt_attr){.name = "group", .kind = RT_ATTR_INT, .i = group};
    return add_node(c, y->en, "ConvTranspose", b ? 3 : 2, in, na, a);
}

/* LayerNormalization (opset 17) over the last axis of a value that is not
 * NCHW */
static int op_layernorm(ictx *c)
{
    int rc, ax = 0;
    oval *x = NULL, *g = NULL, *b = NULL, *y = NULL;
    if ((rc = in_act(c, 0, &x)) < 0 || (rc = in_const(c, 1, &g)) < 0)
        return rc;
    b = in_opt(c, 2, &rc);
    if (rc < 0)
        return rc;
    if (b && b->kind != V_CONST)
        return fail(c, RT_EINVAL, "B must be an initializer");
    int64_t a;
    double eps;
    if ((rc = a_int(c, "axis", -1, &a)) < 0 || (rc = a_float(c, "epsilon", 1e-5, &eps)) < 0)
        return rc;
    if ((rc = norm_axis(c, a, x->rank, &ax)) < 0)
        return rc;
    if (ax != x->rank - 1 || x->layout != L_PLAIN)
        return fail(c, RT_EINVAL,
                    "only normalization over the last axis of a non-NCHW value "
                    "is supported");
    if (c->node->n_output > 1)
        for (size_t q = 1; q < c->node->n_output; q++)
            if (c->node->output[q] && *c->node->output[q])
                return fail(c, RT_EINVAL, "the Mean and InvStdDev outputs are not supported");
    const int64_t C = x->d[x->rank - 1];
    const char *in[3] = {x->en};
    if (g->numel != C || (b && b->numel != C))
        return fail(c, RT_ESHAPE, "Scale and B must have %lld values", (long long)C);
    if ((rc = mk_param(c, g, 1, &C, P_ID, 1, &C, 1, &in[1])) < 0)
        return rc;
    if (b && (rc = mk_param(c, b, 1, &C, P_ID, 1, &C, 1, &in[2])) < 0)
        return rc;
    if ((rc = def_act(c, &y, x->layout, x->rank, x->d)) < 0)
        return rc;
    rt_attr at[2] = {{.name = "epsilon", .kind = RT_ATTR_FLOAT, .f = eps},
                     {.name = "center", .kind = RT_ATTR_INT, .i = b != NULL}};
    return add_node(c, y->en, "LayerNormalization", b ? 3 : 2, in, 2, at);
}

/* engine position of ONNX axis a of a value of this layout */
static int epos(const oval *v, int a) { return v->layout == L_NHWC ? nhwc_axis(a) : a; }

/* Pad (opset 11+: pads and constant_value as constant inputs), mode
 * constant */
static int op_pad(ictx *c)
{
    int rc;
    oval *x = NULL, *pd = NULL, *y = NULL;
    char mode[16];
    if ((rc = in_act(c, 0, &x)) < 0 || (rc = a_str(c, "mode", "constant", mode, sizeof mode)) < 0)
        return rc;
    if (strcmp(mode, "constant") != 0)
        return fail(c, RT_EINVAL, "mode '%s': only 'constant' is supported", mode);
    if (x->layout == L_FLAT)
        return fail(c, RT_EINVAL, "padding a flattened NCHW value");
    const int r = x->rank;
    int64_t p[2 * RT_MAX_DIMS];
    if (c->opset < 11) {
        int n;
        if ((rc = a_ints(c, "pads", p, 2 * RT_MAX_DIMS, &n)) < 0)
            return rc;
        if (n != 2 * r)
            return fail(c, RT_EINVAL, "pads needs %d values", 2 * r);
    } else {
        if ((rc = in_const(c, 1, &pd)) < 0)
            return rc;
        if (pd->isf || pd->numel != 2 * r)
            return fail(c, RT_EINVAL, "pads must be %d integers", 2 * r);
        for (int q = 0; q < 2 * r; q++)
            p[q] = pd->i[q];
    }
    double value = 0;
    oval *cv = in_opt(c, 2, &rc);
    if (rc < 0)
        return rc;
    if (cv) {
        if (cv->kind != V_CONST || cv->numel != 1)
            return fail(c, RT_EINVAL, "constant_value must be a constant scalar");
        value = cv->isf ? cv->f[0] : (double)cv->i[0];
    }
    if (p[0] || p[r])
        return fail(c, RT_EINVAL, "the batch dimension cannot be padded");
    for (int q = 0; q < 2 * r; q++)
        if (p[q] < -RT__MAX_NUMEL || p[q] > RT__MAX_NUMEL)
            return fail(c, RT_EINVAL, "pads[%d] = %lld is out of range", q, (long long)p[q]);
    int64_t ep[2 * RT_MAX_DIMS], d[RT_MAX_DIMS];
    for (int q = 0; q < r; q++) {
        ep[epos(x, q)] = p[q];
        ep[r + epos(x, q)] = p[r + q];
        d[q] = x->d[q] + p[q] + p[r + q];
        if (q && d[q] < 1)
            return fail(c, RT_ESHAPE, "the padded dim %d would be empty", q);
    }
    if ((rc = def_act(c, &y, x->layout, r, d)) < 0)
        return rc;
    const char *in[1] = {x->en};
    rt_attr a[2] = {{.name = "pads", .kind = RT_ATTR_INTS, .n = 2 * r, .ints = ep},
                    {.name = "value", .kind = RT_ATTR_FLOAT, .f = value}};
    return add_node(c, y->en, "Pad", 1, in, 2, a);
}

static int rnn_transpose(ictx *c, oval *x, int n, const int64_t *p);

/* Transpose: the output takes whichever layout makes the engine's
 * permutation the identity when one does (x.permute(0, 2, 3, 1) of an NCHW
 * value is then free); otherwise an engine Transpose */
static int op_transpose(ictx *c)
{
    int rc, n;
    c->rnn_ok = 1;
    oval *x = in_opt(c, 0, &rc), *y = NULL;
    c->rnn_ok = 0;
    if (rc < 0)
        return rc;
    if (x && x->kind == V_CONST)
        return fold_transpose(c, x);
    c->rnn_ok = 1;
    rc = in_act(c, 0, &x);
    c->rnn_ok = 0;
    if (rc < 0)
        return rc;
    if (x->layout == L_FLAT)
        return fail(c, RT_EINVAL, "transposing a flattened NCHW value");
    const int r = x->rank;
    int64_t p[RT_MAX_DIMS];
    if ((rc = a_ints(c, "perm", p, RT_MAX_DIMS, &n)) < 0)
        return rc;
    if ((rc = rnn_transpose(c, x, n, p)) != 0)
        return rc < 0 ? RT_EINVAL : 0;
    if (n < 0) {
        n = r;
        for (int q = 0; q < r; q++)
            p[q] = r - 1 - q;
    }
    int seen[RT_MAX_DIMS] = {0};
    if (n != r)
        return fail(c, RT_EINVAL, "perm has %d entries for rank %d", n, r);
    for (int q = 0; q < r; q++)
        if (p[q] < 0 || p[q] >= r || seen[p[q]]++)
            return fail(c, RT_EINVAL, "perm is not a permutation");
    if (p[0] != 0)
        return fail(c, RT_EINVAL, "the batch dimension must stay first");
    int64_t d[RT_MAX_DIMS];
    for (int q = 0; q < r; q++)
        d[q] = x->d[p[q]];
    oval probe = {.rank = r};
    int64_t eperm[RT_MAX_DIMS];
    int best = -1;
    for (int lay = 0; lay < 2 && best < 0; lay++) {
        const int L = lay == 0 ? L_PLAIN : L_NHWC;
        if (L == L_NHWC && r != 4)
            continue;
        probe.layout = L;
        int id = 1;
        for (int a = 0; a < r; a++)
            id &= epos(x, (int)p[a]) == epos(&probe, a);
        if (id)
            best = L;
    }
    const int L = best >= 0 ? best : r == 4 ? L_NHWC : L_PLAIN;
    if ((rc = def_act(c, &y, L, r, d)) < 0)
        return rc;
    if (best >= 0) { /* the engine's data is already in this order */
        y->en = x->en;
        return 0;
    }
    probe.layout = L;
    /* engine output axis epos(out, a) holds ONNX input axis p[a] */
    for (int a = 0; a < r; a++)
        eperm[epos(&probe, a)] = epos(x, (int)p[a]);
    const char *in[1] = {x->en};
    rt_attr at = {.name = "perm", .kind = RT_ATTR_INTS, .n = r, .ints = eperm};
    return add_node(c, y->en, "Transpose", 1, in, 1, &at);
}

static int op_reduce(ictx *c, const char *op)
{
    int rc, n = -1;
    oval *x = NULL, *y = NULL;
    if ((rc = in_act(c, 0, &x)) < 0)
        return rc;
    if (x->layout == L_FLAT)
        return fail(c, RT_EINVAL, "reducing a flattened NCHW value");
    int64_t ax[RT_MAX_DIMS], keep, nowhere;
    if ((rc = a_int(c, "keepdims", 1, &keep)) < 0 ||
        (rc = a_int(c, "noop_with_empty_axes", 0, &nowhere)) < 0)
        return rc;
    if ((rc = reduce_axes(c, ax, &n)) < 0)
        return rc;
    if (n == 0 && nowhere)
        return fail(c, RT_EINVAL, "noop_with_empty_axes is not supported");
    const int r = x->rank;
    int red[RT_MAX_DIMS] = {0};
    if (n <= 0) {
        for (int q = 0; q < r; q++)
            red[q] = 1;
    } else {
        for (int q = 0; q < n; q++) {
            int a = 0;
            if ((rc = norm_axis(c, ax[q], r, &a)) < 0)
                return rc;
            red[a] = 1;
        }
    }
    if (red[0])
        return fail(c, RT_EINVAL, "the batch dimension cannot be reduced");
    int64_t d[RT_MAX_DIMS], eax[RT_MAX_DIMS];
    int nr = 0, ne = 0, cdim = -1;
    for (int q = 0; q < r; q++) {
        if (red[q])
            eax[ne++] = epos(x, q);
        if (!red[q] || keep)
            d[nr++] = red[q] ? 1 : x->d[q];
    }
    int L = x->layout;
    if (L == L_NHWC && !keep) {
        /* what is left keeps the engine's order: ONNX's too unless the
         * channel stays with a spatial dim */
        int left = 0;
        for (int q = 1; q < r; q++)
            left += !red[q];
        cdim = !red[1];
        if (cdim && left > 1)
            return fail(c, RT_EINVAL,
                        "reducing an NCHW value to (N, C, spatial) without "
                        "keepdims is not supported");
        L = L_PLAIN;
    }
    if ((rc = def_act(c, &y, L, nr, d)) < 0)
        return rc;
    const char *in[1] = {x->en};
    rt_attr at[2] = {{.name = "axes", .kind = RT_ATTR_INTS, .n = ne, .ints = eax},
                     {.name = "keepdims", .kind = RT_ATTR_INT, .i = keep != 0}};
    return add_node(c, y->en, op, 1, in, 2, at);
}

static int op_reducemean(ictx *c)
{
    int rc = layernorm_pattern(c);
    if (rc)
        return rc < 0 ? rc : 0;
    return op_reduce(c, "ReduceMean");
}
static int op_reducesum(ictx *c) { return op_reduce(c, "ReduceSum"); }
static int op_reducemax(ictx *c) { return op_reduce(c, "ReduceMax"); }
static int op_reducemin(ictx *c) { return op_reduce(c, "ReduceMin"); }
static int op_reduceprod(ictx *c) { return op_reduce(c, "ReduceProd"); }

/* Resize of an NCHW value by integer factors over H and W: the engine's
 * Upsample. What torch exports for nn.Upsample / F.interpolate: nearest
 * (asymmetric coordinates, floor; or half-pixel coordinates with a
 * rounding mode, the same cells for integer factors) and bilinear with
 * align_corners=False (half_pixel or pytorch_half_pixel; the same for
 * outputs larger than 1). */
static int op_resize(ictx *c)
{
    int rc, n;
    oval *x = NULL, *y = NULL;
    if ((rc = in_act(c, 0, &x)) < 0 || (rc = need_nhwc(c, x)) < 0)
        return rc;
    char mode[24], ctm[32], nm[24], kar[24];
    int64_t excl, anti;
    if ((rc = a_str(c, "mode", "nearest", mode, sizeof mode)) < 0 ||
        (rc = a_str(c, "coordinate_transformation_mode", "half_pixel", ctm, sizeof ctm)) < 0 ||
        (rc = a_str(c, "nearest_mode", "round_prefer_floor", nm, sizeof nm)) < 0 ||
        (rc = a_str(c, "keep_aspect_ratio_policy", "stretch", kar, sizeof kar)) < 0 ||
        (rc = a_int(c, "exclude_outside", 0, &excl)) < 0 ||
        (rc = a_int(c, "antialias", 0, &anti)) < 0)
        return rc;
    const int half = !strcmp(ctm, "half_pixel") || !strcmp(ctm, "pytorch_half_pixel");
    const int linear = !strcmp(mode, "linear");
    if (!linear && strcmp(mode, "nearest"))
        return fail(c, RT_EINVAL, "mode '%s': nearest and linear are supported", mode);
    if (linear && !half)
        return fail(c, RT_EINVAL,
                    "linear with coordinate_transformation_mode '%s': only "
                    "half_pixel (align_corners=False) is supported",
                    ctm);
    if (!linear && !(half && !strncmp(nm, "round_prefer_", 13)) &&
        !(!strcmp(ctm, "asymmetric") && !strcmp(nm, "floor")))
        return fail(c, RT_EINVAL,
                    "nearest with coordinate_transformation_mode '%s' and "
                    "nearest_mode '%s' is not supported (asymmetric with floor is)",
                    ctm, nm);
    if (excl)
        return fail(c, RT_EINVAL, "exclude_outside=1 is not supported");
    if (strcmp(kar, "stretch"))
        return fail(c, RT_EINVAL, "keep_aspect_ratio_policy '%s' is not supported", kar);
    (void)anti; /* antialiasing changes nothing when scaling up */
    /* axes (opset 18): the factors given for these axes only */
    int64_t ax[4] = {0, 1, 2, 3};
    if ((rc = a_ints(c, "axes", ax, 4, &n)) < 0)
        return rc;
    const int na = n < 0 ? 4 : n;
    for (int q = 0; q < na; q++)
        if (ax[q] < -4 || ax[q] > 3)
            return fail(c, RT_EINVAL, "axes[%d] is out of range", q);
    oval *sc = NULL, *sz = NULL;
    sc = in_opt(c, 2, &rc);
    if (rc < 0)
        return rc;
    sz = in_opt(c, 3, &rc);
    if (rc < 0)
        return rc;
    if (sc && sc->numel == 0)
        sc = NULL; /* torch writes an empty scales beside sizes */
    if ((sc && sz) || (!sc && !sz))
        return fail(c, RT_EINVAL, "give either scales or sizes");
    oval *k = sc ? sc : sz;
    if (k->kind != V_CONST || k->numel != na || (sc && !sc->isf) || (sz && sz->isf))
        return fail(c, RT_EINVAL, "%s must be a constant of %d %s", sc ? "scales" : "sizes", na,
                    sc ? "floats" : "integers");
    int64_t f[4] = {1, 1, 1, 1};
    for (int q = 0; q < na; q++) {
        const int a = (int)(ax[q] < 0 ? ax[q] + 4 : ax[q]);
        if (sc) {
            const float v = sc->f[q];
            if (!(v >= 1 && v <= RT__MAX_WINDOW && v == floorf(v)))
                return fail(c, RT_EINVAL,
                            "scale %g on axis %d: only integer factors >= 1 "
                            "are supported",
                            (double)v, a);
            f[a] = (int64_t)v;
        } else if (a == 0) {
            if (sz->i[q] != SYM_B)
                f[0] = 0; /* the batch: kept, as Shape gives it */
        } else {
            const int64_t v = sz->i[q], in = x->d[a];
            if (v < in || v % in || v / in > RT__MAX_WINDOW)
                return fail(c, RT_EINVAL,
                            "size %lld on axis %d is not an integer multiple "
                            "of %lld",
                            (long long)v, a, (long long)in);
            f[a] = v / in;
        }
    }
    if (f[0] != 1 || f[1] != 1)
        return fail(c, RT_EINVAL, "only H and W are resized (not the batch or channels)");
    const int64_t d[4] = {-1, x->d[1], x->d[2] * f[2], x->d[3] * f[3]};
    if ((rc = def_act(c, &y, L_NHWC, 4, d)) < 0)
        return rc;
    if (f[2] == 1 && f[3] == 1) {
        y->en = x->en;
        return 0;
    }
    const int64_t s2[2] = {f[2], f[3]};
    const char *in[1] = {x->en};
    rt_attr at[2] = {{.name = "scales", .kind = RT_ATTR_INTS, .n = 2, .ints = s2},
                     {.name = "mode", .kind = RT_ATTR_STR, .s = linear ? "bilinear" : "nearest"}};
    return add_node(c, y->en, "Upsample", 1, in, 2, at);
}

/* ------------------------------------------------------------ LSTM and GRU */

/* torch's batch_first around an RNN, at no cost: x.transpose(0, 1) of a
 * (B, T, F) value and back; Y (T, D, B, H) to (T, B, D, H) and back.
 * Returns 1 when it took the node. */
static int rnn_transpose(ictx *c, oval *x, int n, const int64_t *p)
{
    const int sw = n == 3 && p[0] == 1 && p[1] == 0 && p[2] == 2;
    const int mid = n == 4 && p[0] == 0 && p[1] == 2 && p[2] == 1 && p[3] == 3;
    if (x->layout == L_PLAIN && x->rank == 3 && sw) {
        const int64_t d[3] = {x->d[1], -1, x->d[2]};
        return def_rnn(c, 0, RV_TBF, 3, d, x->en) < 0 ? -1 : 1;
    }
    if (x->layout != L_RNN)
        return 0;
    if (x->rv == RV_TBF && sw) {
        oval *y = NULL;
        const int64_t d[3] = {-1, x->d[0], x->d[2]};
        if (def_act(c, &y, L_PLAIN, 3, d) < 0)
            return -1;
        y->en = x->en;
        return 1;
    }
    if ((x->rv == RV_TDBH || x->rv == RV_TBDH) && mid) {
        const int64_t d[4] = {x->d[0], x->d[2], x->d[1], x->d[3]};
        return def_rnn(c, 0, x->rv == RV_TDBH ? RV_TBDH : RV_TDBH, 4, d, x->en) < 0 ? -1 : 1;
    }
    fail(c, RT_EINVAL,
         "transposing the sequence-major '%.64s' other than back to "
         "batch-first (perm 1,0,2) is not supported",
         x->name);
    return -1;
}

/* an activation function of ONNX's RNNs as the engine's */
static const char *rnn_act(const char *s, size_t len)
{
    static const char *const on[] = {"Sigmoid", "Tanh", "Relu"};
    static const char *const en[] = {"sigmoid", "tanh", "relu"};
    for (int k = 0; k < 3; k++)
        if (strlen(on[k]) == len && !strncasecmp(s, on[k], len))
            return en[k];
    return NULL;
}

/* zeros, as an initial state must be */
static int rnn_zero_state(ictx *c, size_t k, const char *what)
{
    int rc;
    c->zero_ok = 1;
    oval *h = in_opt(c, k, &rc);
    c->zero_ok = 0;
    if (rc < 0 || !h || h->kind == V_ZERO)
        return rc;
    int zero = h->kind == V_CONST && h->isf;
    for (int64_t q = 0; zero && q < h->numel; q++)
        zero = h->f[q] == 0;
    return zero ? 0
                : fail(c, RT_EINVAL,
                       "%s must be zeros (the engine's RNNs start from "
                       "zero states)",
                       what);
}

/* ONNX LSTM (gru 0) and GRU (1) over a sequence-major input (torch's
 * batch_first=True transposes to it): each direction one engine LSTM/GRU
 * (the reverse one with go_backwards and reverse_output, as Keras'
 * Bidirectional), a Concat for both. Weights: ONNX's gate order (LSTM
 * i,o,f,c; GRU z,r,h) gathered into the engine's (LSTM i,f,c,o; GRU z,r,h)
 * with the two biases kept apart, as PyTorch trains them. */
static int op_rnn_any(ictx *c, int gru)
{
    int rc;
    oval *x = NULL, *W = NULL, *R = NULL, *B = NULL;
    c->rnn_ok = 1;
    rc = in_act(c, 0, &x);
    c->rnn_ok = 0;
    if (rc < 0)
        return rc;
    if (x->layout != L_RNN || x->rv != RV_TBF)
        return fail(c, RT_EINVAL,
                    "input X must be (seq, batch, features) from a batch-first "
                    "input (torch's batch_first=True writes that Transpose); a model input "
                    "that is sequence-major is not supported");
    if ((rc = in_const(c, 1, &W)) < 0 || (rc = in_const(c, 2, &R)) < 0)
        return rc;
    B = in_opt(c, 3, &rc);
    if (rc < 0)
        return rc;
    if (B && B->kind != V_CONST)
        return fail(c, RT_EINVAL, "B must be an initializer");
    if (c->node->n_input > 4 && c->node->input[4] && *c->node->input[4])
        return fail(c, RT_EINVAL,
                    "attribute/input sequence_lens is not supported (every "
                    "sequence has the full length)");
    if ((rc = rnn_zero_state(c, 5, "initial_h")) < 0)
        return rc;
    if (!gru && (rc = rnn_zero_state(c, 6, "initial_c")) < 0)
        return rc;
    if (!gru && c->node->n_input > 7 && c->node->input[7] && *c->node->input[7])
        return fail(c, RT_EINVAL, "input P (peepholes) is not supported");
    int64_t hs, lay, inf = 0, lbr = 1;
    char dir[24];
    if ((rc = a_int(c, "hidden_size", 0, &hs)) < 0 || (rc = a_int(c, "layout", 0, &lay)) < 0 ||
        (rc = a_str(c, "direction", "forward", dir, sizeof dir)) < 0 ||
        (!gru && (rc = a_int(c, "input_forget", 0, &inf)) < 0) ||
        (gru && (rc = a_int(c, "linear_before_reset", 0, &lbr)) < 0))
        return rc;
    if (lay)
        return fail(c, RT_EINVAL, "attribute layout=1 is not supported (torch writes 0)");
    if (inf)
        return fail(c, RT_EINVAL, "attribute input_forget=1 is not supported");
    if (!lbr)
        return fail(c, RT_EINVAL,
                    "attribute linear_before_reset=0 is not supported (PyTorch's "
                    "GRU is 1)");
    if (attr(c->node, "clip"))
        return fail(c, RT_EINVAL, "attribute clip is not supported");
    if (attr(c->node, "activation_alpha") || attr(c->node, "activation_beta"))
        return fail(c, RT_EINVAL, "attributes activation_alpha/beta are not supported");
    const int bi = !strcmp(dir, "bidirectional"), rev = !strcmp(dir, "reverse");
    if (!bi && !rev && strcmp(dir, "forward"))
        return fail(c, RT_EINVAL,
                    "attribute direction '%s' is not forward, reverse or "
                    "bidirectional",
                    dir);
    const int64_t D = bi ? 2 : 1, G = gru ? 3 : 4, T = x->d[0], F = x->d[2];
    if (hs < 1 && R->crank == 3)
        hs = R->cd[2];
    const int64_t H = hs, GH = G * H;
    if (H < 1 || W->crank != 3 || W->cd[0] != D || W->cd[1] != GH || W->cd[2] != F)
        return fail(c, RT_ESHAPE, "W '%.64s' must be (%lld, %lld, %lld)", W->name, (long long)D,
                    (long long)GH, (long long)F);
    if (R->crank != 3 || R->cd[0] != D || R->cd[1] != GH || R->cd[2] != H)
        return fail(c, RT_ESHAPE, "R '%.64s' must be (%lld, %lld, %lld)", R->name, (long long)D,
                    (long long)GH, (long long)H);
    if (B && (B->crank != 2 || B->cd[0] != D || B->cd[1] != 2 * GH))
        return fail(c, RT_ESHAPE, "B '%.64s' must be (%lld, %lld)", B->name, (long long)D,
                    (long long)(2 * GH));
    /* activations: LSTM f, g, h (g and h one function in the engine), GRU
     * f, g; per direction */
    const char *ract[2] = {"sigmoid", "sigmoid"}, *act[2] = {"tanh", "tanh"};
    const Onnx__AttributeProto *aa = attr(c->node, "activations");
    if (aa) {
        const size_t per = gru ? 2 : 3;
        if (aa->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS ||
            aa->n_strings != per * (size_t)D)
            return fail(c, RT_EINVAL, "attribute activations must be %zu strings", per * (size_t)D);
        for (int64_t dd = 0; dd < D; dd++) {
            const ProtobufCBinaryData *a = &aa->strings[dd * (int64_t)per];
            const char *f = rnn_act((const char *)a[0].data, a[0].len);
            const char *g = rnn_act((const char *)a[1].data, a[1].len);
            const char *h = gru ? g : rnn_act((const char *)a[2].data, a[2].len);
            if (!f || !g || !h || strcmp(g, h))
                return fail(c, RT_EINVAL,
                            "attribute activations: Sigmoid, Tanh and Relu are "
                            "supported%s",
                            gru ? "" : ", the last two the same function");
            ract[dd] = f;
            act[dd] = g;
        }
    }
    for (size_t q = 1; q < c->node->n_output; q++) {
        const oval *o =
            c->node->output[q] && *c->node->output[q] ? lookup(c, c->node->output[q], 0) : NULL;
        if (o && o->uses)
            return fail(c, RT_EINVAL,
                        "output %s (the last %s) is not supported; take the "
                        "last step of Y",
                        q == 1 ? "Y_h" : "Y_c", q == 1 ? "state" : "cell");
    }
    if (c->node->n_output < 1 || !c->node->output[0] || !*c->node->output[0])
        return fail(c, RT_EINVAL, "output Y is needed");
    /* engine gate j is ONNX gate map[j] */
    static const int MAP_LSTM[4] = {0, 2, 3, 1}, MAP_GRU[3] = {0, 1, 2};
    const int *map = gru ? MAP_GRU : MAP_LSTM;
    const char *yname = c->node->output[0];
    const size_t yl = strlen(yname) + 8;
    const char *outs[2];
    int64_t *ix = malloc((size_t)(F > H ? F : H) * (size_t)GH * sizeof(int64_t) +
                         2 * sizeof(int64_t) * (size_t)GH);
    if (!ix)
        return OOM(c);
    rc = 0;
    for (int64_t dd = 0; dd < D && rc == 0; dd++) {
        const char *in[4] = {x->en};
        const int64_t kd[2] = {F, GH}, rd[2] = {H, GH}, bd[2] = {2, GH};
        for (int64_t f = 0; f < F; f++)
            for (int64_t j = 0; j < G; j++)
                for (int64_t u = 0; u < H; u++)
                    ix[f * GH + j * H + u] = (dd * GH + map[j] * H + u) * F + f;
        if ((rc = mk_param_map(c, W, ix, F * GH, 2, kd, 1, &in[1])) < 0)
            break;
        for (int64_t h = 0; h < H; h++)
            for (int64_t j = 0; j < G; j++)
                for (int64_t u = 0; u < H; u++)
                    ix[h * GH + j * H + u] = (dd * GH + map[j] * H + u) * H + h;
        if ((rc = mk_param_map(c, R, ix, H * GH, 2, rd, 1, &in[2])) < 0)
            break;
        if (B) {
            for (int64_t r = 0; r < 2; r++)
                for (int64_t j = 0; j < G; j++)
                    for (int64_t u = 0; u < H; u++)
                        ix[r * GH + j * H + u] = dd * 2 * GH + r * GH + map[j] * H + u;
            if ((rc = mk_param_map(c, B, ix, 2 * GH, 2, bd, 1, &in[3])) < 0)
                break;
        }
        char *nm = alloc(c, yl);
        if (!nm) {
            rc = OOM(c);
            break;
        }
        if (D == 1)
            snprintf(nm, yl, "%s", yname);
        else
            snprintf(nm, yl, "%s#%s", yname, dd ? "bwd" : "fwd");
        const int back = rev || dd == 1;
        rt_attr at[6] = {
            {.name = "return_sequences", .kind = RT_ATTR_INT, .i = 1},
            {.name = "go_backwards", .kind = RT_ATTR_INT, .i = back},
            {.name = "reverse_output", .kind = RT_ATTR_INT, .i = back},
            {.name = "activation", .kind = RT_ATTR_STR, .s = act[dd]},
            {.name = "recurrent_activation", .kind = RT_ATTR_STR, .s = ract[dd]},
            {.name = "reset_after", .kind = RT_ATTR_INT, .i = 1},
        };
        rc = add_node(c, nm, gru ? "GRU" : "LSTM", B ? 4 : 3, in, gru ? 6 : 5, at);
        outs[dd] = nm;
    }
    free(ix);
    if (rc < 0)
        return rc;
    if (D == 2) {
        rt_attr at = {.name = "axis", .kind = RT_ATTR_INT, .i = 2};
        if ((rc = add_node(c, yname, "Concat", 2, outs, 1, &at)) < 0)
            return rc;
    }
    const int64_t d[4] = {T, D, -1, H};
    return def_rnn(c, 0, RV_TDBH, 4, d, yname);
}

static int op_lstm(ictx *c) { return op_rnn_any(c, 0); }
static int op_gru(ictx *c) { return op_rnn_any(c, 1); }

/* ----------------------------------------------------------- the op table */

static const struct {
    const char *op;
    op_fn fn;
} ops[] = {
    {"Add", op_add},
    {"Sub", op_sub},
    {"Mul", op_mul},
    {"Gemm", op_gemm},
    {"MatMul", op_matmul},
    {"Relu", op_relu},
    {"Sigmoid", op_sigmoid},
    {"Tanh", op_tanh},
    {"Softmax", op_softmax},
    {"LogSoftmax", op_logsoftmax},
    {"Conv", op_conv},
    {"MaxPool", op_maxpool},
    {"AveragePool", op_avgpool},
    {"GlobalAveragePool", op_gap},
    {"BatchNormalization", op_batchnorm},
    {"Dropout", op_dropout},
    {"Flatten", op_flatten},
    {"Reshape", op_reshape},
    {"Squeeze", op_squeeze},
    {"Unsqueeze", op_unsqueeze},
    {"Concat", op_concat},
    {"Identity", op_identity},
    {"Constant", op_constant},
    {"Shape", op_shape},
    {"Gather", op_gather},
    {"Cast", op_cast},
    {"Slice", op_slice},
    {"Div", op_div},
    {"PRelu", op_prelu},
    {"Max", op_max},
    {"Min", op_min},
    {"Elu", op_elu},
    {"Selu", op_selu},
    {"LeakyRelu", op_leakyrelu},
    {"Erf", op_erf},
    {"ThresholdedRelu", op_thresholdedrelu},
    {"HardSigmoid", op_hardsigmoid},
    {"Softplus", op_softplus},
    {"Softsign", op_softsign},
    {"Exp", op_exp},
    {"Clip", op_clip},
    {"ConvTranspose", op_convtranspose},
    {"LayerNormalization", op_layernorm},
    {"Pad", op_pad},
    {"Transpose", op_transpose},
    {"ReduceMean", op_reducemean},
    {"ReduceSum", op_reducesum},
    {"ReduceMax", op_reducemax},
    {"ReduceMin", op_reducemin},
    {"ReduceProd", op_reduceprod},
    {"GlobalMaxPool", op_gmp},
    {"ConstantOfShape", op_constantofshape},
    {"Pow", op_pow},
    {"Sqrt", op_sqrt},
    {"Abs", op_abs},
    {"Log", op_log},
    {"Resize", op_resize},
    {"LSTM", op_lstm},
    {"GRU", op_gru},
};

static op_fn find_op(const Onnx__NodeProto *n)
{
    if (n->domain && *n->domain && strcmp(n->domain, "ai.onnx") != 0)
        return NULL;
    if (!n->op_type)
        return NULL;
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        if (strcmp(ops[k].op, n->op_type) == 0)
            return ops[k].fn;
    return NULL;
}

/* ---------------------------------------------------------------- import */

/* The decode's memory, bounded: protobuf-c turns a 2-byte empty message
 * into a struct of 100+ bytes (168 x for empty AttributeProtos), so the
 * bytes it may allocate are counted against RT_ONNX_DECODE_BUDGET(len).
 * Real models decode to 1-6 x their size. Frees are not subtracted: a
 * decode frees only when it fails. */
static void *pb_alloc(void *ud, size_t n)
{
    ictx *c = ud;
    if (n > c->pb_budget - c->pb_used) {
        c->pb_used = c->pb_budget + 1; /* over: the decode fails */
        return NULL;
    }
    c->pb_used += n;
    return malloc(n);
}
static void pb_free(void *ud, void *p)
{
    (void)ud;
    free(p);
}

static int model_opset(ictx *c)
{
    c->opset = -1;
    for (size_t k = 0; k < c->m->n_opset_import; k++) {
        const Onnx__OperatorSetIdProto *o = c->m->opset_import[k];
        if (!o->domain || !*o->domain || !strcmp(o->domain, "ai.onnx"))
            c->opset = o->has_version ? o->version : -1;
    }
    if (c->opset < 0)
        return fail(c, RT_EINVAL, "the model imports no opset of the default (ai.onnx) domain");
    if (c->opset < RT_ONNX_OPSET_MIN || c->opset > RT_ONNX_OPSET_MAX)
        return fail(c, RT_EINVAL, "opset %lld is outside the supported %d..%d", (long long)c->opset,
                    RT_ONNX_OPSET_MIN, RT_ONNX_OPSET_MAX);
    return 0;
}

/* Every unsupported operator at once. */
static int check_ops(ictx *c, const Onnx__GraphProto *gr)
{
    char list[720];
    size_t o = 0;
    int bad = 0;
    list[0] = 0;
    for (size_t k = 0; k < gr->n_node; k++) {
        const Onnx__NodeProto *n = gr->node[k];
        if (find_op(n))
            continue;
        bad++;
        if (o < sizeof list - 80) {
            const int dom = n->domain && *n->domain;
            int w = snprintf(list + o, sizeof list - o, "%s%.32s%s%.32s (node '%.48s')",
                             bad > 1 ? ", " : "", dom ? n->domain : "", dom ? "." : "",
                             n->op_type ? n->op_type : "?",
                             n->name && *n->name           ? n->name
                             : n->n_output && n->output[0] ? n->output[0]
                                                           : "?");
            o += w > 0 ? (size_t)w : 0;
        } else if (o < sizeof list - 8) {
            o += (size_t)snprintf(list + o, sizeof list - o, ", ...");
        }
    }
    if (!bad)
        return 0;
    return fail(c, RT_EUNKNOWN_OP, "%d unsupported operator%s at opset %lld: %s", bad,
                bad > 1 ? "s" : "", (long long)c->opset, list);
}

/* A data input of engine dims ed (batch first) named name: the graph's
 * own input, or (several inputs) its values sliced from the packed one
 * (Pad with negative pads) and reshaped */
static int add_data_input(ictx *c, const char *name, int nd, const int64_t *ed)
{
    if (!c->packed) {
        int rc = rt_graph_add_input(c->g, name, RT_F32, nd, ed);
        return rc < 0 ? fail(c, rc, "%s", rt_graph_errmsg(c->g)) : 0;
    }
    int64_t numel = 1;
    for (int k = 1; k < nd; k++)
        numel *= ed[k];
    const int64_t pads[4] = {0, -c->in_off, 0, -(c->in_total - c->in_off - numel)};
    const size_t n = strlen(name) + 8;
    char *sl = alloc(c, n);
    if (!sl)
        return OOM(c);
    snprintf(sl, n, "%s#slice", name);
    const char *src = "inputs";
    rt_attr a = {.name = "pads", .kind = RT_ATTR_INTS, .n = 4, .ints = pads};
    int rc = add_node(c, nd > 2 ? sl : name, "Pad", 1, &src, 1, &a);
    if (rc == 0 && nd > 2) {
        const char *in = sl;
        rt_attr sh = {.name = "shape", .kind = RT_ATTR_INTS, .n = nd - 1, .ints = ed + 1};
        rc = add_node(c, name, "Reshape", 1, &in, 1, &sh);
    }
    c->in_off += numel;
    return rc;
}

static int define_input(ictx *c, const Onnx__ValueInfoProto *vi)
{
    const char *nm = vi->name ? vi->name : "";
    const Onnx__TypeProto *t = vi->type;
    if (!t || t->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !t->tensor_type)
        return fail(c, RT_EINVAL, "input '%.64s' is not a tensor", nm);
    const Onnx__TypeProto__Tensor *tt = t->tensor_type;
    /* integer data are indices (nn.Embedding's): the engine reads them as
     * integral floats */
    const int idx = tt->elem_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 ||
                    tt->elem_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
    if (tt->elem_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT && !idx)
        return fail(c, RT_EDTYPE,
                    "input '%.64s' has element type %d; float (and int64 "
                    "indices) are supported",
                    nm, (int)tt->elem_type);
    if (!tt->shape || tt->shape->n_dim < 2 || tt->shape->n_dim > RT_MAX_DIMS)
        return fail(c, RT_ESHAPE, "input '%.64s' needs a shape of rank 2..%d (batch first)", nm,
                    RT_MAX_DIMS);
    oval *v = lookup(c, nm, 1);
    if (!v || v->kind != V_NONE)
        return fail(c, RT_EGRAPH, "input '%.64s' is defined twice", nm);
    v->kind = V_ACT;
    v->en = v->name;
    v->rank = (int)tt->shape->n_dim;
    int64_t numel = 1;
    for (size_t k = 0; k < tt->shape->n_dim; k++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[k];
        if (k == 0) {
            v->d[0] = -1;
            continue;
        }
        if (d->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
            return fail(c, RT_EINVAL,
                        "input '%.64s' dimension %zu is dynamic ('%.32s'); only "
                        "the batch dimension may be",
                        nm, k,
                        d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                                d->dim_param
                            ? d->dim_param
                            : "?");
        if (d->dim_value < 1 || d->dim_value > RT__MAX_NUMEL)
            return fail(c, RT_EINVAL, "input '%.64s' dimension %zu is %lld", nm, k,
                        (long long)d->dim_value);
        v->d[k] = d->dim_value;
        if (__builtin_mul_overflow(numel, d->dim_value, &numel) || numel > RT__MAX_NUMEL)
            return fail(c, RT_EINVAL, "input '%.64s' is too large per sample", nm);
    }
    v->idx = idx;
    if (idx && c->packed)
        return fail(c, RT_EDTYPE,
                    "input '%.64s' holds integer indices; a model with several "
                    "inputs takes float inputs only",
                    nm);
    v->layout = v->rank == 4 && !idx ? L_NHWC : L_PLAIN;
    int64_t ed[RT_MAX_DIMS + 1];
    ed[0] = RT_BATCH;
    int rc;
    if (v->layout == L_NHWC && !c->data_nhwc) {
        /* The data comes in the model's own NCHW. Its first op takes it to
         * the engine's NHWC, once per batch (a C of 1 is the same bytes
         * either way: a Reshape). */
        for (int k = 1; k < 4; k++)
            ed[k] = v->d[k];
        if ((rc = add_data_input(c, v->name, 4, ed)) < 0)
            return rc;
        const size_t n = strlen(v->name) + 10;
        char *tn = alloc(c, n);
        if (!tn)
            return OOM(c);
        snprintf(tn, n, "%s#to_nhwc", v->name);
        const char *in[1] = {v->name};
        static const int64_t perm[4] = {0, 2, 3, 1};
        const int64_t hwc[3] = {v->d[2], v->d[3], v->d[1]};
        const rt_attr a =
            v->d[1] == 1 ? (rt_attr){.name = "shape", .kind = RT_ATTR_INTS, .n = 3, .ints = hwc}
                         : (rt_attr){.name = "perm", .kind = RT_ATTR_INTS, .n = 4, .ints = perm};
        if ((rc = add_node(c, tn, v->d[1] == 1 ? "Reshape" : "Transpose", 1, in, 1, &a)) < 0)
            return rc;
        v->en = tn;
        c->nchw_input = 1;
        return 0;
    }
    int en = engine_dims(v, ed + 1);
    return add_data_input(c, v->en, en + 1, ed);
}

/* A data input's values per sample, for the packed input (several inputs:
 * every dim but the batch fixed) */
static int input_numel(ictx *c, const Onnx__ValueInfoProto *vi, int64_t *numel)
{
    const char *nm = vi->name ? vi->name : "";
    const Onnx__TypeProto *t = vi->type;
    *numel = 1;
    if (!t || t->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !t->tensor_type ||
        !t->tensor_type->shape || t->tensor_type->shape->n_dim < 2)
        return 0; /* define_input names the problem */
    const Onnx__TensorShapeProto *sh = t->tensor_type->shape;
    for (size_t k = 1; k < sh->n_dim; k++) {
        const Onnx__TensorShapeProto__Dimension *d = sh->dim[k];
        if (d->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ||
            d->dim_value < 1 || d->dim_value > RT__MAX_NUMEL)
            return 0;
        if (__builtin_mul_overflow(*numel, d->dim_value, numel) || *numel > RT__MAX_NUMEL)
            return fail(c, RT_EINVAL, "input '%.64s' is too large per sample", nm);
    }
    return 0;
}

static int output_to_nchw(ictx *c, const oval *v, const char **en);

/* The graph's outputs, each a head (rt_graph_set_outputs), named as the
 * ONNX outputs so that each output's loss and metrics carry its name */
static int set_heads(ictx *c, const Onnx__GraphProto *gr)
{
    const int n = (int)gr->n_output;
    if (n > RT_MAX_HEADS)
        return fail(c, RT_EINVAL,
                    "the graph has %d outputs; at most %d train together (name "
                    "the one to train)",
                    n, RT_MAX_HEADS);
    const char *names[RT_MAX_HEADS];
    for (int q = 0; q < n; q++) {
        const char *on = gr->output[q]->name ? gr->output[q]->name : "";
        oval *v = lookup(c, on, 0);
        if (!v || v->kind == V_NONE)
            return fail(c, RT_EINVAL, "no value '%.64s' in the graph", on);
        if (v->kind != V_ACT)
            return fail(c, RT_EINVAL, "output '%.64s' is a constant", on);
        if (v->layout == L_RNN)
            return fail(c, RT_EINVAL,
                        "output '%.64s' is sequence-major (seq, batch, ...); "
                        "transpose it to batch-first",
                        on);
        for (int r = 0; r < q; r++)
            if (!strcmp(names[r], on))
                return fail(c, RT_EINVAL, "output '%.64s' twice", on);
        const char *en = v->en;
        int rc;
        if (v->layout != L_PLAIN && (rc = output_to_nchw(c, v, &en)) < 0)
            return rc;
        if (strcmp(en, on)) {
            const char *in[1] = {en};
            if ((rc = add_node(c, on, "Identity", 1, in, 0, NULL)) < 0)
                return rc;
        }
        names[q] = on;
    }
    int rc = rt_graph_set_outputs(c->g, names, n);
    if (rc < 0)
        return fail(c, rc, "%s", rt_graph_errmsg(c->g));
    c->n_outputs = n;
    return 0;
}

/* An NCHW (or flattened NCHW) graph output in ONNX's own order, so that
 * predictions and labels read as PyTorch's: the one place a transpose runs
 * per step (the importer folds every other one into the weights). */
static int output_to_nchw(ictx *c, const oval *v, const char **en)
{
    const size_t n = strlen(v->en) + 8;
    char *rs = alloc(c, n), *tr = alloc(c, n), *fl = alloc(c, n);
    if (!rs || !tr || !fl)
        return OOM(c);
    snprintf(rs, n, "%s#nhwc", v->en);
    snprintf(tr, n, "%s#nchw", v->en);
    snprintf(fl, n, "%s#flat", v->en);
    const char *in[1] = {v->en};
    int rc;
    if (v->layout == L_FLAT) {
        const int64_t hwc[3] = {v->fh, v->fw, v->fc};
        rt_attr a = {.name = "shape", .kind = RT_ATTR_INTS, .n = 3, .ints = hwc};
        if ((rc = add_node(c, rs, "Reshape", 1, in, 1, &a)) < 0)
            return rc;
        in[0] = rs;
    }
    static const int64_t perm[4] = {0, 3, 1, 2};
    rt_attr a = {.name = "perm", .kind = RT_ATTR_INTS, .n = 4, .ints = perm};
    if ((rc = add_node(c, tr, "Transpose", 1, in, 1, &a)) < 0)
        return rc;
    *en = tr;
    if (v->layout == L_FLAT) {
        in[0] = tr;
        if ((rc = add_node(c, fl, "Flatten", 1, in, 0, NULL)) < 0)
            return rc;
        *en = fl;
    }
    return 0;
}

static int run_import(ictx *c, const void *buf, size_t len, const char *output)
{
    int rc;
    /* protobuf-c's decode recurses once per nested message: measured
     * first, without recursion (a 177 KB model nested 10,000 deep
     * overflowed the stack) */
    if (rt_wire_depth(&onnx__model_proto__descriptor, buf, len, RT_ONNX_MAX_DEPTH) >
        RT_ONNX_MAX_DEPTH)
        return fail(c, RT_EINVAL,
                    "the model's messages are nested more than %d levels deep "
                    "(the limit)",
                    RT_ONNX_MAX_DEPTH);
    c->pb = (ProtobufCAllocator){pb_alloc, pb_free, c};
    c->pb_budget = RT_ONNX_DECODE_BUDGET(len);
    c->m = onnx__model_proto__unpack(&c->pb, len, buf);
    if (!c->m && c->pb_used > c->pb_budget)
        return fail(c, RT_ETOOBIG,
                    "the model decodes to more than %zu bytes (the limit: 8 x "
                    "its %zu bytes + 16 MiB)",
                    c->pb_budget, len);
    if (!c->m)
        return fail(c, RT_EPROTO, "not a serialized ONNX ModelProto");
    if ((rc = model_opset(c)) < 0)
        return rc;
    const Onnx__GraphProto *gr = c->m->graph;
    if (!gr)
        return fail(c, RT_EINVAL, "the model has no graph");
    if ((rc = check_ops(c, gr)) < 0)
        return rc;
    if (gr->n_sparse_initializer)
        return fail(c, RT_EINVAL, "sparse initializers are not supported");
    /* every name the table may hold, twice over: it never fills */
    size_t names = gr->n_initializer + gr->n_input + gr->n_output, cap = 16;
    for (size_t k = 0; k < gr->n_node; k++)
        names += gr->node[k]->n_input + gr->node[k]->n_output;
    const size_t want = 2 * names + 16;
    while (cap < want)
        cap <<= 1;
    c->cap = cap;
    if (!(c->tab = calloc(cap, sizeof *c->tab)))
        return OOM(c);
    if (!(c->g = rt_graph_create()))
        return OOM(c);
    c->ninit = (int)gr->n_initializer;
    if (gr->n_initializer > (INT64_C(1) << 23))
        return fail(c, RT_EINVAL, "more than 2^23 initializers");
    if (!(c->iuse = alloc(c, sizeof *c->iuse * (gr->n_initializer + 1))) ||
        !(c->iown = alloc(c, sizeof *c->iown * (gr->n_initializer + 1))))
        return OOM(c);
    memset(c->iuse, 0, sizeof *c->iuse * (gr->n_initializer + 1));
    memset(c->iown, 0, sizeof *c->iown * (gr->n_initializer + 1));
    /* readers of each value (patterns need single-reader values) */
    for (size_t k = 0; k < gr->n_node; k++)
        for (size_t i = 0; i < gr->node[k]->n_input; i++) {
            oval *v = lookup(c, gr->node[k]->input[i], 1);
            if (v)
                v->uses++;
        }
    for (size_t q = 0; q < gr->n_output; q++) {
        oval *v = lookup(c, gr->output[q]->name, 1);
        if (v)
            v->uses += 2;
    }
    for (size_t k = 0; k < gr->n_initializer; k++) {
        Onnx__TensorProto *t = gr->initializer[k];
        if (!t->name || !*t->name)
            return fail(c, RT_EINVAL, "an initializer has no name");
        oval *v = lookup(c, t->name, 1);
        if (v->kind != V_NONE)
            return fail(c, RT_EGRAPH, "initializer '%.64s' twice", t->name);
        if ((rc = tensor_load(c, t, v)) < 0)
            return rc;
        if (v->isf)
            v->init = t;
        v->iid = (int)k + 1;
    }
    /* several data inputs: one packed graph input, as a Keras model's */
    int n_data = 0;
    int64_t total = 0;
    for (size_t k = 0; k < gr->n_input; k++) {
        const Onnx__ValueInfoProto *vi = gr->input[k];
        oval *v = vi->name ? lookup(c, vi->name, 0) : NULL;
        if (v && v->kind == V_CONST)
            continue; /* an initializer listed as input */
        int64_t numel;
        if ((rc = input_numel(c, vi, &numel)) < 0)
            return rc;
        if (__builtin_add_overflow(total, numel, &total) || total > RT__MAX_NUMEL)
            return fail(c, RT_EINVAL, "the inputs have more than 2^32 values per sample");
        n_data++;
    }
    if (!n_data)
        return fail(c, RT_EINVAL, "the model has no data input");
    if (n_data > 1) {
        const int64_t d[2] = {RT_BATCH, total};
        if ((rc = rt_graph_add_input(c->g, "inputs", RT_F32, 2, d)) < 0)
            return fail(c, rc, "inputs: %s", rt_graph_errmsg(c->g));
        c->packed = 1;
        c->in_total = total;
    }
    for (size_t k = 0; k < gr->n_input; k++) {
        const Onnx__ValueInfoProto *vi = gr->input[k];
        oval *v = vi->name ? lookup(c, vi->name, 0) : NULL;
        if (v && v->kind == V_CONST)
            continue;
        if ((rc = define_input(c, vi)) < 0)
            return rc;
    }
    if (!(c->skip = calloc(gr->n_node ? gr->n_node : 1, 1)))
        return OOM(c);
    for (size_t k = 0; k < gr->n_node; k++) {
        if (c->skip[k])
            continue;
        c->node = gr->node[k];
        c->k = k;
        if ((rc = find_op(c->node)(c)) < 0)
            return rc;
    }
    c->node = NULL;
    const char *out = output && *output ? output : NULL;
    if (!out) {
        if (gr->n_output > 1)
            return set_heads(c, gr);
        if (gr->n_output != 1)
            return fail(c, RT_EINVAL, "the graph has no output");
        out = gr->output[0]->name;
    }
    oval *v = out ? lookup(c, out, 0) : NULL;
    if (!v || v->kind == V_NONE)
        return fail(c, RT_EINVAL, "no value '%.64s' in the graph", out ? out : "");
    if (v->kind != V_ACT)
        return fail(c, RT_EINVAL, "output '%.64s' is a constant", out);
    if (v->layout == L_RNN)
        return fail(c, RT_EINVAL,
                    "output '%.64s' is sequence-major (seq, batch, ...); "
                    "transpose it to batch-first",
                    out);
    const char *en = v->en;
    if (v->layout != L_PLAIN && (rc = output_to_nchw(c, v, &en)) < 0)
        return rc;
    if ((rc = rt_graph_set_output(c->g, en)) < 0)
        return fail(c, rc, "%s", rt_graph_errmsg(c->g));
    return 0;
}

static void ctx_free(ictx *c)
{
    if (c->m)
        onnx__model_proto__free_unpacked(c->m, &c->pb);
    free(c->tab);
    free(c->skip);
    rt__arena_free(&c->ar);
    rt_graph_destroy(c->g);
}

int rt_onnx_import_opts(const void *buf, size_t len, rt_onnx_opts *o, rt_graph **out, char *err,
                        size_t errlen)
{
    ictx c = {.err = err, .errlen = errlen, .data_nhwc = o && o->data_nhwc};
    if (err && errlen)
        err[0] = 0;
    *out = NULL;
    int rc = run_import(&c, buf, len, o ? o->output : NULL);
    if (rc == 0) {
        *out = c.g;
        c.g = NULL;
        if (o) {
            o->nchw_input = c.nchw_input;
            o->n_outputs = c.n_outputs;
        }
    }
    ctx_free(&c);
    return rc;
}

int rt_onnx_layout_from_name(const char *name, int *nhwc)
{
    *nhwc = 0;
    if (!name || !*name || !strcasecmp(name, "NCHW"))
        return 0;
    if (strcasecmp(name, "NHWC"))
        return RT_EINVAL;
    *nhwc = 1;
    return 0;
}

int rt_onnx_import(const void *buf, size_t len, const char *output, rt_graph **out, char *err,
                   size_t errlen)
{
    rt_onnx_opts o = {.output = output};
    return rt_onnx_import_opts(buf, len, &o, out, err, errlen);
}

/* t's values replaced by n raw little-endian floats (raw, taken over) */
static void set_raw(Onnx__TensorProto *t, uint8_t *raw, size_t n)
{
    free(t->raw_data.data);
    free(t->float_data);
    free(t->double_data);
    t->float_data = NULL;
    t->n_float_data = 0;
    t->double_data = NULL;
    t->n_double_data = 0;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    t->has_raw_data = 1;
    t->raw_data.data = raw;
    t->raw_data.len = n * sizeof(float);
}

int rt_onnx_export(const void *buf, size_t len, const char *output, rt_onnx_param_fn get, void *ud,
                   uint8_t **out, size_t *outlen, char *err, size_t errlen)
{
    ictx c = {.err = err, .errlen = errlen};
    if (err && errlen)
        err[0] = 0;
    *out = NULL;
    *outlen = 0;
    int rc = run_import(&c, buf, len, output);
    float **wb = rc == 0 ? calloc((size_t)c.ninit + 1, sizeof *wb) : NULL;
    if (rc == 0 && !wb)
        rc = OOM(&c);
    /* parameters gathered from initializers: each value back in place, the
     * initializers' other values as they were */
    for (int k = 0; rc == 0 && k < c.npm; k++) {
        pmap *p = &c.pm[k];
        if (!p->emap)
            continue;
        float *eng = malloc((size_t)(p->n ? p->n : 1) * sizeof(float));
        if (!eng) {
            rc = OOM(&c);
            break;
        }
        if ((rc = get(ud, p->pname, eng, p->n)) < 0) {
            free(eng);
            rc = fail(&c, rc, "no value for parameter '%.64s'", p->pname);
            break;
        }
        for (int64_t q = 0; q < p->n && rc == 0; q++) {
            const int id = PROV_IID(p->emap[q]);
            if (!wb[id - 1]) {
                const oval *iv = lookup(&c, c.m->graph->initializer[id - 1]->name, 0);
                if (!(wb[id - 1] = malloc((size_t)(iv->numel ? iv->numel : 1) * sizeof(float)))) {
                    rc = OOM(&c);
                    break;
                }
                if (iv->numel)
                    memcpy(wb[id - 1], iv->f, (size_t)iv->numel * sizeof(float));
            }
            wb[id - 1][PROV_OFF(p->emap[q])] = eng[q];
        }
        free(eng);
    }
    for (int k = 0; rc == 0 && k < c.ninit; k++) {
        if (!wb[k])
            continue;
        Onnx__TensorProto *t = c.m->graph->initializer[k];
        set_raw(t, (uint8_t *)wb[k], (size_t)lookup(&c, t->name, 0)->numel);
        wb[k] = NULL;
    }
    if (wb)
        for (int k = 0; k < c.ninit; k++)
            free(wb[k]);
    free(wb);
    for (int k = 0; rc == 0 && k < c.npm; k++) {
        pmap *p = &c.pm[k];
        if (!p->init || p->emap)
            continue;
        int64_t n = 1;
        for (int q = 0; q < p->r; q++)
            n *= p->vd[q];
        float *eng = malloc((size_t)(n ? n : 1) * sizeof(float));
        uint8_t *raw = malloc((size_t)(n ? n : 1) * sizeof(float));
        if (!eng || !raw) {
            free(eng);
            free(raw);
            rc = OOM(&c);
            break;
        }
        if ((rc = get(ud, p->pname, eng, n)) < 0) {
            free(eng);
            free(raw);
            rc = fail(&c, rc, "no value for parameter '%.64s'", p->pname);
            break;
        }
        permute((float *)raw, eng, p->r, p->vd, p->perm, 1);
        free(eng);
        set_raw(p->init, raw, (size_t)n);
    }
    if (rc == 0) {
        size_t n = onnx__model_proto__get_packed_size(c.m);
        *out = malloc(n ? n : 1);
        if (!*out) {
            rc = OOM(&c);
        } else {
            *outlen = onnx__model_proto__pack(c.m, *out);
        }
    }
    ctx_free(&c);
    return rc;
}
