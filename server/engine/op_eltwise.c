/*
 * op_eltwise.c - Add/Sub/Mul/Div/Max/Min/PRelu (numpy broadcasting),
 * Relu/Sigmoid/Tanh,
 * Softmax/LogSoftmax, Reshape/Flatten/Identity, Dropout, SpatialDropout,
 * GaussianNoise, GaussianDropout: shape inference,
 * typed parameters and FLOP counts.
 */
#include <stdio.h>
#include <string.h>

#include "rt_engine_impl.h"

static void rt__fmt_shape(const rt__shape *s, char *buf, size_t len)
{
    size_t o = (size_t)snprintf(buf, len, "(%s", s->batched ? "B" : "");
    for (int i = 0; i < s->ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", (i || s->batched) ? "," : "",
                              (long long)s->d[i]);
    if (o < len)
        snprintf(buf + o, len - o, ")");
}

/* full dim i (right-aligned to rank R) of s: -1 is the batch, 1 if absent */
static int64_t rt__full_dim(const rt__shape *s, int R, int i)
{
    int r = s->ndim + s->batched;
    int j = i - (R - r);
    if (j < 0)
        return 1;
    if (s->batched)
        return j == 0 ? -1 : s->d[j - 1];
    return s->d[j];
}

/* The broadcast as strides over the output's dims, for the kernels */
static void rt__bcast_strides(rt__node *nd)
{
    rt__bcast_params *p = rt__bcast_p(nd);
    const int R = nd->out.ndim + (nd->out.batched ? 1 : 0);
    p->batched = nd->out.batched;
    if (R == 0) {
        p->R = 1;
        p->d[0] = 1;
        p->sa[0] = p->sb[0] = 0;
        p->flat = p->full[0] = p->full[1] = 1;
        return;
    }
    p->R = R;
    for (int i = 0; i < R; i++) {
        int oi = nd->out.batched ? i - 1 : i;
        p->d[i] = oi < 0 ? -1 : nd->out.d[oi];
    }
    for (int k = 0; k < 2; k++) {
        const rt__shape *s = nd->in_shape[k];
        const int r = s->ndim + (s->batched ? 1 : 0);
        int64_t *st = k ? p->sb : p->sa;
        int64_t stride = 1;
        int full = r == R && s->batched == nd->out.batched;
        for (int i = R - 1; i >= 0; i--) {
            const int j = i - (R - r); /* dim of the input, right-aligned */
            if (j < 0) {
                st[i] = 0;
                continue;
            }
            /* the batch (-1) is the outermost dim: nothing follows it */
            const int64_t dim = s->batched && j == 0 ? -1 : s->d[s->batched ? j - 1 : j];
            if (dim == 1 && p->d[i] != 1) {
                st[i] = 0;
                full = 0;
            } else {
                st[i] = stride;
            }
            if (dim != -1)
                stride *= dim;
        }
        p->full[k] = full;
    }
    p->flat = p->full[0] && p->full[1];
}

static int rt__bcast_infer(rt__cc *cc, rt__node *nd)
{
    const rt__shape *A = nd->in_shape[0], *B = nd->in_shape[1];
    int ra = A->ndim + A->batched, rb = B->ndim + B->batched;
    int R = ra > rb ? ra : rb;
    char sa[96], sb[96];
    rt__fmt_shape(A, sa, sizeof sa);
    rt__fmt_shape(B, sb, sizeof sb);
    int batched = A->batched || B->batched;
    /* the batch must stay the leading dim of the result */
    if ((A->batched && ra < R) || (B->batched && rb < R))
        return rt__cerr(cc, nd, RT_ESHAPE,
                        "cannot broadcast '%s' %s with '%s' %s: batch dim not leading",
                        nd->in_name[0], sa, nd->in_name[1], sb);
    rt__shape out = {.ndim = batched ? R - 1 : R, .batched = batched};
    for (int i = 0; i < R; i++) {
        int64_t da = rt__full_dim(A, R, i), db = rt__full_dim(B, R, i), d;
        if (da == db)
            d = da;
        else if (da == 1)
            d = db;
        else if (db == 1)
            d = da;
        else
            return rt__cerr(cc, nd, RT_ESHAPE, "cannot broadcast '%s' %s with '%s' %s",
                            nd->in_name[0], sa, nd->in_name[1], sb);
        if (batched && i == 0)
            continue;
        out.d[batched ? i - 1 : i] = d;
    }
    nd->out = out;
    rt__bcast_strides(nd);
    return 0;
}

