/*
 * rt_ref.h - the reference backend (server/kernels/ref): an oracle written
 * to be read. Portable C99 in straight loops: no intrinsics, no OpenMP, no
 * oneDNN, no blocking, no fusion beyond what changes the semantics (the
 * Softmax + crossentropy pair, whose loss reads the logits). Sums run in
 * double, element by element in index order, so its results differ from
 * the CPU backend's only by the CPU's float rounding and summation order;
 * tests/engine/test_backend_diff.c and the differential fuzzer compare the
 * two (docs/backends.md).
 *
 * Kernels keep the engine's contract (rt_engine_impl.h): forward writes y,
 * backward writes dx[i] for the inputs that need it, overwriting or adding
 * when bit i of accum is set.
 */
#ifndef RTRAIN_REF_H
#define RTRAIN_REF_H

#include "rt_engine_impl.h"

/* dx[i] = v, or += v when the call accumulates into input k's gradient */
static inline void rt_ref_put(const rt__kargs *a, int k, int64_t i, double v)
{
    float *dx = a->dx[k];
    if (a->accum >> k & 1u)
        dx[i] = (float)((double)dx[i] + v);
    else
        dx[i] = (float)v;
}
/* zero input k's gradient unless the call accumulates into it (kernels
 * that scatter with +=) */
void rt_ref_clear(const rt__kargs *a, int k, int64_t n);

/* rt_ref_bf16.c: mixed bfloat16 (Dense, MatMul, Conv2D but grouped ones)
 * as the definition; NULL for the other nodes */
const rt__kernel *rt_ref_bf16_kernel(const rt__node *nd, const rt__op_def *fused);
/* the backend's bf16_io: the CPU backend's bf16 storage emulated
 * (RT__BF16_EMULATED): the same values stored bf16 there hold bf16 values
 * here, rounded by their producer */
unsigned rt_ref_bf16_io(const rt__node *nd);
/* 0: nothing stored bf16 (as the CPU backend's rt_kern_bf16_act_store);
 * read at compile, default 1 */
extern int rt_ref_bf16_act_store;

/* rt_ref_ops.c */
void rt_ref_dense_fwd(const rt__kargs *a);
void rt_ref_dense_bwd(const rt__kargs *a);
void rt_ref_bmm_fwd(const rt__kargs *a);
void rt_ref_bmm_bwd(const rt__kargs *a);
void rt_ref_band_fwd(const rt__kargs *a);
void rt_ref_band_bwd(const rt__kargs *a);
void rt_ref_add_fwd(const rt__kargs *a);
void rt_ref_add_bwd(const rt__kargs *a);
void rt_ref_sub_fwd(const rt__kargs *a);
void rt_ref_sub_bwd(const rt__kargs *a);
void rt_ref_mul_fwd(const rt__kargs *a);
void rt_ref_mul_bwd(const rt__kargs *a);
void rt_ref_div_fwd(const rt__kargs *a);
void rt_ref_div_bwd(const rt__kargs *a);
void rt_ref_max_fwd(const rt__kargs *a);
void rt_ref_max_bwd(const rt__kargs *a);
void rt_ref_min_fwd(const rt__kargs *a);
void rt_ref_min_bwd(const rt__kargs *a);
void rt_ref_prelu_fwd(const rt__kargs *a);
void rt_ref_prelu_bwd(const rt__kargs *a);
void rt_ref_relu_fwd(const rt__kargs *a);
void rt_ref_relu_bwd(const rt__kargs *a);
void rt_ref_sigmoid_fwd(const rt__kargs *a);
void rt_ref_sigmoid_bwd(const rt__kargs *a);
void rt_ref_tanh_fwd(const rt__kargs *a);
void rt_ref_tanh_bwd(const rt__kargs *a);
void rt_ref_unary_fwd(const rt__kargs *a);
void rt_ref_unary_bwd(const rt__kargs *a);
void rt_ref_softmax_fwd(const rt__kargs *a);
void rt_ref_softmax_bwd(const rt__kargs *a);
void rt_ref_logsoftmax_fwd(const rt__kargs *a);
void rt_ref_logsoftmax_bwd(const rt__kargs *a);
void rt_ref_copy_fwd(const rt__kargs *a);
void rt_ref_copy_bwd(const rt__kargs *a);
void rt_ref_dropout_fwd(const rt__kargs *a);
void rt_ref_dropout_bwd(const rt__kargs *a);
void rt_ref_actreg_fwd(const rt__kargs *a);
void rt_ref_actreg_bwd(const rt__kargs *a);
void rt_ref_concat_fwd(const rt__kargs *a);
void rt_ref_concat_bwd(const rt__kargs *a);
void rt_ref_map_fwd(const rt__kargs *a);
void rt_ref_map_bwd(const rt__kargs *a);
void rt_ref_embedding_fwd(const rt__kargs *a);
void rt_ref_embedding_bwd(const rt__kargs *a);

