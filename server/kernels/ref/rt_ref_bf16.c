/*
 * rt_ref_bf16.c - the reference backend's mixed bfloat16: Dense, MatMul and
 * Conv2D as the CPU backend computes them under Keras' mixed_bfloat16,
 * written as the definition. The inputs of the products (x, the weights,
 * and in the backward pass dz = dy * act'(y) as a float) are rounded to
 * bf16 (nearest even) and the float32 kernels of this backend run on the
 * rounded copies, summing in double; the bias gradient sums the float dz
 * unrounded, as the CPU backend's does. Every Conv2D is bf16 here, grouped
 * ones too (the CPU backend keeps one with fewer than 4 input channels
 * float32 by default; tests compare the two with that set to 1). Copies
 * are allocated per call: this backend is an oracle, not a fast path.
 *
 * bf16 activation storage is emulated (rt_ref_bf16_io): the values the
 * CPU backend stores bf16 (the products', BatchNorm's, Relu's, Clip's and
 * ReLU(max_value)'s outputs where every reader reads bf16) are stored
 * float32 here, rounded to bf16 by their producer after its float32
 * kernel, so every reader sees the values the CPU backend's widen to.
 * Dropout and its relatives, Pad, the pools, Concat, Flatten, Reshape
 * and the elementwise binaries (their batched inputs) read and write such
 * values too. The CPU
 * backend's Conv2D + MaxPool2D stores its pooled output bf16; ref runs
 * the pair apart, its MaxPool2D rounding the same maxima (the Conv2D's
 * output stays float32: rt_compile.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/rt_ref.h"

/* round to nearest even at 8 significant bits; NaN and infinities kept */
static float rt_ref_bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u)
        return f;
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float *rt_ref_bf_copy(const float *src, int64_t n)
{
    float *d = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    RT_ASSERT(d);
    for (int64_t i = 0; i < n; i++)
        d[i] = rt_ref_bf(src[i]);
    return d;
}

/* the activation's derivative from its output y (Dense's and Conv2D's) */
static double rt_ref_bf_act_dy(int act, double y)
{
    switch (act) {
    case RT__ACT_RELU: return y > 0 ? 1 : 0;
    case RT__ACT_SIGMOID: return y * (1 - y);
    case RT__ACT_TANH: return 1 - y * y;
    default: return 1;
    }
}

typedef struct {
    int64_t in_n, w_n, out_n, cols; /* x, W, y values; bias columns */
    int act, bias;
} rt_ref_bf_shape;

static rt_ref_bf_shape rt_ref_bf_dims(const rt__kargs *a)
{
    const rt__node *nd = a->nd;
    rt_ref_bf_shape s;
    s.in_n = rt__numel_n(nd->in_shape[0], a->r->n);
    s.w_n = rt__numel_n(nd->in_shape[1], a->r->n);
    s.out_n = rt__numel_n(&nd->out, a->r->n);
    if (nd->op == &rt__op_conv2d) {
        s.cols = rt__conv_cp(nd)->OC;
        s.act = rt__conv_cp(nd)->act;
        s.bias = rt__conv_cp(nd)->bias;
    } else {
        s.cols = rt__dense_cp(nd)->N;
        s.act = rt__dense_cp(nd)->act;
        s.bias = nd->n_in > 2;
    }
    return s;
}

int rt_ref_bf16_act_store = 1;

unsigned rt_ref_bf16_io(const rt__node *nd)
{
    const rt__op_def *op = nd->op;
    const int elt = op == &rt__op_batchnorm || op == &rt__op_relu || op == &rt__op_clip ||
                    op == &rt__op_kerasrelu || op == &rt__op_dropout ||
                    op == &rt__op_spatialdropout || op == &rt__op_gaussiannoise ||
                    op == &rt__op_gaussiandropout;
    const int smp = rt__bf16_sample_op(nd);
    if (!rt_ref_bf16_act_store)
        return elt || smp ? RT__BF16_STORE_ONLY : 0u;
    if (smp)
        return rt__bf16_sample_in(nd) | RT__BF16_OUT | RT__BF16_STORE_ONLY | RT__BF16_EMULATED;
    if (op == &rt__op_dense || op == &rt__op_matmul || op == &rt__op_conv2d)
        return RT__BF16_IN(0) | RT__BF16_OUT | RT__BF16_EMULATED;
    if (elt)
        return RT__BF16_IN(0) | RT__BF16_OUT | RT__BF16_STORE_ONLY | RT__BF16_EMULATED;
    return 0;
}

