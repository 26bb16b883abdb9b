/*
 * op_norm.c - BatchNorm, LayerNormalization and Concat: shape inference, typed parameters and
 * FLOP counts. The CPU kernels are in server/kernels/cpu/.
 */
#include <string.h>

#include "rt_engine_impl.h"

/* BatchNorm(x (B,...,C), gamma, beta, moving_mean, moving_var), all (C),
 * over the last axis. attrs momentum (0.99), epsilon (1e-3), axis (-1 or
 * the last axis counting the batch, as Keras), frozen (int: inference mode
 * also while training, as Keras does for trainable=False), unbiased (int:
 * the moving variance moves towards the batch's unbiased variance, as
 * PyTorch's does; the ONNX importer sets it), synchronized (int: under
 * MPI replicas the statistics are the global batch's, all-reduced, as
 * Keras' SyncBatchNormalization; a single process ignores it). The moving
 * statistics must be non-trainable parameters: a training step's forward
 * pass updates them (rt_exec_compute_grads' does not). */
static int rt__bn_infer(rt__cc *cc, rt__node *nd)
{
    const rt__shape *x = nd->in_shape[0];
    if (!x->batched || x->ndim < 1)
        return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' needs a batch and a channel axis",
                        nd->in_name[0]);
    const int64_t C = x->d[x->ndim - 1];
    static const char *what[] = {"", "gamma", "beta", "moving_mean", "moving_var"};
    for (int i = 1; i < 5; i++) {
        const rt__shape *s = nd->in_shape[i];
        if (s->batched || s->ndim != 1 || s->d[0] != C)
            return rt__cerr(cc, nd, RT_ESHAPE, "%s '%s' must be (%lld)", what[i], nd->in_name[i],
                            (long long)C);
    }
    int ok = 1;
    const double mom = rt__attr_float(cc, nd, "momentum", 0.99, &ok);
    const double eps = rt__attr_float(cc, nd, "epsilon", 1e-3, &ok);
    const int64_t axis = rt__attr_int(cc, nd, "axis", -1, &ok);
    const int64_t frozen = rt__attr_int(cc, nd, "frozen", 0, &ok);
    const int64_t unbiased = rt__attr_int(cc, nd, "unbiased", 0, &ok);
    const int64_t sync = rt__attr_int(cc, nd, "synchronized", 0, &ok);
    if (!ok)
        return RT_EINVAL;
    if (!(mom >= 0.0 && mom <= 1.0))
        return rt__cerr(cc, nd, RT_EINVAL, "momentum %g outside [0, 1]", mom);
    if (!(eps > 0.0) || eps > 1e10)
        return rt__cerr(cc, nd, RT_EINVAL, "epsilon %g must be > 0", eps);
    if (axis != -1 && axis != x->ndim)
        return rt__cerr(cc, nd, RT_EUNIMPLEMENTED,
                        "axis %lld: only the last (channels) axis is supported", (long long)axis);
    rt__bn_params *p = rt__bn_p(nd);
    p->C = C;
    p->frozen = frozen != 0;
    p->unbiased = unbiased != 0;
    p->sync = sync != 0;
    p->momentum = mom;
    p->eps = eps;
    nd->out = *x;
    return 0;
}

static uint64_t rt__bn_flops(const rt__node *nd, int64_t B, unsigned need_dx)
{
    const uint64_t n = (uint64_t)rt__numel_n(&nd->out, B);
    return 5 * n + (need_dx ? 8 * n : 0);
}

const rt__op_def rt__op_batchnorm = {
    .name = "BatchNorm",
    .min_in = 5,
    .max_in = 5,
    .bwd_needs_in = 1u | 2u, /* x (statistics are recomputed), gamma */
    .no_grad_in = 8u | 16u,  /* the moving statistics */
    .params = RT__P_BN,
    .infer = rt__bn_infer,
    .flops = rt__bn_flops,
};

/* LayerNormalization(x (B,...,C), gamma (C)?, beta (C)?) over the last
 * axis, as Keras' LayerNormalization(axis=-1) and ONNX's (axis -1): attrs
 * epsilon (1e-3, Keras' default), axis (-1 or the last counting the
 * batch), scale and center (ints, 1: whether gamma, then beta, are given) */
