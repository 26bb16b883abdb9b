/*
 * rt_kern_bf16.h - the CPU backend's mixed-bfloat16 kernels (Keras'
 * mixed_bfloat16): Dense, MatMul and Conv2D through oneDNN's bf16 matmul
 * and convolution primitives with float32 accumulation (rt_kern_bf16.c).
 * Weights stay float32 in the parameter block; each call rounds them to
 * bf16 (round to nearest even) into the node's workspace once per step in
 * the forward call, which the backward call reuses (a Dense or MatMul
 * whose backward computes no dx: into the forward's scratch only). An
 * input stored bf16 in the arena (rt_kern_bf16act.c) is read as it is; a
 * float32 one is rounded into the workspace too. An output stored bf16 is written so by
 * the primitive itself (dst bf16, from the float32 accumulator).
 */
#ifndef RTRAIN_KERN_BF16_H
#define RTRAIN_KERN_BF16_H

#include <stdint.h>
#include <string.h>

#include "rt_engine_impl.h"

/* 0 when oneDNN may run bf16 instructions on this CPU (its effective ISA,
 * which ONEDNN_MAX_CPU_ISA caps, includes AVX512_CORE_BF16), else
 * RT_ESTATE with a message saying so */
int rt_kern_bf16_supported(char *err, size_t errlen);
/* the bf16 entry for node nd (absorbing a reader of op fused), or NULL:
 * its op has none, or a Conv2D has fewer input channels than
 * rt_kern_bf16_conv_min_c. Grouped and depthwise Conv2D run oneDNN's bf16
 * grouped primitives (unfused). */
const rt__kernel *rt_kern_bf16_kernel(const rt__node *nd, const rt__op_def *fused);
/* the float32 entry of the CPU table (rt_kern_table.c): a bf16 prepare
 * hands a node it has no primitive for back to it */
const rt__kernel *rt_kern_cpu_f32_kernel(const rt__op_def *op, const rt__op_def *fused);

/* Conv2D with fewer input channels than this runs float32, and the
 * compile report says so (read at compile; bench/bf16 --conv-min-c varies
 * it). Default 1: every Conv2D in bf16, as Keras' mixed_bfloat16 runs it.
 * 4 would run an RGB or grey first layer (27 or 9 products a sum) float32:
 * oneDNN's bf16 kernels for 3 channels ran W-B's fused Conv2D + MaxPool2D
 * stem at half the float32 kernel's speed (its backward 2.2x, one thread),
 * but ResNet-18's unfused stem gave no clear gain (bench/bf16/README.md). */
extern int rt_kern_bf16_conv_min_c;

/* Conv2D + MaxPool2D (ungrouped, Relu or no activation, pool windows
 * apart) with fewer products a sum (KH*KW*C) than this multiplies its
 * bf16 values on the float32 fused kernel (x, W and dz rounded to bf16
 * and widened: the bf16 op's numbers, float32 instructions), where
 * oneDNN's bf16 kernels are slower (rt_kern_bf16.c). Default 32 (an RGB
 * 3x3 layer has 27); 0 turns it off (bench/bf16 --f32-k). Read at
 * compile. */
extern int rt_kern_bf16_f32_k;

/* That path runs a batch in chunks of about equal size, a multiple of 16
 * samples, as few as keep the floats of a chunk's x and y widened to
 * float32 (y twice where the backward reads it) at this many (2^20, 4 MiB)
 * before the rounding up to 16, so that its scratch stays small next to
 * the bf16 activations. Read at compile; the tests lower it to run several
 * chunks and a partial one. */
extern int rt_kern_bf16_f32_chunk;

/* Conv2D + MaxPool2D in bf16 runs its forward in chunks of samples whose
 * pre-pool values (float32) number at most this (at least one sample):
 * 2^18, 1 MiB, one core's L2 with the primitive's scratchpad. Read at
 * compile; the tests make it small to run many chunks and a partial one. */
extern int rt_kern_bf16_pool_chunk;

/* Conv2D (ungrouped) with an output image of at most rt_kern_bf16_col_px
 * pixels (64; at two threads as at one, larger images ran slower this
 * way: bench/bf16/README.md, stop 14), at least
 * rt_kern_bf16_col_oc output channels and 4x that many products a sum
 * runs its backward-weights as bf16 matmuls of the input's im2col with dz
 * (without the window rows or columns that only ever read padding: a 1x7
 * kernel on a 3x3 image keeps 5 columns, a 3x3 on a 1x1 its centre),
 * on chunks of at least rt_kern_bf16_col_rows output pixels (256 and
 * 1024: where it ran faster than oneDNN's bf16 backward-weights). Read at
 * compile (the primitive table's key holds the chunk, 0 for none); the
 * tests lower them to run small layers and a partial last chunk this way,
 * bench/bf16 --col-oc, --col-px and --col-rows move them to compare. */