static uint64_t rt__numel_flops(const rt__node *nd, int64_t B, unsigned need_dx)
{
    uint64_t n = (uint64_t)(nd->out.batched ? B : 1) * (uint64_t)rt__shape_numel(&nd->out);
    return n + (need_dx ? 2 * n : 0);
}

const rt__op_def rt__op_add = {
    .name = "Add",
    .min_in = 2,
    .max_in = 2,
    .params = RT__P_BCAST,
    .infer = rt__bcast_infer,
    .flops = rt__numel_flops,
};
const rt__op_def rt__op_sub = {
    .name = "Sub",
    .min_in = 2,
    .max_in = 2,
    .params = RT__P_BCAST,
    .infer = rt__bcast_infer,
    .flops = rt__numel_flops,
};
const rt__op_def rt__op_mul = {
    .name = "Mul",
    .min_in = 2,
    .max_in = 2,
    .bwd_needs_in = 3u,
    .params = RT__P_BCAST,
    .infer = rt__bcast_infer,
    .flops = rt__numel_flops,
};

/* Div: a / b. Max/Min: on a tie the gradient goes to a (input 0), as
 * TensorFlow's Maximum/Minimum (Keras' merge layers chain them left to
 * right). PRelu(x, slope): x > 0 ? x : slope x, slope broadcast (Keras'
 * PReLU alpha with shared_axes as 1-dims). */
const rt__op_def rt__op_div = {
    .name = "Div",
    .min_in = 2,
    .max_in = 2,
    .bwd_needs_in = 3u,
    .params = RT__P_BCAST,
    .infer = rt__bcast_infer,
    .flops = rt__numel_flops,
};
const rt__op_def rt__op_max = {
    .name = "Max",
    .min_in = 2,
    .max_in = 2,
    .bwd_needs_in = 3u,
    .params = RT__P_BCAST,
    .infer = rt__bcast_infer,
    .flops = rt__numel_flops,
};
const rt__op_def rt__op_min = {
    .name = "Min",
    .min_in = 2,
    .max_in = 2,
    .bwd_needs_in = 3u,
    .params = RT__P_BCAST,
    .infer = rt__bcast_infer,
    .flops = rt__numel_flops,
};

static int rt__prelu_infer(rt__cc *cc, rt__node *nd)
{
    int rc = rt__bcast_infer(cc, nd);
    if (rc < 0)
        return rc;
    const rt__shape *x = nd->in_shape[0];
    if (x->ndim != nd->out.ndim || x->batched != nd->out.batched ||
        memcmp(x->d, nd->out.d, sizeof(int64_t) * (size_t)x->ndim) != 0)
        return rt__cerr(cc, nd, RT_ESHAPE, "slope '%s' is larger than the input '%s'",
                        nd->in_name[1], nd->in_name[0]);
    return 0;
}

const rt__op_def rt__op_prelu = {
    .name = "PRelu",
    .min_in = 2,
    .max_in = 2,
    .bwd_needs_in = 3u,
    .params = RT__P_BCAST,
    .infer = rt__prelu_infer,
    .flops = rt__numel_flops,
};

/* ---------------------------------------------------------------- unary */

static int rt__same_infer(rt__cc *cc, rt__node *nd)
{
    nd->out = *nd->in_shape[0];
    return 0;
}

