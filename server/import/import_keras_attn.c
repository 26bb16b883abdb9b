/*
 * import_keras_attn.c - Keras' MultiHeadAttention, Attention and Dot, built from
 * engine ops (Dense projections, Reshape/Transpose, BatchMatMul, Softmax,
 * Dropout), following keras/src/layers/attention/multi_head_attention.py
 * and keras/src/layers/merging/dot.py.
 *
 * MultiHeadAttention keeps Keras' weights and their shapes (what h5 and
 * .keras files hold), in Keras' order:
 *   <layer>/query/kernel (Dq, H, kd), <layer>/query/bias (H, kd),
 *   <layer>/key/kernel (Dk, H, kd), <layer>/key/bias (H, kd),
 *   <layer>/value/kernel (Dv, H, vd), <layer>/value/bias (H, vd),
 *   <layer>/attention_output/kernel (H, vd, O...), .../bias (O...).
 * The engine holds each as the 2-D matrix of the same values (Keras'
 * EinsumDense "abc,cde->abde" is that matrix product); the parameter's
 * view gives callers Keras' shape, and its initializer Keras' fans.
 *
 * The attention itself, for projected query (B, q..., H, kd) and key and
 * value (B, s..., H, kd|vd): the non-attention dims and the heads become
 * G independent products, the attention dims are flattened (Keras'
 * softmax over several key axes is one softmax over their flattening):
 *   Q (B, G, Tq, kd) * 1/sqrt(kd), K (B, G, Tk, kd), V (B, G, Tk, vd)
 *   P = softmax(Q K^T [masked]), dropout(P) in training, O = P V
 * then back to (B, q..., H*vd) and the output projection.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "import_keras.h"
#include "rt_engine_impl.h"

/* "<layer>/<suffix>" */
static int a_name(rt_keras_ctx *c, char *dst, const char *suffix)
{
    return rt_keras_name(c, dst, suffix);
}

static int a_node(rt_keras_ctx *c, const char *name, const char *op, int n, const char **in,
                  int n_attr, const rt_attr *attrs)
{
    int rc = rt_graph_add_node(c->g, name, op, n, in, n_attr, attrs);
    return rc < 0 ? rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g)) : 0;
}

/* dst = Reshape(src) to per-sample dims d (n of them) */
static int a_reshape(rt_keras_ctx *c, char *dst, const char *suffix, const char *src, int n,
                     const int64_t *d)
{
    int rc = a_name(c, dst, suffix);
    if (rc < 0)
        return rc;
    rt_attr at = {.name = "shape", .kind = RT_ATTR_INTS, .n = n, .ints = d};
    return a_node(c, dst, "Reshape", 1, &src, 1, &at);
}

/* dst = Transpose(src) by perm (n entries counting the batch); src itself
 * (copied into dst) when perm is the identity */
static int a_transpose(rt_keras_ctx *c, char *dst, const char *suffix, const char *src, int n,
                       const int64_t *perm)
{
    int id = 1;
    for (int i = 0; i < n; i++)
        id &= perm[i] == i;
    if (id) {
        snprintf(dst, RT_KERAS_NAME, "%s", src);
        return 0;
    }
    int rc = a_name(c, dst, suffix);
    if (rc < 0)
        return rc;
    rt_attr at = {.name = "perm", .kind = RT_ATTR_INTS, .n = n, .ints = perm};
    return a_node(c, dst, "Transpose", 1, &src, 1, &at);
}

/* A weight Keras declares with dims kd (kn of them), held by the engine as
 * rows x cols (the same values in the same order) */
