/* rt_kern_act.c - the elementwise activations with constants of op_act.c
 * (rt__unary_params): forward y = f(x), backward dx (+)= dy * f'(x). */
#include <math.h>
#include <string.h>

#include "cpu/rt_kern_cpu.h"

static inline float rt__sig(float x)
{
    if (x >= 0.0f)
        return 1.0f / (1.0f + expf(-x));
    const float e = expf(x);
    return e / (1.0f + e);
}

#define RT__SQRT1_2 0.70710678118654752f
#define RT__INV_SQRT_2PI 0.39894228040143268f
#define RT__SQRT_2_PI 0.79788456080286536f
#define RT__GELU_C 0.044715f

static inline float rt__f(const rt__unary_params *p, float x)
{
    const float a = p->alpha, b = p->beta, g = p->gamma;
    switch (p->kind) {
    case RT__U_ELU: return x > 0.0f ? x : a * expm1f(x);
    case RT__U_SELU: return g * (x > 0.0f ? x : a * expm1f(x));
    case RT__U_LEAKY: return x > 0.0f ? x : a * x;
    case RT__U_GELU: return 0.5f * x * (1.0f + erff(x * RT__SQRT1_2));
    case RT__U_GELU_TANH:
        return 0.5f * x * (1.0f + tanhf(RT__SQRT_2_PI * (x + RT__GELU_C * x * x * x)));
    case RT__U_ERF: return erff(x);
    case RT__U_SOFTPLUS: return log1pf(expf(-fabsf(x))) + (x > 0.0f ? x : 0.0f);
    case RT__U_SOFTSIGN: return x / (1.0f + fabsf(x));
    case RT__U_HARDSIGMOID: {
        const float v = a * x + b;
        return v <= 0.0f ? 0.0f : v >= 1.0f ? 1.0f : v;
    }
    case RT__U_SWISH: return x * rt__sig(a * x);
    case RT__U_CLIP: return x < a ? a : x > b ? b : x;
    case RT__U_THRESH: return x > a ? x : 0.0f;
    case RT__U_KRELU: /* as Keras' backend relu: x * (x > threshold), clipped
                       * to [0, max_value], minus slope * relu(threshold - x) */
        if (x > b)
            return x <= 0.0f ? 0.0f : x >= g ? g : x;
        return a * (x - b);
    case RT__U_EXP: return expf(x);
    case RT__U_SCALE: return a * x + b;
    case RT__U_MISH: return x * tanhf(log1pf(expf(-fabsf(x))) + (x > 0.0f ? x : 0.0f));
    case RT__U_HARDSWISH: {
        const float v = a * x + b;
        return v <= 0.0f ? 0.0f : v >= 1.0f ? x : x * v;
    }
    case RT__U_LOGSIGMOID: return (x < 0.0f ? x : 0.0f) - log1pf(expf(-fabsf(x)));
    case RT__U_SQRT: return sqrtf(x);
    case RT__U_ABS: return fabsf(x);
    case RT__U_LOG: return logf(x);
    default: return x;
    }
}

/* f'(x) */
static inline float rt__df(const rt__unary_params *p, float x)
{
    const float a = p->alpha, b = p->beta, g = p->gamma;
    switch (p->kind) {
    case RT__U_ELU: return x > 0.0f ? 1.0f : a * expf(x);
    case RT__U_SELU: return g * (x > 0.0f ? 1.0f : a * expf(x));
    case RT__U_LEAKY: return x > 0.0f ? 1.0f : a;
    case RT__U_GELU:
        return 0.5f * (1.0f + erff(x * RT__SQRT1_2)) + x * RT__INV_SQRT_2PI * expf(-0.5f * x * x);
    case RT__U_GELU_TANH: {
        const float t = tanhf(RT__SQRT_2_PI * (x + RT__GELU_C * x * x * x));
        return 0.5f * (1.0f + t) +
               0.5f * x * (1.0f - t * t) * RT__SQRT_2_PI * (1.0f + 3.0f * RT__GELU_C * x * x);
    }
    case RT__U_ERF: return 1.12837916709551257f * expf(-x * x);
    case RT__U_SOFTPLUS: return rt__sig(x);
    case RT__U_SOFTSIGN: {
        const float d = 1.0f + fabsf(x);
        return 1.0f / (d * d);
    }
    case RT__U_HARDSIGMOID: {
        const float v = a * x + b;
        return v > 0.0f && v < 1.0f ? a : 0.0f;
    }
    case RT__U_SWISH: {
        const float s = rt__sig(a * x);
        return s + a * x * s * (1.0f - s);
    }
    case RT__U_CLIP: return x > a && x < b ? 1.0f : 0.0f;
    case RT__U_THRESH: return x > a ? 1.0f : 0.0f;
    case RT__U_KRELU:
        if (x > b)
            return x > 0.0f && x < g ? 1.0f : 0.0f;
        return a;
    case RT__U_EXP: return expf(x);
    case RT__U_SCALE: return a;
    case RT__U_MISH: {
        const float t = tanhf(log1pf(expf(-fabsf(x))) + (x > 0.0f ? x : 0.0f));
        return t + x * (1.0f - t * t) * rt__sig(x);
    }
    case RT__U_HARDSWISH: {
        const float v = a * x + b;
        return v <= 0.0f ? 0.0f : v >= 1.0f ? 1.0f : v + a * x;
    }
    case RT__U_LOGSIGMOID: return rt__sig(-x);
    case RT__U_SQRT: return 0.5f / sqrtf(x);
    case RT__U_ABS: return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : 0.0f;
    case RT__U_LOG: return 1.0f / x;
    default: return 1.0f;
    }
}

