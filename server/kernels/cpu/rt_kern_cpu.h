/*
 * rt_kern_cpu.h - the CPU backend's kernels. Each op's forward and backward
 * sit side by side in one file; every kernel has the signature
 * void (const rt__kargs *a) (see rt_engine_impl.h: outputs y/dx, inputs
 * x/dy, the op's typed parameters through rt__<kind>_cp(a->nd), the
 * kernel's own plan in a->nd->kdata, the runtime batch in a->r->n).
 * Backward kernels overwrite dx[i], or add into it when bit i of a->accum
 * is set. rt_backend_cpu.c maps ops (and fused pairs) to them.
 */
#ifndef RTRAIN_KERN_CPU_H
#define RTRAIN_KERN_CPU_H

#include "rt_engine_impl.h"

/* Dense / MatMul: x (R,K) W (K,N) + b, then the activation: Dense's own,
 * or the Relu/Sigmoid/Tanh fused into it (Dense + activation rule). */
void rt_kern_dense_fwd(const rt__kargs *a);
void rt_kern_dense_bwd(const rt__kargs *a);
/* the activation on a Dense's output: its own or the fused reader's */
int rt_kern_dense_act(const rt__node *nd);
/* may Dense absorb this activation (it has none of its own) */
int rt_kern_dense_can_fuse_act(const rt__node *dense, const rt__node *act);
/* scratch for dz when an activation is applied */
int rt_kern_dense_prepare(rt__node *nd, int64_t B, rt__arena *A);

/* BatchMatMul: one product per leading index (rt_kern_bmm.c) */
void rt_kern_bmm_fwd(const rt__kargs *a);
void rt_kern_bmm_bwd(const rt__kargs *a);
/* BandMask (causal / sliding-window attention mask, rt__band_params) */
void rt_kern_band_fwd(const rt__kargs *a);
void rt_kern_band_bwd(const rt__kargs *a);

/* the elementwise binaries (rt_kern_eltwise.c, and the bf16 ones of
 * rt_kern_bf16act.c): op(x, y) and d op / d input k times g */
enum {
    RT_KERN_ADD = 0,
    RT_KERN_SUB,
    RT_KERN_MUL,
    RT_KERN_DIV,
    RT_KERN_MAX,
    RT_KERN_MIN,
    RT_KERN_PRELU
};

static inline float rt_kern_bin(int op, float x, float y)
{
    switch (op) {
    case RT_KERN_ADD: return x + y;
    case RT_KERN_SUB: return x - y;
    case RT_KERN_MUL: return x * y;
    case RT_KERN_DIV: return x / y;
    case RT_KERN_MAX: return x >= y ? x : y;
    case RT_KERN_MIN: return x <= y ? x : y;
    default: return x > 0.0f ? x : y * x; /* PRelu */
    }
}

/* d op(a, b) / d input k, times g */
static inline float rt_kern_bin_d(int op, int k, float x, float y, float g)
{
    switch (op) {
    case RT_KERN_ADD: return g;
    case RT_KERN_SUB: return k ? -g : g;
    case RT_KERN_MUL: return k ? g * x : g * y;
    case RT_KERN_DIV: return k ? -g * x / (y * y) : g / y;
    case RT_KERN_MAX: return (x >= y) == !k ? g : 0.0f; /* ties: input 0 */
    case RT_KERN_MIN: return (x <= y) == !k ? g : 0.0f;
    default: return x > 0.0f ? (k ? 0.0f : g) : (k ? g * x : g * y); /* PRelu */
    }
}