static int a_weight(rt_keras_ctx *c, char *dst, const char *suffix, int kn, const int64_t *kd,
                    int64_t rows, int64_t cols, rt_init init, int trainable)
{
    int rc = a_name(c, dst, suffix);
    if (rc < 0)
        return rc;
    int64_t ed[2] = {rows, cols};
    const int en = rows < 0 ? 1 : 2;
    if (rows < 0)
        ed[0] = cols;
    if ((rc = rt_graph_add_param(c->g, dst, en, ed, init, trainable, NULL)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    int same = kn == en;
    for (int i = 0; same && i < kn; i++)
        same = kd[i] == ed[i];
    if (same)
        return 0;
    const int perm[2] = {0, 1};
    if ((rc = rt_graph_set_param_view(c->g, dst, kn, kd, en, ed, perm)) < 0)
        return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
    return 0;
}

/* ------------------------------------------------------ MultiHeadAttention */

typedef struct mha {
    int64_t H, kd, vd;
    int bias, trainable;
    rt_init kinit, binit;
} mha;

/* dst = x (per-sample dims xd, xn of them, features last) projected by
 * Keras' EinsumDense to (..., H, w): Dense with kernel (F, H*w) */
static int mha_proj(rt_keras_ctx *c, const mha *a, char *dst, const char *which,
                    const rt_keras_tensor *x, int64_t w)
{
    char kname[RT_KERAS_NAME], bname[RT_KERAS_NAME], sfx[64];
    const int64_t F = x->dims[x->ndim - 1];
    int64_t kd3[3] = {F, a->H, w}, bd2[2] = {a->H, w};
    snprintf(sfx, sizeof sfx, "%s/kernel", which);
    int rc = a_weight(c, kname, sfx, 3, kd3, F, a->H * w, a->kinit, a->trainable);
    if (rc < 0)
        return rc;
    if (a->bias) {
        snprintf(sfx, sizeof sfx, "%s/bias", which);
        if ((rc = a_weight(c, bname, sfx, 2, bd2, -1, a->H * w, a->binit, a->trainable)) < 0)
            return rc;
    }
    if ((rc = a_name(c, dst, which)) < 0)
        return rc;
    const char *in[3] = {x->name, kname, bname};
    return a_node(c, dst, "Dense", a->bias ? 3 : 2, in, 0, NULL);
}

/* The projection src (per-sample (d..., H*w), d the xn-1 non-feature
 * dims of x) as (G, T, w): attention dims att (mask over d's indices)
 * flattened into T, the others and the heads into G, in Keras' order
 * (non-attention dims, heads). */
static int mha_split(rt_keras_ctx *c, char *dst, const char *which, const char *src,
                     const rt_keras_tensor *x, unsigned att, int64_t H, int64_t w, int64_t *G,
                     int64_t *T)
{
    const int m = x->ndim - 1;
    int64_t d[RT_MAX_DIMS + 1], perm[RT_MAX_DIMS + 2];
    for (int i = 0; i < m; i++)
        d[i] = x->dims[i];
    d[m] = H;
    d[m + 1] = w;
    char r1[RT_KERAS_NAME], t1[RT_KERAS_NAME], sfx[64];
    snprintf(sfx, sizeof sfx, "%s/heads", which);
    int rc = a_reshape(c, r1, sfx, src, m + 2, d);
    if (rc < 0)
        return rc;
    /* (B, d..., H, w) -> (B, non-attention d..., H, attention d..., w) */
    int k = 0;
    perm[k++] = 0;
    *G = H;
    *T = 1;
    for (int i = 0; i < m; i++)
        if (!(att >> i & 1u)) {
            perm[k++] = i + 1;
            *G *= d[i];
        }
    perm[k++] = m + 1;
    for (int i = 0; i < m; i++)
        if (att >> i & 1u) {
            perm[k++] = i + 1;
            *T *= d[i];
        }
    perm[k++] = m + 2;
    snprintf(sfx, sizeof sfx, "%s/t", which);
    if ((rc = a_transpose(c, t1, sfx, r1, m + 3, perm)) < 0)
        return rc;
    const int64_t g3[3] = {*G, *T, w};
    snprintf(sfx, sizeof sfx, "%s/gtw", which);
    return a_reshape(c, dst, sfx, t1, 3, g3);
}

/* The attention mask of a rank-3 call (query (B, T, .), value (B, S, .))
 * from data: the product of the given (B, T, S) attention_mask, the
 * query's step mask (B, T, 1), the value's and key's (B, 1, S), as a value
 * broadcasting against the scores (B, H, T, S); "" when there is none.
 * The causal and sliding-window masks are constants: BandMask applies
 * them. Keras: _compute_attention_mask. */
/* cur (RT_KERAS_NAME) = cur * m, or m when cur is "" (the k-th product) */
static int mask_and(rt_keras_ctx *c, char *cur, const char *m, int *k)
{
    char nm[RT_KERAS_NAME], sfx[32];
    if (!cur[0]) {
        snprintf(cur, RT_KERAS_NAME, "%s", m);
        return 0;
    }
    snprintf(sfx, sizeof sfx, "mask/and%d", (*k)++);
    int rc = a_name(c, nm, sfx);
    const char *in[2] = {cur, m};
    if (rc < 0 || (rc = a_node(c, nm, "Mul", 2, in, 0, NULL)) < 0)
        return rc;
    snprintf(cur, RT_KERAS_NAME, "%s", nm);
    return 0;
}

static int mha_mask(rt_keras_ctx *c, char *dst, int64_t T, int64_t S, const char *att_mask,
                    const char *qm, const char *vm, const char *km)
{
    char cur[RT_KERAS_NAME] = "", sfx[64];
    int rc, k = 0;
    const char *parts[4] = {att_mask, qm, vm, km};
    for (int i = 0; i < 4; i++) {
        if (!parts[i] || !parts[i][0])
            continue;
        char r[RT_KERAS_NAME];
        const int64_t d3[3] = {1, i == 0 ? T : i == 1 ? T : 1, i == 0 ? S : i == 1 ? 1 : S};
        snprintf(sfx, sizeof sfx, "mask/%d", i);
        if ((rc = a_reshape(c, r, sfx, parts[i], 3, d3)) < 0 || (rc = mask_and(c, cur, r, &k)) < 0)
            return rc;
    }
    snprintf(dst, RT_KERAS_NAME, "%s", cur);
    return 0;
}

/* the role of input i: its keyword, or query, value, key by position */
static const char *mha_role(const rt_keras_ctx *c, int i, int *pos)
{
    static const char *const byp[] = {"query", "value", "key"};
    if (c->in_kw[i])
        return c->in_kw[i];
    return *pos < 3 ? byp[(*pos)++] : "?";
}

int rt_keras_mha(rt_keras_ctx *c)
{
    mha a;
    int64_t vdim, drop_seed;
    double dropout;
    int rc;
    if ((rc = rt_keras_cfg_int(c, "num_heads", 0, &a.H)) < 0 ||
        (rc = rt_keras_cfg_int(c, "key_dim", 0, &a.kd)) < 0 ||
        (rc = rt_keras_cfg_int(c, "value_dim", 0, &vdim)) < 0 ||
        (rc = rt_keras_cfg_float(c, "dropout", 0.0, &dropout)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "use_bias", 1, &a.bias)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "trainable", 1, &a.trainable)) < 0 ||
        (rc = rt_keras_cfg_int(c, "seed", 0, &drop_seed)) < 0 ||
        (rc = rt_keras_cfg_init(c, "kernel_initializer", RT_INIT_GLOROT_UNIFORM, &a.kinit)) < 0 ||
        (rc = rt_keras_cfg_init(c, "bias_initializer", RT_INIT_ZEROS, &a.binit)) < 0)
        return rc;
    a.vd = vdim ? vdim : a.kd;
    if (a.H <= 0 || a.kd <= 0 || a.vd <= 0)
        return rt_keras_fail(c, RT_EINVAL, "num_heads, key_dim and value_dim must be > 0");
    if (!(dropout >= 0 && dropout < 1))
        return rt_keras_fail(c, RT_EINVAL, "dropout %g is outside [0, 1)", dropout);
    /* settings of newer Keras versions that change the computation */
    int gate = 0;
    if ((rc = rt_keras_cfg_bool(c, "use_gate", 0, &gate)) < 0)
        return rc;
    if (gate)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED, "MultiHeadAttention use_gate is not supported");
    int64_t window = 0;
    if ((rc = rt_keras_cfg_int(c, "sliding_window", 0, &window)) < 0)
        return rc;
    if (window < 0)
        return rt_keras_fail(c, RT_EINVAL, "sliding_window must be > 0");
    if (rt_keras_cfg_get(c, "activity_regularizer"))
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "MultiHeadAttention activity_regularizer (on each projection) is "
                             "not supported");
    /* flash attention computes the same values */
    rt_keras_cfg_get(c, "flash_attention");
    /* the shapes Keras built with: the inputs' shapes, which the graph has */
    rt_keras_cfg_get(c, "query_shape");
    rt_keras_cfg_get(c, "key_shape");
    rt_keras_cfg_get(c, "value_shape");

    /* the call's tensors by role */
    const rt_keras_tensor *q = NULL, *v = NULL, *k = NULL, *am = NULL;
    const char *qmask = NULL, *vmask = NULL, *kmask = NULL;
    int pos = 0;
    for (int i = 0; i < c->n_in; i++) {
        const char *role = mha_role(c, i, &pos);
        if (!strcmp(role, "query"))
            q = &c->in[i];
        else if (!strcmp(role, "value"))
            v = &c->in[i];
        else if (!strcmp(role, "key"))
            k = &c->in[i];
        else if (!strcmp(role, "attention_mask"))
            am = &c->in[i];
        else if (!strcmp(role, "query_mask"))
            qmask = c->in[i].name;
        else if (!strcmp(role, "value_mask"))
            vmask = c->in[i].name;
        else if (!strcmp(role, "key_mask"))
            kmask = c->in[i].name;
        else
            return rt_keras_fail(c, RT_EINVAL, "MultiHeadAttention has no tensor argument '%.32s'",
                                 role);
    }
    if (!q || !v)
        return rt_keras_fail(c, RT_EINVAL, "MultiHeadAttention needs a query and a value");
    const int same_kv = !k;
    if (!k)
        k = v;
    /* Keras takes the inputs' own step masks (Embedding mask_zero) */
    if (!qmask && q->mask[0])
        qmask = q->mask;
    if (!vmask && v->mask[0])
        vmask = v->mask;
    if (!kmask && !same_kv && k->mask[0])
        kmask = k->mask;
    int causal = 0, scores = 0;
    json_object *kw = c->call_kwargs, *x;
    if (kw && json_object_object_get_ex(kw, "use_causal_mask", &x) && x)
        causal = json_object_get_boolean(x);
    if (kw && json_object_object_get_ex(kw, "return_attention_scores", &x) && x)
        scores = json_object_get_boolean(x);
    if (scores)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "return_attention_scores=True (a second output) is not supported");
    if (q->ndim < 2 || v->ndim != q->ndim || k->ndim != q->ndim)
        return rt_keras_fail(c, RT_ESHAPE,
                             "query, value and key need the same rank, at least (B, T, dim)");
    const int m = q->ndim - 1; /* non-feature dims */
    for (int i = 0; i < m; i++)
        if (v->dims[i] != k->dims[i])
            return rt_keras_fail(c, RT_ESHAPE, "value and key differ in a dim but the last");

    /* attention axes of the projected (B, d..., H, C): default 1..m */
    unsigned att = 0;
    json_object *ax = rt_keras_cfg_get(c, "attention_axes");
    if (!ax) {
        att = (1u << m) - 1;
    } else {
        int64_t av[RT_MAX_DIMS];
        int n = 1;
        if (json_object_is_type(ax, json_type_int))
            av[0] = json_object_get_int64(ax);
        else if ((n = rt_keras_cfg_ints(c, "attention_axes", av, RT_MAX_DIMS)) < 0)
            return n;
        for (int i = 0; i < n; i++) {
            const int64_t a1 = av[i] >= 0 ? av[i] : av[i] + (m + 2); /* (rank - 1) + axis */
            if (a1 < 1 || a1 > m)
                return rt_keras_fail(c, RT_EINVAL, "attention axis %lld is not a dim of the query",
                                     (long long)av[i]);
            att |= 1u << (a1 - 1);
        }
    }
    for (int i = 0; i < m; i++)
        if (!(att >> i & 1u) && q->dims[i] != v->dims[i])
            return rt_keras_fail(c, RT_ESHAPE, "query and value differ in non-attention dim %d",
                                 i + 1);
    if ((am || qmask || vmask || kmask || causal || window) && m != 1)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "attention masks are supported for (B, T, dim) inputs only");

    /* the output shape: output_shape (int or list), else the query's dim */
    int64_t od[RT_MAX_DIMS];
    int on = 1;
    od[0] = q->dims[m];
    json_object *os = rt_keras_cfg_get(c, "output_shape");
    if (os && json_object_is_type(os, json_type_int)) {
        od[0] = json_object_get_int64(os);
    } else if (os && (on = rt_keras_cfg_ints(c, "output_shape", od, RT_MAX_DIMS - m)) < 0) {
        return on;
    } else if (os && on == 0) {
        on = 1;
        od[0] = q->dims[m];
    }
    int64_t O = 1;
    for (int i = 0; i < on; i++) {
        if (od[i] <= 0)
            return rt_keras_fail(c, RT_EINVAL, "output_shape entries must be > 0");
        O *= od[i];
    }

    /* projections, in Keras' weight order: query, key, value */
    char qp[RT_KERAS_NAME], kp[RT_KERAS_NAME], vp[RT_KERAS_NAME];
    if ((rc = mha_proj(c, &a, qp, "query", q, a.kd)) < 0 ||
        (rc = mha_proj(c, &a, kp, "key", k, a.kd)) < 0 ||
        (rc = mha_proj(c, &a, vp, "value", v, a.vd)) < 0)
        return rc;
    /* query * 1/sqrt(key_dim), as Keras scales it before the product */
    char qs[RT_KERAS_NAME];
    if ((rc = a_name(c, qs, "query/scaled")) < 0)
        return rc;
    rt_attr sc = {
        .name = "alpha", .kind = RT_ATTR_FLOAT, .f = (double)(float)(1.0 / sqrt((double)a.kd))};
    const char *qin = qp;
    if ((rc = a_node(c, qs, "Scale", 1, &qin, 1, &sc)) < 0)
        return rc;
    char Q[RT_KERAS_NAME], K[RT_KERAS_NAME], V[RT_KERAS_NAME];
    int64_t G, Tq, Gk, Tk, Gv, Tv;
    if ((rc = mha_split(c, Q, "query", qs, q, att, a.H, a.kd, &G, &Tq)) < 0 ||
        (rc = mha_split(c, K, "key", kp, k, att, a.H, a.kd, &Gk, &Tk)) < 0 ||
        (rc = mha_split(c, V, "value", vp, v, att, a.H, a.vd, &Gv, &Tv)) < 0)
        return rc;

    /* scores (B, G, Tq, Tk) */
    char Sn[RT_KERAS_NAME], Pn[RT_KERAS_NAME];
    if ((rc = a_name(c, Sn, "scores")) < 0)
        return rc;
    rt_attr tb = {.name = "transpose_b", .kind = RT_ATTR_INT, .i = 1};
    const char *sin[2] = {Q, K};
    if ((rc = a_node(c, Sn, "BatchMatMul", 2, sin, 1, &tb)) < 0)
        return rc;
    char mk[RT_KERAS_NAME];
    if ((rc = mha_mask(c, mk, Tq, Tk, am ? am->name : NULL, qmask, vmask, kmask)) < 0)
        return rc;
    const char *logits = Sn;
    char Mn[RT_KERAS_NAME], Bn[RT_KERAS_NAME], An[RT_KERAS_NAME];
    if (mk[0]) {
        /* where(mask, scores, -1e9) (Keras' Softmax with a mask) as
         * scores * m + (m - 1) * 1e9, m of 0 and 1 */
        if ((rc = a_name(c, Mn, "scores/masked")) < 0 || (rc = a_name(c, Bn, "mask/bias")) < 0 ||
            (rc = a_name(c, An, "scores/where")) < 0)
            return rc;
        const char *min[2] = {Sn, mk};
        if ((rc = a_node(c, Mn, "Mul", 2, min, 0, NULL)) < 0)
            return rc;
        rt_attr bb[2] = {{.name = "alpha", .kind = RT_ATTR_FLOAT, .f = 1e9},
                         {.name = "beta", .kind = RT_ATTR_FLOAT, .f = -1e9}};
        const char *bin = mk;
        if ((rc = a_node(c, Bn, "Scale", 1, &bin, 2, bb)) < 0)
            return rc;
        const char *ain[2] = {Mn, Bn};
        if ((rc = a_node(c, An, "Add", 2, ain, 0, NULL)) < 0)
            return rc;
        logits = An;
    }
    char Wn[RT_KERAS_NAME];
    if (causal || window) {
        /* the causal mask (row >= column) and the sliding window (|row -
         * column| < window): -1e9 outside, as the where above */
        if ((rc = a_name(c, Wn, "band_mask")) < 0)
            return rc;
        rt_attr ba[2] = {{.name = "causal", .kind = RT_ATTR_INT, .i = causal},
                         {.name = "window", .kind = RT_ATTR_INT, .i = window}};
        if ((rc = a_node(c, Wn, "BandMask", 1, &logits, 2, ba)) < 0)
            return rc;
        logits = Wn;
    }
    if ((rc = a_name(c, Pn, "softmax")) < 0)
        return rc;
    if ((rc = a_node(c, Pn, "Softmax", 1, &logits, 0, NULL)) < 0)
        return rc;
    const char *probs = Pn;
    char Dn[RT_KERAS_NAME];
    if (dropout > 0) {
        if ((rc = a_name(c, Dn, "dropout")) < 0)
            return rc;
        rt_attr dr = {.name = "rate", .kind = RT_ATTR_FLOAT, .f = dropout};
        if ((rc = a_node(c, Dn, "Dropout", 1, &probs, 1, &dr)) < 0)
            return rc;
        probs = Dn;
    }
    /* (B, G, Tq, vd), back to (B, q..., H*vd) */
    char On[RT_KERAS_NAME], R1[RT_KERAS_NAME], T1[RT_KERAS_NAME], R2[RT_KERAS_NAME];
    if ((rc = a_name(c, On, "context")) < 0)
        return rc;
    const char *oin[2] = {probs, V};
    if ((rc = a_node(c, On, "BatchMatMul", 2, oin, 0, NULL)) < 0)
        return rc;
    int64_t d[RT_MAX_DIMS + 2], perm[RT_MAX_DIMS + 2], inv[RT_MAX_DIMS + 2];
    int n = 0, p = 0;
    perm[p++] = 0;
    for (int i = 0; i < m; i++)
        if (!(att >> i & 1u)) {
            d[n++] = q->dims[i];
            perm[p++] = i + 1;
        }
    d[n++] = a.H;
    perm[p++] = m + 1;
    for (int i = 0; i < m; i++)
        if (att >> i & 1u) {
            d[n++] = q->dims[i];
            perm[p++] = i + 1;
        }
    d[n++] = a.vd;
    perm[p++] = m + 2;
    if ((rc = a_reshape(c, R1, "context/split", On, n, d)) < 0)
        return rc;
    for (int i = 0; i < p; i++)
        inv[perm[i]] = i;
    if ((rc = a_transpose(c, T1, "context/t", R1, p, inv)) < 0)
        return rc;
    int64_t cd[RT_MAX_DIMS];
    for (int i = 0; i < m; i++)
        cd[i] = q->dims[i];
    cd[m] = a.H * a.vd;
    if ((rc = a_reshape(c, R2, "context/heads", T1, m + 1, cd)) < 0)
        return rc;

    /* output projection, kernel (H, vd, O...), bias (O...) */
    char kname[RT_KERAS_NAME], bname[RT_KERAS_NAME];
    int64_t okd[RT_MAX_DIMS + 2];
    okd[0] = a.H;
    okd[1] = a.vd;
    for (int i = 0; i < on; i++)
        okd[2 + i] = od[i];
    if ((rc = a_weight(c, kname, "attention_output/kernel", on + 2, okd, a.H * a.vd, O, a.kinit,
                       a.trainable)) < 0)
        return rc;
    if (a.bias &&
        (rc = a_weight(c, bname, "attention_output/bias", on, od, -1, O, a.binit, a.trainable)) < 0)
        return rc;
    char Yn[RT_KERAS_NAME];
    const int split_out = on > 1;
    if ((rc = split_out ? a_name(c, Yn, "attention_output") : a_name(c, Yn, NULL)) < 0)
        return rc;
    const char *yin[3] = {R2, kname, bname};
    if ((rc = a_node(c, Yn, "Dense", a.bias ? 3 : 2, yin, 0, NULL)) < 0)
        return rc;
    memset(&c->out, 0, sizeof c->out);
    for (int i = 0; i < m; i++)
        c->out.dims[i] = q->dims[i];
    for (int i = 0; i < on; i++)
        c->out.dims[m + i] = od[i];
    c->out.ndim = m + on;
    if (c->out.ndim > RT_MAX_DIMS)
        return rt_keras_fail(c, RT_ESHAPE, "output has more than %d dims", RT_MAX_DIMS);
    if (split_out) {
        char nm[RT_KERAS_NAME];
        if ((rc = a_name(c, nm, NULL)) < 0)
            return rc;
        rt_attr at = {.name = "shape", .kind = RT_ATTR_INTS, .n = c->out.ndim, .ints = c->out.dims};
        const char *yi = Yn;
        if ((rc = a_node(c, nm, "Reshape", 1, &yi, 1, &at)) < 0)
            return rc;
    }
    snprintf(c->out.name, sizeof c->out.name, "%s", c->layer);
    /* Keras sets the query's mask on the output */
    c->mask_set = 1;
    if (q->mask[0])
        snprintf(c->out.mask, sizeof c->out.mask, "%s", q->mask);
    return 0;
}

