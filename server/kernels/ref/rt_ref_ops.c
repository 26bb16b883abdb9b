/* rt_ref_ops.c - the reference kernels of the dense, elementwise, softmax,
 * copy, dropout, concat, index-map and embedding ops. */
#include <math.h>
#include <string.h>

#include "ref/rt_ref.h"

void rt_ref_clear(const rt__kargs *a, int k, int64_t n)
{
    if (!(a->accum >> k & 1u))
        for (int64_t i = 0; i < n; i++)
            a->dx[k][i] = 0.0f;
}

static double rt_ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* ------------------------------------------------------------------ dense */

/* Dense's activation: its own, or the Relu/Sigmoid/Tanh a CPU-style
 * fusion would have absorbed (this backend offers no such rule, but reads
 * the node the same way) */
static int rt_ref_dense_act(const rt__node *nd)
{
    int act = rt__dense_cp(nd)->act;
    if (act || !nd->fused)
        return act;
    if (nd->fused == &rt__op_relu)
        return RT__ACT_RELU;
    if (nd->fused == &rt__op_sigmoid)
        return RT__ACT_SIGMOID;
    return RT__ACT_TANH;
}

static double rt_ref_act(int act, double z)
{
    if (act == RT__ACT_RELU)
        return z > 0 ? z : 0;
    if (act == RT__ACT_SIGMOID)
        return rt_ref_sigmoid(z);
    if (act == RT__ACT_TANH)
        return tanh(z);
    return z;
}

/* the activation's derivative from its output y */
static double rt_ref_act_dy(int act, double y)
{
    if (act == RT__ACT_RELU)
        return y > 0 ? 1 : 0;
    if (act == RT__ACT_SIGMOID)
        return y * (1 - y);
    if (act == RT__ACT_TANH)
        return 1 - y * y;
    return 1;
}

/* y (R,N) = act(x (R,K) W (K,N) + b) */
void rt_ref_dense_fwd(const rt__kargs *a)
{
    const rt__node *nd = a->nd;
    const int64_t K = rt__dense_cp(nd)->K, N = rt__dense_cp(nd)->N;
    const int64_t R = rt__rows(nd->in_shape[0], a->r->n);
    const int act = rt_ref_dense_act(nd);
    const float *x = a->x[0], *w = a->x[1], *b = nd->n_in > 2 ? a->x[2] : NULL;
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = b ? b[j] : 0.0;
            for (int64_t k = 0; k < K; k++)
                s += (double)x[i * K + k] * w[k * N + j];
            a->y[i * N + j] = (float)rt_ref_act(act, s);
        }
}

void rt_ref_dense_bwd(const rt__kargs *a)
{
    const rt__node *nd = a->nd;
    const int64_t K = rt__dense_cp(nd)->K, N = rt__dense_cp(nd)->N;
    const int64_t R = rt__rows(nd->in_shape[0], a->r->n);
    const int act = rt_ref_dense_act(nd);
    const float *x = a->x[0], *w = a->x[1], *dy = a->dy, *y = a->y;
    /* dz = dy * act'(y), recomputed where it is read */
#define RT_REF_DZ(i, j) ((double)dy[(i)*N + (j)] * (act ? rt_ref_act_dy(act, y[(i)*N + (j)]) : 1.0))
    if (a->dx[0])
        for (int64_t i = 0; i < R; i++)
            for (int64_t k = 0; k < K; k++) {
                double s = 0;
                for (int64_t j = 0; j < N; j++)
                    s += RT_REF_DZ(i, j) * w[k * N + j];
                rt_ref_put(a, 0, i * K + k, s);
            }
    if (a->dx[1])
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t i = 0; i < R; i++)
                    s += (double)x[i * K + k] * RT_REF_DZ(i, j);
                rt_ref_put(a, 1, k * N + j, s);
            }
    if (nd->n_in > 2 && a->dx[2])
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t i = 0; i < R; i++)
                s += RT_REF_DZ(i, j);
            rt_ref_put(a, 2, j, s);
        }