extern int rt_kern_bf16_col_oc;
extern int rt_kern_bf16_col_rows;
extern int rt_kern_bf16_col_px;

/* A Conv2D's forward rounds its float32 weights to bf16 in Keras' layout,
 * then reorders those into the primitive's layout (1, the default), or
 * runs oneDNN's one float32 -> bf16 reorder (0). Read at compile;
 * bench/bf16 --w-round 0 compares. */
extern int rt_kern_bf16_w_round;

/* bf16(f), round to nearest even (a NaN stays a quiet NaN), and its
 * widening back to float32 (exact): one value */
static inline uint16_t rt_kern_bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float rt_kern_bf16_widen(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* dst[i] = bf16(src[i]), round to nearest even (NaN stays NaN) */
void rt_kern_to_bf16(uint16_t *dst, const float *src, int64_t n);
/* the same on the calling thread (a chunk of a parallel loop) */
void rt_kern_to_bf16_serial(uint16_t *dst, const float *src, int64_t n);
/* dst[i] = src[i] widened to float32 (exact), on the calling thread */
void rt_kern_from_bf16_serial(float *dst, const uint16_t *src, int64_t n);
/* the same, over the threads where n is large */
void rt_kern_from_bf16(float *dst, const uint16_t *src, int64_t n);

/* Values i0 .. i0+m of an activation as float32: base itself (float32)
 * or, stored bf16 (bf), widened into tmp */
static inline const float *rt_kern_bf16_ld(const void *base, int bf, int64_t i0, int64_t m,
                                           float *tmp)
{
    if (!bf)
        return (const float *)base + i0;
    rt_kern_from_bf16_serial(tmp, (const uint16_t *)base + i0, m);
    return tmp;
}

/* Kernels of the ops stored bf16 in the arena (node->bf16_in/bf16_out;
 * rt_kern_bf16act.c): they compute in float32 on chunks widened from and
 * rounded back to bf16, and read or write float32 where that side is
 * float32. Gradients are float32. */
void rt_kern_bf16_relu_fwd(const rt__kargs *a);
void rt_kern_bf16_relu_bwd(const rt__kargs *a);
void rt_kern_bf16_unary_fwd(const rt__kargs *a);
void rt_kern_bf16_unary_bwd(const rt__kargs *a);
/* Dropout, SpatialDropout, GaussianNoise, GaussianDropout (their float32
 * backward reads dy only) */
void rt_kern_bf16_dropout_fwd(const rt__kargs *a);
int rt_kern_bf16_dropout_kind(const rt__op_def *op);
/* Pad on values stored bf16 (rt_kern_shape.c): 2-byte copies where x and
 * y are both bf16 (widened or rounded where one side is float32), the
 * fill value rounded to bf16, the samples over the threads where large;
 * its backward (float32 dy into float32 dx) is the float32 kernel's loop
 * over the threads. MaxPool2D, AvgPool2D and GlobalAvgPool read and write
 * bf16 in their own kernels (rt_kern_pool.c, by node->bf16_in /
 * bf16_out). */
void rt_kern_pad_bf16_fwd(const rt__kargs *a);
void rt_kern_pad_bf16_bwd(const rt__kargs *a);
/* Concat, Flatten and Reshape on bf16 values, directly (2-byte copies) */
void rt_kern_bf16_concat_fwd(const rt__kargs *a);
void rt_kern_bf16_copy_fwd(const rt__kargs *a);
/* Add, Sub, Mul, Div, Max, Min: of two tensors of the output's shape on
 * widened chunks; broadcasting, the samples over the threads, each input
 * widened and the result rounded as the loop reads and writes them (Add's
 * and Sub's backward, which reads no x, their float32 kernels) */
void rt_kern_bf16_bin_fwd(const rt__kargs *a);
void rt_kern_bf16_bin_bwd(const rt__kargs *a);
/* can_fuse of BatchNorm + Clip / KerasRelu (rt_kern_norm.c): a clip to
 * [lo, hi], lo < hi, both bf16 values or infinite (Clip(min, max); Keras'
 * ReLU(max_value) with no negative_slope and threshold 0: [0, max_value]),
 * whose gradient the fused backward reads off the output */
int rt_kern_bn_can_fuse_clip(const rt__node *nd, const rt__node *reader);
/* what rt__backend.bf16_io answers for a bf16 node of the CPU backend */
unsigned rt_kern_bf16_io(const rt__node *nd);
/* 0: every activation stored float32 (each bf16 product rounds a copy of
 * its input, as before bf16 storage); read at compile. Default 1; the
 * tests and bench/bf16 --no-store compare. */
extern int rt_kern_bf16_act_store;

#endif