/* -------------------------------------------------------------------- Dot */

/* x * rsqrt(max(sum(x^2 over axis), eps2)) (keras.ops.normalize; tf.keras'
 * l2_normalize: eps2 1e-12) into dst; axis counts the batch */
static int dot_normalize(rt_keras_ctx *c, char *dst, const char *which, const char *x, int axis,
                         double eps2)
{
    char sq[RT_KERAS_NAME], ss[RT_KERAS_NAME], cl[RT_KERAS_NAME], rt[RT_KERAS_NAME], sfx[64];
    int rc;
    snprintf(sfx, sizeof sfx, "%s/square", which);
    if ((rc = a_name(c, sq, sfx)) < 0)
        return rc;
    const char *in2[2] = {x, x};
    if ((rc = a_node(c, sq, "Mul", 2, in2, 0, NULL)) < 0)
        return rc;
    snprintf(sfx, sizeof sfx, "%s/sumsq", which);
    if ((rc = a_name(c, ss, sfx)) < 0)
        return rc;
    const int64_t axv = axis;
    rt_attr ra[2] = {{.name = "axes", .kind = RT_ATTR_INTS, .n = 1, .ints = &axv},
                     {.name = "keepdims", .kind = RT_ATTR_INT, .i = 1}};
    const char *s1 = sq;
    if ((rc = a_node(c, ss, "ReduceSum", 1, &s1, 2, ra)) < 0)
        return rc;
    snprintf(sfx, sizeof sfx, "%s/clip", which);
    if ((rc = a_name(c, cl, sfx)) < 0)
        return rc;
    rt_attr ca = {.name = "min", .kind = RT_ATTR_FLOAT, .f = eps2};
    const char *s2 = ss;
    if ((rc = a_node(c, cl, "Clip", 1, &s2, 1, &ca)) < 0)
        return rc;
    snprintf(sfx, sizeof sfx, "%s/norm", which);
    if ((rc = a_name(c, rt, sfx)) < 0)
        return rc;
    const char *s3 = cl;
    if ((rc = a_node(c, rt, "Sqrt", 1, &s3, 0, NULL)) < 0)
        return rc;
    snprintf(sfx, sizeof sfx, "%s/normalized", which);
    if ((rc = a_name(c, dst, sfx)) < 0)
        return rc;
    const char *s4[2] = {x, rt};
    return a_node(c, dst, "Div", 2, s4, 0, NULL);
}

