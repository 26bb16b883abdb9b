/*
 * op_act.c - elementwise activations with constants (rt__unary_params):
 * shape inference (the input's shape), attributes and FLOP counts. Names
 * and attributes follow ONNX where ONNX has the op, so its importer maps
 * them 1:1; the Keras importer sets Keras' constants explicitly.
 *
 *   Elu            x > 0 ? x : alpha (e^x - 1)              alpha 1
 *   Selu           gamma * Elu(alpha)                       alpha 1.67326, gamma 1.0507
 *   LeakyRelu      x > 0 ? x : alpha x                      alpha 0.01
 *   Gelu           x Phi(x); approximate "tanh": the tanh form
 *   Erf            erf(x)
 *   Softplus       log(1 + e^x)
 *   Softsign       x / (1 + |x|)
 *   HardSigmoid    max(0, min(1, alpha x + beta))           alpha 0.2, beta 0.5
 *   Swish          x sigmoid(alpha x) (SiLU at alpha 1)     alpha 1
 *   Clip           min(max(x, min), max) (Relu6: 0, 6)      min -inf, max +inf
 *   ThresholdedRelu x > alpha ? x : 0                       alpha 1
 *   KerasRelu      Keras' ReLU layer: x > threshold ? min(max(x, 0), max_value)
 *                  : negative_slope (x - threshold); attrs negative_slope 0,
 *                  threshold 0, max_value +inf
 *   Exp            e^x
 *   Scale          alpha x + beta                           alpha 1, beta 0
 *   Mish           x tanh(softplus(x))
 *   HardSwish      x max(0, min(1, alpha x + beta))         alpha 1/6, beta 0.5
 *   LogSigmoid     log(sigmoid(x)) = -softplus(-x)
 *   Sqrt           sqrt(x) (Keras' Normalization)
 *   Abs            |x|; derivative sign(x), 0 at 0 (TensorFlow's _AbsGrad)
 *   Log            ln(x); derivative 1 / x
 *
 * Derivatives at the kinks follow TensorFlow (Keras' reference backend):
 * LeakyRelu, Elu and Selu take the negative branch at 0; Clip passes the
 * gradient only strictly inside (min, max), as tf.nn.relu6.
 */
#include <math.h>
#include <string.h>

#include "rt_engine_impl.h"

static int rt__unary_infer_kind(rt__cc *cc, rt__node *nd, int kind)
{
    int ok = 1;
    rt__unary_params *p = rt__unary_p(nd);
    p->kind = kind;
    double a = 0, b = 0, g = 0;
    switch (kind) {
    case RT__U_ELU: a = rt__attr_float(cc, nd, "alpha", 1.0, &ok); break;
    case RT__U_SELU:
        a = rt__attr_float(cc, nd, "alpha", 1.67326319217681884765625, &ok);
        g = rt__attr_float(cc, nd, "gamma", 1.05070102214813232421875, &ok);
        break;
    case RT__U_LEAKY: a = rt__attr_float(cc, nd, "alpha", 0.01, &ok); break;
    case RT__U_GELU: {
        const char *ap = rt__attr_str(cc, nd, "approximate", "none", &ok);
        if (!ok)
            return RT_EINVAL;
        if (!strcmp(ap, "tanh"))
            p->kind = RT__U_GELU_TANH;
        else if (strcmp(ap, "none") != 0)
            return rt__cerr(cc, nd, RT_EINVAL, "approximate '%.20s' is neither 'none' nor 'tanh'",
                            ap);
        break;
    }
    case RT__U_HARDSIGMOID:
        a = rt__attr_float(cc, nd, "alpha", 0.2, &ok);
        b = rt__attr_float(cc, nd, "beta", 0.5, &ok);
        break;
    case RT__U_SWISH: a = rt__attr_float(cc, nd, "alpha", 1.0, &ok); break;
    case RT__U_CLIP:
        a = rt__attr_float(cc, nd, "min", -INFINITY, &ok);
        b = rt__attr_float(cc, nd, "max", INFINITY, &ok);
        if (ok && !(a <= b))
            return rt__cerr(cc, nd, RT_EINVAL, "min %g is above max %g", a, b);
        break;
    case RT__U_THRESH: a = rt__attr_float(cc, nd, "alpha", 1.0, &ok); break;
    case RT__U_KRELU:
        a = rt__attr_float(cc, nd, "negative_slope", 0.0, &ok);
        b = rt__attr_float(cc, nd, "threshold", 0.0, &ok);
        g = rt__attr_float(cc, nd, "max_value", INFINITY, &ok);
        if (ok && !(g >= 0))
            return rt__cerr(cc, nd, RT_EINVAL, "max_value %g must be >= 0", g);
        if (ok && !(a >= 0))
            return rt__cerr(cc, nd, RT_EINVAL, "negative_slope %g must be >= 0", a);
        break;
    case RT__U_SCALE:
        a = rt__attr_float(cc, nd, "alpha", 1.0, &ok);
        b = rt__attr_float(cc, nd, "beta", 0.0, &ok);
        break;
    case RT__U_HARDSWISH:
        a = rt__attr_float(cc, nd, "alpha", 1.0 / 6.0, &ok);
        b = rt__attr_float(cc, nd, "beta", 0.5, &ok);
        break;
    default: break;
    }
    if (!ok)
        return RT_EINVAL;
    if (isnan(a) || isnan(b) || isnan(g))
        return rt__cerr(cc, nd, RT_EINVAL, "a constant is NaN");
    p->alpha = (float)a;
    p->beta = (float)b;
    p->gamma = (float)g;
    nd->out = *nd->in_shape[0];
    return 0;
}

