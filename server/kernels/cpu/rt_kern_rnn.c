/*
 * rt_kern_rnn.c - SimpleRNN, LSTM and GRU (forward, and backward through
 * time) and Embedding on the CPU.
 *
 * Layout: the forward copies x (B,T,F) into the workspace time-major and
 * in step order (step s reads input time s, or T-1-s going backwards), so
 * every per-step block is a contiguous (n, .) matrix and the products over
 * all steps are single GEMMs:
 *
 *   workspace  Xt (T,n,F) | Z (T,n,G*U) | H (T+1,n,U) | C (T+1,n,U) LSTM
 *              | E (T,n,U) GRU | R (n,G*U) GRU
 *
 * Z first holds x W + b for all steps (one GEMM), then each step adds
 * h_{s-1} U (one GEMM per step) and replaces its block by the activated
 * gates. H and C keep every state (slot 0 is the initial state: the
 * initial-state inputs, zeros, or a stateful layer's carried states,
 * rt__kargs.state, which get the final ones after the forward; the
 * backward never reaches them). With return_state the output's rows per
 * sample are the layer's output, then the final h and c, whose gradients
 * start the backward's dh and dc; the dh, dc left after step 0 are the
 * initial-state inputs' gradients. GRU
 * keeps in E the recurrent candidate h_{s-1} U_h + b_h (reset_after) or
 * r * h_{s-1} (reset before). Backward walks the steps in reverse,
 * overwriting each Z block by the gates' pre-activation gradient (and E by
 * the gradient of its GRU product), then: dW = Xt^T dZ, dU = H^T dZ,
 * db = column sums, dx = dZ W^T (into Xt, then scattered back to (B,T,F)).
 *
 * Dropout (training only, Keras' formulas): MX (n,F) scales each sample's
 * input at every step (so Xt holds the masked input and dW needs nothing
 * more; dx is scaled back by MX), MH (n,U) each previous state where it
 * enters the recurrent kernel: Hm (T,n,U) keeps those masked states for
 * the GEMMs and dU; GRU's z * h_prev and LSTM's cell use the state
 * unmasked. The masks are pure functions of (seed, node, step, sample,
 * unit), drawn once per batch, so a step is deterministic and resumable.
 *
 * A step mask (B,T) (Keras' Masking / mask_zero): a sample's masked step
 * is computed as any other, then its states are replaced by the previous
 * ones (the carried state) and its sequence output is that state, or 0
 * with zero_masked. Backward gives its gates no gradient (their dZ rows,
 * and GRU's E rows, are zeroed after the step) and passes dh and dc
 * through unchanged.
 * Nothing is allocated; the workspace is sized by rt_kern_rnn_prepare.
 */
#include <math.h>
#include <string.h>

#include "cpu/rt_kern_cpu.h"
#include "cpu/rt_kern_math.h"

/* ------------------------------------------------------------ activations */

static inline float rt__ra_sigmoid(float x) { return 1.0f / (1.0f + rt_kern_exp(-x)); }

static inline float rt__ra_tanh(float x)
{
    const float t = rt_kern_exp(-2.0f * fabsf(x));
    const float r = (1.0f - t) / (1.0f + t);
    return x < 0.0f ? -r : r;
}

static void rt__ra_fwd(int a, float *restrict v, int64_t n)
{
    switch (a) {
    case RT__RA_TANH:
        for (int64_t i = 0; i < n; i++)
            v[i] = rt__ra_tanh(v[i]);
        break;
    case RT__RA_SIGMOID:
        for (int64_t i = 0; i < n; i++)
            v[i] = rt__ra_sigmoid(v[i]);
        break;
    case RT__RA_RELU:
        for (int64_t i = 0; i < n; i++)
            v[i] = v[i] > 0.0f ? v[i] : 0.0f;
        break;
    case RT__RA_HARD_SIGMOID:
        for (int64_t i = 0; i < n; i++) {
            const float y = 0.2f * v[i] + 0.5f;
            v[i] = y < 0.0f ? 0.0f : y > 1.0f ? 1.0f : y;
        }
        break;
    case RT__RA_HARD_SIGMOID_V3:
        for (int64_t i = 0; i < n; i++) {
            const float y = (v[i] + 3.0f) * (1.0f / 6.0f);
            v[i] = y < 0.0f ? 0.0f : y > 1.0f ? 1.0f : y;
        }
        break;
    case RT__RA_ELU:
        for (int64_t i = 0; i < n; i++)
            v[i] = v[i] > 0.0f ? v[i] : expm1f(v[i]);
        break;
    default: break;
    }
}