#undef RT_REF_DZ
}

/* ----------------------------------------------------------- batch matmul */

/* BatchMatMul: element (i, j) of op(a) / op(b) in product g, from the
 * stored layout ((M,K) or, transposed, (K,M)) */
static double rt_ref_bmm_a(const rt__bmm_params *p, const float *a, int64_t g, int64_t i, int64_t k)
{
    return a[g * p->M * p->K + (p->ta ? k * p->M + i : i * p->K + k)];
}
static double rt_ref_bmm_b(const rt__bmm_params *p, const float *b, int64_t g, int64_t k, int64_t j)
{
    return b[g * p->K * p->N + (p->tb ? j * p->K + k : k * p->N + j)];
}

void rt_ref_bmm_fwd(const rt__kargs *a)
{
    const rt__bmm_params *p = rt__bmm_cp(a->nd);
    const int64_t cnt = p->G * (a->nd->in_shape[0]->batched ? a->r->n : 1);
    for (int64_t g = 0; g < cnt; g++)
        for (int64_t i = 0; i < p->M; i++)
            for (int64_t j = 0; j < p->N; j++) {
                double s = 0;
                for (int64_t k = 0; k < p->K; k++)
                    s += rt_ref_bmm_a(p, a->x[0], g, i, k) * rt_ref_bmm_b(p, a->x[1], g, k, j);
                a->y[(g * p->M + i) * p->N + j] = (float)s;
            }
}

/* d op(a)(i,k) = sum_j dy(i,j) op(b)(k,j); d op(b)(k,j) = sum_i op(a)(i,k)
 * dy(i,j); each written at its stored place */
void rt_ref_bmm_bwd(const rt__kargs *a)
{
    const rt__bmm_params *p = rt__bmm_cp(a->nd);
    const int64_t cnt = p->G * (a->nd->in_shape[0]->batched ? a->r->n : 1);
    const int64_t M = p->M, N = p->N, K = p->K;
    const float *dy = a->dy;
    for (int64_t g = 0; g < cnt; g++) {
        if (a->dx[0])
            for (int64_t i = 0; i < M; i++)
                for (int64_t k = 0; k < K; k++) {
                    double s = 0;
                    for (int64_t j = 0; j < N; j++)
                        s += (double)dy[(g * M + i) * N + j] * rt_ref_bmm_b(p, a->x[1], g, k, j);
                    rt_ref_put(a, 0, g * M * K + (p->ta ? k * M + i : i * K + k), s);
                }
        if (a->dx[1])
            for (int64_t k = 0; k < K; k++)
                for (int64_t j = 0; j < N; j++) {
                    double s = 0;
                    for (int64_t i = 0; i < M; i++)
                        s += rt_ref_bmm_a(p, a->x[0], g, i, k) * dy[(g * M + i) * N + j];
                    rt_ref_put(a, 1, g * K * N + (p->tb ? j * K + k : k * N + j), s);
                }
    }
}

/* BandMask: element (i, j) of each (T, S) matrix kept, or -1e9 */
void rt_ref_band_fwd(const rt__kargs *a)
{
    const rt__band_params *p = rt__band_cp(a->nd);
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    for (int64_t k = 0; k < n; k++) {
        const int64_t i = k / p->S % p->T, j = k % p->S;
        a->y[k] = rt__band_keep(p, i, j) ? a->x[0][k] : -1e9f;
    }
}

void rt_ref_band_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const rt__band_params *p = rt__band_cp(a->nd);
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    for (int64_t k = 0; k < n; k++) {
        const int64_t i = k / p->S % p->T, j = k % p->S;
        rt_ref_put(a, 0, k, rt__band_keep(p, i, j) ? (double)a->dy[k] : 0.0);
    }
}

/* ------------------------------------------------------- broadcasting binaries */

