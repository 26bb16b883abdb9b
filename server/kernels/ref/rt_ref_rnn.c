/* rt_ref_rnn.c - the reference SimpleRNN, LSTM and GRU (Keras' cells,
 * forward and backward through time, one sample and one step at a time),
 * and SequenceMask / Masking.
 *
 * Each step reads input time tau(s) (T-1-s going backwards) times the
 * input dropout mask, the previous state times the recurrent dropout mask
 * (hr) for the recurrent kernel, and the previous state unmasked (hp) for
 * GRU's z * hp and LSTM's cell:
 *   SimpleRNN  h = act(x W + hr U + b)
 *   LSTM       i, f, o = ract(.), g = act(.) (gates i, f, c, o);
 *              c = f c' + i g;  h = o act(c)
 *   GRU        z, r = ract(x W + hr U + b (+ the recurrent bias));
 *              reset_after: cand = act(x W_h + b_h + r (hr U_h + b'_h)),
 *              else cand = act(x W_h + b_h + (r hr) U_h);  h = z hp + (1-z) cand
 * The initial states are the initial-state inputs, a stateful layer's
 * carried ones (rt__kargs.state), which get the final states after the
 * forward, or zeros; with return_state the final h (and c) follow the
 * output's rows of each sample, and their gradients start dh (and dc).
 * A masked step (the step mask is 0) keeps the previous state (and cell);
 * its sequence output is that state, or 0 with zero_masked. The dropout
 * masks are the engine's counter RNG keyed as the CPU kernels key them
 * (element j of sample i: i (F + U) + j for the input, + F for the state).
 * The workspace keeps every step's masked input, states and activated
 * gates (the backward pass may not read the op's input: its buffer can be
 * reused by then); backward recomputes the rest. */
#include <math.h>
#include <string.h>

#include "ref/rt_ref.h"

static double rt_ref_ra(int a, double z)
{
    switch (a) {
    case RT__RA_TANH: return tanh(z);
    case RT__RA_SIGMOID: return 1 / (1 + exp(-z));
    case RT__RA_RELU: return z > 0 ? z : 0;
    case RT__RA_HARD_SIGMOID: return fmin(1, fmax(0, 0.2 * z + 0.5));
    case RT__RA_HARD_SIGMOID_V3: return fmin(1, fmax(0, (z + 3) / 6));
    case RT__RA_ELU: return z > 0 ? z : expm1(z);
    default: return z;
    }
}

/* the derivative, from the activation's output y */
static double rt_ref_ra_d(int a, double y)
{
    switch (a) {
    case RT__RA_TANH: return 1 - y * y;
    case RT__RA_SIGMOID: return y * (1 - y);
    case RT__RA_RELU: return y > 0;
    case RT__RA_HARD_SIGMOID: return y > 0 && y < 1 ? 0.2 : 0;
    case RT__RA_HARD_SIGMOID_V3: return y > 0 && y < 1 ? 1.0 / 6 : 0;
    case RT__RA_ELU: return y > 0 ? 1 : y + 1;
    default: return 1;
    }
}

/* workspace: H (T+1, B, U) | C (T+1, B, U) | Z (T, B, GU) activated gates
 * | E (T, B, U) GRU's recurrent candidate term (reset_after) | X (B, T, F)
 * the input times its dropout mask */
int rt_ref_rnn_prepare(rt__node *nd, int64_t B, rt__arena *A)
{
    (void)A;
    const rt__rnn_params *p = rt__rnn_cp(nd);
    nd->ws_floats = (2 * (p->T + 1) * p->U + p->T * p->G * p->U + p->T * p->U + p->T * p->F) * B;
    /* backward: dz (GU), dh, dc, dhr, tmp (U each) */
    nd->scratch_floats = p->G * p->U + 4 * p->U;
    return 0;
}

typedef struct rt_ref_rnn {
    const rt__rnn_params *p;
    int64_t n, T, F, U, GU;
    float *H, *C, *Z, *E, *X;
    const float *x, *W, *Ur, *b, *bh, *b2, *mk;
    int drop_on;
} rt_ref_rnn;