/* the derivative from the activation's output y */
static inline float rt__ra_d(int a, float y)
{
    switch (a) {
    case RT__RA_TANH: return 1.0f - y * y;
    case RT__RA_SIGMOID: return y * (1.0f - y);
    case RT__RA_RELU: return y > 0.0f ? 1.0f : 0.0f;
    case RT__RA_HARD_SIGMOID: return y > 0.0f && y < 1.0f ? 0.2f : 0.0f;
    case RT__RA_HARD_SIGMOID_V3: return y > 0.0f && y < 1.0f ? 1.0f / 6.0f : 0.0f;
    case RT__RA_ELU: return y > 0.0f ? 1.0f : y + 1.0f;
    default: return 1.0f;
    }
}

/* ------------------------------------------------------------ workspace */

typedef struct rt__rws {
    float *xt, *z, *h, *c, *e, *r;
    float *mx, *mh, *hm; /* dropout masks, masked states (NULL at rate 0) */
} rt__rws;

static int64_t rt__rws_floats(const rt__rnn_params *p, int64_t n, rt__rws *w, float *base)
{
    const int64_t T = p->T, GU = p->G * p->U, U = p->U;
    int64_t o = 0;
#define RT__RWS_TAKE(field, cnt)          \
    do {                                  \
        if (w)                            \
            w->field = base + o;          \
        o += ((cnt) + 15) & ~(int64_t)15; \
    } while (0)
    RT__RWS_TAKE(xt, T * n * p->F);
    RT__RWS_TAKE(z, T * n * GU);
    RT__RWS_TAKE(h, (T + 1) * n * U);
    if (p->cell == RT__RNN_LSTM)
        RT__RWS_TAKE(c, (T + 1) * n * U);
    if (p->cell == RT__RNN_GRU) {
        RT__RWS_TAKE(e, T * n * U);
        RT__RWS_TAKE(r, n * GU);
    }
    if (p->drop > 0.0f)
        RT__RWS_TAKE(mx, n * p->F);
    if (p->rdrop > 0.0f) {
        RT__RWS_TAKE(mh, n * U);
        RT__RWS_TAKE(hm, T * n * U);
    }
#undef RT__RWS_TAKE
    return o;
}

int rt_kern_rnn_prepare(rt__node *nd, int64_t B, rt__arena *A)
{
    (void)A;
    const rt__rnn_params *p = rt__rnn_cp(nd);
    nd->ws_floats = rt__rws_floats(p, B, NULL, NULL);
    /* backward: dh, dc (LSTM), d(r * h) (GRU reset before), and a masked
     * step's incoming dh and dc */
    nd->scratch_floats = 5 * B * p->U;
    return 0;
}

/* output position of step s in a sequence output */
static inline int64_t rt__rnn_pos(const rt__rnn_params *p, int64_t s)
{
    return p->rev_out ? p->T - 1 - s : s;
}
/* input time read at step s */
static inline int64_t rt__rnn_tau(const rt__rnn_params *p, int64_t s)
{
    return p->backwards ? p->T - 1 - s : s;
}

/* ------------------------------------------------------------- dropout */

/* The masks of this step's batch: element j of sample i's input mask is
 * keyed (i (F + U) + j), of its state mask (i (F + U) + F + j), under the
 * global step in the counter's high bits (as Dropout's) and the node's
 * stream: 0 or 1 / (1 - rate). */
