/*
 * rt_kern_optim.c - the CPU backend's optimizers and gradient clipping
 * (the schedules are the engine's: server/engine/rt_optim.c).
 *
 * All trainable parameters live in one flat block (rt_plan.train_floats),
 * as do their gradients and optimizer states, so an update is one loop
 * that the compiler vectorises. Scalars (bias corrections, step sizes) are
 * computed in double and applied in float, the way PyTorch applies its
 * Python-float hyperparameters.
 *
 * Formulas:
 *   SGD (Keras)   v = momentum v - lr g;  w += v, or with nesterov
 *                 w += momentum v - lr g;  momentum 0: w -= lr g
 *   Adam          m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *                 w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
 *                 i.e. eps is added to sqrt(v_hat), as torch.optim.Adam
 *                 (the brief's reading of Keras; eps default 1e-7)
 *   AdamW         w *= 1 - lr wd, then Adam (decoupled decay, Keras/torch)
 *   RMSprop       v = rho v + (1-rho) g^2;  w -= lr g / sqrt(v + eps)
 *                 (Keras 3: eps inside the square root)
 *   l2_decay      torch.optim's weight_decay of SGD, Adam, RMSprop:
 *                 g += l2_decay w first
 *   SGD with dampening (torch.optim.SGD): buf = g at step 1, then
 *                 buf = momentum buf + (1-dampening) g; w -= lr buf, or
 *                 with nesterov w -= lr (g + momentum buf)
 */
#include <math.h>

#include "cpu/rt_kern_cpu.h"

double rt__clip_by_norm(float *restrict g, int64_t count, float clip)
{
    /* 16 partial sums in a fixed pattern: vectorised and deterministic */
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= count; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += g[i + j] * g[i + j];
    double s = 0;
    for (; i < count; i++) s += (double)g[i] * g[i];
    for (int j = 0; j < 16; j++) s += acc[j];
    double norm = sqrt(s);
    if (clip > 0 && norm > clip) {
        const float f = (float)(clip / norm);
        for (i = 0; i < count; i++) g[i] *= f;
    }
    return norm;
}

static void rt__opt_chunk(const rt_train_config *c, float lr, int64_t t,
                          float *restrict w, float *restrict g,
                          float *restrict s1, float *restrict s2,
                          int64_t count)
{
    if (c->l2_decay > 0) {
        const float wd = c->l2_decay;
        for (int64_t i = 0; i < count; i++) g[i] += wd * w[i];
    }
    switch (c->opt) {
    case RT_OPT_SGD: {
        const float mu = c->momentum;
        if (mu != 0.0f && c->dampening > 0) {
            const float od = 1.0f - c->dampening;
            for (int64_t i = 0; i < count; i++) {
                const float b = t == 1 ? g[i] : mu * s1[i] + od * g[i];
                s1[i] = b;
                w[i] -= lr * (c->nesterov ? g[i] + mu * b : b);
            }
        } else if (mu == 0.0f) {
            for (int64_t i = 0; i < count; i++) w[i] -= lr * g[i];
        } else if (c->nesterov) {
            for (int64_t i = 0; i < count; i++) {
                s1[i] = mu * s1[i] - lr * g[i];
                w[i] += mu * s1[i] - lr * g[i];
            }
        } else {
            for (int64_t i = 0; i < count; i++) {
                s1[i] = mu * s1[i] - lr * g[i];
                w[i] += s1[i];
            }
        }
        break;
    }
    case RT_OPT_ADAM:
    case RT_OPT_ADAMW: {
        const float b1 = c->beta1, b2 = c->beta2, eps = c->eps;
        const float ob1 = 1.0f - b1, ob2 = 1.0f - b2;
        const double bc1 = 1.0 - pow((double)b1, (double)t);
        const double bc2 = 1.0 - pow((double)b2, (double)t);
        const float step = (float)((double)lr / bc1);
        /* sqrt(v)/sqrt(1-b2^t) as a multiply: divisions bound this loop
         * (W-C: 670k parameters); within an ulp of torch's division */
        const float inv_bc2s = (float)(1.0 / sqrt(bc2));
        if (c->opt == RT_OPT_ADAMW && c->weight_decay > 0) {
            const float decay = (float)(1.0 - (double)lr * (double)c->weight_decay);
            for (int64_t i = 0; i < count; i++) w[i] *= decay;
        }
        for (int64_t i = 0; i < count; i++) {
            const float gi = g[i];
            const float m = s1[i] * b1 + gi * ob1;
            const float v = s2[i] * b2 + gi * gi * ob2;
            s1[i] = m;
            s2[i] = v;
            w[i] -= step * (m / (sqrtf(v) * inv_bc2s + eps));
        }
        break;
    }
    case RT_OPT_RMSPROP: {
        const float rho = c->rho, orho = 1.0f - rho, eps = c->eps;
        for (int64_t i = 0; i < count; i++) {
            const float v = rho * s1[i] + orho * g[i] * g[i];
            s1[i] = v;
            w[i] -= lr * g[i] / sqrtf(v + eps);
        }
        break;
    }
    }
}

/* Large blocks are split in fixed chunks over the OpenMP threads oneDNN
 * already runs on (W-C's 670k parameters: Adam is memory-bound and was a
 * third of the non-GEMM time). Each element is updated by exactly one
 * thread with the same formula, so results do not depend on the split. */
#define RT__OPT_CHUNK 16384
void rt__opt_update(const rt_train_config *c, float lr, int64_t t, float *w,
                    float *g, float *s1, float *s2, int64_t count)
{
    if (count < 4 * RT__OPT_CHUNK) {
        rt__opt_chunk(c, lr, t, w, g, s1, s2, count);
        return;
    }
    const int64_t nchunks = (count + RT__OPT_CHUNK - 1) / RT__OPT_CHUNK;
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < nchunks; k++) {
        const int64_t o = k * RT__OPT_CHUNK;
        const int64_t len = count - o < RT__OPT_CHUNK ? count - o : RT__OPT_CHUNK;
        rt__opt_chunk(c, lr, t, w + o, g + o, s1 + o, s2 + o, len);
    }
}