static void rt_ref_rnn_init(const rt__kargs *a, rt_ref_rnn *q)
{
    const rt__rnn_params *p = rt__rnn_cp(a->nd);
    q->p = p;
    q->n = a->r->n;
    q->T = p->T;
    q->F = p->F;
    q->U = p->U;
    q->GU = p->G * p->U;
    const int64_t B = q->n; /* the layout at this batch */
    q->H = a->ws;
    q->C = q->H + (q->T + 1) * B * q->U;
    q->Z = q->C + (q->T + 1) * B * q->U;
    q->E = q->Z + q->T * B * q->GU;
    q->X = q->E + q->T * B * q->U;
    q->x = a->x[0];
    q->W = a->x[1];
    q->Ur = a->x[2];
    q->b = p->bias ? a->x[3] : NULL;
    q->bh = q->b && p->cell == RT__RNN_GRU && p->reset_after ? q->b + q->GU : NULL;
    /* SimpleRNN/LSTM with PyTorch's two biases, (2, GU): both added */
    q->b2 = q->b && p->bias == 2 ? q->b + q->GU : NULL;
    q->mk = p->mask ? a->x[p->mask] : NULL;
    q->drop_on = a->r->training;
}

static double rt_ref_rnn_mask(const rt__kargs *a, const rt_ref_rnn *q, int64_t i, int64_t j,
                              int state)
{
    const double rate = state ? q->p->rdrop : q->p->drop;
    if (!q->drop_on || rate <= 0)
        return 1;
    const uint64_t ctr =
        ((uint64_t)a->r->step << 36) | (uint64_t)(i * (q->F + q->U) + (state ? q->F : 0) + j);
    return rt__rng_unit(a->r->seed, RT__STREAM_DROPOUT + (uint64_t)a->nd->id, ctr) >= (float)rate
               ? (double)(1.0f / (1.0f - (float)rate))
               : 0.0;
}

static int64_t rt_ref_tau(const rt__rnn_params *p, int64_t s)
{
    return p->backwards ? p->T - 1 - s : s;
}

#define RT_REF_HS(q, s, i) ((q)->H + ((s) * (q)->n + (i)) * (q)->U) /* state after s steps */
#define RT_REF_CS(q, s, i) ((q)->C + ((s) * (q)->n + (i)) * (q)->U)
#define RT_REF_ZS(q, s, i) ((q)->Z + ((s) * (q)->n + (i)) * (q)->GU)
#define RT_REF_ES(q, s, i) ((q)->E + ((s) * (q)->n + (i)) * (q)->U)

/* the masked input (as the forward stored it) and the masked previous
 * state of sample i at step s */
static double rt_ref_xin(const rt__kargs *a, const rt_ref_rnn *q, int64_t s, int64_t i, int64_t f)
{
    (void)a;
    return q->X[(i * q->T + rt_ref_tau(q->p, s)) * q->F + f];
}
static double rt_ref_hr(const rt__kargs *a, const rt_ref_rnn *q, int64_t s, int64_t i, int64_t u)
{
    return RT_REF_HS(q, s, i)[u] * rt_ref_rnn_mask(a, q, i, u, 1);
}

