/*
 * op_conv.c - Conv2D (grouped and depthwise too), ConvTranspose, MaxPool2D,
 * AvgPool2D and GlobalAvgPool (NHWC, Keras' layout): attribute parsing, shape inference, typed parameters
 * (rt__conv_params, rt__gap_params) and FLOP counts. How a backend computes
 * them (chunks, threads, scratch) is the backend's (server/kernels/cpu/ for
 * the CPU).
 *
 * Padding follows TensorFlow: "valid" uses only full windows; "same" gives
 * ceil(H / stride) outputs and pads (total) max((OH-1)*s + k_eff - H, 0),
 * half before and the odd one after. Or "pads" (top, left, bottom, right,
 * as ONNX) sets it explicitly: floor((H + top + bottom - k_eff) / s) + 1
 * outputs (the ONNX importer's).
 */
#include <string.h>
#include <strings.h>

#include "rt_engine_impl.h"

/* a pair attribute (ints of 1 or 2, or an int) with a default; >= 1 */
static int rt__pair(rt__cc *cc, rt__node *nd, const char *name, int64_t def0, int64_t def1,
                    int64_t out[2])
{
    int ok = 1;
    int64_t v[2];
    int n = rt__attr_ints(cc, nd, name, v, 2, &ok);
    if (!ok)
        return RT_EINVAL;
    if (n < 0) {
        out[0] = def0;
        out[1] = def1;
    } else if (n == 1) {
        out[0] = out[1] = v[0];
    } else if (n == 2) {
        out[0] = v[0];
        out[1] = v[1];
    } else {
        return rt__cerr(cc, nd, RT_EINVAL, "attribute '%s' needs 1 or 2 values, got %d", name, n);
    }
    if (out[0] < 1 || out[1] < 1 || out[0] > RT__MAX_WINDOW || out[1] > RT__MAX_WINDOW)
        return rt__cerr(cc, nd, RT_EINVAL, "attribute '%s' (%lld, %lld) must be >= 1", name,
                        (long long)out[0], (long long)out[1]);
    return 0;
}

/* padding "valid" (default) or "same": 0 or 1 */
static int rt__padding(rt__cc *cc, rt__node *nd, int *same)
{
    int ok = 1;
    const char *s = rt__attr_str(cc, nd, "padding", "valid", &ok);
    if (!ok)
        return RT_EINVAL;
    if (!strcasecmp(s, "valid"))
        *same = 0;
    else if (!strcasecmp(s, "same"))
        *same = 1;
    else
        return rt__cerr(cc, nd, RT_EINVAL, "padding '%s' is neither 'valid' nor 'same'", s);
    return 0;
}

int64_t rt__window_out(int64_t in, int64_t k, int64_t s, int64_t d, int same, int64_t *pad)
{
    const int64_t keff = (k - 1) * d + 1;
    if (same) {
        const int64_t out = (in + s - 1) / s, tot = (out - 1) * s + keff - in;
        if (pad)
            *pad = tot > 0 ? tot / 2 : 0;
        return out;
    }
    if (pad)
        *pad = 0;
    return in < keff ? -1 : (in - keff) / s + 1;
}

/* "pads" (ints 4: top, left, bottom, right, as ONNX): explicit padding
 * instead of "padding"; *n = -1 when absent */
static int rt__pads(rt__cc *cc, rt__node *nd, int64_t pads[4], int *n)
{
    int ok = 1;
    *n = rt__attr_ints(cc, nd, "pads", pads, 4, &ok);
    if (!ok)
        return RT_EINVAL;
    if (*n < 0)
        return 0;
    if (*n != 4 || rt__attr(nd, "padding"))
        return rt__cerr(cc, nd, RT_EINVAL, "'pads' needs 4 values and no 'padding'");
    for (int i = 0; i < 4; i++)
        if (pads[i] < 0 || pads[i] > RT__MAX_WINDOW)
            return rt__cerr(cc, nd, RT_EINVAL, "pads[%d] = %lld outside 0..%d", i,
                            (long long)pads[i], RT__MAX_WINDOW);
    return 0;
}

/* one spatial dim with explicit padding before (lo) and after (hi) */
static int rt__out_dim_pads(rt__cc *cc, rt__node *nd, const char *what, int64_t in, int64_t k,
                            int64_t s, int64_t d, int64_t lo, int64_t hi, int64_t *out,
                            int64_t *pad)
{
    const int64_t keff = (k - 1) * d + 1;
    if (in + lo + hi < keff)
        return rt__cerr(cc, nd, RT_ESHAPE, "%s %lld padded by %lld is smaller than the window %lld",
                        what, (long long)in, (long long)(lo + hi), (long long)keff);
    *out = (in + lo + hi - keff) / s + 1;
    *pad = lo;
    return 0;
}