static int rt__ln_infer(rt__cc *cc, rt__node *nd)
{
    const rt__shape *x = nd->in_shape[0];
    if (!x->batched || x->ndim < 1)
        return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' needs a batch and a channel axis",
                        nd->in_name[0]);
    int ok = 1;
    const double eps = rt__attr_float(cc, nd, "epsilon", 1e-3, &ok);
    const int64_t axis = rt__attr_int(cc, nd, "axis", -1, &ok);
    const int64_t scale = rt__attr_int(cc, nd, "scale", 1, &ok);
    const int64_t center = rt__attr_int(cc, nd, "center", 1, &ok);
    if (!ok)
        return RT_EINVAL;
    if (!(eps > 0.0) || eps > 1e10)
        return rt__cerr(cc, nd, RT_EINVAL, "epsilon %g must be > 0", eps);
    if (axis != -1 && axis != x->ndim)
        return rt__cerr(cc, nd, RT_EUNIMPLEMENTED, "axis %lld: only the last axis is supported",
                        (long long)axis);
    const int want = 1 + (scale != 0) + (center != 0);
    if (nd->n_in != want)
        return rt__cerr(cc, nd, RT_EINVAL, "takes %d inputs with scale=%d center=%d, got %d", want,
                        scale != 0, center != 0, nd->n_in);
    const int64_t C = x->d[x->ndim - 1];
    for (int i = 1; i < nd->n_in; i++) {
        const rt__shape *s = nd->in_shape[i];
        if (s->batched || s->ndim != 1 || s->d[0] != C)
            return rt__cerr(cc, nd, RT_ESHAPE, "'%s' must be (%lld)", nd->in_name[i], (long long)C);
    }
    rt__ln_params *p = rt__ln_p(nd);
    p->C = C;
    p->eps = eps;
    p->scale = scale != 0;
    p->center = center != 0;
    nd->out = *x;
    return 0;
}

const rt__op_def rt__op_layernorm = {
    .name = "LayerNormalization",
    .min_in = 1,
    .max_in = 3,
    .bwd_needs_in = 1u | 2u, /* x (statistics are recomputed), gamma */
    .params = RT__P_LN,
    .infer = rt__ln_infer,
    .flops = rt__bn_flops,
};

/* Concat(a, b, ...) attr axis (default -1; counts the batch as axis 0, as
 * Keras' Concatenate): every input has the same dims except the axis. */
static int rt__concat_infer(rt__cc *cc, rt__node *nd)
{
    const rt__shape *x0 = nd->in_shape[0];
    int ok = 1;
    int64_t axis = rt__attr_int(cc, nd, "axis", -1, &ok);
    if (!ok)
        return RT_EINVAL;
    for (int i = 0; i < nd->n_in; i++)
        if (!nd->in_shape[i]->batched || nd->in_shape[i]->ndim != x0->ndim)
            return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' must have a batch and rank %d",
                            nd->in_name[i], x0->ndim + 1);
    const int64_t rank = x0->ndim + 1;
    if (axis < 0)
        axis += rank;
    if (axis <= 0 || axis >= rank)
        return rt__cerr(cc, nd, RT_EINVAL, "axis %lld outside 1..%lld (0 is the batch)",
                        (long long)rt__attr_int(cc, nd, "axis", -1, &ok), (long long)rank - 1);
    const int ax = (int)axis - 1;
    rt__shape out = *x0;
    out.d[ax] = 0;
    for (int i = 0; i < nd->n_in; i++) {
        const rt__shape *s = nd->in_shape[i];
        for (int d = 0; d < s->ndim; d++)
            if (d != ax && s->d[d] != x0->d[d])
                return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' has dim %d = %lld, '%s' has %lld",
                                nd->in_name[i], d + 1, (long long)s->d[d], nd->in_name[0],
                                (long long)x0->d[d]);
        out.d[ax] += s->d[ax];
    }
    int64_t outer = 1, after = 1;
    for (int d = 0; d < ax; d++)
        outer *= x0->d[d];
    for (int d = ax + 1; d < x0->ndim; d++)
        after *= x0->d[d];
    rt__concat_params *p = rt__concat_p(nd);
    p->k = nd->n_in;
    p->outer = outer;
    p->inner = out.d[ax] * after;
    for (int i = 0; i < nd->n_in; i++)
        p->in_inner[i] = nd->in_shape[i]->d[ax] * after;
    nd->out = out;
    return 0;
}

static uint64_t rt__concat_flops(const rt__node *nd, int64_t B, unsigned need_dx)
{
    const uint64_t n = (uint64_t)rt__numel_n(&nd->out, B);
    return n + (need_dx ? n : 0);
}

const rt__op_def rt__op_concat = {
    .name = "Concat",
    .min_in = 1,
    .max_in = RT__MAX_IN,
    .params = RT__P_CONCAT,
    .infer = rt__concat_infer,
    .flops = rt__concat_flops,
};