static void rt__rnn_masks(const rt__kargs *a, const rt__rnn_params *p, int64_t n, float *mx,
                          float *mh)
{
    const uint64_t stream = RT__STREAM_DROPOUT + (uint64_t)a->nd->id;
    const uint64_t hi = (uint64_t)a->r->step << 36;
    const int64_t F = p->F, U = p->U;
    for (int64_t i = 0; i < n; i++) {
        const uint64_t k0 = (uint64_t)(i * (F + U));
        if (mx)
            for (int64_t j = 0; j < F; j++)
                mx[i * F + j] = rt__rng_unit(a->r->seed, stream, hi | (k0 + (uint64_t)j)) >= p->drop
                                    ? 1.0f / (1.0f - p->drop)
                                    : 0.0f;
        if (mh)
            for (int64_t j = 0; j < U; j++)
                mh[i * U + j] =
                    rt__rng_unit(a->r->seed, stream, hi | (k0 + (uint64_t)(F + j))) >= p->rdrop
                        ? 1.0f / (1.0f - p->rdrop)
                        : 0.0f;
    }
}

/* ------------------------------------------------------------- forward */

void rt_kern_rnn_fwd(const rt__kargs *a)
{
    const rt__node *nd = a->nd;
    const rt__rnn_params *p = rt__rnn_cp(nd);
    const int64_t n = a->r->n, T = p->T, F = p->F, U = p->U, G = p->G, GU = G * U;
    rt__rws w = {0};
    rt__rws_floats(p, n, &w, a->ws);
    const float *x = a->x[0], *W = a->x[1], *Ur = a->x[2];
    const float *b = p->bias ? a->x[3] : NULL;
    /* the masks in use: training with a rate above 0 */
    float *mx = a->r->training ? w.mx : NULL, *mh = a->r->training ? w.mh : NULL;
    if (mx || mh)
        rt__rnn_masks(a, p, n, mx, mh);
    const float *mk = p->mask ? a->x[p->mask] : NULL; /* the step mask (B,T) */
    for (int64_t s = 0; s < T; s++) {
        const int64_t t = rt__rnn_tau(p, s);
        for (int64_t i = 0; i < n; i++) {
            float *restrict d = w.xt + (s * n + i) * F;
            const float *restrict src = x + (i * T + t) * F;
            if (mx) {
                const float *restrict m = mx + i * F;
                for (int64_t j = 0; j < F; j++)
                    d[j] = src[j] * m[j];
            } else {
                memcpy(d, src, sizeof(float) * (size_t)F);
            }
        }
    }
    rt_kern_gemm(a->r, 0, 0, T * n, GU, F, w.xt, F, W, GU, 0.0f, w.z, GU);
    if (b)
        for (int64_t i = 0; i < T * n; i++) {
            float *restrict zr = w.z + i * GU;
            for (int64_t j = 0; j < GU; j++)
                zr[j] += b[j];
            if (p->bias == 2) /* the recurrent bias, PyTorch's second */
                for (int64_t j = 0; j < GU; j++)
                    zr[j] += b[GU + j];
        }
    /* the initial states: the inputs, a stateful layer's carried ones, or
     * zeros */
    const float *h0 = p->h0 ? a->x[p->h0] : a->state;
    const float *c0 = p->h0 ? a->x[p->h0 + 1] : a->state ? a->state + n * U : NULL;
    if (h0)
        memcpy(w.h, h0, sizeof(float) * (size_t)(n * U));
    else
        memset(w.h, 0, sizeof(float) * (size_t)(n * U));
    if (w.c && c0)
        memcpy(w.c, c0, sizeof(float) * (size_t)(n * U));
    else if (w.c)
        memset(w.c, 0, sizeof(float) * (size_t)(n * U));
    const int64_t ys = p->yrows * U; /* a sample's output */
    const int act = p->act, ract = p->ract;
    for (int64_t s = 0; s < T; s++) {
        float *zs = w.z + s * n * GU;
        const float *hp = w.h + s * n * U;
        float *h = w.h + (s + 1) * n * U;
        /* hr: the previous state as the recurrent kernel sees it */
        const float *hr = hp;
        if (mh) {
            float *restrict hm = w.hm + s * n * U;
            for (int64_t i = 0; i < n * U; i++)
                hm[i] = hp[i] * mh[i];
            hr = hm;
        }
        if (p->cell == RT__RNN_SIMPLE) {
            rt_kern_gemm(a->r, 0, 0, n, U, U, hr, U, Ur, U, 1.0f, zs, U);
            rt__ra_fwd(act, zs, n * U);
            memcpy(h, zs, sizeof(float) * (size_t)(n * U));
        } else if (p->cell == RT__RNN_LSTM) {
            rt_kern_gemm(a->r, 0, 0, n, GU, U, hr, U, Ur, GU, 1.0f, zs, GU);
            const float *cp = w.c + s * n * U;
            float *c = w.c + (s + 1) * n * U;
            for (int64_t i = 0; i < n; i++) {
                float *restrict z = zs + i * GU;
                rt__ra_fwd(ract, z, 2 * U);
                rt__ra_fwd(act, z + 2 * U, U);
                rt__ra_fwd(ract, z + 3 * U, U);
                float *restrict ci = c + i * U, *restrict hi = h + i * U;
                const float *restrict cpi = cp + i * U;
                for (int64_t j = 0; j < U; j++)
                    ci[j] = z[U + j] * cpi[j] + z[j] * z[2 * U + j];
                memcpy(hi, ci, sizeof(float) * (size_t)U);
                rt__ra_fwd(act, hi, U);
                for (int64_t j = 0; j < U; j++)
                    hi[j] *= z[3 * U + j];
            }
        } else { /* GRU */
            float *R = w.r, *E = w.e + s * n * U;
            const float *bh = b && p->reset_after ? b + GU : NULL;
            rt_kern_gemm(a->r, 0, 0, n, p->reset_after ? GU : 2 * U, U, hr, U, Ur, GU, 0.0f, R, GU);
            for (int64_t i = 0; i < n; i++) {
                float *restrict z = zs + i * GU;
                const float *restrict ri = R + i * GU;
                for (int64_t j = 0; j < 2 * U; j++)
                    z[j] += ri[j] + (bh ? bh[j] : 0.0f);
                rt__ra_fwd(ract, z, 2 * U);
                float *restrict ei = E + i * U;
                const float *restrict hri = hr + i * U;
                if (p->reset_after) {
                    for (int64_t j = 0; j < U; j++) {
                        ei[j] = ri[2 * U + j] + (bh ? bh[2 * U + j] : 0.0f);
                        z[2 * U + j] += z[U + j] * ei[j];
                    }
                } else {
                    for (int64_t j = 0; j < U; j++)
                        ei[j] = z[U + j] * hri[j];
                }
            }
            if (!p->reset_after) /* (r * h) U_h for the candidate */
                rt_kern_gemm(a->r, 0, 0, n, U, U, E, U, Ur + 2 * U, GU, 1.0f, zs + 2 * U, GU);
            for (int64_t i = 0; i < n; i++) {
                float *restrict z = zs + i * GU;
                rt__ra_fwd(act, z + 2 * U, U);
                float *restrict hi = h + i * U;
                const float *restrict hpi = hp + i * U;
                for (int64_t j = 0; j < U; j++)
                    hi[j] = z[j] * hpi[j] + (1.0f - z[j]) * z[2 * U + j];
            }
        }
        const int64_t tau = rt__rnn_tau(p, s);
        if (mk)
            for (int64_t i = 0; i < n; i++) {
                if (mk[i * T + tau] != 0.0f)
                    continue;
                memcpy(h + i * U, hp + i * U, sizeof(float) * (size_t)U);
                if (w.c)
                    memcpy(w.c + ((s + 1) * n + i) * U, w.c + (s * n + i) * U,
                           sizeof(float) * (size_t)U);
            }
        if (p->seq) {
            const int64_t pos = rt__rnn_pos(p, s);
            for (int64_t i = 0; i < n; i++) {
                float *yo = a->y + i * ys + pos * U;
                if (mk && p->zero_masked && mk[i * T + tau] == 0.0f)
                    memset(yo, 0, sizeof(float) * (size_t)U);
                else
                    memcpy(yo, h + i * U, sizeof(float) * (size_t)U);
            }
        }
    }
    if (!p->seq && !p->ret_state)
        memcpy(a->y, w.h + T * n * U, sizeof(float) * (size_t)(n * U));
    for (int64_t i = 0; p->ret_state && i < n; i++) {
        /* the output's rows, then the final h and c (return_state) */
        float *yi = a->y + i * ys;
        const float *hT = w.h + (T * n + i) * U;
        if (!p->seq)
            memcpy(yi, hT, sizeof(float) * (size_t)U);
        memcpy(yi + p->orows * U, hT, sizeof(float) * (size_t)U);
        if (w.c)
            memcpy(yi + (p->orows + 1) * U, w.c + (T * n + i) * U, sizeof(float) * (size_t)U);
    }
    if (a->state && a->r->carry) {
        memcpy(a->state, w.h + T * n * U, sizeof(float) * (size_t)(n * U));
        if (w.c)
            memcpy(a->state + n * U, w.c + T * n * U, sizeof(float) * (size_t)(n * U));
    }
}