/* one spatial dim: output size and padding before; RT_ESHAPE if the window
 * does not fit a valid convolution */
static int rt__out_dim(rt__cc *cc, rt__node *nd, const char *what, int64_t in, int64_t k, int64_t s,
                       int64_t d, int same, int64_t *out, int64_t *pad)
{
    *out = rt__window_out(in, k, s, d, same, pad);
    if (*out < 0)
        return rt__cerr(cc, nd, RT_ESHAPE,
                        "%s %lld is smaller than the window %lld with padding 'valid'", what,
                        (long long)in, (long long)((k - 1) * d + 1));
    return 0;
}

static int rt__nhwc_input(rt__cc *cc, rt__node *nd, rt__conv_params *p)
{
    const rt__shape *x = nd->in_shape[0];
    if (!x->batched || x->ndim != 3)
        return rt__cerr(cc, nd, RT_ESHAPE, "input '%s' must be (B,H,W,C) (NHWC), has rank %d",
                        nd->in_name[0], x->ndim + x->batched);
    if (rt__shape_numel(x) > INT32_MAX)
        return rt__cerr(cc, nd, RT_EOVERFLOW, "input '%s' has more than 2^31 values per sample",
                        nd->in_name[0]);
    p->H = x->d[0];
    p->W = x->d[1];
    p->C = x->d[2];
    return 0;
}

/* ---------------------------------------------------------------- Conv2D */

/* Conv2D(x (B,H,W,C), W (KH,KW,C/group,OC), b (OC)?) attrs strides,
 * padding, dilations, group (C and OC multiples of it: output channel o
 * reads input channels [o / (OC/group) * C/group, +C/group); group = C is a
 * depthwise convolution, whose Keras kernel (KH,KW,C,mult) is the same
 * memory as (KH,KW,1,C*mult)), activation (fused, as Dense's) */
static int rt__conv2d_infer(rt__cc *cc, rt__node *nd)
{
    int rc;
    rt__conv_params *p = rt__conv_p(nd);
    if ((rc = rt__nhwc_input(cc, nd, p)) < 0)
        return rc;
    const rt__shape *w = nd->in_shape[1];
    if (w->batched || w->ndim != 4)
        return rt__cerr(cc, nd, RT_ESHAPE, "kernel '%s' must be 4-D (kh, kw, in, out)",
                        nd->in_name[1]);
    int ok = 1;
    const int64_t G = rt__attr_int(cc, nd, "group", 1, &ok);
    if (!ok)
        return RT_EINVAL;
    if (G < 1 || p->C % G || w->d[3] % G)
        return rt__cerr(cc, nd, RT_EINVAL,
                        "group %lld must divide the %lld input and %lld output channels",
                        (long long)G, (long long)p->C, (long long)w->d[3]);
    if (w->d[2] != p->C / G)
        return rt__cerr(cc, nd, RT_ESHAPE,
                        "kernel '%s' expects %lld input channels, input has %lld", nd->in_name[1],
                        (long long)(w->d[2] * G), (long long)p->C);
    p->G = G;
    const int64_t OC = w->d[3];
    p->bias = nd->n_in > 2;
    if (nd->n_in > 2) {
        const rt__shape *b = nd->in_shape[2];
        if (b->batched || b->ndim != 1 || b->d[0] != OC)
            return rt__cerr(cc, nd, RT_ESHAPE, "bias '%s' must be (%lld)", nd->in_name[2],
                            (long long)OC);
    }
    int64_t s[2], d[2];
    int same = 0;
    if ((rc = rt__pair(cc, nd, "strides", 1, 1, s)) < 0 ||
        (rc = rt__pair(cc, nd, "dilations", 1, 1, d)) < 0 ||
        (rc = rt__padding(cc, nd, &same)) < 0 || (rc = rt__attr_act(cc, nd, &p->act)) < 0)
        return rc;
    nd->bwd_needs_out = p->act != RT__ACT_NONE;
    p->KH = w->d[0];
    p->KW = w->d[1];
    p->SH = s[0];
    p->SW = s[1];
    p->DH = d[0];
    p->DW = d[1];
    p->OC = OC;
    int64_t pads[4];
    int np;
    if ((rc = rt__pads(cc, nd, pads, &np)) < 0)
        return rc;
    if (np == 4) {
        if ((rc = rt__out_dim_pads(cc, nd, "height", p->H, w->d[0], s[0], d[0], pads[0], pads[2],
                                   &p->OH, &p->PT)) < 0 ||
            (rc = rt__out_dim_pads(cc, nd, "width", p->W, w->d[1], s[1], d[1], pads[1], pads[3],
                                   &p->OW, &p->PL)) < 0)
            return rc;
    } else if ((rc = rt__out_dim(cc, nd, "height", p->H, w->d[0], s[0], d[0], same, &p->OH,
                                 &p->PT)) < 0 ||
               (rc = rt__out_dim(cc, nd, "width", p->W, w->d[1], s[1], d[1], same, &p->OW,
                                 &p->PL)) < 0)
        return rc;
    nd->out = (rt__shape){.ndim = 3, .batched = 1, .d = {p->OH, p->OW, OC}};
    const int64_t P = p->OH * p->OW, K = p->KH * p->KW * p->C;
    if (__builtin_mul_overflow(P, K, &(int64_t){0}) || P * K > RT__MAX_NUMEL)
        return rt__cerr(cc, nd, RT_EOVERFLOW, "im2col of one sample exceeds %lld values",
                        (long long)RT__MAX_NUMEL);
    return 0;
}