/* y rounded to bf16 in place where it is stored so (emulated) */
static void rt_ref_bf_store(const rt__kargs *a)
{
    if (!a->nd->bf16_out)
        return;
    const int64_t n = rt__numel_n(&a->nd->out, a->r->n);
    for (int64_t i = 0; i < n; i++)
        a->y[i] = rt_ref_bf(a->y[i]);
}

/* f32 over b with its input and weights rounded to bf16 (copies of a's) */
static void rt_ref_bf_rounded(rt__kargs *b, const rt_ref_bf_shape *s,
                              void (*f32)(const rt__kargs *))
{
    float *x = rt_ref_bf_copy(b->x[0], s->in_n), *w = rt_ref_bf_copy(b->x[1], s->w_n);
    b->x[0] = x;
    b->x[1] = w;
    f32(b);
    free(x);
    free(w);
}

static void rt_ref_bf_fwd(const rt__kargs *a, void (*f32)(const rt__kargs *))
{
    const rt_ref_bf_shape s = rt_ref_bf_dims(a);
    rt__kargs b = *a;
    rt_ref_bf_rounded(&b, &s, f32);
    rt_ref_bf_store(a);
}

static void rt_ref_bf_bwd(const rt__kargs *a, void (*f32)(const rt__kargs *))
{
    const rt_ref_bf_shape s = rt_ref_bf_dims(a);
    float *dz = malloc(sizeof(float) * (size_t)(s.out_n > 0 ? s.out_n : 1));
    RT_ASSERT(dz);
    for (int64_t i = 0; i < s.out_n; i++)
        dz[i] = (float)((double)a->dy[i] * (s.act ? rt_ref_bf_act_dy(s.act, a->y[i]) : 1.0));
    if (s.bias && a->dx[2]) /* db: the float dz, summed in index order */
        for (int64_t j = 0; j < s.cols; j++) {
            double v = 0;
            for (int64_t i = j; i < s.out_n; i += s.cols)
                v += dz[i];
            rt_ref_put(a, 2, j, v);
        }
    for (int64_t i = 0; i < s.out_n; i++)
        dz[i] = rt_ref_bf(dz[i]);
    /* the float32 kernel on the rounded values, its activation and bias
     * done above: a copy of the node without them */
    rt__node nd = *a->nd;
    if (nd.op == &rt__op_conv2d)
        nd.p.conv.act = RT__ACT_NONE;
    else
        nd.p.dense.act = RT__ACT_NONE;
    nd.fused = NULL;
    rt__kargs b = *a;
    b.nd = &nd;
    b.dy = dz;
    b.dx[2] = NULL;
    rt_ref_bf_rounded(&b, &s, f32);
    free(dz);
}

static void rt_ref_bf_dense_fwd(const rt__kargs *a) { rt_ref_bf_fwd(a, rt_ref_dense_fwd); }
static void rt_ref_bf_dense_bwd(const rt__kargs *a) { rt_ref_bf_bwd(a, rt_ref_dense_bwd); }
static void rt_ref_bf_conv_fwd(const rt__kargs *a) { rt_ref_bf_fwd(a, rt_ref_conv2d_fwd); }
static void rt_ref_bf_conv_bwd(const rt__kargs *a) { rt_ref_bf_bwd(a, rt_ref_conv2d_bwd); }

/* float32 arithmetic; the output rounded where it is stored bf16 */
static void rt_ref_bf_bn_fwd(const rt__kargs *a)
{
    rt_ref_batchnorm_fwd(a);
    rt_ref_bf_store(a);
}
static void rt_ref_bf_relu_fwd(const rt__kargs *a)
{
    rt_ref_relu_fwd(a);
    rt_ref_bf_store(a);
}
static void rt_ref_bf_unary_fwd(const rt__kargs *a)
{
    rt_ref_unary_fwd(a);
    rt_ref_bf_store(a);
}
#define RT_REF_BF_STORED(nm)                             \
    static void rt_ref_bf_##nm##_fwd(const rt__kargs *a) \
    {                                                    \
        rt_ref_##nm##_fwd(a);                            \
        rt_ref_bf_store(a);                              \
    }