/* ------------------------------------------------------------ backward */

/* d[j] (+)= column sums of rows of m (rows x cols, leading dim ld) */
static void rt__colsum(float *restrict d, const float *m, int64_t rows, int64_t cols, int64_t ld,
                       int accum)
{
    if (!accum)
        memset(d, 0, sizeof(float) * (size_t)cols);
    for (int64_t i = 0; i < rows; i++) {
        const float *restrict r = m + i * ld;
        for (int64_t j = 0; j < cols; j++)
            d[j] += r[j];
    }
}

void rt_kern_rnn_bwd(const rt__kargs *a)
{
    const rt__node *nd = a->nd;
    const rt__rnn_params *p = rt__rnn_cp(nd);
    const int64_t n = a->r->n, T = p->T, F = p->F, U = p->U, G = p->G, GU = G * U;
    rt__rws w = {0};
    rt__rws_floats(p, n, &w, a->ws);
    const float *W = a->x[1], *Ur = a->x[2];
    float *dh = a->scratch, *dc = dh + n * U, *tmp = dc + n * U;
    float *sdh = tmp + n * U, *sdc = sdh + n * U;
    memset(dh, 0, sizeof(float) * (size_t)(2 * n * U));
    const int64_t ys = p->yrows * U; /* a sample's output */
    for (int64_t i = 0; p->ret_state && i < n; i++) {
        /* the final states' own gradients (return_state) */
        const float *g = a->dy + i * ys + p->orows * U;
        memcpy(dh + i * U, g, sizeof(float) * (size_t)U);
        if (p->cell == RT__RNN_LSTM)
            memcpy(dc + i * U, g + U, sizeof(float) * (size_t)U);
    }
    const float *mk = p->mask ? a->x[p->mask] : NULL;
    const int act = p->act, ract = p->ract;
    /* the forward's masks (training with a rate above 0) and the states
     * the recurrent kernel saw */
    const float *mx = a->r->training ? w.mx : NULL, *mh = a->r->training ? w.mh : NULL;
    const float *Hr = mh ? w.hm : w.h;
    for (int64_t s = T - 1; s >= 0; s--) {
        float *zs = w.z + s * n * GU;
        const float *hp = w.h + s * n * U, *h = w.h + (s + 1) * n * U;
        const float *hr = Hr + s * n * U;
        const int64_t tau = rt__rnn_tau(p, s);
        if (p->seq) {
            const int64_t pos = rt__rnn_pos(p, s);
            for (int64_t i = 0; i < n; i++) {
                if (mk && p->zero_masked && mk[i * T + tau] == 0.0f)
                    continue;
                float *restrict di = dh + i * U;
                const float *restrict g = a->dy + i * ys + pos * U;
                for (int64_t j = 0; j < U; j++)
                    di[j] += g[j];
            }
        } else if (s == T - 1) {
            for (int64_t i = 0; i < n; i++) {
                float *restrict di = dh + i * U;
                const float *restrict g = a->dy + i * ys;
                for (int64_t j = 0; j < U; j++)
                    di[j] += g[j];
            }
        }
        if (mk) /* a masked step passes these through */
            for (int64_t i = 0; i < n; i++)
                if (mk[i * T + tau] == 0.0f) {
                    memcpy(sdh + i * U, dh + i * U, sizeof(float) * (size_t)U);
                    memcpy(sdc + i * U, dc + i * U, sizeof(float) * (size_t)U);
                }
        if (p->cell == RT__RNN_SIMPLE) {
            for (int64_t i = 0; i < n * U; i++)
                zs[i] = dh[i] * rt__ra_d(act, h[i]);
            rt_kern_gemm(a->r, 0, 1, n, U, U, zs, U, Ur, U, 0.0f, dh, U);
            if (mh)
                for (int64_t i = 0; i < n * U; i++)
                    dh[i] *= mh[i];
        } else if (p->cell == RT__RNN_LSTM) {
            const float *c = w.c + (s + 1) * n * U, *cp = w.c + s * n * U;
            for (int64_t i = 0; i < n; i++) {
                float *restrict z = zs + i * GU;
                float *restrict dhi = dh + i * U, *restrict dci = dc + i * U;
                const float *restrict ci = c + i * U, *restrict cpi = cp + i * U;
                float *restrict tc = tmp; /* act(c) for this row */
                memcpy(tc, ci, sizeof(float) * (size_t)U);
                rt__ra_fwd(act, tc, U);
                for (int64_t j = 0; j < U; j++) {
                    const float ig = z[j], fg = z[U + j], gg = z[2 * U + j], og = z[3 * U + j];
                    const float dcc = dci[j] + dhi[j] * og * rt__ra_d(act, tc[j]);
                    z[3 * U + j] = dhi[j] * tc[j] * rt__ra_d(ract, og);
                    z[j] = dcc * gg * rt__ra_d(ract, ig);
                    z[U + j] = dcc * cpi[j] * rt__ra_d(ract, fg);
                    z[2 * U + j] = dcc * ig * rt__ra_d(act, gg);
                    dci[j] = dcc * fg;
                }
            }
            rt_kern_gemm(a->r, 0, 1, n, U, GU, zs, GU, Ur, GU, 0.0f, dh, U);
            if (mh)
                for (int64_t i = 0; i < n * U; i++)
                    dh[i] *= mh[i];
        } else { /* GRU */
            float *E = w.e + s * n * U;
            for (int64_t i = 0; i < n; i++) {
                float *restrict z = zs + i * GU, *restrict ei = E + i * U;
                float *restrict dhi = dh + i * U;
                const float *restrict hpi = hp + i * U;
                for (int64_t j = 0; j < U; j++) {
                    const float zg = z[j], hh = z[2 * U + j];
                    const float da = dhi[j] * (1.0f - zg) * rt__ra_d(act, hh);
                    z[j] = dhi[j] * (hpi[j] - hh) * rt__ra_d(ract, zg);
                    z[2 * U + j] = da;
                    dhi[j] *= zg;
                    if (p->reset_after) {
                        const float rg = z[U + j];
                        z[U + j] = da * ei[j] * rt__ra_d(ract, rg);
                        ei[j] = da * rg;
                    }
                }
            }
            /* gr: the gradient of the state the recurrent kernel saw; dh
             * itself without recurrent dropout, else dc (unused by GRU),
             * scaled by the mask into dh at the end */
            float *gr = mh ? dc : dh;
            const float gbeta = mh ? 0.0f : 1.0f;
            if (p->reset_after) {
                rt_kern_gemm(a->r, 0, 1, n, U, U, E, U, Ur + 2 * U, GU, gbeta, gr, U);
            } else {
                /* d(r * h_prev) = da U_h^T, then dr and the direct dh */
                rt_kern_gemm(a->r, 0, 1, n, U, U, zs + 2 * U, GU, Ur + 2 * U, GU, 0.0f, tmp, U);
                for (int64_t i = 0; i < n; i++) {
                    float *restrict z = zs + i * GU;
                    float *restrict gi = gr + i * U;
                    const float *restrict hri = hr + i * U, *restrict ti = tmp + i * U;
                    for (int64_t j = 0; j < U; j++) {
                        const float rg = z[U + j];
                        gi[j] = (mh ? 0.0f : gi[j]) + ti[j] * rg;
                        z[U + j] = ti[j] * hri[j] * rt__ra_d(ract, rg);
                    }
                }
            }
            rt_kern_gemm(a->r, 0, 1, n, U, 2 * U, zs, GU, Ur, GU, 1.0f, gr, U);
            if (mh)
                for (int64_t i = 0; i < n * U; i++)
                    dh[i] += gr[i] * mh[i];
        }
        if (mk)
            for (int64_t i = 0; i < n; i++) {
                if (mk[i * T + tau] != 0.0f)
                    continue;
                memset(zs + i * GU, 0, sizeof(float) * (size_t)GU);
                if (w.e)
                    memset(w.e + (s * n + i) * U, 0, sizeof(float) * (size_t)U);
                memcpy(dh + i * U, sdh + i * U, sizeof(float) * (size_t)U);
                memcpy(dc + i * U, sdc + i * U, sizeof(float) * (size_t)U);
            }
    }
    if (p->mask && a->dx[p->mask] && !((a->accum >> p->mask) & 1u))
        memset(a->dx[p->mask], 0, sizeof(float) * (size_t)(n * T));
    /* the initial states' gradients: what reached step 0's states */
    for (int k = 0; p->h0 && k < (p->cell == RT__RNN_LSTM ? 2 : 1); k++) {
        float *d = a->dx[p->h0 + k];
        const float *g = k ? dc : dh;
        if (!d)
            continue;
        if ((a->accum >> (p->h0 + k)) & 1u)
            for (int64_t i = 0; i < n * U; i++)
                d[i] += g[i];
        else
            memcpy(d, g, sizeof(float) * (size_t)(n * U));
    }
    const int64_t TN = T * n;
    const float *dZ = w.z;
    if (a->dx[2]) {
        const float beta = (a->accum & 4u) ? 1.0f : 0.0f;
        if (p->cell != RT__RNN_GRU) {
            rt_kern_gemm(a->r, 1, 0, U, GU, TN, Hr, U, dZ, GU, beta, a->dx[2], GU);
        } else {
            rt_kern_gemm(a->r, 1, 0, U, 2 * U, TN, Hr, U, dZ, GU, beta, a->dx[2], GU);
            if (p->reset_after)
                rt_kern_gemm(a->r, 1, 0, U, U, TN, Hr, U, w.e, U, beta, a->dx[2] + 2 * U, GU);
            else
                rt_kern_gemm(a->r, 1, 0, U, U, TN, w.e, U, dZ + 2 * U, GU, beta, a->dx[2] + 2 * U,
                             GU);
        }
    }
    if (a->dx[1])
        rt_kern_gemm(a->r, 1, 0, F, GU, TN, w.xt, F, dZ, GU, (a->accum & 2u) ? 1.0f : 0.0f,
                     a->dx[1], GU);
    if (p->bias && a->dx[3]) {
        const int acc = (a->accum & 8u) != 0;
        rt__colsum(a->dx[3], dZ, TN, GU, GU, acc);
        if (p->bias == 2)
            rt__colsum(a->dx[3] + GU, dZ, TN, GU, GU, acc);
        if (p->reset_after) { /* recurrent bias row: z and r as the input's, h from E */
            rt__colsum(a->dx[3] + GU, dZ, TN, 2 * U, GU, acc);
            rt__colsum(a->dx[3] + GU + 2 * U, w.e, TN, U, U, acc);
        }
    }
    if (a->dx[0]) {
        /* dXt = dZ W^T into the Xt block (its last reader was dW) */
        rt_kern_gemm(a->r, 0, 1, TN, F, GU, dZ, GU, W, GU, 0.0f, w.xt, F);
        const int acc = (a->accum & 1u) != 0;
        for (int64_t s = 0; s < T; s++) {
            const int64_t t = rt__rnn_tau(p, s);
            for (int64_t i = 0; i < n; i++) {
                float *restrict d = a->dx[0] + (i * T + t) * F;
                const float *restrict g = w.xt + (s * n + i) * F;
                if (mx) {
                    const float *restrict m = mx + i * F;
                    for (int64_t j = 0; j < F; j++)
                        d[j] = (acc ? d[j] : 0.0f) + g[j] * m[j];
                } else if (acc) {
                    for (int64_t j = 0; j < F; j++)
                        d[j] += g[j];
                } else {
                    memcpy(d, g, sizeof(float) * (size_t)F);
                }
            }
        }
    }
}

