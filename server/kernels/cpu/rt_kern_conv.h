/*
 * rt_kern_conv.h - CPU kernels of the convolutional ops (issue 5), NHWC:
 * Conv2D, MaxPool2D/AvgPool2D, GlobalAvgPool, BatchNorm, Concat. The op
 * definitions (shape inference, attributes) are in server/engine/op_conv.c,
 * op_pool.c, op_batchnorm.c and op_concat.c; they fill the node's ia[]
 * slots named below, and the kernels read only those.
 *
 * Conv2D is im2col + GEMM, done in chunks of whole samples so the column
 * buffer stays in cache (a 1x1 stride-1 unpadded convolution skips im2col:
 * NHWC already is its column matrix). The bench in bench/conv measured this
 * against oneDNN's convolution primitive for the reference shapes.
 */
#ifndef RTRAIN_KERN_CONV_H
#define RTRAIN_KERN_CONV_H

#include "rt_engine_impl.h"

/* ia[] layout shared by Conv2D and the 2-D pools */
enum {
    RT_CV_H = 0, RT_CV_W, RT_CV_C,     /* input per sample */
    RT_CV_OH, RT_CV_OW, RT_CV_OC,      /* output per sample */
    RT_CV_KH, RT_CV_KW,                /* kernel / pool window */
    RT_CV_SH, RT_CV_SW,                /* strides */
    RT_CV_DH, RT_CV_DW,                /* dilations (1 for pools) */
    RT_CV_PT, RT_CV_PL,                /* padding before, top and left */
    RT_CV_CHUNK,                       /* Conv2D: samples per im2col chunk */
    RT_CV_DIRECT,                      /* Conv2D: 1x1, stride 1, no pad */
    RT_CV_BIAS,                        /* Conv2D: has a bias input */
    RT_CV_NT,                          /* threads the scratch is sized for */
    RT_CV_TSTRIDE,                     /* Conv2D: scratch floats per thread */
    RT_CV_POOL,                        /* Conv2D: fused max pool window (0: none) */
    RT_CV_POOLW,
    RT_CV_PH, RT_CV_PW,                /* Conv2D: pooled output per sample */
};

/* Fuse a following MaxPool2D into Conv2D (called by the compiler's fusion
 * pass when the convolution's only reader is the pool): non-overlapping
 * windows (stride = window, 'valid'). The pooled result becomes conv's
 * output; the pre-pool tensor only ever exists one chunk at a time in
 * scratch, and the backward pass recomputes it per chunk instead of
 * reading a stored copy (a 3x3x3x64 conv at batch 256 computes 0.4 GFLOP
 * again to avoid writing and reading 4 x 59 MB). Returns 1 if fused. */
int rt_kern_conv2d_fuse_maxpool(rt__node *conv, const rt__node *pool);

/* Threads a kernel may use (OpenMP's team size, at most 64); scratch is
 * sized for this many at compile time. */
int rt_kern_conv_threads(void);

/* Conv2D(x (B,H,W,C), W (KH,KW,C,OC), b (OC)?), nd->act fused. Chunks
 * are shared out among threads (each calls a single-threaded GEMM).
 * Scratch per thread (RT_CV_TSTRIDE floats): the column chunk (rows x K),
 * dz (rows x OC), and partial dW (K x OC) and db (OC). */
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

/* GlobalAvgPool: ia[0] = H*W, ia[1] = C. (B,H,W,C) -> (B,C) */
void rt_kern_gap_fwd(const rt__kargs *a);
void rt_kern_gap_bwd(const rt__kargs *a);

/* BatchNorm(x (...,C), gamma, beta, moving_mean, moving_var) over the last
 * axis: ia[0] = C, ia[1] = frozen (always inference mode); fa[0] =
 * momentum, fa[1] = epsilon. Scratch: per-thread partial sums (2*C
 * doubles each) and 6*C doubles. */
enum { RT_BN_C = 0, RT_BN_FROZEN, RT_BN_NT };
void rt_kern_batchnorm_fwd(const rt__kargs *a);
void rt_kern_batchnorm_bwd(const rt__kargs *a);

/* Concat: ia[0] = inputs k, ia[1] = outer rows per sample (product of the
 * dims before the axis), ia[2] = output inner size, ia[3 + i] = input i's
 * inner size (its axis dim times the dims after the axis). */
void rt_kern_concat_fwd(const rt__kargs *a);
void rt_kern_concat_bwd(const rt__kargs *a);

#endif