enum { RT_REF_ADD, RT_REF_SUB, RT_REF_MUL, RT_REF_DIV, RT_REF_MAX, RT_REF_MIN, RT_REF_PRELU };

static double rt_ref_bin(int op, double x, double y)
{
    switch (op) {
    case RT_REF_ADD: return x + y;
    case RT_REF_SUB: return x - y;
    case RT_REF_MUL: return x * y;
    case RT_REF_DIV: return (double)((float)x / (float)y); /* float division, as f32 graphs */
    case RT_REF_MAX: return x >= y ? x : y;
    case RT_REF_MIN: return x <= y ? x : y;
    default: return x > 0 ? x : y * x;
    }
}

/* d op / d input k at (x, y); ties of Max/Min go to input 0 */
static double rt_ref_bin_d(int op, int k, double x, double y)
{
    switch (op) {
    case RT_REF_ADD: return 1;
    case RT_REF_SUB: return k ? -1 : 1;
    case RT_REF_MUL: return k ? x : y;
    case RT_REF_DIV: return k ? -x / (y * y) : 1 / y;
    case RT_REF_MAX: return (x >= y) == !k ? 1 : 0;
    case RT_REF_MIN: return (x <= y) == !k ? 1 : 0;
    default: return x > 0 ? (k ? 0 : 1) : (k ? x : y);
    }
}

/* The output's R dims (dim 0 the runtime batch when batched) and each
 * element's offsets into the inputs, from the strides of op_eltwise.c */
static int64_t rt_ref_bc_dims(const rt__kargs *a, int64_t *dims)
{
    const rt__bcast_params *p = rt__bcast_cp(a->nd);
    int64_t t = 1;
    for (int i = 0; i < p->R; i++) {
        dims[i] = i == 0 && p->batched ? a->r->n : p->d[i];
        t *= dims[i];
    }
    return t;
}

static void rt_ref_bc_offsets(const rt__bcast_params *p, const int64_t *dims, int64_t o,
                              int64_t *oa, int64_t *ob)
{
    *oa = *ob = 0;
    for (int i = p->R - 1; i >= 0; i--) {
        const int64_t c = o % dims[i];
        o /= dims[i];
        *oa += c * p->sa[i];
        *ob += c * p->sb[i];
    }
}

static void rt_ref_bin_fwd(const rt__kargs *a, int op)
{
    const rt__bcast_params *p = rt__bcast_cp(a->nd);
    int64_t dims[RT__BC_MAXR], oa, ob;
    const int64_t t = rt_ref_bc_dims(a, dims);
    for (int64_t o = 0; o < t; o++) {
        rt_ref_bc_offsets(p, dims, o, &oa, &ob);
        a->y[o] = (float)rt_ref_bin(op, a->x[0][oa], a->x[1][ob]);
    }
}

static void rt_ref_bin_bwd(const rt__kargs *a, int op)
{
    const rt__bcast_params *p = rt__bcast_cp(a->nd);
    int64_t dims[RT__BC_MAXR], oa, ob;
    const int64_t t = rt_ref_bc_dims(a, dims);
    for (int k = 0; k < 2; k++) {
        if (!a->dx[k])
            continue;
        /* sums over the broadcast dims, in double, then one store each */
        const int64_t nk = rt__numel_n(a->nd->in_shape[k], a->r->n);
        rt_ref_clear(a, k, nk);
        for (int64_t o = 0; o < t; o++) {
            rt_ref_bc_offsets(p, dims, o, &oa, &ob);
            const double g = (double)a->dy[o] * rt_ref_bin_d(op, k, a->x[0][oa], a->x[1][ob]);
            float *d = a->dx[k] + (k ? ob : oa);
            *d = (float)((double)*d + g);
        }
    }
}

#define RT_REF_BIN(nm, OP)                                                \
    void rt_ref_##nm##_fwd(const rt__kargs *a) { rt_ref_bin_fwd(a, OP); } \
    void rt_ref_##nm##_bwd(const rt__kargs *a) { rt_ref_bin_bwd(a, OP); }
