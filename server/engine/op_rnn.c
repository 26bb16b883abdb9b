/*
 * op_rnn.c - the recurrent ops SimpleRNN, LSTM and GRU, and Embedding:
 * shape inference, typed parameters (rt__rnn_params, rt__embed_params)
 * and FLOP counts. The CPU kernels are server/kernels/cpu/rt_kern_rnn.c.
 *
 *   SimpleRNN/LSTM/GRU(x (B,T,F), kernel (F,G*U), recurrent_kernel
 *       (U,G*U), bias?) with Keras' gate order and layout (LSTM i,f,c,o;
 *       GRU z,r,h; GRU reset_after has a (2,3U) bias: input row, then
 *       recurrent row; SimpleRNN and LSTM take (G*U) or, as PyTorch and
 *       ONNX, (2,G*U): two biases added). Attributes: activation (default "tanh"),
 *       recurrent_activation (LSTM/GRU, default "sigmoid"), return_sequences,
 *       go_backwards, reverse_output (a sequence output in reverse step
 *       order, as Bidirectional's backward half), reset_after (GRU,
 *       default 1), dropout and recurrent_dropout (rates in [0, 1), default
 *       0; training only, as Keras: one mask per sample and batch for the
 *       input, shared by every step and gate, and one for the previous
 *       state where it enters the recurrent kernel; the state carried by
 *       GRU's update gate and LSTM's cell are not masked).
 *       initial_state (1: the inputs after the bias are the initial states,
 *       h (B,U), and LSTM's c (B,U); their gradients are the backward's last
 *       dh, dc; else the states start from zeros). return_state (1: Keras'
 *       return_state: the output is (B, R + S, U), R the rows of the output
 *       above (T, or 1 without return_sequences), then the final h and
 *       LSTM's final c; the importer slices them apart with Pad).
 *       masked (1: the last input is a (B,T) step mask, 1 keeps a step, 0
 *       skips it as Keras does: the states carry over unchanged, a sequence
 *       output repeats the carried output, or is 0 with zero_output_for_mask).
 *       stateful (Keras' stateful = True: the batch size B, which must be
 *       the plan's): sample i of a batch starts from the final states of
 *       sample i of the batch before (training, evaluation and prediction
 *       alike), not through the gradient (truncated backpropagation);
 *       the exec keeps those states (rt_exec_reset_states zeroes them).
 *   SequenceMask(x (B,T,...)) attr mask_value -> (B,T): 1 where any value
 *       of the step differs from mask_value (Keras' Masking, and Embedding
 *       mask_zero on the indices), no gradient. Masking(x) -> x with the
 *       masked steps zeroed (Keras' Masking layer's output).
 *   Embedding(x (B,...) holding integral indices as floats, W (V,D))
 *       -> (B,...,D). The exec checks the indices before a step
 *       (rt_exec_check_data); the kernel clamps as a last resort.
 *       Attribute dropout (rate in [0, 1), default 0; Keras 1's
 *       Embedding(dropout)): in training, whole rows of W are dropped, one
 *       draw per vocabulary row and step shared by the batch, and the kept
 *       rows scale by 1 / (1 - rate) (rt__embed_row_scale); a dropped row
 *       gets no gradient. Inference reads W as it is.
 */
#include <string.h>

#include "rt_engine_impl.h"

static int rt__rnn_act(rt__cc *cc, const rt__node *nd, const char *key, const char *def, int *out)
{
    int ok = 1;
    const char *s = rt__attr_str(cc, nd, key, def, &ok);
    if (!ok)
        return RT_EINVAL;
    static const struct {
        const char *n;
        int a;
    } acts[] = {
        {"linear", RT__RA_LINEAR},
        {"tanh", RT__RA_TANH},
        {"sigmoid", RT__RA_SIGMOID},
        {"relu", RT__RA_RELU},
        {"hard_sigmoid", RT__RA_HARD_SIGMOID},
        {"hard_sigmoid_v3", RT__RA_HARD_SIGMOID_V3},
        {"elu", RT__RA_ELU},
    };
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
        if (!strcmp(s, acts[i].n)) {
            *out = acts[i].a;
            return 0;
        }
    return rt__cerr(cc, nd, RT_EINVAL,
                    "%s '%s' is not one of linear, tanh, sigmoid, relu, hard_sigmoid, elu", key, s);
}