/* Add/Sub/Mul with numpy broadcasting (rt__bcast_params) */
void rt_kern_add_fwd(const rt__kargs *a);
void rt_kern_add_bwd(const rt__kargs *a);
void rt_kern_sub_fwd(const rt__kargs *a);
void rt_kern_sub_bwd(const rt__kargs *a);
void rt_kern_mul_fwd(const rt__kargs *a);
void rt_kern_mul_bwd(const rt__kargs *a);
/* Div, Max, Min (ties send the gradient to input 0), PRelu(x, slope) */
void rt_kern_div_fwd(const rt__kargs *a);
void rt_kern_div_bwd(const rt__kargs *a);
void rt_kern_max_fwd(const rt__kargs *a);
void rt_kern_max_bwd(const rt__kargs *a);
void rt_kern_min_fwd(const rt__kargs *a);
void rt_kern_min_bwd(const rt__kargs *a);
void rt_kern_prelu_fwd(const rt__kargs *a);
void rt_kern_prelu_bwd(const rt__kargs *a);

/* the activations of op_act.c (rt__unary_params); backward reads x */
void rt_kern_unary_fwd(const rt__kargs *a);
void rt_kern_unary_bwd(const rt__kargs *a);
/* the same over n values in a row on the calling thread: y = f(x), and dx
 * = dy * f'(x) (add: dx +=) */
void rt_kern_unary_map(const rt__unary_params *p, float *y, const float *x, int64_t n);
void rt_kern_unary_dmap(const rt__unary_params *p, float *dx, const float *dy, const float *x,
                        int64_t n, int add);

/* Pad, Transpose, ReduceMean/Sum/Max/Min/Prod: one index map
 * (rt__map_params); the prepare sizes Max/Min/Prod's backward scratch */
void rt_kern_map_fwd(const rt__kargs *a);
void rt_kern_map_bwd(const rt__kargs *a);
int rt_kern_map_prepare(rt__node *nd, int64_t B, rt__arena *A);
/* Upsample, nearest or bilinear (rt__upsample_params) */
void rt_kern_upsample_fwd(const rt__kargs *a);
void rt_kern_upsample_bwd(const rt__kargs *a);
/* GlobalMaxPool (B, ..., C) -> (B, C): gradient to the first maximum */
void rt_kern_gmp_fwd(const rt__kargs *a);
void rt_kern_gmp_bwd(const rt__kargs *a);
/* LayerNormalization over the last axis (rt__ln_params) */
void rt_kern_layernorm_fwd(const rt__kargs *a);
void rt_kern_layernorm_bwd(const rt__kargs *a);
/* ConvTranspose (NHWC, kernel (KH,KW,OC,C)) and grouped Conv2D (group > 1,
 * depthwise included): direct loops over the window, threads over samples
 * (rt_kern_conv2.c) */
void rt_kern_convt_fwd(const rt__kargs *a);
void rt_kern_convt_bwd(const rt__kargs *a);
/* ConvTranspose's scratch: per thread dW and db */
int rt_kern_convt_prepare(rt__node *nd, int64_t B, rt__arena *A);
void rt_kern_gconv_fwd(const rt__kargs *a);
void rt_kern_gconv_bwd(const rt__kargs *a);

void rt_kern_relu_fwd(const rt__kargs *a);
void rt_kern_relu_bwd(const rt__kargs *a);
void rt_kern_sigmoid_fwd(const rt__kargs *a);
void rt_kern_sigmoid_bwd(const rt__kargs *a);
void rt_kern_tanh_fwd(const rt__kargs *a);
void rt_kern_tanh_bwd(const rt__kargs *a);

/* in-place activation on n floats, and dz = dy * act'(y) */
void rt_kern_act_fwd(int act, float *y, int64_t n);
void rt_kern_act_bwd(int act, float *dz, const float *dy, const float *y, int64_t n);

void rt_kern_softmax_fwd(const rt__kargs *a);
void rt_kern_softmax_bwd(const rt__kargs *a);
void rt_kern_logsoftmax_fwd(const rt__kargs *a);
void rt_kern_logsoftmax_bwd(const rt__kargs *a);

/* memcpy over the threads where it is large (Flatten, Reshape) */
void rt_kern_par_memcpy(void *dst, const void *src, size_t bytes);
/* Reshape, Flatten, Identity: a copy of the values */
void rt_kern_copy_fwd(const rt__kargs *a);
void rt_kern_copy_bwd(const rt__kargs *a);

