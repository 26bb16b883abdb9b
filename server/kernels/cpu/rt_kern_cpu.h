/*
 * rt_kern_cpu.h - the CPU backend's kernels. Each op's forward and backward
 * sit side by side in one file; every kernel has the signature
 * void (const rt__kargs *a) (see rt_engine_impl.h: outputs y/dx, inputs
 * x/dy, the node's parsed attributes in a->nd->ia/fa, the runtime batch in
 * a->r->n). Backward kernels overwrite dx[i], or add into it when bit i of
 * a->accum is set.
 */
#ifndef RTRAIN_KERN_CPU_H
#define RTRAIN_KERN_CPU_H

#include "rt_engine_impl.h"

/* Dense / MatMul: ia[0] = K (in features), ia[1] = N (out), nd->act fused. */
void rt_kern_dense_fwd(const rt__kargs *a);
void rt_kern_dense_bwd(const rt__kargs *a);

/* Add/Sub/Mul with numpy broadcasting; layout of ia in rt_kern_eltwise.c */
enum { RT_KERN_ADD = 0, RT_KERN_SUB, RT_KERN_MUL };
void rt_kern_bcast_setup(rt__node *nd, int op);
void rt_kern_add_fwd(const rt__kargs *a);
void rt_kern_add_bwd(const rt__kargs *a);
void rt_kern_sub_fwd(const rt__kargs *a);
void rt_kern_sub_bwd(const rt__kargs *a);
void rt_kern_mul_fwd(const rt__kargs *a);
void rt_kern_mul_bwd(const rt__kargs *a);

void rt_kern_relu_fwd(const rt__kargs *a);
void rt_kern_relu_bwd(const rt__kargs *a);
void rt_kern_sigmoid_fwd(const rt__kargs *a);
void rt_kern_sigmoid_bwd(const rt__kargs *a);
void rt_kern_tanh_fwd(const rt__kargs *a);
void rt_kern_tanh_bwd(const rt__kargs *a);

/* in-place activation on n floats, and dz = dy * act'(y) */
void rt_kern_act_fwd(int act, float *y, int64_t n);
void rt_kern_act_bwd(int act, float *dz, const float *dy, const float *y,
                     int64_t n);

void rt_kern_softmax_fwd(const rt__kargs *a);
void rt_kern_softmax_bwd(const rt__kargs *a);
void rt_kern_logsoftmax_fwd(const rt__kargs *a);
void rt_kern_logsoftmax_bwd(const rt__kargs *a);

/* Reshape, Flatten, Identity: a copy of the values; fa[0] unused */
void rt_kern_copy_fwd(const rt__kargs *a);
void rt_kern_copy_bwd(const rt__kargs *a);

/* Dropout: fa[0] = rate. Masks come from the counter RNG keyed by (seed,
 * node, step, element), so backward recomputes them instead of storing. */
void rt_kern_dropout_fwd(const rt__kargs *a);
void rt_kern_dropout_bwd(const rt__kargs *a);

#endif