RT_REF_BIN(add, RT_REF_ADD)
RT_REF_BIN(sub, RT_REF_SUB)
RT_REF_BIN(mul, RT_REF_MUL)
RT_REF_BIN(div, RT_REF_DIV)
RT_REF_BIN(max, RT_REF_MAX)
RT_REF_BIN(min, RT_REF_MIN)
RT_REF_BIN(prelu, RT_REF_PRELU)
#undef RT_REF_BIN

/* ------------------------------------------------------------ activations */

static void rt_ref_act_fwd(const rt__kargs *a, int act)
{
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    for (int64_t i = 0; i < n; i++)
        a->y[i] = (float)rt_ref_act(act, a->x[0][i]);
}

static void rt_ref_act_bwd(const rt__kargs *a, int act)
{
    if (!a->dx[0])
        return;
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    for (int64_t i = 0; i < n; i++)
        rt_ref_put(a, 0, i, (double)a->dy[i] * rt_ref_act_dy(act, a->y[i]));
}

void rt_ref_relu_fwd(const rt__kargs *a) { rt_ref_act_fwd(a, RT__ACT_RELU); }
void rt_ref_relu_bwd(const rt__kargs *a) { rt_ref_act_bwd(a, RT__ACT_RELU); }
void rt_ref_sigmoid_fwd(const rt__kargs *a) { rt_ref_act_fwd(a, RT__ACT_SIGMOID); }
void rt_ref_sigmoid_bwd(const rt__kargs *a) { rt_ref_act_bwd(a, RT__ACT_SIGMOID); }
void rt_ref_tanh_fwd(const rt__kargs *a) { rt_ref_act_fwd(a, RT__ACT_TANH); }
void rt_ref_tanh_bwd(const rt__kargs *a) { rt_ref_act_bwd(a, RT__ACT_TANH); }

static double rt_ref_softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }

/* the formulas of op_act.c, in double */
static double rt_ref_u(const rt__unary_params *p, double x)
{
    const double al = p->alpha, be = p->beta, ga = p->gamma;
    switch (p->kind) {
    case RT__U_ELU: return x > 0 ? x : al * expm1(x);
    case RT__U_SELU: return ga * (x > 0 ? x : al * expm1(x));
    case RT__U_LEAKY: return x > 0 ? x : al * x;
    case RT__U_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case RT__U_GELU_TANH: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case RT__U_ERF: return erf(x);
    case RT__U_SOFTPLUS: return rt_ref_softplus(x);
    case RT__U_SOFTSIGN: return x / (1 + fabs(x));
    case RT__U_HARDSIGMOID: return fmin(1, fmax(0, al * x + be));
    case RT__U_SWISH: return x * rt_ref_sigmoid(al * x);
    case RT__U_CLIP: return x < al ? al : x > be ? be : x;
    case RT__U_THRESH: return x > al ? x : 0;
    case RT__U_KRELU: return x > be ? fmin(fmax(x, 0), ga) : al * (x - be);
    case RT__U_EXP: return exp(x);
    case RT__U_SCALE: return al * x + be;
    case RT__U_MISH: return x * tanh(rt_ref_softplus(x));
    case RT__U_HARDSWISH: return x * fmin(1, fmax(0, al * x + be));
    case RT__U_LOGSIGMOID: return -rt_ref_softplus(-x);
    case RT__U_SQRT: return sqrt(x);
    case RT__U_ABS: return fabs(x);
    case RT__U_LOG: return log(x);
    default: return x;
    }
}