/* Dropout, SpatialDropout, GaussianNoise, GaussianDropout: masks and noise
 * come from the counter RNG keyed by (seed, node, step, element), so
 * backward recomputes them instead of storing. */
void rt_kern_dropout_fwd(const rt__kargs *a);
/* the forward on elements i0 .. i0+m of the batch: y from x (m values) */
void rt_kern_dropout_map(const rt__kargs *a, float *y, const float *x, int64_t i0, int64_t m);
void rt_kern_dropout_bwd(const rt__kargs *a);
void rt_kern_actreg_fwd(const rt__kargs *a);
void rt_kern_actreg_bwd(const rt__kargs *a);

/* SimpleRNN / LSTM / GRU (rt__rnn_params): forward fills the node's
 * workspace, backward runs through time from it (rt_kern_rnn.c) */
void rt_kern_rnn_fwd(const rt__kargs *a);
void rt_kern_rnn_bwd(const rt__kargs *a);
int rt_kern_rnn_prepare(rt__node *nd, int64_t B, rt__arena *A);
/* Embedding: row gather, scatter-add of the rows' gradients */
void rt_kern_embedding_fwd(const rt__kargs *a);
void rt_kern_embedding_bwd(const rt__kargs *a);
/* SequenceMask (no backward) and Masking (rt__seqmask_params) */
void rt_kern_seqmask_fwd(const rt__kargs *a);
void rt_kern_masking_fwd(const rt__kargs *a);
void rt_kern_masking_bwd(const rt__kargs *a);

/* C (M,N) = op(A) op(B) + beta C, row-major, alpha 1. Tiny products use a
 * hand-written kernel (oneDNN's call overhead dominates there); the rest
 * go to dnnl_sgemm. (rt_kern_gemm.c) */
void rt_kern_gemm(const rt__run *r, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* oneDNN's sgemm as rt_kern_gemm takes it; serial: on this thread alone
 * when called outside a parallel region (omp_set_num_threads sets only
 * this thread's default; inside a region oneDNN is serial anyway).
 * (rt_kern_gemm.c; rt_kern_conv.c's GEMMs too) */
void rt_kern_dnnl_sgemm(int serial, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                        int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                        int64_t ldc);
/* Below this M*N*K the hand-written kernel runs; the bench measured it. */
#define RT_KERN_SMALL_GEMM 32768
/* floats of scratch the small kernel needs for a transposed B of K x N
 * (the backend's shared scratch, rt__run.gemm_scratch) */
#define RT_KERN_GEMM_SCRATCH 8192

/* The rest of a step (rt__backend's step functions) */
/* rt_kern_loss.c: loss and accuracy of one batch (rt__backend.loss without
 * sample weights); scratch: 2 * n * out_numel floats */
void rt__loss_run(const rt__lossinfo *L, const float *y, const void *lab, int64_t n, float *dy,
                  double *loss_sum, double *acc_sum, float *scratch);
/* rt_kern_loss_torch.c: PyTorch's losses, as rt__loss_run (which calls it);
 * the batch's loss (PyTorch's, mean or sum) times n is added to *loss_sum */
void rt__loss_torch_run(const rt__lossinfo *L, const float *y, const void *lab, int64_t n,
                        float *dy, double *loss_sum, double *acc_sum);
/* rt_kern_metrics.c */
void rt__metrics_update(const rt__lossinfo *L, uint32_t metrics, const float *y, const void *lab,
                        int64_t n, rt__macc *a);
/* rt_kern_optim.c */
void rt__opt_update(const rt_train_config *c, float lr, int64_t t, float *w, float *g, float *s1,
                    float *s2, int64_t count);
double rt__clip_by_norm(float *g, int64_t count, float clip);
/* rt_kern_regular.c */
double rt__reg_apply(const rt_plan *p, const float *w, float *g);
void rt__constrain(const rt_plan *p, float *w);

#endif