/* Dot(axes, normalize): Keras' batch_dot of two inputs over one axis each
 * (counting the batch, >= 1; negative from the end): the output holds x's
 * dims but that axis, then y's, (B, 1) when none remain */
int rt_keras_dot(rt_keras_ctx *c)
{
    int normalize = 0, rc;
    if ((rc = rt_keras_cfg_bool(c, "normalize", 0, &normalize)) < 0)
        return rc;
    const rt_keras_tensor *x = &c->in[0], *y = &c->in[1];
    const int xr = x->ndim + 1, yr = y->ndim + 1; /* Keras ranks, the batch counted */
    int64_t ax[2];
    json_object *av = rt_keras_cfg_get(c, "axes");
    if (av && json_object_is_type(av, json_type_int)) {
        ax[0] = ax[1] = json_object_get_int64(av);
        /* an int axis < 0 counts from each input's end */
        if (ax[0] < 0) {
            ax[0] = ((ax[0] % xr) + xr) % xr;
            ax[1] = ((ax[1] % yr) + yr) % yr;
        }
    } else if (av) {
        int n = rt_keras_cfg_ints(c, "axes", ax, 2);
        if (n < 0)
            return n;
        if (n != 2)
            return rt_keras_fail(c, RT_EINVAL, "Dot axes must be an int or a pair");
        ax[0] = ax[0] < 0 ? ((ax[0] % xr) + xr) % xr : ax[0];
        ax[1] = ax[1] < 0 ? ((ax[1] % yr) + yr) % yr : ax[1];
    } else {
        return rt_keras_fail(c, RT_EINVAL, "Dot needs axes");
    }
    if (xr < 2 || yr < 2)
        return rt_keras_fail(c, RT_ESHAPE, "Dot needs inputs of rank >= 2");
    if (ax[0] < 1 || ax[0] >= xr || ax[1] < 1 || ax[1] >= yr)
        return rt_keras_fail(c, RT_EINVAL, "Dot axes (%lld, %lld) must name non-batch dims",
                             (long long)ax[0], (long long)ax[1]);
    const int64_t Kx = x->dims[ax[0] - 1], Ky = y->dims[ax[1] - 1];
    if (Kx != Ky)
        return rt_keras_fail(c, RT_ESHAPE, "Dot axes hold %lld and %lld values", (long long)Kx,
                             (long long)Ky);
    char xn[RT_KERAS_NAME], yn[RT_KERAS_NAME];
    memcpy(xn, x->name, sizeof xn); /* both RT_KERAS_NAME, NUL-terminated */
    memcpy(yn, y->name, sizeof yn);
    if (normalize) {
        const double eps2 = c->keras3 ? 1e-14 : 1e-12; /* epsilon^2 / l2_normalize's */
        if ((rc = dot_normalize(c, xn, "x", x->name, (int)ax[0], eps2)) < 0 ||
            (rc = dot_normalize(c, yn, "y", y->name, (int)ax[1], eps2)) < 0)
            return rc;
    }
    /* x: the axis last, the rest flattened into M; y: the axis first, the
     * rest flattened into N */
    int64_t perm[RT_MAX_DIMS + 1], od[RT_MAX_DIMS * 2];
    int p = 0, on = 0;
    int64_t M = 1, N = 1;
    perm[p++] = 0;
    for (int i = 1; i < xr; i++)
        if (i != ax[0]) {
            perm[p++] = i;
            M *= x->dims[i - 1];
            od[on++] = x->dims[i - 1];
        }
    perm[p++] = ax[0];
    char xt[RT_KERAS_NAME], yt[RT_KERAS_NAME], xm[RT_KERAS_NAME], ym[RT_KERAS_NAME];
    if ((rc = a_transpose(c, xt, "x/t", xn, xr, perm)) < 0)
        return rc;
    p = 0;
    perm[p++] = 0;
    perm[p++] = ax[1];
    for (int i = 1; i < yr; i++)
        if (i != ax[1]) {
            perm[p++] = i;
            N *= y->dims[i - 1];
            od[on++] = y->dims[i - 1];
        }
    if ((rc = a_transpose(c, yt, "y/t", yn, yr, perm)) < 0)
        return rc;
    const int64_t xd[2] = {M, Kx}, yd[2] = {Kx, N};
    if ((rc = a_reshape(c, xm, "x/mat", xt, 2, xd)) < 0 ||
        (rc = a_reshape(c, ym, "y/mat", yt, 2, yd)) < 0)
        return rc;
    if (on == 0)
        od[on++] = 1;
    if (on > RT_MAX_DIMS)
        return rt_keras_fail(c, RT_ESHAPE, "Dot output has more than %d dims", RT_MAX_DIMS);
    char pn[RT_KERAS_NAME];
    if ((rc = a_name(c, pn, "matmul")) < 0)
        return rc;
    const char *in[2] = {xm, ym};
    if ((rc = a_node(c, pn, "BatchMatMul", 2, in, 0, NULL)) < 0)
        return rc;
    memset(&c->out, 0, sizeof c->out);
    c->out.ndim = on;
    memcpy(c->out.dims, od, sizeof(int64_t) * (size_t)on);
    if ((rc = a_name(c, c->out.name, NULL)) < 0)
        return rc;
    rt_attr at = {.name = "shape", .kind = RT_ATTR_INTS, .n = on, .ints = c->out.dims};
    const char *pin = pn;
    if ((rc = a_node(c, c->out.name, "Reshape", 1, &pin, 1, &at)) < 0)
        return rc;
    /* Keras' Dot returns no mask */
    c->mask_set = 1;
    return 0;
}

