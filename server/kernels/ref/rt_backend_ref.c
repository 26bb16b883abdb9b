/*
 * rt_backend_ref.c - the reference backend: its table, its memory (the
 * host's, plainly allocated) and its step functions (rt_ref_step.c).
 *
 * Its only fusion rule is Softmax + crossentropy, which is part of the
 * semantics (the loss reads the logits, as Keras). Every other CPU fusion
 * (Dense + activation, Conv2D + MaxPool2D) runs here as its two ops, so a
 * differential run checks each fused CPU kernel against the composition
 * it replaces.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/rt_ref.h"

static const rt__kernel rt_ref_table[] = {
    /* {op, fused reader or NULL, forward, backward, can_fuse, prepare} */
    {&rt__op_dense, NULL, rt_ref_dense_fwd, rt_ref_dense_bwd, NULL, NULL},
    {&rt__op_matmul, NULL, rt_ref_dense_fwd, rt_ref_dense_bwd, NULL, NULL},
    {&rt__op_batchmatmul, NULL, rt_ref_bmm_fwd, rt_ref_bmm_bwd, NULL, NULL},
    {&rt__op_bandmask, NULL, rt_ref_band_fwd, rt_ref_band_bwd, NULL, NULL},
    RT__IMGAUG_ROWS,
    {&rt__op_add, NULL, rt_ref_add_fwd, rt_ref_add_bwd, NULL, NULL},
    {&rt__op_sub, NULL, rt_ref_sub_fwd, rt_ref_sub_bwd, NULL, NULL},
    {&rt__op_mul, NULL, rt_ref_mul_fwd, rt_ref_mul_bwd, NULL, NULL},
    {&rt__op_div, NULL, rt_ref_div_fwd, rt_ref_div_bwd, NULL, NULL},
    {&rt__op_max, NULL, rt_ref_max_fwd, rt_ref_max_bwd, NULL, NULL},
    {&rt__op_min, NULL, rt_ref_min_fwd, rt_ref_min_bwd, NULL, NULL},
    {&rt__op_prelu, NULL, rt_ref_prelu_fwd, rt_ref_prelu_bwd, NULL, NULL},
    {&rt__op_relu, NULL, rt_ref_relu_fwd, rt_ref_relu_bwd, NULL, NULL},
    {&rt__op_sigmoid, NULL, rt_ref_sigmoid_fwd, rt_ref_sigmoid_bwd, NULL, NULL},
    {&rt__op_tanh, NULL, rt_ref_tanh_fwd, rt_ref_tanh_bwd, NULL, NULL},
    {&rt__op_softmax, NULL, rt_ref_softmax_fwd, rt_ref_softmax_bwd, NULL, NULL},
    /* the loss reads the logits and writes their gradient: this
     * Softmax's backward never runs */
    {&rt__op_softmax, &rt__op_crossentropy, rt_ref_softmax_fwd, rt_ref_softmax_bwd, NULL, NULL},
    {&rt__op_logsoftmax, NULL, rt_ref_logsoftmax_fwd, rt_ref_logsoftmax_bwd, NULL, NULL},
    {&rt__op_reshape, NULL, rt_ref_copy_fwd, rt_ref_copy_bwd, NULL, NULL},
    {&rt__op_flatten, NULL, rt_ref_copy_fwd, rt_ref_copy_bwd, NULL, NULL},
    {&rt__op_identity, NULL, rt_ref_copy_fwd, rt_ref_copy_bwd, NULL, NULL},
    {&rt__op_dropout, NULL, rt_ref_dropout_fwd, rt_ref_dropout_bwd, NULL, NULL},
    {&rt__op_spatialdropout, NULL, rt_ref_dropout_fwd, rt_ref_dropout_bwd, NULL, NULL},
    {&rt__op_gaussiannoise, NULL, rt_ref_dropout_fwd, rt_ref_dropout_bwd, NULL, NULL},
    {&rt__op_gaussiandropout, NULL, rt_ref_dropout_fwd, rt_ref_dropout_bwd, NULL, NULL},
    {&rt__op_actreg, NULL, rt_ref_actreg_fwd, rt_ref_actreg_bwd, NULL, NULL},
    {&rt__op_conv2d, NULL, rt_ref_conv2d_fwd, rt_ref_conv2d_bwd, NULL, NULL},
    {&rt__op_convtranspose, NULL, rt_ref_convt_fwd, rt_ref_convt_bwd, NULL, NULL},
    {&rt__op_maxpool2d, NULL, rt_ref_maxpool2d_fwd, rt_ref_maxpool2d_bwd, NULL, NULL},
    {&rt__op_avgpool2d, NULL, rt_ref_avgpool2d_fwd, rt_ref_avgpool2d_bwd, NULL, NULL},
    {&rt__op_globalavgpool, NULL, rt_ref_gap_fwd, rt_ref_gap_bwd, NULL, NULL},
    {&rt__op_globalmaxpool, NULL, rt_ref_gmp_fwd, rt_ref_gmp_bwd, NULL, NULL},
    {&rt__op_batchnorm, NULL, rt_ref_batchnorm_fwd, rt_ref_batchnorm_bwd, NULL, NULL},
    {&rt__op_layernorm, NULL, rt_ref_layernorm_fwd, rt_ref_layernorm_bwd, NULL, NULL},
    {&rt__op_concat, NULL, rt_ref_concat_fwd, rt_ref_concat_bwd, NULL, NULL},
    {&rt__op_pad, NULL, rt_ref_map_fwd, rt_ref_map_bwd, NULL, NULL},
    {&rt__op_transpose, NULL, rt_ref_map_fwd, rt_ref_map_bwd, NULL, NULL},
    {&rt__op_reducemean, NULL, rt_ref_map_fwd, rt_ref_map_bwd, NULL, NULL},
    {&rt__op_reducesum, NULL, rt_ref_map_fwd, rt_ref_map_bwd, NULL, NULL},
    {&rt__op_reducemax, NULL, rt_ref_map_fwd, rt_ref_map_bwd, NULL, NULL},
    {&rt__op_reducemin, NULL, rt_ref_map_fwd, rt_ref_map_bwd, NULL, NULL},
    {&rt__op_reduceprod, NULL, rt_ref_map_fwd, rt_ref_map_bwd, NULL, NULL},
    {&rt__op_upsample, NULL, rt_ref_upsample_fwd, rt_ref_upsample_bwd, NULL, NULL},
    {&rt__op_embedding, NULL, rt_ref_embedding_fwd, rt_ref_embedding_bwd, NULL, NULL},
    {&rt__op_simplernn, NULL, rt_ref_rnn_fwd, rt_ref_rnn_bwd, NULL, rt_ref_rnn_prepare},
    {&rt__op_lstm, NULL, rt_ref_rnn_fwd, rt_ref_rnn_bwd, NULL, rt_ref_rnn_prepare},
    {&rt__op_gru, NULL, rt_ref_rnn_fwd, rt_ref_rnn_bwd, NULL, rt_ref_rnn_prepare},
    {&rt__op_seqmask, NULL, rt_ref_seqmask_fwd, NULL, NULL, NULL},
    {&rt__op_masking, NULL, rt_ref_masking_fwd, rt_ref_masking_bwd, NULL, NULL},