static int rt__rnn_infer_cell(rt__cc *cc, rt__node *nd, int cell, int64_t G)
{
    const rt__shape *x = nd->in_shape[0], *w = nd->in_shape[1], *u = nd->in_shape[2];
    int okm = 1;
    const int masked = rt__attr_int(cc, nd, "masked", 0, &okm) != 0;
    /* initial states: h (and LSTM's c) after the weights, before the mask */
    const int S = cell == RT__RNN_LSTM ? 2 : 1;
    const int nst = rt__attr_int(cc, nd, "initial_state", 0, &okm) ? S : 0;
    if (!okm)
        return RT_EINVAL;
    if (nd->n_in < 3 + nst + masked)
        return rt__cerr(cc, nd, RT_EGRAPH,
                        "needs x, kernel, recurrent kernel, [bias], %d initial state(s) and %s",
                        nst, masked ? "the mask" : "no mask");
    if (!x->batched || x->ndim != 2)
        return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' must be (batch, time, features)",
                        nd->in_name[0]);
    const int64_t T = x->d[0], F = x->d[1];
    if (w->batched || w->ndim != 2 || w->d[0] != F || w->d[1] % G || w->d[1] == 0)
        return rt__cerr(cc, nd, RT_ESHAPE, "kernel '%s' must be (%lld, %lld * units)",
                        nd->in_name[1], (long long)F, (long long)G);
    const int64_t U = w->d[1] / G;
    if (u->batched || u->ndim != 2 || u->d[0] != U || u->d[1] != G * U)
        return rt__cerr(cc, nd, RT_ESHAPE, "recurrent kernel '%s' must be (%lld, %lld)",
                        nd->in_name[2], (long long)U, (long long)(G * U));
    /* the kernels keep every step's input, gates and states: per sample
     * T*F + T*G*U + 3*(T+1)*U + G*U values at most, and the recurrent
     * dropout's masked states and masks (T*U + F + U) */
    int64_t ws = 0, a, b;
    if (__builtin_mul_overflow(T, F, &a) || __builtin_mul_overflow(T, G * U, &b) ||
        __builtin_add_overflow(a, b, &ws) || __builtin_mul_overflow(T + 1, 3 * U, &a) ||
        __builtin_add_overflow(ws, a + G * U, &ws) || __builtin_mul_overflow(T + 1, U, &a) ||
        __builtin_add_overflow(ws, a + F, &ws) || ws > RT__MAX_NUMEL)
        return rt__cerr(cc, nd, RT_EOVERFLOW,
                        "%lld steps of %lld units keep more than 2^32 values per sample",
                        (long long)T, (long long)U);
    rt__rnn_params *p = rt__rnn_p(nd);
    int ok = 1, rc;
    p->cell = cell;
    p->T = T;
    p->F = F;
    p->U = U;
    p->G = G;
    p->seq = (int)rt__attr_int(cc, nd, "return_sequences", 0, &ok);
    if (ok)
        p->backwards = (int)rt__attr_int(cc, nd, "go_backwards", 0, &ok);
    if (ok)
        p->rev_out = (int)rt__attr_int(cc, nd, "reverse_output", 0, &ok);
    if (ok)
        p->reset_after = cell == RT__RNN_GRU && rt__attr_int(cc, nd, "reset_after", 1, &ok);
    const double drop = ok ? rt__attr_float(cc, nd, "dropout", 0.0, &ok) : 0.0;
    const double rdrop = ok ? rt__attr_float(cc, nd, "recurrent_dropout", 0.0, &ok) : 0.0;
    if (!ok)
        return RT_EINVAL;
    if (!(drop >= 0.0 && drop < 1.0) || !(rdrop >= 0.0 && rdrop < 1.0))
        return rt__cerr(cc, nd, RT_EINVAL, "dropout %g / recurrent_dropout %g outside [0, 1)", drop,
                        rdrop);
    p->drop = (float)drop;
    p->rdrop = (float)rdrop;
    if ((rc = rt__rnn_act(cc, nd, "activation", "tanh", &p->act)) < 0)
        return rc;
    p->ract = RT__RA_SIGMOID;
    if (cell != RT__RNN_SIMPLE &&
        (rc = rt__rnn_act(cc, nd, "recurrent_activation", "sigmoid", &p->ract)) < 0)
        return rc;
    p->bias = nd->n_in - masked - nst > 3;
    p->mask = masked ? nd->n_in - 1 : 0;
    p->h0 = nst ? 3 + (p->bias != 0) : 0;
    if (nd->n_in != 3 + (p->bias != 0) + nst + masked)
        return rt__cerr(cc, nd, RT_EGRAPH, "has %d inputs, more than the settings take", nd->n_in);
    if (ok)
        p->ret_state = rt__attr_int(cc, nd, "return_state", 0, &ok) != 0;
    if (ok)
        p->zero_masked = (int)rt__attr_int(cc, nd, "zero_output_for_mask", 0, &ok);
    if (ok)
        p->stateful = rt__attr_int(cc, nd, "stateful", 0, &ok);
    if (!ok)
        return RT_EINVAL;
    /* Keras: a stateful RNN's batch size is the model's (its states are
     * (batch, units)); fit's batch_size must be that one */
    if (p->stateful < 0)
        return rt__cerr(cc, nd, RT_EINVAL, "stateful %lld is not a batch size",
                        (long long)p->stateful);
    if (p->stateful && p->stateful != rt__cc_batch(cc))
        return rt__cerr(cc, nd, RT_EINVAL,
                        "stateful: the model's batch size is %lld (batch_input_shape), "
                        "compile with batch_size %lld, not %lld",
                        (long long)p->stateful, (long long)p->stateful,
                        (long long)rt__cc_batch(cc));
    /* Keras' stateful layer given an initial state uses its carried
     * states unless they are all zero; not supported */
    if (p->stateful && nst)
        return rt__cerr(cc, nd, RT_EUNIMPLEMENTED,
                        "initial_state on a stateful layer is not supported; "
                        "drop stateful or the initial state");
    for (int k = 0; k < nst; k++) {
        const rt__shape *h = nd->in_shape[p->h0 + k];
        if (!h->batched || h->ndim != 1 || h->d[0] != U)
            return rt__cerr(cc, nd, RT_ESHAPE, "initial state '%s' must be (batch, %lld)",
                            nd->in_name[p->h0 + k], (long long)U);
    }
    if (masked) {
        const rt__shape *m = nd->in_shape[p->mask];
        if (!m->batched || m->ndim != 1 || m->d[0] != T)
            return rt__cerr(cc, nd, RT_ESHAPE, "mask '%s' must be (batch, %lld)",
                            nd->in_name[p->mask], (long long)T);
    }
    if (p->bias) {
        const rt__shape *b = nd->in_shape[3];
        /* SimpleRNN/LSTM: a (2, G*U) bias is two biases added, the input's
         * and the recurrent one, as PyTorch and ONNX keep them (each gets
         * the same gradient: p->bias 2) */
        if (cell != RT__RNN_GRU && !b->batched && b->ndim == 2)
            p->bias = 2;
        const int two = p->reset_after || p->bias == 2;
        if (b->batched || b->ndim != 1 + two || b->d[two] != G * U || (two && b->d[0] != 2))
            return rt__cerr(cc, nd, RT_ESHAPE, "bias '%s' must be (%s%lld)", nd->in_name[3],
                            two ? "2, " : "", (long long)(G * U));
    }
    p->orows = p->seq ? T : 1;
    p->yrows = p->orows + (p->ret_state ? S : 0);
    nd->out.batched = 1;
    nd->out.ndim = p->seq || p->ret_state ? 2 : 1;
    nd->out.d[0] = nd->out.ndim == 2 ? p->yrows : U;
    nd->out.d[1] = U;
    return 0;
}

