/*
 * op_shape.c - Pad, Transpose, ReduceMean/Sum/Max/Min/Prod (one index map each,
 * rt__map_params), Upsample and GlobalMaxPool: attributes, shape
 * inference and FLOP counts. Axis attributes count the batch as axis 0, as
 * ONNX does; the batch itself is never padded, moved or reduced.
 */
#include <string.h>
#include <strings.h>

#include "rt_engine_impl.h"

static int rt__need_batch(rt__cc *cc, rt__node *nd)
{
    const rt__shape *x = nd->in_shape[0];
    if (!x->batched)
        return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' needs a batch dim", nd->in_name[0]);
    return 0;
}

/* output strides of per-sample dims d[0..R) */
static void rt__strides(const int64_t *d, int R, int64_t *st)
{
    int64_t s = 1;
    for (int i = R - 1; i >= 0; i--) {
        st[i] = s;
        s *= d[i];
    }
}

static void rt__map_init(rt__map_params *p, const rt__shape *x)
{
    memset(p, 0, sizeof *p);
    p->R = x->ndim;
    for (int i = 0; i < x->ndim; i++) {
        p->d[i] = x->d[i];
        p->hi[i] = x->d[i];
    }
    p->in_numel = rt__shape_numel(x);
    p->scale = 1.0f;
}

static uint64_t rt__map_flops(const rt__node *nd, int64_t B, unsigned need_dx)
{
    const rt__map_params *p = rt__map_cp(nd);
    const uint64_t n = (uint64_t)B * (uint64_t)(p->in_numel + p->out_numel);
    return n + (need_dx ? n : 0);
}

/* Pad(x) attrs pads (ints, 2 * rank counting the batch: all begins, then
 * all ends, as ONNX; negative values crop; the batch's must be 0), mode
 * "constant" only, value (float, 0) */
static int rt__pad_infer(rt__cc *cc, rt__node *nd)
{
    int rc, ok = 1;
    if ((rc = rt__need_batch(cc, nd)) < 0)
        return rc;
    const rt__shape *x = nd->in_shape[0];
    const int r = x->ndim + 1;
    int64_t pads[2 * (RT_MAX_DIMS + 1)];
    int n = rt__attr_ints(cc, nd, "pads", pads, 2 * (RT_MAX_DIMS + 1), &ok);
    const char *mode = rt__attr_str(cc, nd, "mode", "constant", &ok);
    const double value = rt__attr_float(cc, nd, "value", 0.0, &ok);
    if (!ok)
        return RT_EINVAL;
    if (strcasecmp(mode, "constant") != 0)
        return rt__cerr(cc, nd, RT_EUNIMPLEMENTED, "mode '%.20s': only 'constant' is supported",
                        mode);
    if (n != 2 * r)
        return rt__cerr(cc, nd, RT_EINVAL, "pads needs %d values (begins, then ends), got %d",
                        2 * r, n);
    if (pads[0] || pads[r])
        return rt__cerr(cc, nd, RT_EINVAL, "the batch dim cannot be padded");
    rt__map_params *p = rt__map_p(nd);
    rt__map_init(p, x);
    p->value = (float)value;
    rt__shape out = *x;
    for (int i = 0; i < x->ndim; i++) {
        const int64_t b = pads[i + 1], e = pads[r + i + 1];
        if (b < -RT__MAX_NUMEL || b > RT__MAX_NUMEL || e < -RT__MAX_NUMEL || e > RT__MAX_NUMEL ||
            x->d[i] + b + e < 1)
            return rt__cerr(cc, nd, RT_ESHAPE, "pads %lld, %lld leave dim %d of %lld empty",
                            (long long)b, (long long)e, i + 1, (long long)x->d[i]);
        out.d[i] = x->d[i] + b + e;
        if (b > 0 || e > 0)
            p->fill = 1;
    }
    nd->out = out;
    int64_t st[RT_MAX_DIMS];
    rt__strides(out.d, out.ndim, st);
    for (int i = 0; i < x->ndim; i++) {
        const int64_t b = pads[i + 1], e = pads[r + i + 1];
        p->os[i] = st[i];
        p->lo[i] = b < 0 ? -b : 0;
        p->hi[i] = e < 0 ? x->d[i] + e : x->d[i];
        p->base += b * st[i];
    }
    p->out_numel = rt__shape_numel(&out);
    return 0;
}

const rt__op_def rt__op_pad = {
    .name = "Pad",
    .min_in = 1,
    .max_in = 1,
    .params = RT__P_MAP,
    .infer = rt__pad_infer,
    .flops = rt__map_flops,
};

