/* rt_kern_loss_row.h - one row's labels and accuracy, shared by the Keras
 * losses (rt_kern_loss.c) and PyTorch's (rt_kern_loss_torch.c), which
 * count accuracy the same way; inline, the loss loops call them per row. */
#ifndef RTRAIN_KERN_LOSS_ROW_H
#define RTRAIN_KERN_LOSS_ROW_H

#include "cpu/rt_kern_math.h"
#include "cpu/rt_kern_cpu.h"

static inline float rt__lab(const rt__lossinfo *L, const void *lab, int64_t i)
{
    return L->lab_dt == RT_I32 ? (float)((const int32_t *)lab)[i] : ((const float *)lab)[i];
}

static inline int64_t rt__lab_class(const rt__lossinfo *L, const void *lab, int64_t i)
{
    int64_t c = L->lab_dt == RT_I32 ? ((const int32_t *)lab)[i] : (int64_t)((const float *)lab)[i];
    /* rt_exec_check_data rejected out-of-range labels; never index out */
    if (c < 0)
        c = 0;
    if (c >= L->classes)
        c = L->classes - 1;
    return c;
}

static inline int64_t rt__argmax(const float *x, int64_t C)
{
    int64_t b = 0;
    for (int64_t j = 1; j < C; j++)
        if (x[j] > x[b])
            b = j;
    return b;
}

/* the argmax of softmax(z) as the Softmax kernel rounds it: Keras takes
 * the argmax of the probabilities, and logits a rounding apart can give
 * equal ones, of which the first counts */
static inline int64_t rt__argmax_softmax(const float *z, int64_t C)
{
    float m = z[0], s = 0.0f;
    for (int64_t j = 1; j < C; j++)
        m = z[j] > m ? z[j] : m;
    for (int64_t j = 0; j < C; j++)
        s += rt_kern_exp(z[j] - m);
    const float inv = 1.0f / s;
    int64_t b = 0;
    float pb = rt_kern_exp(z[0] - m) * inv;
    for (int64_t j = 1; j < C; j++) {
        const float p = rt_kern_exp(z[j] - m) * inv;
        if (p > pb)
            b = j, pb = p;
    }
    return b;
}

/* accuracy of one row, 0 or 1 */
static inline int rt__loss_row_acc(const rt__lossinfo *L, const float *z, const void *lab,
                                   int64_t lab_i)
{
    const int64_t C = L->classes;
    const int bc = L->lab_numel != L->out_numel;
    if (C == 1) {
        /* Keras' "accuracy" is binary for one output value, else
         * categorical whatever the loss (is_binary_or_sparse_categorical,
         * keras/src/trainers/compile_utils.py) */
        const float thr = L->from_logits ? 0.0f : 0.5f;
        return (z[0] > thr) == (rt__lab(L, lab, lab_i) > 0.5f);
    }
    int64_t a = L->softmax_fused ? rt__argmax_softmax(z, C) : rt__argmax(z, C);
    if (L->kind == RT_LOSS_SPARSE_CE || bc)
        return a == rt__lab_class(L, lab, lab_i);
    const float *y = (const float *)lab + lab_i;
    if (L->lab_dt == RT_I32) {
        const int32_t *yi = (const int32_t *)lab + lab_i;
        int64_t b = 0;
        for (int64_t j = 1; j < C; j++)
            if (yi[j] > yi[b])
                b = j;
        return a == b;
    }
    return a == rt__argmax(y, C);
}

#endif