static int rt__simplernn_infer(rt__cc *cc, rt__node *nd)
{
    return rt__rnn_infer_cell(cc, nd, RT__RNN_SIMPLE, 1);
}
static int rt__lstm_infer(rt__cc *cc, rt__node *nd)
{
    return rt__rnn_infer_cell(cc, nd, RT__RNN_LSTM, 4);
}
static int rt__gru_infer(rt__cc *cc, rt__node *nd)
{
    return rt__rnn_infer_cell(cc, nd, RT__RNN_GRU, 3);
}

static uint64_t rt__rnn_flops(const rt__node *nd, int64_t B, unsigned need_dx)
{
    const rt__rnn_params *p = rt__rnn_cp(nd);
    const uint64_t BT = (uint64_t)(B * p->T), GU = (uint64_t)(p->G * p->U);
    /* input projection, recurrence, ~10 element-wise operations per gate */
    uint64_t fwd = 2 * BT * (uint64_t)p->F * GU + 2 * BT * (uint64_t)p->U * GU + 10 * BT * GU;
    uint64_t f = fwd;
    if (need_dx & 1u)
        f += 2 * BT * (uint64_t)p->F * GU;
    if (need_dx & 2u)
        f += 2 * BT * (uint64_t)p->F * GU;
    if (need_dx)
        f += 4 * BT * (uint64_t)p->U * GU + 10 * BT * GU;
    return f;
}

/* inputs x, kernel, recurrent kernel, [bias], [h0, c0], [mask]; backward
 * reads the kernels for dx and the recurrence and the mask (input 3 to 6);
 * the states are in the workspace */
#define RT__RNN_OP(sym, nm, inf)                        \
    const rt__op_def sym = {                            \
        .name = nm,                                     \
        .min_in = 3,                                    \
        .max_in = 7,                                    \
        .bwd_needs_in = 2u | 4u | 8u | 16u | 32u | 64u, \
        .params = RT__P_RNN,                            \
        .infer = inf,                                   \
        .flops = rt__rnn_flops,                         \
    }