/* derivatives; at the kinks as TensorFlow (op_act.c) */
static double rt_ref_du(const rt__unary_params *p, double x)
{
    const double al = p->alpha, be = p->beta, ga = p->gamma;
    switch (p->kind) {
    case RT__U_ELU: return x > 0 ? 1 : al * exp(x);
    case RT__U_SELU: return ga * (x > 0 ? 1 : al * exp(x));
    case RT__U_LEAKY: return x > 0 ? 1 : al;
    case RT__U_GELU: return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
    case RT__U_GELU_TANH: {
        const double c = sqrt(2 / M_PI), t = tanh(c * (x + 0.044715 * x * x * x));
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
    }
    case RT__U_ERF: return 2 / sqrt(M_PI) * exp(-x * x);
    case RT__U_SOFTPLUS: return rt_ref_sigmoid(x);
    case RT__U_SOFTSIGN: return 1 / ((1 + fabs(x)) * (1 + fabs(x)));
    case RT__U_HARDSIGMOID: {
        const double v = al * x + be;
        return v > 0 && v < 1 ? al : 0;
    }
    case RT__U_SWISH: {
        const double s = rt_ref_sigmoid(al * x);
        return s + al * x * s * (1 - s);
    }
    case RT__U_CLIP: return x > al && x < be ? 1 : 0;
    case RT__U_THRESH: return x > al ? 1 : 0;
    case RT__U_KRELU: return x > be ? (x > 0 && x < ga ? 1 : 0) : al;
    case RT__U_EXP: return exp(x);
    case RT__U_SCALE: return al;
    case RT__U_MISH: {
        const double t = tanh(rt_ref_softplus(x));
        return t + x * (1 - t * t) * rt_ref_sigmoid(x);
    }
    case RT__U_HARDSWISH: {
        const double v = al * x + be;
        return v <= 0 ? 0 : v >= 1 ? 1 : v + al * x;
    }
    case RT__U_LOGSIGMOID: return rt_ref_sigmoid(-x);
    case RT__U_SQRT: return 0.5 / sqrt(x);
    case RT__U_ABS: return x > 0 ? 1 : x < 0 ? -1 : 0;
    case RT__U_LOG: return 1 / x;
    default: return 1;
    }
}

void rt_ref_unary_fwd(const rt__kargs *a)
{
    const rt__unary_params *p = rt__unary_cp(a->nd);
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    for (int64_t i = 0; i < n; i++)
        a->y[i] = (float)rt_ref_u(p, a->x[0][i]);
}

void rt_ref_unary_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const rt__unary_params *p = rt__unary_cp(a->nd);
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    for (int64_t i = 0; i < n; i++)
        rt_ref_put(a, 0, i, (double)a->dy[i] * rt_ref_du(p, a->x[0][i]));
}

/* ---------------------------------------------------------------- softmax */

void rt_ref_softmax_fwd(const rt__kargs *a)
{
    const int64_t C = rt__softmax_cp(a->nd)->C, R = rt__rows(&a->nd->out, a->r->n);
    for (int64_t r = 0; r < R; r++) {
        const float *x = a->x[0] + r * C;
        double m = x[0], s = 0;
        for (int64_t j = 1; j < C; j++)
            m = x[j] > m ? x[j] : m;
        for (int64_t j = 0; j < C; j++)
            s += exp(x[j] - m);
        for (int64_t j = 0; j < C; j++)
            a->y[r * C + j] = (float)(exp(x[j] - m) / s);
    }
}

void rt_ref_softmax_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const int64_t C = rt__softmax_cp(a->nd)->C, R = rt__rows(&a->nd->out, a->r->n);
    for (int64_t r = 0; r < R; r++) {
        const float *y = a->y + r * C, *dy = a->dy + r * C;
        double s = 0;
        for (int64_t j = 0; j < C; j++)
            s += (double)dy[j] * y[j];
        for (int64_t j = 0; j < C; j++)
            rt_ref_put(a, 0, r * C + j, y[j] * (dy[j] - s));
    }
}

