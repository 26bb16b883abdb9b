/*
 * rt_kern_table.c - the CPU backend's float32 kernel table: from op (and
 * fused pair) to forward and backward kernels. rt_backend_cpu.c looks ops
 * up in it, and so does the bf16 code (rt_kern_bf16.c) for a node it hands
 * back to float32; both sit above this file.
 *
 * A row with a second op is a fusion rule: when a node of the first op has
 * exactly one reader, of the second op, compile's fuse pass lets the node
 * absorb the reader (after can_fuse agrees) and runs this row's kernels in
 * its place. The row with rt__op_crossentropy as the reader makes the loss
 * read a Softmax's logits (rt_loss.c); the Softmax itself still runs.
 */
#include <stddef.h>

#include "cpu/rt_kern_conv.h"
#include "cpu/rt_kern_cpu.h"

static const rt__kernel rt__cpu_table[] = {
    /* {op, fused reader or NULL, forward, backward, can_fuse, prepare} */
    {&rt__op_dense, NULL, rt_kern_dense_fwd, rt_kern_dense_bwd, NULL, rt_kern_dense_prepare},
    {&rt__op_dense, &rt__op_relu, rt_kern_dense_fwd, rt_kern_dense_bwd, rt_kern_dense_can_fuse_act,
     rt_kern_dense_prepare},
    {&rt__op_dense, &rt__op_sigmoid, rt_kern_dense_fwd, rt_kern_dense_bwd,
     rt_kern_dense_can_fuse_act, rt_kern_dense_prepare},
    {&rt__op_dense, &rt__op_tanh, rt_kern_dense_fwd, rt_kern_dense_bwd, rt_kern_dense_can_fuse_act,
     rt_kern_dense_prepare},
    {&rt__op_matmul, NULL, rt_kern_dense_fwd, rt_kern_dense_bwd, NULL, NULL},
    {&rt__op_batchmatmul, NULL, rt_kern_bmm_fwd, rt_kern_bmm_bwd, NULL, NULL},
    {&rt__op_bandmask, NULL, rt_kern_band_fwd, rt_kern_band_bwd, NULL, NULL},
    RT__IMGAUG_ROWS,
    {&rt__op_add, NULL, rt_kern_add_fwd, rt_kern_add_bwd, NULL, NULL},
    {&rt__op_sub, NULL, rt_kern_sub_fwd, rt_kern_sub_bwd, NULL, NULL},
    {&rt__op_mul, NULL, rt_kern_mul_fwd, rt_kern_mul_bwd, NULL, NULL},
    {&rt__op_relu, NULL, rt_kern_relu_fwd, rt_kern_relu_bwd, NULL, NULL},
    {&rt__op_sigmoid, NULL, rt_kern_sigmoid_fwd, rt_kern_sigmoid_bwd, NULL, NULL},
    {&rt__op_tanh, NULL, rt_kern_tanh_fwd, rt_kern_tanh_bwd, NULL, NULL},
    {&rt__op_softmax, NULL, rt_kern_softmax_fwd, rt_kern_softmax_bwd, NULL, NULL},
    /* Softmax + (sparse) crossentropy: the loss's backward writes the
     * logits' gradient, so this Softmax's backward never runs */
    {&rt__op_softmax, &rt__op_crossentropy, rt_kern_softmax_fwd, rt_kern_softmax_bwd, NULL, NULL},
    {&rt__op_logsoftmax, NULL, rt_kern_logsoftmax_fwd, rt_kern_logsoftmax_bwd, NULL, NULL},
    {&rt__op_reshape, NULL, rt_kern_copy_fwd, rt_kern_copy_bwd, NULL, NULL},
    {&rt__op_flatten, NULL, rt_kern_copy_fwd, rt_kern_copy_bwd, NULL, NULL},
    {&rt__op_identity, NULL, rt_kern_copy_fwd, rt_kern_copy_bwd, NULL, NULL},
    {&rt__op_dropout, NULL, rt_kern_dropout_fwd, rt_kern_dropout_bwd, NULL, NULL},
    {&rt__op_conv2d, NULL, rt_kern_conv2d_fwd, rt_kern_conv2d_bwd, NULL, rt_kern_conv2d_prepare},
    {&rt__op_conv2d, &rt__op_maxpool2d, rt_kern_conv2d_fwd, rt_kern_conv2d_bwd,
     rt_kern_conv2d_can_fuse_maxpool, rt_kern_conv2d_prepare},
    {&rt__op_maxpool2d, NULL, rt_kern_maxpool2d_fwd, rt_kern_maxpool2d_bwd, NULL,
     rt_kern_pool_prepare},
    {&rt__op_avgpool2d, NULL, rt_kern_avgpool2d_fwd, rt_kern_avgpool2d_bwd, NULL,
     rt_kern_pool_prepare},
    {&rt__op_globalavgpool, NULL, rt_kern_gap_fwd, rt_kern_gap_bwd, NULL, NULL},
    {&rt__op_batchnorm, NULL, rt_kern_batchnorm_fwd, rt_kern_batchnorm_bwd, NULL,
     rt_kern_batchnorm_prepare},
    {&rt__op_concat, NULL, rt_kern_concat_fwd, rt_kern_concat_bwd, NULL, NULL},
    {&rt__op_div, NULL, rt_kern_div_fwd, rt_kern_div_bwd, NULL, NULL},
    {&rt__op_max, NULL, rt_kern_max_fwd, rt_kern_max_bwd, NULL, NULL},
    {&rt__op_min, NULL, rt_kern_min_fwd, rt_kern_min_bwd, NULL, NULL},
    {&rt__op_prelu, NULL, rt_kern_prelu_fwd, rt_kern_prelu_bwd, NULL, NULL},
    {&rt__op_elu, NULL, rt_kern_unary_fwd, rt_kern_unary_bwd, NULL, NULL},
    {&rt__op_selu, NULL, rt_kern_unary_fwd, rt_kern_unary_bwd, NULL, NULL},
    {&rt__op_leakyrelu, NULL, rt_kern_unary_fwd, rt_kern_unary_bwd, NULL, NULL},
    {&rt__op_gelu, NULL, rt_kern_unary_fwd, rt_kern_unary_bwd, NULL, NULL},
    {&rt__op_erf, NULL, rt_kern_unary_fwd, rt_kern_unary_bwd, NULL, NULL},
    {&rt__op_softplus, NULL, rt_kern_unary_fwd, rt_kern_unary_bwd, NULL, NULL},
    {&rt__op_softsign, NULL, rt_kern_unary_fwd, rt_kern_unary_bwd, NULL, NULL},
    {&rt__op_hardsigmoid, NULL, rt_kern_unary_fwd, rt_kern_unary_bwd, NULL, NULL},
    {&rt__op_swish, NULL, rt_kern_unary_fwd, rt_kern_unary_bwd, NULL, NULL},
    {&rt__op_clip, NULL, rt_kern_unary_fwd, rt_kern_unary_bwd, NULL, NULL},
    {&rt__op_thresholdedrelu, NULL, rt_kern_unary_fwd, rt_kern_unary_bwd, NULL, NULL},
    {&rt__op_kerasrelu, NULL, rt_kern_unary_fwd, rt_kern_unary_bwd, NULL, NULL},
    {&rt__op_exp, NULL, rt_kern_unary_fwd, rt_kern_unary_bwd, NULL, NULL},
    {&rt__op_scale, NULL, rt_kern_unary_fwd, rt_kern_unary_bwd, NULL, NULL},
    {&rt__op_mish, NULL, rt_kern_unary_fwd, rt_kern_unary_bwd, NULL, NULL},
    {&rt__op_hardswish, NULL, rt_kern_unary_fwd, rt_kern_unary_bwd, NULL, NULL},
    {&rt__op_logsigmoid, NULL, rt_kern_unary_fwd, rt_kern_unary_bwd, NULL, NULL},
    {&rt__op_sqrt, NULL, rt_kern_unary_fwd, rt_kern_unary_bwd, NULL, NULL},
    {&rt__op_abs, NULL, rt_kern_unary_fwd, rt_kern_unary_bwd, NULL, NULL},
    {&rt__op_log, NULL, rt_kern_unary_fwd, rt_kern_unary_bwd, NULL, NULL},
    {&rt__op_pad, NULL, rt_kern_map_fwd, rt_kern_map_bwd, NULL, NULL},
    {&rt__op_transpose, NULL, rt_kern_map_fwd, rt_kern_map_bwd, NULL, NULL},
    {&rt__op_reducemean, NULL, rt_kern_map_fwd, rt_kern_map_bwd, NULL, NULL},
    {&rt__op_reducesum, NULL, rt_kern_map_fwd, rt_kern_map_bwd, NULL, NULL},
    {&rt__op_reducemax, NULL, rt_kern_map_fwd, rt_kern_map_bwd, NULL, rt_kern_map_prepare},
    {&rt__op_reducemin, NULL, rt_kern_map_fwd, rt_kern_map_bwd, NULL, rt_kern_map_prepare},
    {&rt__op_reduceprod, NULL, rt_kern_map_fwd, rt_kern_map_bwd, NULL, rt_kern_map_prepare},
    {&rt__op_layernorm, NULL, rt_kern_layernorm_fwd, rt_kern_layernorm_bwd, NULL, NULL},
    {&rt__op_convtranspose, NULL, rt_kern_convt_fwd, rt_kern_convt_bwd, NULL,
     rt_kern_convt_prepare},
    {&rt__op_upsample, NULL, rt_kern_upsample_fwd, rt_kern_upsample_bwd, NULL, NULL},
    {&rt__op_globalmaxpool, NULL, rt_kern_gmp_fwd, rt_kern_gmp_bwd, NULL, NULL},
    {&rt__op_spatialdropout, NULL, rt_kern_dropout_fwd, rt_kern_dropout_bwd, NULL, NULL},
    {&rt__op_gaussiannoise, NULL, rt_kern_dropout_fwd, rt_kern_dropout_bwd, NULL, NULL},
    {&rt__op_gaussiandropout, NULL, rt_kern_dropout_fwd, rt_kern_dropout_bwd, NULL, NULL},
    {&rt__op_simplernn, NULL, rt_kern_rnn_fwd, rt_kern_rnn_bwd, NULL, rt_kern_rnn_prepare},
    {&rt__op_lstm, NULL, rt_kern_rnn_fwd, rt_kern_rnn_bwd, NULL, rt_kern_rnn_prepare},
    {&rt__op_gru, NULL, rt_kern_rnn_fwd, rt_kern_rnn_bwd, NULL, rt_kern_rnn_prepare},
    {&rt__op_embedding, NULL, rt_kern_embedding_fwd, rt_kern_embedding_bwd, NULL, NULL},
    {&rt__op_seqmask, NULL, rt_kern_seqmask_fwd, NULL, NULL, NULL},
    {&rt__op_masking, NULL, rt_kern_masking_fwd, rt_kern_masking_bwd, NULL, NULL},
    {&rt__op_actreg, NULL, rt_kern_actreg_fwd, rt_kern_actreg_bwd, NULL, NULL},
};

const rt__kernel *rt_kern_cpu_f32_kernel(const rt__op_def *op, const rt__op_def *fused)
{
    return rt__kernel_find(rt__cpu_table, sizeof rt__cpu_table / sizeof rt__cpu_table[0], op,
                           fused);
}