/* The kind is switched on once per call: each case is its own loop over
 * an inlined f (or f'), which the compiler vectorises; large tensors are
 * shared out among threads in fixed chunks. */
#define RT__UNARY_PAR (INT64_C(1) << 16)

#define RT__UNARY_CASES(LOOP)                               \
    switch (p->kind) {                                      \
    case RT__U_ELU: LOOP(RT__U_ELU); break;                 \
    case RT__U_SELU: LOOP(RT__U_SELU); break;               \
    case RT__U_LEAKY: LOOP(RT__U_LEAKY); break;             \
    case RT__U_GELU: LOOP(RT__U_GELU); break;               \
    case RT__U_GELU_TANH: LOOP(RT__U_GELU_TANH); break;     \
    case RT__U_ERF: LOOP(RT__U_ERF); break;                 \
    case RT__U_SOFTPLUS: LOOP(RT__U_SOFTPLUS); break;       \
    case RT__U_SOFTSIGN: LOOP(RT__U_SOFTSIGN); break;       \
    case RT__U_HARDSIGMOID: LOOP(RT__U_HARDSIGMOID); break; \
    case RT__U_SWISH: LOOP(RT__U_SWISH); break;             \
    case RT__U_CLIP: LOOP(RT__U_CLIP); break;               \
    case RT__U_THRESH: LOOP(RT__U_THRESH); break;           \
    case RT__U_KRELU: LOOP(RT__U_KRELU); break;             \
    case RT__U_EXP: LOOP(RT__U_EXP); break;                 \
    case RT__U_MISH: LOOP(RT__U_MISH); break;               \
    case RT__U_HARDSWISH: LOOP(RT__U_HARDSWISH); break;     \
    case RT__U_LOGSIGMOID: LOOP(RT__U_LOGSIGMOID); break;   \
    case RT__U_SQRT: LOOP(RT__U_SQRT); break;               \
    case RT__U_ABS: LOOP(RT__U_ABS); break;                 \
    case RT__U_LOG: LOOP(RT__U_LOG); break;                 \
    default: LOOP(RT__U_SCALE); break;                      \
    }

static inline float rt__fk(int kind, const rt__unary_params *p, float x)
{
    rt__unary_params q = *p;
    q.kind = kind;
    return rt__f(&q, x);
}
static inline float rt__dfk(int kind, const rt__unary_params *p, float x)
{
    rt__unary_params q = *p;
    q.kind = kind;
    return rt__df(&q, x);
}

void rt_kern_unary_fwd(const rt__kargs *a)
{
    const rt__unary_params *p = rt__unary_cp(a->nd);
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    const float *restrict x = a->x[0];
    float *restrict y = a->y;
#define RT__FWD(K)                                                                                 \
    _Pragma("omp parallel for if (n > RT__UNARY_PAR) schedule(static)") for (int64_t i = 0; i < n; \
                                                                             i++) y[i] =           \
        rt__fk(K, p, x[i])
    RT__UNARY_CASES(RT__FWD)
#undef RT__FWD
}

void rt_kern_unary_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const rt__unary_params *p = rt__unary_cp(a->nd);
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    const float *restrict x = a->x[0], *restrict dy = a->dy;
    float *restrict dx = a->dx[0];
    if (a->accum & 1u) {
#define RT__BWDA(K)                                                                                \
    _Pragma("omp parallel for if (n > RT__UNARY_PAR) schedule(static)") for (int64_t i = 0; i < n; \
                                                                             i++) dx[i] +=         \
        dy[i] * rt__dfk(K, p, x[i])
        RT__UNARY_CASES(RT__BWDA)
#undef RT__BWDA
    } else {
#define RT__BWD(K)                                                                                 \
    _Pragma("omp parallel for if (n > RT__UNARY_PAR) schedule(static)") for (int64_t i = 0; i < n; \
                                                                             i++) dx[i] =          \
        dy[i] * rt__dfk(K, p, x[i])
        RT__UNARY_CASES(RT__BWD)
#undef RT__BWD
    }
}

void rt_kern_unary_map(const rt__unary_params *p, float *restrict y, const float *restrict x,
                       int64_t n)
{
#define RT__MAP(K)                  \
    for (int64_t i = 0; i < n; i++) \
    y[i] = rt__fk(K, p, x[i])
    RT__UNARY_CASES(RT__MAP)
#undef RT__MAP
}

void rt_kern_unary_dmap(const rt__unary_params *p, float *restrict dx, const float *restrict dy,
                        const float *restrict x, int64_t n, int add)
{
    if (add) {
#define RT__DMAPA(K)                \
    for (int64_t i = 0; i < n; i++) \
    dx[i] += dy[i] * rt__dfk(K, p, x[i])
        RT__UNARY_CASES(RT__DMAPA)
#undef RT__DMAPA
    } else {
#define RT__DMAP(K)                 \
    for (int64_t i = 0; i < n; i++) \
    dx[i] = dy[i] * rt__dfk(K, p, x[i])
        RT__UNARY_CASES(RT__DMAP)
#undef RT__DMAP
    }
}
