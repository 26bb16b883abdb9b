/*
 * rt_loss.c - the losses' checks at compile, and the crossentropy fusion
 * target. Each backend computes them (server/kernels/cpu/rt_kern_loss.c,
 * server/kernels/ref); what they compute:
 *
 * Keras semantics: a per-row loss over the last axis (C classes), the mean
 * over the rows of a sample, then the mean over the batch. So
 * dy = d(per-row loss)/dy / (n * rows).
 *   sparse CE   labels one per row; from probabilities as Keras' TF backend:
 *               q = clip(p, 1e-7, 1-1e-7), loss = -log(q_l / sum q); but on
 *               a Softmax output the loss reads its logits (as Keras does;
 *               rt_compile.c sets from_logits and softmax_fused)
 *   CE          one-hot f32 labels; probabilities are normalised to sum 1,
 *               then clipped, loss = -sum y log q
 *   BCE         Keras 3 (keras/src/backend/tensorflow/nn.py): p clipped to
 *               [eps, 1-eps], -(y log p + (1-y) log(1-p)) (tf.keras 2 added
 *               eps inside both logs; tfjs agrees with Keras 3);
 *               from logits max(z,0) - z y + log1p(exp(-|z|))
 *   MSE, MAE    mean over the last axis of (p-y)^2, |p-y|
 *   logcosh     x = p - y, mean over the last axis of x + softplus(-2x) - log 2
 * Labels with one value per row (e.g. int labels (B,) against a (B,3)
 * output) are broadcast over the last axis, as Keras does after expanding
 * them to (B,1) (W-A's logcosh on int labels).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rt_engine_impl.h"

#define RT__EPS 1e-7f

/* The loss as a fusion target (rt_engine_impl.h): no graph op, no kernel */
const rt__op_def rt__op_crossentropy = {.name = "CrossEntropy"};

int rt__loss_check(const rt__lossinfo *L, const rt_train_config *cfg, char *err, size_t errlen)
{
    (void)cfg;
    if (RT_LOSS_IS_TORCH(L->kind))
        return rt__loss_torch_check(L, err, errlen);
    const long long C = (long long)L->classes, R = (long long)L->rows;
    switch (L->kind) {
    case RT_LOSS_SPARSE_CE:
        if (L->lab_numel != L->rows) {
            snprintf(err, errlen,
                     "sparse labels have %lld values per sample; the output "
                     "has %lld rows of %lld classes",
                     (long long)L->lab_numel, R, C);
            return RT_ESHAPE;
        }
        if (C < 2 && !L->from_logits) {
            snprintf(err, errlen, "sparse crossentropy needs >= 2 classes, output has %lld", C);
            return RT_ESHAPE;
        }
        return 0;
    case RT_LOSS_CE:
        if (L->lab_dt != RT_F32) {
            snprintf(err, errlen, "categorical crossentropy needs f32 one-hot labels");
            return RT_EDTYPE;
        }
        if (L->lab_numel != L->out_numel) {
            snprintf(err, errlen, "one-hot labels have %lld values per sample, output %lld",
                     (long long)L->lab_numel, (long long)L->out_numel);
            return RT_ESHAPE;
        }
        return 0;
    default:
        if (L->lab_numel != L->out_numel && L->lab_numel != L->rows) {
            snprintf(err, errlen,
                     "labels have %lld values per sample; output has %lld "
                     "(or %lld rows to broadcast over)",
                     (long long)L->lab_numel, (long long)L->out_numel, R);
            return RT_ESHAPE;
        }
        return 0;
    }
}