#define RT_REF_UNARY(op) {&op, NULL, rt_ref_unary_fwd, rt_ref_unary_bwd, NULL, NULL},
    RT_REF_UNARY(rt__op_elu) RT_REF_UNARY(rt__op_selu) RT_REF_UNARY(rt__op_leakyrelu)
        RT_REF_UNARY(rt__op_gelu) RT_REF_UNARY(rt__op_erf) RT_REF_UNARY(rt__op_softplus)
            RT_REF_UNARY(rt__op_softsign) RT_REF_UNARY(rt__op_hardsigmoid)
                RT_REF_UNARY(rt__op_swish) RT_REF_UNARY(rt__op_clip)
                    RT_REF_UNARY(rt__op_thresholdedrelu) RT_REF_UNARY(rt__op_kerasrelu)
                        RT_REF_UNARY(rt__op_exp) RT_REF_UNARY(rt__op_scale)
                            RT_REF_UNARY(rt__op_mish) RT_REF_UNARY(rt__op_hardswish)
                                RT_REF_UNARY(rt__op_logsigmoid) RT_REF_UNARY(rt__op_sqrt)
                                    RT_REF_UNARY(rt__op_abs) RT_REF_UNARY(rt__op_log)
#undef RT_REF_UNARY
};

static const rt__kernel *rt_ref_kernel(void *ctx, const rt__op_def *op, const rt__op_def *fused)
{
    (void)ctx;
    return rt__kernel_find(rt_ref_table, sizeof rt_ref_table / sizeof rt_ref_table[0], op, fused);
}

/* mixed bfloat16 emulated by rounding (rt_ref_bf16.c): any CPU */
static int rt_ref_precision(void *ctx, int prec, char *err, size_t errlen)
{
    (void)ctx, (void)prec, (void)err, (void)errlen;
    return 0;
}
static const rt__kernel *rt_ref_kernel_bf16(void *ctx, const rt__node *nd, const rt__op_def *fused)
{
    (void)ctx;
    return rt_ref_bf16_kernel(nd, fused);
}

static unsigned rt_ref_bf16_io_hook(void *ctx, const rt__node *nd)
{
    (void)ctx;
    return rt_ref_bf16_io(nd);
}

static int rt_ref_supports(void *ctx, const rt__node *nd)
{
    return rt_ref_kernel(ctx, nd->op, NULL) != NULL;
}

static void rt_ref_run(void *ctx, const rt__call *calls, const rt__kargs *args, int n)
{
    (void)ctx;
    for (int i = 0; i < n; i++)
        calls[i].fn(&args[i]);
}

static void *rt_ref_alloc(void *ctx, size_t n)
{
    (void)ctx;
    return rt__aligned_alloc(n);
}
static void rt_ref_release(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}
static void rt_ref_copy(void *ctx, void *dst, const void *src, size_t n)
{
    (void)ctx;
    if (dst != src && n)
        memmove(dst, src, n);
}
static void *rt_ref_host(void *ctx, void *p)
{
    (void)ctx;
    return p;
}

const rt__backend rt__backend_ref = {
    .name = "ref",
    .describe = NULL,
    .rank = 10, /* below cpu: the default only where cpu is not built */
    .context = NULL,
    .shared_scratch_floats = 0,
    .kernel = rt_ref_kernel,
    .supports_op = rt_ref_supports,
    .check = NULL,
    .precision = rt_ref_precision,
    .kernel_bf16 = rt_ref_kernel_bf16,
    .bf16_io = rt_ref_bf16_io_hook,
    .run = rt_ref_run,
    .alloc = rt_ref_alloc,
    .release = rt_ref_release,
    .upload = rt_ref_copy,
    .download = rt_ref_copy,
    .host = rt_ref_host,
    .gather = rt_ref_gather,
    .loss = rt_ref_loss,
    .metrics = rt_ref_metrics,
    .heads = rt_ref_heads,
    .regularize = rt_ref_regularize,
    .constrain = rt_ref_constrain,
    .clip = rt_ref_clip,
    .update = rt_ref_update,
    .scale = rt_ref_scale,
};
