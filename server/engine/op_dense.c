/*
 * op_dense.c - Dense and MatMul: shape inference and FLOP counts. Kernels
 * are in server/kernels/cpu/rt_kern_dense.c.
 *
 * This file is the model for adding an op: an infer function that checks
 * inputs/attributes and sets nd->out, a flops function, and one
 * const rt__op_def, listed in RT__OP_LIST (rt_engine_impl.h).
 */
#include <string.h>

#include "cpu/rt_kern_cpu.h"
#include "rt_engine_impl.h"

static int rt__act_from_str(const char *s, int *act)
{
    if (!s || !strcmp(s, "linear") || !strcmp(s, "") || !strcmp(s, "none")) *act = RT__ACT_NONE;
    else if (!strcmp(s, "relu")) *act = RT__ACT_RELU;
    else if (!strcmp(s, "sigmoid")) *act = RT__ACT_SIGMOID;
    else if (!strcmp(s, "tanh")) *act = RT__ACT_TANH;
    else return -1;
    return 0;
}

/* Dense(x (...,K), W (K,N), b (N)?) attr activation ("relu"|"sigmoid"|
 * "tanh"|"linear", optional, as Keras' Dense(activation=...)) */
static int rt__dense_infer(rt__cc *cc, rt__node *nd)
{
    const rt__shape *x = nd->in_shape[0], *w = nd->in_shape[1];
    if (x->ndim < 1)
        return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' is a scalar per sample",
                        nd->in_name[0]);
    if (w->batched || w->ndim != 2)
        return rt__cerr(cc, nd, RT_ESHAPE, "kernel '%s' must be 2-D (in, out)",
                        nd->in_name[1]);
    const int64_t K = w->d[0], N = w->d[1];
    if (x->d[x->ndim - 1] != K)
        return rt__cerr(cc, nd, RT_ESHAPE,
                        "input '%s' has %lld features, W expects %lld",
                        nd->in_name[0], (long long)x->d[x->ndim - 1], (long long)K);
    if (nd->n_in > 2) {
        const rt__shape *b = nd->in_shape[2];
        if (b->batched || b->ndim != 1 || b->d[0] != N)
            return rt__cerr(cc, nd, RT_ESHAPE, "bias '%s' must be (%lld)",
                            nd->in_name[2], (long long)N);
    }
    int ok = 1;
    const char *act = rt__attr_str(cc, nd, "activation", NULL, &ok);
    if (!ok) return RT_EINVAL;
    if (rt__act_from_str(act, &nd->act) < 0)
        return rt__cerr(cc, nd, RT_EINVAL, "unknown activation '%s'", act);
    nd->out = *x;
    nd->out.d[x->ndim - 1] = N;
    nd->ia[0] = K;
    nd->ia[1] = N;
    if (nd->act) nd->scratch_per_sample = rt__shape_numel(&nd->out);
    if (nd->act && !x->batched) nd->scratch_fixed = rt__shape_numel(&nd->out);
    return 0;
}

static uint64_t rt__dense_flops(const rt__node *nd, int64_t B, unsigned need_dx)
{
    uint64_t R = (uint64_t)rt__rows(nd->in_shape[0], B);
    uint64_t K = (uint64_t)nd->ia[0], N = (uint64_t)nd->ia[1];
    uint64_t f = 2 * R * K * N + (nd->n_in > 2 ? R * N : 0) + (nd->act ? R * N : 0);
    if (need_dx & 1u) f += 2 * R * K * N;
    if (need_dx & 2u) f += 2 * R * K * N;
    if (need_dx & 4u) f += R * N;
    return f;
}

const rt__op_def rt__op_dense = {
    .name = "Dense",
    .min_in = 2,
    .max_in = 3,
    .bwd_needs_in = 3u, /* x for dW, W for dx */
    .bwd_needs_out = 0, /* set per node when an activation is fused */
    .infer = rt__dense_infer,
    .flops = rt__dense_flops,
    .cpu = {rt_kern_dense_fwd, rt_kern_dense_bwd},
};

/* MatMul(a (M,K), b (K,N)): a may carry the batch as M; b may not. */
static int rt__matmul_infer(rt__cc *cc, rt__node *nd)
{
    const rt__shape *x = nd->in_shape[0], *w = nd->in_shape[1];
    if (x->ndim + x->batched != 2)
        return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' must be 2-D",
                        nd->in_name[0]);
    if (w->batched || w->ndim != 2)
        return rt__cerr(cc, nd, RT_ESHAPE,
                        "input '%s' must be 2-D without the batch dim",
                        nd->in_name[1]);
    const int64_t K = w->d[0], N = w->d[1];
    if (x->d[x->ndim - 1] != K)
        return rt__cerr(cc, nd, RT_ESHAPE, "'%s' has %lld columns, '%s' has %lld rows",
                        nd->in_name[0], (long long)x->d[x->ndim - 1],
                        nd->in_name[1], (long long)K);
    nd->out = *x;
    nd->out.d[x->ndim - 1] = N;
    nd->ia[0] = K;
    nd->ia[1] = N;
    return 0;
}

const rt__op_def rt__op_matmul = {
    .name = "MatMul",
    .min_in = 2,
    .max_in = 2,
    .bwd_needs_in = 3u,
    .infer = rt__matmul_infer,
    .flops = rt__dense_flops,
    .cpu = {rt_kern_dense_fwd, rt_kern_dense_bwd},
};
