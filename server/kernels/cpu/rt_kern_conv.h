/*
 * rt_kern_conv.h - CPU kernels of the convolutional ops, NHWC: Conv2D,
 * MaxPool2D/AvgPool2D, GlobalAvgPool, BatchNorm, Concat. The op definitions
 * (shape inference, attributes) are in server/engine/op_conv.c and
 * op_norm.c; kernels read the op's typed parameters (rt_op_params.h) and
 * their own per-node plan (rt__node.kdata), which the prepare functions
 * below compute once at compile.
 *
 * Conv2D is im2col + GEMM, done in chunks of whole samples so the column
 * buffer stays in cache (a 1x1 stride-1 unpadded convolution skips im2col:
 * NHWC already is its column matrix), or oneDNN's convolution primitives
 * on the same NHWC tensors (rt_kern_conv_dnnl.c) where bench/conv measured
 * them faster; prepare chooses by shape. Stride-1 layers with at most 64
 * channels each side and K > 64 take their backward pass a sample at a
 * time (the tap path: dz formed once, dx as a convolution of it with the
 * flipped weights, dW from x in place).
 */
#ifndef RTRAIN_KERN_CONV_H
#define RTRAIN_KERN_CONV_H

#include <omp.h>

#include "rt_engine_impl.h"

/* oneDNN's convolution primitives for one shape and batch
 * (rt_kern_conv_dnnl.c) */
typedef struct rt_kern_dconv rt_kern_dconv;

/* Conv2D's plan (rt__node.kdata), from rt_kern_conv2d_prepare */
typedef struct rt_kern_conv_plan {
    const rt_kern_dconv *dn; /* oneDNN's primitives, for the directions in dn_dirs */
    int dn_dirs;             /* RT_KERN_DN_*: which directions run on them */
    int64_t B;               /* the batch the scratch is sized for */
    int64_t chunk;           /* samples per im2col chunk */
    int64_t lines;           /* output lines per chunk (< OH: chunks are bands of one sample) */
    int64_t crows;           /* column-matrix rows a chunk holds at most */
    int direct;              /* 1x1, stride 1, no pad: x is the column matrix */
    int in_place;            /* the small-K microkernels read x, no im2col */
    int dw_mk;               /* dW by the microkernel over im2col's columns, not sgemm */
    int rmask;               /* the forward pass keeps ReLU's y > 0 as bits in the workspace */
    int tap;                 /* RT_KERN_DN_D / _W: backward directions by the per-sample
                              * tap kernels (dz formed once per sample, read in place) */
    int64_t dw_off;          /* a thread's partial dW (then db) in its scratch */
    int nt;                  /* threads the scratch is sized for */
    int64_t tstride;         /* scratch floats per thread */
    int64_t pool, poolw;     /* fused max pool window (0: none) */
    int64_t ph, pw;          /* pooled output per sample */
} rt_kern_conv_plan;

/* Conv2D + MaxPool2D (the compiler's fuse pass asks when the convolution's
 * only reader is the pool): non-overlapping windows (stride = window,
 * 'valid'). The pooled result becomes conv's output; the pre-pool tensor
 * only ever exists one chunk at a time in scratch (a 3x3x3x64 conv at
 * batch 256 would write and read 4 x 59 MB). The forward pass keeps each
 * pooled value's argmax in the node's workspace (one byte per pooled
 * value: 3.7 MB there; under ReLU 255 marks a window whose maximum is not
 * above 0, so the backward pass needs no y), from which the backward pass
 * forms each band's gradient without recomputing the convolution. */
int rt_kern_conv2d_can_fuse_maxpool(const rt__node *conv, const rt__node *pool);
/* A fused max pool over a convolution's output z (nb, OH, OW, OC):
 * non-overlapping KH x KW windows, pooled output (nb, PH, PW, OC); act, the
 * convolution's activation (act' is taken from the pooled output). */
typedef struct rt_kern_mpool {
    int64_t OH, OW, OC, KH, KW, PH, PW;
    int act;
} rt_kern_mpool;
/* the pool of a Conv2D (cv) that absorbed the MaxPool2D pool */
rt_kern_mpool rt_kern_mpool_of(const rt__conv_params *cv, const rt__conv_params *pool);
/* forward: y = each window's maximum; idx gets each window's first maximum
 * (scan order, as MaxPool2D) as its cell number i*KW+j, which the backward
 * pass routes the gradient through; under ReLU 255 where the maximum is not
 * above 0 (no gradient), so the backward pass then does not read y. A band
 * of windows at a time, sixteen channels at once. */
