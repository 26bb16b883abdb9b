/*
 * op_dense.c - Dense and MatMul: shape inference, typed parameters and
 * FLOP counts. Each backend has their kernels (the CPU's are in
 * server/kernels/cpu/, registered in its one table).
 *
 * This file is the model for adding an op: an infer function that checks
 * inputs/attributes, sets nd->out and the typed parameters (rt__dense_p),
 * a flops function, and one const rt__op_def, listed in RT__OP_LIST
 * (rt_engine_impl.h). Gradients need nothing more: compile derives the
 * backward calls from bwd_needs_in/bwd_needs_out/no_grad_in.
 */
#include <string.h>

#include "rt_engine_impl.h"

int rt__attr_act(rt__cc *cc, const rt__node *nd, int *act)
{
    int ok = 1;
    const char *s = rt__attr_str(cc, nd, "activation", NULL, &ok);
    if (!ok)
        return RT_EINVAL;
    if (!s || !strcmp(s, "linear") || !strcmp(s, "") || !strcmp(s, "none"))
        *act = RT__ACT_NONE;
    else if (!strcmp(s, "relu"))
        *act = RT__ACT_RELU;
    else if (!strcmp(s, "sigmoid"))
        *act = RT__ACT_SIGMOID;
    else if (!strcmp(s, "tanh"))
        *act = RT__ACT_TANH;
    else
        return rt__cerr(cc, nd, RT_EINVAL, "unknown activation '%s'", s);
    return 0;
}

/* Dense(x (...,K), W (K,N), b (N)?) attr activation ("relu"|"sigmoid"|
 * "tanh"|"linear", optional, as Keras' Dense(activation=...)) */
static int rt__dense_infer(rt__cc *cc, rt__node *nd)
{
    const rt__shape *x = nd->in_shape[0], *w = nd->in_shape[1];
    if (x->ndim < 1)
        return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' is a scalar per sample", nd->in_name[0]);
    if (w->batched || w->ndim != 2)
        return rt__cerr(cc, nd, RT_ESHAPE, "kernel '%s' must be 2-D (in, out)", nd->in_name[1]);
    const int64_t K = w->d[0], N = w->d[1];
    if (x->d[x->ndim - 1] != K)
        return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' has %lld features, W expects %lld",
                        nd->in_name[0], (long long)x->d[x->ndim - 1], (long long)K);
    if (nd->n_in > 2) {
        const rt__shape *b = nd->in_shape[2];
        if (b->batched || b->ndim != 1 || b->d[0] != N)
            return rt__cerr(cc, nd, RT_ESHAPE, "bias '%s' must be (%lld)", nd->in_name[2],
                            (long long)N);
    }
    rt__dense_params *p = rt__dense_p(nd);
    int rc = rt__attr_act(cc, nd, &p->act);
    if (rc < 0)
        return rc;
    nd->bwd_needs_out = p->act != RT__ACT_NONE;
    nd->out = *x;
    nd->out.d[x->ndim - 1] = N;
    p->K = K;
    p->N = N;
    return 0;
}

uint64_t rt__gemm_flops(uint64_t R, uint64_t K, uint64_t N, int bias, int act, unsigned need_dx)
{
    uint64_t f = 2 * R * K * N + (bias ? R * N : 0) + (act ? R * N : 0);
    if (need_dx & 1u)
        f += 2 * R * K * N;
    if (need_dx & 2u)
        f += 2 * R * K * N;
    if (need_dx & 4u)
        f += R * N;
    return f;
}

static uint64_t rt__dense_flops(const rt__node *nd, int64_t B, unsigned need_dx)
{
    uint64_t R = (uint64_t)rt__rows(nd->in_shape[0], B);
    const rt__dense_params *p = rt__dense_cp(nd);
    uint64_t K = (uint64_t)p->K, N = (uint64_t)p->N;
    /* an activation of its own, or one a backend fused into it */
    const int act = p->act != RT__ACT_NONE || nd->fused != NULL;
    return rt__gemm_flops(R, K, N, nd->n_in > 2, act, need_dx);
}

const rt__op_def rt__op_dense = {
    .name = "Dense",
    .min_in = 2,
    .max_in = 3,
    .bwd_needs_in = 3u, /* x for dW, W for dx */
    .bwd_needs_out = 0, /* set per node when it has an activation */
    .params = RT__P_DENSE,
    .infer = rt__dense_infer,
    .flops = rt__dense_flops,
};

/* MatMul(a (M,K), b (K,N)): a may carry the batch as M; b may not. */
static int rt__matmul_infer(rt__cc *cc, rt__node *nd)
{
    const rt__shape *x = nd->in_shape[0], *w = nd->in_shape[1];
    if (x->ndim + x->batched != 2)
        return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' must be 2-D", nd->in_name[0]);
    if (w->batched || w->ndim != 2)
        return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' must be 2-D without the batch dim",
                        nd->in_name[1]);
    const int64_t K = w->d[0], N = w->d[1];
    if (x->d[x->ndim - 1] != K)
        return rt__cerr(cc, nd, RT_ESHAPE, "'%s' has %lld columns, '%s' has %lld rows",
                        nd->in_name[0], (long long)x->d[x->ndim - 1], nd->in_name[1], (long long)K);
    nd->out = *x;
    nd->out.d[x->ndim - 1] = N;
    rt__dense_p(nd)->K = K;
    rt__dense_p(nd)->N = N;
    return 0;
}

const rt__op_def rt__op_matmul = {
    .name = "MatMul",
    .min_in = 2,
    .max_in = 2,
    .bwd_needs_in = 3u,
    .params = RT__P_DENSE,
    .infer = rt__matmul_infer,
    .flops = rt__dense_flops,
};