void rt_ref_rnn_fwd(const rt__kargs *a)
{
    rt_ref_rnn q;
    rt_ref_rnn_init(a, &q);
    const rt__rnn_params *p = q.p;
    const int64_t U = q.U, GU = q.GU;
    for (int64_t i = 0; i < q.n; i++)
        for (int64_t t = 0; t < q.T; t++)
            for (int64_t f = 0; f < q.F; f++)
                q.X[(i * q.T + t) * q.F + f] =
                    (float)(q.x[(i * q.T + t) * q.F + f] * rt_ref_rnn_mask(a, &q, i, f, 0));
    /* the initial states: the inputs (h, then LSTM's c), a stateful
     * layer's carried states (the same order), or zeros */
    const float *h0 = p->h0 ? a->x[p->h0] : a->state;
    const float *c0 = p->cell != RT__RNN_LSTM ? NULL
                      : p->h0                 ? a->x[p->h0 + 1]
                      : a->state              ? a->state + q.n * U
                                              : NULL;
    const int64_t ys = p->yrows * U; /* a sample's output */
    for (int64_t i = 0; i < q.n; i++) {
        for (int64_t u = 0; u < U; u++) {
            RT_REF_HS(&q, 0, i)[u] = h0 ? h0[i * U + u] : 0;
            RT_REF_CS(&q, 0, i)[u] = c0 ? c0[i * U + u] : 0;
        }
        for (int64_t s = 0; s < q.T; s++) {
            float *z = RT_REF_ZS(&q, s, i), *h = RT_REF_HS(&q, s + 1, i);
            const float *hp = RT_REF_HS(&q, s, i);
            /* pre-activations: x W + b, plus hr U for every gate but GRU's
             * candidate */
            for (int64_t k = 0; k < GU; k++) {
                double v = (q.b ? q.b[k] : 0) + (q.b2 ? q.b2[k] : 0);
                for (int64_t f = 0; f < q.F; f++)
                    v += rt_ref_xin(a, &q, s, i, f) * q.W[f * GU + k];
                const int cand = p->cell == RT__RNN_GRU && k >= 2 * U;
                if (!cand) {
                    for (int64_t u = 0; u < U; u++)
                        v += rt_ref_hr(a, &q, s, i, u) * q.Ur[u * GU + k];
                    if (q.bh)
                        v += q.bh[k];
                }
                z[k] = (float)v;
            }
            if (p->cell == RT__RNN_SIMPLE) {
                for (int64_t u = 0; u < U; u++)
                    h[u] = z[u] = (float)rt_ref_ra(p->act, z[u]);
            } else if (p->cell == RT__RNN_LSTM) {
                const float *cp = RT_REF_CS(&q, s, i);
                float *c = RT_REF_CS(&q, s + 1, i);
                for (int64_t u = 0; u < U; u++) {
                    z[u] = (float)rt_ref_ra(p->ract, z[u]);
                    z[U + u] = (float)rt_ref_ra(p->ract, z[U + u]);
                    z[2 * U + u] = (float)rt_ref_ra(p->act, z[2 * U + u]);
                    z[3 * U + u] = (float)rt_ref_ra(p->ract, z[3 * U + u]);
                    c[u] = (float)((double)z[U + u] * cp[u] + (double)z[u] * z[2 * U + u]);
                    h[u] = (float)(z[3 * U + u] * rt_ref_ra(p->act, c[u]));
                }
            } else {
                float *e = RT_REF_ES(&q, s, i);
                for (int64_t k = 0; k < 2 * U; k++)
                    z[k] = (float)rt_ref_ra(p->ract, z[k]);
                for (int64_t u = 0; u < U; u++) {
                    double r;
                    if (p->reset_after) {
                        r = q.bh ? q.bh[2 * U + u] : 0;
                        for (int64_t v = 0; v < U; v++)
                            r += rt_ref_hr(a, &q, s, i, v) * q.Ur[v * GU + 2 * U + u];
                        e[u] = (float)r;
                        z[2 * U + u] = (float)(z[2 * U + u] + (double)z[U + u] * e[u]);
                    } else {
                        r = 0;
                        for (int64_t v = 0; v < U; v++)
                            r += (double)z[U + v] * rt_ref_hr(a, &q, s, i, v) *
                                 q.Ur[v * GU + 2 * U + u];
                        z[2 * U + u] = (float)(z[2 * U + u] + r);
                    }
                }
                for (int64_t u = 0; u < U; u++) {
                    z[2 * U + u] = (float)rt_ref_ra(p->act, z[2 * U + u]);
                    h[u] = (float)((double)z[u] * hp[u] + (1 - (double)z[u]) * z[2 * U + u]);
                }
            }
            const int kept = !q.mk || q.mk[i * q.T + rt_ref_tau(p, s)] != 0.0f;
            if (!kept) {
                memcpy(h, hp, sizeof(float) * (size_t)U);
                memcpy(RT_REF_CS(&q, s + 1, i), RT_REF_CS(&q, s, i), sizeof(float) * (size_t)U);
            }
            if (p->seq) {
                const int64_t pos = p->rev_out ? q.T - 1 - s : s;
                for (int64_t u = 0; u < U; u++)
                    a->y[i * ys + pos * U + u] = !kept && p->zero_masked ? 0.0f : h[u];
            }
        }
        for (int64_t u = 0; u < U; u++) {
            if (!p->seq)
                a->y[i * ys + u] = RT_REF_HS(&q, q.T, i)[u];
            if (p->ret_state) /* then the final h, and c (return_state) */
                a->y[i * ys + p->orows * U + u] = RT_REF_HS(&q, q.T, i)[u];
            if (p->ret_state && p->cell == RT__RNN_LSTM)
                a->y[i * ys + (p->orows + 1) * U + u] = RT_REF_CS(&q, q.T, i)[u];
        }
    }
    /* after every sample: the states were read above */
    for (int64_t i = 0; a->state && a->r->carry && i < q.n; i++)
        for (int64_t u = 0; u < U; u++) {
            a->state[i * U + u] = RT_REF_HS(&q, q.T, i)[u];
            if (p->cell == RT__RNN_LSTM)
                a->state[(q.n + i) * U + u] = RT_REF_CS(&q, q.T, i)[u];
        }
}

static void rt_ref_add(float *d, int64_t i, double v) { d[i] = (float)(d[i] + v); }

