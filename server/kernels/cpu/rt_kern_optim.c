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
 *                 w -= m alpha / (sqrt(v) + eps),
 *                 alpha = lr sqrt(1-b2^t) / (1-b1^t)
 *                 as Keras (keras/src/optimizers/adam.py): eps is added to
 *                 sqrt(v), Kingma and Ba's "epsilon hat", not to
 *                 sqrt(v_hat) as torch.optim.Adam and tfjs do (eps 1e-7);
 *                 adam_eps_vhat: torch's, w -= lr/(1-b1^t) m / (sqrt(v_hat) + eps)
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
        for (int j = 0; j < 16; j++)
            acc[j] += g[i + j] * g[i + j];
    double s = 0;
    for (; i < count; i++)
        s += (double)g[i] * g[i];
    for (int j = 0; j < 16; j++)
        s += acc[j];
    double norm = sqrt(s);
    if (clip > 0 && norm > clip) {
        const float f = (float)(clip / norm);
        for (i = 0; i < count; i++)
            g[i] *= f;
    }
    return norm;
}

static void rt__opt_chunk(const rt_train_config *c, float lr, int64_t t, float *restrict w,
                          float *restrict g, float *restrict s1, float *restrict s2, int64_t count)
{
    if (c->l2_decay > 0) {
        const float wd = c->l2_decay;
        for (int64_t i = 0; i < count; i++)
            g[i] += wd * w[i];
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
            for (int64_t i = 0; i < count; i++)
                w[i] -= lr * g[i];
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
        const float alpha = (float)((double)lr * sqrt(bc2) / bc1);
        /* torch: the same with eps / sqrt(1-b2^t) in place of eps */
        const float eps_t = c->adam_eps_vhat ? (float)((double)eps * sqrt(bc2)) : eps;
        if (c->opt == RT_OPT_ADAMW && c->weight_decay > 0) {
            const float decay = (float)(1.0 - (double)lr * (double)c->weight_decay);
            for (int64_t i = 0; i < count; i++)
                w[i] *= decay;
        }
        for (int64_t i = 0; i < count; i++) {
            const float gi = g[i];
            const float m = s1[i] * b1 + gi * ob1;
            const float v = s2[i] * b2 + gi * gi * ob2;
            s1[i] = m;
            s2[i] = v;
            w[i] -= m * alpha / (sqrtf(v) + eps_t);
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
    /* keras/src/optimizers/adagrad.py: acc (from 0.1) += g^2,
     * w -= lr g / sqrt(acc + eps) */
    case RT_OPT_ADAGRAD: {
        const float eps = c->eps;
        for (int64_t i = 0; i < count; i++) {
            const float a = (t == 1 ? 0.1f : s1[i]) + g[i] * g[i];
            s1[i] = a;
            w[i] -= lr * g[i] / sqrtf(a + eps);
        }
        break;
    }
    /* adadelta.py: ag = rho ag + (1-rho) g^2; d = -sqrt(ad + eps) g /
     * sqrt(ag + eps); ad = rho ad + (1-rho) d^2; w += lr d */
    case RT_OPT_ADADELTA: {
        const float rho = c->rho, orho = 1.0f - rho, eps = c->eps;
        for (int64_t i = 0; i < count; i++) {
            const float ag = rho * s1[i] + orho * g[i] * g[i];
            const float d = -(sqrtf(s2[i] + eps) * g[i]) / sqrtf(ag + eps);
            s1[i] = ag;
            s2[i] = rho * s2[i] + orho * d * d;
            w[i] += lr * d;
        }
        break;
    }
    /* adamax.py: m += (g - m)(1-b1); u = max(b2 u, |g|);
     * w -= lr m / ((1 - b1^t)(u + eps)) */
    case RT_OPT_ADAMAX: {
        const float b1 = c->beta1, b2 = c->beta2, eps = c->eps;
        const float bc1 = (float)(1.0 - pow((double)b1, (double)t));
        for (int64_t i = 0; i < count; i++) {
            const float m = s1[i] + (g[i] - s1[i]) * (1.0f - b1);
            const float u = fmaxf(b2 * s2[i], fabsf(g[i]));
            s1[i] = m;
            s2[i] = u;
            w[i] -= lr * m / (bc1 * (u + eps));
        }
        break;
    }
    /* nadam.py: u_t = b1 (1 - 0.5 0.96^t), the product of u_1..u_t;
     * m_hat = u_{t+1} m / (1 - prod_{t+1}) + (1 - u_t) g / (1 - prod_t),
     * v_hat = v / (1 - b2^t), w -= lr m_hat / (sqrt(v_hat) + eps) */
    case RT_OPT_NADAM: {
        const float b1 = c->beta1, b2 = c->beta2, eps = c->eps;
        /* past k = 1000, 0.96^k < 1e-17: the factors are b1 */
        const int64_t kk = t < 1000 ? t : 1000;
        double prod = pow((double)b1, (double)(t - kk));
        for (int64_t k = 1; k <= kk; k++)
            prod *= (double)b1 * (1.0 - 0.5 * pow(0.96, (double)k));
        const double ut = (double)b1 * (1.0 - 0.5 * pow(0.96, (double)t));
        const double ut1 = (double)b1 * (1.0 - 0.5 * pow(0.96, (double)(t + 1)));
        const float cm = (float)(ut1 / (1.0 - prod * ut1)), cg = (float)((1.0 - ut) / (1.0 - prod));
        const float bc2 = (float)(1.0 - pow((double)b2, (double)t));
        for (int64_t i = 0; i < count; i++) {
            const float m = s1[i] + (g[i] - s1[i]) * (1.0f - b1);
            const float v = s2[i] + (g[i] * g[i] - s2[i]) * (1.0f - b2);
            s1[i] = m;
            s2[i] = v;
            w[i] -= (cm * m + cg * g[i]) * lr / (sqrtf(v / bc2) + eps);
        }
        break;
    }
    /* ftrl.py: n' = n + g^2 (n from initial_accumulator_value), z +=
     * g + 2 shrink w - (n'^-p - n^-p)/lr w, w = (clip(z, -l1, l1) - z) /
     * (n'^-p / lr + 2 (l2 + beta / (2 lr))), with p learning_rate_power */
    case RT_OPT_FTRL: {
        const float q = -c->ftrl_power, l1 = c->ftrl_l1, sh2 = 2.0f * c->ftrl_shrink;
        const float l2 = c->ftrl_l2 + c->ftrl_beta / (2.0f * lr), init = c->ftrl_init;
        const int root = q == 0.5f;
        for (int64_t i = 0; i < count; i++) {
            const float n = t == 1 ? init : s1[i], gi = g[i], wi = w[i];
            const float nn = n + gi * gi;
            const float pn = root ? sqrtf(nn) : powf(nn, q), po = root ? sqrtf(n) : powf(n, q);
            const float z = s2[i] + (gi + sh2 * wi) - (pn - po) / lr * wi;
            const float zc = z < -l1 ? -l1 : z > l1 ? l1 : z;
            w[i] = (zc - z) / (pn / lr + 2.0f * l2);
            s1[i] = nn;
            s2[i] = z;
        }
        break;
    }
    default: break;
    }
}

/* Large blocks are split in fixed chunks over the OpenMP threads oneDNN
 * already runs on (W-C's 670k parameters: Adam is memory-bound and was a
 * third of the non-GEMM time). Each element is updated by exactly one
 * thread with the same formula, so results do not depend on the split. */
#define RT__OPT_CHUNK 16384
void rt__opt_update(const rt_train_config *c, float lr, int64_t t, float *w, float *g, float *s1,
                    float *s2, int64_t count)
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