void rt_ref_logsoftmax_fwd(const rt__kargs *a)
{
    const int64_t C = rt__softmax_cp(a->nd)->C, R = rt__rows(&a->nd->out, a->r->n);
    for (int64_t r = 0; r < R; r++) {
        const float *x = a->x[0] + r * C;
        double m = x[0], s = 0;
        for (int64_t j = 1; j < C; j++)
            m = x[j] > m ? x[j] : m;
        for (int64_t j = 0; j < C; j++)
            s += exp(x[j] - m);
        for (int64_t j = 0; j < C; j++)
            a->y[r * C + j] = (float)(x[j] - m - log(s));
    }
}

void rt_ref_logsoftmax_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const int64_t C = rt__softmax_cp(a->nd)->C, R = rt__rows(&a->nd->out, a->r->n);
    for (int64_t r = 0; r < R; r++) {
        const float *y = a->y + r * C, *dy = a->dy + r * C;
        double s = 0;
        for (int64_t j = 0; j < C; j++)
            s += dy[j];
        for (int64_t j = 0; j < C; j++)
            rt_ref_put(a, 0, r * C + j, dy[j] - exp(y[j]) * s);
    }
}

/* ----------------------------------------------------- copies and dropout */

void rt_ref_copy_fwd(const rt__kargs *a)
{
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    for (int64_t i = 0; i < n; i++)
        a->y[i] = a->x[0][i];
}

void rt_ref_copy_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    for (int64_t i = 0; i < n; i++)
        rt_ref_put(a, 0, i, a->dy[i]);
}

/* The masks are the engine's: a pure function of (seed, node, step,
 * element) through rt__rng_unit, so both backends drop the same elements. */
static double rt_ref_drop_u(const rt__kargs *a, int64_t i)
{
    const uint64_t ctr = ((uint64_t)a->r->step << 36) | (uint64_t)i;
    return rt__rng_unit(a->r->seed, RT__STREAM_DROPOUT + (uint64_t)a->nd->id, ctr);
}

static double rt_ref_drop_normal(const rt__kargs *a, int64_t i)
{
    /* the same Box-Muller draw as the CPU kernels, in float: a normal is
     * part of the data here, not of the arithmetic being checked */
    const float u1 = (float)rt_ref_drop_u(a, 2 * i), u2 = (float)rt_ref_drop_u(a, 2 * i + 1);
    return sqrtf(-2.0f * logf(1.0f - u1)) * cosf(6.28318530717958648f * u2);
}

/* what element i is multiplied by (or, GaussianNoise, what is added) */
static double rt_ref_drop(const rt__kargs *a, const rt__dropout_params *p, int64_t i)
{
    const float rate = (float)p->rate;
    switch (p->mode) {
    case RT__DROP_SPATIAL: {
        const int64_t key = (i / p->per) * p->C + i % p->C;
        return rt_ref_drop_u(a, key) >= rate ? 1.0f / (1.0f - rate) : 0.0;
    }
    case RT__DROP_NOISE: return (double)(rate * (float)rt_ref_drop_normal(a, i));
    case RT__DROP_GAUSS:
        return (double)(1.0f + sqrtf(rate / (1.0f - rate)) * (float)rt_ref_drop_normal(a, i));
    default: /* with a noise_shape, elements of one mask element share its draw */
        return rt_ref_drop_u(a, rt__drop_key(p, i)) >= rate ? 1.0f / (1.0f - rate) : 0.0;
    }
}

void rt_ref_dropout_fwd(const rt__kargs *a)
{
    const rt__dropout_params *p = rt__dropout_cp(a->nd);
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    const int on = a->r->training && p->rate != 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double x = a->x[0][i];
        if (!on)
            a->y[i] = (float)x;
        else if (p->mode == RT__DROP_NOISE)
            a->y[i] = (float)(x + rt_ref_drop(a, p, i));
        else
            a->y[i] = (float)(x * rt_ref_drop(a, p, i));
    }
}

void rt_ref_dropout_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const rt__dropout_params *p = rt__dropout_cp(a->nd);
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    const int scaled = a->r->training && p->rate != 0.0 && p->mode != RT__DROP_NOISE;
    for (int64_t i = 0; i < n; i++)
        rt_ref_put(a, 0, i, scaled ? a->dy[i] * rt_ref_drop(a, p, i) : a->dy[i]);
}