static uint64_t rt__conv2d_flops(const rt__node *nd, int64_t B, unsigned need_dx)
{
    const rt__conv_params *p = rt__conv_cp(nd);
    const uint64_t R = (uint64_t)B * (uint64_t)(p->OH * p->OW);
    const uint64_t K = (uint64_t)(p->KH * p->KW * p->C / (p->G > 1 ? p->G : 1));
    const uint64_t N = (uint64_t)p->OC;
    return rt__gemm_flops(R, K, N, p->bias, p->act, need_dx);
}

const rt__op_def rt__op_conv2d = {
    .name = "Conv2D",
    .min_in = 2,
    .max_in = 3,
    .bwd_needs_in = 3u, /* x for dW, W for dx */
    .params = RT__P_CONV,
    .infer = rt__conv2d_infer,
    .flops = rt__conv2d_flops,
};

/* ---------------------------------------------------------- ConvTranspose */

/* ConvTranspose(x (B,H,W,C), W (KH,KW,OC,C), b (OC)?): the gradient of a
 * Conv2D with respect to its input, as Keras' Conv2DTranspose and
 * tf.nn.conv2d_transpose: y[h*s - PT + kh*d, w*s - PL + kw*d, o] +=
 * x[h, w, i] W[kh, kw, o, i]. attrs strides, dilations, and either padding
 * ("valid"/"same") with output_padding (ints, each < its stride; sizes as
 * Keras' deconv_output_length, the padding before as TensorFlow's), or
 * pads (ints t, l, b, r as ONNX) with output_padding. */