void rt_kern_mpool_fwd(const rt_kern_mpool *g, int64_t nb, const float *z, float *y, uint8_t *idx);
/* backward: dz (nb, OH, OW, OC) of the convolution from the pooled
 * gradient dy and idx: each window's first maximum gets dy * act'(y), y
 * the pooled output (act(z) at the argmax; NULL without an activation),
 * every other cell 0; db (or NULL) += the nonzeros. Nothing of the
 * convolution is recomputed. tmp: OC floats. */
void rt_kern_mpool_bwd(const rt_kern_mpool *g, int64_t nb, const float *dy, const float *y,
                       const uint8_t *idx, float *dz, float *tmp, float *db);
/* chunking, threads and scratch of a Conv2D (fused or not) */
int rt_kern_conv2d_prepare(rt__node *nd, int64_t B, rt__arena *A);
/* MaxPool2D/AvgPool2D and BatchNorm: the threads their scratch is for */
int rt_kern_pool_prepare(rt__node *nd, int64_t B, rt__arena *A);
int rt_kern_batchnorm_prepare(rt__node *nd, int64_t B, rt__arena *A);

/* Which implementation Conv2D's prepare picks: AUTO by shape (the rule in
 * rt_kern_conv.c, rt__conv_dnnl_dirs, from bench/conv's measurements:
 * oneDNN's primitives for some directions of some layers, im2col + GEMM
 * for the rest), or one forced (bench/conv compiles the same model each
 * way to compare them). Read at compile. */
enum { RT_KERN_CONV_AUTO = 0, RT_KERN_CONV_IM2COL, RT_KERN_CONV_DNNL };
/* directions of a Conv2D: forward, backward-data, backward-weights (and
 * bias). RT_KERN_CONV_DIRS | a mask forces exactly those directions onto
 * the primitives (the tests check the mixed backward passes). */
enum { RT_KERN_DN_F = 1, RT_KERN_DN_D = 2, RT_KERN_DN_W = 4, RT_KERN_CONV_DIRS = 8 };
extern int rt_kern_conv_impl;
/* floats of columns and output one im2col chunk holds (read at compile;
 * bench/conv --chunk varies it) */
extern int rt_kern_conv_chunk_floats;

/* oneDNN's primitives for cv at batch B, built once per process and shape;
 * NULL when oneDNN has no primitive for it (the caller uses im2col) */
rt_kern_dconv *rt_kern_dconv_prepare(const rt__conv_params *cv, int64_t B);
/* the scratch floats a call at batch B needs */
int64_t rt_kern_dconv_scratch(const rt_kern_dconv *d, const rt__conv_params *cv, int64_t B);
/* forward and backward through the primitives (d: the plan's, for batch
 * B). -1 when a smaller batch's primitives cannot run in the plan's
 * scratch: the caller runs im2col instead. */
int rt_kern_dconv_fwd(const rt__kargs *a, const rt_kern_dconv *d, int64_t B);
int rt_kern_dconv_bwd(const rt__kargs *a, const rt_kern_dconv *d, int64_t B);

/* Threads a kernel may use (OpenMP's team size, at most 64); scratch is
 * sized for this many at compile time. Inline: the im2col, grouped and
 * oneDNN paths and pooling all size by it. */
static inline int rt_kern_conv_threads(void)
{
    int nt = omp_get_max_threads();
    return nt < 1 ? 1 : nt > 64 ? 64 : nt;
}

/* Conv2D(x (B,H,W,C), W (KH,KW,C,OC), b (OC)?), its activation applied in
 * the output loop. Chunks are shared out among threads (each calls a
 * single-threaded GEMM). */
void rt_kern_conv2d_fwd(const rt__kargs *a);
void rt_kern_conv2d_bwd(const rt__kargs *a);

/* MaxPool2D: scratch 2*C floats per thread (running max and its window
 * index). Padding cells never win. */
void rt_kern_maxpool2d_fwd(const rt__kargs *a);
void rt_kern_maxpool2d_bwd(const rt__kargs *a);
/* AvgPool2D: the mean over the window's cells inside the input (padding
 * is not counted, as TensorFlow/Keras). */
void rt_kern_avgpool2d_fwd(const rt__kargs *a);
void rt_kern_avgpool2d_bwd(const rt__kargs *a);

/* GlobalAvgPool: (B,H,W,C) -> (B,C) */
void rt_kern_gap_fwd(const rt__kargs *a);
void rt_kern_gap_bwd(const rt__kargs *a);

/* BatchNorm(x (...,C), gamma, beta, moving_mean, moving_var) over the last
 * axis. Scratch: per-thread partial sums (2*C doubles each) and 6*C
 * doubles. */
void rt_kern_batchnorm_fwd(const rt__kargs *a);
void rt_kern_batchnorm_bwd(const rt__kargs *a);

/* Concat along one axis (rt__concat_params) */
void rt_kern_concat_fwd(const rt__kargs *a);
void rt_kern_concat_bwd(const rt__kargs *a);

#endif