const rt__op_def rt__op_relu = {
    .name = "Relu",
    .min_in = 1,
    .max_in = 1,
    .bwd_needs_out = 1,
    .infer = rt__same_infer,
    .flops = rt__numel_flops,
};
const rt__op_def rt__op_sigmoid = {
    .name = "Sigmoid",
    .min_in = 1,
    .max_in = 1,
    .bwd_needs_out = 1,
    .infer = rt__same_infer,
    .flops = rt__numel_flops,
};
const rt__op_def rt__op_tanh = {
    .name = "Tanh",
    .min_in = 1,
    .max_in = 1,
    .bwd_needs_out = 1,
    .infer = rt__same_infer,
    .flops = rt__numel_flops,
};
const rt__op_def rt__op_identity = {
    .name = "Identity",
    .min_in = 1,
    .max_in = 1,
    .infer = rt__same_infer,
    .flops = rt__numel_flops,
};

static int rt__softmax_infer(rt__cc *cc, rt__node *nd)
{
    const rt__shape *x = nd->in_shape[0];
    if (x->ndim < 1)
        return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' has no axis to normalise", nd->in_name[0]);
    nd->out = *x;
    rt__softmax_p(nd)->C = x->d[x->ndim - 1];
    return 0;
}

const rt__op_def rt__op_softmax = {
    .name = "Softmax",
    .min_in = 1,
    .max_in = 1,
    .bwd_needs_out = 1,
    .params = RT__P_SOFTMAX,
    .infer = rt__softmax_infer,
    .flops = rt__numel_flops,
};
const rt__op_def rt__op_logsoftmax = {
    .name = "LogSoftmax",
    .min_in = 1,
    .max_in = 1,
    .bwd_needs_out = 1,
    .params = RT__P_SOFTMAX,
    .infer = rt__softmax_infer,
    .flops = rt__numel_flops,
};

/* ---------------------------------------------------------------- shapes */

/* Reshape(x) attr shape: per-sample dims (full dims when x has no batch),
 * at most one -1, inferred from the element count. */
static int rt__reshape_infer(rt__cc *cc, rt__node *nd)
{
    const rt__shape *x = nd->in_shape[0];
    int64_t dims[RT_MAX_DIMS];
    int ok = 1;
    int nd_ = rt__attr_ints(cc, nd, "shape", dims, RT_MAX_DIMS, &ok);
    if (!ok)
        return RT_EINVAL;
    if (nd_ < 0)
        return rt__cerr(cc, nd, RT_EINVAL, "attribute 'shape' (ints) is required");
    if (nd_ > RT_MAX_DIMS)
        return rt__cerr(cc, nd, RT_ESHAPE, "shape has %d dims, max %d", nd_, RT_MAX_DIMS);
    int64_t want = rt__shape_numel(x), have = 1;
    int neg = -1;
    for (int i = 0; i < nd_; i++) {
        if (dims[i] == -1 && neg < 0) {
            neg = i;
            continue;
        }
        if (dims[i] <= 0 || __builtin_mul_overflow(have, dims[i], &have))
            return rt__cerr(cc, nd, RT_ESHAPE, "bad target dim %lld", (long long)dims[i]);
    }
    if (neg >= 0) {
        if (have == 0 || want % have)
            return rt__cerr(cc, nd, RT_ESHAPE, "cannot infer -1: %lld elements", (long long)want);
        dims[neg] = want / have;
        have = want;
    }
    if (have != want)
        return rt__cerr(cc, nd, RT_ESHAPE, "reshape of %lld elements into %lld", (long long)want,
                        (long long)have);
    nd->out.batched = x->batched;
    nd->out.ndim = nd_;
    for (int i = 0; i < nd_; i++)
        nd->out.d[i] = dims[i];
    return 0;
}

const rt__op_def rt__op_reshape = {
    .name = "Reshape",
    .min_in = 1,
    .max_in = 1,
    .infer = rt__reshape_infer,
    .flops = rt__numel_flops,
};