/* ----------------------------------------------------------- Embedding */

/* the row an index names; out-of-range values (the exec rejects them
 * before a step) clamp instead of reading outside W */
static inline int64_t rt__emb_row(float v, int64_t V)
{
    if (!(v >= 0.0f))
        return 0;
    if (v >= (float)V)
        return V - 1;
    return (int64_t)v;
}

/* the factor row v takes this step: 1, or with Keras 1's dropout in
 * training 0 or 1 / (1 - rate) (rt__embed_row_scale) */
static inline float rt__emb_scale(const rt__kargs *a, const rt__embed_params *p, int64_t v)
{
    if (!(a->r->training && p->drop > 0.0f))
        return 1.0f;
    return rt__embed_row_scale(a->r->seed, a->r->step, (uint64_t)a->nd->id, p->drop, v);
}

void rt_kern_embedding_fwd(const rt__kargs *a)
{
    const rt__embed_params *p = rt__embed_cp(a->nd);
    const int64_t m = a->r->n * p->R, D = p->D;
    const float *x = a->x[0], *W = a->x[1];
    for (int64_t i = 0; i < m; i++) {
        const int64_t v = rt__emb_row(x[i], p->V);
        const float s = rt__emb_scale(a, p, v);
        if (s == 1.0f) {
            memcpy(a->y + i * D, W + v * D, sizeof(float) * (size_t)D);
        } else {
            float *restrict y = a->y + i * D;
            const float *restrict w = W + v * D;
            for (int64_t j = 0; j < D; j++)
                y[j] = w[j] * s;
        }
    }
}

