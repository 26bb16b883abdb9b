/*
 * op_bmm.c - BatchMatMul: the matrix product of two activations over
 * their leading dims (attention's query x key and scores x value, Keras'
 * Dot) and BandMask (attention's causal and sliding-window masks). Shape
 * inference, typed parameters and FLOP counts; the kernels are each
 * backend's.
 */
#include "rt_engine_impl.h"

/* BatchMatMul(a (..., M, K), b (..., K, N)) attrs transpose_a,
 * transpose_b (ints 0/1: that input is stored (K, M) / (N, K)). a and b
 * are both batched or both not, with equal leading dims; y (..., M, N). */
static int rt__bmm_infer(rt__cc *cc, rt__node *nd)
{
    const rt__shape *a = nd->in_shape[0], *b = nd->in_shape[1];
    int ok = 1;
    const int64_t ta = rt__attr_int(cc, nd, "transpose_a", 0, &ok);
    const int64_t tb = ok ? rt__attr_int(cc, nd, "transpose_b", 0, &ok) : 0;
    if (!ok)
        return RT_EINVAL;
    if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
        return rt__cerr(cc, nd, RT_EINVAL, "transpose_a/transpose_b must be 0 or 1");
    if (a->ndim < 2 || b->ndim < 2)
        return rt__cerr(cc, nd, RT_ESHAPE, "inputs need 2 matrix dims (per sample)");
    if (a->batched != b->batched || a->ndim != b->ndim)
        return rt__cerr(cc, nd, RT_ESHAPE,
                        "'%s' and '%s' need the same rank and both or neither batched",
                        nd->in_name[0], nd->in_name[1]);
    int64_t G = 1;
    for (int i = 0; i + 2 < a->ndim; i++) {
        if (a->d[i] != b->d[i])
            return rt__cerr(cc, nd, RT_ESHAPE, "leading dim %d differs: %lld vs %lld", i,
                            (long long)a->d[i], (long long)b->d[i]);
        G *= a->d[i];
    }
    const int r = a->ndim;
    const int64_t M = ta ? a->d[r - 1] : a->d[r - 2], Ka = ta ? a->d[r - 2] : a->d[r - 1];
    const int64_t Kb = tb ? b->d[r - 1] : b->d[r - 2], N = tb ? b->d[r - 2] : b->d[r - 1];
    if (Ka != Kb)
        return rt__cerr(cc, nd, RT_ESHAPE, "'%s' gives %lld columns, '%s' %lld rows",
                        nd->in_name[0], (long long)Ka, nd->in_name[1], (long long)Kb);
    rt__bmm_params *p = rt__bmm_p(nd);
    p->G = G;
    p->M = M;
    p->N = N;
    p->K = Ka;
    p->ta = (int)ta;
    p->tb = (int)tb;
    nd->out = *a;
    nd->out.d[r - 2] = M;
    nd->out.d[r - 1] = N;
    return 0;
}

static uint64_t rt__bmm_flops(const rt__node *nd, int64_t B, unsigned need_dx)
{
    const rt__bmm_params *p = rt__bmm_cp(nd);
    const uint64_t one = 2 * (uint64_t)(p->G * (nd->in_shape[0]->batched ? B : 1)) *
                         (uint64_t)p->M * (uint64_t)p->N * (uint64_t)p->K;
    return one * (1 + ((need_dx & 1u) != 0) + ((need_dx & 2u) != 0));
}

const rt__op_def rt__op_batchmatmul = {
    .name = "BatchMatMul",
    .min_in = 2,
    .max_in = 2,
    .bwd_needs_in = 3u, /* each input's gradient reads the other */
    .params = RT__P_BMM,
    .infer = rt__bmm_infer,
    .flops = rt__bmm_flops,
};

/* BandMask(x (..., T, S)) attrs causal (int 0/1), window (int >= 0, 0:
 * none): where(keep(i, j), x, -1e9) over the last two dims; the gradient
 * passes where kept */
static int rt__band_infer(rt__cc *cc, rt__node *nd)
{
    const rt__shape *x = nd->in_shape[0];
    int ok = 1;
    const int64_t causal = rt__attr_int(cc, nd, "causal", 0, &ok);
    const int64_t window = ok ? rt__attr_int(cc, nd, "window", 0, &ok) : 0;
    if (!ok)
        return RT_EINVAL;
    if ((causal != 0 && causal != 1) || window < 0)
        return rt__cerr(cc, nd, RT_EINVAL, "causal must be 0 or 1 and window >= 0");
    if (x->ndim < 2)
        return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' needs (..., T, S)", nd->in_name[0]);
    rt__band_params *p = rt__band_p(nd);
    p->T = x->d[x->ndim - 2];
    p->S = x->d[x->ndim - 1];
    p->causal = (int)causal;
    p->window = window;
    nd->out = *x;
    return 0;
}

static uint64_t rt__band_flops(const rt__node *nd, int64_t B, unsigned need_dx)
{
    const uint64_t n = (uint64_t)rt__numel_n(&nd->out, B);
    return need_dx ? 2 * n : n;
}

const rt__op_def rt__op_bandmask = {
    .name = "BandMask",
    .min_in = 1,
    .max_in = 1,
    .params = RT__P_BAND,
    .infer = rt__band_infer,
    .flops = rt__band_flops,
};