/* ActivityReg: y = x; the loss gains l1 sum|y| + l2 sum y^2 (over the
 * batch, divided by it when batch_mean) */
void rt_ref_actreg_fwd(const rt__kargs *a)
{
    const rt__actreg_params *p = rt__actreg_cp(a->nd);
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    double s1 = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        const double x = a->x[0][i];
        s1 += fabs(x);
        s2 += x * x;
        a->y[i] = (float)x;
    }
    if (a->r->act_pen)
        *a->r->act_pen += (p->l1 * s1 + p->l2 * s2) / (p->batch_mean ? (double)a->r->n : 1.0);
}

void rt_ref_actreg_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const rt__actreg_params *p = rt__actreg_cp(a->nd);
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    const double k = p->batch_mean ? 1.0 / (double)a->r->n : 1.0;
    for (int64_t i = 0; i < n; i++) {
        const double y = a->y[i], sg = (y > 0) - (y < 0);
        rt_ref_put(a, 0, i, a->dy[i] + k * (p->l1 * sg + 2 * p->l2 * y));
    }
}

/* ------------------------------------------------------------- Concat */

/* each of n * outer output rows is the inputs' rows one after another */
void rt_ref_concat_fwd(const rt__kargs *a)
{
    const rt__concat_params *p = rt__concat_cp(a->nd);
    const int64_t rows = a->r->n * p->outer;
    for (int64_t r = 0; r < rows; r++) {
        int64_t o = r * p->inner;
        for (int k = 0; k < p->k; k++)
            for (int64_t j = 0; j < p->in_inner[k]; j++)
                a->y[o++] = a->x[k][r * p->in_inner[k] + j];
    }
}

void rt_ref_concat_bwd(const rt__kargs *a)
{
    const rt__concat_params *p = rt__concat_cp(a->nd);
    const int64_t rows = a->r->n * p->outer;
    for (int64_t r = 0; r < rows; r++) {
        int64_t o = r * p->inner;
        for (int k = 0; k < p->k; k++) {
            for (int64_t j = 0; j < p->in_inner[k]; j++, o++)
                if (a->dx[k])
                    rt_ref_put(a, k, r * p->in_inner[k] + j, a->dy[o]);
        }
    }
}

/* ------------------------------------------------- Pad, Transpose, Reduce */

/* where input element i of a sample lands in the output, or -1 */
static int64_t rt_ref_map_at(const rt__map_params *p, int64_t i)
{
    int64_t o = p->base;
    for (int d = p->R - 1; d >= 0; d--) {
        const int64_t c = i % p->d[d];
        i /= p->d[d];
        if (c < p->lo[d] || c >= p->hi[d])
            return -1;
        o += c * p->os[d];
    }
    return o;
}

void rt_ref_map_fwd(const rt__kargs *a)
{
    const rt__map_params *p = rt__map_cp(a->nd);
    for (int64_t s = 0; s < a->r->n; s++) {
        float *y = a->y + s * p->out_numel;
        const float *x = a->x[0] + s * p->in_numel;
        for (int64_t o = 0; o < p->out_numel; o++)
            y[o] = p->fill ? p->value : 0.0f;
        if (p->comb) {
            /* each output's max, min or product in double, in input order;
             * a NaN input makes the max or min NaN, as on the CPU backend
             * and in NumPy's max (fmax/fmin would drop it) */
            for (int64_t o = 0; o < p->out_numel; o++) {
                double acc = p->comb == RT__COMB_MAX   ? -INFINITY
                             : p->comb == RT__COMB_MIN ? INFINITY
                                                       : 1.0;
                for (int64_t i = 0; i < p->in_numel; i++) {
                    if (rt_ref_map_at(p, i) != o)
                        continue;
                    if (p->comb == RT__COMB_PROD)
                        acc *= x[i];
                    else if (isnan(x[i]) || (p->comb == RT__COMB_MAX ? x[i] > acc : x[i] < acc))
                        acc = x[i];
                }
                y[o] = (float)acc;
            }
            continue;
        }
        if (p->reduce) {
            /* each output's sum in double, in input order */
            for (int64_t o = 0; o < p->out_numel; o++) {
                double acc = 0;
                for (int64_t i = 0; i < p->in_numel; i++)
                    if (rt_ref_map_at(p, i) == o)
                        acc += x[i];
                y[o] = (float)(acc * p->scale);
            }
            continue;
        }
        for (int64_t i = 0; i < p->in_numel; i++) {
            const int64_t o = rt_ref_map_at(p, i);
            if (o >= 0)
                y[o] = x[i];
        }
    }
}