/* Flatten: (B, ...) -> (B, prod); without a batch, (d0, ...) -> (d0, prod) */
static int rt__flatten_infer(rt__cc *cc, rt__node *nd)
{
    const rt__shape *x = nd->in_shape[0];
    nd->out.batched = x->batched;
    if (x->batched) {
        nd->out.ndim = 1;
        nd->out.d[0] = rt__shape_numel(x);
    } else {
        if (x->ndim < 1)
            return rt__cerr(cc, nd, RT_ESHAPE, "cannot flatten a scalar");
        nd->out.ndim = 2;
        nd->out.d[0] = x->d[0];
        nd->out.d[1] = rt__shape_numel(x) / x->d[0];
    }
    return 0;
}

const rt__op_def rt__op_flatten = {
    .name = "Flatten",
    .min_in = 1,
    .max_in = 1,
    .infer = rt__flatten_infer,
    .flops = rt__numel_flops,
};

/* Dropout's noise_shape: ints counting the batch, each -1 (Keras' None:
 * the input's size), 1 (one draw shared along that dim) or the input's
 * size; the batch's -1 or 1 */
static int rt__noise_shape(rt__cc *cc, rt__node *nd, const rt__shape *x, rt__dropout_params *p)
{
    int ok = 1;
    int64_t ns[RT_MAX_DIMS + 1];
    const int r = x->ndim + 1;
    const int n = rt__attr_ints(cc, nd, "noise_shape", ns, RT_MAX_DIMS + 1, &ok);
    if (!ok)
        return RT_EINVAL;
    if (!x->batched || n != r)
        return rt__cerr(cc, nd, RT_ESHAPE, "noise_shape has %d entries, the input's rank is %d", n,
                        r);
    if (ns[0] != -1 && ns[0] != 1)
        return rt__cerr(cc, nd, RT_EINVAL, "noise_shape's batch entry must be null or 1");
    int64_t st = 1;
    for (int k = r - 1; k >= 1; k--) {
        const int64_t dim = x->d[k - 1];
        if (ns[k] != -1 && ns[k] != 1 && ns[k] != dim)
            return rt__cerr(cc, nd, RT_ESHAPE,
                            "noise_shape entry %d is %lld: it must be null, 1 or %lld", k,
                            (long long)ns[k], (long long)dim);
        p->d[k] = dim;
        p->ms[k] = ns[k] == 1 && dim != 1 ? 0 : st;
        st *= p->ms[k] ? dim : 1;
    }
    p->d[0] = -1;
    p->ms[0] = ns[0] == 1 ? 0 : st;
    p->R = r;
    return 0;
}

/* Dropout(x) attr rate in [0, 1), noise_shape (ints, optional, Keras'):
 * inverted dropout, as Keras.
 * SpatialDropout(x (B, ..., C)) rate: whole channels of a sample.
 * GaussianNoise(x) attr stddev >= 0; GaussianDropout(x) rate in [0, 1). */
static int rt__drop_infer_mode(rt__cc *cc, rt__node *nd, int mode)
{
    int ok = 1;
    const rt__shape *x = nd->in_shape[0];
    double rate = mode == RT__DROP_NOISE ? rt__attr_float(cc, nd, "stddev", 0.0, &ok)
                                         : rt__attr_float(cc, nd, "rate", 0.5, &ok);
    if (!ok)
        return RT_EINVAL;
    if (mode == RT__DROP_NOISE) {
        if (!(rate >= 0.0 && rate < 1e30))
            return rt__cerr(cc, nd, RT_EINVAL, "stddev %g must be >= 0", rate);
    } else if (!(rate >= 0.0 && rate < 1.0)) {
        return rt__cerr(cc, nd, RT_EINVAL, "rate %g outside [0, 1)", rate);
    }
    if (mode == RT__DROP_SPATIAL && (!x->batched || x->ndim < 2))
        return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' needs (B, ..., C) with a spatial axis",
                        nd->in_name[0]);
    rt__dropout_params *p = rt__dropout_p(nd);
    p->rate = rate;
    p->mode = mode;
    p->C = x->ndim ? x->d[x->ndim - 1] : 1;
    p->per = rt__shape_numel(x);
    nd->out = *x;
    if (mode == RT__DROP_PLAIN && rt__attr(nd, "noise_shape"))
        return rt__noise_shape(cc, nd, x, p);
    return 0;
}