void rt_ref_rnn_bwd(const rt__kargs *a)
{
    rt_ref_rnn q;
    rt_ref_rnn_init(a, &q);
    const rt__rnn_params *p = q.p;
    const int64_t U = q.U, GU = q.GU, F = q.F, T = q.T;
    float *dz = a->scratch, *dh = dz + GU, *dc = dh + U, *dhr = dc + U, *tmp = dhr + U;
    float *dX = a->dx[0], *dW = a->dx[1], *dU = a->dx[2], *db = q.b ? a->dx[3] : NULL;
    if (dX)
        rt_ref_clear(a, 0, q.n * T * F);
    if (dW)
        rt_ref_clear(a, 1, F * GU);
    if (dU)
        rt_ref_clear(a, 2, U * GU);
    if (db)
        rt_ref_clear(a, 3, q.bh || q.b2 ? 2 * GU : GU);
    const int64_t ys = p->yrows * U; /* a sample's output */
    const int lstm = p->cell == RT__RNN_LSTM;
    float *dh0 = p->h0 ? a->dx[p->h0] : NULL, *dc0 = p->h0 && lstm ? a->dx[p->h0 + 1] : NULL;
    for (int64_t i = 0; i < q.n; i++) {
        /* the last output's gradient, and the final states' (return_state) */
        for (int64_t u = 0; u < U; u++) {
            const float *g = a->dy + i * ys + p->orows * U + u;
            dh[u] = (float)((p->seq ? 0.0 : a->dy[i * ys + u]) + (p->ret_state ? g[0] : 0.0));
            dc[u] = p->ret_state && lstm ? g[U] : 0.0f;
        }
        for (int64_t s = T - 1; s >= 0; s--) {
            const int kept = !q.mk || q.mk[i * T + rt_ref_tau(p, s)] != 0.0f;
            if (p->seq && (kept || !p->zero_masked)) {
                const int64_t pos = p->rev_out ? T - 1 - s : s;
                for (int64_t u = 0; u < U; u++)
                    dh[u] += a->dy[i * ys + pos * U + u];
            }
            if (!kept)
                continue; /* the state passed through: dh, dc unchanged */
            const float *z = RT_REF_ZS(&q, s, i), *h = RT_REF_HS(&q, s + 1, i);
            const float *hp = RT_REF_HS(&q, s, i);
            for (int64_t u = 0; u < U; u++)
                dhr[u] = 0.0f;
            /* dz: the pre-activation gradients; tmp: dh_prev's direct part */
            if (p->cell == RT__RNN_SIMPLE) {
                for (int64_t u = 0; u < U; u++) {
                    dz[u] = (float)(dh[u] * rt_ref_ra_d(p->act, h[u]));
                    tmp[u] = 0.0f;
                }
            } else if (p->cell == RT__RNN_LSTM) {
                const float *cp = RT_REF_CS(&q, s, i), *c = RT_REF_CS(&q, s + 1, i);
                for (int64_t u = 0; u < U; u++) {
                    const double tc = rt_ref_ra(p->act, c[u]);
                    const double dct = dc[u] + dh[u] * z[3 * U + u] * rt_ref_ra_d(p->act, tc);
                    dz[u] = (float)(dct * z[2 * U + u] * rt_ref_ra_d(p->ract, z[u]));
                    dz[U + u] = (float)(dct * cp[u] * rt_ref_ra_d(p->ract, z[U + u]));
                    dz[2 * U + u] = (float)(dct * z[u] * rt_ref_ra_d(p->act, z[2 * U + u]));
                    dz[3 * U + u] = (float)(dh[u] * tc * rt_ref_ra_d(p->ract, z[3 * U + u]));
                    dc[u] = (float)(dct * z[U + u]);
                    tmp[u] = 0.0f;
                }
            } else {
                const float *e = RT_REF_ES(&q, s, i);
                for (int64_t u = 0; u < U; u++) {
                    const double cand = z[2 * U + u];
                    dz[u] = (float)(dh[u] * (hp[u] - cand) * rt_ref_ra_d(p->ract, z[u]));
                    dz[2 * U + u] = (float)(dh[u] * (1 - z[u]) * rt_ref_ra_d(p->act, cand));
                    tmp[u] = (float)(dh[u] * z[u]);
                }
                for (int64_t u = 0; u < U; u++) {
                    double dr;
                    if (p->reset_after) {
                        dr = (double)dz[2 * U + u] * e[u];
                        /* e = hr U_h + b'_h: its gradient dz_h r */
                        const double de = (double)dz[2 * U + u] * z[U + u];
                        if (db)
                            rt_ref_add(db, GU + 2 * U + u, de);
                        for (int64_t v = 0; v < U; v++) {
                            if (dU)
                                rt_ref_add(dU, v * GU + 2 * U + u, rt_ref_hr(a, &q, s, i, v) * de);
                            dhr[v] = (float)(dhr[v] + de * q.Ur[v * GU + 2 * U + u]);
                        }
                    } else {
                        /* (r hr) U_h: d(r hr)_u = sum_k dz_h,k U_h[u, k] */
                        double drh = 0;
                        for (int64_t k = 0; k < U; k++)
                            drh += (double)dz[2 * U + k] * q.Ur[u * GU + 2 * U + k];
                        const double hru = rt_ref_hr(a, &q, s, i, u);
                        dr = drh * hru;
                        dhr[u] = (float)(dhr[u] + drh * z[U + u]);
                        if (dU)
                            for (int64_t k = 0; k < U; k++)
                                rt_ref_add(dU, u * GU + 2 * U + k,
                                           (double)z[U + u] * hru * dz[2 * U + k]);
                    }
                    dz[U + u] = (float)(dr * rt_ref_ra_d(p->ract, z[U + u]));
                }
            }
            /* the gates read hr U (all but GRU's candidate) and x W + b */
            const int64_t rec = p->cell == RT__RNN_GRU ? 2 * U : GU;
            for (int64_t k = 0; k < GU; k++) {
                if (db)
                    rt_ref_add(db, k, dz[k]);
                if (q.b2 && db)
                    rt_ref_add(db, GU + k, dz[k]);
                if (k < rec && q.bh && db)
                    rt_ref_add(db, GU + k, dz[k]);
                for (int64_t f = 0; f < F; f++) {
                    if (dW)
                        rt_ref_add(dW, f * GU + k, rt_ref_xin(a, &q, s, i, f) * dz[k]);
                    if (dX) {
                        const int64_t xi = (i * T + rt_ref_tau(p, s)) * F + f;
                        rt_ref_add(dX, xi,
                                   (double)dz[k] * q.W[f * GU + k] *
                                       rt_ref_rnn_mask(a, &q, i, f, 0));
                    }
                }
                if (k >= rec)
                    continue;
                for (int64_t u = 0; u < U; u++) {
                    if (dU)
                        rt_ref_add(dU, u * GU + k, rt_ref_hr(a, &q, s, i, u) * dz[k]);
                    dhr[u] = (float)(dhr[u] + (double)dz[k] * q.Ur[u * GU + k]);
                }
            }
            for (int64_t u = 0; u < U; u++)
                dh[u] = (float)(tmp[u] + (double)dhr[u] * rt_ref_rnn_mask(a, &q, i, u, 1));
        }
        /* what reached the initial states */
        for (int64_t u = 0; u < U; u++) {
            if (dh0)
                rt_ref_put(a, p->h0, i * U + u, dh[u]);
            if (dc0)
                rt_ref_put(a, p->h0 + 1, i * U + u, dc[u]);
        }
    }
}