static int rt__convt_infer(rt__cc *cc, rt__node *nd)
{
    int rc, ok = 1;
    rt__conv_params *p = rt__conv_p(nd);
    if ((rc = rt__nhwc_input(cc, nd, p)) < 0)
        return rc;
    const rt__shape *w = nd->in_shape[1];
    if (w->batched || w->ndim != 4)
        return rt__cerr(cc, nd, RT_ESHAPE, "kernel '%s' must be 4-D (kh, kw, out, in)",
                        nd->in_name[1]);
    /* group (ONNX's): output channel o reads the input channels of its
     * group, [o / (OC/group) * C/group, +C/group); the kernel is then
     * (kh, kw, OC, C/group) */
    const int64_t G = rt__attr_int(cc, nd, "group", 1, &ok);
    if (!ok)
        return RT_EINVAL;
    if (G < 1 || p->C % G || w->d[2] % G)
        return rt__cerr(cc, nd, RT_EINVAL,
                        "group %lld must divide the %lld input and %lld output channels",
                        (long long)G, (long long)p->C, (long long)w->d[2]);
    if (w->d[3] * G != p->C)
        return rt__cerr(cc, nd, RT_ESHAPE,
                        "kernel '%s' expects %lld input channels, input has %lld", nd->in_name[1],
                        (long long)(w->d[3] * G), (long long)p->C);
    const int64_t OC = w->d[2];
    p->bias = nd->n_in > 2;
    if (nd->n_in > 2) {
        const rt__shape *b = nd->in_shape[2];
        if (b->batched || b->ndim != 1 || b->d[0] != OC)
            return rt__cerr(cc, nd, RT_ESHAPE, "bias '%s' must be (%lld)", nd->in_name[2],
                            (long long)OC);
    }
    int64_t s[2], d[2], op[2] = {0, 0}, pads[4];
    int same = 0;
    if ((rc = rt__pair(cc, nd, "strides", 1, 1, s)) < 0 ||
        (rc = rt__pair(cc, nd, "dilations", 1, 1, d)) < 0)
        return rc;
    int nop = rt__attr_ints(cc, nd, "output_padding", op, 2, &ok);
    int np = rt__attr_ints(cc, nd, "pads", pads, 4, &ok);
    if (!ok)
        return RT_EINVAL;
    if (nop == 1)
        op[1] = op[0];
    else if (nop > 2)
        return rt__cerr(cc, nd, RT_EINVAL, "output_padding needs 1 or 2 values");
    if (nop > 0 && (op[0] < 0 || op[1] < 0 || op[0] >= s[0] || op[1] >= s[1]))
        return rt__cerr(cc, nd, RT_EINVAL, "output_padding (%lld, %lld) must be in 0..stride-1",
                        (long long)op[0], (long long)op[1]);
    if (np >= 0 && np != 4)
        return rt__cerr(cc, nd, RT_EINVAL, "pads needs 4 values");
    if (np < 0 && (rc = rt__padding(cc, nd, &same)) < 0)
        return rc;
    p->KH = w->d[0];
    p->KW = w->d[1];
    p->SH = s[0];
    p->SW = s[1];
    p->DH = d[0];
    p->DW = d[1];
    p->OC = OC;
    p->G = G;
    const int64_t in[2] = {p->H, p->W}, k[2] = {p->KH, p->KW};
    int64_t out[2], pb[2];
    for (int i = 0; i < 2; i++) {
        const int64_t keff = (k[i] - 1) * d[i] + 1;
        if (np == 4) {
            if (pads[i] < 0 || pads[i + 2] < 0)
                return rt__cerr(cc, nd, RT_EINVAL, "pads must be >= 0");
            out[i] = (in[i] - 1) * s[i] + keff - pads[i] - pads[i + 2] + op[i];
            pb[i] = pads[i];
        } else {
            if (nop <= 0)
                out[i] = same ? in[i] * s[i] : in[i] * s[i] + (keff > s[i] ? keff - s[i] : 0);
            else
                out[i] = (in[i] - 1) * s[i] + keff - 2 * (same ? keff / 2 : 0) + op[i];
            const int64_t tot = (in[i] - 1) * s[i] + keff - out[i];
            pb[i] = same && tot > 0 ? tot / 2 : 0;
        }
        if (out[i] < 1 || out[i] > RT__MAX_NUMEL)
            return rt__cerr(cc, nd, RT_ESHAPE, "output %s %lld is out of range",
                            i ? "width" : "height", (long long)out[i]);
    }
    p->OH = out[0];
    p->OW = out[1];
    p->PT = pb[0];
    p->PL = pb[1];
    int64_t tot;
    if (__builtin_mul_overflow(out[0], out[1], &tot) || __builtin_mul_overflow(tot, OC, &tot) ||
        tot > RT__MAX_NUMEL)
        return rt__cerr(cc, nd, RT_EOVERFLOW, "output exceeds 2^32 values per sample");
    nd->out = (rt__shape){.ndim = 3, .batched = 1, .d = {p->OH, p->OW, OC}};
    return 0;
}

static uint64_t rt__convt_flops(const rt__node *nd, int64_t B, unsigned need_dx)
{
    const rt__conv_params *p = rt__conv_cp(nd);
    const uint64_t m = 2 * (uint64_t)B * (uint64_t)(p->H * p->W * p->C) *
                       (uint64_t)(p->KH * p->KW * p->OC) / (uint64_t)(p->G > 0 ? p->G : 1);
    uint64_t f = m;
    if (need_dx & 1u)
        f += m;
    if (need_dx & 2u)
        f += m;
    return f;
}

const rt__op_def rt__op_convtranspose = {
    .name = "ConvTranspose",
    .min_in = 2,
    .max_in = 3,
    .bwd_needs_in = 3u,
    .params = RT__P_CONV,
    .infer = rt__convt_infer,
    .flops = rt__convt_flops,
};

/* ----------------------------------------------------------------- pools */

/* MaxPool2D/AvgPool2D(x (B,H,W,C)) attrs pool (default 2x2), strides
 * (default: the pool), padding */