RT__RNN_OP(rt__op_simplernn, "SimpleRNN", rt__simplernn_infer);
RT__RNN_OP(rt__op_lstm, "LSTM", rt__lstm_infer);
RT__RNN_OP(rt__op_gru, "GRU", rt__gru_infer);

static int rt__embedding_infer(rt__cc *cc, rt__node *nd)
{
    const rt__shape *x = nd->in_shape[0], *w = nd->in_shape[1];
    if (!x->batched || x->ndim + 1 >= RT_MAX_DIMS)
        return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' must be batched, rank < %d", nd->in_name[0],
                        RT_MAX_DIMS - 1);
    if (w->batched || w->ndim != 2)
        return rt__cerr(cc, nd, RT_ESHAPE, "embeddings '%s' must be (vocabulary, dim)",
                        nd->in_name[1]);
    if (nd->in_dt[0] != RT_F32)
        return rt__cerr(cc, nd, RT_EDTYPE, "indices '%s' must be f32 values", nd->in_name[0]);
    int ok = 1;
    const double drop = rt__attr_float(cc, nd, "dropout", 0.0, &ok);
    if (!ok)
        return RT_EINVAL;
    if (!(drop >= 0.0 && drop < 1.0))
        return rt__cerr(cc, nd, RT_EINVAL, "dropout %g outside [0, 1)", drop);
    rt__embed_params *p = rt__embed_p(nd);
    p->drop = (float)drop;
    p->V = w->d[0];
    p->D = w->d[1];
    p->R = rt__shape_numel(x);
    nd->out = *x;
    nd->out.d[x->ndim] = p->D;
    nd->out.ndim = x->ndim + 1;
    return 0;
}

static uint64_t rt__embedding_flops(const rt__node *nd, int64_t B, unsigned need_dx)
{
    const rt__embed_params *p = rt__embed_cp(nd);
    const uint64_t n = (uint64_t)(B * p->R * p->D);
    return (need_dx & 2u) ? 2 * n : n;
}

const rt__op_def rt__op_embedding = {
    .name = "Embedding",
    .min_in = 2,
    .max_in = 2,
    .bwd_needs_in = 1u, /* the indices */
    .no_grad_in = 1u,   /* indices get no gradient */
    .params = RT__P_EMBED,
    .infer = rt__embedding_infer,
    .flops = rt__embedding_flops,
};

static int rt__seqmask_infer(rt__cc *cc, rt__node *nd)
{
    const rt__shape *x = nd->in_shape[0];
    if (!x->batched || x->ndim < 1)
        return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' must be (batch, time, ...)", nd->in_name[0]);
    if (nd->in_dt[0] != RT_F32)
        return rt__cerr(cc, nd, RT_EDTYPE, "input '%s' must be f32 values", nd->in_name[0]);
    int ok = 1;
    const double v = rt__attr_float(cc, nd, "mask_value", 0.0, &ok);
    if (!ok)
        return RT_EINVAL;
    rt__seqmask_params *p = rt__seqmask_p(nd);
    p->T = x->d[0];
    p->R = rt__shape_numel(x) / (p->T ? p->T : 1);
    p->value = (float)v;
    nd->out.batched = 1;
    nd->out.ndim = 1;
    nd->out.d[0] = p->T;
    return 0;
}

static int rt__masking_infer(rt__cc *cc, rt__node *nd)
{
    int rc = rt__seqmask_infer(cc, nd);
    if (rc < 0)
        return rc;
    nd->out = *nd->in_shape[0];
    return 0;
}

static uint64_t rt__seqmask_flops(const rt__node *nd, int64_t B, unsigned need_dx)
{
    const rt__seqmask_params *p = rt__seqmask_cp(nd);
    const uint64_t n = (uint64_t)(B * p->T * p->R);
    return need_dx ? 2 * n : n;
}

const rt__op_def rt__op_seqmask = {
    .name = "SequenceMask",
    .min_in = 1,
    .max_in = 1,
    .no_grad_in = 1u, /* a step mask is piecewise constant */
    .params = RT__P_SEQMASK,
    .infer = rt__seqmask_infer,
    .flops = rt__seqmask_flops,
};

const rt__op_def rt__op_masking = {
    .name = "Masking",
    .min_in = 1,
    .max_in = 1,
    .bwd_needs_in = 1u, /* the mask is recomputed from x */
    .params = RT__P_SEQMASK,
    .infer = rt__masking_infer,
    .flops = rt__seqmask_flops,
};