/* ---------------------------------------------- SequenceMask and Masking */

/* a step is kept when any of its R values differs from the mask value */
static int rt_ref_kept(const float *x, int64_t R, float v)
{
    for (int64_t j = 0; j < R; j++)
        if (x[j] != v)
            return 1;
    return 0;
}

void rt_ref_seqmask_fwd(const rt__kargs *a)
{
    const rt__seqmask_params *p = rt__seqmask_cp(a->nd);
    for (int64_t k = 0; k < a->r->n * p->T; k++)
        a->y[k] = (float)rt_ref_kept(a->x[0] + k * p->R, p->R, p->value);
}

void rt_ref_masking_fwd(const rt__kargs *a)
{
    const rt__seqmask_params *p = rt__seqmask_cp(a->nd);
    for (int64_t k = 0; k < a->r->n * p->T; k++) {
        const int keep = rt_ref_kept(a->x[0] + k * p->R, p->R, p->value);
        for (int64_t j = 0; j < p->R; j++)
            a->y[k * p->R + j] = keep ? a->x[0][k * p->R + j] : 0.0f;
    }
}

void rt_ref_masking_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const rt__seqmask_params *p = rt__seqmask_cp(a->nd);
    for (int64_t k = 0; k < a->r->n * p->T; k++) {
        const int keep = rt_ref_kept(a->x[0] + k * p->R, p->R, p->value);
        for (int64_t j = 0; j < p->R; j++)
            rt_ref_put(a, 0, k * p->R + j, keep ? a->dy[k * p->R + j] : 0.0);
    }
}