/* rt_ref_conv.c */
void rt_ref_conv2d_fwd(const rt__kargs *a);
void rt_ref_conv2d_bwd(const rt__kargs *a);
void rt_ref_convt_fwd(const rt__kargs *a);
void rt_ref_convt_bwd(const rt__kargs *a);
void rt_ref_maxpool2d_fwd(const rt__kargs *a);
void rt_ref_maxpool2d_bwd(const rt__kargs *a);
void rt_ref_avgpool2d_fwd(const rt__kargs *a);
void rt_ref_avgpool2d_bwd(const rt__kargs *a);
void rt_ref_gap_fwd(const rt__kargs *a);
void rt_ref_gap_bwd(const rt__kargs *a);
void rt_ref_gmp_fwd(const rt__kargs *a);
void rt_ref_gmp_bwd(const rt__kargs *a);
void rt_ref_batchnorm_fwd(const rt__kargs *a);
void rt_ref_batchnorm_bwd(const rt__kargs *a);
void rt_ref_layernorm_fwd(const rt__kargs *a);
void rt_ref_layernorm_bwd(const rt__kargs *a);
void rt_ref_upsample_fwd(const rt__kargs *a);
void rt_ref_upsample_bwd(const rt__kargs *a);

/* rt_ref_rnn.c */
int rt_ref_rnn_prepare(rt__node *nd, int64_t B, rt__arena *A);
void rt_ref_rnn_fwd(const rt__kargs *a);
void rt_ref_rnn_bwd(const rt__kargs *a);
void rt_ref_seqmask_fwd(const rt__kargs *a);
void rt_ref_masking_fwd(const rt__kargs *a);
void rt_ref_masking_bwd(const rt__kargs *a);

/* rt_ref_step.c: the rest of the step (rt__backend's step functions) */
void rt_ref_gather(void *ctx, const rt__gather_args *g);
void rt_ref_loss(void *ctx, const rt__lossinfo *L, const float *y, const void *lab, int64_t n,
                 const float *sw, float *dy, double *loss_sum, double *acc_sum, float *scratch);
void rt_ref_metrics(void *ctx, const rt__lossinfo *L, uint32_t metrics, const float *y,
                    const void *lab, int64_t n, rt__macc *a);
void rt_ref_heads(void *ctx, const rt__lossinfo *L, const uint32_t *mets, const float *y,
                  const void *lab, int64_t n, const float *sw, rt__hacc *h, float *scratch);
double rt_ref_regularize(void *ctx, const rt_plan *p, const float *w, float *g);
void rt_ref_constrain(void *ctx, const rt_plan *p, float *w);
double rt_ref_clip(void *ctx, float *g, int64_t count, float clip);
void rt_ref_update(void *ctx, const rt_train_config *c, float lr, int64_t t, float *w, float *g,
                   float *s1, float *s2, int64_t count);
void rt_ref_scale(void *ctx, float *dst, const float *src, int64_t count, float s);

#endif