static int rt__pool_infer(rt__cc *cc, rt__node *nd)
{
    int rc;
    rt__conv_params *p = rt__conv_p(nd);
    if ((rc = rt__nhwc_input(cc, nd, p)) < 0)
        return rc;
    int64_t k[2], s[2];
    int same = 0;
    if ((rc = rt__pair(cc, nd, "pool", 2, 2, k)) < 0 ||
        (rc = rt__pair(cc, nd, "strides", k[0], k[1], s)) < 0 ||
        (rc = rt__padding(cc, nd, &same)) < 0)
        return rc;
    p->KH = k[0];
    p->KW = k[1];
    p->SH = s[0];
    p->SW = s[1];
    p->DH = p->DW = 1;
    p->OC = p->C;
    int64_t pads[4];
    int np;
    if ((rc = rt__pads(cc, nd, pads, &np)) < 0)
        return rc;
    if (np == 4) {
        /* every window must cover an input cell, as with 'same' */
        if (pads[0] >= k[0] || pads[2] >= k[0] || pads[1] >= k[1] || pads[3] >= k[1])
            return rt__cerr(cc, nd, RT_EINVAL, "pads must be smaller than the pool");
        if ((rc = rt__out_dim_pads(cc, nd, "height", p->H, k[0], s[0], 1, pads[0], pads[2], &p->OH,
                                   &p->PT)) < 0 ||
            (rc = rt__out_dim_pads(cc, nd, "width", p->W, k[1], s[1], 1, pads[1], pads[3], &p->OW,
                                   &p->PL)) < 0)
            return rc;
    } else if ((rc = rt__out_dim(cc, nd, "height", p->H, k[0], s[0], 1, same, &p->OH, &p->PT)) <
                   0 ||
               (rc = rt__out_dim(cc, nd, "width", p->W, k[1], s[1], 1, same, &p->OW, &p->PL)) < 0)
        return rc;
    /* with 'same' every window still covers at least one input cell:
     * the padding before is at most (k-1)/2 < k */
    nd->out = (rt__shape){.ndim = 3, .batched = 1, .d = {p->OH, p->OW, p->C}};
    return 0;
}

static uint64_t rt__pool_flops(const rt__node *nd, int64_t B, unsigned need_dx)
{
    const rt__conv_params *p = rt__conv_cp(nd);
    const uint64_t n =
        (uint64_t)B * (uint64_t)rt__shape_numel(&nd->out) * (uint64_t)(p->KH * p->KW);
    return n + (need_dx ? n : 0);
}

const rt__op_def rt__op_maxpool2d = {
    .name = "MaxPool2D",
    .min_in = 1,
    .max_in = 1,
    .bwd_needs_in = 1u, /* the argmax is recomputed from x */
    .params = RT__P_CONV,
    .infer = rt__pool_infer,
    .flops = rt__pool_flops,
};

const rt__op_def rt__op_avgpool2d = {
    .name = "AvgPool2D",
    .min_in = 1,
    .max_in = 1,
    .params = RT__P_CONV,
    .infer = rt__pool_infer,
    .flops = rt__pool_flops,
};

/* GlobalAvgPool(x (B,H,W,C)) -> (B,C); attr keepdims (int) -> (B,1,1,C) */
static int rt__gap_infer(rt__cc *cc, rt__node *nd)
{
    int rc;
    rt__conv_params x = {0};
    if ((rc = rt__nhwc_input(cc, nd, &x)) < 0)
        return rc;
    int ok = 1;
    int64_t keep = rt__attr_int(cc, nd, "keepdims", 0, &ok);
    if (!ok)
        return RT_EINVAL;
    rt__gap_params *p = rt__gap_p(nd);
    p->HW = x.H * x.W;
    p->C = x.C;
    if (keep)
        nd->out = (rt__shape){.ndim = 3, .batched = 1, .d = {1, 1, x.C}};
    else
        nd->out = (rt__shape){.ndim = 1, .batched = 1, .d = {x.C}};
    return 0;
}

static uint64_t rt__gap_flops(const rt__node *nd, int64_t B, unsigned need_dx)
{
    const rt__gap_params *p = rt__gap_cp(nd);
    const uint64_t n = (uint64_t)B * (uint64_t)(p->HW * p->C);
    return n + (need_dx ? n : 0);
}

const rt__op_def rt__op_globalavgpool = {
    .name = "GlobalAvgPool",
    .min_in = 1,
    .max_in = 1,
    .params = RT__P_GAP,
    .infer = rt__gap_infer,
    .flops = rt__gap_flops,
};