void rt_kern_embedding_bwd(const rt__kargs *a)
{
    const rt__embed_params *p = rt__embed_cp(a->nd);
    if (!a->dx[1])
        return;
    const int64_t m = a->r->n * p->R, D = p->D;
    float *dW = a->dx[1];
    if (!(a->accum & 2u))
        memset(dW, 0, sizeof(float) * (size_t)(p->V * D));
    const float *x = a->x[0];
    for (int64_t i = 0; i < m; i++) {
        const int64_t v = rt__emb_row(x[i], p->V);
        const float s = rt__emb_scale(a, p, v);
        if (s == 0.0f)
            continue; /* a dropped row: no gradient */
        float *restrict d = dW + v * D;
        const float *restrict g = a->dy + i * D;
        if (s == 1.0f) {
            for (int64_t j = 0; j < D; j++)
                d[j] += g[j];
        } else {
            for (int64_t j = 0; j < D; j++)
                d[j] += g[j] * s;
        }
    }
}

/* ---------------------------------------------------- SequenceMask, Masking */

/* 1 when any of the step's R values differs from the mask value */
static inline float rt__step_kept(const float *restrict x, int64_t R, float v)
{
    for (int64_t j = 0; j < R; j++)
        if (x[j] != v)
            return 1.0f;
    return 0.0f;
}