/* -------------------------------------------------------------- Attention */

/* Keras' Attention (Luong-style; keras/layers/attention/attention.py and
 * base_dense_attention.py of Keras 2.10, keras/src/layers/attention/
 * attention.py of Keras 3) on [query (B, Tq, d), value (B, Tv, dv)] or
 * [query, value, key (B, Tv, d)]: scores = query key^T (times the scalar
 * weight "scale", initialized to 1, with use_scale), the causal mask
 * (use_causal_mask, or Keras 2's causal) as -1e9 above the diagonal,
 * softmax over the value steps, dropout on those weights in training,
 * output weights x value (B, Tq, dv). score_mode "concat", inputs carrying
 * step masks and return_attention_scores are refused. */
int rt_keras_attention(rt_keras_ctx *c)
{
    int use_scale, causal = 0, trainable, rc;
    double dropout;
    const char *mode;
    if ((rc = rt_keras_cfg_bool(c, "use_scale", 0, &use_scale)) < 0 ||
        (rc = rt_keras_cfg_str(c, "score_mode", "dot", &mode)) < 0 ||
        (rc = rt_keras_cfg_float(c, "dropout", 0.0, &dropout)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "causal", 0, &causal)) < 0 ||
        (rc = rt_keras_cfg_bool(c, "trainable", 1, &trainable)) < 0)
        return rc;
    if (strcmp(mode, "dot") != 0)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "Attention score_mode '%.20s' is not supported (dot only)", mode);
    if (!(dropout >= 0 && dropout < 1))
        return rt_keras_fail(c, RT_EINVAL, "dropout %g is outside [0, 1)", dropout);
    json_object *kw = c->call_kwargs, *x;
    if (kw && json_object_object_get_ex(kw, "use_causal_mask", &x) && x)
        causal |= json_object_get_boolean(x);
    if (kw && json_object_object_get_ex(kw, "return_attention_scores", &x) && x &&
        json_object_get_boolean(x))
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "return_attention_scores=True (a second output) is not supported");
    for (int i = 0; i < c->n_in; i++)
        if (c->in_kw[i])
            return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                                 "Attention's '%.32s' argument is not supported (the inputs only)",
                                 c->in_kw[i]);
    if (c->n_in < 2 || c->n_in > 3)
        return rt_keras_fail(c, RT_EINVAL, "Attention takes [query, value] or [query, value, key]");
    const rt_keras_tensor *q = &c->in[0], *v = &c->in[1], *k = c->n_in > 2 ? &c->in[2] : v;
    if (q->ndim != 2 || v->ndim != 2 || k->ndim != 2 || k->dims[0] != v->dims[0] ||
        k->dims[1] != q->dims[1])
        return rt_keras_fail(c, RT_ESHAPE,
                             "Attention needs query (Tq, d), value (Tv, dv) and key (Tv, d)");
    char Sn[RT_KERAS_NAME], Pn[RT_KERAS_NAME];
    if ((rc = a_name(c, Sn, "scores")) < 0)
        return rc;
    rt_attr tb = {.name = "transpose_b", .kind = RT_ATTR_INT, .i = 1};
    const char *sin[2] = {q->name, k->name};
    if ((rc = a_node(c, Sn, "BatchMatMul", 2, sin, 1, &tb)) < 0)
        return rc;
    const char *logits = Sn;
    char Wn[RT_KERAS_NAME], Xn[RT_KERAS_NAME], Cn[RT_KERAS_NAME];
    if (use_scale) {
        /* Keras' scalar weight, held as one value */
        const int64_t one = 1;
        if ((rc = a_name(c, Wn, "scale")) < 0 || (rc = a_name(c, Xn, "scores/scaled")) < 0)
            return rc;
        if ((rc = rt_graph_add_param(c->g, Wn, 1, &one, RT_INIT_ONES, trainable, NULL)) < 0)
            return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(c->g));
        const char *min[2] = {Sn, Wn};
        if ((rc = a_node(c, Xn, "Mul", 2, min, 0, NULL)) < 0)
            return rc;
        logits = Xn;
    }
    if (causal) {
        if ((rc = a_name(c, Cn, "causal_mask")) < 0)
            return rc;
        rt_attr ba[2] = {{.name = "causal", .kind = RT_ATTR_INT, .i = 1},
                         {.name = "window", .kind = RT_ATTR_INT, .i = 0}};
        if ((rc = a_node(c, Cn, "BandMask", 1, &logits, 2, ba)) < 0)
            return rc;
        logits = Cn;
    }
    if ((rc = a_name(c, Pn, "softmax")) < 0 ||
        (rc = a_node(c, Pn, "Softmax", 1, &logits, 0, NULL)) < 0)
        return rc;
    const char *probs = Pn;
    char Dn[RT_KERAS_NAME];
    if (dropout > 0) {
        rt_attr dr = {.name = "rate", .kind = RT_ATTR_FLOAT, .f = dropout};
        if ((rc = a_name(c, Dn, "dropout")) < 0 ||
            (rc = a_node(c, Dn, "Dropout", 1, &probs, 1, &dr)) < 0)
            return rc;
        probs = Dn;
    }
    if ((rc = a_name(c, c->out.name, NULL)) < 0)
        return rc;
    const char *oin[2] = {probs, v->name};
    if ((rc = a_node(c, c->out.name, "BatchMatMul", 2, oin, 0, NULL)) < 0)
        return rc;
    c->out.ndim = 2;
    c->out.dims[0] = q->dims[0];
    c->out.dims[1] = v->dims[1];
    return 0;
}

int rt_keras_attn_find(const char *class_name, rt_keras_layer_fn *fn, int *n_in)
{
    if (strcmp(class_name, "Attention") == 0) {
        *fn = rt_keras_attention;
        *n_in = 0;
        return 1;
    }
    if (strcmp(class_name, "MultiHeadAttention") == 0) {
        *fn = rt_keras_mha;
        *n_in = 0;
        return 1;
    }
    if (strcmp(class_name, "Dot") == 0) {
        *fn = rt_keras_dot;
        *n_in = 2;
        return 1;
    }
    return 0;
}