static uint64_t rt__unary_flops(const rt__node *nd, int64_t B, unsigned need_dx)
{
    const uint64_t n = (uint64_t)rt__numel_n(&nd->out, B);
    return 4 * n + (need_dx ? 6 * n : 0);
}

#define RT__UNARY_OP(var, nm, kind)                      \
    static int rt__infer_##var(rt__cc *cc, rt__node *nd) \
    {                                                    \
        return rt__unary_infer_kind(cc, nd, kind);       \
    }                                                    \
    const rt__op_def rt__op_##var = {                    \
        .name = nm,                                      \
        .min_in = 1,                                     \
        .max_in = 1,                                     \
        .bwd_needs_in = 1u,                              \
        .params = RT__P_UNARY,                           \
        .infer = rt__infer_##var,                        \
        .flops = rt__unary_flops,                        \
    };

RT__UNARY_OP(elu, "Elu", RT__U_ELU)
RT__UNARY_OP(selu, "Selu", RT__U_SELU)
RT__UNARY_OP(leakyrelu, "LeakyRelu", RT__U_LEAKY)
RT__UNARY_OP(gelu, "Gelu", RT__U_GELU)
RT__UNARY_OP(erf, "Erf", RT__U_ERF)
RT__UNARY_OP(softplus, "Softplus", RT__U_SOFTPLUS)
RT__UNARY_OP(softsign, "Softsign", RT__U_SOFTSIGN)
RT__UNARY_OP(hardsigmoid, "HardSigmoid", RT__U_HARDSIGMOID)
RT__UNARY_OP(swish, "Swish", RT__U_SWISH)
RT__UNARY_OP(clip, "Clip", RT__U_CLIP)
RT__UNARY_OP(thresholdedrelu, "ThresholdedRelu", RT__U_THRESH)
RT__UNARY_OP(kerasrelu, "KerasRelu", RT__U_KRELU)
RT__UNARY_OP(exp, "Exp", RT__U_EXP)
RT__UNARY_OP(scale, "Scale", RT__U_SCALE)
RT__UNARY_OP(mish, "Mish", RT__U_MISH)
RT__UNARY_OP(hardswish, "HardSwish", RT__U_HARDSWISH)
RT__UNARY_OP(logsigmoid, "LogSigmoid", RT__U_LOGSIGMOID)
RT__UNARY_OP(sqrt, "Sqrt", RT__U_SQRT)
RT__UNARY_OP(abs, "Abs", RT__U_ABS)
RT__UNARY_OP(log, "Log", RT__U_LOG)