/* Transpose(x) attr perm (ints, rank counting the batch; perm[0] = 0) */
static int rt__transpose_infer(rt__cc *cc, rt__node *nd)
{
    int rc, ok = 1;
    if ((rc = rt__need_batch(cc, nd)) < 0)
        return rc;
    const rt__shape *x = nd->in_shape[0];
    const int r = x->ndim + 1;
    int64_t perm[RT_MAX_DIMS + 1];
    int n = rt__attr_ints(cc, nd, "perm", perm, RT_MAX_DIMS + 1, &ok);
    if (!ok)
        return RT_EINVAL;
    if (n < 0) { /* ONNX's default: reverse the (per-sample) dims */
        n = r;
        perm[0] = 0;
        for (int i = 1; i < r; i++)
            perm[i] = r - i;
    }
    if (n != r)
        return rt__cerr(cc, nd, RT_EINVAL, "perm has %d entries, the input rank is %d", n, r);
    if (perm[0] != 0)
        return rt__cerr(cc, nd, RT_EINVAL, "perm[0] must be 0 (the batch stays first)");
    int seen[RT_MAX_DIMS + 1] = {0};
    for (int i = 1; i < r; i++) {
        if (perm[i] < 1 || perm[i] >= r || seen[perm[i]]++)
            return rt__cerr(cc, nd, RT_EINVAL, "perm is not a permutation of 0..%d", r - 1);
    }
    rt__map_params *p = rt__map_p(nd);
    rt__map_init(p, x);
    rt__shape out = *x;
    for (int j = 0; j + 1 < r; j++)
        out.d[j] = x->d[perm[j + 1] - 1];
    int64_t st[RT_MAX_DIMS];
    rt__strides(out.d, out.ndim, st);
    for (int j = 0; j + 1 < r; j++)
        p->os[perm[j + 1] - 1] = st[j];
    p->out_numel = p->in_numel;
    nd->out = out;
    return 0;
}

const rt__op_def rt__op_transpose = {
    .name = "Transpose",
    .min_in = 1,
    .max_in = 1,
    .params = RT__P_MAP,
    .infer = rt__transpose_infer,
    .flops = rt__map_flops,
};

/* ReduceMean/ReduceSum/ReduceMax/ReduceMin/ReduceProd(x) attrs axes (ints
 * counting the batch, negative from the end; absent: every non-batch axis),
 * keepdims (int, 1). The gradients follow TensorFlow's math_grad.py: Max
 * and Min share dy equally among the inputs equal to the result (ties
 * split), Prod's is dy times the product of the other inputs (exact with
 * zeros: no division by an input that is 0). */
static int rt__reduce_infer(rt__cc *cc, rt__node *nd, int mean, int comb)
{
    int rc, ok = 1;
    if ((rc = rt__need_batch(cc, nd)) < 0)
        return rc;
    const rt__shape *x = nd->in_shape[0];
    const int r = x->ndim + 1;
    int64_t axes[RT_MAX_DIMS + 1];
    int n = rt__attr_ints(cc, nd, "axes", axes, RT_MAX_DIMS + 1, &ok);
    const int64_t keep = rt__attr_int(cc, nd, "keepdims", 1, &ok);
    if (!ok)
        return RT_EINVAL;
    if (n > r)
        return rt__cerr(cc, nd, RT_EINVAL, "more axes than dims");
    int red[RT_MAX_DIMS] = {0};
    if (n < 0) {
        for (int i = 0; i < x->ndim; i++)
            red[i] = 1;
    } else {
        for (int i = 0; i < n; i++) {
            int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
            if (a == 0)
                return rt__cerr(cc, nd, RT_EINVAL, "axis 0 (the batch) cannot be reduced");
            if (a < 0 || a >= r || red[a - 1])
                return rt__cerr(cc, nd, RT_EINVAL, "axis %lld is outside 1..%d or repeated",
                                (long long)axes[i], r - 1);
            red[a - 1] = 1;
        }
    }
    rt__map_params *p = rt__map_p(nd);
    rt__map_init(p, x);
    p->reduce = 1;
    p->comb = comb;
    rt__shape out = {.batched = 1};
    int64_t cnt = 1, full[RT_MAX_DIMS], st[RT_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) {
        full[i] = red[i] ? 1 : x->d[i];
        if (red[i])
            cnt *= x->d[i];
        if (!red[i] || keep)
            out.d[out.ndim++] = full[i];
    }
    rt__strides(full, x->ndim, st);
    for (int i = 0; i < x->ndim; i++)
        p->os[i] = red[i] ? 0 : st[i];
    p->scale = mean ? (float)(1.0 / (double)cnt) : 1.0f;
    p->out_numel = rt__shape_numel(&out);
    nd->out = out;
    return 0;
}

/* Max, Min and Prod's backward reads x and y: which inputs are the max
 * (min), and the product of the others */
#define RT__REDUCE_OP(var, nm, mean, comb, reads)        \
    static int rt__infer_##var(rt__cc *cc, rt__node *nd) \
    {                                                    \
        return rt__reduce_infer(cc, nd, mean, comb);     \
    }                                                    \
    const rt__op_def rt__op_##var = {                    \
        .name = nm,                                      \
        .min_in = 1,                                     \
        .max_in = 1,                                     \
        .bwd_needs_in = (reads) ? 1u : 0u,               \
        .bwd_needs_out = reads,                          \
        .params = RT__P_MAP,                             \
        .infer = rt__infer_##var,                        \
        .flops = rt__map_flops,                          \
    };