/* Max/Min: dy split equally among the inputs equal to the output; Prod:
 * dy times the product of the other inputs (TensorFlow's math_grad.py),
 * each by a scan of the output's inputs */
static double rt_ref_comb_grad(const rt__map_params *p, const float *x, const float *y, int64_t i,
                               int64_t o)
{
    if (p->comb != RT__COMB_PROD) {
        if (x[i] != y[o])
            return 0;
        int64_t ties = 0;
        for (int64_t j = 0; j < p->in_numel; j++)
            ties += rt_ref_map_at(p, j) == o && x[j] == y[o];
        return 1.0 / (double)ties;
    }
    double prod = 1;
    for (int64_t j = 0; j < p->in_numel; j++)
        if (j != i && rt_ref_map_at(p, j) == o)
            prod *= x[j];
    return prod;
}

void rt_ref_map_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const rt__map_params *p = rt__map_cp(a->nd);
    for (int64_t s = 0; s < a->r->n; s++)
        for (int64_t i = 0; i < p->in_numel; i++) {
            const int64_t o = rt_ref_map_at(p, i);
            if (p->comb) {
                const double f =
                    rt_ref_comb_grad(p, a->x[0] + s * p->in_numel, a->y + s * p->out_numel, i, o);
                rt_ref_put(a, 0, s * p->in_numel + i, a->dy[s * p->out_numel + o] * f);
                continue;
            }
            const double g = o < 0 ? 0 : a->dy[s * p->out_numel + o] * (p->reduce ? p->scale : 1);
            rt_ref_put(a, 0, s * p->in_numel + i, g);
        }
}

/* -------------------------------------------------------------- Embedding */

/* row v's factor: Keras 1's Embedding(dropout) in training, else 1 */
static double rt_ref_emb_scale(const rt__kargs *a, const rt__embed_params *p, int64_t v)
{
    if (!a->r->training || p->drop == 0.0f)
        return 1.0;
    return rt__embed_row_scale(a->r->seed, a->r->step, (uint64_t)a->nd->id, p->drop, v);
}

void rt_ref_embedding_fwd(const rt__kargs *a)
{
    const rt__embed_params *p = rt__embed_cp(a->nd);
    const int64_t rows = a->r->n * p->R;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t v = (int64_t)a->x[0][r];
        const double s = rt_ref_emb_scale(a, p, v);
        for (int64_t j = 0; j < p->D; j++)
            a->y[r * p->D + j] = (float)(a->x[1][v * p->D + j] * s);
    }
}

void rt_ref_embedding_bwd(const rt__kargs *a)
{
    if (!a->dx[1])
        return;
    const rt__embed_params *p = rt__embed_cp(a->nd);
    const int64_t rows = a->r->n * p->R;
    rt_ref_clear(a, 1, p->V * p->D);
    for (int64_t r = 0; r < rows; r++) {
        const int64_t v = (int64_t)a->x[0][r];
        const double s = rt_ref_emb_scale(a, p, v);
        for (int64_t j = 0; j < p->D; j++)
            a->dx[1][v * p->D + j] += (float)(a->dy[r * p->D + j] * s);
    }
}