RT_REF_BF_STORED(map)
RT_REF_BF_STORED(maxpool2d)
RT_REF_BF_STORED(avgpool2d)
RT_REF_BF_STORED(gap)
RT_REF_BF_STORED(concat)
RT_REF_BF_STORED(add)
RT_REF_BF_STORED(sub)
RT_REF_BF_STORED(mul)
RT_REF_BF_STORED(div)
RT_REF_BF_STORED(max)
RT_REF_BF_STORED(min)
RT_REF_BF_STORED(copy)
RT_REF_BF_STORED(dropout)

static const rt__kernel rt_ref_bf16_table[] = {
    {&rt__op_dense, NULL, rt_ref_bf_dense_fwd, rt_ref_bf_dense_bwd, NULL, NULL},
    {&rt__op_matmul, NULL, rt_ref_bf_dense_fwd, rt_ref_bf_dense_bwd, NULL, NULL},
    {&rt__op_conv2d, NULL, rt_ref_bf_conv_fwd, rt_ref_bf_conv_bwd, NULL, NULL},
    /* bf16 only by their (emulated) storage */
    {&rt__op_batchnorm, NULL, rt_ref_bf_bn_fwd, rt_ref_batchnorm_bwd, NULL, NULL},
    {&rt__op_relu, NULL, rt_ref_bf_relu_fwd, rt_ref_relu_bwd, NULL, NULL},
    {&rt__op_clip, NULL, rt_ref_bf_unary_fwd, rt_ref_unary_bwd, NULL, NULL},
    {&rt__op_kerasrelu, NULL, rt_ref_bf_unary_fwd, rt_ref_unary_bwd, NULL, NULL},
    {&rt__op_pad, NULL, rt_ref_bf_map_fwd, rt_ref_map_bwd, NULL, NULL},
    {&rt__op_maxpool2d, NULL, rt_ref_bf_maxpool2d_fwd, rt_ref_maxpool2d_bwd, NULL, NULL},
    {&rt__op_avgpool2d, NULL, rt_ref_bf_avgpool2d_fwd, rt_ref_avgpool2d_bwd, NULL, NULL},
    {&rt__op_globalavgpool, NULL, rt_ref_bf_gap_fwd, rt_ref_gap_bwd, NULL, NULL},
    {&rt__op_concat, NULL, rt_ref_bf_concat_fwd, rt_ref_concat_bwd, NULL, NULL},
    {&rt__op_add, NULL, rt_ref_bf_add_fwd, rt_ref_add_bwd, NULL, NULL},
    {&rt__op_sub, NULL, rt_ref_bf_sub_fwd, rt_ref_sub_bwd, NULL, NULL},
    {&rt__op_mul, NULL, rt_ref_bf_mul_fwd, rt_ref_mul_bwd, NULL, NULL},
    {&rt__op_div, NULL, rt_ref_bf_div_fwd, rt_ref_div_bwd, NULL, NULL},
    {&rt__op_max, NULL, rt_ref_bf_max_fwd, rt_ref_max_bwd, NULL, NULL},
    {&rt__op_min, NULL, rt_ref_bf_min_fwd, rt_ref_min_bwd, NULL, NULL},
    {&rt__op_dropout, NULL, rt_ref_bf_dropout_fwd, rt_ref_dropout_bwd, NULL, NULL},
    {&rt__op_spatialdropout, NULL, rt_ref_bf_dropout_fwd, rt_ref_dropout_bwd, NULL, NULL},
    {&rt__op_gaussiannoise, NULL, rt_ref_bf_dropout_fwd, rt_ref_dropout_bwd, NULL, NULL},
    {&rt__op_gaussiandropout, NULL, rt_ref_bf_dropout_fwd, rt_ref_dropout_bwd, NULL, NULL},
    {&rt__op_flatten, NULL, rt_ref_bf_copy_fwd, rt_ref_copy_bwd, NULL, NULL},
    {&rt__op_reshape, NULL, rt_ref_bf_copy_fwd, rt_ref_copy_bwd, NULL, NULL},
};

const rt__kernel *rt_ref_bf16_kernel(const rt__node *nd, const rt__op_def *fused)
{
    const rt__op_def *op = nd->op;
    if (rt__bf16_sample_kind(op) && !rt__bf16_sample_op(nd))
        return NULL;
    return rt__kernel_find(rt_ref_bf16_table,
                           sizeof rt_ref_bf16_table / sizeof rt_ref_bf16_table[0], op, fused);
}