static int rt__dropout_infer(rt__cc *cc, rt__node *nd)
{
    return rt__drop_infer_mode(cc, nd, RT__DROP_PLAIN);
}
static int rt__sdropout_infer(rt__cc *cc, rt__node *nd)
{
    return rt__drop_infer_mode(cc, nd, RT__DROP_SPATIAL);
}
static int rt__gnoise_infer(rt__cc *cc, rt__node *nd)
{
    return rt__drop_infer_mode(cc, nd, RT__DROP_NOISE);
}
static int rt__gdropout_infer(rt__cc *cc, rt__node *nd)
{
    return rt__drop_infer_mode(cc, nd, RT__DROP_GAUSS);
}

const rt__op_def rt__op_spatialdropout = {
    .name = "SpatialDropout",
    .min_in = 1,
    .max_in = 1,
    .params = RT__P_DROPOUT,
    .infer = rt__sdropout_infer,
    .flops = rt__numel_flops,
};
const rt__op_def rt__op_gaussiannoise = {
    .name = "GaussianNoise",
    .min_in = 1,
    .max_in = 1,
    .params = RT__P_DROPOUT,
    .infer = rt__gnoise_infer,
    .flops = rt__numel_flops,
};
const rt__op_def rt__op_gaussiandropout = {
    .name = "GaussianDropout",
    .min_in = 1,
    .max_in = 1,
    .params = RT__P_DROPOUT,
    .infer = rt__gdropout_infer,
    .flops = rt__numel_flops,
};

const rt__op_def rt__op_dropout = {
    .name = "Dropout",
    .min_in = 1,
    .max_in = 1,
    .params = RT__P_DROPOUT,
    .infer = rt__dropout_infer,
    .flops = rt__numel_flops,
};

/* ActivityReg(x) attrs l1, l2 >= 0 (floats), batch_mean (int, default 1):
 * y = x; the loss gains l1 sum|y| + l2 sum y^2 over the batch (divided by
 * the batch size when batch_mean), and dx = dy + its gradient. */
static int rt__actreg_infer(rt__cc *cc, rt__node *nd)
{
    int ok = 1;
    const double l1 = rt__attr_float(cc, nd, "l1", 0.0, &ok);
    const double l2 = rt__attr_float(cc, nd, "l2", 0.0, &ok);
    const int64_t bm = rt__attr_int(cc, nd, "batch_mean", 1, &ok);
    if (!ok)
        return RT_EINVAL;
    if (!(l1 >= 0.0 && l1 < 1e30) || !(l2 >= 0.0 && l2 < 1e30))
        return rt__cerr(cc, nd, RT_EINVAL, "l1 %g and l2 %g must be >= 0", l1, l2);
    if (bm != 0 && bm != 1)
        return rt__cerr(cc, nd, RT_EINVAL, "batch_mean %lld must be 0 or 1", (long long)bm);
    rt__actreg_params *p = rt__actreg_p(nd);
    p->l1 = l1;
    p->l2 = l2;
    p->batch_mean = (int)bm;
    nd->out = *nd->in_shape[0];
    return 0;
}

const rt__op_def rt__op_actreg = {
    .name = "ActivityReg",
    .min_in = 1,
    .max_in = 1,
    .bwd_needs_out = 1,
    .params = RT__P_ACTREG,
    .infer = rt__actreg_infer,
    .flops = rt__numel_flops,
};