RT__REDUCE_OP(reducemean, "ReduceMean", 1, RT__COMB_SUM, 0)
RT__REDUCE_OP(reducesum, "ReduceSum", 0, RT__COMB_SUM, 0)
RT__REDUCE_OP(reducemax, "ReduceMax", 0, RT__COMB_MAX, 1)
RT__REDUCE_OP(reducemin, "ReduceMin", 0, RT__COMB_MIN, 1)
RT__REDUCE_OP(reduceprod, "ReduceProd", 0, RT__COMB_PROD, 1)

/* Upsample(x (B,H,W,C)) attrs scales (ints, 1 or 2 values >= 1), mode
 * "nearest" (default) or "bilinear" */
static int rt__upsample_infer(rt__cc *cc, rt__node *nd)
{
    int ok = 1;
    const rt__shape *x = nd->in_shape[0];
    if (!x->batched || x->ndim != 3)
        return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' must be (B,H,W,C)", nd->in_name[0]);
    int64_t s[2];
    int n = rt__attr_ints(cc, nd, "scales", s, 2, &ok);
    const char *mode = rt__attr_str(cc, nd, "mode", "nearest", &ok);
    if (!ok)
        return RT_EINVAL;
    if (n == 1)
        s[1] = s[0];
    else if (n != 2)
        return rt__cerr(cc, nd, RT_EINVAL, "scales needs 1 or 2 values");
    if (s[0] < 1 || s[1] < 1 || s[0] > RT__MAX_WINDOW || s[1] > RT__MAX_WINDOW)
        return rt__cerr(cc, nd, RT_EINVAL, "scales (%lld, %lld) must be >= 1", (long long)s[0],
                        (long long)s[1]);
    rt__upsample_params *p = rt__upsample_p(nd);
    if (!strcasecmp(mode, "nearest"))
        p->bilinear = 0;
    else if (!strcasecmp(mode, "bilinear") || !strcasecmp(mode, "linear"))
        p->bilinear = 1;
    else
        return rt__cerr(cc, nd, RT_EINVAL, "mode '%.20s' is neither nearest nor bilinear", mode);
    p->H = x->d[0];
    p->W = x->d[1];
    p->C = x->d[2];
    p->SH = s[0];
    p->SW = s[1];
    int64_t oh, ow, tot;
    if (__builtin_mul_overflow(p->H, s[0], &oh) || __builtin_mul_overflow(p->W, s[1], &ow) ||
        __builtin_mul_overflow(oh, ow, &tot) || __builtin_mul_overflow(tot, p->C, &tot) ||
        tot > RT__MAX_NUMEL)
        return rt__cerr(cc, nd, RT_EOVERFLOW, "output exceeds 2^32 values per sample");
    nd->out = (rt__shape){.ndim = 3, .batched = 1, .d = {oh, ow, p->C}};
    return 0;
}

static uint64_t rt__upsample_flops(const rt__node *nd, int64_t B, unsigned need_dx)
{
    const uint64_t n = (uint64_t)rt__numel_n(&nd->out, B) * 4;
    return n + (need_dx ? n : 0);
}

const rt__op_def rt__op_upsample = {
    .name = "Upsample",
    .min_in = 1,
    .max_in = 1,
    .params = RT__P_UPSAMPLE,
    .infer = rt__upsample_infer,
    .flops = rt__upsample_flops,
};

/* GlobalMaxPool(x (B, ..., C)) -> (B, C), attr keepdims (int): every dim
 * but the channels kept as 1. The gradient goes to the first maximum. */
static int rt__gmp_infer(rt__cc *cc, rt__node *nd)
{
    int ok = 1;
    const rt__shape *x = nd->in_shape[0];
    if (!x->batched || x->ndim < 2)
        return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' must be (B, ..., C) with a spatial axis",
                        nd->in_name[0]);
    const int64_t keep = rt__attr_int(cc, nd, "keepdims", 0, &ok);
    if (!ok)
        return RT_EINVAL;
    rt__gap_params *p = rt__gap_p(nd);
    p->C = x->d[x->ndim - 1];
    p->HW = rt__shape_numel(x) / p->C;
    if (keep) {
        nd->out = *x;
        for (int i = 0; i + 1 < x->ndim; i++)
            nd->out.d[i] = 1;
    } else {
        nd->out = (rt__shape){.ndim = 1, .batched = 1, .d = {p->C}};
    }
    return 0;
}

static uint64_t rt__gmp_flops(const rt__node *nd, int64_t B, unsigned need_dx)
{
    const rt__gap_params *p = rt__gap_cp(nd);
    const uint64_t n = (uint64_t)B * (uint64_t)(p->HW * p->C);
    return n + (need_dx ? n : 0);
}

const rt__op_def rt__op_globalmaxpool = {
    .name = "GlobalMaxPool",
    .min_in = 1,
    .max_in = 1,
    .bwd_needs_in = 1u,
    .params = RT__P_GAP,
    .infer = rt__gmp_infer,
    .flops = rt__gmp_flops,
};