void rt_kern_seqmask_fwd(const rt__kargs *a)
{
    const rt__seqmask_params *p = rt__seqmask_cp(a->nd);
    const int64_t steps = a->r->n * p->T;
    for (int64_t k = 0; k < steps; k++)
        a->y[k] = rt__step_kept(a->x[0] + k * p->R, p->R, p->value);
}

void rt_kern_masking_fwd(const rt__kargs *a)
{
    const rt__seqmask_params *p = rt__seqmask_cp(a->nd);
    const int64_t steps = a->r->n * p->T, R = p->R;
    for (int64_t k = 0; k < steps; k++) {
        const float *x = a->x[0] + k * R;
        float *y = a->y + k * R;
        if (rt__step_kept(x, R, p->value) != 0.0f)
            memcpy(y, x, sizeof(float) * (size_t)R);
        else
            memset(y, 0, sizeof(float) * (size_t)R);
    }
}

void rt_kern_masking_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const rt__seqmask_params *p = rt__seqmask_cp(a->nd);
    const int64_t steps = a->r->n * p->T, R = p->R;
    const int acc = (a->accum & 1u) != 0;
    for (int64_t k = 0; k < steps; k++) {
        const float keep = rt__step_kept(a->x[0] + k * R, R, p->value);
        float *restrict d = a->dx[0] + k * R;
        const float *restrict g = a->dy + k * R;
        for (int64_t j = 0; j < R; j++)
            d[j] = (acc ? d[j] : 0.0f) + keep * g[j];
    }
}
